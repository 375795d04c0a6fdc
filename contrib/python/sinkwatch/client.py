"""The training-job side of sinkwatch in Python: the behaviour of the C client
(client/client.c, sinkwatch/client.h) with pyzmq.

The socket is an XPUB that connects to the daemon's SUB. ZeroMQ's PUB drops
silently what is sent before a subscription arrives (the slow joiner), so
the client reads the subscription messages its XPUB gets, knows whether a
daemon is listening, and keeps messages in its own bounded queue until one
is. ZMQ_XPUB_NODROP turns a full ZeroMQ queue into EAGAIN, so every drop is
seen and counted instead of vanishing. The subscription arrives milliseconds
after the connection, while a probe of a deep model is one message per layer
sent at once: the queue holds QUEUE_MAX (256) messages by default, bounded
in bytes by queue_max_bytes (256 MiB), so such a burst is kept whole.

Every Client is an incarnation of its run: it picks `incarnation` (the wall
clock in microseconds times 4096 plus 12 random bits, never 0; later clients
compare greater) and every message carries it (header key "inc"). A job that
restarts from a checkpoint at step S passes resume_from=S: its messages carry
"resume", and the daemon supersedes earlier incarnations' steps after S.

Several processes of one job (a distributed training job: pipeline stages,
tensor-parallel ranks) may send one run together (protocol version 2,
PROTOCOL.md 7b): each is a Client with rank=r, senders=N and the same
incarnation (sinkwatch.torch.shared_incarnation() or
sinkwatch.torch.distributed_client() agree on one over torch.distributed).
Each sends the layers, heads (head0) and rows (row0, rows) it holds; the
daemon puts the parts of a layer together, counts loss per sender, and ends
the run when every sender has sent its end(). A single sender of whole
layers (senders=1, the default) sends what version 1 says, byte for byte.

Contract: send() never waits (unless blocking=True) and never raises because
the daemon is away or a queue is full; it returns False and counts the drop
(one warning per client, then only the counters). A run that reaches no
daemon often drops nothing while it runs (its messages wait in the queue):
close() gives them up, and warns once, naming the endpoint and the counts,
whenever a message was not delivered (SinkwatchWarning, never raised into
the caller even with warnings as errors). Bad arguments raise
ValueError. A Client is used by one thread at a time (calls are serialized
by a lock, so a hook called from another thread is safe, but not faster).
"""

import collections
import math
import os
import random
import struct
import threading
import time
import warnings

import numpy as np
import zmq

from . import proto

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5710"     # sinkwatchd's default listen endpoint
DEFAULT_CONTROL = "tcp://127.0.0.1:5711"      # sinkwatchd's default control endpoint
ENV_ENDPOINT = "SINKWATCH_ENDPOINT"           # where clients send, for every client and tool
ENV_CONTROL = "SINKWATCH_CONTROL"             # the daemon's control endpoint, likewise


def default_endpoint():
    """Where a client sends when no endpoint is given: $SINKWATCH_ENDPOINT
    when set and not empty, else DEFAULT_ENDPOINT."""
    return os.environ.get(ENV_ENDPOINT) or DEFAULT_ENDPOINT


def default_control():
    """The daemon's control endpoint when none is given: $SINKWATCH_CONTROL
    when set and not empty, else DEFAULT_CONTROL."""
    return os.environ.get(ENV_CONTROL) or DEFAULT_CONTROL

_KIND_NAMES = proto.KINDS
_NP_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
              np.dtype(np.float64): "f64"}
_WANT = {"f32": np.float32, "f16": np.float16, "f64": np.float64}
_INT_MAX_MS = (1 << 31) - 1
QUEUE_MAX = 256                 # default queue_max: 10 steps of a 24-layer model
QUEUE_MAX_BYTES = 256 << 20     # default queue_max_bytes: the bound on memory
BLOCK_TIMEOUT = 30.0            # default block_timeout, seconds
_ZMQ_HWM_MAX = 16               # ZeroMQ's own queue (SNDHWM), messages: kept short


def new_incarnation():
    """An incarnation number as the C client makes it: the wall clock in
    microseconds since the epoch times 4096 plus 12 random bits, never 0."""
    try:
        r = int.from_bytes(os.urandom(2), "little") & 0xFFF
    except (OSError, NotImplementedError):  # no entropy source: seeded from the clock
        r = random.Random(time.perf_counter_ns() ^ id(object())).getrandbits(12)
    return ((time.time_ns() // 1000) << 12 | r) or 1


class SinkwatchWarning(RuntimeWarning):
    """Messages are being dropped (no daemon subscribed, queue full, timeout)."""


class ClosedError(RuntimeError):
    """send() or end() after end(), or any call after close() (SW_ECLOSED)."""


def _ms(seconds, none=-1):
    if seconds is None:
        return none
    if seconds < 0:
        return -1
    return int(min(seconds * 1000.0, _INT_MAX_MS))


def _element_dtype(arr, dtype):
    """The wire dtype name of a numpy array, checking an explicit dtype."""
    dt = arr.dtype
    if dtype is None:
        if dt.name == "bfloat16" and dt.itemsize == 2:   # ml_dtypes.bfloat16
            return "bf16"
        name = _NP_DTYPES.get(dt.newbyteorder("=") if dt.byteorder not in "=|" else dt)
        if name is None:
            if dt.kind in "iu" and dt.itemsize == 2:
                raise ValueError("array: dtype %s needs dtype='bf16' (bfloat16 bits)" % dt)
            raise ValueError("array: dtype %s not supported (float32, float16, float64, "
                             "or uint16 with dtype='bf16')" % dt)
        return name
    if dtype not in proto.DTYPES:
        raise ValueError("dtype: %r, expected one of %s" % (dtype, ", ".join(proto.DTYPES)))
    if dtype == "bf16":
        if not (dt.itemsize == 2 and (dt.kind in "iu" or dt.name == "bfloat16")):
            raise ValueError("dtype 'bf16' needs a uint16 (or int16) array of bfloat16 "
                             "bits, got %s" % dt)
        return "bf16"
    if dt.kind != "f" or dt.itemsize != np.dtype(_WANT[dtype]).itemsize:
        raise ValueError("dtype %r does not match the array's %s" % (dtype, dt))
    return dtype


_Z85 = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                 ".-:+=^!/*?&<>()[]{}@%$#")


def _key_valid(s):
    return isinstance(s, str) and len(s) == 40 and all(c in _Z85 for c in s)


def read_key(path, secret=False):
    """The first key of a key file as sinkwatch keygen writes it (the first
    word of a line; lines starting with '#' that are not a key are
    comments). secret: the file must not be readable by group or others.
    ValueError naming the file and what is wrong."""
    try:
        with open(path) as f:
            if secret and os.fstat(f.fileno()).st_mode & 0o077:
                raise ValueError("%s: a secret key readable by others (mode %04o): chmod 600 %s"
                                 % (path, os.fstat(f.fileno()).st_mode & 0o7777, path))
            for n, line in enumerate(f, 1):
                w = line.split()
                if not w or (w[0].startswith("#") and not _key_valid(w[0])):
                    continue
                if not _key_valid(w[0]):
                    raise ValueError("%s:%d: not a CURVE key (40 characters of Z85, as "
                                     "sinkwatch keygen writes)" % (path, n))
                return w[0]
    except OSError as e:
        raise ValueError("%s: %s" % (path, e.strerror)) from None
    raise ValueError("%s: no key in the file" % path)


def curve_keys(server_key=None, key_file=None):
    """(server public key, client public key, client secret key) for CURVE,
    or None: server_key is the daemon's public key (its 40 characters, or a
    file holding it), key_file this client's secret key file; None takes
    SINKWATCH_SERVER_KEY and SINKWATCH_CLIENT_KEY_FILE. Neither given: None
    (no CURVE); one alone or a bad key: ValueError."""
    if server_key is None:
        server_key = os.environ.get("SINKWATCH_SERVER_KEY") or None
    if key_file is None:
        key_file = os.environ.get("SINKWATCH_CLIENT_KEY_FILE") or None
    if server_key is None and key_file is None:
        return None
    if server_key is None or key_file is None:
        raise ValueError("CURVE needs both server_key and key_file (or SINKWATCH_SERVER_KEY "
                         "and SINKWATCH_CLIENT_KEY_FILE)")
    # a 40-character path may be all Z85 characters: a file of that name wins
    srv = server_key if _key_valid(server_key) and not os.path.exists(server_key) else None
    if srv is None:
        try:
            srv = read_key(server_key)
        except ValueError as e:
            raise ValueError("server_key: %r is neither a key (40 characters of Z85) nor a "
                             "file holding one (%s)" % (server_key, e)) from None
    sec = read_key(key_file, secret=True)
    return srv.encode(), zmq.curve_public(sec.encode()), sec.encode()


REFUSED_RETRY_S = 5.0   # a handshake the daemon refused is tried again this often
# the socket monitor's handshake failures (a CURVE refusal or mismatch)
_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                     zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)


class Client:
    """Streams attention snapshots of one run to sinkwatchd.

    run: run id (1..128 bytes, no control characters); layers, heads: the
    model's; endpoint: where the daemon listens (None or "": the environment's
    SINKWATCH_ENDPOINT, else DEFAULT_ENDPOINT; one given wins); model, params: name and parameter count ("" and 0 if unknown);
    sink: the sink key index; fixed_probe: every snapshot uses the same probe
    inputs. blocking: wait for a daemon (up to block_timeout seconds, default
    30; None or negative: forever) instead of queueing and dropping.
    queue_max / queue_max_bytes: the own queue's bounds while no daemon is
    subscribed or ZeroMQ's queue (min(queue_max, 16) messages) is full;
    default 256 messages and 256 MiB, whichever fills first. linger: close()
    waits at most this many seconds for queued messages. resume_from: the
    step of the checkpoint this job restarted from (None: not resuming).

    Several senders of one run (PROTOCOL.md 7b): senders is the number of
    processes that send this run in this incarnation (1..65536), rank this
    one (0..senders-1), and incarnation the number they all share (an int
    in 1..2^64-1). incarnation=None picks a new one (the wall clock, as
    always), which only a single sender may do: senders > 1 needs the shared
    incarnation, else ValueError. layers and heads are the whole model's in
    every sender; what each sender holds is said per message (send()'s
    head0, row0, rows). Every message carries rank and senders; on the wire
    they are written (protocol version 2) only when senders > 1.

    CURVE, for a daemon beyond loopback (sinkwatchd(8), SECURITY):
    server_key is the daemon's public key (40 characters of Z85, or a file
    holding it: sinkwatch keygen's BASE.pub) and key_file this client's
    secret key file (BASE.key, mode 0600); None takes SINKWATCH_SERVER_KEY
    and SINKWATCH_CLIENT_KEY_FILE from the environment; neither: no CURVE.
    A handshake the daemon refused (key not allowed: auth_status 400) or
    that failed otherwise (no keys against a CURVE daemon, another server
    key: -1) is counted in stats (auth_failures); the daemon counts its
    refusals too, which the sender cannot read.
    """

    def __init__(self, run, layers, heads, endpoint=None, model="", params=0,
                 sink=0, fixed_probe=True, blocking=False, block_timeout=BLOCK_TIMEOUT,
                 queue_max=QUEUE_MAX, queue_max_bytes=QUEUE_MAX_BYTES, linger=2.0,
                 resume_from=None, rank=0, senders=1, incarnation=None, server_key=None,
                 key_file=None):
        self._sock = None
        self._mon = None
        self._ctx = None
        self._closed = True     # until fully constructed: __del__ does nothing
        self._topic = proto.topic(run)      # ValueError (ProtocolError) on a bad run
        self._run = self._topic[len(proto.TOPIC_PREFIX):]
        model = "" if model is None else model
        mb = model.encode("utf-8") if isinstance(model, str) else bytes(model)
        if len(mb) > proto.MODEL_MAX:
            raise ValueError("model: %d bytes, limit %d" % (len(mb), proto.MODEL_MAX))
        if b"\0" in mb:
            raise ValueError("model: NUL byte")
        for name, v, lo, hi in (("layers", layers, 1, proto.LAYERS_MAX),
                                ("heads", heads, 1, proto.HEADS_MAX),
                                ("params", params, 0, (1 << 64) - 1),
                                ("sink", sink, 0, (1 << 32) - 1)):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise ValueError("%s: not an integer (%r)" % (name, v))
            if not lo <= v.__index__() <= hi:
                raise ValueError("%s: %d, not in %d..%d" % (name, v, lo, hi))
        self._resume = self._check_resume(resume_from)
        for name, v in (("senders", senders), ("rank", rank)):
            if isinstance(v, bool) or not hasattr(v, "__index__"):
                raise ValueError("%s: not an integer (%r)" % (name, v))
        senders, rank = senders.__index__(), rank.__index__()
        if not 1 <= senders <= proto.SENDERS_MAX:
            raise ValueError("senders: %d, not in 1..%d" % (senders, proto.SENDERS_MAX))
        if not 0 <= rank < senders:
            raise ValueError("rank: %d, not in 0..%d (senders %d)" % (rank, senders - 1,
                                                                       senders))
        if incarnation is None:
            if senders > 1:
                raise ValueError("senders %d: the senders of one job share one incarnation; "
                                 "pass incarnation= (the same int on every rank: "
                                 "sinkwatch.torch.shared_incarnation(), or build the "
                                 "client with sinkwatch.torch.distributed_client())" % senders)
        elif isinstance(incarnation, bool) or not hasattr(incarnation, "__index__") or \
                not 1 <= incarnation.__index__() < (1 << 64):
            raise ValueError("incarnation: %r, not an int in 1..2^64-1" % (incarnation,))
        self.rank, self.senders = rank, senders
        self._model = mb
        self.layers, self.heads = int(layers), int(heads)
        self.params, self.sink = int(params), int(sink)
        self.fixed_probe = bool(fixed_probe)
        self.run = run
        endpoint = endpoint or default_endpoint()
        self.endpoint = endpoint
        self.blocking = bool(blocking)
        self.block_timeout = block_timeout
        self.queue_max = max(1, int(queue_max))
        self.queue_max_bytes = int(queue_max_bytes)
        self.linger = max(0.0, float(linger))
        self._block_ms = _ms(block_timeout)
        self._clock = time.time          # the header's time (tests may replace it)
        self._lock = threading.RLock()
        self._pending = collections.deque()     # (header, tensor Frame or None, bytes)
        self._pending_bytes = 0
        self._nsubs = 0
        self._seq = 0
        self._ended = False
        self._sent = self._dropped = self._bytes_sent = 0
        self._warned = False
        self.last_error = ""
        self._inc = new_incarnation() if incarnation is None else incarnation.__index__()
        self._auth_failures, self._auth_status = 0, 0
        self._refused_at = None     # a handshake refused (400): when (monotonic)
        self._mon_polled = 0.0
        keys = curve_keys(server_key, key_file)

        ctx = zmq.Context(io_threads=1)     # its own, never the global instance
        sock = mon = None
        try:
            sock = ctx.socket(zmq.XPUB)
            # ZMQ_IMMEDIATE: no pipe to a daemon that is not connected, so when
            # the daemon goes away its subscription is withdrawn and the
            # client queues (and counts) instead of filling a dead pipe.
            sock.setsockopt(zmq.XPUB_NODROP, 1)
            sock.setsockopt(zmq.XPUB_VERBOSER, 1)
            sock.setsockopt(zmq.SNDHWM, min(self.queue_max, _ZMQ_HWM_MAX))
            sock.setsockopt(zmq.LINGER, _ms(self.linger))
            sock.setsockopt(zmq.SNDTIMEO, self._block_ms if self.blocking else 0)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
            if keys is not None:
                sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys
            mon = sock.get_monitor_socket(_HANDSHAKE_FAILED)
            try:
                sock.connect(endpoint)
            except zmq.ZMQError as e:
                raise ValueError("endpoint %r: %s" % (endpoint, e)) from None
        except BaseException:
            if mon is not None:
                sock.disable_monitor()
                mon.close(linger=0)
            if sock is not None:
                sock.close(linger=0)
            ctx.term()
            raise
        self._ctx, self._sock, self._mon = ctx, sock, mon
        self._pid = os.getpid()
        self._closed = False

    # ------------------------------------------------------------ internals

    def _poll_monitor(self):
        """Counts the handshakes that failed (the socket monitor's events)."""
        # libzmq does not try a handshake refused with 400 again: connect again
        # every REFUSED_RETRY_S, so a key the daemon allows later (SIGHUP) gets in
        if self._refused_at is not None and \
                time.monotonic() - self._refused_at >= REFUSED_RETRY_S:
            self._refused_at = None
            try:
                self._sock.disconnect(self.endpoint)
            except zmq.ZMQError:
                pass
            try:
                self._sock.connect(self.endpoint)
            except zmq.ZMQError:
                pass
        while self._mon is not None:
            try:    # EVENTS first: cheaper than the exception of an empty recv
                if not self._mon.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    return
                ev = self._mon.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                return
            if len(ev[0]) >= 6:
                event, value = struct.unpack("<HI", ev[0][:6])
                if event & _HANDSHAKE_FAILED:
                    self._auth_failures += 1
                    self._auth_status = value if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH else -1
                    if self._auth_status == 400 and self._refused_at is None:
                        self._refused_at = time.monotonic()

    def _poll_subs(self):
        """Reads the subscription messages the XPUB has received (and the
        monitor's events, at most every 50 ms: a send stays cheap)."""
        now = time.monotonic()
        if now - self._mon_polled >= 0.05:
            self._mon_polled = now
            self._poll_monitor()
        sock, tp = self._sock, self._topic
        while True:
            try:
                m = sock.recv(zmq.NOBLOCK)
            except zmq.ZMQError:    # Again: nothing more; anything else: try later
                return
            if len(m) < 1 or len(m) - 1 > len(tp) or not tp.startswith(m[1:]):
                continue
            if m[0] == 1:
                self._nsubs += 1
            elif m[0] == 0 and self._nsubs > 0:
                self._nsubs -= 1

    def _send_now(self, hdr, frame, flags):
        """Hands one message to ZeroMQ; False if it did not take it (EAGAIN,
        timeout or another ZeroMQ error, never raised)."""
        sock = self._sock
        try:
            sock.send(self._topic, zmq.SNDMORE | flags)
        except zmq.ZMQError:
            return False
        # after the first frame ZeroMQ takes the rest of the message
        try:
            if frame is None:
                sock.send(hdr, 0)
            else:
                sock.send(hdr, zmq.SNDMORE)
                sock.send(frame, 0, copy=False)
        except zmq.ZMQError:
            return False
        return True

    def _flush_pending(self, flags):
        """Sends queued messages while a daemon listens and ZeroMQ takes them."""
        q = self._pending
        while q and self._nsubs > 0:
            hdr, frame, nbytes = q[0]
            if not self._send_now(hdr, frame, flags):
                return
            q.popleft()
            self._pending_bytes -= nbytes
            self._sent += 1
            self._bytes_sent += nbytes

    def _wait_ready(self, timeout_ms):
        """Waits up to timeout_ms (-1: forever) for a subscriber and an empty queue."""
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000.0
        while True:
            self._poll_subs()
            self._flush_pending(zmq.DONTWAIT)
            if self._nsubs > 0 and not self._pending:
                return True
            wait = 50
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait = min(wait, max(1, int(math.ceil(left * 1000))))
            try:
                self._sock.poll(wait, zmq.POLLIN)
            except zmq.ZMQError:
                time.sleep(wait / 1000.0)

    @staticmethod
    def _warn(text, stacklevel):
        try:
            warnings.warn(text, SinkwatchWarning, stacklevel=stacklevel + 1)
        except Exception:   # noqa: BLE001 - warnings as errors must not reach the loop
            pass

    def _drop(self, why):
        self._dropped += 1
        self.last_error = "dropped message %d: %s" % (self._seq - 1, why)
        if not self._warned:
            self._warned = True
            self._warn("sinkwatch: run %r to %s: %s (%d dropped, %d sent, %d queued so "
                       "far); further drops are only counted (Client.stats), close() "
                       "warns with the totals" % (self.run, self.endpoint, self.last_error,
                                                  self._dropped, self._sent,
                                                  len(self._pending)), 4)
        return False

    def _warn_undelivered(self, given_up, linger):
        """close(): one warning when anything was not delivered."""
        if not self._dropped:
            return
        total = self._sent + self._dropped
        why = [] if self._nsubs > 0 else ["no daemon subscribed"]
        if given_up:
            why.append("%d still queued when close() gave up after the %.3g s linger"
                       % (given_up, linger))
        if self._dropped > given_up:
            why.append("%d dropped before" % (self._dropped - given_up))
        self._warn("sinkwatch: run %r to %s: %d of %d messages not delivered (%s); "
                   "%d sent" % (self.run, self.endpoint, self._dropped, total,
                                "; ".join(why), self._sent), 3)

    def _dispatch(self, hdr, frame, nbytes):
        """Sends or queues the message; True, or False when dropped (counted)."""
        try:
            self._poll_subs()
            self._flush_pending(zmq.DONTWAIT)
            if self.blocking:
                if self._wait_ready(self._block_ms) and self._send_now(hdr, frame, 0):
                    self._sent += 1
                    self._bytes_sent += nbytes
                    return True
                return self._drop("blocking send timed out after %d ms" % self._block_ms)
            if not self._pending and self._nsubs > 0 and \
                    self._send_now(hdr, frame, zmq.DONTWAIT):
                self._sent += 1
                self._bytes_sent += nbytes
                return True
            # no daemon yet, or ZeroMQ's queue is full: queue it if there is room
            if len(self._pending) < self.queue_max and \
                    self._pending_bytes + nbytes <= self.queue_max_bytes:
                self._pending.append((hdr, frame, nbytes))
                self._pending_bytes += nbytes
                return True
            return self._drop("queue full" if self._nsubs else "no daemon subscribed")
        except Exception as e:  # noqa: BLE001 - never into the training loop
            return self._drop("%s: %s" % (type(e).__name__, e))

    def _check_open(self):
        if self._closed:
            raise ClosedError("sinkwatch: the client was closed")
        if os.getpid() != self._pid:
            raise ClosedError("sinkwatch: the client belongs to process %d (this is a "
                              "forked child); create a Client in this process" % self._pid)

    def _header(self, fields):
        fields["run"] = self._run
        fields["seq"] = self._seq
        t = self._clock()
        fields["time"] = t if t is not None and math.isfinite(t) else None
        fields["inc"] = self._inc
        fields["resume"] = self._resume
        fields["rank"] = self.rank          # written only when senders > 1
        fields["senders"] = self.senders
        return proto.encode_header(fields)

    def _check_part(self, nheads, nrows, head0, row0, rows):
        """head0, row0, rows of a part of nheads x nrows, checked: ValueErrors
        that say which bound is broken."""
        for name, v in (("head0", head0), ("row0", row0), ("rows", rows)):
            if v is not None and (isinstance(v, bool) or not hasattr(v, "__index__")):
                raise ValueError("%s: not an integer (%r)" % (name, v))
        if head0 is None:
            if nheads != self.heads:
                raise ValueError("array: shape[0] %d, the model has %d heads (an array "
                                 "of some heads is a part: give head0, its first head)"
                                 % (nheads, self.heads))
            head0 = 0
        if row0 is None:
            row0 = 0
        head0, row0 = head0.__index__(), row0.__index__()
        rows = nrows if rows is None else rows.__index__()
        if nheads < 1:
            raise ValueError("array: shape[0] is 0, no heads")
        if not 0 <= head0 < self.heads:
            raise ValueError("head0: %d, not in 0..%d (the model has %d heads)"
                             % (head0, self.heads - 1, self.heads))
        if head0 + nheads > self.heads:
            if head0 == 0:
                raise ValueError("array: shape[0] %d, the model has %d heads"
                                 % (nheads, self.heads))
            raise ValueError("array: %d heads from head0 %d, the model has %d heads"
                             % (nheads, head0, self.heads))
        if not 1 <= rows <= proto.ROWS_MAX:
            raise ValueError("rows: %d, not in 1..%d" % (rows, proto.ROWS_MAX))
        if nrows < 1:
            raise ValueError("array: shape[1] is 0, no rows")
        if not 0 <= row0 < rows:
            raise ValueError("row0: %d, not in 0..%d (rows %d)" % (row0, rows - 1, rows))
        if row0 + nrows > rows:
            raise ValueError("array: %d rows from row0 %d, the probe has rows=%d"
                             % (nrows, row0, rows))
        return head0, row0, rows

    @staticmethod
    def _check_resume(v):
        if v is None:
            return None
        if isinstance(v, bool) or not hasattr(v, "__index__") or \
                not 0 <= v.__index__() < (1 << 63):
            raise ValueError("resume_from: %r, not a step in 0..2^63-1" % (v,))
        return v.__index__()

    # --------------------------------------------------------------- API

    def send(self, step, layer, array, kind="probs", qpos=None, dtype=None, head0=None, row0=0,
             rows=None):
        """Sends one layer's snapshot: array is [heads, rows, keys] float32,
        float16 or float64 (or uint16 bfloat16 bits with dtype="bf16"); kind
        "probs", "logits" or "rowstats" (keys == 6); qpos: None or one query
        position per row of the array. The data is copied once (the caller
        may reuse its buffer). True when sent or queued, False when dropped
        (counted).

        A part of the layer (several senders, PROTOCOL.md 7b): array holds
        heads head0 .. head0 + array.shape[0] - 1 of the model's heads and
        rows row0 .. row0 + array.shape[1] - 1 of the probe's `rows` rows
        (None: array.shape[1], the whole probe). head0=None (the default)
        says the array holds every head, so that an array of fewer heads is
        refused unless head0 is given (0 for a part that starts at head 0).
        Parts of one layer of one step must cover other heads or rows than
        each other (the daemon counts an overlap); qpos gives the positions
        of the part's rows."""
        with self._lock:
            self._check_open()
            if self._ended:
                raise ClosedError("sinkwatch: the run was ended")
            if kind not in _KIND_NAMES:
                raise ValueError("kind: %r, expected probs, logits or rowstats" % (kind,))
            if not isinstance(array, np.ndarray):
                array = np.asarray(array)
            name = _element_dtype(array, dtype)
            if array.ndim != 3:
                raise ValueError("array: shape %s, expected [heads, rows, keys]"
                                 % (array.shape,))
            nheads, nrows, keys = array.shape
            head0, row0, rows = self._check_part(nheads, nrows, head0, row0, rows)
            if keys < 1:
                raise ValueError("array: shape %s, no keys" % (array.shape,))
            if kind == "rowstats" and keys != proto.ROWSTATS_FIELDS:
                raise ValueError("array: rowstats needs keys == %d, got %d"
                                 % (proto.ROWSTATS_FIELDS, keys))
            if isinstance(layer, bool) or not hasattr(layer, "__index__") or \
                    not 0 <= layer.__index__() < self.layers:
                raise ValueError("layer: %r, not in 0..%d" % (layer, self.layers - 1))
            if isinstance(step, bool) or not hasattr(step, "__index__"):
                raise ValueError("step: not an integer (%r)" % (step,))
            if array.dtype.byteorder == ">":
                array = array.astype(array.dtype.newbyteorder("<"))
            array = np.ascontiguousarray(array)
            nbytes = array.nbytes
            fields = {"type": "snapshot", "model": self._model, "params": self.params,
                      "layers": self.layers, "heads": self.heads, "sink": self.sink,
                      "fixed_probe": self.fixed_probe, "step": step.__index__(),
                      "layer": layer.__index__(), "kind": kind, "dtype": name,
                      "shape": (nheads, nrows, keys), "qpos": qpos, "tensor_bytes": nbytes,
                      "head0": head0, "row0": row0, "rows": rows}
            hdr = self._header(fields)      # ProtocolError (a ValueError) if invalid
            # one copy, into a ZeroMQ message that can be queued and retried
            frame = zmq.Frame(array.reshape(-1).view(np.uint8), copy=True)
            self._seq += 1
            return self._dispatch(hdr, frame, nbytes)

    def end(self):
        """Sends the run-end message (seq = number of messages before it);
        later sends raise ClosedError. True when sent or queued. With
        several senders each sends its own end (it carries rank and
        senders); the run ends when all of them have."""
        with self._lock:
            self._check_open()
            if self._ended:
                raise ClosedError("sinkwatch: the run was already ended")
            hdr = self._header({"type": "end"})
            self._ended = True
            self._seq += 1
            return self._dispatch(hdr, None, 0)

    def flush(self, timeout=0.0):
        """Pushes queued messages to the daemon, waiting at most timeout
        seconds (0: just try). Returns the number still queued."""
        with self._lock:
            if self._closed or os.getpid() != self._pid:
                return len(self._pending)
            deadline = time.monotonic() + max(0.0, float(timeout or 0.0))
            while True:
                try:
                    self._poll_subs()
                    self._flush_pending(zmq.DONTWAIT)
                except Exception:   # noqa: BLE001
                    pass
                left = deadline - time.monotonic()
                if not self._pending or left <= 0:
                    return len(self._pending)
                try:
                    self._sock.poll(max(1, min(20, int(math.ceil(left * 1000)))), zmq.POLLIN)
                except zmq.ZMQError:
                    time.sleep(0.005)

    @property
    def incarnation(self):
        """This client's incarnation (header key "inc"), never 0."""
        return self._inc

    @property
    def resume_from(self):
        """The checkpoint step this client resumes from, or None."""
        return self._resume

    @resume_from.setter
    def resume_from(self, step):
        """Settable until the first message is made: every message of an
        incarnation carries the same value."""
        with self._lock:
            v = self._check_resume(step)
            if self._seq != 0 and v != self._resume:
                raise ValueError("resume_from: the client has sent messages already; "
                                 "set it before the first one (or at construction)")
            self._resume = v

    @property
    def stats(self):
        """dict(sent, dropped, queued, bytes_sent, next_seq, subscribed,
        auth_failures, auth_status); bytes_sent counts tensor bytes, as the
        C client does; auth_failures the handshakes with the daemon that
        failed, auth_status the last one's ZAP status (400: the daemon
        refused the key; -1: the security did not match; 0: none). After
        close() the final counters: dropped includes what the linger left
        queued."""
        if not self._closed:
            with self._lock:
                self._poll_monitor()
        return {"sent": self._sent, "dropped": self._dropped, "queued": len(self._pending),
                "bytes_sent": self._bytes_sent, "next_seq": self._seq,
                "subscribed": self._nsubs > 0, "auth_failures": self._auth_failures,
                "auth_status": self._auth_status}

    @property
    def closed(self):
        return self._closed

    def close(self):
        """Sends what is queued for at most linger seconds, counts the rest
        as dropped, and closes the socket and the context (bounded linger).
        Returns the final stats (as stats does afterwards): dropped names
        every message that never reached ZeroMQ. When that is not 0, one
        SinkwatchWarning names the endpoint and the counts. Safe to call
        twice."""
        with self._lock:
            if self._closed:
                return self.stats
            if os.getpid() != self._pid:
                # a forked child (a DataLoader worker, say): the ZeroMQ state
                # belongs to the parent; touching it here could hang
                self._closed = True
                self._sock = self._ctx = self._mon = None
                return self.stats
            start = time.monotonic()
            try:
                self.flush(self.linger)
            finally:
                self._closed = True
                n = len(self._pending)
                self._pending.clear()
                self._pending_bytes = 0
                self._dropped += n
                self._warn_undelivered(n, self.linger)
                left = max(0.0, self.linger - (time.monotonic() - start))
                self._poll_monitor()
                sock, ctx, mon = self._sock, self._ctx, self._mon
                self._sock = self._ctx = self._mon = None
                try:
                    sock.disable_monitor()
                    mon.close(linger=0)
                except Exception:   # noqa: BLE001
                    pass
                try:
                    sock.setsockopt(zmq.LINGER, _ms(left))
                except Exception:   # noqa: BLE001
                    pass
                self._nsubs = 0
                try:
                    sock.close()
                finally:
                    ctx.term()
            return self.stats

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:   # noqa: BLE001 - interpreter shutdown, half-built object
            pass

    def __repr__(self):
        who = " rank %d of %d" % (self.rank, self.senders) if self.senders > 1 else ""
        return "<sinkwatch.Client run=%r endpoint=%r%s %s>" % (
            self.run, self.endpoint, who, "closed" if self._closed else "open")
