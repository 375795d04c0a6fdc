/*
 * runtools.c: `sinkwatch tail`, `sinkwatch report` and `sinkwatch status`:
 * reading run files (with SWMR, while the daemon writes them) and asking
 * the daemon's control endpoint.
 */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "metrics/swm.h"
#include "storage/runfile.h"
#include "tools/analyze.h"
#include "tools/json.h"
#include "tools/tools.h"

int
sw_tool_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "sinkwatch %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

/* Mean of the finite values of v[0 .. n). NaN if none. */
static double
finite_mean(const double *v, size_t n)
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

/* ---- tail ----------------------------------------------------------------------- */

static volatile sig_atomic_t tail_stop;

static void
on_sigint(int s)
{
	(void)s;
	tail_stop = 1;
}

/*
 * What tail showed, to say when a step it showed was superseded
 * (storage/LAYOUT.md, "the view"): per committed row, whether it was
 * printed and whether its supersession was reported.
 */
struct tail_seen {
	int64_t n, cap;
	uint8_t *said;		/* [n] 1: its supersession was printed */
};

static int
tail_seen_grow(struct tail_seen *ts, int64_t n)
{
	if (n > ts->cap) {
		int64_t cap = ts->cap ? ts->cap : 256;
		while (cap < n)
			cap *= 2;
		uint8_t *p = realloc(ts->said, (size_t)cap);
		if (!p)
			return -1;
		memset(p + ts->cap, 0, (size_t)(cap - ts->cap));
		ts->said = p;
		ts->cap = cap;
	}
	if (n > ts->n)
		ts->n = n;
	return 0;
}

/* The first resume record of incarnation inc, or -1. */
static int64_t
tail_resume_of(const sw_rows *rw, uint64_t inc)
{
	for (int64_t i = 0; i < rw->nres; i++)
		if (rw->res_inc[i] == inc)
			return i;
	return -1;
}

/*
 * For each of the first `shown` rows that tail printed and that the view of
 * the T committed rows no longer holds, once: "# step S superseded by
 * incarnation N", with "(resume from R)" when N's resume record is why (S
 * after R). Returns 0, or -1 with err.
 */
static int
tail_superseded(sw_reader *r, int64_t T, int64_t shown, struct tail_seen *ts, char *err,
    size_t errlen)
{
	sw_rows rw;
	sw_view view;
	memset(&view, 0, sizeof(view));
	if (sw_reader_rows(r, T, &rw, err, errlen) != 0)
		return -1;
	if (sw_view_build(&rw, &view) != 0) {
		sw_rows_free(&rw);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int64_t *win = malloc(((size_t)T + 1) * sizeof(int64_t));	/* row -> view index or -1 */
	if (!win) {
		sw_rows_free(&rw);
		sw_view_free(&view);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int64_t t = 0; t < T; t++)
		win[t] = -1;
	for (int64_t k = 0; k < view.n; k++)
		win[view.row[k]] = k;
	for (int64_t t = 0; t < shown && t < ts->n; t++) {
		if (ts->said[t] || win[t] >= 0)
			continue;
		int64_t st = rw.step[t];
		uint64_t by;
		int64_t from = INT64_MIN;
		/* the step's row in the view, if any (view.step is ascending) */
		int64_t lo = 0, hi = view.n;
		while (lo < hi) {
			int64_t mid = lo + (hi - lo) / 2;
			if (view.step[mid] < st)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < view.n && view.step[lo] == st) {
			by = rw.inc[view.row[lo]];
			int64_t ri = tail_resume_of(&rw, by);
			if (ri >= 0 && by > rw.inc[t] && st > rw.res_step[ri])
				from = rw.res_step[ri];
		} else {
			/* no row of the step stands: a newer incarnation's resume from
			 * before it (the earliest such resume, as the view takes it) */
			int64_t best = -1;
			for (int64_t i = 0; i < rw.nres; i++)
				if (rw.res_inc[i] > rw.inc[t] && st > rw.res_step[i] &&
				    (best < 0 || rw.res_step[i] < rw.res_step[best]))
					best = i;
			if (best < 0)
				continue;	/* cannot happen: the view says it is superseded */
			by = rw.res_inc[best];
			from = rw.res_step[best];
		}
		ts->said[t] = 1;
		if (from != INT64_MIN)
			printf("# step %lld superseded by incarnation %llu (resume from %lld)\n",
			    (long long)st, (unsigned long long)by, (long long)from);
		else
			printf("# step %lld superseded by incarnation %llu\n", (long long)st,
			    (unsigned long long)by);
	}
	free(win);
	sw_rows_free(&rw);
	sw_view_free(&view);
	return 0;
}

int
sw_tail_main(int argc, char **argv)
{
	const char *path = NULL;
	long interval = 200, once = 0, timeout_s = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--once"))
			once = 1;
		else if (!strcmp(argv[i], "--interval-ms") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &interval) || interval < 1)
				return sw_tool_fail("tail", "--interval-ms: '%s' is not a positive integer", argv[i]);
		} else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &timeout_s) || timeout_s < 0)
				return sw_tool_fail("tail", "--timeout: '%s' is not a number of seconds", argv[i]);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch tail RUN.h5 [--once] [--interval-ms MS] [--timeout S]\n");
			return 0;
		} else if (argv[i][0] == '-')
			return sw_tool_fail("tail", "unknown option '%s'", argv[i]);
		else if (path)
			return sw_tool_fail("tail", "one run file expected");
		else
			path = argv[i];
	}
	if (!path)
		return sw_tool_fail("tail", "missing RUN.h5");
	char err[512];
	sw_reader *r;
	sw_runmeta meta;
	if (sw_reader_open(path, &r, &meta, err, sizeof(err)) != 0)
		return sw_tool_fail("tail", "%s", err);
	size_t LH = (size_t)meta.layers * meta.heads;
	double *buf = malloc(LH * sizeof(double));
	static const char *const cols[] = { "entropy", "sink_mass", "content_entropy",
	    "dH", "dH_sink", "dH_content" };
	enum { NC = sizeof(cols) / sizeof(cols[0]) };
	if (!buf) {
		sw_reader_close(&r);
		return sw_tool_fail("tail", "out of memory");
	}
	signal(SIGINT, on_sigint);
	signal(SIGTERM, on_sigint);
	printf("# run %s, model %s, %u layers x %u heads, split %s\n", meta.run,
	    meta.model[0] ? meta.model : "-", meta.layers, meta.heads, meta.split_form);
	printf("%10s", "step");
	for (int c = 0; c < NC; c++)
		printf(" %15s", cols[c]);
	printf("\n");
	fflush(stdout);
	int64_t shown = 0;
	struct tail_seen seen = { 0, 0, NULL };
	time_t start = time(NULL), checked = start;
	int rc = 0;
	while (!tail_stop) {
		/* the end mark before the rows: seen ended, every row is committed */
		int ended = sw_reader_ended(r) == 1;
		int64_t T = sw_reader_refresh(r, err, sizeof(err));
		if (T < 0) {
			rc = sw_tool_fail("tail", "%s", err);
			break;
		}
		int grew = T > shown;
		if (tail_seen_grow(&seen, T) != 0) {
			rc = sw_tool_fail("tail", "out of memory");
			break;
		}
		for (; shown < T; shown++) {
			double step;
			if (sw_reader_read(r, "step", shown, shown + 1, &step, 1, err, sizeof(err)) < 0) {
				rc = sw_tool_fail("tail", "%s", err);
				goto out;
			}
			printf("%10.0f", step);
			for (int c = 0; c < NC; c++) {
				if (sw_reader_read(r, cols[c], shown, shown + 1, buf, LH, err, sizeof(err)) < 0) {
					rc = sw_tool_fail("tail", "%s", err);
					goto out;
				}
				double v = finite_mean(buf, LH);
				if (isfinite(v))
					printf(" %15.9f", v);
				else
					printf(" %15s", "nan");
			}
			printf("\n");
		}
		/*
		 * Steps shown that the view no longer holds: looked at when rows
		 * were committed, every 2 s (a resume record is written before
		 * its incarnation's first row, but may become visible after it),
		 * and before leaving.
		 */
		int last = once || ended ||
		    (timeout_s && time(NULL) - start >= timeout_s);
		if (shown > 0 && (grew || last || time(NULL) - checked >= 2)) {
			checked = time(NULL);
			if (tail_superseded(r, T, shown, &seen, err, sizeof(err)) != 0) {
				rc = sw_tool_fail("tail", "%s", err);
				break;
			}
		}
		fflush(stdout);
		if (last)
			break;
		struct timespec ts = { interval / 1000, (interval % 1000) * 1000000 };
		nanosleep(&ts, NULL);
	}
out:
	free(buf);
	free(seen.said);
	sw_reader_close(&r);
	return rc;
}

/* ---- report ---------------------------------------------------------------------- */

struct attrib {
	swm_split path, endpoint;
	double path_sink_share, path_content_share, end_sink_share, end_content_share;
	int64_t intervals;
};

static void
shares(struct attrib *a)
{
	swm_split_shares(&a->path, &a->path_sink_share, &a->path_content_share);
	swm_split_shares(&a->endpoint, &a->end_sink_share, &a->end_content_share);
}

static void
json_attrib(sw_json *j, const struct attrib *a)
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

static void
text_attrib(const char *label, const struct attrib *a)
{
	printf("%-8s %12.6f %12.6f %12.6f %8.4f %8.4f | %12.6f %12.6f %12.6f %8.4f %8.4f\n",
	    label, a->path.dH, a->path.sink, a->path.content, a->path_sink_share,
	    a->path_content_share, a->endpoint.dH, a->endpoint.sink, a->endpoint.content,
	    a->end_sink_share, a->end_content_share);
}

/* Reads [T, L*H] of a field into a new array. */
static double *
read_all(sw_reader *r, const char *name, int64_t T, size_t LH, char *err, size_t errlen)
{
	double *v = malloc((size_t)T * LH * sizeof(double) + 1);
	if (!v) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (T > 0 && sw_reader_read(r, name, 0, T, v, (size_t)T * LH, err, errlen) < 0) {
		free(v);
		return NULL;
	}
	return v;
}

static void
json_nums(sw_json *j, const char *key, const double *x, size_t n)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < n; i++)
		sw_json_num(j, NULL, x[i]);
	sw_json_end_arr(j);
}

/*
 * Per view step, per layer (and the model, over all heads): the head means
 * of sink_mass and entropy, and the running sums of the interval parts
 * (§3), an interval without a value counted as 0. What a chart shows, so
 * that no reader computes it again.
 */
static void
json_series(sw_json *j, const sw_runmeta *m, double *const *v, const sw_view *view,
    const double *ivl)
{
	size_t L = m->layers, H = m->heads, LH = L * H, n = (size_t)view->n;
	double *col = malloc((4 * n + 1) * sizeof(double)), *hs = malloc((2 * LH + 1) * sizeof(double));
	if (!col || !hs) {
		free(col);
		free(hs);
		return;
	}
	sw_json_begin_obj(j, "series");
	sw_json_begin_arr(j, "step");
	for (size_t k = 0; k < n; k++)
		sw_json_int(j, NULL, view->step[k]);
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "layers");
	for (size_t l = 0; l <= L; l++) {	/* l == L: the model */
		size_t h0 = l < L ? l * H : 0, nh = l < L ? H : LH;
		memset(hs, 0, 2 * LH * sizeof(double));
		for (size_t k = 0; k < n; k++) {
			size_t t = (size_t)view->row[k];
			col[k] = finite_mean(v[4] + t * LH + h0, nh);
			col[n + k] = finite_mean(v[2] + t * LH + h0, nh);
			double s = 0, c = 0;
			for (size_t i = h0; i < h0 + nh; i++) {
				double a = ivl[(k * LH + i) * 2], b = ivl[(k * LH + i) * 2 + 1];
				hs[2 * i] += isfinite(a) ? a : 0;
				hs[2 * i + 1] += isfinite(b) ? b : 0;
				s += hs[2 * i];
				c += hs[2 * i + 1];
			}
			col[2 * n + k] = s / (double)nh;
			col[3 * n + k] = c / (double)nh;
		}
		sw_json_begin_obj(j, NULL);
		if (l < L)
			sw_json_int(j, "layer", (int64_t)l);
		else
			sw_json_str(j, "layer", "model");
		json_nums(j, "sink_mass", col, n);
		json_nums(j, "entropy", col + n, n);
		json_nums(j, "cum_sink", col + 2 * n, n);
		json_nums(j, "cum_content", col + 3 * n, n);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
	free(col);
	free(hs);
}

/* Head values of stored row t, head i, from the columns read (report order). */
static void
head_at(double *const *v, size_t LH, int64_t t, size_t i, swm_head *h)
{
	size_t k = (size_t)t * LH + i;
	memset(h, 0, sizeof(*h));
	h->rows = (uint64_t)v[7][k];
	h->H = v[2][k];
	h->hb = v[3][k];
	h->s = v[4][k];
	h->w = v[5][k];
	h->Hcw = v[6][k];
}

/*
 * The split of every head between two stored rows: paired from the rows'
 * statistics (§3) where the file has them, else the aggregate form.
 */
static void
split_rows(double *const *v, size_t LH, size_t R, const swm_row *ra, const swm_row *rb,
    int64_t ta, int64_t tb, size_t i, swm_split *out)
{
	if (ra && rb) {
		swm_split_paired(ra + i * R, rb + i * R, R, out);
		return;
	}
	swm_head a, b;
	head_at(v, LH, ta, i, &a);
	head_at(v, LH, tb, i, &b);
	swm_split_aggregate(&a, &b, out);
}

/*
 * Path sums over consecutive steps of the view and the endpoint split of
 * its first and last step, per head: a function of the stored steps in step
 * order, whatever order their rows arrived in.
 */
static int
attribute(sw_reader *r, const sw_runmeta *m, double *const *v, const sw_view *view,
    int paired, struct attrib *head, double *ivl, char *err, size_t errlen)
{
	size_t LH = (size_t)m->layers * m->heads, R = paired ? m->rows : 0, n = LH * R;
	swm_row *first = NULL, *prev = NULL, *cur = NULL;
	int rc = -1;

	if (paired && (!(first = malloc(n * sizeof(*first))) ||
	    !(prev = malloc(n * sizeof(*prev))) || !(cur = malloc(n * sizeof(*cur))))) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (paired && sw_reader_row_stats(r, view->row[0], first, n, err, errlen) != 0)
		goto out;
	if (paired)
		memcpy(prev, first, n * sizeof(*prev));
	for (int64_t k = 1; k < view->n; k++) {
		if (paired && sw_reader_row_stats(r, view->row[k], cur, n, err, errlen) != 0)
			goto out;
		for (size_t i = 0; i < LH; i++) {
			swm_split sp;
			split_rows(v, LH, R, prev, cur, view->row[k - 1], view->row[k], i, &sp);
			if (ivl) {	/* the interval into step k, for the series */
				ivl[((size_t)k * LH + i) * 2] = sp.sink;
				ivl[((size_t)k * LH + i) * 2 + 1] = sp.content;
			}
			if (!isfinite(sp.dH) || !isfinite(sp.sink) || !isfinite(sp.content))
				continue;
			swm_split_add(&head[i].path, &sp);
			head[i].intervals++;
		}
		swm_row *t = prev;
		prev = cur;
		cur = t;
	}
	for (size_t i = 0; i < LH; i++)
		split_rows(v, LH, R, first, prev, view->row[0], view->row[view->n - 1], i,
		    &head[i].endpoint);
	rc = 0;
out:
	free(first);
	free(prev);
	free(cur);
	return rc;
}

/*
 * The file's sender table (PROTOCOL.md 7b): every sender's counters, and
 * the ranks that never sent their end, named (in JSON, or as text lines).
 * A table that cannot be read is said, never taken for an empty one.
 */
static void
report_senders(sw_reader *r, sw_json *j)
{
	uint64_t *t = NULL;
	char err[512];
	int64_t n = sw_reader_senders(r, &t, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "sinkwatch report: %s\n", err);
		if (j)
			sw_json_str(j, "senders_error", err);
		return;
	}
	int64_t open = 0, several = 0, dis = 0, miss = 0;
	for (int64_t k = 0; k < n; k++) {
		const uint64_t *v = t + k * SW_SENDER_FIELDS;
		open += !v[SW_S_ENDED];
		several += v[SW_S_SENDERS] > 1;
		dis += (int64_t)v[SW_S_DISAGREE];
		miss += (int64_t)v[SW_S_MISSING];
	}
	if (j) {
		sw_json_begin_arr(j, "senders");
		for (int64_t k = 0; k < n; k++) {
			const uint64_t *v = t + k * SW_SENDER_FIELDS;
			sw_json_begin_obj(j, NULL);
			for (int f = 0; f < SW_SENDER_FIELDS; f++)
				if (f == SW_S_INC)
					sw_json_uint(j, sw_sender_field_names[f], v[f]);
				else
					sw_json_int(j, sw_sender_field_names[f], (int64_t)v[f]);
			sw_json_end_obj(j);
		}
		sw_json_end_arr(j);
		sw_json_begin_arr(j, "ranks_not_ended");
		for (int64_t k = 0; k < n; k++) {
			const uint64_t *v = t + k * SW_SENDER_FIELDS;
			if (!v[SW_S_ENDED] && v[SW_S_SENDERS] > 1) {
				sw_json_begin_obj(j, NULL);
				sw_json_uint(j, "inc", v[SW_S_INC]);
				sw_json_int(j, "rank", (int64_t)v[SW_S_RANK]);
				sw_json_end_obj(j);
			}
		}
		sw_json_end_arr(j);
	} else if (several) {
		printf("senders %lld", (long long)n);
		if (dis)
			printf("  copies that disagree %lld", (long long)dis);
		if (miss)
			printf("  heads missing %lld", (long long)miss);
		printf("\n");
		for (int64_t k = 0; k < n; k++) {
			const uint64_t *v = t + k * SW_SENDER_FIELDS;
			if (v[SW_S_ENDED] || v[SW_S_SENDERS] <= 1)
				continue;
			printf("rank %llu of %llu (incarnation %llu) never sent its end: the run "
			    "is incomplete\n", (unsigned long long)v[SW_S_RANK],
			    (unsigned long long)v[SW_S_SENDERS], (unsigned long long)v[SW_S_INC]);
		}
	}
	(void)open;
	free(t);
}

int
sw_report_main(int argc, char **argv)
{
	const char *path = NULL;
	int json = 0, series = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--series")) {
			series = 1;
		} else if (!strcmp(argv[i], "--format") && i + 1 < argc) {
			const char *f = argv[++i];
			if (!strcmp(f, "json"))
				json = 1;
			else if (strcmp(f, "text"))
				return sw_tool_fail("report", "--format: '%s' is not text or json", f);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch report RUN.h5 [--format text|json] [--series]\n");
			return 0;
		} else if (argv[i][0] == '-')
			return sw_tool_fail("report", "unknown option '%s'", argv[i]);
		else if (path)
			return sw_tool_fail("report", "one run file expected");
		else
			path = argv[i];
	}
	if (!path)
		return sw_tool_fail("report", "missing RUN.h5");
	if (series && !json)
		return sw_tool_fail("report", "--series needs --format json");
	char err[512];
	sw_reader *r;
	sw_runmeta meta;
	if (sw_reader_open(path, &r, &meta, err, sizeof(err)) != 0)
		return sw_tool_fail("report", "%s", err);
	int64_t T = sw_reader_refresh(r, err, sizeof(err));
	if (T < 0) {
		sw_reader_close(&r);
		return sw_tool_fail("report", "%s", err);
	}
	if (T < (series ? 1 : 2)) {
		sw_reader_close(&r);
		return sw_tool_fail("report", "%s has %lld stored step(s): an attribution needs two",
		    path, (long long)T);
	}
	size_t L = meta.layers, H = meta.heads, LH = L * H;
	const char *names[] = { "lost", "incomplete", "entropy", "sink_entropy",
	    "sink_mass", "content_mass", "content_entropy_mw", "rows", "step" };
	double *v[9] = { 0 };
	int rc = 2;
	sw_rows rws;
	sw_view view;
	memset(&rws, 0, sizeof(rws));
	memset(&view, 0, sizeof(view));
	for (int i = 0; i < 9; i++)
		if (!(v[i] = read_all(r, names[i], T, i < 2 || i == 8 ? 1 : LH, err, sizeof(err)))) {
			sw_tool_fail("report", "%s: %s", path, err);
			goto out;
		}
	if (sw_reader_rows(r, T, &rws, err, sizeof(err)) != 0 || sw_view_build(&rws, &view) != 0) {
		sw_tool_fail("report", "%s: %s", path, err);
		goto out;
	}
	if (view.n < (series ? 1 : 2)) {
		sw_tool_fail("report", "%s has %lld stored step(s) (%lld rows): an attribution "
		    "needs two", path, (long long)view.n, (long long)T);
		goto out;
	}
	/* the paired form where the file has each row's statistics (§3) */
	int paired = meta.row_stats;
	struct attrib *head = calloc(LH, sizeof(*head)), *layer = calloc(L, sizeof(*layer)), model;
	memset(&model, 0, sizeof(model));
	double *ivl = NULL;
	if (series && view.n > 0 && !(ivl = malloc((size_t)view.n * LH * 2 * sizeof(double)))) {
		sw_tool_fail("report", "out of memory");
		goto out;
	}
	for (size_t i = 0; ivl && i < (size_t)view.n * LH * 2; i++)
		ivl[i] = NAN;
	if (!head || !layer || attribute(r, &meta, v, &view, paired, head, ivl, err,
	    sizeof(err)) != 0) {
		free(ivl);
		free(head);
		free(layer);
		sw_tool_fail("report", "%s: %s", path, head && layer ? err : "out of memory");
		goto out;
	}
	/* layer and model figures are means of head figures (§3) */
	for (size_t l = 0; l <= L; l++) {
		struct attrib *dst = l < L ? &layer[l] : &model;
		size_t h0 = l < L ? l * H : 0, n = l < L ? H : LH;
		double acc[6] = { 0 };
		size_t cnt[2] = { 0, 0 };
		for (size_t i = h0; i < h0 + n; i++) {
			if (head[i].intervals > 0) {
				acc[0] += head[i].path.dH;
				acc[1] += head[i].path.sink;
				acc[2] += head[i].path.content;
				cnt[0]++;
				dst->intervals += head[i].intervals;
			}
			if (isfinite(head[i].endpoint.dH)) {
				acc[3] += head[i].endpoint.dH;
				acc[4] += head[i].endpoint.sink;
				acc[5] += head[i].endpoint.content;
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
	double first_step = (double)view.step[0], last_step = (double)view.step[view.n - 1];
	const char *form = paired ? "paired" : "aggregate";
	if (json) {
		sw_json j;
		sw_json_init(&j, stdout);
		sw_json_begin_obj(&j, NULL);
		sw_json_int(&j, "schema", 1);
		sw_json_str(&j, "file", path);
		sw_json_str(&j, "run", meta.run);
		sw_json_str(&j, "model", meta.model);
		sw_json_int(&j, "params", (int64_t)meta.params);
		sw_json_int(&j, "layers", (int64_t)L);
		sw_json_int(&j, "heads", (int64_t)H);
		sw_json_str(&j, "split_form", form);
		sw_json_str(&j, "endpoint_form", form);
		sw_json_int(&j, "layout_version", meta.version);
		sw_json_bool(&j, "step_order", 1);
		sw_json_int(&j, "steps_stored", view.n);
		sw_json_int(&j, "steps_used", view.n);
		sw_json_int(&j, "rows_stored", T);
		sw_json_int(&j, "rows_superseded", view.superseded);
		sw_json_int(&j, "lost", (int64_t)v[0][T - 1]);
		sw_json_int(&j, "incomplete", (int64_t)v[1][T - 1]);
		sw_json_begin_arr(&j, "segments");
		for (int64_t k = 0; k < view.nseg; k++) {
			sw_json_begin_obj(&j, NULL);
			sw_json_uint(&j, "inc", view.seg[k].inc);
			sw_json_int(&j, "first_step", view.seg[k].first_step);
			sw_json_int(&j, "last_step", view.seg[k].last_step);
			sw_json_int(&j, "steps", view.seg[k].steps);
			sw_json_end_obj(&j);
		}
		sw_json_end_arr(&j);
		report_senders(r, &j);
		sw_json_num(&j, "first_step", first_step);
		sw_json_num(&j, "last_step", last_step);
		sw_json_begin_obj(&j, "model_attribution");
		json_attrib(&j, &model);
		sw_json_end_obj(&j);
		sw_json_begin_arr(&j, "layer_attribution");
		for (size_t l = 0; l < L; l++) {
			sw_json_begin_obj(&j, NULL);
			sw_json_int(&j, "layer", (int64_t)l);
			json_attrib(&j, &layer[l]);
			sw_json_end_obj(&j);
		}
		sw_json_end_arr(&j);
		if (series)
			json_series(&j, &meta, v, &view, ivl);
		sw_json_end_obj(&j);
		sw_json_finish(&j);
	} else {
		printf("run %s  model %s  %zu layers x %zu heads  %lld steps stored (%.0f .. %.0f)  "
		    "split %s\n", meta.run, meta.model[0] ? meta.model : "-", L, H,
		    (long long)view.n, first_step, last_step, form);
		printf("rows %lld (%lld superseded)  lost %lld  incomplete %lld  steps in step order\n",
		    (long long)T, (long long)view.superseded, (long long)v[0][T - 1],
		    (long long)v[1][T - 1]);
		if (view.nseg > 1 || view.superseded)
			for (int64_t k = 0; k < view.nseg; k++)
				printf("segment %lld: incarnation %llu, steps %lld .. %lld (%lld)\n",
				    (long long)k, (unsigned long long)view.seg[k].inc,
				    (long long)view.seg[k].first_step, (long long)view.seg[k].last_step,
				    (long long)view.seg[k].steps);
		report_senders(r, NULL);
		printf("\n");
		printf("entropy change attributed to sink growth and content sharpening (nats)\n");
		printf("%-8s %12s %12s %12s %8s %8s | %12s %12s %12s %8s %8s\n", "", "path dH",
		    "sink", "content", "sink_sh", "cont_sh", "endpoint dH", "sink", "content",
		    "sink_sh", "cont_sh");
		for (size_t l = 0; l < L; l++) {
			char label[32];
			snprintf(label, sizeof(label), "layer %zu", l);
			text_attrib(label, &layer[l]);
		}
		text_attrib("model", &model);
		printf("\nshares are parts / dH, shown only where dH < 0 (a drop); "
		    "they may fall outside [0, 1] when the parts have opposite signs\n");
	}
	rc = 0;
	free(head);
	free(layer);
	free(ivl);
out:
	for (int i = 0; i < 9; i++)
		free(v[i]);
	sw_rows_free(&rws);
	sw_view_free(&view);
	sw_reader_close(&r);
	return rc;
}

/* ---- status ------------------------------------------------------------------------ */

int
sw_status_main(int argc, char **argv)
{
	const char *ep = "tcp://127.0.0.1:5711", *section = NULL;
	long timeout_ms = 2000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--control") && i + 1 < argc)
			ep = argv[++i];
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &timeout_ms) || timeout_ms < 1)
				return sw_tool_fail("status", "--timeout-ms: '%s' is not a positive integer", argv[i]);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch status [--control ENDPOINT] [--timeout-ms MS] [SECTION]\n");
			return 0;
		} else if (argv[i][0] == '-')
			return sw_tool_fail("status", "unknown option '%s'", argv[i]);
		else
			section = argv[i];
	}
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
	int zero = 0, to = (int)timeout_ms;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof(to));
	zmq_setsockopt(s, ZMQ_SNDTIMEO, &to, sizeof(to));
	int rc = 0;
	char req[128];
	snprintf(req, sizeof(req), "status%s%s", section ? " " : "", section ? section : "");
	if (zmq_connect(s, ep) != 0) {
		rc = sw_tool_fail("status", "cannot connect to %s: %s", ep, zmq_strerror(zmq_errno()));
		goto out;
	}
	if (zmq_send(s, req, strlen(req), 0) < 0) {
		rc = sw_tool_fail("status", "sending to %s: %s", ep, zmq_strerror(zmq_errno()));
		goto out;
	}
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, 0) < 0) {
		zmq_msg_close(&m);
		rc = sw_tool_fail("status", "no answer from %s within %ld ms (is sinkwatchd running?)",
		    ep, timeout_ms);
		goto out;
	}
	fwrite(zmq_msg_data(&m), 1, zmq_msg_size(&m), stdout);
	if (zmq_msg_size(&m) >= 6 && !memcmp(zmq_msg_data(&m), "error:", 6))
		rc = 2;
	zmq_msg_close(&m);
out:
	zmq_close(s);
	zmq_ctx_term(ctx);
	return rc;
}
