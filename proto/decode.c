/*
 * decode.c: the decoder of the wire protocol (PROTOCOL.md "Validation").
 * Its checks run in the order of that section, so that one malformed
 * message always gets the same reason whichever peer sent it. The header
 * bytes are walked by prescan() before msgpack-c sees them: msgpack-c
 * allocates what an array or map header claims, so every claim is first
 * held against the bytes that are actually there.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto/proto_int.h"

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
			return pr_fail(detail, dlen, SWP_E_MSGPACK,
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
				return pr_fail(detail, dlen, SWP_E_MSGPACK,
				    "invalid byte 0x%02x at offset %zu", b, at);
			}
		if (lenw > 0) {
			if (n - off < (size_t)lenw)
				return pr_fail(detail, dlen, SWP_E_MSGPACK,
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
			return pr_fail(detail, dlen, SWP_E_MSGPACK, "truncated: %llu bytes "
			    "claimed at offset %zu, %zu left", (unsigned long long)body, at,
			    n - off);
		off += (size_t)body;
		if (cont == 0)
			continue;
		if (depth >= SWP_DEPTH_MAX)
			return pr_fail(detail, dlen, SWP_E_MSGPACK, "depth: nesting over %d at "
			    "offset %zu", SWP_DEPTH_MAX, at);
		owed += items;
		if (owed > n - off)
			return pr_fail(detail, dlen, SWP_E_MSGPACK, "truncated: %s of %llu "
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
		if (str_is(o, pr_key_names[k]))
			return k;
	return -1;
}

static int
need(const msgpack_object *const *val, enum key k, msgpack_object_type t,
    const char *what, char *detail, size_t dlen)
{
	if (val[k] == NULL)
		return pr_fail(detail, dlen, SWP_E_FIELD, "%s: missing", pr_key_names[k]);
	if (val[k]->type != t)
		return pr_fail(detail, dlen, SWP_E_FIELD, "%s: not %s", pr_key_names[k], what);
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
/* The version first, then each known key once: val[K__N]. */
static int
decode_keys(const msgpack_object *root, const msgpack_object *val[K__N], char *detail,
    size_t dlen)
{
	uint32_t n = root->via.map.size;
	const msgpack_object_kv *kv = root->via.map.ptr;
	int k;

	/* The version, before any other field is interpreted. */
	if (n == 0)
		return pr_fail(detail, dlen, SWP_E_VERSION, "v: missing (empty map)");
	if (!str_is(&kv[0].key, "v"))
		return pr_fail(detail, dlen, SWP_E_VERSION, "v: not the first key");
	if (kv[0].val.type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return pr_fail(detail, dlen, SWP_E_VERSION, "v: not an unsigned integer");
	if (kv[0].val.via.u64 < SWP_VERSION_MIN || kv[0].val.via.u64 > SWP_VERSION)
		return pr_fail(detail, dlen, SWP_E_VERSION, "v: %llu, supported %d..%d",
		    (unsigned long long)kv[0].val.via.u64, SWP_VERSION_MIN, SWP_VERSION);

	/* Unknown keys are skipped, so that a later minor addition still parses. */
	for (uint32_t i = 0; i < n; i++) {
		if ((k = lookup_key(&kv[i].key, kv[0].val.via.u64)) < 0)
			continue;
		if (val[k] != NULL)
			return pr_fail(detail, dlen, SWP_E_FIELD, "%s: duplicate key", pr_key_names[k]);
		val[k] = &kv[i].val;
	}
	return SWP_OK;
}

/* The optional qpos array: its length and largest entry (copied out later). */
static int
decode_qpos(const msgpack_object *o, struct fields *f, const msgpack_object **qpos,
    char *detail, size_t dlen)
{
	/* nil stands for absent, as a client's None would pack */
	if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
		return SWP_OK;
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return pr_fail(detail, dlen, SWP_E_FIELD, "qpos: not an array");
	f->has_qpos = true;
	f->nqpos = o->via.array.size;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return pr_fail(detail, dlen, SWP_E_FIELD, "qpos[%u]: not an unsigned integer",
			    i);
		if (o->via.array.ptr[i].via.u64 > f->qpos_max)
			f->qpos_max = o->via.array.ptr[i].via.u64;
	}
	*qpos = o;
	return SWP_OK;
}

/* A snapshot's own fields, in canonical key order. */
static int
decode_snapshot(const msgpack_object *const *val, struct fields *f,
    const msgpack_object **qpos, char *detail, size_t dlen)
{
	const msgpack_object *o;
	char b[48];
	int k, e;

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
	if ((k = name_index(val[K_KIND], pr_kind_names, 3)) < 0)
		return pr_fail(detail, dlen, SWP_E_KIND, "kind: \"%s\"",
		    pr_shown(val[K_KIND]->via.str.ptr, val[K_KIND]->via.str.size, b, sizeof b));
	f->kind = (swp_kind)k;
	NEED(K_DTYPE, MSGPACK_OBJECT_STR, "a str");
	if ((k = name_index(val[K_DTYPE], pr_dtype_names, 4)) < 0)
		return pr_fail(detail, dlen, SWP_E_DTYPE, "dtype: \"%s\"",
		    pr_shown(val[K_DTYPE]->via.str.ptr, val[K_DTYPE]->via.str.size, b, sizeof b));
	f->dtype = (swp_dtype)k;
	NEED(K_SHAPE, MSGPACK_OBJECT_ARRAY, "an array");
	o = val[K_SHAPE];
	if (o->via.array.size != 3)
		return pr_fail(detail, dlen, SWP_E_FIELD, "shape: %u entries, expected 3",
		    o->via.array.size);
	for (uint32_t i = 0; i < 3; i++) {
		if (o->via.array.ptr[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return pr_fail(detail, dlen, SWP_E_FIELD, "shape[%u]: not an unsigned integer",
			    i);
		f->shape[i] = o->via.array.ptr[i].via.u64;
	}
	return decode_qpos(val[K_QPOS], f, qpos, detail, dlen);
}

/* The optional fields of both types: time, inc, resume, and version 2's. */
static int
decode_optional(const msgpack_object *const *val, struct fields *f, char *detail,
    size_t dlen)
{
	const msgpack_object *o;
	f->time = NAN;
	if ((o = val[K_TIME]) != NULL) {
		if (o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_FLOAT32)
			f->time = o->via.f64;
		else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			f->time = (double)o->via.u64;
		else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			f->time = (double)o->via.i64;
		else if (o->type != MSGPACK_OBJECT_NIL)
			return pr_fail(detail, dlen, SWP_E_FIELD, "time: not a number");
		if (!isfinite(f->time))
			f->time = NAN;
	}
	/* the sender's incarnation (section 7a); 0 or nil is absent */
	if ((o = val[K_INC]) != NULL && o->type != MSGPACK_OBJECT_NIL) {
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return pr_fail(detail, dlen, SWP_E_FIELD, "inc: not an unsigned integer");
		f->inc = o->via.u64;
	}
	if ((o = val[K_RESUME]) != NULL && o->type != MSGPACK_OBJECT_NIL) {
		f->has_resume = true;
		if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
			f->resume_neg = true;
		else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			f->resume = o->via.u64;
		else
			return pr_fail(detail, dlen, SWP_E_FIELD, "resume: not an integer");
	}
	/* Version 2, optional; absent (or nil) is the v1 meaning (PROTOCOL.md 7b). */
	f->senders = 1;
	f->rows = f->shape[1];
	for (int k = K_RANK; k < K__N; k++) {
		uint64_t *dst[] = { &f->rank, &f->senders, &f->head0, &f->row0, &f->rows };
		if ((o = val[k]) == NULL || o->type == MSGPACK_OBJECT_NIL)
			continue;
		if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
			return pr_fail(detail, dlen, SWP_E_FIELD, "%s: not an unsigned integer",
			    pr_key_names[k]);
		*dst[k - K_RANK] = o->via.u64;
	}
	return SWP_OK;
}

static int
decode_map(const msgpack_object *root, size_t nframes, struct fields *f,
    const msgpack_object **qpos, char *detail, size_t dlen)
{
	const msgpack_object *val[K__N] = { NULL };
	const msgpack_object *o;
	char b[48];
	int e;

	if ((e = decode_keys(root, val, detail, dlen)) != SWP_OK)
		return e;
	NEED(K_TYPE, MSGPACK_OBJECT_STR, "a str");
	o = val[K_TYPE];
	if (str_is(o, "snapshot"))
		f->type = SWP_SNAPSHOT;
	else if (str_is(o, "end"))
		f->type = SWP_END;
	else
		return pr_fail(detail, dlen, SWP_E_TYPE, "type: \"%s\"",
		    pr_shown(o->via.str.ptr, o->via.str.size, b, sizeof b));
	if (nframes != (f->type == SWP_SNAPSHOT ? 3u : 2u))
		return pr_fail(detail, dlen, SWP_E_FRAMES, "%s message in %zu frames, expected %d",
		    f->type == SWP_SNAPSHOT ? "snapshot" : "end", nframes,
		    f->type == SWP_SNAPSHOT ? 3 : 2);

	/* Required fields and their types, in canonical key order. */
	NEED(K_RUN, MSGPACK_OBJECT_STR, "a str");
	f->run = val[K_RUN]->via.str.ptr;
	f->runlen = val[K_RUN]->via.str.size;
	UINT_FIELD(K_SEQ, f->seq);
	if (f->type == SWP_SNAPSHOT && (e = decode_snapshot(val, f, qpos, detail, dlen)) != SWP_OK)
		return e;
	if ((e = decode_optional(val, f, detail, dlen)) != SWP_OK)
		return e;
	f->version = root->via.map.ptr[0].val.via.u64;
	return pr_check_limits(f, detail, dlen);
}

/* The frames, the topic's prefix and the header's size and bytes (prescan). */
static int
check_frames(const void *const *frames, const size_t *sizes, size_t nframes, char *detail,
    size_t dlen)
{
	size_t used = 0;
	int e;

	if (nframes > 0 && (frames == NULL || sizes == NULL))
		return pr_fail(detail, dlen, SWP_E_INVAL, "frames: NULL");
	for (size_t i = 0; i < nframes && i < 3; i++)
		if (frames[i] == NULL && sizes[i] > 0)
			return pr_fail(detail, dlen, SWP_E_INVAL, "frame %zu: NULL", i);
	if (nframes != 2 && nframes != 3)
		return pr_fail(detail, dlen, SWP_E_FRAMES, "%zu frames, expected 3 (snapshot) "
		    "or 2 (end)", nframes);
	if (sizes[0] <= SWP_TOPIC_PREFIX_LEN || sizes[0] > SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX)
		return pr_fail(detail, dlen, SWP_E_TOPIC, "topic: %zu bytes, expected %d..%d",
		    sizes[0], SWP_TOPIC_PREFIX_LEN + 1, SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX);
	if (memcmp(frames[0], SWP_TOPIC_PREFIX, SWP_TOPIC_PREFIX_LEN) != 0)
		return pr_fail(detail, dlen, SWP_E_TOPIC, "topic: prefix is not \"%s\"",
		    SWP_TOPIC_PREFIX);
	if (sizes[1] < 1 || sizes[1] > SWP_HEADER_MAX)
		return pr_fail(detail, dlen, SWP_E_HEADER_SIZE, "header: %zu bytes, expected "
		    "1..%u", sizes[1], SWP_HEADER_MAX);
	const unsigned char *hdr = frames[1];
	if ((e = prescan(hdr, sizes[1], &used, detail, dlen)) != SWP_OK)
		return e;
	if (used != sizes[1])
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "trailing bytes: %zu after the "
		    "header map", sizes[1] - used);
	if (!((hdr[0] & 0xf0) == 0x80 || hdr[0] == 0xde || hdr[0] == 0xdf))
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "header: not a map (byte 0x%02x)",
		    hdr[0]);
	return SWP_OK;
}

/* The header unpacked into up (the caller's to destroy) and its fields decoded. */
static int
unpack_header(msgpack_unpacked *up, const void *hdr, size_t size, size_t nframes,
    struct fields *f, const msgpack_object **qpos, char *detail, size_t dlen)
{
	size_t off = 0;
	msgpack_unpack_return ur = msgpack_unpack_next(up, hdr, size, &off);
	if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
		return pr_fail(detail, dlen, SWP_E_NOMEM, "msgpack-c: out of memory");
	if (ur == MSGPACK_UNPACK_CONTINUE)
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "truncated (msgpack-c)");
	if (ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES)
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "msgpack-c: parse error");
	if (off != size)
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "trailing bytes: %zu after the "
		    "header map", size - off);
	if (up->data.type != MSGPACK_OBJECT_MAP)
		return pr_fail(detail, dlen, SWP_E_MSGPACK, "header: not a map");
	return decode_map(&up->data, nframes, f, qpos, detail, dlen);
}

/* The topic names the header's run; a snapshot's tensor fits its shape and limit. */
static int
check_topic_tensor(const void *const *frames, const size_t *sizes, const swp_limits *lim,
    const struct fields *f, char *detail, size_t dlen)
{
	uint64_t need_bytes, tmax;
	int e;

	if (sizes[0] - SWP_TOPIC_PREFIX_LEN != f->runlen ||
	    memcmp((const char *)frames[0] + SWP_TOPIC_PREFIX_LEN, f->run, f->runlen) != 0) {
		char b[48];
		return pr_fail(detail, dlen, SWP_E_TOPIC, "topic: \"%s\" is not \"sw/\" + run",
		    pr_shown(frames[0], sizes[0], b, sizeof b));
	}
	if (f->type != SWP_SNAPSHOT)
		return SWP_OK;
	if ((e = pr_check_dims(f, sizes[2], &need_bytes, detail, dlen)) != SWP_OK)
		return e;
	tmax = lim != NULL ? lim->tensor_max : SWP_TENSOR_MAX_DEFAULT;
	if (need_bytes > tmax)
		return pr_fail(detail, dlen, SWP_E_LIMIT, "tensor: %llu bytes, limit %llu",
		    (unsigned long long)need_bytes, (unsigned long long)tmax);
	return SWP_OK;
}

/* Everything has passed: copy out. Only the qpos allocation can pr_fail now. */
static int
copy_out(const void *const *frames, const size_t *sizes, const struct fields *f,
    const msgpack_object *qpos, swp_msg *out, char *detail, size_t dlen)
{
	if (qpos != NULL) {
		out->qpos = malloc((size_t)f->nqpos * sizeof *out->qpos);
		if (out->qpos == NULL)
			return pr_fail(detail, dlen, SWP_E_NOMEM, "qpos: %llu entries",
			    (unsigned long long)f->nqpos);
		for (size_t i = 0; i < f->nqpos; i++)
			out->qpos[i] = (uint32_t)qpos->via.array.ptr[i].via.u64;
	}
	out->type = f->type;
	memcpy(out->run, f->run, f->runlen);
	out->seq = f->seq;
	out->time = f->time;
	out->inc = f->inc;
	out->has_resume = f->has_resume;
	out->resume = f->has_resume ? (int64_t)f->resume : 0;
	out->version = (uint32_t)f->version;
	out->rank = (uint32_t)f->rank;
	out->senders = (uint32_t)f->senders;
	if (f->type != SWP_SNAPSHOT)
		return SWP_OK;
	memcpy(out->model, f->model, f->modellen);
	out->params = f->params;
	out->layers = (uint32_t)f->layers;
	out->heads = (uint32_t)f->heads;
	out->sink = (uint32_t)f->sink;
	out->fixed_probe = f->fixed_probe;
	out->step = (int64_t)f->step;
	out->layer = (uint32_t)f->layer;
	out->kind = f->kind;
	out->dtype = f->dtype;
	for (int i = 0; i < 3; i++)
		out->shape[i] = (uint32_t)f->shape[i];
	out->head0 = (uint32_t)f->head0;
	out->row0 = (uint32_t)f->row0;
	out->rows = (uint32_t)f->rows;
	out->tensor = frames[2];
	out->tensor_bytes = sizes[2];
	return SWP_OK;
}

int
swp_decode(const void *const *frames, const size_t *sizes, size_t nframes,
    const swp_limits *lim, swp_msg *out, char *detail, size_t dlen)
{
	const msgpack_object *qpos = NULL;
	msgpack_unpacked up;
	struct fields f;
	int e;

	if (detail != NULL && dlen > 0)
		detail[0] = '\0';
	if (out == NULL)
		return pr_fail(detail, dlen, SWP_E_INVAL, "out: NULL");
	memset(out, 0, sizeof *out);
	out->time = NAN;
	if ((e = check_frames(frames, sizes, nframes, detail, dlen)) != SWP_OK)
		return e;
	memset(&f, 0, sizeof f);
	msgpack_unpacked_init(&up);
	e = unpack_header(&up, frames[1], sizes[1], nframes, &f, &qpos, detail, dlen);
	if (e == SWP_OK)
		e = check_topic_tensor(frames, sizes, lim, &f, detail, dlen);
	if (e == SWP_OK)
		e = copy_out(frames, sizes, &f, qpos, out, detail, dlen);
	msgpack_unpacked_destroy(&up);
	return e;
}
