#!/usr/bin/python3
"""Tests of contrib/dashboard/sinkwatch_dashboard.py against a real daemon.

A real sinkwatchd (tests/swharness.py) is fed by `sinkwatch sim` while the
dashboard renders PNGs of the run file being written (--png, and --png
--follow started before the file exists), then once more after the run
ended. Each picture is checked to hold the plots (size, share of drawn
pixels, several line colours, later pictures differ from earlier ones, the
tEXt entries saying what it shows); the data loading is checked against
plain h5py reads of the finished file; and the error exits (status 2).

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd SW_SRCDIR=. /usr/bin/python3 tests/dashboard.py
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
import zlib

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, SINKWATCHD, Daemon, Results  # noqa: E402

if not SINKWATCHD or not SINKWATCH:
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(SRCDIR, "contrib", "dashboard", "sinkwatch_dashboard.py")
SIZE = (960, 640)           # --size for every render here
LAYERS, HEADS, STEPS = 3, 4, 60
RUN = "dash"


def load_dashboard_module():
    spec = importlib.util.spec_from_file_location("sinkwatch_dashboard", DASHBOARD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dashboard(*args, timeout=60):
    """Runs the dashboard with this interpreter; (rc, stdout, stderr)."""
    env = dict(os.environ, MPLBACKEND="Agg")
    p = subprocess.run([sys.executable, DASHBOARD] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=timeout, env=env)
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
        with open(DASHBOARD, "rb") as fh:
            first = fh.readline()
        assert first.strip() == b"#!/usr/bin/python3", first
        assert os.access(DASHBOARD, os.X_OK), "%s not executable" % DASHBOARD
        mod["m"] = load_dashboard_module()
        rc, out, err = dashboard("--help")
        assert rc == 0 and "--png" in out and "--follow" in out, (rc, out, err)

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
        t0 = time.time()
        rc, out, err = dashboard(other, "--png", os.path.join(tmp, "x.png"), "--timeout", "5")
        assert rc == 2 and "not a sinkwatch run file" in err and "/step" in err, (rc, err)
        assert time.time() - t0 < 4, "took the whole timeout to refuse it"
        rc, out, err = dashboard(other, "--follow")
        assert rc == 2 and "--follow needs --png" in err, (rc, err)
        assert not os.path.exists(os.path.join(tmp, "x.png"))

    def t_few_steps():
        # 0 and 1 committed steps, NaN values: a picture with a note, no error
        for t in (0, 1):
            path = os.path.join(tmp, "few%d.h5" % t)
            with h5py.File(path, "w", libver="latest") as f:
                f.attrs.update({"run": "few", "model": "m", "layers": LAYERS, "heads": HEADS,
                                "split_form": "paired"})
                f.create_dataset("step", data=np.arange(t, dtype=np.int64), maxshape=(None,))
                f.create_dataset("ended", shape=(0,), dtype=np.int8, maxshape=(None,))
                for n in ("sink_mass", "entropy", "dH_sink", "dH_content"):
                    x = np.full((t, LAYERS, HEADS), 0.3)
                    if n.startswith("dH"):
                        x[:] = np.nan
                    x[:, 1, 2] = np.nan
                    f.create_dataset(n, data=x, maxshape=(None, LAYERS, HEADS))
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
        d = live["daemon"] = Daemon(tmp=tmp).start()
        path = live["path"] = d.run_file(RUN)
        follow_png = os.path.join(tmp, "follow.png")
        sim = subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", RUN,
                                "--steps", str(STEPS), "--every-ms", "50", "--layers", str(LAYERS),
                                "--heads", str(HEADS), "--blocking"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # started before the file exists: it has to wait for it
        follow = subprocess.Popen([sys.executable, DASHBOARD, path, "--png", follow_png,
                                   "--follow", "--interval", "0.2", "--timeout", "40",
                                   "--size", "%dx%d" % SIZE],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, MPLBACKEND="Agg"))
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
        with h5py.File(live["path"], "r", libver="latest", swmr=True) as f:
            T = f["step"].shape[0]
            assert d.T == T == STEPS, (d.T, T)
            assert d.ended and f["ended"][-1] == 1
            assert (d.steps == f["step"][:]).all()
            assert d.meta["run"] == RUN and d.layers == LAYERS
            raw = {n: f[n][:T] for n in ("sink_mass", "entropy", "dH_sink", "dH_content")}
        for n in ("sink_mass", "entropy"):
            np.testing.assert_allclose(getattr(d, n), np.nanmean(raw[n], axis=2),
                                       rtol=0, atol=0, equal_nan=True, err_msg=n)
        assert np.isnan(raw["dH_sink"][0]).all(), "dH_sink of the first step is not NaN"
        for attr, n in (("cum_sink", "dH_sink"), ("cum_content", "dH_content")):
            ref = np.nancumsum(raw[n], axis=0).mean(axis=2)
            np.testing.assert_allclose(getattr(d, attr), ref, rtol=1e-12, atol=1e-15,
                                       err_msg=attr)
            assert np.isfinite(getattr(d, attr)).all(), attr
        # the two parts add up to the entropy's change since the first step
        dh = (raw["entropy"] - raw["entropy"][:1]).mean(axis=2)
        np.testing.assert_allclose(d.cum_sink + d.cum_content, dh, rtol=0, atol=1e-9)
        # what was read while the run was written is what the file kept
        p = live["partial"]
        np.testing.assert_array_equal(p.steps, d.steps[:p.T])
        np.testing.assert_allclose(p.cum_sink, d.cum_sink[:p.T], rtol=0, atol=0)
        np.testing.assert_allclose(p.entropy, d.entropy[:p.T], rtol=0, atol=0)

    try:
        R.check("dashboard script", t_script)
        R.check("error exits", t_errors)
        R.check("0 and 1 steps, NaN", t_few_steps)
        R.check("live run: renders while written", t_live)
        if "snaps" in live:
            R.check("pictures while written", t_pictures_while_written)
            R.check("picture after the run ended", t_picture_after_end)
            R.check("loader vs h5py", t_loader)
        else:
            R.failed += 3
            print("FAIL (the live run failed: its 3 picture and loader checks not run)")
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
