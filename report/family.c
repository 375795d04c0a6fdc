/*
 * family.c: the report of several run files (swreport.h): the runs found
 * in the files and directories named, each compared or with the reason it
 * is not (unreadable, named twice, a setup other than the family's
 * majority), and the groups of runs of one model. Nothing here prints.
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "report/swreport.h"

const char *const sw_group_key_names[SW_GK__N] = {
#define X(id, name) name,
	SW_GROUP_KEYS(X)
#undef X
};

int
sw_rep_group_parse(const char *list, sw_rep_opts *o, char *err, size_t errlen)
{
	const char *p = list;
	o->ngroup = 0;
	while (*p) {
		size_t len = strcspn(p, ",");
		int k = 0;
		while (k < SW_GK__N && (strlen(sw_group_key_names[k]) != len ||
		    strncmp(p, sw_group_key_names[k], len)))
			k++;
		if (k == SW_GK__N) {
			size_t n = (size_t)snprintf(err, errlen, "--group-by: '%.*s' is not a run "
			    "attribute (", (int)len, p);
			for (int i = 0; i < SW_GK__N && n < errlen; i++)
				n += (size_t)snprintf(err + n, errlen - n, "%s%s", i ? ", " : "",
				    sw_group_key_names[i]);
			if (n < errlen)
				snprintf(err + n, errlen - n, ")");
			return -1;
		}
		int seen = 0;
		for (int i = 0; i < o->ngroup; i++)
			seen |= o->group[i] == (enum sw_group_key)k;
		if (!seen)
			o->group[o->ngroup++] = (enum sw_group_key)k;
		p += len + (p[len] == ',');
	}
	if (o->ngroup == 0) {
		snprintf(err, errlen, "--group-by: no attribute named");
		return -1;
	}
	return 0;
}

int
sw_rep_group_keys(const sw_rep_opts *o, enum sw_group_key keys[SW_GK__N])
{
	if (o->ngroup <= 0) {
		keys[0] = SW_GK_MODEL;
		keys[1] = SW_GK_PARAMS;
		return 2;
	}
	memcpy(keys, o->group, (size_t)o->ngroup * sizeof(*keys));
	return o->ngroup;
}

void
sw_rep_group_value(const sw_rep_run *e, enum sw_group_key k, char *buf, size_t len)
{
	const char *slash;
	switch (k) {
	case SW_GK_MODEL: snprintf(buf, len, "%s", e->meta.model); break;
	case SW_GK_PARAMS: snprintf(buf, len, "%llu", (unsigned long long)e->meta.params); break;
	case SW_GK_RUN: snprintf(buf, len, "%s", e->meta.run); break;
	case SW_GK_DIR:
		slash = strrchr(e->file, '/');
		if (!slash)
			snprintf(buf, len, ".");
		else
			snprintf(buf, len, "%.*s", slash == e->file ? 1 : (int)(slash - e->file),
			    e->file);
		break;
	case SW_GK_KIND: snprintf(buf, len, "%s", e->kind); break;
	case SW_GK_KEYS: snprintf(buf, len, "%u", e->meta.keys); break;
	case SW_GK_PROBE: snprintf(buf, len, "%s", e->meta.fixed_probe ? "fixed" : "varied"); break;
	case SW_GK_FORM: snprintf(buf, len, "%s", e->have_agg ? e->agg.form : "-"); break;
	case SW_GK_LAYERS: snprintf(buf, len, "%u", e->meta.layers); break;
	case SW_GK_HEADS: snprintf(buf, len, "%u", e->meta.heads); break;
	case SW_GK_GENERATION: snprintf(buf, len, "%u", e->meta.generation); break;
	default: snprintf(buf, len, "?"); break;
	}
}

/* e->gkey: the values of the group keys in effect, each ended by a unit
 * separator (so that no two lists of values join alike). -1 out of memory. */
static int
rep_gkey(sw_rep_run *e, const sw_rep_opts *o)
{
	enum sw_group_key keys[SW_GK__N];
	int nk = sw_rep_group_keys(o, keys);
	size_t cap = 1, n = 0;
	char v[1100];
	for (int i = 0; i < nk; i++) {
		sw_rep_group_value(e, keys[i], v, sizeof(v));
		cap += strlen(v) + 1;
	}
	free(e->gkey);
	if (!(e->gkey = malloc(cap)))
		return -1;
	e->gkey[0] = 0;
	for (int i = 0; i < nk; i++) {
		sw_rep_group_value(e, keys[i], v, sizeof(v));
		n += (size_t)snprintf(e->gkey + n, cap - n, "%s\x1f", v);
	}
	return 0;
}

/* Runs whose id matches an --exclude pattern are not compared. */
static void
rep_exclude(sw_rep_list *runs, const sw_rep_opts *o)
{
	for (size_t i = 0; i < runs->n; i++) {
		sw_rep_run *e = &runs->v[i];
		for (size_t k = 0; e->meta.layers && k < o->nexclude; k++)
			if (fnmatch(o->exclude[k], e->meta.run, 0) == 0) {
				snprintf(e->reason, sizeof(e->reason), "excluded (--exclude %s)",
				    o->exclude[k]);
				break;
			}
	}
}

/* A new zeroed entry at the end of the list, or NULL. */
static sw_rep_run *
rep_add(sw_rep_list *l, const char *file)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		sw_rep_run *p = realloc(l->v, cap * sizeof(*p));
		if (!p)
			return NULL;
		l->v = p;
		l->cap = cap;
	}
	sw_rep_run *e = &l->v[l->n];
	memset(e, 0, sizeof(*e));
	if (!(e->file = strdup(file)))
		return NULL;
	l->n++;
	return e;
}

static void
rep_list_free(sw_rep_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		sw_rep_run_free(&l->v[i]);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

/*
 * Reads one run file into e (compared, or with the reason it is not).
 * Returns -1 when the file does not open as a run file (reason set).
 */
static int
rep_load(sw_rep_run *e, const sw_rep_opts *o)
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
	sw_rep_take_meta(e, run);
	if (sw_run_range(run, &o->range, &rg, err, sizeof(err)) != 0)
		snprintf(e->reason, sizeof(e->reason), "%s", err);
	else if (rg.k1 - rg.k0 + 1 < 2)
		snprintf(e->reason, sizeof(e->reason), "1 stored step in the range (%lld): an "
		    "attribution needs two", (long long)run->view.step[rg.k0]);
	else
		sw_rep_compute(e, run, o, &rg, NULL);
	sw_run_close(&run);
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The run files of a directory, in name order; the daemon's lock file
 * (SW_RUNLOCK_FILE) is passed over. Skipped, each with its reason: the names LAYOUT.md keeps for files being made (.swtmp.*
 * directories, hidden names: no run file name starts with '.'), what is
 * not a regular file, names without .h5, and .h5 files that do not open
 * as run files.
 */
static int
rep_scan_dir(const char *dir, const sw_rep_opts *o, sw_rep_list *runs,
    sw_rep_list *skipped)
{
	DIR *d = opendir(dir);
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	int rc = 0;

	if (!d) {
		sw_rep_run *e = rep_add(runs, dir);
		if (!e)
			return -1;
		snprintf(e->reason, sizeof(e->reason), "unreadable: %s: %s", dir, strerror(errno));
		return 0;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, SW_RUNLOCK_FILE))	/* the daemon's lock: not listed */
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
		sw_rep_run *e;
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
			sw_rep_run *s = rep_add(skipped, full);
			if (!s)
				rc = -1;
			else {
				e = &runs->v[runs->n - 1];
				snprintf(s->reason, sizeof(s->reason), "not a run file: %s",
				    e->reason + strlen("unreadable: "));
				runs->n--;
				sw_rep_run_free(&runs->v[runs->n]);
			}
		}
		free(full);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* Sorted by parameter count, then model name, then the group keys'
 * values, then file. */
static int
rep_cmp(const void *x, const void *y)
{
	const sw_rep_run *a = x, *b = y;
	if (a->meta.params != b->meta.params)
		return a->meta.params < b->meta.params ? -1 : 1;
	int c = strcmp(a->meta.model, b->meta.model);
	if (!c && a->gkey && b->gkey)
		c = strcmp(a->gkey, b->gkey);
	return c ? c : strcmp(a->file, b->file);
}

/* A file named twice (or named and found in a directory) counts once. */
static void
rep_once(sw_rep_list *runs)
{
	for (size_t i = 0; i < runs->n; i++) {
		sw_rep_run *a = &runs->v[i];
		for (size_t k = 0; !a->reason[0] && a->ino && k < i; k++) {
			const sw_rep_run *b = &runs->v[k];
			if (!b->reason[0] && b->dev == a->dev && b->ino == a->ino)
				snprintf(a->reason, sizeof(a->reason), "the same file as %s", b->file);
		}
	}
}

/* Whether two runs measure the same thing (kind, probe keys, fixed-probe
 * setting and with it the split form). */
static int
rep_same_setup(const sw_rep_run *a, const sw_rep_run *b)
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
rep_majority(sw_rep_list *runs)
{
	const sw_rep_run *best = NULL;
	size_t best_n = 0;
	for (size_t i = 0; i < runs->n; i++) {
		const sw_rep_run *a = &runs->v[i];
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
		sw_rep_run *a = &runs->v[i];
		if (a->reason[0] || rep_same_setup(a, best))
			continue;
		char *r = a->reason;
		size_t len = sizeof(a->reason), n = 0;
		n += (size_t)snprintf(r + n, len - n, "not comparable with the family's majority "
		    "(%zu run%s):", best_n, best_n == 1 ? "" : "s");
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

static void
group_values(const sw_attrib *m, double *v)
{
	v[SW_G_PDH] = m->path.dH;
	v[SW_G_PSINK] = m->path.sink;
	v[SW_G_PCONT] = m->path.content;
	v[SW_G_PSSH] = m->path_sink_share;
	v[SW_G_PCSH] = m->path_content_share;
	v[SW_G_EDH] = m->endpoint.dH;
	v[SW_G_ESINK] = m->endpoint.sink;
	v[SW_G_ECONT] = m->endpoint.content;
	v[SW_G_ESSH] = m->end_sink_share;
	v[SW_G_ECSH] = m->end_content_share;
}

/* The mean and sample standard deviation of each figure over g's runs. */
static void
group_stats(sw_rep_run *const *cmp, sw_rep_group *g)
{
	double *v = malloc(g->n * sizeof(double) + 1), row[SW_G_N];
	for (int f = 0; f < SW_G_N; f++) {
		for (size_t k = 0; v && k < g->n; k++) {
			group_values(&cmp[g->member[k]]->agg.model, row);
			v[k] = row[f];
		}
		size_t used;
		if (v)
			sw_mean_sd(v, g->n, &g->mean[f], &g->sd[f], &used);
		else
			g->mean[f] = g->sd[f] = NAN;
	}
	free(v);
}

/* Groups of two or more runs with the same values of the group keys (by
 * default model name and params), in the order of their first run.
 * Returns their count, or -1 out of memory. */
static long
rep_groups(sw_rep_run *const *cmp, size_t n, sw_rep_group *g)
{
	size_t ng = 0;
	char *done = calloc(n + 1, 1);
	if (!done)
		return -1;
	for (size_t i = 0; i < n; i++) {
		size_t c = 0;
		if (done[i])
			continue;
		for (size_t k = i; k < n; k++)
			c += !done[k] && !strcmp(cmp[k]->gkey, cmp[i]->gkey);
		if (c < 2)
			continue;
		if (!(g[ng].member = malloc(c * sizeof(size_t)))) {
			free(done);
			return -1;
		}
		g[ng].n = 0;
		for (size_t k = i; k < n; k++)
			if (!done[k] && !strcmp(cmp[k]->gkey, cmp[i]->gkey)) {
				done[k] = 1;
				g[ng].member[g[ng].n++] = k;
			}
		group_stats(cmp, &g[ng]);
		ng++;
	}
	free(done);
	return (long)ng;
}

int
sw_report_many_build(sw_report_many *m, char **paths, size_t np, const sw_rep_opts *o)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < np; i++) {
		struct stat sb;
		if (stat(paths[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
			if (rep_scan_dir(paths[i], o, &m->runs, &m->skipped) != 0)
				return -1;
			continue;
		}
		sw_rep_run *e = rep_add(&m->runs, paths[i]);
		if (!e)
			return -1;
		rep_load(e, o);
	}
	for (size_t i = 0; i < m->runs.n; i++)
		if (rep_gkey(&m->runs.v[i], o) != 0)
			return -1;
	if (m->runs.n > 1)	/* runs.v is NULL when no run was found */
		qsort(m->runs.v, m->runs.n, sizeof(*m->runs.v), rep_cmp);
	rep_exclude(&m->runs, o);
	rep_once(&m->runs);
	rep_majority(&m->runs);
	if (!(m->cmp = malloc((m->runs.n + 1) * sizeof(*m->cmp))) ||
	    !(m->g = calloc(m->runs.n + 1, sizeof(*m->g))))
		return -1;
	for (size_t i = 0; i < m->runs.n; i++)
		if (!m->runs.v[i].reason[0])
			m->cmp[m->n++] = &m->runs.v[i];
	long ng = rep_groups(m->cmp, m->n, m->g);
	if (ng < 0)
		return -1;
	m->ng = (size_t)ng;
	return 0;
}

void
sw_report_many_free(sw_report_many *m)
{
	free(m->cmp);
	for (size_t k = 0; m->g && k < m->runs.n + 1; k++)
		free(m->g[k].member);
	free(m->g);
	rep_list_free(&m->runs);
	rep_list_free(&m->skipped);
	memset(m, 0, sizeof(*m));
}
