/*
 * writer_step.c: a step as the writer stores it: the head values, the §3
 * split against the previous stored step, drift, pair matrices, flip rates
 * and cross-layer pairs, computed by metrics/ and appended to the run file.
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
	int kept = wr_has_key(r, it->step, it->inc);
	if (!kept)
		return 0;
	/* stored whole: a duplicate; stored without some layers: late */
	if (kept == 2)
		atomic_fetch_add(&w->st.duplicates, wr_fate_item(w, it, WF_DUP));
	else
		atomic_fetch_add(&w->st.late_drops, wr_fate_item(w, it, WF_LATE));
	wr_put_senders(w, r, it->snd, it->nsnd);
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
 * stored step: the §3 split, paired when the probe is fixed.
 */
static void
head_change(struct wrun *r, const swd_layer *ly, const swd_layer *py, uint32_t h, size_t i,
    struct stepbuf *b)
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
}

/*
 * Layer l's drift against the previous stored step, head by head (§4,
 * metrics/drift.c), its CPU time read once for the layer (the drift stage,
 * status cpu): two reads of the thread's clock, a system call each, a
 * layer rather than a head.
 */
static void
layer_drift(swd_writer *w, const swd_meta *m, const swd_layer *ly, const swd_layer *py,
    uint32_t l, struct stepbuf *b)
{
	if (!ly || !py || !ly->rows_st || !py->rows_st)
		return;		/* drift() would give NaN, as head_values left them */
	struct timespec t0, t1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	for (uint32_t h = 0; h < m->heads; h++) {
		size_t i = (size_t)l * m->heads + h;
		drift(ly, py, h, m->sink, &b->hv[SW_F_DRIFT_SINK][i],
		    &b->hv[SW_F_DRIFT_CONTENT][i]);
	}
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
			head_change(r, ly, py, h, i, b);
	}
	if (adjacent)
		layer_drift(w, &r->meta, ly, py, l, b);
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
	if (wr_add_key(r, it->step, it->inc, whole) != 0)
		log_err("run %s: out of memory: duplicates of step %lld will not be spotted",
		    m->run, (long long)it->step);
	memcpy(r->prev, cur, (size_t)m->layers * m->heads * sizeof(*cur));
	r->has_prev = 1;
	r->prev_step = it->step;
	r->prev_row = row;
	r->prev_inc = it->inc;
	/* keep this step's rows for the next paired split and drift */
	wr_free_layers(r->prev_layers, m->layers, w->inflight);
	r->prev_layers = NULL;
	if (m->fixed_probe) {
		r->prev_layers = it->layers;
		it->layers = NULL;
	}
}

/* Computes and appends a step: 0 stored or counted again, 1 not stored
 * (counted under write), -1 no run, -2 its run is locked elsewhere. */
int
wr_write_step(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wr_run_get(w, &it->meta, it);
	if (r && r->locked)
		wr_retry_lock(w, r, it);
	if (!r || r->broken)
		return r && r->locked ? -2 : -1;
	const swd_meta *m = &r->meta;
	struct winc *wi = wr_inc_get(r, it->inc);
	if (!wi)
		return -1;
	if (!wi->seen && it->inc_named && it->inc_senders <= 1)
		wr_first_seen(w, r, wi, it->first_seq);
	if (step_again(w, r, it))
		return 0;
	wr_put_senders(w, r, it->snd, it->nsnd);
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
	atomic_fetch_add(&w->st.write_drops, wr_fate_item(w, it, WF_WRITE));
	wr_put_senders(w, r, it->snd, it->nsnd);
	return 1;
}
