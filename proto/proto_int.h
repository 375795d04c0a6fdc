/*
 * proto_int.h: the protocol library's own pieces (swproto.h is its
 * interface), shared by proto.c (names, limits, the encoder) and decode.c
 * (the decoder), so that the encoder refuses exactly what a receiver would.
 */
#ifndef SWP_PROTO_INT_H
#define SWP_PROTO_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/swproto.h"

#if defined(__GNUC__)
#define PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF(f, a)
#endif

/* The header keys; the enum order is the canonical key order. */
enum key {
	K_V, K_TYPE, K_RUN, K_SEQ, K_MODEL, K_PARAMS, K_LAYERS, K_HEADS,
	K_SINK, K_FIXED, K_STEP, K_LAYER, K_KIND, K_DTYPE, K_SHAPE, K_QPOS,
	K_TIME, K_INC, K_RESUME,
	K_RANK, K_SENDERS, K_HEAD0, K_ROW0, K_ROWS,	/* version 2 */
	K__N
};
#define K_V2_FIRST K_RANK	/* keys from here are unknown to a v1 message */

extern const char *const pr_key_names[K__N];
extern const char *const pr_kind_names[3], *const pr_dtype_names[4];


/*
 * The header values as the checks see them: wide integers, so that a
 * decoded value over a field's C type is a limit failure and not a silent
 * truncation; strings as pointer and length, not NUL-terminated.
 */
struct fields {
	swp_type type;
	const char *run, *model;
	size_t runlen, modellen;
	uint64_t seq, params, layers, heads, sink, layer;
	uint64_t step;		/* magnitude; step_neg gives the sign */
	bool step_neg;
	bool fixed_probe;
	swp_kind kind;
	swp_dtype dtype;
	uint64_t shape[3];
	bool has_qpos;
	uint64_t nqpos, qpos_max;
	double time;
	uint64_t inc;		/* 0: absent */
	bool has_resume;
	uint64_t resume;	/* magnitude; resume_neg gives the sign */
	bool resume_neg;
	uint64_t version;
	uint64_t rank, senders, head0, row0, rows;	/* v2; defaults for v1 */
};

PRINTF(4, 5) int pr_fail(char *detail, size_t len, int err, const char *fmt, ...);
const char *pr_shown(const char *s, size_t n, char *buf, size_t len);
int pr_check_limits(const struct fields *f, char *detail, size_t dlen);
int pr_check_dims(const struct fields *f, size_t tensor_bytes, uint64_t *nbytes,
    char *detail, size_t dlen);

#endif
