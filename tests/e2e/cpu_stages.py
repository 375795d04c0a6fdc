"""sinkwatchd's CPU by stage (status cpu section, sinkwatch_stage_cpu_seconds_total):
every stage of the fixed set is shown, the counters only grow while a run
streams, and after the run their sum is the process's CPU time as the
kernel counts it (/proc/PID/stat utime + stime, an independent clock)
within TOL_REL of it plus TOL_ABS: what no stage counts (libuv's pool
threads between jobs, signal and HTTP threads) is small: the sums agreed
to 0.01 s in every run seen, and leaving out ZeroMQ's thread (about 10% of
this run) or the rows or the pairs stage fails the test. The /metrics text parses
with prometheus_client's parser and carries the same figures."""
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCHD, Daemon, Results, Sender, free_port, random_probs  # noqa: E402

import numpy as np  # noqa: E402

STAGES = ("receive", "zmq_io", "decode", "assemble", "rows", "pairs", "drift", "write")
TOL_REL, TOL_ABS = 0.03, 0.03    # of the process's CPU seconds; seconds (/proc counts 10 ms ticks)
res = Results()


def proc_cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu(d):
    return d.status()["cpu"]


def case_stages():
    port = free_port()
    d = Daemon(extra=["--metrics-listen", "127.0.0.1:%d" % port]).start()
    try:
        c0 = cpu(d)
        for s in STAGES:
            assert isinstance(c0[s + "_s"], float) and c0[s + "_s"] >= 0, (s, c0)
            assert s + "_ms_per_message" in c0, (s, c0)
        assert "cpu" in d.ctl("help")
        # a streamed run: 12 steps of 6 layers of [16, 64, 2048] f16 (4 MiB a
        # message), one step at a time so the budget drops nothing
        L, H, R, K = 6, 16, 64, 2048
        rng = np.random.default_rng(5)
        x = random_probs(rng, H, R, K, dtype=np.float16)
        snd = Sender(d.listen, "cpu", L, H)
        seen = [c0]
        for st in range(12):
            for lay in range(L):
                snd.snapshot(st, lay, x)
            d.wait(lambda s: s["writer"]["steps_written"] >= st + 1, timeout=60,
                   what="step %d written" % st)
            seen.append(cpu(d))
        snd.end()
        snd.close()
        stt = d.wait(lambda s: s["queue"]["jobs_in_flight"] == 0 and s["queue"]["writer_queue"] == 0
                     and s["traffic"]["messages"] >= 12 * L + 1, timeout=60, what="the run done")
        assert sum(v for v in stt["drops"].values() if isinstance(v, int)) == 0, stt["drops"]
        time.sleep(0.3)
        last = cpu(d)
        pc = proc_cpu_s(d.proc.pid)
        seen.append(last)
        # monotone, stage by stage
        for a, b in zip(seen, seen[1:]):
            for s in STAGES + ("stages", "process"):
                assert b[s + "_s"] >= a[s + "_s"] - 1e-9, (s, a[s + "_s"], b[s + "_s"])
        # the work shows where it is done
        for s in ("receive", "decode", "assemble", "rows", "pairs", "drift", "write"):
            assert last[s + "_s"] > 0, (s, last)
        assert last["rows_s"] > last["decode_s"] and last["pairs_s"] > last["decode_s"], last
        total = sum(last[s + "_s"] for s in STAGES)
        assert abs(total - last["stages_s"]) < 1e-5, (total, last["stages_s"])
        msgs = d.status()["traffic"]["messages"]
        assert abs(last["pairs_ms_per_message"] - 1e3 * last["pairs_s"] / msgs) < 1e-3, last
        # the sum against the kernel's count of the process (and the daemon's own)
        for name, ref in (("/proc/PID/stat", pc), ("process_s", last["process_s"])):
            assert abs(total - ref) <= TOL_REL * ref + TOL_ABS, (name, total, ref, last)
        print("stages %.3f s, /proc %.3f s, process_s %.3f s; per message: %s" % (
            total, pc, last["process_s"],
            " ".join("%s %.3f ms" % (s, last[s + "_ms_per_message"]) for s in STAGES)))
        # /metrics: prometheus_client's parser, the fixed stage label set
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            print("python3-prometheus-client is not installed: /metrics not checked")
            return
        time.sleep(1.5)         # published once a second
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            text = r.read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        f = fams["sinkwatch_stage_cpu_seconds"]
        assert f.type == "counter", f.type
        got = {s.labels["stage"]: s.value for s in f.samples if s.name.endswith("_total")}
        assert set(got) == set(STAGES), got
        now = cpu(d)
        for s in STAGES:
            assert last[s + "_s"] - 1e-6 <= got[s] <= now[s + "_s"] + 1e-6, (s, got[s], last, now)
        p = [s.value for s in fams["sinkwatch_process_cpu_seconds"].samples][0]
        assert last["process_s"] - 1e-6 <= p <= now["process_s"] + 1e-6, (p, last, now)
    finally:
        assert d.stop() == 0


if not SINKWATCHD:
    print("SINKWATCHD not set: skipped")
    sys.exit(77)
res.check("stages", case_stages)
sys.exit(res.finish())
