#!/usr/bin/python3
"""Independent numpy reference of METRICS.md sections 1-5, shaped like the
JSON output of `sinkwatch analyze` (README.md, "## `sinkwatch analyze`").

Everything is float64 and computed row by row, straight from the formulas:
clarity first, speed second. It is written without looking at the C sources
so that tests/e2e/crosscheck_analyze.py can compare two independent readings of
the contract.

    analyze(x, kind="probs", sink=0, causal=False, delta=1e-10, tol=None,
            dtype=None, pair_rows=0)  ->  dict with the JSON layout of
                                           `sinkwatch analyze`
    pick_rows(qpos, rows, keys, n)  ->  the rows for pair statistics (§5)

Run `python3 tests/e2e/metrics_ref.py` (with an interpreter that has numpy) for
the self-test: the worked example of METRICS.md section 7 and a few
identities of sections 1 and 4.
"""

import itertools
import math
import sys

import numpy as np

NAN = float("nan")
REASONS = ("short", "nosink", "nonfinite", "negative", "sum")
HEAD_MEANS = ("sink_mass", "content_mass", "entropy", "sink_entropy",
              "content_entropy", "content_term")
MATRICES = ("cosine_keep", "cosine_drop", "js_keep", "js_drop",
            "pair_sink", "pair_content")
FLIP_METRICS = ("cosine", "js", "entropy")


def default_tolerance(dtype):
    """Row-sum tolerance: 1e-2 for half precision, 1e-4 otherwise."""
    return 1e-2 if dtype in ("float16", "bfloat16") else 1e-4


def xlogx(v):
    """Elementwise v ln v with 0 ln 0 = 0 (v >= 0)."""
    v = np.asarray(v, dtype=np.float64)
    out = np.zeros_like(v)
    pos = v > 0
    out[pos] = v[pos] * np.log(v[pos])
    return out


def entropy(p):
    """-sum p ln p with 0 ln 0 = 0, in nats."""
    return float(-np.sum(xlogx(p)))


def kl(p, q):
    """sum p ln(p/q) over p > 0 (q > 0 wherever p > 0 is assumed)."""
    pos = p > 0
    return float(np.sum(p[pos] * np.log(p[pos] / q[pos])))


def js(p, q):
    """Jensen-Shannon divergence in nats, 0 ln 0 = 0."""
    m = 0.5 * (p + q)
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def cosine(p, q):
    return float(np.dot(p, q) / (np.linalg.norm(p) * np.linalg.norm(q)))


def valid_keys(q, queries, keys, causal):
    """Number of valid keys n of query position q (README: --causal)."""
    if not causal:
        return keys
    return min(keys, q + keys - queries + 1)


def pick_rows(qpos, rows, keys, n):
    """LAYOUT.md, "Which probe rows the pair, drift and flip statistics use", dealt out
    literally: the rows (ascending) that represent a block of `rows` rows.
    qpos None: n rows spread evenly, first and last included (the middle one
    for n = 1). Otherwise each sequence (a new one where qpos does not
    increase) ranks its rows of two valid keys or more by valid keys, most
    first, ties to the lower index, and the sequences take turns, in order,
    one row each, until n rows are taken or none is left."""
    if n <= 0 or rows == 0 or keys < 2:
        return []
    if qpos is None:
        m = min(n, rows)
        if m == 1:
            return [(rows - 1) // 2]
        return [i * (rows - 1) // (m - 1) for i in range(m)]
    seqs = []
    for r in range(rows):
        if r == 0 or qpos[r] <= qpos[r - 1]:
            seqs.append([])
        seqs[-1].append(r)
    ranked = []
    for rs in seqs:
        nv = {r: min(keys, qpos[r] + 1) for r in rs}
        ranked.append(sorted((r for r in rs if nv[r] >= 2),
                             key=lambda r: (-nv[r], r)))
    taken = []
    turn = 0
    while len(taken) < n and any(turn < len(rk) for rk in ranked):
        for rk in ranked:
            if turn < len(rk) and len(taken) < n:
                taken.append(rk[turn])
        turn += 1
    return sorted(taken)


def reject_reason(v, n, k, kind, tol):
    """The first failing check, in README order, or None for a valid row.

    v holds only the row's n valid keys (float64 copies of the stored
    values)."""
    if n < 2:
        return "short"
    if k >= n:
        return "nosink"
    if kind == "probs":
        if not np.all(np.isfinite(v)):
            return "nonfinite"
        if np.any(v < 0):
            return "negative"
        if abs(float(np.sum(v)) - 1.0) > tol:
            return "sum"
    else:
        if np.any(np.isnan(v)) or np.any(v == np.inf) or np.all(v == -np.inf):
            return "nonfinite"
    return None


def log_parts_probs(a, delta):
    """ln of the composition a after multiplicative replacement (METRICS §4):
    parts below delta become delta, the others are scaled by
    (1 - delta * r) / (sum of the unreplaced parts)."""
    small = a < delta
    r = int(np.sum(small))
    rep = a.copy()
    rep[small] = delta
    rep[~small] = a[~small] * ((1.0 - delta * r) / np.sum(a[~small]))
    return np.log(rep)


def log_parts_logits(z, delta):
    """ln a_i = z_i - logsumexp(z) over the valid keys; keys at -inf become
    ln delta and the other parts get + ln(1 - delta * r) (README)."""
    finite = z > -np.inf
    r = int(np.sum(~finite))
    m = np.max(z[finite])
    lse = m + math.log(float(np.sum(np.exp(z[finite] - m))))
    out = np.empty_like(z)
    out[finite] = z[finite] - lse + math.log1p(-delta * r)
    out[~finite] = math.log(delta)
    return out


def row_metrics(v, k, kind, delta):
    """All per-row quantities of one valid row (v: its valid keys)."""
    n = len(v)
    if kind == "probs":
        a = v / np.sum(v)                      # renormalized by its sum
        ln_a = log_parts_probs(a, delta)
    else:
        finite = v > -np.inf
        m = np.max(v[finite])
        e = np.zeros_like(v)
        e[finite] = np.exp(v[finite] - m)     # stable softmax
        a = e / np.sum(e)
        ln_a = log_parts_logits(v, delta)
    content = np.arange(n) != k
    s = float(a[k])
    ac = a[content]
    w = float(np.sum(ac))                      # summed directly, never 1 - s
    H = entropy(a)
    hb = -(float(xlogx(s)) + float(xlogx(w)))
    if w > 0:
        c = ac / w
        Hc = entropy(c)
    else:
        c = None
        Hc = 0.0
    C = w * Hc
    ln_c = ln_a[content]
    b = math.sqrt((n - 1) / n) * (float(ln_a[k]) - float(np.mean(ln_c)))
    clr_c = ln_c - np.mean(ln_c)
    return {"a": a, "c": c, "s": s, "w": w, "H": H, "hb": hb, "Hc": Hc,
            "C": C, "b": b, "clr_c": clr_c}


def analyze(x, kind="probs", sink=0, causal=False, delta=1e-10, tol=None,
            dtype=None, file=None, dataset=None, pair_rows=0):
    """Reference of `sinkwatch analyze` (README JSON layout).

    pair_rows: the head-pair matrices take the rows pick_rows() chooses of
    each [queries, keys] block (with causal, query q is at position
    q + keys - queries); 0 takes every row.

    x: numpy array of rank 3, 4 or 5 ([heads, q, k], [layers, heads, q, k],
    [layers, batch, heads, q, k]) holding the stored values (for bfloat16
    pass the bf16 values as float32 and dtype="bfloat16").
    Non-finite results are float NaN (JSON null)."""
    x = np.asarray(x)
    if dtype is None:
        dtype = str(x.dtype)
    if tol is None:
        tol = default_tolerance(dtype)
    shape = list(x.shape)
    x = x.astype(np.float64)
    if x.ndim == 3:
        x = x[None, None]
    elif x.ndim == 4:
        x = x[:, None]
    elif x.ndim != 5:
        raise ValueError("rank must be 3, 4 or 5")
    L, B, NH, Q, K = x.shape
    k = int(sink)

    out = {"schema": 1, "metrics_contract": 1}
    if file is not None:
        out["file"] = file
    if dataset is not None:
        out["dataset"] = dataset
    out.update({"shape": shape, "dtype": dtype, "kind": kind,
                "layers": L, "batch": B, "heads": NH, "queries": Q, "keys": K,
                "sink": k, "causal": bool(causal), "delta": float(delta),
                "tolerance": float(tol)})
    if pair_rows > 0:
        qpos = [max(0, q + K - Q) for q in range(Q)] if causal else None
        picked = pick_rows(qpos, Q, K, pair_rows)
    else:
        picked = list(range(Q))
    out["pair_row_index"] = picked

    total_rej = {r: 0 for r in REASONS}
    rows_used = 0
    head_stats = []
    layer_stats = []
    for l in range(L):
        # rows[h][(b, q)] = row_metrics of the valid rows of head h
        rows = []
        for h in range(NH):
            rej = {r: 0 for r in REASONS}
            valid = {}
            for bi in range(B):
                for q in range(Q):
                    n = valid_keys(q, Q, K, causal)
                    v = x[l, bi, h, q, :max(n, 0)]
                    why = reject_reason(v, n, k, kind, tol)
                    if why is not None:
                        rej[why] += 1
                        continue
                    valid[(bi, q)] = row_metrics(v, k, kind, delta)
            rows.append(valid)
            for r in REASONS:
                total_rej[r] += rej[r]
            rows_used += len(valid)
            hs = {"layer": l, "head": h, "rows": len(valid), "rejected": rej}
            if valid:
                vals = list(valid.values())
                means = {name: float(np.mean([rm[sym] for rm in vals]))
                         for name, sym in zip(HEAD_MEANS,
                                              ("s", "w", "H", "hb", "Hc", "C"))}
                mw = means["content_term"] / means["content_mass"] \
                    if means["content_mass"] != 0 else 0.0
                bal = float(np.mean([rm["b"] for rm in vals]))
            else:
                means = {name: NAN for name in HEAD_MEANS}
                mw = NAN
                bal = NAN
            hs.update(means)
            hs["content_entropy_mw"] = mw
            hs["sink_balance"] = bal
            head_stats.append(hs)
        pair_keys = set(picked)
        layer_stats.append(layer_pairs(
            l, [{key: rm for key, rm in rh.items() if key[1] in pair_keys}
                for rh in rows], head_stats[l * NH:(l + 1) * NH]))

    out["rows_used"] = rows_used
    out["rows_rejected"] = total_rej
    out["head_stats"] = head_stats
    out["layer_stats"] = layer_stats
    return out


def layer_pairs(l, rows, hstats):
    """Head-by-head matrices and flip rates of one layer, over the rows
    given (the picked ones); the entropy flip rate takes the head values."""
    NH = len(rows)
    mats = {m: [[NAN] * NH for _ in range(NH)] for m in MATRICES}
    pair_rows = [[0] * NH for _ in range(NH)]
    for i in range(NH):
        for j in range(NH):
            if i == j:
                # the head itself: all its valid rows, picked or not
                pair_rows[i][i] = hstats[i]["rows"]
                if hstats[i]["rows"]:
                    for m, d in (("cosine_keep", 1.0), ("cosine_drop", 1.0),
                                 ("js_keep", 0.0), ("js_drop", 0.0),
                                 ("pair_sink", 0.0), ("pair_content", 0.0)):
                        mats[m][i][j] = d
                continue
            common = sorted(set(rows[i]) & set(rows[j]))
            pair_rows[i][j] = len(common)
            if not common:
                continue                       # stays NaN
            ck, jk, cd, jd, ds, dc = [], [], [], [], [], []
            for key in common:
                ri, rj = rows[i][key], rows[j][key]
                ck.append(cosine(ri["a"], rj["a"]))
                jk.append(js(ri["a"], rj["a"]))
                if ri["w"] > 0 and rj["w"] > 0:
                    cd.append(cosine(ri["c"], rj["c"]))
                    jd.append(js(ri["c"], rj["c"]))
                ds.append((ri["b"] - rj["b"]) ** 2)
                dc.append(float(np.sum((ri["clr_c"] - rj["clr_c"]) ** 2)))
            mats["cosine_keep"][i][j] = float(np.mean(ck))
            mats["js_keep"][i][j] = float(np.mean(jk))
            mats["cosine_drop"][i][j] = float(np.mean(cd)) if cd else NAN
            mats["js_drop"][i][j] = float(np.mean(jd)) if jd else NAN
            mats["pair_sink"][i][j] = math.sqrt(float(np.mean(ds)))
            mats["pair_content"][i][j] = math.sqrt(float(np.mean(dc)))

    ent_keep = [[abs(hi["entropy"] - hj["entropy"]) for hj in hstats]
                for hi in hstats]
    ent_drop = [[abs(hi["content_entropy"] - hj["content_entropy"])
                 for hj in hstats] for hi in hstats]
    pairs = {"cosine": (mats["cosine_keep"], mats["cosine_drop"]),
             "js": (mats["js_keep"], mats["js_drop"]),
             "entropy": (ent_keep, ent_drop)}
    flip_rate, flip_comp = {}, {}
    for metric in FLIP_METRICS:
        rate, comp = flips(*pairs[metric])
        flip_rate[metric] = rate
        flip_comp[metric] = comp

    ls = {"layer": l}
    ls.update(mats)
    ls["pair_rows"] = pair_rows
    ls["flip_rate"] = flip_rate
    ls["flip_comparisons"] = flip_comp
    return ls


def flip_differences(dk, dd):
    """(D_keep(i,j) - D_keep(i,l), D_drop(i,j) - D_drop(i,l)) of every
    comparison: anchor i, unordered pair {j, l} of the other heads, all four
    values non-NaN."""
    NH = len(dk)
    out = []
    for i in range(NH):
        others = [h for h in range(NH) if h != i]
        for j, l in itertools.combinations(others, 2):
            four = (dk[i][j], dk[i][l], dd[i][j], dd[i][l])
            if any(math.isnan(v) for v in four):
                continue
            out.append((dk[i][j] - dk[i][l], dd[i][j] - dd[i][l]))
    return out


def flips(dk, dd):
    """(flip rate, comparisons) of METRICS §5; rate NaN without comparisons."""
    diffs = flip_differences(dk, dd)
    nflip = sum(1 for a, b in diffs
                if np.sign(a) != 0 and np.sign(b) != 0 and np.sign(a) != np.sign(b))
    return (nflip / len(diffs) if diffs else NAN), len(diffs)


def entropy_split(h0, h1):
    """METRICS §3 aggregate split between two head stats (dicts with
    entropy, sink_mass, content_mass, sink_entropy, content_entropy_mw):
    returns (dH, sink part, content part)."""
    dH = h1["entropy"] - h0["entropy"]
    ds = h1["sink_mass"] - h0["sink_mass"]
    dhb = h1["sink_entropy"] - h0["sink_entropy"]
    hc_mid = 0.5 * (h0["content_entropy_mw"] + h1["content_entropy_mw"])
    w_mid = 0.5 * (h0["content_mass"] + h1["content_mass"])
    dhc = h1["content_entropy_mw"] - h0["content_entropy_mw"]
    return dH, dhb - ds * hc_mid, w_mid * dhc


# ---------------------------------------------------------------- self-test

def _close(name, got, want, tol, failures):
    ok = abs(got - want) <= tol
    print("%-4s %-36s got %.12g want %.12g" % ("ok" if ok else "FAIL", name,
                                               got, want))
    if not ok:
        failures.append(name)


def selftest():
    failures = []
    # METRICS §7: x = (0.5, 0.25, 0.25), y = (0.2, 0.5, 0.3), sink 0.
    t = np.array([[[0.5, 0.25, 0.25]], [[0.2, 0.5, 0.3]]], dtype=np.float64)
    res = analyze(t)
    hx, hy = res["head_stats"]
    for field, want in (("sink_mass", 0.5), ("content_mass", 0.5),
                        ("entropy", 1.0397207708), ("sink_entropy", 0.6931471806),
                        ("content_entropy", 0.6931471806),
                        ("content_term", 0.3465735903),
                        ("sink_balance", 0.5659523030)):
        _close("x." + field, hx[field], want, 1e-9, failures)
    dH, sp, cp = entropy_split(hx, hy)
    _close("dH", dH, -0.0100677568, 1e-9, failures)
    _close("sink part", sp, 0.0104618058, 1e-9, failures)
    _close("content part", cp, -0.0205295626, 1e-9, failures)
    _close("sink + content part - dH", sp + cp - dH, 0.0, 1e-15, failures)
    ls = res["layer_stats"][0]
    d_sink = ls["pair_sink"][0][1]
    d_content = ls["pair_content"][0][1]
    _close("d_sink", d_sink, 1.1055568651, 1e-9, failures)
    _close("d_content", d_content, 0.3612082626, 1e-9, failures)
    _close("d_A", math.hypot(d_sink, d_content), 1.1630680938, 1e-9, failures)
    # d_A directly as the Aitchison distance of the full clr vectors
    lx, ly = np.log(t[0, 0]), np.log(t[1, 0])
    d_a = float(np.linalg.norm((lx - lx.mean()) - (ly - ly.mean())))
    _close("d_A from full clr", d_a, 1.1630680938, 1e-9, failures)

    # §1 identity H = hb + w Hc on random rows, s near 0 and near 1
    rng = np.random.default_rng(1)
    worst = 0.0
    for t_s in np.linspace(-20.7, 20.7, 41):
        z = rng.normal(0, 2, 30)
        c = np.exp(z - z.max())
        c /= c.sum()
        row = np.concatenate(([1 / (1 + math.exp(-t_s))],
                              c / (1 + math.exp(t_s))))
        rm = row_metrics(row, 0, "probs", 1e-10)
        worst = max(worst, abs(rm["H"] - (rm["hb"] + rm["w"] * rm["Hc"])))
    _close("max |H - hb - w Hc|", worst, 0.0, 1e-9, failures)

    # §4: logits path; clr_c invariant to the sink score and a shift, and the
    # Aitchison split orthogonal; logits and probs paths agree.
    z = rng.normal(0, 1.5, 12)
    z2 = z.copy()
    z2[0] += 7.0
    r1 = row_metrics(z, 0, "logits", 1e-10)
    r2 = row_metrics(z2 + 3.0, 0, "logits", 1e-10)
    _close("clr_c invariance", float(np.max(np.abs(r1["clr_c"] - r2["clr_c"]))),
           0.0, 1e-12, failures)
    zc = z[1:] - z[1:].mean()
    _close("clr_c = centred content logits",
           float(np.max(np.abs(r1["clr_c"] - zc))), 0.0, 1e-12, failures)
    rp = row_metrics(r1["a"], 0, "probs", 1e-10)
    _close("balance logits vs probs", r1["b"] - rp["b"], 0.0, 1e-12, failures)
    y = rng.normal(0, 1.5, 12)
    ry = row_metrics(y, 0, "logits", 1e-10)
    lz = np.log(r1["a"])
    ly = np.log(ry["a"])
    da2 = float(np.sum(((lz - lz.mean()) - (ly - ly.mean())) ** 2))
    split = (r1["b"] - ry["b"]) ** 2 + float(np.sum((r1["clr_c"] - ry["clr_c"]) ** 2))
    _close("d_A^2 = d_sink^2 + d_content^2", da2 - split, 0.0, 1e-12, failures)

    # zero replacement, probs: (0.5, 0.5, 0) with delta
    d = 1e-3
    ln_a = log_parts_probs(np.array([0.5, 0.5, 0.0]), d)
    _close("replacement ln a_2", ln_a[2], math.log(d), 1e-15, failures)
    _close("replacement ln a_0", ln_a[0], math.log(0.5 * (1 - d)), 1e-15, failures)
    ln_l = log_parts_logits(np.array([0.0, 0.0, -np.inf]), d)
    _close("logits replacement agrees", float(np.max(np.abs(ln_l - ln_a))), 0.0,
           1e-15, failures)

    # §5 flip rate on a hand-made case: anchor 0, pair {1,2} flips.
    dk = [[0, 1, 2], [1, 0, 1], [2, 1, 0]]
    dd = [[0, 2, 1], [2, 0, 1], [1, 1, 0]]
    rate, comp = flips(dk, dd)
    # anchor 0: 1-2 vs 2-1 flip; anchor 1: (0,2): 1-1=0 tie; anchor 2: (0,1): 2-1 vs 1-1=0 tie
    _close("flip rate", rate, 1 / 3, 1e-15, failures)
    _close("flip comparisons", comp, 3, 0, failures)

    # §5 rows for pairs: the hand-made cases of tests/unit/test_metrics.c
    picks = [
        (None, 10, 8, 4, [0, 3, 6, 9]), (None, 10, 8, 3, [0, 4, 9]),
        (None, 10, 8, 1, [4]), (None, 4, 8, 100, [0, 1, 2, 3]),
        (None, 10, 8, 0, []), (None, 10, 1, 4, []),
        ([0, 1, 2, 3, 4, 5, 0, 1, 2], 9, 16, 3, [4, 5, 8]),
        ([0, 1, 2, 3, 4, 5, 0, 1, 2], 9, 16, 6, [2, 3, 4, 5, 7, 8]),
        ([0, 1, 2, 3, 4, 5, 0, 1, 2], 9, 16, 100, [1, 2, 3, 4, 5, 7, 8]),
        ([0, 1, 2, 3, 4, 5, 2, 3, 0, 1, 2], 11, 4, 3, [3, 7, 10]),
        ([0, 1, 2, 3, 4, 5, 2, 3, 0, 1, 2], 11, 4, 8, [2, 3, 4, 5, 6, 7, 9, 10]),
        ([1, 1, 2, 3, 1, 2, 3], 7, 8, 4, [0, 2, 3, 6]),
        ([3, 3, 3, 2], 4, 8, 2, [0, 1]), ([0, 0, 0], 3, 8, 2, []),
    ]
    for qpos, rows, keys, n, want in picks:
        got = pick_rows(qpos, rows, keys, n)
        if got != want:
            print("pick_rows(%r, %d, %d, %d) = %r, want %r"
                  % (qpos, rows, keys, n, got, want))
            failures.append("pick_rows")

    print("%d failed" % len(failures))
    return not failures


if __name__ == "__main__":
    sys.exit(0 if selftest() else 1)
