/*
 * test_proto.c: unit tests of the wire protocol (proto/swproto.h) against
 * the golden messages in tests/data/golden (MANIFEST says what each must
 * decode to) and against headers built here, independently of the
 * encoder, with msgpack-c's packer: one field at a time, each limit just
 * inside and just outside, two faults at once to pin the order of checks.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include <sys/stat.h>
#include <unistd.h>

#include "proto/swkeys.h"
#include "proto/swproto.h"

#ifndef SW_GOLDEN_DIR
#error SW_GOLDEN_DIR must name the golden message folder
#endif

#define MAXFRAMES 8
#define DETAIL 256

/* ---- a small deterministic generator ---------------------------------- */

static uint64_t rng_state = 7;

static uint64_t
rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static uint64_t
rndn(uint64_t n)
{
	return rnd() % n;
}

/* A value of random bit width, so every msgpack integer size comes up. */
static uint64_t
rnd_wide(void)
{
	return rnd() >> rndn(64);
}

/* ---- golden files ------------------------------------------------------ */

struct golden {
	unsigned char *buf;
	size_t len;
	const void *frames[MAXFRAMES];
	size_t sizes[MAXFRAMES];
	int n;
};

static unsigned char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf;
	long n;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	ck_assert_int_ge(n, 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	buf[n] = '\0';
	*len = (size_t)n;
	return buf;
}

static void
golden_load(struct golden *g, const char *name)
{
	char path[1024];

	snprintf(path, sizeof path, "%s/%s", SW_GOLDEN_DIR, name);
	g->buf = read_file(path, &g->len);
	g->n = swp_golden_parse(g->buf, g->len, g->frames, g->sizes, MAXFRAMES);
	ck_assert_msg(g->n >= 0, "%s: container malformed (%d)", name, g->n);
}

static void
golden_free(struct golden *g)
{
	free(g->buf);
	g->buf = NULL;
}

struct entry {
	char name[128];
	char err[32];
};

static struct entry manifest[256];
static int nmanifest;

static void
manifest_load(void)
{
	char path[1024], *line, *save = NULL;
	unsigned char *buf;
	size_t len;

	if (nmanifest > 0)
		return;
	snprintf(path, sizeof path, "%s/MANIFEST", SW_GOLDEN_DIR);
	buf = read_file(path, &len);
	for (line = strtok_r((char *)buf, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		struct entry *e = &manifest[nmanifest];
		if (line[0] == '#' || line[0] == '\0')
			continue;
		ck_assert_int_lt(nmanifest, 256);
		ck_assert_msg(sscanf(line, "%127s %31s", e->name, e->err) == 2,
		    "MANIFEST: bad line \"%s\"", line);
		nmanifest++;
	}
	free(buf);
	ck_assert_int_gt(nmanifest, 0);
}

/* The code whose swp_errname is name; fails the test if there is none. */
static int
code_of(const char *name)
{
	int c;

	for (c = 0; c >= SWP_E_INVAL; c--)
		if (strcmp(swp_errname(c), name) == 0)
			return c;
	ck_abort_msg("MANIFEST names an unknown error \"%s\"", name);
	return 1;
}

static const struct entry *
manifest_find(const char *name)
{
	int i;

	manifest_load();
	for (i = 0; i < nmanifest; i++)
		if (strcmp(manifest[i].name, name) == 0)
			return &manifest[i];
	return NULL;
}

static int
decode_golden(const struct golden *g, swp_msg *m, char *detail)
{
	return swp_decode(g->frames, g->sizes, (size_t)g->n, NULL, m, detail, DETAIL);
}

/* ---- headers built field by field, independently of the encoder ---------- */

enum { K_V, K_TYPE, K_RUN, K_SEQ, K_MODEL, K_PARAMS, K_LAYERS, K_HEADS, K_SINK,
	K_FIXED, K_STEP, K_LAYER, K_KIND, K_DTYPE, K_SHAPE, K_QPOS, K_TIME,
	K_INC, K_RESUME, K_RANK, K_SENDERS, K_HEAD0, K_ROW0, K_ROWS, K__N };

static const char *const keys[K__N] = {
	"v", "type", "run", "seq", "model", "params", "layers", "heads", "sink",
	"fixed_probe", "step", "layer", "kind", "dtype", "shape", "qpos", "time",
	"inc", "resume", "rank", "senders", "head0", "row0", "rows"
};
#define BIT(k) (1u << (k))

struct hb {
	uint64_t v;
	const char *type, *run, *model, *kind, *dtype;
	uint64_t seq, params, layers, heads, sink, layer;
	int64_t step;
	bool fixed;
	uint64_t shape[3];
	const uint64_t *qpos;	/* NULL: no qpos key */
	size_t nqpos;
	double time;		/* NaN: no time key */
	/* inc .. rows: present only where set has their bit, in the canonical order */
	uint64_t inc, rank, senders, head0, row0, rows;
	int64_t resume;
	unsigned set;		/* bit per optional key from inc on that is present */
	unsigned nil;		/* bit per key packed as nil whatever its value */
	unsigned omit;		/* bit per key left out */
	int wrong;		/* key packed with a value of the wrong type, or -1 */
	bool v_last;		/* "v" moved to the end */
	bool all_keys;		/* snapshot keys in an end message too */
	const unsigned char *extra;	/* raw pairs appended to the map */
	size_t extralen;
	int nextra;
};

static void
hb_default(struct hb *h)
{
	memset(h, 0, sizeof *h);
	h->v = 1;
	h->type = "snapshot";
	h->run = "r1";
	h->model = "m";
	h->kind = "probs";
	h->dtype = "f32";
	h->params = 100;
	h->layers = 4;
	h->heads = 2;
	h->fixed = true;
	h->step = 10;
	h->layer = 1;
	h->shape[0] = 2;
	h->shape[1] = 3;
	h->shape[2] = 4;
	h->time = NAN;
	h->wrong = -1;
}

static bool
hb_has(const struct hb *h, int k)
{
	bool end = strcmp(h->type, "end") == 0 && !h->all_keys;

	if (h->omit & (1u << k))
		return false;
	if (k >= K_INC)
		return (h->set & BIT(k)) != 0;
	if (k == K_QPOS)
		return h->qpos != NULL && !end;
	if (k == K_TIME)
		return !isnan(h->time);
	if (end)
		return k <= K_SEQ;
	return true;
}

static void
pack_s(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void
hb_pack_value(msgpack_packer *pk, const struct hb *h, int k)
{
	size_t i;

	if (h->nil & BIT(k)) {
		msgpack_pack_nil(pk);
		return;
	}
	if (k == h->wrong) {
		/* a str where a number is due, a number where a str is due */
		if (k == K_TYPE || k == K_RUN || k == K_MODEL || k == K_KIND || k == K_DTYPE)
			msgpack_pack_uint64(pk, 1);
		else
			pack_s(pk, "1");
		return;
	}
	switch (k) {
	case K_V: msgpack_pack_uint64(pk, h->v); break;
	case K_TYPE: pack_s(pk, h->type); break;
	case K_RUN: pack_s(pk, h->run); break;
	case K_SEQ: msgpack_pack_uint64(pk, h->seq); break;
	case K_MODEL: pack_s(pk, h->model); break;
	case K_PARAMS: msgpack_pack_uint64(pk, h->params); break;
	case K_LAYERS: msgpack_pack_uint64(pk, h->layers); break;
	case K_HEADS: msgpack_pack_uint64(pk, h->heads); break;
	case K_SINK: msgpack_pack_uint64(pk, h->sink); break;
	case K_FIXED: h->fixed ? msgpack_pack_true(pk) : msgpack_pack_false(pk); break;
	case K_STEP: msgpack_pack_int64(pk, h->step); break;
	case K_LAYER: msgpack_pack_uint64(pk, h->layer); break;
	case K_KIND: pack_s(pk, h->kind); break;
	case K_DTYPE: pack_s(pk, h->dtype); break;
	case K_SHAPE:
		msgpack_pack_array(pk, 3);
		for (i = 0; i < 3; i++)
			msgpack_pack_uint64(pk, h->shape[i]);
		break;
	case K_QPOS:
		msgpack_pack_array(pk, h->nqpos);
		for (i = 0; i < h->nqpos; i++)
			msgpack_pack_uint64(pk, h->qpos[i]);
		break;
	case K_TIME: msgpack_pack_double(pk, h->time); break;
	case K_INC: msgpack_pack_uint64(pk, h->inc); break;
	case K_RESUME: msgpack_pack_int64(pk, h->resume); break;
	case K_RANK: msgpack_pack_uint64(pk, h->rank); break;
	case K_SENDERS: msgpack_pack_uint64(pk, h->senders); break;
	case K_HEAD0: msgpack_pack_uint64(pk, h->head0); break;
	case K_ROW0: msgpack_pack_uint64(pk, h->row0); break;
	case K_ROWS: msgpack_pack_uint64(pk, h->rows); break;
	}
}

/* The header bytes of h in a malloc'd buffer. */
static unsigned char *
hb_build(const struct hb *h, size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t n = (size_t)h->nextra;
	unsigned char *out;
	int k;

	for (k = 0; k < K__N; k++)
		n += hb_has(h, k);
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	for (k = h->v_last ? 1 : 0; k < K__N; k++) {
		if (!hb_has(h, k))
			continue;
		pack_s(&pk, keys[k]);
		hb_pack_value(&pk, h, k);
	}
	if (h->v_last && hb_has(h, K_V)) {
		pack_s(&pk, keys[K_V]);
		hb_pack_value(&pk, h, K_V);
	}
	if (h->extralen > 0)
		msgpack_sbuffer_write(&sb, (const char *)h->extra, h->extralen);
	*len = sb.size;
	out = (unsigned char *)msgpack_sbuffer_release(&sb);
	ck_assert_ptr_nonnull(out);
	return out;
}

static size_t
dsize_of(const char *name)
{
	if (strcmp(name, "f16") == 0 || strcmp(name, "bf16") == 0)
		return 2;
	return strcmp(name, "f64") == 0 ? 8 : 4;
}

/* Changes to the frames around a built header. */
struct env {
	const char *topic;	/* NULL: "sw/" + run */
	long tensor_delta;	/* bytes added to the right tensor size */
	size_t nframes;		/* 0: by type */
	const swp_limits *lim;
	const unsigned char *hdr;	/* header bytes instead of hb_build's */
	size_t hdrlen;
};

/* Decodes h inside env e; the message is cleared unless out is given. */
static int
try_env(const struct hb *h, const struct env *e, swp_msg *out, char *detail)
{
	const void *frames[4];
	size_t sizes[4], hlen, tbytes, nframes;
	unsigned char *hdr = NULL, *tensor;
	char topic[512], dbuf[DETAIL];
	swp_msg m;
	int rc;

	if (e->hdr != NULL) {
		frames[1] = e->hdr;
		hlen = e->hdrlen;
	} else {
		hdr = hb_build(h, &hlen);
		frames[1] = hdr;
	}
	if (e->topic != NULL)
		snprintf(topic, sizeof topic, "%s", e->topic);
	else
		snprintf(topic, sizeof topic, "sw/%s", h->run);
	tbytes = (size_t)((long)(h->shape[0] * h->shape[1] * h->shape[2] *
	    dsize_of(h->dtype)) + e->tensor_delta);
	/* The decoder never reads the tensor frame: a huge one needs no memory. */
	if (tbytes > (16u << 20))
		tensor = NULL;
	else {
		tensor = calloc(tbytes + 1, 1);
		ck_assert_ptr_nonnull(tensor);
	}
	frames[0] = topic;
	sizes[0] = strlen(topic);
	sizes[1] = hlen;
	frames[2] = tensor != NULL ? (const void *)tensor : (const void *)&rng_state;
	sizes[2] = tbytes;
	frames[3] = "x";
	sizes[3] = 1;
	nframes = e->nframes ? e->nframes : strcmp(h->type, "end") == 0 ? 2 : 3;
	rc = swp_decode(frames, sizes, nframes, e->lim, out ? out : &m,
	    detail ? detail : dbuf, DETAIL);
	if (rc == SWP_OK && out != NULL) {
		/* the caller's copy must not point at our tensor any more */
		out->tensor = NULL;
	}
	if (out == NULL)
		swp_msg_clear(&m);
	free(hdr);
	free(tensor);
	return rc;
}

static int
try_hb(const struct hb *h)
{
	struct env e = { 0 };
	return try_env(h, &e, NULL, NULL);
}

/* A valid message equal to hb_default, for the encoder. */
static void
msg_default(swp_msg *m)
{
	memset(m, 0, sizeof *m);
	m->type = SWP_SNAPSHOT;
	strcpy(m->run, "r1");
	strcpy(m->model, "m");
	m->params = 100;
	m->layers = 4;
	m->heads = 2;
	m->fixed_probe = true;
	m->step = 10;
	m->layer = 1;
	m->kind = SWP_PROBS;
	m->dtype = SWP_F32;
	m->shape[0] = 2;
	m->shape[1] = 3;
	m->shape[2] = 4;
	m->tensor_bytes = 2 * 3 * 4 * 4;
	m->time = NAN;
}

static int
encode_rc(const swp_msg *m)
{
	void *out = NULL;
	size_t len = 7;
	int rc = swp_encode_header(m, &out, &len);

	if (rc != SWP_OK) {
		ck_assert_ptr_null(out);
		ck_assert_uint_eq(len, 0);
	}
	free(out);
	return rc;
}

/* ---- golden messages ----------------------------------------------------- */

START_TEST(test_golden_manifest_complete)
{
	static const char *const required[] = {
		"bad_truncated.msg", "bad_version.msg", "bad_v_not_first.msg", "bad_dims.msg",
		"bad_array_huge.msg", "bad_str_huge.msg", "bad_kind.msg", "bad_dtype.msg",
		"bad_rowstats_keys.msg", "bad_layer.msg", "bad_topic.msg",
		"bad_missing_field.msg", "bad_trailing.msg", "bad_frames4.msg",
		"snap_v2_pipeline.msg", "snap_v2_tensor.msg", "snap_v2_context.msg",
		"snap_v2_data.msg", "end_v2.msg", "bad_v2_rank.msg", "bad_v2_senders_0.msg",
		"bad_v2_head0.msg", "bad_v2_head0_shape.msg", "bad_v2_row0_shape.msg",
		"bad_v2_no_inc.msg", "bad_v1_part.msg",
	};
	DIR *d = opendir(SW_GOLDEN_DIR);
	struct dirent *de;
	int nok = 0, nfiles = 0, i;
	size_t j;

	manifest_load();
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		if (n < 4 || strcmp(de->d_name + n - 4, ".msg") != 0)
			continue;
		nfiles++;
		ck_assert_msg(manifest_find(de->d_name) != NULL,
		    "%s is not in MANIFEST", de->d_name);
	}
	closedir(d);
	ck_assert_int_eq(nfiles, nmanifest);
	for (i = 0; i < nmanifest; i++) {
		nok += strcmp(manifest[i].err, "ok") == 0;
		(void)code_of(manifest[i].err);
		ck_assert_msg((strncmp(manifest[i].name, "bad_", 4) == 0) ==
		    (strcmp(manifest[i].err, "ok") != 0), "%s: bad_ prefix and status "
		    "disagree", manifest[i].name);
	}
	ck_assert_int_ge(nok, 14);
	for (j = 0; j < sizeof required / sizeof required[0]; j++)
		ck_assert_msg(manifest_find(required[j]) != NULL, "%s missing", required[j]);
}
END_TEST

START_TEST(test_golden_ok_reencode)
{
	int i, checked = 0;

	manifest_load();
	for (i = 0; i < nmanifest; i++) {
		struct golden g;
		char detail[DETAIL];
		swp_msg m;
		void *hdr;
		size_t len;
		int rc;

		if (strcmp(manifest[i].err, "ok") != 0)
			continue;
		golden_load(&g, manifest[i].name);
		rc = decode_golden(&g, &m, detail);
		ck_assert_msg(rc == SWP_OK, "%s: %s (%s)", manifest[i].name,
		    swp_errname(rc), detail);
		ck_assert_str_eq(detail, "");
		if (m.type == SWP_SNAPSHOT) {
			ck_assert_ptr_eq(m.tensor, g.frames[2]);
			ck_assert_uint_eq(m.tensor_bytes, g.sizes[2]);
		} else
			ck_assert_ptr_null(m.tensor);
		rc = swp_encode_header(&m, &hdr, &len);
		ck_assert_msg(rc == SWP_OK, "%s: re-encode %s", manifest[i].name,
		    swp_errname(rc));
		ck_assert_msg(len == g.sizes[1] && memcmp(hdr, g.frames[1], len) == 0,
		    "%s: re-encoded header differs (%zu vs %zu bytes)", manifest[i].name,
		    len, g.sizes[1]);
		free(hdr);
		swp_msg_clear(&m);
		golden_free(&g);
		checked++;
	}
	ck_assert_int_ge(checked, 14);
}
END_TEST

START_TEST(test_golden_bad)
{
	int i, checked = 0;

	manifest_load();
	for (i = 0; i < nmanifest; i++) {
		struct golden g;
		char detail[DETAIL];
		swp_msg m;
		int rc, want;

		if (strcmp(manifest[i].err, "ok") == 0)
			continue;
		want = code_of(manifest[i].err);
		golden_load(&g, manifest[i].name);
		rc = decode_golden(&g, &m, detail);
		ck_assert_msg(rc == want, "%s: got %s (%s), MANIFEST says %s",
		    manifest[i].name, swp_errname(rc), detail, manifest[i].err);
		ck_assert_msg(detail[0] != '\0', "%s: no detail", manifest[i].name);
		ck_assert_ptr_null(m.qpos);
		golden_free(&g);
		checked++;
	}
	ck_assert_int_ge(checked, 23);
}
END_TEST

/* The exact fields of two snapshots and both end messages (make_golden.py). */
START_TEST(test_golden_fields)
{
	struct golden g;
	swp_msg m;
	char detail[DETAIL];
	float pf[24];	/* copies: a frame inside the container is not aligned */
	double pd[24];
	size_t i;

	golden_load(&g, "snap_probs_f32.msg");
	ck_assert_int_eq(g.n, 3);
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_int_eq(m.type, SWP_SNAPSHOT);
	ck_assert_str_eq(m.run, "pythia-160m/seed1");
	ck_assert_uint_eq(m.seq, 3);
	ck_assert_str_eq(m.model, "pythia-160m");
	ck_assert_uint_eq(m.params, 162322944);
	ck_assert_uint_eq(m.layers, 12);
	ck_assert_uint_eq(m.heads, 2);
	ck_assert_uint_eq(m.sink, 0);
	ck_assert(m.fixed_probe);
	ck_assert_int_eq(m.step, 1000);
	ck_assert_uint_eq(m.layer, 5);
	ck_assert_int_eq(m.kind, SWP_PROBS);
	ck_assert_int_eq(m.dtype, SWP_F32);
	ck_assert_uint_eq(m.shape[0], 2);
	ck_assert_uint_eq(m.shape[1], 3);
	ck_assert_uint_eq(m.shape[2], 4);
	ck_assert_ptr_nonnull(m.qpos);
	ck_assert_uint_eq(m.qpos[0], 1);
	ck_assert_uint_eq(m.qpos[1], 2);
	ck_assert_uint_eq(m.qpos[2], 3);
	ck_assert_double_eq(m.time, 1796083200.5);
	ck_assert_uint_eq(m.tensor_bytes, 96);
	memcpy(pf, m.tensor, sizeof pf);
	ck_assert_float_eq(pf[0], 0.75f);
	ck_assert_float_eq(pf[12 + 5], 0.0625f);
	ck_assert_float_eq(pf[23], 0.25f);
	/* probability rows sum to 1 over their min(keys, qpos + 1) valid keys */
	for (i = 0; i < 6; i++) {
		float s = 0;
		size_t j, r = i % 3, nv = m.qpos[r] + 1 < 4 ? m.qpos[r] + 1 : 4;
		for (j = 0; j < nv; j++)
			s += pf[i * 4 + j];
		for (; j < 4; j++)
			ck_assert_float_eq(pf[i * 4 + j], 0.0f);
		ck_assert_float_eq(s, 1.0f);
	}
	swp_msg_clear(&m);
	ck_assert_ptr_null(m.qpos);
	golden_free(&g);

	golden_load(&g, "snap_logits_f16.msg");
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_str_eq(m.run, "gpt2-medium/lr3e-4/warmup2000/run-2026-12-01T08:00:00Z");
	ck_assert_uint_eq(m.seq, 300);
	ck_assert_str_eq(m.model, "gpt2-medium");
	ck_assert_uint_eq(m.params, 354823168);
	ck_assert_uint_eq(m.layers, 24);
	ck_assert(!m.fixed_probe);
	ck_assert_int_eq(m.step, 143000);
	ck_assert_uint_eq(m.layer, 23);
	ck_assert_int_eq(m.kind, SWP_LOGITS);
	ck_assert_int_eq(m.dtype, SWP_F16);
	ck_assert_ptr_null(m.qpos);
	ck_assert(isnan(m.time));
	ck_assert_uint_eq(m.tensor_bytes, 2 * 2 * 5 * 2);
	/* 2.0 and -inf in IEEE half precision, little-endian */
	ck_assert_uint_eq(((const unsigned char *)m.tensor)[1], 0x40);
	ck_assert_uint_eq(((const unsigned char *)m.tensor)[14], 0x00);
	ck_assert_uint_eq(((const unsigned char *)m.tensor)[15], 0xfc);
	swp_msg_clear(&m);
	golden_free(&g);

	golden_load(&g, "snap_rowstats_f64.msg");
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_int_eq(m.kind, SWP_ROWSTATS);
	ck_assert_int_eq(m.dtype, SWP_F64);
	ck_assert_uint_eq(m.shape[2], SWP_ROWSTATS_FIELDS);
	ck_assert_uint_eq(m.tensor_bytes, sizeof pd);
	memcpy(pd, m.tensor, sizeof pd);
	for (i = 0; i < 4; i++) {
		const double *r = pd + i * 6;	/* s, w, H, hb, Hc, b */
		ck_assert_double_eq_tol(r[0] + r[1], 1.0, 1e-12);
		ck_assert_double_eq_tol(r[2], r[3] + r[1] * r[4], 1e-12);
	}
	ck_assert_double_eq(pd[0], 0.7);
	swp_msg_clear(&m);
	golden_free(&g);

	golden_load(&g, "end_time.msg");
	ck_assert_int_eq(g.n, 2);
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_int_eq(m.type, SWP_END);
	ck_assert_str_eq(m.run, "pythia-160m/seed1");
	ck_assert_uint_eq(m.seq, 5);
	ck_assert_double_eq(m.time, 1796083260.5);
	ck_assert_ptr_null(m.qpos);
	ck_assert_uint_eq(m.tensor_bytes, 0);
	golden_free(&g);

	golden_load(&g, "end_notime.msg");
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_int_eq(m.type, SWP_END);
	ck_assert_uint_eq(m.seq, (1ull << 32) + 5);
	ck_assert(isnan(m.time));
	golden_free(&g);
}
END_TEST

/* What the decoder fills in for version 1: one sender, whole layers. */
static void
assert_v1_defaults(const swp_msg *m)
{
	ck_assert_uint_eq(m->version, 1);
	ck_assert_uint_eq(m->rank, 0);
	ck_assert_uint_eq(m->senders, 1);
	ck_assert_uint_eq(m->head0, 0);
	ck_assert_uint_eq(m->row0, 0);
	ck_assert_uint_eq(m->rows, m->type == SWP_SNAPSHOT ? m->shape[1] : 0);
}

/*
 * The version 2 golden messages (make_golden.py): a 4-layer, 4-head model,
 * a fixed probe of 4 causal rows over 4 keys, two senders sharing INC2.
 */
#define INC2 7356756789248001447ull

struct v2want {
	const char *name, *run;
	uint32_t version, rank, senders, layer;
	uint32_t shape0, shape1, head0, row0, rows;
	uint32_t qpos0;		/* the first row's query position */
	uint64_t inc;
};

START_TEST(test_golden_fields_v2)
{
	static const struct v2want w[] = {
		{ "snap_v2_pipeline.msg", "tiny/pp2", 2, 1, 2, 2, 4, 4, 0, 0, 4, 0, INC2 },
		{ "snap_v2_tensor.msg", "tiny/tp2", 2, 1, 2, 0, 2, 4, 2, 0, 4, 0, INC2 },
		{ "snap_v2_tensor_rank0.msg", "tiny/tp2", 2, 0, 2, 0, 2, 4, 0, 0, 4, 0, INC2 },
		{ "snap_v2_context.msg", "tiny/cp2", 2, 1, 2, 0, 4, 2, 0, 2, 4, 2, INC2 },
		{ "snap_v2_context_rank0.msg", "tiny/cp2", 2, 0, 2, 0, 4, 2, 0, 0, 4, 0, INC2 },
		{ "snap_v2_data.msg", "tiny/dp2", 2, 1, 2, 0, 4, 4, 0, 0, 4, 0, INC2 },
		{ "snap_v2_rows_one_sender.msg", "tiny/cp2", 2, 0, 1, 0, 4, 2, 0, 2, 4, 2, 0 },
	};
	static const char *const v1[] = {
		"snap_probs_f32.msg", "snap_logits_f16.msg", "snap_probs_bf16.msg",
		"snap_rowstats_f64.msg", "end_time.msg", "end_notime.msg",
	};
	float part[4 * 4 * 4], tp[2 * 4 * 4];
	struct golden g;
	swp_msg m;
	char detail[DETAIL];
	size_t i, j;

	for (i = 0; i < sizeof w / sizeof w[0]; i++) {
		golden_load(&g, w[i].name);
		ck_assert_msg(decode_golden(&g, &m, detail) == SWP_OK, "%s: %s", w[i].name,
		    detail);
		ck_assert_int_eq(m.type, SWP_SNAPSHOT);
		ck_assert_str_eq(m.run, w[i].run);
		ck_assert_str_eq(m.model, "tiny-gpt");
		ck_assert_uint_eq(m.layers, 4);
		ck_assert_uint_eq(m.heads, 4);
		ck_assert_uint_eq(m.layer, w[i].layer);
		ck_assert_int_eq(m.step, 200);
		ck_assert_uint_eq(m.version, w[i].version);
		ck_assert_uint_eq(m.rank, w[i].rank);
		ck_assert_uint_eq(m.senders, w[i].senders);
		ck_assert_uint_eq(m.inc, w[i].inc);
		ck_assert_uint_eq(m.shape[0], w[i].shape0);
		ck_assert_uint_eq(m.shape[1], w[i].shape1);
		ck_assert_uint_eq(m.shape[2], 4);
		ck_assert_uint_eq(m.head0, w[i].head0);
		ck_assert_uint_eq(m.row0, w[i].row0);
		ck_assert_uint_eq(m.rows, w[i].rows);
		/* qpos has the message's rows: row0, row0 + 1, ... (causal probe) */
		ck_assert_ptr_nonnull(m.qpos);
		for (j = 0; j < m.shape[1]; j++)
			ck_assert_uint_eq(m.qpos[j], w[i].qpos0 + j);
		/* rows of probabilities: row at position p has p + 1 valid keys */
		ck_assert_uint_eq(m.tensor_bytes, (size_t)m.shape[0] * m.shape[1] * 4 * 4);
		memcpy(part, m.tensor, m.tensor_bytes);
		for (j = 0; j < (size_t)m.shape[0] * m.shape[1]; j++) {
			uint32_t nv = m.qpos[j % m.shape[1]] + 1, k;
			float s = 0;
			for (k = 0; k < 4; k++) {
				if (k < nv)
					s += part[j * 4 + k];
				else
					ck_assert_float_eq(part[j * 4 + k], 0.0f);
			}
			ck_assert_float_eq(s, 1.0f);
		}
		swp_msg_clear(&m);
		golden_free(&g);
	}

	/* the two tensor parallel parts are the heads of the data parallel layer */
	golden_load(&g, "snap_v2_data.msg");
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	memcpy(part, m.tensor, sizeof part);
	swp_msg_clear(&m);
	golden_free(&g);
	for (i = 0; i < 2; i++) {
		golden_load(&g, i ? "snap_v2_tensor.msg" : "snap_v2_tensor_rank0.msg");
		ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
		memcpy(tp, m.tensor, sizeof tp);
		ck_assert_mem_eq(tp, part + m.head0 * 4 * 4, sizeof tp);
		swp_msg_clear(&m);
		golden_free(&g);
	}
	/* ... and the context parallel parts its rows */
	for (i = 0; i < 2; i++) {
		golden_load(&g, i ? "snap_v2_context.msg" : "snap_v2_context_rank0.msg");
		ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
		memcpy(tp, m.tensor, sizeof tp);
		for (j = 0; j < 4; j++)
			ck_assert_mem_eq(tp + j * 2 * 4, part + (j * 4 + m.row0) * 4,
			    2 * 4 * sizeof(float));
		swp_msg_clear(&m);
		golden_free(&g);
	}

	golden_load(&g, "end_v2.msg");
	ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
	ck_assert_int_eq(m.type, SWP_END);
	ck_assert_uint_eq(m.version, 2);
	ck_assert_uint_eq(m.seq, 8);
	ck_assert_uint_eq(m.rank, 1);
	ck_assert_uint_eq(m.senders, 2);
	ck_assert_uint_eq(m.inc, INC2);
	ck_assert_uint_eq(m.head0, 0);
	ck_assert_uint_eq(m.rows, 0);
	golden_free(&g);

	/* every version 1 message decodes as one sender of whole layers */
	for (i = 0; i < sizeof v1 / sizeof v1[0]; i++) {
		golden_load(&g, v1[i]);
		ck_assert_int_eq(decode_golden(&g, &m, detail), SWP_OK);
		assert_v1_defaults(&m);
		swp_msg_clear(&m);
		golden_free(&g);
	}
}
END_TEST

/* The bad version 2 messages fail for the reason their name gives. */
START_TEST(test_golden_bad_v2_details)
{
	static const struct {
		const char *name, *detail;
	} w[] = {
		{ "bad_v2_rank.msg", "rank: 2, senders 2" },
		{ "bad_v2_senders_0.msg", "senders: 0, not in 1..65536" },
		{ "bad_v2_head0.msg", "head0: 4, heads 4" },
		{ "bad_v2_head0_shape.msg", "shape[0]: 2 heads from head0 3, heads 4" },
		{ "bad_v2_rows_0.msg", "rows: 0, not in 1..65536" },
		{ "bad_v2_row0_shape.msg", "shape[1]: 2 rows from row0 3, rows 4" },
		{ "bad_v2_no_inc.msg", "inc: required with senders 2" },
		{ "bad_v2_end_no_inc.msg", "inc: required with senders 2" },
		{ "bad_v1_part.msg", "shape[0]: 2, heads 4" },
	};
	struct golden g;
	swp_msg m;
	char detail[DETAIL];
	size_t i;

	for (i = 0; i < sizeof w / sizeof w[0]; i++) {
		golden_load(&g, w[i].name);
		ck_assert_int_lt(decode_golden(&g, &m, detail), 0);
		ck_assert_msg(strncmp(detail, w[i].detail, strlen(w[i].detail)) == 0,
		    "%s: detail \"%s\"", w[i].name, detail);
		golden_free(&g);
	}
}
END_TEST

/* Every strict prefix of a valid header is truncated msgpack, nothing else. */
START_TEST(test_golden_truncation)
{
	int i;

	manifest_load();
	for (i = 0; i < nmanifest; i++) {
		struct golden g;
		size_t sizes[MAXFRAMES], l;
		const void *frames[MAXFRAMES];
		char detail[DETAIL];
		swp_msg m;
		int rc;

		if (strcmp(manifest[i].err, "ok") != 0)
			continue;
		golden_load(&g, manifest[i].name);
		memcpy(frames, g.frames, sizeof frames);
		memcpy(sizes, g.sizes, sizeof sizes);
		for (l = 0; l < g.sizes[1]; l++) {
			/* a copy of exactly l bytes, so ASan sees any read past it */
			unsigned char *h = malloc(l ? l : 1);
			memcpy(h, g.frames[1], l);
			frames[1] = h;
			sizes[1] = l;
			rc = swp_decode(frames, sizes, (size_t)g.n, NULL, &m, detail, DETAIL);
			if (l == 0)
				ck_assert_int_eq(rc, SWP_E_HEADER_SIZE);
			else {
				ck_assert_msg(rc == SWP_E_MSGPACK, "%s cut at %zu: %s (%s)",
				    manifest[i].name, l, swp_errname(rc), detail);
				ck_assert_msg(strncmp(detail, "truncated", 9) == 0,
				    "%s cut at %zu: detail \"%s\"", manifest[i].name, l, detail);
			}
			ck_assert_ptr_null(m.qpos);
			free(h);
		}
		golden_free(&g);
	}
}
END_TEST

/* Random corruption never crashes, and whatever decodes also encodes. */
START_TEST(test_golden_byte_flips)
{
	struct golden gs[16];
	int ng = 0, i, it;

	manifest_load();
	for (i = 0; i < nmanifest && ng < 16; i++)
		if (strcmp(manifest[i].err, "ok") == 0)
			golden_load(&gs[ng++], manifest[i].name);
	ck_assert_int_gt(ng, 0);
	for (it = 0; it < 5000; it++) {
		const struct golden *g = &gs[rndn((uint64_t)ng)];
		const void *frames[MAXFRAMES];
		size_t sizes[MAXFRAMES], nflip = 1 + rndn(4), j, f, hl;
		unsigned char *copy[3] = { NULL, NULL, NULL };
		char detail[DETAIL];
		swp_msg m;
		int rc;

		for (f = 0; f < (size_t)g->n; f++) {
			copy[f] = malloc(g->sizes[f] + 1);
			memcpy(copy[f], g->frames[f], g->sizes[f]);
			frames[f] = copy[f];
			sizes[f] = g->sizes[f];
		}
		hl = sizes[1];
		for (j = 0; j < nflip; j++) {
			/* mostly the header, sometimes the topic */
			f = rndn(8) == 0 ? 0 : 1;
			copy[f][rndn(sizes[f])] ^= (unsigned char)(1 + rndn(255));
		}
		if (rndn(8) == 0)
			sizes[1] = rndn(hl);	/* a random cut on top */
		rc = swp_decode(frames, sizes, (size_t)g->n, NULL, &m, detail, DETAIL);
		ck_assert_int_le(rc, 0);
		ck_assert_int_ge(rc, SWP_E_INVAL);
		if (rc == SWP_OK) {
			void *out;
			size_t len;
			ck_assert_int_eq(swp_encode_header(&m, &out, &len), SWP_OK);
			free(out);
			swp_msg_clear(&m);
		} else
			ck_assert_ptr_null(m.qpos);
		for (f = 0; f < 3; f++)
			free(copy[f]);
	}
	for (i = 0; i < ng; i++)
		golden_free(&gs[i]);
}
END_TEST

/* Random bytes as a header: the pre-scan and msgpack-c agree, no crash. */
/*
 * Random headers with the reason each must get. The cases: random bytes;
 * a fixmap and random bytes; a fixmap with "v" and a version byte, then
 * random bytes; the same with a type, then random bytes. The reasons are
 * in tests/data/random_headers.txt, from proto.py's decoder, and
 * tests/e2e/differential.py checks that file against both decoders on these
 * very bytes (it generates them the same way), so a C decoder that drifts
 * from the specification fails here with the case and both reasons.
 */
#define RANDOM_HEADERS_FILE SW_GOLDEN_DIR "/../random_headers.txt"
#define RANDOM_HEADERS_N 3000

static uint64_t
splitmix(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct token {
	size_t n;
	const char *b;
};

/* The pieces of the random headers: msgpack strs of the keys, and values. */
static const struct token rh_keys[] = {
		{ 2, "\xa1v" },
		{ 4, "\xa3run" },
		{ 4, "\xa3seq" },
		{ 6, "\xa5model" },
		{ 7, "\xa6params" },
		{ 7, "\xa6layers" },
		{ 6, "\xa5heads" },
		{ 5, "\xa4sink" },
		{ 12, "\xab" "fixed_probe" },
		{ 5, "\xa4step" },
		{ 6, "\xa5layer" },
		{ 5, "\xa4kind" },
		{ 6, "\xa5" "dtype" },
		{ 6, "\xa5shape" },
		{ 5, "\xa4qpos" },
		{ 5, "\xa4time" },
		{ 4, "\xa3inc" },
		{ 7, "\xa6resume" },
		{ 5, "\xa4rank" },
		{ 8, "\xa7senders" },
		{ 6, "\xa5head0" },
		{ 5, "\xa4row0" },
		{ 5, "\xa4rows" },
		{ 4, "\xa3zzz" }
};
static const struct token rh_values[] = {
		{ 2, "\xa1x" },
		{ 1, "\xa0" },
		{ 1, "\x00" },
		{ 1, "\x01" },
		{ 1, "\x02" },
		{ 1, "\x05" },
		{ 2, "\xcc\xff" },
		{ 3, "\xcd\x01\x00" },
		{ 5, "\xce\x00\x01\x00\x00" },
		{ 1, "\xc0" },
		{ 1, "\xc3" },
		{ 1, "\xc2" },
		{ 1, "\xff" },
		{ 6, "\xa5probs" },
		{ 9, "\xa8rowstats" },
		{ 4, "\xa3" "f32" },
		{ 4, "\xa3" "f16" },
		{ 4, "\x93\x01\x01\x02" },
		{ 4, "\x93\x01\x01\x06" },
		{ 3, "\x92\x01\x01" },
		{ 2, "\x91\x00" },
		{ 1, "\x90" },
		{ 9, "\xcb" "A\xd0\x00\x00\x00\x00\x00\x00" },
		{ 1, "\x80" }
};
#define NTOK(t) (sizeof(t) / sizeof((t)[0]))

/* A key (or a value), 1 in 8 a random byte instead. */
static size_t
rh_piece(uint64_t *st, const struct token *t, size_t nt, unsigned char *h)
{
	if (splitmix(st) % 8 == 0) {
		h[0] = (unsigned char)splitmix(st);
		return 1;
	}
	t += splitmix(st) % nt;
	memcpy(h, t->b, t->n);
	return t->n;
}

/*
 * Case it of the random headers into h (room for 512 bytes); its length.
 * Case it % 4: 0, 1 to 24 pieces, keys or values; 1, a fixmap of a random
 * size and such pieces; 2, a fixmap holding "v", a version byte and 0 to
 * 13 key-value pairs; 3, the same with a type after "v" (snapshot, end,
 * an unknown name or a number).
 */
static size_t
random_header(uint64_t *st, int it, unsigned char *h)
{
	size_t n = 0, i, k;

	if (it % 4 < 2) {
		if (it % 4 == 1)
			h[n++] = (unsigned char)(0x80 | splitmix(st) % 16);
		k = 1 + splitmix(st) % 24;
		for (i = 0; i < k; i++)
			n += splitmix(st) % 2 ? rh_piece(st, rh_keys, NTOK(rh_keys), h + n) :
			    rh_piece(st, rh_values, NTOK(rh_values), h + n);
		return n;
	}
	k = splitmix(st) % 14;
	h[n++] = (unsigned char)(0x80 | (k + (size_t)(it % 4 == 3) + 1));
	memcpy(h + n, "\xa1v", 2);
	n += 2;
	h[n++] = (unsigned char)(splitmix(st) % 4 ? 1 + splitmix(st) % 2 : splitmix(st));
	if (it % 4 == 3) {
		static const struct token types[4] = {
			{ 14, "\xa4type\xa8snapshot" }, { 9, "\xa4type\xa3" "end" },
			{ 10, "\xa4type\xa4snap" }, { 6, "\xa4type\x01" }
		};
		const struct token *t = &types[splitmix(st) % 4];
		memcpy(h + n, t->b, t->n);
		n += t->n;
	}
	for (i = 0; i < k; i++) {
		n += rh_piece(st, rh_keys, NTOK(rh_keys), h + n);
		n += rh_piece(st, rh_values, NTOK(rh_values), h + n);
	}
	return n;
}

static uint32_t
fnv1a(const unsigned char *p, size_t n)
{
	uint32_t h = 0x811c9dc5u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x01000193u;
	return h;
}

START_TEST(test_random_headers)
{
	FILE *f = fopen(RANDOM_HEADERS_FILE, "r");
	uint64_t st = 0x5eed;
	char line[256];
	int it = 0, seen[14] = { 0 }, kinds = 0;

	ck_assert_msg(f != NULL, "%s missing", RANDOM_HEADERS_FILE);
	while (fgets(line, sizeof line, f) != NULL) {
		unsigned char h[512];
		const void *frames[3];
		size_t sizes[3] = { 4, 0, 0 };
		char detail[DETAIL], want[32];
		unsigned long long len;
		unsigned hash;
		int idx, rc;
		swp_msg m;

		if (line[0] == '#')
			continue;
		ck_assert_int_eq(sscanf(line, "%d %llu %x %31s", &idx, &len, &hash, want), 4);
		ck_assert_int_eq(idx, it);
		sizes[1] = random_header(&st, it, h);
		/* the same bytes the expectation was made from */
		ck_assert_msg(sizes[1] == len && fnv1a(h, sizes[1]) == hash,
		    "case %d: the header differs from the one in %s (generator drift)",
		    it, RANDOM_HEADERS_FILE);
		frames[0] = "sw/x";
		frames[1] = h;
		frames[2] = "";
		rc = swp_decode(frames, sizes, 3, NULL, &m, detail, DETAIL);
		ck_assert_msg(strcmp(swp_errname(rc), want) == 0,
		    "case %d: %s (%s), expected %s", it, swp_errname(rc), detail, want);
		if (rc == SWP_OK)
			swp_msg_clear(&m);
		if (seen[-rc]++ == 0)
			kinds++;
		it++;
	}
	fclose(f);
	ck_assert_int_eq(it, RANDOM_HEADERS_N);
	/* the cases reach past the msgpack checks */
	ck_assert_int_ge(kinds, 5);
}
END_TEST

/* ---- encoder, decoder, round trips --------------------------------------- */

static void
rnd_str(char *s, size_t n, bool run)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c;
		do
			c = (unsigned char)rnd();
		while (c == 0 || (run && (c < 0x20 || c == 0x7f)));
		s[i] = (char)c;
	}
	s[n] = '\0';
}

/* inc and resume: optional, canonical after time, checked like the others. */
START_TEST(test_inc_resume)
{
	static const unsigned char t[4 * 2 * 3];
	swp_msg m, d;
	void *hdr;
	size_t len;
	char detail[DETAIL];
	const void *frames[3];
	size_t sizes[3];
	char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX];
	int tl;

	msg_default(&m);
	m.tensor = t;
	m.tensor_bytes = sizeof t;
	m.shape[0] = m.heads = 1;
	m.shape[1] = 2;
	m.shape[2] = 3;
	m.dtype = SWP_F32;
	m.kind = SWP_PROBS;
	m.sink = 0;
	m.inc = 0x0123456789abcdefull;
	m.has_resume = true;
	m.resume = 41;
	ck_assert_int_eq(swp_encode_header(&m, &hdr, &len), SWP_OK);
	/* the last two keys: "inc" uint64, "resume" 41 */
	ck_assert_uint_ge(len, 21);
	ck_assert(memcmp((char *)hdr + len - 21, "\xa3inc\xcf\x01\x23\x45\x67\x89\xab\xcd\xef"
	    "\xa6resume\x29", 21) == 0);
	tl = swp_topic(m.run, topic, sizeof topic);
	frames[0] = topic, sizes[0] = (size_t)tl;
	frames[1] = hdr, sizes[1] = len;
	frames[2] = t, sizes[2] = sizeof t;
	ck_assert_int_eq(swp_decode(frames, sizes, 3, NULL, &d, detail, DETAIL), SWP_OK);
	ck_assert_uint_eq(d.inc, m.inc);
	ck_assert(d.has_resume);
	ck_assert_int_eq(d.resume, 41);
	swp_msg_clear(&d);
	free(hdr);
	m.resume = -1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.has_resume = false;
	m.inc = 0;
	ck_assert_int_eq(swp_encode_header(&m, &hdr, &len), SWP_OK);
	frames[1] = hdr, sizes[1] = len;
	ck_assert_int_eq(swp_decode(frames, sizes, 3, NULL, &d, detail, DETAIL), SWP_OK);
	ck_assert_uint_eq(d.inc, 0);
	ck_assert(!d.has_resume);
	swp_msg_clear(&d);
	free(hdr);
}
END_TEST

/* ---- version 2: several senders, parts of a layer ------------------------ */

static const unsigned char zeros[4096];

/* Decodes a header (with a zero tensor of m's size); detail may be NULL. */
static int
decode_hdr(const swp_msg *m, const void *hdr, size_t len, swp_msg *d, char *detail)
{
	char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX], dbuf[DETAIL];
	const void *frames[3];
	size_t sizes[3];
	int tl = swp_topic(m->run, topic, sizeof topic);

	ck_assert_int_gt(tl, 0);
	ck_assert_uint_le(m->tensor_bytes, sizeof zeros);
	frames[0] = topic, sizes[0] = (size_t)tl;
	frames[1] = hdr, sizes[1] = len;
	frames[2] = zeros, sizes[2] = m->type == SWP_SNAPSHOT ? m->tensor_bytes : 0;
	return swp_decode(frames, sizes, m->type == SWP_SNAPSHOT ? 3 : 2, NULL, d,
	    detail ? detail : dbuf, DETAIL);
}

/*
 * m encodes to exactly the bytes the field-by-field builder makes of h,
 * with "v" = v; those bytes decode into *d (cleared by the caller) and
 * re-encode to themselves.
 */
static void
check_canonical(const swp_msg *m, const struct hb *h, uint64_t v, swp_msg *d)
{
	unsigned char *want;
	void *got, *again;
	size_t wl, gl, al;
	char detail[DETAIL];

	ck_assert_uint_eq(h->v, v);
	want = hb_build(h, &wl);
	ck_assert_int_eq(swp_encode_header(m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	/* "v" is the first key, its value the byte after it (both fit a fixint) */
	ck_assert_uint_eq(((unsigned char *)got)[((unsigned char *)got)[0] == 0xde ? 5 : 3], v);
	ck_assert_msg(decode_hdr(m, got, gl, d, detail) == SWP_OK, "%s", detail);
	ck_assert_uint_eq(d->version, v);
	ck_assert_int_eq(swp_encode_header(d, &again, &al), SWP_OK);
	ck_assert_uint_eq(al, gl);
	ck_assert_mem_eq(again, got, gl);
	free(want);
	free(got);
	free(again);
}

/* The presence rules of the canonical form, one at a time and all together. */
START_TEST(test_v2_canonical)
{
	static const uint32_t q32[5] = { 4, 5, 6, 7, 8 };
	static const uint64_t q64[5] = { 4, 5, 6, 7, 8 };
	struct hb h;
	swp_msg m, d;

	/* one sender of whole layers: version 1, no version 2 key */
	hb_default(&h);
	msg_default(&m);
	m.tensor = zeros;
	check_canonical(&m, &h, 1, &d);
	ck_assert_uint_eq(d.senders, 1);
	ck_assert_uint_eq(d.rows, 3);
	swp_msg_clear(&d);
	m.senders = 1;		/* 0 and 1 say the same */
	m.rows = 3;		/* 0 and shape[1] say the same */
	m.version = 7;		/* ignored by the encoder */
	check_canonical(&m, &h, 1, &d);
	swp_msg_clear(&d);

	/* senders > 1: rank and senders both, even rank 0; inc required */
	msg_default(&m);
	m.tensor = zeros;
	m.senders = 2;
	m.inc = 9;
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_INC) | BIT(K_RANK) | BIT(K_SENDERS);
	h.inc = 9;
	h.rank = 0;
	h.senders = 2;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.rank, 0);
	ck_assert_uint_eq(d.senders, 2);
	ck_assert_uint_eq(d.inc, 9);
	swp_msg_clear(&d);
	m.rank = h.rank = 1;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.rank, 1);
	swp_msg_clear(&d);

	/* fewer heads than the model: head0, even 0; no rank, no inc needed */
	msg_default(&m);
	m.tensor = zeros;
	m.shape[0] = 1;
	m.tensor_bytes = 1 * 3 * 4 * 4;
	hb_default(&h);
	h.shape[0] = 1;
	h.v = 2;
	h.set = BIT(K_HEAD0);
	h.head0 = 0;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.head0, 0);
	ck_assert_uint_eq(d.shape[0], 1);
	ck_assert_uint_eq(d.heads, 2);
	ck_assert_uint_eq(d.senders, 1);
	swp_msg_clear(&d);
	m.head0 = h.head0 = 1;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.head0, 1);
	swp_msg_clear(&d);

	/* fewer rows than the probe: row0 and rows both, even row0 0 */
	msg_default(&m);
	m.tensor = zeros;
	m.rows = 5;
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_ROW0) | BIT(K_ROWS);
	h.rows = 5;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.row0, 0);
	ck_assert_uint_eq(d.rows, 5);
	swp_msg_clear(&d);
	m.row0 = h.row0 = 2;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.row0, 2);
	ck_assert_uint_eq(d.shape[1], 3);
	swp_msg_clear(&d);

	/* every key at once, in the canonical order: ..., qpos, time, inc, resume,
	 * rank, senders, head0, row0, rows */
	msg_default(&m);
	m.tensor = zeros;
	m.heads = 8;
	m.shape[0] = 3;
	m.head0 = 5;
	m.shape[1] = 5;
	m.row0 = 300;
	m.rows = 65536;
	m.tensor_bytes = 3 * 5 * 4 * 4;
	m.qpos = (uint32_t *)q32;
	m.time = 2.5;
	m.inc = UINT64_MAX;
	m.has_resume = true;
	m.resume = 7;
	m.rank = 65535;
	m.senders = SWP_SENDERS_MAX;
	hb_default(&h);
	h.v = 2;
	h.heads = 8;
	h.shape[0] = 3;
	h.shape[1] = 5;
	h.qpos = q64;
	h.nqpos = 5;
	h.time = 2.5;
	h.set = BIT(K_INC) | BIT(K_RESUME) | BIT(K_RANK) | BIT(K_SENDERS) | BIT(K_HEAD0) |
	    BIT(K_ROW0) | BIT(K_ROWS);
	h.inc = UINT64_MAX;
	h.resume = 7;
	h.rank = 65535;
	h.senders = SWP_SENDERS_MAX;
	h.head0 = 5;
	h.row0 = 300;
	h.rows = 65536;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.rank, 65535);
	ck_assert_uint_eq(d.senders, SWP_SENDERS_MAX);
	ck_assert_uint_eq(d.head0, 5);
	ck_assert_uint_eq(d.row0, 300);
	ck_assert_uint_eq(d.rows, 65536);
	ck_assert_mem_eq(d.qpos, q32, sizeof q32);
	swp_msg_clear(&d);

	/* an end: rank and senders by the same rule, never head0, row0, rows */
	msg_default(&m);
	m.type = SWP_END;
	m.shape[0] = 1;
	m.head0 = 1;
	m.row0 = 1;
	m.rows = 9;
	hb_default(&h);
	h.type = "end";
	check_canonical(&m, &h, 1, &d);
	ck_assert_uint_eq(d.senders, 1);
	ck_assert_uint_eq(d.head0, 0);
	ck_assert_uint_eq(d.rows, 0);
	swp_msg_clear(&d);
	m.senders = 3;
	m.rank = 2;
	m.inc = 77;
	h.v = 2;
	h.set = BIT(K_INC) | BIT(K_RANK) | BIT(K_SENDERS);
	h.inc = 77;
	h.rank = 2;
	h.senders = 3;
	check_canonical(&m, &h, 2, &d);
	ck_assert_uint_eq(d.rank, 2);
	ck_assert_uint_eq(d.senders, 3);
	swp_msg_clear(&d);
}
END_TEST

/* Decoding: defaults for what is absent or nil, and what is not canonical. */
START_TEST(test_v2_decode_defaults)
{
	struct hb h;
	struct env e = { 0 };
	swp_msg m;
	char detail[DETAIL];
	unsigned char *want;
	void *got;
	size_t wl, gl;
	int k;

	/* version 1: rank 0, senders 1, head0 0, row0 0, rows = shape[1] */
	hb_default(&h);
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	assert_v1_defaults(&m);
	ck_assert_uint_eq(m.rows, 3);
	swp_msg_clear(&m);
	h.type = "end";
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	assert_v1_defaults(&m);

	/* version 1 knows no version 2 key: each is skipped, whatever its value,
	 * type or count, and the message decodes as a v1 decoder decodes it */
	hb_default(&h);
	h.set = BIT(K_RANK) | BIT(K_SENDERS) | BIT(K_HEAD0) | BIT(K_ROW0) | BIT(K_ROWS);
	h.rank = 5;		/* >= senders, and no inc */
	h.senders = 2;
	h.head0 = 1;		/* with shape[0] = heads: beyond the heads */
	h.row0 = 70000;
	h.rows = 0;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	assert_v1_defaults(&m);
	/* ... and re-encodes without them: accepted, not canonical */
	want = hb_build(&h, &wl);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_lt(gl, wl);
	free(want);
	free(got);
	hb_default(&h);
	want = hb_build(&h, &wl);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	free(want);
	free(got);
	swp_msg_clear(&m);
	hb_default(&h);
	h.set = BIT(K_HEAD0);
	h.wrong = K_HEAD0;	/* a str */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	h.nextra = 1;		/* twice */
	h.extra = (const unsigned char *)"\xa5head0\x01";
	h.extralen = 7;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	/* a v1 part of the heads is a shape error, whatever head0 says */
	hb_default(&h);
	h.set = BIT(K_HEAD0);
	h.shape[0] = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	ck_assert_str_eq(detail, "shape[0]: 1, heads 2");

	/* version 2 without any version 2 key: accepted with the defaults,
	 * re-encoded as version 1 */
	hb_default(&h);
	h.v = 2;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.version, 2);
	ck_assert_uint_eq(m.senders, 1);
	ck_assert_uint_eq(m.rows, 3);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(((unsigned char *)got)[3], 1);
	free(got);
	swp_msg_clear(&m);

	/* version 2 keys that say what their absence says: accepted, left out on
	 * re-encoding */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_RANK) | BIT(K_SENDERS) | BIT(K_HEAD0) | BIT(K_ROW0) | BIT(K_ROWS);
	h.senders = 1;
	h.rows = 3;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.senders, 1);
	ck_assert_uint_eq(m.rows, 3);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	hb_default(&h);
	want = hb_build(&h, &wl);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	free(want);
	free(got);
	swp_msg_clear(&m);

	/* one of a pair alone: the other takes its default */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_ROWS);
	h.rows = 5;		/* row0 0 */
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.row0, 0);
	ck_assert_uint_eq(m.rows, 5);
	swp_msg_clear(&m);
	h.set = BIT(K_ROW0);
	h.row0 = 1;		/* rows = shape[1]: no room after row 1 */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	h.set = BIT(K_SENDERS);
	h.senders = 2;		/* rank 0 */
	h.set |= BIT(K_INC);
	h.inc = 1;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.rank, 0);
	ck_assert_uint_eq(m.senders, 2);
	swp_msg_clear(&m);
	h.set = BIT(K_RANK);
	h.rank = 1;		/* senders 1 */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_str_eq(detail, "rank: 1, senders 1");

	/* nil is absent, for each version 2 key */
	for (k = K_RANK; k <= K_ROWS; k++) {
		hb_default(&h);
		h.v = 2;
		h.set = BIT(k);
		h.nil = BIT(k);
		ck_assert_msg(try_env(&h, &e, &m, detail) == SWP_OK, "%s nil: %s", keys[k],
		    detail);
		ck_assert_uint_eq(m.version, 2);
		ck_assert_uint_eq(m.rank, 0);
		ck_assert_uint_eq(m.senders, 1);
		ck_assert_uint_eq(m.head0, 0);
		ck_assert_uint_eq(m.row0, 0);
		ck_assert_uint_eq(m.rows, 3);
		swp_msg_clear(&m);
	}
	/* a nil senders with rank 1 is senders 1; a nil inc is no inc */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_RANK) | BIT(K_SENDERS);
	h.nil = BIT(K_SENDERS);
	h.rank = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	h.nil = BIT(K_INC);
	h.set |= BIT(K_INC);
	h.senders = 2;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	ck_assert_ptr_nonnull(strstr(detail, "inc: required"));

	/* of the right type only: any width of uint, nothing else */
	for (k = K_RANK; k <= K_ROWS; k++) {
		hb_default(&h);
		h.v = 2;
		h.set = BIT(k);
		h.wrong = k;
		ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
		ck_assert_msg(strncmp(detail, keys[k], strlen(keys[k])) == 0 &&
		    strstr(detail, "not an unsigned integer") != NULL, "%s: %s", keys[k],
		    detail);
	}
	hb_default(&h);
	h.v = 2;
	h.nextra = 1;
	h.extra = (const unsigned char *)"\xa7senders\xff";	/* -1 */
	h.extralen = 9;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	h.extra = (const unsigned char *)"\xa5head0\xcb\0\0\0\0\0\0\0\0";	/* 0.0 */
	h.extralen = 15;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	h.extra = (const unsigned char *)"\xa4rows\xcf\0\0\0\0\0\0\0\x03";
	h.extralen = 14;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.rows, 3);
	swp_msg_clear(&m);
	h.extra = (const unsigned char *)"\xa4rows\xd0\x05";	/* int 8, >= 0 */
	h.extralen = 7;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.rows, 5);
	swp_msg_clear(&m);
	/* known in version 2, so twice is a field error */
	h.set = BIT(K_ROWS);
	h.rows = 5;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	ck_assert_str_eq(detail, "rows: duplicate key");

	/* an end's head0, row0 and rows are not its keys: their values are ignored */
	hb_default(&h);
	h.type = "end";
	h.v = 2;
	h.set = BIT(K_HEAD0) | BIT(K_ROW0) | BIT(K_ROWS);
	h.head0 = 9;
	h.row0 = 9;
	h.rows = 0;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.head0, 0);
	ck_assert_uint_eq(m.row0, 0);
	ck_assert_uint_eq(m.rows, 0);
}
END_TEST

/* Every version 2 limit, just inside and just outside, decoder and encoder. */
START_TEST(test_v2_limits)
{
	struct hb h;
	struct env e = { 0 };
	swp_msg m;
	char detail[DETAIL];

	/* senders 1..65536, never truncated to 32 bits */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_INC) | BIT(K_RANK) | BIT(K_SENDERS);
	h.inc = 1;
	h.senders = SWP_SENDERS_MAX;
	h.rank = SWP_SENDERS_MAX - 1;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.senders, SWP_SENDERS_MAX);
	ck_assert_uint_eq(m.rank, SWP_SENDERS_MAX - 1);
	h.senders = SWP_SENDERS_MAX + 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_str_eq(detail, "senders: 65537, not in 1..65536");
	h.senders = (1ull << 32) + 2;
	h.rank = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	h.senders = 0;
	h.rank = 0;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	/* rank < senders, never truncated */
	h.senders = 2;
	h.rank = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.rank = 2;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_str_eq(detail, "rank: 2, senders 2");
	h.rank = 1ull << 32;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	/* senders > 1 needs inc; 0 and nil are no inc */
	h.rank = 0;
	h.set &= ~BIT(K_INC);
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	ck_assert_str_eq(detail, "inc: required with senders 2 (the senders of one "
	    "incarnation share it)");
	h.set |= BIT(K_INC);
	h.inc = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	h.inc = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.senders = 1;		/* one sender needs none */
	h.set &= ~BIT(K_INC);
	ck_assert_int_eq(try_hb(&h), SWP_OK);

	/* head0 < heads, never truncated; shape[0] in 1 .. heads - head0 */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_HEAD0);
	h.shape[0] = 1;
	h.head0 = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.head0 = 2;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_str_eq(detail, "head0: 2, heads 2");
	h.head0 = (1ull << 32) + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.head0 = 1;
	h.shape[0] = 2;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	ck_assert_str_eq(detail, "shape[0]: 2 heads from head0 1, heads 2");
	h.head0 = 0;
	ck_assert_int_eq(try_hb(&h), SWP_OK);	/* all heads, head0 0: not canonical */
	h.shape[0] = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.shape[0] = 3;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.set = 0;		/* version 2 without head0: shape[0] <= heads */
	h.shape[0] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.shape[0] = 3;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);

	/* rows 1..65536, never truncated; row0 < rows; shape[1] <= rows - row0 */
	hb_default(&h);
	h.v = 2;
	h.set = BIT(K_ROW0) | BIT(K_ROWS);
	h.shape[1] = 1;
	h.rows = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.rows = SWP_ROWS_MAX;
	h.row0 = SWP_ROWS_MAX - 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.row0 = SWP_ROWS_MAX;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	ck_assert_str_eq(detail, "shape[1]: 1 rows from row0 65536, rows 65536");
	h.row0 = 1ull << 32;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.row0 = 0;
	h.rows = SWP_ROWS_MAX + 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_str_eq(detail, "rows: 65537, not in 1..65536");
	h.rows = (1ull << 32) + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.rows = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.shape[1] = 3;
	h.rows = 5;
	h.row0 = 2;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.row0 = 3;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.rows = 2;		/* fewer rows in all than in the message */
	h.row0 = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);

	/* an end: senders, rank and inc checked as for a snapshot */
	hb_default(&h);
	h.type = "end";
	h.v = 2;
	h.set = BIT(K_INC) | BIT(K_RANK) | BIT(K_SENDERS);
	h.inc = 1;
	h.senders = 2;
	h.rank = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.rank = 2;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.rank = 0;
	h.senders = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.senders = 2;
	h.set &= ~BIT(K_INC);
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
}
END_TEST

/* The encoder refuses exactly what the decoder would. */
START_TEST(test_v2_encoder_errors)
{
	swp_msg m;

	msg_default(&m);
	m.rank = 1;		/* senders 0: one sender */
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.senders = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.senders = 2;
	ck_assert_int_eq(encode_rc(&m), SWP_E_FIELD);	/* no inc */
	m.inc = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_OK);
	m.senders = SWP_SENDERS_MAX + 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.senders = UINT32_MAX;
	m.rank = UINT32_MAX - 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);

	msg_default(&m);
	m.head0 = 2;		/* = heads */
	m.shape[0] = 1;
	m.tensor_bytes /= 2;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.head0 = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_OK);
	m.shape[0] = 2;		/* heads 1..2 of 0..1 */
	m.tensor_bytes *= 2;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);
	msg_default(&m);
	m.shape[0] = 0;
	m.tensor_bytes = 0;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);

	msg_default(&m);
	m.rows = SWP_ROWS_MAX + 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.rows = 4;
	m.row0 = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_OK);
	m.row0 = 2;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);
	m.rows = 2;		/* under shape[1] */
	m.row0 = 0;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);
	m.rows = 0;		/* shape[1] */
	m.row0 = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);

	/* an end checks rank and senders; it has no heads and rows to check */
	msg_default(&m);
	m.type = SWP_END;
	m.head0 = 99;
	m.row0 = 99;
	ck_assert_int_eq(encode_rc(&m), SWP_OK);
	m.rank = 1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	m.senders = 2;
	ck_assert_int_eq(encode_rc(&m), SWP_E_FIELD);
	m.inc = 5;
	ck_assert_int_eq(encode_rc(&m), SWP_OK);
}
END_TEST

/* Two faults at once: PROTOCOL.md section 8, check 13, says which is reported. */
START_TEST(test_v2_check_order)
{
	struct hb h;
	struct env e = { 0 };
	char detail[DETAIL];

#define V2(hh) do { hb_default(&(hh)); (hh).v = 2; } while (0)
#define EXPECT(err, what) do { \
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), (err)); \
	ck_assert_msg(strncmp(detail, (what), strlen(what)) == 0, "detail \"%s\", " \
	    "expected \"%s\"", detail, (what)); \
} while (0)

	V2(h);			/* field types before limits */
	h.layers = 0;
	h.set = BIT(K_ROWS);
	h.wrong = K_ROWS;
	EXPECT(SWP_E_FIELD, "rows");
	V2(h);			/* and in key order: resume before rank */
	h.set = BIT(K_RESUME) | BIT(K_RANK);
	h.wrong = K_RANK;
	h.nextra = 0;
	{
		static const unsigned char r[] = "\xa6resume\xa1x";
		h.set = BIT(K_RANK);
		h.extra = r;
		h.extralen = sizeof r - 1;
		h.nextra = 1;
	}
	EXPECT(SWP_E_FIELD, "resume");
	hb_default(&h);		/* the version before the version 2 keys */
	h.v = 3;
	h.set = BIT(K_RANK);
	h.wrong = K_RANK;
	EXPECT(SWP_E_VERSION, "v: 3");
	V2(h);			/* heads before head0 */
	h.heads = 0;
	h.set = BIT(K_HEAD0);
	h.head0 = 5;
	EXPECT(SWP_E_LIMIT, "heads");
	V2(h);			/* head0 (limit) before shape[0] (dims) */
	h.set = BIT(K_HEAD0);
	h.head0 = 2;
	h.shape[0] = 0;
	EXPECT(SWP_E_LIMIT, "head0");
	V2(h);			/* shape[0] (dims) before shape[1] (limit) */
	h.shape[0] = 3;
	h.shape[1] = 0;
	EXPECT(SWP_E_DIMS, "shape[0]");
	V2(h);			/* shape[1] before rows */
	h.shape[1] = 0;
	h.set = BIT(K_ROWS);
	h.rows = 0;
	EXPECT(SWP_E_LIMIT, "shape[1]");
	V2(h);			/* rows (limit) before row0 (dims) */
	h.set = BIT(K_ROW0) | BIT(K_ROWS);
	h.rows = 0;
	h.row0 = 5;
	EXPECT(SWP_E_LIMIT, "rows");
	V2(h);			/* row0 (dims) before keys (limit) */
	h.set = BIT(K_ROW0) | BIT(K_ROWS);
	h.rows = 3;
	h.row0 = 1;
	h.shape[2] = 0;
	EXPECT(SWP_E_DIMS, "shape[1]");
	V2(h);			/* ... and before layer */
	h.set = BIT(K_ROW0) | BIT(K_ROWS);
	h.rows = 3;
	h.row0 = 3;
	h.layer = 9;
	EXPECT(SWP_E_DIMS, "shape[1]");
	V2(h);			/* the snapshot's limits before senders */
	h.set = BIT(K_SENDERS);
	h.senders = 0;
	h.step = -1;
	EXPECT(SWP_E_LIMIT, "step");
	h.step = 1;
	h.sink = 4;
	EXPECT(SWP_E_LIMIT, "sink");
	h.sink = 0;
	h.kind = "rowstats";	/* keys 4 */
	EXPECT(SWP_E_KIND, "rowstats");
	V2(h);			/* senders before rank */
	h.set = BIT(K_RANK) | BIT(K_SENDERS);
	h.senders = 0;
	h.rank = 5;
	EXPECT(SWP_E_LIMIT, "senders");
	V2(h);			/* rank before inc */
	h.set = BIT(K_RANK) | BIT(K_SENDERS);
	h.senders = 2;
	h.rank = 2;
	EXPECT(SWP_E_LIMIT, "rank");
	V2(h);			/* inc before resume */
	h.set = BIT(K_SENDERS) | BIT(K_RESUME);
	h.senders = 2;
	h.resume = -1;
	EXPECT(SWP_E_FIELD, "inc");
	h.set &= ~BIT(K_SENDERS);
	EXPECT(SWP_E_LIMIT, "resume");
	V2(h);			/* senders before run */
	h.set = BIT(K_SENDERS);
	h.senders = 0;
	h.run = "";
	e.topic = "sw/r1";
	EXPECT(SWP_E_LIMIT, "senders");
	h.senders = 2;		/* inc before run's bytes (both field) */
	h.run = "a\x01";
	e.topic = "sw/a\x01";
	EXPECT(SWP_E_FIELD, "inc");
	e.topic = NULL;
	V2(h);			/* senders before the qpos count */
	h.set = BIT(K_SENDERS);
	h.senders = 0;
	h.qpos = h.shape;
	h.nqpos = 1;
	EXPECT(SWP_E_LIMIT, "senders");
	V2(h);			/* limits before topic */
	h.set = BIT(K_SENDERS);
	h.senders = 0;
	e.topic = "sw/other";
	EXPECT(SWP_E_LIMIT, "senders");
	e.topic = NULL;
	V2(h);			/* an end: senders before run */
	h.type = "end";
	h.set = BIT(K_SENDERS);
	h.senders = 0;
	h.run = "";
	e.topic = "sw/r1";
	EXPECT(SWP_E_LIMIT, "senders");
	e.topic = NULL;
#undef V2
#undef EXPECT
}
END_TEST

START_TEST(test_roundtrip_random)
{
	static unsigned char tensor[4 * 6 * 8 * 8];
	int it;

	for (it = 0; it < 3000; it++) {
		swp_msg m, d;
		uint32_t qpos[6], i;
		const void *frames[3];
		size_t sizes[3], len, len2;
		char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX], detail[DETAIL];
		void *hdr, *hdr2;
		int tl, rc;

		memset(&m, 0, sizeof m);
		m.type = rndn(4) == 0 ? SWP_END : SWP_SNAPSHOT;
		rnd_str(m.run, 1 + rndn(rndn(2) ? SWP_RUN_MAX : 8), true);
		m.seq = rnd_wide();
		m.time = rndn(3) == 0 ? NAN : (double)rnd_wide() / (1 + rndn(1000)) -
		    (rndn(4) == 0 ? 1e12 : 0);
		m.inc = rndn(2) ? rnd_wide() : 0;
		m.has_resume = rndn(3) == 0;
		m.resume = m.has_resume ? (int64_t)(rnd_wide() >> 1) : 0;
		/* several senders a third of the time; 0 senders is one */
		if (rndn(3) == 0) {
			m.senders = 1 + (uint32_t)rndn(rndn(2) ? 4 : SWP_SENDERS_MAX);
			m.rank = (uint32_t)rndn(m.senders);
			if (m.senders > 1 && m.inc == 0)
				m.inc = 1 + (rnd_wide() >> 1);
		} else
			m.senders = (uint32_t)rndn(2);
		if (m.type == SWP_SNAPSHOT) {
			rnd_str(m.model, rndn(rndn(2) ? SWP_MODEL_MAX + 1 : 12), false);
			m.params = rnd_wide();
			m.layers = 1 + (uint32_t)rndn(SWP_LAYERS_MAX);
			m.heads = 1 + (uint32_t)rndn(4);
			m.fixed_probe = rndn(2);
			m.step = (int64_t)(rnd_wide() >> 1);
			m.layer = (uint32_t)rndn(m.layers);
			m.kind = (swp_kind)rndn(3);
			m.dtype = (swp_dtype)rndn(4);
			m.shape[0] = m.heads;
			m.shape[1] = 1 + (uint32_t)rndn(6);
			m.shape[2] = m.kind == SWP_ROWSTATS ? 6 : 1 + (uint32_t)rndn(8);
			m.sink = m.kind == SWP_ROWSTATS ? (uint32_t)rnd() :
			    (uint32_t)rndn(m.shape[2]);
			if (rndn(2)) {
				for (i = 0; i < m.shape[1]; i++)
					qpos[i] = (uint32_t)rnd_wide();
				m.qpos = qpos;
			}
			/* a part of the heads or of the rows half of the time */
			if (rndn(2)) {
				m.shape[0] = 1 + (uint32_t)rndn(m.heads);
				m.head0 = (uint32_t)rndn(m.heads - m.shape[0] + 1);
			}
			if (rndn(2)) {
				m.rows = m.shape[1] + (uint32_t)rndn(rndn(2) ? 4 : SWP_ROWS_MAX -
				    m.shape[1] + 1);
				m.row0 = (uint32_t)rndn(m.rows - m.shape[1] + 1);
			} else if (rndn(2))
				m.rows = m.shape[1];
			m.tensor_bytes = (size_t)m.shape[0] * m.shape[1] * m.shape[2] *
			    swp_dtype_size(m.dtype);
			for (i = 0; i < m.tensor_bytes; i++)
				tensor[i] = (unsigned char)rnd();
			m.tensor = tensor;
		}
		ck_assert_int_eq(swp_encode_header(&m, &hdr, &len), SWP_OK);
		tl = swp_topic(m.run, topic, sizeof topic);
		ck_assert_int_gt(tl, SWP_TOPIC_PREFIX_LEN);
		frames[0] = topic;
		sizes[0] = (size_t)tl;
		frames[1] = hdr;
		sizes[1] = len;
		frames[2] = tensor;
		sizes[2] = m.tensor_bytes;
		rc = swp_decode(frames, sizes, m.type == SWP_SNAPSHOT ? 3 : 2, NULL, &d,
		    detail, DETAIL);
		ck_assert_msg(rc == SWP_OK, "it %d: %s (%s)", it, swp_errname(rc), detail);
		ck_assert_int_eq(d.type, m.type);
		ck_assert_str_eq(d.run, m.run);
		ck_assert_uint_eq(d.seq, m.seq);
		ck_assert_uint_eq(d.inc, m.inc);
		ck_assert_int_eq(d.has_resume, m.has_resume);
		ck_assert_int_eq(d.resume, m.resume);
		ck_assert_uint_eq(d.rank, m.rank);
		ck_assert_uint_eq(d.senders, m.senders ? m.senders : 1);
		{
			bool v2 = d.senders > 1 || d.rank != 0;
			if (m.type == SWP_SNAPSHOT) {
				uint32_t rows = m.rows ? m.rows : m.shape[1];
				v2 = v2 || m.shape[0] != m.heads || m.head0 != 0 ||
				    m.shape[1] != rows || m.row0 != 0;
				ck_assert_uint_eq(d.head0, m.head0);
				ck_assert_uint_eq(d.row0, m.row0);
				ck_assert_uint_eq(d.rows, rows);
			} else
				ck_assert_uint_eq(d.rows, 0);
			ck_assert_uint_eq(d.version, v2 ? 2 : 1);
		}
		if (isfinite(m.time))
			ck_assert_double_eq(d.time, m.time);
		else
			ck_assert(isnan(d.time));
		if (m.type == SWP_SNAPSHOT) {
			ck_assert_str_eq(d.model, m.model);
			ck_assert_uint_eq(d.params, m.params);
			ck_assert_uint_eq(d.layers, m.layers);
			ck_assert_uint_eq(d.heads, m.heads);
			ck_assert_uint_eq(d.sink, m.sink);
			ck_assert_int_eq(d.fixed_probe, m.fixed_probe);
			ck_assert_int_eq(d.step, m.step);
			ck_assert_uint_eq(d.layer, m.layer);
			ck_assert_int_eq(d.kind, m.kind);
			ck_assert_int_eq(d.dtype, m.dtype);
			ck_assert_mem_eq(d.shape, m.shape, sizeof m.shape);
			ck_assert_int_eq(d.qpos != NULL, m.qpos != NULL);
			if (m.qpos != NULL)
				ck_assert_mem_eq(d.qpos, m.qpos, m.shape[1] * sizeof *m.qpos);
			ck_assert_ptr_eq(d.tensor, tensor);
			ck_assert_uint_eq(d.tensor_bytes, m.tensor_bytes);
		}
		ck_assert_int_eq(swp_encode_header(&d, &hdr2, &len2), SWP_OK);
		ck_assert_uint_eq(len2, len);
		ck_assert_mem_eq(hdr2, hdr, len);
		free(hdr);
		free(hdr2);
		swp_msg_clear(&d);
	}
}
END_TEST

/* The canonical encoding, as built here by msgpack-c's packer, is the encoder's. */
START_TEST(test_encoder_canonical)
{
	static const uint64_t q64[3] = { 0, 200, 70000 };
	static const uint32_t q32[3] = { 0, 200, 70000 };
	struct hb h;
	swp_msg m;
	unsigned char *want;
	void *got;
	size_t wl, gl;

	hb_default(&h);
	msg_default(&m);
	want = hb_build(&h, &wl);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	ck_assert_uint_eq(((unsigned char *)got)[0], 0x80 | 15);	/* fixmap of 15 */
	free(want);
	free(got);

	h.qpos = q64;
	h.nqpos = 3;
	h.time = 12.5;
	h.seq = h.params = 1ull << 40;
	h.step = INT64_MAX;
	m.qpos = (uint32_t *)q32;
	m.time = 12.5;
	m.seq = m.params = 1ull << 40;
	m.step = INT64_MAX;
	want = hb_build(&h, &wl);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	ck_assert_uint_eq(((unsigned char *)got)[0], 0xde);	/* map 16 of 17 */
	free(want);
	free(got);

	/* an end message ignores the snapshot fields; infinite time is left out */
	hb_default(&h);
	h.type = "end";
	msg_default(&m);
	m.type = SWP_END;
	m.kind = (swp_kind)77;
	m.time = INFINITY;
	m.tensor_bytes = 5;
	want = hb_build(&h, &wl);
	ck_assert_int_eq(swp_encode_header(&m, &got, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(got, want, wl);
	ck_assert_uint_eq(((unsigned char *)got)[0], 0x84);
	free(want);
	free(got);
}
END_TEST

/* Into a caller's buffer: the same bytes, within swp_header_bound, no more. */
static void
check_encode_to(const swp_msg *m)
{
	void *want;
	size_t wl, gl = 7, bound = swp_header_bound(m);
	unsigned char *buf = malloc(bound + 1);

	ck_assert_int_eq(swp_encode_header(m, &want, &wl), SWP_OK);
	ck_assert_uint_le(wl, bound);
	ck_assert_int_eq(swp_encode_header_to(m, buf, bound, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	ck_assert_mem_eq(buf, want, wl);
	/* exactly its size is enough; one byte less is refused */
	ck_assert_int_eq(swp_encode_header_to(m, buf, wl, &gl), SWP_OK);
	ck_assert_uint_eq(gl, wl);
	gl = 7;
	ck_assert_int_eq(swp_encode_header_to(m, buf, wl - 1, &gl), SWP_E_INVAL);
	ck_assert_uint_eq(gl, 0);
	free(want);
	free(buf);
}

START_TEST(test_encoder_to_buffer)
{
	swp_msg m;
	size_t len;
	char b[8];

	msg_default(&m);
	check_encode_to(&m);
	ck_assert_int_eq(swp_encode_header_to(NULL, b, sizeof b, &len), SWP_E_INVAL);
	ck_assert_int_eq(swp_encode_header_to(&m, NULL, 1024, &len), SWP_E_INVAL);
	ck_assert_int_eq(swp_encode_header_to(&m, b, sizeof b, NULL), SWP_E_INVAL);
	m.dtype = (swp_dtype)4;	/* validated as by swp_encode_header */
	ck_assert_int_eq(swp_encode_header_to(&m, b, sizeof b, &len), SWP_E_DTYPE);

	/* the largest header: longest strings and names, widest numbers, qpos */
	msg_default(&m);
	memset(m.run, 'r', SWP_RUN_MAX);
	m.run[SWP_RUN_MAX] = '\0';
	memset(m.model, 'm', SWP_MODEL_MAX);
	m.model[SWP_MODEL_MAX] = '\0';
	m.params = UINT64_MAX;
	m.seq = UINT64_MAX;
	m.step = INT64_MAX;
	m.layers = SWP_LAYERS_MAX;
	m.layer = SWP_LAYERS_MAX - 1;
	m.heads = 1;
	m.sink = UINT32_MAX;
	m.kind = SWP_ROWSTATS;
	m.dtype = SWP_BF16;
	m.time = 1.5e9;
	uint32_t nrows = 300;
	uint32_t *q = malloc(nrows * sizeof(*q));
	for (uint32_t i = 0; i < nrows; i++)
		q[i] = 0xffffffffu - i;
	m.qpos = q;
	m.shape[0] = 1;
	m.shape[1] = nrows;
	m.shape[2] = 6;
	m.tensor_bytes = (uint64_t)nrows * 6 * 2;
	check_encode_to(&m);
	/* every optional key too, each at its widest */
	m.inc = UINT64_MAX;
	m.has_resume = true;
	m.resume = INT64_MAX;
	m.senders = SWP_SENDERS_MAX;
	m.rank = SWP_SENDERS_MAX - 1;
	m.heads = SWP_HEADS_MAX;
	m.head0 = SWP_HEADS_MAX - 1;
	m.rows = SWP_ROWS_MAX;
	m.row0 = SWP_ROWS_MAX - nrows;
	check_encode_to(&m);
	{
		void *hdr;
		size_t hl;
		ck_assert_int_eq(swp_encode_header(&m, &hdr, &hl), SWP_OK);
		ck_assert_uint_eq(((unsigned char *)hdr)[2], 24);	/* map 16 of every key */
		free(hdr);
	}
	/* and without qpos: the fixed part alone within the bound */
	m.qpos = NULL;
	check_encode_to(&m);
	free(q);
	/* qpos of the most rows, every entry 5 bytes */
	q = malloc(SWP_ROWS_MAX * sizeof(*q));
	for (uint32_t i = 0; i < SWP_ROWS_MAX; i++)
		q[i] = 0xffffffffu - i;
	m.qpos = q;
	m.shape[1] = m.rows = SWP_ROWS_MAX;
	m.row0 = 0;
	m.tensor_bytes = (uint64_t)SWP_ROWS_MAX * 6 * 2;
	check_encode_to(&m);
	free(q);

	msg_default(&m);
	m.type = SWP_END;
	m.time = 3.0;
	check_encode_to(&m);
	m.inc = UINT64_MAX;
	m.has_resume = true;
	m.resume = INT64_MAX;
	m.senders = SWP_SENDERS_MAX;
	m.rank = SWP_SENDERS_MAX - 1;
	check_encode_to(&m);
}
END_TEST

START_TEST(test_encoder_errors)
{
	swp_msg m;
	void *out = (void *)1;
	size_t len = 9;

	msg_default(&m);
	ck_assert_int_eq(swp_encode_header(NULL, &out, &len), SWP_E_INVAL);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(swp_encode_header(&m, NULL, &len), SWP_E_INVAL);
	ck_assert_int_eq(swp_encode_header(&m, &out, NULL), SWP_E_INVAL);
	ck_assert_int_eq(encode_rc(&m), SWP_OK);

	m.type = (swp_type)0;
	ck_assert_int_eq(encode_rc(&m), SWP_E_TYPE);
	msg_default(&m);
	m.kind = (swp_kind)3;
	ck_assert_int_eq(encode_rc(&m), SWP_E_KIND);
	msg_default(&m);
	m.dtype = (swp_dtype)4;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DTYPE);
	msg_default(&m);
	m.tensor_bytes--;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);
	msg_default(&m);
	memset(m.run, 'r', sizeof m.run);	/* not terminated */
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	msg_default(&m);
	memset(m.model, 'm', sizeof m.model);
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	msg_default(&m);
	m.run[0] = '\0';
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	msg_default(&m);
	m.run[1] = '\t';
	ck_assert_int_eq(encode_rc(&m), SWP_E_FIELD);
	msg_default(&m);
	m.step = -1;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	msg_default(&m);
	m.layer = m.layers;
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
	msg_default(&m);
	m.shape[0] = 3;
	ck_assert_int_eq(encode_rc(&m), SWP_E_DIMS);
	msg_default(&m);
	m.kind = SWP_ROWSTATS;		/* keys 4 */
	ck_assert_int_eq(encode_rc(&m), SWP_E_KIND);
	/* an end message with a bad run still fails */
	msg_default(&m);
	m.type = SWP_END;
	m.run[0] = '\0';
	ck_assert_int_eq(encode_rc(&m), SWP_E_LIMIT);
}
END_TEST

START_TEST(test_decode_args)
{
	struct golden g;
	swp_msg m;
	char small[8], detail[DETAIL];
	const void *frames[3];
	size_t sizes[3];
	int rc;

	golden_load(&g, "snap_probs_f32.msg");
	ck_assert_int_eq(swp_decode(g.frames, g.sizes, 3, NULL, NULL, detail, DETAIL),
	    SWP_E_INVAL);
	ck_assert_int_eq(swp_decode(NULL, g.sizes, 3, NULL, &m, detail, DETAIL), SWP_E_INVAL);
	ck_assert_int_eq(swp_decode(g.frames, NULL, 3, NULL, &m, detail, DETAIL), SWP_E_INVAL);
	memcpy(frames, g.frames, sizeof frames);
	memcpy(sizes, g.sizes, sizeof sizes);
	frames[2] = NULL;
	ck_assert_int_eq(swp_decode(frames, sizes, 3, NULL, &m, detail, DETAIL), SWP_E_INVAL);
	ck_assert_int_eq(swp_decode(NULL, NULL, 0, NULL, &m, detail, DETAIL), SWP_E_FRAMES);
	ck_assert_int_eq(swp_decode(g.frames, g.sizes, 1, NULL, &m, detail, DETAIL),
	    SWP_E_FRAMES);
	ck_assert_int_eq(swp_decode(g.frames, g.sizes, 2, NULL, &m, detail, DETAIL),
	    SWP_E_FRAMES);
	ck_assert_ptr_nonnull(strstr(detail, "frames"));

	/* detail is optional, and cut to its length */
	ck_assert_int_eq(swp_decode(g.frames, g.sizes, 3, NULL, &m, NULL, 0), SWP_OK);
	swp_msg_clear(&m);
	sizes[1] = 20;
	frames[2] = g.frames[2];
	rc = swp_decode(frames, sizes, 3, NULL, &m, small, sizeof small);
	ck_assert_int_eq(rc, SWP_E_MSGPACK);
	ck_assert_str_eq(small, "truncat");
	ck_assert_int_eq(swp_decode(frames, sizes, 3, NULL, &m, NULL, 0), SWP_E_MSGPACK);
	ck_assert_int_eq(swp_decode(frames, sizes, 3, NULL, &m, small, 0), SWP_E_MSGPACK);
	golden_free(&g);
}
END_TEST

START_TEST(test_msg_clear)
{
	struct golden g;
	swp_msg m;

	swp_msg_clear(NULL);
	golden_load(&g, "snap_probs_f32.msg");
	ck_assert_int_eq(decode_golden(&g, &m, NULL), SWP_OK);
	ck_assert_ptr_nonnull(m.qpos);
	swp_msg_clear(&m);
	ck_assert_ptr_null(m.qpos);
	swp_msg_clear(&m);
	ck_assert_ptr_null(m.qpos);
	ck_assert_str_eq(m.run, "pythia-160m/seed1");	/* the rest is kept */
	golden_free(&g);
}
END_TEST

/* ---- fields -------------------------------------------------------------- */

START_TEST(test_fields_missing_and_wrong)
{
	struct hb h;
	int k;

	hb_default(&h);
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	for (k = 0; k < K_QPOS; k++) {
		int want = k == K_V ? SWP_E_VERSION : SWP_E_FIELD;
		hb_default(&h);
		h.omit = 1u << k;
		ck_assert_msg(try_hb(&h) == want, "missing %s", keys[k]);
		hb_default(&h);
		h.wrong = k;
		/* a wrong-typed kind or dtype is a field error, not an unknown name */
		ck_assert_msg(try_hb(&h) == want, "wrong type of %s", keys[k]);
	}
	/* the optional ones may be absent, not wrong */
	hb_default(&h);
	h.wrong = K_TIME;
	h.time = 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	hb_default(&h);
	h.wrong = K_QPOS;
	h.qpos = h.shape;	/* any non-NULL pointer makes the key appear */
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);

	/* an end message needs only v, type, run, seq */
	hb_default(&h);
	h.type = "end";
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.omit = 1u << K_SEQ;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	h.omit = 1u << K_RUN;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	/* and ignores snapshot keys, even ill-typed ones */
	h.omit = 0;
	h.all_keys = true;
	h.wrong = K_MODEL;
	h.layers = 0;
	ck_assert_int_eq(try_hb(&h), SWP_OK);

	/* shape: exactly 3 unsigned entries */
	hb_default(&h);
	h.omit = 1u << K_SHAPE;
	h.nextra = 1;
	h.extra = (const unsigned char *)"\xa5shape\x93\x02\x03\x04";
	h.extralen = 10;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.extra = (const unsigned char *)"\xa5shape\x93\x02\x03\xa1" "4";
	h.extralen = 11;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	h.extra = (const unsigned char *)"\xa5shape\x93\x02\x03\xff";
	h.extralen = 10;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	h.extra = (const unsigned char *)"\xa5shape\x94\x02\x03\x04\x01";
	h.extralen = 11;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	h.extra = (const unsigned char *)"\xa5shape\x92\x02\x03";
	h.extralen = 9;
	ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
}
END_TEST

/* Raw pairs appended to a default header, and the decoder's answer. */
static int
try_extra(const void *raw, size_t len, int npairs)
{
	struct hb h;

	hb_default(&h);
	h.extra = raw;
	h.extralen = len;
	h.nextra = npairs;
	return try_hb(&h);
}

#define EXTRA(lit, n) try_extra(lit, sizeof(lit) - 1, n)

START_TEST(test_fields_unknown_and_duplicate)
{
	swp_msg m;
	struct hb h;
	struct env e = { 0 };
	char detail[DETAIL];

	/* unknown keys of every msgpack type are skipped */
	ck_assert_int_eq(EXTRA("\xa1x\xc0", 1), SWP_OK);
	ck_assert_int_eq(EXTRA("\xa1x\xc4\x02\x00\x01", 1), SWP_OK);		/* bin 8 */
	ck_assert_int_eq(EXTRA("\xa1x\xc7\x02\x05\x00\x01", 1), SWP_OK);	/* ext 8 */
	ck_assert_int_eq(EXTRA("\xa1x\xd4\x01\x00", 1), SWP_OK);		/* fixext 1 */
	ck_assert_int_eq(EXTRA("\xa1x\xd8\x01" "0123456789abcdef", 1), SWP_OK);
	ck_assert_int_eq(EXTRA("\xa1x\xca\x3f\x80\x00\x00", 1), SWP_OK);
	ck_assert_int_eq(EXTRA("\xa1x\x82\xa1" "a\x90\x01\x80", 1), SWP_OK);	/* nested */
	ck_assert_int_eq(EXTRA("\xa1x\xdc\x00\x02\x01\x02", 1), SWP_OK);	/* array 16 */
	ck_assert_int_eq(EXTRA("\xa1x\xdf\x00\x00\x00\x00", 1), SWP_OK);	/* map 32 */
	ck_assert_int_eq(EXTRA("\x05\x06", 1), SWP_OK);			/* int key */
	ck_assert_int_eq(EXTRA("\xc4\x01v\x02", 1), SWP_OK);			/* bin "v" */
	ck_assert_int_eq(EXTRA("\xa2vv\x02\xa1x\x01", 2), SWP_OK);
	/* uint fields take any integer width, the int family included */
	hb_default(&h);
	h.omit = 1u << K_SEQ;
	h.extra = (const unsigned char *)"\xa3seq\xd0\x05";
	h.extralen = 6;
	h.nextra = 1;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.seq, 5);
	h.extra = (const unsigned char *)"\xa3seq\xcf\0\0\0\0\0\0\0\x07";
	h.extralen = 13;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.seq, 7);
	h.extra = (const unsigned char *)"\xa3seq\xd0\xfb";
	h.extralen = 6;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	/* a known key twice is a field error, even one the type does not use */
	ck_assert_int_eq(EXTRA("\xa3seq\x01", 1), SWP_E_FIELD);
	ck_assert_int_eq(EXTRA("\xa1v\x01", 1), SWP_E_FIELD);
	ck_assert_int_eq(EXTRA("\xa4time\xc0", 1), SWP_OK);			/* nil: absent */
	ck_assert_int_eq(EXTRA("\xa4qpos\xc0", 1), SWP_OK);
	hb_default(&h);
	h.type = "end";
	{
		static const unsigned char dup[] = "\xa5model\x01\xa5model\x02";
		h.extra = dup;
		h.extralen = sizeof dup - 1;
		h.nextra = 2;
	}
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	ck_assert_ptr_nonnull(strstr(detail, "model"));

	/* time may come as float 32 or as an integer */
	hb_default(&h);
	h.omit = 0;
	{
		static const unsigned char t32[] = "\xa4time\xca\x3f\xc0\x00\x00";
		h.extra = t32;
		h.extralen = sizeof t32 - 1;
		h.nextra = 1;
	}
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_double_eq(m.time, 1.5);
	{
		static const unsigned char ti[] = "\xa4time\xd0\xfe";
		h.extra = ti;
		h.extralen = sizeof ti - 1;
	}
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_double_eq(m.time, -2.0);
	{
		static const unsigned char tu[] = "\xa4time\xce\x6b\x0e\x7e\x00";
		h.extra = tu;
		h.extralen = sizeof tu - 1;
	}
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_double_eq(m.time, 1796111872.0);
	{
		static const unsigned char tinf[] = "\xa4time\xcb\x7f\xf0\0\0\0\0\0\0";
		h.extra = tinf;
		h.extralen = sizeof tinf - 1;
	}
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert(isnan(m.time));

	/* v not first, or missing; an empty map */
	hb_default(&h);
	h.v_last = true;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_VERSION);
	ck_assert_ptr_nonnull(strstr(detail, "first"));
	hb_default(&h);
	e.hdr = (const unsigned char *)"\x80";
	e.hdrlen = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_VERSION);
	e.hdr = (const unsigned char *)"\x81\xa1v\xff";	/* v = -1 */
	e.hdrlen = 4;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_VERSION);
	e.hdr = (const unsigned char *)"\x81\xa1v\x01";	/* v only */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	ck_assert_ptr_nonnull(strstr(detail, "type"));
	e.hdr = (const unsigned char *)"\x91\x01";
	e.hdrlen = 2;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_MSGPACK);
	e.hdr = (const unsigned char *)"\x01";
	e.hdrlen = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_MSGPACK);
}
END_TEST

START_TEST(test_fields_names)
{
	static const char *const kinds[] = { "probs", "logits", "rowstats" };
	static const char *const dtypes[] = { "f32", "f16", "bf16", "f64" };
	struct hb h;
	struct env e = { 0 };
	swp_msg m;
	char detail[DETAIL];
	int i;

	for (i = 0; i < 3; i++) {
		hb_default(&h);
		h.kind = kinds[i];
		if (i == SWP_ROWSTATS)
			h.shape[2] = 6;
		ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
		ck_assert_int_eq(m.kind, i);
	}
	for (i = 0; i < 4; i++) {
		hb_default(&h);
		h.dtype = dtypes[i];
		ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
		ck_assert_int_eq(m.dtype, i);
	}
	hb_default(&h);
	h.kind = "Probs";	/* names are exact, case included */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_KIND);
	ck_assert_str_eq(detail, "kind: \"Probs\"");
	hb_default(&h);
	h.dtype = "float32";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DTYPE);
	ck_assert_str_eq(detail, "dtype: \"float32\"");
	hb_default(&h);
	h.type = "snap\nshot";	/* shown without its control byte */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TYPE);
	ck_assert_str_eq(detail, "type: \"snap?shot\"");
	hb_default(&h);
	h.type = "";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TYPE);
}
END_TEST

/* ---- limits: just inside passes, just outside fails ----------------------- */

START_TEST(test_limits_counts)
{
	struct hb h;

	hb_default(&h);
	h.layers = 1;
	h.layer = 0;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.layers = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.layers = SWP_LAYERS_MAX;
	h.layer = SWP_LAYERS_MAX - 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.layers = SWP_LAYERS_MAX + 1;
	h.layer = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.layers = 1ull << 32;	/* over uint32 too: a limit, never a truncation */
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);

	hb_default(&h);
	h.layer = h.layers - 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.layer = h.layers;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);

	hb_default(&h);
	h.heads = h.shape[0] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.heads = h.shape[0] = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.heads = h.shape[0] = SWP_HEADS_MAX;
	h.shape[1] = h.shape[2] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.heads = h.shape[0] = SWP_HEADS_MAX + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	hb_default(&h);
	h.shape[0] = h.heads + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.shape[0] = h.heads - 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);

	hb_default(&h);
	h.shape[1] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.shape[1] = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.heads = h.shape[0] = 1;
	h.shape[1] = SWP_ROWS_MAX;
	h.shape[2] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.shape[1] = SWP_ROWS_MAX + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);

	hb_default(&h);
	h.shape[2] = 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.shape[2] = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.heads = h.shape[0] = 1;
	h.shape[1] = 1;
	h.shape[2] = SWP_KEYS_MAX;
	h.dtype = "f16";
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.shape[2] = SWP_KEYS_MAX + 1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);

	/* sink: < keys, except for rowstats where keys are the 6 statistics */
	hb_default(&h);
	h.sink = h.shape[2] - 1;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.sink = h.shape[2];
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.kind = "rowstats";
	h.shape[2] = 6;
	h.sink = 100;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.sink = UINT32_MAX;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.sink = 1ull << 32;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.sink = 0;
	h.shape[2] = 5;
	ck_assert_int_eq(try_hb(&h), SWP_E_KIND);
	h.shape[2] = 7;
	ck_assert_int_eq(try_hb(&h), SWP_E_KIND);

	/* step: 0 .. 2^63-1 */
	hb_default(&h);
	h.step = 0;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.step = INT64_MAX;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.step = -1;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.step = INT64_MIN;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	{
		static const unsigned char big[] = "\xa4step\xcf\x80\0\0\0\0\0\0\0";
		h.step = 0;
		h.omit = 1u << K_STEP;
		h.extra = big;
		h.extralen = sizeof big - 1;
		h.nextra = 1;
		ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	}

	/* seq and params take all of uint64 */
	hb_default(&h);
	h.seq = h.params = UINT64_MAX;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
}
END_TEST

START_TEST(test_limits_qpos)
{
	uint64_t q[5] = { 0, 1, 2, 3, 4 };
	struct hb h;
	swp_msg m;
	struct env e = { 0 };
	char detail[DETAIL];

	hb_default(&h);
	h.qpos = q;
	h.nqpos = 3;
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.nqpos = 2;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.nqpos = 4;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.nqpos = 0;
	ck_assert_int_eq(try_hb(&h), SWP_E_DIMS);
	h.nqpos = 3;
	q[2] = UINT32_MAX;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(m.qpos[2], UINT32_MAX);
	swp_msg_clear(&m);
	q[2] = 1ull << 32;
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	q[2] = 2;
	h.wrong = -1;
	{
		static const unsigned char neg[] = "\xa4qpos\x93\x00\xff\x01";
		h.qpos = NULL;
		h.extra = neg;
		h.extralen = sizeof neg - 1;
		h.nextra = 1;
		ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	}
}
END_TEST

START_TEST(test_limits_strings)
{
	char run[SWP_RUN_MAX + 2], model[SWP_MODEL_MAX + 2], topic[SWP_RUN_MAX + 8];
	struct hb h;
	struct env e = { 0 };
	swp_msg m;
	char detail[DETAIL];

	memset(run, 'r', sizeof run);
	run[SWP_RUN_MAX] = '\0';
	memset(model, 'm', sizeof model);
	model[SWP_MODEL_MAX] = '\0';
	hb_default(&h);
	h.run = run;
	h.model = model;
	ck_assert_int_eq(try_env(&h, &e, &m, detail), SWP_OK);
	ck_assert_uint_eq(strlen(m.run), SWP_RUN_MAX);
	ck_assert_uint_eq(strlen(m.model), SWP_MODEL_MAX);
	model[SWP_MODEL_MAX] = 'm';
	model[SWP_MODEL_MAX + 1] = '\0';
	ck_assert_int_eq(try_hb(&h), SWP_E_LIMIT);
	h.model = "";
	ck_assert_int_eq(try_hb(&h), SWP_OK);
	h.model = "tab\there";	/* only the run is restricted to printable bytes */
	ck_assert_int_eq(try_hb(&h), SWP_OK);

	/* a run one over: the topic is still well formed, the header is not */
	run[SWP_RUN_MAX] = 'r';
	run[SWP_RUN_MAX + 1] = '\0';
	h.model = "m";
	e.topic = "sw/r";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_ptr_nonnull(strstr(detail, "run"));
	/* ... and as the topic itself, a topic error, found first */
	e.topic = NULL;
	ck_assert_int_eq(try_hb(&h), SWP_E_TOPIC);
	h.run = "";
	e.topic = "sw/r";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	h.run = "a\x1f" "b";
	snprintf(topic, sizeof topic, "sw/%s", h.run);
	e.topic = topic;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	h.run = "a\x7f" "b";
	snprintf(topic, sizeof topic, "sw/%s", h.run);
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	h.run = "caf\xc3\xa9 \x20~";	/* UTF-8 and space are fine */
	snprintf(topic, sizeof topic, "sw/%s", h.run);
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	{
		/* a NUL inside the model would cut the C string: refused */
		static const unsigned char nul[] = "\xa5model\xa3" "a\0b";
		hb_default(&h);
		h.omit = 1u << K_MODEL;
		h.extra = nul;
		h.extralen = sizeof nul - 1;
		h.nextra = 1;
		ck_assert_int_eq(try_hb(&h), SWP_E_FIELD);
	}
}
END_TEST

START_TEST(test_limits_topic)
{
	struct hb h;
	struct env e = { 0 };
	char detail[DETAIL];

	hb_default(&h);
	e.topic = "sw/r";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "sw/r12";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "sw/R1";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "sW/r1";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "sw/";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = "sw/r1";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
}
END_TEST

static void
set_be32(unsigned char *p, size_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

START_TEST(test_limits_sizes)
{
	static const unsigned char pad0[] = { 0xa3, 'p', 'a', 'd', 0xc6, 0, 0, 0, 0 };
	unsigned char *pad;
	size_t base, n;
	struct hb h;
	struct env e = { 0 };
	swp_limits lim;
	unsigned char *hdr;
	char detail[DETAIL];

	/* the header: exactly SWP_HEADER_MAX passes, one more does not */
	hb_default(&h);
	h.extra = pad0;
	h.extralen = sizeof pad0;
	h.nextra = 1;
	hdr = hb_build(&h, &base);
	free(hdr);
	n = SWP_HEADER_MAX - base;
	pad = calloc(sizeof pad0 + n + 1, 1);
	memcpy(pad, pad0, sizeof pad0);
	set_be32(pad + 5, n);
	h.extra = pad;
	h.extralen = sizeof pad0 + n;
	hdr = hb_build(&h, &e.hdrlen);
	ck_assert_uint_eq(e.hdrlen, SWP_HEADER_MAX);
	e.hdr = hdr;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	free(hdr);
	n++;
	set_be32(pad + 5, n);
	h.extralen = sizeof pad0 + n;
	hdr = hb_build(&h, &e.hdrlen);
	ck_assert_uint_eq(e.hdrlen, SWP_HEADER_MAX + 1);
	e.hdr = hdr;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_HEADER_SIZE);
	free(hdr);
	free(pad);

	/* the tensor: exactly its size, and no more than the receiver's cap */
	hb_default(&h);
	memset(&e, 0, sizeof e);
	e.tensor_delta = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	e.tensor_delta = -1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	e.tensor_delta = 0;
	lim.tensor_max = 2 * 3 * 4 * 4;
	e.lim = &lim;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	lim.tensor_max--;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_ptr_nonnull(strstr(detail, "tensor"));
	/* the default cap, 256 MiB: 1024 heads x 256 rows x 256 keys of f32 is 256 MiB */
	hb_default(&h);
	h.heads = h.shape[0] = 1024;
	h.shape[1] = 256;
	h.shape[2] = 256;
	memset(&e, 0, sizeof e);
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_OK);
	h.dtype = "f64";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
}
END_TEST

/* Nested arrays in an unknown key: the map is level 1, so 7 more pass. */
START_TEST(test_limits_depth)
{
	unsigned char raw[32];
	int depth;

	for (depth = 6; depth <= 9; depth++) {
		size_t n = 0;
		int i;
		raw[n++] = 0xa1;
		raw[n++] = 'x';
		for (i = 0; i < depth - 1; i++)
			raw[n++] = 0x91;
		raw[n++] = 0x01;
		ck_assert_int_eq(try_extra(raw, n, 1),
		    depth <= SWP_DEPTH_MAX ? SWP_OK : SWP_E_MSGPACK);
	}
	/* an empty container one level too deep counts as well */
	ck_assert_int_eq(EXTRA("\xa1x\x91\x91\x91\x91\x91\x91\x91\x90", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\x91\x91\x91\x91\x91\x91\x90", 1), SWP_OK);
}
END_TEST

/* Claims the bytes cannot hold stop at the pre-scan, whatever their kind. */
START_TEST(test_prescan_claims)
{
	char detail[DETAIL];
	struct hb h;
	struct env e = { 0 };

	ck_assert_int_eq(EXTRA("\xa1x\xdd\xff\xff\xff\xff\x01\x02", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xdf\xff\xff\xff\xff\x01\x02", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xdb\xff\xff\xff\xff\x01\x02", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xc6\xff\xff\xff\xff\x01\x02", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xc9\xff\xff\xff\xff\x01\x02", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xd8\x01\x02", 1), SWP_E_MSGPACK);	/* fixext 16 */
	ck_assert_int_eq(EXTRA("\xa1x\xcf\x01", 1), SWP_E_MSGPACK);
	ck_assert_int_eq(EXTRA("\xa1x\xc1", 1), SWP_E_MSGPACK);
	/* a map claiming more pairs than there are */
	ck_assert_int_eq(try_extra("", 0, 1), SWP_E_MSGPACK);
	/* what the outer array still owes counts: the inner one fits alone */
	hb_default(&h);
	e.hdr = (const unsigned char *)"\x81\xa1v\x93\x92\x01\x01";
	e.hdrlen = 7;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_MSGPACK);
	ck_assert_str_eq(detail, "truncated: array of 2 elements at offset 4, 2 bytes left");
	e.hdr = (const unsigned char *)"\x81\xa1v\x01\xc0";
	e.hdrlen = 5;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_MSGPACK);
	ck_assert_str_eq(detail, "trailing bytes: 1 after the header map");
}
END_TEST

/* Two faults at once: the one earlier in PROTOCOL.md's order is reported. */
START_TEST(test_check_order)
{
	struct hb h;
	struct env e = { 0 };
	char detail[DETAIL];

	hb_default(&h);			/* frames before everything */
	e.nframes = 4;
	e.topic = "x";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FRAMES);
	e.nframes = 0;			/* topic before header size */
	e.hdr = (const unsigned char *)"";
	e.hdrlen = 0;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = NULL;			/* header size before msgpack */
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_HEADER_SIZE);
	e.hdr = (const unsigned char *)"\x82\xa1v\x02";	/* msgpack before version */
	e.hdrlen = 4;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_MSGPACK);
	e.hdr = NULL;
	h.v = 3;			/* version before type */
	h.type = "nope";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_VERSION);
	hb_default(&h);			/* duplicate key before type */
	h.type = "nope";
	h.extra = (const unsigned char *)"\xa4type\xa3" "end";
	h.extralen = 9;
	h.nextra = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	hb_default(&h);			/* type before the other fields */
	h.type = "nope";
	h.omit = 1u << K_RUN;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TYPE);
	hb_default(&h);			/* type's frame count before fields */
	h.type = "end";
	h.omit = 1u << K_RUN;
	e.nframes = 3;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FRAMES);
	e.nframes = 0;
	hb_default(&h);			/* fields in key order: seq before kind */
	h.omit = 1u << K_SEQ;
	h.kind = "nope";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	hb_default(&h);			/* kind before dtype */
	h.kind = "nope";
	h.dtype = "nope";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_KIND);
	hb_default(&h);			/* dtype before shape's type */
	h.dtype = "nope";
	h.wrong = K_SHAPE;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DTYPE);
	hb_default(&h);			/* field types before limits */
	h.layers = 0;
	h.wrong = K_TIME;
	h.time = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	hb_default(&h);			/* layers before heads */
	h.layers = 0;
	h.heads = 0;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	ck_assert_ptr_nonnull(strstr(detail, "layers"));
	hb_default(&h);			/* shape[0] before rows */
	h.shape[0] = 1;
	h.shape[1] = 0;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
	hb_default(&h);			/* rowstats keys before run */
	h.kind = "rowstats";
	h.shape[2] = 5;
	h.run = "";
	e.topic = "sw/r1";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_KIND);
	hb_default(&h);			/* run before qpos count */
	h.run = "a\x01";
	h.qpos = h.shape;
	h.nqpos = 1;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_FIELD);
	hb_default(&h);			/* limits before topic */
	h.layer = 9;
	e.topic = "sw/other";
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
	hb_default(&h);			/* topic before dims */
	e.tensor_delta = 4;
	ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_TOPIC);
	e.topic = NULL;			/* dims before the tensor cap */
	{
		swp_limits lim = { 1 };
		e.lim = &lim;
		ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_DIMS);
		e.tensor_delta = 0;
		ck_assert_int_eq(try_env(&h, &e, NULL, detail), SWP_E_LIMIT);
		e.lim = NULL;
	}
}
END_TEST

/* ---- small functions ----------------------------------------------------- */

START_TEST(test_topic)
{
	char buf[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX], run[SWP_RUN_MAX + 2];

	ck_assert_int_eq(swp_topic("run-1", buf, sizeof buf), 8);
	ck_assert_mem_eq(buf, "sw/run-1", 8);
	ck_assert_int_eq(swp_topic("a", buf, 4), 4);
	ck_assert_int_eq(swp_topic("ab", buf, 4), SWP_E_INVAL);
	ck_assert_int_eq(swp_topic("a", buf, 0), SWP_E_INVAL);
	ck_assert_int_eq(swp_topic("", buf, sizeof buf), SWP_E_LIMIT);
	ck_assert_int_eq(swp_topic(NULL, buf, sizeof buf), SWP_E_INVAL);
	ck_assert_int_eq(swp_topic("a", NULL, 10), SWP_E_INVAL);
	ck_assert_int_eq(swp_topic("a\nb", buf, sizeof buf), SWP_E_FIELD);
	ck_assert_int_eq(swp_topic("a\x7f", buf, sizeof buf), SWP_E_FIELD);
	memset(run, 'x', sizeof run);
	run[SWP_RUN_MAX] = '\0';
	ck_assert_int_eq(swp_topic(run, buf, sizeof buf), SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX);
	ck_assert_int_eq(swp_topic(run, buf, sizeof buf - 1), SWP_E_INVAL);
	run[SWP_RUN_MAX] = 'x';
	run[SWP_RUN_MAX + 1] = '\0';
	ck_assert_int_eq(swp_topic(run, buf, sizeof buf), SWP_E_LIMIT);
}
END_TEST

START_TEST(test_errors)
{
	static const char *const names[] = {
		"ok", "frames", "topic", "header_size", "msgpack", "version", "field",
		"limit", "dims", "kind", "dtype", "type", "nomem", "inval"
	};
	int c, d;

	ck_assert_int_eq(SWP_E_INVAL, -13);
	for (c = 0; c >= SWP_E_INVAL; c--) {
		const char *s = swp_strerror(c);
		ck_assert_str_eq(swp_errname(c), names[-c]);
		ck_assert_ptr_nonnull(s);
		ck_assert_uint_gt(strlen(s), 5);
		for (d = 0; d > c; d--) {
			ck_assert_str_ne(swp_errname(c), swp_errname(d));
			ck_assert_str_ne(swp_strerror(c), swp_strerror(d));
		}
		/* usable as a counter name: lower case and underscores */
		for (s = swp_errname(c); *s; s++)
			ck_assert((*s >= 'a' && *s <= 'z') || *s == '_');
	}
	ck_assert_str_eq(swp_errname(1), "unknown");
	ck_assert_str_eq(swp_errname(-14), "unknown");
	ck_assert_str_eq(swp_errname(INT32_MIN), "unknown");
	ck_assert_ptr_nonnull(swp_strerror(-14));
	ck_assert_ptr_nonnull(swp_strerror(99));
	ck_assert_str_eq(swp_strerror(INT32_MIN), swp_strerror(-14));
}
END_TEST

START_TEST(test_names)
{
	ck_assert_uint_eq(swp_dtype_size(SWP_F32), 4);
	ck_assert_uint_eq(swp_dtype_size(SWP_F16), 2);
	ck_assert_uint_eq(swp_dtype_size(SWP_BF16), 2);
	ck_assert_uint_eq(swp_dtype_size(SWP_F64), 8);
	ck_assert_uint_eq(swp_dtype_size((swp_dtype)4), 0);
	ck_assert_uint_eq(swp_dtype_size((swp_dtype)-1), 0);
	ck_assert_str_eq(swp_dtype_name(SWP_F32), "f32");
	ck_assert_str_eq(swp_dtype_name(SWP_F16), "f16");
	ck_assert_str_eq(swp_dtype_name(SWP_BF16), "bf16");
	ck_assert_str_eq(swp_dtype_name(SWP_F64), "f64");
	ck_assert_str_eq(swp_dtype_name((swp_dtype)4), "invalid");
	ck_assert_str_eq(swp_dtype_name((swp_dtype)-1), "invalid");
	ck_assert_str_eq(swp_kind_name(SWP_PROBS), "probs");
	ck_assert_str_eq(swp_kind_name(SWP_LOGITS), "logits");
	ck_assert_str_eq(swp_kind_name(SWP_ROWSTATS), "rowstats");
	ck_assert_str_eq(swp_kind_name((swp_kind)3), "invalid");
	ck_assert_str_eq(swp_kind_name((swp_kind)-1), "invalid");
	/* and back: every name to its value, anything else -1 */
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(swp_kind_parse(swp_kind_name((swp_kind)k)), k);
	for (int d = 0; d < 4; d++)
		ck_assert_int_eq(swp_dtype_parse(swp_dtype_name((swp_dtype)d)), d);
	ck_assert_int_eq(swp_kind_parse("invalid"), -1);
	ck_assert_int_eq(swp_kind_parse(NULL), -1);
	ck_assert_int_eq(swp_dtype_parse("F32"), -1);
	/* the numbering is swm_dtype's (metrics/swm.h) */
	ck_assert_int_eq(SWP_F32, 0);
	ck_assert_int_eq(SWP_F16, 1);
	ck_assert_int_eq(SWP_BF16, 2);
	ck_assert_int_eq(SWP_F64, 3);
}
END_TEST

START_TEST(test_golden_parse)
{
	static const unsigned char two[] = { 2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 1, 0, 0, 0, 'c' };
	const void *frames[4];
	size_t sizes[4], n;

	ck_assert_int_eq(swp_golden_parse(two, sizeof two, frames, sizes, 4), 3);
	ck_assert_ptr_eq(frames[0], two + 4);
	ck_assert_uint_eq(sizes[0], 2);
	ck_assert_uint_eq(sizes[1], 0);	/* an empty frame is a frame */
	ck_assert_ptr_eq(frames[2], two + 14);
	ck_assert_uint_eq(sizes[2], 1);
	ck_assert_int_eq(swp_golden_parse(two, sizeof two, frames, sizes, 3), 3);
	ck_assert_int_eq(swp_golden_parse(two, sizeof two, frames, sizes, 2), SWP_E_FRAMES);
	ck_assert_int_eq(swp_golden_parse(two, 0, frames, sizes, 4), 0);
	ck_assert_int_eq(swp_golden_parse(NULL, 0, NULL, NULL, 0), 0);
	ck_assert_int_eq(swp_golden_parse(NULL, 4, frames, sizes, 4), SWP_E_INVAL);
	ck_assert_int_eq(swp_golden_parse(two, sizeof two, NULL, sizes, 4), SWP_E_INVAL);
	/* every cut that is not at a frame boundary is malformed */
	for (n = 1; n < sizeof two; n++) {
		int rc = swp_golden_parse(two, n, frames, sizes, 4);
		if (n == 6 || n == 10)
			ck_assert_int_eq(rc, n == 6 ? 1 : 2);
		else
			ck_assert_int_eq(rc, SWP_E_MSGPACK);
	}
	/* a length past the end, including one that would wrap */
	{
		static const unsigned char big[] = { 0xff, 0xff, 0xff, 0xff, 'x' };
		static const unsigned char over[] = { 2, 0, 0, 0, 'x' };
		ck_assert_int_eq(swp_golden_parse(big, sizeof big, frames, sizes, 4),
		    SWP_E_MSGPACK);
		ck_assert_int_eq(swp_golden_parse(over, sizeof over, frames, sizes, 4),
		    SWP_E_MSGPACK);
	}
}
END_TEST

/* ---- CURVE key files (proto/keys.c) ---- */

static void
key_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(test_key_files)
{
	/* two keys of zmq_curve_keypair (one starting with '#', a Z85 character) */
	const char *k1 = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
	const char *k2 = "#zX!5&p7n9Dn2B%mQ@sO.v8=MR6VI3eB2u1O[2Hs";
	ck_assert(swp_key_valid(k1));
	ck_assert(swp_key_valid(k2));
	ck_assert(!swp_key_valid(NULL));
	ck_assert(!swp_key_valid(""));
	ck_assert(!swp_key_valid("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf"));	/* 39 */
	ck_assert(!swp_key_valid("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7x"));	/* 41 */
	ck_assert(!swp_key_valid("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf\""));	/* '"' */
	char dir[] = "/tmp/sinkwatch-keys-XXXXXX", p[128], out[SWP_KEY_LEN + 1], err[512];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char text[512];
	snprintf(text, sizeof(text), "# sinkwatch CURVE secret key\n\n  %s  # mine\n%s\n", k2, k1);
	snprintf(p, sizeof(p), "%s/a.key", dir);
	key_file(p, text, 0600);
	ck_assert_int_eq(swp_key_read(p, 1, out, err, sizeof(err)), 0);
	ck_assert_str_eq(out, k2);	/* the first key, though it starts with '#' */
	chmod(p, 0640);
	ck_assert_int_eq(swp_key_read(p, 1, out, err, sizeof(err)), -1);
	ck_assert(strstr(err, "readable by others (mode 0640): chmod 600"));
	ck_assert_int_eq(swp_key_read(p, 0, out, err, sizeof(err)), 0);	/* public: any mode */
	ck_assert_int_eq(swp_key_load(k1, out, err, sizeof(err)), 0);
	ck_assert_str_eq(out, k1);
	ck_assert_int_eq(swp_key_load(p, out, err, sizeof(err)), 0);
	ck_assert_str_eq(out, k2);
	ck_assert_int_eq(swp_key_load("no-such-file", out, err, sizeof(err)), -1);
	ck_assert(strstr(err, "'no-such-file' is neither a key"));
	/* a path of 40 Z85 characters is a valid key as text: the file wins */
	char p40[64];
	snprintf(p40, sizeof(p40), "%s/pub-forty.pub", dir);
	ck_assert_uint_eq(strlen(p40), SWP_KEY_LEN);
	ck_assert(swp_key_valid(p40));
	snprintf(text, sizeof(text), "%s\n", k1);
	key_file(p40, text, 0644);
	ck_assert_int_eq(swp_key_load(p40, out, err, sizeof(err)), 0);
	ck_assert_str_eq(out, k1);
	unlink(p40);
	ck_assert_int_eq(swp_key_load(p40, out, err, sizeof(err)), 0);	/* no file: the text */
	ck_assert_str_eq(out, p40);
	key_file(p, "# nothing\n\n", 0600);
	ck_assert_int_eq(swp_key_read(p, 1, out, err, sizeof(err)), -1);
	ck_assert(strstr(err, "no key in the file"));
	key_file(p, "# a key cut short\nrq:rM>}U?@Lns47E1\n", 0600);
	ck_assert_int_eq(swp_key_read(p, 1, out, err, sizeof(err)), -1);
	ck_assert(strstr(err, ":2: not a CURVE key"));
	/* an allow list */
	char ks[3][SWP_KEY_LEN + 1];
	size_t n = 9;
	snprintf(text, sizeof(text), "# allowed\n%s alice\n\n%s # bob\n", k1, k2);
	key_file(p, text, 0644);
	ck_assert_int_eq(swp_keys_read_list(p, ks, 3, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_str_eq(ks[0], k1);
	ck_assert_str_eq(ks[1], k2);
	ck_assert_int_eq(swp_keys_read_list(p, ks, 1, &n, err, sizeof(err)), -1);
	ck_assert(strstr(err, ":4: more than 1 keys"));
	snprintf(text, sizeof(text), "%s\nnot-a-key\n", k1);
	key_file(p, text, 0644);
	ck_assert_int_eq(swp_keys_read_list(p, ks, 3, &n, err, sizeof(err)), -1);
	ck_assert(strstr(err, ":2: not a CURVE public key"));
	key_file(p, "", 0644);
	ck_assert_int_eq(swp_keys_read_list(p, ks, 3, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 0);	/* empty: nobody allowed */
	unlink(p);
	ck_assert_int_eq(swp_keys_read_list(p, ks, 3, &n, err, sizeof(err)), -1);
	ck_assert(strstr(err, "No such file"));
	rmdir(dir);
}
END_TEST

static Suite *
proto_suite(void)
{
	Suite *s = suite_create("proto");
	TCase *tc;

	tc = tcase_create("golden");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_golden_manifest_complete);
	tcase_add_test(tc, test_golden_ok_reencode);
	tcase_add_test(tc, test_golden_bad);
	tcase_add_test(tc, test_golden_fields);
	tcase_add_test(tc, test_golden_fields_v2);
	tcase_add_test(tc, test_golden_bad_v2_details);
	tcase_add_test(tc, test_golden_truncation);
	tcase_add_test(tc, test_golden_byte_flips);
	tcase_add_test(tc, test_random_headers);
	suite_add_tcase(s, tc);

	tc = tcase_create("codec");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_roundtrip_random);
	tcase_add_test(tc, test_inc_resume);
	tcase_add_test(tc, test_v2_canonical);
	tcase_add_test(tc, test_v2_decode_defaults);
	tcase_add_test(tc, test_v2_encoder_errors);
	tcase_add_test(tc, test_encoder_canonical);
	tcase_add_test(tc, test_encoder_errors);
	tcase_add_test(tc, test_encoder_to_buffer);
	tcase_add_test(tc, test_decode_args);
	tcase_add_test(tc, test_msg_clear);
	tcase_add_test(tc, test_key_files);
	tcase_add_test(tc, test_fields_missing_and_wrong);
	tcase_add_test(tc, test_fields_unknown_and_duplicate);
	tcase_add_test(tc, test_fields_names);
	suite_add_tcase(s, tc);

	tc = tcase_create("limits");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_limits_counts);
	tcase_add_test(tc, test_limits_qpos);
	tcase_add_test(tc, test_limits_strings);
	tcase_add_test(tc, test_limits_topic);
	tcase_add_test(tc, test_limits_sizes);
	tcase_add_test(tc, test_limits_depth);
	tcase_add_test(tc, test_prescan_claims);
	tcase_add_test(tc, test_check_order);
	tcase_add_test(tc, test_v2_limits);
	tcase_add_test(tc, test_v2_check_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("small");
	tcase_add_test(tc, test_topic);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_golden_parse);
	suite_add_tcase(s, tc);
	return s;
}


int
main(void)
{
	SRunner *sr = srunner_create(proto_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
