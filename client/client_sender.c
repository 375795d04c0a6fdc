/*
 * client_sender.c: a handle's sender thread (client.c says why it exists):
 * it owns the socket, reads the subscriptions and the monitor's events,
 * hands queued messages to ZeroMQ in order, counts what it cannot, and
 * keeps the pool of message copies.
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

int
cl_seterr(sw_client *c, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return code;
}

int64_t
cl_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
void *
cl_copy_get(sw_client *c, size_t bytes)
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

/* The slab of queue nodes (client_int.h), touched now. 0, or -1. */
int
cl_nodes_init(sw_client *c)
{
	size_t n = (size_t)c->o.queue_max + 2, sz = sizeof(struct pending) + NODE_HDR;
	sz = (sz + 63) & ~(size_t)63;
	if (n > NODES_MAX)
		n = NODES_MAX;
	if (!(c->slab = malloc(n * sz)))
		return -1;
	memset(c->slab, 0, n * sz);	/* faults the pages in here, not in a send */
	for (size_t i = n; i-- > 0;) {
		struct pending *p = (struct pending *)(void *)((char *)c->slab + i * sz);
		p->pooled = 1;
		p->next = c->nodes;
		c->nodes = p;
	}
	return 0;
}

/* A node for a message whose header takes at most hcap bytes, or NULL. */
struct pending *
cl_pending_new(sw_client *c, size_t hcap)
{
	struct pending *p = NULL;
	if (hcap <= NODE_HDR) {
		pthread_mutex_lock(&c->node_mu);
		if ((p = c->nodes) != NULL)
			c->nodes = p->next;
		pthread_mutex_unlock(&c->node_mu);
	}
	if (!p && (p = malloc(sizeof(*p) + hcap)) != NULL)
		p->pooled = 0;
	return p;
}

/* A node is done with: back to the free list, or freed. */
void
cl_pending_free(sw_client *c, struct pending *p)
{
	if (!p->pooled) {
		free(p);
		return;
	}
	pthread_mutex_lock(&c->node_mu);
	p->next = c->nodes;
	c->nodes = p;
	pthread_mutex_unlock(&c->node_mu);
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
void
cl_pending_end(sw_client *c, struct pending *p, int give_back)
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
	cl_pending_free(c, p);
}

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
				c->refused_ms = cl_now_ms();
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
int
cl_setup_curve(sw_client *c)
{
	static const char *const opts[2] = { "server_key", "key_file" };
	char e[1200];
	if (swn_curve_client(c->sock, c->o.server_key, c->o.key_file, opts, NULL, e,
	    sizeof(e)) < 0) {
		cl_seterr(c, SW_EKEY, "%s", e);
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
			cl_pending_free(c, p);	/* the frames are ZeroMQ's now */
			pthread_cond_broadcast(&c->cv);
		} else {
			c->dropped++;	/* refused for good (ETERM, ENOMEM): accepted, so released */
			pthread_cond_broadcast(&c->cv);
			/* not under mu: a release callback may call into the handle */
			pthread_mutex_unlock(&c->mu);
			cl_pending_end(c, p, 0);
			pthread_mutex_lock(&c->mu);
		}
	}
	return 0;
}

void *
cl_sender_main(void *arg)
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
			int64_t left = c->close_deadline - cl_now_ms();
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
		if (refused && cl_now_ms() - refused >= REFUSED_RETRY_MS)
			c->refused_ms = 0;
		pthread_mutex_unlock(&c->mu);
		if (refused && cl_now_ms() - refused >= REFUSED_RETRY_MS) {
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
