"""Live plots of a sinkwatch run file, tailed with SWMR while sinkwatchd writes it.

    sinkwatch-dashboard RUN.h5 [--png OUT.png [--follow]] [--interval S]
                        [--timeout S] [--once] [--size WxH] [--quiet]

(also python3 -m sinkwatch.dashboard). sinkwatch-dashboard is the package's
console entry point when pip installs it, and the script `make install` puts
in bin/ (contrib/sinkwatch-dashboard.in) otherwise. The module needs numpy,
h5py and matplotlib, and nothing else of the package: a copy of this file
runs on its own.

Six panels, one line per layer (mean over the layer's heads), x = training
step: sink mass, entropy, the cumulative sink and content parts of the
entropy change (running sums of the interval parts of METRICS.md §3 over
consecutive steps, an interval without a value counting as 0; the two add up
to the entropy's change since the first step), the drift from the previous
stored step (content solid, sink dashed; a fixed probe only) and the JS flip
rate between keeping and dropping the sink (METRICS.md §5).

Every number plotted comes from `sinkwatch report RUN.h5 --format json
--series`: the run is its view (storage/LAYOUT.md, "Rows, incarnations and
supersession"), the winning row of each stored step in step order, and the
split is computed over it in C, whatever order the rows arrived in. The
dashboard computes none of it. The tool is $SINKWATCH, else the `sinkwatch`
next to the dashboard (bin/ when installed, the build tree's top directory),
else the first on PATH; exit status 2 if there is none. The subtitle says
how many stored rows were superseded (older incarnations' versions of a
step, or steps after a newer incarnation's resume) and, when the view has
more than one, its segments (runs of consecutive steps of one incarnation).

Without --png it opens a matplotlib window and redraws it as rows are
committed, every --interval seconds (default 1), until the window is closed.
With --png OUT it renders the current state to OUT (headless, Agg) and exits;
with --follow it goes on re-rendering OUT (atomically: OUT.tmp, then rename)
whenever rows are committed, until the run ends or --timeout runs out.

The file may not exist yet: the dashboard waits for it up to --timeout seconds
(default 30). Exit status 0, or 2 with a message for a file still missing
after the timeout, one that is not a sinkwatch run file, a report that
failed, no sinkwatch tool, or bad arguments.

Each PNG carries tEXt entries "sinkwatch.steps" (view steps),
"sinkwatch.last_step", "sinkwatch.rows" (rows stored), "sinkwatch.superseded",
"sinkwatch.segments" and "sinkwatch.ended" saying what it shows.

Watching follows storage/runfile.h: the file is held open for SWMR reading
(h5py) only to see /step (the commit marker), the resume records and /ended
grow; when they change, the report is run again.
"""
import argparse
import os
import sys
import time

import numpy as np

PROG = "sinkwatch-dashboard"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
REQUIRED_ATTRS = ("run", "layers", "heads")
# per-head datasets checked for the run's shape, each [T, layers, heads]
PLOTTED = ("sink_mass", "entropy")
REQUIRED_DATASETS = ("step", "ended") + PLOTTED
DEFAULT_FILE_TIMEOUT = 30.0
MAX_LEGEND_LAYERS = 12


class NotARunFile(Exception):
    """The path holds something other than a sinkwatch run file."""


class Fatal(Exception):
    """An error the command line reports with exit status 2."""


def _attr(f, name, default=None):
    v = f.attrs.get(name, default)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    elif isinstance(v, np.generic):
        v = v.item()
    return v


def check_run_file(f):
    """Raises NotARunFile unless the open h5py file looks like a run file."""
    missing_ds = [n for n in REQUIRED_DATASETS if n not in f]
    missing_at = [n for n in REQUIRED_ATTRS if n not in f.attrs]
    if missing_ds or missing_at:
        what = []
        if missing_ds:
            what.append("dataset%s %s" % ("s" if len(missing_ds) > 1 else "",
                                          ", ".join("/" + n for n in missing_ds)))
        if missing_at:
            what.append("attribute%s %s" % ("s" if len(missing_at) > 1 else "",
                                            ", ".join(missing_at)))
        raise NotARunFile("no %s" % " and no ".join(what))
    layers, heads = int(_attr(f, "layers")), int(_attr(f, "heads"))
    for n in PLOTTED:
        ds = f[n]
        if ds.ndim != 3 or tuple(ds.shape[1:]) != (layers, heads):
            raise NotARunFile("/%s has shape %s, not [T, %d, %d]"
                              % (n, ds.shape, layers, heads))
    if f["step"].ndim != 1:
        raise NotARunFile("/step has shape %s, not [T]" % (f["step"].shape,))


def read_meta(f):
    """The run's attributes as plain Python values."""
    return {k: _attr(f, k) for k in f.attrs.keys()}


def _looks_like_hdf5(path):
    """False when the file is long enough to hold a superblock and has none
    (at 0 or at a user block offset 512, 1024, ...); None if too short yet."""
    try:
        size = os.path.getsize(path)
        if size < len(HDF5_SIGNATURE):
            return None
        with open(path, "rb") as fh:
            off = 0
            while off + len(HDF5_SIGNATURE) <= size:
                fh.seek(off)
                if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    return True
                off = 512 if off == 0 else off * 2
    except OSError:
        return None
    return False


def open_run(path, timeout=DEFAULT_FILE_TIMEOUT, poll=0.1):
    """Opens path for SWMR reading once it exists and is a run file, waiting
    up to timeout seconds. Returns the h5py.File; raises Fatal."""
    import h5py

    deadline = time.monotonic() + max(0.0, timeout)
    last_err, not_run, rechecked = None, None, False
    while True:
        if os.path.exists(path):
            if os.path.isdir(path):
                raise Fatal("%s: is a directory, not a sinkwatch run file" % path)
            if _looks_like_hdf5(path) is False:
                raise Fatal("%s: not a sinkwatch run file (not an HDF5 file)" % path)
            try:
                f = h5py.File(path, "r", libver="latest", swmr=True)
            except OSError as e:   # still being created, or not HDF5 after all
                last_err = e
            else:
                try:
                    check_run_file(f)
                    return f
                except NotARunFile as e:
                    f.close()
                    # one more look a moment later, should a writer be midway
                    if rechecked:
                        raise Fatal("%s: not a sinkwatch run file (%s)" % (path, e))
                    not_run, rechecked = e, True
        if time.monotonic() >= deadline:
            if not os.path.exists(path):
                raise Fatal("%s: no such file (waited %gs; see --timeout)" % (path, timeout))
            if not_run is not None:
                raise Fatal("%s: not a sinkwatch run file (%s)" % (path, not_run))
            raise Fatal("%s: cannot open it as a SWMR HDF5 file after %gs: %s"
                        % (path, timeout, last_err))
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())) or 0.01)


def _refresh_to(ds, t, wait=0.1):
    """Refreshes ds; while it is shorter than t (a writer's flush has not
    reached its header yet) refreshes again for up to `wait` seconds.
    Returns its extent along axis 0."""
    ds.refresh()
    deadline = time.monotonic() + wait
    while ds.shape[0] < t and time.monotonic() < deadline:
        time.sleep(0.005)
        ds.refresh()
    return ds.shape[0]


# ---- the numbers: `sinkwatch report --format json --series` --------------------

def find_sinkwatch():
    """The sinkwatch tool that computes what the dashboard plots: $SINKWATCH,
    else the one next to the command run (bin/sinkwatch beside
    bin/sinkwatch-dashboard) or to this file, or in the source tree (three
    levels above contrib/python/sinkwatch/), else the first on PATH. Raises
    Fatal if none."""
    env = os.environ.get("SINKWATCH")
    if env:
        if os.path.isfile(env) and os.access(env, os.X_OK):
            return env
        raise Fatal("SINKWATCH=%s is not an executable file (the sinkwatch tool, "
                    "which computes what the dashboard plots)" % env)
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = []
    if sys.argv and sys.argv[0]:
        dirs.append(os.path.dirname(os.path.abspath(sys.argv[0])))
    dirs += [here, os.path.dirname(os.path.dirname(os.path.dirname(here)))]
    dirs = list(dict.fromkeys(dirs))
    for d in dirs:
        cand = os.path.join(d, "sinkwatch")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    import shutil

    cand = shutil.which("sinkwatch")
    if cand:
        return cand
    raise Fatal("cannot find the sinkwatch tool (it computes what the dashboard plots): "
                "set SINKWATCH=/path/to/sinkwatch, or put it on PATH (looked in %s)"
                % ", ".join(dirs))


def _nums(v):
    """A JSON list of numbers with null for NaN, as float64."""
    return np.array([np.nan if x is None else x for x in v], dtype=np.float64)


def run_report(path, exe=None, timeout=120):
    """`sinkwatch report PATH --format json --series`, parsed. Raises Fatal."""
    import json
    import subprocess

    exe = exe or find_sinkwatch()
    try:
        p = subprocess.run([exe, "report", path, "--format", "json", "--series"],
                           capture_output=True, text=True, timeout=timeout)
    except OSError as e:
        raise Fatal("cannot run %s: %s" % (exe, e))
    except subprocess.TimeoutExpired:
        raise Fatal("%s report %s: no answer in %ds" % (exe, path, timeout))
    if p.returncode != 0:
        msg = p.stderr.strip() or "exit status %d" % p.returncode
        raise ReportFailed(msg)
    try:
        rep = json.loads(p.stdout)
        rep["series"]["step"], rep["series"]["layers"]
    except (ValueError, KeyError, TypeError) as e:
        raise Fatal("%s report %s --series: unexpected output (%s); is it an older "
                    "sinkwatch?" % (exe, path, e))
    return rep


class ReportFailed(Fatal):
    """sinkwatch report exited with an error (its message)."""


class RunData:
    """What the dashboard shows of a run: its view (the winning row of each
    stored step, in step order, storage/LAYOUT.md), per layer, as
    `sinkwatch report --series` computed it."""

    def __init__(self, meta, steps, sink_mass, entropy, cum_sink, cum_content,
                 ended, last_time=None, lost=None, incomplete=None, rows=None,
                 superseded=0, segments=(), watch=None, split_form=None, drift_sink=None,
                 drift_content=None, flip_js=None):
        self.meta = meta
        self.steps = steps              # int64 [T], the view's training steps
        self.sink_mass = sink_mass      # [T, L], mean over heads
        self.entropy = entropy          # [T, L], mean over heads
        self.cum_sink = cum_sink        # [T, L], running sum of the sink parts
        self.cum_content = cum_content  # [T, L], same for the content parts
        self.ended = ended
        self.last_time = last_time
        self.lost = lost
        self.incomplete = incomplete
        self.rows = int(steps.shape[0]) if rows is None else rows   # rows stored
        self.superseded = superseded    # rows not in the view
        self.segments = list(segments)  # [{"inc", "first_step", "last_step", "steps"}]
        self.watch = watch              # (rows, resume records, ended) when read
        self.split_form = split_form    # the report's: paired or aggregate
        nan = np.full(sink_mass.shape, np.nan)
        # [T, L], NaN where there is none (the first step, a free probe)
        self.drift_sink = nan if drift_sink is None else drift_sink
        self.drift_content = nan if drift_content is None else drift_content
        self.flip_js = nan if flip_js is None else flip_js      # [T, L], the layer's

    @property
    def T(self):
        return int(self.steps.shape[0])

    @property
    def layers(self):
        return int(self.sink_mass.shape[1])

    def key(self):
        """Changes whenever there is something new to draw."""
        return (self.rows, self.T, self.superseded, len(self.segments), self.ended)


def from_report(meta, rep, ended, watch=None, last_time=None):
    """RunData from a parsed `report --series` (one line per layer; the
    model's series is not plotted)."""
    layers = int(meta["layers"])
    ser = rep["series"]
    steps = np.asarray(ser["step"], dtype=np.int64)
    by_layer = {la["layer"]: la for la in ser["layers"]}
    cols = {}
    for name in ("sink_mass", "entropy", "cum_sink", "cum_content", "drift_sink",
                 "drift_content", "flip_js"):
        a = np.full((steps.shape[0], layers), np.nan)
        for layer in range(layers):
            # drift and flip: a sinkwatch older than the dashboard has none (NaN)
            if layer in by_layer and name in by_layer[layer]:
                a[:, layer] = _nums(by_layer[layer][name])
        cols[name] = a
    return RunData(meta, steps, cols["sink_mass"], cols["entropy"], cols["cum_sink"],
                   cols["cum_content"], ended, last_time, rep.get("lost"),
                   rep.get("incomplete"), rep.get("rows_stored"),
                   int(rep.get("rows_superseded") or 0), rep.get("segments") or (), watch,
                   rep.get("split_form"), cols["drift_sink"], cols["drift_content"],
                   cols["flip_js"])


def watch_state(f):
    """What the open file holds now, cheaply (refreshing /ended, /step and the
    resume records): (ended, rows committed, resume records, last row's time)."""
    ended_ds = f["ended"]
    ended_ds.refresh()
    ne = ended_ds.shape[0]
    # /ended before /step: a run seen ended has all its rows committed
    ended = bool(ne > 0 and int(ended_ds[ne - 1]) == 1)
    step_ds = f["step"]
    step_ds.refresh()
    t = step_ds.shape[0]
    nres = 0
    if "resume_step" in f:
        ds = f["resume_step"]
        ds.refresh()
        nres = ds.shape[0]
    last_time = None
    if "time" in f and f["time"].ndim == 1 and t > 0:
        ds = f["time"]
        if _refresh_to(ds, t, wait=0.02) >= t:
            last_time = float(ds[t - 1])
    return ended, t, nres, last_time


def load_run(f, path=None, exe=None):
    """The run as the report computes it: watches the open file's extent
    (h5py, SWMR) and, when a row is committed, runs `sinkwatch report
    --series` on it. Returns a RunData (no report with 0 rows)."""
    path = path or f.filename
    meta = read_meta(f)
    ended, t, nres, last_time = watch_state(f)
    layers = int(meta["layers"])
    e = np.zeros((0, layers))
    if t == 0:
        return RunData(meta, np.zeros(0, np.int64), e, e, e, e, ended, None,
                       rows=0, watch=(0, nres, ended))
    try:
        rep = run_report(path, exe)
    except ReportFailed as err:
        # every row superseded: a resume record seen before its incarnation's
        # first row is committed (an empty view for a moment)
        if "has 0 stored step(s)" not in str(err):
            raise
        return RunData(meta, np.zeros(0, np.int64), e, e, e, e, ended, last_time,
                       rows=t, superseded=t, watch=(t, nres, ended))
    # the rows the report saw (it may have seen more than t)
    rows = max(t, int(rep.get("rows_stored") or 0))
    return from_report(meta, rep, ended, watch=(rows, nres, ended), last_time=last_time)


def load_path(path, exe=None):
    """load_run on a path (opened and closed here)."""
    import h5py

    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        check_run_file(f)
        return load_run(f, path, exe)


# ---- drawing -----------------------------------------------------------------

# (the RunData attributes drawn, each a line per layer; title; y label)
PANELS = (
    (("sink_mass",), "sink mass", "mean attention on the sink key"),
    (("entropy",), "attention entropy", "nats"),
    (("cum_sink",), "cumulative sink part of the entropy change", "Σ sink parts (nats)"),
    (("cum_content",), "cumulative content part of the entropy change",
     "Σ content parts (nats)"),
    (("drift_content", "drift_sink"), "drift from the previous step: content —, sink - -",
     "RMS log-ratio"),
    (("flip_js",), "JS flip rate, sink kept against dropped", "share of head comparisons"),
)
LINESTYLE = {"drift_sink": "--"}


def layer_colors(n):
    """Distinct colours for up to 10 layers, a sequential map beyond."""
    from matplotlib import cm

    if n <= 10:
        cmap = cm.get_cmap("tab10")
        return [cmap(i) for i in range(n)], None
    cmap = cm.get_cmap("viridis")
    return [cmap(i / max(1, n - 1)) for i in range(n)], cmap


def title_of(d):
    m = d.meta
    state = "run ended" if d.ended else "running"
    return "sinkwatch run %s  ·  model %s  ·  %d step%s stored  ·  %s" % (
        m.get("run", "?"), m.get("model", "?"), d.T, "" if d.T == 1 else "s", state)


def segments_text(d, most=4):
    """The view's segments when there is more than one: "steps a–b
    (incarnation N)", the first `most` and a count of the rest."""
    segs = d.segments
    if len(segs) < 2:
        return ""
    parts = []
    for s in segs[:most]:
        a, b = s.get("first_step"), s.get("last_step")
        rng = ("step %s" % a) if a == b else ("steps %s–%s" % (a, b))
        parts.append("%s (incarnation %s)" % (rng, s.get("inc")))
    if len(segs) > most:
        parts.append("%d more" % (len(segs) - most))
    return "%d segments: %s" % (len(segs), ", ".join(parts))


def notes_of(d):
    """The line under the subtitle: rows superseded and the segments, or ""."""
    parts = []
    if d.superseded:
        parts.append("%d of %d rows superseded (not plotted)" % (d.superseded, d.rows))
    seg = segments_text(d)
    if seg:
        parts.append(seg)
    return "  ·  ".join(parts)


def subtitle_of(d):
    m = d.meta
    parts = ["%s layers × %s heads, each line one layer (mean over its heads)"
             % (m.get("layers", "?"), m.get("heads", "?"))]
    if d.T:
        parts.append("steps %d–%d" % (d.steps[0], d.steps[-1]))
    if d.split_form:
        parts.append("%s split over the view" % d.split_form)
    if d.lost:
        parts.append("%d messages lost" % d.lost)
    if d.incomplete:
        parts.append("%d incomplete steps" % d.incomplete)
    if d.last_time is not None and np.isfinite(d.last_time):
        parts.append("last row committed %s"
                     % time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.last_time)))
    return "  ·  ".join(parts)


def _set_xlim(ax, x):
    """x from the first to the last stored step, a little margin each side."""
    if x.shape[0] and x[-1] > x[0]:
        pad = 0.02 * (x[-1] - x[0])
        ax.set_xlim(x[0] - pad, x[-1] + pad)


def render(fig, d):
    """Draws d onto the matplotlib Figure fig: a figure that render drew
    before with the same layers (and lines, not the few-steps note) only
    gets its lines' data, limits and titles updated (cheaper: --follow
    and the window keep up with fast runs), else it is drawn anew."""
    state = getattr(fig, "_sinkwatch", None)
    layout = (d.layers, min(d.T, 2))
    if state is not None and state["layout"] == layout:
        x = d.steps.astype(np.float64)
        for ax, (attrs, _, _) in zip(state["axes"], PANELS):
            for attr in attrs:
                y = getattr(d, attr)
                for layer, line in enumerate(state["lines"][attr]):
                    line.set_data(x, y[:, layer])
            ax.relim()
            ax.autoscale_view()
        _set_xlim(state["axes"][0], x)
        state["title"].set_text(title_of(d))
        state["subtitle"].set_text(subtitle_of(d))
        state["notes"].set_text(notes_of(d))
        fig.stale = True
        return
    fig.clf()
    fig.subplots_adjust(left=0.065, right=0.89, bottom=0.065, top=0.855,
                        hspace=0.38, wspace=0.22)
    axs = fig.subplots(3, 2, sharex=True).ravel()
    colors, cmap = layer_colors(d.layers)
    x = d.steps.astype(np.float64)
    single = d.T == 1
    handles, lines = [], {}
    for ax, (attrs, title, ylabel) in zip(axs, PANELS):
        if attrs[0].startswith("cum_"):
            ax.axhline(0.0, color="0.6", lw=0.8, zorder=1)
        for attr in attrs:
            y = getattr(d, attr)
            lines[attr] = []
            for layer in range(d.layers):
                (line,) = ax.plot(x, y[:, layer], color=colors[layer], lw=1.6,
                                  ls=LINESTYLE.get(attr, "-"),
                                  marker="o" if single else None, ms=5,
                                  label="layer %d" % layer, zorder=2)
                lines[attr].append(line)
                if ax is axs[0]:
                    handles.append(line)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(True, color="0.9", lw=0.7)
        ax.tick_params(labelsize=8)
    for ax in axs[4:]:
        ax.set_xlabel("training step", fontsize=9)
    for ax in axs[:4]:
        ax.tick_params(labelbottom=True)
    _set_xlim(axs[0], x)
    if cmap is None:
        fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.895, 0.5),
                   title="layer", fontsize=9, title_fontsize=9, frameon=False,
                   labels=[str(i) for i in range(d.layers)],
                   ncol=1 if d.layers <= MAX_LEGEND_LAYERS else 2)
    else:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        cax = fig.add_axes([0.91, 0.2, 0.015, 0.6])
        sm = ScalarMappable(norm=Normalize(0, d.layers - 1), cmap=cmap)
        cb = fig.colorbar(sm, cax=cax)
        cb.set_label("layer", fontsize=9)
        cb.ax.tick_params(labelsize=8)
    title = fig.suptitle(title_of(d), fontsize=13, y=0.975)
    subtitle = fig.text(0.5, 0.93, subtitle_of(d), ha="center", va="center", fontsize=9,
                        color="0.3")
    notes = fig.text(0.5, 0.905, notes_of(d), ha="center", va="center", fontsize=9,
                     color="#8b4513")
    fig._sinkwatch = {"layout": layout, "axes": list(axs), "lines": lines,
                      "title": title, "subtitle": subtitle, "notes": notes}
    if d.T < 2:
        note = ("no step committed yet: waiting for data" if d.T == 0 else
                "only 1 step stored: lines need 2 (and the entropy split starts at the 2nd)")
        fig.text(0.48, 0.48, note, ha="center", va="center", fontsize=13, color="0.25",
                 bbox=dict(boxstyle="round,pad=0.6", fc="#fff8dc", ec="0.6"))


def png_metadata(d):
    return {"Title": "sinkwatch run %s" % d.meta.get("run", "?"),
            "Software": PROG,
            "sinkwatch.run": str(d.meta.get("run", "")),
            "sinkwatch.steps": str(d.T),
            "sinkwatch.rows": str(d.rows),
            "sinkwatch.superseded": str(d.superseded),
            "sinkwatch.segments": str(len(d.segments)),
            "sinkwatch.last_step": str(int(d.steps[-1])) if d.T else "",
            "sinkwatch.ended": "1" if d.ended else "0"}


def save_png(fig, d, out, dpi):
    """Renders to out atomically (out.tmp, then a rename)."""
    tmp = out + ".tmp"
    try:
        fig.savefig(tmp, format="png", dpi=dpi, metadata=png_metadata(d))
        os.replace(tmp, out)
    except OSError as e:
        raise Fatal("cannot write %s: %s" % (out, e))


# ---- the command line -------------------------------------------------------

def parse_size(s):
    try:
        w, h = (int(v) for v in s.lower().split("x"))
        if w < 200 or h < 150 or w > 10000 or h > 10000:
            raise ValueError
        return w, h
    except ValueError:
        raise argparse.ArgumentTypeError("expected WxH in pixels (200x150 to 10000x10000), "
                                         "got %r" % s)


def positive(s):
    v = float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError("must be > 0, got %r" % s)
    return v


def nonneg(s):
    v = float(s)
    if not v >= 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %r" % s)
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Live plots of a sinkwatch run file (per layer: sink mass, entropy, "
                    "cumulative sink and content parts of the entropy change).")
    p.add_argument("run", metavar="RUN.h5", help="the run's file (sinkwatchd --data-dir)")
    p.add_argument("--png", metavar="OUT.png",
                   help="render headless to OUT.png and exit (no window)")
    p.add_argument("--follow", action="store_true",
                   help="with --png: re-render OUT.png as steps are committed, until the "
                        "run ends or --timeout")
    p.add_argument("--interval", type=positive, default=1.0, metavar="S",
                   help="seconds between looks at the file (default 1)")
    p.add_argument("--timeout", type=nonneg, default=None, metavar="S",
                   help="seconds to wait for the file to appear (default 30); with "
                        "--follow also the longest to follow (default: until the run ends)")
    p.add_argument("--once", action="store_true",
                   help="draw once: --png renders and exits even with --follow; a window "
                        "shows the current state without updating it")
    p.add_argument("--size", type=parse_size, default=(1200, 800), metavar="WxH",
                   help="picture size in pixels (default 1200x800)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no line on stdout per rendered picture")
    a = p.parse_args(argv)
    if a.follow and not a.png:
        p.error("--follow needs --png")
    return a


DPI = 100


def _reload(f, path, a, prev=None):
    """The run's data: prev again while the file holds what prev was read
    from (the same rows, resume records and end mark), else load_run (a
    `sinkwatch report`), reopening the file once should that fail (a writer
    that restarted and resumed it, say). Returns (f, data)."""
    try:
        if prev is not None and prev.watch is not None:
            ended, t, nres, _ = watch_state(f)
            if (t, nres, ended) == prev.watch:
                return f, prev
        return f, load_run(f, path, a.sinkwatch)
    except (OSError, KeyError, RuntimeError, ReportFailed):
        try:
            f.close()
        except Exception:  # noqa: BLE001 - it is being replaced anyway
            pass
        f = open_run(path, timeout=max(a.interval, 5.0))
        return f, load_run(f, path, a.sinkwatch)


def run_png(a, f):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(a.size[0] / DPI, a.size[1] / DPI), dpi=DPI)
    follow = a.follow and not a.once
    deadline = (time.monotonic() + a.timeout) if (follow and a.timeout is not None) else None
    shown, d = None, None
    while True:
        f, d = _reload(f, a.run, a, d)
        if d.key() != shown:
            render(fig, d)
            save_png(fig, d, a.png, DPI)
            shown = d.key()
            if not a.quiet:
                print("%s: wrote %s (%d steps, %s)" % (PROG, a.png, d.T,
                                                       "run ended" if d.ended else "running"),
                      flush=True)
        if not follow:
            return 0
        if d.ended:
            # the writer flushes dataset headers one by one: one last look
            time.sleep(min(a.interval, 0.2))
            f, d = _reload(f, a.run, a, d)
            if d.key() != shown:
                render(fig, d)
                save_png(fig, d, a.png, DPI)
                if not a.quiet:
                    print("%s: wrote %s (%d steps, run ended)" % (PROG, a.png, d.T), flush=True)
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            if not a.quiet:
                print("%s: --timeout reached, the run goes on (%d steps)" % (PROG, d.T),
                      flush=True)
            return 0
        wait = a.interval if deadline is None else min(a.interval, deadline - time.monotonic())
        time.sleep(max(0.0, wait))


def run_window(a, f):
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib import rcsetup

    backend = matplotlib.get_backend()
    non_interactive = {b.lower() for b in getattr(rcsetup, "non_interactive_bk", ())}
    non_interactive |= {"agg", "pdf", "ps", "svg", "pgf", "cairo", "template"}
    if backend.lower() in non_interactive:
        raise Fatal("no interactive display (matplotlib backend %s): use --png OUT.png, "
                    "or set DISPLAY / MPLBACKEND" % backend)
    fig = plt.figure(figsize=(a.size[0] / DPI, a.size[1] / DPI), dpi=DPI)
    f, d = _reload(f, a.run, a)
    try:
        fig.canvas.manager.set_window_title("sinkwatch %s" % d.meta.get("run", ""))
    except AttributeError:
        pass
    render(fig, d)
    if a.once:
        plt.show()
        return 0
    shown = d.key()
    plt.ion()
    plt.show(block=False)
    while plt.fignum_exists(fig.number):
        plt.pause(a.interval)
        if not plt.fignum_exists(fig.number):
            break
        f, d = _reload(f, a.run, a, d)
        if d.key() != shown:
            render(fig, d)
            fig.canvas.draw_idle()
            shown = d.key()
    return 0


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.png:
        import matplotlib.figure  # noqa: F401 - slow: while the file is awaited, not after
    try:
        a.sinkwatch = find_sinkwatch()
        f = open_run(a.run, timeout=DEFAULT_FILE_TIMEOUT if a.timeout is None else a.timeout)
        try:
            return run_png(a, f) if a.png else run_window(a, f)
        finally:
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass
    except Fatal as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    except NotARunFile as e:
        print("%s: %s: not a sinkwatch run file (%s)" % (PROG, a.run, e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
