/*
 * test_runfile.c: the run-file writer and SWMR reader (storage/runfile.h)
 * against the layout of storage/LAYOUT.md: names, exact round trips,
 * resume, refused resumes that leave the file alone, the end mark, a SWMR
 * reader tailing from another process while steps are appended, and a
 * writer killed with SIGKILL in the middle of a stream.
 *
 * HDF5 cannot SWMR-read a file from the process that writes it (the reader
 * would share the writer's caches), so every concurrent reader is a forked
 * child, forked before the parent opens anything.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "storage/runfile.h"

#define NREASONS (SWM_STATUS__N - 1)

/* ---- a temp dir per test ------------------------------------------------- */

static char tmpdir[256];

static void
make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/sw_runfile_XXXXXX",
	    base && base[0] ? base : "/tmp");
	ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void
remove_tmpdir(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char p[512];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof(p), "%s/%s", tmpdir, e->d_name);
			unlink(p);
		}
	closedir(d);
	rmdir(tmpdir);
}

static int
count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))	/* the run lock file is not an entry of a run */
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, SW_RUNLOCK_FILE))
			n++;
	closedir(d);
	return n;
}

static void
run_path(const char *run, char *buf, size_t len)
{
	char name[SW_RUNFILE_NAME_MAX + 1];
	ck_assert_int_gt(sw_runfile_name(run, name, sizeof(name)), 0);
	snprintf(buf, len, "%s/%s", tmpdir, name);
}

/* A whole file in memory, to show it is unchanged. */
static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	ck_assert_ptr_nonnull(fp);
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, fp), (size_t)n);
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

/* ---- steps with values known from (t, index) ---------------------------- */

static int pair_null(int64_t t) { return t % 5 == 2; }
static int flip_null(int64_t t) { return t % 7 == 3; }

static int64_t x_step(int64_t t) { return 100 + 10 * t; }
static double x_time(int64_t t) { return 1.7e9 + 0.5 * (double)t; }
static double x_head(int f, int64_t t, size_t i) { return (f + 1) + 0.01 * (double)t + 1e-4 * (double)i; }
static int64_t x_rows(int64_t t, size_t i) { return t * 100 + (int64_t)i; }
static int64_t x_rej(int64_t t, size_t i, int st) { return st == 0 ? 999999 : t * 1000 + (int64_t)i * 10 + st; }
static double x_pair(int p, int64_t t, size_t j) { return (p + 1) * 0.5 + 0.001 * (double)t + 1e-6 * (double)j; }
static double x_flip(int64_t t, size_t j) { return 0.1 * (double)t + 0.01 * (double)j; }
/* every layer, none, and runs of layers present */
static uint8_t x_missing(int64_t t, size_t l)
{
	return t % 6 == 0 ? 0 : t % 6 == 5 ? 1 : (uint8_t)((t + (int64_t)l) % 2);
}
static int64_t x_lost(int64_t t) { return 2 * t; }
static int64_t x_incomplete(int64_t t) { return t / 3; }

struct stepbuf {
	uint32_t L, H;
	double *head[SW_HEAD_FIELDS], *pair[SW_PAIR_FIELDS], *flip;
	int64_t *rows, *rej;
	uint8_t *missing;
	sw_step s;
};

static void
stepbuf_init(struct stepbuf *b, uint32_t L, uint32_t H)
{
	size_t lh = (size_t)L * H;

	memset(b, 0, sizeof(*b));
	b->L = L;
	b->H = H;
	for (int f = 0; f < SW_HEAD_FIELDS; f++)
		b->head[f] = malloc(lh * sizeof(double));
	for (int p = 0; p < SW_PAIR_FIELDS; p++)
		b->pair[p] = malloc(lh * H * sizeof(double));
	b->flip = malloc((size_t)L * SW_FLIP_FIELDS * sizeof(double));
	b->rows = malloc(lh * sizeof(int64_t));
	b->rej = malloc(lh * SWM_STATUS__N * sizeof(int64_t));
	b->missing = malloc(L);
}

static void
stepbuf_free(struct stepbuf *b)
{
	for (int f = 0; f < SW_HEAD_FIELDS; f++)
		free(b->head[f]);
	for (int p = 0; p < SW_PAIR_FIELDS; p++)
		free(b->pair[p]);
	free(b->flip);
	free(b->rows);
	free(b->rej);
	free(b->missing);
}

static const sw_step *
stepbuf_fill(struct stepbuf *b, int64_t t)
{
	size_t lh = (size_t)b->L * b->H;

	memset(&b->s, 0, sizeof(b->s));
	b->s.step = x_step(t);
	b->s.time = x_time(t);
	for (int f = 0; f < SW_HEAD_FIELDS; f++) {
		for (size_t i = 0; i < lh; i++)
			b->head[f][i] = x_head(f, t, i);
		b->s.head[f] = b->head[f];
	}
	for (size_t i = 0; i < lh; i++) {
		b->rows[i] = x_rows(t, i);
		for (int st = 0; st < SWM_STATUS__N; st++)
			b->rej[i * SWM_STATUS__N + st] = x_rej(t, i, st);
	}
	b->s.rows = b->rows;
	b->s.rejected = b->rej;
	for (int p = 0; p < SW_PAIR_FIELDS; p++) {
		for (size_t j = 0; j < lh * b->H; j++)
			b->pair[p][j] = x_pair(p, t, j);
		b->s.pair[p] = pair_null(t) ? NULL : b->pair[p];
	}
	for (size_t j = 0; j < (size_t)b->L * SW_FLIP_FIELDS; j++)
		b->flip[j] = x_flip(t, j);
	b->s.flip = flip_null(t) ? NULL : b->flip;
	for (size_t l = 0; l < b->L; l++)
		b->missing[l] = x_missing(t, l);
	b->s.missing = b->missing;
	b->s.lost = x_lost(t);
	b->s.incomplete = x_incomplete(t);
	return &b->s;
}

static void
meta_init(sw_runmeta *m, const char *run, uint32_t L, uint32_t H)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->run, sizeof(m->run), "%s", run);
	snprintf(m->model, sizeof(m->model), "pythia-70m");
	m->params = 70426624;
	m->layers = L;
	m->heads = H;
	m->sink = 0;
	m->fixed_probe = 1;
	m->split_form = "paired";
	m->kind = "probs";
	m->rows = 64;
	m->keys = 128;
}

static void
append_range(sw_runfile *f, struct stepbuf *b, int64_t t0, int64_t t1)
{
	char err[512];

	for (int64_t t = t0; t < t1; t++)
		ck_assert_msg(sw_runfile_append(f, stepbuf_fill(b, t), err, sizeof(err)) == 0,
		    "append %lld: %s", (long long)t, err);
}

/*
 * Checks steps [t0, t1) of every series against the generators. Returns
 * the number of mismatches (so a forked child can report it), 0 if all is
 * right; msg gets the first one.
 */
static int
verify_steps(sw_reader *r, uint32_t L, uint32_t H, int64_t t0, int64_t t1,
    char *msg, size_t msglen)
{
	size_t lh = (size_t)L * H, n = (size_t)(t1 - t0);
	size_t cap = n * lh * H + n * lh * NREASONS + 16;
	double *buf = malloc(cap * sizeof(double));
	char err[300];
	int bad = 0;

#define MISMATCH(...) do { if (!bad++) snprintf(msg, msglen, __VA_ARGS__); } while (0)
#define READ(name, want) do { \
	int64_t got_ = sw_reader_read(r, name, t0, t1, buf, cap, err, sizeof(err)); \
	if (got_ != (int64_t)(want)) { MISMATCH("read %s: %lld values (%s)", name, \
	    (long long)got_, got_ < 0 ? err : ""); goto out; } } while (0)

	if (n == 0)
		goto out;
	READ("step", n);
	for (size_t k = 0; k < n; k++)
		if (buf[k] != (double)x_step(t0 + (int64_t)k))
			MISMATCH("step[%lld] = %g", (long long)(t0 + (int64_t)k), buf[k]);
	READ("time", n);
	for (size_t k = 0; k < n; k++)
		if (buf[k] != x_time(t0 + (int64_t)k))
			MISMATCH("time[%lld] = %.17g", (long long)(t0 + (int64_t)k), buf[k]);
	for (int f = 0; f < SW_HEAD_FIELDS; f++) {
		READ(sw_head_field_names[f], n * lh);
		for (size_t k = 0; k < n; k++)
			for (size_t i = 0; i < lh; i++)
				if (buf[k * lh + i] != x_head(f, t0 + (int64_t)k, i))
					MISMATCH("%s[%lld][%zu] = %.17g", sw_head_field_names[f],
					    (long long)(t0 + (int64_t)k), i, buf[k * lh + i]);
	}
	READ("rows", n * lh);
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < lh; i++)
			if (buf[k * lh + i] != (double)x_rows(t0 + (int64_t)k, i))
				MISMATCH("rows[%lld][%zu] = %g", (long long)(t0 + (int64_t)k), i,
				    buf[k * lh + i]);
	READ("rejected", n * lh * NREASONS);
	for (size_t k = 0; k < n; k++)
		for (size_t i = 0; i < lh; i++)
			for (int q = 0; q < NREASONS; q++) {
				double v = buf[(k * lh + i) * NREASONS + q];
				if (v != (double)x_rej(t0 + (int64_t)k, i, q + 1))
					MISMATCH("rejected[%lld][%zu][%d] = %g",
					    (long long)(t0 + (int64_t)k), i, q, v);
			}
	for (int p = 0; p < SW_PAIR_FIELDS; p++) {
		READ(sw_pair_field_names[p], n * lh * H);
		for (size_t k = 0; k < n; k++) {
			int64_t t = t0 + (int64_t)k;
			for (size_t j = 0; j < lh * H; j++) {
				double v = buf[k * lh * H + j];
				/* a missing layer's matrices are the fill value, NaN */
				int nan = pair_null(t) || x_missing(t, j / ((size_t)H * H));
				if (nan ? !isnan(v) : v != x_pair(p, t, j))
					MISMATCH("%s[%lld][%zu] = %.17g", sw_pair_field_names[p],
					    (long long)t, j, v);
			}
		}
	}
	READ("flip_rate", n * L * SW_FLIP_FIELDS);
	for (size_t k = 0; k < n; k++) {
		int64_t t = t0 + (int64_t)k;
		for (size_t j = 0; j < (size_t)L * SW_FLIP_FIELDS; j++) {
			double v = buf[k * L * SW_FLIP_FIELDS + j];
			if (flip_null(t) ? !isnan(v) : v != x_flip(t, j))
				MISMATCH("flip_rate[%lld][%zu] = %g", (long long)t, j, v);
		}
	}
	READ("missing", n * L);
	for (size_t k = 0; k < n; k++)
		for (size_t l = 0; l < L; l++)
			if (buf[k * L + l] != x_missing(t0 + (int64_t)k, l))
				MISMATCH("missing[%lld][%zu] = %g", (long long)(t0 + (int64_t)k), l,
				    buf[k * L + l]);
	READ("lost", n);
	for (size_t k = 0; k < n; k++)
		if (buf[k] != (double)x_lost(t0 + (int64_t)k))
			MISMATCH("lost[%lld] = %g", (long long)(t0 + (int64_t)k), buf[k]);
	READ("incomplete", n);
	for (size_t k = 0; k < n; k++)
		if (buf[k] != (double)x_incomplete(t0 + (int64_t)k))
			MISMATCH("incomplete[%lld] = %g", (long long)(t0 + (int64_t)k), buf[k]);
out:
	free(buf);
	return bad;
#undef READ
#undef MISMATCH
}

static void
assert_steps(const char *path, uint32_t L, uint32_t H, int64_t want)
{
	sw_reader *r;
	char err[512], msg[512] = "";

	ck_assert_msg(sw_reader_open(path, &r, NULL, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_reader_refresh(r, err, sizeof(err)), want);
	ck_assert_msg(verify_steps(r, L, H, 0, want, msg, sizeof(msg)) == 0, "%s", msg);
	sw_reader_close(&r);
	ck_assert_ptr_null(r);
}

/* ---- names ---------------------------------------------------------------- */

static int
hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Inverse of the short form: proves it injective. -1 if not decodable. */
static int
name_decode(const char *name, char *out, size_t len)
{
	size_t n = strlen(name), k = 0;

	if (n < 3 || strcmp(name + n - 3, ".h5"))
		return -1;
	for (size_t i = 0; i < n - 3; i++) {
		if (k + 1 >= len)
			return -1;
		if (name[i] == '%') {
			if (i + 2 >= n - 3 || hexval(name[i + 1]) < 0 || hexval(name[i + 2]) < 0)
				return -1;
			out[k++] = (char)(hexval(name[i + 1]) * 16 + hexval(name[i + 2]));
			i += 2;
		} else
			out[k++] = name[i];
	}
	out[k] = '\0';
	return 0;
}

static void
assert_safe_name(const char *run, const char *name, int n)
{
	ck_assert_int_eq((int)strlen(name), n);
	ck_assert_int_le(n, SW_RUNFILE_NAME_MAX);
	ck_assert_msg(name[0] != '.', "\"%s\" starts with a dot", name);
	ck_assert_msg(n >= 3 && !strcmp(name + n - 3, ".h5"), "\"%s\" does not end .h5", name);
	for (const char *p = name; *p; p++)
		ck_assert_msg((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-_.%~", *p),
		    "\"%s\" (for \"%s\") holds byte 0x%02x", name, run, (unsigned char)*p);
}

START_TEST(test_names)
{
	static const struct { const char *run, *name; } cases[] = {
		{ "run-1_a.b", "run-1_a.b.h5" },
		{ "../x", "%2E.%2Fx.h5" },
		{ "a/b", "a%2Fb.h5" },
		{ ".", "%2E.h5" },
		{ "..", "%2E..h5" },
		{ ".hidden", "%2Ehidden.h5" },
		{ "a%2Fb", "a%252Fb.h5" },
		{ "a b", "a%20b.h5" },
		{ "\xc3\xa9t\xff", "%C3%A9t%FF.h5" },
		{ "a~b", "a%7Eb.h5" },
		{ "x.h5", "x.h5.h5" },
	};
	static const char *const tricky[] = {
		"a/b", "a%2Fb", "a_b", "a%b", "a b", "a.b", "a..b", "A/B", "a\\b",
		"a:b", "a~b", "%2E", ".", "..", "_2E", "a%252Fb", "a\x01", "a\x7f",
		"a", "a.h5", "a%2E", ".a", "%2Ea", "a/", "/a", "a//b", "a/./b",
		"\xff", "%FF", "%ff", "a\n", "a\t", "-", "_", "~", "%7E"
	};
	static const char *const head_names[SW_HEAD_FIELDS] = {
		"sink_mass", "content_mass", "entropy", "sink_entropy",
		"content_entropy", "content_term", "content_entropy_mw",
		"sink_balance", "dH", "dH_sink", "dH_content", "drift_sink",
		"drift_content"
	};
	static const char *const pair_names[SW_PAIR_FIELDS] = {
		"cosine_keep", "cosine_drop", "js_keep", "js_drop", "pair_sink",
		"pair_content"
	};
	char buf[3 * 128 + 4], dec[256], names[sizeof(tricky) / sizeof(tricky[0])][64];

	/* the dataset names of LAYOUT.md, in the enums' order */
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		ck_assert_str_eq(sw_head_field_names[i], head_names[i]);
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		ck_assert_str_eq(sw_pair_field_names[i], pair_names[i]);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = sw_runfile_name(cases[i].run, buf, sizeof(buf));
		ck_assert_str_eq(buf, cases[i].name);
		assert_safe_name(cases[i].run, buf, n);
	}
	ck_assert_int_eq(sw_runfile_name("", buf, sizeof(buf)), -1);
	ck_assert_int_eq(sw_runfile_name(NULL, buf, sizeof(buf)), -1);

	/* injective: every name decodes back to its id, and all differ */
	for (size_t i = 0; i < sizeof(tricky) / sizeof(tricky[0]); i++) {
		int n = sw_runfile_name(tricky[i], names[i], sizeof(names[i]));
		ck_assert_int_gt(n, 0);
		assert_safe_name(tricky[i], names[i], n);
		ck_assert_int_eq(name_decode(names[i], dec, sizeof(dec)), 0);
		ck_assert_str_eq(dec, tricky[i]);
		for (size_t j = 0; j < i; j++)
			ck_assert_msg(strcmp(names[i], names[j]), "\"%s\" and \"%s\" both give %s",
			    tricky[i], tricky[j], names[i]);
	}

	/* the buffer: exact fit needs the NUL */
	ck_assert_int_eq(sw_runfile_name("a/b", buf, 8), -1);
	ck_assert_int_eq(sw_runfile_name("a/b", buf, 9), 8);

	/* 128 plain bytes stay plain */
	char id[129];
	memset(id, 'r', 128);
	id[128] = '\0';
	int n = sw_runfile_name(id, buf, sizeof(buf));
	ck_assert_int_eq(n, 131);
	ck_assert_ptr_null(strchr(buf, '~'));

	/*
	 * 128 escaped bytes would be 387 bytes, over NAME_MAX: prefix, '~',
	 * hash. Two ids that differ only in their last byte still differ,
	 * and the file can really be made.
	 */
	char name2[sizeof(buf)];
	memset(id, 0xff, 128);
	n = sw_runfile_name(id, buf, sizeof(buf));
	assert_safe_name(id, buf, n);
	ck_assert_ptr_nonnull(strchr(buf, '~'));
	id[127] = (char)0xfe;
	ck_assert_int_gt(sw_runfile_name(id, name2, sizeof(name2)), 0);
	ck_assert_str_ne(buf, name2);
	ck_assert_int_eq(sw_runfile_name(id, name2, SW_RUNFILE_NAME_MAX + 1), (int)strlen(name2));

	make_tmpdir();
	char path[sizeof(tmpdir) + sizeof(name2) + 1];
	snprintf(path, sizeof(path), "%s/%s", tmpdir, name2);
	FILE *fp = fopen(path, "w");
	ck_assert_msg(fp != NULL, "%s: %s", path, strerror(errno));
	fclose(fp);
	remove_tmpdir();
}
END_TEST

/* ---- create, append, read back ------------------------------------------- */

static void
check_dataset_layout(const char *path)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
	hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	ck_assert_int_ge(file, 0);
	H5Pclose(fapl);

	/* latest format: superblock version 3, what SWMR needs */
	H5F_info2_t info;
	ck_assert_int_ge(H5Fget_info2(file, &info), 0);
	ck_assert_uint_ge(info.super.version, 3);

	static const struct { const char *name, *dims; int rank; hsize_t chunk0; } want[] = {
		{ "step", "step", 1, 64 }, { "time", "step", 1, 64 },
		{ "entropy", "step,layer,head", 3, 64 },
		{ "rejected", "step,layer,head,reason", 4, 64 },
		{ "cosine_keep", "step,layer,head,head", 4, 64 },
		{ "flip_rate", "step,layer,metric", 3, 64 },
		{ "missing", "step,layer", 2, 64 }, { "ended", "mark", 1, 64 },
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		hid_t ds = H5Dopen2(file, want[i].name, H5P_DEFAULT);
		ck_assert_msg(ds >= 0, "no /%s", want[i].name);
		hid_t a = H5Aopen(ds, "dims", H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
		char *s = NULL;
		H5Tset_size(t, H5T_VARIABLE);
		H5Tset_cset(t, H5T_CSET_UTF8);
		ck_assert_int_ge(H5Aread(a, t, &s), 0);
		ck_assert_str_eq(s, want[i].dims);
		H5free_memory(s);
		H5Tclose(t);
		H5Aclose(a);
		hid_t dcpl = H5Dget_create_plist(ds);
		hsize_t ch[4];
		ck_assert_int_eq(H5Pget_chunk(dcpl, 4, ch), want[i].rank);
		ck_assert_uint_eq(ch[0], want[i].chunk0);
		hid_t ft = H5Dget_type(ds);
		if (H5Tget_class(ft) == H5T_FLOAT) {
			double fill = 0;
			ck_assert_int_ge(H5Pget_fill_value(dcpl, H5T_NATIVE_DOUBLE, &fill), 0);
			ck_assert(isnan(fill));
		}
		H5Tclose(ft);
		H5Pclose(dcpl);
		hid_t sp = H5Dget_space(ds);
		hsize_t dims[4], maxd[4];
		H5Sget_simple_extent_dims(sp, dims, maxd);
		ck_assert(maxd[0] == H5S_UNLIMITED);
		H5Sclose(sp);
		H5Dclose(ds);
	}
	char *s = NULL;
	hid_t a = H5Aopen(file, "rejected_reasons", H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	ck_assert_int_ge(H5Aread(a, t, &s), 0);
	ck_assert_str_eq(s, "short,nosink,nonfinite,negative,sum");
	H5free_memory(s);
	H5Aclose(a);
	a = H5Aopen(file, "flip_fields", H5P_DEFAULT);
	ck_assert_int_ge(H5Aread(a, t, &s), 0);
	ck_assert_str_eq(s, "cosine,js,entropy");
	H5free_memory(s);
	H5Aclose(a);
	a = H5Aopen(file, "created", H5P_DEFAULT);
	ck_assert_int_ge(H5Aread(a, t, &s), 0);
	ck_assert_int_eq((int)strlen(s), 20);	/* 2026-01-02T03:04:05Z */
	ck_assert(s[4] == '-' && s[10] == 'T' && s[19] == 'Z');
	H5free_memory(s);
	H5Aclose(a);
	H5Tclose(t);
	int32_t v = 0;
	a = H5Aopen(file, "metrics_contract", H5P_DEFAULT);
	ck_assert_int_ge(H5Aread(a, H5T_NATIVE_INT32, &v), 0);
	ck_assert_int_eq(v, SWM_CONTRACT_VERSION);
	H5Aclose(a);
	a = H5Aopen(file, "layout_version", H5P_DEFAULT);
	ck_assert_int_ge(H5Aread(a, H5T_NATIVE_INT32, &v), 0);
	ck_assert_int_eq(v, SW_RUNFILE_VERSION);
	H5Aclose(a);
	H5Fclose(file);
}

START_TEST(test_create_read)
{
	const uint32_t L = 3, H = 4;
	sw_runmeta m, got;
	sw_runfile *f;
	sw_reader *r;
	struct stepbuf b;
	char err[512], path[512], msg[512] = "";
	double buf[64];

	make_tmpdir();
	meta_init(&m, "exp/a b", L, H);
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_steps(f), 0);
	run_path(m.run, path, sizeof(path));
	ck_assert_str_eq(sw_runfile_path(f), path);
	/* the temporary name is gone, the file has its own */
	ck_assert_int_eq(count_entries(tmpdir), 1);

	double *head[SW_HEAD_FIELDS];
	int64_t rows[12];
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		head[i] = malloc(L * H * sizeof(double));
	ck_assert_int_eq(sw_runfile_last(f, head, rows), -1);
	ck_assert(isnan(head[0][0]) && isnan(head[SW_HEAD_FIELDS - 1][L * H - 1]));
	ck_assert_int_eq(rows[0], 0);

	append_range(f, &b, 0, 9);
	ck_assert_int_eq(sw_runfile_steps(f), 9);
	ck_assert_int_eq(sw_runfile_last(f, head, rows), 0);
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		for (size_t j = 0; j < L * H; j++)
			ck_assert(head[i][j] == x_head(i, 8, j));
	ck_assert_int_eq(rows[5], x_rows(8, 5));
	ck_assert_int_eq(sw_runfile_flush(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_ptr_null(f);
	ck_assert_int_eq(sw_runfile_close(&f), 0);	/* NULL is fine */

	ck_assert_msg(sw_reader_open(path, &r, &got, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(got.run, m.run);
	ck_assert_str_eq(got.model, m.model);
	ck_assert_uint_eq(got.params, m.params);
	ck_assert_uint_eq(got.layers, L);
	ck_assert_uint_eq(got.heads, H);
	ck_assert_uint_eq(got.sink, 0);
	ck_assert_int_eq(got.fixed_probe, 1);
	ck_assert_str_eq(got.split_form, "paired");
	ck_assert_str_eq(got.kind, "probs");
	ck_assert_uint_eq(got.rows, 64);
	ck_assert_uint_eq(got.keys, 128);
	ck_assert_int_eq(sw_reader_refresh(r, err, sizeof(err)), 9);
	ck_assert_msg(verify_steps(r, L, H, 0, 9, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_int_eq(sw_reader_ended(r), 0);

	/* a sub-range, and the reader's refusals */
	ck_assert_int_eq(sw_reader_read(r, "step", 3, 5, buf, 64, err, sizeof(err)), 2);
	ck_assert(buf[0] == x_step(3) && buf[1] == x_step(4));
	ck_assert_int_eq(sw_reader_read(r, "step", 4, 4, buf, 64, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_read(r, "step", 0, 10, buf, 64, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "committed"));
	ck_assert_int_eq(sw_reader_read(r, "step", 5, 3, buf, 64, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_reader_read(r, "nope", 0, 1, buf, 64, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_reader_read(r, "ended", 0, 0, buf, 64, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_reader_read(r, "entropy", 0, 9, buf, 64, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "buffer"));

	/* the shape of one step of a series: what a reader sizes its buffer by */
	int64_t dims[4];
	ck_assert_int_eq(sw_reader_shape(r, "entropy", dims, err, sizeof(err)), 2);
	ck_assert(dims[0] == (int64_t)L && dims[1] == (int64_t)H);
	ck_assert_int_eq(sw_reader_shape(r, "js_keep", dims, err, sizeof(err)), 3);
	ck_assert(dims[0] == (int64_t)L && dims[1] == (int64_t)H && dims[2] == (int64_t)H);
	ck_assert_int_eq(sw_reader_shape(r, "flip_rate", dims, err, sizeof(err)), 2);
	ck_assert(dims[0] == (int64_t)L && dims[1] == SW_FLIP_FIELDS);
	ck_assert_int_eq(sw_reader_shape(r, "step", dims, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_shape(r, "nope", dims, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "nope"));
	ck_assert_int_eq(sw_reader_shape(r, "ended", dims, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_reader_shape(r, "sink_mass", dims, err, sizeof(err)), 2);
	ck_assert_int_eq(sw_reader_read(r, "sink_mass", 0, 1, buf, 64, err, sizeof(err)),
	    dims[0] * dims[1]);
	sw_reader_close(&r);
	ck_assert_ptr_null(r);
	sw_reader_close(&r);

	check_dataset_layout(path);
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		free(head[i]);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/* Chunks stay near 1 MiB; a step larger than that is cut along the layers. */
START_TEST(test_chunking)
{
	static const struct { uint32_t L, H; size_t opt; hsize_t head[3], pair[4]; } cases[] = {
		{ 3, 4, 8, { 8, 3, 4 }, { 8, 3, 4, 4 } },
		{ 2, 256, 0, { 64, 2, 256 }, { 1, 2, 256, 256 } },
		{ 4, 256, 0, { 64, 4, 256 }, { 1, 2, 256, 256 } },
	};

	make_tmpdir();
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		sw_runmeta m;
		sw_runfile_opts o = { cases[c].opt };
		sw_runfile *f;
		struct stepbuf b;
		char err[512], run[16], path[512];

		snprintf(run, sizeof(run), "chunk%zu", c);
		meta_init(&m, run, cases[c].L, cases[c].H);
		stepbuf_init(&b, cases[c].L, cases[c].H);
		ck_assert_msg(sw_runfile_open(tmpdir, &m, &o, &f, err, sizeof(err)) == 0, "%s", err);
		append_range(f, &b, 0, 3);
		ck_assert_int_eq(sw_runfile_close(&f), 0);
		run_path(run, path, sizeof(path));

		hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
		ck_assert_int_ge(file, 0);
		hsize_t ch[4];
		hid_t ds = H5Dopen2(file, "sink_mass", H5P_DEFAULT);
		hid_t dcpl = H5Dget_create_plist(ds);
		ck_assert_int_eq(H5Pget_chunk(dcpl, 4, ch), 3);
		for (int i = 0; i < 3; i++)
			ck_assert_uint_eq(ch[i], cases[c].head[i]);
		H5Pclose(dcpl);
		H5Dclose(ds);
		ds = H5Dopen2(file, "js_drop", H5P_DEFAULT);
		dcpl = H5Dget_create_plist(ds);
		ck_assert_int_eq(H5Pget_chunk(dcpl, 4, ch), 4);
		for (int i = 0; i < 4; i++)
			ck_assert_uint_eq(ch[i], cases[c].pair[i]);
		H5Pclose(dcpl);
		H5Dclose(ds);
		H5Fclose(file);
		assert_steps(path, cases[c].L, cases[c].H, 3);
		stepbuf_free(&b);
	}
	remove_tmpdir();
}
END_TEST

/* ---- resume --------------------------------------------------------------- */

START_TEST(test_resume)
{
	const uint32_t L = 2, H = 3;
	sw_runmeta m;
	sw_runfile *f;
	struct stepbuf b;
	char err[512], path[512];

	make_tmpdir();
	meta_init(&m, "resume", L, H);
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 0, 4);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	run_path(m.run, path, sizeof(path));

	/* split_form is the file's own; a different probe is another generation */
	m.split_form = "aggregate";
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_steps(f), 4);
	double *head[SW_HEAD_FIELDS] = { 0 };
	int64_t rows[6];
	double ent[6];
	head[SW_F_ENTROPY] = ent;
	ck_assert_int_eq(sw_runfile_last(f, head, rows), 0);
	for (size_t i = 0; i < L * H; i++) {
		ck_assert(ent[i] == x_head(SW_F_ENTROPY, 3, i));
		ck_assert_int_eq(rows[i], x_rows(3, i));
	}
	append_range(f, &b, 4, 11);
	ck_assert_int_eq(sw_runfile_steps(f), 11);
	ck_assert_int_eq(sw_runfile_last(f, head, NULL), 0);
	ck_assert(ent[1] == x_head(SW_F_ENTROPY, 10, 1));
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	assert_steps(path, L, H, 11);

	sw_reader *r;
	sw_runmeta got;
	ck_assert_int_eq(sw_reader_open(path, &r, &got, err, sizeof(err)), 0);
	ck_assert_str_eq(got.split_form, "paired");
	ck_assert_int_eq(got.fixed_probe, 1);
	sw_reader_close(&r);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/* A crash between the extension of some datasets and that of /step. */
START_TEST(test_resume_torn)
{
	const uint32_t L = 2, H = 2;
	sw_runmeta m;
	sw_runfile *f;
	struct stepbuf b;
	char err[512], path[512];

	make_tmpdir();
	meta_init(&m, "torn", L, H);
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 0, 3);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	run_path(m.run, path, sizeof(path));

	/* what a writer killed mid-append leaves: entropy and rows ahead */
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
	hid_t file = H5Fopen(path, H5F_ACC_RDWR, fapl);
	ck_assert_int_ge(file, 0);
	H5Pclose(fapl);
	const char *ahead[] = { "entropy", "rows" };
	for (int i = 0; i < 2; i++) {
		hid_t ds = H5Dopen2(file, ahead[i], H5P_DEFAULT);
		hsize_t dims[3] = { 5, L, H }, start[3] = { 3, 0, 0 }, count[3] = { 2, L, H };
		ck_assert_int_ge(H5Dset_extent(ds, dims), 0);
		double junk[2 * L * H];
		for (size_t j = 0; j < 2 * L * H; j++)
			junk[j] = 999;
		hid_t fsp = H5Dget_space(ds), msp = H5Screate_simple(3, count, NULL);
		H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL);
		ck_assert_int_ge(H5Dwrite(ds, H5T_NATIVE_DOUBLE, msp, fsp, H5P_DEFAULT, junk), 0);
		H5Sclose(msp);
		H5Sclose(fsp);
		H5Dclose(ds);
	}
	H5Fclose(file);

	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_steps(f), 3);	/* /step decides */
	append_range(f, &b, 3, 6);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	/* the junk at steps 3 and 4 is overwritten, 0..2 untouched */
	assert_steps(path, L, H, 6);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

START_TEST(test_meta_mismatch)
{
	sw_runmeta m, bad;
	sw_runfile *f;
	struct stepbuf b;
	char err[512], path[512];
	size_t len0, len1;

	make_tmpdir();
	meta_init(&m, "mm", 2, 3);
	stepbuf_init(&b, 2, 3);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 0, 2);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	run_path(m.run, path, sizeof(path));
	unsigned char *before = slurp(path, &len0);

	for (int k = 0; k < 3; k++) {
		bad = m;
		if (k == 0)
			bad.layers = 3;
		else if (k == 1)
			bad.heads = 4;
		else
			bad.sink = 1;
		f = (sw_runfile *)&bad;	/* must come back NULL */
		err[0] = '\0';
		ck_assert_int_eq(sw_runfile_open(tmpdir, &bad, NULL, &f, err, sizeof(err)),
		    SW_RUNFILE_OTHER);
		ck_assert_ptr_null(f);
		ck_assert_msg(strstr(err, "holds") && strstr(err, k == 0 ? "layers" :
		    k == 1 ? "heads" : "sink"), "message: %s", err);
		unsigned char *after = slurp(path, &len1);
		ck_assert_uint_eq(len0, len1);
		ck_assert_msg(memcmp(before, after, len0) == 0, "the refused file changed");
		free(after);
	}

	/* a file whose run attribute names another run */
	char other[512];
	run_path("mm2", other, sizeof(other));
	ck_assert_int_eq(rename(path, other), 0);
	meta_init(&bad, "mm2", 2, 3);
	ck_assert_int_eq(sw_runfile_open(tmpdir, &bad, NULL, &f, err, sizeof(err)),
	    SW_RUNFILE_OTHER);
	ck_assert_msg(strstr(err, "holds run"), "message: %s", err);
	ck_assert_int_eq(rename(other, path), 0);

	/* still a good file for its own run */
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_steps(f), 2);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	assert_steps(path, 2, 3, 2);
	free(before);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

START_TEST(test_errors)
{
	sw_runmeta m;
	sw_runfile *f;
	sw_reader *r;
	char err[512], path[512];

	make_tmpdir();
	meta_init(&m, "e", 2, 2);
	snprintf(path, sizeof(path), "%s/no/such/dir", tmpdir);
	ck_assert_int_eq(sw_runfile_open(path, &m, NULL, &f, err, sizeof(err)), -1);
	ck_assert_ptr_null(f);
	ck_assert_msg(strstr(err, "no/such/dir"), "message: %s", err);

	m.layers = 0;
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)), -1);
	m.layers = 2;
	m.split_form = NULL;
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)), -1);
	m.split_form = "paired";
	m.kind = "bogus";
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)), -1);
	m.kind = "logits";
	m.run[0] = '\0';
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)), -1);
	ck_assert_int_eq(count_entries(tmpdir), 0);

	/* an existing file that is not HDF5 is left alone */
	meta_init(&m, "e", 2, 2);
	run_path("e", path, sizeof(path));
	FILE *fp = fopen(path, "w");
	fputs("not hdf5\n", fp);
	fclose(fp);
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)),
	    SW_RUNFILE_OTHER);
	ck_assert_msg(strstr(err, "not an HDF5 file"), "message: %s", err);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), -1);
	ck_assert_ptr_null(r);
	unlink(path);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "No such file or directory"), "message: %s", err);

	/* rows, rejected and missing are required */
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	struct stepbuf b;
	stepbuf_init(&b, 2, 2);
	sw_step s = *stepbuf_fill(&b, 0);
	s.rows = NULL;
	ck_assert_int_eq(sw_runfile_append(f, &s, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_runfile_steps(f), 0);
	/* a NULL head field is NaN */
	s = *stepbuf_fill(&b, 0);
	s.head[SW_F_DRIFT_SINK] = NULL;
	ck_assert_int_eq(sw_runfile_append(f, &s, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	double v[4];
	ck_assert_int_eq(sw_reader_read(r, "drift_sink", 0, 1, v, 4, err, sizeof(err)), 4);
	ck_assert(isnan(v[0]) && isnan(v[3]));
	ck_assert_int_eq(sw_reader_read(r, "drift_content", 0, 1, v, 4, err, sizeof(err)), 4);
	ck_assert(v[2] == x_head(SW_F_DRIFT_CONTENT, 0, 2));
	sw_reader_close(&r);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

START_TEST(test_mark_ended)
{
	sw_runmeta m;
	sw_runfile *f;
	sw_reader *r;
	struct stepbuf b;
	char err[512], path[512];

	make_tmpdir();
	meta_init(&m, "end", 1, 2);
	stepbuf_init(&b, 1, 2);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 0, 2);
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);	/* once */
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	run_path(m.run, path, sizeof(path));

	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_ended(r), 1);
	ck_assert_int_eq(sw_reader_refresh(r, err, sizeof(err)), 2);
	sw_reader_close(&r);

	hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t ds = H5Dopen2(file, "ended", H5P_DEFAULT), sp = H5Dget_space(ds);
	hsize_t n;
	H5Sget_simple_extent_dims(sp, &n, NULL);
	ck_assert_uint_eq(n, 1);
	H5Sclose(sp);
	H5Dclose(ds);
	H5Fclose(file);

	/* the run goes on after all: a 0, then its steps; then ended again */
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 2, 3);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_ended(r), 0);
	sw_reader_close(&r);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_ended(r), 1);
	sw_reader_close(&r);
	assert_steps(path, 1, 2, 3);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/* ---- a SWMR reader in another process ------------------------------------- */

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * The child: tails path until it has seen `total` steps and the end mark.
 * Exit status 0 when every check held; the first failure goes to stderr.
 */
static void
tail_child(const char *path, uint32_t L, uint32_t H, int64_t total, int ready_fd)
{
	sw_reader *r;
	char err[512], msg[512] = "";
	int64_t seen = 0, views = 0, between = 0;
	double t_end = now_s() + 60;

	if (sw_reader_open(path, &r, NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "tail child: %s\n", err);
		_exit(2);
	}
	if (write(ready_fd, "r", 1) != 1)
		_exit(2);
	close(ready_fd);
	for (;;) {
		int64_t n = sw_reader_refresh(r, err, sizeof(err));
		if (n < 0) {
			fprintf(stderr, "tail child: refresh: %s\n", err);
			_exit(3);
		}
		if (n < seen) {
			fprintf(stderr, "tail child: T went from %lld to %lld\n",
			    (long long)seen, (long long)n);
			_exit(4);
		}
		if (n > seen) {
			/* every new step complete: no fill values, all in order */
			if (verify_steps(r, L, H, seen, n, msg, sizeof(msg))) {
				fprintf(stderr, "tail child: steps [%lld, %lld): %s\n",
				    (long long)seen, (long long)n, msg);
				_exit(5);
			}
			views++;
			if (n < total)
				between++;
			seen = n;
		}
		if (seen == total && sw_reader_ended(r) == 1)
			break;
		if (seen > total || now_s() > t_end) {
			fprintf(stderr, "tail child: saw %lld of %lld steps\n", (long long)seen,
			    (long long)total);
			_exit(6);
		}
	}
	sw_reader_close(&r);
	/* it must really have tailed, not read a finished file */
	_exit(between > 0 && views > 1 ? 0 : 7);
}

START_TEST(test_swmr_tail)
{
	const uint32_t L = 4, H = 4;
	const int64_t total = 300;
	sw_runmeta m;
	sw_runfile *f;
	struct stepbuf b;
	char err[512], path[512], c;
	int go[2], ready[2], status;

	make_tmpdir();
	meta_init(&m, "tail", L, H);
	run_path(m.run, path, sizeof(path));
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(ready), 0);
	/* fork before the parent opens anything in HDF5 */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		tail_child(path, L, H, total, ready[1]);
	}
	close(go[0]);
	close(ready[1]);
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	for (int64_t t = 0; t < total; t++) {
		ck_assert_msg(sw_runfile_append(f, stepbuf_fill(&b, t), err, sizeof(err)) == 0,
		    "%s", err);
		/* a round: sometimes one step, sometimes three */
		if (t % 3 != 1) {
			ck_assert_msg(sw_runfile_flush(f, err, sizeof(err)) == 0, "%s", err);
			struct timespec ts = { 0, 500000 };
			nanosleep(&ts, NULL);
		}
	}
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_flush(f, err, sizeof(err)), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "tail child failed (status %d)", status);
	close(go[1]);
	close(ready[0]);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/* ---- a writer killed with SIGKILL ---------------------------------------- */

START_TEST(test_sigkill)
{
	const uint32_t L = 3, H = 2;
	const int64_t flushed = 40, unflushed = 9;
	sw_runmeta m;
	sw_runfile *f;
	sw_reader *r;
	struct stepbuf b;
	char err[512], path[512], msg[512] = "";
	int status;

	make_tmpdir();
	meta_init(&m, "killed", L, H);
	run_path(m.run, path, sizeof(path));
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		stepbuf_init(&b, L, H);
		if (sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) < 0)
			_exit(2);
		for (int64_t t = 0; t < flushed + unflushed; t++) {
			if (sw_runfile_append(f, stepbuf_fill(&b, t), err, sizeof(err)) < 0)
				_exit(3);
			if (t % 8 == 7 && t < flushed && sw_runfile_flush(f, err, sizeof(err)) < 0)
				_exit(4);
			if (t == flushed - 1 && sw_runfile_flush(f, err, sizeof(err)) < 0)
				_exit(4);
		}
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	    "writer child did not die by SIGKILL (status %d)", status);

	/* the pitfall itself: the writer flags are still set */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	hid_t plain = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	ck_assert_int_lt(plain, 0);

	/* a SWMR reader sees every flushed step, each complete */
	ck_assert_msg(sw_reader_open(path, &r, NULL, err, sizeof(err)) == 0, "%s", err);
	int64_t T = sw_reader_refresh(r, err, sizeof(err));
	ck_assert_msg(T >= flushed && T <= flushed + unflushed, "T = %lld", (long long)T);
	ck_assert_msg(verify_steps(r, L, H, 0, T, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_int_eq(sw_reader_ended(r), 0);
	sw_reader_close(&r);

	/* resume it and go on */
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_steps(f), T);
	double ent[6], *head[SW_HEAD_FIELDS] = { 0 };
	head[SW_F_ENTROPY] = ent;
	ck_assert_int_eq(sw_runfile_last(f, head, NULL), 0);
	ck_assert(ent[5] == x_head(SW_F_ENTROPY, T - 1, 5));
	append_range(f, &b, T, T + 12);
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	assert_steps(path, L, H, T + 12);

	/* closed cleanly: an ordinary open works again */
	plain = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	ck_assert_int_ge(plain, 0);
	H5Fclose(plain);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/*
 * Killed while a dashboard tails the file, then resumed while it still
 * does: the reader's shared lock must not stop the writer, and the reader
 * goes on seeing complete steps.
 */
START_TEST(test_resume_while_tailed)
{
	const uint32_t L = 2, H = 3;
	sw_runmeta m;
	sw_runfile *f;
	struct stepbuf b;
	char err[512], path[512], c;
	int go[2], ready[2], status;

	make_tmpdir();
	meta_init(&m, "tailed", L, H);
	run_path(m.run, path, sizeof(path));
	pid_t w = fork();
	ck_assert_int_ge(w, 0);
	if (w == 0) {
		stepbuf_init(&b, L, H);
		if (sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) < 0)
			_exit(2);
		append_range(f, &b, 0, 10);
		sw_runfile_flush(f, err, sizeof(err));
		append_range(f, &b, 10, 12);
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	ck_assert_int_eq(waitpid(w, &status, 0), w);
	ck_assert(WIFSIGNALED(status));
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(go[1]);
		close(ready[0]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		tail_child(path, L, H, 40, ready[1]);
	}
	close(go[0]);
	close(ready[1]);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	stepbuf_init(&b, L, H);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	int64_t T = sw_runfile_steps(f);
	ck_assert(T >= 10 && T <= 12);
	for (int64_t t = T; t < 40; t++) {
		ck_assert_int_eq(sw_runfile_append(f, stepbuf_fill(&b, t), err, sizeof(err)), 0);
		ck_assert_int_eq(sw_runfile_flush(f, err, sizeof(err)), 0);
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
	ck_assert_int_eq(sw_runfile_mark_ended(f, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_runfile_flush(f, err, sizeof(err)), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "tail child failed (status %d)", status);
	close(go[1]);
	close(ready[0]);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/* ---- h5py, as a dashboard would (skipped without it) --------------------- */

/* sw_reader_row_stats_range over the golden run (row statistics, 11
 * rows): every block of rows equals the stored datasets read by name,
 * field by field, at the right offsets; refusals named. */
START_TEST(test_row_stats_range)
{
	const char *src = getenv("SW_SRCDIR");
	char path[1024], err[512];
	sw_reader *r = NULL;
	sw_runmeta m;

	snprintf(path, sizeof(path), "%s/tests/data/golden_run/golden.h5", src ? src : ".");
	ck_assert_msg(sw_reader_open(path, &r, &m, err, sizeof(err)) == 0, "%s", err);
	int64_t T = sw_reader_refresh(r, err, sizeof(err));
	ck_assert_int_eq(T, 11);
	ck_assert(m.row_stats);
	size_t per = (size_t)m.layers * m.heads * m.rows, all = (size_t)T * per;
	double *f[SW_ROWSTAT_FIELDS];
	for (int k = 0; k < SW_ROWSTAT_FIELDS; k++) {
		f[k] = malloc(all * sizeof(double));
		ck_assert_msg(sw_reader_read(r, sw_rowstat_field_names[k], 0, T, f[k], all, err,
		    sizeof(err)) == (int64_t)all, "%s", err);
	}
	double *st = malloc(all * sizeof(double));
	ck_assert_msg(sw_reader_read(r, "row_status", 0, T, st, all, err, sizeof(err)) ==
	    (int64_t)all, "%s", err);
	swm_row *out = malloc(all * sizeof(swm_row));
	/* blocks of 1, 3 and all rows, from several starts */
	const int64_t spans[][2] = { { 0, 1 }, { 4, 7 }, { 10, 11 }, { 0, 11 }, { 2, 11 } };
	for (size_t b = 0; b < sizeof(spans) / sizeof(spans[0]); b++) {
		int64_t t0 = spans[b][0], t1 = spans[b][1];
		ck_assert_msg(sw_reader_row_stats_range(r, t0, t1, out, all, err, sizeof(err)) == 0,
		    "%s", err);
		for (size_t i = 0; i < (size_t)(t1 - t0) * per; i++) {
			size_t g = (size_t)t0 * per + i;
			const double got[SW_ROWSTAT_FIELDS] = { out[i].s, out[i].w, out[i].H, out[i].hb,
				out[i].Hc };
			for (int k = 0; k < SW_ROWSTAT_FIELDS; k++)
				ck_assert_msg((isnan(got[k]) && isnan(f[k][g])) || got[k] == f[k][g],
				    "[%lld, %lld) slot %zu field %d: %g vs %g", (long long)t0,
				    (long long)t1, i, k, got[k], f[k][g]);
			ck_assert_int_eq((int)out[i].status, (int)st[g]);
		}
	}
	/* the one-row call is the same as a block of one */
	swm_row one[200];
	ck_assert(per <= 200);
	ck_assert_int_eq(sw_reader_row_stats(r, 9, one, per, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_row_stats_range(r, 9, 10, out, all, err, sizeof(err)), 0);
	for (size_t i = 0; i < per; i++)
		ck_assert(memcmp(&one[i].s, &out[i].s, sizeof(double)) == 0);
	/* refusals: an empty block, a buffer too small, rows not committed */
	ck_assert_int_eq(sw_reader_row_stats_range(r, 3, 3, out, all, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_reader_row_stats_range(r, 0, 2, out, 2 * per - 1, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "row slots"), "%s", err);
	ck_assert_int_eq(sw_reader_row_stats_range(r, 5, 12, out, 20 * per, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "committed"), "%s", err);
	for (int k = 0; k < SW_ROWSTAT_FIELDS; k++)
		free(f[k]);
	free(st);
	free(out);
	sw_reader_close(&r);
}
END_TEST

START_TEST(test_h5py)
{
	const char *py = getenv("PYTHON");
	char cmd[2048], err[512], path[512], script[600];
	sw_runmeta m;
	sw_runfile *f;
	struct stepbuf b;

	if (!py || !py[0])
		py = "/usr/bin/python3";
	snprintf(cmd, sizeof(cmd), "'%s' -c 'import h5py, numpy' >/dev/null 2>&1", py);
	if (system(cmd) != 0) {
		fprintf(stderr, "test_h5py: no h5py for %s, skipped\n", py);
		return;
	}
	make_tmpdir();
	meta_init(&m, "py/run", 2, 3);
	stepbuf_init(&b, 2, 3);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	append_range(f, &b, 0, 6);
	ck_assert_int_eq(sw_runfile_flush(f, err, sizeof(err)), 0);
	run_path(m.run, path, sizeof(path));
	snprintf(script, sizeof(script), "%s/check.py", tmpdir);
	FILE *fp = fopen(script, "w");
	ck_assert_ptr_nonnull(fp);
	/* while the writer still holds the file open in SWMR mode */
	fprintf(fp,
	    "import sys, h5py, numpy as np\n"
	    "f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)\n"
	    "s = f['step']; s.refresh(); n = s.shape[0]\n"
	    "assert n == 6, n\n"
	    "assert list(s[:n]) == [100 + 10 * t for t in range(n)], s[:n]\n"
	    "e = f['entropy']; e.refresh()\n"
	    "assert e.shape[1:] == (2, 3) and e.attrs['dims'] == 'step,layer,head'\n"
	    "assert abs(e[5, 1, 2] - 3.0505) < 1e-12, e[5, 1, 2]\n"
	    "r = f['rejected']; r.refresh(); assert r[1, 0, 0, 0] == 1001, r[1, 0, 0]\n"
	    "c = f['cosine_keep']; c.refresh(); assert np.isnan(c[2]).all()\n"
	    "assert f.attrs['run'] == 'py/run' and f.attrs['layers'] == 2\n"
	    "assert f.attrs['split_form'] == 'paired' and f['ended'].shape == (0,)\n"
	    "print('h5py ok')\n");
	fclose(fp);
	snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s'", py, script, path);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	stepbuf_free(&b);
	remove_tmpdir();
}
END_TEST

/*
 * A process of its own that takes and releases the run lock on command
 * ('t', 'r', 'q' on *cmd), answering each with the result as one byte
 * (0 taken/released, 1 locked, 2 error). Forked while this process holds
 * no lock: a fork shares open file descriptions, and with them the locks.
 */
static pid_t
lock_child(const char *run, int *cmd, int *res)
{
	int c[2], r[2];
	ck_assert_int_eq(pipe(c), 0);
	ck_assert_int_eq(pipe(r), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		sw_runlock *l = NULL;
		char op, err[512];
		close(c[1]);
		close(r[0]);
		while (read(c[0], &op, 1) == 1 && op != 'q') {
			char out = 0;
			if (op == 't') {
				int rc = sw_runlock_take(tmpdir, run, &l, err, sizeof(err));
				out = rc == 0 ? 0 : rc == SW_RUNFILE_LOCKED ? 1 : 2;
			} else
				sw_runlock_release(&l);
			if (write(r[1], &out, 1) != 1)
				_exit(3);
		}
		_exit(0);
	}
	close(c[0]);
	close(r[1]);
	*cmd = c[1];
	*res = r[0];
	return pid;
}

static int
lock_ask(int cmd, int res, char op)
{
	char out = 9;
	ck_assert_int_eq(write(cmd, &op, 1), 1);
	ck_assert_int_eq(read(res, &out, 1), 1);
	return out;
}

/* The run lock: one process writes a run; the same process may take it again. */
START_TEST(test_runlock)
{
	sw_runmeta m, o;
	sw_runfile *f, *g;
	sw_runlock *l;
	char err[512];
	int cmd, res, st;

	make_tmpdir();
	meta_init(&m, "lock/run", 2, 3);
	meta_init(&o, "lock/other", 2, 3);
	pid_t pid = lock_child(m.run, &cmd, &res);

	/* another process holds it: refused, by name, and no file is made */
	ck_assert_int_eq(lock_ask(cmd, res, 't'), 0);
	l = (sw_runlock *)1;
	ck_assert_int_eq(sw_runlock_take(tmpdir, m.run, &l, err, sizeof(err)), SW_RUNFILE_LOCKED);
	ck_assert_ptr_null(l);
	ck_assert_msg(strstr(err, "another process writes it") && strstr(err, SW_RUNLOCK_FILE),
	    "%s", err);
	f = (sw_runfile *)1;
	ck_assert_int_eq(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)),
	    SW_RUNFILE_LOCKED);
	ck_assert_ptr_null(f);
	ck_assert_int_eq(count_entries(tmpdir), 0);
	/* another run is free meanwhile */
	ck_assert_msg(sw_runfile_open(tmpdir, &o, NULL, &g, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_close(&g), 0);

	/* released there: ours; taken twice here (a count), held till the last */
	ck_assert_int_eq(lock_ask(cmd, res, 'r'), 0);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runlock_take(tmpdir, m.run, &l, err, sizeof(err)), 0);
	ck_assert_int_eq(lock_ask(cmd, res, 't'), 1);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	ck_assert_int_eq(lock_ask(cmd, res, 't'), 1);	/* l still holds it */
	sw_runlock_release(&l);
	ck_assert_ptr_null(l);
	ck_assert_int_eq(lock_ask(cmd, res, 't'), 0);
	ck_assert_int_eq(lock_ask(cmd, res, 'r'), 0);

	/* the holder's death frees it */
	ck_assert_int_eq(lock_ask(cmd, res, 't'), 0);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	close(cmd);
	close(res);
	ck_assert_msg(sw_runfile_open(tmpdir, &m, NULL, &f, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(sw_runfile_close(&f), 0);
	/* runs hash to bytes below 2^62: a byte and the one after fit an off_t */
	ck_assert(sw_runlock_offset(m.run) < (UINT64_C(1) << 62));
	ck_assert(sw_runlock_offset(m.run) != sw_runlock_offset(o.run));
	/* a directory where the lock file cannot be made: an error, not "locked" */
	ck_assert_int_eq(sw_runlock_take("/nonexistent-dir", m.run, &l, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "/nonexistent-dir/" SW_RUNLOCK_FILE), "%s", err);
	remove_tmpdir();
}
END_TEST

static Suite *
runfile_suite(void)
{
	Suite *s = suite_create("runfile");
	TCase *tc = tcase_create("storage");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_create_read);
	tcase_add_test(tc, test_chunking);
	tcase_add_test(tc, test_resume);
	tcase_add_test(tc, test_resume_torn);
	tcase_add_test(tc, test_meta_mismatch);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_mark_ended);
	tcase_add_test(tc, test_swmr_tail);
	tcase_add_test(tc, test_sigkill);
	tcase_add_test(tc, test_resume_while_tailed);
	tcase_add_test(tc, test_h5py);
	tcase_add_test(tc, test_runlock);
	tcase_add_test(tc, test_row_stats_range);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(runfile_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
