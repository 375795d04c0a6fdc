#!/usr/bin/python3
"""Restarts, run ids and file names: a daemon SIGKILLed and restarted on the
same data dir while a sender streams (every missing message counted in the
file's `lost`), `sinkwatch sim` against a live daemon many times, long and
non-ASCII run ids (names within NAME_MAX, one file each), links planted at
the temporary and the final name, a run id re-used with another shape
(generation 2), the umask option, and a full run table.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/restarts.py [CASE...]
"""
import json
import os
import random
import signal
import stat
import sys
import threading
import time

import h5py
import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, Sender,  # noqa: E402
                       random_probs, run_cmd)

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)


def report(path):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json"])
    assert rc == 0, "report %s: %s" % (path, err)
    return json.loads(out)


def send_end(snd, inc):
    """The end message with the incarnation (Sender.end() sends none)."""
    h = {"v": 1, "type": "end", "run": snd.run, "seq": snd.seq, "inc": inc}
    snd.send_frames([msgpack.packb(h)])


def stream(snd, steps, tensors, inc, first=0, qpos=None):
    """Steps first.. first+steps-1, every layer, with incarnation inc."""
    for st in range(first, first + steps):
        for lay, x in enumerate(tensors):
            snd.snapshot(st, lay, x, qpos=qpos, inc=inc)


def drops(d):
    return {k: v for k, v in d.status()["drops"].items() if k != "run" and v}


def clean_log(d):
    bad = [ln for ln in d.read_log().splitlines() if " error:" in ln or "Sanitizer" in ln]
    assert not bad, bad


def no_tmp(d):
    left = [n for n in os.listdir(d.data) if n.endswith(".tmp")]
    assert not left, left


# ---------------------------------------------------------------- 1. SIGKILL

def case_kill_restart():
    """A sender streams 4 layers x 2 heads while the daemon is SIGKILLed and
    restarted on the same data dir and ports, CYCLES times. Every snapshot
    message sent and not in the file (a whole step missing, or a layer
    marked `missing`) is counted in the last row's `lost` (LAYOUT.md: lost
    persists, seq_next says from where a restart counts), exactly: nothing
    is resent, so nothing is counted twice. `incomplete` equals the stored
    rows with missing layers."""
    L, H, R, K, CYCLES = 4, 2, 4, 16, 10
    INC = 7 << 40
    d = Daemon(extra=["--step-timeout-ms", "250"]).start()
    rng = np.random.default_rng(11)
    tensors = [random_probs(rng, H, R, K) for _ in range(L)]
    snd = Sender(d.listen, "killed", L, H, model="m", params=1)
    stop = threading.Event()
    sent = [0]

    def sender():
        st = 0
        while not stop.is_set():
            for lay in range(L):
                snd.snapshot(st, lay, tensors[lay], inc=INC)
                time.sleep(0.0005)     # a restart may fall inside a step
            st += 1
            sent[0] = st

    th = threading.Thread(target=sender)
    th.start()
    rnd = random.Random(3)
    try:
        try:
            for _ in range(CYCLES):
                time.sleep(rnd.uniform(0.3, 0.7))
                d.stop(signal.SIGKILL)
                time.sleep(rnd.uniform(0.02, 0.2))
                d.start()
            # the last daemon receives (the sender reconnected) before the end
            base = d.status()["traffic"]["messages"]
            d.wait(lambda s: s["traffic"]["messages"] > base + 20 * L,
                   what="the sender's messages after the last restart")
        finally:
            stop.set()
            th.join()
        send_end(snd, INC)
        path = d.wait_ended("killed", timeout=30)
        final_drops = drops(d)
        log = d.read_log()
    finally:
        d.stop()
        snd.close()
    S = sent[0]
    with h5py.File(path, "r") as f:
        step = f["step"][:]
        miss = f["missing"][:].astype(bool)
        lost = f["lost"][:]
        inc = f["inc"][:]
        incomplete = f["incomplete"][:]
        seq_next = f["seq_next"][:]
    assert len(set(step.tolist())) == len(step), "a step stored twice"
    assert set(inc.tolist()) == {INC}, set(inc.tolist())
    stored = int(L * len(step) - miss.sum())
    missing = S * L - stored
    absent = S - len(step)
    partial = int(miss.any(1).sum())
    print("  sent %d steps (%d messages), %d rows, %d steps absent, %d stored with "
          "missing layers (%d layers); missing messages %d, lost %d, incomplete %d, "
          "last seq_next %d" % (S, S * L, len(step), absent, partial, int(miss.sum()),
                                missing, int(lost[-1]), int(incomplete[-1]),
                                int(seq_next[-1])))
    assert log.count("lost while no daemon received them") >= 1, \
        "no restart gap was logged"
    assert absent > 0, "no step was lost across %d kills: the test shows nothing" % CYCLES
    assert np.all(np.diff(lost) >= 0), "lost decreases: %s" % lost
    assert lost[-1] > 0, "steps missing (%d) but lost is 0" % absent
    assert int(incomplete[-1]) == partial, (int(incomplete[-1]), partial)
    assert int(lost[-1]) == missing, \
        "lost %d, but %d snapshot messages are not in the file" % (int(lost[-1]), missing)
    assert not final_drops, final_drops


# ---------------------------------------------------------------- main

CASES = {
    "kill_restart": case_kill_restart,
}


def main():
    names = sys.argv[1:] or list(CASES)
    c = Results()
    t0 = time.time()
    for name in names:
        c.check(name, CASES[name])
    print("total %.1fs" % (time.time() - t0))
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
