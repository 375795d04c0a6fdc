/*
 * daemon.h: sinkwatchd's parts and what passes between its threads.
 *
 * Threads: the libuv loop thread owns the ZeroMQ sockets, the run table and
 * step assembly; libuv's pool threads compute metrics of one layer each;
 * one writer thread owns every HDF5 file (HDF5 is not thread-safe here).
 */
#ifndef SWD_DAEMON_H
#define SWD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "daemon/conf.h"
#include "daemon/status.h"
#include "metrics/swm.h"
#include "proto/swproto.h"
#include "storage/runfile.h"

/* What a worker computed for one layer of one snapshot. */
typedef struct swd_layer {
	uint32_t layer;
	int32_t *miss_rank;	/* [heads] or NULL (all present): -1 present, else the
				 * rank that should have sent the head (-2: none known);
				 * a missing head holds rows 0, absent rows, no pairs */
	uint32_t heads, rows, keys;
	swm_head_acc *acc;	/* [heads] */
	swm_pair_acc *pairs;	/* [heads * heads] or NULL */
	swm_row *rows_st;	/* [heads * rows] or NULL */
	float *ln;		/* [heads * nln * keys] or NULL */
	uint32_t *ln_rows;	/* [nln] the rows of ln, ascending; inside ln's allocation */
	uint32_t *pair_idx;	/* [npair] the rows that got pair work, ascending */
	uint32_t npair;
	uint32_t nln;
	/* cross_layer_pairs: the pair rows as sent, [heads, nx, keys] of the
	 * message's dtype, their valid keys [nx] and indices [nx] (one allocation) */
	void *xrows;
	uint32_t *xvalid, *xidx;
	uint32_t nx;
	size_t bytes;		/* held against the budget until freed */
} swd_layer;

/* What the loop thread knows of a run from its first snapshot. */
typedef struct swd_meta {
	char run[SWP_RUN_MAX + 1];
	char model[SWP_MODEL_MAX + 1];
	uint64_t params;
	uint32_t layers, heads, sink, rows, keys;
	int fixed_probe;
	swp_kind kind;
	swp_dtype dtype;
} swd_meta;

/* CLOSE: idle run, file closed, not ended; INC: a named incarnation first seen */
/*
 * Two runs are one when their id and shape agree: a run id re-used with
 * another model, params, layers, heads, sink, probe shape, kind, dtype or
 * probe setting is another run (another file: LAYOUT.md, generations).
 */
static inline int
swd_meta_eq(const swd_meta *a, const swd_meta *b)
{
	return !strcmp(a->run, b->run) && !strcmp(a->model, b->model) &&
	    a->params == b->params && a->layers == b->layers && a->heads == b->heads &&
	    a->sink == b->sink && a->rows == b->rows && a->keys == b->keys &&
	    a->fixed_probe == b->fixed_probe && a->kind == b->kind && a->dtype == b->dtype;
}

/* Wall-clock time, Unix seconds. */
static inline double
swd_wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * One sender of a run (PROTOCOL.md 7b): an incarnation's rank, with what
 * this daemon session counted of it since the run was opened.
 */
typedef struct swd_sender {
	uint64_t serial;	/* its run object's (the assembly's; the writer's share by it) */
	uint64_t inc;
	uint32_t rank, senders;
	uint64_t first_seq;	/* the first seq of it this session saw */
	/*
	 * Its counters of its own (daemon/sender_counters.def, those OWN):
	 * messages, lost, seq_next, stored, pending, disagree, ...
	 */
#define SWD_OWN_FIELD_OWN(type, name) SWD_CT_##type name;
#define SWD_OWN_FIELD_DROP(type, name)
#define SWD_SENDER_COUNTER(name, type, where, drop) SWD_OWN_FIELD_##where(type, name)
#include "daemon/sender_counters.def"
#undef SWD_OWN_FIELD_OWN
#undef SWD_OWN_FIELD_DROP
	/*
	 * Its messages not stored, by drop reason (SWD_DROP_*), each counted
	 * once: duplicate (parts or layers another sender had sent, and layers
	 * sent again), overlap, part_mismatch, after_end, budget, late, ...
	 * messages = stored + pending + sum(drop) + ended (the end message).
	 */
	int64_t drop[SWD_DROP_REASONS];
} swd_sender;

/*
 * A sender's counters as status shows them (daemon/sender_counters.def:
 * those of its own, and the DROP ones under their names too).
 */
#define SWD_SVAL_OWN(c, name, r) (c)->name
#define SWD_SVAL_DROP(c, name, r) (c)->drop[SWD_DROP_##r]
static inline swd_status_sender
swd_sender_status(const char *run, const swd_sender *c)
{
	swd_status_sender s = { .run = run, .inc = c->inc, .rank = c->rank, .senders = c->senders };
#define SWD_SENDER_COUNTER(name, type, where, drop) s.name = SWD_SVAL_##where(c, name, drop);
#include "daemon/sender_counters.def"
	memcpy(s.drop, c->drop, sizeof(s.drop));
	return s;
}

enum { WQ_STEP, WQ_END, WQ_CLOSE, WQ_STOP, WQ_INC, WQ_SENDERS };

/* A unit of work for the writer. */
typedef struct swd_witem {
	int type;
	swd_meta meta;
	uint64_t serial;	/* the run object that made it (swd_sender.serial) */
	int64_t step;
	swd_layer **layers;	/* [meta.layers], NULL where missing */
	int64_t lost, incomplete;	/* run counters as of this step */
	double time;
	uint64_t inc;		/* the incarnation that sent the step */
	uint64_t seq_next;	/* the next seq expected of it when the step was made */
	int64_t inc_lost;	/* its messages missing by seq this session */
	uint64_t first_seq;	/* the first seq this daemon saw of the incarnation */
	int inc_named;		/* the sender named it (inc), not inferred */
	int has_resume;		/* the incarnation declared a resume from step resume */
	/*
	 * WQ_END of a run the assembly does not hold (closed idle, or held
	 * before a restart): the writer finds the files of the id (meta.run)
	 * whose sender table holds inc. snd[0] is the end's sender (inc, rank,
	 * senders; seq_next the end's seq + 1): its row counts the end, and a
	 * file is marked ended only when every rank of the incarnation has.
	 */
	int reopen;
	int64_t resume;
	uint32_t inc_senders;	/* the incarnation's senders (1: one process) */
	int32_t *missing_rank;	/* [layers * heads] or NULL: as swd_layer.miss_rank,
				 * for every head; a layer never sent names its owner */
	swd_sender *snd;	/* WQ_SENDERS (and with WQ_STEP): counters to store */
	size_t nsnd;
	/* WQ_STEP: the messages whose data the step holds, by rank of inc */
	struct swd_mcount {
		uint32_t rank;
		int64_t n;
	} *mc;
	size_t nmc;
	struct swd_witem *next;
} swd_witem;

/* Writer statistics, read by the status command. */
typedef struct swd_wstats {
	atomic_llong steps_written, write_errors, flushes, files_open, queue_depth;
	atomic_llong max_flush_us;
	atomic_llong duplicates;	/* messages of steps an incarnation had already stored */
	atomic_llong lost_restart;	/* messages lost while the daemon was down */
	atomic_llong write_drops;	/* messages of steps not stored: the file failed */
	atomic_llong items;		/* items taken off the queue (the watchdog's progress) */
	atomic_llong bytes_written;	/* how much the run files grew, at flushes */
	atomic_llong locked_drops;	/* messages of runs another process holds the lock of */
	atomic_llong runs_locked;	/* runs refused: another process holds their lock */
	atomic_llong drift_ns;	/* the writer's CPU time in drift distances */
	atomic_llong unknown_ends;	/* ends of runs no file of the data directory holds */
	atomic_llong late_drops;	/* messages of steps an incarnation had stored incomplete */
} swd_wstats;

typedef struct swd_writer swd_writer;
#define SWD_ENDED_LOCKS 1024	/* runs ended whose lock the writer keeps */

/* Starts the writer thread. 0 or -1. */
int swd_writer_start(swd_writer **w, const swd_config *cfg, atomic_llong *inflight);
/*
 * The memory a run of this shape holds in the writer while it is open:
 * its file's buffers (sw_runfile_state_bytes), the last step's values, and
 * what writing one step takes (head values, the L*H*H pair matrices, the
 * cross-layer pairs when on). The assembly charges it to the budget while
 * the run is open and refuses a run it does not fit (run_state).
 */
size_t swd_run_state_bytes(const swd_meta *m, int cross_layer_pairs);

/* Queues an item (the writer frees it). */
void swd_writer_push(swd_writer *w, swd_witem *it);
/* Returns once every item queued before the call is processed. */
void swd_writer_sync(swd_writer *w);
/* Writes everything queued, closes every file, joins the thread. */
void swd_writer_stop(swd_writer **w);
const swd_wstats *swd_writer_stats(const swd_writer *w);
/*
 * A sender's counters (the assembly's) with the writer's share: messages
 * handed over that it did not store (duplicate, write_error, locked) move
 * from stored to their reason. Any thread.
 */
void swd_writer_fates(swd_writer *w, swd_sender *c);
/* The writer thread's CPU seconds so far (its thread clock). */
double swd_writer_cpu_s(const swd_writer *w);

void swd_layer_free(swd_layer *l, atomic_llong *inflight);

#endif
