#!/usr/bin/env python3
"""Issue 26's accounting invariant end to end: random schedules against a
real daemon, SIGTERM and SIGKILL among them.

Each schedule (seeded; SW_E2E_SEED, SW_E2E_N, default 0 and 40) is one run
of one incarnation with 1 to 3 senders (several: each sends its 2 heads of
every layer as a part), 1 to 5 steps of 2 layers, in a random interleaving
of the senders (each keeps its own order); faults: messages the client
drops (a skipped seq), copies sent again, a wrong senders count, and the
daemon stopped (SIGTERM) or killed (SIGKILL) and started again between
messages. Every sender sends a snapshot after the last restart and its
end. Then, for every sender, the run file's sender row says:

- its account adds up: messages = stored + every drop reason + its end;
- messages + lost = the messages it sent, its end included (its seq);
- stored = the parts of it that the file holds (its heads present in the
  rows of its incarnation).
"""
import os
import random
import signal
import sys
import time

import h5py
import msgpack
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import Daemon, Results, Sender, random_probs  # noqa: E402

ACCOUNT = ("stored", "duplicates", "overlaps", "mismatches", "after_end", "budget", "late",
           "senders_mismatch", "nomem", "stopping", "open_steps", "write_error", "head_missing",
           "ended")
L, HR, ROWS, KEYS = 2, 2, 3, 8
R = Results()
DAEMON = Daemon(extra=["--step-timeout-ms", "30000"])
SEEN = {"schedules": 0, "senders": 0, "sigterm": 0, "sigkill": 0, "dropped": 0, "copies": 0,
        "wrong_senders": 0}


def restart(kill, snd):
    SEEN["sigkill" if kill else "sigterm"] += 1
    DAEMON.stop(signal.SIGKILL if kill else signal.SIGTERM)
    DAEMON.start()
    for s in snd:
        s.wait_subscribed()


def schedule(seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    S, T = rng.randint(1, 3), rng.randint(1, 5)
    H = HR * S if S > 1 else 2
    run, inc = "acc-%d" % seed, 10_000 + seed
    snd = []
    for _ in range(S):
        s = Sender(DAEMON.listen, run, layers=L, heads=H, fixed=False)
        s.s.setsockopt(zmq.XPUB_VERBOSE, 1)     # the daemon's subscription after a restart
        snd.append(s)
    # each sender's messages, in its order: (step, layer, senders) or None for its end;
    # a wrong senders count only in schedules without a restart and of one sender:
    # a daemon takes an incarnation's senders from the first message of it that it
    # sees, and two senders' sockets are not ordered against each other
    nrestart = rng.randint(0, 2)
    wrong = 0.05 if nrestart == 0 and S == 1 else 0.0
    plan = []
    for k in range(S):
        msgs = []
        for t in range(T):
            for layer in range(L):
                # a wrong senders count, never the incarnation's first (it fixes it)
                msgs.append((t, layer, S + (t > 0 and rng.random() < wrong)))
                if rng.random() < 0.1:
                    msgs.append((t, layer, S))      # sent again
                    SEEN["copies"] += 1
                SEEN["wrong_senders"] += msgs[-1][2] != S
        msgs.append(None)
        plan.append(msgs)
    total = sum(len(m) for m in plan)
    # restarts between messages, none after the last snapshot of any sender
    last_snap = min(len(m) - 1 for m in plan)
    restarts = sorted(rng.sample(range(1, max(2, total - S * 2)), k=min(nrestart,
                                                                       max(0, total - S * 2 - 1))))
    pos = [0] * S
    sent = 0
    order = []
    while any(pos[k] < len(plan[k]) for k in range(S)):
        ks = [k for k in range(S) if pos[k] < len(plan[k])]
        # ends last: a sender's end waits until every sender sent its last snapshot
        if all(plan[k][pos[k]] is None for k in ks) or len(ks) == 1:
            k = ks[0]
        else:
            k = rng.choice([k for k in ks if plan[k][pos[k]] is not None])
        order.append((k, plan[k][pos[k]]))
        pos[k] += 1
    del last_snap
    for i, (k, m) in enumerate(order):
        if restarts and i == restarts[0]:
            restarts.pop(0)
            restart(rng.random() < 0.5, snd)
        s = snd[k]
        if m is None:
            h = {"v": 2, "type": "end", "run": run, "seq": s.seq, "time": time.time(),
                 "inc": inc, "rank": k, "senders": S}
            s.send_frames([msgpack.packb(h)])
            continue
        t, layer, senders = m
        if rng.random() < 0.06 and i < len(order) - 2 * S:
            s.seq += 1      # dropped in the client's queue
            SEEN["dropped"] += 1
            continue
        x = random_probs(nrng, HR if S > 1 else H, ROWS, KEYS)
        over = {"inc": inc}
        if S > 1 or senders != S:
            over.update(v=2, rank=k, senders=senders, head0=HR * k if S > 1 else 0, rows=ROWS)
        s.snapshot(t, layer, x, **over)
        sent += 1
    SEEN["schedules"] += 1
    SEEN["senders"] += S
    path = DAEMON.wait_ended(run, timeout=30)
    for s in snd:
        s.close()
    with h5py.File(path, "r") as f:
        names = f.attrs["sender_fields"].split(",")
        rows = {int(r[1]): dict(zip(names, (int(v) for v in r))) for r in f["senders"][:]
                if int(r[0]) == inc}
        incs, mr = f["inc"][:], f["missing_rank"][:]
    for k in range(S):
        row = rows.get(k)
        assert row is not None, "seed %d: no row for rank %d: %r" % (seed, k, rows)
        acc = sum(row[n] for n in ACCOUNT)
        assert acc == row["messages"], "seed %d rank %d: account %d, messages: %r" % (
            seed, k, acc, row)
        assert row["messages"] + row["lost"] == snd[k].seq, \
            "seed %d rank %d: messages + lost != seq %d: %r" % (seed, k, snd[k].seq, row)
        heads = slice(HR * k, HR * k + HR) if S > 1 else slice(0, H)
        held = int(sum((mr[t, layer, heads] == -1).all() for t in range(len(incs))
                       if incs[t] == inc for layer in range(L)))
        assert held == row["stored"], "seed %d rank %d: the file holds %d parts: %r" % (
            seed, k, held, row)


def all_schedules():
    s0 = int(os.environ.get("SW_E2E_SEED", "0"))
    n = int(os.environ.get("SW_E2E_N", "40"))
    DAEMON.start()
    try:
        for seed in range(s0, s0 + n):
            schedule(seed)
    finally:
        DAEMON.stop()
        print("covered: %s" % ", ".join("%s %d" % kv for kv in SEEN.items()))


R.check("the accounting invariant over random schedules", all_schedules)
R.finish()
