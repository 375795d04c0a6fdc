/*
 * pair.c: head sums (§2), pairs of rows and of heads (§4, §5), flip rates.
 */
#include <math.h>
#include <string.h>

#include "swm.h"
#include "swm_math.h"
#include "swm_simd.h"

#define LANES 8
#define AI __attribute__((always_inline)) static inline

static double
lane_sum(const double *a)
{
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

double
swm_content_dist2(const double *lx, const double *ly, size_t n, size_t k)
{
	double sd = 0, ss = 0;
	if (n < 2)
		return NAN;
	for (size_t i = 0; i < n; i++)
		sd += i == k ? 0.0 : lx[i] - ly[i];
	double mean = sd / (double)(n - 1);
	for (size_t i = 0; i < n; i++) {
		double d = lx[i] - ly[i] - mean;
		ss += i == k ? 0.0 : d * d;
	}
	return ss;
}

/* sum of lx - ly over [lo, hi), in LANES lanes (the compiler vectorizes) */
static void
diff_sum_f32(const float *lx, const float *ly, size_t lo, size_t hi, double a[LANES])
{
	size_t i = lo;
	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++)
			a[j] += (double)lx[i + j] - (double)ly[i + j];
	for (; i < hi; i++)
		a[0] += (double)lx[i] - (double)ly[i];
}

/* sum of (lx - ly - mean)^2 over [lo, hi) */
static void
dev_sq_f32(const float *lx, const float *ly, size_t lo, size_t hi, double mean,
    double a[LANES])
{
	size_t i = lo;
	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++) {
			double d = (double)lx[i + j] - (double)ly[i + j] - mean;
			a[j] += d * d;
		}
	for (; i < hi; i++) {
		double d = (double)lx[i] - (double)ly[i] - mean;
		a[0] += d * d;
	}
}

double
swm_content_dist2_f32(const float *lx, const float *ly, size_t n, size_t k)
{
	double sd[LANES] = { 0 }, ss[LANES] = { 0 };
	const struct swm_kernels *kn = swm_kernels_get(swm_isa());
	if (kn && kn->dist2_f32)
		return kn->dist2_f32(lx, ly, n, k);
	if (n < 2)
		return NAN;
	size_t kk = k < n ? k : n;
	diff_sum_f32(lx, ly, 0, kk, sd);
	if (kk < n)
		diff_sum_f32(lx, ly, kk + 1, n, sd);
	double mean = lane_sum(sd) / (double)(n - 1);
	dev_sq_f32(lx, ly, 0, kk, mean, ss);
	if (kk < n)
		dev_sq_f32(lx, ly, kk + 1, n, mean, ss);
	return lane_sum(ss);
}

double
swm_balance(const double *l, size_t n, size_t k)
{
	double sum = 0;
	if (n < 2 || k >= n)
		return NAN;
	for (size_t i = 0; i < n; i++)
		sum += i == k ? 0.0 : l[i];
	double m = (double)(n - 1);
	return sqrt(m / (double)n) * (l[k] - sum / m);
}

enum { Q_DOT, Q_NX, Q_NY, Q_SD, Q_HM, Q_HMC, Q__N };

#define CHUNK 256

/* ln of n values with the vector kernel in use, or swm_ln (x > 0). */
static void
ln_array(const struct swm_kernels *kn, const double *x, double *y, size_t n)
{
	if (kn && kn->ln) {
		kn->ln(x, y, n);
		return;
	}
	for (size_t i = 0; i < n; i++)
		y[i] = swm_ln(x[i] > 0 ? x[i] : 1.0);
}

/*
 * One content range of a row pair, CHUNK elements at a time: the mixtures
 * m = (p + q) / 2 and mc (of the content distributions) go to a buffer, and
 * their logarithms are taken in one vector call per chunk.
 */
static void
pair_range(const double *px, const double *py, const double *lx,
    const double *ly, size_t lo, size_t hi, double ixw, double iyw,
    const struct swm_kernels *kn, double a[Q__N][LANES])
{
	double m[CHUNK], mc[CHUNK], lm[CHUNK], lmc[CHUNK];
	for (size_t c0 = lo; c0 < hi; c0 += CHUNK) {
		size_t len = hi - c0 < CHUNK ? hi - c0 : CHUNK;
		const double *p = px + c0, *q = py + c0, *u = lx + c0, *v = ly + c0;
		size_t i = 0;
		for (; i + LANES <= len; i += LANES)
			for (int j = 0; j < LANES; j++) {
				double pi = p[i + j], qi = q[i + j];
				m[i + j] = 0.5 * (pi + qi);
				mc[i + j] = 0.5 * (pi * ixw + qi * iyw);
				a[Q_DOT][j] += pi * qi;
				a[Q_NX][j] += pi * pi;
				a[Q_NY][j] += qi * qi;
				a[Q_SD][j] += u[i + j] - v[i + j];
			}
		for (; i < len; i++) {
			double pi = p[i], qi = q[i];
			m[i] = 0.5 * (pi + qi);
			mc[i] = 0.5 * (pi * ixw + qi * iyw);
			a[Q_DOT][0] += pi * qi;
			a[Q_NX][0] += pi * pi;
			a[Q_NY][0] += qi * qi;
			a[Q_SD][0] += u[i] - v[i];
		}
		ln_array(kn, m, lm, len);
		ln_array(kn, mc, lmc, len);
		/* 0 ln 0 = 0: the kernels give a finite value for 0, times 0 */
		for (i = 0; i + LANES <= len; i += LANES)
			for (int j = 0; j < LANES; j++) {
				a[Q_HM][j] += m[i + j] > 0 ? m[i + j] * lm[i + j] : 0.0;
				a[Q_HMC][j] += mc[i + j] > 0 ? mc[i + j] * lmc[i + j] : 0.0;
			}
		for (; i < len; i++) {
			a[Q_HM][0] += m[i] > 0 ? m[i] * lm[i] : 0.0;
			a[Q_HMC][0] += mc[i] > 0 ? mc[i] * lmc[i] : 0.0;
		}
	}
}

static double
sq_dev_range(const double *lx, const double *ly, size_t lo, size_t hi, double mean)
{
	double a[LANES] = { 0 };
	size_t i = lo;
	for (; i + LANES <= hi; i += LANES)
		for (int j = 0; j < LANES; j++) {
			double d = lx[i + j] - ly[i + j] - mean;
			a[j] += d * d;
		}
	for (; i < hi; i++) {
		double d = lx[i] - ly[i] - mean;
		a[0] += d * d;
	}
	return lane_sum(a);
}

/*
 * The pair values from the content sums of two rows (§4, §5): hm and hmc
 * are sum m ln m of the mixtures of the raw and of the content parts, dot,
 * nx, ny the content dot product and squared norms, c2 the squared content
 * clr distance; the sink entries come in from the rows.
 */
static void
pair_finish(const swm_row *rx, const swm_row *ry, double pk, double qk,
    double dot, double nx, double ny, double hm, double hmc, double c2,
    swm_pair *out)
{
	int drop = rx->w > 0 && ry->w > 0;
	double mk = 0.5 * (pk + qk);
	out->cos_keep = (dot + pk * qk) / sqrt((nx + pk * pk) * (ny + qk * qk));
	/* JS = H(m) - (H(x) + H(y)) / 2, one logarithm per element */
	double js = -(hm + swm_xlnx(mk)) - 0.5 * (rx->H + ry->H);
	out->js_keep = js > 0 ? js : 0.0;
	if (drop && rx->n == 2) {
		/* one content key: both content distributions are (1) exactly */
		out->cos_drop = 1.0;
		out->js_drop = 0.0;
	} else if (drop) {
		out->cos_drop = dot / sqrt(nx * ny);
		js = -hmc - 0.5 * (rx->Hc + ry->Hc);
		out->js_drop = js > 0 ? js : 0.0;
	} else {
		out->cos_drop = NAN;
		out->js_drop = NAN;
	}
	double db = rx->b - ry->b;
	out->sink2 = db * db;
	out->content2 = c2;
}

void
swm_row_pair(const swm_row *rx, const double *px, const double *lx,
    const swm_row *ry, const double *py, const double *ly, size_t k,
    swm_pair *out)
{
	size_t n = rx->n;
	double a[Q__N][LANES] = { { 0 } };
	int drop = rx->w > 0 && ry->w > 0;
	double ixw = drop ? 1.0 / rx->w : 0.0, iyw = drop ? 1.0 / ry->w : 0.0;
	const struct swm_kernels *kn = swm_kernels_get(swm_isa());

	pair_range(px, py, lx, ly, 0, k, ixw, iyw, kn, a);
	pair_range(px, py, lx, ly, k + 1, n, ixw, iyw, kn, a);
	double mean = lane_sum(a[Q_SD]) / (double)(n - 1);
	double c2 = sq_dev_range(lx, ly, 0, k, mean) + sq_dev_range(lx, ly, k + 1, n, mean);
	pair_finish(rx, ry, px[k], py[k], lane_sum(a[Q_DOT]), lane_sum(a[Q_NX]),
	    lane_sum(a[Q_NY]), lane_sum(a[Q_HM]), lane_sum(a[Q_HMC]), c2, out);
}

void
swm_head_add(swm_head_acc *acc, const swm_row *r)
{
	if (r->status != SWM_OK) {
		if ((unsigned)r->status < SWM_STATUS__N)
			acc->rejected[r->status]++;
		return;
	}
	acc->rows++;
	acc->s += r->s;
	acc->w += r->w;
	acc->H += r->H;
	acc->hb += r->hb;
	acc->Hc += r->Hc;
	acc->C += r->C;
	acc->b += r->b;
}

void
swm_head_merge(swm_head_acc *a, const swm_head_acc *b)
{
	a->rows += b->rows;
	for (int i = 0; i < SWM_STATUS__N; i++)
		a->rejected[i] += b->rejected[i];
	a->s += b->s;
	a->w += b->w;
	a->H += b->H;
	a->hb += b->hb;
	a->Hc += b->Hc;
	a->C += b->C;
	a->b += b->b;
}

void
swm_head_finish(const swm_head_acc *acc, swm_head *out)
{
	out->rows = acc->rows;
	if (acc->rows == 0) {
		out->s = out->w = out->H = out->hb = out->Hc = out->C = out->b = NAN;
		out->Hcw = NAN;
		return;
	}
	double inv = 1.0 / (double)acc->rows;
	out->s = acc->s * inv;
	out->w = acc->w * inv;
	out->H = acc->H * inv;
	out->hb = acc->hb * inv;
	out->Hc = acc->Hc * inv;
	out->C = acc->C * inv;
	out->b = acc->b * inv;
	out->Hcw = out->w > 0 ? out->C / out->w : 0.0;
}

/*
 * Pair work on prepared rows (swm_block_add): per head and row, with the
 * sink entry and the padding up to a multiple of 8 set to 0,
 *     a_i = p_i / 2,  c_i = a_i / w,  l_i = the centred content clr (§4),
 * so that one pass over two heads' arrays gives every pair sum, with one
 * logarithm per mixture element and none per head.
 */
struct prep {
	double *a, *c, *l;	/* [keys8] each */
	double pk;		/* the sink entry p_k */
	double nx;		/* sum of p_i^2 over the content */
	int raw;		/* a and l hold the row kernel's values and logs */
};

#define KEYS8(k) (((k) + 7) & ~(size_t)7)

static size_t
rows_bytes(size_t heads)
{
	return (heads * (sizeof(swm_row) + sizeof(struct prep)) + 63) & ~(size_t)63;
}

/* Scratch: rows[heads] and prep[heads], then a, c and l: [heads][keys8]. */
size_t
swm_block_scratch(size_t heads, size_t keys)
{
	return rows_bytes(heads) + 3 * heads * KEYS8(keys) * sizeof(double);
}

/* The generic pair sums of two prepared rows (n a multiple of 8). */
static void
pair_generic(const double *ax, const double *cx, const double *lx,
    const double *ay, const double *cy, const double *ly, size_t n, double out[4])
{
	double s[4][LANES] = { { 0 } };
	for (size_t i = 0; i < n; i += LANES)
		for (int j = 0; j < LANES; j++) {
			double a = ax[i + j], b = ay[i + j], m = a + b;
			double mc = cx[i + j] + cy[i + j], d = lx[i + j] - ly[i + j];
			s[0][j] += m > 0 ? m * swm_ln(m) : 0.0;
			s[1][j] += mc > 0 ? mc * swm_ln(mc) : 0.0;
			s[2][j] += a * b;
			s[3][j] += d * d;
		}
	for (int q = 0; q < 4; q++)
		out[q] = lane_sum(s[q]);
}

/* Turns p and l of an accepted row (swm_row_expand) into its prep. */
static void
prep_row(const struct swm_kernels *kn, struct prep *pp, const swm_row *r, size_t k,
    size_t keys8)
{
	size_t n = r->n;
	double *a = pp->a, *c = pp->c, *l = pp->l;
	double iw = r->w > 0 ? 1.0 / r->w : 0.0;

	if (kn && kn->prep) {
		pp->pk = kn->prep(a, c, l, n, k, keys8, iw, &pp->nx);
		return;
	}
	double nx[LANES] = { 0 }, sl[LANES] = { 0 };
	pp->pk = a[k];
	a[k] = 0;
	l[k] = 0;
	for (size_t i = n; i < keys8; i++)
		a[i] = l[i] = 0;
	for (size_t i = 0; i < keys8; i += LANES)
		for (int j = 0; j < LANES; j++) {
			nx[j] += a[i + j] * a[i + j];
			sl[j] += l[i + j];
		}
	double mean = lane_sum(sl) / (double)(n - 1);
	for (size_t i = 0; i < keys8; i++) {
		c[i] = 0.5 * a[i] * iw;
		a[i] *= 0.5;
		l[i] = i < n && i != k ? l[i] - mean : 0.0;
	}
	pp->nx = lane_sum(nx);
}

/*
 * Whether the JS values of a row pair taken with single-precision logs may
 * miss the precision budget (METRICS.md §6: 1e-7 relative, 1e-10 absolute).
 * Only H(m) of the mixture carries that rounding (the rows' own entropies
 * are the row kernel's, double logs): rms below 2e-9 per element (1.9e-9
 * against long double over random doubles, row_simd.c ef4(); checked by
 * tests/unit/test_metrics.c, test_pair_log_error), a JS error of standard
 * deviation about rms sqrt(sum m^2) <= rms sqrt((nx + ny) / 2), and a mean
 * of -1e-11 per unit of mass. Where 8 times rms sqrt(nx + ny) exceeds the
 * budget, as for near-equal rows, the pair is taken again with double
 * logs.
 */
static int
f32_noisy(const swm_pair *v, const swm_row *rx, const swm_row *ry, double nxx,
    double nxy)
{
	const double rms = 2e-9, k = 8;
	double sd = k * rms * sqrt(nxx + nxy);
	if (sd > fmax(1e-7 * v->js_keep, 1e-10))
		return 1;
	if (v->cos_drop == v->cos_drop && rx->n > 2) {
		sd = k * rms * sqrt(nxx / (rx->w * rx->w) + nxy / (ry->w * ry->w));
		if (sd > fmax(1e-7 * v->js_drop, 1e-10))
			return 1;
	}
	return 0;
}

static void
pairs_of_row(const struct swm_kernels *kn, const swm_row *st, const struct prep *pp,
    size_t H, swm_pair_acc *pairs)
{
	int f32 = kn && kn->pair && kn->prep && kn->pair_f64 && kn->pair_logs &&
	    strcmp(kn->pair_logs, "f32") == 0;
	for (size_t i = 0; i < H; i++) {
		if (st[i].status != SWM_OK)
			continue;
		const struct prep *x = &pp[i];
		size_t n8 = KEYS8(st[i].n);
		for (size_t j = i + 1; j < H; j++) {
			if (st[j].status != SWM_OK)
				continue;
			const struct prep *y = &pp[j];
			double s[4];
			swm_pair v;
			if (kn && kn->pair)
				kn->pair(x->a, x->c, x->l, y->a, y->c, y->l, n8, s);
			else
				pair_generic(x->a, x->c, x->l, y->a, y->c, y->l, n8, s);
			/*
			 * a = p / 2: the sums of m ln m are over (p + q) / 2 already.
			 * The rows' own entropies are the row kernel's (double
			 * logarithms) whatever the pair kernel's precision: only
			 * H(m) carries the rounding of single-precision logs.
			 */
			pair_finish(&st[i], &st[j], x->pk, y->pk, 4 * s[2], x->nx, y->nx,
			    s[0], s[1], s[3], &v);
			if (f32 && f32_noisy(&v, &st[i], &st[j], x->nx, y->nx)) {
				kn->pair_f64(x->a, x->c, x->l, y->a, y->c, y->l, n8, s);
				pair_finish(&st[i], &st[j], x->pk, y->pk, 4 * s[2], x->nx, y->nx,
				    s[0], s[1], s[3], &v);
			}
			swm_pair_acc *a = &pairs[i * H + j];
			a->rows++;
			a->cos_keep += v.cos_keep;
			a->js_keep += v.js_keep;
			a->sink2 += v.sink2;
			a->content2 += v.content2;
			if (v.cos_drop == v.cos_drop) {
				a->rows_drop++;
				a->cos_drop += v.cos_drop;
				a->js_drop += v.js_drop;
			}
		}
	}
}

void
swm_block_add(const swm_block *blk, const swm_opts *o, void *scratch,
    swm_head_acc *acc, swm_pair_acc *pairs)
{
	size_t H = blk->heads, K = blk->keys, K8 = KEYS8(K);
	swm_row *st = scratch;
	struct prep *pp = (struct prep *)(st + H);
	double *buf = (double *)((char *)scratch + rows_bytes(H));

	const struct swm_kernels *kn = swm_kernels_get(swm_isa());
	for (size_t h = 0; h < H; h++) {
		pp[h].a = buf + (3 * h) * K8;
		pp[h].c = buf + (3 * h + 1) * K8;
		pp[h].l = buf + (3 * h + 2) * K8;
	}

	/* the pick lists are ascending: one cursor each, moved along with r */
	size_t ip = 0, il = 0;
	for (size_t r = 0; r < blk->rows; r++) {
		size_t n = blk->nvalid ? blk->nvalid[r] : K;
		while (ip < blk->npair && blk->pair_pick[ip] < r)
			ip++;
		while (il < blk->nln && blk->ln_pick[il] < r)
			il++;
		int want_pairs = pairs && ip < blk->npair && blk->pair_pick[ip] == r;
		int want_ln = blk->ln_out && il < blk->nln && blk->ln_pick[il] == r;
		if (n > K)
			n = K;
		for (size_t h = 0; h < H; h++) {
			const char *row = swm_block_row(blk, h, r);
			pp[h].raw = 0;
			if (want_pairs || want_ln)
				swm_row_stats_keep(row, blk->dtype, blk->kind, n, blk->sink, o, &st[h],
				    kn->prep_raw ? pp[h].a : NULL, pp[h].l, &pp[h].raw);
			else
				swm_row_stats(row, blk->dtype, blk->kind, n, blk->sink, o, &st[h]);
			swm_head_add(&acc[h], &st[h]);
			if (blk->rows_out)
				blk->rows_out[h * blk->rows + r] = st[h];
		}
		if (!want_pairs && !want_ln)
			continue;
		/* the pair work of the row, every head's rows already read: one span */
		int64_t t0 = blk->clock_ns ? blk->clock_ns() : 0;
		for (size_t h = 0; h < H; h++) {
			const char *row = swm_block_row(blk, h, r);
			float *dst = want_ln ? blk->ln_out + (h * blk->nln + il) * K : NULL;
			if (pp[h].raw) {
				/* one pass per head: the values and logs the row kernel kept */
				const swm_row *w = &st[h];
				struct swm_fix fx = { 1.0 / w->norm, w->thr, w->lnscale, w->lndelta,
				    w->w > 0 ? 1.0 / w->w : 0.0 };
				pp[h].pk = kn->prep_raw(pp[h].a, pp[h].c, pp[h].l, n, blk->sink, K8, &fx,
				    &pp[h].nx, dst);
			} else if (st[h].status == SWM_OK) {
				swm_row_expand(row, blk->dtype, blk->kind, &st[h], pp[h].a, pp[h].l);
				for (size_t i = 0; dst && i < n; i++)
					dst[i] = (float)pp[h].l[i];
				if (want_pairs)
					prep_row(kn, &pp[h], &st[h], blk->sink, K8);
			}
		}
		if (want_pairs)
			pairs_of_row(kn, st, pp, H, pairs);
		if (blk->clock_ns && blk->pair_ns)
			*blk->pair_ns += blk->clock_ns() - t0;
	}
}

static double
mean_or_nan(double sum, uint64_t n)
{
	return n ? sum / (double)n : NAN;
}

void
swm_pairs_finish(const swm_pair_acc *pairs, const uint64_t *head_rows,
    size_t heads, swm_pair_matrices *out)
{
	size_t H = heads;
	for (size_t i = 0; i < H; i++) {
		size_t d = i * H + i;
		int has = head_rows[i] > 0;
		out->cos_keep[d] = out->cos_drop[d] = has ? 1.0 : NAN;
		out->js_keep[d] = out->js_drop[d] = has ? 0.0 : NAN;
		out->pair_sink[d] = out->pair_content[d] = has ? 0.0 : NAN;
		out->rows[d] = head_rows[i];
		for (size_t j = i + 1; j < H; j++) {
			const swm_pair_acc *a = &pairs[i * H + j];
			size_t u = i * H + j, v = j * H + i;
			out->cos_keep[u] = out->cos_keep[v] = mean_or_nan(a->cos_keep, a->rows);
			out->cos_drop[u] = out->cos_drop[v] = mean_or_nan(a->cos_drop, a->rows_drop);
			out->js_keep[u] = out->js_keep[v] = mean_or_nan(a->js_keep, a->rows);
			out->js_drop[u] = out->js_drop[v] = mean_or_nan(a->js_drop, a->rows_drop);
			out->pair_sink[u] = out->pair_sink[v] = sqrt(mean_or_nan(a->sink2, a->rows));
			out->pair_content[u] = out->pair_content[v] =
			    sqrt(mean_or_nan(a->content2, a->rows));
			out->rows[u] = out->rows[v] = a->rows;
		}
	}
}

static int
sgn(double x)
{
	return (x > 0) - (x < 0);
}

double
swm_flip_rate(const double *keep, const double *drop, size_t heads,
    uint64_t *comparisons)
{
	uint64_t comps = 0, flips = 0;
	size_t H = heads;

	for (size_t i = 0; i < H; i++)
		for (size_t j = 0; j < H; j++) {
			if (j == i)
				continue;
			for (size_t l = j + 1; l < H; l++) {
				if (l == i)
					continue;
				double a = keep[i * H + j], b = keep[i * H + l];
				double c = drop[i * H + j], d = drop[i * H + l];
				if (isnan(a) || isnan(b) || isnan(c) || isnan(d))
					continue;
				comps++;
				int sk = sgn(a - b), sd = sgn(c - d);
				flips += sk != 0 && sd != 0 && sk != sd;
			}
		}
	if (comparisons)
		*comparisons = comps;
	return comps ? (double)flips / (double)comps : NAN;
}

double
swm_flip_rate_entropy(const double *Hkeep, const double *Hdrop, size_t heads,
    double *scratch, uint64_t *comparisons)
{
	double *dk = scratch, *dd = scratch + heads * heads;
	for (size_t i = 0; i < heads; i++)
		for (size_t j = 0; j < heads; j++) {
			dk[i * heads + j] = fabs(Hkeep[i] - Hkeep[j]);
			dd[i * heads + j] = fabs(Hdrop[i] - Hdrop[j]);
		}
	return swm_flip_rate(dk, dd, heads, comparisons);
}

size_t
swm_layer_scratch(size_t heads)
{
	/* head rows, the pair row counts when the caller has none, entropies */
	return heads * sizeof(uint64_t) + heads * heads * sizeof(uint64_t) +
	    (2 * heads * heads + 2 * heads) * sizeof(double);
}

void
swm_layer_finish(const swm_head_acc *acc, const swm_pair_acc *pairs, size_t heads,
    void *scratch, swm_layer_values *out)
{
	size_t H = heads;
	double *ent = scratch, *Hk = ent + 2 * H * H, *Hd = Hk + H;
	uint64_t *hrows = (uint64_t *)(Hd + H), *prows = hrows + H;

	for (size_t h = 0; h < H; h++) {
		swm_head_finish(&acc[h], &out->head[h]);
		hrows[h] = out->head[h].rows;
		Hk[h] = out->head[h].H;
		Hd[h] = out->head[h].Hc;
	}
	swm_pair_matrices pm = out->pm;
	if (!pm.rows)
		pm.rows = prows;
	if (pairs) {
		swm_pairs_finish(pairs, hrows, H, &pm);
		out->flip[0] = swm_flip_rate(pm.cos_keep, pm.cos_drop, H, &out->comps[0]);
		out->flip[1] = swm_flip_rate(pm.js_keep, pm.js_drop, H, &out->comps[1]);
	} else {
		double *m[6] = { pm.cos_keep, pm.cos_drop, pm.js_keep, pm.js_drop,
		    pm.pair_sink, pm.pair_content };
		for (int f = 0; f < 6; f++)
			for (size_t i = 0; i < H * H; i++)
				m[f][i] = NAN;
		for (size_t i = 0; i < H * H; i++)
			pm.rows[i] = 0;
		out->flip[0] = out->flip[1] = NAN;
		out->comps[0] = out->comps[1] = 0;
	}
	out->flip[2] = swm_flip_rate_entropy(Hk, Hd, H, ent, &out->comps[2]);
}
