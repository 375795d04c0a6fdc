/*
 * sinkwatchd.c: the daemon. The libuv loop owns the ZeroMQ sockets: it
 * drains the SUB socket in bounded batches, validates each message, charges
 * it against the in-flight budget, hands its layer to a pool thread for the
 * metric core, assembles steps from layers, and passes complete (or timed
 * out) steps to the writer thread.
 */
#include <errno.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>
#include <zmq.h>

#include "config.h"
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "daemon/assembly.h"
#include "daemon/conf.h"
#include "daemon/daemon.h"
#include "net/log.h"
#include "daemon/prom.h"
#include "daemon/status.h"
#include "net/auth.h"
#include "net/swnet.h"
#include "proto/swkeys.h"

#define MAX_FRAMES 4
struct job {
	uv_work_t req;
	swd_ticket t;
	int64_t step;
	swp_msg msg;
	zmq_msg_t tensor;
	void *data;		/* a gathered layer's tensor (then tensor is empty) */
	size_t data_bytes;
	int32_t *miss;		/* [heads] heads to mark missing, or NULL */
	size_t reserved;
	swd_layer *out;
	int64_t rows_counted, rejects[SWM_STATUS__N];
	int64_t pair_ns;	/* the pair work's share of the job's CPU (swm_block) */
};

static struct {
	swd_config cfg;
	uv_loop_t *loop;
	void *zctx, *sub, *ctl;
	uv_poll_t sub_poll, ctl_poll;
	uv_idle_t drain_idle;
	uv_timer_t tick, watchdog;
	uint64_t watchdog_usec;	/* systemd's WATCHDOG_USEC, 0: none */
	swd_prom *metrics;	/* GET /metrics, or NULL */
	swd_auth *auth;		/* the ZAP handler (CURVE on), or NULL */
	char curve_public[SWP_KEY_LEN + 1];	/* the daemon's public key, CURVE on */
	int64_t upstream_refused_seen;	/* refusals by the forwarder acted on */
	uint64_t upstream_retry_ms;	/* when the SUB last connected again */
	long long writer_items;	/* the writer's progress at the last ping */
	uv_signal_t sigint, sigterm, sighup;
	int stopping, draining_idle;
	swd_asm *as;
	swd_writer *writer;
	atomic_llong inflight;
	int64_t jobs;
	double started;
	/* counters */
	int64_t messages, bytes;
	atomic_llong rows, rejects[SWM_STATUS__N];
	int64_t drops[SWD_DROP_REASONS], decode_errors[SWD_DECODE_ERRORS];
	int64_t loop_turns, drain_rounds, max_batch, batch_limit_hits;
	/* rate ring: one sample a second */
	int64_t ring_rows[11], ring_msgs[11];
	int ring_pos, ring_fill;
	int argc;		/* the command line, read again at SIGHUP */
	char **argv;
	/* rate-limited logging of bad messages */
	int64_t log_window_ms, log_count;
	/* CPU by stage (status.h SWD_STAGES): the loop's own, the workers' summed */
	int64_t recv_ns, decode_ns;
	atomic_llong kernel_ns, pair_ns;	/* the workers' metric work; its pair part */
} D;

#ifdef __GNUC__
#define PRINTF_LIKE __attribute__((format(printf, 1, 2)))
#else
#define PRINTF_LIKE
#endif

static void notify_status(void);
static void publish_metrics(void);
static int read_config(int argc, char **argv, swd_config *c, char *err, size_t errlen);

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

/* This thread's CPU time, ns (cheap: one clock read). */
static int64_t
thread_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The assembly's steps and ends go to the writer. */
static void
to_writer(void *ud, swd_witem *it)
{
	(void)ud;
	swd_writer_push(D.writer, it);
}

/* ---- metric work on pool threads --------------------------------------- */

/*
 * cross_layer_pairs: the layer's pair rows, copied as sent, for the writer
 * to pair every head with the heads of the other layers (result_bytes
 * reserved their room). Without room the layer simply has none: its heads
 * are NaN in the cross-layer matrices.
 */
static void
keep_cross_rows(swd_layer *ly, const void *data, swm_dtype dt, const uint32_t *pick,
    size_t npick, const uint32_t *nvalid)
{
	size_t H = ly->heads, R = ly->rows, K = ly->keys, es = swm_dtype_size(dt);
	size_t rows_b = H * npick * K * es;
	char *x = malloc(rows_b + 2 * npick * sizeof(uint32_t));
	if (!x)
		return;
	for (size_t h = 0; h < H; h++)
		for (size_t i = 0; i < npick; i++)
			memcpy(x + (h * npick + i) * K * es,
			    (const char *)data + (h * R + pick[i]) * K * es, K * es);
	ly->xrows = x;
	ly->xvalid = (uint32_t *)(x + rows_b);
	ly->xidx = ly->xvalid + npick;
	for (size_t i = 0; i < npick; i++) {
		ly->xvalid[i] = nvalid ? nvalid[pick[i]] : (uint32_t)K;
		ly->xidx[i] = pick[i];
	}
	ly->nx = (uint32_t)npick;
}

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
	int fixed = m->fixed_probe;
	/* a copy (PROTOCOL.md 7b) is computed to be compared: heads and rows only */
	int pairs = D.cfg.pair_metrics && H > 1 && m->kind != SWP_ROWSTATS && !j->t.copy;
	ly->acc = calloc(H, sizeof(*ly->acc));
	if (pairs)
		ly->pairs = calloc((size_t)H * H, sizeof(*ly->pairs));
	if (fixed)
		ly->rows_st = calloc((size_t)H * R, sizeof(*ly->rows_st));
	size_t nln = 0;
	if (fixed && m->kind != SWP_ROWSTATS && D.cfg.drift_rows > 0 && !j->t.copy) {
		nln = (size_t)D.cfg.drift_rows < R ? (size_t)D.cfg.drift_rows : R;
		ly->ln = malloc((size_t)H * nln * K * sizeof(float) + nln * sizeof(uint32_t));
		if (ly->ln) {
			/* storage/LAYOUT.md (row_use): which rows, from qpos; fewer when rows are short */
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
	const void *data = j->data ? j->data : zmq_msg_data(&j->tensor);
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
		int cross = D.cfg.cross_layer_pairs && !j->t.copy;
		uint32_t *pick = pairs || cross ? malloc(R * sizeof(uint32_t)) : NULL;
		size_t npair = 0;
		if (pick && D.cfg.pair_rows > 0)
			npair = swm_pick_rows(m->qpos, R, K, (size_t)D.cfg.pair_rows, pick);
		else if (pick)
			npair = swm_pick_all(R, pick);
		if (!scratch || (m->qpos && !nvalid) || ((pairs || cross) && !pick)) {
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
			.pair_pick = pairs ? pick : NULL, .npair = pairs ? npair : 0,
			.rows_out = ly->rows_st,
			.ln_pick = ly->ln_rows, .nln = nln, .ln_out = ly->ln,
			.clock_ns = thread_ns, .pair_ns = &j->pair_ns,
		};
		swm_block_add(&blk, &o, scratch, ly->acc, ly->pairs);
		if (cross && npair)
			keep_cross_rows(ly, data, (swm_dtype)m->dtype, pick, npair, nvalid);
		free(scratch);
		free(nvalid);
		ly->pair_idx = pick;	/* recorded in the run file (row_use) */
		ly->npair = (uint32_t)npair;
	}
	if (j->miss) {
		/* heads whose parts never came: no rows, absent rows, no pairs */
		for (uint32_t h = 0; h < H; h++) {
			if (j->miss[h] == -1)
				continue;
			memset(&ly->acc[h], 0, sizeof(ly->acc[h]));
			for (uint32_t r = 0; ly->rows_st && r < R; r++) {
				swm_row *w = &ly->rows_st[(size_t)h * R + r];
				memset(w, 0, sizeof(*w));
				w->s = w->w = w->H = w->hb = w->Hc = w->C = w->b = NAN;
				w->status = (swm_status)SW_ROW_ABSENT;
			}
			free(ly->pairs);
			ly->pairs = NULL;
		}
		ly->miss_rank = j->miss;
		j->miss = NULL;
	}
	for (uint32_t h = 0; h < H; h++) {
		j->rows_counted += (int64_t)ly->acc[h].rows;
		for (int s = 1; s < SWM_STATUS__N; s++)
			j->rejects[s] += (int64_t)ly->acc[h].rejected[s];
	}
	j->out = ly;
}

/* work_cb, its CPU time counted (the kernel stage). */
static void
timed_work_cb(uv_work_t *req)
{
	struct job *j = req->data;
	int64_t t0 = thread_ns();
	j->pair_ns = 0;
	work_cb(req);
	/* the part first (fill_cpu reads it first): rows = kernel - pairs >= 0 */
	atomic_fetch_add(&D.pair_ns, j->pair_ns);
	atomic_fetch_add(&D.kernel_ns, thread_ns() - t0);
}

static void
after_work_cb(uv_work_t *req, int status)
{
	struct job *j = req->data;
	(void)status;
	D.jobs--;
	size_t tensor_bytes = j->data ? j->data_bytes : zmq_msg_size(&j->tensor);
	zmq_msg_close(&j->tensor);
	free(j->data);
	free(j->miss);
	atomic_fetch_sub(&D.inflight, (long long)tensor_bytes);
	atomic_fetch_add(&D.rows, j->rows_counted);
	for (int s = 1; s < SWM_STATUS__N; s++)
		atomic_fetch_add(&D.rejects[s], j->rejects[s]);
	if (!j->out) {	/* its messages are counted by the assembly (nomem) */
		atomic_fetch_sub(&D.inflight, (long long)(j->reserved - tensor_bytes));
	} else {
		j->out->bytes -= tensor_bytes;	/* the frame is gone; the result stays */
	}
	swd_asm_done(D.as, &j->t, j->out, mono_ms());
	swp_msg_clear(&j->msg);
	free(j);
}

/* ---- receiving ------------------------------------------------------------- */

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
	if (D.cfg.cross_layer_pairs && m->kind != SWP_ROWSTATS) {
		size_t nx = D.cfg.pair_rows > 0 && (size_t)D.cfg.pair_rows < R ?
		    (size_t)D.cfg.pair_rows : R;
		b += H * nx * K * swp_dtype_size(m->dtype) + 2 * nx * sizeof(uint32_t);
	}
	/* a worker's scratch, nvalid and pair rows, while it runs */
	return b + swm_block_scratch(H, K) + 64 + 2 * R * sizeof(uint32_t);
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
	int64_t t0 = thread_ns();
	int rc = swp_decode(ptrs, sizes, n, &lim, &m, detail, sizeof(detail));
	D.decode_ns += thread_ns() - t0;
	if (rc < 0) {
		int idx = -rc < SWD_DECODE_ERRORS ? -rc : 0;
		D.decode_errors[idx]++;
		if (may_log())
			log_warn("bad message: %s: %s", swp_errname(rc), detail);
		return;
	}
	/* a connection whose key was revoked since its handshake (SIGHUP) */
	const char *user = D.auth && !D.cfg.connect[0] ? zmq_msg_gets(&frames[0], "User-Id") : NULL;
	if (user && swd_auth_revoked(D.auth, user)) {
		swd_asm_refuse(D.as, &m, SWD_DROP_REVOKED);
		snprintf(why, sizeof(why), "its connection's key %.40s was removed from the allow "
		    "list", user);
		drop(SWD_DROP_REVOKED, m.run, why);
		swp_msg_clear(&m);
		return;
	}
	if (m.type == SWP_END) {
		rc = swd_asm_end(D.as, &m, mono_ms());
		if (rc != SWD_ASM_ACCEPT && rc != SWD_ASM_DEFERRED)	/* deferred: the writer's */
			drop(rc, m.run, rc == SWD_DROP_UNKNOWN_RUN ? "end of a run with nothing in "
			    "flight" : rc == SWD_DROP_SENDERS ? "an end whose senders is not its "
			    "incarnation's" : "a second end of its sender");
		swp_msg_clear(&m);
		return;
	}
	if (D.stopping) {
		swd_asm_refuse(D.as, &m, SWD_DROP_STOPPING);
		drop(SWD_DROP_STOPPING, m.run, "shutting down");
		swp_msg_clear(&m);
		return;
	}
	swd_ticket t;
	rc = swd_asm_admit(D.as, &m, mono_ms(), &t, why, sizeof(why));
	if (rc == SWD_ASM_HELD)
		goto out;	/* a part, gathered into its layer */
	if (rc == SWD_ASM_COPY)
		drop(SWD_DROP_DUPLICATE, m.run, why);	/* not stored; computed to compare */
	else if (rc != SWD_ASM_ACCEPT) {
		drop(rc, m.run, why);
		goto out;
	}
	size_t need = m.tensor_bytes + result_bytes(&m, m.fixed_probe);
	if ((int64_t)atomic_load(&D.inflight) + (int64_t)need > D.cfg.budget_mb << 20) {
		swd_asm_cancel(D.as, &t, SWD_DROP_BUDGET);
		if (t.copy)	/* counted a duplicate already; only its comparison is lost */
			goto out;
		snprintf(why, sizeof(why), "%zu bytes would pass the budget of %lld MiB", need,
		    (long long)D.cfg.budget_mb);
		drop(SWD_DROP_BUDGET, m.run, why);
		goto out;
	}
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		swd_asm_cancel(D.as, &t, SWD_DROP_NOMEM);
		if (!t.copy)
			drop(SWD_DROP_NOMEM, m.run, "no memory for a job");
		goto out;
	}
	j->t = t;
	j->step = m.step;
	j->msg = m;
	m.qpos = NULL;	/* the job owns it now */
	j->msg.tensor = NULL;
	zmq_msg_init(&j->tensor);
	zmq_msg_move(&j->tensor, &frames[2]);	/* zero-copy: the frame itself */
	j->reserved = need;
	j->req.data = j;
	atomic_fetch_add(&D.inflight, (long long)need);
	if (uv_queue_work(D.loop, &j->req, timed_work_cb, after_work_cb) != 0) {
		/* cannot happen with a valid loop; undo */
		swd_asm_cancel(D.as, &t, SWD_DROP_NOMEM);
		atomic_fetch_sub(&D.inflight, (long long)need);
		zmq_msg_close(&j->tensor);
		swp_msg_clear(&j->msg);
		free(j);
		if (!t.copy)
			drop(SWD_DROP_NOMEM, m.run, "uv_queue_work failed");
		goto out;
	}
	swd_asm_start(D.as, &t);
	D.jobs++;
out:
	swp_msg_clear(&m);
}

/* What a run of this shape holds while open (the assembly charges it). */
static size_t
run_state_bytes(void *ud, const swd_meta *m)
{
	(void)ud;
	return swd_run_state_bytes(m, (int)D.cfg.cross_layer_pairs);
}

/* What a gathered layer's computation holds (the assembly reserves it). */
static size_t
gathered_bytes(void *ud, const swp_msg *m)
{
	(void)ud;
	return result_bytes(m, m->fixed_probe);
}

/*
 * The assembly's gathered layers (parts of several senders, PROTOCOL.md
 * 7b): data and bytes, and the result's bytes (gathered_bytes, reserved
 * with the layer's first part), are counted in inflight already.
 * SWD_ASM_ACCEPT, or a drop reason (the assembly keeps what it passed).
 */
static int
start_gathered(void *ud, const swd_ticket *t, const swp_msg *m, void *data, size_t bytes,
    int32_t *miss)
{
	(void)ud;
	size_t need = result_bytes(m, m->fixed_probe);
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return SWD_DROP_NOMEM;
	j->t = *t;
	j->step = m->step;
	j->msg = *m;
	j->msg.tensor = NULL;
	zmq_msg_init(&j->tensor);
	j->reserved = need + bytes;
	j->req.data = j;
	j->data = data;
	j->data_bytes = bytes;
	j->miss = miss;
	if (uv_queue_work(D.loop, &j->req, timed_work_cb, after_work_cb) != 0) {
		/* cannot happen with a valid loop: the assembly keeps what it passed */
		zmq_msg_close(&j->tensor);
		free(j);
		return SWD_DROP_NOMEM;
	}
	D.jobs++;
	return SWD_ASM_ACCEPT;
}

/* Receives one multipart message; 1 if one was read, 0 if none was ready. */
static int
recv_one(void)
{
	zmq_msg_t frames[MAX_FRAMES];
	size_t n = 0;
	int more = 1;
	int64_t t0 = thread_ns();
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
	D.recv_ns += thread_ns() - t0;
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
fill_cpu(swd_status *st)
{
	double *c = st->stage_cpu_s;
	struct timespec ts;
	c[SWD_STAGE_RECEIVE] = (double)D.recv_ns * 1e-9;
	c[SWD_STAGE_DECODE] = (double)D.decode_ns * 1e-9;
	/* fill_status runs on the loop thread: its clock is the loop's */
	c[SWD_STAGE_ASSEMBLE] = (double)(thread_ns() - D.recv_ns - D.decode_ns) * 1e-9;
	/* the pair part first: the kernel clock, read after, has all of it */
	long long pn = atomic_load(&D.pair_ns), kn = atomic_load(&D.kernel_ns);
	c[SWD_STAGE_PAIRS] = (double)pn * 1e-9;
	c[SWD_STAGE_ROWS] = (double)(kn > pn ? kn - pn : 0) * 1e-9;
	c[SWD_STAGE_ZMQ_IO] = zmq_threads_cpu_s();
	/* drift first: the writer's clock, read after, has all of it */
	double dr = (double)atomic_load(&swd_writer_stats(D.writer)->drift_ns) * 1e-9,
	    wr = swd_writer_cpu_s(D.writer);
	c[SWD_STAGE_DRIFT] = dr;
	c[SWD_STAGE_WRITE] = wr > dr ? wr - dr : 0;
	/*
	 * Counters never go back: a drift call that ends between the two reads
	 * moves its time from write to drift at the next reading (microseconds).
	 * Only the loop thread calls this.
	 */
	static double last[SWD_STAGES_N];
	for (int i = 0; i < SWD_STAGES_N; i++) {
		if (c[i] < last[i])
			c[i] = last[i];
		last[i] = c[i];
	}
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	st->process_cpu_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
fill_status(swd_status *st, swd_status_run *runs, size_t maxruns)
{
	memset(st, 0, sizeof(*st));
	st->version = PACKAGE_VERSION;
	st->listen = D.cfg.connect[0] ? "- (connects instead)" : D.cfg.listen;
	st->connect = D.cfg.connect;
	st->subscribe = D.cfg.subscribe;
	st->kernel_isa = swm_isa();
	st->log_precision = swm_precision();
	st->control = D.cfg.control;
	st->data_dir = D.cfg.data_dir;
	st->uptime_s = swd_wall_now() - D.started;
	st->pid = (long)getpid();
	static swd_asm_run ar[256];
	size_t n = swd_asm_runs(D.as, ar, maxruns < 256 ? maxruns : 256);
	for (size_t i = 0; i < n; i++) {
		runs[i].run = ar[i].run;
		runs[i].model = ar[i].model;
		runs[i].split_form = ar[i].fixed_probe ? "paired" : "aggregate";
		runs[i].layers = ar[i].layers;
		runs[i].heads = ar[i].heads;
		runs[i].steps_written = ar[i].steps_done;
		runs[i].last_step = ar[i].last_step;
		runs[i].open_steps = ar[i].open_steps;
		runs[i].lost = ar[i].lost;
		runs[i].incomplete = ar[i].incomplete;
		runs[i].messages = ar[i].messages;
		runs[i].last_gap = ar[i].last_gap;
	}
	st->nruns = n;
	st->runs = runs;
	static swd_sender sd[1024];
	static const char *sr[1024];
	static swd_status_sender ss[1024];
	size_t ns = swd_asm_senders(D.as, sd, sr, 1024);
	for (size_t i = 0; i < ns; i++)
		swd_writer_fates(D.writer, &sd[i]);
	for (size_t i = 0; i < ns; i++)
		ss[i] = swd_sender_status(sr[i], &sd[i]);
	st->nsenders = ns;
	st->senders = ss;
	/* runs gone lately, and their senders' last counters with the writer's share */
	static swd_asm_run fa[SWD_ASM_FINISHED_MAX];
	static int fe[SWD_ASM_FINISHED_MAX];
	static swd_status_run fr[SWD_ASM_FINISHED_MAX];
	st->nfinished = swd_asm_finished(D.as, fa, fe, SWD_ASM_FINISHED_MAX);
	for (size_t i = 0; i < st->nfinished; i++)
		fr[i] = (swd_status_run){ fa[i].run, fa[i].model,
		    fa[i].fixed_probe ? "paired" : "aggregate", fa[i].layers, fa[i].heads,
		    fa[i].steps_done, fa[i].last_step, 0, fa[i].lost, fa[i].incomplete,
		    fa[i].messages, fa[i].last_gap, fe[i] ? "ended" : "closed" };
	st->finished = fr;
	static swd_sender fsd[1024];
	static const char *fsr[1024];
	static swd_status_sender fss[1024];
	st->nfinished_senders = swd_asm_finished_senders(D.as, fsd, fsr, 1024);
	for (size_t i = 0; i < st->nfinished_senders; i++) {
		swd_writer_fates(D.writer, &fsd[i]);
		fss[i] = swd_sender_status(fsr[i], &fsd[i]);
	}
	st->finished_senders = fss;
	static swd_asm_refused ra[SWD_ASM_REFUSED_MAX];
	static swd_status_refused rs[SWD_ASM_REFUSED_MAX];
	st->nrefused = swd_asm_refused_runs(D.as, ra, SWD_ASM_REFUSED_MAX);
	st->refused_total = swd_asm_refused_total(D.as);
	for (size_t i = 0; i < st->nrefused; i++)
		rs[i] = (swd_status_refused){ ra[i].run, ra[i].too_many_runs, ra[i].run_rate,
		    ra[i].run_state };
	st->refused = rs;
	st->max_runs = D.cfg.max_runs;
	swd_auth_stats as;
	swd_auth_get_stats(D.auth, &as);
	st->curve = D.auth != NULL;
	st->curve_public = D.curve_public;
	st->auth_keys = as.keys;
	st->auth_allowed = as.allowed;
	st->auth_refused_data = as.refused_data;
	st->auth_refused_control = as.refused_control;
	st->auth_failed_data = as.failed_data;
	st->auth_failed_control = as.failed_control;
	st->upstream = D.cfg.connect[0] ? D.cfg.connect : NULL;
	st->upstream_curve = D.cfg.connect_server_key[0] != 0;
	st->upstream_refused = as.refused_upstream;
	st->upstream_failed = as.failed_upstream;
	st->new_runs_per_s = D.cfg.new_runs_per_s;
	st->new_runs_burst = D.cfg.new_runs_burst;
	swd_asm_count(D.as, &st->runs_live, &st->senders_live);
	st->messages = D.messages;
	st->bytes = D.bytes;
	st->rows = atomic_load(&D.rows);
	st->steps_complete = swd_asm_get_stats(D.as)->steps_complete;
	st->steps_incomplete = swd_asm_get_stats(D.as)->steps_incomplete;
	int span = D.ring_fill < 10 ? D.ring_fill : 10;
	if (span > 0) {
		int now = D.ring_pos, then = (D.ring_pos - span + 11) % 11;
		st->rows_per_s = (double)(D.ring_rows[now] - D.ring_rows[then]) / span;
		st->msgs_per_s = (double)(D.ring_msgs[now] - D.ring_msgs[then]) / span;
	}
	memcpy(st->drops, D.drops, sizeof(st->drops));
	/* messages the assembly gave up after taking them (parts, failed work) */
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		st->drops[i] += swd_asm_get_stats(D.as)->drops[i];
	/* steps the writer did not store: duplicates of an incarnation's rows, and
	 * steps of a run whose file could not be opened */
	st->drops[SWD_DROP_DUPLICATE] += atomic_load(&swd_writer_stats(D.writer)->duplicates);
	st->drops[SWD_DROP_WRITE] += atomic_load(&swd_writer_stats(D.writer)->write_drops);
	st->drops[SWD_DROP_LOCKED] += atomic_load(&swd_writer_stats(D.writer)->locked_drops);
	st->drops[SWD_DROP_UNKNOWN_RUN] += atomic_load(&swd_writer_stats(D.writer)->unknown_ends);
	st->drops[SWD_DROP_LATE] += atomic_load(&swd_writer_stats(D.writer)->late_drops);
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
	st->bytes_written = atomic_load(&ws->bytes_written);
	st->files_open = atomic_load(&ws->files_open);
	st->max_flush_us = atomic_load(&ws->max_flush_us);
	st->loop_turns = D.loop_turns;
	st->drain_rounds = D.drain_rounds;
	st->max_batch = D.max_batch;
	st->batch_limit_hits = D.batch_limit_hits;
	st->loop_idle_s = (double)uv_metrics_idle_time(D.loop) * 1e-9;
	fill_cpu(st);
}

static void
ctl_poll_cb(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)status;
	(void)events;
	static char small[256];	/* the reply when there is no memory for it */
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
		/* the whole reply, however long the lists (fill_status caps them) */
		size_t rl = (size_t)(n < (int)sizeof(req) ? n : (int)sizeof(req)), len;
		char *out = swd_control_reply_alloc(req, rl, &st, &len);
		if (out) {
			zmq_send(D.ctl, out, len, 0);
			free(out);
		} else {
			len = swd_control_reply(req, rl, &st, small, sizeof(small));
			zmq_send(D.ctl, small, len, 0);
		}
	}
}

/* ---- timers, signals, shutdown ------------------------------------------------- */

static void
finish_shutdown(void)
{
	/* every open step goes out, incomplete ones counted */
	swd_asm_shutdown(D.as);
	swd_writer_stop(&D.writer);
	swd_asm_free(&D.as);
	uv_timer_stop(&D.tick);
	uv_close((uv_handle_t *)&D.tick, NULL);
	swd_prom_stop(&D.metrics);
	if (D.watchdog_usec) {
		uv_timer_stop(&D.watchdog);
		uv_close((uv_handle_t *)&D.watchdog, NULL);
	}
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

/*
 * A forwarder that refused this daemon's key (ZAP 400) is not tried again
 * by ZeroMQ: the SUB connects again, every UPSTREAM_RETRY_MS while it is
 * refused, so a key allowed later (the forwarder's SIGHUP) gets in.
 */
#define UPSTREAM_RETRY_MS 5000

static void
upstream_retry(uint64_t now)
{
	if (!D.auth || !D.cfg.connect[0] || now - D.upstream_retry_ms < UPSTREAM_RETRY_MS)
		return;
	swd_auth_stats as;
	swd_auth_get_stats(D.auth, &as);
	if (as.refused_upstream == D.upstream_refused_seen)
		return;
	D.upstream_refused_seen = as.refused_upstream;
	D.upstream_retry_ms = now;
	if (zmq_disconnect(D.sub, D.cfg.connect) != 0 && zmq_errno() != ENOENT)
		log_warn("disconnecting from %s: %s", D.cfg.connect, zmq_strerror(zmq_errno()));
	if (zmq_connect(D.sub, D.cfg.connect) != 0)
		log_err("connecting again to %s: %s", D.cfg.connect, zmq_strerror(zmq_errno()));
	else
		log_debug("connecting again to %s after a refusal", D.cfg.connect);
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
	swd_asm_tick(D.as, now);
	static uint64_t last_sample;
	if (now - last_sample >= 1000) {
		last_sample = now;
		D.ring_pos = (D.ring_pos + 1) % 11;
		D.ring_rows[D.ring_pos] = atomic_load(&D.rows);
		D.ring_msgs[D.ring_pos] = D.messages;
		if (D.ring_fill < 11)
			D.ring_fill++;
		static int every5;
		if (++every5 % 5 == 0)
			notify_status();
		publish_metrics();
		upstream_retry(now);
	}
	/* a missed edge on ZMQ_FD would stall receiving: look again */
	drain();
}

/* ---- systemd (sd_notify; nothing without NOTIFY_SOCKET) ----------------------- */

PRINTF_LIKE static void
notify(const char *fmt, ...)
{
#ifdef HAVE_SYSTEMD
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sd_notify(0, buf);
#else
	(void)fmt;
#endif
}

/* What systemctl status shows: a line of the daemon's figures. */
static void
notify_status(void)
{
	long long drops = 0;
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		drops += D.drops[i];
	for (int i = 1; i < SWD_DECODE_ERRORS; i++)
		drops += D.decode_errors[i];
	int span = D.ring_fill < 10 ? D.ring_fill : 10;
	double mps = 0;
	if (span > 0)
		mps = (double)(D.ring_msgs[D.ring_pos] - D.ring_msgs[(D.ring_pos - span + 11) % 11]) /
		    span;
	notify("STATUS=%lld messages (%.1f/s), %lld not stored, %lld steps written, "
	    "data in %s", (long long)D.messages, mps, drops,
	    (long long)atomic_load(&swd_writer_stats(D.writer)->steps_written), D.cfg.data_dir);
}

/*
 * The watchdog ping, from the loop (a stuck loop stops it) and only while
 * the writer moves or has nothing to do: a writer stuck in a write is
 * not well, and systemd restarts the service.
 */
static void
watchdog_cb(uv_timer_t *t)
{
	(void)t;
	const swd_wstats *ws = swd_writer_stats(D.writer);
	long long items = atomic_load(&ws->items), depth = atomic_load(&ws->queue_depth);
	if (depth == 0 || items != D.writer_items)
		notify("WATCHDOG=1");
	else
		log_warn("watchdog: the writer made no progress with %lld item(s) queued: "
		    "no ping", depth);
	D.writer_items = items;
}

/*
 * SIGHUP: the configuration is read again (file and flags, as at start);
 * the options that may change while running (--print-config marks them)
 * are applied, a changed log file is opened, the same one reopened (log
 * rotation); any other option that changed is named: it needs a restart.
 */
static void
reload(void)
{
	char err[1024];
	swd_config c;
	notify("RELOADING=1");
	if (read_config(D.argc, D.argv, &c, err, sizeof(err)) != 0 ||
	    swd_config_check(&c, err, sizeof(err)) != 0) {
		log_err("SIGHUP: the configuration is not valid, nothing changed: %s", err);
		notify("READY=1");
		return;
	}
	for (size_t i = 0; i < swd_config_count(); i++)
		if (!swd_config_runtime(i) && swd_config_differs(&D.cfg, &c, i))
			log_warn("SIGHUP: %s changed in the configuration: it applies at the next "
			    "start, not now", swd_config_name(i));
	if (D.auth) {	/* the allow list is read again, changed or not */
		if (swd_auth_reload(D.auth, c.curve_allow, NULL, err, sizeof(err)) != 0)
			log_err("SIGHUP: the CURVE allow list stays as it was: %s", err);
		else {
			swd_auth_stats as;
			swd_auth_get_stats(D.auth, &as);
			if (as.keys == 0)	/* nobody gets in, sinkwatch status neither */
				log_warn("SIGHUP: %s allows no client key: every sender and every "
				    "control client (sinkwatch status) is refused", c.curve_allow);
			else
				log_info("SIGHUP: %lld client key(s) allowed, from %s",
				    (long long)as.keys, c.curve_allow);
			memcpy(D.cfg.curve_allow, c.curve_allow, sizeof(c.curve_allow));
		}
	}
	if (c.log_level != D.cfg.log_level) {
		log_info("SIGHUP: log_level %s -> %s", log_level_name(D.cfg.log_level),
		    log_level_name(c.log_level));
		log_set_level(c.log_level);
		D.cfg.log_level = c.log_level;
	}
	if (strcmp(c.log_file, D.cfg.log_file) != 0) {
		if (log_open(c.log_file[0] ? c.log_file : NULL) != 0)
			log_err("SIGHUP: cannot open the log %s: %s (the log stays where it was)",
			    c.log_file, strerror(errno));
		else {
			log_info("SIGHUP: logging to %s", c.log_file[0] ? c.log_file : "stderr");
			memcpy(D.cfg.log_file, c.log_file, sizeof(c.log_file));
		}
	} else if (log_reopen() != 0) {
		log_err("SIGHUP: cannot reopen %s: %s", D.cfg.log_file, strerror(errno));
	} else {
		log_info("SIGHUP: configuration read again, log reopened");
	}
	notify("READY=1");
	notify_status();
}

/* The Prometheus text, from the same figures as the status command. */
static void
publish_metrics(void)
{
	static swd_status_run runs[256];
	static char text[16384];
	if (!D.metrics)
		return;
	swd_status st;
	fill_status(&st, runs, sizeof(runs) / sizeof(runs[0]));
	swd_prom_publish(D.metrics, text, swd_metrics_text(&st, text, sizeof(text)));
}

static void
signal_cb(uv_signal_t *h, int signum)
{
	(void)h;
	if (signum == SIGHUP) {
		reload();
		return;
	}
	if (D.stopping)
		return;
	notify("STOPPING=1\nSTATUS=stopping: finishing %lld job(s) in flight, then flushing",
	    (long long)D.jobs);
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
	/* parts still gathered are computed as they are and written (README) */
	swd_asm_stop(D.as);
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

/*
 * CURVE on the SUB connected to a forwarder, before its connect, as every
 * client (net/swnet.h): the forwarder's public key (or its file) from
 * connect_server_key, else SINKWATCH_SERVER_KEY; this daemon's key pair
 * from curve_secret_file, else SINKWATCH_CLIENT_KEY_FILE. No server key:
 * a plain hop. 0, or -1 with err.
 */
static int
curve_client(void *sock, char *err, size_t errlen)
{
	static const char *const opts[2] = { "connect_server_key", "curve_secret_file" };
	const char *srv = D.cfg.connect_server_key, *kf = D.cfg.curve_secret_file;
	swn_curve_info ci;
	swn_curve_env(&srv, &kf);
	if (!srv)
		return 0;
	if (swn_curve_client(sock, srv, kf, opts, &ci, err, errlen) < 0)
		return -1;
	/* whichever gave it, status says the hop is CURVE */
	snprintf(D.cfg.connect_server_key, sizeof(D.cfg.connect_server_key), "%s", ci.server);
	log_info("the hop from the forwarder at %s is CURVE: its key %s, this daemon's %s",
	    D.cfg.connect, ci.server, ci.pub);
	return 0;
}

static int
setup_sockets(char *err, size_t errlen)
{
	char secret[SWP_KEY_LEN + 1] = "", ep[sizeof(D.cfg.listen) + 16];
	if (!(D.zctx = zmq_ctx_new())) {
		snprintf(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		return -1;
	}
	if (D.cfg.curve_secret_file[0]) {
		if (swn_curve_server_keys("curve_secret_file", D.cfg.curve_secret_file, secret,
		    D.curve_public, err, errlen) != 0 ||
		    swd_auth_start(&D.auth, D.zctx, D.cfg.curve_allow, NULL, err, errlen) != 0)
			return -1;
		swd_auth_stats as;
		swd_auth_get_stats(D.auth, &as);
		log_info("CURVE on: public key %s, %lld client key(s) allowed, from %s",
		    D.curve_public, (long long)as.keys, D.cfg.curve_allow);
		if (as.keys == 0)	/* nobody gets in, sinkwatch status neither */
			log_warn("%s allows no client key: every sender and every control client "
			    "(sinkwatch status) is refused", D.cfg.curve_allow);
	} else if ((!D.cfg.connect[0] && !swp_endpoint_local(D.cfg.listen)) ||
	    !swp_endpoint_local(D.cfg.control)) {
		log_warn("listening beyond loopback without CURVE (insecure_off_loopback): anyone "
		    "who reaches %s and %s may send runs and read the status",
		    D.cfg.connect[0] ? "" : D.cfg.listen, D.cfg.control);
	}
	if (D.cfg.connect[0] && !D.cfg.connect_server_key[0] &&
	    !swp_endpoint_local(D.cfg.connect))
		log_warn("connecting beyond loopback to %s without CURVE (insecure_off_loopback): "
		    "anyone on the way may read or forge runs", D.cfg.connect);
	D.sub = zmq_socket(D.zctx, ZMQ_SUB);
	int64_t maxmsg = ((int64_t)D.cfg.max_message_mb << 20) > SWP_HEADER_MAX ?
	    (int64_t)D.cfg.max_message_mb << 20 : SWP_HEADER_MAX;
	/* ZeroMQ's own queue is outside the budget: keep it short */
	int hwm = 8, zero = 0;
	if (!D.sub || zmq_setsockopt(D.sub, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(D.sub, ZMQ_RCVHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(D.sub, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    (D.auth && !D.cfg.connect[0] && (swn_curve_server(D.sub, secret, SWD_AUTH_DOMAIN_DATA) ||
	    swd_auth_watch(D.auth, D.sub, SWD_AUTH_DOMAIN_DATA))) ||
	    (D.auth && D.cfg.connect[0] && swd_auth_watch(D.auth, D.sub, SWD_AUTH_DOMAIN_UPSTREAM))) {
		snprintf(err, errlen, "SUB socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (D.cfg.connect[0] && curve_client(D.sub, err, errlen) != 0)
		return -1;
	/* PROTOCOL.md 1: a topic is "sw/" + run id, so "sw/" + a prefix takes
	 * the runs whose id starts with it; no prefix: every run */
	const char *p = D.cfg.subscribe;
	do {
		char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX + 1];
		int n = (int)strcspn(p, "\n");
		int tl = snprintf(topic, sizeof(topic), "%s%.*s", SWP_TOPIC_PREFIX, n, p);
		if (zmq_setsockopt(D.sub, ZMQ_SUBSCRIBE, topic, (size_t)tl)) {
			snprintf(err, errlen, "SUB socket: subscribing to %s: %s", topic,
			    zmq_strerror(errno));
			return -1;
		}
		p += n + (p[n] == '\n');
	} while (*p);
	if (D.cfg.connect[0]) {
		/* behind a forwarder (sinkwatch forward): it binds, we connect */
		if (zmq_connect(D.sub, D.cfg.connect) != 0) {
			snprintf(err, errlen, "cannot connect to %s: %s", D.cfg.connect,
			    zmq_strerror(errno));
			return -1;
		}
	} else if (zmq_bind(D.sub, swp_bind_endpoint(D.cfg.listen, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", D.cfg.listen, zmq_strerror(errno));
		return -1;
	}
	D.ctl = zmq_socket(D.zctx, ZMQ_REP);
	int64_t ctlmax = 4096;
	if (!D.ctl || zmq_setsockopt(D.ctl, ZMQ_MAXMSGSIZE, &ctlmax, sizeof(ctlmax)) ||
	    zmq_setsockopt(D.ctl, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    (D.auth && (swn_curve_server(D.ctl, secret, SWD_AUTH_DOMAIN_CONTROL) ||
	    swd_auth_watch(D.auth, D.ctl, SWD_AUTH_DOMAIN_CONTROL)))) {
		snprintf(err, errlen, "control socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(D.ctl, swp_bind_endpoint(D.cfg.control, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "cannot bind the control endpoint %s: %s", D.cfg.control,
		    zmq_strerror(errno));
		return -1;
	}
	memset(secret, 0, sizeof(secret));	/* the sockets keep their own copy */
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

/*
 * The configuration: defaults, then the config file, then the flags over
 * it. The same at start and at SIGHUP (which applies the options that may
 * change while running). 0, or -1 with err.
 */
static int
read_config(int argc, char **argv, swd_config *c, char *err, size_t errlen)
{
	const char *config_file = NULL;

	swd_config_defaults(c);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--config") && i + 1 < argc)
			config_file = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			config_file = argv[i] + 9;
	}
	if (config_file && swd_config_load(c, config_file, err, errlen) != 0)
		return -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
		} else if (!strncmp(a, "--config=", 9) || !strcmp(a, "--check-config") ||
		    !strcmp(a, "--print-config")) {
			continue;
		} else if (!strncmp(a, "--", 2)) {
			char name[64];
			const char *eq = strchr(a, '='), *val;
			size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
			if (nl >= sizeof(name)) {
				snprintf(err, errlen, "unknown option '%s'", a);
				return -1;
			}
			memcpy(name, a + 2, nl);
			name[nl] = '\0';
			if (eq)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else {
				snprintf(err, errlen, "%s needs a value", a);
				return -1;
			}
			if (swd_config_set(c, name, val, err, errlen) != 0) {
				size_t n = strlen(err);
				snprintf(err + n, errlen - n, " (sinkwatchd --help lists the options)");
				return -1;
			}
		} else {
			snprintf(err, errlen, "unexpected argument '%s'", a);
			return -1;
		}
	}
	return 0;
}

int
main(int argc, char **argv)
{
	char err[1024];
	int check = 0, print = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
		} else if (!strcmp(a, "--check-config")) {
			check = 1;
		} else if (!strcmp(a, "--print-config")) {
			print = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("sinkwatchd %s (protocol %d, metric contract %d, kernels %s, logs %s)\n",
			    PACKAGE_VERSION, SWP_VERSION, SWM_CONTRACT_VERSION, swm_isa(), swm_precision());
			return 0;
		}
	}
	if (read_config(argc, argv, &D.cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "sinkwatchd: %s\n", err);
		return 2;
	}
	D.argc = argc;
	D.argv = argv;
	struct sockaddr_storage msa;
	if (swd_config_check(&D.cfg, err, sizeof(err)) != 0 || (D.cfg.metrics_listen[0] &&
	    swd_prom_addr(D.cfg.metrics_listen, &msa, sizeof(msa), err, sizeof(err)) != 0)) {
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
	/*
	 * Daemons share a data directory: each holds a shared flock on its lock
	 * file for as long as it runs (sinkwatch check clears nothing while
	 * one does), and each run is written by one process at most, under
	 * the run's own lock (storage/runlock.c). What a crash left of file
	 * creations is removed only by a daemon that is alone there (an
	 * exclusive flock for the moment): another's may be in progress.
	 */
	char lerr[1200];
	int lockfd = sw_dirlock_open(D.cfg.data_dir, 1, lerr, sizeof(lerr));
	if (lockfd < 0) {
		log_err("%s", lerr);
		return 2;
	}
	int alone = sw_dirlock_exclusive(lockfd, D.cfg.data_dir, lerr, sizeof(lerr)) == 0;
	if (alone) {
		int stale = sw_runfile_clean_tmp(D.cfg.data_dir);
		if (stale > 0)
			log_info("removed %d unfinished file creation(s) a crash left in %s",
			    stale, D.cfg.data_dir);
	}
	if (sw_dirlock_shared(lockfd, D.cfg.data_dir, lerr, sizeof(lerr)) != 0) {
		log_err("%s", lerr);
		return 2;
	}
	if (!alone)
		log_info("another sinkwatchd writes to %s too: each run is written by the one "
		    "that takes its lock first", D.cfg.data_dir);
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
	umask((mode_t)D.cfg.umask);
	D.loop = uv_default_loop();
	uv_loop_configure(D.loop, UV_METRICS_IDLE_TIME);
	D.started = swd_wall_now();
	atomic_init(&D.inflight, 0);
	if (setup_sockets(err, sizeof(err)) != 0) {
		log_err("%s", err);
		return 2;
	}
	if (swd_writer_start(&D.writer, &D.cfg, &D.inflight) != 0) {
		log_err("cannot start the writer thread");
		return 2;
	}
	swd_asm_conf ac = {
		.step_timeout_ms = D.cfg.step_timeout_ms, .max_open_steps = D.cfg.max_open_steps,
		.max_runs = D.cfg.max_runs, .run_idle_s = D.cfg.run_idle_s,
		.inflight = &D.inflight, .budget_bytes = D.cfg.budget_mb << 20,
		.work_bytes = gathered_bytes, .run_bytes = run_state_bytes, .work = start_gathered,
		.new_runs_per_s = D.cfg.new_runs_per_s, .new_runs_burst = D.cfg.new_runs_burst,
	};
	if (!(D.as = swd_asm_new(&ac, to_writer, NULL))) {
		log_err("out of memory");
		return 2;
	}
	if (D.cfg.metrics_listen[0]) {
		if (swd_prom_start(&D.metrics, D.cfg.metrics_listen, err, sizeof(err)) != 0) {
			log_err("%s", err);
			return 2;
		}
		publish_metrics();
		log_info("Prometheus metrics at http://%s/metrics", D.cfg.metrics_listen);
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
	log_info("%s %s, control on %s, data in %s (budget %lld MiB, flush %lld ms)",
	    D.cfg.connect[0] ? "connected to" : "listening on",
	    D.cfg.connect[0] ? D.cfg.connect : D.cfg.listen, D.cfg.control, D.cfg.data_dir, (long long)D.cfg.budget_mb,
	    (long long)D.cfg.flush_ms);
#ifdef HAVE_SYSTEMD
	if (sd_watchdog_enabled(0, &D.watchdog_usec) > 0 && D.watchdog_usec > 0) {
		uint64_t ms = D.watchdog_usec / 2000 ? D.watchdog_usec / 2000 : 1;
		uv_timer_init(D.loop, &D.watchdog);
		uv_timer_start(&D.watchdog, watchdog_cb, ms, ms);
		log_info("systemd watchdog: a ping every %llu ms", (unsigned long long)ms);
	} else {
		D.watchdog_usec = 0;
	}
#endif
	notify("READY=1\nSTATUS=%s %s, control on %s, data in %s",
	    D.cfg.connect[0] ? "connected to" : "listening on",
	    D.cfg.connect[0] ? D.cfg.connect : D.cfg.listen,
	    D.cfg.control, D.cfg.data_dir);
	/* the first messages may already be queued: look before waiting */
	drain();
	uv_run(D.loop, UV_RUN_DEFAULT);
	uv_loop_close(D.loop);
	zmq_ctx_term(D.zctx);
	swd_auth_join(&D.auth);	/* its thread ended at the context's end */
	return 0;
}
