"""storage/LAYOUT.md's dataset table and the run files the daemon writes
must not drift: every dataset of a file (one with per-row statistics, so
every dataset of the schema) has a row in the table with its type and its
`dims`, and every dataset the table names is in the file."""
import os
import re
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import Daemon, Results, Sender, random_probs  # noqa: E402

SRC = os.environ.get("SW_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TYPES = {"float64": "<f8", "int64": "<i8", "uint64": "<u8", "uint8": "|u1", "int8": "|i1", "int32": "<i4"}


def doc_table():
    """{name: (type, dims)} from the table under '## Datasets'."""
    text = open(os.path.join(SRC, "storage", "LAYOUT.md"), encoding="utf-8").read()
    sec = text.split("## Datasets", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([A-Za-z_0-9]+)`", cells[0])
        types = [t.strip() for t in cells[1].split(",")]
        dims = re.findall(r"`([a-z,]+)`", cells[3])
        for i, n in enumerate(names):
            out[n] = (types[i] if len(types) == len(names) else types[0],
                      dims[0] if dims else None)
    return out


def main():
    d = Daemon(extra=["--cross-layer-pairs", "1"]).start()
    try:
        snd = Sender(d.listen, "layout", 2, 3)
        x = random_probs(np.random.default_rng(3), 3, 4, 6)
        for step in (0, 1):
            for layer in (0, 1):
                snd.snapshot(step, layer, x)
        snd.end()
        path = d.wait_ended("layout")
        snd.close()
    finally:
        assert d.stop() == 0
    doc = doc_table()
    c = Results()
    with h5py.File(path, "r") as f:
        names = list(f.keys())
        got = {n: (f[n].dtype.str, f[n].attrs["dims"]) for n in names}
        assert f.attrs["row_stats"] == 1
        assert f.attrs["cross_layer_pairs"] == 1

    def file_in_doc():
        for n, (dt, dims) in got.items():
            assert n in doc, "/%s is not in LAYOUT.md's table" % n
            assert TYPES[doc[n][0]] == dt, (n, doc[n][0], dt)
            assert doc[n][1] == dims, (n, doc[n][1], dims)

    def doc_in_file():
        missing = sorted(set(doc) - set(got))
        assert not missing, "LAYOUT.md names datasets a file lacks: %s" % missing

    c.check("every_dataset_documented", file_in_doc)
    c.check("every_documented_dataset_exists", doc_in_file)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
