#!/usr/bin/python3
"""`sinkwatch analyze` on data that looks causal without --causal: a warning
on stderr that names the flag and says the numbers differ (they do: checked
against the same data with --causal); none with --causal, none on data
that is not causal.

    SINKWATCH=./sinkwatch /usr/bin/python3 tests/e2e/analyze_causal.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

SW = os.environ.get("SINKWATCH")
if not SW:
    print("SINKWATCH not set: skipped")
    sys.exit(77)


def probs(rng, heads, Q, K, last=None):
    """[heads, Q, K] softmax rows, row q zero past last(q) when given."""
    z = rng.normal(size=(heads, Q, K))
    z[:, :, 0] += 2.0
    if last is not None:
        for q in range(Q):
            z[:, q, max(last(q) + 1, 0):] = -np.inf
    z -= z.max(-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(-1, keepdims=True)


def analyze(path, *args):
    p = subprocess.run([SW, "analyze", path + ":/attn"] + list(args), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout), p.stderr


def write(tmp, name, x, dtype="float32"):
    path = os.path.join(tmp, name + ".h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("attn", data=x.astype(dtype))
    return path


def main():
    rng = np.random.default_rng(16)
    tmp = tempfile.mkdtemp(prefix="sinkwatch-causal-")
    failed = 0
    L, H = 2, 3
    # name, tensor [L, H, Q, K], extra args, warning expected: None, "--causal" or "first"
    cases = [
        ("square", np.stack([probs(rng, H, 8, 8, lambda q: q) for _ in range(L)]), [], "--causal"),
        ("right_aligned", np.stack([probs(rng, H, 5, 12, lambda q: q + 7) for _ in range(L)]),
         [], "--causal"),
        ("queries_first", np.stack([probs(rng, H, 5, 12, lambda q: q) for _ in range(L)]), [],
         "first 5 of 12"),
        ("not_causal", np.stack([probs(rng, H, 8, 8) for _ in range(L)]), [], None),
        ("one_head_not", None, [], None),
        ("sink_only", None, [], None),
        ("one_query", np.stack([probs(rng, H, 1, 8, lambda q: q) for _ in range(L)]), [], None),
        ("f16", np.stack([probs(rng, H, 6, 6, lambda q: q) for _ in range(L)]), [], "--causal"),
    ]
    x = np.stack([probs(rng, H, 8, 8, lambda q: q) for _ in range(L)])
    x[1, 2] = probs(rng, 1, 8, 8)[0]            # one head of one layer is not causal
    cases[4] = ("one_head_not", x, [], None)
    x = np.zeros((L, H, 8, 8))
    x[:, :, :, 0] = 1.0                         # all on the sink: zero past every diagonal
    cases[5] = ("sink_only", x, [], None)
    # logits: -inf past the diagonal, and a mask of -1e30 (exp underflows to 0)
    lg = rng.normal(size=(L, H, 8, 8))
    lg2 = lg.copy()
    for q in range(8):
        lg[:, :, q, q + 1:] = -np.inf
        lg2[:, :, q, q + 1:] = -1e30
    cases += [("logits_inf", lg, ["--logits"], "--causal"),
              ("logits_big_negative", lg2, ["--logits"], "--causal")]
    for name, x, args, want in cases:
        try:
            path = write(tmp, name, x, "float16" if name == "f16" else "float32")
            got, err = analyze(path, *args)
            if want is None:
                assert err == "", "%s: unexpected stderr %r" % (name, err)
            else:
                assert "warning" in err and want in err and "--causal" in err and \
                    "differ" in err, "%s: stderr %r" % (name, err)
                assert err.count("\n") == 1, err
                if want == "--causal":
                    c, err2 = analyze(path, "--causal", *args)
                    assert err2 == "", "%s: with --causal, stderr %r" % (name, err2)
                    # what the warning says: the numbers differ
                    b0 = [h["sink_balance"] for h in got["head_stats"]]
                    b1 = [h["sink_balance"] for h in c["head_stats"]]
                    assert max(abs(a - b) for a, b in zip(b0, b1)) > 1e-3, (name, b0, b1)
            print("ok   %-22s %s" % (name, err.strip()[:100] if err else "(no warning)"))
        except AssertionError as e:
            failed += 1
            print("FAIL %-22s %s" % (name, e))
    if failed:
        print("files kept in %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
