/*
 * swreport.h: the report model. What `sinkwatch report` shows of one run
 * file, or of several compared, is built here once from the run
 * aggregation (runagg.h): the run's identity and setup, its rows, segments
 * (incarnations and resumes) and superseded rows, its senders and the
 * ranks that never ended, the range's attribution per layer and head, the
 * ranking and the series. The JSON of one run is written by one function,
 * sw_report_json_run, which `sinkwatch report --format json` and `sinkwatch
 * serve` (/api/report, the static export) both call; the text and CSV of
 * `sinkwatch report` render the same structures (report_text.c,
 * report_csv.c).
 */
#ifndef SW_REPORT_H
#define SW_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "report/runagg.h"

struct sw_json;

enum sw_rep_fmt { SW_REP_TEXT, SW_REP_JSON, SW_REP_CSV };

/*
 * The run attributes several runs can be grouped by (--group-by), in the
 * order sinkwatch(1) lists them: model name, parameter count, run id, the
 * directory of the file, the input kind, the probe's keys, the fixed-probe
 * setting, the split form, layers, heads, the file's generation.
 */
#define SW_GROUP_KEYS(X) X(MODEL, "model") X(PARAMS, "params") X(RUN, "run") \
	X(DIR, "dir") X(KIND, "kind") X(KEYS, "keys") X(PROBE, "probe") X(FORM, "form") \
	X(LAYERS, "layers") X(HEADS, "heads") X(GENERATION, "generation")
enum sw_group_key {
#define X(id, name) SW_GK_##id,
	SW_GROUP_KEYS(X)
#undef X
	SW_GK__N
};
extern const char *const sw_group_key_names[SW_GK__N];

/* What was asked for: the range, and what to show of each run. */
typedef struct sw_rep_opts {
	enum sw_rep_fmt fmt;
	int series, per_layer, per_head;
	double eps;
	sw_range_req range;
	/* several runs: the group keys in the order given (ngroup 0: model,
	 * params), and the run-id patterns (fnmatch) left out; exclude is the
	 * caller's */
	int ngroup;
	enum sw_group_key group[SW_GK__N];
	const char *const *exclude;
	size_t nexclude;
} sw_rep_opts;

/* Options that cannot go together, or out of range (--last with --from,
 * --last < 0, eps not a finite number >= 0): -1 with err naming the
 * option, as the command line says it. */
int sw_rep_opts_check(const sw_rep_opts *o, char *err, size_t errlen);
/* --last N below 1, as given (its text): the refusal's words. */
#define SW_REP_LAST_BAD "--last: '%s' is not a positive number of steps"
/*
 * Parses a --group-by list ("model,params,run") into o (a key named twice
 * counts once). 0, or -1 with err naming the unknown key and the known ones.
 */
int sw_rep_group_parse(const char *list, sw_rep_opts *o, char *err, size_t errlen);
/* The keys in effect (o->group, or the default) into keys; their count. */
int sw_rep_group_keys(const sw_rep_opts *o, enum sw_group_key keys[SW_GK__N]);
struct sw_rep_run;
/* Run e's value of key k as text (the dir of "a/b.h5" is "a", of "b.h5" "."). */
void sw_rep_group_value(const struct sw_rep_run *e, enum sw_group_key k, char *buf,
    size_t len);

/* The classification and ranking rules, as sinkwatch(1) states them. */
#define SW_REP_CLASS_RULE "on the path split, eps in nats: stable |dH| < eps; rise dH >= eps; " \
	"sink dH <= -eps, sink part <= -eps and content part > -eps; content dH <= -eps, " \
	"content part <= -eps and sink part > -eps; both any other drop (both parts " \
	"negative); none no interval with a value"
#define SW_REP_RANK_RULE "at the last step of the range, over the heads with a value there: " \
	"rank 1 the lowest, ties their mean rank; rank_entropy by whole-row entropy, " \
	"rank_content by content entropy (the sink dropped); rho is Spearman's"
#define SW_REP_SPREAD "sample standard deviation (n - 1) over the runs of the group"

/*
 * The file's sender table (PROTOCOL.md 7b): every sender's counters and
 * the ranks of a several-sender incarnation that never sent their end. A
 * table that cannot be read is said (err), never taken for an empty one.
 */
typedef struct sw_rep_senders {
	uint64_t *t;		/* [n * SW_SENDER_FIELDS] */
	int64_t n;
	size_t nf;		/* the fields the file has */
	sw_open_rank *open;	/* [nopen] */
	int64_t nopen;
	int64_t several, disagree, missing;	/* several-sender rows, their sums */
	char err[512];		/* "" when read */
} sw_rep_senders;

/* What a report shows of one run; the run file itself may be closed. */
typedef struct sw_rep_run {
	char *file;
	sw_runmeta meta;	/* its string pointers cleared: kind, form below */
	char kind[16];
	int64_t steps_stored, rows, superseded, lost, incomplete;
	int ended;		/* the run's end mark: 1 ended, 0 never ended (killed or
				 * still running), -1 unreadable */
	int have_agg, have_rank;
	int agg_borrowed;	/* agg is the caller's (not freed here) */
	sw_agg agg;
	sw_ranking rank;
	dev_t dev;		/* the file, to see it named twice */
	ino_t ino;
	char reason[768];	/* why it is not compared; "" when it is */
	char *gkey;		/* several runs: its group keys' values, joined (malloc'd) */
} sw_rep_run;

void sw_rep_run_free(sw_rep_run *e);
/* e's identity and counters from an open run. */
void sw_rep_take_meta(sw_rep_run *e, const sw_run *run);
/* The range's figures (cached: the caller's aggregation of that range,
 * borrowed, or NULL); -1 with the reason in e. */
int sw_rep_compute(sw_rep_run *e, sw_run *run, const sw_rep_opts *o, const sw_range *rg,
    const sw_agg *cached);

/* The report of one open run file: the run's figures, its segments, its
 * senders and, when asked, its series. */
typedef struct sw_report {
	sw_rep_run e;
	const sw_run *run;	/* open while the report is rendered */
	const sw_rep_opts *o;
	sw_rep_senders snd;
	int have_ser;
	sw_series ser;
} sw_report;

/*
 * Builds the report of run over range rg (a range of its view), the file
 * named file. cached: the aggregation of that range when the caller holds
 * one (borrowed, not freed), else NULL. 0, or -1 with err.
 */
int sw_report_build(sw_report *m, sw_run *run, const char *file, const sw_rep_opts *o,
    const sw_range *rg, const sw_agg *cached, char *err, size_t errlen);
void sw_report_free(sw_report *m);
/*
 * The report of an open run over the range o asks for, as `sinkwatch report
 * FILE` makes it: refused (-1, err) when the run or the range holds fewer
 * than the two stored steps an attribution needs (one with series). The
 * command line and the reader's library (sinkwatch/reader.h) both call it.
 */
int sw_report_of_run(sw_report *m, sw_run *run, const char *file, const sw_rep_opts *o,
    char *err, size_t errlen);

/*
 * The mean sink mass over the heads of layer l (l == a->L: every head of
 * the model) at the range's first and last step, over the heads with a
 * value there (METRICS.md §2; the series' head means at the range's ends).
 * NaN when no head has one.
 */
void sw_rep_sink_mass(const sw_agg *a, size_t l, double *first, double *last);

/* The sender table of r into s (s->err says why when it cannot be read). */
void sw_rep_senders_read(sw_reader *r, sw_rep_senders *s);
void sw_rep_senders_free(sw_rep_senders *s);

/*
 * The JSON of one run's report, as members of the open object j: the
 * keys of `sinkwatch report FILE --format json` in its order. A caller may
 * add keys of its own before or after (serve: id, dir, state, ...).
 */
void sw_report_json_run(struct sw_json *j, const sw_report *m);

/*
 * The JSON of an open run with no range (the reader's run.info,
 * sinkwatch/reader.h): its identity and setup, its rows, view and
 * segments, resume records and sender table, as members of the open
 * object j; the keys a report has too are the report's.
 */
void sw_report_json_info(struct sw_json *j, const sw_run *run, const sw_rep_senders *snd);

/* The text of `sinkwatch report FILE` and its CSV (header and lines), on
 * stdout (report_text.c, report_csv.c). */
void sw_report_text_run(const sw_report *m);
void sw_report_csv_run(const sw_report *m);

/* ---- several runs ---------------------------------------------------------------- */

typedef struct sw_rep_list {
	sw_rep_run *v;
	size_t n, cap;
} sw_rep_list;

/* The ten figures a group line summarizes, in this order. */
enum { SW_G_PDH, SW_G_PSINK, SW_G_PCONT, SW_G_PSSH, SW_G_PCSH, SW_G_EDH, SW_G_ESINK,
	SW_G_ECONT, SW_G_ESSH, SW_G_ECSH, SW_G_N };

/* A group: the compared runs cmp[member[0 .. n)] (the same value of each
 * group key, in table order); mean and sample standard deviation of each
 * figure. */
typedef struct sw_rep_group {
	size_t *member, n;
	double mean[SW_G_N], sd[SW_G_N];
} sw_rep_group;

/* The report of several files or directories: the runs found (compared
 * or with their reason), the files skipped, the compared runs in order
 * and their groups. */
typedef struct sw_report_many {
	sw_rep_list runs, skipped;
	sw_rep_run **cmp;
	size_t n;
	sw_rep_group *g;
	size_t ng;
} sw_report_many;

/* Builds the report of paths (files or directories). 0, or -1 out of memory. */
int sw_report_many_build(sw_report_many *m, char **paths, size_t np, const sw_rep_opts *o);
void sw_report_many_free(sw_report_many *m);

/* The JSON of several runs' report, one whole document. */
void sw_report_json_many(struct sw_json *j, const sw_report_many *m, const sw_rep_opts *o);

/* The text table and the CSV of several runs, on stdout. */
void sw_report_text_many(const sw_report_many *m, const sw_rep_opts *o);
void sw_report_csv_many(const sw_report_many *m, const sw_rep_opts *o);

#endif
