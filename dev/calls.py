#!/usr/bin/env python3
"""Which C files call each other in a circle: the file graph from the
objects' symbols (A -> B when A's object uses a function B's defines),
and its cycles. Run in a built tree:

    dev/calls.py [--dot]
"""
import collections
import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def objects(build=None, src=ROOT):
    """source file -> one of its objects (libtool's .o beside the source),
    the objects in the build tree (default: this tree), the sources in src."""
    build = build or src
    out = {}
    for o in glob.glob(os.path.join(build, "*", "*.o")) + glob.glob(os.path.join(build, "*", "*", "*.o")):
        rel = os.path.relpath(o, build)
        d, base = os.path.split(rel)
        if d.startswith(("tests", "fuzz", "bench")) or "/." in rel:
            continue
        # libswm_la-row.o, sinkwatchd-writer.o, sinkwatch-check.o -> row.c ...
        name = base[:-2].split("-", 1)[-1] if "-" in base else base[:-2]
        c = os.path.join(d, name + ".c")
        if os.path.exists(os.path.join(src, c)):
            out.setdefault(c, o)
    return out


def symbols(obj):
    p = subprocess.run(["nm", obj], capture_output=True, text=True)
    defined, used = set(), set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDRB":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def graph(build=None, src=ROOT):
    objs = objects(build, src)
    defs, uses = {}, {}
    for src, o in objs.items():
        d, u = symbols(o)
        uses[src] = u
        for s in d:
            defs.setdefault(s, set()).add(src)
    g = collections.defaultdict(set)
    for src, u in uses.items():
        for s in u:
            for t in defs.get(s, ()):
                if t != src:
                    g[src].add(t)
    return objs, g


def cycles(g):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in list(g):
        if v not in index:
            visit(v)
    return comps


def main():
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else None
    objs, g = graph(build)
    if "--dot" in sys.argv:
        print("digraph calls {")
        for a in sorted(g):
            for b in sorted(g[a]):
                print('  "%s" -> "%s";' % (a, b))
        print("}")
        return 0
    cs = cycles(g)
    for c in cs:
        print("circle: " + " ".join(c))
        for a in c:
            print("   %s -> %s" % (a, " ".join(sorted(x for x in g[a] if x in c))))
    print("%d files, %d circles" % (len(objs), len(cs)))
    return 1 if cs else 0


if __name__ == "__main__":
    sys.exit(main())
