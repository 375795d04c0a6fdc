#!/usr/bin/python3
"""`sinkwatch audit` against independent computations on the stored values:
a run streamed through a real daemon, with heads built to cluster by their
content under drop and by their sink mass under keep, one layer missing at
one step and the steps sent out of order. The audit's flip rates equal a
numpy computation of METRICS.md §5 on the stored pair matrices and head
entropies (and the stored flip_rate); its clusterings equal scipy's
average linkage (linkage(method="average") + fcluster(maxclust=k)) on the
same distances, merge heights included; its adjusted Rand index equals
scikit-learn's on the same clusterings. A second daemon stores the same
stream with --cross-layer-pairs 1: its xpair_js_keep/drop equal a numpy
computation from the sent tensors (and, within a layer, js_keep/js_drop),
and the audit's clustering of all heads equals scipy's on their mean.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/audit.py [CASE...]
"""
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, SINKWATCHD, Daemon, Results, Sender, run_cmd  # noqa: E402
from metrics_ref import js as js_np  # noqa: E402

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)

try:
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform
    from sklearn.metrics import adjusted_rand_score
except ImportError as e:    # python3-scipy, python3-sklearn
    print("scipy or scikit-learn missing (%s): skipped" % e)
    sys.exit(77)

L, H, R, K = 3, 9, 8, 40
STEPS = [0, 20, 10, 30, 50, 40]       # the order they are sent in
MISSING = (30, 2)                     # (step, layer) never sent
RUN = "audit"


def layer_tensor(rng, step, layer):
    """[H, R, K] probabilities: head h's content follows group h // 3 (plus
    a little noise), its sink mass level h % 3; the levels are far apart, so
    the sink dominates the keep convention's JS and the content the drop's."""
    t = step / 50.0
    base = np.random.default_rng(100 + layer).normal(size=(3, R, K - 1)) * 0.4
    x = np.empty((H, R, K))
    for h in range(H):
        z = base[h // 3] + 0.04 * rng.normal(size=(R, K - 1))
        c = np.exp(z - z.max(-1, keepdims=True))
        c /= c.sum(-1, keepdims=True)
        s = (0.04, 0.5, 0.96)[h % 3] * (1 - 0.02 * t) + 0.01 * rng.random(size=(R, 1))
        x[h, :, 0] = s[:, 0]
        x[h, :, 1:] = (1 - s) * c
    return x


SENT = {}      # (step, layer) -> the tensor sent


def make_run(extra=("--pair-rows", "0")):
    d = Daemon(extra=["--step-timeout-ms", "300"] + list(extra)).start()
    try:
        rng = np.random.default_rng(3)
        snd = Sender(d.listen, RUN, L, H, model="audit-test", params=12345)
        for st in STEPS:
            for lay in range(L):
                x = layer_tensor(rng, st, lay)
                if (st, lay) != MISSING:
                    snd.snapshot(st, lay, x)
                    SENT[(st, lay)] = x
        snd.end()
        path = d.wait_ended(RUN, timeout=30)
        snd.close()
    finally:
        assert d.stop() == 0
    return path


def audit(path, *args, rc_want=0):
    rc, out, err = run_cmd([SINKWATCH, "audit", path, "--format", "json"] + list(args))
    assert rc == rc_want, (args, rc, out, err)
    return json.loads(out) if rc == 0 else err


def flip_np(keep, drop):
    """METRICS.md §5: every anchor i, every unordered pair {j, l} of the
    other heads; a flip where the signs of D(i,j) - D(i,l) differ, zeros
    no flip; comparisons with a NaN left out."""
    n = keep.shape[0]
    flips = comps = 0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        a, b = np.array(others)[:, None], np.array(others)[None, :]
        upper = a < b
        dk = np.sign(keep[i, a] - keep[i, b])[upper]
        dd = np.sign(drop[i, a] - drop[i, b])[upper]
        ok = ~(np.isnan(dk) | np.isnan(dd))
        comps += int(ok.sum())
        flips += int(((dk != 0) & (dd != 0) & (dk != dd) & ok).sum())
    return flips / comps if comps else float("nan")


def stored(path):
    with h5py.File(path, "r") as f:
        step = f["step"][:]
        out = {k: f[k][:] for k in ("cosine_keep", "cosine_drop", "js_keep", "js_drop",
                                    "entropy", "content_entropy", "flip_rate", "missing")}
    return step, out


def canon(labels):
    """A partition as labels numbered by first occurrence."""
    seen = {}
    return [seen.setdefault(x, len(seen) + 1) for x in labels]


def same(a, b, tol=1e-12):
    a = float("nan") if a is None else a
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= tol


PATH = None


def case_flip_rates():
    """Per step and layer the audit's flip rates equal numpy's on the stored
    matrices, and the stored flip_rate; the means over the range too; the
    steps come in step order (the view), the missing layer is skipped and
    counted."""
    rep = audit(PATH)
    step, v = stored(PATH)
    assert [s["step"] for s in rep["steps"]] == sorted(STEPS), rep["steps"]
    assert rep["range"] == {"first_step": 0, "last_step": 50, "steps": 6, "steps_stored": 6}
    sums = np.zeros((L, 3))
    cnt = np.zeros((L, 3))
    for s in rep["steps"]:
        t = s["row"]
        assert step[t] == s["step"], (t, s["step"])
        for ly in s["layers"]:
            lay = ly["layer"]
            if (s["step"], lay) == MISSING:
                assert v["missing"][t, lay] == 1
                assert ly["status"] == "missing_heads" and ly["flip"] == [None] * 3, ly
                continue
            assert ly["status"] == "whole", ly
            want = [flip_np(v["cosine_keep"][t, lay], v["cosine_drop"][t, lay]),
                    flip_np(v["js_keep"][t, lay], v["js_drop"][t, lay]),
                    flip_np(np.abs(np.subtract.outer(v["entropy"][t, lay], v["entropy"][t, lay])),
                            np.abs(np.subtract.outer(v["content_entropy"][t, lay],
                                                     v["content_entropy"][t, lay])))]
            for m in range(3):
                assert same(ly["flip"][m], want[m]), (s["step"], lay, m, ly["flip"], want)
                assert same(ly["flip_stored"][m], v["flip_rate"][t, lay, m]), (ly, m)
                assert same(ly["flip"][m], v["flip_rate"][t, lay, m]), (ly, m)
            assert ly["agree"] is True
            assert ly["comparisons"] == [H * (H - 1) * (H - 2) // 2] * 3, ly["comparisons"]
            sums[lay] += want
            cnt[lay] += 1
    assert 0 < np.mean(sums / cnt) < 1      # flips happen, not everywhere
    assert rep["flips_agree"] is True and rep["flips_disagree"] == 0
    assert rep["skipped"] == {"steps": 1, "layer_steps_missing_heads": 1,
                              "layer_steps_nan_pairs": 0}, rep["skipped"]
    mf = rep["mean_flip"]
    for lay in range(L):
        for m, name in enumerate(("cosine", "js", "entropy")):
            assert same(mf["layers"][lay][name], sums[lay, m] / cnt[lay, m]), (lay, name, mf)
        assert mf["layers"][lay]["values"] == [int(c) for c in cnt[lay]]
    for m, name in enumerate(("cosine", "js", "entropy")):
        assert same(mf["model"][name], sums[:, m].sum() / cnt[:, m].sum()), (name, mf["model"])


def check_clusters(rep, rows, dist):
    """The audit's clusterings of every layer against scipy and sklearn."""
    _, v = stored(PATH)
    k = rep["clustering"]["k"]
    aris = []
    for lay, cl in enumerate(rep["clustering"]["layers"]):
        use = [t for t in rows if v["missing"][t, lay] == 0]
        assert cl["steps"] == len(use), (lay, cl["steps"], use)
        labels = {}
        for c in ("keep", "drop"):
            jsd = np.mean(v["js_" + c][use, lay], axis=0)
            D = np.sqrt(np.maximum(jsd, 0)) if dist == "sqrt" else np.maximum(jsd, 0)
            np.fill_diagonal(D, 0)
            Z = linkage(squareform(D, checks=False), method="average")
            merges = np.array(cl[c]["merges"], dtype=float)
            assert merges.shape == (H - 1, 4)
            assert np.allclose(merges[:, 2], Z[:, 2], rtol=0, atol=1e-12), (lay, c, merges, Z)
            assert np.all(np.diff(Z[:, 2]) > 1e-9), "ties in the test data"
            assert np.array_equal(merges[:, [0, 1, 3]], Z[:, [0, 1, 3]]), (lay, c, merges, Z)
            want = fcluster(Z, k, criterion="maxclust")
            assert canon(cl[c]["labels"]) == canon(want.tolist()), (lay, c, cl[c]["labels"], want)
            assert len(set(cl[c]["labels"])) == k
            labels[c] = cl[c]["labels"]
        ari = adjusted_rand_score(labels["keep"], labels["drop"])
        assert same(cl["ari"], ari), (lay, cl["ari"], ari)
        aris.append(ari)
    assert same(rep["clustering"]["mean_ari"], float(np.mean(aris)))
    return aris


def case_clusters():
    """Clusterings equal scipy's on the same distances (the square root of
    the mean JS divergence over the range's whole steps, the default);
    the drop clustering finds the content groups, the keep one the sink
    levels; the ARI equals scikit-learn's."""
    rep = audit(PATH)
    step, _ = stored(PATH)
    assert rep["clustering"]["distance"] == "sqrt_jsd" and rep["clustering"]["k"] == 3
    check_clusters(rep, list(range(len(step))), "sqrt")
    groups = [h // 3 + 1 for h in range(H)]
    levels = canon([h % 3 for h in range(H)])
    for cl in rep["clustering"]["layers"]:
        assert cl["drop"]["labels"] == groups, cl
        assert canon(cl["keep"]["labels"]) == levels, cl
        assert cl["ari"] < 0, cl          # two orthogonal partitions
    assert rep["cross_layer"]["available"] is False
    assert rep["cross_layer"]["bytes_per_step"] == L * rep["cross_layer"][
        "bytes_per_step_within_layers"]


def case_options():
    """--distance jsd, --k, --from/--to, --last; stored steps only."""
    step, _ = stored(PATH)
    row_of = {int(s): t for t, s in enumerate(step)}
    for args, steps in ((["--k", "4", "--distance", "jsd"], sorted(STEPS)),
                        (["--from", "10", "--to", "40", "--k", "2"], [10, 20, 30, 40]),
                        (["--last", "2", "--k", "5"], [40, 50]),
                        (["--from", "40"], [40, 50]), (["--to", "10"], [0, 10]),
                        (["--last", "100"], sorted(STEPS))):
        rep = audit(PATH, *args)
        assert [s["step"] for s in rep["steps"]] == steps, (args, rep["steps"])
        dist = "jsd" if "jsd" in args else "sqrt"
        assert rep["clustering"]["distance"] == dist + ("_jsd" if dist == "sqrt" else "")
        aris = check_clusters(rep, [row_of[s] for s in steps], dist)
        assert any(a != 1 for a in aris), aris
    one = audit(PATH, "--k", "1")
    assert all(cl["ari"] == 1 and cl["keep"]["labels"] == [1] * H
               for cl in one["clustering"]["layers"])
    every = audit(PATH, "--k", str(H))
    assert all(cl["ari"] == 1 and cl["drop"]["labels"] == list(range(1, H + 1))
               for cl in every["clustering"]["layers"])
    for args, msg in ((["--from", "15"], "nearest stored steps are 10 and 20"),
                      (["--to", "60"], "nearest stored step is 50 (the last)"),
                      (["--from", "-5"], "nearest stored step is 0 (the first)"),
                      (["--k", "10"], "more clusters than the 9 heads"),
                      (["--from", "40", "--to", "20"], "after"),
                      (["--last", "2", "--from", "0"], "excludes"),
                      (["--distance", "l2"], "not sqrt or jsd")):
        err = audit(PATH, *args, rc_want=2)
        assert msg in err, (args, err)


def case_text():
    """The text form says the same in lines a person reads."""
    rc, out, err = run_cmd([SINKWATCH, "audit", PATH, "--last", "3"])
    assert rc == 0, err
    rep = audit(PATH, "--last", "3")
    assert "stored and recomputed flip rates agree" in out, out
    assert "skipped: 1 steps with a layer not whole" in out, out
    assert "clustering of all heads across layers: not available" in out, out
    assert "  skipped: heads missing" in out, out
    for cl in rep["clustering"]["layers"]:
        line = "keep %s  drop %s  ARI %.6f" % (" ".join(map(str, cl["keep"]["labels"])),
                                                " ".join(map(str, cl["drop"]["labels"])), cl["ari"])
        assert line in out, (line, out)


XPATH = None
N = L * H
XPAIR_ROWS = 5      # of R = 8: the pair rows are a pick, as by default


def cross_np(x, y, rows):
    """JS keep and drop (METRICS.md §5) of two heads' rows, mean over rows."""
    keep = np.mean([js_np(x[r] / x[r].sum(), y[r] / y[r].sum()) for r in rows])
    drop = np.mean([js_np(x[r, 1:] / x[r, 1:].sum(), y[r, 1:] / y[r, 1:].sum()) for r in rows])
    return keep, drop


def case_cross_stored():
    """xpair_js_keep/drop [T, L*H, L*H], head (l, h) at l*H + h: every entry
    equals numpy on the sent rows that row_use marks for pair work; the
    blocks of one layer equal its js_keep/js_drop; the missing layer's heads
    are NaN at its step and only there; symmetric with a zero diagonal."""
    with h5py.File(XPATH, "r") as f:
        assert f.attrs["cross_layer_pairs"] == 1
        step = f["step"][:]
        xk, xd = f["xpair_js_keep"][:], f["xpair_js_drop"][:]
        use = f["row_use"][:]
        jk, jd = f["js_keep"][:], f["js_drop"][:]
        assert f["xpair_js_keep"].attrs["dims"] == "step,lh,lh"
    assert xk.shape == (len(STEPS), N, N) and xd.shape == xk.shape
    checked = 0
    for t, s in enumerate(step):
        rows = np.flatnonzero(use[t] & 1)
        assert len(rows) == XPAIR_ROWS, (t, rows)
        for a in range(N):
            for b in range(N):
                la, lb = a // H, b // H
                if (s, la) == MISSING or (s, lb) == MISSING:
                    assert np.isnan(xk[t, a, b]) and np.isnan(xd[t, a, b]), (s, a, b)
                    continue
                if a == b:
                    assert xk[t, a, b] == 0 and xd[t, a, b] == 0
                    continue
                if b < a:
                    assert xk[t, a, b] == xk[t, b, a] and xd[t, a, b] == xd[t, b, a]
                    continue
                k, d = cross_np(SENT[(s, la)][a % H], SENT[(s, lb)][b % H], rows)
                # METRICS.md §6: within 1e-7 relative (1e-10 absolute) of float64
                assert abs(xk[t, a, b] - k) <= 1e-7 * k + 1e-10, (s, a, b, xk[t, a, b], k)
                assert abs(xd[t, a, b] - d) <= 1e-7 * d + 1e-10, (s, a, b, xd[t, a, b], d)
                checked += 1
        for lay in range(L):
            blk = np.s_[t, lay * H:(lay + 1) * H, lay * H:(lay + 1) * H]
            if (s, lay) != MISSING:
                assert np.allclose(xk[blk], jk[t, lay], rtol=1e-12, atol=1e-15)
                assert np.allclose(xd[blk], jd[t, lay], rtol=1e-12, atol=1e-15)
    assert checked == (len(STEPS) - 1) * N * (N - 1) // 2 + (N - H) * (N - H - 1) // 2


def case_cross_audit():
    """The clustering of all heads: scipy's average linkage on the mean of
    the stored cross-layer matrices over the steps with every head, its ARI
    scikit-learn's, its JS flip rate numpy's (§5 on the two means); with
    9 clusters the drop convention finds the 9 content groups (3 per layer)
    and with 3 the keep convention the 3 sink levels across layers."""
    with h5py.File(XPATH, "r") as f:
        xs = {c: f["xpair_js_" + c][:] for c in ("keep", "drop")}
        step = f["step"][:]
    whole = [t for t, s in enumerate(step) if s != MISSING[0]]
    for k in (3, 9):
        rep = audit(XPATH, "--model-k", str(k))
        cl = rep["cross_layer"]
        assert cl["available"] is True and cl["heads"] == N and cl["k"] == k, cl
        assert cl["steps"] == len(whole) and cl["steps_skipped"] == 1, cl
        assert cl["bytes_per_step"] == N * N * 16
        means = {}
        for c in ("keep", "drop"):
            D = np.sqrt(np.maximum(np.mean(xs[c][whole], axis=0), 0))
            np.fill_diagonal(D, 0)
            means[c] = D
            Z = linkage(squareform(D, checks=False), method="average")
            merges = np.array(cl[c]["merges"], dtype=float)
            assert np.allclose(merges[:, 2], Z[:, 2], rtol=0, atol=1e-12), (c, merges, Z)
            assert np.array_equal(merges[:, [0, 1, 3]], Z[:, [0, 1, 3]]), (c, merges, Z)
            want = fcluster(Z, k, criterion="maxclust")
            assert canon(cl[c]["labels"]) == canon(want.tolist()), (c, cl[c]["labels"], want)
        assert same(cl["ari"], adjusted_rand_score(cl["keep"]["labels"], cl["drop"]["labels"]))
        assert same(cl["flip_js"], flip_np(means["keep"], means["drop"]), 1e-12), cl["flip_js"]
        assert cl["comparisons"] == N * (N - 1) * (N - 2) // 2
        if k == 9:
            assert canon(cl["drop"]["labels"]) == canon([(a // H, (a % H) // 3) for a in range(N)])
        else:
            assert canon(cl["keep"]["labels"]) == canon([a % 3 for a in range(N)])
    # the layer audit of the same stream is the same as without the option
    assert audit(XPATH)["clustering"]["k"] == 3
    err = audit(XPATH, "--model-k", str(N + 1), rc_want=2)
    assert "more clusters than the %d heads of the model" % N in err, err
    rc, out, err = run_cmd([SINKWATCH, "audit", XPATH])
    assert rc == 0, err
    assert "clustering of all %d heads across layers" % N in out, out


def case_cross_setting_is_the_files():
    """A run file keeps the setting it was made with: a daemon restarted
    without the option goes on in the same file and stores NaN there (and
    says so in its log); one with the option, in a file made without, stores
    none and says so; no step is lost either way."""
    import tempfile
    data = tempfile.mkdtemp(prefix="sw-xset-")
    rng = np.random.default_rng(5)

    def session(run, steps, opt, end=False):
        d = Daemon(data_dir=data, extra=["--cross-layer-pairs", opt]).start()
        try:
            snd = Sender(d.listen, run, L, H, model="audit-test", params=12345)
            for st in steps:
                for lay in range(L):
                    snd.snapshot(st, lay, layer_tensor(rng, st, lay))
            if end:
                snd.end()
                d.wait_ended(run, timeout=30)
            else:
                d.wait(lambda st: st["writer"]["steps_written"] >= len(steps),
                       what="steps written")
            snd.close()
        finally:
            assert d.stop() == 0
        return d.read_log(), os.path.join(data, run + ".h5")

    session("xon", [0, 10], "1")
    log, path = session("xon", [20], "0", end=True)
    assert "its file stores cross-layer pairs; cross_layer_pairs is 0" in log, log
    with h5py.File(path, "r") as f:
        assert list(f["step"][:]) == [0, 10, 20] and f.attrs["cross_layer_pairs"] == 1
        x = f["xpair_js_keep"][:]
        assert np.isfinite(x[:2]).all() and np.isnan(x[2]).all()
    session("xoff", [0, 10], "0")
    log, path = session("xoff", [20], "1", end=True)
    assert "was made without cross-layer pairs" in log, log
    with h5py.File(path, "r") as f:
        assert list(f["step"][:]) == [0, 10, 20] and f.attrs["cross_layer_pairs"] == 0
        assert "xpair_js_keep" not in f
    rep = audit(path)
    assert rep["cross_layer"]["available"] is False


CASES = [case_flip_rates, case_clusters, case_options, case_text, case_cross_stored,
         case_cross_audit, case_cross_setting_is_the_files]

if __name__ == "__main__":
    want = set(sys.argv[1:])
    XPATH = make_run(("--pair-rows", str(XPAIR_ROWS), "--cross-layer-pairs", "1"))
    PATH = make_run()
    res = Results()
    for c in CASES:
        if not want or c.__name__[5:] in want:
            res.check(c.__name__[5:], c)
    sys.exit(res.finish())
