#!/usr/bin/python3
"""Prune attention heads by whole-row entropy and by content entropy, and
compare the validation perplexity of the two.

The model is the one of train_tiny_gpt.py (beside this file): trained here
with a held-out tail of the text (--holdout, default 0.1), or loaded with
--checkpoint (a file that train_tiny_gpt.py --save wrote). At that last
checkpoint the command takes the per-head attention of a fixed probe batch
(--probe-batch sequences evenly spread over the training text, every query
position q >= 1, i.e. every row with at least two keys) and computes, per
row, with sinkwatch.torch.rowstats (doc/METRICS.md section 1, sink = the
first key, the BOS token):

    H   whole-row entropy            -sum_i a_i ln a_i
    Hc  content entropy              entropy of a_i / w over the keys i != 0
    s   sink mass                    a_0

and the plain mean of each over the rows of each head (section 2). It ranks
the heads twice, by mean H and by mean Hc (ascending; ties by layer, head),
masks the k first heads of each ranking (train_tiny_gpt's set_head_mask:
the head's output is zeroed before the output projection) and reports the
validation perplexity on the held-out text for: the unpruned model, pruning
by H, pruning by Hc, and, for reference, --random draws of k heads. It says
which heads each ranking chose and where the two disagree.

Which end is pruned. The seed document (doc/METRICS.md names it) says only
that pruning heads by the wrong compositional channel can inflate
perplexity over a hundredfold; it says neither which end of a ranking a
pruning study removes nor why. This command follows issue 13 and prunes
the k LOWEST-entropy heads, the "most focused" ones (--end high prunes the
other end). Why the channel matters at that end (our reading of the seed's
two-question framing, not a claim of the seed): a head's whole-row H is low
either because its attention is sharp over content tokens or because most
of it sits on the sink, which is close to a no-op; H cannot tell the two
apart, Hc only measures the first. So the two rankings can pick different
heads, and the perplexities show what that costs on this model.

    contrib/examples/prune_heads.py --k 1,2,4,8
    contrib/examples/prune_heads.py --checkpoint model.pt --k 1,2,4 --json

Needs torch and numpy (and the sinkwatch package under contrib/python for
rowstats); no daemon.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import train_tiny_gpt as tg  # noqa: E402
from sinkwatch.torch import rowstats  # noqa: E402

# The default model: 6 x 8 heads, the smallest we measured in which sinks
# form within the budget (after 300 steps at lr 1e-2, five layer-0 heads
# put 0.35 to 0.70 of their mass on the first token; 4 x 8 at lr 3e-3 formed
# none in 1200 steps), and small enough to train in about a minute on two
# CPU cores (README.md, "Pruning heads").
DEFAULTS = {"layers": 6, "heads": 8, "d_model": 32, "context": 32, "batch": 16,
            "steps": 300, "lr": 1e-2, "dropout": 0.0, "holdout": 0.1, "seed": 1}

END_NOTE = ("pruning the k %s-entropy heads of each ranking (issue 13; the seed "
            "document says pruning by the wrong channel can inflate perplexity over "
            "a hundredfold, but not which end a study prunes)")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", metavar="PATH", default=None,
                   help="load this train_tiny_gpt.py --save file instead of training")
    p.add_argument("--save", metavar="PATH", default=None,
                   help="keep the model trained here in PATH (a --checkpoint file)")
    g = p.add_argument_group("training (ignored with --checkpoint)")
    g.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    g.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    g.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    g.add_argument("--d-model", type=int, default=DEFAULTS["d_model"])
    g.add_argument("--context", type=int, default=DEFAULTS["context"])
    g.add_argument("--batch", type=int, default=DEFAULTS["batch"])
    g.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    g.add_argument("--dropout", type=float, default=DEFAULTS["dropout"])
    g.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    g.add_argument("--holdout", type=float, default=DEFAULTS["holdout"],
                   help="the held-out tail of the text (validation), fraction")
    p.add_argument("--k", default="1,2,4,8", metavar="K,K,..",
                   help="numbers of heads to prune (default 1,2,4,8)")
    p.add_argument("--end", choices=("low", "high"), default="low",
                   help="prune the lowest-entropy heads (default) or the highest")
    p.add_argument("--probe-batch", type=int, default=16,
                   help="sequences in the probe batch that ranks the heads")
    p.add_argument("--random", type=int, default=3, metavar="N",
                   help="random prunings of k heads drawn for reference (default 3)")
    p.add_argument("--random-seed", type=int, default=0)
    p.add_argument("--eval-windows", type=int, default=200, metavar="N",
                   help="at most N held-out windows of one context, evenly spread "
                   "(default 200; 0: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--dump-attention", metavar="FILE.npz", default=None,
                   help="save the probe batch's attention (att: [layers, batch, heads, "
                   "T, T], masked keys 0) and inputs (x), the rows the ranking used "
                   "are every query q >= 1")
    a = p.parse_args(argv)
    try:
        a.ks = [int(k) for k in a.k.split(",") if k.strip()]
    except ValueError:
        p.error("--k: a comma-separated list of integers")
    if not a.ks or min(a.ks) < 1:
        p.error("--k: every k must be >= 1")
    if a.eval_windows is not None and a.eval_windows <= 0:
        a.eval_windows = None
    if a.probe_batch < 1 or a.random < 0:
        p.error("--probe-batch must be >= 1 and --random >= 0")
    if not a.checkpoint and not 0.0 < a.holdout < 1.0:
        p.error("--holdout must be in (0, 1): the validation text is held out")
    return a


def train(a, path):
    """Train with train_tiny_gpt.py's own loop (no probe) and save to path."""
    argv = ["--no-probe", "--save", path, "--holdout", repr(a.holdout),
            "--steps", str(a.steps), "--layers", str(a.layers), "--heads", str(a.heads),
            "--d-model", str(a.d_model), "--context", str(a.context),
            "--batch", str(a.batch), "--lr", repr(a.lr), "--dropout", repr(a.dropout),
            "--seed", str(a.seed), "--threads", str(a.threads),
            "--log-every", str(max(1, a.steps // 5))]
    out = sys.stderr if a.json else sys.stdout
    with contextlib.redirect_stdout(out):
        print("training: train_tiny_gpt.py " + " ".join(argv), flush=True)
        tg.main(argv)


def probe_batch(train_text, context, n):
    """n sequences evenly spread over the training text, drawn from no RNG
    (the example's own probe batch, with n sequences)."""
    starts = torch.linspace(0, len(train_text) - context - 1, n + 2)[1:-1].long()
    x, _ = tg.batch_from(train_text, starts, context)
    return x


def head_stats(att):
    """Per head means over the rows q >= 1 of every sequence: (s, H, Hc),
    each [layers, heads] float64. att: list of [batch, heads, T, T]."""
    out = []
    for a in att:
        B, Hn, T, _ = a.shape
        p = a[:, :, 1:, :].permute(1, 0, 2, 3).reshape(Hn, B * (T - 1), T)
        nvalid = torch.arange(2, T + 1).repeat(B)          # row q has q + 1 keys
        st = rowstats(p, nvalid, sink=0)                    # [heads, rows, 6]
        out.append(st.mean(dim=1).numpy())                  # [heads, 6]
    st = np.stack(out)                                      # [layers, heads, 6]
    return st[..., 0], st[..., 2], st[..., 4]


def ranking(values, end):
    """Flat head indices (layer * heads + head), the ones to prune first
    first: ascending mean entropy for end "low", descending for "high";
    ties by index."""
    v = np.asarray(values, dtype=np.float64).ravel()
    idx = np.arange(v.size)
    return np.lexsort((idx, v if end == "low" else -v))


def mask_of(heads, L, H):
    m = np.ones((L, H), dtype=np.float32)
    for i in heads:
        m[i // H, i % H] = 0.0
    return m


def name(i, H):
    return "L%dH%d" % (i // H, i % H)


def spearman(x, y):
    rx = np.argsort(np.argsort(x)).astype(np.float64)
    ry = np.argsort(np.argsort(y)).astype(np.float64)
    rx -= rx.mean()
    ry -= ry.mean()
    d = math.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / d) if d > 0 else float("nan")


def run(a):
    t_start = time.time()
    torch.set_num_threads(a.threads)
    tmpdir = None
    t_train = 0.0
    if a.checkpoint:
        path = a.checkpoint
    else:
        if a.save:
            path = a.save
        else:
            tmpdir = tempfile.mkdtemp(prefix="prune-heads-")
            path = os.path.join(tmpdir, "model.pt")
        t0 = time.time()
        train(a, path)
        t_train = time.time() - t0
    model, meta = tg.load_checkpoint(path)
    if tmpdir:
        os.remove(path)
        os.rmdir(tmpdir)
    hp = meta["hparams"]
    L, H, C = hp["layers"], hp["heads"], hp["context"]
    holdout = meta.get("holdout") or 0.0
    if holdout <= 0:
        raise SystemExit("%s was trained on all of the text (--holdout 0): no held-out "
                         "text to validate on" % path)
    train_text, heldout = tg.split_text(tg.load_text(meta.get("text_dir", tg.TEXT_DIR)),
                                        holdout)
    for k in a.ks:
        if k > L * H:
            raise SystemExit("--k %d: the model has %d heads" % (k, L * H))

    # rank at the last checkpoint, on the fixed probe batch
    t0 = time.time()
    model.set_head_mask(None)
    x = probe_batch(train_text, C, a.probe_batch)
    att = model.attention(x)
    s, Hrow, Hc = head_stats(att)
    if a.dump_attention:
        np.savez(a.dump_attention, att=np.stack([w.numpy() for w in att]), x=x.numpy())
    rank_H = ranking(Hrow, a.end)
    rank_Hc = ranking(Hc, a.end)
    t_rank = time.time() - t0

    # validation perplexity
    t0 = time.time()
    losses = {}

    def loss_of(mask):
        model.set_head_mask(mask)
        v, nwin = tg.evaluate(model, heldout, C, a.eval_windows)
        model.set_head_mask(None)
        losses["windows"] = nwin
        return v

    base = loss_of(None)
    ones_equal = loss_of(np.ones((L, H), dtype=np.float32)) == base
    rng = np.random.default_rng(a.random_seed)
    per_k = []
    for k in a.ks:
        by_H = sorted(int(i) for i in rank_H[:k])
        by_Hc = sorted(int(i) for i in rank_Hc[:k])
        lH = loss_of(mask_of(by_H, L, H))
        lHc = lH if by_Hc == by_H else loss_of(mask_of(by_Hc, L, H))
        rand = []
        for _ in range(a.random):
            pick = sorted(int(i) for i in rng.choice(L * H, size=k, replace=False))
            rand.append({"heads": pick, "loss": loss_of(mask_of(pick, L, H))})
        rppl = [math.exp(r["loss"]) for r in rand]
        per_k.append({
            "k": k,
            "by_entropy": {"heads": by_H, "names": [name(i, H) for i in by_H],
                           "loss": lH, "ppl": math.exp(lH)},
            "by_content_entropy": {"heads": by_Hc, "names": [name(i, H) for i in by_Hc],
                                   "loss": lHc, "ppl": math.exp(lHc)},
            "random": {"draws": [dict(r, ppl=math.exp(r["loss"])) for r in rand],
                       "ppl_median": float(np.median(rppl)) if rppl else None,
                       "ppl_min": min(rppl) if rppl else None,
                       "ppl_max": max(rppl) if rppl else None},
            "overlap": len(set(by_H) & set(by_Hc)),
            "only_by_entropy": [name(i, H) for i in by_H if i not in by_Hc],
            "only_by_content_entropy": [name(i, H) for i in by_Hc if i not in by_H],
            "ppl_ratio_entropy_over_content": math.exp(lH - lHc),
        })
    t_eval = time.time() - t0

    heads = []
    posH = np.empty(L * H, dtype=np.int64)
    posH[rank_H] = np.arange(L * H)
    posHc = np.empty(L * H, dtype=np.int64)
    posHc[rank_Hc] = np.arange(L * H)
    for i in range(L * H):
        heads.append({"layer": i // H, "head": i % H, "sink_mass": float(s.flat[i]),
                      "entropy": float(Hrow.flat[i]), "content_entropy": float(Hc.flat[i]),
                      "rank_entropy": int(posH[i]), "rank_content_entropy": int(posHc[i])})
    return {
        "format": "sinkwatch-prune-heads/1",
        "model": meta.get("model"), "params": meta.get("params"), "hparams": hp,
        "checkpoint": a.checkpoint, "steps": meta.get("steps"), "seed": meta.get("seed"),
        "end": a.end, "end_note": END_NOTE % ("lowest" if a.end == "low" else "highest"),
        "probe": {"sequences": a.probe_batch, "rows_per_head": a.probe_batch * (C - 1),
                  "queries": "q >= 1", "sink": 0},
        "validation": {"heldout_bytes": int(len(heldout)), "windows": losses["windows"],
                       "holdout": holdout},
        "unpruned": {"loss": base, "ppl": math.exp(base)},
        "mask_of_ones_equals_unmasked": bool(ones_equal),
        "ranking_entropy": [int(i) for i in rank_H],
        "ranking_content_entropy": [int(i) for i in rank_Hc],
        "spearman_entropy_content_entropy": spearman(Hrow.ravel(), Hc.ravel()),
        "heads": heads,
        "k": per_k,
        "seconds": {"train": t_train, "rank": t_rank, "eval": t_eval,
                    "total": time.time() - t_start},
    }


def text(r):
    hp = r["hparams"]
    L, H = hp["layers"], hp["heads"]
    w = []
    w.append("model %s  %d layers x %d heads, d_model %d, context %d, %s params, %s steps"
             % (r["model"], L, H, hp["d"], hp["context"], r["params"], r["steps"]))
    w.append("ranked on %d probe sequences (%d rows per head, queries q >= 1, sink = key 0); "
             "validation: %d held-out bytes, %d windows"
             % (r["probe"]["sequences"], r["probe"]["rows_per_head"],
                r["validation"]["heldout_bytes"], r["validation"]["windows"]))
    w.append(r["end_note"])
    w.append("mask of ones gives the unmasked loss bit for bit: %s"
             % ("yes" if r["mask_of_ones_equals_unmasked"] else "NO"))
    w.append("")
    w.append("per head (means over the probe rows; rank 0 is pruned first)")
    w.append("  head     sink s   entropy H  content Hc   rank H  rank Hc")
    for h in sorted(r["heads"], key=lambda h: h["rank_entropy"]):
        w.append("  L%dH%-4d %7.3f %11.3f %11.3f %8d %8d"
                 % (h["layer"], h["head"], h["sink_mass"], h["entropy"],
                    h["content_entropy"], h["rank_entropy"], h["rank_content_entropy"]))
    w.append("  Spearman correlation of H and Hc over heads: %.3f"
             % r["spearman_entropy_content_entropy"])
    w.append("")
    w.append("validation perplexity (unpruned %.3f)" % r["unpruned"]["ppl"])
    w.append("     k   by H (row)  by Hc (content)   H / Hc   random: median [min .. max]")
    for e in r["k"]:
        rd = e["random"]
        rs = ("%.3f [%.3f .. %.3f] of %d" % (rd["ppl_median"], rd["ppl_min"], rd["ppl_max"],
                                              len(rd["draws"]))
              if rd["draws"] else "-")
        w.append("  %4d %12.3f %16.3f %8.3f   %s"
                 % (e["k"], e["by_entropy"]["ppl"], e["by_content_entropy"]["ppl"],
                    e["ppl_ratio_entropy_over_content"], rs))
    w.append("")
    w.append("heads chosen")
    for e in r["k"]:
        w.append("  k=%d  by H: %s" % (e["k"], " ".join(e["by_entropy"]["names"])))
        w.append("  %s  by Hc: %s" % (" " * len(str(e["k"])),
                                       " ".join(e["by_content_entropy"]["names"])))
        if e["overlap"] == e["k"]:
            w.append("  %s  the rankings agree" % (" " * len(str(e["k"]))))
        else:
            w.append("  %s  disagree on %d: only by H %s; only by Hc %s"
                     % (" " * len(str(e["k"])), e["k"] - e["overlap"],
                        " ".join(e["only_by_entropy"]), " ".join(e["only_by_content_entropy"])))
    sec = r["seconds"]
    w.append("")
    w.append("time: train %.1f s, rank %.1f s, evaluate %.1f s, total %.1f s"
             % (sec["train"], sec["rank"], sec["eval"], sec["total"]))
    return "\n".join(w)


def main(argv=None):
    a = parse(argv)
    r = run(a)
    if a.json:
        json.dump(r, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(text(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
