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
};

extern const struct swm_kernels swm_kernels_avx512;
extern const struct swm_kernels swm_kernels_avx2;

/* The kernels of an instruction set by name, NULL if this CPU lacks it. */
const struct swm_kernels *swm_kernels_get(const char *name);

#endif
