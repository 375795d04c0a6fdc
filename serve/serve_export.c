/*
 * serve_export.c: `sinkwatch serve --export DIR` (serve.h): a static copy
 * of chosen runs that a browser opens from file:// with no server. Every
 * number in it is a reply of sw_srv_api, the server's own JSON, written
 * as scripts the page loads (a page from file:// may not fetch, but it
 * may load a script): static/data.js sets window.SW_STATIC (the run list,
 * where each run's file is), static/run-N.js and static/compare.js call
 * SW_STATIC_ADD when loaded. What needs the server (the report of a
 * zoomed range, the live updates, CSV) the page says it lacks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "report/json.h"
#include "serve/serve.h"
#include "serve/serve_assets.h"

/* The query of an exported request: key, value pairs, NULL-ended. */
static const char *
kv_arg(void *ctx, const char *key)
{
	for (const char *const *p = ctx; p[0]; p += 2)
		if (!strcmp(p[0], key))
			return p[1];
	return NULL;
}

struct xfile {
	FILE *f;
	char path[4096];
};

static int
x_open(struct xfile *x, const char *dir, const char *name, char *err, size_t errlen)
{
	if ((size_t)snprintf(x->path, sizeof(x->path), "%s/%s", dir, name) >= sizeof(x->path)) {
		snprintf(err, errlen, "%s/%s: path too long", dir, name);
		return -1;
	}
	if (!(x->f = fopen(x->path, "w"))) {
		snprintf(err, errlen, "%s: %s", x->path, strerror(errno));
		return -1;
	}
	return 0;
}

static int
x_close(struct xfile *x, char *err, size_t errlen)
{
	int bad = ferror(x->f);
	if (fclose(x->f) != 0 || bad) {
		snprintf(err, errlen, "%s: %s", x->path, strerror(errno ? errno : EIO));
		return -1;
	}
	return 0;
}

static int
x_write(const char *dir, const char *name, const void *data, size_t len, char *err,
    size_t errlen)
{
	struct xfile x;
	if (x_open(&x, dir, name, err, errlen) != 0)
		return -1;
	fwrite(data, 1, len, x.f);
	return x_close(&x, err, errlen);
}

/* The body of GET path?kv, as the server answers it, into f. A reply
 * that is an error is written too: it holds {"error": ...}, which the page
 * shows. */
static int
x_api(FILE *f, sw_srv *s, const char *path, const char *const *kv, char *err, size_t errlen)
{
	sw_reply r;
	memset(&r, 0, sizeof(r));
	if (sw_srv_api(s, path, kv_arg, (void *)kv, &r) != 0 || !r.body) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -1;
	}
	fwrite(r.body, 1, r.len, f);
	free(r.body);
	return 0;
}

/* A JSON string of s (the writer's escaping), into f. */
static void
x_str(FILE *f, const char *key, const char *v)
{
	sw_json j;
	sw_json_init(&j, f);
	sw_json_begin_obj(&j, NULL);
	sw_json_str(&j, key, v);
	sw_json_end_obj(&j);
}

static int
x_mkdir(const char *path, char *err, size_t errlen)
{
	struct stat sb;
	if (mkdir(path, 0755) != 0 && (errno != EEXIST || stat(path, &sb) != 0 ||
	    !S_ISDIR(sb.st_mode))) {
		snprintf(err, errlen, "%s: %s", path, errno == EEXIST ? "not a directory" :
		    strerror(errno));
		return -1;
	}
	return 0;
}

/* static/run-N.js: the run's whole-run report and its series, the model's
 * and each layer's. */
static int
x_run(sw_srv *s, const char *dir, const char *id, size_t n, char *err, size_t errlen)
{
	char name[64], lname[32];
	struct xfile x;
	long L = sw_srv_layers(s, id);

	snprintf(name, sizeof(name), "static/run-%zu.js", n);
	if (x_open(&x, dir, name, err, errlen) != 0)
		return -1;
	fputs("SW_STATIC_ADD(", x.f);
	x_str(x.f, "run", id);
	fputs(", {\n\"report\": ", x.f);
	const char *rq[] = { "id", id, NULL };
	if (x_api(x.f, s, "/api/report", rq, err, errlen) != 0)
		goto fail;
	fputs(", \"series\": {\n\"model\": ", x.f);
	const char *sq[] = { "id", id, "layer", "model", NULL };
	if (x_api(x.f, s, "/api/series", sq, err, errlen) != 0)
		goto fail;
	for (long l = 0; l < L; l++) {
		snprintf(lname, sizeof(lname), "%ld", l);
		fprintf(x.f, ", \"%ld\": ", l);
		sq[3] = lname;
		if (x_api(x.f, s, "/api/series", sq, err, errlen) != 0)
			goto fail;
	}
	fputs("}});\n", x.f);
	return x_close(&x, err, errlen);
fail:
	fclose(x.f);
	return -1;
}

static int
export_copy(sw_srv *s, const char *dir, char **ids, size_t nids, const sw_page_lib *lib,
    char *err, size_t errlen)
{
	char sub[4096];
	struct xfile x;

	if ((size_t)snprintf(sub, sizeof(sub), "%s/static", dir) >= sizeof(sub)) {
		snprintf(err, errlen, "%s: path too long", dir);
		return -1;
	}
	if (x_mkdir(dir, err, errlen) != 0 || x_mkdir(sub, err, errlen) != 0)
		return -1;
	for (const struct sw_asset *a = sw_assets; a->name; a++) {
		char name[300];
		if (!strcmp(a->name, "data.js"))
			continue;	/* written below, with the runs */
		snprintf(name, sizeof(name), "%s%s", strcmp(a->name, "index.html") ? "static/" : "",
		    a->name);
		if (x_write(dir, name, a->data, a->len, err, errlen) != 0)
			return -1;
	}
	if (x_write(dir, "static/dygraph.min.js", lib->js, lib->js_len, err, errlen) != 0 ||
	    x_write(dir, "static/dygraph.min.css", lib->css, lib->css_len, err, errlen) != 0)
		return -1;
	for (size_t i = 0; i < nids; i++)
		if (x_run(s, dir, ids[i], i, err, errlen) != 0)
			return -1;
	/* the compare table of them all (at most the 64 the endpoint takes):
	 * the page shows the runs a user picks, in the order given here */
	size_t cap = 1;
	for (size_t i = 0; i < nids; i++)
		cap += strlen(ids[i]) + 1;
	char *all = malloc(cap);
	if (!all) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	all[0] = 0;
	for (size_t i = 0; i < nids; i++) {
		if (i)
			strcat(all, ",");
		strcat(all, ids[i]);
	}
	const char *cq[] = { "ids", all, NULL };
	if (x_open(&x, dir, "static/compare.js", err, errlen) != 0) {
		free(all);
		return -1;
	}
	fputs("SW_STATIC_ADD({\"compare\": true}, ", x.f);
	int rc = x_api(x.f, s, "/api/compare", cq, err, errlen);
	free(all);
	fputs(");\n", x.f);
	if (rc != 0) {
		fclose(x.f);
		return -1;
	}
	if (x_close(&x, err, errlen) != 0)
		return -1;
	/* data.js: the run list and where each run's numbers are */
	if (x_open(&x, dir, "static/data.js", err, errlen) != 0)
		return -1;
	fputs("/* sinkwatch serve --export: a static copy; every number is the server's "
	    "JSON. */\nwindow.SW_STATIC = {\n\"exported\": ", x.f);
	fprintf(x.f, "%.3f,\n\"runs\": ", (double)time(NULL));
	const char *none[] = { NULL };
	if (x_api(x.f, s, "/api/runs", none, err, errlen) != 0) {
		fclose(x.f);
		return -1;
	}
	fputs(", \"files\": [\n", x.f);
	for (size_t i = 0; i < nids; i++) {
		char name[64];
		snprintf(name, sizeof(name), "static/run-%zu.js", i);
		fputs(i ? ",\n" : "", x.f);
		sw_json j;
		sw_json_init(&j, x.f);
		sw_json_begin_obj(&j, NULL);
		sw_json_str(&j, "id", ids[i]);
		sw_json_str(&j, "file", name);
		sw_json_end_obj(&j);
	}
	fputs("]};\n", x.f);
	return x_close(&x, err, errlen);
}

int
sw_srv_export(sw_srv *s, const char *dir, char **ids, size_t nids, const sw_page_lib *lib,
    char *err, size_t errlen)
{
	sw_srv_dir_base(s, 1);	/* the data directories by their base names only */
	int rc = export_copy(s, dir, ids, nids, lib, err, errlen);
	sw_srv_dir_base(s, 0);
	return rc;
}
