/*
 * runagg.h: the one run aggregation. A run file is read into its view
 * (storage/LAYOUT.md: the winning row of each stored step, in step order),
 * and over a range of view steps the entropy change of every head is split
 * into its sink and content parts (METRICS.md §3): path (summed over
 * adjacent stored steps) and endpoint (the range's two end steps), per
 * head, per layer and for the model; the intervals that touch an
 * incomplete step are counted and named; per head, a classification and
 * the entropy rankings a pruning study would use; the series the
 * dashboard plots. No printing: `sinkwatch report` (text, JSON, CSV), the
 * dashboard's JSON and any other reader call these and format what they
 * get.
 *
 * Errors: -1 and a message in the caller's buffer; memory the calls
 * allocate is freed by the matching *_free / sw_run_close.
 */
#ifndef SW_RUNAGG_H
#define SW_RUNAGG_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/swm.h"
#include "storage/runfile.h"

/* Per-row columns read from the file, each over every committed row. */
enum sw_run_col {
	SW_RC_ENTROPY, SW_RC_SINK_ENTROPY, SW_RC_SINK_MASS, SW_RC_CONTENT_MASS,
	SW_RC_CONTENT_ENTROPY_MW, SW_RC_CONTENT_ENTROPY, SW_RC_ROWS,	/* [T * L * H] */
	SW_RC_MISSING_RANK,	/* [T * L * H], layout 3; NULL before */
	SW_RC_MISSING,		/* [T * L] */
	SW_RC_LOST, SW_RC_INCOMPLETE,	/* [T] */
	SW_RC_DRIFT_SINK, SW_RC_DRIFT_CONTENT,	/* [T * L * H] */
	SW_RC_FLIP,		/* [T * L * 3]: cosine, js, entropy (flip_fields) */
	SW_RC_PREV_ROW,		/* [T]: the row drift was taken against, layout 2 */
	SW_RUN_COLS
};

/*
 * An open run: the reader, the run's attributes, its view and the columns
 * above. One per file at a time in a process (sw_reader_open's rule).
 */
typedef struct sw_run {
	char *path;
	sw_reader *reader;
	sw_runmeta meta;
	int64_t T;		/* committed rows */
	sw_rows rows;
	sw_view view;
	size_t L, H, LH;
	double *col[SW_RUN_COLS];	/* indexed by committed row (view.row[k]) */
	int64_t lost, incomplete;	/* the file's counters as of its last row */
} sw_run;

/*
 * Opens path, refreshes it, builds the view and reads the columns. Returns
 * 0 and *out (the caller closes it with sw_run_close), or -1 with err.
 */
int sw_run_open(const char *path, sw_run **out, char *err, size_t errlen);
void sw_run_close(sw_run **run);

/*
 * Reads what was committed since the open or the last refresh: the new
 * rows of every column, the rows and the view again. Returns 1 when rows
 * were added, 0 when none, -1 with err (the run stays as it was). Pointers
 * into run->view and run->col are invalid after a return of 1.
 */
int sw_run_refresh(sw_run *run, char *err, size_t errlen);

/*
 * The view indices of the stored steps in [from, to]: *k0 the first at or
 * after from, *k1 the last at or before to. 0, or -1 when none is there.
 */
int sw_run_span(const sw_run *run, int64_t from, int64_t to, int64_t *k0, int64_t *k1);

/* The view index of step, or -1 when the view does not hold it. */
int64_t sw_run_find(const sw_run *run, int64_t step);

/* ---- ranges ---------------------------------------------------------------- */

/*
 * What the user asked for: --from STEP, --to STEP, --last N (the last N
 * stored steps, up to --to when given). Nothing set: the whole view.
 */
typedef struct sw_range_req {
	int has_from, has_to;
	int64_t from, to;
	int64_t last;		/* 0: not asked (has_last 0) */
	int has_last;		/* --last given: last must be >= 1 (sw_rep_opts_check) */
} sw_range_req;

/* A range of the view: view indices k0 .. k1, inclusive. */
typedef struct sw_range {
	int64_t k0, k1;
} sw_range;

/*
 * Resolves a request against the view. Returns 0; SW_RANGE_NOT_STORED when
 * --from or --to names a step the view does not hold (err names the
 * nearest stored steps); -1 for any other refusal (err: an empty view,
 * --from after --to, --last larger than the steps there are).
 */
#define SW_RANGE_NOT_STORED (-2)
int sw_run_range(const sw_run *run, const sw_range_req *q, sw_range *out, char *err,
    size_t errlen);

/* ---- the attribution ---------------------------------------------------------- */

/*
 * Path and endpoint splits of one head, or the mean of heads (layer,
 * model). Shares are swm_split_shares' (NaN unless dH < 0). intervals:
 * for a head, the intervals whose split has a value; for a layer or the
 * model, the sum over its heads that have any, divided by their number
 * (integer division: what `sinkwatch report` has always said).
 */
typedef struct sw_attrib {
	swm_split path, endpoint;
	double path_sink_share, path_content_share, end_sink_share, end_content_share;
	int64_t intervals;
} sw_attrib;

/* A head's values at one step (METRICS.md §2), NaN when rows is 0. */
typedef struct sw_head_at {
	double s, w, H, hb, Hc, Hcw;
	int64_t rows;
} sw_head_at;

/*
 * What a stored step lacks: layers never received (`missing`), heads
 * missing (layout 3 `missing_rank` != -1; before, the heads of missing
 * layers) and heads without a valid row (`rows` 0: missing, or every row
 * rejected). A step with any of them is incomplete.
 */
#define SW_GAP_RANKS 8
typedef struct sw_step_gap {
	int64_t k;		/* view index */
	int64_t step;
	int64_t layers_missing, heads_missing, heads_without_rows;
	int32_t *layers;	/* [layers_missing] which */
	int nranks;		/* distinct ranks missing_rank names (>= 0), the first */
	int32_t ranks[SW_GAP_RANKS];	/* SW_GAP_RANKS of them, ascending */
} sw_step_gap;

/* Per-head classification of the path split (METRICS.md §3), eps in nats. */
typedef enum sw_head_class {
	SW_CLASS_NONE,		/* no interval with a value */
	SW_CLASS_STABLE,	/* |dH| < eps */
	SW_CLASS_RISE,		/* dH >= eps */
	SW_CLASS_SINK,		/* dH <= -eps, sink part <= -eps, content part > -eps */
	SW_CLASS_CONTENT,	/* dH <= -eps, content part <= -eps, sink part > -eps */
	SW_CLASS_BOTH,		/* dH <= -eps otherwise: both parts negative */
	SW_CLASS__N
} sw_head_class;
#define SW_CLASS_EPS_DEFAULT 0.01
const char *sw_head_class_name(sw_head_class c);
sw_head_class sw_head_classify(const sw_attrib *a, double eps);

typedef struct sw_agg {
	size_t L, H, LH;
	sw_range range;
	int64_t first_step, last_step, steps;	/* the range's */
	int64_t *step;		/* [steps] its view steps */
	int paired;		/* 1: both splits in the paired form (row statistics) */
	const char *form;	/* "paired" or "aggregate", path and endpoint alike */
	sw_attrib *head;	/* [LH] */
	sw_attrib *layer;	/* [L] */
	sw_attrib model;
	sw_head_at *first, *last;	/* [LH] the head values at the range's ends */
	int64_t intervals;	/* view intervals in the range, steps - 1 */
	int64_t intervals_incomplete;	/* those with an incomplete step at either end */
	int64_t ngaps;		/* incomplete steps in the range */
	sw_step_gap *gaps;	/* [ngaps] in step order */
	/* with want_series: the interval into range step j, per head:
	 * parts[(j * LH + i) * 2 + {0 sink, 1 content}], NaN for j = 0 and
	 * where the split has no value */
	double *parts;
} sw_agg;

/*
 * The attribution of run over range: path sums over consecutive view
 * steps (paired from the row statistics where the file has them, else
 * aggregate from the head values), the endpoint split of the two end
 * steps (same form), layer and model means of the head figures (§3). 0,
 * or -1 with err. sw_agg_free frees what it holds.
 */
int sw_agg_compute(sw_run *run, const sw_range *range, int want_series, sw_agg *out,
    char *err, size_t errlen);
void sw_agg_free(sw_agg *a);

/* Whether interval j of the range (into range step j, 1 <= j < steps) is
 * incomplete: either of its steps is. */
int sw_agg_interval_incomplete(const sw_agg *a, int64_t j);

/*
 * Whether the stored drift of view step k holds for the view: its row's
 * prev_row is the winning row of view step k - 1 (LAYOUT.md, "the view").
 * A row taken against another step (another incarnation's row, a row the
 * view does not keep, or none) has no drift for the view: a gap. Layout 1
 * has no prev_row: there the row written just before must be view step
 * k - 1's.
 */
int sw_run_drift_ok(const sw_run *run, int64_t k);

/*
 * The series a chart plots, per range step: for each layer and the model
 * (index L, over all heads) the head means of sink_mass and entropy
 * (finite values; NaN if none), the same of content_entropy, drift_sink
 * and drift_content (METRICS.md §4; NaN where sw_run_drift_ok is not),
 * and the running sums of the interval
 * parts from the range's first step (an interval without a value counting
 * as 0, mean over the heads). Each array is [(L + 1) * steps],
 * layer-major. flip: the stored flip rates of §5, [(L + 1) * steps * 3]
 * (cosine, js, entropy), the model's the mean of the layers' finite ones.
 * Needs want_series.
 */
#define SW_FLIP_METRICS 3
typedef struct sw_series {
	size_t n, layers;	/* steps, L */
	int64_t *step;		/* [n] */
	double *sink_mass, *entropy, *cum_sink, *cum_content;
	double *content_entropy;	/* head means of H̄c (NaN before layout 2) */
	double *drift_sink, *drift_content;
	double *flip;
} sw_series;
int sw_agg_series(const sw_run *run, const sw_agg *a, sw_series *out, char *err,
    size_t errlen);
void sw_series_free(sw_series *s);

/*
 * The rankings a pruning study would use, at the range's last step, over
 * the heads with a finite entropy and content entropy there: rank 1 the
 * lowest, ties given their mean rank. rank_entropy by whole-row entropy
 * H̄, rank_content by content entropy H̄c (the sink dropped, METRICS.md
 * §5); NaN for a head not ranked. rho: Spearman's rank correlation of the
 * two (the Pearson correlation of the ranks), NaN under two heads or
 * without spread.
 */
typedef struct sw_ranking {
	size_t ranked;
	double *rank_entropy, *rank_content;	/* [LH] */
	double rho;
	size_t nmoved;
	size_t *moved;		/* [nmoved] heads by |rank shift|, largest first (ties:
				 * layer, head), those that move, at most SW_RANK_MOVED */
} sw_ranking;
#define SW_RANK_MOVED 5
int sw_agg_rank(const sw_agg *a, sw_ranking *out);
void sw_ranking_free(sw_ranking *r);

/* ---- senders ---------------------------------------------------------------------- */

/*
 * The ranks that never ended (PROTOCOL.md 7b.6), from the sender table t
 * [n rows of SW_SENDER_FIELDS] (sw_reader_senders): for every incarnation
 * of several senders in the table, each rank 0 .. senders - 1 without a
 * row that says ended. A rank that never sent has no row: it is named all
 * the same (sent 0), and so is the second of two processes that both
 * claimed one rank (one row, so the other rank has none). senders: the
 * largest the incarnation's rows say. Sorted by incarnation, then rank.
 * Returns the count and *out (malloc'd, the caller frees it; NULL for
 * none), or -1 out of memory.
 */
typedef struct sw_open_rank {
	uint64_t inc;
	uint32_t rank, senders;
	int sent;		/* 1: the rank has a row (it sent), 0: none */
} sw_open_rank;
int64_t sw_ranks_not_ended(const uint64_t *t, int64_t n, sw_open_rank **out);

/* ---- families of runs ------------------------------------------------------------ */

/* Mean of the finite values of v[0 .. n). NaN if none. */
double sw_finite_mean(const double *v, size_t n);

/* Mean and sample standard deviation (n - 1) of the finite values of
 * v[0 .. n); *used their count. NaN when none (sd: under two). */
void sw_mean_sd(const double *v, size_t n, double *mean, double *sd, size_t *used);

/* One split's JSON keys (path, endpoint), as `sinkwatch report --format json` names them. */
struct sw_json;
void sw_json_attrib(struct sw_json *j, const sw_attrib *a);
/*
 * The series of layer l (l == layers: the model) over its first n steps,
 * as members of the open object: sink_mass, entropy, content_entropy,
 * cum_sink, cum_content, drift_sink, drift_content, flip_cosine, flip_js,
 * flip_entropy (report --series and serve's /api/series).
 */
void sw_json_series_layer(struct sw_json *j, const sw_series *s, size_t l, size_t n);

#endif
