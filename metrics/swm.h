/*
 * swm.h: the metric core of sinkwatch, the mathematics of METRICS.md.
 *
 * Pure computation: no I/O, no global state, no allocation. Every function
 * works on memory the caller owns; functions that need scratch space say how
 * much and take it as an argument. Thread-safe for distinct outputs.
 *
 * Section numbers (§) refer to METRICS.md, the metric contract.
 */
#ifndef SWM_H
#define SWM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of METRICS.md these functions implement. */
#define SWM_CONTRACT_VERSION 1

#define SWM_DEFAULT_DELTA 1e-10	/* §4 zero replacement threshold */
#define SWM_TOL_F32 1e-4		/* §1 row-sum tolerance, f32 and f64 */
#define SWM_TOL_F16 1e-2		/* §1 row-sum tolerance, f16 and bf16 */

typedef enum swm_dtype {
	SWM_F32 = 0,
	SWM_F16,
	SWM_BF16,
	SWM_F64,
	SWM_DTYPE__N
} swm_dtype;

typedef enum swm_kind {
	SWM_PROBS = 0,	/* softmax probabilities */
	SWM_LOGITS	/* pre-softmax scores, -inf for masked keys */
} swm_kind;

/* Why a row was not used. SWM_OK is 0; the rest count rejections. */
typedef enum swm_status {
	SWM_OK = 0,
	SWM_REJ_SHORT,		/* fewer than two valid keys */
	SWM_REJ_NOSINK,		/* sink index not among the valid keys */
	SWM_REJ_NONFINITE,	/* NaN or infinite value (logits: NaN, +inf, all -inf) */
	SWM_REJ_NEGATIVE,	/* negative probability */
	SWM_REJ_SUM,		/* probability sum off 1 by more than the tolerance */
	SWM_STATUS__N
} swm_status;

/* Short lower-case name of a status ("ok", "short", ...), never NULL. */
const char *swm_status_name(swm_status st);
/* Name of a dtype ("f32", "f16", "bf16", "f64"), never NULL. */
const char *swm_dtype_name(swm_dtype dt);
/* Bytes per element of a dtype, 0 for an invalid one. */
size_t swm_dtype_size(swm_dtype dt);
/* Element i of x (little-endian, any alignment) as a double. */
double swm_load(const void *x, swm_dtype dt, size_t i);

typedef struct swm_opts {
	double delta;	/* §4 replacement threshold, 0 < delta, delta * n < 1 */
	double tol;	/* §1 row-sum tolerance; < 0 means the dtype's default */
} swm_opts;

/*
 * The instruction set the per-row kernels use: "avx512", "avx2" or
 * "generic" (portable C). Chosen once, at the first use, from what the CPU
 * supports; every choice gives the same results to a few ulps.
 */
const char *swm_isa(void);
/*
 * The precision of the per-element logarithms of the kernels in use
 * (METRICS.md §6, precision budget), every sum in double: "float32" when
 * the head-pair kernel and the f32 row kernel take them in single
 * precision ("float32-pair", "float32-rows": one of the two), "float64"
 * when every logarithm is double. Rows and pairs whose statistics could
 * miss the budget are taken again with double logarithms. Recorded in
 * each run file (log_precision) beside swm_isa() (kernel_isa).
 */
const char *swm_precision(void);
/*
 * Forces the kernels of an instruction set (tests, benchmarks), for every
 * thread; "auto" restores the automatic choice. Returns 0, or -1 when the
 * name is unknown or the CPU lacks the instruction set (nothing changes).
 */
int swm_set_isa(const char *name);

/* Fills *o with the defaults (delta 1e-10, tolerance by dtype). */
void swm_opts_default(swm_opts *o);
/* The tolerance in force for a dtype under *o. */
double swm_opts_tol(const swm_opts *o, swm_dtype dt);

/*
 * Statistics of one row (§1) and its balance (§4). The first seven fields
 * are the contract's values; the rest is the row's normalisation, kept for
 * swm_row_expand().
 */
typedef struct swm_row {
	double s;	/* sink mass a_k */
	double w;	/* content mass, summed from the content entries */
	double H;	/* entropy */
	double hb;	/* binary entropy of the sink split */
	double Hc;	/* content entropy, 0 when w = 0 */
	double C;	/* w * Hc */
	double b;	/* balance of the zero-replaced composition */
	double norm;	/* probs: raw row sum; logits: max logit */
	double lnz;	/* logits: ln sum exp(z - max); probs: 0 */
	double lnscale;	/* ln a~_i = ln x_i + lnscale (probs) or z_i - max + lnscale */
	double thr;	/* probs: raw value below which a part is replaced */
	double lndelta;	/* ln of a replaced part */
	uint32_t n;	/* valid keys */
	uint32_t nrep;	/* parts replaced (probs: below delta; logits: -inf) */
	swm_status status;
} swm_row;

/*
 * Computes the statistics of the row x[0 .. n) of dtype dt and kind kind,
 * with sink index k. One pass over the values, one logarithm (probs) or one
 * exponential (logits, after a pass for the max) per element, double
 * accumulators. Returns the row's status, also stored in out->status; the
 * other fields are valid only when it is SWM_OK.
 */
swm_status swm_row_stats(const void *x, swm_dtype dt, swm_kind kind, size_t n,
    size_t k, const swm_opts *o, swm_row *out);

/*
 * A row given by its statistics, as a client that reduced it on its device
 * sends them (kind "rowstats"): v = { s, w, H, hb, Hc, b }. Checks them as
 * swm_row_stats() checks a row: nonfinite, negative, and |s + w - 1| over
 * tol. The result has no normalisation for swm_row_expand(). Returns the
 * status, also in out->status.
 */
swm_status swm_row_from_stats(const double v[6], double tol, swm_row *out);

/*
 * For a row that swm_row_stats() accepted: p[i] = the renormalized
 * probability a_i, and l[i] = ln of the zero-replaced part (§4), for
 * i < r->n.
 * Either output may be NULL.
 */
void swm_row_expand(const void *x, swm_dtype dt, swm_kind kind,
    const swm_row *r, double *p, double *l);

/*
 * §4: squared content distance ||clr_c(x) - clr_c(y)||^2 between two rows
 * given as ln parts (from swm_row_expand), n parts, sink k. Two passes
 * (centre, then sum of squares), so a constant shift gives exactly ~0.
 */
double swm_content_dist2(const double *lx, const double *ly, size_t n, size_t k);
/* The same from ln parts kept as float (swm_block ln_out), summed in double. */
double swm_content_dist2_f32(const float *lx, const float *ly, size_t n, size_t k);

/* §4: the balance of a row from its ln parts. */
double swm_balance(const double *l, size_t n, size_t k);

/* Conventional metrics and Aitchison terms of one pair of rows (§4, §5). */
typedef struct swm_pair {
	double cos_keep, cos_drop;	/* cosine similarity */
	double js_keep, js_drop;	/* Jensen-Shannon divergence, nats */
	double sink2, content2;		/* (b_x - b_y)^2, ||clr_c x - clr_c y||^2 */
} swm_pair;

/*
 * The pair values of two accepted rows over the same n keys, from their
 * stats and expansions. cos_drop and js_drop are NaN when either row has
 * w = 0.
 */
void swm_row_pair(const swm_row *rx, const double *px, const double *lx,
    const swm_row *ry, const double *py, const double *ly, size_t k,
    swm_pair *out);

/* §2: running sums of one head's valid rows. Zero it to start. */
typedef struct swm_head_acc {
	uint64_t rows;
	uint64_t rejected[SWM_STATUS__N];	/* index by swm_status */
	double s, w, H, hb, Hc, C, b;
} swm_head_acc;

/* Adds a row (accepted or not) to a head's sums. */
void swm_head_add(swm_head_acc *acc, const swm_row *r);
/* Adds the sums of b into a. */
void swm_head_merge(swm_head_acc *a, const swm_head_acc *b);

/* §2: a head's values at one step. NaN when rows == 0. */
typedef struct swm_head {
	uint64_t rows;
	double s, w, H, hb, Hc, C, b;
	double Hcw;	/* mass-weighted content entropy C / w, 0 when w = 0 */
} swm_head;

void swm_head_finish(const swm_head_acc *acc, swm_head *out);

/* Sums of pair values of two heads over the rows valid in both. */
typedef struct swm_pair_acc {
	uint64_t rows;		/* rows valid in both */
	uint64_t rows_drop;	/* of which both have w > 0 */
	double cos_keep, cos_drop, js_keep, js_drop, sink2, content2;
} swm_pair_acc;

/*
 * LAYOUT.md "Which probe rows the pair, drift and flip statistics use" (§4,
 * §5 values on fewer rows): the rows of a block that
 * represent it, at most n of them, as ascending row indices in out (room
 * for min(n, rows)). Returns how many were chosen. Rows with fewer than two
 * valid keys are never chosen.
 *
 * Without qpos every row has all `keys` keys: min(n, rows) rows spread
 * evenly over [0, rows), row i * (rows - 1) / (n - 1) for n >= 2 (the first
 * and the last included), the middle row (rows - 1) / 2 for n = 1.
 *
 * With qpos (a causal probe: row r has min(keys, qpos[r] + 1) valid keys)
 * the rows fall into sequences, a new one starting where qpos does not
 * increase (qpos[r] <= qpos[r - 1]). The picks go round-robin over the
 * sequences, in their order, so that each gets as many as the others (one
 * more for the first ones when n does not divide), or all its rows when it
 * has fewer; within a sequence the longest rows (most valid keys) first,
 * ties to the lower index. Returns min(n, rows with two valid keys or more).
 *
 * Deterministic, no scratch, O(rows log rows). Rows past UINT32_MAX are
 * not supported (the indices are uint32_t).
 */
size_t swm_pick_rows(const uint32_t *qpos, size_t rows, size_t keys, size_t n,
    uint32_t *out);
/* Every row: out[r] = r for r < rows. Returns rows. */
size_t swm_pick_all(size_t rows, uint32_t *out);
/* The position of row in an ascending pick list, or -1 when it is not in it. */
ptrdiff_t swm_pick_find(const uint32_t *pick, size_t npick, size_t row);

/*
 * One block of rows of one layer, `heads` heads of `rows` rows each, laid
 * out at data + h * head_stride + r * row_stride (strides in elements).
 * nvalid[r] is the number of valid keys of row r (NULL: all `keys`).
 *
 * Head sums take every row. The pair work and the ln parts are taken on
 * the rows of two lists of ascending, distinct row indices (< rows), from
 * swm_pick_rows() or swm_pick_all(); a NULL list with count 0 means none.
 * Two lists because the daemon keeps a count of each (pair_rows,
 * drift_rows); with equal counts they are the same list.
 */
typedef struct swm_block {
	const void *data;
	/*
	 * optional [heads]: where each head's rows start, for heads that do not
	 * lie in one buffer (parts of several senders); head_stride is then
	 * unused, row_stride still applies
	 */
	const void *const *head_data;
	swm_dtype dtype;
	swm_kind kind;
	size_t heads, rows, keys;
	size_t head_stride, row_stride;
	const uint32_t *nvalid;
	size_t sink;
	/* optional, zero for none */
	const uint32_t *pair_pick;	/* [npair] rows that get the pair work */
	size_t npair;
	swm_row *rows_out;	/* [heads * rows] row stats, index h * rows + r */
	const uint32_t *ln_pick;	/* [nln] rows whose ln parts go to ln_out */
	size_t nln;
	float *ln_out;		/* [heads * nln * keys], row ln_pick[i] at (h * nln + i) * keys */
	/*
	 * A clock of the caller's, in ns (this library reads none): when both
	 * are set, the time of the pair work (preparing the rows of either
	 * list, the pair sums) is added to *pair_ns, two readings a row.
	 */
	int64_t (*clock_ns)(void);
	int64_t *pair_ns;
} swm_block;

/* Row r of head h of the block: in data, or where the head's own rows start. */
static inline const void *
swm_block_row(const swm_block *blk, size_t h, size_t r)
{
	size_t es = swm_dtype_size(blk->dtype);
	const char *hb = blk->head_data ? (const char *)blk->head_data[h] :
	    (const char *)blk->data + h * blk->head_stride * es;
	return hb + r * blk->row_stride * es;
}

/* Scratch bytes that swm_block_add() needs for `heads` heads of `keys` keys. */
size_t swm_block_scratch(size_t heads, size_t keys);

/*
 * Adds every row of the block to the head sums acc[heads] and, when pairs is
 * not NULL, every head pair over the valid rows of pair_pick they have in
 * common to pairs[heads * heads] (entry [i * heads + j], i < j). scratch holds swm_block_scratch() bytes,
 * aligned for double.
 */
void swm_block_add(const swm_block *blk, const swm_opts *o, void *scratch,
    swm_head_acc *acc, swm_pair_acc *pairs);

/* Head-pair matrices of one layer, each heads * heads, row-major. */
typedef struct swm_pair_matrices {
	double *cos_keep, *cos_drop, *js_keep, *js_drop, *pair_sink, *pair_content;
	uint64_t *rows;
} swm_pair_matrices;

/*
 * Means (and root mean squares for the Aitchison terms) from the sums,
 * symmetric, with the diagonal set (cosine 1, others 0) for heads that have
 * valid rows (head_rows[h] > 0) and NaN where no row is common.
 */
void swm_pairs_finish(const swm_pair_acc *pairs, const uint64_t *head_rows,
    size_t heads, swm_pair_matrices *out);

/*
 * §5 flip rate between two heads x heads distance (or similarity) matrices
 * of one convention each. Comparisons with a NaN value are left out; ties
 * are no flip. Stores the comparison count in *comparisons (if not NULL) and
 * returns flips / comparisons, NaN when there is none.
 */
double swm_flip_rate(const double *keep, const double *drop, size_t heads,
    uint64_t *comparisons);

/*
 * §5 entropy flip rate: D(i,j) = |E_i - E_j| with E the head entropies
 * under keep (H) and drop (Hc). scratch holds 2 * heads * heads doubles.
 */
double swm_flip_rate_entropy(const double *Hkeep, const double *Hdrop,
    size_t heads, double *scratch, uint64_t *comparisons);

/*
 * The values of one layer at one step, from its sums: head values (§2),
 * the pair matrices (§4, §5, NaN when pairs is NULL) and the three flip
 * rates (§5: cosine, JS, entropy; comparisons in comps). The one
 * computation the daemon's writer and `sinkwatch analyze` share. head[heads]
 * and the matrices are the caller's; scratch holds
 * swm_layer_scratch(heads) bytes, aligned for double.
 */
typedef struct swm_layer_values {
	swm_head *head;			/* [heads] */
	swm_pair_matrices pm;		/* each [heads * heads]; rows may be NULL */
	double flip[3];
	uint64_t comps[3];
} swm_layer_values;
size_t swm_layer_scratch(size_t heads);
void swm_layer_finish(const swm_head_acc *acc, const swm_pair_acc *pairs,
    size_t heads, void *scratch, swm_layer_values *out);

/* §3: an entropy change split into sink growth and content sharpening. */
typedef struct swm_split {
	double dH;	/* H(t1) - H(t0) */
	double sink;	/* sink part */
	double content;	/* content part */
} swm_split;

/* §3 aggregate form between two head values. NaN if either has no rows. */
void swm_split_aggregate(const swm_head *h0, const swm_head *h1, swm_split *out);

/*
 * §3 paired form: row by row over rows accepted at both steps, averaged.
 * Returns the number of rows used; *out is NaN when it is 0.
 */
size_t swm_split_paired(const swm_row *r0, const swm_row *r1, size_t rows,
    swm_split *out);

/* Adds b to a, field by field (path sums; layer and model sums). */
void swm_split_add(swm_split *a, const swm_split *b);

/*
 * §3 collapse shares of a (summed) split: sink / dH and content / dH.
 * Both NaN unless dH < 0.
 */
void swm_split_shares(const swm_split *sp, double *sink_share,
    double *content_share);

/*
 * §4 drift of one head between two fixed-probe steps, over the rows
 * accepted at both: *dsink the root mean square change of the sink balance
 * b, *dcontent the root mean square Aitchison distance of the content parts
 * over the rows whose ln parts both steps kept with the same valid keys.
 * NaN where no row counts. Each side is one head's rows.
 */
typedef struct swm_drift_side {
	const swm_row *row;		/* [rows] the head's row statistics */
	const float *ln;		/* [nln * keys] ln parts of the rows ln_rows, or NULL */
	const uint32_t *ln_rows;	/* [nln] ascending */
	size_t nln;
} swm_drift_side;
void swm_drift(const swm_drift_side *a, const swm_drift_side *b, size_t rows,
    size_t keys, size_t sink, double *dsink, double *dcontent);

/*
 * Cross-layer pairs (LAYOUT.md xpair_*): JS keep and drop (§5) between
 * every two of the L*H heads of a model, on the pair rows the layers share,
 * by the kernel of the pairs within a layer. A layer is the pair rows as
 * sent: rows [heads, nx, keys] in the step's dtype (NULL: the layer is
 * missing), their indices idx[nx] and valid keys nvalid[nx]. A layer with
 * another pick than the first layer that has rows, and a missing head, give
 * NaN. keep and drop hold (L*H)^2; scratch holds swm_cross_scratch(L, H,
 * nx, keys, dt) bytes, 64-byte aligned, nx from swm_cross_nx().
 */
typedef struct swm_cross_layer {
	const void *rows;
	size_t nx;
	const uint32_t *idx, *nvalid;
	const int32_t *miss;	/* [heads] -1 where the head is present; NULL: all */
} swm_cross_layer;
size_t swm_cross_nx(const swm_cross_layer *layers, size_t L);
size_t swm_cross_scratch(size_t L, size_t heads, size_t nx, size_t keys, swm_dtype dt);
void swm_cross_pairs(const swm_cross_layer *layers, size_t L, size_t heads, size_t keys,
    swm_dtype dt, swm_kind kind, size_t sink, void *scratch, double *keep, double *drop);

#ifdef __cplusplus
}
#endif
#endif
