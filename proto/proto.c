/*
 * proto.c: the sinkwatch wire protocol (see swproto.h and PROTOCOL.md):
 * names, the checks of a message's fields and limits, and the encoder.
 * The decoder is decode.c; the two share check_limits() and check_dims()
 * (proto_int.h), so the encoder refuses exactly what a receiver would
 * refuse.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto/proto_int.h"

static const struct {
	const char *name, *text;
} errs[SWP_ERRORS_N] = {
	{ "ok", "success" },
#define SWP_ERROR(id, name, text) { #name, text },
#include "proto/errors.def"
};

const char *const pr_key_names[K__N] = {
	"v", "type", "run", "seq", "model", "params", "layers", "heads",
	"sink", "fixed_probe", "step", "layer", "kind", "dtype", "shape", "qpos",
	"time", "inc", "resume",
	"rank", "senders", "head0", "row0", "rows"
};
const char *const pr_kind_names[3] = { "probs", "logits", "rowstats" };
const char *const pr_dtype_names[4] = { "f32", "f16", "bf16", "f64" };
static const size_t dtype_sizes[] = { 4, 2, 2, 8 };

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
	return (unsigned)dt < 4 ? pr_dtype_names[dt] : "invalid";
}

const char *
swp_kind_name(swp_kind k)
{
	return (unsigned)k < 3 ? pr_kind_names[k] : "invalid";
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
	return str_index(name, pr_kind_names, 3);
}

int
swp_dtype_parse(const char *name)
{
	return str_index(name, pr_dtype_names, 4);
}

/* Stores a detail message (when the caller wants one) and returns err. */
PRINTF(4, 5) int
pr_fail(char *detail, size_t len, int err, const char *fmt, ...)
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
const char *
pr_shown(const char *s, size_t n, char *buf, size_t len)
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
		return pr_fail(detail, dlen, SWP_E_LIMIT, "run: empty");
	if (n > SWP_RUN_MAX)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "run: %zu bytes, limit %d", n,
		    SWP_RUN_MAX);
	for (i = 0; i < n; i++)
		if ((unsigned char)run[i] < 0x20 || (unsigned char)run[i] == 0x7f)
			return pr_fail(detail, dlen, SWP_E_FIELD,
			    "run: control byte 0x%02x at %zu", (unsigned char)run[i], i);
	return SWP_OK;
}

/* The limits of PROTOCOL.md, in the order it lists them. */
int
pr_check_limits(const struct fields *f, char *detail, size_t dlen)
{
	char b[48];
	int e;

	if (f->type == SWP_SNAPSHOT) {
		if (f->layers < 1 || f->layers > SWP_LAYERS_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "layers: %llu, not in 1..%d",
			    (unsigned long long)f->layers, SWP_LAYERS_MAX);
		if (f->heads < 1 || f->heads > SWP_HEADS_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "heads: %llu, not in 1..%d",
			    (unsigned long long)f->heads, SWP_HEADS_MAX);
		if (f->head0 >= f->heads)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "head0: %llu, heads %llu",
			    (unsigned long long)f->head0, (unsigned long long)f->heads);
		if (f->version < 2 && f->shape[0] != f->heads)
			return pr_fail(detail, dlen, SWP_E_DIMS, "shape[0]: %llu, heads %llu",
			    (unsigned long long)f->shape[0], (unsigned long long)f->heads);
		if (f->shape[0] < 1 || f->shape[0] > f->heads - f->head0)
			return pr_fail(detail, dlen, SWP_E_DIMS, "shape[0]: %llu heads from head0 "
			    "%llu, heads %llu", (unsigned long long)f->shape[0],
			    (unsigned long long)f->head0, (unsigned long long)f->heads);
		if (f->shape[1] < 1 || f->shape[1] > SWP_ROWS_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "shape[1] (rows): %llu, not in 1..%d",
			    (unsigned long long)f->shape[1], SWP_ROWS_MAX);
		if (f->rows < 1 || f->rows > SWP_ROWS_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "rows: %llu, not in 1..%d",
			    (unsigned long long)f->rows, SWP_ROWS_MAX);
		if (f->row0 >= f->rows || f->shape[1] > f->rows - f->row0)
			return pr_fail(detail, dlen, SWP_E_DIMS, "shape[1]: %llu rows from row0 %llu, "
			    "rows %llu", (unsigned long long)f->shape[1],
			    (unsigned long long)f->row0, (unsigned long long)f->rows);
		if (f->shape[2] < 1 || f->shape[2] > SWP_KEYS_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "shape[2] (keys): %llu, not in 1..%u",
			    (unsigned long long)f->shape[2], SWP_KEYS_MAX);
		if (f->layer >= f->layers)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "layer: %llu, layers %llu",
			    (unsigned long long)f->layer, (unsigned long long)f->layers);
		if (f->step_neg)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "step: negative");
		if (f->step > INT64_MAX)
			return pr_fail(detail, dlen, SWP_E_LIMIT, "step: %llu, over 2^63-1",
			    (unsigned long long)f->step);
		if (f->kind == SWP_ROWSTATS) {
			if (f->shape[2] != SWP_ROWSTATS_FIELDS)
				return pr_fail(detail, dlen, SWP_E_KIND, "rowstats with keys %llu, "
				    "expected %d", (unsigned long long)f->shape[2], SWP_ROWSTATS_FIELDS);
			if (f->sink > UINT32_MAX)
				return pr_fail(detail, dlen, SWP_E_LIMIT, "sink: %llu, over 2^32-1",
				    (unsigned long long)f->sink);
		} else if (f->sink >= f->shape[2])
			return pr_fail(detail, dlen, SWP_E_LIMIT, "sink: %llu, keys %llu",
			    (unsigned long long)f->sink, (unsigned long long)f->shape[2]);
	}
	if (f->senders < 1 || f->senders > SWP_SENDERS_MAX)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "senders: %llu, not in 1..%d",
		    (unsigned long long)f->senders, SWP_SENDERS_MAX);
	if (f->rank >= f->senders)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "rank: %llu, senders %llu",
		    (unsigned long long)f->rank, (unsigned long long)f->senders);
	if (f->senders > 1 && f->inc == 0)
		return pr_fail(detail, dlen, SWP_E_FIELD, "inc: required with senders %llu "
		    "(the senders of one incarnation share it)", (unsigned long long)f->senders);
	if (f->has_resume && (f->resume_neg || f->resume > INT64_MAX))
		return pr_fail(detail, dlen, SWP_E_LIMIT, "resume: not a step in 0..2^63-1");
	if ((e = check_run(f->run, f->runlen, detail, dlen)) != SWP_OK)
		return e;
	if (f->type != SWP_SNAPSHOT)
		return SWP_OK;
	if (f->modellen > SWP_MODEL_MAX)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "model: %zu bytes, limit %d",
		    f->modellen, SWP_MODEL_MAX);
	if (memchr(f->model, '\0', f->modellen) != NULL)
		return pr_fail(detail, dlen, SWP_E_FIELD, "model: NUL byte in \"%s\"",
		    pr_shown(f->model, f->modellen, b, sizeof b));
	if (f->has_qpos && f->nqpos != f->shape[1])
		return pr_fail(detail, dlen, SWP_E_DIMS, "qpos: %llu entries, rows %llu",
		    (unsigned long long)f->nqpos, (unsigned long long)f->shape[1]);
	if (f->has_qpos && f->qpos_max > UINT32_MAX)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "qpos: entry %llu, over 2^32-1",
		    (unsigned long long)f->qpos_max);
	return SWP_OK;
}

/* Tensor bytes implied by the header; the limits keep it under 2^50. */
int
pr_check_dims(const struct fields *f, size_t tensor_bytes, uint64_t *nbytes,
    char *detail, size_t dlen)
{
	uint64_t n = swp_dtype_size(f->dtype);
	int i;

	for (i = 0; i < 3; i++) {
		if (f->shape[i] != 0 && n > UINT64_MAX / f->shape[i])
			return pr_fail(detail, dlen, SWP_E_LIMIT, "shape: byte count overflows");
		n *= f->shape[i];
	}
	*nbytes = n;
	if (n != (uint64_t)tensor_bytes)
		return pr_fail(detail, dlen, SWP_E_DIMS, "tensor: %zu bytes, shape [%llu, %llu, "
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
	return pack_cstr(pk, pr_key_names[k], strlen(pr_key_names[k]));
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
	    (e = pr_check_limits(f, NULL, 0)) != SWP_OK)
		return e;
	if (m->type == SWP_SNAPSHOT &&
	    (e = pr_check_dims(f, m->tensor_bytes, &need, NULL, 0)) != SWP_OK)
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
		r |= pack_cstr(pk, pr_kind_names[m->kind], strlen(pr_kind_names[m->kind]));
		r |= pack_key(pk, K_DTYPE);
		r |= pack_cstr(pk, pr_dtype_names[m->dtype], strlen(pr_dtype_names[m->dtype]));
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

static uint32_t
load_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
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
