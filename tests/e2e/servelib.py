"""Helpers of tests/e2e/serve.py and tests/e2e/browser.py: a real sinkwatchd fed by
`sinkwatch sim`, and `sinkwatch serve` on a free loopback port."""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import math
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", "."), "tests"))
from swharness import Daemon, SINKWATCH, run_cmd  # noqa: E402,F401


def view_rows(f):
    """The view of storage/LAYOUT.md computed here from the datasets: rows of
    an incarnation that a later one's resume record supersedes drop out, and
    of each step the newest incarnation's last row wins. [(step, row)]."""
    step, inc = f["step"][:], f["inc"][:]
    res_inc = f["resume_inc"][:] if "resume_inc" in f else []
    res_step = f["resume_step"][:] if "resume_step" in f else []
    best = {}
    for t, (s_, i) in enumerate(zip(step, inc)):
        if any(ri > i and s_ > rs for ri, rs in zip(res_inc, res_step)):
            continue
        if s_ not in best or inc[best[s_]] <= i:
            best[s_] = t
    return sorted(best.items())


def finite_mean(a, axis):
    """Mean of the finite values along axis; NaN where there are none."""
    ok = np.isfinite(a)
    n = ok.sum(axis=axis)
    s = np.where(ok, a, 0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, s / np.maximum(n, 1), np.nan)


def drift_flip_want(path):
    """What a run's series must hold for drift and flip rate, from the
    stored values read with h5py over view_rows: per layer the mean over
    heads of the finite drift values (the model: over every head), the
    layer's flip rates (the model: the mean of the layers' finite ones).
    Drift only where the row's prev_row is the winning row of the previous
    view step (LAYOUT.md, the view), else NaN.
    (steps, {"model" | "0".. : {key: array}})."""
    with h5py.File(path, "r") as f:
        view = view_rows(f)
        rows = [t for _, t in view]
        ds, dc = f["drift_sink"][:][rows], f["drift_content"][:][rows]   # [n, L, H]
        fl = f["flip_rate"][:][rows]                                      # [n, L, 3]
        prev = f["prev_row"][:][rows]
    ok = np.array([k > 0 and prev[k] == rows[k - 1] for k in range(len(rows))], dtype=bool)
    ds[~ok] = np.nan
    dc[~ok] = np.nan
    n, L = ds.shape[0], ds.shape[1]
    out = {"model": {"drift_sink": finite_mean(ds.reshape(n, -1), 1),
                     "drift_content": finite_mean(dc.reshape(n, -1), 1),
                     "flip": finite_mean(fl, 1)}}
    for li in range(L):
        out[str(li)] = {"drift_sink": finite_mean(ds[:, li, :], 1),
                        "drift_content": finite_mean(dc[:, li, :], 1), "flip": fl[:, li, :]}
    for w in out.values():
        fm = w.pop("flip")
        for m, k in enumerate(("flip_cosine", "flip_js", "flip_entropy")):
            w[k] = fm[:, m]
    return [int(s_) for s_, _ in view], out


def drift_gaps(src, dst):
    """A copy of the golden run (src) whose drift breaks LAYOUT.md's
    prev_row rule as a two-worker sweep left it (issue 26 item 1): step 50's
    row was taken against step 30's row; step 80's winning row (incarnation
    2) against step 70's superseded row of incarnation 1, with a value. Step
    70's winning row is taken against step 60's winning row of the other
    incarnation, with a value: that one holds for the view. Returns
    {step: drift the series must give (None: a gap)} for the three."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        step, inc, prev = f["step"][:], f["inc"][:], f["prev_row"]
        row = {(int(s_), int(i)): t for t, (s_, i) in enumerate(zip(step, inc))}
        prev[row[(50, 1)]] = row[(30, 1)]
        prev[row[(80, 2)]] = row[(70, 1)]
        prev[row[(70, 2)]] = row[(60, 1)]
        for name, v in (("drift_sink", 0.5), ("drift_content", 5.0)):
            ds = f[name]
            ds[row[(80, 2)]] = np.full(ds.shape[1:], v)
            ds[row[(70, 2)]] = np.full(ds.shape[1:], 3 * v)
    return {50: None, 80: None, 70: (1.5, 15.0)}


def same_series(got, want, where):
    """got[k] (JSON: None for NaN) equal to want[k] to 1e-12; the count of
    finite values compared."""
    compared = 0
    for k, w in want.items():
        g = got[k]
        assert len(g) == len(w), (where, k, len(g), len(w))
        for i, (a, b) in enumerate(zip(g, w)):
            if not np.isfinite(b):
                assert a is None, (where, k, i, a, b)
            else:
                assert a is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), \
                    (where, k, i, a, b)
                compared += 1
    return compared


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
