/*
 * roundtrip.c: fuzz target of decode -> encode -> decode. A message the
 * decoder accepts must encode (the encoder refuses exactly what a
 * receiver refuses), swp_encode_header_to() must give the same bytes
 * within swp_header_bound(), the canonical header must decode to the same
 * message, and encoding that gives the same bytes again.
 */
#include <math.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "proto/swproto.h"

/* Everything a decoded message says, but version (the encoder picks it). */
static void
same(const swp_msg *a, const swp_msg *b)
{
	FUZZ_ASSERT(a->type == b->type && strcmp(a->run, b->run) == 0);
	FUZZ_ASSERT(a->seq == b->seq && a->inc == b->inc);
	FUZZ_ASSERT((isnan(a->time) && isnan(b->time)) || a->time == b->time);
	FUZZ_ASSERT(a->has_resume == b->has_resume && a->resume == b->resume);
	FUZZ_ASSERT(a->rank == b->rank && a->senders == b->senders);
	if (a->type != SWP_SNAPSHOT)
		return;
	FUZZ_ASSERT(strcmp(a->model, b->model) == 0 && a->params == b->params);
	FUZZ_ASSERT(a->layers == b->layers && a->heads == b->heads && a->sink == b->sink);
	FUZZ_ASSERT(a->fixed_probe == b->fixed_probe && a->step == b->step);
	FUZZ_ASSERT(a->layer == b->layer && a->kind == b->kind && a->dtype == b->dtype);
	FUZZ_ASSERT(memcmp(a->shape, b->shape, sizeof a->shape) == 0);
	FUZZ_ASSERT(a->head0 == b->head0 && a->row0 == b->row0 && a->rows == b->rows);
	FUZZ_ASSERT((a->qpos == NULL) == (b->qpos == NULL));
	if (a->qpos != NULL)
		FUZZ_ASSERT(memcmp(a->qpos, b->qpos, a->shape[1] * sizeof *a->qpos) == 0);
	FUZZ_ASSERT(a->tensor == b->tensor && a->tensor_bytes == b->tensor_bytes);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_frames f;
	const void *frames[3];
	size_t sizes[3], len, len2, len3, cap;
	void *hdr, *hdr2, *buf;
	swp_msg m, m2;
	int rc;

	fuzz_frames_split(data, size, &f);
	if (swp_decode(f.frames, f.sizes, f.n, NULL, &m, NULL, 0) != SWP_OK) {
		fuzz_frames_free(&f);
		return 0;
	}
	rc = swp_encode_header(&m, &hdr, &len);
	if (rc != SWP_OK)
		fprintf(stderr, "encoder refused a decoded message: %s\n", swp_errname(rc));
	FUZZ_ASSERT(rc == SWP_OK);
	cap = swp_header_bound(&m);
	FUZZ_ASSERT(len <= cap);
	buf = malloc(cap);
	FUZZ_ASSERT(buf != NULL);
	FUZZ_ASSERT(swp_encode_header_to(&m, buf, cap, &len3) == SWP_OK);
	FUZZ_ASSERT(len3 == len && memcmp(buf, hdr, len) == 0);
	free(buf);

	frames[0] = f.frames[0];
	sizes[0] = f.sizes[0];
	frames[1] = hdr;
	sizes[1] = len;
	if (f.n == 3) {
		frames[2] = f.frames[2];
		sizes[2] = f.sizes[2];
	}
	rc = swp_decode(frames, sizes, f.n, NULL, &m2, NULL, 0);
	FUZZ_ASSERT(rc == SWP_OK);
	same(&m, &m2);
	FUZZ_ASSERT(swp_encode_header(&m2, &hdr2, &len2) == SWP_OK);
	FUZZ_ASSERT(len2 == len && memcmp(hdr2, hdr, len) == 0);
	free(hdr);
	free(hdr2);
	swp_msg_clear(&m);
	swp_msg_clear(&m2);
	fuzz_frames_free(&f);
	return 0;
}
