#!/usr/bin/python3
"""The example resumes (issue 29 item 3): contrib/examples/train_tiny_gpt.py
streaming to a real sinkwatchd with checkpoints every K steps is SIGKILLed
after a checkpoint was written and probes past it were stored, resumed with
--resume from its last checkpoint under the same --run, and finishes; an
uninterrupted run with the same seed goes to another run id. The two
reports (sinkwatch report --format json --per-head) agree in every value to
1e-6 relative, over the same steps; the resumed one has 2 segments and
superseded rows (the probes after the checkpoint, done again); the final
weights and the losses are the same bit for bit. Plus: --help gives every
option's default, a checkpoint directory holds only step_*.pt for the sweep
(each loads with weights_only=True), and --resume refuses other model options.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \
        /usr/bin/python3 tests/e2e/resume_example.py

Exit 77 (skipped) without SINKWATCHD, SINKWATCH or torch.
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

if not os.environ.get("SINKWATCHD") or not os.environ.get("SINKWATCH"):
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)
try:
    import torch
except ImportError:
    print("no torch: skipped")
    sys.exit(77)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

from swharness import Daemon, Results  # noqa: E402

EXAMPLE = os.path.join(SRCDIR, "contrib", "examples", "train_tiny_gpt.py")
SINKWATCH = os.environ["SINKWATCH"]
PY = sys.executable
STEPS, EVERY, K = 100, 5, 20
SMALL = ["--steps", str(STEPS), "--every", str(EVERY), "--save-every", str(K),
         "--layers", "2", "--heads", "4", "--d-model", "32", "--context", "32",
         "--batch", "8", "--probe-batch", "2", "--seed", "7", "--threads", "1",
         "--log-every", "1000"]
TMP = tempfile.mkdtemp(prefix="sinkwatch-resume-")
STATE = {}
# what names a run, its file or its incarnations, or counts rows by
# incarnation: not a value of the run's trajectory
IDENTITY = {"run", "file", "segments", "senders", "rows_stored", "rows_superseded",
            "ranks_not_ended", "inc", "time", "created", "updated"}


# the file's own counters (of every row, superseded ones too): a kill between
# the two layers of a probe leaves the killed incarnation an incomplete row,
# which the resume supersedes; the view's incomplete steps are compared
FILE_COUNTERS = {"lost", "incomplete"}


def example(*args, timeout=120):
    p = subprocess.run([PY, EXAMPLE] + list(args), capture_output=True, text=True,
                       timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


def train(*args):
    p = example(*(SMALL + list(args)))
    assert p.returncode == 0, "example exited %d:\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    return p.stdout


def report(path):
    p = subprocess.run([SINKWATCH, "report", path, "--format", "json", "--per-head"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def differences(a, b, path="", rel=1e-6, out=None):
    """Every place where two reports differ, identity keys left out."""
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in IDENTITY or (not path and k in FILE_COUNTERS):
                continue
            if k not in a or k not in b:
                out.append("%s/%s: only in one" % (path, k))
            else:
                differences(a[k], b[k], "%s/%s" % (path, k), rel, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append("%s: %d items vs %d" % (path, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, "%s[%d]" % (path, i), rel, out)
    elif isinstance(a, float) or isinstance(b, float):
        if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or \
                abs(a - b) > rel * max(abs(a), abs(b)) + 1e-12:
            out.append("%s: %r vs %r" % (path, a, b))
    elif a != b:
        out.append("%s: %r vs %r" % (path, a, b))
    return out


def last_checkpoint(d):
    """The highest step with both step_N.pt and state_N.pt in d, or -1."""
    steps = [int(m.group(1)) for m in
             (re.match(r"state_(\d+)\.pt$", os.path.basename(f))
              for f in glob.glob(os.path.join(d, "state_*.pt"))) if m]
    steps = [s for s in steps if os.path.exists(os.path.join(d, "step_%08d.pt" % s))]
    return max(steps, default=-1)


def stored_steps(path):
    """The committed steps of a run file being written (SWMR), [] if none yet."""
    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            st = f["step"]
            st.refresh()
            return [int(s) for s in st[:st.shape[0]]]
    except (OSError, KeyError):
        return []


def final_params(name):
    with np.load(os.path.join(TMP, name)) as z:
        return {k: z[k] for k in z.files}


def case_help_defaults():
    """--help names a default for every option."""
    p = example("--help", timeout=60)
    assert p.returncode == 0, p.stderr
    blocks = re.split(r"\n  (?=-)", p.stdout.split("options:", 1)[1])
    opts = [b for b in blocks if b.strip().startswith("--")]
    assert len(opts) >= 25, opts
    missing = [b.split()[0] for b in opts if "default" not in b]
    assert not missing, "no default in --help for %s" % missing


def case_resume():
    """Killed after a checkpoint and stored probes past it, resumed under
    the same run id: the same report as an uninterrupted run (1e-6), two
    segments, superseded rows, the same final weights and losses."""
    d = STATE["daemon"]
    t0 = time.time()
    ck_ref, ck_run = os.path.join(TMP, "ck-ref"), os.path.join(TMP, "ck-run")
    train("--connect", d.listen, "--run", "resume-ref", "--checkpoint-dir", ck_ref,
          "--save-final", os.path.join(TMP, "ref.npz"))
    t_ref = time.time() - t0

    # the run to kill: a checkpoint S > 0 written, a probe after S stored
    path = d.run_file("resume-run")
    log = open(os.path.join(TMP, "killed.log"), "w")
    p = subprocess.Popen([PY, EXAMPLE] + SMALL + ["--connect", d.listen, "--run", "resume-run",
                                                  "--checkpoint-dir", ck_run],
                         stdout=log, stderr=subprocess.STDOUT)
    deadline, ckpt, seen = time.time() + 90, -1, []
    while time.time() < deadline and p.poll() is None:
        ckpt = last_checkpoint(ck_run)
        if ckpt > 0:
            seen = stored_steps(path)
            if seen and max(seen) > ckpt:
                break
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    rc = p.wait()
    log.close()
    assert rc == -signal.SIGKILL, "the run ended (%d) before it was killed: %s" \
        % (rc, open(log.name).read())
    ckpt = last_checkpoint(ck_run)
    assert 0 < ckpt < STEPS and max(seen) > ckpt, (ckpt, seen)
    print("     killed after checkpoint %d, steps %d..%d stored"
          % (ckpt, min(seen), max(seen)))

    out = train("--connect", d.listen, "--run", "resume-run", "--checkpoint-dir", ck_run,
                "--resume", os.path.join(ck_run, "state_%08d.pt" % ckpt),
                "--save-final", os.path.join(TMP, "resumed.npz"))
    assert "resumed from step %d" % ckpt in out, out
    STATE["ck"] = ck_run
    ref = report(d.wait_ended("resume-ref"))
    res = report(d.wait_ended("resume-run"))

    want_steps = len(range(0, STEPS + 1, EVERY))
    for r in (ref, res):
        assert (r["steps_stored"], r["first_step"], r["last_step"]) == (want_steps, 0, STEPS), \
            (r["steps_stored"], r["first_step"], r["last_step"])
    assert len(res["segments"]) == 2, res["segments"]
    seg0, seg1 = res["segments"]
    assert seg1["first_step"] <= ckpt + EVERY and seg1["last_step"] == STEPS, res["segments"]
    assert res["rows_superseded"] > 0, (res["rows_superseded"], res["rows_stored"])
    assert ref["rows_superseded"] == 0 and len(ref["segments"]) == 1, ref["segments"]
    # the resumed incarnation declared its checkpoint (resume_from)
    with h5py.File(d.run_file("resume-run"), "r") as f:
        rs = [int(x) for x in f["resume_step"][:]]
        ri = [int(x) for x in f["resume_inc"][:len(rs)]]
    assert rs == [ckpt] and ri == [seg1["inc"]], (rs, ri, res["segments"])
    diff = differences(ref, res)
    assert not diff, "reports differ:\n  " + "\n  ".join(diff[:20])

    # the training itself: the final weights (the last checkpoint and
    # --save-final) and every loss, bit for bit
    a, b = final_params("ref.npz"), final_params("resumed.npz")
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), "%s differs (max %g)" % (k, np.abs(a[k] - b[k]).max())
    wa = torch.load(os.path.join(ck_ref, "step_%08d.pt" % STEPS), weights_only=True)
    wb = torch.load(os.path.join(ck_run, "step_%08d.pt" % STEPS), weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    print("     %d rows superseded, segments %s; uninterrupted run %.1f s, all %.1f s"
          % (res["rows_superseded"], [(s["first_step"], s["last_step"]) for s in res["segments"]],
             t_ref, time.time() - t0))


def case_sweep_sees_weights():
    """The sweep lists only step_*.pt of a checkpoint directory, and each
    loads with weights_only=True (the state files are apart)."""
    import sinkwatch.sweep as sw
    d = STATE.get("ck")
    if d is None:
        raise AssertionError("no checkpoint directory (case resume failed)")
    items = sw.find_checkpoints(d)
    assert [s for s, _ in items] == list(range(0, STEPS + 1, K)), items
    assert all(os.path.basename(f).startswith("step_") for _, f in items), items
    for _, f in items:
        sd = sw._torch_load(f)
        assert all(isinstance(v, torch.Tensor) for v in sd.values()), f
    assert len(glob.glob(os.path.join(d, "state_*.pt"))) == len(items)


def case_resume_refuses():
    """--resume with another model width, or a file that is not a
    checkpoint, exits with a message instead of training."""
    d = STATE.get("ck")
    if d is None:
        raise AssertionError("no checkpoint directory (case resume failed)")
    args = list(SMALL)
    i = args.index("--d-model")
    args[i + 1] = "64"
    bad = ["--no-probe", "--checkpoint-dir", os.path.join(TMP, "ck-bad")]
    p = example(*(args + bad + ["--resume", d]))
    assert p.returncode != 0 and "--d-model 32" in p.stderr, (p.returncode, p.stderr)
    p = example(*(SMALL + bad + ["--resume", os.path.join(d, "probe.pt")]))
    assert p.returncode != 0 and "--resume" in p.stderr, (p.returncode, p.stderr)


def main():
    res = Results()
    d = Daemon(TMP)
    d.start()
    STATE["daemon"] = d
    try:
        res.check("help_defaults", case_help_defaults)
        res.check("resume", case_resume)
        res.check("sweep_sees_weights", case_sweep_sees_weights)
        res.check("resume_refuses", case_resume_refuses)
    finally:
        d.stop()
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
