"""sinkwatch.sweep: replay saved checkpoints through the attention probe.

A checkpoint sweep computes, after the fact, what an AttentionProbe would
have streamed during training: for every saved state_dict it rebuilds the
model, loads the weights, runs the fixed probe batch and streams each layer's
attention to sinkwatchd under one run id. Several worker processes share the
checkpoints, so steps reach the daemon in any order.

    import sinkwatch.sweep as sws
    stats = sws.sweep("ckpt/", build_model, probe_batch, "gpt-tiny/sweep1",
                      endpoint="tcp://127.0.0.1:5710", control="tcp://127.0.0.1:5711",
                      workers=3, order="shuffle", seed=0)

    python3 -m sinkwatch.sweep --checkpoint-dir ckpt --run gpt-tiny/sweep1 --workers 3

The command line reads a directory written by contrib/examples/
train_tiny_gpt.py --save-every K --checkpoint-dir DIR: step_%08d.pt files
(state_dicts) and probe.pt (the probe batch, the model's hyper-parameters,
the file and function that build the model, the probe options).

How it streams:

- each worker is its own process with its own sinkwatch.Client in blocking
  mode (fixed_probe=True, block_timeout None by default: it waits for the
  daemon instead of dropping), so it is its own sender: its seq starts at 0;
- the capture is sinkwatch.torch.AttentionProbe's (probe.probe(step) for
  each checkpoint): the same rows, qpos, cast and rowstats as during training;
- the checkpoints are put in order (asc, desc, or shuffle with a seed) and
  dealt round-robin: worker i takes items i, i + N, i + 2N, ... of that order;
- only the parent ends the run: after every worker has exited, it waits until
  the daemon has received every message the workers sent (asked on the control
  socket, when one is given; else it waits `settle` seconds), and then sends
  the run's end message with a client of its own. A message that arrives after
  the end would be dropped by the daemon ("after_end"), and the workers' last
  messages travel on other connections than the end message, so this wait is
  what keeps them. When a worker fails, the run is not ended (SweepError).

Torch in each worker runs on `threads` threads (1 by default), so N workers
use N cores, and the values do not depend on how the checkpoints were dealt.
"""

import argparse
import importlib
import importlib.util
import json
import multiprocessing
import os
import queue as _queue
import random
import re
import sys
import time
import traceback
import warnings
import zlib

from .client import DEFAULT_CONTROL, DEFAULT_ENDPOINT, Client, default_control, default_endpoint

__all__ = ["sweep", "find_checkpoints", "order_checkpoints", "deal", "FileFactory",
           "load_probe_file", "SweepError", "main", "DEFAULT_CONTROL"]

STEP_RE = re.compile(r"step_(\d+)")
CHECKPOINT_RE = re.compile(r"^step_(\d+)\.(pt|pth)$")
ORDERS = ("asc", "desc", "shuffle")


class SweepError(RuntimeError):
    """A worker failed (an exception or a crash); the run was not ended.
    .stats holds what the sweep knows (the failed workers have "error")."""

    def __init__(self, msg, stats=None):
        super().__init__(msg)
        self.stats = stats


# ---------------------------------------------------------------- checkpoints

def _step_of(path):
    m = STEP_RE.search(os.path.basename(os.fspath(path)))
    if not m:
        raise ValueError("checkpoint %r: no step_NNN in its name (give (step, path) pairs "
                         "or a {step: path} mapping)" % (os.fspath(path),))
    return int(m.group(1))


def find_checkpoints(checkpoints):
    """The checkpoints as a list of (step, path), in step order.

    checkpoints: a directory (its files step_NNN.pt / step_NNN.pth), a list of
    files (the step parsed from `step_(\\d+)` in each name), a list of
    (step, path) pairs, or a {step: path} mapping. Raises ValueError on a
    step given twice, a negative step or nothing to sweep."""
    if isinstance(checkpoints, (str, bytes, os.PathLike)) and \
            os.path.isdir(os.fspath(checkpoints)):
        d = os.fspath(checkpoints)
        items = []
        for name in sorted(os.listdir(d)):
            m = CHECKPOINT_RE.match(name)
            if m and os.path.isfile(os.path.join(d, name)):
                items.append((int(m.group(1)), os.path.join(d, name)))
    elif isinstance(checkpoints, (str, bytes, os.PathLike)):
        raise ValueError("checkpoints: %r is not a directory" % (os.fspath(checkpoints),))
    elif hasattr(checkpoints, "items"):
        items = [(int(s), os.fspath(p)) for s, p in checkpoints.items()]
    else:
        items = []
        for c in checkpoints:
            if isinstance(c, (tuple, list)) and len(c) == 2:
                items.append((int(c[0]), os.fspath(c[1])))
            else:
                items.append((_step_of(c), os.fspath(c)))
    if not items:
        raise ValueError("checkpoints: none found")
    seen = {}
    for s, p in items:
        if s < 0:
            raise ValueError("checkpoint %r: step %d < 0" % (p, s))
        if s in seen:
            raise ValueError("step %d given twice (%r and %r)" % (s, seen[s], p))
        seen[s] = p
    return sorted(items)


def order_checkpoints(items, order="shuffle", seed=0):
    """items ((step, path) pairs) in the sweep's order: "asc" or "desc" by
    step, or "shuffle" (random.Random(seed), reproducible)."""
    items = sorted(items)
    if order == "asc":
        return items
    if order == "desc":
        return items[::-1]
    if order == "shuffle":
        random.Random(seed).shuffle(items)
        return items
    raise ValueError("order: %r, expected one of %s" % (order, ", ".join(ORDERS)))


def deal(items, workers):
    """Round-robin shares: worker i gets items[i::workers] (each in the
    order given). Empty shares are kept (more workers than checkpoints)."""
    return [list(items[i::workers]) for i in range(workers)]


# ---------------------------------------------------------------- model and probe

def _torch_load(path, map_location="cpu"):
    import torch
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except TypeError:       # a torch without weights_only
        return torch.load(path, map_location=map_location)


def load_probe_file(path):
    """The probe file of train_tiny_gpt.py --save-every (DIR/probe.pt, or the
    path of the file), as one dict: probe (the batch) and the keys of its
    JSON "meta": hparams, factory_file, factory, model, params, layers, heads,
    sink, capture, causal, query_positions, cast, rowstats. A directory
    means its probe.pt. Read with torch.load(weights_only=True)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "probe.pt")
    saved = _torch_load(path)
    if not isinstance(saved, dict) or "probe" not in saved or \
            not isinstance(saved.get("meta"), str):
        raise ValueError("%s: not a sweep probe file (a dict with probe and meta)" % path)
    meta = json.loads(saved["meta"])
    if not isinstance(meta, dict) or "hparams" not in meta:
        raise ValueError("%s: its meta has no hparams" % path)
    meta["probe"] = saved["probe"]
    return meta


class FileFactory:
    """A picklable model factory: calls func(hparams) from a Python file (a
    path ending in .py) or an importable module, imported lazily in the
    process that calls it (so it works with the spawn start method).

        FileFactory("contrib/examples/train_tiny_gpt.py", "build_model",
                    {"layers": 2, "heads": 4, "d": 64, "context": 64, "dropout": 0.1})()
    """

    def __init__(self, source, func, hparams=None):
        self.source = os.path.abspath(source) if str(source).endswith(".py") else str(source)
        self.func = str(func)
        self.hparams = dict(hparams or {})

    def _function(self):
        if self.source.endswith(".py"):
            name = "sinkwatch_sweep_factory_%08x" % zlib.crc32(self.source.encode())
            mod = sys.modules.get(name)
            if mod is None:
                spec = importlib.util.spec_from_file_location(name, self.source)
                if spec is None or spec.loader is None:
                    raise ImportError("cannot import %s" % self.source)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                try:
                    spec.loader.exec_module(mod)
                except BaseException:
                    sys.modules.pop(name, None)
                    raise
        else:
            mod = importlib.import_module(self.source)
        return getattr(mod, self.func)

    def __call__(self):
        return self._function()(dict(self.hparams))

    def __repr__(self):
        return "FileFactory(%r, %r, %r)" % (self.source, self.func, self.hparams)


def _infer_shape(model, layers, heads, capture):
    """layers and heads of the model (MultiheadAttention modules) when not given."""
    if layers is not None and heads is not None:
        return int(layers), int(heads)
    if capture != "mha":
        raise ValueError("layers and heads are needed unless capture='mha'")
    import torch
    mods = [m for m in model.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    if not mods:
        raise ValueError("no torch.nn.MultiheadAttention in the model: give layers and heads")
    return (int(layers) if layers is not None else len(mods),
            int(heads) if heads is not None else int(mods[0].num_heads))


def _load_weights(model, path, device):
    sd = _torch_load(path, map_location=device)
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]
    model.load_state_dict(sd)


# ---------------------------------------------------------------- workers

def _run_share(wid, share, build_model, probe_batch, run, endpoint, layers, heads,
               probe_kw, client_kw, device, threads):
    """One worker's part: its own model, Client and AttentionProbe; probes
    each (step, path) of the share in order. Returns the worker's stats."""
    import torch
    from .torch import AttentionProbe
    if threads:
        torch.set_num_threads(int(threads))
    t0 = time.time()
    st = {"worker": wid, "pid": os.getpid(), "steps": [s for s, _ in share], "sent": 0,
          "dropped": 0, "probes": 0, "probe_errors": 0, "send_false": 0, "last_error": None,
          "seconds": 0.0}
    if not share:
        return st
    model = build_model()
    if device is not None:
        model = model.to(device)
    model.eval()
    batch = probe_batch
    if device is not None and hasattr(batch, "to"):
        batch = batch.to(device)
    layers, heads = _infer_shape(model, layers, heads, probe_kw.get("capture", "mha"))
    kw = dict(client_kw)
    kw.setdefault("params", sum(p.numel() for p in model.parameters()))
    kw.setdefault("linger", 30.0)
    client = Client(run, layers, heads, endpoint=endpoint, fixed_probe=True, blocking=True,
                    **kw)
    try:
        probe = AttentionProbe(model, batch, client, every=0, **probe_kw)
        for step, path in share:
            _load_weights(model, path, device or "cpu")
            probe.probe(step)
        pst = probe.stats
        st["probes"], st["probe_errors"] = pst["probes"], pst["errors"]
        st["send_false"], st["last_error"] = pst["send_false"], pst["last_error"]
        client.flush(client.linger)
    finally:
        client.close()
    cst = client.stats
    st["sent"], st["dropped"] = cst["sent"], cst["dropped"]
    if st["last_error"] is None and client.last_error:
        st["last_error"] = client.last_error
    st["seconds"] = time.time() - t0
    return st


def _worker_main(q, args):
    try:
        st = _run_share(*args)
        q.put(("ok", args[0], st))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put(("error", args[0], "%s: %s\n%s" % (type(e).__name__, e,
                                                  traceback.format_exc())))


def _collect(procs, q, n):
    """The results of n workers; a worker that died without one is an error."""
    got = {}
    while len(got) < n:
        try:
            kind, wid, val = q.get(timeout=0.2)
            got[wid] = (kind, val)
            continue
        except _queue.Empty:
            pass
        for wid, p in enumerate(procs):
            if wid not in got and p.exitcode is not None:
                try:                        # its result may still be in the pipe
                    kind, w2, val = q.get(timeout=1.0)
                    got[w2] = (kind, val)
                except _queue.Empty:
                    got[wid] = ("error", "worker %d (pid %s) exited with code %s and no "
                                "result" % (wid, p.pid, p.exitcode))
    return got


# ---------------------------------------------------------------- the daemon side

def _run_messages(control, run, timeout_ms=1000):
    """messages= of the run in the daemon's status, or None (not listed, or
    no answer)."""
    import zmq
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    s.setsockopt(zmq.SNDTIMEO, timeout_ms)
    try:
        from .client import curve_keys     # a daemon with CURVE: the environment's keys
        keys = curve_keys()
        if keys is not None:
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = keys
        s.connect(control)
        s.send(b"status")
        text = s.recv().decode("utf-8", "replace")
    except (zmq.ZMQError, ValueError):
        return None
    finally:
        s.close()
    prefix = "run: %s model=" % run
    for line in text.splitlines():
        if line.startswith(prefix):
            m = re.search(r" messages=(\d+)", line[len(prefix):])
            if m:
                return int(m.group(1))
    return -1       # the daemon answered; the run is not open there


def _wait_received(control, run, want, timeout):
    """Polls the control socket until the daemon counts at least `want`
    messages of the run. (received, True) when it does, (last count, False)
    at the timeout (-1: the run is not open there), (None, None) when the
    control socket does not answer the first request (within a second)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        n = _run_messages(control, run)
        if n is None and last is None:
            return None, None
        if n is not None:
            last = n
            if n >= want:
                return n, True
        if time.monotonic() >= deadline:
            return last, False
        time.sleep(0.05)


def _end_run(run, endpoint, layers, heads, client_kw):
    kw = {k: v for k, v in client_kw.items() if k not in ("model", "params")}
    kw.setdefault("linger", 30.0)
    c = Client(run, layers, heads, endpoint=endpoint, fixed_probe=True, blocking=True, **kw)
    try:
        ok = c.end()
        left = c.flush(c.linger)
    finally:
        c.close()
    st = c.stats
    return bool(ok) and left == 0 and st["dropped"] == 0


# ---------------------------------------------------------------- API

def sweep(checkpoints, build_model, probe_batch, run, endpoint=None,
          workers=3, order="shuffle", seed=0, layers=None, heads=None,
          capture="mha", query_positions=None, cast=None, rowstats=False, causal=True,
          sink=0, control=None, settle=1.0, settle_timeout=60.0, end=True,
          threads=1, device=None, start_method="spawn", **client_kwargs):
    """Streams the probe attention of every checkpoint to sinkwatchd as run `run`.

    checkpoints: a directory, a list of files (step from `step_NNN` in the
        name), (step, path) pairs or a {step: path} mapping (find_checkpoints).
    build_model: a callable with no argument that returns the model (a fresh
        torch.nn.Module whose load_state_dict takes the checkpoints); with
        workers > 0 and the spawn start method it must be picklable (a
        module-level function, functools.partial, or FileFactory).
    probe_batch: what the model is called with (AttentionProbe's probe_batch).
    endpoint: the daemon's listen endpoint (None: $SINKWATCH_ENDPOINT, else
        DEFAULT_ENDPOINT). workers: worker processes (0: in
        this process, no multiprocessing). order / seed: "asc", "desc" or
        "shuffle" (seeded); worker i takes items i, i+N, ... of that order.
    layers, heads: the model's (default: counted from its
        MultiheadAttention modules). capture, query_positions, cast, rowstats,
        causal, sink: AttentionProbe's options.
    control: the daemon's control endpoint; when given, the run is ended only
        once the daemon counts every message the workers sent (waiting at most
        settle_timeout seconds); without it (or when it does not answer) the
        parent waits `settle` seconds before the end. end=False: do not end.
    threads: torch threads per worker (None: leave torch's setting). device:
        where the model and the batch go (default: the CPU).
    start_method: "spawn" (default), "fork" or "forkserver".
    client_kwargs: more sinkwatch.Client options for the workers (model,
        params, block_timeout, linger, queue_max, ...); blocking=True and
        fixed_probe=True are always set. params defaults to the model's
        parameter count.

    Returns a dict: workers (per worker: worker, pid, steps, sent, dropped,
    probes, probe_errors, send_false, last_error, seconds), checkpoints, sent,
    dropped and probe_errors (totals), ended (the end message was sent),
    received (the daemon's count for the run when control answered, else None)
    and confirmed (True: the daemon had every message before the end; False:
    not within settle_timeout; None: not asked). Raises SweepError when a
    worker fails (the run is then not ended), ValueError on bad arguments.
    """
    for k in ("blocking", "fixed_probe"):
        if k in client_kwargs:
            raise ValueError("%s is always True in a sweep" % k)
    items = order_checkpoints(find_checkpoints(checkpoints), order, seed)
    nw = int(workers)
    if nw < 0:
        raise ValueError("workers: %d < 0" % nw)
    probe_kw = {"capture": capture, "query_positions": query_positions, "cast": cast,
                "rowstats": rowstats, "causal": causal, "sink": sink}
    if layers is None or heads is None:
        layers, heads = _infer_shape(build_model(), layers, heads, capture)
    endpoint = endpoint or default_endpoint()
    common = (build_model, probe_batch, run, endpoint, layers, heads, probe_kw,
              dict(client_kwargs), device)
    results = {}
    if nw == 0:
        st = _run_share(0, items, *common, None)
        results[0] = ("ok", st)
        shares = [items]
    else:
        shares = deal(items, nw)
        ctx = multiprocessing.get_context(start_method)
        q = ctx.Queue()
        procs = [ctx.Process(target=_worker_main, name="sinkwatch-sweep-%d" % i,
                             args=(q, (i, shares[i]) + common + (threads,)))
                 for i in range(nw)]
        try:
            for p in procs:
                p.start()
            results = _collect(procs, q, nw)
            for p in procs:
                p.join()
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join()
    stats = {"run": run, "checkpoints": len(items), "workers": [], "sent": 0, "dropped": 0,
             "probe_errors": 0, "ended": False, "received": None, "confirmed": None}
    failed = []
    for wid in range(len(shares)):
        kind, val = results[wid]
        if kind == "ok":
            stats["workers"].append(val)
            for k in ("sent", "dropped", "probe_errors"):
                stats[k] += val[k]
        else:
            failed.append("worker %d: %s" % (wid, val))
            stats["workers"].append({"worker": wid, "steps": [s for s, _ in shares[wid]],
                                     "error": val})
    if failed:
        raise SweepError("sinkwatch sweep of run %r failed; the run was not ended:\n%s"
                         % (run, "\n".join(failed)), stats)
    if not end:
        return stats
    if control:
        n, ok = _wait_received(control, run, stats["sent"], settle_timeout)
        stats["received"], stats["confirmed"] = n, ok
        if ok is None:
            time.sleep(settle)
        elif not ok:
            warnings.warn("sinkwatch sweep: the daemon counts %s of the %d messages of run "
                          "%r after %g s; ending it anyway" % (n, stats["sent"], run,
                                                               settle_timeout),
                          RuntimeWarning, stacklevel=2)
    elif settle:
        time.sleep(settle)
    stats["ended"] = _end_run(run, endpoint, layers, heads, client_kwargs)
    return stats


# ---------------------------------------------------------------- command line

def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python3 -m sinkwatch.sweep",
        description="Stream the probe attention of saved checkpoints (a directory written "
        "by train_tiny_gpt.py --save-every K --checkpoint-dir DIR) to sinkwatchd, with "
        "several worker processes, steps in any order; the run is ended once.")
    p.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                   help="step_NNN.pt state_dicts and probe.pt")
    p.add_argument("--run", required=True, help="run id")
    p.add_argument("--endpoint", default=None,
                   help="sinkwatchd listen endpoint (default $SINKWATCH_ENDPOINT, else %s)"
                   % DEFAULT_ENDPOINT)
    p.add_argument("--control", default=None,
                   help="sinkwatchd control endpoint, asked whether every message arrived "
                   "before the end is sent ('' : do not ask, wait --settle seconds; "
                   "default $SINKWATCH_CONTROL, else %s)" % DEFAULT_CONTROL)
    p.add_argument("--workers", type=int, default=3, help="worker processes (0: in process)")
    p.add_argument("--order", choices=ORDERS, default="shuffle")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--start-method", choices=("spawn", "fork", "forkserver"), default="spawn")
    p.add_argument("--probe", metavar="FILE", default=None,
                   help="the probe file (default DIR/probe.pt)")
    p.add_argument("--factory", metavar="FILE.py:FUNC", default=None,
                   help="build the model with FUNC(hparams) of this file or module "
                   "(default: the one probe.pt names)")
    p.add_argument("--block-timeout", type=float, default=None,
                   help="seconds a send may wait for the daemon before it drops "
                   "(default: forever)")
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds to wait before the end when the control socket does not "
                   "answer")
    p.add_argument("--no-end", action="store_true", help="do not end the run")
    p.add_argument("--json", action="store_true", help="print the stats as JSON")
    return p.parse_args(argv)


def main(argv=None):
    """The command line; exit status 0 when every message was sent and the
    run was ended, 1 on drops, probe errors or a failed worker."""
    a = _parse(argv)
    meta = load_probe_file(a.probe or a.checkpoint_dir)
    if a.factory:
        src, _, func = a.factory.rpartition(":")
        if not src or not func:
            raise SystemExit("--factory: expected FILE.py:FUNC or MODULE:FUNC")
        factory = FileFactory(src, func, meta["hparams"])
    else:
        factory = FileFactory(meta["factory_file"], meta.get("factory", "build_model"),
                              meta["hparams"])
    client_kw = {"model": meta.get("model") or "", "block_timeout": a.block_timeout}
    if meta.get("params"):
        client_kw["params"] = int(meta["params"])
    try:
        st = sweep(a.checkpoint_dir, factory, meta["probe"], a.run, endpoint=a.endpoint,
                   workers=a.workers, order=a.order, seed=a.seed,
                   layers=meta.get("layers"), heads=meta.get("heads"),
                   capture=meta.get("capture", "mha"),
                   query_positions=meta.get("query_positions"), cast=meta.get("cast"),
                   rowstats=bool(meta.get("rowstats")), causal=meta.get("causal", True),
                   sink=int(meta.get("sink", 0)),
                   control=(default_control() if a.control is None else a.control) or None,
                   settle=a.settle, end=not a.no_end, threads=a.threads,
                   start_method=a.start_method, **client_kw)
    except SweepError as e:
        print(str(e), file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(st, indent=1, sort_keys=True))
    else:
        for w in st["workers"]:
            print("worker %d: %d checkpoints (steps %s), sent %d, dropped %d, probe errors "
                  "%d, %.1f s" % (w["worker"], len(w["steps"]),
                                  ",".join(str(s) for s in w["steps"]) or "-", w["sent"],
                                  w["dropped"], w["probe_errors"], w["seconds"]))
        print("run %s: %d checkpoints, %d messages sent, %d dropped, daemon received %s, "
              "%s" % (a.run, st["checkpoints"], st["sent"], st["dropped"],
                      "?" if st["received"] is None else st["received"],
                      "ended" if st["ended"] else "not ended"))
    ok = st["dropped"] == 0 and st["probe_errors"] == 0 and (st["ended"] or a.no_end) \
        and st["confirmed"] is not False
    return 0 if ok else 1


if __name__ == "__main__":
    # run as the module sinkwatch.sweep (not __main__), so that the spawn
    # start method finds the worker function by its importable name
    from sinkwatch.sweep import main as _main
    sys.exit(_main())
