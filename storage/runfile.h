/*
 * runfile.h: one HDF5 file per run, appended step by step while readers
 * tail it with SWMR (single writer, multiple readers). The layout is
 * documented in storage/LAYOUT.md.
 *
 * The writer is not thread-safe: one thread owns all of a process's run
 * files (HDF5 itself is built without thread safety on Debian).
 */
#ifndef SW_RUNFILE_H
#define SW_RUNFILE_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/swm.h"

#define SW_RUNFILE_VERSION 3	/* layout version, an attribute of the file */
#define SW_RUNFILE_VERSION_MIN 1	/* the oldest layout the readers read */

/* Per-head series, each [T, layers, heads] float64, in this order. */
enum sw_head_field {
	SW_F_SINK_MASS, SW_F_CONTENT_MASS, SW_F_ENTROPY, SW_F_SINK_ENTROPY,
	SW_F_CONTENT_ENTROPY, SW_F_CONTENT_TERM, SW_F_CONTENT_ENTROPY_MW,
	SW_F_SINK_BALANCE, SW_F_DH, SW_F_DH_SINK, SW_F_DH_CONTENT,
	SW_F_DRIFT_SINK, SW_F_DRIFT_CONTENT,
	SW_HEAD_FIELDS
};
/* Per-layer head-pair series, each [T, layers, heads, heads] float64. */
enum sw_pair_field {
	SW_P_COSINE_KEEP, SW_P_COSINE_DROP, SW_P_JS_KEEP, SW_P_JS_DROP,
	SW_P_PAIR_SINK, SW_P_PAIR_CONTENT,
	SW_PAIR_FIELDS
};
/* Per-layer flip rates, [T, layers, 3] float64: cosine, js, entropy. */
#define SW_FLIP_FIELDS 3

/* Per-row statistics of fixed probes, each [T, layers, heads, rows] float64
 * (layout 2): s, w, H, hb, Hc of METRICS.md §1; with row_status (uint8). */
#define SW_ROWSTAT_FIELDS 5
extern const char *const sw_rowstat_field_names[SW_ROWSTAT_FIELDS];

/*
 * Cross-layer head-pair series (layout 3, files made with the daemon's
 * cross_layer_pairs): each [T, L*H, L*H] float64, head (l, h) at index
 * l * H + h; js_keep and js_drop of §5 between every two heads of the
 * model over the pair rows of the step.
 */
enum sw_xpair_field { SW_X_JS_KEEP, SW_X_JS_DROP, SW_XPAIR_FIELDS };
extern const char *const sw_xpair_field_names[SW_XPAIR_FIELDS];

/*
 * The schema: every dataset of a run file, as LAYOUT.md's table lists it
 * (tests/e2e/layout_doc.py holds the two together). The writer creates from it
 * and the reader reads by it.
 */
typedef struct sw_dataset_info {
	const char *name;
	const char *dims;	/* its dims attribute: "step,layer,head", "mark", "resume" */
	const char *type;	/* "float64", "int64", "uint64", "uint8", "int8" */
	int version;		/* the layout version that added it */
	int row_stats;		/* only in files with per-row statistics */
	int cross;		/* only in files with cross-layer pairs */
} sw_dataset_info;
size_t sw_schema_count(void);
const sw_dataset_info *sw_schema_at(size_t i);	/* NULL past the end */
int sw_schema_find(const char *name);		/* its index, or -1 */

/*
 * The sender table (layout 3), /senders [S, SW_SENDER_FIELDS] uint64: one
 * row per sender (incarnation and rank, PROTOCOL.md 7b), its counters over
 * every daemon session, in this order (the file's sender_fields attribute).
 */
enum sw_sender_field {
	SW_S_INC, SW_S_RANK, SW_S_SENDERS, SW_S_MESSAGES, SW_S_LOST, SW_S_DUPLICATES,
	SW_S_OVERLAPS, SW_S_MISMATCHES, SW_S_DISAGREE, SW_S_UNCOMPARED, SW_S_MISSING,
	SW_S_AFTER_END, SW_S_SEQ_NEXT, SW_S_ENDED,
	/*
	 * The rest of each sender's account (files made before have the 14
	 * fields above only; readers give 0 for the others and say how many
	 * the file has): messages = stored + duplicates + overlaps + mismatches
	 * + after_end + budget + late + senders_mismatch + nomem + stopping +
	 * open_steps + write_error + head_missing + ended (PROTOCOL.md 7a).
	 */
	SW_S_STORED, SW_S_BUDGET, SW_S_LATE, SW_S_SENDERS_MISMATCH, SW_S_NOMEM,
	SW_S_STOPPING, SW_S_OPEN_STEPS, SW_S_WRITE_ERROR, SW_S_HEAD_MISSING,
	SW_SENDER_FIELDS
};
#define SW_SENDER_FIELDS_OLD 14	/* the table of files made before the account */
#define SW_SENDER_FIELD_LIST "inc,rank,senders,messages,lost,duplicates,overlaps," \
	"mismatches,disagree,uncompared,missing,after_end,seq_next,ended,stored,budget," \
	"late,senders_mismatch,nomem,stopping,open_steps,write_error,head_missing"
extern const char *const sw_sender_field_names[SW_SENDER_FIELDS];

/* Dataset names, as LAYOUT.md lists them. */
extern const char *const sw_head_field_names[SW_HEAD_FIELDS];
extern const char *const sw_pair_field_names[SW_PAIR_FIELDS];

/* What a run file records about its run (attributes, written at creation). */
typedef struct sw_runmeta {
	char run[129];		/* run id as sent */
	char model[257];
	uint64_t params;
	uint32_t layers, heads, sink;
	int fixed_probe;
	const char *split_form;	/* "paired" or "aggregate" */
	const char *kind;	/* "probs", "logits" or "rowstats" */
	uint32_t rows, keys;	/* probe shape of the first snapshot */
	const char *dtype;	/* "f32", "f16", "bf16", "f64"; NULL: not checked (v1) */
	uint32_t generation;	/* 1: NAME.h5; g > 1: NAME@g.h5 (the id re-used, LAYOUT.md) */
	int row_stats;		/* per-row statistics stored (fixed probes, layout 2) */
	int cross_pairs;	/* cross-layer pair datasets (a new file's setting; an
				 * existing file keeps its own: sw_runfile_cross_pairs) */
	int version;		/* layout version (reader: the file's; writer: ignored) */
} sw_runmeta;

/* One committed step: arrays the caller owns, laid out C order. */
typedef struct sw_step {
	int64_t step;
	double time;			/* when the daemon completed it, Unix s */
	const double *head[SW_HEAD_FIELDS];	/* each [layers * heads] */
	const int64_t *rows;		/* [layers * heads] valid rows */
	const int64_t *rejected;	/* [layers * heads * SWM_STATUS__N] */
	const double *pair[SW_PAIR_FIELDS];	/* each [layers * heads * heads], may be NULL;
					 * a missing layer's part is never read */
	const double *flip;		/* [layers * 3], may be NULL */
	const uint8_t *missing;		/* [layers]: 1 where the layer never arrived */
	/* cumulative run counters as of this step */
	int64_t lost;			/* messages missing by sequence number */
	int64_t incomplete;		/* steps written with missing layers */
	/* layout 2 */
	uint64_t inc;			/* the sender incarnation of the step */
	int64_t inc_lost;		/* that incarnation's lost messages, as of this row */
	uint64_t seq_next;		/* the next seq expected of it when the row was made */
	int64_t prev_row;		/* the row dH and drift were taken against, -1 none */
	const swm_row *const *row_stats;	/* [layers] of [heads * rows], NULL where
					 * missing; NULL: none (files without row stats) */
	const uint8_t *row_use;		/* [rows]: SW_USE_PAIR | SW_USE_DRIFT, NULL zeros */
	/* layout 3 */
	const int32_t *missing_rank;	/* [layers * heads]: -1 present, else the rank
					 * that should have sent the head (-2 none
					 * known); NULL: every head present */
	const double *xpair[SW_XPAIR_FIELDS];	/* each [(layers * heads)^2], NULL NaN;
					 * stored only in cross_layer_pairs files */
} sw_step;

typedef struct sw_runfile_opts {
	size_t chunk_steps;	/* steps per chunk along T (default 64) */
} sw_runfile_opts;

typedef struct sw_runfile sw_runfile;

/*
 * The file name for a run id: safe (letters, digits, '-', '_', '.' kept,
 * every other byte %XX-escaped, so distinct ids never collide and no id can
 * traverse a path), plus ".h5". A leading '.' is escaped too, so no name is
 * hidden or "." / "..". A name never exceeds SW_RUNFILE_NAME_MAX bytes (a
 * file name's limit, NAME_MAX): an id whose escaped form would (over ~63
 * escaped bytes) becomes its first ~235 escaped bytes, '~' and 16 hex
 * digits of a 64-bit hash of the whole id; '~' never appears otherwise, and
 * sw_runfile_open refuses a file whose run attribute is another id.
 * Returns the length written (without the NUL), or -1 if run is empty or
 * len is too small (SW_RUNFILE_NAME_MAX + 1 bytes always suffice).
 */
#define SW_RUNFILE_NAME_MAX 255
int sw_runfile_name(const char *run, char *buf, size_t len);

/*
 * The same for generation g of the run id (g > 1: "NAME@g.h5"; '@' is
 * always escaped in NAME, so no other id's name looks like it). Every
 * generation's name, and the temporary ".NAME@g.h5.tmp" it is built under,
 * fit NAME_MAX. Returns the length or -1.
 */
int sw_runfile_name_gen(const char *run, uint32_t g, char *buf, size_t len);

/*
 * New files are built in a directory DIR/.swtmp.XXXXXX of their own and
 * linked into place; sw_runfile_clean_tmp removes what a crash left of
 * those (their entries unlinked, never followed). Returns the directories
 * removed, or -1 if dir cannot be read. Only while no writer creates files.
 */
#define SW_TMPDIR_PREFIX ".swtmp."
int sw_runfile_clean_tmp(const char *dir);

/* sw_runfile_open's return when the file exists and holds another run, a
 * different shape, kind, dtype or probe, or an older layout: the caller
 * tries the next generation. */
#define SW_RUNFILE_OTHER (-2)

/*
 * The run lock (runlock.c): a writer holds it on a run id, every
 * generation of its name, while it writes; it is taken in
 * DIR/SW_RUNLOCK_FILE and dropped by the kernel when the process dies.
 * sw_runlock_take returns 0 and *out, SW_RUNFILE_LOCKED when another
 * process holds it (err says so), or -1 with err (the lock file cannot be
 * made). The same process may take it again (a count); each handle is
 * released with sw_runlock_release, which sets *l to NULL.
 */
#define SW_RUNFILE_LOCKED (-3)
#define SW_RUNLOCK_FILE ".sinkwatchd.lock"
typedef struct sw_runlock sw_runlock;
int sw_runlock_take(const char *dir, const char *run, sw_runlock **out, char *err,
    size_t errlen);
void sw_runlock_release(sw_runlock **l);
/* The byte of the lock file that stands for the run (for messages, tests). */
uint64_t sw_runlock_offset(const char *run);

/*
 * The data directory's lock (dirlock.c), an flock() of DIR/SW_RUNLOCK_FILE:
 * a daemon holds it shared for as long as it runs, exclusive for a moment
 * when it is alone there (and clears what a crash left); sinkwatch check
 * holds it exclusive while it clears a file's writer flags, so that no
 * daemon runs, nor starts, meanwhile. sw_dirlock_open opens (create:
 * makes) the lock file: the descriptor, or -1 with err ("" and errno
 * ENOENT: there is none, no daemon ever ran there). sw_dirlock_exclusive
 * takes it exclusive without waiting: 0, 1 when another holds it, -1 with
 * err. sw_dirlock_shared takes it shared, waiting up to 3 s for an
 * exclusive holder: 0, or -1 with err. dir is named in the messages.
 */
int sw_dirlock_open(const char *dir, int create, char *err, size_t errlen);
int sw_dirlock_exclusive(int fd, const char *dir, char *err, size_t errlen);
int sw_dirlock_shared(int fd, const char *dir, char *err, size_t errlen);

/*
 * Opens the run's file in dir for appending: creates it (latest format,
 * every dataset created, then SWMR writing started and the datasets
 * reopened) or resumes an existing one, also one left by a writer that was
 * killed (the file then still carries the SWMR writer flag; HDF5's
 * "clear status flags" file access option opens it). A resumed file must
 * have the same run id, layers, heads and sink (and layout version), else
 * -1 with a message and the file untouched (it is checked read-only first).
 * The other attributes stay as the file's creation wrote them. Resuming
 * opens without HDF5's file lock, so that dashboards may go on tailing:
 * the run lock (sw_runlock_take, held until sw_runfile_close) makes sure
 * one process at most writes a run.
 * Returns 0 and *out, SW_RUNFILE_LOCKED (another process writes the run,
 * nothing opened), or -1 with a message in err and *out NULL.
 */
int sw_runfile_open(const char *dir, const sw_runmeta *meta,
    const sw_runfile_opts *opts, sw_runfile **out, char *err, size_t errlen);

/*
 * Whether generation meta->generation of the run has a file that holds
 * this run (checked read-only, nothing written): 0 it does, 1 no file,
 * SW_RUNFILE_OTHER it holds something else, -1 it cannot be read (err).
 */
int sw_runfile_probe(const char *dir, const sw_runmeta *meta, char *err, size_t errlen);

/* Whether the file's last end mark says the run ended. */
int sw_runfile_is_ended(const sw_runfile *f);

/*
 * The bytes an open run file holds for its run's shape (the NaN and
 * repacking buffers sw_runfile_open allocates), so that a daemon can refuse
 * a shape its budget cannot hold before opening anything.
 */
size_t sw_runfile_state_bytes(uint32_t layers, uint32_t heads, uint32_t rows, int row_stats,
    int cross);

/* Steps stored so far (after a resume, what the file already had). */
int64_t sw_runfile_steps(const sw_runfile *f);
/* 1 when the open file has the cross-layer pair datasets (its own setting). */
int sw_runfile_cross_pairs(const sw_runfile *f);

/* The file's path (dir/name), owned by f. */
const char *sw_runfile_path(const sw_runfile *f);

/*
 * The per-head values of the last stored step ([layers * heads] each, NaN
 * if no step is stored), for the split against the next one after a
 * resume. NULL entries of head, and rows NULL, are skipped. Returns 0, or
 * -1 if nothing is stored (rows then 0).
 */
int sw_runfile_last(const sw_runfile *f, double *head[SW_HEAD_FIELDS],
    int64_t *rows);

/*
 * Appends one step: every dataset is extended and written first, /step
 * last, so a SWMR reader that sizes its reads by /step never sees a half
 * step. A NULL head field is stored as NaN like a NULL pair, flip or
 * xpair, and so are the pair matrices of a layer that missing marks: those
 * are never written, the datasets' fill value is NaN, so that a step's
 * work follows the layers sent. rows, rejected and missing must be given.
 * Does not flush. Returns 0, or -1
 * with a message: a write that fails midway leaves the committed steps as
 * they were (/step not extended), and the next append writes that step
 * again.
 */
int sw_runfile_append(sw_runfile *f, const sw_step *s, char *err, size_t errlen);

/* One H5Fflush of the whole file (never one per dataset). 0 or -1. */
int sw_runfile_flush(sw_runfile *f, char *err, size_t errlen);

/*
 * Records that the run ended: appends 1 to /ended (see LAYOUT.md), nothing
 * if the run is already marked. If a resumed run that was marked ended
 * appends again, a 0 is appended to /ended first. 0 or -1.
 */
int sw_runfile_mark_ended(sw_runfile *f, char *err, size_t errlen);

/*
 * The sender table: writes row `row` (an existing one, or the next one,
 * row == the table's length) of SW_SENDER_FIELDS values. 0 or -1.
 */
int sw_runfile_put_sender(sw_runfile *f, int64_t row, const uint64_t *vals, char *err,
    size_t errlen);
/* Reads the whole table into a malloc'd [rows * SW_SENDER_FIELDS]; its rows or -1. */
int64_t sw_runfile_senders(const sw_runfile *f, uint64_t **vals, char *err, size_t errlen);

/*
 * Records that incarnation inc resumes from step `from`: every row of an
 * earlier incarnation with a step after `from` is superseded (LAYOUT.md,
 * "Rows, incarnations and supersession"). Does not flush. 0 or -1.
 */
int sw_runfile_add_resume(sw_runfile *f, uint64_t inc, int64_t from, char *err,
    size_t errlen);

/*
 * What the file already holds, for a writer that resumes it: the step,
 * incarnation of every committed row, and the resume records.
 * Arrays are malloc'd (the caller frees them); counts in *nrows, *nres.
 * The last row's lost and incomplete counters in *lost, *incomplete.
 */
typedef struct sw_rows {
	int64_t n;
	int64_t *step;
	uint64_t *inc;
	int64_t *inc_lost;	/* the row's incarnation's lost, as of it (writer only) */
	int64_t *stored;	/* messages the row holds: layers not missing (writer only) */
	int64_t nres;
	uint64_t *res_inc;
	int64_t *res_step;
	int64_t lost, incomplete;
} sw_rows;
int sw_runfile_rows(const sw_runfile *f, sw_rows *out, char *err, size_t errlen);
void sw_rows_free(sw_rows *r);

/* Flushes and closes *f (NULL is fine), sets it NULL. 0 or -1. */
int sw_runfile_close(sw_runfile **f);

/*
 * Whether the superblock of the HDF5 file at path has its writer flags set
 * (a writer has it open, or was killed: every open but a SWMR read then
 * fails with "file is already open for write"): 1 set, 0 clear, -1 with a
 * message if the file cannot be read or holds no HDF5 superblock.
 */
int sw_runfile_writer_flags(const char *path, char *err, size_t errlen);

/*
 * What a writer resuming a killed writer's file does to it, without
 * writing a step: zeroes the superblock's writer flags (h5clear -s) and
 * moves the end of allocation to the end of the file if the file is longer
 * (h5clear --increment=0), so that any HDF5 reader opens it again. Opens
 * without HDF5's file lock, like a resume: the caller makes sure no process
 * writes the file (no sinkwatchd holds its data directory's lock).
 * Returns 0, or -1 with a message in err.
 */
int sw_runfile_clear(const char *path, char *err, size_t errlen);

/* ---- reading, with SWMR, while a writer appends --------------------------- */

typedef struct sw_reader sw_reader;

/*
 * Opens a run file for SWMR reading, from a process that does not write it;
 * one reader per file in a process (HDF5 shares an open file, and two
 * handles on one dataset read wrong chunks after a refresh in 1.10.8).
 * Returns 0 and *out, or -1 with err.
 * The metadata attributes are in *meta if meta is not NULL (split_form and
 * kind then point into the reader and live as long as it does).
 */
int sw_reader_open(const char *path, sw_reader **out, sw_runmeta *meta,
    char *err, size_t errlen);

/*
 * Refreshes /step and returns the number of committed steps (>= 0), or -1
 * with err. Only steps below this count may be read.
 */
int64_t sw_reader_refresh(sw_reader *r, char *err, size_t errlen);

/*
 * Reads committed steps [t0, t1) of dataset name (a head field, pair field,
 * "flip_rate", "rows", "rejected", "step", "time", "lost", "incomplete",
 * "missing") into buf, converted to double, C order [t1 - t0, ...];
 * t1 <= the count of the last sw_reader_refresh. The dataset is refreshed
 * first; one still shorter than t1 (the writer is in the middle of a flush:
 * HDF5 writes the datasets' headers one by one) is refreshed again for up
 * to about 100 ms. Returns the number of doubles written, or -1 with err.
 */
int64_t sw_reader_read(sw_reader *r, const char *name, int64_t t0, int64_t t1,
    double *buf, size_t buflen, char *err, size_t errlen);

/*
 * The shape of one step of series name (what sw_reader_read gives per
 * step): its dims after the step into dims[0 .. 3), their count returned
 * (0 for a scalar per step), or -1 with err (no such series in the file).
 */
int sw_reader_shape(sw_reader *r, const char *name, int64_t *dims, char *err, size_t errlen);

/*
 * Whether the run was marked ended (the last /ended entry is 1), after a
 * refresh of /ended: 1 or 0, -1 on a read error.
 */
int sw_reader_ended(sw_reader *r);
/*
 * The sender table (layout 3; 0 rows before): a malloc'd [rows *
 * SW_SENDER_FIELDS] in *vals (NULL for none), rows returned, -1 on error.
 * *fields (if not NULL): how many of the fields the file has (an older
 * file's table is narrower, SW_SENDER_FIELDS_OLD: the others read 0).
 */
int64_t sw_reader_senders(sw_reader *r, uint64_t **vals, size_t *fields, char *err,
    size_t errlen);

void sw_reader_close(sw_reader **r);

/*
 * The rows, incarnations and resume records of the committed steps (as
 * sw_runfile_rows; a layout 1 file has incarnation 0 for every row and no
 * resume record). -1 with err.
 */
int sw_reader_rows(sw_reader *r, int64_t T, sw_rows *out, char *err, size_t errlen);

/*
 * Reads the per-row statistics of committed row t (layout 2, row_stats):
 * s, w, hb, Hc and status of every row of every head, into out[layers *
 * heads * rows] (status SW_ROW_ABSENT where the layer was missing). -1 with
 * err (also when the file has none).
 */
#define SW_ROW_ABSENT 255

/* Bits of /row_use: the probe rows that got pair and drift work. */
#define SW_USE_PAIR 1
#define SW_USE_DRIFT 2
int sw_reader_row_stats(sw_reader *r, int64_t t, swm_row *out, size_t n,
    char *err, size_t errlen);

/*
 * The same for committed rows t0 .. t1 - 1 at once (one read of each
 * dataset: a reader of many steps reads them in blocks), into out[(t1 -
 * t0) * layers * heads * rows], row t0 first.
 */
int sw_reader_row_stats_range(sw_reader *r, int64_t t0, int64_t t1, swm_row *out, size_t n,
    char *err, size_t errlen);

/* ---- the view: what a run is, whatever the order its rows arrived in ---- */

/*
 * The stored steps in step order, each with its winning row: of the rows
 * of a step, those of incarnations that a later incarnation's resume
 * record supersedes (a resume from S supersedes earlier incarnations'
 * steps > S) drop out; of the rest the newest incarnation wins, and of one
 * incarnation the last row. Steps whose rows are all superseded are not in
 * the view. A pure function of the rows (no I/O).
 */
typedef struct sw_view {
	int64_t n;		/* steps in the view */
	int64_t *step;		/* [n] ascending */
	int64_t *row;		/* [n] the winning row of each */
	int64_t superseded;	/* rows not in the view */
	/* segments: maximal runs of consecutive view steps of one incarnation */
	int64_t nseg;
	struct sw_segment {
		uint64_t inc;
		int64_t first_step, last_step, steps;
	} *seg;
} sw_view;
int sw_view_build(const sw_rows *rows, sw_view *out);
void sw_view_free(sw_view *v);

#endif
