#!/usr/bin/python3
"""Where the daemon's CPU goes, function by function, beside its kernels
alone (issue 30): perf's software clock samples (cpu-clock: no hardware
counters needed, so it runs on a VM) of sinkwatchd on its default options
during a paced flood of 4 MiB f16 messages, and of `bench message` on the
same message shape, each function in CPU ms per message.

The overhead line of `make bench` divides the daemon's CPU outside
ZeroMQ's I/O threads by its kernels' CPU alone. This says which functions
make the difference: a kernel that runs slower in the daemon than alone
(the message read once, fresh from another core), or work the bench does
not have (the writer, the event loop, page faults).

    BENCH=bench/bench SINKWATCHD=./sinkwatchd /usr/bin/python3 bench/profile.py \\
        [--rate 200] [--seconds 4] [--isa avx2] [--transport ipc] [--mode hot]
        [--back-to-back]

Prints "perf unavailable: ..." and exits 0 where perf cannot sample.
Not a test: it asserts nothing."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_bench as rb  # noqa: E402

FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")
SYSCALL = re.compile(r"^__(?:x64|ia32)_sys_(\w+)$")


def perf_ok():
    """None where perf samples the software clock here, else why not."""
    try:
        p = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null",
                            "true"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["rc %d" % p.returncode])[-1]


def kernel_sampled():
    """Whether perf records kernel-mode samples here: as root, or with
    kernel.perf_event_paranoid at most 1 (else perf keeps user mode only,
    quietly, and the kernel's share is missing from every total)."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return int(f.read()) <= 1
    except (OSError, ValueError):
        return False


def kernel_entry(frames):
    """What a kernel-mode sample's call chain (leaf first) entered the
    kernel for: a system call's name, a page fault, an interrupt (the
    first met from the leaf: a fault inside a system call is the fault's)."""
    for sym, _ in frames:
        m = SYSCALL.match(sym)
        if m:
            return m.group(1)
        if sym == "exc_page_fault":
            return "page fault"
        if sym.startswith(("asm_sysvec_", "asm_common_interrupt")):
            return "interrupt"
    return "other"


def samples(path):
    """{(thread name, function, its file): samples} of a perf.data file
    recorded with call chains: the leaf function in user mode; in kernel
    mode "[kernel: ENTRY]" (kernel_entry)."""
    out = subprocess.run(["perf", "script", "-i", path, "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    got = {}

    def add(comm, frames):
        if comm is None or not frames:
            return
        sym, dso = frames[0]
        key = ("[kernel: %s]" % kernel_entry(frames) if "kernel" in dso else
               sym if sym != "[unknown]" else "[unknown] " + os.path.basename(dso))
        k3 = (comm, key, os.path.basename(dso))
        got[k3] = got.get(k3, 0) + 1
    comm, frames = None, []
    for line in out.splitlines():
        m = FRAME.match(line)
        if m:
            frames.append((m.group(1), m.group(2)))
        elif line.strip():
            add(comm, frames)
            comm, frames = line.strip(), []
    add(comm, frames)
    return got


def per_message(got, hz, n, zmq, only=None):
    """{function: CPU ms per message} of the daemon's own threads (zmq
    False) or of ZeroMQ's (zmq True); only: the functions of that file."""
    out = {}
    for (comm, sym, dso), c in got.items():
        if comm.startswith("ZMQbg") == zmq and (only is None or dso == only):
            out[sym] = out.get(sym, 0.0) + 1e3 * c / hz / n
    return out


# bench.c's own work around the timed kernels (the message made, copied
# for the fresh and cold modes): not the kernels'
BENCH_OWN = ("main", "message_bench", "f16_layer", "fresh_message", "fresh_copy_run", "now",
             "cpu_now", "median")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="messages a second (default 200)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of the profiled flood")
    ap.add_argument("--isa", choices=("avx512", "avx2"), help="sinkwatchd --isa and BENCH_ISA")
    ap.add_argument("--transport", choices=("tcp", "ipc"), default="tcp")
    ap.add_argument("--mode", choices=("hot", "fresh", "cold"), default="fresh",
                    help="bench message's mode (default fresh, as the overhead line's)")
    ap.add_argument("--back-to-back", action="store_true",
                    help="bench message's repeats back to back, not at --rate (the overhead "
                    "line's are at the trial's rate)")
    ap.add_argument("--hz", type=int, default=2000, help="samples a second (default 2000)")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    why = perf_ok()
    if why:
        print("perf unavailable: %s" % why)
        return 0
    tmp = tempfile.mkdtemp(prefix="swprof-")
    try:
        return profile(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def profile(a, tmp):
    """The two recordings in tmp, and the table."""
    ep = ("ipc://%s/p.sock" % tmp if a.transport == "ipc"
          else "tcp://127.0.0.1:%d" % rb.free_port())
    d = rb.start_default(tmp, ep, ["--isa", a.isa] if a.isa else [])
    try:
        # the heap grows to its working size first (a fault per fresh page)
        rb.paced_trial(d, ep, "prof-warm", "f16", a.rate, 2.0, kernels=0)
        pd = os.path.join(tmp, "daemon.data")
        rec = subprocess.Popen(["perf", "record", "-q", "-g", "-F", str(a.hz), "-e", "cpu-clock",
                                "-p", str(d.proc.pid), "-o", pd],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        t = rb.paced_trial(d, ep, "prof", "f16", a.rate, a.seconds, kernels=0)
        rec.send_signal(2)
        rec.wait(timeout=60)
    finally:
        d.stop()
    n = t["messages"]
    pb = os.path.join(tmp, "bench.data")
    reps = 64       # bench message's most
    env = dict(os.environ, BENCH_ISA=a.isa) if a.isa else None
    bj = rb.run_json(["perf", "record", "-q", "-g", "-F", a.hz, "-e", "cpu-clock", "-o", pb,
                      rb.BENCH, "message", reps, a.mode] +
                     ([] if a.back_to_back else ["%.3f" % a.rate]), env=env)
    got = samples(pd)
    dm = per_message(got, a.hz, n, False)
    zm = per_message(got, a.hz, n, True)
    # the bench column: the metric kernels' functions only (linked into
    # the bench binary). The rest of that process is its setup (the
    # message made, its pages faulted in; for fresh and cold a copy a
    # repeat), not its timed loop: no figure to set beside the daemon's
    bm = {k: v for k, v in per_message(samples(pb), a.hz, reps, False,
                                      os.path.basename(rb.BENCH)).items()
          if k not in BENCH_OWN}
    st = t["cpu_ms_per_message"]
    print("sinkwatchd under a paced %s flood of 4 MiB f16 messages, %.0f/s, %d messages "
          "(%s, trial %s); bench message %s, %d repeats %s (%s); perf cpu-clock at %d Hz"
          % (a.transport, a.rate, n, a.isa or "best instruction set", "kept up" if t["ok"]
             else "fell behind", a.mode, reps, "back to back" if a.back_to_back else
             "at %.0f/s" % a.rate, bj.get("isa"), a.hz))
    print("%-32s %10s %10s %8s" % ("CPU ms per message", "daemon", "bench", "ratio"))
    for sym, v in sorted(dm.items(), key=lambda kv: -kv[1])[:a.top]:
        b = bm.get(sym)
        print("%-32s %10.3f %10s %8s" % (sym[:32], v, "%.3f" % b if b else "-",
                                         "%.2f" % (v / b) if b else "-"))
    print("%-32s %10.3f %10.3f %8.2f   (bench: its kernels' own clock, %.3f)"
          % ("all but ZeroMQ's threads", sum(dm.values()), bj["kernels_cpu_s"] * 1e3,
             sum(dm.values()) / (bj["kernels_cpu_s"] * 1e3), bj["kernels_cpu_s"] * 1e3))
    kern = sum(v for k, v in dm.items() if k.startswith("[kernel"))
    print("%-32s %10.3f%s" % ("  of which in the kernel", kern, "" if kernel_sampled() else
                              "   (not sampled: perf_event_paranoid > 1; every total is short)"))
    print("%-32s %10.3f" % ("ZeroMQ's I/O threads", sum(zm.values())))
    print("the daemon's own counters, same trial (status cpu): " +
          ", ".join("%s %.3f" % (k, st[k]) for k in rb.STAGES) +
          "; outside zmq_io %.3f" % (st["stages"] - st["zmq_io"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
