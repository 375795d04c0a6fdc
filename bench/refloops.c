/*
 * refloops.c: reference loops for the kernel TARGET lines (issue 30). Each
 * takes C independent chains a turn: a load, an add, an integer shift and
 * conversion (64-bit on AVX-512; AVX2 has no 64-bit ones: 32-bit, the low
 * half), an FMA, then D dependent FMAs, then an FMA into the chain's own
 * accumulator, as the logarithm kernels' chains run: well-formed loops
 * with nothing else in them (no spills: AVX2's 16 registers hold C = 4).
 * `make bench` runs each against its probe (bench/mca.py: the same
 * instructions without their dependences), beside the kernels: what
 * fraction of the probe a loop reaches on this core when nothing but its
 * own dependence chains holds it back, and how that falls as the chains
 * grow longer than the core's window covers. Two more put on each chain
 * what the kernels' logarithms have and these lack: a two-table permute
 * (the reduction's table: "p") or a double -> float -> double conversion
 * pair (the sums of f32 and f16 rows in double: "v").
 */
#include <immintrin.h>
#include <stddef.h>

#include "refloops.h"

#define T512 __attribute__((target("avx512f,avx512dq,fma"), noinline))
#define T256 __attribute__((target("avx2,fma"), noinline))

#define REF(name, ATTR, V, W, LD, ADD, SET1, SRA, CAST, CVT, FMA, ZERO, PERM, RT, C, D) \
static ATTR double \
name(const double *x, size_t n) \
{ \
	V acc[C], t0 = SET1(0.5), t1 = SET1(0.75), k = SET1(0.5); \
	(void)t0; \
	(void)t1; \
	for (int c = 0; c < C; c++) \
		acc[c] = ZERO(); \
	for (size_t i = 0; i < n; i += W) { \
		V m[C], h[C]; \
		_Pragma("GCC unroll 8") \
		for (int c = 0; c < C; c++) { \
			m[c] = ADD(LD(x + i), SET1(0.25 * c)); \
			h[c] = FMA(PERM(m[c]), SET1(0.125), CVT(SRA(CAST(m[c])))); \
			m[c] = RT(m[c]); \
		} \
		_Pragma("GCC unroll 32") \
		for (int d = 0; d < D; d++) \
			_Pragma("GCC unroll 8") \
			for (int c = 0; c < C; c++) \
				h[c] = FMA(h[c], m[c], k); \
		_Pragma("GCC unroll 8") \
		for (int c = 0; c < C; c++) \
			acc[c] = FMA(m[c], h[c], acc[c]); \
	} \
	double s = 0, out[W]; \
	for (int c = 0; c < C; c++) { \
		_mm##W##_storeu_pd_(out, acc[c]); \
		for (int j = 0; j < W; j++) \
			s += out[j]; \
	} \
	return s; \
}

/* the shift and conversion AVX2 lacks for 64-bit lanes: 32-bit ones */
#define sra256(v) _mm256_srai_epi32(v, 20)
#define cvt256(v) _mm256_cvtepi32_pd(_mm256_castsi256_si128(v))
#define sra512(v) _mm512_srai_epi64(v, 48)
#define none(v) (v)
/* a two-table permute on the chain, indexed by the value's top bits */
#define perm512(v) _mm512_add_pd(v, _mm512_permutex2var_pd(t0, _mm512_srli_epi64( \
    _mm512_castpd_si512(v), 48), t1))
/* double -> float -> double, added back so that the chain runs through it */
#define rt512(v) _mm512_add_pd(v, _mm512_cvtps_pd(_mm512_cvtpd_ps(v)))
#define rt256(v) _mm256_add_pd(v, _mm256_cvtps_pd(_mm256_cvtpd_ps(v)))
#define _mm8_storeu_pd_ _mm512_storeu_pd
#define _mm4_storeu_pd_ _mm256_storeu_pd

#define R512(name, PERM, RT, C, D) REF(name, T512, __m512d, 8, _mm512_loadu_pd, \
    _mm512_add_pd, _mm512_set1_pd, sra512, _mm512_castpd_si512, _mm512_cvtepi64_pd, \
    _mm512_fmadd_pd, _mm512_setzero_pd, PERM, RT, C, D)
#define R256(name, RT, C, D) REF(name, T256, __m256d, 4, _mm256_loadu_pd, _mm256_add_pd, \
    _mm256_set1_pd, sra256, _mm256_castpd_si256, cvt256, _mm256_fmadd_pd, \
    _mm256_setzero_pd, none, RT, C, D)

R512(ref512_c2d8, none, none, 2, 8)
R512(ref512_c4d8, none, none, 4, 8)
R512(ref512_c6d8, none, none, 6, 8)
R512(ref512_c2d16, none, none, 2, 16)
R512(ref512_c2d8p, perm512, none, 2, 8)
R512(ref512_c2d8v, none, rt512, 2, 8)
R512(ref512_c4d8p, perm512, none, 4, 8)
R512(ref512_c4d8v, none, rt512, 4, 8)
R256(ref256_c2d8, none, 2, 8)
R256(ref256_c4d8, none, 4, 8)
R256(ref256_c2d16, none, 2, 16)
R256(ref256_c2d8v, rt256, 2, 8)
R256(ref256_c4d8v, rt256, 4, 8)

/* the one list of them: bench/mca.py reads its names from here */
const struct swb_refloop swb_refloops[] = {
	{ "ref512_c2d8", "avx512", 2, 8, ref512_c2d8 },
	{ "ref512_c4d8", "avx512", 4, 8, ref512_c4d8 },
	{ "ref512_c6d8", "avx512", 6, 8, ref512_c6d8 },
	{ "ref512_c2d16", "avx512", 2, 16, ref512_c2d16 },
	{ "ref512_c2d8p", "avx512", 2, 8, ref512_c2d8p },
	{ "ref512_c2d8v", "avx512", 2, 8, ref512_c2d8v },
	{ "ref512_c4d8p", "avx512", 4, 8, ref512_c4d8p },
	{ "ref512_c4d8v", "avx512", 4, 8, ref512_c4d8v },
	{ "ref256_c2d8", "avx2", 2, 8, ref256_c2d8 },
	{ "ref256_c4d8", "avx2", 4, 8, ref256_c4d8 },
	{ "ref256_c2d16", "avx2", 2, 16, ref256_c2d16 },
	{ "ref256_c2d8v", "avx2", 2, 8, ref256_c2d8v },
	{ "ref256_c4d8v", "avx2", 4, 8, ref256_c4d8v },
	{ NULL, NULL, 0, 0, NULL }
};
