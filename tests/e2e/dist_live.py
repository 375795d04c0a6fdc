#!/usr/bin/python3
"""A live distributed training run into a real sinkwatchd: torchrun starts
contrib/examples/train_pipeline_gpt.py on 2 ranks (gloo, CPU, a two-stage
pipeline of a 4-layer model, no dropout); each stage streams its 2 layers
through sinkwatch.torch (one run, 2 senders, one incarnation). The same
example on one process (one stage, one sender) trains the same weights
(checked by the losses it prints) into a second run. Then:

- one run file for the pipeline run (no second generation), ended;
- no loss: lost 0, incomplete 0, no layer missing, every head of every
  step with its rows, no drop of any reason, no decode error;
- the pipeline's file equals the single sender's, dataset by dataset (the
  daemon computes each layer as if one message had carried it);
- per-sender counters: the run file's sender table (dataset `senders`,
  fields as its `sender_fields` attribute names them, storage/LAYOUT.md),
  `sinkwatch report --format json` (senders, ranks_not_ended) and the
  daemon's status section `senders` (taken while the run is open) name
  both ranks of the one incarnation, every message counted, none lost or
  duplicated, both ended.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \\
        /usr/bin/python3 tests/e2e/dist_live.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

if not os.environ.get("SINKWATCHD") or not os.environ.get("SINKWATCH"):
    print("SINKWATCHD or SINKWATCH not set: skipped")
    sys.exit(77)
try:
    import h5py
    import numpy as np
    import torch.distributed as dist
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)
if not dist.is_available() or not dist.is_gloo_available():
    print("skipped: torch.distributed with gloo is not available")
    sys.exit(77)

from swharness import SINKWATCH, Daemon, Results, free_port, run_cmd  # noqa: E402

EXAMPLE = os.path.join(SRCDIR, "contrib", "examples", "train_pipeline_gpt.py")
RUN, SINGLE = "live-pp/seed1", "live-single/seed1"
LAYERS, HEADS, STEPS, EVERY, RANKS = 4, 4, 12, 4, 2
PROBES = [0, 4, 8, 12]          # every 4 steps and the final weights
ARGS = ["--steps", str(STEPS), "--every", str(EVERY), "--layers", str(LAYERS),
        "--heads", str(HEADS), "--d-model", "32", "--context", "32", "--dropout", "0",
        "--probe-batch", "2", "--log-every", "1", "--seed", "1"]
# each rank's messages: its 2 layers at every probe, and its end
MESSAGES = len(PROBES) * 2 + 1
# counters that must stay 0 (PROTOCOL.md 7b, storage/LAYOUT.md)
ZERO = ("lost", "duplicates", "overlaps", "mismatches", "disagree", "uncompared", "missing",
        "after_end")
STATE = {}


def torchrun():
    """torchrun, or the module it runs. --redirects 1 --tee 1: Debian 12's
    torchrun (torch 1.13, Python 3.11) fails on its defaults."""
    exe = shutil.which("torchrun")
    base = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    return base + ["--nproc_per_node=%d" % RANKS, "--redirects", "1", "--tee", "1",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port())]


def status_senders(d, run):
    """The daemon's counters of each sender of an open run (status section
    senders, a line "sender: RUN inc=I rank=R/N messages=M ... ended=E"
    each): a list of dicts of ints (senders: N), or None when the status
    does not list the run (any more)."""
    out = []
    for line in d.ctl("status senders").splitlines():
        if not line.startswith("sender: "):
            continue
        head, _, rest = line[len("sender: "):].rpartition(" inc=")
        if head != run:
            continue
        kv = dict(x.split("=", 1) for x in ("inc=" + rest).split())
        rank, senders = kv.pop("rank").split("/")
        row = {k: int(v) for k, v in kv.items()}
        row.update(rank=int(rank), senders=int(senders))
        out.append(row)
    return out or None


def sender_table(path):
    """The run file's sender table: a list of dicts, one per sender."""
    with h5py.File(path, "r") as f:
        assert "senders" in f, "no sender table (dataset senders) in %s" % path
        names = f.attrs["sender_fields"]
        names = (names.decode() if isinstance(names, bytes) else str(names)).split(",")
        t = f["senders"][:]
    assert t.ndim == 2 and t.shape[1] == len(names), (t.shape, names)
    return [dict(zip(names, (int(v) for v in row))) for row in t]


def losses(out):
    """The losses a run printed: {step: loss text}."""
    return dict(re.findall(r"step\s+(\d+)\s+loss (\S+)", out))


def case_training():
    d = Daemon(extra=["--pair-rows", "0"]).start()
    STATE["daemon"] = d
    seen, stop = [], threading.Event()

    def poll():     # the per-sender status while the run is open
        while not stop.is_set():
            try:
                s = status_senders(d, RUN)
                if s:
                    seen.append(s)
            except Exception as e:  # noqa: BLE001 - judged in its own case
                seen.append(e)
                return
            time.sleep(0.2)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t0 = time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        pp = subprocess.run(torchrun() + [EXAMPLE, "--connect", d.listen, "--run", RUN] + ARGS,
                            capture_output=True, text=True, timeout=400, env=env)
    finally:
        stop.set()
        th.join()
    STATE["status_seen"] = seen
    assert pp.returncode == 0, "torchrun: exit %d\n%s\n%s" % (pp.returncode, pp.stdout[-3000:],
                                                            pp.stderr[-3000:])
    one = subprocess.run([sys.executable, EXAMPLE, "--connect", d.listen, "--run", SINGLE] +
                         ARGS, capture_output=True, text=True, timeout=400, env=env)
    assert one.returncode == 0, "single: exit %d\n%s\n%s" % (one.returncode, one.stdout[-3000:],
                                                            one.stderr[-3000:])
    STATE["outputs"] = pp.stdout, one.stdout
    lp, l1 = losses(pp.stdout), losses(one.stdout)
    assert len(lp) == STEPS and lp == l1, (lp, l1)          # the same training
    for r in range(RANKS):
        m = re.search(r"rank %d client: .*dropped=(\d+).*sent=(\d+)" % r, pp.stdout)
        assert m and m.group(1) == "0" and int(m.group(2)) == len(PROBES) * 2 + 1, \
            (r, pp.stdout[-2000:])
    STATE["files"] = d.wait_ended(RUN, timeout=60), d.wait_ended(SINGLE, timeout=60)
    print("     (both runs %.1f s)" % (time.time() - t0))


def case_one_run_file():
    d = STATE["daemon"]
    name = os.path.basename(d.run_file(RUN))
    files = [f for f in os.listdir(os.path.dirname(d.run_file(RUN)))
             if f.startswith(name[:-len(".h5")])]
    assert files == [name], files       # not NAME@2.h5: one run, one generation
    with h5py.File(STATE["files"][0], "r") as f:
        assert (int(f.attrs["layers"]), int(f.attrs["heads"])) == (LAYERS, HEADS)
        assert f["ended"].shape[0] >= 1 and f["ended"][-1] == 1


def case_no_loss():
    with h5py.File(STATE["files"][0], "r") as f:
        assert [int(s) for s in f["step"][:]] == PROBES, f["step"][:]
        assert int(f["lost"][-1]) == 0 and int(f["incomplete"][-1]) == 0, \
            (f["lost"][:], f["incomplete"][:])
        assert not f["missing"][:].any(), f["missing"][:]
        rows = f["rows"][:]
        assert rows.shape == (len(PROBES), LAYERS, HEADS) and (rows > 0).all(), rows
        if "missing_rank" in f:     # notes/v2.md point 5: -1 where the head is present
            assert (f["missing_rank"][:] == -1).all(), f["missing_rank"][:]
        incs = set(int(i) for i in f["inc"][:])
        assert len(incs) == 1, incs
    st = STATE["daemon"].status()
    drops = {k: v for k, v in st["drops"].items() if k != "run" and v}
    assert not drops, drops
    assert st["traffic"]["steps_incomplete"] == 0, st["traffic"]


def case_equals_single_sender():
    """Every dataset indexed by step: the pipeline's two senders give what
    one sender of the whole model gives (float rounding aside)."""
    worst = 0.0
    with h5py.File(STATE["files"][0], "r") as a, h5py.File(STATE["files"][1], "r") as b:
        names = [k for k in b if isinstance(b[k], h5py.Dataset) and b[k].shape and
                 b[k].shape[0] == len(PROBES) and not k.startswith("sender_") and
                 k not in ("inc", "time", "seq_next")]
        assert {"sink_mass", "entropy", "dH_sink", "dH_content", "rows"} <= set(names), names
        for k in names:
            x, y = a[k][:], b[k][:]
            assert x.shape == y.shape, (k, x.shape, y.shape)
            if x.dtype.kind == "f":
                assert np.array_equal(np.isnan(x), np.isnan(y)), k
                ok = ~np.isnan(x)
                err = float(np.max(np.abs(x[ok] - y[ok]), initial=0.0))
                assert np.allclose(x[ok], y[ok], rtol=1e-9, atol=1e-12), (k, err)
                worst = max(worst, err)
            else:
                assert np.array_equal(x, y), k
    print("     (largest difference %.2g)" % worst)


def case_sender_table():
    """The file's sender table and `sinkwatch report --format json`."""
    with h5py.File(STATE["files"][0], "r") as f:
        inc = int(f["inc"][0])
    t = sender_table(STATE["files"][0])
    assert sorted(r["rank"] for r in t) == list(range(RANKS)), t
    for r in t:
        assert (r["inc"], r["senders"], r["messages"], r["ended"]) == \
            (inc, RANKS, MESSAGES, 1), r
        assert not any(r[k] for k in ZERO), r
    rc, out, err = run_cmd([SINKWATCH, "report", STATE["files"][0], "--format", "json"])
    assert rc == 0, (rc, err)
    js = json.loads(out)
    assert js["ranks_not_ended"] == [], js["ranks_not_ended"]
    assert sorted((s["rank"], s["messages"], s["ended"]) for s in js["senders"]) == \
        [(r, MESSAGES, 1) for r in range(RANKS)], js["senders"]
    # the single sender's run: one row, rank 0 of 1
    t1 = sender_table(STATE["files"][1])
    assert [(r["rank"], r["senders"], r["messages"], r["ended"]) for r in t1] == \
        [(0, 1, LAYERS * len(PROBES) + 1, 1)], t1


def case_status_senders():
    """The status while the run was open: both ranks of one incarnation,
    nothing lost or dropped, messages counted as they came."""
    seen = STATE.get("status_seen", [])
    errors = [s for s in seen if isinstance(s, Exception)]
    assert not errors, errors[0]
    assert seen, "the status never listed run %s with its senders" % RUN
    last = seen[-1]
    assert sorted(s["rank"] for s in last) == list(range(RANKS)), last
    assert len({s["inc"] for s in last}) == 1 and {s["senders"] for s in last} == {RANKS}, \
        last
    for s in last:
        assert 0 < s["messages"] <= MESSAGES and not any(s.get(k, 0) for k in ZERO), s
    for a, b in zip(seen, seen[1:]):        # counters only grow
        ma = {s["rank"]: s["messages"] for s in a}
        assert all(s["messages"] >= ma.get(s["rank"], 0) for s in b), (a, b)
    after = status_senders(STATE["daemon"], RUN)
    if after:       # still listed after the ends: both ended, every message counted
        for s in after:
            assert s["ended"] == 1 and s["messages"] == MESSAGES, s


CASES = [("training", case_training), ("one_run_file", case_one_run_file),
         ("no_loss", case_no_loss), ("equals_single_sender", case_equals_single_sender),
         ("sender_table", case_sender_table), ("status_senders", case_status_senders)]


def main():
    res = Results()
    try:
        res.check("training", case_training)
        if "files" in STATE:
            for name, fn in CASES[1:]:
                res.check(name, fn)
    finally:
        d = STATE.get("daemon")
        if d is not None:
            rc = d.stop()
            res.check("daemon_exit_status", lambda: _assert(rc == 0, "sinkwatchd exit %r\n%s"
                                                             % (rc, d.read_log()[-3000:])))
            if not res.failed:
                shutil.rmtree(d.tmp, ignore_errors=True)
            else:
                print("     (daemon log and files kept in %s)" % d.tmp)
    return res.finish()


def _assert(cond, msg):
    assert cond, msg


if __name__ == "__main__":
    sys.exit(main())
