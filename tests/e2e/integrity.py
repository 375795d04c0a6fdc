"""Run integrity: the same report whatever the order and the restarts of
what arrives. Real attention: the tiny causal transformer of
contrib/examples/train_tiny_gpt.py trained on the system's license texts,
its fixed probe (2 layers x 4 heads, 2 sequences x 63 causal rows, 64 keys)
dumped at 16 steps, streamed to a real daemon in order, in reverse,
shuffled, by three parallel senders, and with a resume (a new incarnation
re-sending the last 4 steps). Every report must agree with the others to
1e-9 and with an independent float64 numpy computation of the paired split
(METRICS.md §3) to 1e-6."""
import json
import os
import sys

import numpy as np

np.seterr(divide="ignore", invalid="ignore")    # log 0 of masked keys: masked after

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, Daemon, Results, Sender, example_probes, run_cmd  # noqa: E402

L, H, K = 2, 4, 64


DATA, QPOS = example_probes(L, H, K, run="integrity")
STEPS = sorted(DATA)
assert len(STEPS) == 16, STEPS


def probe(step, extra_sink=0.0):
    """The step's real attention; with extra_sink, another trajectory: the
    sink's logit raised by extra_sink in every valid row (a resumed job that
    went elsewhere)."""
    if not extra_sink:
        return DATA[step]
    out = []
    for x in DATA[step]:
        p = x.astype(np.float64)
        p[:, :, 0] *= np.exp(extra_sink)
        p /= p.sum(-1, keepdims=True)
        out.append(p.astype(np.float32))
    return out


def rowstats(p):
    """s, w, H, hb, Hc per row, float64, rows renormalized (§1); valid n >= 2."""
    a = p.astype(np.float64)
    n = QPOS + 1
    mask = np.arange(K)[None, None, :] < n[None, :, None]
    a = np.where(mask, a, 0.0)
    a = a / a.sum(-1, keepdims=True)
    s = a[..., 0]
    w = a[..., 1:].sum(-1)
    xl = np.where(a > 0, a * np.log(np.where(a > 0, a, 1)), 0.0)
    Hh = -xl.sum(-1)
    hb = -(s * np.log(s) + w * np.log(w))
    Hc = np.log(w) - xl[..., 1:].sum(-1) / w      # stable form of §1
    valid = (n >= 2)[None, :].repeat(a.shape[0], 0)
    return s, w, Hh, hb, Hc, valid


def paired(pa, pb):
    """Per head: the paired split between two steps (§3)."""
    s0, w0, H0, hb0, Hc0, v0 = rowstats(pa)
    s1, w1, H1, hb1, Hc1, v1 = rowstats(pb)
    v = v0 & v1
    dH = np.where(v, H1 - H0, 0).sum(-1) / v.sum(-1)
    sink = np.where(v, (hb1 - hb0) - (s1 - s0) * 0.5 * (Hc0 + Hc1), 0).sum(-1) / v.sum(-1)
    cont = np.where(v, 0.5 * (w0 + w1) * (Hc1 - Hc0), 0).sum(-1) / v.sum(-1)
    return dH, sink, cont


def reference(data):
    """Model and layer path and endpoint figures, float64, by the definitions."""
    steps = sorted(data)
    path = np.zeros((3, L, H))
    for a, b in zip(steps, steps[1:]):
        for lay in range(L):
            path[:, lay, :] += np.array(paired(data[a][lay], data[b][lay]))
    end = np.array([[paired(data[steps[0]][lay], data[steps[-1]][lay])[k]
                     for lay in range(L)] for k in range(3)])
    return path, end


def send(d, run, order, inc, data, resume=None, end=True, snd=None):
    snd = snd or Sender(d.listen, run, L, H, model="tiny", params=1000)
    extra = {"inc": inc}
    if resume is not None:
        extra["resume"] = resume
    for st in order:
        for lay in range(L):
            snd.snapshot(st, lay, data[st][lay], qpos=QPOS, **extra)
    if end:
        h = {"v": 1, "type": "end", "run": run, "seq": snd.seq, "inc": inc}
        import msgpack
        snd.send_frames([msgpack.packb(h)])
    return snd


def report(path):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json"])
    assert rc == 0, err
    return json.loads(out)


def figures(rep):
    v = []
    for part in ("path", "endpoint"):
        for k in ("dH", "sink", "content"):
            v.append(rep["model_attribution"][part][k])
            v += [la[part][k] for la in rep["layer_attribution"]]
    return np.array(v, dtype=object if None in v else float)


def ref_figures(path, end):
    v = []
    for arr in (path, end):
        for k in range(3):
            v.append(arr[k].mean())
            v += list(arr[k].mean(-1))
    return np.array(v)


def main():
    data = {st: probe(st) for st in STEPS}
    rng = np.random.default_rng(7)
    d = Daemon().start()
    reps = {}
    try:
        send(d, "inorder", STEPS, 1000, data)
        send(d, "reverse", STEPS[::-1], 1000, data)
        send(d, "shuffled", [int(x) for x in rng.permutation(STEPS)], 1000, data)
        # three parallel workers, one end at the close
        thirds = [STEPS[0::3], STEPS[1::3], STEPS[2::3]]
        snds = [Sender(d.listen, "sweep", L, H, model="tiny", params=1000) for _ in range(3)]
        order = [(w, st) for w in range(3) for st in thirds[w]]
        for w, st in [order[i] for i in rng.permutation(len(order))]:
            for lay in range(L):
                snds[w].snapshot(st, lay, data[st][lay], qpos=QPOS, inc=2000 + w)
        # the end after every worker's messages arrived (separate connections:
        # nothing orders one sender's end against another's messages)
        d.wait(lambda s: s["traffic"]["messages"] >= 3 * (16 * L + 1) + 16 * L,
               what="every sweep message")
        send(d, "sweep", [], 2002, data, snd=snds[2])
        def received(n):
            # a resumed job starts after the old one stopped: its messages
            # all arrived (separate connections are not ordered)
            d.wait(lambda s: s["traffic"]["messages"] >= n, what="%d messages" % n)

        # a resume: the last 4 steps again from a new incarnation
        sent = 4 * (16 * L + 1) + 16 * L
        send(d, "resume", STEPS, 3000, data, end=False)
        received(sent)
        send(d, "resume", STEPS[12:], 3001, data, resume=STEPS[11])
        sent += 4 * L + 1
        # a resume with other data: the new trajectory wins from step 12 on
        other = dict(data)
        for st in STEPS[12:]:
            other[st] = probe(st, extra_sink=1.0)
        send(d, "resume2", STEPS, 4000, data, end=False)
        received(sent + 16 * L)
        send(d, "resume2", STEPS[12:], 4001, other, resume=STEPS[11])
        paths = {}
        for run in ("inorder", "reverse", "shuffled", "sweep", "resume", "resume2"):
            paths[run] = d.wait_ended(run)
            reps[run] = report(paths[run])
        dup_before = d.status()["drops"]["duplicate"]
        snd = send(d, "dups", STEPS[:3], 5000, data, end=False)
        d.wait(lambda s: s["writer"]["steps_written"] >= 6 * 16 + 8 + 3,
               what="the first three steps of dups")
        send(d, "dups", STEPS[1:2], 5000, data, snd=snd)
        reps["dups"] = report(d.wait_ended("dups"))
        dup_after = d.status()["drops"]["duplicate"]
        log = d.read_log()
    finally:
        assert d.stop() == 0

    c = Results()
    base = figures(reps["inorder"])
    path, end = reference(data)

    def agree():
        for run in ("reverse", "shuffled", "sweep", "resume"):
            f = figures(reps[run])
            assert f.dtype != object, (run, reps[run]["steps_used"], reps[run]["segments"])
            diff = np.abs(f - base).max()
            print("  %-9s max |report - in order| %.3g" % (run, diff))
            assert diff < 1e-9, (run, diff)

    def oracle():
        diff = np.abs(base - ref_figures(path, end)).max()
        ma = reps["inorder"]["model_attribution"]
        print("  model path dH %.6f sink %.6f content %.6f; endpoint sink %.6f; "
              "max |report - numpy paired split| %.3g" % (ma["path"]["dH"], ma["path"]["sink"],
                                                           ma["path"]["content"],
                                                           ma["endpoint"]["sink"], diff))
        assert diff < 1e-6, diff

    def labelled():
        for run, rep in reps.items():
            assert rep["step_order"] is True and rep["split_form"] == "paired" and \
                rep["endpoint_form"] == "paired", (run, rep.get("split_form"))

    def resume_other():
        p2, e2 = reference(other)
        diff = np.abs(figures(reps["resume2"]) - ref_figures(p2, e2)).max()
        assert diff < 1e-6, diff
        r = reps["resume2"]
        assert r["rows_stored"] == 20 and r["steps_used"] == 16, (r["rows_stored"], r["steps_used"])
        assert r["rows_superseded"] == 4, r["rows_superseded"]
        incs = [s["inc"] for s in r["segments"]]
        assert incs == [4000, 4001], r["segments"]
        assert r["segments"][1]["first_step"] == STEPS[12], r["segments"]
        # sinkwatch check lists the same segments of the file
        rc, out, err = run_cmd([SINKWATCH, "check", "--format", "json", paths["resume2"]])
        assert rc == 0, err
        chk = json.loads(out)["files"][0]
        assert chk["view_steps"] == 16 and chk["rows_superseded"] == 4, chk
        assert chk["segments"] == r["segments"], (chk["segments"], r["segments"])

    def duplicates():
        assert reps["dups"]["rows_stored"] == 3, reps["dups"]["rows_stored"]
        assert dup_after - dup_before >= 1, (dup_before, dup_after)

    def rows_recorded():
        import h5py
        with h5py.File(paths["inorder"], "r") as f:
            use = f["row_use"][:]
        assert use.shape == (16, len(QPOS)), use.shape
        # default pair_rows = drift_rows = 8: the 4 longest rows of each sequence
        want = [r for r in range(len(QPOS)) if QPOS[r] >= QPOS.max() - 3]
        for t in range(16):
            assert list(np.flatnonzero(use[t] & 1)) == want, (t, use[t])
            assert list(np.flatnonzero(use[t] & 2)) == want, (t, use[t])

    def clean_log():
        bad = [ln for ln in log.splitlines() if " error:" in ln or "Sanitizer" in ln]
        assert not bad, bad

    c.check("orders_and_resume_agree", agree)
    c.check("paired_split_oracle", oracle)
    c.check("report_says_how", labelled)
    c.check("resume_with_other_data", resume_other)
    c.check("duplicates_counted", duplicates)
    c.check("rows_recorded", rows_recorded)
    c.check("daemon_log_clean", clean_log)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
