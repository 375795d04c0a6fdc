/*
 * control.c: the control socket and the status it answers, and the same
 * figures as Prometheus text for /metrics (prom.c serves it); all on the
 * loop thread (sinkwatchd.h).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "daemon/sinkwatchd.h"
#include "net/log.h"
#include "net/swctl.h"
#include "net/swnet.h"

/*
 * CPU seconds of ZeroMQ's own threads (named ZMQbg/...), from
 * /proc/self/task: they are not ours to time around a call.
 */
static double
zmq_threads_cpu_s(void)
{
	DIR *d = opendir("/proc/self/task");
	double s = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char path[300], buf[512];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		/* pid (comm) state ...: utime and stime are fields 14 and 15 */
		char *l = strchr(buf, '('), *r = strrchr(buf, ')');
		unsigned long long ut, st;
		if (!l || !r || strncmp(l + 1, "ZMQbg", 5) != 0 ||
		    sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
		    &st) != 2)
			continue;
		s += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	}
	if (d)
		closedir(d);
	return s;
}

/* The cpu section: the loop's stages, the workers', the writer's, ZeroMQ's. */
static void
fill_cpu(swd_daemon *d, swd_status *st)
{
	double *c = st->stage_cpu_s, *last = d->sb->cpu_last;
	struct timespec ts;
	c[SWD_STAGE_RECEIVE] = (double)d->n.recv_ns * 1e-9;
	c[SWD_STAGE_DECODE] = (double)d->n.decode_ns * 1e-9;
	/* the status is filled on the loop thread: its clock is the loop's */
	c[SWD_STAGE_ASSEMBLE] = (double)(swd_thread_ns() - d->n.recv_ns - d->n.decode_ns) * 1e-9;
	/* the workers' times, summed as their jobs complete */
	long long pn = d->n.pair_ns, kn = d->n.kernel_ns;
	c[SWD_STAGE_PAIRS] = (double)pn * 1e-9;
	c[SWD_STAGE_ROWS] = (double)(kn > pn ? kn - pn : 0) * 1e-9;
	c[SWD_STAGE_ZMQ_IO] = zmq_threads_cpu_s();
	/* drift first: the writer's clock, read after, has all of it */
	double dr = (double)atomic_load(&swd_writer_stats(d->writer)->drift_ns) * 1e-9,
	    wr = swd_writer_cpu_s(d->writer);
	c[SWD_STAGE_DRIFT] = dr;
	c[SWD_STAGE_WRITE] = wr > dr ? wr - dr : 0;
	/*
	 * Counters never go back: a drift call that ends between the two reads
	 * moves its time from write to drift at the next reading (microseconds).
	 */
	for (int i = 0; i < SWD_STAGES_N; i++) {
		if (c[i] < last[i])
			c[i] = last[i];
		last[i] = c[i];
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	st->process_cpu_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the daemon is: its version, endpoints, options. */
static void
fill_identity(const swd_daemon *d, swd_status *st)
{
	const swd_config *c = &d->cfg;
	st->version = PACKAGE_VERSION;
	st->listen = c->connect[0] ? "- (connects instead)" : c->listen;
	st->connect = c->connect;
	st->subscribe = c->subscribe;
	st->kernel_isa = swm_isa();
	st->log_precision = swm_precision();
	st->control = c->control;
	st->data_dir = c->data_dir;
	st->uptime_s = swd_wall_now() - d->started;
	st->pid = (long)getpid();
	st->max_runs = c->max_runs;
	st->new_runs_per_s = c->new_runs_per_s;
	st->new_runs_burst = c->new_runs_burst;
	st->budget_bytes = c->budget_mb << 20;
}

/* The runs open, and their senders with the writer's share. */
static void
fill_runs(const swd_daemon *d, swd_status *st)
{
	swd_status_buf *b = d->sb;
	size_t n = swd_asm_runs(d->as, b->ar, SWD_STATUS_RUNS);
	for (size_t i = 0; i < n; i++) {
		const swd_asm_run *a = &b->ar[i];
		b->runs[i] = (swd_status_run){ .run = a->run, .model = a->model,
		    .split_form = a->fixed_probe ? "paired" : "aggregate", .layers = a->layers,
		    .heads = a->heads, .steps_written = a->steps_done, .last_step = a->last_step,
		    .open_steps = a->open_steps, .lost = a->lost, .incomplete = a->incomplete,
		    .messages = a->messages, .last_gap = a->last_gap };
	}
	st->nruns = n;
	st->runs = b->runs;
	size_t ns = swd_asm_senders(d->as, b->sd, b->sr, SWD_STATUS_SENDERS);
	for (size_t i = 0; i < ns; i++)
		swd_writer_fates(d->writer, &b->sd[i]);
	for (size_t i = 0; i < ns; i++)
		b->ss[i] = swd_sender_status(b->sr[i], &b->sd[i]);
	st->nsenders = ns;
	st->senders = b->ss;
}

/* Runs gone lately, and their senders' last counters with the writer's share. */
static void
fill_finished(const swd_daemon *d, swd_status *st)
{
	swd_status_buf *b = d->sb;
	st->nfinished = swd_asm_finished(d->as, b->fa, b->fe, SWD_ASM_FINISHED_MAX);
	for (size_t i = 0; i < st->nfinished; i++) {
		const swd_asm_run *a = &b->fa[i];
		b->fr[i] = (swd_status_run){ a->run, a->model,
		    a->fixed_probe ? "paired" : "aggregate", a->layers, a->heads,
		    a->steps_done, a->last_step, 0, a->lost, a->incomplete,
		    a->messages, a->last_gap, b->fe[i] ? "ended" : "closed" };
	}
	st->finished = b->fr;
	st->nfinished_senders = swd_asm_finished_senders(d->as, b->fsd, b->fsr,
	    SWD_STATUS_SENDERS);
	for (size_t i = 0; i < st->nfinished_senders; i++) {
		swd_writer_fates(d->writer, &b->fsd[i]);
		b->fss[i] = swd_sender_status(b->fsr[i], &b->fsd[i]);
	}
	st->finished_senders = b->fss;
	st->nrefused = swd_asm_refused_runs(d->as, b->ra, SWD_ASM_REFUSED_MAX);
	st->refused_total = swd_asm_refused_total(d->as);
	for (size_t i = 0; i < st->nrefused; i++)
		b->rs[i] = (swd_status_refused){ b->ra[i].run, b->ra[i].too_many_runs,
		    b->ra[i].run_rate, b->ra[i].run_state };
	st->refused = b->rs;
}

/* CURVE: the keys, who got in and who did not; the hop from a forwarder. */
static void
fill_auth(const swd_daemon *d, swd_status *st)
{
	swd_auth_stats as;
	swd_auth_get_stats(d->auth, &as);
	st->curve = d->auth != NULL;
	st->curve_public = d->curve_public;
	st->auth_keys = as.keys;
	st->auth_allowed = as.allowed;
	st->auth_refused_data = as.refused_data;
	st->auth_refused_control = as.refused_control;
	st->auth_failed_data = as.failed_data;
	st->auth_failed_control = as.failed_control;
	st->upstream = d->cfg.connect[0] ? d->cfg.connect : NULL;
	st->upstream_curve = d->cfg.connect_server_key[0] != 0;
	st->upstream_refused = as.refused_upstream;
	st->upstream_failed = as.failed_upstream;
}

/* What came in and what became of it: messages, rows, rates, drops. */
static void
fill_counters(const swd_daemon *d, swd_status *st)
{
	const swd_rates *r = &d->rate;
	const swd_wstats *ws = swd_writer_stats(d->writer);
	swd_asm_count(d->as, &st->runs_live, &st->senders_live);
	st->messages = d->n.messages;
	st->bytes = d->n.bytes;
	st->rows = d->n.rows;
	st->steps_complete = swd_asm_get_stats(d->as)->steps_complete;
	st->steps_incomplete = swd_asm_get_stats(d->as)->steps_incomplete;
	st->parts_kept = swd_asm_get_stats(d->as)->parts_kept;
	st->parts_copied = swd_asm_get_stats(d->as)->parts_copied;
	int span = r->fill < 10 ? r->fill : 10;
	if (span > 0) {
		int now = r->pos, then = (r->pos - span + 11) % 11;
		st->rows_per_s = (double)(r->rows[now] - r->rows[then]) / span;
		st->msgs_per_s = (double)(r->msgs[now] - r->msgs[then]) / span;
	}
	memcpy(st->drops, d->n.drops, sizeof(st->drops));
	/* messages the assembly gave up after taking them (parts, failed work) */
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		st->drops[i] += swd_asm_get_stats(d->as)->drops[i];
	/* steps the writer did not store: duplicates of an incarnation's rows, and
	 * steps of a run whose file could not be opened */
	st->drops[SWD_DROP_DUPLICATE] += atomic_load(&ws->duplicates);
	st->drops[SWD_DROP_WRITE] += atomic_load(&ws->write_drops);
	st->drops[SWD_DROP_LOCKED] += atomic_load(&ws->locked_drops);
	st->drops[SWD_DROP_UNKNOWN_RUN] += atomic_load(&ws->unknown_ends);
	st->drops[SWD_DROP_LATE] += atomic_load(&ws->late_drops);
	memcpy(st->decode_errors, d->n.decode_errors, sizeof(st->decode_errors));
	memcpy(st->rejects, d->n.rejects, sizeof(st->rejects));
}

/* The pipeline: in flight, the writer, the loop. */
static void
fill_pipeline(const swd_daemon *d, swd_status *st)
{
	const swd_wstats *ws = swd_writer_stats(d->writer);
	st->inflight_bytes = atomic_load(&d->inflight);
	st->jobs_in_flight = d->jobs;
	st->writer_queue = atomic_load(&ws->queue_depth);
	st->steps_written = atomic_load(&ws->steps_written);
	st->write_errors = atomic_load(&ws->write_errors);
	st->flushes = atomic_load(&ws->flushes);
	st->bytes_written = atomic_load(&ws->bytes_written);
	st->files_open = atomic_load(&ws->files_open);
	st->max_flush_us = atomic_load(&ws->max_flush_us);
	st->loop_turns = d->n.loop_turns;
	st->drain_rounds = d->n.drain_rounds;
	st->max_batch = d->n.max_batch;
	st->batch_limit_hits = d->n.batch_limit_hits;
	st->loop_idle_s = (double)uv_metrics_idle_time(d->loop) * 1e-9;
}

/* The status: its lists in d->sb, until the next. */
static void
fill_status(swd_daemon *d, swd_status *st)
{
	memset(st, 0, sizeof(*st));
	fill_identity(d, st);
	fill_runs(d, st);
	fill_finished(d, st);
	fill_auth(d, st);
	fill_counters(d, st);
	fill_pipeline(d, st);
	fill_cpu(d, st);
}

static void
ctl_poll_cb(uv_poll_t *h, int status, int events)
{
	swd_daemon *d = h->data;
	(void)status;
	(void)events;
	while (d->ctl && swd_sock_readable(d->ctl)) {
		char req[256];
		int n = swn_control_recv(d->ctl, req, sizeof(req));
		if (n < 0)
			break;
		swd_status st;
		fill_status(d, &st);
		/* the whole reply, however long the lists (fill_status caps them) */
		size_t len;
		char *out = swd_control_reply_alloc(req, (size_t)n, &st, &len);
		if (out) {
			zmq_send(d->ctl, out, len, 0);
			free(out);
		} else {
			len = swd_control_reply(req, (size_t)n, &st, d->sb->small, sizeof(d->sb->small));
			zmq_send(d->ctl, d->sb->small, len, 0);
		}
	}
}

/* The Prometheus text, from the same figures as the status command. */
void
swd_publish_metrics(swd_daemon *d)
{
	if (!d->prom)
		return;
	swd_status st;
	fill_status(d, &st);
	swd_prom_publish(d->prom, d->sb->prom_text,
	    swd_metrics_text(&st, d->sb->prom_text, sizeof(d->sb->prom_text)));
}

/* The control socket watched; 0, or -1. */
int
swd_control_watch(swd_daemon *d)
{
	return swd_poll_fd(d, d->ctl, &d->ctl_poll, ctl_poll_cb);
}

/* GET /metrics served, when metrics_listen says where; 0, or -1 (logged). */
int
swd_prom_open(swd_daemon *d)
{
	char err[1024];
	if (!d->cfg.metrics_listen[0])
		return 0;
	if (swd_prom_start(&d->prom, d->cfg.metrics_listen, err, sizeof(err)) != 0) {
		log_err("%s", err);
		return -1;
	}
	swd_publish_metrics(d);
	log_info("Prometheus metrics at http://%s/metrics", d->cfg.metrics_listen);
	return 0;
}
