/*
 * runfile_int.h: the run-file writer's own state (runfile.h is its
 * interface), shared by its files: schema.c (the datasets), runfile_create.c
 * (a new file), runfile_open.c (a file opened, checked, resumed) and
 * runfile.c (appends, flushes, ends).
 */
#ifndef SW_RUNFILE_INT_H
#define SW_RUNFILE_INT_H

#include <hdf5.h>

#include "storage/runfile.h"

_Static_assert(SWM_STATUS__N == 6, "rejected stores statuses 1..5");

#define CHUNK_CAP (1u << 20)	/* bytes: a chunk stays near 1 MiB */
#define CHUNK_STEPS_DEFAULT 64
#define NREASONS (SWM_STATUS__N - 1)	/* rejected reasons: status 1..5 */
#define SW_MODEL_ATTR_MAX 300	/* a model name attribute and its NUL */

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

/* schema.c: the datasets: names, types, shapes, axes */
hid_t rf_file_type(enum etype t);
hid_t rf_mem_type(enum etype t);
void rf_quiet(void);
const char *rf_shape_axes(int d, enum shape sh);
int rf_shape_dims(enum shape sh, uint32_t layers, uint32_t heads, uint32_t rows, hsize_t *dims);
void rf_spec(int d, struct dspec *s);

/* runfile_create.c: a new file: names, attributes, datasets, access lists */
int rf_attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype,
    const void *val);
int rf_create_file(sw_runfile *f, const sw_runmeta *m, size_t chunk_steps, char *err,
    size_t errlen);
int rf_fix_eoa(hid_t file, const char *path, char *err, size_t errlen);
int rf_open_datasets(sw_runfile *f, char *err, size_t errlen);
hid_t rf_takeover_fapl(void);
int rf_attr_u32(hid_t loc, const char *name, uint32_t v);

/* runfile_open.c: an existing file checked and resumed, or a new one; the run opened */

/* runfile.c: rows written and read, appends, flushes, ends */
void rf_runfile_free(sw_runfile *f);
int rf_read_row(const sw_runfile *f, int d, hsize_t t, hid_t mtype, void *buf);

#endif
