#!/usr/bin/python3
"""make_golden.py: regenerates the golden messages of the sinkwatch protocol.

Run by hand, from anywhere, with a Python that has msgpack (on the build
machines that is /usr/bin/python3, not the first python3 on PATH):

    /usr/bin/python3 tests/data/golden/make_golden.py

It rewrites every *.msg file and MANIFEST beside itself. With --annotate
NAME it rewrites nothing and prints NAME.msg's header the way
proto/PROTOCOL.md sections 11 and 12 show headers (offset, key bytes, value
bytes, what they say), from the bytes of the file. The committed
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
import sys

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


# ------------------------------------------------------- version 2 (several senders)
#
# The version 2 keys follow resume in the canonical order. Each is present
# only when it says more than version 1 can (PROTOCOL.md section 5): rank
# and senders together iff senders > 1 or rank != 0; head0 iff the tensor
# holds fewer heads than the model (or head0 != 0); row0 and rows together
# iff it holds fewer rows than the probe (or row0 != 0). v is 2 iff one of
# them is present. v2() applies the rule to v1 pairs, independently of the
# C encoder, which test_proto then checks byte for byte.

def v2(pairs, inc=None, rank=0, senders=1, head0=0, row0=0, rows=None):
    d = dict(pairs)
    p = list(pairs)
    if inc is not None:
        p.append(("inc", inc))
    extra = []
    if senders > 1 or rank != 0:
        extra += [("rank", rank), ("senders", senders)]
    if d["type"] == "snapshot":
        shape = d["shape"]
        rows = shape[1] if rows is None else rows
        if shape[0] != d["heads"] or head0 != 0:
            extra.append(("head0", head0))
        if shape[1] != rows or row0 != 0:
            extra += [("row0", row0), ("rows", rows)]
    p += extra
    if extra:
        p = [(k, 2 if k == "v" else x) for k, x in p]
    return p


# A 4-layer, 4-head model; its fixed probe has 4 causal rows (positions
# 0..3) over 4 keys. Two processes send each run; the senders of one job
# share rank 0's incarnation (T0 in microseconds, times 4096, + 12 bits).
RUN_PP = "tiny/pp2"
RUN_TP = "tiny/tp2"
RUN_CP = "tiny/cp2"
RUN_DP = "tiny/dp2"
INC2 = int(T0 * 1e6) * 4096 + 0x5A7
LAYER_PROBS = [   # [heads 4, rows 4, keys 4]; row r has r + 1 valid keys
    1.0, 0, 0, 0,  0.75, 0.25, 0, 0,  0.5, 0.25, 0.25, 0,  0.25, 0.25, 0.25, 0.25,
    1.0, 0, 0, 0,  0.5, 0.5, 0, 0,  0.625, 0.25, 0.125, 0,  0.5, 0.25, 0.125, 0.125,
    1.0, 0, 0, 0,  0.875, 0.125, 0, 0,  0.75, 0.125, 0.125, 0,  0.625, 0.125, 0.125, 0.125,
    1.0, 0, 0, 0,  0.25, 0.75, 0, 0,  0.5, 0.5, 0, 0,  0.25, 0.5, 0.125, 0.125,
]


def layer_part(h0, nh, r0, nr):
    """Heads h0 .. h0+nh-1 and rows r0 .. r0+nr-1 of LAYER_PROBS, C order."""
    return [LAYER_PROBS[(h * 4 + r) * 4 + j]
            for h in range(h0, h0 + nh) for r in range(r0, r0 + nr) for j in range(4)]


def tiny_pairs(run, seq, step, layer, nh, nr, qpos):
    return snapshot_pairs(run, seq, "tiny-gpt", 6400000, 4, 4, 0, True, step,
                          layer, "probs", "f32", (nh, nr, 4), qpos=qpos,
                          time=T0 + 30)


# pipeline parallel: rank 1 of 2 holds layers 2 and 3 and sends them whole
pp_rank1 = v2(tiny_pairs(RUN_PP, 4, 200, 2, 4, 4, [0, 1, 2, 3]), inc=INC2,
              rank=1, senders=2)
# tensor parallel: rank r of 2 holds heads 2r, 2r+1 of every layer
tp_rank1 = v2(tiny_pairs(RUN_TP, 0, 200, 0, 2, 4, [0, 1, 2, 3]), inc=INC2,
              rank=1, senders=2, head0=2)
tp_rank0 = v2(tiny_pairs(RUN_TP, 0, 200, 0, 2, 4, [0, 1, 2, 3]), inc=INC2,
              rank=0, senders=2, head0=0)
# context parallel: rank r of 2 holds the probe's rows 2r, 2r+1
cp_rank1 = v2(tiny_pairs(RUN_CP, 0, 200, 0, 4, 2, [2, 3]), inc=INC2,
              rank=1, senders=2, row0=2, rows=4)
cp_rank0 = v2(tiny_pairs(RUN_CP, 0, 200, 0, 4, 2, [0, 1]), inc=INC2,
              rank=0, senders=2, row0=0, rows=4)
# data parallel: rank 1 of 2 sends the same whole layer as rank 0 (a copy)
dp_rank1 = v2(tiny_pairs(RUN_DP, 0, 200, 0, 4, 4, [0, 1, 2, 3]), inc=INC2,
              rank=1, senders=2)
# one sender that sends a layer in two row parts: v 2, no rank, no inc needed
one_rows = v2(tiny_pairs(RUN_CP, 1, 200, 0, 4, 2, [2, 3]), row0=2, rows=4)
# rank 1's end: its own message count, and who it is
end_rank1 = v2(end_pairs(RUN_PP, 8, T0 + 90), inc=INC2, rank=1, senders=2)


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
    "snap_v2_pipeline": snap(pp_rank1, f32(layer_part(0, 4, 0, 4))),
    "snap_v2_tensor": snap(tp_rank1, f32(layer_part(2, 2, 0, 4))),
    "snap_v2_tensor_rank0": snap(tp_rank0, f32(layer_part(0, 2, 0, 4))),
    "snap_v2_context": snap(cp_rank1, f32(layer_part(0, 4, 2, 2))),
    "snap_v2_context_rank0": snap(cp_rank0, f32(layer_part(0, 4, 0, 2))),
    "snap_v2_data": snap(dp_rank1, f32(layer_part(0, 4, 0, 4))),
    "snap_v2_rows_one_sender": snap(one_rows, f32(layer_part(0, 4, 2, 2))),
    "end_v2": [topic(RUN_PP), canonical(end_rank1)],
}

T = f32(PROBS_F32)
H = canonical(probs_f32)
TP = topic(RUN)
TT = f32(layer_part(2, 2, 0, 4))
TPT = topic(RUN_TP)
TC = f32(layer_part(0, 4, 2, 2))
TPC = topic(RUN_CP)


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
    # version 2: limits, then dims, then the senders of both types
    "bad_v2_rank": ([TPT, mp_map(replace(tp_rank1, "rank", 2)), TT], "limit"),
    "bad_v2_senders_0": ([TPT, mp_map(replace(replace(tp_rank1, "rank", 0), "senders", 0)), TT],
                         "limit"),
    "bad_v2_head0": ([TPT, mp_map(replace(tp_rank1, "head0", 4)), TT], "limit"),
    "bad_v2_head0_shape": ([TPT, mp_map(replace(tp_rank1, "head0", 3)), TT], "dims"),
    "bad_v2_rows_0": ([TPC, mp_map(replace(cp_rank1, "rows", 0)), TC], "limit"),
    "bad_v2_row0_shape": ([TPC, mp_map(replace(cp_rank1, "row0", 3)), TC], "dims"),
    "bad_v2_no_inc": ([TPT, mp_map(drop(tp_rank1, "inc")), TT], "field"),
    "bad_v2_end_no_inc": ([topic(RUN_PP), mp_map(drop(end_rank1, "inc"))], "field"),
    # a v1 message knows no head0: a part of the heads is a shape error
    "bad_v1_part": ([TPT, mp_map(replace(tp_rank1, "v", 1)), TT], "dims"),
    # topic against run, then dims
    "bad_topic": ([b"sw/other-run", H, T], "topic"),
    "bad_dims": ([TP, H, T[:-4]], "dims"),
    "bad_dims_dtype": ([TP, mp_map(replace(probs_f32, "dtype", "f16")), T], "dims"),
}


def container(frames):
    return b"".join(struct.pack("<I", len(f)) + f for f in frames)


def form(b):
    """The msgpack form of an encoded value, as PROTOCOL.md names it."""
    t = b[0]
    if t <= 0x7F:
        return "positive fixint"
    if 0x90 <= t <= 0x9F:
        return "fixarray %d" % (t & 0x0F)
    if 0xA0 <= t <= 0xBF:
        return "fixstr %d" % (t & 0x1F)
    return {0xC2: "false", 0xC3: "true", 0xCB: "float 64", 0xCC: "uint 8",
            0xCD: "uint 16", 0xCE: "uint 32", 0xCF: "uint 64", 0xD9: "str 8",
            0xDC: "array 16"}.get(t, "0x%02x" % t)


def annotate(name):
    """Prints the header of NAME.msg as PROTOCOL.md sections 11 and 12 show it."""
    with open(os.path.join(HERE, name + ".msg"), "rb") as f:
        data = f.read()
    frames, off = [], 0
    while off < len(data):
        n = struct.unpack_from("<I", data, off)[0]
        frames.append(data[off + 4:off + 4 + n])
        off += 4 + n
    hdr = frames[1]
    hx = lambda b: " ".join("%02x" % c for c in b)
    up = msgpack.Unpacker(raw=False)
    up.feed(hdr)
    npairs = up.read_map_header()
    at = up.tell()
    out = ["%04x  %-42s %s" % (0, hx(hdr[:at]), "map 16, %d pairs" % npairs
                               if hdr[0] == 0xDE else "fixmap, %d pairs" % npairs)]
    for _ in range(npairs):
        k = up.unpack()
        kend = up.tell()
        v = up.unpack()
        vend = up.tell()
        kb, vb = hx(hdr[at:kend]), hx(hdr[kend:vend])
        if isinstance(v, bool):
            shown = "true" if v else "false"
        elif isinstance(v, str):
            shown = '"%s"' % v
        elif isinstance(v, list):
            shown = "[%s]" % ", ".join(str(x) for x in v)
        else:
            shown = repr(v)
        what = '"%s": %s' % (k, shown)
        if vb[:2] not in ("c2", "c3") and not (isinstance(v, int) and v < 128):
            what += " (%s)" % form(hdr[kend:vend])
        line = "%04x  %s" % (at, kb)
        if len(line) > 31:
            out.append(line)
            line = ""
        line = "%-32s%s" % (line, vb)
        if len(line) > 47:
            out.append(line)
            line = ""
        out.append("%-49s%s" % (line, what))
        at = vend
    out.append("%04x  end (%d bytes)" % (at, len(hdr)))
    print("\n".join("    " + x.rstrip() for x in out))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--annotate":
        annotate(sys.argv[2])
        return
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
