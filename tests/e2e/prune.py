#!/usr/bin/python3
"""contrib/examples/prune_heads.py on a small budget: its output has the
promised structure and finite perplexities; its two head rankings are the
sorted per-head mean entropies that numpy computes on its own from the same
attention (whole-row H, and content Hc over the non-sink keys renormalized,
doc/METRICS.md section 1); the heads it prunes are the first k of each; the
example's head mask of all ones gives the unmasked model's loss bit for bit,
masking a head is zeroing its columns of the output projection, and masking
any one head changes the loss. Nothing here asserts which pruning is worse:
on a tiny model that is what the command measures, not a property.

    SW_SRCDIR=. /usr/bin/python3 tests/e2e/prune.py [CASE...]

Exit 77 (skipped) without torch.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(SRCDIR, "contrib", "examples")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))

try:
    import torch
except ImportError:
    print("no torch: skipped")
    sys.exit(77)

import numpy as np  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from swharness import Results  # noqa: E402

COMMAND = os.path.join(EXAMPLES, "prune_heads.py")
PY = sys.executable
LAYERS, HEADS, CONTEXT = 2, 4, 32
KS = [1, 2, 3]
RANDOM = 2
SMALL = ["--steps", "40", "--layers", str(LAYERS), "--heads", str(HEADS), "--d-model", "32",
         "--context", str(CONTEXT), "--batch", "8", "--seed", "3", "--threads", "1",
         "--k", ",".join(map(str, KS)), "--probe-batch", "3", "--random", str(RANDOM),
         "--eval-windows", "24"]
TMP = tempfile.mkdtemp(prefix="sinkwatch-prune-")
STATE = {}


def command(*args, timeout=120, ok=True):
    p = subprocess.run([PY, COMMAND] + list(args), capture_output=True, text=True,
                       timeout=timeout)
    if ok:
        assert p.returncode == 0, "exit %d:\n%s\n%s" % (p.returncode, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr
    return p


def inproc(*args):
    """(exit status, stdout, stderr) of the command run in this process (no
    second torch start-up)."""
    import contextlib
    import io
    import prune_heads
    out, err = io.StringIO(), io.StringIO()
    rc = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = prune_heads.main(list(args))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int) and e.code is not None:
                err.write(str(e.code))
    return rc, out.getvalue(), err.getvalue()


def result():
    """The JSON of one small run (trained here, saved, attention dumped)."""
    if "r" not in STATE:
        p = command(*SMALL, "--json", "--save", os.path.join(TMP, "model.pt"),
                    "--dump-attention", os.path.join(TMP, "att.npz"))
        STATE["r"] = json.loads(p.stdout)
    return STATE["r"]


def numpy_head_means(att):
    """Per head means of (s, H, Hc) over the rows q >= 1 of each sequence,
    computed here from the rows: att [layers, batch, heads, T, T]."""
    att = np.asarray(att, dtype=np.float64)
    L, B, H, T, _ = att.shape
    out = np.zeros((3, L, H))
    for l in range(L):
        for h in range(H):
            acc = np.zeros(3)
            for b in range(B):
                for q in range(1, T):
                    a = att[l, b, h, q, :q + 1]
                    a = a / a.sum()
                    nz = a[a > 0]
                    ent = -(nz * np.log(nz)).sum()
                    c = a[1:]
                    w = c.sum()
                    hc = 0.0
                    if w > 0 and len(c) > 1:
                        c = c / w
                        c = c[c > 0]
                        hc = -(c * np.log(c)).sum()
                    acc += (a[0], ent, hc)
            out[:, l, h] = acc / (B * (T - 1))
    return out


def check_ranking(order, values):
    """order is np.argsort(values) ascending, up to exact-enough ties."""
    v = np.asarray(values).ravel()
    ref = np.argsort(v, kind="stable")
    order = np.asarray(order)
    assert sorted(order.tolist()) == list(range(v.size)), order
    if np.array_equal(order, ref):
        return
    # a different order is only acceptable between values equal to 1e-12
    assert np.all(np.diff(v[order]) >= -1e-12), (order, ref, v)


# ------------------------------------------------------------------ cases

def case_structure():
    r = result()
    assert r["format"] == "sinkwatch-prune-heads/1"
    assert r["end"] == "low" and "lowest" in r["end_note"]
    n = LAYERS * HEADS
    assert r["hparams"]["layers"] == LAYERS and r["hparams"]["heads"] == HEADS
    assert len(r["heads"]) == n
    assert sorted(r["ranking_entropy"]) == list(range(n))
    assert sorted(r["ranking_content_entropy"]) == list(range(n))
    assert r["validation"]["windows"] == 24 and r["validation"]["heldout_bytes"] > 0
    assert r["mask_of_ones_equals_unmasked"] is True
    u = r["unpruned"]
    assert math.isfinite(u["loss"]) and u["loss"] > 0
    assert abs(u["ppl"] - math.exp(u["loss"])) < 1e-9 * u["ppl"]
    assert [e["k"] for e in r["k"]] == KS
    for e in r["k"]:
        k = e["k"]
        for key in ("by_entropy", "by_content_entropy"):
            p = e[key]
            assert len(p["heads"]) == k == len(set(p["heads"])), p
            assert p["names"] == ["L%dH%d" % (i // HEADS, i % HEADS) for i in p["heads"]]
            assert math.isfinite(p["loss"]) and p["loss"] > 0
            assert abs(p["ppl"] - math.exp(p["loss"])) <= 1e-9 * p["ppl"]
        a, b = set(e["by_entropy"]["heads"]), set(e["by_content_entropy"]["heads"])
        assert e["overlap"] == len(a & b)
        assert len(e["only_by_entropy"]) == len(e["only_by_content_entropy"]) == k - len(a & b)
        ratio = e["by_entropy"]["ppl"] / e["by_content_entropy"]["ppl"]
        assert abs(e["ppl_ratio_entropy_over_content"] - ratio) < 1e-9 * ratio
        rd = e["random"]
        assert len(rd["draws"]) == RANDOM
        for d in rd["draws"]:
            assert len(set(d["heads"])) == k and math.isfinite(d["loss"])
        ppl = [d["ppl"] for d in rd["draws"]]
        assert rd["ppl_min"] == min(ppl) and rd["ppl_max"] == max(ppl)
        assert abs(rd["ppl_median"] - float(np.median(ppl))) < 1e-12 * rd["ppl_median"]
    for h in r["heads"]:
        assert 0 <= h["sink_mass"] <= 1 and h["entropy"] >= 0 and h["content_entropy"] >= 0


def case_rankings_are_numpy_sorted_entropies():
    """The per-head means and both rankings, recomputed by numpy from the
    attention the command dumped."""
    r = result()
    z = np.load(os.path.join(TMP, "att.npz"))
    att = z["att"]
    assert att.shape == (LAYERS, 3, HEADS, CONTEXT, CONTEXT), att.shape
    s, Hrow, Hc = numpy_head_means(att)
    for h in r["heads"]:
        l, i = h["layer"], h["head"]
        assert abs(h["sink_mass"] - s[l, i]) < 1e-9, (h, s[l, i])
        assert abs(h["entropy"] - Hrow[l, i]) < 1e-9, (h, Hrow[l, i])
        assert abs(h["content_entropy"] - Hc[l, i]) < 1e-9, (h, Hc[l, i])
    check_ranking(r["ranking_entropy"], Hrow)
    check_ranking(r["ranking_content_entropy"], Hc)
    for e in r["k"]:
        k = e["k"]
        assert e["by_entropy"]["heads"] == sorted(r["ranking_entropy"][:k])
        assert e["by_content_entropy"]["heads"] == sorted(r["ranking_content_entropy"][:k])
    for h in r["heads"]:
        i = h["layer"] * HEADS + h["head"]
        assert r["ranking_entropy"][h["rank_entropy"]] == i
        assert r["ranking_content_entropy"][h["rank_content_entropy"]] == i


def case_high_end():
    """--end high ranks the other way round (same model, no training)."""
    r = result()
    rc, out, err = inproc("--checkpoint", os.path.join(TMP, "model.pt"), "--k", "2",
                          "--end", "high", "--probe-batch", "3", "--random", "0",
                          "--eval-windows", "8", "--json")
    assert rc == 0, err
    h = json.loads(out)
    assert h["end"] == "high" and "highest" in h["end_note"]
    v = np.array([x["entropy"] for x in sorted(r["heads"], key=lambda x: (x["layer"], x["head"]))])
    check_ranking(h["ranking_entropy"], -v)
    assert h["k"][0]["by_entropy"]["heads"] == sorted(h["ranking_entropy"][:2])


def heldout_batch(meta):
    import train_tiny_gpt as tg
    _, held = tg.split_text(tg.load_text(), meta["holdout"])
    offs = torch.arange(0, 16) * CONTEXT
    return tg.batch_from(held, offs, CONTEXT)


def loss(model, x, y):
    with torch.no_grad():
        return F.cross_entropy(model(x).reshape(-1, 257), y.reshape(-1)).item()


def case_mask_of_ones_is_exact():
    import train_tiny_gpt as tg
    result()
    model, meta = tg.load_checkpoint(os.path.join(TMP, "model.pt"))
    x, y = heldout_batch(meta)
    with torch.no_grad():
        a = model(x)
        model.set_head_mask(np.ones((LAYERS, HEADS)))
        b = model(x)
        model.set_head_mask(None)
    assert torch.equal(a, b), (a - b).abs().max()
    l0 = loss(model, x, y)
    model.set_head_mask(np.ones((LAYERS, HEADS)))
    assert loss(model, x, y) == l0
    # in training mode too, with the same dropout draws
    model.train()
    model.set_head_mask(None)
    torch.manual_seed(7)
    c = model(x)
    model.set_head_mask(np.ones((LAYERS, HEADS)))
    torch.manual_seed(7)
    d = model(x)
    assert torch.equal(c, d)
    # the command's unpruned loss is this checkpoint's, on its windows
    model.eval()
    model.set_head_mask(None)
    _, held = tg.split_text(tg.load_text(), meta["holdout"])
    v, n = tg.evaluate(model, held, CONTEXT, 24)
    assert n == 24 and v == result()["unpruned"]["loss"], (v, result()["unpruned"])


def case_masking_a_head_changes_the_loss():
    """Every single head masked: the loss moves, and the logits are those of
    the model whose output projection reads zero from that head."""
    import train_tiny_gpt as tg
    result()
    model, meta = tg.load_checkpoint(os.path.join(TMP, "model.pt"))
    x, y = heldout_batch(meta)
    l0 = loss(model, x, y)
    hd = model.blocks[0].attn.head_dim
    for l in range(LAYERS):
        for h in range(HEADS):
            m = np.ones((LAYERS, HEADS))
            m[l, h] = 0
            model.set_head_mask(m)
            lm = loss(model, x, y)
            assert math.isfinite(lm) and lm != l0, (l, h, lm, l0)
            with torch.no_grad():
                masked = model(x)
            model.set_head_mask(None)
            ref, _ = tg.load_checkpoint(os.path.join(TMP, "model.pt"))
            with torch.no_grad():
                ref.blocks[l].attn.out_proj.weight[:, h * hd:(h + 1) * hd] = 0
                want = ref(x)
            assert torch.allclose(masked, want, rtol=0, atol=1e-5), (masked - want).abs().max()
    try:
        model.set_head_mask(np.ones((LAYERS + 1, HEADS)))
    except ValueError:
        pass
    else:
        raise AssertionError("a mask of the wrong shape was accepted")


def case_text_and_errors():
    ck = os.path.join(TMP, "model.pt")
    rc, out, err = inproc("--checkpoint", ck, "--k", "1,2", "--probe-batch", "2",
                          "--random", "1", "--eval-windows", "8")
    assert rc == 0, err
    for want in ("validation perplexity (unpruned", "by H (row)", "by Hc (content)",
                 "heads chosen", "lowest-entropy", "Spearman", "time: train"):
        assert want in out, (want, out)
    assert ("the rankings agree" in out) or ("disagree on" in out), out
    rc, out, err = inproc("--checkpoint", ck, "--k", "0")
    assert rc == 2 and "--k" in err, (rc, err)
    rc, out, err = inproc("--checkpoint", ck, "--k", str(LAYERS * HEADS + 1))
    assert rc != 0 and "heads" in err, (rc, err)
    # a model trained on all of the text has nothing to validate on
    import train_tiny_gpt as tg
    all_text = os.path.join(TMP, "all.pt")
    model = tg.build_model({"layers": 1, "heads": 2, "d": 16, "context": 16, "dropout": 0.0})
    tg.save_model(all_text, model, {"layers": 1, "heads": 2, "d": 16, "context": 16,
                                    "dropout": 0.0}, {"holdout": 0.0})
    rc, out, err = inproc("--checkpoint", all_text, "--k", "1")
    assert rc != 0 and "held-out" in err, (rc, err)


CASES = [(n[5:], f) for n, f in sorted(globals().items())
         if n.startswith("case_") and callable(f)]


def main(argv):
    want = set(argv)
    res = Results()
    for name, fn in CASES:
        if not want or name in want:
            res.check(name, fn)
    if not res.failed:
        shutil.rmtree(TMP, ignore_errors=True)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
