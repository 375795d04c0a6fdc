/*
 * cmd_check.c: `sinkwatch check`: is a run file whole, and can every HDF5
 * reader open it? After sinkwatchd is killed (SIGKILL, a crash) a run file
 * keeps the SWMR writer flags in its superblock, and h5ls, h5dump and a
 * plain h5py open refuse it until they are cleared (h5clear -s). check
 * reports what the file holds by the commit protocol of storage/LAYOUT.md
 * and clears the flags when no daemon writes the file.
 *
 * Exit status: 0 when every file is whole and closed (any reader opens it),
 * 1 when a file is unreadable or inconsistent or its flags stay set, 2 on
 * a usage error. Rows beyond /step are what a crash (or an append in
 * progress) leaves: never part of the run, overwritten by the next writer,
 * so they are reported and do not make a file damaged.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "storage/h5util.h"
#include "storage/runfile.h"
#include "report/json.h"
#include "report/runagg.h"
#include "tools/tools.h"

#define REFRESH_TRIES 100	/* about 100 ms of 1 ms waits, as the reader */

/* A dataset indexed by step whose extent is not /step's. */
struct odd {
	char name[128];
	int64_t rows;		/* its extent minus /step's */
};

struct oddlist {
	struct odd *v;
	size_t n, cap;
};

#define OPEN_MAX 64	/* ranks named as not ended, at most */

struct filecheck {
	const char *path;
	char err[512];		/* why the file could not be read */
	int readable;
	int32_t layout;
	char run[129];
	int64_t steps, first, last;	/* committed steps, least/greatest step value */
	int ended;
	long long beyond_eoa;	/* bytes a killed writer left past the end of allocation */
	int flags;		/* writer flags set when check came */
	int daemon;		/* a sinkwatchd holds the data directory */
	int cleared;
	int flags_now;		/* after clearing: what any reader now meets */
	char clear_err[512];
	struct oddlist over;	/* rows beyond /step: left by a crash */
	struct oddlist under;	/* shorter than /step: damage */
	int has_view;		/* the view below could be read */
	char bad[512];		/* the readers refuse it (its claims do not hold), or "" */
	int corrupt;		/* a metadata checksum failed twice, or in an ended file */
	sw_view view;		/* the steps the rows stand for (LAYOUT.md) */
	int64_t nopen;		/* ranks that never sent their end (PROTOCOL.md 7b) */
	sw_open_rank open[OPEN_MAX];	/* the first OPEN_MAX of them */
};

static const char hint[] = "to read a run file while sinkwatchd writes it: "
    "h5py.File(FILE, \"r\", libver=\"latest\", swmr=True), refresh step and size "
    "every read by it (README.md), or sinkwatch tail FILE";

static int
odd_add(struct oddlist *l, const char *name, int64_t rows)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		struct odd *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	snprintf(l->v[l->n].name, sizeof(l->v[l->n].name), "%s", name);
	l->v[l->n++].rows = rows;
	return 0;
}

/* Extent of the first axis, or -1. */
static int64_t
extent0(hid_t ds)
{
	hsize_t dims[H5S_MAX_RANK];
	hid_t sp = H5Dget_space(ds);
	int rank = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;

	if (sp >= 0)
		H5Sclose(sp);
	return rank < 1 ? -1 : (int64_t)dims[0];
}

/* Element i of a one-dimensional dataset, as int64. 0 or -1. */
static int
read_at(hid_t ds, int64_t i, int64_t *v)
{
	hsize_t start = (hsize_t)i, count = 1;
	hid_t fsp = H5Dget_space(ds), msp = H5Screate_simple(1, &count, NULL);
	int rc = -1;

	if (fsp >= 0 && msp >= 0 &&
	    H5Sselect_hyperslab(fsp, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
	    H5Dread(ds, H5T_NATIVE_INT64, msp, fsp, H5P_DEFAULT, v) >= 0)
		rc = 0;
	if (msp >= 0)
		H5Sclose(msp);
	if (fsp >= 0)
		H5Sclose(fsp);
	return rc;
}

/* Whether a dims attribute names step as the first axis. */
static int
step_indexed(const char *dims)
{
	return !strncmp(dims, "step", 4) && (dims[4] == '\0' || dims[4] == ',');
}

/*
 * A dataset shorter than /step in a file a writer may still be flushing:
 * one flush writes the datasets' headers one after another, so refresh it
 * for a while before calling it short (LAYOUT.md, commit protocol 3).
 */
static int64_t
settled_extent(hid_t ds, int64_t steps)
{
	int64_t n = extent0(ds);

	for (int i = 0; n >= 0 && n < steps && i < REFRESH_TRIES; i++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
		if (H5Drefresh(ds) < 0)
			break;
		n = extent0(ds);
	}
	return n;
}

/*
 * Each dataset of the root group whose first axis is step, against /step.
 * The list is not hard-coded: a later layout adds datasets, and the dims
 * attribute says which are indexed by step.
 */
static herr_t
visit(hid_t root, const char *name, const H5L_info_t *info, void *data)
{
	struct filecheck *fc = data;
	H5O_info_t oi;
	char dims[256];
	hid_t ds;
	int64_t n;

	if (info->type != H5L_TYPE_HARD || !strcmp(name, "step"))
		return 0;
	/* an object no reader can open is damage, never skipped */
	if (H5Oget_info_by_name2(root, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: reading /%s failed", fc->path, name);
		return -1;
	}
	if (oi.type != H5O_TYPE_DATASET)
		return 0;
	if ((ds = H5Dopen2(root, name, H5P_DEFAULT)) < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: opening /%s failed", fc->path, name);
		return -1;
	}
	if (sw_h5_attr_str(ds, "dims", dims, sizeof(dims)) == 0 && step_indexed(dims) &&
	    (n = settled_extent(ds, fc->steps)) >= 0 && n != fc->steps &&
	    odd_add(n > fc->steps ? &fc->over : &fc->under, name, n - fc->steps) < 0) {
		H5Dclose(ds);
		return -1;
	}
	H5Dclose(ds);
	return 0;
}

/* The last /ended entry is 1. */
static int
read_ended(hid_t file, struct filecheck *fc)
{
	hid_t ds = H5Dopen2(file, "ended", H5P_DEFAULT);
	int64_t n, last = 0;
	int rc = -1;

	if (ds < 0)
		return -1;
	if ((n = extent0(ds)) >= 0 && (n == 0 || read_at(ds, n - 1, &last) == 0)) {
		fc->ended = n > 0 && last == 1;
		rc = 0;
	}
	H5Dclose(ds);
	return rc;
}

/* What the committed part of the file is: /step's extent and values. */
static int
read_steps(hid_t file, struct filecheck *fc)
{
	hid_t ds = H5Dopen2(file, "step", H5P_DEFAULT);
	int rc = -1;

	if (ds < 0)
		return -1;
	fc->steps = extent0(ds);
	int64_t *v = fc->steps > 0 ? malloc((size_t)fc->steps * sizeof(*v)) : NULL;
	if (fc->steps == 0)
		rc = 0;
	else if (v && H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0) {
		/* rows arrive in any order (a resume, late layers): the least
		 * and the greatest step, not the first and last row's */
		fc->first = fc->last = v[0];
		for (int64_t k = 1; k < fc->steps; k++) {
			fc->first = v[k] < fc->first ? v[k] : fc->first;
			fc->last = v[k] > fc->last ? v[k] : fc->last;
		}
		rc = 0;
	}
	free(v);
	H5Dclose(ds);
	return rc;
}

/*
 * Whether another process has the file open through HDF5 for plain
 * (not SWMR) writing: it holds HDF5's exclusive flock on the file, where
 * SWMR readers hold shared ones and a SWMR writer none. Clearing opens
 * without HDF5's lock, so it asks here. Returns 1 if held, with a message;
 * 0 if not (then *fd holds our shared lock until the clearing is done); -1
 * with a message.
 */
static int
file_lock(const char *path, int *fd, char *err, size_t errlen)
{
	if ((*fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	/* daemons hold it shared (several may share a directory): ours is
	 * exclusive, so that none runs, nor starts, while we clear */
	if (flock(*fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	int held = errno == EWOULDBLOCK;
	if (held)
		snprintf(err, errlen, "%s: another process has it open for writing "
		    "(it holds HDF5's lock on the file); not clearing", path);
	else
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	close(*fd);
	*fd = -1;
	return held ? 1 : -1;
}

/* Replaces fc->err with file_lock's message if another process locks the file. */
static void
unlocked_or_say(struct filecheck *fc)
{
	char msg[sizeof(fc->err)];
	int fd;

	if (file_lock(fc->path, &fd, msg, sizeof(msg)) == 1)
		memcpy(fc->err, msg, sizeof(msg));
	if (fd >= 0)
		close(fd);
}

/*
 * Reads the file with SWMR, which accepts the writer flags (and follows a
 * writer that is still appending). Closed again before any clearing: HDF5
 * would hand a read-write open in this process the same open file.
 */
static int
inspect_once(struct filecheck *fc)
{
	hid_t fapl = -1, file = -1;
	haddr_t eoa;
	struct stat sb;
	int rc = -1;

	if (H5Fis_hdf5(fc->path) <= 0) {
		H5Eclear2(H5E_DEFAULT);
		snprintf(fc->err, sizeof(fc->err), "%s: not an HDF5 file", fc->path);
		return -1;
	}
	if ((fapl = sw_h5_reader_fapl()) < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: making the file access list failed",
		    fc->path);
		goto done;
	}
	file = H5Fopen(fc->path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
	if (file < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: cannot open it for SWMR reading",
		    fc->path);
		/* a plain writer's lock refuses the open: say that, not errno 11 */
		unlocked_or_say(fc);
		goto done;
	}
	htri_t has_v = H5Aexists(file, "layout_version");
	htri_t has_r = has_v > 0 ? H5Aexists(file, "run") : has_v;
	if (has_r < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: reading the attributes failed", fc->path);
		goto done;
	}
	if (!has_r) {
		snprintf(fc->err, sizeof(fc->err), "%s: not a sinkwatch run file "
		    "(no layout_version or run attribute)", fc->path);
		goto done;
	}
	if (sw_h5_attr_num(file, "layout_version", H5T_NATIVE_INT32, &fc->layout) < 0 ||
	    sw_h5_attr_str(file, "run", fc->run, sizeof(fc->run)) < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: reading the attributes layout_version "
		    "and run failed", fc->path);
		goto done;
	}
	if (read_steps(file, fc) < 0 || read_ended(file, fc) < 0) {
		sw_h5_fail(fc->err, sizeof(fc->err), "%s: /step or /ended missing or unreadable",
		    fc->path);
		goto done;
	}
	if (H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, NULL, visit, fc) < 0) {
		if (!fc->err[0])	/* visit says which, when it was one */
			sw_h5_fail(fc->err, sizeof(fc->err), "%s: reading the datasets failed",
			    fc->path);
		goto done;
	}
	if (H5Fget_eoa(file, &eoa) >= 0 && stat(fc->path, &sb) == 0 &&
	    (haddr_t)sb.st_size > eoa)
		fc->beyond_eoa = (long long)(sb.st_size - (off_t)eoa);
	fc->readable = 1;
	rc = 0;
done:
	if (file >= 0)
		H5Fclose(file);
	if (fapl >= 0)
		H5Pclose(fapl);
	H5Eclear2(H5E_DEFAULT);
	return rc;
}

/*
 * Whether a sinkwatchd writes the file's directory: it holds the
 * directory's lock (sw_dirlock_*) shared as long as it runs. Returns 1 if
 * held, 0 if not (then *fd, unless -1, holds our exclusive lock: a daemon
 * that starts meanwhile cannot take the directory while we clear), -1 with
 * a message. No lock file: no daemon ever ran there (it never removes it).
 */
static int
daemon_lock(const char *path, int *fd, char *err, size_t errlen)
{
	char *copy = strdup(path);

	*fd = -1;
	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	const char *dir = dirname(copy);
	*fd = sw_dirlock_open(dir, 0, err, errlen);
	int held = *fd < 0 ? (*err ? -1 : 0) : sw_dirlock_exclusive(*fd, dir, err, errlen);
	/* daemons hold it shared (several may share a directory): ours is
	 * exclusive, so that none runs, nor starts, while we clear */
	if (held != 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	free(copy);
	return held;
}

/* Clears the writer flags if no daemon holds the directory. */
static void
clear(struct filecheck *fc)
{
	int fd, ffd = -1, held;

	held = daemon_lock(fc->path, &fd, fc->clear_err, sizeof(fc->clear_err));
	if (held == 1)
		fc->daemon = 1;
	if (held != 0)
		return;
	if (file_lock(fc->path, &ffd, fc->clear_err, sizeof(fc->clear_err)) == 0 &&
	    sw_runfile_clear(fc->path, fc->clear_err, sizeof(fc->clear_err)) == 0) {
		/* read back: the flags on disk are what every reader meets */
		fc->flags_now = sw_runfile_writer_flags(fc->path, fc->clear_err,
		    sizeof(fc->clear_err));
		if (fc->flags_now == 0)
			fc->cleared = 1;
		else if (fc->flags_now == 1)
			snprintf(fc->clear_err, sizeof(fc->clear_err),
			    "%s: the writer flags are still set after clearing", fc->path);
	}
	if (ffd >= 0)
		close(ffd);
	if (fd >= 0)
		close(fd);
}

/* The run's view: steps, superseded rows, segments of incarnations. */
static void
view_of(struct filecheck *fc)
{
	sw_reader *r;
	sw_rows rows;
	char err[512];

	if (sw_reader_open(fc->path, &r, NULL, err, sizeof(err)) != 0) {
		snprintf(fc->bad, sizeof(fc->bad), "%s", err);	/* what report and tail say */
		return;
	}
	int64_t T = sw_reader_refresh(r, err, sizeof(err));
	if (T < 0)
		snprintf(fc->bad, sizeof(fc->bad), "%s", err);
	if (T >= 0 && sw_reader_rows(r, T, &rows, err, sizeof(err)) == 0) {
		fc->has_view = sw_view_build(&rows, &fc->view) == 0;
		sw_rows_free(&rows);
	}
	/* the ranks of several-sender incarnations that never sent their end,
	 * also those that never sent at all (no row: compared with senders) */
	uint64_t *t = NULL;
	sw_open_rank *o = NULL;
	int64_t n = sw_reader_senders(r, &t, NULL, err, sizeof(err));
	if (n > 0 && (fc->nopen = sw_ranks_not_ended(t, n, &o)) > 0)
		memcpy(fc->open, o, (size_t)(fc->nopen < OPEN_MAX ? fc->nopen : OPEN_MAX) *
		    sizeof(*o));
	if (fc->nopen < 0)
		fc->nopen = 0;
	free(o);
	free(t);
	sw_reader_close(&r);
}

/*
 * inspect_once, and once more after a metadata checksum failed: a file
 * being written can fail one read honestly. A checksum that fails again,
 * or in a file marked ended, is a corrupt file, and the error says so.
 */
static int
inspect(struct filecheck *fc)
{
	for (int tried = 0;; tried++) {
		fc->err[0] = 0;
		fc->over.n = fc->under.n = 0;	/* a second try counts afresh */
		(void)sw_h5_checksum_failed();
		if (inspect_once(fc) == 0)
			return 0;
		if (!sw_h5_checksum_failed())
			return -1;
		if (tried || fc->ended) {
			char was[sizeof(fc->err)];
			size_t n = strlen(fc->path);
			snprintf(was, sizeof(was), "%s", strncmp(fc->err, fc->path, n) == 0 &&
			    fc->err[n] == ':' ? fc->err + n + 2 : fc->err);
			snprintf(fc->err, sizeof(fc->err), "%s: the file is corrupt: a metadata "
			    "checksum fails %s (%.300s)", fc->path, fc->ended ? "in a file marked "
			    "ended" : "again after a re-open", was);
			fc->corrupt = 1;
			return -1;
		}
	}
}

static void
check_file(struct filecheck *fc, int noclear)
{
	fc->flags = sw_runfile_writer_flags(fc->path, fc->err, sizeof(fc->err));
	if (fc->flags < 0)
		return;
	fc->flags_now = fc->flags;
	if (inspect(fc) < 0)
		return;
	if (fc->flags && !noclear)
		clear(fc);
	view_of(fc);
}

static int
whole(const struct filecheck *fc)
{
	return fc->readable && fc->under.n == 0 && fc->flags_now == 0 && !fc->bad[0];
}

/* ---- output ------------------------------------------------------------------- */

static void
text_odd(const char *label, const struct oddlist *l, const char *why)
{
	if (!l->n)
		return;
	printf("  %-15s", label);
	for (size_t i = 0; i < l->n; i++)
		printf("%s %s %+lld", i ? "," : "", l->v[i].name, (long long)l->v[i].rows);
	printf(" (rows against step; %s)\n", why);
}

static void
text_flags(const struct filecheck *fc)
{
	printf("  %-15s", "writer flags:");
	if (!fc->flags)
		printf("clear (closed cleanly)\n");
	else if (fc->cleared)
		printf("were set (not closed cleanly: the writer was killed); cleared\n");
	else if (fc->daemon)
		printf("set; a sinkwatchd is writing this directory (it holds "
		    SW_RUNLOCK_FILE "): not cleared; SWMR readers work meanwhile\n");
	else if (fc->clear_err[0])
		printf("set; clearing failed: %s\n", fc->clear_err);
	else
		printf("set (not closed cleanly: a writer runs or was killed); "
		    "not cleared (--no-clear)\n");
}

static void
text_report(const struct filecheck *fc)
{
	printf("%s\n", fc->path);
	if (!fc->readable) {
		printf("  %-15s%s\n", "error:", fc->err);
		return;
	}
	char trun[SW_TEXT_SAFE(sizeof(fc->run))];
	printf("  %-15s%s\n", "run:", sw_text_safe(fc->run, trun, sizeof(trun)));
	printf("  %-15s%d\n", "layout:", (int)fc->layout);
	printf("  %-15s%lld committed", "rows:", (long long)fc->steps);
	if (fc->steps > 0)
		printf(", step %lld .. %lld", (long long)fc->first, (long long)fc->last);
	printf("\n");
	if (fc->has_view) {
		printf("  %-15s%lld steps, %lld rows superseded\n", "view:",
		    (long long)fc->view.n, (long long)fc->view.superseded);
		for (int64_t k = 0; fc->view.nseg > 1 && k < fc->view.nseg; k++)
			printf("  %-15sincarnation %llu, steps %lld .. %lld (%lld)\n",
			    k ? "" : "segments:", (unsigned long long)fc->view.seg[k].inc,
			    (long long)fc->view.seg[k].first_step,
			    (long long)fc->view.seg[k].last_step, (long long)fc->view.seg[k].steps);
	}
	printf("  %-15s%s\n", "ended:", fc->ended ? "yes" : "no");
	for (int64_t k = 0; k < fc->nopen && k < OPEN_MAX; k++)
		printf("  %-15srank %u of %u of incarnation %llu %s\n", k ? "" : "not ended:",
		    fc->open[k].rank, fc->open[k].senders, (unsigned long long)fc->open[k].inc,
		    fc->open[k].sent ? "never sent its end" : "never sent anything");
	if (fc->nopen > OPEN_MAX)
		printf("  %-15s%lld more (%lld ranks in all)\n", "", (long long)(fc->nopen - OPEN_MAX),
		    (long long)fc->nopen);
	text_flags(fc);
	if (fc->beyond_eoa > 0)
		printf("  %-15s%lld bytes past the end of allocation (a killed writer's "
		    "unflushed data)%s\n", "tail:", fc->beyond_eoa,
		    fc->cleared ? "; allocation moved past them" : "");
	text_odd("leftovers:", &fc->over, "rows beyond step are not part of the run, "
	    "the next writer overwrites them");
	text_odd("short:", &fc->under, "rows of committed steps are missing");
	if (fc->bad[0])
		printf("  %-15s%s\n", "inconsistent:", fc->bad);
	printf("  %-15s%s\n", "verdict:", whole(fc) ? "whole" :
	    fc->under.n || fc->bad[0] ? "damaged" : "not closed");
}

static void
json_odd(sw_json *j, const char *key, const struct oddlist *l)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < l->n; i++) {
		sw_json_begin_obj(j, NULL);
		sw_json_str(j, "dataset", l->v[i].name);
		sw_json_int(j, "rows", l->v[i].rows);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

static void
json_report(sw_json *j, const struct filecheck *fc)
{
	sw_json_begin_obj(j, NULL);
	sw_json_str(j, "file", fc->path);
	sw_json_bool(j, "whole", whole(fc));
	if (!fc->readable) {
		sw_json_str(j, "error", fc->err);
		sw_json_bool(j, "corrupt", fc->corrupt);
		sw_json_end_obj(j);
		return;
	}
	sw_json_int(j, "layout_version", fc->layout);
	sw_json_str(j, "run", fc->run);
	sw_json_int(j, "steps", fc->steps);
	if (fc->steps > 0) {
		sw_json_int(j, "first_step", fc->first);
		sw_json_int(j, "last_step", fc->last);
	}
	sw_json_bool(j, "ended", fc->ended);
	if (fc->bad[0])
		sw_json_str(j, "inconsistent", fc->bad);
	sw_json_bool(j, "writer_flags", fc->flags);
	sw_json_bool(j, "daemon_writing", fc->daemon);
	sw_json_bool(j, "cleared", fc->cleared);
	if (fc->clear_err[0])
		sw_json_str(j, "clear_error", fc->clear_err);
	sw_json_int(j, "bytes_beyond_eoa", fc->beyond_eoa);
	json_odd(j, "leftovers", &fc->over);
	json_odd(j, "short", &fc->under);
	if (fc->has_view) {
		sw_json_int(j, "view_steps", fc->view.n);
		sw_json_int(j, "rows_superseded", fc->view.superseded);
		sw_json_begin_arr(j, "segments");
		for (int64_t k = 0; k < fc->view.nseg; k++) {
			sw_json_begin_obj(j, NULL);
			sw_json_uint(j, "inc", fc->view.seg[k].inc);
			sw_json_int(j, "first_step", fc->view.seg[k].first_step);
			sw_json_int(j, "last_step", fc->view.seg[k].last_step);
			sw_json_int(j, "steps", fc->view.seg[k].steps);
			sw_json_end_obj(j);
		}
		sw_json_end_arr(j);
	}
	sw_json_begin_arr(j, "ranks_not_ended");
	for (int64_t k = 0; k < fc->nopen && k < OPEN_MAX; k++) {
		sw_json_begin_obj(j, NULL);
		sw_json_uint(j, "inc", fc->open[k].inc);
		sw_json_int(j, "rank", fc->open[k].rank);
		sw_json_int(j, "senders", fc->open[k].senders);
		sw_json_bool(j, "sent", fc->open[k].sent);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	/* the list holds the first OPEN_MAX; this is how many there are */
	sw_json_int(j, "ranks_not_ended_count", fc->nopen);
	sw_json_end_obj(j);
}

/* Problems also go to stderr, so that a script sees why it got 1. */
static void
complain(const struct filecheck *fc)
{
	if (!fc->readable)
		fprintf(stderr, "sinkwatch check: %s\n", fc->err);
	else if (fc->under.n)
		fprintf(stderr, "sinkwatch check: %s: %zu dataset(s) shorter than step\n",
		    fc->path, fc->under.n);
	else if (fc->daemon)
		fprintf(stderr, "sinkwatch check: %s: a sinkwatchd is writing this directory; "
		    "not clearing the writer flags (SWMR readers work meanwhile)\n", fc->path);
	else if (fc->clear_err[0])
		fprintf(stderr, "sinkwatch check: %s\n", fc->clear_err);
	else if (fc->flags_now)
		fprintf(stderr, "sinkwatch check: %s: the writer flags are set "
		    "(--no-clear): plain HDF5 readers refuse it\n", fc->path);
}

int
sw_check_main(int argc, char **argv)
{
	int json = 0, noclear = 0, nfiles = 0, bad = 0, runs = 0;
	const char **files = calloc((size_t)argc, sizeof(*files));

	if (!files)
		return sw_tool_fail("check", "out of memory");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--format") && i + 1 < argc) {
			const char *f = argv[++i];
			if (!strcmp(f, "json"))
				json = 1;
			else if (strcmp(f, "text")) {
				free(files);
				return sw_tool_fail("check", "--format: '%s' is not text or json", f);
			}
		} else if (!strcmp(argv[i], "--no-clear"))
			noclear = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch check [--no-clear] [--format text|json] RUN.h5...\n");
			free(files);
			return 0;
		} else if (argv[i][0] == '-') {
			free(files);
			return sw_tool_fail("check", "unknown option '%s'", argv[i]);
		} else
			files[nfiles++] = argv[i];
	}
	if (!nfiles) {
		free(files);
		return sw_tool_fail("check", "missing RUN.h5");
	}
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	sw_json j;
	if (json) {
		sw_json_init(&j, stdout);
		sw_json_begin_obj(&j, NULL);
		sw_json_int(&j, "schema", 1);
		sw_json_begin_arr(&j, "files");
	}
	for (int i = 0; i < nfiles; i++) {
		struct filecheck fc;
		memset(&fc, 0, sizeof(fc));
		char *alt = sw_tool_run_path("check", files[i]);	/* data/fam%2FL2.h5 */
		fc.path = alt ? alt : files[i];
		check_file(&fc, noclear);
		if (json)
			json_report(&j, &fc);
		else
			text_report(&fc);
		complain(&fc);
		bad |= !whole(&fc);
		runs += fc.readable;
		free(fc.over.v);
		free(fc.under.v);
		sw_view_free(&fc.view);
		free(alt);
	}
	if (json) {
		sw_json_end_arr(&j);
		if (runs)	/* how to read a run file: only where one was read */
			sw_json_str(&j, "hint", hint);
		sw_json_end_obj(&j);
		sw_json_finish(&j);
	} else if (runs)
		printf("%s\n", hint);
	free(files);
	return bad ? 1 : 0;
}
