#!/usr/bin/python3
"""Mutation check (issue 16): do the tests catch what they claim?

At each site of the metric kernels, the decoder's size checks and the step
assembly, one mutant: a relational operator flipped (< and <=, > and >=,
== and !=), an arithmetic one (+ and -, * and /, += and -=, << and >>),
&& and ||, or a constant changed (0 and 1 swapped, n to n + 1, a float
times 1.5). Each mutant is built in a scratch copy of the tree and the
tests of its file run: first the unit test, then, if it survived, the
slower tests of tier 2, then, if it still survived, both again in an
--enable-asan build (as CI runs them). A mutant that does not compile does
not count.
Survivors are listed; dev/mutate-equivalent.txt explains the ones no
test kills: equivalent mutants (the program behaves the same), or why not
(an allocation failure, a read past an array that only a sanitizer sees).
The score is killed / (killed + survived); the explanations are counted
apart.

    /usr/bin/python3 dev/mutate.py                  # all sites (hours on 2 cores)
    /usr/bin/python3 dev/mutate.py --jobs 4 --only metrics/split.c
    /usr/bin/python3 dev/mutate.py --list           # the mutants, nothing run

It needs the build dependencies of ./configure; it copies the tracked and
untracked files (not the build outputs) to a temporary directory per job.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EQUIV = os.path.join(SRC, "dev", "mutate-equivalent.txt")

# the run-time ISA dispatch and name tables of row.c are not kernels
ROW_SKIP = {"cpu_caps", "isa_supported", "kernels_auto", "kernels", "swm_isa",
            "swm_kernels_get", "swm_set_isa", "swm_status_name", "swm_dtype_name"}
# the decoder's size checks: whole functions, and the lines of swp_decode
# that hold a frame size against its limits
PROTO_FUNCS = {"prescan", "check_run", "pr_check_limits", "pr_check_dims", "swp_golden_parse"}
DECODE_FUNCS = {"check_frames", "unpack_header", "check_topic_tensor"}
DECODE_LINE = re.compile(r"sizes\[|used|\boff\b|need_bytes|tmax|nframes|\bsize\b")

# step assembly: the functions that take a step's parts, track their cover,
# launch the layer jobs and release whole or timed-out steps in order (not
# the run, incarnation and sender bookkeeping, the copy digests of data
# parallel ranks, nor the status tables)
ASM_FUNCS = {"new_step", "find_step", "recently_written", "own", "part_cover", "as_launch",
             "as_settle", "take_part", "swd_asm_admit", "copy_done", "swd_asm_done", "as_whole",
             "complete", "stalled", "unblocked", "as_release", "min_open", "as_emit_step"}

# file -> (function filter, line filter, tier 1, tier 2); a tier is
# (make targets, commands run in the build dir with the test environment)
# "quick:" runs a Check test with SW_TEST_QUICK=1: the first tenth of its
# random rounds, asserting nothing the whole run does not; a survivor then
# gets the whole run
T_METRICS = ((["tests/test_metrics"], ["quick:tests/test_metrics", "tests/test_metrics"]),
             (["sinkwatch"], ["$PYTHON tests/e2e/crosscheck_analyze.py"]))
T_PROTO = ((["tests/test_proto"], ["tests/test_proto"]),
           (["tests/decode_oracle", "sinkwatchd", "fuzz/decode", "fuzz/roundtrip"],
            ["$PYTHON tests/e2e/differential.py", "sh tests/e2e/fuzz_corpus.sh"]))
T_ASM = ((["tests/test_assembly"], ["tests/test_assembly"]),
         (["sinkwatchd", "sinkwatch"], ["$PYTHON tests/e2e/distributed.py"]))
FILES = {      # in the order they run: the quick builds first
    "proto/proto.c": (lambda f: f in PROTO_FUNCS, None, T_PROTO),
    "proto/decode.c": (lambda f: f in PROTO_FUNCS or f in DECODE_FUNCS,
                       lambda f, line: f not in DECODE_FUNCS or DECODE_LINE.search(line), T_PROTO),
    "daemon/assembly.c": (lambda f: f in ASM_FUNCS, None, T_ASM),
    "daemon/assembly_admit.c": (lambda f: f in ASM_FUNCS, None, T_ASM),
    "daemon/assembly_emit.c": (lambda f: f in ASM_FUNCS, None, T_ASM),
    "metrics/split.c": (None, None, T_METRICS),
    "metrics/pick.c": (None, None, T_METRICS),
    "metrics/pair.c": (None, None, T_METRICS),
    "metrics/row.c": (lambda f: f not in ROW_SKIP, None, T_METRICS),
}

FLIPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
         "+": "-", "-": "+", "*": "/", "/": "*", "+=": "-=", "-=": "+=",
         "*=": "/=", "/=": "*=", "&&": "||", "||": "&&", "<<": ">>", ">>": "<<"}
TYPES = {"int", "unsigned", "long", "short", "char", "double", "float", "void", "const",
         "size_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int32_t", "int64_t",
         "bool", "struct", "static", "volatile", "restrict"}
TOKEN = re.compile(r"""
    (?P<ws>\s+) | (?P<comment>/\*.*?\*/|//[^\n]*) | (?P<str>"(?:\\.|[^"\\])*") |
    (?P<chr>'(?:\\.|[^'\\])*') |
    (?P<num>0[xX][0-9a-fA-F.]+(?:[pP][+-]?\d+)?[uUlLfF]* | (?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[uUlLfF]*) |
    (?P<id>[A-Za-z_]\w*) |
    (?P<op><<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|[-+*/<>=!&|^~%?:;,.(){}\[\]])
    """, re.S | re.X)


def functions(text):
    """(name, start, end) of each function body: a line 'name(' at column 0
    (the return type on the line above) up to the '}' at column 0."""
    out = []
    for m in re.finditer(r"^([A-Za-z_]\w*)\(", text, re.M):
        body = text.find("\n{", m.end())
        end = text.find("\n}", body)
        if body < 0 or end < 0:
            continue
        if text.count(";", m.end(), body) and text[m.end():body].rstrip().endswith(";"):
            continue        # a prototype
        out.append((m.group(1), body + 1, end + 2))
    return out


def new_number(s):
    m = re.match(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)$", s)
    if m:
        v = int(m.group(1), 0)
        nv = {0: 1, 1: 0}.get(v, v + 1)
        return (hex(nv) if m.group(1).lower().startswith("0x") else str(nv)) + m.group(2)
    m = re.match(r"(.*?)([fF]?)$", s)
    try:
        v = float.fromhex(m.group(1)) if "x" in s.lower() else float(m.group(1))
    except ValueError:
        return None
    nv = 1.0 if v == 0 else v * 1.5
    return repr(nv) + m.group(2)


def mutants(path, text, ffilter, lfilter):
    """(offset, original, replacement, function, line number) of each site."""
    out = []
    for fname, start, end in functions(text):
        if ffilter and not ffilter(fname):
            continue
        prev = None
        pos = start
        while pos < end:
            m = TOKEN.match(text, pos)
            if not m:
                pos += 1
                continue
            kind, tok = m.lastgroup, m.group(0)
            pos = m.end()
            if kind in ("ws", "comment"):
                continue
            line_start = text.rfind("\n", 0, m.start()) + 1
            line = text[line_start:text.find("\n", m.start())]
            lineno = text.count("\n", 0, m.start()) + 1
            if line.lstrip().startswith("#") or (lfilter and not lfilter(fname, line)):
                prev = (kind, tok)
                continue
            repl = None
            if kind == "num":
                repl = new_number(tok)
            elif kind == "op" and tok in FLIPS:
                binary = prev is not None and (prev[0] in ("num",) or prev[1] in (")", "]") or
                                               (prev[0] == "id" and prev[1] not in TYPES))
                if tok in ("+", "-", "*") and not binary:
                    repl = None
                elif tok == "*" and prev and prev[0] == "id" and re.match(
                        r"\s*[A-Za-z_]\w*\s*[=,;)\[]", text[pos:pos + 80]) and \
                        prev[1][0].islower() and prev[1].endswith("_t"):
                    repl = None     # a declaration: T *p
                else:
                    repl = FLIPS[tok]
            if repl is not None and repl != tok:
                out.append((m.start(), tok, repl, fname, lineno))
            prev = (kind, tok)
    return out


def site_key(path, text, off, orig, repl):
    """A name of the mutant that survives edits elsewhere: file, the line's
    text, which occurrence of orig on it, the replacement."""
    ls = text.rfind("\n", 0, off) + 1
    le = text.find("\n", off)
    line = text[ls:le]
    nth = len([m for m in re.finditer(re.escape(orig), line) if m.start() < off - ls])
    return "%s | %s | %s#%d -> %s" % (path, " ".join(line.split()), orig, nth, repl)


def load_equivalent():
    eq = {}
    if os.path.exists(EQUIV):
        with open(EQUIV) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    key, _, why = line.rstrip("\n").rpartition(" || ")  # keys hold " || " of C
                    eq[key.strip()] = why.strip()
    return eq


class Tree:
    """A scratch copy of the tree, configured and built once (asan: with
    --enable-asan, for the survivors of the plain build)."""

    def __init__(self, base, asan=False):
        self.dir = tempfile.mkdtemp(prefix="sw-mutate-", dir=base)
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=SRC,
                               capture_output=True, check=True).stdout.split(b"\0")
        for f in files:
            if not f:
                continue
            f = f.decode()
            src = os.path.join(SRC, f)
            if os.path.isfile(src):
                dst = os.path.join(self.dir, f)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(src, dst)
        # -O1: half the compile time of -O2, the same arithmetic
        self.sh("autoreconf -fi && ./configure -q CFLAGS='-O1 -g0' %s && make -j2 -s"
                % ("--enable-asan" if asan else ""), timeout=3600)
        self.env = dict(os.environ, SINKWATCH=os.path.join(self.dir, "sinkwatch"),
                        SINKWATCHD=os.path.join(self.dir, "sinkwatchd"), SW_SRCDIR=self.dir,
                        PYTHON="/usr/bin/python3")

    def sh(self, cmd, timeout, env=None):
        p = subprocess.run(["bash", "-c", cmd], cwd=self.dir, capture_output=True, text=True,
                           timeout=timeout, env=env)
        if p.returncode != 0 and env is None:
            raise RuntimeError("%s: %s" % (cmd, (p.stdout + p.stderr)[-3000:]))
        return p.returncode

    def check(self, cmd, timeout=240, quick=False):
        """A Check unit test, stopped at its first failure (its TAP log on
        stdout comes test by test); each test's own timeout cut to a tenth."""
        env = dict(self.env, CK_TAP_LOG_FILE_NAME="-", CK_TIMEOUT_MULTIPLIER="0.1")
        if quick:
            env["SW_TEST_QUICK"] = "1"
        p = subprocess.Popen([os.path.join(self.dir, cmd)], cwd=self.dir, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            for line in p.stdout:
                if line.startswith("not ok"):
                    p.kill()
                    p.wait()
                    return 1
            rc = p.wait()
        finally:
            timer.cancel()
        if rc == -9:
            raise subprocess.TimeoutExpired(cmd, timeout)
        return rc

    def run_mutant(self, path, text, off, orig, repl, tiers):
        """'killed:CMD', 'survived', 'stillborn' or 'timeout:CMD'."""
        fp = os.path.join(self.dir, path)
        with open(fp, "w") as f:
            f.write(text[:off] + repl + text[off + len(orig):])
        try:
            for targets, cmds in tiers:
                try:
                    p = subprocess.run(["make", "-s"] + targets, cwd=self.dir,
                                       capture_output=True, timeout=900)
                except subprocess.TimeoutExpired:
                    return "error:build timed out"      # not a result: run again
                if p.returncode != 0:
                    return "stillborn"
                for c in cmds:
                    try:
                        quick = c.startswith("quick:")
                        c = c[6:] if quick else c
                        rc = self.check(c, quick=quick) if c.startswith("tests/test_") else \
                            self.sh("exec " + c + " >/dev/null 2>&1", timeout=240, env=self.env)
                    except subprocess.TimeoutExpired:
                        return "timeout:" + c.split()[-1]
                    if rc != 0:
                        return "killed:" + c.split()[-1]
            return "survived"
        finally:
            with open(fp, "w") as f:
                f.write(text)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="a file of the list (repeatable)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    ap.add_argument("--log", default="mutate.log", help="one line per mutant (default mutate.log)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results of the mutants already in the log, run the others "
                    "(with all of them there: the report alone)")
    ap.add_argument("--rerun-survivors", action="store_true",
                    help="with --resume: run the survivors in the log again (after a test was added)")
    ap.add_argument("--tmp", default=None, help="where the scratch trees go")
    ap.add_argument("--report", action="store_true",
                    help="the summary of the results in the log, running nothing (a partial "
                    "run says how many mutants it has not run)")
    ap.add_argument("--unit-only", action="store_true",
                    help="run the unit test (tier 1) alone: with --rerun-survivors after a "
                    "unit test was added, the slower tests having already failed to kill them")
    ap.add_argument("--every", type=int, default=1, metavar="N",
                    help="a sample: the first mutant of each N in a file's list, for a file "
                    "whose whole list would take too long (the report says so)")
    ap.add_argument("--no-asan", action="store_true",
                    help="do not run the survivors again in an --enable-asan build")
    a = ap.parse_args()

    work = []
    texts = {}
    for path, (ff, lf, tiers) in FILES.items():
        if a.only and path not in a.only:
            continue
        with open(os.path.join(SRC, path)) as f:
            texts[path] = f.read()
        for j, (off, orig, repl, fname, lineno) in enumerate(mutants(path, texts[path], ff, lf)):
            if j % a.every == 0:
                work.append((path, off, orig, repl, fname, lineno,
                             tiers[:1] if a.unit_only else tiers))
    if a.list:
        for path, off, orig, repl, fname, lineno, _ in work:
            print("%s:%d %s: %s -> %s" % (path, lineno, fname, orig, repl))
        print("%d mutants" % len(work))
        return 0

    equiv = load_equivalent()
    results = [None] * len(work)
    done = {}
    if (a.resume or a.report) and os.path.exists(a.log):
        with open(a.log) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2 and not parts[1].startswith("error") and \
                        not (a.rerun_survivors and parts[1] == "survived"):
                    done[parts[0]] = parts[1]
    todo = []
    for i, (path, off, orig, repl, fname, lineno, tiers) in enumerate(work):
        key = site_key(path, texts[path], off, orig, repl)
        if key in done:
            results[i] = (done[key], key)
        else:
            todo.append(i)
    print("%d mutants, %d to run" % (len(work), len(todo)), flush=True)
    notrun = 0
    if a.report:
        notrun, todo = len(todo), []
    lock = threading.Lock()
    nxt = [0]
    t0 = time.time()
    log = open(os.devnull if a.report else a.log, "a" if a.resume else "w")

    def worker():
        if nxt[0] >= len(todo):
            return
        tree = Tree(a.tmp)
        asan = []
        try:
            while True:
                with lock:
                    if nxt[0] >= len(todo):
                        return
                    i = todo[nxt[0]]
                    nxt[0] += 1
                path, off, orig, repl, fname, lineno, tiers = work[i]
                try:
                    r = tree.run_mutant(path, texts[path], off, orig, repl, tiers)
                    if r == "survived" and not a.no_asan:
                        # the same tests under AddressSanitizer and UBSan, as CI runs them
                        if not asan:
                            asan.append(Tree(a.tmp, asan=True))
                        r2 = asan[0].run_mutant(path, texts[path], off, orig, repl, tiers)
                        if r2.startswith("killed") or r2.startswith("timeout"):
                            r = r2.replace(":", "-asan:", 1)
                except Exception as e:  # noqa: BLE001 - one mutant, not the run
                    r = "error:%s" % str(e).replace("\t", " ").replace("\n", " ")[:200]
                key = site_key(path, texts[path], off, orig, repl)
                results[i] = (r, key)
                with lock:
                    log.write("%s\t%s\t%s:%d %s\n" % (key, r, path, lineno, fname))
                    log.flush()
        finally:
            tree.close()
            for t in asan:
                t.close()

    threads = [threading.Thread(target=worker) for _ in range(max(1, a.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()

    per = {}
    survivors = []
    for (path, off, orig, repl, fname, lineno, _), res in zip(work, results):
        if res is None:
            continue
        r, key = res
        c = per.setdefault(path, {"killed": 0, "survived": 0, "stillborn": 0, "equivalent": 0,
                                  "explained": 0, "error": 0})
        if r.startswith("error"):
            c["error"] += 1
        elif r.startswith("killed") or r.startswith("timeout"):
            c["killed"] += 1
        elif r == "stillborn":
            c["stillborn"] += 1
        else:
            c["survived"] += 1
            if key in equiv:
                c["equivalent" if equiv[key].startswith("equivalent") else "explained"] += 1
            survivors.append((path, lineno, fname, orig, repl, key, equiv.get(key)))
    print("%-20s %7s %7s %8s %10s %9s %9s" % ("file", "mutants", "killed", "survived",
                                                "equivalent", "explained", "stillborn"))
    tot = {"killed": 0, "survived": 0, "stillborn": 0, "equivalent": 0, "explained": 0, "error": 0}
    for path, c in per.items():
        print("%-20s %7d %7d %8d %10d %9d %9d" % (path, c["killed"] + c["survived"], c["killed"],
                                                  c["survived"], c["equivalent"], c["explained"],
                                                  c["stillborn"]))
        for k in tot:
            tot[k] += c[k]
    print("\nsurvivors:")
    for path, lineno, fname, orig, repl, key, why in survivors:
        print("  %s:%d %s: %s -> %s%s" % (path, lineno, fname, orig, repl,
                                          "  [%s]" % why if why else "  [UNEXPLAINED]"))
        if not why:
            print("      key: %s" % key)
    n = tot["killed"] + tot["survived"]
    unexplained = tot["survived"] - tot["equivalent"] - tot["explained"]
    score = 100.0 * tot["killed"] / n if n else 0.0
    if a.every > 1:
        print("\na sample: the first mutant of every %d of each file's list" % a.every)
    if notrun:
        print("\n%d mutants not run yet (--resume runs them); the score is of those run" % notrun)
    if tot["error"]:
        print("\n%d mutants not run to a result (see the log; --resume runs them)" % tot["error"])
    print("\nmutation: %d mutants (%d more did not compile), %d killed (%.1f%%), %d survived: "
          "%d equivalent, %d explained otherwise, %d unexplained; %.0f min"
          % (n, tot["stillborn"], tot["killed"], score, tot["survived"], tot["equivalent"],
             tot["explained"], unexplained, (time.time() - t0) / 60))
    return 0 if score >= 90 and unexplained == 0 and not tot["error"] and not notrun else 1


if __name__ == "__main__":
    sys.exit(main())
