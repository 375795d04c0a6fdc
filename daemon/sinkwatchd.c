/*
 * sinkwatchd.c: the daemon. The libuv loop owns the ZeroMQ sockets: it
 * drains the SUB socket in bounded batches, validates each message, charges
 * it against the in-flight budget, hands its layer to a pool thread for the
 * metric core, assembles steps from layers, and passes complete (or timed
 * out) steps to the writer thread.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>
#include <zmq.h>

#include "config.h"
#include "daemon/conf.h"
#include "daemon/daemon.h"
#include "daemon/log.h"
#include "daemon/status.h"

#define MAX_FRAMES 4
#define RECENT 64	/* completed steps remembered per run, to spot late layers */

struct step {
	int64_t step;
	uint64_t first_ms;
	uint32_t have, in_work;
	int complete;		/* every layer arrived: waits only for earlier steps */
	uint8_t *state;		/* [layers]: 0 none, 1 in work, 2 done */
	swd_layer **layers;	/* [layers] */
	struct step *next;
};

struct run {
	swd_meta meta;
	uint64_t expect_seq;
	int64_t lost, incomplete, messages, steps_done, last_step;
	int64_t recent[RECENT];
	size_t nrecent;
	struct step *open;
	int64_t nopen;
	int64_t jobs;
	int ending;
	uint64_t last_ms;	/* last message */
	struct run *next;
};

struct job {
	uv_work_t req;
	struct run *run;
	int64_t step;
	swp_msg msg;
	zmq_msg_t tensor;
	size_t reserved;
	swd_layer *out;
	int64_t rows_counted, rejects[SWM_STATUS__N];
};

static struct {
	swd_config cfg;
	uv_loop_t *loop;
	void *zctx, *sub, *ctl;
	uv_poll_t sub_poll, ctl_poll;
	uv_idle_t drain_idle;
	uv_timer_t tick;
	uv_signal_t sigint, sigterm, sighup;
	int stopping, draining_idle;
	struct run *runs;
	int64_t nruns;
	swd_writer *writer;
	atomic_llong inflight;
	int64_t jobs;
	double started;
	/* counters */
	int64_t messages, bytes, steps_complete, steps_incomplete;
	atomic_llong rows, rejects[SWM_STATUS__N];
	int64_t drops[SWD_DROP_REASONS], decode_errors[SWD_DECODE_ERRORS];
	int64_t loop_turns, drain_rounds, max_batch, batch_limit_hits;
	/* rate ring: one sample a second */
	int64_t ring_rows[11], ring_msgs[11];
	int ring_pos, ring_fill;
	/* rate-limited logging of bad messages */
	int64_t log_window_ms, log_count;
} D;

static double
wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t
mono_ms(void)
{
	return uv_now(D.loop);
}

/* At most 20 bad-message lines per 10 s; counters keep the rest. */
static int
may_log(void)
{
	uint64_t now = mono_ms();
	if ((int64_t)now - D.log_window_ms > 10000) {
		if (D.log_count > 20)
			log_warn("%lld more bad messages in the last 10 s (see sinkwatch status)",
			    (long long)(D.log_count - 20));
		D.log_window_ms = (int64_t)now;
		D.log_count = 0;
	}
	return ++D.log_count <= 20;
}

static void
drop(int reason, const char *run, const char *why)
{
	D.drops[reason]++;
	if (may_log())
		log_warn("dropped a message%s%s: %s: %s", run ? " of run " : "", run ? run : "",
		    swd_drop_names[reason], why);
}

static struct run *
find_run(const char *id)
{
	for (struct run *r = D.runs; r; r = r->next)
		if (!strcmp(r->meta.run, id))
			return r;
	return NULL;
}

static void
free_step(struct step *s, uint32_t layers)
{
	if (s->layers)
		for (uint32_t i = 0; i < layers; i++)
			swd_layer_free(s->layers[i], &D.inflight);
	free(s->layers);
	free(s->state);
	free(s);
}

/* Hands a step to the writer, complete or not, and forgets it. */
static void
emit_step(struct run *r, struct step *s)
{
	for (struct step **p = &r->open; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	r->nopen--;
	int complete = s->have == r->meta.layers;
	if (!complete) {
		r->incomplete++;
		D.steps_incomplete++;
		log_warn("run %s: step %lld written incomplete (%u of %u layers)", r->meta.run,
		    (long long)s->step, s->have, r->meta.layers);
	} else {
		D.steps_complete++;
	}
	r->recent[r->nrecent++ % RECENT] = s->step;
	swd_witem *it = calloc(1, sizeof(*it));
	if (!it) {
		log_err("run %s: out of memory: step %lld lost", r->meta.run, (long long)s->step);
		free_step(s, r->meta.layers);
		return;
	}
	it->type = WQ_STEP;
	it->meta = r->meta;
	it->step = s->step;
	it->layers = s->layers;
	s->layers = NULL;
	it->lost = r->lost;
	it->incomplete = r->incomplete;
	it->time = wall_now();
	r->steps_done++;
	r->last_step = s->step;
	free_step(s, r->meta.layers);
	swd_writer_push(D.writer, it);
}

static struct step *
min_open_step(struct run *r)
{
	struct step *m = NULL;
	for (struct step *t = r->open; t; t = t->next)
		if (!m || t->step < m->step)
			m = t;
	return m;
}

/*
 * Complete steps go to the writer in step order: one waits while an earlier
 * step of its run is still being assembled (that one is written when it
 * completes or times out), so readers and the split see steps in order. A
 * step that arrives after later ones were written is still stored.
 */
static void
release_ready(struct run *r)
{
	struct step *m;
	while ((m = min_open_step(r)) && m->complete)
		emit_step(r, m);
}

/* Every open step of the run goes out, in step order. */
static void
emit_all(struct run *r)
{
	struct step *m;
	while ((m = min_open_step(r)))
		emit_step(r, m);
}

/*
 * A run that was ended (or fell idle) and has nothing in flight is written
 * out and forgotten; the writer closes its file (marking the end if ended).
 */
static void
finish_run(struct run *r, int type)
{
	emit_all(r);
	swd_witem *it = calloc(1, sizeof(*it));
	if (it) {
		it->type = type;
		it->meta = r->meta;
		swd_writer_push(D.writer, it);
	}
	for (struct run **p = &D.runs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	D.nruns--;
	free(r);
}

static void
maybe_finish_run(struct run *r)
{
	if (r->ending && r->jobs == 0)
		finish_run(r, WQ_END);
}

/* ---- metric work on pool threads --------------------------------------- */

static void
work_cb(uv_work_t *req)
{
	struct job *j = req->data;
	const swp_msg *m = &j->msg;
	uint32_t H = m->shape[0], R = m->shape[1], K = m->shape[2];
	swd_layer *ly = calloc(1, sizeof(*ly));
	if (!ly)
		return;
	ly->layer = m->layer;
	ly->heads = H;
	ly->rows = R;
	ly->keys = K;
	ly->bytes = j->reserved;
	int fixed = j->run->meta.fixed_probe;
	int pairs = D.cfg.pair_metrics && H > 1 && m->kind != SWP_ROWSTATS;
	ly->acc = calloc(H, sizeof(*ly->acc));
	if (pairs)
		ly->pairs = calloc((size_t)H * H, sizeof(*ly->pairs));
	if (fixed)
		ly->rows_st = calloc((size_t)H * R, sizeof(*ly->rows_st));
	size_t nln = 0;
	if (fixed && m->kind != SWP_ROWSTATS && D.cfg.drift_rows > 0) {
		nln = (size_t)D.cfg.drift_rows < R ? (size_t)D.cfg.drift_rows : R;
		ly->ln = malloc((size_t)H * nln * K * sizeof(float) + nln * sizeof(uint32_t));
		if (ly->ln) {
			/* METRICS.md §5: which rows, from qpos; fewer when rows are short */
			ly->ln_rows = (uint32_t *)(ly->ln + (size_t)H * nln * K);
			nln = swm_pick_rows(m->qpos, R, K, nln, ly->ln_rows);
			ly->nln = (uint32_t)nln;
		}
	}
	if (!ly->acc || (pairs && !ly->pairs) || (fixed && !ly->rows_st) || (nln && !ly->ln)) {
		swd_layer_free(ly, NULL);
		return;
	}
	swm_opts o;
	swm_opts_default(&o);
	const void *data = zmq_msg_data(&j->tensor);
	if (m->kind == SWP_ROWSTATS) {
		double tol = swm_opts_tol(&o, (swm_dtype)m->dtype);
		for (uint32_t h = 0; h < H; h++)
			for (uint32_t r = 0; r < R; r++) {
				double v[6];
				size_t base = ((size_t)h * R + r) * 6;
				for (int f = 0; f < 6; f++)
					v[f] = swm_load(data, (swm_dtype)m->dtype, base + (size_t)f);
				swm_row row;
				swm_row_from_stats(v, tol, &row);
				swm_head_add(&ly->acc[h], &row);
				if (ly->rows_st)
					ly->rows_st[(size_t)h * R + r] = row;
			}
	} else {
		uint32_t *nvalid = NULL;
		if (m->qpos && (nvalid = malloc(R * sizeof(uint32_t))))
			for (uint32_t r = 0; r < R; r++)
				nvalid[r] = m->qpos[r] >= K ? K : m->qpos[r] + 1;
		size_t sb = (swm_block_scratch(H, K) + 63) & ~(size_t)63;
		void *scratch = aligned_alloc(64, sb);
		uint32_t *pick = pairs ? malloc(R * sizeof(uint32_t)) : NULL;
		size_t npair = 0;
		if (pick && D.cfg.pair_rows > 0)
			npair = swm_pick_rows(m->qpos, R, K, (size_t)D.cfg.pair_rows, pick);
		else if (pick)
			npair = swm_pick_all(R, pick);
		if (!scratch || (m->qpos && !nvalid) || (pairs && !pick)) {
			free(scratch);
			free(nvalid);
			free(pick);
			swd_layer_free(ly, NULL);
			return;
		}
		swm_block blk = {
			.data = data, .dtype = (swm_dtype)m->dtype,
			.kind = m->kind == SWP_LOGITS ? SWM_LOGITS : SWM_PROBS,
			.heads = H, .rows = R, .keys = K,
			.head_stride = (size_t)R * K, .row_stride = K,
			.nvalid = nvalid, .sink = m->sink,
			.pair_pick = pick, .npair = npair, .rows_out = ly->rows_st,
			.ln_pick = ly->ln_rows, .nln = nln, .ln_out = ly->ln,
		};
		swm_block_add(&blk, &o, scratch, ly->acc, ly->pairs);
		free(scratch);
		free(nvalid);
		free(pick);
	}
	for (uint32_t h = 0; h < H; h++) {
		j->rows_counted += (int64_t)ly->acc[h].rows;
		for (int s = 1; s < SWM_STATUS__N; s++)
			j->rejects[s] += (int64_t)ly->acc[h].rejected[s];
	}
	j->out = ly;
}

static struct step *
find_step(struct run *r, int64_t step)
{
	for (struct step *s = r->open; s; s = s->next)
		if (s->step == step)
			return s;
	return NULL;
}

static void
after_work_cb(uv_work_t *req, int status)
{
	struct job *j = req->data;
	struct run *r = j->run;
	(void)status;
	D.jobs--;
	r->jobs--;
	size_t tensor_bytes = zmq_msg_size(&j->tensor);
	zmq_msg_close(&j->tensor);
	atomic_fetch_sub(&D.inflight, (long long)tensor_bytes);
	atomic_fetch_add(&D.rows, j->rows_counted);
	for (int s = 1; s < SWM_STATUS__N; s++)
		atomic_fetch_add(&D.rejects[s], j->rejects[s]);
	struct step *s = find_step(r, j->step);
	if (!j->out) {
		D.drops[SWD_DROP_NOMEM]++;
		atomic_fetch_sub(&D.inflight, (long long)(j->reserved - tensor_bytes));
		if (s) {
			s->state[j->msg.layer] = 0;
			s->in_work--;
		}
	} else if (!s) {
		/* the step was written meanwhile (timeout or shutdown) */
		D.drops[SWD_DROP_LATE]++;
		j->out->bytes -= tensor_bytes;
		swd_layer_free(j->out, &D.inflight);
	} else {
		j->out->bytes -= tensor_bytes;	/* the frame is gone; the result stays */
		s->layers[j->msg.layer] = j->out;
		s->state[j->msg.layer] = 2;
		s->in_work--;
		s->have++;
		if (s->have == r->meta.layers) {
			s->complete = 1;
			release_ready(r);
		}
	}
	swp_msg_clear(&j->msg);
	free(j);
	maybe_finish_run(r);
}

/* ---- receiving ------------------------------------------------------------- */

static int
meta_matches(const swd_meta *a, const swp_msg *m, char *why, size_t len)
{
	if (a->layers != m->layers || a->heads != m->heads || a->sink != m->sink)
		snprintf(why, len, "layers/heads/sink %u/%u/%u, the run has %u/%u/%u",
		    m->layers, m->heads, m->sink, a->layers, a->heads, a->sink);
	else if (a->kind != m->kind || a->rows != m->shape[1] || a->keys != m->shape[2])
		snprintf(why, len, "kind %s shape [%u, %u, %u], the run has %s [%u, %u, %u]",
		    swp_kind_name(m->kind), m->shape[0], m->shape[1], m->shape[2],
		    swp_kind_name(a->kind), a->heads, a->rows, a->keys);
	else if (a->fixed_probe != (int)m->fixed_probe)
		snprintf(why, len, "fixed_probe changed");
	else
		return 1;
	return 0;
}

/* Bytes a layer's result holds until the writer is done with it. */
static size_t
result_bytes(const swp_msg *m, int fixed)
{
	size_t H = m->shape[0], R = m->shape[1], K = m->shape[2];
	size_t b = sizeof(swd_layer) + H * sizeof(swm_head_acc) + H * H * sizeof(swm_pair_acc);
	if (fixed) {
		size_t nln = (size_t)D.cfg.drift_rows < R ? (size_t)D.cfg.drift_rows : R;
		b += H * R * sizeof(swm_row) + H * nln * K * sizeof(float) + nln * sizeof(uint32_t);
	}
	/* a worker's scratch, nvalid and pair rows, while it runs */
	return b + swm_block_scratch(H, K) + 64 + 2 * R * sizeof(uint32_t);
}

static void
seq_check(struct run *r, uint64_t seq)
{
	if (seq > r->expect_seq) {
		r->lost += (int64_t)(seq - r->expect_seq);
		if (may_log())
			log_warn("run %s: %llu message(s) lost before seq %llu", r->meta.run,
			    (unsigned long long)(seq - r->expect_seq), (unsigned long long)seq);
	}
	if (seq >= r->expect_seq)
		r->expect_seq = seq + 1;
}

static void
handle(zmq_msg_t *frames, size_t n)
{
	const void *ptrs[MAX_FRAMES];
	size_t sizes[MAX_FRAMES];
	char detail[256], why[256];
	swp_msg m;
	swp_limits lim = { (uint64_t)D.cfg.max_message_mb << 20 };

	for (size_t i = 0; i < n && i < MAX_FRAMES; i++) {
		ptrs[i] = zmq_msg_data(&frames[i]);
		sizes[i] = zmq_msg_size(&frames[i]);
		D.bytes += (int64_t)sizes[i];
	}
	D.messages++;
	detail[0] = '\0';
	int rc = swp_decode(ptrs, sizes, n, &lim, &m, detail, sizeof(detail));
	if (rc < 0) {
		int idx = -rc < SWD_DECODE_ERRORS ? -rc : 0;
		D.decode_errors[idx]++;
		if (may_log())
			log_warn("bad message: %s: %s", swp_errname(rc), detail);
		return;
	}
	struct run *r = find_run(m.run);
	if (m.type == SWP_END) {
		if (!r) {
			drop(SWD_DROP_UNKNOWN_RUN, m.run, "end of a run with nothing in flight");
		} else {
			r->messages++;
			seq_check(r, m.seq);
			r->ending = 1;
			log_info("run %s: end received (lost %lld, incomplete %lld)", r->meta.run,
			    (long long)r->lost, (long long)r->incomplete);
			maybe_finish_run(r);
		}
		swp_msg_clear(&m);
		return;
	}
	if (D.stopping) {
		drop(SWD_DROP_STOPPING, m.run, "shutting down");
		swp_msg_clear(&m);
		return;
	}
	if (!r) {
		if (D.nruns >= D.cfg.max_runs) {
			drop(SWD_DROP_TOO_MANY_RUNS, m.run, "max_runs reached");
			swp_msg_clear(&m);
			return;
		}
		if (!(r = calloc(1, sizeof(*r)))) {
			drop(SWD_DROP_NOMEM, m.run, "no memory for a run");
			swp_msg_clear(&m);
			return;
		}
		swd_meta *mm = &r->meta;
		memcpy(mm->run, m.run, sizeof(mm->run));
		memcpy(mm->model, m.model, sizeof(mm->model));
		mm->params = m.params;
		mm->layers = m.layers;
		mm->heads = m.heads;
		mm->sink = m.sink;
		mm->rows = m.shape[1];
		mm->keys = m.shape[2];
		mm->fixed_probe = m.fixed_probe;
		mm->kind = m.kind;
		mm->dtype = m.dtype;
		r->expect_seq = m.seq;	/* a daemon that starts mid-run loses nothing */
		r->last_step = -1;
		r->next = D.runs;
		D.runs = r;
		D.nruns++;
		log_info("run %s: first message (model %s, %u layers x %u heads, %s %s "
		    "[%u, %u, %u], %s probe)", m.run, m.model[0] ? m.model : "-", m.layers,
		    m.heads, swp_kind_name(m.kind), swp_dtype_name(m.dtype), m.shape[0],
		    m.shape[1], m.shape[2], m.fixed_probe ? "fixed" : "varying");
	}
	r->messages++;
	r->last_ms = mono_ms();
	seq_check(r, m.seq);
	if (r->ending) {
		drop(SWD_DROP_AFTER_END, m.run, "the run was ended");
		goto out;
	}
	if (!meta_matches(&r->meta, &m, why, sizeof(why))) {
		drop(SWD_DROP_MISMATCH, m.run, why);
		goto out;
	}
	struct step *s = find_step(r, m.step);
	if (!s) {
		for (size_t i = 0; i < RECENT && i < r->nrecent; i++)
			if (r->recent[i] == m.step) {
				snprintf(why, sizeof(why), "step %lld layer %u: the step was already written",
				    (long long)m.step, m.layer);
				drop(SWD_DROP_LATE, m.run, why);
				goto out;
			}
	} else if (s->state[m.layer]) {
		snprintf(why, sizeof(why), "step %lld layer %u arrived twice", (long long)m.step, m.layer);
		drop(SWD_DROP_DUPLICATE, m.run, why);
		goto out;
	}
	size_t need = m.tensor_bytes + result_bytes(&m, r->meta.fixed_probe);
	if ((int64_t)atomic_load(&D.inflight) + (int64_t)need > D.cfg.budget_mb << 20) {
		snprintf(why, sizeof(why), "%zu bytes would pass the budget of %lld MiB", need,
		    (long long)D.cfg.budget_mb);
		drop(SWD_DROP_BUDGET, m.run, why);
		goto out;
	}
	if (!s) {
		if (r->nopen >= D.cfg.max_open_steps) {
			/*
			 * Too many steps waiting: the earliest goes out incomplete if
			 * none of its layers is in work (steps whose layers are all in
			 * work are not waiting; the budget bounds them).
			 */
			struct step *first = min_open_step(r);
			if (first && !first->in_work) {
				emit_step(r, first);
				release_ready(r);
			}
		}
		s = calloc(1, sizeof(*s));
		if (s) {
			s->state = calloc(r->meta.layers, 1);
			s->layers = calloc(r->meta.layers, sizeof(*s->layers));
		}
		if (!s || !s->state || !s->layers) {
			if (s)
				free_step(s, 0);
			drop(SWD_DROP_NOMEM, m.run, "no memory for a step");
			goto out;
		}
		s->step = m.step;
		s->first_ms = mono_ms();
		s->next = r->open;
		r->open = s;
		r->nopen++;
	}
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		drop(SWD_DROP_NOMEM, m.run, "no memory for a job");
		goto out;
	}
	j->run = r;
	j->step = m.step;
	j->msg = m;
	m.qpos = NULL;	/* the job owns it now */
	j->msg.tensor = NULL;
	zmq_msg_init(&j->tensor);
	zmq_msg_move(&j->tensor, &frames[2]);	/* zero-copy: the frame itself */
	j->reserved = need;
	j->req.data = j;
	atomic_fetch_add(&D.inflight, (long long)need);
	s->state[m.layer] = 1;
	s->in_work++;
	r->jobs++;
	D.jobs++;
	if (uv_queue_work(D.loop, &j->req, work_cb, after_work_cb) != 0) {
		/* cannot happen with a valid loop; undo */
		r->jobs--;
		D.jobs--;
		s->state[m.layer] = 0;
		s->in_work--;
		atomic_fetch_sub(&D.inflight, (long long)need);
		zmq_msg_close(&j->tensor);
		swp_msg_clear(&j->msg);
		free(j);
		drop(SWD_DROP_NOMEM, m.run, "uv_queue_work failed");
	}
out:
	swp_msg_clear(&m);
}

/* Receives one multipart message; 1 if one was read, 0 if none was ready. */
static int
recv_one(void)
{
	zmq_msg_t frames[MAX_FRAMES];
	size_t n = 0;
	int more = 1;
	while (more) {
		zmq_msg_t f;
		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, D.sub, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f);
			if (n == 0)
				return 0;
			break;	/* cannot happen: the parts of a message arrive together */
		}
		more = zmq_msg_more(&f);
		if (n < MAX_FRAMES) {
			zmq_msg_init(&frames[n]);
			zmq_msg_move(&frames[n], &f);
		}
		n++;
		zmq_msg_close(&f);
	}
	handle(frames, n < MAX_FRAMES ? n : MAX_FRAMES + (n > MAX_FRAMES));
	for (size_t i = 0; i < n && i < MAX_FRAMES; i++)
		zmq_msg_close(&frames[i]);
	return 1;
}

static int
sock_readable(void *sock)
{
	int ev = 0;
	size_t len = sizeof(ev);
	if (zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) != 0)
		return 0;
	return (ev & ZMQ_POLLIN) != 0;
}

static void drain_idle_cb(uv_idle_t *h);

/*
 * ZMQ_FD is edge-triggered: it signals once for many messages. Drain while
 * ZMQ_EVENTS says a message is ready, checking again after each receive; stop
 * after a batch and continue from an idle handle so that timers, signals and
 * the control socket are served between batches.
 */
static void
drain(void)
{
	int64_t n = 0;
	D.drain_rounds++;
	while (D.sub && sock_readable(D.sub)) {
		if (!recv_one())
			break;
		if (++n >= D.cfg.batch) {
			D.batch_limit_hits++;
			if (!D.draining_idle) {
				uv_idle_start(&D.drain_idle, drain_idle_cb);
				D.draining_idle = 1;
			}
			break;
		}
	}
	if (n > D.max_batch)
		D.max_batch = n;
	if (n < D.cfg.batch && D.draining_idle) {
		uv_idle_stop(&D.drain_idle);
		D.draining_idle = 0;
	}
}

static void
drain_idle_cb(uv_idle_t *h)
{
	(void)h;
	drain();
}

static void
sub_poll_cb(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)status;
	(void)events;
	D.loop_turns++;
	drain();
}

/* ---- control ------------------------------------------------------------------ */

static void
fill_status(swd_status *st, swd_status_run *runs, size_t maxruns)
{
	memset(st, 0, sizeof(*st));
	st->version = PACKAGE_VERSION;
	st->listen = D.cfg.listen;
	st->control = D.cfg.control;
	st->data_dir = D.cfg.data_dir;
	st->uptime_s = wall_now() - D.started;
	st->pid = (long)getpid();
	size_t n = 0;
	for (struct run *r = D.runs; r && n < maxruns; r = r->next, n++) {
		runs[n].run = r->meta.run;
		runs[n].model = r->meta.model;
		runs[n].split_form = r->meta.fixed_probe ? "paired" : "aggregate";
		runs[n].layers = r->meta.layers;
		runs[n].heads = r->meta.heads;
		runs[n].steps_written = r->steps_done;
		runs[n].last_step = r->last_step;
		runs[n].open_steps = r->nopen;
		runs[n].lost = r->lost;
		runs[n].incomplete = r->incomplete;
		runs[n].messages = r->messages;
	}
	st->nruns = n;
	st->runs = runs;
	st->messages = D.messages;
	st->bytes = D.bytes;
	st->rows = atomic_load(&D.rows);
	st->steps_complete = D.steps_complete;
	st->steps_incomplete = D.steps_incomplete;
	int span = D.ring_fill < 10 ? D.ring_fill : 10;
	if (span > 0) {
		int now = D.ring_pos, then = (D.ring_pos - span + 11) % 11;
		st->rows_per_s = (double)(D.ring_rows[now] - D.ring_rows[then]) / span;
		st->msgs_per_s = (double)(D.ring_msgs[now] - D.ring_msgs[then]) / span;
	}
	memcpy(st->drops, D.drops, sizeof(st->drops));
	memcpy(st->decode_errors, D.decode_errors, sizeof(st->decode_errors));
	for (int i = 0; i < SWM_STATUS__N; i++)
		st->rejects[i] = atomic_load(&D.rejects[i]);
	st->inflight_bytes = atomic_load(&D.inflight);
	st->budget_bytes = D.cfg.budget_mb << 20;
	st->jobs_in_flight = D.jobs;
	const swd_wstats *ws = swd_writer_stats(D.writer);
	st->writer_queue = atomic_load(&ws->queue_depth);
	st->steps_written = atomic_load(&ws->steps_written);
	st->write_errors = atomic_load(&ws->write_errors);
	st->flushes = atomic_load(&ws->flushes);
	st->files_open = atomic_load(&ws->files_open);
	st->max_flush_us = atomic_load(&ws->max_flush_us);
	st->loop_turns = D.loop_turns;
	st->drain_rounds = D.drain_rounds;
	st->max_batch = D.max_batch;
	st->batch_limit_hits = D.batch_limit_hits;
	st->loop_idle_s = (double)uv_metrics_idle_time(D.loop) * 1e-9;
}

static void
ctl_poll_cb(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)status;
	(void)events;
	static char out[1 << 16];
	static swd_status_run runs[256];
	while (D.ctl && sock_readable(D.ctl)) {
		char req[256];
		int n = zmq_recv(D.ctl, req, sizeof(req), ZMQ_DONTWAIT);
		if (n < 0)
			break;
		int more = 0;
		size_t ml = sizeof(more);
		zmq_getsockopt(D.ctl, ZMQ_RCVMORE, &more, &ml);
		while (more) {	/* a request is one frame: discard the rest */
			char junk[64];
			zmq_recv(D.ctl, junk, sizeof(junk), 0);
			zmq_getsockopt(D.ctl, ZMQ_RCVMORE, &more, &ml);
		}
		swd_status st;
		fill_status(&st, runs, sizeof(runs) / sizeof(runs[0]));
		size_t len = swd_control_reply(req, (size_t)(n < (int)sizeof(req) ? n : (int)sizeof(req)),
		    &st, out, sizeof(out));
		zmq_send(D.ctl, out, len, 0);
	}
}

/* ---- timers, signals, shutdown ------------------------------------------------- */

static void
finish_shutdown(void)
{
	/* every open step goes out, incomplete ones counted */
	while (D.runs) {
		struct run *r = D.runs;
		emit_all(r);
		D.runs = r->next;
		free(r);
	}
	swd_writer_stop(&D.writer);
	uv_timer_stop(&D.tick);
	uv_close((uv_handle_t *)&D.tick, NULL);
	uv_close((uv_handle_t *)&D.drain_idle, NULL);
	uv_close((uv_handle_t *)&D.sigint, NULL);
	uv_close((uv_handle_t *)&D.sigterm, NULL);
	uv_close((uv_handle_t *)&D.sighup, NULL);
	if (D.ctl) {
		uv_poll_stop(&D.ctl_poll);
		uv_close((uv_handle_t *)&D.ctl_poll, NULL);
		zmq_close(D.ctl);
		D.ctl = NULL;
	}
	log_info("stopped");
}

static void
tick_cb(uv_timer_t *t)
{
	(void)t;
	if (D.stopping) {
		if (D.jobs == 0)
			finish_shutdown();
		return;
	}
	uint64_t now = mono_ms();
	/* the earliest open step of a run times out; later ones follow in order */
	for (struct run *r = D.runs, *next; r; r = next) {
		struct step *m;
		next = r->next;
		while ((m = min_open_step(r)) && (m->complete || (!m->in_work &&
		    now - m->first_ms >= (uint64_t)D.cfg.step_timeout_ms)))
			emit_step(r, m);
		if (r->jobs == 0 && !r->ending && now - r->last_ms >= (uint64_t)D.cfg.run_idle_s * 1000) {
			log_info("run %s: no message for %lld s: closing its file", r->meta.run,
			    (long long)D.cfg.run_idle_s);
			finish_run(r, WQ_CLOSE);
		}
	}
	static uint64_t last_sample;
	if (now - last_sample >= 1000) {
		last_sample = now;
		D.ring_pos = (D.ring_pos + 1) % 11;
		D.ring_rows[D.ring_pos] = atomic_load(&D.rows);
		D.ring_msgs[D.ring_pos] = D.messages;
		if (D.ring_fill < 11)
			D.ring_fill++;
	}
	/* a missed edge on ZMQ_FD would stall receiving: look again */
	drain();
}

static void
signal_cb(uv_signal_t *h, int signum)
{
	(void)h;
	if (signum == SIGHUP) {
		if (log_reopen() != 0)
			log_err("SIGHUP: cannot reopen %s: %s", D.cfg.log_file, strerror(errno));
		else
			log_info("SIGHUP: log reopened");
		return;
	}
	if (D.stopping)
		return;
	log_info("%s: stopping: finishing %lld job(s) in flight, then flushing",
	    signum == SIGINT ? "SIGINT" : "SIGTERM", (long long)D.jobs);
	D.stopping = 1;
	if (D.sub) {
		uv_poll_stop(&D.sub_poll);
		uv_close((uv_handle_t *)&D.sub_poll, NULL);
		zmq_close(D.sub);
		D.sub = NULL;
	}
	if (D.draining_idle) {
		uv_idle_stop(&D.drain_idle);
		D.draining_idle = 0;
	}
	uv_timer_stop(&D.tick);
	uv_timer_start(&D.tick, tick_cb, 0, 10);
}

/* ---- start-up --------------------------------------------------------------------- */

static void
usage(FILE *f)
{
	fprintf(f, "usage: sinkwatchd [--config FILE] [--check-config] [--print-config]\n"
	    "                  [--OPTION VALUE ...] [--help] [--version]\n\noptions:\n");
	for (size_t i = 0; i < swd_config_count(); i++) {
		char flag[64];
		snprintf(flag, sizeof(flag), "--%s", swd_config_name(i));
		for (char *p = flag; *p; p++)
			if (*p == '_')
				*p = '-';
		fprintf(f, "  %-22s %s (default: %s)\n", flag, swd_config_help(i),
		    swd_config_default(i)[0] ? swd_config_default(i) : "\"\"");
	}
}

static int
mkdirs(const char *path)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int
setup_sockets(char *err, size_t errlen)
{
	if (!(D.zctx = zmq_ctx_new())) {
		snprintf(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		return -1;
	}
	D.sub = zmq_socket(D.zctx, ZMQ_SUB);
	int64_t maxmsg = ((int64_t)D.cfg.max_message_mb << 20) > SWP_HEADER_MAX ?
	    (int64_t)D.cfg.max_message_mb << 20 : SWP_HEADER_MAX;
	/* ZeroMQ's own queue is outside the budget: keep it short */
	int hwm = 8, zero = 0;
	char topic[SWP_TOPIC_PREFIX_LEN + sizeof(D.cfg.subscribe)];
	int tl = snprintf(topic, sizeof(topic), "%s%s", SWP_TOPIC_PREFIX, D.cfg.subscribe);
	if (!D.sub || zmq_setsockopt(D.sub, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(D.sub, ZMQ_RCVHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(D.sub, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_setsockopt(D.sub, ZMQ_SUBSCRIBE, topic, (size_t)tl)) {
		snprintf(err, errlen, "SUB socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(D.sub, D.cfg.listen) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", D.cfg.listen, zmq_strerror(errno));
		return -1;
	}
	D.ctl = zmq_socket(D.zctx, ZMQ_REP);
	int64_t ctlmax = 4096;
	if (!D.ctl || zmq_setsockopt(D.ctl, ZMQ_MAXMSGSIZE, &ctlmax, sizeof(ctlmax)) ||
	    zmq_setsockopt(D.ctl, ZMQ_LINGER, &zero, sizeof(zero))) {
		snprintf(err, errlen, "control socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(D.ctl, D.cfg.control) != 0) {
		snprintf(err, errlen, "cannot bind the control endpoint %s: %s", D.cfg.control,
		    zmq_strerror(errno));
		return -1;
	}
	return 0;
}

static int
poll_fd(void *sock, uv_poll_t *p, uv_poll_cb cb)
{
	int fd;
	size_t len = sizeof(fd);
	if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0)
		return -1;
	if (uv_poll_init(D.loop, p, fd) != 0)
		return -1;
	return uv_poll_start(p, UV_READABLE, cb);
}

int
main(int argc, char **argv)
{
	char err[1024];
	int check = 0, print = 0;
	const char *config_file = NULL;

	swd_config_defaults(&D.cfg);
	/* the config file first, then the flags over it */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config_file = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			config_file = argv[i] + 9;
	}
	if (config_file && swd_config_load(&D.cfg, config_file, err, sizeof(err)) != 0) {
		fprintf(stderr, "sinkwatchd: %s\n", err);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
		} else if (!strncmp(a, "--config=", 9)) {
			continue;
		} else if (!strcmp(a, "--check-config")) {
			check = 1;
		} else if (!strcmp(a, "--print-config")) {
			print = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("sinkwatchd %s (protocol %d, metric contract %d)\n", PACKAGE_VERSION,
			    SWP_VERSION, SWM_CONTRACT_VERSION);
			return 0;
		} else if (!strncmp(a, "--", 2)) {
			char name[64];
			const char *eq = strchr(a, '='), *val;
			size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			if (nl >= sizeof(name)) {
				fprintf(stderr, "sinkwatchd: unknown option '%s'\n", a);
				return 2;
			}
			memcpy(name, a + 2, nl);
			name[nl] = '\0';
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else {
				fprintf(stderr, "sinkwatchd: %s needs a value\n", a);
				return 2;
			}
			if (swd_config_set(&D.cfg, name, val, err, sizeof(err)) != 0) {
				fprintf(stderr, "sinkwatchd: %s (sinkwatchd --help lists the options)\n", err);
				return 2;
			}
		} else {
			fprintf(stderr, "sinkwatchd: unexpected argument '%s'\n", a);
			return 2;
		}
	}
	if (swd_config_check(&D.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "sinkwatchd: %s\n", err);
		return 2;
	}
	if (print)
		swd_config_print(&D.cfg, stdout);
	if (check) {
		if (!print)
			printf("sinkwatchd: configuration OK\n");
		return 0;
	}
	if (print)
		return 0;

	log_set_level(D.cfg.log_level);
	if (D.cfg.log_file[0] && log_open(D.cfg.log_file) != 0) {
		fprintf(stderr, "sinkwatchd: cannot open the log %s: %s\n", D.cfg.log_file,
		    strerror(errno));
		return 2;
	}
	if (mkdirs(D.cfg.data_dir) != 0) {
		log_err("cannot create the data directory %s: %s", D.cfg.data_dir, strerror(errno));
		return 2;
	}
	/* one writer per data directory: run files are resumed without HDF5 locks */
	char lockp[1100];
	snprintf(lockp, sizeof(lockp), "%s/.sinkwatchd.lock", D.cfg.data_dir);
	int lockfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
		log_err("%s: %s", lockp, lockfd < 0 ? strerror(errno) :
		    "another sinkwatchd writes to this data directory");
		return 2;
	}
	/*
	 * Message buffers (ZeroMQ mallocs each frame) are large and short-lived:
	 * served from the heap and kept there up to the budget, rather than
	 * mmapped and unmapped per message, which costs a page fault per 4 KiB
	 * of every frame received. The budget still bounds what is in flight.
	 * One arena: ZeroMQ's I/O thread allocates the frames and the workers
	 * free them, and a per-thread arena unmaps a heap of its own whenever
	 * that heap empties (glibc's heap_trim), faulting it in again for the
	 * next frames: 10000 faults per 289-message flood at steady state with
	 * per-thread arenas, 0 with one (16 us a fault on the bench's VM; the
	 * daemon's CPU per message 6.4 -> 5.2 ms). The allocation rate is a
	 * few calls per message, so the shared arena lock costs nothing.
	 */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, (int)(D.cfg.budget_mb < 1024 ? D.cfg.budget_mb << 20 : 1 << 30));
	char nthreads[16];
	snprintf(nthreads, sizeof(nthreads), "%lld", (long long)D.cfg.workers);
	setenv("UV_THREADPOOL_SIZE", nthreads, 1);
	signal(SIGPIPE, SIG_IGN);
	D.loop = uv_default_loop();
	uv_loop_configure(D.loop, UV_METRICS_IDLE_TIME);
	D.started = wall_now();
	atomic_init(&D.inflight, 0);
	if (setup_sockets(err, sizeof(err)) != 0) {
		log_err("%s", err);
		return 2;
	}
	if (swd_writer_start(&D.writer, &D.cfg, &D.inflight) != 0) {
		log_err("cannot start the writer thread");
		return 2;
	}
	if (poll_fd(D.sub, &D.sub_poll, sub_poll_cb) != 0 ||
	    poll_fd(D.ctl, &D.ctl_poll, ctl_poll_cb) != 0) {
		log_err("cannot watch the ZeroMQ sockets");
		return 2;
	}
	uv_idle_init(D.loop, &D.drain_idle);
	uv_timer_init(D.loop, &D.tick);
	uv_timer_start(&D.tick, tick_cb, 100, 100);
	uv_signal_init(D.loop, &D.sigint);
	uv_signal_init(D.loop, &D.sigterm);
	uv_signal_init(D.loop, &D.sighup);
	uv_signal_start(&D.sigint, signal_cb, SIGINT);
	uv_signal_start(&D.sigterm, signal_cb, SIGTERM);
	uv_signal_start(&D.sighup, signal_cb, SIGHUP);
	log_info("listening on %s, control on %s, data in %s (budget %lld MiB, flush %lld ms)",
	    D.cfg.listen, D.cfg.control, D.cfg.data_dir, (long long)D.cfg.budget_mb,
	    (long long)D.cfg.flush_ms);
	/* the first messages may already be queued: look before waiting */
	drain();
	uv_run(D.loop, UV_RUN_DEFAULT);
	uv_loop_close(D.loop);
	zmq_ctx_term(D.zctx);
	return 0;
}
