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

Distributed training (torch.distributed; protocol version 2, PROTOCOL.md 7b)

Which layer of the model a captured attention is, and which of its heads it
holds, the probe learns from the model it is attached to, per captured
layer, in this order:

- layer index: the arguments layers= (the global index of each captured
  layer, in capture order) or layer_offset= (global = offset + capture
  index); else, for a layer whose module is known (capture "mha", or the
  `modules` given with "hf" or a callable), an int attribute of the module
  or of its nearest ancestor: layer_idx (Hugging Face), layer_id (LLaMA
  reference, torchtitan), layer_number (Megatron, 1-based); else the last
  all-digit component of its qualified name in model.named_modules()
  ("blocks.12.attn" -> 12, "model.layers.3.self_attn" -> 3): a pipeline
  stage that keeps the model's module names (a ModuleDict keyed by the
  global layer index, as torchtitan builds its stages; Megatron's stages
  renumber their modules but carry layer_number) needs nothing more. A
  stage whose blocks were renumbered (nn.ModuleList(model.blocks[lo:hi])
  names them 0, 1, ...) cannot be told from the first stage by its names:
  give it layer_offset= or layers=. The learned indices are used when
  every captured layer has one, they are distinct and below the client's
  layers; else the capture order (0, 1, ...), as on one process, which a
  client of several senders refuses when fewer layers than the client's
  were captured.
- heads: head0= (the first of the model's heads the captured tensors hold);
  else, from the module or its nearest ancestor: the heads per partition
  num_attention_heads_per_partition (Megatron-LM, Megatron-core, DeepSpeed),
  num_heads_per_partition, num_local_heads or n_local_heads (LLaMA
  reference), or num_heads beside total_num_heads (vLLM), and the tensor-
  parallel rank tp_rank, tensor_model_parallel_rank, tensor_parallel_rank or
  model_parallel_rank (an int), or a process group tp_group,
  tensor_parallel_group or tensor_model_parallel_group (its rank is taken):
  head0 = rank x heads per partition. Without either the tensors must hold
  all the client's heads (head0 0).

Who sends:

- Data parallel (the default): torch.distributed initialized with more than
  one rank, a client of one sender (senders=1) and a whole model on the
  rank: only rank 0 of data_parallel_group (default: the world) probes and
  sends; the others return at once (no forward pass). Build the Client on
  every rank, or only on rank 0 (client=None elsewhere: such a probe does
  nothing); call end() only on the rank that sends.
- A split model (pipeline stages holding some layers, tensor-parallel ranks
  holding some heads): every rank of the split is a sender of the run,
  with a client built by distributed_client(run, layers, heads, group) (its
  rank and size in the group become rank and senders; one incarnation,
  shared_incarnation(group), for all), and each sends what it holds; each
  rank calls end(). With data_parallel_group given, only its rank 0 sends
  (the model-parallel replicas of other data-parallel ranks do nothing).
  A rank that holds a part of the model with a single-sender client is an
  error (counted in stats["errors"], warned about once): the daemon could
  never complete its steps.
- A client of several senders on whole-model ranks (every rank a sender):
  each sends every layer; the daemon keeps the first copy of each cell and
  compares the others with it (PROTOCOL.md 7b, "disagree").

All ranks that send must probe at the same steps (the same `every`), and
with a pipeline the probe pass itself crosses the stages: the model the
probe calls on each rank must run its stage of the probe batch (see
contrib/examples/train_pipeline_gpt.py).
"""

import inspect
import math
import random
import time
import warnings

import numpy as np
import torch

__all__ = ["AttentionProbe", "shared_incarnation", "distributed_client", "rowstats"]

ROWSTATS_FIELDS = ("s", "w", "H", "hb", "Hc", "b")


# ---------------------------------------------------------------- distributed

def _dist():
    """torch.distributed when it is available and initialized, else None."""
    try:
        import torch.distributed as dist
    except ImportError:     # pragma: no cover - a torch built without it
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _global_rank(dist, group, rank):
    """The global rank of a group's rank (src of a broadcast)."""
    if group is None or group is dist.group.WORLD:
        return rank
    for fn in (getattr(dist, "get_global_rank", None),
               getattr(dist.distributed_c10d, "_get_global_rank", None)):
        if fn is not None:
            return fn(group, rank)
    return dist.get_process_group_ranks(group)[rank]     # pragma: no cover


def shared_incarnation(group=None):
    """One incarnation number for every rank of a torch.distributed process
    group (default: the world): rank 0 of the group picks it, as a Client
    does (sinkwatch.client.new_incarnation()), and broadcast_object_list
    hands it to the others. A collective: every rank of the group calls it,
    once per job attempt (a restarted job gets a new one, the next
    incarnation). With NCCL, set the rank's CUDA device first
    (torch.cuda.set_device), as broadcast_object_list needs. Without an
    initialized torch.distributed: a new incarnation (one process)."""
    from .client import new_incarnation
    dist = _dist()
    if dist is None:
        return new_incarnation()
    r = dist.get_rank(group)
    if r < 0:
        raise ValueError("shared_incarnation: this rank (%d) is not in the group"
                         % dist.get_rank())
    obj = [new_incarnation() if r == 0 else None]
    dist.broadcast_object_list(obj, src=_global_rank(dist, group, 0), group=group)
    inc = obj[0]
    if not isinstance(inc, int) or not 1 <= inc < (1 << 64):
        raise RuntimeError("shared_incarnation: received %r" % (inc,))
    return inc


def distributed_client(run, layers, heads, group=None, data_parallel_group=None,
                       **client_kwargs):
    """A sinkwatch.Client for this rank of a job whose model is split over
    the ranks of `group` (pipeline stages, tensor-parallel ranks; default:
    the world): rank = the rank in the group, senders = the group's size,
    incarnation = shared_incarnation(group) (or the incarnation= given,
    which must then be the same on every rank). layers and heads are the
    whole model's; client_kwargs go to sinkwatch.Client (endpoint, model,
    params, sink, fixed_probe, blocking, resume_from, ...).

    A collective over `group` (unless incarnation= is given): every rank of
    it calls this. data_parallel_group: when the split model is replicated
    for data parallelism, the group of this rank's replicas; only its rank
    0 gets a client, the others get None (they call shared_incarnation with
    their own group all the same, and AttentionProbe(client=None) does
    nothing). Without an initialized torch.distributed: a Client of one
    sender."""
    from .client import Client
    for k in ("rank", "senders"):
        if k in client_kwargs:
            raise ValueError("distributed_client: %s is taken from the group; do not pass it"
                             % k)
    dist = _dist()
    if dist is None:
        return Client(run, layers, heads, **client_kwargs)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise ValueError("distributed_client: this rank (%d) is not in the group"
                         % dist.get_rank())
    inc = client_kwargs.pop("incarnation", None)
    if inc is None:
        inc = shared_incarnation(group)
    if data_parallel_group is not None and dist.get_rank(data_parallel_group) != 0:
        return None
    return Client(run, layers, heads, rank=rank, senders=size, incarnation=inc,
                  **client_kwargs)


def _ranges(ids):
    """[0, 1, 2, 5] -> "0..2, 5" (for messages)."""
    out, ids = [], sorted(ids)
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append("%d..%d" % (ids[i], ids[j]) if j > i else "%d" % ids[i])
        i = j + 1
    return ", ".join(out)


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
        self.sources = []       # the module of each captured tensor
        self.saved = []

    def _wrapper(self, orig, module):
        sig = inspect.signature(orig)
        store, sources = self.captured, self.sources

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
                sources.append(module)
            if not want or w is None:
                return out, None
            return out, (w.mean(dim=-3) if avg else w)
        return forward

    def __enter__(self):
        for m in self.modules:
            had = "forward" in m.__dict__
            self.saved.append((m, had, m.__dict__.get("forward")))
            m.forward = self._wrapper(m.forward, m)
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

    Distributed training (the module's docstring says how the probe learns
    the layers and heads a rank holds, and which ranks send):
    client may be None: the probe then does nothing (a rank that does not
        send; probe() returns False).
    layers: the global layer index of each captured layer, in capture
        order (a pipeline stage whose module names are renumbered).
    layer_offset: global index = layer_offset + capture index.
    head0: the first of the model's heads (of the client's heads) that the
        captured tensors hold (a tensor-parallel rank); default: learned.
    modules: with "hf" or a callable capture, the attention module of each
        captured layer (in capture order), to learn from as "mha" does.
    data_parallel_group: the torch.distributed group whose rank 0 alone
        sends when the model is replicated for data parallelism (default:
        the world for a single-sender client, none for a split model).
    """

    def __init__(self, model, probe_batch, client, every=100, capture="mha",
                 query_positions=None, cast=None, rowstats=False, causal=True,
                 sink=None, modules=None, keep=False, delta=1e-10, resume_from=None,
                 layers=None, layer_offset=None, head0=None, data_parallel_group=None):
        if cast not in (None, "f16", "bf16"):
            raise ValueError("cast must be None, 'f16' or 'bf16'")
        if layers is not None and layer_offset is not None:
            raise ValueError("layers and layer_offset: give one of them")
        if layers is not None:
            try:
                layers = [int(x.__index__()) for x in layers]
            except (TypeError, AttributeError):
                raise ValueError("layers: a list of global layer indices (ints)") from None
            if not layers or min(layers) < 0 or len(set(layers)) != len(layers):
                raise ValueError("layers: %r, expected distinct indices >= 0" % (layers,))
        for name, v in (("layer_offset", layer_offset), ("head0", head0)):
            if v is not None and (isinstance(v, bool) or not hasattr(v, "__index__") or
                                  v.__index__() < 0):
                raise ValueError("%s: %r, expected an int >= 0" % (name, v))
        if resume_from is not None and client is not None:
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
        self.layer_ids = layers
        self.layer_offset = None if layer_offset is None else layer_offset.__index__()
        self.head0 = None if head0 is None else head0.__index__()
        self.data_parallel_group = data_parallel_group
        self.last = None
        self._layout = {}
        self._plans = {}
        self._names = None
        self._warned = set()
        self._st = {"probes": 0, "errors": 0, "last_error": None,
                    "messages": 0, "send_false": 0, "bytes_total": 0,
                    "bytes_last": 0, "ms_total": 0.0, "ms_last": 0.0,
                    "ms_max": 0.0, "ms_capture_total": 0.0, "ms_copy_total": 0.0,
                    "ms_send_total": 0.0, "cpu_ms_total": 0.0, "cpu_ms_capture_total": 0.0,
                    "cpu_ms_copy_total": 0.0, "cpu_ms_send_total": 0.0,
                    "layers": 0, "rows": 0, "keys": 0,
                    "rows_skipped": 0, "kind": "rowstats" if rowstats else "probs",
                    "dtype": None, "parts": []}

    # -- public

    @property
    def stats(self):
        """Counters and the probe's cost: ms_mean / bytes_mean per probe
        (tensor-frame bytes: what crossed from device to the client), and
        ms_capture_mean, the part of ms_mean spent saving state and running
        the probe forward (the rest: reduction, copy to host, send);
        ms_copy_mean, the rows' selection, cast or rowstats and the copy to
        host (_payload); ms_send_mean, the client's send calls. The same
        as this thread's CPU time (time.thread_time), which a busy machine
        does not inflate: cpu_ms_mean, cpu_ms_capture_mean, cpu_ms_copy_mean,
        cpu_ms_send_mean (the client's I/O thread, which moves the bytes
        after send returns, is not in them)."""
        st = dict(self._st)
        n = st["probes"]
        st["ms_mean"] = st["ms_total"] / n if n else 0.0
        st["bytes_mean"] = st["bytes_total"] / n if n else 0.0
        # the forward pass (with state saving) vs reduction, copy and send
        st["ms_capture_mean"] = st["ms_capture_total"] / n if n else 0.0
        st["ms_copy_mean"] = st["ms_copy_total"] / n if n else 0.0
        st["ms_send_mean"] = st["ms_send_total"] / n if n else 0.0
        for k in ("", "capture_", "copy_", "send_"):
            st["cpu_ms_%smean" % k] = st["cpu_ms_%stotal" % k] / n if n else 0.0
        return st

    def due(self, step):
        return self.every > 0 and step % self.every == 0

    @property
    def sends(self):
        """Whether this rank probes and sends (see "Who sends" in the module
        docstring): False without a client and on a data-parallel replica
        other than rank 0. Asks torch.distributed each time."""
        if self.client is None:
            return False
        dist = _dist()
        if dist is None:
            return True
        dp = self.data_parallel_group
        if getattr(self.client, "senders", 1) > 1:
            return dp is None or dist.get_rank(dp) == 0
        return dist.get_rank(dp) == 0

    def maybe(self, step):
        """Probes if `step` is 0 or a multiple of `every`. True if it probed
        and every layer was handed to the client."""
        if not self.due(step):
            return False
        return self.probe(step)

    __call__ = maybe

    def probe(self, step):
        """One probe now, at training step `step`. Never raises. On a rank
        that does not send (probe.sends is False) it does nothing and
        returns False."""
        t0 = time.perf_counter()
        c0 = time.thread_time()
        ok = False
        sent_bytes = 0
        try:
            if not self.sends:
                return False
            flags = [(m, m.training) for m in self.model.modules()]
            rng = _rng_state()
        except Exception as e:  # noqa: BLE001 - never into the training loop
            self._error(e)
            return False
        try:
            self.model.eval()
            with torch.no_grad():
                layers, sources = self._capture()
                t1 = time.perf_counter()
                self._st["ms_capture_total"] += (t1 - t0) * 1e3
                self._st["cpu_ms_capture_total"] += (time.thread_time() - c0) * 1e3
                sent_bytes, ok = self._send(step, layers, sources)
            del layers, sources
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
        st["cpu_ms_total"] += (time.thread_time() - c0) * 1e3
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
        """(the captured [batch, heads, q, k] tensors, the module of each or
        None where unknown)."""
        model, batch = self.model, self.batch
        sources = None
        if self.capture != "mha" and self.modules is not None:
            sources = list(self.modules)
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
            att, sources = patch.captured, patch.sources
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
        if sources is not None and len(sources) != len(att):
            raise RuntimeError("modules: %d given, %d attention layers captured"
                               % (len(sources), len(att)))
        return att, sources or [None] * len(att)

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

    # -- where the captured layers belong (module docstring, "Distributed")

    _LAYER_ATTRS = (("layer_idx", 0), ("layer_id", 0), ("layer_number", 1))
    _TP_HEADS_ATTRS = ("num_attention_heads_per_partition", "num_heads_per_partition",
                       "num_local_heads", "n_local_heads")
    _TP_RANK_ATTRS = ("tp_rank", "tensor_model_parallel_rank", "tensor_parallel_rank",
                      "model_parallel_rank")
    _TP_GROUP_ATTRS = ("tp_group", "tensor_parallel_group", "tensor_model_parallel_group")

    def _lineage(self, module):
        """(qualified name, [module, parent, ..., the model]) of a module of
        the probe's model; (None, [module]) for one outside it."""
        if self._names is None:
            self._names = {}
            self._by_name = {}
            for name, m in self.model.named_modules():
                self._names.setdefault(id(m), name)
                self._by_name[name] = m
        name = self._names.get(id(module))
        if name is None:
            return None, [module]
        chain, parts = [module], name.split(".") if name else []
        for i in range(len(parts) - 1, -1, -1):
            m = self._by_name.get(".".join(parts[:i]))
            if m is not None:
                chain.append(m)
        return name, chain

    @staticmethod
    def _int_attr(m, names):
        for n in names:
            v = getattr(m, n, None)
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                return n, int(v)
        return None, None

    def _learn_layer(self, module):
        """The global layer index of an attention module, or None."""
        name, chain = self._lineage(module)
        for m in chain[:-1] if len(chain) > 1 else chain:     # not the model itself
            for attr, base in self._LAYER_ATTRS:
                v = getattr(m, attr, None)
                if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= base:
                    return int(v) - base
        if name:
            digits = [p for p in name.split(".") if p.isdigit()]
            if digits:
                return int(digits[-1])
        return None

    def _learn_heads(self, module, nh):
        """(head0, how) of a module whose captured tensor has nh heads:
        (None, None) when nothing says."""
        _, chain = self._lineage(module)
        per = rank = None
        for m in chain:
            if per is None:
                attr, per = self._int_attr(m, self._TP_HEADS_ATTRS)
                if per is None:
                    _, local = self._int_attr(m, ("num_heads",))
                    _, total = self._int_attr(m, ("total_num_heads",))
                    if local is not None and total is not None:
                        per, attr = local, "num_heads (total_num_heads %d)" % total
                per_attr = attr
            if rank is None:
                rattr, rank = self._int_attr(m, self._TP_RANK_ATTRS)
                if rank is None:
                    dist = _dist()
                    for g in self._TP_GROUP_ATTRS:
                        grp = getattr(m, g, None)
                        if grp is not None and dist is not None and not isinstance(grp, bool):
                            rank, rattr = dist.get_rank(grp), g
                            break
        if per is None and rank is None:
            return None, None
        if per is not None and per != nh:
            raise RuntimeError("the attention module says %s %d, its captured tensor "
                               "has %d heads" % (per_attr, per, nh))
        if rank is None:
            if per == getattr(self.client, "heads", per):
                return 0, per_attr
            raise RuntimeError("a tensor-parallel attention (%s %d of the client's %s "
                               "heads) without a tensor-parallel rank: set tp_rank on the "
                               "module or pass head0= to the probe" % (per_attr, per,
                                                                      self.client.heads))
        if rank < 0:
            raise RuntimeError("tensor-parallel rank %d (%s): not in the group" % (rank, rattr))
        return rank * nh, "%s %d" % (rattr, rank)

    def _plan(self, layers, sources):
        """[(global layer, head0, heads)] of the captured layers, checked
        against the client (and cached per capture layout)."""
        key = tuple((id(m), a.shape[1]) for a, m in zip(layers, sources))
        if key in self._plans:
            return self._plans[key]
        nl = getattr(self.client, "layers", None)
        nh = getattr(self.client, "heads", None)
        n = len(layers)
        learned = False
        if self.layer_ids is not None:
            if len(self.layer_ids) != n:
                raise RuntimeError("layers=%r names %d layers, %d attention layers were "
                                   "captured" % (self.layer_ids, len(self.layer_ids), n))
            ids = list(self.layer_ids)
        elif self.layer_offset is not None:
            ids = [self.layer_offset + i for i in range(n)]
        else:
            ids = [self._learn_layer(m) if m is not None else None for m in sources]
            learned = (None not in ids and len(set(ids)) == n and
                       (not isinstance(nl, int) or max(ids) < nl))
            if not learned:
                ids = list(range(n))
        if isinstance(nl, int):
            if (self.layer_ids is not None or self.layer_offset is not None) and \
                    max(ids) >= nl:
                raise RuntimeError("layer %d: the client declares %d layers" % (max(ids), nl))
            if not learned and self.layer_ids is None and self.layer_offset is None:
                if n > nl:
                    ids = ids[:nl]      # the capture order, cut to the client's (warned)
                elif n < nl and getattr(self.client, "senders", 1) > 1:
                    raise RuntimeError(
                        "%d attention layers captured of the client's %d, and nothing says "
                        "which they are (no layer_idx/layer_id/layer_number attribute, no "
                        "index in the module names): pass layers= or layer_offset="
                        % (n, nl))
            single = getattr(self.client, "senders", 1) == 1 and _dist() is None
            if single and (n != nl or sorted(ids) != list(range(nl))):
                self._warn_once("layers", "sinkwatch probe: %d attention layers captured "
                                "(sent as layers %s), the client declares %d"
                                % (n, _ranges(ids), nl))
        plan = []
        for li, (a, m) in zip(ids, zip(layers, sources)):
            h = int(a.shape[1])
            if self.head0 is not None:
                h0, how = self.head0, "head0=%d" % self.head0
            elif m is not None:
                h0, how = self._learn_heads(m, h)
            else:
                h0, how = None, None
            if isinstance(nh, int):
                if h0 is None and h != nh:
                    raise RuntimeError("layer %d has %d heads, the client declares %d (a "
                                       "tensor-parallel part needs head0= or the module's "
                                       "tensor-parallel attributes)" % (li, h, nh))
                if h0 is not None and h0 + h > nh:
                    raise RuntimeError("layer %d: heads %d..%d (%s), the client declares %d"
                                       % (li, h0, h0 + h - 1, how, nh))
            plan.append((li, h0 or 0, h))
        self._plans[key] = plan
        return plan

    def _check_senders(self, plan):
        """A part of the model on a rank of a distributed job needs a client
        of several senders."""
        if getattr(self.client, "senders", 1) > 1:
            return
        dist = _dist()
        if dist is None or dist.get_world_size() < 2:
            return
        nl, nh = getattr(self.client, "layers", None), getattr(self.client, "heads", None)
        ids = sorted(p[0] for p in plan)
        part_layers = isinstance(nl, int) and ids != list(range(nl))
        part_heads = any(h0 != 0 or (isinstance(nh, int) and h != nh) for _, h0, h in plan)
        if part_layers or part_heads:
            what = "layers %s" % _ranges(ids) if part_layers else "heads %s" % ", ".join(
                sorted({"%d..%d" % (h0, h0 + h - 1) for _, h0, h in plan}))
            raise RuntimeError(
                "rank %d holds %s of the model (%s layers x %s heads) but the client is a "
                "single sender: build it with sinkwatch.torch.distributed_client(run, "
                "layers, heads, group) so that every rank of the split sends its part"
                % (dist.get_rank(), what, nl, nh))

    def _send(self, step, layers, sources=None):
        if sources is None:
            sources = [None] * len(layers)
        plan = self._plan(layers, sources)
        self._check_senders(plan)
        nh = getattr(self.client, "heads", None)
        total, ok = 0, True
        keep = {"step": step, "attention": [], "sent": [], "layers": [], "head0": []} \
            if self.keep else None
        for (li, h0, h), a in zip(plan, layers):
            t0, c0 = time.perf_counter(), time.thread_time()
            arr, kind, dtype, qpos, host = self._payload(a)
            t1, c1 = time.perf_counter(), time.thread_time()
            self._st["ms_copy_total"] += (t1 - t0) * 1e3
            self._st["cpu_ms_copy_total"] += (c1 - c0) * 1e3
            if self.keep:
                keep["attention"].append(host)
                keep["sent"].append(arr)
                keep["layers"].append(li)
                keep["head0"].append(h0)
                keep["qpos"] = None if qpos is None else np.asarray(qpos, dtype=np.int64)
                keep["kind"], keep["dtype"] = kind, dtype or str(arr.dtype)
            total += arr.nbytes
            part = {"head0": h0} if (h0 != 0 or (isinstance(nh, int) and h != nh)) else {}
            t2, c2 = time.perf_counter(), time.thread_time()
            r = self.client.send(step, li, arr, kind=kind, qpos=qpos, dtype=dtype, **part)
            self._st["ms_send_total"] += (time.perf_counter() - t2) * 1e3
            self._st["cpu_ms_send_total"] += (time.thread_time() - c2) * 1e3
            self._st["messages"] += 1
            if r is False:
                self._st["send_false"] += 1
                ok = False
            self._st["rows"], self._st["keys"] = arr.shape[1], arr.shape[2]
            self._st["dtype"] = dtype or {"float32": "f32", "float16": "f16",
                                          "float64": "f64"}.get(str(arr.dtype), str(arr.dtype))
        self._st["layers"] = len(plan)
        self._st["parts"] = list(plan)
        if self.keep:
            self.last = keep
        return total, ok
