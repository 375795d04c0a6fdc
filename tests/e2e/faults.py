#!/usr/bin/env python3
"""Issue 26 end to end, with a real daemon: several senders, shutdowns and
run generations under faults; every message stored or counted once.

- two generations of one run id at once (heads 2 and heads 4 interleaved):
  NAME.h5 and NAME@2.h5, no write_error, each with its steps (item 6);
- SIGTERM while rank 0's heads of step 0 are gathered and rank 1's are not:
  rank 0's heads are in the file after the stop (item 2), and each sender's
  status line adds up (stored + pending + drops + end = messages);
- a part that says 3 senders where its incarnation has 2: counted
  senders_mismatch only, never lost too, and rank 1's seq goes on (item 5).
"""
import os
import signal
import sys
import time

import h5py
import msgpack
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import Daemon, Results, Sender, asan_runtime, random_probs  # noqa: E402

R = Results()
RNG = np.random.default_rng(26)


def senders_lines(d):
    """{(inc, rank): {key: int}} from status senders."""
    out = {}
    for line in d.ctl("status senders").splitlines():
        if not line.startswith("sender: "):
            continue
        kv = dict(x.split("=", 1) for x in line.split()[2:] if "=" in x)
        rank = int(kv["rank"].split("/")[0])
        out[(int(kv["inc"]), rank)] = {k: int(v) for k, v in kv.items() if k != "rank"}
    return out


def adds_up(row):
    """messages = stored + pending + every drop + its end (status senders)."""
    known = {"inc", "messages", "lost", "disagree", "uncompared", "missing", "seq_next",
             "ended", "stored", "pending"}
    drops = sum(v for k, v in row.items() if k not in known)
    return row["messages"] == row["stored"] + row["pending"] + drops + row["ended"], row


def generations():
    d = Daemon().start()
    try:
        a = Sender(d.listen, "gen", layers=1, heads=2, fixed=False)
        b = Sender(d.listen, "gen", layers=1, heads=4, fixed=False)
        for step in range(4):   # interleaved: both files open at once
            a.snapshot(step, 0, random_probs(RNG, 2, 3, 8), inc=11)
            b.snapshot(step, 0, random_probs(RNG, 4, 3, 8), inc=12)
        d.wait(lambda st: st["writer"]["steps_written"] >= 8, what="8 steps written")
        st = d.status()
        assert st["drops"].get("write_error", 0) == 0, st["drops"]
        assert st["writer"]["write_errors"] == 0, st["writer"]
        a.close()
        b.close()
    finally:
        d.stop()
    files = sorted(f for f in os.listdir(d.data) if f.endswith(".h5"))
    assert files == ["gen.h5", "gen@2.h5"], files
    heads = set()   # the shape heard first is the first generation (two sockets)
    for name in files:
        with h5py.File(os.path.join(d.data, name), "r") as f:
            heads.add(int(f.attrs["heads"]))
            assert f["step"].shape[0] == 4, (name, f.attrs["heads"], f["step"][:])
    assert heads == {2, 4}, heads


def sigterm_keeps_parts(rows=3, keys=8):
    """rows x keys: 3 x 8 the part is copied; 64 x 64 (32 KiB) its frame is
    kept as it came (sinkwatchd.h SWD_HOLD_MIN), and released at the end."""
    d = Daemon(extra=["--step-timeout-ms", "60000"]).start()
    inc = 7777
    try:
        s0 = Sender(d.listen, "part", layers=1, heads=4)
        s0.snapshot(0, 0, random_probs(RNG, 2, rows, keys), inc=inc, v=2, rank=0, senders=2,
                    head0=0, rows=rows)
        d.wait(lambda st: st["senders"].get("senders", 0) >= 1, what="rank 0 heard")
        rows_ = senders_lines(d)
        ok, row = adds_up(rows_[(inc, 0)])
        assert ok and row["pending"] == 1, row
        tr = d.status()["traffic"]
        kept = rows * keys * 4 * 2 >= 16 * 1024
        assert (int(tr["parts_kept"]), int(tr["parts_copied"])) == (int(kept), int(not kept)), tr
        assert d.stop(signal.SIGTERM) == 0
        s0.close()
    finally:
        d.stop()
    with h5py.File(os.path.join(d.data, "part.h5"), "r") as f:
        mr = f["missing_rank"][:]
        assert f["step"][:].tolist() == [0], f["step"][:]
        # rank 0's heads were written; rank 1's are missing
        assert mr[0, 0].tolist() == [-1, -1, -2, -2], mr
        assert np.isfinite(f["entropy"][0, 0, :2]).all(), f["entropy"][:]
        names = f.attrs["sender_fields"].split(",")
        t = [dict(zip(names, (int(v) for v in r))) for r in f["senders"][:]]
        r0 = [x for x in t if x["rank"] == 0][0]
        assert r0["messages"] == 1 and r0["lost"] == 0, r0


def senders_mismatch_not_lost():
    d = Daemon().start()
    inc = 4242
    try:
        s0 = Sender(d.listen, "mm", layers=1, heads=2, fixed=False)
        s1 = Sender(d.listen, "mm", layers=1, heads=2, fixed=False)
        s0.snapshot(0, 0, random_probs(RNG, 2, 3, 8), inc=inc, v=2, rank=0, senders=2)
        # rank 0's message first: it fixes the incarnation's senders (two sockets
        # are not ordered against each other)
        d.wait(lambda st: st["traffic"]["messages"] >= 1, what="rank 0's message")
        s1.snapshot(1, 0, random_probs(RNG, 2, 3, 8), inc=inc, v=2, rank=1, senders=3)
        s1.snapshot(2, 0, random_probs(RNG, 2, 3, 8), inc=inc, v=2, rank=1, senders=2)
        d.wait(lambda st: len(senders_lines(d)) == 2 and
               senders_lines(d)[(inc, 1)]["messages"] == 2, what="rank 1's two messages")
        r1 = senders_lines(d)[(inc, 1)]
        assert r1["lost"] == 0 and r1.get("senders_mismatch") == 1, r1
        assert adds_up(r1)[0], r1
        st = d.status()
        assert st["drops"]["senders_mismatch"] == 1, st["drops"]
        s0.close()
        s1.close()
    finally:
        d.stop()


def old_sender_table():
    """A run file made before the account (a 14-field sender table) is resumed
    in place: the new rows fill the fields the file has, nothing is lost."""
    import shutil
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "golden_run",
                       "golden.h5")
    d = Daemon()
    os.makedirs(d.data)
    shutil.copy(src, os.path.join(d.data, "golden.h5"))
    with h5py.File(src, "r") as f:
        a = dict(f.attrs)
        last = int(f["step"][-1])
    d.start()
    try:
        s = Sender(d.listen, "golden", layers=int(a["layers"]), heads=int(a["heads"]),
                   model=a["model"], params=int(a["params"]), sink=int(a["sink"]))
        for layer in range(int(a["layers"])):
            s.snapshot(last + 10, layer, random_probs(RNG, int(a["heads"]), int(a["rows"]),
                                                      int(a["keys"])), inc=3, resume=last)
        d.wait(lambda st: st["writer"]["steps_written"] >= 1, what="the step written")
        st = d.status()
        assert st["writer"]["write_errors"] == 0 and st["drops"].get("write_error", 0) == 0, st
        s.close()
    finally:
        d.stop()
    with h5py.File(os.path.join(d.data, "golden.h5"), "r") as f:
        assert f["senders"].shape[1] == 14, f["senders"].shape
        names = f.attrs["sender_fields"].split(",")
        assert len(names) == 14, names
        rows = [dict(zip(names, (int(v) for v in r))) for r in f["senders"][:]]
        new = [r for r in rows if r["inc"] == 3]
        assert len(new) == 1 and new[0]["messages"] == int(a["layers"]), rows
        assert int(f["step"][-1]) == last + 10, f["step"][:]


def table(path):
    with h5py.File(path, "r") as f:
        names = f.attrs["sender_fields"].split(",")
        rows = [dict(zip(names, (int(v) for v in r))) for r in f["senders"][:]]
        lost = int(f["lost"][-1])
    return rows, lost


ACCOUNT = ("stored", "duplicates", "overlaps", "mismatches", "after_end", "budget", "late",
           "senders_mismatch", "nomem", "stopping", "open_steps", "write_error", "head_missing",
           "ended")


def account_ok(row):
    return sum(row[k] for k in ACCOUNT) == row["messages"]


def wait_flushed(d, run, what, cond, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        path = d.run_file(run)
        try:
            if os.path.exists(path):
                with h5py.File(path, "r", libver="latest", swmr=True) as f:
                    if cond(f):
                        return
        except (OSError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def kill_with_parts_held():
    """Item 7: 2 ranks; rank 1's last part of step 4 comes after 3 parts of
    step 5, so step 4's row carries counters of messages still held; SIGKILL
    after the flush: the next daemon counts the 3 lost, per rank and run."""
    d = Daemon(extra=["--step-timeout-ms", "60000"]).start()
    inc, run = 5151, "killparts"
    snd = [Sender(d.listen, run, layers=2, heads=4) for _ in range(2)]
    for x in snd:   # the daemon's subscription again after its restart
        x.s.setsockopt(zmq.XPUB_VERBOSE, 1)

    def part(rank, step, layer):
        snd[rank].snapshot(step, layer, random_probs(RNG, 2, 3, 8), inc=inc, v=2, rank=rank,
                           senders=2, head0=2 * rank, rows=3)

    for step in range(4):
        for layer in range(2):
            part(0, step, layer)
            part(1, step, layer)
    part(0, 4, 0)
    part(0, 4, 1)
    part(1, 4, 0)
    part(0, 5, 0)
    part(0, 5, 1)
    part(1, 5, 0)
    part(1, 4, 1)       # step 4 whole: its row goes out with step 5's parts held
    wait_flushed(d, run, "step 4 on disk", lambda f: f["step"].shape[0] == 5)
    time.sleep(0.3)     # and the sender table's rows
    d.stop(signal.SIGKILL)
    d.start()
    for k in range(2):
        snd[k].wait_subscribed()
    for layer in range(2):
        part(0, 6, layer)
        part(1, 6, layer)
    for k in range(2):
        h = {"v": 2, "type": "end", "run": run, "seq": snd[k].seq, "time": time.time(),
             "inc": inc, "rank": k, "senders": 2}
        snd[k].send_frames([msgpack.packb(h)])
    path = d.wait_ended(run)
    d.stop()
    rows, lost = table(path)
    by = {r["rank"]: r for r in rows if r["inc"] == inc}
    assert by[0]["lost"] == 2 and by[1]["lost"] == 1, by
    assert lost == 3, lost
    for k in range(2):
        assert account_ok(by[k]), by[k]
        assert by[k]["messages"] + by[k]["lost"] == snd[k].seq, (by[k], snd[k].seq)
    for s in snd:
        s.close()


def restart_lost_in_row():
    """Item 8: one sender, the daemon killed; what it sent while none ran is
    lost in the sender's row as in the run's lost dataset."""
    d = Daemon().start()
    run, inc = "restartlost", 8181
    s = Sender(d.listen, run, layers=2, heads=2, fixed=False)
    s.s.setsockopt(zmq.XPUB_VERBOSE, 1)     # its subscription again after the restart

    def step(t):
        for layer in range(2):
            s.snapshot(t, layer, random_probs(RNG, 2, 3, 8), inc=inc)

    for t in range(3):
        step(t)
    wait_flushed(d, run, "3 steps on disk", lambda f: f["step"].shape[0] == 3)
    time.sleep(0.3)
    d.stop(signal.SIGKILL)
    s.seq += 6          # steps 3-5 lost while no daemon ran (a forwarder's drops)
    d.start()
    s.wait_subscribed()
    for t in range(6, 8):
        step(t)
    h = {"v": 1, "type": "end", "run": run, "seq": s.seq, "time": time.time(), "inc": inc}
    s.send_frames([msgpack.packb(h)])
    path = d.wait_ended(run)
    d.stop()
    rows, lost = table(path)
    row = [r for r in rows if r["inc"] == inc][0]
    assert row["lost"] == lost == 6, (row, lost)
    assert account_ok(row) and row["messages"] + row["lost"] == s.seq, (row, s.seq)
    s.close()


def end2(snd, k, run, inc, senders=2):
    h = {"v": 2, "type": "end", "run": run, "seq": snd.seq, "time": time.time(), "inc": inc,
         "rank": k, "senders": senders}
    snd.send_frames([msgpack.packb(h)])


def ended_mark(path):
    with h5py.File(path, "r", libver="latest", swmr=True) as f:
        return f["ended"].shape[0] > 0 and int(f["ended"][-1]) == 1


def late_ends():
    """Item 12: ends after the run was closed idle count in their senders'
    rows; the file is marked ended only when every rank has ended."""
    d = Daemon(extra=["--run-idle-s", "1"]).start()
    run, inc = "lateend", 6161
    snd = [Sender(d.listen, run, layers=1, heads=4) for _ in range(2)]
    try:
        for k in range(2):
            snd[k].snapshot(0, 0, random_probs(RNG, 2, 3, 8), inc=inc, v=2, rank=k, senders=2,
                            head0=2 * k, rows=3)
        path = d.run_file(run)
        wait_flushed(d, run, "step 0", lambda f: f["step"].shape[0] == 1)
        d.wait(lambda st: st["runs"].get("runs", 1) == 0, timeout=15, what="the idle close")
        end2(snd[0], 0, run, inc)
        deadline = time.time() + 10
        while time.time() < deadline:
            rows, _ = table(path)
            r0 = [r for r in rows if r["rank"] == 0][0]
            if r0["ended"]:
                break
            time.sleep(0.05)
        assert r0["ended"] == 1 and account_ok(r0), r0
        assert r0["messages"] + r0["lost"] == snd[0].seq, (r0, snd[0].seq)
        assert not ended_mark(path), "marked ended while rank 1 has not ended"
        # status still shows the closed run and its senders' counts
        fin = d.ctl("status finished")
        assert "finished_run: %s " % run in fin and "state=closed" in fin, fin
        lines = [x for x in fin.splitlines() if x.startswith("finished_sender: %s " % run)]
        assert len(lines) == 2 and all("stored=1 " in x for x in lines), fin
        end2(snd[1], 1, run, inc)
        d.wait_ended(run)
        rows, _ = table(path)
        assert all(r["ended"] == 1 and account_ok(r) for r in rows), rows
    finally:
        d.stop()
        for s in snd:
            s.close()


def end_after_restart():
    """An end that reaches a daemon restarted since the run's last message:
    counted in the sender's row (with the messages it says were lost) and
    the file marked ended, never a silent unknown_run."""
    d = Daemon().start()
    run, inc = "endrestart", 7171
    s = Sender(d.listen, run, layers=1, heads=2, fixed=False)
    s.s.setsockopt(zmq.XPUB_VERBOSE, 1)
    try:
        s.snapshot(0, 0, random_probs(RNG, 2, 3, 8), inc=inc)
        wait_flushed(d, run, "step 0", lambda f: f["step"].shape[0] == 1)
        d.stop(signal.SIGTERM)
        s.seq += 2      # two messages lost while no daemon ran
        d.start()
        s.wait_subscribed()
        h = {"v": 1, "type": "end", "run": run, "seq": s.seq, "time": time.time(), "inc": inc}
        s.send_frames([msgpack.packb(h)])
        path = d.wait_ended(run)
        st = d.status()
        assert st["drops"]["unknown_run"] == 0, st["drops"]
    finally:
        d.stop()
        s.close()
    rows, _ = table(path)
    row = [r for r in rows if r["inc"] == inc][0]
    assert row["ended"] == 1 and row["lost"] == 2 and account_ok(row), row
    assert row["messages"] + row["lost"] == s.seq, (row, s.seq)


def sweep_prev_row():
    """Item 1: two incarnations (a sweep's two workers) interleave steps: a
    row's live dH and drift are never taken against the other's row."""
    d = Daemon().start()
    run = "sweep2"
    a = Sender(d.listen, run, layers=1, heads=2)
    b = Sender(d.listen, run, layers=1, heads=2)
    qpos = [7, 7, 7]
    try:
        order = [(a, 1, 0), (b, 2, 1), (a, 1, 2), (b, 2, 3), (a, 1, 4), (a, 1, 5)]
        for s, inc, step in order:
            s.snapshot(step, 0, random_probs(RNG, 2, 3, 8, qpos=qpos), inc=inc, qpos=qpos)
            wait_flushed(d, run, "step %d" % step,
                         lambda f, n=len([o for o in order if o[2] <= step]):
                         f["step"].shape[0] >= n)
    finally:
        d.stop()
        a.close()
        b.close()
    with h5py.File(d.run_file(run), "r") as f:
        prev = f["prev_row"][:].tolist()
        steps, incs = f["step"][:].tolist(), f["inc"][:].tolist()
        dh, drift = f["dH"][:, 0, 0], f["drift_content"][:, 0, 0]
    assert steps == [0, 1, 2, 3, 4, 5] and incs == [1, 2, 1, 2, 1, 1], (steps, incs)
    # only step 5 follows a row of its own incarnation (step 4's, row 4)
    assert prev == [-1, -1, -1, -1, -1, 4], prev
    assert np.isnan(dh[:5]).all() and np.isfinite(dh[5]), dh
    assert np.isnan(drift[:5]).all() and np.isfinite(drift[5]), drift


def budget_parts():
    """Item 3, the review's setup: --budget-mb 2, one rank of two sends 40
    half-layer parts of 256 KiB; what waits is either computed (its heads
    stored, the other rank's missing) or refused first, budget: every part
    counted once, for the daemon and in the sender's row."""
    d = Daemon(extra=["--budget-mb", "2", "--max-message-mb", "1",
                      "--step-timeout-ms", "300"]).start()
    run, inc = "budgetparts", 3131
    s = Sender(d.listen, run, layers=1, heads=4, fixed=False)
    try:
        for step in range(40):
            s.snapshot(step, 0, random_probs(RNG, 2, 128, 256), inc=inc, v=2, rank=0,
                       senders=2, head0=0, rows=128)
        d.wait(lambda st: st["traffic"]["messages"] >= 40, what="40 messages")

        def settled(st):
            rows = senders_lines(d)
            return (inc, 0) in rows and rows[(inc, 0)]["pending"] == 0
        d.wait(settled, timeout=20, what="nothing held")
        row = senders_lines(d)[(inc, 0)]
        ok, _ = adds_up(row)
        assert ok and row["messages"] == 40, row
        st = d.status()
        assert st["drops"]["budget"] == row.get("budget", 0), (st["drops"], row)
        assert row["stored"] + row.get("budget", 0) == 40, row
        assert row["stored"] >= 1 and row.get("budget", 0) >= 1, row
    finally:
        d.stop()
        s.close()
    rows, _ = table(d.run_file(run))
    r0 = [r for r in rows if r["rank"] == 0][0]
    assert account_ok(r0) and r0["messages"] == 40, r0


def idle_close_open_step():
    """Issue 27, items 9 and 8: an open step does not keep a run from closing
    idle (it is written incomplete, counted once); a layer of it after the
    close is late, not a duplicate."""
    d = Daemon(extra=["--run-idle-s", "2", "--step-timeout-ms", "60000"]).start()
    run = "idleopen"
    s = Sender(d.listen, run, layers=2, heads=2, fixed=False)
    try:
        s.snapshot(0, 0, random_probs(RNG, 2, 3, 8), inc=41)
        d.wait(lambda st: "finished_run: %s " % run in d.ctl("status finished"), timeout=8,
               what="the idle close")
        st = d.status()
        assert st["traffic"]["steps_incomplete"] == 1 and st["runs"]["runs"] == 0, st
        s.snapshot(0, 1, random_probs(RNG, 2, 3, 8), inc=41)
        d.wait(lambda st: st["drops"]["late"] == 1, what="the late layer counted late")
        st = d.status()
        assert st["drops"]["duplicate"] == 0, st["drops"]
        assert st["traffic"]["steps_incomplete"] == 1, st["traffic"]
    finally:
        d.stop()
        s.close()
    with h5py.File(d.run_file(run), "r") as f:
        assert f["step"][:].tolist() == [0] and f["missing"][0].tolist() == [0, 1], \
            (f["step"][:], f["missing"][:])


def shape_change_mid_run():
    """Issue 27, item 7: a sender that changes its probe (keys) mid-run in
    one daemon: the new shape is the next generation, nothing lost."""
    d = Daemon().start()
    run = "reshape"
    s = Sender(d.listen, run, layers=1, heads=2, fixed=False)
    try:
        for step in range(4):
            keys = 8 if step < 2 else 16
            s.snapshot(step, 0, random_probs(RNG, 2, 3, keys), inc=42)
        d.wait(lambda st: st["writer"]["steps_written"] >= 4, what="4 steps written")
        st = d.status()
        assert st["drops"]["write_error"] == 0 and st["writer"]["write_errors"] == 0, st
    finally:
        d.stop()
        s.close()
    with h5py.File(os.path.join(d.data, "reshape.h5"), "r") as f:
        assert f["step"][:].tolist() == [0, 1] and f.attrs["keys"] == 8, f["step"][:]
    with h5py.File(os.path.join(d.data, "reshape@2.h5"), "r") as f:
        assert f["step"][:].tolist() == [2, 3] and f.attrs["keys"] == 16, f["step"][:]


def exact_steps():
    """Issue 27, item 11: steps past 2^53 come out of report's JSON exact."""
    import json
    import subprocess
    d = Daemon().start()
    run = "bigsteps"
    big = [2 ** 53 + 1, 2 ** 63 - 1]
    s = Sender(d.listen, run, layers=1, heads=2, fixed=False)
    try:
        for step in big:
            s.snapshot(step, 0, random_probs(RNG, 2, 3, 8), inc=43)
        d.wait(lambda st: st["writer"]["steps_written"] >= 2, what="2 steps written")
    finally:
        d.stop()
        s.close()
    out = subprocess.run([os.environ["SINKWATCH"], "report", d.run_file(run), "--format",
                          "json"], capture_output=True, check=True).stdout
    rep = json.loads(out)
    text = out.decode()
    assert str(big[0]) in text and str(big[1]) in text, text[:3000]
    assert "e+18" not in text and "9007199254740992," not in text, text[:3000]
    assert rep is not None


def hostile_shape():
    """Issue 27, item 1: a header claiming 4096 layers x 1024 heads with a
    small tensor: its run's state (32 GiB of pair matrices a step) would
    pass the budget, so the run is refused (run_state), before anything is
    allocated; the daemon's memory stays small."""
    d = Daemon(extra=["--budget-mb", "64", "--max-message-mb", "16"]).start()
    s = Sender(d.listen, "huge", layers=4096, heads=1024, fixed=False)
    try:
        for step in range(3):
            s.snapshot(step, 0, random_probs(RNG, 1, 1, 8), inc=44, v=2, rank=0, senders=1,
                       head0=0, rows=1)
        d.wait(lambda st: st["drops"]["run_state"] == 3, what="3 messages refused (run_state)")
        st = d.status()
        assert st["runs"]["runs"] == 0, st["runs"]
        refused = d.ctl("status refused")
        assert "refused: huge too_many_runs=0 run_rate=0 run_state=3" in refused, refused
        with open("/proc/%d/status" % d.proc.pid) as f:
            hwm = [int(x.split()[1]) for x in f if x.startswith("VmHWM:")][0]
        # the budget and a margin (an ASan build's shadow memory takes more)
        limit = (1024 if asan_runtime() else 256) * 1024
        assert hwm < limit, "VmHWM %d kB, limit %d kB" % (hwm, limit)
    finally:
        d.stop()
        s.close()
    assert not os.path.exists(d.run_file("huge"))


def sparse_layers():
    """Issue 27, item 1: the layers a step never got are the datasets' NaN
    fill, never written from a layers x heads x heads buffer: with 1024
    layers of 32 heads and only layer 0 sent, each step adds about one
    chunk (1 MiB) per pair dataset to the file, not 8 MiB each."""
    d = Daemon(extra=["--budget-mb", "256", "--step-timeout-ms", "100"]).start()
    run, L, H, steps = "sparse", 1024, 32, 5
    s = Sender(d.listen, run, layers=L, heads=H, fixed=False)
    try:
        for step in range(steps):
            s.snapshot(step, 0, random_probs(RNG, H, 3, 8), inc=46)
        d.wait(lambda st: st["writer"]["steps_written"] >= steps, what="%d steps" % steps)
    finally:
        d.stop()
        s.close()
    path = d.run_file(run)
    with h5py.File(path, "r") as f:
        # the pair datasets: one chunk (1 MiB, 128 layers) a step each,
        # where writing every layer took 8 MiB each
        for name in ("cosine_keep", "cosine_drop", "js_keep", "js_drop", "pair_sink",
                     "pair_content"):
            got = f[name].id.get_storage_size()
            assert got <= steps * (1 << 20), "/%s: %d bytes stored, whole steps %d" % (
                name, got, steps * L * H * H * 8)
        assert f["step"].shape[0] == steps
        ck = f["cosine_keep"][:, :2]
        assert np.isfinite(ck[:, 0, 0, 1]).all(), ck[:, 0, 0, 1]
        assert np.isnan(ck[:, 1]).all()
        assert np.isnan(f["cosine_keep"][steps - 1, L - 1]).all()
        assert (f["missing"][:, 1:] == 1).all() and (f["missing"][:, 0] == 0).all()
        assert np.isnan(f["sink_mass"][:, 1:]).all()


def control_chars():
    """Issue 27, item 4: a model name with ESC and BEL (senders may send any
    byte but NUL) never reaches the terminal raw: report, tail and check
    print it escaped."""
    import subprocess
    d = Daemon().start()
    run, model = "ctl", "m\x1b]0;owned\x07\x1b[2J"
    s = Sender(d.listen, run, layers=1, heads=2, fixed=False, model=model)
    try:
        for step in range(2):
            s.snapshot(step, 0, random_probs(RNG, 2, 3, 8), inc=45)
        d.wait(lambda st: st["writer"]["steps_written"] >= 2, what="2 steps written")
    finally:
        d.stop()
        s.close()
    path = d.run_file(run)
    for args in (["report", path], ["tail", "--once", path], ["check", path],
                 ["report", os.path.dirname(path)]):
        out = subprocess.run([os.environ["SINKWATCH"]] + args, capture_output=True,
                             timeout=60).stdout
        assert b"\x1b" not in out and b"\x07" not in out, (args, out[:400])
    out = subprocess.run([os.environ["SINKWATCH"], "report", path], capture_output=True,
                         timeout=60).stdout
    assert b"m\\x1b]0;owned\\x07\\x1b[2J" in out, out[:400]


R.check("control characters never reach the terminal", control_chars)
R.check("a header claiming a huge model is refused (run_state)", hostile_shape)
R.check("layers never sent are the NaN fill, not written", sparse_layers)
R.check("steps past 2^53 stay exact in JSON", exact_steps)
R.check("an idle close writes open steps; a layer after it is late", idle_close_open_step)
R.check("a probe that changes shape mid-run: the next generation", shape_change_mid_run)
R.check("parts under a small budget: each counted once", budget_parts)
R.check("a sweep's two workers: prev_row within one incarnation", sweep_prev_row)
R.check("late ends: marked ended once every rank has", late_ends)
R.check("an end after a restart is counted, the run ended", end_after_restart)
R.check("SIGKILL with parts held: counted lost", kill_with_parts_held)
R.check("a restart's loss in the sender row too", restart_lost_in_row)
R.check("two generations of one run id at once", generations)
R.check("a 14-field sender table is resumed in place", old_sender_table)
R.check("SIGTERM writes the parts gathered so far", sigterm_keeps_parts)
R.check("SIGTERM writes the parts gathered so far, kept as they came",
        lambda: sigterm_keeps_parts(64, 64))
R.check("senders_mismatch is not lost as well", senders_mismatch_not_lost)
R.finish()
