#!/usr/bin/python3
"""The two decoders of the protocol against each other: proto/proto.c (as
the build linked it, through tests/decode_oracle, so a sanitizer build runs
it with the sanitizers) and contrib/python/sinkwatch/proto.py. Every message
must get the same verdict from both: the same error name and detail, or
success with the same decoded message (its canonical header, encoded by
each side, byte for byte, and the same version).

The messages: the golden messages; random valid ones of both versions and
their structured faults (the generators of tests/e2e/python_client.py); each
of those mutated at the byte level (bits flipped, bytes set to msgpack type
bytes and edge values, inserted, deleted, copied, headers spliced, frames
cut, added and dropped, tensors a byte off); and the random headers of
tests/unit/test_proto.c test_random_headers, whose verdicts the C test asserts
from tests/data/random_headers.txt: this test checks that file against both
decoders (--write-random-headers rewrites it when they agree).

    SINKWATCHD=./sinkwatchd SW_SRCDIR=. /usr/bin/python3 tests/e2e/differential.py [--seed N] [--count N]
"""
import argparse
import os
import random
import struct
import subprocess
import sys

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not os.environ.get("SINKWATCHD"):
    print("SINKWATCHD not set: skipped")
    sys.exit(77)
BUILDDIR = os.path.dirname(os.path.abspath(os.environ["SINKWATCHD"]))
ORACLE = os.path.join(BUILDDIR, "tests", "decode_oracle")
RANDOM_HEADERS = os.path.join(SRCDIR, "tests", "data", "random_headers.txt")
GOLDEN = os.path.join(SRCDIR, "tests", "data", "golden")

sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))
from sinkwatch import proto  # noqa: E402
import python_client as pc  # noqa: E402  (its message generators)

# bytes a mutation writes: msgpack type bytes and integer edges
INTERESTING = [0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x93, 0x9f, 0xa0, 0xa1, 0xbf,
               0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xca, 0xcb, 0xcc, 0xcd,
               0xce, 0xcf, 0xd0, 0xd3, 0xd4, 0xd8, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde,
               0xdf, 0xe0, 0xff]


# ---- the C side -------------------------------------------------------------

def c_verdicts(messages):
    """tests/decode_oracle on a list of frame lists: one verdict each,
    ("err", name, detail) or ("ok", version, canonical header hex)."""
    out = bytearray()
    for frames in messages:
        out += struct.pack("<I", len(frames))
        for f in frames:
            out += struct.pack("<I", len(f)) + bytes(f)
    p = subprocess.run([ORACLE], input=bytes(out), capture_output=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("decode_oracle exited %d: %s" % (p.returncode,
                                                             p.stderr.decode(errors="replace")[-3000:]))
    lines = p.stdout.decode("utf-8", "replace").split("\n")[:-1]
    assert len(lines) == len(messages), (len(lines), len(messages))
    res = []
    for line in lines:
        kind, rest = line.split(" ", 1)
        if kind == "err":
            name, _, detail = rest.partition(" ")
            res.append(("err", name, detail))
        elif kind == "ok":
            v, hx = rest.split(" ")
            res.append(("ok", int(v), hx))
        else:
            res.append((kind, rest, ""))
    return res


def py_verdict(frames):
    """The same verdict from proto.py."""
    try:
        d = proto.decode_message(frames)
    except proto.ProtocolError as e:
        return ("err", e.errname, e.detail)
    d.pop("tensor", None)
    try:
        return ("ok", d["v"], proto.encode_header(d).hex())
    except proto.ProtocolError as e:
        return ("encode-refused", e.errname, "")


# ---- the messages -----------------------------------------------------------

def golden():
    out = []
    with open(os.path.join(GOLDEN, "MANIFEST")) as f:
        for line in f:
            if line.strip():
                name, _ = line.split()
                with open(os.path.join(GOLDEN, name), "rb") as g:
                    out.append(proto.parse_golden(g.read()))
    return out


def generated(rng, n):
    """Valid random messages and their structured faults (python_client.py)."""
    import msgpack
    out = []
    for _ in range(n):
        fd = pc.random_fields(rng)
        hdr = proto.encode_header(fd)
        out.append(pc._frames(fd, hdr))
        bad = pc.break_fields(rng, fd)
        out.append(pc._frames(fd, pc.break_header(rng, msgpack.unpackb(hdr))))
        out.append(pc._frames(fd, pc.raw_header(rng, bad)))
    return out


def mutate_bytes(rng, b, donors):
    b = bytearray(b)
    op = rng.randrange(9)
    i = rng.randrange(len(b) + 1)
    if op == 0 and b:
        j = min(i, len(b) - 1)
        b[j] ^= 1 << rng.randrange(8)
    elif op == 1 and b:
        b[min(i, len(b) - 1)] = rng.choice(INTERESTING)
    elif op == 2:
        b[i:i] = bytes(rng.choice(INTERESTING) for _ in range(rng.randint(1, 3)))
    elif op == 3 and b:
        del b[i:i + rng.randint(1, 4)]
    elif op == 4:
        del b[rng.randrange(len(b) + 1):]             # cut
    elif op == 5 and b:
        j = rng.randrange(len(b))
        b[i:i] = b[j:j + rng.randint(1, 16)]          # a copy of some bytes
    elif op == 6:
        d = rng.choice(donors)
        j = rng.randrange(len(d) + 1)
        b = b[:i] + d[j:j + rng.randint(1, 24)]       # spliced with another header
    elif op == 7 and b:
        # a number widened: the byte before becomes a uint 8/16/32/64 prefix
        j = min(i, len(b) - 1)
        b[j:j + 1] = bytes([rng.choice([0xcc, 0xcd, 0xce, 0xcf])]) + bytes(rng.randint(0, 8))
    else:
        b[min(i, len(b)):min(i, len(b))] = bytes([rng.randrange(256)])
    return bytes(b)


def mutate(rng, frames, donors):
    """1 to 4 byte-level faults, mostly in the header."""
    fr = [bytes(f) for f in frames]
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if not fr:
            fr = [b"sw/x"]
        if r < 0.75 and len(fr) > 1:
            fr[1] = mutate_bytes(rng, fr[1], donors)
        elif r < 0.83:
            fr[0] = mutate_bytes(rng, fr[0], donors)
        elif r < 0.9 and len(fr) == 3:
            fr[2] = fr[2][:-1] if fr[2] and rng.random() < 0.5 else fr[2] + b"\0"
        elif r < 0.95:
            fr = fr[:-1] if fr and rng.random() < 0.5 else fr + [b""]
        else:
            fr = fr + [fr[-1]]
    return fr[:8]


def splitmix(state):
    """tests/unit/test_proto.c rnd(): splitmix64. Returns (value, new state)."""
    m = (1 << 64) - 1
    state = (state + 0x9e3779b97f4a7c15) & m
    z = state
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & m
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & m
    return z ^ (z >> 31), state


RANDOM_HEADERS_SEED = 0x5eed
RANDOM_HEADERS_N = 3000


# test_random_headers' pieces: msgpack strs of the header keys, and values
RH_KEYS = [b'\xa1v', b'\xa3run', b'\xa3seq', b'\xa5model',
           b'\xa6params', b'\xa6layers', b'\xa5heads', b'\xa4sink',
           b'\xabfixed_probe', b'\xa4step', b'\xa5layer', b'\xa4kind',
           b'\xa5dtype', b'\xa5shape', b'\xa4qpos', b'\xa4time',
           b'\xa3inc', b'\xa6resume', b'\xa4rank', b'\xa7senders',
           b'\xa5head0', b'\xa4row0', b'\xa4rows', b'\xa3zzz']
RH_VALUES = [b'\xa1x', b'\xa0', b'\x00', b'\x01',
           b'\x02', b'\x05', b'\xcc\xff', b'\xcd\x01\x00',
           b'\xce\x00\x01\x00\x00', b'\xc0', b'\xc3', b'\xc2',
           b'\xff', b'\xa5probs', b'\xa8rowstats', b'\xa3f32',
           b'\xa3f16', b'\x93\x01\x01\x02', b'\x93\x01\x01\x06', b'\x92\x01\x01',
           b'\x91\x00', b'\x90', b'\xcbA\xd0\x00\x00\x00\x00\x00\x00', b'\x80']


def random_headers():
    """The headers of test_random_headers, byte for byte (its
    random_header()): case it % 4 is 0, 1 to 24 pieces, keys or values; 1,
    a fixmap of a random size and such pieces; 2, a fixmap holding "v", a
    version byte and 0 to 13 key-value pairs; 3, the same with a type
    (snapshot, end, an unknown name or a number). A
    piece is 1 in 8 a random byte instead."""
    st = [RANDOM_HEADERS_SEED]

    def rnd():
        v, st[0] = splitmix(st[0])
        return v

    def piece(tokens):
        if rnd() % 8 == 0:
            return bytes([rnd() & 0xff])
        return tokens[rnd() % len(tokens)]
    out = []
    for it in range(RANDOM_HEADERS_N):
        h = bytearray()
        if it % 4 < 2:
            if it % 4 == 1:
                h.append(0x80 | rnd() % 16)
            for _ in range(1 + rnd() % 24):
                h += piece(RH_KEYS) if rnd() % 2 else piece(RH_VALUES)
        else:
            k = rnd() % 14
            h.append(0x80 | (k + (it % 4 == 3) + 1))
            h += b"\xa1v"
            h.append((1 + rnd() % 2) if rnd() % 4 else rnd() & 0xff)
            if it % 4 == 3:
                h += b"\xa4type" + [b"\xa8snapshot", b"\xa3end", b"\xa4snap", b"\x01"][rnd() % 4]
            for _ in range(k):
                h += piece(RH_KEYS)
                h += piece(RH_VALUES)
        out.append(bytes(h))
    return out


def fnv1a(b):
    h = 0x811c9dc5
    for c in b:
        h = ((h ^ c) * 0x01000193) & 0xffffffff
    return h


# ---- the test ---------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--count", type=int, default=3000, help="random valid messages")
    ap.add_argument("--write-random-headers", action="store_true")
    a = ap.parse_args()
    if not os.access(ORACLE, os.X_OK):
        print("FAIL %s not built" % ORACLE)
        return 1
    rng = random.Random(a.seed)
    base = golden() + generated(rng, a.count)
    donors = [f[1] for f in base if len(f) > 1]
    mutated = [mutate(rng, rng.choice(base), donors) for _ in range(4 * len(base))]
    rh = random_headers()
    rh_msgs = [[b"sw/x", h, b""] for h in rh]
    groups = [("golden+generated", base), ("mutated", mutated), ("random_headers", rh_msgs)]

    failed = 0
    for name, msgs in groups:
        cv = c_verdicts(msgs)
        seen = {}
        bad = []
        for frames, c in zip(msgs, cv):
            p = py_verdict(frames)
            key = c[1] if c[0] == "err" else c[0]
            seen[key] = seen.get(key, 0) + 1
            if c != p or c[0] == "encode-refused":
                bad.append((frames, c, p))
        print("%-18s %6d messages: %s" % (name, len(msgs), ", ".join(
            "%s %d" % kv for kv in sorted(seen.items(), key=lambda kv: -kv[1]))))
        for frames, c, p in bad[:10]:
            print("FAIL %s\n  frames %s\n  C:      %r\n  Python: %r" % (
                name, [f.hex() for f in frames], c, p))
        if bad:
            print("FAIL %s: %d of %d messages with different verdicts" % (name, len(bad), len(msgs)))
            failed += 1
        if name == "mutated":
            # every reason a message can have came up
            want = set(proto.ERRNAMES) - {"nomem", "inval"}
            missing = want - set(seen)
            if missing:
                print("FAIL mutated: no message got %s" % sorted(missing))
                failed += 1
        if name == "random_headers":
            failed += check_random_headers(rh, cv, a.write_random_headers)
    print("%s" % ("FAIL" if failed else "ok"))
    return 1 if failed else 0


def check_random_headers(headers, verdicts, write):
    """tests/data/random_headers.txt: per case its length, FNV-1a of the
    header and the error name both decoders give."""
    lines = ["%d %d %08x %s" % (i, len(h), fnv1a(h), v[1]) for i, (h, v) in
             enumerate(zip(headers, verdicts))]
    if write:
        with open(RANDOM_HEADERS, "w") as f:
            f.write("# tests/unit/test_proto.c test_random_headers: case, header bytes, FNV-1a of\n"
                    "# the header, the error name of both decoders. Written by\n"
                    "# tests/e2e/differential.py --write-random-headers (seed %#x, %d cases).\n"
                    % (RANDOM_HEADERS_SEED, RANDOM_HEADERS_N))
            f.write("\n".join(lines) + "\n")
        print("wrote %s" % RANDOM_HEADERS)
        return 0
    with open(RANDOM_HEADERS) as f:
        have = [line.rstrip("\n") for line in f if not line.startswith("#")]
    if have != lines:
        diff = [(x, y) for x, y in zip(have, lines) if x != y][:5]
        print("FAIL %s disagrees with the decoders (%d lines, %d expected): %r"
              % (RANDOM_HEADERS, len(have), len(lines), diff))
        return 1
    print("random_headers.txt agrees with both decoders (%d cases)" % len(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
