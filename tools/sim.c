/*
 * sim.c: `sinkwatch sim`, a synthetic run with a fixed probe streamed through
 * the client library. In `sink` mode only the sink logits move (the content
 * distributions stay fixed), so the whole entropy change is the sink's; in
 * `content` mode each row's sink mass is held while its content sharpens, so
 * none of it is; `mixed` does both.
 */
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
	int dtype, kind, blocking;
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

static int
parse(int argc, char **argv, struct simopts *o)
{
	memset(o, 0, sizeof(*o));
	o->endpoint = SW_CLIENT_DEFAULT_ENDPOINT;
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
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		long *num = NULL;
		if (!strcmp(a, "--blocking")) {
			o->blocking = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			printf("usage: sinkwatch sim --run ID [--connect ENDPOINT] [--mode sink|content|mixed]\n"
			    "        [--steps N] [--layers L] [--heads H] [--rows R] [--keys K]\n"
			    "        [--dtype f32|f16|bf16|f64] [--kind probs|logits] [--step-stride S]\n"
			    "        [--every-ms MS] [--seed S] [--model NAME] [--first-step N] [--blocking]\n");
			exit(0);
		}
		if (!v)
			return sw_tool_fail("sim", "%s needs a value (or is unknown)", a);
		i++;
		if (!strcmp(a, "--connect")) o->endpoint = v;
		else if (!strcmp(a, "--run")) o->run = v;
		else if (!strcmp(a, "--model")) o->model = v;
		else if (!strcmp(a, "--mode")) {
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
	if (o->steps < 1 || o->layers < 1 || o->heads < 1 || o->rows < 1 || o->keys < 2 ||
	    o->rows > o->keys || o->stride < 1)
		return sw_tool_fail("sim", "need steps, layers, heads, rows >= 1, keys >= 2, "
		    "rows <= keys, step-stride >= 1");
	if (o->keys > 1 << 16 || o->heads > 1024 || o->layers > 4096 || o->rows > 4096)
		return sw_tool_fail("sim", "keys, heads, layers or rows too large for a simulation");
	return 0;
}

int
sw_sim_main(int argc, char **argv)
{
	struct simopts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc;
	sw_client_opts co;
	sw_client_opts_init(&co);
	co.endpoint = o.endpoint;
	co.blocking = o.blocking;
	co.block_timeout_ms = o.blocking ? 30000 : -1;
	co.linger_ms = 5000;
	sw_run_info ri = { o.run, o.model, 1000000ull * (uint64_t)o.layers * (uint64_t)o.heads,
	    (uint32_t)o.layers, (uint32_t)o.heads, 0, 1 };
	sw_client *c;
	if ((rc = sw_client_new(&co, &ri, &c)) != 0)
		return sw_tool_fail("sim", "cannot create the client: %s", sw_strerror(rc));
	size_t es = o.dtype == SW_DTYPE_F64 ? 8 : o.dtype == SW_DTYPE_F32 ? 4 : 2;
	size_t bytes = (size_t)o.heads * (size_t)o.rows * (size_t)o.keys * es;
	void *buf = malloc(bytes);
	double *z = malloc((size_t)o.keys * sizeof(double));
	uint32_t *qpos = malloc((size_t)o.rows * sizeof(uint32_t));
	if (!buf || !z || !qpos) {
		sw_client_destroy(&c);
		free(buf);
		free(z);
		free(qpos);
		return sw_tool_fail("sim", "out of memory");
	}
	for (long r = 0; r < o.rows; r++)
		qpos[r] = (uint32_t)(o.keys - o.rows + r);
	long failed = 0;
	for (long t = 0; t < o.steps; t++) {
		double u = o.steps > 1 ? (double)t / (double)(o.steps - 1) : 0.0;
		for (long l = 0; l < o.layers; l++) {
			make_layer(&o, l, u, buf, z);
			sw_snapshot s = { o.first + t * o.stride, (uint32_t)l, o.kind, o.dtype,
			    (uint32_t)o.rows, (uint32_t)o.keys, qpos, buf, bytes };
			int e = sw_client_send(c, &s);
			if (e != 0 && e != SW_EDROPPED) {
				fprintf(stderr, "sinkwatch sim: send failed: %s: %s\n", sw_strerror(e),
				    sw_client_errmsg(c));
				failed++;
			}
		}
		if (o.every_ms > 0) {
			struct timespec ts = { o.every_ms / 1000, (o.every_ms % 1000) * 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	sw_client_end(c);
	sw_client_flush(c, 5000);
	sw_client_stats st;
	/* the final figures: what the linger left queued counts as dropped */
	sw_client_destroy_stats(&c, &st);
	fprintf(stderr, "sinkwatch sim: run %s: %ld steps x %ld layers, %llu messages sent, "
	    "%llu dropped\n", o.run, o.steps, o.layers, (unsigned long long)st.sent,
	    (unsigned long long)st.dropped);
	if (st.dropped)
		failed++;
	free(buf);
	free(z);
	free(qpos);
	return failed ? 1 : 0;
}
