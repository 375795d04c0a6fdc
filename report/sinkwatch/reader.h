/*
 * sinkwatch/reader.h: a run file read the way `sinkwatch report` reads it,
 * for bindings (the Python package's sinkwatch.reader loads this library,
 * libsinkwatch-report, with ctypes: no compiler at install time).
 *
 * The view (storage/LAYOUT.md: the winning row of every stored step, in
 * step order), the attribution and its JSON are the report library's own
 * (report/), so a binding gives the command line's numbers by
 * construction. Plain C types only: JSON text for what is structured,
 * arrays of double for the series.
 *
 * Errors: NULL or -1, with a message in the caller's err[errlen]. Strings
 * and arrays returned are malloc'd: free them with swr_free. A run handle
 * is used by one thread at a time; a process opens a file once at a time
 * (HDF5 shares an open file).
 */
#ifndef SINKWATCH_READER_H
#define SINKWATCH_READER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface's version: a binding checks it before any other call. */
#define SWR_ABI 1
int swr_abi(void);
/* The package version the library was built from ("0.9.0"). */
const char *swr_version(void);

typedef struct swr_run swr_run;

/* Opens a run file for SWMR reading (a daemon may be writing it). */
swr_run *swr_open(const char *path, char *err, size_t errlen);
void swr_close(swr_run *r);

/*
 * Reads what a writer committed since the open or the last refresh
 * (LAYOUT.md's reader rules). 1: rows were added (the view is built
 * again), 0: none, -1 with err (the run stays as it was).
 */
int swr_refresh(swr_run *r, char *err, size_t errlen);

/*
 * The run as JSON: its identity and setup (run, model, params, layers,
 * heads, sink, kind, split_form, probe rows and keys, dtype, generation,
 * layout version, row_stats), rows (committed), steps (in the view),
 * superseded, segments, resumes, ended, lost, incomplete, and "fields":
 * the series the file holds, each with its dims and its shape per step.
 */
char *swr_info_json(swr_run *r, char *err, size_t errlen);

/* The view's length (stored steps), or of the rows as stored. */
int64_t swr_steps(const swr_run *r);
int64_t swr_rows(const swr_run *r);

/*
 * The view into step[n], row[n] (the winning committed row of each step)
 * and inc[n] (its incarnation); n must be swr_steps(r). -1 otherwise.
 */
int swr_view(const swr_run *r, int64_t *step, int64_t *row, uint64_t *inc, int64_t n);

/* The incarnation of every committed row, as stored: inc[n], n must be
 * swr_rows(r) (exact: a double would round those above 2^53). */
int swr_row_inc(const swr_run *r, uint64_t *inc, int64_t n);

/*
 * Series name (a dataset of /step's length: "entropy", "row_sink_mass",
 * "missing", ...) as doubles, C order: with view 1 the view's rows in step
 * order [swr_steps, shape...], with view 0 every committed row as stored
 * [swr_rows, shape...]. *count the doubles returned; NULL with err.
 */
double *swr_series(swr_run *r, const char *name, int view, int64_t *count, char *err,
    size_t errlen);

/*
 * `sinkwatch report FILE --format json`: the same document, byte for
 * byte, over the range from .. to (has_from, has_to 0: not given), or the
 * last `last` steps (has_last 0: not asked; below 1 refused as --last is),
 * with per_layer, per_head and series
 * as their options, eps in nats (NaN: the default). NULL with err where
 * the command line refuses (its message, without "sinkwatch report: ").
 */
char *swr_report_json(swr_run *r, int has_from, int64_t from, int has_to, int64_t to,
    int has_last, int64_t last, int per_layer, int per_head, int series, double eps, char *err,
    size_t errlen);

/*
 * `sinkwatch report PATH... --format json` for several files or
 * directories, group_by as --group-by (NULL: the default), exclude[nexclude]
 * as --exclude: the compared runs, their groups and the files not
 * compared (with no run to compare too: the command line's exit status
 * 2 is the caller's "runs" being empty). NULL with err (the options, out
 * of memory).
 */
char *swr_report_many_json(const char *const *paths, size_t np, int has_from, int64_t from,
    int has_to, int64_t to, int has_last, int64_t last, int per_layer, int per_head, double eps,
    const char *group_by, const char *const *exclude, size_t nexclude, char *err,
    size_t errlen);

void swr_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
