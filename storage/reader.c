/*
 * reader.c: SWMR reading of run files (runfile.h) while the daemon appends
 * to them. The commit protocol it follows is LAYOUT.md's: refresh /step,
 * read only below its extent, refresh each dataset before reading it.
 *
 * A process must not SWMR-read a file it also writes: HDF5 would hand the
 * reader the writer's open file and caches, not what is on disk.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hdf5.h>

#include "storage/h5util.h"
#include "storage/runfile.h"

#define REFRESH_TRIES 100	/* about 100 ms of 1 ms waits */

/* The datasets are the schema's (runfile.h); a few by name. */
#define NNAMES 64	/* >= sw_schema_count() */
static int IDX_STEP, IDX_INC, IDX_RES_INC, IDX_RES_STEP, IDX_ROW_STATUS,
    IDX_ROWSTAT0;
#define STEP_INDEX ((size_t)IDX_STEP)

static void
find_indices(void)
{
	IDX_STEP = sw_schema_find("step");
	IDX_INC = sw_schema_find("inc");
	IDX_RES_INC = sw_schema_find("resume_inc");
	IDX_RES_STEP = sw_schema_find("resume_step");
	IDX_ROW_STATUS = sw_schema_find("row_status");
	IDX_ROWSTAT0 = sw_schema_find(sw_rowstat_field_names[0]);
}

/*
 * One handle per dataset: H5Drefresh through one of two handles to the same
 * dataset leaves the other one reading chunks from where they used to be
 * (HDF5 1.10.8: a tailing reader then got step 0's value for step 64).
 */
struct sw_reader {
	hid_t file;
	hid_t ended;
	hid_t dset[NNAMES];	/* opened on first read; /step at open */
	int64_t committed;	/* the extent of /step at the last refresh */
	char *path;
	char split_form[16], kind[16], dtype[16];
	int version;
	uint32_t layers, heads, rows;	/* rows: of the per-row statistics, 0 none */
	int ended_mark;		/* the last /ended entry read was 1 */
};

static void
quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}



static const char *
name_at(size_t i)
{
	return sw_schema_at(i)->name;
}

static hsize_t extent0(hid_t ds, int *rank, hsize_t *dims);

static int
read_meta(sw_reader *r, sw_runmeta *m, char *err, size_t errlen)
{
	uint8_t fixed = 0;

	memset(m, 0, sizeof(*m));
	if (sw_h5_attr_str(r->file, "run", m->run, sizeof(m->run)) < 0 ||
	    sw_h5_attr_str(r->file, "model", m->model, sizeof(m->model)) < 0 ||
	    sw_h5_attr_num(r->file, "params", H5T_NATIVE_UINT64, &m->params) < 0 ||
	    sw_h5_attr_num(r->file, "layers", H5T_NATIVE_UINT32, &m->layers) < 0 ||
	    sw_h5_attr_num(r->file, "heads", H5T_NATIVE_UINT32, &m->heads) < 0 ||
	    sw_h5_attr_num(r->file, "sink", H5T_NATIVE_UINT32, &m->sink) < 0 ||
	    sw_h5_attr_num(r->file, "fixed_probe", H5T_NATIVE_UINT8, &fixed) < 0 ||
	    sw_h5_attr_str(r->file, "split_form", r->split_form, sizeof(r->split_form)) < 0 ||
	    sw_h5_attr_str(r->file, "kind", r->kind, sizeof(r->kind)) < 0 ||
	    sw_h5_attr_num(r->file, "rows", H5T_NATIVE_UINT32, &m->rows) < 0 ||
	    sw_h5_attr_num(r->file, "keys", H5T_NATIVE_UINT32, &m->keys) < 0) {
		sw_h5_fail(err, errlen, "%s: reading the run attributes failed", r->path);
		return -1;
	}
	m->fixed_probe = fixed;
	m->split_form = r->split_form;
	m->kind = r->kind;
	m->version = r->version;
	m->generation = 1;
	if (r->version >= 2) {
		uint8_t rs = 0;
		if (sw_h5_attr_str(r->file, "dtype", r->dtype, sizeof(r->dtype)) < 0 ||
		    sw_h5_attr_num(r->file, "generation", H5T_NATIVE_UINT32, &m->generation) < 0 ||
		    sw_h5_attr_num(r->file, "row_stats", H5T_NATIVE_UINT8, &rs) < 0) {
			sw_h5_fail(err, errlen, "%s: reading the run attributes failed", r->path);
			return -1;
		}
		m->dtype = r->dtype;
		m->row_stats = rs;
	}
	uint8_t cross = 0;
	if (H5Aexists(r->file, "cross_layer_pairs") > 0 &&
	    sw_h5_attr_num(r->file, "cross_layer_pairs", H5T_NATIVE_UINT8, &cross) < 0) {
		sw_h5_fail(err, errlen, "%s: reading the run attributes failed", r->path);
		return -1;
	}
	H5Eclear2(H5E_DEFAULT);
	m->cross_pairs = cross;
	/*
	 * The shape the readers size their buffers by, against the protocol's
	 * limits (PROTOCOL.md section 8, check 13) and against the datasets: a
	 * file's attributes are claims, checked before anything is allocated.
	 */
	const char *bad = m->layers < 1 || m->layers > 4096 ? "layers" :
	    m->heads < 1 || m->heads > 1024 ? "heads" :
	    m->rows > 65536 ? "rows" : m->keys > (1u << 20) ? "keys" : NULL;
	if (bad) {
		snprintf(err, errlen, "%s: the attribute %s (%u layers x %u heads, probe %u x %u) "
		    "is outside the protocol's limits: not a run file this build wrote", r->path,
		    bad, m->layers, m->heads, m->rows, m->keys);
		return -1;
	}
	hid_t ds = H5Dopen2(r->file, "sink_mass", H5P_DEFAULT);
	hsize_t dims[4];
	int rank = 0;
	hsize_t n = ds >= 0 ? extent0(ds, &rank, dims) : (hsize_t)-1;
	if (ds >= 0)
		H5Dclose(ds);
	H5Eclear2(H5E_DEFAULT);
	if (n == (hsize_t)-1 || rank != 3 || dims[1] != m->layers || dims[2] != m->heads) {
		snprintf(err, errlen, "%s: /sink_mass is not [steps, %u layers, %u heads] as the "
		    "file's attributes say: the file is inconsistent", r->path, m->layers, m->heads);
		return -1;
	}
	if (m->row_stats) {	/* the probe rows a paired split sizes its rows by */
		ds = H5Dopen2(r->file, "row_status", H5P_DEFAULT);
		n = ds >= 0 ? extent0(ds, &rank, dims) : (hsize_t)-1;
		if (ds >= 0)
			H5Dclose(ds);
		H5Eclear2(H5E_DEFAULT);
		if (n == (hsize_t)-1 || rank != 4 || dims[1] != m->layers || dims[2] != m->heads ||
		    dims[3] != m->rows) {
			snprintf(err, errlen, "%s: /row_status is not [steps, %u layers, %u heads, %u "
			    "rows] as the file's attributes say: the file is inconsistent", r->path,
			    m->layers, m->heads, m->rows);
			return -1;
		}
	}
	r->layers = m->layers;
	r->heads = m->heads;
	r->rows = m->row_stats ? m->rows : 0;
	return 0;
}

static hsize_t
extent0(hid_t ds, int *rank, hsize_t *dims)
{
	hid_t sp = H5Dget_space(ds);
	int rk = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;

	if (rk < 1 || rk > 4 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0)
		rk = -1;
	if (sp >= 0)
		H5Sclose(sp);
	if (rank)
		*rank = rk;
	return rk < 1 ? (hsize_t)-1 : dims[0];
}

static void
close_handles(sw_reader *r)
{
	for (size_t i = 0; i < NNAMES; i++)
		if (r->dset[i] >= 0) {
			H5Dclose(r->dset[i]);
			r->dset[i] = -1;
		}
	if (r->ended >= 0)
		H5Dclose(r->ended);
	if (r->file >= 0)
		H5Fclose(r->file);
	r->ended = r->file = -1;
	H5Eclear2(H5E_DEFAULT);
}

static int
open_file(sw_reader *r, char *err, size_t errlen)
{
	hid_t fapl = sw_h5_reader_fapl();

	close_handles(r);
	if (fapl < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", r->path);
		return -1;
	}
	r->file = H5Fopen(r->path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
	H5Pclose(fapl);
	if (r->file < 0) {
		struct stat sb;
		if (stat(r->path, &sb) == 0 && S_ISDIR(sb.st_mode))
			snprintf(err, errlen, "%s: is a directory, not a run file", r->path);
		else if (stat(r->path, &sb) == 0 && H5Fis_hdf5(r->path) == 0)
			snprintf(err, errlen, "%s: not a run file (not an HDF5 file)", r->path);
		else
			sw_h5_fail(err, errlen, "%s: cannot open the run file for SWMR reading",
			    r->path);
		return -1;
	}
	return 0;
}

/*
 * A call failed with err. A metadata checksum that fails in a file being
 * written can be the reader's honest bad luck (SWMR): the file is opened
 * again and 1 returned, to try the call once more. The second failure, or
 * the first in a file marked ended, makes err say the file is corrupt, and
 * 0 is returned, as for any other failure.
 */
static int
again(sw_reader *r, int tried, char *err, size_t errlen)
{
	if (!sw_h5_checksum_failed())
		return 0;
	if (!tried && !r->ended_mark) {
		char oerr[256];
		if (open_file(r, oerr, sizeof(oerr)) == 0 &&
		    (r->dset[STEP_INDEX] = H5Dopen2(r->file, "step", H5P_DEFAULT)) >= 0 &&
		    (r->ended = H5Dopen2(r->file, "ended", H5P_DEFAULT)) >= 0)
			return 1;
		H5Eclear2(H5E_DEFAULT);
	}
	char was[512];
	size_t n = strlen(r->path);
	/* err names the path first: once is enough */
	snprintf(was, sizeof(was), "%s", strncmp(err, r->path, n) == 0 && err[n] == ':' ?
	    err + n + 2 : err);
	snprintf(err, errlen, "%s: the file is corrupt: a metadata checksum fails %s (%s)",
	    r->path, r->ended_mark ? "in a file marked ended" : "again after a re-open", was);
	return 0;
}

void
sw_reader_close(sw_reader **rp)
{
	sw_reader *r = *rp;

	if (!r)
		return;
	quiet();
	close_handles(r);
	free(r->path);
	free(r);
	*rp = NULL;
}

static int64_t refresh_once(sw_reader *r, char *err, size_t errlen);

static int
open_once(sw_reader *r, sw_runmeta *meta, char *err, size_t errlen)
{
	int32_t version = -1;

	if (open_file(r, err, errlen) < 0)
		return -1;
	htri_t has = H5Aexists(r->file, "layout_version");
	if (has == 0) {
		snprintf(err, errlen, "%s: not a sinkwatch run file (no layout_version)", r->path);
		return -1;
	}
	if (has < 0 || sw_h5_attr_num(r->file, "layout_version", H5T_NATIVE_INT32, &version) < 0) {
		sw_h5_fail(err, errlen, "%s: reading the attribute layout_version failed", r->path);
		return -1;
	}
	if (version < SW_RUNFILE_VERSION_MIN || version > SW_RUNFILE_VERSION) {
		snprintf(err, errlen, "%s: layout version %d, this build reads %d to %d", r->path,
		    (int)version, SW_RUNFILE_VERSION_MIN, SW_RUNFILE_VERSION);
		return -1;
	}
	r->version = version;
	if (read_meta(r, meta, err, errlen) < 0)
		return -1;
	if ((r->dset[STEP_INDEX] = H5Dopen2(r->file, "step", H5P_DEFAULT)) < 0 ||
	    (r->ended = H5Dopen2(r->file, "ended", H5P_DEFAULT)) < 0) {
		sw_h5_fail(err, errlen, "%s: not a sinkwatch run file (no /step or /ended)", r->path);
		return -1;
	}
	if (refresh_once(r, err, errlen) < 0)
		return -1;
	(void)sw_reader_ended(r);	/* a checksum failing in an ended file is corruption */
	return 0;
}

int
sw_reader_open(const char *path, sw_reader **out, sw_runmeta *meta, char *err,
    size_t errlen)
{
	sw_reader *r;
	sw_runmeta own;

	*out = NULL;
	quiet();
	if (!(r = calloc(1, sizeof(*r))) || !(r->path = strdup(path))) {
		free(r);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	r->file = r->ended = -1;
	find_indices();
	for (size_t i = 0; i < NNAMES; i++)
		r->dset[i] = -1;
	struct stat sb;
	if (stat(path, &sb) != 0) {	/* say why plainly, before HDF5 does not */
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		sw_reader_close(&r);
		return -1;
	}
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		if (open_once(r, meta ? meta : &own, err, errlen) == 0)
			break;
		if (!again(r, tried, err, errlen)) {
			sw_reader_close(&r);
			return -1;
		}
	}
	*out = r;
	return 0;
}

int64_t
sw_reader_refresh(sw_reader *r, char *err, size_t errlen)
{
	quiet();
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		int64_t n = refresh_once(r, err, errlen);
		if (n >= 0 || !again(r, tried, err, errlen))
			return n;
	}
}

static int64_t
refresh_once(sw_reader *r, char *err, size_t errlen)
{
	hsize_t dims[4];

	if (H5Drefresh(r->dset[STEP_INDEX]) < 0) {
		sw_h5_fail(err, errlen, "%s: refreshing /step failed", r->path);
		return -1;
	}
	hsize_t n = extent0(r->dset[STEP_INDEX], NULL, dims);
	if (n == (hsize_t)-1) {
		sw_h5_fail(err, errlen, "%s: reading the extent of /step failed", r->path);
		return -1;
	}
	/*
	 * Every committed step holds its 8-byte /step entry and its head values
	 * (layers x heads doubles of sink mass alone) in the file: an extent
	 * past what the file's size can hold is a claim, never allocated for.
	 */
	struct stat sb;
	uint64_t per = 8 + 8 * (uint64_t)r->layers * r->heads;
	if (stat(r->path, &sb) == 0 && n > 0 && n > (hsize_t)sb.st_size / per) {
		snprintf(err, errlen, "%s: /step claims %llu steps, more than its %lld bytes can "
		    "hold (%llu bytes a step at least): the file is corrupt", r->path,
		    (unsigned long long)n, (long long)sb.st_size, (unsigned long long)per);
		return -1;
	}
	/* an extent never shrinks; keep the count monotone regardless */
	if ((int64_t)n > r->committed)
		r->committed = (int64_t)n;
	return r->committed;
}

/*
 * Rows [t0, t1) of dataset i as mtype (esize bytes each). The step-axis
 * datasets are read below the committed count only; the resume records
 * below their own extent (limit, the caller's).
 */
static int64_t
read_range(sw_reader *r, size_t i, int64_t t0, int64_t t1, int64_t limit, hid_t mtype,
    void *buf, size_t buflen, char *err, size_t errlen)
{
	hsize_t dims[4], start[4] = { 0 }, count[4];
	hid_t ds = -1, fsp = -1, msp = -1;
	const char *name = name_at(i);
	int rank = -1;

	if (sw_schema_at(i)->version > r->version) {
		snprintf(err, errlen, "%s: no /%s in a layout %d file", r->path, name, r->version);
		return -1;
	}
	if (t0 < 0 || t1 < t0 || t1 > limit) {
		snprintf(err, errlen, "%s: steps [%lld, %lld) of /%s: only [0, %lld) are "
		    "committed", r->path, (long long)t0, (long long)t1, name, (long long)limit);
		return -1;
	}
	if (r->dset[i] < 0 && (r->dset[i] = H5Dopen2(r->file, name, H5P_DEFAULT)) < 0) {
		sw_h5_fail(err, errlen, "%s: opening /%s failed", r->path, name);
		return -1;
	}
	ds = r->dset[i];
	/*
	 * /step is written last and flushed with everything else, but one
	 * H5Fflush writes the datasets' headers one after another: right
	 * after /step grew, another header may still hold the old extent.
	 */
	for (int tries = 0;; tries++) {
		if (H5Drefresh(ds) < 0) {
			sw_h5_fail(err, errlen, "%s: refreshing /%s failed", r->path, name);
			return -1;
		}
		hsize_t n = extent0(ds, &rank, dims);
		if (n == (hsize_t)-1) {
			sw_h5_fail(err, errlen, "%s: reading the extent of /%s failed", r->path, name);
			return -1;
		}
		if (n >= (hsize_t)t1)
			break;
		if (tries == REFRESH_TRIES) {
			/* a writer that has the file open may be mid-flush; a closed
			 * file (its writer flags clear) will not grow: inconsistent */
			char ferr[64];
			if (sw_runfile_writer_flags(r->path, ferr, sizeof(ferr)) == 0)
				snprintf(err, errlen, "%s: /%s has %llu steps, /step %lld, and no "
				    "writer has the file open: the file is inconsistent (sinkwatch "
				    "check says what is short)", r->path, name,
				    (unsigned long long)n, (long long)t1);
			else
				snprintf(err, errlen, "%s: /%s has %llu steps, /step %lld: the "
				    "writer has not finished its flush; read again", r->path, name,
				    (unsigned long long)n, (long long)t1);
			return -1;
		}
		struct timespec ms = { 0, 1000000 };
		nanosleep(&ms, NULL);
	}
	uint64_t total = (uint64_t)(t1 - t0);
	for (int d = 1; d < rank; d++)
		total *= dims[d];
	if (total > buflen) {
		snprintf(err, errlen, "%s: /%s [%lld, %lld) is %llu values, the buffer "
		    "holds %zu", r->path, name, (long long)t0, (long long)t1,
		    (unsigned long long)total, buflen);
		return -1;
	}
	if (total == 0)
		return 0;
	memcpy(count, dims, sizeof(dims));
	start[0] = (hsize_t)t0;
	count[0] = (hsize_t)(t1 - t0);
	int64_t rc = -1;
	/* the memory space of the selection's own shape (the same bytes, C
	 * order): a flat one of another rank makes HDF5 map every element of
	 * every chunk one by one, most of the time of a long read */
	if ((fsp = H5Dget_space(ds)) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    (msp = H5Screate_simple(rank, count, NULL)) >= 0 &&
	    H5Dread(ds, mtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = (int64_t)total;
	else
		sw_h5_fail(err, errlen, "%s: reading steps [%lld, %lld) of /%s failed", r->path,
		    (long long)t0, (long long)t1, name);
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

int64_t
sw_reader_read(sw_reader *r, const char *name, int64_t t0, int64_t t1,
    double *buf, size_t buflen, char *err, size_t errlen)
{

	quiet();
	int k = sw_schema_find(name);
	/* the end marks and resume records are not indexed by step: their own calls */
	if (k < 0 || strncmp(sw_schema_at((size_t)k)->dims, "step", 4) != 0) {
		snprintf(err, errlen, "%s: no series \"%s\"", r->path, name);
		return -1;
	}
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		int64_t n = read_range(r, (size_t)k, t0, t1, r->committed, H5T_NATIVE_DOUBLE, buf,
		    buflen, err, errlen);
		if (n >= 0 || !again(r, tried, err, errlen))
			return n;
	}
}

int
sw_reader_shape(sw_reader *r, const char *name, int64_t *dims, char *err, size_t errlen)
{
	hsize_t d[4];
	int rank = -1;

	quiet();
	int k = sw_schema_find(name);
	if (k < 0 || strncmp(sw_schema_at((size_t)k)->dims, "step", 4) != 0) {
		snprintf(err, errlen, "%s: no series \"%s\"", r->path, name);
		return -1;
	}
	if (sw_schema_at((size_t)k)->version > r->version) {
		snprintf(err, errlen, "%s: no /%s in a layout %d file", r->path, name, r->version);
		return -1;
	}
	if (r->dset[k] < 0 && (r->dset[k] = H5Dopen2(r->file, name, H5P_DEFAULT)) < 0) {
		sw_h5_fail(err, errlen, "%s: the file has no /%s", r->path, name);
		return -1;
	}
	if (extent0(r->dset[k], &rank, d) == (hsize_t)-1 || rank < 1 || rank > 4) {
		sw_h5_fail(err, errlen, "%s: reading the shape of /%s failed", r->path, name);
		return -1;
	}
	for (int i = 1; i < rank; i++)
		dims[i - 1] = (int64_t)d[i];
	return rank - 1;
}

/* The extent of a resume dataset, after a refresh; -1 on error. */
static int64_t
res_extent(sw_reader *r, size_t i)
{
	hsize_t dims[4];

	if (r->dset[i] < 0 && (r->dset[i] = H5Dopen2(r->file, name_at(i), H5P_DEFAULT)) < 0)
		return -1;
	if (H5Drefresh(r->dset[i]) < 0)
		return -1;
	hsize_t n = extent0(r->dset[i], NULL, dims);
	return n == (hsize_t)-1 ? -1 : (int64_t)n;
}

static int rows_once(sw_reader *r, int64_t T, sw_rows *out, char *err, size_t errlen);

int
sw_reader_rows(sw_reader *r, int64_t T, sw_rows *out, char *err, size_t errlen)
{
	quiet();
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		int rc = rows_once(r, T, out, err, errlen);
		if (rc >= 0 || !again(r, tried, err, errlen))
			return rc;
	}
}

static int
rows_once(sw_reader *r, int64_t T, sw_rows *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	int64_t nr = 0;
	if (r->version >= 2) {
		int64_t a = res_extent(r, (size_t)IDX_RES_INC), b = res_extent(r, (size_t)IDX_RES_STEP);
		if (a < 0 || b < 0) {
			sw_h5_fail(err, errlen, "%s: reading the resume records failed", r->path);
			return -1;
		}
		nr = a < b ? a : b;	/* resume_step is written last */
	}
	out->n = T;
	out->nres = nr;
	out->step = malloc((size_t)T * sizeof(int64_t) + 1);
	out->inc = calloc((size_t)T + 1, sizeof(uint64_t));
	out->inc_lost = calloc((size_t)T + 1, sizeof(int64_t));
	out->res_inc = malloc((size_t)nr * sizeof(uint64_t) + 1);
	out->res_step = malloc((size_t)nr * sizeof(int64_t) + 1);
	if (!out->step || !out->inc || !out->inc_lost || !out->res_inc ||
	    !out->res_step) {
		sw_rows_free(out);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (read_range(r, STEP_INDEX, 0, T, r->committed, H5T_NATIVE_INT64, out->step,
	    (size_t)T, err, errlen) < 0 ||
	    (r->version >= 2 &&
	    (read_range(r, (size_t)IDX_INC, 0, T, r->committed, H5T_NATIVE_UINT64, out->inc,
	    (size_t)T, err, errlen) < 0 ||
	    read_range(r, (size_t)IDX_RES_INC, 0, nr, nr, H5T_NATIVE_UINT64, out->res_inc,
	    (size_t)nr, err, errlen) < 0 ||
	    read_range(r, (size_t)IDX_RES_STEP, 0, nr, nr, H5T_NATIVE_INT64, out->res_step,
	    (size_t)nr, err, errlen) < 0))) {
		sw_rows_free(out);
		return -1;
	}
	return 0;
}

static int row_stats_once(sw_reader *r, int64_t t0, int64_t t1, swm_row *out, size_t n,
    char *err, size_t errlen);

int
sw_reader_row_stats_range(sw_reader *r, int64_t t0, int64_t t1, swm_row *out, size_t n,
    char *err, size_t errlen)
{
	quiet();
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		int rc = row_stats_once(r, t0, t1, out, n, err, errlen);
		if (rc >= 0 || !again(r, tried, err, errlen))
			return rc;
	}
}

static int
row_stats_once(sw_reader *r, int64_t t0, int64_t t1, swm_row *out, size_t n,
    char *err, size_t errlen)
{
	size_t m = (size_t)r->layers * r->heads * r->rows, tn = t1 > t0 ? (size_t)(t1 - t0) : 0;

	quiet();
	if (!r->rows) {
		snprintf(err, errlen, "%s: the file has no per-row statistics", r->path);
		return -1;
	}
	if (t1 <= t0 || n / tn < m) {
		snprintf(err, errlen, "%s: %zu row slots for %zu steps, the file has %zu a step",
		    r->path, n, tn, m);
		return -1;
	}
	m *= tn;
	double *v = malloc(m * sizeof(double) + 1);
	uint8_t *st = malloc(m + 1);
	int rc = -1;
	if (!v || !st) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (read_range(r, (size_t)IDX_ROW_STATUS, t0, t1, r->committed, H5T_NATIVE_UINT8, st, m,
	    err, errlen) < 0)
		goto out;
	for (size_t i = 0; i < m; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].status = (swm_status)st[i];
	}
	for (int k = 0; k < SW_ROWSTAT_FIELDS; k++) {
		if (read_range(r, (size_t)IDX_ROWSTAT0 + (size_t)k, t0, t1, r->committed,
		    H5T_NATIVE_DOUBLE, v, m, err, errlen) < 0)
			goto out;
		for (size_t i = 0; i < m; i++)
			switch (k) {
			case 0: out[i].s = v[i]; break;
			case 1: out[i].w = v[i]; break;
			case 2: out[i].H = v[i]; break;
			case 3: out[i].hb = v[i]; break;
			default: out[i].Hc = v[i]; break;
			}
	}
	rc = 0;
out:
	free(v);
	free(st);
	return rc;
}

int
sw_reader_row_stats(sw_reader *r, int64_t t, swm_row *out, size_t n, char *err,
    size_t errlen)
{
	return sw_reader_row_stats_range(r, t, t + 1, out, n, err, errlen);
}

static int64_t senders_once(sw_reader *r, uint64_t **vals, size_t *fields, char *err,
    size_t errlen);

int64_t
sw_reader_senders(sw_reader *r, uint64_t **vals, size_t *fields, char *err, size_t errlen)
{
	quiet();
	for (int tried = 0;; tried++) {
		(void)sw_h5_checksum_failed();
		int64_t n = senders_once(r, vals, fields, err, errlen);
		if (n >= 0 || !again(r, tried, err, errlen))
			return n;
	}
}

static int64_t
senders_once(sw_reader *r, uint64_t **vals, size_t *fields, char *err, size_t errlen)
{
	hsize_t dims[4];
	int k = sw_schema_find("senders");

	*vals = NULL;
	if (fields)
		*fields = 0;
	if (k < 0 || r->version < sw_schema_at((size_t)k)->version)
		return 0;	/* no sender table before layout 3 */
	if (r->dset[k] < 0 && (r->dset[k] = H5Dopen2(r->file, "senders", H5P_DEFAULT)) < 0) {
		sw_h5_fail(err, errlen, "%s: opening /senders failed", r->path);
		return -1;
	}
	if (H5Drefresh(r->dset[k]) < 0) {
		sw_h5_fail(err, errlen, "%s: refreshing /senders failed", r->path);
		return -1;
	}
	int rank = 0;
	hsize_t n = extent0(r->dset[k], &rank, dims);
	if (n == (hsize_t)-1 || rank != 2) {
		sw_h5_fail(err, errlen, "%s: reading the extent of /senders failed", r->path);
		return -1;
	}
	size_t w = dims[1] < SW_SENDER_FIELDS ? (size_t)dims[1] : SW_SENDER_FIELDS;
	if (fields)
		*fields = w;
	if (n == 0)
		return 0;
	if (dims[1] != w) {	/* wider than this build knows: a newer layout */
		snprintf(err, errlen, "%s: /senders has %llu fields, this build reads %d", r->path,
		    (unsigned long long)dims[1], SW_SENDER_FIELDS);
		return -1;
	}
	size_t len = (size_t)n * SW_SENDER_FIELDS;
	if (!(*vals = calloc(len, sizeof(uint64_t)))) {
		snprintf(err, errlen, "%s: no memory for the sender table", r->path);
		return -1;
	}
	if (read_range(r, (size_t)k, 0, (int64_t)n, (int64_t)n, H5T_NATIVE_UINT64, *vals,
	    (size_t)n * w, err, errlen) < 0) {
		free(*vals);
		*vals = NULL;
		return -1;
	}
	/* rows of w fields to rows of SW_SENDER_FIELDS, the missing ones 0 */
	for (size_t q = (size_t)n; w < SW_SENDER_FIELDS && q-- > 0;) {
		memmove(*vals + q * SW_SENDER_FIELDS, *vals + q * w, w * sizeof(uint64_t));
		memset(*vals + q * SW_SENDER_FIELDS + w, 0, (SW_SENDER_FIELDS - w) * sizeof(uint64_t));
	}
	return (int64_t)n;
}

int
sw_reader_ended(sw_reader *r)
{
	hsize_t dims[4], start, one = 1;
	hid_t fsp = -1, msp = -1;
	int8_t v = 0;
	int rc = -1;

	quiet();
	if (H5Drefresh(r->ended) < 0) {
		H5Eclear2(H5E_DEFAULT);
		return -1;
	}
	hsize_t n = extent0(r->ended, NULL, dims);
	if (n == (hsize_t)-1) {
		H5Eclear2(H5E_DEFAULT);
		return -1;
	}
	if (n == 0)
		return 0;
	start = n - 1;
	if ((fsp = H5Dget_space(r->ended)) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, &start, NULL, &one, NULL) >= 0 &&
	    (msp = H5Screate_simple(1, &one, NULL)) >= 0 &&
	    H5Dread(r->ended, H5T_NATIVE_INT8, msp, fsp, H5P_DEFAULT, &v) >= 0)
		rc = r->ended_mark = v == 1;
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	H5Eclear2(H5E_DEFAULT);
	return rc;
}
