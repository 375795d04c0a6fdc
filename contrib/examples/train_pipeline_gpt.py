#!/usr/bin/python3
"""Train the tiny causal transformer of train_tiny_gpt.py as a pipeline over
several processes (torch.distributed, gloo, CPU) and watch its attention:
each rank holds a stage (a contiguous slice of the blocks; the first also
the embeddings, the last the final norm, the head and the loss) and streams
the attention of the layers it holds; the daemon puts the stages' layers
together into one run (protocol version 2, several senders of one run).

    sinkwatchd &
    torchrun --nproc_per_node=2 --redirects 1 --tee 1 \
        contrib/examples/train_pipeline_gpt.py --run tiny-pp --steps 200 --every 25
    sinkwatch report sinkwatch-data/tiny-pp.h5

(--redirects 1 --tee 1: Debian 12's torchrun, torch 1.13 under Python 3.11,
stops before it starts a process with "'NoneType' object has no attribute
'get'" on its default --redirects 0 and --tee 0; with these it shows the
ranks' output prefixed by their rank. Other torchruns need no flags.)

Every rank builds the whole model from the same seed and keeps its stage's
modules under their original names ("blocks.2.attn" on rank 1 of a 4-layer
model), so the probe learns the global layer index of each attention by
itself. sinkwatch.torch.distributed_client() gives every rank a client with
rank = its stage, senders = the number of stages and one incarnation for all
(rank 0 picks it and broadcasts it). The probe pass is a pipeline pass too:
the probe batch goes through the stages in eval mode, each rank captures its
layers and hands its activations to the next stage.

The schedule is the simplest there is (one micro-batch: forward through the
stages, backward back through them); the stages' activations and gradients
travel with dist.send / dist.recv. The data order comes from a generator of
its own, seeded alike on every rank. Run as one process (python3
train_pipeline_gpt.py ...) it trains the whole model in one stage.
"""
import argparse
import datetime
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from train_tiny_gpt import VOCAB, TinyGPT, batch_from, load_text  # noqa: E402


def split_layers(layers, stages):
    """[(first, end)] of each stage: contiguous, the first stages one longer."""
    q, r = divmod(layers, stages)
    out, lo = [], 0
    for s in range(stages):
        hi = lo + q + (s < r)
        out.append((lo, hi))
        lo = hi
    return out


class Stage(nn.Module):
    """The modules of one pipeline stage of a TinyGPT, under their names in
    the whole model: blocks is a ModuleDict keyed by the global block index,
    so the attention of block 2 is "blocks.2.attn" on whichever rank holds it."""

    def __init__(self, model, lo, hi, first, last):
        super().__init__()
        self.first, self.last = first, last
        self.context = model.context
        if first:
            self.tok, self.pos, self.drop = model.tok, model.pos, model.drop
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(lo, hi)})
        if last:
            self.ln, self.head = model.ln, model.head
        self.register_buffer("mask", model.mask.clone(), persistent=False)

    def forward(self, x):
        """The first stage takes token ids [B, T], the others activations
        [B, T, d]; the last returns logits, the others activations."""
        if self.first:
            T = x.shape[1]
            x = self.drop(self.tok(x) + self.pos(torch.arange(T, device=x.device)))
        T = x.shape[1]
        mask = self.mask[:T, :T]
        for b in self.blocks.values():
            x = b(x, mask)
        return self.head(self.ln(x)) if self.last else x


class PipelinePass(nn.Module):
    """What the probe calls on each rank: a forward pass of the whole
    pipeline, in which this rank runs its stage (receiving the previous
    stage's activations, sending its own to the next). The probe batch's
    token ids are the input of the first stage; the others ignore theirs."""

    def __init__(self, stage, rank, world, shape):
        super().__init__()
        self.stage, self.rank, self.world, self.shape = stage, rank, world, shape

    def forward(self, x):
        if not self.stage.first:
            x = torch.empty(self.shape)
            dist.recv(x, self.rank - 1)
        y = self.stage(x)
        if not self.stage.last:
            dist.send(y.contiguous(), self.rank + 1)
        return y


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--endpoint", "--connect", dest="endpoint", default=None,
                   help="sinkwatchd listen endpoint (--connect: the old name; default "
                   "$SINKWATCH_ENDPOINT, else tcp://127.0.0.1:5710)")
    p.add_argument("--run", default=None,
                   help="run id (default tiny-pp/seedN-UNIXTIME, the same on every rank)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--every", type=int, default=25, help="probe cadence, steps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--probe-batch", type=int, default=2, help="sequences in the probe batch")
    p.add_argument("--probe-rows", type=int, default=None,
                   help="query positions per probe sequence, evenly spread (default: all)")
    p.add_argument("--rowstats", action="store_true",
                   help="send per-row statistics instead of rows")
    p.add_argument("--no-probe", action="store_true", help="train without the probe")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--flush-timeout", type=float, default=10.0,
                   help="seconds to wait at the end for queued messages")
    return p.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    torch.set_num_threads(a.threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    if world > a.layers:
        raise SystemExit("%d stages for %d layers: use --layers >= --nproc_per_node"
                         % (world, a.layers))
    torch.manual_seed(a.seed)            # the same whole model on every rank
    data = load_text()
    hparams = {"layers": a.layers, "heads": a.heads, "d": a.d_model, "context": a.context,
               "dropout": a.dropout}
    model = TinyGPT(**hparams)
    params = sum(p.numel() for p in model.parameters())
    lo, hi = split_layers(a.layers, world)[rank]
    stage = Stage(model, lo, hi, rank == 0, rank == world - 1)
    del model
    torch.manual_seed(a.seed * 1000 + rank)     # dropout: each stage its own stream
    data_gen = torch.Generator().manual_seed(a.seed)    # the batches: alike on all ranks
    opt = torch.optim.AdamW(stage.parameters(), lr=a.lr, weight_decay=0.01)
    starts = torch.linspace(0, len(data) - a.context - 1, a.probe_batch + 2)[1:-1].long()
    probe_x, _ = batch_from(data, starts, a.context)

    run = a.run or "tiny-pp/seed%d-%d" % (a.seed, int(time.time()))
    if world > 1 and a.run is None:
        box = [run]
        dist.broadcast_object_list(box, src=0)      # rank 0's clock names the run
        run = box[0]
    model_name = "tiny-gpt-L%dH%dD%d" % (a.layers, a.heads, a.d_model)
    client = probe = None
    if not a.no_probe:
        import sinkwatch.torch as swt
        # rank = this stage, senders = the stages, one incarnation for all
        client = swt.distributed_client(run, a.layers, a.heads, endpoint=a.endpoint,
                                        model=model_name, params=params, sink=0,
                                        fixed_probe=True)
        whole = PipelinePass(stage, rank, world, (a.probe_batch, a.context, a.d_model))
        probe = swt.AttentionProbe(whole, probe_x, client, every=a.every, capture="mha",
                                   query_positions=a.probe_rows, rowstats=a.rowstats,
                                   causal=True)
    print("rank %d of %d: run %s, layers %d..%d of %d (x %d heads), %d params in the stage"
          % (rank, world, run, lo, hi - 1, a.layers, a.heads,
             sum(p.numel() for p in stage.parameters())), flush=True)

    act = (a.batch, a.context, a.d_model)
    losses = []
    t0 = time.time()
    stage.train()
    for step in range(a.steps):
        if probe is not None:
            probe.maybe(step)
        ix = torch.randint(0, len(data) - a.context, (a.batch,), generator=data_gen)
        x, y = batch_from(data, ix, a.context)
        if stage.first:
            h_in = x
        else:
            h_in = torch.empty(act)
            dist.recv(h_in, rank - 1)
            h_in.requires_grad_(True)
        out = stage(h_in)
        if stage.last:
            loss = F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            losses.append(loss.item())
        else:
            dist.send(out.detach().contiguous(), rank + 1)
            g = torch.empty(act)
            dist.recv(g, rank + 1)
            opt.zero_grad(set_to_none=True)
            out.backward(g)
        if not stage.first:
            dist.send(h_in.grad.contiguous(), rank - 1)
        opt.step()
        if stage.last and a.log_every > 0 and (step % a.log_every == 0 or
                                               step == a.steps - 1):
            print("step %5d  loss %.4f  (%.1f bits/byte)" % (step, losses[-1],
                  losses[-1] / math.log(2)), flush=True)
    if probe is not None and a.steps > 0 and a.every > 0 and a.steps % a.every == 0:
        probe.maybe(a.steps)          # the final weights, on the cadence
    elapsed = time.time() - t0

    if client is not None:
        client.end()                  # each sender ends its part of the run
        client.flush(a.flush_timeout)
        cst = client.close()
        st = probe.stats
        print("rank %d client: %s" % (rank, " ".join("%s=%s" % kv for kv in sorted(cst.items()))))
        print("rank %d probe: %d probes, layers %s, %.2f ms/probe, %d bytes/probe, errors %d; "
              "training %.1f s" % (rank, st["probes"], [p[0] for p in st["parts"]],
                                   st["ms_mean"], st["bytes_mean"], st["errors"], elapsed),
              flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
