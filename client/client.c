/*
 * client.c: libsinkwatch, the training-job side (see sinkwatch/client.h).
 *
 * The socket is an XPUB that connects to the daemon's SUB. ZeroMQ's PUB
 * drops silently what is sent before a subscription arrives (the slow
 * joiner), so the client reads the subscription messages its XPUB gets,
 * knows whether a daemon is listening, and keeps messages in its own bounded
 * queue until one is. ZMQ_XPUB_NODROP turns a full ZeroMQ queue into EAGAIN,
 * so every drop is seen and counted instead of vanishing.
 *
 * That queue must hold a whole burst: the subscription reaches the handle
 * 1.5-6 ms after sw_client_new() on loopback, and the sender thread, once
 * woken, may wait that long again for a CPU, while a training loop streams
 * a probe (one message per layer) in about 1 ms. With the former default
 * of 16 messages a burst of 240 (24 layers x 10 steps) kept 16 to 35 of
 * them against a bound SUB or a live daemon, all other drops "no daemon
 * subscribed", and even with the daemon already subscribed it kept 16-80
 * ("queue full": the sender had not run yet). ZeroMQ itself lost nothing:
 * messages wait here until the subscription is seen, and ZeroMQ routes a
 * message to a pipe whose subscription it has already passed up. Hence a
 * default of 256 messages, bounded in bytes by queue_max_bytes.
 *
 * Threads: the socket belongs to a sender thread of the handle's own. The
 * caller's thread (the training loop) never enters ZeroMQ after
 * sw_client_new(): a send encodes the header and appends to the queue under
 * a mutex held for a few pointer moves. A ZeroMQ socket left alone for a
 * while has commands waiting in its mailbox and runs them on the next call,
 * tens of microseconds that would otherwise land on the training step; the
 * sender thread takes that cost and keeps the mailbox drained while it
 * waits in zmq_poll().
 *
 * Waking a sleeping thread costs the waker a syscall and, when the other
 * CPU is idle, an inter-processor interrupt: 35-65 us measured in a
 * virtual machine, more than the whole send. So a non-blocking send does
 * not wake the sender: the sender naps in zmq_poll() for NAP_MS and finds
 * the queue itself. The caller writes the eventfd only when the queue is
 * half full (a burst) while a daemon is subscribed, in blocking mode, and
 * on flush and destroy. A message thus waits at most NAP_MS in the queue,
 * and an idle handle wakes 1000 / NAP_MS times a second. Shorter naps
 * after each message were tried: in that virtual machine the sender's
 * frequent wakeups on the other CPU slowed the caller's sends (p50 1.4 us with 16 ms naps, 11 us
 * with 1 ms naps, `make bench`).
 *
 * Queue discipline (under mu): messages leave the queue in order; the one
 * being handed to ZeroMQ is `inflight` and still counts as queued; done_seq
 * is one past the sequence number of the last message the sender finished
 * with (handed over, or failed for good and counted as dropped).
 */
#define _GNU_SOURCE 1	/* SCHED_BATCH */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#define SW_BUILDING_CLIENT 1
#include "sinkwatch/client.h"
#include "proto/swproto.h"
#include "net/swnet.h"

#include "client/client_int.h"



/*
 * The drop message, built without printf: drops are the common case when
 * no daemon listens, and vsnprintf costs 5-8 us of the send when caches are
 * cold (measured), more than the rest of the drop.
 */
static int
seterr_drop(sw_client *c, uint64_t seq, int subs)
{
	static const char pre[] = "dropped message ";
	const char *why = subs ? ": queue full" : ": no daemon subscribed";
	char digits[20];
	size_t nd = 0, at = sizeof(pre) - 1;
	do {
		digits[nd++] = (char)('0' + seq % 10);
		seq /= 10;
	} while (seq);
	memcpy(c->err, pre, at);
	while (nd)
		c->err[at++] = digits[--nd];
	size_t wl = strlen(why);
	memcpy(c->err + at, why, wl + 1);
	return SW_EDROPPED;
}


static double
wall_time(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits on c->cv (mu held) until deadline_ms on CLOCK_MONOTONIC; -1: no limit. */
static void
cv_wait(sw_client *c, int64_t deadline_ms)
{
	if (deadline_ms < 0) {
		pthread_cond_wait(&c->cv, &c->mu);
		return;
	}
	struct timespec ts = { (time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000 };
	pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

/*
 * Whether the caller must wake the sender (mu held): it sleeps, and
 * urgent, or the queue is half full while a daemon is subscribed. Without
 * one the sender could send nothing, and the subscription, when it comes,
 * wakes it (its zmq_poll() watches the socket): a wake then only costs the
 * caller (issue 30: with the daemon down every send from half full to full
 * woke it, 32 of the first 64 sends of 4 MiB, each 25-90 us, the p99).
 * Clears idle: one write per sleep.
 */
static int
need_wake(sw_client *c, int urgent)
{
	if (!c->idle)
		return 0;
	if (!urgent && (c->nsubs == 0 ||
	    (c->pending_n < ((size_t)c->o.queue_max + 1) / 2 &&
	    c->pending_bytes < c->o.queue_max_bytes / 2)))
		return 0;
	c->idle = 0;
	return 1;
}

static void
wake(sw_client *c)
{
	uint64_t one = 1;
	/* EAGAIN: the counter is full, so the sender is woken anyway */
	while (write(c->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

SW_EXPORT const char *
sw_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case SW_EINVAL: return "invalid argument";
	case SW_ENOMEM: return "out of memory";
	case SW_EZMQ: return "ZeroMQ error";
	case SW_EDROPPED: return "message dropped (queue full or no daemon)";
	case SW_ETIMEDOUT: return "timed out";
	case SW_ECLOSED: return "run already ended";
	case SW_EKEY: return "CURVE keys: server_key and key_file (or SINKWATCH_SERVER_KEY "
	    "and SINKWATCH_CLIENT_KEY_FILE) must both be given and be keys";
	default: return "unknown error";
	}
}

SW_EXPORT const char *
sw_client_errmsg(const sw_client *c)
{
	return c ? c->err : "";
}

SW_EXPORT void
sw_client_opts_init(sw_client_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->endpoint = NULL;	/* sw_client_new(): SINKWATCH_ENDPOINT, else the default */
	o->blocking = 0;
	o->block_timeout_ms = SW_CLIENT_BLOCK_TIMEOUT_MS;
	o->queue_max = SW_CLIENT_QUEUE_MAX;
	o->queue_max_bytes = SW_CLIENT_QUEUE_MAX_BYTES;
	o->linger_ms = 2000;
}

/* ---- the sender thread ---- */

/* ---- the caller's side ---- */

/*
 * zmq_ctx_term() returns EINTR when a signal reaches the caller while it
 * waits out the linger (a profiler's timer, SIGCHLD), and the context is
 * then not terminated: frames still in flight would call back into a
 * freed handle. So again until it is done.
 */
static void
ctx_term(void *ctx)
{
	while (zmq_ctx_term(ctx) != 0 && errno == EINTR)
		;
}

/*
 * 12 random bits: getrandom(), else /dev/urandom, else the clock's
 * nanoseconds mixed with the handle's address (two handles alive at once
 * differ in address).
 */
static unsigned
random12(const void *salt)
{
	unsigned char b[2];
	ssize_t n;
	while ((n = getrandom(b, sizeof(b), GRND_NONBLOCK)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(b)) {
		int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, b, sizeof(b)) : -1;
		if (fd >= 0)
			close(fd);
	}
	if (n == (ssize_t)sizeof(b))
		return ((unsigned)b[0] | (unsigned)b[1] << 8) & 0xfff;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)salt;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 32;
	return (unsigned)(x & 0xfff);
}

/*
 * The incarnation of a new handle (PROTOCOL.md): the wall clock in
 * microseconds since the epoch times 4096 plus 12 random bits, so that a
 * later handle compares greater and two of the same microsecond differ
 * (with odds 4095 in 4096). Fits 64 bits until 2112; never 0.
 */
static uint64_t
new_incarnation(const void *salt)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
	uint64_t inc = us * 4096 + random12(salt);
	return inc ? inc : 1;
}

/* The run's names and shape, and the handle's sender: SW_EINVAL when bad. */
static int
client_take_run(sw_client *c, const sw_run_info *run)
{
	size_t rl = strlen(run->run), ml = run->model ? strlen(run->model) : 0;
	int tl = swp_topic(run->run, c->topic, sizeof(c->topic));
	c->senders = c->o.senders ? c->o.senders : 1;
	c->rank = c->o.rank;
	if (tl < 0 || rl > SWP_RUN_MAX || ml > SWP_MODEL_MAX || run->layers == 0 ||
	    run->heads == 0 || run->layers > SWP_LAYERS_MAX || run->heads > SWP_HEADS_MAX ||
	    (c->o.resuming && c->o.resume_from < 0))
		return SW_EINVAL;
	/*
	 * Several senders share rank 0's incarnation: a rank > 0 that picked
	 * its own would be an incarnation whose other senders never come.
	 */
	if (c->senders > SWP_SENDERS_MAX || c->rank >= c->senders ||
	    (c->senders > 1 && c->rank > 0 && c->o.incarnation == 0))
		return SW_EINVAL;
	c->topic_len = (size_t)tl;
	memcpy(c->run, run->run, rl + 1);
	if (ml)
		memcpy(c->model, run->model, ml + 1);
	c->info = *run;
	c->info.run = c->run;
	c->info.model = c->model;
	c->inc = c->o.incarnation ? c->o.incarnation : new_incarnation(c);
	return 0;
}

/* The handle's condition (on the monotonic clock) and its two mutexes. */
static int
client_sync_init(sw_client *c)
{
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca))
		return -1;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (pthread_cond_init(&c->cv, &ca)) {
		pthread_condattr_destroy(&ca);
		return -1;
	}
	pthread_condattr_destroy(&ca);
	if (pthread_mutex_init(&c->mu, NULL)) {
		pthread_cond_destroy(&c->cv);
		return -1;
	}
	if (pthread_mutex_init(&c->pool_mu, NULL)) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		return -1;
	}
	if (pthread_mutex_init(&c->node_mu, NULL)) {
		pthread_mutex_destroy(&c->pool_mu);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		return -1;
	}
	return 0;
}

/* The handle's own context (one I/O thread) and its XPUB socket, connected. */
static int
client_socket(sw_client *c)
{
	int rc;
	if (!(c->ctx = zmq_ctx_new()))
		return SW_EZMQ;
	zmq_ctx_set(c->ctx, ZMQ_IO_THREADS, 1);
	if (!(c->sock = zmq_socket(c->ctx, ZMQ_XPUB)))
		return SW_EZMQ;
	/*
	 * ZMQ_IMMEDIATE: no pipe to a daemon that is not connected, so when
	 * the daemon goes away the pipe ends, its subscription is withdrawn,
	 * and the client queues (and counts) instead of filling a dead pipe.
	 */
	int one = 1, linger = c->o.linger_ms, ivl = 100, ivlmax = 1000;
	int hwm = c->o.queue_max < ZMQ_HWM_MAX ? c->o.queue_max : ZMQ_HWM_MAX;
	int sndtimeo = SEND_WAIT_MS;
	if (zmq_setsockopt(c->sock, ZMQ_XPUB_NODROP, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_XPUB_VERBOSER, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof(linger)) ||
	    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof(sndtimeo)) ||
	    zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)) ||
	    zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL_MAX, &ivlmax, sizeof(ivlmax)))
		return SW_EZMQ;
	if ((rc = cl_setup_curve(c)) != 0)
		return rc;
	if (zmq_connect(c->sock, c->endpoint) != 0)
		return SW_EINVAL;
	return 0;
}

/* What sw_client_new made before it failed (sync: the mutexes were made). */
static void
client_undo(sw_client *c, int sync)
{
	if (c->mon)
		zmq_close(c->mon);
	if (c->sock)
		zmq_close(c->sock);
	if (c->ctx)
		ctx_term(c->ctx);
	if (c->efd >= 0)
		close(c->efd);
	if (sync) {
		pthread_mutex_destroy(&c->node_mu);
		pthread_mutex_destroy(&c->pool_mu);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
	}
	free(c->slab);
	free(c->endpoint);
	free(c);
}

SW_EXPORT int
sw_client_new(const sw_client_opts *opts, const sw_run_info *run, sw_client **out)
{
	sw_client *c;
	sw_client_opts dflt;

	*out = NULL;
	if (!run || !run->run)
		return SW_EINVAL;
	if (!opts) {
		sw_client_opts_init(&dflt);
		opts = &dflt;
	}
	if (!(c = calloc(1, sizeof(*c))))
		return SW_ENOMEM;
	c->efd = -1;
	c->o = *opts;
	c->o.endpoint = swn_env_or(c->o.endpoint, SWN_ENV_ENDPOINT, SW_CLIENT_DEFAULT_ENDPOINT);
	if (c->o.queue_max < 1)
		c->o.queue_max = 1;
	int rc, sync = 0;
	if ((rc = client_take_run(c, run)) != 0)
		goto fail;
	rc = SW_ENOMEM;
	if (!(c->endpoint = strdup(c->o.endpoint)))
		goto fail;
	c->o.endpoint = c->endpoint;
	if (client_sync_init(c) != 0)
		goto fail;
	sync = 1;
	if (cl_nodes_init(c) != 0)
		goto fail;
	rc = SW_EZMQ;
	if ((c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		cl_seterr(c, rc, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if ((rc = client_socket(c)) != 0)
		goto fail;
	/* the sender takes no signals: they stay the application's */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int trc = pthread_create(&c->thr, NULL, cl_sender_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (trc != 0) {
		rc = SW_ENOMEM;
		goto fail;
	}
	*out = c;
	return 0;
fail:
	client_undo(c, sync);
	return rc;
}

/* Unlinks p from the queue (mu held; p queued, not in flight). */
static void
unlink_pending(sw_client *c, struct pending *p)
{
	struct pending **pp = &c->head, *prev = NULL;
	while (*pp && *pp != p) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (!*pp)
		return;
	*pp = p->next;
	if (c->tail == p)
		c->tail = prev;
	c->pending_n--;
	c->pending_bytes -= p->bytes;
}

/* Whether a message of bytes finds no room (mu held). One message over
 * queue_max_bytes passes alone: it could never go otherwise. */
static int
queue_full(const sw_client *c, size_t bytes)
{
	return c->pending_n >= (size_t)c->o.queue_max ||
	    (c->pending_n > 0 && c->pending_bytes + bytes > c->o.queue_max_bytes);
}

/* A non-blocking send finds the queue full (mu held; released): counted, p ended. */
static int
drop_full(sw_client *c, struct pending *p)
{
	int subs = c->nsubs;
	c->dropped++;
	pthread_mutex_unlock(&c->mu);
	cl_pending_end(c, p, 1);	/* a zero-copy buffer stays the caller's */
	return seterr_drop(c, c->seq - 1, subs);
}

/*
 * Queues p for the sender; takes it over in every case (ending it on a
 * drop). Non-blocking: returns at once, 0 or SW_EDROPPED when the queue is
 * full. Blocking: waits until the sender has handed the message to
 * ZeroMQ, or SW_ETIMEDOUT and the message is withdrawn.
 */
static int
dispatch(sw_client *c, struct pending *p)
{
	size_t bytes = p->bytes;

	pthread_mutex_lock(&c->mu);
	if (!c->o.blocking && queue_full(c, bytes))
		return drop_full(c, p);
	if (c->tail)
		c->tail->next = p;
	else
		c->head = p;
	c->tail = p;
	c->pending_n++;
	c->pending_bytes += bytes;
	int w = need_wake(c, c->o.blocking);
	if (!c->o.blocking) {
		pthread_mutex_unlock(&c->mu);
		if (w)
			wake(c);
		return 0;
	}
	if (w)
		wake(c);
	uint64_t seq = p->seq;
	int64_t deadline = c->o.block_timeout_ms < 0 ? -1 : cl_now_ms() + c->o.block_timeout_ms;
	while (c->done_seq <= seq) {
		if (deadline >= 0 && cl_now_ms() >= deadline) {
			if (c->inflight == p) {
				cv_wait(c, -1);	/* one non-blocking attempt: short */
				continue;
			}
			unlink_pending(c, p);
			c->dropped++;
			pthread_mutex_unlock(&c->mu);
			cl_pending_end(c, p, 1);
			return cl_seterr(c, SW_ETIMEDOUT, "blocking send timed out after %d ms",
			    c->o.block_timeout_ms);
		}
		cv_wait(c, deadline);
	}
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* Which heads and rows of its layer a snapshot holds (PROTOCOL.md 7b). */
struct part {
	uint32_t head0, heads, row0, rows_total;
};

/*
 * Builds the message of a snapshot (s; pt NULL: the whole layer) or of the
 * run's end (s NULL): the header encoded in place, the data borrowed
 * (release) or copied.
 */
static int
make_msg(sw_client *c, const sw_snapshot *s, const struct part *pt,
    sw_release_cb release, void *hint, struct pending **out)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	memcpy(m.run, c->run, sizeof(m.run));
	m.seq = c->seq;
	m.time = wall_time();
	m.inc = c->inc;
	m.rank = c->rank;
	m.senders = c->senders;
	if (c->o.resuming) {
		m.has_resume = true;
		m.resume = c->o.resume_from;
	}
	if (s) {
		m.type = SWP_SNAPSHOT;
		memcpy(m.model, c->model, sizeof(m.model));
		m.params = c->info.params;
		m.layers = c->info.layers;
		m.heads = c->info.heads;
		m.sink = c->info.sink;
		m.fixed_probe = c->info.fixed_probe != 0;
		m.step = s->step;
		m.layer = s->layer;
		m.kind = (swp_kind)s->kind;
		m.dtype = (swp_dtype)s->dtype;
		m.shape[0] = pt ? pt->heads : c->info.heads;
		m.shape[1] = s->rows;
		m.shape[2] = s->keys;
		if (pt) {
			m.head0 = pt->head0;
			m.row0 = pt->row0;
			m.rows = pt->rows_total;
		}
		m.qpos = (uint32_t *)s->qpos;
		m.tensor = s->data;
		m.tensor_bytes = s->bytes;
	} else {
		m.type = SWP_END;
	}
	size_t cap = swp_header_bound(&m);
	struct pending *p = cl_pending_new(c, cap);
	if (!p)
		return cl_seterr(c, SW_ENOMEM, "out of memory");
	int rc = swp_encode_header_to(&m, p->hbuf, cap, &p->hlen);
	if (rc < 0) {
		cl_pending_free(c, p);
		return cl_seterr(c, SW_EINVAL, "invalid snapshot: %s", swp_strerror(rc));
	}
	p->next = NULL;
	p->seq = c->seq;
	p->data = NULL;
	p->bytes = 0;
	p->cb = release;
	p->hint = hint;
	p->z = NULL;
	p->framed = 0;
	p->nsent = 0;
	if (s) {
		p->bytes = s->bytes;
		if (release)
			p->data = (void *)s->data;	/* a copy: copy_in() */
	}
	*out = p;
	return 0;
}

/*
 * The copy of a copying send, made only where the message finds room: a
 * non-blocking send that is dropped does not copy its data first (4 MiB:
 * 0.3-1.2 ms measured, all of a drop's cost). Only the caller's thread adds to the
 * queue, so the room seen here is still there in dispatch(). 0; or
 * SW_EDROPPED, counted and p ended; or SW_ENOMEM, nothing counted.
 */
static int
copy_in(sw_client *c, const sw_snapshot *s, struct pending *p)
{
	if (!c->o.blocking) {
		pthread_mutex_lock(&c->mu);
		if (queue_full(c, s->bytes)) {
			c->seq++;
			return drop_full(c, p);
		}
		pthread_mutex_unlock(&c->mu);
	}
	if (!(p->data = cl_copy_get(c, s->bytes))) {
		cl_pending_free(c, p);
		return cl_seterr(c, SW_ENOMEM, "out of memory for %zu bytes", s->bytes);
	}
	memcpy(p->data, s->data, s->bytes);
	return 0;
}

static int
send_common(sw_client *c, const sw_snapshot *s, const struct part *pt,
    sw_release_cb release, void *hint)
{
	struct pending *p;

	if (!c || !s || (!s->data && s->bytes))
		return c ? cl_seterr(c, SW_EINVAL, "no snapshot or data") : SW_EINVAL;
	if (c->ended)
		return cl_seterr(c, SW_ECLOSED, "the run was ended");
	int rc = make_msg(c, s, pt, release, hint, &p);
	if (rc)
		return rc;
	if (!release && (rc = copy_in(c, s, p)) != 0)
		return rc;
	c->seq++;
	/* a zero-copy buffer not taken stays the caller's: no release call */
	return dispatch(c, p);
}

SW_EXPORT int
sw_client_send(sw_client *c, const sw_snapshot *s)
{
	return send_common(c, s, NULL, NULL, NULL);
}

SW_EXPORT int
sw_client_send_zc(sw_client *c, const sw_snapshot *s, sw_release_cb release, void *hint)
{
	if (!release)
		return c ? cl_seterr(c, SW_EINVAL, "send_zc needs a release callback") : SW_EINVAL;
	return send_common(c, s, NULL, release, hint);
}

/* The part's arguments against the run (PROTOCOL.md 4); 0 or SW_EINVAL. */
static int
check_part(sw_client *c, const sw_snapshot *s, struct part *pt)
{
	if (pt->heads == 0)
		return cl_seterr(c, SW_EINVAL, "part: heads 0 (a part holds 1 or more heads)");
	if ((uint64_t)pt->head0 + pt->heads > c->info.heads)
		return cl_seterr(c, SW_EINVAL, "part: head0 %u + heads %u is over the run's "
		    "%u heads", pt->head0, pt->heads, c->info.heads);
	if (pt->rows_total == 0)
		pt->rows_total = s->rows;
	if (pt->rows_total > SWP_ROWS_MAX)
		return cl_seterr(c, SW_EINVAL, "part: rows_total %u is over %d", pt->rows_total,
		    SWP_ROWS_MAX);
	if ((uint64_t)pt->row0 + s->rows > pt->rows_total)
		return cl_seterr(c, SW_EINVAL, "part: row0 %u + rows %u is over rows_total %u",
		    pt->row0, s->rows, pt->rows_total);
	return 0;
}

static int
send_part(sw_client *c, const sw_snapshot *s, struct part *pt, sw_release_cb release,
    void *hint)
{
	if (!c || !s)
		return c ? cl_seterr(c, SW_EINVAL, "no snapshot or data") : SW_EINVAL;
	if (check_part(c, s, pt) != 0)
		return SW_EINVAL;
	return send_common(c, s, pt, release, hint);
}

SW_EXPORT int
sw_client_send_part(sw_client *c, const sw_snapshot *s, uint32_t head0, uint32_t heads,
    uint32_t row0, uint32_t rows_total)
{
	struct part pt = { head0, heads, row0, rows_total };
	return send_part(c, s, &pt, NULL, NULL);
}

SW_EXPORT int
sw_client_send_part_zc(sw_client *c, const sw_snapshot *s, uint32_t head0, uint32_t heads,
    uint32_t row0, uint32_t rows_total, sw_release_cb release, void *hint)
{
	struct part pt = { head0, heads, row0, rows_total };
	if (!release)
		return c ? cl_seterr(c, SW_EINVAL, "send_zc needs a release callback") : SW_EINVAL;
	return send_part(c, s, &pt, release, hint);
}

SW_EXPORT int
sw_client_end(sw_client *c)
{
	struct pending *p;
	if (!c)
		return SW_EINVAL;
	if (c->ended)
		return cl_seterr(c, SW_ECLOSED, "the run was already ended");
	int rc = make_msg(c, NULL, NULL, NULL, NULL, &p);
	if (rc)
		return rc;
	c->seq++;
	/* a dropped or timed-out end may be sent again */
	rc = dispatch(c, p);
	if (rc == 0)
		c->ended = 1;
	return rc;
}

SW_EXPORT int
sw_client_flush(sw_client *c, int timeout_ms)
{
	if (!c)
		return SW_EINVAL;
	int64_t deadline = cl_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	pthread_mutex_lock(&c->mu);
	if (need_wake(c, 1))
		wake(c);
	while (c->pending_n > 0 && cl_now_ms() < deadline)
		cv_wait(c, deadline);
	int n = (int)c->pending_n;
	pthread_mutex_unlock(&c->mu);
	return n;
}

SW_EXPORT void
sw_client_get_stats(const sw_client *c, sw_client_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	sw_client *m = (sw_client *)c;	/* the mutex, not the figures, changes */
	pthread_mutex_lock(&m->mu);
	st->sent = c->sent;
	st->dropped = c->dropped;
	st->queued = c->pending_n;
	st->bytes_sent = c->bytes_sent;
	st->subscribed = c->nsubs > 0;
	st->auth_failures = c->auth_failures;
	st->auth_status = c->auth_status;
	pthread_mutex_unlock(&m->mu);
	st->next_seq = c->seq;
}

SW_EXPORT uint64_t
sw_client_incarnation(const sw_client *c)
{
	return c ? c->inc : 0;
}

SW_EXPORT void
sw_client_destroy(sw_client **cp)
{
	sw_client_destroy_stats(cp, NULL);
}

SW_EXPORT void
sw_client_destroy_stats(sw_client **cp, sw_client_stats *final)
{
	sw_client *c = cp ? *cp : NULL;
	if (final)
		memset(final, 0, sizeof(*final));
	if (!c)
		return;
	int64_t start = cl_now_ms();
	/* the sender sends what it can for at most linger_ms, then ends */
	pthread_mutex_lock(&c->mu);
	c->closing = 1;
	c->close_deadline = start + (c->o.linger_ms > 0 ? c->o.linger_ms : 0);
	c->idle = 0;
	pthread_mutex_unlock(&c->mu);
	wake(c);
	pthread_join(c->thr, NULL);
	while (c->head) {
		struct pending *p = c->head;
		c->head = p->next;
		cl_pending_end(c, p, 0);	/* accepted: a zero-copy buffer is released */
		c->dropped++;
	}
	c->tail = NULL;
	c->pending_n = 0;
	c->pending_bytes = 0;
	if (final) {
		/* the sender has ended: the figures are the caller's alone now */
		final->sent = c->sent;
		final->dropped = c->dropped;
		final->bytes_sent = c->bytes_sent;
		final->next_seq = c->seq;
		final->auth_failures = c->auth_failures;
		final->auth_status = c->auth_status;
	}
	int left = c->o.linger_ms - (int)(cl_now_ms() - start);
	if (left < 0)
		left = 0;
	zmq_setsockopt(c->sock, ZMQ_LINGER, &left, sizeof(left));
	if (c->mon) {
		zmq_socket_monitor(c->sock, NULL, 0);
		zmq_close(c->mon);
	}
	zmq_close(c->sock);
	ctx_term(c->ctx);	/* after it no frame is left to return a copy */
	close(c->efd);
	while (c->pool) {
		struct copybuf *b = c->pool;
		c->pool = b->next;
		free(b);
	}
	pthread_mutex_destroy(&c->node_mu);
	pthread_mutex_destroy(&c->pool_mu);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->slab);
	free(c->endpoint);
	free(c);
	*cp = NULL;
}
