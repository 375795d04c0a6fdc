"""sinkwatch wire protocol, versions 1 and 2 (proto/PROTOCOL.md), in pure Python.

The encoder produces the canonical header of PROTOCOL.md section 5 byte for
byte, as swp_encode_header() does, and validates its input with the checks
the C encoder shares with the decoder (limits, dims against the tensor
bytes). The decoder runs the checks of section 8 in their order and fails
with the same error names as swp_decode(). msgpack is parsed here (after the
allocation-free pre-scan), so no msgpack library is needed.

    topic(run) -> bytes
    encode_header(fields) -> bytes          raises ProtocolError (a ValueError)
    decode_header(header, nframes=None) -> dict
    decode_message(frames, tensor_max=TENSOR_MAX_DEFAULT) -> dict
    parse_golden(data) -> [frame, ...]

Field dicts use the header's key names. A decoded snapshot also carries
"tensor_bytes", the tensor frame size its shape and dtype imply (and
decode_message adds "tensor", a memoryview of frame 2), so that
encode_header(decode_header(h)) == h for every canonical header h.

Version 2 (PROTOCOL.md 7b: several senders of one run) adds the optional
keys rank, senders, head0, row0 and rows. As swp_decode() does, the decoder
fills them for every version: a v1 message is rank 0 of 1 sender
carrying heads 0.. and rows 0.. of its whole layer (rows = shape[1]); in a
v1 header they are unknown keys and skipped. The encoder writes them, and
"v": 2, only where v1 cannot say the message (PROTOCOL.md 5): rank and
senders iff senders > 1 or rank != 0, head0 iff shape[0] != heads or
head0 != 0, row0 and rows iff shape[1] != rows or row0 != 0 (an end
message: rank and senders only).
"""

import math
import struct

VERSION = 2
VERSION_MIN = 1
TOPIC_PREFIX = b"sw/"
RUN_MAX = 128
MODEL_MAX = 256
HEADER_MAX = 1 << 20
LAYERS_MAX = 4096
HEADS_MAX = 1024
ROWS_MAX = 65536
KEYS_MAX = 1 << 20
SENDERS_MAX = 65536          # senders of one incarnation (v2)
ROWSTATS_FIELDS = 6
DEPTH_MAX = 8
TENSOR_MAX_DEFAULT = 256 << 20

KINDS = ("probs", "logits", "rowstats")
DTYPES = ("f32", "f16", "bf16", "f64")
DTYPE_SIZES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8}

# swp_errname(), indexed by -code
ERRNAMES = ("ok", "frames", "topic", "header_size", "msgpack", "version", "field",
            "limit", "dims", "kind", "dtype", "type", "nomem", "inval")

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_I64 = (1 << 63) - 1


class ProtocolError(ValueError):
    """A message or a set of fields that breaks PROTOCOL.md.

    errname is the stable error name of section 8 ("limit", "dims", ...),
    code its swp_err code, detail names the field and the value."""

    def __init__(self, errname, detail=""):
        super().__init__(errname, detail)
        self.errname = errname
        self.detail = detail
        self.code = -ERRNAMES.index(errname) if errname in ERRNAMES else None

    def __str__(self):
        return "%s: %s" % (self.errname, self.detail) if self.detail else self.errname


class errors:
    """The error names of PROTOCOL.md section 8 (swp_errname)."""
    ProtocolError = ProtocolError
    NAMES = ERRNAMES
    OK, FRAMES, TOPIC, HEADER_SIZE, MSGPACK, VERSION, FIELD, LIMIT, DIMS, KIND, \
        DTYPE, TYPE, NOMEM, INVAL = ERRNAMES

    @staticmethod
    def code(name):
        """The swp_err code of an error name (0, -1, ...)."""
        return -ERRNAMES.index(name)

    @staticmethod
    def name(code):
        return ERRNAMES[-code] if -len(ERRNAMES) < code <= 0 else "unknown"


def _shown(b):
    """A network string made safe for a message: printable ASCII, cut at 40."""
    s = "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x22 else "?" for c in b[:40])
    return s + ("..." if len(b) > 40 else "")


def _as_bytes(v, name):
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise ProtocolError("field", "%s: not a str" % name)


def _as_str(b):
    return b.decode("utf-8", "surrogateescape")


def _check_run(run):
    n = len(run)
    if n == 0:
        raise ProtocolError("limit", "run: empty")
    if n > RUN_MAX:
        raise ProtocolError("limit", "run: %d bytes, limit %d" % (n, RUN_MAX))
    for i, c in enumerate(run):
        if c < 0x20 or c == 0x7f:
            raise ProtocolError("field", "run: control byte 0x%02x at %d" % (c, i))


def topic(run):
    """The topic frame of a run: b"sw/" + the run id's bytes (str as UTF-8)."""
    rb = _as_bytes(run, "run")
    _check_run(rb)
    return TOPIC_PREFIX + rb


class _Fields:
    """The header values as the checks see them (struct fields of proto.c)."""
    __slots__ = ("type", "run", "model", "seq", "params", "layers", "heads", "sink",
                 "layer", "step", "fixed_probe", "kind", "dtype", "shape", "qpos",
                 "qpos_max", "time", "inc", "resume", "version", "rank", "senders",
                 "head0", "row0", "rows")

    def __init__(self):
        self.qpos = None
        self.qpos_max = 0
        self.time = None
        self.inc = 0
        self.resume = None
        self.version = 1
        self.rank, self.senders, self.head0, self.row0, self.rows = 0, 1, 0, 0, 0


def _check_limits(f):
    """check_limits() of proto.c, in the order PROTOCOL.md lists them."""
    if f.type == "snapshot":
        if not 1 <= f.layers <= LAYERS_MAX:
            raise ProtocolError("limit", "layers: %d, not in 1..%d" % (f.layers, LAYERS_MAX))
        if not 1 <= f.heads <= HEADS_MAX:
            raise ProtocolError("limit", "heads: %d, not in 1..%d" % (f.heads, HEADS_MAX))
        if f.head0 >= f.heads:
            raise ProtocolError("limit", "head0: %d, heads %d" % (f.head0, f.heads))
        if f.version < 2 and f.shape[0] != f.heads:
            raise ProtocolError("dims", "shape[0]: %d, heads %d" % (f.shape[0], f.heads))
        if not 1 <= f.shape[0] <= f.heads - f.head0:
            raise ProtocolError("dims", "shape[0]: %d heads from head0 %d, heads %d"
                                % (f.shape[0], f.head0, f.heads))
        if not 1 <= f.shape[1] <= ROWS_MAX:
            raise ProtocolError("limit", "shape[1] (rows): %d, not in 1..%d"
                                % (f.shape[1], ROWS_MAX))
        if not 1 <= f.rows <= ROWS_MAX:
            raise ProtocolError("limit", "rows: %d, not in 1..%d" % (f.rows, ROWS_MAX))
        if f.row0 >= f.rows or f.shape[1] > f.rows - f.row0:
            raise ProtocolError("dims", "shape[1]: %d rows from row0 %d, rows %d"
                                % (f.shape[1], f.row0, f.rows))
        if not 1 <= f.shape[2] <= KEYS_MAX:
            raise ProtocolError("limit", "shape[2] (keys): %d, not in 1..%d"
                                % (f.shape[2], KEYS_MAX))
        if f.layer >= f.layers:
            raise ProtocolError("limit", "layer: %d, layers %d" % (f.layer, f.layers))
        if f.step < 0:
            raise ProtocolError("limit", "step: negative")
        if f.step > _I64:
            raise ProtocolError("limit", "step: %d, over 2^63-1" % f.step)
        if f.kind == "rowstats":
            if f.shape[2] != ROWSTATS_FIELDS:
                raise ProtocolError("kind", "rowstats with keys %d, expected %d"
                                    % (f.shape[2], ROWSTATS_FIELDS))
            if f.sink > _U32:
                raise ProtocolError("limit", "sink: %d, over 2^32-1" % f.sink)
        elif f.sink >= f.shape[2]:
            raise ProtocolError("limit", "sink: %d, keys %d" % (f.sink, f.shape[2]))
    if not 1 <= f.senders <= SENDERS_MAX:
        raise ProtocolError("limit", "senders: %d, not in 1..%d" % (f.senders, SENDERS_MAX))
    if f.rank >= f.senders:
        raise ProtocolError("limit", "rank: %d, senders %d" % (f.rank, f.senders))
    if f.senders > 1 and f.inc == 0:
        raise ProtocolError("field", "inc: required with senders %d (the senders of one "
                            "incarnation share it)" % f.senders)
    if f.resume is not None and not 0 <= f.resume <= _I64:
        raise ProtocolError("limit", "resume: not a step in 0..2^63-1")
    _check_run(f.run)
    if f.type != "snapshot":
        return
    if len(f.model) > MODEL_MAX:
        raise ProtocolError("limit", "model: %d bytes, limit %d" % (len(f.model), MODEL_MAX))
    if b"\0" in f.model:
        raise ProtocolError("field", 'model: NUL byte in "%s"' % _shown(f.model))
    if f.qpos is not None and len(f.qpos) != f.shape[1]:
        raise ProtocolError("dims", "qpos: %d entries, rows %d" % (len(f.qpos), f.shape[1]))
    if f.qpos is not None and f.qpos_max > _U32:
        raise ProtocolError("limit", "qpos: entry %d, over 2^32-1" % f.qpos_max)


def _tensor_need(f):
    n = DTYPE_SIZES[f.dtype]
    for d in f.shape:
        n *= d
    return n


def _check_dims(f, tensor_bytes):
    need = _tensor_need(f)
    if need != tensor_bytes:
        raise ProtocolError("dims", "tensor: %d bytes, shape [%d, %d, %d] of %s needs %d"
                            % (tensor_bytes, f.shape[0], f.shape[1], f.shape[2], f.dtype, need))
    return need


# ------------------------------------------------------------------ encoder

def _p_uint(v):
    if v < 0x80:
        return bytes((v,))
    if v < 0x100:
        return b"\xcc" + bytes((v,))
    if v < 0x10000:
        return b"\xcd" + v.to_bytes(2, "big")
    if v <= _U32:
        return b"\xce" + v.to_bytes(4, "big")
    return b"\xcf" + v.to_bytes(8, "big")


def _p_str(b):
    n = len(b)
    if n < 32:
        return bytes((0xa0 | n,)) + b
    if n < 0x100:
        return b"\xd9" + bytes((n,)) + b
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big") + b
    return b"\xdb" + n.to_bytes(4, "big") + b


def _p_array_header(n):
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _p_map_header(n):
    if n < 16:
        return bytes((0x80 | n,))
    return b"\xde" + n.to_bytes(2, "big")


# The header keys in canonical order (proto.c's enum key); from "rank" on
# they are version 2 keys, unknown (skipped) in a v1 message.
_KNOWN = ("v", "type", "run", "seq", "model", "params", "layers", "heads", "sink",
          "fixed_probe", "step", "layer", "kind", "dtype", "shape", "qpos", "time",
          "inc", "resume", "rank", "senders", "head0", "row0", "rows")
_V2_KEYS = _KNOWN[_KNOWN.index("rank"):]
_K = {k: _p_str(k.encode()) for k in _KNOWN}
_TYPE_SNAPSHOT = _p_str(b"snapshot")
_TYPE_END = _p_str(b"end")
_KIND_B = {k: _p_str(k.encode()) for k in KINDS}
_DTYPE_B = {k: _p_str(k.encode()) for k in DTYPES}


def _p_uint_array(values):
    """The msgpack array of uints, each in its smallest form."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency of the client
        np = None
    n = len(values)
    if np is None or n < 32:
        return _p_array_header(n) + b"".join(_p_uint(int(v)) for v in values)
    v = np.asarray(values, dtype=np.uint64)
    out = np.zeros((n, 5), dtype=np.uint8)
    lens = np.ones(n, dtype=np.int64)
    small = v < 0x80
    out[small, 0] = v[small]
    m8 = (v >= 0x80) & (v < 0x100)
    out[m8, 0] = 0xcc
    out[m8, 1] = v[m8]
    lens[m8] = 2
    m16 = (v >= 0x100) & (v < 0x10000)
    out[m16, 0] = 0xcd
    out[m16, 1] = v[m16] >> 8
    out[m16, 2] = v[m16] & 0xff
    lens[m16] = 3
    m32 = v >= 0x10000
    out[m32, 0] = 0xce
    for i in range(4):
        out[m32, 1 + i] = (v[m32] >> (24 - 8 * i)) & 0xff
    lens[m32] = 5
    mask = np.arange(5)[None, :] < lens[:, None]
    return _p_array_header(n) + out[mask].tobytes()


def _int_field(fields, name, default=None, lo=0, hi=_U64):
    v = fields.get(name, default)
    if v is None:
        raise ProtocolError("field", "%s: missing" % name)
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise ProtocolError("field", "%s: not an integer (%r)" % (name, v))
    v = v.__index__()
    if v < lo or v > hi:
        raise ProtocolError("limit", "%s: %d, not in %d..%d" % (name, v, lo, hi))
    return v


def _qpos_values(q):
    """qpos as a list-like of ints; field errors for non-integers or negatives."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None and isinstance(q, np.ndarray):
        if q.ndim != 1:
            raise ProtocolError("field", "qpos: not a 1-d array")
        if q.size and q.dtype.kind not in "iu":
            raise ProtocolError("field", "qpos: not integers (%s)" % q.dtype)
        if q.size and q.dtype.kind == "i" and int(q.min()) < 0:
            raise ProtocolError("field", "qpos: negative entry %d" % int(q.min()))
        return q, (int(q.max()) if q.size else 0)
    try:
        vals = list(q)
    except TypeError:
        raise ProtocolError("field", "qpos: not an array") from None
    mx = 0
    for i, x in enumerate(vals):
        if isinstance(x, bool) or not hasattr(x, "__index__"):
            raise ProtocolError("field", "qpos[%d]: not an unsigned integer" % i)
        x = x.__index__()
        if x < 0:
            raise ProtocolError("field", "qpos[%d]: not an unsigned integer" % i)
        vals[i] = x
        mx = x if x > mx else mx
    return vals, mx


def _v2_field(fields, name):
    """A version 2 value of the encoder: None (or 0 for senders and rows, as
    the C encoder takes them) is the default."""
    v = fields.get(name)
    if v is None:
        return None
    return _int_field(fields, name)


def encode_header(fields):
    """The canonical header (PROTOCOL.md section 5) of a field dict.

    Keys: type ("snapshot" or "end"), run, seq (default 0), time (optional:
    omitted when None or not finite), inc (optional, 0 or None: absent),
    resume (optional); version 2 (PROTOCOL.md 7b): rank (default 0) and
    senders (default 1; 0 is taken as 1, as swp_encode_header() does);
    snapshot: model (default ""), params (default 0), layers, heads, sink
    (default 0), fixed_probe (default False), step, layer, kind, dtype, shape
    [heads in the message, rows in the message, keys], qpos (optional),
    tensor_bytes or tensor (the frame, for the dims check), and version 2:
    head0 (default 0), row0 (default 0), rows (the probe's rows, default
    shape[1]; 0 is taken as shape[1]). An end ignores head0, row0 and rows.

    "v", if given, must be a supported version (1 or 2); like the C encoder,
    this one writes the version the fields need: 2 only when a version 2 key
    is needed, else 1. Other keys are ignored. Raises ProtocolError (a
    ValueError) naming the field, with the error name the C encoder returns
    (type, kind, dtype, limit, dims, field)."""
    if "v" in fields and (isinstance(fields["v"], bool) or fields["v"] not in
                          range(VERSION_MIN, VERSION + 1)):
        raise ProtocolError("version", "v: %r, supported %d..%d"
                            % (fields["v"], VERSION_MIN, VERSION))
    f = _Fields()
    f.type = fields.get("type")
    if f.type not in ("snapshot", "end"):
        raise ProtocolError("type", "type: %r" % (f.type,))
    if fields.get("run") is None:
        raise ProtocolError("field", "run: missing")
    f.run = _as_bytes(fields["run"], "run")
    f.seq = _int_field(fields, "seq", 0)
    t = fields.get("time")
    if t is not None:
        if isinstance(t, bool) or not isinstance(t, (int, float)) and not hasattr(t, "__float__"):
            raise ProtocolError("field", "time: not a number (%r)" % (t,))
        t = float(t)
        f.time = t if math.isfinite(t) else None
    f.inc = _int_field(fields, "inc", 0)
    if fields.get("resume") is not None:
        f.resume = _int_field(fields, "resume", lo=-(1 << 63), hi=_I64)
    f.rank = _v2_field(fields, "rank") or 0
    f.senders = _v2_field(fields, "senders") or 1
    if f.senders > 1 or f.rank != 0:
        f.version = 2
    tensor_bytes = None
    if f.type == "snapshot":
        f.kind = fields.get("kind")
        if f.kind not in KINDS:
            raise ProtocolError("kind", "kind: %r" % (f.kind,))
        f.dtype = fields.get("dtype")
        if f.dtype not in DTYPES:
            raise ProtocolError("dtype", "dtype: %r" % (f.dtype,))
        f.model = _as_bytes(fields.get("model", ""), "model")
        f.params = _int_field(fields, "params", 0)
        f.layers = _int_field(fields, "layers")
        f.heads = _int_field(fields, "heads")
        f.sink = _int_field(fields, "sink", 0)
        fp = fields.get("fixed_probe", False)
        if not isinstance(fp, (bool, int)):
            raise ProtocolError("field", "fixed_probe: not a bool (%r)" % (fp,))
        f.fixed_probe = bool(fp)
        f.step = _int_field(fields, "step", lo=-(1 << 63), hi=_I64)
        f.layer = _int_field(fields, "layer")
        shape = fields.get("shape")
        try:
            shape = [int(x.__index__()) for x in shape if not isinstance(x, bool)]
        except (TypeError, AttributeError):
            raise ProtocolError("field", "shape: not an array of 3 unsigned integers") from None
        if len(shape) != 3 or min(shape) < 0:
            raise ProtocolError("field", "shape: %r, expected 3 unsigned integers" % (shape,))
        f.shape = shape
        if fields.get("qpos") is not None:
            f.qpos, f.qpos_max = _qpos_values(fields["qpos"])
        if fields.get("tensor_bytes") is not None:
            tensor_bytes = _int_field(fields, "tensor_bytes")
        elif fields.get("tensor") is not None:
            tensor_bytes = memoryview(fields["tensor"]).nbytes
        else:
            raise ProtocolError("field", "tensor_bytes: missing (or tensor)")
        f.head0 = _v2_field(fields, "head0") or 0
        f.row0 = _v2_field(fields, "row0") or 0
        f.rows = _v2_field(fields, "rows") or shape[1]
        if shape[0] != f.heads or f.head0 != 0 or shape[1] != f.rows or f.row0 != 0:
            f.version = 2
    _check_limits(f)
    if f.type == "snapshot":
        _check_dims(f, tensor_bytes)

    v2_senders = f.senders > 1 or f.rank != 0
    v2_heads = f.type == "snapshot" and (f.shape[0] != f.heads or f.head0 != 0)
    v2_rows = f.type == "snapshot" and (f.shape[1] != f.rows or f.row0 != 0)
    if f.type == "snapshot":
        n = 15 + (f.qpos is not None) + (f.time is not None)
        parts = [None, _K["v"], _p_uint(f.version), _K["type"], _TYPE_SNAPSHOT,
                 _K["run"], _p_str(f.run), _K["seq"], _p_uint(f.seq),
                 _K["model"], _p_str(f.model), _K["params"], _p_uint(f.params),
                 _K["layers"], _p_uint(f.layers), _K["heads"], _p_uint(f.heads),
                 _K["sink"], _p_uint(f.sink),
                 _K["fixed_probe"], b"\xc3" if f.fixed_probe else b"\xc2",
                 _K["step"], _p_uint(f.step), _K["layer"], _p_uint(f.layer),
                 _K["kind"], _KIND_B[f.kind], _K["dtype"], _DTYPE_B[f.dtype],
                 _K["shape"], b"\x93", _p_uint(f.shape[0]), _p_uint(f.shape[1]),
                 _p_uint(f.shape[2])]
        if f.qpos is not None:
            parts += [_K["qpos"], _p_uint_array(f.qpos)]
    else:
        n = 4 + (f.time is not None)
        parts = [None, _K["v"], _p_uint(f.version), _K["type"], _TYPE_END,
                 _K["run"], _p_str(f.run), _K["seq"], _p_uint(f.seq)]
    if f.time is not None:
        parts += [_K["time"], b"\xcb", struct.pack(">d", f.time)]
    if f.inc:
        parts += [_K["inc"], _p_uint(f.inc)]
    if f.resume is not None:
        parts += [_K["resume"], _p_uint(f.resume)]
    if v2_senders:
        parts += [_K["rank"], _p_uint(f.rank), _K["senders"], _p_uint(f.senders)]
    if v2_heads:
        parts += [_K["head0"], _p_uint(f.head0)]
    if v2_rows:
        parts += [_K["row0"], _p_uint(f.row0), _K["rows"], _p_uint(f.rows)]
    n += (f.inc != 0) + (f.resume is not None) + 2 * v2_senders + v2_heads + 2 * v2_rows
    parts[0] = _p_map_header(n)
    out = b"".join(parts)
    if len(out) > HEADER_MAX:  # unreachable within the limits, as in C
        raise ProtocolError("limit", "header: %d bytes, limit %d" % (len(out), HEADER_MAX))
    return out


# ------------------------------------------------------------------ decoder

def _prescan(p):
    """prescan() of proto.c: walks one msgpack object without allocating and
    returns the bytes it spans; a claim beyond the bytes left fails."""
    n = len(p)
    left = [0] * (DEPTH_MAX + 1)
    left[0] = 1
    owed = 1
    off = 0
    depth = 0
    while depth >= 0:
        if left[depth] == 0:
            depth -= 1
            continue
        at = off
        if off >= n:
            raise ProtocolError("msgpack", "truncated: header ends at byte %d inside an "
                                "array or map" % off)
        b = p[off]
        off += 1
        left[depth] -= 1
        owed -= 1
        body = items = lenw = extra = cont = 0
        if b <= 0x7f or b >= 0xe0 or b in (0xc0, 0xc2, 0xc3):
            pass
        elif b <= 0x8f:
            cont, items = 2, 2 * (b & 0x0f)
        elif b <= 0x9f:
            cont, items = 1, b & 0x0f
        elif b <= 0xbf:
            body = b & 0x1f
        elif b in (0xc4, 0xd9):
            lenw = 1
        elif b in (0xc5, 0xda):
            lenw = 2
        elif b in (0xc6, 0xdb):
            lenw = 4
        elif b in (0xc7, 0xc8, 0xc9):
            lenw, extra = {0xc7: 1, 0xc8: 2, 0xc9: 4}[b], 1
        elif b in _FIXED_BODY:
            body = _FIXED_BODY[b]
        elif b in (0xdc, 0xdd):
            lenw, cont = (2 if b == 0xdc else 4), 1
        elif b in (0xde, 0xdf):
            lenw, cont = (2 if b == 0xde else 4), 2
        else:  # 0xc1
            raise ProtocolError("msgpack", "invalid byte 0x%02x at offset %d" % (b, at))
        if lenw:
            if n - off < lenw:
                raise ProtocolError("msgpack", "truncated: length of byte 0x%02x at offset %d"
                                    % (b, at))
            v = int.from_bytes(p[off:off + lenw], "big")
            off += lenw
            if cont == 1:
                items = v
            elif cont == 2:
                items = 2 * v
            else:
                body = v + extra
        if body > n - off:
            raise ProtocolError("msgpack", "truncated: %d bytes claimed at offset %d, %d left"
                                % (body, at, n - off))
        off += body
        if cont == 0:
            continue
        if depth >= DEPTH_MAX:
            raise ProtocolError("msgpack", "depth: nesting over %d at offset %d"
                                % (DEPTH_MAX, at))
        owed += items
        if owed > n - off:
            raise ProtocolError("msgpack", "truncated: %s of %d elements at offset %d, "
                                "%d bytes left" % ("array" if cont == 1 else "map",
                                                   items if cont == 1 else items // 2,
                                                   at, n - off))
        if items > 0:
            depth += 1
            left[depth] = items
    return off


_FIXED_BODY = {0xca: 4, 0xcb: 8, 0xcc: 1, 0xd0: 1, 0xcd: 2, 0xd1: 2, 0xce: 4, 0xd2: 4,
               0xcf: 8, 0xd3: 8, 0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17}


class _Str(bytes):
    """A msgpack str (as opposed to bin, which parses to plain bytes)."""


class _Map(list):
    """A msgpack map: a list of (key, value) pairs, duplicates kept."""


class _Ext:
    def __init__(self, code, data):
        self.code, self.data = code, data


class _Float(float):
    pass


def _parse(p, off):
    """One msgpack object at p[off:], already validated by _prescan."""
    b = p[off]
    off += 1
    if b <= 0x7f:
        return b, off
    if b >= 0xe0:
        return b - 0x100, off
    if b <= 0x8f:
        return _parse_map(p, off, b & 0x0f)
    if b <= 0x9f:
        return _parse_array(p, off, b & 0x0f)
    if b <= 0xbf:
        n = b & 0x1f
        return _Str(p[off:off + n]), off + n
    if b == 0xc0:
        return None, off
    if b == 0xc2:
        return False, off
    if b == 0xc3:
        return True, off
    if b in (0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb):
        w = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}[b]
        n = int.from_bytes(p[off:off + w], "big")
        off += w
        data = bytes(p[off:off + n])
        return (_Str(data) if b >= 0xd9 else data), off + n
    if b in (0xc7, 0xc8, 0xc9):
        w = {0xc7: 1, 0xc8: 2, 0xc9: 4}[b]
        n = int.from_bytes(p[off:off + w], "big")
        off += w
        return _Ext(p[off], bytes(p[off + 1:off + 1 + n])), off + 1 + n
    if b == 0xca:
        return _Float(struct.unpack(">f", p[off:off + 4])[0]), off + 4
    if b == 0xcb:
        return _Float(struct.unpack(">d", p[off:off + 8])[0]), off + 8
    if 0xcc <= b <= 0xcf:
        w = 1 << (b - 0xcc)
        return int.from_bytes(p[off:off + w], "big"), off + w
    if 0xd0 <= b <= 0xd3:
        w = 1 << (b - 0xd0)
        return int.from_bytes(p[off:off + w], "big", signed=True), off + w
    if 0xd4 <= b <= 0xd8:
        n = 1 << (b - 0xd4)
        return _Ext(p[off], bytes(p[off + 1:off + 1 + n])), off + 1 + n
    if b in (0xdc, 0xdd):
        w = 2 if b == 0xdc else 4
        return _parse_array(p, off + w, int.from_bytes(p[off:off + w], "big"))
    w = 2 if b == 0xde else 4
    return _parse_map(p, off + w, int.from_bytes(p[off:off + w], "big"))


def _parse_array(p, off, n):
    out = []
    for _ in range(n):
        v, off = _parse(p, off)
        out.append(v)
    return out, off


def _parse_map(p, off, n):
    out = _Map()
    for _ in range(n):
        k, off = _parse(p, off)
        v, off = _parse(p, off)
        out.append((k, v))
    return out, off


def _is_uint(o):
    # msgpack-c: any int-family value >= 0 is a POSITIVE_INTEGER
    return type(o) is int and o >= 0


_KNOWN_B2 = {k.encode(): k for k in _KNOWN}                         # v >= 2
_KNOWN_B1 = {k: n for k, n in _KNOWN_B2.items() if n not in _V2_KEYS}  # v 1


def _need(val, k, check, what):
    if k not in val:
        raise ProtocolError("field", "%s: missing" % k)
    if not check(val[k]):
        raise ProtocolError("field", "%s: not %s" % (k, what))
    return val[k]


def _need_uint(val, k):
    return _need(val, k, _is_uint, "an unsigned integer")


def _need_str(val, k):
    return bytes(_need(val, k, lambda o: isinstance(o, _Str), "a str"))


def _decode_map(root, nframes):
    """decode_map() of proto.c: checks 7 to 13 over the parsed map."""
    if not root:
        raise ProtocolError("version", "v: missing (empty map)")
    k0, v0 = root[0]
    if not (isinstance(k0, _Str) and k0 == b"v"):
        raise ProtocolError("version", "v: not the first key")
    if not _is_uint(v0):
        raise ProtocolError("version", "v: not an unsigned integer")
    if not VERSION_MIN <= v0 <= VERSION:
        raise ProtocolError("version", "v: %d, supported %d..%d" % (v0, VERSION_MIN, VERSION))
    known = _KNOWN_B1 if v0 < 2 else _KNOWN_B2
    val = {}
    for k, v in root:
        name = known.get(bytes(k)) if isinstance(k, _Str) else None
        if name is None:
            continue
        if name in val:
            raise ProtocolError("field", "%s: duplicate key" % name)
        val[name] = v

    f = _Fields()
    t = _need_str(val, "type")
    if t == b"snapshot":
        f.type = "snapshot"
    elif t == b"end":
        f.type = "end"
    else:
        raise ProtocolError("type", 'type: "%s"' % _shown(t))
    if nframes is not None and nframes != (3 if f.type == "snapshot" else 2):
        raise ProtocolError("frames", "%s message in %d frames, expected %d"
                            % (f.type, nframes, 3 if f.type == "snapshot" else 2))
    f.run = _need_str(val, "run")
    f.seq = _need_uint(val, "seq")
    if f.type == "snapshot":
        f.model = _need_str(val, "model")
        f.params = _need_uint(val, "params")
        f.layers = _need_uint(val, "layers")
        f.heads = _need_uint(val, "heads")
        f.sink = _need_uint(val, "sink")
        f.fixed_probe = _need(val, "fixed_probe", lambda o: type(o) is bool, "a bool")
        if type(val.get("step")) is int and val["step"] < 0:
            f.step = val["step"]
        else:
            f.step = _need(val, "step", _is_uint, "an integer")
        f.layer = _need_uint(val, "layer")
        kind = _need_str(val, "kind")
        if kind.decode("latin-1") not in KINDS:
            raise ProtocolError("kind", 'kind: "%s"' % _shown(kind))
        f.kind = kind.decode()
        dtype = _need_str(val, "dtype")
        if dtype.decode("latin-1") not in DTYPES:
            raise ProtocolError("dtype", 'dtype: "%s"' % _shown(dtype))
        f.dtype = dtype.decode()
        shape = _need(val, "shape", lambda o: type(o) is list, "an array")
        if len(shape) != 3:
            raise ProtocolError("field", "shape: %d entries, expected 3" % len(shape))
        for i, x in enumerate(shape):
            if not _is_uint(x):
                raise ProtocolError("field", "shape[%d]: not an unsigned integer" % i)
        f.shape = list(shape)
        q = val.get("qpos")
        if q is not None:
            if type(q) is not list:
                raise ProtocolError("field", "qpos: not an array")
            for i, x in enumerate(q):
                if not _is_uint(x):
                    raise ProtocolError("field", "qpos[%d]: not an unsigned integer" % i)
            f.qpos = q
            f.qpos_max = max(q) if q else 0
    if "time" in val:
        o = val["time"]
        if isinstance(o, _Float) or (type(o) is int):
            t = float(o)
            f.time = t if math.isfinite(t) else None
        elif o is not None:
            raise ProtocolError("field", "time: not a number")
    o = val.get("inc")
    if o is not None:
        if not _is_uint(o):
            raise ProtocolError("field", "inc: not an unsigned integer")
        f.inc = o
    o = val.get("resume")
    if o is not None:
        if type(o) is not int:
            raise ProtocolError("field", "resume: not an integer")
        f.resume = o            # its range: in _check_limits, in C's order
    # version 2, optional; absent (or nil) is the v1 meaning (PROTOCOL.md 7b)
    f.version = v0
    f.senders = 1
    f.rows = f.shape[1] if f.type == "snapshot" else 0
    for k in _V2_KEYS:
        o = val.get(k)
        if o is None:
            continue
        if not _is_uint(o):
            raise ProtocolError("field", "%s: not an unsigned integer" % k)
        setattr(f, k, o)
    _check_limits(f)
    return f


def _fields_dict(f):
    d = {"v": f.version, "type": f.type, "run": _as_str(f.run), "seq": f.seq}
    if f.type == "snapshot":
        d.update(model=_as_str(f.model), params=f.params, layers=f.layers, heads=f.heads,
                 sink=f.sink, fixed_probe=f.fixed_probe, step=f.step, layer=f.layer,
                 kind=f.kind, dtype=f.dtype, shape=list(f.shape))
        if f.qpos is not None:
            d["qpos"] = list(f.qpos)
        d["tensor_bytes"] = _tensor_need(f)
    if f.time is not None:
        d["time"] = f.time
    if f.inc:
        d["inc"] = f.inc
    if f.resume is not None:
        d["resume"] = f.resume
    # version 2, filled for every version as swp_decode() does
    d["rank"], d["senders"] = f.rank, f.senders
    if f.type == "snapshot":
        d["head0"], d["row0"], d["rows"] = f.head0, f.row0, f.rows
    return d


def _decode_header_fields(header, nframes):
    h = bytes(header) if not isinstance(header, bytes) else header
    if not 1 <= len(h) <= HEADER_MAX:
        raise ProtocolError("header_size", "header: %d bytes, expected 1..%d"
                            % (len(h), HEADER_MAX))
    used = _prescan(h)
    if used != len(h):
        raise ProtocolError("msgpack", "trailing bytes: %d after the header map"
                            % (len(h) - used))
    if not ((h[0] & 0xf0) == 0x80 or h[0] in (0xde, 0xdf)):
        raise ProtocolError("msgpack", "header: not a map (byte 0x%02x)" % h[0])
    root, _ = _parse(h, 0)
    return _decode_map(root, nframes)


def decode_header(header, nframes=None):
    """Decodes and validates one header frame: checks 3 to 13 of PROTOCOL.md
    section 8 in their order (check 11, the frame count against the type,
    only when nframes is given). Returns the field dict (run and model as
    str, bytes that are not UTF-8 kept as surrogate escapes; time only when
    present and finite; qpos only when present; tensor_bytes implied by the
    shape; v as received; rank and senders always, and for a snapshot head0,
    row0 and rows, the v1 defaults 0, 1, 0, 0 and shape[1] where absent).
    Raises ProtocolError(errname, detail)."""
    return _fields_dict(_decode_header_fields(header, nframes))


def decode_message(frames, tensor_max=TENSOR_MAX_DEFAULT):
    """Decodes one whole message (a list of 2 or 3 frames) with every check
    of section 8 in order, as swp_decode() does. The dict of decode_header()
    plus "tensor" (a memoryview of frame 2) for a snapshot."""
    frames = list(frames)
    if len(frames) not in (2, 3):
        raise ProtocolError("frames", "%d frames, expected 3 (snapshot) or 2 (end)"
                            % len(frames))
    tp = bytes(frames[0])
    if len(tp) <= len(TOPIC_PREFIX) or len(tp) > len(TOPIC_PREFIX) + RUN_MAX:
        raise ProtocolError("topic", "topic: %d bytes, expected %d..%d"
                            % (len(tp), len(TOPIC_PREFIX) + 1, len(TOPIC_PREFIX) + RUN_MAX))
    if not tp.startswith(TOPIC_PREFIX):
        raise ProtocolError("topic", 'topic: prefix is not "sw/"')
    f = _decode_header_fields(frames[1], len(frames))
    if tp[len(TOPIC_PREFIX):] != f.run:
        raise ProtocolError("topic", 'topic: "%s" is not "sw/" + run' % _shown(tp))
    d = _fields_dict(f)
    if f.type == "snapshot":
        tensor = memoryview(frames[2]).cast("B")
        need = _check_dims(f, tensor.nbytes)
        if need > tensor_max:
            raise ProtocolError("limit", "tensor: %d bytes, limit %d" % (need, tensor_max))
        d["tensor"] = tensor
    return d


def parse_golden(data):
    """Splits a golden-message container (per frame: uint32 LE length, then
    the bytes) into its frames, as swp_golden_parse() does."""
    data = bytes(data)
    frames, off, n = [], 0, len(data)
    while off < n:
        if n - off < 4:
            raise ProtocolError("msgpack", "container: %d bytes left for a length" % (n - off))
        fl = struct.unpack_from("<I", data, off)[0]
        off += 4
        if fl > n - off:
            raise ProtocolError("msgpack", "container: frame of %d bytes, %d left"
                                % (fl, n - off))
        frames.append(data[off:off + fl])
        off += fl
    return frames
