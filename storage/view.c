/*
 * view.c: which stored row stands for each step (runfile.h, sw_view). A run
 * file is an append log: a step may have rows from several incarnations of
 * its sender, in any order. The view is the run as the rules of LAYOUT.md
 * ("Rows, incarnations and supersession") define it, computed from the rows
 * alone, so that every reader, in C or Python, gets the same steps whatever
 * order they arrived in.
 */
#include <stdlib.h>
#include <string.h>

#include "storage/runfile.h"

struct res {
	uint64_t inc;
	int64_t step;
};

static int
res_cmp(const void *a, const void *b)
{
	const struct res *x = a, *y = b;
	return (x->inc > y->inc) - (x->inc < y->inc);
}

/* Sorting rows by (step, inc, row index): the winner is the last of a step. */
struct key {
	int64_t step;
	uint64_t inc;
	int64_t row;
};

static int
key_cmp(const void *a, const void *b)
{
	const struct key *x = a, *y = b;
	if (x->step != y->step)
		return (x->step > y->step) - (x->step < y->step);
	if (x->inc != y->inc)
		return (x->inc > y->inc) - (x->inc < y->inc);
	return (x->row > y->row) - (x->row < y->row);
}

/*
 * The smallest resume step of incarnations newer than inc, or INT64_MAX:
 * res is sorted by inc and sufmin[i] is the least step of res[i..].
 */
static int64_t
newer_resume(const struct res *res, const int64_t *sufmin, int64_t n, uint64_t inc)
{
	int64_t lo = 0, hi = n;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		if (res[mid].inc > inc)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo < n ? sufmin[lo] : INT64_MAX;
}

void
sw_view_free(sw_view *v)
{
	free(v->step);
	free(v->row);
	free(v->seg);
	memset(v, 0, sizeof(*v));
}

int
sw_view_build(const sw_rows *rows, sw_view *out)
{
	int64_t n = rows->n, nr = rows->nres, k = 0;
	struct res *res = malloc((size_t)nr * sizeof(*res) + 1);
	int64_t *sufmin = malloc((size_t)nr * sizeof(*sufmin) + 1);
	struct key *keys = malloc((size_t)n * sizeof(*keys) + 1);

	memset(out, 0, sizeof(*out));
	out->step = malloc((size_t)n * sizeof(int64_t) + 1);
	out->row = malloc((size_t)n * sizeof(int64_t) + 1);
	out->seg = malloc((size_t)n * sizeof(*out->seg) + 1);
	if (!res || !sufmin || !keys || !out->step || !out->row || !out->seg) {
		free(res);
		free(sufmin);
		free(keys);
		sw_view_free(out);
		return -1;
	}
	for (int64_t i = 0; i < nr; i++) {
		res[i].inc = rows->res_inc[i];
		res[i].step = rows->res_step[i];
	}
	qsort(res, (size_t)nr, sizeof(*res), res_cmp);
	for (int64_t i = nr - 1; i >= 0; i--)
		sufmin[i] = i == nr - 1 || res[i].step < sufmin[i + 1] ? res[i].step : sufmin[i + 1];
	/* rows that a newer incarnation's resume supersedes drop out */
	for (int64_t i = 0; i < n; i++) {
		if (rows->step[i] > newer_resume(res, sufmin, nr, rows->inc[i]))
			continue;
		keys[k].step = rows->step[i];
		keys[k].inc = rows->inc[i];
		keys[k].row = i;
		k++;
	}
	qsort(keys, (size_t)k, sizeof(*keys), key_cmp);
	for (int64_t i = 0; i < k; i++) {
		if (i + 1 < k && keys[i + 1].step == keys[i].step)
			continue;	/* a newer row of the step follows */
		out->step[out->n] = keys[i].step;
		out->row[out->n] = keys[i].row;
		/* segments: consecutive view steps of one incarnation */
		uint64_t inc = keys[i].inc;
		if (out->nseg == 0 || out->seg[out->nseg - 1].inc != inc) {
			out->seg[out->nseg].inc = inc;
			out->seg[out->nseg].first_step = keys[i].step;
			out->seg[out->nseg].steps = 0;
			out->nseg++;
		}
		out->seg[out->nseg - 1].last_step = keys[i].step;
		out->seg[out->nseg - 1].steps++;
		out->n++;
	}
	out->superseded = n - out->n;
	free(res);
	free(sufmin);
	free(keys);
	return 0;
}
