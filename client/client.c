/*
 * client.c: libsinkwatch, the training-job side (see sinkwatch/client.h).
 *
 * The socket is an XPUB that connects to the daemon's SUB. ZeroMQ's PUB
 * drops silently what is sent before a subscription arrives (the slow
 * joiner), so the client reads the subscription messages its XPUB gets,
 * knows whether a daemon is listening, and keeps messages in its own bounded
 * queue until one is. ZMQ_XPUB_NODROP turns a full ZeroMQ queue into EAGAIN,
 * so every drop is seen and counted instead of vanishing.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#define SW_BUILDING_CLIENT 1
#include "sinkwatch/client.h"
#include "proto/swproto.h"

struct pending {
	zmq_msg_t hdr, data;
	int has_data;
	size_t bytes;
	struct pending *next;
};

struct sw_client {
	void *ctx, *sock;
	sw_client_opts o;
	char *endpoint;
	char run[SWP_RUN_MAX + 1];
	char model[SWP_MODEL_MAX + 1];
	sw_run_info info;
	char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX];
	size_t topic_len;
	int nsubs;		/* subscriptions matching our topic */
	int ended;
	uint64_t seq;
	struct pending *head, *tail;
	size_t pending_n, pending_bytes;
	uint64_t sent, dropped, bytes_sent;
	char err[256];
};

struct zc_hint {
	sw_release_cb cb;
	void *hint;
	int armed;	/* 0 once the send failed: the buffer is the caller's again */
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
	o->block_timeout_ms = -1;
	o->queue_max = 16;
	o->queue_max_bytes = (size_t)256 << 20;
	o->linger_ms = 2000;
}

/* Reads the subscription messages the XPUB has received. */
static void
poll_subs(sw_client *c)
{
	unsigned char buf[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX + 2];
	for (;;) {
		int n = zmq_recv(c->sock, buf, sizeof(buf), ZMQ_DONTWAIT);
		if (n < 1)
			return;
		size_t plen = (size_t)n - 1;
		if (plen > sizeof(buf) - 1)
			continue;	/* truncated: a prefix longer than any topic */
		if (plen > c->topic_len || memcmp(buf + 1, c->topic, plen) != 0)
			continue;
		if (buf[0] == 1)
			c->nsubs++;
		else if (buf[0] == 0 && c->nsubs > 0)
			c->nsubs--;
	}
}

/* Hands one message to ZeroMQ. 0, or -1 with errno (EAGAIN: queue full). */
static int
send_now(sw_client *c, zmq_msg_t *hdr, zmq_msg_t *data, int has_data, int flags)
{
	if (zmq_send(c->sock, c->topic, c->topic_len, ZMQ_SNDMORE | flags) < 0)
		return -1;
	/* after the first frame ZeroMQ takes the rest of the message */
	if (zmq_msg_send(hdr, c->sock, has_data ? ZMQ_SNDMORE : 0) < 0)
		return -1;
	if (has_data && zmq_msg_send(data, c->sock, 0) < 0)
		return -1;
	return 0;
}

static void
pending_free(struct pending *p)
{
	zmq_msg_close(&p->hdr);
	if (p->has_data)
		zmq_msg_close(&p->data);	/* runs a zero-copy release */
	free(p);
}

/* Sends queued messages while a daemon listens and ZeroMQ takes them. */
static void
flush_pending(sw_client *c, int flags)
{
	while (c->head && c->nsubs > 0) {
		struct pending *p = c->head;
		if (send_now(c, &p->hdr, &p->data, p->has_data, flags) < 0)
			return;
		c->head = p->next;
		if (!c->head)
			c->tail = NULL;
		c->pending_n--;
		c->pending_bytes -= p->bytes;
		c->sent++;
		c->bytes_sent += p->bytes;
		free(p);	/* the zmq_msg_t contents now belong to ZeroMQ */
	}
}

/* Waits up to timeout_ms (-1: forever) for a subscriber and an empty queue. */
static int
wait_ready(sw_client *c, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	for (;;) {
		poll_subs(c);
		flush_pending(c, ZMQ_DONTWAIT);
		if (c->nsubs > 0 && !c->head)
			return 0;
		long wait = 50;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return -1;
			wait = left < wait ? (long)left : wait;
		}
		zmq_pollitem_t it = { c->sock, 0, ZMQ_POLLIN, 0 };
		zmq_poll(&it, 1, wait);
	}
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
	c->o = *opts;
	if (!c->o.endpoint)
		c->o.endpoint = SW_CLIENT_DEFAULT_ENDPOINT;
	if (c->o.queue_max < 1)
		c->o.queue_max = 1;
	int rc = SW_EINVAL;
	size_t rl = strlen(run->run), ml = run->model ? strlen(run->model) : 0;
	int tl = swp_topic(run->run, c->topic, sizeof(c->topic));
	if (tl < 0 || rl > SWP_RUN_MAX || ml > SWP_MODEL_MAX || run->layers == 0 ||
	    run->heads == 0 || run->layers > SWP_LAYERS_MAX || run->heads > SWP_HEADS_MAX)
		goto fail;
	c->topic_len = (size_t)tl;
	memcpy(c->run, run->run, rl + 1);
	if (ml)
		memcpy(c->model, run->model, ml + 1);
	c->info = *run;
	c->info.run = c->run;
	c->info.model = c->model;
	rc = SW_ENOMEM;
	if (!(c->endpoint = strdup(c->o.endpoint)))
		goto fail;
	c->o.endpoint = c->endpoint;
	rc = SW_EZMQ;
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
	int one = 1, hwm = c->o.queue_max, linger = c->o.linger_ms, ivl = 100, ivlmax = 1000;
	int sndtimeo = c->o.blocking ? c->o.block_timeout_ms : 0;
	if (zmq_setsockopt(c->sock, ZMQ_XPUB_NODROP, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_XPUB_VERBOSER, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof(linger)) ||
	    zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof(sndtimeo)) ||
	    zmq_setsockopt(c->sock, ZMQ_IMMEDIATE, &one, sizeof(one)) ||
	    zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl)) ||
	    zmq_setsockopt(c->sock, ZMQ_RECONNECT_IVL_MAX, &ivlmax, sizeof(ivlmax)))
		goto fail;
	if (zmq_connect(c->sock, c->endpoint) != 0) {
		rc = SW_EINVAL;
		goto fail;
	}
	*out = c;
	return 0;
fail:
	if (c->sock)
		zmq_close(c->sock);
	if (c->ctx)
		zmq_ctx_term(c->ctx);
	free(c->endpoint);
	free(c);
	return rc;
}

static void
free_buffer(void *data, void *hint)
{
	(void)hint;
	free(data);
}

static void
release_zc(void *data, void *hint)
{
	struct zc_hint *z = hint;
	if (z->armed)
		z->cb(data, z->hint);
	free(z);
}

/* Counts a drop and closes the message; a zero-copy buffer stays the caller's. */
static void
discard(sw_client *c, zmq_msg_t *hdr, zmq_msg_t *data, int has_data, struct zc_hint *z)
{
	c->dropped++;
	if (z)
		z->armed = 0;
	zmq_msg_close(hdr);
	if (has_data)
		zmq_msg_close(data);
}

/*
 * Sends or queues the message (hdr, data); takes them over in every case
 * (closing them on a drop). Returns 0 or SW_EDROPPED / SW_ETIMEDOUT.
 */
static int
dispatch(sw_client *c, zmq_msg_t *hdr, zmq_msg_t *data, int has_data, size_t bytes,
    struct zc_hint *z)
{
	poll_subs(c);
	flush_pending(c, ZMQ_DONTWAIT);
	if (c->o.blocking) {
		if (wait_ready(c, c->o.block_timeout_ms) < 0 ||
		    send_now(c, hdr, data, has_data, 0) < 0)
			goto drop_timeout;
		c->sent++;
		c->bytes_sent += bytes;
		return 0;
	}
	if (!c->head && c->nsubs > 0 && send_now(c, hdr, data, has_data, ZMQ_DONTWAIT) == 0) {
		c->sent++;
		c->bytes_sent += bytes;
		return 0;
	}
	/* no daemon yet, or ZeroMQ's queue is full: queue it if there is room */
	if (c->pending_n < (size_t)c->o.queue_max &&
	    c->pending_bytes + bytes <= c->o.queue_max_bytes) {
		struct pending *p = malloc(sizeof(*p));
		if (p) {
			zmq_msg_init(&p->hdr);
			zmq_msg_move(&p->hdr, hdr);
			p->has_data = has_data;
			zmq_msg_init(&p->data);
			if (has_data)
				zmq_msg_move(&p->data, data);
			p->bytes = bytes;
			p->next = NULL;
			if (c->tail)
				c->tail->next = p;
			else
				c->head = p;
			c->tail = p;
			c->pending_n++;
			c->pending_bytes += bytes;
			zmq_msg_close(hdr);
			if (has_data)
				zmq_msg_close(data);
			return 0;
		}
	}
	discard(c, hdr, data, has_data, z);
	return seterr(c, SW_EDROPPED, "dropped message %llu: %s",
	    (unsigned long long)(c->seq - 1), c->nsubs ? "queue full" : "no daemon subscribed");
drop_timeout:
	discard(c, hdr, data, has_data, z);
	return seterr(c, SW_ETIMEDOUT, "blocking send timed out after %d ms",
	    c->o.block_timeout_ms);
}

/* Encodes the header of a snapshot or end message into a ZeroMQ message. */
static int
make_header(sw_client *c, const sw_snapshot *s, zmq_msg_t *hdr)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	memcpy(m.run, c->run, sizeof(m.run));
	m.seq = c->seq;
	m.time = wall_time();
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
		m.shape[0] = c->info.heads;
		m.shape[1] = s->rows;
		m.shape[2] = s->keys;
		m.qpos = (uint32_t *)s->qpos;
		m.tensor = s->data;
		m.tensor_bytes = s->bytes;
	} else {
		m.type = SWP_END;
	}
	void *buf;
	size_t len;
	int rc = swp_encode_header(&m, &buf, &len);
	if (rc < 0)
		return seterr(c, SW_EINVAL, "invalid snapshot: %s", swp_strerror(rc));
	if (zmq_msg_init_data(hdr, buf, len, free_buffer, NULL) != 0) {
		free(buf);
		return seterr(c, SW_ENOMEM, "zmq_msg_init_data: %s", zmq_strerror(errno));
	}
	return 0;
}

static int
send_common(sw_client *c, const sw_snapshot *s, sw_release_cb release, void *hint)
{
	zmq_msg_t hdr, data;
	struct zc_hint *z = NULL;

	if (!c || !s || (!s->data && s->bytes))
		return c ? seterr(c, SW_EINVAL, "no snapshot or data") : SW_EINVAL;
	if (c->ended)
		return seterr(c, SW_ECLOSED, "the run was ended");
	int rc = make_header(c, s, &hdr);
	if (rc)
		return rc;
	if (release) {
		if (!(z = malloc(sizeof(*z)))) {
			zmq_msg_close(&hdr);
			return seterr(c, SW_ENOMEM, "out of memory");
		}
		z->cb = release;
		z->hint = hint;
		z->armed = 1;
		if (zmq_msg_init_data(&data, (void *)s->data, s->bytes, release_zc, z) != 0) {
			free(z);
			zmq_msg_close(&hdr);
			return seterr(c, SW_ENOMEM, "zmq_msg_init_data: %s", zmq_strerror(errno));
		}
	} else {
		if (zmq_msg_init_size(&data, s->bytes) != 0) {
			zmq_msg_close(&hdr);
			return seterr(c, SW_ENOMEM, "out of memory for %zu bytes", s->bytes);
		}
		memcpy(zmq_msg_data(&data), s->data, s->bytes);
	}
	c->seq++;
	/* a zero-copy buffer not taken stays the caller's: no release call */
	return dispatch(c, &hdr, &data, 1, s->bytes, z);
}

SW_EXPORT int
sw_client_send(sw_client *c, const sw_snapshot *s)
{
	return send_common(c, s, NULL, NULL);
}

SW_EXPORT int
sw_client_send_zc(sw_client *c, const sw_snapshot *s, sw_release_cb release, void *hint)
{
	if (!release)
		return c ? seterr(c, SW_EINVAL, "send_zc needs a release callback") : SW_EINVAL;
	return send_common(c, s, release, hint);
}

SW_EXPORT int
sw_client_end(sw_client *c)
{
	zmq_msg_t hdr, none;
	if (!c)
		return SW_EINVAL;
	if (c->ended)
		return seterr(c, SW_ECLOSED, "the run was already ended");
	int rc = make_header(c, NULL, &hdr);
	if (rc)
		return rc;
	c->ended = 1;
	c->seq++;
	zmq_msg_init(&none);
	return dispatch(c, &hdr, &none, 0, 0, NULL);
}

SW_EXPORT int
sw_client_flush(sw_client *c, int timeout_ms)
{
	if (!c)
		return SW_EINVAL;
	int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		poll_subs(c);
		flush_pending(c, ZMQ_DONTWAIT);
		int64_t left = deadline - now_ms();
		if (!c->head || left <= 0)
			return (int)c->pending_n;
		zmq_pollitem_t it = { c->sock, 0, ZMQ_POLLIN, 0 };
		zmq_poll(&it, 1, left < 20 ? (long)left : 20);
	}
}

SW_EXPORT void
sw_client_get_stats(const sw_client *c, sw_client_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!c)
		return;
	st->sent = c->sent;
	st->dropped = c->dropped;
	st->queued = c->pending_n;
	st->bytes_sent = c->bytes_sent;
	st->next_seq = c->seq;
	st->subscribed = c->nsubs > 0;
}

SW_EXPORT void
sw_client_destroy(sw_client **cp)
{
	sw_client *c = cp ? *cp : NULL;
	if (!c)
		return;
	int64_t start = now_ms();
	sw_client_flush(c, c->o.linger_ms);
	while (c->head) {
		struct pending *p = c->head;
		c->head = p->next;
		pending_free(p);
		c->dropped++;
	}
	int left = c->o.linger_ms - (int)(now_ms() - start);
	if (left < 0)
		left = 0;
	zmq_setsockopt(c->sock, ZMQ_LINGER, &left, sizeof(left));
	zmq_close(c->sock);
	zmq_ctx_term(c->ctx);
	free(c->endpoint);
	free(c);
	*cp = NULL;
}
