#!/usr/bin/python3
"""`make bench`, sinkwatch serve (issue 14): 20 runs of 10,000 steps each,
written by a real sinkwatchd from `sinkwatch sim`, served by `sinkwatch
serve`, timed from Python with urllib over loopback:

- the start of the server (it opens every run file's reader before it
  prints its address), then the run list (GET /api/runs): the first
  request and the median of 20 more;
- one run's page, the JSON requests the page makes to show a run (the
  model's series, then the whole run's report), the first time each of the
  20 runs is opened (its file read and aggregated): the slowest and the
  median; then the same again for one run (cached), and the report of a
  zoomed range.

Targets: run list under 200 ms, one run's page under 1 s (both cold).
Prints a TARGET line each:  TARGET <name> measured=<ms> target=<ms> ok|MISS
and writes them to --out. Not a test: it asserts nothing.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd SW_SRCDIR=. \\
        /usr/bin/python3 bench/serve_bench.py [--data DIR] [--out FILE]

--data DIR keeps the runs there (made when it has fewer than 20), so a
second run of the bench skips writing them.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", os.path.join(HERE, "..")), "tests", "e2e"))
from swharness import Daemon, SINKWATCH  # noqa: E402

RUNS, STEPS = 20, 10000
SHAPE = ["--layers", "2", "--heads", "4", "--rows", "4", "--keys", "16"]
LIST_MS, PAGE_MS = 200.0, 1000.0


def make_runs(data):
    """RUNS runs of STEPS steps in data, two sims at a time into one daemon."""
    have = [f for f in os.listdir(data) if f.endswith(".h5")] if os.path.isdir(data) else []
    if len(have) >= RUNS:
        return 0.0
    tmp = tempfile.mkdtemp(prefix="sinkwatch-serve-bench-")
    d = Daemon(tmp=tmp, data_dir=data).start()
    t0 = time.time()
    try:
        names = ["bench-%02d" % i for i in range(RUNS)]
        for k in range(0, RUNS, 2):
            procs = [subprocess.Popen([SINKWATCH, "sim", "--connect", d.listen, "--run", n,
                                       "--steps", str(STEPS), "--blocking", "--sink-share",
                                       "0.5", "--params", "%d" % (70e6 * (i + 1))] + SHAPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for i, n in enumerate(names[k:k + 2], start=k)]
            for p in procs:
                _, err = p.communicate(timeout=600)
                if p.returncode != 0:
                    raise SystemExit("sim failed: %s" % err.decode())
            for n in names[k:k + 2]:
                d.wait_ended(n, timeout=300)
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return time.time() - t0


def cpu_ms(pid):
    """utime + stime of process pid, ms."""
    with open("/proc/%d/stat" % pid) as f:
        x = f.read().rsplit(")", 1)[1].split()
    return (int(x[11]) + int(x[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


def get(url):
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
        if r.status != 200:
            raise SystemExit("%s: %d" % (url, r.status))
    return (time.perf_counter() - t) * 1e3, body


def page(base, rid):
    """The requests the page makes to show run rid, in its order: ms."""
    q = urllib.parse.quote(rid, safe="")
    ms_series, body = get(base + "api/series?id=%s&layer=model" % q)
    steps = len(json.loads(body)["step"])
    ms_report, _ = get(base + "api/report?id=%s" % q)
    return ms_series + ms_report, ms_series, ms_report, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", help="keep the runs here (made when missing)")
    ap.add_argument("--out", default=os.path.join(HERE, "serve.json"))
    a = ap.parse_args()
    data = a.data or tempfile.mkdtemp(prefix="sinkwatch-serve-runs-")
    os.makedirs(data, exist_ok=True)
    res = {"runs": RUNS, "steps": STEPS, "shape": " ".join(SHAPE)}
    try:
        res["write_s"] = make_runs(data)
        res["load_before"] = os.getloadavg()[0]
        t0 = time.perf_counter()
        srv = subprocess.Popen([SINKWATCH, "serve", data, "--listen", "127.0.0.1:0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = srv.stdout.readline().decode()
            if not line.startswith("sinkwatch serve: http://"):
                raise SystemExit("serve did not start: %r %s" % (line, srv.stderr.read()))
            res["start_ms"] = (time.perf_counter() - t0) * 1e3
            res["start_cpu_ms"] = cpu_ms(srv.pid)
            base = line.split()[-1]
            c0 = cpu_ms(srv.pid)
            cold, body = get(base + "api/runs")
            res["list_cold_cpu_ms"] = cpu_ms(srv.pid) - c0
            runs = json.loads(body)["runs"]
            assert len(runs) == RUNS, len(runs)
            warm = statistics.median(get(base + "api/runs")[0] for _ in range(20))
            res["list_cold_ms"], res["list_warm_ms"] = cold, warm
            c0 = cpu_ms(srv.pid)
            pages = [page(base, r["id"]) for r in runs]
            res["page_cold_cpu_ms"] = (cpu_ms(srv.pid) - c0) / len(runs)
            assert all(p[3] == STEPS for p in pages), [p[3] for p in pages]
            res["page_cold_max_ms"] = max(p[0] for p in pages)
            res["page_cold_median_ms"] = statistics.median(p[0] for p in pages)
            res["page_cold_series_median_ms"] = statistics.median(p[1] for p in pages)
            res["page_cold_report_median_ms"] = statistics.median(p[2] for p in pages)
            rid = runs[0]["id"]
            res["page_warm_ms"] = statistics.median(page(base, rid)[0] for _ in range(5))
            q = urllib.parse.quote(rid, safe="")
            res["zoom_report_ms"] = statistics.median(
                get(base + "api/report?id=%s&from=%d&to=%d" % (q, STEPS // 4, 3 * STEPS // 4))[0]
                for _ in range(5))
            res["load_after"] = os.getloadavg()[0]
        finally:
            srv.terminate()
            srv.wait(timeout=10)
    finally:
        if not a.data:
            shutil.rmtree(data, ignore_errors=True)
    print("sinkwatch serve: %d runs x %d steps (sim %s; written in %.0f s%s)" %
          (RUNS, STEPS, res["shape"], res["write_s"], "" if res["write_s"] else ", kept"))
    print("load average %.1f before, %.1f after, on %d cores (wall times include waiting "
          "for a core; the server's CPU time does not)" %
          (res["load_before"], res["load_after"], os.cpu_count()))
    print("start (every file's reader opened) %.0f ms, server CPU %.0f ms" %
          (res["start_ms"], res["start_cpu_ms"]))
    print("run list: first request %.1f ms (server CPU %.0f ms), then median %.2f ms" %
          (res["list_cold_ms"], res["list_cold_cpu_ms"], res["list_warm_ms"]))
    print("one run's page (series + report), first open of each run: median %.0f ms "
          "(series %.0f, report %.0f), slowest %.0f ms, server CPU %.0f ms a run; opened "
          "again %.1f ms; a zoomed report (half the run) %.0f ms" %
          (res["page_cold_median_ms"], res["page_cold_series_median_ms"],
           res["page_cold_report_median_ms"], res["page_cold_max_ms"],
           res["page_cold_cpu_ms"], res["page_warm_ms"], res["zoom_report_ms"]))
    res["targets"] = []
    for name, got, want in (("serve_run_list_ms", res["list_cold_ms"], LIST_MS),
                            ("serve_run_page_ms", res["page_cold_max_ms"], PAGE_MS)):
        ok = got < want
        print("TARGET %s measured=%.4g target=%.4g %s" % (name, got, want,
                                                          "ok" if ok else "MISS"))
        res["targets"].append({"name": name, "measured": got, "target": want, "ok": ok})
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
