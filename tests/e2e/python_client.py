#!/usr/bin/python3
"""The Python client (contrib/python/sinkwatch) against the golden messages
and a real sinkwatchd: canonical re-encoding, the C decoder's error names,
the slow joiner, a burst right after connecting, incarnations, the daemon
down and back, blocking mode, bounded close and the final counters, every
dtype and kind, and the wire bytes against the C encoder's. Protocol
version 2 (several senders, parts of a layer): the canonical presence
rules, and proto.py against proto/proto.c and decode.c (compiled into a shared
object for ctypes) on random messages and random faults: the same bytes
from both encoders, the same fields, error names and details from both
decoders; the client's rank, senders, incarnation and parts on the wire.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \\
        /usr/bin/python3 tests/e2e/python_client.py [CASE...]
"""
import ctypes
import math
import os
import queue
import random
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not os.environ.get("SINKWATCHD"):
    print("SINKWATCHD not set: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import zmq  # noqa: E402

import sinkwatch  # noqa: E402
from sinkwatch import proto  # noqa: E402
from swharness import SINKWATCHD, Daemon, Results, free_port, preload_asan, random_probs  # noqa: E402

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
    assert n == sum(err == "ok" for _, err, _ in golden()) and n >= 6, n


def t_golden_worked_example():
    frames = proto.parse_golden(open(os.path.join(GOLDEN, "snap_probs_f32.msg"), "rb").read())
    d = proto.decode_header(frames[1])
    want = {"v": 1, "type": "snapshot", "run": "pythia-160m/seed1", "seq": 3,
            "model": "pythia-160m", "params": 162322944, "layers": 12, "heads": 2,
            "sink": 0, "fixed_probe": True, "step": 1000, "layer": 5, "kind": "probs",
            "dtype": "f32", "shape": [2, 3, 4], "qpos": [1, 2, 3], "time": 1796083200.5,
            "tensor_bytes": 96, "rank": 0, "senders": 1, "head0": 0, "row0": 0, "rows": 3}
    assert d == want, d
    assert len(frames[1]) == 180 and frames[1][:3] == b"\xde\x00\x11"
    e = proto.decode_header(proto.parse_golden(
        open(os.path.join(GOLDEN, "end_time.msg"), "rb").read())[1])
    assert e == {"v": 1, "type": "end", "run": "pythia-160m/seed1", "seq": 5,
                 "time": 1796083260.5, "rank": 0, "senders": 1}, e


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
    cases = [({"layers": 0}, "limit", "layers"), ({"heads": 1}, "dims", "shape[0]"),
             ({"layer": 2}, "limit", "layer"), ({"step": -1}, "limit", "step"),
             ({"tensor_bytes": 31}, "dims", "tensor"), ({"sink": 4}, "limit", "sink"),
             ({"kind": "rowstats"}, "kind", "rowstats"), ({"dtype": "i8"}, "dtype", "dtype"),
             ({"kind": "nope"}, "kind", "kind"), ({"run": ""}, "limit", "run"),
             ({"run": "a\x01"}, "field", "run"), ({"model": "m" * 257}, "limit", "model"),
             ({"model": "a\0b"}, "field", "model"), ({"qpos": [1, 2]}, "dims", "qpos"),
             ({"qpos": [1 << 32]}, "limit", "qpos"), ({"qpos": [-1]}, "field", "qpos"),
             ({"type": "x"}, "type", "type"), ({"shape": [2, 0, 4]}, "limit", "rows"),
             ({"seq": 1 << 64}, "limit", "seq"), ({"layers": "2"}, "field", "layers"),
             # version 2, in the order of check 13
             ({"head0": 2}, "limit", "head0"), ({"head0": 1}, "dims", "shape[0]"),
             ({"shape": [0, 1, 4], "tensor_bytes": 0}, "dims", "shape[0]"),
             ({"rows": 65537}, "limit", "rows"), ({"row0": 1}, "dims", "row0 1"),
             ({"rows": 3, "row0": 3}, "dims", "rows 3"),
             ({"senders": 65537, "inc": 1}, "limit", "senders"),
             ({"senders": 2, "rank": 2, "inc": 1}, "limit", "rank"),
             ({"rank": 1}, "limit", "rank"), ({"senders": 2}, "field", "inc"),
             ({"senders": 2, "inc": 1, "resume": -1}, "limit", "resume"),
             ({"head0": 2, "senders": 2}, "limit", "head0"),
             ({"rank": "0"}, "field", "rank"), ({"head0": -1}, "limit", "head0"),
             ({"v": 3}, "version", "v"), ({"v": True}, "version", "v")]
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


# ------------------------------------------------------------ version 2

V2_BASE = {"type": "snapshot", "run": "r", "seq": 0, "layers": 2, "heads": 4, "step": 1,
           "layer": 0, "kind": "probs", "dtype": "f32", "shape": [4, 3, 5],
           "tensor_bytes": 4 * 3 * 5 * 4, "inc": 7}


def _v2_keys(h):
    """The version 2 keys of an encoded header, in wire order."""
    return [k for k in _map_keys(h) if k in ("rank", "senders", "head0", "row0", "rows")]


def _map_keys(h):
    """The keys of an encoded header map, in wire order."""
    import msgpack
    return msgpack.unpackb(h, raw=False, object_pairs_hook=lambda kv: [k for k, _ in kv])


def t_v2_canonical():
    """The presence rules of PROTOCOL.md 5/7b: v 2 and a v2 key only where
    v1 cannot say the message; defaults for v1; keys after resume, in order."""
    b = V2_BASE
    h1 = proto.encode_header(b)
    # the defaults, given explicitly or as C's zeros, are v1 byte for byte
    for over in ({"rank": 0, "senders": 1}, {"senders": 0}, {"head0": 0, "row0": 0},
                 {"rows": 3}, {"rows": 0}, {"v": 1}, {"v": 2},
                 {"rank": None, "senders": None, "head0": None, "row0": None, "rows": None}):
        assert proto.encode_header(dict(b, **over)) == h1, over
    assert h1[:5] == b"\xde\x00\x10\xa1v" and h1[5] == 1 and not _v2_keys(h1)
    d = proto.decode_header(h1)
    assert (d["v"], d["rank"], d["senders"], d["head0"], d["row0"], d["rows"]) == \
        (1, 0, 1, 0, 0, 3), d
    cases = [({"senders": 4, "rank": 2}, ["rank", "senders"]),
             ({"senders": 2}, ["rank", "senders"]),
             ({"head0": 2, "shape": [2, 3, 5], "tensor_bytes": 120}, ["head0"]),
             ({"shape": [1, 3, 5], "tensor_bytes": 60}, ["head0"]),
             ({"rows": 9, "row0": 6}, ["row0", "rows"]),
             ({"rows": 9}, ["row0", "rows"]),
             ({"senders": 3, "rank": 1, "head0": 3, "shape": [1, 2, 5], "tensor_bytes": 40,
               "row0": 1, "rows": 3, "resume": 5, "time": 1.5},
              ["rank", "senders", "head0", "row0", "rows"])]
    for over, keys in cases:
        h = proto.encode_header(dict(b, **over))
        assert h[5] == 2 and _v2_keys(h) == keys, (over, _map_keys(h))
        assert _map_keys(h)[-len(keys):] == keys, (over, _map_keys(h))     # after resume
        d = proto.decode_header(h)
        assert d["v"] == 2 and proto.encode_header(d) == h, (over, d)
        for k in ("rank", "senders", "head0", "row0", "rows"):
            want = dict(b, **over).get(k, {"senders": 1, "rows": d["shape"][1]}.get(k, 0))
            assert d[k] == want, (k, d[k], want)
    # an end carries rank and senders by the same rule, never the part keys
    e = {"type": "end", "run": "r", "seq": 3, "inc": 7}
    assert proto.encode_header(dict(e, head0=2, row0=1, rows=9)) == proto.encode_header(e)
    assert proto.decode_header(proto.encode_header(e))["v"] == 1
    he = proto.encode_header(dict(e, rank=1, senders=2))
    assert he[3] == 2 and _map_keys(he) == ["v", "type", "run", "seq", "inc", "rank",
                                            "senders"], _map_keys(he)
    assert proto.decode_header(he) == {"v": 2, "type": "end", "run": "r", "seq": 3, "inc": 7,
                                       "rank": 1, "senders": 2}
    # the decoder: v2 keys are unknown (skipped, whatever their value) in v1;
    # in v2 nil is absent, a wrong type is a field error
    import msgpack
    hd = msgpack.unpackb(h1, raw=False)
    for extra in ({"rank": 3}, {"senders": "x"}, {"head0": -1}, {"rows": None}):
        assert proto.decode_header(msgpack.packb(dict(hd, **extra))) == d_of(h1), extra
    for extra, err in (({"rank": None, "senders": None}, None), ({"head0": "x"}, "field"),
                       ({"rows": -1}, "field"), ({"row0": 1.0}, "field"),
                       ({"senders": 2, "inc": None}, "field"),
                       ({"senders": 2, "rank": 2}, "limit"),
                       ({"senders": 0}, "limit"), ({"head0": 4}, "limit"),
                       ({"head0": 1}, "dims"), ({"rows": 2}, "dims")):
        raw = msgpack.packb(dict(hd, v=2, **extra))
        try:
            got = proto.decode_header(raw)
            assert err is None, (extra, got)
            assert got == dict(d_of(h1), v=2), got
        except proto.ProtocolError as ex:
            assert ex.errname == err, (extra, ex)
    # a v2 end with part keys: type-checked, then ignored
    he2 = msgpack.packb({"v": 2, "type": "end", "run": "r", "seq": 0, "head0": 5})
    assert proto.decode_header(he2) == {"v": 2, "type": "end", "run": "r", "seq": 0,
                                        "rank": 0, "senders": 1}
    try:
        proto.decode_header(msgpack.packb({"v": 2, "type": "end", "run": "r", "seq": 0,
                                           "rows": "x"}))
        raise AssertionError("accepted")
    except proto.ProtocolError as ex:
        assert ex.errname == "field" and "rows" in ex.detail, ex


def d_of(h):
    return proto.decode_header(h)


# -------------------------------------------- proto.py against proto/proto.c

class _SwpMsg(ctypes.Structure):
    """swp_msg of proto/swproto.h."""
    _fields_ = [("type", ctypes.c_int), ("run", ctypes.c_char * 129),
                ("seq", ctypes.c_uint64), ("time", ctypes.c_double),
                ("inc", ctypes.c_uint64), ("has_resume", ctypes.c_bool),
                ("resume", ctypes.c_int64), ("version", ctypes.c_uint32),
                ("rank", ctypes.c_uint32), ("senders", ctypes.c_uint32),
                ("model", ctypes.c_char * 257), ("params", ctypes.c_uint64),
                ("layers", ctypes.c_uint32), ("heads", ctypes.c_uint32),
                ("sink", ctypes.c_uint32), ("fixed_probe", ctypes.c_bool),
                ("step", ctypes.c_int64), ("layer", ctypes.c_uint32), ("kind", ctypes.c_int),
                ("dtype", ctypes.c_int), ("shape", ctypes.c_uint32 * 3),
                ("head0", ctypes.c_uint32), ("row0", ctypes.c_uint32),
                ("rows", ctypes.c_uint32), ("qpos", ctypes.POINTER(ctypes.c_uint32)),
                ("tensor", ctypes.c_void_p), ("tensor_bytes", ctypes.c_size_t)]


def _build_var(name):
    """A variable of the build tree's Makefile (MSGPACK_LIBS, CC), or None."""
    mk = os.path.join(os.path.dirname(os.path.abspath(SINKWATCHD)), "Makefile")
    try:
        with open(mk) as f:
            for line in f:
                if line.startswith(name + " ="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


class CProto:
    """proto/proto.c compiled into a shared object (without the build's
    sanitizer flags) and called with ctypes: swp_encode_header_to and
    swp_decode, the implementations the daemon and the C client link."""

    def __init__(self, tmp):
        cc = shlex.split(_build_var("CC") or "cc")
        cflags = shlex.split(_build_var("MSGPACK_CFLAGS") or "")
        libs = shlex.split(_build_var("MSGPACK_LIBS") or "-lmsgpackc")
        so = os.path.join(tmp, "libswproto_test.so")
        cmd = cc + ["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O1", "-shared", "-fPIC",
                    "-I", SRCDIR] + cflags + [os.path.join(SRCDIR, "proto", f)
                                              for f in ("proto.c", "decode.c")] + ["-o", so] + libs
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise OSError("%s: %s" % (" ".join(cmd), p.stderr[-2000:]))
        lib = self.lib = ctypes.CDLL(so)
        lib.swp_errname.restype = ctypes.c_char_p
        lib.swp_encode_header_to.argtypes = [ctypes.POINTER(_SwpMsg), ctypes.c_void_p,
                                             ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        lib.swp_decode.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                   ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
                                   ctypes.c_void_p, ctypes.POINTER(_SwpMsg), ctypes.c_char_p,
                                   ctypes.c_size_t]
        lib.swp_msg_clear.argtypes = [ctypes.POINTER(_SwpMsg)]
        self.buf = ctypes.create_string_buffer(1 << 20)

    def encode(self, fd):
        """swp_encode_header_to of a field dict: bytes, or the error name."""
        m, keep = _SwpMsg(), []
        m.type = 1 if fd["type"] == "snapshot" else 2
        m.run = fd["run"].encode()
        m.seq = fd.get("seq", 0)
        m.time = math.nan if fd.get("time") is None else fd["time"]
        m.inc = fd.get("inc") or 0
        if fd.get("resume") is not None:
            m.has_resume, m.resume = True, fd["resume"]
        m.rank, m.senders = fd.get("rank") or 0, fd.get("senders") or 0
        if m.type == 1:
            m.model = fd.get("model", "").encode()
            m.params, m.layers, m.heads = fd.get("params", 0), fd["layers"], fd["heads"]
            m.sink, m.fixed_probe = fd.get("sink", 0), fd.get("fixed_probe", False)
            m.step, m.layer = fd["step"], fd["layer"]
            m.kind, m.dtype = proto.KINDS.index(fd["kind"]), proto.DTYPES.index(fd["dtype"])
            for i in range(3):
                m.shape[i] = fd["shape"][i]
            m.head0, m.row0, m.rows = fd.get("head0") or 0, fd.get("row0") or 0, \
                fd.get("rows") or 0
            if fd.get("qpos") is not None:
                q = (ctypes.c_uint32 * max(1, len(fd["qpos"])))(*fd["qpos"])
                keep.append(q)
                m.qpos = ctypes.cast(q, ctypes.POINTER(ctypes.c_uint32))
            m.tensor_bytes = fd["tensor_bytes"]
        n = ctypes.c_size_t()
        rc = self.lib.swp_encode_header_to(ctypes.byref(m), self.buf, len(self.buf),
                                           ctypes.byref(n))
        if rc != 0:
            return self.lib.swp_errname(rc).decode()
        return self.buf.raw[:n.value]

    def decode(self, frames):
        """swp_decode: the field dict as proto.decode_message gives it (less
        the tensor), or (error name, detail)."""
        n = len(frames)
        bufs = [ctypes.create_string_buffer(bytes(f), max(1, len(f))) for f in frames]
        ptrs = (ctypes.c_void_p * max(1, n))(*[ctypes.cast(b, ctypes.c_void_p) for b in bufs])
        sizes = (ctypes.c_size_t * max(1, n))(*[len(f) for f in frames])
        m = _SwpMsg()
        det = ctypes.create_string_buffer(256)
        rc = self.lib.swp_decode(ptrs, sizes, n, None, ctypes.byref(m), det, 256)
        if rc != 0:
            return self.lib.swp_errname(rc).decode(), det.value.decode(errors="replace")
        d = {"v": m.version, "type": "snapshot" if m.type == 1 else "end",
             "run": m.run.decode(errors="surrogateescape"), "seq": m.seq,
             "rank": m.rank, "senders": m.senders}
        if not math.isnan(m.time):
            d["time"] = m.time
        if m.inc:
            d["inc"] = m.inc
        if m.has_resume:
            d["resume"] = m.resume
        if m.type == 1:
            d.update(model=m.model.decode(errors="surrogateescape"), params=m.params,
                     layers=m.layers, heads=m.heads, sink=m.sink,
                     fixed_probe=bool(m.fixed_probe), step=m.step, layer=m.layer,
                     kind=proto.KINDS[m.kind], dtype=proto.DTYPES[m.dtype],
                     shape=list(m.shape), head0=m.head0, row0=m.row0, rows=m.rows,
                     tensor_bytes=m.tensor_bytes)
            if m.qpos:
                d["qpos"] = [m.qpos[i] for i in range(m.shape[1])]
        self.lib.swp_msg_clear(ctypes.byref(m))
        return d


def _py_encode(fd):
    try:
        return proto.encode_header(fd)
    except proto.ProtocolError as e:
        return e.errname


def _py_decode(frames):
    try:
        d = proto.decode_message(frames)
    except proto.ProtocolError as e:
        return e.errname, e.detail
    d.pop("tensor", None)
    return d


def _pick(rng, *choices):
    return rng.choice(choices)


def random_fields(rng):
    """A valid message's fields, versions 1 and 2, with values at the edges
    of every integer encoding (tensors of at most 8 x 64 x 200)."""
    fd = {"type": "snapshot" if rng.random() < 0.85 else "end",
          "run": "".join(rng.choice("abcXYZ/-_.é") for _ in range(rng.randint(1, 12))),
          "seq": _pick(rng, 0, 1, 127, 128, 255, 65535, 65536, (1 << 32) - 1, 1 << 32,
                       (1 << 64) - 1, rng.randrange(1 << 40))}
    if rng.random() < 0.7:
        fd["time"] = _pick(rng, 1796083200.5, 0.0, -1.5, math.nan, math.inf, rng.random() * 2e9)
    if rng.random() < 0.8:
        fd["inc"] = _pick(rng, 1, 127, 1 << 40, (1 << 64) - 1, rng.randrange(1, 1 << 64))
    if rng.random() < 0.3:
        fd["resume"] = _pick(rng, 0, 1, 1 << 31, (1 << 63) - 1, rng.randrange(1 << 62))
    if rng.random() < 0.5:
        fd["senders"] = _pick(rng, 1, 2, 3, 8, 255, 256, 65535, 65536, rng.randint(2, 65536))
        fd["rank"] = rng.randrange(fd["senders"]) if rng.random() < 0.7 else \
            _pick(rng, 0, fd["senders"] - 1)
        if fd["senders"] > 1 and not fd.get("inc"):
            fd["inc"] = rng.randrange(1, 1 << 64)
    if fd["type"] == "end":
        return fd
    heads = _pick(rng, 1, 2, 3, 4, 12, 16, 1024, rng.randint(1, 1024))
    layers = _pick(rng, 1, 2, 24, 4096, rng.randint(1, 4096))
    kind, dtype = rng.choice(proto.KINDS), rng.choice(proto.DTYPES)
    fd.update(model=_pick(rng, "", "m", "pythia-160m", "x" * 40, "é" * 20),
              params=_pick(rng, 0, 1, 1 << 40), layers=layers, heads=heads,
              fixed_probe=rng.random() < 0.5,
              step=_pick(rng, 0, 1, 1000, (1 << 63) - 1, rng.randrange(1 << 40)),
              layer=rng.randrange(layers), kind=kind, dtype=dtype)
    if rng.random() < 0.4 and heads <= 8:
        head0, h = 0, heads
    else:
        head0 = rng.randrange(heads)
        h = rng.randint(1, min(8, heads - head0))
    rows = _pick(rng, 1, 2, 16, 126, 65536, rng.randint(1, 65536))
    if rng.random() < 0.4 and rows <= 64:
        row0, r_in = 0, rows
    else:
        row0 = rng.randrange(rows)
        r_in = rng.randint(1, min(64, rows - row0))
    keys = 6 if kind == "rowstats" else _pick(rng, 1, 2, 7, 64, 200)
    fd["sink"] = rng.randrange(keys) if kind != "rowstats" else \
        _pick(rng, 0, 5, 1000, (1 << 32) - 1)
    fd["shape"] = [h, r_in, keys]
    if head0 or rng.random() < 0.5:
        fd["head0"] = head0
    if row0 or rows != r_in or rng.random() < 0.5:
        fd["row0"], fd["rows"] = row0, rows
    if rng.random() < 0.5:
        fd["qpos"] = [rng.choice([0, 1, 127, 128, 65536, (1 << 32) - 1, rng.randrange(1 << 32)])
                      for _ in range(r_in)]
    fd["tensor_bytes"] = h * r_in * keys * proto.DTYPE_SIZES[dtype]
    return fd


def break_fields(rng, fd):
    """1 to 3 faults a C swp_msg can hold (so both encoders see the same)."""
    fd = dict(fd)
    if fd["type"] == "snapshot":
        fd["shape"] = list(fd["shape"])
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(16)
        H = fd.get("heads", 1)
        if fd["type"] == "end" and k < 12:
            k = rng.choice([12, 13, 14, 15])
        if k == 0:
            fd["heads"] = _pick(rng, 0, 1025, 1, 2)
        elif k == 1:
            fd["head0"] = _pick(rng, H, H + 5, (1 << 32) - 1, 1)
        elif k == 2:
            fd["shape"][0] = _pick(rng, 0, max(0, H - (fd.get("head0") or 0) + 1), H)
        elif k == 3:
            fd["shape"][1] = _pick(rng, 0, 65537, 1)
        elif k == 4:
            fd["rows"] = _pick(rng, 65537, (1 << 32) - 1, 1, max(0, fd["shape"][1] - 1))
        elif k == 5:
            fd["row0"] = _pick(rng, fd.get("rows") or fd["shape"][1], (1 << 32) - 1, 1)
        elif k == 6:
            fd["shape"][2] = _pick(rng, 0, (1 << 20) + 1, 5, 6)
        elif k == 7:
            fd["layer"] = fd["layers"]
        elif k == 8:
            fd["step"] = -1
        elif k == 9:
            fd["sink"] = fd["shape"][2]
        elif k == 10:
            fd["qpos"] = [1 << 31] * fd["shape"][1]
        elif k == 11:
            fd["tensor_bytes"] += 1
        elif k == 12:
            fd["senders"] = _pick(rng, 65537, (1 << 32) - 1, 2)
        elif k == 13:
            fd["rank"] = _pick(rng, fd.get("senders") or 1, (1 << 32) - 1, 1)
        elif k == 14:
            fd["inc"] = 0
        else:
            fd["resume"] = _pick(rng, -1, -(1 << 63))
    return fd


_ODD_VALUES = [None, True, False, -1, -(1 << 63), 0, 1, 2, 6, 65536, 65537, 1 << 32,
               (1 << 64) - 1, "x", "snapshot", "end", "f32", "probs", 1.5, [1, 2, 3],
               [1, 1, 6], {}, b"bin"]


def break_header(rng, hd):
    """A header map with 1 to 3 faults at the msgpack level: a key dropped,
    a value of another type, a key added (version 2 keys in v1 too), v
    changed; duplicates possible."""
    import msgpack
    items = list(hd.items())
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.25 and items:
            del items[rng.randrange(len(items))]
        elif r < 0.6 and items:
            i = rng.randrange(len(items))
            items[i] = (items[i][0], rng.choice(_ODD_VALUES))
        elif r < 0.85:
            k = rng.choice(["rank", "senders", "head0", "row0", "rows", "inc", "resume",
                            "time", "qpos", "zzz", "v"])
            items.insert(rng.randrange(len(items) + 1), (k, rng.choice(_ODD_VALUES)))
        else:
            items = [(k, rng.choice([0, 1, 2, 3]) if k == "v" else v) for k, v in items]
    pk = msgpack.Packer(use_bin_type=True)
    out = bytearray(pk.pack_map_header(len(items)))
    for k, v in items:
        out += pk.pack(k) + pk.pack(v)
    return bytes(out)


def raw_header(rng, fd):
    """The fields as a header map, unchecked, with v 1 or 2."""
    import msgpack
    hd = {"v": rng.choice([1, 2, 2])}
    for k in proto._KNOWN[1:]:
        if fd.get(k) is not None:
            hd[k] = fd[k]
    return msgpack.packb(hd, use_bin_type=True)


def _frames(fd, header):
    out = [proto.topic(fd["run"]), header]
    if fd["type"] == "snapshot":
        out.append(b"\0" * fd["tensor_bytes"])
    return out


def t_c_proto_random():
    """proto.py and proto/proto.c on 3 x 2000 random messages: valid ones of
    both versions (the same header bytes from both encoders; both decoders
    give the same fields, and re-encoding gives the bytes), fields with
    faults (the same error name from both encoders), headers broken at the
    msgpack level and fields past the encoder's checks (the same error name
    and detail from both decoders, or the same fields)."""
    tmp = tempfile.mkdtemp(prefix="sw-cproto-")
    try:
        try:
            c = CProto(tmp)
        except OSError as e:
            print("     (proto.c not compiled, only the Python side ran: %s)" % str(e)[:200])
            return
        import msgpack
        seen = {}
        for seed in (1, 2, 3):
            rng = random.Random(seed)
            for _ in range(2000):
                fd = random_fields(rng)
                a, b = _py_encode(fd), c.encode(fd)
                assert a == b, (fd, a, b)
                fr = _frames(fd, a)
                da, db = _py_decode(fr), c.decode(fr)
                assert da == db and proto.encode_header(da) == a, (fd, da, db)
                seen["ok-v%d" % da["v"]] = seen.get("ok-v%d" % da["v"], 0) + 1
                bad = break_fields(rng, fd)
                a, b = _py_encode(bad), c.encode(bad)
                assert a == b, (bad, a, b)
                seen["encode-" + (a if isinstance(a, str) else "ok")] = 1
                for hb in (break_header(rng, msgpack.unpackb(proto.encode_header(fd))),
                           raw_header(rng, bad)):
                    fr = _frames(fd, hb)
                    if rng.random() < 0.05:
                        fr = fr[:2] if len(fr) == 3 else fr + [b""]
                    da, db = _py_decode(fr), c.decode(fr)
                    assert da == db, (hb.hex(), da, db)
                    key = "decode-" + (da[0] if isinstance(da, tuple) else "ok")
                    seen[key] = seen.get(key, 0) + 1
        for k in ("ok-v1", "ok-v2", "encode-ok", "encode-limit", "encode-dims",
                  "encode-field", "decode-ok", "decode-limit", "decode-dims", "decode-field",
                  "decode-version", "decode-frames"):
            assert seen.get(k), (k, seen)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------ the client, v2

def t_client_senders():
    """rank, senders and incarnation: checked; on the wire in every message
    (the end included) when senders > 1, and a single sender stays v1."""
    ep = "tcp://127.0.0.1:%d" % free_port()
    for kw in (dict(senders=0), dict(senders=65537), dict(senders=2, rank=2, incarnation=5),
               dict(rank=-1), dict(rank=1), dict(senders=2), dict(senders=2.0, incarnation=5),
               dict(senders=2, rank=True, incarnation=5), dict(incarnation=0),
               dict(incarnation=1 << 64), dict(incarnation="7"), dict(incarnation=True)):
        try:
            sinkwatch.Client("s", layers=1, heads=1, endpoint=ep, linger=0, **kw).close()
            raise AssertionError("accepted %r" % (kw,))
        except ValueError as e:
            assert str(e), kw
    try:
        sinkwatch.Client("s", layers=1, heads=1, endpoint=ep, senders=2)
    except ValueError as e:
        assert "incarnation" in str(e) and "shared_incarnation" in str(e), e
    x = probs(np.random.default_rng(3), heads=4, rows=3, keys=8)
    cap = Capture()
    try:
        cs = [sinkwatch.Client("py-senders", layers=2, heads=4, endpoint=cap.endpoint,
                               rank=r, senders=3, incarnation=12345) for r in range(3)]
        assert [c.incarnation for c in cs] == [12345] * 3 and cs[2].rank == 2
        assert "rank 2 of 3" in repr(cs[2])
        for c in cs:
            assert c.send(5, c.rank % 2, x) and c.end() and c.flush(5.0) == 0
        got = [proto.decode_message(cap.recv(10.0)) for _ in range(6)]
        for c in cs:
            mine = [h for h in got if h["rank"] == c.rank]
            assert [h["type"] for h in mine] == ["snapshot", "end"], mine
            assert [h["seq"] for h in mine] == [0, 1], mine
            for h in mine:
                assert (h["v"], h["senders"], h["inc"]) == (2, 3, 12345), h
            assert mine[0]["head0"] == 0 and mine[0]["shape"] == [4, 3, 8], mine[0]
            c.close()
        # senders=1 with a given incarnation (one process resuming an
        # incarnation by number, say): version 1, no v2 key
        c = sinkwatch.Client("py-senders", layers=2, heads=4, endpoint=cap.endpoint,
                             incarnation=99)
        assert c.send(0, 0, x) and c.end() and c.flush(5.0) == 0
        for _ in range(2):
            fr = cap.recv(10.0)
            h = proto.decode_message(fr)
            assert h["v"] == 1 and h["inc"] == 99, h
            assert "rank" not in _map_keys(fr[1]) and "senders" not in _map_keys(fr[1])
        c.close()
    finally:
        cap.close()


def t_client_parts():
    """send(head0=, row0=, rows=): a part of a layer goes out with its
    head0, row0 and rows; the bounds are ValueErrors before anything is
    numbered; the tensor is the part's."""
    rng = np.random.default_rng(4)
    cap = Capture()
    try:
        c = sinkwatch.Client("py-parts", layers=3, heads=4, endpoint=cap.endpoint,
                             rank=1, senders=2, incarnation=777)
        x = probs(rng, heads=2, rows=5, keys=8)
        bad = [dict(array=x), dict(array=x, head0=3), dict(array=x, head0=4),
               dict(array=x, head0=-1), dict(array=x, head0=1.0), dict(array=x, head0=True),
               dict(array=x, head0=2, rows=4), dict(array=x, head0=2, row0=1),
               dict(array=x, head0=2, row0=6, rows=10), dict(array=x, head0=2, rows=65537),
               dict(array=x, head0=2, row0=-1, rows=9), dict(array=x, head0=2, rows=0),
               dict(array=x[:, :0], head0=2), dict(array=x[:0], head0=0),
               dict(array=x, head0=2, row0=2, rows=9, qpos=[1, 2, 3, 4, 5, 6]),
               dict(array=x, head0=2, rows="9")]
        for kw in bad:
            try:
                c.send(0, 0, **kw)
                raise AssertionError("accepted %r" % ({k: v for k, v in kw.items()
                                                       if k != "array"},))
            except ValueError as e:
                assert str(e)
        assert c.stats["next_seq"] == 0
        try:
            c.send(0, 0, x, head0=3)
        except ValueError as e:
            assert "2 heads from head0 3" in str(e) and "4 heads" in str(e), e
        try:
            c.send(0, 0, x, head0=2, row0=6, rows=10)
        except ValueError as e:
            assert "5 rows from row0 6" in str(e) and "rows=10" in str(e), e
        sent = [dict(array=x, head0=2), dict(array=x, head0=0, row0=4, rows=9,
                                             qpos=[10, 11, 12, 13, 14]),
                dict(array=probs(rng, heads=4, rows=5, keys=8)),
                dict(array=probs(rng, heads=4, rows=5, keys=8), head0=0, row0=0, rows=5),
                dict(array=x[:1], head0=3, row0=1, rows=6)]
        for i, kw in enumerate(sent):
            assert c.send(7, i % 3, **kw)
        assert c.flush(5.0) == 0
        for i, kw in enumerate(sent):
            fr = cap.recv(10.0)
            h = proto.decode_message(fr)
            arr = kw["array"]
            want = (kw.get("head0") or 0, kw.get("row0", 0), kw.get("rows") or arr.shape[1])
            assert (h["head0"], h["row0"], h["rows"]) == want, (i, h)
            assert h["shape"] == list(arr.shape) and h["seq"] == i and h["layer"] == i % 3, h
            assert (h["rank"], h["senders"], h["inc"], h["v"]) == (1, 2, 777, 2), h
            assert bytes(fr[2]) == np.ascontiguousarray(arr, dtype="<f4").tobytes(), i
            assert h.get("qpos") == kw.get("qpos"), h
            keys = [k for k in _map_keys(fr[1]) if k in ("head0", "row0", "rows")]
            assert keys == ([] if want == (0, 0, arr.shape[1]) and arr.shape[0] == 4 else
                            ["head0"] * (want[0] != 0 or arr.shape[0] != 4) +
                            ["row0", "rows"] * (want[1] != 0 or want[2] != arr.shape[1])), \
                (i, keys)
        c.close()
    finally:
        cap.close()


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


def t_endpoint_env():
    """SINKWATCH_ENDPOINT: a Client without an endpoint (None or "") sends
    there; an endpoint given wins. SINKWATCH_CONTROL: default_control()."""
    x = probs(np.random.default_rng(3))
    env, given = Capture(), Capture()
    saved = {k: os.environ.get(k) for k in ("SINKWATCH_ENDPOINT", "SINKWATCH_CONTROL")}
    try:
        os.environ.pop("SINKWATCH_ENDPOINT", None)
        os.environ.pop("SINKWATCH_CONTROL", None)
        assert sinkwatch.default_endpoint() == sinkwatch.DEFAULT_ENDPOINT == "tcp://127.0.0.1:5710"
        assert sinkwatch.default_control() == sinkwatch.DEFAULT_CONTROL == "tcp://127.0.0.1:5711"
        os.environ["SINKWATCH_ENDPOINT"] = env.endpoint
        os.environ["SINKWATCH_CONTROL"] = "tcp://127.0.0.1:1"
        assert sinkwatch.default_control() == "tcp://127.0.0.1:1"
        for rnd, (ep, cap) in enumerate(((None, env), ("", env), (given.endpoint, given))):
            run = "py-env-%d" % rnd
            kw = {} if ep is None else {"endpoint": ep}
            c = sinkwatch.Client(run, layers=1, heads=2, linger=5.0, **kw)
            assert c.endpoint == cap.endpoint, (rnd, c.endpoint, cap.endpoint)
            assert c.send(0, 0, x) is True
            assert c.flush(10.0) == 0, (rnd, c.stats)
            h = proto.decode_message(cap.recv(10.0))
            assert h["run"] == run, (rnd, h["run"])
            c.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        env.close()
        given.close()


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
                          "next_seq": n, "subscribed": False, "auth_failures": 0,
                          "auth_status": 0}, st
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
                  "subscribed": False, "auth_failures": 0, "auth_status": 0}, st
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
        # queued at once, not waited on: a send that waited for the daemon
        # would take the linger or the block timeout (seconds); the bound is
        # loose enough for a loaded machine (10 ms failed once under make
        # distcheck), the bench measures the real cost (client p99)
        t0 = time.perf_counter()
        assert c.send(1, 0, x) is True and c.stats["queued"] == 1
        assert time.perf_counter() - t0 < 0.5, time.perf_counter() - t0
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
                         "next_seq": 3, "subscribed": False, "auth_failures": 0,
                         "auth_status": 0}, final
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


def t_warn_undelivered():
    """Issue 26 item 11: five messages to a port where no daemon listens
    are queued, not dropped, while the job runs; close() gives them up and
    says so once, naming the endpoint and the count (it used to say
    nothing: the only warning came when the queue filled)."""
    ep = "tcp://127.0.0.1:%d" % free_port()
    x = probs(np.random.default_rng(8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = sinkwatch.Client("py-nowhere", layers=1, heads=2, endpoint=ep, linger=0.1)
        assert all(c.send(t, 0, x) for t in range(5))
        during = [str(w.message) for w in caught]
        final = c.close()
        c.close()       # twice: no second warning
    ours = [w for w in caught if issubclass(w.category, sinkwatch.SinkwatchWarning)]
    assert during == [], during
    assert final["dropped"] == 5 and final["sent"] == 0, final
    assert len(ours) == 1, [str(w.message) for w in caught]
    msg = str(ours[0].message)
    assert ep in msg and "5 of 5 messages not delivered" in msg and "py-nowhere" in msg, msg
    assert "no daemon subscribed" in msg, msg
    assert ours[0].filename == __file__, ours[0].filename      # points at the close()
    # a drop while running: one warning then (endpoint and counts), one at close
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = sinkwatch.Client("py-nowhere", layers=1, heads=2, endpoint=ep, linger=0,
                             queue_max=2)
        assert [c.send(t, 0, x) for t in range(5)] == [True, True, False, False, False]
        assert c.end() is False
        c.close()
    ours = [str(w.message) for w in caught
            if issubclass(w.category, sinkwatch.SinkwatchWarning)]
    assert len(ours) == 2, ours
    assert ep in ours[0] and "dropped message 2" in ours[0] and "1 dropped, 0 sent, 2 queued" \
        in ours[0], ours[0]
    assert ep in ours[1] and "6 of 6 messages not delivered" in ours[1] and \
        "2 still queued" in ours[1] and "4 dropped before" in ours[1], ours[1]
    # warnings as errors: close() still returns its counters
    c = sinkwatch.Client("py-nowhere", layers=1, heads=2, endpoint=ep, linger=0)
    c.send(0, 0, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.close()["dropped"] == 1


def t_no_warning_delivered(d):
    """With a daemon, a whole run and close(): no warning at all."""
    x = probs(np.random.default_rng(9))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = sinkwatch.Client("py-quiet", layers=1, heads=2, endpoint=d.listen)
        for t in range(5):
            assert c.send(t, 0, x) is True
        assert c.end() is True
        final = c.close()
    assert final["dropped"] == 0 and final["sent"] == 6, final
    assert [str(w.message) for w in caught] == [], [str(w.message) for w in caught]
    path = wait_ended(d, "py-quiet")
    assert steps_of(path) == list(range(5)), steps_of(path)


def t_localhost():
    """Issue 26 item 12: a daemon told to listen (and answer) on
    tcp://localhost:P binds 127.0.0.1 (ZeroMQ took localhost for an
    interface: "No such device") and stores what a client sends there."""
    d = Daemon()
    d.listen = "tcp://localhost:%d" % d.port
    d.control = "tcp://localhost:%d" % d.cport
    d.start()
    try:
        x = probs(np.random.default_rng(10))
        c = sinkwatch.Client("py-localhost", layers=1, heads=2, endpoint=d.listen)
        assert c.send(0, 0, x) is True and c.end() is True
        final = c.close()
        assert final["sent"] == 2 and final["dropped"] == 0, final
        path = wait_ended(d, "py-localhost")
        assert steps_of(path) == [0], steps_of(path)
        st = d.status()
        assert st["server"]["listen"] == d.listen and st["server"]["control"] == d.control, \
            st["server"]
    finally:
        assert d.stop() == 0
        shutil.rmtree(d.tmp, ignore_errors=True)


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
    the golden bytes (which tests/unit/test_proto.c holds the C encoder to)."""
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
            # version 2 golden messages: the client's rank, senders and inc
            info.update(rank=m["rank"], senders=m["senders"], incarnation=m.get("inc"),
                        resume_from=m.get("resume"))
            c = sinkwatch.Client(endpoint=cap.endpoint, **info)
            c._seq = m["seq"]
            c._clock = lambda t=m.get("time", math.nan): t
            if m["type"] == "snapshot":
                arr = np.frombuffer(frames[2], dtype=np.dtype(NP_OF[m["dtype"]]).newbyteorder("<"))
                arr = arr.reshape(m["shape"])
                assert c.send(m["step"], m["layer"], arr, kind=m["kind"], qpos=m.get("qpos"),
                              dtype="bf16" if m["dtype"] == "bf16" else None,
                              head0=m["head0"], row0=m["row0"], rows=m["rows"])
            else:
                assert c.end()
            assert c.flush(3.0) == 0, (name, c.stats)
            got = cap.recv()
            c.close()
            # the version 1 golden messages predate incarnations: the header
            # is theirs plus "inc", and without it their bytes
            h = proto.decode_header(got[1])
            assert proto.encode_header(proto.decode_header(got[1])) == got[1], name
            if "inc" not in m:
                assert h.pop("inc") == c.incarnation, name
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
    """sw_client_opts; rank, senders and incarnation since libsinkwatch.so.1
    (a library before it reads only the fields before them: zeros there are
    the defaults either way)."""
    _fields_ = [("endpoint", ctypes.c_char_p), ("blocking", ctypes.c_int),
                ("block_timeout_ms", ctypes.c_int), ("queue_max", ctypes.c_int),
                ("queue_max_bytes", ctypes.c_size_t), ("linger_ms", ctypes.c_int),
                ("resuming", ctypes.c_int), ("resume_from", ctypes.c_int64),
                ("rank", ctypes.c_uint32), ("senders", ctypes.c_uint32),
                ("incarnation", ctypes.c_uint64),
                # CURVE, since libsinkwatch.so.2 (NULL: the environment, none here)
                ("server_key", ctypes.c_char_p), ("key_file", ctypes.c_char_p)]


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


def _blank_time(h):
    """A header with the 8 bytes of its time (float 64) zeroed."""
    i = h.index(b"\xa4time\xcb") + 6
    return h[:i] + b"\0" * 8 + h[i + 8:]


def t_wire_equals_c_client_v2():
    """Several senders from libsinkwatch (sw_client_opts rank, senders,
    incarnation; sw_client_send_part) and from the Python client (rank,
    senders, incarnation; send(head0=, row0=, rows=)): equal bytes, but for
    the 8 bytes of the wall-clock time, whole layers, parts and the end."""
    path = c_client_lib()
    if path is None:
        print("     (libsinkwatch.so not built)")
        return
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "sw_client_send_part"):
        print("     (this libsinkwatch has no sw_client_send_part: skipped)")
        return
    lib.sw_client_new.argtypes = [ctypes.POINTER(_Opts), ctypes.POINTER(_Run),
                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.sw_client_send.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Snap)]
    lib.sw_client_send_part.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Snap), ctypes.c_uint32,
                                        ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    lib.sw_client_end.argtypes = [ctypes.c_void_p]
    lib.sw_client_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.sw_client_destroy.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    rng = np.random.default_rng(8)
    H, inc = 6, (1 << 60) + 12345
    # (array, qpos, head0 (None: whole layer), row0, rows)
    msgs = [(probs(rng, H, 4, 16), [12, 13, 14, 15], None, 0, None),
            (probs(rng, 2, 4, 16), None, 2, 0, None),
            (probs(rng, H, 3, 16), [5, 6, 7], 0, 5, 9),
            (probs(rng, 1, 1, 16), [200], 5, 300, 301),
            (probs(rng, 3, 2, 16), None, 3, 0, 2)]
    cap = Capture()
    try:
        for rank, senders in ((1, 3), (0, 1)):
            run = "cmp-v2/%d" % senders
            o = _Opts(cap.endpoint.encode(), 0, -1, 16, 256 << 20, 2000, 0, 0, rank, senders,
                      inc)
            ri = _Run(run.encode(), b"m", 5, 7, H, 0, 1)
            ch = ctypes.c_void_p()
            assert lib.sw_client_new(ctypes.byref(o), ctypes.byref(ri), ctypes.byref(ch)) == 0
            keep = []
            for i, (arr, q, h0, r0, rows) in enumerate(msgs):
                arr = np.ascontiguousarray(arr)
                keep.append(arr)
                qp = None
                if q is not None:
                    qa = (ctypes.c_uint32 * len(q))(*q)
                    keep.append(qa)
                    qp = ctypes.cast(qa, ctypes.POINTER(ctypes.c_uint32))
                sn = _Snap(40 + i, i, 0, 0, arr.shape[1], arr.shape[2], qp, arr.ctypes.data,
                           arr.nbytes)
                if h0 is None:
                    assert lib.sw_client_send(ch, ctypes.byref(sn)) == 0, i
                else:
                    assert lib.sw_client_send_part(ch, ctypes.byref(sn), h0, arr.shape[0], r0,
                                                   rows or 0) == 0, i
            assert lib.sw_client_end(ch) == 0
            assert lib.sw_client_flush(ch, 3000) == 0
            from_c = [cap.recv() for _ in range(len(msgs) + 1)]
            lib.sw_client_destroy(ctypes.byref(ch))
            c = sinkwatch.Client(run, layers=7, heads=H, endpoint=cap.endpoint, model="m",
                                 params=5, rank=rank, senders=senders, incarnation=inc)
            for i, (arr, q, h0, r0, rows) in enumerate(msgs):
                assert c.send(40 + i, i, arr, qpos=q, head0=h0, row0=r0, rows=rows), i
            assert c.end() and c.flush(3.0) == 0
            from_py = [cap.recv() for _ in range(len(msgs) + 1)]
            c.close()
            for i, (a, b) in enumerate(zip(from_c, from_py)):
                assert a[0] == b[0] and a[2:] == b[2:], (senders, i)
                assert _blank_time(a[1]) == _blank_time(b[1]), \
                    "senders %d, message %d: C %s\n        Python %s" % (
                        senders, i, a[1].hex(), b[1].hex())
                h = proto.decode_header(a[1])
                assert (h["rank"], h["senders"], h["inc"]) == (rank, senders, inc), h
                # one sender: v1 for the whole layer and the end, v2 for parts
                assert h["v"] == (1 if senders == 1 and i in (0, len(msgs)) else 2), (i, h)
    finally:
        cap.close()


CASES = {
    "golden_reencode": lambda: t_golden_reencode(),
    "golden_worked_example": lambda: t_golden_worked_example(),
    "golden_bad_message": lambda: t_golden_bad_message(),
    "golden_bad_header": lambda: t_golden_bad_header(),
    "header_only_names": lambda: t_header_only_names(),
    "encode_validation": lambda: t_encode_validation(),
    "v2_canonical": lambda: t_v2_canonical(),
    "c_proto_random": lambda: t_c_proto_random(),
    "client_senders": lambda: t_client_senders(),
    "client_parts": lambda: t_client_parts(),
    "bad_arguments": lambda: t_bad_arguments(),
    "defaults": lambda: t_defaults(),
    "burst_after_new": lambda: t_burst_after_new(),
    "endpoint_env": lambda: t_endpoint_env(),
    "incarnation": lambda: t_incarnation(),
    "wire_equals_golden": lambda: t_wire_equals_golden(),
    "wire_equals_c_client": lambda: t_wire_equals_c_client(),
    "wire_equals_c_client_v2": lambda: t_wire_equals_c_client_v2(),
    "close_bounded": lambda: t_close_bounded(),
    "warn_undelivered": lambda: t_warn_undelivered(),
    "localhost": lambda: t_localhost(),
    "down_then_up": lambda: t_down_then_up(),
    "daemon_restart": lambda: t_daemon_restart(),
    "slow_joiner": "daemon",
    "blocking": "daemon",
    "dtypes_kinds": "daemon",
    "no_warning_delivered": "daemon",
}
WITH_DAEMON = {"slow_joiner": t_slow_joiner, "blocking": t_blocking,
               "dtypes_kinds": t_dtypes_kinds, "no_warning_delivered": t_no_warning_delivered}


def main():
    preload_asan()      # ctypes loads the build's libsinkwatch.so: ASan first (an asan build)
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
