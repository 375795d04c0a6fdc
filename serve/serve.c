/*
 * serve.c: the runs behind `sinkwatch serve` (serve.h). Every number a
 * reply holds comes from runagg.c: the page computes none. Readers are
 * cached, one per file (sw_reader_open's rule), and refreshed when asked
 * about (SWMR: a refresh shows what the daemon has flushed).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "report/json.h"
#include "report/swreport.h"
#include "serve/serve.h"

/* One run file: a light reader for the run list, or the whole run. */
struct entry {
	char *path, *id;
	int dir;
	sw_reader *rd;		/* the list's reader, while run is NULL */
	sw_runmeta meta;	/* string pointers cleared */
	char kind[16];
	sw_run *run;		/* opened once a page asks for its numbers */
	int64_t T, steps, last_step;
	double last_time;
	int ended;
	char err[512];		/* why it cannot be read; "" when it can */
	/* the aggregation over the whole view, with its series, as of agg_T */
	int have_agg;
	int64_t agg_T;
	sw_agg agg;
	sw_series ser;
};

struct sw_srv {
	char **dirs;
	size_t ndirs;
	double stale_s;
	struct entry **ent;
	size_t nent;
	char **only;		/* sw_srv_pick's ids: the run list holds these alone */
	size_t nonly;
	int dir_base;		/* name a data directory by its base name (the export) */
};

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

sw_srv *
sw_srv_new(char **dirs, size_t ndirs, double stale_s)
{
	sw_srv *s = calloc(1, sizeof(*s));
	if (!s || !(s->dirs = calloc(ndirs + 1, sizeof(char *)))) {
		free(s);
		return NULL;
	}
	for (size_t i = 0; i < ndirs; i++)
		if (!(s->dirs[s->ndirs++] = strdup(dirs[i]))) {
			sw_srv_free(&s);
			return NULL;
		}
	s->stale_s = stale_s;
	return s;
}

static void
entry_drop_agg(struct entry *e)
{
	if (!e->have_agg)
		return;
	sw_agg_free(&e->agg);
	sw_series_free(&e->ser);
	e->have_agg = 0;
}

static void
entry_free(struct entry *e)
{
	entry_drop_agg(e);
	sw_reader_close(&e->rd);
	sw_run_close(&e->run);
	free(e->path);
	free(e->id);
	free(e);
}

void
sw_srv_free(sw_srv **sp)
{
	sw_srv *s = *sp;
	if (!s)
		return;
	for (size_t i = 0; i < s->nent; i++)
		entry_free(s->ent[i]);
	free(s->ent);
	for (size_t i = 0; i < s->ndirs; i++)
		free(s->dirs[i]);
	free(s->dirs);
	for (size_t i = 0; i < s->nonly; i++)
		free(s->only[i]);
	free(s->only);
	free(s);
	*sp = NULL;
}

/*
 * Whether name may be a run file of a data directory: what the daemon
 * makes (LAYOUT.md "File name") and nothing else: no '/', no leading '.',
 * ends in .h5. What is not such a name is never opened.
 */
static int
run_name_ok(const char *name)
{
	size_t n = strlen(name);
	return n > 3 && n < 256 && name[0] != '.' && !strchr(name, '/') &&
	    !strcmp(name + n - 3, ".h5");
}

/* The path of id "D/NAME" when it names a regular file (not a link) of
 * data directory D, else NULL. */
static char *
id_path(const sw_srv *s, const char *id, int *dir)
{
	char *end;
	if (!id || id[0] < '0' || id[0] > '9')
		return NULL;
	errno = 0;
	unsigned long d = strtoul(id, &end, 10);
	if (errno || *end != '/' || d >= s->ndirs || !run_name_ok(end + 1))
		return NULL;
	size_t len = strlen(s->dirs[d]) + strlen(end) + 1;
	char *p = malloc(len);
	if (!p)
		return NULL;
	snprintf(p, len, "%s%s", s->dirs[d], end);
	struct stat sb;
	if (lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		free(p);
		return NULL;
	}
	*dir = (int)d;
	return p;
}

static void
entry_take_meta(struct entry *e, const sw_runmeta *m)
{
	e->meta = *m;
	snprintf(e->kind, sizeof(e->kind), "%s", m->kind ? m->kind : "");
	e->meta.kind = e->meta.split_form = e->meta.dtype = NULL;
}

/* The entry of id, made when first asked for; NULL when id names no run
 * file (or out of memory). */
static struct entry *
entry_get(sw_srv *s, const char *id)
{
	for (size_t i = 0; i < s->nent; i++)
		if (!strcmp(s->ent[i]->id, id))
			return s->ent[i];
	int dir;
	char *path = id_path(s, id, &dir);
	if (!path)
		return NULL;
	struct entry *e = calloc(1, sizeof(*e)), **grown;
	if (!e || !(e->id = strdup(id)) ||
	    !(grown = realloc(s->ent, (s->nent + 1) * sizeof(*grown)))) {
		if (e)
			free(e->id);
		free(e);
		free(path);
		return NULL;
	}
	e->path = path;
	e->dir = dir;
	e->T = -1;
	e->last_time = NAN;
	s->ent = grown;
	s->ent[s->nent++] = e;
	return e;
}

static sw_reader *
entry_reader(struct entry *e)
{
	return e->run ? e->run->reader : e->rd;
}

/* Refreshes what the run list shows of e; -1 with e->err. */
static int
entry_poll(struct entry *e)
{
	char err[512];
	int64_t T;

	if (e->run) {
		if (sw_run_refresh(e->run, err, sizeof(err)) < 0)
			goto fail;
		T = e->run->T;
		e->steps = e->run->view.n;
		e->last_step = e->steps ? e->run->view.step[e->steps - 1] : -1;
	} else {
		if (!e->rd) {
			sw_runmeta m;
			if (sw_reader_open(e->path, &e->rd, &m, err, sizeof(err)) != 0)
				goto fail;
			entry_take_meta(e, &m);
		}
		if ((T = sw_reader_refresh(e->rd, err, sizeof(err))) < 0)
			goto fail;
		if (T != e->T) {
			sw_rows rows;
			sw_view v;
			if (sw_reader_rows(e->rd, T, &rows, err, sizeof(err)) != 0)
				goto fail;
			if (sw_view_build(&rows, &v) != 0) {
				sw_rows_free(&rows);
				snprintf(err, sizeof(err), "out of memory");
				goto fail;
			}
			e->steps = v.n;
			e->last_step = v.n ? v.step[v.n - 1] : -1;
			sw_view_free(&v);
			sw_rows_free(&rows);
		}
	}
	if (T > 0 && T != e->T) {
		double t;
		if (sw_reader_read(entry_reader(e), "time", T - 1, T, &t, 1, err, sizeof(err)) < 0)
			goto fail;
		e->last_time = t;
	}
	e->T = T;
	e->ended = sw_reader_ended(entry_reader(e)) == 1;
	e->err[0] = 0;
	return 0;
fail:
	snprintf(e->err, sizeof(e->err), "%s", err);
	return -1;
}

/* Opens the whole run (the list's reader closed first: one per file). */
static int
entry_full(struct entry *e)
{
	char err[512];
	if (!e->run) {
		sw_reader_close(&e->rd);
		e->T = -1;
		if (sw_run_open(e->path, &e->run, err, sizeof(err)) != 0) {
			snprintf(e->err, sizeof(e->err), "%s", err);
			return -1;
		}
		entry_take_meta(e, &e->run->meta);
	}
	return entry_poll(e);
}

/* The whole view's aggregation and series, as of the last refresh. */
static int
entry_agg(struct entry *e)
{
	char err[512];
	if (entry_full(e) != 0)
		return -1;
	if (e->have_agg && e->agg_T == e->run->T)
		return 0;
	entry_drop_agg(e);
	if (e->run->view.n == 0) {
		snprintf(e->err, sizeof(e->err), "no stored step yet");
		return -1;
	}
	sw_range rg = { 0, e->run->view.n - 1 };
	if (sw_agg_compute(e->run, &rg, 1, &e->agg, err, sizeof(err)) != 0) {
		snprintf(e->err, sizeof(e->err), "%s", err);
		return -1;
	}
	if (sw_agg_series(e->run, &e->agg, &e->ser, err, sizeof(err)) != 0) {
		sw_agg_free(&e->agg);
		snprintf(e->err, sizeof(e->err), "%s", err);
		return -1;
	}
	e->have_agg = 1;
	e->agg_T = e->run->T;
	return 0;
}

static const char *
entry_state(const sw_srv *s, const struct entry *e, double now)
{
	if (e->err[0])
		return "unreadable";
	if (e->ended)
		return "ended";
	if (e->T <= 0 || !isfinite(e->last_time) || now - e->last_time > s->stale_s)
		return "interrupted";
	return "live";
}

/* ---- replies ------------------------------------------------------------------- */

typedef struct out {
	FILE *f;
	char *buf;
	size_t len;
	sw_json j;
} out_t;

static int
out_open(out_t *o)
{
	memset(o, 0, sizeof(*o));
	if (!(o->f = open_memstream(&o->buf, &o->len)))
		return -1;
	sw_json_init(&o->j, o->f);
	return 0;
}

static int
out_reply(out_t *o, int status, const char *type, sw_reply *r)
{
	if (fclose(o->f) != 0) {
		free(o->buf);
		r->body = NULL;
		return -1;
	}
	r->status = status;
	r->type = type;
	r->body = o->buf;
	r->len = o->len;
	return 0;
}

static int
reply_error(sw_reply *r, int status, const char *msg)
{
	out_t o;
	if (out_open(&o) != 0)
		return -1;
	sw_json_begin_obj(&o.j, NULL);
	sw_json_str(&o.j, "error", msg);
	sw_json_end_obj(&o.j);
	sw_json_finish(&o.j);
	return out_reply(&o, status, "application/json", r);
}

/* The run file's name in its data directory. */
static const char *
entry_file(const struct entry *e)
{
	return strrchr(e->path, '/') ? strrchr(e->path, '/') + 1 : e->path;
}

void
sw_srv_dir_base(sw_srv *s, int on)
{
	s->dir_base = on;
}

/* A data directory as the JSON names it: as given, or (the export) its
 * base name alone, so that no path of this machine goes into the copy. */
static const char *
dir_name(const sw_srv *s, size_t k, char *buf, size_t len)
{
	const char *d = s->dirs[k];
	if (!s->dir_base)
		return d;
	size_t n = strlen(d);
	while (n > 1 && d[n - 1] == '/')	/* "data/" is "data" */
		n--;
	size_t b = n;
	while (b > 0 && d[b - 1] != '/')
		b--;
	snprintf(buf, len, "%.*s", (int)(n - b), d + b);
	return buf;
}

/* The server's own keys of a run (none of them a report's): 1 when the
 * run can be read. ended: its end mark too (a report has it already). */
static int
json_entry_own(const sw_srv *s, sw_json *j, const struct entry *e, double now, int ended)
{
	char dir[4096];
	sw_json_str(j, "id", e->id);
	sw_json_str(j, "dir", dir_name(s, e->dir, dir, sizeof(dir)));
	sw_json_str(j, "state", entry_state(s, e, now));
	if (e->err[0]) {
		sw_json_str(j, "error", e->err);
		return 0;
	}
	sw_json_int(j, "rows", e->T);
	sw_json_int(j, "steps", e->steps);
	sw_json_num(j, "last_time", e->last_time);
	if (ended)
		sw_json_bool(j, "ended", e->ended);
	return 1;
}

static void
json_entry(const sw_srv *s, sw_json *j, const struct entry *e, double now)
{
	sw_json_str(j, "file", entry_file(e));
	if (!json_entry_own(s, j, e, now, 1))
		return;
	sw_json_str(j, "run", e->meta.run);
	sw_json_str(j, "model", e->meta.model);
	sw_json_uint(j, "params", e->meta.params);
	sw_json_int(j, "layers", e->meta.layers);
	sw_json_int(j, "heads", e->meta.heads);
	sw_json_str(j, "kind", e->kind);
	if (e->steps)	/* an integer, exact (the page holds 2^53 at most as a number) */
		sw_json_int(j, "last_step", e->last_step);
	else
		sw_json_num(j, "last_step", NAN);
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether the run list shows e: every run, or those sw_srv_pick chose. */
static int
listed(const sw_srv *s, const struct entry *e)
{
	if (!s->only)
		return 1;
	for (size_t i = 0; i < s->nonly; i++)
		if (!strcmp(s->only[i], e->id))
			return 1;
	return 0;
}

/*
 * Every run file of the directories, in directory order then by name,
 * polled: fn(ctx, e) for each. A name that is not a regular file is
 * skipped.
 */
static void
scan(sw_srv *s, void (*fn)(void *ctx, sw_srv *s, struct entry *e), void *ctx)
{
	for (size_t d = 0; d < s->ndirs; d++) {
		DIR *dp = opendir(s->dirs[d]);
		struct dirent *de;
		char **names = NULL;
		size_t n = 0;
		if (!dp)
			continue;
		while ((de = readdir(dp))) {
			char **g;
			if (!run_name_ok(de->d_name) || !(g = realloc(names, (n + 1) * sizeof(*g))))
				continue;
			names = g;
			if ((names[n] = strdup(de->d_name)))
				n++;
		}
		closedir(dp);
		if (n > 1)	/* names is NULL in an empty directory: qsort wants an array */
			qsort(names, n, sizeof(*names), name_cmp);
		for (size_t i = 0; i < n; i++) {
			char id[300];
			snprintf(id, sizeof(id), "%zu/%s", d, names[i]);
			struct entry *e = entry_get(s, id);
			free(names[i]);
			if (!e)	/* not a regular file */
				continue;
			entry_poll(e);
			fn(ctx, s, e);
		}
		free(names);
	}
}

struct runs_ctx {
	sw_json *j;
	double now;
};

static void
runs_one(void *ctx, sw_srv *s, struct entry *e)
{
	struct runs_ctx *c = ctx;
	if (!listed(s, e))
		return;
	sw_json_begin_obj(c->j, NULL);
	json_entry(s, c->j, e, c->now);
	sw_json_end_obj(c->j);
}

/* GET /api/runs: every run file of the directories (or those chosen), in
 * directory order then by name. */
static int
api_runs(sw_srv *s, sw_reply *r)
{
	out_t o;
	struct runs_ctx c;
	if (out_open(&o) != 0)
		return -1;
	c.j = &o.j;
	c.now = now_s();
	sw_json_begin_obj(&o.j, NULL);
	sw_json_num(&o.j, "now", c.now);
	sw_json_num(&o.j, "stale_s", s->stale_s);
	sw_json_begin_arr(&o.j, "runs");
	scan(s, runs_one, &c);
	sw_json_end_arr(&o.j);
	sw_json_end_obj(&o.j);
	sw_json_finish(&o.j);
	return out_reply(&o, 200, "application/json", r);
}

struct pick_ctx {
	char **names;
	size_t nnames;
	int *found;
	char **ids;
	size_t nids;
	int oom;
};

static void
pick_one(void *ctx, sw_srv *s, struct entry *e)
{
	struct pick_ctx *c = ctx;
	const char *file = strrchr(e->path, '/') ? strrchr(e->path, '/') + 1 : e->path;
	int want = c->nnames == 0;
	(void)s;
	for (size_t i = 0; i < c->nnames; i++)
		if (!strcmp(c->names[i], e->id) || !strcmp(c->names[i], file) ||
		    (!e->err[0] && !strcmp(c->names[i], e->meta.run))) {
			c->found[i] = 1;
			want = 1;
		}
	if (!want)
		return;
	char **g = realloc(c->ids, (c->nids + 1) * sizeof(*g));
	if (!g || !(g[c->nids] = strdup(e->id))) {
		if (g)
			c->ids = g;
		c->oom = 1;
		return;
	}
	c->ids = g;
	c->nids++;
}

int
sw_srv_pick(sw_srv *s, char **names, size_t nnames, char ***ids, size_t *nids, char *err,
    size_t errlen)
{
	struct pick_ctx c;
	memset(&c, 0, sizeof(c));
	c.names = names;
	c.nnames = nnames;
	*ids = NULL;
	*nids = 0;
	if (!(c.found = calloc(nnames + 1, sizeof(int)))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	scan(s, pick_one, &c);
	int rc = 0;
	if (c.oom) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
	}
	for (size_t i = 0; rc == 0 && i < nnames; i++)
		if (!c.found[i]) {
			snprintf(err, errlen, "%s: no such run in the data directories (a run name, "
			    "a file name, or an id D/FILE)", names[i]);
			rc = -1;
		}
	if (rc == 0 && c.nids == 0) {
		snprintf(err, errlen, "no run file in the data directories");
		rc = -1;
	}
	free(c.found);
	if (rc != 0) {
		for (size_t i = 0; i < c.nids; i++)
			free(c.ids[i]);
		free(c.ids);
		return -1;
	}
	for (size_t i = 0; i < s->nonly; i++)
		free(s->only[i]);
	free(s->only);
	s->only = c.ids;
	s->nonly = c.nids;
	*ids = c.ids;
	*nids = c.nids;
	return 0;
}

static void
warm_one(void *ctx, sw_srv *s, struct entry *e)
{
	(void)ctx;
	(void)s;
	(void)e;	/* scan polled it: its reader is open */
}

void
sw_srv_warm(sw_srv *s)
{
	scan(s, warm_one, NULL);
}

long
sw_srv_layers(sw_srv *s, const char *id)
{
	struct entry *e = entry_get(s, id);
	if (!e || entry_poll(e) != 0)
		return -1;
	return (long)e->meta.layers;
}

/* The run an API call names by ?id=, refreshed; NULL after a reply. */
static struct entry *
want_run(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r, int *rc)
{
	const char *id = arg(ctx, "id");
	struct entry *e = id ? entry_get(s, id) : NULL;
	if (!e) {
		*rc = reply_error(r, 404, "no such run file in the data directories");
		return NULL;
	}
	return e;
}

/* An int64 argument: 1 when given and valid, 0 when absent, -1 invalid. */
static int
arg_int(sw_arg_fn arg, void *ctx, const char *key, int64_t *v)
{
	const char *x = arg(ctx, key);
	char *end;
	if (!x || !*x)
		return 0;
	errno = 0;
	long long n = strtoll(x, &end, 10);
	if (errno || *end)
		return -1;
	*v = n;
	return 1;
}

/* ?layer=N or model (L): the series' layer index; -1 invalid. */
static long
arg_layer(sw_arg_fn arg, void *ctx, size_t L)
{
	const char *x = arg(ctx, "layer");
	char *end;
	if (!x || !strcmp(x, "model"))
		return (long)L;
	long l = strtol(x, &end, 10);
	return *x && !*end && l >= 0 && (size_t)l < L ? l : -1;
}

/*
 * GET /api/series?id=&layer=N|model[&to=STEP]: what the run's charts plot,
 * its stored steps up to `to` when given: a page that asks for a second
 * series, or for the report, of the steps the first one showed gets them,
 * not those of a live run that has grown in between.
 */
static int
api_series(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	int rc = 0;
	int64_t to = INT64_MAX;
	struct entry *e = want_run(s, arg, ctx, r, &rc);
	if (!e)
		return rc;
	if (arg_int(arg, ctx, "to", &to) < 0)
		return reply_error(r, 400, "to: a step number");
	if (entry_agg(e) != 0)
		return reply_error(r, 409, e->err);
	const sw_series *ser = &e->ser;
	long l = arg_layer(arg, ctx, ser->layers);
	if (l < 0)
		return reply_error(r, 400, "layer: a layer number of the run, or model");
	size_t n = ser->n;
	while (n > 0 && ser->step[n - 1] > to)	/* steps ascend */
		n--;
	out_t o;
	if (out_open(&o) != 0)
		return -1;
	sw_json_begin_obj(&o.j, NULL);
	json_entry(s, &o.j, e, now_s());
	if ((size_t)l < ser->layers)
		sw_json_int(&o.j, "layer", l);
	else
		sw_json_str(&o.j, "layer", "model");
	sw_json_str(&o.j, "split_form", e->agg.form);
	sw_json_begin_arr(&o.j, "step");
	for (size_t k = 0; k < n; k++)
		sw_json_int(&o.j, NULL, ser->step[k]);
	sw_json_end_arr(&o.j);
	sw_json_series_layer(&o.j, ser, (size_t)l, n);
	sw_json_end_obj(&o.j);
	sw_json_finish(&o.j);
	return out_reply(&o, 200, "application/json", r);
}

/* GET /api/state?id=: the cheap question the page polls. */
static int
api_state(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	int rc = 0;
	struct entry *e = want_run(s, arg, ctx, r, &rc);
	if (!e)
		return rc;
	entry_poll(e);
	out_t o;
	if (out_open(&o) != 0)
		return -1;
	sw_json_begin_obj(&o.j, NULL);
	json_entry(s, &o.j, e, now_s());
	sw_json_end_obj(&o.j);
	sw_json_finish(&o.j);
	return out_reply(&o, 200, "application/json", r);
}


/*
 * The report's options from ?from=&to=&eps= (per head always, no
 * series): 0, or -1 with the reason in why.
 */
static int
report_opts(sw_arg_fn arg, void *ctx, sw_rep_opts *o, const char **why)
{
	const char *x;
	int f, t;
	memset(o, 0, sizeof(*o));
	o->fmt = SW_REP_JSON;
	o->per_head = 1;
	o->eps = SW_CLASS_EPS_DEFAULT;
	if ((f = arg_int(arg, ctx, "from", &o->range.from)) < 0 ||
	    (t = arg_int(arg, ctx, "to", &o->range.to)) < 0) {
		*why = "from, to: step numbers";
		return -1;
	}
	o->range.has_from = f;
	o->range.has_to = t;
	if ((x = arg(ctx, "eps"))) {
		char *end;
		o->eps = strtod(x, &end);
		if (*end || !(o->eps >= 0)) {
			*why = "eps: a number >= 0";
			return -1;
		}
	}
	return 0;
}

/*
 * The stored steps of e's run in the range asked for (either end open),
 * and the aggregation of them when it is the cached one of the whole view
 * (the one the charts' series came from). -1: none stored there.
 */
static int
report_range(struct entry *e, const sw_rep_opts *o, sw_range *rg, const sw_agg **cached)
{
	int64_t from = o->range.has_from ? o->range.from : INT64_MIN;
	int64_t to = o->range.has_to ? o->range.to : INT64_MAX;
	*cached = NULL;
	if (sw_run_span(e->run, from, to, &rg->k0, &rg->k1) != 0)
		return -1;
	if (rg->k0 == 0 && rg->k1 == e->run->view.n - 1 && entry_agg(e) == 0 &&
	    e->agg.range.k0 == rg->k0 && e->agg.range.k1 == rg->k1) {
		*cached = &e->agg;
		return 0;
	}
	/* (a refresh in between grows the view: the range again) */
	return sw_run_span(e->run, from, to, &rg->k0, &rg->k1);
}

/*
 * GET /api/report?id=&from=&to=[&eps=]: the report of the stored steps in
 * [from, to] (either end open): the JSON of `sinkwatch report --format json
 * --per-head` (sw_report_json_run, the one report model), with the
 * server's keys of the run (id, dir, state, rows, steps, ...); file is the
 * file's name in its data directory.
 */
static int
api_report(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	int rc = 0;
	char err[512];
	const char *why;
	struct entry *e = want_run(s, arg, ctx, r, &rc);
	sw_rep_opts opts;
	sw_range rg;
	const sw_agg *cached;
	sw_report m;
	out_t o;

	if (!e)
		return rc;
	if (report_opts(arg, ctx, &opts, &why) != 0)
		return reply_error(r, 400, why);
	if (entry_full(e) != 0)
		return reply_error(r, 409, e->err);
	if (report_range(e, &opts, &rg, &cached) != 0)
		return reply_error(r, 409, "no stored step in the range");
	if (sw_report_build(&m, e->run, entry_file(e), &opts, &rg, cached, err, sizeof(err)) != 0) {
		sw_report_free(&m);
		return reply_error(r, 500, err);
	}
	if (out_open(&o) != 0) {
		sw_report_free(&m);
		return -1;
	}
	sw_json_begin_obj(&o.j, NULL);
	json_entry_own(s, &o.j, e, now_s(), 0);	/* the report says ended */
	sw_report_json_run(&o.j, &m);
	sw_json_end_obj(&o.j);
	sw_json_finish(&o.j);
	sw_report_free(&m);
	return out_reply(&o, 200, "application/json", r);
}

struct cmp_item {
	struct entry *e;
};

static int
cmp_params(const void *x, const void *y)
{
	const struct entry *a = ((const struct cmp_item *)x)->e, *b = ((const struct cmp_item *)y)->e;
	if (a->meta.params != b->meta.params)
		return a->meta.params < b->meta.params ? -1 : 1;
	return strcmp(a->id, b->id);
}

/*
 * GET /api/compare?ids=ID,ID,...: the runs in parameter order, each with
 * the whole view's model attribution (the cross-run table) and the model's
 * series (one axis for all).
 */
static int
api_compare(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	const char *ids = arg(ctx, "ids");
	struct cmp_item items[64];
	size_t n = 0;
	char *copy, *save = NULL;

	if (!ids || !(copy = strdup(ids)))
		return reply_error(r, 400, "ids: run ids separated by commas");
	for (char *t = strtok_r(copy, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
		struct entry *e = entry_get(s, t);
		int dup = 0;
		for (size_t i = 0; i < n; i++)
			dup |= items[i].e == e;
		if (!e || dup)
			continue;
		if (entry_agg(e) != 0 && !e->err[0])
			snprintf(e->err, sizeof(e->err), "unreadable");
		items[n++].e = e;
	}
	free(copy);
	qsort(items, n, sizeof(*items), cmp_params);
	out_t o;
	if (out_open(&o) != 0)
		return -1;
	sw_json *j = &o.j;
	double now = now_s();
	sw_json_begin_obj(j, NULL);
	sw_json_str(j, "order", "params");
	sw_json_begin_arr(j, "runs");
	for (size_t i = 0; i < n; i++) {
		struct entry *e = items[i].e;
		sw_json_begin_obj(j, NULL);
		json_entry(s, j, e, now);
		if (e->have_agg && !e->err[0]) {
			const sw_series *ser = &e->ser;
			size_t m = ser->n, o0 = ser->layers * m;
			sw_json_str(j, "split_form", e->agg.form);
			sw_json_int(j, "first_step", e->agg.first_step);
			sw_json_int(j, "steps_used", e->agg.steps);
			sw_json_begin_obj(j, "model_attribution");
			sw_json_attrib(j, &e->agg.model);
			sw_json_end_obj(j);
			sw_json_begin_arr(j, "step");
			for (size_t k = 0; k < m; k++)
				sw_json_int(j, NULL, ser->step[k]);
			sw_json_end_arr(j);
			sw_json_nums(j, "sink_mass", ser->sink_mass + o0, m);
			sw_json_nums(j, "entropy", ser->entropy + o0, m);
			sw_json_nums(j, "content_entropy", ser->content_entropy + o0, m);
		}
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
	sw_json_finish(j);
	return out_reply(&o, 200, "application/json", r);
}

/* A CSV number: %.17g, empty for NaN. */
static void
csv_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, ",%.17g", v);
	else
		fputs(",", f);
}

/* GET /api/csv?id=&layer=&from=&to=: the rows of what the run's charts
 * show, over the stored steps in [from, to]. */
static int
api_csv(sw_srv *s, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	int rc = 0;
	struct entry *e = want_run(s, arg, ctx, r, &rc);
	int64_t from = INT64_MIN, to = INT64_MAX, k0, k1;
	if (!e)
		return rc;
	if (arg_int(arg, ctx, "from", &from) < 0 || arg_int(arg, ctx, "to", &to) < 0)
		return reply_error(r, 400, "from, to: step numbers");
	if (entry_agg(e) != 0)
		return reply_error(r, 409, e->err);
	const sw_series *ser = &e->ser;
	long l = arg_layer(arg, ctx, ser->layers);
	if (l < 0)
		return reply_error(r, 400, "layer: a layer number of the run, or model");
	if (sw_run_span(e->run, from, to, &k0, &k1) != 0)
		k1 = k0 - 1;	/* none: the header alone */
	out_t o;
	if (out_open(&o) != 0)
		return -1;
	size_t n = ser->n, o0 = (size_t)l * n;
	fputs("step,layer,sink_mass,entropy,content_entropy,cum_sink,cum_content\n", o.f);
	for (int64_t k = k0; k <= k1; k++) {
		size_t i = o0 + (size_t)k;
		fprintf(o.f, "%" PRId64, ser->step[k]);
		if ((size_t)l < ser->layers)
			fprintf(o.f, ",%ld", l);
		else
			fputs(",model", o.f);
		csv_num(o.f, ser->sink_mass[i]);
		csv_num(o.f, ser->entropy[i]);
		csv_num(o.f, ser->content_entropy[i]);
		csv_num(o.f, ser->cum_sink[i]);
		csv_num(o.f, ser->cum_content[i]);
		fputc('\n', o.f);
	}
	/* the file name: the id's safe bytes only */
	char name[100];
	size_t m = 0;
	for (const char *p = e->id; *p && m < 60; p++)
		name[m++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.') ? *p : '_';
	name[m] = 0;
	snprintf(r->disposition, sizeof(r->disposition), "attachment; filename=\"%s.csv\"", name);
	return out_reply(&o, 200, "text/csv; charset=utf-8", r);
}

int
sw_srv_api(sw_srv *s, const char *path, sw_arg_fn arg, void *ctx, sw_reply *r)
{
	r->disposition[0] = 0;
	if (!strcmp(path, "/api/runs"))
		return api_runs(s, r);
	if (!strcmp(path, "/api/series"))
		return api_series(s, arg, ctx, r);
	if (!strcmp(path, "/api/state"))
		return api_state(s, arg, ctx, r);
	if (!strcmp(path, "/api/report"))
		return api_report(s, arg, ctx, r);
	if (!strcmp(path, "/api/compare"))
		return api_compare(s, arg, ctx, r);
	if (!strcmp(path, "/api/csv"))
		return api_csv(s, arg, ctx, r);
	return reply_error(r, 404, "no such endpoint");
}

