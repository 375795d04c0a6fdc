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

struct wrun {
	swd_meta meta;
	sw_runfile *f;
	int broken;		/* the file could not be opened: steps are dropped */
	int dirty;
	int has_prev;
	swm_head *prev;		/* [L * H] values of the last stored step */
	swd_layer **prev_layers;	/* [L], fixed probes: rows and ln parts */
	struct wrun *next;
};

struct swd_writer {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	swd_witem *head, *tail;
	int stop;
	swd_config cfg;
	atomic_llong *inflight;
	swd_wstats st;
	struct wrun *runs;
	int64_t last_flush_ms;
};

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
	free(it);
}

static void
wrun_free(struct wrun *r, atomic_llong *inflight)
{
	free(r->prev);
	free_layers(r->prev_layers, r->meta.layers, inflight);
	free(r);
}

static struct wrun *
wrun_get(swd_writer *w, const swd_meta *m)
{
	struct wrun *r;
	for (r = w->runs; r; r = r->next)
		if (!strcmp(r->meta.run, m->run))
			return r;
	if (!(r = calloc(1, sizeof(*r))))
		return NULL;
	r->meta = *m;
	size_t LH = (size_t)m->layers * m->heads;
	r->prev = calloc(LH, sizeof(*r->prev));
	if (!r->prev) {
		free(r);
		return NULL;
	}
	sw_runmeta rm;
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
	rm.rows = m->rows;
	rm.keys = m->keys;
	sw_runfile_opts fo = { .chunk_steps = (size_t)w->cfg.chunk_steps };
	char err[512];
	mkdir(w->cfg.data_dir, 0755);
	if (sw_runfile_open(w->cfg.data_dir, &rm, &fo, &r->f, err, sizeof(err)) != 0) {
		log_err("run %s: cannot open its file: %s (its steps are dropped)", m->run, err);
		r->broken = 1;
		atomic_fetch_add(&w->st.write_errors, 1);
	} else {
		atomic_fetch_add(&w->st.files_open, 1);
		int64_t have = sw_runfile_steps(r->f);
		if (have > 0) {
			double *vals[SW_HEAD_FIELDS];
			int64_t *rows = calloc(LH, sizeof(int64_t));
			int ok = rows != NULL;
			for (int i = 0; i < SW_HEAD_FIELDS; i++)
				ok &= (vals[i] = calloc(LH, sizeof(double))) != NULL;
			if (ok && sw_runfile_last(r->f, vals, rows) == 0) {
				for (size_t i = 0; i < LH; i++) {
					swm_head *h = &r->prev[i];
					h->rows = (uint64_t)rows[i];
					h->s = vals[SW_F_SINK_MASS][i];
					h->w = vals[SW_F_CONTENT_MASS][i];
					h->H = vals[SW_F_ENTROPY][i];
					h->hb = vals[SW_F_SINK_ENTROPY][i];
					h->Hc = vals[SW_F_CONTENT_ENTROPY][i];
					h->C = vals[SW_F_CONTENT_TERM][i];
					h->Hcw = vals[SW_F_CONTENT_ENTROPY_MW][i];
					h->b = vals[SW_F_SINK_BALANCE][i];
				}
				r->has_prev = 1;
			}
			for (int i = 0; i < SW_HEAD_FIELDS; i++)
				free(vals[i]);
			free(rows);
			log_info("run %s: resumed %s with %lld stored steps", m->run,
			    m->run, (long long)have);
		} else {
			log_info("run %s: new run file", m->run);
		}
	}
	r->next = w->runs;
	w->runs = r;
	return r;
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

/* Drift of one head between two fixed-probe steps (§4), over common rows. */
static void
drift(const swd_layer *a, const swd_layer *b, uint32_t h, uint32_t sink,
    double *dsink, double *dcontent)
{
	double s2 = 0, c2 = 0;
	uint64_t n = 0;
	*dsink = *dcontent = NAN;
	if (!a || !b || !a->rows_st || !b->rows_st || a->rows != b->rows || a->keys != b->keys)
		return;
	uint32_t R = a->rows, K = a->keys;
	uint64_t nc = 0;
	for (uint32_t r = 0; r < R; r++) {
		const swm_row *x = &a->rows_st[(size_t)h * R + r], *y = &b->rows_st[(size_t)h * R + r];
		if (x->status != SWM_OK || y->status != SWM_OK)
			continue;
		n++;
		s2 += (x->b - y->b) * (x->b - y->b);
		/* the ln parts are kept for the rows of ln_rows only (METRICS.md §5) */
		ptrdiff_t ia = a->ln ? swm_pick_find(a->ln_rows, a->nln, r) : -1;
		ptrdiff_t ib = b->ln ? swm_pick_find(b->ln_rows, b->nln, r) : -1;
		if (ia >= 0 && ib >= 0 && x->n == y->n) {
			c2 += swm_content_dist2_f32(a->ln + ((size_t)h * a->nln + (size_t)ia) * K,
			    b->ln + ((size_t)h * b->nln + (size_t)ib) * K, x->n, sink);
			nc++;
		}
	}
	if (n)
		*dsink = sqrt(s2 / (double)n);
	if (nc)
		*dcontent = sqrt(c2 / (double)nc);
}

static int
write_step(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wrun_get(w, &it->meta);
	if (!r)
		return -1;
	if (r->broken)
		return -1;
	const swd_meta *m = &r->meta;
	uint32_t L = m->layers, H = m->heads;
	size_t LH = (size_t)L * H, LHH = LH * H;
	int rc = -1;
	double *hv[SW_HEAD_FIELDS] = { 0 }, *pv[SW_PAIR_FIELDS] = { 0 }, *flip = NULL, *ent = NULL;
	int64_t *rows = calloc(LH, sizeof(int64_t)), *rej = calloc(LH * SWM_STATUS__N, sizeof(int64_t));
	uint8_t *missing = calloc(L, 1);
	swm_head *cur = calloc(LH, sizeof(*cur));
	uint64_t *hrows = calloc(H, sizeof(uint64_t));
	int ok = rows && rej && missing && cur && hrows;
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		ok = ok && (hv[i] = malloc(LH * sizeof(double)));
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		ok = ok && (pv[i] = malloc(LHH * sizeof(double)));
	ok = ok && (flip = malloc((size_t)L * 3 * sizeof(double))) &&
	    (ent = malloc((2 * (size_t)H * H + 2 * H) * sizeof(double)));
	if (!ok) {
		log_err("run %s: out of memory writing step %lld", m->run, (long long)it->step);
		goto out;
	}
	for (uint32_t l = 0; l < L; l++) {
		swd_layer *ly = it->layers[l];
		swd_layer *py = r->prev_layers ? r->prev_layers[l] : NULL;
		missing[l] = ly == NULL;
		for (uint32_t h = 0; h < H; h++) {
			size_t i = (size_t)l * H + h;
			swm_head_acc zero;
			memset(&zero, 0, sizeof(zero));
			swm_head_finish(ly ? &ly->acc[h] : &zero, &cur[i]);
			const swm_head *c = &cur[i];
			rows[i] = (int64_t)c->rows;
			for (int s = 0; s < SWM_STATUS__N; s++)
				rej[i * SWM_STATUS__N + s] = ly ? (int64_t)ly->acc[h].rejected[s] : 0;
			hv[SW_F_SINK_MASS][i] = c->s;
			hv[SW_F_CONTENT_MASS][i] = c->w;
			hv[SW_F_ENTROPY][i] = c->H;
			hv[SW_F_SINK_ENTROPY][i] = c->hb;
			hv[SW_F_CONTENT_ENTROPY][i] = c->Hc;
			hv[SW_F_CONTENT_TERM][i] = c->C;
			hv[SW_F_CONTENT_ENTROPY_MW][i] = c->Hcw;
			hv[SW_F_SINK_BALANCE][i] = c->b;
			/* §3 against the previous stored step: paired when the probe is fixed */
			swm_split sp = { NAN, NAN, NAN };
			if (r->has_prev) {
				if (m->fixed_probe && ly && py && ly->rows_st && py->rows_st &&
				    ly->rows == py->rows)
					swm_split_paired(py->rows_st + (size_t)h * ly->rows,
					    ly->rows_st + (size_t)h * ly->rows, ly->rows, &sp);
				else
					swm_split_aggregate(&r->prev[i], c, &sp);
			}
			hv[SW_F_DH][i] = sp.dH;
			hv[SW_F_DH_SINK][i] = sp.sink;
			hv[SW_F_DH_CONTENT][i] = sp.content;
			drift(ly, py, h, m->sink, &hv[SW_F_DRIFT_SINK][i], &hv[SW_F_DRIFT_CONTENT][i]);
			hrows[h] = c->rows;
		}
		/* pair matrices and flip rates of the layer */
		double *mat[SW_PAIR_FIELDS];
		for (int f = 0; f < SW_PAIR_FIELDS; f++)
			mat[f] = pv[f] + (size_t)l * H * H;
		if (ly && ly->pairs) {
			uint64_t *mr = calloc((size_t)H * H, sizeof(uint64_t));
			if (!mr)
				goto out;
			swm_pair_matrices pm = { mat[SW_P_COSINE_KEEP], mat[SW_P_COSINE_DROP],
			    mat[SW_P_JS_KEEP], mat[SW_P_JS_DROP], mat[SW_P_PAIR_SINK],
			    mat[SW_P_PAIR_CONTENT], mr };
			swm_pairs_finish(ly->pairs, hrows, H, &pm);
			free(mr);
			uint64_t cmp;
			flip[l * 3 + 0] = swm_flip_rate(mat[SW_P_COSINE_KEEP], mat[SW_P_COSINE_DROP], H, &cmp);
			flip[l * 3 + 1] = swm_flip_rate(mat[SW_P_JS_KEEP], mat[SW_P_JS_DROP], H, &cmp);
		} else {
			for (int f = 0; f < SW_PAIR_FIELDS; f++)
				for (size_t i = 0; i < (size_t)H * H; i++)
					mat[f][i] = NAN;
			flip[l * 3 + 0] = flip[l * 3 + 1] = NAN;
		}
		double *Hk = ent + 2 * (size_t)H * H, *Hd = Hk + H;
		for (uint32_t h = 0; h < H; h++) {
			Hk[h] = cur[(size_t)l * H + h].H;
			Hd[h] = cur[(size_t)l * H + h].Hc;
		}
		uint64_t cmp;
		flip[l * 3 + 2] = ly ? swm_flip_rate_entropy(Hk, Hd, H, ent, &cmp) : NAN;
	}
	sw_step st;
	memset(&st, 0, sizeof(st));
	st.step = it->step;
	st.time = it->time;
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		st.head[i] = hv[i];
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		st.pair[i] = pv[i];
	st.rows = rows;
	st.rejected = rej;
	st.flip = flip;
	st.missing = missing;
	st.lost = it->lost;
	st.incomplete = it->incomplete;
	char err[512];
	if (sw_runfile_append(r->f, &st, err, sizeof(err)) != 0) {
		log_err("run %s: writing step %lld failed: %s", m->run, (long long)it->step, err);
		atomic_fetch_add(&w->st.write_errors, 1);
		goto out;
	}
	r->dirty = 1;
	atomic_fetch_add(&w->st.steps_written, 1);
	memcpy(r->prev, cur, LH * sizeof(*cur));
	r->has_prev = 1;
	/* keep this step's rows for the next paired split and drift */
	free_layers(r->prev_layers, L, w->inflight);
	r->prev_layers = NULL;
	if (m->fixed_probe) {
		r->prev_layers = it->layers;
		it->layers = NULL;
	}
	rc = 0;
out:
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		free(hv[i]);
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		free(pv[i]);
	free(flip);
	free(ent);
	free(rows);
	free(rej);
	free(missing);
	free(cur);
	free(hrows);
	return rc;
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
		r->dirty = 0;
		atomic_fetch_add(&w->st.flushes, 1);
	}
	long long us = (mono_ms() - t0) * 1000;
	if (us > atomic_load(&w->st.max_flush_us))
		atomic_store(&w->st.max_flush_us, us);
	w->last_flush_ms = mono_ms();
}

static void
end_run(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wrun_get(w, &it->meta);
	char err[512];
	if (!r)
		return;
	if (r->f && sw_runfile_mark_ended(r->f, err, sizeof(err)) != 0)
		log_err("run %s: marking the end failed: %s", r->meta.run, err);
	log_info("run %s: ended, file closed", r->meta.run);
	wrun_remove(w, r);
}

/* An idle run: its file is flushed and closed, to be resumed if it returns. */
static void
close_run(swd_writer *w, swd_witem *it)
{
	for (struct wrun *r = w->runs; r; r = r->next)
		if (!strcmp(r->meta.run, it->meta.run)) {
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
		} else if (w->stop) {
			stopping = 1;
		}
		pthread_mutex_unlock(&w->mu);
		if (it) {
			if (it->type == WQ_STEP)
				write_step(w, it);
			else if (it->type == WQ_END)
				end_run(w, it);
			else if (it->type == WQ_CLOSE)
				close_run(w, it);
			free_item(it, w->inflight);
		}
		if (mono_ms() - w->last_flush_ms >= w->cfg.flush_ms || stopping)
			flush_all(w);
		if (stopping)
			break;
	}
	while (w->runs)
		wrun_remove(w, w->runs);
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
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
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
	pthread_cond_destroy(&w->cv);
	free(w);
	*wp = NULL;
}

const swd_wstats *
swd_writer_stats(const swd_writer *w)
{
	return &w->st;
}
