#!/usr/bin/env python3
"""Function and file lengths of the C sources (STYLE: the function's name at
column 0, its body from a "{" to a "}" at column 0).

    dev/funclen.py [--over N] [FILE...]     default: every .c outside tests/
"""
import os
import re
import subprocess
import sys

NAME = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)\(")


def functions(path):
    """(name, first line, length in lines) of each function of a C file."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    name, start = None, None
    for i, line in enumerate(lines):
        m = NAME.match(line)
        if m and not line.rstrip().endswith(";"):
            name, start = m.group(1), i
        elif line.startswith("}") and name is not None:
            out.append((name, start + 1, i - start + 1))
            name = None
    return out


def sources(root):
    files = subprocess.run(["git", "-C", root, "ls-files", "*.c"], capture_output=True,
                           text=True, check=True).stdout.split()
    return [f for f in files if not f.startswith(("tests/", "fuzz/"))]


def main(argv):
    over = 100
    if argv[:1] == ["--over"]:
        over, argv = int(argv[1]), argv[2:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = argv or sources(root)
    for f in files:
        p = f if os.path.isabs(f) else os.path.join(root, f)
        with open(p, encoding="utf-8", errors="replace") as fh:
            n = fh.read().count("\n")
        for name, line, length in functions(p):
            if length > over:
                print(f"{f}:{line}: {name} {length}")
        if n > 1000:
            print(f"{f}: file {n}")


if __name__ == "__main__":
    main(sys.argv[1:])
