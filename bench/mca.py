#!/usr/bin/python3
"""The metric kernels' inner loops as compiled (issue 30): compiles
metrics/row_simd.c (and bench/refloops.c, the reference loops) to
assembly with the build's flags, takes each kernel's
hottest loop (the backward branch whose body has the most FMAs and no call;
both loops of a kernel split in two, LOOPS)
and counts what it issues:

- fma: FMA-class operations (fused multiply-adds and multiplies: the FMA
  pipes' work);
- vec: every vector operation that takes an execution pipe (the FMA class
  included; moves between registers, loads and stores apart, which other
  units carry).

run_bench.py prints the counts at the issue rates `bench fma` measures
on this core in the same run (information: the probes below are the
bound). When llvm-mca is
installed its block throughput is given beside them (LLVM 14: a model of
Zen 3 for the AVX2 loops and of Ice Lake for the AVX-512 ones, not of this
core: information, not the bound).

With --probes DIR it also builds, for each loop, a probe: the loop's own
vector and mask instructions in a loop of their own, with every data
dependence between them removed (probe_body: results to a ring of
registers, sources from 4 that nothing writes, every memory operand one
cache line, stores to another; mask registers as they are) and the
flush-to-zero modes set. What the
core issues of it a second is what it allows this loop's instructions,
each on the pipes it takes, whatever they are: no model and no rate of a
class of operations. The scalar bookkeeping and the branches are left out
(integer pipes, which the vector loops do not fill): the probe's rate is
an upper bound of the loop's. `DIR/FN N` runs FN's probe N turns and
prints its loops a second (the best of 5).

    /usr/bin/python3 bench/mca.py [--cc gcc] [--srcdir .] [--json] [--probes DIR]
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
KERNELS = [("pair256", "znver3", 16, "pairs avx2 (float logs, software-pipelined: 16 keys a turn)"),
           ("pair512s", "icelake-server", 8, "pairs avx512 (double logs, the shorter series)"),
           ("pair512", "icelake-server", 8, "pairs avx512 (double logs, ln_array's series: pair_f64)"),
           ("p256_f32", "znver3", 8, "rows f32 avx2, single-precision logs (two loops a chunk: the logs, the sums)"),
           ("p256_f32x", "znver3", 8, "rows f32 avx2, double logs (probs_exact)"),
           ("p512_f32s", "icelake-server", 32, "rows f32 avx512, single-precision logs (two blocks a turn, software-pipelined)"),
           ("p512_f32", "icelake-server", 16, "rows f32 avx512, double logs (probs_exact)"),
           ("p512_f16", "icelake-server", 16, "rows f16 avx512")]
REF_ENTRY = re.compile(r'\{ "(ref\w+)", "(avx512|avx2)", (\d+), (\d+),')


def refloops(srcdir):
    """bench/refloops.c's reference loops, from its table (swb_refloops,
    their one list), as KERNELS' entries: chains of FMAs; a name ending in
    p has a two-table permute on each chain, in v a double -> float ->
    double conversion pair."""
    text = open(os.path.join(srcdir, "bench", "refloops.c")).read()
    return [(fn, "icelake-server" if isa == "avx512" else "znver3", 8 if isa == "avx512" else 4,
             "reference loop, %s chains of %s FMAs%s" %
             (c, dp, {"p": ", a permute on each", "v": ", a conversion pair on each"}.get(fn[-1], "")))
            for fn, isa, c, dp in REF_ENTRY.findall(text)]


FLAGS = ["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-D_DEFAULT_SOURCE", "-ftree-vectorize",
         "-fno-math-errno", "-fno-trapping-math", "-O2"]
FMA_RE = re.compile(r"^v(fn?m(add|sub)\w*|mul[ps][sd])$")


# kernels whose work on a block is split over several loops (loop fission:
# p256_f32 takes a chunk's logarithms in one loop, their sums in the next):
# the probe and the counts take that many loops, the call-free ones with
# the most FMAs that hold no other, their bodies one after the other (one
# block of elements through each)
LOOPS = {"p256_f32": 2}


def loop_candidates(lines, fn):
    """[(first line, last line, the body)] of fn's call-free loops: the
    instructions from a label to a backward branch to it."""
    start = lines.index(fn + ":")
    end = next(i for i in range(start + 1, len(lines))
               if re.match(r"^\s*\.size\s+" + re.escape(fn) + ",", lines[i]))
    body = lines[start:end]
    labels = {l.rstrip(":"): i for i, l in enumerate(body) if re.match(r"^\.L\w+:$", l)}
    out = []
    for i, l in enumerate(body):
        m = re.match(r"^\s+j\w+\s+(\.L\w+)$", l)
        if not (m and m.group(1) in labels and labels[m.group(1)] < i):
            continue
        seg = [x for x in body[labels[m.group(1)] + 1:i + 1]
               if x.startswith("\t") and not x.strip().startswith(".")]
        if not any("call" in x or x.strip() == "ret" for x in seg):
            out.append((labels[m.group(1)], i, seg))
    return out


def fmas(seg):
    return sum(bool(FMA_RE.match(x.split()[0])) for x in seg)


def hottest_loop(lines, fn):
    """(FMAs, body) of fn's loop: the call-free loop with the most FMAs
    (ties: the first in the function, the main loop; gcc places the rarer
    paths' copies after it), or LOOPS[fn] such loops that hold no other,
    their bodies in the function's order."""
    cands = loop_candidates(lines, fn)
    n = LOOPS.get(fn, 1)
    if n > 1:
        cands = [c for c in cands if not any(o is not c and c[0] <= o[0] and o[1] <= c[1]
                                             for o in cands)]
    # sorted() keeps the function's order among ties
    best = sorted(sorted(cands, key=lambda c: -fmas(c[2]))[:n], key=lambda c: c[0])
    if len(best) < n:
        # fewer loops than the kernel has: its counts and probe would be
        # short (run_bench.py then takes the recorded counts)
        raise ValueError("%s: %d call-free loops, %d expected" % (fn, len(best), n))
    seg = [x for c in best for x in c[2]]
    return fmas(seg), seg


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


VREG = re.compile(r"%([xyz])mm(\d+)")
MEM = re.compile(r"-?[\w.$+-]*\((%r\w+)?(,%r\w+)?(,\d)?\)")


def split_operands(args):
    """AT&T operands, split at the commas outside () and {}."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def is_evex(lines):
    return any("zmm" in x or "{" in x or re.search(r"mm(1[6-9]|2\d|3[01])\b", x) for x in lines)


RMW_RE = re.compile(r"^v(fn?m(add|sub)|fmaddsub|fmsubadd)\w*(132|213|231)|^vperm[ti]2|^vpternlog")


def probe_body(seg):
    """The loop's vector and mask instructions, AT&T, every data dependence
    between them removed (see the module's comment): each result to the
    next register of a ring; an instruction that reads its destination
    (FMAs, two-table permutes, merge masking) takes the register a plain
    write filled last in the same loop, so no chain runs from one loop to
    the next; the sources of an instruction, numbered by first appearance,
    from registers 0-3, which nothing writes (two sources are one register
    only where they were: no zeroing idiom the loop lacks)."""
    # zmm results to 16-31, xmm and ymm to 4-15 (the VEX forms encode 0-15):
    # two rings that share no register
    rings = {"z": [16, 16, 31], "y": [4, 4, 15]}
    fresh = {"z": [], "y": []}
    out = []
    for line in seg:
        parts = line.strip().split(None, 1)
        op, args = parts[0], parts[1] if len(parts) > 1 else ""
        if not op.startswith(("v", "k")) or (op.startswith("k") and re.search(r"%[er]", args)):
            continue            # scalar work, branches, masks to or from general registers
        ops = split_operands(args)
        dst = ops[-1] if ops else ""
        gpr = re.match(r"%[er]\w+$", dst) is not None
        if gpr and not op.startswith("vmovmsk"):
            continue            # vmovd, vpextr to a general register: bookkeeping
        store = MEM.search(dst) is not None
        nodst = op.startswith(("vcomis", "vucomis", "vptest", "vtestp"))
        m = VREG.match(dst) if not (store or gpr or nodst) else None
        names = {}
        def src(o):
            return VREG.sub(lambda r: "%%%smm%d" % (r.group(1), names.setdefault(
                r.group(2), len(names) % 4)), o)
        new = []
        for i, o in enumerate(ops[:-1] if m or gpr else ops):
            new.append(src(MEM.sub("128(%rsi)" if store and i == len(ops) - 1 else "(%rsi)", o)))
        if gpr:
            new.append("%eax")
        elif m:
            w = "z" if m.group(1) == "z" else "y"
            rmw = RMW_RE.match(op) is not None or ("{%k" in dst and "{z}" not in dst)
            ring = rings[w]
            if rmw and fresh[w]:
                reg = fresh[w].pop()
            else:
                reg = ring[0]
                ring[0] = ring[0] + 1 if ring[0] < ring[2] else ring[1]
                if reg in fresh[w]:
                    fresh[w].remove(reg)
                if rmw:         # no plain write to take over: start a chain of one
                    out.append("%s %%%smm%d, %%%smm%d, %%%smm%d" % (
                        "vpxord" if w == "z" else "vpxor", w, reg, w, reg, w, reg))
            if not rmw:
                fresh[w].append(reg)
            new.append(VREG.sub("%%%smm%d" % (m.group(1), reg), dst, count=1))
        out.append(op + (" " + ", ".join(new) if new else ""))
    return out


PROBE_C = r"""#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	static double buf[64] __attribute__((aligned(64)));
	unsigned csr = 0x9fc0, old;	/* flush to zero, denormals are zero */
	double best = 0;
	for (int i = 0; i < 64; i++) buf[i] = 1.5;
	__asm__ volatile("stmxcsr %0\n\tldmxcsr %1" : "=m"(old) : "m"(csr));
	for (int r = 0; r < 5; r++) {
		long k = n;
		double t0 = now();
		__asm__ volatile(INIT "1:\n\t" BODY "\n\tdec %[k]\n\tjnz 1b" : [k] "+r"(k) : "S"(buf)
		    : "memory", "cc", "rax", CLOBBERS);
		double v = (double)n / (now() - t0);
		best = v > best ? v : best;
	}
	__asm__ volatile("ldmxcsr %0" : : "m"(old));
	printf("%.6g\n", best);
	return 0;
}
"""


def build_probe(seg, path, cc="gcc"):
    """Compiles the probe of loop seg to path; False where it fails."""
    body = probe_body(seg)
    evex = is_evex(body)
    nreg = 32 if evex else 16
    init = ("vbroadcastsd (%%rsi), %%ymm0\\n\\tvmovapd %%ymm0, %%ymm1\\n\\t"
            "vmovapd %%ymm0, %%ymm2\\n\\tvmovapd %%ymm0, %%ymm3\\n\\t")
    if evex:
        init = init.replace("ymm", "zmm") + "kxnorw %%k0, %%k0, %%k1\\n\\t"
    asm = "\\n\\t".join(x.replace("%", "%%").replace("{", "%{").replace("}", "%}")
                          for x in body)
    clob = ", ".join('"xmm%d"' % i for i in range(nreg))
    if evex:
        clob += ", " + ", ".join('"k%d"' % i for i in range(8))
    src = PROBE_C.replace("INIT", '"%s"' % init).replace("BODY", '"%s"' % asm) \
        .replace("CLOBBERS", clob)
    flags = ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl"] if evex else ["-mavx2", "-mfma"]
    with tempfile.TemporaryDirectory() as tmp:
        c = os.path.join(tmp, "probe.c")
        with open(c, "w") as f:
            f.write(src)
        r = subprocess.run([cc, "-O1"] + flags + ["-mf16c", "-o", path, c],
                           capture_output=True, text=True)
    return r.returncode == 0


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
    ap.add_argument("--probes", metavar="DIR",
                    help="build each loop's probe as DIR/FUNCTION (its path as probe in the JSON) "
                    "and, without --json, run it")
    a = ap.parse_args()
    srcs = {os.path.join("metrics", "row_simd.c"): KERNELS,
            os.path.join("bench", "refloops.c"): refloops(a.srcdir)}
    loops = []
    with tempfile.TemporaryDirectory() as tmp:
        for src, fns in srcs.items():
            s = os.path.join(tmp, os.path.basename(src) + ".s")
            subprocess.run([a.cc, "-DHAVE_CONFIG_H", "-I" + a.builddir, "-I" + a.srcdir,
                            "-I" + os.path.join(a.srcdir, os.path.dirname(src))] + FLAGS +
                           ["-S", "-o", s, os.path.join(a.srcdir, src)], check=True)
            lines = open(s).read().split("\n")
            loops += [(lines,) + k for k in fns]
    found = {}
    if a.probes:
        os.makedirs(a.probes, exist_ok=True)
    for lines, fn, cpu, elems, what in loops:
        _, seg = hottest_loop(lines, fn)
        c = counts(seg)
        c.update(elements=elems, mca_cycles=mca_cycles(seg, cpu), mca_model=cpu)
        if a.probes:
            path = os.path.join(os.path.abspath(a.probes), fn)
            c["probe"] = path if build_probe(seg, path, a.cc) else None
        found[fn] = c
        if a.json:
            continue
        mc = c["mca_cycles"]
        print("%-10s %3d instructions, %2d FMA-class and %2d vector operations a loop of %2d "
              "elements; llvm-mca %s: %s  %s" %
              (fn, c["instructions"], c["fma"], c["vec"], elems, cpu,
               "%.1f cycles" % mc if mc is not None else "not installed", what))
        if c.get("probe"):
            try:
                lps = float(subprocess.run([c["probe"], "2000000"], capture_output=True,
                                           text=True, timeout=60, check=True).stdout)
                print("%-10s probe: %.4g loops/s, %.4g elements/s" % ("", lps, lps * elems))
            except (subprocess.SubprocessError, ValueError, OSError):
                print("%-10s probe: does not run on this CPU" % "")
    if a.json:
        print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
