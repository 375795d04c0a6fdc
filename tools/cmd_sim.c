/*
 * cmd_sim.c: `sinkwatch sim`, a synthetic run with a fixed probe streamed through
 * the client library. In `sink` mode only the sink logits move (the content
 * distributions stay fixed), so the whole entropy change is the sink's; in
 * `content` mode each row's sink mass is held while its content sharpens, so
 * none of it is; `mixed` does both. With --sink-share X the run is made so
 * that the paired split (METRICS.md §3) of every row over every interval has
 * its sink and content parts in the ratio X : (1 - X), so the share is X at
 * every level (row, head, layer, model, any range of steps); see share_move.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sinkwatch/client.h"
#include "tools/analyze.h"
#include "tools/tools.h"

struct simopts {
	const char *endpoint, *run, *model;
	int mode;	/* 0 sink, 1 content, 2 mixed */
	long steps, layers, heads, rows, keys, stride, every_ms, seed, first;
	int dtype, kind, blocking, mode_given;
	double share;		/* --sink-share X in [0, 1], or -1 */
	uint64_t params;	/* --params N; 0: 1e6 * layers * heads */
};

static uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A fixed standard normal for (seed, a, b, c, d): the probe never changes. */
static double
fixed_normal(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	uint64_t z = mix(seed ^ mix(a + 0x9e3779b97f4a7c15ull * (b + 1)) ^
	    mix(c * 0x632be59bd9b4e019ull + d + 7));
	double u1 = ((double)(mix(z) >> 11) + 0.5) * 0x1p-53;
	double u2 = ((double)(mix(z + 1) >> 11) + 0.5) * 0x1p-53;
	return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t
to_half(double v, int bf)
{
	float f = (float)v;
	uint32_t u;
	memcpy(&u, &f, 4);
	if (bf) {
		if ((u & 0x7fffffff) > 0x7f800000)
			return 0x7fc0;
		return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
	}
	/* float to binary16, round to nearest even, with subnormals */
	uint32_t sign = (u >> 16) & 0x8000;
	int e = (int)((u >> 23) & 0xff) - 127 + 15;
	uint32_t m = u & 0x7fffff;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign;
		m |= 0x800000;
		int shift = 14 - e;
		uint32_t half = m >> shift, rest = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
		if (rest > mid || (rest == mid && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	uint32_t half = ((uint32_t)e << 10) | (m >> 13), rest = m & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
		half++;
	return (uint16_t)(sign | half);
}

static void
store(void *buf, int dtype, size_t i, double v)
{
	switch (dtype) {
	case SW_DTYPE_F64: ((double *)buf)[i] = v; break;
	case SW_DTYPE_F16: ((uint16_t *)buf)[i] = to_half(v, 0); break;
	case SW_DTYPE_BF16: ((uint16_t *)buf)[i] = to_half(v, 1); break;
	default: ((float *)buf)[i] = (float)v; break;
	}
}

/* Fills one layer's tensor at progress u in [0, 1]. */
static void
make_layer(const struct simopts *o, long layer, double u, void *buf, double *z)
{
	size_t H = (size_t)o->heads, R = (size_t)o->rows, K = (size_t)o->keys;
	double sink_grow = o->mode != 1 ? 4.0 * u : 0.0;
	double beta = o->mode != 0 ? 1.0 + 2.0 * u : 1.0;	/* content sharpness */
	for (size_t h = 0; h < H; h++)
		for (size_t r = 0; r < R; r++) {
			size_t n = K - R + r + 1;	/* causal: qpos = K - R + r */
			size_t base = (h * R + r) * K;
			double mx = -INFINITY, lse = 0, lse0 = 0, mx0 = -INFINITY;
			for (size_t i = 1; i < n; i++) {
				double c0 = fixed_normal((uint64_t)o->seed, (uint64_t)layer, h, r, i);
				z[i] = beta * c0;
				mx = z[i] > mx ? z[i] : mx;
				mx0 = c0 > mx0 ? c0 : mx0;
			}
			for (size_t i = 1; i < n; i++) {
				lse += exp(z[i] - mx);
				lse0 += exp(z[i] / beta - mx0);
			}
			lse = mx + log(lse);
			lse0 = mx0 + log(lse0);
			double b0 = 0.5 + 0.75 * (double)h + 0.5 * (double)layer -
			    0.3 * fixed_normal((uint64_t)o->seed, (uint64_t)layer, h, r, 0);
			/* sink logit: grows in sink and mixed mode; in content mode it
			 * follows the content so that the sink mass stays s0 */
			double zk = o->mode == 1 ? b0 - lse0 + lse : b0 + sink_grow;
			if (o->kind == SW_KIND_LOGITS) {
				store(buf, o->dtype, base, zk);
				for (size_t i = 1; i < K; i++)
					store(buf, o->dtype, base + i, i < n ? z[i] : -INFINITY);
				continue;
			}
			/* probabilities composed as (s, (1 - s) c) in double */
			double s = 1.0 / (1.0 + exp(-(zk - lse)));
			if (o->mode == 1)
				s = 1.0 / (1.0 + exp(-(b0 - lse0)));
			store(buf, o->dtype, base, s);
			for (size_t i = 1; i < K; i++)
				store(buf, o->dtype, base + i, i < n ? (1 - s) * exp(z[i] - lse) : 0.0);
		}
}

/* ---- --sink-share: a run whose paired split has a given sink share ------------- */

/*
 * One probe row of the share generator: its sink mass s, the sharpness beta
 * of its content logits (content logit i is beta * z_i, z_i a fixed normal)
 * and the content entropy Hc that gives.
 */
struct srow {
	double s, beta, Hc;
};

struct share_gen {
	struct srow *row;	/* [layers * heads * rows] */
	double sink, content, dH;	/* the paired parts, summed over every row interval */
	long moved, held;	/* row intervals that moved, that were held still */
};

/*
 * Entropy of the content distribution p_i ∝ exp(beta z_i), 1 <= i < n,
 * as lse - beta E_p[z]; its ln normaliser in *lse and Var_p(z) in *var
 * (dHc/dbeta = -beta Var_p(z)).
 */
static double
content_entropy(const double *z, size_t n, double beta, double *lse, double *var)
{
	double mx = -INFINITY, S = 0, S1 = 0, S2 = 0;
	for (size_t i = 1; i < n; i++)
		mx = beta * z[i] > mx ? beta * z[i] : mx;
	for (size_t i = 1; i < n; i++)
		S += exp(beta * z[i] - mx);
	for (size_t i = 1; i < n; i++)
		S1 += exp(beta * z[i] - mx) / S * z[i];
	for (size_t i = 1; i < n; i++) {
		double d = z[i] - S1;
		S2 += exp(beta * z[i] - mx) / S * d * d;
	}
	*lse = mx + log(S);
	*var = S2;
	return *lse - beta * S1;
}

/*
 * The beta >= b0 whose content entropy is y (y <= Hc(b0)): Newton's method
 * kept inside a bisection bracket. -1 when y is out of reach (beta > 1e4).
 */
static double
solve_beta(const double *z, size_t n, double b0, double y)
{
	double lse, var, lo = b0, hi = b0 > 0.5 ? 2 * b0 : 1;
	while (content_entropy(z, n, hi, &lse, &var) > y) {
		lo = hi;
		hi *= 2;
		if (hi > 1e4)
			return -1;
	}
	double b = 0.5 * (lo + hi);
	for (int it = 0; it < 200; it++) {
		double f = content_entropy(z, n, b, &lse, &var) - y;
		if (fabs(f) <= 1e-14 * (1 + fabs(y)) || hi - lo <= 1e-15 * hi)
			break;
		if (f > 0)
			lo = b;
		else
			hi = b;
		double nb = var > 0 ? b + f / (b * var) : NAN;
		b = nb > lo && nb < hi ? nb : 0.5 * (lo + hi);
	}
	return b;
}

static double
bin_entropy(double s)
{
	double w = 1 - s;
	return (s > 0 ? -s * log(s) : 0) + (w > 0 ? -w * log(w) : 0);
}

/*
 * Moves row r from progress u0 to u1 (METRICS.md §3, paired form, one row).
 * The sink mass follows its plan s(u) = s0 + (s_end - s0) u, s_end = s0 +
 * X (1 - s0) / 2; then the content entropy of the next step, y, is the one
 * that makes content part = c * sink part with c = (1 - X) / X:
 *
 *     wm (y - Hc) = c (dhb - ds (Hc + y) / 2)
 *  => y = (wm Hc + c (dhb - ds Hc / 2)) / (wm + c ds / 2)
 *
 * with ds = s1 - s, dhb = hb(s1) - hb(s), wm = 1 - (s + s1) / 2; and beta
 * is solved for y. Linear in y, so exact: each interval of each row has its
 * parts in the ratio X : (1 - X), whatever the shape, and so has any sum of
 * them. X = 1 leaves the content as it is (y = Hc); X = 0 holds the sink
 * mass (dhb = ds = 0, no sink part) while beta goes 1 -> 3. A row that
 * cannot move that way (its sink part would not be a drop, y out of reach,
 * fewer than two content keys) is held still for the interval: both parts
 * 0, the ratio kept. The parts, from the values sent, are summed in g.
 */
static void
share_move(struct share_gen *g, struct srow *r, const double *z, size_t n, double s0,
    double X, double u1)
{
	double lse, var, s1 = r->s, beta1 = r->beta, Hc1 = r->Hc;
	if (X <= 0) {
		beta1 = 1.0 + 2.0 * u1;
		Hc1 = content_entropy(z, n, beta1, &lse, &var);
	} else {
		s1 = s0 + 0.5 * X * (1 - s0) * u1;
		double ds = s1 - r->s, dhb = bin_entropy(s1) - bin_entropy(r->s);
		double wm = 1 - 0.5 * (r->s + s1);
		if (X < 1) {
			double c = (1 - X) / X;
			double y = (wm * r->Hc + c * (dhb - 0.5 * ds * r->Hc)) / (wm + 0.5 * c * ds);
			beta1 = n > 2 && y > 0 && y < r->Hc ? solve_beta(z, n, r->beta, y) : -1;
			if (beta1 > 0)
				Hc1 = content_entropy(z, n, beta1, &lse, &var);
		}
	}
	double sink = (bin_entropy(s1) - bin_entropy(r->s)) - (s1 - r->s) * 0.5 * (r->Hc + Hc1);
	double content = (1 - 0.5 * (r->s + s1)) * (Hc1 - r->Hc);
	if (n <= 2 || beta1 <= 0 || sink > 0 || content > 0 || (sink == 0 && content == 0)) {
		g->held++;
		return;
	}
	g->sink += sink;
	g->content += content;
	g->dH += sink + content;
	g->moved++;
	r->s = s1;
	r->beta = beta1;
	r->Hc = Hc1;
}

/* Valid keys of probe row r (causal: qpos = keys - rows + r). */
static size_t
row_keys(const struct simopts *o, size_t r)
{
	return (size_t)(o->keys - o->rows) + r + 1;
}

/* The content logits z_i (i >= 1) of row (layer, h, r) at beta = 1. */
static void
share_logits(const struct simopts *o, long layer, size_t h, size_t r, double *z)
{
	size_t n = row_keys(o, r);
	for (size_t i = 1; i < n; i++)
		z[i] = fixed_normal((uint64_t)o->seed, (uint64_t)layer, h, r, i);
}

/* The row's first sink mass, in about [0.08, 0.7], spread over heads and layers. */
static double
share_s0(const struct simopts *o, long layer, size_t h, size_t r)
{
	double f = fmod(((double)layer * (double)o->heads + (double)h) * 0.6180339887498949, 1.0);
	double a0 = -1.5 + 1.5 * f - 0.3 * fixed_normal((uint64_t)o->seed, (uint64_t)layer, h, r, 0);
	return 1.0 / (1.0 + exp(-a0));
}

/*
 * Steps layer `layer` of the generator to progress u (the first step, t = 0,
 * sets the rows up) and, if buf is not NULL, fills the layer's tensor.
 */
static void
share_layer(const struct simopts *o, struct share_gen *g, long layer, long t, double u,
    void *buf, double *z)
{
	size_t H = (size_t)o->heads, R = (size_t)o->rows, K = (size_t)o->keys;
	for (size_t h = 0; h < H; h++)
		for (size_t r = 0; r < R; r++) {
			struct srow *sr = &g->row[((size_t)layer * H + h) * R + r];
			size_t n = row_keys(o, r), base = (h * R + r) * K;
			double s0 = share_s0(o, layer, h, r), lse, var;
			share_logits(o, layer, h, r, z);
			if (t == 0) {
				sr->s = s0;
				sr->beta = 1;
				sr->Hc = content_entropy(z, n, 1, &lse, &var);
			} else
				share_move(g, sr, z, n, s0, o->share, u);
			if (!buf)
				continue;
			content_entropy(z, n, sr->beta, &lse, &var);
			if (o->kind == SW_KIND_LOGITS) {
				/* the sink logit that gives mass s against these content logits */
				store(buf, o->dtype, base, log(sr->s) - log1p(-sr->s) + lse);
				for (size_t i = 1; i < K; i++)
					store(buf, o->dtype, base + i, i < n ? sr->beta * z[i] : -INFINITY);
				continue;
			}
			store(buf, o->dtype, base, sr->s);
			for (size_t i = 1; i < K; i++)
				store(buf, o->dtype, base + i,
				    i < n ? (1 - sr->s) * exp(sr->beta * z[i] - lse) : 0.0);
		}
}

/*
 * Runs the generator over every step without sending, to say before
 * streaming what the run will hold: 0, or 2 with a message when no row can
 * move (nothing to split) or the entropy does not drop (no share).
 */
static int
share_dry_run(const struct simopts *o, struct share_gen *g, double *z)
{
	for (long t = 0; t < o->steps; t++) {
		double u = o->steps > 1 ? (double)t / (double)(o->steps - 1) : 0.0;
		for (long l = 0; l < o->layers; l++)
			share_layer(o, g, l, t, u, NULL, z);
	}
	if (o->steps < 2)
		return sw_tool_fail("sim", "--sink-share needs two steps or more");
	if (!(g->dH < 0))
		return sw_tool_fail("sim", "--sink-share: no probe row can move this way (%ld "
		    "row intervals held; more keys?)", g->held);
	return 0;
}

/* A parameter count: digits, or a whole number in floating notation (7e7, 1.4e9). */
static int
parse_params(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (!errno && end != v && !*end && v[0] != '-' && n > 0) {
		*out = n;
		return 0;
	}
	double d;
	if (sw_parse_double(v, &d) || !(d >= 1 && d <= 0x1p53) || d != floor(d))
		return -1;
	*out = (uint64_t)d;
	return 0;
}

static int
parse(int argc, char **argv, struct simopts *o)
{
	memset(o, 0, sizeof(*o));
	o->endpoint = NULL;	/* the client's: SINKWATCH_ENDPOINT, else its default */
	o->run = NULL;
	o->model = "sinkwatch-sim";
	o->steps = 20;
	o->layers = 2;
	o->heads = 4;
	o->rows = 8;
	o->keys = 64;
	o->stride = 1;
	o->seed = 1;
	o->mode = 2;
	o->dtype = SW_DTYPE_F32;
	o->kind = SW_KIND_PROBS;
	o->share = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long *num = NULL;
		if (!strcmp(a, "--blocking")) {
			o->blocking = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: sinkwatch sim --run ID [--endpoint ENDPOINT] [--mode sink|content|mixed]\n"
			    "        [--sink-share X] [--params N] (--connect: --endpoint's old name)\n"
			    "        [--steps N] [--layers L] [--heads H] [--rows R] [--keys K]\n"
			    "        [--dtype f32|f16|bf16|f64] [--kind probs|logits] [--step-stride S]\n"
			    "        [--every-ms MS] [--seed S] [--model NAME] [--first-step N] [--blocking]\n");
			exit(0);
		}
		if (!v)
			return sw_tool_fail("sim", "%s needs a value (or is unknown)", a);
		i++;
		if (!strcmp(a, "--endpoint") || !strcmp(a, "--connect")) o->endpoint = v;
		else if (!strcmp(a, "--run")) o->run = v;
		else if (!strcmp(a, "--model")) o->model = v;
		else if (!strcmp(a, "--sink-share")) {
			if (sw_parse_double(v, &o->share) || !(o->share >= 0 && o->share <= 1))
				return sw_tool_fail("sim", "--sink-share: '%s' is not a number in [0, 1]", v);
		} else if (!strcmp(a, "--params")) {
			if (parse_params(v, &o->params))
				return sw_tool_fail("sim", "--params: '%s' is not a positive integer "
				    "(digits, or a number like 1.4e9 that is a whole number)", v);
		} else if (!strcmp(a, "--mode")) {
			o->mode_given = 1;
			if (!strcmp(v, "sink")) o->mode = 0;
			else if (!strcmp(v, "content")) o->mode = 1;
			else if (!strcmp(v, "mixed")) o->mode = 2;
			else return sw_tool_fail("sim", "--mode: '%s' is not sink, content or mixed", v);
		} else if (!strcmp(a, "--dtype")) {
			if (!strcmp(v, "f32")) o->dtype = SW_DTYPE_F32;
			else if (!strcmp(v, "f16")) o->dtype = SW_DTYPE_F16;
			else if (!strcmp(v, "bf16")) o->dtype = SW_DTYPE_BF16;
			else if (!strcmp(v, "f64")) o->dtype = SW_DTYPE_F64;
			else return sw_tool_fail("sim", "--dtype: '%s' is not f32, f16, bf16 or f64", v);
		} else if (!strcmp(a, "--kind")) {
			if (!strcmp(v, "probs")) o->kind = SW_KIND_PROBS;
			else if (!strcmp(v, "logits")) o->kind = SW_KIND_LOGITS;
			else return sw_tool_fail("sim", "--kind: '%s' is not probs or logits", v);
		}
		else if (!strcmp(a, "--steps")) num = &o->steps;
		else if (!strcmp(a, "--layers")) num = &o->layers;
		else if (!strcmp(a, "--heads")) num = &o->heads;
		else if (!strcmp(a, "--rows")) num = &o->rows;
		else if (!strcmp(a, "--keys")) num = &o->keys;
		else if (!strcmp(a, "--step-stride")) num = &o->stride;
		else if (!strcmp(a, "--every-ms")) num = &o->every_ms;
		else if (!strcmp(a, "--seed")) num = &o->seed;
		else if (!strcmp(a, "--first-step")) num = &o->first;
		else return sw_tool_fail("sim", "unknown option '%s'", a);
		if (num && (sw_parse_long(v, num) || *num < 0))
			return sw_tool_fail("sim", "%s: '%s' is not a non-negative integer", a, v);
	}
	if (!o->run)
		return sw_tool_fail("sim", "--run ID is required");
	if (o->share >= 0 && o->mode_given)
		return sw_tool_fail("sim", "--sink-share and --mode exclude each other "
		    "(--sink-share says what moves)");
	if (o->steps < 1 || o->layers < 1 || o->heads < 1 || o->rows < 1 || o->keys < 2 ||
	    o->rows > o->keys || o->stride < 1)
		return sw_tool_fail("sim", "need steps, layers, heads, rows >= 1, keys >= 2, "
		    "rows <= keys, step-stride >= 1");
	if (o->keys > 1 << 16 || o->heads > 1024 || o->layers > 4096 || o->rows > 4096)
		return sw_tool_fail("sim", "keys, heads, layers or rows too large for a simulation");
	return 0;
}

/* Sends every step of the run; the number of sends that failed. */
static long
stream(sw_client *c, const struct simopts *o, struct share_gen *g, void *buf, size_t bytes,
    double *z, const uint32_t *qpos)
{
	long failed = 0;
	for (long t = 0; t < o->steps; t++) {
		double u = o->steps > 1 ? (double)t / (double)(o->steps - 1) : 0.0;
		for (long l = 0; l < o->layers; l++) {
			if (g)
				share_layer(o, g, l, t, u, buf, z);
			else
				make_layer(o, l, u, buf, z);
			sw_snapshot s = { o->first + t * o->stride, (uint32_t)l, o->kind, o->dtype,
			    (uint32_t)o->rows, (uint32_t)o->keys, qpos, buf, bytes };
			int e = sw_client_send(c, &s);
			if (e != 0 && e != SW_EDROPPED) {
				fprintf(stderr, "sinkwatch sim: send failed: %s: %s\n", sw_strerror(e),
				    sw_client_errmsg(c));
				failed++;
			}
		}
		if (o->every_ms > 0) {
			struct timespec ts = { o->every_ms / 1000, (o->every_ms % 1000) * 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	return failed;
}

int
sw_sim_main(int argc, char **argv)
{
	struct simopts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc;
	size_t es = o.dtype == SW_DTYPE_F64 ? 8 : o.dtype == SW_DTYPE_F32 ? 4 : 2;
	size_t bytes = (size_t)o.heads * (size_t)o.rows * (size_t)o.keys * es;
	size_t nrows = (size_t)o.layers * (size_t)o.heads * (size_t)o.rows;
	void *buf = malloc(bytes);
	double *z = malloc((size_t)o.keys * sizeof(double));
	uint32_t *qpos = malloc((size_t)o.rows * sizeof(uint32_t));
	struct share_gen gen = { NULL, 0, 0, 0, 0, 0 }, *g = o.share >= 0 ? &gen : NULL;
	sw_client *c = NULL;
	long failed = 0;
	rc = 2;
	if (!buf || !z || !qpos || (g && !(gen.row = malloc(nrows * sizeof(*gen.row))))) {
		sw_tool_fail("sim", "out of memory");
		goto out;
	}
	for (long r = 0; r < o.rows; r++)
		qpos[r] = (uint32_t)(o.keys - o.rows + r);
	if (g && share_dry_run(&o, g, z) != 0)
		goto out;
	gen.sink = gen.content = gen.dH = 0;	/* the streamed pass sums them again */
	gen.moved = gen.held = 0;
	sw_client_opts co;
	sw_client_opts_init(&co);
	co.endpoint = o.endpoint;
	co.blocking = o.blocking;
	co.block_timeout_ms = o.blocking ? 30000 : -1;
	co.linger_ms = 5000;
	uint64_t params = o.params ? o.params : 1000000ull * (uint64_t)o.layers * (uint64_t)o.heads;
	sw_run_info ri = { o.run, o.model, params, (uint32_t)o.layers, (uint32_t)o.heads, 0, 1 };
	int e;
	if ((e = sw_client_new(&co, &ri, &c)) != 0) {
		sw_tool_fail("sim", "cannot create the client: %s", sw_strerror(e));
		goto out;
	}
	failed = stream(c, &o, g, buf, bytes, z, qpos);
	sw_client_end(c);
	sw_client_flush(c, 5000);
	sw_client_stats st;
	/* the final figures: what the linger left queued counts as dropped */
	sw_client_destroy_stats(&c, &st);
	fprintf(stderr, "sinkwatch sim: run %s: %ld steps x %ld layers, %llu messages sent, "
	    "%llu dropped\n", o.run, o.steps, o.layers, (unsigned long long)st.sent,
	    (unsigned long long)st.dropped);
	if (g)
		fprintf(stderr, "sinkwatch sim: sink share %.6f by construction: paired parts summed "
		    "over every probe row and interval sink %.9g content %.9g dH %.9g nats "
		    "(share %.12f); %ld row intervals moved, %ld held still\n", o.share, gen.sink, gen.content, gen.dH,
		    gen.sink / gen.dH, gen.moved, gen.held);
	if (st.dropped)
		failed++;
	rc = failed ? 1 : 0;
out:
	free(buf);
	free(z);
	free(qpos);
	free(gen.row);
	return rc;
}
