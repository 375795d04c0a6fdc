/*
 * runfile_open.c: a run opened for writing: an existing file checked
 * against the run (shape, layout, settings) and resumed, a killed writer's
 * flags cleared, or a new file made; the files of a run's generations.
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

/* Superblock signature, and where the file consistency flags of a version
 * 2 or 3 superblock are: after signature, version and the two size bytes. */
static const unsigned char h5sig[8] = { 0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n' };
#define SB_FLAGS_OFF 11
#define SB_WRITE_ACCESS 0x01	/* H5F_SUPER_WRITE_ACCESS */
#define SB_SWMR_WRITE_ACCESS 0x04	/* H5F_SUPER_SWMR_WRITE_ACCESS */

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

/* What an existing file's root attributes say of its run. */
struct fattrs {
	uint32_t layers, heads, sink, version, rows, keys;
	uint8_t fixed, rowstats, cross;
	uint64_t params;
};

/* The file's attributes into *fa: 0, or SW_RUNFILE_OTHER (err says why). */
static int
existing_attrs(hid_t file, const char *path, const sw_runmeta *m, struct fattrs *fa,
    char *err, size_t errlen)
{
	char run[sizeof(m->run)];
	memset(fa, 0, sizeof(*fa));
	if (sw_h5_attr_num(file, "layout_version", H5T_NATIVE_UINT32, &fa->version) < 0 ||
	    sw_h5_attr_num(file, "layers", H5T_NATIVE_UINT32, &fa->layers) < 0 ||
	    sw_h5_attr_num(file, "heads", H5T_NATIVE_UINT32, &fa->heads) < 0 ||
	    sw_h5_attr_num(file, "sink", H5T_NATIVE_UINT32, &fa->sink) < 0 ||
	    sw_h5_attr_str(file, "run", run, sizeof(run)) < 0) {
		sw_h5_fail(err, errlen, "%s: not a sinkwatch run file (attributes missing)", path);
		return SW_RUNFILE_OTHER;
	}
	if (fa->version != SW_RUNFILE_VERSION) {
		snprintf(err, errlen, "%s: layout version %u, this build writes %d", path,
		    fa->version, SW_RUNFILE_VERSION);
		return SW_RUNFILE_OTHER;
	}
	if (strcmp(run, m->run) != 0) {
		snprintf(err, errlen, "%s: holds run \"%s\", not \"%s\"", path, run, m->run);
		return SW_RUNFILE_OTHER;
	}
	if (sw_h5_attr_num(file, "rows", H5T_NATIVE_UINT32, &fa->rows) < 0 ||
	    sw_h5_attr_num(file, "keys", H5T_NATIVE_UINT32, &fa->keys) < 0 ||
	    sw_h5_attr_num(file, "fixed_probe", H5T_NATIVE_UINT8, &fa->fixed) < 0 ||
	    sw_h5_attr_num(file, "row_stats", H5T_NATIVE_UINT8, &fa->rowstats) < 0 ||
	    sw_h5_attr_num(file, "params", H5T_NATIVE_UINT64, &fa->params) < 0)
		H5Eclear2(H5E_DEFAULT);
	/*
	 * Cross-layer pairs are the file's setting, not the run's identity:
	 * a daemon with the other setting goes on in the same file (storing
	 * NaN, or not computing them). Files made before the option lack it.
	 */
	if (H5Aexists(file, "cross_layer_pairs") > 0 &&
	    sw_h5_attr_num(file, "cross_layer_pairs", H5T_NATIVE_UINT8, &fa->cross) < 0)
		H5Eclear2(H5E_DEFAULT);
	H5Eclear2(H5E_DEFAULT);
	return 0;
}

/* The file holds the run with another shape or setting: 1 (err says which). */
static int
existing_differs(hid_t file, const char *path, const sw_runmeta *m, const struct fattrs *fa,
    char *err, size_t errlen)
{
	const char *what = fa->layers != m->layers ? "layers" : fa->heads != m->heads ? "heads" :
	    fa->sink != m->sink ? "sink" : fa->rows != m->rows ? "probe rows" :
	    fa->keys != m->keys ? "keys" : fa->fixed != (m->fixed_probe != 0) ? "fixed_probe" :
	    fa->rowstats != (m->row_stats != 0) ? "row_stats" :
	    fa->params != m->params ? "params" : !attr_is(file, "kind", m->kind) ? "kind" :
	    !attr_is(file, "dtype", m->dtype) ? "dtype" :
	    !attr_is(file, "model", m->model) ? "model" : NULL;
	if (!what)
		return 0;
	snprintf(err, errlen, "%s: holds the run with another %s (the file: %u layers x "
	    "%u heads, sink %u, probe [%u, %u] %s, params %llu; the run now: %u x %u, "
	    "sink %u, probe [%u, %u] %s, params %llu, kind %s, dtype %s)", path, what,
	    fa->layers, fa->heads, fa->sink, fa->rows, fa->keys, fa->fixed ? "fixed" : "varying",
	    (unsigned long long)fa->params, m->layers, m->heads, m->sink, m->rows, m->keys,
	    m->fixed_probe ? "fixed" : "varying", (unsigned long long)m->params,
	    m->kind ? m->kind : "-", m->dtype ? m->dtype : "-");
	return 1;
}

/* Every dataset there, with the shape this run needs: 0, or 1 (err says which). */
static int
existing_datasets(hid_t file, const char *path, const sw_runmeta *m,
    const struct fattrs *fa, char *err, size_t errlen)
{
	for (int d = 0; d < D__N; d++) {
		struct dspec s;
		hsize_t want[4], have[4];

		if (!D_HAS(d, m->row_stats, fa->cross))
			continue;
		rf_spec(d, &s);
		int rank = rf_shape_dims(s.shape, fa->layers, fa->heads, fa->rows, want);
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
			return 1;
		}
	}
	return 0;
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
	hid_t fapl = rf_takeover_fapl(), file = -1;
	struct fattrs fa;
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
	if (existing_attrs(file, path, m, &fa, err, errlen) != 0 ||
	    existing_differs(file, path, m, &fa, err, errlen) ||
	    existing_datasets(file, path, m, &fa, err, errlen))
		goto done;
	if (cross_out)
		*cross_out = fa.cross;
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
	if ((fapl = rf_takeover_fapl()) < 0) {
		sw_h5_fail(err, errlen, "%s: making the file access list failed", f->path);
		goto done;
	}
	f->file = H5Fopen(f->path, H5F_ACC_RDWR | H5F_ACC_SWMR_WRITE, fapl);
	if (f->file < 0) {
		sw_h5_fail(err, errlen, "%s: cannot open the run file for SWMR writing", f->path);
		goto done;
	}
	if (rf_fix_eoa(f->file, f->path, err, errlen) < 0)
		goto done;
	if (rf_open_datasets(f, err, errlen) < 0)
		goto done;
	if (f->ext[D_ENDED] > 0) {
		int8_t last = 0;
		if (rf_read_row(f, D_ENDED, f->ext[D_ENDED] - 1, H5T_NATIVE_INT8, &last) < 0) {
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

	rf_quiet();
	if (H5Fis_hdf5(path) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		snprintf(err, errlen, "%s: not an HDF5 file", path);
		return -1;
	}
	if ((fapl = rf_takeover_fapl()) < 0) {
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
	rc = rf_fix_eoa(file, path, err, errlen);
	if (H5Fclose(file) < 0 && rc == 0) {
		sw_h5_fail(err, errlen, "%s: closing the file failed", path);
		rc = -1;
	}
	return rc;
}

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
	rf_quiet();
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
		rf_runfile_free(f);
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
			rf_runfile_free(f);
			return SW_RUNFILE_OTHER;
		}
		if ((e = resume_file(f, meta, err, errlen)) < 0) {
			rf_runfile_free(f);
			return e;
		}
	} else if (errno == ENOENT) {
		f->cross = meta->cross_pairs != 0;
		if (rf_create_file(f, meta, chunk_steps, err, errlen) < 0)
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
	rf_runfile_free(f);
	return -1;
}

int
sw_runfile_probe(const char *dir, const sw_runmeta *m, char *err, size_t errlen)
{
	char name[SW_RUNFILE_NAME_MAX + 1], path[4096];
	struct stat sb;

	rf_quiet();
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
