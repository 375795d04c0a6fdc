#!/usr/bin/python3
"""Limits against a flood of runs (issue 15): a sender making run ids by
the hundred against a daemon with low limits. New runs past the rate
(--new-runs-per-s, --new-runs-burst) are refused and counted (run_rate),
the first ones are stored whole, the files stay as few as the limits allow
and the daemon answers. A full run table (--max-runs) closes its idle runs
first, never one with a step open, and only past them refuses new runs
(too_many_runs); the refused run ids are listed with their counts (status
refused) for the sender to read. A run of more senders than the status
lists (1,100 with a 128-byte id, issue 26) is said to be cut, with its true
length, and every section after it is there, whole.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/flood.py [CASE...]
"""
import glob
import os
import subprocess
import sys
import time

import h5py
import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, SINKWATCHD, Daemon, Results, Sender, child_env, random_probs  # noqa: E402

if not SINKWATCHD:
    print("SINKWATCHD must be set: skipped")
    sys.exit(77)


def refused(d):
    """status refused: {run: (too_many_runs, run_rate)} and the header figures."""
    runs, head = {}, {}
    for line in d.ctl("status refused").splitlines():
        if line.startswith("refused: "):
            f = line.split()
            kv = dict(x.split("=") for x in f[2:])
            runs[f[1]] = (int(kv["too_many_runs"]), int(kv["run_rate"]))
        elif ": " in line:
            k, v = line.split(": ", 1)
            head[k] = int(v)
    return runs, head


def whole(path, steps):
    with h5py.File(path, "r") as f:
        assert list(f["step"][:]) == steps, (path, f["step"][:])
        assert int(f["incomplete"][-1]) == 0, (path, f["incomplete"][:])


def case_rate():
    """200 new run ids as fast as one socket sends them, 2 a second past a
    burst of 10: the first 10 and the few the rate lets through are stored
    whole, every other message is refused as run_rate, and the files are
    the runs taken, no more."""
    N, RATE, BURST = 200, 2, 10
    rng = np.random.default_rng(3)
    x = random_probs(rng, 2, 3, 8)
    d = Daemon(extra=["--new-runs-per-s", str(RATE), "--new-runs-burst", str(BURST),
                      "--max-runs", "1000"]).start()
    try:
        snd = Sender(d.listen, "flood-000", 1, 2)
        t0 = time.time()
        for i in range(N):
            snd.run, snd.seq = "flood-%03d" % i, 0
            snd.snapshot(0, 0, x)
        st = d.wait(lambda s: s["traffic"]["messages"] >= N, what="the flood received")
        elapsed = time.time() - t0
        taken = N - st["drops"]["run_rate"]
        st = d.wait(lambda s: s["writer"]["steps_written"] >= taken, what="the steps written")
        runs, head = refused(d)
        assert "pong" in d.ctl("ping")
        snd.close()
    finally:
        assert d.stop() == 0
    assert head["new_runs_per_s"] == RATE and head["new_runs_burst"] == BURST, head
    # the burst at once, then RATE a second while the flood lasted
    assert BURST <= taken <= BURST + RATE * elapsed + 1, (taken, elapsed)
    assert st["drops"]["run_rate"] == N - taken, st["drops"]
    assert st["drops"]["too_many_runs"] == 0, st["drops"]
    assert st["writer"]["steps_written"] == taken, st["writer"]
    files = glob.glob(os.path.join(d.data, "*.h5"))
    assert len(files) == taken, (len(files), taken)
    for i in range(BURST):
        whole(d.run_file("flood-%03d" % i), [0])
    # the refused ids, the latest first, each counted under run_rate
    assert len(runs) == min(64, N - taken), len(runs)
    assert runs["flood-%03d" % (N - 1)] == (0, 1), runs
    assert all(v == (0, 1) for v in runs.values()), runs
    print("  %d of %d new runs taken in %.2f s (%d files)" % (taken, N, elapsed, len(files)))


def case_table():
    """--max-runs 4, no rate limit: two runs whose steps are written (idle)
    and one with a step open (live), then 30 new runs each with a step
    open. The idle runs are closed for the first new ones, the live run
    never; the rest are refused as too_many_runs; the live run completes
    its step after the flood, whole."""
    L, FLOOD = 2, 30
    rng = np.random.default_rng(4)
    xs = [random_probs(rng, 2, 3, 8) for _ in range(L)]
    d = Daemon(extra=["--max-runs", "4", "--new-runs-per-s", "0",
                      "--step-timeout-ms", "60000"]).start()
    try:
        snd = Sender(d.listen, "idle-a", L, 2)
        for n, run in enumerate(("idle-a", "idle-b")):
            snd.run, snd.seq = run, 0
            for lay in range(L):
                snd.snapshot(0, lay, xs[lay])
            d.wait(lambda s: s["writer"]["steps_written"] >= n + 1, what="step of " + run)
        snd.run, snd.seq = "live", 0
        snd.snapshot(0, 0, xs[0])
        for i in range(FLOOD):
            snd.run, snd.seq = "flood-%02d" % i, 0
            snd.snapshot(0, 0, xs[0])
        d.wait(lambda s: s["traffic"]["messages"] >= 2 * L + 1 + FLOOD, what="the flood")
        snd.run, snd.seq = "live", 1
        snd.snapshot(0, 1, xs[1])
        st = d.wait(lambda s: s["writer"]["steps_written"] >= 3, what="the live run's step")
        runs, head = refused(d)
        log = d.read_log()
        assert "pong" in d.ctl("ping")
        snd.close()
    finally:
        assert d.stop() == 0
    assert head["max_runs"] == 4, head
    # live, flood-00, then flood-01 and -02 in the places of idle-a and idle-b
    assert st["drops"]["too_many_runs"] == FLOOD - 3, st["drops"]
    assert st["drops"]["run_rate"] == 0, st["drops"]
    assert "run idle-a: the run table is full" in log, log
    assert "run idle-b: the run table is full" in log, log
    assert "run live: the run table is full" not in log, log
    assert len(runs) == FLOOD - 3 and all(v == (1, 0) for v in runs.values()), runs
    assert "flood-02" not in runs and "flood-03" in runs, runs
    whole(d.run_file("idle-a"), [0])
    whole(d.run_file("idle-b"), [0])
    whole(d.run_file("live"), [0])
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d.data, "*.h5")))
    # the flood runs taken hold their open step, written at the stop
    assert files == ["flood-00.h5", "flood-01.h5", "flood-02.h5", "idle-a.h5", "idle-b.h5",
                     "live.h5"], files


def case_status_lists():
    """1,100 senders of one run with a 128-byte id, one layer each
    (PROTOCOL.md 7b): the status lists 1,024 of them, says so with the
    true length, and every section after the list is there, whole; so is
    sinkwatch status's copy (it used to stop at 256 KiB mid-line)."""
    N, SHOWN = 1100, 1024
    run = ("status-lists-" + "x" * 128)[:128]
    rng = np.random.default_rng(5)
    x = random_probs(rng, 1, 2, 4)
    d = Daemon().start()
    try:
        snd = Sender(d.listen, run, N, 1)
        for rank in range(N):
            snd.seq = 0
            snd.snapshot(0, rank, x, v=2, inc=9, rank=rank, senders=N)
        d.wait(lambda s: s["traffic"]["messages"] >= N, what="the senders' messages")
        text = d.ctl("status")
        tool = subprocess.run([SINKWATCH, "status", "--control", d.control],
                              capture_output=True, env=child_env(), timeout=30)
        snd.close()
    finally:
        assert d.stop() == 0
    assert len(text) > 1 << 18, len(text)
    assert "\n# senders\nsenders: %d\nsenders_total: %d\nsenders_not_shown: %d\n" % (
        SHOWN, N, N - SHOWN) in text, text[:2000]
    assert text.count("\nsender: %s inc=9 rank=" % run) == SHOWN
    heads = [line for line in text.splitlines() if line.startswith("# ")]
    assert heads == ["# " + n for n in ("server", "auth", "runs", "senders", "refused",
                                        "traffic", "drops", "rejects", "queue", "writer",
                                        "loop", "cpu", "finished")], heads
    assert text.endswith("\n") and text.splitlines()[-1].startswith("finished: "), text[-200:]
    assert "\ncut: " not in text
    assert tool.returncode == 0, tool.stderr
    out = tool.stdout.decode()
    assert len(out) > 1 << 18 and "senders_total: %d\n" % N in out, len(out)
    assert out.splitlines()[-1].startswith("finished: "), out[-200:]


CASES = {"rate": case_rate, "table": case_table, "status_lists": case_status_lists}


def main():
    c = Results()
    for name in sys.argv[1:] or list(CASES):
        c.check(name, CASES[name])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
