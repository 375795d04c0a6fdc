"""Several senders, one run (PROTOCOL.md 7b). Real attention: the tiny causal
transformer of contrib/examples/train_tiny_gpt.py (2 layers x 4 heads, 2
sequences x 63 causal rows, 64 keys), its fixed probe dumped at 8 steps. The
same tensors are sent by one process (protocol v1, whole layers) and by 2
and 4 processes (v2): split by layers (pipeline), by heads (tensor
parallel), by rows (context parallel), by layers and heads at once, and all
of it by every process (data parallel). Every run file's metric datasets
must equal the single sender's to 1e-12, step by step, and so must the
report; the sender table must count each sender's messages, duplicates and
ends. A data-parallel rank whose attention differs is flagged; a part
withheld by one rank marks exactly that step, layer and heads missing,
named by rank, in status and in the file."""
import json
import multiprocessing as mp
import os
import random
import sys
import time

import h5py
import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, Daemon, Results, Sender, example_probes, run_cmd  # noqa: E402

L, H, K = 2, 4, 64
DATA, QPOS = example_probes(L, H, K, steps=21, every=3, run="distributed")
STEPS = sorted(DATA)
R = len(QPOS)
assert len(STEPS) == 8 and R == 126, (STEPS, R)

# step-indexed datasets that are functions of one step's tensors
SAME = ["sink_mass", "content_mass", "entropy", "sink_entropy", "content_entropy",
        "content_term", "content_entropy_mw", "sink_balance", "rows", "rejected",
        "cosine_keep", "cosine_drop", "js_keep", "js_drop", "pair_sink", "pair_content",
        "flip_rate", "missing", "missing_rank", "row_sink_mass", "row_content_mass",
        "row_entropy", "row_sink_entropy", "row_content_entropy", "row_status", "row_use"]
LIVE = ["dH", "dH_sink", "dH_content", "drift_sink", "drift_content"]


def new_inc():
    return ((int(time.time() * 1e6) << 12) | random.getrandbits(12)) or 1


def parts_of(layout, rank, senders):
    """What rank sends under a layout: [(layer, head0, nheads, row0, nrows)]."""
    out = []
    for lay in range(L):
        if layout == "single" or layout == "data":
            out.append((lay, 0, H, 0, R))
        elif layout == "pipeline":
            if lay % senders == rank:
                out.append((lay, 0, H, 0, R))
        elif layout == "heads":
            n = H // senders
            out.append((lay, rank * n, n, 0, R))
        elif layout == "rows":
            n = R // senders
            out.append((lay, 0, H, rank * n, R - rank * n if rank == senders - 1 else n))
        elif layout == "mixed":     # rank = stage * 2 + tensor rank
            if lay == rank // 2:
                out.append((lay, (rank % 2) * 2, 2, 0, R))
    return out


def sender_main(endpoint, run, layout, rank, senders, inc, withhold, perturb, go, end_gate):
    """One process: its parts of every step, in step order, then its end
    (once end_gate is set)."""
    snd = Sender(endpoint, run, L, H, model="tiny", params=1000)
    go.wait()
    for st in STEPS:
        for (lay, h0, nh, r0, nr) in parts_of(layout, rank, senders):
            if withhold != "end" and (st, lay) == withhold:
                snd.seq += 1        # sent by nobody: a gap in this rank's seq
                continue
            x = DATA[st][lay][h0:h0 + nh, r0:r0 + nr]
            if perturb:
                x = x * np.float32(1 - 1e-3)
                x[:, :, 0] += np.float32(1e-3)
            over = {"inc": inc}
            if senders > 1:
                over.update(v=2, rank=rank, senders=senders)
            if nh != H:
                over.update(v=2, head0=h0)
            if nr != R:
                over.update(v=2, row0=r0, rows=R)
            snd.snapshot(st, lay, np.ascontiguousarray(x), qpos=QPOS[r0:r0 + nr], **over)
    end_gate.wait(60)
    if withhold == "end":
        snd.close()
        snd.ctx.term()
        return
    h = {"v": 2 if senders > 1 else 1, "type": "end", "run": run, "seq": snd.seq,
         "inc": inc}
    if senders > 1:
        h.update(rank=rank, senders=senders)
    snd.send_frames([msgpack.packb(h)])
    snd.close()
    snd.ctx.term()      # a forked child exits without atexit: deliver what is queued


def stream(d, run, layout, senders, withhold=None, perturb_rank=None, before_end=None):
    """Every sender in its own process; before_end() runs before they end."""
    inc = new_inc()
    ctx = mp.get_context("fork")
    go, end_gate = ctx.Event(), ctx.Event()
    procs = [ctx.Process(
        target=sender_main, args=(d.listen, run, layout, k, senders, inc,
                                  withhold if k == senders - 1 else None,
                                  k == perturb_rank, go, end_gate)) for k in range(senders)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    go.set()
    try:
        if before_end:
            before_end()
    finally:
        end_gate.set()
        for p in procs:
            p.join(60)
    for p in procs:
        assert p.exitcode == 0, (layout, p.exitcode)
    return d.wait_ended(run, timeout=30) if withhold != "end" else d.run_file(run)


def by_step(f):
    step = f["step"][:]
    return {int(s): i for i, s in enumerate(step)}


def senders_table(f):
    names = f.attrs["sender_fields"].split(",")
    return [dict(zip(names, (int(v) for v in row))) for row in f["senders"][:]]


def compare(ref, path):
    """Every step-indexed metric of path equals ref's, step by step, 1e-12."""
    with h5py.File(ref, "r") as a, h5py.File(path, "r") as b:
        ia, ib = by_step(a), by_step(b)
        assert sorted(ia) == sorted(ib) == STEPS, (sorted(ia), sorted(ib))
        for name in SAME + LIVE:
            for st in STEPS:
                x, y = a[name][ia[st]], b[name][ib[st]]
                if name in LIVE:    # live dH is taken against the previous row
                    pa, pb = a["prev_row"][ia[st]], b["prev_row"][ib[st]]
                    if pa < 0 or pb < 0 or a["step"][pa] != b["step"][pb]:
                        continue
                x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
                assert np.array_equal(np.isnan(x), np.isnan(y)), (name, st)
                ok = np.isnan(x) | (np.abs(x - y) <= 1e-12)
                assert ok.all(), (name, st, np.nanmax(np.abs(x - y)))


def report(path):
    rc, out, err = run_cmd([SINKWATCH, "report", "--format", "json", path])
    assert rc == 0, err
    return json.loads(out)


def close_reports(a, b):
    def walk(x, y, where):
        if isinstance(x, dict):
            for k in x:
                if k in ("file", "run", "path", "segments", "time", "senders"):
                    continue
                walk(x[k], y[k], where + "." + k)
        elif isinstance(x, list):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, "%s[%d]" % (where, i))
        elif isinstance(x, float):
            assert (np.isnan(x) and np.isnan(y)) or abs(x - y) <= 1e-12, (where, x, y)
        else:
            assert x == y, (where, x, y)
    walk(a, b, "report")


res = Results()
d = Daemon(extra=["--step-timeout-ms", "1500"]).start()
files = {}


def case_single():
    files["single"] = stream(d, "single", "single", 1)
    with h5py.File(files["single"], "r") as f:
        assert f.attrs["layout_version"] == 3
        assert (f["missing_rank"][:] == -1).all()
        t = senders_table(f)
        assert len(t) == 1 and t[0]["rank"] == 0 and t[0]["senders"] == 1, t
        assert t[0]["messages"] == len(STEPS) * L + 1 and t[0]["ended"] == 1, t


def layout_case(layout, senders):
    def fn():
        run = "%s%d" % (layout, senders)
        before = d.status()["traffic"]
        path = stream(d, run, layout, senders)
        after = d.status()["traffic"]
        # heads sent whole (every row, >= 16 KiB) are kept as they came,
        # parts by rows are copied (sinkwatchd.h, SWD_HOLD_MIN)
        nparts = sum(len(parts_of(layout, k, senders)) for k in range(senders)) * len(STEPS)
        kept = int(after["parts_kept"]) - int(before["parts_kept"])
        copied = int(after["parts_copied"]) - int(before["parts_copied"])
        if layout in ("heads", "mixed"):
            assert (kept, copied) == (nparts, 0), (layout, senders, kept, copied, nparts)
        elif layout == "rows":
            assert (kept, copied) == (0, nparts), (layout, senders, kept, copied, nparts)
        else:       # whole layers: no parts
            assert (kept, copied) == (0, 0), (layout, senders, kept, copied)
        # every byte charged for the run, its parts and kept frames is given back
        d.wait(lambda st: int(st["queue"]["inflight_bytes"]) == 0, what="inflight back to 0")
        compare(files["single"], path)
        close_reports(report(files["single"]), report(path))
        with h5py.File(path, "r") as f:
            t = senders_table(f)
            assert sorted(x["rank"] for x in t) == list(range(senders)), t
            for x in t:
                n = len(parts_of(layout, x["rank"], senders)) * len(STEPS)
                assert x["messages"] == n + 1 and x["lost"] == 0 and x["ended"] == 1, t
                assert x["senders"] == senders and x["missing"] == 0, t
                assert x["overlaps"] == x["mismatches"] == x["disagree"] == 0, t
            dups = sum(x["duplicates"] for x in t)
            want = (senders - 1) * L * len(STEPS) if layout == "data" else 0
            assert dups == want, (dups, want, t)
            if layout == "data":
                assert sum(x["uncompared"] for x in t) == 0, t
            assert f["lost"][-1] == 0 and f["incomplete"][-1] == 0
    return fn


def case_data_parallel_disagree():
    """Rank 1 of 2 computes other attention: its copies are flagged."""
    path = stream(d, "dp-disagree", "data", 2, perturb_rank=1)
    with h5py.File(path, "r") as f:
        t = senders_table(f)
        dis = sum(x["disagree"] for x in t)
        assert dis > 0 and sum(x["duplicates"] for x in t) == L * len(STEPS), t
    assert "copy differs from the data kept" in d.read_log()


def case_withheld():
    """Rank 1 of 2 (heads 2-3) never sends step STEPS[3], layer 1."""
    st = STEPS[3]

    def live():     # the run goes on: the step timed out (1.5 s) and is named
        deadline = time.time() + 20
        while time.time() < deadline:
            status = d.ctl("status")
            if "gap: withheld" in status:
                break
            time.sleep(0.1)
        assert "gap: withheld step %d layer 1 heads 2-3 missing (rank 1)" % st in status, status
        line = [x for x in status.splitlines() if x.startswith("sender: withheld") and
                "rank=1/2" in x]
        assert line and "missing=2 " in line[0] and "lost=1 " in line[0], status
    path = stream(d, "withheld", "heads", 2, withhold=(st, 1), before_end=live)
    with h5py.File(path, "r") as f:
        i = by_step(f)
        mr = f["missing_rank"][:]
        want = np.full((len(STEPS), L, H), -1)
        want[i[st], 1, 2:] = 1
        order = [i[s] for s in STEPS]
        assert (mr[order] == want[[i[s] for s in STEPS]]).all(), mr
        assert np.isnan(f["sink_mass"][i[st], 1, 2:]).all()
        assert not np.isnan(f["sink_mass"][i[st], 1, :2]).any()
        assert (f["rows"][i[st], 1, 2:] == 0).all() and (f["rows"][i[st], 1, :2] > 0).all()
        assert np.isnan(f["flip_rate"][i[st], 1]).all()
        assert (f["row_status"][i[st], 1, 2:] == 255).all()
        assert f["missing"][i[st], 1] == 0      # some of the layer came
        assert f["incomplete"][-1] == 1 and f["lost"][-1] == 1
        t = {x["rank"]: x for x in senders_table(f)}
        assert t[1]["missing"] == 2 and t[1]["lost"] == 1 and t[0]["missing"] == 0, t
    # the other heads of that step equal the single sender's
    with h5py.File(files["single"], "r") as a, h5py.File(path, "r") as b:
        ia, ib = by_step(a), by_step(b)
        for name in ("sink_mass", "entropy", "content_entropy"):
            x, y = a[name][ia[st], 1, :2], b[name][ib[st], 1, :2]
            assert np.allclose(x, y, rtol=0, atol=1e-12), (name, x, y)


def case_withheld_then_end():
    """The senders end before the step times out: it is written at once, the
    heads rank 1 never sent missing and named."""
    st = STEPS[5]
    path = stream(d, "withheld-end", "heads", 2, withhold=(st, 0))
    with h5py.File(path, "r") as f:
        i = by_step(f)
        assert sorted(i) == STEPS
        mr = f["missing_rank"][:]
        assert (mr[i[st], 0] == [-1, -1, 1, 1]).all(), mr[i[st]]
        mr[i[st], 0] = -1
        assert (mr == -1).all()
        assert f["ended"][-1] == 1 and f["incomplete"][-1] == 1


def case_never_ended():
    """Rank 1 of 2 never sends its end: the run is not ended; when the
    daemon stops, the file, report and check name rank 1."""
    d2 = Daemon(extra=["--step-timeout-ms", "1500"]).start()
    try:
        path = stream(d2, "no-end", "pipeline", 2, withhold="end")
        d2.wait(lambda st: "rank=0/2" in d2.ctl("status senders") and
                "ended=1" in d2.ctl("status senders"), what="rank 0's end")
    finally:
        assert d2.stop() == 0
    with h5py.File(path, "r") as f:
        assert f["ended"].shape[0] == 0
        t = {x["rank"]: x for x in senders_table(f)}
        assert t[0]["ended"] == 1 and t[1]["ended"] == 0, t
        assert t[1]["messages"] == len(STEPS), t
        assert sorted(by_step(f)) == STEPS
    rep = report(path)
    assert [x["rank"] for x in rep["ranks_not_ended"]] == [1], rep["ranks_not_ended"]
    rc, out, err = run_cmd([SINKWATCH, "check", "--format", "json", path])
    js = json.loads(out)
    assert [x["rank"] for x in js["files"][0]["ranks_not_ended"]] == [1], js
    rc, out, err = run_cmd([SINKWATCH, "report", path])
    assert "rank 1 of 2 (incarnation" in out and "never sent its end" in out, out


res.check("single", case_single)
for layout, n in (("pipeline", 2), ("heads", 2), ("heads", 4), ("rows", 2), ("mixed", 4),
                  ("data", 2), ("data", 4)):
    res.check("%s_%d" % (layout, n), layout_case(layout, n))
res.check("data_parallel_disagree", case_data_parallel_disagree)
res.check("withheld", case_withheld)
res.check("withheld_then_end", case_withheld_then_end)
res.check("never_ended", case_never_ended)
rc = d.stop()
log = d.read_log()
assert rc == 0, rc
assert "AddressSanitizer" not in log and "runtime error" not in log, log[-3000:]
sys.exit(res.finish())
