/*
 * runagg.c: the one run aggregation (runagg.h): the view of a run file,
 * ranges of it, the split of METRICS.md §3 over them, incomplete steps,
 * per-head classes and rankings, the dashboard's series. Nothing here
 * prints.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/swproto.h"
#include "report/json.h"
#include "report/runagg.h"

/* ---- opening ---------------------------------------------------------------------- */

static const char *const col_names[SW_RUN_COLS] = {
	[SW_RC_ENTROPY] = "entropy", [SW_RC_SINK_ENTROPY] = "sink_entropy",
	[SW_RC_SINK_MASS] = "sink_mass", [SW_RC_CONTENT_MASS] = "content_mass",
	[SW_RC_CONTENT_ENTROPY_MW] = "content_entropy_mw",
	[SW_RC_CONTENT_ENTROPY] = "content_entropy", [SW_RC_ROWS] = "rows",
	[SW_RC_MISSING_RANK] = "missing_rank", [SW_RC_MISSING] = "missing",
	[SW_RC_LOST] = "lost", [SW_RC_INCOMPLETE] = "incomplete",
	[SW_RC_DRIFT_SINK] = "drift_sink", [SW_RC_DRIFT_CONTENT] = "drift_content",
	[SW_RC_FLIP] = "flip_rate", [SW_RC_PREV_ROW] = "prev_row",
};

/* Values per committed row of column c. */
static size_t
col_width(const sw_run *run, int c)
{
	if (c == SW_RC_LOST || c == SW_RC_INCOMPLETE || c == SW_RC_PREV_ROW)
		return 1;
	if (c == SW_RC_MISSING)
		return run->L;
	if (c == SW_RC_FLIP)
		return run->L * SW_FLIP_METRICS;
	return run->LH;
}

void
sw_run_close(sw_run **rp)
{
	sw_run *run = *rp;
	if (!run)
		return;
	for (int c = 0; c < SW_RUN_COLS; c++)
		free(run->col[c]);
	sw_rows_free(&run->rows);
	sw_view_free(&run->view);
	sw_reader_close(&run->reader);
	free(run->path);
	free(run);
	*rp = NULL;
}

/* Reads column c over every committed row; a dataset the file's layout
 * does not have is left NULL. */
static int
read_col(sw_run *run, int c, char *err, size_t errlen)
{
	int k = sw_schema_find(col_names[c]);
	if (k < 0 || sw_schema_at((size_t)k)->version > run->meta.version)
		return 0;
	size_t n = (size_t)run->T * col_width(run, c);
	if (!(run->col[c] = malloc(n * sizeof(double) + 1))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (run->T > 0 && sw_reader_read(run->reader, col_names[c], 0, run->T, run->col[c], n,
	    err, errlen) < 0)
		return -1;
	return 0;
}

int
sw_run_open(const char *path, sw_run **out, char *err, size_t errlen)
{
	sw_run *run = calloc(1, sizeof(*run));

	*out = NULL;
	if (!run || !(run->path = strdup(path))) {
		free(run);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (sw_reader_open(path, &run->reader, &run->meta, err, errlen) != 0)
		goto fail;
	run->L = run->meta.layers;
	run->H = run->meta.heads;
	run->LH = run->L * run->H;
	if ((run->T = sw_reader_refresh(run->reader, err, errlen)) < 0)
		goto fail;
	if (sw_reader_rows(run->reader, run->T, &run->rows, err, errlen) != 0)
		goto fail;
	if (sw_view_build(&run->rows, &run->view) != 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (int c = 0; c < SW_RUN_COLS; c++)
		if (read_col(run, c, err, errlen) != 0)
			goto fail;
	if (!run->col[SW_RC_ENTROPY] || !run->col[SW_RC_MISSING] || !run->col[SW_RC_LOST]) {
		snprintf(err, errlen, "%s: the file lacks the head values", path);
		goto fail;
	}
	if (run->T > 0) {
		run->lost = (int64_t)run->col[SW_RC_LOST][run->T - 1];
		run->incomplete = (int64_t)run->col[SW_RC_INCOMPLETE][run->T - 1];
	}
	*out = run;
	return 0;
fail:
	sw_run_close(&run);
	return -1;
}

int
sw_run_refresh(sw_run *run, char *err, size_t errlen)
{
	int64_t T = sw_reader_refresh(run->reader, err, errlen);
	sw_rows rows;
	sw_view view;

	if (T < 0)
		return -1;
	if (T <= run->T)
		return 0;
	/* the columns grow in place; run->T moves only once all are read */
	for (int c = 0; c < SW_RUN_COLS; c++) {
		if (!run->col[c])
			continue;
		size_t w = col_width(run, c), n = (size_t)T * w;
		double *p = realloc(run->col[c], n * sizeof(double) + 1);
		if (!p) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		run->col[c] = p;
		if (sw_reader_read(run->reader, col_names[c], run->T, T, p + (size_t)run->T * w,
		    n - (size_t)run->T * w, err, errlen) < 0)
			return -1;
	}
	if (sw_reader_rows(run->reader, T, &rows, err, errlen) != 0)
		return -1;
	if (sw_view_build(&rows, &view) != 0) {
		sw_rows_free(&rows);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	sw_rows_free(&run->rows);
	sw_view_free(&run->view);
	run->rows = rows;
	run->view = view;
	run->T = T;
	run->lost = (int64_t)run->col[SW_RC_LOST][T - 1];
	run->incomplete = (int64_t)run->col[SW_RC_INCOMPLETE][T - 1];
	return 1;
}

/* The first view index whose step is >= step (view.n if none). */
static int64_t
lower_bound(const sw_view *v, int64_t step)
{
	int64_t lo = 0, hi = v->n;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		if (v->step[mid] < step)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int
sw_run_span(const sw_run *run, int64_t from, int64_t to, int64_t *k0, int64_t *k1)
{
	*k0 = lower_bound(&run->view, from);
	*k1 = to == INT64_MAX ? run->view.n - 1 : lower_bound(&run->view, to + 1) - 1;
	return *k0 < run->view.n && *k1 >= *k0 ? 0 : -1;
}

int64_t
sw_run_find(const sw_run *run, int64_t step)
{
	int64_t k = lower_bound(&run->view, step);
	return k < run->view.n && run->view.step[k] == step ? k : -1;
}

/* ---- ranges ----------------------------------------------------------------------- */

/* "step S is not stored in FILE: the nearest stored steps are A and B" */
static void
not_stored(const sw_run *run, const char *opt, int64_t step, char *err, size_t errlen)
{
	const sw_view *v = &run->view;
	int64_t k = lower_bound(v, step);
	if (k == 0)
		snprintf(err, errlen, "%s %lld: step %lld is not stored in %s; the nearest "
		    "stored step is %lld (the first)", opt, (long long)step, (long long)step,
		    run->path, (long long)v->step[0]);
	else if (k == v->n)
		snprintf(err, errlen, "%s %lld: step %lld is not stored in %s; the nearest "
		    "stored step is %lld (the last)", opt, (long long)step, (long long)step,
		    run->path, (long long)v->step[v->n - 1]);
	else
		snprintf(err, errlen, "%s %lld: step %lld is not stored in %s; the nearest "
		    "stored steps are %lld and %lld", opt, (long long)step, (long long)step,
		    run->path, (long long)v->step[k - 1], (long long)v->step[k]);
}

int
sw_run_range(const sw_run *run, const sw_range_req *q, sw_range *out, char *err,
    size_t errlen)
{
	const sw_view *v = &run->view;

	if (v->n == 0) {
		snprintf(err, errlen, "%s has 0 stored step(s) (%lld rows)", run->path,
		    (long long)run->T);
		return -1;
	}
	out->k0 = 0;
	out->k1 = v->n - 1;
	if (q->has_to && (out->k1 = sw_run_find(run, q->to)) < 0) {
		not_stored(run, "--to", q->to, err, errlen);
		return SW_RANGE_NOT_STORED;
	}
	if (q->has_from && (out->k0 = sw_run_find(run, q->from)) < 0) {
		not_stored(run, "--from", q->from, err, errlen);
		return SW_RANGE_NOT_STORED;
	}
	if (q->has_from && q->has_to && q->from > q->to) {
		snprintf(err, errlen, "--from %lld is after --to %lld", (long long)q->from,
		    (long long)q->to);
		return -1;
	}
	if (q->last > 0) {
		if (q->last > out->k1 + 1) {
			snprintf(err, errlen, "--last %lld: %s has %lld stored step(s)%s", (long long)q->last,
			    run->path, (long long)(out->k1 + 1), q->has_to ? " up to --to" : "");
			return -1;
		}
		out->k0 = out->k1 - q->last + 1;
	}
	return 0;
}

/* ---- the attribution ------------------------------------------------------------- */

static void
head_at(const sw_run *run, int64_t t, size_t i, sw_head_at *h)
{
	size_t k = (size_t)t * run->LH + i;
	h->H = run->col[SW_RC_ENTROPY][k];
	h->hb = run->col[SW_RC_SINK_ENTROPY][k];
	h->s = run->col[SW_RC_SINK_MASS][k];
	h->w = run->col[SW_RC_CONTENT_MASS][k];
	h->Hcw = run->col[SW_RC_CONTENT_ENTROPY_MW][k];
	h->Hc = run->col[SW_RC_CONTENT_ENTROPY] ? run->col[SW_RC_CONTENT_ENTROPY][k] : NAN;
	h->rows = (int64_t)run->col[SW_RC_ROWS][k];
}

/* The head values swm_split_aggregate takes. */
static void
swm_head_of(const sw_run *run, int64_t t, size_t i, swm_head *h)
{
	sw_head_at a;
	head_at(run, t, i, &a);
	memset(h, 0, sizeof(*h));
	h->rows = (uint64_t)a.rows;
	h->H = a.H;
	h->hb = a.hb;
	h->s = a.s;
	h->w = a.w;
	h->Hcw = a.Hcw;
}

/* The split of head i between stored rows ta and tb (row statistics ra, rb
 * when paired, §3 paired form; else the aggregate form). */
static void
split_rows(const sw_run *run, size_t R, const swm_row *ra, const swm_row *rb, int64_t ta,
    int64_t tb, size_t i, swm_split *out)
{
	if (ra && rb) {
		swm_split_paired(ra + i * R, rb + i * R, R, out);
		return;
	}
	swm_head a, b;
	swm_head_of(run, ta, i, &a);
	swm_head_of(run, tb, i, &b);
	swm_split_aggregate(&a, &b, out);
}

/*
 * The row statistics of committed rows, read a block of rows at a time:
 * one read per dataset for many steps (a read per step costs a refresh of
 * each dataset, which dominated a long run's report). At most
 * ROWBLOCK_BYTES held, and at least one row.
 */
#define ROWBLOCK_BYTES (4u << 20)
struct rowblock {
	swm_row *buf;
	size_t m, cap;		/* rows a step, steps the buffer holds */
	int64_t t0, t1;		/* the rows held: t0 .. t1 - 1 */
	int64_t tmax;		/* no row past this one is wanted */
};

static int
rowblock_init(struct rowblock *b, const sw_run *run, int64_t tmax, char *err, size_t errlen)
{
	memset(b, 0, sizeof(*b));
	b->m = run->LH * run->meta.rows;
	b->cap = ROWBLOCK_BYTES / (b->m * sizeof(swm_row) + 1);
	if (b->cap < 1)
		b->cap = 1;
	b->tmax = tmax;
	if (!(b->buf = malloc(b->cap * b->m * sizeof(swm_row) + 1))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* The statistics of committed row t (t <= tmax), NULL with err. */
static const swm_row *
rowblock_get(sw_run *run, struct rowblock *b, int64_t t, char *err, size_t errlen)
{
	if (t < b->t0 || t >= b->t1) {
		int64_t t1 = t + (int64_t)b->cap;
		if (t1 > b->tmax + 1)
			t1 = b->tmax + 1;
		if (sw_reader_row_stats_range(run->reader, t, t1, b->buf, b->cap * b->m, err,
		    errlen) != 0)
			return NULL;
		b->t0 = t;
		b->t1 = t1;
	}
	return b->buf + (size_t)(t - b->t0) * b->m;
}

/* Path sums over the range and the endpoint split, per head. */
static int
attribute(sw_run *run, sw_agg *a, char *err, size_t errlen)
{
	size_t LH = run->LH, R = a->paired ? run->meta.rows : 0, n = LH * R;
	const sw_view *v = &run->view;
	int64_t k0 = a->range.k0, k1 = a->range.k1, tmax = 0;
	swm_row *first = NULL, *prev = NULL, *cur = NULL;
	struct rowblock blk = { 0 };
	const swm_row *got;
	int rc = -1;

	for (int64_t k = k0; k <= k1; k++)
		tmax = v->row[k] > tmax ? v->row[k] : tmax;
	if (a->paired && (rowblock_init(&blk, run, tmax, err, errlen) != 0 ||
	    !(first = malloc(n * sizeof(*first) + 1)) ||
	    !(prev = malloc(n * sizeof(*prev) + 1)) || !(cur = malloc(n * sizeof(*cur) + 1)))) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (a->paired) {
		if (!(got = rowblock_get(run, &blk, v->row[k0], err, errlen)))
			goto out;
		memcpy(first, got, n * sizeof(*first));
		memcpy(prev, first, n * sizeof(*prev));
	}
	for (int64_t k = k0 + 1; k <= k1; k++) {
		if (a->paired) {
			if (!(got = rowblock_get(run, &blk, v->row[k], err, errlen)))
				goto out;
			memcpy(cur, got, n * sizeof(*cur));
		}
		for (size_t i = 0; i < LH; i++) {
			swm_split sp;
			split_rows(run, R, prev, cur, v->row[k - 1], v->row[k], i, &sp);
			if (a->parts) {
				a->parts[((size_t)(k - k0) * LH + i) * 2] = sp.sink;
				a->parts[((size_t)(k - k0) * LH + i) * 2 + 1] = sp.content;
			}
			if (!isfinite(sp.dH) || !isfinite(sp.sink) || !isfinite(sp.content))
				continue;
			swm_split_add(&a->head[i].path, &sp);
			a->head[i].intervals++;
		}
		swm_row *t = prev;
		prev = cur;
		cur = t;
	}
	for (size_t i = 0; i < LH; i++)
		split_rows(run, R, first, prev, v->row[k0], v->row[k1], i, &a->head[i].endpoint);
	rc = 0;
out:
	free(blk.buf);
	free(first);
	free(prev);
	free(cur);
	return rc;
}

static void
shares(sw_attrib *x)
{
	swm_split_shares(&x->path, &x->path_sink_share, &x->path_content_share);
	swm_split_shares(&x->endpoint, &x->end_sink_share, &x->end_content_share);
}

/* Layer and model figures: means of the head figures (§3). */
static void
means(sw_agg *a)
{
	size_t L = a->L, H = a->H, LH = a->LH;
	for (size_t i = 0; i < LH; i++) {
		if (a->head[i].intervals == 0)	/* no interval with a value: none */
			a->head[i].path.dH = a->head[i].path.sink = a->head[i].path.content = NAN;
		shares(&a->head[i]);
	}
	for (size_t l = 0; l <= L; l++) {
		sw_attrib *dst = l < L ? &a->layer[l] : &a->model;
		size_t h0 = l < L ? l * H : 0, n = l < L ? H : LH;
		double acc[6] = { 0 };
		size_t cnt[2] = { 0, 0 };
		for (size_t i = h0; i < h0 + n; i++) {
			const sw_attrib *h = &a->head[i];
			if (h->intervals > 0) {
				acc[0] += h->path.dH;
				acc[1] += h->path.sink;
				acc[2] += h->path.content;
				cnt[0]++;
				dst->intervals += h->intervals;
			}
			if (isfinite(h->endpoint.dH)) {
				acc[3] += h->endpoint.dH;
				acc[4] += h->endpoint.sink;
				acc[5] += h->endpoint.content;
				cnt[1]++;
			}
		}
		dst->path.dH = cnt[0] ? acc[0] / cnt[0] : NAN;
		dst->path.sink = cnt[0] ? acc[1] / cnt[0] : NAN;
		dst->path.content = cnt[0] ? acc[2] / cnt[0] : NAN;
		dst->endpoint.dH = cnt[1] ? acc[3] / cnt[1] : NAN;
		dst->endpoint.sink = cnt[1] ? acc[4] / cnt[1] : NAN;
		dst->endpoint.content = cnt[1] ? acc[5] / cnt[1] : NAN;
		if (cnt[0])
			dst->intervals /= (int64_t)cnt[0];
		shares(dst);
	}
}

/* Adds rank to the gap's ascending list of distinct ranks (the first few). */
static void
gap_rank(sw_step_gap *g, int32_t rank)
{
	int k = 0;
	while (k < g->nranks && g->ranks[k] < rank)
		k++;
	if ((k < g->nranks && g->ranks[k] == rank) || g->nranks == SW_GAP_RANKS)
		return;
	memmove(g->ranks + k + 1, g->ranks + k, (size_t)(g->nranks - k) * sizeof(int32_t));
	g->ranks[k] = rank;
	g->nranks++;
}

/* What view step k lacks: 1 if anything (g filled), 0 if it is complete,
 * -1 out of memory. */
static int
step_gap(const sw_run *run, int64_t k, sw_step_gap *g)
{
	int64_t t = run->view.row[k];
	const double *miss = run->col[SW_RC_MISSING] + (size_t)t * run->L;
	const double *mr = run->col[SW_RC_MISSING_RANK] ?
	    run->col[SW_RC_MISSING_RANK] + (size_t)t * run->LH : NULL;
	const double *rows = run->col[SW_RC_ROWS] + (size_t)t * run->LH;

	memset(g, 0, sizeof(*g));
	g->k = k;
	g->step = run->view.step[k];
	for (size_t l = 0; l < run->L; l++) {
		g->layers_missing += miss[l] != 0;
		for (size_t h = 0; h < run->H; h++) {
			size_t i = l * run->H + h;
			g->heads_missing += mr ? mr[i] != -1 : miss[l] != 0;
			g->heads_without_rows += !(rows[i] > 0);
			if (mr && mr[i] >= 0)
				gap_rank(g, (int32_t)mr[i]);
		}
	}
	if (!g->layers_missing && !g->heads_missing && !g->heads_without_rows)
		return 0;
	if (!(g->layers = malloc((size_t)g->layers_missing * sizeof(int32_t) + 1)))
		return -1;
	for (size_t l = 0, n = 0; l < run->L; l++)
		if (miss[l] != 0)
			g->layers[n++] = (int32_t)l;
	return 1;
}

static int
find_gaps(const sw_run *run, sw_agg *a)
{
	if (!(a->gaps = malloc((size_t)a->steps * sizeof(*a->gaps) + 1)))
		return -1;
	for (int64_t k = a->range.k0; k <= a->range.k1; k++) {
		int rc = step_gap(run, k, &a->gaps[a->ngaps]);
		if (rc < 0)
			return -1;
		a->ngaps += rc;
	}
	for (int64_t j = 1; j < a->steps; j++)
		a->intervals_incomplete += sw_agg_interval_incomplete(a, j);
	return 0;
}

/* Whether view step k is one of the gaps (sorted by k). */
static int
is_gap(const sw_agg *a, int64_t k)
{
	int64_t lo = 0, hi = a->ngaps;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		if (a->gaps[mid].k < k)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < a->ngaps && a->gaps[lo].k == k;
}

int
sw_agg_interval_incomplete(const sw_agg *a, int64_t j)
{
	int64_t kb = a->range.k0 + j;
	return is_gap(a, kb - 1) || is_gap(a, kb);
}

void
sw_agg_free(sw_agg *a)
{
	free(a->step);
	free(a->head);
	free(a->layer);
	free(a->first);
	free(a->last);
	for (int64_t g = 0; a->gaps && g < a->ngaps; g++)
		free(a->gaps[g].layers);
	free(a->gaps);
	free(a->parts);
	memset(a, 0, sizeof(*a));
}

int
sw_agg_compute(sw_run *run, const sw_range *range, int want_series, sw_agg *a, char *err,
    size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->L = run->L;
	a->H = run->H;
	a->LH = run->LH;
	a->range = *range;
	a->steps = range->k1 - range->k0 + 1;
	a->intervals = a->steps - 1;
	a->first_step = run->view.step[range->k0];
	a->last_step = run->view.step[range->k1];
	/* the paired form where the file has each row's statistics (§3) */
	a->paired = run->meta.row_stats;
	a->form = a->paired ? "paired" : "aggregate";
	size_t np = want_series ? (size_t)a->steps * a->LH * 2 : 0;
	if (!(a->step = malloc((size_t)a->steps * sizeof(int64_t) + 1)) ||
	    !(a->head = calloc(a->LH + 1, sizeof(*a->head))) ||
	    !(a->layer = calloc(a->L + 1, sizeof(*a->layer))) ||
	    !(a->first = calloc(a->LH + 1, sizeof(*a->first))) ||
	    !(a->last = calloc(a->LH + 1, sizeof(*a->last))) ||
	    (want_series && !(a->parts = malloc(np * sizeof(double) + 1))) ||
	    find_gaps(run, a) != 0) {
		sw_agg_free(a);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < np; i++)
		a->parts[i] = NAN;
	memcpy(a->step, run->view.step + range->k0, (size_t)a->steps * sizeof(int64_t));
	for (size_t i = 0; i < a->LH; i++) {
		head_at(run, run->view.row[range->k0], i, &a->first[i]);
		head_at(run, run->view.row[range->k1], i, &a->last[i]);
	}
	if (attribute(run, a, err, errlen) != 0) {
		sw_agg_free(a);
		return -1;
	}
	means(a);
	return 0;
}

/* ---- per head ------------------------------------------------------------------ */

static const char *const class_names[SW_CLASS__N] = {
	[SW_CLASS_NONE] = "none", [SW_CLASS_STABLE] = "stable", [SW_CLASS_RISE] = "rise",
	[SW_CLASS_SINK] = "sink", [SW_CLASS_CONTENT] = "content", [SW_CLASS_BOTH] = "both",
};

const char *
sw_head_class_name(sw_head_class c)
{
	return c < SW_CLASS__N ? class_names[c] : "?";
}

sw_head_class
sw_head_classify(const sw_attrib *a, double eps)
{
	double dH = a->path.dH, s = a->path.sink, c = a->path.content;
	if (a->intervals <= 0 || !isfinite(dH))
		return SW_CLASS_NONE;
	if (fabs(dH) < eps)
		return SW_CLASS_STABLE;
	if (dH >= eps)
		return SW_CLASS_RISE;
	if (s <= -eps && c > -eps)
		return SW_CLASS_SINK;
	if (c <= -eps && s > -eps)
		return SW_CLASS_CONTENT;
	return SW_CLASS_BOTH;
}

/* Sorting heads by a value, ties by head index (stable ranks). */
struct ranked {
	double v;
	size_t i;
};

static int
ranked_cmp(const void *x, const void *y)
{
	const struct ranked *a = x, *b = y;
	if (a->v != b->v)
		return a->v < b->v ? -1 : 1;
	return (a->i > b->i) - (a->i < b->i);
}

/* Ranks 1..n of the values, ties the mean of their ranks, into rank[i]. */
static void
rank_of(struct ranked *r, size_t n, double *rank)
{
	qsort(r, n, sizeof(*r), ranked_cmp);
	for (size_t a = 0; a < n;) {
		size_t b = a;
		while (b + 1 < n && r[b + 1].v == r[a].v)
			b++;
		double mean = 0.5 * (double)(a + b) + 1.0;
		for (size_t k = a; k <= b; k++)
			rank[r[k].i] = mean;
		a = b + 1;
	}
}

void
sw_ranking_free(sw_ranking *r)
{
	free(r->rank_entropy);
	free(r->rank_content);
	free(r->moved);
	memset(r, 0, sizeof(*r));
}

int
sw_agg_rank(const sw_agg *a, sw_ranking *out)
{
	size_t LH = a->LH, n = 0;
	struct ranked *re = malloc((LH + 1) * sizeof(*re)), *rc = malloc((LH + 1) * sizeof(*rc));
	struct ranked *shift = malloc((LH + 1) * sizeof(*shift));

	memset(out, 0, sizeof(*out));
	out->rank_entropy = malloc((LH + 1) * sizeof(double));
	out->rank_content = malloc((LH + 1) * sizeof(double));
	out->moved = malloc((LH + 1) * sizeof(size_t));
	if (!re || !rc || !shift || !out->rank_entropy || !out->rank_content || !out->moved) {
		free(re);
		free(rc);
		free(shift);
		sw_ranking_free(out);
		return -1;
	}
	for (size_t i = 0; i < LH; i++) {
		out->rank_entropy[i] = out->rank_content[i] = NAN;
		const sw_head_at *h = &a->last[i];
		if (!isfinite(h->H) || !isfinite(h->Hc))
			continue;
		re[n].v = h->H;
		rc[n].v = h->Hc;
		re[n].i = rc[n].i = i;
		n++;
	}
	out->ranked = n;
	rank_of(re, n, out->rank_entropy);
	rank_of(rc, n, out->rank_content);
	/* Spearman's rho: the Pearson correlation of the two rankings */
	double mean = 0.5 * (double)(n + 1), sxy = 0, sxx = 0, syy = 0;
	size_t nm = 0;
	for (size_t i = 0; i < LH; i++) {
		if (isnan(out->rank_entropy[i]))
			continue;
		double x = out->rank_entropy[i] - mean, y = out->rank_content[i] - mean;
		sxy += x * y;
		sxx += x * x;
		syy += y * y;
		double d = fabs(out->rank_content[i] - out->rank_entropy[i]);
		if (d > 0) {	/* sorted by -|shift|: the largest first, ties by head */
			shift[nm].v = -d;
			shift[nm++].i = i;
		}
	}
	out->rho = n >= 2 && sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
	qsort(shift, nm, sizeof(*shift), ranked_cmp);
	for (size_t k = 0; k < nm && k < SW_RANK_MOVED; k++)
		out->moved[out->nmoved++] = shift[k].i;
	free(re);
	free(rc);
	free(shift);
	return 0;
}

/* ---- the series ---------------------------------------------------------------- */

double
sw_finite_mean(const double *v, size_t n)
{
	double s = 0;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (isfinite(v[i])) {
			s += v[i];
			k++;
		}
	return k ? s / (double)k : NAN;
}

/* The mean of the finite values of column c at [i, i + n); NaN where the
 * file's layout lacks the column. */
static double
col_mean(const sw_run *run, int c, size_t i, size_t n)
{
	return run->col[c] ? sw_finite_mean(run->col[c] + i, n) : NAN;
}

int
sw_run_drift_ok(const sw_run *run, int64_t k)
{
	const double *prev = run->col[SW_RC_PREV_ROW];
	if (k <= 0 || k >= run->view.n)
		return 0;
	if (!prev)	/* layout 1: one writer in order; drift was taken against the
			 * row written before, so that row must be the view's previous */
		return run->view.row[k - 1] == run->view.row[k] - 1;
	return prev[run->view.row[k]] == (double)run->view.row[k - 1];
}

/* The flip rates of layer l at committed row t (l == L: the mean of the
 * layers' finite ones, per metric). */
static void
flip_at(const sw_run *run, size_t t, size_t l, double *out)
{
	const double *f = run->col[SW_RC_FLIP] ? run->col[SW_RC_FLIP] + t * run->L * SW_FLIP_METRICS :
	    NULL;
	for (size_t m = 0; m < SW_FLIP_METRICS; m++) {
		if (!f)
			out[m] = NAN;
		else if (l < run->L)
			out[m] = f[l * SW_FLIP_METRICS + m];
		else {
			double s = 0;
			size_t k = 0;
			for (size_t x = 0; x < run->L; x++)
				if (isfinite(f[x * SW_FLIP_METRICS + m])) {
					s += f[x * SW_FLIP_METRICS + m];
					k++;
				}
			out[m] = k ? s / (double)k : NAN;
		}
	}
}

void
sw_series_free(sw_series *s)
{
	free(s->step);
	free(s->sink_mass);
	free(s->entropy);
	free(s->cum_sink);
	free(s->cum_content);
	free(s->content_entropy);
	free(s->drift_sink);
	free(s->drift_content);
	free(s->flip);
	memset(s, 0, sizeof(*s));
}

int
sw_agg_series(const sw_run *run, const sw_agg *a, sw_series *out, char *err, size_t errlen)
{
	size_t L = a->L, H = a->H, LH = a->LH, n = (size_t)a->steps, m = (L + 1) * n;
	double *hs = malloc((2 * LH + 1) * sizeof(double));
	char *drift_ok = malloc(n + 1);

	memset(out, 0, sizeof(*out));
	out->n = n;
	out->layers = L;
	out->step = malloc(n * sizeof(int64_t) + 1);
	out->sink_mass = malloc(m * sizeof(double) + 1);
	out->entropy = malloc(m * sizeof(double) + 1);
	out->cum_sink = malloc(m * sizeof(double) + 1);
	out->cum_content = malloc(m * sizeof(double) + 1);
	out->content_entropy = malloc(m * sizeof(double) + 1);
	out->drift_sink = malloc(m * sizeof(double) + 1);
	out->drift_content = malloc(m * sizeof(double) + 1);
	out->flip = malloc(m * SW_FLIP_METRICS * sizeof(double) + 1);
	if (!a->parts || !hs || !drift_ok || !out->step || !out->sink_mass || !out->entropy ||
	    !out->cum_sink || !out->cum_content || !out->content_entropy ||
	    !out->drift_sink || !out->drift_content || !out->flip) {
		free(hs);
		free(drift_ok);
		sw_series_free(out);
		snprintf(err, errlen, a->parts ? "out of memory" : "no series computed");
		return -1;
	}
	memcpy(out->step, a->step, n * sizeof(int64_t));
	for (size_t j = 0; j < n; j++)
		drift_ok[j] = (char)sw_run_drift_ok(run, a->range.k0 + (int64_t)j);
	for (size_t l = 0; l <= L; l++) {	/* l == L: the model */
		size_t h0 = l < L ? l * H : 0, nh = l < L ? H : LH;
		memset(hs, 0, 2 * LH * sizeof(double));
		for (size_t j = 0; j < n; j++) {
			size_t t = (size_t)run->view.row[a->range.k0 + (int64_t)j], o = l * n + j;
			out->sink_mass[o] = sw_finite_mean(run->col[SW_RC_SINK_MASS] + t * LH + h0, nh);
			out->entropy[o] = sw_finite_mean(run->col[SW_RC_ENTROPY] + t * LH + h0, nh);
			out->content_entropy[o] = col_mean(run, SW_RC_CONTENT_ENTROPY, t * LH + h0, nh);
			if (drift_ok[j]) {
				out->drift_sink[o] = col_mean(run, SW_RC_DRIFT_SINK, t * LH + h0, nh);
				out->drift_content[o] = col_mean(run, SW_RC_DRIFT_CONTENT, t * LH + h0,
				    nh);
			} else	/* taken against another step than the view's previous: a gap */
				out->drift_sink[o] = out->drift_content[o] = NAN;
			flip_at(run, t, l, out->flip + o * SW_FLIP_METRICS);
			double s = 0, c = 0;
			for (size_t i = h0; i < h0 + nh; i++) {
				double x = a->parts[(j * LH + i) * 2], y = a->parts[(j * LH + i) * 2 + 1];
				hs[2 * i] += isfinite(x) ? x : 0;
				hs[2 * i + 1] += isfinite(y) ? y : 0;
				s += hs[2 * i];
				c += hs[2 * i + 1];
			}
			out->cum_sink[o] = s / (double)nh;
			out->cum_content[o] = c / (double)nh;
		}
	}
	free(hs);
	free(drift_ok);
	return 0;
}

/* ---- senders ------------------------------------------------------------------ */

struct srow {
	uint64_t inc, rank, senders, ended;
};

static int
srow_cmp(const void *x, const void *y)
{
	const struct srow *a = x, *b = y;
	if (a->inc != b->inc)
		return (a->inc > b->inc) - (a->inc < b->inc);
	return (a->rank > b->rank) - (a->rank < b->rank);
}

int64_t
sw_ranks_not_ended(const uint64_t *t, int64_t n, sw_open_rank **out)
{
	struct srow *r = malloc((size_t)n * sizeof(*r) + 1);
	sw_open_rank *o = NULL;
	size_t no = 0, cap = 0;

	*out = NULL;
	if (!r)
		return -1;
	for (int64_t k = 0; k < n; k++) {
		const uint64_t *v = t + k * SW_SENDER_FIELDS;
		r[k] = (struct srow){ v[SW_S_INC], v[SW_S_RANK], v[SW_S_SENDERS], v[SW_S_ENDED] };
	}
	if (n > 1)
		qsort(r, (size_t)n, sizeof(*r), srow_cmp);
	for (int64_t a = 0, b; a < n; a = b) {
		uint64_t N = 0;
		for (b = a; b < n && r[b].inc == r[a].inc; b++)
			N = r[b].senders > N ? r[b].senders : N;
		if (N <= 1)	/* one sender: the run's own ended mark says it */
			continue;
		if (N > SWP_SENDERS_MAX)
			N = SWP_SENDERS_MAX;
		/* rows a .. b - 1 are this incarnation's, by rank */
		int64_t p = a;
		for (uint64_t rank = 0; rank < N; rank++) {
			int sent = 0, ended = 0;
			for (; p < b && r[p].rank <= rank; p++)
				if (r[p].rank == rank) {
					sent = 1;
					ended |= r[p].ended != 0;
				}
			if (ended)
				continue;
			if (no == cap) {
				cap = cap ? 2 * cap : 16;
				sw_open_rank *g = realloc(o, cap * sizeof(*g));
				if (!g) {
					free(o);
					free(r);
					return -1;
				}
				o = g;
			}
			o[no++] = (sw_open_rank){ r[a].inc, (uint32_t)rank, (uint32_t)N, sent };
		}
	}
	free(r);
	*out = o;
	return (int64_t)no;
}

/* ---- families ------------------------------------------------------------------- */

void
sw_mean_sd(const double *v, size_t n, double *mean, double *sd, size_t *used)
{
	double s = 0;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (isfinite(v[i])) {
			s += v[i];
			k++;
		}
	*used = k;
	*mean = k ? s / (double)k : NAN;
	if (k < 2) {
		*sd = NAN;
		return;
	}
	double ss = 0;
	for (size_t i = 0; i < n; i++)
		if (isfinite(v[i]))
			ss += (v[i] - *mean) * (v[i] - *mean);
	*sd = sqrt(ss / (double)(k - 1));
}

void
sw_json_series_layer(sw_json *j, const sw_series *s, size_t l, size_t n)
{
	size_t o0 = l * s->n;	/* the arrays are [layers + 1][s->n] */
	sw_json_nums(j, "sink_mass", s->sink_mass + o0, n);
	sw_json_nums(j, "entropy", s->entropy + o0, n);
	sw_json_nums(j, "content_entropy", s->content_entropy + o0, n);
	sw_json_nums(j, "cum_sink", s->cum_sink + o0, n);
	sw_json_nums(j, "cum_content", s->cum_content + o0, n);
	sw_json_nums(j, "drift_sink", s->drift_sink + o0, n);
	sw_json_nums(j, "drift_content", s->drift_content + o0, n);
	static const char *const flip_key[SW_FLIP_METRICS] = { "flip_cosine", "flip_js",
		"flip_entropy" };
	for (size_t m = 0; m < SW_FLIP_METRICS; m++) {
		sw_json_begin_arr(j, flip_key[m]);
		for (size_t k = 0; k < n; k++)
			sw_json_num(j, NULL, s->flip[(o0 + k) * SW_FLIP_METRICS + m]);
		sw_json_end_arr(j);
	}
}

/* The keys of `sinkwatch report --format json` for one split (report and serve). */
void
sw_json_attrib(sw_json *j, const sw_attrib *a)
{
	sw_json_begin_obj(j, "path");
	sw_json_num(j, "dH", a->path.dH);
	sw_json_num(j, "sink", a->path.sink);
	sw_json_num(j, "content", a->path.content);
	sw_json_num(j, "sink_share", a->path_sink_share);
	sw_json_num(j, "content_share", a->path_content_share);
	sw_json_int(j, "intervals", a->intervals);
	sw_json_end_obj(j);
	sw_json_begin_obj(j, "endpoint");
	sw_json_num(j, "dH", a->endpoint.dH);
	sw_json_num(j, "sink", a->endpoint.sink);
	sw_json_num(j, "content", a->endpoint.content);
	sw_json_num(j, "sink_share", a->end_sink_share);
	sw_json_num(j, "content_share", a->end_content_share);
	sw_json_end_obj(j);
}
