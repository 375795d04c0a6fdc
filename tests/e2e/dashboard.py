#!/usr/bin/python3
"""Tests of the live dashboard (contrib/python/sinkwatch/dashboard.py, run as
python3 -m sinkwatch.dashboard: the module behind sinkwatch-dashboard)
against a real daemon.

A real sinkwatchd (tests/e2e/swharness.py) is fed by `sinkwatch sim` while the
dashboard renders PNGs of the run file being written (--png, and --png
--follow started before the file exists), then once more after the run
ended. Each picture is checked to hold the plots (size, share of drawn
pixels, several line colours, later pictures differ from earlier ones, the
tEXt entries saying what it shows); and the error exits (status 2).

The dashboard takes its numbers from `sinkwatch report --series`; what it
plots is checked against an independent numpy computation from the stored
head values (`reference` below): the view rule of storage/LAYOUT.md
implemented here from /step, /inc and the resume records, and the split of
METRICS.md §3, paired from the row_* datasets where the file has row_stats,
else aggregate from the head values. Besides the in-order sim run, two runs
whose steps arrive shuffled and are then resumed by a newer incarnation
(raw protocol sender: `inc` and `resume` header keys), one with a fixed probe
(paired) and one without (aggregate). For those two the plotted data are also
checked against what the senders sent (`from_inputs`): §1-§3 computed here
from the probabilities themselves, so neither the daemon's kernels nor its
file stand between the input and the expected picture.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd SW_SRCDIR=. /usr/bin/python3 tests/e2e/dashboard.py
"""
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zlib

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import msgpack  # noqa: E402
from swharness import SINKWATCH, SINKWATCHD, Daemon, Results, Sender  # noqa: E402
from servelib import drift_flip_want  # noqa: E402

if not SINKWATCHD or not SINKWATCH:
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(SRCDIR, "contrib", "python")
DASHBOARD = os.path.join(PYDIR, "sinkwatch", "dashboard.py")
# the command: the module of the source tree's package
DASH_CMD = [sys.executable, "-m", "sinkwatch.dashboard"]


def dash_env(**over):
    """The environment the dashboard runs in: the source tree's package first."""
    env = dict(os.environ, MPLBACKEND="Agg", **over)
    env["PYTHONPATH"] = os.pathsep.join([PYDIR] + [p for p in [env.get("PYTHONPATH")] if p])
    return env
SIZE = (960, 640)           # --size for every render here
LAYERS, HEADS, STEPS = 3, 4, 60
RUN = "dash"
# the shuffled and resumed runs: incarnation A sends SH_STEPS shuffled, B
# resumes from SH_RESUME and sends SH_B (not the last two: A's stay superseded)
SH_STEPS = [50 * i for i in range(14)]
SH_RESUME = 300
SH_B = [st for st in SH_STEPS if SH_RESUME <= st <= 550]
SH_INC_A, SH_INC_B = 1000, 2000
SH_ROWS, SH_KEYS = 6, 24


# ---- the independent reference: the view and the split, in numpy -----------

def view_of(step, inc, res_inc, res_step):
    """LAYOUT.md "the view", from the rows alone: a row is superseded when an
    incarnation newer than its own resumed from S < its step; of the rest, a
    step's newest incarnation wins (of one incarnation, the last row).
    Returns (view steps, winning rows, superseded row count, segments as
    [inc, first, last, steps])."""
    best = {}
    for t in range(len(step)):
        st, ic = int(step[t]), int(inc[t])
        if any(int(ri) > ic and st > int(rs) for ri, rs in zip(res_inc, res_step)):
            continue
        if st not in best or (ic, t) > best[st]:
            best[st] = (ic, t)
    steps = sorted(best)
    rows = [best[st][1] for st in steps]
    segs = []
    for st in steps:
        ic = best[st][0]
        if segs and segs[-1][0] == ic:
            segs[-1][2], segs[-1][3] = st, segs[-1][3] + 1
        else:
            segs.append([ic, st, st, 1])
    return np.array(steps, np.int64), rows, len(step) - len(rows), segs


def split_aggregate(f, a, b):
    """§3 aggregate split per head [L, H] between stored rows a and b, from
    the head values; NaN where a head has no valid row at either."""
    g = {n: f[n] for n in ("sink_entropy", "sink_mass", "content_mass",
                           "content_entropy_mw", "rows")}
    hb0, hb1 = g["sink_entropy"][a], g["sink_entropy"][b]
    s0, s1 = g["sink_mass"][a], g["sink_mass"][b]
    w0, w1 = g["content_mass"][a], g["content_mass"][b]
    c0, c1 = g["content_entropy_mw"][a], g["content_entropy_mw"][b]
    ok = (g["rows"][a] > 0) & (g["rows"][b] > 0)
    sink = (hb1 - hb0) - (s1 - s0) * 0.5 * (c0 + c1)
    cont = 0.5 * (w0 + w1) * (c1 - c0)
    return np.where(ok, sink, np.nan), np.where(ok, cont, np.nan)


def split_paired(f, a, b):
    """§3 paired split per head [L, H]: row by row from the row_* datasets,
    averaged over the rows accepted at both steps; NaN without any."""
    r = {n: (f["row_" + n][a].astype(np.float64), f["row_" + n][b].astype(np.float64))
         for n in ("sink_mass", "content_mass", "sink_entropy", "content_entropy")}
    ok = (f["row_status"][a] == 0) & (f["row_status"][b] == 0)
    (s0, s1), (w0, w1) = r["sink_mass"], r["content_mass"]
    (hb0, hb1), (hc0, hc1) = r["sink_entropy"], r["content_entropy"]
    n = ok.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sink = np.where(ok, (hb1 - hb0) - (s1 - s0) * 0.5 * (hc0 + hc1), 0).sum(-1) / n
        cont = np.where(ok, 0.5 * (w0 + w1) * (hc1 - hc0), 0).sum(-1) / n
    return np.where(n > 0, sink, np.nan), np.where(n > 0, cont, np.nan)


def _nanmean_heads(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # a layer all NaN
        return np.nanmean(x, axis=2)


def reference(path):
    """What the dashboard should plot, from the finished file's stored values:
    dict of steps, sink_mass, entropy, cum_sink, cum_content ([T, L]), rows,
    superseded, segments, form."""
    with h5py.File(path, "r") as f:
        T = f["step"].shape[0]
        nres = min(f["resume_inc"].shape[0], f["resume_step"].shape[0])
        steps, rows, superseded, segs = view_of(
            f["step"][:T], f["inc"][:T], f["resume_inc"][:nres], f["resume_step"][:nres])
        paired = bool(f.attrs["row_stats"])
        split = split_paired if paired else split_aggregate
        n = len(rows)
        L, H = int(f.attrs["layers"]), int(f.attrs["heads"])
        parts = np.zeros((2, n, L, H))
        for k in range(1, n):
            parts[0, k], parts[1, k] = split(f, rows[k - 1], rows[k])
        sm = _nanmean_heads(f["sink_mass"][:T][rows])
        en = _nanmean_heads(f["entropy"][:T][rows])
    cum = np.nancumsum(parts, axis=1).mean(axis=3)     # a NaN interval counts 0
    # drift and the JS flip rate: the stored values over the same view
    dsteps, dfw = drift_flip_want(path)
    assert list(dsteps) == [int(x) for x in steps], (dsteps, steps)
    drift = {k: np.stack([dfw[str(li)][k] for li in range(L)], axis=1).reshape(n, L)
             for k in ("drift_sink", "drift_content", "flip_js")}
    return {"steps": steps, "sink_mass": sm, "entropy": en, "cum_sink": cum[0],
            "cum_content": cum[1], "rows": T, "superseded": superseded,
            "segments": segs, "form": "paired" if paired else "aggregate", **drift}


def row_values(p, sink=0):
    """§1 from one head's raw rows [R, K] as sent (no file, no daemon): s,
    w, H, hb, Hc per row, float64 after renormalizing; a row with a NaN is
    rejected (NaN values)."""
    a = p.astype(np.float64)
    ok = np.isfinite(a).all(-1)
    a = np.where(ok[:, None], a, 1.0)
    a = a / a.sum(-1, keepdims=True)
    s = a[:, sink]
    c = np.delete(a, sink, axis=1)
    w = c.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        xlx = np.where(a > 0, a * np.log(a), 0.0)
        clc = np.where(c > 0, c * np.log(c), 0.0)
        H = -xlx.sum(-1)
        hb = -np.where(s > 0, s * np.log(s), 0) - np.where(w > 0, w * np.log(w), 0)
        Hc = np.where(w > 0, np.log(w) - clc.sum(-1) / w, 0.0)
    nan = np.full_like(s, np.nan)
    return {k: np.where(ok, v, nan) for k, v in
            (("s", s), ("w", w), ("H", H), ("hb", hb), ("Hc", Hc))}


def from_inputs(steps_data, paired):
    """What the dashboard must show, from the probabilities the senders sent
    (steps_data: [(step, [layer] of [H, R, K])] in view order): per-head
    means of §2 over the valid rows, the §3 split paired row by row or
    aggregate from the means, summed along the steps (a NaN interval counts
    0), heads averaged (sink mass and entropy over the heads that have
    rows). Independent of the daemon's kernels and of its file."""
    T = len(steps_data)
    L = len(steps_data[0][1])
    rows = [[[row_values(x[h]) for h in range(x.shape[0])] for x in lay]
            for _, lay in steps_data]
    H = len(rows[0][0])

    def mean(r, k):
        v = r[k][np.isfinite(r["s"])]
        return v.mean() if v.size else np.nan

    def head(r):
        m = {k: mean(r, k) for k in ("s", "w", "H", "hb")}
        valid = np.isfinite(r["s"])
        C = (r["w"] * r["Hc"])[valid].mean() if valid.any() else np.nan
        m["Hcw"] = C / m["w"] if m["w"] > 0 else (0.0 if valid.any() else np.nan)
        return m
    heads = [[[head(rows[t][lay][h]) for h in range(H)] for lay in range(L)] for t in range(T)]
    parts = np.zeros((2, T, L, H))
    for t in range(1, T):
        for lay in range(L):
            for h in range(H):
                if paired:
                    r0, r1 = rows[t - 1][lay][h], rows[t][lay][h]
                    ok = np.isfinite(r0["s"]) & np.isfinite(r1["s"])
                    if not ok.any():
                        parts[:, t, lay, h] = np.nan
                        continue
                    sink = ((r1["hb"] - r0["hb"]) - (r1["s"] - r0["s"]) * 0.5 *
                            (r0["Hc"] + r1["Hc"]))[ok].mean()
                    cont = (0.5 * (r0["w"] + r1["w"]) * (r1["Hc"] - r0["Hc"]))[ok].mean()
                else:
                    a, b = heads[t - 1][lay][h], heads[t][lay][h]
                    sink = (b["hb"] - a["hb"]) - (b["s"] - a["s"]) * 0.5 * (a["Hcw"] + b["Hcw"])
                    cont = 0.5 * (a["w"] + b["w"]) * (b["Hcw"] - a["Hcw"])
                parts[0, t, lay, h], parts[1, t, lay, h] = sink, cont
    cum = np.nancumsum(parts, axis=1).mean(axis=3)
    sm = np.array([[[heads[t][lay][h]["s"] for h in range(H)] for lay in range(L)]
                   for t in range(T)])
    en = np.array([[[heads[t][lay][h]["H"] for h in range(H)] for lay in range(L)]
                   for t in range(T)])
    return {"steps": np.array([st for st, _ in steps_data]), "sink_mass": _nanmean_heads(sm),
            "entropy": _nanmean_heads(en), "cum_sink": cum[0], "cum_content": cum[1]}


def assert_inputs(d, ref, what):
    """The dashboard's data d against from_inputs(): the steps exactly, the
    values within the precision budget of METRICS.md §6."""
    np.testing.assert_array_equal(d.steps, ref["steps"], err_msg=what + ": steps")
    for n in ("sink_mass", "entropy", "cum_sink", "cum_content"):
        np.testing.assert_allclose(getattr(d, n), ref[n], rtol=1e-6, atol=1e-9, equal_nan=True,
                                   err_msg="%s: %s from the inputs" % (what, n))


def assert_matches(d, ref, what):
    """The dashboard's data d equal the reference (to the JSON's 17 digits)."""
    np.testing.assert_array_equal(d.steps, ref["steps"], err_msg=what + ": steps")
    for n in ("sink_mass", "entropy", "cum_sink", "cum_content", "drift_sink", "drift_content",
              "flip_js"):
        got = getattr(d, n)
        assert got.shape == ref[n].shape, (what, n, got.shape, ref[n].shape)
        np.testing.assert_allclose(got, ref[n], rtol=1e-9, atol=1e-12, equal_nan=True,
                                   err_msg="%s: %s" % (what, n))
    assert d.rows == ref["rows"] and d.superseded == ref["superseded"], (
        what, d.rows, d.superseded, ref["rows"], ref["superseded"])
    segs = [[s["inc"], s["first_step"], s["last_step"], s["steps"]] for s in d.segments]
    assert segs == ref["segments"], (what, segs, ref["segments"])
    assert d.split_form == ref["form"], (what, d.split_form, ref["form"])


def probe(step, layer, extra_sink=0.0):
    """[HEADS, SH_ROWS, SH_KEYS] softmax rows, the same inputs every step (a
    fixed probe): the sink grows with the step, the content sharpens."""
    rng = np.random.default_rng(100 + layer)
    z = rng.normal(size=(HEADS, SH_ROWS, SH_KEYS)) * (1.0 + step / 400.0)
    z[:, :, 0] += 0.5 + step / 200.0 + extra_sink + np.arange(HEADS)[:, None] * 0.3
    z -= z.max(-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(-1, keepdims=True)
    return p.astype(np.float32)


def send_end(snd, run, inc):
    snd.send_frames([msgpack.packb({"v": 1, "type": "end", "run": run, "seq": snd.seq,
                                    "inc": inc})])


def shuffled_inputs(step, lay, incarnation):
    """The tensor the shuffled runs send for (step, layer) from A or B."""
    if incarnation == SH_INC_B:
        return probe(step, lay, extra_sink=0.8)
    x = probe(step, lay)
    if step == 100 and lay == 2:
        x[1] = np.nan
    return x


def load_dashboard_module():
    spec = importlib.util.spec_from_file_location("sinkwatch_dashboard", DASHBOARD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dashboard(*args, timeout=60):
    """Runs the dashboard with this interpreter; (rc, stdout, stderr)."""
    p = subprocess.run(DASH_CMD + [str(a) for a in args],
                       capture_output=True, text=True, timeout=timeout, env=dash_env())
    return p.returncode, p.stdout, p.stderr


def png_text(data):
    """The tEXt / iTXt entries of a PNG (bytes) as a dict."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    out, pos = {}, 8
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            out[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"iTXt":
            k, rest = body.split(b"\0", 1)
            comp, rest = rest[0], rest[2:]
            _lang, rest = rest.split(b"\0", 1)
            _tkey, text = rest.split(b"\0", 1)
            out[k.decode("latin-1")] = (zlib.decompress(text) if comp else text).decode("utf-8")
        elif kind == b"IEND":
            break
        pos += 12 + n
    return out


def load_png(path):
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    if img.dtype != np.float32 and img.dtype != np.float64:
        img = img.astype(np.float64) / 255.0
    return img


def check_picture(path, min_colours=LAYERS):
    """The PNG at path has SIZE and holds plots: returns the RGB image."""
    assert os.path.exists(path), "%s missing" % path
    img = load_png(path)
    assert img.shape[:2] == (SIZE[1], SIZE[0]), "size %s, expected %dx%d" % (
        img.shape[:2][::-1], SIZE[0], SIZE[1])
    rgb = img[:, :, :3].astype(np.float64)
    if img.shape[2] == 4:
        assert (img[:, :, 3] > 0.99).all(), "transparent pixels"
    drawn = (np.abs(rgb - 1.0) > 0.03).any(axis=2).mean()
    assert drawn > 0.02, "only %.2f%% of the pixels are not background" % (100 * drawn)
    # line colours: saturated pixels, binned coarsely, bins with a real share
    sat = rgb.max(axis=2) - rgb.min(axis=2)
    colourful = rgb[sat > 0.35]
    bins = {}
    for q in map(tuple, np.round(colourful * 4).astype(int)):
        bins[q] = bins.get(q, 0) + 1
    big = sorted((c for c in bins.values() if c >= 150), reverse=True)
    assert len(big) >= min_colours, "%d distinct line colours (need %d): %r" % (
        len(big), min_colours, sorted(bins.items(), key=lambda kv: -kv[1])[:8])
    return rgb


def differ(a, b):
    """Share of pixels that differ between two RGB images."""
    return (np.abs(a - b) > 0.03).any(axis=2).mean()


class Snapshots(threading.Thread):
    """Copies each new version of a PNG that is being replaced atomically."""

    def __init__(self, path, into):
        super().__init__(daemon=True)
        self.path, self.into = path, into
        self.shots = []     # (copied path, tEXt dict)
        self.stop_ = threading.Event()
        self.seen = None

    def run(self):
        while not self.stop_.is_set():
            self.grab()
            time.sleep(0.02)
        self.grab()

    def grab(self):
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self.seen:
            return
        with open(self.path, "rb") as fh:
            data = fh.read()
        self.seen = key
        copy = os.path.join(self.into, "follow-%03d.png" % len(self.shots))
        with open(copy, "wb") as fh:
            fh.write(data)
        self.shots.append((copy, png_text(data)))

    def stop(self):
        self.stop_.set()
        self.join(5)


def committed(path):
    """Committed steps in a run file being written (0 if not readable yet)."""
    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            return f["step"].shape[0], (f["ended"].shape[0] > 0 and f["ended"][-1] == 1)
    except (OSError, KeyError):
        return 0, False


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.03)
    raise AssertionError("timed out (%ss) waiting for %s" % (timeout, what))


def main():
    R = Results()
    tmp = tempfile.mkdtemp(prefix="sinkwatch-dashboard-")
    mod = {}
    live = {}

    def t_script():
        mod["m"] = load_dashboard_module()
        rc, out, err = dashboard("--help")
        assert rc == 0 and "--png" in out and "--follow" in out, (rc, out, err)
        assert out.startswith("usage: sinkwatch-dashboard "), out
        # the file alone, as a script (what a copy of it does)
        p = subprocess.run([sys.executable, DASHBOARD, "--help"], capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, MPLBACKEND="Agg"))
        assert p.returncode == 0 and "--follow" in p.stdout, (p.returncode, p.stderr)

    def t_errors():
        rc, out, err = dashboard(os.path.join(tmp, "nope.h5"), "--png",
                                 os.path.join(tmp, "x.png"), "--timeout", "0.5")
        assert rc == 2 and "no such file" in err, (rc, err)
        text = os.path.join(tmp, "text.h5")
        with open(text, "w") as fh:
            fh.write("this is not HDF5 at all\n" * 10)
        rc, out, err = dashboard(text, "--png", os.path.join(tmp, "x.png"), "--timeout", "1")
        assert rc == 2 and "not a sinkwatch run file" in err, (rc, err)
        other = os.path.join(tmp, "other.h5")
        with h5py.File(other, "w", libver="latest") as f:
            f.create_dataset("attention", data=np.zeros((2, 4, 8, 8), np.float32))
        # a timeout far above what a start takes on a loaded machine (with
        # --timeout 5 the refusal took over 4 s under CI's load): refusing
        # must not wait for it
        t0 = time.time()
        rc, out, err = dashboard(other, "--png", os.path.join(tmp, "x.png"), "--timeout", "60",
                                 timeout=120)
        assert rc == 2 and "not a sinkwatch run file" in err and "/step" in err, (rc, err)
        assert time.time() - t0 < 30, "took the whole timeout to refuse it"
        rc, out, err = dashboard(other, "--follow")
        assert rc == 2 and "--follow needs --png" in err, (rc, err)
        assert not os.path.exists(os.path.join(tmp, "x.png"))

    def t_daemon():
        live["daemon"] = Daemon(tmp=tmp).start()

    def t_few_steps():
        # 0 committed steps (no report then) and 1, with a layer all NaN: a
        # picture with a note, no error
        for t in (0, 1):
            if t == 0:
                path = os.path.join(tmp, "few0.h5")
                with h5py.File(path, "w", libver="latest") as f:
                    f.attrs.update({"run": "few", "model": "m", "layers": LAYERS,
                                    "heads": HEADS, "split_form": "paired"})
                    f.create_dataset("step", shape=(0,), dtype=np.int64, maxshape=(None,))
                    f.create_dataset("ended", shape=(0,), dtype=np.int8, maxshape=(None,))
                    for n in ("sink_mass", "entropy", "dH_sink", "dH_content"):
                        f.create_dataset(n, shape=(0, LAYERS, HEADS), dtype=np.float64,
                                         maxshape=(None, LAYERS, HEADS))
            else:
                d = live["daemon"]
                snd = Sender(d.listen, "few1", LAYERS, HEADS, fixed=False)
                for lay in range(LAYERS):
                    x = probe(0, lay)
                    if lay == 1:
                        x[:] = np.nan           # every row rejected: the layer is NaN
                    snd.snapshot(7, lay, x, inc=5)
                send_end(snd, "few1", 5)
                path = d.wait_ended("few1")
                snd.close()
                m = mod.get("m") or load_dashboard_module()
                got = m.load_path(path)
                assert got.T == 1 and int(got.steps[0]) == 7, got.steps
                assert np.isnan(got.sink_mass[0, 1]) and np.isfinite(got.sink_mass[0, 0])
                assert (got.cum_sink == 0).all() and (got.cum_content == 0).all()
                assert_matches(got, reference(path), "1 step")
            out = os.path.join(tmp, "few%d.png" % t)
            rc, so, err = dashboard(path, "--png", out, "--size", "%dx%d" % SIZE)
            assert rc == 0, (rc, so, err)
            img = load_png(out)
            assert img.shape[:2] == (SIZE[1], SIZE[0]), img.shape
            with open(out, "rb") as fh:
                meta = png_text(fh.read())
            assert meta.get("sinkwatch.steps") == str(t), meta
            assert not os.path.exists(out + ".tmp")

    def t_live():
        d = live["daemon"]
        path = live["path"] = d.run_file(RUN)
        follow_png = os.path.join(tmp, "follow.png")
        sim = subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", RUN,
                                # 300 ms a step: on 2 cores at load 17 (CI beside other
                                # builds) a 120 ms pace ended before --follow rendered twice
                                "--steps", str(STEPS), "--every-ms", "300", "--layers", str(LAYERS),
                                "--heads", str(HEADS), "--blocking"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # started before the file exists: it has to wait for it
        follow = subprocess.Popen(DASH_CMD + [path, "--png", follow_png,
                                   "--follow", "--interval", "0.2", "--timeout", "40",
                                   "--size", "%dx%d" % SIZE],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dash_env())
        snaps = Snapshots(follow_png, tmp)
        snaps.start()
        try:
            # a one-shot render from the file while it is written
            wait_for(lambda: committed(path)[0] >= 3, 15, "3 committed steps")
            early = os.path.join(tmp, "early.png")
            rc, out, err = dashboard(path, "--png", early, "--size", "%dx%d" % SIZE)
            assert rc == 0, (rc, out, err)
            with open(early, "rb") as fh:
                live["early_meta"] = png_text(fh.read())
            # the data loader on the file while it is written
            m = mod.get("m") or load_dashboard_module()
            part = m.load_path(path)
            assert part.T >= 3 and part.sink_mass.shape == (part.T, LAYERS), part.sink_mass.shape
            live["partial"] = part
            sout, serr = sim.communicate(timeout=60)
            assert sim.returncode == 0, "sim failed: %s %s" % (sout, serr)
            wait_for(lambda: committed(path)[1], 20, "the run to be marked ended")
            frc = follow.wait(timeout=20)
            fout, ferr = follow.communicate()
            assert frc == 0, "--follow exited %s: %s %s" % (frc, fout, ferr)
            assert "run ended" in fout, fout
        finally:
            snaps.stop()
            for p in (sim, follow):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        live["snaps"] = snaps.shots
        final = live["final"] = os.path.join(tmp, "final.png")
        rc, out, err = dashboard(path, "--png", final, "--size", "%dx%d" % SIZE)
        assert rc == 0, (rc, out, err)
        assert "%d steps, run ended" % STEPS in out, out

    def t_pictures_while_written():
        shots = live["snaps"]
        follow_running = [(p, m) for p, m in shots if m.get("sinkwatch.ended") == "0"
                          and int(m.get("sinkwatch.steps", 0)) >= 2]
        steps = [int(m["sinkwatch.steps"]) for _, m in follow_running]
        assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
        early, em = os.path.join(tmp, "early.png"), live["early_meta"]
        assert int(em["sinkwatch.steps"]) >= 3, em
        check_picture(early)
        running = list(follow_running)
        if em.get("sinkwatch.ended") == "0":
            running.append((early, em))
        running.sort(key=lambda pm: int(pm[1]["sinkwatch.steps"]))
        print("     --follow: %d renders, %d of the running run (steps %s); one-shot: %s steps, %s"
              % (len(shots), len(follow_running), steps, em["sinkwatch.steps"],
                 "running" if em["sinkwatch.ended"] == "0" else "already ended"))
        assert len(running) >= 2, "only %d renders of the running run: %r" % (
            len(running), [m for _, m in shots] + [em])
        first, later = check_picture(running[0][0]), check_picture(running[-1][0])
        if running[0][1]["sinkwatch.steps"] != running[-1][1]["sinkwatch.steps"]:
            assert differ(first, later) > 0.003, "later render looks the same"
        for p, _ in running[1:-1]:
            check_picture(p)
        last_path, last_meta = shots[-1]
        assert last_meta.get("sinkwatch.ended") == "1", last_meta
        assert last_meta.get("sinkwatch.steps") == str(STEPS), last_meta
        check_picture(last_path)
        live["first_rgb"] = first

    def t_picture_after_end():
        final = check_picture(live["final"])
        with open(live["final"], "rb") as fh:
            meta = png_text(fh.read())
        assert meta["sinkwatch.steps"] == str(STEPS) and meta["sinkwatch.ended"] == "1", meta
        assert differ(live["first_rgb"], final) > 0.003, "the final picture equals the first"
        assert not os.path.exists(live["final"] + ".tmp")

    def t_loader():
        m = mod.get("m") or load_dashboard_module()
        d = m.load_path(live["path"])
        ref = reference(live["path"])
        assert d.T == STEPS and d.ended and d.meta["run"] == RUN and d.layers == LAYERS, (
            d.T, d.ended)
        assert_matches(d, ref, "sim run")
        assert d.superseded == 0 and len(d.segments) == 1, (d.superseded, d.segments)
        assert np.isfinite(d.cum_sink).all() and np.isfinite(d.cum_content).all()
        print("     drift content finite %d, flip JS finite %d of %d" % (
            np.isfinite(d.drift_content).sum(), np.isfinite(d.flip_js).sum(), d.flip_js.size))
        # the two parts add up to the entropy's change since the first step
        with h5py.File(live["path"], "r") as f:
            ent = f["entropy"][:]
        dh = (ent - ent[:1]).mean(axis=2)
        np.testing.assert_allclose(d.cum_sink + d.cum_content, dh, rtol=0, atol=1e-9)
        # what was read while the run was written is what the file kept
        p = live["partial"]
        np.testing.assert_array_equal(p.steps, d.steps[:p.T])
        np.testing.assert_allclose(p.cum_sink, d.cum_sink[:p.T], rtol=0, atol=0)
        np.testing.assert_allclose(p.entropy, d.entropy[:p.T], rtol=0, atol=0)

    def shuffled_run(run, fixed):
        """Incarnation A sends SH_STEPS shuffled (step 100 with a head all
        NaN); once they are stored, B resumes from SH_RESUME with other data
        and sends SH_B shuffled, then ends the run. Returns the file."""
        d = live["daemon"]
        rng = np.random.default_rng(11 if fixed else 12)
        a = Sender(d.listen, run, LAYERS, HEADS, fixed=fixed)
        for st in rng.permutation(SH_STEPS):
            for lay in range(LAYERS):
                a.snapshot(int(st), lay, shuffled_inputs(int(st), lay, SH_INC_A), inc=SH_INC_A)
        path = d.run_file(run)
        wait_for(lambda: committed(path)[0] >= len(SH_STEPS), 20,
                 "A's %d rows of %s" % (len(SH_STEPS), run))
        b = Sender(d.listen, run, LAYERS, HEADS, fixed=fixed)
        for st in rng.permutation(SH_B):
            for lay in range(LAYERS):
                b.snapshot(int(st), lay, shuffled_inputs(int(st), lay, SH_INC_B),
                           inc=SH_INC_B, resume=SH_RESUME)
        send_end(b, run, SH_INC_B)
        path = d.wait_ended(run)
        a.close()
        b.close()
        return path

    def t_shuffled(fixed):
        run = "shuffled-%s" % ("paired" if fixed else "aggregate")
        path = shuffled_run(run, fixed)
        ref = reference(path)
        # what the view must be, by construction
        want_steps = [st for st in SH_STEPS if st < SH_RESUME] + SH_B
        assert list(ref["steps"]) == want_steps, ref["steps"]
        assert ref["rows"] == len(SH_STEPS) + len(SH_B), ref["rows"]
        assert ref["superseded"] == ref["rows"] - len(want_steps), ref["superseded"]
        assert [s[0] for s in ref["segments"]] == [SH_INC_A, SH_INC_B], ref["segments"]
        assert ref["form"] == ("paired" if fixed else "aggregate"), ref["form"]
        m = mod.get("m") or load_dashboard_module()
        d = m.load_path(path)
        assert_matches(d, ref, run)
        # the flip rate was compared, not NaN alone (drift is NaN wherever a
        # step arrived before its view predecessor: LAYOUT.md, prev_row)
        assert np.isfinite(d.flip_js).sum() >= len(want_steps) * LAYERS // 2, d.flip_js
        if not fixed:
            assert not np.isfinite(d.drift_content).any(), d.drift_content
        # and from what was sent, without the daemon's numbers
        sent = [(st, [shuffled_inputs(st, lay, SH_INC_A if st < SH_RESUME else SH_INC_B)
                      for lay in range(LAYERS)]) for st in want_steps]
        assert_inputs(d, from_inputs(sent, paired=fixed), run)
        # the rows' live dH_* in arrival order are not the run's: the same
        # sums taken from them would be wrong (the reason for the view)
        with h5py.File(path, "r") as f:
            naive = np.nancumsum(f["dH_sink"][:], axis=0).mean(axis=2)[-1]
        assert np.abs(naive - d.cum_sink[-1]).max() > 1e-6, (naive, d.cum_sink[-1])
        # the notes say so
        notes = m.notes_of(d)
        want = "%d of %d rows superseded" % (ref["superseded"], ref["rows"])
        assert want in notes, notes
        assert "2 segments: steps 0–250 (incarnation %d), steps 300–550 (incarnation %d)" % (
            SH_INC_A, SH_INC_B) in notes, notes
        out = os.path.join(tmp, run + ".png")
        rc, so, err = dashboard(path, "--png", out, "--size", "%dx%d" % SIZE)
        assert rc == 0, (rc, so, err)
        check_picture(out)
        with open(out, "rb") as fh:
            meta = png_text(fh.read())
        assert meta["sinkwatch.steps"] == str(len(want_steps)), meta
        assert meta["sinkwatch.rows"] == str(ref["rows"]), meta
        assert meta["sinkwatch.superseded"] == str(ref["superseded"]), meta
        assert meta["sinkwatch.segments"] == "2" and meta["sinkwatch.ended"] == "1", meta
        assert meta["sinkwatch.last_step"] == str(SH_B[-1]), meta

    def t_no_tool():
        # before it waits for the file (there is none): the tool is looked for first
        path = os.path.join(tmp, "not-yet.h5")
        out = os.path.join(tmp, "notool.png")
        env = dash_env(SINKWATCH=os.path.join(tmp, "no-sinkwatch"))
        p = subprocess.run(DASH_CMD + [path, "--png", out, "--timeout", "5"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "SINKWATCH=" in p.stderr and "sinkwatch tool" in p.stderr, (
            p.returncode, p.stderr)
        # a copy outside the tree, no $SINKWATCH, nothing on PATH
        lone = os.path.join(tmp, "lone")
        os.makedirs(lone, exist_ok=True)
        shutil.copy(DASHBOARD, lone)
        env = {k: v for k, v in os.environ.items() if k != "SINKWATCH"}
        env.update(MPLBACKEND="Agg", PATH=lone)
        p = subprocess.run([sys.executable, os.path.join(lone, os.path.basename(DASHBOARD)),
                            path, "--png", out, "--timeout", "5"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "cannot find the sinkwatch tool" in p.stderr, (
            p.returncode, p.stderr)
        assert not os.path.exists(out)

    try:
        R.check("dashboard script", t_script)
        R.check("error exits", t_errors)
        R.check("no sinkwatch tool", t_no_tool)
        R.check("daemon", t_daemon)
        if "daemon" not in live:
            R.failed += 1
            print("FAIL (no daemon: the other checks not run)")
            return R.finish()
        R.check("0 and 1 steps, NaN", t_few_steps)
        R.check("live run: renders while written", t_live)
        if "snaps" in live:
            R.check("pictures while written", t_pictures_while_written)
            R.check("picture after the run ended", t_picture_after_end)
            R.check("data vs numpy reference", t_loader)
        else:
            R.failed += 3
            print("FAIL (the live run failed: its 3 picture and loader checks not run)")
        R.check("shuffled + resumed, paired", lambda: t_shuffled(True))
        R.check("shuffled + resumed, aggregate", lambda: t_shuffled(False))
    finally:
        d = live.get("daemon")
        if d is not None:
            try:
                d.stop()
            except AssertionError as e:
                R.failed += 1
                print("FAIL daemon stop: %s" % e)
        if R.failed:
            print("files kept in %s" % tmp)
            if d is not None:
                print("daemon log:\n%s" % d.read_log()[-3000:])
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return R.finish()


if __name__ == "__main__":
    sys.exit(main())
