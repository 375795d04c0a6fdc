/*
 * tensor.h: reading (and, for demos and tests, writing) an attention tensor
 * held in one HDF5 dataset. Errors are returned as a negative value with a
 * message in the caller's buffer; nothing is printed.
 */
#ifndef SW_TENSOR_H
#define SW_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/swm.h"

#define SW_TENSOR_MAXRANK 8

typedef struct sw_tensor sw_tensor;

/*
 * Opens dataset dset of file path for reading. On success *out is a handle
 * the caller closes with sw_tensor_close() and 0 is returned; on failure
 * -1, *out is NULL, and err holds a message naming the problem.
 * Supported element types: IEEE float32, float64, float16 and bfloat16.
 */
int sw_tensor_open(const char *path, const char *dset, sw_tensor **out,
    char *err, size_t errlen);

/* Rank and dims (dims has SW_TENSOR_MAXRANK entries). */
int sw_tensor_rank(const sw_tensor *t);
const uint64_t *sw_tensor_dims(const sw_tensor *t);
swm_dtype sw_tensor_dtype(const sw_tensor *t);

/*
 * Reads the slab t[i, ...] (every axis but the first whole) into buf, which
 * holds the product of dims[1..] elements of the tensor's dtype, little
 * endian. Returns 0, or -1 with a message in err.
 */
int sw_tensor_read_slab(sw_tensor *t, uint64_t i, void *buf, char *err,
    size_t errlen);

/* Closes *t (NULL is fine) and sets it to NULL. */
void sw_tensor_close(sw_tensor **t);

/*
 * Creates (truncates) path and writes a float32 dataset dset of the given
 * dims from data. Returns 0, or -1 with a message in err.
 */
int sw_tensor_write_f32(const char *path, const char *dset, int rank,
    const uint64_t *dims, const float *data, char *err, size_t errlen);

#endif
