"""Daemon CPU per layer: whole layers from one sender vs the same layers as
4 head parts from 4 senders (PROTOCOL.md 7b), side by side in one run.
--rows: 4 parts by rows (context parallel) instead of by heads."""
import os
import sys
import time
sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")), "tests", "e2e"))
import numpy as np
from swharness import Daemon, Sender, random_probs

L, H, R, K, STEPS = 12, 16, 64, 1024, 12
BY_ROWS = "--rows" in sys.argv[1:]
rng = np.random.default_rng(1)
data = [random_probs(rng, H, R, K, dtype=np.float16) for _ in range(L)]

def cpu(pid):
    f = open("/proc/%d/stat" % pid).read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def wait_steps(d, run, n):
    import h5py
    t0 = time.time()
    while time.time() - t0 < 120:
        try:
            with h5py.File(d.run_file(run), "r", libver="latest", swmr=True) as f:
                if f["step"].shape[0] >= n:
                    return
        except (OSError, KeyError):
            pass
        time.sleep(0.05)
    raise SystemExit("timeout")

def run_whole(d, run):
    s = Sender(d.listen, run, L, H, model="m")
    c0 = cpu(d.proc.pid)
    for st in range(STEPS):
        for l in range(L):
            s.snapshot(st, l, data[l], inc=5)
    wait_steps(d, run, STEPS)
    return cpu(d.proc.pid) - c0

def run_parts(d, run):
    inc = (int(time.time() * 1e6) << 12) | 7
    ss = [Sender(d.listen, run, L, H, model="m") for _ in range(4)]
    c0 = cpu(d.proc.pid)
    for st in range(STEPS):
        for l in range(L):
            for k, s in enumerate(ss):
                if BY_ROWS:
                    q = R // 4
                    s.snapshot(st, l, np.ascontiguousarray(data[l][:, q * k:q * k + q]), v=2,
                               inc=inc, rank=k, senders=4, row0=q * k, rows=R)
                else:
                    s.snapshot(st, l, np.ascontiguousarray(data[l][4 * k:4 * k + 4]), v=2,
                               inc=inc, rank=k, senders=4, head0=4 * k)
    wait_steps(d, run, STEPS)
    return cpu(d.proc.pid) - c0

# a run of each first, not counted (the daemon's first run pays its start-up),
# then whole and parts in the order A B B A, twice
d = Daemon(extra=["--budget-mb", "2048"]).start()
w, p = [], []
try:
    run_whole(d, "warm-w")
    run_parts(d, "warm-p")
    for i in range(2):
        w.append(run_whole(d, "whole%d" % (2 * i)))
        p.append(run_parts(d, "parts%d" % (2 * i)))
        p.append(run_parts(d, "parts%d" % (2 * i + 1)))
        w.append(run_whole(d, "whole%d" % (2 * i + 1)))
    traffic = d.status()["traffic"]
finally:
    d.stop()
n = L * STEPS
w, p = sum(w) / len(w), sum(p) / len(p)
print("layer %dx%dx%d f16 (%.1f MiB), %d layers each way, 4 runs of each" % (H, R, K, H * R * K * 2 / 2**20, n))
print("parts kept as they came %s, copied %s" % (traffic.get("parts_kept", "-"), traffic.get("parts_copied", "-")))
print("daemon CPU per layer: whole %.2f ms, 4 %s parts %.2f ms, ratio %.2f" % (
    1e3 * w / n, "row" if BY_ROWS else "head", 1e3 * p / n, p / w))
