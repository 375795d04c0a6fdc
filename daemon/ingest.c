/*
 * ingest.c: receiving (sinkwatchd.h). The loop drains the SUB socket in
 * bounded batches, decodes each message, admits it into the assembly,
 * charges it against the in-flight budget and hands its layer to a pool
 * thread (work.c); the work's completion passes the result to the
 * assembly, which passes complete (or timed out) steps to the writer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sinkwatchd.h"
#include "net/log.h"

int
swd_poll_fd(swd_daemon *d, void *sock, uv_poll_t *p, uv_poll_cb cb)
{
	int fd;
	size_t len = sizeof(fd);
	if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0)
		return -1;
	if (uv_poll_init(d->loop, p, fd) != 0)
		return -1;
	p->data = d;
	return uv_poll_start(p, UV_READABLE, cb);
}

/* At most 20 bad-message lines per 10 s; counters keep the rest. */
static int
may_log(swd_daemon *d)
{
	uint64_t now = swd_mono_ms(d);
	if ((int64_t)now - d->log_window_ms > 10000) {
		if (d->log_count > 20)
			log_warn("%lld more bad messages in the last 10 s (see sinkwatch status)",
			    (long long)(d->log_count - 20));
		d->log_window_ms = (int64_t)now;
		d->log_count = 0;
	}
	return ++d->log_count <= 20;
}

static void
drop(swd_daemon *d, int reason, const char *run, const char *why)
{
	d->n.drops[reason]++;
	if (may_log(d))
		log_warn("dropped a message%s%s: %s: %s", run ? " of run " : "", run ? run : "",
		    swd_drop_names[reason], why);
}

/* The assembly's steps and ends go to the writer. */
static void
to_writer(void *ud, swd_witem *it)
{
	swd_writer_push(ud, it);
}

/* A job's end, on the loop thread: its counts taken, its result to the assembly. */
static void
after_work(uv_work_t *req, int status)
{
	swd_job *j = req->data;
	swd_daemon *d = req->loop->data;
	(void)status;
	d->jobs--;
	size_t tensor_bytes = j->parts ? j->data_bytes : zmq_msg_size(&j->tensor);
	zmq_msg_close(&j->tensor);
	swd_parts_free(j->parts);
	free(j->miss);
	atomic_fetch_sub(&d->inflight, (long long)tensor_bytes);
	d->n.rows += j->rows_counted;
	for (int s = 1; s < SWM_STATUS__N; s++)
		d->n.rejects[s] += j->rejects[s];
	d->n.pair_ns += j->pair_ns;
	d->n.kernel_ns += j->kernel_ns;
	if (!j->out) {	/* its messages are counted by the assembly (nomem) */
		atomic_fetch_sub(&d->inflight, (long long)(j->reserved - tensor_bytes));
	} else {
		j->out->bytes -= tensor_bytes;	/* the frame is gone; the result stays */
	}
	swd_asm_done(d->as, &j->t, j->out, swd_mono_ms(d));
	swp_msg_clear(&j->msg);
	free(j);
}

/* A job for the layer of m (m's tensor and qpos are not the job's); NULL: no memory. */
static swd_job *
job_new(swd_daemon *d, const swd_ticket *t, const swp_msg *m, size_t reserved)
{
	swd_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->conf = d->work;
	j->t = *t;
	j->step = m->step;
	j->msg = *m;
	j->msg.tensor = NULL;
	zmq_msg_init(&j->tensor);
	j->reserved = reserved;
	j->req.data = j;
	return j;
}

/* The job to a pool thread; 0, or -1 (cannot happen with a valid loop). */
static int
job_queue(swd_daemon *d, swd_job *j)
{
	if (uv_queue_work(d->loop, &j->req, swd_work_run, after_work) != 0)
		return -1;
	d->jobs++;
	return 0;
}

/* A message counted and decoded into m; 0, or -1 (counted and logged). */
static int
decode(swd_daemon *d, zmq_msg_t *frames, size_t n, swp_msg *m)
{
	const void *ptrs[SWD_MAX_FRAMES];
	size_t sizes[SWD_MAX_FRAMES];
	char detail[256];
	swp_limits lim = { (uint64_t)d->cfg.max_message_mb << 20 };

	for (size_t i = 0; i < n && i < SWD_MAX_FRAMES; i++) {
		ptrs[i] = zmq_msg_data(&frames[i]);
		sizes[i] = zmq_msg_size(&frames[i]);
		d->n.bytes += (int64_t)sizes[i];
	}
	d->n.messages++;
	detail[0] = '\0';
	int64_t t0 = swd_thread_ns();
	int rc = swp_decode(ptrs, sizes, n, &lim, m, detail, sizeof(detail));
	d->n.decode_ns += swd_thread_ns() - t0;
	if (rc < 0) {
		int idx = -rc < SWD_DECODE_ERRORS ? -rc : 0;
		d->n.decode_errors[idx]++;
		if (may_log(d))
			log_warn("bad message: %s: %s", swp_errname(rc), detail);
		return -1;
	}
	return 0;
}

/*
 * The messages settled before admission: of a revoked key, a run's end,
 * any while stopping. 1 if m was one of them, 0 if it is to be admitted.
 */
static int
settled(swd_daemon *d, zmq_msg_t *frames, const swp_msg *m)
{
	char why[256];
	/* a connection whose key was revoked since its handshake (SIGHUP) */
	const char *user = d->auth && !d->cfg.connect[0] ? zmq_msg_gets(&frames[0], "User-Id") : NULL;
	if (user && swd_auth_revoked(d->auth, user)) {
		swd_asm_refuse(d->as, m, SWD_DROP_REVOKED);
		snprintf(why, sizeof(why), "its connection's key %.40s was removed from the allow "
		    "list", user);
		drop(d, SWD_DROP_REVOKED, m->run, why);
		return 1;
	}
	if (m->type == SWP_END) {
		int rc = swd_asm_end(d->as, m, swd_mono_ms(d));
		if (rc != SWD_ASM_ACCEPT && rc != SWD_ASM_DEFERRED)	/* deferred: the writer's */
			drop(d, rc, m->run, rc == SWD_DROP_UNKNOWN_RUN ? "end of a run with nothing "
			    "in flight" : rc == SWD_DROP_SENDERS ? "an end whose senders is not its "
			    "incarnation's" : "a second end of its sender");
		return 1;
	}
	if (d->stopping) {
		swd_asm_refuse(d->as, m, SWD_DROP_STOPPING);
		drop(d, SWD_DROP_STOPPING, m->run, "shutting down");
		return 1;
	}
	return 0;
}

/* A layer admitted: its work started on its frame, or the ticket cancelled. */
static void
start_work(swd_daemon *d, swd_ticket *t, swp_msg *m, zmq_msg_t *frame)
{
	char why[256];
	size_t need = m->tensor_bytes + swd_result_bytes(&d->work, m, m->fixed_probe);
	if ((int64_t)atomic_load(&d->inflight) + (int64_t)need > d->cfg.budget_mb << 20) {
		swd_asm_cancel(d->as, t, SWD_DROP_BUDGET);
		if (t->copy)	/* counted a duplicate already; only its comparison is lost */
			return;
		snprintf(why, sizeof(why), "%zu bytes would pass the budget of %lld MiB", need,
		    (long long)d->cfg.budget_mb);
		drop(d, SWD_DROP_BUDGET, m->run, why);
		return;
	}
	swd_job *j = job_new(d, t, m, need);
	if (!j) {
		swd_asm_cancel(d->as, t, SWD_DROP_NOMEM);
		if (!t->copy)
			drop(d, SWD_DROP_NOMEM, m->run, "no memory for a job");
		return;
	}
	m->qpos = NULL;	/* the job owns it now */
	zmq_msg_move(&j->tensor, frame);	/* zero-copy: the frame itself */
	atomic_fetch_add(&d->inflight, (long long)need);
	if (job_queue(d, j) != 0) {
		swd_asm_cancel(d->as, t, SWD_DROP_NOMEM);
		atomic_fetch_sub(&d->inflight, (long long)need);
		zmq_msg_close(&j->tensor);
		swp_msg_clear(&j->msg);
		free(j);
		if (!t->copy)
			drop(d, SWD_DROP_NOMEM, m->run, "uv_queue_work failed");
		return;
	}
	swd_asm_start(d->as, t);
}

static void
handle(swd_daemon *d, zmq_msg_t *frames, size_t n)
{
	char why[256];
	swp_msg m;
	swd_ticket t;

	if (decode(d, frames, n, &m) != 0)
		return;
	if (settled(d, frames, &m))
		goto out;
	d->part_frame = &frames[2];	/* for hold_part, while the assembly admits m */
	int rc = swd_asm_admit(d->as, &m, swd_mono_ms(d), &t, why, sizeof(why));
	d->part_frame = NULL;
	if (rc == SWD_ASM_HELD)
		goto out;	/* a part, gathered into its layer */
	if (rc == SWD_ASM_COPY)
		drop(d, SWD_DROP_DUPLICATE, m.run, why);	/* not stored; computed to compare */
	else if (rc != SWD_ASM_ACCEPT) {
		drop(d, rc, m.run, why);
		goto out;
	}
	start_work(d, &t, &m, &frames[2]);
out:
	swp_msg_clear(&m);
}

/* What a run of this shape holds while open (the assembly charges it). */
static size_t
run_state_bytes(void *ud, const swd_meta *m)
{
	const swd_daemon *d = ud;
	return swd_run_state_bytes(m, (int)d->work.cross_layer_pairs);
}

/* What a gathered layer's computation holds (the assembly reserves it). */
static size_t
gathered_bytes(void *ud, const swp_msg *m)
{
	const swd_daemon *d = ud;
	return swd_result_bytes(&d->work, m, m->fixed_probe);
}

/*
 * The assembly's gathered layers (parts of several senders, PROTOCOL.md
 * 7b): data and bytes, and the result's bytes (gathered_bytes, reserved
 * with the layer's first part), are counted in inflight already.
 * SWD_ASM_ACCEPT, or a drop reason (the assembly keeps what it passed).
 */
static int
start_gathered(void *ud, const swd_ticket *t, const swp_msg *m, swd_parts *data, size_t bytes,
    int32_t *miss)
{
	swd_daemon *d = ud;
	size_t need = swd_result_bytes(&d->work, m, m->fixed_probe);
	swd_job *j = job_new(d, t, m, need + bytes);
	if (!j)
		return SWD_DROP_NOMEM;
	j->parts = data;
	j->data_bytes = bytes;
	j->miss = miss;
	if (job_queue(d, j) != 0) {
		/* cannot happen with a valid loop: the assembly keeps what it passed */
		zmq_msg_close(&j->tensor);
		free(j);
		return SWD_DROP_NOMEM;
	}
	return SWD_ASM_ACCEPT;
}

/*
 * A part whose heads are whole, kept as it came (the assembly's conf.hold):
 * its tensor frame moves to the heap and stays until the layer's work is
 * done. Returns where the tensor lies now, or NULL (no memory: copied).
 */
static const void *
hold_part(void *ud, const swp_msg *m, void **handle)
{
	swd_daemon *d = ud;
	zmq_msg_t *f;
	if (!d->part_frame || !(f = malloc(sizeof(*f))))
		return NULL;
	if (m->tensor != zmq_msg_data(d->part_frame) ||
	    m->tensor_bytes != zmq_msg_size(d->part_frame)) {
		free(f);
		return NULL;	/* the frame is the tensor (decoder): cannot happen */
	}
	zmq_msg_init(f);
	zmq_msg_move(f, d->part_frame);
	d->part_frame = NULL;
	*handle = f;
	return zmq_msg_data(f);
}

static void
release_part(void *ud, void *handle)
{
	(void)ud;
	zmq_msg_close(handle);
	free(handle);
}

/* Receives one multipart message; 1 if one was read, 0 if none was ready. */
static int
recv_one(swd_daemon *d)
{
	zmq_msg_t frames[SWD_MAX_FRAMES];
	size_t n = 0;
	int more = 1;
	int64_t t0 = swd_thread_ns();
	while (more) {
		zmq_msg_t f;
		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, d->sub, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f);
			if (n == 0)
				return 0;
			break;	/* cannot happen: the parts of a message arrive together */
		}
		more = zmq_msg_more(&f);
		if (n < SWD_MAX_FRAMES) {
			zmq_msg_init(&frames[n]);
			zmq_msg_move(&frames[n], &f);
		}
		n++;
		zmq_msg_close(&f);
	}
	d->n.recv_ns += swd_thread_ns() - t0;
	handle(d, frames, n < SWD_MAX_FRAMES ? n : SWD_MAX_FRAMES + (n > SWD_MAX_FRAMES));
	for (size_t i = 0; i < n && i < SWD_MAX_FRAMES; i++)
		zmq_msg_close(&frames[i]);
	return 1;
}

int
swd_sock_readable(void *sock)
{
	int ev = 0;
	size_t len = sizeof(ev);
	if (zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) != 0)
		return 0;
	return (ev & ZMQ_POLLIN) != 0;
}

static void
drain_idle_cb(uv_idle_t *h)
{
	swd_drain(h->data);
}

/*
 * ZMQ_FD is edge-triggered: it signals once for many messages. Drain while
 * ZMQ_EVENTS says a message is ready, checking again after each receive; stop
 * after a batch and continue from an idle handle so that timers, signals and
 * the control socket are served between batches.
 */
void
swd_drain(swd_daemon *d)
{
	int64_t n = 0;
	d->n.drain_rounds++;
	while (d->sub && swd_sock_readable(d->sub)) {
		if (!recv_one(d))
			break;
		if (++n >= d->cfg.batch) {
			d->n.batch_limit_hits++;
			if (!d->draining_idle) {
				uv_idle_start(&d->drain_idle, drain_idle_cb);
				d->draining_idle = 1;
			}
			break;
		}
	}
	if (n > d->n.max_batch)
		d->n.max_batch = n;
	if (n < d->cfg.batch && d->draining_idle) {
		uv_idle_stop(&d->drain_idle);
		d->draining_idle = 0;
	}
}

static void
sub_poll_cb(uv_poll_t *h, int status, int events)
{
	swd_daemon *d = h->data;
	(void)status;
	(void)events;
	d->n.loop_turns++;
	swd_drain(d);
}

/* The assembly, made; 0, or -1 (logged). */
int
swd_ingest_asm(swd_daemon *d)
{
	swd_asm_conf ac = {
		.step_timeout_ms = d->cfg.step_timeout_ms, .max_open_steps = d->cfg.max_open_steps,
		.max_runs = d->cfg.max_runs, .run_idle_s = d->cfg.run_idle_s,
		.inflight = &d->inflight, .budget_bytes = d->cfg.budget_mb << 20,
		.work_bytes = gathered_bytes, .run_bytes = run_state_bytes, .work = start_gathered,
		.work_ud = d, .hold = hold_part, .release = release_part, .hold_min = SWD_HOLD_MIN,
		.hold_extra = SWD_HOLD_EXTRA,
		.new_runs_per_s = d->cfg.new_runs_per_s, .new_runs_burst = d->cfg.new_runs_burst,
	};
	if (!(d->as = swd_asm_new(&ac, to_writer, d->writer))) {
		log_err("out of memory");
		return -1;
	}
	return 0;
}

/* The SUB socket watched, the drain's idle handle ready; 0, or -1. */
int
swd_ingest_watch(swd_daemon *d)
{
	d->sub_poll.data = d;
	d->drain_idle.data = d;
	if (swd_poll_fd(d, d->sub, &d->sub_poll, sub_poll_cb) != 0)
		return -1;
	return uv_idle_init(d->loop, &d->drain_idle);
}
