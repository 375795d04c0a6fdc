"""sinkwatchd under systemd's notification protocol, faked: NOTIFY_SOCKET is a
datagram socket of this test and WATCHDOG_USEC asks for pings. The daemon
must say READY=1 (with a STATUS) once it listens, update STATUS, ping
WATCHDOG=1 about every WATCHDOG_USEC/2, say RELOADING=1 then READY=1 on
SIGHUP (applying log_level from the reread config file and naming an option
that needs a restart), and STOPPING=1 on SIGTERM. The unit file in contrib/
is Type=notify with a watchdog and the hardening the docs promise."""
import os
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCHD, Daemon, Results  # noqa: E402

SRC = os.environ.get("SW_SRCDIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Notify:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(path)
        self.s.settimeout(0.1)
        self.got = []       # (time, message)

    def pump(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            try:
                self.got.append((time.time(), self.s.recv(4096).decode()))
            except socket.timeout:
                pass

    def lines(self):
        return [ln for _, m in self.got for ln in m.split("\n")]

    def wait_for(self, key, seconds=5):
        end = time.time() + seconds
        while time.time() < end:
            if any(ln.startswith(key) for ln in self.lines()):
                return
            self.pump(0.1)
        raise AssertionError("no %s in %r" % (key, self.lines()))


res = Results()


def case_notify():
    tmp = tempfile.mkdtemp(prefix="sinkwatch-systemd-")
    sock = os.path.join(tmp, "notify")
    conf = os.path.join(tmp, "sinkwatchd.conf")
    with open(conf, "w") as f:
        f.write("log_level = info\n")
    n = Notify(sock)
    os.environ["NOTIFY_SOCKET"] = sock
    os.environ["WATCHDOG_USEC"] = "400000"
    try:
        d = Daemon(tmp=tmp, extra=["--config", conf]).start()
    finally:
        del os.environ["NOTIFY_SOCKET"], os.environ["WATCHDOG_USEC"]
    try:
        n.wait_for("READY=1")
        first = n.lines()
        assert any(ln.startswith("STATUS=listening on %s" % d.listen) for ln in first), first
        # pings every 200 ms from the loop; STATUS every 5 s
        n.got = []
        n.pump(1.6)
        pings = [t for t, m in n.got if "WATCHDOG=1" in m]
        assert 5 <= len(pings) <= 10, pings
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert max(gaps) < 0.4, gaps
        n.pump(4.0)
        assert any(ln.startswith("STATUS=") and "messages" in ln for ln in n.lines()), n.lines()
        # SIGHUP: the config file read again; log_level applies now, budget_mb
        # at the next start (and says so)
        with open(conf, "w") as f:
            f.write("log_level = debug\nbudget_mb = 1000\n")
        n.got = []
        d.proc.send_signal(signal.SIGHUP)
        n.wait_for("RELOADING=1")
        n.wait_for("READY=1")
        assert n.lines().index("RELOADING=1") < n.lines().index("READY=1")
        time.sleep(0.3)
        log = d.read_log()
        assert "SIGHUP: log_level info -> debug" in log, log[-2000:]
        assert "SIGHUP: budget_mb changed in the configuration: it applies at the next start" \
            in log, log[-2000:]
        # a configuration that is not valid changes nothing and says why
        with open(conf, "w") as f:
            f.write("log_level = loud\n")
        d.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert "SIGHUP: the configuration is not valid, nothing changed" in d.read_log()
        assert "pong" in d.ctl("ping")
        n.got = []
    finally:
        assert d.stop() == 0
    n.pump(0.3)
    assert any(ln == "STOPPING=1" for ln in n.lines()), n.lines()


def case_no_socket():
    """Without NOTIFY_SOCKET nothing is sent and nothing fails."""
    d = Daemon().start()
    assert "pong" in d.ctl("ping")
    assert d.stop() == 0
    assert "watchdog" not in d.read_log()


def case_unit():
    path = os.path.join(SRC, "contrib", "sinkwatchd.service.in")
    text = open(path).read()
    keys = {}
    for ln in text.splitlines():
        if "=" in ln and not ln.startswith("#"):
            k, v = ln.split("=", 1)
            keys[k] = v
    assert keys["Type"] == "notify" and keys["WatchdogSec"], keys
    assert keys["ExecReload"] == "/bin/kill -HUP $MAINPID"
    for k in ("ProtectSystem", "StateDirectory", "DynamicUser", "NoNewPrivileges",
              "PrivateTmp", "ProtectHome"):
        assert k in keys, k
    assert keys["ProtectSystem"] == "strict" and keys["DynamicUser"] == "yes"
    assert "--data-dir ${STATE_DIRECTORY}" in keys["ExecStart"]


if not SINKWATCHD:
    print("SINKWATCHD not set: skipped")
    sys.exit(77)
res.check("notify", case_notify)
res.check("no_socket", case_no_socket)
res.check("unit", case_unit)
sys.exit(res.finish())
