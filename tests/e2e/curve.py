#!/usr/bin/python3
"""Security across hosts (issue 15): CURVE with a ZAP allow list, real keys.

`sinkwatch keygen` writes a key pair (the secret 0600, never over an
existing file); sinkwatchd refuses to listen beyond loopback without keys
(or the insecure flag); with keys, a sender whose key is allowed is stored
and one whose key is not (or that has no keys) is refused, counted by the
daemon (status auth, /metrics, its key logged once) and seen by the sender
(auth_failures), for the C client (tests/curve_client on libsinkwatch) and
the Python client; the control socket takes the same keys; SIGHUP reads the
allow list again. CURVE on each hop of a forwarder (`sinkwatch forward`):
the jobs' keys on its --in and --control, the daemons' keys (their own key
pairs, sinkwatchd --connect-server-key) on its --out; a job's key cannot
subscribe; each refusal counted on both ends.

    SINKWATCH=./sinkwatch SINKWATCHD=./sinkwatchd abs_top_builddir=$PWD \\
        /usr/bin/python3 tests/e2e/curve.py [CASE...]
"""
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import zmq

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))
sys.path.insert(0, os.path.join(SRCDIR, "contrib", "python"))
from swharness import (SINKWATCH, SINKWATCHD, Daemon, Forwarder, Results,  # noqa: E402
                       child_env, free_port)

import sinkwatch  # noqa: E402

if not SINKWATCH or not SINKWATCHD:
    print("SINKWATCH and SINKWATCHD must be set: skipped")
    sys.exit(77)
if not zmq.has("curve"):
    print("libzmq without CURVE: skipped")
    sys.exit(77)

BUILD = os.environ.get("abs_top_builddir") or os.path.dirname(os.path.abspath(SINKWATCHD))
CURVE_CLIENT = os.path.join(BUILD, "tests", "curve_client")


def keygen(base, umask=0):
    old = os.umask(umask)
    try:
        p = subprocess.run([SINKWATCH, "keygen", "--out", base], capture_output=True,
                           text=True, timeout=30, env=child_env())
    finally:
        os.umask(old)
    return p.returncode, p.stdout, p.stderr


def last_key(path):
    with open(path) as f:
        return f.read().split()[-1]


class Keys:
    """A key pair made by sinkwatch keygen."""

    def __init__(self, d, name):
        self.base = os.path.join(d, name)
        rc, out, err = keygen(self.base)
        assert rc == 0, err
        self.key, self.pub = self.base + ".key", self.base + ".pub"
        self.public = last_key(self.pub)
        self.secret = last_key(self.key)


def c_send(endpoint, run, *args, env=None):
    """tests/curve_client: its final counters as a dict, or its error code."""
    e = child_env()
    e.pop("SINKWATCH_SERVER_KEY", None)
    e.pop("SINKWATCH_CLIENT_KEY_FILE", None)
    e.update(env or {})
    p = subprocess.run([CURVE_CLIENT, endpoint, run] + list(args), capture_output=True,
                       text=True, timeout=60, env=e)
    assert p.returncode in (0, 2), (p.returncode, p.stdout, p.stderr)
    return {k: int(v) for k, v in (ln.split("=") for ln in p.stdout.split())}


def py_send(endpoint, run, steps=3, wait=3.0, **kw):
    """The Python client's final stats after a run of `steps` steps."""
    x = np.full((2, 3, 8), 1 / 8, np.float32)
    c = sinkwatch.Client(run, 1, 2, endpoint=endpoint, model="curve-test", **kw)
    t0 = time.time()
    while time.time() - t0 < wait:
        c.flush(0.02)
        st = c.stats
        if st["subscribed"] or st["auth_failures"]:
            break
    for s in range(steps):
        c.send(s, 0, x)
    c.end()
    return c.close()


def run_status(control, *args, env=None):
    """sinkwatch status of one control endpoint, keys only from args or env."""
    e = child_env()
    e.pop("SINKWATCH_SERVER_KEY", None)
    e.pop("SINKWATCH_CLIENT_KEY_FILE", None)
    e.update(env or {})
    p = subprocess.run([SINKWATCH, "status", "--control", control, "--timeout-ms", "1500"]
                       + list(args), capture_output=True, text=True, timeout=30, env=e)
    return p.returncode, p.stdout, p.stderr


def status_cmd(d, *args, env=None):
    return run_status(d.control, *args, env=env)


def steps_of(path):
    import h5py
    with h5py.File(path, "r") as f:
        return list(f["step"][:])


# ---------------------------------------------------------------- cases

def case_keygen():
    """Two files, the secret 0600 (whatever the umask), the public printed
    and equal to the secret's; an existing file is never overwritten."""
    d = tempfile.mkdtemp(prefix="sinkwatch-keygen-")
    base = os.path.join(d, "srv")
    rc, out, err = keygen(base, umask=0)
    assert rc == 0, err
    assert stat.S_IMODE(os.stat(base + ".key").st_mode) == 0o600, oct(os.stat(base + ".key").st_mode)
    assert stat.S_IMODE(os.stat(base + ".pub").st_mode) == 0o644
    pub, sec = last_key(base + ".pub"), last_key(base + ".key")
    assert out.strip() == pub, (out, pub)
    assert len(pub) == 40 and len(sec) == 40
    assert zmq.curve_public(sec.encode()).decode() == pub
    assert sinkwatch.read_key(base + ".key", secret=True) == sec
    with open(base + ".key", "rb") as f:
        before = f.read()
    rc, out, err = keygen(base)
    assert rc == 2 and "exists: not overwritten" in err and not out, (rc, out, err)
    with open(base + ".key", "rb") as f:
        assert f.read() == before
    os.unlink(base + ".key")        # the public alone is in the way too
    rc, out, err = keygen(base)
    assert rc == 2 and base + ".pub exists" in err, err
    assert not os.path.exists(base + ".key")
    rc, out, err = keygen(os.path.join(d, "other"), umask=0o022)
    assert rc == 0 and out.strip() != pub
    p = subprocess.run([SINKWATCH, "keygen", "stray"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown argument 'stray'" in p.stderr, p.stderr


def start(args):
    p = subprocess.run([SINKWATCHD] + args, capture_output=True, text=True, timeout=30,
                       env=child_env())
    return p.returncode, p.stderr


def case_start_refusal():
    """Beyond loopback without keys: refused at start (and by
    --check-config), the message naming the fix; the insecure flag starts
    it with a warning; a secret key others may read, or keys without an
    allow list, are refused too."""
    d = tempfile.mkdtemp(prefix="sinkwatch-refuse-")
    data = os.path.join(d, "data")
    port, cport = free_port(), free_port()
    base = ["--data-dir", data, "--control", "tcp://127.0.0.1:%d" % cport]
    for listen in ("tcp://0.0.0.0:%d" % port, "tcp://*:%d" % port):
        rc, err = start(base + ["--listen", listen])
        assert rc == 2, (rc, err)
        assert "%s is beyond loopback and CURVE is off" % listen in err, err
        assert "--curve-secret-file FILE and --curve-allow FILE" in err, err
        assert "--insecure-off-loopback 1" in err, err
    rc, err = start(base + ["--listen", "tcp://0.0.0.0:%d" % port, "--check-config"])
    assert rc == 2 and "beyond loopback" in err, err
    rc, err = start(["--data-dir", data, "--control", "tcp://*:%d" % cport])
    assert rc == 2 and "tcp://*:%d is beyond loopback" % cport in err, err
    assert not os.path.exists(data)     # refused before anything was made
    srv = Keys(d, "srv")
    rc, err = start(base + ["--curve-secret-file", srv.key])
    assert rc == 2 and "curve_secret_file and curve_allow go together" in err, err
    os.chmod(srv.key, 0o644)
    rc, err = start(base + ["--listen", "tcp://127.0.0.1:%d" % port, "--curve-secret-file",
                            srv.key, "--curve-allow", srv.pub])
    assert rc == 2 and "readable by others (mode 0644): chmod 600" in err, err
    os.chmod(srv.key, 0o600)
    bad = os.path.join(d, "allow")
    with open(bad, "w") as f:
        f.write("# allowed\n%s\nnot-a-key\n" % srv.public)
    rc, err = start(base + ["--listen", "tcp://127.0.0.1:%d" % port, "--curve-secret-file",
                            srv.key, "--curve-allow", bad])
    assert rc == 2 and "allow:3: not a CURVE public key" in err, err
    # the insecure flag: it starts, says so, and takes runs from anyone
    dm = Daemon(extra=["--insecure-off-loopback", "1"])
    dm.listen = "tcp://0.0.0.0:%d" % dm.port
    dm.start()
    try:
        st = c_send("tcp://127.0.0.1:%d" % dm.port, "open-run", "--steps", "2")
        assert st["sent"] == 3 and st["auth_failures"] == 0, st
        dm.wait_ended("open-run")
        log = dm.read_log()
    finally:
        assert dm.stop() == 0
    assert "listening beyond loopback without CURVE (insecure_off_loopback)" in log, log


def case_empty_allow():
    """Issue 27, item 12: an allow list with no key refuses everyone, the
    operator's own status too: said with a warning at start and at SIGHUP."""
    d = tempfile.mkdtemp(prefix="sinkwatch-emptyallow-")
    srv = Keys(d, "srv")
    allow = os.path.join(d, "allow")
    with open(allow, "w") as f:
        f.write("# nobody yet\n")
    log = os.path.join(d, "log")
    with open(log, "w") as lf:
        p = subprocess.Popen([SINKWATCHD, "--listen", "tcp://127.0.0.1:%d" % free_port(),
                              "--control", "tcp://127.0.0.1:%d" % free_port(),
                              "--data-dir", os.path.join(d, "data"),
                              "--curve-secret-file", srv.key, "--curve-allow", allow],
                             stdout=lf, stderr=lf, env=child_env())
    try:
        def said(n, what="allows no client key"):
            deadline = time.time() + 10
            while time.time() < deadline:
                with open(log) as f:
                    if f.read().count(what) >= n:
                        return True
                time.sleep(0.05)
            return False
        assert said(1), open(log).read()
        # a SIGHUP before the loop has taken the signal is no reload: wait
        # for the daemon to be up (CI sent it between the two lines once)
        assert said(1, "listening on"), open(log).read()
        p.send_signal(signal.SIGHUP)
        assert said(2), open(log).read()
    finally:
        p.terminate()
        p.wait(20)


def case_revoke():
    """Issue 27, item 10: a key removed from the allow list (SIGHUP) stops
    getting in on the connection it already has: its messages are dropped,
    counted (revoked), never stored."""
    d = tempfile.mkdtemp(prefix="sinkwatch-revoke-")
    srv, alice, other = Keys(d, "srv"), Keys(d, "alice"), Keys(d, "other")
    allow = os.path.join(d, "allow")
    with open(allow, "w") as f:
        f.write("%s\n" % alice.public)
    dm = Daemon(extra=["--curve-secret-file", srv.key, "--curve-allow", allow])
    dm.ctl_keys = (srv.public.encode(), alice.public.encode(), alice.secret.encode())
    dm.start()
    x = np.full((2, 3, 8), 1 / 8, np.float32)
    c = sinkwatch.Client("revoked", 1, 2, endpoint=dm.listen, model="curve-test",
                         server_key=srv.public, key_file=alice.key)
    try:
        t0 = time.time()
        while not c.stats["subscribed"] and time.time() - t0 < 5:
            c.flush(0.02)
        for s in range(2):
            c.send(s, 0, x)
        c.flush(2)
        dm.wait(lambda st: st["writer"]["steps_written"] >= 2, what="2 steps stored")
        with open(allow, "w") as f:      # alice's key revoked
            f.write("%s\n" % other.public)
        dm.ctl_keys = None
        dm.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "SIGHUP: 1 client key(s) allowed" not in dm.read_log():
            assert time.time() < deadline, dm.read_log()
            time.sleep(0.05)
        for s in range(2, 5):
            c.send(s, 0, x)
        c.end()
        c.close()
        deadline = time.time() + 10
        while True:
            rc, st, err = run_status(dm.control, "--server-key", srv.public, "--key-file",
                                     other.key)
            m = re.search(r"^revoked: (\d+)$", st, re.M)
            if m and int(m.group(1)) == 4 or time.time() > deadline:
                break
            time.sleep(0.1)
        assert m and int(m.group(1)) == 4, st    # 3 snapshots and the end
    finally:
        dm.stop()
    assert steps_of(dm.run_file("revoked")) == [0, 1]


def case_allowed_later():
    """Issue 27, item 10: a client refused (400) connects again every 5 s,
    so a key the daemon allows later (SIGHUP) gets in without restarting
    the job: C and Python."""
    d = tempfile.mkdtemp(prefix="sinkwatch-later-")
    srv, alice, bob, carol = Keys(d, "srv"), Keys(d, "alice"), Keys(d, "bob"), Keys(d, "carol")
    allow = os.path.join(d, "allow")
    with open(allow, "w") as f:
        f.write("%s\n" % alice.public)
    dm = Daemon(extra=["--curve-secret-file", srv.key, "--curve-allow", allow])
    dm.ctl_keys = (srv.public.encode(), alice.public.encode(), alice.secret.encode())
    dm.start()
    try:
        # C: bob refused, then allowed while the client waits for a subscription
        p = subprocess.Popen([CURVE_CLIENT, dm.listen, "c-later", "--wait-ms", "15000",
                              "--server-key", srv.public, "--key-file", bob.key],
                             stdout=subprocess.PIPE, text=True, env=child_env())
        # Python: carol likewise
        c = sinkwatch.Client("py-later", 1, 2, endpoint=dm.listen, model="curve-test",
                             server_key=srv.public, key_file=carol.key)
        t0 = time.time()
        while c.stats["auth_status"] != 400 and time.time() - t0 < 5:
            c.flush(0.05)
        assert c.stats["auth_status"] == 400, c.stats
        with open(allow, "a") as f:
            f.write("%s\n%s\n" % (bob.public, carol.public))
        dm.proc.send_signal(signal.SIGHUP)
        t0 = time.time()
        while not c.stats["subscribed"] and time.time() - t0 < 12:
            c.flush(0.05)
        assert c.stats["subscribed"], c.stats
        x = np.full((2, 3, 8), 1 / 8, np.float32)
        for s in range(3):
            c.send(s, 0, x)
        c.end()
        c.close()
        out, _ = p.communicate(timeout=30)
        st = dict(line.split("=", 1) for line in out.split())
        assert st["subscribed"] == "1" and st["sent"] == "4", out
        assert steps_of(dm.wait_ended("c-later")) == [0, 1, 2]
        assert steps_of(dm.wait_ended("py-later")) == [0, 1, 2]
    finally:
        dm.stop()


def case_curve():
    """One allowed key (alice) and one refused (mallory), C and Python, the
    control socket, the counts, the log, /metrics, and SIGHUP."""
    d = tempfile.mkdtemp(prefix="sinkwatch-curve-")
    srv, alice, mallory = Keys(d, "srv"), Keys(d, "alice"), Keys(d, "mallory")
    allow = os.path.join(d, "allow")
    with open(allow, "w") as f:
        f.write("# who may send\n%s   # alice\n" % alice.public)
    mport = free_port()
    dm = Daemon(extra=["--curve-secret-file", srv.key, "--curve-allow", allow,
                       "--metrics-listen", "127.0.0.1:%d" % mport])
    dm.ctl_keys = (srv.public.encode(), alice.public.encode(), alice.secret.encode())
    dm.start()
    ep = dm.listen
    env_alice = {"SINKWATCH_SERVER_KEY": srv.public, "SINKWATCH_CLIENT_KEY_FILE": alice.key}
    try:
        # C: allowed by options (server key from its file) and by the environment
        st = c_send(ep, "c-alice", "--server-key", srv.pub, "--key-file", alice.key)
        assert st["subscribed"] == 1 and st["sent"] == 4 and st["dropped"] == 0, st
        assert st["auth_failures"] == 0 and st["auth_status"] == 0, st
        st = c_send(ep, "c-env", env=env_alice)
        assert st["sent"] == 4 and st["auth_failures"] == 0, st
        # C: refused (a key not allowed), and without keys
        st = c_send(ep, "c-mallory", "--server-key", srv.public, "--key-file", mallory.key,
                    "--wait-ms", "1500")
        assert st["subscribed"] == 0 and st["sent"] == 0 and st["dropped"] == 4, st
        assert st["auth_failures"] >= 1 and st["auth_status"] == 400, st
        st = c_send(ep, "c-nokey", "--wait-ms", "1000")
        assert st["sent"] == 0 and st["auth_failures"] >= 1 and st["auth_status"] == -1, st
        st = c_send(ep, "c-half", "--server-key", srv.public)
        assert st == {"error": -7}, st          # SW_EKEY: a key file is needed too
        # Python: allowed, refused, from the environment
        st = py_send(ep, "py-alice", server_key=srv.pub, key_file=alice.key)
        assert st["sent"] == 4 and st["dropped"] == 0 and st["auth_failures"] == 0, st
        st = py_send(ep, "py-mallory", wait=1.5, server_key=srv.public, key_file=mallory.key)
        assert st["sent"] == 0 and st["auth_failures"] >= 1 and st["auth_status"] == 400, st
        old = dict(os.environ)
        os.environ.update(env_alice)
        try:
            st = py_send(ep, "py-env")
        finally:
            os.environ.clear()
            os.environ.update(old)
        assert st["sent"] == 4 and st["auth_failures"] == 0, st
        try:
            sinkwatch.Client("x", 1, 1, endpoint=ep, key_file=alice.key)
            raise AssertionError("a key file without a server key was taken")
        except ValueError as e:
            assert "needs both server_key and key_file" in str(e), e
        for run in ("c-alice", "c-env", "py-alice", "py-env"):
            assert steps_of(dm.wait_ended(run)) == [0, 1, 2], run
        # the control socket: the same keys
        rc, out, err = status_cmd(dm, "--server-key", srv.pub, "--key-file", alice.key, "auth")
        assert rc == 0 and "curve: on\n" in out and "allowed_keys: 1\n" in out, (rc, out, err)
        assert "public_key: %s\n" % srv.public in out, out
        rc, out, err = status_cmd(dm, "auth", env=env_alice)
        assert rc == 0 and "curve: on" in out, err
        rc, out, err = status_cmd(dm, "auth")
        assert rc == 2 and "with CURVE on, give --server-key and --key-file" in err, err
        rc, out, err = status_cmd(dm, "--server-key", srv.pub, "--key-file", mallory.key)
        assert rc == 2 and "does it allow this client's key" in err, err
        rc, out, err = status_cmd(dm, "--key-file", alice.key)
        assert rc == 2 and "needs both" in err, err
        st = dm.wait(lambda s: s["auth"]["refused_key_control"] >= 1 and
                     s["auth"]["handshake_failed_control"] >= 1, what="control refusals")
        a = st["auth"]
        assert a["refused_key_data"] >= 2, a          # C and Python, mallory's key
        assert a["handshake_failed_data"] >= 1, a     # the sender without keys
        assert a["allowed_keys"] == 1 and a["handshakes_allowed"] >= 4, a
        # nothing of the refused senders stored
        for run in ("c-mallory", "c-nokey", "py-mallory"):
            assert not os.path.exists(dm.run_file(run)), run
        # /metrics: the same counts, by socket and reason
        deadline = time.time() + 5
        while True:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as r:
                text = r.read().decode()
            m = re.search(r'^sinkwatch_handshakes_refused_total\{socket="data",'
                          r'reason="key_not_allowed"\} (\d+)$', text, re.M)
            if (m and int(m.group(1)) >= 2) or time.time() > deadline:
                break
            time.sleep(0.2)
        assert m and int(m.group(1)) >= 2, text
        assert re.search(r'^sinkwatch_handshakes_refused_total\{socket="data",'
                         r'reason="handshake_failed"\} [1-9]', text, re.M), text
        assert "sinkwatch_curve_enabled 1\n" in text, text
        # mallory's key named once in the log, however often refused
        log = dm.read_log()
        assert log.count(mallory.public) == 1, log
        assert "not in %s" % allow in log, log
        assert alice.public not in log, log
        # SIGHUP: mallory is allowed now
        with open(allow, "a") as f:
            f.write("%s\n" % mallory.public)
        dm.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "SIGHUP: 2 client key(s) allowed" not in dm.read_log():
            assert time.time() < deadline, dm.read_log()
            time.sleep(0.05)
        st = c_send(ep, "c-mallory-later", "--server-key", srv.public, "--key-file",
                    mallory.key)
        assert st["sent"] == 4 and st["auth_failures"] == 0, st
        assert steps_of(dm.wait_ended("c-mallory-later")) == [0, 1, 2]
        assert dm.status()["auth"]["allowed_keys"] == 2
    finally:
        assert dm.stop() == 0


def case_forward_hop():
    """CURVE on both hops of a forwarder: an allowed job (C and Python) is
    stored, whole, by the daemon whose key the forwarder allows on --out; a
    job key not allowed is refused on --in; a daemon holding a job's key (in
    --curve-allow, not in --curve-allow-daemons) cannot subscribe and read
    the runs, and a daemon without keys cannot either; the forwarder counts
    each by socket, the refused daemon counts and logs its own refusal;
    SIGHUP lets it in. Start refusals name the missing option."""
    d = tempfile.mkdtemp(prefix="sinkwatch-fwdcurve-")
    fk, alice, mallory, dk = Keys(d, "fwd"), Keys(d, "alice"), Keys(d, "mallory"), Keys(d, "dmn")
    jobs, daemons, ops = (os.path.join(d, n) for n in ("jobs", "daemons", "ops"))
    with open(jobs, "w") as f:
        f.write("%s # alice\n" % alice.public)
    with open(daemons, "w") as f:
        f.write("%s # the daemon\n" % dk.public)
    with open(ops, "w") as f:
        f.write("%s\n" % alice.public)

    # start refusals: each names what is missing
    def fwd_start(args):
        p = subprocess.run([SINKWATCH, "forward"] + args, capture_output=True, text=True,
                           timeout=30, env=child_env())
        return p.returncode, p.stderr
    lo = ["--in", "tcp://127.0.0.1:%d" % free_port(), "--out",
          "tcp://127.0.0.1:%d" % free_port(), "--control", "tcp://127.0.0.1:%d" % free_port()]
    rc, err = fwd_start(lo[:1] + ["tcp://0.0.0.0:%d" % free_port()] + lo[2:])
    assert rc == 2 and "is beyond loopback and CURVE is off" in err, err
    assert "--curve-allow-daemons" in err and "--insecure-off-loopback 1" in err, err
    rc, err = fwd_start(lo + ["--curve-secret-file", fk.key, "--curve-allow", jobs])
    assert rc == 2 and "CURVE takes all three" in err, err
    dd = os.path.join(d, "nodata")
    rc, err = start(["--data-dir", dd, "--connect", "tcp://10.1.2.3:5720"])
    assert rc == 2 and "tcp://10.1.2.3:5720 is beyond loopback and the hop to it is plain" \
        in err and "--connect-server-key" in err, err
    rc, err = start(["--data-dir", dd, "--connect-server-key", fk.public])
    assert rc == 2 and "give connect too" in err, err
    rc, err = start(["--data-dir", dd, "--connect", "tcp://127.0.0.1:5720",
                     "--connect-server-key", fk.public])
    assert rc == 2 and "connect_server_key needs curve_secret_file" in err, err
    assert not os.path.exists(dd)

    fw = Forwarder(d, ["--curve-secret-file", fk.key, "--curve-allow", jobs,
                       "--curve-allow-daemons", daemons])
    fw.ctl_keys = (fk.public.encode(), alice.public.encode(), alice.secret.encode())
    fw.start()
    hop = ["--connect", fw.out, "--connect-server-key", fk.pub, "--curve-allow", ops]
    good = Daemon(tmp=d, data_dir=os.path.join(d, "good"),
                  extra=hop + ["--curve-secret-file", dk.key])
    thief = Daemon(tmp=d, data_dir=os.path.join(d, "thief"),
                   extra=hop + ["--curve-secret-file", alice.key, "--subscribe", "c-later"])
    plain = Daemon(tmp=d, data_dir=os.path.join(d, "plain"), extra=["--connect", fw.out])
    for dm, k in ((good, dk), (thief, alice)):
        dm.ctl_keys = (k.public.encode(), alice.public.encode(), alice.secret.encode())
    daemons_up = [good.start(), thief.start(), plain.start()]
    try:
        st = fw.wait(lambda s: s["subscriptions"]["prefixes"] == 1 and
                     s["auth"]["refused_key_out"] >= 1 and
                     s["auth"]["handshake_failed_out"] >= 1, what="one subscriber, two refused")
        a = st["auth"]
        assert a["curve"] == "on" and a["public_key"] == fk.public, a
        assert a["allowed_keys"] == 1 and a["allowed_daemon_keys"] == 1, a
        # jobs: alice (C, Python) in, mallory out
        c = c_send(fw.inp, "c-alice", "--server-key", fk.pub, "--key-file", alice.key)
        assert c["subscribed"] == 1 and c["sent"] == 4 and c["auth_failures"] == 0, c
        c = py_send(fw.inp, "py-alice", server_key=fk.public, key_file=alice.key)
        assert c["sent"] == 4 and c["dropped"] == 0 and c["auth_failures"] == 0, c
        c = c_send(fw.inp, "c-mallory", "--server-key", fk.public, "--key-file", mallory.key,
                   "--wait-ms", "1500")
        assert c["sent"] == 0 and c["auth_failures"] >= 1 and c["auth_status"] == 400, c
        c = c_send(fw.inp, "c-nokey", "--wait-ms", "1000")
        assert c["sent"] == 0 and c["auth_failures"] >= 1, c
        for run in ("c-alice", "py-alice"):
            assert steps_of(good.wait_ended(run)) == [0, 1, 2], run
        st = fw.wait(lambda s: s["auth"]["refused_key_in"] >= 1 and
                     s["auth"]["handshake_failed_in"] >= 1 and s["traffic"]["disconnects"] >= 1,
                     what="mallory refused, the job without keys failed, both counted")
        assert st["traffic"]["forwarded"] == 8 and st["drops"]["dropped"] == 0, st
        for dm in (thief, plain):
            assert not [n for n in os.listdir(dm.data) if n.endswith(".h5")], dm.data
            assert dm.status()["traffic"]["messages"] == 0
        # the refused daemon knows: its status, its log (once)
        t = thief.wait(lambda s: s["auth"]["upstream_refused_key"] >= 1, what="its refusal")
        assert t["auth"]["upstream"] == fw.out and t["auth"]["upstream_curve"] == "on", t
        g = good.status()["auth"]
        assert g["upstream_curve"] == "on" and g["upstream_refused_key"] == 0, g
        assert g["upstream_handshake_failed"] == 0, g
        log = thief.read_log()
        assert log.count("refused this daemon's key") == 1, log
        # the forwarder's control socket takes the operators' keys only
        rc, out, err = run_status(fw.control, "--server-key", fk.pub, "--key-file", alice.key,
                                  "auth")
        assert rc == 0 and "curve: on\n" in out and "refused_key_in: " in out, (out, err)
        rc, out, err = run_status(fw.control, "--server-key", fk.pub, "--key-file", mallory.key)
        assert rc == 2 and "does it allow this client's key" in err, err
        assert fw.read_log().count(mallory.public) == 1, fw.read_log()
        # SIGHUP: the thief's key is now a daemon key; it subscribes and takes a new run
        with open(daemons, "a") as f:
            f.write("%s\n" % alice.public)
        fw.proc.send_signal(signal.SIGHUP)
        fw.wait(lambda s: s["auth"]["allowed_daemon_keys"] == 2 and
                "sw/c-later" in s["subscriptions"]["prefix"], what="the second daemon in")
        c = c_send(fw.inp, "c-later", "--server-key", fk.pub, "--key-file", alice.key)
        assert c["sent"] == 4 and c["auth_failures"] == 0, c
        for dm in (good, thief):
            assert steps_of(dm.wait_ended("c-later")) == [0, 1, 2]
    finally:
        for dm in daemons_up:
            assert dm.stop() == 0, dm.read_log()
        assert fw.stop() == 0, fw.read_log()


def case_env_everywhere():
    """The environment holds for every client alike (issue 28): the C
    client, sinkwatch status and sinkwatchd --connect take the server's key
    from SINKWATCH_SERVER_KEY and their secret key file from
    SINKWATCH_CLIENT_KEY_FILE; one of the two alone is refused by each,
    naming both."""
    d = tempfile.mkdtemp(prefix="sinkwatch-env-")
    fk, alice, dk = Keys(d, "fwd"), Keys(d, "alice"), Keys(d, "dmn")
    jobs, daemons = os.path.join(d, "jobs"), os.path.join(d, "daemons")
    with open(jobs, "w") as f:
        f.write("%s # alice\n" % alice.public)
    with open(daemons, "w") as f:
        f.write("%s # the daemon\n" % dk.public)
    fw = Forwarder(d, ["--curve-secret-file", fk.key, "--curve-allow", jobs,
                       "--curve-allow-daemons", daemons])
    fw.ctl_keys = (fk.public.encode(), alice.public.encode(), alice.secret.encode())
    fw.start()
    env_job = {"SINKWATCH_SERVER_KEY": fk.public, "SINKWATCH_CLIENT_KEY_FILE": alice.key}
    env_dmn = {"SINKWATCH_SERVER_KEY": fk.pub, "SINKWATCH_CLIENT_KEY_FILE": dk.key}
    dm = None
    try:
        # the daemon with half the pair: refused at start, both named
        e = child_env()
        e.pop("SINKWATCH_CLIENT_KEY_FILE", None)
        e["SINKWATCH_SERVER_KEY"] = fk.pub
        p = subprocess.run([SINKWATCHD, "--data-dir", os.path.join(d, "half"), "--connect",
                            fw.out, "--control", "tcp://127.0.0.1:%d" % free_port()],
                           capture_output=True, text=True, timeout=30, env=e)
        assert p.returncode == 2 and "needs both" in p.stderr, p.stderr
        assert "connect_server_key or SINKWATCH_SERVER_KEY" in p.stderr, p.stderr
        assert "curve_secret_file or SINKWATCH_CLIENT_KEY_FILE" in p.stderr, p.stderr
        # the daemon with both: the hop is CURVE, with its keys from the environment
        old = dict(os.environ)
        os.environ.update(env_dmn)
        try:
            dm = Daemon(tmp=d, data_dir=os.path.join(d, "envd"), extra=["--connect", fw.out])
            dm.start()
        finally:
            os.environ.clear()
            os.environ.update(old)
        fw.wait(lambda s: s["subscriptions"]["prefixes"] == 1, what="the daemon in")
        a = dm.status()["auth"]
        assert a["upstream"] == fw.out and a["upstream_curve"] == "on", a
        assert ("the hop from the forwarder at %s is CURVE: its key %s, this daemon's %s" %
                (fw.out, fk.public, dk.public)) in dm.read_log(), dm.read_log()
        # the C client and sinkwatch status, from the environment alone
        c = c_send(fw.inp, "c-env", env=env_job)
        assert c["sent"] == 4 and c["auth_failures"] == 0, c
        assert steps_of(dm.wait_ended("c-env")) == [0, 1, 2]
        rc, out, err = run_status(fw.control, "auth", env=env_job)
        assert rc == 0 and "curve: on\n" in out, (out, err)
        rc, out, err = run_status(fw.control, env={"SINKWATCH_CLIENT_KEY_FILE": alice.key})
        assert rc == 2 and "needs both" in err, err
        assert "--server-key or SINKWATCH_SERVER_KEY" in err, err
        c = c_send(fw.inp, "c-half", env={"SINKWATCH_SERVER_KEY": fk.public})
        assert c == {"error": -7}, c
    finally:
        if dm:
            assert dm.stop() == 0, dm.read_log()
        assert fw.stop() == 0, fw.read_log()


CASES = {"keygen": case_keygen, "start_refusal": case_start_refusal, "curve": case_curve,
         "forward_hop": case_forward_hop, "empty_allow": case_empty_allow,
         "revoke": case_revoke, "allowed_later": case_allowed_later,
         "env_everywhere": case_env_everywhere}


def main():
    c = Results()
    for name in sys.argv[1:] or list(CASES):
        c.check(name, CASES[name])
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
