/*
 * writer.c: the writer thread. It owns every run file: turns assembled
 * steps into the stored series (head values, the §3 split against the
 * previous stored step, drift, pair matrices, flip rates), appends them, and
 * flushes each dirty file once per flush round.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/log.h"

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
static const int wf_reason[WF__N] = { SWD_DROP_DUPLICATE, SWD_DROP_WRITE, SWD_DROP_LOCKED,
	SWD_DROP_LATE };

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

/* Counts n messages of (serial, inc, rank) under fate f. */
static void
fate_add(swd_writer *w, uint64_t serial, uint64_t inc, uint32_t rank, int f, int64_t n)
{
	if (n == 0 || !w->fates)
		return;
	pthread_mutex_lock(&w->fmu);
	struct wfate *e = NULL, *old = &w->fates[0];
	for (size_t i = 0; i < WFATES && !e; i++) {
		struct wfate *x = &w->fates[i];
		if (x->seq && x->serial == serial && x->inc == inc && x->rank == rank)
			e = x;
		else if (x->seq < old->seq)
			old = x;
	}
	if (!e) {
		e = old;
		memset(e, 0, sizeof(*e));
		e->serial = serial;
		e->inc = inc;
		e->rank = rank;
	}
	e->n[f] += n;
	e->seq = ++w->fate_seq;
	pthread_mutex_unlock(&w->fmu);
}

/* The messages of a step item the writer did not store, by their senders. */
static long long
fate_item(swd_writer *w, const swd_witem *it, int f)
{
	long long n = 0;
	for (size_t k = 0; k < it->nmc; k++) {
		fate_add(w, it->serial, it->inc, it->mc[k].rank, f, it->mc[k].n);
		n += it->mc[k].n;
	}
	return n;
}

/* What the writer did not store of one sender's messages, by fate. */
static void
fate_get(swd_writer *w, uint64_t serial, uint64_t inc, uint32_t rank, int64_t n[WF__N])
{
	memset(n, 0, WF__N * sizeof(*n));
	if (!w->fates)
		return;
	pthread_mutex_lock(&w->fmu);
	for (size_t i = 0; i < WFATES; i++) {
		const struct wfate *x = &w->fates[i];
		if (x->seq && x->serial == serial && x->inc == inc && x->rank == rank) {
			memcpy(n, x->n, sizeof(x->n));
			break;
		}
	}
	pthread_mutex_unlock(&w->fmu);
}

void
swd_writer_fates(swd_writer *w, swd_sender *c)
{
	int64_t n[WF__N];
	fate_get(w, c->serial, c->inc, c->rank, n);
	for (int f = 0; f < WF__N; f++) {
		c->drop[wf_reason[f]] += n[f];
		c->stored -= n[f];
	}
}

static int64_t
mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
swd_layer_free(swd_layer *l, atomic_llong *inflight)
{
	if (!l)
		return;
	if (inflight)
		atomic_fetch_sub(inflight, (long long)l->bytes);
	free(l->acc);
	free(l->pairs);
	free(l->rows_st);
	free(l->ln);
	free(l->pair_idx);
	free(l->miss_rank);
	free(l->xrows);
	free(l);
}

static void
free_layers(swd_layer **ls, uint32_t n, atomic_llong *inflight)
{
	if (!ls)
		return;
	for (uint32_t i = 0; i < n; i++)
		swd_layer_free(ls[i], inflight);
	free(ls);
}

static void
free_item(swd_witem *it, atomic_llong *inflight)
{
	free_layers(it->layers, it->meta.layers, inflight);
	free(it->missing_rank);
	free(it->snd);
	free(it->mc);
	free(it);
}

static void
wrun_free(struct wrun *r, atomic_llong *inflight)
{
	sw_runlock_release(&r->lock);	/* after the file's close (wrun_remove) */
	free(r->prev);
	free_layers(r->prev_layers, r->meta.layers, inflight);
	free(r->keys);
	while (r->snd) {
		struct wsend *d = r->snd;
		r->snd = d->next;
		free(d);
	}
	while (r->incs) {
		struct winc *i = r->incs;
		r->incs = i->next;
		free(i);
	}
	free(r);
}

/* Index of the first key >= k. */
static size_t
key_pos(const struct wrun *r, int64_t step, uint64_t inc)
{
	size_t lo = 0, hi = r->nkeys;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct rkey *x = &r->keys[mid];
		if (x->step < step || (x->step == step && x->inc < inc))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* 0: no row of (step, inc); 1: one stored without some layers; 2: whole. */
static int
has_key(const struct wrun *r, int64_t step, uint64_t inc)
{
	size_t i = key_pos(r, step, inc);
	if (i < r->nkeys && r->keys[i].step == step && r->keys[i].inc == inc)
		return 1 + r->keys[i].whole;
	return 0;
}

static int
add_key(struct wrun *r, int64_t step, uint64_t inc, int whole)
{
	if (r->nkeys == r->capkeys) {
		size_t cap = r->capkeys ? 2 * r->capkeys : 256;
		struct rkey *k = realloc(r->keys, cap * sizeof(*k));
		if (!k)
			return -1;
		r->keys = k;
		r->capkeys = cap;
	}
	size_t i = key_pos(r, step, inc);
	memmove(&r->keys[i + 1], &r->keys[i], (r->nkeys - i) * sizeof(*r->keys));
	r->keys[i].step = step;
	r->keys[i].inc = inc;
	r->keys[i].whole = whole;
	r->nkeys++;
	if (step > r->max_step)
		r->max_step = step;
	return 0;
}

static struct winc *
get_winc(struct wrun *r, uint64_t inc)
{
	struct winc *i;
	for (i = r->incs; i; i = i->next)
		if (i->inc == inc)
			return i;
	if ((i = calloc(1, sizeof(*i)))) {
		i->inc = inc;
		i->next = r->incs;
		r->incs = i;
	}
	return i;
}

/* What the file holds already: its rows' keys, incarnations and counters. */
static int
load_rows(struct wrun *r)
{
	sw_rows rows;
	char err[512];

	if (sw_runfile_rows(r->f, &rows, err, sizeof(err)) != 0) {
		log_err("run %s: %s", r->meta.run, err);
		return -1;
	}
	int rc = 0;
	for (int64_t i = 0; i < rows.n && rc == 0; i++) {
		struct winc *wi = get_winc(r, rows.inc[i]);
		rc = wi && add_key(r, rows.step[i], rows.inc[i],
		    rows.stored[i] == (int64_t)r->meta.layers) == 0 ? 0 : -1;
		if (wi) {
			wi->stored += rows.stored[i];
			wi->lost_file = rows.inc_lost[i];	/* rows are in time order */
		}
	}
	for (struct winc *wi = r->incs; wi; wi = wi->next) {
		wi->lost_prev = wi->lost_file;
		r->lost_prev += wi->lost_prev;
	}
	for (int64_t i = 0; i < rows.nres && rc == 0; i++) {
		struct winc *wi = get_winc(r, rows.res_inc[i]);
		if (wi)
			wi->resumed = 1;
		else
			rc = -1;
	}
	r->incomplete_base = rows.incomplete;
	sw_rows_free(&rows);
	/* the sender table: counts of earlier sessions go on */
	uint64_t *tab = NULL;
	int64_t ns = rc == 0 ? sw_runfile_senders(r->f, &tab, err, sizeof(err)) : 0;
	if (ns < 0) {
		log_err("run %s: %s", r->meta.run, err);
		rc = -1;
	}
	for (int64_t k = 0; k < ns && rc == 0; k++) {
		struct wsend *d = calloc(1, sizeof(*d));
		if (!d) {
			rc = -1;
			break;
		}
		memcpy(d->base, tab + k * SW_SENDER_FIELDS, sizeof(d->base));
		d->inc = d->base[SW_S_INC];
		d->rank = (uint32_t)d->base[SW_S_RANK];
		d->row = k;
		d->next = r->snd;
		r->snd = d;
	}
	r->nsnd = ns > 0 ? ns : 0;
	free(tab);
	return rc;
}

static struct wsend *
get_wsend(struct wrun *r, uint64_t inc, uint32_t rank)
{
	struct wsend *d;
	for (d = r->snd; d; d = d->next)
		if (d->inc == inc && d->rank == rank)
			return d;
	if ((d = calloc(1, sizeof(*d)))) {
		d->inc = inc;
		d->rank = rank;
		d->row = r->nsnd++;
		d->next = r->snd;
		r->snd = d;
	}
	return d;
}

/*
 * A sender of a several-sender incarnation first heard in this session:
 * what it sent below its first seq here that the file does not account
 * for (its table row's seq_next; all of it for a sender new to the file)
 * no daemon stored. Counted before any of its steps carries the totals.
 */
static void
sender_gap(swd_writer *w, struct wrun *r, struct wsend *d, const swd_sender *c)
{
	/*
	 * What the row accounts for: its messages (stored, or dropped and
	 * counted; a daemon counts there only what it no longer holds) and
	 * those lost. Not its seq_next: a killed daemon may have flushed a
	 * seq_next past messages it still held in memory.
	 */
	uint64_t held = d->base[SW_S_MESSAGES] + d->base[SW_S_LOST];
	d->seen = 1;
	if (c->senders <= 1) {	/* one sender: counted per incarnation (first_seen) */
		struct winc *wi = get_winc(r, c->inc);
		if (wi) {
			d->base[SW_S_LOST] += (uint64_t)wi->gap;
			wi->gap = 0;
		}
		return;
	}
	if (c->first_seq <= held)
		return;
	int64_t gap = (int64_t)(c->first_seq - held);
	d->base[SW_S_LOST] += (uint64_t)gap;
	struct winc *wi = get_winc(r, c->inc);
	if (wi)
		wi->lost_prev += gap;
	r->lost_prev += gap;
	atomic_fetch_add(&w->st.lost_restart, gap);
	log_warn("run %s: %lld message(s) of rank %u of incarnation %llu no daemon stored "
	    "(seq below %llu)", r->meta.run, (long long)gap, c->rank,
	    (unsigned long long)c->inc, (unsigned long long)c->first_seq);
}

/* This session's counters of some senders into the file's table. */
static void
put_senders(swd_writer *w, struct wrun *r, const swd_sender *snd, size_t n)
{
	char err[512];
	for (size_t k = 0; k < n && r->f; k++) {
		const swd_sender *c = &snd[k];
		struct wsend *d = get_wsend(r, c->inc, c->rank);
		if (!d)
			return;
		if (!d->seen)
			sender_gap(w, r, d, c);
		uint64_t v[SW_SENDER_FIELDS];
		const uint64_t *b = d->base;
		v[SW_S_INC] = c->inc;
		v[SW_S_RANK] = c->rank;
		v[SW_S_SENDERS] = c->senders;
		v[SW_S_MESSAGES] = b[SW_S_MESSAGES] + (uint64_t)c->messages;
		v[SW_S_LOST] = b[SW_S_LOST] + (uint64_t)c->lost;
		int64_t fn[WF__N];
		fate_get(w, c->serial, c->inc, c->rank, fn);
		v[SW_S_DUPLICATES] = b[SW_S_DUPLICATES] + (uint64_t)(c->drop[SWD_DROP_DUPLICATE] +
		    fn[WF_DUP]);
		v[SW_S_OVERLAPS] = b[SW_S_OVERLAPS] + (uint64_t)c->drop[SWD_DROP_OVERLAP];
		v[SW_S_MISMATCHES] = b[SW_S_MISMATCHES] + (uint64_t)c->drop[SWD_DROP_PART_MISMATCH];
		v[SW_S_DISAGREE] = b[SW_S_DISAGREE] + (uint64_t)c->disagree;
		v[SW_S_UNCOMPARED] = b[SW_S_UNCOMPARED] + (uint64_t)c->uncompared;
		v[SW_S_MISSING] = b[SW_S_MISSING] + (uint64_t)c->missing;
		v[SW_S_AFTER_END] = b[SW_S_AFTER_END] + (uint64_t)c->drop[SWD_DROP_AFTER_END];
		v[SW_S_SEQ_NEXT] = c->seq_next > b[SW_S_SEQ_NEXT] ? c->seq_next : b[SW_S_SEQ_NEXT];
		v[SW_S_ENDED] = c->ended || b[SW_S_ENDED];
		/* the rest of its account; what the writer did not store is not stored */
		v[SW_S_STORED] = b[SW_S_STORED] + (uint64_t)(c->stored - fn[WF_DUP] - fn[WF_WRITE] -
		    fn[WF_LOCKED] - fn[WF_LATE]);
		v[SW_S_BUDGET] = b[SW_S_BUDGET] + (uint64_t)c->drop[SWD_DROP_BUDGET];
		v[SW_S_LATE] = b[SW_S_LATE] + (uint64_t)(c->drop[SWD_DROP_LATE] + fn[WF_LATE]);
		v[SW_S_SENDERS_MISMATCH] = b[SW_S_SENDERS_MISMATCH] + (uint64_t)c->drop[SWD_DROP_SENDERS];
		v[SW_S_NOMEM] = b[SW_S_NOMEM] + (uint64_t)c->drop[SWD_DROP_NOMEM];
		v[SW_S_STOPPING] = b[SW_S_STOPPING] + (uint64_t)c->drop[SWD_DROP_STOPPING];
		v[SW_S_OPEN_STEPS] = b[SW_S_OPEN_STEPS] + (uint64_t)c->drop[SWD_DROP_OPEN_STEPS];
		v[SW_S_WRITE_ERROR] = b[SW_S_WRITE_ERROR] + (uint64_t)(c->drop[SWD_DROP_WRITE] +
		    fn[WF_WRITE]);
		v[SW_S_HEAD_MISSING] = b[SW_S_HEAD_MISSING] + (uint64_t)c->drop[SWD_DROP_HEAD_MISSING];
		if (sw_runfile_put_sender(r->f, d->row, v, err, sizeof(err)) != 0) {
			log_err("run %s: writing the sender table failed: %s", r->meta.run, err);
			atomic_fetch_add(&w->st.write_errors, 1);
			return;
		}
		r->dirty = 1;
	}
}


/*
 * Opens the run's file: the first generation whose file holds this run
 * with this shape, or a new one (a run id re-used with another model,
 * kind, shape, dtype or probe never mixes with the old data: LAYOUT.md).
 */
/*
 * A run id that ended, sent to again by an incarnation the file has never
 * heard that does not declare a resume: a new run under an old name (a
 * fresh start), not a continuation. It goes to the next generation, so
 * that two trajectories never mix.
 */
static int
fresh_after_end(sw_runfile *f, const swd_witem *it)
{
	sw_rows rows;
	char err[256];

	if (!it || it->reopen || it->has_resume || !sw_runfile_is_ended(f))
		return 0;
	if (sw_runfile_rows(f, &rows, err, sizeof(err)) != 0)
		return 0;
	int heard = 0;
	for (int64_t i = 0; i < rows.n && !heard; i++)
		heard = rows.inc[i] == it->inc;
	sw_rows_free(&rows);
	return !heard;
}

static int
open_file(swd_writer *w, struct wrun *r, const swd_witem *it)
{
	const swd_meta *m = &r->meta;
	sw_runmeta rm;
	char err[512];

	memset(&rm, 0, sizeof(rm));
	snprintf(rm.run, sizeof(rm.run), "%s", m->run);
	snprintf(rm.model, sizeof(rm.model), "%s", m->model);
	rm.params = m->params;
	rm.layers = m->layers;
	rm.heads = m->heads;
	rm.sink = m->sink;
	rm.fixed_probe = m->fixed_probe;
	rm.split_form = m->fixed_probe ? "paired" : "aggregate";
	rm.kind = swp_kind_name(m->kind);
	rm.dtype = swp_dtype_name(m->dtype);
	rm.rows = m->rows;
	rm.keys = m->keys;
	rm.row_stats = m->fixed_probe;
	rm.cross_pairs = w->cfg.cross_layer_pairs != 0 && m->kind != SWP_ROWSTATS;
	sw_runfile_opts fo = { .chunk_steps = (size_t)w->cfg.chunk_steps };
	/*
	 * The run's lock first, held until the run is closed: another process
	 * (a daemon whose subscriptions overlap ours, on the same directory)
	 * that writes the run keeps it, and we refuse the run, counted (locked).
	 */
	int lk = sw_runlock_take(w->cfg.data_dir, m->run, &r->lock, err, sizeof(err));
	if (lk == SW_RUNFILE_LOCKED) {
		r->locked = 1;
		log_warn("run %s: refused: %s; its steps are dropped here, counted as locked",
		    m->run, err);
		return -1;
	}
	if (lk != 0)
		goto fail;
	/*
	 * The run is the newest generation whose file holds this shape (a
	 * resumed or continued run goes on there), or the first free one.
	 */
	uint32_t g, last = 0, free_g = 0;
	if (w->want_gen) {	/* an end that came later: the file that holds its sender */
		rm.generation = w->want_gen;
		if (sw_runfile_open(w->cfg.data_dir, &rm, &fo, &r->f, err, sizeof(err)) != 0)
			goto fail;
		goto opened;
	}
	for (g = 1; g <= 1000 && !free_g; g++) {
		/* a generation this writer holds open is another shape's: not probed
		 * (HDF5 refuses a second open of a file in this process) */
		int held = 0;
		for (const struct wrun *o = w->runs; o && !held; o = o->next)
			held = o != r && o->f && o->generation == g && !strcmp(o->meta.run, m->run);
		if (held)
			continue;
		rm.generation = g;
		int rc = sw_runfile_probe(w->cfg.data_dir, &rm, err, sizeof(err));
		if (rc == 0)
			last = g;
		else if (rc == 1)
			free_g = g;
		else if (rc < 0 && rc != SW_RUNFILE_OTHER)
			goto fail;
	}
	if (last) {
		rm.generation = last;
		if (sw_runfile_open(w->cfg.data_dir, &rm, &fo, &r->f, err, sizeof(err)) != 0)
			goto fail;
		if (!fresh_after_end(r->f, it))
			goto opened;
		log_info("run %s: %s ended and incarnation %llu, new to it, does not resume "
		    "it: a new run, stored in the next free generation", m->run,
		    sw_runfile_path(r->f), (unsigned long long)it->inc);
		sw_runfile_close(&r->f);
	}
	if (!free_g) {
		snprintf(err, sizeof(err), "no free generation of the name");
		goto fail;
	}
	rm.generation = free_g;
	if (sw_runfile_open(w->cfg.data_dir, &rm, &fo, &r->f, err, sizeof(err)) != 0)
		goto fail;
opened:
	r->generation = rm.generation;
	if (rm.generation > 1)
		log_info("run %s: generation %u of its id (%s)", m->run, rm.generation,
		    sw_runfile_path(r->f));
	return 0;
fail:
	log_err("run %s: cannot open its file: %s (its steps are dropped, counted as "
	    "write_error)", m->run, err);
	return -1;
}

/* Opens the run's file (or notes why not: broken, locked). */
static void
wrun_open(swd_writer *w, struct wrun *r, const swd_witem *it)
{
	const swd_meta *m = &r->meta;
	int retry = r->lock_tried_ms != 0;
	if (open_file(w, r, it) != 0 || load_rows(r) != 0) {
		r->broken = 1;
		if (r->locked)
			r->lock_tried_ms = mono_ms();
		if (!retry)	/* a run refused, once */
			atomic_fetch_add(r->locked ? &w->st.runs_locked : &w->st.write_errors, 1);
		return;
	}
	struct stat sb;
	if (stat(sw_runfile_path(r->f), &sb) == 0)	/* growth from here is counted */
		r->size = sb.st_size;
	atomic_fetch_add(&w->st.files_open, 1);
	int64_t have = sw_runfile_steps(r->f);
	if (have > 0)
		log_info("run %s: resumed %s with %lld stored rows", m->run,
		    sw_runfile_path(r->f), (long long)have);
	else
		log_info("run %s: new run file %s", m->run, sw_runfile_path(r->f));
}

static struct wrun *
wrun_get(swd_writer *w, const swd_meta *m, const swd_witem *it)
{
	struct wrun *r;
	for (r = w->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, m))
			return r;
	if (!(r = calloc(1, sizeof(*r))))
		return NULL;
	r->meta = *m;
	r->max_step = -1;
	size_t LH = (size_t)m->layers * m->heads;
	r->prev = calloc(LH, sizeof(*r->prev));
	if (!r->prev) {
		free(r);
		return NULL;
	}
	mkdir(w->cfg.data_dir, 0755);
	wrun_open(w, r, it);
	r->next = w->runs;
	w->runs = r;
	return r;
}

/*
 * A run refused because another process held its lock: the lock is tried
 * again every LOCK_RETRY_MS while the run's steps come, and the run is
 * taken over once the holder let it go (it died, or closed the run): the
 * file is resumed as any other, an ended one not (open_file's rules).
 */
#define LOCK_RETRY_MS 5000
static void
retry_lock(swd_writer *w, struct wrun *r, const swd_witem *it)
{
	if (!r->locked || mono_ms() - r->lock_tried_ms < LOCK_RETRY_MS)
		return;
	sw_runlock_release(&r->lock);
	r->locked = 0;
	r->broken = 0;
	wrun_open(w, r, it);
	if (r->broken)
		return;
	if (sw_runfile_is_ended(r->f)) {	/* the holder ended it: nothing to take over */
		sw_runfile_close(&r->f);
		sw_runlock_release(&r->lock);
		atomic_fetch_sub(&w->st.files_open, 1);
		r->broken = r->locked = 1;
		r->lock_tried_ms = mono_ms();
		return;
	}
	log_warn("run %s: the process that held its lock let it go: the run is taken over, "
	    "its steps are stored here from now on (%s)", r->meta.run, sw_runfile_path(r->f));
}

static void
wrun_remove(swd_writer *w, struct wrun *r)
{
	for (struct wrun **p = &w->runs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	if (r->f) {
		sw_runfile_close(&r->f);
		atomic_fetch_sub(&w->st.files_open, 1);
	}
	wrun_free(r, w->inflight);
}

/*
 * WQ_SENDERS: counters of the run's senders (a new one, or at its close).
 * Only into a file the writer has open: counters alone never make a file
 * (a several-sender incarnation's WQ_INC has opened it before).
 */
static void
senders_item(swd_writer *w, swd_witem *it)
{
	for (struct wrun *r = w->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, &it->meta)) {
			if (!r->broken)
				put_senders(w, r, it->snd, it->nsnd);
			return;
		}
}

/* Drift of head h between two fixed-probe steps (§4, metrics/drift.c). */
static void
drift(const swd_layer *a, const swd_layer *b, uint32_t h, uint32_t sink,
    double *dsink, double *dcontent)
{
	*dsink = *dcontent = NAN;
	if (!a || !b || !a->rows_st || !b->rows_st || a->rows != b->rows || a->keys != b->keys)
		return;
	size_t R = a->rows, K = a->keys;
	swm_drift_side x = { a->rows_st + h * R, a->ln ? a->ln + (size_t)h * a->nln * K : NULL,
	    a->ln_rows, a->nln };
	swm_drift_side y = { b->rows_st + h * R, b->ln ? b->ln + (size_t)h * b->nln * K : NULL,
	    b->ln_rows, b->nln };
	swm_drift(&x, &y, R, K, sink, dsink, dcontent);
}

/*
 * A named incarnation speaks for the first time in this session. Its seq
 * starts at 0 (PROTOCOL.md 7a): of its messages below first_seq, the file
 * holds `stored` and its last row counted `lost_file` lost; the rest no
 * daemon stored (sent while none ran, or received by one that was killed
 * before its flush). Counted here, before any row of the session carries
 * the run's total.
 */
static void
first_seen(swd_writer *w, struct wrun *r, struct winc *wi, uint64_t first_seq)
{
	wi->seen = 1;
	uint64_t held = (uint64_t)wi->stored + (uint64_t)wi->lost_file;
	/* its sender row (layout 3) accounts for the messages dropped too */
	for (const struct wsend *d = r->snd; d; d = d->next)
		if (d->inc == wi->inc && d->rank == 0 && d->base[SW_S_MESSAGES] + d->base[SW_S_LOST] >
		    held)
			held = d->base[SW_S_MESSAGES] + d->base[SW_S_LOST];
	if (first_seq <= held)
		return;
	int64_t gap = (int64_t)(first_seq - held);
	wi->lost_prev += gap;
	wi->gap += gap;		/* and in its sender's row (sender_gap) */
	r->lost_prev += gap;
	atomic_fetch_add(&w->st.lost_restart, gap);
	log_warn("run %s: %lld message(s) of incarnation %llu no daemon stored (seq below "
	    "%llu)", r->meta.run, (long long)gap, (unsigned long long)wi->inc,
	    (unsigned long long)first_seq);
}

/* WQ_INC: an incarnation first seen, before its steps or others' carry totals. */
static void
inc_seen(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wrun_get(w, &it->meta, it);
	struct winc *wi = r && !r->broken ? get_winc(r, it->inc) : NULL;
	/* several senders: per sender, from the sender table (sender_gap); a sender
	 * without inc is counted from its first seq here (PROTOCOL.md 7a) */
	if (wi && !wi->seen && it->inc_named && it->inc_senders <= 1)
		first_seen(w, r, wi, it->first_seq);
}

/*
 * Cross-layer pairs (cross_layer_pairs, LAYOUT.md xpair_*), by
 * metrics/cross.c over the layers' pair rows as sent. keep and drop hold
 * (L*H)^2. Returns 0, or -1 without memory (NaN then).
 */
static int
cross_pairs(const swd_meta *m, swd_layer *const *layers, double *keep, double *drop)
{
	size_t L = m->layers, H = m->heads;
	swm_cross_layer *cl = calloc(L, sizeof(*cl));
	if (!cl)
		return -1;
	for (size_t l = 0; l < L; l++) {
		const swd_layer *ly = layers[l];
		if (ly && ly->xrows && ly->heads == H && ly->keys == m->keys)
			cl[l] = (swm_cross_layer){ ly->xrows, ly->nx, ly->xidx, ly->xvalid,
			    ly->miss_rank };
	}
	size_t sb = swm_cross_scratch(L, H, swm_cross_nx(cl, L), m->keys, (swm_dtype)m->dtype);
	void *scratch = aligned_alloc(64, sb);
	if (scratch)
		swm_cross_pairs(cl, L, H, m->keys, (swm_dtype)m->dtype,
		    m->kind == SWP_LOGITS ? SWM_LOGITS : SWM_PROBS, m->sink, scratch, keep, drop);
	int rc = scratch ? 0 : -1;
	free(scratch);
	free(cl);
	return rc;
}

size_t
swd_run_state_bytes(const swd_meta *m, int cross_layer_pairs)
{
	size_t L = m->layers, H = m->heads, LH = L * H, LHH = LH * H;
	int cross = cross_layer_pairs && m->kind != SWP_ROWSTATS;
	size_t b = sw_runfile_state_bytes(m->layers, m->heads, m->rows, m->fixed_probe, cross);
	b += LH * sizeof(swm_head);				/* prev */
	/* a step being written: write_step's buffers */
	b += SW_HEAD_FIELDS * LH * sizeof(double) + SW_PAIR_FIELDS * LHH * sizeof(double) +
	    LH * (2 * sizeof(int64_t) + SWM_STATUS__N * sizeof(int64_t) + sizeof(swm_head)) +
	    L * (1 + 3 * sizeof(double) + sizeof(void *)) + H * sizeof(swm_head_acc) +
	    swm_layer_scratch(H) + m->rows + 1;
	if (cross)	/* xp, and cross_pairs' scratch over L*H heads (the rows
			 * it copies are the layers', held against the budget) */
		b += 2 * LH * LH * sizeof(double) + L * sizeof(swm_cross_layer) +
		    swm_cross_scratch(L, H, 0, m->keys, (swm_dtype)m->dtype);
	return b;
}

/* The buffers of one step being written: its values before they are appended. */
struct stepbuf {
	double *hv[SW_HEAD_FIELDS], *pv[SW_PAIR_FIELDS], *flip, *xp;
	void *scratch;
	int64_t *rows, *rej;
	uint8_t *missing, *use;
	swm_head *cur;
	swm_head_acc *zacc;	/* a missing layer's sums */
	const swm_row **rs;
};

static void
stepbuf_free(struct stepbuf *b)
{
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		free(b->hv[i]);
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		free(b->pv[i]);
	free(b->flip);
	free(b->xp);
	free(b->scratch);
	free(b->rows);
	free(b->rej);
	free(b->missing);
	free(b->use);
	free(b->cur);
	free(b->zacc);
	free(b->rs);
}

/* Returns 0, or -1 without memory (b freed). swd_run_state_bytes counts these. */
static int
stepbuf_alloc(struct stepbuf *b, const swd_meta *m)
{
	size_t L = m->layers, H = m->heads, LH = L * H;
	memset(b, 0, sizeof(*b));
	b->rows = calloc(LH, sizeof(int64_t));
	b->rej = calloc(LH * SWM_STATUS__N, sizeof(int64_t));
	b->missing = calloc(L, 1);
	b->cur = calloc(LH, sizeof(*b->cur));
	b->zacc = calloc(H, sizeof(*b->zacc));
	b->rs = calloc(L, sizeof(*b->rs));
	b->use = calloc((size_t)m->rows + 1, 1);
	int ok = b->rows && b->rej && b->missing && b->cur && b->zacc && b->rs && b->use;
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		ok = ok && (b->hv[i] = malloc(LH * sizeof(double)));
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		ok = ok && (b->pv[i] = malloc(LH * H * sizeof(double)));
	ok = ok && (b->flip = malloc(L * 3 * sizeof(double))) &&
	    (b->scratch = malloc(swm_layer_scratch(H)));
	if (!ok)
		stepbuf_free(b);
	return ok ? 0 : -1;
}

/* The same incarnation sending a stored step again: 1 when it was (counted). */
static int
step_again(swd_writer *w, struct wrun *r, swd_witem *it)
{
	/* its senders' counters, which the item carries, are stored all the same */
	int kept = has_key(r, it->step, it->inc);
	if (!kept)
		return 0;
	/* stored whole: a duplicate; stored without some layers: late */
	if (kept == 2)
		atomic_fetch_add(&w->st.duplicates, fate_item(w, it, WF_DUP));
	else
		atomic_fetch_add(&w->st.late_drops, fate_item(w, it, WF_LATE));
	put_senders(w, r, it->snd, it->nsnd);
	log_warn("run %s: step %lld of incarnation %llu is already stored%s: %s, not "
	    "stored", r->meta.run, (long long)it->step, (unsigned long long)it->inc,
	    kept == 2 ? "" : " (without some layers)", kept == 2 ? "duplicate" : "late");
	return 1;
}

/* The first resume record of an incarnation goes to the file once. */
static void
step_resume(swd_writer *w, struct wrun *r, struct winc *wi, const swd_witem *it)
{
	char err[512];
	if (!it->has_resume || wi->resumed)
		return;
	if (sw_runfile_add_resume(r->f, it->inc, it->resume, err, sizeof(err)) != 0) {
		log_err("run %s: recording the resume failed: %s", r->meta.run, err);
		atomic_fetch_add(&w->st.write_errors, 1);
	} else {
		wi->resumed = 1;
	}
}

/*
 * Head i (head h of layer ly, py the previous step's) against the previous
 * stored step: the §3 split, paired when the probe is fixed, and drift.
 */
static void
head_change(swd_writer *w, struct wrun *r, const swd_layer *ly, const swd_layer *py,
    uint32_t h, size_t i, struct stepbuf *b)
{
	const swd_meta *m = &r->meta;
	swm_split sp = { NAN, NAN, NAN };
	if (m->fixed_probe && ly && py && ly->rows_st && py->rows_st && ly->rows == py->rows)
		swm_split_paired(py->rows_st + (size_t)h * ly->rows,
		    ly->rows_st + (size_t)h * ly->rows, ly->rows, &sp);
	else
		swm_split_aggregate(&r->prev[i], &b->cur[i], &sp);
	b->hv[SW_F_DH][i] = sp.dH;
	b->hv[SW_F_DH_SINK][i] = sp.sink;
	b->hv[SW_F_DH_CONTENT][i] = sp.content;
	struct timespec t0, t1;	/* the drift stage (status cpu) */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	drift(ly, py, h, m->sink, &b->hv[SW_F_DRIFT_SINK][i], &b->hv[SW_F_DRIFT_CONTENT][i]);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	atomic_fetch_add(&w->st.drift_ns, (t1.tv_sec - t0.tv_sec) * 1000000000LL +
	    (t1.tv_nsec - t0.tv_nsec));
}

/* A head's values (§2) into the step's head fields; no change yet. */
static void
head_values(const swd_layer *ly, uint32_t h, size_t i, struct stepbuf *b)
{
	const swm_head *c = &b->cur[i];
	b->rows[i] = (int64_t)c->rows;
	for (int s = 0; s < SWM_STATUS__N; s++)
		b->rej[i * SWM_STATUS__N + s] = ly ? (int64_t)ly->acc[h].rejected[s] : 0;
	double **hv = b->hv;
	hv[SW_F_SINK_MASS][i] = c->s;
	hv[SW_F_CONTENT_MASS][i] = c->w;
	hv[SW_F_ENTROPY][i] = c->H;
	hv[SW_F_SINK_ENTROPY][i] = c->hb;
	hv[SW_F_CONTENT_ENTROPY][i] = c->Hc;
	hv[SW_F_CONTENT_TERM][i] = c->C;
	hv[SW_F_CONTENT_ENTROPY_MW][i] = c->Hcw;
	hv[SW_F_SINK_BALANCE][i] = c->b;
	hv[SW_F_DH][i] = hv[SW_F_DH_SINK][i] = hv[SW_F_DH_CONTENT][i] = NAN;
	hv[SW_F_DRIFT_SINK][i] = hv[SW_F_DRIFT_CONTENT][i] = NAN;
}

/* Layer l's head values, pair matrices and flip rates (metrics/, shared with analyze). */
static void
layer_values(swd_writer *w, struct wrun *r, const swd_witem *it, uint32_t l, int adjacent,
    struct stepbuf *b)
{
	uint32_t H = r->meta.heads;
	const swd_layer *ly = it->layers[l];
	const swd_layer *py = r->prev_layers ? r->prev_layers[l] : NULL;
	b->missing[l] = ly == NULL;
	swm_layer_values lv = { .head = b->cur + (size_t)l * H };
	double *mat[SW_PAIR_FIELDS];
	for (int f = 0; f < SW_PAIR_FIELDS; f++)
		mat[f] = b->pv[f] + (size_t)l * H * H;
	lv.pm = (swm_pair_matrices){ mat[SW_P_COSINE_KEEP], mat[SW_P_COSINE_DROP],
	    mat[SW_P_JS_KEEP], mat[SW_P_JS_DROP], mat[SW_P_PAIR_SINK],
	    mat[SW_P_PAIR_CONTENT], NULL };
	/* a layer never sent: its heads' empty values, and no pair work at
	 * all (its matrices stay the file's NaN fill, sw_runfile_append) */
	if (ly)
		swm_layer_finish(ly->acc, ly->pairs, H, b->scratch, &lv);
	else
		for (uint32_t h = 0; h < H; h++)
			swm_head_finish(&b->zacc[h], &lv.head[h]);
	/* flips compare every pair of heads: none with a head missing */
	int allh = ly && !ly->miss_rank;
	for (int k = 0; k < 3; k++)
		b->flip[l * 3 + k] = allh ? lv.flip[k] : NAN;
	for (uint32_t h = 0; h < H; h++) {
		size_t i = (size_t)l * H + h;
		head_values(ly, h, i, b);
		if (adjacent)
			head_change(w, r, ly, py, h, i, b);
	}
}

/* Which probe rows got pair and drift work: the first layer's picks (they
 * follow qpos, the same for every layer of a probe). */
static void
step_row_use(const swd_meta *m, const swd_witem *it, uint8_t *use)
{
	for (uint32_t l = 0; l < m->layers; l++) {
		const swd_layer *ly = it->layers[l];
		if (!ly || ly->rows != m->rows)
			continue;
		for (uint32_t i = 0; i < ly->npair; i++)
			use[ly->pair_idx[i]] |= SW_USE_PAIR;
		for (uint32_t i = 0; ly->ln && i < ly->nln; i++)
			use[ly->ln_rows[i]] |= SW_USE_DRIFT;
		return;
	}
}

/* The step's row of the file, from its buffers and the run's counts. */
static void
step_fill(const struct wrun *r, const struct winc *wi, const swd_witem *it, int adjacent,
    struct stepbuf *b, sw_step *st)
{
	const swd_meta *m = &r->meta;
	memset(st, 0, sizeof(*st));
	st->step = it->step;
	st->time = it->time;
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		st->head[i] = b->hv[i];
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		st->pair[i] = b->pv[i];
	st->rows = b->rows;
	st->rejected = b->rej;
	st->flip = b->flip;
	st->missing = b->missing;
	st->lost = r->lost_prev + it->lost;
	st->inc_lost = wi->lost_prev + it->inc_lost;
	st->incomplete = r->incomplete_base + it->incomplete;
	st->inc = it->inc;
	st->seq_next = it->seq_next;
	st->prev_row = adjacent ? r->prev_row : -1;
	st->missing_rank = it->missing_rank;
	for (uint32_t l = 0; l < m->layers; l++)
		b->rs[l] = it->layers[l] ? it->layers[l]->rows_st : NULL;
	st->row_stats = m->fixed_probe ? (const swm_row *const *)b->rs : NULL;
	step_row_use(m, it, b->use);
	st->row_use = b->use;
}

/* The cross-layer pairs, where the file keeps them (its setting); a daemon
 * without the option stores NaN there. */
static void
step_cross(swd_writer *w, struct wrun *r, const swd_witem *it, struct stepbuf *b,
    sw_step *st)
{
	const swd_meta *m = &r->meta;
	if (!sw_runfile_cross_pairs(r->f)) {
		if (w->cfg.cross_layer_pairs && !r->cross_warned) {
			log_warn("run %s: %s was made without cross-layer pairs: none are stored "
			    "for this run (a run file keeps the setting it was made with)",
			    m->run, sw_runfile_path(r->f));
			r->cross_warned = 1;
		}
		return;
	}
	if (!w->cfg.cross_layer_pairs) {
		if (!r->cross_warned)
			log_warn("run %s: its file stores cross-layer pairs; cross_layer_pairs is "
			    "0, so they are NaN from step %lld on", m->run, (long long)it->step);
		r->cross_warned = 1;
		return;
	}
	size_t NN = (size_t)m->layers * m->heads * m->layers * m->heads;
	b->xp = malloc(2 * NN * sizeof(double));
	if (!b->xp || cross_pairs(m, it->layers, b->xp, b->xp + NN) != 0) {
		log_err("run %s: out of memory for the cross-layer pairs of step %lld (stored "
		    "NaN)", m->run, (long long)it->step);
		return;
	}
	st->xpair[SW_X_JS_KEEP] = b->xp;
	st->xpair[SW_X_JS_DROP] = b->xp + NN;
}

/* A step appended at file row `row`: the next step's previous one. */
static void
step_stored(swd_writer *w, struct wrun *r, swd_witem *it, int64_t row, const swm_head *cur)
{
	const swd_meta *m = &r->meta;
	r->dirty = 1;
	atomic_fetch_add(&w->st.steps_written, 1);
	int whole = 1;
	for (uint32_t l = 0; l < m->layers && whole; l++)
		whole = it->layers[l] && !it->layers[l]->miss_rank;
	if (add_key(r, it->step, it->inc, whole) != 0)
		log_err("run %s: out of memory: duplicates of step %lld will not be spotted",
		    m->run, (long long)it->step);
	memcpy(r->prev, cur, (size_t)m->layers * m->heads * sizeof(*cur));
	r->has_prev = 1;
	r->prev_step = it->step;
	r->prev_row = row;
	r->prev_inc = it->inc;
	/* keep this step's rows for the next paired split and drift */
	free_layers(r->prev_layers, m->layers, w->inflight);
	r->prev_layers = NULL;
	if (m->fixed_probe) {
		r->prev_layers = it->layers;
		it->layers = NULL;
	}
}

/* Computes and appends a step: 0 stored or counted again, 1 not stored
 * (counted under write), -1 no run, -2 its run is locked elsewhere. */
static int
write_step(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wrun_get(w, &it->meta, it);
	if (r && r->locked)
		retry_lock(w, r, it);
	if (!r || r->broken)
		return r && r->locked ? -2 : -1;
	const swd_meta *m = &r->meta;
	struct winc *wi = get_winc(r, it->inc);
	if (!wi)
		return -1;
	if (!wi->seen && it->inc_named && it->inc_senders <= 1)
		first_seen(w, r, wi, it->first_seq);
	if (step_again(w, r, it))
		return 0;
	put_senders(w, r, it->snd, it->nsnd);
	step_resume(w, r, wi, it);
	/*
	 * Live dH and drift only against the step right before, as written in
	 * order, of the same incarnation (LAYOUT.md, prev_row): another
	 * incarnation's row (a sweep's other worker) is another trajectory.
	 */
	int adjacent = r->has_prev && r->prev_step == r->max_step && it->step > r->prev_step &&
	    r->prev_inc == it->inc;
	struct stepbuf b;
	int stored = 0;
	if (stepbuf_alloc(&b, m) != 0) {
		log_err("run %s: out of memory writing step %lld", m->run, (long long)it->step);
	} else {
		for (uint32_t l = 0; l < m->layers; l++)
			layer_values(w, r, it, l, adjacent, &b);
		sw_step st;
		step_fill(r, wi, it, adjacent, &b, &st);
		step_cross(w, r, it, &b, &st);
		int64_t row = sw_runfile_steps(r->f);
		char err[512];
		if (sw_runfile_append(r->f, &st, err, sizeof(err)) != 0) {
			log_err("run %s: writing step %lld failed: %s", m->run,
			    (long long)it->step, err);
			atomic_fetch_add(&w->st.write_errors, 1);
		} else {
			step_stored(w, r, it, row, b.cur);
			stored = 1;
		}
		stepbuf_free(&b);
	}
	if (stored)
		return 0;
	/* not stored: its messages counted, the senders' rows too */
	atomic_fetch_add(&w->st.write_drops, fate_item(w, it, WF_WRITE));
	put_senders(w, r, it->snd, it->nsnd);
	return 1;
}

static void
flush_all(swd_writer *w)
{
	int64_t t0 = mono_ms();
	for (struct wrun *r = w->runs; r; r = r->next) {
		char err[512];
		if (!r->dirty || !r->f)
			continue;
		if (sw_runfile_flush(r->f, err, sizeof(err)) != 0) {
			log_err("run %s: flush failed: %s", r->meta.run, err);
			atomic_fetch_add(&w->st.write_errors, 1);
		}
		struct stat sb;
		if (stat(sw_runfile_path(r->f), &sb) == 0) {
			if (sb.st_size > r->size)
				atomic_fetch_add(&w->st.bytes_written, (long long)(sb.st_size - r->size));
			r->size = sb.st_size;
		}
		r->dirty = 0;
		atomic_fetch_add(&w->st.flushes, 1);
	}
	long long us = (mono_ms() - t0) * 1000;
	if (us > atomic_load(&w->st.max_flush_us))
		atomic_store(&w->st.max_flush_us, us);
	w->last_flush_ms = mono_ms();
}

/*
 * The first generation from `from` on of the run id whose sender table has
 * a row of inc, with its shape in *m; 0 if none (an end after a restart
 * names no shape). Generations may have gaps (pruned files).
 */
static uint32_t
find_by_inc(swd_writer *w, const char *run, uint64_t inc, uint32_t from, swd_meta *m)
{
	for (uint32_t g = from; g <= 1000; g++) {
		char name[SW_RUNFILE_NAME_MAX + 1], path[2048], err[512];
		struct stat sb;
		if (sw_runfile_name_gen(run, g, name, sizeof(name)) < 0)
			return 0;
		snprintf(path, sizeof(path), "%s/%s", w->cfg.data_dir, name);
		if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		sw_reader *rd;
		sw_runmeta rm;
		if (sw_reader_open(path, &rd, &rm, err, sizeof(err)) != 0)
			continue;
		uint64_t *t = NULL;
		int64_t n = sw_reader_senders(rd, &t, NULL, err, sizeof(err)), k;
		for (k = 0; k < n && t[k * SW_SENDER_FIELDS + SW_S_INC] != inc; k++)
			;
		int hit = k < n;
		free(t);
		if (hit) {
			memset(m, 0, sizeof(*m));
			snprintf(m->run, sizeof(m->run), "%s", run);
			snprintf(m->model, sizeof(m->model), "%s", rm.model);
			m->params = rm.params;
			m->layers = rm.layers;
			m->heads = rm.heads;
			m->sink = rm.sink;
			m->rows = rm.rows;
			m->keys = rm.keys;
			m->fixed_probe = rm.fixed_probe;
			int kind = swp_kind_parse(rm.kind), dtype = swp_dtype_parse(rm.dtype);
			m->kind = kind >= 0 ? (swp_kind)kind : SWP_PROBS;
			m->dtype = dtype >= 0 ? (swp_dtype)dtype : SWP_F32;
		}
		sw_reader_close(&rd);
		if (hit)
			return g;
	}
	return 0;
}

/*
 * An end that came after its run was closed (idle, or by a restart):
 * counted in its sender's row (the end, and what its seq says was lost);
 * 1 if every rank of its incarnation has ended.
 */
static int
end_sender(swd_writer *w, struct wrun *r, const swd_sender *c)
{
	char err[512];
	struct wsend *d = r->f ? get_wsend(r, c->inc, c->rank) : NULL;
	if (!d)
		return 0;
	uint64_t *b = d->base, seq = c->seq_next - 1, held = b[SW_S_MESSAGES] + b[SW_S_LOST];
	b[SW_S_INC] = c->inc;
	b[SW_S_RANK] = c->rank;
	if (!b[SW_S_SENDERS])
		b[SW_S_SENDERS] = c->senders;
	if (seq > held) {
		b[SW_S_LOST] += seq - held;
		atomic_fetch_add(&w->st.lost_restart, (long long)(seq - held));
		log_warn("run %s: %llu message(s) of rank %u of incarnation %llu no daemon "
		    "stored (seq below %llu)", r->meta.run, (unsigned long long)(seq - held), c->rank,
		    (unsigned long long)c->inc, (unsigned long long)seq);
	}
	b[SW_S_MESSAGES]++;
	if (b[SW_S_SENDERS] != c->senders)
		b[SW_S_SENDERS_MISMATCH]++;
	else if (b[SW_S_ENDED])
		b[SW_S_AFTER_END]++;
	else
		b[SW_S_ENDED] = 1;
	if (c->seq_next > b[SW_S_SEQ_NEXT])
		b[SW_S_SEQ_NEXT] = c->seq_next;
	d->seen = 1;
	if (sw_runfile_put_sender(r->f, d->row, b, err, sizeof(err)) != 0) {
		log_err("run %s: writing the sender table failed: %s", r->meta.run, err);
		atomic_fetch_add(&w->st.write_errors, 1);
		return 0;
	}
	r->dirty = 1;
	uint64_t N = b[SW_S_SENDERS] ? b[SW_S_SENDERS] : 1;
	for (uint64_t k = 0; k < N; k++) {
		const struct wsend *e = r->snd;
		while (e && !(e->inc == c->inc && e->rank == k && e->base[SW_S_ENDED]))
			e = e->next;
		if (!e) {
			log_info("run %s: rank %u of incarnation %llu ended its part; rank %llu has "
			    "not: the file is not marked ended", r->meta.run, c->rank,
			    (unsigned long long)c->inc, (unsigned long long)k);
			return 0;
		}
	}
	return 1;
}

/* Everything of the run on disk first, then the end mark that says so; closed. */
static void
mark_ended(swd_writer *w, struct wrun *r)
{
	char err[512];
	if (r->f && sw_runfile_flush(r->f, err, sizeof(err)) != 0)
		log_err("run %s: flush failed: %s", r->meta.run, err);
	if (r->f && sw_runfile_mark_ended(r->f, err, sizeof(err)) != 0)
		log_err("run %s: marking the end failed: %s", r->meta.run, err);
	if (r->f)
		log_info("run %s: ended, file closed", r->meta.run);
	else
		log_info("run %s: ended; no file of it was open here (%s)", r->meta.run,
		    r->locked ? "another process held its lock" : "it could not be opened");
	if (r->lock) {	/* kept a while (ended_locks), the oldest let go */
		size_t k = w->ended_next++ % SWD_ENDED_LOCKS;
		sw_runlock_release(&w->ended_locks[k]);
		w->ended_locks[k] = r->lock;
		r->lock = NULL;
	}
	wrun_remove(w, r);
}

/*
 * An end whose run was closed (idle, or before a restart): counted in the
 * sender's row of every file of the id that holds its incarnation (a shape
 * changed mid-run makes two), each marked ended once every rank of the
 * incarnation has ended; no such file: unknown_run.
 */
static void
late_end(swd_writer *w, const swd_witem *it)
{
	char err[512];
	int found = 0;
	swd_meta m;
	for (uint32_t g = 1; (g = find_by_inc(w, it->meta.run, it->inc, g, &m)) != 0; g++) {
		struct wrun *r;
		found = 1;
		for (r = w->runs; r && !(swd_meta_eq(&r->meta, &m) && r->generation == g);
		    r = r->next)
			;
		int in_use = r != NULL;	/* another incarnation's run writes it: it ends it */
		if (!r) {
			w->want_gen = g;
			r = wrun_get(w, &m, it);
			w->want_gen = 0;
		}
		if (!r)
			continue;
		if (!r->broken && end_sender(w, r, it->snd) && !in_use) {
			mark_ended(w, r);
			continue;
		}
		if (r->f && sw_runfile_flush(r->f, err, sizeof(err)) != 0)
			log_err("run %s: flush failed: %s", r->meta.run, err);
		if (!in_use)
			wrun_remove(w, r);	/* counted; other ranks' ends to come */
	}
	if (!found) {
		atomic_fetch_add(&w->st.unknown_ends, 1);
		log_warn("run %s: an end of incarnation %llu, which no file of the data directory "
		    "holds (unknown_run)", it->meta.run, (unsigned long long)it->inc);
	}
}

static void
end_run(swd_writer *w, swd_witem *it)
{
	struct wrun *r;
	/* a run this writer has open: an end never makes a file */
	for (r = it->reopen ? NULL : w->runs; r && !swd_meta_eq(&r->meta, &it->meta); r = r->next)
		;
	if (it->reopen && it->nsnd == 1) {	/* its run was closed: the files say */
		late_end(w, it);
		return;
	}
	if (!r) {
		log_info("run %s: ended with nothing stored in this session", it->meta.run);
		return;
	}
	mark_ended(w, r);
}

/* An idle run: its file is flushed and closed, to be resumed if it returns. */
static void
close_run(swd_writer *w, swd_witem *it)
{
	for (struct wrun *r = w->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, &it->meta)) {
			log_info("run %s: idle, file closed", r->meta.run);
			wrun_remove(w, r);
			return;
		}
}

static void *
writer_main(void *arg)
{
	swd_writer *w = arg;
	int stopping = 0;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		while (!w->head && !w->stop) {
			int dirty = 0;
			for (struct wrun *r = w->runs; r; r = r->next)
				dirty |= r->dirty;
			if (!dirty) {
				pthread_cond_wait(&w->cv, &w->mu);
				continue;
			}
			int64_t due = w->last_flush_ms + w->cfg.flush_ms;
			if (mono_ms() >= due)
				break;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			int64_t wait = due - mono_ms();
			ts.tv_sec += wait / 1000;
			ts.tv_nsec += (wait % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
		swd_witem *it = w->head;
		if (it) {
			w->head = it->next;
			if (!w->head)
				w->tail = NULL;
			atomic_fetch_sub(&w->st.queue_depth, 1);
			atomic_fetch_add(&w->st.items, 1);
		} else if (w->stop) {
			stopping = 1;
		}
		pthread_mutex_unlock(&w->mu);
		if (it) {
			/* a step not stored: its messages counted (write_error) */
			/* a step not stored: its messages counted (write_error, or locked:
			 * another process writes the run); 1: counted by write_step */
			int wrc = it->type == WQ_STEP ? write_step(w, it) : 0;
			if (wrc < 0)
				atomic_fetch_add(wrc == -2 ? &w->st.locked_drops : &w->st.write_drops,
				    fate_item(w, it, wrc == -2 ? WF_LOCKED : WF_WRITE));
			else if (it->type == WQ_STEP)
				;
			else if (it->type == WQ_END)
				end_run(w, it);
			else if (it->type == WQ_CLOSE)
				close_run(w, it);
			else if (it->type == WQ_INC)
				inc_seen(w, it);
			else if (it->type == WQ_SENDERS)
				senders_item(w, it);
			free_item(it, w->inflight);
			pthread_mutex_lock(&w->mu);
			w->done++;
			pthread_cond_broadcast(&w->done_cv);
			pthread_mutex_unlock(&w->mu);
		}
		if (mono_ms() - w->last_flush_ms >= w->cfg.flush_ms || stopping)
			flush_all(w);
		if (stopping)
			break;
	}
	while (w->runs)
		wrun_remove(w, w->runs);
	for (size_t k = 0; k < SWD_ENDED_LOCKS; k++)
		sw_runlock_release(&w->ended_locks[k]);
	return NULL;
}

int
swd_writer_start(swd_writer **wp, const swd_config *cfg, atomic_llong *inflight)
{
	swd_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->cfg = *cfg;
	w->inflight = inflight;
	w->last_flush_ms = mono_ms();
	if (!(w->fates = calloc(WFATES, sizeof(*w->fates)))) {
		free(w);
		return -1;
	}
	pthread_mutex_init(&w->fmu, NULL);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->done_cv, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
		free(w->fates);
		free(w);
		return -1;
	}
	*wp = w;
	return 0;
}

void
swd_writer_push(swd_writer *w, swd_witem *it)
{
	it->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = it;
	else
		w->head = it;
	w->tail = it;
	w->pushed++;
	atomic_fetch_add(&w->st.queue_depth, 1);
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void
swd_writer_stop(swd_writer **wp)
{
	swd_writer *w = *wp;
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->fmu);
	pthread_cond_destroy(&w->cv);
	pthread_cond_destroy(&w->done_cv);
	free(w->fates);
	free(w);
	*wp = NULL;
}

void
swd_writer_sync(swd_writer *w)
{
	pthread_mutex_lock(&w->mu);
	int64_t target = w->pushed;
	while (w->done < target)
		pthread_cond_wait(&w->done_cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

const swd_wstats *
swd_writer_stats(const swd_writer *w)
{
	return &w->st;
}

double
swd_writer_cpu_s(const swd_writer *w)
{
	clockid_t c;
	struct timespec ts;
	if (pthread_getcpuclockid(w->th, &c) != 0 || clock_gettime(c, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
