/*
 * cmd_report.c: `sinkwatch report`. The report is built by the report model
 * (report/, swreport.h) from the run aggregation; this command chooses the
 * runs and the range and has the model rendered as text, CSV or JSON
 * (report_text.c, report_csv.c, report_json.c; the JSON is the same that
 * `sinkwatch serve` answers).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tools/analyze.h"
#include "report/json.h"
#include "report/swreport.h"
#include "tools/tools.h"

/* One run file: its report over the range, in the format asked for. */
static int
report_one(const char *path, const sw_rep_opts *o)
{
	char err[512];
	sw_run *run;
	sw_report m;
	int rc = 2;

	if (sw_run_open(path, &run, err, sizeof(err)) != 0)
		return sw_tool_fail("report", "%s", err);
	if (sw_report_of_run(&m, run, path, o, err, sizeof(err)) != 0) {
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
	} else if (o->fmt == SW_REP_CSV)
		sw_report_csv_run(&m);
	else
		sw_report_text_run(&m);
	rc = 0;
out:
	sw_report_free(&m);
	sw_run_close(&run);
	return rc;
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
		sw_report_csv_many(&m, o);
	else
		sw_report_text_many(&m, o);
	fflush(stdout);
	if (m.n == 0)
		sw_tool_fail("report", "no run to compare (%zu file%s not compared, %zu skipped)",
		    m.runs.n, m.runs.n == 1 ? "" : "s", m.skipped.n);
	rc = m.n ? 0 : 2;
out:
	sw_report_many_free(&m);
	return rc;
}

static int
parse_step(const char *opt, const char *s, int64_t *out)
{
	long v;
	if (sw_parse_long(s, &v))
		return sw_tool_fail("report", "%s: '%s' is not a step number", opt, s);
	*out = v;
	return 0;
}

static int
parse_format(const char *f, enum sw_rep_fmt *fmt)
{
	if (!strcmp(f, "json"))
		*fmt = SW_REP_JSON;
	else if (!strcmp(f, "csv"))
		*fmt = SW_REP_CSV;
	else if (!strcmp(f, "text"))
		*fmt = SW_REP_TEXT;
	else
		return sw_tool_fail("report", "--format: '%s' is not text, json or csv", f);
	return 0;
}

#define REPORT_USAGE "usage: sinkwatch report RUN.h5... | DIR [--format text|json|csv] " \
	"[--from STEP] [--to STEP] [--last N]\n" \
	"                        [--per-layer] [--per-head] [--eps NATS] [--series]\n" \
	"                        [--group-by KEY,...] [--exclude PATTERN]...\n" \
	"  group keys: model params run dir kind keys probe form layers heads generation\n" \
	"  (default model,params); --exclude: a run id pattern (fnmatch), repeatable\n"

int
sw_report_main(int argc, char **argv)
{
	sw_rep_opts o;
	char **paths = calloc((size_t)argc + 1, sizeof(char *));
	char **owned = calloc((size_t)argc + 1, sizeof(char *));	/* escaped names */
	const char **excl = calloc((size_t)argc + 1, sizeof(char *));
	size_t np = 0;
	int rc = 2;

	memset(&o, 0, sizeof(o));
	o.eps = SW_CLASS_EPS_DEFAULT;
	if (!paths || !owned || !excl) {
		free(paths);
		free(owned);
		free(excl);
		return sw_tool_fail("report", "out of memory");
	}
	o.exclude = excl;
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
			if (parse_format(argv[++i], &o.fmt))
				goto out;
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
			o.range.has_last = 1;	/* below 1: refused by sw_rep_opts_check */
		} else if (!strcmp(a, "--eps") && more) {
			if (sw_parse_double(argv[++i], &o.eps) || !(o.eps >= 0) || !isfinite(o.eps)) {
				sw_tool_fail("report", "--eps: '%s' is not a number of nats >= 0", argv[i]);
				goto out;
			}
		} else if (!strcmp(a, "--group-by") && more) {
			char err[512];
			if (sw_rep_group_parse(argv[++i], &o, err, sizeof(err)) != 0) {
				sw_tool_fail("report", "%s", err);
				goto out;
			}
		} else if (!strcmp(a, "--exclude") && more) {
			excl[o.nexclude++] = argv[++i];
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf(REPORT_USAGE);
			rc = 0;
			goto out;
		} else if (a[0] == '-') {
			sw_tool_fail("report", "unknown option '%s'%s", a, more ? "" :
			    " (or its value is missing)");
			goto out;
		} else {
			/* data/fam/L2.h5 for the run fam/L2: data/fam%2FL2.h5 */
			owned[np] = sw_tool_run_path("report", argv[i]);
			paths[np] = owned[np] ? owned[np] : argv[i];
			np++;
		}
	}
	char oerr[256];
	if (sw_rep_opts_check(&o, oerr, sizeof(oerr)) != 0) {
		sw_tool_fail("report", "%s", oerr);
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
	else if (one && (o.ngroup || o.nexclude))
		sw_tool_fail("report", "--group-by and --exclude take several runs (files or a "
		    "directory)");
	else
		rc = one ? report_one(paths[0], &o) : report_many(paths, np, &o);
out:
	for (size_t k = 0; owned && k < np; k++)
		free(owned[k]);
	free(owned);
	free(excl);
	free(paths);
	return rc;
}
