/*
 * demo.c: `sinkwatch demo`, a synthetic attention tensor written to HDF5
 * and analyzed, so a fresh build shows what the tool does.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/tensor.h"
#include "tools/analyze.h"

/* splitmix64: a fixed, portable stream so the demo is the same everywhere. */
static double
uniform(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1p-53;
}

/*
 * Layers x heads of causal softmax rows: head h of layer l puts a sink logit
 * of strength 1 + 1.5 h + 2 l on key 0 and spreads the rest with a recency
 * bias whose sharpness grows with h, so the heads differ in both channels.
 */
static void
make_demo(float *x, size_t L, size_t H, size_t Q, size_t K)
{
	uint64_t st = 42;
	double z[4096];
	for (size_t l = 0; l < L; l++)
		for (size_t h = 0; h < H; h++)
			for (size_t q = 0; q < Q; q++) {
				float *row = x + ((l * H + h) * Q + q) * K;
				size_t n = q + K - Q + 1;
				double mx = -INFINITY, sum = 0;
				for (size_t i = 0; i < n; i++) {
					double recency = -(double)(n - 1 - i) * 0.15 * (double)(h + 1);
					z[i] = recency + 0.8 * (uniform(&st) - 0.5);
					if (i == 0)
						z[i] = 1.0 + 1.5 * (double)h + 2.0 * (double)l;
					mx = z[i] > mx ? z[i] : mx;
				}
				for (size_t i = 0; i < n; i++)
					sum += exp(z[i] - mx);
				for (size_t i = 0; i < K; i++)
					row[i] = i < n ? (float)(exp(z[i] - mx) / sum) : 0.0f;
			}
}

int
sw_demo_main(int argc, char **argv)
{
	const char *out = "sinkwatch-demo.h5", *format = "text";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--format") && i + 1 < argc)
			format = argv[++i];
		else {
			fprintf(stderr, "usage: sinkwatch demo [--out FILE.h5] [--format json|csv|text]\n");
			return 2;
		}
	}
	enum { L = 2, H = 4, Q = 32, K = 32 };
	float *x = malloc((size_t)L * H * Q * K * sizeof(float));
	char err[512];
	if (!x) {
		fprintf(stderr, "sinkwatch demo: out of memory\n");
		return 2;
	}
	make_demo(x, L, H, Q, K);
	uint64_t dims[4] = { L, H, Q, K };
	int rc = sw_tensor_write_f32(out, "/attention", 4, dims, x, err, sizeof(err));
	free(x);
	if (rc) {
		fprintf(stderr, "sinkwatch demo: %s\n", err);
		return 2;
	}
	fprintf(stderr, "sinkwatch demo: wrote %s:/attention [%d, %d, %d, %d] float32, causal\n",
	    out, L, H, Q, K);
	size_t tlen = strlen(out) + sizeof(":/attention");
	char *target = malloc(tlen);
	if (!target)
		return 2;
	snprintf(target, tlen, "%s:/attention", out);
	char *av[] = { "analyze", target, "--causal", "--format", (char *)format, NULL };
	rc = sw_analyze_main(5, av);
	free(target);
	return rc;
}
