"""sinkwatch: stream attention snapshots from a training job to sinkwatchd.

    from sinkwatch import Client
    with Client("pythia-160m/seed1", layers=12, heads=12) as c:
        c.send(step, layer, probs)          # numpy [heads, rows, keys]
        c.end()

Several processes of one distributed job send one run together:
Client(..., rank=r, senders=N, incarnation=shared) and send(..., head0=,
row0=, rows=) for the part of a layer a rank holds;
sinkwatch.torch.distributed_client() fills rank, senders and the shared
incarnation from torch.distributed.

Reading runs back (the numbers of `sinkwatch report`, from its C library):

    run = sinkwatch.open_run("data/tiny.h5")
    run.report(per_head=True)["model_attribution"]["path"]
    run["sink_mass"]                        # [step, layer, head]

Wire format: proto/PROTOCOL.md (sinkwatch.proto implements it in Python).
"""
from . import proto
from .client import (DEFAULT_CONTROL, DEFAULT_ENDPOINT, ClosedError, Client, SinkwatchWarning,
                     curve_keys, default_control, default_endpoint, read_key)
from ._version import __version__
from .reader import ReaderError, Run, Runs, open_run, open_runs
from .proto import (ProtocolError, decode_header, decode_message, encode_header, errors,
                    parse_golden, topic)

__all__ = ["Client", "ClosedError", "SinkwatchWarning", "ProtocolError", "DEFAULT_ENDPOINT",
           "DEFAULT_CONTROL", "default_endpoint", "default_control",
           "encode_header", "decode_header", "decode_message", "parse_golden", "topic",
           "errors", "proto", "curve_keys", "read_key", "__version__",
           "open_run", "open_runs", "Run", "Runs", "ReaderError"]
