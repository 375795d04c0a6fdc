/*
 * auth.c: the ZAP handler (see auth.h). ZeroMQ asks it, over a REP socket
 * bound at inproc://zeromq.zap.01, about every CURVE handshake of the
 * context's server sockets. Request frames (RFC 27): version "1.0",
 * request id, domain, address, routing id, mechanism, then the
 * mechanism's credentials (CURVE: the client's 32-byte public key). Reply:
 * version, the request id, status code ("200" allowed, "400" refused),
 * status text, user id, metadata (empty). The monitors' events (two
 * frames: event uint16 and value uint32, then the endpoint) count the
 * handshakes that failed before ZAP.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "net/auth.h"
#include "net/log.h"
#include "proto/swkeys.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 8
#define MON_FMT "inproc://sinkwatch-auth-monitor-%s"

enum { DOM_DATA, DOM_CONTROL, DOM_SUBSCRIBERS, DOM_UPSTREAM, NDOM };
static const char *const dom_name[NDOM] = {
	SWD_AUTH_DOMAIN_DATA, SWD_AUTH_DOMAIN_CONTROL, SWD_AUTH_DOMAIN_SUBSCRIBERS,
	SWD_AUTH_DOMAIN_UPSTREAM,
};

/* An allow list: 0 the data and control domains', 1 the subscribers'. */
struct list {
	uint8_t (*keys)[32];	/* the allowed public keys, binary */
	size_t n;
	char path[1024];	/* "" none: the domain allows no key */
};

struct swd_auth {
	void *sock;
	void *mon[NDOM];	/* PAIR: the monitors of the watched sockets */
	pthread_t thr;
	pthread_mutex_t mu;	/* the lists, the logged keys, the counters */
	struct list list[2];
	uint8_t logged[SWD_AUTH_LOGGED_MAX][32];
	size_t nlogged;
	int logged_full;
	int upstream_logged;	/* the first failure with the forwarder was logged */
	swd_auth_stats st;
};

static int
dom_index(const char *domain)
{
	for (int i = 0; i < NDOM; i++)
		if (!strcmp(domain, dom_name[i]))
			return i;
	return -1;
}

/* The allow file's keys, decoded. 0, or -1 with err. */
static int
load(const char *path, uint8_t (**out)[32], size_t *n, char *err, size_t errlen)
{
	char (*txt)[SWP_KEY_LEN + 1] = malloc(SWD_AUTH_KEYS_MAX * sizeof(*txt));
	uint8_t (*bin)[32] = NULL;
	if (!txt) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (swp_keys_read_list(path, txt, SWD_AUTH_KEYS_MAX, n, err, errlen) != 0) {
		free(txt);
		return -1;
	}
	if (!(bin = malloc((*n ? *n : 1) * sizeof(*bin)))) {
		free(txt);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < *n; i++)
		if (!zmq_z85_decode(bin[i], txt[i])) {
			snprintf(err, errlen, "%s: key %zu does not decode", path, i + 1);
			free(txt);
			free(bin);
			return -1;
		}
	free(txt);
	*out = bin;
	return 0;
}

/* One frame into buf (truncated, NUL-terminated); its size, or -1. */
static int
frame(void *s, char *buf, size_t cap, int *more)
{
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, 0) < 0) {
		zmq_msg_close(&m);
		return -1;
	}
	size_t n = zmq_msg_size(&m);
	memcpy(buf, zmq_msg_data(&m), n < cap - 1 ? n : cap - 1);
	buf[n < cap - 1 ? n : cap - 1] = '\0';
	*more = zmq_msg_more(&m);
	zmq_msg_close(&m);
	return (int)n;
}

/* Whether the key is allowed; counts and logs (once per key) a refusal. */
static int
decide(swd_auth *a, const char *domain, const char *address, const char *mech,
    const uint8_t *key, int keylen)
{
	int ok = 0, d = dom_index(domain);
	pthread_mutex_lock(&a->mu);
	const struct list *l = d == DOM_SUBSCRIBERS ? &a->list[1] :
	    d == DOM_DATA || d == DOM_CONTROL ? &a->list[0] : NULL;
	if (l && !strcmp(mech, "CURVE") && keylen == 32)
		for (size_t i = 0; i < l->n && !ok; i++)
			ok = !memcmp(l->keys[i], key, 32);
	if (ok) {
		a->st.allowed++;
		pthread_mutex_unlock(&a->mu);
		return 1;
	}
	if (d == DOM_CONTROL)
		a->st.refused_control++;
	else if (d == DOM_SUBSCRIBERS)
		a->st.refused_subscribers++;
	else
		a->st.refused_data++;
	int seen = 0;
	for (size_t i = 0; keylen == 32 && i < a->nlogged && !seen; i++)
		seen = !memcmp(a->logged[i], key, 32);
	char z[SWP_KEY_LEN + 1] = "-";
	if (keylen == 32)
		zmq_z85_encode(z, key, 32);
	if (!seen && keylen == 32 && a->nlogged < SWD_AUTH_LOGGED_MAX) {
		memcpy(a->logged[a->nlogged++], key, 32);
		log_warn("refused a client on the %s socket from %s: its public key %s is not in "
		    "%s (logged once per key; sinkwatch status auth counts them)", domain, address,
		    z, l && l->path[0] ? l->path : "(no allow list for this socket)");
	} else if (!seen && keylen == 32 && !a->logged_full) {
		a->logged_full = 1;
		log_warn("refused more than %d distinct client keys: the next ones are counted, "
		    "not logged", SWD_AUTH_LOGGED_MAX);
	} else if (keylen != 32) {
		log_debug("refused a %s handshake on the %s socket from %s", mech, domain, address);
	}
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static void
reply(void *s, const char *id, const char *code, const char *text, const char *user)
{
	zmq_send(s, "1.0", 3, ZMQ_SNDMORE);
	zmq_send(s, id, strlen(id), ZMQ_SNDMORE);
	zmq_send(s, code, strlen(code), ZMQ_SNDMORE);
	zmq_send(s, text, strlen(text), ZMQ_SNDMORE);
	/* the client's key, which every message of the connection carries as its
	 * User-Id property: a key revoked later is known by it (swd_auth_revoked) */
	zmq_send(s, user, strlen(user), ZMQ_SNDMORE);
	zmq_send(s, "", 0, 0);			/* metadata */
}

/* One ZAP request and its answer. -1 at the context's end. */
static int
zap_one(swd_auth *a)
{
	char f[ZAP_FRAMES][256];
	int len[ZAP_FRAMES] = { 0 }, more = 1, n = 0;
	while (more) {
		char junk[256];
		int l = frame(a->sock, n < ZAP_FRAMES ? f[n] : junk,
		    n < ZAP_FRAMES ? sizeof(f[n]) : sizeof(junk), &more);
		if (l < 0)
			return zmq_errno() == ETERM ? -1 : 0;
		if (n < ZAP_FRAMES)
			len[n] = l;
		n++;
	}
	/* version, id, domain, address, routing id, mechanism, credentials */
	if (n < 6 || strcmp(f[0], "1.0")) {
		reply(a->sock, n > 1 ? f[1] : "", "500", "bad ZAP request", "");
		return 0;
	}
	int ok = decide(a, f[2], f[3], f[5], n > 6 ? (const uint8_t *)f[6] : NULL,
	    n > 6 ? len[6] : 0);
	char z[SWP_KEY_LEN + 1] = "";
	if (ok && n > 6 && len[6] == 32)
		zmq_z85_encode(z, (const uint8_t *)f[6], 32);
	reply(a->sock, f[1], ok ? "200" : "400", ok ? "OK" : "key not allowed", z);
	return 0;
}

/* The events of monitor i (a domain). -1 at the context's end. */
static int
mon_one(swd_auth *a, int i)
{
	char ev[16], ep[256] = "";
	int more = 0, l = frame(a->mon[i], ev, sizeof(ev), &more);
	if (l < 0)
		return zmq_errno() == ETERM ? -1 : 0;
	while (more)
		if (frame(a->mon[i], ep, sizeof(ep), &more) < 0)
			return zmq_errno() == ETERM ? -1 : 0;
	uint16_t event = 0;
	if (l >= 6)
		memcpy(&event, ev, 2);
	int failed = !!(event & (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
	    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL));
	pthread_mutex_lock(&a->mu);
	if (i == DOM_UPSTREAM && (failed || (event & ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))) {
		/* this daemon is the client: nobody else counts it */
		int refused = !failed;
		if (refused)
			a->st.refused_upstream++;
		else
			a->st.failed_upstream++;
		if (!(a->upstream_logged & (1 << refused))) {
			a->upstream_logged |= 1 << refused;
			log_err("the forwarder at %s %s (logged once; sinkwatch status auth counts "
			    "them; tried again every few seconds)", ep, refused ? "refused this daemon's key: "
			    "its public key is not in the forwarder's --curve-allow-daemons" :
			    "failed the CURVE handshake: is connect_server_key the forwarder's "
			    "public key, and does the forwarder have CURVE on?");
		}
	} else if (failed) {
		/* a refusal of ZAP (HANDSHAKE_FAILED_AUTH) is counted by decide() */
		if (i == DOM_CONTROL)
			a->st.failed_control++;
		else if (i == DOM_SUBSCRIBERS)
			a->st.failed_subscribers++;
		else
			a->st.failed_data++;
	}
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static void *
auth_main(void *arg)
{
	swd_auth *a = arg;
	for (;;) {
		zmq_pollitem_t it[1 + NDOM] = { { a->sock, 0, ZMQ_POLLIN, 0 } };
		for (int i = 0; i < NDOM; i++)
			it[1 + i] = (zmq_pollitem_t){ a->mon[i], 0, ZMQ_POLLIN, 0 };
		if (zmq_poll(it, 1 + NDOM, -1) < 0) {
			if (zmq_errno() == ETERM)
				break;
			continue;
		}
		if ((it[0].revents & ZMQ_POLLIN) && zap_one(a) < 0)
			break;
		int end = 0;
		for (int i = 0; i < NDOM && !end; i++)
			end = (it[1 + i].revents & ZMQ_POLLIN) && mon_one(a, i) < 0;
		if (end)
			break;
	}
	for (int i = 0; i < NDOM; i++)
		zmq_close(a->mon[i]);
	zmq_close(a->sock);
	return NULL;
}

int
swd_auth_watch(swd_auth *a, void *sock, const char *domain)
{
	int d = dom_index(domain);
	char ep[128];
	if (!a || d < 0)
		return -1;
	snprintf(ep, sizeof(ep), MON_FMT, dom_name[d]);
	return zmq_socket_monitor(sock, ep, ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
	    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0 ? 0 : -1;
}

/* Both lists read into l[2] (the second empty without its file). 0 or -1. */
static int
load_lists(struct list l[2], const char *allow_file, const char *subscribers_file, char *err,
    size_t errlen)
{
	memset(l, 0, 2 * sizeof(*l));
	if (load(allow_file, &l[0].keys, &l[0].n, err, errlen) != 0)
		return -1;
	snprintf(l[0].path, sizeof(l[0].path), "%s", allow_file);
	if (subscribers_file && *subscribers_file) {
		if (load(subscribers_file, &l[1].keys, &l[1].n, err, errlen) != 0) {
			free(l[0].keys);
			l[0].keys = NULL;
			return -1;
		}
		snprintf(l[1].path, sizeof(l[1].path), "%s", subscribers_file);
	}
	return 0;
}

int
swd_auth_start(swd_auth **out, void *zctx, const char *allow_file,
    const char *subscribers_file, char *err, size_t errlen)
{
	*out = NULL;
	swd_auth *a = calloc(1, sizeof(*a));
	if (!a) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (load_lists(a->list, allow_file, subscribers_file, err, errlen) != 0) {
		free(a);
		return -1;
	}
	a->st.keys = (int64_t)a->list[0].n;
	a->st.keys_subscribers = (int64_t)a->list[1].n;
	int zero = 0, bad = !(a->sock = zmq_socket(zctx, ZMQ_REP)) ||
	    zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_bind(a->sock, ZAP_ENDPOINT) != 0;
	for (int i = 0; i < NDOM && !bad; i++) {
		char ep[128];
		snprintf(ep, sizeof(ep), MON_FMT, dom_name[i]);
		bad = !(a->mon[i] = zmq_socket(zctx, ZMQ_PAIR)) ||
		    zmq_setsockopt(a->mon[i], ZMQ_LINGER, &zero, sizeof(zero)) ||
		    zmq_connect(a->mon[i], ep) != 0;
	}
	if (bad) {
		snprintf(err, errlen, "ZAP handler at %s: %s", ZAP_ENDPOINT, zmq_strerror(zmq_errno()));
		for (int i = 0; i < NDOM; i++)
			if (a->mon[i])
				zmq_close(a->mon[i]);
		if (a->sock)
			zmq_close(a->sock);
		free(a->list[0].keys);
		free(a->list[1].keys);
		free(a);
		return -1;
	}
	pthread_mutex_init(&a->mu, NULL);
	/* the thread takes no signals (the loop's uv_signal_t do) */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int trc = pthread_create(&a->thr, NULL, auth_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (trc != 0) {
		snprintf(err, errlen, "cannot start the ZAP thread");
		for (int i = 0; i < NDOM; i++)
			zmq_close(a->mon[i]);
		zmq_close(a->sock);
		pthread_mutex_destroy(&a->mu);
		free(a->list[0].keys);
		free(a->list[1].keys);
		free(a);
		return -1;
	}
	*out = a;
	return 0;
}

int
swd_auth_reload(swd_auth *a, const char *allow_file, const char *subscribers_file,
    char *err, size_t errlen)
{
	struct list l[2];
	if (load_lists(l, allow_file, subscribers_file, err, errlen) != 0)
		return -1;
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < 2; i++) {
		free(a->list[i].keys);
		a->list[i] = l[i];
	}
	a->st.keys = (int64_t)l[0].n;
	a->st.keys_subscribers = (int64_t)l[1].n;
	a->nlogged = 0;		/* a key refused again is named again */
	a->logged_full = 0;
	a->upstream_logged = 0;
	pthread_mutex_unlock(&a->mu);
	return 0;
}

void
swd_auth_get_stats(swd_auth *a, swd_auth_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	*st = a->st;
	pthread_mutex_unlock(&a->mu);
}

void
swd_auth_join(swd_auth **ap)
{
	swd_auth *a = ap ? *ap : NULL;
	if (!a)
		return;
	pthread_join(a->thr, NULL);
	pthread_mutex_destroy(&a->mu);
	free(a->list[0].keys);
	free(a->list[1].keys);
	free(a);
	*ap = NULL;
}

int
swd_auth_revoked(swd_auth *a, const char *user)
{
	uint8_t key[32];
	if (!a || !user || strlen(user) != SWP_KEY_LEN || !zmq_z85_decode(key, user))
		return 0;	/* not a CURVE client's key: nothing to revoke */
	int ok = 0;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->list[0].n && !ok; i++)
		ok = !memcmp(a->list[0].keys[i], key, 32);
	pthread_mutex_unlock(&a->mu);
	return !ok;
}
