#!/usr/bin/python3
"""End to end from PyTorch: contrib/examples/train_tiny_gpt.py trains a tiny
causal transformer (torch.nn.MultiheadAttention blocks, BOS sink) with a
sinkwatch.torch.AttentionProbe streaming to a real sinkwatchd, and the run
file holds exactly what numpy computes on the captured attention; the probe
changes nothing in the training (bit for bit); rowstats mode stores what the
full rows give; a missing daemon never stops the training. Plus in-process
checks of the probe against a recording client.

    SINKWATCHD=./sinkwatchd SW_SRCDIR=. /usr/bin/python3 tests/e2e/train_tiny.py [CASE...]

Exit 77 (skipped) without SINKWATCHD or without torch.
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

if not os.environ.get("SINKWATCHD"):
    print("SINKWATCHD must be set: skipped")
    sys.exit(77)
try:
    import torch
except ImportError:
    print("no torch: skipped")
    sys.exit(77)

import h5py  # noqa: E402
import numpy as np  # noqa: E402

import metrics_ref as ref  # noqa: E402
from swharness import Daemon, Results, free_port  # noqa: E402

EXAMPLE = os.path.join(SRCDIR, "contrib", "examples", "train_tiny_gpt.py")
PY = sys.executable
HEAD_FIELDS = ("sink_mass", "content_mass", "entropy", "sink_entropy", "content_entropy",
               "content_term", "content_entropy_mw", "sink_balance")
STEPS, EVERY = 40, 10
PROBE_STEPS = list(range(0, STEPS + 1, EVERY))      # the final weights too
SMALL = ["--steps", str(STEPS), "--every", str(EVERY), "--layers", "2", "--heads", "4",
         "--d-model", "32", "--context", "32", "--batch", "8", "--probe-batch", "2",
         "--seed", "3", "--threads", "1", "--log-every", "10"]
TMP = tempfile.mkdtemp(prefix="sinkwatch-train-")
STATE = {}


def train(*args, timeout=120):
    """Runs the example; returns its stdout (asserts exit 0, no traceback)."""
    p = subprocess.run([PY, EXAMPLE] + SMALL + list(args), capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, "example exited %d:\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    return p.stdout


def client_stats(out):
    m = re.search(r"^client: (.*)$", out, re.M)
    assert m, out
    return dict(kv.split("=", 1) for kv in m.group(1).split())


def probe_cost(out):
    m = re.search(r"^probe cost: (\d+) probes, ([\d.]+) ms/probe .*?, (\d+) bytes/probe.*"
                  r"errors (\d+)", out, re.M)
    assert m, out
    return int(m.group(1)), float(m.group(2)), int(m.group(3)), int(m.group(4))


def wait_ended(d, run, timeout=20):
    return d.wait_ended(run, timeout)


def read_heads(path):
    with h5py.File(path, "r") as f:
        out = {name: f[name][:] for name in HEAD_FIELDS + ("rows", "rejected", "step")}
        out["attrs"] = {k: (v.decode() if isinstance(v, bytes) else v)
                        for k, v in f.attrs.items()}
    return out


def head_means(x, qpos, sink=0, delta=1e-10):
    """METRICS.md section 2 for one layer x [heads, rows, keys] (float64
    values of what was sent): the means over rows of metrics_ref.row_metrics
    on each row's qpos + 1 valid keys."""
    H, R, K = x.shape
    out = []
    for h in range(H):
        rows = [ref.row_metrics(x[h, r, :min(K, int(q) + 1)], sink, "probs", delta)
                for r, q in enumerate(qpos)]
        m = {f: float(np.mean([rm[k] for rm in rows])) for f, k in
             (("sink_mass", "s"), ("content_mass", "w"), ("entropy", "H"),
              ("sink_entropy", "hb"), ("content_entropy", "Hc"), ("content_term", "C"),
              ("sink_balance", "b"))}
        m["content_entropy_mw"] = m["content_term"] / m["content_mass"] \
            if m["content_mass"] > 0 else 0.0
        m["rows"] = len(rows)
        out.append(m)
    return out


def near(a, b, rel, abs_=1e-12):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_


def check_against_dump(path, dump, sent_to_float, rel=1e-6):
    """Every stored head value of every step equals numpy on the dump."""
    got = read_heads(path)
    assert list(got["step"]) == PROBE_STEPS, got["step"]
    qpos = np.load(os.path.join(dump, "qpos.npy"))
    worst = 0.0
    for t, step in enumerate(PROBE_STEPS):
        sent = np.load(os.path.join(dump, "sent_%06d.npy" % step))
        x = sent_to_float(sent)
        assert x.shape[2] == len(qpos), (x.shape, qpos.shape)
        for layer in range(x.shape[0]):
            for h, want in enumerate(head_means(x[layer], qpos)):
                assert int(got["rows"][t, layer, h]) == want["rows"], \
                    (step, layer, h, got["rows"][t, layer, h], want["rows"])
                assert int(got["rejected"][t, layer, h].sum()) == 0, got["rejected"][t, layer, h]
                for name in HEAD_FIELDS:
                    g = float(got[name][t, layer, h])
                    assert near(g, want[name], rel, 1e-9), (name, step, layer, h, g, want[name])
                    if want[name] != 0:
                        worst = max(worst, abs(g - want[name]) / abs(want[name]))
    return got, worst


def f64(sent):
    return sent.astype(np.float64)


def bf16_to_f64(sent):
    return (sent.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------- end to end

def case_roundtrip():
    """Full f32 rows: the file has every probe step and equals numpy on the
    captured attention (all 8 head fields, row counts, no rejects)."""
    d = STATE["daemon"]
    dump = os.path.join(TMP, "dump-full")
    out = train("--connect", d.listen, "--run", "tiny-full", "--dump-probes", dump,
                "--save-final", os.path.join(TMP, "full.npz"))
    STATE["full_out"] = out
    cs = client_stats(out)
    assert cs["dropped"] == "0" and cs["queued"] == "0", cs
    assert cs["next_seq"] == str(len(PROBE_STEPS) * 2 + 1), cs
    n, ms, nbytes, errors = probe_cost(out)
    assert n == len(PROBE_STEPS) and errors == 0, out
    path = wait_ended(d, "tiny-full")
    got, worst = check_against_dump(path, dump, f64)
    assert got["attrs"]["kind"] == "probs" and got["attrs"]["split_form"] == "paired", got["attrs"]
    # the dumped rows are the captured attention: rows sum to 1 over qpos + 1
    # keys and are 0 past them (the causal mask), the BOS sink is key 0
    p = np.load(os.path.join(dump, "probe_%06d.npy" % STEPS))
    qpos = np.load(os.path.join(dump, "qpos.npy"))
    assert list(qpos) == list(range(1, 32)) * 2, qpos
    assert np.allclose(p.sum(-1), 1, atol=1e-5)
    for r, q in enumerate(qpos):
        assert not p[:, :, r, q + 1:].any()
    STATE["full_path"] = path
    print("     max relative difference to numpy: %.2e" % worst)


def case_rowstats():
    """--rowstats (the six per-row statistics reduced with torch) stores the
    same head values as the full rows of the same training, to 1e-9."""
    d = STATE["daemon"]
    out = train("--connect", d.listen, "--run", "tiny-rowstats", "--rowstats",
                "--save-final", os.path.join(TMP, "rowstats.npz"))
    assert client_stats(out)["dropped"] == "0", out
    full = read_heads(STATE.get("full_path") or wait_ended(d, "tiny-full"))
    rs = read_heads(wait_ended(d, "tiny-rowstats"))
    assert rs["attrs"]["kind"] == "rowstats", rs["attrs"]
    assert list(rs["step"]) == PROBE_STEPS, rs["step"]
    assert np.array_equal(rs["rows"], full["rows"]), (rs["rows"], full["rows"])
    assert int(rs["rejected"].sum()) == 0, rs["rejected"]
    worst = 0.0
    for name in HEAD_FIELDS:
        a, b = rs[name], full[name]
        assert np.all(np.abs(a - b) <= 1e-9 * np.maximum(np.abs(a), np.abs(b)) + 1e-12), \
            (name, np.max(np.abs(a - b)))
        nz = b != 0
        worst = max(worst, float(np.max(np.abs(a - b)[nz] / np.abs(b[nz]))))
    print("     max relative difference rowstats vs rows: %.2e" % worst)


def load_final(name):
    with np.load(os.path.join(TMP, name)) as z:
        return {k: z[k] for k in z.files}


def same_training(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), \
            "%s differs (max %g)" % (k, np.max(np.abs(a[k] - b[k])))


def case_bit_identical():
    """Training with the probe attached (rows, rowstats) gives the same
    parameters and losses, bit for bit, as training without it."""
    train("--no-probe", "--save-final", os.path.join(TMP, "noprobe.npz"))
    base = load_final("noprobe.npz")
    assert len(base["losses"]) == STEPS and np.all(np.isfinite(base["losses"]))
    assert base["losses"][-1] < base["losses"][0], base["losses"]
    for name in ("full.npz", "rowstats.npz"):
        if os.path.exists(os.path.join(TMP, name)):
            same_training(load_final(name), base)
    if not os.path.exists(os.path.join(TMP, "full.npz")):
        raise AssertionError("no probed training to compare with (case roundtrip failed)")


def case_cast_subsample():
    """f16 with 8 query positions of 3 probe sequences, bf16 with 5: the
    file equals numpy on the values that were sent (renormalized by the
    daemon), and the keys were cut to the longest selected row."""
    d = STATE["daemon"]
    for cast, rows, conv in (("f16", 8, f64), ("bf16", 5, bf16_to_f64)):
        run = "tiny-%s" % cast
        dump = os.path.join(TMP, "dump-" + cast)
        out = train("--connect", d.listen, "--run", run, "--cast", cast, "--probe-rows",
                    str(rows), "--probe-batch", "3", "--dump-probes", dump)
        assert client_stats(out)["dropped"] == "0", out
        qpos = np.load(os.path.join(dump, "qpos.npy"))
        assert len(qpos) == 3 * rows and qpos.max() == 31 and qpos.min() == 1, qpos
        sent = np.load(os.path.join(dump, "sent_000000.npy"))
        assert sent.dtype == (np.float16 if cast == "f16" else np.uint16), sent.dtype
        assert sent.shape == (2, 4, 3 * rows, 32), sent.shape
        n, ms, nbytes, errors = probe_cost(out)
        assert nbytes == sent.nbytes, (nbytes, sent.nbytes)
        check_against_dump(wait_ended(d, run), dump, conv)
    # explicit positions cut the keys: the longest row is qpos 12, 13 keys
    dump = os.path.join(TMP, "dump-cut")
    train("--connect", d.listen, "--run", "tiny-cut", "--probe-positions", "4,12,0",
          "--dump-probes", dump)
    sent = np.load(os.path.join(dump, "sent_000000.npy"))
    assert sent.shape == (2, 4, 4, 13), sent.shape
    assert list(np.load(os.path.join(dump, "qpos.npy"))) == [4, 12, 4, 12]
    check_against_dump(wait_ended(d, "tiny-cut"), dump, f64)


def case_daemon_down():
    """No daemon at the endpoint: the training completes with the probe
    attached (messages queued, then dropped and counted), nothing raises,
    and the training is the same as without the probe."""
    port = free_port()
    t0 = time.time()
    out = train("--connect", "tcp://127.0.0.1:%d" % port, "--run", "tiny-nodaemon",
                "--flush-timeout", "0.2", "--save-final", os.path.join(TMP, "down.npz"))
    cs = client_stats(out)
    n, ms, nbytes, errors = probe_cost(out)
    assert n == len(PROBE_STEPS) and errors == 0, out
    assert cs["sent"] == "0" and cs["subscribed"] == "False", cs
    # 5 probes x 2 layers + end fit the 16-message queue; close() drops them
    assert int(cs["queued"]) == len(PROBE_STEPS) * 2 + 1, cs
    same_training(load_final("down.npz"), load_final("noprobe.npz")
                  if os.path.exists(os.path.join(TMP, "noprobe.npz")) else load_final("full.npz"))
    assert time.time() - t0 < 60


# ---------------------------------------------------------------- in process

class Recorder:
    """A stand-in for sinkwatch.Client that records what it is given."""

    def __init__(self, layers, heads, sink=0, ok=True):
        self.layers, self.heads, self.sink, self.ok = layers, heads, sink, ok
        self.msgs = []

    def send(self, step, layer, array, kind="probs", qpos=None, dtype=None):
        self.msgs.append(dict(step=step, layer=layer, array=np.array(array), kind=kind,
                              qpos=None if qpos is None else list(qpos), dtype=dtype))
        return self.ok


def tiny_model(seed=0, context=12, layers=2, heads=4, d=16):
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    import train_tiny_gpt as t
    torch.manual_seed(seed)
    m = t.TinyGPT(layers, heads, d, context, 0.2)
    x = torch.randint(0, 256, (3, context))
    x[:, 0] = t.BOS
    return m, x


def direct_weights(m, x):
    """Per-head weights of every block, computed by hand: [B, H, T, T]."""
    out = []
    with torch.no_grad():
        T = x.shape[1]
        h = m.tok(x) + m.pos(torch.arange(T))
        for b in m.blocks:
            y = b.ln1(h)
            a, w = b.attn(y, y, y, attn_mask=m.mask[:T, :T], need_weights=True,
                          average_attn_weights=False)
            out.append(w)
            h = h + a
            h = h + b.mlp(b.ln2(h))
    return out


def case_probe_state():
    """A probe restores every module's train flag, the torch / random /
    numpy generators and the MHA forwards, and the rows it sends are the
    model's per-head weights, (batch, query) pairs batch-major."""
    import sinkwatch.torch as swt
    m, x = tiny_model()
    m.train()
    m.blocks[1].eval()                     # a mixed state must come back as it was
    flags = [mm.training for mm in m.modules()]
    rec = Recorder(2, 4)
    probe = swt.AttentionProbe(m, x, rec, every=7)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    assert probe.maybe(0) and not probe.maybe(3) and probe.maybe(14)
    assert [mm.training for mm in m.modules()] == flags
    assert torch.equal(before[0], torch.get_rng_state())
    assert before[1] == random.getstate()
    assert np.array_equal(before[2], np.random.get_state()[1])
    assert all("forward" not in b.attn.__dict__ for b in m.blocks)
    assert [(g["step"], g["layer"]) for g in rec.msgs] == [(0, 0), (0, 1), (14, 0), (14, 1)]
    m.eval()
    want = direct_weights(m, x)
    B, T = x.shape
    for g in rec.msgs[:2]:
        assert g["kind"] == "probs" and g["dtype"] is None and g["array"].dtype == np.float32
        assert g["qpos"] == list(range(1, T)) * B, g["qpos"]
        w = want[g["layer"]][:, :, 1:, :].permute(1, 0, 2, 3).reshape(4, B * (T - 1), T)
        assert np.array_equal(g["array"], w.numpy()), np.abs(g["array"] - w.numpy()).max()
    st = probe.stats
    assert st["probes"] == 2 and st["errors"] == 0 and st["messages"] == 4, st
    assert st["bytes_last"] == 2 * 4 * B * (T - 1) * T * 4 and st["ms_mean"] > 0, st

    def noisy(model, batch):            # a capture that draws from every generator
        torch.rand(3), random.random(), np.random.rand()
        return [torch.softmax(torch.randn(1, 4, 5, 5), -1)]
    m.train()
    before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    p = swt.AttentionProbe(m, x, Recorder(1, 4), every=1, capture=noisy, causal=False)
    assert p.maybe(0), p.stats
    assert torch.equal(before[0], torch.get_rng_state())
    assert before[1] == random.getstate()
    assert np.array_equal(before[2], np.random.get_state()[1])
    assert [mm.training for mm in m.modules()] == [True] * len(flags)


def case_probe_modes():
    """hf and callable captures, causal=False, query subsampling, f16/bf16
    bits, and rowstats that agree with metrics_ref on rows with a sink near
    1, near 0 and exact zeros (1e-9)."""
    import sinkwatch.torch as swt
    rng = np.random.default_rng(2)
    H, T = 3, 10
    z = rng.normal(0, 3, (2, H, T, T))
    z[..., 0] += np.linspace(-25, 25, H)[None, :, None]          # sink weak .. dominant
    z[0, 0, 5, 2:4] = -np.inf                                     # exact zeros in a row
    z = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, z)
    att = torch.softmax(torch.tensor(z, dtype=torch.float32), -1)

    class Out:
        def __init__(self, a):
            self.attentions = a

    class HF(torch.nn.Module):
        def forward(self, input_ids, output_attentions=False):
            assert output_attentions and not self.training and not torch.is_grad_enabled()
            return Out((att, att * 1.0))

    rec = Recorder(2, H)
    p = swt.AttentionProbe(HF(), {"input_ids": None}, rec, every=1, capture="hf")
    assert p.maybe(0), p.stats
    probs = rec.msgs[0]["array"]
    assert probs.shape == (H, 2 * (T - 1), T)

    rec = Recorder(2, H)
    p = swt.AttentionProbe(torch.nn.Identity(), None, rec, every=1, rowstats=True,
                           capture=lambda model, batch: [att, att])
    assert p.maybe(0), p.stats
    g = rec.msgs[0]
    assert g["kind"] == "rowstats" and g["array"].shape == (H, 2 * (T - 1), 6)
    assert g["array"].dtype == np.float64
    for h in range(H):
        for r, q in enumerate(g["qpos"]):
            rm = ref.row_metrics(probs[h, r, :q + 1].astype(np.float64), 0, "probs", 1e-10)
            for i, k in enumerate(("s", "w", "H", "hb", "Hc", "b")):
                assert near(float(g["array"][h, r, i]), rm[k], 1e-9, 1e-14), \
                    (h, r, k, g["array"][h, r, i], rm[k])
    assert (g["array"][..., :5] >= 0).all()

    for kw, shape, dt in ((dict(query_positions=3), (H, 6, 10), np.float32),
                          (dict(query_positions=[2, 6]), (H, 4, 7), np.float32),
                          (dict(cast="f16"), (H, 18, 10), np.float16),
                          (dict(cast="bf16"), (H, 18, 10), np.uint16),
                          (dict(causal=False), (H, 20, 10), np.float32)):
        rec = Recorder(2, H)
        p = swt.AttentionProbe(torch.nn.Identity(), None, rec, every=1,
                               capture=lambda mm, b: [att, att], **kw)
        assert p.maybe(0), (kw, p.stats)
        a = rec.msgs[0]["array"]
        assert a.shape == shape and a.dtype == dt, (kw, a.shape, a.dtype)
        if kw.get("cast") == "bf16":
            assert rec.msgs[0]["dtype"] == "bf16"
            f = (a.astype(np.uint32) << 16).view(np.float32)
            assert np.allclose(f, probs, rtol=2 ** -8, atol=0)
        if kw.get("causal") is False:
            assert rec.msgs[0]["qpos"] is None
        if kw.get("query_positions") == 3:
            assert rec.msgs[0]["qpos"] == [1, 5, 9] * 2, rec.msgs[0]["qpos"]


def case_probe_never_raises():
    """A failing capture, a shape the client refuses and a real Client with
    no daemon: the probe returns False or queues, counts, warns once, and
    the model and generators are restored."""
    import sinkwatch
    import sinkwatch.torch as swt
    m, x = tiny_model()
    m.train()

    def boom(model, batch):
        model(batch)
        raise KeyError("boom")
    rec = Recorder(2, 4)
    p = swt.AttentionProbe(m, x, rec, every=1, capture=boom)
    rng = torch.get_rng_state()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        assert p.maybe(0) is False and p.maybe(1) is False
    assert p.stats["errors"] == 2 and "boom" in p.stats["last_error"], p.stats
    assert len([w for w in ws if "sinkwatch probe" in str(w.message)]) == 1, ws
    assert m.training and torch.equal(rng, torch.get_rng_state()) and not rec.msgs

    rec = Recorder(2, 8)                          # the client says 8 heads, the model has 4
    p = swt.AttentionProbe(m, x, rec, every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert p.maybe(0) is False
    assert p.stats["errors"] == 1 and not rec.msgs
    assert all("forward" not in b.attn.__dict__ for b in m.blocks)

    c = sinkwatch.Client("inproc-down", 2, 4, endpoint="tcp://127.0.0.1:%d" % free_port(),
                         linger=0, queue_max=16)
    p = swt.AttentionProbe(m, x, c, every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = [p.maybe(s) for s in range(10)]
    c.close()
    assert res[:8] == [True] * 8 and res[-1] is False, res      # 16 queued, then dropped
    assert p.stats["errors"] == 0 and p.stats["send_false"] == 4, p.stats
    assert m.training

    # resume_from passes through to a client that has sent nothing yet: every
    # message of the incarnation carries it; a client that sent refuses it
    c = sinkwatch.Client("inproc-resume", 2, 4, endpoint="tcp://127.0.0.1:%d" % free_port(),
                         linger=0)
    p = swt.AttentionProbe(m, x, c, every=1, resume_from=40)
    assert c.resume_from == 40
    assert p.maybe(41) is True
    hdrs = [sinkwatch.decode_header(h) for h, _, _ in c._pending]
    assert len(hdrs) == 2 and all(h["resume"] == 40 and h["inc"] == c.incarnation
                                  for h in hdrs), hdrs
    try:
        swt.AttentionProbe(m, x, c, every=1, resume_from=7)
        raise AssertionError("resume_from changed after a send")
    except ValueError:
        pass
    c.close()


CASES = [("probe_state", case_probe_state), ("probe_modes", case_probe_modes),
         ("probe_never_raises", case_probe_never_raises),
         ("roundtrip", case_roundtrip), ("rowstats", case_rowstats),
         ("bit_identical", case_bit_identical), ("cast_subsample", case_cast_subsample),
         ("daemon_down", case_daemon_down)]


def main(argv):
    want = set(argv)
    res = Results()
    d = Daemon(extra=["--pair-rows", "0"])
    try:
        d.start()
    except Exception as e:  # noqa: BLE001
        print("FAIL daemon start: %s" % e)
        return 1
    STATE["daemon"] = d
    try:
        for name, fn in CASES:
            if not want or name in want:
                res.check(name, fn)
    finally:
        rc = d.stop()
        if rc != 0:
            print("FAIL daemon exit status %s\n%s" % (rc, d.read_log()))
            res.failed += 1
        log = d.read_log()
        if "AddressSanitizer" in log or "runtime error" in log:
            print("FAIL sanitizer report in the daemon log\n%s" % log)
            res.failed += 1
    if not res.failed:
        shutil.rmtree(TMP, ignore_errors=True)
        shutil.rmtree(d.tmp, ignore_errors=True)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
