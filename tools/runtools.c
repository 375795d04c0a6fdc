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
#include "report/swreport.h"
#include "tools/tools.h"

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

/* The columns tail shows, by the schema's names (storage/runfile.h). */
static const enum sw_head_field tail_fields[] = { SW_F_ENTROPY, SW_F_SINK_MASS,
    SW_F_CONTENT_ENTROPY, SW_F_DH, SW_F_DH_SINK, SW_F_DH_CONTENT };
enum { TAIL_NC = sizeof(tail_fields) / sizeof(tail_fields[0]) };

/* Prints rows *shown .. T-1 (their step and each column's head mean);
 * -1 with err. buf: LH doubles. */
static int
tail_rows(sw_reader *r, int64_t *shown, int64_t T, double *buf, size_t LH, char *err,
    size_t errlen)
{
	const char *step_ds = sw_schema_at((size_t)sw_schema_find("step"))->name;
	for (; *shown < T; (*shown)++) {
		double step;
		if (sw_reader_read(r, step_ds, *shown, *shown + 1, &step, 1, err, errlen) < 0)
			return -1;
		printf("%10.0f", step);
		for (int c = 0; c < TAIL_NC; c++) {
			const char *col = sw_head_field_names[tail_fields[c]];
			if (sw_reader_read(r, col, *shown, *shown + 1, buf, LH, err, errlen) < 0)
				return -1;
			double v = sw_finite_mean(buf, LH);
			if (isfinite(v))
				printf(" %15.9f", v);
			else
				printf(" %15s", "nan");
		}
		printf("\n");
	}
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
	for (int c = 0; c < TAIL_NC; c++)
		printf(" %15s", sw_head_field_names[tail_fields[c]]);
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
		if (tail_rows(r, &shown, T, buf, LH, err, sizeof(err)) != 0) {
			rc = sw_tool_fail("tail", "%s", err);
			break;
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
	free(buf);
	free(seen.said);
	sw_reader_close(&r);
	return rc;
}

/* ---- report ---------------------------------------------------------------------- */

/*
 * `sinkwatch report`: the report is built by the report model (report/,
 * swreport.h) from the run aggregation; this part chooses the runs and the
 * range and renders the model as text or CSV (its JSON is the model's own,
 * the same that `sinkwatch serve` answers).
 */

/* The sender table's text lines, for a several-sender run. */
static void
text_senders(const sw_rep_senders *s)
{
	if (s->err[0] || !s->several)
		return;
	printf("senders %lld", (long long)s->n);
	if (s->disagree)
		printf("  copies that disagree %lld", (long long)s->disagree);
	if (s->missing)
		printf("  heads missing %lld", (long long)s->missing);
	printf("\n");
	for (int64_t k = 0; k < s->nopen; k++)
		printf("rank %u of %u (incarnation %llu) never sent %s: the run is "
		    "incomplete\n", s->open[k].rank, s->open[k].senders,
		    (unsigned long long)s->open[k].inc, s->open[k].sent ? "its end" : "anything");
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
csv_ident(struct csv_line *c, const char *scope, const sw_rep_run *e)
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
csv_run(const sw_rep_run *e, int layers, int heads, double eps)
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
range_desc(const sw_rep_opts *o, char *buf, size_t len)
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
text_one(const sw_report *m)
{
	const sw_run *run = m->run;
	const sw_rep_run *e = &m->e;
	const sw_rep_opts *o = m->o;
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
	text_senders(&m->snd);
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
report_one(const char *path, const sw_rep_opts *o)
{
	char err[512];
	sw_run *run;
	sw_range rg;
	sw_report m;
	int64_t need = o->series ? 1 : 2;
	int rc = 2;

	memset(&m, 0, sizeof(m));
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
	if (sw_report_build(&m, run, path, o, &rg, NULL, err, sizeof(err)) != 0) {
		sw_tool_fail("report", "%s", err);
		goto out;
	}
	if (m.snd.err[0])
		fprintf(stderr, "sinkwatch report: %s\n", m.snd.err);
	if (o->fmt == SW_REP_JSON) {
		sw_json j;
		sw_json_init(&j, stdout);
		sw_json_begin_obj(&j, NULL);
		sw_report_json_run(&j, &m);
		sw_json_end_obj(&j);
		sw_json_finish(&j);
	} else if (o->fmt == SW_REP_CSV) {
		csv_header();
		csv_run(&m.e, 1, o->per_head, o->eps);
	} else
		text_one(&m);
	rc = 0;
out:
	sw_report_free(&m);
	sw_run_close(&run);
	return rc;
}

/* ---- report: several runs ---- */

static void
csv_many(const sw_report_many *m, const sw_rep_opts *o)
{
	sw_rep_run *const *cmp = m->cmp;
	const sw_rep_group *g = m->g;
	const sw_rep_list *runs = &m->runs, *skipped = &m->skipped;
	size_t n = m->n, ng = m->ng;
	static const int mcol[SW_G_N] = { C_path_dH, C_path_sink, C_path_content,
	    C_path_sink_share, C_path_content_share, C_endpoint_dH, C_endpoint_sink,
	    C_endpoint_content, C_endpoint_sink_share, C_endpoint_content_share };
	static const int scol[SW_G_N] = { C_sd_path_dH, C_sd_path_sink, C_sd_path_content,
	    C_sd_path_sink_share, C_sd_path_content_share, C_sd_endpoint_dH,
	    C_sd_endpoint_sink, C_sd_endpoint_content, C_sd_endpoint_sink_share,
	    C_sd_endpoint_content_share };
	struct csv_line c = { { 0 } };
	csv_header();
	for (size_t i = 0; i < n; i++)
		csv_run(cmp[i], o->per_layer, o->per_head, o->eps);
	for (size_t k = 0; k < ng; k++) {
		const sw_rep_run *e = cmp[g[k].first];
		csv_set(&c, C_scope, "group");
		csv_set(&c, C_model, "%s", e->meta.model);
		csv_set(&c, C_params, "%llu", (unsigned long long)e->meta.params);
		csv_set(&c, C_runs, "%zu", g[k].n);
		for (int f = 0; f < SW_G_N; f++) {
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
text_many(const sw_report_many *rm, const sw_rep_opts *o)
{
	sw_rep_run *const *cmp = rm->cmp;
	const sw_rep_group *g = rm->g;
	const sw_rep_list *runs = &rm->runs, *skipped = &rm->skipped;
	size_t n = rm->n, ng = rm->ng;
	char rd[96];
	range_desc(o, rd, sizeof(rd));
	printf("%zu run%s compared, sorted by parameter count; steps:%s; path = sum over the "
	    "stored intervals, endpoint = the range's first to last step (nats)\n", n,
	    n == 1 ? "" : "s", rd);
	printf("%-22s %12s %6s %11s %11s %11s %8s | %11s %11s %11s %8s %-9s %5s %9s  %s\n",
	    "model", "params", "steps", "path dH", "sink", "content", "sink_sh", "endpt dH",
	    "sink", "content", "sink_sh", "form", "lost", "incompl", "file");
	for (size_t i = 0; i < n; i++) {
		const sw_rep_run *e = cmp[i];
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
		    ng == 1 ? "" : "s", SW_REP_SPREAD);
		printf("%-22s %12s %4s  %-21s  %-21s  %-21s  %-17s | %-21s  %s\n", "model",
		    "params", "runs", "path dH", "sink", "content", "sink_sh", "endpt dH",
		    "endpt sink_sh");
		for (size_t k = 0; k < ng; k++) {
			const sw_rep_run *e = cmp[g[k].first];
			const double *m = g[k].mean, *s = g[k].sd;
			char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)];
			printf("%-22s %12llu %4zu  %10.6f ± %-8.6f  %10.6f ± %-8.6f  %10.6f ± %-8.6f  "
			    "%7.4f ± %-7.4f | %10.6f ± %-8.6f  %7.4f ± %.4f\n",
			    e->meta.model[0] ? sw_text_safe(e->meta.model, tmodel, sizeof(tmodel)) : "-",
			    (unsigned long long)e->meta.params, g[k].n, m[SW_G_PDH], s[SW_G_PDH],
			    m[SW_G_PSINK], s[SW_G_PSINK], m[SW_G_PCONT], s[SW_G_PCONT], m[SW_G_PSSH],
			    s[SW_G_PSSH], m[SW_G_EDH], s[SW_G_EDH], m[SW_G_ESSH], s[SW_G_ESSH]);
		}
	}
	size_t nex = 0;
	for (size_t i = 0; i < runs->n; i++)
		nex += runs->v[i].reason[0] != 0;
	if (nex) {
		printf("\nnot compared (%zu):\n", nex);
		for (size_t i = 0; i < runs->n; i++) {
			const sw_rep_run *e = &runs->v[i];
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
report_many(char **paths, size_t np, const sw_rep_opts *o)
{
	sw_report_many m;
	int rc = 2;

	if (sw_report_many_build(&m, paths, np, o) != 0) {
		sw_tool_fail("report", "out of memory");
		goto out;
	}
	if (o->fmt == SW_REP_JSON) {
		sw_json j;
		sw_json_init(&j, stdout);
		sw_report_json_many(&j, &m, o);
		sw_json_finish(&j);
	} else if (o->fmt == SW_REP_CSV)
		csv_many(&m, o);
	else
		text_many(&m, o);
	fflush(stdout);
	if (m.n == 0)
		sw_tool_fail("report", "no run to compare (%zu file%s not compared, %zu skipped)",
		    m.runs.n, m.runs.n == 1 ? "" : "s", m.skipped.n);
	rc = m.n ? 0 : 2;
out:
	sw_report_many_free(&m);
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
	sw_rep_opts o;
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
				o.fmt = SW_REP_JSON;
			else if (!strcmp(f, "csv"))
				o.fmt = SW_REP_CSV;
			else if (!strcmp(f, "text"))
				o.fmt = SW_REP_TEXT;
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
	else if (o.series && o.fmt != SW_REP_JSON)
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
