#!/usr/bin/python3
"""The metric kernels' inner loops as compiled (issue 30): compiles
metrics/row_simd.c to assembly with the build's flags, takes each kernel's
hottest loop (the backward branch whose body has the most FMAs and no call)
and counts what it issues:

- fma: FMA-class operations (fused multiply-adds and multiplies: the FMA
  pipes' work);
- vec: every vector operation that takes an execution pipe (the FMA class
  included; moves between registers, loads and stores apart, which other
  units carry).

run_bench.py turns the counts into each kernel's bound with the issue
rates `bench fma` measures on this core in the same run. When llvm-mca is
installed its block throughput is given beside them (LLVM 14: a model of
Zen 3 for the AVX2 loops and of Ice Lake for the AVX-512 ones, not of this
core: information, not the bound).

    /usr/bin/python3 bench/mca.py [--cc gcc] [--srcdir .] [--json]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (function, llvm-mca model, elements per iteration, what it is)
KERNELS = [("pair256", "znver3", 8, "pairs avx2 (float logs)"),
           ("pair512", "icelake-server", 8, "pairs avx512 (double logs)"),
           ("p256_f32", "znver3", 8, "rows f32 avx2"),
           ("p256_f32x", "znver3", 8, "rows f32 avx2, single-precision logs"),
           ("p512_f32", "icelake-server", 16, "rows f32 avx512"),
           ("p512_f16", "icelake-server", 16, "rows f16 avx512")]
FLAGS = ["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE", "-ftree-vectorize",
         "-fno-math-errno", "-fno-trapping-math", "-O2"]
FMA_RE = re.compile(r"^v(fn?m(add|sub)\w*|mul[ps][sd])$")


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
        fmas = sum(bool(FMA_RE.match(x.split()[0])) for x in seg)
        if best is None or (fmas, -len(seg)) > (best[0], -len(best[1])):
            best = (fmas, seg)
    return best


def is_vec_op(line):
    """A vector operation that takes an execution pipe: v*, except moves
    (register to register, loads, stores; vmovmsk* counts), broadcasts from
    memory and vzeroupper. Mask-register (k*) instructions are not counted."""
    parts = line.split(None, 1)
    op = parts[0]
    if not op.startswith("v") or op == "vzeroupper":
        return False
    if op.startswith("vmovmsk"):
        return True             # to a general register: a vector pipe's work
    if op.startswith("vmov"):
        return False
    if op.startswith("vbroadcast") or op.startswith("vpbroadcast"):
        return "(" not in (parts[1] if len(parts) > 1 else "")
    return True


def counts(seg):
    ops = [x.split()[0] for x in seg]
    return {"instructions": len(seg), "fma": sum(bool(FMA_RE.match(o)) for o in ops),
            "vec": sum(is_vec_op(x.strip()) for x in seg)}


def mca_cycles(seg, cpu):
    if not shutil.which("llvm-mca"):
        return None
    p = subprocess.run(["llvm-mca", "-mcpu=" + cpu, "-iterations=200"],
                       input="\n".join(seg) + "\n", capture_output=True, text=True)
    m = re.search(r"Block RThroughput:\s+([\d.]+)", p.stdout)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "gcc"))
    ap.add_argument("--srcdir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--builddir", default=".")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object: {function: {elements, instructions, fma, vec, mca_cycles}}")
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
        _, seg = hottest_loop(lines, fn)
        c = counts(seg)
        c.update(elements=elems, mca_cycles=mca_cycles(seg, cpu), mca_model=cpu)
        found[fn] = c
        if a.json:
            continue
        mc = c["mca_cycles"]
        print("%-10s %3d instructions, %2d FMA-class and %2d vector operations a loop of %2d "
              "elements; llvm-mca %s: %s  %s" %
              (fn, c["instructions"], c["fma"], c["vec"], elems, cpu,
               "%.1f cycles" % mc if mc is not None else "not installed", what))
    if a.json:
        print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
