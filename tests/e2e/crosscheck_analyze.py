#!/usr/bin/python3
"""Cross-check `sinkwatch analyze` against the numpy reference.

    SINKWATCH=./sinkwatch /usr/bin/python3 tests/e2e/crosscheck_analyze.py [-v] [CASE...]

Generates attention tensors with numpy (fixed seeds), writes them to HDF5
with h5py in a temporary directory, runs `$SINKWATCH analyze FILE:/dset
--format json ...` on each, and compares every value of the JSON with
tests/e2e/metrics_ref.py: floats to 1e-6 relative (+1e-10 absolute), integers,
strings and booleans exactly, null == NaN.  A few error cases check exit
status 2 and the one-line `sinkwatch analyze: ...` message.

Without SINKWATCH set the test is skipped (exit 77, the automake code).
Ends with a line `N passed, M failed`; exit 0 only when all pass.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import h5py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_ref  # noqa: E402

RTOL = 1e-6
ATOL = 1e-10
SMAX = 20.7          # sink logit range: sink mass from ~1e-9 to 1 - 1e-9


# ------------------------------------------------------------ tensor makers

def bf16_round(x):
    """float64/float32 array -> (uint16 bf16 bits, float32 values),
    round to nearest even; NaN stays a quiet NaN."""
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    vals = (r.astype(np.uint32) << 16).view(np.float32)
    return r, vals


def bf16_type():
    """A 16-bit little-endian HDF5 float with bfloat16 layout."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    return t


def store(x, dtype):
    """(array to write, array the reference sees) for a float64 tensor."""
    if dtype == "bfloat16":
        bits, vals = bf16_round(x)
        return bits, vals
    arr = np.asarray(x).astype(dtype)
    return arr, arr


def write_h5(path, dset, arr, dtype):
    with h5py.File(path, "w") as f:
        if dtype == "bfloat16":
            t = bf16_type()
            sp = h5py.h5s.create_simple(arr.shape)
            parent = os.path.dirname(dset)
            if parent not in ("", "/"):
                f.require_group(parent)
            d = h5py.h5d.create(f.id, dset.encode(), t, sp)
            d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(arr),
                    mtype=t)
        else:
            f.create_dataset(dset, data=arr)


class Head:
    """Per-head character: a preferred content pattern, a noise level and a
    sink-logit distribution, so that heads differ systematically."""

    def __init__(self, rng, keys, wide=False):
        self.base = rng.normal(0, 1, keys) * rng.uniform(0.5, 2.5)
        self.sigma = rng.uniform(0.3, 1.5)
        if wide:
            self.mu, self.spread = 0.0, None       # uniform over [-SMAX, SMAX]
        else:
            self.mu, self.spread = rng.uniform(-12, 12), rng.uniform(1, 8)

    def sink_logit(self, rng):
        if self.spread is None:
            return rng.uniform(-SMAX, SMAX)
        return float(np.clip(self.mu + rng.normal(0, self.spread), -SMAX, SMAX))


def probs_row(rng, hd, n, k, zero_frac=0.0):
    """A probability row over n keys with sink k (float64, sums to 1)."""
    row = np.zeros(n)
    content = np.arange(n) != k
    z = hd.base[:n][content] + rng.normal(0, hd.sigma, n - 1)
    c = np.exp(z - z.max())
    if zero_frac > 0 and n > 2:
        zero = rng.random(n - 1) < zero_frac
        zero[rng.integers(n - 1)] = False
        c[zero] = 0.0
    c /= c.sum()
    t = hd.sink_logit(rng)
    row[k] = 1.0 / (1.0 + math.exp(-t))
    row[content] = c / (1.0 + math.exp(t))
    return row


def logits_row(rng, hd, n, k, mask_frac=0.0):
    """Pre-softmax scores over n keys; sink mass from the head's sink logit;
    mask_frac of the content keys at -inf."""
    content = np.arange(n) != k
    z = np.zeros(n)
    z[content] = hd.base[:n][content] + rng.normal(0, hd.sigma, n - 1)
    zc = z[content]
    lse = zc.max() + math.log(np.sum(np.exp(zc - zc.max())))
    z[k] = lse + hd.sink_logit(rng)
    if mask_frac > 0 and n > 2:
        idx = np.flatnonzero(content)
        m = rng.random(len(idx)) < mask_frac
        m[rng.integers(len(idx))] = False
        z[idx[m]] = -np.inf
    return z + rng.normal(0, 3)          # a common shift changes nothing


def n_valid(q, Q, K, causal):
    return metrics_ref.valid_keys(q, Q, K, causal)


def tensor(rng, shape5, heads, sink, causal, kind="probs", zero_frac=0.0,
           mask_frac=0.0, garbage=0.0):
    """Fill a [L, B, H, Q, K] float64 tensor row by row; heads[l][h] is a
    Head or a callable(rng, n, k) -> row.  Keys past n get `garbage`."""
    L, B, H, Q, K = shape5
    x = np.full(shape5, garbage, dtype=np.float64)
    for l in range(L):
        for b in range(B):
            for h in range(H):
                hd = heads[l][h]
                for q in range(Q):
                    n = n_valid(q, Q, K, causal)
                    if n < 1:
                        continue
                    if n < 2 or sink >= n:
                        x[l, b, h, q, :n] = 1.0 / n if kind == "probs" else 0.0
                        continue
                    if callable(hd):
                        x[l, b, h, q, :n] = hd(rng, n, sink)
                    elif kind == "probs":
                        x[l, b, h, q, :n] = probs_row(rng, hd, n, sink, zero_frac)
                    else:
                        x[l, b, h, q, :n] = logits_row(rng, hd, n, sink, mask_frac)
    return x


def heads_for(rng, L, H, K, wide=(0,)):
    return [[Head(rng, K, wide=(h in wide)) for h in range(H)] for _ in range(L)]


def reshape(x5, rank):
    if rank == 5:
        return x5
    if rank == 4:
        assert x5.shape[1] == 1
        return x5[:, 0]
    assert x5.shape[0] == 1 and x5.shape[1] == 1
    return x5[0, 0]


# structured rows (callables)
def uniform_row(rng, n, k):
    return np.full(n, 1.0 / n)


def onehot_sink_row(rng, n, k):
    r = np.zeros(n)
    r[k] = 1.0
    return r


def onehot_content_row(rng, n, k):
    r = np.zeros(n)
    r[(k + 1) % n] = 1.0
    return r


# --------------------------------------------------------------- bad rows

def spoil(x, where, how, sink, kind="probs"):
    """Make row x[where] bad: nan, inf, neginf, negative, sum, sumsmall,
    nan+negative, negative+sum, allneginf, posinf (valid keys are the
    nonzero-length prefix the caller knows; we spoil a content key)."""
    row = x[where]
    j = (sink + 1) % row.shape[0]
    j2 = (sink + 2) % row.shape[0]
    if how == "nan":
        row[j] = np.nan
    elif how == "inf":
        row[j] = np.inf
    elif how == "neginf":
        row[j] = -np.inf
    elif how == "negative":          # sum stays 1
        row[j2] += row[j] + 0.05
        row[j] = -0.05
    elif how == "sum":
        row *= 1.3
    elif how == "nan+negative":
        row[j] = np.nan
        row[j2] = -0.2
    elif how == "negative+sum":
        row[j] = -0.01
        row *= 2.0
    elif how == "allneginf":
        row[:] = -np.inf
    else:
        raise ValueError(how)


# ------------------------------------------------------------------ cases

def build_cases():
    cases = []

    def add(name, x, dtype, rank, kind="probs", sink=0, causal=False,
            delta=None, tol=None, dset="/attn"):
        cases.append(dict(name=name, x=reshape(x, rank), dtype=dtype,
                          kind=kind, sink=sink, causal=causal, delta=delta,
                          tol=tol, dset=dset, pair_rows=0))

    # 1. float32, rank 3, non-causal, exact zeros, bad rows
    rng = np.random.default_rng(101)
    shp = (1, 1, 5, 16, 40)
    x = tensor(rng, shp, heads_for(rng, 1, 5, 40, wide=(0, 3)), 0, False,
               zero_frac=0.2)
    for q, how in ((1, "nan"), (3, "negative"), (5, "sum"), (7, "inf"),
                   (9, "nan+negative"), (11, "negative+sum")):
        spoil(x, (0, 0, q % 5, q), how, 0)
    add("f32_rank3_zeros_bad", x, "float32", 3)

    # 2. float64, rank 4, causal, NaN garbage past n, bad rows
    rng = np.random.default_rng(202)
    shp = (2, 1, 5, 48, 48)
    x = tensor(rng, shp, heads_for(rng, 2, 5, 48, wide=(1,)), 0, True,
               zero_frac=0.05, garbage=np.nan)
    for (l, h, q), how in (((0, 0, 10), "sum"), ((0, 2, 20), "negative"),
                           ((1, 4, 30), "nan"), ((1, 1, 47), "inf")):
        spoil(x, (l, 0, h, q), how, 0)
        x[l, 0, h, q, q + 1:] = np.nan
    x[0, 0, 3, 25, :26] *= 1.00005          # off by 5e-5: accepted, renormalized
    add("f64_rank4_causal_garbage", x, "float64", 4, causal=True)

    # 3. float16, rank 5, sink 2, bad rows
    rng = np.random.default_rng(303)
    shp = (2, 2, 4, 12, 64)
    x = tensor(rng, shp, heads_for(rng, 2, 4, 64, wide=(0, 2)), 2, False,
               zero_frac=0.1)
    for (l, b, h, q), how in (((0, 0, 1, 3), "sum"), ((1, 1, 2, 5), "negative"),
                              ((0, 1, 3, 7), "nan"), ((1, 0, 0, 0), "inf")):
        spoil(x, (l, b, h, q), how, 2)
    add("f16_rank5_sink2", x, "float16", 5, sink=2)

    # 4. bfloat16, rank 4, causal with queries < keys (offset), zero garbage
    rng = np.random.default_rng(404)
    shp = (1, 1, 4, 24, 30)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 30, wide=(0,)), 0, True,
               zero_frac=0.1)
    spoil(x, (0, 0, 1, 4), "negative", 0)
    spoil(x, (0, 0, 2, 9), "sum", 0)
    add("bf16_rank4_causal", x, "bfloat16", 4, causal=True)

    # 5. bfloat16, rank 5, non-causal, sink 1, custom tolerance
    rng = np.random.default_rng(505)
    shp = (1, 2, 4, 10, 50)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 50, wide=(1, 2)), 1, False)
    x[0, 0, 0, 2] *= 1.02                   # off by 0.02: accepted at tol 0.05
    x[0, 1, 3, 4] *= 1.08                   # rejected (sum)
    add("bf16_rank5_sink1_tol", x, "bfloat16", 5, sink=1, tol=0.05)

    # 6. float32, 300 keys, sink 5, delta 1e-6, nested dataset path
    rng = np.random.default_rng(606)
    shp = (1, 1, 4, 8, 300)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 300, wide=(0, 1, 2, 3)), 5,
               False, zero_frac=0.3)
    add("f32_keys300_sink5_delta", x, "float32", 3, sink=5, delta=1e-6,
        dset="/model/layer0/attn")

    # 7. float32, keys 2, causal with queries > keys (short rows)
    rng = np.random.default_rng(707)
    shp = (2, 1, 4, 4, 2)
    x = tensor(rng, shp, heads_for(rng, 2, 4, 2, wide=(0, 1, 2, 3)), 0, True)
    add("f32_keys2_causal_short", x, "float32", 4, causal=True)

    # 8. float64, keys 2 non-causal, sink 1
    rng = np.random.default_rng(808)
    shp = (1, 3, 4, 6, 2)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 2, wide=(0, 1, 2, 3)), 1, False)
    add("f64_keys2_sink1_rank5", x, "float64", 5, sink=1)

    # 9. float16, causal, sink 3 (nosink rows), queries > keys
    rng = np.random.default_rng(909)
    shp = (1, 1, 4, 20, 16)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 16, wide=(0, 1)), 3, True,
               garbage=0.5)
    add("f16_causal_sink3_nosink", x, "float16", 3, sink=3, causal=True)

    # 10. logits float32, rank 5, causal, -inf masks, bad rows
    rng = np.random.default_rng(1010)
    shp = (1, 2, 4, 20, 20)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 20, wide=(0, 2)), 0, True,
               kind="logits", mask_frac=0.2, garbage=np.nan)
    x[0, 0, 1, 6, 1:7] = -np.inf            # all content masked: w = 0
    x[0, 1, 2, 9, 0] = -np.inf              # sink masked: s = 0
    for (b, h, q), how in (((0, 0, 5), "nan"), ((1, 1, 8), "inf"),
                           ((0, 3, 12), "allneginf")):
        spoil(x, (0, b, h, q), how, 0, kind="logits")
        x[0, b, h, q, q + 1:] = np.nan
    add("logits_f32_rank5_causal", x, "float32", 5, kind="logits", causal=True)

    # 11. logits float64, rank 3, sink 1, big offsets, -inf masks
    rng = np.random.default_rng(1111)
    shp = (1, 1, 5, 12, 80)
    x = tensor(rng, shp, heads_for(rng, 1, 5, 80, wide=(0, 1, 2)), 1, False,
               kind="logits", mask_frac=0.1)
    x[0, 0, 2] += 5000.0                    # stable softmax needed
    x[0, 0, 4, 3, :] = -np.inf
    x[0, 0, 4, 3, 1] = 2.0                  # only the sink left: w = 0
    add("logits_f64_rank3_sink1", x, "float64", 3, kind="logits", sink=1)

    # 12. logits float16 and bfloat16, rank 4
    rng = np.random.default_rng(1212)
    shp = (2, 1, 4, 10, 24)
    x = tensor(rng, shp, heads_for(rng, 2, 4, 24, wide=(0, 1)), 0, False,
               kind="logits", mask_frac=0.15)
    add("logits_f16_rank4", x, "float16", 4, kind="logits")
    rng = np.random.default_rng(1313)
    x = tensor(rng, shp, heads_for(rng, 2, 4, 24, wide=(2, 3)), 2, True,
               kind="logits", mask_frac=0.15, garbage=-np.inf)
    add("logits_bf16_rank4_causal_sink2", x, "bfloat16", 4, kind="logits",
        sink=2, causal=True, delta=1e-4)

    # 13. structured float32, rank 3: identical heads (exact ties), uniform,
    # one-hot sink (w = 0), one-hot content (s = 0), an all-rejected head
    rng = np.random.default_rng(1414)
    K = 24
    hs = heads_for(rng, 1, 8, K, wide=(0, 4))[0]
    shp = (1, 1, 8, 10, K)
    x = tensor(rng, shp, [[hs[0], hs[1], uniform_row, onehot_sink_row,
                           hs[4], onehot_content_row, hs[6], hs[7]]], 0, False)
    x[0, 0, 1] = x[0, 0, 0]                 # head 1 == head 0
    x[0, 0, 6] = x[0, 0, 4]                 # head 6 == head 4
    x[0, 0, 7] = np.nan                     # head 7: every row rejected
    add("f32_structured_ties", x, "float32", 3)

    # 14. structured float64, rank 4, causal, queries > keys, sink 1:
    # identical heads, uniform heads (exact ties on entropy), mixed rows
    rng = np.random.default_rng(1515)
    K = 12
    hs = heads_for(rng, 2, 6, K, wide=(0, 1, 2))

    def mixed(rng, n, k, hd=hs[0][2]):
        u = rng.random()
        if u < 0.25:
            return onehot_sink_row(rng, n, k)
        if u < 0.5:
            return uniform_row(rng, n, k)
        return probs_row(rng, hd, n, k, 0.3)

    heads = [[hs[0][0], hs[0][1], uniform_row, uniform_row, mixed, hs[0][5]],
             [hs[1][0], onehot_sink_row, hs[1][2], onehot_content_row,
              hs[1][4], hs[1][5]]]
    shp = (2, 1, 6, 16, K)
    x = tensor(rng, shp, heads, 1, True, garbage=0.0)
    x[0, 0, 1] = x[0, 0, 0]
    x[1, 0, 5] = x[1, 0, 0]
    add("f64_structured_causal_sink1", x, "float64", 4, sink=1, causal=True)

    # 15. float32 wider tensor: 6 heads, rank 5, causal, random sink range
    rng = np.random.default_rng(1616)
    shp = (2, 2, 6, 32, 40)
    x = tensor(rng, shp, heads_for(rng, 2, 6, 40, wide=(0, 3, 5)), 0, True,
               zero_frac=0.05)
    add("f32_rank5_causal_6heads", x, "float32", 5, causal=True)

    # 16. rejection order on float64 rows (one head per reason mix)
    rng = np.random.default_rng(1717)
    shp = (1, 1, 4, 12, 10)
    x = tensor(rng, shp, heads_for(rng, 1, 4, 10, wide=(0, 1, 2, 3)), 0, False)
    for q, how in enumerate(("nan", "inf", "neginf", "negative", "sum",
                             "nan+negative", "negative+sum")):
        spoil(x, (0, 0, q % 4, q), how, 0)
    x[0, 0, 0, 8, :] *= 1.00009             # accepted at 1e-4 ...
    x[0, 0, 1, 9, :] *= 0.9998              # ... rejected
    add("f64_reject_order", x, "float64", 3)

    # 17. pairs on --pair-rows N rows of each block (storage/LAYOUT.md, row_use): spread
    # (non-causal), the longest rows (causal, offset, short rows), one row
    for base, n in (("f32_rank3_zeros_bad", 4), ("f64_rank4_causal_garbage", 8),
                    ("bf16_rank4_causal", 1), ("f32_keys2_causal_short", 3),
                    ("f16_causal_sink3_nosink", 5), ("logits_f32_rank5_causal", 6),
                    ("f32_rank5_causal_6heads", 100)):
        c = next(c for c in cases if c["name"] == base)
        cases.append(dict(c, name="%s_pairs%d" % (base, n), pair_rows=n))

    return cases


def error_cases(tmp):
    """(name, args, h5 writer) that must exit 2 with one stderr line."""
    out = []

    def mk(name, fn, dset, extra=()):
        path = os.path.join(tmp, name + ".h5")
        with h5py.File(path, "w") as f:
            fn(f)
        out.append((name, ["%s:%s" % (path, dset)] + list(extra)))

    good = np.full((4, 3, 5), 0.2, dtype=np.float32)
    mk("err_rank2", lambda f: f.create_dataset("a", data=np.full((3, 5), 0.2)), "/a")
    mk("err_missing_dataset", lambda f: f.create_dataset("a", data=good), "/nope")
    mk("err_sink_out_of_range", lambda f: f.create_dataset("a", data=good), "/a",
       ["--sink", "5"])
    mk("err_all_rejected",
       lambda f: f.create_dataset("a", data=np.full((4, 3, 5), 0.3, np.float32)),
       "/a")
    mk("err_int_type",
       lambda f: f.create_dataset("a", data=np.ones((4, 3, 5), np.int32)), "/a")
    out.append(("err_missing_file", [os.path.join(tmp, "nofile.h5") + ":/a"]))
    return out


# ------------------------------------------------------------- comparison

def to_nan(v):
    if v is None:
        return float("nan")
    if isinstance(v, dict):
        return {k: to_nan(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_nan(x) for x in v]
    return v


def float_eq(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= RTOL * max(abs(a), abs(b)) + ATOL


def compare(path, ref, got, errs):
    if isinstance(ref, dict):
        if not isinstance(got, dict):
            errs.append((path, "object", got))
            return
        for key in ref:
            if key not in got:
                errs.append(("%s.%s" % (path, key), ref[key], "<missing>"))
            else:
                compare("%s.%s" % (path, key), ref[key], got[key], errs)
        for key in got:
            if key not in ref:
                errs.append(("%s.%s" % (path, key), "<not in reference>", got[key]))
    elif isinstance(ref, list):
        if not isinstance(got, list) or len(got) != len(ref):
            errs.append((path, "list of %d" % len(ref), got))
            return
        for i, (r, g) in enumerate(zip(ref, got)):
            compare("%s[%d]" % (path, i), r, g, errs)
    elif isinstance(ref, bool):
        if not (isinstance(got, bool) and got == ref):
            errs.append((path, ref, got))
    elif isinstance(ref, int):
        if not (type(got) is int and got == ref):
            errs.append((path, ref, got))
    elif isinstance(ref, float):
        if isinstance(got, bool) or not isinstance(got, (int, float)) \
                or not float_eq(ref, float(got)):
            errs.append((path, ref, got))
    else:
        if got != ref:
            errs.append((path, ref, got))


def near_ties(ref):
    """Flip comparisons whose difference is nonzero but tiny: data to avoid
    (two correct implementations may round them to different signs)."""
    bad = []
    for ls in ref["layer_stats"]:
        hsl = [h for h in ref["head_stats"] if h["layer"] == ls["layer"]]
        ek = [[abs(a["entropy"] - b["entropy"]) for b in hsl] for a in hsl]
        ed = [[abs(a["content_entropy"] - b["content_entropy"]) for b in hsl]
              for a in hsl]
        for metric, (dk, dd) in (("cosine", (ls["cosine_keep"], ls["cosine_drop"])),
                                 ("js", (ls["js_keep"], ls["js_drop"])),
                                 ("entropy", (ek, ed))):
            for a, b in metrics_ref.flip_differences(dk, dd):
                for d in (a, b):
                    if d != 0 and abs(d) < 1e-9:
                        bad.append((ls["layer"], metric, d))
    return bad


def borderline_sums(c, tol):
    """Probability rows whose |sum - 1| is within 1e-9 of the tolerance."""
    if c["kind"] != "probs":
        return 0
    x = np.asarray(c["x"], dtype=np.float64)
    Q, K = x.shape[-2], x.shape[-1]
    cnt = 0
    for q in range(Q):
        n = n_valid(q, Q, K, c["causal"])
        if n < 2:
            continue
        s = np.sum(x[..., q, :n], axis=-1)
        cnt += int(np.sum(np.abs(np.abs(s - 1) - tol) < 1e-9))
    return cnt


def fmt(v):
    if isinstance(v, float):
        return repr(v)
    s = json.dumps(v) if not isinstance(v, str) else v
    return s if len(s) < 200 else s[:200] + "..."


def run_case(binary, tmp, c, verbose):
    path = os.path.join(tmp, c["name"] + ".h5")
    arr, vals = store(c["x"], c["dtype"])
    write_h5(path, c["dset"], arr, c["dtype"])
    args = [binary, "analyze", "%s:%s" % (path, c["dset"]), "--format", "json"]
    if c["kind"] == "logits":
        args.append("--logits")
    if c["sink"]:
        args += ["--sink", str(c["sink"])]
    if c["causal"]:
        args.append("--causal")
    if c["delta"] is not None:
        args += ["--delta", repr(c["delta"])]
    if c["tol"] is not None:
        args += ["--tol", repr(c["tol"])]
    if c["pair_rows"]:
        args += ["--pair-rows", str(c["pair_rows"])]
    t0 = time.time()
    ref = metrics_ref.analyze(vals, kind=c["kind"], sink=c["sink"],
                              causal=c["causal"],
                              delta=1e-10 if c["delta"] is None else c["delta"],
                              tol=c["tol"], dtype=c["dtype"], file=path,
                              dataset=c["dset"], pair_rows=c["pair_rows"])
    t_ref = time.time() - t0
    notes = []
    ties = near_ties(ref)
    if ties:
        notes.append("WARNING %d near-ties in flip comparisons, e.g. %r"
                     % (len(ties), ties[0]))
    nb = borderline_sums(dict(c, x=vals), ref["tolerance"])
    if nb:
        notes.append("WARNING %d rows with |sum-1| within 1e-9 of tol" % nb)
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    errs = []
    if p.returncode != 0:
        errs.append(("exit status", 0, p.returncode))
        errs.append(("stderr", "", p.stderr.strip()))
    else:
        try:
            got = json.loads(p.stdout, parse_constant=lambda s: "<JSON %s>" % s)
        except ValueError as e:
            errs.append(("json", "valid JSON", str(e)))
        else:
            got = to_nan(got)
            compare("$", ref, got, errs)
            if errs:
                try:
                    tt = near_ties(got)
                except Exception:           # noqa: BLE001 (layout already reported)
                    tt = []
                if tt:
                    notes.append("note: sinkwatch's own values give %d flip "
                                 "differences with 0 < |d| < 1e-9 (rounding "
                                 "noise where the reference has exact ties), "
                                 "e.g. %r" % (len(tt), tt[0]))
    rj = ref["rows_rejected"]
    summary = "rows %d rejected %s ref %.1fs" % (
        ref["rows_used"], ",".join("%s=%d" % (k, rj[k]) for k in rj if rj[k]) or "0",
        t_ref)
    return errs, summary, notes, " ".join(args[1:])


def run_error_case(binary, name, args):
    p = subprocess.run([binary, "analyze"] + args + ["--format", "json"],
                       capture_output=True, text=True, timeout=60)
    errs = []
    if p.returncode != 2:
        errs.append(("exit status", 2, p.returncode))
    lines = p.stderr.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("sinkwatch analyze: "):
        errs.append(("stderr", "one line 'sinkwatch analyze: ...'", p.stderr.strip()))
    return errs, (lines[0] if lines else "")


def main():
    binary = os.environ.get("SINKWATCH")
    if not binary:
        print("SINKWATCH not set: skipped")
        return 77
    binary = os.path.abspath(binary)
    verbose = "-v" in sys.argv[1:]
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="sinkwatch-xcheck-") as tmp:
        for c in build_cases():
            if only and c["name"] not in only:
                continue
            try:
                errs, summary, notes, cmd = run_case(binary, tmp, c, verbose)
            except Exception as e:          # noqa: BLE001 (report, go on)
                errs, summary, notes, cmd = [("exception", "", repr(e))], "", [], ""
            tag = "ok  " if not errs else "FAIL"
            print("%s %-34s %s" % (tag, c["name"], summary))
            for n in notes:
                print("     " + n)
            if errs:
                failed += 1
                print("     command: sinkwatch %s" % cmd)
                for path, want, got in errs[:40]:
                    print("     %s: reference %s, sinkwatch %s"
                          % (path, fmt(want), fmt(got)))
                if len(errs) > 40:
                    print("     ... %d more mismatches" % (len(errs) - 40))
            else:
                passed += 1
        for name, args in error_cases(tmp):
            if only and name not in only:
                continue
            errs, line = run_error_case(binary, name, args)
            print("%s %-34s %s" % ("ok  " if not errs else "FAIL", name, line))
            if errs:
                failed += 1
                for path, want, got in errs:
                    print("     %s: expected %s, got %s" % (path, fmt(want), fmt(got)))
            else:
                passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
