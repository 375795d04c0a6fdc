#!/usr/bin/python3
"""One report model (issue 28): GET /api/report of `sinkwatch serve` equals
`sinkwatch report FILE --format json --per-head` with the same options, on a
run that has everything a report names: two incarnations (the second
resumes, superseding rows of the first), two senders each (ranks 0 and 1),
a part that never came (an incomplete step) and a rank that never sent its
end. Every key path of the CLI's JSON is in the API's with an equal value
(the API may add keys of its own: id, dir, state, ...); file is compared by
its base name.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/web_report.py
"""
import json
import math
import os
import shutil
import sys
import time
import urllib.parse

import h5py
import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Results, Sender,  # noqa: E402
                       random_probs, run_cmd)

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)

from servelib import Server  # noqa: E402

RUN = "resumed"
L, H, ROWS, KEYS = 2, 4, 3, 8
# INC_B above 2^53: the page shows it whole (a double would round it)
INC_A, INC_B = 7001, (1 << 62) + 7002


def _end(snd, rank, inc):
    h = {"v": 2, "type": "end", "run": snd.run, "seq": snd.seq, "time": time.time(),
         "inc": inc, "rank": rank, "senders": 2}
    snd.send_frames([msgpack.packb(h)])


def _wait_rows(path, rows, senders, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with h5py.File(path, "r", libver="latest", swmr=True) as f:
                if f["step"].shape[0] >= rows and f["senders"].shape[0] >= senders:
                    return
        except (OSError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError("%s: %d rows and %d senders not seen in %ss" % (path, rows, senders,
                                                                         timeout))


def make_resumed_run(dest_dir, seed=28):
    """The run file dest_dir/resumed.h5: incarnation A (ranks 0 and 1, 2
    heads each) sends steps 0..5, rank 1's layer 1 of step 3 never comes,
    rank 0 ends, rank 1 never does; incarnation B resumes from step 4 and
    sends steps 4..7, both ranks ending. Returns its path."""
    rng = np.random.default_rng(seed)
    d = Daemon(extra=["--step-timeout-ms", "300"]).start()
    try:
        def part(snd, rank, inc, step, layer, **extra):
            snd.snapshot(step, layer, random_probs(rng, 2, ROWS, KEYS), inc=inc, v=2,
                         rank=rank, senders=2, head0=2 * rank, rows=ROWS, **extra)

        a = [Sender(d.listen, RUN, L, H, model="m28", params=28) for _ in range(2)]
        for step in range(6):
            for layer in range(L):
                for rank in range(2):
                    if not (rank == 1 and step == 3 and layer == 1):
                        part(a[rank], rank, INC_A, step, layer)
        _end(a[0], 0, INC_A)
        path = d.run_file(RUN)
        _wait_rows(path, 6, 2)
        b = [Sender(d.listen, RUN, L, H, model="m28", params=28) for _ in range(2)]
        for step in range(4, 8):
            for layer in range(L):
                for rank in range(2):
                    part(b[rank], rank, INC_B, step, layer, resume=4)
        for rank in range(2):
            _end(b[rank], rank, INC_B)
        _wait_rows(path, 10, 4)
        time.sleep(0.5)     # the sender table's last counters
        for s in a + b:
            s.close()
    finally:
        assert d.stop() == 0
    os.makedirs(dest_dir, exist_ok=True)
    dst = os.path.join(dest_dir, os.path.basename(path))
    shutil.copyfile(path, dst)
    shutil.rmtree(d.tmp, ignore_errors=True)
    return dst


def report_cli(path, *args):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json", "--per-head"]
                           + list(args))
    assert rc == 0, err
    return json.loads(out)


def same_paths(want, got, where="", count=None):
    """Every key path of want is in got with an equal value (floats to the
    last bit, NaN as null); file by its base name. Returns the leaves
    compared."""
    count = [0] if count is None else count
    if isinstance(want, dict):
        assert isinstance(got, dict), (where, got)
        for k, v in want.items():
            assert k in got, "%s: the API lacks %s" % (where or "/", k)
            if k == "file" and isinstance(v, str):
                assert os.path.basename(v) == os.path.basename(got[k]), (where, v, got[k])
                count[0] += 1
            else:
                same_paths(v, got[k], where + "/" + k, count)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, len(want), got)
        for i, (w, g) in enumerate(zip(want, got)):
            same_paths(w, g, "%s[%d]" % (where, i), count)
    else:
        if isinstance(want, float) and math.isnan(want):
            assert got is None or (isinstance(got, float) and math.isnan(got)), (where, got)
        else:
            assert want == got and type(want) == type(got), (where, want, got)
        count[0] += 1
    return count[0]


def main():
    res = Results()
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "sw-web-report-%d" % os.getpid())
    data = os.path.join(tmp, "data")
    path = make_resumed_run(data)
    srv = Server([data])
    rid = urllib.parse.quote("0/" + os.path.basename(path), safe="")
    try:
        def the_run():
            rep = report_cli(path)
            assert [s["inc"] for s in rep["segments"]] == [INC_A, INC_B], rep["segments"]
            assert rep["rows_superseded"] == 2, rep["rows_superseded"]
            assert len(rep["senders"]) == 4, rep["senders"]
            assert [(r["inc"], r["rank"]) for r in rep["ranks_not_ended"]] == [(INC_A, 1)], \
                rep["ranks_not_ended"]
            assert [g["step"] for g in rep["incomplete_steps"]] == [3], rep["incomplete_steps"]
        res.check("the run: two incarnations, 2 rows superseded, 4 senders, rank 1 of the "
                  "first not ended, step 3 incomplete", the_run)

        def whole():
            want = report_cli(path)
            got = srv.json("/api/report?id=" + rid)
            n = same_paths(want, got)
            assert n > 200, n
            for k in ("id", "dir", "state"):    # the server's own keys too
                assert k in got, k
        res.check("GET /api/report equals sinkwatch report --format json --per-head: every "
                  "key path, every value", whole)

        def ranged():
            for frm, to in ((2, 6), (0, 4), (4, 7)):
                want = report_cli(path, "--from", str(frm), "--to", str(to))
                got = srv.json("/api/report?id=%s&from=%d&to=%d" % (rid, frm, to))
                same_paths(want, got)
            want = report_cli(path, "--eps", "0.5", "--to", "5")
            same_paths(want, srv.json("/api/report?id=%s&to=5&eps=0.5" % rid))
        res.check("with a range and eps: the same options, the same report", ranged)
    finally:
        assert srv.stop() == 0
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(res.finish())


if __name__ == "__main__":
    main()
