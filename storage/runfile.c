/*
 * runfile.c: the run-file writer (runfile.h), one HDF5 file per run that
 * SWMR readers tail while it grows. storage/LAYOUT.md is the layout and the
 * commit protocol; this file is the one implementation of both.
 *
 * The HDF5 1.10.8 behaviour this code is shaped by (each checked on Debian
 * 12's libhdf5 1.10.8, see LAYOUT.md "SWMR notes"):
 *  - SWMR needs the latest file format, and a reader only ever sees the
 *    objects that existed when SWMR writing started: every dataset and
 *    every attribute is made first, then H5Fstart_swmr_write.
 *  - H5Fstart_swmr_write resets the chunk cache of open datasets to the
 *    library default, so the datasets are closed before it and opened again
 *    after it with our own dataset-access list.
 *  - One H5Fflush per round; H5Dflush per dataset is quadratic.
 *  - A writer killed while in SWMR mode leaves the writer flags in the
 *    superblock; the fapl property "clear_status_flags" (what h5clear -s
 *    sets) lets us open such a file.
 *  - A SWMR reader keeps a shared flock on the file, so a writer that
 *    resumes while a dashboard tails the file must not ask for the
 *    exclusive lock (H5Pset_file_locking off).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "storage/h5util.h"
#include "storage/runfile.h"

_Static_assert(SWM_STATUS__N == 6, "rejected stores statuses 1..5");

#define CHUNK_CAP (1u << 20)	/* bytes: a chunk stays near 1 MiB */
#define CHUNK_STEPS_DEFAULT 64
#define NREASONS (SWM_STATUS__N - 1)	/* rejected reasons: status 1..5 */
#define SW_MODEL_ATTR_MAX 300	/* a model name attribute and its NUL */

const char *const sw_head_field_names[SW_HEAD_FIELDS] = {
	"sink_mass", "content_mass", "entropy", "sink_entropy",
	"content_entropy", "content_term", "content_entropy_mw",
	"sink_balance", "dH", "dH_sink", "dH_content",
	"drift_sink", "drift_content"
};

const char *const sw_pair_field_names[SW_PAIR_FIELDS] = {
	"cosine_keep", "cosine_drop", "js_keep", "js_drop",
	"pair_sink", "pair_content"
};

/*
 * The datasets, in the order an append writes them: /step comes last, it
 * is the commit marker. /ended is not indexed by step.
 */
enum {
	D_TIME,
	D_HEAD,				/* SW_HEAD_FIELDS of them */
	D_ROWS = D_HEAD + SW_HEAD_FIELDS,
	D_REJECTED,
	D_PAIR,				/* SW_PAIR_FIELDS of them */
	D_FLIP = D_PAIR + SW_PAIR_FIELDS,
	D_MISSING,
	D_LOST,
	D_INCOMPLETE,
	D_INC,
	D_INC_LOST,
	D_SEQ_NEXT,
	D_PREV_ROW,
	D_MISSING_RANK,			/* layout 3 */
	D_ROWSTAT,			/* SW_ROWSTAT_FIELDS of them, row_stats files only */
	D_ROW_STATUS = D_ROWSTAT + SW_ROWSTAT_FIELDS,
	D_ROW_USE,
	D_XPAIR,			/* SW_XPAIR_FIELDS of them, cross_layer_pairs files only */
	D_STEP = D_XPAIR + SW_XPAIR_FIELDS,				/* the commit marker, written last */
	D_ENDED,
	D_RES_INC,
	D_RES_STEP,			/* the resume records' commit marker */
	D_SENDERS,			/* layout 3: the sender table, not indexed by step */
	D__N
};

/* Datasets that layout 3 added, and those layout 1 does not have. */
#define D_V3(d) ((d) == D_MISSING_RANK || (d) == D_SENDERS || D_CROSS(d))
#define D_V2(d) (((d) >= D_INC && (d) < D_STEP && !D_CROSS(d)) || (d) >= D_RES_INC)
/* Datasets only in files with cross-layer pair distances. */
#define D_CROSS(d) ((d) >= D_XPAIR && (d) < D_XPAIR + SW_XPAIR_FIELDS)
/* Whether a file with these settings has dataset d. */
#define D_HAS(d, rowstats, cross) ((!D_ROWWISE(d) || (rowstats)) && (!D_CROSS(d) || (cross)))
/* Datasets only in files with per-row statistics. */
#define D_ROWWISE(d) ((d) >= D_ROWSTAT && (d) <= D_ROW_STATUS)

/* Shapes after the first axis (P: the probe's rows). */
enum shape { SH_T, SH_TL, SH_TLH, SH_TLHR, SH_TLHH, SH_TL3, SH_TLHP, SH_TP, SH_SF, SH_TNN };
enum etype { E_F64, E_I64, E_U8, E_I8, E_U64, E_I32 };

const char *const sw_sender_field_names[SW_SENDER_FIELDS] = {
	"inc", "rank", "senders", "messages", "lost", "duplicates", "overlaps",
	"mismatches", "disagree", "uncompared", "missing", "after_end", "seq_next",
	"ended", "stored", "budget", "late", "senders_mismatch", "nomem", "stopping",
	"open_steps", "write_error", "head_missing"
};

const char *const sw_xpair_field_names[SW_XPAIR_FIELDS] = {
	"xpair_js_keep", "xpair_js_drop"
};

const char *const sw_rowstat_field_names[SW_ROWSTAT_FIELDS] = {
	"row_sink_mass", "row_content_mass", "row_entropy", "row_sink_entropy",
	"row_content_entropy"
};

struct dspec {
	const char *name;
	enum etype type;
	enum shape shape;
};

struct sw_runfile {
	hid_t file;
	hid_t dset[D__N];	/* -1 for a dataset the file does not have */
	hsize_t ext[D__N];	/* extent along the first axis, as we set it */
	char *path;
	uint32_t layers, heads, rows;	/* rows: the probe's */
	int row_stats;		/* the per-row statistics datasets exist */
	int cross;		/* the cross-layer pair datasets exist */
	int64_t steps;		/* committed: the extent of /step */
	int ended;		/* the last /ended entry is 1 */
	int64_t *rej;		/* layers * heads * NREASONS, repacked rejected */
	double *rs;		/* layers * heads * rows, one row-stat field repacked */
	uint8_t *rst;		/* layers * heads * rows statuses */
	uint8_t *use;		/* rows zeros, for a step without row_use */
	int32_t *present;	/* layers * heads -1s, for a step without missing_rank */
	hsize_t sender_cols;	/* the sender table's fields in this file */
	sw_runlock *lock;	/* the run's, held while the file is open */
};

static void
quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void
spec(int d, struct dspec *s)
{
	static const struct dspec fixed[] = {
		[D_TIME] = { "time", E_F64, SH_T },
		[D_ROWS] = { "rows", E_I64, SH_TLH },
		[D_REJECTED] = { "rejected", E_I64, SH_TLHR },
		[D_FLIP] = { "flip_rate", E_F64, SH_TL3 },
		[D_MISSING] = { "missing", E_U8, SH_TL },
		[D_LOST] = { "lost", E_I64, SH_T },
		[D_INCOMPLETE] = { "incomplete", E_I64, SH_T },
		[D_INC] = { "inc", E_U64, SH_T },
		[D_INC_LOST] = { "inc_lost", E_I64, SH_T },
		[D_SEQ_NEXT] = { "seq_next", E_U64, SH_T },
		[D_PREV_ROW] = { "prev_row", E_I64, SH_T },
		[D_MISSING_RANK] = { "missing_rank", E_I32, SH_TLH },
		[D_SENDERS] = { "senders", E_U64, SH_SF },
		[D_ROW_STATUS] = { "row_status", E_U8, SH_TLHP },
		[D_ROW_USE] = { "row_use", E_U8, SH_TP },
		[D_STEP] = { "step", E_I64, SH_T },
		[D_ENDED] = { "ended", E_I8, SH_T },
		[D_RES_INC] = { "resume_inc", E_U64, SH_T },
		[D_RES_STEP] = { "resume_step", E_I64, SH_T },
	};

	if (d >= D_HEAD && d < D_HEAD + SW_HEAD_FIELDS) {
		s->name = sw_head_field_names[d - D_HEAD];
		s->type = E_F64;
		s->shape = SH_TLH;
	} else if (d >= D_PAIR && d < D_PAIR + SW_PAIR_FIELDS) {
		s->name = sw_pair_field_names[d - D_PAIR];
		s->type = E_F64;
		s->shape = SH_TLHH;
	} else if (D_CROSS(d)) {
		s->name = sw_xpair_field_names[d - D_XPAIR];
		s->type = E_F64;
		s->shape = SH_TNN;
	} else if (d >= D_ROWSTAT && d < D_ROWSTAT + SW_ROWSTAT_FIELDS) {
		s->name = sw_rowstat_field_names[d - D_ROWSTAT];
		s->type = E_F64;
		s->shape = SH_TLHP;
	} else
		*s = fixed[d];
}

/* Rank, and dims[1..] for a shape; dims[0] is left to the caller. */
static int
shape_dims(enum shape sh, uint32_t layers, uint32_t heads, uint32_t rows, hsize_t *dims)
{
	switch (sh) {
	case SH_T:
		return 1;
	case SH_TL:
		dims[1] = layers;
		return 2;
	case SH_TLH:
		dims[1] = layers;
		dims[2] = heads;
		return 3;
	case SH_TLHR:
		dims[1] = layers;
		dims[2] = heads;
		dims[3] = NREASONS;
		return 4;
	case SH_TLHH:
		dims[1] = layers;
		dims[2] = heads;
		dims[3] = heads;
		return 4;
	case SH_TL3:
		dims[1] = layers;
		dims[2] = SW_FLIP_FIELDS;
		return 3;
	case SH_TLHP:
		dims[1] = layers;
		dims[2] = heads;
		dims[3] = rows;
		return 4;
	case SH_TP:
		dims[1] = rows;
		return 2;
	case SH_SF:
		dims[1] = SW_SENDER_FIELDS;
		return 2;
	case SH_TNN:
		dims[1] = dims[2] = (hsize_t)layers * heads;
		return 3;
	}
	return 1;
}

static const char *
shape_axes(int d, enum shape sh)
{
	if (d == D_ENDED)
		return "mark";
	if (d == D_RES_INC || d == D_RES_STEP)
		return "resume";
	if (d == D_SENDERS)
		return "sender,field";
	switch (sh) {
	case SH_T: return "step";
	case SH_TL: return "step,layer";
	case SH_TLH: return "step,layer,head";
	case SH_TLHR: return "step,layer,head,reason";
	case SH_TLHH: return "step,layer,head,head";
	case SH_TL3: return "step,layer,metric";
	case SH_TLHP: return "step,layer,head,row";
	case SH_TP: return "step,row";
	case SH_SF: return "sender,field";
	case SH_TNN: return "step,lh,lh";
	}
	return "step";
}

static hid_t
file_type(enum etype t)
{
	switch (t) {
	case E_F64: return H5T_IEEE_F64LE;
	case E_I64: return H5T_STD_I64LE;
	case E_U8: return H5T_STD_U8LE;
	case E_I8: return H5T_STD_I8LE;
	case E_U64: return H5T_STD_U64LE;
	case E_I32: return H5T_STD_I32LE;
	}
	return H5T_IEEE_F64LE;
}

static hid_t
mem_type(enum etype t)
{
	switch (t) {
	case E_F64: return H5T_NATIVE_DOUBLE;
	case E_I64: return H5T_NATIVE_INT64;
	case E_U8: return H5T_NATIVE_UINT8;
	case E_I8: return H5T_NATIVE_INT8;
	case E_U64: return H5T_NATIVE_UINT64;
	case E_I32: return H5T_NATIVE_INT32;
	}
	return H5T_NATIVE_DOUBLE;
}

/* ---- the schema: what LAYOUT.md lists, for the readers and the tests ---- */

static const char *
type_name(enum etype t)
{
	switch (t) {
	case E_F64: return "float64";
	case E_I64: return "int64";
	case E_U8: return "uint8";
	case E_I8: return "int8";
	case E_U64: return "uint64";
	case E_I32: return "int32";
	}
	return "float64";
}

_Static_assert(D__N <= 64, "reader.c holds 64 dataset handles");

size_t
sw_schema_count(void)
{
	return D__N;
}

const sw_dataset_info *
sw_schema_at(size_t i)
{
	static sw_dataset_info tab[D__N];
	static int made;

	if (i >= D__N)
		return NULL;
	if (!made) {	/* a constant table: the same on every call, thread or not */
		for (int d = 0; d < D__N; d++) {
			struct dspec s;
			spec(d, &s);
			tab[d].name = s.name;
			tab[d].dims = shape_axes(d, s.shape);
			tab[d].type = type_name(s.type);
			tab[d].version = D_V3(d) ? 3 : D_V2(d) ? 2 : 1;
			tab[d].row_stats = D_ROWWISE(d);
			tab[d].cross = D_CROSS(d);
		}
		made = 1;
	}
	return &tab[i];
}

int
sw_schema_find(const char *name)
{
	for (size_t i = 0; i < D__N; i++)
		if (!strcmp(sw_schema_at(i)->name, name))
			return (int)i;
	return -1;
}

/* ---- errors ------------------------------------------------------------- */



/* ---- file names --------------------------------------------------------- */

static int
name_keep(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

/*
 * The escaped id gets at most BASE_MAX bytes, so that ".NAME@GGGGGGGGGG.h5.tmp",
 * the longest name a generation is built under, fits NAME_MAX.
 */
#define GEN_SUFFIX_MAX 11	/* "@" and up to 10 digits */
#define TMP_EXTRA 5		/* "." before, ".tmp" after */
#define BASE_MAX (SW_RUNFILE_NAME_MAX - 3 - GEN_SUFFIX_MAX - TMP_EXTRA)

int
sw_runfile_name_gen(const char *run, uint32_t g, char *buf, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	char tmp[SW_RUNFILE_NAME_MAX + 1];
	size_t n = 0, cut = 0;
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a */
	int toolong = 0;

	if (!run || !run[0] || !buf)
		return -1;
	for (const unsigned char *p = (const unsigned char *)run; *p; p++) {
		h = (h ^ *p) * 0x100000001b3ull;
		if (toolong)
			continue;
		/* a leading '.' would hide the file or make "." and ".." */
		int keep = name_keep(*p) && !(p == (const unsigned char *)run && *p == '.');
		size_t need = keep ? 1 : 3;
		if (n + need > BASE_MAX) {
			toolong = 1;
			continue;
		}
		if (keep)
			tmp[n++] = (char)*p;
		else {
			tmp[n++] = '%';
			tmp[n++] = hex[*p >> 4];
			tmp[n++] = hex[*p & 15];
		}
		/* cut points at escape boundaries, for the long form */
		if (n + 17 <= BASE_MAX)
			cut = n;
	}
	if (toolong) {
		/*
		 * Too long: a prefix and '~' + a hash of the whole id. The
		 * escaping never emits '~' (it becomes %7E), so a long name
		 * never equals a short one; two long ones collide only with
		 * the same prefix and the same 64-bit hash, and resuming
		 * checks the run attribute, so even that is refused, not mixed.
		 */
		n = cut;
		tmp[n++] = '~';
		for (int i = 15; i >= 0; i--)
			tmp[n++] = hex[(h >> (4 * i)) & 15];
	}
	if (g > 1)	/* '@' is escaped in the id part: no id's name has one */
		n += (size_t)snprintf(tmp + n, sizeof(tmp) - n, "@%u", g);
	memcpy(tmp + n, ".h5", 3);
	n += 3;
	if (n + 1 > len)
		return -1;
	memcpy(buf, tmp, n);
	buf[n] = '\0';
	return (int)n;
}

int
sw_runfile_name(const char *run, char *buf, size_t len)
{
	return sw_runfile_name_gen(run, 1, buf, len);
}

/* ---- attributes --------------------------------------------------------- */

static int
attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype,
    const void *val)
{
	hid_t sp = H5Screate(H5S_SCALAR), a = -1;
	int rc = -1;

	if (sp >= 0 && (a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT,
	    H5P_DEFAULT)) >= 0 && H5Awrite(a, mtype, val) >= 0)
		rc = 0;
	if (a >= 0)
		H5Aclose(a);
	if (sp >= 0)
		H5Sclose(sp);
	return rc;
}

/* Variable-length UTF-8: h5py reads it as str (bytes that are not UTF-8 as
 * surrogate escapes), fixed-length strings as bytes. */
static int
attr_str(hid_t loc, const char *name, const char *s)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	int rc = -1;

	if (t >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 &&
	    H5Tset_cset(t, H5T_CSET_UTF8) >= 0)
		rc = attr_write(loc, name, t, t, &s);
	if (t >= 0)
		H5Tclose(t);
	return rc;
}

static int
attr_u32(hid_t loc, const char *name, uint32_t v)
{
	return attr_write(loc, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}

static int
write_root_attrs(hid_t file, const sw_runmeta *m, char *err, size_t errlen)
{
	char created[32], reasons[64] = "";
	int32_t layout = SW_RUNFILE_VERSION, contract = SWM_CONTRACT_VERSION;
	uint8_t fixed = m->fixed_probe ? 1 : 0, rowstats = m->row_stats ? 1 : 0;
	uint8_t cross = m->cross_pairs ? 1 : 0;
	uint32_t gen = m->generation ? m->generation : 1;
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	for (int st = 1; st < SWM_STATUS__N; st++) {
		if (st > 1)
			strcat(reasons, ",");
		strcat(reasons, swm_status_name((swm_status)st));
	}
	if (attr_write(file, "layout_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &layout) < 0 ||
	    attr_write(file, "metrics_contract", H5T_STD_I32LE, H5T_NATIVE_INT32, &contract) < 0 ||
	    attr_str(file, "run", m->run) < 0 ||
	    attr_str(file, "model", m->model) < 0 ||
	    attr_write(file, "params", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->params) < 0 ||
	    attr_u32(file, "layers", m->layers) < 0 ||
	    attr_u32(file, "heads", m->heads) < 0 ||
	    attr_u32(file, "sink", m->sink) < 0 ||
	    attr_write(file, "fixed_probe", H5T_STD_U8LE, H5T_NATIVE_UINT8, &fixed) < 0 ||
	    attr_str(file, "split_form", m->split_form) < 0 ||
	    attr_str(file, "kind", m->kind) < 0 ||
	    attr_u32(file, "rows", m->rows) < 0 ||
	    attr_u32(file, "keys", m->keys) < 0 ||
	    attr_str(file, "created", created) < 0 ||
	    attr_str(file, "flip_fields", "cosine,js,entropy") < 0 ||
	    attr_str(file, "rejected_reasons", reasons) < 0 ||
	    attr_str(file, "dtype", m->dtype ? m->dtype : "") < 0 ||
	    attr_u32(file, "generation", gen) < 0 ||
	    attr_write(file, "row_stats", H5T_STD_U8LE, H5T_NATIVE_UINT8, &rowstats) < 0 ||
	    attr_write(file, "cross_layer_pairs", H5T_STD_U8LE, H5T_NATIVE_UINT8, &cross) < 0 ||
	    /* the logarithms' precision and the kernels that took them (METRICS.md §6) */
	    attr_str(file, "log_precision", swm_precision()) < 0 ||
	    attr_str(file, "kernel_isa", swm_isa()) < 0 ||
	    attr_str(file, "sender_fields", SW_SENDER_FIELD_LIST) < 0) {
		sw_h5_fail(err, errlen, "writing the file attributes failed");
		return -1;
	}
	return 0;
}

/* ---- datasets ----------------------------------------------------------- */

/*
 * Chunk dims for appending one step at a time: chunk_steps along T and the
 * whole trailing dims, with chunk_steps cut so that a chunk stays near
 * CHUNK_CAP; if one step alone is over it, the trailing axes are cut too
 * (outermost first). Returns the chunk's bytes.
 */
static size_t
chunk_dims(int rank, const hsize_t *dims, size_t esize, size_t chunk_steps,
    hsize_t *ch)
{
	uint64_t row = esize;

	for (int i = 1; i < rank; i++) {
		ch[i] = dims[i];
		row *= dims[i];
	}
	for (int i = 1; i < rank && row > CHUNK_CAP; i++) {
		uint64_t inner = row / ch[i];	/* bytes per index of axis i */
		uint64_t k = inner < CHUNK_CAP ? CHUNK_CAP / inner : 1;
		/* chunks of equal size: the last one not mostly empty (every
		 * chunk of a step is allocated whole) */
		uint64_t n = (dims[i] + k - 1) / k;
		k = (dims[i] + n - 1) / n;
		ch[i] = k;
		row = inner * k;
	}
	uint64_t steps = row < CHUNK_CAP ? CHUNK_CAP / row : 1;
	if (steps > chunk_steps)
		steps = chunk_steps;
	ch[0] = steps ? steps : 1;
	return (size_t)(row * ch[0]);
}

/* Dataset access list with a chunk cache that holds a whole step's chunks. */
static hid_t
make_dapl(hid_t dcpl_or_dset, int is_dset)
{
	hid_t dcpl = is_dset ? H5Dget_create_plist(dcpl_or_dset) : dcpl_or_dset;
	hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
	hsize_t ch[8];
	size_t esize = 8;
	int rank;

	if (dcpl < 0 || dapl < 0)
		goto fail;
	rank = H5Pget_chunk(dcpl, 8, ch);
	if (rank < 1)
		goto fail;
	size_t bytes = esize;
	for (int i = 0; i < rank; i++)
		bytes *= ch[i];
	/* room for two chunks per dataset, never under the 1 MiB default */
	size_t nbytes = 2 * bytes < CHUNK_CAP ? CHUNK_CAP : 2 * bytes;
	if (H5Pset_chunk_cache(dapl, 521, nbytes, 0.75) < 0)
		goto fail;
	if (is_dset)
		H5Pclose(dcpl);
	return dapl;
fail:
	if (is_dset && dcpl >= 0)
		H5Pclose(dcpl);
	if (dapl >= 0)
		H5Pclose(dapl);
	return -1;
}

static int
create_datasets(hid_t file, const sw_runmeta *m, size_t chunk_steps,
    char *err, size_t errlen)
{
	const double nan = NAN;

	for (int d = 0; d < D__N; d++) {
		struct dspec s;
		hsize_t dims[4] = { 0 }, maxd[4], ch[4];
		hid_t sp = -1, dcpl = -1, ds = -1;
		int rc = -1;

		if (!D_HAS(d, m->row_stats, m->cross_pairs))
			continue;
		spec(d, &s);
		int rank = shape_dims(s.shape, m->layers, m->heads, m->rows, dims);
		memcpy(maxd, dims, sizeof(dims));
		maxd[0] = H5S_UNLIMITED;
		chunk_dims(rank, dims, H5Tget_size(mem_type(s.type)), chunk_steps, ch);
		if ((sp = H5Screate_simple(rank, dims, maxd)) >= 0 &&
		    (dcpl = H5Pcreate(H5P_DATASET_CREATE)) >= 0 &&
		    H5Pset_chunk(dcpl, rank, ch) >= 0 &&
		    /* no modification times: one less header update per write */
		    H5Pset_obj_track_times(dcpl, 0) >= 0 &&
		    (s.type != E_F64 ||
		    H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan) >= 0) &&
		    (ds = H5Dcreate2(file, s.name, file_type(s.type), sp,
		    H5P_DEFAULT, dcpl, H5P_DEFAULT)) >= 0 &&
		    attr_str(ds, "dims", shape_axes(d, s.shape)) >= 0)
			rc = 0;
		else
			sw_h5_fail(err, errlen, "creating dataset /%s failed", s.name);
		if (ds >= 0)
			H5Dclose(ds);
		if (dcpl >= 0)
			H5Pclose(dcpl);
		if (sp >= 0)
			H5Sclose(sp);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* Opens every dataset with our chunk cache; reads their extents. */
static int
open_datasets(sw_runfile *f, char *err, size_t errlen)
{
	for (int d = 0; d < D__N; d++) {
		struct dspec s;
		hsize_t dims[4];

		if (!D_HAS(d, f->row_stats, f->cross))
			continue;
		spec(d, &s);
		hid_t ds = H5Dopen2(f->file, s.name, H5P_DEFAULT);
		if (ds < 0) {
			sw_h5_fail(err, errlen, "%s: no dataset /%s", f->path, s.name);
			return -1;
		}
		hid_t dapl = make_dapl(ds, 1);
		H5Dclose(ds);
		if (dapl < 0) {
			sw_h5_fail(err, errlen, "%s: reading the layout of /%s failed", f->path, s.name);
			return -1;
		}
		f->dset[d] = H5Dopen2(f->file, s.name, dapl);
		H5Pclose(dapl);
		if (f->dset[d] < 0) {
			sw_h5_fail(err, errlen, "%s: opening /%s failed", f->path, s.name);
			return -1;
		}
		hid_t sp = H5Dget_space(f->dset[d]);
		if (sp < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
			sw_h5_fail(err, errlen, "%s: reading the extent of /%s failed", f->path, s.name);
			if (sp >= 0)
				H5Sclose(sp);
			return -1;
		}
		H5Sclose(sp);
		f->ext[d] = dims[0];
		if (d == D_SENDERS)	/* an older file's table may be narrower */
			f->sender_cols = dims[1] < SW_SENDER_FIELDS ? dims[1] : SW_SENDER_FIELDS;
	}
	return 0;
}

/*
 * Writes row t of dataset d from buf (a whole row, C order), extending the
 * dataset first if it is shorter. After a resume a dataset may already be
 * longer than /step (a crash between its extension and /step's): its row t
 * is then simply overwritten.
 */
static int
write_row(sw_runfile *f, int d, hsize_t t, hid_t mtype, const void *buf,
    char *err, size_t errlen)
{
	struct dspec s;
	hsize_t dims[4], start[4] = { 0 }, count[4];
	hid_t fsp = -1, msp = -1;
	int rc = -1;

	spec(d, &s);
	int rank = shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
	if (d == D_SENDERS)	/* an older file's narrower table: its fields only */
		dims[1] = f->sender_cols;
	if (f->ext[d] < t + 1) {
		dims[0] = t + 1;
		if (H5Dset_extent(f->dset[d], dims) < 0) {
			sw_h5_fail(err, errlen, "%s: extending /%s to %llu steps failed",
			    f->path, s.name, (unsigned long long)(t + 1));
			return -1;
		}
		f->ext[d] = t + 1;
	}
	memcpy(count, dims, sizeof(dims));
	start[0] = t;
	count[0] = 1;
	hsize_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= count[i];
	if ((fsp = H5Dget_space(f->dset[d])) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    (msp = H5Screate_simple(1, &n, NULL)) >= 0 &&
	    H5Dwrite(f->dset[d], mtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = 0;
	else
		sw_h5_fail(err, errlen, "%s: writing step %llu of /%s failed", f->path,
		    (unsigned long long)t, s.name);
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

/*
 * Writes row t of dataset d, a dataset whose second axis is the layer, from
 * buf (the whole row's layout), but only the layers not missing: a missing
 * layer, and every layer when buf is NULL, stays the dataset's fill value
 * (NaN for the f64 datasets), so that a step's work follows what was sent,
 * not layers x heads x heads (storage/LAYOUT.md).
 */
static int
write_layers(sw_runfile *f, int d, hsize_t t, hid_t mtype, const void *buf,
    const uint8_t *missing, char *err, size_t errlen)
{
	uint32_t L = f->layers, present = 0;
	for (uint32_t l = 0; buf && l < L; l++)
		present += !missing || !missing[l];
	if (buf && present == L)
		return write_row(f, d, t, mtype, buf, err, errlen);

	struct dspec s;
	hsize_t dims[4], start[4] = { 0 }, count[4];
	hid_t fsp = -1, msp = -1;
	int rc = -1;

	spec(d, &s);
	int rank = shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
	if (f->ext[d] < t + 1) {
		dims[0] = t + 1;
		if (H5Dset_extent(f->dset[d], dims) < 0) {
			sw_h5_fail(err, errlen, "%s: extending /%s to %llu steps failed",
			    f->path, s.name, (unsigned long long)(t + 1));
			return -1;
		}
		f->ext[d] = t + 1;
	}
	if (present == 0)
		return 0;
	/* the runs of present layers, the same selection in memory and file */
	hsize_t mdims[4];
	memcpy(mdims, dims, sizeof(dims));
	mdims[0] = 1;
	memcpy(count, dims, sizeof(dims));
	count[0] = 1;
	if ((fsp = H5Dget_space(f->dset[d])) < 0 ||
	    (msp = H5Screate_simple(rank, mdims, NULL)) < 0)
		goto out;
	H5S_seloper_t op = H5S_SELECT_SET;
	for (uint32_t l = 0; l < L;) {
		if (missing[l]) {
			l++;
			continue;
		}
		uint32_t e = l;
		while (e < L && !missing[e])
			e++;
		start[1] = l;
		count[1] = e - l;
		start[0] = t;
		if (H5Sselect_hyperslab(fsp, op, start, NULL, count, NULL) < 0)
			goto out;
		start[0] = 0;
		if (H5Sselect_hyperslab(msp, op, start, NULL, count, NULL) < 0)
			goto out;
		op = H5S_SELECT_OR;
		l = e;
	}
	if (H5Dwrite(f->dset[d], mtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = 0;
out:
	if (rc < 0)
		sw_h5_fail(err, errlen, "%s: writing step %llu of /%s failed", f->path,
		    (unsigned long long)t, s.name);
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

/* Reads row t of dataset d into buf as mtype. */
static int
read_row(const sw_runfile *f, int d, hsize_t t, hid_t mtype, void *buf)
{
	struct dspec s;
	hsize_t dims[4], start[4] = { 0 }, count[4];
	hid_t fsp = -1, msp = -1;
	int rc = -1;

	spec(d, &s);
	int rank = shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
	memcpy(count, dims, sizeof(dims));
	start[0] = t;
	count[0] = 1;
	hsize_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= count[i];
	if ((fsp = H5Dget_space(f->dset[d])) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    (msp = H5Screate_simple(1, &n, NULL)) >= 0 &&
	    H5Dread(f->dset[d], mtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = 0;
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

/* ---- open: create or resume --------------------------------------------- */

static hid_t
make_fapl(int resume)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	hbool_t clear = 1;

	if (fapl < 0)
		return -1;
	if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0)
		goto fail;
	/*
	 * "clear_status_flags" is h5clear's private property, registered on
	 * the file-access class (H5Pfapl.c), so H5Pset reaches it; H5F_open
	 * zeroes the superblock's writer flags when it is set.
	 */
	if (resume && H5Pset(fapl, "clear_status_flags", &clear) < 0)
		goto fail;
	return fapl;
fail:
	H5Pclose(fapl);
	return -1;
}

/*
 * The access list of a writer that takes over a file a killed writer may
 * have left: writer flags cleared, and no HDF5 file lock (a dashboard's
 * SWMR reader holds a shared flock, which would refuse the exclusive one; a
 * SWMR writer drops it at once anyway). The run lock (runlock.c), taken
 * before, makes sure one process at most writes the file.
 */
static hid_t
takeover_fapl(void)
{
	hid_t fapl = make_fapl(1);

	if (fapl >= 0 && H5Pset_file_locking(fapl, 0, 1) < 0) {
		H5Pclose(fapl);
		return -1;
	}
	return fapl;
}

/*
 * A killed writer may have written past the end of allocation its last
 * flush recorded, and metadata it evicted since may point there: new
 * allocations must start past the end of the file, as h5clear --increment
 * does. file is open read-write.
 */
static int
fix_eoa(hid_t file, const char *path, char *err, size_t errlen)
{
	haddr_t eoa;
	struct stat sb;

	if (H5Fget_eoa(file, &eoa) < 0 || stat(path, &sb) != 0) {
		sw_h5_fail(err, errlen, "%s: reading the end of allocation failed", path);
		return -1;
	}
	if ((haddr_t)sb.st_size > eoa && H5Fincrement_filesize(file, 0) < 0) {
		sw_h5_fail(err, errlen, "%s: moving the end of allocation past the end of file failed",
		    path);
		return -1;
	}
	return 0;
}

static int
check_meta(const sw_runmeta *m, char *err, size_t errlen)
{
	static const char *const forms[] = { "paired", "aggregate" };
	static const char *const kinds[] = { "probs", "logits", "rowstats" };
	int ok_form = 0, ok_kind = 0;

	if (!m->run[0]) {
		snprintf(err, errlen, "empty run id");
		return -1;
	}
	if (m->layers < 1 || m->heads < 1) {
		snprintf(err, errlen, "run %s: %u layers and %u heads: both must be at least 1",
		    m->run, m->layers, m->heads);
		return -1;
	}
	/* the largest row, layers * heads * heads doubles, must be addressable */
	if ((uint64_t)m->layers * m->heads > (UINT64_C(1) << 32) ||
	    (uint64_t)m->layers * m->heads * m->heads > (UINT64_C(1) << 36)) {
		snprintf(err, errlen, "run %s: %u layers x %u heads is too large",
		    m->run, m->layers, m->heads);
		return -1;
	}
	for (size_t i = 0; i < 2; i++)
		ok_form |= m->split_form && !strcmp(m->split_form, forms[i]);
	for (size_t i = 0; i < 3; i++)
		ok_kind |= m->kind && !strcmp(m->kind, kinds[i]);
	if (!ok_form || !ok_kind) {
		snprintf(err, errlen, "run %s: split_form \"%s\" or kind \"%s\" is not one of "
		    "paired/aggregate, probs/logits/rowstats", m->run,
		    m->split_form ? m->split_form : "(null)", m->kind ? m->kind : "(null)");
		return -1;
	}
	return 0;
}

/*
 * Builds the file under a temporary name beside the final one (".NAME.tmp":
 * hidden, and no run's file name starts with '.'), so that a crash while
 * creating never leaves a half-made run file; a crash leaves at most the
 * temporary file, which the next creation truncates.
 */
static int
create_file(sw_runfile *f, const sw_runmeta *m, size_t chunk_steps, char *err,
    size_t errlen)
{
	char *tmp = NULL, *tdir = NULL, *slash;
	hid_t fapl = -1;
	int rc = -1;

	/*
	 * HDF5 opens by name and follows links. The file is built in a
	 * directory of its own, made here with mkdtemp (mode 0700): nothing
	 * planted in the data directory is ever opened, followed or removed;
	 * link() then gives the file its name, never replacing anything.
	 */
	slash = strrchr(f->path, '/');
	size_t dlen = (size_t)(slash - f->path);
	size_t len = dlen + sizeof("/" SW_TMPDIR_PREFIX "XXXXXX/new.h5");
	if (!(tmp = malloc(len)) || !(tdir = malloc(len))) {
		snprintf(err, errlen, "out of memory");
		goto done;
	}
	snprintf(tdir, len, "%.*s/" SW_TMPDIR_PREFIX "XXXXXX", (int)dlen, f->path);
	if (!mkdtemp(tdir)) {
		snprintf(err, errlen, "%s: %s", tdir, strerror(errno));
		free(tdir);
		tdir = NULL;
		goto done;
	}
	snprintf(tmp, len, "%s/new.h5", tdir);
	if ((fapl = make_fapl(0)) < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", f->path);
		goto done;
	}
	f->file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	if (f->file < 0) {
		sw_h5_fail(err, errlen, "%s: cannot create the HDF5 file", tmp);
		goto done;
	}
	if (write_root_attrs(f->file, m, err, errlen) < 0 ||
	    create_datasets(f->file, m, chunk_steps, err, errlen) < 0)
		goto done;
	if (H5Fflush(f->file, H5F_SCOPE_LOCAL) < 0) {
		sw_h5_fail(err, errlen, "%s: flushing the new file failed", tmp);
		goto done;
	}
	/*
	 * Every dataset is closed here, so nothing keeps the cache it resets.
	 * SWMR writing starts before the file has its name: a reader that
	 * finds the name finds a file it can SWMR-read (before, the writer
	 * holds an exclusive lock and the superblock says "not SWMR").
	 */
	if (H5Fstart_swmr_write(f->file) < 0) {
		sw_h5_fail(err, errlen, "%s: starting SWMR writing failed", tmp);
		goto done;
	}
	/* link() does not replace a file that appeared meanwhile; rename()
	 * where the filesystem has no hard links */
	if (link(tmp, f->path) == 0)
		;
	else if (errno == EEXIST) {
		snprintf(err, errlen, "%s: appeared while it was being created", f->path);
		goto done;
	} else if (rename(tmp, f->path) != 0) {
		snprintf(err, errlen, "%s: %s", f->path, strerror(errno));
		goto done;
	}
	rc = open_datasets(f, err, errlen);
done:
	if (rc < 0 && f->file >= 0) {
		H5Fclose(f->file);
		f->file = -1;
	}
	if (tdir) {	/* the name in it goes; an open file lives on under its own */
		unlink(tmp);
		rmdir(tdir);
	}
	if (fapl >= 0)
		H5Pclose(fapl);
	free(tmp);
	free(tdir);
	return rc;
}

int
sw_runfile_clean_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		struct stat sb;
		char p[4096];
		if (strncmp(e->d_name, SW_TMPDIR_PREFIX, strlen(SW_TMPDIR_PREFIX)) ||
		    (size_t)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= sizeof(p) ||
		    lstat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
			continue;
		/* what a crash left: regular files and links are removed, not followed */
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *sub = fd >= 0 ? fdopendir(fd) : NULL;
		struct dirent *se;
		while (sub && (se = readdir(sub)))
			if (strcmp(se->d_name, ".") && strcmp(se->d_name, ".."))
				unlinkat(fd, se->d_name, 0);
		if (sub)
			closedir(sub);
		else if (fd >= 0)
			close(fd);
		n += rmdir(p) == 0;
	}
	closedir(d);
	return n;
}

/* The string attribute name equals want (a NULL want is not checked). */
static int
attr_is(hid_t file, const char *name, const char *want)
{
	char v[SW_MODEL_ATTR_MAX];

	if (!want)
		return 1;
	if (sw_h5_attr_str(file, name, v, sizeof(v)) < 0) {
		H5Eclear2(H5E_DEFAULT);
		return 0;
	}
	return strcmp(v, want) == 0;
}

/*
 * Checks an existing file against the run before anything writes to it:
 * opened read-only (the writer flags cleared in memory only), so a refused
 * file is left byte for byte as it was. SW_RUNFILE_OTHER when the file
 * holds something else (another run, shape, kind, dtype, probe, model, or
 * an older layout): the caller goes on to the next generation's name.
 */
static int
check_existing(const char *path, const sw_runmeta *m, int *cross_out, char *err,
    size_t errlen)
{
	/* no HDF5 lock: a reader's shared lock must not look like another run */
	hid_t fapl = takeover_fapl(), file = -1;
	uint32_t layers, heads, sink, version, rows = 0, keys = 0;
	uint8_t fixed = 0, rowstats = 0, cross = 0;
	uint64_t params = 0;
	char run[sizeof(m->run)];
	int rc = SW_RUNFILE_OTHER;

	if (fapl < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", path);
		return -1;
	}
	/*
	 * Only a file that holds something else is another generation's
	 * business; one that cannot be read now (permissions, descriptors,
	 * I/O) is an error, not a reason to split the run over two files.
	 */
	htri_t is = H5Fis_hdf5(path);
	if (is <= 0) {
		H5Eclear2(H5E_DEFAULT);
		if (is < 0) {
			snprintf(err, errlen, "%s: cannot read the existing run file", path);
			rc = -1;
		} else
			snprintf(err, errlen, "%s: exists and is not an HDF5 file", path);
		goto done;
	}
	file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
	if (file < 0) {
		sw_h5_fail(err, errlen, "%s: cannot open the existing run file", path);
		rc = -1;
		goto done;
	}
	if (sw_h5_attr_num(file, "layout_version", H5T_NATIVE_UINT32, &version) < 0 ||
	    sw_h5_attr_num(file, "layers", H5T_NATIVE_UINT32, &layers) < 0 ||
	    sw_h5_attr_num(file, "heads", H5T_NATIVE_UINT32, &heads) < 0 ||
	    sw_h5_attr_num(file, "sink", H5T_NATIVE_UINT32, &sink) < 0 ||
	    sw_h5_attr_str(file, "run", run, sizeof(run)) < 0) {
		sw_h5_fail(err, errlen, "%s: not a sinkwatch run file (attributes missing)", path);
		goto done;
	}
	if (version != SW_RUNFILE_VERSION) {
		snprintf(err, errlen, "%s: layout version %u, this build writes %d", path,
		    version, SW_RUNFILE_VERSION);
		goto done;
	}
	if (strcmp(run, m->run) != 0) {
		snprintf(err, errlen, "%s: holds run \"%s\", not \"%s\"", path, run, m->run);
		goto done;
	}
	if (sw_h5_attr_num(file, "rows", H5T_NATIVE_UINT32, &rows) < 0 ||
	    sw_h5_attr_num(file, "keys", H5T_NATIVE_UINT32, &keys) < 0 ||
	    sw_h5_attr_num(file, "fixed_probe", H5T_NATIVE_UINT8, &fixed) < 0 ||
	    sw_h5_attr_num(file, "row_stats", H5T_NATIVE_UINT8, &rowstats) < 0 ||
	    sw_h5_attr_num(file, "params", H5T_NATIVE_UINT64, &params) < 0)
		H5Eclear2(H5E_DEFAULT);
	/*
	 * Cross-layer pairs are the file's setting, not the run's identity:
	 * a daemon with the other setting goes on in the same file (storing
	 * NaN, or not computing them). Files made before the option lack it.
	 */
	if (H5Aexists(file, "cross_layer_pairs") > 0 &&
	    sw_h5_attr_num(file, "cross_layer_pairs", H5T_NATIVE_UINT8, &cross) < 0)
		H5Eclear2(H5E_DEFAULT);
	H5Eclear2(H5E_DEFAULT);
	const char *what = layers != m->layers ? "layers" : heads != m->heads ? "heads" :
	    sink != m->sink ? "sink" : rows != m->rows ? "probe rows" :
	    keys != m->keys ? "keys" : fixed != (m->fixed_probe != 0) ? "fixed_probe" :
	    rowstats != (m->row_stats != 0) ? "row_stats" : params != m->params ? "params" :
	    !attr_is(file, "kind", m->kind) ? "kind" : !attr_is(file, "dtype", m->dtype) ?
	    "dtype" : !attr_is(file, "model", m->model) ? "model" : NULL;
	if (what) {
		snprintf(err, errlen, "%s: holds the run with another %s (the file: %u layers x "
		    "%u heads, sink %u, probe [%u, %u] %s, params %llu; the run now: %u x %u, "
		    "sink %u, probe [%u, %u] %s, params %llu, kind %s, dtype %s)", path, what,
		    layers, heads, sink, rows, keys, fixed ? "fixed" : "varying",
		    (unsigned long long)params, m->layers, m->heads, m->sink, m->rows, m->keys,
		    m->fixed_probe ? "fixed" : "varying", (unsigned long long)m->params,
		    m->kind ? m->kind : "-", m->dtype ? m->dtype : "-");
		goto done;
	}
	/* every dataset, with the shape this run needs */
	for (int d = 0; d < D__N; d++) {
		struct dspec s;
		hsize_t want[4], have[4];

		if (!D_HAS(d, m->row_stats, cross))
			continue;
		spec(d, &s);
		int rank = shape_dims(s.shape, layers, heads, rows, want);
		hid_t ds = H5Dopen2(file, s.name, H5P_DEFAULT);
		hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
		int ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == rank &&
		    H5Sget_simple_extent_dims(sp, have, NULL) == rank;
		for (int i = 1; ok && i < rank; i++)	/* an older sender table is narrower */
			ok = have[i] == want[i] || (d == D_SENDERS && i == 1 &&
			    have[i] >= SW_SENDER_FIELDS_OLD && have[i] < want[i]);
		if (sp >= 0)
			H5Sclose(sp);
		if (ds >= 0)
			H5Dclose(ds);
		if (!ok) {
			H5Eclear2(H5E_DEFAULT);
			snprintf(err, errlen, "%s: dataset /%s missing or of the wrong shape",
			    path, s.name);
			goto done;
		}
	}
	if (cross_out)
		*cross_out = cross;
	rc = 0;
done:
	if (file >= 0)
		H5Fclose(file);
	H5Pclose(fapl);
	return rc;
}

static int
resume_file(sw_runfile *f, const sw_runmeta *m, char *err, size_t errlen)
{
	hid_t fapl = -1;
	int rc = -1;

	int e = check_existing(f->path, m, &f->cross, err, errlen);
	if (e < 0)
		return e;
	if ((fapl = takeover_fapl()) < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", f->path);
		goto done;
	}
	f->file = H5Fopen(f->path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
	if (f->file < 0) {
		sw_h5_fail(err, errlen, "%s: cannot open the run file for SWMR writing", f->path);
		goto done;
	}
	if (fix_eoa(f->file, f->path, err, errlen) < 0)
		goto done;
	if (open_datasets(f, err, errlen) < 0)
		goto done;
	if (f->ext[D_ENDED] > 0) {
		int8_t last = 0;
		if (read_row(f, D_ENDED, f->ext[D_ENDED] - 1, H5T_NATIVE_INT8, &last) < 0) {
			sw_h5_fail(err, errlen, "%s: reading /ended failed", f->path);
			goto done;
		}
		f->ended = last == 1;
	}
	rc = 0;
done:
	if (fapl >= 0)
		H5Pclose(fapl);
	return rc;
}

int
sw_runfile_clear(const char *path, char *err, size_t errlen)
{
	hid_t fapl, file;
	int rc = -1;

	quiet();
	if (H5Fis_hdf5(path) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		snprintf(err, errlen, "%s: not an HDF5 file", path);
		return -1;
	}
	if ((fapl = takeover_fapl()) < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", path);
		return -1;
	}
	/*
	 * A plain read-write open, as h5clear's: the flags are zeroed when it
	 * opens, set to "open for write" (not SWMR) while it is open, and
	 * zeroed on disk again by the close.
	 */
	file = H5Fopen(path, H5F_ACC_RDWR, fapl);
	H5Pclose(fapl);
	if (file < 0) {
		sw_h5_fail(err, errlen, "%s: cannot open the file read-write", path);
		return -1;
	}
	rc = fix_eoa(file, path, err, errlen);
	if (H5Fclose(file) < 0 && rc == 0) {
		sw_h5_fail(err, errlen, "%s: closing the file failed", path);
		rc = -1;
	}
	return rc;
}

/* Superblock signature, and where the file consistency flags of a version
 * 2 or 3 superblock are: after signature, version and the two size bytes. */
static const unsigned char h5sig[8] = { 0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n' };
#define SB_FLAGS_OFF 11
#define SB_WRITE_ACCESS 0x01	/* H5F_SUPER_WRITE_ACCESS */
#define SB_SWMR_WRITE_ACCESS 0x04	/* H5F_SUPER_SWMR_WRITE_ACCESS */

/*
 * HDF5 1.10 has no public call that returns the flags, and a plain open
 * that fails says little (a held file lock or damaged metadata fail it
 * too), so the superblock is read as the file format defines it: at offset
 * 0, or 512, 1024, 2048, ... after a user block.
 */
int
sw_runfile_writer_flags(const char *path, char *err, size_t errlen)
{
	unsigned char sb[SB_FLAGS_OFF + 1];
	struct stat st;
	int fd, rc = -1;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (off_t at = 0; at + (off_t)sizeof(sb) <= st.st_size; at = at ? 2 * at : 512) {
		if (pread(fd, sb, sizeof(sb), at) != (ssize_t)sizeof(sb))
			break;
		if (memcmp(sb, h5sig, sizeof(h5sig)) != 0)
			continue;
		/*
		 * Version 3 (the latest format, which SWMR needs) is the first
		 * whose writers set the flags; before it the library neither
		 * sets nor checks them.
		 */
		rc = sb[8] >= 3 &&
		    (sb[SB_FLAGS_OFF] & (SB_WRITE_ACCESS | SB_SWMR_WRITE_ACCESS)) != 0;
		break;
	}
	if (rc < 0)
		snprintf(err, errlen, "%s: not an HDF5 file (no superblock)", path);
	close(fd);
	return rc;
}

static void
runfile_free(sw_runfile *f)
{
	for (int d = 0; d < D__N; d++)
		if (f->dset[d] >= 0)
			H5Dclose(f->dset[d]);
	if (f->file >= 0)
		H5Fclose(f->file);
	free(f->rej);
	free(f->rs);
	free(f->rst);
	free(f->use);
	free(f->present);
	free(f->path);
	sw_runlock_release(&f->lock);
	free(f);
}

int
sw_runfile_open(const char *dir, const sw_runmeta *meta,
    const sw_runfile_opts *opts, sw_runfile **out, char *err, size_t errlen)
{
	char name[SW_RUNFILE_NAME_MAX + 1];
	struct stat sb;
	sw_runfile *f;
	size_t chunk_steps = opts && opts->chunk_steps ? opts->chunk_steps :
	    CHUNK_STEPS_DEFAULT;

	*out = NULL;
	quiet();
	if (check_meta(meta, err, errlen) < 0)
		return -1;
	if (meta->row_stats && meta->rows == 0) {
		snprintf(err, errlen, "run %s: row statistics need the probe's rows", meta->run);
		return -1;
	}
	if (sw_runfile_name_gen(meta->run, meta->generation ? meta->generation : 1, name,
	    sizeof(name)) < 0) {
		snprintf(err, errlen, "run %s: no file name for it", meta->run);
		return -1;
	}
	if (!(f = calloc(1, sizeof(*f)))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	f->file = -1;
	for (int d = 0; d < D__N; d++)
		f->dset[d] = -1;
	/* before the name is looked at: no two processes create or resume it */
	int lk = sw_runlock_take(dir, meta->run, &f->lock, err, errlen);
	if (lk != 0) {
		runfile_free(f);
		return lk;
	}
	f->layers = meta->layers;
	f->heads = meta->heads;
	f->rows = meta->rows;
	f->row_stats = meta->row_stats;
	/* what these buffers take is sw_runfile_state_bytes: keep the two together */
	size_t lh = (size_t)meta->layers * meta->heads;
	size_t plen = strlen(dir) + strlen(name) + 2;
	f->path = malloc(plen);
	f->rej = malloc(lh * NREASONS * sizeof(int64_t));
	if (f->row_stats) {
		f->rs = malloc(lh * f->rows * sizeof(double));
		f->rst = malloc(lh * f->rows);
	}
	f->use = calloc(f->rows + 1, 1);
	f->present = malloc(lh * sizeof(int32_t) + 1);
	for (size_t i = 0; f->present && i < lh; i++)
		f->present[i] = -1;
	if (!f->path || !f->rej || !f->use || !f->present ||
	    (f->row_stats && (!f->rs || !f->rst))) {
		snprintf(err, errlen, "run %s: out of memory", meta->run);
		goto fail;
	}
	snprintf(f->path, plen, "%s/%s", dir, name);

	int e;
	if (lstat(f->path, &sb) == 0) {
		if (!S_ISREG(sb.st_mode)) {
			snprintf(err, errlen, "%s: not a regular file (never followed)", f->path);
			runfile_free(f);
			return SW_RUNFILE_OTHER;
		}
		if ((e = resume_file(f, meta, err, errlen)) < 0) {
			runfile_free(f);
			return e;
		}
	} else if (errno == ENOENT) {
		f->cross = meta->cross_pairs != 0;
		if (create_file(f, meta, chunk_steps, err, errlen) < 0)
			goto fail;
	} else {
		snprintf(err, errlen, "%s: %s", f->path, strerror(errno));
		goto fail;
	}
	/* committed steps: the extent of /step, whatever the others say */
	f->steps = (int64_t)f->ext[D_STEP];
	*out = f;
	return 0;
fail:
	runfile_free(f);
	return -1;
}

int
sw_runfile_probe(const char *dir, const sw_runmeta *m, char *err, size_t errlen)
{
	char name[SW_RUNFILE_NAME_MAX + 1], path[4096];
	struct stat sb;

	quiet();
	if (sw_runfile_name_gen(m->run, m->generation ? m->generation : 1, name,
	    sizeof(name)) < 0) {
		snprintf(err, errlen, "run %s: no file name for it", m->run);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (lstat(path, &sb) != 0)
		return errno == ENOENT ? 1 : -1;
	if (!S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file (never followed)", path);
		return SW_RUNFILE_OTHER;
	}
	return check_existing(path, m, NULL, err, errlen);
}

int
sw_runfile_is_ended(const sw_runfile *f)
{
	return f->ended;
}

int
sw_runfile_cross_pairs(const sw_runfile *f)
{
	return f->cross;
}

int64_t
sw_runfile_steps(const sw_runfile *f)
{
	return f->steps;
}

const char *
sw_runfile_path(const sw_runfile *f)
{
	return f->path;
}

int
sw_runfile_last(const sw_runfile *f, double *head[SW_HEAD_FIELDS], int64_t *rows)
{
	size_t lh = (size_t)f->layers * f->heads;
	int rc = 0;

	quiet();
	if (f->steps > 0) {
		hsize_t t = (hsize_t)f->steps - 1;
		for (int i = 0; i < SW_HEAD_FIELDS && rc == 0; i++)
			if (head[i])
				rc = read_row(f, D_HEAD + i, t, H5T_NATIVE_DOUBLE, head[i]);
		if (rc == 0 && rows)
			rc = read_row(f, D_ROWS, t, H5T_NATIVE_INT64, rows);
		H5Eclear2(H5E_DEFAULT);
		if (rc == 0)
			return 0;
	}
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		for (size_t j = 0; head[i] && j < lh; j++)
			head[i][j] = NAN;
	for (size_t j = 0; rows && j < lh; j++)
		rows[j] = 0;
	return -1;
}

/* Appends one value to /ended. */
static int
append_ended(sw_runfile *f, int8_t v, char *err, size_t errlen)
{
	if (write_row(f, D_ENDED, f->ext[D_ENDED], H5T_NATIVE_INT8, &v, err, errlen) < 0)
		return -1;
	f->ended = v == 1;
	return 0;
}

/* One row-statistic field of swm_row (METRICS.md §1), by index. */
static double
rowstat_value(const swm_row *r, int field)
{
	switch (field) {
	case 0: return r->s;
	case 1: return r->w;
	case 2: return r->H;
	case 3: return r->hb;
	default: return r->Hc;
	}
}

/* The per-row statistics of every layer (NULL: missing, stored absent). */
static int
append_row_stats(sw_runfile *f, hsize_t t, const swm_row *const *rs, char *err,
    size_t errlen)
{
	size_t hr = (size_t)f->heads * f->rows;

	for (int k = 0; k <= SW_ROWSTAT_FIELDS; k++) {
		for (uint32_t l = 0; l < f->layers; l++) {
			const swm_row *src = rs ? rs[l] : NULL;
			for (size_t i = 0; i < hr; i++) {
				size_t o = (size_t)l * hr + i;
				if (k == SW_ROWSTAT_FIELDS)
					f->rst[o] = src ? (uint8_t)src[i].status : SW_ROW_ABSENT;
				else
					f->rs[o] = src ? rowstat_value(&src[i], k) : NAN;
			}
		}
		if (k == SW_ROWSTAT_FIELDS ?
		    write_row(f, D_ROW_STATUS, t, H5T_NATIVE_UINT8, f->rst, err, errlen) < 0 :
		    write_row(f, D_ROWSTAT + k, t, H5T_NATIVE_DOUBLE, f->rs, err, errlen) < 0)
			return -1;
	}
	return 0;
}

int
sw_runfile_add_resume(sw_runfile *f, uint64_t inc, int64_t from, char *err,
    size_t errlen)
{
	quiet();
	/* resume_step is the marker: a reader takes the shorter extent */
	hsize_t n = f->ext[D_RES_STEP];
	if (write_row(f, D_RES_INC, n, H5T_NATIVE_UINT64, &inc, err, errlen) < 0 ||
	    write_row(f, D_RES_STEP, n, H5T_NATIVE_INT64, &from, err, errlen) < 0)
		return -1;
	return 0;
}

/*
 * Reads rows [0, n) of dataset d as mtype into buf, whole rows: width is
 * the elements per row (1 for a one-axis dataset, layers for /missing).
 */
static int
read_col(const sw_runfile *f, int d, hsize_t n, hsize_t width, hid_t mtype, void *buf)
{
	if (n == 0)
		return 0;
	hsize_t start[2] = { 0, 0 }, count[2] = { n, width }, total = n * width;
	hid_t fsp = H5Dget_space(f->dset[d]), msp = H5Screate_simple(1, &total, NULL);
	int rc = fsp >= 0 && msp >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    H5Dread(f->dset[d], mtype, msp, fsp, H5P_DEFAULT, buf) >= 0 ? 0 : -1;
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

void
sw_rows_free(sw_rows *r)
{
	free(r->step);
	free(r->inc);
	free(r->inc_lost);
	free(r->stored);
	free(r->res_inc);
	free(r->res_step);
	memset(r, 0, sizeof(*r));
}

int
sw_runfile_rows(const sw_runfile *f, sw_rows *out, char *err, size_t errlen)
{
	hsize_t n = (hsize_t)f->steps;
	hsize_t nr = f->ext[D_RES_STEP] < f->ext[D_RES_INC] ? f->ext[D_RES_STEP] :
	    f->ext[D_RES_INC];

	quiet();
	memset(out, 0, sizeof(*out));
	out->n = (int64_t)n;
	out->nres = (int64_t)nr;
	out->step = malloc(n * sizeof(int64_t) + 1);
	out->inc = malloc(n * sizeof(uint64_t) + 1);
	out->inc_lost = malloc(n * sizeof(int64_t) + 1);
	out->stored = malloc(n * sizeof(int64_t) + 1);
	out->res_inc = malloc(nr * sizeof(uint64_t) + 1);
	out->res_step = malloc(nr * sizeof(int64_t) + 1);
	uint8_t *miss = malloc(n * f->layers + 1);
	if (!out->step || !out->inc || !out->inc_lost || !out->stored ||
	    !out->res_inc || !out->res_step || !miss) {
		free(miss);
		sw_rows_free(out);
		snprintf(err, errlen, "%s: out of memory", f->path);
		return -1;
	}
	if (read_col(f, D_STEP, n, 1, H5T_NATIVE_INT64, out->step) < 0 ||
	    read_col(f, D_INC, n, 1, H5T_NATIVE_UINT64, out->inc) < 0 ||
	    read_col(f, D_INC_LOST, n, 1, H5T_NATIVE_INT64, out->inc_lost) < 0 ||
	    read_col(f, D_MISSING, n, f->layers, H5T_NATIVE_UINT8, miss) < 0 ||
	    read_col(f, D_RES_INC, nr, 1, H5T_NATIVE_UINT64, out->res_inc) < 0 ||
	    read_col(f, D_RES_STEP, nr, 1, H5T_NATIVE_INT64, out->res_step) < 0 ||
	    (n > 0 && (read_row(f, D_LOST, n - 1, H5T_NATIVE_INT64, &out->lost) < 0 ||
	    read_row(f, D_INCOMPLETE, n - 1, H5T_NATIVE_INT64, &out->incomplete) < 0))) {
		sw_h5_fail(err, errlen, "%s: reading the stored rows failed", f->path);
		sw_rows_free(out);
		free(miss);
		return -1;
	}
	/* the messages (layers) each row holds */
	for (hsize_t t = 0; t < n; t++) {
		out->stored[t] = f->layers;
		for (uint32_t l = 0; l < f->layers; l++)
			out->stored[t] -= miss[t * f->layers + l] != 0;
	}
	free(miss);
	return 0;
}

int
sw_runfile_append(sw_runfile *f, const sw_step *s, char *err, size_t errlen)
{
	size_t lh = (size_t)f->layers * f->heads;
	hsize_t t = (hsize_t)f->steps;

	quiet();
	if (!s->rows || !s->rejected || !s->missing) {
		snprintf(err, errlen, "%s: step %lld: rows, rejected and missing must not be NULL",
		    f->path, (long long)s->step);
		return -1;
	}
	/* a run that was marked ended and goes on: say so before its steps */
	if (f->ended && append_ended(f, 0, err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < lh; i++)
		for (int r = 0; r < NREASONS; r++)
			f->rej[i * NREASONS + r] = s->rejected[i * SWM_STATUS__N + 1 + r];

	if (write_row(f, D_TIME, t, H5T_NATIVE_DOUBLE, &s->time, err, errlen) < 0)
		return -1;
	for (int i = 0; i < SW_HEAD_FIELDS; i++)
		if (write_layers(f, D_HEAD + i, t, H5T_NATIVE_DOUBLE, s->head[i], NULL,
		    err, errlen) < 0)
			return -1;
	if (write_row(f, D_ROWS, t, H5T_NATIVE_INT64, s->rows, err, errlen) < 0 ||
	    write_row(f, D_REJECTED, t, H5T_NATIVE_INT64, f->rej, err, errlen) < 0)
		return -1;
	for (int i = 0; i < SW_PAIR_FIELDS; i++)
		if (write_layers(f, D_PAIR + i, t, H5T_NATIVE_DOUBLE, s->pair[i], s->missing,
		    err, errlen) < 0)
			return -1;
	if (write_layers(f, D_FLIP, t, H5T_NATIVE_DOUBLE, s->flip, NULL, err, errlen) < 0 ||
	    write_row(f, D_MISSING, t, H5T_NATIVE_UINT8, s->missing, err, errlen) < 0 ||
	    write_row(f, D_LOST, t, H5T_NATIVE_INT64, &s->lost, err, errlen) < 0 ||
	    write_row(f, D_INCOMPLETE, t, H5T_NATIVE_INT64, &s->incomplete, err, errlen) < 0 ||
	    write_row(f, D_INC, t, H5T_NATIVE_UINT64, &s->inc, err, errlen) < 0 ||
	    write_row(f, D_INC_LOST, t, H5T_NATIVE_INT64, &s->inc_lost, err, errlen) < 0 ||
	    write_row(f, D_SEQ_NEXT, t, H5T_NATIVE_UINT64, &s->seq_next, err, errlen) < 0 ||
	    write_row(f, D_PREV_ROW, t, H5T_NATIVE_INT64, &s->prev_row, err, errlen) < 0 ||
	    write_row(f, D_MISSING_RANK, t, H5T_NATIVE_INT32,
	    s->missing_rank ? s->missing_rank : f->present, err, errlen) < 0)
		return -1;
	if (f->row_stats && append_row_stats(f, t, s->row_stats, err, errlen) < 0)
		return -1;
	if (write_row(f, D_ROW_USE, t, H5T_NATIVE_UINT8, s->row_use ? s->row_use : f->use,
	    err, errlen) < 0)
		return -1;
	for (int i = 0; f->cross && i < SW_XPAIR_FIELDS; i++)
		if (write_layers(f, D_XPAIR + i, t, H5T_NATIVE_DOUBLE, s->xpair[i], NULL,
		    err, errlen) < 0)
			return -1;
	/* the commit: a reader sizes everything by /step */
	if (write_row(f, D_STEP, t, H5T_NATIVE_INT64, &s->step, err, errlen) < 0)
		return -1;
	f->steps++;
	return 0;
}

int
sw_runfile_flush(sw_runfile *f, char *err, size_t errlen)
{
	quiet();
	if (H5Fflush(f->file, H5F_SCOPE_LOCAL) < 0) {
		sw_h5_fail(err, errlen, "%s: flush failed", f->path);
		return -1;
	}
	return 0;
}

size_t
sw_runfile_state_bytes(uint32_t layers, uint32_t heads, uint32_t rows, int row_stats, int cross)
{
	size_t lh = (size_t)layers * heads;
	size_t b = lh * NREASONS * sizeof(int64_t) + (size_t)rows + 1 + lh * sizeof(int32_t) + 1;
	if (row_stats)
		b += lh * rows * (sizeof(double) + 1);
	(void)cross;	/* NaN rows are the datasets' fill value: no buffer */
	return b;
}

int
sw_runfile_mark_ended(sw_runfile *f, char *err, size_t errlen)
{
	quiet();
	if (f->ended)
		return 0;
	return append_ended(f, 1, err, errlen);
}

int
sw_runfile_put_sender(sw_runfile *f, int64_t row, const uint64_t *vals, char *err,
    size_t errlen)
{
	quiet();
	if (row < 0 || (hsize_t)row > f->ext[D_SENDERS]) {
		snprintf(err, errlen, "%s: sender row %lld past the table's %llu", f->path,
		    (long long)row, (unsigned long long)f->ext[D_SENDERS]);
		return -1;
	}
	return write_row(f, D_SENDERS, (hsize_t)row, H5T_NATIVE_UINT64, vals, err, errlen) < 0 ?
	    -1 : 0;
}

int64_t
sw_runfile_senders(const sw_runfile *f, uint64_t **vals, char *err, size_t errlen)
{
	hsize_t n = f->ext[D_SENDERS], w = f->sender_cols;
	*vals = NULL;
	if (n == 0)
		return 0;
	if (!(*vals = calloc(n * SW_SENDER_FIELDS, sizeof(uint64_t)))) {
		snprintf(err, errlen, "%s: no memory for the sender table", f->path);
		return -1;
	}
	if (read_col(f, D_SENDERS, n, w, H5T_NATIVE_UINT64, *vals) < 0) {
		sw_h5_fail(err, errlen, "%s: reading /senders failed", f->path);
		free(*vals);
		*vals = NULL;
		return -1;
	}
	/* rows of w fields to rows of SW_SENDER_FIELDS, the missing ones 0 */
	for (hsize_t k = n; w < SW_SENDER_FIELDS && k-- > 0;) {
		memmove(*vals + k * SW_SENDER_FIELDS, *vals + k * w, w * sizeof(uint64_t));
		memset(*vals + k * SW_SENDER_FIELDS + w, 0, (SW_SENDER_FIELDS - w) * sizeof(uint64_t));
	}
	return (int64_t)n;
}

int
sw_runfile_close(sw_runfile **fp)
{
	sw_runfile *f = *fp;
	int rc = 0;

	if (!f)
		return 0;
	quiet();
	if (H5Fflush(f->file, H5F_SCOPE_LOCAL) < 0)
		rc = -1;
	for (int d = 0; d < D__N; d++) {
		if (f->dset[d] >= 0 && H5Dclose(f->dset[d]) < 0)
			rc = -1;
		f->dset[d] = -1;
	}
	if (H5Fclose(f->file) < 0)
		rc = -1;
	f->file = -1;
	H5Eclear2(H5E_DEFAULT);
	runfile_free(f);
	*fp = NULL;
	return rc;
}
