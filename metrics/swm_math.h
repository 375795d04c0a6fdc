/*
 * swm_math.h: scalar kernels written so that a loop calling them vectorizes
 * (no libm calls, no branches the compiler cannot turn into selects).
 * Internal to the metric core; tests check them against libm.
 */
#ifndef SWM_MATH_H
#define SWM_MATH_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "swm.h"

static inline uint64_t swm_dbits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double swm_bitsd(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
static inline uint32_t swm_fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float swm_bitsf(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

/* IEEE binary16 to float, exact for every input (subnormals, inf, NaN). */
static inline float swm_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t em = h & 0x7fffu;
	uint32_t nbits = (em << 13) + 0x38000000u;	/* rebias 15 -> 127 */
	uint32_t ibits = (em << 13) | 0x7f800000u;	/* inf, NaN payload */
	float sub = (float)em * 0x1p-24f;		/* zero and subnormals */
	float r = em < 0x0400u ? sub : swm_bitsf(em >= 0x7c00u ? ibits : nbits);
	return swm_bitsf(swm_fbits(r) | sign);
}

/* bfloat16 is the upper half of a float. */
static inline float swm_bf16_to_f32(uint16_t h)
{
	return swm_bitsf((uint32_t)h << 16);
}

/*
 * Natural logarithm for positive finite x (subnormals included), to about
 * one ulp. fdlibm's reduction: x = 2^k m with m in [sqrt(1/2), sqrt(2)),
 * f = m - 1, s = f / (2 + f), and an odd polynomial in s. Integer work is
 * on 64-bit lanes with logical shifts only, so AVX2 can do it.
 */
static inline double swm_ln(double x)
{
	int sub = x < DBL_MIN;
	double xs = sub ? x * 0x1p54 : x;
	double kadj = sub ? -54.0 : 0.0;
	uint64_t u = swm_dbits(xs) + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull);
	uint64_t eb = u >> 52;
	/* eb < 2048: convert exactly through the 2^52 mantissa trick */
	double k = (swm_bitsd(0x4330000000000000ull | eb) - 0x1p52) - 1023.0 + kadj;
	double m = swm_bitsd((u & 0x000fffffffffffffull) + 0x3fe6a09e667f3bcdull);
	double f = m - 1.0;
	double hfsq = 0.5 * f * f;
	double s = f / (2.0 + f);
	double z = s * s;
	double w = z * z;
	double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 +
	    w * 1.531383769920937332e-01));
	double t2 = z * (6.666666666666735130e-01 + w * (2.857142874366239149e-01 +
	    w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
	double r = t2 + t1;
	return s * (hfsq + r) + k * 1.90821492927058770002e-10 - hfsq + f +
	    k * 6.93147180369123816490e-01;
}

/*
 * e^y for y <= 0 (softmax of max-shifted logits), relative error ~1e-16;
 * results below 2^-1022 (y < -708) flush to 0, -inf gives 0.
 * y = k ln2 + r, |r| <= ln2/2, Taylor to degree 13 in r.
 */
static inline double swm_exp_neg(double y)
{
	int under = !(y >= -708.0);
	double yc = under ? 0.0 : y;
	double t = yc * 1.4426950408889634074 + 0x1.8p52;
	double kd = t - 0x1.8p52;
	int64_t ki = (int64_t)(swm_dbits(t) - swm_dbits(0x1.8p52));
	double r = (yc - kd * 6.93147180369123816490e-01) - kd * 1.90821492927058770002e-10;
	double p = 1.0 / 6227020800.0;
	p = p * r + 1.0 / 479001600.0;
	p = p * r + 1.0 / 39916800.0;
	p = p * r + 1.0 / 3628800.0;
	p = p * r + 1.0 / 362880.0;
	p = p * r + 1.0 / 40320.0;
	p = p * r + 1.0 / 5040.0;
	p = p * r + 1.0 / 720.0;
	p = p * r + 1.0 / 120.0;
	p = p * r + 1.0 / 24.0;
	p = p * r + 1.0 / 6.0;
	p = p * r + 0.5;
	p = p * r + 1.0;
	p = p * r + 1.0;
	double scale = swm_bitsd((uint64_t)(ki + 1023) << 52);
	return under ? 0.0 : p * scale;
}

/* x ln x with 0 ln 0 = 0, for the few scalar uses. */
static inline double swm_xlnx(double x)
{
	return x > 0 ? x * swm_ln(x) : 0.0;
}

/* Element i of x as a double; dt is a constant wherever this is inlined. */
static inline __attribute__((always_inline)) double
swm_ld(const void *x, size_t i, swm_dtype dt)
{
	/* memcpy loads: a tensor inside a received frame need not be aligned */
	const char *p = x;
	uint16_t h;
	float f;
	double d;
	switch (dt) {
	case SWM_F16:
		memcpy(&h, p + 2 * i, 2);
		return swm_f16_to_f32(h);
	case SWM_BF16:
		memcpy(&h, p + 2 * i, 2);
		return swm_bf16_to_f32(h);
	case SWM_F64:
		memcpy(&d, p + 8 * i, 8);
		return d;
	default:
		memcpy(&f, p + 4 * i, 4);
		return f;
	}
}


#endif
