"""sinkwatch.torch: watch a PyTorch model's attention while it trains.

    import sinkwatch, sinkwatch.torch
    client = sinkwatch.Client("gpt-tiny/seed1", layers=4, heads=4)
    probe = sinkwatch.torch.AttentionProbe(model, probe_batch, client, every=100)
    for step in range(steps):
        probe.maybe(step)          # step 0 and every 100 steps: one probe
        ...                        # the usual forward / backward / step
    client.end(); client.close()

A probe saves the model's train/eval flags (every module's) and the random
number generators (torch CPU, CUDA if available, Python `random`, numpy),
switches to eval, runs the fixed probe batch under torch.no_grad, captures the
per-head attention probabilities of every layer, streams one message per layer
([heads, rows, keys], qpos = the query position of each row, so a causal row
has qpos + 1 valid keys), and restores the flags and generators exactly:
training with the probe attached is bit for bit the training without it.

Capture modes:

- "mha": every torch.nn.MultiheadAttention of the model (or the `modules`
  given), in the order they are called. For the probe pass only, each
  module's forward is wrapped so that it computes the per-head weights
  (need_weights=True, average_attn_weights=False); the caller still gets
  what it asked for. The wrappers are removed after the pass.
- "hf": the Hugging Face convention: model(**batch, output_attentions=True)
  returns an object (or dict) whose `attentions` is a tuple of
  [batch, heads, q, k] tensors, one per layer.
- a callable capture(model, batch) -> list of [batch, heads, q, k] tensors.

Rows are (batch element, query position) pairs, batch-major: the message of
a layer is [heads, batch * len(qpos), keys] with qpos repeated per element.
Rows with fewer than 2 valid keys (causal position 0: only the sink, no
content; METRICS.md section 6) or without the sink key are never sent.

Payload bounds, all applied on the model's device before the copy to host:
`query_positions` (an int: that many positions evenly spread over the valid
ones, last included; a list: those positions), the keys are cut to the
longest selected causal row, `cast` ("f16" or "bf16"; bf16 travels as the
uint16 bit pattern with dtype "bf16"), and `rowstats=True`: the six per-row
statistics of METRICS.md sections 1 and 4 (s, w, H, hb, Hc, b), computed in
float64 with torch ops, so that [heads, rows, 6] travels (kind "rowstats").

A job restarted from a checkpoint at step S declares it, so that the daemon
supersedes what the previous incarnation sent for steps after S:
sinkwatch.Client(..., resume_from=S), or AttentionProbe(..., resume_from=S),
which hands it to a client that has sent nothing yet.

The probe never raises into the training loop: an unexpected exception is
counted in stats["errors"], kept in stats["last_error"] and warned about
once; the model and the generators are restored all the same. probe.stats
also measures the probe's cost: time per probe and bytes per probe.
"""

import inspect
import math
import random
import time
import warnings

import numpy as np
import torch

__all__ = ["AttentionProbe"]

ROWSTATS_FIELDS = ("s", "w", "H", "hb", "Hc", "b")


# ---------------------------------------------------------------- state

def _rng_state():
    st = {"torch": torch.get_rng_state(), "random": random.getstate(),
          "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def _rng_restore(st):
    torch.set_rng_state(st["torch"])
    random.setstate(st["random"])
    np.random.set_state(st["numpy"])
    if "cuda" in st:
        torch.cuda.set_rng_state_all(st["cuda"])


def _call(model, batch, **extra):
    """model(batch): a dict as keywords, a tuple or list as positionals."""
    if isinstance(batch, dict):
        return model(**batch, **extra)
    if isinstance(batch, (tuple, list)):
        return model(*batch, **extra)
    return model(batch, **extra)


class _MHAPatch:
    """Wraps the forward of MultiheadAttention modules for one pass: each call
    computes per-head weights and records them; the caller gets the output
    it asked for (no weights, or head-averaged ones, or per-head ones)."""

    def __init__(self, modules):
        self.modules = list(modules)
        self.captured = []
        self.saved = []

    def _wrapper(self, orig):
        sig = inspect.signature(orig)
        store = self.captured

        def forward(*args, **kwargs):
            ba = sig.bind(*args, **kwargs)
            ba.apply_defaults()
            want = ba.arguments.get("need_weights", True)
            avg = ba.arguments.get("average_attn_weights", True)
            ba.arguments["need_weights"] = True
            ba.arguments["average_attn_weights"] = False
            out, w = orig(*ba.args, **ba.kwargs)
            if w is not None:
                store.append(w if w.dim() == 4 else w.unsqueeze(0))
            if not want or w is None:
                return out, None
            return out, (w.mean(dim=-3) if avg else w)
        return forward

    def __enter__(self):
        for m in self.modules:
            had = "forward" in m.__dict__
            self.saved.append((m, had, m.__dict__.get("forward")))
            m.forward = self._wrapper(m.forward)
        self.fastpath = None
        mha = getattr(torch.backends, "mha", None)
        # torch >= 2.2: nn.TransformerEncoder's fused path skips
        # self_attn.forward in eval; turn it off for the probe pass.
        if mha is not None and hasattr(mha, "set_fastpath_enabled"):
            self.fastpath = mha.get_fastpath_enabled()
            mha.set_fastpath_enabled(False)
        return self

    def __exit__(self, *exc):
        for m, had, prev in reversed(self.saved):
            if had:
                m.forward = prev
            else:
                m.__dict__.pop("forward", None)
        self.saved = []
        if self.fastpath is not None:
            torch.backends.mha.set_fastpath_enabled(self.fastpath)
        return False


# ---------------------------------------------------------------- rowstats

def rowstats(p, nvalid, sink=0, delta=1e-10):
    """The six statistics of each row of p [heads, rows, keys] (torch, any
    device) over its first nvalid[r] keys, sink index `sink`, in the order
    s, w, H, hb, Hc, b (PROTOCOL.md section 6): METRICS.md section 1 after
    renormalizing by the row sum, and the section 4 balance of the
    composition with multiplicative zero replacement at delta. The formulas
    are those of the daemon's metric core (stable forms, Hc exactly 0 with
    one content key). Returns float64 [heads, rows, 6] on p's device."""
    dt = torch.float64 if p.device.type != "mps" else torch.float32
    x = p.to(dt)
    K = x.shape[-1]
    n = nvalid.to(device=x.device, dtype=torch.int64)
    j = torch.arange(K, device=x.device)
    valid = j[None, :] < n[:, None]                     # [rows, keys]
    content = valid & (j[None, :] != sink)
    x = torch.where(valid, x, torch.zeros((), dtype=dt, device=x.device))
    zero = torch.zeros((), dtype=dt, device=x.device)
    one = torch.ones((), dtype=dt, device=x.device)

    xk = x[..., sink]
    xc = torch.where(content, x, zero)
    W = xc.sum(-1)                                      # summed, never 1 - s
    S = xk + W
    lx = torch.log(torch.where(x > 0, x, one))          # 0 ln 0 = 0
    xlx = x * lx
    P = torch.where(content, xlx, zero).sum(-1)
    lnxk = lx[..., sink]
    s, w = xk / S, W / S
    H = torch.log(S) - (xk * lnxk + P) / S
    single = (n <= 2)[None, :]
    Hc = torch.where((W > 0) & ~single, torch.log(torch.where(W > 0, W, one)) -
                     P / torch.where(W > 0, W, one), zero)

    def xlnx(v):
        return torch.where(v > 0, v * torch.log(torch.where(v > 0, v, one)), zero)
    hb = -xlnx(s) - xlnx(w)

    # §4: parts a_i = x_i / S below delta become delta; the others are
    # scaled by (1 - delta r) / (sum of the unreplaced a_i).
    thr = (delta * S)[..., None]
    small = valid & (x < thr)
    big = valid & ~small
    r = small.sum(-1).to(dt)
    Wbig = torch.where(big, x, zero).sum(-1)
    lnscale = torch.log1p(-delta * r) - torch.log(Wbig)
    lnd = math.log(delta)
    lnpart = torch.where(small, torch.full((), lnd, dtype=dt, device=x.device),
                         lx + lnscale[..., None])
    m = (n - 1).to(dt)[None, :]
    meanc = torch.where(content, lnpart, zero).sum(-1) / m
    b = torch.sqrt(m / n.to(dt)[None, :]) * (lnpart[..., sink] - meanc)
    # rounding may leave -1e-17 where the value is 0; the daemon rejects
    # negative statistics (all but b)
    out = torch.stack([s, w, H.clamp(min=0), hb.clamp(min=0), Hc.clamp(min=0), b], -1)
    return out.to(torch.float64)


# ---------------------------------------------------------------- probe

class AttentionProbe:
    """Streams the attention of a fixed probe batch every `every` steps.

    model: a torch.nn.Module. probe_batch: what the model is called with (a
    tensor, a tuple of positionals or a dict of keywords), on the model's
    device, the same every time (a fixed probe). client: a sinkwatch.Client
    made with this model's layers and heads (sink = the sink key index).

    every: probe at the steps that are multiples of it (0 included).
    capture: "mha", "hf" or a callable capture(model, batch).
    query_positions: None (every valid row), an int (that many positions
        evenly spread, the last one included), or a list of positions.
    cast: None (the model's dtype), "f16" or "bf16".
    rowstats: send the six per-row statistics instead of the rows.
    causal: rows are causal (query position q has q + 1 valid keys, with
        queries as the last positions of the keys); False: every key valid.
    sink: the sink key index (default: the client's, else 0).
    modules: for "mha", the modules to watch (default: all, call order).
    keep: keep the host copies of the last probe in probe.last
        ("attention": per layer float [heads, rows, keys] before cast and
        rowstats; "sent": what was sent; "qpos"; "step") for inspection.
    delta: zero-replacement threshold of the balance (rowstats).
    resume_from: the training step of the checkpoint this job resumed from
        (None: a fresh start, or the client's own resume_from). Set on the
        client (client.resume_from), which must not have sent anything yet:
        every message of an incarnation carries the same value.
    """

    def __init__(self, model, probe_batch, client, every=100, capture="mha",
                 query_positions=None, cast=None, rowstats=False, causal=True,
                 sink=None, modules=None, keep=False, delta=1e-10, resume_from=None):
        if cast not in (None, "f16", "bf16"):
            raise ValueError("cast must be None, 'f16' or 'bf16'")
        if resume_from is not None:
            if not hasattr(client, "resume_from"):
                raise ValueError("resume_from: the client has no resume_from")
            # ValueError if the client sent already with another value
            client.resume_from = resume_from
        if not (capture in ("mha", "hf") or callable(capture)):
            raise ValueError("capture must be 'mha', 'hf' or a callable")
        self.model = model
        self.batch = probe_batch
        self.client = client
        self.every = int(every) if every else 0
        self.capture = capture
        self.query_positions = query_positions
        self.cast = cast
        self.rowstats = bool(rowstats)
        self.causal = bool(causal)
        if sink is None:
            sink = getattr(client, "sink", 0)
        self.sink = int(sink or 0)
        self.modules = modules
        self.keep = bool(keep)
        self.delta = float(delta)
        self.last = None
        self._layout = {}
        self._warned = set()
        self._st = {"probes": 0, "errors": 0, "last_error": None,
                    "messages": 0, "send_false": 0, "bytes_total": 0,
                    "bytes_last": 0, "ms_total": 0.0, "ms_last": 0.0,
                    "ms_max": 0.0, "ms_capture_total": 0.0, "layers": 0, "rows": 0, "keys": 0,
                    "rows_skipped": 0, "kind": "rowstats" if rowstats else "probs",
                    "dtype": None}

    # -- public

    @property
    def stats(self):
        """Counters and the probe's cost: ms_mean / bytes_mean per probe
        (tensor-frame bytes: what crossed from device to the client), and
        ms_capture_mean, the part of ms_mean spent saving state and running
        the probe forward (the rest: reduction, copy to host, send)."""
        st = dict(self._st)
        n = st["probes"]
        st["ms_mean"] = st["ms_total"] / n if n else 0.0
        st["bytes_mean"] = st["bytes_total"] / n if n else 0.0
        # the forward pass (with state saving) vs reduction, copy and send
        st["ms_capture_mean"] = st["ms_capture_total"] / n if n else 0.0
        return st

    def due(self, step):
        return self.every > 0 and step % self.every == 0

    def maybe(self, step):
        """Probes if `step` is 0 or a multiple of `every`. True if it probed
        and every layer was handed to the client."""
        if not self.due(step):
            return False
        return self.probe(step)

    __call__ = maybe

    def probe(self, step):
        """One probe now, at training step `step`. Never raises."""
        t0 = time.perf_counter()
        ok = False
        sent_bytes = 0
        try:
            flags = [(m, m.training) for m in self.model.modules()]
            rng = _rng_state()
        except Exception as e:  # noqa: BLE001 - never into the training loop
            self._error(e)
            return False
        try:
            self.model.eval()
            with torch.no_grad():
                layers = self._capture()
                t1 = time.perf_counter()
                self._st["ms_capture_total"] += (t1 - t0) * 1e3
                sent_bytes, ok = self._send(step, layers)
            del layers
        except Exception as e:  # noqa: BLE001
            self._error(e)
            ok = False
        finally:
            try:
                for m, t in flags:
                    m.training = t
                _rng_restore(rng)
            except Exception as e:  # noqa: BLE001
                self._error(e)
        ms = (time.perf_counter() - t0) * 1e3
        st = self._st
        st["probes"] += 1
        st["ms_last"] = ms
        st["ms_total"] += ms
        st["ms_max"] = max(st["ms_max"], ms)
        st["bytes_last"] = sent_bytes
        st["bytes_total"] += sent_bytes
        return ok

    # -- internals

    def _error(self, e):
        self._st["errors"] += 1
        self._st["last_error"] = "%s: %s" % (type(e).__name__, e)
        self._warn_once("error", "sinkwatch probe failed (training goes on; "
                        "counted in probe.stats['errors']): %s" % self._st["last_error"])

    def _warn_once(self, key, msg):
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _capture(self):
        model, batch = self.model, self.batch
        if callable(self.capture) and not isinstance(self.capture, str):
            att = list(self.capture(model, batch))
        elif self.capture == "hf":
            out = _call(model, batch, output_attentions=True)
            att = getattr(out, "attentions", None)
            if att is None and isinstance(out, dict):
                att = out.get("attentions")
            if att is None:
                raise RuntimeError("the model returned no attentions (Hugging Face "
                                   "models with sdpa/flash attention need "
                                   "attn_implementation='eager')")
            att = list(att)
        else:
            mods = self.modules
            if mods is None:
                mods = [m for m in model.modules()
                        if isinstance(m, torch.nn.MultiheadAttention)]
            if not mods:
                raise RuntimeError("no torch.nn.MultiheadAttention in the model")
            with _MHAPatch(mods) as patch:
                _call(model, batch)
            att = patch.captured
            if not att:
                raise RuntimeError("no MultiheadAttention was called with weights "
                                   "during the probe pass (a fused fast path?)")
            if len(att) < len(mods):
                self._warn_once("fewer", "sinkwatch probe: %d of %d MultiheadAttention "
                                "modules were called" % (len(att), len(mods)))
        for a in att:
            if a is None or a.dim() != 4:
                raise RuntimeError("attention of a layer is not [batch, heads, q, k]: %r"
                                   % (None if a is None else tuple(a.shape)))
        return att

    def _rows(self, Q, K, device):
        """(query indices, positions, kmax, nvalid per row) for a layer shape."""
        key = (Q, K, str(device))
        if key in self._layout:
            return self._layout[key]
        off = K - Q if self.causal else 0
        if self.causal:
            lo = max(1, self.sink)           # n = q + 1 >= 2 and the sink inside
            allpos = list(range(max(off, lo), off + Q))
        else:
            if K < 2 or self.sink >= K:
                raise RuntimeError("rows of %d keys: no content next to sink %d"
                                   % (K, self.sink))
            allpos = list(range(Q))
        qp = self.query_positions
        if qp is None:
            pos = allpos
        elif isinstance(qp, (int, np.integer)):
            if qp >= len(allpos):
                pos = allpos
            elif qp <= 1:
                pos = allpos[-1:]
            else:
                ix = np.unique(np.round(np.linspace(0, len(allpos) - 1, int(qp))).astype(int))
                pos = [allpos[i] for i in ix]
        else:
            want = [int(q) for q in qp]
            pos = [q for q in want if q in set(allpos)]
            bad = [q for q in want if q not in set(allpos) and not (0 <= q - off < Q)]
            if bad:
                raise ValueError("query positions outside the probe: %r" % bad[:8])
            self._st["rows_skipped"] += len(want) - len(pos) - len(bad)
        if not pos:
            raise RuntimeError("no query position with at least 2 valid keys")
        idx = torch.tensor([q - off for q in pos], dtype=torch.long, device=device)
        kmax = min(K, max(pos) + 1) if self.causal else K
        nval = [min(kmax, q + 1) for q in pos] if self.causal else [K] * len(pos)
        out = (idx, pos, kmax, torch.tensor(nval, dtype=torch.long, device=device))
        self._layout[key] = out
        return out

    def _payload(self, a):
        """One layer [B, H, Q, K] -> (numpy payload, kind, dtype, qpos, host
        copy of the float rows or None)."""
        B, H, Q, K = a.shape
        idx, pos, kmax, nval = self._rows(Q, K, a.device)
        x = a.index_select(2, idx)[..., :kmax]          # [B, H, R, kmax]
        R = len(pos)
        x = x.permute(1, 0, 2, 3).reshape(H, B * R, kmax)
        nv = nval.repeat(B)
        qpos = pos * B if self.causal else None     # no qpos: every key valid
        if self.causal:
            j = torch.arange(kmax, device=x.device)
            x = x.masked_fill(j[None, None, :] >= nv[None, :, None], 0)
        host = None
        if self.keep:
            host = x.detach().cpu().numpy().copy() if x.dtype != torch.bfloat16 else \
                x.detach().float().cpu().numpy()
        if self.rowstats:
            arr = rowstats(x, nv, self.sink, self.delta).cpu().numpy()
            return arr, "rowstats", None, qpos, host
        if self.cast == "bf16" or (self.cast is None and x.dtype == torch.bfloat16):
            arr = x.to(torch.bfloat16).contiguous().view(torch.int16).cpu().numpy().view(np.uint16)
            return arr, "probs", "bf16", qpos, host
        if self.cast == "f16" or (self.cast is None and x.dtype == torch.float16):
            return x.to(torch.float16).cpu().numpy(), "probs", None, qpos, host
        if x.dtype != torch.float64:
            x = x.to(torch.float32)
        return x.contiguous().cpu().numpy(), "probs", None, qpos, host

    def _send(self, step, layers):
        nl = getattr(self.client, "layers", None)
        if isinstance(nl, int) and nl != len(layers):
            self._warn_once("layers", "sinkwatch probe: %d attention layers captured, "
                            "the client declares %d" % (len(layers), nl))
            if len(layers) > nl:
                layers = layers[:nl]
        nh = getattr(self.client, "heads", None)
        for li, a in enumerate(layers):
            if isinstance(nh, int) and a.shape[1] != nh:
                raise RuntimeError("layer %d has %d heads, the client declares %d"
                                   % (li, a.shape[1], nh))
        total, ok = 0, True
        keep = {"step": step, "attention": [], "sent": []} if self.keep else None
        for li, a in enumerate(layers):
            arr, kind, dtype, qpos, host = self._payload(a)
            if self.keep:
                keep["attention"].append(host)
                keep["sent"].append(arr)
                keep["qpos"] = None if qpos is None else np.asarray(qpos, dtype=np.int64)
                keep["kind"], keep["dtype"] = kind, dtype or str(arr.dtype)
            total += arr.nbytes
            r = self.client.send(step, li, arr, kind=kind, qpos=qpos, dtype=dtype)
            self._st["messages"] += 1
            if r is False:
                self._st["send_false"] += 1
                ok = False
            self._st["rows"], self._st["keys"] = arr.shape[1], arr.shape[2]
            self._st["dtype"] = dtype or {"float32": "f32", "float16": "f16",
                                          "float64": "f64"}.get(str(arr.dtype), str(arr.dtype))
        self._st["layers"] = len(layers)
        if self.keep:
            self.last = keep
        return total, ok
