"""`sinkwatch serve` over HTTP (issue 14): the endpoints, their numbers equal
to `sinkwatch report --format json` for the same range (the page computes
none), a run growing live, and the security rules: loopback by default,
--allow-remote with a token, the Host check, read-only, path traversal,
escaping of ids."""
import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", "."), "tests"))
from servelib import (Daemon, Server, SINKWATCH, drift_flip_want, drift_gaps,  # noqa: E402
                      run_cmd, same_series, sim)
from swharness import Results  # noqa: E402

SRC = os.environ.get("SW_SRCDIR", ".")
GOLDEN = os.path.join(SRC, "tests", "data", "golden_run", "golden.h5")
EVIL = "<script>alert('x')</script>&\"q\""
FAMILY = [(1.4e9, "fam-1.4b"), (70e6, "fam-70m"), (410e6, "fam-410m")]
# run ids with bytes that are not UTF-8 (PROTOCOL.md section 3 allows
# 0x80-0xff), as str with surrogate escapes: b"run-\xff\xfe", and a valid
# "é" beside a lone 0xc3 (issue 26 item 10)
RAW_IDS = ["run-\udcff\udcfe", "caf\u00e9-\udcc3x"]


def q(s):
    return urllib.parse.quote(s, safe="")


def same(a, b, where):
    """Equal JSON values; numbers to 1e-12 relative (they are the same C)."""
    if isinstance(a, dict):
        for k in b:
            if k in a:
                same(a[k], b[k], where + "." + k)
    elif isinstance(a, list):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, i))
    elif isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, (where, a, b)
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (where, a, b)
    else:
        assert a == b, (where, a, b)


def check_drift_flip(srv, rid, path):
    """The series' drift and flip rate against the stored values (h5py, see
    servelib.drift_flip_want). Returns how many finite values were compared."""
    steps, want = drift_flip_want(path)
    compared = 0
    for layer, w in want.items():
        got = srv.json("/api/series?id=%s&layer=%s" % (q(rid), layer))
        assert got["step"] == steps, (got["step"], steps)
        compared += same_series(got, w, layer)
    return compared


def report_cli(path, *args):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json", "--per-head"]
                           + list(args))
    assert rc == 0, err
    return json.loads(out)


def check_report(srv, rid, path, frm=None, to=None):
    qs = "id=" + q(rid)
    args = []
    if frm is not None:
        qs += "&from=%d" % frm
        args += ["--from", str(frm)]
    if to is not None:
        qs += "&to=%d" % to
        args += ["--to", str(to)]
    got = srv.json("/api/report?" + qs)
    want = report_cli(path, *args)
    for k in ("first_step", "last_step", "steps_used", "intervals", "intervals_incomplete",
              "steps_incomplete", "split_form", "model_attribution", "layer_attribution",
              "per_head"):
        same(got[k], want[k], k)
    same(got["ranking"]["spearman_rho"], want["ranking"]["spearman_rho"], "rho")
    return got


def strict_json(raw, where):
    """JSON from bytes that must be UTF-8 (a strict parser's view)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise AssertionError("%s: not UTF-8 JSON: %s" % (where, e))


def check_raw_ids(d, srv):
    """JSON that names a run id with bytes that are not UTF-8 is UTF-8, and
    its strings give the id back with surrogateescape: check, report,
    /api/runs and the export's data.js (issue 26 item 10)."""
    want = {r.encode("utf-8", "surrogateescape") for r in RAW_IDS}
    for r in RAW_IDS:
        path = d.run_file(r)
        for tool in ("check", "report"):
            p = subprocess.run([SINKWATCH, tool, path, "--format", "json"],
                               capture_output=True, timeout=60)
            assert p.returncode == 0, (tool, p.stderr)
            j = strict_json(p.stdout, tool)
            run = j["files"][0]["run"] if tool == "check" else j["run"]
            assert run.encode("utf-8", "surrogateescape") == r.encode("utf-8", "surrogateescape"), \
                (tool, run, r)
    st, _, body = srv.raw("/api/runs")
    assert st == 200, st
    runs = strict_json(body, "/api/runs")["runs"]
    got = {x["run"].encode("utf-8", "surrogateescape") for x in runs}
    assert want <= got, (want, got)
    out = os.path.join(d.tmp, "export-raw")
    argv = [SINKWATCH, "serve", d.data, "--export", out]
    for r in RAW_IDS:
        argv += ["--run", "0/" + os.path.basename(d.run_file(r))]
    rc, so, err = run_cmd(argv, timeout=120)
    assert rc == 0, (rc, so, err)
    with open(os.path.join(out, "static", "data.js"), "rb") as f:
        js = f.read()
    head = b"window.SW_STATIC = "
    data = strict_json(js[js.index(head) + len(head):].rstrip().rstrip(b";"), "data.js")
    got = {x["run"].encode("utf-8", "surrogateescape") for x in data["runs"]["runs"]}
    assert want <= got, (want, got)
    # the data directory by its base name alone: no path of this machine in
    # the copy (issue 29 item 5.6); the server itself names it as given
    assert os.path.isabs(d.data)
    assert {x["dir"] for x in data["runs"]["runs"]} == {os.path.basename(d.data)}, data["runs"]
    for name in os.listdir(os.path.join(out, "static")):
        with open(os.path.join(out, "static", name), "rb") as f:
            text = f.read()
        text.decode("utf-8")
        assert d.data.encode() not in text, (name, d.data)
    assert {x["dir"] for x in runs} == {d.data}, runs
    # /api/report: the report's keys and the server's, none twice ("ended")
    rid = "0/" + os.path.basename(d.run_file(RAW_IDS[0]))
    st, _, body = srv.raw("/api/report?id=" + urllib.parse.quote(
        rid.encode("utf-8", "surrogateescape"), safe=""))
    assert st == 200, (st, body)

    def once(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), sorted(keys)
        return dict(pairs)
    rep = json.loads(body.decode("utf-8"), object_pairs_hook=once)
    assert rep["ended"] is True and rep["dir"] == d.data, rep.get("ended")


def check_drift_gaps(tmp):
    """/api/series gives a gap where the stored drift was taken against
    another step than the view's previous one (issue 26 item 1), and equals
    the stored values elsewhere."""
    gdir = os.path.join(tmp, "gaps")
    os.makedirs(gdir)
    path = os.path.join(gdir, "gaps.h5")
    want = drift_gaps(GOLDEN, path)
    srv = Server([gdir])
    try:
        assert check_drift_flip(srv, "0/gaps.h5", path) > 0
        for layer in ("model", "0", "1"):
            got = srv.json("/api/series?id=0%2Fgaps.h5&layer=" + layer)
            for st, w in want.items():
                k = got["step"].index(st)
                pair = (got["drift_sink"][k], got["drift_content"][k])
                assert pair == ((None, None) if w is None else w), (layer, st, pair)
    finally:
        assert srv.stop() == 0


def check_empty_dir(tmp):
    """An empty data directory: no runs, no error, and no undefined
    behaviour (qsort of no names, issue 26 item 12)."""
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    srv = Server([empty])
    try:
        assert srv.json("/api/runs")["runs"] == []
        srv.json("/api/compare?ids=0%2Fnone.h5")
    finally:
        assert srv.stop() == 0


def main():
    res = Results()
    d = Daemon().start()
    outside = os.path.join(d.tmp, "outside")
    os.makedirs(outside)
    srv = None
    try:
        for params, name in FAMILY:
            sim(d, name, "--params", "%g" % params, "--steps", "12", "--layers", "2",
                "--heads", "3", "--model", name, "--sink-share", "0.6")
        evil_path = sim(d, EVIL, "--steps", "6", "--layers", "2", "--heads", "2",
                        "--model", "<b>m</b>")
        for r in RAW_IDS:  # sim's own output names the id as bytes: not text
            p = subprocess.run([SINKWATCH, "sim", "--connect", d.listen, "--run", r, "--steps",
                                "3", "--layers", "1", "--heads", "2"], capture_output=True,
                               timeout=120)
            assert p.returncode == 0, p.stderr
            d.wait_ended(r, timeout=60)
        data = d.data
        shutil.copy(GOLDEN, os.path.join(data, "golden.h5"))
        shutil.copy(GOLDEN, os.path.join(outside, "secret.h5"))
        os.symlink(os.path.join(outside, "secret.h5"), os.path.join(data, "link.h5"))
        shutil.copy(GOLDEN, os.path.join(data, ".hidden.h5"))
        with open(os.path.join(data, "notes.txt"), "w") as f:
            f.write("not a run")
        srv = Server([data])
        evil_id = "0/" + os.path.basename(evil_path)

        def runs():
            j = srv.json("/api/runs")
            ids = [r["id"] for r in j["runs"]]
            assert ids == sorted(ids), ids
            assert "0/golden.h5" in ids and evil_id in ids, ids
            for bad in ("0/link.h5", "0/.hidden.h5", "0/notes.txt"):
                assert bad not in ids, (bad, ids)
            for r in j["runs"]:
                assert r["state"] == "ended", r
            g = [r for r in j["runs"] if r["id"] == "0/golden.h5"][0]
            assert (g["run"], g["model"], g["params"], g["steps"]) == \
                ("golden", "golden-sim", 123456, 9), g
        res.check("runs: every run file, sorted, with state; links, hidden names, "
                  "other files left out", runs)

        def numbers():
            path = os.path.join(data, "golden.h5")
            check_report(srv, "0/golden.h5", path)
            check_report(srv, "0/golden.h5", path, 20, 60)
            check_report(srv, "0/golden.h5", path, 0, 10)
            # a range between stored steps: the stored steps within it
            got = srv.json("/api/report?id=0%2Fgolden.h5&from=15&to=65")
            assert (got["first_step"], got["last_step"]) == (20, 60), got["first_step"]
            check_report(srv, "0/golden.h5", path, 20, 60)
            for _, name in FAMILY:
                check_report(srv, "0/%s.h5" % name, os.path.join(data, name + ".h5"), 3, 9)
        res.check("report of a range equals sinkwatch report --format json (model, "
                  "layers, heads, classes, ranks)", numbers)

        def series():
            want = report_cli(os.path.join(data, "golden.h5"), "--series")["series"]
            for layer in ("model", "0", "1"):
                got = srv.json("/api/series?id=0%2Fgolden.h5&layer=" + layer)
                w = [x for x in want["layers"] if str(x["layer"]) == layer][0]
                same(got["step"], want["step"], "step")
                for k in ("sink_mass", "entropy", "cum_sink", "cum_content", "content_entropy",
                          "drift_sink", "drift_content", "flip_cosine", "flip_js",
                          "flip_entropy"):
                    same(got[k], w[k], layer + "." + k)
                assert len(got["content_entropy"]) == len(got["step"])
            csv = srv.raw("/api/csv?id=0%2Fgolden.h5&layer=model&from=20&to=60")
            assert csv[0] == 200 and csv[1]["Content-Type"].startswith("text/csv"), csv[:2]
            lines = csv[2].decode().strip().split("\n")
            assert lines[0].startswith("step,layer,sink_mass"), lines[0]
            got = srv.json("/api/series?id=0%2Fgolden.h5&layer=model")
            steps = [s for s in got["step"] if 20 <= s <= 60]
            assert [int(x.split(",")[0]) for x in lines[1:]] == steps, lines
            assert float(lines[1].split(",")[2]) == got["sink_mass"][got["step"].index(20)]
            st, _, _ = srv.raw("/api/series?id=0%2Fgolden.h5&layer=7")
            assert st == 400, st
            # to=: the stored steps up to it, every array cut at the same place
            # (a page asks for the model line and the report of the steps its
            # first series showed); the flip and drift arrays too
            for layer in ("model", "1"):
                full = srv.json("/api/series?id=0%2Fgolden.h5&layer=" + layer)
                assert 0 < sum(1 for x in full["step"] if x <= 45) < len(full["step"])
                for to, n in ((45, sum(1 for x in full["step"] if x <= 45)),
                              (full["step"][0], 1), (full["step"][0] - 1, 0),
                              (full["step"][-1] + 100, len(full["step"]))):
                    cut = srv.json("/api/series?id=0%%2Fgolden.h5&layer=%s&to=%d" % (layer, to))
                    for k, v in full.items():
                        if isinstance(v, list):
                            same(cut[k], v[:n], "%s to=%d %s" % (layer, to, k))
                    assert cut["last_step"] == full["last_step"]
            for bad in ("x", "1.5", ""):
                st, _, _ = srv.raw("/api/series?id=0%2Fgolden.h5&layer=model&to=" + bad)
                assert st == (200 if bad == "" else 400), (bad, st)
        res.check("series equal report --series; CSV of a range; to= cuts them", series)

        def drift_flip():
            n = check_drift_flip(srv, "0/golden.h5", os.path.join(data, "golden.h5"))
            for _, name in FAMILY:
                n += check_drift_flip(srv, "0/%s.h5" % name, os.path.join(data, name + ".h5"))
            assert n > 100, n   # not all NaN: the values were compared
        res.check("drift and flip rate of the series equal the stored values (h5py), "
                  "per layer and the model", drift_flip)

        def compare():
            ids = ",".join("0/%s.h5" % n for _, n in FAMILY)
            j = srv.json("/api/compare?ids=" + q(ids))
            assert [r["params"] for r in j["runs"]] == sorted(int(p) for p, _ in FAMILY), j
            for r in j["runs"]:
                want = report_cli(os.path.join(data, r["file"]))
                same(r["model_attribution"], want["model_attribution"], r["id"])
        res.check("compare: three runs in parameter order, the cross-run figures", compare)

        def escaping():
            st, h, body = srv.raw("/api/state?id=" + q(evil_id))
            assert st == 200 and h["Content-Type"] == "application/json", (st, h)
            j = json.loads(body)
            assert j["run"] == EVIL and j["model"] == "<b>m</b>", j
            assert h["X-Content-Type-Options"] == "nosniff", h
            assert "default-src 'self'" in h["Content-Security-Policy"], h
        res.check("ids and models come back as JSON strings, nosniff and a CSP", escaping)

        def traversal():
            bad = ["/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd",
                   "/../../etc/passwd", "/static/", "/static/index.html/../../x",
                   "/api/series?id=0/../../../../etc/passwd",
                   "/api/series?id=0%2F..%2F..%2Fetc%2Fpasswd",
                   "/api/series?id=0%2F..%2Foutside%2Fsecret.h5",
                   "/api/report?id=" + q(outside + "/secret.h5"),
                   "/api/report?id=0%2Flink.h5", "/api/report?id=0%2F.hidden.h5",
                   "/api/report?id=1%2Fgolden.h5", "/api/report?id=-1%2Fgolden.h5",
                   "/api/report?id=0%2Fnotes.txt", "/api/report?id=00x%2Fgolden.h5",
                   "/api/nothing", "/etc/passwd"]
            for p in bad:
                st, _, body = srv.raw(p)
                assert st in (400, 404), (p, st, body[:200])
                assert b"root:" not in body and b"HDF" not in body, (p, body[:200])
            st, _, body = srv.raw("/static/app.js")
            assert st == 200 and b"swState" in body
            st, _, body = srv.raw("/static/dygraph.min.js")
            assert st == 200 and len(body) > 10000
        res.check("path traversal: only the fixed static names and run files of the "
                  "data directories", traversal)

        def rules():
            for host in ("evil.example:%d" % srv.port, "evil.example", None,
                         "127.0.0.1:1", "127.0.0.1"):
                st, _, _ = srv.raw("/api/runs", headers={"Host": host})
                assert st == 403, (host, st)
            for host in ("localhost:%d" % srv.port, "[::1]:%d" % srv.port):
                st, _, _ = srv.raw("/api/runs", headers={"Host": host})
                assert st == 200, (host, st)
            for m in ("POST", "PUT", "DELETE", "PATCH"):
                st, _, _ = srv.raw("/api/runs", method=m)
                assert st == 405, (m, st)
            st, _, body = srv.raw("/", method="HEAD")
            assert st == 200 and body == b""
            rc, out, err = run_cmd([SINKWATCH, "serve", data, "--listen", "0.0.0.0:0"],
                                   timeout=10)
            assert rc == 2 and "--allow-remote" in err, (rc, err)
        res.check("Host header of another name refused (DNS rebinding); read-only; "
                  "no wider address without --allow-remote", rules)

        def token():
            env = dict(os.environ, SINKWATCH_TOKEN="t0k3n-0123456789abcdef")
            p = subprocess.Popen([SINKWATCH, "serve", data, "--listen", "0.0.0.0:0",
                                  "--allow-remote", "--host", "127.0.0.1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            try:
                line = p.stdout.readline().decode()
                port = int(line.split(":")[-1].strip("/\n"))
                s = Server.__new__(Server)
                s.port, s.host = port, "127.0.0.1:%d" % port
                st, _, _ = s.raw("/api/runs")
                assert st == 401, st
                st, _, _ = s.raw("/api/runs", headers={"Authorization": "Bearer wrong"})
                assert st == 401, st
                st, _, _ = s.raw("/api/runs", headers={
                    "Authorization": "Bearer t0k3n-0123456789abcdef"})
                assert st == 200, st
                st, h, _ = s.raw("/?token=t0k3n-0123456789abcdef")
                assert st == 200 and "HttpOnly" in h.get("Set-Cookie", ""), h
                st, _, _ = s.raw("/api/runs", headers={
                    "Cookie": "a=b; sw_token=t0k3n-0123456789abcdef"})
                assert st == 200, st
                st, _, _ = s.raw("/api/runs", headers={
                    "Host": "evil:%d" % port, "Authorization": "Bearer t0k3n-0123456789abcdef"})
                assert st == 403, st
            finally:
                p.terminate()
                p.wait(timeout=10)
        res.check("--allow-remote: the token (header, query then cookie) and the Host "
                  "check", token)

        res.check("run ids that are not UTF-8: check, report, /api/runs and the export "
                  "are UTF-8 JSON; the ids come back with surrogateescape",
                  lambda: check_raw_ids(d, srv))
        res.check("drift: a gap where prev_row is not the view's previous step",
                  lambda: check_drift_gaps(d.tmp))
        res.check("an empty data directory", lambda: check_empty_dir(d.tmp))

        def live():
            proc = sim(d, "growing", "--steps", "30", "--every-ms", "200", "--layers", "2",
                       "--heads", "3", wait=False)
            rid = "0/growing.h5"
            deadline = time.time() + 30
            seen = []
            while time.time() < deadline:
                st, _, body = srv.raw("/api/state?id=" + q(rid))
                if st == 200:
                    j = json.loads(body)
                    if j.get("steps"):
                        seen.append(j["steps"])
                        if len(seen) == 1:  # open the whole run while it grows
                            srv.json("/api/series?id=" + q(rid))
                            srv.json("/api/report?id=" + q(rid))
                    if j.get("state") == "ended":
                        break
                time.sleep(0.25)
            assert proc.wait(timeout=60) == 0
            assert len(set(seen)) >= 3, seen
            path = d.wait_ended("growing", timeout=30)
            got = srv.json("/api/state?id=" + q(rid))
            assert got["steps"] == 30 and got["state"] == "ended", got
            # the run was read as it grew (sw_run_refresh): the same numbers
            check_report(srv, rid, path)
            check_report(srv, rid, path, 5, 20)
            want = report_cli(path, "--series")["series"]
            got = srv.json("/api/series?id=" + q(rid))
            same(got["step"], want["step"], "step")
            same(got["cum_sink"], want["layers"][-1]["cum_sink"], "cum_sink")
        res.check("a run read while it grows: steps appear, and at the end the numbers "
                  "equal a fresh report", live)
    finally:
        if srv:
            assert srv.stop() == 0
        assert d.stop() == 0
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
