/*
 * reader.c: libsinkwatch-report, the report library behind a plain C
 * interface (sinkwatch/reader.h) for bindings: Python's sinkwatch.reader
 * loads it with ctypes. Every figure and rule is the report library's
 * (runagg.c, model.c, report_json.c); this file only opens, copies out
 * and writes JSON into memory.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/json.h"
#include "report/sinkwatch/reader.h"
#include "report/swreport.h"

#define EXPORT __attribute__((visibility("default")))

struct swr_run {
	sw_run *run;
};

EXPORT int
swr_abi(void)
{
	return SWR_ABI;
}

EXPORT const char *
swr_version(void)
{
	return PACKAGE_VERSION;
}

EXPORT void
swr_free(void *p)
{
	free(p);
}

static void
set_err(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
}

EXPORT swr_run *
swr_open(const char *path, char *err, size_t errlen)
{
	char why[768];
	swr_run *r = calloc(1, sizeof(*r));

	if (!r) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	if (!path || sw_run_open(path, &r->run, why, sizeof(why)) != 0) {
		set_err(err, errlen, path ? why : "no path");
		free(r);
		return NULL;
	}
	return r;
}

EXPORT void
swr_close(swr_run *r)
{
	if (!r)
		return;
	sw_run_close(&r->run);
	free(r);
}

EXPORT int
swr_refresh(swr_run *r, char *err, size_t errlen)
{
	char why[768];
	int rc = sw_run_refresh(r->run, why, sizeof(why));
	if (rc < 0)
		set_err(err, errlen, why);
	return rc;
}

EXPORT int64_t
swr_steps(const swr_run *r)
{
	return r->run->view.n;
}

EXPORT int64_t
swr_rows(const swr_run *r)
{
	return r->run->T;
}

EXPORT int
swr_view(const swr_run *r, int64_t *step, int64_t *row, uint64_t *inc, int64_t n)
{
	const sw_view *v = &r->run->view;
	if (n != v->n)
		return -1;
	for (int64_t k = 0; k < n; k++) {
		if (step)
			step[k] = v->step[k];
		if (row)
			row[k] = v->row[k];
		if (inc)
			inc[k] = r->run->rows.inc[v->row[k]];
	}
	return 0;
}

EXPORT int
swr_row_inc(const swr_run *r, uint64_t *inc, int64_t n)
{
	if (n != r->run->T)
		return -1;
	if (n > 0)
		memcpy(inc, r->run->rows.inc, (size_t)n * sizeof(uint64_t));
	return 0;
}

/* The doubles of one step of series name: their count, -1 with err. */
static int64_t
step_width(swr_run *r, const char *name, int64_t *dims, int *rank, char *err, size_t errlen)
{
	int nd = sw_reader_shape(r->run->reader, name, dims, err, errlen);
	if (nd < 0)
		return -1;
	int64_t w = 1;
	for (int d = 0; d < nd; d++)
		w *= dims[d];
	if (rank)
		*rank = nd;
	return w;
}

EXPORT double *
swr_series(swr_run *r, const char *name, int view, int64_t *count, char *err, size_t errlen)
{
	char why[768];
	int64_t dims[4];
	sw_run *run = r->run;
	int64_t T = run->T, w = step_width(r, name, dims, NULL, why, sizeof(why));
	double *all = NULL, *out = NULL;

	*count = 0;
	if (w < 0) {
		set_err(err, errlen, why);
		return NULL;
	}
	/* one more than needed: malloc(0) may say NULL */
	if (!(all = malloc(((size_t)T * (size_t)w + 1) * sizeof(double)))) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	if (T > 0 && sw_reader_read(run->reader, name, 0, T, all, (size_t)(T * w), why,
	    sizeof(why)) < 0) {
		set_err(err, errlen, why);
		free(all);
		return NULL;
	}
	if (!view) {
		*count = T * w;
		return all;
	}
	int64_t n = run->view.n;
	if (!(out = malloc(((size_t)n * (size_t)w + 1) * sizeof(double)))) {
		set_err(err, errlen, "out of memory");
		free(all);
		return NULL;
	}
	for (int64_t k = 0; k < n; k++)
		memcpy(out + k * w, all + run->view.row[k] * w, (size_t)w * sizeof(double));
	free(all);
	*count = n * w;
	return out;
}

/* A JSON document written by fill into a malloc'd string. */
typedef void (*json_fill)(sw_json *j, void *arg);
static char *
json_string(json_fill fill, void *arg, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	sw_json j;
	sw_json_init(&j, f);
	fill(&j, arg);
	sw_json_finish(&j);
	if (fclose(f) != 0 || !buf) {
		free(buf);
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	return buf;
}

/* The series the file holds: name, dims and the shape of one step. */
static void
json_fields(sw_json *j, swr_run *r)
{
	char why[256];
	int64_t dims[4];
	int rank;
	sw_json_begin_arr(j, "fields");
	for (size_t i = 0; sw_schema_at(i); i++) {
		const sw_dataset_info *d = sw_schema_at(i);
		if (strncmp(d->dims, "step", 4) != 0 ||
		    step_width(r, d->name, dims, &rank, why, sizeof(why)) < 0)
			continue;	/* not a series, or not in this file */
		sw_json_begin_obj(j, NULL);
		sw_json_str(j, "name", d->name);
		sw_json_str(j, "dims", d->dims);
		sw_json_str(j, "type", d->type);
		sw_json_begin_arr(j, "shape");
		for (int k = 0; k < rank; k++)
			sw_json_int(j, NULL, dims[k]);
		sw_json_end_arr(j);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

static void
fill_info(sw_json *j, void *arg)
{
	swr_run *r = arg;
	sw_rep_senders snd;
	memset(&snd, 0, sizeof(snd));
	sw_rep_senders_read(r->run->reader, &snd);
	sw_json_begin_obj(j, NULL);
	sw_report_json_info(j, r->run, &snd);
	json_fields(j, r);
	sw_json_end_obj(j);
	sw_rep_senders_free(&snd);
}

EXPORT char *
swr_info_json(swr_run *r, char *err, size_t errlen)
{
	return json_string(fill_info, r, err, errlen);
}

static void
set_opts(sw_rep_opts *o, int has_from, int64_t from, int has_to, int64_t to, int has_last,
    int64_t last, int per_layer, int per_head, int series, double eps)
{
	memset(o, 0, sizeof(*o));
	o->fmt = SW_REP_JSON;
	o->range.has_from = has_from != 0;
	o->range.from = from;
	o->range.has_to = has_to != 0;
	o->range.to = to;
	o->range.has_last = has_last != 0;
	o->range.last = has_last ? last : 0;
	o->per_layer = per_layer != 0;
	o->per_head = per_head != 0;
	o->series = series != 0;
	o->eps = isnan(eps) ? SW_CLASS_EPS_DEFAULT : eps;
}

static void
fill_run(sw_json *j, void *arg)
{
	sw_json_begin_obj(j, NULL);
	sw_report_json_run(j, arg);
	sw_json_end_obj(j);
}

EXPORT char *
swr_report_json(swr_run *r, int has_from, int64_t from, int has_to, int64_t to, int has_last,
    int64_t last, int per_layer, int per_head, int series, double eps, char *err, size_t errlen)
{
	char why[768];
	sw_rep_opts o;
	sw_report m;
	char *s = NULL;

	memset(&m, 0, sizeof(m));
	set_opts(&o, has_from, from, has_to, to, has_last, last, per_layer, per_head, series, eps);
	if (sw_rep_opts_check(&o, why, sizeof(why)) != 0 ||
	    sw_report_of_run(&m, r->run, r->run->path, &o, why, sizeof(why)) != 0) {
		set_err(err, errlen, why);
		sw_report_free(&m);
		return NULL;
	}
	s = json_string(fill_run, &m, err, errlen);
	sw_report_free(&m);
	return s;
}

struct many_arg {
	const sw_report_many *m;
	const sw_rep_opts *o;
};

static void
fill_many(sw_json *j, void *arg)
{
	struct many_arg *a = arg;
	sw_report_json_many(j, a->m, a->o);
}

EXPORT char *
swr_report_many_json(const char *const *paths, size_t np, int has_from, int64_t from,
    int has_to, int64_t to, int has_last, int64_t last, int per_layer, int per_head, double eps,
    const char *group_by, const char *const *exclude, size_t nexclude, char *err,
    size_t errlen)
{
	char why[768];
	sw_rep_opts o;
	sw_report_many m;
	char *s = NULL;

	set_opts(&o, has_from, from, has_to, to, has_last, last, per_layer, per_head, 0, eps);
	o.exclude = exclude;
	o.nexclude = exclude ? nexclude : 0;
	if ((group_by && sw_rep_group_parse(group_by, &o, why, sizeof(why)) != 0) ||
	    sw_rep_opts_check(&o, why, sizeof(why)) != 0) {
		set_err(err, errlen, why);
		return NULL;
	}
	if (sw_report_many_build(&m, (char **)paths, np, &o) != 0) {
		set_err(err, errlen, "out of memory");
		return NULL;
	}
	struct many_arg a = { &m, &o };
	s = json_string(fill_many, &a, err, errlen);
	sw_report_many_free(&m);
	return s;
}
