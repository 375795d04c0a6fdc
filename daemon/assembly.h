/*
 * assembly.h: step assembly, the daemon's bookkeeping between a decoded
 * snapshot and the writer, with no sockets, threads or event loop: a
 * context struct that the loop thread (or a test) drives. Its rules are
 * proto/PROTOCOL.md section 7 and 7a:
 *
 *  - a run is its id and its shape (model, params, layers, heads, sink,
 *    kind, dtype, rows, keys, fixed probe): a message with another shape
 *    under the same id is another run, written to another file (the
 *    writer's generations), never mixed and never dropped;
 *  - a step is assembled per (step, incarnation): layers of one step sent
 *    by two incarnations never mix;
 *  - a step whose layers have all arrived goes to the writer however long
 *    its layers took; a step is closed incomplete only when input is
 *    missing: nothing arrived for it for step_timeout_ms;
 *  - complete steps of a run go to the writer in step order while an
 *    earlier step of the run is still arriving (live dH and drift then
 *    have their neighbour), and in any order otherwise: the stored result
 *    does not depend on it (LAYOUT.md, the view);
 *  - a full run table closes an idle run (nothing open, nothing in work;
 *    the least recently active) without an end, its file resumed when it
 *    speaks again; with no idle run, a new run is refused (too_many_runs),
 *    and so is one past the rate of new runs (run_rate);
 *  - several senders of one incarnation (PROTOCOL.md 7b): each has its own
 *    seq, counters and end; parts of a layer (some heads, some rows) are
 *    gathered here, in memory counted against the budget, and the layer is
 *    computed once whole, as if one message had carried it; a part that
 *    repeats cells already received is a duplicate, computed only to be
 *    compared with what was kept.
 */
#ifndef SWD_ASSEMBLY_H
#define SWD_ASSEMBLY_H

#include <stdint.h>

#include "daemon/daemon.h"
#include "daemon/status.h"

struct swd_ticket;

/*
 * A gathered layer's data, handed to conf.work: each head's R rows of K
 * elements (R K elements, rows one after another) start at head[h]. A head
 * sent whole by one part (every row, PROTOCOL.md 7b) lies in that part's
 * frame, kept by conf.hold; the other heads lie in buffers of the
 * assembly's (zeros where nothing came). swd_parts_free releases both.
 */
typedef struct swd_parts {
	const void **head;	/* [heads] */
	void **own;		/* nown buffers to free() */
	size_t nown;
	void **held;		/* nheld handles of conf.hold, to release */
	size_t nheld;
	void (*release)(void *ud, void *handle);
	void *ud;
} swd_parts;

/* Frees what p holds and p itself; NULL is a no-op. */
void swd_parts_free(swd_parts *p);

typedef struct swd_asm_conf {
	int64_t step_timeout_ms;	/* an incomplete step waits this long after its last arrival */
	int64_t max_open_steps;		/* steps being assembled per run */
	int64_t max_runs;		/* runs tracked at once */
	int64_t run_idle_s;		/* a run silent this long is closed (file kept) */
	atomic_llong *inflight;		/* bytes held, released as layers are freed */
	int64_t budget_bytes;		/* parts gathered stay under it with the rest (0: none) */
	/* starts the work of a gathered layer (below); NULL: parts are refused */
	int (*work)(void *ud, const struct swd_ticket *t, const swp_msg *m, swd_parts *data,
	    size_t bytes, int32_t *miss);
	void *work_ud;
	/*
	 * Keeps the frame of the part m alive, not copied, when the part's
	 * heads are whole and its tensor holds at least hold_min bytes: returns
	 * where m's tensor lies now (NULL: not kept, the part is copied), with
	 * *handle for release (both called with work_ud). A kept frame holds at
	 * most hold_extra bytes beyond its tensor: a gather reserves that much
	 * per head with its first part. NULL: every part is copied.
	 */
	const void *(*hold)(void *ud, const swp_msg *m, void **handle);
	void (*release)(void *ud, void *handle);
	size_t hold_min, hold_extra;
	/* new runs taken into the table: a token bucket (0: no limit) */
	int64_t new_runs_per_s;		/* its rate */
	int64_t new_runs_burst;		/* its size (0: the rate, at least 1) */
	/*
	 * The bytes a whole layer's computation holds (its result, scratch),
	 * given the layer's message; NULL: 0. A gathered layer reserves them
	 * with its first part, so that once whole it is always computed: the
	 * budget refuses a layer's first part, never a part that waits.
	 */
	size_t (*work_bytes)(void *ud, const swp_msg *m);
	/*
	 * The bytes a run of this shape holds while it is open (the writer's
	 * swd_run_state_bytes); NULL: 0. Charged to the budget from the run's
	 * first message to its close; a run it does not fit is refused
	 * (run_state), whatever its header claims.
	 */
	size_t (*run_bytes)(void *ud, const swd_meta *m);
} swd_asm_conf;

/* Where assembled steps and run ends go (the writer); the callee owns it. */
typedef void (*swd_asm_emit)(void *ud, swd_witem *it);

typedef struct swd_asm swd_asm;

/* What swd_asm_admit, _done and _end return when nothing is dropped (the
 * drop reasons are SWD_DROP_*, from 0). */
#define SWD_ASM_ACCEPT (-1)
/* swd_asm_admit: the part was taken into its layer; nothing to compute now */
#define SWD_ASM_HELD (-2)
/* swd_asm_admit: a duplicate (counted as such by the caller) to be
 * computed like a layer and handed to swd_asm_done, which compares it */
#define SWD_ASM_COPY (-3)
/* swd_asm_end: an end of a run not held here, handed to the writer, which
 * counts it in the run file's sender table or as unknown_run */
#define SWD_ASM_DEFERRED (-4)

/*
 * A layer admitted for work: what swd_asm_done needs to find its step.
 * A gathered layer's work is started by the assembly through conf.work:
 * m is the whole layer (head0 0, all heads and rows; m->qpos, when not
 * NULL, and data (m->tensor is NULL), bytes already counted in inflight, and miss, or NULL
 * when every cell came, [heads] entries for swd_layer.miss_rank, become the callee's
 * when it returns SWD_ASM_ACCEPT); else it returns a drop reason (budget,
 * nomem), and the assembly keeps what it passed and tries again later. The result comes back through swd_asm_done like any layer.
 */
typedef struct swd_ticket {
	void *run, *step;
	uint32_t layer;
	int copy;		/* SWD_ASM_COPY: compared, never stored */
	int64_t cstep;		/* a copy's step */
	void *sender;		/* the sender of the message (a gathered layer: NULL) */
	uint64_t seq;		/* the message's seq */
	uint32_t head0, row0;	/* a copy's place in its layer */
} swd_ticket;

/* Counters the daemon reports (status). */
typedef struct swd_asm_stats {
	int64_t steps_complete, steps_incomplete;
	/* parts of several senders taken into their layers: kept as they came
	 * (conf.hold), or copied */
	int64_t parts_kept, parts_copied;
	/*
	 * Messages the assembly gave up after it took them (held parts whose
	 * layer could not be computed, work that failed), by drop reason; the
	 * reasons swd_asm_admit, _end and _refuse return, and those given to
	 * swd_asm_cancel, are the caller's to count. Each sender's own counts
	 * (swd_sender.drop) hold both.
	 */
	int64_t drops[SWD_DROP_REASONS];
} swd_asm_stats;

/* What status shows of one run. */
typedef struct swd_asm_run {
	const char *run, *model;
	uint32_t layers, heads, incarnations;
	int fixed_probe;
	int64_t steps_done, last_step, open_steps, lost, incomplete, messages;
	const char *last_gap;	/* "" or the last missing heads, named by rank */
} swd_asm_run;

swd_asm *swd_asm_new(const swd_asm_conf *c, swd_asm_emit emit, void *ud);
/* Frees everything without emitting (after swd_asm_shutdown). */
void swd_asm_free(swd_asm **a);

/*
 * A decoded snapshot arrives at time now (ms, monotonic). Returns SWD_ASM_ACCEPT and
 * fills *t when its layer is to be computed from the message (then exactly
 * one of swd_asm_start or swd_asm_cancel follows), SWD_ASM_COPY likewise
 * for a duplicate to compare, SWD_ASM_HELD when a part was taken (its
 * layer is computed once whole, through conf.work), or an SWD_DROP_* reason with
 * why (the message is not stored and the caller counts the reason).
 */
int swd_asm_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t,
    char *why, size_t len);
/* The admitted layer is in work; swd_asm_done follows. */
void swd_asm_start(swd_asm *a, const swd_ticket *t);
/* The admitted layer will not be computed: forget it; its message counts
 * under reason (budget, nomem) for its sender (the caller counts it too). */
void swd_asm_cancel(swd_asm *a, const swd_ticket *t, int reason);
/*
 * A decoded snapshot the caller drops before admission (stopping): its
 * sender's seq goes on and the reason is counted for the sender, if its
 * run is known; nothing is created.
 */
void swd_asm_refuse(swd_asm *a, const swp_msg *m, int reason);
/*
 * The layer's result (NULL: the work failed, nomem) at time now. Steps
 * that are whole go to the writer. Ownership of ly passes to the assembly.
 * Returns SWD_ASM_ACCEPT (a step is never written while a layer is in work).
 */
int swd_asm_done(swd_asm *a, const swd_ticket *t, swd_layer *ly, uint64_t now);

/* An end message: SWD_ASM_ACCEPT, SWD_ASM_DEFERRED (a named end of a run
 * not held here: the writer's), or a drop reason: SWD_DROP_UNKNOWN_RUN,
 * SWD_DROP_SENDERS (its senders is not its incarnation's), SWD_DROP_AFTER_END
 * (its sender had ended). */
int swd_asm_end(swd_asm *a, const swp_msg *m, uint64_t now);

/* Timeouts and idle runs. */
void swd_asm_tick(swd_asm *a, uint64_t now);

/*
 * Shutdown begins: every step with gathered parts starts their layers as
 * they are (missing heads named), so that what arrived is written; the
 * caller runs the work in flight to its end, then calls swd_asm_shutdown.
 */
void swd_asm_stop(swd_asm *a);
/* Every open step goes to the writer (shutdown); runs are forgotten. Parts
 * still gathered (swd_asm_stop was not called) count as stopping. */
void swd_asm_shutdown(swd_asm *a);

/* Jobs in flight over all runs. */
int64_t swd_asm_jobs(const swd_asm *a);

/* Fills at most max runs' figures; returns the number filled. */
size_t swd_asm_runs(const swd_asm *a, swd_asm_run *out, size_t max);
/* Fills at most max senders' counters, every run's; returns the number
 * filled. run[i] is the run id of out[i] (pointers into the assembly). */
size_t swd_asm_senders(const swd_asm *a, swd_sender *out, const char **run, size_t max);
/* How many runs are open, and how many senders they have heard. */
void swd_asm_count(const swd_asm *a, int64_t *runs, int64_t *senders);
const swd_asm_stats *swd_asm_get_stats(const swd_asm *a);

/*
 * Runs ended or closed lately (SWD_ASM_FINISHED_MAX, the oldest goes), the
 * latest first, as swd_asm_runs fills them; ended[i] 1 if it ended, 0 if
 * closed idle. Returns the number filled (pointers into the assembly).
 */
#define SWD_ASM_FINISHED_MAX 64
#define SWD_ASM_FINISHED_SENDERS 64	/* senders kept of each (the first by incarnation, rank) */
size_t swd_asm_finished(const swd_asm *a, swd_asm_run *out, int *ended, size_t max);
/* Their senders' last counters, in the same order; run[i] the run id of out[i]. */
size_t swd_asm_finished_senders(const swd_asm *a, swd_sender *out, const char **run,
    size_t max);

/* A run id refused lately (too_many_runs, run_rate), with its counts. */
typedef struct swd_asm_refused {
	const char *run;
	int64_t too_many_runs, run_rate, run_state;
} swd_asm_refused;
#define SWD_ASM_REFUSED_MAX 64	/* run ids remembered (the least recent goes) */
/* Fills at most max of the run ids refused lately, the latest first;
 * returns the number filled (pointers into the assembly). */
size_t swd_asm_refused_runs(const swd_asm *a, swd_asm_refused *out, size_t max);
/* Run ids that entered the refused list since the start (one that left the
 * list, the least recently refused, and came back counts again). */
int64_t swd_asm_refused_total(const swd_asm *a);

#endif
