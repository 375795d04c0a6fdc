/*
 * cmd_tail.c: `sinkwatch tail`: a run file's steps as they are committed,
 * read with SWMR while the daemon writes it.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/runfile.h"
#include "proto/swproto.h"
#include "tools/analyze.h"
#include "report/json.h"
#include "report/runagg.h"
#include "tools/tools.h"

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
