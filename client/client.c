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
 * half full (a burst), in blocking mode, and on flush and destroy. A
 * message thus waits at most NAP_MS in the queue, and an idle handle wakes
 * 1000 / NAP_MS times a second. Shorter naps after each message were
 * tried: in that virtual machine the sender's frequent wakeups on the
 * other CPU slowed the caller's sends (p50 1.4 us with 16 ms naps, 11 us
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

#define NAP_MS 16
#define REFUSED_RETRY_MS 5000	/* a refused handshake is tried again this often */
/*
 * ZeroMQ's queue (ZMQ_SNDHWM) counts messages, not bytes: kept short, so
 * that queue_max_bytes, which bounds the handle's own queue, stays the
 * bound on what the handle holds (at most this many more messages).
 */
#define ZMQ_HWM_MAX 16
/* the sender waits this long in zmq_send() for room in ZeroMQ's queue */
#define SEND_WAIT_MS 20

/*
 * One message from send to ZeroMQ. The caller encodes the header into hbuf
 * (no allocation but p itself); the sender builds the data frame on its
 * first try and keeps it across retries. ZeroMQ's I/O thread may be done
 * with the data before zmq_msg_send() returns, so what it frees when done
 * (struct zc_rel, or the library's copy) is apart from p, which the sender
 * frees once the frame is handed over.
 */
struct pending {
	struct pending *next;
	uint64_t seq;
	void *data;		/* NULL: an end message */
	size_t bytes;
	sw_release_cb cb;	/* NULL: data is the library's copy */
	void *hint;
	struct zc_rel *z;	/* framed zero-copy data: what ZeroMQ calls back with */
	int framed;		/* msg holds the data frame */
	int nsent;		/* frames ZeroMQ has taken: a retry resumes there */
	zmq_msg_t msg;
	size_t hlen;
	unsigned char hbuf[];
};

/*
 * Copies of sent data are recycled. A 4 MiB allocation that goes back to
 * the system and is faulted in again costs 1024 page faults per send: 17 ms
 * measured in a virtual machine at 16 us a fault, the copying send's p50
 * with the daemon up (the I/O thread frees, the heap top is trimmed). Free
 * copies wait in the pool, at most queue_max of them and queue_max_bytes
 * together; ZeroMQ's I/O thread puts them back (free_copy), the caller
 * takes them. Each has a header of COPY_HDR bytes before its data.
 */
struct copybuf {
	struct copybuf *next;
	size_t cap;
};
#define COPY_HDR 64

struct zc_rel {
	sw_release_cb cb;
	void *hint;
	int armed;		/* 0: the buffer went back to the caller, no callback */
};

struct sw_client {
	void *ctx, *sock;	/* sock: the sender thread's once it runs */
	sw_client_opts o;
	char *endpoint;
	char run[SWP_RUN_MAX + 1];
	char model[SWP_MODEL_MAX + 1];
	sw_run_info info;
	char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX];
	size_t topic_len;
	uint64_t inc;		/* the incarnation; never 0 */
	uint32_t rank, senders;	/* this sender of senders (1 when alone) */
	int ended;		/* caller's thread only */
	uint64_t seq;		/* caller's thread only */
	char err[256];		/* caller's thread only */

	pthread_t thr;
	int efd;		/* eventfd: wakes the sender */
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* broadcast on every change the caller may wait for */
	/* under mu */
	struct pending *head, *tail, *inflight;
	size_t pending_n, pending_bytes;
	uint64_t sent, dropped, bytes_sent, done_seq;
	int nsubs;		/* subscriptions matching our topic; written by the sender */
	int idle;		/* the sender sleeps in zmq_poll(): write efd to wake it */
	int closing;
	int64_t close_deadline;
	uint64_t auth_failures;	/* CURVE handshakes that failed */
	int auth_status;
	void *mon;		/* CURVE: the socket monitor's events, the sender's */
	int64_t refused_ms;	/* a handshake refused (400): when; 0 none pending */

	pthread_mutex_t pool_mu;	/* the copy pool; taken alone, never with mu */
	struct copybuf *pool;
	size_t pool_n, pool_bytes;
};

static int
seterr(sw_client *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return code;
}

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

static int64_t
now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
 * urgent, or the queue is half full. Clears idle: one write per sleep.
 */
static int
need_wake(sw_client *c, int urgent)
{
	if (!c->idle)
		return 0;
	if (!urgent && c->pending_n < ((size_t)c->o.queue_max + 1) / 2 &&
	    c->pending_bytes < c->o.queue_max_bytes / 2)
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
	o->endpoint = SW_CLIENT_DEFAULT_ENDPOINT;
	o->blocking = 0;
	o->block_timeout_ms = SW_CLIENT_BLOCK_TIMEOUT_MS;
	o->queue_max = SW_CLIENT_QUEUE_MAX;
	o->queue_max_bytes = SW_CLIENT_QUEUE_MAX_BYTES;
	o->linger_ms = 2000;
}

/* ZeroMQ is done with a zero-copy frame */
static void
release_zc(void *data, void *hint)
{
	struct zc_rel *z = hint;
	if (z->armed)
		z->cb(data, z->hint);
	free(z);
}

/* A buffer of at least bytes for a copy: from the pool, or new. */
static void *
copy_get(sw_client *c, size_t bytes)
{
	struct copybuf *b, **pp;
	pthread_mutex_lock(&c->pool_mu);
	for (pp = &c->pool; (b = *pp) != NULL; pp = &b->next)
		if (b->cap >= bytes && b->cap / 2 <= bytes) {
			*pp = b->next;
			c->pool_n--;
			c->pool_bytes -= b->cap;
			break;
		}
	pthread_mutex_unlock(&c->pool_mu);
	if (!b) {
		if (bytes > SIZE_MAX - COPY_HDR || !(b = malloc(COPY_HDR + bytes)))
			return NULL;
		b->cap = bytes;
	}
	return (char *)b + COPY_HDR;
}

/* A copy is done with: into the pool if it has room, else freed. */
static void
copy_put(sw_client *c, void *data)
{
	struct copybuf *b = (struct copybuf *)(void *)((char *)data - COPY_HDR);
	pthread_mutex_lock(&c->pool_mu);
	if (c->pool_n < (size_t)c->o.queue_max &&
	    c->pool_bytes + b->cap <= c->o.queue_max_bytes) {
		b->next = c->pool;
		c->pool = b;
		c->pool_n++;
		c->pool_bytes += b->cap;
		b = NULL;
	}
	pthread_mutex_unlock(&c->pool_mu);
	free(b);
}

/* ZeroMQ is done with a frame of the library's copy */
static void
free_copy(void *data, void *hint)
{
	copy_put(hint, data);
}

/* Builds p's data frame (sender thread). 0, or -1 with errno. */
static int
frame(sw_client *c, struct pending *p)
{
	if (!p->cb)
		return zmq_msg_init_data(&p->msg, p->data, p->bytes, free_copy, c);
	if (!(p->z = malloc(sizeof(*p->z))))
		return -1;
	p->z->cb = p->cb;
	p->z->hint = p->hint;
	p->z->armed = 1;
	if (zmq_msg_init_data(&p->msg, p->data, p->bytes, release_zc, p->z) != 0) {
		free(p->z);
		p->z = NULL;
		return -1;
	}
	return 0;
}

/*
 * Ends a message that was not handed over. give_back: it was refused, so a
 * zero-copy buffer is the caller's again and no callback runs; otherwise
 * it was accepted and is released.
 */
static void
pending_end(sw_client *c, struct pending *p, int give_back)
{
	if (p->framed) {
		if (give_back && p->z)
			p->z->armed = 0;
		zmq_msg_close(&p->msg);		/* runs release_zc or free_copy */
	} else if (p->data && !p->cb) {
		copy_put(c, p->data);
	} else if (p->data && !give_back) {
		p->cb(p->data, p->hint);
	}
	free(p);
}

/* ---- the sender thread ---- */

/* Reads the subscription messages the XPUB has received. */
static void
poll_subs(sw_client *c)
{
	unsigned char buf[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX + 2];
	int n0 = c->nsubs, ns = n0;
	for (;;) {
		int n = zmq_recv(c->sock, buf, sizeof(buf), ZMQ_DONTWAIT);
		if (n < 1)
			break;
		size_t plen = (size_t)n - 1;
		if (plen > sizeof(buf) - 1)
			continue;	/* truncated: a prefix longer than any topic */
		if (plen > c->topic_len || memcmp(buf + 1, c->topic, plen) != 0)
			continue;
		if (buf[0] == 1)
			ns++;
		else if (buf[0] == 0 && ns > 0)
			ns--;
	}
	if (ns != n0) {
		pthread_mutex_lock(&c->mu);
		c->nsubs = ns;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
	}
}

/*
 * The socket monitor's events (CURVE): two frames, 6 bytes (event, uint16;
 * value, uint32: for a failed authentication the ZAP status code) and the
 * endpoint. Counts the failed handshakes.
 */
static void
poll_monitor(sw_client *c)
{
	for (;;) {
		zmq_msg_t ev, ep;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, c->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return;
		}
		int more = zmq_msg_more(&ev);
		uint16_t event = 0;
		uint32_t value = 0;
		if (zmq_msg_size(&ev) >= 6) {
			memcpy(&event, zmq_msg_data(&ev), 2);
			memcpy(&value, (char *)zmq_msg_data(&ev) + 2, 4);
		}
		zmq_msg_close(&ev);
		while (more) {	/* the endpoint */
			zmq_msg_init(&ep);
			if (zmq_msg_recv(&ep, c->mon, 0) < 0)
				more = 0;
			else
				more = zmq_msg_more(&ep);
			zmq_msg_close(&ep);
		}
		if (event & (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
		    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)) {
			pthread_mutex_lock(&c->mu);
			c->auth_failures++;
			c->auth_status = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? (int)value : -1;
			/* libzmq does not try a handshake refused with 400 again */
			if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH && value == 400 && !c->refused_ms)
				c->refused_ms = now_ms();
			pthread_mutex_unlock(&c->mu);
		}
	}
}

/*
 * CURVE on the XPUB before its connect when keys are given (options, else
 * the environment), and a monitor of its handshakes in any case: a client
 * without keys that meets a daemon with CURVE fails its handshake too. 0,
 * or SW_EKEY / SW_EZMQ.
 */
static int
setup_curve(sw_client *c)
{
	static const char *const opts[2] = { "server_key", "key_file" };
	char e[1200];
	if (swn_curve_client(c->sock, c->o.server_key, c->o.key_file, opts, NULL, e,
	    sizeof(e)) < 0) {
		seterr(c, SW_EKEY, "%s", e);
		return SW_EKEY;
	}
	int zero = 0;
	if (zmq_socket_monitor(c->sock, "inproc://sinkwatch-monitor",
	    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
	    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0 ||
	    !(c->mon = zmq_socket(c->ctx, ZMQ_PAIR)) ||
	    zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_connect(c->mon, "inproc://sinkwatch-monitor") != 0)
		return SW_EZMQ;
	return 0;
}

/* Hands one message to ZeroMQ. 0, or -1 with errno (EAGAIN: queue full). */
static int
send_now(sw_client *c, struct pending *p)
{
	if (p->data && !p->framed) {
		if (frame(c, p) != 0)
			return -1;
		p->framed = 1;
	}
	/*
	 * Waits up to SEND_WAIT_MS (ZMQ_SNDTIMEO) for room: ZeroMQ wakes it
	 * when the pipe drains, which polling cannot (an XPUB always reports
	 * POLLOUT). Only the sender waits; the caller's thread never does.
	 */
	if (p->nsent < 1) {
		if (zmq_send(c->sock, c->topic, c->topic_len, ZMQ_SNDMORE) < 0)
			return -1;
		p->nsent = 1;
	}
	/*
	 * After the first frame ZeroMQ takes the rest (its high-water mark
	 * counts whole messages); were a later frame refused, the retry goes
	 * on from it rather than start a second message inside this one.
	 */
	if (p->nsent < 2) {
		if (zmq_send(c->sock, p->hbuf, p->hlen, p->data ? ZMQ_SNDMORE : 0) < 0)
			return -1;
		p->nsent = 2;
	}
	if (p->data && zmq_msg_send(&p->msg, c->sock, 0) < 0)
		return -1;
	return 0;
}

/*
 * Sends queued messages while a daemon listens and ZeroMQ takes them.
 * Returns with mu held: 1 if ZeroMQ's queue was full (try again soon).
 */
static int
send_queued(sw_client *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->head && c->nsubs > 0) {
		struct pending *p = c->head;
		c->head = p->next;
		if (!c->head)
			c->tail = NULL;
		c->inflight = p;
		uint64_t seq = p->seq;
		size_t bytes = p->bytes;
		pthread_mutex_unlock(&c->mu);
		int rc = send_now(c, p), err = errno;
		pthread_mutex_lock(&c->mu);
		c->inflight = NULL;
		if (rc < 0 && err == EAGAIN) {
			p->next = c->head;
			c->head = p;
			if (!c->tail)
				c->tail = p;
			pthread_cond_broadcast(&c->cv);
			return 1;
		}
		c->pending_n--;
		c->pending_bytes -= bytes;
		c->done_seq = seq + 1;
		if (rc == 0) {
			c->sent++;
			c->bytes_sent += bytes;
			free(p);	/* the frames are ZeroMQ's now */
			pthread_cond_broadcast(&c->cv);
		} else {
			c->dropped++;	/* refused for good (ETERM, ENOMEM): accepted, so released */
			pthread_cond_broadcast(&c->cv);
			/* not under mu: a release callback may call into the handle */
			pthread_mutex_unlock(&c->mu);
			pending_end(c, p, 0);
			pthread_mutex_lock(&c->mu);
		}
	}
	return 0;
}

static void *
sender_main(void *arg)
{
	sw_client *c = arg;
	/*
	 * SCHED_BATCH: waking the sender does not preempt the thread that
	 * woke it (the training loop), which would otherwise pay for the
	 * sender's ZeroMQ work on its own CPU. Not fatal if refused.
	 */
	struct sched_param sp = { 0 };
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
	for (;;) {
		poll_subs(c);
		int full = send_queued(c);	/* returns with mu held */
		long timeout = full ? 1 : NAP_MS;	/* ZeroMQ has no POLLOUT for a full XPUB */
		if (c->closing) {
			int64_t left = c->close_deadline - now_ms();
			if (!c->head || left <= 0) {
				pthread_mutex_unlock(&c->mu);
				return NULL;
			}
			if (left < timeout)
				timeout = (long)left;
		}
		c->idle = 1;
		pthread_mutex_unlock(&c->mu);
		zmq_pollitem_t it[3] = {
			{ c->sock, 0, ZMQ_POLLIN, 0 },
			{ NULL, c->efd, ZMQ_POLLIN, 0 },
			{ c->mon, 0, ZMQ_POLLIN, 0 },
		};
		zmq_poll(it, c->mon ? 3 : 2, timeout);
		if (c->mon && (it[2].revents & ZMQ_POLLIN))
			poll_monitor(c);
		/*
		 * Refused (400): connect again every REFUSED_RETRY_MS, so that a key
		 * the daemon allows later (its SIGHUP) gets in without a restart of
		 * the job (the sender thread owns the socket).
		 */
		pthread_mutex_lock(&c->mu);
		int64_t refused = c->refused_ms;
		if (refused && now_ms() - refused >= REFUSED_RETRY_MS)
			c->refused_ms = 0;
		pthread_mutex_unlock(&c->mu);
		if (refused && now_ms() - refused >= REFUSED_RETRY_MS) {
			zmq_disconnect(c->sock, c->endpoint);
			zmq_connect(c->sock, c->endpoint);
		}
		if (it[1].revents & ZMQ_POLLIN) {
			uint64_t v;
			while (read(c->efd, &v, sizeof(v)) < 0 && errno == EINTR)
				;
		}
		pthread_mutex_lock(&c->mu);
		c->idle = 0;
		pthread_mutex_unlock(&c->mu);
	}
}

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
	if (!c->o.endpoint)
		c->o.endpoint = SW_CLIENT_DEFAULT_ENDPOINT;
	if (c->o.queue_max < 1)
		c->o.queue_max = 1;
	int rc = SW_EINVAL, sync = 0;
	size_t rl = strlen(run->run), ml = run->model ? strlen(run->model) : 0;
	int tl = swp_topic(run->run, c->topic, sizeof(c->topic));
	c->senders = c->o.senders ? c->o.senders : 1;
	c->rank = c->o.rank;
	if (tl < 0 || rl > SWP_RUN_MAX || ml > SWP_MODEL_MAX || run->layers == 0 ||
	    run->heads == 0 || run->layers > SWP_LAYERS_MAX || run->heads > SWP_HEADS_MAX ||
	    (c->o.resuming && c->o.resume_from < 0))
		goto fail;
	/*
	 * Several senders share rank 0's incarnation: a rank > 0 that picked
	 * its own would be an incarnation whose other senders never come.
	 */
	if (c->senders > SWP_SENDERS_MAX || c->rank >= c->senders ||
	    (c->senders > 1 && c->rank > 0 && c->o.incarnation == 0))
		goto fail;
	c->topic_len = (size_t)tl;
	memcpy(c->run, run->run, rl + 1);
	if (ml)
		memcpy(c->model, run->model, ml + 1);
	c->info = *run;
	c->info.run = c->run;
	c->info.model = c->model;
	c->inc = c->o.incarnation ? c->o.incarnation : new_incarnation(c);
	rc = SW_ENOMEM;
	if (!(c->endpoint = strdup(c->o.endpoint)))
		goto fail;
	c->o.endpoint = c->endpoint;
	pthread_condattr_t ca;
	if (pthread_condattr_init(&ca))
		goto fail;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (pthread_cond_init(&c->cv, &ca)) {
		pthread_condattr_destroy(&ca);
		goto fail;
	}
	pthread_condattr_destroy(&ca);
	if (pthread_mutex_init(&c->mu, NULL)) {
		pthread_cond_destroy(&c->cv);
		goto fail;
	}
	if (pthread_mutex_init(&c->pool_mu, NULL)) {
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
		goto fail;
	}
	sync = 1;
	rc = SW_EZMQ;
	if ((c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		seterr(c, rc, "eventfd: %s", strerror(errno));
		goto fail;
	}
	if (!(c->ctx = zmq_ctx_new()))
		goto fail;
	/* one I/O thread for this handle */
	zmq_ctx_set(c->ctx, ZMQ_IO_THREADS, 1);
	if (!(c->sock = zmq_socket(c->ctx, ZMQ_XPUB)))
		goto fail;
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
		goto fail;
	if ((rc = setup_curve(c)) != 0)
		goto fail;
	rc = SW_EZMQ;
	if (zmq_connect(c->sock, c->endpoint) != 0) {
		rc = SW_EINVAL;
		goto fail;
	}
	/* the sender takes no signals: they stay the application's */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int trc = pthread_create(&c->thr, NULL, sender_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (trc != 0) {
		rc = SW_ENOMEM;
		goto fail;
	}
	*out = c;
	return 0;
fail:
	if (c->mon)
		zmq_close(c->mon);
	if (c->sock)
		zmq_close(c->sock);
	if (c->ctx)
		ctx_term(c->ctx);
	if (c->efd >= 0)
		close(c->efd);
	if (sync) {
		pthread_mutex_destroy(&c->pool_mu);
		pthread_mutex_destroy(&c->mu);
		pthread_cond_destroy(&c->cv);
	}
	free(c->endpoint);
	free(c);
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
	if (!c->o.blocking && queue_full(c, bytes)) {
		int subs = c->nsubs;
		c->dropped++;
		pthread_mutex_unlock(&c->mu);
		pending_end(c, p, 1);
		return seterr_drop(c, c->seq - 1, subs);
	}
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
	int64_t deadline = c->o.block_timeout_ms < 0 ? -1 : now_ms() + c->o.block_timeout_ms;
	while (c->done_seq <= seq) {
		if (deadline >= 0 && now_ms() >= deadline) {
			if (c->inflight == p) {
				cv_wait(c, -1);	/* one non-blocking attempt: short */
				continue;
			}
			unlink_pending(c, p);
			c->dropped++;
			pthread_mutex_unlock(&c->mu);
			pending_end(c, p, 1);
			return seterr(c, SW_ETIMEDOUT, "blocking send timed out after %d ms",
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
	struct pending *p = malloc(sizeof(*p) + cap);
	if (!p)
		return seterr(c, SW_ENOMEM, "out of memory");
	int rc = swp_encode_header_to(&m, p->hbuf, cap, &p->hlen);
	if (rc < 0) {
		free(p);
		return seterr(c, SW_EINVAL, "invalid snapshot: %s", swp_strerror(rc));
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
		if (release) {
			p->data = (void *)s->data;
		} else if (!(p->data = copy_get(c, s->bytes))) {
			free(p);
			return seterr(c, SW_ENOMEM, "out of memory for %zu bytes", s->bytes);
		} else {
			memcpy(p->data, s->data, s->bytes);
		}
	}
	*out = p;
	return 0;
}

static int
send_common(sw_client *c, const sw_snapshot *s, const struct part *pt,
    sw_release_cb release, void *hint)
{
	struct pending *p;

	if (!c || !s || (!s->data && s->bytes))
		return c ? seterr(c, SW_EINVAL, "no snapshot or data") : SW_EINVAL;
	if (c->ended)
		return seterr(c, SW_ECLOSED, "the run was ended");
	int rc = make_msg(c, s, pt, release, hint, &p);
	if (rc)
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
		return c ? seterr(c, SW_EINVAL, "send_zc needs a release callback") : SW_EINVAL;
	return send_common(c, s, NULL, release, hint);
}

/* The part's arguments against the run (PROTOCOL.md 4); 0 or SW_EINVAL. */
static int
check_part(sw_client *c, const sw_snapshot *s, struct part *pt)
{
	if (pt->heads == 0)
		return seterr(c, SW_EINVAL, "part: heads 0 (a part holds 1 or more heads)");
	if ((uint64_t)pt->head0 + pt->heads > c->info.heads)
		return seterr(c, SW_EINVAL, "part: head0 %u + heads %u is over the run's "
		    "%u heads", pt->head0, pt->heads, c->info.heads);
	if (pt->rows_total == 0)
		pt->rows_total = s->rows;
	if (pt->rows_total > SWP_ROWS_MAX)
		return seterr(c, SW_EINVAL, "part: rows_total %u is over %d", pt->rows_total,
		    SWP_ROWS_MAX);
	if ((uint64_t)pt->row0 + s->rows > pt->rows_total)
		return seterr(c, SW_EINVAL, "part: row0 %u + rows %u is over rows_total %u",
		    pt->row0, s->rows, pt->rows_total);
	return 0;
}

static int
send_part(sw_client *c, const sw_snapshot *s, struct part *pt, sw_release_cb release,
    void *hint)
{
	if (!c || !s)
		return c ? seterr(c, SW_EINVAL, "no snapshot or data") : SW_EINVAL;
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
		return c ? seterr(c, SW_EINVAL, "send_zc needs a release callback") : SW_EINVAL;
	return send_part(c, s, &pt, release, hint);
}

SW_EXPORT int
sw_client_end(sw_client *c)
{
	struct pending *p;
	if (!c)
		return SW_EINVAL;
	if (c->ended)
		return seterr(c, SW_ECLOSED, "the run was already ended");
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
	int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	pthread_mutex_lock(&c->mu);
	if (need_wake(c, 1))
		wake(c);
	while (c->pending_n > 0 && now_ms() < deadline)
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
	int64_t start = now_ms();
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
		pending_end(c, p, 0);	/* accepted: a zero-copy buffer is released */
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
	int left = c->o.linger_ms - (int)(now_ms() - start);
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
	pthread_mutex_destroy(&c->pool_mu);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c->endpoint);
	free(c);
	*cp = NULL;
}
