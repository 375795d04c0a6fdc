/*
 * test_metrics.c: unit tests of the metric core (metrics/swm.h) against
 * independent computations: long double sums with libm's logl over the
 * formulas of METRICS.md, closed forms, and invariances.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/swm.h"
#include "metrics/swm_math.h"
#include "metrics/swm_simd.h"

#define MAXN 4096

/*
 * Rounds of a random test: n, or a tenth of it with SW_TEST_QUICK set
 * (dev/mutate.py's first pass: the same cases, the first tenth, so a
 * mutant it kills the full run kills too; the survivors get the full run).
 */
static int
rounds(int n)
{
	const char *q = getenv("SW_TEST_QUICK");
	return q && *q && *q != '0' ? (n + 9) / 10 : n;
}

/* ---- a small deterministic generator ---------------------------------- */

static uint64_t rng_state = 1;

static double
urand(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

static double
nrand(void)
{
	return sqrt(-2 * log(urand())) * cos(6.283185307179586 * urand());
}

/* A probability row of n keys with sink mass s at index k, content random. */
static void
make_row(double *a, size_t n, size_t k, double s, double spread)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++) {
		a[i] = i == k ? 0 : exp(spread * nrand());
		sum += a[i];
	}
	for (size_t i = 0; i < n; i++)
		a[i] = i == k ? s : (1 - s) * a[i] / sum;
}

/* ---- the independent reference ------------------------------------------ */

struct ref {
	long double s, w, H, hb, Hc, C, b;
	long double l[MAXN];	/* ln of the replaced parts */
};

static long double
xlogx(long double x)
{
	return x > 0 ? x * logl(x) : 0;
}

/* METRICS.md §1 and §4 straight from the definitions, on a double row. */
static void
ref_row(const double *x, size_t n, size_t k, double delta, struct ref *r)
{
	static long double a[MAXN];
	long double S = 0, w = 0, H = 0, Cs = 0;
	for (size_t i = 0; i < n; i++)
		S += x[i];
	for (size_t i = 0; i < n; i++)
		a[i] = x[i] / S;
	for (size_t i = 0; i < n; i++) {
		H -= xlogx(a[i]);
		if (i != k)
			w += a[i], Cs += xlogx(a[i]);
	}
	r->s = a[k];
	r->w = w;
	r->H = H;
	r->hb = -xlogx(a[k]) - xlogx(w);
	r->Hc = w > 0 ? logl(w) - Cs / w : 0;
	r->C = r->w * r->Hc;
	/* multiplicative replacement */
	long double big = 0;
	size_t rep = 0;
	for (size_t i = 0; i < n; i++) {
		if (a[i] < delta)
			rep++;
		else
			big += a[i];
	}
	long double f = (1 - (long double)delta * rep) / big, mean = 0;
	for (size_t i = 0; i < n; i++) {
		r->l[i] = a[i] < delta ? logl((long double)delta) : logl(a[i] * f);
		if (i != k)
			mean += r->l[i];
	}
	mean /= (long double)(n - 1);
	r->b = sqrtl((long double)(n - 1) / n) * (r->l[k] - mean);
}

static int
close_to(double got, long double want, double rel, double abs_)
{
	return fabsl((long double)got - want) <= rel * fabsl(want) + abs_;
}

#define ck_close(got, want, rel, abs_) \
	ck_assert_msg(close_to((got), (want), (rel), (abs_)), \
	    "%s = %.17g, want %.17Lg (line %d)", #got, (double)(got), (long double)(want), __LINE__)

static swm_opts
dflt(void)
{
	swm_opts o;
	swm_opts_default(&o);
	return o;
}

/*
 * Every path the dispatcher can take: the row tests run once per instruction
 * set (a loop test, _i indexing isa_names) and return at once where the CPU
 * lacks it.
 */
static const char *const isa_names[] = { "avx512", "avx2", "generic" };
#define NISA 3

static int
use_isa(int i)
{
	return swm_set_isa(isa_names[i]) == 0;
}

/* the active kernels take the head pairs' logarithms in single precision
 * (swm_precision(): "float32" or "float32-pair"; rows alone do not count) */
static int
pair_logs_f32(void)
{
	const char *p = swm_precision();
	return strcmp(p, "float32") == 0 || strcmp(p, "float32-pair") == 0;
}

/* before every test: the automatic choice (for CK_FORK=no runs) */
static void
isa_reset(void)
{
	ck_assert_int_eq(swm_set_isa("auto"), 0);
}

/* ---- names, options ------------------------------------------------------ */

START_TEST(test_names)
{
	ck_assert_str_eq(swm_status_name(SWM_OK), "ok");
	ck_assert_str_eq(swm_status_name(SWM_REJ_SHORT), "short");
	ck_assert_str_eq(swm_status_name(SWM_REJ_NOSINK), "nosink");
	ck_assert_str_eq(swm_status_name(SWM_REJ_NONFINITE), "nonfinite");
	ck_assert_str_eq(swm_status_name(SWM_REJ_NEGATIVE), "negative");
	ck_assert_str_eq(swm_status_name(SWM_REJ_SUM), "sum");
	ck_assert_str_eq(swm_status_name((swm_status)99), "invalid");
	ck_assert_str_eq(swm_dtype_name(SWM_F32), "f32");
	ck_assert_str_eq(swm_dtype_name(SWM_F16), "f16");
	ck_assert_str_eq(swm_dtype_name(SWM_BF16), "bf16");
	ck_assert_str_eq(swm_dtype_name(SWM_F64), "f64");
	ck_assert_str_eq(swm_dtype_name((swm_dtype)7), "invalid");
	ck_assert_uint_eq(swm_dtype_size(SWM_F32), 4);
	ck_assert_uint_eq(swm_dtype_size(SWM_F16), 2);
	ck_assert_uint_eq(swm_dtype_size(SWM_BF16), 2);
	ck_assert_uint_eq(swm_dtype_size(SWM_F64), 8);
	ck_assert_uint_eq(swm_dtype_size((swm_dtype)7), 0);
	ck_assert_uint_eq(swm_dtype_size(SWM_DTYPE__N), 0);	/* the first past the table */
	/* loads at any alignment */
	unsigned char buf[32];
	float f = 0.375f;
	double d = -2.5;
	uint16_t h16 = 0x3c00, hb = 0x3f80;
	memcpy(buf + 1, &f, 4);
	ck_assert(swm_load(buf + 1, SWM_F32, 0) == 0.375);
	memcpy(buf + 3, &d, 8);
	ck_assert(swm_load(buf + 3, SWM_F64, 0) == -2.5);
	memcpy(buf + 5, &h16, 2);
	ck_assert(swm_load(buf + 5, SWM_F16, 0) == 1.0);
	memcpy(buf + 9, &hb, 2);
	ck_assert(swm_load(buf + 7, SWM_BF16, 1) == 1.0);
}
END_TEST

START_TEST(test_opts)
{
	swm_opts o = dflt();
	ck_assert(o.delta == 1e-10);
	ck_assert(swm_opts_tol(&o, SWM_F32) == 1e-4);
	ck_assert(swm_opts_tol(&o, SWM_F64) == 1e-4);
	ck_assert(swm_opts_tol(&o, SWM_F16) == 1e-2);
	ck_assert(swm_opts_tol(&o, SWM_BF16) == 1e-2);
	o.tol = 0.5;
	ck_assert(swm_opts_tol(&o, SWM_F16) == 0.5);
}
END_TEST

/* ---- the scalar kernels ---------------------------------------------------- */

START_TEST(test_ln_exp)
{
	double worst = 0;
	/* every binade, including subnormals, with random mantissas */
	for (int e = -1074; e < 1024; e++)
		for (int t = 0; t < 8; t++) {
			double x = ldexp(1.0 + urand(), e);
			if (!isfinite(x) || x == 0)
				continue;
			double want = log(x), got = swm_ln(x);
			double err = fabs(got - want) / fmax(fabs(want), DBL_MIN);
			if (want == 0)
				err = fabs(got);
			worst = fmax(worst, err);
		}
	ck_assert_msg(worst < 4e-16, "swm_ln rel err %g", worst);
	/* near 1, where the error is absolute */
	for (int t = 0; t < 10000; t++) {
		double x = 1 + (urand() - 0.5) * 1e-3;
		ck_assert_msg(fabs(swm_ln(x) - log(x)) <= 2e-16 * fabs(log(x)) + 1e-300,
		    "ln(%.17g)", x);
	}
	ck_assert(swm_ln(1.0) == 0.0);
	worst = 0;
	for (int t = 0; t < 200000; t++) {
		double y = -708 * urand();
		double want = exp(y), got = swm_exp_neg(y);
		worst = fmax(worst, fabs(got - want) / want);
	}
	ck_assert_msg(worst < 4e-16, "swm_exp_neg rel err %g", worst);
	ck_assert(swm_exp_neg(0.0) == 1.0);
	ck_assert(swm_exp_neg(-INFINITY) == 0.0);
	ck_assert(swm_exp_neg(-800.0) == 0.0);
	ck_assert(swm_xlnx(0.0) == 0.0);
}
END_TEST

START_TEST(test_half)
{
	/* every f16 value against ldexp of its fields */
	for (uint32_t h = 0; h < 65536; h++) {
		int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
		float got = swm_f16_to_f32((uint16_t)h);
		if (e == 31) {
			ck_assert(m ? isnan(got) : isinf(got));
			continue;
		}
		double want = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
		if (sign)
			want = -want;
		ck_assert_msg(got == want && !!signbit(got) == (sign != 0), "f16 %04x", h);
	}
	ck_assert(swm_f16_to_f32(0x3c00) == 1.0f);
	ck_assert(swm_f16_to_f32(0x0001) == 0x1p-24f);
	ck_assert(swm_f16_to_f32(0x7bff) == 65504.0f);
	/* bf16 is the upper half of a float */
	for (uint32_t h = 0; h < 65536; h += 7) {
		float got = swm_bf16_to_f32((uint16_t)h);
		uint32_t bits = h << 16;
		float want;
		memcpy(&want, &bits, 4);
		ck_assert(memcmp(&got, &want, 4) == 0);
	}
	ck_assert(swm_bf16_to_f32(0x3f80) == 1.0f);
}
END_TEST

/* ---- the instruction sets ----------------------------------------------------- */

START_TEST(test_isa_api)
{
	const char *a = swm_isa();
	ck_assert(strcmp(a, "avx512") == 0 || strcmp(a, "avx2") == 0 || strcmp(a, "generic") == 0);
	/* the automatic choice is the best the CPU has */
	const char *want = swm_set_isa("avx512") == 0 ? "avx512" :
	    swm_set_isa("avx2") == 0 ? "avx2" : "generic";
	ck_assert_int_eq(swm_set_isa("auto"), 0);
	ck_assert_str_eq(swm_isa(), want);
	ck_assert(swm_kernels_get("auto") == swm_kernels_get(want));
	/* unknown names and missing instruction sets change nothing */
	ck_assert_int_eq(swm_set_isa("sse9"), -1);
	ck_assert_int_eq(swm_set_isa(""), -1);
	ck_assert_int_eq(swm_set_isa(NULL), -1);
	ck_assert_str_eq(swm_isa(), want);
	ck_assert_int_eq(swm_set_isa("generic"), 0);
	ck_assert_str_eq(swm_isa(), "generic");
	for (int i = 0; i < NISA; i++) {
		const struct swm_kernels *kn = swm_kernels_get(isa_names[i]);
		if (kn == NULL) {
			ck_assert_int_eq(swm_set_isa(isa_names[i]), -1);
			ck_assert_str_eq(swm_isa(), "generic");
			continue;
		}
		ck_assert_str_eq(kn->name, isa_names[i]);
		ck_assert_int_eq(swm_set_isa(isa_names[i]), 0);
		ck_assert_str_eq(swm_isa(), isa_names[i]);
		ck_assert_int_eq(swm_set_isa("generic"), 0);
	}
	ck_assert(swm_kernels_get("generic") != NULL);
	ck_assert_int_eq(swm_set_isa("auto"), 0);
	ck_assert_str_eq(swm_isa(), want);
}
END_TEST

/* The vector ln and exp against libm, like test_ln_exp for swm_ln. */
START_TEST(test_isa_ln_exp)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL)
		return;
	ck_assert(kn->ln != NULL && kn->exp_neg != NULL);
	enum { PER = 16, NB = 2098 * PER };
	double *x = malloc((NB + 8) * sizeof(double)), *y = malloc((NB + 8) * sizeof(double));
	size_t m = 0;
	rng_state = 31;
	/* every binade, subnormals included, random mantissas, and the ends */
	for (int e = -1074; e < 1024; e++)
		for (int t = 0; t < PER; t++) {
			double v = t == 0 ? ldexp(1.0, e) : t == 1 ? nextafter(ldexp(2.0, e), 0) :
			    ldexp(1.0 + urand(), e);
			if (isfinite(v) && v > 0)
				x[m++] = v;
		}
	x[m++] = DBL_TRUE_MIN;
	x[m++] = DBL_MIN;
	x[m++] = DBL_MAX;
	x[m++] = 1.0;
	/* odd counts: the tail of the vector loop */
	kn->ln(x, y, m);
	double worst = 0;
	for (size_t i = 0; i < m; i++) {
		double want = log(x[i]);
		double err = want == 0 ? fabs(y[i]) : fabs(y[i] - want) / fabs(want);
		ck_assert_msg(err < 5e-16, "%s ln(%a) = %.17g, want %.17g", kn->name, x[i], y[i], want);
		worst = fmax(worst, err);
	}
	ck_assert(y[m - 1] == 0.0);	/* ln 1 */
	/* near 1, the subintervals around 1 and their neighbours */
	for (int t = 0; t < 8; t++) {
		size_t c = 0;
		for (; c < NB / 2; c++)
			x[c] = 1 + (urand() - 0.5) * (t < 4 ? 0.15 : 1e-3 * pow(1e-3, t - 4));
		kn->ln(x, y, c);
		for (size_t i = 0; i < c; i++) {
			double want = log(x[i]);
			ck_assert_msg(fabs(y[i] - want) <= 6e-16 * fabs(want) + 1e-300,
			    "%s ln(%.17g) = %.17g, want %.17g", kn->name, x[i], y[i], want);
		}
	}
	/* e^y on [-708, 0], and the flush below -708 */
	size_t c = 0;
	for (; c < NB / 2; c++)
		x[c] = c % 64 == 0 ? -708 * urand() * 1e-6 : -708 * urand();
	x[c++] = 0.0;
	x[c++] = -708.0;
	x[c++] = -708.0000001;
	x[c++] = -800.0;
	x[c++] = -INFINITY;
	kn->exp_neg(x, y, c);
	for (size_t i = 0; i + 5 < c; i++) {
		double want = exp(x[i]);
		ck_assert_msg(fabs(y[i] - want) <= 4e-16 * want, "%s exp(%.17g) = %.17g, want %.17g",
		    kn->name, x[i], y[i], want);
	}
	ck_assert(y[c - 5] == 1.0);
	ck_assert(fabs(y[c - 4] - exp(-708.0)) <= 4e-16 * exp(-708.0));
	ck_assert(y[c - 3] == 0.0 && y[c - 2] == 0.0 && y[c - 1] == 0.0);
	free(x);
	free(y);
}
END_TEST

/* IEEE binary16 of a float, round to nearest even (subnormals, overflow). */
static uint16_t
f16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return sign | 0x7e00;
	if (a >= 0x477ff000u)	/* rounds to >= 65520: inf */
		return sign | 0x7c00;
	if (a < 0x38800000u) {	/* below 2^-14: subnormal or zero */
		float af;
		memcpy(&af, &a, 4);
		float q = af * 0x1p24f;	/* exact: the subnormal code, unrounded */
		uint32_t c = (uint32_t)q;
		float rem = q - (float)c;
		if (rem > 0.5f || (rem == 0.5f && (c & 1)))
			c++;
		return sign | (uint16_t)c;
	}
	uint32_t m = a + 0x0fffu + ((a >> 13) & 1);	/* round the 13 dropped bits */
	return sign | (uint16_t)((m - 0x38000000u) >> 13);
}

static uint16_t
bf16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* Stores n doubles as dtype dt at p (any alignment). */
static void
store_row(void *p, swm_dtype dt, const double *a, size_t n)
{
	char *c = p;
	for (size_t i = 0; i < n; i++) {
		float f = (float)a[i];
		uint16_t h;
		switch (dt) {
		case SWM_F64:
			memcpy(c + 8 * i, &a[i], 8);
			break;
		case SWM_F32:
			memcpy(c + 4 * i, &f, 4);
			break;
		case SWM_F16:
			h = f16_of(f);
			memcpy(c + 2 * i, &h, 2);
			break;
		default:
			h = bf16_of(f);
			memcpy(c + 2 * i, &h, 2);
			break;
		}
	}
}

/* A probability row for the comparison of kernels: zeros, tiny parts,
 * parts at and around delta, subnormals, and now and then a bad value. */
static void
kernel_probs_row(double *a, size_t n, size_t k, int t)
{
	double u = urand() * 9 * log(10);
	double s = urand() < 0.5 ? exp(-u) : -expm1(-u);
	s = fmin(fmax(s, 1e-9), 1 - 1e-9);
	make_row(a, n, k, s, 0.5 + 6 * urand());
	int kind = t % 8;
	if (kind == 1 || kind == 5) {
		/* exact zeros, the mass kept */
		double pz = urand(), lost = 0;
		for (size_t i = 0; i < n; i++)
			if (i != k && urand() < pz)
				lost += a[i], a[i] = 0;
		a[k] += lost;
	}
	if (kind == 2 || kind == 5) {
		/* parts at, just below and just above delta, within the band */
		for (int j = 0; j < 4 && n > 2; j++) {
			size_t i = (size_t)(urand() * n) % n;
			if (i == k)
				continue;
			double d = 1e-10;
			a[i] = j == 0 ? d : d * (1 + (urand() - 0.5) * 4e-4);
		}
	}
	if (kind == 3) {
		/* subnormal parts, for f32 and for f64 */
		for (int j = 0; j < 3 && n > 2; j++) {
			size_t i = (size_t)(urand() * n) % n;
			if (i != k)
				a[i] = j == 0 ? 1e-40 : j == 1 ? 4.9e-324 * (1 + (int)(urand() * 1000)) : 1e-310;
		}
	}
	if (kind == 4) {
		/* one rejection or a signed zero */
		size_t i = (size_t)(urand() * n) % n;
		int r = (int)(urand() * 7);
		a[i] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -1e-3 : r == 3 ? -0.0 :
		    r == 4 ? -1e-300 : r == 5 ? a[i] + 0.02 : 2.5;
	}
	if (kind == 6) {
		/* a sum off by up to twice the f32 tolerance */
		double f = 1 + (urand() - 0.5) * 4e-4;
		for (size_t i = 0; i < n; i++)
			a[i] *= f;
	}
}

/* A logits row: wide and narrow spreads (parts below e^-708), -inf keys. */
static void
kernel_logits_row(double *z, size_t n, size_t k, int t)
{
	int kind = t % 6;
	double sig = kind == 2 ? 100 + 200 * urand() : 0.2 + 4 * urand();
	for (size_t i = 0; i < n; i++)
		z[i] = sig * nrand();
	z[k] += 20 * nrand();
	if (kind == 1 || kind == 3) {
		double pm = urand();
		for (size_t i = 0; i < n; i++)
			if (urand() < pm)
				z[i] = -INFINITY;
	}
	if (kind == 3 && n > 2) {
		for (size_t i = 0; i < n; i++)
			z[i] = i == k ? 1.5 : -INFINITY;
		if (t % 12 == 3)
			z[(k + 1) % n] = 0.25;	/* one content key */
	}
	if (kind == 4) {
		size_t i = (size_t)(urand() * n) % n;
		int r = (int)(urand() * 4);
		z[i] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : 1e4;
		if (r == 2)
			for (size_t j = 0; j < n; j++)
				z[j] = -INFINITY;
	}
	if (kind == 5)
		for (size_t i = 0; i < n; i++)
			z[i] += 1000;	/* far from 0: f16 rounds, f32 keeps */
}

/*
 * |got - want| <= 1e-14 of the size of the terms the value is made of:
 * the larger of the two, or scale where the terms are larger (cancellation).
 * With budget (a statistic the kernel may have taken with single-precision
 * logarithms, METRICS.md §6): within 1e-7 of want or 1e-10, its relative
 * difference to *wbudget.
 */
static void
same_field(double got, double want, double scale, const char *isa,
    const char *what, int t, swm_dtype dt, swm_kind kind, size_t n, double *worst,
    double *wbudget)
{
	if (got == want)
		return;
	if (wbudget != NULL) {
		double d = fabs(got - want);
		ck_assert_msg(d <= fmax(1e-7 * fabs(want), 1e-10),
		    "%s row %d (%s %s, n %zu): %s = %.17g, generic %.17g (budget)", isa, t,
		    swm_dtype_name(dt), kind == SWM_LOGITS ? "logits" : "probs", n, what, got, want);
		d /= fmax(fabs(want), 1e-300);
		if (d > *wbudget)
			*wbudget = d;
		return;
	}
	double sc = fmax(fmax(fabs(got), fabs(want)), scale);
	double d = fabs(got - want) / sc;
	ck_assert_msg(d <= 1e-14, "%s row %d (%s %s, n %zu): %s = %.17g, generic %.17g",
	    isa, t, swm_dtype_name(dt), kind == SWM_LOGITS ? "logits" : "probs", n, what, got, want);
	if (d > *worst)
		*worst = d;
}

/*
 * same_field on a row's statistics that sum over the content, at their
 * scales: lW = |ln W| (Hc = ln W - P/W cancels between terms of that
 * size), ld the size of the logs b is made of; wb as same_field's budget.
 */
static void
same_sums(const swm_row *v, const swm_row *g, double lW, double ld, const char *isa,
    int t, swm_dtype dt, swm_kind kind, size_t n, double *worst, double *wb)
{
	same_field(v->s, g->s, 0, isa, "s", t, dt, kind, n, worst, NULL);
	same_field(v->w, g->w, 0, isa, "w", t, dt, kind, n, worst, NULL);
	same_field(v->H, g->H, 1, isa, "H", t, dt, kind, n, worst, wb);
	same_field(v->Hc, g->Hc, 1 + g->Hc + 2 * lW, isa, "Hc", t, dt, kind, n, worst, wb);
	same_field(v->C, g->C, g->w * (1 + g->Hc + 2 * lW), isa, "C", t, dt, kind, n, worst, wb);
	same_field(v->b, g->b, 1 + 2 * ld, isa, "b", t, dt, kind, n, worst, wb);
}

/*
 * The f32 rows' fast loops (p512_f32s takes two blocks a turn,
 * software-pipelined: it leaves its pipeline at each block; p256_f32
 * chunks of 16 blocks of 8, two loops each: rows of 257 and 264 hold two
 * whole chunks and a part): an element that no fast block takes (above
 * 1/8 of the content, or below FLT_MIN) at each position, and none, with
 * the sink on either side of the blocks' edges: each instruction set gives
 * the generic statistics, within the single-precision budget where the
 * kernel took its logarithms in single precision. Past the row lie values
 * a fast block would take: a kernel that read them would count them.
 */
START_TEST(test_f32_fast_edges)
{
	if (swm_kernels_get(isa_names[_i]) == NULL)
		return;
	const char *isa = isa_names[_i];
	static const size_t ns[] = { 96, 101, 130, 257, 264 };
	static const size_t ks[] = { 0, 5, 15, 16, 31, 32, 33, 47, 63, 64, 95, 127, 128, 255, 256 };
	enum { NMAX = 264, PAST = 64 };
	double a[NMAX];
	float x[NMAX + PAST];
	swm_opts o = dflt();
	double worst = 0, wb = 0;
	int rows = 0;
	rng_state = 41;
	for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); in++)
		for (size_t ik = 0; ik <= sizeof(ks) / sizeof(ks[0]); ik++)
			for (int j = -1; j < NMAX; j++)
				for (int big = 0; big < 2; big++) {
					size_t n = ns[in], k = ik < sizeof(ks) / sizeof(ks[0]) ? ks[ik] : n - 1;
					if (k >= n || (j < 0 && big) ||
					    (j >= 0 && ((size_t)j == k || (size_t)j >= n)))
						continue;
					make_row(a, n, k, 0.3, 1.0);
					if (j >= 0) {
						double v = big ? 0.2 : 1e-40;	/* 1/8 of it: < 0.12 */
						a[k] += a[j] - v;
						a[j] = v;
					}
					store_row(x, SWM_F32, a, n);
					for (size_t q = n; q < n + PAST; q++)
						x[q] = (float)(0.5 / (double)n);
					swm_row g, v;
					ck_assert_int_eq(swm_set_isa("generic"), 0);
					swm_status sg = swm_row_stats(x, SWM_F32, SWM_PROBS, n, k, &o, &g);
					ck_assert_msg(sg == SWM_OK, "n %zu k %zu j %d big %d: %s", n, k, j, big,
					    swm_status_name(sg));
					ck_assert_int_eq(swm_set_isa(isa), 0);
					ck_assert_int_eq(swm_row_stats(x, SWM_F32, SWM_PROBS, n, k, &o, &v),
					    SWM_OK);
					int t = (int)(n * 1000 + k) * 1000 + j;
					double lW = fabs(log(g.w) + log(g.norm));
					same_sums(&v, &g, lW, fabs(log(o.delta)), isa, t, SWM_F32, SWM_PROBS, n,
					    &worst, &wb);
					rows++;
				}
	ck_assert_int_gt(rows, 6000);
	fprintf(stderr, "test_f32_fast_edges: %s, %d rows, largest relative difference %.3g\n",
	    isa, rows, wb);
	swm_set_isa("auto");
}
END_TEST

/* Every instruction set gives the generic results, on thousands of rows. */
START_TEST(test_isa_same_as_generic)
{
	if (swm_kernels_get(isa_names[_i]) == NULL)
		return;
	const char *isa = isa_names[_i];
	double *a = malloc(MAXN * sizeof(double));
	unsigned char *buf = malloc(MAXN * 8 + 64);
	swm_opts o = dflt();
	double worst = 0, wbudget = 0;
	int nok = 0, nrej = 0;
	const struct swm_kernels *kn = swm_kernels_get(isa);
	rng_state = 37;
	for (int t = 0; t < rounds(6000); t++) {
		size_t n = 2 + (size_t)(urand() * urand() * (MAXN - 1));
		if (n > MAXN)
			n = MAXN;
		if (t % 50 == 0)
			n = 2 + (size_t)t / 50 % 40;	/* short rows: all tail */
		size_t k = t % 3 == 0 ? (size_t)(urand() * n) % n : t % 3 == 1 ? 0 : n - 1;
		swm_dtype dt = (swm_dtype)(t % SWM_DTYPE__N);
		swm_kind kind = (t / SWM_DTYPE__N) % 3 == 2 ? SWM_LOGITS : SWM_PROBS;
		if (kind == SWM_PROBS)
			kernel_probs_row(a, n, k, t / 12);
		else
			kernel_logits_row(a, n, k, t / 12);
		void *x = buf + 1 + t % 15;	/* any alignment */
		store_row(x, dt, a, n);
		if (t % 97 == 0)
			o.delta = 1e-6 * urand();
		else if (t % 89 == 0)
			o.delta = 1e-40;	/* below the f32 normals */
		else
			o.delta = SWM_DEFAULT_DELTA;
		swm_row g, v;
		ck_assert_int_eq(swm_set_isa("generic"), 0);
		swm_status sg = swm_row_stats(x, dt, kind, n, k, &o, &g);
		ck_assert_int_eq(swm_set_isa(isa), 0);
		swm_status sv = swm_row_stats(x, dt, kind, n, k, &o, &v);
		ck_assert_msg(sv == sg, "%s row %d (%s, n %zu): status %s, generic %s", isa, t,
		    swm_dtype_name(dt), n, swm_status_name(sv), swm_status_name(sg));
		ck_assert_int_eq(v.n, g.n);
		if (sg != SWM_OK) {
			nrej++;
			continue;
		}
		nok++;
		ck_assert_uint_eq(v.nrep, g.nrep);
		/*
		 * Sums in another order and logs a few ulps apart. Scales:
		 * Hc = ln W - P/W cancels between terms ~|ln W|; b is made of
		 * logs ~|ln delta| (probs) or of z - zmax (logits); hb, lnscale
		 * and lnz are ~1 in absolute terms (ln of sums near 1).
		 */
		double lW = 0, ld = fabs(log(o.delta));
		if (g.w > 0)
			lW = fabs(log(g.w) + (kind == SWM_LOGITS ? g.lnz : log(g.norm)));
		if (kind == SWM_LOGITS) {
			double ys = 0;
			for (size_t i = 0; i < n; i++)
				if (i != k && a[i] > -INFINITY)
					ys += fabs(a[i] - g.norm);
			ld += ys / (double)(n - 1);
		}
		/* f32 probability rows of a kernel with single-precision row logs */
		double *wb = kind == SWM_PROBS && dt == SWM_F32 && kn->row_logs != NULL &&
		    strcmp(kn->row_logs, "f32") == 0 ? &wbudget : NULL;
		same_sums(&v, &g, lW, ld, isa, t, dt, kind, n, &worst, wb);
		same_field(v.hb, g.hb, 1, isa, "hb", t, dt, kind, n, &worst, NULL);
		same_field(v.norm, g.norm, 0, isa, "norm", t, dt, kind, n, &worst, NULL);
		same_field(v.lnz, g.lnz, 1, isa, "lnz", t, dt, kind, n, &worst, NULL);
		same_field(v.lnscale, g.lnscale, 1, isa, "lnscale", t, dt, kind, n, &worst, NULL);
		same_field(v.thr, g.thr, 0, isa, "thr", t, dt, kind, n, &worst, NULL);
		same_field(v.lndelta, g.lndelta, 0, isa, "lndelta", t, dt, kind, n, &worst, NULL);
	}
	/* both kinds of rows were there (of the whole run: a quick run's tenth
	 * asserts nothing the whole run would not) */
	if (rounds(10) == 10) {
		ck_assert_int_gt(nok, 4000);
		ck_assert_int_gt(nrej, 100);
	}
	fprintf(stderr, "test_isa_same_as_generic: %s, %d rows accepted, %d rejected, "
	    "largest difference %.3g of the scale; f32 rows with single-precision logs: "
	    "largest relative difference %.3g\n", isa, nok, nrej, worst, wbudget);
	swm_set_isa("auto");
	free(a);
	free(buf);
}
END_TEST

/* ---- one row ---------------------------------------------------------------- */

static void
check_row_against_ref(const double *a, size_t n, size_t k, double tolv)
{
	swm_opts o = dflt();
	swm_row r;
	struct ref *ref = malloc(sizeof(*ref));
	double *l = malloc(n * sizeof(double)), *p = malloc(n * sizeof(double));
	ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, n, k, &o, &r), SWM_OK);
	ref_row(a, n, k, o.delta, ref);
	ck_close(r.s, ref->s, tolv, 1e-300);
	ck_close(r.w, ref->w, tolv, 1e-300);
	ck_close(r.H, ref->H, tolv, 1e-15);
	ck_close(r.hb, ref->hb, tolv, 1e-15);
	ck_close(r.Hc, ref->Hc, tolv, 1e-15);
	ck_close(r.C, ref->C, tolv, 1e-15);
	ck_close(r.b, ref->b, tolv, 1e-12);
	swm_row_expand(a, SWM_F64, SWM_PROBS, &r, p, l);
	long double S = 0;
	for (size_t i = 0; i < n; i++)
		S += a[i];
	for (size_t i = 0; i < n; i++) {
		ck_close(l[i], ref->l[i], 1e-13, 1e-13);
		ck_close(p[i], a[i] / S, 1e-15, 0);
	}
	ck_close(swm_balance(l, n, k), ref->b, 1e-12, 1e-11);
	free(ref);
	free(l);
	free(p);
}

START_TEST(test_worked_example)
{
	if (!use_isa(_i))
		return;
	/* METRICS.md §7 */
	double x[3] = { 0.5, 0.25, 0.25 }, y[3] = { 0.2, 0.5, 0.3 };
	swm_opts o = dflt();
	swm_row rx, ry;
	ck_assert_int_eq(swm_row_stats(x, SWM_F64, SWM_PROBS, 3, 0, &o, &rx), SWM_OK);
	ck_assert_int_eq(swm_row_stats(y, SWM_F64, SWM_PROBS, 3, 0, &o, &ry), SWM_OK);
	ck_close(rx.s, 0.5, 0, 1e-15);
	ck_close(rx.w, 0.5, 0, 1e-15);
	ck_close(rx.H, 1.0397207708, 0, 1e-10);
	ck_close(rx.hb, 0.6931471806, 0, 1e-10);
	ck_close(rx.Hc, 0.6931471806, 0, 1e-10);
	ck_close(rx.C, 0.3465735903, 0, 1e-10);
	ck_close(rx.b, 0.5659523030, 0, 1e-10);

	swm_split sp;
	ck_assert_uint_eq(swm_split_paired(&rx, &ry, 1, &sp), 1);
	ck_close(sp.dH, -0.0100677568, 0, 1e-10);
	ck_close(sp.sink, 0.0104618058, 0, 1e-10);
	ck_close(sp.content, -0.0205295626, 0, 1e-10);
	swm_head_acc ax = { 0 }, ay = { 0 };
	swm_head hx, hy;
	swm_head_add(&ax, &rx);
	swm_head_add(&ay, &ry);
	swm_head_finish(&ax, &hx);
	swm_head_finish(&ay, &hy);
	swm_split sa;
	swm_split_aggregate(&hx, &hy, &sa);
	ck_close(sa.dH, sp.dH, 1e-12, 1e-15);
	ck_close(sa.sink, sp.sink, 1e-12, 1e-15);
	ck_close(sa.content, sp.content, 1e-12, 1e-15);

	double px[3], lx[3], py[3], ly[3];
	swm_row_expand(x, SWM_F64, SWM_PROBS, &rx, px, lx);
	swm_row_expand(y, SWM_F64, SWM_PROBS, &ry, py, ly);
	swm_pair pr;
	swm_row_pair(&rx, px, lx, &ry, py, ly, 0, &pr);
	ck_close(sqrt(pr.sink2), 1.1055568651, 0, 1e-10);
	ck_close(sqrt(pr.content2), 0.3612082626, 0, 1e-10);
	ck_close(sqrt(pr.sink2 + pr.content2), 1.1630680938, 0, 1e-10);
}
END_TEST

/* H = hb + w Hc and the reference, on thousands of rows, f64 and f32 input. */
START_TEST(test_identity_random)
{
	if (!use_isa(_i))
		return;
	double *a = malloc(MAXN * sizeof(double));
	float *af = malloc(MAXN * sizeof(float));
	swm_opts o = dflt();
	rng_state = 7;
	for (int t = 0; t < rounds(3000); t++) {
		size_t n = 2 + (size_t)(urand() * urand() * (MAXN - 1));
		if (n > MAXN)
			n = MAXN;
		size_t k = t % 3 == 0 ? (size_t)(urand() * n) % n : 0;
		/* sink mass log-uniform towards both ends, 1e-9 .. 1 - 1e-9 */
		double u = urand() * 9 * log(10);
		double s = t % 2 ? exp(-u) : -expm1(-u);
		s = fmin(fmax(s, 1e-9), 1 - 1e-9);
		make_row(a, n, k, s, 0.5 + 3 * urand());
		swm_row r;
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, n, k, &o, &r), SWM_OK);
		ck_assert_msg(fabs(r.H - (r.hb + r.w * r.Hc)) <= 1e-9,
		    "identity off by %g (n %zu, s %g)", r.H - (r.hb + r.w * r.Hc), n, s);
		if (t % 10 == 0)
			check_row_against_ref(a, n, k, 1e-11);
		for (size_t i = 0; i < n; i++)
			af[i] = (float)a[i];
		ck_assert_int_eq(swm_row_stats(af, SWM_F32, SWM_PROBS, n, k, &o, &r), SWM_OK);
		ck_assert_msg(fabs(r.H - (r.hb + r.w * r.Hc)) <= 1e-5,
		    "f32 identity off by %g", r.H - (r.hb + r.w * r.Hc));
		/* the f32 row's stats are those of the f32 values, renormalized */
		for (size_t i = 0; i < n; i++)
			a[i] = af[i];
		if (t % 10 == 5)
			check_row_against_ref(a, n, k, 1e-11);
	}
	free(a);
	free(af);
}
END_TEST

/* d_A^2 = d_sink^2 + d_content^2, with d_A from the full clr (§4). */
START_TEST(test_aitchison_split_random)
{
	if (!use_isa(_i))
		return;
	double *x = malloc(MAXN * sizeof(double)), *y = malloc(MAXN * sizeof(double));
	double *px = malloc(MAXN * 8), *lx = malloc(MAXN * 8), *py = malloc(MAXN * 8), *ly = malloc(MAXN * 8);
	float *xf = malloc(MAXN * 4), *yf = malloc(MAXN * 4);
	swm_opts o = dflt();
	rng_state = 11;
	for (int t = 0; t < rounds(2000); t++) {
		size_t n = 2 + (size_t)(urand() * urand() * (MAXN - 1));
		n = n > MAXN ? MAXN : n;
		size_t k = t % 4 == 0 ? (size_t)(urand() * n) % n : 0;
		double sx = fmin(fmax(exp(-urand() * 20), 1e-9), 1 - 1e-9);
		double sy = fmin(fmax(-expm1(-urand() * 20), 1e-9), 1 - 1e-9);
		make_row(x, n, k, sx, 2);
		make_row(y, n, k, sy, 1);
		int use_f32 = t % 2;
		for (size_t i = 0; i < n; i++)
			xf[i] = (float)x[i], yf[i] = (float)y[i];
		const void *vx = use_f32 ? (const void *)xf : x, *vy = use_f32 ? (const void *)yf : y;
		swm_dtype dt = use_f32 ? SWM_F32 : SWM_F64;
		swm_row rx, ry;
		ck_assert_int_eq(swm_row_stats(vx, dt, SWM_PROBS, n, k, &o, &rx), SWM_OK);
		ck_assert_int_eq(swm_row_stats(vy, dt, SWM_PROBS, n, k, &o, &ry), SWM_OK);
		swm_row_expand(vx, dt, SWM_PROBS, &rx, px, lx);
		swm_row_expand(vy, dt, SWM_PROBS, &ry, py, ly);
		swm_pair pr;
		swm_row_pair(&rx, px, lx, &ry, py, ly, k, &pr);
		/* full clr over all D parts, in long double */
		long double mx = 0, my = 0, dA2 = 0;
		for (size_t i = 0; i < n; i++)
			mx += lx[i], my += ly[i];
		mx /= n;
		my /= n;
		for (size_t i = 0; i < n; i++) {
			long double d = (lx[i] - mx) - (ly[i] - my);
			dA2 += d * d;
		}
		double tolv = use_f32 ? 1e-5 : 1e-9;
		ck_assert_msg(fabsl(pr.sink2 + pr.content2 - dA2) <= tolv * dA2 + 1e-12,
		    "split %.17g + %.17g vs %.17Lg", pr.sink2, pr.content2, dA2);
		ck_close(pr.sink2, (rx.b - ry.b) * (rx.b - ry.b), 1e-12, 1e-15);
		ck_close(pr.content2, swm_content_dist2(lx, ly, n, k), 1e-9, 1e-12);
	}
	free(x); free(y); free(px); free(lx); free(py); free(ly); free(xf); free(yf);
}
END_TEST

START_TEST(test_closed_forms)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	swm_row r;
	double a[MAXN];
	/* uniform rows */
	for (size_t n = 2; n <= MAXN; n *= 2) {
		for (size_t i = 0; i < n; i++)
			a[i] = 1.0 / n;
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, n, 0, &o, &r), SWM_OK);
		ck_close(r.H, logl(n), 1e-13, 0);
		ck_close(r.Hc, logl(n - 1), 1e-13, 1e-15);
		ck_close(r.s, 1.0L / n, 1e-15, 0);
		ck_close(r.b, 0, 0, 1e-12);
	}
	/* one-hot sink: no content; b from the replaced parts */
	for (size_t n = 2; n <= 1024; n *= 4) {
		memset(a, 0, sizeof(a));
		a[0] = 1;
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, n, 0, &o, &r), SWM_OK);
		ck_assert(r.s == 1 && r.w == 0 && r.H == 0 && r.hb == 0 && r.Hc == 0 && r.C == 0);
		long double want = sqrtl((n - 1.0L) / n) *
		    (logl(1 - 1e-10L * (n - 1)) - logl(1e-10L));
		ck_close(r.b, want, 1e-13, 0);
		ck_assert_uint_eq(r.nrep, n - 1);
	}
	/* two keys: H is the binary entropy, Hc = 0, b = (ln s - ln w) / sqrt 2 */
	for (double s = 0.001; s < 1; s += 0.0737) {
		a[0] = s;
		a[1] = 1 - s;
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 2, 0, &o, &r), SWM_OK);
		long double hb = -s * logl(s) - (1 - s) * logl(1 - s);
		ck_close(r.H, hb, 1e-13, 0);
		ck_close(r.hb, hb, 1e-13, 0);
		ck_close(r.Hc, 0, 0, 1e-15);
		ck_close(r.b, (logl(s) - logl(1 - s)) / sqrtl(2), 1e-12, 1e-14);
	}
	/* exact zeros: no entropy, replaced parts, same as the reference */
	double z[6] = { 0.4, 0, 0.3, 0, 0.3, 0 };
	ck_assert_int_eq(swm_row_stats(z, SWM_F64, SWM_PROBS, 6, 0, &o, &r), SWM_OK);
	ck_assert_uint_eq(r.nrep, 3);
	ck_close(r.H, -(0.4 * logl(0.4) + 0.6 * logl(0.3)), 1e-13, 0);
	check_row_against_ref(z, 6, 0, 1e-12);
	/* a zero sink */
	double zs[4] = { 0, 0.5, 0.25, 0.25 };
	ck_assert_int_eq(swm_row_stats(zs, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_OK);
	ck_assert(r.s == 0 && r.hb == 0);
	check_row_against_ref(zs, 4, 0, 1e-12);
	/* subnormal parts (f32 and f64): below delta, replaced; entropy exact */
	float sf[4] = { 0.5f, 1e-40f, 0.25f, 0.25f };
	ck_assert(fpclassify(sf[1]) == FP_SUBNORMAL);
	ck_assert_int_eq(swm_row_stats(sf, SWM_F32, SWM_PROBS, 4, 0, &o, &r), SWM_OK);
	ck_assert_uint_eq(r.nrep, 1);
	for (int i = 0; i < 4; i++)
		a[i] = sf[i];
	check_row_against_ref(a, 4, 0, 1e-12);
	double sd[4] = { 0.5, 4.9e-324, 0.25, 0.25 };
	ck_assert(fpclassify(sd[1]) == FP_SUBNORMAL);
	check_row_against_ref(sd, 4, 0, 1e-12);
	/* sink near 1 - 1e-9: w is summed, not 1 - s */
	double nn[3] = { 1 - 1e-9, 0.6e-9, 0.4e-9 };
	ck_assert_int_eq(swm_row_stats(nn, SWM_F64, SWM_PROBS, 3, 0, &o, &r), SWM_OK);
	ck_close(r.w, 1e-9L, 1e-7, 0);
	ck_close(r.Hc, -(0.6L * logl(0.6L) + 0.4L * logl(0.4L)), 1e-7, 0);
}
END_TEST

/* f16/bf16 rows: the stats are those of the rounded values, renormalized. */
START_TEST(test_half_rows)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	rng_state = 5;
	uint16_t h16[512], hb16[512];
	double a[512], ar[512];
	for (int t = 0; t < 200; t++) {
		size_t n = 2 + (size_t)(urand() * 510);
		make_row(a, n, 0, 0.05 + 0.9 * urand(), 1);
		for (int kind = 0; kind < 2; kind++) {
			uint16_t *h = kind ? hb16 : h16;
			for (size_t i = 0; i < n; i++) {
				float f = (float)a[i];
				if (kind) {
					uint32_t u;
					memcpy(&u, &f, 4);
					u += 0x7fff + ((u >> 16) & 1);	/* round to nearest even */
					h[i] = (uint16_t)(u >> 16);
					ar[i] = swm_bf16_to_f32(h[i]);
				} else {
					/* search the nearest f16 by bisection on the ordered codes */
					uint16_t lo = 0, hi = 0x7bff;
					while (lo < hi) {
						uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
						if (swm_f16_to_f32(mid) <= f)
							lo = mid;
						else
							hi = mid - 1;
					}
					if (lo < 0x7bff && fabs(swm_f16_to_f32(lo + 1) - f) < fabs(swm_f16_to_f32(lo) - f))
						lo++;
					h[i] = lo;
					ar[i] = swm_f16_to_f32(lo);
				}
			}
			swm_row r;
			swm_dtype dt = kind ? SWM_BF16 : SWM_F16;
			ck_assert_int_eq(swm_row_stats(h, dt, SWM_PROBS, n, 0, &o, &r), SWM_OK);
			struct ref *ref = malloc(sizeof(*ref));
			ref_row(ar, n, 0, o.delta, ref);
			ck_close(r.H, ref->H, 1e-12, 1e-15);
			ck_close(r.Hc, ref->Hc, 1e-12, 1e-15);
			ck_close(r.s, ref->s, 1e-14, 0);
			ck_close(r.b, ref->b, 1e-11, 1e-11);
			ck_assert(fabs(r.H - (r.hb + r.w * r.Hc)) <= 1e-9);
			free(ref);
		}
	}
	/* a half row off by more than 1e-2 is rejected, within it accepted */
	uint16_t bad[2] = { 0x3800, 0x3a00 };	/* 0.5 + 0.75 */
	swm_row r;
	ck_assert_int_eq(swm_row_stats(bad, SWM_F16, SWM_PROBS, 2, 0, &o, &r), SWM_REJ_SUM);
	uint16_t ok[2] = { 0x3800, 0x3804 };	/* 0.5 + 0.50195 */
	ck_assert_int_eq(swm_row_stats(ok, SWM_F16, SWM_PROBS, 2, 0, &o, &r), SWM_OK);
}
END_TEST

START_TEST(test_rejections)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	swm_row r;
	double a[4] = { 0.25, 0.25, 0.25, 0.25 };
	ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 1, 0, &o, &r), SWM_REJ_SHORT);
	ck_assert_int_eq(r.status, SWM_REJ_SHORT);
	ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 0, 0, &o, &r), SWM_REJ_SHORT);
	ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 3, 3, &o, &r), SWM_REJ_NOSINK);
	double nanrow[4] = { 0.25, NAN, 0.25, 0.5 };
	ck_assert_int_eq(swm_row_stats(nanrow, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_REJ_NONFINITE);
	double infrow[4] = { INFINITY, 0, 0, 0 };
	ck_assert_int_eq(swm_row_stats(infrow, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_REJ_NONFINITE);
	double minf[4] = { 0.5, -INFINITY, 0.5, 0 };
	ck_assert_int_eq(swm_row_stats(minf, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_REJ_NONFINITE);
	double neg[4] = { 0.5, -0.1, 0.3, 0.3 };
	ck_assert_int_eq(swm_row_stats(neg, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_REJ_NEGATIVE);
	double negsink[3] = { -0.1, 0.6, 0.5 };
	ck_assert_int_eq(swm_row_stats(negsink, SWM_F64, SWM_PROBS, 3, 0, &o, &r), SWM_REJ_NEGATIVE);
	double sum[4] = { 0.25, 0.25, 0.25, 0.2498 };
	ck_assert_int_eq(swm_row_stats(sum, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_REJ_SUM);
	double sumok[4] = { 0.25, 0.25, 0.25, 0.24995 };
	ck_assert_int_eq(swm_row_stats(sumok, SWM_F64, SWM_PROBS, 4, 0, &o, &r), SWM_OK);
	double zero[3] = { 0, 0, 0 };
	ck_assert_int_eq(swm_row_stats(zero, SWM_F64, SWM_PROBS, 3, 0, &o, &r), SWM_REJ_SUM);
	/* a zero sum is rejected even under a tolerance that admits |S - 1| = 1 */
	swm_opts wide = o;
	wide.tol = 1;
	ck_assert_int_eq(swm_row_stats(zero, SWM_F64, SWM_PROBS, 3, 0, &wide, &r), SWM_REJ_SUM);
	float zerof[3] = { 0, 0, 0 };
	ck_assert_int_eq(swm_row_stats(zerof, SWM_F32, SWM_PROBS, 3, 0, &wide, &r), SWM_REJ_SUM);
	float lz[3] = { 1, NAN, 0 };
	ck_assert_int_eq(swm_row_stats(lz, SWM_F32, SWM_LOGITS, 3, 0, &o, &r), SWM_REJ_NONFINITE);
	float lp[3] = { 1, INFINITY, 0 };
	ck_assert_int_eq(swm_row_stats(lp, SWM_F32, SWM_LOGITS, 3, 0, &o, &r), SWM_REJ_NONFINITE);
	float lm[3] = { -INFINITY, -INFINITY, -INFINITY };
	ck_assert_int_eq(swm_row_stats(lm, SWM_F32, SWM_LOGITS, 3, 0, &o, &r), SWM_REJ_NONFINITE);
	/* logits are never tested against a sum */
	float big[3] = { 100, -50, 3 };
	ck_assert_int_eq(swm_row_stats(big, SWM_F32, SWM_LOGITS, 3, 0, &o, &r), SWM_OK);
}
END_TEST

/* A part near delta in a row whose sum is off 1 takes the exact threshold. */
START_TEST(test_replacement_band)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	swm_row r;
	double a[4];
	/*
	 * S = 1 + 5e-5: 1.00003e-10 / S < 1e-10, so the part is replaced; S =
	 * 1 - 5e-5: 0.99997e-10 / S > 1e-10, so it is kept. Then (k = 1) the
	 * same with the sink as the part near delta: the sink is in the band.
	 */
	a[0] = 0.5;
	a[2] = 0.25;
	for (size_t k = 0; k < 2; k++) {
		a[1] = 1.00003e-10;
		a[3] = 0.25 + 5e-5 - a[1];
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 4, k, &o, &r), SWM_OK);
		ck_assert_uint_eq(r.nrep, 1);
		check_row_against_ref(a, 4, k, 1e-12);
		a[1] = 0.99997e-10;
		a[3] = 0.25 - 5e-5 - a[1];
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, 4, k, &o, &r), SWM_OK);
		ck_assert_uint_eq(r.nrep, 0);
		check_row_against_ref(a, 4, k, 1e-12);
	}

	/*
	 * A part exactly at the band's lower edge delta (1 - tol), in a row
	 * whose sum is exactly 1 - tol: x / S = delta, not below it, so it is
	 * kept. All exact in binary: delta 2^-34, tol 1/4, S = 3/4.
	 */
	swm_opts e = o;
	e.delta = 0x1p-34;
	e.tol = 0.25;
	double x[3] = { 0.5, 0x3p-36, 0.25 - 0x3p-36 };
	ck_assert_int_eq(swm_row_stats(x, SWM_F64, SWM_PROBS, 3, 0, &e, &r), SWM_OK);
	ck_assert(r.norm == 0.75);
	ck_assert_uint_eq(r.nrep, 0);
	ck_assert(r.thr == 0x3p-36);
	struct ref *ref = malloc(sizeof(*ref));
	ref_row(x, 3, 0, e.delta, ref);
	ck_close(r.b, ref->b, 1e-12, 1e-12);
	double l[3];
	swm_row_expand(x, SWM_F64, SWM_PROBS, &r, NULL, l);
	for (int i = 0; i < 3; i++)
		ck_close(l[i], ref->l[i], 1e-13, 1e-13);
	free(ref);
}
END_TEST

/* Softmax of logits: the same stats as the probabilities, and exact logs. */
START_TEST(test_logits)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	rng_state = 3;
	float z[1024];
	double a[1024];
	for (int t = 0; t < rounds(300); t++) {
		size_t n = 2 + (size_t)(urand() * 1022);
		size_t k = t % 2 ? 0 : (size_t)(urand() * n) % n;
		long double mx = -INFINITY, sum = 0;
		for (size_t i = 0; i < n; i++) {
			z[i] = (float)(3 * nrand() + (i == k ? 10 * nrand() : 0));
			if (t % 5 == 0 && i != k && urand() < 0.2)
				z[i] = -INFINITY;
			mx = z[i] > mx ? z[i] : mx;
		}
		for (size_t i = 0; i < n; i++)
			sum += expl(z[i] - mx);
		for (size_t i = 0; i < n; i++)
			a[i] = (double)(expl(z[i] - mx) / sum);
		swm_row r, rp;
		ck_assert_int_eq(swm_row_stats(z, SWM_F32, SWM_LOGITS, n, k, &o, &r), SWM_OK);
		ck_assert_int_eq(swm_row_stats(a, SWM_F64, SWM_PROBS, n, k, &o, &rp), SWM_OK);
		ck_close(r.s, rp.s, 1e-12, 1e-300);
		ck_close(r.H, rp.H, 1e-11, 1e-14);
		ck_close(r.Hc, rp.Hc, 1e-11, 1e-14);
		ck_assert(fabs(r.H - (r.hb + r.w * r.Hc)) <= 1e-9);
		/* b from the exact logs: ln a_i = z_i - logsumexp, -inf parts -> ln delta */
		size_t rep = 0;
		for (size_t i = 0; i < n; i++)
			rep += z[i] == -INFINITY;
		long double lse = mx + logl(sum), mean = 0, lk = 0;
		for (size_t i = 0; i < n; i++) {
			long double li = z[i] == -INFINITY ? logl(1e-10L) :
			    z[i] - lse + log1pl(-1e-10L * rep);
			if (i == k)
				lk = li;
			else
				mean += li;
		}
		long double b = sqrtl((n - 1.0L) / n) * (lk - mean / (n - 1));
		ck_close(r.b, b, 1e-11, 1e-10);
		double p[1024], l[1024];
		swm_row_expand(z, SWM_F32, SWM_LOGITS, &r, p, l);
		for (size_t i = 0; i < n; i++)
			ck_close(p[i], a[i], 1e-12, 1e-300);
		ck_close(swm_balance(l, n, k), r.b, 1e-11, 1e-10);
	}

	/* a masked (-inf) sink: a replaced part, ln delta, counted in nrep */
	float zm[5] = { -INFINITY, 1, 2, 3, 0 };	/* zm[4]: past the row */
	swm_row r;
	ck_assert_int_eq(swm_row_stats(zm, SWM_F32, SWM_LOGITS, 4, 0, &o, &r), SWM_OK);
	ck_assert_uint_eq(r.nrep, 1);
	ck_assert(r.s == 0 && r.hb == 0);
	long double lse = 3 + logl(expl(-2) + expl(-1) + 1), mean = 0;
	for (int i = 1; i < 4; i++)
		mean += zm[i] - lse + log1pl(-1e-10L);
	long double b = sqrtl(3.0L / 4) * (logl(1e-10L) - mean / 3);
	ck_close(r.b, b, 1e-12, 1e-12);
	/* the expansion writes the n = 4 values and nothing past them */
	double p[5], l[5];
	p[4] = l[4] = 12345;
	swm_row_expand(zm, SWM_F32, SWM_LOGITS, &r, p, l);
	ck_assert(p[0] == 0);
	ck_close(l[0], logl(1e-10L), 1e-15, 0);
	for (int i = 1; i < 4; i++) {
		ck_close(p[i], expl(zm[i] - lse), 1e-13, 0);
		ck_close(l[i], zm[i] - lse + log1pl(-1e-10L), 1e-13, 1e-13);
	}
	ck_assert(p[4] == 12345 && l[4] == 12345);
}
END_TEST

/* §4 invariances, through logits rows. */
START_TEST(test_invariances)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	rng_state = 9;
	enum { N = 300 };
	double z0[N], z1[N], z2[N], z3[N];
	double l0[N], l1[N], l2[N], l3[N], p[N];
	for (int t = 0; t < 100; t++) {
		size_t n = 3 + (size_t)(urand() * (N - 3)), k = t % 3;
		for (size_t i = 0; i < n; i++) {
			z0[i] = 2 * nrand();
			z1[i] = z0[i] + nrand() * 0.5;	/* another head's logits */
		}
		/* z2: z0 with the sink's score moved and every score shifted */
		double shift = 5 * nrand();
		for (size_t i = 0; i < n; i++)
			z2[i] = z0[i] + shift + (i == k ? 7 * nrand() : 0);
		swm_row r0, r1, r2, r3;
		ck_assert_int_eq(swm_row_stats(z0, SWM_F64, SWM_LOGITS, n, k, &o, &r0), SWM_OK);
		ck_assert_int_eq(swm_row_stats(z1, SWM_F64, SWM_LOGITS, n, k, &o, &r1), SWM_OK);
		ck_assert_int_eq(swm_row_stats(z2, SWM_F64, SWM_LOGITS, n, k, &o, &r2), SWM_OK);
		swm_row_expand(z0, SWM_F64, SWM_LOGITS, &r0, p, l0);
		swm_row_expand(z1, SWM_F64, SWM_LOGITS, &r1, p, l1);
		swm_row_expand(z2, SWM_F64, SWM_LOGITS, &r2, p, l2);
		double d01 = swm_content_dist2(l0, l1, n, k);
		double d21 = swm_content_dist2(l2, l1, n, k);
		ck_close(d21, d01, 1e-10, 1e-12);
		ck_close(swm_content_dist2(l0, l2, n, k), 0, 0, 1e-18);
		/* equals the distance of the centred content logits */
		long double m0 = 0, m1 = 0, dd = 0;
		for (size_t i = 0; i < n; i++)
			if (i != k)
				m0 += z0[i], m1 += z1[i];
		m0 /= n - 1;
		m1 /= n - 1;
		for (size_t i = 0; i < n; i++)
			if (i != k)
				dd += ((z0[i] - m0) - (z1[i] - m1)) * ((z0[i] - m0) - (z1[i] - m1));
		ck_close(d01, dd, 1e-10, 1e-12);
		/* z3: content scores changed with their mean held: same balance */
		long double mv = 0;
		for (size_t i = 0; i < n; i++) {
			z3[i] = i == k ? z0[i] : z0[i] + nrand();
			if (i != k)
				mv += z3[i] - z0[i];
		}
		mv /= n - 1;
		for (size_t i = 0; i < n; i++)
			if (i != k)
				z3[i] -= (double)mv;
		ck_assert_int_eq(swm_row_stats(z3, SWM_F64, SWM_LOGITS, n, k, &o, &r3), SWM_OK);
		swm_row_expand(z3, SWM_F64, SWM_LOGITS, &r3, p, l3);
		ck_close(r3.b, r0.b, 1e-10, 1e-11);
		ck_assert(swm_content_dist2(l0, l3, n, k) > 1e-3);
	}
}
END_TEST

/* ---- §3 the interval split --------------------------------------------------- */

START_TEST(test_split)
{
	swm_opts o = dflt();
	rng_state = 13;
	enum { R = 40, N = 64 };
	static double x0[R][N], x1[R][N];
	swm_row r0[R], r1[R];
	for (int mode = 0; mode < 3; mode++) {
		swm_head_acc a0 = { 0 }, a1 = { 0 };
		for (int r = 0; r < R; r++) {
			double s0 = 0.05 + 0.9 * urand();
			make_row(x0[r], N, 0, s0, 1.5);
			if (mode == 0) {
				/* only the sink moves: content distribution fixed */
				double s1 = 0.05 + 0.9 * urand();
				for (int i = 1; i < N; i++)
					x1[r][i] = x0[r][i] / (1 - s0) * (1 - s1);
				x1[r][0] = s1;
			} else if (mode == 1) {
				/* sink mass held, content sharpens */
				make_row(x1[r], N, 0, s0, 3);
			} else {
				make_row(x1[r], N, 0, 0.05 + 0.9 * urand(), 2.5);
			}
			ck_assert_int_eq(swm_row_stats(x0[r], SWM_F64, SWM_PROBS, N, 0, &o, &r0[r]), SWM_OK);
			ck_assert_int_eq(swm_row_stats(x1[r], SWM_F64, SWM_PROBS, N, 0, &o, &r1[r]), SWM_OK);
			swm_head_add(&a0, &r0[r]);
			swm_head_add(&a1, &r1[r]);
		}
		swm_split sp, sa;
		ck_assert_uint_eq(swm_split_paired(r0, r1, R, &sp), R);
		swm_head h0, h1;
		swm_head_finish(&a0, &h0);
		swm_head_finish(&a1, &h1);
		swm_split_aggregate(&h0, &h1, &sa);
		ck_close(sp.sink + sp.content, sp.dH, 1e-12, 1e-14);
		ck_close(sa.sink + sa.content, sa.dH, 1e-12, 1e-14);
		ck_close(sa.dH, sp.dH, 1e-12, 1e-14);
		ck_close(sa.dH, h1.H - h0.H, 0, 1e-15);
		if (mode == 0) {
			ck_close(sp.content, 0, 0, 1e-13);
			ck_assert(fabs(sp.sink) > 1e-3);
		}
		if (mode == 1) {
			ck_close(sp.sink, 0, 0, 1e-13);
			ck_close(sa.sink, 0, 0, 1e-13);
			ck_assert(sp.content < -1e-3);
		}
	}
	/* rows rejected at either step are left out */
	r1[3].status = SWM_REJ_SUM;
	swm_split sp;
	ck_assert_uint_eq(swm_split_paired(r0, r1, R, &sp), R - 1);
	for (int r = 0; r < R; r++)
		r0[r].status = SWM_REJ_SHORT;
	ck_assert_uint_eq(swm_split_paired(r0, r1, R, &sp), 0);
	ck_assert(isnan(sp.dH) && isnan(sp.sink) && isnan(sp.content));
	swm_head empty = { 0 }, h = { .rows = 1 };
	swm_split_aggregate(&empty, &h, &sp);
	ck_assert(isnan(sp.dH));
}
END_TEST

START_TEST(test_split_sums_shares)
{
	swm_split a = { -0.3, -0.2, -0.1 }, b = { 0.1, 0.05, 0.05 };
	swm_split_add(&a, &b);
	ck_close(a.dH, -0.2, 0, 1e-15);
	ck_close(a.sink, -0.15, 0, 1e-15);
	ck_close(a.content, -0.05, 0, 1e-15);
	double ss, cs;
	swm_split_shares(&a, &ss, &cs);
	ck_close(ss, 0.75, 0, 1e-15);
	ck_close(cs, 0.25, 0, 1e-15);
	ck_close(ss + cs, 1, 0, 1e-15);
	/* opposite signs: shares outside [0, 1] */
	swm_split c = { -0.1, -0.3, 0.2 };
	swm_split_shares(&c, &ss, &cs);
	ck_close(ss, 3, 1e-14, 0);
	ck_close(cs, -2, 1e-14, 0);
	swm_split up = { 0.1, 0.05, 0.05 };
	swm_split_shares(&up, &ss, &cs);
	ck_assert(isnan(ss) && isnan(cs));
	/* no change: no shares (not sink / 0) */
	swm_split flat = { 0, 0.05, -0.05 };
	swm_split_shares(&flat, &ss, &cs);
	ck_assert(isnan(ss) && isnan(cs));
}
END_TEST

/* ---- heads, blocks, pairs, flips ------------------------------------------- */

START_TEST(test_head_acc)
{
	swm_opts o = dflt();
	double a[3] = { 0.5, 0.25, 0.25 }, b[3] = { 0.2, 0.5, 0.3 }, bad[3] = { 1, 1, 1 };
	swm_row ra, rb, rbad;
	swm_row_stats(a, SWM_F64, SWM_PROBS, 3, 0, &o, &ra);
	swm_row_stats(b, SWM_F64, SWM_PROBS, 3, 0, &o, &rb);
	swm_row_stats(bad, SWM_F64, SWM_PROBS, 3, 0, &o, &rbad);
	swm_head_acc x = { 0 }, y = { 0 };
	swm_head_add(&x, &ra);
	swm_head_add(&y, &rb);
	swm_head_add(&y, &rbad);
	swm_head_merge(&x, &y);
	ck_assert_uint_eq(x.rows, 2);
	ck_assert_uint_eq(x.rejected[SWM_REJ_SUM], 1);
	swm_head h;
	swm_head_finish(&x, &h);
	ck_close(h.s, 0.35, 0, 1e-15);
	ck_close(h.H, (ra.H + rb.H) / 2, 0, 1e-15);
	ck_close(h.Hc, (ra.Hc + rb.Hc) / 2, 0, 1e-15);
	ck_close(h.b, (ra.b + rb.b) / 2, 0, 1e-15);
	ck_close(h.Hcw, (ra.C + rb.C) / (ra.w + rb.w), 1e-14, 0);
	ck_close(h.H, h.hb + h.w * h.Hcw, 0, 1e-12);
	swm_head_acc z = { 0 };
	swm_head_finish(&z, &h);
	ck_assert(h.rows == 0 && isnan(h.s) && isnan(h.H) && isnan(h.Hcw) && isnan(h.b));
}
END_TEST

/* Independent pair values of two probability rows (long double). */
static void
ref_pair(const double *x, const double *y, size_t n, size_t k, long double out[4])
{
	long double dot = 0, nx = 0, ny = 0, wx = 0, wy = 0, js = 0, jsd = 0;
	for (size_t i = 0; i < n; i++)
		if (i != k)
			wx += x[i], wy += y[i];
	for (size_t i = 0; i < n; i++) {
		long double m = 0.5L * (x[i] + y[i]);
		if (x[i] > 0) js += 0.5L * x[i] * logl(x[i] / m);
		if (y[i] > 0) js += 0.5L * y[i] * logl(y[i] / m);
		if (i == k)
			continue;
		dot += (long double)x[i] * y[i];
		nx += (long double)x[i] * x[i];
		ny += (long double)y[i] * y[i];
		long double cx = x[i] / wx, cy = y[i] / wy, mc = 0.5L * (cx + cy);
		if (cx > 0) jsd += 0.5L * cx * logl(cx / mc);
		if (cy > 0) jsd += 0.5L * cy * logl(cy / mc);
	}
	out[0] = (dot + (long double)x[k] * y[k]) /
	    sqrtl((nx + (long double)x[k] * x[k]) * (ny + (long double)y[k] * y[k]));
	out[1] = dot / sqrtl(nx * ny);
	out[2] = js;
	out[3] = jsd;
}

START_TEST(test_row_pair)
{
	if (!use_isa(_i))
		return;
	swm_opts o = dflt();
	rng_state = 17;
	double x[600], y[600], px[600], lx[600], py[600], ly[600];
	for (int t = 0; t < rounds(300); t++) {
		size_t n = 2 + (size_t)(urand() * 598), k = t % 2 ? 0 : n - 1;
		make_row(x, n, k, urand(), 1 + urand());
		make_row(y, n, k, urand(), 1 + urand());
		if (t % 7 == 0)
			x[(k + 1) % n] = 0, y[(k + 1) % n] = 0;	/* a common zero */
		if (t % 7 == 0) {
			long double s = 0;
			for (size_t i = 0; i < n; i++) s += x[i];
			for (size_t i = 0; i < n; i++) x[i] /= (double)s;
			s = 0;
			for (size_t i = 0; i < n; i++) s += y[i];
			for (size_t i = 0; i < n; i++) y[i] /= (double)s;
		}
		swm_row rx, ry;
		ck_assert_int_eq(swm_row_stats(x, SWM_F64, SWM_PROBS, n, k, &o, &rx), SWM_OK);
		ck_assert_int_eq(swm_row_stats(y, SWM_F64, SWM_PROBS, n, k, &o, &ry), SWM_OK);
		swm_row_expand(x, SWM_F64, SWM_PROBS, &rx, px, lx);
		swm_row_expand(y, SWM_F64, SWM_PROBS, &ry, py, ly);
		swm_pair pr;
		swm_row_pair(&rx, px, lx, &ry, py, ly, k, &pr);
		long double want[4];
		ref_pair(x, y, n, k, want);
		ck_close(pr.cos_keep, want[0], 1e-12, 1e-15);
		ck_close(pr.cos_drop, want[1], 1e-12, 1e-15);
		ck_close(pr.js_keep, want[2], 1e-9, 1e-14);
		ck_close(pr.js_drop, want[3], 1e-9, 1e-14);
	}
	/* identical rows: cosine 1, JS 0, distances 0 */
	make_row(x, 50, 0, 0.3, 1);
	swm_row rx;
	swm_row_stats(x, SWM_F64, SWM_PROBS, 50, 0, &o, &rx);
	swm_row_expand(x, SWM_F64, SWM_PROBS, &rx, px, lx);
	swm_pair pr;
	swm_row_pair(&rx, px, lx, &rx, px, lx, 0, &pr);
	ck_close(pr.cos_keep, 1, 0, 1e-15);
	ck_close(pr.js_keep, 0, 0, 1e-15);
	ck_assert(pr.js_keep >= 0 && pr.js_drop >= 0);
	ck_assert(pr.sink2 == 0 && pr.content2 == 0);
	/* a one-hot sink has no content channel: drop values are NaN */
	double oh[4] = { 1, 0, 0, 0 };
	swm_row ro;
	swm_row_stats(oh, SWM_F64, SWM_PROBS, 4, 0, &o, &ro);
	swm_row_expand(oh, SWM_F64, SWM_PROBS, &ro, py, ly);
	swm_row_pair(&rx, px, lx, &ro, py, ly, 0, &pr);
	ck_assert(isnan(pr.cos_drop) && isnan(pr.js_drop) && isfinite(pr.cos_keep));
}
END_TEST

/*
 * swm_layer_finish: the layer values the writer and analyze share equal
 * their parts (head values, pair matrices, flip rates), and without pair
 * sums the matrices and two flip rates are NaN while the entropy one stays.
 * Checked by hand on a 3-head layer whose rankings are known.
 */
START_TEST(test_layer_finish)
{
	enum { H = 3 };
	swm_head_acc acc[H];
	swm_pair_acc pairs[H * H];
	memset(acc, 0, sizeof(acc));
	memset(pairs, 0, sizeof(pairs));
	swm_opts o = dflt();
	/* one row per head: sink masses 0.5, 0.3, 0.1 over 3 keys */
	double x[H][3] = { { 0.5, 0.25, 0.25 }, { 0.3, 0.5, 0.2 }, { 0.1, 0.6, 0.3 } };
	for (int h = 0; h < H; h++) {
		swm_row r;
		swm_row_stats(x[h], SWM_F64, SWM_PROBS, 3, 0, &o, &r);
		swm_head_add(&acc[h], &r);
	}
	/* hand-made pair sums: cosine keep 0.9 / 0.8 / 0.7, drop the other order */
	double ck[H][H] = { { 0, 0.9, 0.8 }, { 0, 0, 0.7 } }, cd[H][H] = { { 0, 0.7, 0.8 }, { 0, 0, 0.9 } };
	for (int i = 0; i < H; i++)
		for (int j = i + 1; j < H; j++) {
			swm_pair_acc *p = &pairs[i * H + j];
			p->rows = p->rows_drop = 1;
			p->cos_keep = ck[i][j];
			p->cos_drop = cd[i][j];
			p->js_keep = p->js_drop = 0.1 * (i + j);
		}
	double m[6][H * H];
	uint64_t mr[H * H];
	swm_head head[H];
	swm_layer_values lv = { .head = head, .pm = { m[0], m[1], m[2], m[3], m[4], m[5], mr } };
	void *scratch = malloc(swm_layer_scratch(H));
	swm_layer_finish(acc, pairs, H, scratch, &lv);
	ck_assert_double_eq_tol(head[0].s, 0.5, 1e-15);
	ck_assert_double_eq_tol(head[0].H, 1.0397207708, 1e-9);
	ck_assert_double_eq_tol(m[0][0 * H + 1], 0.9, 1e-15);
	ck_assert_double_eq_tol(m[0][1 * H + 0], 0.9, 1e-15);
	ck_assert_double_eq_tol(m[1][1 * H + 2], 0.9, 1e-15);
	ck_assert_double_eq(m[0][0], 1.0);
	/*
	 * Cosine: anchor 0 prefers 1 (0.9 > 0.8) keeping, 2 (0.8 > 0.7) dropping:
	 * a flip; anchor 1: 0 vs 2, 0.9 > 0.7 keep, 0.7 < 0.9 drop: a flip;
	 * anchor 2: 0 vs 1, 0.8 > 0.7 keep, 0.8 < 0.9 drop: a flip. 3 of 3.
	 */
	ck_assert_uint_eq(lv.comps[0], 3);
	ck_assert_double_eq(lv.flip[0], 1.0);
	/* JS keep and drop are equal: no flip */
	ck_assert_double_eq(lv.flip[1], 0.0);
	ck_assert_uint_eq(lv.comps[2], 3);
	double ent_flip = lv.flip[2];
	ck_assert(isfinite(ent_flip));
	/* no pair sums: matrices NaN, row counts and comparisons 0 (whatever
	 * the caller's arrays held), cosine and JS flips NaN, entropy kept */
	for (int i = 0; i < H * H; i++)
		mr[i] = 77;
	lv.comps[0] = lv.comps[1] = 77;
	swm_layer_finish(acc, NULL, H, scratch, &lv);
	for (int f = 0; f < 6; f++)
		for (int i = 0; i < H * H; i++)
			ck_assert(isnan(m[f][i]));
	for (int i = 0; i < H * H; i++)
		ck_assert_uint_eq(mr[i], 0);
	ck_assert_uint_eq(lv.comps[0], 0);
	ck_assert_uint_eq(lv.comps[1], 0);
	ck_assert(isnan(lv.flip[0]) && isnan(lv.flip[1]));
	ck_assert_double_eq(lv.flip[2], ent_flip);
	free(scratch);

	/*
	 * Exactly swm_layer_scratch(H) bytes suffice, with the pair row counts
	 * in the scratch too (pm.rows NULL), with and without pair sums: a
	 * guard after the scratch keeps its bytes.
	 */
	enum { GUARD = 256 };
	size_t sb = swm_layer_scratch(H);
	unsigned char *sg = aligned_alloc(64, (sb + GUARD + 63) & ~(size_t)63);
	lv.pm.rows = NULL;
	for (int withp = 0; withp < 2; withp++) {
		memset(sg + sb, 0xa5, GUARD);
		swm_layer_finish(acc, withp ? pairs : NULL, H, sg, &lv);
		for (int i = 0; i < GUARD; i++)
			ck_assert_msg(sg[sb + i] == 0xa5, "scratch guard byte %d written (pairs %d)",
			    i, withp);
		ck_assert_double_eq(lv.flip[2], ent_flip);
	}
	ck_assert_double_eq(lv.flip[0], 1.0);
	free(sg);
}
END_TEST

START_TEST(test_block_and_pairs)
{
	if (!use_isa(_i))
		return;
	/* 3 heads x 5 rows x 8 keys in f32, causal valid lengths, one bad row */
	enum { H = 3, R = 5, K = 8 };
	float data[H][R][K];
	double rows[H][R][K];
	uint32_t nvalid[R] = { 1, 2, 4, 6, 8 };
	swm_opts o = dflt();
	rng_state = 23;
	for (int h = 0; h < H; h++)
		for (int r = 0; r < R; r++) {
			memset(rows[h][r], 0, sizeof(rows[h][r]));
			make_row(rows[h][r], nvalid[r], 0, 0.2 + 0.2 * h, 1);
			for (int i = 0; i < K; i++)
				data[h][r][i] = (float)rows[h][r][i];
			for (int i = 0; i < K; i++)
				rows[h][r][i] = data[h][r][i];
		}
	data[1][3][2] = NAN;
	uint32_t every[R];
	swm_block blk = { .data = data, .dtype = SWM_F32, .kind = SWM_PROBS, .heads = H,
	    .rows = R, .keys = K, .head_stride = R * K, .row_stride = K, .nvalid = nvalid,
	    .pair_pick = every, .npair = swm_pick_all(R, every) };
	void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
	swm_head_acc acc[H];
	swm_pair_acc pairs[H * H];
	memset(acc, 0, sizeof(acc));
	memset(pairs, 0, sizeof(pairs));
	swm_block_add(&blk, &o, scratch, acc, pairs);
	ck_assert_uint_eq(acc[0].rows, 4);
	ck_assert_uint_eq(acc[0].rejected[SWM_REJ_SHORT], 1);
	ck_assert_uint_eq(acc[1].rows, 3);
	ck_assert_uint_eq(acc[1].rejected[SWM_REJ_NONFINITE], 1);
	ck_assert_uint_eq(pairs[0 * H + 1].rows, 3);
	ck_assert_uint_eq(pairs[0 * H + 2].rows, 4);
	/* the same sums by hand, row by row */
	double ck = 0, c2 = 0, s2 = 0;
	for (int r = 1; r < R; r++) {
		swm_row a, b;
		double pa[K], la[K], pb[K], lb[K];
		swm_row_stats(rows[0][r], SWM_F64, SWM_PROBS, nvalid[r], 0, &o, &a);
		swm_row_stats(rows[2][r], SWM_F64, SWM_PROBS, nvalid[r], 0, &o, &b);
		swm_row_expand(rows[0][r], SWM_F64, SWM_PROBS, &a, pa, la);
		swm_row_expand(rows[2][r], SWM_F64, SWM_PROBS, &b, pb, lb);
		swm_pair pr;
		swm_row_pair(&a, pa, la, &b, pb, lb, 0, &pr);
		ck += pr.cos_keep;
		c2 += pr.content2;
		s2 += pr.sink2;
	}
	ck_close(pairs[0 * H + 2].cos_keep, ck, 1e-13, 0);
	ck_close(pairs[0 * H + 2].content2, c2, 1e-12, 1e-15);
	ck_close(pairs[0 * H + 2].sink2, s2, 1e-12, 1e-15);

	double m[6][H * H];
	uint64_t mr[H * H], hr[H] = { acc[0].rows, acc[1].rows, 0 };
	swm_pair_matrices pm = { m[0], m[1], m[2], m[3], m[4], m[5], mr };
	swm_pairs_finish(pairs, hr, H, &pm);
	ck_close(m[0][0 * H + 2], ck / 4, 1e-13, 0);
	ck_assert(m[0][2 * H + 0] == m[0][0 * H + 2]);
	ck_close(m[5][0 * H + 2], sqrt(c2 / 4), 1e-12, 1e-15);
	ck_close(m[4][2 * H + 0], sqrt(s2 / 4), 1e-12, 1e-15);
	ck_assert(m[0][0] == 1 && m[2][0] == 0 && m[5][H + 1] == 0 && mr[0] == 4);
	ck_assert(isnan(m[0][2 * H + 2]) && isnan(m[4][2 * H + 2]));	/* head 2 marked empty */
	ck_assert_uint_eq(mr[0 * H + 1], 3);

	/*
	 * each head's rows in a buffer of its own (parts of several senders),
	 * in another order and 4 bytes off alignment: every sum is the same,
	 * bit for bit
	 */
	{
		char *own[H];
		const void *hd[H];
		for (int h = 0; h < H; h++) {
			own[h] = malloc(sizeof(data[0]) + 4);
			ck_assert_ptr_nonnull(own[h]);
			memcpy(own[h] + 4, data[H - 1 - h], sizeof(data[0]));
			hd[H - 1 - h] = own[h] + 4;
		}
		/* with row stats out and the ln parts of rows 1 and 4 (drift) too */
		static const uint32_t lp[] = { 1, 4 };
		swm_row ro[2][H * R];
		float lo[2][H * 2 * K];
		swm_head_acc ha[2][H];
		swm_pair_acc hp[2][H * H];
		memset(ro, 0, sizeof(ro));
		memset(lo, 0, sizeof(lo));
		memset(ha, 0, sizeof(ha));
		memset(hp, 0, sizeof(hp));
		for (int v = 0; v < 2; v++) {
			swm_block hb = blk;
			if (v) {
				hb.data = NULL;
				hb.head_stride = 0;
				hb.head_data = hd;
			}
			hb.rows_out = ro[v];
			hb.ln_pick = lp;
			hb.nln = 2;
			hb.ln_out = lo[v];
			swm_block_add(&hb, &o, scratch, ha[v], hp[v]);
			for (int h = 0; h < H; h++)	/* where swm_block_row finds each row */
				for (int r = 0; r < R; r++)
					ck_assert_ptr_eq(swm_block_row(&hb, h, r),
					    v ? (const void *)((const float *)hd[h] + r * K) :
					    (const void *)data[h][r]);
		}
		ck_assert(memcmp(acc, ha[1], sizeof(acc)) == 0);
		ck_assert(memcmp(pairs, hp[1], sizeof(pairs)) == 0);
		ck_assert(memcmp(ha[0], ha[1], sizeof(ha[0])) == 0);
		ck_assert(memcmp(hp[0], hp[1], sizeof(hp[0])) == 0);
		ck_assert(memcmp(ro[0], ro[1], sizeof(ro[0])) == 0);
		ck_assert(memcmp(lo[0], lo[1], sizeof(lo[0])) == 0);
		for (int h = 0; h < H; h++)
			free(own[h]);
	}

	/* without pairs, the head sums are the same */
	swm_head_acc acc2[H];
	memset(acc2, 0, sizeof(acc2));
	swm_block_add(&blk, &o, scratch, acc2, NULL);
	ck_assert(memcmp(acc, acc2, sizeof(acc)) == 0);

	/* no pick list: no pair work */
	swm_pair_acc p2[H * H];
	memset(acc2, 0, sizeof(acc2));
	memset(p2, 0, sizeof(p2));
	blk.pair_pick = NULL;
	blk.npair = 0;
	swm_block_add(&blk, &o, scratch, acc2, p2);
	ck_assert(memcmp(acc, acc2, sizeof(acc)) == 0);
	for (int i = 0; i < H * H; i++)
		ck_assert_uint_eq(p2[i].rows, 0);

	/* pair work on rows 0, 2, 4 only; row stats out, ln parts of rows 1, 4 */
	static const uint32_t ppick[] = { 0, 2, 4 }, lpick[] = { 1, 4 };
	swm_row rows_out[H * R];
	float ln_out[H * 2 * K];
	memset(acc2, 0, sizeof(acc2));
	memset(p2, 0, sizeof(p2));
	blk.pair_pick = ppick;
	blk.npair = 3;
	blk.rows_out = rows_out;
	blk.ln_pick = lpick;
	blk.nln = 2;
	blk.ln_out = ln_out;
	swm_block_add(&blk, &o, scratch, acc2, p2);
	ck_assert(memcmp(acc, acc2, sizeof(acc)) == 0);
	ck_assert_uint_eq(p2[0 * H + 2].rows, 2);	/* rows 2 and 4 (row 0 is short) */
	ck_assert_uint_eq(p2[0 * H + 1].rows, 2);	/* row 3 (NaN in head 1) is not picked */
	ck_assert_int_eq(rows_out[1 * R + 3].status, SWM_REJ_NONFINITE);
	ck_assert_int_eq(rows_out[0 * R + 0].status, SWM_REJ_SHORT);
	for (int h = 0; h < H; h++)
		for (int r = 1; r < R; r++) {
			swm_row want;
			swm_row_stats(data[h][r], SWM_F32, SWM_PROBS, nvalid[r], 0, &o, &want);
			ck_assert_int_eq(rows_out[h * R + r].status, want.status);
			if (want.status == SWM_OK)
				ck_assert(rows_out[h * R + r].H == want.H && rows_out[h * R + r].b == want.b);
			/* ln parts at their position in the pick list, not at the row */
			ptrdiff_t p = swm_pick_find(lpick, 2, (size_t)r);
			ck_assert_int_eq(p, r == 1 ? 0 : r == 4 ? 1 : -1);
			if (p >= 0 && want.status == SWM_OK) {
				double lw[K];
				swm_row_expand(data[h][r], SWM_F32, SWM_PROBS, &want, NULL, lw);
				for (uint32_t i = 0; i < nvalid[r]; i++)
					ck_assert(ln_out[(h * 2 + p) * K + i] == (float)lw[i]);
				/* the float distance is the double one to float precision */
				double lw0[K];
				swm_row w0;
				swm_row_stats(data[0][r], SWM_F32, SWM_PROBS, nvalid[r], 0, &o, &w0);
				swm_row_expand(data[0][r], SWM_F32, SWM_PROBS, &w0, NULL, lw0);
				ck_close(swm_content_dist2_f32(&ln_out[(h * 2 + p) * K],
				    &ln_out[(0 * 2 + p) * K], nvalid[r], 0),
				    swm_content_dist2(lw, lw0, nvalid[r], 0), 1e-5, 1e-6);
			}
		}

	/*
	 * ln parts of row 1 only: rows 2 to 4, past the last pick, write
	 * nothing (a guard after ln_out), and each head's slot keeps row 1.
	 * Then row 4's, all 8 keys valid: whole vectors, which the vector
	 * kernels stream out (prep_raw) where the ln rows are aligned. Each
	 * with ln rows 64-byte aligned and one float off (ordinary stores).
	 */
	float *lnbuf = aligned_alloc(64, (H * K + 64 + 16 + 15) / 16 * 16 * sizeof(float));
	ck_assert_ptr_nonnull(lnbuf);
	for (int t = 0; t < 4; t++) {
		int off = t & 1, r1 = t < 2 ? 1 : 4;
		const uint32_t lone[] = { (uint32_t)r1 };
		float *ln1 = lnbuf + off;
		for (int i = 0; i < H * K + 64; i++)
			ln1[i] = -12345.0f;
		blk.ln_pick = lone;
		blk.nln = 1;
		blk.ln_out = ln1;
		memset(acc2, 0, sizeof(acc2));
		memset(p2, 0, sizeof(p2));
		swm_block_add(&blk, &o, scratch, acc2, p2);
		ck_assert(memcmp(acc, acc2, sizeof(acc)) == 0);
		for (int h = 0; h < H; h++) {
			swm_row want;
			double lw[K];
			ck_assert_int_eq(swm_row_stats(data[h][r1], SWM_F32, SWM_PROBS, nvalid[r1], 0,
			    &o, &want), SWM_OK);
			swm_row_expand(data[h][r1], SWM_F32, SWM_PROBS, &want, NULL, lw);
			for (uint32_t i = 0; i < nvalid[r1]; i++)
				ck_assert_msg(ln1[h * K + i] == (float)lw[i],
				    "row %d offset %d head %d key %u: %g, want %g", r1, off, h, i,
				    (double)ln1[h * K + i], (double)(float)lw[i]);
			for (int i = (int)nvalid[r1]; i < K; i++)
				ck_assert(ln1[h * K + i] == -12345.0f);
		}
		for (int i = H * K; i < H * K + 64; i++)
			ck_assert_msg(ln1[i] == -12345.0f, "ln_out guard %d written", i - H * K);
	}
	free(lnbuf);
	free(scratch);
}
END_TEST

/*
 * The block's pair sums, on every kernel path and input type, against the
 * definitions (ref_pair, ref_row) row by row: 5 heads x 4 rows x 37 keys,
 * sink 3, causal lengths, zeros, a subnormal and a one-hot sink (f64).
 */
START_TEST(test_block_pairs_ref)
{
	if (!use_isa(_i))
		return;
	enum { H = 5, R = 4, K = 37, KS = 3 };
	static const struct { swm_dtype dt; swm_kind kind; } cases[] = {
		{ SWM_F64, SWM_PROBS }, { SWM_F32, SWM_PROBS }, { SWM_F16, SWM_PROBS },
		{ SWM_BF16, SWM_PROBS }, { SWM_F32, SWM_LOGITS },
	};
	uint32_t nvalid[R] = { 37, 21, 9, 5 };
	swm_opts o = dflt();
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		swm_dtype dt = cases[c].dt;
		swm_kind kind = cases[c].kind;
		size_t es = swm_dtype_size(dt);
		static double src[H][R][K], xs[H][R][K];
		static char data[H * R * K * 8];
		rng_state = 41 + c;
		for (int h = 0; h < H; h++)
			for (int r = 0; r < R; r++) {
				size_t n = nvalid[r];
				memset(src[h][r], 0, sizeof(src[h][r]));
				if (kind == SWM_LOGITS) {
					for (size_t i = 0; i < n; i++)
						src[h][r][i] = 3 * nrand() + (i == KS ? 2 : 0);
				} else {
					make_row(src[h][r], n, KS, 0.1 + 0.15 * h, 0.5 + h);
					if (dt == SWM_F64 && h == 1)
						src[h][r][n - 1] = 0, src[h][r][KS + 1] = 1e-310;
					if (dt == SWM_F64 && h == 4 && r == 2) {
						memset(src[h][r], 0, sizeof(src[h][r]));
						src[h][r][KS] = 1;	/* w = 0: no drop values */
					}
					double sum = 0;
					for (size_t i = 0; i < n; i++)
						sum += src[h][r][i];
					for (size_t i = 0; i < n; i++)
						src[h][r][i] /= sum;
				}
				store_row(data + ((size_t)h * R + r) * K * es, dt, src[h][r], K);
				/* what the kernel sees, as probabilities (long double) */
				long double S = 0, mx = -INFINITY;
				double v[K];
				for (size_t i = 0; i < n; i++) {
					v[i] = swm_load(data, dt, ((size_t)h * R + r) * K + i);
					mx = v[i] > mx ? v[i] : mx;
				}
				for (size_t i = 0; i < n; i++)
					S += kind == SWM_LOGITS ? expl(v[i] - mx) : v[i];
				for (size_t i = 0; i < n; i++)
					xs[h][r][i] = (double)(kind == SWM_LOGITS ?
					    expl(v[i] - mx) / S : v[i] / S);
			}
		uint32_t every[R];
		swm_block blk = { .data = data, .dtype = dt, .kind = kind, .heads = H,
		    .rows = R, .keys = K, .head_stride = R * K, .row_stride = K,
		    .nvalid = nvalid, .sink = KS, .pair_pick = every,
		    .npair = swm_pick_all(R, every) };
		void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
		swm_head_acc acc[H];
		swm_pair_acc pairs[H * H];
		memset(acc, 0, sizeof(acc));
		memset(pairs, 0, sizeof(pairs));
		swm_block_add(&blk, &o, scratch, acc, pairs);
		free(scratch);
		for (int i = 0; i < H; i++)
			ck_assert_msg(acc[i].rows == R, "case %zu head %d: %llu rows", c, i,
			    (unsigned long long)acc[i].rows);
		for (int i = 0; i < H; i++)
			for (int j = i + 1; j < H; j++) {
				long double w[6] = { 0 };
				uint64_t nd = 0;
				for (int r = 0; r < R; r++) {
					static struct ref rx, ry;
					long double pv[4];
					size_t n = nvalid[r];
					ref_pair(xs[i][r], xs[j][r], n, KS, pv);
					ref_row(xs[i][r], n, KS, o.delta, &rx);
					ref_row(xs[j][r], n, KS, o.delta, &ry);
					long double mx = 0, my = 0, c2 = 0;
					for (size_t q = 0; q < n; q++)
						if (q != KS)
							mx += rx.l[q], my += ry.l[q];
					mx /= (long double)(n - 1);
					my /= (long double)(n - 1);
					for (size_t q = 0; q < n; q++)
						if (q != KS) {
							long double d = (rx.l[q] - mx) - (ry.l[q] - my);
							c2 += d * d;
						}
					w[0] += pv[0];
					w[2] += pv[2];
					if (rx.w > 0 && ry.w > 0) {
						w[1] += pv[1];
						w[3] += pv[3];
						nd++;
					}
					w[4] += (rx.b - ry.b) * (rx.b - ry.b);
					w[5] += c2;
				}
				const swm_pair_acc *a = &pairs[i * H + j];
				ck_assert_uint_eq(a->rows, R);
				ck_assert_uint_eq(a->rows_drop, nd);
				ck_close(a->cos_keep, w[0], 1e-12, 1e-15);
				ck_close(a->cos_drop, w[1], 1e-12, 1e-15);
				/* METRICS.md §6: single-precision logs get the precision budget */
				int f32 = pair_logs_f32();
				ck_close(a->js_keep, w[2], f32 ? 1e-7 : 1e-9, f32 ? 1e-10 : 1e-13);
				ck_close(a->js_drop, w[3], f32 ? 1e-7 : 1e-9, f32 ? 1e-10 : 1e-13);
				ck_close(a->sink2, w[4], 1e-10, 1e-12);
				ck_close(a->content2, w[5], 1e-10, 1e-12);
			}
	}
}
END_TEST

/*
 * METRICS.md §6 precision budget, per kernel path: the pair sums of a block
 * against a long double reference of the values the kernel read, each
 * within 1e-7 relative or 1e-10 absolute, on adversarial heads: a sink
 * near 1, tiny and subnormal parts, a head equal to another (JS 0), one
 * close to another, uniform rows; odd lengths (vector tails), every input
 * type. The row statistics too (the one-pass path keeps the row kernel's
 * values and logs for the pair work).
 */
/*
 * swm_content_dist2_f32 (the writer's drift distance on float logs) with
 * each instruction set's kernel against a long double two-pass reference
 * of the same floats, for every length 2..40 (below, at and past the lane
 * count) and every sink position (and one past the row: no sink), then
 * rows of 1071 and 2071 with sinks spread over them, with values past the
 * row that must not count.
 */
START_TEST(test_content_dist2_f32)
{
	if (!use_isa(_i))
		return;
	enum { NMAX = 40, GUARD = 16, NLONG = 2071 };
	static float lx[NLONG + GUARD], ly[NLONG + GUARD];
	rng_state = 23;
	for (size_t n = 2; n <= NLONG; n = n < NMAX ? n + 1 : n + 1031)
		for (size_t k = 0; k <= n; k = n < NMAX || k + 1 >= n ? k + 1 : k + 1 + k / 2) {
			for (size_t i = 0; i < NLONG + GUARD; i++) {
				lx[i] = (float)(-8 + 6 * urand());
				ly[i] = (float)(-8 + 6 * urand());
			}
			long double sd = 0, ss = 0;
			for (size_t i = 0; i < n; i++)
				if (i != k)
					sd += (long double)lx[i] - (long double)ly[i];
			long double mean = sd / (long double)(n - 1);
			for (size_t i = 0; i < n; i++)
				if (i != k) {
					long double d = (long double)lx[i] - (long double)ly[i] - mean;
					ss += d * d;
				}
			double got = swm_content_dist2_f32(lx, ly, n, k);
			ck_assert_msg(fabsl((long double)got - ss) <= 1e-12L * ss + 1e-14L,
			    "%s n %zu k %zu: %.17g, want %.17Lg", isa_names[_i], n, k, got, ss);
		}
	ck_assert(isnan(swm_content_dist2_f32(lx, ly, 1, 0)));
	swm_set_isa("auto");
}
END_TEST

/*
 * Every positive finite half (and bfloat16 up to 2^64) through a vector
 * row kernel's one-pass output: its 16 log2 x (a table for these types)
 * against libm's log2 of the value, within 4 ulp; 0 gives a finite value;
 * and the row sums equal those of the same values read as f32 (ln256).
 */
START_TEST(test_half_table)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->probs_out[SWM_F16] == NULL)
		return;
	enum { N = 2048 };
	uint16_t *h = malloc(N * 2);
	float *f = malloc(N * 4);
	double *xo = malloc(N * 8), *vo = malloc(N * 8);
	for (int dt = SWM_F16; dt <= SWM_BF16; dt += SWM_BF16 - SWM_F16) {
		uint32_t end = dt == SWM_F16 ? 0x7c00 : 0x5f80;
		size_t checked = 0;
		for (uint32_t c0 = 0; c0 < end; c0 += N) {
			size_t n = end - c0 < N ? end - c0 : N;
			if (n < 2)
				break;
			for (size_t i = 0; i < n; i++) {
				uint32_t c = c0 + (uint32_t)i;
				h[i] = (uint16_t)c;
				if (dt == SWM_F16) {
					f[i] = (float)(c >> 10 == 0 ? ldexp((double)(c & 1023), -24) :
					    ldexp((double)((c & 1023) | 1024), (int)(c >> 10) - 25));
				} else {
					uint32_t u = c << 16;
					memcpy(&f[i], &u, 4);
				}
			}
			struct swm_psum ps, pf;
			ck_assert_int_eq(kn->probs_out[dt](h, n, 1, 0, 0, 0, &ps, xo, vo), 0);
			/* double logarithms: probs_exact where probs may take single ones */
			swm_probs_fn pf32 = kn->probs_exact[SWM_F32] ? kn->probs_exact[SWM_F32] :
			    kn->probs[SWM_F32];
			ck_assert_int_eq(pf32(f, n, 1, 0, 0, 0, &pf), 0);
			for (size_t i = 0; i < n; i++) {
				ck_assert(xo[i] == (double)f[i]);
				ck_assert(isfinite(vo[i]));
				if (f[i] == 0)
					continue;
				double want = 16 * log2((double)f[i]);
				ck_assert_msg(fabs(vo[i] - want) <= 4 * DBL_EPSILON * fabs(want) + 1e-300,
				    "%s %s code %#x: %.17g, want %.17g", isa_names[_i],
				    dt == SWM_F16 ? "f16" : "bf16", c0 + (unsigned)i, vo[i], want);
				checked++;
			}
			ck_assert(ps.W == pf.W);
			ck_assert_msg(fabs(ps.P - pf.P) <= 1e-13 * fabs(pf.P) + 1e-300,
			    "P %.17g vs %.17g", ps.P, pf.P);
		}
		ck_assert_uint_gt(checked, dt == SWM_F16 ? 0x7bfe : 0x5f7e);
	}
	free(h);
	free(f);
	free(xo);
	free(vo);
}
END_TEST

/*
 * prep_raw's ln parts (ln_out): streamed (non-temporal stores, where
 * ln_out is aligned to the store) and ordinary stores write the same
 * floats, the row's l as float, full vectors and then a tail in one row,
 * and nothing past n. For each ISA this CPU runs.
 */
START_TEST(test_prep_raw_ln_out)
{
	enum { N = 21, K8 = 24, GUARD = 16 };
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (!use_isa(_i) || !kn || !kn->prep_raw)
		return;
	double *buf = aligned_alloc(64, 6 * K8 * sizeof(double));
	float *lnbuf = aligned_alloc(64, 2 * 64 * sizeof(float));
	ck_assert(buf && lnbuf);
	float want[N];
	for (int off = 0; off < 2; off++) {
		double *a = buf, *c = buf + K8, *l = buf + 2 * K8;
		for (int i = 0; i < K8; i++) {
			a[i] = i < N ? 0.01 + 0.002 * i : 0;
			l[i] = i < N ? 16 * log2(a[i]) : 0;
		}
		float *ln = lnbuf + off;	/* off 0: 64-byte aligned, streamed */
		for (int i = 0; i < N + GUARD; i++)
			ln[i] = -12345.0f;
		struct swm_fix fx = { 1.0, 0.0, 0.0, -30.0, 2.0 };
		double nx;
		kn->prep_raw(a, c, l, N, 0, K8, &fx, &nx, ln);
		for (int i = 0; i < N; i++) {
			double lv = log(0.01 + 0.002 * i);
			ck_assert_msg(fabs(ln[i] - lv) <= 1e-6 * fabs(lv), "%s off %d key %d: %g, want %g",
			    isa_names[_i], off, i, (double)ln[i], lv);
			if (off == 0)
				want[i] = ln[i];
			else
				ck_assert_msg(ln[i] == want[i], "%s key %d: streamed %g, stored %g",
				    isa_names[_i], i, (double)want[i], (double)ln[i]);
		}
		for (int i = N; i < N + GUARD; i++)
			ck_assert_msg(ln[i] == -12345.0f, "%s off %d: written past n at %d",
			    isa_names[_i], off, i);
	}
	free(buf);
	free(lnbuf);
}
END_TEST

/*
 * Parity (issue 17): the AVX-512 and the AVX2 tables have the same kernels,
 * each of them (one pass per head, pair preparation, drift included);
 * checked from the tables, whatever this CPU runs. Only the precision of
 * their logarithms differs (pair_logs, row_logs).
 */
START_TEST(test_kernel_parity)
{
	const struct swm_kernels *t[2] = { &swm_kernels_avx512, &swm_kernels_avx2 };
	for (int i = 0; i < 2; i++) {
		const struct swm_kernels *a = t[i];
		for (int d = 0; d < SWM_DTYPE__N; d++) {
			ck_assert(a->probs[d] && a->logits[d] && a->expand[d]);
			ck_assert(a->probs_out[d] && a->probs_exact[d]);
		}
		ck_assert(a->ln && a->exp_neg && a->pair && a->prep && a->prep_raw);
		ck_assert(a->pair_f64 && a->pair_logs && a->dist2_f32);
	}
}
END_TEST

START_TEST(test_pair_precision)
{
	if (!use_isa(_i))
		return;
	enum { H = 7, R = 3, K = 1031, KS = 2 };
	static const swm_dtype dts[] = { SWM_F64, SWM_F32, SWM_F16, SWM_BF16 };
	uint32_t nvalid[R] = { K, 258, 7 };
	swm_opts o = dflt();
	double worst = 0;
	for (size_t c = 0; c < sizeof(dts) / sizeof(dts[0]); c++) {
		swm_dtype dt = dts[c];
		size_t es = swm_dtype_size(dt);
		static double src[H][R][K], xs[H][R][K];
		static char data[H * R * K * 8];
		rng_state = 97 + c;
		for (int r = 0; r < R; r++) {
			size_t n = nvalid[r];
			for (int h = 0; h < H; h++)
				memset(src[h][r], 0, sizeof(src[h][r]));
			make_row(src[0][r], n, KS, 0.3, 1);
			make_row(src[1][r], n, KS, 1 - 1e-6, 2);
			make_row(src[2][r], n, KS, 0.05, 6);
			double s2 = 0;
			for (size_t i = 3; i < n; i += 5)
				src[2][r][i] = dt == SWM_F64 ? 1e-310 : 1e-30;
			for (size_t i = 0; i < n; i++)
				s2 += src[2][r][i];
			for (size_t i = 0; i < n; i++)
				src[2][r][i] /= s2;
			memcpy(src[3][r], src[0][r], sizeof(src[0][r]));
			double s4 = 0;
			for (size_t i = 0; i < n; i++)
				s4 += src[4][r][i] = src[0][r][i] * (1 + 1e-3 * nrand());
			for (size_t i = 0; i < n; i++)
				src[4][r][i] /= s4;
			for (size_t i = 0; i < n; i++)
				src[5][r][i] = src[6][r][i] = 1.0 / (double)n;
			for (int h = 0; h < H; h++) {
				store_row(data + ((size_t)h * R + r) * K * es, dt, src[h][r], K);
				long double S = 0;
				double v[K];
				for (size_t i = 0; i < n; i++)
					S += v[i] = swm_load(data, dt, ((size_t)h * R + r) * K + i);
				for (size_t i = 0; i < n; i++)
					xs[h][r][i] = (double)(v[i] / S);
			}
		}
		uint32_t every[R];
		swm_row rows_out[H * R];
		swm_block blk = { .data = data, .dtype = dt, .kind = SWM_PROBS, .heads = H,
		    .rows = R, .keys = K, .head_stride = R * K, .row_stride = K,
		    .nvalid = nvalid, .sink = KS, .pair_pick = every,
		    .npair = swm_pick_all(R, every), .rows_out = rows_out };
		void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
		swm_head_acc acc[H];
		swm_pair_acc pairs[H * H];
		memset(acc, 0, sizeof(acc));
		memset(pairs, 0, sizeof(pairs));
		swm_block_add(&blk, &o, scratch, acc, pairs);
		/* the portable path on the same block, beside it */
		swm_pair_acc gp[H * H];
		swm_head_acc gacc[H];
		memset(gacc, 0, sizeof(gacc));
		memset(gp, 0, sizeof(gp));
		ck_assert_int_eq(swm_set_isa("generic"), 0);
		blk.rows_out = NULL;
		swm_block_add(&blk, &o, scratch, gacc, gp);
		ck_assert_int_eq(swm_set_isa(isa_names[_i]), 0);
		for (int q = 0; q < H * H; q++) {
			const swm_pair_acc *a = &pairs[q], *g = &gp[q];
			ck_assert_uint_eq(a->rows, g->rows);
			ck_assert_uint_eq(a->rows_drop, g->rows_drop);
			ck_close(a->cos_keep, g->cos_keep, 1e-7, 1e-10);
			ck_close(a->cos_drop, g->cos_drop, 1e-7, 1e-10);
			ck_close(a->js_keep, g->js_keep, 1e-7, 1e-10);
			ck_close(a->js_drop, g->js_drop, 1e-7, 1e-10);
			ck_close(a->sink2, g->sink2, 1e-7, 1e-10);
			ck_close(a->content2, g->content2, 1e-7, 1e-10);
		}
		for (int h = 0; h < H; h++) {
			ck_assert_uint_eq(acc[h].rows, gacc[h].rows);
			ck_close(acc[h].H, gacc[h].H, 1e-12, 1e-12);
			ck_close(acc[h].b, gacc[h].b, 1e-12, 1e-12);
		}
		free(scratch);
		for (int h = 0; h < H; h++)
			for (int r = 0; r < R; r++) {
				static struct ref rf;
				const swm_row *g = &rows_out[h * R + r];
				ck_assert_msg(g->status == SWM_OK, "%s head %d row %d: %s", swm_dtype_name(dt),
				    h, r, swm_status_name(g->status));
				ref_row(xs[h][r], nvalid[r], KS, o.delta, &rf);
				ck_close(g->s, rf.s, 1e-7, 1e-10);
				ck_close(g->w, rf.w, 1e-7, 1e-10);
				ck_close(g->H, rf.H, 1e-7, 1e-10);
				ck_close(g->hb, rf.hb, 1e-7, 1e-10);
				ck_close(g->Hc, rf.Hc, 1e-7, 1e-10);
				ck_close(g->b, rf.b, 1e-7, 1e-10);
			}
		for (int i = 0; i < H; i++)
			for (int j = i + 1; j < H; j++) {
				long double w[6] = { 0 };
				for (int r = 0; r < R; r++) {
					static struct ref rx, ry;
					long double pv[4];
					size_t n = nvalid[r];
					ref_pair(xs[i][r], xs[j][r], n, KS, pv);
					ref_row(xs[i][r], n, KS, o.delta, &rx);
					ref_row(xs[j][r], n, KS, o.delta, &ry);
					long double mx = 0, my = 0, c2 = 0;
					for (size_t q = 0; q < n; q++)
						if (q != KS)
							mx += rx.l[q], my += ry.l[q];
					mx /= (long double)(n - 1);
					my /= (long double)(n - 1);
					for (size_t q = 0; q < n; q++)
						if (q != KS) {
							long double d = (rx.l[q] - mx) - (ry.l[q] - my);
							c2 += d * d;
						}
					for (int q = 0; q < 4; q++)
						w[q] += pv[q];
					w[4] += (rx.b - ry.b) * (rx.b - ry.b);
					w[5] += c2;
				}
				const swm_pair_acc *a = &pairs[i * H + j];
				double got[6] = { a->cos_keep, a->cos_drop, a->js_keep, a->js_drop,
				    a->sink2, a->content2 };
				static const char *const names[6] = { "cos_keep", "cos_drop", "js_keep",
				    "js_drop", "sink2", "content2" };
				ck_assert_uint_eq(a->rows, R);
				for (int q = 0; q < 6; q++) {
					long double err = fabsl((long double)got[q] - w[q]);
					ck_assert_msg(err <= 1e-7 * fabsl(w[q]) + 1e-10,
					    "%s %s heads %d %d: %s = %.17g, want %.17Lg", isa_names[_i],
					    swm_dtype_name(dt), i, j, names[q], got[q], w[q]);
					double rel = (double)(err / (fabsl(w[q]) + 1e-3L));
					worst = rel > worst ? rel : worst;
				}
			}
	}
	fprintf(stderr, "test_pair_precision: %s (%s logs), largest pair error %.3g relative\n",
	    isa_names[_i], swm_precision(), worst);
}
END_TEST

/*
 * The single-precision logarithms of the f32 row kernel (probs where
 * row_logs is "f32"): for every float z in [sqrt(1/2), sqrt(2)) scaled by
 * 2^-5, and by other powers of 2, among fillers of 2^-5 (y = 0 there)
 * beside a sink of 1/2 (so that none is 1/8 of the content or more, which
 * the kernel takes the double way), the kernel's P and L are within the
 * bounds eP and eL it reports of z ln z and ln z plus the fillers' (and
 * double rounding, 1e-15 of the terms): the bound row.c's redo rule rests
 * on. Two rows: 16 elements, the sink first, z at 11 (AVX2: a block of 8
 * after the sink's; AVX-512: the sink's own block of 16, its lane 0); 37
 * elements, the sink at 21, z at 30 (AVX-512: the sink's block at lane 5),
 * every 61st float, and a tail of 5 that takes double logarithms.
 */
START_TEST(test_row_log_error)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->row_logs == NULL || strcmp(kn->row_logs, "f32") != 0)
		return;
	static const struct { int n, k, at; uint32_t step0; } lay[2] = {
		{ 16, 0, 11, 1 }, { 37, 21, 30, 61 }
	};
	float x[37];
	double worst = 0;
	size_t checked = 0, bad = 0, fast = 0;
	static const int scale[] = { -5, -6, -11, -40, -125 };
	for (int li = 0; li < 2; li++) {
		int n = lay[li].n, nf = n - 2;
		for (int si = 0; si < 5; si++) {
			/* every float of the range at the first scale, every 61st elsewhere */
			uint32_t step = si == 0 ? lay[li].step0 : 61;
			for (uint32_t b = 0x3f3504f3; b < 0x3fb504f3; b += step) {
				float z;
				memcpy(&z, &b, 4);
				z = ldexpf(z, scale[si]);
				for (int i = 0; i < n; i++)
					x[i] = 0x1p-5f;
				x[lay[li].k] = 0.5f;
				x[lay[li].at] = z;
				struct swm_psum ps;
				if (kn->probs[SWM_F32](x, (size_t)n, (size_t)lay[li].k, 1e-38, 0, 0, &ps) != 0)
					bad++;
				/* the fillers: nf of 2^-5, ln 2^-5 = -5 ln 2 */
				long double l5 = -5 * 0.693147180559945309417232121458L;
				long double lz = logl((long double)z);
				long double pz = (long double)z * lz + nf * 0.03125L * l5, Lz = lz + nf * l5;
				double eP = fabs((double)(ps.P - pz)), eL = fabs((double)(ps.L - Lz));
				/* no assertion in the loop: each passing one is a write to check's pipe */
				fast += ps.eP > 0;
				if (!(eP <= ps.eP + 1e-15 * (fabs((double)pz) + 0.2 * nf) &&
				    eL <= ps.eL + 1e-15 * (fabs((double)Lz) + 3.0 * nf))) {
					if (bad++ == 0)
						fprintf(stderr, "n %d, z %.9g: P off by %.3g (bound %.3g), L off "
						    "by %.3g (bound %.3g)\n", n, (double)z, eP, ps.eP, eL, ps.eL);
				}
				if (fabsl(lz) > 0)
					worst = fmax(worst, fabs((double)(ps.L - Lz)) / fabs((double)lz));
				checked++;
			}
		}
	}
	ck_assert_msg(bad == 0, "%zu values outside their bound", bad);
	ck_assert(checked > 8000000);
	/* the fast path took them (every one but y = 0, z a power of 2) */
	ck_assert_uint_ge(fast, checked - 10);
	printf("test_row_log_error: %s, %zu values, largest relative error of ln %.3g\n",
	    isa_names[_i], checked, worst);
}
END_TEST

/*
 * The redo rule of the f32 row kernel's single-precision logarithms. A
 * uniform row of 1400 (sink = content, b = 0 exactly; 1/1400 = 0.73 of
 * its binade, y = -0.044): the bound of b's error exceeds half the 1e-10
 * floor, so the row is taken again with double logarithms and b comes out
 * as the double path's (the generic loop's, to 1e-12 absolute; the float
 * logs alone leave it ~1e-9 off 0). A row of concentrated content (Hc ~
 * 6e-5, its key 0.35 = 1.4 / 4 with a large y): that key takes the
 * double way inside the kernel (1/256 of the content or more), so the
 * bound the kernel reports stays within half the budget of Hc.
 */
START_TEST(test_row_log_redo)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->row_logs == NULL || strcmp(kn->row_logs, "f32") != 0)
		return;
	enum { N = 2048, U = 1400 };
	static float x[N];
	swm_opts o = dflt();
	swm_row v, g;
	struct swm_psum ps;
	for (int i = 0; i < U; i++)
		x[i] = 1.0f / U;
	ck_assert_int_eq(swm_set_isa(isa_names[_i]), 0);
	ck_assert_int_eq(swm_row_stats(x, SWM_F32, SWM_PROBS, U, 0, &o, &v), SWM_OK);
	ck_assert_int_eq(swm_set_isa("generic"), 0);
	ck_assert_int_eq(swm_row_stats(x, SWM_F32, SWM_PROBS, U, 0, &o, &g), SWM_OK);
	swm_set_isa("auto");
	ck_assert(fabs(g.b) < 1e-12);
	ck_close(v.b, g.b, 0, 1e-12);
	ck_close(v.Hc, g.Hc, 1e-13, 0);
	ck_assert_int_eq(kn->probs[SWM_F32](x, U, 0, o.delta, o.delta, o.delta, &ps), 0);
	double m = U - 1;
	ck_assert(sqrt(m / U) * ps.eL / m > 0.5e-10);

	double eps = 1e-6;
	for (int i = 1; i < N; i++)
		x[i] = (float)(eps / (N - 2));
	x[0] = 0.65f;
	x[9] = (float)(0.35 - eps);	/* a block of 8 without the sink */
	ck_assert_int_eq(swm_set_isa("generic"), 0);
	ck_assert_int_eq(swm_row_stats(x, SWM_F32, SWM_PROBS, N, 0, &o, &g), SWM_OK);
	swm_set_isa("auto");
	ck_assert(g.Hc > 1e-5 && g.Hc < 1e-4);
	ck_assert_int_eq(kn->probs[SWM_F32](x, N, 0, o.delta, o.delta, o.delta, &ps), 0);
	ck_assert(ps.eP > 0);
	ck_assert(ps.eP / ps.W <= 0.5 * fmax(1e-7 * g.Hc, 1e-10));
}
END_TEST

/*
 * The f32 rows' fast loops take every block they should (a block taken
 * the slow way gives the same statistics within the budget, so
 * test_f32_fast_edges cannot tell; only the time would): rows whose
 * content lies in the fast range, each element below 1/8 of it. eL and eP
 * come from the elements that took single-precision logarithms alone:
 * SWM_Y_KAPPA times the sum of |y| and of x |y| over them, y = ln(1 + f) -
 * f from each float's bits as the kernels take it, within the series'
 * 1.73e-7. Those elements: AVX2 (p256_f32) every block of 8 within the
 * row without the sink, AVX-512 (p512_f32s) every block of 16 within the
 * row, the sink's lane apart. A block that went the slow way lowers both
 * by about 1/33 to 1/516 of them (AVX2), 1/16 to 1/258 (AVX-512).
 */
START_TEST(test_f32_fast_taken)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->row_logs == NULL || strcmp(kn->row_logs, "f32") != 0)
		return;
	const size_t B = strcmp(isa_names[_i], "avx512") == 0 ? 16 : 8;
	static const size_t ns[] = { 264, 1000, 2048, 4133 };
	static const size_t ks[] = { 0, 7, 130, 263 };
	enum { NMAX = 4133 };
	static float x[NMAX];
	rng_state = 43;
	int rows = 0;
	for (size_t in = 0; in < sizeof(ns) / sizeof(ns[0]); in++)
		for (size_t ik = 0; ik < sizeof(ks) / sizeof(ks[0]); ik++) {
			size_t n = ns[in], k = ks[ik];
			double sl = 0, sp = 0;
			for (size_t i = 0; i < n; i++)
				x[i] = (float)(0.5 / (double)(n - 1) * (0.5 + urand()));
			x[k] = 0.5f;
			for (size_t i = 0; i < n; i++) {
				size_t b0 = i / B * B;
				if (i == k || b0 + B > n || (B == 8 && k >= b0 && k < b0 + B))
					continue;
				uint32_t bits, u, zb;
				memcpy(&bits, &x[i], 4);
				u = bits - 0x3f3504f3u;
				zb = (u & 0x007fffffu) + 0x3f3504f3u;
				float z;
				memcpy(&z, &zb, 4);
				double f = (double)(z - 1.0f), y = log1p(f) - f;
				sl += fabs(y);
				sp += (double)x[i] * fabs(y);
			}
			struct swm_psum ps;
			ck_assert_int_eq(kn->probs[SWM_F32](x, n, k, 1e-38, 0, 0, &ps), 0);
			ck_assert_msg(fabs(ps.eL - SWM_Y_KAPPA * sl) <= 2e-7 * SWM_Y_KAPPA * sl,
			    "%s n %zu k %zu: eL %.17g, SWM_Y_KAPPA sum |y| over the fast blocks %.17g",
			    isa_names[_i], n, k, ps.eL, SWM_Y_KAPPA * sl);
			ck_assert_msg(fabs(ps.eP - SWM_Y_KAPPA * sp) <= 2e-7 * SWM_Y_KAPPA * sp,
			    "%s n %zu k %zu: eP %.17g, SWM_Y_KAPPA sum x |y| over the fast blocks %.17g",
			    isa_names[_i], n, k, ps.eP, SWM_Y_KAPPA * sp);
			rows++;
		}
	ck_assert_int_eq(rows, 16);
}
END_TEST

/*
 * The error per element of the pair kernel's single-precision logarithm,
 * against long double: pair.c's redo rule (f32_noisy) assumes an rms
 * below 2e-9 and a mean near 0. One element m at a time (the others 0, so the
 * kernel's first sum is m ln m), m = 2^u with u uniform in [-24, 0].
 */
START_TEST(test_pair_log_error)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->pair == NULL || kn->pair_logs == NULL ||
	    strcmp(kn->pair_logs, "f32") != 0)
		return;
	double a[8] = { 0 }, z[8] = { 0 }, out[4];
	long double sum = 0, sq = 0;
	double worst = 0;
	enum { N = 200000 };
	rng_state = 11;
	for (int i = 0; i < N; i++) {
		double m = exp2(-24 * urand());
		a[i % 8] = m;
		kn->pair(a, z, z, z, z, z, 8, out);
		a[i % 8] = 0;
		long double d = (long double)out[0] / m - logl(m);
		sum += d;
		sq += d * d;
		worst = fmax(worst, fabs((double)d));
	}
	double rms = (double)sqrtl(sq / N), mean = (double)(sum / N);
	printf("test_pair_log_error: %s, rms %.3g, mean %.3g, largest %.3g per element\n",
	    isa_names[_i], rms, mean, worst);
	ck_assert_msg(rms <= 2e-9 && fabs(mean) <= 1e-10 && worst < 2e-8,
	    "log error rms %g mean %g largest %g", rms, mean, worst);
}
END_TEST

/*
 * The logarithm of the double-precision pair kernels, against long double:
 * x ln x (the kernel's first sum with one element x and the others 0) for
 * 20000 mantissas in each of 61 binades (2^-61 .. 1), relative error. pair
 * may take a shorter series than ln_array (AVX-512: pair512s, 6.6e-14
 * measured, row_simd.c LNA): held to 1e-13; pair_f64, the kernel pairs
 * are taken again with, to LNQ's 2e-15 (4e-16 measured).
 */
START_TEST(test_pair_kernel_log)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->pair == NULL || kn->pair_f64 == NULL)
		return;
	int f32 = kn->pair_logs != NULL && strcmp(kn->pair_logs, "f32") == 0;
	double a[8] __attribute__((aligned(64))) = { 0 }, z[8] = { 0 }, out[4];
	double worst[2] = { 0, 0 };
	for (int v = f32; v < 2; v++) {
		swm_pair_fn f = v ? kn->pair_f64 : kn->pair;
		for (int e = -60; e <= 0; e++)
			for (int t = 0; t < 20000; t++) {
				double x = ldexp(1.0 + t / 20000.0, e - 1);
				a[t % 8] = x;
				f(a, a, z, z, z, z, 8, out);
				a[t % 8] = 0;
				long double want = (long double)x * logl((long double)x);
				double err = (double)(fabsl((long double)out[0] - want) / fabsl(want));
				if (x != 1.0)
					worst[v] = fmax(worst[v], err);
			}
	}
	printf("test_pair_kernel_log: %s, largest relative error of x ln x: pair %.3g%s, "
	    "pair_f64 %.3g\n", isa_names[_i], worst[0], f32 ? " (single precision: not here)" : "",
	    worst[1]);
	ck_assert_msg(f32 || worst[0] <= 1e-13, "%s pair: x ln x off by %g", isa_names[_i], worst[0]);
	ck_assert_msg(worst[1] <= 2e-15, "%s pair_f64: x ln x off by %g", isa_names[_i], worst[1]);
}
END_TEST

/*
 * The pair kernels at every length of 8 to 200 keys (pair256 takes two
 * sets of 8 keys in turn, software-pipelined, and ends with one or two):
 * the four sums against long double, held to the single-precision budget
 * (1e-7 of the sum of the terms' sizes) where the kernel takes float logs,
 * else to 1e-13; and one key at a time at each position of 40 and of 48
 * keys (the others 0; one group after the loop, and two), so a key taken
 * twice, never, or with another key's logarithm shows. Past n every array
 * holds NaN: a kernel that reads past n has NaN sums.
 */
static void
pair_check(swm_pair_fn f, const double *v, size_t n, size_t stride, double tol,
    const char *isa, size_t at, double *worst)
{
	const double *ax = v, *cx = v + stride, *lx = v + 2 * stride;
	const double *ay = v + 3 * stride, *cy = v + 4 * stride, *ly = v + 5 * stride;
	long double want[4] = { 0, 0, 0, 0 }, size[4] = { 0, 0, 0, 0 };
	double out[4];
	for (size_t i = 0; i < n; i++) {
		long double m = (long double)ax[i] + ay[i], mc = (long double)cx[i] + cy[i];
		long double d = (long double)lx[i] - ly[i];
		long double t[4] = { m > 0 ? m * logl(m) : 0, mc > 0 ? mc * logl(mc) : 0,
			(long double)ax[i] * ay[i], d * d };
		for (int q = 0; q < 4; q++) {
			want[q] += t[q];
			/* a float log's error is relative to m, not to m ln m */
			size[q] += fabsl(t[q]) + (q == 0 ? m : q == 1 ? mc : 0);
		}
	}
	f(ax, cx, lx, ay, cy, ly, n, out);
	for (int q = 0; q < 4; q++) {
		double e = size[q] > 0 ? (double)(fabsl(out[q] - want[q]) / size[q]) : fabs(out[q]);
		ck_assert_msg(e <= (q < 2 ? tol : 1e-13), "%s pair, n %zu, key %zu: sum %d is %.17g, "
		    "long double %.17Lg (%.3g)", isa, n, at, q, out[q], want[q], e);
		*worst = fmax(*worst, e);
	}
}

START_TEST(test_pair_lengths)
{
	const struct swm_kernels *kn = swm_kernels_get(isa_names[_i]);
	if (kn == NULL || kn->pair == NULL)
		return;
	enum { N = 200, S = N + 16 };
	static double v[6 * S] __attribute__((aligned(64)));
	int f32 = kn->pair_logs != NULL && strcmp(kn->pair_logs, "f32") == 0;
	double tol = f32 ? 1e-7 : 1e-13, worst = 0;
	rng_state = 59;
	for (size_t n = 8; n <= N; n += 8) {
		for (size_t i = 0; i < S; i++)
			for (int q = 0; q < 6; q++)
				v[q * S + i] = i >= n ? NAN : q % 3 == 2 ? nrand() :
				    exp(2 * nrand()) / (double)n;
		pair_check(kn->pair, v, n, S, tol, isa_names[_i], N, &worst);
	}
	for (size_t m = 40; m <= 48; m += 8)
		for (size_t j = 0; j < m; j++) {
			for (size_t i = 0; i < S; i++)
				for (int q = 0; q < 6; q++)
					v[q * S + i] = i >= m ? NAN : i != j ? 0 : q % 3 == 2 ?
					    (q < 3 ? 1.5 : -0.25) : 0.01 * (double)(j + 1 + q);
			pair_check(kn->pair, v, m, S, tol, isa_names[_i], j, &worst);
		}
	fprintf(stderr, "test_pair_lengths: %s (%s logs), largest relative error %.3g\n",
	    isa_names[_i], f32 ? "float" : "double", worst);
}
END_TEST

/*
 * METRICS.md §6 with single-precision pair logs: which pairs f32_noisy has
 * taken again with double logs. Heads 0 and 1 share their content shape
 * but not their sink (keep far apart, drop JS 0): the drop values are
 * noisy, so the pair is redone and js_drop is the double one, within
 * 1e-10 of 0; heads 0 and 2 differ everywhere (JS keep and drop > 0.1,
 * where 8 standard deviations of the float-log rounding are far below
 * 1e-7 relative): kept with float logs, off the double value by that
 * rounding. "Redone" is read from the error against a long double
 * reference: double logs give ~1e-16, float logs ~1e-10.
 */
START_TEST(test_pair_redo)
{
	if (!use_isa(_i) || !pair_logs_f32())
		return;
	enum { H = 3, K = 24, KS = 0 };
	double x[H][K];
	swm_opts o = dflt();
	rng_state = 7;
	make_row(x[0], K, KS, 0.1, 1);
	for (int i = 0; i < K; i++)
		x[1][i] = i == KS ? 0.8 : x[0][i] * (0.2 / 0.9);
	make_row(x[2], K, KS, 0.4, 2);
	uint32_t every[1];
	swm_block blk = { .data = x, .dtype = SWM_F64, .kind = SWM_PROBS, .heads = H,
	    .rows = 1, .keys = K, .head_stride = K, .row_stride = K, .sink = KS,
	    .pair_pick = every, .npair = swm_pick_all(1, every) };
	void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
	swm_head_acc acc[H];
	swm_pair_acc pairs[H * H];
	memset(acc, 0, sizeof(acc));
	memset(pairs, 0, sizeof(pairs));
	swm_block_add(&blk, &o, scratch, acc, pairs);
	free(scratch);
	long double w01[4], w02[4], w12[4];
	ref_pair(x[0], x[1], K, KS, w01);
	ref_pair(x[0], x[2], K, KS, w02);
	ref_pair(x[1], x[2], K, KS, w12);
	const swm_pair_acc *p01 = &pairs[0 * H + 1], *p02 = &pairs[0 * H + 2], *p12 = &pairs[1 * H + 2];
	const swm_pair_acc *pr[3] = { p01, p02, p12 };
	long double *want[3] = { w01, w02, w12 };
	for (int q = 0; q < 3; q++) {
		/* the budget, every pair */
		ck_close(pr[q]->js_keep, want[q][2], 1e-7, 1e-10);
		ck_close(pr[q]->js_drop, want[q][3], 1e-7, 1e-10);
		ck_close(pr[q]->cos_keep, want[q][0], 1e-12, 1e-15);
		ck_close(pr[q]->cos_drop, want[q][1], 1e-12, 1e-15);
	}
	/* 0-1: redone with double logs (keep and drop from the same sums) */
	ck_assert(w01[2] > 0.1 && fabsl(w01[3]) < 1e-15);
	ck_close(p01->js_keep, w01[2], 1e-13, 1e-14);
	ck_close(p01->js_drop, w01[3], 0, 1e-14);
	/* 0-2 and 1-2: kept with float logs, off the double value */
	for (int q = 1; q < 3; q++) {
		ck_assert(want[q][2] > 0.1 && want[q][3] > 0.1);
		ck_assert_msg(fabsl(pr[q]->js_keep - want[q][2]) > 1e-12 * want[q][2],
		    "pair %d js_keep %.17g: the double value %.17Lg, not redone with float logs",
		    q, pr[q]->js_keep, want[q][2]);
		ck_assert_msg(fabsl(pr[q]->js_drop - want[q][3]) > 1e-12 * want[q][3],
		    "pair %d js_drop %.17g: the double value %.17Lg, not redone with float logs",
		    q, pr[q]->js_drop, want[q][3]);
	}
}
END_TEST

/* ---- rows for pair, drift and flip statistics (storage/LAYOUT.md, row_use) ------------ */

/* swm_pick_rows into a guarded buffer: exactly the rows want[nwant]. */
static void
pick_is(const uint32_t *qpos, size_t rows, size_t keys, size_t n,
    const uint32_t *want, size_t nwant, int line)
{
	uint32_t out[64];
	for (size_t i = 0; i < 64; i++)
		out[i] = 0xdeadbeef;
	size_t got = swm_pick_rows(qpos, rows, keys, n, out);
	ck_assert_msg(got == nwant, "line %d: %zu rows picked, want %zu", line, got, nwant);
	for (size_t i = 0; i < nwant; i++)
		ck_assert_msg(out[i] == want[i], "line %d: pick[%zu] = %u, want %u", line, i,
		    out[i], want[i]);
	for (size_t i = nwant; i < 64; i++)
		ck_assert_msg(out[i] == 0xdeadbeef, "line %d: wrote past %zu", line, nwant);
}

#define PICK(q, rows, keys, n, ...) do { \
	static const uint32_t w_[] = { __VA_ARGS__ }; \
	pick_is((q), (rows), (keys), (n), w_, sizeof(w_) / sizeof(w_[0]), __LINE__); \
} while (0)
#define PICK_NONE(q, rows, keys, n) pick_is((q), (rows), (keys), (n), NULL, 0, __LINE__)

START_TEST(test_pick_rows)
{
	/* no qpos: evenly spread, first and last included */
	PICK(NULL, 10, 8, 4, 0, 3, 6, 9);
	PICK(NULL, 10, 8, 3, 0, 4, 9);
	PICK(NULL, 10, 8, 2, 0, 9);
	PICK(NULL, 10, 8, 1, 4);
	PICK(NULL, 10, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 9);
	PICK(NULL, 10, 8, 10, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
	PICK(NULL, 4, 8, 100, 0, 1, 2, 3);
	PICK(NULL, 1, 8, 3, 0);
	PICK_NONE(NULL, 10, 8, 0);
	PICK_NONE(NULL, 0, 8, 4);
	PICK_NONE(NULL, 10, 1, 4);	/* one key: every row is short */

	/*
	 * Two causal sequences, 6 and 3 rows: qpos 0 is a one-key row (skipped).
	 * Round-robin, longest first: 5, 8, then 4, 7, then 3, (B is done), ...
	 */
	static const uint32_t q2[] = { 0, 1, 2, 3, 4, 5, 0, 1, 2 };
	PICK(q2, 9, 16, 1, 5);
	PICK(q2, 9, 16, 2, 5, 8);
	PICK(q2, 9, 16, 3, 4, 5, 8);
	PICK(q2, 9, 16, 4, 4, 5, 7, 8);
	PICK(q2, 9, 16, 6, 2, 3, 4, 5, 7, 8);
	PICK(q2, 9, 16, 7, 1, 2, 3, 4, 5, 7, 8);
	PICK(q2, 9, 16, 9, 1, 2, 3, 4, 5, 7, 8);	/* n >= rows: the 7 eligible */
	PICK(q2, 9, 16, 100, 1, 2, 3, 4, 5, 7, 8);
	PICK_NONE(q2, 9, 16, 0);
	PICK_NONE(q2, 9, 1, 4);

	/*
	 * Three sequences over 4 keys (qpos >= 3 is a full row): A = rows 0-5,
	 * valid keys 1 2 3 4 4 4; B = rows 6-7 (qpos 2 <= 5 starts it), 3 4;
	 * C = rows 8-10, 1 2 3. Full rows tie: the lower index first (3, 4, 5),
	 * then the shorter ones from the longest down (2, 1).
	 */
	static const uint32_t q3[] = { 0, 1, 2, 3, 4, 5, 2, 3, 0, 1, 2 };
	PICK(q3, 11, 4, 3, 3, 7, 10);
	PICK(q3, 11, 4, 4, 3, 4, 7, 10);
	PICK(q3, 11, 4, 5, 3, 4, 6, 7, 10);
	PICK(q3, 11, 4, 6, 3, 4, 6, 7, 9, 10);
	PICK(q3, 11, 4, 7, 3, 4, 5, 6, 7, 9, 10);
	PICK(q3, 11, 4, 8, 2, 3, 4, 5, 6, 7, 9, 10);
	PICK(q3, 11, 4, 11, 1, 2, 3, 4, 5, 6, 7, 9, 10);

	/* the remainder goes to the first sequences that still have rows */
	static const uint32_t q4[] = { 1, 1, 2, 3, 1, 2, 3 };
	PICK(q4, 7, 8, 4, 0, 2, 3, 6);
	PICK(q4, 7, 8, 5, 0, 2, 3, 5, 6);

	/* qpos that does not increase: each row a sequence of its own */
	static const uint32_t q5[] = { 3, 3, 3, 2 };
	PICK(q5, 4, 8, 2, 0, 1);
	PICK(q5, 4, 8, 4, 0, 1, 2, 3);

	/* nothing but short rows */
	static const uint32_t q6[] = { 0, 0, 0 };
	PICK_NONE(q6, 3, 8, 2);

	/*
	 * A row at qpos == keys is full (min(keys, qpos + 1) = keys) like those
	 * after it, so it is the first full row and wins the tie: over 4 keys,
	 * valid keys 1 2 4 4 (qpos jumps past 3); over 8 keys, 8 8 8.
	 */
	static const uint32_t q7[] = { 0, 1, 4, 5 };
	PICK(q7, 4, 4, 1, 2);
	PICK(q7, 4, 4, 2, 2, 3);
	PICK(q7, 4, 4, 3, 1, 2, 3);
	static const uint32_t q8[] = { 8, 9, 10 };
	PICK(q8, 3, 8, 1, 0);
	PICK(q8, 3, 8, 2, 0, 1);

	/*
	 * The remainder skips a sequence that is used up, also one that does
	 * not start at row 0: A = rows 0-1 (eligible: row 1), B = rows 2-5 and
	 * C = rows 6-9 (three eligible each). n = 4: one round (1, 5, 9), the
	 * one left to B (4); n = 6: two rounds (1, 4, 5, 8, 9), the one left
	 * to B (3), none to A.
	 */
	static const uint32_t q9[] = { 0, 1, 0, 1, 2, 3, 0, 1, 2, 3 };
	PICK(q9, 10, 8, 4, 1, 4, 5, 9);
	PICK(q9, 10, 8, 6, 1, 3, 4, 5, 8, 9);
	PICK(q9, 10, 8, 7, 1, 3, 4, 5, 7, 8, 9);

	/* every row: the identity (guarded: nothing past rows), and the lookup of a row's position */
	uint32_t all[8], l[] = { 2, 5, 9 };
	for (size_t i = 0; i < 8; i++)
		all[i] = 0xdeadbeef;
	ck_assert_uint_eq(swm_pick_all(0, all), 0);
	ck_assert_uint_eq(all[0], 0xdeadbeef);
	ck_assert_uint_eq(swm_pick_all(5, all), 5);
	for (uint32_t i = 0; i < 5; i++)
		ck_assert_uint_eq(all[i], i);
	for (size_t i = 5; i < 8; i++)
		ck_assert_uint_eq(all[i], 0xdeadbeef);
	ck_assert_int_eq(swm_pick_find(l, 3, 2), 0);
	ck_assert_int_eq(swm_pick_find(l, 3, 5), 1);
	ck_assert_int_eq(swm_pick_find(l, 3, 9), 2);
	ck_assert_int_eq(swm_pick_find(l, 3, 0), -1);
	ck_assert_int_eq(swm_pick_find(l, 3, 6), -1);
	ck_assert_int_eq(swm_pick_find(l, 3, 10), -1);
	ck_assert_int_eq(swm_pick_find(NULL, 0, 0), -1);
}
END_TEST

/*
 * The pair sums over a pick list are those of a block made of the picked
 * rows alone, copied out, with every row picked: on every kernel path and
 * input type, two causal sequences (the rows from swm_pick_rows), and the
 * ln parts land at the row's position in the list.
 */
/* a clock for swm_block's clock_ns: 1000 ns a reading */
static int64_t fake_ns;
static int64_t
fake_clock(void)
{
	return fake_ns += 1000;
}

START_TEST(test_block_pick)
{
	if (!use_isa(_i))
		return;
	enum { H = 4, R = 12, K = 19, KS = 1, N = 5 };
	static const struct { swm_dtype dt; swm_kind kind; } cases[] = {
		{ SWM_F64, SWM_PROBS }, { SWM_F32, SWM_PROBS }, { SWM_BF16, SWM_PROBS },
		{ SWM_F32, SWM_LOGITS },
	};
	/* sequences of 7 and 5 rows, the first with a full row past the keys */
	static const uint32_t qpos[R] = { 13, 14, 15, 16, 17, 18, 19, 0, 1, 2, 3, 4 };
	uint32_t nvalid[R], pick[R], every[R];
	for (int r = 0; r < R; r++)
		nvalid[r] = qpos[r] >= K ? K : qpos[r] + 1;
	size_t np = swm_pick_rows(qpos, R, K, N, pick);
	ck_assert_uint_eq(np, N);
	/*
	 * 3 + 2: rows 5 and 6 (qpos 18, 19) both have every key, then row 4;
	 * rows 11 and 10 of the second
	 */
	static const uint32_t want[N] = { 4, 5, 6, 10, 11 };
	ck_assert(memcmp(pick, want, sizeof(want)) == 0);
	swm_opts o = dflt();
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		swm_dtype dt = cases[c].dt;
		size_t es = swm_dtype_size(dt);
		static char data[H * R * K * 8], sub[H * N * K * 8];
		static double src[K];
		uint32_t subvalid[N];
		rng_state = 101 + c;
		for (int h = 0; h < H; h++)
			for (int r = 0; r < R; r++) {
				size_t n = nvalid[r];
				memset(src, 0, sizeof(src));
				if (cases[c].kind == SWM_LOGITS) {
					for (size_t i = 0; i < n; i++)
						src[i] = 2 * nrand() + (i == KS ? 3 : 0);
				} else {
					make_row(src, n, KS, 0.15 + 0.1 * h, 0.5 + h);
				}
				store_row(data + ((size_t)h * R + r) * K * es, dt, src, K);
			}
		for (int h = 0; h < H; h++)
			for (size_t i = 0; i < np; i++)
				memcpy(sub + ((size_t)h * N + i) * K * es,
				    data + ((size_t)h * R + pick[i]) * K * es, K * es);
		for (size_t i = 0; i < np; i++)
			subvalid[i] = nvalid[pick[i]];

		void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
		static float ln[H * N * K], lnsub[H * N * K];
		swm_head_acc acc[H], accsub[H];
		swm_pair_acc pairs[H * H], psub[H * H];
		memset(acc, 0, sizeof(acc));
		memset(accsub, 0, sizeof(accsub));
		memset(pairs, 0, sizeof(pairs));
		memset(psub, 0, sizeof(psub));
		memset(ln, 0, sizeof(ln));
		memset(lnsub, 0, sizeof(lnsub));
		swm_block blk = { .data = data, .dtype = dt, .kind = cases[c].kind,
		    .heads = H, .rows = R, .keys = K, .head_stride = R * K, .row_stride = K,
		    .nvalid = nvalid, .sink = KS, .pair_pick = pick, .npair = np,
		    .ln_pick = pick, .nln = np, .ln_out = ln };
		/* the pair work's time: two readings a picked row, none elsewhere */
		int64_t pair_ns = 5;
		blk.clock_ns = fake_clock;
		blk.pair_ns = &pair_ns;
		fake_ns = 0;
		swm_block_add(&blk, &o, scratch, acc, pairs);
		ck_assert_int_eq(pair_ns, 5 + 1000 * (int64_t)np);
		ck_assert_int_eq(fake_ns, 2000 * (int64_t)np);
		swm_block bs = { .data = sub, .dtype = dt, .kind = cases[c].kind,
		    .heads = H, .rows = np, .keys = K, .head_stride = N * K, .row_stride = K,
		    .nvalid = subvalid, .sink = KS, .pair_pick = every,
		    .npair = swm_pick_all(np, every), .ln_pick = every, .nln = np,
		    .ln_out = lnsub };
		swm_block_add(&bs, &o, scratch, accsub, psub);	/* no clock: none read */
		ck_assert_int_eq(fake_ns, 2000 * (int64_t)np);
		free(scratch);
		for (int h = 0; h < H; h++)
			ck_assert_uint_eq(acc[h].rows, R - 1);	/* row 7 has one key */
		for (int i = 0; i < H; i++)
			for (int j = i + 1; j < H; j++) {
				const swm_pair_acc *a = &pairs[i * H + j], *b = &psub[i * H + j];
				ck_assert_uint_eq(a->rows, np);
				ck_assert_uint_eq(a->rows, b->rows);
				ck_assert_uint_eq(a->rows_drop, b->rows_drop);
				/* the same rows in the same order: the same sums, to the bit */
				ck_assert_msg(a->cos_keep == b->cos_keep && a->cos_drop == b->cos_drop &&
				    a->js_keep == b->js_keep && a->js_drop == b->js_drop &&
				    a->sink2 == b->sink2 && a->content2 == b->content2,
				    "case %zu pair %d,%d: %.17g %.17g", c, i, j, a->cos_keep, b->cos_keep);
			}
		for (int h = 0; h < H; h++)
			for (size_t i = 0; i < np; i++)
				for (size_t k = 0; k < subvalid[i]; k++)
					ck_assert(ln[((size_t)h * np + i) * K + k] ==
					    lnsub[((size_t)h * np + i) * K + k]);
	}
}
END_TEST

START_TEST(test_flip_rate)
{
	/* 3 heads: one comparison per anchor */
	double keep[9] = { 0, 1, 2,  1, 0, 3,  2, 3, 0 };
	double drop[9] = { 0, 2, 1,  2, 0, 3,  1, 3, 0 };
	uint64_t c;
	/* anchor 0: keep 1<2, drop 2>1: flip; anchor 1: (0,2) 1<3 vs 2<3 same;
	 * anchor 2: (0,1) 2<3 vs 1<3 same */
	ck_close(swm_flip_rate(keep, drop, 3, &c), 1.0 / 3, 1e-15, 0);
	ck_assert_uint_eq(c, 3);
	/* a tie on either side is no flip */
	drop[1] = drop[2] = 1;
	ck_close(swm_flip_rate(keep, drop, 3, &c), 0, 0, 0);
	ck_assert_uint_eq(c, 3);
	/* NaN comparisons are left out */
	keep[5] = NAN;
	swm_flip_rate(keep, drop, 3, &c);
	ck_assert_uint_eq(c, 2);
	/* 2 heads: no comparison */
	ck_assert(isnan(swm_flip_rate(keep, drop, 2, &c)));
	ck_assert_uint_eq(c, 0);
	/* 5 heads: 5 * C(4,2) = 30 comparisons; brute force against random data */
	rng_state = 29;
	double k5[25], d5[25];
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < 5; j++) {
			k5[i * 5 + j] = i == j ? 0 : urand();
			d5[i * 5 + j] = i == j ? 0 : urand();
		}
	int flips = 0;
	for (int i = 0; i < 5; i++)
		for (int j = 0; j < 5; j++)
			for (int l = 0; l < 5; l++)
				if (i != j && i != l && j < l)
					flips += (k5[i * 5 + j] < k5[i * 5 + l]) != (d5[i * 5 + j] < d5[i * 5 + l]);
	ck_close(swm_flip_rate(k5, d5, 5, &c), flips / 30.0, 1e-15, 0);
	ck_assert_uint_eq(c, 30);
	/* entropy: D(i,j) = |E_i - E_j| */
	double Hk[3] = { 1.0, 2.0, 4.0 }, Hd[3] = { 1.0, 3.5, 4.0 }, s[18];
	/* anchor 0: |1-2|=1 < |1-4|=3 ; drop 2.5 < 3 : same. anchor 1: (0,2): 1 < 2 ;
	 * drop 2.5 > 0.5: flip. anchor 2: (0,1): 3 > 2 ; drop 3 > 0.5 same. */
	ck_close(swm_flip_rate_entropy(Hk, Hd, 3, s, &c), 1.0 / 3, 1e-15, 0);
	ck_assert_uint_eq(c, 3);
}
END_TEST

START_TEST(test_row_from_stats)
{
	swm_row r;
	double ok[6] = { 0.3, 0.7, 1.2, 0.6108643020548935, 0.8416, -0.4 };
	ck_assert_int_eq(swm_row_from_stats(ok, 1e-4, &r), SWM_OK);
	ck_assert(r.s == 0.3 && r.w == 0.7 && r.H == 1.2 && r.b == -0.4 && r.status == SWM_OK);
	ck_close(r.C, 0.7 * 0.8416, 1e-15, 0);
	double nan6[6] = { 0.3, 0.7, NAN, 0.6, 0.8, 0 };
	ck_assert_int_eq(swm_row_from_stats(nan6, 1e-4, &r), SWM_REJ_NONFINITE);
	double neg[6] = { 0.3, 0.7, 1.2, 0.6, -0.1, 0 };
	ck_assert_int_eq(swm_row_from_stats(neg, 1e-4, &r), SWM_REJ_NEGATIVE);
	double sum[6] = { 0.3, 0.6, 1.2, 0.6, 0.8, 0 };
	ck_assert_int_eq(swm_row_from_stats(sum, 1e-4, &r), SWM_REJ_SUM);
	ck_assert_int_eq(swm_row_from_stats(sum, 0.2, &r), SWM_OK);
	/* |s + w - 1| equal to the tolerance is accepted, as swm_row_stats() does */
	double edge[6] = { 0.25, 0.5, 1.0, 0.5, 0.5, 0 };
	ck_assert_int_eq(swm_row_from_stats(edge, 0.25, &r), SWM_OK);
	ck_assert_int_eq(swm_row_from_stats(edge, 0.2, &r), SWM_REJ_SUM);
	/* v holds six values: a NaN after them is not read */
	double past[7] = { 0.3, 0.7, 1.2, 0.6, 0.8, -0.4, NAN };
	ck_assert_int_eq(swm_row_from_stats(past, 1e-4, &r), SWM_OK);
	ck_assert(r.b == -0.4);
	/* the rows it makes serve the paired split */
	double a[6] = { 0.5, 0.5, 1.0397207708399179, 0.6931471805599453, 0.6931471805599453, 0 };
	double b[6] = { 0.2, 0.8, 1.0296530140645737, 0.5004024235381879,
	    0.6615632381579821, 0 };
	swm_row ra, rb;
	swm_row_from_stats(a, 1e-4, &ra);
	swm_row_from_stats(b, 1e-4, &rb);
	swm_split sp;
	ck_assert_uint_eq(swm_split_paired(&ra, &rb, 1, &sp), 1);
	ck_close(sp.dH, -0.0100677568, 0, 1e-10);
	ck_close(sp.sink, 0.0104618058, 0, 1e-10);
	ck_close(sp.content, -0.0205295626, 0, 1e-10);
}
END_TEST

/*
 * swm_drift (§4, the writer's drift) against the definitions in long
 * double: two steps of two heads, a row rejected at one step (out of both
 * sums), ln parts kept for other rows at each step (the content distance
 * over the rows both kept), and a side without ln parts (content NaN).
 */
START_TEST(test_drift)
{
	enum { H = 2, R = 4, K = 11, KS = 0 };
	static const uint32_t nvalid[R] = { 11, 11, 7, 7 };
	static double src[2][H][R][K];
	static double data[2][H * R * K];
	static swm_row rows[2][H * R];
	static float ln[2][H * 3 * K];
	static const uint32_t pick[2][3] = { { 0, 2 }, { 0, 2, 3 } };
	static const size_t npick[2] = { 2, 3 };
	swm_opts o = dflt();
	rng_state = 77;
	for (int t = 0; t < 2; t++) {
		for (int h = 0; h < H; h++)
			for (int r = 0; r < R; r++) {
				memset(src[t][h][r], 0, sizeof(src[t][h][r]));
				make_row(src[t][h][r], nvalid[r], KS, 0.2 + 0.3 * t + 0.1 * h, 1 + h);
				memcpy(&data[t][((size_t)h * R + r) * K], src[t][h][r], sizeof(double) * K);
			}
		if (t == 1)	/* head 0, row 1 rejected at the second step */
			data[t][1 * K + 3] = -0.5;
		swm_head_acc acc[H];
		memset(acc, 0, sizeof(acc));
		swm_block blk = { .data = data[t], .dtype = SWM_F64, .kind = SWM_PROBS,
		    .heads = H, .rows = R, .keys = K, .head_stride = R * K, .row_stride = K,
		    .nvalid = nvalid, .sink = KS, .rows_out = rows[t], .ln_pick = pick[t],
		    .nln = npick[t], .ln_out = ln[t] };
		void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
		swm_block_add(&blk, &o, scratch, acc, NULL);
		free(scratch);
	}
	ck_assert_int_ne(rows[1][1].status, SWM_OK);
	for (int h = 0; h < H; h++) {
		long double s2 = 0, c2 = 0;
		int n = 0, nc = 0;
		for (int r = 0; r < R; r++) {
			if (h == 0 && r == 1)
				continue;
			static struct ref x, y;
			ref_row(src[0][h][r], nvalid[r], KS, o.delta, &x);
			ref_row(src[1][h][r], nvalid[r], KS, o.delta, &y);
			s2 += (x.b - y.b) * (x.b - y.b);
			n++;
			if (r != 0 && r != 2)	/* ln parts kept at both steps */
				continue;
			long double mx = 0, my = 0;
			for (uint32_t q = 1; q < nvalid[r]; q++)
				mx += x.l[q], my += y.l[q];
			mx /= nvalid[r] - 1;
			my /= nvalid[r] - 1;
			for (uint32_t q = 1; q < nvalid[r]; q++) {
				long double d = (x.l[q] - mx) - (y.l[q] - my);
				c2 += d * d;
			}
			nc++;
		}
		swm_drift_side a = { rows[0] + h * R, ln[0] + (size_t)h * npick[0] * K, pick[0],
		    npick[0] };
		swm_drift_side b = { rows[1] + h * R, ln[1] + (size_t)h * npick[1] * K, pick[1],
		    npick[1] };
		double ds, dc;
		swm_drift(&a, &b, R, K, KS, &ds, &dc);
		ck_close(ds, sqrtl(s2 / n), 1e-9, 1e-12);
		ck_close(dc, sqrtl(c2 / nc), 1e-5, 1e-6);	/* float logs */
		b.ln = NULL;
		swm_drift(&a, &b, R, K, KS, &ds, &dc);
		ck_close(ds, sqrtl(s2 / n), 1e-9, 1e-12);
		ck_assert(isnan(dc));
	}
}
END_TEST

/*
 * swm_cross_pairs against ref_pair's JS in long double: three layers of two
 * heads, the third with another pick (NaN), a head of the second missing
 * (NaN in its row and column), the diagonal 0; and every layer missing
 * gives NaN everywhere.
 */
START_TEST(test_cross_pairs)
{
	enum { L = 3, H = 2, NX = 3, K = 9, KS = 0, N = L * H };
	static double src[L][H][NX][K], data[L][H * NX * K];
	static const uint32_t idx[NX] = { 0, 4, 8 }, idx2[NX] = { 0, 4, 9 };
	static const uint32_t nvalid[NX] = { 9, 9, 6 };
	static const int32_t miss1[H] = { -1, 3 };
	rng_state = 5;
	swm_cross_layer cl[L];
	for (int l = 0; l < L; l++) {
		for (int h = 0; h < H; h++)
			for (int r = 0; r < NX; r++) {
				memset(src[l][h][r], 0, sizeof(src[l][h][r]));
				make_row(src[l][h][r], nvalid[r], KS, 0.1 + 0.2 * l, 0.5 + h);
				memcpy(&data[l][((size_t)h * NX + r) * K], src[l][h][r],
				    sizeof(double) * K);
			}
		cl[l] = (swm_cross_layer){ data[l], NX, l == 2 ? idx2 : idx, nvalid,
		    l == 1 ? miss1 : NULL };
	}
	ck_assert_uint_eq(swm_cross_nx(cl, L), NX);
	size_t sb = swm_cross_scratch(L, H, NX, K, SWM_F64);
	void *scratch = aligned_alloc(64, sb);
	double keep[N * N], drop[N * N];
	swm_cross_pairs(cl, L, H, K, SWM_F64, SWM_PROBS, KS, scratch, keep, drop);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			int li = i / H, lj = j / H;
			int gone = li == 2 || lj == 2 || i == 3 || j == 3;
			if (gone) {
				ck_assert_msg(isnan(keep[i * N + j]) && isnan(drop[i * N + j]),
				    "%d %d: %g %g", i, j, keep[i * N + j], drop[i * N + j]);
				continue;
			}
			long double k2 = 0, d2 = 0, pv[4];
			for (int r = 0; r < NX; r++) {
				ref_pair(src[li][i % H][r], src[lj][j % H][r], nvalid[r], KS, pv);
				k2 += pv[2];
				d2 += pv[3];
			}
			ck_close(keep[i * N + j], i == j ? 0 : k2 / NX, 1e-7, 1e-10);
			ck_close(drop[i * N + j], i == j ? 0 : d2 / NX, 1e-7, 1e-10);
		}
	for (int l = 0; l < L; l++)
		cl[l].rows = NULL;
	ck_assert_uint_eq(swm_cross_nx(cl, L), 0);
	swm_cross_pairs(cl, L, H, K, SWM_F64, SWM_PROBS, KS, scratch, keep, drop);
	for (int i = 0; i < N * N; i++)
		ck_assert(isnan(keep[i]) && isnan(drop[i]));
	free(scratch);
}
END_TEST

static Suite *
metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_checked_fixture(tc, isa_reset, NULL);
	tcase_add_test(tc, test_isa_api);
	tcase_add_loop_test(tc, test_isa_ln_exp, 0, NISA - 1);
	tcase_add_loop_test(tc, test_isa_same_as_generic, 0, NISA - 1);
	tcase_add_loop_test(tc, test_f32_fast_edges, 0, NISA - 1);
	tcase_add_loop_test(tc, test_f32_fast_taken, 0, NISA - 1);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_opts);
	tcase_add_test(tc, test_ln_exp);
	tcase_add_test(tc, test_half);
	tcase_add_loop_test(tc, test_worked_example, 0, NISA);
	tcase_add_loop_test(tc, test_identity_random, 0, NISA);
	tcase_add_loop_test(tc, test_aitchison_split_random, 0, NISA);
	tcase_add_loop_test(tc, test_closed_forms, 0, NISA);
	tcase_add_loop_test(tc, test_half_rows, 0, NISA);
	tcase_add_loop_test(tc, test_rejections, 0, NISA);
	tcase_add_loop_test(tc, test_replacement_band, 0, NISA);
	tcase_add_loop_test(tc, test_logits, 0, NISA);
	tcase_add_loop_test(tc, test_invariances, 0, NISA);
	tcase_add_loop_test(tc, test_block_pairs_ref, 0, NISA);
	tcase_add_loop_test(tc, test_pair_precision, 0, NISA);
	tcase_add_loop_test(tc, test_pair_redo, 0, NISA);
	tcase_add_loop_test(tc, test_pair_log_error, 0, NISA);
	tcase_add_loop_test(tc, test_pair_kernel_log, 0, NISA);
	tcase_add_loop_test(tc, test_pair_lengths, 0, NISA - 1);
	tcase_add_loop_test(tc, test_row_log_error, 0, NISA);
	tcase_add_loop_test(tc, test_row_log_redo, 0, NISA);
	tcase_add_test(tc, test_kernel_parity);
	tcase_add_loop_test(tc, test_half_table, 0, NISA);
	tcase_add_loop_test(tc, test_content_dist2_f32, 0, NISA);
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_split_sums_shares);
	tcase_add_test(tc, test_head_acc);
	tcase_add_loop_test(tc, test_row_pair, 0, NISA);
	tcase_add_test(tc, test_layer_finish);
	tcase_add_loop_test(tc, test_block_and_pairs, 0, NISA);
	tcase_add_loop_test(tc, test_prep_raw_ln_out, 0, NISA);
	tcase_add_test(tc, test_pick_rows);
	tcase_add_loop_test(tc, test_block_pick, 0, NISA);
	tcase_add_test(tc, test_flip_rate);
	tcase_add_test(tc, test_row_from_stats);
	tcase_add_test(tc, test_drift);
	tcase_add_test(tc, test_cross_pairs);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	/* the automatic choice, made here once as in a program */
	const char *isa = swm_isa();
	SRunner *sr = srunner_create(metrics_suite());
	fprintf(stderr, "test_metrics: kernels %s\n", isa);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
