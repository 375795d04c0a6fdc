#!/usr/bin/python3
"""Checkpoint sweeps (sinkwatch.sweep) against a real sinkwatchd.

contrib/examples/train_tiny_gpt.py trains a tiny model briefly with
--save-every 5 (9 checkpoints) while its own probe streams every 5 steps;
then the checkpoints are swept twice: in step order by 1 worker (the API)
and shuffled by 3 workers (the command line). Checked:

- every checkpoint step is stored exactly once in each file, nothing was
  dropped or lost, the run was ended once, after the daemon had every message;
- the stored per-step head values of the two sweeps (and of the training
  probe) agree to 1e-12 when matched by step, whatever their order in the file;
- the same with 2 forked workers in descending order, ended after a wait
  when the control socket does not answer;
- the shuffled sweep really reached the daemon out of step order;
- `sinkwatch report --format json` of the ordered sweep equals the training
  probe's (both in step order), every attribution number to 1e-9;
- the report of the shuffled sweep equals the ordered one's: ONLY when the
  report says it takes the steps in step order (see report_order below).

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. /usr/bin/python3 tests/e2e/sweep.py [CASE...]

Exit 77 (skipped) without SINKWATCHD or without torch.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
PYDIR = os.path.join(SRCDIR, "contrib", "python")
sys.path.insert(0, HERE)
sys.path.insert(0, PYDIR)

# The report comparison of a shuffled sweep. Today the daemon stores steps in
# arrival order and `sinkwatch report` takes the file order as time, so the
# path and endpoint figures of a shuffled run differ from the ordered run's.
# The check runs when the report JSON says it takes the steps in step order:
# a top-level "step_order": true (or "order": "step"). SW_SWEEP_REPORT_CHECK=1
# runs it regardless (it fails today), =0 never runs it.
REPORT_CHECK = os.environ.get("SW_SWEEP_REPORT_CHECK", "auto")

EXAMPLE = os.path.join(SRCDIR, "contrib", "examples", "train_tiny_gpt.py")
PY = sys.executable
STEPS, EVERY = 40, 5
CKPT_STEPS = list(range(0, STEPS + 1, EVERY))          # 9 checkpoints, the last included
LAYERS, HEADS = 2, 4
SMALL = ["--steps", str(STEPS), "--layers", str(LAYERS), "--heads", str(HEADS),
         "--d-model", "32", "--context", "64", "--batch", "8", "--probe-batch", "2",
         "--seed", "3", "--threads", "1", "--log-every", "20"]
HEAD_FIELDS = ("sink_mass", "content_mass", "entropy", "sink_entropy", "content_entropy",
               "content_term", "content_entropy_mw", "sink_balance", "rows", "rejected")
SHUFFLE_SEED = 1
STATE = {}


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def read_steps(path):
    """{step: {field: [layers, heads] array}} and the steps in file order."""
    import h5py
    with h5py.File(path, "r") as f:
        steps = [int(s) for s in f["step"][:]]
        data = {name: f[name][:] for name in HEAD_FIELDS}
        lost, missing = f["lost"][:], f["missing"][:]
    by = {}
    for i, s in enumerate(steps):
        by[s] = {name: data[name][i] for name in HEAD_FIELDS}
    return by, steps, lost, missing


def report(path):
    p = subprocess.run([os.environ["SINKWATCH"], "report", path, "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return json.loads(p.stdout)


def numbers(obj, at=""):
    """Every number in obj, by its path (nan and null kept as nan)."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(numbers(v, "%s/%s" % (at, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(numbers(v, "%s[%d]" % (at, i)))
    elif obj is None:
        out[at] = math.nan
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[at] = float(obj)
    return out


def attribution_diffs(ra, rb, tol=1e-9):
    """(path, a, b) of every number of model_attribution and layer_attribution
    that differs by more than tol (relative to the larger, plus tol absolute)."""
    na = numbers({"model_attribution": ra["model_attribution"],
                  "layer_attribution": ra["layer_attribution"]})
    nb = numbers({"model_attribution": rb["model_attribution"],
                  "layer_attribution": rb["layer_attribution"]})
    assert set(na) == set(nb), sorted(set(na) ^ set(nb))
    assert len(na) > 10, na
    bad = []
    for k in sorted(na):
        a, b = na[k], nb[k]
        if math.isnan(a) and math.isnan(b):
            continue
        if not abs(a - b) <= tol * max(abs(a), abs(b)) + tol:
            bad.append((k, a, b))
    return bad


def report_order(r):
    """True when the report declares that it takes the stored steps in step
    order (the key the check keys on)."""
    return r.get("step_order") is True or r.get("order") == "step"


def same_by_step(pa, pb, what, tol=1e-12):
    """The per-step head values of two files agree, matched by step value."""
    a, _, _, _ = read_steps(pa)
    b, _, _, _ = read_steps(pb)
    import numpy as np
    assert sorted(a) == sorted(b) == CKPT_STEPS, (what, sorted(a), sorted(b))
    worst = 0.0
    for s in CKPT_STEPS:
        for name in HEAD_FIELDS:
            x, y = np.asarray(a[s][name], np.float64), np.asarray(b[s][name], np.float64)
            assert x.shape == y.shape and x.shape[:2] == (LAYERS, HEADS), \
                (what, s, name, x.shape, y.shape)
            assert np.isfinite(x).all() and np.isfinite(y).all(), (what, s, name, x, y)
            d = float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(x))))
            worst = max(worst, d)
            assert d <= tol, "%s: step %d %s differs by %.3g:\n%r\n%r" % (what, s, name, d,
                                                                         x, y)
    return worst


# ---------------------------------------------------------------- cases

def case_helpers():
    """find_checkpoints / order_checkpoints / deal without torch or a daemon."""
    import sinkwatch.sweep as sws
    d = tempfile.mkdtemp(dir=STATE["tmp"])
    for s in (10, 0, 5):
        open(os.path.join(d, "step_%08d.pt" % s), "wb").close()
    for other in ("probe.pt", "step_00000015.pt.tmp", "notes.txt"):
        open(os.path.join(d, other), "wb").close()
    items = sws.find_checkpoints(d)
    assert [s for s, _ in items] == [0, 5, 10], items
    assert sws.find_checkpoints(["a/step_7.pt", "b/x_step_0003.pth"]) == \
        [(3, "b/x_step_0003.pth"), (7, "a/step_7.pt")]
    assert sws.find_checkpoints({4: "x.pt", 2: "y.pt"}) == [(2, "y.pt"), (4, "x.pt")]
    assert sws.find_checkpoints([(9, "w.pt")]) == [(9, "w.pt")]
    for bad in (["nostep.pt"], ["a/step_1.pt", "b/step_01.pt"], {-1: "x"}, []):
        try:
            sws.find_checkpoints(bad)
        except ValueError:
            pass
        else:
            raise AssertionError("accepted %r" % (bad,))
    items = [(s, "p%d" % s) for s in range(9)]
    assert sws.order_checkpoints(items, "desc") == items[::-1]
    sh = sws.order_checkpoints(items, "shuffle", 4)
    assert sh == sws.order_checkpoints(items, "shuffle", 4) and sorted(sh) == items
    shares = sws.deal(sh, 4)
    assert sorted(sum(shares, [])) == items and [len(x) for x in shares] == [3, 2, 2, 2]
    assert sws.deal(items[:2], 3)[2] == []


def case_train():
    """The example trains, streams its own probe every 5 steps and saves 9
    checkpoints (with their resume states) and probe.pt; saving changes
    nothing in the training."""
    d, tmp = STATE["daemon"], STATE["tmp"]
    ck = os.path.join(tmp, "ck")
    t0 = time.time()
    p = subprocess.run([PY, EXAMPLE] + SMALL + ["--connect", d.listen, "--run", "train-probe",
                                                "--every", str(EVERY), "--save-every",
                                                str(EVERY), "--checkpoint-dir", ck,
                                                "--save-final", os.path.join(tmp, "a.npz")],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    STATE["train_s"] = time.time() - t0
    names = sorted(os.listdir(ck))
    # state_N.pt (optimizer, generators: for --resume) beside each step_N.pt
    assert names == ["probe.pt"] + ["state_%08d.pt" % s for s in CKPT_STEPS] + \
        ["step_%08d.pt" % s for s in CKPT_STEPS], names
    d.wait_ended("train-probe")
    STATE["ck"] = ck
    # --no-probe without checkpoints: the same parameters, bit for bit
    p = subprocess.run([PY, EXAMPLE] + SMALL + ["--no-probe", "--save-final",
                                                os.path.join(tmp, "b.npz")],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr)
    import numpy as np
    import torch
    a, b = np.load(os.path.join(tmp, "a.npz")), np.load(os.path.join(tmp, "b.npz"))
    assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    last = torch.load(os.path.join(ck, "step_%08d.pt" % STEPS))
    assert all(np.array_equal(v.numpy(), a["param/" + k]) for k, v in last.items())


def case_sweep_ordered():
    """1 worker, ascending, through the API."""
    import sinkwatch.sweep as sws
    d = STATE["daemon"]
    meta = sws.load_probe_file(STATE["ck"])
    assert meta["layers"] == LAYERS and meta["heads"] == HEADS, meta
    factory = sws.FileFactory(meta["factory_file"], meta["factory"], meta["hparams"])
    t0 = time.time()
    st = sws.sweep(STATE["ck"], factory, meta["probe"], "sweep-asc", endpoint=d.listen,
                   control=d.control, workers=1, order="asc", model=meta["model"],
                   params=meta["params"])
    STATE["asc_s"] = time.time() - t0
    assert len(st["workers"]) == 1 and st["workers"][0]["steps"] == CKPT_STEPS, st
    check_stats(st, "sweep-asc")
    d.wait_ended("sweep-asc")


def case_sweep_shuffled():
    """3 workers, shuffled, through the command line (python3 -m sinkwatch.sweep)."""
    import sinkwatch.sweep as sws
    d = STATE["daemon"]
    order = sws.order_checkpoints([(s, "") for s in CKPT_STEPS], "shuffle", SHUFFLE_SEED)
    shares = sws.deal(order, 3)
    # a worker that sends a later step before an earlier one: the file cannot
    # be in step order, whatever the interleaving of the workers
    assert any([s for s, _ in sh] != sorted(s for s, _ in sh) for sh in shares), shares
    t0 = time.time()
    p = subprocess.run([PY, "-m", "sinkwatch.sweep", "--checkpoint-dir", STATE["ck"],
                        "--run", "sweep-shuf", "--endpoint", d.listen, "--control", d.control,
                        "--workers", "3", "--order", "shuffle", "--seed", str(SHUFFLE_SEED),
                        "--json"], capture_output=True, text=True, timeout=180, env=env())
    STATE["shuf_s"] = time.time() - t0
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.returncode, p.stdout, p.stderr)
    st = json.loads(p.stdout)
    assert [w["steps"] for w in st["workers"]] == [[s for s, _ in sh] for sh in shares], st
    assert len({w["pid"] for w in st["workers"]}) == 3, st
    check_stats(st, "sweep-shuf")
    d.wait_ended("sweep-shuf")


def case_sweep_fork():
    """2 workers, descending, the fork start method, a control endpoint that
    does not answer (the sweep waits `settle` seconds before the end)."""
    import sinkwatch.sweep as sws
    from swharness import free_port
    d = STATE["daemon"]
    meta = sws.load_probe_file(STATE["ck"])
    factory = sws.FileFactory(meta["factory_file"], meta["factory"], meta["hparams"])
    st = sws.sweep(STATE["ck"], factory, meta["probe"], "sweep-fork", endpoint=d.listen,
                   control="tcp://127.0.0.1:%d" % free_port(), workers=2, order="desc",
                   start_method="fork", model=meta["model"])
    assert [w["steps"] for w in st["workers"]] == [CKPT_STEPS[::-1][0::2],
                                                   CKPT_STEPS[::-1][1::2]], st
    assert st["received"] is None and st["confirmed"] is None, st
    st = dict(st, confirmed=True, received=st["sent"])
    check_stats(st, "sweep-fork")
    d.wait_ended("sweep-fork")
    _, steps, lost, missing = read_steps(d.run_file("sweep-fork"))
    assert sorted(steps) == CKPT_STEPS and not lost.any() and not missing.any(), steps
    same_by_step(d.run_file("sweep-asc"), d.run_file("sweep-fork"), "fork vs ordered")


def check_stats(st, run):
    assert st["run"] == run and st["checkpoints"] == len(CKPT_STEPS), st
    assert sorted(sum((w["steps"] for w in st["workers"]), [])) == CKPT_STEPS, st
    for w in st["workers"]:
        assert w["dropped"] == 0 and w["probe_errors"] == 0, w
        assert w["sent"] == LAYERS * len(w["steps"]), w
    assert st["dropped"] == 0 and st["sent"] == LAYERS * len(CKPT_STEPS), st
    assert st["ended"] is True and st["confirmed"] is True, st
    assert st["received"] == st["sent"], st


def case_stored_once():
    """Each file holds every checkpoint step exactly once, no layer missing,
    nothing lost; the shuffled one is not in step order."""
    d = STATE["daemon"]
    for run in ("train-probe", "sweep-asc", "sweep-shuf"):
        _, steps, lost, missing = read_steps(d.run_file(run))
        assert sorted(steps) == CKPT_STEPS, (run, steps)
        assert len(set(steps)) == len(steps), (run, steps)
        assert not missing.any() and not lost.any(), (run, lost, missing)
        STATE["order_" + run] = steps
    assert STATE["order_sweep-asc"] == CKPT_STEPS, STATE["order_sweep-asc"]
    assert STATE["order_sweep-shuf"] != CKPT_STEPS, STATE["order_sweep-shuf"]
    print("     file order of the shuffled sweep: %s" % STATE["order_sweep-shuf"])


def case_values_by_step():
    """Per-step head values: shuffled = ordered = the training probe (1e-12)."""
    d = STATE["daemon"]
    w1 = same_by_step(d.run_file("sweep-asc"), d.run_file("sweep-shuf"), "shuffled vs ordered")
    w2 = same_by_step(d.run_file("sweep-asc"), d.run_file("train-probe"),
                      "ordered sweep vs training probe")
    print("     largest difference: %.3g (shuffled), %.3g (training probe)" % (w1, w2))


def case_report_ordered():
    """The ordered sweep's report equals the training probe's (1e-9)."""
    d = STATE["daemon"]
    ra, rt = report(d.run_file("sweep-asc")), report(d.run_file("train-probe"))
    assert ra["steps_stored"] == rt["steps_stored"] == len(CKPT_STEPS), (ra, rt)
    assert (ra["first_step"], ra["last_step"]) == (0, STEPS), ra
    bad = attribution_diffs(ra, rt)
    assert not bad, bad[:10]


def case_report_shuffled():
    """The shuffled sweep's report equals the ordered one's (1e-9), once the
    report takes steps in step order (report_order); until then, checks that
    it differs for that reason: the report follows the file order."""
    d = STATE["daemon"]
    ra, rb = report(d.run_file("sweep-asc")), report(d.run_file("sweep-shuf"))
    stepwise = report_order(rb)
    run_it = REPORT_CHECK == "1" or (REPORT_CHECK == "auto" and stepwise)
    bad = attribution_diffs(ra, rb)
    ma, mb = ra["model_attribution"], rb["model_attribution"]
    summary = ("ordered: first %s last %s path dH %.9g sink %.9g content %.9g endpoint "
               "sink %.9g content %.9g | shuffled: first %s last %s path dH %.9g sink %.9g "
               "content %.9g endpoint sink %.9g content %.9g"
               % (ra["first_step"], ra["last_step"], ma["path"]["dH"], ma["path"]["sink"],
                  ma["path"]["content"], ma["endpoint"]["sink"], ma["endpoint"]["content"],
                  rb["first_step"], rb["last_step"], mb["path"]["dH"], mb["path"]["sink"],
                  mb["path"]["content"], mb["endpoint"]["sink"], mb["endpoint"]["content"]))
    print("     %s" % summary)
    if run_it:
        assert not bad, "%d numbers differ, e.g. %r\n%s" % (len(bad), bad[:6], summary)
        return
    # Not checked (the report does not say step_order): the expected failure
    # of today, for the stated reason. If the report already sorts the steps
    # but lacks the key, this fails: add "step_order": true to the report.
    order = STATE["order_sweep-shuf"]
    assert (rb["first_step"], rb["last_step"]) == (order[0], order[-1]), \
        ("the report's first/last steps are no longer the file's first and last: does "
         "it take steps in step order? Then add \"step_order\": true to its JSON", rb)
    assert bad, "the shuffled report agrees already: add \"step_order\": true to the report"
    print("     SKIP report_shuffled equality: the report takes the file order (no "
          "\"step_order\": true in its JSON); %d of its attribution numbers differ "
          "(SW_SWEEP_REPORT_CHECK=1 asserts it)" % len(bad))


CASES = [("helpers", case_helpers), ("train", case_train),
         ("sweep_ordered", case_sweep_ordered), ("sweep_shuffled", case_sweep_shuffled),
         ("sweep_fork", case_sweep_fork), ("stored_once", case_stored_once), ("values_by_step", case_values_by_step),
         ("report_ordered", case_report_ordered), ("report_shuffled", case_report_shuffled)]


def main(argv):
    if not os.environ.get("SINKWATCHD") or not os.environ.get("SINKWATCH"):
        print("SINKWATCHD and SINKWATCH must be set: skipped")
        return 77
    try:
        import torch  # noqa: F401
        import h5py  # noqa: F401
    except ImportError as e:
        print("%s: skipped" % e)
        return 77
    from swharness import Daemon, Results
    want = set(argv)
    t0 = time.time()
    STATE["tmp"] = tempfile.mkdtemp(prefix="sinkwatch-sweep-")
    res = Results()
    d = Daemon()
    try:
        d.start()
    except Exception as e:  # noqa: BLE001
        print("FAIL daemon start: %s" % e)
        return 1
    STATE["daemon"] = d
    try:
        for name, fn in CASES:
            if not want or name in want:
                res.check(name, fn)
    finally:
        rc = d.stop()
        if rc != 0:
            print("FAIL daemon exit status %s\n%s" % (rc, d.read_log()))
            res.failed += 1
        log = d.read_log()
        if "AddressSanitizer" in log or "runtime error" in log:
            print("FAIL sanitizer report in the daemon log\n%s" % log)
            res.failed += 1
    print("time: training %.1f s, ordered sweep %.1f s, shuffled sweep %.1f s, all %.1f s"
          % (STATE.get("train_s", 0), STATE.get("asc_s", 0), STATE.get("shuf_s", 0),
             time.time() - t0))
    if not res.failed:
        shutil.rmtree(STATE["tmp"], ignore_errors=True)
        shutil.rmtree(d.tmp, ignore_errors=True)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
