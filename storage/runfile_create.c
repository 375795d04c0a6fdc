/*
 * runfile_create.c: a new run file (storage/LAYOUT.md): its name (an
 * escaped run id and a generation), root attributes, datasets with their
 * chunks and fill values, and the file and dataset access lists.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "storage/h5util.h"
#include "storage/runfile_int.h"

/* ---- file names --------------------------------------------------------- */

/*
 * The escaped id gets at most BASE_MAX bytes, so that ".NAME@GGGGGGGGGG.h5.tmp",
 * the longest name a generation is built under, fits NAME_MAX.
 */
#define GEN_SUFFIX_MAX 11	/* "@" and up to 10 digits */
#define TMP_EXTRA 5		/* "." before, ".tmp" after */
#define BASE_MAX (SW_RUNFILE_NAME_MAX - 3 - GEN_SUFFIX_MAX - TMP_EXTRA)

int
rf_attr_u32(hid_t loc, const char *name, uint32_t v)
{
	return rf_attr_write(loc, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}

static int
name_keep(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

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

int
rf_attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype,
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
		rc = rf_attr_write(loc, name, t, t, &s);
	if (t >= 0)
		H5Tclose(t);
	return rc;
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
	if (rf_attr_write(file, "layout_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &layout) < 0 ||
	    rf_attr_write(file, "metrics_contract", H5T_STD_I32LE, H5T_NATIVE_INT32, &contract) < 0 ||
	    attr_str(file, "run", m->run) < 0 ||
	    attr_str(file, "model", m->model) < 0 ||
	    rf_attr_write(file, "params", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->params) < 0 ||
	    rf_attr_u32(file, "layers", m->layers) < 0 ||
	    rf_attr_u32(file, "heads", m->heads) < 0 ||
	    rf_attr_u32(file, "sink", m->sink) < 0 ||
	    rf_attr_write(file, "fixed_probe", H5T_STD_U8LE, H5T_NATIVE_UINT8, &fixed) < 0 ||
	    attr_str(file, "split_form", m->split_form) < 0 ||
	    attr_str(file, "kind", m->kind) < 0 ||
	    rf_attr_u32(file, "rows", m->rows) < 0 ||
	    rf_attr_u32(file, "keys", m->keys) < 0 ||
	    attr_str(file, "created", created) < 0 ||
	    attr_str(file, "flip_fields", "cosine,js,entropy") < 0 ||
	    attr_str(file, "rejected_reasons", reasons) < 0 ||
	    attr_str(file, "dtype", m->dtype ? m->dtype : "") < 0 ||
	    rf_attr_u32(file, "generation", gen) < 0 ||
	    rf_attr_write(file, "row_stats", H5T_STD_U8LE, H5T_NATIVE_UINT8, &rowstats) < 0 ||
	    rf_attr_write(file, "cross_layer_pairs", H5T_STD_U8LE, H5T_NATIVE_UINT8, &cross) < 0 ||
	    /* the logarithms' precision and the kernels that took them (METRICS.md §6) */
	    attr_str(file, "log_precision", swm_precision()) < 0 ||
	    attr_str(file, "kernel_isa", swm_isa()) < 0 ||
	    attr_str(file, "sender_fields", SW_SENDER_FIELD_LIST) < 0) {
		sw_h5_fail(err, errlen, "writing the file attributes failed");
		return -1;
	}
	return 0;
}

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
		rf_spec(d, &s);
		int rank = rf_shape_dims(s.shape, m->layers, m->heads, m->rows, dims);
		memcpy(maxd, dims, sizeof(dims));
		maxd[0] = H5S_UNLIMITED;
		chunk_dims(rank, dims, H5Tget_size(rf_mem_type(s.type)), chunk_steps, ch);
		if ((sp = H5Screate_simple(rank, dims, maxd)) >= 0 &&
		    (dcpl = H5Pcreate(H5P_DATASET_CREATE)) >= 0 &&
		    H5Pset_chunk(dcpl, rank, ch) >= 0 &&
		    /* no modification times: one less header update per write */
		    H5Pset_obj_track_times(dcpl, 0) >= 0 &&
		    (s.type != E_F64 ||
		    H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan) >= 0) &&
		    (ds = H5Dcreate2(file, s.name, rf_file_type(s.type), sp,
		    H5P_DEFAULT, dcpl, H5P_DEFAULT)) >= 0 &&
		    attr_str(ds, "dims", rf_shape_axes(d, s.shape)) >= 0)
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
int
rf_open_datasets(sw_runfile *f, char *err, size_t errlen)
{
	for (int d = 0; d < D__N; d++) {
		struct dspec s;
		hsize_t dims[4];

		if (!D_HAS(d, f->row_stats, f->cross))
			continue;
		rf_spec(d, &s);
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
hid_t
rf_takeover_fapl(void)
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
int
rf_fix_eoa(hid_t file, const char *path, char *err, size_t errlen)
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

/*
 * Builds the file under a temporary name beside the final one (".NAME.tmp":
 * hidden, and no run's file name starts with '.'), so that a crash while
 * creating never leaves a half-made run file; a crash leaves at most the
 * temporary file, which the next creation truncates.
 */
int
rf_create_file(sw_runfile *f, const sw_runmeta *m, size_t chunk_steps, char *err,
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
	rc = rf_open_datasets(f, err, errlen);
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
