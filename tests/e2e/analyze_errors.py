#!/usr/bin/python3
"""Every error case of `sinkwatch analyze`: exit status 2 and a message on
stderr that names the problem; nothing on stdout.

    SINKWATCH=./sinkwatch /usr/bin/python3 tests/e2e/analyze_errors.py
"""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

SW = os.environ.get("SINKWATCH")
if not SW:
    print("SINKWATCH not set: skipped")
    sys.exit(77)

passed = failed = 0


def run(args):
    p = subprocess.run([SW, "analyze"] + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def expect(name, args, *needles, status=2):
    global passed, failed
    rc, out, err = run(args)
    problems = []
    if rc != status:
        problems.append("exit %d, want %d" % (rc, status))
    if status != 0 and out:
        problems.append("stdout not empty: %r" % out[:200])
    if status != 0 and not err.startswith("sinkwatch analyze: "):
        problems.append("stderr does not start with 'sinkwatch analyze: ': %r" % err)
    for n in needles:
        if n not in err:
            problems.append("stderr lacks %r: %r" % (n, err))
    if problems:
        failed += 1
        print("FAIL %-28s %s" % (name, "; ".join(problems)))
    else:
        passed += 1
        print("ok   %-28s %s" % (name, err.strip().splitlines()[-1] if err.strip() else ""))


def uniform(*shape):
    return np.full(shape, 1.0 / shape[-1], dtype=np.float32)


with tempfile.TemporaryDirectory(prefix="sinkwatch-errors-") as d:
    good = os.path.join(d, "good.h5")
    with h5py.File(good, "w") as f:
        f["a"] = uniform(2, 4, 4)
        f.create_group("grp")
        f["grp/inner"] = uniform(2, 4, 4)
        f["rank2"] = uniform(4, 4)
        f["rank6"] = uniform(1, 1, 1, 2, 4, 4)
        f["ints"] = np.ones((2, 4, 4), dtype=np.int32)
        f["strs"] = np.array([b"x", b"y"])
        f["empty"] = np.zeros((0, 4, 4), dtype=np.float32)
        f["onekey"] = np.ones((2, 4, 1), dtype=np.float32)
        f["badsum"] = np.full((2, 3, 4), 0.3, dtype=np.float32)
        mixed = uniform(1, 3, 4)
        mixed[0, 0, 1] = np.nan
        mixed[0, 1, 1] = -0.25
        mixed[0, 2, :] = 0.5
        f["mixed"] = mixed
        f["neglogits"] = np.full((1, 2, 3), np.nan, dtype=np.float32)
        f["bigkeys"] = uniform(1, 2, 64)
        causal = np.tril(np.ones((2, 4, 4), dtype=np.float32))
        causal /= causal.sum(-1, keepdims=True)
        causal[:, 3, 0] = np.nan
        f["causal"] = causal
        cplx = h5py.h5t.py_create(np.dtype("<f4")).copy()
        cplx.set_fields(23, 16, 7, 0, 16)
        cplx.set_offset(0)
        cplx.set_precision(24)
        cplx.set_size(3)
        cplx.set_ebias(63)
        sp = h5py.h5s.create_simple((1, 2, 2))
        h5py.h5d.create(f.id, b"f24", cplx, sp)
    notes = os.path.join(d, "plain.txt")
    with open(notes, "w") as f:
        f.write("not hdf5\n")

    # the happy path first, so a failure below is about the error
    expect("ok", [good + ":/a"], status=0)
    expect("ok nested", [good + ":/grp/inner", "--format", "csv"], status=0)

    expect("missing file", [os.path.join(d, "nope.h5") + ":/a"], "nope.h5", "No such file")
    expect("directory", [d + ":/a"], "is a directory")
    expect("not hdf5", [notes + ":/a"], "plain.txt", "not an HDF5 file")
    expect("missing dataset", [good + ":/b"], "no dataset '/b'")
    expect("missing nested", [good + ":/grp/nope"], "no dataset '/grp/nope'")
    expect("group not dataset", [good + ":/grp"], "'/grp' is not a dataset")
    expect("rank 2", [good + ":/rank2"], "wrong rank 2", "[heads, queries, keys]")
    expect("rank 6", [good + ":/rank6"], "wrong rank 6")
    expect("integer type", [good + ":/ints"], "unsupported element type: integer")
    expect("string type", [good + ":/strs"], "unsupported element type: string")
    expect("odd float type", [good + ":/f24"], "unsupported element type", "3-byte float")
    expect("empty", [good + ":/empty"], "empty")
    expect("sink out of range", [good + ":/a", "--sink", "4"],
           "sink index 4 out of range", "4 keys")
    expect("all rejected short", [good + ":/onekey"], "every row was rejected", "short 8")
    expect("all rejected sum", [good + ":/badsum"], "every row was rejected", "sum 6")
    expect("all rejected mixed", [good + ":/mixed"], "every row was rejected",
           "nonfinite 1", "negative 1", "sum 1")
    expect("all rejected logits", [good + ":/neglogits", "--logits"], "nonfinite 2")
    expect("all rejected causal", [good + ":/causal", "--causal", "--sink", "3"],
           "every row was rejected", "short 2", "nosink 4", "nonfinite 2")
    expect("delta too large", [good + ":/bigkeys", "--delta", "0.02"],
           "--delta 0.02 is too large for 64 keys")

    expect("no target", [], "missing FILE.h5:/dataset")
    expect("no dataset part", [good], "is not FILE.h5:/dataset")
    expect("two targets", [good + ":/a", good + ":/a"], "a second")
    expect("unknown option", [good + ":/a", "--frobnicate"], "unknown option '--frobnicate'")
    expect("bad format", [good + ":/a", "--format", "xml"], "--format: 'xml'")
    expect("bad sink", [good + ":/a", "--sink", "-1"], "--sink: '-1'")
    expect("bad sink text", [good + ":/a", "--sink=x"], "--sink: 'x'")
    expect("bad delta", [good + ":/a", "--delta", "2"], "--delta: '2'")
    expect("bad tol", [good + ":/a", "--tol", "nan"], "--tol: 'nan'")
    expect("missing value", [good + ":/a", "--sink"], "--sink needs a value")

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
