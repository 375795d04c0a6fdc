/*
 * swproto.h: the sinkwatch wire protocol, one implementation linked by the
 * client library, the daemon and the tools. The full specification, precise
 * enough to write a compatible client from it alone, is proto/PROTOCOL.md.
 *
 * A message is ZeroMQ multipart:
 *   frame 0  topic   "sw/" + run id (a subscriber filters runs by prefix)
 *   frame 1  header  a msgpack map, first key "v" (the protocol version)
 *   frame 2  tensor  raw little-endian elements, C order [heads, rows, keys]
 *                    (snapshot messages only; a run-end message has 2 frames)
 *
 * Protocol version history (SWP_VERSION is the current one):
 *   1  2026-12  first version: snapshot (probs, logits, rowstats) and end.
 *   2  2026-12  several senders of one run: rank and senders; a snapshot
 *               may carry some heads (head0) and some rows (row0, rows) of
 *               its layer, so shape[0] is the heads it carries. A v1
 *               message is a v2 message with one sender and whole layers.
 * SWP_VERSION_MIN is the oldest version a decoder of this version accepts.
 */
#ifndef SWPROTO_H
#define SWPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWP_VERSION 2
#define SWP_VERSION_MIN 1

#define SWP_TOPIC_PREFIX "sw/"
#define SWP_TOPIC_PREFIX_LEN 3

/* Hard limits of version 1, checked before anything is allocated. */
#define SWP_RUN_MAX 128		/* run id bytes */
#define SWP_MODEL_MAX 256	/* model name bytes */
#define SWP_HEADER_MAX (1u << 20)	/* header frame bytes */
#define SWP_LAYERS_MAX 4096
#define SWP_HEADS_MAX 1024
#define SWP_ROWS_MAX 65536
#define SWP_KEYS_MAX (1u << 20)
#define SWP_SENDERS_MAX 65536	/* senders of one incarnation (v2) */
#define SWP_ROWSTATS_FIELDS 6	/* s, w, H, hb, Hc, b per row */
#define SWP_DEPTH_MAX 8		/* msgpack nesting in the header, its map included */
#define SWP_TENSOR_MAX_DEFAULT (256ull << 20)	/* a receiver's default cap */

typedef enum swp_type { SWP_SNAPSHOT = 1, SWP_END = 2 } swp_type;

typedef enum swp_kind {
	SWP_PROBS = 0,		/* probabilities, keys elements per row */
	SWP_LOGITS = 1,		/* pre-softmax scores, -inf for masked keys */
	SWP_ROWSTATS = 2	/* keys == 6: s, w, H, hb, Hc, b per row */
} swp_kind;

/* Element types; the numbering matches swm_dtype (metrics/swm.h). */
typedef enum swp_dtype { SWP_F32 = 0, SWP_F16 = 1, SWP_BF16 = 2, SWP_F64 = 3 } swp_dtype;

/*
 * Error codes: 0 or negative, one for each entry of proto/errors.def (the
 * one list of them: names, texts, what each means), -1 the first.
 */
enum swp_err_index {
	SWP_EI_OK_,
#define SWP_ERROR(id, name, text) SWP_EI_##id,
#include "proto/errors.def"
	SWP_ERRORS_N	/* the codes are 0 .. -(SWP_ERRORS_N - 1) */
};
typedef enum swp_err {
	SWP_OK = 0,
#define SWP_ERROR(id, name, text) SWP_E_##id = -SWP_EI_##id,
#include "proto/errors.def"
} swp_err;

/* Static description of an error code, never NULL. */
const char *swp_strerror(int err);
/* Short stable name of an error code, for counters ("frames", "msgpack", ...). */
const char *swp_errname(int err);

/*
 * A decoded (or to-be-encoded) message. Strings are NUL-terminated copies.
 * qpos, when not NULL, holds shape[1] query positions (row r has
 * min(keys, qpos[r] + 1) valid keys); tensor points at the caller's frame,
 * with no alignment promised for its dtype (load elements with memcpy).
 */
typedef struct swp_msg {
	swp_type type;
	char run[SWP_RUN_MAX + 1];
	uint64_t seq;		/* per-run sequence number, from 0, +1 a message */
	double time;		/* sender's clock, Unix seconds; NaN if absent */
	uint64_t inc;		/* sender incarnation (PROTOCOL.md 7a); 0 if absent */
	bool has_resume;	/* the incarnation resumes from step `resume` */
	int64_t resume;		/* earlier incarnations' steps > resume are superseded */
	/*
	 * Version 2 (PROTOCOL.md 7b). The decoder fills them for every
	 * version (v1: rank 0, senders 1, head0 0, row0 0, rows shape[1]);
	 * an encoder takes senders 0 as 1 and rows 0 as shape[1], and writes
	 * v 2 only when one of them says more than v1 can.
	 */
	uint32_t version;	/* decoded "v"; ignored by the encoders */
	uint32_t rank;		/* this sender, < senders */
	uint32_t senders;	/* senders of the incarnation, 1..SWP_SENDERS_MAX */
	/* snapshot only */
	char model[SWP_MODEL_MAX + 1];
	uint64_t params;	/* model parameter count */
	uint32_t layers, heads;	/* the model's */
	uint32_t sink;		/* sink key index */
	bool fixed_probe;	/* same probe inputs every snapshot */
	int64_t step;		/* training step, >= 0 */
	uint32_t layer;		/* < layers */
	swp_kind kind;
	swp_dtype dtype;
	uint32_t shape[3];	/* heads, rows, keys of the tensor: heads head0.. and
				 * rows row0.. of the layer (v1: all of them) */
	uint32_t head0;		/* the layer's first head in the tensor */
	uint32_t row0;		/* the probe's first row in the tensor */
	uint32_t rows;		/* the probe's rows (all senders together) */
	uint32_t *qpos;		/* NULL or shape[1] entries; owned as stated per call */
	const void *tensor;	/* not owned */
	size_t tensor_bytes;
} swp_msg;

/* Receiver-side limits beyond the fixed ones. */
typedef struct swp_limits {
	uint64_t tensor_max;	/* max tensor frame bytes */
} swp_limits;

/* Size in bytes of one element, 0 if dt is invalid. */
size_t swp_dtype_size(swp_dtype dt);
const char *swp_dtype_name(swp_dtype dt);	/* "f32", ... or "invalid" */
const char *swp_kind_name(swp_kind k);		/* "probs", ... or "invalid" */
int swp_kind_parse(const char *name);		/* the swp_kind of a name, or -1 */
int swp_dtype_parse(const char *name);		/* the swp_dtype of a name, or -1 */

/*
 * Writes the topic of a run ("sw/" + run) into buf (not NUL-terminated) and
 * returns its length, or SWP_E_LIMIT if the run id is empty or too long,
 * SWP_E_FIELD if it holds a byte < 0x20 or 0x7f, or SWP_E_INVAL if buf is
 * too small (SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX fits).
 */
int swp_topic(const char *run, char *buf, size_t len);

/*
 * Encodes the header of m in canonical form (PROTOCOL.md: fixed key order,
 * smallest integer encodings). On success returns 0 and *out is a malloc'd
 * buffer of *outlen bytes that the caller frees; on failure a negative code
 * and *out is NULL. Validates m as the decoder would (limits, dims against
 * tensor_bytes for snapshots).
 */
int swp_encode_header(const swp_msg *m, void **out, size_t *outlen);

/*
 * The same encoding into buf (cap bytes), no allocation: for a sender that
 * keeps the header beside its own bookkeeping. swp_header_bound(m) bytes
 * are always enough. Returns 0 and *outlen, a negative code as
 * swp_encode_header(), or SWP_E_INVAL if cap is too small.
 */
int swp_encode_header_to(const swp_msg *m, void *buf, size_t cap, size_t *outlen);

/* An upper bound of the encoded header size of m, in bytes. */
size_t swp_header_bound(const swp_msg *m);

/*
 * Decodes and validates one received message, given its frames. The fixed
 * order of checks: frame count and sizes, header bytes (msgpack structure,
 * every claimed count against the bytes left, before msgpack-c allocates),
 * version, type, fields and their limits, topic against run, dims against
 * the tensor frame. On success returns 0 and fills *out; out->qpos is then
 * either NULL or a malloc'd array that swp_msg_clear() frees, and
 * out->tensor points into frames[2]. On failure returns a negative code, out
 * holds nothing to free, and detail (if not NULL) names the field or value.
 */
int swp_decode(const void *const *frames, const size_t *sizes, size_t nframes,
    const swp_limits *lim, swp_msg *out, char *detail, size_t detail_len);

/* Frees what swp_decode() allocated in m (qpos) and sets it NULL. */
void swp_msg_clear(swp_msg *m);

/*
 * Test-data container for golden messages: each frame as a uint32
 * little-endian length followed by its bytes. swp_golden_parse() splits a
 * buffer into at most maxframes frames (pointers into buf); returns the frame
 * count, SWP_E_MSGPACK if the container is malformed (a length running past
 * the end), or SWP_E_FRAMES if it holds more than maxframes frames.
 */
int swp_golden_parse(const void *buf, size_t len, const void **frames,
    size_t *sizes, size_t maxframes);

#ifdef __cplusplus
}
#endif
#endif
