/*
 * serve.h: `sinkwatch serve`, a read-only web dashboard over run files.
 *
 * serve.c holds the runs (a cache of open readers, one per file, all used
 * from one thread: HDF5 is not thread-safe here) and answers the JSON and
 * CSV of the page from the one run aggregation (report/runagg.h) and the
 * report model (report/swreport.h: /api/report is sw_report_json_run);
 * serve_http.c is the HTTP side (libmicrohttpd with one internal thread, which is the
 * thread that calls sw_srv_api, hence the only one touching HDF5), with the
 * security rules: loopback by default, the Host check, the access token,
 * GET and HEAD only, a fixed set of static names.
 */
#ifndef SW_SERVE_H
#define SW_SERVE_H

#include <stddef.h>

typedef struct sw_srv sw_srv;

/* dirs: the data directories, in order (a run's id is "D/FILE", D its
 * index). stale_s: a run with no end mark and no step for this long is
 * interrupted. NULL when out of memory. */
sw_srv *sw_srv_new(char **dirs, size_t ndirs, double stale_s);
void sw_srv_free(sw_srv **s);

/* A reply: status, content type and a malloc'd body the caller frees. */
typedef struct sw_reply {
	int status;
	const char *type;
	char *body;
	size_t len;
	char disposition[160];	/* a Content-Disposition value, or "" */
} sw_reply;

/* Query argument key of the request, NULL when absent. */
typedef const char *(*sw_arg_fn)(void *ctx, const char *key);

/*
 * Answers GET path (under /api/) with its query arguments. Always fills
 * out (404, 400, 500 with a JSON {"error": ...} body where it fails);
 * returns -1 only when out of memory (out->body NULL).
 */
int sw_srv_api(sw_srv *s, const char *path, sw_arg_fn arg, void *ctx, sw_reply *out);

/*
 * The ids of the runs named (a run name, a file name or an id; every run
 * when nnames is 0), in the run list's order; from then on the run list
 * (/api/runs) holds these alone. 0, or -1 with err naming a name that
 * matches no run. *ids belongs to s (freed by sw_srv_free).
 */
int sw_srv_pick(sw_srv *s, char **names, size_t nnames, char ***ids, size_t *nids,
    char *err, size_t errlen);

/* Opens the reader of every run file the run list shows (what its first
 * request would do), so that the first answers from open readers. */
void sw_srv_warm(sw_srv *s);

/* The layer count of run id, -1 when it cannot be read. */
long sw_srv_layers(sw_srv *s, const char *id);

/* The page's files beside the embedded ones: the dygraphs library. */
typedef struct sw_page_lib {
	const char *js, *css;
	size_t js_len, css_len;
} sw_page_lib;

/*
 * Writes a static copy of the runs ids (sw_srv_pick's) to directory dir
 * (made when missing): the page, the library, and under static/ the JSON
 * the server would answer (the run list, the compare table of all of them,
 * each run's series per layer and its whole-run report) as scripts the
 * page loads from file://. 0, or -1 with err naming the file that failed.
 */
int sw_srv_export(sw_srv *s, const char *dir, char **ids, size_t nids, const sw_page_lib *lib,
    char *err, size_t errlen);
/* Whether the JSON names each data directory by its base name alone (the
 * export's, so that no path of this machine goes into the copy) or as
 * given (the server's). */
void sw_srv_dir_base(sw_srv *s, int on);

int sw_serve_main(int argc, char **argv);

#endif
