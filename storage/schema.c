/*
 * schema.c: the run file's datasets (storage/LAYOUT.md): their names,
 * element types, shapes and axes, the one table every reader and the
 * writer use (sw_schema_*).
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

void
rf_quiet(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void
rf_spec(int d, struct dspec *s)
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
int
rf_shape_dims(enum shape sh, uint32_t layers, uint32_t heads, uint32_t rows, hsize_t *dims)
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

const char *
rf_shape_axes(int d, enum shape sh)
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

hid_t
rf_file_type(enum etype t)
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

hid_t
rf_mem_type(enum etype t)
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
			rf_spec(d, &s);
			tab[d].name = s.name;
			tab[d].dims = rf_shape_axes(d, s.shape);
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
