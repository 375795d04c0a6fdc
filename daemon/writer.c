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
#include "net/log.h"
#include "daemon/writer_int.h"

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

void
wr_free_layers(swd_layer **ls, uint32_t n, atomic_llong *inflight)
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
	wr_free_layers(it->layers, it->meta.layers, inflight);
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

/*
 * A run refused because another process held its lock: the lock is tried
 * again every LOCK_RETRY_MS while the run's steps come, and the run is
 * taken over once the holder let it go (it died, or closed the run): the
 * file is resumed as any other, an ended one not (open_file's rules).
 */
#define LOCK_RETRY_MS 5000
void
wr_retry_lock(swd_writer *w, struct wrun *r, const swd_witem *it)
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
				wr_put_senders(w, r, it->snd, it->nsnd);
			return;
		}
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
	struct wrun *r = wr_run_get(w, &it->meta, it);
	struct winc *wi = r && !r->broken ? wr_inc_get(r, it->inc) : NULL;
	/* several senders: per sender, from the sender table (sender_gap); a sender
	 * without inc is counted from its first seq here (PROTOCOL.md 7a) */
	if (wi && !wi->seen && it->inc_named && it->inc_senders <= 1)
		wr_first_seen(w, r, wi, it->first_seq);
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
			r = wr_run_get(w, &m, it);
			w->want_gen = 0;
		}
		if (!r)
			continue;
		if (!r->broken && wr_end_sender(w, r, it->snd) && !in_use) {
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
			 * another process writes the run); 1: counted by wr_write_step */
			int wrc = it->type == WQ_STEP ? wr_write_step(w, it) : 0;
			if (wrc < 0)
				atomic_fetch_add(wrc == -2 ? &w->st.locked_drops : &w->st.write_drops,
				    wr_fate_item(w, it, wrc == -2 ? WF_LOCKED : WF_WRITE));
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
