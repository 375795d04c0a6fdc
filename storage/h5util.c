/* h5util.c: small HDF5 helpers shared by the run-file writer and reader. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include <hdf5.h>

#include "storage/h5util.h"

int
sw_h5_attr_num(hid_t loc, const char *name, hid_t mtype, void *v)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
	int rc = -1;

	if (a >= 0 && H5Aread(a, mtype, v) >= 0)
		rc = 0;
	if (a >= 0)
		H5Aclose(a);
	return rc;
}

/* A string attribute, variable or fixed length, into buf (truncated). */
int
sw_h5_attr_str(hid_t loc, const char *name, char *buf, size_t len)
{
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT), ft = -1, mt = -1;
	int rc = -1;

	buf[0] = '\0';
	if (a < 0)
		return -1;
	if ((ft = H5Aget_type(a)) < 0 || H5Tget_class(ft) != H5T_STRING)
		goto done;
	if (H5Tis_variable_str(ft) > 0) {
		char *s = NULL;
		/* HDF5 converts no string between character sets */
		mt = H5Tcopy(H5T_C_S1);
		if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 &&
		    H5Tset_cset(mt, H5Tget_cset(ft)) >= 0 &&
		    H5Aread(a, mt, &s) >= 0) {
			snprintf(buf, len, "%s", s ? s : "");
			H5free_memory(s);
			rc = 0;
		}
	} else {
		size_t sz = H5Tget_size(ft);
		char *s = calloc(1, sz + 1);
		mt = H5Tcopy(ft);
		if (s && mt >= 0 && H5Aread(a, mt, s) >= 0) {
			snprintf(buf, len, "%s", s);
			rc = 0;
		}
		free(s);
	}
done:
	if (mt >= 0)
		H5Tclose(mt);
	if (ft >= 0)
		H5Tclose(ft);
	H5Aclose(a);
	return rc;
}


/* what the last sw_h5_fail of this thread saw: a metadata checksum failed */
static _Thread_local int checksum_failed;

static herr_t
innermost(unsigned n, const H5E_error2_t *e, void *data)
{
	char *detail = data;

	/* walked upward, entry 0 is where HDF5 first saw the problem */
	if (n == 0 && e->desc)
		snprintf(detail, 200, "%s", e->desc);
	/* HDF5 1.10 has no error code of its own for it: H5E_CANTLOAD with
	 * "incorrect metadata checksum ..." (H5C__load_entry, H5F_block_read) */
	if (e->desc && strstr(e->desc, "checksum"))
		checksum_failed = 1;
	return 0;
}

int
sw_h5_checksum_failed(void)
{
	int was = checksum_failed;
	checksum_failed = 0;
	return was;
}

void
sw_h5_fail(char *err, size_t errlen, const char *fmt, ...)
{
	char detail[200] = "";
	va_list ap;

	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, detail);
	H5Eclear2(H5E_DEFAULT);
	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	if (detail[0]) {
		size_t n = strlen(err);
		snprintf(err + n, errlen - n, " (HDF5: %s)", detail);
	}
}

hid_t
sw_h5_reader_fapl(void)
{
	hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0)
		return -1;
	if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0 ||
	    H5Pset_metadata_read_attempts(fapl, SW_H5_READ_ATTEMPTS) < 0) {
		H5Pclose(fapl);
		return -1;
	}
	return fapl;
}
