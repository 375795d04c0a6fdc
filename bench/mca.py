#!/usr/bin/python3
"""The static bound of the metric kernels' inner loops (issue 30): compiles
metrics/row_simd.c to assembly with the build's flags, takes each kernel's
hottest loop (the backward branch whose body has the most FMAs and no call)
and gives llvm-mca's block throughput for it: the cycles per iteration the
modelled core's pipes allow, every operation weighed, not the FMAs alone.

    /usr/bin/python3 bench/mca.py [--cc gcc] [--srcdir .]

LLVM 14 (Debian 12) models Zen 3 (znver3, for the AVX2 loops) and no Zen
4/5; the AVX-512 loops are weighed on icelake-server. bench/RESULTS.md
("Issue 30: the kernels' static bound") holds what this printed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# (function, model, elements per iteration, what it is)
KERNELS = [("pair256", "znver3", 8, "pairs avx2 (float logs)"),
           ("pair512", "icelake-server", 8, "pairs avx512 (double logs)"),
           ("p256_f32", "znver3", 8, "rows f32 avx2"),
           ("p256_f32x", "znver3", 8, "rows f32 avx2, single-precision logs"),
           ("p512_f32", "icelake-server", 16, "rows f32 avx512"),
           ("p512_f16", "icelake-server", 16, "rows f16 avx512")]
FLAGS = ["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE", "-ftree-vectorize",
         "-fno-math-errno", "-fno-trapping-math", "-O2"]


def hottest_loop(lines, fn):
    start = lines.index(fn + ":")
    end = next(i for i in range(start + 1, len(lines))
               if re.match(r"^\s*\.size\s+" + re.escape(fn) + ",", lines[i]))
    body = lines[start:end]
    labels = {l.rstrip(":"): i for i, l in enumerate(body) if re.match(r"^\.L\w+:$", l)}
    best = None
    for i, l in enumerate(body):
        m = re.match(r"^\s+j\w+\s+(\.L\w+)$", l)
        if not (m and m.group(1) in labels and labels[m.group(1)] < i):
            continue
        seg = [x for x in body[labels[m.group(1)] + 1:i + 1]
               if x.startswith("\t") and not x.strip().startswith(".")]
        if any("call" in x or x.strip() == "ret" for x in seg):
            continue
        fmas = sum(bool(re.search(r"\bv(fn?m(add|sub))", x)) for x in seg)
        if best is None or (fmas, -len(seg)) > (best[0], -len(best[1])):
            best = (fmas, seg)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    ap.add_argument("--srcdir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--builddir", default=".")
    ap.add_argument("--json", action="store_true", help="one JSON object: {function: cycles}")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = os.path.join(tmp, "row_simd.s")
        subprocess.run([a.cc, "-DHAVE_CONFIG_H", "-I" + a.builddir, "-I" + a.srcdir,
                        "-I" + os.path.join(a.srcdir, "metrics")] + FLAGS +
                       ["-S", "-o", s, os.path.join(a.srcdir, "metrics", "row_simd.c")],
                       check=True)
        lines = open(s).read().split("\n")
    found = {}
    for fn, cpu, elems, what in KERNELS:
        fmas, seg = hottest_loop(lines, fn)
        p = subprocess.run(["llvm-mca", "-mcpu=" + cpu, "-iterations=200"],
                           input="\n".join(seg) + "\n", capture_output=True, text=True)
        m = re.search(r"Block RThroughput:\s+([\d.]+)", p.stdout)
        if not m:
            if not a.json:
                print("%-10s %s: llvm-mca: %s" % (fn, cpu, p.stderr.strip()[:200]))
            continue
        cyc = float(m.group(1))
        found[fn] = cyc
        if a.json:
            continue
        print("%-10s %-15s %3d instructions, %2d FMAs a loop of %2d elements: %5.1f cycles "
              "(%.2f an element)  %s" % (fn, cpu, len(seg), fmas, elems, cyc, cyc / elems, what))
    if a.json:
        print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
