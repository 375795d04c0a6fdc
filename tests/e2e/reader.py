#!/usr/bin/python3
"""sinkwatch.reader (issue 29): a run read from Python gives the numbers of
`sinkwatch report`, on random runs streamed through a real daemon.

Each schedule (seeded: SW_E2E_SEED, SW_E2E_N, default 0 and 10) is one run
of 2 layers x 4 heads, a fixed probe (the paired split), from 1 or 2
senders (2: each sends its 2 heads of every layer as a part), its steps in
step order or shuffled (a checkpoint sweep), parts left out (missing
layers and heads), heads with no valid row, incarnations above 2^53, and
with probability 0.6 a second incarnation that resumes from an earlier
step (superseding rows) and goes past the first's last step. Then:

- the view (run.steps, run.rows, run.inc) is the view numpy builds from
  /step, /inc and the resume records (report.py's view_of), and every
  series over the view is the stored rows at the view's rows, as stored
  too (view=False);
- run.report() equals `sinkwatch report FILE --format json` with the same
  options (random ranges: --from/--to/--last, per head, series) within
  1e-12, key for key, and both equal report.py's numpy reference of the
  view and the split (METRICS.md §3, paired) over that range;
- the refusals are the command line's messages;
- open_runs(DIR).report() equals `sinkwatch report DIR --format json`, and
  its DataFrame holds the table's numbers; to_xarray() has the dims;
- refresh() on a file a daemon is writing sees the rows committed since
  (LAYOUT.md's reader rules), and the report then equals the command line's.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd SW_SRCDIR=. SINKWATCH_LIB=report/.libs \\
        /usr/bin/python3 tests/e2e/reader.py
"""
import json
import os
import random
import subprocess
import sys
import time

import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, Sender,  # noqa: E402
                       child_env, free_port, preload_asan, random_probs)

if not SINKWATCHD or not SINKWATCH:
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)
SINKWATCH = os.path.abspath(SINKWATCH)
if not os.environ.get("SINKWATCH_LIB"):
    # the library of this build: beside the tool (report/.libs of the build tree)
    lib = os.path.join(os.path.dirname(SINKWATCH), "report", ".libs")
    if os.path.isdir(lib):
        os.environ["SINKWATCH_LIB"] = lib

import h5py  # noqa: E402

import report as rref  # noqa: E402  (report.py: the numpy reference)
import sinkwatch  # noqa: E402

L, H, ROWS, KEYS = 2, 4, 3, 8
SEED0 = int(os.environ.get("SW_E2E_SEED", "0"))
N = int(os.environ.get("SW_E2E_N", "10"))
R = Results()
DAEMON = Daemon(extra=["--step-timeout-ms", "30000"])
SEEN = {"runs": 0, "shuffled": 0, "two_senders": 0, "resumed": 0, "missing_parts": 0,
        "nan_heads": 0, "big_inc": 0, "ranges": 0, "incomplete_steps": 0, "superseded": 0}


def cli_json(args):
    p = subprocess.run([SINKWATCH, "report"] + [str(a) for a in args] + ["--format", "json"],
                       capture_output=True, text=True, timeout=60, env=child_env())
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else None), p.stderr


def end(snd, inc, rank, senders):
    h = {"v": 2, "type": "end", "run": snd.run, "seq": snd.seq, "time": time.time(),
         "inc": inc, "rank": rank, "senders": senders}
    snd.send_frames([msgpack.packb(h)])


def incarnation(rng, nrng, run, inc, steps, S, resume=None):
    """One incarnation: S senders (parts of H // S heads), steps in the
    order given, some parts left out and some heads NaN; then the ends."""
    hp = H // S
    snd = [Sender(DAEMON.listen, run, L, H, model="rd", params=1000, fixed=True)
           for _ in range(S)]
    for st in steps:
        msgs = [(k, lay) for k in range(S) for lay in range(L)]
        rng.shuffle(msgs)
        for k, lay in msgs:
            if rng.random() < 0.08:
                SEEN["missing_parts"] += 1
                snd[k].seq += 1      # dropped in the client's queue: counted lost
                continue
            x = random_probs(nrng, hp, ROWS, KEYS, sink_strength=1.0 + 0.02 * st)
            if rng.random() < 0.05:
                x[rng.randrange(hp)] = np.nan
                SEEN["nan_heads"] += 1
            over = {"inc": inc, "v": 2, "rank": k, "senders": S, "head0": hp * k, "rows": ROWS}
            if resume is not None:
                over["resume"] = resume
            snd[k].snapshot(st, lay, x, **over)
    for k in range(S):
        end(snd[k], inc, k, S)
    return snd


def make_run(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    run = "rd-%d" % seed
    S = rng.choice([1, 1, 2])
    T = rng.randint(3, 8)
    steps = [10 * i for i in range(T)]
    if rng.random() < 0.5:
        rng.shuffle(steps)
        SEEN["shuffled"] += 1
    big = rng.random() < 0.3
    inc1 = (1 << 60) + rng.getrandbits(40) if big else 1 + seed
    SEEN["big_inc"] += big
    SEEN["two_senders"] += S == 2
    snd = incarnation(rng, nrng, run, inc1, steps, S)
    path = DAEMON.wait_ended(run, timeout=30)
    if rng.random() < 0.6:
        # a restart from a checkpoint: an earlier step, on past the first's end
        rfrom = rng.choice(sorted(steps)[:-1])
        more = list(range(rfrom + 10, 10 * (T + rng.randint(0, 3)), 10))
        snd += incarnation(rng, nrng, run, inc1 + 1, more, S, resume=rfrom)
        SEEN["resumed"] += 1
        deadline = time.time() + 30
        while True:     # the second end mark
            try:
                with h5py.File(path, "r", libver="latest", swmr=True) as f:
                    if f["ended"].shape[0] >= 2 and f["ended"][-1] == 1:
                        break
            except (OSError, KeyError):
                pass    # the writer mid-flush (the file shorter than its superblock says)
            assert time.time() < deadline, "run %s: no second end; log:\n%s" % (
                run, DAEMON.read_log())
            time.sleep(0.05)
        DAEMON.wait_ended(run)
    for s in snd:
        s.close()
    SEEN["runs"] += 1
    return path


def check_view(run, path):
    with h5py.File(path, "r") as f:
        steps, rows = rref.view_of(f)
        assert run.steps.tolist() == steps, (run.steps, steps)
        assert run.rows.tolist() == rows, (run.rows, rows)
        T = f["step"].shape[0]
        assert run.inc.tolist() == [int(x) for x in f["inc"][:T][rows]]
        assert run.info["rows_stored"] == T and run.info["steps_stored"] == len(steps)
        assert run.info["rows_superseded"] == T - len(steps)
        SEEN["superseded"] += T - len(steps)
        assert run.field("inc", view=False).tolist() == [int(x) for x in f["inc"][:T]]
        names = run.fields
        for name in ("sink_mass", "entropy", "content_entropy", "rows", "missing", "missing_rank",
                     "row_sink_mass", "row_status", "dH_sink", "drift_content", "flip_rate",
                     "js_keep", "prev_row", "lost", "step", "time"):
            assert name in names, (name, names)
            want = f[name][:T]
            got = run[name]
            assert got.shape == (len(steps),) + want.shape[1:], (name, got.shape, want.shape)
            assert np.array_equal(got, want[rows], equal_nan=True), name
            assert np.array_equal(run.field(name, view=False), want, equal_nan=True), name
            if want.dtype.kind in "iu":
                assert got.dtype.kind == want.dtype.kind, (name, got.dtype)
        assert run["sink_mass"].shape == (len(steps), L, H)
        SEEN["incomplete_steps"] += int((np.asarray(f["incomplete"][:T]) != 0).sum())
    return steps


def check_reports(rng, run, path, steps):
    """Random ranges: the reader against the command line and numpy."""
    cases = [({}, None, None), ({"per_head": True, "series": True}, None, None)]
    for _ in range(3):
        a, b = sorted(rng.sample(range(len(steps)), 2))
        kind = rng.randrange(3)
        if kind == 0:
            cases.append(({"from_": steps[a], "to": steps[b], "per_head": True}, a, b))
        elif kind == 1:
            cases.append(({"last": b - a + 1, "to": steps[b], "per_head": True}, a, b))
        else:
            cases.append(({"from_": steps[a], "per_head": True, "series": True}, a,
                          len(steps) - 1))
    for kw, a, b in cases:
        got = run.report(**kw)
        args = [path]
        for k, opt in (("from_", "--from"), ("to", "--to"), ("last", "--last")):
            if k in kw:
                args += [opt, kw[k]]
        args += ["--per-head"] if kw.get("per_head") else []
        args += ["--series"] if kw.get("series") else []
        rc, want, err = cli_json(args)
        assert rc == 0, (args, err)
        rref.same(got, want, "reader vs cli %r" % (args,), rel=0, abs_=1e-12,
                  keys_of_want=False)
        if len(steps) >= 2:
            ref = rref.reference(path, steps[a] if a is not None else None,
                                 steps[b] if b is not None else None)
            if not kw.get("per_head"):
                ref.pop("per_head")
                ref.pop("ranking")
            if not kw.get("series"):
                ref.pop("series")
            rref.same(got, ref, "reader vs numpy %r" % (args,))
        SEEN["ranges"] += 1


def check_refusals(run, path, steps):
    missing = steps[-1] + 5
    for kw, args in (({"from_": missing}, ["--from", missing]),
                     ({"last": 0}, ["--last", 0]),
                     ({"from_": steps[0], "last": 2}, ["--from", steps[0], "--last", 2]),
                     ({"to": steps[0], "from_": steps[-1]}, ["--from", steps[-1], "--to", steps[0]])):
        try:
            run.report(**kw)
            raise AssertionError("%r: no refusal" % (kw,))
        except sinkwatch.ReaderError as e:
            rc, _, err = cli_json([path] + args)
            assert rc == 2, (args, rc)
            assert err.strip() == "sinkwatch report: %s" % e, (err, str(e))


def t_schedules():
    data = DAEMON.data
    for i in range(N):
        seed = SEED0 + i
        rng = random.Random(seed * 7 + 1)
        path = make_run(seed)
        with sinkwatch.open_run(path) as run:
            steps = check_view(run, path)
            if len(steps) < 2:
                continue
            check_reports(rng, run, path, steps)
            check_refusals(run, path, steps)
    # several runs: the reader's table is the command line's
    runs = sinkwatch.open_runs(data)
    got = runs.report(per_layer=True)
    rc, want, err = cli_json([data, "--per-layer"])
    assert rc == 0, err
    rref.same(got, want, "runs", rel=0, abs_=1e-12, keys_of_want=False)
    assert len(got["runs"]) == N - len(got["excluded"]) and got["runs"], got["excluded"]
    # --group-by and --exclude, as the command line takes them
    got2 = runs.report(group_by=["model", "run"], exclude=["rd-1", "rd-2*"])
    rc, want2, err = cli_json([data, "--group-by", "model,run", "--exclude", "rd-1",
                               "--exclude", "rd-2*"])
    assert rc == 0, err
    rref.same(got2, want2, "runs grouped", rel=0, abs_=1e-12, keys_of_want=False)
    assert any("excluded" in e["reason"] for e in got2["excluded"]), got2["excluded"]
    try:
        runs.report(group_by="model,nope")
        raise AssertionError("--group-by nope accepted")
    except sinkwatch.ReaderError as e:
        rc, _, err = cli_json([data, "--group-by", "model,nope"])
        assert rc == 2 and err.strip() == "sinkwatch report: %s" % e, (err, str(e))
    df = runs.to_dataframe(group_by="model")
    groups = runs.report(group_by="model")["groups"]
    for k, g in enumerate(groups):
        assert sorted(df[df["group"] == k]["file"]) == sorted(g["files"]), (k, g, df)
    assert groups and len(groups[0]["files"]) >= 2, groups
    df = runs.to_dataframe(group_by="model,run")
    assert df.attrs["group_by"] == ["model", "run"], df.attrs
    df = runs.to_dataframe(exclude=["rd-1"])
    assert any("excluded" in r for r in df.attrs["not_compared"].values()), df.attrs
    df = runs.to_dataframe()
    assert list(df["file"]) == [r["file"] for r in want["runs"]]
    assert np.allclose(df["path_sink"], [r["model_attribution"]["path"]["sink"] or np.nan
                                         for r in want["runs"]], rtol=0, atol=1e-15,
                       equal_nan=True)
    print("schedules: %s" % SEEN)
    if N >= 10 and SEED0 == 0:     # the default schedules cover every case
        assert SEEN["shuffled"] and SEEN["two_senders"] and SEEN["resumed"] and \
            SEEN["missing_parts"] and SEEN["superseded"] and SEEN["incomplete_steps"], SEEN


def t_xarray():
    try:
        import xarray  # noqa: F401
    except ImportError:
        print("no xarray: to_xarray not checked")
        return
    path = make_run(SEED0 + 1000)
    with sinkwatch.open_run(path) as run:
        ds = run.to_xarray()
        assert ds["sink_mass"].dims == ("step", "layer", "head")
        assert ds["row_sink_mass"].dims == ("step", "layer", "head", "row")
        assert ds["js_keep"].dims == ("step", "layer", "head", "head2")
        assert ds["step"].values.tolist() == run.steps.tolist()
        assert ds["inc"].values.tolist() == run.inc.tolist()
        assert np.array_equal(ds["entropy"].values, run["entropy"], equal_nan=True)
        assert ds.attrs["run"] == run.info["run"]


def t_refresh():
    """A run a daemon is writing: refresh() sees what it committed since."""
    run_id = "rd-live"
    snd = Sender(DAEMON.listen, run_id, L, H, model="rd", params=1000, fixed=True)
    nrng = np.random.default_rng(5)

    def send(st):
        for lay in range(L):
            snd.snapshot(st, lay, random_probs(nrng, H, ROWS, KEYS), inc=77)

    path = DAEMON.run_file(run_id)
    for st in (0, 10, 20):
        send(st)
    send(30)        # step 20 is flushed once 30 comes (or at the end)
    deadline = time.time() + 20
    run = None
    while run is None or len(run.steps) < 3:
        assert time.time() < deadline, "no 3 rows committed"
        if run is None and os.path.exists(path):
            try:
                run = sinkwatch.open_run(path)
            except sinkwatch.ReaderError:
                run = None
        elif run is not None:
            run.refresh()
        time.sleep(0.05)
    with run:
        n0 = len(run.steps)
        assert not run.info["ended"]
        for st in (40, 50):
            send(st)
        snd.end()
        added = False
        while True:
            added |= run.refresh()
            if run.info["ended"] and len(run.steps) == 6:
                break
            assert time.time() < deadline + 10, (run.steps, run.info["ended"])
            time.sleep(0.05)
        assert added and n0 < 6
        assert run.steps.tolist() == [0, 10, 20, 30, 40, 50]
        assert run["entropy"].shape == (6, L, H)
        got = run.report(per_head=True)
    snd.close()
    DAEMON.wait_ended(run_id)
    rc, want, err = cli_json([path, "--per-head"])
    assert rc == 0, err
    rref.same(got, want, "refreshed", rel=0, abs_=1e-12, keys_of_want=False)


def refused(fn, *want):
    try:
        fn()
    except sinkwatch.ReaderError as e:
        for w in want:
            assert w in str(e), (w, str(e))
        return e
    raise AssertionError("no ReaderError (want %r)" % (want,))


def t_library():
    lib = sinkwatch.reader.library()
    assert lib.swr_version().decode() == sinkwatch.__version__
    refused(lambda: sinkwatch.open_run(os.path.join(DAEMON.tmp, "nothing.h5")), "nothing.h5")
    txt = os.path.join(DAEMON.tmp, "text.h5")
    with open(txt, "w") as f:
        f.write("not hdf5\n")
    refused(lambda: sinkwatch.open_run(txt), "not a run file (not an HDF5 file)")
    refused(lambda: sinkwatch.open_run(DAEMON.tmp), "is a directory")
    # a directory with no run: the command line's refusal, the document kept
    e = refused(lambda: sinkwatch.open_runs([os.path.join(DAEMON.tmp, "nodir")]).report(),
                "no run to compare (1 file not compared, 0 skipped)", "nodir")
    assert e.report is not None and e.report["runs"] == [], e.report
    # the library not where SINKWATCH_LIB says: the message names it and what was tried
    code = ("import sinkwatch\ntry:\n    sinkwatch.reader.library()\nexcept sinkwatch.ReaderError "
            "as e:\n    print(e)\n")
    for env, want in (({"SINKWATCH_LIB": "/nonexistent/lib.so"},
                       ["SINKWATCH_LIB=/nonexistent/lib.so: not the library",
                        "/nonexistent/lib.so (no such file)"]),
                      ({"SINKWATCH": "/nonexistent/sinkwatch", "PATH": "/usr/bin:/bin"},
                       ["was not found", "SINKWATCH", "Looked in:", "/usr/local/lib/" +
                        sinkwatch.reader.SONAME])):
        e2 = {k: v for k, v in os.environ.items() if k not in ("SINKWATCH_LIB", "SINKWATCH")}
        e2.update(env, PYTHONPATH="/nonexistent")    # the package copied where nothing is above it
        tmp = os.path.join(DAEMON.tmp, "pkgcopy")
        if not os.path.isdir(tmp):
            import shutil
            shutil.copytree(os.path.dirname(sinkwatch.__file__), os.path.join(tmp, "sinkwatch"))
        e2["PYTHONPATH"] = tmp
        p = subprocess.run([sys.executable, "-c", code], env=dict(e2, **py_env()), cwd=tmp,
                           capture_output=True, text=True, timeout=60)
        for w in want:
            assert w in p.stdout, (w, p.stdout, p.stderr[-2000:])


def t_closed():
    """A closed Run refuses, it does not crash the interpreter."""
    path = make_run(SEED0 + 2000)
    with sinkwatch.open_run(path) as run:
        ent = run["entropy"]
    assert ent.shape[0] == len(run.steps)
    for fn in (run.report, run.refresh, run.series, lambda: run.field("dH", view=False),
               lambda: run["sink_mass"], run.to_xarray):
        refused(fn, "the Run is closed")
    assert run["entropy"] is ent        # read before the close: kept
    run.close()


def py_env():
    """What an interpreter that loads the build's library needs: in an ASan
    build, the runtime first (preload_asan's setting)."""
    return {k: os.environ[k] for k in ("LD_PRELOAD", "ASAN_OPTIONS") if k in os.environ}


def readme_example():
    """The README's notebook example: the indented block of "Reading runs
    from Python"."""
    with open(os.path.join(SRCDIR, "README.md")) as f:
        text = f.read()
    sec = text[text.index("## Reading runs from Python"):]
    lines, block = sec.split("\n"), []
    for line in lines[1:]:
        if line.startswith("    "):
            block.append(line[4:])
        elif block:
            break
    assert len(block) == 5, block
    return "\n".join(block) + "\n"


def t_readme():
    """The example runs as printed, after `./sinkwatch demo`, in a fresh
    directory, with the package from the source tree (no SINKWATCH_LIB:
    the library is found above the package), and prints the report's path
    split."""
    code = readme_example()
    tmp = os.path.join(DAEMON.tmp, "readme")
    os.makedirs(tmp)
    env = {k: v for k, v in child_env().items() if k not in ("SINKWATCH_LIB", "SINKWATCH")}
    env.update(MPLBACKEND="Agg", PYTHONPATH=os.path.join(SRCDIR, "contrib", "python"))
    p = subprocess.run([SINKWATCH, "demo", "--data-dir", "sinkwatch-data", "--listen",
                        "tcp://127.0.0.1:%d" % free_port(), "--control",
                        "tcp://127.0.0.1:%d" % free_port()], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    if os.path.realpath(os.path.dirname(SINKWATCH)) != os.path.realpath(SRCDIR):
        # a VPATH build (distcheck): the library is not above the source
        # package; name the tool, beside which it is
        env["SINKWATCH"] = SINKWATCH
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=dict(env, **py_env()),
                       capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (code, p.stderr[-3000:])
    got = eval(p.stdout.strip(), {"nan": float("nan")})
    import glob
    path = sorted(glob.glob(os.path.join(tmp, "sinkwatch-data", "demo-*.h5")))[-1]
    rc, want, err = cli_json([path])
    assert rc == 0, err
    rref.same(got, want["model_attribution"]["path"], "readme", rel=0, abs_=1e-12)
    with open(os.path.join(tmp, "sink.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def main():
    preload_asan()      # ctypes loads the build's library: in an ASan build, its runtime first
    DAEMON.start()
    try:
        R.check("library: found, its version, a missing file", t_library)
        R.check("random runs: view, series, reports vs the command line and numpy",
                t_schedules)
        R.check("to_xarray: dims step, layer, head", t_xarray)
        R.check("a closed Run refuses", t_closed)
        R.check("refresh: a run being written", t_refresh)
        R.check("README: the notebook example as printed", t_readme)
    finally:
        DAEMON.stop()
    return R.finish()


if __name__ == "__main__":
    sys.exit(main())
