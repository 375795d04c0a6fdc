#!/usr/bin/python3
"""Regenerates the golden run file and its expected reports.

    make_golden_run.py [--sinkwatchd PATH] [--sinkwatch PATH] [--out DIR]

Streams a small deterministic run through a real sinkwatchd (on free
loopback ports, in a temp dir) with the raw protocol sender of
tests/swharness.py, so that the file is what the daemon of this tree writes:
run it again whenever the layout (storage/LAYOUT.md) or the report changes,
and review the diff of the expected JSON.

The run ("golden"; 2 layers x 3 heads, a fixed probe of 4 rows x 8 keys,
float32 probabilities, so the paired split of METRICS.md §3):

- incarnation 1 sends steps 0, 10, ..., 80; the sink grows with the step and
  the content sharpens, at head-dependent rates (heads of every class);
- step 30: layer 1 is never sent (a missing layer);
- step 50: every row of layer 0, head 2 is NaN (rejected: no valid row);
- step 60: layer 1 comes as a part holding heads 0 and 1 only (head 2
  missing, missing_rank 0);
- incarnation 1 ends; incarnation 2 resumes from step 60 and sends steps
  70 and 80 again with other data (incarnation 1's rows of them are
  superseded), then ends.

Writes DIR/golden.h5 and, from `sinkwatch report` run in DIR on it,
expected_report.json (--format json --per-head --series) and
expected_range.json (--from 10 --to 60 --per-head --format json).
tests/report.py checks that the report still gives these, to 1e-12, and
checks both against a numpy computation from the stored datasets.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(TOP, "tests"))

RUN, MODEL, PARAMS = "golden", "golden-sim", 123456
LAYERS, HEADS, ROWS, KEYS = 2, 3, 4, 8
STEPS = list(range(0, 90, 10))
INC_A, INC_B, RESUME = 1, 2, 60
REPORTS = {
    "expected_report.json": ["--format", "json", "--per-head", "--series"],
    "expected_range.json": ["--format", "json", "--per-head", "--from", "10", "--to", "60"],
}


# per (layer, head): sink logit growth per step, content sharpening per step
SINK_RATE = np.array([[0.030, 0.000, 0.020], [0.000, 0.000, 0.004]])
SHARP_RATE = np.array([[0.000, 0.020, 0.012], [0.000, -0.008, 0.004]])


def probe(step, layer, inc=INC_A):
    """[HEADS, ROWS, KEYS] rows of a fixed probe (the same inputs every
    step), a sink mass s and a content distribution c per row, p = (s, (1 -
    s) c): in layer 0, head 0 only grows its sink (a collapse by sink
    growth), head 1 only sharpens its content, head 2 does both; in layer 1,
    head 0 stays as it is (stable), head 1 flattens its content (a rise),
    head 2 does a little of both. Incarnation 2 adds some sink where it grows."""
    rng = np.random.default_rng(1000 + layer)
    base = rng.normal(size=(HEADS, ROWS, KEYS - 1))
    sink0 = rng.normal(size=(HEADS, ROWS)) * 0.3 - 1.5
    zc = base * (1.0 + SHARP_RATE[layer][:, None, None] * step)
    c = np.exp(zc - zc.max(-1, keepdims=True))
    c /= c.sum(-1, keepdims=True)
    bump = (SINK_RATE[layer] > 0) * (0.25 if inc == INC_B else 0.0)
    zs = sink0 + (SINK_RATE[layer] * step + bump)[:, None]
    s = 1.0 / (1.0 + np.exp(-zs))
    p = np.concatenate([s[..., None], (1.0 - s)[..., None] * c], axis=-1)
    return p.astype(np.float32)


def send_end(snd, inc):
    snd.send_frames([msgpack.packb({"v": 1, "type": "end", "run": RUN, "seq": snd.seq,
                                    "inc": inc})])


def committed(path):
    try:
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            return f["step"].shape[0]
    except (OSError, KeyError):
        return 0


def wait_rows(path, n, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if committed(path) >= n:
            return
        time.sleep(0.05)
    raise RuntimeError("%s: %d rows not committed in %ss" % (path, n, timeout))


def stream(daemon):
    from swharness import Sender

    a = Sender(daemon.listen, RUN, LAYERS, HEADS, model=MODEL, params=PARAMS, fixed=True)
    for st in STEPS:
        for lay in range(LAYERS):
            x = probe(st, lay)
            if st == 30 and lay == 1:
                continue                        # a missing layer
            if st == 50 and lay == 0:
                x[2] = np.nan                   # no valid row in head 2
            if st == 60 and lay == 1:           # a part: heads 0 and 1 only
                a.snapshot(st, lay, np.ascontiguousarray(x[:2]), inc=INC_A, v=2, head0=0)
                continue
            a.snapshot(st, lay, x, inc=INC_A)
    send_end(a, INC_A)
    path = daemon.run_file(RUN)
    wait_rows(path, len(STEPS))
    b = Sender(daemon.listen, RUN, LAYERS, HEADS, model=MODEL, params=PARAMS, fixed=True)
    for st in (70, 80):
        for lay in range(LAYERS):
            b.snapshot(st, lay, probe(st, lay, INC_B), inc=INC_B, resume=RESUME)
    send_end(b, INC_B)
    wait_rows(path, len(STEPS) + 2)
    path = daemon.wait_ended(RUN)
    a.close()
    b.close()
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sinkwatchd", default=os.path.join(TOP, "sinkwatchd"))
    p.add_argument("--sinkwatch", default=os.path.join(TOP, "sinkwatch"))
    p.add_argument("--out", default=HERE)
    a = p.parse_args()
    os.environ["SINKWATCHD"] = a.sinkwatchd
    import swharness
    swharness.SINKWATCHD = a.sinkwatchd
    from swharness import Daemon

    tmp = tempfile.mkdtemp(prefix="sinkwatch-golden-")
    d = Daemon(tmp=tmp, extra=["--chunk-steps", "4", "--step-timeout-ms", "60000"]).start()
    try:
        path = stream(d)
    finally:
        rc = d.stop()
    if rc != 0:
        sys.exit("sinkwatchd exited %s: %s" % (rc, d.read_log()))
    os.makedirs(a.out, exist_ok=True)
    shutil.copy(path, os.path.join(a.out, "golden.h5"))
    shutil.rmtree(tmp, ignore_errors=True)
    for name, args in REPORTS.items():
        r = subprocess.run([a.sinkwatch, "report", "golden.h5"] + args, cwd=a.out,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            sys.exit("sinkwatch report %s: %s" % (" ".join(args), r.stderr))
        with open(os.path.join(a.out, name), "w") as f:
            f.write(r.stdout)
    print("wrote %s (%d bytes) and %s" % (os.path.join(a.out, "golden.h5"),
                                          os.path.getsize(os.path.join(a.out, "golden.h5")),
                                          ", ".join(REPORTS)))


if __name__ == "__main__":
    main()
