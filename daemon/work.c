/*
 * work.c: a layer's metric work, on a pool thread (sinkwatchd.h): it reads
 * its job and the job's swd_work_conf, nothing else, and leaves the result
 * and its counts in the job for the loop thread (ingest.c, after_work).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/sinkwatchd.h"

/* Clock c, ns. */
static int64_t
clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * This thread's CPU time, ns: a system call (1.3 us on the bench's VM,
 * whose kernel, with page-table isolation and no PCID, empties the TLB at
 * each: issue 30, bench/RESULTS.md).
 */
int64_t
swd_thread_ns(void)
{
	return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* The monotonic clock, ns: read in user space (vDSO, 26 ns), no system call. */
static int64_t
mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/*
 * The drift rows' buffer: H x nln rows of K floats, then the nln row
 * indices, rounded up to 64 bytes: it is 64-byte aligned (the row kernels
 * stream the ln parts into it, prep_raw).
 */
static size_t
ln_bytes(size_t H, size_t nln, size_t K)
{
	return (H * nln * K * sizeof(float) + nln * sizeof(uint32_t) + 63) & ~(size_t)63;
}

/* Bytes a layer's result holds until the writer is done with it. */
size_t
swd_result_bytes(const swd_work_conf *c, const swp_msg *m, int fixed)
{
	size_t H = m->shape[0], R = m->shape[1], K = m->shape[2];
	size_t b = sizeof(swd_layer) + H * sizeof(swm_head_acc) + H * H * sizeof(swm_pair_acc);
	if (fixed) {
		size_t nln = (size_t)c->drift_rows < R ? (size_t)c->drift_rows : R;
		b += H * R * sizeof(swm_row) + ln_bytes(H, nln, K);
	}
	if (c->cross_layer_pairs && m->kind != SWP_ROWSTATS) {
		size_t nx = c->pair_rows > 0 && (size_t)c->pair_rows < R ?
		    (size_t)c->pair_rows : R;
		b += H * nx * K * swp_dtype_size(m->dtype) + 2 * nx * sizeof(uint32_t);
	}
	/* a worker's scratch, nvalid and pair rows, while it runs */
	return b + swm_block_scratch(H, K) + 64 + 2 * R * sizeof(uint32_t);
}

/*
 * cross_layer_pairs: the layer's pair rows, copied as sent, for the writer
 * to pair every head with the heads of the other layers (result_bytes
 * reserved their room). Without room the layer simply has none: its heads
 * are NaN in the cross-layer matrices.
 */
static void
keep_cross_rows(swd_layer *ly, const swm_block *blk, const uint32_t *pick, size_t npick,
    const uint32_t *nvalid)
{
	size_t H = ly->heads, K = ly->keys, es = swm_dtype_size(blk->dtype);
	size_t rows_b = H * npick * K * es;
	char *x = malloc(rows_b + 2 * npick * sizeof(uint32_t));
	if (!x)
		return;
	for (size_t h = 0; h < H; h++)
		for (size_t i = 0; i < npick; i++)
			memcpy(x + (h * npick + i) * K * es, swm_block_row(blk, h, pick[i]), K * es);
	ly->xrows = x;
	ly->xvalid = (uint32_t *)(x + rows_b);
	ly->xidx = ly->xvalid + npick;
	for (size_t i = 0; i < npick; i++) {
		ly->xvalid[i] = nvalid ? nvalid[pick[i]] : (uint32_t)K;
		ly->xidx[i] = pick[i];
	}
	ly->nx = (uint32_t)npick;
}

/* Head-pair metrics for this layer: a copy (PROTOCOL.md 7b) is computed to
 * be compared, heads and rows only. */
static int
wants_pairs(const swd_job *j)
{
	const swp_msg *m = &j->msg;
	return j->conf.pair_metrics && m->shape[0] > 1 && m->kind != SWP_ROWSTATS && !j->t.copy;
}

/* The layer's result, its arrays allocated; NULL: no memory. */
static swd_layer *
layer_new(const swd_job *j)
{
	const swp_msg *m = &j->msg;
	uint32_t H = m->shape[0], R = m->shape[1], K = m->shape[2];
	swd_layer *ly = calloc(1, sizeof(*ly));
	if (!ly)
		return NULL;
	ly->layer = m->layer;
	ly->heads = H;
	ly->rows = R;
	ly->keys = K;
	ly->bytes = j->reserved;
	int fixed = m->fixed_probe, pairs = wants_pairs(j);
	int64_t drift_rows = j->conf.drift_rows;
	ly->acc = calloc(H, sizeof(*ly->acc));
	if (pairs)
		ly->pairs = calloc((size_t)H * H, sizeof(*ly->pairs));
	if (fixed)
		ly->rows_st = calloc((size_t)H * R, sizeof(*ly->rows_st));
	size_t nln = 0;
	if (fixed && m->kind != SWP_ROWSTATS && drift_rows > 0 && !j->t.copy) {
		nln = (size_t)drift_rows < R ? (size_t)drift_rows : R;
		ly->ln = aligned_alloc(64, ln_bytes(H, nln, K));
		if (ly->ln) {
			/* storage/LAYOUT.md (row_use): which rows, from qpos; fewer when rows are short */
			ly->ln_rows = (uint32_t *)(ly->ln + (size_t)H * nln * K);
			nln = swm_pick_rows(m->qpos, R, K, nln, ly->ln_rows);
			ly->nln = (uint32_t)nln;
		}
	}
	if (!ly->acc || (pairs && !ly->pairs) || (fixed && !ly->rows_st) || (nln && !ly->ln)) {
		swd_layer_free(ly, NULL);
		return NULL;
	}
	return ly;
}

/* A layer sent as row statistics (SWP_ROWSTATS): six figures a row. */
static void
add_rowstats(swd_layer *ly, const swd_job *j, const void *data)
{
	const swp_msg *m = &j->msg;
	uint32_t H = m->shape[0], R = m->shape[1];
	swm_block blk = {
		.data = data, .head_data = j->parts ? j->parts->head : NULL,
		.dtype = (swm_dtype)m->dtype, .heads = H, .rows = R, .keys = 6,
		.head_stride = (size_t)R * 6, .row_stride = 6,
	};
	swm_opts o;
	swm_opts_default(&o);
	double tol = swm_opts_tol(&o, (swm_dtype)m->dtype);
	for (uint32_t h = 0; h < H; h++)
		for (uint32_t r = 0; r < R; r++) {
			double v[6];
			const void *x = swm_block_row(&blk, h, r);
			for (int f = 0; f < 6; f++)
				v[f] = swm_load(x, blk.dtype, (size_t)f);
			swm_row row;
			swm_row_from_stats(v, tol, &row);
			swm_head_add(&ly->acc[h], &row);
			if (ly->rows_st)
				ly->rows_st[(size_t)h * R + r] = row;
		}
}

/* A layer sent as probabilities or logits: the metric kernels. 0, or -1: no memory. */
static int
add_tensor(swd_job *j, swd_layer *ly, const void *data)
{
	const swp_msg *m = &j->msg;
	uint32_t H = m->shape[0], R = m->shape[1], K = m->shape[2];
	int pairs = wants_pairs(j), cross = j->conf.cross_layer_pairs && !j->t.copy;
	swm_opts o;
	swm_opts_default(&o);
	uint32_t *nvalid = NULL;
	if (m->qpos && (nvalid = malloc(R * sizeof(uint32_t))))
		for (uint32_t r = 0; r < R; r++)
			nvalid[r] = m->qpos[r] >= K ? K : m->qpos[r] + 1;
	size_t sb = (swm_block_scratch(H, K) + 63) & ~(size_t)63;
	void *scratch = aligned_alloc(64, sb);
	uint32_t *pick = pairs || cross ? malloc(R * sizeof(uint32_t)) : NULL;
	size_t npair = 0;
	if (pick && j->conf.pair_rows > 0)
		npair = swm_pick_rows(m->qpos, R, K, (size_t)j->conf.pair_rows, pick);
	else if (pick)
		npair = swm_pick_all(R, pick);
	if (!scratch || (m->qpos && !nvalid) || ((pairs || cross) && !pick)) {
		free(scratch);
		free(nvalid);
		free(pick);
		return -1;
	}
	swm_block blk = {
		.data = data, .head_data = j->parts ? j->parts->head : NULL,
		.dtype = (swm_dtype)m->dtype,
		.kind = m->kind == SWP_LOGITS ? SWM_LOGITS : SWM_PROBS,
		.heads = H, .rows = R, .keys = K,
		.head_stride = (size_t)R * K, .row_stride = K,
		.nvalid = nvalid, .sink = m->sink,
		.pair_pick = pairs ? pick : NULL, .npair = pairs ? npair : 0,
		.rows_out = ly->rows_st,
		.ln_pick = ly->ln_rows, .nln = ly->nln, .ln_out = ly->ln,
		.clock_ns = mono_ns, .pair_ns = &j->pair_ns,
	};
	swm_block_add(&blk, &o, scratch, ly->acc, ly->pairs);
	if (cross && npair)
		keep_cross_rows(ly, &blk, pick, npair, nvalid);
	free(scratch);
	free(nvalid);
	ly->pair_idx = pick;	/* recorded in the run file (row_use) */
	ly->npair = (uint32_t)npair;
	return 0;
}

/* Heads whose parts never came: no rows, absent rows, no pairs. */
static void
mark_missing(swd_job *j, swd_layer *ly)
{
	uint32_t H = ly->heads, R = ly->rows;
	for (uint32_t h = 0; h < H; h++) {
		if (j->miss[h] == -1)
			continue;
		memset(&ly->acc[h], 0, sizeof(ly->acc[h]));
		for (uint32_t r = 0; ly->rows_st && r < R; r++) {
			swm_row *w = &ly->rows_st[(size_t)h * R + r];
			memset(w, 0, sizeof(*w));
			w->s = w->w = w->H = w->hb = w->Hc = w->C = w->b = NAN;
			w->status = (swm_status)SW_ROW_ABSENT;
		}
		free(ly->pairs);
		ly->pairs = NULL;
	}
	ly->miss_rank = j->miss;
	j->miss = NULL;
}

static void
work(swd_job *j)
{
	const swp_msg *m = &j->msg;
	swd_layer *ly = layer_new(j);
	if (!ly)
		return;
	const void *data = j->parts ? NULL : zmq_msg_data(&j->tensor);
	if (m->kind == SWP_ROWSTATS) {
		add_rowstats(ly, j, data);
	} else if (add_tensor(j, ly, data) != 0) {
		swd_layer_free(ly, NULL);
		return;
	}
	if (j->miss)
		mark_missing(j, ly);
	for (uint32_t h = 0; h < ly->heads; h++) {
		j->rows_counted += (int64_t)ly->acc[h].rows;
		for (int s = 1; s < SWM_STATUS__N; s++)
			j->rejects[s] += (int64_t)ly->acc[h].rejected[s];
	}
	j->out = ly;
}

/*
 * The job's work, its CPU time counted in the job (the kernel stage), and
 * the pair work's share of it: the pair spans' share of the job's time on
 * the monotonic clock (two readings a pair row, in user space), applied to
 * the CPU time (two readings a job, system calls). A thread's CPU clock
 * read around each span took 16-20 system calls a message.
 */
void
swd_work_run(uv_work_t *req)
{
	swd_job *j = req->data;
	int64_t t0 = swd_thread_ns(), w0 = mono_ns();
	j->pair_ns = 0;
	work(j);
	int64_t wall = mono_ns() - w0;
	j->kernel_ns = swd_thread_ns() - t0;
	double share = wall > 0 ? (double)j->pair_ns / (double)wall : 0.0;
	j->pair_ns = (int64_t)((double)j->kernel_ns * (share < 1.0 ? share : 1.0));
}
