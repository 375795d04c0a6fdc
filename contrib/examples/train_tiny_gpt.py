#!/usr/bin/python3
"""Train a tiny causal transformer from scratch on CPU and watch its attention.

The model: byte-level vocabulary (256 bytes + BOS), a BOS token at position 0
of every sequence (the natural sink), pre-norm blocks built on
torch.nn.MultiheadAttention, learned positions. The text: every file under
/usr/share/common-licenses. A sinkwatch.torch.AttentionProbe streams the
attention of a fixed probe batch to sinkwatchd at step 0 and every --every
steps (and after the last step when it falls on the cadence).

    sinkwatchd &
    contrib/examples/train_tiny_gpt.py --run tiny/seed1 --steps 400 --every 50
    sinkwatch report sinkwatch-data/tiny%2Fseed1.h5

Deterministic with --seed (and --threads); the probe does not change the
training: --no-probe gives the same parameters and losses bit for bit.

With --save-every K --checkpoint-dir DIR it also saves the model's state_dict
(torch.save) at step 0, every K steps and after the last step, as
DIR/step_%08d.pt (the weights a probe at that step sees), and once
DIR/probe.pt: the fixed probe batch, the model's hyper-parameters and where
build_model() lives, so that `python3 -m sinkwatch.sweep --checkpoint-dir DIR`
can replay the checkpoints later (saving draws no random numbers: the
training is the same bit for bit). Beside each step_%08d.pt it writes
DIR/state_%08d.pt, what a resume needs besides the weights: the optimizer's
state, every random-number state (torch CPU, which also draws the training
batches, Python `random`, numpy), the step, the data position (batches
drawn), the losses so far, the run id and the options that must not change.
The sweep reads only step_*.pt (torch.load(weights_only=True), which the
random states would fail); state_*.pt is read by --resume alone.

--resume CKPT (a step_%08d.pt or state_%08d.pt of that pair, or a checkpoint
directory: its last complete pair) goes on from that checkpoint's step S:
the same weights, optimizer and generators, so that every step from S on is
bit for bit what the uninterrupted run with the same seed (and --threads)
computes. Its client declares resume_from=S and uses the checkpoint's run
id unless --run is given (give the same one): the daemon appends to the
run's file as a new segment, and the rows the killed job stored from S on
(the resumed job probes S again) are superseded. The
model, data and optimizer options (--layers, --heads, --d-model, --context,
--dropout, --batch, --lr, --holdout) must be the checkpoint's; --steps may
be larger (training longer).

Head masking (for pruning studies, contrib/examples/prune_heads.py):
model.set_head_mask(M), M a [layers, heads] 0/1 array or None, zeroes the
output of every head with M == 0 before the output projection of its layer
(the projection's bias stays). None (the default, and what training uses)
is the plain torch.nn.MultiheadAttention path; a mask of all ones takes the
masked path and gives the same numbers bit for bit.

--holdout F trains on the first 1 - F of the text only and prints the
validation loss of the rest after training; --save PATH writes the final
model as one file (load_checkpoint() reads it back). Neither changes the
training of the other flags (--holdout 0, the default, is the whole text).
"""
import argparse
import glob
import json
import math
import os
import random
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BOS = 256
VOCAB = 257
TEXT_DIR = "/usr/share/common-licenses"


def load_text(root=TEXT_DIR):
    """The bytes of every regular file under root, in sorted path order, each
    file once (the directory has symlinks such as GPL -> GPL-3)."""
    seen, chunks = set(), []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.realpath(os.path.join(dirpath, name))
            if path in seen or not os.path.isfile(path):
                continue
            seen.add(path)
            with open(path, "rb") as f:
                chunks.append(f.read())
    data = b"\n".join(chunks)
    if len(data) < 4096:
        raise SystemExit("not enough text under %s" % root)
    return torch.tensor(np.frombuffer(data, dtype=np.uint8).astype(np.int64))


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                 nn.Dropout(dropout))
        self.head_mask = None       # [heads] float 0/1, or None: see set_head_mask

    def _masked_attention(self, h, mask):
        """What self.attn(h, h, h, attn_mask=mask) computes, with the
        columns of the output projection that read head i multiplied by
        head_mask[i]: the head's output is zeroed before the projection.
        The same call MultiheadAttention makes on its (non-fast) path, so a
        mask of ones gives the same bits."""
        m = self.attn
        cols = self.head_mask.to(m.out_proj.weight.dtype).repeat_interleave(m.head_dim)
        q = h.transpose(1, 0)
        out, _ = F.multi_head_attention_forward(
            q, q, q, m.embed_dim, m.num_heads, m.in_proj_weight, m.in_proj_bias,
            m.bias_k, m.bias_v, m.add_zero_attn, m.dropout,
            m.out_proj.weight * cols[None, :], m.out_proj.bias,
            training=m.training, attn_mask=mask, need_weights=False)
        return out.transpose(1, 0)

    def forward(self, x, mask):
        h = self.ln1(x)
        if self.head_mask is None:
            a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        else:
            a = self._masked_attention(h, mask)
        x = x + self.drop(a)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, layers, heads, d, context, dropout):
        super().__init__()
        self.context = context
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(context, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d, heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1),
                             persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))
        mask = self.mask[:T, :T]
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))

    def set_head_mask(self, mask):
        """mask: [layers, heads] of 0/1 (1 keeps the head), or None for no
        masking. Not a parameter or buffer: the state_dict is unchanged."""
        if mask is None:
            for b in self.blocks:
                b.head_mask = None
            return
        m = torch.as_tensor(np.asarray(mask, dtype=np.float32))
        L, H = len(self.blocks), self.blocks[0].attn.num_heads
        if tuple(m.shape) != (L, H):
            raise ValueError("head mask is %r, the model has %d layers x %d heads"
                             % (tuple(m.shape), L, H))
        dev = self.head.weight.device
        for i, b in enumerate(self.blocks):
            b.head_mask = m[i].clone().to(dev)

    @torch.no_grad()
    def attention(self, idx):
        """The per-head attention of every layer for idx, as forward()
        computes it (with the current head masks; a masked head still has
        weights): a list of [batch, heads, T, T] tensors, masked keys 0."""
        T = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(T, device=idx.device)))
        mask = self.mask[:T, :T]
        out = []
        for b in self.blocks:
            h = b.ln1(x)
            _, w = b.attn(h, h, h, attn_mask=mask, need_weights=True,
                          average_attn_weights=False)
            out.append(w)
            x = b(x, mask)
        return out


def build_model(hparams):
    """The model of a hyper-parameter dict (layers, heads, d, context,
    dropout): what a checkpoint sweep calls to rebuild it (probe.pt names
    this file and this function)."""
    return TinyGPT(**hparams)


def save_probe_file(dirname, probe_x, hparams, model_name, params, args, positions):
    """DIR/probe.pt: everything sinkwatch.sweep needs besides the checkpoints:
    {"format", "probe": the batch (tensor), "meta": a JSON string} (JSON, so
    that torch.load(weights_only=True) of any torch version reads it)."""
    meta = {"hparams": dict(hparams),
            "factory_file": os.path.abspath(__file__), "factory": "build_model",
            "model": model_name, "params": int(params),
            "layers": int(hparams["layers"]), "heads": int(hparams["heads"]),
            "sink": 0, "capture": "mha", "causal": True,
            "query_positions": positions, "cast": args.cast, "rowstats": bool(args.rowstats),
            "seed": args.seed, "steps": args.steps, "save_every": args.save_every}
    torch.save({"format": "sinkwatch-sweep-probe/1", "probe": probe_x.clone(),
                "meta": json.dumps(meta, sort_keys=True)},
               os.path.join(dirname, "probe.pt"))


def save_checkpoint(dirname, model, step):
    """DIR/step_%08d.pt: the state_dict (draws no random numbers)."""
    path = os.path.join(dirname, "step_%08d.pt" % step)
    tmp = path + ".tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)           # a sweep never sees a half-written file
    return path


# the options a resumed run must share with its checkpoint: the model, the
# data (the held-out split) and the optimizer
RESUME_OPTIONS = ("layers", "heads", "d_model", "context", "dropout", "batch", "lr", "holdout")


def save_state(dirname, step, opt, losses, run, args):
    """DIR/state_%08d.pt: what --resume needs besides the weights of
    step_%08d.pt (written first: a state file always has its weights).
    Drawing no random numbers, it changes nothing in the training."""
    path = os.path.join(dirname, "state_%08d.pt" % step)
    tmp = path + ".tmp"
    torch.save({"format": "sinkwatch-tiny-gpt-state/1", "step": step,
                # the batches are torch.randint on the global torch generator:
                # its state (rng.torch) is the sampler's, and the data position
                # is the number of batches drawn so far
                "data": {"batches": step, "sampler": "torch.randint, global generator"},
                "optimizer": opt.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "random": random.getstate(),
                        "numpy": np.random.get_state()},
                "losses": list(losses), "run": run,
                "options": {k: getattr(args, k) for k in RESUME_OPTIONS + ("seed",)}}, tmp)
    os.replace(tmp, path)
    return path


def resume_files(path):
    """(step, step_%08d.pt, state_%08d.pt) of --resume PATH: either file of
    a pair, or a directory (its highest step with both files)."""
    if os.path.isdir(path):
        steps = []
        for f in glob.glob(os.path.join(path, "state_*.pt")):
            m = re.match(r"^state_(\d+)\.pt$", os.path.basename(f))
            if m and os.path.exists(os.path.join(path, "step_%s.pt" % m.group(1))):
                steps.append(int(m.group(1)))
        if not steps:
            raise SystemExit("--resume %s: no state_N.pt with its step_N.pt there" % path)
        s = max(steps)
        return (s, os.path.join(path, "step_%08d.pt" % s),
                os.path.join(path, "state_%08d.pt" % s))
    m = re.match(r"^(?:step|state)_(\d+)\.pt$", os.path.basename(path))
    if not m:
        raise SystemExit("--resume %s: not a step_N.pt, a state_N.pt or a directory" % path)
    d, s = os.path.dirname(path), int(m.group(1))
    pair = (os.path.join(d, "step_%s.pt" % m.group(1)), os.path.join(d, "state_%s.pt" % m.group(1)))
    for f in pair:
        if not os.path.exists(f):
            raise SystemExit("--resume %s: %s is missing" % (path, f))
    return (s,) + pair


def load_resume(path, args):
    """The checkpoint of --resume PATH: (step, state_dict, state), after
    checking that the options of RESUME_OPTIONS are the checkpoint's."""
    step, wpath, spath = resume_files(path)
    weights = torch.load(wpath, map_location="cpu", weights_only=True)
    # the random states are not plain tensors: this file needs the full
    # unpickler (it is our own, written by save_state)
    st = torch.load(spath, map_location="cpu", weights_only=False)
    if not isinstance(st, dict) or st.get("format") != "sinkwatch-tiny-gpt-state/1" \
            or st.get("step") != step:
        raise SystemExit("--resume: %s is not the state of step %d" % (spath, step))
    diff = ["--%s %r (this run: %r)" % (k.replace("_", "-"), st["options"][k], getattr(args, k))
            for k in RESUME_OPTIONS if st["options"][k] != getattr(args, k)]
    if diff:
        raise SystemExit("--resume: the checkpoint was trained with " + ", ".join(diff))
    if st["data"]["batches"] != step or len(st["losses"]) != step:
        raise SystemExit("--resume: %s: data position %d, %d losses, step %d"
                         % (spath, st["data"]["batches"], len(st["losses"]), step))
    return step, weights, st


def save_model(path, model, hparams, meta):
    """One file: {"format", "state_dict", "meta": a JSON string holding
    "hparams" and whatever meta adds} (JSON, so weights_only loads it)."""
    m = dict(meta)
    m["hparams"] = dict(hparams)
    tmp = path + ".tmp"
    torch.save({"format": "sinkwatch-tiny-gpt/1", "state_dict": model.state_dict(),
                "meta": json.dumps(m, sort_keys=True)}, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path):
    """(model in eval mode, meta dict) of a file that --save wrote."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except TypeError:                       # torch < 1.13
        ck = torch.load(path, map_location="cpu")
    if not isinstance(ck, dict) or ck.get("format") != "sinkwatch-tiny-gpt/1":
        raise ValueError("%s: not a checkpoint written by train_tiny_gpt.py --save" % path)
    meta = json.loads(ck["meta"])
    model = build_model(meta["hparams"])
    model.load_state_dict(ck["state_dict"])
    model.eval()
    return model, meta


def split_text(data, holdout):
    """(training part, held-out part): the last `holdout` fraction of the
    bytes is held out (a contiguous tail, so no training window overlaps it)."""
    if holdout <= 0:
        return data, data[:0]
    cut = int(round(len(data) * (1.0 - holdout)))
    return data[:cut], data[cut:]


@torch.no_grad()
def evaluate(model, data, context, max_windows=None):
    """Mean cross-entropy (nats per byte) of model over data cut into
    non-overlapping windows of `context` bytes (each read as
    [BOS, t0 .. t_{C-2}] -> [t0 .. t_{C-1}], as in training), eval mode,
    at most max_windows of them, evenly spread. (loss, windows)."""
    n = (len(data) - 1) // context
    if n < 1:
        raise ValueError("held-out text shorter than one context (%d bytes)" % len(data))
    idx = np.arange(n)
    if max_windows is not None and n > max_windows:
        idx = np.unique(np.linspace(0, n - 1, max_windows).round().astype(np.int64))
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(idx), 64):
        offs = torch.as_tensor(idx[i:i + 64] * context)
        x, y = batch_from(data, offs, context)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1),
                                 reduction="sum").item()
        count += y.numel()
    model.train(was)
    return total / count, len(idx)


def batch_from(data, offsets, context):
    """Inputs [BOS, t0 .. t_{C-2}] and targets [t0 .. t_{C-1}] at offsets."""
    w = torch.stack([data[o:o + context] for o in offsets.tolist()])
    x = torch.cat([torch.full((len(w), 1), BOS, dtype=torch.long), w[:, :-1]], 1)
    return x, w


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default: "(default: X)" added
    where the help does not say it, "off" for a flag."""

    def _get_help_string(self, action):
        h = action.help or ""
        if "default" in h or action.default is argparse.SUPPRESS:
            return h
        if action.nargs == 0:
            return h + " (default: off)"
        return h + " (default: %(default)s)"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=_Formatter)
    p.add_argument("--endpoint", "--connect", dest="endpoint", default=None,
                   help="sinkwatchd listen endpoint (--connect: the old name; default "
                   "$SINKWATCH_ENDPOINT, else tcp://127.0.0.1:5710)")
    p.add_argument("--run", default=None,
                   help="run id (default tiny-gpt/seedN-UNIXTIME, or with --resume the "
                   "checkpoint's: a run id that is used again resumes its file and "
                   "appends to it)")
    p.add_argument("--steps", type=int, default=400, help="training steps in all")
    p.add_argument("--every", type=int, default=50, help="probe cadence, steps")
    p.add_argument("--seed", type=int, default=1, help="seed of every generator")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks")
    p.add_argument("--heads", type=int, default=4, help="attention heads per block")
    p.add_argument("--d-model", type=int, default=64, help="model width")
    p.add_argument("--context", type=int, default=64, help="sequence length, BOS included")
    p.add_argument("--batch", type=int, default=16, help="training sequences per step")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout probability")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--probe-batch", type=int, default=2, help="sequences in the probe batch")
    p.add_argument("--probe-rows", type=int, default=None,
                   help="query positions per probe sequence, evenly spread (default: all)")
    p.add_argument("--probe-positions", default=None, metavar="Q,Q,..",
                   help="these query positions instead of --probe-rows (default: none)")
    p.add_argument("--cast", choices=("f16", "bf16"), default=None,
                   help="send the rows in this dtype (default: the model's, float32)")
    p.add_argument("--rowstats", action="store_true",
                   help="send per-row statistics instead of rows")
    p.add_argument("--dump-probes", metavar="DIR", default=None,
                   help="save each probe's attention as .npy files (default: not saved)")
    p.add_argument("--no-probe", action="store_true", help="train without the probe")
    p.add_argument("--save-final", metavar="FILE", default=None,
                   help="save the final parameters and the losses (.npz) (default: not saved)")
    p.add_argument("--save-every", type=int, default=0, metavar="K",
                   help="save a checkpoint at step 0, every K steps and after the last "
                   "step (needs --checkpoint-dir; default 0: none)")
    p.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                   help="where --save-every writes step_%%08d.pt, state_%%08d.pt and "
                   "probe.pt (default: none)")
    p.add_argument("--resume", metavar="CKPT", default=None,
                   help="go on from a checkpoint: DIR/step_N.pt or DIR/state_N.pt, or DIR "
                   "(its last checkpoint); the client declares resume_from=N (default: "
                   "a fresh start)")
    p.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="hold out the last F of the text (0 <= F < 1; default 0: train on "
                   "all of it) and print its validation loss after training")
    p.add_argument("--save", metavar="PATH", default=None,
                   help="save the final model (state_dict and hyper-parameters) as one "
                   "file; load_checkpoint() reads it (default: not saved)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--flush-timeout", type=float, default=5.0,
                   help="seconds to wait at the end for queued messages")
    a = p.parse_args(argv)
    if a.save_every < 0:
        p.error("--save-every must be >= 0")
    if a.save_every and not a.checkpoint_dir:
        p.error("--save-every needs --checkpoint-dir")
    if not 0.0 <= a.holdout < 1.0:
        p.error("--holdout must be in [0, 1)")
    return a


def dump(dirname, last):
    """probe_STEP.npy: [layers, heads, rows, keys] float rows as captured
    (masked keys 0); sent_STEP.npy: what was sent ([.., 6] for rowstats,
    uint16 bits for bf16); qpos.npy: the query position of each row."""
    s = last["step"]
    np.save(os.path.join(dirname, "probe_%06d.npy" % s), np.stack(last["attention"]))
    np.save(os.path.join(dirname, "sent_%06d.npy" % s), np.stack(last["sent"]))
    if last.get("qpos") is not None:
        np.save(os.path.join(dirname, "qpos.npy"), last["qpos"])


def main(argv=None):
    a = parse(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    random.seed(a.seed)
    start, resumed = 0, None
    if a.resume:
        start, weights, resumed = load_resume(a.resume, a)
        if start > a.steps:
            raise SystemExit("--resume: the checkpoint is at step %d, past --steps %d"
                             % (start, a.steps))
    run = a.run or (resumed["run"] if resumed else
                    "tiny-gpt/seed%d-%d" % (a.seed, int(time.time())))

    data, heldout = split_text(load_text(), a.holdout)
    hparams = {"layers": a.layers, "heads": a.heads, "d": a.d_model, "context": a.context,
               "dropout": a.dropout}
    model = build_model(hparams)
    params = sum(p.numel() for p in model.parameters())
    model_name = "tiny-gpt-L%dH%dD%d" % (a.layers, a.heads, a.d_model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    if resumed:
        model.load_state_dict(weights)
        opt.load_state_dict(resumed["optimizer"])
    # a fixed probe batch, evenly spread over the text, drawn from no RNG
    starts = torch.linspace(0, len(data) - a.context - 1, a.probe_batch + 2)[1:-1].long()
    probe_x, _ = batch_from(data, starts, a.context)

    positions = a.probe_rows
    if a.probe_positions:
        positions = [int(q) for q in a.probe_positions.split(",")]
    if a.save_every:
        os.makedirs(a.checkpoint_dir, exist_ok=True)
        save_probe_file(a.checkpoint_dir, probe_x, hparams, model_name, params, a, positions)

    client = probe = None
    if not a.no_probe:
        import sinkwatch
        import sinkwatch.torch as swt
        client = sinkwatch.Client(run, a.layers, a.heads, endpoint=a.endpoint,
                                  model=model_name, params=params, sink=0, fixed_probe=True,
                                  resume_from=start if resumed else None)
        probe = swt.AttentionProbe(model, probe_x, client, every=a.every, capture="mha",
                                   query_positions=positions, cast=a.cast,
                                   rowstats=a.rowstats, causal=True,
                                   keep=a.dump_probes is not None)
        if a.dump_probes:
            os.makedirs(a.dump_probes, exist_ok=True)
    print("run %s: %d layers x %d heads, d_model %d, context %d, %d params, %d bytes of text"
          % (run, a.layers, a.heads, a.d_model, a.context, params, len(data)), flush=True)
    if resumed:
        print("resumed from step %d (%s)" % (start, a.resume), flush=True)

    def maybe_probe(step):
        if probe is None or not probe.due(step):
            return
        probe.maybe(step)
        if a.dump_probes and probe.last is not None and probe.last["step"] == step:
            dump(a.dump_probes, probe.last)

    losses = []
    if resumed:
        losses = list(resumed["losses"])
        # last, after everything above that might draw (the client's
        # incarnation draws from its own generator; nothing else should)
        torch.set_rng_state(resumed["rng"]["torch"])
        random.setstate(resumed["rng"]["random"])
        np.random.set_state(resumed["rng"]["numpy"])
    t0 = time.time()
    c0 = time.thread_time()     # this thread's CPU (torch runs --threads here)
    model.train()
    saved = 0
    for step in range(start, a.steps):
        maybe_probe(step)
        # the checkpoint resumed from is there already
        if a.save_every and step % a.save_every == 0 and not (resumed and step == start):
            save_checkpoint(a.checkpoint_dir, model, step)
            save_state(a.checkpoint_dir, step, opt, losses, run, a)
            saved += 1
        ix = torch.randint(0, len(data) - a.context, (a.batch,))
        x, y = batch_from(data, ix, a.context)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if a.log_every > 0 and (step % a.log_every == 0 or step == a.steps - 1):
            print("step %5d  loss %.4f  (%.1f bits/byte)" % (step, losses[-1],
                  losses[-1] / math.log(2)), flush=True)
    if a.steps > 0 and a.every > 0 and a.steps % a.every == 0:
        maybe_probe(a.steps)          # the final weights, on the cadence
    if a.save_every and not (resumed and start == a.steps):
        save_checkpoint(a.checkpoint_dir, model, a.steps)   # the final weights, always
        save_state(a.checkpoint_dir, a.steps, opt, losses, run, a)
        saved += 1
    elapsed = time.time() - t0
    elapsed_cpu = time.thread_time() - c0

    val = None
    if len(heldout):
        val, nwin = evaluate(model, heldout, a.context)
        print("validation: %d held-out bytes, %d windows, loss %.4f, perplexity %.3f"
              % (len(heldout), nwin, val, math.exp(val)), flush=True)
    if a.save:
        save_model(a.save, model, hparams,
                   {"model": model_name, "params": int(params), "seed": a.seed,
                    "steps": a.steps, "batch": a.batch, "lr": a.lr, "threads": a.threads,
                    "holdout": a.holdout, "text_dir": TEXT_DIR, "train_bytes": len(data),
                    "heldout_bytes": len(heldout),
                    "final_train_loss": losses[-1] if losses else None,
                    "val_loss": val, "train_seconds": elapsed})
        print("saved %s" % a.save, flush=True)

    if a.save_final:
        arrays = {"param/" + k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        arrays["losses"] = np.array(losses, dtype=np.float64)
        np.savez(a.save_final, **arrays)

    if a.save_every:
        print("checkpoints: %d in %s (step_%%08d.pt, state_%%08d.pt, probe.pt)"
              % (saved, a.checkpoint_dir), flush=True)

    if client is not None:
        client.end()
        client.flush(a.flush_timeout)
        cst = dict(client.stats)
        client.close()
        st = probe.stats
        print("client: %s" % " ".join("%s=%s" % kv for kv in sorted(cst.items())))
        print("probe cost: %d probes, %.2f ms/probe (max %.2f, forward %.2f, copy %.2f, "
              "send %.2f), "
              "%d bytes/probe, %s %s %d rows x %d keys x %d layers, errors %d; "
              "training %.1f s, %.1f ms/step without the probes"
              % (st["probes"], st["ms_mean"], st["ms_max"], st["ms_capture_mean"],
                 st["ms_copy_mean"], st["ms_send_mean"], st["bytes_mean"], st["kind"],
                 st["dtype"], st["rows"], st["keys"], st["layers"], st["errors"], elapsed,
                 (elapsed - st["ms_total"] / 1e3) * 1e3 / max(1, a.steps - start)),
              flush=True)
        # the probe's share of the training loop, by wall clock and by this
        # thread's CPU time (which other processes on the machine do not inflate)
        pst = {k: st[k] for k in ("probes", "ms_total", "ms_capture_total", "ms_copy_total",
                                  "ms_send_total", "cpu_ms_total", "cpu_ms_capture_total",
                                  "cpu_ms_copy_total", "cpu_ms_send_total", "bytes_mean",
                                  "kind", "dtype", "errors")}
        pst.update({"steps": a.steps, "start": start, "every": a.every, "loop_s": elapsed,
                    "loop_cpu_s": elapsed_cpu})
        print("probe stats: %s" % json.dumps(pst), flush=True)
    else:
        print("no probe, training %.1f s, %.1f ms/step"
              % (elapsed, elapsed * 1e3 / max(1, a.steps - start)), flush=True)
        print("probe stats: %s" % json.dumps({"probes": 0, "steps": a.steps, "start": start,
                                              "loop_s": elapsed,
                                              "loop_cpu_s": elapsed_cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
