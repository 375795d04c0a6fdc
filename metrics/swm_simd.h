/*
 * swm_simd.h: the per-row kernels of row.c for one instruction set, chosen
 * at run time (swm_isa(), swm_set_isa() in swm.h). Internal to the metric
 * core; tests use it to check the vector kernels against libm.
 *
 * Each kernel computes what the generic loops of row.c compute, with double
 * accumulators and one logarithm (probs) or one exponential (logits) per
 * element; only the order of the sums differs, so results agree with the
 * generic path to a few ulps, not bit for bit.
 */
#ifndef SWM_SIMD_H
#define SWM_SIMD_H

#include <stddef.h>

#include "swm.h"

/* Sums over the content entries of a probability row (raw, unnormalized). */
struct swm_psum {
	double W;	/* sum x */
	double P;	/* sum x ln x */
	double L;	/* sum ln x over parts >= thr */
	double Wbig;	/* sum x over parts >= thr */
	double nsmall;	/* parts < thr */
	double band;	/* parts in [blo, bhi): replacement depends on the sum */
	double neg, nonfin;	/* only compared with 0 */
	/*
	 * Bounds of the absolute error of P and of L that single-precision
	 * logarithms may have left (METRICS.md §6, precision budget); 0 where
	 * every logarithm was double. row.c takes the row again with the
	 * kernel's probs_exact where they could move a statistic by more
	 * than the budget.
	 */
	double eP, eL;
};

/* Sums of a logits row: its max, then over the content entries. */
struct swm_lsum {
	double zmax;	/* max over all n entries */
	double bad;	/* NaN or +inf entries (only compared with 0) */
	double E;	/* sum e^(z - zmax) */
	double EY;	/* sum e^(z - zmax) (z - zmax) */
	double Y;	/* sum (z - zmax) over entries that are not -inf */
	double nm;	/* -inf entries */
};

/*
 * Probability sums of the content entries of x[0 .. n) (all but k). thr is
 * the replacement threshold; the band [blo, bhi) contains thr, or blo = bhi
 * and there is no band. Returns 0, or -1 when the row holds a value that
 * the caller must classify with the generic loop (NaN, infinity, overflow);
 * *ps is then unspecified.
 */
typedef int (*swm_probs_fn)(const void *x, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps);
/* Logits sums of x[0 .. n) with sink k; E, EY, Y, nm only when bad == 0. */
typedef void (*swm_logits_fn)(const void *x, size_t n, size_t k,
    struct swm_lsum *ls);

typedef void (*swm_pair_fn)(const double *ax, const double *cx, const double *lx,
    const double *ay, const double *cy, const double *ly, size_t n,
    double out[4]);

typedef void (*swm_expand_fn)(const void *x, size_t n, double invS, double thr,
    double lnscale, double lndelta, double *p, double *l);

typedef double (*swm_prep_fn)(double *a, double *c, double *l, size_t n, size_t k,
    size_t keys8, double iw, double *nx);

/* The numbers that turn a row's raw values and logs into p and ln parts. */
struct swm_fix {
	double invS, thr, lnscale, lndelta;	/* as in swm_row */
	double iw;				/* 1 / w, 0 when w = 0 */
};

/* probs with the values and their 16 log2 (the kernel's unit) kept */
typedef int (*swm_probs_out_fn)(const void *x, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps, double *xo, double *vo);

typedef double (*swm_prep_raw_fn)(double *a, double *c, double *l, size_t n,
    size_t k, size_t keys8, const struct swm_fix *fx, double *nx, float *ln_out);

struct swm_kernels {
	const char *name;	/* "avx512", "avx2", "generic" */
	swm_probs_fn probs[SWM_DTYPE__N];	/* NULL: use the generic loop */
	swm_logits_fn logits[SWM_DTYPE__N];
	/*
	 * The element kernels, n values at a time, for tests: y = ln x for
	 * positive x (subnormals included; 0 gives a finite value), and
	 * e = e^y for y <= 0, 0 below -708 as swm_exp_neg(). NULL for generic.
	 */
	void (*ln)(const double *x, double *y, size_t n);
	void (*exp_neg)(const double *y, double *e, size_t n);
	/*
	 * Head-pair sums of two prepared rows over n elements (n a multiple
	 * of 8, zeros past the row): with m = ax + ay and mc = cx + cy,
	 * out = { sum m ln m, sum mc ln mc, sum ax ay, sum (lx - ly)^2 }
	 * (0 ln 0 = 0; subnormal parts, whose terms are below 1e-305, need
	 * not get exact logarithms). NULL for generic.
	 */
	swm_pair_fn pair;
	/*
	 * swm_row_expand() of an accepted probability row of n elements:
	 * p = x invS, l = ln x + lnscale, or lndelta where x < thr. NULL:
	 * the generic loop.
	 */
	swm_expand_fn expand[SWM_DTYPE__N];
	/*
	 * Pair preparation of one expanded row in place (pair.c, prep_row):
	 * a and l hold p and ln p over keys8 (a multiple of 8); afterwards
	 * a = p / 2 and c = a iw, zero at the sink k and past n, and l the
	 * content clr (l minus its mean over the n - 1 content keys), zero at
	 * k and past n. Returns p_k; *nx = sum of p^2 over the content keys.
	 * NULL: the generic loop.
	 */
	swm_prep_fn prep;
	/*
	 * One pass per head (pair.c, swm_block_add): probs as above that also
	 * store each element as a double to xo[0 .. n) and its 16 log2 x to
	 * vo[0 .. n) (the sink's too); when it returns 0 they are valid.
	 * NULL: the row is read again by swm_row_expand().
	 */
	swm_probs_out_fn probs_out[SWM_DTYPE__N];
	/*
	 * Pair preparation from those buffers, in place (a = xo, l = vo):
	 * p = x invS, l = ln x + lnscale or lndelta below thr, exactly as
	 * expand[]; l to ln_out (floats, n of them) when not NULL; then as
	 * prep with iw. Returns p_k.
	 */
	swm_prep_raw_fn prep_raw;
	/* pair with double logarithms: the reference the tests compare with */
	swm_pair_fn pair_f64;
	/* the precision of pair's logarithms: "f32" or "f64" (sums: double) */
	const char *pair_logs;
	/*
	 * probs with double logarithms where probs[] may take single-precision
	 * ones (eP, eL > 0): the rows whose statistics could miss the budget
	 * go through it again. row_logs: "f32" when some probs[] does.
	 */
	swm_probs_fn probs_exact[SWM_DTYPE__N];
	const char *row_logs;	/* eP, eL: SWM_Y_KAPPA, below */
	/* swm_content_dist2_f32 (the writer's drift); NULL: the generic loop */
	double (*dist2_f32)(const float *lx, const float *ly, size_t n, size_t k);
};

/*
 * The rows' single-precision logarithms (row_logs "f32"): the relative
 * error of their series (row_simd.c, yf8 and ynf16n) is below 1.73e-7 at
 * every float of its range (exhaustive, test_row_log_error); with a
 * margin, eP = SWM_Y_KAPPA sum x |y| and eL = SWM_Y_KAPPA sum |y| over the
 * elements that took them (y = ln(1 + f) - f).
 */
#define SWM_Y_KAPPA 2e-7

extern const struct swm_kernels swm_kernels_avx512;
extern const struct swm_kernels swm_kernels_avx2;

/*
 * swm_row_stats() that, for a probability row whose kernel has probs_out,
 * keeps the row's values and their 16 log2 in xo[0 .. n) and vo[0 .. n)
 * (one read of the data for the statistics and the pair and drift work)
 * and sets *raw to 1; else *raw is 0 and the row must be expanded.
 */
swm_status swm_row_stats_keep(const void *x, swm_dtype dt, swm_kind kind, size_t n,
    size_t k, const swm_opts *o, swm_row *out, double *xo, double *vo, int *raw);

/* The kernels of an instruction set by name, NULL if this CPU lacks it. */
const struct swm_kernels *swm_kernels_get(const char *name);

#endif
