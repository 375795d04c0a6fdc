#!/usr/bin/python3
"""The Python client (contrib/python/sinkwatch) against the golden messages
and a real sinkwatchd: canonical re-encoding, the C decoder's error names,
the slow joiner, a burst right after connecting, incarnations, the daemon
down and back, blocking mode, bounded close and the final counters, every
dtype and kind, and the wire bytes against the C encoder's.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \\
        /usr/bin/python3 tests/python_client.py [CASE...]
"""
import ctypes
import math
import os
import queue
import shutil
import struct
import sys
import threading
import time
import warnings

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if not os.environ.get("SINKWATCHD"):
    print("SINKWATCHD not set: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(SRCDIR, "tests"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

import sinkwatch  # noqa: E402
from sinkwatch import proto  # noqa: E402
from swharness import SINKWATCHD, Daemon, Results, free_port, random_probs  # noqa: E402

GOLDEN = os.path.join(SRCDIR, "tests", "data", "golden")
NP_OF = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bf16": np.uint16}


def golden():
    """[(name, errname, frames)] from MANIFEST."""
    out = []
    with open(os.path.join(GOLDEN, "MANIFEST")) as f:
        for line in f:
            if line.strip():
                name, err = line.split()
                with open(os.path.join(GOLDEN, name), "rb") as g:
                    out.append((name, err, proto.parse_golden(g.read())))
    assert len(out) >= 40, len(out)
    return out


def to_bf16(x):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def rowstats(p, k=0):
    """[heads, rows, 6] statistics s, w, H, hb, Hc, b of rows without zeros."""
    p = p.astype(np.float64)
    D = p.shape[-1]
    s = p[..., k]
    c = np.delete(p, k, axis=-1)
    w = c.sum(-1)
    H = -(p * np.log(p)).sum(-1)
    hb = -(s * np.log(s) + w * np.log(w))
    cn = c / w[..., None]
    Hc = -(cn * np.log(cn)).sum(-1)
    b = math.sqrt((D - 1) / D) * (np.log(s) - np.log(c).mean(-1))
    return np.stack([s, w, H, hb, Hc, b], axis=-1)


def wait_ended(d, run, timeout=20):
    return d.wait_ended(run, timeout)


def steps_of(path):
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        return [int(s) for s in f["step"][:]]


def lost_of(path):
    """Messages the daemon counted as lost by seq, as of the last step row."""
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        return int(f["lost"][-1])


def bad_decodes(st):
    return {k: v for k, v in st["drops"].items() if k.startswith("bad_") and v}


# ------------------------------------------------------------ golden messages

def t_golden_reencode():
    n = 0
    for name, err, frames in golden():
        if err != "ok":
            continue
        d = proto.decode_header(frames[1])
        h = proto.encode_header(d)
        assert h == frames[1], "%s: re-encoded header differs:\n%s\n%s" % (
            name, h.hex(), frames[1].hex())
        m = proto.decode_message(frames)
        assert proto.encode_header(m) == frames[1], name
        assert proto.topic(m["run"]) == frames[0], name
        if m["type"] == "snapshot":
            assert bytes(m["tensor"]) == frames[2], name
        n += 1
    assert n == 6, n


def t_golden_worked_example():
    frames = proto.parse_golden(open(os.path.join(GOLDEN, "snap_probs_f32.msg"), "rb").read())
    d = proto.decode_header(frames[1])
    want = {"v": 1, "type": "snapshot", "run": "pythia-160m/seed1", "seq": 3,
            "model": "pythia-160m", "params": 162322944, "layers": 12, "heads": 2,
            "sink": 0, "fixed_probe": True, "step": 1000, "layer": 5, "kind": "probs",
            "dtype": "f32", "shape": [2, 3, 4], "qpos": [1, 2, 3], "time": 1796083200.5,
            "tensor_bytes": 96}
    assert d == want, d
    assert len(frames[1]) == 180 and frames[1][:3] == b"\xde\x00\x11"
    e = proto.decode_header(proto.parse_golden(
        open(os.path.join(GOLDEN, "end_time.msg"), "rb").read())[1])
    assert e == {"v": 1, "type": "end", "run": "pythia-160m/seed1", "seq": 5,
                 "time": 1796083260.5}, e


def t_golden_bad_message():
    """decode_message (all 16 checks in order) names every MANIFEST error."""
    wrong = []
    for name, err, frames in golden():
        if err == "ok":
            continue
        try:
            proto.decode_message(frames)
            wrong.append("%s: decoded, expected %s" % (name, err))
        except proto.ProtocolError as e:
            if e.errname != err:
                wrong.append("%s: %s (%s), expected %s" % (name, e.errname, e.detail, err))
            assert isinstance(e, ValueError) and e.code == proto.errors.code(err)
    assert not wrong, "\n".join(wrong)


def t_golden_bad_header():
    """decode_header plus the envelope checks done by hand (frame count,
    topic via topic(), tensor size via tensor_bytes) give the MANIFEST name."""
    wrong = []
    for name, err, frames in golden():
        if err == "ok":
            continue
        got = None
        try:
            if len(frames) not in (2, 3):
                got = "frames"
            elif not (4 <= len(frames[0]) <= 131 and frames[0].startswith(b"sw/")):
                got = "topic"
            else:
                d = proto.decode_header(frames[1], nframes=len(frames))
                if proto.topic(d["run"]) != frames[0]:
                    got = "topic"
                elif d["type"] == "snapshot" and d["tensor_bytes"] != len(frames[2]):
                    got = "dims"
        except proto.ProtocolError as e:
            got = e.errname
        if got != err:
            wrong.append("%s: %s, expected %s" % (name, got, err))
    assert not wrong, "\n".join(wrong)


def t_header_only_names():
    """decode_header alone (no frames) on header faults: the same names; a
    header that passes must owe its fault to the frames (count, topic, size)."""
    header_faults = 0
    for name, err, frames in golden():
        if err == "ok":
            continue
        try:
            d = proto.decode_header(frames[1])
        except proto.ProtocolError as e:
            assert e.errname == err or err == "topic" and e.errname == "limit", \
                (name, e.errname, e.detail, err)
            header_faults += e.errname == err
            continue
        assert err in ("frames", "topic", "dims"), (name, err)
        if err == "dims":
            assert d["tensor_bytes"] != len(frames[2]), name
    assert header_faults >= 25, header_faults


def t_encode_validation():
    base = {"type": "snapshot", "run": "r", "seq": 0, "layers": 2, "heads": 2, "step": 1,
            "layer": 0, "kind": "probs", "dtype": "f32", "shape": [2, 1, 4],
            "tensor_bytes": 32}
    proto.encode_header(base)
    cases = [({"layers": 0}, "limit", "layers"), ({"heads": 3}, "dims", "shape[0]"),
             ({"layer": 2}, "limit", "layer"), ({"step": -1}, "limit", "step"),
             ({"tensor_bytes": 31}, "dims", "tensor"), ({"sink": 4}, "limit", "sink"),
             ({"kind": "rowstats"}, "kind", "rowstats"), ({"dtype": "i8"}, "dtype", "dtype"),
             ({"kind": "nope"}, "kind", "kind"), ({"run": ""}, "limit", "run"),
             ({"run": "a\x01"}, "field", "run"), ({"model": "m" * 257}, "limit", "model"),
             ({"model": "a\0b"}, "field", "model"), ({"qpos": [1, 2]}, "dims", "qpos"),
             ({"qpos": [1 << 32]}, "limit", "qpos"), ({"qpos": [-1]}, "field", "qpos"),
             ({"type": "x"}, "type", "type"), ({"shape": [2, 0, 4]}, "limit", "rows"),
             ({"seq": 1 << 64}, "limit", "seq"), ({"layers": "2"}, "field", "layers")]
    for over, err, field in cases:
        f = dict(base, **over)
        try:
            proto.encode_header(f)
            raise AssertionError("accepted %r" % over)
        except ValueError as e:
            assert e.errname == err, (over, e.errname, err)
            assert field in str(e), (over, str(e))
    # canonical details: time only when finite, float64 even when whole; qpos forms
    h = proto.encode_header(dict(base, time=1796083200.0))
    assert h[-14:] == b"\xa4time\xcb" + struct.pack(">d", 1796083200.0), h.hex()
    assert h[0] == 0xde
    assert proto.encode_header(dict(base, time=float("nan")))[0] == 0x8f
    assert proto.encode_header(dict(base, time=math.inf))[0] == 0x8f
    for rows in (15, 16, 40, 65535, 65536):
        q = [(i * 977) % 70000 for i in range(rows)]
        hq = proto.encode_header(dict(base, shape=[2, rows, 4], tensor_bytes=32 * rows,
                                      qpos=np.array(q, dtype=np.int64)))
        assert proto.decode_header(hq)["qpos"] == q
        assert proto.encode_header(dict(base, shape=[2, rows, 4], tensor_bytes=32 * rows,
                                        qpos=q)) == hq


# -------------------------------------------------------------- the client

def probs(rng, heads=2, rows=3, keys=8, dtype=np.float32):
    return random_probs(rng, heads, rows, keys, dtype=dtype)


def t_bad_arguments():
    port = free_port()
    c = sinkwatch.Client("args", layers=2, heads=2, endpoint="tcp://127.0.0.1:%d" % port,
                         linger=0.1)
    x = probs(np.random.default_rng(0))
    bad = [dict(layer=2), dict(layer=-1), dict(array=x[:1]), dict(array=x[0]),
           dict(array=x.astype(np.int32)), dict(array=x.view(np.uint16)[:, :, :8]),
           dict(dtype="f16"), dict(kind="rowstats"), dict(kind="weights"),
           dict(qpos=[1, 2]), dict(step=-1), dict(dtype="nope"), dict(step=1.5)]
    for over in bad:
        kw = dict(step=0, layer=0, array=x)
        kw.update(over)
        try:
            c.send(kw.pop("step"), kw.pop("layer"), kw.pop("array"), **kw)
            raise AssertionError("accepted %r" % (over,))
        except ValueError:
            pass
    assert c.stats["next_seq"] == 0, c.stats
    for kw in (dict(run=""), dict(run="x" * 129), dict(layers=0), dict(heads=1025),
               dict(model="m" * 257), dict(endpoint="nonsense://here")):
        args = dict(run="ok", layers=1, heads=1)
        args.update(kw)
        try:
            sinkwatch.Client(**args).close()
            raise AssertionError("accepted %r" % (kw,))
        except ValueError:
            pass
    assert c.send(0, 0, x) is True and c.stats["next_seq"] == 1
    assert c.end() is True
    for fn in (lambda: c.send(1, 0, x), c.end):
        try:
            fn()
            raise AssertionError("no ClosedError")
        except sinkwatch.ClosedError:
            pass
    c.close()
    c.close()
    try:
        c.send(1, 0, x)
        raise AssertionError("send after close")
    except sinkwatch.ClosedError:
        pass


def t_slow_joiner(d):
    """A burst right after connecting (24 layers x 10 steps, before any
    subscription can have arrived) reaches the daemon whole."""
    rng = np.random.default_rng(1)
    layers, steps = 24, 10
    n = layers * steps
    x = probs(rng)
    runs = ["py-joiner-%d" % i for i in range(3)]
    before = d.status()["traffic"]
    for run in runs:
        c = sinkwatch.Client(run, layers=layers, heads=2, endpoint=d.listen, model="m",
                             linger=10.0)
        for i in range(n):
            assert c.send(i // layers, i % layers, x) is True
        assert c.end() is True
        st = c.stats    # usually most queued: no subscription yet
        assert st["sent"] + st["queued"] == n + 1 and st["dropped"] == 0, st
        st = c.close()
        assert st == c.stats and st["sent"] == n + 1 and st["dropped"] == 0, st
    for run in runs:
        assert steps_of(wait_ended(d, run)) == list(range(steps))
    st = d.status()
    assert st["traffic"]["messages"] - before["messages"] == 3 * (n + 1), st["traffic"]
    assert not bad_decodes(st), bad_decodes(st)


def t_defaults():
    c = sinkwatch.Client("defaults", layers=1, heads=1,
                         endpoint="tcp://127.0.0.1:%d" % free_port(), linger=0)
    assert c.queue_max == 256 and c.queue_max_bytes == 256 << 20, c.queue_max
    assert c.block_timeout == 30.0 and c._block_ms == 30000, c.block_timeout
    assert c.resume_from is None
    assert c._sock.getsockopt(zmq.SNDHWM) == 16
    c.close()
    c = sinkwatch.Client("defaults", layers=1, heads=1, blocking=True, block_timeout=None,
                         endpoint="tcp://127.0.0.1:%d" % free_port(), linger=0)
    assert c._block_ms == -1     # None, set explicitly: for ever
    c.close()


def t_burst_after_new():
    """240 messages sent right after the Client is made, against a bound
    SUB: all kept, delivered in order, dropped == 0. By design, not by
    timing: the default queue holds the whole burst however late the
    subscription arrives."""
    layers, steps = 24, 10
    n = layers * steps
    x = probs(np.random.default_rng(11))
    cap = Capture()
    try:
        for rnd in range(5):
            run = "py-burst-%d" % rnd
            c = sinkwatch.Client(run, layers=layers, heads=2, endpoint=cap.endpoint)
            for i in range(n):
                assert c.send(i // layers, i % layers, x) is True, (rnd, i, c.stats)
            assert c.stats["dropped"] == 0, c.stats
            assert c.flush(10.0) == 0, c.stats
            for i in range(n):
                got = cap.recv(10.0)
                h = proto.decode_message(got)
                assert h["run"] == run and h["seq"] == i, (rnd, i, h["run"], h["seq"])
                assert h["step"] == i // layers and h["layer"] == i % layers, (rnd, i)
                assert h["inc"] == c.incarnation and "resume" not in h, h
            st = c.close()
            assert st == {"sent": n, "dropped": 0, "queued": 0, "bytes_sent": n * x.nbytes,
                          "next_seq": n, "subscribed": False}, st
    finally:
        cap.close()


def t_incarnation():
    """Every message of a client carries its incarnation, a later client's
    is greater, and resume_from travels in every message, the end included."""
    x = probs(np.random.default_rng(12))
    cap = Capture()
    prev = 0
    try:
        for rnd in range(3):
            resume = 1234 if rnd == 2 else None
            us = time.time_ns() // 1000
            c = sinkwatch.Client("py-inc", layers=1, heads=2, endpoint=cap.endpoint,
                                 resume_from=resume)
            inc = c.incarnation
            assert inc > prev and us <= inc >> 12 < us + 10_000_000, (inc, prev, us)
            prev = inc
            assert c.resume_from == resume
            for t in range(3):
                assert c.send(1235 + t, 0, x)
            try:
                c.resume_from = 7
                raise AssertionError("resume_from changed after a send")
            except ValueError:
                pass
            assert c.end()
            assert c.flush(5.0) == 0, c.stats
            for i in range(4):
                h = proto.decode_message(cap.recv(10.0))
                assert h["seq"] == i and h["type"] == ("snapshot" if i < 3 else "end"), h
                assert h["inc"] == inc, (h, inc)
                assert h.get("resume") == resume, h
            c.close()
        for bad in (-1, 1 << 63, 1.5, True, "3"):
            try:
                sinkwatch.Client("py-inc", layers=1, heads=1, endpoint=cap.endpoint,
                                 resume_from=bad).close()
                raise AssertionError("resume_from %r accepted" % (bad,))
            except ValueError:
                pass
        # settable before the first message (what sinkwatch.torch does)
        c = sinkwatch.Client("py-inc", layers=1, heads=2, endpoint=cap.endpoint)
        c.resume_from = 99
        assert c.send(100, 0, x) and c.flush(5.0) == 0
        assert proto.decode_message(cap.recv(10.0))["resume"] == 99
        c.close()
    finally:
        cap.close()


def t_down_then_up():
    d = Daemon()
    rng = np.random.default_rng(2)
    x = probs(rng)
    c = sinkwatch.Client("py-downup", layers=1, heads=2, endpoint=d.listen, linger=3.0,
                         queue_max=16)
    took = []
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in range(40):
            t0 = time.perf_counter()
            results.append(c.send(t, 0, x))
            took.append(time.perf_counter() - t0)
    ours = [w for w in caught if issubclass(w.category, sinkwatch.SinkwatchWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "no daemon" in str(ours[0].message), ours[0].message
    took.sort()
    assert took[len(took) // 2] < 0.002 and took[-1] < 0.05, \
        "sends took %.4f s (median), %.4f s (worst) with the daemon down" % (
            took[len(took) // 2], took[-1])
    print("     (send with the daemon down: median %.0f us, worst %.0f us)" % (
        took[len(took) // 2] * 1e6, took[-1] * 1e6))
    assert results == [True] * 16 + [False] * 24, results
    st = c.stats
    assert st == {"sent": 0, "dropped": 24, "queued": 16, "bytes_sent": 0, "next_seq": 40,
                  "subscribed": False}, st
    d.start()
    try:
        t0 = time.time()
        assert c.flush(5.0) == 0, c.stats
        st = c.stats
        assert st["subscribed"] and st["sent"] == 16 and st["queued"] == 0, st
        assert st["bytes_sent"] == 16 * x.nbytes, st
        for t in range(40, 45):
            assert c.send(t, 0, x) is True
        assert c.end() is True
        c.close()
        assert c.stats["sent"] == 22 and c.stats["dropped"] == 24, c.stats
        path = wait_ended(d, "py-downup")
        assert steps_of(path) == list(range(16)) + list(range(40, 45)), steps_of(path)
        st = d.status()
        assert st["traffic"]["messages"] == 22, st["traffic"]
        assert lost_of(path) == 24, lost_of(path)    # the seq gap of the drops
        print("     (daemon found after %.2f s)" % (time.time() - t0))
    finally:
        assert d.stop() == 0
        shutil.rmtree(d.tmp, ignore_errors=True)


def t_daemon_restart():
    d = Daemon().start()
    x = probs(np.random.default_rng(3))
    c = sinkwatch.Client("py-restart", layers=1, heads=2, endpoint=d.listen)
    try:
        assert c.send(0, 0, x) and c.flush(3.0) == 0
        d.wait(lambda s: s["traffic"]["steps_complete"] >= 1, what="step 0")
        d.stop()
        for _ in range(100):
            c.flush(0)
            if not c.stats["subscribed"]:
                break
            time.sleep(0.02)
        assert not c.stats["subscribed"], c.stats
        t0 = time.perf_counter()
        assert c.send(1, 0, x) is True and c.stats["queued"] == 1
        assert time.perf_counter() - t0 < 0.010
        d.start()
        assert c.flush(5.0) == 0, c.stats
        assert c.send(2, 0, x) is True and c.flush(3.0) == 0
        d.wait(lambda s: s["traffic"]["steps_complete"] >= 2, what="steps 1, 2")
        c.close()
        assert c.stats["dropped"] == 0, c.stats
    finally:
        c.close()
        d.stop()
        shutil.rmtree(d.tmp, ignore_errors=True)


def t_blocking(d):
    x = probs(np.random.default_rng(4))
    c = sinkwatch.Client("py-blocking", layers=1, heads=2, blocking=True, block_timeout=0.2,
                         endpoint="tcp://127.0.0.1:%d" % free_port(), linger=0.1)
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert c.send(0, 0, x) is False
    took = time.monotonic() - t0
    assert 0.19 <= took < 1.0, "blocking timeout took %.3f s" % took
    assert c.stats["dropped"] == 1 and c.stats["next_seq"] == 1, c.stats
    try:
        c.send(0, 5, x)
        raise AssertionError("layer out of range accepted")
    except ValueError:
        pass
    c.close()

    n = 50
    c = sinkwatch.Client("py-blocking", layers=1, heads=2, blocking=True, block_timeout=5,
                         endpoint=d.listen, queue_max=4)
    for t in range(n):
        assert c.send(t, 0, x) is True
    st = c.stats
    assert st["sent"] == n and st["dropped"] == 0 and st["queued"] == 0, st
    assert st["bytes_sent"] == n * x.nbytes, st
    assert c.end() is True
    c.close()
    path = wait_ended(d, "py-blocking")
    assert steps_of(path) == list(range(n)) and lost_of(path) == 0


def t_close_bounded():
    ep = "tcp://127.0.0.1:%d" % free_port()
    x = probs(np.random.default_rng(5))
    for linger in (0.0, 0.3):
        c = sinkwatch.Client("py-close", layers=1, heads=2, endpoint=ep, linger=linger)
        for t in range(3):
            c.send(t, 0, x)
        t0 = time.monotonic()
        final = c.close()
        took = time.monotonic() - t0
        assert took < linger + 0.2, "close took %.3f s, linger %.1f" % (took, linger)
        assert linger == 0 or took >= linger - 0.05, took
        # the final counters name the messages the linger left behind
        assert final == {"sent": 0, "dropped": 3, "queued": 0, "bytes_sent": 0,
                         "next_seq": 3, "subscribed": False}, final
        assert c.stats == final and c.close() == final
    # the context manager and __del__ with messages still queued
    with sinkwatch.Client("py-close", layers=1, heads=2, endpoint=ep, linger=0.05) as c:
        c.send(0, 0, x)
    assert c.closed
    c = sinkwatch.Client("py-close", layers=1, heads=2, endpoint=ep, linger=0.05)
    c.send(0, 0, x)
    t0 = time.monotonic()
    del c
    assert time.monotonic() - t0 < 0.5
    # a forked child (a DataLoader worker) neither uses nor closes the parent's
    # ZeroMQ state
    c = sinkwatch.Client("py-close", layers=1, heads=2, endpoint=ep, linger=1.0)
    c.send(0, 0, x)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            t0 = time.monotonic()
            try:
                c.send(1, 0, x)
            except sinkwatch.ClosedError:
                c.close()
                code = 0 if time.monotonic() - t0 < 0.2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert c.stats["queued"] == 1 and not c.closed, c.stats
    c.linger = 0.0
    c.close()
    # warnings turned into errors still never reach the caller
    c = sinkwatch.Client("py-close", layers=1, heads=2, endpoint=ep, linger=0, queue_max=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.send(0, 0, x) is True and c.send(1, 0, x) is False
    c.close()


def t_dtypes_kinds(d):
    rng = np.random.default_rng(6)
    H, R, K, L = 3, 4, 10, 2
    qpos = [K - R + r for r in range(R)]
    variants = {}
    for name, dt in (("f32", np.float32), ("f16", np.float16), ("f64", np.float64)):
        variants["py-probs-" + name] = ("probs", None, lambda dt=dt: probs(rng, H, R, K, dt), None)
    variants["py-probs-bf16"] = ("probs", "bf16", lambda: to_bf16(probs(rng, H, R, K)), None)
    variants["py-probs-qpos"] = (
        "probs", None, lambda: random_probs(rng, H, R, K, qpos=qpos), qpos)

    def logits():
        z = rng.normal(size=(H, R, K)).astype(np.float32)
        for r, q in enumerate(qpos):
            z[:, r, q + 1:] = -np.inf
        return z
    variants["py-logits-f32"] = ("logits", None, logits, qpos)
    variants["py-logits-f16"] = ("logits", None, lambda: logits().astype(np.float16), qpos)
    variants["py-rowstats-f64"] = ("rowstats", None, lambda: rowstats(probs(rng, H, R, K)), None)
    variants["py-rowstats-f32"] = (
        "rowstats", None, lambda: rowstats(probs(rng, H, R, K)).astype(np.float32), qpos)
    # a non-contiguous, big-endian array: converted, not refused
    variants["py-probs-view"] = (
        "probs", None,
        lambda: np.asfortranarray(probs(rng, H, R, K).astype(">f4")), None)
    before = d.status()
    for run, (kind, dtype, make, q) in variants.items():
        with sinkwatch.Client(run, layers=L, heads=H, endpoint=d.listen, model="m",
                              params=123) as c:
            for step in (0, 1):
                for layer in range(L):
                    assert c.send(step, layer, make(), kind=kind, qpos=q, dtype=dtype)
            assert c.end()
    for run in variants:
        path = wait_ended(d, run)
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            assert [int(s) for s in f["step"][:]] == [0, 1], (run, f["step"][:])
            rows = f["rows"][:]
            assert rows.shape[:3] == (2, L, H) and np.all(rows == R), (run, rows)
            assert int(f["lost"][-1]) == 0, run
    st = d.status()
    n = len(variants) * (2 * L + 1)
    assert st["traffic"]["messages"] - before["traffic"]["messages"] == n, st["traffic"]
    assert st["traffic"]["rows"] - before["traffic"]["rows"] == len(variants) * 2 * L * H * R
    assert not bad_decodes(st), bad_decodes(st)
    rej = {k: v - before["rejects"].get(k, 0) for k, v in st["rejects"].items()
           if isinstance(v, int) and v != before["rejects"].get(k, 0)}
    assert not rej, rej


class Capture:
    """A bound SUB that records what clients put on the wire. A thread keeps
    receiving: libzmq sends a SUB's subscription to a new peer only while
    the socket is being used, as the daemon's event loop does."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self.sub.setsockopt(zmq.SUBSCRIBE, b"sw/")
        self.got = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopping.is_set():
            if self.sub.poll(20, zmq.POLLIN):
                self.got.put(self.sub.recv_multipart())

    def recv(self, timeout=3.0):
        try:
            return self.got.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("nothing received in %.1f s" % timeout) from None

    def close(self):
        self.stopping.set()
        self.thread.join()
        self.sub.close()
        self.ctx.term()


def t_wire_equals_golden():
    """The bytes the Python client sends for a golden message's fields are
    the golden bytes (which tests/test_proto.c holds the C encoder to)."""
    cap = Capture()
    try:
        for name, err, frames in golden():
            if err != "ok":
                continue
            m = proto.decode_message(frames)
            info = {"run": m["run"], "layers": 1, "heads": 1}
            if m["type"] == "snapshot":
                info = {"run": m["run"], "layers": m["layers"], "heads": m["heads"],
                        "model": m["model"], "params": m["params"], "sink": m["sink"],
                        "fixed_probe": m["fixed_probe"]}
            c = sinkwatch.Client(endpoint=cap.endpoint, **info)
            c._seq = m["seq"]
            c._clock = lambda t=m.get("time", math.nan): t
            if m["type"] == "snapshot":
                arr = np.frombuffer(frames[2], dtype=np.dtype(NP_OF[m["dtype"]]).newbyteorder("<"))
                arr = arr.reshape(m["shape"])
                assert c.send(m["step"], m["layer"], arr, kind=m["kind"], qpos=m.get("qpos"),
                              dtype="bf16" if m["dtype"] == "bf16" else None)
            else:
                assert c.end()
            assert c.flush(3.0) == 0, (name, c.stats)
            got = cap.recv()
            c.close()
            # the golden messages predate incarnations: the header is theirs
            # plus "inc" (canonically last), and without it their bytes
            h = proto.decode_header(got[1])
            assert h.pop("inc") == c.incarnation, name
            assert proto.encode_header(proto.decode_header(got[1])) == got[1], name
            got[1] = proto.encode_header(h)
            assert got == frames, "%s: wire differs:\n%r\n%r" % (name, got, frames)
    finally:
        cap.close()


def c_client_lib():
    here = os.path.dirname(os.path.abspath(SINKWATCHD))
    for p in (os.path.join(here, "client", ".libs", "libsinkwatch.so"),
              os.path.join(SRCDIR, "client", ".libs", "libsinkwatch.so")):
        if os.path.exists(p):
            return p
    return None


class _Opts(ctypes.Structure):
    _fields_ = [("endpoint", ctypes.c_char_p), ("blocking", ctypes.c_int),
                ("block_timeout_ms", ctypes.c_int), ("queue_max", ctypes.c_int),
                ("queue_max_bytes", ctypes.c_size_t), ("linger_ms", ctypes.c_int),
                ("resuming", ctypes.c_int), ("resume_from", ctypes.c_int64)]


class _Run(ctypes.Structure):
    _fields_ = [("run", ctypes.c_char_p), ("model", ctypes.c_char_p),
                ("params", ctypes.c_uint64), ("layers", ctypes.c_uint32),
                ("heads", ctypes.c_uint32), ("sink", ctypes.c_uint32),
                ("fixed_probe", ctypes.c_int)]


class _Snap(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("layer", ctypes.c_uint32), ("kind", ctypes.c_int),
                ("dtype", ctypes.c_int), ("rows", ctypes.c_uint32), ("keys", ctypes.c_uint32),
                ("qpos", ctypes.POINTER(ctypes.c_uint32)), ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t)]


def t_wire_equals_c_client():
    """The same messages from libsinkwatch (C) and from the Python client:
    equal bytes, but for the 8 bytes of the wall-clock time."""
    path = c_client_lib()
    if path is None:
        print("     (libsinkwatch.so not built: only the golden comparison ran)")
        return
    lib = ctypes.CDLL(path)
    lib.sw_client_new.argtypes = [ctypes.POINTER(_Opts), ctypes.POINTER(_Run),
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.sw_client_send.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Snap)]
    lib.sw_client_end.argtypes = [ctypes.c_void_p]
    lib.sw_client_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.sw_client_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    rng = np.random.default_rng(7)
    cap = Capture()
    try:
        run, model = "cmp/é-run", "some model"
        msgs = [("probs", "f32", probs(rng, 3, 5, 40), list(range(35, 40))),
                ("logits", "f16", rng.normal(size=(3, 2, 300)).astype(np.float16), None),
                ("probs", "bf16", to_bf16(probs(rng, 3, 20, 7)), [i * 300 for i in range(20)]),
                ("rowstats", "f64", rowstats(probs(rng, 3, 2, 9)), None)]
        kinds = {"probs": 0, "logits": 1, "rowstats": 2}
        dts = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3}
        o = _Opts(cap.endpoint.encode(), 0, -1, 16, 256 << 20, 2000, 1, 77)
        ri = _Run(run.encode(), model.encode(), 70000, 40, 3, 2, 0)
        ch = ctypes.c_void_p()
        assert lib.sw_client_new(ctypes.byref(o), ctypes.byref(ri), ctypes.byref(ch)) == 0
        keep = []
        for i, (kind, dt, arr, q) in enumerate(msgs):
            arr = np.ascontiguousarray(arr)
            keep.append(arr)
            qp = None
            if q is not None:
                qa = (ctypes.c_uint32 * len(q))(*q)
                keep.append(qa)
                qp = ctypes.cast(qa, ctypes.POINTER(ctypes.c_uint32))
            s = _Snap(1000 + i, 39 - i, kinds[kind], dts[dt], arr.shape[1], arr.shape[2], qp,
                      arr.ctypes.data, arr.nbytes)
            assert lib.sw_client_send(ch, ctypes.byref(s)) == 0
        assert lib.sw_client_end(ch) == 0
        assert lib.sw_client_flush(ch, 3000) == 0
        from_c = [cap.recv() for _ in range(len(msgs) + 1)]
        lib.sw_client_incarnation.argtypes = [ctypes.c_void_p]
        lib.sw_client_incarnation.restype = ctypes.c_uint64
        inc_c = lib.sw_client_incarnation(ch)
        lib.sw_client_destroy(ctypes.byref(ch))

        c = sinkwatch.Client(run, layers=40, heads=3, endpoint=cap.endpoint, model=model,
                             params=70000, sink=2, fixed_probe=False, resume_from=77)
        assert c.incarnation > inc_c, (c.incarnation, inc_c)
        for i, (kind, dt, arr, q) in enumerate(msgs):
            assert c.send(1000 + i, 39 - i, arr, kind=kind, qpos=q,
                          dtype="bf16" if dt == "bf16" else None)
        assert c.end()
        assert c.flush(3.0) == 0
        from_py = [cap.recv() for _ in range(len(msgs) + 1)]
        c.close()
        # the headers end with time (float 64), inc (uint 64) and resume (77)
        for i, (a, b) in enumerate(zip(from_c, from_py)):
            assert len(a) == len(b), i
            assert a[0] == b[0] and a[2:] == b[2:], i
            ha, hb = a[1], b[1]
            for h in (ha, hb):
                assert h[-35:-29] == b"\xa4time\xcb" and h[-21:-16] == b"\xa3inc\xcf" and \
                    h[-8:] == b"\xa6resume\x4d", (i, h.hex())
            assert ha[:-35] == hb[:-35], "message %d: C %s\n        Python %s" % (
                i, ha.hex(), hb.hex())
            da, db = proto.decode_header(ha), proto.decode_header(hb)
            assert abs(da["time"] - time.time()) < 30 and abs(db["time"] - time.time()) < 30
            assert da["inc"] == inc_c and db["inc"] == c.incarnation, (da, db)
            assert da["resume"] == db["resume"] == 77, (da, db)
            for h in (da, db):
                h["time"], h["inc"] = 0.0, 1
            assert proto.encode_header(da) == proto.encode_header(db), i
    finally:
        cap.close()


CASES = {
    "golden_reencode": lambda: t_golden_reencode(),
    "golden_worked_example": lambda: t_golden_worked_example(),
    "golden_bad_message": lambda: t_golden_bad_message(),
    "golden_bad_header": lambda: t_golden_bad_header(),
    "header_only_names": lambda: t_header_only_names(),
    "encode_validation": lambda: t_encode_validation(),
    "bad_arguments": lambda: t_bad_arguments(),
    "defaults": lambda: t_defaults(),
    "burst_after_new": lambda: t_burst_after_new(),
    "incarnation": lambda: t_incarnation(),
    "wire_equals_golden": lambda: t_wire_equals_golden(),
    "wire_equals_c_client": lambda: t_wire_equals_c_client(),
    "close_bounded": lambda: t_close_bounded(),
    "down_then_up": lambda: t_down_then_up(),
    "daemon_restart": lambda: t_daemon_restart(),
    "slow_joiner": "daemon",
    "blocking": "daemon",
    "dtypes_kinds": "daemon",
}
WITH_DAEMON = {"slow_joiner": t_slow_joiner, "blocking": t_blocking,
               "dtypes_kinds": t_dtypes_kinds}


def main():
    want = sys.argv[1:] or list(CASES)
    unknown = [w for w in want if w not in CASES]
    if unknown:
        print("unknown case(s): %s; cases: %s" % (" ".join(unknown), " ".join(CASES)))
        return 2
    res = Results()
    t0 = time.time()
    for name in want:
        if CASES[name] != "daemon":
            res.check(name, CASES[name])
    shared = [n for n in want if CASES[n] == "daemon"]
    if shared:
        d = None
        try:
            d = Daemon().start()
        except Exception as e:  # noqa: BLE001
            for n in shared:
                res.check(n, lambda e=e: (_ for _ in ()).throw(e))
        if d is not None:
            try:
                for n in shared:
                    res.check(n, lambda n=n: WITH_DAEMON[n](d))
            finally:
                rc = d.stop()
                shutil.rmtree(d.tmp, ignore_errors=True)
                res.check("daemon_exit_status", lambda: _assert(rc == 0, "sinkwatchd exit %r" % rc))
    print("     (%.1f s)" % (time.time() - t0))
    return res.finish()


def _assert(cond, msg):
    assert cond, msg


if __name__ == "__main__":
    sys.exit(main())
