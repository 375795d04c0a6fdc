"""Test harness: a real sinkwatchd on free loopback ports in a temp dir, and
a minimal sender that speaks proto/PROTOCOL.md with pyzmq and msgpack.

A sanitizer report in a daemon's log fails the test: Daemon.stop() raises
on one, and Results.finish() fails for any daemon of the process whose log
has one (so a daemon that was killed, or never stopped, counts too)."""
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import msgpack
import numpy as np
import zmq

SINKWATCHD = os.environ.get("SINKWATCHD")
SINKWATCH = os.environ.get("SINKWATCH")


# AddressSanitizer, LeakSanitizer, UBSan ("file:line:col: runtime error:"),
# ThreadSanitizer, and the SUMMARY line each of them ends with
_SANITIZER = re.compile(r"^==\d+==\s*ERROR: \w*Sanitizer|^\S+:\d+(?::\d+)?: runtime error: |"
                        r"^WARNING: ThreadSanitizer|^SUMMARY: \w*Sanitizer", re.M)


def sanitizer_report(text):
    """The first sanitizer report in a log's text (with some context), or None."""
    m = _SANITIZER.search(text)
    if m is None:
        return None
    start = text.rfind("\n", 0, max(0, m.start() - 1)) + 1
    return text[start:m.start() + 4000]


def check_log(path):
    """Raises AssertionError if the log at path holds a sanitizer report."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return
    rep = sanitizer_report(text)
    if rep is not None:
        raise AssertionError("sanitizer report in %s:\n%s" % (path, rep))


_DAEMONS = []       # every Daemon of this process, for Results.finish()


def _build_var(name):
    """A variable of the build tree's Makefile (CC, SW_SAN_CFLAGS), or None."""
    if not SINKWATCHD:
        return None
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(SINKWATCHD)), "Makefile")) as f:
            for line in f:
                if line.startswith(name + " ="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def asan_runtime():
    """The AddressSanitizer runtime that the build's shared libraries need
    (a --enable-asan build), or None: the libasan libsinkwatch.so links
    (gcc), or the compiler's shared runtime (clang)."""
    if "address" not in (_build_var("SW_SAN_CFLAGS") or ""):
        return None
    so = os.path.join(os.path.dirname(os.path.abspath(SINKWATCHD)), "client", ".libs",
                      "libsinkwatch.so")
    try:
        out = subprocess.run(["ldd", so], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    m = re.search(r"libasan\.so\S* => (\S+)", out)
    if m:
        return m.group(1)
    cc = (_build_var("CC") or "cc").split()[0]
    try:
        p = subprocess.run([cc, "-print-file-name=libclang_rt.asan-x86_64.so"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p if os.path.isabs(p) and os.path.exists(p) else None


def preload_asan():
    """For a test that loads the build's libraries with ctypes: in a
    sanitizer build, runs this script again with the ASan runtime first in
    the process (LD_PRELOAD), as ASan requires; leak detection is off for
    the interpreter, whose own allocations at exit are not the project's.
    The daemons it starts get neither (Daemon.start)."""
    if os.environ.get("SW_ASAN_PRELOADED"):
        return
    rt = asan_runtime()
    if rt is None:
        return
    env = dict(os.environ, LD_PRELOAD=rt, SW_ASAN_PRELOADED="1",
               SW_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""))
    env["ASAN_OPTIONS"] = (env["SW_ASAN_OPTIONS"] + ":" if env["SW_ASAN_OPTIONS"] else "") + \
        "detect_leaks=0"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def child_env():
    """The environment for a program this test starts: without what
    preload_asan() set for the interpreter alone."""
    env = dict(os.environ)
    if env.pop("SW_ASAN_PRELOADED", None):
        env.pop("LD_PRELOAD", None)
        env["ASAN_OPTIONS"] = env.pop("SW_ASAN_OPTIONS", "")
        if not env["ASAN_OPTIONS"]:
            del env["ASAN_OPTIONS"]
    return env


_HANDED = set()


def free_port():
    """A port free now and never handed out before by this process: the
    kernel may give a port just closed again, and two endpoints of one
    daemon (listen and control) must differ."""
    for _ in range(1000):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _HANDED:
            _HANDED.add(port)
            return port
    raise RuntimeError("no fresh port after 1000 tries")


def control_request(endpoint, req, timeout_ms=2000, keys=None):
    """One request to a control socket (a daemon's or a forwarder's); keys:
    CURVE (server, client public, client secret) or None. TimeoutError when
    nothing answers in time."""
    s = zmq.Context.instance().socket(zmq.REQ)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, timeout_ms)
    if keys:
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = keys
    s.connect(endpoint)
    try:
        s.send(req.encode())
        return s.recv().decode()
    except zmq.Again:
        raise TimeoutError(req)
    finally:
        s.close()


class Daemon:
    def __init__(self, tmp=None, extra=(), data_dir=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix="sinkwatch-test-")
        self.data = data_dir or os.path.join(self.tmp, "data")
        self.port, self.cport = free_port(), free_port()
        self.listen = "tcp://127.0.0.1:%d" % self.port
        self.control = "tcp://127.0.0.1:%d" % self.cport
        self.extra = list(extra)
        self.log = os.path.join(self.tmp, "daemon-%d.log" % self.port)
        self.proc = None
        self.ctl_keys = None    # CURVE for ctl(): (server, client public, client secret)

    def start(self):
        args = [getattr(self, "binary", None) or SINKWATCHD, "--listen", self.listen, "--control", self.control,
                "--data-dir", self.data, "--flush-ms", "100"] + self.extra
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(args, stderr=self.logf, stdout=self.logf, env=child_env())
        if self not in _DAEMONS:
            _DAEMONS.append(self)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sinkwatchd exited: %s" % self.read_log())
            try:
                if "pong" in self.ctl("ping", timeout_ms=200):
                    return self
            except TimeoutError:
                pass
        raise RuntimeError("sinkwatchd did not answer")

    def ctl(self, req, timeout_ms=2000):
        return control_request(self.control, req, timeout_ms, self.ctl_keys)

    def status(self):
        """The status as {section: {key: value}} (runs: list of lines)."""
        out, sec = {}, None
        for line in self.ctl("status").splitlines():
            if line.startswith("# "):
                sec = line[2:]
                out[sec] = {"run": []}
            elif ": " in line and sec:
                k, v = line.split(": ", 1)
                if k == "run":
                    out[sec]["run"].append(v)
                    continue
                try:
                    out[sec][k] = float(v) if "." in v else int(v)
                except ValueError:
                    out[sec][k] = v
        return out

    def wait(self, cond, timeout=10, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.status()
            if cond(st):
                return st
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s; status: %r" % (what, self.status()))

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("sinkwatchd did not stop within %ss" % timeout)
        rc = self.proc.returncode if self.proc else None
        if self.proc:
            self.logf.close()
        self.proc = None
        check_log(self.log)
        return rc

    def read_log(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_ended(self, run, timeout=20):
        """Until the run's file exists and records that the run ended."""
        import h5py
        path = self.run_file(run)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(path):
                try:
                    with h5py.File(path, "r", libver="latest", swmr=True) as f:
                        ended = f["ended"].shape[0] > 0 and f["ended"][-1] == 1
                    if ended:
                        # the mark follows every step on disk, but the writer
                        # closes the file a moment later: until then a plain
                        # (non-SWMR) open is refused
                        with h5py.File(path, "r"):
                            return path
                except (OSError, KeyError):
                    pass
            time.sleep(0.05)
        raise AssertionError("run %s did not end in %ss; log:\n%s"
                             % (run, timeout, self.read_log()))

    def run_file(self, run):
        # a str run id holds bytes that are not UTF-8 as surrogate escapes
        # (os.fsencode gives sinkwatch sim those bytes)
        safe = "".join(c if (c.isascii() and (c.isalnum() or c in "-_.")) else
                       "".join("%%%02X" % b for b in c.encode("utf-8", "surrogateescape"))
                       for c in run)
        if safe.startswith("."):
            safe = "%2E" + safe[1:]
        return os.path.join(self.data, safe + ".h5")


DTYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64}


def set_sender_table(path, rows):
    """Rewrites the sender table of a run file (layout 3) to rows of
    (inc, rank, senders, ended), every other field 0; the tools' view of
    which ranks never ended (issue 26 item 4) reads only this table."""
    import h5py
    with h5py.File(path, "r+") as f:
        names = f.attrs["sender_fields"].split(",")
        t = f["senders"]
        t.resize(len(rows), axis=0)
        v = np.zeros((len(rows), len(names)), dtype=np.uint64)
        for k, (inc, rank, senders, ended) in enumerate(rows):
            v[k, names.index("inc")] = inc
            v[k, names.index("rank")] = rank
            v[k, names.index("senders")] = senders
            v[k, names.index("ended")] = ended
        t[...] = v


class Sender:
    """Speaks the wire protocol directly (header keys in canonical order)."""

    def __init__(self, endpoint, run, layers, heads, model="test", params=0, sink=0,
                 fixed=True, wait=True):
        self.ctx = zmq.Context.instance()
        self.s = self.ctx.socket(zmq.XPUB)
        self.s.setsockopt(zmq.XPUB_NODROP, 1)
        self.s.setsockopt(zmq.SNDHWM, 100000)
        self.s.setsockopt(zmq.LINGER, 5000)
        self.s.connect(endpoint)
        self.run, self.layers, self.heads = run, layers, heads
        self.model, self.params, self.sink, self.fixed = model, params, sink, fixed
        self.seq = 0
        if wait:
            self.wait_subscribed()

    def wait_subscribed(self, timeout=10):
        self.s.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        msg = self.s.recv()
        assert msg[0] == 1, msg

    def header(self, step, layer, kind, dtype, shape, qpos=None, **over):
        h = {"v": 1, "type": "snapshot", "run": self.run, "seq": self.seq,
             "model": self.model, "params": self.params, "layers": self.layers,
             "heads": self.heads, "sink": self.sink, "fixed_probe": self.fixed,
             "step": step, "layer": layer, "kind": kind, "dtype": dtype,
             "shape": list(shape)}
        if qpos is not None:
            h["qpos"] = [int(q) for q in qpos]
        h["time"] = time.time()
        h.update(over)
        return h

    def send_frames(self, frames, topic=None):
        topic = topic if topic is not None else ("sw/" + self.run).encode()
        self.s.send_multipart([topic] + list(frames))
        self.seq += 1

    def snapshot(self, step, layer, tensor, kind="probs", qpos=None, **over):
        dt = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
              np.dtype(np.float64): "f64"}[tensor.dtype]
        h = self.header(step, layer, kind, dt, tensor.shape, qpos, **over)
        self.send_frames([msgpack.packb(h), np.ascontiguousarray(tensor).astype(
            tensor.dtype.newbyteorder("<")).tobytes()])

    def end(self):
        h = {"v": 1, "type": "end", "run": self.run, "seq": self.seq, "time": time.time()}
        self.send_frames([msgpack.packb(h)])

    def close(self):
        self.s.close()


def example_probes(layers, heads, context, steps=45, every=3, run="probes"):
    """The probe attention of contrib/examples/train_tiny_gpt.py (trained
    with no daemon listening) dumped every `every` steps: ({step: [layers]
    of [heads, rows, context] float32}, qpos int64)."""
    import glob
    src = os.environ.get("SW_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    d = tempfile.mkdtemp(prefix="sinkwatch-probes-")
    subprocess.run([sys.executable, os.path.join(src, "contrib", "examples", "train_tiny_gpt.py"),
                    "--steps", str(steps), "--every", str(every), "--batch", "8",
                    "--layers", str(layers), "--heads", str(heads), "--context", str(context),
                    "--dump-probes", d, "--connect", "tcp://127.0.0.1:%d" % free_port(),
                    "--flush-timeout", "0", "--run", run, "--log-every", "1000"],
                   check=True, capture_output=True, timeout=300)
    data = {}
    for path in sorted(glob.glob(os.path.join(d, "probe_*.npy"))):
        st = int(os.path.basename(path)[6:-4])
        a = np.load(path).astype(np.float32)
        data[st] = [np.ascontiguousarray(a[lay]) for lay in range(layers)]
    return data, np.load(os.path.join(d, "qpos.npy")).astype(np.int64)


def random_probs(rng, heads, rows, keys, qpos=None, sink_strength=2.0, dtype=np.float32):
    """[heads, rows, keys] softmax rows with a sink at 0, masked past qpos + 1."""
    z = rng.normal(size=(heads, rows, keys))
    z[:, :, 0] += sink_strength + np.arange(heads)[:, None] * 0.7
    if qpos is not None:
        for r, q in enumerate(qpos):
            z[:, r, q + 1:] = -np.inf
    z -= z.max(-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(-1, keepdims=True)
    return p.astype(dtype)


def run_cmd(args, timeout=60):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, fn):
        t0 = time.time()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report every failure, go on
            import traceback
            self.failed += 1
            print("FAIL %-40s %s" % (name, e))
            traceback.print_exc()
        else:
            self.passed += 1
            print("ok   %-40s %.2fs" % (name, time.time() - t0))

    def finish(self):
        # the daemons of this process that were not stopped through
        # Daemon.stop() (killed, or left running), and any whose log got a
        # report after its check
        for d in _DAEMONS:
            try:
                check_log(d.log)
            except AssertionError as e:
                self.failed += 1
                print("FAIL %-40s %s" % ("sanitizer report", e))
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed else 0


def close(a, b, rel=1e-9, abs_=1e-12):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b)) + abs_


class Forwarder:
    """A `sinkwatch forward` on free loopback ports (tests/e2e/forward.py, bench/scale.py)."""

    def __init__(self, tmp, extra=()):
        self.inp = "tcp://127.0.0.1:%d" % free_port()
        self.out = "tcp://127.0.0.1:%d" % free_port()
        self.control = "tcp://127.0.0.1:%d" % free_port()
        self.log = os.path.join(tmp, "forward-%s.log" % self.control.rsplit(":", 1)[1])
        self.extra = list(extra)
        self.proc = None
        self.ctl_keys = None    # CURVE for ctl(): (server, client public, client secret)

    def start(self):
        self.logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [SINKWATCH, "forward", "--in", self.inp, "--out", self.out,
             "--control", self.control] + self.extra,
            stdout=self.logf, stderr=self.logf, env=child_env())
        deadline = time.time() + 10
        while time.time() < deadline:
            assert self.proc.poll() is None, "forward exited: " + self.read_log()
            try:
                if "pong" in self.ctl("ping", 200):
                    return self
            except TimeoutError:
                pass
        raise AssertionError("forward did not answer: " + self.read_log())

    def ctl(self, req, timeout_ms=2000):
        return control_request(self.control, req, timeout_ms, self.ctl_keys)

    def status(self):
        out, sec = {}, None
        for line in self.ctl("status").splitlines():
            if line.startswith("# "):
                sec = out.setdefault(line[2:], {"prefix": []})
            elif ": " in line and sec is not None:
                k, v = line.split(": ", 1)
                if k == "prefix":
                    sec["prefix"].append(v)
                else:
                    try:
                        sec[k] = float(v) if "." in v else int(v)
                    except ValueError:
                        sec[k] = v
        return out

    def wait(self, cond, timeout=20, what="condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.status()
            if cond(st):
                return st
            time.sleep(0.05)
        raise AssertionError("forward: timed out waiting for %s: %r" % (what, self.status()))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        rc = self.proc.returncode
        self.logf.close()
        check_log(self.log)
        return rc

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()


def sender_for(endpoint, run, layers, heads):
    """A Sender that has seen a subscription matching its run (the forwarder
    passes up those of every daemon: the first may be another's)."""
    s = Sender(endpoint, run, layers, heads, wait=False)
    s.s.setsockopt(zmq.RCVTIMEO, 10000)
    topic = ("sw/" + run).encode()
    while True:
        m = s.s.recv()
        if m[0] == 1 and topic.startswith(m[1:]):
            return s
