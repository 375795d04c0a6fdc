#!/usr/bin/python3
"""End-to-end tests of the live pipeline: a real sinkwatchd on free loopback
ports and a temp dir, fed by `sinkwatch sim` or by a raw protocol sender,
checked through the run files (h5py with SWMR, the C reader through
`sinkwatch tail` and `sinkwatch report`) and the status endpoint.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/pipeline.py [CASE...]
"""
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time

import h5py
import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_ref as ref  # noqa: E402
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, Sender,  # noqa: E402
                       random_probs, run_cmd)

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)

HEAD_FIELDS = ("sink_mass", "content_mass", "entropy", "sink_entropy", "content_entropy",
               "content_term", "content_entropy_mw", "sink_balance")
PAIRS = ("cosine_keep", "cosine_drop", "js_keep", "js_drop", "pair_sink", "pair_content")


def sim(d, run, *args):
    rc, out, err = run_cmd([SINKWATCH, "sim", "--connect", d.listen, "--run", run] + list(args),
                           timeout=120)
    assert rc == 0, "sim failed: %s %s" % (out, err)
    return err


def wait_ended(d, run, timeout=20):
    return d.wait_ended(run, timeout)


def report(path):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json"])
    assert rc == 0, err
    return json.loads(out)


def near(a, b, tol):
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    return abs(a - b) <= tol


# ---------------------------------------------------------------- cases

def case_roundtrip():
    """The values in the file equal an independent numpy computation on the
    same tensors: head values, pair matrices, flip rates, the paired split
    and the drift against the previous step."""
    d = Daemon(extra=["--pair-rows", "0", "--drift-rows", "100"]).start()
    try:
        rng = np.random.default_rng(5)
        H, R, K, L, T = 4, 6, 24, 2, 3
        qpos = [K - R + r for r in range(R)]
        snd = Sender(d.listen, "roundtrip", L, H, model="m", params=123)
        tensors = {}
        for t in range(T):
            for l in range(L):
                x = random_probs(rng, H, R, K, qpos, sink_strength=1.0 + t)
                x[1, 2, 3] = np.nan if t == 1 else x[1, 2, 3]   # a rejected row
                tensors[t, l] = x
                snd.snapshot(t * 10, l, x, qpos=qpos)
        snd.end()
        path = wait_ended(d, "roundtrip")
        snd.close()
        with h5py.File(path, "r") as f:
            assert list(f["step"][:]) == [0, 10, 20], f["step"][:]
            assert f.attrs["split_form"] in (b"paired", "paired"), f.attrs["split_form"]
            assert int(f.attrs["layers"]) == L and int(f.attrs["heads"]) == H
            for t in range(T):
                for l in range(L):
                    want = ref.analyze(tensors[t, l], causal=True)
                    for h, hs in enumerate(want["head_stats"]):
                        for name in HEAD_FIELDS:
                            got = float(f[name][t, l, h])
                            assert near(got, hs[name], 1e-9 * max(1, abs(hs[name]))), \
                                (name, t, l, h, got, hs[name])
                        assert int(f["rows"][t, l, h]) == hs["rows"]
                        assert int(f["rejected"][t, l, h, 2]) == hs["rejected"]["nonfinite"]
                    ls = want["layer_stats"][0]
                    for name in PAIRS:
                        got = f[name][t, l]
                        w = np.array(ls[name], dtype=float)
                        assert np.allclose(got, w, rtol=1e-7, atol=1e-10, equal_nan=True), \
                            (name, t, l, got, w)
                    for i, m in enumerate(("cosine", "js", "entropy")):
                        assert near(float(f["flip_rate"][t, l, i]), ls["flip_rate"][m], 1e-12), \
                            (m, float(f["flip_rate"][t, l, i]), ls["flip_rate"][m])
                    # the paired split and the drift against the previous step
                    for h in range(H):
                        if t == 0:
                            assert math.isnan(f["dH"][t, l, h])
                            continue
                        sp = [0.0, 0.0, 0.0]
                        db = dc = 0.0
                        n = 0
                        for r in range(R):
                            n_keys = qpos[r] + 1
                            a = tensors[t - 1, l][h, r, :n_keys].astype(np.float64)
                            b = tensors[t, l][h, r, :n_keys].astype(np.float64)
                            if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
                                continue
                            ra, rb = ref.row_metrics(a, 0, "probs", 1e-10), \
                                ref.row_metrics(b, 0, "probs", 1e-10)
                            hc_mid = 0.5 * (ra["Hc"] + rb["Hc"])
                            sp[0] += rb["H"] - ra["H"]
                            sp[1] += (rb["hb"] - ra["hb"]) - (rb["s"] - ra["s"]) * hc_mid
                            sp[2] += 0.5 * (ra["w"] + rb["w"]) * (rb["Hc"] - ra["Hc"])
                            db += (rb["b"] - ra["b"]) ** 2
                            dc += float(np.sum((rb["clr_c"] - ra["clr_c"]) ** 2))
                            n += 1
                        for name, v in zip(("dH", "dH_sink", "dH_content"), sp):
                            assert near(float(f[name][t, l, h]), v / n, 1e-10), \
                                (name, t, l, h, float(f[name][t, l, h]), v / n)
                        assert near(float(f["drift_sink"][t, l, h]), math.sqrt(db / n), 1e-9)
                        # ln parts travel as float32: ~1e-7 relative
                        assert near(float(f["drift_content"][t, l, h]), math.sqrt(dc / n),
                                    1e-5 * math.sqrt(dc / n) + 1e-6)
                    s = f["dH_sink"][t, l] + f["dH_content"][t, l]
                    if t:
                        assert np.allclose(s, f["dH"][t, l], rtol=0, atol=1e-12)
    finally:
        assert d.stop() == 0


def case_pick_rows():
    """pair_rows and drift_rows below the row count: the daemon takes the
    pair matrices and drift_content on the rows storage/LAYOUT.md (row_use) names (two
    causal sequences, the longest rows, shared out), not on the first
    rows; metrics_ref.pick_rows says which, independently."""
    d = Daemon(extra=["--pair-rows", "3", "--drift-rows", "4"]).start()
    try:
        rng = np.random.default_rng(17)
        H, K = 3, 12
        qpos = list(range(7)) + list(range(5))       # sequences of 7 and 5 rows
        R = len(qpos)
        ppick, dpick = ref.pick_rows(qpos, R, K, 3), ref.pick_rows(qpos, R, K, 4)
        assert ppick == [5, 6, 11] and dpick == [5, 6, 10, 11], (ppick, dpick)
        snd = Sender(d.listen, "pick", 1, H, model="m", params=1)
        xs = []
        for t in range(2):
            x = random_probs(rng, H, R, K, qpos, sink_strength=1.0 + t)
            xs.append(x)
            snd.snapshot(t * 10, 0, x, qpos=qpos)
        snd.end()
        path = wait_ended(d, "pick")
        snd.close()

        def rm(x, h, r):
            return ref.row_metrics(x[h, r, :qpos[r] + 1].astype(np.float64), 0, "probs", 1e-10)

        with h5py.File(path, "r") as f:
            for t in range(2):
                rows = [{(0, r): rm(xs[t], h, r) for r in ppick} for h in range(H)]
                hstats = [{"rows": R, "entropy": 0.0, "content_entropy": 0.0}] * H
                want = ref.layer_pairs(0, rows, hstats)
                for name in PAIRS:
                    got = f[name][t, 0]
                    for i in range(H):
                        for j in range(H):
                            if i != j:
                                assert near(float(got[i, j]), want[name][i][j], 1e-9), \
                                    (name, t, i, j, float(got[i, j]), want[name][i][j])
            for h in range(H):
                dc = sum(float(np.sum((rm(xs[1], h, r)["clr_c"] - rm(xs[0], h, r)["clr_c"]) ** 2))
                         for r in dpick)
                got = float(f["drift_content"][1, 0, h])
                assert near(got, math.sqrt(dc / len(dpick)), 1e-5 * math.sqrt(dc / len(dpick))), \
                    (h, got, math.sqrt(dc / len(dpick)))
    finally:
        assert d.stop() == 0


def case_pure_modes():
    """sim's pure modes: sink_share 1 in sink mode and 0 in content mode."""
    d = Daemon().start()
    try:
        for mode, kind, dtype, want in (("sink", "probs", "f64", 1.0), ("content", "probs", "f64", 0.0),
                                        ("sink", "logits", "f32", 1.0),
                                        ("content", "probs", "f32", None)):
            run = "pure-%s-%s-%s" % (mode, kind, dtype)
            sim(d, run, "--mode", mode, "--kind", kind, "--dtype", dtype, "--steps", "12",
                "--layers", "3", "--heads", "4", "--rows", "6", "--keys", "40", "--blocking")
            rep = report(wait_ended(d, run))
            figs = [rep["model_attribution"]] + rep["layer_attribution"]
            for fig in figs:
                for form in ("path", "endpoint"):
                    a = fig[form]
                    assert a["dH"] < 0, (run, form, a)
                    assert abs(a["sink"] + a["content"] - a["dH"]) < 1e-12, (run, a)
                    if want is None:
                        # f32 probabilities: quantization noise, still close
                        assert abs(a["sink_share"]) < 1e-4, (run, form, a)
                        continue
                    if form == "endpoint" and mode == "content":
                        # the aggregate endpoint form holds the mean sink mass
                        assert abs(a["sink_share"] - want) < 1e-9, (run, form, a)
                    elif form == "path":
                        assert abs(a["sink_share"] - want) < 1e-9, (run, form, a)
                        assert abs(a["content_share"] - (1 - want)) < 1e-9, (run, form, a)
            assert rep["steps_stored"] == 12 and rep["split_form"] == "paired"
    finally:
        assert d.stop() == 0


def case_swmr_tail():
    """Readers tailing with SWMR while the daemon writes see whole steps
    only, in order: h5py (swmr=True, refresh) and the C reader (tail)."""
    d = Daemon().start()
    run = "tailme"
    steps = 40
    try:
        simp = subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", run,
                                 "--steps", str(steps), "--every-ms", "40", "--layers", "2",
                                 "--heads", "3", "--blocking", "--step-stride", "5"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        path = d.run_file(run)
        deadline = time.time() + 20
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        tailp = subprocess.Popen([SINKWATCH, "tail", path, "--interval-ms", "50", "--timeout", "30"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen_T = []
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            last = -1
            while time.time() < deadline + 10:
                f["step"].refresh()
                T = f["step"].shape[0]
                assert T >= (seen_T[-1] if seen_T else 0), "T went backwards"
                seen_T.append(T)
                for name in ("entropy", "sink_mass", "dH_sink", "rows", "cosine_keep"):
                    ds = f[name]
                    ds.refresh()
                    assert ds.shape[0] >= T, (name, ds.shape, T)
                    block = ds[:T]
                    if name in ("entropy", "sink_mass", "cosine_keep"):
                        assert np.all(np.isfinite(block)), (name, T, block)
                st = f["step"][:T]
                assert list(st) == [5 * i for i in range(T)], st
                if T > last:
                    last = T
                f["ended"].refresh()
                if f["ended"].shape[0] > 0 and T == steps:
                    break
                time.sleep(0.03)
        assert last == steps, (last, seen_T[-5:])
        assert len(set(seen_T)) > 3, "the reader never saw the file grow: %r" % seen_T[:20]
        out, err = tailp.communicate(timeout=40)
        assert tailp.returncode == 0, err
        lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")][1:]
        got = [int(float(ln.split()[0])) for ln in lines]
        assert got == [5 * i for i in range(steps)], got
        assert simp.wait(30) == 0
    finally:
        assert d.stop() == 0


def case_tail_superseded():
    """tail says when a step it showed is superseded: by a newer
    incarnation's row of the step, or by its resume record (steps after the
    resume), live and with --once on the finished file."""
    d = Daemon().start()
    run = "tailsup"
    rng = np.random.default_rng(5)
    try:
        a = Sender(d.listen, run, 2, 3, fixed=False)
        for st in (0, 100, 200, 300):
            for lay in range(2):
                a.snapshot(st, lay, random_probs(rng, 3, 4, 16), inc=1000)
        path = d.run_file(run)

        def rows():
            try:
                with h5py.File(path, "r", libver="latest", swmr=True) as f:
                    return f["step"].shape[0]
            except (OSError, KeyError):
                return 0
        deadline = time.time() + 20
        while rows() < 4 and time.time() < deadline:
            time.sleep(0.02)
        assert rows() == 4, rows()
        tailp = subprocess.Popen([SINKWATCH, "tail", path, "--interval-ms", "50",
                                  "--timeout", "30"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)     # it shows A's rows before B's arrive
        b = Sender(d.listen, run, 2, 3, fixed=False)
        for st in (200, 300, 400):
            for lay in range(2):
                b.snapshot(st, lay, random_probs(rng, 3, 4, 16), inc=2000, resume=200)
        b.send_frames([msgpack.packb({"v": 1, "type": "end", "run": run, "seq": b.seq,
                                      "inc": 2000})])
        d.wait_ended(run)
        out, err = tailp.communicate(timeout=40)
        assert tailp.returncode == 0, err
        _, once, err2 = run_cmd([SINKWATCH, "tail", path, "--once"])
        a.close()
        b.close()
        for what, text in (("live", out), ("--once", once)):
            lines = text.splitlines()
            sup = [ln for ln in lines if "superseded" in ln]
            assert sup == ["# step 200 superseded by incarnation 2000",
                           "# step 300 superseded by incarnation 2000 (resume from 200)"], \
                (what, text)
            shown = [int(ln.split()[0]) for ln in lines[2:] if not ln.startswith("#")]
            assert shown == [0, 100, 200, 300, 200, 300, 400], (what, shown, text)
            # each line comes after the step it is about was shown
            for ln in sup:
                st = ln.split()[2]
                first = next(i for i, x in enumerate(lines) if x.split()[:1] == [st])
                assert lines.index(ln) > first, (what, text)
    finally:
        assert d.stop() == 0


def case_bad_input():
    """Each bad message is counted under its reason and logged; the daemon
    keeps serving and stores what is good."""
    d = Daemon().start()
    try:
        snd = Sender(d.listen, "victim", 1, 2)
        good = random_probs(np.random.default_rng(1), 2, 3, 8)
        hdr = snd.header(0, 0, "probs", "f32", good.shape)
        body = good.tobytes()
        packed = msgpack.packb(hdr)
        # truncated msgpack
        snd.send_frames([packed[:len(packed) // 2], body])
        # wrong version
        snd.send_frames([msgpack.packb(dict(hdr, v=99)), body])
        # dims disagreeing with the frame
        snd.send_frames([packed, body[:-4]])
        # an array header claiming 2^32-1 elements, few bytes after it
        snd.send_frames([packed[:-1] + b"\xdd\xff\xff\xff\xff\x01", body])
        # unknown kind
        snd.send_frames([msgpack.packb(dict(hdr, kind="attention")), body])
        # NaN and negative rows: a valid message, rows rejected
        bad = good.copy()
        bad[0, 0, 1] = np.nan
        bad[1, 1, 2] = -0.5
        snd.snapshot(1, 0, bad)
        snd.end()
        # a run id with ../
        trav = Sender(d.listen, "../../escape", 1, 2)
        trav.snapshot(0, 0, good)
        trav.end()
        st = d.wait(lambda s: s["drops"]["bad_msgpack"] >= 2 and s["drops"]["bad_version"] >= 1
                    and s["drops"]["bad_dims"] >= 1 and s["drops"]["bad_kind"] >= 1
                    and s["writer"]["steps_written"] >= 2, what="bad-input counters")
        assert st["rejects"]["nonfinite"] == 1 and st["rejects"]["negative"] == 1, st["rejects"]
        assert "pong" in d.ctl("ping")
        log = d.read_log()
        for word in ("msgpack", "version", "dims", "kind"):
            assert word in log, (word, log)
        p = wait_ended(d, "victim")
        with h5py.File(p, "r") as f:
            assert int(f["rows"][0, 0, 0]) == 2 and int(f["rejected"][0, 0, 0, 2]) == 1
            assert int(f["rejected"][0, 0, 1, 3]) == 1
        escape = wait_ended(d, "../../escape")
        assert os.path.dirname(os.path.abspath(escape)) == os.path.abspath(d.data), escape
        assert not os.path.exists(os.path.join(d.tmp, "escape.h5"))
        assert not os.path.exists(os.path.join(os.path.dirname(d.tmp), "escape.h5"))
        files = [n for n in os.listdir(d.data) if not n.startswith(".sinkwatchd")]
        assert sorted(files) == sorted([os.path.basename(escape), "victim.h5"]), files
        snd.close()
        trav.close()
    finally:
        assert d.stop() == 0


def case_burst():
    """A burst of many small messages arrives at once: the edge-triggered
    ZMQ_FD must be drained in batches, nothing left behind."""
    d = Daemon(extra=["--batch", "16"]).start()
    try:
        snd = Sender(d.listen, "burst", 1, 2)
        x = random_probs(np.random.default_rng(2), 2, 1, 4)
        n = 3000
        for t in range(n):
            snd.snapshot(t, 0, x)
        snd.end()
        st = d.wait(lambda s: s["traffic"]["messages"] >= n + 1, timeout=30, what="the burst")
        assert st["loop"]["batch_limit_hits"] > 0, st["loop"]
        assert st["loop"]["max_batch"] == 16, st["loop"]
        path = wait_ended(d, "burst", timeout=60)
        with h5py.File(path, "r") as f:
            assert f["step"].shape[0] == n, f["step"].shape
            assert int(f["lost"][-1]) == 0
        snd.close()
    finally:
        assert d.stop() == 0


def case_budget():
    """Past the in-flight budget messages are dropped and counted, never
    queued without bound; the daemon goes on."""
    d = Daemon(extra=["--budget-mb", "4", "--max-message-mb", "2", "--workers", "1"]).start()
    try:
        snd = Sender(d.listen, "flood", 2, 16)
        rng = np.random.default_rng(3)
        x = random_probs(rng, 16, 16, 1024)   # 1 MiB a message
        n = 200
        for t in range(n):
            snd.snapshot(t // 2, t % 2, x)
        snd.end()
        st = d.wait(lambda s: s["traffic"]["messages"] >= n + 1, timeout=60, what="the flood")
        assert st["drops"]["budget"] > 0, st["drops"]
        assert st["queue"]["inflight_bytes"] <= st["queue"]["budget_bytes"]
        path = wait_ended(d, "flood", timeout=60)
        with h5py.File(path, "r") as f:
            T = f["step"].shape[0]
            miss = int(f["missing"][:].sum())
        # every message is accounted for: stored layers plus budget drops
        assert 2 * T - miss + st["drops"]["budget"] == n, (T, miss, st["drops"])
        snd.close()
    finally:
        assert d.stop() == 0


def _stream(d, run, steps=400, every=10):
    return subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", run,
                             "--steps", str(steps), "--every-ms", str(every), "--layers", "2",
                             "--heads", "3", "--rows", "4", "--keys", "32"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_steps(path, n, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with h5py.File(path, "r", libver="latest", swmr=True) as f:
                if f["step"].shape[0] >= n:
                    return
        except (OSError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError("%s did not reach %d steps" % (path, n))


def _check_whole(f):
    T = f["step"].shape[0]
    for name in HEAD_FIELDS + PAIRS + ("rows", "rejected", "time", "flip_rate", "missing"):
        f[name].refresh() if hasattr(f[name], "refresh") else None
        assert f[name].shape[0] >= T, (name, f[name].shape, T)
    st = f["step"][:T]
    assert np.all(np.diff(st) > 0), st
    # a layer that never arrived (a step cut short by a stop) is marked
    # missing and holds NaN; every layer that arrived has its values
    have = f["missing"][:T] == 0
    ent = f["entropy"][:T]
    assert np.all(np.isfinite(ent[have])), "an arrived layer has NaN entropy"
    assert np.all(np.isnan(ent[~have])), "a missing layer holds values"
    return T


def case_sigterm():
    """SIGTERM mid-stream: the daemon finishes, flushes, exits 0, and the
    file is complete and valid."""
    d = Daemon().start()
    p = _stream(d, "term")
    path = d.run_file("term")
    try:
        _wait_steps(path, 10)
        assert d.stop(signal.SIGTERM) == 0
        with h5py.File(path, "r") as f:
            T = _check_whole(f)
            assert T >= 10
        assert "stopped" in d.read_log()
    finally:
        p.kill()
        p.wait()
        d.stop()


def case_sigkill_resume():
    """SIGKILL mid-stream: a SWMR reader finds everything flushed; a
    restarted daemon appends to the same file."""
    d = Daemon().start()
    p = _stream(d, "killed")
    path = d.run_file("killed")
    try:
        _wait_steps(path, 10)
        d.stop(signal.SIGKILL)
        p.kill()
        p.wait()
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            T1 = _check_whole(f)
            old = f["entropy"][:T1].copy()
            last = int(f["step"][T1 - 1])
        assert T1 >= 10
        d2 = Daemon(tmp=d.tmp, data_dir=d.data).start()
        try:
            sim(d2, "killed", "--steps", "5", "--first-step", str(last + 1000), "--layers", "2",
                "--heads", "3", "--rows", "4", "--keys", "32", "--blocking")
            wait_ended(d2, "killed")
        finally:
            assert d2.stop() == 0
        with h5py.File(path, "r") as f:
            T2 = _check_whole(f)
            assert T2 == T1 + 5, (T1, T2)
            assert np.array_equal(f["entropy"][:T1], old)
            assert int(f["step"][T1]) == last + 1000
    finally:
        d.stop()


def case_assembly():
    """Step assembly: out-of-order steps are stored, an incomplete step is
    written after the timeout with its missing layers NaN and counted,
    duplicates and late layers are dropped and counted, sequence gaps are
    stored as lost messages."""
    d = Daemon(extra=["--step-timeout-ms", "300"]).start()
    try:
        rng = np.random.default_rng(7)
        snd = Sender(d.listen, "asm", 2, 3)
        x = random_probs(rng, 3, 2, 6)
        snd.snapshot(10, 0, x)
        snd.snapshot(10, 1, x)
        d.wait(lambda s: s["writer"]["steps_written"] >= 1, what="step 10")
        snd.snapshot(20, 0, x)
        snd.snapshot(20, 0, x)            # duplicate while assembling
        snd.seq += 1                      # one message lost on the way
        snd.snapshot(5, 1, x)             # an earlier step, after 10 was written
        snd.snapshot(5, 0, x)
        d.wait(lambda s: s["writer"]["steps_written"] >= 2, what="steps 10 and 5")
        snd.snapshot(10, 0, x)            # step 10 was written whole: a duplicate
        st = d.wait(lambda s: s["traffic"]["steps_incomplete"] >= 1, what="the timeout")
        assert st["drops"]["duplicate"] == 2 and st["drops"]["late"] == 0, st["drops"]
        snd.snapshot(30, 0, x)
        snd.snapshot(30, 1, x)
        snd.end()
        path = wait_ended(d, "asm")
        with h5py.File(path, "r") as f:
            assert list(f["step"][:]) == [10, 5, 20, 30], f["step"][:]
            assert f["missing"][2].tolist() == [0, 1], f["missing"][:]
            assert np.all(np.isnan(f["entropy"][2, 1])) and np.all(np.isfinite(f["entropy"][2, 0]))
            assert int(f["rows"][2, 1, 0]) == 0
            assert list(f["incomplete"][:]) == [0, 0, 1, 1], f["incomplete"][:]
            assert int(f["lost"][-1]) == 1, f["lost"][:]
        assert "written incomplete" in d.read_log()
        snd.close()
    finally:
        assert d.stop() == 0


def case_idle_run():
    """A run that falls silent is written out and its file closed (not
    marked ended); when it comes back the file is resumed."""
    d = Daemon(extra=["--run-idle-s", "1"]).start()
    try:
        x = random_probs(np.random.default_rng(4), 2, 2, 5)
        snd = Sender(d.listen, "idle", 1, 2)
        snd.snapshot(0, 0, x)
        d.wait(lambda s: s["runs"]["runs"] == 0 and s["writer"]["files_open"] == 0,
               what="the idle run to close")
        path = d.run_file("idle")
        with h5py.File(path, "r") as f:
            assert list(f["step"][:]) == [0] and f["ended"].shape[0] == 0
        snd.snapshot(1, 0, x)
        snd.end()
        d.wait_ended("idle")
        with h5py.File(path, "r") as f:
            assert list(f["step"][:]) == [0, 1], f["step"][:]
            # live dH is taken only against a step written in this session;
            # after a resume the reports compute it from the stored values
            assert list(f["prev_row"][:]) == [-1, -1], f["prev_row"][:]
        assert "closing its file" in d.read_log()
        snd.close()
    finally:
        assert d.stop() == 0


def case_status_and_config():
    d = Daemon().start()
    try:
        out = d.ctl("status")
        for sec in ("server", "runs", "traffic", "drops", "rejects", "queue", "writer", "loop"):
            assert "# " + sec in out, (sec, out)
        assert d.ctl("status queue").startswith("# queue")
        assert d.ctl("bogus").startswith("error:")
        rc, out, err = run_cmd([SINKWATCH, "status", "--control", d.control, "traffic"])
        assert rc == 0 and "rows_per_s" in out, (rc, out, err)
    finally:
        assert d.stop() == 0
    rc, out, err = run_cmd([SINKWATCH, "status", "--control", d.control, "--timeout-ms", "300"])
    assert rc == 2 and "no answer" in err, (rc, err)
    rc, out, err = run_cmd([SINKWATCHD, "--print-config", "--budget-mb", "777"])
    assert rc == 0 and "budget_mb = 777" in out, (out, err)
    rc, _, err = run_cmd([SINKWATCHD, "--check-config", "--budget-mb", "77"])
    assert rc == 2 and "max_message_mb" in err, err
    cfg = os.path.join(d.tmp, "round.conf")
    with open(cfg, "w") as f:
        f.write(out)
    rc, out2, err = run_cmd([SINKWATCHD, "--config", cfg, "--print-config"])
    assert rc == 0 and out2 == out, (out2, err)
    rc, out, err = run_cmd([SINKWATCHD, "--config", cfg, "--check-config"])
    assert rc == 0 and "OK" in out
    bad = os.path.join(d.tmp, "bad.conf")
    with open(bad, "w") as f:
        f.write("# comment\nflush_ms = 100\nflush_ms = fast\n")
    rc, out, err = run_cmd([SINKWATCHD, "--config", bad, "--check-config"])
    assert rc == 2 and "bad.conf:3" in err and "flush_ms" in err, err
    logp = os.path.join(d.tmp, "rotated.log")
    d1 = Daemon(extra=["--log-file", logp]).start()
    try:
        # SIGHUP reopens the log: rotate it away, signal, a new file appears
        os.rename(logp, logp + ".1")
        d1.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while not os.path.exists(logp) and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(logp), "SIGHUP did not reopen the log"
        with open(logp + ".1") as f:
            assert "listening on" in f.read()
        d1.ctl("ping")
        with open(logp) as f:
            assert "log reopened" in f.read()
        # a second daemon may share the data directory (each run is written by
        # one of them, under the run's lock: tests/e2e/forward.py)
        d2 = Daemon(tmp=d1.tmp, data_dir=d1.data).start()
        assert d2.stop() == 0
        assert "another sinkwatchd writes to %s too" % d1.data in d2.read_log(), d2.read_log()
    finally:
        assert d1.stop() == 0
    rc, out, err = run_cmd([SINKWATCHD, "--no-such-option", "1"])
    assert rc == 2 and "unknown option" in err, err


CASES = [(name[5:], fn) for name, fn in sorted(globals().items()) if name.startswith("case_")]

if __name__ == "__main__":
    want = sys.argv[1:]
    res = Results()
    for name, fn in CASES:
        if want and name not in want:
            continue
        res.check(name, fn)
    sys.exit(res.finish())
