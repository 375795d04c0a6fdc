/*
 * writer_runs.c: the writer's table of runs: a run's file opened (its
 * generation, its lock, what it holds already), the keys of its rows and
 * its incarnations, and each sender's account in the file's sender table
 * (LAYOUT.md, senders), with the messages the writer did not store
 * although the assembly handed them over (fates), for status.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/writer_int.h"
#include "net/log.h"

static const int wf_reason[WF__N] = { SWD_DROP_DUPLICATE, SWD_DROP_WRITE, SWD_DROP_LOCKED,
	SWD_DROP_LATE };

/*
 * A run refused because another process held its lock: the lock is tried
 * again every LOCK_RETRY_MS while the run's steps come, and the run is
 * taken over once the holder let it go (it died, or closed the run): the
 * file is resumed as any other, an ended one not (open_file's rules).
 */
#define LOCK_RETRY_MS 5000

int64_t
wr_mono_ms(void)
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

void
wr_free_layers(swd_layer **ls, uint32_t n, atomic_llong *inflight)
{
	if (!ls)
		return;
	for (uint32_t i = 0; i < n; i++)
		swd_layer_free(ls[i], inflight);
	free(ls);
}

void
wr_free_item(swd_witem *it, atomic_llong *inflight)
{
	wr_free_layers(it->layers, it->meta.layers, inflight);
	free(it->missing_rank);
	free(it->snd);
	free(it->mc);
	free(it);
}

static void
wrun_free(struct wrun *r, atomic_llong *inflight)
{
	sw_runlock_release(&r->lock);	/* after the file's close (wr_wrun_remove) */
	free(r->prev);
	wr_free_layers(r->prev_layers, r->meta.layers, inflight);
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
int
wr_has_key(const struct wrun *r, int64_t step, uint64_t inc)
{
	size_t i = key_pos(r, step, inc);
	if (i < r->nkeys && r->keys[i].step == step && r->keys[i].inc == inc)
		return 1 + r->keys[i].whole;
	return 0;
}

int
wr_add_key(struct wrun *r, int64_t step, uint64_t inc, int whole)
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

struct winc *
wr_inc_get(struct wrun *r, uint64_t inc)
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
		struct winc *wi = wr_inc_get(r, rows.inc[i]);
		rc = wi && wr_add_key(r, rows.step[i], rows.inc[i],
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
		struct winc *wi = wr_inc_get(r, rows.res_inc[i]);
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

/*
 * Opens the run's file: the first generation whose file holds this run
 * with this shape, or a new one (a run id re-used with another model,
 * kind, shape, dtype or probe never mixes with the old data: LAYOUT.md).
 */
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
	char differs[512] = "";	/* why the newest other generation is not this run */
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
		else if (rc == SW_RUNFILE_OTHER)
			snprintf(differs, sizeof(differs), "%s", err);
		else if (rc < 0)
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
	if (free_g > 1 && differs[0] && !last)	/* said once, as the generation is made */
		log_warn("run %s: a new generation, %s: the id is re-used with another model "
		    "or shape: %s", m->run, sw_runfile_path(r->f), differs);
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
			r->lock_tried_ms = wr_mono_ms();
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

struct wrun *
wr_run_get(swd_writer *w, const swd_meta *m, const swd_witem *it)
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

void
wr_retry_lock(swd_writer *w, struct wrun *r, const swd_witem *it)
{
	if (!r->locked || wr_mono_ms() - r->lock_tried_ms < LOCK_RETRY_MS)
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
		r->lock_tried_ms = wr_mono_ms();
		return;
	}
	log_warn("run %s: the process that held its lock let it go: the run is taken over, "
	    "its steps are stored here from now on (%s)", r->meta.run, sw_runfile_path(r->f));
}

void
wr_wrun_remove(swd_writer *w, struct wrun *r)
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
 * A daemon killed inside its flush can leave the sender table written and
 * /step not yet extended (HDF5 flushes in its own order): the row then says
 * stored messages that no row holds. Those were received and never stored:
 * out of the row's stored and messages, so that the restart counts them
 * lost (one sender: its stored is the incarnation's layers in the rows).
 */
static void
sender_ahead(const struct wrun *r, struct wsend *d, uint64_t in_rows)
{
	uint64_t *b = d->base;
	if (b[SW_S_STORED] <= in_rows)
		return;
	uint64_t x = b[SW_S_STORED] - in_rows;
	if (x > b[SW_S_MESSAGES])
		x = b[SW_S_MESSAGES];
	b[SW_S_STORED] -= x;
	b[SW_S_MESSAGES] -= x;
	log_warn("run %s: the sender table of incarnation %llu says %llu stored message(s) "
	    "that no row holds (a flush cut short): counted lost", r->meta.run,
	    (unsigned long long)d->inc, (unsigned long long)x);
}

/*
 * A named incarnation speaks for the first time in this session. Its seq
 * starts at 0 (PROTOCOL.md 7a): of its messages below first_seq, the file
 * holds `stored` and its last row counted `lost_file` lost; the rest no
 * daemon stored (sent while none ran, or received by one that was killed
 * before its flush). Counted here, before any row of the session carries
 * the run's total.
 */
void
wr_first_seen(swd_writer *w, struct wrun *r, struct winc *wi, uint64_t first_seq)
{
	wi->seen = 1;
	uint64_t held = (uint64_t)wi->stored + (uint64_t)wi->lost_file;
	/* its sender row (layout 3) accounts for the messages dropped too */
	for (struct wsend *d = r->snd; d; d = d->next) {
		if (d->inc != wi->inc || d->rank != 0)
			continue;
		sender_ahead(r, d, (uint64_t)wi->stored);
		if (d->base[SW_S_MESSAGES] + d->base[SW_S_LOST] > held)
			held = d->base[SW_S_MESSAGES] + d->base[SW_S_LOST];
	}
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
long long
wr_fate_item(swd_writer *w, const swd_witem *it, int f)
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
	if (c->senders <= 1) {	/* one sender: counted per incarnation (wr_first_seen) */
		struct winc *wi = wr_inc_get(r, c->inc);
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
	struct winc *wi = wr_inc_get(r, c->inc);
	if (wi)
		wi->lost_prev += gap;
	r->lost_prev += gap;
	atomic_fetch_add(&w->st.lost_restart, gap);
	log_warn("run %s: %lld message(s) of rank %u of incarnation %llu no daemon stored "
	    "(seq below %llu)", r->meta.run, (long long)gap, c->rank,
	    (unsigned long long)c->inc, (unsigned long long)c->first_seq);
}

/* This session's counters of some senders into the file's table. */
void
wr_put_senders(swd_writer *w, struct wrun *r, const swd_sender *snd, size_t n)
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
 * An end that came after its run was closed (idle, or by a restart):
 * counted in its sender's row (the end, and what its seq says was lost);
 * 1 if every rank of its incarnation has ended.
 */
int
wr_end_sender(swd_writer *w, struct wrun *r, const swd_sender *c)
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
