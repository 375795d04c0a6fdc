#!/usr/bin/python3
"""`sinkwatch check`: a run file left by a SIGKILLed daemon carries the SWMR
writer flags, which plain readers refuse; check reports the committed steps,
refuses to clear while a daemon holds the data directory, clears otherwise,
and tells whole files from broken ones.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/check.py [CASE...]
"""
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, run_cmd,  # noqa: E402
                       set_sender_table)

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)
H5LS = shutil.which("h5ls")
GOLDEN = os.path.join(os.environ.get("SW_SRCDIR") or
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "tests", "data", "golden_run", "golden.h5")


def check(*args):
    return run_cmd([SINKWATCH, "check"] + list(args))


def check_json(*args):
    rc, out, err = check("--format", "json", *args)
    return rc, json.loads(out), err


def plain_open_fails(path):
    """The error a plain (non-SWMR) h5py open raises, or None if it opens."""
    try:
        with h5py.File(path, "r"):
            return None
    except OSError as e:
        return str(e)


def swmr_steps(path):
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        step = f["step"]
        step.refresh()
        return step.shape[0], (int(step[0]), int(step[-1])) if step.shape[0] else None


def sim(d, run, *args):
    return subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", run] + list(args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def ended_file(tmp, run="clean"):
    """A run streamed to its end through a daemon that then stops cleanly."""
    d = Daemon(tmp=tmp).start()
    try:
        p = sim(d, run, "--steps", "6", "--blocking")
        assert p.wait(60) == 0, p.stderr.read()
        path = d.wait_ended(run)
    finally:
        assert d.stop() == 0, d.read_log()
    return path


def killed_file(tmp, run="crash"):
    """A run whose daemon was SIGKILLed after a few steps were flushed."""
    d = Daemon(tmp=tmp).start()
    p = sim(d, run, "--steps", "100000", "--every-ms", "20", "--layers", "2", "--heads", "2",
            "--rows", "4", "--keys", "16")
    path = d.run_file(run)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if os.path.exists(path) and swmr_steps(path)[0] >= 5:
                    break
            except (OSError, KeyError):
                pass
            time.sleep(0.05)
        else:
            raise AssertionError("no 5 flushed steps in 30 s; log:\n" + d.read_log())
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
    finally:
        p.kill()
        p.wait()
        d.stop()
    return path, d.data


# ---------------------------------------------------------------- cases

def case_crash():
    """SIGKILL leaves the flags: plain readers fail, check refuses to clear
    under a running daemon, clears without one, and its step count is the
    SWMR count of /step; then plain h5py and h5ls open the file."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    path, data = killed_file(tmp)
    n, (first, last) = swmr_steps(path)
    assert n >= 5, n
    e = plain_open_fails(path)
    assert e is not None, "plain h5py opened the killed daemon's file: no writer flags?"
    if H5LS:
        rc, _, _ = run_cmd([H5LS, path])
        assert rc != 0, "h5ls opened the file before check cleared it"

    # --no-clear reports and leaves the flags
    rc, out, err = check("--no-clear", path)
    assert rc == 1, "--no-clear on a flagged file: rc %d\n%s%s" % (rc, out, err)
    assert "not cleared (--no-clear)" in out, out
    assert plain_open_fails(path) is not None, "--no-clear cleared the flags"

    # a daemon on the same data directory holds its lock: check must not clear
    d2 = Daemon(tmp=tmp, data_dir=data).start()
    try:
        rc, out, err = check(path)
        assert rc == 1, "check under a running daemon: rc %d\n%s%s" % (rc, out, err)
        assert "sinkwatchd is writing this directory" in err, err
        assert "not cleared" in out and "SWMR readers work meanwhile" in out, out
        assert plain_open_fails(path) is not None, "check cleared under a running daemon"
        rc, js, err = check_json(path)
        f = js["files"][0]
        assert rc == 1 and f["daemon_writing"] and not f["cleared"] and f["writer_flags"], js
    finally:
        assert d2.stop() == 0, d2.read_log()

    # the lock held by anyone (here this process) counts the same
    with open(os.path.join(data, ".sinkwatchd.lock")) as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        rc, out, err = check(path)
        assert rc == 1 and "sinkwatchd is writing" in err, (rc, out, err)
        fcntl.flock(lk, fcntl.LOCK_UN)

    # a plain HDF5 writer holds an exclusive flock on the file itself
    with open(path) as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        rc, out, err = check(path)
        assert rc == 1 and "another process has it open for writing" in err, (rc, out, err)
        assert "cleared" not in out, out
        fcntl.flock(lk, fcntl.LOCK_UN)
    assert plain_open_fails(path) is not None, "check cleared a file another process locks"

    # no daemon: check clears
    rc, out, err = check(path)
    assert rc == 0, "check of a killed daemon's file: rc %d\n%s%s" % (rc, out, err)
    m = re.search(r"^  rows: +(\d+) committed, step (-?\d+) \.\. (-?\d+)$", out, re.M)
    assert m, "no step count in:\n" + out
    assert (int(m[1]), int(m[2]), int(m[3])) == (n, first, last), (m.groups(), n, first, last)
    assert "cleared" in out and re.search(r"verdict: +whole", out), out
    e = plain_open_fails(path)
    assert e is None, "plain h5py still fails after check: " + e
    if H5LS:
        rc, o, e2 = run_cmd([H5LS, path])
        assert rc == 0 and "step" in o, "h5ls after check: rc %d %s %s" % (rc, o, e2)
    with h5py.File(path, "r") as f:
        assert f["step"].shape[0] == n

    # cleared: a second check finds it closed and says so in JSON
    rc, js, err = check_json(path)
    f = js["files"][0]
    assert rc == 0 and f["whole"] and not f["writer_flags"] and not f["cleared"], js
    assert f["steps"] == n and f["run"] == "crash" and f["layout_version"] == 3, js
    assert not f["ended"], js


def case_eoa():
    """Bytes past the end of allocation (a killed writer's unflushed data):
    clearing moves the allocation past them, as h5clear --increment=0; a
    read-write close without that would cut the file back to it."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    path, _ = killed_file(tmp)
    with open(path, "ab") as f:
        f.write(b"\0" * 8192)
    size = os.path.getsize(path)
    rc, out, err = check(path)
    assert rc == 0, (rc, out, err)
    m = re.search(r"tail: +(\d+) bytes past the end of allocation.*allocation moved", out)
    assert m and int(m[1]) >= 8192, out
    assert os.path.getsize(path) >= size, "clearing truncated the file"
    rc, js, err = check_json(path)
    assert rc == 0 and js["files"][0]["bytes_beyond_eoa"] == 0, js
    assert plain_open_fails(path) is None


def case_clean():
    """A run ended and closed cleanly: whole, ended, flags clear, nothing to do."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    path = ended_file(tmp)
    before = os.stat(path).st_mtime_ns
    rc, out, err = check(path)
    assert rc == 0, (rc, out, err)
    assert re.search(r"ended: +yes", out) and re.search(r"verdict: +whole", out), out
    assert re.search(r"writer flags: +clear", out), out
    assert "leftovers" not in out, out
    assert os.stat(path).st_mtime_ns == before, "check wrote to a clean file"
    rc, js, err = check_json(path)
    f = js["files"][0]
    assert rc == 0 and f["whole"] and f["ended"] and f["steps"] == 6, js
    assert (f["first_step"], f["last_step"]) == (0, 5), js
    assert f["leftovers"] == [] and f["short"] == [], js
    assert "swmr=True" in js["hint"], js


def case_leftovers():
    """Rows beyond /step in any dataset indexed by step, also one the code
    does not know, are reported and harmless; datasets whose first axis is
    not step are not compared; a dataset shorter than /step is damage."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    path = ended_file(tmp)
    with h5py.File(path, "r+") as f:
        n = f["step"].shape[0]
        f["sink_mass"].resize(n + 2, axis=0)
        x = f.create_dataset("future_series", shape=(n + 3, 2), maxshape=(None, 2))
        x.attrs["dims"] = "step,thing"
        y = f.create_dataset("not_by_step", shape=(n + 7,))
        y.attrs["dims"] = "steps_elsewhere"
        z = f.create_dataset("by_other", shape=(n + 9, 2))
        z.attrs["dims"] = "token,step"
    rc, js, err = check_json(path)
    f = js["files"][0]
    got = {o["dataset"]: o["rows"] for o in f["leftovers"]}
    assert got == {"sink_mass": 2, "future_series": 3}, got
    assert rc == 0 and f["whole"], "leftovers made the file not whole: %r %s" % (js, err)
    rc, out, err = check(path)
    assert rc == 0 and re.search(r"leftovers: .*sink_mass \+2", out), out

    with h5py.File(path, "r+") as f:
        f["time"].resize(n - 1, axis=0)
    rc, js, err = check_json(path)
    f = js["files"][0]
    assert rc == 1 and not f["whole"], js
    assert f["short"] == [{"dataset": "time", "rows": -1}], js
    assert "shorter than step" in err, err


def case_not_runfile():
    """A file that is not HDF5, one that is missing and an HDF5 file that is
    not a run file: exit 1, each named; a good file beside them still checked."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    junk = os.path.join(tmp, "junk.h5")
    with open(junk, "w") as f:
        f.write("this is not HDF5\n" * 100)
    other = os.path.join(tmp, "other.h5")
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(3)
    rc, out, err = check(junk)
    assert rc == 1, (rc, out, err)
    assert junk in err and "not an HDF5 file" in err, err
    rc, out, err = check(other)
    assert rc == 1 and other in err and "not a sinkwatch run file" in err, (rc, err)
    good = ended_file(tmp)
    missing = os.path.join(tmp, "missing.h5")
    rc, js, err = check_json(junk, good, missing)
    assert rc == 1, rc
    assert [f["whole"] for f in js["files"]] == [False, True, False], js
    assert missing in err and "No such file" in err, err


# (inc, rank, senders, ended) rows of the sender table, and the ranks that
# never ended as (inc, rank, sent): compared with each incarnation's senders,
# so that a rank without a row is named too (issue 26 item 4)
RANK_CASES = [
    ("only rank 0 of 2 sent, then ended", [(1, 0, 2, 1)], [(1, 1, False)]),
    ("two processes claimed rank 0 of 2", [(1, 0, 2, 0)], [(1, 0, True), (1, 1, False)]),
    ("the ranks in different incarnations", [(7, 1, 2, 1), (5, 0, 2, 1)],
     [(5, 1, False), (7, 0, False)]),
    ("every rank ended; one sender alone", [(3, 1, 2, 1), (3, 0, 2, 1), (4, 0, 1, 0)], []),
]


def case_ranks():
    """Every rank of a several-sender incarnation that never ended is named,
    also one that never sent (no row in the sender table), per incarnation;
    JSON and text."""
    tmp = tempfile.mkdtemp(prefix="sinkwatch-check-")
    for what, rows, want in RANK_CASES:
        path = os.path.join(tmp, "ranks.h5")
        shutil.copy(GOLDEN, path)
        set_sender_table(path, rows)
        rc, js, err = check_json(path)
        f = js["files"][0]
        got = [(x["inc"], x["rank"], x["sent"]) for x in f["ranks_not_ended"]]
        assert rc == 0 and got == want, (what, got, want, err)
        assert f["ranks_not_ended_count"] == len(want), (what, f)
        assert all(x["senders"] == 2 for x in f["ranks_not_ended"]), (what, f)
        rc, out, err = check(path)
        for inc, rank, sent in want:
            line = "rank %d of 2 of incarnation %d never sent %s" % (
                rank, inc, "its end" if sent else "anything")
            assert line in out, (what, line, out)
        assert ("not ended:" in out) == bool(want), (what, out)
    shutil.rmtree(tmp)


def case_escaped_name():
    """The run fam/L2 is the file fam%2FL2.h5: `check DIR/fam/L2.h5` checks it
    and says so (issue 29 item 5.2)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = ended_file(tmp, "fam/L2")
        assert os.path.basename(path) == "fam%2FL2.h5", path
        rc, out, err = check(os.path.join(os.path.dirname(path), "fam", "L2.h5"))
        assert rc == 0 and "reading %s, the file of run 'fam/L2'" % path in err, (rc, out, err)


def case_step_order():
    """Rows stored out of step order: check gives the least and the greatest
    step, not the first and the last row's (issue 29 item 5.3)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "order.h5")
        shutil.copy(GOLDEN, path)
        with h5py.File(path, "r+") as f:
            f["step"][:] = [10, 0, 20, 30, 40, 50, 60, 70, 80, 70, 40]
        rc, out, err = check("--no-clear", path)
        assert "11 committed, step 0 .. 80" in out, out
        rc, js, err = check_json("--no-clear", path)
        f = js["files"][0]
        assert (f["first_step"], f["last_step"]) == (0, 80), f


def case_hint():
    """The hint on reading a run file while it is written comes where a run
    file was read, not for a file that is not one (issue 29 item 5.3)."""
    rc, out, err = check("/etc/passwd")
    assert rc == 1 and "swmr" not in out, out
    rc, js, err = check_json("/etc/passwd")
    assert "hint" not in js, js
    rc, out, err = check("--no-clear", GOLDEN, "/etc/passwd")
    assert "swmr=True" in out, out


def case_usage():
    """Usage errors exit 2, --help 0."""
    assert check()[0] == 2
    assert check("--bogus", "x.h5")[0] == 2
    assert check("--format", "xml", "x.h5")[0] == 2
    rc, out, _ = check("--help")
    assert rc == 0 and "--no-clear" in out, out


CASES = [case_crash, case_eoa, case_clean, case_leftovers, case_not_runfile, case_ranks,
         case_escaped_name, case_step_order, case_hint, case_usage]

if __name__ == "__main__":
    want = set(sys.argv[1:])
    res = Results()
    for c in CASES:
        if not want or c.__name__[5:] in want:
            res.check(c.__name__[5:], c)
    sys.exit(res.finish())
