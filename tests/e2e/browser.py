"""The page of `sinkwatch serve` in headless Chromium (Selenium), while a run
streams (issue 14): the run list, a run's charts drawn, the numbers shown
equal `sinkwatch report --format json` for the zoomed range, the zoom kept
across live updates, a new step within 2 s, compare in parameter order, an
id holding <script> shown as text, and no request leaving the server.
Screenshots under tests/screenshots in the build tree. Exit 77 (skip) only
where chromium, chromedriver or python3-selenium is missing."""
import json
import os
import shutil
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", "."), "tests"))
from servelib import Daemon, Server, SINKWATCH, drift_gaps, run_cmd, sim  # noqa: E402
from swharness import Results  # noqa: E402

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    print("SKIP: python3-selenium is not installed (apt-get install python3-selenium)")
    sys.exit(77)
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROME = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(DRIVER) or not os.path.exists(CHROME):
    print("SKIP: chromium and chromium-driver are not installed "
          "(apt-get install chromium chromium-driver)")
    sys.exit(77)

SHOTS = os.path.join(os.getcwd(), "tests", "screenshots")
EVIL = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"


def browser():
    o = Options()
    o.binary_location = CHROME
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1300", "--proxy-server=http://0.0.0.0:1",
              "--proxy-bypass-list=127.0.0.1", "--no-first-run"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=o)


def wait(fn, timeout=10, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # noqa: BLE001 - the page is still loading
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def report_cli(path, frm, to):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json", "--from",
                            str(frm), "--to", str(to)])
    assert rc == 0, err
    return json.loads(out)


def main():
    os.makedirs(SHOTS, exist_ok=True)
    res = Results()
    d = Daemon().start()
    srv = drv = proc = None
    try:
        for params, name in ((1.4e9, "pythia-1.4b"), (70e6, "pythia-70m"),
                             (410e6, "pythia-410m")):
            sim(d, name, "--params", "%g" % params, "--steps", "20", "--layers", "4",
                "--heads", "6", "--model", name, "--sink-share", "0.6")
        sim(d, EVIL, "--steps", "5", "--layers", "2", "--heads", "2", "--model", "<i>m</i>")
        proc = sim(d, "live-run", "--steps", "2000", "--every-ms", "400", "--layers", "6",
                   "--heads", "8", "--model", "gpt-live", "--params", "124e6", wait=False)
        wait(lambda: os.path.exists(os.path.join(d.data, "live-run.h5")), 20, "live run")
        srv = Server([d.data])
        drv = browser()
        base = srv.url
        live_path = os.path.join(d.data, "live-run.h5")

        def run_list():
            drv.get(base + "#/")
            # the rows read in one turn of the page's script: the list is
            # drawn again every 2 s, so rows found one by one may go stale
            rows = wait(lambda: drv.execute_script(
                "return Array.from(document.querySelectorAll('#runs-body tr'))"
                ".map(function (r) { return [r.querySelector('a.run-link').textContent, "
                "r.querySelector('.state').textContent]; });")
                if len(drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 5
                else None, 10, "5 runs")
            names = [n for n, _ in rows]
            assert "live-run" in names and EVIL in names, names
            states = dict(rows)
            assert states["live-run"] == "live" and states["pythia-70m"] == "ended", states
            assert drv.execute_script("return window.pwned === undefined"), "script ran"
            assert not drv.find_elements(By.CSS_SELECTOR, "#runs-body script, #runs-body img")
            f = drv.find_element(By.ID, "filter")
            f.send_keys("pythia")
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 3, 5,
                 "filter")
            assert "q=pythia" in drv.current_url, drv.current_url
            drv.save_screenshot(os.path.join(SHOTS, "runs.png"))
        res.check("run list: five runs, live and ended, the <script> id as text, filter "
                  "in the link", run_list)

        def one_run():
            drv.get(base + "#/run?id=" + urllib.parse.quote("0/live-run.h5", safe=""))
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".plot canvas")) >= 3, 10,
                 "charts")
            wait(lambda: drv.find_element(By.ID, "report-range").get_attribute("data-to"),
                 10, "report")
            st = drv.execute_script("return window.swState")
            assert st["lastStep"] is not None and st["lastStep"] >= 2, st
            drv.save_screenshot(os.path.join(SHOTS, "run.png"))
        res.check("one run: three charts drawn and the report", one_run)

        def zoom_and_live():
            # zoom as a user would: set the window through the chart's own callback
            wait(lambda: drv.execute_script("return window.swState.lastStep") >= 6, 20,
                 "6 steps")
            # the run grows while the page loads its series, then its report: the
            # report is of the steps the charts show (to= their last), never one
            # step ahead of them (a step every 0.4 s, sampled over 3 s)
            seen, t_end, k = set(), time.time() + 15, 0
            while k < 12 or (len(seen) < 2 and time.time() < t_end):
                rep, asked, shown = drv.execute_script(
                    "var s = window.swState; return [s.report && s.report.last_step, "
                    "s.reportShown, s.series.step[s.series.step.length - 1]];")
                if rep is not None:
                    assert rep == asked and asked <= shown, (rep, asked, shown)
                    seen.add(rep)
                time.sleep(0.25)
                k += 1
            assert len(seen) >= 2, seen     # the report did follow the run
            # drag-zoom on the first chart: from 25% to 60% of its width
            plot = drv.find_element(By.ID, "c-sink")
            canvas = plot.find_elements(By.CSS_SELECTOR, "canvas")[-1]
            w = canvas.size["width"]
            from selenium.webdriver.common.action_chains import ActionChains
            ActionChains(drv).move_to_element_with_offset(canvas, int(-w * 0.2), 0) \
                .click_and_hold().move_by_offset(int(w * 0.3), 0).release().perform()
            win = wait(lambda: drv.execute_script("return window.swState.win"), 5, "zoom")
            def zoomed_report():
                r = drv.execute_script("return window.swState.report")
                e = drv.find_element(By.ID, "report-range")
                if r and r["first_step"] >= win[0] - 1 and r["last_step"] <= win[1] + 1 \
                        and e.get_attribute("data-to") == str(r["last_step"]):
                    return r["first_step"], r["last_step"]
                return None
            frm, to = wait(zoomed_report, 5, "the zoomed range's report")
            assert win[0] - 1 <= frm and to <= win[1] + 1, (win, frm, to)
            # the numbers shown are those of `sinkwatch report` for that range
            whole = report_cli(live_path, frm, to)
            want = whole["model_attribution"]
            # every cell read in one turn of the page's script: a live update
            # re-renders the table, so elements found one by one may go stale
            cells = drv.execute_script(
                "var o = {}; document.querySelectorAll('[data-key^=\"model.\"]')"
                ".forEach(function (c) { o[c.getAttribute('data-key')] = "
                "[c.getAttribute('data-value'), c.textContent]; }); return o;")
            for form in ("path", "endpoint"):
                for k in ("dH", "sink", "content", "sink_share", "content_share"):
                    v, text = cells["model.%s.%s" % (form, k)]
                    w_ = want[form][k]
                    if w_ is None:
                        assert v in ("", "null", None), (form, k, v)
                    else:
                        assert abs(float(v) - w_) <= 1e-12 * max(1, abs(w_)), (form, k, v, w_)
                        digits = 3 if "share" in k else 4
                        assert text.strip() == "%.*f" % (digits, w_), (text, w_)
            # beside them, the model's mean sink mass at the range's two ends
            for k in ("sink_mass_first", "sink_mass_last"):
                v, text = cells["model." + k]
                assert abs(float(v) - whole[k]) <= 1e-12, (k, v, whole[k])
                assert text.strip() == "%.4f" % whole[k], (k, text)
            # a new step arrives within 2 s, and the zoom stays where it was
            before = drv.execute_script("return [window.swState.lastStep, window.swState.updates]")
            t0 = time.time()
            wait(lambda: drv.execute_script("return window.swState.lastStep") > before[0], 5,
                 "a new step")
            dt = time.time() - t0
            assert dt < 2.0 + 0.4, dt  # a step every 0.4 s; seen within 2 s of it
            wait(lambda: drv.execute_script("return window.swState.updates") >= before[1] + 2,
                 5, "two updates")
            st = drv.execute_script("return window.swState")
            assert st["win"] == win, (st["win"], win)
            # the x axis labels still show the zoomed window, not the whole run
            assert drv.execute_script("return window.swState.report.last_step") == to
            assert "from=%d" % frm in drv.current_url, drv.current_url
            drv.save_screenshot(os.path.join(SHOTS, "run-zoomed.png"))
            # the link keeps the place: opened afresh it shows the same range
            drv.get(drv.current_url)
            drv.refresh()
            wait(lambda: drv.find_element(By.ID, "report-range").get_attribute("data-to")
                 == str(to), 10, "the same range from the link")
        res.check("zoom: the report follows the range (equal to sinkwatch report), new "
                  "steps within 2 s keep the zoom, the link keeps it", zoom_and_live)

        def heads():
            cells = drv.find_elements(By.CSS_SELECTOR, "#heads-grid td")
            assert len(cells) == 6 * 8, len(cells)
            c = cells[0]
            assert "class" in c.get_attribute("title") and c.get_attribute("data-class")
        res.check("heads grid: layers x heads with the class and hover numbers", heads)

        def layer_live():
            # a layer picked on the live run: its line and the model line beside
            # it are of the same steps (the model series asked to= the layer's
            # last), every update while the run grows
            from selenium.webdriver.support.ui import Select
            Select(drv.find_element(By.ID, "layer")).select_by_value("2")
            wait(lambda: drv.execute_script("return window.swState.series.layer") == 2, 5,
                 "layer 2")
            u0 = drv.execute_script("return window.swState.updates")
            for _ in range(12):
                a, b, n = drv.execute_script(
                    "var s = window.swState; return [s.series.step, s.modelSeries.step, "
                    "s.series.layer];")
                assert n == 2 and a == b, (n, a[-3:], b[-3:])
                time.sleep(0.25)
            wait(lambda: drv.execute_script("return window.swState.updates") >= u0 + 2, 10,
                 "two updates of the layer's charts")
        res.check("a layer of a live run: its line and the model's of the same steps",
                  layer_live)

        def compare():
            ids = ",".join("0/%s.h5" % n for n in ("pythia-1.4b", "pythia-70m", "pythia-410m"))
            drv.get(base + "#/compare?ids=" + urllib.parse.quote(ids, safe=""))
            rows = wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#compare-body tr")
                        if len(drv.find_elements(By.CSS_SELECTOR, "#compare-body tr")) == 3
                        else None, 10, "3 runs")
            names = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
            assert names == ["pythia-70m", "pythia-410m", "pythia-1.4b"], names
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#cmp-sink canvas")) > 0, 5,
                 "chart")
            # each table row carries the colour of its run's line (issue 29 item 5)
            cols = wait(lambda: drv.execute_script(
                "var g = window.swCompareCharts; if (!g) return null;"
                "var rows = document.querySelectorAll('#compare-body tr');"
                "return [g[0].getColors(), g[1].getColors(),"
                " Array.prototype.map.call(rows, function (r) {"
                "  var s = r.querySelector('td .swatch');"
                "  return [r.getAttribute('data-color'), s ? getComputedStyle(s)"
                "   .backgroundColor : null, r.cells[0].textContent,"
                "   s ? s.offsetWidth * s.offsetHeight : 0]; })];"), 5, "colours")
            line1, line2, marks = cols
            assert len(line1) == len(marks) == 3 and line1 == line2, cols
            for i, (attr, bg, label, area) in enumerate(marks):
                hexc = line1[i].lstrip("#")
                rgb = "rgb(%d, %d, %d)" % tuple(int(hexc[k:k + 2], 16) for k in (0, 2, 4))
                assert attr == line1[i] and bg == rgb, (i, attr, bg, line1[i])
                assert label == "#%d" % (i + 1) and area > 0, (i, label, area)
            assert len(set(line1)) == 3, line1
            # the legend names the same series in the same colours
            leg = drv.execute_script(
                "var g = window.swCompareCharts[0]; g.setSelection(g.numRows() - 1);"
                "return document.getElementById('cmp-sink-legend').innerHTML;")
            for i in range(3):
                assert "#%d" % (i + 1) in leg, leg
            drv.save_screenshot(os.path.join(SHOTS, "compare.png"))
        res.check("compare: three runs in parameter order, each row in its line's colour",
                  compare)

        def evil_page():
            drv.get(base + "#/run?id=" + urllib.parse.quote(
                "0/" + [f for f in os.listdir(d.data) if f.startswith("%3Cscript")][0], safe=""))
            t = wait(lambda: drv.find_element(By.ID, "run-title").text, 10, "title")
            assert t == EVIL, t
            assert drv.execute_script("return window.pwned === undefined")
            drv.save_screenshot(os.path.join(SHOTS, "escaped.png"))
        res.check("a run id holding <script> shows as text", evil_page)

        def offline():
            # no request left 127.0.0.1 (all page files local; a proxy that
            # goes nowhere would have failed any other)
            urls = []
            for e in drv.get_log("performance"):
                m = json.loads(e["message"])["message"]
                if m.get("method") == "Network.requestWillBeSent":
                    urls.append(m["params"]["request"]["url"])
            assert urls, "no requests logged"
            bad = [u for u in urls if not u.startswith(base) and not u.startswith("data:")]
            assert not bad, bad
            errs = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
            assert not errs, errs
        res.check("no request beyond the server, no errors in the console", offline)

        def refused():
            st, _, _ = srv.raw("/static/..%2F..%2F..%2Fetc%2Fpasswd")
            assert st == 404, st
            st, _, _ = srv.raw("/", headers={"Host": "attacker.example:%d" % srv.port})
            assert st == 403, st
        res.check("a traversal request and a foreign Host header refused", refused)

        def drift_gap():
            # last: another server, whose requests the offline check would name
            gdir = os.path.join(d.tmp, "gaps")
            os.makedirs(gdir)
            want = drift_gaps(os.path.join(os.environ.get("SW_SRCDIR", "."), "tests", "data",
                                           "golden_run", "golden.h5"),
                              os.path.join(gdir, "gaps.h5"))
            srv2 = Server([gdir])
            try:
                drv.get(srv2.url + "#/run?id=0%2Fgaps.h5")
                wait(lambda: drv.execute_script("return window.swCharts && "
                                                "window.swCharts.length") == 5, 10, "charts")
                # the drift chart: its points per step (NaN where the series
                # has null), and a line that breaks at NaN
                got = wait(lambda: drv.execute_script(
                    "var g = window.swCharts[3], o = {};"
                    "if (g.numRows() < 9) return null;"
                    "for (var r = 0; r < g.numRows(); r++) o[g.getValue(r, 0)] ="
                    " [g.getValue(r, 1), g.getValue(r, 2)].map(function (v) {"
                    " return isNaN(v) ? 'gap' : v; });"
                    "return [g.getOption('connectSeparatedPoints'), o];"), 10, "drift rows")
                assert got[0] is False, got
                for st, w in want.items():
                    assert got[1][str(st)] == (["gap", "gap"] if w is None else list(w)), \
                        (st, got[1])
                drv.save_screenshot(os.path.join(SHOTS, "drift-gap.png"))
            finally:
                srv2.stop()
        res.check("drift taken against another step: a gap in the drift chart", drift_gap)

        def run_panel():
            # a resumed two-sender run (tests/e2e/web_report.py makes it): the run
            # history panel shows its segments, rows superseded, senders with
            # their counts and the rank that never ended, from /api/report
            from web_report import INC_A, INC_B, make_resumed_run, report_cli as rep_cli
            rdir = os.path.join(d.tmp, "resumed")
            path = make_resumed_run(rdir)
            want = rep_cli(path)
            srv3 = Server([rdir])
            try:
                drv.get(srv3.url + "#/run?id=" + urllib.parse.quote(
                    "0/" + os.path.basename(path), safe=""))
                wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#segments-body tr")) == 2,
                     10, "the segments")
                got = drv.execute_script(
                    "function rows(q) { return Array.from(document.querySelectorAll(q))"
                    ".map(function (r) { return Array.from(r.children).map(function (c) {"
                    " return c.textContent; }); }); }"
                    "return { seg: rows('#segments-body tr'), snd: rows('#senders-body tr'),"
                    " miss: Array.from(document.querySelectorAll('#ranks-missing li'))"
                    ".map(function (l) { return [l.dataset.inc, l.dataset.rank,"
                    " l.textContent]; }),"
                    " rows: document.getElementById('panel-rows').textContent };")
                assert [r[1] for r in got["seg"]] == [str(INC_A), str(INC_B)], got["seg"]
                assert [r[2:] for r in got["seg"]] == [
                    [str(g["first_step"]), str(g["last_step"]), str(g["steps"])]
                    for g in want["segments"]], (got["seg"], want["segments"])
                assert "%d superseded" % want["rows_superseded"] in got["rows"], got["rows"]
                assert "%d rows stored" % want["rows_stored"] in got["rows"], got["rows"]
                cols = ["inc", "rank", "senders", "messages", "stored", "lost", "duplicates",
                        "missing", "ended"]
                assert got["snd"] == [[str(r[c]) for c in cols] for r in want["senders"]], \
                    (got["snd"], want["senders"])
                assert len(got["snd"]) == 4, got["snd"]
                assert [m[:2] for m in got["miss"]] == [[str(INC_A), "1"]], got["miss"]
                assert "never sent its end" in got["miss"][0][2], got["miss"]
                panel = drv.find_element(By.ID, "run-panel")
                drv.execute_script("arguments[0].scrollIntoView();", panel)
                drv.save_screenshot(os.path.join(SHOTS, "run-panel.png"))
            finally:
                srv3.stop()
        res.check("run history panel: segments, superseded rows, senders and their counts, "
                  "the rank not ended, as sinkwatch report says", run_panel)
    finally:
        if drv:
            drv.quit()
        if proc:
            proc.terminate()
            proc.wait(timeout=10)
        if srv:
            srv.stop()
        d.stop()
    print("screenshots in", SHOTS)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
