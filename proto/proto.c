/*
 * proto.c: the sinkwatch wire protocol (see swproto.h and PROTOCOL.md).
 *
 * The decoder runs its checks in the order of PROTOCOL.md "Validation", so
 * that one malformed message always gets the same reason whichever peer
 * sent it. The header bytes are walked by prescan() before msgpack-c sees
 * them: msgpack-c allocates what an array or map header claims, so every
 * claim is first held against the bytes that are actually there. The
 * encoder and the decoder share check_limits() and check_dims(), so the
 * encoder refuses exactly what a receiver would refuse.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

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

static const char *const key_names[K__N] = {
	"v", "type", "run", "seq", "model", "params", "layers", "heads",
	"sink", "fixed_probe", "step", "layer", "kind", "dtype", "shape", "qpos",
	"time", "inc", "resume",
	"rank", "senders", "head0", "row0", "rows"
};

static const struct {
	const char *name, *text;
} errs[SWP_ERRORS_N] = {
	{ "ok", "success" },
#define SWP_ERROR(id, name, text) { #name, text },
#include "proto/errors.def"
};

static const char *const kind_names[] = { "probs", "logits", "rowstats" };
static const char *const dtype_names[] = { "f32", "f16", "bf16", "f64" };
static const size_t dtype_sizes[] = { 4, 2, 2, 8 };

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

const char *
swp_strerror(int err)
{
	return err <= 0 && err > -(int)SWP_ERRORS_N ? errs[-err].text : "unknown error code";
}

const char *
swp_errname(int err)
{
	return err <= 0 && err > -(int)SWP_ERRORS_N ? errs[-err].name : "unknown";
}

size_t
swp_dtype_size(swp_dtype dt)
{
	return (unsigned)dt < 4 ? dtype_sizes[dt] : 0;
}

const char *
swp_dtype_name(swp_dtype dt)
{
	return (unsigned)dt < 4 ? dtype_names[dt] : "invalid";
}

const char *
swp_kind_name(swp_kind k)
{
	return (unsigned)k < 3 ? kind_names[k] : "invalid";
}

/* The index of name in names[n], or -1. */
static int
str_index(const char *name, const char *const *names, int n)
{
	for (int i = 0; name && i < n; i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

int
swp_kind_parse(const char *name)
{
	return str_index(name, kind_names, 3);
}

int
swp_dtype_parse(const char *name)
{
	return str_index(name, dtype_names, 4);
}

/* Stores a detail message (when the caller wants one) and returns err. */
PRINTF(4, 5) static int
fail(char *detail, size_t len, int err, const char *fmt, ...)
{
	va_list ap;

	if (detail == NULL || len == 0)
		return err;
	va_start(ap, fmt);
	vsnprintf(detail, len, fmt, ap);
	va_end(ap);
	return err;
}

/* A network string made safe for a log line: printable ASCII, cut at 40. */
static const char *
shown(const char *s, size_t n, char *buf, size_t len)
{
	size_t i, j = 0;

	for (i = 0; i < n && j + 4 < len && i < 40; i++)
		buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"') ? s[i] : '?';
	if (i < n && j + 4 <= len) {
		memcpy(buf + j, "...", 3);
		j += 3;
	}
	buf[j] = '\0';
	return buf;
}

/* The rule for run ids (topic bytes): no control bytes, no DEL. */
static int
check_run(const char *run, size_t n, char *detail, size_t dlen)
{
	size_t i;

	if (n == 0)
		return fail(detail, dlen, SWP_E_LIMIT, "run: empty");
	if (n > SWP_RUN_MAX)
		return fail(detail, dlen, SWP_E_LIMIT, "run: %zu bytes, limit %d", n,
		    SWP_RUN_MAX);
	for (i = 0; i < n; i++)
		if ((unsigned char)run[i] < 0x20 || (unsigned char)run[i] == 0x7f)
			return fail(detail, dlen, SWP_E_FIELD,
			    "run: control byte 0x%02x at %zu", (unsigned char)run[i], i);
	return SWP_OK;
}

/* The limits of PROTOCOL.md, in the order it lists them. */
static int
check_limits(const struct fields *f, char *detail, size_t dlen)
{
	char b[48];
	int e;

	if (f->type == SWP_SNAPSHOT) {
		if (f->layers < 1 || f->layers > SWP_LAYERS_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "layers: %llu, not in 1..%d",
			    (unsigned long long)f->layers, SWP_LAYERS_MAX);
		if (f->heads < 1 || f->heads > SWP_HEADS_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "heads: %llu, not in 1..%d",
			    (unsigned long long)f->heads, SWP_HEADS_MAX);
		if (f->head0 >= f->heads)
			return fail(detail, dlen, SWP_E_LIMIT, "head0: %llu, heads %llu",
			    (unsigned long long)f->head0, (unsigned long long)f->heads);
		if (f->version < 2 && f->shape[0] != f->heads)
			return fail(detail, dlen, SWP_E_DIMS, "shape[0]: %llu, heads %llu",
			    (unsigned long long)f->shape[0], (unsigned long long)f->heads);
		if (f->shape[0] < 1 || f->shape[0] > f->heads - f->head0)
			return fail(detail, dlen, SWP_E_DIMS, "shape[0]: %llu heads from head0 "
			    "%llu, heads %llu", (unsigned long long)f->shape[0],
			    (unsigned long long)f->head0, (unsigned long long)f->heads);
		if (f->shape[1] < 1 || f->shape[1] > SWP_ROWS_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "shape[1] (rows): %llu, not in 1..%d",
			    (unsigned long long)f->shape[1], SWP_ROWS_MAX);
		if (f->rows < 1 || f->rows > SWP_ROWS_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "rows: %llu, not in 1..%d",
			    (unsigned long long)f->rows, SWP_ROWS_MAX);
		if (f->row0 >= f->rows || f->shape[1] > f->rows - f->row0)
			return fail(detail, dlen, SWP_E_DIMS, "shape[1]: %llu rows from row0 %llu, "
			    "rows %llu", (unsigned long long)f->shape[1],
			    (unsigned long long)f->row0, (unsigned long long)f->rows);
		if (f->shape[2] < 1 || f->shape[2] > SWP_KEYS_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "shape[2] (keys): %llu, not in 1..%u",
			    (unsigned long long)f->shape[2], SWP_KEYS_MAX);
		if (f->layer >= f->layers)
			return fail(detail, dlen, SWP_E_LIMIT, "layer: %llu, layers %llu",
			    (unsigned long long)f->layer, (unsigned long long)f->layers);
		if (f->step_neg)
			return fail(detail, dlen, SWP_E_LIMIT, "step: negative");
		if (f->step > INT64_MAX)
			return fail(detail, dlen, SWP_E_LIMIT, "step: %llu, over 2^63-1",
			    (unsigned long long)f->step);
		if (f->kind == SWP_ROWSTATS) {
			if (f->shape[2] != SWP_ROWSTATS_FIELDS)
				return fail(detail, dlen, SWP_E_KIND, "rowstats with keys %llu, "
				    "expected %d", (unsigned long long)f->shape[2], SWP_ROWSTATS_FIELDS);
			if (f->sink > UINT32_MAX)
				return fail(detail, dlen, SWP_E_LIMIT, "sink: %llu, over 2^32-1",
				    (unsigned long long)f->sink);
		} else if (f->sink >= f->shape[2])
			return fail(detail, dlen, SWP_E_LIMIT, "sink: %llu, keys %llu",
			    (unsigned long long)f->sink, (unsigned long long)f->shape[2]);
	}
	if (f->senders < 1 || f->senders > SWP_SENDERS_MAX)
		return fail(detail, dlen, SWP_E_LIMIT, "senders: %llu, not in 1..%d",
		    (unsigned long long)f->senders, SWP_SENDERS_MAX);
	if (f->rank >= f->senders)
		return fail(detail, dlen, SWP_E_LIMIT, "rank: %llu, senders %llu",
		    (unsigned long long)f->rank, (unsigned long long)f->senders);
	if (f->senders > 1 && f->inc == 0)
		return fail(detail, dlen, SWP_E_FIELD, "inc: required with senders %llu "
		    "(the senders of one incarnation share it)", (unsigned long long)f->senders);
	if (f->has_resume && (f->resume_neg || f->resume > INT64_MAX))
		return fail(detail, dlen, SWP_E_LIMIT, "resume: not a step in 0..2^63-1");
	if ((e = check_run(f->run, f->runlen, detail, dlen)) != SWP_OK)
		return e;
	if (f->type != SWP_SNAPSHOT)
		return SWP_OK;
	if (f->modellen > SWP_MODEL_MAX)
		return fail(detail, dlen, SWP_E_LIMIT, "model: %zu bytes, limit %d",
		    f->modellen, SWP_MODEL_MAX);
	if (memchr(f->model, '\0', f->modellen) != NULL)
		return fail(detail, dlen, SWP_E_FIELD, "model: NUL byte in \"%s\"",
		    shown(f->model, f->modellen, b, sizeof b));
	if (f->has_qpos && f->nqpos != f->shape[1])
		return fail(detail, dlen, SWP_E_DIMS, "qpos: %llu entries, rows %llu",
		    (unsigned long long)f->nqpos, (unsigned long long)f->shape[1]);
	if (f->has_qpos && f->qpos_max > UINT32_MAX)
		return fail(detail, dlen, SWP_E_LIMIT, "qpos: entry %llu, over 2^32-1",
		    (unsigned long long)f->qpos_max);
	return SWP_OK;
}

/* Tensor bytes implied by the header; the limits keep it under 2^50. */
static int
check_dims(const struct fields *f, size_t tensor_bytes, uint64_t *nbytes,
    char *detail, size_t dlen)
{
	uint64_t n = swp_dtype_size(f->dtype);
	int i;

	for (i = 0; i < 3; i++) {
		if (f->shape[i] != 0 && n > UINT64_MAX / f->shape[i])
			return fail(detail, dlen, SWP_E_LIMIT, "shape: byte count overflows");
		n *= f->shape[i];
	}
	*nbytes = n;
	if (n != (uint64_t)tensor_bytes)
		return fail(detail, dlen, SWP_E_DIMS, "tensor: %zu bytes, shape [%llu, %llu, "
		    "%llu] of %s needs %llu", tensor_bytes, (unsigned long long)f->shape[0],
		    (unsigned long long)f->shape[1], (unsigned long long)f->shape[2],
		    swp_dtype_name(f->dtype), (unsigned long long)n);
	return SWP_OK;
}

int
swp_topic(const char *run, char *buf, size_t len)
{
	size_t n;
	int e;

	if (run == NULL || buf == NULL)
		return SWP_E_INVAL;
	n = strnlen(run, SWP_RUN_MAX + 1);
	if ((e = check_run(run, n, NULL, 0)) != SWP_OK)
		return e;
	if (len < SWP_TOPIC_PREFIX_LEN + n)
		return SWP_E_INVAL;
	memcpy(buf, SWP_TOPIC_PREFIX, SWP_TOPIC_PREFIX_LEN);
	memcpy(buf + SWP_TOPIC_PREFIX_LEN, run, n);
	return (int)(SWP_TOPIC_PREFIX_LEN + n);
}

/* ---------------------------------------------------------------- encoder */

static int
pack_cstr(msgpack_packer *pk, const char *s, size_t n)
{
	return msgpack_pack_str_with_body(pk, s, n);
}

static int
pack_key(msgpack_packer *pk, enum key k)
{
	return pack_cstr(pk, key_names[k], strlen(key_names[k]));
}

/* Fills f from m; the lengths are bounded by the arrays, never strlen. */
static int
fields_from_msg(const swp_msg *m, struct fields *f)
{
	const char *end;

	memset(f, 0, sizeof *f);
	if (m->type != SWP_SNAPSHOT && m->type != SWP_END)
		return SWP_E_TYPE;
	f->type = m->type;
	f->run = m->run;
	if ((end = memchr(m->run, '\0', sizeof m->run)) == NULL)
		return SWP_E_LIMIT;
	f->runlen = (size_t)(end - m->run);
	f->seq = m->seq;
	f->time = m->time;
	f->inc = m->inc;
	f->has_resume = m->has_resume;
	f->resume_neg = m->resume < 0;
	f->resume = m->resume < 0 ? 0 : (uint64_t)m->resume;
	f->rank = m->rank;
	f->senders = m->senders ? m->senders : 1;
	f->version = 1;
	if (f->senders > 1 || f->rank != 0)
		f->version = 2;
	if (m->type != SWP_SNAPSHOT)
		return SWP_OK;
	if ((unsigned)m->kind > SWP_ROWSTATS)
		return SWP_E_KIND;
	if ((unsigned)m->dtype > SWP_F64)
		return SWP_E_DTYPE;
	f->model = m->model;
	if ((end = memchr(m->model, '\0', sizeof m->model)) == NULL)
		return SWP_E_LIMIT;
	f->modellen = (size_t)(end - m->model);
	f->params = m->params;
	f->layers = m->layers;
	f->heads = m->heads;
	f->sink = m->sink;
	f->fixed_probe = m->fixed_probe;
	f->step_neg = m->step < 0;
	f->step = m->step < 0 ? 0 : (uint64_t)m->step;
	f->layer = m->layer;
	f->kind = m->kind;
	f->dtype = m->dtype;
	f->shape[0] = m->shape[0];
	f->shape[1] = m->shape[1];
	f->shape[2] = m->shape[2];
	f->has_qpos = m->qpos != NULL;
	f->nqpos = m->shape[1];
	f->head0 = m->head0;
	f->row0 = m->row0;
	f->rows = m->rows ? m->rows : m->shape[1];
	if (m->shape[0] != m->heads || m->head0 != 0 || m->shape[1] != f->rows || m->row0 != 0)
		f->version = 2;
	return SWP_OK;
}

/* Which version 2 keys a canonical header has (PROTOCOL.md 5, 7b). */
static bool
v2_senders(const struct fields *f)
{
	return f->senders > 1 || f->rank != 0;
}

static bool
v2_heads(const swp_msg *m, const struct fields *f)
{
	return m->type == SWP_SNAPSHOT && (f->shape[0] != f->heads || f->head0 != 0);
}

static bool
v2_rows(const swp_msg *m, const struct fields *f)
{
	return m->type == SWP_SNAPSHOT && (f->shape[1] != f->rows || f->row0 != 0);
}

/* Checks m as the decoder would; the number of map keys its header has. */
static int
header_check(const swp_msg *m, struct fields *f, size_t *nkeys)
{
	uint64_t need;
	int e;

	if ((e = fields_from_msg(m, f)) != SWP_OK ||
	    (e = check_limits(f, NULL, 0)) != SWP_OK)
		return e;
	if (m->type == SWP_SNAPSHOT &&
	    (e = check_dims(f, m->tensor_bytes, &need, NULL, 0)) != SWP_OK)
		return e;
	if (m->type == SWP_SNAPSHOT)
		*nkeys = 15 + (m->qpos != NULL) + (isfinite(m->time) != 0);
	else
		*nkeys = 4 + (isfinite(m->time) != 0);
	*nkeys += (m->inc != 0) + (m->has_resume != 0);
	*nkeys += 2 * v2_senders(f) + v2_heads(m, f) + 2 * v2_rows(m, f);
	return SWP_OK;
}

/* Packs the header of a checked m; nonzero when the writer failed. */
static int
header_pack(msgpack_packer *pk, const swp_msg *m, const struct fields *f, size_t nkeys)
{
	bool has_time = isfinite(m->time);
	int r = 0;
	uint32_t i;

	r |= msgpack_pack_map(pk, nkeys);
	r |= pack_key(pk, K_V);
	r |= msgpack_pack_uint64(pk, f->version);
	r |= pack_key(pk, K_TYPE);
	r |= m->type == SWP_SNAPSHOT ? pack_cstr(pk, "snapshot", 8) : pack_cstr(pk, "end", 3);
	r |= pack_key(pk, K_RUN);
	r |= pack_cstr(pk, f->run, f->runlen);
	r |= pack_key(pk, K_SEQ);
	r |= msgpack_pack_uint64(pk, m->seq);
	if (m->type == SWP_SNAPSHOT) {
		r |= pack_key(pk, K_MODEL);
		r |= pack_cstr(pk, f->model, f->modellen);
		r |= pack_key(pk, K_PARAMS);
		r |= msgpack_pack_uint64(pk, m->params);
		r |= pack_key(pk, K_LAYERS);
		r |= msgpack_pack_uint64(pk, m->layers);
		r |= pack_key(pk, K_HEADS);
		r |= msgpack_pack_uint64(pk, m->heads);
		r |= pack_key(pk, K_SINK);
		r |= msgpack_pack_uint64(pk, m->sink);
		r |= pack_key(pk, K_FIXED);
		r |= m->fixed_probe ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
		r |= pack_key(pk, K_STEP);
		r |= msgpack_pack_int64(pk, m->step);
		r |= pack_key(pk, K_LAYER);
		r |= msgpack_pack_uint64(pk, m->layer);
		r |= pack_key(pk, K_KIND);
		r |= pack_cstr(pk, kind_names[m->kind], strlen(kind_names[m->kind]));
		r |= pack_key(pk, K_DTYPE);
		r |= pack_cstr(pk, dtype_names[m->dtype], strlen(dtype_names[m->dtype]));
		r |= pack_key(pk, K_SHAPE);
		r |= msgpack_pack_array(pk, 3);
		for (i = 0; i < 3; i++)
			r |= msgpack_pack_uint64(pk, m->shape[i]);
		if (m->qpos != NULL) {
			r |= pack_key(pk, K_QPOS);
			r |= msgpack_pack_array(pk, m->shape[1]);
			for (i = 0; i < m->shape[1]; i++)
				r |= msgpack_pack_uint64(pk, m->qpos[i]);
		}
	}
	if (has_time) {
		r |= pack_key(pk, K_TIME);
		r |= msgpack_pack_double(pk, m->time);
	}
	if (m->inc != 0) {
		r |= pack_key(pk, K_INC);
		r |= msgpack_pack_uint64(pk, m->inc);
	}
	if (m->has_resume) {
		r |= pack_key(pk, K_RESUME);
		r |= msgpack_pack_int64(pk, m->resume);
	}
	if (v2_senders(f)) {
		r |= pack_key(pk, K_RANK);
		r |= msgpack_pack_uint64(pk, f->rank);
		r |= pack_key(pk, K_SENDERS);
		r |= msgpack_pack_uint64(pk, f->senders);
	}
	if (v2_heads(m, f)) {
		r |= pack_key(pk, K_HEAD0);
		r |= msgpack_pack_uint64(pk, f->head0);
	}
	if (v2_rows(m, f)) {
		r |= pack_key(pk, K_ROW0);
		r |= msgpack_pack_uint64(pk, f->row0);
		r |= pack_key(pk, K_ROWS);
		r |= msgpack_pack_uint64(pk, f->rows);
	}
	return r;
}

int
swp_encode_header(const swp_msg *m, void **out, size_t *outlen)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	struct fields f;
	size_t nkeys, size;
	int e;

	if (out != NULL)
		*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	if (m == NULL || out == NULL || outlen == NULL)
		return SWP_E_INVAL;
	if ((e = header_check(m, &f, &nkeys)) != SWP_OK)
		return e;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (header_pack(&pk, m, &f, nkeys) != 0) {
		/* msgpack_sbuffer_write fails only when realloc does */
		msgpack_sbuffer_destroy(&sb);
		return SWP_E_NOMEM;
	}
	/* Unreachable within the limits (65536 qpos take 320 KiB), kept as a guard. */
	if (sb.size > SWP_HEADER_MAX) {
		msgpack_sbuffer_destroy(&sb);
		return SWP_E_LIMIT;
	}
	size = sb.size;
	*out = msgpack_sbuffer_release(&sb);
	*outlen = size;
	return SWP_OK;
}

size_t
swp_header_bound(const swp_msg *m)
{
	/*
	 * 24 keys of at most 12 bytes with their prefix (288), 19 numbers of
	 * at most 9 bytes (171), type, kind and dtype strings of at most 10
	 * (30), run and model with str8/str16 prefixes (130 + 259), map and
	 * shape prefixes (4): 882; the test encodes the largest header.
	 * qpos: a 5-byte array prefix and at most 5 bytes each.
	 */
	size_t b = 1024;
	if (m != NULL && m->type == SWP_SNAPSHOT && m->qpos != NULL)
		b += 5 + 5 * (size_t)m->shape[1];
	return b;
}

struct fixbuf {
	char *p;
	size_t cap, len;
};

static int
fixbuf_write(void *data, const char *buf, size_t len)
{
	struct fixbuf *fb = data;
	if (len > fb->cap - fb->len)
		return -1;
	memcpy(fb->p + fb->len, buf, len);
	fb->len += len;
	return 0;
}

int
swp_encode_header_to(const swp_msg *m, void *buf, size_t cap, size_t *outlen)
{
	msgpack_packer pk;
	struct fields f;
	struct fixbuf fb = { buf, cap, 0 };
	size_t nkeys;
	int e;

	if (outlen != NULL)
		*outlen = 0;
	if (m == NULL || buf == NULL || outlen == NULL)
		return SWP_E_INVAL;
	if ((e = header_check(m, &f, &nkeys)) != SWP_OK)
		return e;
	msgpack_packer_init(&pk, &fb, fixbuf_write);
	if (header_pack(&pk, m, &f, nkeys) != 0)
		return SWP_E_INVAL;	/* cap below what it needs */
	*outlen = fb.len;
	return SWP_OK;
}

/* ---------------------------------------------------------------- decoder */

static uint32_t
load_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static uint64_t
load_be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/*
 * Walks one msgpack object in p[0 .. n) without allocating and returns the
 * bytes it spans. Every element needs at least one byte, so the elements
 * still owed by all open arrays and maps may never exceed the bytes left:
 * a claim of 2^32-1 elements in a short frame stops here, before msgpack-c
 * would allocate for it.
 */
static int
prescan(const unsigned char *p, size_t n, size_t *used, char *detail, size_t dlen)
{
	uint64_t left[SWP_DEPTH_MAX + 1];	/* elements still due per level */
	uint64_t owed = 1;			/* their sum */
	size_t off = 0;
	int depth = 0;

	left[0] = 1;
	while (depth >= 0) {
		size_t at = off;
		uint64_t body = 0, items = 0, v;
		int lenw = 0, extra = 0, cont = 0;	/* cont: 1 array, 2 map */
		unsigned char b;

		if (left[depth] == 0) {
			depth--;
			continue;
		}
		if (off >= n)
			return fail(detail, dlen, SWP_E_MSGPACK,
			    "truncated: header ends at byte %zu inside an array or map", off);
		b = p[off++];
		left[depth]--;
		owed--;
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
			;
		else if (b <= 0x8f) {
			cont = 2;
			items = 2u * (b & 0x0f);
		} else if (b <= 0x9f) {
			cont = 1;
			items = b & 0x0f;
		} else if (b <= 0xbf)
			body = b & 0x1f;
		else
			switch (b) {
			case 0xc4: case 0xd9: lenw = 1; break;		/* bin 8, str 8 */
			case 0xc5: case 0xda: lenw = 2; break;
			case 0xc6: case 0xdb: lenw = 4; break;
			case 0xc7: lenw = 1; extra = 1; break;		/* ext: + type byte */
			case 0xc8: lenw = 2; extra = 1; break;
			case 0xc9: lenw = 4; extra = 1; break;
			case 0xca: body = 4; break;			/* float 32 */
			case 0xcb: body = 8; break;
			case 0xcc: case 0xd0: body = 1; break;		/* (u)int 8 */
			case 0xcd: case 0xd1: body = 2; break;
			case 0xce: case 0xd2: body = 4; break;
			case 0xcf: case 0xd3: body = 8; break;
			case 0xd4: body = 2; break;			/* fixext 1: type + 1 */
			case 0xd5: body = 3; break;
			case 0xd6: body = 5; break;
			case 0xd7: body = 9; break;
			case 0xd8: body = 17; break;
			case 0xdc: lenw = 2; cont = 1; break;
			case 0xdd: lenw = 4; cont = 1; break;
			case 0xde: lenw = 2; cont = 2; break;
			case 0xdf: lenw = 4; cont = 2; break;
			default:	/* 0xc1, never used */
				return fail(detail, dlen, SWP_E_MSGPACK,
				    "invalid byte 0x%02x at offset %zu", b, at);
			}
		if (lenw > 0) {
			if (n - off < (size_t)lenw)
				return fail(detail, dlen, SWP_E_MSGPACK,
				    "truncated: length of byte 0x%02x at offset %zu", b, at);
			v = load_be(p + off, lenw);
			off += (size_t)lenw;
			if (cont == 1)
				items = v;
			else if (cont == 2)
				items = 2 * v;
			else
				body = v + (uint64_t)extra;
		}
		if (body > n - off)
			return fail(detail, dlen, SWP_E_MSGPACK, "truncated: %llu bytes "
			    "claimed at offset %zu, %zu left", (unsigned long long)body, at,
			    n - off);
		off += (size_t)body;
		if (cont == 0)
			continue;
		if (depth >= SWP_DEPTH_MAX)
			return fail(detail, dlen, SWP_E_MSGPACK, "depth: nesting over %d at "
			    "offset %zu", SWP_DEPTH_MAX, at);
		owed += items;
		if (owed > n - off)
			return fail(detail, dlen, SWP_E_MSGPACK, "truncated: %s of %llu "
			    "elements at offset %zu, %zu bytes left", cont == 1 ? "array" : "map",
			    (unsigned long long)(cont == 1 ? items : items / 2), at, n - off);
		if (items > 0)
			left[++depth] = items;
	}
	*used = off;
	return SWP_OK;
}

static bool
str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	    memcmp(o->via.str.ptr, s, n) == 0;
}

static int
lookup_key(const msgpack_object *o, uint64_t version)
{
	int k, n = version < 2 ? K_V2_FIRST : K__N;

	if (o->type != MSGPACK_OBJECT_STR)
		return -1;
	for (k = 0; k < n; k++)
		if (str_is(o, key_names[k]))
			return k;
	return -1;
}

static int
need(const msgpack_object *const *val, enum key k, msgpack_object_type t,
    const char *what, char *detail, size_t dlen)
{
	if (val[k] == NULL)
		return fail(detail, dlen, SWP_E_FIELD, "%s: missing", key_names[k]);
	if (val[k]->type != t)
		return fail(detail, dlen, SWP_E_FIELD, "%s: not %s", key_names[k], what);
	return SWP_OK;
}

#define NEED(k, t, what) do { \
	if ((e = need(val, (k), (t), (what), detail, dlen)) != SWP_OK) \
		return e; \
} while (0)
#define UINT_FIELD(k, dst) do { \
	NEED((k), MSGPACK_OBJECT_POSITIVE_INTEGER, "an unsigned integer"); \
	(dst) = val[(k)]->via.u64; \
} while (0)

/* Looks a str value up in a name table; -1 if it is not there. */
static int
name_index(const msgpack_object *o, const char *const *names, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (str_is(o, names[i]))
			return i;
	return -1;
}

/*
 * The checks from the version on, over the unpacked map root. Fills f and
 * copies nothing: the caller copies once everything has passed.
 */
static int
decode_map(const msgpack_object *root, size_t nframes, struct fields *f,
    const msgpack_object **qpos, char *detail, size_t dlen)
{
	const msgpack_object *val[K__N] = { NULL };
	const msgpack_object_kv *kv;
	const msgpack_object *o;
	char b[48];
	uint32_t i, n;
	int k, e;

	/* The version, before any other field is interpreted. */
	n = root->via.map.size;
	kv = root->via.map.ptr;
	if (n == 0)
		return fail(detail, dlen, SWP_E_VERSION, "v: missing (empty map)");
	if (!str_is(&kv[0].key, "v"))
		return fail(detail, dlen, SWP_E_VERSION, "v: not the first key");
	if (kv[0].val.type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return fail(detail, dlen, SWP_E_VERSION, "v: not an unsigned integer");
	if (kv[0].val.via.u64 < SWP_VERSION_MIN || kv[0].val.via.u64 > SWP_VERSION)
		return fail(detail, dlen, SWP_E_VERSION, "v: %llu, supported %d..%d",
		    (unsigned long long)kv[0].val.via.u64, SWP_VERSION_MIN, SWP_VERSION);

	/* Unknown keys are skipped, so that a later minor addition still parses. */
	for (i = 0; i < n; i++) {
		if ((k = lookup_key(&kv[i].key, kv[0].val.via.u64)) < 0)
			continue;
		if (val[k] != NULL)
			return fail(detail, dlen, SWP_E_FIELD, "%s: duplicate key", key_names[k]);
		val[k] = &kv[i].val;
	}

	NEED(K_TYPE, MSGPACK_OBJECT_STR, "a str");
	o = val[K_TYPE];
	if (str_is(o, "snapshot"))
		f->type = SWP_SNAPSHOT;
	else if (str_is(o, "end"))
		f->type = SWP_END;
	else
		return fail(detail, dlen, SWP_E_TYPE, "type: \"%s\"",
		    shown(o->via.str.ptr, o->via.str.size, b, sizeof b));
	if (nframes != (f->type == SWP_SNAPSHOT ? 3u : 2u))
		return fail(detail, dlen, SWP_E_FRAMES, "%s message in %zu frames, expected %d",
		    f->type == SWP_SNAPSHOT ? "snapshot" : "end", nframes,
		    f->type == SWP_SNAPSHOT ? 3 : 2);

	/* Required fields and their types, in canonical key order. */
	NEED(K_RUN, MSGPACK_OBJECT_STR, "a str");
	f->run = val[K_RUN]->via.str.ptr;
	f->runlen = val[K_RUN]->via.str.size;
	UINT_FIELD(K_SEQ, f->seq);
	if (f->type == SWP_SNAPSHOT) {
		NEED(K_MODEL, MSGPACK_OBJECT_STR, "a str");
		f->model = val[K_MODEL]->via.str.ptr;
		f->modellen = val[K_MODEL]->via.str.size;
		UINT_FIELD(K_PARAMS, f->params);
		UINT_FIELD(K_LAYERS, f->layers);
		UINT_FIELD(K_HEADS, f->heads);
		UINT_FIELD(K_SINK, f->sink);
		NEED(K_FIXED, MSGPACK_OBJECT_BOOLEAN, "a bool");
		f->fixed_probe = val[K_FIXED]->via.boolean;
		if (val[K_STEP] != NULL && val[K_STEP]->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			f->step_neg = true;
		else {
			NEED(K_STEP, MSGPACK_OBJECT_POSITIVE_INTEGER, "an integer");
			f->step = val[K_STEP]->via.u64;
		}
		UINT_FIELD(K_LAYER, f->layer);
		NEED(K_KIND, MSGPACK_OBJECT_STR, "a str");
		if ((k = name_index(val[K_KIND], kind_names, 3)) < 0)
			return fail(detail, dlen, SWP_E_KIND, "kind: \"%s\"",
			    shown(val[K_KIND]->via.str.ptr, val[K_KIND]->via.str.size, b, sizeof b));
		f->kind = (swp_kind)k;
		NEED(K_DTYPE, MSGPACK_OBJECT_STR, "a str");
		if ((k = name_index(val[K_DTYPE], dtype_names, 4)) < 0)
			return fail(detail, dlen, SWP_E_DTYPE, "dtype: \"%s\"",
			    shown(val[K_DTYPE]->via.str.ptr, val[K_DTYPE]->via.str.size, b, sizeof b));
		f->dtype = (swp_dtype)k;
		NEED(K_SHAPE, MSGPACK_OBJECT_ARRAY, "an array");
		o = val[K_SHAPE];
		if (o->via.array.size != 3)
			return fail(detail, dlen, SWP_E_FIELD, "shape: %u entries, expected 3",
			    o->via.array.size);
		for (i = 0; i < 3; i++) {
			if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
				return fail(detail, dlen, SWP_E_FIELD,
				    "shape[%u]: not an unsigned integer", i);
			f->shape[i] = o->via.array.ptr[i].via.u64;
		}
		/* Optional: nil stands for absent, as a client's None would pack. */
		if ((o = val[K_QPOS]) != NULL && o->type != MSGPACK_OBJECT_NIL) {
			if (o->type != MSGPACK_OBJECT_ARRAY)
				return fail(detail, dlen, SWP_E_FIELD, "qpos: not an array");
			f->has_qpos = true;
			f->nqpos = o->via.array.size;
			for (i = 0; i < o->via.array.size; i++) {
				if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
					return fail(detail, dlen, SWP_E_FIELD,
					    "qpos[%u]: not an unsigned integer", i);
				if (o->via.array.ptr[i].via.u64 > f->qpos_max)
					f->qpos_max = o->via.array.ptr[i].via.u64;
			}
			*qpos = o;
		}
	}
	f->time = NAN;
	if ((o = val[K_TIME]) != NULL) {
		if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)
			f->time = o->via.f64;
		else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			f->time = (double)o->via.u64;
		else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			f->time = (double)o->via.i64;
		else if (o->type != MSGPACK_OBJECT_NIL)
			return fail(detail, dlen, SWP_E_FIELD, "time: not a number");
		if (!isfinite(f->time))
			f->time = NAN;
	}
	/* Optional, both types: the sender's incarnation (section 7a); 0 or nil is absent. */
	if ((o = val[K_INC]) != NULL && o->type != MSGPACK_OBJECT_NIL) {
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return fail(detail, dlen, SWP_E_FIELD, "inc: not an unsigned integer");
		f->inc = o->via.u64;
	}
	if ((o = val[K_RESUME]) != NULL && o->type != MSGPACK_OBJECT_NIL) {
		f->has_resume = true;
		if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			f->resume_neg = true;
		else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			f->resume = o->via.u64;
		else
			return fail(detail, dlen, SWP_E_FIELD, "resume: not an integer");
	}
	/* Version 2, optional; absent (or nil) is the v1 meaning (PROTOCOL.md 7b). */
	f->version = kv[0].val.via.u64;
	f->senders = 1;
	f->rows = f->shape[1];
	for (k = K_RANK; k < K__N; k++) {
		uint64_t *dst[] = { &f->rank, &f->senders, &f->head0, &f->row0, &f->rows };
		if ((o = val[k]) == NULL || o->type == MSGPACK_OBJECT_NIL)
			continue;
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return fail(detail, dlen, SWP_E_FIELD, "%s: not an unsigned integer",
			    key_names[k]);
		*dst[k - K_RANK] = o->via.u64;
	}
	return check_limits(f, detail, dlen);
}

int
swp_decode(const void *const *frames, const size_t *sizes, size_t nframes,
    const swp_limits *lim, swp_msg *out, char *detail, size_t dlen)
{
	const unsigned char *hdr;
	const msgpack_object *qpos = NULL;
	msgpack_unpacked up;
	msgpack_unpack_return ur;
	struct fields f;
	uint64_t need_bytes, tmax;
	size_t i, used = 0, off = 0;
	int e;

	if (detail != NULL && dlen > 0)
		detail[0] = '\0';
	if (out == NULL)
		return fail(detail, dlen, SWP_E_INVAL, "out: NULL");
	memset(out, 0, sizeof *out);
	out->time = NAN;
	if (nframes > 0 && (frames == NULL || sizes == NULL))
		return fail(detail, dlen, SWP_E_INVAL, "frames: NULL");
	for (i = 0; i < nframes && i < 3; i++)
		if (frames[i] == NULL && sizes[i] > 0)
			return fail(detail, dlen, SWP_E_INVAL, "frame %zu: NULL", i);

	if (nframes != 2 && nframes != 3)
		return fail(detail, dlen, SWP_E_FRAMES, "%zu frames, expected 3 (snapshot) "
		    "or 2 (end)", nframes);
	if (sizes[0] <= SWP_TOPIC_PREFIX_LEN || sizes[0] > SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX)
		return fail(detail, dlen, SWP_E_TOPIC, "topic: %zu bytes, expected %d..%d",
		    sizes[0], SWP_TOPIC_PREFIX_LEN + 1, SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX);
	if (memcmp(frames[0], SWP_TOPIC_PREFIX, SWP_TOPIC_PREFIX_LEN) != 0)
		return fail(detail, dlen, SWP_E_TOPIC, "topic: prefix is not \"%s\"",
		    SWP_TOPIC_PREFIX);
	if (sizes[1] < 1 || sizes[1] > SWP_HEADER_MAX)
		return fail(detail, dlen, SWP_E_HEADER_SIZE, "header: %zu bytes, expected "
		    "1..%u", sizes[1], SWP_HEADER_MAX);

	hdr = frames[1];
	if ((e = prescan(hdr, sizes[1], &used, detail, dlen)) != SWP_OK)
		return e;
	if (used != sizes[1])
		return fail(detail, dlen, SWP_E_MSGPACK, "trailing bytes: %zu after the "
		    "header map", sizes[1] - used);
	if (!((hdr[0] & 0xf0) == 0x80 || hdr[0] == 0xde || hdr[0] == 0xdf))
		return fail(detail, dlen, SWP_E_MSGPACK, "header: not a map (byte 0x%02x)",
		    hdr[0]);

	memset(&f, 0, sizeof f);
	msgpack_unpacked_init(&up);
	ur = msgpack_unpack_next(&up, (const char *)hdr, sizes[1], &off);
	if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
		e = fail(detail, dlen, SWP_E_NOMEM, "msgpack-c: out of memory");
	else if (ur == MSGPACK_UNPACK_CONTINUE)
		e = fail(detail, dlen, SWP_E_MSGPACK, "truncated (msgpack-c)");
	else if (ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES)
		e = fail(detail, dlen, SWP_E_MSGPACK, "msgpack-c: parse error");
	else if (off != sizes[1])
		e = fail(detail, dlen, SWP_E_MSGPACK, "trailing bytes: %zu after the "
		    "header map", sizes[1] - off);
	else if (up.data.type != MSGPACK_OBJECT_MAP)
		e = fail(detail, dlen, SWP_E_MSGPACK, "header: not a map");
	else
		e = decode_map(&up.data, nframes, &f, &qpos, detail, dlen);
	if (e != SWP_OK)
		goto done;

	if (sizes[0] - SWP_TOPIC_PREFIX_LEN != f.runlen ||
	    memcmp((const char *)frames[0] + SWP_TOPIC_PREFIX_LEN, f.run, f.runlen) != 0) {
		char b[48];
		e = fail(detail, dlen, SWP_E_TOPIC, "topic: \"%s\" is not \"sw/\" + run",
		    shown(frames[0], sizes[0], b, sizeof b));
		goto done;
	}
	if (f.type == SWP_SNAPSHOT) {
		if ((e = check_dims(&f, sizes[2], &need_bytes, detail, dlen)) != SWP_OK)
			goto done;
		tmax = lim != NULL ? lim->tensor_max : SWP_TENSOR_MAX_DEFAULT;
		if (need_bytes > tmax) {
			e = fail(detail, dlen, SWP_E_LIMIT, "tensor: %llu bytes, limit %llu",
			    (unsigned long long)need_bytes, (unsigned long long)tmax);
			goto done;
		}
	}

	/* Everything has passed: copy out. Only the qpos allocation can fail now. */
	if (qpos != NULL) {
		out->qpos = malloc((size_t)f.nqpos * sizeof *out->qpos);
		if (out->qpos == NULL) {
			e = fail(detail, dlen, SWP_E_NOMEM, "qpos: %llu entries",
			    (unsigned long long)f.nqpos);
			goto done;
		}
		for (i = 0; i < f.nqpos; i++)
			out->qpos[i] = (uint32_t)qpos->via.array.ptr[i].via.u64;
	}
	out->type = f.type;
	memcpy(out->run, f.run, f.runlen);
	out->seq = f.seq;
	out->time = f.time;
	out->inc = f.inc;
	out->has_resume = f.has_resume;
	out->resume = f.has_resume ? (int64_t)f.resume : 0;
	out->version = (uint32_t)f.version;
	out->rank = (uint32_t)f.rank;
	out->senders = (uint32_t)f.senders;
	if (f.type == SWP_SNAPSHOT) {
		memcpy(out->model, f.model, f.modellen);
		out->params = f.params;
		out->layers = (uint32_t)f.layers;
		out->heads = (uint32_t)f.heads;
		out->sink = (uint32_t)f.sink;
		out->fixed_probe = f.fixed_probe;
		out->step = (int64_t)f.step;
		out->layer = (uint32_t)f.layer;
		out->kind = f.kind;
		out->dtype = f.dtype;
		for (i = 0; i < 3; i++)
			out->shape[i] = (uint32_t)f.shape[i];
		out->head0 = (uint32_t)f.head0;
		out->row0 = (uint32_t)f.row0;
		out->rows = (uint32_t)f.rows;
		out->tensor = frames[2];
		out->tensor_bytes = sizes[2];
	}
done:
	msgpack_unpacked_destroy(&up);
	return e;
}

void
swp_msg_clear(swp_msg *m)
{
	if (m == NULL)
		return;
	free(m->qpos);
	m->qpos = NULL;
}

int
swp_golden_parse(const void *buf, size_t len, const void **frames,
    size_t *sizes, size_t maxframes)
{
	const unsigned char *p = buf;
	size_t off = 0, n = 0, fl;

	if ((buf == NULL && len > 0) || ((frames == NULL || sizes == NULL) && maxframes > 0))
		return SWP_E_INVAL;
	while (off < len) {
		if (len - off < 4)
			return SWP_E_MSGPACK;
		fl = load_le32(p + off);
		off += 4;
		if (fl > len - off)
			return SWP_E_MSGPACK;
		/* More frames than the caller has room for is the frame-count error. */
		if (n == maxframes || n == INT32_MAX)
			return SWP_E_FRAMES;
		frames[n] = p + off;
		sizes[n] = fl;
		n++;
		off += fl;
	}
	return (int)n;
}
