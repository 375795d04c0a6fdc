#!/usr/bin/python3
"""The man pages are true to the flags: the options each program (and each
sinkwatch subcommand) accepts, as its --help prints them, equal the options
its page documents."""
import os
import re
import subprocess
import sys

SW, SWD = os.environ.get("SINKWATCH"), os.environ.get("SINKWATCHD")
SRC = os.environ.get("SW_SRCDIR", ".")
if not SW or not SWD:
    print("SINKWATCH/SINKWATCHD not set: skipped")
    sys.exit(77)

OPT = re.compile(r"--[a-z][a-z0-9-]*")


def help_opts(args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    return set(OPT.findall(p.stdout))


def page_opts(text):
    return set(OPT.findall(text.replace("\\-", "-")))


passed = failed = 0


def check(name, got, want):
    global passed, failed
    if got == want:
        passed += 1
        print("ok   %s (%d options)" % (name, len(got)))
    else:
        failed += 1
        print("FAIL %s: in --help only: %s; in the page only: %s"
              % (name, sorted(got - want), sorted(want - got)))


with open(os.path.join(SRC, "doc", "sinkwatchd.8")) as f:
    check("sinkwatchd(8)", help_opts([SWD, "--help"]) | {"--help", "--version",
          "--config", "--check-config", "--print-config"}, page_opts(f.read()))

with open(os.path.join(SRC, "doc", "sinkwatch.1")) as f:
    page = f.read().replace("\\-", "-")
sections = re.split(r"^\.SS ", page, flags=re.M)
for sec in sections[1:]:
    cmd = sec.split("\n", 1)[0].strip()
    want = set(OPT.findall(sec)) | {"--help"}
    got = help_opts([SW, cmd, "--help"]) | {"--help"}
    check("sinkwatch(1) %s" % cmd, got, want)
cmds = {s.split("\n", 1)[0].strip() for s in sections[1:]}
p = subprocess.run([SW, "help"], capture_output=True, text=True)
listed = set(re.findall(r"^  ([a-z]+) ", p.stdout, flags=re.M)) - {"help", "version"}
check("sinkwatch(1) commands", listed, cmds)
# each subcommand's --help points at its section of the page (issue 29 item 5.4)
nopointer = {cmd for cmd in cmds
             if not subprocess.run([SW, cmd, "--help"], capture_output=True, text=True)
             .stdout.endswith("see sinkwatch(1), section %s\n" % cmd)}
check("--help points at sinkwatch(1)", nopointer, set())
# the demo's line says what it does (cmd_demo.c): a daemon, a run, a report
demo = re.search(r"^  demo .*$", p.stdout, flags=re.M).group(0)
check("help: demo's line", {w for w in ("sinkwatchd", "synthetic run", "report", "--tensor")
                            if w not in demo}, set())
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
