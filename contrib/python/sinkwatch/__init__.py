"""sinkwatch: stream attention snapshots from a training job to sinkwatchd.

    from sinkwatch import Client
    with Client("pythia-160m/seed1", layers=12, heads=12) as c:
        c.send(step, layer, probs)          # numpy [heads, rows, keys]
        c.end()

Wire format: proto/PROTOCOL.md (sinkwatch.proto implements it in Python).
"""
from . import proto
from .client import DEFAULT_ENDPOINT, ClosedError, Client, SinkwatchWarning
from .proto import (ProtocolError, decode_header, decode_message, encode_header, errors,
                    parse_golden, topic)

__version__ = "0.1.0"

__all__ = ["Client", "ClosedError", "SinkwatchWarning", "ProtocolError", "DEFAULT_ENDPOINT",
           "encode_header", "decode_header", "decode_message", "parse_golden", "topic",
           "errors", "proto", "__version__"]
