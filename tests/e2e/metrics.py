"""sinkwatchd's Prometheus endpoint (--metrics-listen): scraped over HTTP and
parsed with python3-prometheus-client's own parser. Counters end in _total,
every family has HELP and TYPE, drops are counted by reason and equal the
status command's, queue depth, bytes written and runs live are there, and no
label takes values that grow with the runs. Only loopback addresses are
accepted; unknown paths and methods are refused."""
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCHD, Daemon, Results, Sender, free_port, random_probs, run_cmd  # noqa: E402

import numpy as np  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("python3-prometheus-client is not installed: skipped")
    sys.exit(77)

res = Results()


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        return r.read().decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    for f in fams.values():
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError((name, labels))


def case_scrape():
    port = free_port()
    url = "http://127.0.0.1:%d/metrics" % port
    d = Daemon(extra=["--metrics-listen", "127.0.0.1:%d" % port]).start()
    try:
        text = scrape(url)
        fams = families(text)
        # HELP and TYPE for every family; counters' samples end in _total
        for line in text.splitlines():
            if line.startswith("# TYPE ") and line.endswith(" counter"):
                assert line.split()[2].endswith("_total"), line
        helps = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# HELP ")}
        types = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")}
        assert helps == types and len(types) >= 20, (helps ^ types, len(types))
        for name in ("sinkwatch_writer_queue_depth", "sinkwatch_bytes_written_total",
                     "sinkwatch_runs_live", "sinkwatch_inflight_bytes",
                     "sinkwatch_messages_received_total"):
            value(fams, name)
        # traffic: 3 runs of 2 steps, two bad messages, a duplicate
        rng = np.random.default_rng(3)
        for k in range(3):
            s = Sender(d.listen, "m%d" % k, 2, 2)
            for st in range(2):
                for lay in range(2):
                    s.snapshot(st, lay, random_probs(rng, 2, 4, 8), inc=99 + k)
            if k == 0:
                s.snapshot(1, 1, random_probs(rng, 2, 4, 8), inc=99)   # a duplicate
                s.send_frames([b"\x81\xa1v\x09"])                      # bad version
                s.send_frames([b"not msgpack at all"])
            s.close()
        d.wait(lambda st: st["traffic"]["messages"] >= 15, what="15 messages")
        time.sleep(2.2)         # published once a second
        fams = families(scrape(url))
        st = d.status()
        assert value(fams, "sinkwatch_messages_received_total") == st["traffic"]["messages"]
        for reason in ("duplicate", "budget", "after_end"):
            got = value(fams, "sinkwatch_messages_dropped_total", reason=reason)
            assert got == st["drops"][reason], (reason, got, st["drops"][reason])
        assert value(fams, "sinkwatch_messages_dropped_total", reason="duplicate") == 1
        assert value(fams, "sinkwatch_messages_dropped_total", reason="bad_version") == 1
        assert value(fams, "sinkwatch_messages_dropped_total", reason="bad_msgpack") == 1
        assert value(fams, "sinkwatch_runs_live") == 3
        assert value(fams, "sinkwatch_steps_written_total") >= 3
        for how in ("kept", "copied"):     # no parts of several senders here
            assert value(fams, "sinkwatch_parts_total", how=how) == 0
        # no label that grows with the runs: every label value is from a fixed set
        for f in fams.values():
            for s in f.samples:
                assert set(s.labels) <= {"reason", "version", "protocol", "socket", "stage",
                                         "how"}, (s.name, s.labels)
                assert s.labels.get("socket", "data") in ("data", "control"), s.labels
                assert s.labels.get("how", "kept") in ("kept", "copied"), s.labels
                assert not any(v.startswith("m") and v[1:].isdigit() for v in s.labels.values())
        # the writer's growth shows after a flush
        time.sleep(1.2)
        assert value(families(scrape(url)), "sinkwatch_bytes_written_total") > 0
        # other paths and methods
        for path, code in (("/", 404), ("/metrics/../etc/passwd", 404), ("/metricsx", 404)):
            try:
                urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
                raise AssertionError(path)
            except urllib.error.HTTPError as e:
                assert e.code == code, (path, e.code)
        req = urllib.request.Request(url, data=b"x", method="POST")
        try:
            urllib.request.urlopen(req, timeout=5)
            raise AssertionError("POST")
        except urllib.error.HTTPError as e:
            assert e.code == 405, e.code
    finally:
        assert d.stop() == 0


def case_loopback_only():
    for bad, why in (("0.0.0.0:9", "not a loopback address"), ("10.1.2.3:9", "not a loopback"),
                     ("127.0.0.1", "not HOST:PORT"), ("127.0.0.1:0", "port not in"),
                     ("example.org:9", "not an IPv4 or IPv6 address")):
        rc, out, err = run_cmd([SINKWATCHD, "--check-config", "--metrics-listen", bad])
        assert rc == 2 and why in err, (bad, rc, err)
    for good in ("127.0.0.1:9710", "[::1]:9710", "localhost:9710"):
        rc, out, err = run_cmd([SINKWATCHD, "--check-config", "--metrics-listen", good])
        assert rc == 0, (good, err)


def case_slow_clients():
    """Issue 27, item 5: sixteen connections trickling a header byte every
    second (libmicrohttpd's timeout counts inactivity only) never keep a
    scrape out: a request whose headers are not whole within 3 s is shut
    down, and a scrape answers within 5 s while they trickle."""
    import socket
    import threading
    port = free_port()
    url = "http://127.0.0.1:%d/metrics" % port
    d = Daemon(extra=["--metrics-listen", "127.0.0.1:%d" % port]).start()
    stop = threading.Event()
    closed = []

    def trickle():
        s = socket.create_connection(("127.0.0.1", port))
        try:
            for ch in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                if stop.is_set():
                    return
                s.sendall(bytes([ch]))
                time.sleep(1)
        except OSError:
            closed.append(1)    # shut down by the daemon
        finally:
            s.close()

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(16)]
    try:
        for t in threads:
            t.start()
        time.sleep(1.5)         # every slot held
        t0 = time.time()
        deadline = t0 + 5
        text = None
        while time.time() < deadline and text is None:
            try:
                text = scrape(url)
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        assert text is not None and "sinkwatch_" in text, "no scrape within 5 s"
        time.sleep(4)
        assert len(closed) >= 1, "no slow connection was shut down"
    finally:
        stop.set()
        assert d.stop() == 0


if not SINKWATCHD:
    print("SINKWATCHD not set: skipped")
    sys.exit(77)
res.check("scrape", case_scrape)
res.check("loopback_only", case_loopback_only)
res.check("slow_clients", case_slow_clients)
sys.exit(res.finish())
