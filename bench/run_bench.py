#!/usr/bin/python3
"""`make bench`: every figure side by side in one run, each the median of
repeats, with ratios against numpy, the memory bandwidth and raw ZeroMQ
measured in the same run. Prints the machine, a table, and one line per
target:  TARGET <name> measured=<value> target=<value> ok|MISS
and writes the same to bench/results.json.  Not a test: it asserts nothing.

    make bench            (or: BENCH=bench/bench SINKWATCHD=./sinkwatchd \\
                           /usr/bin/python3 bench/run_bench.py --out bench/results.json)
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("SW_SRCDIR", os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRC, "contrib", "python"))
from swharness import Daemon, free_port  # noqa: E402

BENCH = os.environ.get("BENCH", os.path.join(HERE, "bench"))
REPS = 5


def run_json(args, timeout=600, env=None):
    args = [str(a) for a in args]
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(map(str, args)), p.stderr))
    return json.loads(p.stdout.strip().splitlines()[-1])


def median_time(fn, reps=REPS):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


# ---------------------------------------------------------------- numpy references

def np_rows(x, delta=1e-10, k=0):
    """METRICS §1 and §4 per row, vectorized over rows (float64)."""
    a = x.astype(np.float64)
    S = a.sum(1, keepdims=True)
    a = a / S
    with np.errstate(divide="ignore", invalid="ignore"):
        la = np.where(a > 0, np.log(np.where(a > 0, a, 1.0)), 0.0)
    s = a[:, k]
    w = a[:, 1:].sum(1)
    H = -(a * la).sum(1)
    hb = -(s * np.log(s) + w * np.log(w))
    Hc = np.log(w) - (a[:, 1:] * la[:, 1:]).sum(1) / w
    small = a < delta
    r = small.sum(1, keepdims=True)
    big = np.where(small, 0.0, a).sum(1, keepdims=True)
    lr = np.where(small, np.log(delta), la + np.log((1 - delta * r) / big))
    n = a.shape[1]
    b = np.sqrt((n - 1) / n) * (lr[:, k] - lr[:, 1:].mean(1))
    return s, w, H, hb, Hc, b


def np_logits_rows(z, k=0):
    z = z.astype(np.float64)
    y = z - z.max(1, keepdims=True)
    e = np.exp(y)
    Z = e.sum(1, keepdims=True)
    a = e / Z
    la = y - np.log(Z)
    s = a[:, k]
    w = a[:, 1:].sum(1)
    H = -(a * la).sum(1)
    hb = -(s * np.log(s) + w * np.log(w))
    Hc = np.log(w) - (a[:, 1:] * la[:, 1:]).sum(1) / w
    n = a.shape[1]
    b = np.sqrt((n - 1) / n) * (la[:, k] - la[:, 1:].mean(1))
    return s, w, H, hb, Hc, b


def np_pairs(x):
    """Head-pair work of one layer [H, R, K]: cosine and JS keep/drop, Aitchison."""
    Hh = x.shape[0]
    a = x.astype(np.float64)
    a = a / a.sum(2, keepdims=True)
    c = a[:, :, 1:] / a[:, :, 1:].sum(2, keepdims=True)
    la = np.log(np.maximum(a, 1e-10))
    clr = la[:, :, 1:] - la[:, :, 1:].mean(2, keepdims=True)
    bal = np.sqrt((a.shape[2] - 1) / a.shape[2]) * (la[:, :, 0] - la[:, :, 1:].mean(2))

    def ent(p):
        return -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)

    Ha, Hcc = ent(a), ent(c)
    out = {}
    for i in range(Hh):
        for j in range(i + 1, Hh):
            ck = (a[i] * a[j]).sum(-1) / np.sqrt((a[i] ** 2).sum(-1) * (a[j] ** 2).sum(-1))
            cd = (c[i] * c[j]).sum(-1) / np.sqrt((c[i] ** 2).sum(-1) * (c[j] ** 2).sum(-1))
            jk = ent(0.5 * (a[i] + a[j])) - 0.5 * (Ha[i] + Ha[j])
            jd = ent(0.5 * (c[i] + c[j])) - 0.5 * (Hcc[i] + Hcc[j])
            ps = np.sqrt(np.mean((bal[i] - bal[j]) ** 2))
            pc = np.sqrt(np.mean(((clr[i] - clr[j]) ** 2).sum(-1)))
            out[i, j] = (ck.mean(), cd.mean(), jk.mean(), jd.mean(), ps, pc)
    return out


def make_probs(rng, rows, keys):
    z = rng.normal(size=(rows, keys)).astype(np.float32)
    z[:, 0] += 3.0
    p = np.exp(z - z.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)).astype(np.float32), z


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# ---------------------------------------------------------------- the measurements

def machine():
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "cores": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("Model name", "CPU(s)", "L2 cache", "L3 cache"):
                info[k.strip()] = v.strip()
        flags = [f for f in ("avx2", "avx512f", "avx512dq", "f16c") if f in out]
        info["isa_flags"] = flags
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        info["mem_total"] = f.readline().split(":")[1].strip()
    return info


ROWS_R, ROWS_K = 32768, 2048    # 256 MiB of f32 rows: streamed from memory


def bench_rows(tmp, res):
    rng = np.random.default_rng(1)
    R, K = ROWS_R, ROWS_K
    probs, logits = make_probs(rng, R, K)
    data = {"f32": probs, "f16": probs.astype(np.float16), "bf16": to_bf16(probs),
            "logits_f32": logits}
    sub = 4096                  # numpy timed on a slice (its temporaries are large)
    for name, arr in data.items():
        path = os.path.join(tmp, name + ".raw")
        arr.tofile(path)
        dt, kind = (name, "probs") if not name.startswith("logits") else ("f32", "logits")
        c = run_json([BENCH, "rows", path, R, K, dt, kind, REPS])
        if kind == "logits":
            t = median_time(lambda: np_logits_rows(arr[:sub]), 3)
        else:
            t = median_time(lambda: np_rows(arr[:sub].astype(np.float32)), 3)
        np_eps = sub * K / t
        res["rows"][name] = {"c_elems_per_s": c["elems_per_s"], "numpy_elems_per_s": np_eps,
                             "ratio_vs_numpy": c["elems_per_s"] / np_eps, "isa": c.get("isa")}
        os.unlink(path)
        # the numbers agree: mean entropy over the rows
        if kind == "probs" and name == "f32":
            H = np_rows(arr)[2]
            res["rows"][name]["mean_H_c"] = c["mean_H"]
            res["rows"][name]["mean_H_numpy"] = float(H.mean())


def bench_pairs(res):
    H, R, K = 16, 64, 2048
    c = run_json([BENCH, "pairs", H, R, K, REPS])
    rng = np.random.default_rng(2)
    x = np.stack([make_probs(rng, R, K)[0] for _ in range(H)])
    t = median_time(lambda: np_pairs(x), 3)
    res["pairs"] = {"layer_s_c": c["layer_s"], "rows_only_s_c": c["rows_only_s"],
                    "layer_s_numpy": t, "ratio_vs_numpy": t / c["layer_s"],
                    "isa": c.get("isa"), "log_precision": c.get("log_precision"),
                    "snapshot_all_pairs_s": 24 * c["layer_s"]}


def bench_message(runs=5, isa=None, reps=2 * REPS + 1, mode="hot", rate=None):
    """`bench message` (the daemon's kernels alone on one 4 MiB f16 message:
    rows, pairs, drift) in `runs` processes of `reps` repeats each (at most
    64): the median of their medians (one process alone is at the mercy of a
    busy moment of a shared machine). isa: BENCH_ISA, else the best. mode:
    hot (one buffer, again and again) or fresh (each repeat's message
    written just before by a thread on the other CPU); rate: a repeat every
    1/rate s, asleep between, else back to back."""
    env = dict(os.environ, BENCH_ISA=isa) if isa else None
    args = [BENCH, "message", reps, mode] + (["%.3f" % rate] if rate else [])
    out = [run_json(args, env=env) for _ in range(runs)]
    m = dict(out[0])
    m["kernels_s"] = float(np.median([o["kernels_s"] for o in out]))
    m["kernels_cpu_s"] = float(np.median([o["kernels_cpu_s"] for o in out]))
    m["runs_kernels_s"] = [o["kernels_s"] for o in out]
    m["runs_kernels_cpu_s"] = [o["kernels_cpu_s"] for o in out]
    return m


def bench_other_isas(tmp, res):
    """The kernel figures (rows f32, pairs, message) of every other instruction
    set this CPU runs (bench's BENCH_ISA: AVX2 on an AVX-512 machine), held
    against the numpy figures of this same run: users have both."""
    auto = (res.get("pairs") or {}).get("isa")
    if not auto or "f32" not in res["rows"]:
        raise RuntimeError("needs the rows and pairs steps")
    rng = np.random.default_rng(1)
    path = os.path.join(tmp, "isa_f32.raw")
    make_probs(rng, ROWS_R, ROWS_K)[0].tofile(path)
    try:
        for isa in ("avx512", "avx2"):
            if isa == auto:
                continue
            env = dict(os.environ, BENCH_ISA=isa)
            try:
                c = run_json([BENCH, "rows", path, ROWS_R, ROWS_K, "f32", "probs", REPS], env=env)
            except RuntimeError:
                continue        # not an instruction set of this CPU
            p = run_json([BENCH, "pairs", 16, 64, 2048, REPS], env=env)
            pl = run_json([BENCH, "pairlogs", 2 * REPS + 1], env=env)
            mj = [run_json([BENCH, "message", 2 * REPS + 1], env=env) for _ in range(3)]
            m = [j["kernels_s"] for j in mj]
            mc = [j["kernels_cpu_s"] for j in mj]
            res.setdefault("other_isas", {})[isa] = {
                "rows_f32_elems_per_s": c["elems_per_s"],
                "rows_f32_vs_numpy": c["elems_per_s"] / res["rows"]["f32"]["numpy_elems_per_s"],
                "pairs_layer_s": p["layer_s"], "pairs_log_precision": p.get("log_precision"),
                "pairs_vs_numpy": res["pairs"]["layer_s_numpy"] / p["layer_s"],
                "pair_kernel_elems_per_s": pl.get("f32_elems_per_s"),
                "message_kernels_s": float(np.median(m)),
                "message_kernels_cpu_s": float(np.median(mc))}
    finally:
        os.unlink(path)


BASELINE = os.environ.get("SINKWATCHD_BASELINE")


def bench_baseline(tmp, res, transport):
    """The flood of bench_e2e through the baseline daemon (SINKWATCHD_BASELINE:
    a sinkwatchd built from the tree issue 17 was measured on, f2c10cd, by
    bench/baseline.sh): its processed rate is the "today's processed rate"
    the zero-loss figure is held against, measured in the same run."""
    if not BASELINE:
        print("# baseline_tcp skipped: SINKWATCHD_BASELINE not set (make bench "
              "SINKWATCHD_BASELINE=$(sh bench/baseline.sh) builds and floods it)", flush=True)
        return
    bench_e2e(tmp, res, transport, binary=BASELINE, key="e2e_baseline")
    res["e2e_baseline"][transport]["binary"] = BASELINE
    try:
        res["e2e_baseline"][transport]["commit"] = subprocess.run(
            ["git", "-C", os.path.dirname(os.path.abspath(BASELINE)), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass


def status_fig(d, sec, key):
    return d.status()[sec][key]


def cpu_s(pid):
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_e2e(tmp, res, transport, reps=3, binary=None, key="e2e"):
    """A client flood of 1.4B-shaped snapshots (24 layers x [16, 64, 2048] f16),
    reps times: raw ZeroMQ (a bare SUB, no processing) and the daemon with its
    default configuration, each the median of reps runs. The daemon gets a
    warm-up flood first: sustained means after its heap reached its working
    size (each fresh 4 KiB page is a fault, 16 us on this VM). binary: another
    sinkwatchd (the baseline build), its figures under res[key]."""
    L, H, R, K = 24, 16, 64, 2048
    steps = 24
    n = steps * L
    elems = H * R * K
    ep = endpoint(tmp, transport)
    raw_runs, raw_cpu = [], []
    for i in range(reps):
        rr = subprocess.Popen([BENCH, "rawrecv", ep, str(n + 1)], stdout=subprocess.PIPE, text=True)
        rr.stdout.readline()
        run_json([BENCH, "flood", ep, "raw%d" % i, steps, L, H, R, K, "zc", "blocking"])
        raw = json.loads(rr.communicate(timeout=120)[0].strip().splitlines()[-1])
        raw_runs.append(raw["timed"] / raw["seconds"] if raw["seconds"] > 0 else float("nan"))
        if raw["timed"]:
            raw_cpu.append((1e3 * raw["cpu_s"] / raw["timed"],
                            1e3 * (raw["cpu_s"] - raw["main_thread_cpu_s"]) / raw["timed"]))
    raw_mps = float(np.median(raw_runs))
    d = Daemon(tmp=tmp)
    d.listen = ep
    d.extra = []
    d.binary = binary
    d.start()
    runs = []
    try:
        # every message in (received, then processed or dropped by the
        # budget: the daemon never stalls a sender) and the writer idle
        def settled(want):
            return lambda s: (s["traffic"]["messages"] >= want and s["queue"]["jobs_in_flight"] == 0
                              and s["queue"]["writer_queue"] == 0)
        wsteps = 24
        run_json([BENCH, "flood", ep, "warm-" + transport, wsteps, L, H, R, K, "zc", "blocking"])
        d.wait(settled(wsteps * L + 1), timeout=600, what="the warm-up flood")
        for i in range(reps):
            base = d.status()
            c0 = cpu_s(d.proc.pid)
            t0 = time.time()
            fl = run_json([BENCH, "flood", ep, "e2e-%s-%d" % (transport, i), steps, L, H, R, K,
                           "zc", "blocking"])
            st = d.wait(settled(base["traffic"]["messages"] + n + 1), timeout=600, what="the flood")
            elapsed = time.time() - t0
            cpu = cpu_s(d.proc.pid) - c0
            drops = {k: v - base["drops"].get(k, 0) for k, v in st["drops"].items()
                     if isinstance(v, int)}
            done = st["traffic"]["messages"] - base["traffic"]["messages"] - 1 - sum(drops.values())
            runs.append({"messages_per_s": done / elapsed, "elapsed_s": elapsed, "processed": done,
                         "daemon_cpu_ms_per_message": 1e3 * cpu / done,
                         "send_s": fl["send_s"], "drops": {k: v for k, v in drops.items() if v}})
    finally:
        d.stop()
    mps = float(np.median([r["messages_per_s"] for r in runs]))
    res.setdefault(key, {})[transport] = {
        "snapshots_per_s": mps / L, "messages_per_s": mps, "elems_per_s": mps * elems,
        "raw_zmq_messages_per_s": raw_mps, "ratio_vs_raw_zmq": mps / raw_mps,
        "raw_zmq_cpu_ms_per_message": float(np.median([c[0] for c in raw_cpu])) if raw_cpu else None,
        "raw_zmq_io_cpu_ms_per_message": float(np.median([c[1] for c in raw_cpu])) if raw_cpu else None,
        "daemon_cpu_ms_per_message": float(np.median([r["daemon_cpu_ms_per_message"] for r in runs])),
        "raw_runs_messages_per_s": raw_runs, "runs": runs}


STAGES = ("receive", "zmq_io", "decode", "assemble", "rows", "pairs", "drift", "write")


def start_default(tmp, listen, extra=()):
    """sinkwatchd on its default options (the harness's --flush-ms 100 left
    out), and extra (--isa avx2)."""
    d = Daemon(tmp=tmp)
    d.listen = listen
    args = [os.environ["SINKWATCHD"], "--listen", d.listen, "--control", d.control,
            "--data-dir", d.data] + list(extra)
    d.logf = open(d.log, "ab")
    d.proc = subprocess.Popen(args, stderr=d.logf, stdout=d.logf)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if "pong" in d.ctl("ping", timeout_ms=200):
                return d
        except TimeoutError:
            pass
    raise RuntimeError("sinkwatchd did not answer")


def paced_trial(d, ep, name, dt, rate, seconds, isa=None, kernels=3, paced_kernels=False):
    """One paced send of about `seconds` at `rate` 4 MiB messages/s. Kept up:
    no message dropped (client or daemon), the sender kept its pace, and the
    daemon had every message processed and written within LAG_S of the last
    send (a backlog that only the budget hides shows as lag: with a trial of
    T s, passing bounds the daemon's capacity below by rate * T / (T + LAG_S)).
    kernels: runs of bench message before and after it (f16), back to back
    on a hot buffer; paced_kernels: fresh at the trial's rate as well, the
    trial's kernels alone (else the hot ones are)."""
    L, H, R = 24, 16, 64
    K = 2048 if dt == "f16" else 1024
    steps = max(2, int(np.ceil(rate * seconds / L)))
    n = steps * L
    sample = dt == "f16" and kernels

    def alone(mode, r):
        return bench_message(runs=kernels, isa=isa, reps=63, mode=mode, rate=r) if sample else None

    def ms(a, b):
        return float(np.median(a["runs_kernels_cpu_s"] + b["runs_kernels_cpu_s"])) * 1e3
    # the kernels alone before the trial as well as after: a load that
    # changes while the trial runs moves both halves
    before = alone("fresh", rate) if paced_kernels else None, alone("hot", None)
    base = d.status()
    c0 = cpu_s(d.proc.pid)
    fl = run_json([BENCH, "paced", ep, name, steps, L, H, R, K, dt, "%.3f" % rate],
                  timeout=seconds * 10 + 120)
    t_sent = time.time()
    want = base["traffic"]["messages"] + n + 1
    st = d.wait(lambda s: (s["traffic"]["messages"] >= want and s["queue"]["jobs_in_flight"] == 0
                           and s["queue"]["writer_queue"] == 0), timeout=600, what=name)
    lag = time.time() - t_sent
    drops = {k: v - base["drops"].get(k, 0) for k, v in st["drops"].items() if isinstance(v, int)}
    drops = {k: v for k, v in drops.items() if v}
    cpu = {k: st["cpu"][k + "_s"] - base["cpu"][k + "_s"] for k in STAGES + ("stages", "process")}
    proc = cpu_s(d.proc.pid) - c0
    ok = (not drops and fl["dropped"] == 0 and fl["achieved"] >= 0.97 * rate and lag <= LAG_S)
    # the kernels alone on this trial's message, in the same minute: the
    # overhead's denominator (on this shared machine the same bench gives
    # 2.2 to 3.7 ms from one minute to the next, more than the overhead
    # it would measure). paced_kernels: as the daemon's worker gets its
    # messages, each written just before by a thread on the other CPU, one
    # every 1/rate s, the thread asleep between (on a hot buffer, a core
    # asleep 3.5 ms before each message ran the kernels 1.1x slower than
    # back to back, 20 ms 1.2-1.25x; fresh, 1.0x and 1.1x; in make bench's
    # runs the two read 0.93-1.12 of each other: bench/RESULTS.md, seventh
    # session). 63 repeats a run: 0.3 to 1.3 s of the kernels before and
    # after each trial; the median of the runs' medians, before and after
    # together
    after = alone("fresh", rate) if paced_kernels else None, alone("hot", None)
    late = sum(x["late"] for x in before + after if x and "late" in x)
    hot = ms(before[1], after[1]) if sample else None
    return {"rate": rate, "ok": bool(ok), "messages": n, "elements_per_message": fl["elements"],
            "kernels_alone_cpu_ms": ms(before[0], after[0]) if paced_kernels and sample else hot,
            "kernels_hot_cpu_ms": hot,
            "kernels_late_reps": late,
            "kernels_isa": after[1]["isa"] if sample else None,
            "done_messages_per_s": n / (fl["send_s"] + lag),
            "achieved": fl["achieved"], "max_late_s": fl["max_late_s"], "lag_s": lag,
            "drops": drops, "client_dropped": fl["dropped"],
            "cpu_ms_per_message": {k: 1e3 * v / (n + 1) for k, v in cpu.items()},
            "proc_cpu_ms_per_message": 1e3 * proc / (n + 1)}


LAG_S = 0.5


def bench_ingest(tmp, res, transport, seconds=10.0, max_trials=7):
    """The highest paced rate of 4 MiB messages ([16, 64, 2048] f16, [16, 64,
    1024] f32) the daemon on its default options takes with zero loss: a
    search on the rate (up by 1.5x from a start until a trial fails, down
    likewise until one passes, then bisection), each trial a fresh run of
    about `seconds`. The daemon's CPU per message by stage comes from its
    own counters (status cpu) over the best passing trial."""
    ep = endpoint(tmp, transport)
    d = start_default(tmp, ep)
    out = {}
    try:
        # the daemon's heap grows to its working size (a fault per fresh page)
        paced_trial(d, ep, "paced-warm-" + transport, "f16", 20.0, 3.0, kernels=0)
        for dt in ("f16", "f32"):
            trials = []
            flood = res["e2e"].get(transport, {}).get("messages_per_s")
            r = max(10.0, flood if flood else 60.0)
            k = 0

            def trial(rate):
                t = paced_trial(d, ep, "paced-%s-%s-%d" % (transport, dt, len(trials)), dt, rate,
                                seconds)
                trials.append(t)
                return t["ok"]
            lo, hi = (r / 2, None) if trial(r / 2) else (None, r / 2)
            while lo is None and len(trials) < max_trials:
                hi_try = hi / 1.5
                if trial(hi_try):
                    lo = hi_try
                else:
                    hi = hi_try
            while hi is None and len(trials) < max_trials:
                up = lo * 1.5 if k else r
                k += 1
                if trial(up):
                    lo = up
                else:
                    hi = up
            while lo and hi and (hi - lo) / lo > 0.08 and len(trials) < max_trials:
                mid = (lo + hi) / 2
                if trial(mid):
                    lo = mid
                else:
                    hi = mid
            best = max((t for t in trials if t["ok"]), key=lambda t: t["rate"], default=None)
            epm = trials[0]["elements_per_message"]
            out[dt] = {"zero_loss_messages_per_s": lo or 0.0,
                       "zero_loss_elems_per_s": (lo or 0.0) * epm,
                       "first_failing_rate": hi, "elements_per_message": epm,
                       "trial_s": seconds, "lag_s": LAG_S,
                       "cpu_ms_per_message": best["cpu_ms_per_message"] if best else None,
                       # the kernels alone: the median over this search's trials
                       # (the same daemon session, 3 runs before and 3 after
                       # each: about 40 runs over 2-3 minutes), not the best
                       # trial's alone; back to back on a hot buffer: at the
                       # edge of capacity the workers do not idle between
                       # messages
                       "kernels_alone_cpu_ms": float(np.median(
                           [t["kernels_alone_cpu_ms"] for t in trials
                            if t["kernels_alone_cpu_ms"]])) if best and dt == "f16" else None,
                       "kernels_isa": best["kernels_isa"] if best else None,
                       "proc_cpu_ms_per_message": best["proc_cpu_ms_per_message"] if best else None,
                       "trials": trials}
    finally:
        d.stop()
    res.setdefault("ingest", {})[transport] = out


def endpoint(tmp, transport):
    """A fresh endpoint of transport ("tcp" on loopback, or "ipc" in tmp)."""
    if transport == "ipc":
        return "ipc://%s/swi-%d.sock" % (tmp, free_port())
    return "tcp://127.0.0.1:%d" % free_port()


def bench_overhead(tmp, res, seconds=10.0, trials=5):
    """The daemon's CPU per f16 message with each instruction set of this
    CPU forced (--isa avx512, --isa avx2 on an AVX-512 machine), over each
    transport the capacity search ran: the overhead's figures. One daemon
    per instruction set and transport, all started first; then `trials`
    rounds, each a paced trial of every daemon in turn (the order reversed
    every other round), at half the zero-loss rate of the automatic choice
    on that transport (a rate every one keeps up with; CPU per message, not
    capacity, is the figure), by its counters, each with 3 runs of its
    kernels alone before and 3 after, in the same minute. The stages' mean
    over the trials, the kernels' median of the trials' medians (one set's
    9 runs read 4.2 and 5.2 ms for the same kernels minutes apart).

    In turns, not one daemon's trials after another's: the machine's load
    moves over minutes, and it moves the daemon's kernels more than the
    same kernels alone. Until 2026-12-06 each daemon took its five trials
    in a row (about 80 s); in two runs 20 minutes apart the kernels in the
    daemon ran 1.10x and 1.20x as long as alone over tcp and ipc in one,
    1.21x and 1.04x in the other, while two identical daemons in turns
    read within 1-3% of each other (bench/RESULTS.md, thirteenth
    session): the line measured the minute as much as the transport."""
    auto = (res.get("message") or {}).get("isa")
    if not auto:
        return
    cfgs = []
    for tr in ("tcp", "ipc"):
        f = ((res.get("ingest") or {}).get(tr) or {}).get("f16") or {}
        rate = 0.5 * (f.get("zero_loss_messages_per_s") or 0)
        for isa in ("avx512", "avx2"):
            if rate > 0 and (isa == auto or isa in res.get("other_isas", {})):
                cfgs.append((isa, tr, rate))
    ds = {}
    try:
        for isa, tr, rate in cfgs:
            sub = os.path.join(tmp, "overhead-%s-%s" % (isa, tr))
            os.makedirs(sub, exist_ok=True)
            ep = endpoint(sub, tr)
            d = start_default(sub, ep, ["--isa", isa])
            ds[isa, tr] = (d, ep, rate)
            paced_trial(d, ep, "paced-warm-%s-%s" % (tr, isa), "f16", 20.0, 3.0, kernels=0)
        ts = {c: [] for c in ds}
        for i in range(trials):
            for isa, tr in (list(ds) if i % 2 == 0 else list(ds)[::-1]):
                d, ep, rate = ds[isa, tr]
                ts[isa, tr].append(paced_trial(
                    d, ep, "paced-%s-f16-%s-%d" % (tr, isa, i), "f16", rate, seconds, isa=isa,
                    kernels=3, paced_kernels=True))
        for (isa, tr), (d, _, _) in ds.items():
            st = d.status()
            t = overhead_trials(ts[isa, tr])
            t["kernel_isa"] = next((v["kernel_isa"] for v in st.values()
                                    if isinstance(v, dict) and "kernel_isa" in v), None)
            res.setdefault("ingest_isa", {}).setdefault(isa, {})[tr] = t
    finally:
        for d, _, _ in ds.values():
            d.stop()


def overhead_trials(ts):
    """One daemon's paced trials ts as one: the first's fields, every trial
    kept up, the stages' mean, the kernels' median, each trial's own."""
    t = dict(ts[0])
    t["ok"] = all(x["ok"] for x in ts)
    t["messages"] = sum(x["messages"] for x in ts)
    t["cpu_ms_per_message"] = {k: float(np.mean([x["cpu_ms_per_message"][k] for x in ts]))
                               for k in ts[0]["cpu_ms_per_message"]}
    for k in ("kernels_alone_cpu_ms", "kernels_hot_cpu_ms"):
        t[k] = float(np.median([x[k] for x in ts]))
    t["kernels_late_reps"] = sum(x["kernels_late_reps"] for x in ts)
    t["trials"] = [{"cpu_ms_per_message": x["cpu_ms_per_message"],
                    "kernels_alone_cpu_ms": x["kernels_alone_cpu_ms"],
                    "kernels_hot_cpu_ms": x["kernels_hot_cpu_ms"], "ok": x["ok"]}
                   for x in ts]
    return t


def overhead_split(c, k):
    """(ratio, daemon ms outside ZeroMQ's I/O threads, kernels alone ms, the
    daemon's kernel stages ms) of a daemon's CPU per message by stage c and
    its kernels alone k ms."""
    x = c["stages"] - c["zmq_io"]
    return x / k, x, k, c["rows"] + c["pairs"] + c["drift"]


def trial_overhead(t):
    """A paced trial's overhead: the daemon's CPU per message outside
    ZeroMQ's I/O threads over its kernels alone right after, or None."""
    c, k = t.get("cpu_ms_per_message"), t.get("kernels_alone_cpu_ms")
    return overhead_split(c, k)[0] if c and k else None


def bench_training(tmp, res, steps=100):
    """The probe's cost inside training: contrib/examples/train_tiny_gpt.py on
    CPU (its defaults: 2 layers x 4 heads, d_model 64, context 64, batch 16,
    a probe batch of 2, one torch thread), streaming to a daemon on its
    default options, with a probe every 1, 10 and 100 steps, the rowstats
    path beside the rows at every 10, and no probe. The share is the probe's
    cost over the training loop's without it, measured in the training
    thread's CPU time (time.thread_time: other processes on the machine do
    not inflate it) and by the wall clock, split into the forward pass with
    attention weights (with saving the model's flags and generators), the
    copy (row selection, cast or rowstats, copy to host) and the send."""
    ep = endpoint(tmp, "tcp")
    d = start_default(tmp, ep)
    ex = os.path.join(SRC, "contrib", "examples", "train_tiny_gpt.py")
    runs = {}
    try:
        for name, args in (("none", ["--no-probe"]), ("every1", ["--every", "1"]),
                           ("every10", ["--every", "10"]), ("every100", ["--every", "100"]),
                           ("every10_rowstats", ["--every", "10", "--rowstats"])):
            p = subprocess.run([sys.executable, ex, "--connect", ep, "--steps", str(steps),
                                "--log-every", "0", "--threads", "1", "--seed", "1",
                                "--run", "train-" + name] + args,
                               capture_output=True, text=True, timeout=3600)
            if p.returncode != 0:
                raise RuntimeError("%s: %s" % (name, p.stderr[-2000:]))
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("probe stats: ")][-1]
            runs[name] = json.loads(line[len("probe stats: "):])
    finally:
        d.stop()
    out = {"steps": steps, "runs": runs}
    for name, r in runs.items():
        if not r["probes"]:
            continue
        n = r["probes"]
        train_cpu = (r["loop_cpu_s"] * 1e3 - r["cpu_ms_total"]) / r["steps"]     # ms a step
        train_wall = (r["loop_s"] * 1e3 - r["ms_total"]) / r["steps"]
        every = r["every"]
        part = {k: r["cpu_ms_%s_total" % k] / n for k in ("capture", "copy", "send")}
        part["rest"] = r["cpu_ms_total"] / n - sum(part.values())
        out[name] = {"every": every, "probes": n, "kind": r["kind"], "dtype": r["dtype"],
                     "bytes_per_probe": r["bytes_mean"],
                     "train_step_cpu_ms": train_cpu, "train_step_wall_ms": train_wall,
                     "probe_cpu_ms": r["cpu_ms_total"] / n, "probe_wall_ms": r["ms_total"] / n,
                     "share_cpu": r["cpu_ms_total"] / n / (every * train_cpu),
                     "share_wall": r["ms_total"] / n / (every * train_wall),
                     "share_cpu_by_part": {k: v / (every * train_cpu) for k, v in part.items()},
                     "probe_cpu_ms_by_part": part}
    if "none" in runs:
        out["no_probe_step_cpu_ms"] = runs["none"]["loop_cpu_s"] * 1e3 / steps
        out["no_probe_step_wall_ms"] = runs["none"]["loop_s"] * 1e3 / steps
    res["training"] = out


def bench_allpairs(tmp, res):
    """One 1.4B snapshot with every pair metric on every row."""
    res["pairs"]["snapshot_default_s"] = 24 * (res["pairs"]["rows_only_s_c"] +
                                               res["pairs"]["layer_s_c"] * 8 / 64)


def bench_client(tmp, res, reps=3):
    """A send every 10 ms of busy work (400 MiB/s, what the daemon keeps up
    with), each percentile the median over reps runs of n sends; beside each
    send a floor operation (header encode + a small allocation) is timed in
    the same loop, so the machine's own noise is measured with it."""
    n, size, gap_us = 600, 4 << 20, 10000
    runs = {"daemon_up": [], "daemon_down": []}
    for _ in range(reps):
        d = Daemon(tmp=tmp).start()
        try:
            runs["daemon_up"].append(run_json([BENCH, "sendcost", d.listen, n, size, gap_us]))
        finally:
            d.stop()
        runs["daemon_down"].append(run_json([BENCH, "sendcost", endpoint(tmp, "tcp"), n, size, gap_us]))
    res["client"] = {}
    for k, rs in runs.items():
        m = {f: float(np.median([r[f] for r in rs])) for f in rs[0]}
        m["runs"] = rs
        res["client"][k] = m


def bench_visibility(tmp, res):
    import h5py
    from sinkwatch import Client
    d = Daemon(tmp=tmp, extra=[]).start()
    # the daemon's default flush cadence (the harness sets 100 ms: undo it)
    d.stop()
    d = Daemon(tmp=tmp)
    d.start_args_default = True
    args = [os.environ["SINKWATCHD"], "--listen", d.listen, "--control", d.control,
            "--data-dir", d.data]
    d.logf = open(d.log, "ab")
    d.proc = subprocess.Popen(args, stderr=d.logf, stdout=d.logf)
    time.sleep(0.5)
    flush_ms = 500
    lat = []
    try:
        c = Client("vis", 1, 2, endpoint=d.listen, blocking=True, block_timeout=10)
        x = np.full((2, 4, 16), 1 / 16, dtype=np.float32)
        c.send(0, 0, x)
        path = d.run_file("vis")
        deadline = time.time() + 20
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        with h5py.File(path, "r", libver="latest", swmr=True) as f:
            ds = f["step"]
            for i in range(1, 41):
                ds.refresh()
                T0 = ds.shape[0]
                t0 = time.time()
                c.send(i, 0, x)
                while True:
                    ds.refresh()
                    if ds.shape[0] > T0:
                        break
                    if time.time() - t0 > 5:
                        break
                    time.sleep(0.002)
                lat.append(time.time() - t0)
                time.sleep(0.05 + 0.013 * (i % 7))
        c.close()
    finally:
        d.stop()
    lat = np.array(lat)
    res["visibility"] = {"p50_s": float(np.percentile(lat, 50)),
                         "p99_s": float(np.percentile(lat, 99)), "flush_ms": flush_ms}


def bench_memory(tmp, res):
    """Peak RSS under a 10x flood with the default budget: two clients at once,
    each sending 5x the budget as fast as it can, one blocking (all of it reaches
    the daemon), one non-blocking (what does not fit is dropped and counted);
    every message is processed or counted as a drop (client queue, daemon budget)."""
    d = Daemon(tmp=tmp)
    args = [os.environ["SINKWATCHD"], "--listen", d.listen, "--control", d.control,
            "--data-dir", d.data]
    d.logf = open(d.log, "ab")
    d.proc = subprocess.Popen(args, stderr=d.logf, stdout=d.logf)
    time.sleep(0.5)
    budget = 512 << 20
    L, H, R, K = 24, 16, 64, 2048
    msg = H * R * K * 2
    steps = max(1, (5 * budget) // (msg * L))
    try:
        procs = [subprocess.Popen([BENCH, "flood", d.listen, "mem%d" % i, str(steps), str(L),
                                   str(H), str(R), str(K), "zc"] + (["blocking"] if i == 0 else []),
                                  stdout=subprocess.PIPE, text=True) for i in range(2)]
        fls = [json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in procs]
        sent = sum(f["sent"] for f in fls)
        st = d.wait(lambda s: s["traffic"]["messages"] >= sent and
                    s["queue"]["jobs_in_flight"] == 0 and s["queue"]["writer_queue"] == 0,
                    timeout=900, what="the memory flood")
        with open("/proc/%d/status" % d.proc.pid) as f:
            hwm = [ln for ln in f if ln.startswith("VmHWM")][0].split()[1]
        peak = int(hwm) * 1024
        received = st["traffic"]["messages"]
        drops = {k: v for k, v in st["drops"].items() if isinstance(v, int) and v}
    finally:
        d.stop()
    attempted = 2 * steps * L + 2       # the layers and one end message per client
    client_dropped = sum(f["dropped"] for f in fls)
    res["memory"] = {"peak_rss": peak, "budget": budget, "clients": 2,
                     "client_attempted": attempted, "client_sent": sent,
                     "client_dropped": client_dropped, "daemon_received": received,
                     "daemon_drops": drops, "steps": steps,
                     "accounted": received == sent and sent + client_dropped == attempted}


# The kernels' bound: the rate at which this core issues each kernel's
# hottest loop as compiled, its data dependences removed (bench/mca.py
# --probes builds the probe from the loop's own instructions; issue_bound()
# runs it), beside the kernel in the same minutes. No model: every
# instruction takes the pipes it takes on this core. Until 2026-12-05 the
# bound was the loop's FMA-class and vector operations at `bench fma`'s
# rates (FMAs alone; FMAs mixed with adds), still printed beside
# (pipes_bound): it takes every vector operation at the mixed rate, and
# this core (Zen 5) issues integer operations faster than that (3.5-3.9 a
# cycle beside FMAs) and conversions and permutes slower (1.2-1.5 a cycle
# alone): it was neither a bound nor tight. LLVM 14's llvm-mca has no
# model of Zen 4/5; its cycles are printed as information. (function,
# elements a loop, recorded counts for a tree without gcc -S: FMA-class,
# vector operations)
KERNEL_LOOPS = {("rows", "avx512"): ("p512_f32s", 32, 38, 87), ("rows", "avx2"): ("p256_f32", 8, 19, 42),
                ("pairs", "avx512"): ("pair512s", 8, 20, 39), ("pairs", "avx2"): ("pair256", 16, 76, 177)}
# the reference loop with each kernel's kind of instructions on its chains
# (bench/refloops.c): float/double conversions (the f32 rows, pair256), a
# two-table permute (pair512s: 4 permutes and 2 conversions a loop; its
# ablation gained most without the permutes)
REF_KIND = {("rows", "avx512"): "v", ("rows", "avx2"): "v", ("pairs", "avx512"): "p",
            ("pairs", "avx2"): "v"}
REF_LABEL = {"": "", "p": "+permute", "v": "+cvt"}
# A kernel's TARGET: 0.85 of what the best reference loop with its kind of
# instructions reaches of its own probe (kernel_reference(), which says
# why); else 0.85 of its probe (or of the bandwidth). Until 2026-12-06 it
# was 0.85 of the probe everywhere: a line that a well-formed loop of the
# kernel's kind does not reliably meet (bench/RESULTS.md, seventh session).
KERNEL_TARGET = 0.85
OVERHEAD_TARGET = 1.3


def kernel_loops(res, probes=None):
    """{function: {fma, vec, elements, mca_cycles, probe, ...}}: bench/mca.py
    on this tree, else the recorded counts. probes: a folder where mca.py
    builds each loop's probe (its instructions without their dependences)."""
    if "loops" not in res or (probes and not res.get("loops_probes")):
        got = {}
        try:
            got = json.loads(subprocess.run(
                [sys.executable, os.path.join(HERE, "mca.py"), "--json", "--builddir",
                 os.path.dirname(os.path.dirname(os.path.abspath(BENCH)))] +
                (["--probes", probes] if probes else []), capture_output=True,
                text=True, timeout=300, check=True).stdout.strip().split("\n")[-1])
        except (subprocess.SubprocessError, ValueError, OSError):
            got = {}
        res["loops"] = {fn: got.get(fn, {"elements": el, "fma": f, "vec": v, "mca_cycles": None,
                                         "mca_model": "-"})
                        for fn, el, f, v in KERNEL_LOOPS.values()}
        res["loops_live"] = bool(got)
        # bench/refloops.c's loops and their probes: the calibration
        res["refloop_probes"] = {fn: c["probe"] for fn, c in got.items()
                                 if fn.startswith("ref") and c.get("probe")}
        res["loops_probes"] = bool(probes and got)
    return res["loops"]


def issue_bound(res, kernel, isa):
    """Elements a second at which this core issues kernel's loop on isa
    without its dependences (mca.py's probe, run now), or None."""
    loop = KERNEL_LOOPS.get((kernel, isa))
    c = kernel_loops(res).get(loop[0]) if loop else None
    if not c or not c.get("probe"):
        return None
    try:
        return float(subprocess.run([c["probe"], "2000000"], capture_output=True, text=True,
                                    timeout=60, check=True).stdout) * c["elements"]
    except (subprocess.SubprocessError, ValueError, OSError):
        return None     # an instruction set this CPU lacks


def pipes_bound(res, kernel, isa, rates=None):
    """(elements a second the core's pipes allow kernel's loop on isa, which
    pipes bind: "fma" or "vector"), or None. rates: a `bench fma` object,
    else this run's first."""
    loop = KERNEL_LOOPS.get((kernel, isa))
    w = "512" if isa == "avx512" else "256"
    f = rates or res.get("fma") or {}
    fma, vec = f.get("fma%s_per_s" % w), f.get("vec%s_per_s" % w)
    if not loop or not fma or not vec:
        return None
    c = kernel_loops(res)[loop[0]]
    t_fma, t_vec = c["fma"] / fma, c["vec"] / vec
    return c["elements"] / max(t_fma, t_vec), "fma" if t_fma >= t_vec else "vector"


def bench_kernel_bounds(tmp, res, rounds=7):
    """Each kernel against its bound, in turns: `bench fma`, then the pair
    kernel (bench pairlogs: rows resident in L1/L2) and the row kernel (bench
    rows: f32 rows streamed from memory), `rounds` times for each instruction
    set of this CPU; each round's kernel rates over the bounds from that
    round's issue rates (bounds() takes the best of each). A kernel's rate
    here moves by 15% from one minute to the next (other tenants): a ratio of
    two figures taken a minute apart measured the machine's load as much as
    the kernel."""
    kernel_loops(res, probes=os.path.join(tmp, "probes"))
    rng = np.random.default_rng(1)
    path = os.path.join(tmp, "kb_f32.raw")
    make_probs(rng, ROWS_R, ROWS_K)[0].tofile(path)
    bw = (res.get("bandwidth") or {}).get("f32_per_s")
    out = {}
    try:
        for isa in ("avx512", "avx2"):
            env = dict(os.environ, BENCH_ISA=isa)
            for _ in range(rounds):
                try:
                    r = run_json([BENCH, "rows", path, ROWS_R, ROWS_K, "f32", "probs", REPS],
                                 env=env)
                except RuntimeError:
                    break       # not an instruction set of this CPU
                try:
                    rates = run_json([BENCH, "fma"])
                    p = run_json([BENCH, "pairlogs", 2 * REPS + 1], env=env)
                except RuntimeError:
                    continue    # a round lost, the others kept
                refloop_round(res, isa)
                for kernel, got in (("rows", r["elems_per_s"]), ("pairs", p.get("f32_elems_per_s"))):
                    pb = pipes_bound(res, kernel, isa, rates)
                    if not got or not pb:
                        continue
                    bound, what = pb[0], "pipes"
                    if kernel == "rows" and bw and bw < bound:
                        bound, what = bw, "bandwidth"
                    out.setdefault("%s/%s" % (kernel, isa), []).append(
                        {"measured": got, "bound": bound, "what": what, "binds": pb[1],
                         "ratio": got / bound, "pipes": pb[0],
                         "issue": issue_bound(res, kernel, isa)})
    finally:
        os.unlink(path)
    res["kernel_bounds"] = out


def refloop_round(res, isa):
    """One round of bench/refloops.c's loops of isa, each beside its probe
    (res["refloops"][name]: a list of {measured, probe} in loops a second)."""
    w = "512" if isa == "avx512" else "256"
    for fn, probe in sorted((res.get("refloop_probes") or {}).items()):
        if not fn.startswith("ref" + w):
            continue
        try:
            got = run_json([BENCH, "refloop", fn]).get("loops_per_s")
            pr = float(subprocess.run([probe, "2000000"], capture_output=True, text=True,
                                      timeout=60, check=True).stdout)
        except (RuntimeError, subprocess.SubprocessError, ValueError, OSError):
            continue
        if got:
            res.setdefault("refloops", {}).setdefault(fn, []).append(
                {"measured": got, "probe": pr})


def refloop_fractions(res):
    """{isa: [(chains, depth, variant "" "p" "v", best measured / best probe,
    rounds)]}: what well-formed loops reach of their probes on this core,
    from bench_kernel_bounds' rounds."""
    out = {}
    for fn, rounds in sorted((res.get("refloops") or {}).items()):
        m = re.match(r"ref(512|256)_c(\d+)d(\d+)([pv]?)$", fn)
        if not m or not rounds:
            continue
        x = max(r["measured"] for r in rounds) / max(r["probe"] for r in rounds)
        out.setdefault("avx512" if m.group(1) == "512" else "avx2", []).append(
            (int(m.group(2)), int(m.group(3)), m.group(4), x, len(rounds)))
    return out


def kernel_reference(res, kernel, isa, rounds):
    """(the fraction of its probe that the best reference loop with kernel's
    kind of instructions on isa reaches, 2 or 4 chains of 8 FMAs, its
    label), or None where the 4-chain one did not run. Only loops that ran
    in at least half of the kernel's `rounds` count (the best of fewer
    rounds against the kernel's best of more would lower the bar). These
    kinds read 0.76-0.82 with 2 chains and 0.80-0.87 with 4, either ahead
    in a given run (bench/RESULTS.md, seventh session)."""
    kind = REF_KIND.get((kernel, isa))
    got = {c: (x, "%dx%d%s" % (c, dp, REF_LABEL[v]))
           for c, dp, v, x, n in refloop_fractions(res).get(isa, [])
           if dp == 8 and v == kind and c in (2, 4) and 2 * n >= rounds}
    return max(got.values()) if 4 in got else None


def kernel_targets(res):
    """{(kernel, isa): (name, measured, target, its basis)}: each kernel
    against the tighter of its bounds, min(its compute bound, the read
    bandwidth for rows), as the issue asks ("rows at >= 0.85 of min(FMA
    bound, bandwidth bound)"). The compute bound: what the best matching
    reference loop reaches of its probe, times the kernel's probe (the
    line: the kernel's fraction of its probe over the reference's), or,
    where no reference ran, the probe or the pipes bound itself. Until
    2026-12-06 (eleventh session) a rows line switched to the bandwidth as
    soon as it read under the probe, not under the reference's share of
    it: where the bandwidth fell between the two, the line dropped by the
    reference's fraction (0.69 where it reads 0.81 now, in one run) on a
    2% difference between two noisy readings. Now it moves with both
    readings."""
    out = {}
    bw = (res.get("bandwidth") or {}).get("f32_per_s")
    for (kernel, isa), (got, bound, what, x, n, _, _) in sorted(bounds(res).items()):
        ref = kernel_reference(res, kernel, isa, n) if what == "issue" else None
        # the bandwidth's line: the rows stream their data from memory
        mem = got / bw if kernel == "rows" and bw and what != "bandwidth" else None
        if ref:
            name, line = "%s_vs_reference_loop[%s]" % (kernel, isa), x / ref[0]
            basis = "%.2f of its probe, where %s reaches %.2f of its own" % (x, ref[1], ref[0])
        else:
            name, line, basis = ("%s_vs_%s_bound[%s]" % (kernel, what, isa), x,
                                 "the %s bound" % what)
        if mem is not None and mem > line:
            basis = "the bandwidth bound, tighter than %s (%.2f)" % (basis, line)
            name, line = "%s_vs_bandwidth_bound[%s]" % (kernel, isa), mem
        elif mem is not None:
            basis += "; the bandwidth bound %.2f" % mem
        out[kernel, isa] = (name, line, KERNEL_TARGET, basis)
    return out


def kernel_figures(res):
    """{isa: {"rows": elem/s, "pairs": pair-keys/s}} for every ISA measured."""
    out = {}
    if "f32" in res["rows"]:
        out.setdefault(res["rows"]["f32"].get("isa"), {})["rows"] = res["rows"]["f32"]["c_elems_per_s"]
    if res.get("pairlogs", {}).get("f32_elems_per_s"):
        out.setdefault(res["pairlogs"]["isa"], {})["pairs"] = res["pairlogs"]["f32_elems_per_s"]
    for isa, o in res.get("other_isas", {}).items():
        out.setdefault(isa, {})["rows"] = o["rows_f32_elems_per_s"]
        if o.get("pair_kernel_elems_per_s"):
            out[isa]["pairs"] = o["pair_kernel_elems_per_s"]
    return out


def bounds(res):
    """{(kernel, isa): (measured, bound, what bounds it, ratio, rounds, which
    pipes bind, the pipes' bound)}: over bench_kernel_bounds' rounds where it
    ran, the kernel's best rate over the best bound (what others run beside
    it only ever slows a loop down, the probes and the FMA loops of `bench
    fma` as much as the kernels: the best of each is what the core does
    undisturbed), else this run's kernel figures over the bound from its
    first `bench fma`. The bound: the issue probe's (the loop's own
    instructions, each on its own pipes) where it ran (kernel_targets()
    sets the bandwidth beside it for rows); else the pipes' (operation
    counts at the FMA and mixed rates), or the bandwidth where lower."""
    out = {}
    for key, rounds in (res.get("kernel_bounds") or {}).items():
        kernel, isa = key.split("/")
        got = max(r["measured"] for r in rounds)
        best = max(rounds, key=lambda r: r["bound"])
        pipes = max((r["pipes"] for r in rounds if r.get("pipes")), default=None)
        issue = max((r["issue"] for r in rounds if r.get("issue")), default=None)
        bound, what = best["bound"], best["what"]
        if issue:
            # the bandwidth, for rows: kernel_targets()
            bound, what = issue, "issue"
        out[kernel, isa] = (got, bound, what, got / bound, len(rounds), best["binds"], pipes)
    if out:
        return out
    bw = (res.get("bandwidth") or {}).get("f32_per_s")
    for isa, k in kernel_figures(res).items():
        pb = pipes_bound(res, "rows", isa)
        if "rows" in k and pb and bw:
            b = min(pb[0], bw)
            out["rows", isa] = (k["rows"], b, "pipes" if pb[0] <= bw else "bandwidth",
                                k["rows"] / b, 1, pb[1], pb[0])
        pb = pipes_bound(res, "pairs", isa)
        if "pairs" in k and pb:
            out["pairs", isa] = (k["pairs"], pb[0], "pipes", k["pairs"] / pb[0], 1, pb[1], pb[0])
    return out


def overhead(res):
    """{(isa, transport): overhead_split's four, how, every trial kept up}:
    the daemon's CPU per 4 MiB f16 message by its own counters, less its
    ZeroMQ I/O threads' (zmq_io), over its kernels alone on the same
    message as the daemon gets it (bench message fresh at the trial's rate,
    same instruction set, run before and after each trial: the same minutes
    of a shared machine). From bench_overhead's trials at half the zero-loss
    rate: the mean of the trials' stages over the median of the trials'
    kernel medians (a trial's own ratio pairs 10 s of the daemon with about
    a second of its kernels, a sample of one moment: 1.23 to 1.46 in one
    set of five whose means give 1.29); where those did not run, the
    capacity search's fastest passing trial over the median of its kernels
    back to back (at capacity the daemon does not idle). The last field:
    every trial kept up."""
    out = {}
    # CPU time on both sides (the daemon's stages count its threads' CPU):
    # a loaded machine's time slices given to others count in neither
    for tr, o in res.get("ingest", {}).items():
        f = o.get("f16", {})
        c, k = f.get("cpu_ms_per_message"), f.get("kernels_alone_cpu_ms")
        if c and k:
            isa = f.get("kernels_isa") or (res.get("message") or {}).get("isa")
            out[isa, tr] = overhead_split(c, k) + ("the fastest passing trial of the capacity "
                                                   "search", True)
    for isa, o in res.get("ingest_isa", {}).items():
        for tr, t in o.items():
            if not t.get("kernels_alone_cpu_ms"):
                continue
            # a trial that fell behind (drops, lag) divides by messages sent,
            # not taken: its figure is not one, and its line cannot pass
            out[isa, tr] = overhead_split(t["cpu_ms_per_message"], t["kernels_alone_cpu_ms"]) + (
                "%d trials at %.0f msg/s, their mean over the median of their kernels' medians%s%s"
                % (len(t.get("trials", [])), t["rate"],
                   ", fresh at that rate" if "kernels_hot_cpu_ms" in t else "",
                   "" if t["ok"] else "; A TRIAL FELL BEHIND"),
                bool(t["ok"]))
    return out


def targets(res):
    t = []
    for _, (name, x, target, _) in sorted(kernel_targets(res).items()):
        t.append((name, x, target, x >= target))
    for (isa, tr), (x, _, _, _, _, kept_up) in sorted(overhead(res).items()):
        t.append(("overhead_%s_daemon_vs_kernels[%s]" % (tr, isa), x, OVERHEAD_TARGET,
                  x <= OVERHEAD_TARGET and kept_up))
    for tr, o in res.get("ingest", {}).items():
        if tr == "tcp" and o.get("f16", {}).get("cpu_ms_per_message"):
            x = o["f16"]["cpu_ms_per_message"]["stages"]
            t.append(("daemon_cpu_ms_per_4mib_f16_message", x, 10.0, x <= 10))
    if res.get("training", {}).get("every10"):
        x = res["training"]["every10"]["share_cpu"]
        t.append(("probe_share_of_training_every10", x, 0.01, x <= 0.01))
    if "client" in res:
        zc = res["client"]["daemon_up"]["zc_p99_us"]
        zcd = res["client"]["daemon_down"]["zc_p99_us"]
        t.append(("client_zc_p99_us_up", zc, 20.0, zc <= 20))
        t.append(("client_zc_p99_us_down", zcd, 20.0, zcd <= 20))
    if "visibility" in res:
        v = res["visibility"]
        lim = 1.5 * v["flush_ms"] / 1000
        t.append(("visibility_p99_s", v["p99_s"], lim, v["p99_s"] <= lim))
    if "memory" in res:
        m = res["memory"]
        lim = m["budget"] + (64 << 20)
        t.append(("memory_peak_rss", m["peak_rss"], lim, m["peak_rss"] <= lim and m["accounted"]))
    return t


def print_bounds(res):
    """The machine's bounds, measured in this run, and each kernel against its own."""
    if "bandwidth" in res:
        print("BOUND read_bandwidth_one_core %.3g GB/s = %.3g f32/s" %
              (res["bandwidth"]["bytes_per_s"] / 1e9, res["bandwidth"]["f32_per_s"]))
    f = res.get("fma") or {}
    if f.get("clock_hz"):
        print("BOUND clock_one_core %.3g GHz (dependent integer adds, before and after)" %
              (f["clock_hz"] / 1e9))
    for w in (512, 256):
        if f.get("fma%d_per_s" % w):
            print("BOUND issue_%d_one_core %.3g FMAs/s (%.2f a cycle), %.3g vector operations/s "
                  "with FMAs and adds mixed (%.2f a cycle)" %
                  (w, f["fma%d_per_s" % w], f["fma%d_per_s" % w] / f["clock_hz"],
                   f["vec%d_per_s" % w], f["vec%d_per_s" % w] / f["clock_hz"]))
    for tr, e in res.get("e2e", {}).items():
        if e.get("raw_zmq_cpu_ms_per_message") is not None:
            print("BOUND raw_zmq_receive_%s %.3f ms CPU per 4 MiB message (I/O thread %.3f ms), "
                  "%.3g msg/s" % (tr, e["raw_zmq_cpu_ms_per_message"],
                                  e["raw_zmq_io_cpu_ms_per_message"], e["raw_zmq_messages_per_s"]))
    bw = (res.get("bandwidth") or {}).get("f32_per_s")
    for (kernel, isa), (got, bound, what, x, n, binds, pipes) in sorted(bounds(res).items()):
        fn = KERNEL_LOOPS[kernel, isa][0]
        c = kernel_loops(res)[fn]
        mc = c.get("mca_cycles")
        print("BOUND %s[%s] %.3g elem/s (%s%s: %s's loop, %d FMA-class and %d vector operations per "
              "%d elements%s; at the FMA and mixed issue rates %s (the %s pipes bind)%s; llvm-mca's "
              "%s model: %s); measured %.3g = %.2f of it (%s)" %
              (kernel, isa, bound, what,
               " probe: the loop's own instructions without their dependences" if what == "issue"
               else "", fn, c["fma"], c["vec"], c["elements"],
               "" if res.get("loops_live") else " (the recorded counts)",
               "%.3g" % pipes if pipes else "-", binds,
               ", bandwidth %.3g f32/s" % bw if kernel == "rows" and bw else "",
               c.get("mca_model", "-"),
               "%.1f cycles a loop" % mc if mc is not None else "not installed", got, x,
               "the best of %d rounds of each, in turns with bench fma and the probe" % n
               if n > 1 else "one figure against this run's bench fma"))
    fractions = refloop_fractions(res)
    for isa, fr in sorted(fractions.items()):
        print("BOUND reference_loops[%s] measured / their probe: %s (chains x FMAs a chain, each "
              "chain from a load, a shift and an integer conversion; +permute: a two-table permute "
              "on each chain, +cvt: a double-float-double conversion pair on each; "
              "bench/refloops.c, the best of %d rounds of each, in the kernels' turns)" %
              (isa, ", ".join("%dx%d%s %.2f" % (c, dp, REF_LABEL[v], x)
                              for c, dp, v, x, _ in sorted(fr, key=lambda t: (t[2], t[1], t[0]))),
               min(t[4] for t in fr)))
    for (kernel, isa), (name, x, target, basis) in sorted(kernel_targets(res).items()):
        print("BOUND %s[%s] for its TARGET (%s >= %.2f): %s: %.2f" %
              (kernel, isa, name, target, basis, x))


def print_capacity(res):
    """Information lines: what one daemon takes with zero loss, and its overhead split."""
    for (isa, tr), (x, d, k, dk, how, _) in sorted(overhead(res).items()):
        print("overhead %s [%s]: %.2f (%s): daemon %.2f ms per 4 MiB f16 message outside "
              "ZeroMQ's I/O threads over its kernels alone, %.2f ms (beside the trials) = the "
              "kernels in the daemon %.2f ms (%.2fx alone) + the stages around them %.2f ms" %
              (tr, isa, x, how, d, k, dk, dk / k, d - dk))
        hot = res.get("ingest_isa", {}).get(isa, {}).get(tr, {}).get("kernels_hot_cpu_ms")
        if hot:
            print("overhead %s [%s] over the kernels back to back on one hot buffer (information): "
                  "%.2f (kernels %.2f ms; fresh at the trials' rate / back to back %.2f)" %
                  (tr, isa, d / hot, hot, k / hot))
    for tr, o in res.get("ingest", {}).items():
        f = o.get("f16", {})
        c, k = f.get("cpu_ms_per_message"), f.get("kernels_alone_cpu_ms")
        # beside the trials' figure; where they did not run it is the figure
        if c and k and tr in res.get("ingest_isa", {}).get(f.get("kernels_isa"), {}):
            print("overhead %s [%s] at the edge of capacity (the search's fastest passing trial, "
                  "%.1f msg/s): %.2f (information)" %
                  (tr, f.get("kernels_isa"), f["zero_loss_messages_per_s"],
                   overhead_split(c, k)[0]))
    for tr, o in res.get("ingest", {}).items():
        v = o.get("f16")
        if not v:
            continue
        c = v["cpu_ms_per_message"] or {}
        print("CAPACITY %s [%s]: %.1f 4 MiB f16 msg/s, %.3g elem/s with zero loss; stages ms per "
              "message: %s" % (tr, (res.get("message") or {}).get("isa"),
                               v["zero_loss_messages_per_s"], v["zero_loss_elems_per_s"],
                               " ".join("%s %.2f" % (k, c[k]) for k in STAGES if k in c)))
    for isa, o in res.get("ingest_isa", {}).items():
        for tr, t in o.items():
            c = t["cpu_ms_per_message"]
            per = ["%.2f" % trial_overhead(x) for x in t.get("trials", []) if trial_overhead(x)]
            late = t.get("kernels_late_reps")
            print("daemon --isa %s (%s), %s, paced %.1f msg/s (%s): stages ms per message: %s%s%s" %
                  (isa, t.get("kernel_isa"), tr, t["rate"], "kept up" if t["ok"] else "fell behind",
                   " ".join("%s %.2f" % (k, c[k]) for k in STAGES if k in c),
                   "; overhead of each trial %s" % " ".join(per) if per else "",
                   "; %d of the kernels' paced repeats began late (no pause before them)" % late
                   if late else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    res = {"machine": machine(), "rows": {}, "e2e": {}, "started": time.time()}
    tmp = tempfile.mkdtemp(prefix="sinkwatch-bench-")
    steps = [("bandwidth", lambda: res.__setitem__("bandwidth", run_json([BENCH, "bandwidth", 1024]))),
             ("fma", lambda: res.__setitem__("fma", run_json([BENCH, "fma"]))),
             ("rows", lambda: bench_rows(tmp, res)),
             ("pairs", lambda: bench_pairs(res)),
             ("message", lambda: res.__setitem__("message", bench_message())),
             ("pairlogs", lambda: res.__setitem__("pairlogs", run_json([BENCH, "pairlogs", 2 * REPS + 1]))),
             ("other_isas", lambda: bench_other_isas(tmp, res)),
             ("kernel_bounds", lambda: bench_kernel_bounds(tmp, res)),
             ("allpairs", lambda: bench_allpairs(tmp, res)),
             ("e2e_tcp", lambda: bench_e2e(tmp, res, "tcp")),
             ("e2e_ipc", lambda: bench_e2e(tmp, res, "ipc")),
             ("baseline_tcp", lambda: bench_baseline(tmp, res, "tcp")),
             ("ingest_tcp", lambda: bench_ingest(tmp, res, "tcp")),
             ("ingest_ipc", lambda: bench_ingest(tmp, res, "ipc")),
             ("overhead", lambda: bench_overhead(tmp, res)),
             ("training", lambda: bench_training(tmp, res)),
             ("client", lambda: bench_client(tmp, res)),
             ("visibility", lambda: bench_visibility(tmp, res)),
             ("memory", lambda: bench_memory(tmp, res))]
    for name, fn in steps:
        if a.only and name not in a.only:
            continue
        t0 = time.time()
        try:
            fn()
            print("# %-11s done in %.1f s" % (name, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001 - a failed measurement is reported, the rest go on
            res.setdefault("errors", {})[name] = str(e)
            print("# %-11s FAILED: %s" % (name, e), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print("\nmachine:", json.dumps(res["machine"]))
    if "bandwidth" in res:
        print("single-core read bandwidth: %.3g GB/s = %.3g f32/s" %
              (res["bandwidth"]["bytes_per_s"] / 1e9, res["bandwidth"]["f32_per_s"]))
    isa = (res.get("message") or res.get("pairs") or {}).get("isa")
    if isa:
        print("metric kernels: %s, logarithms: %s" % (isa, (res.get("message") or res["pairs"]).get(
            "log_precision")))
    print("\n%-14s %14s %14s %8s" % ("row kernel", "C elem/s", "numpy elem/s", "ratio"))
    for k, v in res["rows"].items():
        print("%-14s %14.3g %14.3g %8.1f" % (k, v["c_elems_per_s"], v["numpy_elems_per_s"],
                                             v["ratio_vs_numpy"]))
    if "pairs" in res:
        p = res["pairs"]
        print("\nhead pairs 16x64x2048: C %.4f s/layer, numpy %.4f s/layer, ratio %.1f; "
              "1.4B snapshot, every pair on every row: %.2f s; default config: %.2f s" %
              (p["layer_s_c"], p["layer_s_numpy"], p["ratio_vs_numpy"],
               p["snapshot_all_pairs_s"], p.get("snapshot_default_s", float("nan"))))
    if "message" in res:
        m = res["message"]
        print("kernels alone on one 4 MiB f16 message (16x64x2048, fixed probe, pair_rows 8, "
              "drift_rows 8: rows, pairs and drift) [%s, %s logs]: %.2f ms (median of %s ms)" %
              (m["isa"], m["log_precision"], m["kernels_s"] * 1e3,
               " ".join("%.2f" % (x * 1e3) for x in m.get("runs_kernels_s", [m["kernels_s"]]))))
    for isa, o in res.get("other_isas", {}).items():
        print("the %s kernels on this CPU: rows f32 %.3g elem/s (%.1fx numpy), head pairs %.4f s/layer "
              "(%.1fx numpy, %s logs), kernels alone on the 4 MiB f16 message %.2f ms" %
              (isa, o["rows_f32_elems_per_s"], o["rows_f32_vs_numpy"], o["pairs_layer_s"],
               o["pairs_vs_numpy"], o["pairs_log_precision"], o["message_kernels_s"] * 1e3))
    if res.get("pairlogs", {}).get("ratio"):
        p = res["pairlogs"]
        print("pair kernel [%s], single vs double logarithms side by side: %.3g vs %.3g elem/s (%.2fx), "
              "largest relative difference of the sums %.2g" % (p["isa"], p["f32_elems_per_s"],
                                                               p["f64_elems_per_s"], p["ratio"],
                                                               p["largest_rel_diff"]))
    for tr, e in res["e2e"].items():
        print("e2e %s (flood: processed messages while the budget drops the rest): %.3g snapshots/s, %.3g elem/s, %.3g msg/s vs raw ZeroMQ %.3g msg/s (%.2f); "
              "daemon CPU %.2f ms per 4 MiB message; per run: raw %s msg/s, daemon %s msg/s" %
              (tr, e["snapshots_per_s"], e["elems_per_s"], e["messages_per_s"],
               e["raw_zmq_messages_per_s"], e["ratio_vs_raw_zmq"], e["daemon_cpu_ms_per_message"],
               " ".join("%.0f" % x for x in e["raw_runs_messages_per_s"]),
               " ".join("%.0f" % r["messages_per_s"] for r in e["runs"])))
    for tr, e in res.get("e2e_baseline", {}).items():
        print("e2e %s through the baseline daemon (%s, commit %s; the same flood): %.3g msg/s "
              "processed, daemon CPU %.2f ms per 4 MiB message; per run: %s msg/s" %
              (tr, e.get("binary"), e.get("commit") or "?", e["messages_per_s"],
               e["daemon_cpu_ms_per_message"],
               " ".join("%.0f" % r["messages_per_s"] for r in e["runs"])))
    for tr, o in res.get("ingest", {}).items():
        for dt, v in o.items():
            c = v["cpu_ms_per_message"] or {}
            print("ingest %s %s, zero loss (paced 4 MiB messages, default options, %g s trials, "
                  "done within %g s of the last send): %.1f msg/s, %.3g elem/s (first failing "
                  "rate %s); daemon CPU %.2f ms per message by its own counters (/proc %.2f): %s; "
                  "trials %s" %
                  (tr, dt, v["trial_s"], v["lag_s"], v["zero_loss_messages_per_s"],
                   v["zero_loss_elems_per_s"],
                   "%.1f" % v["first_failing_rate"] if v["first_failing_rate"] else "none",
                   c.get("stages", float("nan")), v["proc_cpu_ms_per_message"] or float("nan"),
                   " ".join("%s %.2f" % (k, c[k]) for k in STAGES if k in c),
                   " ".join("%.1f:%s" % (t["rate"], "ok" if t["ok"] else "fail")
                            for t in v["trials"])))
    if "training" in res:
        tr = res["training"]
        print("training (tiny GPT on CPU, %d steps a run): a step %.1f ms CPU / %.1f ms wall "
              "without the probe" % (tr["steps"], tr.get("no_probe_step_cpu_ms", float("nan")),
                                     tr.get("no_probe_step_wall_ms", float("nan"))))
        for name in ("every1", "every10", "every100", "every10_rowstats"):
            v = tr.get(name)
            if not v:
                continue
            b = v["share_cpu_by_part"]
            print("  probe every %d (%s %s, %d B): %.2f ms CPU a probe, %.2f%% of training by CPU "
                  "(forward %.2f%%, copy %.2f%%, send %.2f%%, the rest %.2f%%), %.2f%% by wall "
                  "clock; %d probes" %
                  (v["every"], v["kind"], v["dtype"], v["bytes_per_probe"], v["probe_cpu_ms"],
                   100 * v["share_cpu"], 100 * b["capture"], 100 * b["copy"], 100 * b["send"],
                   100 * b["rest"], 100 * v["share_wall"], v["probes"]))
    if "client" in res:
        for k, v in res["client"].items():
            print("client send of 4 MiB, %s: zero-copy p50 %.1f us p99 %.1f us; copy p50 %.1f us p99 %.1f us; "
                  "floor operation p50 %.1f us p99 %.1f us; p99 per run: zc %s, floor %s"
                  % (k, v["zc_p50_us"], v["zc_p99_us"], v["copy_p50_us"], v["copy_p99_us"],
                     v["floor_p50_us"], v["floor_p99_us"],
                     " ".join("%.0f" % r["zc_p99_us"] for r in v["runs"]),
                     " ".join("%.0f" % r["floor_p99_us"] for r in v["runs"])))
    if "visibility" in res:
        v = res["visibility"]
        print("visibility send -> SWMR reader: p50 %.3f s, p99 %.3f s (flush %d ms)" %
              (v["p50_s"], v["p99_s"], v["flush_ms"]))
    if "memory" in res:
        m = res["memory"]
        print("memory under a 10x flood (2 clients, blocking + non-blocking): peak RSS %.1f MiB, budget %d MiB; "
              "attempted %d, client drops %d, sent %d, daemon received %d, daemon drops %s; "
              "every message accounted: %s" %
              (m["peak_rss"] / 2**20, m["budget"] >> 20, m["client_attempted"],
               m["client_dropped"], m["client_sent"], m["daemon_received"], m["daemon_drops"],
               m["accounted"]))
    print()
    print_bounds(res)
    print_capacity(res)
    print()
    res["targets"] = []
    for name, got, want, ok in targets(res):
        line = "TARGET %s measured=%.4g target=%.4g %s" % (name, got, want, "ok" if ok else "MISS")
        print(line)
        res["targets"].append({"name": name, "measured": got, "target": want, "ok": bool(ok)})
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=float)
    print("\nwrote", a.out)


if __name__ == "__main__":
    main()
