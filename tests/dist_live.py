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
- per-sender counters: the run file's sender table (sender_inc,
  sender_rank, sender_messages, sender_lost, sender_ended) and the
  daemon's status (`sinkwatch status --format json`, taken while the run
  is open) name both ranks of the one incarnation, none lost, both ended.

The daemon side of several senders (PROTOCOL.md 7b) is what this needs;
the names of the sender table and of the status JSON are in SENDER_FIELDS
and status_senders(), the places to adjust.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \\
        /usr/bin/python3 tests/dist_live.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRCDIR, "tests"))
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
# the run file's sender table (notes/v2.md point 7); one row per sender
SENDER_FIELDS = ("sender_inc", "sender_rank", "sender_messages", "sender_lost",
                 "sender_ended")
STATE = {}


def torchrun():
    """torchrun, or the module it runs. --redirects 1 --tee 1: Debian 12's
    torchrun (torch 1.13, Python 3.11) fails on its defaults."""
    exe = shutil.which("torchrun")
    base = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    return base + ["--nproc_per_node=%d" % RANKS, "--redirects", "1", "--tee", "1",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port())]


def status_senders(d, run):
    """The daemon's counters of each sender of a run, from `sinkwatch status
    --format json`: a list of dicts with inc, rank, senders, messages,
    lost, ended (and duplicates, disagree, overlap, missing), or None when
    the status does not list the run (any more)."""
    rc, out, err = run_cmd([SINKWATCH, "status", "--control", d.control, "--format", "json"],
                           timeout=10)
    assert rc == 0, "sinkwatch status --format json: exit %d: %s" % (rc, err.strip())
    js = json.loads(out)
    runs = js.get("runs", [])
    if isinstance(runs, dict):
        runs = runs.get("runs", [])
    for r in runs:
        if r.get("run") == run:
            return r.get("senders")
    return None


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
    with h5py.File(STATE["files"][0], "r") as f:
        missing = [k for k in SENDER_FIELDS if k not in f]
        assert not missing, "no %s in the run file" % missing
        t = {k: f[k][:] for k in SENDER_FIELDS}
        inc = int(f["inc"][0])
        for k in ("sender_duplicates", "sender_disagree", "sender_overlap", "sender_missing"):
            if k in f:
                assert not f[k][:].any(), (k, f[k][:])
    assert len(t["sender_rank"]) == RANKS, t
    assert sorted(int(r) for r in t["sender_rank"]) == list(range(RANKS)), t
    assert all(int(i) == inc for i in t["sender_inc"]), (t, inc)
    # each rank: its 2 layers at every probe, and its end
    assert all(int(m) == len(PROBES) * 2 + 1 for m in t["sender_messages"]), t
    assert not t["sender_lost"].any(), t
    assert all(int(e) == 1 for e in t["sender_ended"]), t


def case_status_senders():
    seen = STATE.get("status_seen", [])
    errors = [s for s in seen if isinstance(s, Exception)]
    assert not errors, errors[0]
    assert seen, "the status never listed run %s with its senders" % RUN
    last = seen[-1]
    ranks = sorted(int(s["rank"]) for s in last)
    assert ranks == list(range(RANKS)), last
    assert len({s["inc"] for s in last}) == 1 and all(int(s["senders"]) == RANKS
                                                      for s in last), last
    for s in last:
        assert int(s["lost"]) == 0 and 0 < int(s["messages"]) <= len(PROBES) * 2 + 1, s
        for k in ("duplicates", "disagree", "overlap", "missing"):
            assert int(s.get(k, 0)) == 0, (k, s)
    after = status_senders(STATE["daemon"], RUN)
    if after:       # still listed after the ends: both ended, every message counted
        for s in after:
            assert s.get("ended") in (1, True) and int(s["messages"]) == len(PROBES) * 2 + 1, s


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
