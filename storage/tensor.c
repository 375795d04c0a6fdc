/*
 * tensor.c: attention tensors in HDF5 datasets (see tensor.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>

#include "storage/tensor.h"

struct sw_tensor {
	hid_t file, dset, space, memtype;
	int rank;
	uint64_t dims[SW_TENSOR_MAXRANK];
	swm_dtype dtype;
};

static void
quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static const char *
class_name(H5T_class_t c)
{
	switch (c) {
	case H5T_INTEGER: return "integer";
	case H5T_STRING: return "string";
	case H5T_COMPOUND: return "compound";
	case H5T_ENUM: return "enum";
	case H5T_ARRAY: return "array";
	case H5T_VLEN: return "variable-length";
	case H5T_BITFIELD: return "bitfield";
	case H5T_OPAQUE: return "opaque";
	case H5T_REFERENCE: return "reference";
	case H5T_TIME: return "time";
	default: return "unknown";
	}
}

/* Maps the dataset's float type to a dtype and a memory type for reading. */
static int
pick_type(sw_tensor *t, hid_t ftype, char *err, size_t errlen)
{
	H5T_class_t cls = H5Tget_class(ftype);
	size_t size = H5Tget_size(ftype);

	if (cls != H5T_FLOAT) {
		snprintf(err, errlen, "unsupported element type: %s (%zu bytes); "
		    "expected float32, float16, bfloat16 or float64", class_name(cls), size);
		return -1;
	}
	if (size == 4 || size == 8) {
		size_t spos, epos, esize, mpos, msize;
		H5Tget_fields(ftype, &spos, &epos, &esize, &mpos, &msize);
		if ((size == 4 && (esize != 8 || msize != 23)) ||
		    (size == 8 && (esize != 11 || msize != 52))) {
			snprintf(err, errlen, "unsupported element type: a %zu-byte float that is "
			    "not IEEE (%zu exponent, %zu mantissa bits)", size, esize, msize);
			return -1;
		}
		t->dtype = size == 4 ? SWM_F32 : SWM_F64;
		t->memtype = H5Tcopy(size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE);
		return 0;
	}
	if (size == 2) {
		size_t spos, epos, esize, mpos, msize;
		H5Tget_fields(ftype, &spos, &epos, &esize, &mpos, &msize);
		if (spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
		    H5Tget_ebias(ftype) == 15)
			t->dtype = SWM_F16;
		else if (spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 &&
		    H5Tget_ebias(ftype) == 127)
			t->dtype = SWM_BF16;
		else {
			snprintf(err, errlen, "unsupported element type: a 2-byte float that is "
			    "neither float16 nor bfloat16");
			return -1;
		}
		/* read the bits as they are, in little-endian order */
		t->memtype = H5Tcopy(ftype);
		H5Tset_order(t->memtype, H5T_ORDER_LE);
		return 0;
	}
	snprintf(err, errlen, "unsupported element type: %zu-byte float", size);
	return -1;
}

int
sw_tensor_open(const char *path, const char *dset, sw_tensor **out, char *err,
    size_t errlen)
{
	struct stat sb;
	sw_tensor *t;

	*out = NULL;
	quiet();
	if (stat(path, &sb) != 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISDIR(sb.st_mode)) {
		snprintf(err, errlen, "%s: is a directory", path);
		return -1;
	}
	if (H5Fis_hdf5(path) <= 0) {
		snprintf(err, errlen, "%s: not an HDF5 file", path);
		return -1;
	}
	if (!(t = calloc(1, sizeof(*t)))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	t->dset = t->space = t->memtype = H5I_INVALID_HID;
	t->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (t->file < 0) {
		snprintf(err, errlen, "%s: cannot open the HDF5 file", path);
		goto fail;
	}
	hid_t obj = dset[0] ? H5Oopen(t->file, dset, H5P_DEFAULT) : H5I_INVALID_HID;
	if (obj < 0) {
		snprintf(err, errlen, "%s: no dataset '%s'", path, dset);
		goto fail;
	}
	if (H5Iget_type(obj) != H5I_DATASET) {
		H5Oclose(obj);
		snprintf(err, errlen, "%s: '%s' is not a dataset", path, dset);
		goto fail;
	}
	t->dset = obj;
	t->space = H5Dget_space(t->dset);
	int rank = H5Sget_simple_extent_ndims(t->space);
	if (rank < 0 || rank > SW_TENSOR_MAXRANK) {
		snprintf(err, errlen, "%s:%s: unsupported dataspace (rank %d)", path, dset, rank);
		goto fail;
	}
	hsize_t dims[SW_TENSOR_MAXRANK];
	H5Sget_simple_extent_dims(t->space, dims, NULL);
	t->rank = rank;
	for (int i = 0; i < rank; i++)
		t->dims[i] = dims[i];
	hid_t ftype = H5Dget_type(t->dset);
	char terr[200];
	int rc = pick_type(t, ftype, terr, sizeof(terr));
	H5Tclose(ftype);
	if (rc < 0) {
		snprintf(err, errlen, "%s:%s: %s", path, dset, terr);
		goto fail;
	}
	*out = t;
	return 0;
fail:
	sw_tensor_close(&t);
	return -1;
}

int sw_tensor_rank(const sw_tensor *t) { return t->rank; }
const uint64_t *sw_tensor_dims(const sw_tensor *t) { return t->dims; }
swm_dtype sw_tensor_dtype(const sw_tensor *t) { return t->dtype; }

int
sw_tensor_read_slab(sw_tensor *t, uint64_t i, void *buf, char *err, size_t errlen)
{
	hsize_t start[SW_TENSOR_MAXRANK] = { 0 }, count[SW_TENSOR_MAXRANK];
	int rc = -1;

	if (t->rank < 1 || i >= t->dims[0]) {
		snprintf(err, errlen, "slab %llu out of range", (unsigned long long)i);
		return -1;
	}
	for (int d = 0; d < t->rank; d++)
		count[d] = t->dims[d];
	start[0] = i;
	count[0] = 1;
	hid_t fsp = H5Scopy(t->space);
	hid_t msp = H5Screate_simple(t->rank, count, NULL);
	if (fsp >= 0 && msp >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    H5Dread(t->dset, t->memtype, msp, fsp, H5P_DEFAULT, buf) >= 0)
		rc = 0;
	else
		snprintf(err, errlen, "reading slab %llu failed", (unsigned long long)i);
	if (fsp >= 0)
		H5Sclose(fsp);
	if (msp >= 0)
		H5Sclose(msp);
	return rc;
}

void
sw_tensor_close(sw_tensor **tp)
{
	sw_tensor *t = *tp;
	if (!t)
		return;
	if (t->memtype >= 0)
		H5Tclose(t->memtype);
	if (t->space >= 0)
		H5Sclose(t->space);
	if (t->dset >= 0)
		H5Dclose(t->dset);
	if (t->file >= 0)
		H5Fclose(t->file);
	free(t);
	*tp = NULL;
}

int
sw_tensor_write_f32(const char *path, const char *dset, int rank,
    const uint64_t *dims, const float *data, char *err, size_t errlen)
{
	hsize_t hd[SW_TENSOR_MAXRANK];
	hid_t f = -1, sp = -1, d = -1;
	int rc = -1;

	quiet();
	if (rank < 1 || rank > SW_TENSOR_MAXRANK) {
		snprintf(err, errlen, "bad rank %d", rank);
		return -1;
	}
	for (int i = 0; i < rank; i++)
		hd[i] = dims[i];
	if ((f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
		snprintf(err, errlen, "%s: cannot create the HDF5 file", path);
		return -1;
	}
	if ((sp = H5Screate_simple(rank, hd, NULL)) >= 0 &&
	    (d = H5Dcreate2(f, dset, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
	    H5P_DEFAULT)) >= 0 &&
	    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0)
		rc = 0;
	else
		snprintf(err, errlen, "%s: writing dataset '%s' failed", path, dset);
	if (d >= 0)
		H5Dclose(d);
	if (sp >= 0)
		H5Sclose(sp);
	if (H5Fclose(f) < 0 && rc == 0) {
		snprintf(err, errlen, "%s: closing the file failed", path);
		rc = -1;
	}
	return rc;
}
