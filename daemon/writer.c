/*
 * writer.c: the writer thread. It owns every run file: takes the items
 * the assembly queues (steps, ends, closes, senders' counts), turns steps
 * into the stored series (writer_step.c), marks ends, and flushes each
 * dirty file once per flush round. Its files call downwards only:
 * writer.c -> writer_step.c -> writer_runs.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "daemon/daemon.h"
#include "daemon/writer_int.h"
#include "net/log.h"

/*
 * WQ_SENDERS: counters of the run's senders (a new one, or at its close).
 * Only into a file the writer has open: counters alone never make a file
 * (a several-sender incarnation's WQ_INC has opened it before).
 */
static void
senders_item(swd_writer *w, swd_witem *it)
{
	for (struct wrun *r = w->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, &it->meta)) {
			if (!r->broken)
				wr_put_senders(w, r, it->snd, it->nsnd);
			return;
		}
}

/* WQ_INC: an incarnation first seen, before its steps or others' carry totals. */
static void
inc_seen(swd_writer *w, swd_witem *it)
{
	struct wrun *r = wr_run_get(w, &it->meta, it);
	struct winc *wi = r && !r->broken ? wr_inc_get(r, it->inc) : NULL;
	/* several senders: per sender, from the sender table (sender_gap); a sender
	 * without inc is counted from its first seq here (PROTOCOL.md 7a) */
	if (wi && !wi->seen && it->inc_named && it->inc_senders <= 1)
		wr_first_seen(w, r, wi, it->first_seq);
}

static void
flush_all(swd_writer *w)
{
	int64_t t0 = wr_mono_ms();
	for (struct wrun *r = w->runs; r; r = r->next) {
		char err[512];
		if (!r->dirty || !r->f)
			continue;
		if (sw_runfile_flush(r->f, err, sizeof(err)) != 0) {
			log_err("run %s: flush failed: %s", r->meta.run, err);
			atomic_fetch_add(&w->st.write_errors, 1);
		}
		struct stat sb;
		if (stat(sw_runfile_path(r->f), &sb) == 0) {
			if (sb.st_size > r->size)
				atomic_fetch_add(&w->st.bytes_written, (long long)(sb.st_size - r->size));
			r->size = sb.st_size;
		}
		r->dirty = 0;
		atomic_fetch_add(&w->st.flushes, 1);
	}
	long long us = (wr_mono_ms() - t0) * 1000;
	if (us > atomic_load(&w->st.max_flush_us))
		atomic_store(&w->st.max_flush_us, us);
	w->last_flush_ms = wr_mono_ms();
}

/*
 * The first generation from `from` on of the run id whose sender table has
 * a row of inc, with its shape in *m; 0 if none (an end after a restart
 * names no shape). Generations may have gaps (pruned files).
 */
static uint32_t
find_by_inc(swd_writer *w, const char *run, uint64_t inc, uint32_t from, swd_meta *m)
{
	for (uint32_t g = from; g <= 1000; g++) {
		char name[SW_RUNFILE_NAME_MAX + 1], path[2048], err[512];
		struct stat sb;
		if (sw_runfile_name_gen(run, g, name, sizeof(name)) < 0)
			return 0;
		snprintf(path, sizeof(path), "%s/%s", w->cfg.data_dir, name);
		if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		sw_reader *rd;
		sw_runmeta rm;
		if (sw_reader_open(path, &rd, &rm, err, sizeof(err)) != 0)
			continue;
		uint64_t *t = NULL;
		int64_t n = sw_reader_senders(rd, &t, NULL, err, sizeof(err)), k;
		for (k = 0; k < n && t[k * SW_SENDER_FIELDS + SW_S_INC] != inc; k++)
			;
		int hit = k < n;
		free(t);
		if (hit) {
			memset(m, 0, sizeof(*m));
			snprintf(m->run, sizeof(m->run), "%s", run);
			snprintf(m->model, sizeof(m->model), "%s", rm.model);
			m->params = rm.params;
			m->layers = rm.layers;
			m->heads = rm.heads;
			m->sink = rm.sink;
			m->rows = rm.rows;
			m->keys = rm.keys;
			m->fixed_probe = rm.fixed_probe;
			int kind = swp_kind_parse(rm.kind), dtype = swp_dtype_parse(rm.dtype);
			m->kind = kind >= 0 ? (swp_kind)kind : SWP_PROBS;
			m->dtype = dtype >= 0 ? (swp_dtype)dtype : SWP_F32;
		}
		sw_reader_close(&rd);
		if (hit)
			return g;
	}
	return 0;
}

/* Everything of the run on disk first, then the end mark that says so; closed. */
static void
mark_ended(swd_writer *w, struct wrun *r)
{
	char err[512];
	if (r->f && sw_runfile_flush(r->f, err, sizeof(err)) != 0)
		log_err("run %s: flush failed: %s", r->meta.run, err);
	if (r->f && sw_runfile_mark_ended(r->f, err, sizeof(err)) != 0)
		log_err("run %s: marking the end failed: %s", r->meta.run, err);
	if (r->f)
		log_info("run %s: ended, file closed", r->meta.run);
	else
		log_info("run %s: ended; no file of it was open here (%s)", r->meta.run,
		    r->locked ? "another process held its lock" : "it could not be opened");
	if (r->lock) {	/* kept a while (ended_locks), the oldest let go */
		size_t k = w->ended_next++ % SWD_ENDED_LOCKS;
		sw_runlock_release(&w->ended_locks[k]);
		w->ended_locks[k] = r->lock;
		r->lock = NULL;
	}
	wr_wrun_remove(w, r);
}

/*
 * An end whose run was closed (idle, or before a restart): counted in the
 * sender's row of every file of the id that holds its incarnation (a shape
 * changed mid-run makes two), each marked ended once every rank of the
 * incarnation has ended; no such file: unknown_run.
 */
static void
late_end(swd_writer *w, const swd_witem *it)
{
	char err[512];
	int found = 0;
	swd_meta m;
	for (uint32_t g = 1; (g = find_by_inc(w, it->meta.run, it->inc, g, &m)) != 0; g++) {
		struct wrun *r;
		found = 1;
		for (r = w->runs; r && !(swd_meta_eq(&r->meta, &m) && r->generation == g);
		    r = r->next)
			;
		int in_use = r != NULL;	/* another incarnation's run writes it: it ends it */
		if (!r) {
			w->want_gen = g;
			r = wr_run_get(w, &m, it);
			w->want_gen = 0;
		}
		if (!r)
			continue;
		if (!r->broken && wr_end_sender(w, r, it->snd) && !in_use) {
			mark_ended(w, r);
			continue;
		}
		if (r->f && sw_runfile_flush(r->f, err, sizeof(err)) != 0)
			log_err("run %s: flush failed: %s", r->meta.run, err);
		if (!in_use)
			wr_wrun_remove(w, r);	/* counted; other ranks' ends to come */
	}
	if (!found) {
		atomic_fetch_add(&w->st.unknown_ends, 1);
		log_warn("run %s: an end of incarnation %llu, which no file of the data directory "
		    "holds (unknown_run)", it->meta.run, (unsigned long long)it->inc);
	}
}

static void
end_run(swd_writer *w, swd_witem *it)
{
	struct wrun *r;
	/* a run this writer has open: an end never makes a file */
	for (r = it->reopen ? NULL : w->runs; r && !swd_meta_eq(&r->meta, &it->meta); r = r->next)
		;
	if (it->reopen && it->nsnd == 1) {	/* its run was closed: the files say */
		late_end(w, it);
		return;
	}
	if (!r) {
		log_info("run %s: ended with nothing stored in this session", it->meta.run);
		return;
	}
	mark_ended(w, r);
}

/* An idle run: its file is flushed and closed, to be resumed if it returns. */
static void
close_run(swd_writer *w, swd_witem *it)
{
	for (struct wrun *r = w->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, &it->meta)) {
			log_info("run %s: idle, file closed", r->meta.run);
			wr_wrun_remove(w, r);
			return;
		}
}

static void *
writer_main(void *arg)
{
	swd_writer *w = arg;
	int stopping = 0;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		while (!w->head && !w->stop) {
			int dirty = 0;
			for (struct wrun *r = w->runs; r; r = r->next)
				dirty |= r->dirty;
			if (!dirty) {
				pthread_cond_wait(&w->cv, &w->mu);
				continue;
			}
			int64_t due = w->last_flush_ms + w->cfg.flush_ms;
			if (wr_mono_ms() >= due)
				break;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			int64_t wait = due - wr_mono_ms();
			ts.tv_sec += wait / 1000;
			ts.tv_nsec += (wait % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
		swd_witem *it = w->head;
		if (it) {
			w->head = it->next;
			if (!w->head)
				w->tail = NULL;
			atomic_fetch_sub(&w->st.queue_depth, 1);
			atomic_fetch_add(&w->st.items, 1);
		} else if (w->stop) {
			stopping = 1;
		}
		pthread_mutex_unlock(&w->mu);
		if (it) {
			/* a step not stored: its messages counted (write_error) */
			/* a step not stored: its messages counted (write_error, or locked:
			 * another process writes the run); 1: counted by wr_write_step */
			int wrc = it->type == WQ_STEP ? wr_write_step(w, it) : 0;
			if (wrc < 0)
				atomic_fetch_add(wrc == -2 ? &w->st.locked_drops : &w->st.write_drops,
				    wr_fate_item(w, it, wrc == -2 ? WF_LOCKED : WF_WRITE));
			else if (it->type == WQ_STEP)
				;
			else if (it->type == WQ_END)
				end_run(w, it);
			else if (it->type == WQ_CLOSE)
				close_run(w, it);
			else if (it->type == WQ_INC)
				inc_seen(w, it);
			else if (it->type == WQ_SENDERS)
				senders_item(w, it);
			wr_free_item(it, w->inflight);
			pthread_mutex_lock(&w->mu);
			w->done++;
			pthread_cond_broadcast(&w->done_cv);
			pthread_mutex_unlock(&w->mu);
		}
		if (wr_mono_ms() - w->last_flush_ms >= w->cfg.flush_ms || stopping)
			flush_all(w);
		if (stopping)
			break;
	}
	while (w->runs)
		wr_wrun_remove(w, w->runs);
	for (size_t k = 0; k < SWD_ENDED_LOCKS; k++)
		sw_runlock_release(&w->ended_locks[k]);
	return NULL;
}

int
swd_writer_start(swd_writer **wp, const swd_config *cfg, atomic_llong *inflight)
{
	swd_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->cfg = *cfg;
	w->inflight = inflight;
	w->last_flush_ms = wr_mono_ms();
	if (!(w->fates = calloc(WFATES, sizeof(*w->fates)))) {
		free(w);
		return -1;
	}
	pthread_mutex_init(&w->fmu, NULL);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->done_cv, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
		free(w->fates);
		free(w);
		return -1;
	}
	*wp = w;
	return 0;
}

void
swd_writer_push(swd_writer *w, swd_witem *it)
{
	it->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (w->tail)
		w->tail->next = it;
	else
		w->head = it;
	w->tail = it;
	w->pushed++;
	atomic_fetch_add(&w->st.queue_depth, 1);
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void
swd_writer_stop(swd_writer **wp)
{
	swd_writer *w = *wp;
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->th, NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->fmu);
	pthread_cond_destroy(&w->cv);
	pthread_cond_destroy(&w->done_cv);
	free(w->fates);
	free(w);
	*wp = NULL;
}

void
swd_writer_sync(swd_writer *w)
{
	pthread_mutex_lock(&w->mu);
	int64_t target = w->pushed;
	while (w->done < target)
		pthread_cond_wait(&w->done_cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

const swd_wstats *
swd_writer_stats(const swd_writer *w)
{
	return &w->st;
}

double
swd_writer_cpu_s(const swd_writer *w)
{
	clockid_t c;
	struct timespec ts;
	if (pthread_getcpuclockid(w->th, &c) != 0 || clock_gettime(c, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
