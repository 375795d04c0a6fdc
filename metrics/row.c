/*
 * row.c: statistics of one attention row (METRICS.md §1, §4).
 *
 * The per-element loops keep LANES independent double accumulators and
 * process LANES elements per iteration, so the compiler vectorizes them
 * without reassociating floating-point sums (-ffast-math would also break
 * the rounding tricks in swm_math.h). The result is the same on every
 * build: the summation order is fixed by the code, not by the compiler.
 *
 * These loops are the "generic" path. On CPUs with AVX2 or AVX-512 the
 * per-element passes of swm_row_stats() run the kernels of row_simd.c
 * instead, chosen once at run time (swm_isa()); they sum the same terms in
 * another order, so results agree with this path to a few ulps.
 */
#include <cpuid.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "swm.h"
#include "swm_math.h"
#include "swm_simd.h"

#define LANES 8
#define AI __attribute__((always_inline)) static inline

static double
lane_sum(const double *a)
{
	/* pairwise, in a fixed order */
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* ---- run-time choice of the kernels ------------------------------------ */

static const struct swm_kernels kernels_generic = {
	"generic", { 0 }, { 0 }, 0, 0, 0, { 0 }, 0, { 0 }, 0, 0, "f64", { 0 }, 0, 0
};

/* F16C by CPUID: not every compiler's __builtin_cpu_supports() knows it */
static int
cpu_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

enum { CAP_AVX2 = 1, CAP_AVX512 = 2 };

/*
 * What the CPU (and the OS: __builtin_cpu_supports checks that it saves the
 * registers) can run, found once: CPUID traps to the hypervisor in a VM, and
 * swm_kernels_get() is called per row pair. Threads that race store the
 * same value.
 */
static int
cpu_caps(void)
{
	static _Atomic int caps = -1;
	int c = atomic_load_explicit(&caps, memory_order_relaxed);
	if (c < 0) {
		c = 0;
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    __builtin_cpu_supports("popcnt") && cpu_f16c()) {
			c |= CAP_AVX2;
			if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
				c |= CAP_AVX512;
		}
		atomic_store_explicit(&caps, c, memory_order_relaxed);
	}
	return c;
}

static int
isa_supported(const struct swm_kernels *kn)
{
	if (kn == &swm_kernels_avx512)
		return (cpu_caps() & CAP_AVX512) != 0;
	if (kn == &swm_kernels_avx2)
		return (cpu_caps() & CAP_AVX2) != 0;
	return kn == &kernels_generic;
}

static const struct swm_kernels *const all_kernels[] = {
	&swm_kernels_avx512, &swm_kernels_avx2, &kernels_generic
};

static const struct swm_kernels *
kernels_auto(void)
{
	for (size_t i = 0; i < sizeof(all_kernels) / sizeof(all_kernels[0]); i++)
		if (isa_supported(all_kernels[i]))
			return all_kernels[i];
	return &kernels_generic;
}

/* NULL until the first use; then the choice, replaced only by swm_set_isa() */
static _Atomic(const struct swm_kernels *) kernels_active;

static const struct swm_kernels *
kernels(void)
{
	const struct swm_kernels *kn =
	    atomic_load_explicit(&kernels_active, memory_order_acquire);
	if (kn == NULL) {
		const struct swm_kernels *want = kernels_auto();
		/* a concurrent swm_set_isa() wins over the automatic choice */
		if (atomic_compare_exchange_strong_explicit(&kernels_active, &kn, want,
		    memory_order_acq_rel, memory_order_acquire))
			kn = want;
	}
	return kn;
}

const char *
swm_isa(void)
{
	return kernels()->name;
}

const struct swm_kernels *
swm_kernels_get(const char *name)
{
	if (name == NULL)
		return NULL;
	if (strcmp(name, "auto") == 0)
		return kernels_auto();
	for (size_t i = 0; i < sizeof(all_kernels) / sizeof(all_kernels[0]); i++)
		if (strcmp(name, all_kernels[i]->name) == 0)
			return isa_supported(all_kernels[i]) ? all_kernels[i] : NULL;
	return NULL;
}

const char *
swm_precision(void)
{
	const struct swm_kernels *kn = kernels();
	int pair = kn->pair_logs != NULL && strcmp(kn->pair_logs, "f32") == 0;
	int rows = kn->row_logs != NULL && strcmp(kn->row_logs, "f32") == 0;
	return pair && rows ? "float32" : pair ? "float32-pair" : rows ? "float32-rows" : "float64";
}

int
swm_set_isa(const char *name)
{
	const struct swm_kernels *kn = swm_kernels_get(name);
	if (kn == NULL)
		return -1;
	atomic_store_explicit(&kernels_active, kn, memory_order_release);
	return 0;
}

/* ---- probabilities ---------------------------------------------------- */

enum { P_W, P_P, P_L, P_WB, P_NS, P_BAND, P_NEG, P_NF, P__N };

AI void
probs_elem(double v, double thr, double blo, double bhi, double a[P__N][LANES], int j)
{
	double lv = swm_ln(v > 0 ? v : 1.0);
	int small = v < thr;
	a[P_NF][j] += (fabs(v) <= DBL_MAX) ? 0.0 : 1.0;
	a[P_NEG][j] += v < 0 ? 1.0 : 0.0;
	a[P_W][j] += v;
	a[P_P][j] += v * lv;
	a[P_NS][j] += small ? 1.0 : 0.0;
	a[P_L][j] += small ? 0.0 : lv;
	a[P_WB][j] += small ? 0.0 : v;
	a[P_BAND][j] += (v >= blo && v < bhi) ? 1.0 : 0.0;
}

AI void
probs_range(const void *x, swm_dtype dt, size_t lo, size_t hi, double thr,
    double blo, double bhi, double a[P__N][LANES])
{
	size_t i = lo;
	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++)
			probs_elem(swm_ld(x, i + j, dt), thr, blo, bhi, a, j);
	for (; i < hi; i++)
		probs_elem(swm_ld(x, i, dt), thr, blo, bhi, a, 0);
}

AI void
probs_content(const void *x, swm_dtype dt, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps)
{
	double a[P__N][LANES] = { { 0 } };
	probs_range(x, dt, 0, k, thr, blo, bhi, a);
	probs_range(x, dt, k + 1, n, thr, blo, bhi, a);
	ps->W = lane_sum(a[P_W]);
	ps->P = lane_sum(a[P_P]);
	ps->L = lane_sum(a[P_L]);
	ps->Wbig = lane_sum(a[P_WB]);
	ps->nsmall = lane_sum(a[P_NS]);
	ps->band = lane_sum(a[P_BAND]);
	ps->neg = lane_sum(a[P_NEG]);
	ps->nonfin = lane_sum(a[P_NF]);
	ps->eP = ps->eL = 0;
}

static void
probs_content_any(const void *x, swm_dtype dt, size_t n, size_t k, double thr,
    double blo, double bhi, struct swm_psum *ps)
{
	switch (dt) {
	case SWM_F16: probs_content(x, SWM_F16, n, k, thr, blo, bhi, ps); break;
	case SWM_BF16: probs_content(x, SWM_BF16, n, k, thr, blo, bhi, ps); break;
	case SWM_F64: probs_content(x, SWM_F64, n, k, thr, blo, bhi, ps); break;
	default: probs_content(x, SWM_F32, n, k, thr, blo, bhi, ps); break;
	}
}

/* Fills the §1 values shared by both kinds from s, w, their logs and Hc. */
static void
finish_common(swm_row *r, double s, double w, double lns, double lnw, double H,
    double Hc)
{
	r->s = s;
	r->w = w;
	r->H = H;
	r->hb = -(s > 0 ? s * lns : 0.0) - (w > 0 ? w * lnw : 0.0);
	r->Hc = Hc;
	r->C = w * Hc;
}

/* The logs a row's statistics need, in place, for v[i] > 0: in one call
 * of the vector kernel where there is one, else with swm_ln(). */
static void
ln_batch(const struct swm_kernels *kn, double *v, size_t m)
{
	if (kn->ln != NULL) {
		kn->ln(v, v, m);
		return;
	}
	for (size_t i = 0; i < m; i++)
		v[i] = swm_ln(v[i]);
}

/* x where positive, else 1 (whose log is not used) */
static double
pos1(double x)
{
	return x > 0 ? x : 1.0;
}

/* The probability sums with the kernels kn (exact: with double logarithms
 * throughout), or the generic loop. */
static void
probs_sums(const struct swm_kernels *kn, const void *x, swm_dtype dt, size_t n,
    size_t k, double thr, double blo, double bhi, struct swm_psum *ps, int exact)
{
	swm_probs_fn f = (unsigned)dt >= SWM_DTYPE__N ? NULL : exact ? kn->probs_exact[dt] :
	    kn->probs[dt];
	/* a NaN, an infinity or an overflow: the generic loop tells which */
	if (f == NULL || f(x, n, k, thr, blo, bhi, ps) != 0)
		probs_content_any(x, dt, n, k, thr, blo, bhi, ps);
}

/* The same, keeping the values and logs in xo, vo where the kernel can
 * (probs_out): *raw = 1 then, else 0. */
static void
probs_sums_keep(const struct swm_kernels *kn, const void *x, swm_dtype dt, size_t n,
    size_t k, double thr, double blo, double bhi, struct swm_psum *ps, double *xo,
    double *vo, int *raw, int exact)
{
	swm_probs_out_fn f = xo != NULL && (unsigned)dt < SWM_DTYPE__N ? kn->probs_out[dt] : NULL;
	*raw = 0;
	if (f == NULL) {
		probs_sums(kn, x, dt, n, k, thr, blo, bhi, ps, exact);
		return;
	}
	if (f(x, n, k, thr, blo, bhi, ps, xo, vo) == 0)
		*raw = 1;
	else
		probs_content_any(x, dt, n, k, thr, blo, bhi, ps);
}

/* at most half the budget of METRICS.md §6 away from the value v */
static int
within_half_budget(double err, double v)
{
	return err <= 0.5 * fmax(1e-7 * fabs(v), 1e-10);
}

static swm_status
row_probs(const void *x, swm_dtype dt, size_t n, size_t k, const swm_opts *o,
    swm_row *r, double *xo, double *vo, int *raw, int exact)
{
	double tol = swm_opts_tol(o, dt), delta = o->delta;
	double xk = swm_ld(x, k, dt);
	const struct swm_kernels *kn = kernels();
	struct swm_psum ps;

	/*
	 * A part is replaced when x_i / S < delta. S is known only after the
	 * pass, but an accepted row has |S - 1| <= tol: classify against delta
	 * and count the parts whose class could depend on S (the band); only
	 * then, rarely, run the pass again with the exact threshold.
	 */
	double thr = delta;
	probs_sums_keep(kn, x, dt, n, k, thr, delta * (1 - tol), delta * (1 + tol), &ps,
	    xo, vo, raw, exact);
	if (ps.nonfin > 0 || !(fabs(xk) <= DBL_MAX))
		return SWM_REJ_NONFINITE;
	if (ps.neg > 0 || xk < 0)
		return SWM_REJ_NEGATIVE;
	double S = xk + ps.W;
	if (!(fabs(S - 1.0) <= tol) || !(S > 0))
		return SWM_REJ_SUM;
	if (ps.band > 0 || (xk >= delta * (1 - tol) && xk < delta * (1 + tol))) {
		thr = delta * S;
		probs_sums(kn, x, dt, n, k, thr, 0, 0, &ps, exact);
	}

	/*
	 * §4 multiplicative replacement: replaced parts are delta, the others
	 * x_i / S * (1 - delta r) / (Wbig / S), so ln a~_i = ln x_i + lnscale.
	 */
	int ksmall = xk < thr;
	double nrep = ps.nsmall + (ksmall ? 1 : 0);
	double Wbig = ps.Wbig + (ksmall ? 0.0 : xk);
	double s = xk / S, w = ps.W / S;
	double lv[7] = { pos1(xk), S, pos1(ps.W), pos1(s), pos1(w), pos1(Wbig), delta };
	ln_batch(kn, lv, 7);

	double lnxk = xk > 0 ? lv[0] : 0.0;
	double H = lv[1] - (xk * lnxk + ps.P) / S;
	/* one content key: c = (1), Hc is exactly 0, not rounding noise */
	double Hc = ps.W > 0 && n > 2 ? lv[2] - ps.P / ps.W : 0.0;
	finish_common(r, s, w, lv[3], lv[4], H, Hc);
	/* log1p(-0.0) is -0.0 */
	double lnscale = (nrep > 0 ? log1p(-delta * nrep) : -0.0) - lv[5];
	double lndelta = lv[6];
	double lk = ksmall ? lndelta : lnxk + lnscale;
	double m = (double)(n - 1);
	double meanc = (ps.L + (m - ps.nsmall) * lnscale + ps.nsmall * lndelta) / m;
	r->b = sqrt(m / (double)n) * (lk - meanc);
	/*
	 * Single-precision logarithms in the kernel (ps.eP, ps.eL > 0): where
	 * their error bound could take H, Hc (and C = w Hc) or b beyond half
	 * the budget, the row is taken again with double logarithms.
	 */
	if (!exact && (ps.eP > 0 || ps.eL > 0) &&
	    (!within_half_budget(ps.eP / S, H) ||
	    (ps.W > 0 && n > 2 && !within_half_budget(ps.eP / ps.W, Hc)) ||
	    !within_half_budget(sqrt(m / (double)n) * ps.eL / m, r->b)))
		return row_probs(x, dt, n, k, o, r, xo, vo, raw, 1);
	r->norm = S;
	r->lnz = 0;
	r->lnscale = lnscale;
	r->thr = thr;
	r->lndelta = lndelta;
	r->nrep = (uint32_t)nrep;
	return SWM_OK;
}

/* ---- logits ------------------------------------------------------------ */

enum { L_E, L_EY, L_Y, L_NM, L__N };

AI void
logits_elem(double z, double zmax, double a[L__N][LANES], int j)
{
	int masked = z == -INFINITY;
	double y = masked ? 0.0 : z - zmax;
	double e = masked ? 0.0 : swm_exp_neg(y);
	a[L_E][j] += e;
	a[L_EY][j] += e * y;
	a[L_Y][j] += y;
	a[L_NM][j] += masked ? 1.0 : 0.0;
}

AI void
logits_range(const void *x, swm_dtype dt, size_t lo, size_t hi, double zmax,
    double a[L__N][LANES])
{
	size_t i = lo;
	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++)
			logits_elem(swm_ld(x, i + j, dt), zmax, a, j);
	for (; i < hi; i++)
		logits_elem(swm_ld(x, i, dt), zmax, a, 0);
}

/* Max of the row, and the count of NaN and +inf entries. */
AI double
logits_max(const void *x, swm_dtype dt, size_t n, double *bad)
{
	double mx[LANES], nb[LANES];
	for (int j = 0; j < LANES; j++)
		mx[j] = -INFINITY, nb[j] = 0;
	size_t i = 0;
	for (; i + LANES <= n; i += LANES)
		for (int j = 0; j < LANES; j++) {
			double z = swm_ld(x, i + j, dt);
			nb[j] += (z == z && z < INFINITY) ? 0.0 : 1.0;
			mx[j] = z > mx[j] ? z : mx[j];
		}
	for (; i < n; i++) {
		double z = swm_ld(x, i, dt);
		nb[0] += (z == z && z < INFINITY) ? 0.0 : 1.0;
		mx[0] = z > mx[0] ? z : mx[0];
	}
	double m = mx[0];
	for (int j = 1; j < LANES; j++)
		m = mx[j] > m ? mx[j] : m;
	*bad = lane_sum(nb);
	return m;
}

AI void
logits_sums_t(const void *x, swm_dtype dt, size_t n, size_t k, struct swm_lsum *ls)
{
	double bad, a[L__N][LANES] = { { 0 } };
	double zmax = logits_max(x, dt, n, &bad);
	ls->zmax = zmax;
	ls->bad = bad;
	if (bad > 0 || zmax == -INFINITY)
		return;
	logits_range(x, dt, 0, k, zmax, a);
	logits_range(x, dt, k + 1, n, zmax, a);
	ls->E = lane_sum(a[L_E]);
	ls->EY = lane_sum(a[L_EY]);
	ls->Y = lane_sum(a[L_Y]);
	ls->nm = lane_sum(a[L_NM]);
}

static void
logits_sums(const struct swm_kernels *kn, const void *x, swm_dtype dt, size_t n,
    size_t k, struct swm_lsum *ls)
{
	swm_logits_fn f = (unsigned)dt < SWM_DTYPE__N ? kn->logits[dt] : NULL;
	if (f != NULL) {
		f(x, n, k, ls);
		return;
	}
	switch (dt) {
	case SWM_F16: logits_sums_t(x, SWM_F16, n, k, ls); break;
	case SWM_BF16: logits_sums_t(x, SWM_BF16, n, k, ls); break;
	case SWM_F64: logits_sums_t(x, SWM_F64, n, k, ls); break;
	default: logits_sums_t(x, SWM_F32, n, k, ls); break;
	}
}

static swm_status
row_logits(const void *x, swm_dtype dt, size_t n, size_t k, const swm_opts *o,
    swm_row *r)
{
	const struct swm_kernels *kn = kernels();
	struct swm_lsum ls;
	logits_sums(kn, x, dt, n, k, &ls);
	double zmax = ls.zmax;
	if (ls.bad > 0 || zmax == -INFINITY)
		return SWM_REJ_NONFINITE;
	double Ec = ls.E, EYc = ls.EY, Yc = ls.Y, rc = ls.nm;

	double zk = swm_ld(x, k, dt);
	int kmasked = zk == -INFINITY;
	double yk = kmasked ? 0.0 : zk - zmax;
	double ek = kmasked ? 0.0 : swm_exp_neg(yk);
	double Z = ek + Ec;
	double s = ek / Z, w = Ec / Z;
	double lv[5] = { Z, pos1(Ec), pos1(s), pos1(w), o->delta };
	ln_batch(kn, lv, 5);
	double lnZ = lv[0];
	double H = lnZ - (ek * yk + EYc) / Z;
	double Hc = Ec > 0 && n > 2 ? lv[1] - EYc / Ec : 0.0;
	finish_common(r, s, w, lv[2], lv[3], H, Hc);

	/* §4: ln a_i = y_i - ln Z exactly; -inf parts are zeros, replaced. */
	double nrep = rc + (kmasked ? 1 : 0);
	double lnscale = (nrep > 0 ? log1p(-o->delta * nrep) : -0.0) - lnZ;
	double lndelta = lv[4];
	double lk = kmasked ? lndelta : yk + lnscale;
	double m = (double)(n - 1);
	double meanc = (Yc + (m - rc) * lnscale + rc * lndelta) / m;
	r->b = sqrt(m / (double)n) * (lk - meanc);
	r->norm = zmax;
	r->lnz = lnZ;
	r->lnscale = lnscale;
	r->thr = 0;
	r->lndelta = lndelta;
	r->nrep = (uint32_t)nrep;
	return SWM_OK;
}

swm_status
swm_row_stats(const void *x, swm_dtype dt, swm_kind kind, size_t n, size_t k,
    const swm_opts *o, swm_row *out)
{
	swm_status st;

	out->n = (uint32_t)n;
	if (n < 2)
		st = SWM_REJ_SHORT;
	else if (k >= n)
		st = SWM_REJ_NOSINK;
	else if (kind == SWM_LOGITS)
		st = row_logits(x, dt, n, k, o, out);
	else {
		int raw;
		st = row_probs(x, dt, n, k, o, out, NULL, NULL, &raw, 0);
	}
	out->status = st;
	return st;
}

swm_status
swm_row_stats_keep(const void *x, swm_dtype dt, swm_kind kind, size_t n, size_t k,
    const swm_opts *o, swm_row *out, double *xo, double *vo, int *raw)
{
	swm_status st;

	*raw = 0;
	out->n = (uint32_t)n;
	if (n < 2)
		st = SWM_REJ_SHORT;
	else if (k >= n)
		st = SWM_REJ_NOSINK;
	else if (kind == SWM_LOGITS)
		st = row_logits(x, dt, n, k, o, out);
	else
		st = row_probs(x, dt, n, k, o, out, xo, vo, raw, 0);
	out->status = st;
	if (st != SWM_OK)
		*raw = 0;
	return st;
}

swm_status
swm_row_from_stats(const double v[6], double tol, swm_row *out)
{
	swm_status st = SWM_OK;
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < 6; i++)
		if (!(fabs(v[i]) <= DBL_MAX))
			st = SWM_REJ_NONFINITE;
	/* the balance may be negative; every other value is not */
	for (int i = 0; st == SWM_OK && i < 5; i++)
		if (v[i] < 0)
			st = SWM_REJ_NEGATIVE;
	if (st == SWM_OK && !(fabs(v[0] + v[1] - 1.0) <= tol))
		st = SWM_REJ_SUM;
	if (st == SWM_OK) {
		out->s = v[0];
		out->w = v[1];
		out->H = v[2];
		out->hb = v[3];
		out->Hc = v[4];
		out->C = v[1] * v[4];
		out->b = v[5];
	}
	out->status = st;
	return st;
}

/* ---- expansion for pair and drift work --------------------------------- */

/*
 * One pass to load (and for logits, shift) the values, then the logarithms
 * or exponentials of the whole row in one call of the vector kernel in use
 * (ln_batch), then one pass to scale and to put in the replaced parts.
 */
AI void
expand_t(const void *x, swm_dtype dt, swm_kind kind, const swm_row *r,
    double *p, double *l)
{
	const struct swm_kernels *kn = kernels();
	size_t n = r->n;
	double lndelta = r->lndelta;

	if (kind == SWM_LOGITS) {
		double invZ = 1.0 / exp(r->lnz);
		for (size_t i = 0; i < n; i++) {
			double z = swm_ld(x, i, dt);
			int masked = z == -INFINITY;
			double y = masked ? 0.0 : z - r->norm;
			if (p)
				p[i] = masked ? -INFINITY : y;
			if (l)
				l[i] = masked ? lndelta : y + r->lnscale;
		}
		if (!p)
			return;
		if (kn->exp_neg != NULL)
			kn->exp_neg(p, p, n);
		else
			for (size_t i = 0; i < n; i++)
				p[i] = swm_exp_neg(p[i]);
		for (size_t i = 0; i < n; i++)
			p[i] *= invZ;
		return;
	}
	double invS = 1.0 / r->norm;
	if (p && l && kn->expand[dt] != NULL) {
		kn->expand[dt](x, n, invS, r->thr, r->lnscale, lndelta, p, l);
		return;
	}
	if (l) {
		for (size_t i = 0; i < n; i++)
			l[i] = pos1(swm_ld(x, i, dt));
		ln_batch(kn, l, n);
	}
	for (size_t i = 0; i < n; i++) {
		double v = swm_ld(x, i, dt);
		if (p)
			p[i] = v * invS;
		if (l)
			l[i] = v < r->thr ? lndelta : l[i] + r->lnscale;
	}
}

void
swm_row_expand(const void *x, swm_dtype dt, swm_kind kind, const swm_row *r,
    double *p, double *l)
{
	switch (dt) {
	case SWM_F16: expand_t(x, SWM_F16, kind, r, p, l); break;
	case SWM_BF16: expand_t(x, SWM_BF16, kind, r, p, l); break;
	case SWM_F64: expand_t(x, SWM_F64, kind, r, p, l); break;
	default: expand_t(x, SWM_F32, kind, r, p, l); break;
	}
}
