#!/usr/bin/python3
"""`make bench` (scale-out, doc/DEPLOYMENT.md): what one daemon holds with
zero drops, what `sinkwatch forward` passes, and one forwarder with two
daemons, on this machine.

- daemon: a sender keeps at most WINDOW steps ahead of what the daemon has
  written (it asks the control socket), so the daemon runs flat out and
  drops nothing; messages/s and bytes/s are what it received and stored
  over the run, from the first send to the last step written. Asserts
  zero drops and every step written.
- forward: a sender (NODROP, blocking: back-pressure, no loss) through the
  forwarder to a plain SUB that only counts; the same sender straight to
  the SUB beside it, for what the two ends alone allow. Asserts every
  message arrived and the forwarder's counters balance with no drop.
- forward + 2 daemons: two runs, one per daemon (own prefixes and data
  directories), each paced on its daemon as above. Asserts zero drops.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 bench/scale.py [--seconds S] [--out FILE]
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import numpy as np
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SW_SRCDIR", os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from swharness import Daemon, Forwarder, Sender, free_port, random_probs, sender_for  # noqa: E402

WINDOW = 4  # steps a sender keeps in flight ahead of the daemon

# message shapes: (name, layers, heads, rows, keys, dtype)
SHAPES = [("32 KiB", 4, 8, 16, 128, np.float16),
          ("1.5 MiB", 4, 12, 64, 1024, np.float16)]


def cpu_s(pid):
    """User + system CPU seconds of a process, all its threads."""
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def drops(st):
    return sum(v for k, v in st["drops"].items() if k != "run")


class Paced:
    """A run streamed at the pace of one daemon: at most WINDOW steps
    ahead of the steps it has written."""

    def __init__(self, endpoint, daemon, run, shape, rng):
        _, self.L, H, R, K, dt = shape
        self.d, self.run = daemon, run
        self.s = sender_for(endpoint, run, self.L, H)
        self.tensors = [random_probs(rng, H, R, K, dtype=dt) for _ in range(8)]
        self.bytes = self.tensors[0].nbytes
        self.step = 0
        self.base = daemon.status()["writer"]["steps_written"]

    def written(self):
        return self.d.status()["writer"]["steps_written"] - self.base

    def pump(self):
        """Sends a step if the window allows; False if it must wait."""
        if self.step - self.written() >= WINDOW:
            return False
        for layer in range(self.L):
            self.s.snapshot(self.step, layer, self.tensors[(self.step + layer) % 8])
        self.step += 1
        return True

    def finish(self, timeout=120):
        deadline = time.time() + timeout
        while self.written() < self.step:
            assert time.time() < deadline, "%s: steps not written" % self.run
            time.sleep(0.005)
        self.s.close()


def paced(pairs, seconds):
    """Runs every Paced of pairs for about seconds; (messages, bytes, seconds)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if not any([p.pump() for p in pairs]):
            time.sleep(0.002)
    for p in pairs:
        p.finish()
    dt = time.perf_counter() - t0
    msgs = sum(p.step * p.L for p in pairs)
    return msgs, sum(p.step * p.L * p.bytes for p in pairs), dt


def bench_daemon(shape, seconds, rng):
    d = Daemon(extra=["--budget-mb", "1024"]).start()
    try:
        p = Paced(d.listen, d, "bench/one", shape, rng)
        c0 = cpu_s(d.proc.pid)
        msgs, nbytes, dt = paced([p], seconds)
        cpu = cpu_s(d.proc.pid) - c0
        st = d.status()
        assert drops(st) == 0, st["drops"]
        assert st["traffic"]["messages"] == msgs, (st["traffic"], msgs)
    finally:
        assert d.stop() == 0
    return {"messages_per_s": msgs / dt, "bytes_per_s": nbytes / dt, "messages": msgs,
            "cpu_us_per_message": cpu / msgs * 1e6}


class Counter(threading.Thread):
    """A SUB that receives and counts whole messages until told to stop."""

    def __init__(self, endpoint, prefix=b"sw/"):
        super().__init__(daemon=True)
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, prefix)
        self.sock.setsockopt(zmq.RCVTIMEO, 100)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = endpoint
        self.n = self.bytes = 0
        self.stop = False

    def start_bound(self):
        self.sock.bind(self.endpoint)
        self.start()
        return self

    def start_connected(self):
        self.sock.connect(self.endpoint)
        self.start()
        return self

    def run(self):
        while not self.stop:
            try:
                parts = self.sock.recv_multipart(copy=False)
            except zmq.Again:
                continue
            self.n += 1
            self.bytes += sum(len(p) for p in parts)
        self.sock.close()


def blast(endpoint, counter, size, seconds):
    """Sends as fast as back-pressure lets for about seconds; (msgs, bytes, s)."""
    s = Sender(endpoint, "bench/fwd", 1, 1)
    frame = b"\0" * size
    hdr = b"h" * 100
    t0 = time.perf_counter()
    sent = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(64):
            s.send_frames([hdr, frame])
        sent += 64
    deadline = time.time() + 60
    while counter.n < sent and time.time() < deadline:
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    s.close()
    assert counter.n == sent, (counter.n, sent)
    return sent, sent * (size + 100 + len(b"sw/bench/fwd")), dt


def bench_forward(size, seconds):
    tmp = tempfile.mkdtemp(prefix="sinkwatch-bench-")
    # the two ends alone
    direct = "tcp://127.0.0.1:%d" % free_port()
    c = Counter(direct).start_bound()
    n, b, dt = blast(direct, c, size, seconds)
    c.stop = True
    c.join()
    base = n / dt
    fw = Forwarder(tmp, ["--hwm-wait-ms", "-1"]).start()
    try:
        c = Counter(fw.out).start_connected()
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 1, what="the subscription")
        c0 = cpu_s(fw.proc.pid)
        n, b, dt = blast(fw.inp, c, size, seconds)
        cpu = cpu_s(fw.proc.pid) - c0
        c.stop = True
        c.join()
        st = fw.status()
        t = st["traffic"]
        assert t["received"] == t["forwarded"] == n and st["drops"]["dropped"] == 0, st
    finally:
        assert fw.stop() == 0
    return {"messages_per_s": n / dt, "bytes_per_s": b / dt, "direct_messages_per_s": base,
            "messages": n, "cpu_us_per_message": cpu / n * 1e6}


def bench_two(shape, seconds, rng):
    tmp = tempfile.mkdtemp(prefix="sinkwatch-bench-")
    fw = Forwarder(tmp).start()
    ds = [Daemon(tmp=tmp, data_dir=os.path.join(tmp, x), extra=[
        "--connect", fw.out, "--subscribe", x + "/", "--budget-mb", "1024"]).start()
        for x in ("a", "b")]
    try:
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 2, what="2 subscriptions")
        pairs = [Paced(fw.inp, d, x + "/run", shape, rng) for d, x in zip(ds, ("a", "b"))]
        msgs, nbytes, dt = paced(pairs, seconds)
        for d in ds:
            assert drops(d.status()) == 0, d.status()["drops"]
        st = fw.status()
        assert st["drops"]["dropped"] == 0 and st["traffic"]["forwarded"] == msgs, st
    finally:
        for d in ds:
            assert d.stop() == 0
        assert fw.stop() == 0
    return {"messages_per_s": msgs / dt, "bytes_per_s": nbytes / dt, "messages": msgs}


def mb(x):
    return "%.1f MB/s" % (x / 1e6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    res = {"cpus": os.cpu_count(), "load_1min": os.getloadavg()[0], "daemon": {},
           "forward": {}, "forward_2_daemons": {}}
    print("scale-out bench: %d CPUs, load %.1f, %.0f s a figure"
          % (res["cpus"], res["load_1min"], a.seconds))
    for sh in SHAPES:
        name = "%s (%dx%dx%d %s)" % (sh[0], sh[2], sh[3], sh[4], np.dtype(sh[5]).name)
        r = bench_daemon(sh, a.seconds, rng)
        res["daemon"][name] = r
        print("one daemon, zero drops, %-28s %8.0f msg/s  %s  (%.0f us CPU a message)"
              % (name, r["messages_per_s"], mb(r["bytes_per_s"]), r["cpu_us_per_message"]))
    for size in (1024, 32768, 1 << 20):
        r = bench_forward(size, a.seconds)
        res["forward"][str(size)] = r
        print("forward, %7d B messages           %8.0f msg/s  %s  (%.1f us CPU a message; "
              "sender to SUB direct: %.0f msg/s)" % (size, r["messages_per_s"],
                                                     mb(r["bytes_per_s"]),
                                                     r["cpu_us_per_message"],
                                                     r["direct_messages_per_s"]))
    for sh in SHAPES:
        name = "%s (%dx%dx%d %s)" % (sh[0], sh[2], sh[3], sh[4], np.dtype(sh[5]).name)
        r = bench_two(sh, a.seconds, rng)
        res["forward_2_daemons"][name] = r
        print("forward + 2 daemons, zero drops, %-18s %8.0f msg/s  %s"
              % (sh[0], r["messages_per_s"], mb(r["bytes_per_s"])))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
