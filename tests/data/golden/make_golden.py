#!/usr/bin/python3
"""make_golden.py: regenerates the golden messages of the sinkwatch protocol.

Run by hand, from anywhere, with a Python that has msgpack (on the build
machines that is /usr/bin/python3, not the first python3 on PATH):

    /usr/bin/python3 tests/data/golden/make_golden.py

It rewrites every *.msg file and MANIFEST beside itself. The committed
artefact is the bytes: tests/test_proto.c reads them and never runs this
script. Regenerating must give the same bytes (the script is deterministic);
if it does not, the protocol changed and PROTOCOL.md, SWP_VERSION and the
golden files change together.

Container format (swp_golden_parse): each frame as a uint32 little-endian
length followed by its bytes. MANIFEST: one line per file, "NAME.msg ok" or
"NAME.msg <errname>" with the swp_errname() of the error the decoder must
return (default limits, tensor_max 256 MiB).

The canonical header encoding (proto/PROTOCOL.md) is built here by hand,
pair by pair, and checked against msgpack.packb of the same dict, so that
the malformed variants can reuse the same pieces.
"""

import math
import os
import struct

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))


def pk(x):
    # use_bin_type (the default) packs str as msgpack str, str8 included;
    # floats as float 64, ints in their smallest encoding.
    return msgpack.packb(x, use_bin_type=True, use_single_float=False)


def map_header(n):
    if n < 16:
        return bytes([0x80 | n])
    if n < 65536:
        return b"\xde" + struct.pack(">H", n)
    return b"\xdf" + struct.pack(">I", n)


def mp_map(pairs):
    """A msgpack map from (key, value) pairs; a bytes value is taken raw."""
    out = map_header(len(pairs))
    for k, v in pairs:
        out += pk(k) if not isinstance(k, bytes) else k
        out += v if isinstance(v, bytes) else pk(v)
    return out


def snapshot_pairs(run, seq, model, params, layers, heads, sink, fixed, step,
                   layer, kind, dtype, shape, qpos=None, time=None):
    p = [("v", 1), ("type", "snapshot"), ("run", run), ("seq", seq),
         ("model", model), ("params", params), ("layers", layers),
         ("heads", heads), ("sink", sink), ("fixed_probe", fixed),
         ("step", step), ("layer", layer), ("kind", kind), ("dtype", dtype),
         ("shape", list(shape))]
    if qpos is not None:
        p.append(("qpos", list(qpos)))
    if time is not None:
        p.append(("time", float(time)))
    return p


def end_pairs(run, seq, time=None):
    p = [("v", 1), ("type", "end"), ("run", run), ("seq", seq)]
    if time is not None:
        p.append(("time", float(time)))
    return p


def canonical(pairs):
    b = mp_map(pairs)
    assert b == pk(dict(pairs)), "hand-built map differs from msgpack.packb"
    return b


def topic(run):
    return b"sw/" + run.encode()


# ------------------------------------------------------------------ tensors

def f32(xs):
    return b"".join(struct.pack("<f", x) for x in xs)


def f16(xs):
    return b"".join(struct.pack("<e", x) for x in xs)


def f64(xs):
    return b"".join(struct.pack("<d", x) for x in xs)


def bf16(xs):
    out = b""
    for x in xs:
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
        out += struct.pack("<H", bits)
    return out


def rowstats(row, k):
    """s, w, H, hb, Hc, b of one row of valid keys (METRICS.md sections 1, 4)."""
    s = row[k]
    w = sum(a for i, a in enumerate(row) if i != k)
    H = -sum(a * math.log(a) for a in row if a > 0)
    hb = -sum(a * math.log(a) for a in (s, w) if a > 0)
    Hc = 0.0 if w == 0 else -sum((a / w) * math.log(a / w)
                                 for i, a in enumerate(row) if i != k and a > 0)
    D = len(row)
    lnc = [math.log(a) for i, a in enumerate(row) if i != k]  # rows have no zeros
    b = math.sqrt((D - 1) / D) * (math.log(s) - sum(lnc) / len(lnc))
    return [s, w, H, hb, Hc, b]


# ------------------------------------------------------------------ messages

RUN = "pythia-160m/seed1"
T0 = 1796083200.5   # 2026-12-01 00:00:00.5 UTC

# probs f32 with qpos and time: 2 heads, 3 rows, 4 keys. Row r has
# min(4, qpos[r] + 1) valid keys; the masked ones are sent as 0.
PROBS_F32 = [
    0.75, 0.25, 0, 0,  0.5, 0.25, 0.25, 0,  0.625, 0.125, 0.125, 0.125,
    0.5, 0.5, 0, 0,  0.875, 0.0625, 0.0625, 0,  0.25, 0.25, 0.25, 0.25,
]
probs_f32 = snapshot_pairs(RUN, 3, "pythia-160m", 162322944, 12, 2, 0, True,
                           1000, 5, "probs", "f32", (2, 3, 4),
                           qpos=[1, 2, 3], time=T0)

# logits f16 without qpos (every key valid; -inf is a masked key), no time.
RUN2 = "gpt2-medium/lr3e-4/warmup2000/run-2026-12-01T08:00:00Z"
LOGITS_F16 = [
    2.0, 0.5, -1.0, 0.0, 1.5,  3.0, -0.25, float("-inf"), 0.75, 0.125,
    -2.0, 1.0, 1.0, 0.5, -0.5,  0.0, 0.0, 0.0, 0.0, 0.0,
]
logits_f16 = snapshot_pairs(RUN2, 300, "gpt2-medium", 354823168, 24, 2, 0,
                            False, 143000, 23, "logits", "f16", (2, 2, 5))

# bf16 probs: 1 head, 2 rows, 8 keys, qpos, sink 1, a 7e9 parameter model.
PROBS_BF16 = [
    0.5, 0.25, 0.125, 0.125, 0, 0, 0, 0,
    0.25, 0.5, 0.0625, 0.0625, 0.03125, 0.03125, 0.0625, 0,
]
probs_bf16 = snapshot_pairs("llama-7b-repro", 0, "meta-llama/Llama-2-7b-hf (repro)",
                            6738415616, 32, 1, 1, True, 0, 0, "probs", "bf16",
                            (1, 2, 8), qpos=[3, 6])

# rowstats f64: 2 heads, 2 rows, keys = 6 statistics, computed from rows
# of 4 and 8 valid keys (qpos 3 and 7), sink 0.
SRC = [[[0.7, 0.1, 0.1, 0.1], [0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]],
       [[0.4, 0.3, 0.2, 0.1], [0.9, 0.02, 0.02, 0.02, 0.01, 0.01, 0.01, 0.01]]]
ROWSTATS_F64 = [v for head in SRC for row in head for v in rowstats(row, 0)]
rowstats_f64 = snapshot_pairs(RUN, 4, "pythia-160m", 162322944, 12, 2, 0, True,
                              1000, 5, "rowstats", "f64", (2, 2, 6),
                              qpos=[3, 7], time=T0 + 0.25)


def snap(pairs, tensor, run=None):
    run = run if run is not None else dict(pairs)["run"]
    return [topic(run), canonical(pairs), tensor]


def replace(pairs, key, value):
    return [(k, value if k == key else v) for k, v in pairs]


def drop(pairs, key):
    return [(k, v) for k, v in pairs if k != key]


OK = {
    "snap_probs_f32": snap(probs_f32, f32(PROBS_F32)),
    "snap_logits_f16": snap(logits_f16, f16(LOGITS_F16)),
    "snap_probs_bf16": snap(probs_bf16, bf16(PROBS_BF16)),
    "snap_rowstats_f64": snap(rowstats_f64, f64(ROWSTATS_F64)),
    "end_time": [topic(RUN), canonical(end_pairs(RUN, 5, T0 + 60.0))],
    "end_notime": [topic(RUN2), canonical(end_pairs(RUN2, (1 << 32) + 5))],
}

T = f32(PROBS_F32)
H = canonical(probs_f32)
TP = topic(RUN)


def raw_after(key, raw):
    """The probs f32 header cut after the key `key`, with `raw` appended."""
    kb = pk(key)
    i = H.index(kb) + len(kb)
    return H[:i] + raw


BAD = {
    # msgpack structure, found by the pre-scan before msgpack-c runs
    "bad_truncated": ([TP, H[:len(H) // 2], T], "msgpack"),
    "bad_trailing": ([TP, H + b"\xc0", T], "msgpack"),
    "bad_array_huge": ([TP, raw_after("shape", b"\xdd\xff\xff\xff\xff\x02\x03\x04"), T],
                       "msgpack"),
    "bad_str_huge": ([TP, raw_after("model", b"\xdb\xff\xff\xff\xffpythia"), T],
                     "msgpack"),
    "bad_depth": ([TP, mp_map(probs_f32 + [("x", [[[[[[[[1]]]]]]]])]), T], "msgpack"),
    "bad_not_map": ([TP, pk([1, "snapshot"]), T], "msgpack"),
    "bad_invalid_byte": ([TP, mp_map(probs_f32 + [("x", b"\xc1")]), T], "msgpack"),
    # envelope
    "bad_frames4": ([TP, H, T, b""], "frames"),
    "bad_end_3frames": ([TP, canonical(end_pairs(RUN, 5)), b"\x00" * 4], "frames"),
    "bad_snapshot_2frames": ([TP, H], "frames"),
    "bad_topic_prefix": ([b"xx/" + RUN.encode(), H, T], "topic"),
    "bad_topic_empty_run": ([b"sw/", H, T], "topic"),
    "bad_header_empty": ([TP, b"", T], "header_size"),
    "bad_version": ([TP, mp_map(replace(probs_f32, "v", 3)), T], "version"),
    "bad_version_0": ([TP, mp_map(replace(probs_f32, "v", 0)), T], "version"),
    "bad_v_not_first": ([TP, mp_map([probs_f32[1], probs_f32[0]] + probs_f32[2:]), T],
                        "version"),
    "bad_v_str": ([TP, mp_map(replace(probs_f32, "v", "1")), T], "version"),
    "bad_type": ([TP, mp_map(replace(probs_f32, "type", "snapshots")), T], "type"),
    # fields
    "bad_missing_field": ([TP, mp_map(drop(probs_f32, "sink")), T], "field"),
    "bad_duplicate_key": ([TP, mp_map(probs_f32 + [("seq", 4)]), T], "field"),
    "bad_field_type": ([TP, mp_map(replace(probs_f32, "layers", "12")), T], "field"),
    "bad_shape_len": ([TP, mp_map(replace(probs_f32, "shape", [2, 12])), T], "field"),
    "bad_kind": ([TP, mp_map(replace(probs_f32, "kind", "weights")), T], "kind"),
    "bad_dtype": ([TP, mp_map(replace(probs_f32, "dtype", "int8")), T], "dtype"),
    "bad_run_ctrl": ([TP + b"\n", mp_map(replace(probs_f32, "run", RUN + "\n")), T],
                     "field"),
    # limits
    "bad_rowstats_keys": ([TP, mp_map(replace(replace(rowstats_f64, "shape", [2, 2, 5]),
                                              "qpos", [3, 7])),
                           f64(ROWSTATS_F64[:20])], "kind"),
    "bad_layer": ([TP, mp_map(replace(probs_f32, "layer", 12)), T], "limit"),
    "bad_layers_0": ([TP, mp_map(replace(replace(probs_f32, "layers", 0), "layer", 0)), T],
                     "limit"),
    "bad_sink": ([TP, mp_map(replace(probs_f32, "sink", 4)), T], "limit"),
    "bad_step_negative": ([TP, mp_map(replace(probs_f32, "step", -1)), T], "limit"),
    "bad_run_long": ([TP, mp_map(replace(probs_f32, "run", "r" * 129)), T], "limit"),
    "bad_topic_long": ([b"sw/" + b"r" * 129, mp_map(replace(probs_f32, "run", "r" * 129)), T],
                       "topic"),
    "bad_heads_shape": ([TP, mp_map(replace(probs_f32, "heads", 3)), T], "dims"),
    "bad_qpos_count": ([TP, mp_map(replace(probs_f32, "qpos", [1, 2])), T], "dims"),
    # topic against run, then dims
    "bad_topic": ([b"sw/other-run", H, T], "topic"),
    "bad_dims": ([TP, H, T[:-4]], "dims"),
    "bad_dims_dtype": ([TP, mp_map(replace(probs_f32, "dtype", "f16")), T], "dims"),
}


def container(frames):
    return b"".join(struct.pack("<I", len(f)) + f for f in frames)


def main():
    for name in os.listdir(HERE):
        if name.endswith(".msg"):
            os.unlink(os.path.join(HERE, name))
    manifest = []
    for name, frames in OK.items():
        manifest.append((name + ".msg", "ok", container(frames)))
    for name, (frames, err) in BAD.items():
        manifest.append((name + ".msg", err, container(frames)))
    manifest.sort()
    for name, _, data in manifest:
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    with open(os.path.join(HERE, "MANIFEST"), "w") as f:
        for name, err, _ in manifest:
            f.write("%s %s\n" % (name, err))


if __name__ == "__main__":
    main()
