"""Helpers of tests/serve.py and tests/browser.py: a real sinkwatchd fed by
`sinkwatch sim`, and `sinkwatch serve` on a free loopback port."""
import http.client
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", "."), "tests"))
from swharness import Daemon, SINKWATCH, run_cmd  # noqa: E402,F401


def sim(d, run, *args, wait=True):
    """Streams a synthetic run; waits for it (wait) or returns the process."""
    argv = [SINKWATCH, "sim", "--connect", d.listen, "--run", run] + list(args)
    if wait:
        rc, out, err = run_cmd(argv, timeout=120)
        assert rc == 0, "sim failed: %s %s" % (out, err)
        return d.wait_ended(run, timeout=60)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Server:
    """sinkwatch serve DIRS on 127.0.0.1:0 (the port it prints)."""

    def __init__(self, dirs, extra=()):
        self.argv = [SINKWATCH, "serve"] + list(dirs) + ["--listen", "127.0.0.1:0"] + list(extra)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("sinkwatch serve: http://"):
            raise RuntimeError("serve did not start: %r %s" % (line, self.proc.stderr.read()))
        self.url = line.split()[-1]
        self.port = int(self.url.split(":")[2].split("/")[0])
        self.host = "127.0.0.1:%d" % self.port

    def raw(self, path, method="GET", headers=None):
        """(status, headers, body) of a request sent as is (no path clean-up)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Host": self.host}
        h.update(headers or {})
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in h.items():
            if v is not None:
                c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, dict(r.getheaders()), body

    def json(self, path, status=200):
        st, _, body = self.raw(path)
        assert st == status, (path, st, body[:300])
        return json.loads(body)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")
        assert "AddressSanitizer" not in err and "runtime error" not in err, err
        return rc
