/*
 * cross.c: the cross-layer pairs (LAYOUT.md xpair_*): JS keep and drop
 * (METRICS.md §5) between every two heads of a model, on the pair rows the
 * layers share, by the same kernel as the pairs within a layer: the heads
 * of all layers are one block of L*H heads.
 */
#include <math.h>
#include <string.h>

#include "swm.h"

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

/* The pieces of the scratch, in order; the last is swm_block_add's. */
struct cross_parts {
	char *buf;
	uint8_t *have;
	swm_head_acc *acc;
	swm_pair_acc *pairs;
	uint64_t *hrows, *prows;
	double *tmp;
	uint32_t *all;
	void *block;
};

static size_t
cross_layout(size_t L, size_t H, size_t nx, size_t K, swm_dtype dt, char *base,
    struct cross_parts *p)
{
	size_t N = L * H, NN = N * N, off = 0;
	size_t sz[9] = {
		N * nx * K * swm_dtype_size(dt), N, N * sizeof(swm_head_acc),
		NN * sizeof(swm_pair_acc), N * sizeof(uint64_t), NN * sizeof(uint64_t),
		4 * NN * sizeof(double), nx * sizeof(uint32_t), swm_block_scratch(N, K)
	};
	void **at[9] = {
		(void **)&p->buf, (void **)&p->have, (void **)&p->acc, (void **)&p->pairs,
		(void **)&p->hrows, (void **)&p->prows, (void **)&p->tmp, (void **)&p->all,
		&p->block
	};
	for (int i = 0; i < 9; i++) {
		if (base)
			*at[i] = base + off;
		off += ALIGN64(sz[i]);
	}
	return off;
}

size_t
swm_cross_scratch(size_t layers, size_t heads, size_t nx, size_t keys, swm_dtype dt)
{
	struct cross_parts p;
	return cross_layout(layers, heads, nx, keys, dt, NULL, &p);
}

/* The first layer with pair rows, whose pick the others must share. */
static const swm_cross_layer *
cross_ref(const swm_cross_layer *ly, size_t L)
{
	for (size_t l = 0; l < L; l++)
		if (ly[l].rows)
			return &ly[l];
	return NULL;
}

static int
cross_same_pick(const swm_cross_layer *a, const swm_cross_layer *ref)
{
	return a->rows && a->nx == ref->nx &&
	    memcmp(a->idx, ref->idx, a->nx * sizeof(uint32_t)) == 0 &&
	    memcmp(a->nvalid, ref->nvalid, a->nx * sizeof(uint32_t)) == 0;
}

size_t
swm_cross_nx(const swm_cross_layer *ly, size_t layers)
{
	const swm_cross_layer *ref = cross_ref(ly, layers);
	return ref ? ref->nx : 0;
}

void
swm_cross_pairs(const swm_cross_layer *ly, size_t L, size_t H, size_t K, swm_dtype dt,
    swm_kind kind, size_t sink, void *scratch, double *keep, double *drop)
{
	size_t N = L * H, NN = N * N;
	const swm_cross_layer *ref = cross_ref(ly, L);

	for (size_t i = 0; i < NN; i++)
		keep[i] = drop[i] = NAN;
	if (!ref)
		return;
	size_t nx = ref->nx, hb = nx * K * swm_dtype_size(dt);
	struct cross_parts p;
	memset(scratch, 0, cross_layout(L, H, nx, K, dt, scratch, &p));
	for (size_t l = 0; l < L; l++) {
		if (!cross_same_pick(&ly[l], ref))
			continue;
		memcpy(p.buf + l * H * hb, ly[l].rows, H * hb);
		for (size_t h = 0; h < H; h++)
			p.have[l * H + h] = !ly[l].miss || ly[l].miss[h] == -1;
	}
	swm_pick_all(nx, p.all);
	swm_opts o;
	swm_opts_default(&o);
	swm_block blk = {
		.data = p.buf, .dtype = dt, .kind = kind,
		.heads = N, .rows = nx, .keys = K,
		.head_stride = nx * K, .row_stride = K,
		.nvalid = ref->nvalid, .sink = sink,
		.pair_pick = p.all, .npair = nx,
	};
	swm_block_add(&blk, &o, p.block, p.acc, p.pairs);
	for (size_t h = 0; h < N; h++)
		p.hrows[h] = p.have[h] ? p.acc[h].rows : 0;
	swm_pair_matrices pm = { p.tmp, p.tmp + NN, keep, drop, p.tmp + 2 * NN, p.tmp + 3 * NN,
	    p.prows };
	swm_pairs_finish(p.pairs, p.hrows, N, &pm);
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			if (!p.have[i] || !p.have[j])
				keep[i * N + j] = drop[i * N + j] = NAN;
}
