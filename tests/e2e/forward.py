#!/usr/bin/python3
"""Scale-out (issue 15): `sinkwatch forward` between training jobs and
several daemons that connect to it (sinkwatchd --connect) and each take
the runs of their prefixes (--subscribe, repeatable).

- routing: two daemons (own data directories, disjoint prefixes) behind one
  forwarder; several runs: every run is stored whole, and only, in the
  daemon whose prefix it matches, its values those of what was sent; the
  forwarder's counters add up (received = forwarded + dropped by reason),
  oversized and malformed messages dropped and counted, never forwarded;
  `sinkwatch status` over both daemons and the forwarder; `sinkwatch
  report` over both data directories;
- nodrop: a subscriber that never reads: the forwarder holds, then drops
  and counts (hwm), never loses a message without a count;
- lock: two daemons on one data directory with overlapping prefixes: one
  writes the run, the other refuses it (locked), the file holds each step
  once;
- since: a forwarder bound on tcp://localhost:P (as 127.0.0.1) passes a
  run; its status says since when its counters count, and that they
  restart with it (issue 26).

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/forward.py [CASE...]
"""
import calendar
import os
import re
import signal
import sys
import tempfile
import time

import h5py
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Forwarder, Results,  # noqa: E402
                       free_port, random_probs, run_cmd, sender_for)

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)


def balanced(st):
    """received = forwarded + every drop + the one held."""
    t, d = st["traffic"], st["drops"]
    drops = sum(d[k] for k in ("too_large", "frames", "hwm", "no_subscriber", "send_error"))
    assert d["dropped"] == drops, st
    return t["received"] == t["forwarded"] + drops + t["held"]


def send_run(endpoint, run, rng, steps, layers=2, heads=3, rows=6, keys=10):
    """Streams a run; returns {step: [layers] of the probs sent} and the count."""
    s = sender_for(endpoint, run, layers, heads)
    sent = {}
    for step in steps:
        sent[step] = []
        for layer in range(layers):
            p = random_probs(rng, heads, rows, keys, dtype=np.float64)
            s.snapshot(step, layer, p)
            sent[step].append(p)
    s.end()
    s.close()
    return sent, len(steps) * layers + 1


def check_file(path, sent):
    """The file holds exactly the steps sent, each whole, with the values of
    the tensors sent (sink_mass, METRICS.md §1: the mean sink mass)."""
    with h5py.File(path, "r") as f:
        steps = list(f["step"][:])
        assert steps == sorted(sent), (path, steps, sorted(sent))
        assert not f["missing"][:].any(), "layers missing in " + path
        sm = f["sink_mass"][:]
        for i, st in enumerate(steps):
            want = np.array([p[:, :, 0].mean(axis=1) for p in sent[st]])
            assert np.allclose(sm[i], want, rtol=1e-9, atol=1e-12), (path, st, sm[i], want)
        assert f["ended"][-1] == 1


def case_routing():
    tmp = tempfile.mkdtemp(prefix="sinkwatch-fwd-")
    fw = Forwarder(tmp, ["--max-message-mb", "1"]).start()
    a = Daemon(tmp=tmp, data_dir=os.path.join(tmp, "a"),
               extra=["--connect", fw.out, "--subscribe", "alpha/"]).start()
    b = Daemon(tmp=tmp, data_dir=os.path.join(tmp, "b"),
               extra=["--connect", fw.out, "--subscribe", "beta/", "--subscribe", "gamma/"]).start()
    try:
        st = fw.wait(lambda s: s["subscriptions"]["prefixes"] == 3, what="3 subscriptions")
        assert sorted(st["subscriptions"]["prefix"]) == ["sw/alpha/", "sw/beta/", "sw/gamma/"], st
        assert b.status()["server"]["connect"] == fw.out
        rng = np.random.default_rng(15)
        runs = {"alpha/r1": a, "alpha/r2": a, "beta/r1": b, "gamma/x": b}
        sent, count = {}, {a: 0, b: 0}
        for i, (run, d) in enumerate(sorted(runs.items())):
            steps = list(range(0, 5 * (i + 2), 5))
            sent[run], n = send_run(fw.inp, run, rng, steps)
            count[d] += n
        for run, d in runs.items():
            d.wait_ended(run)
        # what the forwarder must drop, counted: a frame over the cap (1 MiB),
        # a message of 1 frame; neither reaches the daemon
        bad = sender_for(fw.inp, "alpha/bad", 1, 1)
        big = np.full((1, 1, 300000), 1 / 300000, dtype=np.float32)  # 1.2 MB tensor
        bad.snapshot(0, 0, big)
        bad.s.send(b"sw/alpha/bad")
        bad.close()
        st = fw.wait(lambda s: s["drops"]["too_large"] == 1 and s["drops"]["frames"] == 1,
                     what="the two drops")
        total = sum(count.values())
        assert st["traffic"]["received"] == total + 2, (st, total)
        assert st["traffic"]["forwarded"] == total, (st, total)
        assert balanced(st) and st["traffic"]["held"] == 0, st
        assert st["drops"]["hwm"] == st["drops"]["no_subscriber"] == 0, st
        assert st["drops"]["dropped_bytes"] > 1200000, st
        for d in (a, b):
            s = d.wait(lambda s, d=d: s["traffic"]["messages"] == count[d],
                       what="every message")
            assert sum(v for k, v in s["drops"].items() if k != "run") == 0, s["drops"]
        for run, d in runs.items():
            check_file(d.run_file(run), sent[run])
            other = b if d is a else a
            assert not os.path.exists(other.run_file(run)), "%s stored twice" % run
        assert sorted(os.listdir(a.data)) == [".sinkwatchd.lock", "alpha%2Fr1.h5",
                                              "alpha%2Fr2.h5"], os.listdir(a.data)
        assert sorted(n for n in os.listdir(b.data) if n.endswith(".h5")) == \
            ["beta%2Fr1.h5", "gamma%2Fx.h5"], os.listdir(b.data)
        # status over several control endpoints: each reply under its name
        rc, out, err = run_cmd([SINKWATCH, "status", "--control", a.control,
                                "--control", b.control, "--control", fw.control, "traffic"])
        assert rc == 0, (rc, out, err)
        parts = re.split(r"^== (\S+) ==$", out, flags=re.M)[1:]
        got = dict(zip(parts[0::2], parts[1::2]))
        assert list(got) == [a.control, b.control, fw.control], out
        for d in (a, b):
            assert re.search(r"^messages: %d$" % count[d], got[d.control], re.M), out
        assert re.search(r"^forwarded: %d$" % total, got[fw.control], re.M), out
        # one endpoint down: the others still answer, the exit status says so
        rc, out, err = run_cmd([SINKWATCH, "status", "--timeout-ms", "300", "--control",
                                "tcp://127.0.0.1:%d" % free_port(), "--control", a.control,
                                "server"])
        assert rc == 2 and "no answer from" in err and "data_dir: " + a.data in out, (rc, out, err)
        # a report over both data directories: every run, once
        rc, out, err = run_cmd([SINKWATCH, "report", a.data, b.data])
        assert rc == 0, (rc, out, err)
        assert out.startswith("4 runs compared"), out
        for run, d in runs.items():
            assert len(re.findall(r" %s$" % re.escape(d.run_file(run)), out, re.M)) == 1, \
                (run, out)
    finally:
        assert a.stop() == 0, a.read_log()
        assert b.stop() == 0, b.read_log()
        assert fw.stop() == 0, fw.read_log()
    log = fw.read_log()
    assert "stopped: received %d, forwarded %d" % (total + 2, total) in log, log


def case_nodrop():
    """A daemon's pipe full: the forwarder holds, pushes back, then drops
    and counts (hwm); every message received is accounted for."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-fwd-")
    fw = Forwarder(tmp, ["--hwm", "2", "--hwm-wait-ms", "50"]).start()
    ctx = zmq.Context.instance()
    stuck = ctx.socket(zmq.SUB)  # subscribes and never reads
    stuck.setsockopt(zmq.RCVHWM, 1)
    stuck.setsockopt(zmq.RCVBUF, 4096)
    stuck.setsockopt(zmq.LINGER, 0)
    stuck.setsockopt(zmq.SUBSCRIBE, b"sw/slow/")
    stuck.connect(fw.out)
    try:
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 1, what="the subscription")
        s = sender_for(fw.inp, "slow/r", 1, 1)
        tensor = np.full((1, 64, 4096), 1 / 4096, dtype=np.float32)  # 1 MiB
        n = 60
        for step in range(n):
            s.snapshot(step, 0, tensor)
        st = fw.wait(lambda s: s["traffic"]["received"] == n and s["traffic"]["held"] == 0,
                     timeout=60, what="every message taken")
        assert balanced(st), st
        assert st["drops"]["hwm"] > 0 and st["traffic"]["stalls"] > 0, st
        assert st["traffic"]["forwarded"] + st["drops"]["hwm"] == n, st
        assert st["traffic"]["stalled_ms"] >= 50 * st["drops"]["hwm"], st
        s.close()
    finally:
        stuck.close()
        assert fw.stop() == 0, fw.read_log()


def case_lock():
    """Two daemons, one data directory, overlapping prefixes: the run is
    written by one, refused by the other (counted: locked), stored once."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-fwd-")
    data = os.path.join(tmp, "shared")
    fw = Forwarder(tmp).start()
    c = Daemon(tmp=tmp, data_dir=data, extra=["--connect", fw.out, "--subscribe", "lock/"]).start()
    d = Daemon(tmp=tmp, data_dir=data, extra=["--connect", fw.out, "--subscribe", "lock/a",
                                               "--subscribe", "solo/"]).start()
    try:
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 3, what="3 subscriptions")
        rng = np.random.default_rng(7)
        sent, n = send_run(fw.inp, "lock/a1", rng, list(range(8)))
        solo, m = send_run(fw.inp, "solo/x", rng, list(range(3)))
        path = c.wait_ended("lock/a1")
        d.wait_ended("solo/x")
        c.wait(lambda s: s["traffic"]["messages"] == n, what="c: every message")
        d.wait(lambda s: s["traffic"]["messages"] == n + m, what="d: every message")
        # one of the two took the run: the other counts every layer it computed
        # (n - 1: the end is no step) as locked, and nothing else; the writer
        # of the one behind may still be at work: wait for it. The lock of an
        # ended run stays held, so even a daemon far behind cannot take it.
        deadline = time.time() + 30
        while True:
            sc, sd = c.status(), d.status()
            locked = sorted([sc["drops"]["locked"], sd["drops"]["locked"]])
            if locked == [0, n - 1] or time.time() > deadline:
                break
            time.sleep(0.05)
        assert locked == [0, n - 1], (sc["drops"], sd["drops"])
        for s in (sc, sd):
            assert s["drops"]["write_error"] == 0 and s["writer"]["write_errors"] == 0, s
        loser = c if sc["drops"]["locked"] else d
        assert "refused: run lock/a1: another process writes it" in loser.read_log(), \
            loser.read_log()
        check_file(path, sent)
        check_file(d.run_file("solo/x"), solo)
        with h5py.File(path, "r") as f:
            assert len(f["step"]) == 8, "the run was written twice"
        assert sorted(os.listdir(data)) == [".sinkwatchd.lock", "lock%2Fa1.h5", "solo%2Fx.h5"], \
            os.listdir(data)
        # one daemon far behind (stopped while the run streams; the forwarder
        # queues for it): the other stores and ends the run and keeps its lock,
        # so the late one refuses it instead of storing it again (as a new
        # generation of an ended run)
        before = d.status()["drops"]["locked"]
        d.proc.send_signal(signal.SIGSTOP)
        try:
            sent2, n2 = send_run(fw.inp, "lock/a2", rng, list(range(5)))
            path2 = c.wait_ended("lock/a2")
        finally:
            d.proc.send_signal(signal.SIGCONT)
        d.wait(lambda s: s["traffic"]["messages"] == n + m + n2 and
               s["drops"]["locked"] == before + n2 - 1, what="d: the late run refused")
        check_file(path2, sent2)
        assert "lock%2Fa2@2.h5" not in os.listdir(data), os.listdir(data)
    finally:
        assert c.stop() == 0, c.read_log()
        assert d.stop() == 0, d.read_log()
        assert fw.stop() == 0, fw.read_log()
    # two daemons started on one directory both ran: neither refused to start
    assert "another sinkwatchd writes to %s too" % data in d.read_log(), d.read_log()


def case_takeover():
    """Issue 27, item 6: two daemons on one directory take one run; the one
    that writes it is SIGKILLed while the job keeps sending: the other
    tries the lock again, takes the run over within seconds and stores the
    rest of it."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-fwd-")
    data = os.path.join(tmp, "shared")
    fw = Forwarder(tmp).start()
    a = Daemon(tmp=tmp, data_dir=data, extra=["--connect", fw.out, "--subscribe", "take/"]).start()
    b = Daemon(tmp=tmp, data_dir=data, extra=["--connect", fw.out, "--subscribe", "take/"]).start()
    try:
        fw.wait(lambda s: s["subscriptions"]["prefixes"] >= 1 and
                s["traffic"].get("subscribers", 2) >= 2, what="2 subscribers")
        time.sleep(0.5)
        rng = np.random.default_rng(11)
        s = sender_for(fw.inp, "take/r", 1, 2)
        for step in range(3):
            s.snapshot(step, 0, random_probs(rng, 2, 3, 8, dtype=np.float64), inc=77)
        deadline = time.time() + 20
        while True:     # the holder wrote them; the other counted them locked
            sa, sb = a.status(), b.status()
            if sorted([sa["drops"]["locked"], sb["drops"]["locked"]]) == [0, 3]:
                break
            assert time.time() < deadline, (sa["drops"], sb["drops"])
            time.sleep(0.05)
        holder, other = (a, b) if sb["drops"]["locked"] else (b, a)
        holder.wait(lambda st: st["writer"]["flushes"] >= 1, what="the holder's flush")
        holder.stop(signal.SIGKILL)
        t0 = time.time()
        step = 3
        while time.time() - t0 < 12:    # the job goes on
            s.snapshot(step, 0, random_probs(rng, 2, 3, 8, dtype=np.float64), inc=77)
            step += 1
            time.sleep(0.3)
        last = step
        h = {"v": 1, "type": "end", "run": "take/r", "seq": s.seq, "time": time.time(),
             "inc": 77}
        import msgpack
        s.send_frames([msgpack.packb(h)])
        path = other.wait_ended("take/r", timeout=30)
        s.close()
        assert "the run is taken over" in other.read_log(), other.read_log()[-2000:]
        with h5py.File(path, "r") as f:
            steps = f["step"][:].tolist()
        # within 5 s (the retry) and a step of the kill, the rest is stored
        assert steps[-1] == last - 1 and len([x for x in steps if x >= 3]) >= (last - 3) - 20, \
            (steps, last)
        st = other.status()
        assert st["drops"]["locked"] < last, st["drops"]
    finally:
        other.stop()
        fw.stop()


def case_errors():
    """Bad options: exit 2 and a message naming what was wrong."""
    p = "tcp://127.0.0.1:%d" % free_port()
    for args, want in [
            (["--in", "foo"], "--in: cannot bind foo"),
            (["--hwm", "0"], "--hwm: '0' is not an integer in [1, 1000000]"),
            (["--hwm-wait-ms", "-2"], "--hwm-wait-ms: '-2' is not -1 or an integer"),
            (["--max-message-mb", "x"], "--max-message-mb: 'x' is not an integer"),
            (["--in", p, "--out", p], "--in, --out and --control must be three endpoints"),
            (["--nope"], "unknown option '--nope'"),
            (["--hwm"], "unknown option '--hwm' (or its value is missing)")]:
        rc, out, err = run_cmd([SINKWATCH, "forward"] + args)
        assert rc == 2 and want in err, (args, rc, err)
    d = Daemon()
    rc, out, err = run_cmd([SINKWATCHD, "--connect", "foo", "--control", d.control,
                            "--data-dir", d.data])
    assert rc == 2 and "cannot connect to foo" in err, (rc, err)
    rc, out, err = run_cmd([SINKWATCHD, "--subscribe", "a\x01", "--check-config"])
    assert rc == 2 and "subscribe: byte 0x01 at 1" in err, (rc, err)


def case_since():
    """localhost endpoints on both sides, and the counters' start."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-fwd-")
    fw = Forwarder(tmp)
    fw.inp, fw.out, fw.control = ("tcp://localhost:%d" % free_port() for _ in range(3))
    t0 = time.time()
    fw.start()
    d = Daemon(tmp=tmp, extra=["--connect", fw.out])
    d.listen = "tcp://localhost:%d" % d.port        # not bound with --connect
    d.control = "tcp://localhost:%d" % d.cport
    d.start()
    try:
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 1, what="the daemon's subscription")
        sent, n = send_run(fw.inp, "since/r", np.random.default_rng(26), [0, 5])
        d.wait_ended("since/r")
        st = fw.wait(lambda s: s["traffic"]["forwarded"] == n, what="the run forwarded")
        rc, out, err = run_cmd([SINKWATCH, "status", "--control", fw.control, "server"])
    finally:
        assert d.stop() == 0
        assert fw.stop() == 0
    check_file(d.run_file("since/r"), sent)
    since = st["server"]["counters_since"]
    m = re.fullmatch(r"(\S+) \(they restart with the forwarder\)", since)
    assert m, since
    t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    assert t0 - 2 <= t <= time.time() + 1, (since, t0)
    assert rc == 0 and "\ncounters_since: %s\n" % since in out, (rc, out, err)


def main():
    cases = {"routing": case_routing, "nodrop": case_nodrop, "lock": case_lock,
             "takeover": case_takeover,
             "errors": case_errors, "since": case_since}
    want = sys.argv[1:] or list(cases)
    r = Results()
    for name in want:
        r.check(name, cases[name])
    return r.finish()


if __name__ == "__main__":
    sys.exit(main())
