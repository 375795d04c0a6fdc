/*
 * runtools.c: `sinkwatch tail`, `sinkwatch report` and `sinkwatch status`:
 * reading run files (with SWMR, while the daemon writes them) and asking
 * the daemon's control endpoint.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <zmq.h>

#include "metrics/swm.h"
#include "net/swnet.h"
#include "storage/runfile.h"
#include "tools/analyze.h"
#include "proto/swproto.h"
#include "tools/json.h"
#include "tools/runagg.h"
#include "tools/tools.h"

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
	char trun[SW_TEXT_SAFE(SWP_RUN_MAX)], tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)];
	printf("# run %s, model %s, %u layers x %u heads, split %s\n",
	    sw_text_safe(meta.run, trun, sizeof(trun)),
	    meta.model[0] ? sw_text_safe(meta.model, tmodel, sizeof(tmodel)) : "-", meta.layers,
	    meta.heads, meta.split_form);
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

/*
 * `sinkwatch report`: every number comes from the run aggregation
 * (tools/runagg.h); this part chooses the runs and the range and formats
 * what it gets as text, JSON or CSV.
 */

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
	size_t nf = 0;
	int64_t n = sw_reader_senders(r, &t, &nf, err, sizeof(err));
	if (n < 0) {
		fprintf(stderr, "sinkwatch report: %s\n", err);
		if (j)
			sw_json_str(j, "senders_error", err);
		return;
	}
	/* every rank of a several-sender incarnation, against the table's
	 * senders: a rank that never sent has no row */
	sw_open_rank *open = NULL;
	int64_t nopen = sw_ranks_not_ended(t, n, &open);
	if (nopen < 0) {
		fprintf(stderr, "sinkwatch report: out of memory\n");
		if (j)
			sw_json_str(j, "senders_error", "out of memory");
		free(t);
		return;
	}
	int64_t several = 0, dis = 0, miss = 0;
	for (int64_t k = 0; k < n; k++) {
		const uint64_t *v = t + k * SW_SENDER_FIELDS;
		several += v[SW_S_SENDERS] > 1;
		dis += (int64_t)v[SW_S_DISAGREE];
		miss += (int64_t)v[SW_S_MISSING];
	}
	if (j) {
		sw_json_begin_arr(j, "senders");
		for (int64_t k = 0; k < n; k++) {
			const uint64_t *v = t + k * SW_SENDER_FIELDS;
			sw_json_begin_obj(j, NULL);
			for (int f = 0; f < (int)nf; f++)	/* the fields the file has */
				if (f == SW_S_INC)
					sw_json_uint(j, sw_sender_field_names[f], v[f]);
				else
					sw_json_int(j, sw_sender_field_names[f], (int64_t)v[f]);
			sw_json_end_obj(j);
		}
		sw_json_end_arr(j);
		sw_json_begin_arr(j, "ranks_not_ended");
		for (int64_t k = 0; k < nopen; k++) {
			sw_json_begin_obj(j, NULL);
			sw_json_uint(j, "inc", open[k].inc);
			sw_json_int(j, "rank", open[k].rank);
			sw_json_int(j, "senders", open[k].senders);
			sw_json_bool(j, "sent", open[k].sent);
			sw_json_end_obj(j);
		}
		sw_json_end_arr(j);
	} else if (several) {
		printf("senders %lld", (long long)n);
		if (dis)
			printf("  copies that disagree %lld", (long long)dis);
		if (miss)
			printf("  heads missing %lld", (long long)miss);
		printf("\n");
		for (int64_t k = 0; k < nopen; k++)
			printf("rank %u of %u (incarnation %llu) never sent %s: the run is "
			    "incomplete\n", open[k].rank, open[k].senders,
			    (unsigned long long)open[k].inc, open[k].sent ? "its end" : "anything");
	}
	free(open);
	free(t);
}

enum rep_fmt { FMT_TEXT, FMT_JSON, FMT_CSV };

struct rep_opts {
	enum rep_fmt fmt;
	int series, per_layer, per_head;
	double eps;
	sw_range_req range;
};

/* The classification and ranking rules, as sinkwatch(1) states them. */
#define CLASS_RULE "on the path split, eps in nats: stable |dH| < eps; rise dH >= eps; " \
	"sink dH <= -eps, sink part <= -eps and content part > -eps; content dH <= -eps, " \
	"content part <= -eps and sink part > -eps; both any other drop (both parts " \
	"negative); none no interval with a value"
#define RANK_RULE "at the last step of the range, over the heads with a value there: " \
	"rank 1 the lowest, ties their mean rank; rank_entropy by whole-row entropy, " \
	"rank_content by content entropy (the sink dropped); rho is Spearman's"
#define SPREAD "sample standard deviation (n - 1) over the runs of the group"

/* What a report shows of one run; the run file itself is closed. */
struct rep_run {
	char *file;
	sw_runmeta meta;	/* its string pointers cleared: kind, form below */
	char kind[16];
	int64_t steps_stored, rows, superseded, lost, incomplete;
	int have_agg, have_rank;
	sw_agg agg;
	sw_ranking rank;
	dev_t dev;		/* the file, to see it named twice */
	ino_t ino;
	char reason[768];	/* why it is not compared; "" when it is */
};

static void
rep_run_free(struct rep_run *e)
{
	free(e->file);
	if (e->have_agg)
		sw_agg_free(&e->agg);
	if (e->have_rank)
		sw_ranking_free(&e->rank);
	memset(e, 0, sizeof(*e));
}

static void
rep_take_meta(struct rep_run *e, const sw_run *run)
{
	e->meta = run->meta;
	snprintf(e->kind, sizeof(e->kind), "%s", run->meta.kind ? run->meta.kind : "");
	e->meta.kind = e->meta.split_form = e->meta.dtype = NULL;
	e->steps_stored = run->view.n;
	e->rows = run->T;
	e->superseded = run->view.superseded;
	e->lost = run->lost;
	e->incomplete = run->incomplete;
}

/* The range's figures of an open run; -1 with the reason in e. */
static int
rep_compute(struct rep_run *e, sw_run *run, const struct rep_opts *o, const sw_range *rg)
{
	char err[512];
	if (sw_agg_compute(run, rg, o->series, &e->agg, err, sizeof(err)) != 0) {
		snprintf(e->reason, sizeof(e->reason), "%s", err);
		return -1;
	}
	e->have_agg = 1;
	if (o->per_head) {
		if (sw_agg_rank(&e->agg, &e->rank) != 0) {
			snprintf(e->reason, sizeof(e->reason), "out of memory");
			return -1;
		}
		e->have_rank = 1;
	}
	return 0;
}

/* ---- report: JSON ---- */


/* An integer, or null when not set. */
static void
json_opt_int(sw_json *j, const char *key, int set, int64_t v)
{
	if (set)
		sw_json_int(j, key, v);
	else
		sw_json_num(j, key, NAN);
}

/* The range asked for (null where not asked). */
static void
json_range(sw_json *j, const struct rep_opts *o)
{
	sw_json_begin_obj(j, "range");
	json_opt_int(j, "from", o->range.has_from, o->range.from);
	json_opt_int(j, "to", o->range.has_to, o->range.to);
	json_opt_int(j, "last", o->range.last > 0, o->range.last);
	sw_json_end_obj(j);
}

/* The range's incomplete steps and the intervals they touch. */
static void
json_gaps(sw_json *j, const sw_agg *a)
{
	sw_json_int(j, "intervals", a->intervals);
	sw_json_int(j, "intervals_incomplete", a->intervals_incomplete);
	sw_json_int(j, "steps_incomplete", a->ngaps);
	sw_json_begin_arr(j, "incomplete_steps");
	for (int64_t g = 0; g < a->ngaps; g++) {
		const sw_step_gap *s = &a->gaps[g];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "step", s->step);
		sw_json_begin_arr(j, "layers_missing");
		for (int64_t l = 0; l < s->layers_missing; l++)
			sw_json_int(j, NULL, s->layers[l]);
		sw_json_end_arr(j);
		sw_json_int(j, "heads_missing", s->heads_missing);
		sw_json_int(j, "heads_without_rows", s->heads_without_rows);
		sw_json_begin_arr(j, "ranks");
		for (int r = 0; r < s->nranks; r++)
			sw_json_int(j, NULL, s->ranks[r]);
		sw_json_end_arr(j);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "incomplete_intervals");
	for (int64_t i = 1; i < a->steps; i++) {
		if (!sw_agg_interval_incomplete(a, i))
			continue;
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "from_step", a->step[i - 1]);
		sw_json_int(j, "to_step", a->step[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

static void
json_layers(sw_json *j, const sw_agg *a)
{
	sw_json_begin_arr(j, "layer_attribution");
	for (size_t l = 0; l < a->L; l++) {
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)l);
		sw_json_attrib(j, &a->layer[l]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

/* Per head: values at both ends, the splits, the class and the ranks. */
static void
json_heads(sw_json *j, const sw_agg *a, const sw_ranking *rk, double eps)
{
	sw_json_begin_obj(j, "classification");
	sw_json_num(j, "eps", eps);
	sw_json_str(j, "rule", CLASS_RULE);
	sw_json_end_obj(j);
	sw_json_begin_arr(j, "per_head");
	for (size_t i = 0; i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *l = &a->last[i];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)(i / a->H));
		sw_json_int(j, "head", (int64_t)(i % a->H));
		sw_json_int(j, "rows_first", f->rows);
		sw_json_int(j, "rows_last", l->rows);
		sw_json_num(j, "sink_mass_first", f->s);
		sw_json_num(j, "sink_mass_last", l->s);
		sw_json_num(j, "entropy_first", f->H);
		sw_json_num(j, "entropy_last", l->H);
		sw_json_num(j, "content_entropy_first", f->Hc);
		sw_json_num(j, "content_entropy_last", l->Hc);
		sw_json_attrib(j, &a->head[i]);
		sw_json_str(j, "class", sw_head_class_name(sw_head_classify(&a->head[i], eps)));
		sw_json_num(j, "rank_entropy", rk->rank_entropy[i]);
		sw_json_num(j, "rank_content", rk->rank_content[i]);
		sw_json_num(j, "rank_shift", rk->rank_content[i] - rk->rank_entropy[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_begin_obj(j, "ranking");
	sw_json_int(j, "step", a->last_step);
	sw_json_str(j, "rule", RANK_RULE);
	sw_json_int(j, "ranked", (int64_t)rk->ranked);
	sw_json_num(j, "spearman_rho", rk->rho);
	sw_json_begin_arr(j, "most_moved");
	for (size_t k = 0; k < rk->nmoved; k++) {
		size_t i = rk->moved[k];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)(i / a->H));
		sw_json_int(j, "head", (int64_t)(i % a->H));
		sw_json_num(j, "rank_entropy", rk->rank_entropy[i]);
		sw_json_num(j, "rank_content", rk->rank_content[i]);
		sw_json_num(j, "rank_shift", rk->rank_content[i] - rk->rank_entropy[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
}

/* The dashboard's series (sw_agg_series): per layer and the model. */
static void
json_series(sw_json *j, const sw_series *s)
{
	size_t n = s->n;
	sw_json_begin_obj(j, "series");
	sw_json_begin_arr(j, "step");
	for (size_t k = 0; k < n; k++)
		sw_json_int(j, NULL, s->step[k]);
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "layers");
	for (size_t l = 0; l <= s->layers; l++) {	/* l == layers: the model */
		sw_json_begin_obj(j, NULL);
		if (l < s->layers)
			sw_json_int(j, "layer", (int64_t)l);
		else
			sw_json_str(j, "layer", "model");
		sw_json_series_layer(j, s, l, n);	/* what /api/series has too */
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
}

/* The keys every run of a JSON report has, in one file's report or a table. */
static void
json_run_common(sw_json *j, const struct rep_run *e)
{
	const sw_agg *a = &e->agg;
	sw_json_str(j, "file", e->file);
	sw_json_str(j, "run", e->meta.run);
	sw_json_str(j, "model", e->meta.model);
	sw_json_int(j, "params", (int64_t)e->meta.params);
	sw_json_int(j, "layers", (int64_t)e->meta.layers);
	sw_json_int(j, "heads", (int64_t)e->meta.heads);
	sw_json_str(j, "kind", e->kind);
	sw_json_int(j, "keys", (int64_t)e->meta.keys);
	sw_json_bool(j, "fixed_probe", e->meta.fixed_probe);
	sw_json_str(j, "split_form", a->form);
	sw_json_str(j, "endpoint_form", a->form);
	sw_json_int(j, "steps_stored", e->steps_stored);
	sw_json_int(j, "steps_used", a->steps);
	sw_json_int(j, "first_step", a->first_step);	/* steps are integers: exact */
	sw_json_int(j, "last_step", a->last_step);
	sw_json_int(j, "lost", e->lost);
	sw_json_int(j, "incomplete", e->incomplete);
	json_gaps(j, a);
	sw_json_begin_obj(j, "model_attribution");
	sw_json_attrib(j, &a->model);
	sw_json_end_obj(j);
}

/* ---- report: CSV ---- */

/* The CSV columns, in order (sinkwatch(1) documents each). */
#define CSV_COLS(X) X(scope) X(file) X(run) X(model) X(params) X(layers) X(heads) \
	X(layer) X(head) X(first_step) X(last_step) X(steps_used) X(intervals) \
	X(intervals_incomplete) X(intervals_valued) X(form) \
	X(path_dH) X(path_sink) X(path_content) X(path_sink_share) X(path_content_share) \
	X(endpoint_dH) X(endpoint_sink) X(endpoint_content) X(endpoint_sink_share) \
	X(endpoint_content_share) X(lost) X(incomplete) \
	X(sink_mass_first) X(sink_mass_last) X(entropy_first) X(entropy_last) \
	X(content_entropy_first) X(content_entropy_last) X(class) X(rank_entropy) \
	X(rank_content) X(runs) \
	X(sd_path_dH) X(sd_path_sink) X(sd_path_content) X(sd_path_sink_share) \
	X(sd_path_content_share) X(sd_endpoint_dH) X(sd_endpoint_sink) \
	X(sd_endpoint_content) X(sd_endpoint_sink_share) X(sd_endpoint_content_share) \
	X(reason)
enum {
#define X(n) C_##n,
	CSV_COLS(X)
#undef X
	C__N
};
static const char *const csv_names[C__N] = {
#define X(n) #n,
	CSV_COLS(X)
#undef X
};

/* One CSV line: cells that do not apply stay empty. */
struct csv_line {
	char *cell[C__N];
};

static void
csv_set(struct csv_line *c, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
csv_set(struct csv_line *c, int col, const char *fmt, ...)
{
	va_list ap, aq;
	va_start(ap, fmt);
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s)
		vsnprintf(s, (size_t)n + 1, fmt, aq);
	va_end(aq);
	va_end(ap);
	free(c->cell[col]);
	c->cell[col] = s;	/* NULL (an empty cell) only out of memory */
}

/* A number: %.17g (round-trips), "nan" for NaN. */
static void
csv_num(struct csv_line *c, int col, double v)
{
	if (isnan(v))
		csv_set(c, col, "nan");
	else
		csv_set(c, col, "%.17g", v);
}

static void
csv_put(FILE *f, const char *s)
{
	if (!s || !strpbrk(s, ",\"\r\n")) {
		fputs(s ? s : "", f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Writes the line and empties it. */
static void
csv_emit(struct csv_line *c)
{
	for (int k = 0; k < C__N; k++) {
		if (k)
			putchar(',');
		csv_put(stdout, c->cell[k]);
		free(c->cell[k]);
		c->cell[k] = NULL;
	}
	putchar('\n');
}

static void
csv_header(void)
{
	for (int k = 0; k < C__N; k++)
		printf("%s%s", k ? "," : "", csv_names[k]);
	putchar('\n');
}

static void
csv_attrib(struct csv_line *c, const sw_attrib *a)
{
	csv_set(c, C_intervals_valued, "%lld", (long long)a->intervals);
	csv_num(c, C_path_dH, a->path.dH);
	csv_num(c, C_path_sink, a->path.sink);
	csv_num(c, C_path_content, a->path.content);
	csv_num(c, C_path_sink_share, a->path_sink_share);
	csv_num(c, C_path_content_share, a->path_content_share);
	csv_num(c, C_endpoint_dH, a->endpoint.dH);
	csv_num(c, C_endpoint_sink, a->endpoint.sink);
	csv_num(c, C_endpoint_content, a->endpoint.content);
	csv_num(c, C_endpoint_sink_share, a->end_sink_share);
	csv_num(c, C_endpoint_content_share, a->end_content_share);
}

/* The cells naming a run (file, run, model, params, shape). */
static void
csv_ident(struct csv_line *c, const char *scope, const struct rep_run *e)
{
	csv_set(c, C_scope, "%s", scope);
	csv_set(c, C_file, "%s", e->file);
	if (!e->meta.layers)
		return;		/* never opened */
	csv_set(c, C_run, "%s", e->meta.run);
	csv_set(c, C_model, "%s", e->meta.model);
	csv_set(c, C_params, "%llu", (unsigned long long)e->meta.params);
	csv_set(c, C_layers, "%u", e->meta.layers);
	csv_set(c, C_heads, "%u", e->meta.heads);
}

/* A compared run: its line, its layers (all, or none), its heads. */
static void
csv_run(const struct rep_run *e, int layers, int heads, double eps)
{
	const sw_agg *a = &e->agg;
	struct csv_line c = { { 0 } };
	csv_ident(&c, "run", e);
	csv_set(&c, C_first_step, "%lld", (long long)a->first_step);
	csv_set(&c, C_last_step, "%lld", (long long)a->last_step);
	csv_set(&c, C_steps_used, "%lld", (long long)a->steps);
	csv_set(&c, C_intervals, "%lld", (long long)a->intervals);
	csv_set(&c, C_intervals_incomplete, "%lld", (long long)a->intervals_incomplete);
	csv_set(&c, C_form, "%s", a->form);
	csv_attrib(&c, &a->model);
	csv_set(&c, C_lost, "%lld", (long long)e->lost);
	csv_set(&c, C_incomplete, "%lld", (long long)e->incomplete);
	csv_emit(&c);
	for (size_t l = 0; layers && l < a->L; l++) {
		csv_ident(&c, "layer", e);
		csv_set(&c, C_layer, "%zu", l);
		csv_set(&c, C_form, "%s", a->form);
		csv_attrib(&c, &a->layer[l]);
		csv_emit(&c);
	}
	for (size_t i = 0; heads && i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *la = &a->last[i];
		csv_ident(&c, "head", e);
		csv_set(&c, C_layer, "%zu", i / a->H);
		csv_set(&c, C_head, "%zu", i % a->H);
		csv_set(&c, C_form, "%s", a->form);
		csv_attrib(&c, &a->head[i]);
		csv_num(&c, C_sink_mass_first, f->s);
		csv_num(&c, C_sink_mass_last, la->s);
		csv_num(&c, C_entropy_first, f->H);
		csv_num(&c, C_entropy_last, la->H);
		csv_num(&c, C_content_entropy_first, f->Hc);
		csv_num(&c, C_content_entropy_last, la->Hc);
		csv_set(&c, C_class, "%s", sw_head_class_name(sw_head_classify(&a->head[i], eps)));
		csv_num(&c, C_rank_entropy, e->rank.rank_entropy[i]);
		csv_num(&c, C_rank_content, e->rank.rank_content[i]);
		csv_emit(&c);
	}
}

/* ---- report: text ---- */

static void
text_attrib(const char *label, const sw_attrib *a)
{
	printf("%-8s %12.6f %12.6f %12.6f %8.4f %8.4f | %12.6f %12.6f %12.6f %8.4f %8.4f\n",
	    label, a->path.dH, a->path.sink, a->path.content, a->path_sink_share,
	    a->path_content_share, a->endpoint.dH, a->endpoint.sink, a->endpoint.content,
	    a->end_sink_share, a->end_content_share);
}

/* "2 of 7 intervals incomplete: steps 20-40, 60-70 (step 30: ...; ...)" */
static void
text_gaps(const char *indent, const sw_agg *a)
{
	if (a->ngaps == 0)
		return;
	printf("%s%lld of %lld intervals incomplete", indent, (long long)a->intervals_incomplete,
	    (long long)a->intervals);
	const char *sep = ": steps ";
	for (int64_t i = 1; i < a->steps; i++) {
		if (!sw_agg_interval_incomplete(a, i))
			continue;
		int64_t e = i;	/* a span of adjacent incomplete intervals */
		while (e + 1 < a->steps && sw_agg_interval_incomplete(a, e + 1))
			e++;
		printf("%s%lld-%lld", sep, (long long)a->step[i - 1], (long long)a->step[e]);
		sep = ", ";
		i = e;
	}
	printf("\n%s%lld incomplete step%s in the range:", indent, (long long)a->ngaps,
	    a->ngaps == 1 ? "" : "s");
	for (int64_t g = 0; g < a->ngaps; g++) {
		const sw_step_gap *s = &a->gaps[g];
		printf("%s step %lld (", g ? ";" : "", (long long)s->step);
		const char *sp = "";
		if (s->layers_missing) {
			printf("layer%s", s->layers_missing == 1 ? "" : "s");
			for (int64_t l = 0; l < s->layers_missing; l++)
				printf("%s%d", l ? "," : " ", s->layers[l]);
			printf(" missing");
			sp = ", ";
		}
		if (s->heads_missing) {
			printf("%s%lld head%s missing", sp, (long long)s->heads_missing,
			    s->heads_missing == 1 ? "" : "s");
			for (int r = 0; r < s->nranks; r++)
				printf("%s%d", r ? "," : " from rank ", s->ranks[r]);
			sp = ", ";
		}
		if (s->heads_without_rows > s->heads_missing)
			printf("%s%lld head%s without a valid row", sp,
			    (long long)(s->heads_without_rows - s->heads_missing),
			    s->heads_without_rows - s->heads_missing == 1 ? "" : "s");
		printf(")");
	}
	printf("\n");
}

static void
text_heads(const sw_agg *a, const sw_ranking *rk, double eps)
{
	printf("\nper head, path split over steps %lld .. %lld; class with eps %g nats "
	    "(sinkwatch(1)): sink = collapse by sink growth, content = sharpening of "
	    "content, both, stable, rise\n", (long long)a->first_step, (long long)a->last_step,
	    eps);
	printf("%5s %4s %8s %8s %9s %9s %9s %9s %11s %11s %11s %-8s %6s %6s\n", "layer", "head",
	    "s first", "s last", "H first", "H last", "Hc first", "Hc last", "dH", "sink",
	    "content", "class", "rk H", "rk Hc");
	for (size_t i = 0; i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *l = &a->last[i];
		const sw_attrib *h = &a->head[i];
		printf("%5zu %4zu %8.4f %8.4f %9.5f %9.5f %9.5f %9.5f %11.6f %11.6f %11.6f %-8s "
		    "%6.1f %6.1f\n", i / a->H, i % a->H, f->s, l->s, f->H, l->H, f->Hc, l->Hc,
		    h->path.dH, h->path.sink, h->path.content,
		    sw_head_class_name(sw_head_classify(h, eps)), rk->rank_entropy[i],
		    rk->rank_content[i]);
	}
	printf("ranking at step %lld for pruning (rank 1 = lowest; whole-row entropy vs "
	    "content entropy, sink dropped): Spearman rho %.4f over %zu heads\n",
	    (long long)a->last_step, rk->rho, rk->ranked);
	if (rk->nmoved) {
		printf("rank moves most:");
		for (size_t k = 0; k < rk->nmoved; k++) {
			size_t i = rk->moved[k];
			printf("%s layer %zu head %zu %g -> %g (%+g)", k ? ";" : "", i / a->H, i % a->H,
			    rk->rank_entropy[i], rk->rank_content[i],
			    rk->rank_content[i] - rk->rank_entropy[i]);
		}
		printf("\n");
	} else if (rk->ranked)
		printf("the two rankings agree\n");
}

/* "whole run", "--from A --to B", "--last N" */
static void
range_desc(const struct rep_opts *o, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	if (o->range.has_from)
		n += (size_t)snprintf(buf + n, len - n, " --from %lld", (long long)o->range.from);
	if (o->range.has_to && n < len)
		n += (size_t)snprintf(buf + n, len - n, " --to %lld", (long long)o->range.to);
	if (o->range.last > 0 && n < len)
		n += (size_t)snprintf(buf + n, len - n, " --last %lld", (long long)o->range.last);
	if (!n)
		snprintf(buf, len, " whole run");
}

/* ---- report: one run file ---- */

static void
json_one(sw_run *run, const struct rep_run *e, const struct rep_opts *o, const sw_series *ser)
{
	const sw_agg *a = &e->agg;
	sw_json j;
	sw_json_init(&j, stdout);
	sw_json_begin_obj(&j, NULL);
	sw_json_int(&j, "schema", 1);
	sw_json_str(&j, "report", "run");
	json_run_common(&j, e);
	sw_json_int(&j, "layout_version", run->meta.version);
	sw_json_bool(&j, "step_order", 1);
	sw_json_int(&j, "rows_stored", run->T);
	sw_json_int(&j, "rows_superseded", run->view.superseded);
	sw_json_begin_arr(&j, "segments");
	for (int64_t k = 0; k < run->view.nseg; k++) {
		sw_json_begin_obj(&j, NULL);
		sw_json_uint(&j, "inc", run->view.seg[k].inc);
		sw_json_int(&j, "first_step", run->view.seg[k].first_step);
		sw_json_int(&j, "last_step", run->view.seg[k].last_step);
		sw_json_int(&j, "steps", run->view.seg[k].steps);
		sw_json_end_obj(&j);
	}
	sw_json_end_arr(&j);
	report_senders(run->reader, &j);
	json_range(&j, o);
	json_layers(&j, a);
	if (o->per_head)
		json_heads(&j, a, &e->rank, o->eps);
	if (o->series)
		json_series(&j, ser);
	sw_json_end_obj(&j);
	sw_json_finish(&j);
}

static void
text_one(sw_run *run, const struct rep_run *e, const struct rep_opts *o)
{
	const sw_agg *a = &e->agg;
	const sw_view *v = &run->view;
	char trun[SW_TEXT_SAFE(SWP_RUN_MAX)], tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)];
	printf("run %s  model %s  %zu layers x %zu heads  %lld steps stored (%lld .. %lld)  "
	    "split %s\n", sw_text_safe(run->meta.run, trun, sizeof(trun)),
	    run->meta.model[0] ? sw_text_safe(run->meta.model, tmodel, sizeof(tmodel)) : "-",
	    a->L, a->H,
	    (long long)v->n, (long long)v->step[0], (long long)v->step[v->n - 1], a->form);
	printf("rows %lld (%lld superseded)  lost %lld  incomplete %lld  steps in step order\n",
	    (long long)run->T, (long long)v->superseded, (long long)run->lost,
	    (long long)run->incomplete);
	if (v->nseg > 1 || v->superseded)
		for (int64_t k = 0; k < v->nseg; k++)
			printf("segment %lld: incarnation %llu, steps %lld .. %lld (%lld)\n",
			    (long long)k, (unsigned long long)v->seg[k].inc,
			    (long long)v->seg[k].first_step, (long long)v->seg[k].last_step,
			    (long long)v->seg[k].steps);
	report_senders(run->reader, NULL);
	if (o->range.has_from || o->range.has_to || o->range.last > 0) {
		char rd[96];
		range_desc(o, rd, sizeof(rd));
		printf("steps used %lld .. %lld: %lld of %lld stored (%s); endpoint: the %s split "
		    "of steps %lld and %lld\n", (long long)a->first_step, (long long)a->last_step,
		    (long long)a->steps, (long long)v->n, rd + 1, a->form,
		    (long long)a->first_step, (long long)a->last_step);
	}
	text_gaps("", a);
	printf("\n");
	printf("entropy change attributed to sink growth and content sharpening (nats)\n");
	printf("%-8s %12s %12s %12s %8s %8s | %12s %12s %12s %8s %8s\n", "", "path dH",
	    "sink", "content", "sink_sh", "cont_sh", "endpoint dH", "sink", "content",
	    "sink_sh", "cont_sh");
	for (size_t l = 0; l < a->L; l++) {
		char label[32];
		snprintf(label, sizeof(label), "layer %zu", l);
		text_attrib(label, &a->layer[l]);
	}
	text_attrib("model", &a->model);
	printf("\nshares are parts / dH, shown only where dH < 0 (a drop); "
	    "they may fall outside [0, 1] when the parts have opposite signs\n");
	if (o->per_head)
		text_heads(a, &e->rank, o->eps);
}

/* One run file: its report over the range, in the format asked for. */
static int
report_one(const char *path, const struct rep_opts *o)
{
	char err[512];
	sw_run *run;
	sw_range rg;
	sw_series ser;
	struct rep_run e;
	int64_t need = o->series ? 1 : 2;
	int rc = 2;

	memset(&e, 0, sizeof(e));
	memset(&ser, 0, sizeof(ser));
	if (sw_run_open(path, &run, err, sizeof(err)) != 0)
		return sw_tool_fail("report", "%s", err);
	if (run->T < need) {
		sw_tool_fail("report", "%s has %lld stored step(s): an attribution needs two",
		    path, (long long)run->T);
		goto out;
	}
	if (run->view.n < need) {
		sw_tool_fail("report", "%s has %lld stored step(s) (%lld rows): an attribution "
		    "needs two", path, (long long)run->view.n, (long long)run->T);
		goto out;
	}
	if (sw_run_range(run, &o->range, &rg, err, sizeof(err)) != 0) {
		sw_tool_fail("report", "%s", err);
		goto out;
	}
	if (rg.k1 - rg.k0 + 1 < need) {
		sw_tool_fail("report", "%s: the range holds 1 stored step (%lld): an attribution "
		    "needs two", path, (long long)run->view.step[rg.k0]);
		goto out;
	}
	if (!(e.file = strdup(path))) {
		sw_tool_fail("report", "out of memory");
		goto out;
	}
	rep_take_meta(&e, run);
	if (rep_compute(&e, run, o, &rg) != 0) {
		sw_tool_fail("report", "%s: %s", path, e.reason);
		goto out;
	}
	if (o->series && sw_agg_series(run, &e.agg, &ser, err, sizeof(err)) != 0) {
		sw_tool_fail("report", "%s: %s", path, err);
		goto out;
	}
	if (o->fmt == FMT_JSON)
		json_one(run, &e, o, &ser);
	else if (o->fmt == FMT_CSV) {
		csv_header();
		csv_run(&e, 1, o->per_head, o->eps);
	} else
		text_one(run, &e, o);
	rc = 0;
out:
	sw_series_free(&ser);
	rep_run_free(&e);
	sw_run_close(&run);
	return rc;
}

/* ---- report: several runs ---- */

struct rep_list {
	struct rep_run *v;
	size_t n, cap;
};

/* A new zeroed entry at the end of the list, or NULL. */
static struct rep_run *
rep_add(struct rep_list *l, const char *file)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct rep_run *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return NULL;
		l->v = p;
		l->cap = cap;
	}
	struct rep_run *e = &l->v[l->n];
	memset(e, 0, sizeof(*e));
	if (!(e->file = strdup(file)))
		return NULL;
	l->n++;
	return e;
}

static void
rep_list_free(struct rep_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		rep_run_free(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/*
 * Reads one run file into e (compared, or with the reason it is not).
 * Returns -1 when the file does not open as a run file (reason set).
 */
static int
rep_load(struct rep_run *e, const struct rep_opts *o)
{
	char err[512];
	sw_run *run;
	sw_range rg;

	struct stat sb;

	if (sw_run_open(e->file, &run, err, sizeof(err)) != 0) {
		snprintf(e->reason, sizeof(e->reason), "unreadable: %s", err);
		return -1;
	}
	if (stat(e->file, &sb) == 0) {
		e->dev = sb.st_dev;
		e->ino = sb.st_ino;
	}
	rep_take_meta(e, run);
	if (sw_run_range(run, &o->range, &rg, err, sizeof(err)) != 0)
		snprintf(e->reason, sizeof(e->reason), "%s", err);
	else if (rg.k1 - rg.k0 + 1 < 2)
		snprintf(e->reason, sizeof(e->reason), "1 stored step in the range (%lld): an "
		    "attribution needs two", (long long)run->view.step[rg.k0]);
	else
		rep_compute(e, run, o, &rg);
	sw_run_close(&run);
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The run files of a directory, in name order. Skipped, each with its
 * reason: the names LAYOUT.md keeps for files being made (.swtmp.*
 * directories, hidden names: no run file name starts with '.'), what is
 * not a regular file, names without .h5, and .h5 files that do not open
 * as run files.
 */
static int
rep_scan_dir(const char *dir, const struct rep_opts *o, struct rep_list *runs,
    struct rep_list *skipped)
{
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int rc = 0;

	if (!d) {
		struct rep_run *e = rep_add(runs, dir);
		if (!e)
			return -1;
		snprintf(e->reason, sizeof(e->reason), "unreadable: %s: %s", dir, strerror(errno));
		return 0;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char **p = realloc(names, cap * sizeof(*p));
			if (!p) {
				rc = -1;
				break;
			}
			names = p;
		}
		if (!(names[n] = strdup(de->d_name))) {
			rc = -1;
			break;
		}
		n++;
	}
	closedir(d);
	if (rc == 0 && n > 1)	/* names is NULL in an empty directory */
		qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = names[i];
		size_t len = strlen(dir) + strlen(name) + 2;
		char *full = malloc(len);
		struct stat sb;
		struct rep_run *e;
		if (!full) {
			rc = -1;
			break;
		}
		snprintf(full, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
		size_t nl = strlen(name);
		const char *why = NULL;
		if (!strncmp(name, SW_TMPDIR_PREFIX, strlen(SW_TMPDIR_PREFIX)))
			why = "temporary: a run file being created (LAYOUT.md)";
		else if (name[0] == '.')
			why = "hidden: no run file name starts with '.' (LAYOUT.md)";
		else if (stat(full, &sb) != 0)
			why = strerror(errno);
		else if (!S_ISREG(sb.st_mode))
			why = S_ISDIR(sb.st_mode) ? "a directory (not searched)" : "not a regular file";
		else if (nl < 3 || strcmp(name + nl - 3, ".h5") != 0)
			why = "not a run file: the name does not end in .h5";
		if (why) {
			if (!(e = rep_add(skipped, full)))
				rc = -1;
			else
				snprintf(e->reason, sizeof(e->reason), "%s", why);
		} else if (!(e = rep_add(runs, full)))
			rc = -1;
		else if (rep_load(e, o) != 0) {
			/* not a run file after all: skipped, with what the reader said */
			struct rep_run *s = rep_add(skipped, full);
			if (!s)
				rc = -1;
			else {
				e = &runs->v[runs->n - 1];
				snprintf(s->reason, sizeof(s->reason), "not a run file: %s",
				    e->reason + strlen("unreadable: "));
				runs->n--;
				rep_run_free(&runs->v[runs->n]);
			}
		}
		free(full);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* Sorted by parameter count, then model name, then file. */
static int
rep_cmp(const void *x, const void *y)
{
	const struct rep_run *a = x, *b = y;
	if (a->meta.params != b->meta.params)
		return a->meta.params < b->meta.params ? -1 : 1;
	int c = strcmp(a->meta.model, b->meta.model);
	return c ? c : strcmp(a->file, b->file);
}

/* A file named twice (or named and found in a directory) counts once. */
static void
rep_once(struct rep_list *runs)
{
	for (size_t i = 0; i < runs->n; i++) {
		struct rep_run *a = &runs->v[i];
		for (size_t k = 0; !a->reason[0] && a->ino && k < i; k++) {
			const struct rep_run *b = &runs->v[k];
			if (!b->reason[0] && b->dev == a->dev && b->ino == a->ino)
				snprintf(a->reason, sizeof(a->reason), "the same file as %s", b->file);
		}
	}
}

/* Whether two runs measure the same thing (kind, probe keys, fixed-probe
 * setting and with it the split form). */
static int
rep_same_setup(const struct rep_run *a, const struct rep_run *b)
{
	return !strcmp(a->kind, b->kind) && a->meta.keys == b->meta.keys &&
	    a->meta.fixed_probe == b->meta.fixed_probe && a->agg.paired == b->agg.paired;
}

/*
 * Runs whose setup differs from the family's majority (ties: the setup
 * of the first run in parameter order) are not compared: the reason
 * names what differs.
 */
static void
rep_majority(struct rep_list *runs)
{
	const struct rep_run *best = NULL;
	size_t best_n = 0;
	for (size_t i = 0; i < runs->n; i++) {
		const struct rep_run *a = &runs->v[i];
		if (a->reason[0])
			continue;
		size_t c = 0;
		for (size_t k = 0; k < runs->n; k++)
			c += !runs->v[k].reason[0] && rep_same_setup(a, &runs->v[k]);
		if (c > best_n) {
			best = a;
			best_n = c;
		}
	}
	for (size_t i = 0; best && i < runs->n; i++) {
		struct rep_run *a = &runs->v[i];
		if (a->reason[0] || rep_same_setup(a, best))
			continue;
		char *r = a->reason;
		size_t len = sizeof(a->reason), n = 0;
		n += (size_t)snprintf(r + n, len - n, "not comparable with the family's majority "
		    "(%zu runs):", best_n);
		if (strcmp(a->kind, best->kind) && n < len)
			n += (size_t)snprintf(r + n, len - n, " kind %s, theirs %s;", a->kind, best->kind);
		if (a->meta.keys != best->meta.keys && n < len)
			n += (size_t)snprintf(r + n, len - n, " keys %u, theirs %u;", a->meta.keys,
			    best->meta.keys);
		if (a->meta.fixed_probe != best->meta.fixed_probe && n < len)
			n += (size_t)snprintf(r + n, len - n, " fixed probe %s, theirs %s;",
			    a->meta.fixed_probe ? "yes" : "no", best->meta.fixed_probe ? "yes" : "no");
		if (a->agg.paired != best->agg.paired && n < len)
			n += (size_t)snprintf(r + n, len - n, " split %s, theirs %s;", a->agg.form,
			    best->agg.form);
		if (n > 0 && n < len && r[n - 1] == ';')
			r[n - 1] = 0;
	}
}

/* The ten figures a group line summarizes, in this order. */
enum { G_PDH, G_PSINK, G_PCONT, G_PSSH, G_PCSH, G_EDH, G_ESINK, G_ECONT, G_ESSH, G_ECSH, G_N };

static void
group_values(const sw_attrib *m, double *v)
{
	v[G_PDH] = m->path.dH;
	v[G_PSINK] = m->path.sink;
	v[G_PCONT] = m->path.content;
	v[G_PSSH] = m->path_sink_share;
	v[G_PCSH] = m->path_content_share;
	v[G_EDH] = m->endpoint.dH;
	v[G_ESINK] = m->endpoint.sink;
	v[G_ECONT] = m->endpoint.content;
	v[G_ESSH] = m->end_sink_share;
	v[G_ECSH] = m->end_content_share;
}

/* A group: the compared runs cmp[first .. first + n) (same model and
 * params); mean and sample standard deviation of each figure. */
struct rep_group {
	size_t first, n;
	double mean[G_N], sd[G_N];
};

/* Groups of two or more runs with the same model name and params. */
static size_t
rep_groups(struct rep_run *const *cmp, size_t n, struct rep_group *g)
{
	size_t ng = 0;
	for (size_t i = 0; i < n;) {
		size_t e = i + 1;
		while (e < n && cmp[e]->meta.params == cmp[i]->meta.params &&
		    !strcmp(cmp[e]->meta.model, cmp[i]->meta.model))
			e++;
		if (e - i >= 2) {
			double *v = malloc((e - i) * sizeof(double) + 1), row[G_N];
			g[ng].first = i;
			g[ng].n = e - i;
			for (int f = 0; f < G_N; f++) {
				for (size_t k = i; v && k < e; k++) {
					group_values(&cmp[k]->agg.model, row);
					v[k - i] = row[f];
				}
				size_t used;
				if (v)
					sw_mean_sd(v, e - i, &g[ng].mean[f], &g[ng].sd[f], &used);
				else
					g[ng].mean[f] = g[ng].sd[f] = NAN;
			}
			free(v);
			ng++;
		}
		i = e;
	}
	return ng;
}

static void
json_group_fig(sw_json *j, const char *key, const double *x)
{
	sw_json_begin_obj(j, key);
	sw_json_begin_obj(j, "path");
	sw_json_num(j, "dH", x[G_PDH]);
	sw_json_num(j, "sink", x[G_PSINK]);
	sw_json_num(j, "content", x[G_PCONT]);
	sw_json_num(j, "sink_share", x[G_PSSH]);
	sw_json_num(j, "content_share", x[G_PCSH]);
	sw_json_end_obj(j);
	sw_json_begin_obj(j, "endpoint");
	sw_json_num(j, "dH", x[G_EDH]);
	sw_json_num(j, "sink", x[G_ESINK]);
	sw_json_num(j, "content", x[G_ECONT]);
	sw_json_num(j, "sink_share", x[G_ESSH]);
	sw_json_num(j, "content_share", x[G_ECSH]);
	sw_json_end_obj(j);
	sw_json_end_obj(j);
}

static void
json_others(sw_json *j, const char *key, const struct rep_list *l, int excluded)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < l->n; i++) {
		const struct rep_run *e = &l->v[i];
		if (excluded && !e->reason[0])
			continue;
		sw_json_begin_obj(j, NULL);
		sw_json_str(j, "file", e->file);
		if (excluded && e->meta.layers) {
			sw_json_str(j, "run", e->meta.run);
			sw_json_str(j, "model", e->meta.model);
			sw_json_int(j, "params", (int64_t)e->meta.params);
		}
		sw_json_str(j, "reason", e->reason);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

static void
json_many(struct rep_run *const *cmp, size_t n, const struct rep_group *g, size_t ng,
    const struct rep_list *runs, const struct rep_list *skipped, const struct rep_opts *o)
{
	sw_json j;
	sw_json_init(&j, stdout);
	sw_json_begin_obj(&j, NULL);
	sw_json_int(&j, "schema", 1);
	sw_json_str(&j, "report", "runs");
	sw_json_str(&j, "sorted_by", "params");
	json_range(&j, o);
	sw_json_begin_arr(&j, "runs");
	for (size_t i = 0; i < n; i++) {
		sw_json_begin_obj(&j, NULL);
		json_run_common(&j, cmp[i]);
		if (o->per_layer)
			json_layers(&j, &cmp[i]->agg);
		if (o->per_head)
			json_heads(&j, &cmp[i]->agg, &cmp[i]->rank, o->eps);
		sw_json_end_obj(&j);
	}
	sw_json_end_arr(&j);
	sw_json_str(&j, "spread", SPREAD);
	sw_json_begin_arr(&j, "groups");
	for (size_t k = 0; k < ng; k++) {
		sw_json_begin_obj(&j, NULL);
		sw_json_str(&j, "model", cmp[g[k].first]->meta.model);
		sw_json_int(&j, "params", (int64_t)cmp[g[k].first]->meta.params);
		sw_json_int(&j, "runs", (int64_t)g[k].n);
		sw_json_begin_arr(&j, "files");
		for (size_t i = g[k].first; i < g[k].first + g[k].n; i++)
			sw_json_str(&j, NULL, cmp[i]->file);
		sw_json_end_arr(&j);
		json_group_fig(&j, "mean", g[k].mean);
		json_group_fig(&j, "sd", g[k].sd);
		sw_json_end_obj(&j);
	}
	sw_json_end_arr(&j);
	json_others(&j, "excluded", runs, 1);
	json_others(&j, "skipped", skipped, 0);
	sw_json_end_obj(&j);
	sw_json_finish(&j);
}

static void
csv_many(struct rep_run *const *cmp, size_t n, const struct rep_group *g, size_t ng,
    const struct rep_list *runs, const struct rep_list *skipped, const struct rep_opts *o)
{
	static const int mcol[G_N] = { C_path_dH, C_path_sink, C_path_content,
	    C_path_sink_share, C_path_content_share, C_endpoint_dH, C_endpoint_sink,
	    C_endpoint_content, C_endpoint_sink_share, C_endpoint_content_share };
	static const int scol[G_N] = { C_sd_path_dH, C_sd_path_sink, C_sd_path_content,
	    C_sd_path_sink_share, C_sd_path_content_share, C_sd_endpoint_dH,
	    C_sd_endpoint_sink, C_sd_endpoint_content, C_sd_endpoint_sink_share,
	    C_sd_endpoint_content_share };
	struct csv_line c = { { 0 } };
	csv_header();
	for (size_t i = 0; i < n; i++)
		csv_run(cmp[i], o->per_layer, o->per_head, o->eps);
	for (size_t k = 0; k < ng; k++) {
		const struct rep_run *e = cmp[g[k].first];
		csv_set(&c, C_scope, "group");
		csv_set(&c, C_model, "%s", e->meta.model);
		csv_set(&c, C_params, "%llu", (unsigned long long)e->meta.params);
		csv_set(&c, C_runs, "%zu", g[k].n);
		for (int f = 0; f < G_N; f++) {
			csv_num(&c, mcol[f], g[k].mean[f]);
			csv_num(&c, scol[f], g[k].sd[f]);
		}
		csv_emit(&c);
	}
	for (size_t i = 0; i < runs->n; i++) {
		if (!runs->v[i].reason[0])
			continue;
		csv_ident(&c, "excluded", &runs->v[i]);
		csv_set(&c, C_reason, "%s", runs->v[i].reason);
		csv_emit(&c);
	}
	for (size_t i = 0; i < skipped->n; i++) {
		csv_set(&c, C_scope, "skipped");
		csv_set(&c, C_file, "%s", skipped->v[i].file);
		csv_set(&c, C_reason, "%s", skipped->v[i].reason);
		csv_emit(&c);
	}
}

static void
text_row(const char *model, const char *params, const sw_attrib *a, const char *steps,
    const char *form, const char *lost, const char *incompl, const char *file)
{
	printf("%-22s %12s %6s %11.6f %11.6f %11.6f %8.4f | %11.6f %11.6f %11.6f %8.4f", model,
	    params, steps, a->path.dH, a->path.sink, a->path.content, a->path_sink_share,
	    a->endpoint.dH, a->endpoint.sink, a->endpoint.content, a->end_sink_share);
	if (form[0])	/* a run's line; a layer's ends here */
		printf(" %-9s %5s %9s  %s", form, lost, incompl, file);
	printf("\n");
}

static void
text_many(struct rep_run *const *cmp, size_t n, const struct rep_group *g, size_t ng,
    const struct rep_list *runs, const struct rep_list *skipped, const struct rep_opts *o)
{
	char rd[96];
	range_desc(o, rd, sizeof(rd));
	printf("%zu run%s compared, sorted by parameter count; steps:%s; path = sum over the "
	    "stored intervals, endpoint = the range's first to last step (nats)\n", n,
	    n == 1 ? "" : "s", rd);
	printf("%-22s %12s %6s %11s %11s %11s %8s | %11s %11s %11s %8s %-9s %5s %9s  %s\n",
	    "model", "params", "steps", "path dH", "sink", "content", "sink_sh", "endpt dH",
	    "sink", "content", "sink_sh", "form", "lost", "incompl", "file");
	for (size_t i = 0; i < n; i++) {
		const struct rep_run *e = cmp[i];
		const sw_agg *a = &e->agg;
		char params[24], steps[24], lost[24], inc[48];
		snprintf(params, sizeof(params), "%llu", (unsigned long long)e->meta.params);
		snprintf(steps, sizeof(steps), "%lld", (long long)a->steps);
		snprintf(lost, sizeof(lost), "%lld", (long long)e->lost);
		snprintf(inc, sizeof(inc), "%lld/%lld", (long long)a->intervals_incomplete,
		    (long long)a->intervals);
		char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)] = "-", tfile[SW_TEXT_SAFE(1024)];
		if (e->meta.model[0])
			sw_text_safe(e->meta.model, tmodel, sizeof(tmodel));
		text_row(tmodel, params, &a->model, steps, a->form, lost, inc,
		    sw_text_safe(e->file, tfile, sizeof(tfile)));
		if (o->per_layer)
			for (size_t l = 0; l < a->L; l++) {
				char label[32];
				snprintf(label, sizeof(label), "  layer %zu", l);
				text_row(label, "", &a->layer[l], "", "", "", "", "");
			}
		if (a->ngaps && (o->per_layer || o->per_head))
			text_gaps("  ", a);
		if (o->per_head) {
			printf("\n%s (%s):", tfile, tmodel);
			text_heads(a, &e->rank, o->eps);
			printf("\n");
		}
	}
	printf("incompl: intervals of the range that touch an incomplete step (missing layers "
	    "or heads, heads without a valid row), of all its intervals\n");
	if (ng) {
		printf("\n%zu group%s of runs with the same model and params: mean and %s\n", ng,
		    ng == 1 ? "" : "s", SPREAD);
		printf("%-22s %12s %4s  %-21s  %-21s  %-21s  %-17s | %-21s  %s\n", "model",
		    "params", "runs", "path dH", "sink", "content", "sink_sh", "endpt dH",
		    "endpt sink_sh");
		for (size_t k = 0; k < ng; k++) {
			const struct rep_run *e = cmp[g[k].first];
			const double *m = g[k].mean, *s = g[k].sd;
			char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)];
			printf("%-22s %12llu %4zu  %10.6f ± %-8.6f  %10.6f ± %-8.6f  %10.6f ± %-8.6f  "
			    "%7.4f ± %-7.4f | %10.6f ± %-8.6f  %7.4f ± %.4f\n",
			    e->meta.model[0] ? sw_text_safe(e->meta.model, tmodel, sizeof(tmodel)) : "-",
			    (unsigned long long)e->meta.params, g[k].n, m[G_PDH], s[G_PDH], m[G_PSINK],
			    s[G_PSINK], m[G_PCONT], s[G_PCONT], m[G_PSSH], s[G_PSSH], m[G_EDH],
			    s[G_EDH], m[G_ESSH], s[G_ESSH]);
		}
	}
	size_t nex = 0;
	for (size_t i = 0; i < runs->n; i++)
		nex += runs->v[i].reason[0] != 0;
	if (nex) {
		printf("\nnot compared (%zu):\n", nex);
		for (size_t i = 0; i < runs->n; i++) {
			const struct rep_run *e = &runs->v[i];
			if (!e->reason[0])
				continue;
			char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)], tfile[SW_TEXT_SAFE(1024)];
			sw_text_safe(e->file, tfile, sizeof(tfile));
			if (e->meta.layers)
				printf("  %s (model %s, params %llu): %s\n", tfile,
				    e->meta.model[0] ? sw_text_safe(e->meta.model, tmodel,
				    sizeof(tmodel)) : "-", (unsigned long long)e->meta.params, e->reason);
			else
				printf("  %s: %s\n", tfile, e->reason);
		}
	}
	if (skipped->n) {
		printf("\nskipped (%zu):\n", skipped->n);
		for (size_t i = 0; i < skipped->n; i++)
			printf("  %s: %s\n", skipped->v[i].file, skipped->v[i].reason);
	}
}

/* Several files, or directories of them: one table of the comparable runs. */
static int
report_many(char **paths, size_t np, const struct rep_opts *o)
{
	struct rep_list runs = { 0 }, skipped = { 0 };
	struct rep_run **cmp = NULL;
	struct rep_group *g = NULL;
	int rc = 2;

	for (size_t i = 0; i < np; i++) {
		struct stat sb;
		if (stat(paths[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
			if (rep_scan_dir(paths[i], o, &runs, &skipped) != 0)
				goto oom;
			continue;
		}
		struct rep_run *e = rep_add(&runs, paths[i]);
		if (!e)
			goto oom;
		rep_load(e, o);
	}
	if (runs.n > 1)	/* runs.v is NULL when no run was found */
		qsort(runs.v, runs.n, sizeof(*runs.v), rep_cmp);
	rep_once(&runs);
	rep_majority(&runs);
	if (!(cmp = malloc((runs.n + 1) * sizeof(*cmp))) ||
	    !(g = malloc((runs.n + 1) * sizeof(*g))))
		goto oom;
	size_t n = 0;
	for (size_t i = 0; i < runs.n; i++)
		if (!runs.v[i].reason[0])
			cmp[n++] = &runs.v[i];
	size_t ng = rep_groups(cmp, n, g);
	if (o->fmt == FMT_JSON)
		json_many(cmp, n, g, ng, &runs, &skipped, o);
	else if (o->fmt == FMT_CSV)
		csv_many(cmp, n, g, ng, &runs, &skipped, o);
	else
		text_many(cmp, n, g, ng, &runs, &skipped, o);
	fflush(stdout);
	if (n == 0)
		sw_tool_fail("report", "no run to compare (%zu file%s not compared, %zu skipped)",
		    runs.n, runs.n == 1 ? "" : "s", skipped.n);
	rc = n ? 0 : 2;
	goto out;
oom:
	sw_tool_fail("report", "out of memory");
out:
	free(cmp);
	free(g);
	rep_list_free(&runs);
	rep_list_free(&skipped);
	return rc;
}

/* ---- report: the command ---- */

static int
parse_step(const char *opt, const char *s, int64_t *out)
{
	long v;
	if (sw_parse_long(s, &v))
		return sw_tool_fail("report", "%s: '%s' is not a step number", opt, s);
	*out = v;
	return 0;
}

#define REPORT_USAGE "usage: sinkwatch report RUN.h5... | DIR [--format text|json|csv] " \
	"[--from STEP] [--to STEP] [--last N]\n" \
	"                        [--per-layer] [--per-head] [--eps NATS] [--series]\n"

int
sw_report_main(int argc, char **argv)
{
	struct rep_opts o;
	char **paths = calloc((size_t)argc + 1, sizeof(char *));
	size_t np = 0;
	int rc = 2;

	memset(&o, 0, sizeof(o));
	o.eps = SW_CLASS_EPS_DEFAULT;
	if (!paths)
		return sw_tool_fail("report", "out of memory");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if (!strcmp(a, "--series"))
			o.series = 1;
		else if (!strcmp(a, "--per-layer"))
			o.per_layer = 1;
		else if (!strcmp(a, "--per-head"))
			o.per_head = 1;
		else if (!strcmp(a, "--format") && more) {
			const char *f = argv[++i];
			if (!strcmp(f, "json"))
				o.fmt = FMT_JSON;
			else if (!strcmp(f, "csv"))
				o.fmt = FMT_CSV;
			else if (!strcmp(f, "text"))
				o.fmt = FMT_TEXT;
			else {
				sw_tool_fail("report", "--format: '%s' is not text, json or csv", f);
				goto out;
			}
		} else if (!strcmp(a, "--from") && more) {
			if (parse_step("--from", argv[++i], &o.range.from))
				goto out;
			o.range.has_from = 1;
		} else if (!strcmp(a, "--to") && more) {
			if (parse_step("--to", argv[++i], &o.range.to))
				goto out;
			o.range.has_to = 1;
		} else if (!strcmp(a, "--last") && more) {
			if (parse_step("--last", argv[++i], &o.range.last))
				goto out;
			if (o.range.last < 1) {
				sw_tool_fail("report", "--last: '%s' is not a positive number of steps",
				    argv[i]);
				goto out;
			}
		} else if (!strcmp(a, "--eps") && more) {
			if (sw_parse_double(argv[++i], &o.eps) || !(o.eps >= 0) || !isfinite(o.eps)) {
				sw_tool_fail("report", "--eps: '%s' is not a number of nats >= 0", argv[i]);
				goto out;
			}
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf(REPORT_USAGE);
			rc = 0;
			goto out;
		} else if (a[0] == '-') {
			sw_tool_fail("report", "unknown option '%s'%s", a, more ? "" :
			    " (or its value is missing)");
			goto out;
		} else
			paths[np++] = argv[i];
	}
	if (o.range.last > 0 && o.range.has_from) {
		sw_tool_fail("report", "--last counts back from --to (or the last step): not with --from");
		goto out;
	}
	struct stat sb;
	int one = np == 1 && !(stat(paths[0], &sb) == 0 && S_ISDIR(sb.st_mode));
	if (np == 0)
		sw_tool_fail("report", "missing RUN.h5 (or a directory of run files)");
	else if (o.series && o.fmt != FMT_JSON)
		sw_tool_fail("report", "--series needs --format json");
	else if (o.series && !one)
		sw_tool_fail("report", "--series takes one run file");
	else
		rc = one ? report_one(paths[0], &o) : report_many(paths, np, &o);
out:
	free(paths);
	return rc;
}

/* ---- status ------------------------------------------------------------------------ */

/* One status request to one control endpoint, the reply on stdout. 0, or 2. */
static int
status_one(void *ctx, const char *ep, const char *req, long timeout_ms, const char *skey,
    const char *kfile)
{
	void *s = zmq_socket(ctx, ZMQ_REQ);
	int zero = 0, to = (int)timeout_ms, rc = 0;
	char cerr[512];
	if (!s)
		return sw_tool_fail("status", "ZeroMQ: %s", zmq_strerror(zmq_errno()));
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof(to));
	zmq_setsockopt(s, ZMQ_SNDTIMEO, &to, sizeof(to));
	static const char *const opts[2] = { "--server-key", "--key-file" };
	int curve = swn_curve_client(s, skey, kfile, opts, NULL, cerr, sizeof(cerr));
	if (curve < 0) {
		rc = sw_tool_fail("status", "%s", cerr);
		goto out;
	}
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
		rc = sw_tool_fail("status", "no answer from %s within %ld ms (is sinkwatchd running?%s)",
		    ep, timeout_ms, curve ? " does it allow this client's key, and is --server-key "
		    "its public key?" : " with CURVE on, give --server-key and --key-file");
		goto out;
	}
	fwrite(zmq_msg_data(&m), 1, zmq_msg_size(&m), stdout);
	if (zmq_msg_size(&m) >= 6 && !memcmp(zmq_msg_data(&m), "error:", 6))
		rc = 2;
	zmq_msg_close(&m);
out:
	zmq_close(s);
	return rc;
}

int
sw_status_main(int argc, char **argv)
{
	const char *section = NULL, *skey = NULL, *kfile = NULL;
	const char **eps = calloc((size_t)argc + 1, sizeof(char *));
	size_t nep = 0;
	long timeout_ms = 2000;
	if (!eps)
		return sw_tool_fail("status", "out of memory");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--control") && i + 1 < argc)
			eps[nep++] = argv[++i];
		else if (!strcmp(argv[i], "--server-key") && i + 1 < argc)
			skey = argv[++i];
		else if (!strcmp(argv[i], "--key-file") && i + 1 < argc)
			kfile = argv[++i];
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &timeout_ms) || timeout_ms < 1) {
				free(eps);
				return sw_tool_fail("status", "--timeout-ms: '%s' is not a positive integer", argv[i]);
			}
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch status [--control ENDPOINT]... [--timeout-ms MS]\n"
			    "                        [--server-key KEY|FILE --key-file FILE] [SECTION]\n");
			free(eps);
			return 0;
		} else if (argv[i][0] == '-') {
			free(eps);
			return sw_tool_fail("status", "unknown option '%s'", argv[i]);
		} else
			section = argv[i];
	}
	if (nep == 0)
		eps[nep++] = "tcp://127.0.0.1:5711";
	char req[128];
	snprintf(req, sizeof(req), "status%s%s", section ? " " : "", section ? section : "");
	void *ctx = zmq_ctx_new();
	int rc = 0;
	/* several daemons (and forwarders): each reply under a line naming it;
	 * one that does not answer is reported and the others still asked */
	for (size_t i = 0; i < nep; i++) {
		if (nep > 1) {
			printf("%s== %s ==\n", i ? "\n" : "", eps[i]);
			fflush(stdout);
		}
		int r = status_one(ctx, eps[i], req, timeout_ms, skey, kfile);
		fflush(stdout);
		if (r)
			rc = r;
	}
	zmq_ctx_term(ctx);
	free(eps);
	return rc;
}
