/* h5util.h: small HDF5 helpers shared by the run-file writer and reader. */
#ifndef SW_H5UTIL_H
#define SW_H5UTIL_H

#include <stddef.h>

#include <hdf5.h>

/* Reads attribute name of loc as mtype into v. 0, or -1. */
int sw_h5_attr_num(hid_t loc, const char *name, hid_t mtype, void *v);
/* A string attribute, variable or fixed length, into buf (truncated). 0 or -1. */
int sw_h5_attr_str(hid_t loc, const char *name, char *buf, size_t len);

/*
 * The file access list every SWMR reader opens with: the latest format,
 * and metadata read attempts bounded (SW_H5_READ_ATTEMPTS) so that a
 * checksum that keeps failing (a corrupt file) fails the read within about
 * a second, where HDF5's default retries with doubling sleeps for minutes.
 * -1 on failure (HDF5's error stack set).
 */
#define SW_H5_READ_ATTEMPTS 30	/* the sleeps double from 1 ns: 2^30 ns in all */
hid_t sw_h5_reader_fapl(void);

/*
 * Formats a message into err, with the innermost message of HDF5's error
 * stack appended when there is one. Call it right after the failing HDF5
 * call: the next API call clears the stack.
 */
void sw_h5_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Whether an HDF5 error stack that sw_h5_fail read in this thread since the
 * last call held a metadata checksum failure; the call clears it. A SWMR
 * reader of a file being written can see one honestly; one that stays
 * after a re-open, or in a file marked ended, is a corrupt file
 * (storage/reader.c, sinkwatch check).
 */
int sw_h5_checksum_failed(void);

#endif
