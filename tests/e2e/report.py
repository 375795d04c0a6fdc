#!/usr/bin/python3
"""`sinkwatch report`: the golden run, ranges, formats, per head, and the
cross-run table, each against an independent numpy computation from the
stored datasets.

- The golden run file (tests/data/golden_run/golden.h5, made by
  make_golden_run.py there through a real daemon: 2 layers x 3 heads, a
  fixed probe, a missing layer, a head without valid rows, a missing head,
  a resume that supersedes two rows) gives the expected reports stored
  beside it, numbers to 1e-12; and those numbers equal what `reference()`
  below computes with numpy from the datasets: the view of LAYOUT.md, the
  §3 split (paired from the row_* datasets, else aggregate from the head
  values), path and endpoint, layer and model means, the incomplete steps,
  per head the values at both ends, the class, the two rankings and
  Spearman's rho, and the dashboard's series.
- Ranges: --from/--to/--last against the reference of that range; steps
  that are not stored are errors naming the nearest stored ones (exit 2).
- CSV: its header is the column list of sinkwatch(1), its cells equal the
  JSON's.
- Several runs streamed through a real daemon into one directory (a group
  of three seeds, a larger model, runs that cannot be compared: other keys,
  other kind, no fixed probe, one step) plus a temporary directory, a
  hidden file, a non-run file, a non-run .h5 and a subdirectory: the table
  is sorted by params, its numbers equal the reference, the group's mean
  and sample standard deviation equal numpy's, every run left out is listed
  with its reason, every skipped entry too.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd SW_SRCDIR=. /usr/bin/python3 tests/e2e/report.py
"""
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, Sender,  # noqa: E402
                       set_sender_table)
from servelib import drift_gaps  # noqa: E402

if not SINKWATCHD or not SINKWATCH:
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)
SINKWATCH = os.path.abspath(SINKWATCH)     # the golden reports run in its directory

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(SRCDIR, "tests", "data", "golden_run")
MAN = os.path.join(SRCDIR, "doc", "sinkwatch.1")
EPS = 0.01                  # the default of --eps


def report(args, cwd=None):
    p = subprocess.run([SINKWATCH, "report"] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=120, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def no_duplicates(pairs):
    """A JSON object's members, refusing a key given twice (a parser would
    keep the last one silently)."""
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    assert not dup, "JSON object with duplicate keys %s" % dup
    return dict(pairs)


def report_json(args, cwd=None):
    rc, out, err = report(list(args) + ["--format", "json"], cwd=cwd)
    assert rc == 0, (args, rc, err)
    return json.loads(out, object_pairs_hook=no_duplicates)


# ---- the independent reference ------------------------------------------------

def view_of(f):
    """LAYOUT.md's view from /step, /inc and the resume records: a row is
    superseded when a newer incarnation resumed from a step before its own;
    of the rest the newest incarnation's last row of each step wins.
    Returns ([steps], [rows]) in step order."""
    T = f["step"].shape[0]
    step, inc = f["step"][:T], f["inc"][:T]
    nres = min(f["resume_inc"].shape[0], f["resume_step"].shape[0])
    res = list(zip(f["resume_inc"][:nres].tolist(), f["resume_step"][:nres].tolist()))
    best = {}
    for t in range(T):
        st, ic = int(step[t]), int(inc[t])
        if any(ri > ic and st > rs for ri, rs in res):
            continue
        if st not in best or (ic, t) >= best[st]:
            best[st] = (ic, t)
    steps = sorted(best)
    return steps, [best[s][1] for s in steps]


def split(f, a, b):
    """§3 split of every head [L, H] between stored rows a and b: (dH, sink,
    content), paired row by row where the file has row statistics, else
    from the head values; NaN where it has no value."""
    if int(f.attrs["row_stats"]):
        g = {n: (f["row_" + n][a], f["row_" + n][b]) for n in
             ("sink_mass", "content_mass", "entropy", "sink_entropy", "content_entropy")}
        ok = (f["row_status"][a] == 0) & (f["row_status"][b] == 0)
        (s0, s1), (w0, w1) = g["sink_mass"], g["content_mass"]
        (H0, H1), (hb0, hb1), (c0, c1) = g["entropy"], g["sink_entropy"], g["content_entropy"]
        n = ok.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            dH = np.where(ok, H1 - H0, 0).sum(-1) / n
            sink = np.where(ok, (hb1 - hb0) - (s1 - s0) * 0.5 * (c0 + c1), 0).sum(-1) / n
            cont = np.where(ok, 0.5 * (w0 + w1) * (c1 - c0), 0).sum(-1) / n
        bad = n == 0
    else:
        hv = {n: (f[n][a], f[n][b]) for n in
              ("entropy", "sink_entropy", "sink_mass", "content_mass", "content_entropy_mw")}
        (H0, H1), (hb0, hb1) = hv["entropy"], hv["sink_entropy"]
        (s0, s1), (w0, w1), (c0, c1) = hv["sink_mass"], hv["content_mass"], hv["content_entropy_mw"]
        dH = H1 - H0
        sink = (hb1 - hb0) - (s1 - s0) * 0.5 * (c0 + c1)
        cont = 0.5 * (w0 + w1) * (c1 - c0)
        bad = (f["rows"][a] == 0) | (f["rows"][b] == 0)
    return tuple(np.where(bad, np.nan, x) for x in (dH, sink, cont))


def shares(dH, sink, cont):
    if not dH < 0:
        return float("nan"), float("nan")
    return sink / dH, cont / dH


def attrib(path, end, n):
    """The JSON form of a path (dH, sink, content, intervals) and endpoint."""
    ps, pc = shares(*path)
    es, ec = shares(*end)
    return {"path": {"dH": path[0], "sink": path[1], "content": path[2], "sink_share": ps,
                     "content_share": pc, "intervals": n},
            "endpoint": {"dH": end[0], "sink": end[1], "content": end[2], "sink_share": es,
                         "content_share": ec}}


def mean_of(heads):
    """Layer or model figures: means of the head figures (§3); the path over
    the heads with any interval, the endpoint over those with a value."""
    withp = [h for h in heads if h["n"] > 0]
    withe = [h for h in heads if np.isfinite(h["end"][0])]
    nan3 = (float("nan"),) * 3
    path = tuple(float(np.mean([h["path"][k] for h in withp])) for k in range(3)) if withp else nan3
    end = tuple(float(np.mean([h["end"][k] for h in withe])) for k in range(3)) if withe else nan3
    n = sum(h["n"] for h in withp) // len(withp) if withp else 0
    return attrib(path, end, n)


def ranks(v):
    """Ranks 1..n of v, ties their mean rank."""
    order = sorted(range(len(v)), key=lambda i: (v[i], i))
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def classify(p, n):
    dH, s, c = p
    if n == 0 or not np.isfinite(dH):
        return "none"
    if abs(dH) < EPS:
        return "stable"
    if dH >= EPS:
        return "rise"
    if s <= -EPS and c > -EPS:
        return "sink"
    if c <= -EPS and s > -EPS:
        return "content"
    return "both"


def nanmean(x):
    """The mean sink mass of a layer or the model: over the heads with a
    value (NaN when none)."""
    x = np.asarray(x, dtype=float).ravel()
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else float("nan")


def reference(path, first=None, last=None):
    """What the report of path over view steps first .. last must say."""
    with h5py.File(path, "r") as f:
        steps, rows = view_of(f)
        k0 = steps.index(first) if first is not None else 0
        k1 = steps.index(last) if last is not None else len(steps) - 1
        steps, rows = steps[k0:k1 + 1], rows[k0:k1 + 1]
        L, H = int(f.attrs["layers"]), int(f.attrs["heads"])
        parts = [split(f, rows[k - 1], rows[k]) for k in range(1, len(rows))]
        end = split(f, rows[0], rows[-1])
        heads = []
        for l in range(L):
            for h in range(H):
                acc, n = [0.0, 0.0, 0.0], 0
                for p in parts:
                    x = [float(p[q][l, h]) for q in range(3)]
                    if all(np.isfinite(x)):
                        acc = [a + b for a, b in zip(acc, x)]
                        n += 1
                at = {}
                for tag, r in (("first", rows[0]), ("last", rows[-1])):
                    at["rows_" + tag] = int(f["rows"][r, l, h])
                    at["sink_mass_" + tag] = float(f["sink_mass"][r, l, h])
                    at["entropy_" + tag] = float(f["entropy"][r, l, h])
                    at["content_entropy_" + tag] = float(f["content_entropy"][r, l, h])
                heads.append({"layer": l, "head": h, "path": acc if n else [0.0] * 3, "n": n,
                              "end": [float(end[q][l, h]) for q in range(3)], "at": at})
        # the steps that lack something, and the intervals they touch
        mr = f["missing_rank"] if "missing_rank" in f else None
        gaps = []
        for st, r in zip(steps, rows):
            miss = f["missing"][r]
            hm = (mr[r] != -1) if mr is not None else np.repeat(miss[:, None] != 0, H, 1)
            norows = f["rows"][r] == 0
            if miss.any() or hm.any() or norows.any():
                gaps.append({"step": st, "layers_missing": [int(x) for x in np.nonzero(miss)[0]],
                             "heads_missing": int(hm.sum()),
                             "heads_without_rows": int(norows.sum()),
                             "ranks": sorted({int(x) for x in mr[r][mr[r] >= 0]})
                             if mr is not None else []})
        gs = {g["step"] for g in gaps}
        ivl = [{"from_step": a, "to_step": b} for a, b in zip(steps, steps[1:])
               if a in gs or b in gs]
        # the series: head means per layer (finite values), running sums
        sm = np.array([f["sink_mass"][r] for r in rows])
        en = np.array([f["entropy"][r] for r in rows])
        T, lost, incomplete = f["step"].shape[0], int(f["lost"][-1]), int(f["incomplete"][-1])
        paired = bool(int(f.attrs["row_stats"]))
    cum = np.zeros((2, len(rows), L, H))
    for k, p in enumerate(parts, 1):
        cum[:, k] = np.nan_to_num(np.array(p[1:]), nan=0.0)
    cum = np.cumsum(cum, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        series = []
        for l in list(range(L)) + ["model"]:
            sel = (slice(None), l) if l != "model" else (slice(None),)
            red = (lambda x: np.nanmean(x, axis=1)) if l != "model" else \
                (lambda x: np.nanmean(x.reshape(x.shape[0], -1), axis=1))
            cs = cum[(slice(None),) + sel]
            series.append({"layer": l, "sink_mass": list(red(sm[sel])), "entropy": list(red(en[sel])),
                           "cum_sink": list(cs[0].reshape(len(rows), -1).mean(1)),
                           "cum_content": list(cs[1].reshape(len(rows), -1).mean(1))})
    # per head: classes and the two rankings at the last step
    ranked = [i for i, h in enumerate(heads) if np.isfinite(h["at"]["entropy_last"]) and
              np.isfinite(h["at"]["content_entropy_last"])]
    re_ = ranks([heads[i]["at"]["entropy_last"] for i in ranked])
    rc_ = ranks([heads[i]["at"]["content_entropy_last"] for i in ranked])
    rho = float(np.corrcoef(re_, rc_)[0, 1]) if len(ranked) >= 2 else float("nan")
    hj = []
    for i, h in enumerate(heads):
        n = h["n"]
        p = tuple(h["path"]) if n else (float("nan"),) * 3
        x = {"layer": h["layer"], "head": h["head"]}
        x.update(h["at"])
        x.update(attrib(p, tuple(h["end"]), n))
        x["class"] = classify(p, n)
        x["rank_entropy"] = re_[ranked.index(i)] if i in ranked else float("nan")
        x["rank_content"] = rc_[ranked.index(i)] if i in ranked else float("nan")
        x["rank_shift"] = x["rank_content"] - x["rank_entropy"]
        hj.append(x)
    moved = sorted((x for x in hj if x["rank_shift"] == x["rank_shift"] and x["rank_shift"] != 0),
                   key=lambda x: (-abs(x["rank_shift"]), x["layer"], x["head"]))[:5]
    for_heads = [{"path": tuple(h["path"]) if h["n"] else (float("nan"),) * 3, "n": h["n"],
                  "end": tuple(h["end"])} for h in heads]
    return {
        "split_form": "paired" if paired else "aggregate", "steps_used": len(steps),
        "first_step": steps[0], "last_step": steps[-1], "rows_stored": T, "lost": lost,
        "incomplete": incomplete, "intervals": len(steps) - 1,
        "intervals_incomplete": len(ivl), "steps_incomplete": len(gaps),
        "incomplete_steps": gaps, "incomplete_intervals": ivl,
        "model_attribution": mean_of(for_heads),
        "sink_mass_first": nanmean(sm[0]), "sink_mass_last": nanmean(sm[-1]),
        "layer_attribution": [dict(layer=l, sink_mass_first=nanmean(sm[0, l]),
                                   sink_mass_last=nanmean(sm[-1, l]),
                                   **mean_of(for_heads[l * H:(l + 1) * H]))
                              for l in range(L)],
        "per_head": hj,
        "ranking": {"step": steps[-1], "ranked": len(ranked), "spearman_rho": rho,
                    "most_moved": [{k: x[k] for k in ("layer", "head", "rank_entropy",
                                                      "rank_content", "rank_shift")}
                                   for x in moved]},
        "series": {"step": steps, "layers": series},
    }


def same(got, want, where="", rel=1e-10, abs_=1e-12, keys_of_want=True):
    """got equals want: numbers to rel/abs (None in got is NaN), the rest
    exactly; objects compared on want's keys (keys_of_want) or all."""
    if isinstance(want, dict):
        assert isinstance(got, dict), (where, got)
        keys = want.keys() if keys_of_want else set(want) | set(got)
        for k in keys:
            assert k in got, "%s: no key %r" % (where, k)
            assert k in want, "%s: unexpected key %r" % (where, k)
            same(got[k], want[k], "%s.%s" % (where, k), rel, abs_, keys_of_want)
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, "%s[%d]" % (where, i), rel, abs_, keys_of_want)
    elif isinstance(want, bool) or isinstance(want, str):
        assert got == want, (where, got, want)
    elif want is None or (isinstance(want, float) and math.isnan(want)):
        assert got is None or (isinstance(got, float) and math.isnan(got)), (where, got)
    else:
        assert got is not None, (where, got, want)
        assert abs(got - want) <= rel * max(abs(got), abs(want)) + abs_, (
            "%s: %r != %r (diff %.3g)" % (where, got, want, got - want))


# ---- the golden run -------------------------------------------------------------

def t_golden_expected():
    for name, args in (("expected_report.json", ["--per-head", "--series"]),
                       ("expected_range.json", ["--per-head", "--from", 10, "--to", 60])):
        with open(os.path.join(GOLDEN, name)) as f:
            want = json.load(f)
        got = report_json(["golden.h5"] + args, cwd=GOLDEN)
        # every key, both ways; numbers to 1e-12
        same(got, want, name, rel=0, abs_=1e-12, keys_of_want=False)


def t_golden_reference():
    path = os.path.join(GOLDEN, "golden.h5")
    got = report_json([path, "--per-head", "--series"])
    ref = reference(path)
    same(got, ref, "golden")
    # what the golden run was made to hold (make_golden_run.py)
    assert got["split_form"] == "paired" and got["rows_superseded"] == 2, got
    assert [g["step"] for g in got["incomplete_steps"]] == [30, 50, 60], got["incomplete_steps"]
    assert got["incomplete_steps"][0]["layers_missing"] == [1]
    assert got["incomplete_steps"][2]["heads_missing"] == 1
    assert got["intervals_incomplete"] == 5 and got["intervals"] == 8
    classes = [h["class"] for h in got["per_head"]]
    assert classes == ["sink", "content", "both", "stable", "rise", "content"], classes
    assert got["ranking"]["spearman_rho"] < 0.9, got["ranking"]
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return
    h = got["per_head"]
    rho = spearmanr([x["entropy_last"] for x in h], [x["content_entropy_last"] for x in h])
    assert abs(rho.correlation - got["ranking"]["spearman_rho"]) < 1e-12, rho


def t_golden_text():
    rc, out, err = report([os.path.join(GOLDEN, "golden.h5"), "--per-head"])
    assert rc == 0, err
    assert "5 of 8 intervals incomplete: steps 20-70" in out, out
    assert "step 30 (layer 1 missing, 3 heads missing from rank 0)" in out, out
    assert "step 50 (1 head without a valid row)" in out, out
    assert "step 60 (1 head missing from rank 0)" in out, out
    assert "Spearman rho" in out and "rank moves most:" in out, out
    assert re.search(r"^\s+1\s+0 .* stable ", out, re.M), out
    # the split is named by its channels, never by a direction (issue 29 item 5)
    assert "growth" not in out and "sink channel and the content channel" in out, out
    # the mean sink mass at the range's ends beside each layer and the model
    js = report_json([os.path.join(GOLDEN, "golden.h5")])
    rows = [("layer %d" % x["layer"], x) for x in js["layer_attribution"]] + [("model", js)]
    for label, x in rows:
        line = re.search(r"^%s .*$" % label, out, re.M).group(0)
        sf, sl = line.split("|")[-1].split()
        assert (sf, sl) == ("%.4f" % x["sink_mass_first"], "%.4f" % x["sink_mass_last"]), line
    assert "mean sink mass over the heads at steps 0 and 80" in out, out


def t_drift_gaps():
    """Drift holds for the view only where prev_row is the winning row of the
    previous view step (LAYOUT.md; issue 26 item 1): a row taken against
    another step gives a gap (null) in --series, per layer and the model,
    however finite the stored value; the path sums are recomputed from the
    view (no prev_row) and stay as they were."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    path = os.path.join(tmp, "gaps.h5")
    want = drift_gaps(os.path.join(GOLDEN, "golden.h5"), path)
    got = report_json([path, "--series"])
    steps = got["series"]["step"]
    for lay in got["series"]["layers"]:
        for st, w in want.items():
            k = steps.index(st)
            if w is None:
                assert lay["drift_sink"][k] is None and lay["drift_content"][k] is None, \
                    (lay["layer"], st, lay["drift_sink"][k], lay["drift_content"][k])
            else:
                assert (lay["drift_sink"][k], lay["drift_content"][k]) == w, (lay["layer"], st)
    gold = report_json([os.path.join(GOLDEN, "golden.h5"), "--series"])
    for a, b in zip(got["series"]["layers"], gold["series"]["layers"]):
        for k, st in enumerate(steps):
            if st not in want:
                assert a["drift_content"][k] == b["drift_content"][k], (a["layer"], st)
    same(got["model_attribution"], gold["model_attribution"], "model_attribution")
    shutil.rmtree(tmp)


def t_ranks_not_ended():
    """ranks_not_ended compares each incarnation's senders with the sender
    table (issue 26 item 4): a rank that never sent has no row and is named,
    in JSON and text."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    path = os.path.join(tmp, "ranks.h5")
    for rows, want in (([(1, 0, 2, 1)], [(1, 1, False)]),
                       ([(1, 0, 2, 0)], [(1, 0, True), (1, 1, False)]),
                       ([(7, 1, 2, 1), (5, 0, 2, 1)], [(5, 1, False), (7, 0, False)]),
                       ([(3, 0, 2, 1), (3, 1, 2, 1)], [])):
        shutil.copy(os.path.join(GOLDEN, "golden.h5"), path)
        set_sender_table(path, rows)
        got = report_json([path])
        assert [(x["inc"], x["rank"], x["sent"]) for x in got["ranks_not_ended"]] == want, \
            (rows, got["ranks_not_ended"])
        rc, out, err = report([path])
        assert rc == 0, err
        for inc, rank, sent in want:
            line = "rank %d of 2 (incarnation %d) never sent %s" % (
                rank, inc, "its end" if sent else "anything")
            assert line in out, (rows, line, out)
    shutil.rmtree(tmp)


def t_not_ended():
    """A run that never ended (killed, or still running; issue 29 item 5.1):
    `ended` false in its JSON and a line saying so in its text; the golden
    run, which ended, has `ended` true and no such line."""
    gold = os.path.join(GOLDEN, "golden.h5")
    assert report_json([gold])["ended"] is True
    rc, out, err = report([gold])
    assert rc == 0 and "not ended" not in out, (rc, out, err)
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    path = os.path.join(tmp, "killed.h5")
    shutil.copy(gold, path)
    with h5py.File(path, "r+") as f:       # resumed, then killed: a 0 last
        e = f["ended"]
        e.resize((e.shape[0] + 1,))
        e[-1] = 0
    got = report_json([path])
    assert got["ended"] is False, got.get("ended")
    rc, out, err = report([path])
    assert rc == 0 and "not ended: the run was killed or is still running" in out, (rc, out, err)
    got = report_json([path, gold])
    assert sorted(r["ended"] for r in got["runs"]) == [False, True], got["runs"]
    shutil.rmtree(tmp)


def t_escaped_name():
    """A run id with '/' or other escaped bytes is a file of its escaped name
    (data/fam%2FL2H4D64.h5 for the run fam/L2H4D64; issue 29 item 5.2):
    naming it as typed, data/fam/L2H4D64.h5, reads that file and says so,
    from the data directory, its parent, or by an absolute path; a name
    that matches no run file stays "No such file"."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    shutil.copy(os.path.join(GOLDEN, "golden.h5"), os.path.join(data, "fam%2FL2H4D64.h5"))
    shutil.copy(os.path.join(GOLDEN, "golden.h5"), os.path.join(data, "my%20run.h5"))
    for cwd, arg, file in ((tmp, "data/fam/L2H4D64.h5", "data/fam%2FL2H4D64.h5"),
                           (data, "fam/L2H4D64.h5", "fam%2FL2H4D64.h5"),
                           (None, os.path.join(data, "fam", "L2H4D64.h5"),
                            os.path.join(data, "fam%2FL2H4D64.h5")),
                           (tmp, "data/my run.h5", "data/my%20run.h5")):
        rc, out, err = report([arg], cwd=cwd)
        assert rc == 0 and out.startswith("run golden "), (arg, rc, out, err)
        assert "reading %s, the file of run" % file in err, (arg, err)
        got = report_json([arg], cwd=cwd)
        assert got["file"] == file, (arg, got["file"])
    rc, out, err = report(["data/fam/nope.h5"], cwd=tmp)
    assert rc == 2 and "No such file" in err, (rc, err)
    shutil.rmtree(tmp)


def t_empty_dir():
    """An empty directory: no run to compare (exit 2), and no undefined
    behaviour on the way (qsort of no names; issue 26 item 12: under the
    asan build UBSan stops the tool)."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    for fmt in ("text", "json"):
        rc, out, err = report([tmp, "--format", fmt])
        assert rc == 2 and "no run to compare" in err and "runtime error" not in err, \
            (fmt, rc, err)
    os.rmdir(tmp)


# ---- ranges ---------------------------------------------------------------------

def t_ranges():
    path = os.path.join(GOLDEN, "golden.h5")
    for args, first, last in ((["--from", 10, "--to", 60], 10, 60),
                              (["--from", 40], 40, 80), (["--to", 20], 0, 20),
                              (["--last", 3], 60, 80), (["--last", 2, "--to", 50], 40, 50),
                              (["--from", 70, "--to", 80], 70, 80)):
        got = report_json([path, "--per-head", "--series"] + args)
        ref = reference(path, first, last)
        same(got, ref, " ".join(map(str, args)))
        assert got["first_step"] == first and got["last_step"] == last and \
            got["steps_stored"] == 9, got
    # a range of whole run equals no range
    a = report_json([path, "--from", 0, "--to", 80])
    b = report_json([path])
    a.pop("range")
    b.pop("range")
    assert a == b


def t_range_errors():
    path = os.path.join(GOLDEN, "golden.h5")
    for args, want in (
            (["--from", 35], "--from 35: step 35 is not stored in %s; the nearest stored steps "
             "are 30 and 40" % path),
            (["--to", 81], "step 81 is not stored in %s; the nearest stored step is 80 (the last)"
             % path),
            (["--from", -5], "the nearest stored step is 0 (the first)"),
            (["--from", 60, "--to", 20], "--from 60 is after --to 20"),
            (["--last", 10], "--last 10: %s has 9 stored step(s)" % path),
            (["--last", 2, "--from", 10], "not with --from"),
            (["--from", 40, "--to", 40], "the range holds 1 stored step (40)"),
            (["--last", 0], "--last: '0' is not a positive number of steps"),
            (["--from", "x"], "--from: 'x' is not a step number")):
        for fmt in ("text", "json", "csv"):
            rc, out, err = report([path, "--format", fmt] + args)
            assert rc == 2 and want in err and out == "", (args, fmt, rc, out, err)
    # one stored step is enough for the series alone
    got = report_json([path, "--series", "--from", 40, "--to", 40])
    assert got["series"]["step"] == [40], got["series"]


# ---- CSV --------------------------------------------------------------------------

def man_csv_columns():
    """The CSV columns as sinkwatch(1) lists them (the .TP items of the
    CSV subsection of report)."""
    with open(MAN) as f:
        page = f.read().replace("\\-", "-").replace("\\(em", "-")
    sec = page.split("CSV columns", 1)[1]
    sec = re.split(r"^\.(SS|SH) ", sec, flags=re.M)[0]
    return re.findall(r"^\.TP\n\.B ([a-zA-Z_]+)\s*$", sec, flags=re.M)


def read_csv(text):
    rows = list(csv.DictReader(io.StringIO(text)))
    return rows


def num(s):
    return float("nan") if s == "nan" else float(s)


def t_csv():
    path = os.path.join(GOLDEN, "golden.h5")
    rc, out, err = report([path, "--format", "csv", "--per-head", "--from", 10])
    assert rc == 0, err
    header = out.split("\n", 1)[0].split(",")
    doc = man_csv_columns()
    assert header == doc, "CSV header %s, sinkwatch(1) lists %s" % (header, doc)
    rows = read_csv(out)
    js = report_json([path, "--per-head", "--from", 10])
    assert [r["scope"] for r in rows] == ["run"] + ["layer"] * 2 + ["head"] * 6, rows
    run = rows[0]
    assert run["model"] == "golden-sim" and int(run["params"]) == 123456
    assert int(run["first_step"]) == 10 and int(run["last_step"]) == 80
    assert int(run["intervals"]) == 7 and int(run["intervals_incomplete"]) == 5
    for part in ("path", "endpoint"):
        for k in ("dH", "sink", "content", "sink_share", "content_share"):
            same(num(run["%s_%s" % (part, k)]), js["model_attribution"][part][k], k, 0, 0)
            for l in range(2):
                same(num(rows[1 + l]["%s_%s" % (part, k)]),
                     js["layer_attribution"][l][part][k], "layer %d %s" % (l, k), 0, 0)
            for i, h in enumerate(js["per_head"]):
                same(num(rows[3 + i]["%s_%s" % (part, k)]), h[part][k], "head %d %s" % (i, k), 0, 0)
    for i, h in enumerate(js["per_head"]):
        r = rows[3 + i]
        assert (int(r["layer"]), int(r["head"]), r["class"]) == (h["layer"], h["head"], h["class"])
        for k in ("sink_mass_first", "sink_mass_last", "entropy_first", "entropy_last",
                  "content_entropy_first", "content_entropy_last", "rank_entropy", "rank_content"):
            same(num(r[k]), h[k], k, 0, 0)
        assert r["reason"] == "" and r["runs"] == ""
    # run and layer lines: the mean sink mass over the heads at both ends
    for r, x in zip(rows[:3], [js] + js["layer_attribution"]):
        for k in ("sink_mass_first", "sink_mass_last"):
            same(num(r[k]), x[k], "%s %s" % (r["scope"], k), 0, 0)


# ---- several runs ---------------------------------------------------------------

FAMILY = {
    # name: (model, layers, heads, sim args)
    "m70-s1": ("m70", 2, 4, ["--seed", "1"]),
    "m70-s2": ("m70", 2, 4, ["--seed", "2", "--mode", "content"]),
    "m70-s3": ("m70", 2, 4, ["--seed", "3", "--mode", "sink"]),
    "m1b": ("m1b", 3, 4, ["--seed", "4"]),
    "keys32": ("k32", 2, 2, ["--keys", "32"]),
    "logits": ("lg", 2, 3, ["--kind", "logits"]),
    "short": ("sh", 1, 2, ["--steps", "1"]),
}


def make_family(tmp):
    """The runs, streamed through a real daemon; a run without a fixed probe
    (raw sender); the directory's other entries. Returns the data dir."""
    d = Daemon(tmp=tmp).start()
    try:
        for run, (model, L, H, extra) in FAMILY.items():
            args = [SINKWATCH, "sim", "--connect", d.listen, "--run", run, "--model", model,
                    "--layers", L, "--heads", H, "--steps", 8, "--step-stride", 10,
                    "--blocking"] + extra
            p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, (run, p.stdout, p.stderr)
        snd = Sender(d.listen, "nofixed", 2, 4, model="m70", params=8000000, fixed=False)
        rng = np.random.default_rng(5)
        for st in range(0, 80, 10):
            for lay in range(2):
                z = rng.normal(size=(4, 8, 64))
                z[:, :, 0] += 1 + st / 40
                p = np.exp(z - z.max(-1, keepdims=True))
                snd.snapshot(st, lay, (p / p.sum(-1, keepdims=True)).astype(np.float32))
        snd.end()
        for run in list(FAMILY) + ["nofixed"]:
            d.wait_ended(run)
        snd.close()
    finally:
        rc = d.stop()
    assert rc == 0, d.read_log()
    data = d.data
    os.makedirs(os.path.join(data, ".swtmp.Ab12Cd"))
    with open(os.path.join(data, ".swtmp.Ab12Cd", "new.h5"), "wb") as f:
        f.write(b"half a file")
    with open(os.path.join(data, "notes.txt"), "w") as f:
        f.write("not a run\n")
    with h5py.File(os.path.join(data, "tensor.h5"), "w") as f:
        f["attention"] = np.zeros((2, 3, 3), np.float32)
    os.makedirs(os.path.join(data, "old"))
    return data


def t_family(live):
    tmp = tempfile.mkdtemp(prefix="sinkwatch-report-")
    live["tmp"] = tmp
    live["data"] = make_family(tmp)


def family_ref(data):
    """The table the report must give: (sorted compared runs, groups)."""
    runs = []
    for name in ("m70-s1", "m70-s2", "m70-s3", "m1b"):
        path = os.path.join(data, name + ".h5")
        with h5py.File(path, "r") as f:
            params, model = int(f.attrs["params"]), f.attrs["model"]
        r = reference(path)
        runs.append({"file": path, "model": model, "params": params,
                     "model_attribution": r["model_attribution"], "steps_used": r["steps_used"]})
    runs.sort(key=lambda r: (r["params"], r["model"], r["file"]))
    g = [r for r in runs if r["model"] == "m70"]
    mean, sd = {}, {}
    for part in ("path", "endpoint"):
        mean[part], sd[part] = {}, {}
        for k in ("dH", "sink", "content", "sink_share", "content_share"):
            v = np.array([r["model_attribution"][part][k] for r in g], dtype=float)
            v = v[np.isfinite(v)]
            mean[part][k] = float(v.mean()) if len(v) else float("nan")
            sd[part][k] = float(v.std(ddof=1)) if len(v) > 1 else float("nan")
    groups = [{"model": "m70", "params": g[0]["params"], "runs": 3,
               "files": [r["file"] for r in g], "mean": mean, "sd": sd}]
    return runs, groups


def t_table(live):
    data = live["data"]
    got = report_json([data])
    runs, groups = family_ref(data)
    assert [r["file"] for r in got["runs"]] == [r["file"] for r in runs], got["runs"]
    params = [r["params"] for r in got["runs"]]
    assert params == sorted(params), params
    same(got["runs"], runs, "runs")
    same(got["groups"], groups, "groups")
    assert "sample standard deviation" in got["spread"]
    ex = {os.path.basename(e["file"]): e["reason"] for e in got["excluded"]}
    assert set(ex) == {"keys32.h5", "logits.h5", "short.h5", "nofixed.h5"}, ex
    assert "keys 32, theirs 64" in ex["keys32.h5"], ex
    assert "kind logits, theirs probs" in ex["logits.h5"], ex
    assert "fixed probe no, theirs yes" in ex["nofixed.h5"] and \
        "split aggregate, theirs paired" in ex["nofixed.h5"], ex
    assert "1 stored step in the range" in ex["short.h5"], ex
    sk = {os.path.basename(e["file"]): e["reason"] for e in got["skipped"]}
    # the data directory's lock file is the daemon's, not listed (issue 29 item 5.3)
    assert os.path.exists(os.path.join(data, ".sinkwatchd.lock"))
    assert set(sk) == {".swtmp.Ab12Cd", "notes.txt", "tensor.h5", "old"}, sk
    assert sk[".swtmp.Ab12Cd"].startswith("temporary") and "not a run file" in sk["tensor.h5"] \
        and "not a run file" in sk["notes.txt"] and "directory" in sk["old"], sk
    # the same as text: every run, the group, every reason
    rc, out, err = report([data, "--per-layer"])
    assert rc == 0 and ".sinkwatchd.lock" not in out, (err, out)
    for r in runs:
        assert r["file"] in out, (r["file"], out)
    assert "1 group of runs with the same model and params: mean and sample standard " \
        "deviation" in out, out
    for name, why in ex.items():
        assert why in out, (why, out)
    for name, why in sk.items():
        assert why in out, (why, out)
    assert out.count("  layer ") == 3 * 2 + 3, out
    # named files, one missing: the same figures; the missing one listed
    some = [os.path.join(data, n) for n in ("m1b.h5", "m70-s1.h5")] + [os.path.join(data, "gone.h5")]
    got2 = report_json(some + ["--per-layer"])
    assert [r["file"] for r in got2["runs"]] == some[1::-1], got2["runs"]
    same(got2["runs"][0]["model_attribution"], reference(some[1])["model_attribution"], "named")
    assert len(got2["runs"][0]["layer_attribution"]) == 2
    assert got2["excluded"][0]["reason"].startswith("unreadable: ") and \
        "No such file" in got2["excluded"][0]["reason"], got2["excluded"]
    assert got2["groups"] == [], got2["groups"]
    # a file named twice counts once (no group of one file with itself)
    got3 = report_json([some[1], data])
    assert got3["groups"][0]["runs"] == 3, got3["groups"]
    ex = [e for e in got3["excluded"] if e["reason"].startswith("the same file as ")]
    assert len(ex) == 1 and os.path.samefile(ex[0]["file"], some[1]), got3["excluded"]


def t_table_csv(live):
    data = live["data"]
    rc, out, err = report([data, "--format", "csv"])
    assert rc == 0, err
    rows = read_csv(out)
    js = report_json([data])
    runs = [r for r in rows if r["scope"] == "run"]
    assert [r["file"] for r in runs] == [r["file"] for r in js["runs"]]
    for r, j in zip(runs, js["runs"]):
        for part in ("path", "endpoint"):
            for k in ("dH", "sink", "content", "sink_share"):
                same(num(r["%s_%s" % (part, k)]), j["model_attribution"][part][k], k, 0, 0)
    g = [r for r in rows if r["scope"] == "group"]
    assert len(g) == 1 and g[0]["model"] == "m70" and g[0]["runs"] == "3", g
    for part in ("path", "endpoint"):
        for k in ("dH", "sink", "content", "sink_share", "content_share"):
            same(num(g[0]["%s_%s" % (part, k)]), js["groups"][0]["mean"][part][k], k, 0, 0)
            same(num(g[0]["sd_%s_%s" % (part, k)]), js["groups"][0]["sd"][part][k], k, 0, 0)
    ex = [r for r in rows if r["scope"] == "excluded"]
    assert sorted(r["reason"] for r in ex) == sorted(e["reason"] for e in js["excluded"])
    sk = [r for r in rows if r["scope"] == "skipped"]
    assert sorted(r["file"] for r in sk) == sorted(e["file"] for e in js["skipped"])


def t_table_range(live):
    data = live["data"]
    got = report_json([data, "--from", 20, "--to", 50])
    for r in got["runs"]:
        ref = reference(r["file"], 20, 50)
        same(r["model_attribution"], ref["model_attribution"], r["file"])
        assert r["steps_used"] == 4 and r["first_step"] == 20, r
    ex = {os.path.basename(e["file"]): e["reason"] for e in got["excluded"]}
    assert "--to 50: step 50 is not stored" in ex["short.h5"] and \
        "the nearest stored step is 0 (the last)" in ex["short.h5"], ex
    got = report_json([data, "--last", 3, "--per-head"])
    assert all(r["steps_used"] == 3 and len(r["per_head"]) == r["layers"] * r["heads"] and
               "ranking" in r for r in got["runs"]), got["runs"]
    # nothing left to compare: exit 2, the reasons still listed
    rc, out, err = report([os.path.join(data, "short.h5"), os.path.join(data, "notes.txt")])
    assert rc == 2 and "no run to compare" in err and "1 stored step" in out, (rc, out, err)
    rc, out, err = report([data, "--series", "--format", "json"])
    assert rc == 2 and "--series takes one run file" in err, (rc, err)


def t_group_exclude(live):
    """Issue 29 item 5: a sweep copy of a run beside the live family pooled
    into one group by default; --group-by splits by the attributes named,
    --exclude leaves runs out with their reason, and the text table names
    each run's id."""
    data = live["data"]
    sweep = os.path.join(live["tmp"], "sweep")
    os.makedirs(sweep, exist_ok=True)
    shutil.copy(os.path.join(data, "m70-s1.h5"), os.path.join(sweep, "m70-s1.h5"))
    # the default (model, params): the copy joins the three seeds
    got = report_json([data, sweep])
    assert got["group_by"] == ["model", "params"], got["group_by"]
    assert [(g["model"], g["runs"]) for g in got["groups"]] == [("m70", 4)], got["groups"]
    # by directory too: the three seeds alone, the copy in no group
    got = report_json([data, sweep, "--group-by", "model,params,dir"])
    assert got["group_by"] == ["model", "params", "dir"], got["group_by"]
    assert len(got["groups"]) == 1, got["groups"]
    g = got["groups"][0]
    assert g["runs"] == 3 and g["dir"] == data and g["model"] == "m70", g
    assert sorted(os.path.basename(f) for f in g["files"]) == \
        ["m70-s1.h5", "m70-s2.h5", "m70-s3.h5"], g
    # the group's figures are those of its runs
    byfile = {r["file"]: r for r in got["runs"]}
    for part in ("path", "endpoint"):
        v = np.array([byfile[f]["model_attribution"][part]["dH"] for f in g["files"]])
        same(g["mean"][part]["dH"], float(v.mean()), part, 1e-12, 1e-15)
        same(g["sd"][part]["dH"], float(v.std(ddof=1)), part, 1e-12, 1e-15)
    # by run id: the copy and its original, whatever their directories
    got = report_json([data, sweep, "--group-by", "run"])
    assert got["group_by"] == ["run"], got["group_by"]
    assert [(g["run"], g["runs"]) for g in got["groups"]] == [("m70-s1", 2)], got["groups"]
    assert "model" not in got["groups"][0] and "params" not in got["groups"][0]
    # by kind alone: every compared run shares it, in table order
    got = report_json([data, "--group-by", "kind"])
    assert got["groups"][0]["kind"] == "probs" and got["groups"][0]["runs"] == 4, got["groups"]
    assert got["groups"][0]["files"] == [r["file"] for r in got["runs"]], got["groups"]
    # --exclude, twice: fnmatch on the run id, listed with the reason
    got = report_json([data, sweep, "--exclude", "m70-s[23]", "--exclude", "m1*"])
    runs = sorted(r["run"] for r in got["runs"])
    assert runs == ["m70-s1", "m70-s1"], runs
    ex = {(os.path.basename(os.path.dirname(e["file"])), e.get("run")): e["reason"]
          for e in got["excluded"]}
    for r, pat in (("m70-s2", "m70-s[23]"), ("m70-s3", "m70-s[23]"), ("m1b", "m1*")):
        assert ex[(os.path.basename(data), r)] == "excluded (--exclude %s)" % pat, ex
    assert got["groups"][0]["runs"] == 2, got["groups"]
    # text: a run column, the keys of the groups, the excluded runs listed
    rc, out, err = report([data, sweep, "--group-by", "model,params,dir", "--exclude",
                           "m1b"])
    assert rc == 0, err
    head = [l for l in out.splitlines() if l.startswith("model ")][0]
    assert head.split()[:3] == ["model", "run", "params"], head
    for r in ("m70-s1", "m70-s2", "m70-s3"):
        assert re.search(r"^m70\s+%s\s+\d+ " % r, out, re.M), (r, out)
    assert "1 group of runs with the same model, params and dir: mean" in out, out
    assert re.search(r"^m70 .* model=m70 params=\d+ dir=%s$" % re.escape(data), out, re.M), out
    assert "m1b.h5 (model m1b, params" in out and "excluded (--exclude m1b)" in out, out
    # CSV: the group's keys in its group cell
    rc, out, err = report([data, sweep, "--group-by", "run,dir", "--format", "csv"])
    assert rc == 0, err
    gl = [r for r in read_csv(out) if r["scope"] == "group"]
    assert [r["group"] for r in gl] == [], gl      # no run id twice in one directory
    rc, out, err = report([data, sweep, "--group-by", "run", "--format", "csv"])
    gl = [r for r in read_csv(out) if r["scope"] == "group"]
    assert [(r["group"], r["runs"], r["model"]) for r in gl] == [("run=m70-s1", "2", "")], gl
    # refused: an unknown key; a lone file
    rc, out, err = report([data, "--group-by", "model,seed"])
    assert rc == 2 and "'seed' is not a run attribute" in err and "generation" in err, err
    rc, out, err = report([os.path.join(data, "m1b.h5"), "--exclude", "x"])
    assert rc == 2 and "take several runs" in err, err


def main():
    R = Results()
    live = {}
    R.check("golden: the expected reports", t_golden_expected)
    R.check("golden: numpy reference", t_golden_reference)
    R.check("golden: text marks what is missing", t_golden_text)
    R.check("drift: gaps where prev_row is not the view's previous step", t_drift_gaps)
    R.check("ranks not ended, against senders", t_ranks_not_ended)
    R.check("a run that never ended says so", t_not_ended)
    R.check("a run id's escaped file name", t_escaped_name)
    R.check("an empty directory", t_empty_dir)
    R.check("ranges vs numpy", t_ranges)
    R.check("range errors name the nearest steps", t_range_errors)
    R.check("CSV: documented columns, JSON values", t_csv)
    R.check("a family through the daemon", lambda: t_family(live))
    if "data" in live:
        R.check("table vs numpy, groups, reasons", lambda: t_table(live))
        R.check("table as CSV", lambda: t_table_csv(live))
        R.check("table over a range", lambda: t_table_range(live))
        R.check("--group-by, --exclude, the run column", lambda: t_group_exclude(live))
    if live.get("tmp"):
        if R.failed:
            print("files kept in %s" % live["tmp"])
        else:
            shutil.rmtree(live["tmp"], ignore_errors=True)
    return R.finish()


if __name__ == "__main__":
    sys.exit(main())
