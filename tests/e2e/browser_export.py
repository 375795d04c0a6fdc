"""`sinkwatch serve --export DIR` (issue 14): the static copy opened from
file:// in headless Chromium with no server. The run list equals the run
files, a run's report equals `sinkwatch report --format json`, its drift
and flip rate equal the stored values (h5py), a zoomed range says that its
report needs the server (the whole run's numbers are shown, labelled so),
compare lists the picked runs in parameter order, an id holding <script>
shows as text, and no request leaves file://. --run picks runs; a run name
that is not there and a directory that cannot be written are refused.
Screenshots under tests/screenshots in the build tree. Exit 77 (skip) only
where chromium, chromedriver or python3-selenium is missing."""
import json
import os
import shutil
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.environ.get("SW_SRCDIR", "."), "tests"))
from browser import SHOTS, browser, wait  # noqa: E402 (exits 77 without Selenium)
from servelib import (Daemon, SINKWATCH, drift_flip_want, run_cmd,  # noqa: E402
                      same_series, sim)
from swharness import Results  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

EVIL = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
GOLDEN = os.path.join(os.environ.get("SW_SRCDIR", "."), "tests", "data", "golden_run",
                      "golden.h5")
FAMILY = ((1.4e9, "fam-1.4b"), (70e6, "fam-70m"), (410e6, "fam-410m"))


def report_cli(path):
    rc, out, err = run_cmd([SINKWATCH, "report", path, "--format", "json"])
    assert rc == 0, err
    return json.loads(out)


def export(data, out, *runs):
    argv = [SINKWATCH, "serve", data, "--export", out]
    for r in runs:
        argv += ["--run", r]
    return run_cmd(argv, timeout=120)


def model_cells(drv):
    """The report's model cells, read in one turn of the page's script."""
    return drv.execute_script(
        "var o = {}; document.querySelectorAll('[data-key^=\"model.\"]')"
        ".forEach(function (c) { o[c.getAttribute('data-key')] = "
        "[c.getAttribute('data-value'), c.textContent]; }); return o;")


def same_report(cells, want):
    for form in ("path", "endpoint"):
        for k in ("dH", "sink", "content", "sink_share", "content_share"):
            v, text = cells["model.%s.%s" % (form, k)]
            w = want[form][k]
            if w is None:
                assert v in ("", "null", None), (form, k, v)
            else:
                assert abs(float(v) - w) <= 1e-12 * max(1, abs(w)), (form, k, v, w)
                assert text.strip() == "%.*f" % (3 if "share" in k else 4, w), (text, w)


def main():
    os.makedirs(SHOTS, exist_ok=True)
    res = Results()
    d = Daemon().start()
    drv = None
    try:
        for params, name in FAMILY:
            sim(d, name, "--params", "%g" % params, "--steps", "40", "--layers", "3",
                "--heads", "4", "--model", name, "--sink-share", "0.6")
        sim(d, EVIL, "--steps", "5", "--layers", "2", "--heads", "3", "--model", "<i>m</i>")
        data = d.data
        files = sorted(f for f in os.listdir(data) if f.endswith(".h5"))
        out = os.path.join(d.tmp, "static copy")      # a space: the URL is encoded
        sub = os.path.join(d.tmp, "two")

        def exports():
            rc, so, err = export(data, out)
            assert rc == 0, err
            assert "4 runs exported" in so, so
            for f in ("index.html", "static/app.js", "static/dygraph.min.js",
                      "static/data.js", "static/compare.js", "static/run-0.js"):
                assert os.path.getsize(os.path.join(out, f)) > 0, f
            rc, so, err = export(data, sub, "fam-70m", "0/fam-1.4b.h5")
            assert rc == 0 and "2 runs exported" in so, (rc, so, err)
        res.check("--export writes the page, the library and the runs' JSON; --run picks "
                  "by run name or id", exports)

        def errors():
            missing = os.path.join(d.tmp, "never")
            rc, _, err = export(data, missing, "fam-70m", "no-such-run")
            assert rc == 2 and "no-such-run: no such run" in err, (rc, err)
            assert not os.path.exists(missing), "made a copy for a run that is not there"
            afile = os.path.join(d.tmp, "a-file")
            with open(afile, "w") as f:
                f.write("x")
            rc, _, err = export(data, os.path.join(afile, "copy"))
            assert rc == 2 and afile in err and "Not a directory" in err, (rc, err)
            rc, _, err = export(data, afile)
            assert rc == 2 and "not a directory" in err, (rc, err)
            if os.geteuid() != 0:       # root writes anywhere: a mode means nothing
                ro = os.path.join(d.tmp, "read-only")
                os.makedirs(ro)
                os.chmod(ro, 0o500)
                rc, _, err = export(data, os.path.join(ro, "copy"))
                assert rc == 2 and "Permission denied" in err, (rc, err)
            rc, _, err = run_cmd([SINKWATCH, "serve", data, "--run", "fam-70m"])
            assert rc == 2 and "--export" in err, (rc, err)
        res.check("refused: a run name that is not there (nothing written), a directory "
                  "that cannot be made or written, --run without --export", errors)

        drv = browser()
        base = "file://" + urllib.parse.quote(out) + "/index.html"

        def run_list():
            drv.get(base + "#/")
            rows = wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")
                        if len(drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 4
                        else None, 20, "4 runs")
            got = {}
            for r in rows:
                tds = r.find_elements(By.TAG_NAME, "td")
                got[r.get_attribute("data-id")] = (tds[1].text, int(tds[5].text),
                                                   int(tds[6].text), tds[7].text)
            assert sorted(got) == ["0/" + f for f in files], (got, files)
            for rid, (name, steps, last, state) in got.items():
                want = report_cli(os.path.join(data, rid[2:]))
                assert (name, steps, last, state) == \
                    (want["run"], want["steps_stored"], want["last_step"], "ended"), \
                    (rid, got[rid], want)
            assert drv.execute_script("return window.pwned === undefined"), "script ran"
            assert not drv.find_elements(By.CSS_SELECTOR, "#runs-body script, #runs-body img")
            assert "static copy" in drv.find_element(By.ID, "live").text
            drv.save_screenshot(os.path.join(SHOTS, "static-runs.png"))
        res.check("run list from file://: every run file, names, steps and last steps of "
                  "sinkwatch report, the <script> id as text", run_list)

        rid = "0/fam-410m.h5"
        path = os.path.join(data, "fam-410m.h5")

        def one_run():
            drv.get(base + "#/run?id=" + urllib.parse.quote(rid, safe=""))
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, ".plot canvas")) >= 5, 20,
                 "five charts")
            h = wait(lambda: drv.find_element(By.ID, "report-range")
                     if drv.find_element(By.ID, "report-range").get_attribute("data-to")
                     else None, 20, "report")
            want = report_cli(path)
            assert (int(h.get_attribute("data-from")), int(h.get_attribute("data-to"))) == \
                (want["first_step"], want["last_step"])
            assert h.get_attribute("data-scope") == "range"
            same_report(model_cells(drv), want["model_attribution"])
            assert len(drv.find_elements(By.CSS_SELECTOR, "#heads-grid td")) == 3 * 4
            steps, dflip = drift_flip_want(path)
            n = 0
            for layer in ("model", "2"):
                if layer != "model":
                    drv.execute_script("var s = document.getElementById('layer'); "
                                       "s.value = '2'; s.onchange();")
                    wait(lambda: drv.execute_script(
                        "return window.swState.series.layer") == 2, 10, "layer 2")
                got = drv.execute_script("return window.swState.series")
                assert got["step"] == steps
                n += same_series(got, dflip[layer], layer)
            assert n > 50, n
            drv.save_screenshot(os.path.join(SHOTS, "static-run.png"))
        res.check("one run from file://: five charts, the report equal to sinkwatch report, "
                  "drift and flip rate equal to the stored values", one_run)

        def zoomed():
            drv.get(base + "#/run?id=" + urllib.parse.quote(rid, safe=""))
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#c-sink canvas")) > 0, 20,
                 "chart")
            wait(lambda: drv.find_element(By.ID, "report-range").get_attribute("data-to"),
                 20, "report")
            canvas = drv.find_element(By.ID, "c-sink").find_elements(By.CSS_SELECTOR,
                                                                     "canvas")[-1]
            w = canvas.size["width"]
            ActionChains(drv).move_to_element_with_offset(canvas, int(-w * 0.2), 0) \
                .click_and_hold().move_by_offset(int(w * 0.3), 0).release().perform()
            wait(lambda: drv.execute_script("return window.swState.win"), 10, "zoom")
            h = wait(lambda: drv.find_element(By.ID, "report-range")
                     if drv.find_element(By.ID, "report-range").get_attribute("data-scope")
                     == "whole-run" else None, 10, "the whole-run label")
            note = drv.find_element(By.ID, "report-static")
            assert note.is_displayed() and "needs the server" in note.text, note.text
            assert "the whole run" in h.text, h.text
            want = report_cli(path)
            assert (int(h.get_attribute("data-from")), int(h.get_attribute("data-to"))) == \
                (want["first_step"], want["last_step"])
            same_report(model_cells(drv), want["model_attribution"])
            drv.save_screenshot(os.path.join(SHOTS, "static-zoomed.png"))
        res.check("a zoomed range in the static copy: the page says its report needs the "
                  "server, and shows the whole run's, labelled so", zoomed)

        def compare():
            drv.get(base + "#/")
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 4, 20,
                 "runs")
            for _, name in FAMILY:
                drv.find_element(By.CSS_SELECTOR,
                                 "input[data-id='0/%s.h5']" % name).click()
            drv.find_element(By.ID, "compare-btn").click()
            rows = wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#compare-body tr")
                        if len(drv.find_elements(By.CSS_SELECTOR, "#compare-body tr")) == 3
                        else None, 20, "3 runs")
            names = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
            assert names == ["fam-70m", "fam-410m", "fam-1.4b"], names
            for r in rows:
                want = report_cli(os.path.join(data, r.get_attribute("data-id")[2:]))
                v = float(r.find_elements(By.TAG_NAME, "td")[5].get_attribute("data-value"))
                w = want["model_attribution"]["path"]["dH"]
                assert abs(v - w) <= 1e-12 * max(1, abs(w)), (v, w)
            wait(lambda: len(drv.find_elements(By.CSS_SELECTOR, "#cmp-sink canvas")) > 0, 10,
                 "chart")
        res.check("compare from file://: the picked runs in parameter order, path dH of "
                  "sinkwatch report", compare)

        def fill_from_first_step():
            # the golden run (9 stored steps, entropy falling): the stacked
            # cumulative chart is filled between its first two steps too
            gdir, gout = os.path.join(d.tmp, "golden"), os.path.join(d.tmp, "golden-copy")
            os.makedirs(gdir)
            shutil.copy(GOLDEN, gdir)
            rc, _, err = run_cmd([SINKWATCH, "serve", gdir, "--export", gout])
            assert rc == 0, err
            drv.get("file://" + urllib.parse.quote(gout) + "/index.html#/run?id=0%2Fgolden.h5")
            wait(lambda: drv.execute_script("return window.swCharts && "
                                            "window.swCharts.length") == 5, 20, "charts")
            # a point inside the first segment of the content part's fill (the
            # lower series, from 0 down to the content part): its colour
            px = drv.execute_script("""
                var g = window.swCharts[2], s = window.swState.series;
                var x = (s.step[0] + s.step[1]) / 2, y = s.cum_content[1] / 4;
                var p = g.toDomCoords(x, y), cv = g.hidden_, r = cv.width / cv.clientWidth;
                var d = cv.getContext('2d').getImageData(Math.round(p[0] * r),
                    Math.round(p[1] * r), 1, 1).data;
                return [d[0], d[1], d[2], d[3], s.cum_content[1]];""")
            assert px[4] < -0.005, px      # a visible first interval
            assert px[3] > 0 and px[2] > px[0] + 40, ("not filled blue", px)
            drv.save_screenshot(os.path.join(SHOTS, "static-golden.png"))
        res.check("the stacked cumulative chart is filled from the run's first step",
                  fill_from_first_step)

        def picked():
            drv.get("file://" + urllib.parse.quote(sub) + "/index.html#/")
            rows = wait(lambda: drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")
                        if len(drv.find_elements(By.CSS_SELECTOR, "#runs-body tr")) == 2
                        else None, 20, "2 runs")
            ids = sorted(r.get_attribute("data-id") for r in rows)
            assert ids == ["0/fam-1.4b.h5", "0/fam-70m.h5"], ids
        res.check("--run: the copy holds the runs picked alone", picked)

        def offline():
            urls = []
            for e in drv.get_log("performance"):
                m = json.loads(e["message"])["message"]
                if m.get("method") == "Network.requestWillBeSent":
                    urls.append(m["params"]["request"]["url"])
            assert urls, "no requests logged"
            bad = [u for u in urls if not u.startswith("file://") and not u.startswith("data:")]
            assert not bad, bad
            errs = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
            assert not errs, errs
        res.check("no request beyond file://, no errors in the console", offline)
    finally:
        if drv:
            drv.quit()
        d.stop()
    print("screenshots in", SHOTS)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
