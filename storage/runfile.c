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

#include "storage/runfile_int.h"

_Static_assert(D__N <= 64, "reader.c holds 64 dataset handles");

void
rf_runfile_free(sw_runfile *f)
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

	rf_spec(d, &s);
	int rank = rf_shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
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
	/*
	 * The memory space has the row's own shape, not one flat axis: with
	 * the same shape in memory and file, HDF5 maps the selection to the
	 * chunks by hyperslab; a flat one made it visit every element
	 * (H5S_select_iterate), most of the writer's time (issue 30).
	 */
	if ((fsp = H5Dget_space(f->dset[d])) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    (msp = H5Screate_simple(rank, count, NULL)) >= 0 &&
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

	rf_spec(d, &s);
	int rank = rf_shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
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
int
rf_read_row(const sw_runfile *f, int d, hsize_t t, hid_t mtype, void *buf)
{
	struct dspec s;
	hsize_t dims[4], start[4] = { 0 }, count[4];
	hid_t fsp = -1, msp = -1;
	int rc = -1;

	rf_spec(d, &s);
	int rank = rf_shape_dims(s.shape, f->layers, f->heads, f->rows, dims);
	memcpy(count, dims, sizeof(dims));
	start[0] = t;
	count[0] = 1;
	/* the row's shape in memory too, as write_row */
	if ((fsp = H5Dget_space(f->dset[d])) >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    (msp = H5Screate_simple(rank, count, NULL)) >= 0 &&
	    H5Dread(f->dset[d], mtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = 0;
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
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

	rf_quiet();
	if (f->steps > 0) {
		hsize_t t = (hsize_t)f->steps - 1;
		for (int i = 0; i < SW_HEAD_FIELDS && rc == 0; i++)
			if (head[i])
				rc = rf_read_row(f, D_HEAD + i, t, H5T_NATIVE_DOUBLE, head[i]);
		if (rc == 0 && rows)
			rc = rf_read_row(f, D_ROWS, t, H5T_NATIVE_INT64, rows);
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
	rf_quiet();
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

	rf_quiet();
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
	    (n > 0 && (rf_read_row(f, D_LOST, n - 1, H5T_NATIVE_INT64, &out->lost) < 0 ||
	    rf_read_row(f, D_INCOMPLETE, n - 1, H5T_NATIVE_INT64, &out->incomplete) < 0))) {
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

	rf_quiet();
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
	rf_quiet();
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
	rf_quiet();
	if (f->ended)
		return 0;
	return append_ended(f, 1, err, errlen);
}

int
sw_runfile_put_sender(sw_runfile *f, int64_t row, const uint64_t *vals, char *err,
    size_t errlen)
{
	rf_quiet();
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
	rf_quiet();
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
	rf_runfile_free(f);
	*fp = NULL;
	return rc;
}
