"""The shape of the C code outside tests/ and fuzz/ (issue 28), so that it
does not drift back:

  - no function over 100 lines, and no file over 1000 lines, except the
    SIMD kernels' file (metrics/*_simd.c);
  - no two C files share an identical run of 8 or more lines (blank and
    preprocessor lines aside): a rule written twice is written once and
    called;
  - no two C files call each other in a circle (the file graph of the
    built objects' symbols, dev/calls.py);
  - every row kernel's loop, as compiled, asks for its data ahead
    (prefetcht0, metrics/row_simd.c row_ahead): a helper that only
    prefetches, not inlined, is a call with no effect to the compiler,
    which drops it, and the kernels lost their prefetch that way once
    (issue 30, eleventh session) with every result the same.

dev/funclen.py and dev/calls.py are the tools behind the first and the
third; objdump behind the last."""
import hashlib
import importlib.util
import os
import subprocess
import sys

SRC = os.environ.get("SW_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SRC = os.path.abspath(SRC)
BUILD = os.getcwd()
RUN = 8
FUNC_MAX, FILE_MAX = 100, 1000


def tool(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SRC, "dev", name + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def sources():
    """The C files outside tests/ and fuzz/: git's list, or the tree's (a dist)."""
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "*.c", "*.h"], capture_output=True,
                             text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if not out:
        for d, _, fs in os.walk(SRC):
            rel = os.path.relpath(d, SRC)
            if rel.startswith((".", "_build", "sinkwatch-")):
                continue
            out += [os.path.normpath(os.path.join(rel, f)) for f in fs if f.endswith((".c", ".h"))]
    gen = {"serve/serve_assets.c"}	# generated from the web page
    return sorted(f for f in out if not f.startswith(("tests/", "fuzz/", "bench/")) and f not in gen
                  and os.path.exists(os.path.join(SRC, f)))


def simd(f):
    return f.startswith("metrics/") and f.endswith("_simd.c")


def lengths(files):
    fl = tool("funclen")
    bad = []
    for f in files:
        p = os.path.join(SRC, f)
        with open(p, encoding="utf-8", errors="replace") as fh:
            n = fh.read().count("\n")
        if n > FILE_MAX and not simd(f):
            bad.append("%s: %d lines (most %d)" % (f, n, FILE_MAX))
        if f.endswith(".c") and not simd(f):
            for name, line, length in fl.functions(p):
                if length > FUNC_MAX:
                    bad.append("%s:%d: %s is %d lines (most %d)" % (f, line, name, length, FUNC_MAX))
    return bad


def trivial(lines):
    """A run made only of punctuation, keywords and short lines says nothing."""
    return sum(len(x) > 12 for x in lines) < RUN // 2


def shared_runs(files):
    """Identical runs of RUN lines (stripped; blank and preprocessor lines
    aside) that two files share."""
    where = {}
    for f in files:
        with open(os.path.join(SRC, f), encoding="utf-8", errors="replace") as fh:
            # blank lines and the preprocessor's (#include blocks) aside
            lines = [(i + 1, x.strip()) for i, x in enumerate(fh.read().split("\n"))
                     if x.strip() and not x.startswith("#")]
        seen = set()
        for k in range(len(lines) - RUN + 1):
            run = [x for _, x in lines[k:k + RUN]]
            if trivial(run):
                continue
            h = hashlib.sha1("\n".join(run).encode()).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            where.setdefault(h, []).append((f, lines[k][0]))
    bad = []
    for h, places in where.items():
        fs = sorted({f for f, _ in places})
        if len(fs) > 1:
            bad.append(" ~ ".join("%s:%d" % p for p in places))
    return bad


def circles():
    calls = tool("calls")
    objs, g = calls.graph(BUILD, SRC)
    if len(objs) < 20:
        return None, ["only %d objects found in %s: not a built tree" % (len(objs), BUILD)]
    return len(objs), [" -> ".join(c) for c in calls.cycles(g)]


# the row kernels whose loops prefetch (metrics/row_simd.c): p512_row's and
# p256_row's two loops in each dtype's kernel and its _out twin, and the
# f32 fast loop (f512_run2) in p512_f32s; each at least PREFETCH_MIN times
PREFETCHED = ["p512_f32s"] + ["%s_%s%s" % (isa, dt, out)
                               for isa, dts in (("p512", ("f32", "f16", "bf16", "f64")),
                                                ("p256", ("f32x", "f16", "bf16", "f64")))
                               for dt in dts for out in ("", "_out")]
PREFETCH_MIN = 2


def disassembly(obj):
    """{function: its prefetcht0 count} of a built object; None where it
    holds no machine code (-flto) or objdump is missing."""
    try:
        p = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True,
                           text=True)
        h = subprocess.run(["objdump", "-h", obj], capture_output=True, text=True)
    except OSError:
        return None
    if p.returncode != 0 or ".gnu.lto_" in h.stdout:
        return None
    got, fn = {}, None
    for line in p.stdout.splitlines():
        if line.endswith(">:"):
            fn = line.split("<", 1)[1][:-2]
            got[fn] = 0
        elif fn and "prefetcht0" in line:
            got[fn] += 1
    return got


def prefetches():
    """(how many objects were read, the PREFETCHED kernels short of
    PREFETCH_MIN prefetches in each built row_simd object: libtool's PIC
    one, which the programs link, and the other where it was built)."""
    objs = [o for o in (os.path.join(BUILD, "metrics", ".libs", "libswm_la-row_simd.o"),
                        os.path.join(BUILD, "metrics", "libswm_la-row_simd.o"))
            if os.path.exists(o)]
    if not objs:
        return 0, ["no metrics/libswm_la-row_simd.o under %s: not a built tree" % BUILD]
    bad, n = [], 0
    for obj in objs:
        got = disassembly(obj)
        if got is None:
            continue
        n += 1
        bad += ["%s: %s" % (os.path.relpath(obj, BUILD), "%s not in it" % f if f not in got else
                            "%s has %d prefetcht0" % (f, got[f]))
                for f in PREFETCHED if got.get(f, 0) < PREFETCH_MIN]
    return n, bad


def main():
    files = sources()
    assert len(files) > 40, files
    cfiles = [f for f in files if f.endswith(".c")]
    fails = 0
    for what, bad in (("length", lengths(files)), ("shared runs of %d lines" % RUN,
                                                     shared_runs(cfiles))):
        print("%-26s %s" % (what, "ok" if not bad else "%d found" % len(bad)))
        for b in bad:
            print("   " + b)
        fails += len(bad)
    n, bad = circles()
    print("%-26s %s" % ("circles", "ok (%d files)" % n if not bad else "%d found" % len(bad)))
    for b in bad:
        print("   " + b)
    fails += len(bad)
    n, bad = prefetches()
    print("%-26s %s" % ("row kernels' prefetch", "%d found" % len(bad) if bad else
                        "ok (%d kernels, %d objects)" % (len(PREFETCHED), n) if n else
                        "skipped (no objdump, or objects without machine code: -flto)"))
    for b in bad:
        print("   " + b)
    fails += len(bad)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
