#!/usr/bin/python3
"""The harness's sanitizer check (tests/e2e/swharness.py) on real reports: a
program built with the build's compiler and -fsanitize=address (a heap
overflow), =undefined (a signed overflow) and a leak; each report is found
in a log, a clean daemon log is not one, and a real daemon whose log holds
a report fails at Daemon.stop() and at Results.finish().

    SINKWATCHD=./sinkwatchd /usr/bin/python3 tests/e2e/sanitizer_check.py
"""
import contextlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import swharness  # noqa: E402
from swharness import SINKWATCHD, Daemon, Results  # noqa: E402

if not SINKWATCHD:
    print("SINKWATCHD not set: skipped")
    sys.exit(77)

PROGRAMS = {
    "address": ("#include <stdlib.h>\nint main(int c, char **v) { char *p = malloc(8);"
                " int r = p[8 + c - 1]; free(p); return r; }\n", "AddressSanitizer"),
    "undefined": ("#include <limits.h>\nint main(int c, char **v) { int x = INT_MAX;"
                  " x += c; return x == 0; }\n", "runtime error"),
    "leak": ("#include <stdlib.h>\n#include <stdio.h>\nvoid *keep;\n"
             "int main(void) { keep = malloc(64); keep = 0; puts(\"\"); return 0; }\n",
             "LeakSanitizer"),
}


def report_of(tmp, name):
    """stderr of the program of PROGRAMS[name] built with -fsanitize=...,
    or None when the compiler cannot build it."""
    src, _ = PROGRAMS[name]
    cc = shlex.split(swharness._build_var("CC") or "cc")
    c = os.path.join(tmp, name + ".c")
    exe = os.path.join(tmp, name)
    with open(c, "w") as f:
        f.write(src)
    san = "address" if name == "leak" else name
    p = subprocess.run(cc + ["-g", "-O0", "-fsanitize=" + san, c, "-o", exe],
                       capture_output=True, text=True, env=swharness.child_env())
    if p.returncode != 0:
        return None
    env = dict(swharness.child_env(), ASAN_OPTIONS="detect_leaks=1")
    return subprocess.run([exe], capture_output=True, text=True, env=env).stderr


def main():
    R = Results()
    tmp = tempfile.mkdtemp(prefix="sinkwatch-san-")
    reports = {}

    def t_real_reports():
        for name, (_, word) in PROGRAMS.items():
            err = report_of(tmp, name)
            if err is None:
                print("     (%s: the compiler cannot build with -fsanitize; not checked)" % name)
                continue
            assert word in err, (name, err)
            log = "2031-01-01 12:00:00 info sinkwatchd started\n" + err + "more log\n"
            rep = swharness.sanitizer_report(log)
            assert rep is not None and word in rep, (name, err)
            reports[name] = err
        assert reports, "no sanitizer report could be produced"

    def t_clean_logs():
        for text in ("", "2031-01-01 info runtime error: words in a message\n",
                     "warn: the run 'ERROR: AddressSanitizer' is a run id\n"):
            assert swharness.sanitizer_report(text) is None, text

    def t_daemon_stop_fails():
        d = Daemon(tmp=tmp).start()
        assert swharness.sanitizer_report(d.read_log()) is None, d.read_log()
        err = next(iter(reports.values()))
        with open(d.log, "a") as f:
            f.write(err)
        try:
            d.stop()
        except AssertionError as e:
            assert "sanitizer report" in str(e), e
        else:
            raise AssertionError("Daemon.stop() passed a log with a sanitizer report")
        r2 = Results()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = r2.finish()
        assert rc == 1 and "sanitizer report" in out.getvalue(), out.getvalue()
        swharness._DAEMONS.remove(d)       # this one was on purpose

    R.check("real reports are found", t_real_reports)
    R.check("clean logs pass", t_clean_logs)
    if reports:
        R.check("a daemon log with a report fails", t_daemon_stop_fails)
    shutil.rmtree(tmp, ignore_errors=True)
    return R.finish()


if __name__ == "__main__":
    sys.exit(main())
