/*
 * writer_int.h: the writer thread's own state, shared by its files, which
 * call downwards only: writer.c (the thread, its queue, ends, flushes) ->
 * writer_step.c (a step computed and appended) -> writer_runs.c (the run
 * table: files, row keys, incarnations, the senders' accounts and fates).
 * Only the writer thread touches these, but the fates (fmu).
 */
#ifndef SWD_WRITER_INT_H
#define SWD_WRITER_INT_H

#include <pthread.h>
#include <sys/types.h>

#include "daemon/daemon.h"

/* A stored row's key: the step and the incarnation that sent it. */
struct rkey {
	int64_t step;
	uint64_t inc;
	int whole;		/* every layer stored (a later layer is a duplicate, else late) */
};

/*
 * What the writer knows of an incarnation's rows in the file: the messages
 * they hold and its lost count as its last row says, for the loss across
 * a restart (first_seen).
 */
struct winc {
	uint64_t inc;
	int64_t stored;		/* messages (layers) of its rows in the file */
	int64_t lost_file;	/* inc_lost of its last row in the file */
	int64_t lost_prev;	/* its lost before this session: lost_file + what
				 * the daemon that stopped never stored */
	int seen;		/* it spoke in this session */
	int resumed;		/* its resume record is in the file */
	int64_t gap;		/* what first_seen added, for its sender's row (one sender) */
	struct winc *next;
};

/*
 * Messages of a sender that the writer did not store although the
 * assembly handed them over (swd_witem.mc): the row of the step was there
 * already (duplicate), the file failed (write_error), or another process
 * holds the run (locked). Kept by the assembly's run object (its serial:
 * a run reopened after an idle close is another, whose counts start again,
 * as its file row's start from what the file holds), the least recently
 * changed entry replaced past WFATES, so that status can say each sender's.
 */
#define WFATES 4096
/* duplicate: the row was stored whole; late: it was stored without some of
 * its layers, and this one comes after (a restart, or a close, between) */
enum { WF_DUP, WF_WRITE, WF_LOCKED, WF_LATE, WF__N };
struct wfate {
	uint64_t serial;
	uint64_t inc;
	uint32_t rank;
	int64_t n[WF__N];	/* by fate (WF_*) */
	uint64_t seq;		/* order of the last change, 0: unused */
};
/*
 * A row of the file's sender table: what earlier daemon sessions stored
 * (base) and where it is. The row is rewritten as base + this session's
 * counts whenever they change.
 */
struct wsend {
	uint64_t inc;
	uint32_t rank;
	int64_t row;
	uint64_t base[SW_SENDER_FIELDS];
	int seen;		/* it spoke in this session */
	struct wsend *next;
};

struct wrun {
	swd_meta meta;
	off_t size;		/* the file's size at the last flush, 0 before */
	struct wsend *snd;
	int64_t nsnd;		/* rows of the sender table */
	sw_runfile *f;
	int broken;		/* no file could be opened: steps are dropped, counted */
	int locked;		/* broken because another process holds the run's lock */
	int64_t lock_tried_ms;	/* when the lock was last tried (it is tried again) */
	sw_runlock *lock;	/* the run's lock (storage/runlock.c), held while open */
	int dirty;
	int ended_ok;		/* an end that came later: every rank has ended */
	int cross_warned;	/* the cross_layer_pairs mismatch was logged */
	uint32_t generation;	/* of its file (NAME@g.h5), 0: none open */
	int has_prev;
	int64_t prev_step, prev_row;	/* the last row written, if has_prev */
	uint64_t prev_inc;	/* its incarnation */
	int64_t max_step;	/* the largest step of any row, -1 none */
	swm_head *prev;		/* [L * H] values of the last stored step */
	swd_layer **prev_layers;	/* [L], fixed probes: rows and ln parts */
	struct rkey *keys;	/* sorted (step, inc) of every row, for duplicates */
	size_t nkeys, capkeys;
	struct winc *incs;
	int64_t incomplete_base;
	int64_t lost_prev;	/* the sum of the incarnations' lost_prev */
	struct wrun *next;
};

struct swd_writer {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	swd_witem *head, *tail;
	int stop;
	int64_t pushed, done;	/* items queued, and taken and processed (under mu) */
	pthread_cond_t done_cv;
	swd_config cfg;
	atomic_llong *inflight;
	swd_wstats st;
	struct wrun *runs;
	int64_t last_flush_ms;
	/*
	 * The locks of the last runs this writer ended, still held: another
	 * daemon that takes the same runs (overlapping prefixes) but lags
	 * behind would otherwise find the lock free once we closed the file,
	 * and store the run again (as a new generation of an ended run).
	 */
	sw_runlock *ended_locks[SWD_ENDED_LOCKS];
	size_t ended_next;
	uint32_t want_gen;	/* open_file: this generation only (0: the newest of the shape) */
	pthread_mutex_t fmu;	/* fates, read by other threads */
	struct wfate *fates;	/* [WFATES] */
	uint64_t fate_seq;
};

/* writer_step.c */
int wr_write_step(swd_writer *w, swd_witem *it);

/* writer_runs.c */
int64_t wr_mono_ms(void);
void wr_free_layers(swd_layer **ls, uint32_t n, atomic_llong *inflight);
void wr_free_item(swd_witem *it, atomic_llong *inflight);
int wr_has_key(const struct wrun *r, int64_t step, uint64_t inc);
int wr_add_key(struct wrun *r, int64_t step, uint64_t inc, int whole);
struct winc *wr_inc_get(struct wrun *r, uint64_t inc);
struct wrun *wr_run_get(swd_writer *w, const swd_meta *m, const swd_witem *it);
void wr_retry_lock(swd_writer *w, struct wrun *r, const swd_witem *it);
void wr_wrun_remove(swd_writer *w, struct wrun *r);
void wr_first_seen(swd_writer *w, struct wrun *r, struct winc *wi, uint64_t first_seq);
long long wr_fate_item(swd_writer *w, const swd_witem *it, int f);
void wr_put_senders(swd_writer *w, struct wrun *r, const swd_sender *snd, size_t n);
int wr_end_sender(swd_writer *w, struct wrun *r, const swd_sender *c);

#endif
