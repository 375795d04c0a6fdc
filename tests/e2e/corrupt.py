#!/usr/bin/env python3
"""Issue 27, item 2: run files with flipped bytes never hang the readers.

Six copies of the golden run file, each with 20 bytes flipped (seeded):
`sinkwatch check`, `report` and `tail --once` on each must finish within
BOUND seconds, whatever they say of it. HDF5's SWMR reader retries a
metadata read whose checksum fails with doubling sleeps (minutes, by
default); the readers bound the attempts (sw_h5_reader_fapl).
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, Results, child_env  # noqa: E402

BOUND = 20      # seconds a command may take on a corrupt file (measured: 1.1 to 5.4)
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden_run",
                   "golden.h5")
R = Results()
SUPP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz", "hdf5.supp")


def env():
    """The tools' environment; libhdf5's own leaks on corrupt files (an
    --enable-asan build) are not ours (fuzz/hdf5.supp)."""
    e = child_env()
    e["LSAN_OPTIONS"] = "suppressions=" + os.path.abspath(SUPP)
    return e


def flip(path, seed):
    """20 bytes of path flipped, seeded; returns [(offset, original byte)]."""
    rng = random.Random(seed)
    size = os.path.getsize(path)
    orig = []
    with open(path, "r+b") as f:
        for _ in range(20):
            off = rng.randrange(size)
            f.seek(off)
            b = f.read(1)
            orig.append((off, b))
            f.seek(off)
            f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
    return orig


def corrupt_copies():
    """Each finishes within BOUND; a metadata checksum that fails is called
    corrupt (after a re-open, or at once in a file marked ended), and
    check never calls such a file whole."""
    d = tempfile.mkdtemp(prefix="sinkwatch-corrupt-")
    worst = (0.0, None)
    for seed in range(6):
        path = os.path.join(d, "c%d.h5" % seed)
        shutil.copy(SRC, path)
        flip(path, seed)
        rcs = {}
        for args in (["check", path], ["report", path], ["tail", "--once", path]):
            t0 = time.time()
            try:
                p = subprocess.run([SINKWATCH] + args, capture_output=True, timeout=BOUND,
                                   env=env())
            except subprocess.TimeoutExpired:
                raise AssertionError("%s on a corrupt copy (seed %d) took over %d s"
                                     % (" ".join(args[:-1]), seed, BOUND))
            dt = time.time() - t0
            if dt > worst[0]:
                worst = (dt, "%s, seed %d" % (args[0], seed))
            rcs[args[0]] = p.returncode
            err = p.stderr.decode(errors="replace")
            if "checksum" in err:
                assert p.returncode != 0 and "the file is corrupt: a metadata checksum " \
                    "fails" in err, (args, err)
                assert ("again after a re-open" in err) != ("in a file marked ended" in err)
        # check calls nothing whole that report cannot read
        assert not (rcs["check"] == 0 and rcs["report"] != 0), (seed, rcs)
    print("  the slowest: %.1f s (%s)" % worst)
    shutil.rmtree(d)


def honest_failure():
    """A file can fail one read honestly while it is written: a metadata
    checksum fails, and the same read after a re-open succeeds. Here the
    bytes come back while the first open's attempts fail (HDF5 retries
    about 1.1 s: SW_H5_READ_ATTEMPTS), so report succeeds on its re-open,
    where 51ff81b gave up at once."""
    d = tempfile.mkdtemp(prefix="sinkwatch-honest-")
    path = os.path.join(d, "h.h5")
    shutil.copy(SRC, path)
    orig = flip(path, 0)	# seed 0: the root group's header, before /ended is read
    t0 = time.time()
    p = subprocess.Popen([SINKWATCH, "report", path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env())
    time.sleep(1.3)
    with open(path, "r+b") as f:
        for off, b in reversed(orig):
            f.seek(off)
            f.write(b)
    out, err = p.communicate(timeout=BOUND)
    dt = time.time() - t0
    assert p.returncode == 0, (dt, err.decode(errors="replace"))
    good = subprocess.run([SINKWATCH, "report", SRC], capture_output=True, timeout=BOUND,
                          env=env()).stdout
    assert out.replace(path.encode(), b"F") == good.replace(SRC.encode(), b"F") or \
        out.split(b"\n")[2:] == good.split(b"\n")[2:], (out[:300], good[:300])
    print("  report read it after a re-open: %.1f s" % dt)
    shutil.rmtree(d)


def hostile_claims():
    """Issue 27, item 3: a file's extents and attributes are claims, checked
    before anything is allocated: /step resized to 2^40, and layers x heads
    attributes of 4096 x 1024 on a file of 2 x 3. Each reader refuses it at
    once and names what is wrong."""
    import h5py
    d = tempfile.mkdtemp(prefix="sinkwatch-hostile-")
    step, attrs = os.path.join(d, "step.h5"), os.path.join(d, "attrs.h5")
    shutil.copy(SRC, step)
    shutil.copy(SRC, attrs)
    with h5py.File(step, "r+") as f:
        f["step"].resize((2 ** 40,))
    with h5py.File(attrs, "r+") as f:
        f.attrs.modify("layers", 4096)
        f.attrs.modify("heads", 1024)
    for path, says in ((step, "/step claims 1099511627776 steps"),
                       (attrs, "/sink_mass is not [steps, 4096 layers, 1024 heads]")):
        for args in (["report", path], ["report", "--format", "json", path],
                     ["tail", "--once", path], ["check", path]):
            t0 = time.time()
            p = subprocess.run([SINKWATCH] + args, capture_output=True, timeout=BOUND,
                               env=env())
            out = (p.stdout + p.stderr).decode(errors="replace")
            assert p.returncode != 0, (args, out[-500:])
            if args[0] != "check" or path == attrs:
                assert says in out, (args, out[-500:])
            assert time.time() - t0 < BOUND, args
    shutil.rmtree(d)


def short_closed():
    """Issue 27, item 12: a closed file whose /sink_mass is shorter than
    /step is called inconsistent, not a flush to wait for."""
    import h5py
    d = tempfile.mkdtemp(prefix="sinkwatch-short-")
    path = os.path.join(d, "short.h5")
    shutil.copy(SRC, path)
    with h5py.File(path, "r+") as f:
        f["sink_mass"].resize((5,) + f["sink_mass"].shape[1:])
    p = subprocess.run([SINKWATCH, "report", path], capture_output=True, timeout=BOUND,
                       env=env())
    err = p.stderr.decode()
    assert p.returncode == 2 and "the file is inconsistent" in err, err
    assert "read again" not in err, err
    shutil.rmtree(d)


R.check("corrupt copies: the readers finish", corrupt_copies)
R.check("a checksum that fails once, then reads: not corrupt", honest_failure)
R.check("a closed file shorter than /step: inconsistent", short_closed)
R.check("hostile extents and attributes: refused, named", hostile_claims)
R.finish()
