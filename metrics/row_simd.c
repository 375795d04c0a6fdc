/*
 * row_simd.c: the per-row kernels of row.c for AVX-512 and AVX2, chosen at
 * run time (row.c, swm_set_isa()). Each function carries its own target
 * attribute, so the file builds with the project's plain flags and its
 * code runs only where the CPU has the instructions.
 *
 * Logarithm (double, division free), computed as v = 16 log2 x:
 *     x = 2^k z, z in [0.703125, 1.40625), from the bits with integer
 *     operations; s = 16 k + j, j the index of one of 16 subintervals of z
 *     (both from one arithmetic shift of the bits); each subinterval has a
 *     centre c_j, 1/c_j a double with a 20-bit mantissa, and
 *         v = s + g_j + 16 log2(1 + r),   r = z/c_j - 1 = fma(z, 1/c_j, -1)
 *     with g_j = 16 log2 c_j - j, |r| <= 1/32, and 16 log2(1 + r) =
 *     r (16/ln2 + r q(r)), q of degree 7 (minimax; 0.3 ulp).
 *   The subinterval around 1, [1 - 1/64, 1 + 1/32), has c = 1: near x = 1
 *   the result is the polynomial in r = x - 1, exact, no cancellation. The
 *   1/c_j were searched so that 16 log2 c_j rounds to a double with an error
 *   below 0.005 ulp and s + g_j is exact when k = 0. Sums of v are scaled by
 *   ln2/16 once per row; ln x alone (tests) is v ln2/16. Relative error of
 *   ln, measured against libm: below 3.3e-16 over every binade, subnormals
 *   included, below 4.5e-16 within 8% of 1 (swm_ln: 4e-16, 2e-16 near 1).
 *
 * Exponential (y <= 0): y = (16 m + j) ln2/16 + r, |r| <= ln2/32,
 * e^y = 2^m 2^(j/16) (1 + r + r^2 q(r)), q of degree 4 (0.3 ulp); below
 * y = -708 the result is 0, as in swm_exp_neg() of swm_math.h.
 *
 * The tables sit in registers: vpermt2pd (AVX-512), vpermd on their 32-bit
 * halves (AVX2; gathers are slow on AMD). The AVX-512 probability kernels
 * compare 16 floats at a time against thresholds rounded to float, so the
 * classification is exact; for f32 and bf16, a block of 16 whose parts are
 * all above the band (the common case) skips the second compare, the masks
 * and the f32 -> f64 conversion (done exactly with integer operations).
 * Loads are unaligned loads; the tail of a row is copied to a zeroed local
 * block, so no load reaches past the row. No allocation.
 *
 * Sums: 8 double lanes, as the generic loop (AVX2: two sets of 4), in
 * another order than the generic loop: results agree with it to about
 * 1e-15 of the terms summed (tests/unit/test_metrics.c).
 *
 * f32 rows without outputs take single-precision logarithms where their
 * error bound allows (p256_f32, p512_f32s), as the AVX2 pair kernel does.
 *
 * Cost (bench/RESULTS.md, issue 30): on AMD Zen 5 the loops run at 0.5 to
 * 0.86 of the rate at which the core issues their own instructions with
 * the dependences removed (bench/mca.py's probe): their chains and the
 * core's window, not its pipes, set the pace.
 */
#include <float.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "swm_simd.h"

/* ---- constants, shared by both instruction sets ---------------------- */

#define LN_OFF 0x3fe6800000000000ull	/* bits of 0.703125 */
#define LN2_16 0x1.62e42fefa39efp-5	/* ln2 / 16: v to ln */

/* 1/c_j, 20-bit mantissas */
static const double ln_invc[16] __attribute__((aligned(64))) = {
	0x1.6410b00000000p+0, 0x1.555d500000000p+0, 0x1.4794400000000p+0,
	0x1.3b2ed00000000p+0, 0x1.2f74d00000000p+0, 0x1.248f200000000p+0,
	0x1.1a62400000000p+0, 0x1.1112f00000000p+0, 0x1.0832a00000000p+0,
	0x1.0000000000000p+0, 0x1.e1cab00000000p-1, 0x1.c704500000000p-1,
	0x1.af40600000000p-1, 0x1.999e100000000p-1, 0x1.85fa500000000p-1,
	0x1.7441300000000p-1
};
/* g_j = 16 log2 c_j - j, 16 log2 c_j rounded to nearest */
static const double ln_g[16] __attribute__((aligned(64))) = {
	-0x1.e76be85532c61p+2, -0x1.e9221f868d2e7p+2, -0x1.ec3c7e1572fd5p+2,
	-0x1.f33f11b6ed72ap+2, -0x1.fb3bb5544dde4p+2, -0x1.029a6544c783dp+3,
	-0x1.087473bf3d410p+3, -0x1.0fb118b376693p+3, -0x1.17486b5e716bep+3,
	-0x1.2000000000000p+3, -0x1.13148338d0665p+3, -0x1.08d86b532e71ep+3,
	-0x1.0138adacb9670p+3, -0x1.f6689383048b9p+2, -0x1.edd273f1c6bf1p+2,
	-0x1.e91c09899a728p+2
};
/* log2(1 + r) = r (C1 + r sum Q_i r^i), |r| <= 1/32; used times 16 */
#define LNC1 (16 * 0x1.71547652b82fep+0)
#define LNQ0 (16 * -0x1.71547652b8301p-1)
#define LNQ1 (16 * 0x1.ec709dc3a3816p-2)
#define LNQ2 (16 * -0x1.71547653039b5p-2)
#define LNQ3 (16 * 0x1.2776c4c725b3fp-2)
#define LNQ4 (16 * -0x1.ec708cdca7f76p-3)
#define LNQ5 (16 * 0x1.a61b4fc81cfd6p-3)
#define LNQ6 (16 * -0x1.71d5f76086458p-3)
#define LNQ7 (16 * 0x1.3ff2e2d95bef1p-3)
/*
 * The AVX-512 pair kernel's shorter series (pair512s): 16 log2(1 + r) = r
 * sum A_i r^i, degree 6 against LNQ's 8, |r| <= 1/32 with 2% to spare:
 * relative error 6.7e-14 of the sum (least squares at 200 Chebyshev nodes
 * in 50-digit arithmetic, mpmath; the double coefficients evaluated by
 * Horner in double). Its x ln x is within 6.6e-14 relative (1.22e6
 * values of 61 binades, test_pair_kernel_log); ln_array and the rows keep
 * LNQ (5e-16). Two FMAs a logarithm fewer: the pair kernel 1.17-1.25x as
 * fast (bench pairlogs, issue 30), its sums within METRICS.md §6's budget
 * by three orders and the double-precision tests' 1e-9 by twenty times.
 */
#define LNA0 0x1.71547652b82ffp+4
#define LNA1 -0x1.71547652e5be2p+3
#define LNA2 0x1.ec709dc3e43a3p+2
#define LNA3 -0x1.71546b60a0811p+2
#define LNA4 0x1.2776bbd98fef6p+2
#define LNA5 -0x1.ed18e571b124dp+1
#define LNA6 0x1.a6aa4cb1fefa0p+1

/*
 * The rows' single-precision logarithms (p256_f32, p512_f32s; their error
 * bound SWM_Y_KAPPA, swm_simd.h), their series (Cephes logf): y = ln(1 +
 * f) - f = f^2 Q(f), Q = -1/2 + f (YQ1 + f R), R = (YR0 + YR1 f) + f^2
 * (YR2 + YR3 f) + f^4 ((YR4 + YR5 f) + f^2 (YR6 + YR7 f)): yf8 (AVX2),
 * ynf16n (AVX-512, -y)
 */
#define YQ1 3.3333331174e-1f
#define YR0 -2.4999993993e-1f
#define YR1 2.0000714765e-1f
#define YR2 -1.6668057665e-1f
#define YR3 1.4249322787e-1f
#define YR4 -1.2420140846e-1f
#define YR5 1.1676998740e-1f
#define YR6 -1.1514610310e-1f
#define YR7 7.0376836292e-2f

/* 2^(j/16), rounded to nearest */
static const double ex_t[16] __attribute__((aligned(64))) = {
	0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0,
	0x1.2387a6e756238p+0, 0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0,
	0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0, 0x1.6a09e667f3bcdp+0,
	0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
	0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0,
	0x1.ea4afa2a490dap+0
};
#define EX_SHIFT 0x1.8p52
#define EX_INV 0x1.71547652b82fep+4	/* 16 / ln2 */
#define EX_HI 0x1.62e42fef00000p-5	/* ln2 / 16, 32 bits: kd * EX_HI is exact */
#define EX_LO 0x1.473de6af278edp-38
#define EX_MIN -708.0
/* e^r = 1 + r + r^2 q(r), |r| <= ln2/32 */
#define EXQ0 0x1.0000000000000p-1
#define EXQ1 0x1.55555554d35f2p-3
#define EXQ2 0x1.55555555145a4p-5
#define EXQ3 0x1.1112150f92708p-7
#define EXQ4 0x1.6c17c56a81063p-10

/* The elements [i, i + m) of a row, m < block, copied to a zeroed block. */
static inline const void *
tail_block(void *buf, size_t bufsz, const void *x, size_t i, size_t m, size_t es)
{
	memset(buf, 0, bufsz);
	memcpy(buf, (const char *)x + i * es, m * es);
	return buf;
}

/*
 * The row loops ask for the line ROW_AHEAD bytes past the block they take
 * (the next row's first lines at a row's end, where rows lie one after the
 * other): a hint, never a fault, harmless past the message's end. The f32
 * rows' fast loop (f512_run2), one line a block: with two blocks a turn
 * the rows of `make bench` (streamed from memory) ran 1.08x as fast, best
 * of 7 rounds; two blocks a turn without it were no faster there. The
 * general loops (p512_row, p256_row: every f16 and bf16 row, the rows
 * with outputs): `bench message fresh` (one 4 MiB f16 message written by
 * another thread before each repeat) took 0.95x as long, the daemon's
 * kernel stages 0.95x (ABBA medians; f16 rows streamed or in L2 alone
 * unchanged; issue 30, bench/RESULTS.md). Always inlined: a function that
 * only prefetches is, called, a call without effect to gcc, which drops
 * it (tests/e2e/structure.py checks the compiled kernels).
 */
#define ROW_AHEAD 2048

__attribute__((always_inline)) static inline void
row_ahead(const void *x, size_t byte)
{
	/* an address, not a pointer into x: it may lie past x's end */
	_mm_prefetch((const char *)((uintptr_t)x + byte + ROW_AHEAD), _MM_HINT_T0);
}

/* The smallest float >= t: for a float x, x >= t iff x >= fceil(t). */
static float
fceil(double t)
{
	float f = (float)t;
	if ((double)f < t)
		f = nextafterf(f, INFINITY);
	return f;
}

/*
 * A row kernel's probs entry for dtype DT and its probs_out twin (the
 * values and logs kept), both through ROW; ATTR the instruction set's.
 */
#define PROBS_PAIR(ATTR, ROW, name, DT) \
    ATTR int name(const void *x, size_t n, size_t k, double thr, double blo, double bhi, \
    struct swm_psum *ps) { return ROW(x, DT, n, k, thr, blo, bhi, ps, NULL, NULL); } \
    ATTR int name##_out(const void *x, size_t n, size_t k, double thr, double blo, \
    double bhi, struct swm_psum *ps, double *xo, double *vo) \
    { return ROW(x, DT, n, k, thr, blo, bhi, ps, xo, vo); }

/* ================================================================ AVX-512 */

#define T512 "avx512f,avx512dq,avx2,fma,f16c,popcnt"
#define A512 __attribute__((target(T512), always_inline)) static inline
#define F512 __attribute__((target(T512))) static

/* 8 elements of dtype dt at x + i, as doubles */
A512 __m512d
ld8(const void *x, size_t i, swm_dtype dt)
{
	const char *p = x;
	switch (dt) {
	case SWM_F16:
		return _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128(
		    (const __m128i *)(const void *)(p + 2 * i))));
	case SWM_BF16:
		return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(
		    _mm256_cvtepu16_epi32(_mm_loadu_si128(
		    (const __m128i *)(const void *)(p + 2 * i))), 16)));
	case SWM_F64:
		return _mm512_loadu_pd(p + 8 * i);
	default:
		return _mm512_cvtps_pd(_mm256_loadu_ps((const float *)(const void *)(p + 4 * i)));
	}
}

/* 16 elements of a half or single dtype at x + i, as floats */
A512 __m512
ld16f(const void *x, size_t i, swm_dtype dt)
{
	const char *p = x;
	switch (dt) {
	case SWM_F16:
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * i)));
	case SWM_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
		    _mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * i))), 16));
	default:
		return _mm512_loadu_ps(p + 4 * i);
	}
}

struct ln512c {
	__m512d inv0, inv1, g0, g1;
};

A512 void
ln512_init(struct ln512c *c)
{
	c->inv0 = _mm512_load_pd(ln_invc);
	c->inv1 = _mm512_load_pd(ln_invc + 8);
	c->g0 = _mm512_load_pd(ln_g);
	c->g1 = _mm512_load_pd(ln_g + 8);
}

/*
 * 16 log2 x for x > 0, on N vectors at once (N <= 4); 0 and negative
 * values give finite values, inf and NaN nonfinite ones. sub: x may be
 * subnormal (f64 input); values that come from f32, f16 or bf16 never are.
 * shrt: the shorter series (LNA, the pair kernel's), else LNQ's.
 *
 * Each step runs for all N before the next: the steps of one log depend on
 * each other, and independent ones side by side in program order let the
 * core overlap them: 2 at once, +10-25% on L2-resident rows (4 at once was
 * slower than 2: registers run out). The last step is one FMA,
 * (s + g) + h r, rounded once.
 */
A512 void
ln512xn(const __m512d *xin, __m512d *v, const struct ln512c *c, const int N, int sub, int shrt)
{
	const __m512i off = _mm512_set1_epi64((long long)LN_OFF);
	const __m512i hi = _mm512_set1_epi64((long long)0xfff0000000000000ull);
	__m512i s[4];
	__m512d x[4], r[4], g[4], h[4];
	__mmask8 ms[4];
#pragma GCC unroll 4
	for (int k = 0; k < N; k++) {
		x[k] = xin[k];
		ms[k] = 0;
		if (sub) {
			ms[k] = _mm512_cmp_pd_mask(x[k], _mm512_set1_pd(DBL_MIN), _CMP_LT_OQ);
			x[k] = _mm512_mask_mul_pd(x[k], ms[k], x[k], _mm512_set1_pd(0x1p54));
		}
		__m512i ix = _mm512_castpd_si512(x[k]);
		__m512i t = _mm512_sub_epi64(ix, off);
		s[k] = _mm512_srai_epi64(t, 48);	/* 16 k + j */
		__m512d z = _mm512_castsi512_pd(_mm512_sub_epi64(ix, _mm512_and_si512(t, hi)));
		r[k] = _mm512_fmadd_pd(z, _mm512_permutex2var_pd(c->inv0, s[k], c->inv1),
		    _mm512_set1_pd(-1.0));
	}
#pragma GCC unroll 4
	for (int k = 0; k < N; k++) {
		__m512d sd = _mm512_cvtepi64_pd(s[k]);
		if (sub)
			sd = _mm512_mask_sub_pd(sd, ms[k], sd, _mm512_set1_pd(16 * 54.0));
		g[k] = _mm512_add_pd(sd, _mm512_permutex2var_pd(c->g0, s[k], c->g1));
	}
#define STEP(Q) \
	_Pragma("GCC unroll 4") \
	for (int k = 0; k < N; k++) \
		h[k] = _mm512_fmadd_pd(h[k], r[k], _mm512_set1_pd(Q))
	if (shrt) {
#pragma GCC unroll 4
		for (int k = 0; k < N; k++)
			h[k] = _mm512_fmadd_pd(_mm512_set1_pd(LNA6), r[k], _mm512_set1_pd(LNA5));
		STEP(LNA4); STEP(LNA3); STEP(LNA2); STEP(LNA1); STEP(LNA0);
	} else {
#pragma GCC unroll 4
		for (int k = 0; k < N; k++)
			h[k] = _mm512_fmadd_pd(_mm512_set1_pd(LNQ7), r[k], _mm512_set1_pd(LNQ6));
		STEP(LNQ5); STEP(LNQ4); STEP(LNQ3); STEP(LNQ2); STEP(LNQ1); STEP(LNQ0); STEP(LNC1);
	}
#undef STEP
#pragma GCC unroll 4
	for (int k = 0; k < N; k++)
		v[k] = _mm512_fmadd_pd(h[k], r[k], g[k]);
}

/* one vector */
A512 __m512d
ln512(__m512d x, const struct ln512c *c, int sub)
{
	__m512d v;
	ln512xn(&x, &v, c, 1, sub, 0);
	return v;
}

struct ex512c {
	__m512d t0, t1;
};

A512 void
ex512_init(struct ex512c *c)
{
	c->t0 = _mm512_load_pd(ex_t);
	c->t1 = _mm512_load_pd(ex_t + 8);
}

/* e^y for the lanes of live (y in [-708, 0]), 0 in the others */
A512 __m512d
ex512(__m512d y, __mmask8 live, const struct ex512c *c)
{
	__m512d t = _mm512_fmadd_pd(y, _mm512_set1_pd(EX_INV), _mm512_set1_pd(EX_SHIFT));
	__m512d kd = _mm512_sub_pd(t, _mm512_set1_pd(EX_SHIFT));
	__m512i ti = _mm512_castpd_si512(t);
	__m512d tj = _mm512_permutex2var_pd(c->t0, ti, c->t1);
	__m512d r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(EX_HI), y);
	r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(EX_LO), r);
	__m512d r2 = _mm512_mul_pd(r, r);
	__m512d q = _mm512_fmadd_pd(_mm512_set1_pd(EXQ4), r, _mm512_set1_pd(EXQ3));
	q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXQ2));
	q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXQ1));
	q = _mm512_fmadd_pd(q, r, _mm512_set1_pd(EXQ0));
	__m512d e = _mm512_fmadd_pd(tj, _mm512_fmadd_pd(r2, q, r), tj);
	/* times 2^floor(kd / 16): (kd & ~15) << 48 is floor(kd / 16) << 52 */
	__m512i sc = _mm512_slli_epi64(_mm512_and_si512(ti, _mm512_set1_epi64(~15ll)), 48);
	return _mm512_castsi512_pd(_mm512_maskz_add_epi64(live, _mm512_castpd_si512(e), sc));
}

struct p512acc {
	__m512d W, P, L, WB;
	__m512i bits;		/* OR of the elements: the sign bit finds negatives */
	uint64_t nv, nbig, nlo;
};

/*
 * 8 N elements as doubles, N vectors (N <= 2) with their logs side by side:
 * bits 8k..8k+7 of vm are vector k's lanes in the row, of big those >= hi.
 * With xo, the first nout values and their 16 log2 go to xo and vo too, the
 * sink's included (row.c, one pass per head): the logs are of every lane,
 * masked or not.
 */
A512 void
p512_accn(const __m512d *x, __mmask16 vm, __mmask16 big, const struct ln512c *c, int n,
    int sub, struct p512acc *a, double *xo, double *vo, size_t nout)
{
	__m512d v[2];
	ln512xn(x, v, c, n, sub, 0);
	for (int k = 0; k < n && xo; k++) {
		size_t at = 8 * (size_t)k;
		__mmask8 sm = nout >= at + 8 ? 0xff :
		    nout > at ? (__mmask8)((1u << (nout - at)) - 1) : 0;
		_mm512_mask_storeu_pd(xo + at, sm, x[k]);
		_mm512_mask_storeu_pd(vo + at, sm, v[k]);
	}
	for (int k = 0; k < n; k++) {
		__mmask8 m = (__mmask8)(vm >> (8 * k)), bg = (__mmask8)(big >> (8 * k));
		a->W = _mm512_mask_add_pd(a->W, m, a->W, x[k]);
		a->P = _mm512_mask3_fmadd_pd(x[k], v[k], a->P, m);
		a->L = _mm512_mask_add_pd(a->L, bg, a->L, v[k]);
		a->WB = _mm512_mask_add_pd(a->WB, bg, a->WB, x[k]);
		a->bits = _mm512_mask_or_epi64(a->bits, m, a->bits, _mm512_castpd_si512(x[k]));
	}
}

/* 16 elements of a half or single dtype, compared as floats (exact) */
A512 void
p512_blk16(const void *x, size_t i, swm_dtype dt, __mmask16 vm, __m512 lof,
    __m512 hif, const struct ln512c *c, struct p512acc *a, double *xo, double *vo, size_t m)
{
	__m512 xf = ld16f(x, i, dt);
	__mmask16 big = _mm512_mask_cmp_ps_mask(vm, xf, hif, _CMP_GE_OQ);
	__mmask16 small = _mm512_mask_cmp_ps_mask(vm, xf, lof, _CMP_LT_OQ);
	a->nv += (uint64_t)__builtin_popcount(vm);
	a->nbig += (uint64_t)__builtin_popcount(big);
	a->nlo += (uint64_t)__builtin_popcount(small);
	__m512d x0, x1;
	if (dt == SWM_F32) {
		x0 = ld8(x, i, dt);
		x1 = ld8(x, i + 8, dt);
	} else {
		x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(xf));
		x1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(xf, 1));
	}
	__m512d xv[2] = { x0, x1 };
	p512_accn(xv, vm, big, c, 2, 0, a, xo, vo, m);
}

/*
 * 16 full elements of f32 or bf16, the common case first: when every one is
 * >= hi (one compare), they are normal floats (hi >= FLT_MIN, checked by the
 * caller) or inf/NaN (bit 30 of *fbits, checked after the loop), and convert
 * to double exactly by integer operations, in even/odd lanes: no f32 -> f64
 * conversion, no second compare, no masks. Otherwise the general block.
 */
A512 void
p512_blk16f(const void *x, size_t i, swm_dtype dt, __m512 lof, __m512 hif,
    const struct ln512c *c, __m512i *fbits, struct p512acc *a)
{
	__m512 xf = ld16f(x, i, dt);
	__mmask16 notbig = _mm512_cmp_ps_mask(xf, hif, _CMP_LT_OQ);
	if (__builtin_expect(notbig != 0, 0)) {
		p512_blk16(x, i, dt, 0xffff, lof, hif, c, a, NULL, NULL, 0);
		return;
	}
	__m512i q = _mm512_castps_si512(xf);
	*fbits = _mm512_or_si512(*fbits, q);
	/* f32 bits f of a normal float: the double's bits are (f << 29) + (896 << 52) */
	__m512i bias = _mm512_set1_epi64(896ll << 52);
	__m512d xe = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_srli_epi64(
	    _mm512_slli_epi64(q, 32), 3), bias));
	__m512d xo = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_srli_epi64(
	    _mm512_and_si512(q, _mm512_set1_epi64((long long)0xffffffff00000000ull)), 3), bias));
	__m512d xv[2] = { xe, xo }, vv[2];
	ln512xn(xv, vv, c, 2, 0, 0);
	__m512d ve = vv[0], vo = vv[1];
	a->W = _mm512_add_pd(a->W, _mm512_add_pd(xe, xo));
	a->P = _mm512_fmadd_pd(xe, ve, _mm512_fmadd_pd(xo, vo, a->P));
	a->L = _mm512_add_pd(a->L, _mm512_add_pd(ve, vo));
	a->WB = _mm512_add_pd(a->WB, _mm512_add_pd(xe, xo));
	a->nv += 16;
	a->nbig += 16;
}

/* 8 f64 elements, compared as doubles */
A512 void
p512_blk8(const void *x, size_t i, __mmask8 vm, __m512d lo, __m512d hi,
    const struct ln512c *c, struct p512acc *a, double *xo, double *vo, size_t m)
{
	__m512d xd = ld8(x, i, SWM_F64);
	__mmask8 big = _mm512_mask_cmp_pd_mask(vm, xd, hi, _CMP_GE_OQ);
	__mmask8 small = _mm512_mask_cmp_pd_mask(vm, xd, lo, _CMP_LT_OQ);
	a->nv += (uint64_t)__builtin_popcount(vm);
	a->nbig += (uint64_t)__builtin_popcount(big);
	a->nlo += (uint64_t)__builtin_popcount(small);
	p512_accn(&xd, vm, big, c, 1, 1, a, xo, vo, m);
}

/* output pointers at element i, or NULL */
#define XO(i) (xo ? xo + (i) : NULL)
#define VO(i) (xo ? vo + (i) : NULL)

/*
 * The probability sums of a row; with xo (probs_out), every value and its
 * 16 log2 to xo and vo too: the blocks of 16 then take the general path
 * (the fast one holds its elements in even and odd lanes).
 */
A512 int
p512_row(const void *x, swm_dtype dt, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps, double *xo, double *vo)
{
	struct ln512c c;
	struct p512acc a;
	/* parts < lo are small, >= hi big; [lo, hi) is the band, rare */
	double lo = blo < bhi ? blo : thr, hi = blo < bhi ? bhi : thr;
	size_t i = 0;

	ln512_init(&c);
	a.W = a.P = a.L = a.WB = _mm512_setzero_pd();
	a.bits = _mm512_setzero_si512();
	a.nv = a.nbig = a.nlo = 0;
	if (dt == SWM_F64) {
		__m512d lod = _mm512_set1_pd(lo), hid = _mm512_set1_pd(hi);
		size_t kb = k & ~(size_t)7;
		for (; i < kb; i += 8) {
			row_ahead(x, 8 * i);
			p512_blk8(x, i, 0xff, lod, hid, &c, &a, XO(i), VO(i), 8);
		}
		if (i + 8 <= n) {
			p512_blk8(x, i, (__mmask8)~(1u << (k - i)), lod, hid, &c, &a, XO(i), VO(i), 8);
			i += 8;
		}
		for (; i + 8 <= n; i += 8) {
			row_ahead(x, 8 * i);
			p512_blk8(x, i, 0xff, lod, hid, &c, &a, XO(i), VO(i), 8);
		}
		if (i < n) {
			double buf[8];
			const void *tb = tail_block(buf, sizeof(buf), x, i, n - i, 8);
			unsigned vm = (1u << (n - i)) - 1;
			if (k >= i)
				vm &= ~(1u << (k - i));
			p512_blk8(tb, 0, (__mmask8)vm, lod, hid, &c, &a, XO(i), VO(i), n - i);
		}
	} else {
		float hf = fceil(hi);
		__m512 lof = _mm512_set1_ps(fceil(lo)), hif = _mm512_set1_ps(hf);
		__m512i fbits = _mm512_setzero_si512();
		size_t es = dt == SWM_F32 ? 4 : 2;
		size_t kb = k & ~(size_t)15;
		/*
		 * f16 too: widened to f32 every f16 value is a normal float, so
		 * a block with no zero (f16 underflow) takes the fast path; one
		 * with a zero costs one compare more and takes the general one.
		 */
		int fast = hf >= FLT_MIN && xo == NULL;
		for (; i < kb; i += 16) {
			row_ahead(x, es * i);
			if (fast)
				p512_blk16f(x, i, dt, lof, hif, &c, &fbits, &a);
			else
				p512_blk16(x, i, dt, 0xffff, lof, hif, &c, &a, XO(i), VO(i), 16);
		}
		if (i + 16 <= n) {
			p512_blk16(x, i, dt, (__mmask16)~(1u << (k - i)), lof, hif, &c, &a,
			    XO(i), VO(i), 16);
			i += 16;
		}
		for (; i + 16 <= n; i += 16) {
			row_ahead(x, es * i);
			if (fast)
				p512_blk16f(x, i, dt, lof, hif, &c, &fbits, &a);
			else
				p512_blk16(x, i, dt, 0xffff, lof, hif, &c, &a, XO(i), VO(i), 16);
		}
		/* inf or NaN (or a value >= 2) went through the fast block */
		if (_mm512_reduce_or_epi32(fbits) & 0x40000000)
			return -1;
		if (i < n) {
			float buf[16];
			const void *tb = tail_block(buf, sizeof(buf), x, i, n - i, es);
			unsigned vm = (1u << (n - i)) - 1;
			if (k >= i)
				vm &= ~(1u << (k - i));
			p512_blk16(tb, 0, dt, (__mmask16)vm, lof, hif, &c, &a, XO(i), VO(i), n - i);
		}
	}
	double W = _mm512_reduce_add_pd(a.W);
	double P = _mm512_reduce_add_pd(a.P);
	double L = _mm512_reduce_add_pd(a.L);
	if (!(fabs(W) <= DBL_MAX) || !(fabs(P) <= DBL_MAX) || !(fabs(L) <= DBL_MAX))
		return -1;
	ps->W = W;
	ps->P = P * LN2_16;
	ps->L = L * LN2_16;
	ps->Wbig = _mm512_reduce_add_pd(a.WB);
	ps->nsmall = (double)(a.nv - a.nbig);
	ps->band = (double)(a.nv - a.nbig - a.nlo);
	ps->neg = _mm512_reduce_or_epi64(a.bits) < 0 ? 1.0 : 0.0;
	ps->nonfin = 0;
	ps->eP = ps->eL = 0;
	/* -0.0 sets the sign bit without being negative: let the loop decide */
	return ps->neg > 0 ? -1 : 0;
}

#undef XO
#undef VO

/*
 * f32 rows without outputs (probs[SWM_F32]; probs_exact and probs_out
 * keep p512_row's double logarithms), as p256_f32 on AVX2: a
 * block of 16 elements that are all >= max(hi, FLT_MIN) and below 1/8 of
 * the content (the sink's lane apart, whatever it holds) takes
 * single-precision logarithms, x = 2^e z, z in [sqrt(1/2), sqrt(2)),
 * ln x = e ln2 + f + y, f = z - 1 exact, y = ln(1 + f) - f (ynf16n gives -y, yf8's
 * series, the same float operations lane by lane), every sum in double;
 * eP = SWM_Y_KAPPA sum x |y| and eL = SWM_Y_KAPPA sum |y| bound what that
 * leaves in P and L, and row.c takes the row again with probs_exact where that
 * could move a statistic by more than the budget. Any other block, the
 * tail and rows with an infinity or NaN go through p512_blk16 (f512_slow)
 * as in p512_row.
 *
 * The sink's lane of a fast block takes 1.0 for its logarithm (e = f = y
 * = 0: nothing added to L) and 0 for its weight. Two accumulators for P
 * and Y (one FMA a block on each chain), one for the rest.
 */
/* for (b = 0; b < N; b++), unrolled: N blocks' statements interleaved */
#define EACH(N) _Pragma("GCC unroll 2") for (int b = 0; b < (N); b++)

/* -y of N blocks of 16 floats (N = 1 or 2, a constant where inlined) */
A512 void
ynf16n(const __m512 *f, __m512 *y, const int N)
{
	__m512 f2[2], f4[2], e23[2], e45[2], e67[2], e89[2], e25[2], e69[2], r[2], s[2];
	EACH(N) f2[b] = _mm512_mul_ps(f[b], f[b]);
	EACH(N) e23[b] = _mm512_fmadd_ps(_mm512_set1_ps(YR1), f[b], _mm512_set1_ps(YR0));
	EACH(N) e45[b] = _mm512_fmadd_ps(_mm512_set1_ps(YR3), f[b], _mm512_set1_ps(YR2));
	EACH(N) e67[b] = _mm512_fmadd_ps(_mm512_set1_ps(YR5), f[b], _mm512_set1_ps(YR4));
	EACH(N) e89[b] = _mm512_fmadd_ps(_mm512_set1_ps(YR7), f[b], _mm512_set1_ps(YR6));
	EACH(N) f4[b] = _mm512_mul_ps(f2[b], f2[b]);
	EACH(N) e25[b] = _mm512_fmadd_ps(e45[b], f2[b], e23[b]);
	EACH(N) e69[b] = _mm512_fmadd_ps(e89[b], f2[b], e67[b]);
	/* -y = (f^2 / 2 - q1 f^3) - f^4 R: yf8's operations, the signs flipped */
	EACH(N) s[b] = _mm512_fnmadd_ps(_mm512_mul_ps(f2[b], f[b]), _mm512_set1_ps(YQ1),
	    _mm512_mul_ps(f2[b], _mm512_set1_ps(0.5f)));
	EACH(N) r[b] = _mm512_fmadd_ps(e69[b], f4[b], e25[b]);
	EACH(N) y[b] = _mm512_fnmadd_ps(f4[b], r[b], s[b]);
}

struct f512acc {
	__m512d W, P0, P1, Y0, Y1, L, LY;
};

/* f512_fast's constants, broadcast from memory: K points to f512k through
 * an empty asm, so the compiler neither holds them in registers, which the
 * loop lacks, nor rebuilds them from general registers in every turn */
struct f512k {
	double ln2;
	int32_t off, mant;
};
static const struct f512k f512k = { M_LN2, 0x3f3504f3, 0x007fffff };
#define K32(f) _mm512_set1_epi32(K->f)
#define KPD(f) _mm512_set1_pd(K->f)

/*
 * A fast block's sums in two halves, for N blocks (N = 1 or 2, a constant
 * where inlined): f512_a takes e and f from the bits of xl[b], 16 floats
 * whose logarithms are taken; f512_b the series and the sums, xw[b] their
 * weights (or, where xp is not NULL, the 16 N floats there, converted
 * from memory without an extract: 1.02-1.03x, issue 30). With N = 2
 * (f512_run2's turns) the two blocks' statements are interleaved, as
 * ln512xn takes the double logs (issue 30, bench/RESULTS.md), and the
 * sums take block 0, then block 1: the order of two blocks taken one at a
 * time, the same results bit for bit.
 */
A512 void
f512_a(const __m512 *xl, __m512i *e, __m512 *f, const int N)
{
	const struct f512k *K = &f512k;
	__asm__("" : "+r"(K));
	__m512i u[2];
	EACH(N) u[b] = _mm512_sub_epi32(_mm512_castps_si512(xl[b]), K32(off));
	EACH(N) e[b] = _mm512_srai_epi32(u[b], 23);
	EACH(N) f[b] = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_add_epi32(_mm512_and_si512(
	    u[b], K32(mant)), K32(off))), _mm512_set1_ps(1.0f));
}

A512 void
f512_b(const __m512 *xw, const float *xp, const __m512i *e, const __m512 *f, struct f512acc *a,
    const int N)
{
	const struct f512k *K = &f512k;
	__asm__("" : "+r"(K));
	__m512 y[2];
	__m512d x0[2], x1[2], t0[2], t1[2], y0[2], y1[2];
	ynf16n(f, y, N);
	if (xp != NULL) {	/* the weights converted from memory: no extract */
		EACH(N) x0[b] = _mm512_cvtps_pd(_mm256_loadu_ps(xp + 16 * b));
		EACH(N) x1[b] = _mm512_cvtps_pd(_mm256_loadu_ps(xp + 16 * b + 8));
	} else {
		EACH(N) x0[b] = _mm512_cvtps_pd(_mm512_castps512_ps256(xw[b]));
		EACH(N) x1[b] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(xw[b], 1));
	}
	EACH(N) t0[b] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(e[b])),
	    KPD(ln2), _mm512_cvtps_pd(_mm512_castps512_ps256(f[b])));
	EACH(N) t1[b] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti32x8_epi32(e[b], 1)),
	    KPD(ln2), _mm512_cvtps_pd(_mm512_extractf32x8_ps(f[b], 1)));
	EACH(N) y0[b] = _mm512_cvtps_pd(_mm512_castps512_ps256(y[b]));
	EACH(N) y1[b] = _mm512_cvtps_pd(_mm512_extractf32x8_ps(y[b], 1));
	EACH(N) {
		a->W = _mm512_add_pd(a->W, _mm512_add_pd(x0[b], x1[b]));
		a->P0 = _mm512_fmadd_pd(x0[b], t0[b], a->P0);
		a->P1 = _mm512_fmadd_pd(x1[b], t1[b], a->P1);
		a->Y0 = _mm512_fmadd_pd(x0[b], y0[b], a->Y0);
		a->Y1 = _mm512_fmadd_pd(x1[b], y1[b], a->Y1);
		a->L = _mm512_add_pd(a->L, _mm512_add_pd(t0[b], t1[b]));
		a->LY = _mm512_add_pd(a->LY, _mm512_add_pd(y0[b], y1[b]));
	}
}

/* both halves at once: the blocks the pipeline does not take */
A512 void
f512_fast(const __m512 *xl, const __m512 *xw, struct f512acc *a, const int N)
{
	__m512i e[2];
	__m512 f[2];
	f512_a(xl, e, f, N);
	f512_b(xw, NULL, e, f, a, N);
}
#undef EACH

/* 16 f32 elements at i (m of them in the row) through p512_blk16, the
 * sink's lane masked; not inlined: the fast loop keeps its registers */
__attribute__((target(T512), noinline)) static void
f512_slow(const void *x, size_t i, size_t m, size_t k, __m512 lof, __m512 hif,
    struct p512acc *a)
{
	struct ln512c c;
	float buf[16];
	unsigned vm = m >= 16 ? 0xffffu : (1u << m) - 1;
	ln512_init(&c);
	if (k - i < 16)
		vm &= ~(1u << (k - i));
	if (m < 16) {
		x = tail_block(buf, sizeof(buf), x, i, m, 4);
		i = 0;
	}
	p512_blk16(x, i, SWM_F32, (__mmask16)vm, lof, hif, &c, a, NULL, NULL, 0);
}

/* the lanes of v a fast block takes: >= hff and below hv (p512_f32s) */
A512 __mmask16
fast16(__m512 v, __m512 hff, __m512 hv)
{
	return _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, hff, _CMP_GE_OQ), v, hv, _CMP_LT_OQ);
}

/*
 * The fast blocks from i on, two a turn (f512_a, f512_b), while they are fast
 * and the sink is not among them; returns where they stop. Software-
 * pipelined: each turn takes the next two blocks' first halves (f512_a)
 * beside this two's second (f512_b), so that the operations the core is
 * given wait on chains about half as deep; the same operations and sums
 * as two blocks taken one at a time, the same results bit for bit;
 * 1.06x as fast on rows in L2, 1.02x streamed (Zen 5, ABBA medians; issue
 * 30, bench/RESULTS.md). It asks for the row ROW_AHEAD bytes on.
 */
A512 size_t
f512_run2(const void *x, size_t n, size_t k, size_t i, __m512 hff, __m512 hv,
    struct f512acc *fa)
{
	if (i + 32 > n || k - i < 32)
		return i;
	__m512 v[2] = { ld16f(x, i, SWM_F32), ld16f(x, i + 16, SWM_F32) };
	__mmask16 ok = fast16(v[0], hff, hv) & fast16(v[1], hff, hv);
	__m512i e[2];
	__m512 f[2];
	f512_a(v, e, f, 2);
	while (ok == 0xffff) {
		size_t j = i + 32;
		row_ahead(x, 4 * i);
		row_ahead(x, 4 * i + 64);
		__m512 vn[2] = { v[0], v[1] }, fn[2] = { f[0], f[1] };
		__m512i en[2] = { e[0], e[1] };
		ok = 0;
		if (__builtin_expect(j + 32 <= n && k - j >= 32, 1)) {
			vn[0] = ld16f(x, j, SWM_F32);
			vn[1] = ld16f(x, j + 16, SWM_F32);
			ok = fast16(vn[0], hff, hv) & fast16(vn[1], hff, hv);
			f512_a(vn, en, fn, 2);
		}
		f512_b(v, (const float *)x + i, e, f, fa, 2);
		i = j;
		v[0] = vn[0], v[1] = vn[1];
		e[0] = en[0], e[1] = en[1];
		f[0] = fn[0], f[1] = fn[1];
	}
	return i;
}

F512 int
p512_f32s(const void *x, size_t n, size_t k, double thr, double blo, double bhi,
    struct swm_psum *ps)
{
	struct p512acc a;
	struct f512acc fa;
	double lo = blo < bhi ? blo : thr, hi = blo < bhi ? bhi : thr;
	__m512 lof = _mm512_set1_ps(fceil(lo)), hif = _mm512_set1_ps(fceil(hi));
	__m512 hff = _mm512_set1_ps(fceil(fmax(hi, FLT_MIN)));
	/* below 1/8 of the content: see p256_f32 (a heuristic of speed only) */
	float xk;
	memcpy(&xk, (const char *)x + 4 * k, 4);	/* rows come at any alignment */
	__m512 hv = _mm512_set1_ps((float)((1.0 - (double)xk) / 8));
	size_t i = 0;

	a.W = a.P = a.L = a.WB = _mm512_setzero_pd();
	a.bits = _mm512_setzero_si512();
	a.nv = a.nbig = a.nlo = 0;
	fa.W = fa.P0 = fa.P1 = fa.Y0 = fa.Y1 = fa.L = fa.LY = _mm512_setzero_pd();
	while (i + 16 <= n) {
		/* the fast blocks in a loop without a call: its constants and
		 * sums stay in registers (a call takes every vector register) */
		__m512 v;
		__mmask16 ok;
		i = f512_run2(x, n, k, i, hff, hv, &fa);
		for (; i + 16 <= n; i += 16) {
			v = ld16f(x, i, SWM_F32);
			ok = fast16(v, hff, hv);
			if (__builtin_expect(ok != 0xffff || k - i < 16, 0))
				break;
			f512_fast(&v, &v, &fa, 1);
		}
		if (i + 16 > n)
			break;
		/* the sink's block: its lane apart, fast when the others are */
		__mmask16 sk = k - i < 16 ? (__mmask16)(1u << (k - i)) : 0;
		if (sk && (__mmask16)(ok | sk) == 0xffff) {
			__m512 vl = _mm512_mask_mov_ps(v, sk, _mm512_set1_ps(1.0f));
			__m512 vw = _mm512_maskz_mov_ps((__mmask16)~sk, v);
			f512_fast(&vl, &vw, &fa, 1);
		} else {
			f512_slow(x, i, 16, k, lof, hif, &a);
		}
		i += 16;
	}
	if (i < n)
		f512_slow(x, i, n - i, k, lof, hif, &a);
	double Wf = _mm512_reduce_add_pd(fa.W);
	double Yf = _mm512_reduce_add_pd(_mm512_add_pd(fa.Y0, fa.Y1));
	double LYf = _mm512_reduce_add_pd(fa.LY);
	double W = _mm512_reduce_add_pd(a.W) + Wf;
	/* ln x = t - yn */
	double P = _mm512_reduce_add_pd(a.P) * LN2_16 +
	    (_mm512_reduce_add_pd(_mm512_add_pd(fa.P0, fa.P1)) - Yf);
	double L = _mm512_reduce_add_pd(a.L) * LN2_16 + (_mm512_reduce_add_pd(fa.L) - LYf);
	if (!(fabs(W) <= DBL_MAX) || !(fabs(P) <= DBL_MAX) || !(fabs(L) <= DBL_MAX))
		return -1;
	ps->W = W;
	ps->P = P;
	ps->L = L;
	ps->Wbig = _mm512_reduce_add_pd(a.WB) + Wf;
	ps->nsmall = (double)(a.nv - a.nbig);
	ps->band = (double)(a.nv - a.nbig - a.nlo);
	/* a fast block's elements are >= FLT_MIN: no sign bit there */
	ps->neg = _mm512_reduce_or_epi64(a.bits) < 0 ? 1.0 : 0.0;
	ps->nonfin = 0;
	ps->eP = SWM_Y_KAPPA * fabs(Yf);
	ps->eL = SWM_Y_KAPPA * fabs(LYf);
	return ps->neg > 0 ? -1 : 0;
}

#undef K32
#undef KPD

#define P512(name, DT) PROBS_PAIR(F512, p512_row, name, DT)
P512(p512_f32, SWM_F32)
P512(p512_f16, SWM_F16)
P512(p512_bf16, SWM_BF16)
P512(p512_f64, SWM_F64)

struct l512acc {
	__m512d E, EY, Y;
	uint64_t nm;
};

/* 8 logits as doubles: live the lanes in the row and not -inf, pos the
 * lanes of live with z - zmax >= -708 */
A512 void
l512_acc8(__m512d z, __mmask8 live, __mmask8 pos, __m512d vz,
    const struct ex512c *c, struct l512acc *a)
{
	__m512d y = _mm512_maskz_sub_pd(live, z, vz);
	__m512d e = ex512(y, pos, c);
	a->E = _mm512_add_pd(a->E, e);
	a->EY = _mm512_fmadd_pd(e, y, a->EY);
	a->Y = _mm512_add_pd(a->Y, y);
}

A512 void
l512_blk16(const void *x, size_t i, swm_dtype dt, __mmask16 vm, __m512 tf,
    __m512d vz, const struct ex512c *c, struct l512acc *a)
{
	__m512 zf = ld16f(x, i, dt);
	__mmask16 masked = _mm512_mask_cmp_ps_mask(vm, zf, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
	__mmask16 live = vm & (__mmask16)~masked;
	__mmask16 pos = _mm512_mask_cmp_ps_mask(live, zf, tf, _CMP_GE_OQ);
	a->nm += (uint64_t)__builtin_popcount(masked);
	__m512d z0, z1;
	if (dt == SWM_F32) {
		z0 = ld8(x, i, dt);
		z1 = ld8(x, i + 8, dt);
	} else {
		z0 = _mm512_cvtps_pd(_mm512_castps512_ps256(zf));
		z1 = _mm512_cvtps_pd(_mm512_extractf32x8_ps(zf, 1));
	}
	l512_acc8(z0, (__mmask8)live, (__mmask8)pos, vz, c, a);
	l512_acc8(z1, (__mmask8)(live >> 8), (__mmask8)(pos >> 8), vz, c, a);
}

/* 8 f64 logits: the test on y = z - zmax itself, as the generic loop */
A512 void
l512_blk8(const void *x, size_t i, __mmask8 vm, __m512d vz,
    const struct ex512c *c, struct l512acc *a)
{
	__m512d z = ld8(x, i, SWM_F64);
	__mmask8 masked = _mm512_mask_cmp_pd_mask(vm, z, _mm512_set1_pd(-INFINITY), _CMP_EQ_OQ);
	__mmask8 live = vm & (__mmask8)~masked;
	__m512d y = _mm512_maskz_sub_pd(live, z, vz);
	__mmask8 pos = _mm512_mask_cmp_pd_mask(live, y, _mm512_set1_pd(EX_MIN), _CMP_GE_OQ);
	__m512d e = ex512(y, pos, c);
	a->nm += (uint64_t)__builtin_popcount(masked);
	a->E = _mm512_add_pd(a->E, e);
	a->EY = _mm512_fmadd_pd(e, y, a->EY);
	a->Y = _mm512_add_pd(a->Y, y);
}

A512 void
l512_row(const void *x, swm_dtype dt, size_t n, size_t k, struct swm_lsum *ls)
{
	double zmax;
	int nan = 0;
	size_t i = 0;

	/* the max and the NaN test, in the input's precision */
	if (dt == SWM_F64) {
		__m512d mx = _mm512_set1_pd(-INFINITY);
		__mmask8 bad = 0;
		for (; i + 8 <= n; i += 8) {
			__m512d z = ld8(x, i, dt);
			bad |= _mm512_cmp_pd_mask(z, z, _CMP_UNORD_Q);
			mx = _mm512_max_pd(z, mx);
		}
		zmax = _mm512_reduce_max_pd(mx);
		nan = bad != 0;
	} else {
		__m512 mx = _mm512_set1_ps(-INFINITY);
		__mmask16 bad = 0;
		for (; i + 16 <= n; i += 16) {
			__m512 z = ld16f(x, i, dt);
			bad |= _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);
			mx = _mm512_max_ps(z, mx);
		}
		zmax = _mm512_reduce_max_ps(mx);
		nan = bad != 0;
	}
	for (; i < n; i++) {
		double z = swm_load(x, dt, i);
		nan |= z != z;
		zmax = z > zmax ? z : zmax;
	}
	ls->zmax = zmax;
	ls->bad = nan || zmax == INFINITY ? 1.0 : 0.0;
	if (ls->bad > 0 || zmax == -INFINITY)
		return;

	struct ex512c c;
	struct l512acc a;
	__m512d vz = _mm512_set1_pd(zmax);
	ex512_init(&c);
	a.E = a.EY = a.Y = _mm512_setzero_pd();
	a.nm = 0;
	i = 0;
	if (dt == SWM_F64) {
		size_t kb = k & ~(size_t)7;
		for (; i < kb; i += 8)
			l512_blk8(x, i, 0xff, vz, &c, &a);
		if (i + 8 <= n) {
			l512_blk8(x, i, (__mmask8)~(1u << (k - i)), vz, &c, &a);
			i += 8;
		}
		for (; i + 8 <= n; i += 8)
			l512_blk8(x, i, 0xff, vz, &c, &a);
		if (i < n) {
			double buf[8];
			const void *tb = tail_block(buf, sizeof(buf), x, i, n - i, 8);
			unsigned vm = (1u << (n - i)) - 1;
			if (k >= i)
				vm &= ~(1u << (k - i));
			l512_blk8(tb, 0, (__mmask8)vm, vz, &c, &a);
		}
	} else {
		/*
		 * z - zmax >= -708 as z >= the smallest float >= zmax - 708:
		 * exact, since zmax - 708 is exact in double for float zmax
		 * (or, when it is not, no float lies between it and zmax)
		 */
		__m512 tf = _mm512_set1_ps(fceil(zmax + EX_MIN));
		size_t es = dt == SWM_F32 ? 4 : 2;
		size_t kb = k & ~(size_t)15;
		for (; i < kb; i += 16)
			l512_blk16(x, i, dt, 0xffff, tf, vz, &c, &a);
		if (i + 16 <= n) {
			l512_blk16(x, i, dt, (__mmask16)~(1u << (k - i)), tf, vz, &c, &a);
			i += 16;
		}
		for (; i + 16 <= n; i += 16)
			l512_blk16(x, i, dt, 0xffff, tf, vz, &c, &a);
		if (i < n) {
			float buf[16];
			const void *tb = tail_block(buf, sizeof(buf), x, i, n - i, es);
			unsigned vm = (1u << (n - i)) - 1;
			if (k >= i)
				vm &= ~(1u << (k - i));
			l512_blk16(tb, 0, dt, (__mmask16)vm, tf, vz, &c, &a);
		}
	}
	ls->E = _mm512_reduce_add_pd(a.E);
	ls->EY = _mm512_reduce_add_pd(a.EY);
	ls->Y = _mm512_reduce_add_pd(a.Y);
	ls->nm = (double)a.nm;
}

F512 void l512_f32(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l512_row(x, SWM_F32, n, k, ls); }
F512 void l512_f16(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l512_row(x, SWM_F16, n, k, ls); }
F512 void l512_bf16(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l512_row(x, SWM_BF16, n, k, ls); }
F512 void l512_f64(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l512_row(x, SWM_F64, n, k, ls); }


/*
 * Expansion of an accepted probability row (swm_row_expand): p = x / S and
 * l = ln x + lnscale, or ln delta for the parts below thr, in one pass.
 */
A512 void
e512_row(const void *x, swm_dtype dt, size_t n, double invS, double thr,
    double lnscale, double lndelta, double *p, double *l)
{
	struct ln512c c;
	__m512d vis = _mm512_set1_pd(invS), vthr = _mm512_set1_pd(thr);
	__m512d vsc = _mm512_set1_pd(lnscale), vld = _mm512_set1_pd(lndelta);
	__m512d k16 = _mm512_set1_pd(LN2_16);
	size_t es = swm_dtype_size(dt), i = 0;
	ln512_init(&c);
	for (; i < n; i += 8) {
		double buf[8];
		__mmask8 m = 0xff;
		const void *src = x;
		size_t at = i;
		if (i + 8 > n) {
			src = tail_block(buf, sizeof(buf), x, i, n - i, es);
			at = 0;
			m = (__mmask8)((1u << (n - i)) - 1);
		}
		__m512d v = ld8(src, at, dt);
		__m512d lv = _mm512_fmadd_pd(ln512(v, &c, dt == SWM_F64), k16, vsc);
		__mmask8 small = _mm512_cmp_pd_mask(v, vthr, _CMP_LT_OQ);
		_mm512_mask_storeu_pd(p + i, m, _mm512_mul_pd(v, vis));
		_mm512_mask_storeu_pd(l + i, m, _mm512_mask_blend_pd(small, lv, vld));
	}
}

#define E512(name, DT) F512 void name(const void *x, size_t n, double invS, double thr, \
    double lnscale, double lndelta, double *p, double *l) \
    { e512_row(x, DT, n, invS, thr, lnscale, lndelta, p, l); }
E512(e512_f32, SWM_F32)
E512(e512_f16, SWM_F16)
E512(e512_bf16, SWM_BF16)
E512(e512_f64, SWM_F64)

F512 void
ln512_array(const double *x, double *y, size_t n)
{
	struct ln512c c;
	ln512_init(&c);
	for (size_t i = 0; i < n; i += 8) {
		__mmask8 lv = n - i < 8 ? (__mmask8)((1u << (n - i)) - 1) : 0xff;
		__m512d v = ln512(_mm512_maskz_loadu_pd(lv, x + i), &c, 1);
		_mm512_mask_storeu_pd(y + i, lv, _mm512_mul_pd(v, _mm512_set1_pd(LN2_16)));
	}
}

F512 void
ex512_array(const double *y, double *e, size_t n)
{
	struct ex512c c;
	ex512_init(&c);
	for (size_t i = 0; i < n; i += 8) {
		__mmask8 lv = n - i < 8 ? (__mmask8)((1u << (n - i)) - 1) : 0xff;
		__m512d v = _mm512_maskz_loadu_pd(lv, y + i);
		__mmask8 pos = _mm512_cmp_pd_mask(v, _mm512_set1_pd(EX_MIN), _CMP_GE_OQ);
		_mm512_mask_storeu_pd(e + i, lv, ex512(_mm512_maskz_mov_pd(pos, v), pos, &c));
	}
}

/*
 * Head-pair sums of two prepared rows (pair.c): the mixtures m = ax + ay and
 * mc = cx + cy, one logarithm each per element, and the dot product and the
 * squared clr difference, in one pass. n is a multiple of 8. No subnormal
 * handling: a subnormal mixture part m contributes m ln m < 1e-305, and the
 * logarithm of one (or of 0) is finite, so the sums are right to that.
 */
A512 void
pair512n(const double *ax, const double *cx, const double *lx, const double *ay,
    const double *cy, const double *ly, size_t n, double out[4], int shrt)
{
	struct ln512c c;
	__m512d hm = _mm512_setzero_pd(), hmc = hm, dot = hm, c2 = hm;
	ln512_init(&c);
	for (size_t i = 0; i < n; i += 8) {
		__m512d a = _mm512_loadu_pd(ax + i), b = _mm512_loadu_pd(ay + i);
		__m512d m = _mm512_add_pd(a, b);
		__m512d mc = _mm512_add_pd(_mm512_loadu_pd(cx + i), _mm512_loadu_pd(cy + i));
		__m512d d = _mm512_sub_pd(_mm512_loadu_pd(lx + i), _mm512_loadu_pd(ly + i));
		__m512d mv[2] = { m, mc }, lv[2];
		ln512xn(mv, lv, &c, 2, 0, shrt);
		dot = _mm512_fmadd_pd(a, b, dot);
		hm = _mm512_fmadd_pd(m, lv[0], hm);
		hmc = _mm512_fmadd_pd(mc, lv[1], hmc);
		c2 = _mm512_fmadd_pd(d, d, c2);
	}
	out[0] = _mm512_reduce_add_pd(hm) * LN2_16;
	out[1] = _mm512_reduce_add_pd(hmc) * LN2_16;
	out[2] = _mm512_reduce_add_pd(dot);
	out[3] = _mm512_reduce_add_pd(c2);
}

/* with LNQ's series: pair_f64 */
F512 void
pair512(const double *ax, const double *cx, const double *lx, const double *ay,
    const double *cy, const double *ly, size_t n, double out[4])
{
	pair512n(ax, cx, lx, ay, cy, ly, n, out, 0);
}

/* with the shorter series (LNA): pair */
F512 void
pair512s(const double *ax, const double *cx, const double *lx, const double *ay,
    const double *cy, const double *ly, size_t n, double out[4])
{
	pair512n(ax, cx, lx, ay, cy, ly, n, out, 1);
}

/* pair.c's prep_row in vector lanes (swm_simd.h, prep) */
F512 double
prep512(double *a, double *c, double *l, size_t n, size_t k, size_t keys8, double iw,
    double *nx)
{
	double pk = a[k];
	a[k] = 0;
	l[k] = 0;
	for (size_t i = n; i < keys8; i++)
		a[i] = l[i] = 0;
	__m512d vn = _mm512_setzero_pd(), vs = vn;
	for (size_t i = 0; i < keys8; i += 8) {
		__m512d x = _mm512_loadu_pd(a + i);
		vn = _mm512_fmadd_pd(x, x, vn);
		vs = _mm512_add_pd(vs, _mm512_loadu_pd(l + i));
	}
	double mean = _mm512_reduce_add_pd(vs) / (double)(n - 1);
	/* 0.5 a iw: 0.5 iw is exact, one rounding as in the generic loop */
	__m512d h = _mm512_set1_pd(0.5 * iw), half = _mm512_set1_pd(0.5), vm = _mm512_set1_pd(mean);
	for (size_t i = 0; i < keys8; i += 8) {
		__m512d x = _mm512_loadu_pd(a + i);
		_mm512_storeu_pd(c + i, _mm512_mul_pd(x, h));
		_mm512_storeu_pd(a + i, _mm512_mul_pd(x, half));
		_mm512_storeu_pd(l + i, _mm512_sub_pd(_mm512_loadu_pd(l + i), vm));
	}
	l[k] = 0;
	for (size_t i = n; i < keys8; i++)
		l[i] = 0;
	*nx = _mm512_reduce_add_pd(vn);
	return pk;
}

/*
 * The drift distance's first pass asks for the lines DIST2_AHEAD floats
 * on, one line a block: the next row's, where the rows lie one after the
 * other (the daemon's, a head's drift rows). The writer reads both steps'
 * rows from memory, and the distance waited on it a row at a time: 0.23
 * of the pair kernel's time in the daemon without this, 0.09 with it (the
 * bench, rows in cache: 0.11; issue 30).
 */
#define DIST2_AHEAD 2048

/*
 * Whether the prep_raw kernels write a row's ln parts (ln_out) with
 * non-temporal stores: where ln_out is aligned to the store's width. The
 * daemon's ln rows go to a fresh buffer that only the writer reads, a
 * step later, when they have left every cache anyway: ordinary stores
 * first read each line from memory (1 MiB a 4 MiB message), and that
 * cost prep_raw 2.7x its time in the bench (issue 30). The sfence at the
 * end orders them before the job is handed on.
 */
static inline int
ln_stream(const float *ln_out, uintptr_t align)
{
	return ln_out && ((uintptr_t)ln_out & (align - 1)) == 0;
}

/*
 * swm_simd.h, prep_raw: a and l hold a row's values x and their 16 log2 as
 * p512_row left them (probs_out). Puts p = x invS and l = ln x + lnscale,
 * or lndelta where x < thr (the operations of e512_row), l to ln_out as
 * floats when it is not NULL, then prepares the row as prep512.
 */
F512 double
prep512_raw(double *a, double *c, double *l, size_t n, size_t k, size_t keys8,
    const struct swm_fix *fx, double *nx, float *ln_out)
{
	__m512d vis = _mm512_set1_pd(fx->invS), vthr = _mm512_set1_pd(fx->thr);
	__m512d vsc = _mm512_set1_pd(fx->lnscale), vld = _mm512_set1_pd(fx->lndelta);
	int nt = ln_stream(ln_out, 32);
	for (size_t i = 0; i < n; i += 8) {
		__mmask8 m = i + 8 <= n ? 0xff : (__mmask8)((1u << (n - i)) - 1);
		__m512d v = _mm512_maskz_loadu_pd(m, a + i);
		__m512d lv = _mm512_fmadd_pd(_mm512_maskz_loadu_pd(m, l + i),
		    _mm512_set1_pd(LN2_16), vsc);
		__mmask8 small = _mm512_cmp_pd_mask(v, vthr, _CMP_LT_OQ);
		lv = _mm512_mask_blend_pd(small, lv, vld);
		_mm512_mask_storeu_pd(a + i, m, _mm512_mul_pd(v, vis));
		_mm512_mask_storeu_pd(l + i, m, lv);
		if (nt && m == 0xff)
			_mm256_stream_ps(ln_out + i, _mm512_cvtpd_ps(lv));
		else if (ln_out)
			_mm512_mask_storeu_ps(ln_out + i, (__mmask16)m,
			    _mm512_castps256_ps512(_mm512_cvtpd_ps(lv)));
	}
	if (nt)
		_mm_sfence();
	return prep512(a, c, l, n, k, keys8, fx->iw, nx);
}

/*
 * swm_content_dist2_f32 (pair.c) in vector lanes, as dist2_256: the sum of
 * (d - mean)^2 over the content, d = lx - ly in double (exact), two passes,
 * 16 elements a block with the sink's lane and a short tail masked.
 */
A512 __mmask16
d16(const float *lx, const float *ly, size_t i, size_t n, size_t k, __m512d *d0,
    __m512d *d1)
{
	__mmask16 m = i + 16 <= n ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
	if (k - i < 16)
		m &= (__mmask16)~(1u << (k - i));
	__m512 a = _mm512_maskz_loadu_ps(m, lx + i), b = _mm512_maskz_loadu_ps(m, ly + i);
	*d0 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
	    _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
	*d1 = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(a, 1)),
	    _mm512_cvtps_pd(_mm512_extractf32x8_ps(b, 1)));
	return m;
}

F512 double
dist2_512(const float *lx, const float *ly, size_t n, size_t k)
{
	if (n < 2)
		return NAN;
	__m512d s0 = _mm512_setzero_pd(), s1 = s0, d0, d1;
	for (size_t i = 0; i < n; i += 16) {
		_mm_prefetch((const char *)(lx + i + DIST2_AHEAD), _MM_HINT_T0);
		_mm_prefetch((const char *)(ly + i + DIST2_AHEAD), _MM_HINT_T0);
		d16(lx, ly, i, n, k, &d0, &d1);	/* masked lanes are 0 */
		s0 = _mm512_add_pd(s0, d0);
		s1 = _mm512_add_pd(s1, d1);
	}
	__m512d vm = _mm512_set1_pd(_mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) /
	    (double)(n - 1));
	s0 = s1 = _mm512_setzero_pd();
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 m = d16(lx, ly, i, n, k, &d0, &d1);
		d0 = _mm512_sub_pd(d0, vm);
		d1 = _mm512_sub_pd(d1, vm);
		s0 = _mm512_mask3_fmadd_pd(d0, d0, s0, (__mmask8)m);
		s1 = _mm512_mask3_fmadd_pd(d1, d1, s1, (__mmask8)(m >> 8));
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

const struct swm_kernels swm_kernels_avx512 = {
	"avx512",
	{ p512_f32s, p512_f16, p512_bf16, p512_f64 },
	{ l512_f32, l512_f16, l512_bf16, l512_f64 },
	ln512_array, ex512_array, pair512s,
	{ e512_f32, e512_f16, e512_bf16, e512_f64 },
	prep512,
	{ p512_f32_out, p512_f16_out, p512_bf16_out, p512_f64_out },
	prep512_raw,
	/*
	 * Double logarithms here: ln512's table costs as many operations as
	 * the single-precision series with its conversions (pair256), and
	 * measured 1.46e9 against 1.31e9 elements/s on Zen 5 (bench pairlogs).
	 * pair takes the shorter series (pair512s, LNA: 6.6e-14), pair_f64
	 * LNQ's.
	 */
	pair512,
	"f64",
	{ p512_f32, p512_f16, p512_bf16, p512_f64 },
	"f32",		/* probs[SWM_F32]: single-precision logarithms (p512_f32s) */
	dist2_512
};

/* =================================================================== AVX2 */

#define T256 "avx2,fma,f16c,popcnt"
#define A256 __attribute__((target(T256), always_inline)) static inline
#define F256 __attribute__((target(T256))) static

#define S1(v) _mm256_set1_pd(v)
#define S1I(v) _mm256_set1_epi64x((long long)(v))

A256 __m256d
ld4(const void *x, size_t i, swm_dtype dt)
{
	const char *p = x;
	switch (dt) {
	case SWM_F16:
		return _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64(
		    (const __m128i *)(const void *)(p + 2 * i))));
	case SWM_BF16:
		return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(
		    _mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)(const void *)(p + 2 * i)))));
	case SWM_F64:
		return _mm256_loadu_pd((const double *)(const void *)(p + 8 * i));
	default:
		return _mm256_cvtps_pd(_mm_loadu_ps((const float *)(const void *)(p + 4 * i)));
	}
}

/*
 * The tables as 32-bit halves (upper, lower) for vpermd, which picks dwords
 * from 8 in a register: ln_invc[] (lower halves 0), ln_g[], ex_t[].
 */
static const uint32_t ln_invhi[16] __attribute__((aligned(32))) = {
	0x3ff6410b, 0x3ff555d5, 0x3ff47944, 0x3ff3b2ed, 0x3ff2f74d, 0x3ff248f2,
	0x3ff1a624, 0x3ff1112f, 0x3ff0832a, 0x3ff00000, 0x3fee1cab, 0x3fec7045,
	0x3feaf406, 0x3fe999e1, 0x3fe85fa5, 0x3fe74413
};
static const uint32_t ln_ghi[16] __attribute__((aligned(32))) = {
	0xc01e76be, 0xc01e9221, 0xc01ec3c7, 0xc01f33f1, 0xc01fb3bb, 0xc02029a6,
	0xc0208747, 0xc020fb11, 0xc0217486, 0xc0220000, 0xc0213148, 0xc0208d86,
	0xc020138a, 0xc01f6689, 0xc01edd27, 0xc01e91c0
};
static const uint32_t ln_glo[16] __attribute__((aligned(32))) = {
	0x85532c61, 0xf868d2e7, 0xe1572fd5, 0x1b6ed72a, 0x5544dde4, 0x544c783d,
	0x3bf3d410, 0x8b376693, 0xb5e716be, 0x00000000, 0x338d0665, 0xb532e71e,
	0xdacb9670, 0x383048b9, 0x3f1c6bf1, 0x9899a728
};
static const uint32_t ex_thi[16] __attribute__((aligned(32))) = {
	0x3ff00000, 0x3ff0b558, 0x3ff172b8, 0x3ff2387a, 0x3ff306fe, 0x3ff3dea6,
	0x3ff4bfda, 0x3ff5ab07, 0x3ff6a09e, 0x3ff7a114, 0x3ff8ace5, 0x3ff9c491,
	0x3ffae89f, 0x3ffc199b, 0x3ffd5818, 0x3ffea4af
};
static const uint32_t ex_tlo[16] __attribute__((aligned(32))) = {
	0x00000000, 0x6cf9890f, 0x3c7d517b, 0x6e756238, 0x0a31b715, 0x4c123422,
	0xd5362a27, 0xdd485429, 0x667f3bcd, 0x73eb0187, 0x422aa0db, 0x82a3f090,
	0x995ad3ad, 0xdd85529c, 0xdcfba487, 0xa2a490da
};

/* dwords of t (16) picked by the low 3 bits of each dword of ix, the
 * second 8 where sel < 0 (its sign bit, per 64-bit lane) */
A256 __m256i
pick16(const uint32_t *t, __m256i ix, __m256i sel)
{
	__m256i a = _mm256_permutevar8x32_epi32(_mm256_load_si256((const __m256i *)(const void *)t), ix);
	__m256i b = _mm256_permutevar8x32_epi32(_mm256_load_si256((const __m256i *)(const void *)(t + 8)), ix);
	return _mm256_castpd_si256(_mm256_blendv_pd(_mm256_castsi256_pd(a),
	    _mm256_castsi256_pd(b), _mm256_castsi256_pd(sel)));
}

/* entry j of a 16-entry double table (halves thi, tlo): j in bits 0..3
 * (lo_ix) and 32..35 (hi_ix) of each lane, bit 3 of j the sign of sel */
A256 __m256d
tab16(const uint32_t *thi, const uint32_t *tlo, __m256i lo_ix, __m256i hi_ix, __m256i sel)
{
	return _mm256_castsi256_pd(_mm256_blend_epi32(pick16(tlo, lo_ix, sel),
	    pick16(thi, hi_ix, sel), 0xaa));
}

/* as ln512: 16 log2 x; the exponent through the 2^52 trick, logical shifts */
A256 __m256d
ln256(__m256d x, int sub)
{
	__m256d sadj = _mm256_setzero_pd();
	if (sub) {
		__m256d ms = _mm256_cmp_pd(x, S1(DBL_MIN), _CMP_LT_OQ);
		x = _mm256_blendv_pd(x, _mm256_mul_pd(x, S1(0x1p54)), ms);
		sadj = _mm256_and_pd(ms, S1(-16 * 54.0));
	}
	/* u = bits + 2^63 - OFF: (u >> 48) = 16 (k + 2048) + j, no sign needed */
	__m256i u = _mm256_add_epi64(_mm256_castpd_si256(x), S1I(0x8000000000000000ull - LN_OFF));
	__m256i s = _mm256_srli_epi64(u, 48);
	__m256d sd = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(s,
	    S1I(0x4330000000000000ull))), S1(0x1p52 + 16 * 2048.0));
	if (sub)
		sd = _mm256_add_pd(sd, sadj);
	__m256d z = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_and_si256(u,
	    S1I(0x000fffffffffffffull)), S1I(LN_OFF)));
	/*
	 * The tables from registers (no gathers): j in bits 0..3 of s and
	 * 32..35 of u >> 16, bit 3 of j the sign of u << 12. 1/c_j has a
	 * 20-bit mantissa: its upper half only.
	 */
	__m256i ih = _mm256_srli_epi64(u, 16), sel = _mm256_slli_epi64(u, 12);
	__m256d invc = _mm256_and_pd(_mm256_castsi256_pd(pick16(ln_invhi, ih, sel)),
	    _mm256_castsi256_pd(S1I(0xffffffff00000000ull)));
	__m256d g = tab16(ln_ghi, ln_glo, s, ih, sel);
	__m256d r = _mm256_fmadd_pd(z, invc, S1(-1.0));
	__m256d h = _mm256_fmadd_pd(S1(LNQ7), r, S1(LNQ6));
	h = _mm256_fmadd_pd(h, r, S1(LNQ5));
	h = _mm256_fmadd_pd(h, r, S1(LNQ4));
	h = _mm256_fmadd_pd(h, r, S1(LNQ3));
	h = _mm256_fmadd_pd(h, r, S1(LNQ2));
	h = _mm256_fmadd_pd(h, r, S1(LNQ1));
	h = _mm256_fmadd_pd(h, r, S1(LNQ0));
	h = _mm256_fmadd_pd(h, r, S1(LNC1));
	return _mm256_add_pd(_mm256_add_pd(sd, g), _mm256_mul_pd(h, r));
}

/* e^y for y in [-708, 0]; garbage elsewhere, masked by the caller */
A256 __m256d
ex256(__m256d y)
{
	__m256d t = _mm256_fmadd_pd(y, S1(EX_INV), S1(EX_SHIFT));
	__m256d kd = _mm256_sub_pd(t, S1(EX_SHIFT));
	__m256i ti = _mm256_castpd_si256(t);
	__m256d tj = tab16(ex_thi, ex_tlo, ti, _mm256_slli_epi64(ti, 32), _mm256_slli_epi64(ti, 60));
	__m256d r = _mm256_fnmadd_pd(kd, S1(EX_HI), y);
	r = _mm256_fnmadd_pd(kd, S1(EX_LO), r);
	__m256d r2 = _mm256_mul_pd(r, r);
	__m256d q = _mm256_fmadd_pd(S1(EXQ4), r, S1(EXQ3));
	q = _mm256_fmadd_pd(q, r, S1(EXQ2));
	q = _mm256_fmadd_pd(q, r, S1(EXQ1));
	q = _mm256_fmadd_pd(q, r, S1(EXQ0));
	__m256d e = _mm256_fmadd_pd(tj, _mm256_fmadd_pd(r2, q, r), tj);
	__m256i sc = _mm256_slli_epi64(_mm256_and_si256(ti, S1I(~15ull)), 48);
	return _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(e), sc));
}

/* lane masks for 4-bit masks */
static const int64_t lane_masks[16][4] __attribute__((aligned(32))) = {
	{ 0, 0, 0, 0 }, { -1, 0, 0, 0 }, { 0, -1, 0, 0 }, { -1, -1, 0, 0 },
	{ 0, 0, -1, 0 }, { -1, 0, -1, 0 }, { 0, -1, -1, 0 }, { -1, -1, -1, 0 },
	{ 0, 0, 0, -1 }, { -1, 0, 0, -1 }, { 0, -1, 0, -1 }, { -1, -1, 0, -1 },
	{ 0, 0, -1, -1 }, { -1, 0, -1, -1 }, { 0, -1, -1, -1 }, { -1, -1, -1, -1 }
};

A256 __m256d
lanes4(unsigned bits)
{
	return _mm256_load_pd((const double *)(const void *)lane_masks[bits & 15]);
}

struct p256acc {
	__m256d W, P, L, WB, bits;
	__m256i nbig, nlo;	/* counts per lane: a compare's all-ones lane is -1 */
};

/*
 * 4 elements; vmbits the lanes in the row (their x is 0 elsewhere). With
 * xo, the values and their 16 log2 go to xo[0..m) and vo[0..m) (m <= 4),
 * taken before the mask: the sink's own value and log are kept for the
 * caller (row.c, one pass per head), and a masked lane adds 0 * v = 0.
 */
A256 void
p256_blk(__m256d xr, unsigned vmbits, __m256d lo, __m256d hi, int sub,
    struct p256acc *a, double *xo, double *vo, size_t m, const __m256d *vt)
{
	__m256d x = vmbits == 15 ? xr : _mm256_and_pd(xr, lanes4(vmbits));
	__m256d v = vt ? *vt : ln256(xo ? xr : x, sub);
	__m256d big = _mm256_cmp_pd(x, hi, _CMP_GE_OQ);
	__m256d small = _mm256_cmp_pd(x, lo, _CMP_LT_OQ);
	a->W = _mm256_add_pd(a->W, x);
	a->P = _mm256_fmadd_pd(x, v, a->P);
	a->L = _mm256_add_pd(a->L, _mm256_and_pd(big, v));
	a->WB = _mm256_add_pd(a->WB, _mm256_and_pd(big, x));
	a->bits = _mm256_or_pd(a->bits, x);
	if (vmbits != 15)
		small = _mm256_and_pd(small, lanes4(vmbits));
	a->nbig = _mm256_sub_epi64(a->nbig, _mm256_castpd_si256(big));
	a->nlo = _mm256_sub_epi64(a->nlo, _mm256_castpd_si256(small));
	if (xo && m == 4) {
		_mm256_storeu_pd(xo, xr);
		_mm256_storeu_pd(vo, v);
	} else if (xo) {
		double bx[4], bv[4];
		_mm256_storeu_pd(bx, xr);
		_mm256_storeu_pd(bv, v);
		memcpy(xo, bx, m * 8);
		memcpy(vo, bv, m * 8);
	}
}

/* the sum of 8 lanes, pairwise */
A256 double
hsum8(__m256d u, __m256d v)
{
	__m256d w = _mm256_add_pd(u, v);
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(w), _mm256_extractf128_pd(w, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/*
 * Half and bfloat16 elements take few values: 16 log2 x of every positive
 * one (sign bit clear, 2^15 of each) is a table of 256 KiB, filled once
 * with libm's log2 (within an ulp: closer than ln256), and the row kernel
 * gathers from it instead of evaluating ln256: the values are exact, so
 * the precision is that of the double path. 0 gets a finite value (its
 * weight is 0), infinities and NaNs their own (the kernel then hands the
 * row to the generic loop, as it does for a negative element).
 */
static double tab_f16[1 << 15] __attribute__((aligned(64)));
static double tab_bf16[1 << 15] __attribute__((aligned(64)));
static _Atomic int tab_state;	/* 0 none, 1 being filled, 2 ready */

static double
half_value(uint32_t h)
{
	uint32_t e = (h >> 10) & 31, m = h & 1023;
	return e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp((double)m, -24) :
	    ldexp((double)(m | 1024), (int)e - 25);
}

static void
tabs_ready(void)
{
	if (atomic_load_explicit(&tab_state, memory_order_acquire) == 2)
		return;
	int none = 0;
	if (!atomic_compare_exchange_strong(&tab_state, &none, 1)) {
		while (atomic_load_explicit(&tab_state, memory_order_acquire) != 2)
			;	/* another thread fills them: a millisecond, once */
		return;
	}
	for (uint32_t i = 0; i < (1u << 15); i++) {
		uint32_t u = i << 16;
		float b;
		memcpy(&b, &u, 4);
		double h = half_value(i);
		tab_f16[i] = 16 * log2(h > 0 ? h : 0x1p-24);
		tab_bf16[i] = 16 * log2(b > 0 ? (double)b : 0x1p-133);
	}
	atomic_store_explicit(&tab_state, 2, memory_order_release);
}

/* 4 half or bfloat16 elements at x + i as doubles (*xr) and their 16 log2 */
A256 __m256d
ldtab4(const void *x, size_t i, swm_dtype dt, __m256d *xr)
{
	__m128i h = _mm_loadl_epi64((const __m128i *)(const void *)((const char *)x + 2 * i));
	*xr = dt == SWM_F16 ? _mm256_cvtps_pd(_mm_cvtph_ps(h)) :
	    _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h)));
	const double *t = dt == SWM_F16 ? tab_f16 : tab_bf16;
	uint64_t q = (uint64_t)_mm_cvtsi128_si64(h);
	__m128d lo2 = _mm_loadh_pd(_mm_load_sd(t + (q & 0x7fff)), t + ((q >> 16) & 0x7fff));
	__m128d hi2 = _mm_loadh_pd(_mm_load_sd(t + ((q >> 32) & 0x7fff)), t + ((q >> 48) & 0x7fff));
	return _mm256_insertf128_pd(_mm256_castpd128_pd256(lo2), hi2, 1);
}

/* one block of the row: from the table (half, bfloat16) or ln256 */
#define BLK(i, bits, acc, xo_, vo_, m_) do { \
	if (tab) { \
		__m256d xr_, v_ = ldtab4(x, (i), dt, &xr_); \
		p256_blk(xr_, (bits), lo, hi, sub, (acc), (xo_), (vo_), (m_), &v_); \
	} else { \
		p256_blk(ld4(x, (i), dt), (bits), lo, hi, sub, (acc), (xo_), (vo_), (m_), NULL); \
	} \
} while (0)

/* output pointers at element i, or NULL */
#define XO(i) (xo ? xo + (i) : NULL)
#define VO(i) (xo ? vo + (i) : NULL)

A256 int
p256_row(const void *x, swm_dtype dt, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps, double *xo, double *vo)
{
	struct p256acc a, b;
	int sub = dt == SWM_F64;
	size_t es = dt == SWM_F64 ? 8 : dt == SWM_F32 ? 4 : 2;
	__m256d lo = S1(blo < bhi ? blo : thr);
	__m256d hi = S1(blo < bhi ? bhi : thr);
	size_t kb = k & ~(size_t)3, i = 0;

	int tab = dt == SWM_F16 || dt == SWM_BF16;
	if (tab)
		tabs_ready();
	/* two sets of 4 lanes, even and odd blocks: 8 sums as the generic loop */
	a.W = a.P = a.L = a.WB = a.bits = _mm256_setzero_pd();
	a.nbig = a.nlo = _mm256_setzero_si256();
	b = a;
	for (; i + 8 <= kb; i += 8) {
		row_ahead(x, es * i);
		BLK(i, 15, &a, XO(i), VO(i), 4);
		BLK(i + 4, 15, &b, XO(i + 4), VO(i + 4), 4);
	}
	for (; i < kb; i += 4)
		BLK(i, 15, &a, XO(i), VO(i), 4);
	if (i + 4 <= n) {
		unsigned bits = 15 & ~(1u << (k - i));
		BLK(i, bits, &b, XO(i), VO(i), 4);
		i += 4;
	}
	for (; i + 8 <= n; i += 8) {
		row_ahead(x, es * i);
		BLK(i, 15, &a, XO(i), VO(i), 4);
		BLK(i + 4, 15, &b, XO(i + 4), VO(i + 4), 4);
	}
	for (; i + 4 <= n; i += 4)
		BLK(i, 15, &a, XO(i), VO(i), 4);
	if (i < n) {
		double buf[4];
		const void *tb = tail_block(buf, sizeof(buf), x, i, n - i, es);
		unsigned bits = (1u << (n - i)) - 1;
		if (k >= i)
			bits &= ~(1u << (k - i));
		if (tab) {
			__m256d xr_, v_ = ldtab4(tb, 0, dt, &xr_);
			p256_blk(xr_, bits, lo, hi, sub, &b, XO(i), VO(i), n - i, &v_);
		} else {
			p256_blk(ld4(tb, 0, dt), bits, lo, hi, sub, &b, XO(i), VO(i), n - i, NULL);
		}
	}
	double W = hsum8(a.W, b.W), P = hsum8(a.P, b.P), L = hsum8(a.L, b.L);
	if (!(fabs(W) <= DBL_MAX) || !(fabs(P) <= DBL_MAX) || !(fabs(L) <= DBL_MAX))
		return -1;
	ps->W = W;
	ps->P = P * LN2_16;
	ps->L = L * LN2_16;
	ps->Wbig = hsum8(a.WB, b.WB);
	/* every element but the sink went through one lane of a block */
	uint64_t cnt[2][4], nv = n - 1, nbig = 0, nlo = 0;
	_mm256_storeu_si256((__m256i *)(void *)cnt[0], _mm256_add_epi64(a.nbig, b.nbig));
	_mm256_storeu_si256((__m256i *)(void *)cnt[1], _mm256_add_epi64(a.nlo, b.nlo));
	for (int j = 0; j < 4; j++)
		nbig += cnt[0][j], nlo += cnt[1][j];
	ps->nsmall = (double)(nv - nbig);
	ps->band = (double)(nv - nbig - nlo);
	ps->neg = _mm256_movemask_pd(_mm256_or_pd(a.bits, b.bits)) != 0 ? 1.0 : 0.0;
	ps->nonfin = 0;
	ps->eP = ps->eL = 0;
	return ps->neg > 0 ? -1 : 0;
}
#undef XO
#undef VO
#undef BLK

#define P256(name, DT) PROBS_PAIR(F256, p256_row, name, DT)
P256(p256_f32x, SWM_F32)
P256(p256_f16, SWM_F16)
P256(p256_bf16, SWM_BF16)
P256(p256_f64, SWM_F64)

struct l256acc {
	__m256d E, EY, Y;
	uint64_t nm;
};

A256 void
l256_blk(__m256d z, unsigned vmbits, __m256d vz, __m256d vmin, struct l256acc *a)
{
	__m256d vm = lanes4(vmbits);
	__m256d masked = _mm256_cmp_pd(z, S1(-INFINITY), _CMP_EQ_OQ);
	__m256d live = _mm256_andnot_pd(masked, vm);
	__m256d y = _mm256_and_pd(live, _mm256_sub_pd(z, vz));
	__m256d pos = _mm256_and_pd(live, _mm256_cmp_pd(y, vmin, _CMP_GE_OQ));
	__m256d e = _mm256_and_pd(pos, ex256(_mm256_max_pd(y, vmin)));
	a->E = _mm256_add_pd(a->E, e);
	a->EY = _mm256_fmadd_pd(e, y, a->EY);
	a->Y = _mm256_add_pd(a->Y, y);
	a->nm += (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_pd(masked) & vmbits);
}

A256 void
l256_row(const void *x, swm_dtype dt, size_t n, size_t k, struct swm_lsum *ls)
{
	size_t es = dt == SWM_F64 ? 8 : dt == SWM_F32 ? 4 : 2;
	size_t i = 0;
	int nan = 0;
	double zmax;

	__m256d mx = S1(-INFINITY), bad = _mm256_setzero_pd();
	for (; i + 4 <= n; i += 4) {
		__m256d z = ld4(x, i, dt);
		bad = _mm256_or_pd(bad, _mm256_cmp_pd(z, z, _CMP_UNORD_Q));
		mx = _mm256_max_pd(z, mx);
	}
	__m128d m2 = _mm_max_pd(_mm256_castpd256_pd128(mx), _mm256_extractf128_pd(mx, 1));
	zmax = _mm_cvtsd_f64(_mm_max_sd(m2, _mm_unpackhi_pd(m2, m2)));
	nan = _mm256_movemask_pd(bad) != 0;
	for (; i < n; i++) {
		double z = swm_load(x, dt, i);
		nan |= z != z;
		zmax = z > zmax ? z : zmax;
	}
	ls->zmax = zmax;
	ls->bad = nan || zmax == INFINITY ? 1.0 : 0.0;
	if (ls->bad > 0 || zmax == -INFINITY)
		return;

	struct l256acc a, b;
	__m256d vz = S1(zmax), vmin = S1(EX_MIN);
	size_t kb = k & ~(size_t)3;
	a.E = a.EY = a.Y = _mm256_setzero_pd();
	a.nm = 0;
	b = a;
	for (i = 0; i + 8 <= kb; i += 8) {
		l256_blk(ld4(x, i, dt), 15, vz, vmin, &a);
		l256_blk(ld4(x, i + 4, dt), 15, vz, vmin, &b);
	}
	for (; i < kb; i += 4)
		l256_blk(ld4(x, i, dt), 15, vz, vmin, &a);
	if (i + 4 <= n) {
		l256_blk(ld4(x, i, dt), 15 & ~(1u << (k - i)), vz, vmin, &b);
		i += 4;
	}
	for (; i + 8 <= n; i += 8) {
		l256_blk(ld4(x, i, dt), 15, vz, vmin, &a);
		l256_blk(ld4(x, i + 4, dt), 15, vz, vmin, &b);
	}
	for (; i + 4 <= n; i += 4)
		l256_blk(ld4(x, i, dt), 15, vz, vmin, &a);
	if (i < n) {
		double buf[4];
		unsigned bits = (1u << (n - i)) - 1;
		if (k >= i)
			bits &= ~(1u << (k - i));
		l256_blk(ld4(tail_block(buf, sizeof(buf), x, i, n - i, es), 0, dt), bits,
		    vz, vmin, &b);
	}
	ls->E = hsum8(a.E, b.E);
	ls->EY = hsum8(a.EY, b.EY);
	ls->Y = hsum8(a.Y, b.Y);
	ls->nm = (double)(a.nm + b.nm);
}

F256 void l256_f32(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l256_row(x, SWM_F32, n, k, ls); }
F256 void l256_f16(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l256_row(x, SWM_F16, n, k, ls); }
F256 void l256_bf16(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l256_row(x, SWM_BF16, n, k, ls); }
F256 void l256_f64(const void *x, size_t n, size_t k, struct swm_lsum *ls) { l256_row(x, SWM_F64, n, k, ls); }


/* as e512_row */
A256 void
e256_row(const void *x, swm_dtype dt, size_t n, double invS, double thr,
    double lnscale, double lndelta, double *p, double *l)
{
	__m256d vis = S1(invS), vthr = S1(thr), vsc = S1(lnscale), vld = S1(lndelta);
	size_t es = swm_dtype_size(dt), i = 0;
	for (; i + 4 <= n; i += 4) {
		__m256d v = ld4(x, i, dt);
		__m256d lv = _mm256_fmadd_pd(ln256(v, dt == SWM_F64), S1(LN2_16), vsc);
		__m256d small = _mm256_cmp_pd(v, vthr, _CMP_LT_OQ);
		_mm256_storeu_pd(p + i, _mm256_mul_pd(v, vis));
		_mm256_storeu_pd(l + i, _mm256_blendv_pd(lv, vld, small));
	}
	if (i < n) {
		double buf[4], pb[4], lb[4];
		__m256d v = ld4(tail_block(buf, sizeof(buf), x, i, n - i, es), 0, dt);
		__m256d lv = _mm256_fmadd_pd(ln256(v, dt == SWM_F64), S1(LN2_16), vsc);
		__m256d small = _mm256_cmp_pd(v, vthr, _CMP_LT_OQ);
		_mm256_storeu_pd(pb, _mm256_mul_pd(v, vis));
		_mm256_storeu_pd(lb, _mm256_blendv_pd(lv, vld, small));
		memcpy(p + i, pb, (n - i) * 8);
		memcpy(l + i, lb, (n - i) * 8);
	}
}

#define E256(name, DT) F256 void name(const void *x, size_t n, double invS, double thr, \
    double lnscale, double lndelta, double *p, double *l) \
    { e256_row(x, DT, n, invS, thr, lnscale, lndelta, p, l); }
E256(e256_f32, SWM_F32)
E256(e256_f16, SWM_F16)
E256(e256_bf16, SWM_BF16)
E256(e256_f64, SWM_F64)

F256 void
ln256_array(const double *x, double *y, size_t n)
{
	for (size_t i = 0; i < n; i += 4) {
		__m256i lv = _mm256_castpd_si256(lanes4(n - i < 4 ? (1u << (n - i)) - 1 : 15));
		__m256d v = ln256(_mm256_maskload_pd(x + i, lv), 1);
		_mm256_maskstore_pd(y + i, lv, _mm256_mul_pd(v, S1(LN2_16)));
	}
}

F256 void
ex256_array(const double *y, double *e, size_t n)
{
	for (size_t i = 0; i < n; i += 4) {
		__m256i lv = _mm256_castpd_si256(lanes4(n - i < 4 ? (1u << (n - i)) - 1 : 15));
		__m256d v = _mm256_maskload_pd(y + i, lv);
		__m256d pos = _mm256_cmp_pd(v, S1(EX_MIN), _CMP_GE_OQ);
		_mm256_maskstore_pd(e + i, lv, _mm256_and_pd(pos, ex256(_mm256_max_pd(v,
		    S1(EX_MIN)))));
	}
}

/*
 * ln of doubles m >= 0 with a single-precision series: m = 2^e z, z in
 * [sqrt(1/2), sqrt(2)), e and f = z - 1 taken from the bits of the double
 * (integer operations, the exponent through the 2^52 trick as ln256; f is
 * exact), and ln z = f + y(f), y(f) = ln(1 + f) - f = -f^2/2 + f^3 P(f)
 * (Cephes logf, |y| <= 0.09) evaluated in 8 float lanes at f' = f rounded
 * to float. So ln m = e ln2 + f + y(f') in double: the rounding is that of
 * y (about an ulp of y) and y(f') - y(f), below 0.41 |f - f'|; against a
 * long double reference over random m the error per element has rms
 * 1.9e-9 and mean -1e-11 (pair.c, f32_noisy()); 1.88e-9 with yf8 before
 * its shallower form, 1.87-1.88e-9 after (issue 30: 2e6 m over 40
 * binades). No float conversion of m itself, of e or of f: one conversion
 * each way, for the series.
 * Zero and subnormal m give finite values (their weight is below 1e-300).
 */
#define LNF_OFF 0x3fe6a09e667f3bcdull	/* bits of sqrt(1/2) */

A256 void
ef4(__m256d m, __m256d *t, __m256d *f)
{
	/* u >> 52 = e + 2048: logical shift, no sign needed (as ln256) */
	__m256i u = _mm256_add_epi64(_mm256_castpd_si256(m), S1I(0x8000000000000000ull - LNF_OFF));
	__m256i s = _mm256_srli_epi64(u, 52);
	__m256d e = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(s,
	    S1I(0x4330000000000000ull))), S1(0x1p52 + 2048.0));
	__m256d z = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_and_si256(u,
	    S1I(0x000fffffffffffffull)), S1I(LNF_OFF)));
	*f = _mm256_sub_pd(z, S1(1.0));
	/* e ln2 + f: the rounding of one double, about 1e-16 of |e| */
	*t = _mm256_fmadd_pd(e, S1(M_LN2), *f);
}

/*
 * y = f^2 Q(f), Q(f) = f P(f) - 1/2 of degree 9: Q = -1/2 + f (q1 + f R),
 * R of degree 7 by Estrin's scheme, R = e25 + f^4 e69, and y = (-f^2 / 2 +
 * q1 f^3) + f^4 R, the first sum formed beside R: four operations deep (f^2,
 * e25, R, y) where Horner's form is ten (the loops that call it wait on
 * that chain, not on their ports). Three roundings at the magnitude of y,
 * as before this form (y = Q f^2, Q to the end: six deep): over every f of
 * the range the relative error is at most 1.717e-7 against 1.724e-7, rms
 * 4.44e-8 against 4.55e-8 (a scalar emulation with fmaf, bench/RESULTS.md);
 * the f32 rows and pair256 run 1.03-1.04x as fast (issue 30).
 */
A256 __m256
yf8(__m256 f)
{
	__m256 f2 = _mm256_mul_ps(f, f), f4 = _mm256_mul_ps(f2, f2);
	__m256 e23 = _mm256_fmadd_ps(_mm256_set1_ps(YR1), f, _mm256_set1_ps(YR0));
	__m256 e45 = _mm256_fmadd_ps(_mm256_set1_ps(YR3), f, _mm256_set1_ps(YR2));
	__m256 e67 = _mm256_fmadd_ps(_mm256_set1_ps(YR5), f, _mm256_set1_ps(YR4));
	__m256 e89 = _mm256_fmadd_ps(_mm256_set1_ps(YR7), f, _mm256_set1_ps(YR6));
	__m256 e25 = _mm256_fmadd_ps(e45, f2, e23), e69 = _mm256_fmadd_ps(e89, f2, e67);
	__m256 r = _mm256_fmadd_ps(e69, f4, e25);
	__m256 s = _mm256_fmadd_ps(_mm256_mul_ps(f2, f), _mm256_set1_ps(YQ1),
	    _mm256_mul_ps(f2, _mm256_set1_ps(-0.5f)));
	return _mm256_fmadd_ps(f4, r, s);
}

/*
 * sum m ln m over 8 doubles m >= 0 (two vectors), in two halves: mln_a
 * takes e ln2 + f in double and f in 8 float lanes, mln_b the series and
 * acc += m (e ln2 + f + y), one accumulator (pair256 runs out of
 * registers otherwise).
 */
A256 void
mln_a(__m256d m0, __m256d m1, __m256d *t0, __m256d *t1, __m256 *f)
{
	__m256d f0, f1;
	ef4(m0, t0, &f0);
	ef4(m1, t1, &f1);
	*f = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(f0)),
	    _mm256_cvtpd_ps(f1), 1);
}

A256 void
mln_b(__m256d m0, __m256d m1, __m256d t0, __m256d t1, __m256 f, __m256d *acc)
{
	__m256 y = yf8(f);
	t0 = _mm256_add_pd(t0, _mm256_cvtps_pd(_mm256_castps256_ps128(y)));
	t1 = _mm256_add_pd(t1, _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1)));
	*acc = _mm256_fmadd_pd(m0, t0, *acc);
	*acc = _mm256_fmadd_pd(m1, t1, *acc);
}

/* the sum of 4 lanes */
A256 double
hsum4(__m256d u)
{
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(u), _mm256_extractf128_pd(u, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/*
 * pair256's halves of a turn, as macros over its arguments (ax .. ly) and
 * sums (hm, hmc, dot, c2): PAIR_A, the two mixtures of the 8 keys at j,
 * their first halves (mln_a) into the set t0 .. g; PAIR_B, the rest of
 * those 8 keys from that set: the mixtures' second halves, dot, c2.
 */
#define M2(p, q, j) _mm256_add_pd(_mm256_loadu_pd((p) + (j)), _mm256_loadu_pd((q) + (j)))
#define PAIR_A(j, t0, t1, f, u0, u1, g) do { \
	mln_a(M2(ax, ay, j), M2(ax, ay, (j) + 4), &t0, &t1, &f); \
	mln_a(M2(cx, cy, j), M2(cx, cy, (j) + 4), &u0, &u1, &g); \
} while (0)
#define PAIR_B(j, t0, t1, f, u0, u1, g) do { \
	__m256d a0_ = _mm256_loadu_pd(ax + (j)), a1_ = _mm256_loadu_pd(ax + (j) + 4); \
	__m256d b0_ = _mm256_loadu_pd(ay + (j)), b1_ = _mm256_loadu_pd(ay + (j) + 4); \
	mln_b(_mm256_add_pd(a0_, b0_), _mm256_add_pd(a1_, b1_), t0, t1, f, &hm); \
	mln_b(M2(cx, cy, j), M2(cx, cy, (j) + 4), u0, u1, g, &hmc); \
	dot = _mm256_fmadd_pd(a0_, b0_, dot); \
	dot = _mm256_fmadd_pd(a1_, b1_, dot); \
	__m256d d0_ = _mm256_sub_pd(_mm256_loadu_pd(lx + (j)), _mm256_loadu_pd(ly + (j))); \
	__m256d d1_ = _mm256_sub_pd(_mm256_loadu_pd(lx + (j) + 4), \
	    _mm256_loadu_pd(ly + (j) + 4)); \
	c2 = _mm256_fmadd_pd(d0_, d0_, c2); \
	c2 = _mm256_fmadd_pd(d1_, d1_, c2); \
} while (0)

/*
 * Head-pair sums (swm_simd.h, pair) with single-precision logarithms and
 * double sums (METRICS.md §6, precision budget): 8 elements at a time, the
 * two mixtures' logs in 8 float lanes, every product and sum in double.
 * Software-pipelined: each turn takes the first halves of the logs of the
 * next 8 keys (PAIR_A) beside the rest of this 8's (PAIR_B), two register
 * sets in turn (no copies at the loop's end), so that the operations a
 * turn hands the core wait on chains about half as deep. The same
 * operations as a turn of 8 keys, each sum in the same order: the results
 * are those of the loop without it, bit for bit. With 16 registers it
 * spills, and still runs 1.03-1.06x as fast on Zen 5 (ABBA medians; issue
 * 30, bench/RESULTS.md). Reads exactly n doubles of each array.
 */
F256 void
pair256(const double *ax, const double *cx, const double *lx, const double *ay,
    const double *cy, const double *ly, size_t n, double out[4])
{
	__m256d hm = _mm256_setzero_pd(), hmc = hm, dot = hm, c2 = hm;
	__m256d t0, t1, u0, u1, T0, T1, U0, U1;
	__m256 f, g, F, G;
	size_t i = 0;

	if (n == 0) {
		out[0] = out[1] = out[2] = out[3] = 0;
		return;
	}
	PAIR_A(0, t0, t1, f, u0, u1, g);
	for (; i + 16 < n; i += 16) {
		PAIR_A(i + 8, T0, T1, F, U0, U1, G);
		PAIR_B(i, t0, t1, f, u0, u1, g);
		PAIR_A(i + 16, t0, t1, f, u0, u1, g);
		PAIR_B(i + 8, T0, T1, F, U0, U1, G);
	}
	if (i + 8 < n) {
		PAIR_A(i + 8, T0, T1, F, U0, U1, G);
		PAIR_B(i, t0, t1, f, u0, u1, g);
		PAIR_B(i + 8, T0, T1, F, U0, U1, G);
	} else {
		PAIR_B(i, t0, t1, f, u0, u1, g);
	}
	out[0] = hsum4(hm);
	out[1] = hsum4(hmc);
	out[2] = hsum4(dot);
	out[3] = hsum4(c2);
}
#undef M2
#undef PAIR_A
#undef PAIR_B

/* the same sums with double logarithms (ln256): the float64 reference of tests */
F256 void
pair256d(const double *ax, const double *cx, const double *lx, const double *ay,
    const double *cy, const double *ly, size_t n, double out[4])
{
	__m256d acc[2][4];
	for (int h = 0; h < 2; h++)
		for (int q = 0; q < 4; q++)
			acc[h][q] = _mm256_setzero_pd();
	for (size_t i = 0; i < n; i += 8)
		for (int h = 0; h < 2; h++) {
			size_t j = i + 4 * (size_t)h;
			__m256d a = _mm256_loadu_pd(ax + j), b = _mm256_loadu_pd(ay + j);
			__m256d m = _mm256_add_pd(a, b);
			__m256d mc = _mm256_add_pd(_mm256_loadu_pd(cx + j), _mm256_loadu_pd(cy + j));
			__m256d d = _mm256_sub_pd(_mm256_loadu_pd(lx + j), _mm256_loadu_pd(ly + j));
			acc[h][0] = _mm256_fmadd_pd(m, ln256(m, 0), acc[h][0]);
			acc[h][1] = _mm256_fmadd_pd(mc, ln256(mc, 0), acc[h][1]);
			acc[h][2] = _mm256_fmadd_pd(a, b, acc[h][2]);
			acc[h][3] = _mm256_fmadd_pd(d, d, acc[h][3]);
		}
	out[0] = hsum8(acc[0][0], acc[1][0]) * LN2_16;
	out[1] = hsum8(acc[0][1], acc[1][1]) * LN2_16;
	out[2] = hsum8(acc[0][2], acc[1][2]);
	out[3] = hsum8(acc[0][3], acc[1][3]);
}

/* the second half of pair.c's prep_row: c = a iw / 2, a /= 2, l -= mean */
A256 void
prep256_scale(double *a, double *c, double *l, size_t n, size_t k, size_t keys8,
    double iw, double mean)
{
	/* 0.5 a iw: 0.5 iw is exact, one rounding as in the generic loop */
	__m256d h = S1(0.5 * iw), vm = S1(mean);
	for (size_t i = 0; i < keys8; i += 4) {
		__m256d x = _mm256_loadu_pd(a + i);
		_mm256_storeu_pd(c + i, _mm256_mul_pd(x, h));
		_mm256_storeu_pd(a + i, _mm256_mul_pd(x, S1(0.5)));
		_mm256_storeu_pd(l + i, _mm256_sub_pd(_mm256_loadu_pd(l + i), vm));
	}
	l[k] = 0;
	for (size_t i = n; i < keys8; i++)
		l[i] = 0;
}

/* pair.c's prep_row in vector lanes (swm_simd.h, prep) */
F256 double
prep256(double *a, double *c, double *l, size_t n, size_t k, size_t keys8, double iw,
    double *nx)
{
	double pk = a[k];
	a[k] = 0;
	l[k] = 0;
	for (size_t i = n; i < keys8; i++)
		a[i] = l[i] = 0;
	__m256d vn[2] = { _mm256_setzero_pd(), _mm256_setzero_pd() }, vs[2] = { vn[0], vn[0] };
	for (size_t i = 0; i < keys8; i += 8)
		for (int h = 0; h < 2; h++) {
			__m256d x = _mm256_loadu_pd(a + i + 4 * h);
			vn[h] = _mm256_fmadd_pd(x, x, vn[h]);
			vs[h] = _mm256_add_pd(vs[h], _mm256_loadu_pd(l + i + 4 * h));
		}
	prep256_scale(a, c, l, n, k, keys8, iw, hsum8(vs[0], vs[1]) / (double)(n - 1));
	*nx = hsum8(vn[0], vn[1]);
	return pk;
}

/*
 * swm_simd.h, prep_raw: a and l hold a row's values x and their 16 log2 as
 * the probability kernel left them (probs_out). Puts p = x invS and l = ln x
 * + lnscale, or lndelta where x < thr (swm_row_expand(), the same
 * operations as e256_row), l to ln_out as floats when it is not NULL, then
 * prepares the row as prep256.
 */
F256 double
prep256_raw(double *a, double *c, double *l, size_t n, size_t k, size_t keys8,
    const struct swm_fix *fx, double *nx, float *ln_out)
{
	__m256d vis = S1(fx->invS), vthr = S1(fx->thr), vsc = S1(fx->lnscale);
	__m256d vld = S1(fx->lndelta);
	size_t i = 0;
	int nt = ln_stream(ln_out, 16);
	for (size_t j = n; j < keys8; j++)
		a[j] = l[j] = 0;
	for (; i < n; i += 4) {
		__m256d v = _mm256_loadu_pd(a + i);
		__m256d lv = _mm256_fmadd_pd(_mm256_loadu_pd(l + i), S1(LN2_16), vsc);
		__m256d small = _mm256_cmp_pd(v, vthr, _CMP_LT_OQ);
		lv = _mm256_blendv_pd(lv, vld, small);
		_mm256_storeu_pd(a + i, _mm256_mul_pd(v, vis));
		_mm256_storeu_pd(l + i, lv);
		if (nt && i + 4 <= n) {
			_mm_stream_ps(ln_out + i, _mm256_cvtpd_ps(lv));
		} else if (ln_out && i + 4 <= n) {
			_mm_storeu_ps(ln_out + i, _mm256_cvtpd_ps(lv));
		} else if (ln_out) {
			float fb[4];
			_mm_storeu_ps(fb, _mm256_cvtpd_ps(lv));
			memcpy(ln_out + i, fb, (n - i) * sizeof(float));
		}
	}
	if (nt)
		_mm_sfence();
	/* i may pass n by up to 3 (within keys8): those lanes are zeroed below */
	return prep256(a, c, l, n, k, keys8, fx->iw, nx);
}

/*
 * f32 rows without outputs (probs[SWM_F32]; probs_exact and probs_out keep
 * ln256): a block of 8 elements that are all content and >= max(hi,
 * FLT_MIN), the common case, takes single-precision logarithms: x = 2^e z,
 * z in [sqrt(1/2), sqrt(2)), e and f = z - 1 exact from the float's bits,
 * y = ln(1 + f) - f by yf8 in float, ln x = e ln2 + f + y and every sum in
 * double. yf8's relative error is below 1.73e-7 at every float f of that
 * range (exhaustive, test_row_log_error), and y <= 0 throughout (-f^2/2 +
 * q1 f^3 and f^4 R are both <= 0 there, and so is their rounded sum), so
 * eP = SWM_Y_KAPPA sum x |y| and eL = SWM_Y_KAPPA sum |y| over those
 * blocks bound the error left in P and in L; row.c takes the row again with
 * probs_exact where that could move a statistic by more than the budget
 * (METRICS.md §6). Other blocks (the sink's, the tail, any element below
 * hi, negative, subnormal or NaN) go through p256_blk as in p256_row, an
 * infinity through the generic loop (its sums overflow).
 */

struct f32acc {
	__m256d W, P0, P1, Y0, Y1, L, LY;
};

/*
 * The fast blocks in two loops over a chunk of up to F32_CHUNK blocks
 * (loop fission): f32_a takes each block's e, f and y (the integer steps
 * and yf8, in float) to buffers in L1, f32_b then the conversions and the
 * double sums, each half converted from memory (no extract). As one loop
 * (f32_fast until 2026-12-06) it ran at 0.67-0.72 of the rate at which
 * the core issues its instructions without their dependences (mca.py's
 * probe); each turn handed the core a chain from the load through the
 * series and the conversions to the sums, whose depth we estimate at
 * 35-55 cycles (not measured). In two loops: 0.79. P and Y take each half
 * in a sum of its own (P0, P1; Y0, Y1, as p512_f32s): one FMA a block on
 * each of their chains. W, L and LY are summed as before, bit for bit; P
 * and Y regrouped (within 1e-15 of them). ABBA against the one loop with
 * P0/P1 and Y0/Y1 (issue 30, bench/RESULTS.md, twelfth session): 1.11x on
 * rows in L2, 1.08x streamed; the two sums a half alone 1.02-1.035x; 16
 * blocks (1.5 KiB of buffers) ran as fast as 32 and 64, within 2%.
 */
#define F32_CHUNK 16

A256 void
f32_a(__m256 xv, float *fb, float *yb, int32_t *eb)
{
	__m256i u = _mm256_sub_epi32(_mm256_castps_si256(xv), _mm256_set1_epi32(0x3f3504f3));
	__m256i e = _mm256_srai_epi32(u, 23);
	__m256 z = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_and_si256(u,
	    _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f3504f3)));
	__m256 f = _mm256_sub_ps(z, _mm256_set1_ps(1.0f));
	_mm256_store_ps(fb, f);
	_mm256_store_ps(yb, yf8(f));
	_mm256_store_si256((__m256i *)(void *)eb, e);
}

/* the weights xp[0 .. 8) and the buffers' halves converted from memory */
A256 void
f32_b(const float *xp, const float *fb, const float *yb, const int32_t *eb, struct f32acc *a)
{
	__m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(xp));
	__m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(xp + 4));
	__m256d e0 = _mm256_cvtepi32_pd(_mm_load_si128((const __m128i *)(const void *)eb));
	__m256d e1 = _mm256_cvtepi32_pd(_mm_load_si128((const __m128i *)(const void *)(eb + 4)));
	__m256d t0 = _mm256_fmadd_pd(e0, S1(M_LN2), _mm256_cvtps_pd(_mm_load_ps(fb)));
	__m256d t1 = _mm256_fmadd_pd(e1, S1(M_LN2), _mm256_cvtps_pd(_mm_load_ps(fb + 4)));
	__m256d y0 = _mm256_cvtps_pd(_mm_load_ps(yb));
	__m256d y1 = _mm256_cvtps_pd(_mm_load_ps(yb + 4));
	a->W = _mm256_add_pd(_mm256_add_pd(a->W, x0), x1);
	a->P0 = _mm256_fmadd_pd(x0, t0, a->P0);
	a->P1 = _mm256_fmadd_pd(x1, t1, a->P1);
	a->Y0 = _mm256_fmadd_pd(x0, y0, a->Y0);
	a->Y1 = _mm256_fmadd_pd(x1, y1, a->Y1);
	a->L = _mm256_add_pd(_mm256_add_pd(a->L, t0), t1);
	a->LY = _mm256_add_pd(_mm256_add_pd(a->LY, y0), y1);
}

/* 4 elements at i through p256_blk, the sink (k) masked, the row's end
 * kept; not inlined: the fast loop keeps its registers */
__attribute__((target(T256), noinline)) static void
f32_slow4(const float *x, size_t n, size_t k, size_t i, __m256d lo, __m256d hi,
    struct p256acc *a)
{
	unsigned bits = 15;
	__m256d xr;
	if (i + 4 <= n) {
		xr = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
	} else {
		float buf[4];
		xr = _mm256_cvtps_pd(_mm_loadu_ps(tail_block(buf, sizeof(buf), x, i, n - i, 4)));
		bits = (1u << (n - i)) - 1;
	}
	if (k >= i && k < i + 4)
		bits &= ~(1u << (k - i));
	p256_blk(xr, bits, lo, hi, 0, a, NULL, NULL, 0, NULL);
}

F256 int
p256_f32(const void *xv, size_t n, size_t k, double thr, double blo, double bhi,
    struct swm_psum *ps)
{
	const float *x = xv;
	struct p256acc a, b;
	struct f32acc fa;
	__m256d lo = S1(blo < bhi ? blo : thr);
	__m256d hi = S1(blo < bhi ? bhi : thr);
	__m256 hif = _mm256_set1_ps(fceil(fmax(blo < bhi ? bhi : thr, FLT_MIN)));
	/*
	 * An element of 1/8 of the content or more (W = 1 - x_k in a row that
	 * sums to 1) takes the double way too: a fast block's elements then
	 * hold a share M of the content whose entropy is at least M ln 8, and
	 * their bound, below 0.064 SWM_Y_KAPPA M, stays under 6.2e-9 of Hc (and of
	 * H): a row of concentrated content is not taken twice. A heuristic
	 * of speed only: the bound is what row.c checks.
	 */
	float xk;
	memcpy(&xk, (const char *)xv + 4 * k, 4);	/* rows come at any alignment */
	__m256 hv = _mm256_set1_ps((float)((1.0 - (double)xk) / 8));
	uint64_t nfast = 0;
	size_t i = 0;

	a.W = a.P = a.L = a.WB = a.bits = _mm256_setzero_pd();
	a.nbig = a.nlo = _mm256_setzero_si256();
	b = a;
	fa.W = fa.P0 = fa.P1 = fa.Y0 = fa.Y1 = fa.L = fa.LY = _mm256_setzero_pd();
	float fb[F32_CHUNK * 8] __attribute__((aligned(32)));
	float yb[F32_CHUNK * 8] __attribute__((aligned(32)));
	int32_t eb[F32_CHUNK * 8] __attribute__((aligned(32)));
	while (i + 8 <= n) {
		/* a chunk of fast blocks, in two loops without a call: the sums
		 * stay in registers */
		size_t i0 = i, nb = 0;
		for (; nb < F32_CHUNK && i + 8 <= n; i += 8, nb++) {
			__m256 v = _mm256_loadu_ps(x + i);
			__m256 ok = _mm256_and_ps(_mm256_cmp_ps(v, hif, _CMP_GE_OQ),
			    _mm256_cmp_ps(v, hv, _CMP_LT_OQ));
			if (k - i < 8 || _mm256_movemask_ps(ok) != 0xff)
				break;
			f32_a(v, fb + 8 * nb, yb + 8 * nb, eb + 8 * nb);
		}
		for (size_t j = 0; j < nb; j++)
			f32_b(x + i0 + 8 * j, fb + 8 * j, yb + 8 * j, eb + 8 * j, &fa);
		nfast += nb;
		if (nb == F32_CHUNK)
			continue;	/* a full chunk: the next one */
		if (i + 8 > n)
			break;
		f32_slow4(x, n, k, i, lo, hi, &a);
		f32_slow4(x, n, k, i + 4, lo, hi, &b);
		i += 8;
	}
	for (; i < n; i += 4)
		f32_slow4(x, n, k, i, lo, hi, &a);
	double Wf = hsum4(fa.W), Yf = hsum8(fa.Y0, fa.Y1), LYf = hsum4(fa.LY);
	double W = hsum8(a.W, b.W) + Wf;
	double P = hsum8(a.P, b.P) * LN2_16 + (hsum8(fa.P0, fa.P1) + Yf);
	double L = hsum8(a.L, b.L) * LN2_16 + (hsum4(fa.L) + LYf);
	if (!(fabs(W) <= DBL_MAX) || !(fabs(P) <= DBL_MAX) || !(fabs(L) <= DBL_MAX))
		return -1;
	ps->W = W;
	ps->P = P;
	ps->L = L;
	ps->Wbig = hsum8(a.WB, b.WB) + Wf;
	/* every element but the sink went through one lane of a block */
	uint64_t cnt[2][4], nv = n - 1, nbig = 8 * nfast, nlo = 0;
	_mm256_storeu_si256((__m256i *)(void *)cnt[0], _mm256_add_epi64(a.nbig, b.nbig));
	_mm256_storeu_si256((__m256i *)(void *)cnt[1], _mm256_add_epi64(a.nlo, b.nlo));
	for (int j = 0; j < 4; j++)
		nbig += cnt[0][j], nlo += cnt[1][j];
	ps->nsmall = (double)(nv - nbig);
	ps->band = (double)(nv - nbig - nlo);
	/* a fast block's elements are >= FLT_MIN: no sign bit there */
	ps->neg = _mm256_movemask_pd(_mm256_or_pd(a.bits, b.bits)) != 0 ? 1.0 : 0.0;
	ps->nonfin = 0;
	ps->eP = SWM_Y_KAPPA * fabs(Yf);
	ps->eL = SWM_Y_KAPPA * fabs(LYf);
	return ps->neg > 0 ? -1 : 0;
}

/*
 * swm_content_dist2_f32 (pair.c) in vector lanes: the sum of (d - mean)^2
 * over the content, d = lx - ly in double (exact), mean = sum d / (n - 1):
 * two passes, 8 elements a block, the sink's lane masked, the tail one by
 * one. The same terms as the generic loop in another order.
 */
A256 void
d8(const float *lx, const float *ly, size_t i, __m256d *d0, __m256d *d1)
{
	__m256 a = _mm256_loadu_ps(lx + i), b = _mm256_loadu_ps(ly + i);
	*d0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)),
	    _mm256_cvtps_pd(_mm256_castps256_ps128(b)));
	*d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
	    _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)));
}

F256 double
dist2_256(const float *lx, const float *ly, size_t n, size_t k)
{
	if (n < 2)
		return NAN;
	__m256d s0 = _mm256_setzero_pd(), s1 = s0, d0, d1;
	size_t i = 0, n8 = n & ~(size_t)7;
	/* the masks of the block holding the sink (all lanes elsewhere) */
	size_t kb = k < n8 ? k & ~(size_t)7 : n;
	unsigned j = (unsigned)(k - kb);
	__m256d m0 = lanes4(j < 4 ? 15 & ~(1u << j) : 15);
	__m256d m1 = lanes4(j >= 4 && j < 8 ? 15 & ~(1u << (j - 4)) : 15);
	for (; i < n8; i += 8) {
		if (!(i & 15)) {
			_mm_prefetch((const char *)(lx + i + DIST2_AHEAD), _MM_HINT_T0);
			_mm_prefetch((const char *)(ly + i + DIST2_AHEAD), _MM_HINT_T0);
		}
		d8(lx, ly, i, &d0, &d1);
		if (i == kb) {
			d0 = _mm256_and_pd(d0, m0);
			d1 = _mm256_and_pd(d1, m1);
		}
		s0 = _mm256_add_pd(s0, d0);
		s1 = _mm256_add_pd(s1, d1);
	}
	double st = 0;
	for (; i < n; i++)
		st += i == k ? 0.0 : (double)lx[i] - (double)ly[i];
	double mean = (hsum8(s0, s1) + st) / (double)(n - 1);
	__m256d vm = S1(mean);
	s0 = s1 = _mm256_setzero_pd();
	for (i = 0; i < n8; i += 8) {
		d8(lx, ly, i, &d0, &d1);
		d0 = _mm256_sub_pd(d0, vm);
		d1 = _mm256_sub_pd(d1, vm);
		if (i == kb) {
			d0 = _mm256_and_pd(d0, m0);
			d1 = _mm256_and_pd(d1, m1);
		}
		s0 = _mm256_fmadd_pd(d0, d0, s0);
		s1 = _mm256_fmadd_pd(d1, d1, s1);
	}
	st = 0;
	for (; i < n; i++) {
		double d = (double)lx[i] - (double)ly[i] - mean;
		st += i == k ? 0.0 : d * d;
	}
	return hsum8(s0, s1) + st;
}

const struct swm_kernels swm_kernels_avx2 = {
	"avx2",
	{ p256_f32, p256_f16, p256_bf16, p256_f64 },
	{ l256_f32, l256_f16, l256_bf16, l256_f64 },
	ln256_array, ex256_array, pair256,
	{ e256_f32, e256_f16, e256_bf16, e256_f64 },
	prep256,
	{ p256_f32x_out, p256_f16_out, p256_bf16_out, p256_f64_out },
	prep256_raw,
	pair256d,
	"f32",
	{ p256_f32x, p256_f16, p256_bf16, p256_f64 },
	"f32",
	dist2_256
};
