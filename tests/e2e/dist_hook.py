#!/usr/bin/python3
"""sinkwatch.torch in a distributed job, without a daemon: two processes
(torch.distributed, gloo, CPU) stream to a bound ZeroMQ SUB of this test,
which decodes every message with sinkwatch.proto.

- shared_incarnation: one number on both ranks (world and a new group), a
  new one per call; distributed_client: rank, senders, the shared number;
  None on a data-parallel replica.
- data parallel default: a whole model on each rank and a client of one
  sender: only rank 0 probes and sends (v1 messages, every layer), rank 1
  runs no probe pass and sends nothing; client=None is a probe that does
  nothing.
- pipeline (contrib/examples/train_pipeline_gpt.py's stages, original
  module names): rank r sends the layers it holds, rank r of 2, one
  incarnation; the tensors equal a single process's probe of the whole
  model. A stage renumbered from 0 with layer_offset= gives the same
  (blocks named without an index and no layer_offset: refused); a
  single-sender client on a stage is refused (counted, warned, nothing
  sent).
- tensor parallel (column-parallel q/k/v, row-parallel output with an
  all-reduce; num_attention_heads_per_partition and tp_rank on the
  attention): rank r sends heads 2r, 2r+1 of every layer (head0 2r) and the
  parts put together equal the unsplit model's probe.

    SW_SRCDIR=. /usr/bin/python3 tests/e2e/dist_hook.py [CASE...]
"""
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "examples"))

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import zmq
except ImportError as e:        # the test needs the Python stack
    print("skipped: %s" % e)
    sys.exit(77)

WORLD = 2
LAYERS, HEADS, D, CONTEXT, SEED = 4, 4, 16, 10, 3
TIMEOUT = 240


# ------------------------------------------------------------ models

def tiny_gpt():
    """The example's TinyGPT (4 layers x 4 heads) and a probe batch."""
    import train_tiny_gpt as t
    torch.manual_seed(SEED)
    m = t.TinyGPT(LAYERS, HEADS, D, CONTEXT, 0.1)
    x = torch.randint(0, 256, (2, CONTEXT), generator=torch.Generator().manual_seed(5))
    x[:, 0] = t.BOS
    return m, x


class Attn(nn.Module):
    """Causal self-attention that records its probabilities in a probe
    pass. Split for tensor parallelism by shard(): q, k, v of its heads
    (column-parallel), the output projection's columns of its heads
    (row-parallel, summed over the ranks)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.record = False
        self.probs = None
        self.tp_world = 1

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.heads * self.hd, dim=-1)
        q, k, v = (t.reshape(B, T, self.heads, self.hd).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / self.hd ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        p = s.softmax(-1)
        if self.record:
            self.probs = p
        y = (p @ v).transpose(1, 2).reshape(B, T, self.heads * self.hd)
        y = y @ self.out.weight.t()
        if self.tp_world > 1:
            dist.all_reduce(y)
        return y + self.out.bias


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = Attn(d, heads)

    def forward(self, x):
        return x + self.attn(self.ln(x))


class TPModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(256, D)
        self.layers = nn.ModuleList([Layer(D, HEADS) for _ in range(2)])

    def forward(self, idx):
        x = self.emb(idx)
        for m in self.layers:
            x = m(x)
        return x


def tp_model():
    torch.manual_seed(SEED + 1)
    m = TPModel()
    x = torch.randint(0, 256, (2, CONTEXT), generator=torch.Generator().manual_seed(6))
    return m, x


def shard(model, rank, world):
    """Keeps this rank's heads of every attention (Megatron's layout: the
    attributes the probe reads are set on the attention module)."""
    for layer in model.layers:
        a = layer.attn
        per = a.heads // world
        cols = slice(rank * per * a.hd, (rank + 1) * per * a.hd)
        w, b = a.qkv.weight.data, a.qkv.bias.data
        d = a.heads * a.hd
        a.qkv.weight.data = torch.cat([w[i * d:(i + 1) * d][cols] for i in range(3)])
        a.qkv.bias.data = torch.cat([b[i * d:(i + 1) * d][cols] for i in range(3)])
        a.out.weight.data = a.out.weight.data[:, cols].contiguous()
        a.heads = per
        a.tp_world = world
        a.num_attention_heads_per_partition = per
        a.tp_rank = rank
    return model


def tp_capture(model, batch):
    mods = [m.attn for m in model.layers]
    for m in mods:
        m.record = True
    try:
        model(batch)
        return [m.probs for m in mods]
    finally:
        for m in mods:
            m.record = False
            m.probs = None


class Collect:
    """A stand-in client that keeps what the probe sends."""

    def __init__(self, layers, heads):
        self.layers, self.heads, self.sink = layers, heads, 0
        self.msgs, self.head0 = {}, {}

    def send(self, step, layer, array, kind="probs", qpos=None, dtype=None, head0=None):
        self.msgs[layer] = np.array(array)
        self.head0[layer] = head0
        return True


# ------------------------------------------------------------ the ranks

def _worker(rank, tmp, endpoint):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    out = {"rank": rank}
    try:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "rdzv"),
                                rank=rank, world_size=WORLD)
        _scenarios(rank, endpoint, out)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported by the parent
        out["error"] = traceback.format_exc()
    with open(os.path.join(tmp, "rank%d.json" % rank), "w") as f:
        json.dump(out, f)


def _finish(client, out, key):
    client.end()
    out[key + "_queued"] = client.flush(10.0)
    out[key + "_stats"] = client.close()


def _scenarios(rank, endpoint, out):
    import warnings

    import sinkwatch
    import sinkwatch.torch as swt
    from train_pipeline_gpt import PipelinePass, Stage, split_layers
    warnings.simplefilter("ignore")

    # shared incarnations
    out["inc"] = [swt.shared_incarnation(), swt.shared_incarnation()]
    out["inc_group"] = swt.shared_incarnation(dist.new_group([0, 1]))
    c = swt.distributed_client("dc", LAYERS, HEADS, endpoint=endpoint, linger=0)
    out["dc"] = [c.rank, c.senders, c.incarnation]
    c.close()
    c = swt.distributed_client("dc", LAYERS, HEADS, endpoint=endpoint, linger=0,
                               data_parallel_group=dist.group.WORLD)
    out["dc_replica"] = None if c is None else [c.rank, c.senders]
    if c is not None:
        c.close()

    # data parallel default: a whole model, a client of one sender on each rank
    m, x = tiny_gpt()
    c = sinkwatch.Client("dp", LAYERS, HEADS, endpoint=endpoint, linger=5.0)
    calls = []
    hook = m.blocks[0].register_forward_hook(lambda *a: calls.append(1))
    p = swt.AttentionProbe(m, x, c, every=1)
    out["dp_sends"] = p.sends
    out["dp_result"] = p.maybe(0)
    out["dp_forward_calls"] = len(calls)
    out["dp_probes"] = p.stats["probes"]
    out["dp_errors"] = p.stats["errors"]
    hook.remove()
    if rank == 0:
        _finish(c, out, "dp")
    else:
        out["dp_stats"] = c.close()
    p = swt.AttentionProbe(m, x, c if rank == 0 else None, every=1)
    out["none_result"] = None if rank == 0 else [p.sends, p.maybe(0), p.stats["probes"]]

    # pipeline: stages with the original names, a client of 2 senders
    m, x = tiny_gpt()
    lo, hi = split_layers(LAYERS, WORLD)[rank]
    stage = Stage(m, lo, hi, rank == 0, rank == WORLD - 1)
    whole = PipelinePass(stage, rank, WORLD, (x.shape[0], CONTEXT, D))
    c = swt.distributed_client("pp", LAYERS, HEADS, endpoint=endpoint, linger=5.0)
    p = swt.AttentionProbe(whole, x, c, every=1)
    out["pp_sends"] = p.sends
    out["pp_result"] = [p.maybe(0), p.maybe(1)]
    out["pp_parts"] = p.stats["parts"]
    out["pp_errors"] = p.stats["errors"]
    _finish(c, out, "pp")

    # the same stage renumbered from 0 (a ModuleList slice) and layer_offset=
    m, x = tiny_gpt()
    stage = Stage(m, lo, hi, rank == 0, rank == WORLD - 1)
    stage.blocks = nn.ModuleDict({str(i - lo): b for i, b in
                                  ((int(k), b) for k, b in stage.blocks.items())})
    whole = PipelinePass(stage, rank, WORLD, (x.shape[0], CONTEXT, D))
    c = swt.distributed_client("pp-offset", LAYERS, HEADS, endpoint=endpoint, linger=5.0)
    # blocks named without an index: nothing says which layers they are
    kept = stage.blocks
    stage.blocks = nn.ModuleDict({"b" + k: b for k, b in kept.items()})
    p = swt.AttentionProbe(whole, x, c, every=1)
    out["pp_unnamed"] = [p.maybe(0), p.stats["errors"], p.stats["last_error"],
                         c.stats["next_seq"]]
    stage.blocks = kept
    p = swt.AttentionProbe(whole, x, c, every=1, layer_offset=lo)
    out["pp_offset_result"] = p.maybe(0)
    out["pp_offset_parts"] = p.stats["parts"]
    _finish(c, out, "pp_offset")

    # a stage with a client of one sender: refused on the rank that probes
    # (rank 0, the data-parallel default; its stage alone, as rank 1 would
    # not take part in a pipeline pass)
    m, x = tiny_gpt()
    stage = Stage(m, lo, hi, rank == 0, rank == WORLD - 1)
    c = sinkwatch.Client("pp-bad", LAYERS, HEADS, endpoint=endpoint, linger=0)
    p = swt.AttentionProbe(stage, x, c, every=1)
    out["pp_bad"] = [p.maybe(0), p.stats["errors"], p.stats["last_error"],
                     c.stats["next_seq"]]
    c.close()

    # tensor parallel: rank r holds heads 2r, 2r+1 of each layer
    m, x = tp_model()
    shard(m, rank, WORLD)
    c = swt.distributed_client("tp", 2, HEADS, endpoint=endpoint, linger=5.0)
    p = swt.AttentionProbe(m, x, c, every=1, capture=tp_capture,
                           modules=[layer.attn for layer in m.layers])
    out["tp_result"] = p.maybe(0)
    out["tp_parts"] = p.stats["parts"]
    out["tp_errors"] = [p.stats["errors"], p.stats["last_error"]]
    _finish(c, out, "tp")


# ------------------------------------------------------------ the parent

class Capture:
    """A bound SUB that keeps every message (a thread keeps it polled)."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = "tcp://127.0.0.1:%d" % port
        self.sub.setsockopt(zmq.SUBSCRIBE, b"sw/")
        self.got = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stopping.is_set():
            if self.sub.poll(20, zmq.POLLIN):
                self.got.put(self.sub.recv_multipart())

    def drain(self, quiet=1.0):
        out = []
        while True:
            try:
                out.append(self.got.get(timeout=quiet))
            except queue.Empty:
                return out

    def close(self):
        self.stopping.set()
        self.thread.join()
        self.sub.close()
        self.ctx.term()


STATE = {}


def run_ranks():
    """Both ranks once; their reports and every message, by run."""
    from sinkwatch import proto
    tmp = tempfile.mkdtemp(prefix="sw-disthook-")
    cap = Capture()
    ctx = torch.multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, tmp, cap.endpoint)) for r in range(WORLD)]
    try:
        for p in procs:
            p.start()
        deadline = time.time() + TIMEOUT
        for p in procs:
            p.join(max(1.0, deadline - time.time()))
        hung = [p for p in procs if p.is_alive()]
        for p in hung:
            p.kill()
            p.join()
        msgs = cap.drain()
        reports = []
        for r in range(WORLD):
            path = os.path.join(tmp, "rank%d.json" % r)
            if not os.path.exists(path):
                raise AssertionError("rank %d wrote no report (exit %s%s)"
                                     % (r, procs[r].exitcode, ", hung" if hung else ""))
            with open(path) as f:
                reports.append(json.load(f))
        for rep in reports:
            if "error" in rep:
                raise AssertionError("rank %d failed:\n%s" % (rep["rank"], rep["error"]))
    finally:
        cap.close()
        shutil.rmtree(tmp, ignore_errors=True)
    by_run = {}
    for fr in msgs:
        h = proto.decode_message(fr)
        if h["type"] == "snapshot":
            a = np.frombuffer(h["tensor"], dtype=np.float32).reshape(h["shape"])
            h["array"] = a
        h.pop("tensor", None)
        by_run.setdefault(h["run"], []).append(h)
    STATE["reports"], STATE["runs"] = reports, by_run
    return reports, by_run


def snaps(run):
    return [h for h in STATE["runs"].get(run, []) if h["type"] == "snapshot"]


def ends(run):
    return [h for h in STATE["runs"].get(run, []) if h["type"] == "end"]


def reference(model, x, capture="mha", layers=LAYERS, modules=None):
    """A single process's probe of a whole model: {layer: [heads, rows, keys]}."""
    import sinkwatch.torch as swt
    col = Collect(layers, HEADS)
    p = swt.AttentionProbe(model, x, col, every=1, capture=capture, modules=modules)
    assert p.maybe(0) is True, p.stats
    return col.msgs


def case_shared_incarnation():
    r0, r1 = STATE["reports"]
    assert r0["inc"] == r1["inc"] and r0["inc_group"] == r1["inc_group"], (r0, r1)
    a, b = r0["inc"]
    assert 0 < a < b < (1 << 64) and b < r0["inc_group"], (a, b, r0["inc_group"])
    assert abs((a >> 12) / 1e6 - time.time()) < 600, a       # the wall clock, in us
    assert r0["dc"][:2] == [0, 2] and r1["dc"][:2] == [1, 2], (r0["dc"], r1["dc"])
    assert r0["dc"][2] == r1["dc"][2] > r0["inc_group"], (r0["dc"], r1["dc"])
    assert r0["dc_replica"] == [0, 2] and r1["dc_replica"] is None, (r0, r1)


def case_dp_default():
    r0, r1 = STATE["reports"]
    assert r0["dp_sends"] is True and r1["dp_sends"] is False
    assert r0["dp_result"] is True and r1["dp_result"] is False
    assert r0["dp_forward_calls"] == 1 and r1["dp_forward_calls"] == 0, (r0, r1)
    assert (r0["dp_probes"], r1["dp_probes"], r0["dp_errors"], r1["dp_errors"]) == (1, 0, 0, 0)
    assert r1["dp_stats"]["next_seq"] == 0 and r0["dp_stats"]["sent"] == LAYERS + 1, r0
    s = snaps("dp")
    assert sorted(h["layer"] for h in s) == list(range(LAYERS)), s
    e = ends("dp")
    assert len(e) == 1 and e[0]["seq"] == LAYERS, e
    inc = {h["inc"] for h in s + e}
    assert len(inc) == 1, inc
    for h in s + e:
        assert (h["v"], h["rank"], h["senders"]) == (1, 0, 1), h
    for h in s:
        assert (h["head0"], h["shape"][0]) == (0, HEADS), h
    m, x = tiny_gpt()
    ref = reference(m, x)
    for h in s:
        assert np.array_equal(h["array"], ref[h["layer"]]), h["layer"]
    assert r1["none_result"] == [False, False, 0], r1["none_result"]


def _check_pipeline(run, parts_key, steps):
    r0, r1 = STATE["reports"]
    assert r0[parts_key] == [[0, 0, HEADS], [1, 0, HEADS]], r0[parts_key]
    assert r1[parts_key] == [[2, 0, HEADS], [3, 0, HEADS]], r1[parts_key]
    s, e = snaps(run), ends(run)
    incs = {h["inc"] for h in s + e}
    assert len(incs) == 1, incs
    for rank in range(WORLD):
        mine = [h for h in s if h["rank"] == rank]
        assert sorted((h["step"], h["layer"]) for h in mine) == \
            sorted((t, 2 * rank + i) for t in steps for i in range(2)), (rank, mine)
        assert [h["seq"] for h in sorted(mine, key=lambda h: h["seq"])] == \
            list(range(len(mine))), rank
        mine_end = [h for h in e if h["rank"] == rank]
        assert len(mine_end) == 1 and mine_end[0]["seq"] == len(mine), (rank, mine_end)
        for h in mine + mine_end:
            assert (h["v"], h["senders"]) == (2, WORLD), h
        for h in mine:
            assert (h["head0"], h["row0"], h["shape"][0], h["rows"]) == \
                (0, 0, HEADS, h["shape"][1]), h
    m, x = tiny_gpt()
    ref = reference(m, x)
    for h in s:
        assert np.array_equal(h["array"], ref[h["layer"]]), \
            (run, h["layer"], float(np.abs(h["array"] - ref[h["layer"]]).max()))


def case_pipeline():
    r0, r1 = STATE["reports"]
    assert r0["pp_sends"] and r1["pp_sends"]
    assert r0["pp_result"] == [True, True] and r1["pp_result"] == [True, True], (r0, r1)
    assert r0["pp_errors"] == r1["pp_errors"] == 0
    assert r0["pp_stats"]["dropped"] == 0 and r1["pp_stats"]["dropped"] == 0
    _check_pipeline("pp", "pp_parts", [0, 1])


def case_pipeline_offset():
    r0, r1 = STATE["reports"]
    for r in (r0, r1):      # no index in the names, no layer_offset: refused
        ok, errors, last, seq = r["pp_unnamed"]
        assert ok is False and errors == 1 and seq == 0, r["pp_unnamed"]
        assert "2 attention layers captured of the client's 4" in last, last
    assert r0["pp_offset_result"] is True and r1["pp_offset_result"] is True
    _check_pipeline("pp-offset", "pp_offset_parts", [0])


def case_split_single_sender():
    r0, r1 = STATE["reports"]
    ok, errors, last, seq = r0["pp_bad"]
    assert ok is False and errors == 1 and seq == 0, r0["pp_bad"]
    assert "layers 0..1" in last and "distributed_client" in last, last
    assert r1["pp_bad"] == [False, 0, None, 0], r1["pp_bad"]      # does not probe
    assert not STATE["runs"].get("pp-bad"), STATE["runs"].get("pp-bad")


def case_tensor_parallel():
    r0, r1 = STATE["reports"]
    assert r0["tp_result"] is True and r1["tp_result"] is True, (r0["tp_errors"],
                                                                 r1["tp_errors"])
    per = HEADS // WORLD
    assert r0["tp_parts"] == [[0, 0, per], [1, 0, per]], r0["tp_parts"]
    assert r1["tp_parts"] == [[0, per, per], [1, per, per]], r1["tp_parts"]
    s, e = snaps("tp"), ends("tp")
    assert len(s) == 4 and len(e) == 2 and len({h["inc"] for h in s + e}) == 1, (s, e)
    m, x = tp_model()
    ref = reference(m, x, capture=tp_capture, layers=2,
                    modules=[layer.attn for layer in m.layers])
    for h in s:
        assert (h["v"], h["senders"], h["head0"], h["shape"][0], h["heads"]) == \
            (2, WORLD, per * h["rank"], per, HEADS), h
        want = ref[h["layer"]][h["head0"]:h["head0"] + per]
        assert h["array"].shape == want.shape, (h["array"].shape, want.shape)
        # layer 0 sees the same inputs; layer 1 those of an all-reduce
        tol = 0 if h["layer"] == 0 else 1e-5
        err = float(np.abs(h["array"] - want).max())
        assert err <= max(tol, 1e-6), (h["layer"], h["rank"], err)
    for rank in range(WORLD):
        assert sorted(h["layer"] for h in s if h["rank"] == rank) == [0, 1]


def case_learning_one_process():
    """What the probe learns, on one process (no torch.distributed): the
    arguments, attributes before names, heads from attributes; the
    refusals name the fix."""
    import warnings

    import sinkwatch.torch as swt
    m, x = tiny_gpt()
    ref = reference(m, x)
    # layers=: the captured layers' global indices, in capture order
    col = Collect(LAYERS, HEADS)
    p = swt.AttentionProbe(m, x, col, every=1, layers=[3, 1, 0, 2])
    assert p.maybe(0) is True and p.stats["parts"] == [(3, 0, 4), (1, 0, 4), (0, 0, 4),
                                                       (2, 0, 4)], p.stats
    assert all(np.array_equal(col.msgs[g], ref[i]) for i, g in enumerate([3, 1, 0, 2]))
    # an attribute (layer_number, 1-based) before the name's index
    for i, b in enumerate(m.blocks):
        b.layer_number = LAYERS - i
    col = Collect(LAYERS, HEADS)
    assert swt.AttentionProbe(m, x, col, every=1).maybe(0) is True
    assert all(np.array_equal(col.msgs[LAYERS - 1 - i], ref[i]) for i in range(LAYERS))
    for b in m.blocks:
        del b.layer_number
    # head0= and vLLM's num_heads beside total_num_heads with tp_rank: a part
    col = Collect(LAYERS, 2 * HEADS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert swt.AttentionProbe(m, x, col, every=1, head0=HEADS).maybe(0) is True
    assert col.head0 == {i: HEADS for i in range(LAYERS)}, col.head0
    for b in m.blocks:
        b.attn.total_num_heads, b.attn.tp_rank = 2 * HEADS, 1     # attn.num_heads: 4
    col = Collect(LAYERS, 2 * HEADS)
    p = swt.AttentionProbe(m, x, col, every=1)
    assert p.maybe(0) is True and col.head0 == {i: HEADS for i in range(LAYERS)}, p.stats
    # refusals: heads past the client's, layers past the client's, a part
    # of the heads with nothing to say where it lies
    for kw, client, words in ((dict(head0=1), Collect(LAYERS, HEADS), "heads 1..4"),
                              (dict(layer_offset=1), Collect(LAYERS, HEADS), "layer 4"),
                              (dict(layers=[0, 1]), Collect(LAYERS, HEADS), "names 2 layers"),
                              (dict(layer_offset=1), Collect(LAYERS, HEADS), "layer 4")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = swt.AttentionProbe(m, x, client, every=1, **kw)
            assert p.maybe(0) is False and not client.msgs, kw
        assert p.stats["errors"] == 1 and words in p.stats["last_error"], \
            (kw, p.stats["last_error"])
    for b in m.blocks:
        del b.attn.tp_rank
    col = Collect(LAYERS, 2 * HEADS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = swt.AttentionProbe(m, x, col, every=1)
        assert p.maybe(0) is False and "without a tensor-parallel rank" in \
            p.stats["last_error"], p.stats
    for b in m.blocks:
        del b.attn.total_num_heads
    col = Collect(LAYERS, 2 * HEADS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = swt.AttentionProbe(m, x, col, every=1)
        assert p.maybe(0) is False and "head0=" in p.stats["last_error"], p.stats
    # fewer layers than the client's, on one process: sent, warned once
    col = Collect(LAYERS + 2, HEADS)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        assert swt.AttentionProbe(m, x, col, every=1).maybe(0) is True
    assert sorted(col.msgs) == list(range(LAYERS))
    assert [str(w.message) for w in ws if "0..3" in str(w.message)], [str(w.message)
                                                                       for w in ws]
    # more: the first ones in capture order, warned (as before version 2)
    col = Collect(LAYERS - 1, HEADS)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        assert swt.AttentionProbe(m, x, col, every=1).maybe(0) is True
    assert sorted(col.msgs) == list(range(LAYERS - 1))
    assert [str(w.message) for w in ws if "4 attention layers captured" in str(w.message)
            and "declares 3" in str(w.message)], [str(w.message) for w in ws]
    for bad in (dict(layers=[0, 0]), dict(layers=[-1]), dict(layers="01"),
                dict(layer_offset=-1), dict(head0=1.5), dict(layers=[0], layer_offset=0)):
        try:
            swt.AttentionProbe(m, x, col, **bad)
            raise AssertionError("accepted %r" % (bad,))
        except ValueError:
            pass


CASES = [("learning_one_process", case_learning_one_process),
         ("shared_incarnation", case_shared_incarnation), ("dp_default", case_dp_default),
         ("pipeline", case_pipeline), ("pipeline_offset", case_pipeline_offset),
         ("split_single_sender", case_split_single_sender),
         ("tensor_parallel", case_tensor_parallel)]


def main(argv):
    from swharness import Results
    if not dist.is_available() or not dist.is_gloo_available():
        print("skipped: torch.distributed with gloo is not available")
        return 77
    res = Results()
    t0 = time.time()
    if not argv or "learning_one_process" in argv:
        res.check("learning_one_process", case_learning_one_process)
    if not argv or set(argv) - {"learning_one_process"}:
        res.check("two_ranks", run_ranks)
    if "reports" in STATE:
        for name, fn in CASES[1:]:
            if not argv or name in argv:
                res.check(name, fn)
    print("     (%.1f s)" % (time.time() - t0))
    return res.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
