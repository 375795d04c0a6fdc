#!/usr/bin/python3
"""One endpoint setting (issue 29): SINKWATCH_ENDPOINT and SINKWATCH_CONTROL
for sinkwatch sim and sinkwatch status against a daemon on free ports, the
option given winning over the variable (sim's --connect kept as an alias);
sinkwatch status naming the daemon's sections for an unknown one; sinkwatch
demo with --listen, --control and --data-dir, and on its own, while something
else holds 127.0.0.1:5710.

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. \\
        /usr/bin/python3 tests/e2e/endpoint.py [CASE...]
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SW = os.environ.get("SINKWATCH")
if not os.environ.get("SINKWATCHD") or not SW:
    print("SINKWATCHD/SINKWATCH not set: skipped")
    sys.exit(77)
sys.path.insert(0, os.path.join(SRCDIR, "tests", "e2e"))

from swharness import Daemon, Results, child_env, free_port  # noqa: E402

VARS = ("SINKWATCH_ENDPOINT", "SINKWATCH_CONTROL")


def sw(args, env=None, cwd=None, timeout=120):
    e = child_env()
    for k in VARS:
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([SW] + args, capture_output=True, text=True, timeout=timeout, env=e,
                       cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def nobody():
    return "tcp://127.0.0.1:%d" % free_port()


def sim(d, run, flags=(), env=None):
    rc, out, err = sw(["sim", "--run", run, "--steps", "3", "--layers", "2", "--heads", "2",
                       "--blocking"] + list(flags), env=env)
    assert rc == 0, (run, rc, err)
    path = d.wait_ended(run)
    assert os.path.exists(path), path


def t_sim(d):
    """sim sends where SINKWATCH_ENDPOINT says; --endpoint and --connect win."""
    sim(d, "env-sim", env={"SINKWATCH_ENDPOINT": d.listen})
    sim(d, "env-sim-given", ["--endpoint", d.listen], env={"SINKWATCH_ENDPOINT": nobody()})
    sim(d, "env-sim-connect", ["--connect", d.listen], env={"SINKWATCH_ENDPOINT": nobody()})


def t_status(d):
    """status asks SINKWATCH_CONTROL; --control wins over it."""
    rc, out, err = sw(["status", "traffic"], env={"SINKWATCH_CONTROL": d.control})
    assert rc == 0 and out.startswith("# traffic"), (rc, out, err)
    rc, out, err = sw(["status", "--control", d.control, "traffic"],
                      env={"SINKWATCH_CONTROL": nobody()})
    assert rc == 0 and out.startswith("# traffic"), (rc, out, err)
    bad = nobody()
    rc, out, err = sw(["status", "--timeout-ms", "300"], env={"SINKWATCH_CONTROL": bad})
    assert rc == 2 and bad in err, (rc, out, err)


def t_status_unknown(d):
    """An unknown section: the error lists the daemon's sections."""
    help_ = d.ctl("help")
    line = [ln for ln in help_.splitlines() if ln.startswith("sections:")][0]
    sections = line.split(":", 1)[1].split()
    assert "traffic" in sections, help_
    rc, out, err = sw(["status", "cpus"], env={"SINKWATCH_CONTROL": d.control})
    assert rc == 2, (rc, out, err)
    assert "no section 'cpus'" in err and " ".join(sections) in err, err


class Hold:
    """Binds 127.0.0.1:port and listens, if it is free (else someone else
    already holds it, which serves as well)."""

    def __init__(self, port):
        self.s = socket.socket()
        try:
            self.s.bind(("127.0.0.1", port))
            self.s.listen(1)
        except OSError:
            self.s.close()
            self.s = None

    def close(self):
        if self.s:
            self.s.close()


def demo_ok(args, env=None):
    tmp = tempfile.mkdtemp(prefix="sinkwatch-demo-")
    try:
        rc, out, err = sw(["demo", "--steps", "3"] + args, env=env, cwd=tmp)
        assert rc == 0, (args, rc, err)
        assert "shares" in out or "layer" in out, out
        data = os.path.join(tmp, "dd" if "--data-dir" in args else "sinkwatch-data")
        files = [f for f in os.listdir(data) if f.endswith(".h5")]
        assert len(files) == 1, files
        return err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def t_demo():
    """demo --listen/--control/--data-dir on free ports while 5710 is held;
    the variables; with none, free ports instead of the taken defaults."""
    held = [Hold(5710), Hold(5711)]
    try:
        lp, cp = free_port(), free_port()
        err = demo_ok(["--listen", "tcp://127.0.0.1:%d" % lp,
                       "--control", "tcp://127.0.0.1:%d" % cp, "--data-dir", "dd"])
        assert "on tcp://127.0.0.1:%d (control tcp://127.0.0.1:%d)" % (lp, cp) in err, err
        lp, cp = free_port(), free_port()
        err = demo_ok([], env={"SINKWATCH_ENDPOINT": "tcp://127.0.0.1:%d" % lp,
                               "SINKWATCH_CONTROL": "tcp://127.0.0.1:%d" % cp})
        assert "on tcp://127.0.0.1:%d (control tcp://127.0.0.1:%d)" % (lp, cp) in err, err
        err = demo_ok([])
        assert "port 5710 is taken" in err and "port 5711 is taken" in err, err
    finally:
        for h in held:
            h.close()


CASES = {"sim": "daemon", "status": "daemon", "status_unknown": "daemon", "demo": t_demo}
WITH_DAEMON = {"sim": t_sim, "status": t_status, "status_unknown": t_status_unknown}


def main():
    want = sys.argv[1:] or list(CASES)
    unknown = [w for w in want if w not in CASES]
    if unknown:
        print("unknown case(s): %s; cases: %s" % (" ".join(unknown), " ".join(CASES)))
        return 2
    res = Results()
    for name in want:
        if CASES[name] != "daemon":
            res.check(name, CASES[name])
    shared = [n for n in want if CASES[n] == "daemon"]
    if shared:
        d = Daemon().start()
        try:
            for n in shared:
                res.check(n, lambda n=n: WITH_DAEMON[n](d))
        finally:
            rc = d.stop()
            shutil.rmtree(d.tmp, ignore_errors=True)
            res.check("daemon_exit_status", lambda: None if rc == 0 else
                      (_ for _ in ()).throw(AssertionError("sinkwatchd exit %r" % rc)))
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
