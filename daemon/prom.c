/* prom.c: the Prometheus endpoint (prom.h). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "daemon/prom.h"

#ifdef HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#define CONN_LIMIT 16		/* connections at once */
#define REQUEST_MS 3000		/* a request's headers must be whole within this */

/*
 * An open connection and when its current request began: libmicrohttpd's
 * timeout counts inactivity only, so a client trickling a header byte every
 * few seconds would hold a connection for as long as it likes, and
 * CONN_LIMIT of them would keep every scrape out. A sweeper shuts down any
 * connection whose request is not whole after REQUEST_MS.
 */
struct conn {
	int fd;			/* -1: the slot is free */
	int64_t since_ms;	/* its current request began */
	int answered;		/* its headers came: the request is being answered */
};

struct swd_prom {
	pthread_mutex_t mu;
	char *text;
	size_t len;
#ifdef HAVE_MICROHTTPD
	struct MHD_Daemon *d;
	pthread_mutex_t cmu;	/* conns, sweeping */
	pthread_cond_t ccv;
	struct conn conns[CONN_LIMIT + 4];
	int stop;
	pthread_t sweeper;
	int64_t swept;		/* connections shut down for a request too slow */
#endif
};

#ifdef HAVE_MICROHTTPD
static int64_t
mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
#endif

int
swd_prom_addr(const char *hostport, void *sap, size_t salen, char *err, size_t errlen)
{
	char host[128];
	const char *colon = strrchr(hostport, ':');
	struct sockaddr_storage *ss = sap;

	if (salen < sizeof(*ss) || !colon || colon == hostport ||
	    (size_t)(colon - hostport) >= sizeof(host)) {
		snprintf(err, errlen, "metrics_listen: '%s' is not HOST:PORT", hostport);
		return -1;
	}
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end || end == colon + 1 || port < 1 || port > 65535) {
		snprintf(err, errlen, "metrics_listen: '%s': port not in 1..65535", hostport);
		return -1;
	}
	memset(ss, 0, sizeof(*ss));
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if ((ntohl(s4->sin_addr.s_addr) >> 24) != 127)
			goto notloop;
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (!IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
			goto notloop;
		return 0;
	}
	snprintf(err, errlen, "metrics_listen: '%s' is not an IPv4 or IPv6 address or localhost",
	    host);
	return -1;
notloop:
	snprintf(err, errlen, "metrics_listen: %s is not a loopback address: the metrics "
	    "endpoint has no authentication (scrape it on the host, or through a proxy)", host);
	return -1;
}

#ifdef HAVE_MICROHTTPD
static enum MHD_Result
answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
    const char *version, const char *upload, size_t *upload_len, void **ptr)
{
	struct swd_prom *m = cls;
	struct MHD_Response *r;
	unsigned code = MHD_HTTP_OK;
	enum MHD_Result rc;
	(void)version;
	(void)upload;
	(void)ptr;

	if (*upload_len) {	/* nothing is uploaded here */
		*upload_len = 0;
		return MHD_YES;
	}
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
	    MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (ci && ci->socket_context) {	/* its headers came: not swept */
		pthread_mutex_lock(&m->cmu);
		((struct conn *)ci->socket_context)->answered = 1;
		pthread_mutex_unlock(&m->cmu);
	}
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		static const char msg[] = "only GET /metrics\n";
		r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
		    MHD_RESPMEM_PERSISTENT);
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		MHD_add_response_header(r, "Allow", "GET, HEAD");
	} else if (strcmp(url, "/metrics")) {
		static const char msg[] = "not found: the metrics are at /metrics\n";
		r = MHD_create_response_from_buffer(sizeof(msg) - 1, (void *)msg,
		    MHD_RESPMEM_PERSISTENT);
		code = MHD_HTTP_NOT_FOUND;
	} else {
		pthread_mutex_lock(&m->mu);
		r = MHD_create_response_from_buffer(m->len, m->text ? m->text : "",
		    MHD_RESPMEM_MUST_COPY);
		pthread_mutex_unlock(&m->mu);
		MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	}
	if (!r)
		return MHD_NO;
	rc = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return rc;
}
#endif

/* Connections open and closed (MHD_OPTION_NOTIFY_CONNECTION). */
static void
on_conn(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_ConnectionNotificationCode e)
{
	struct swd_prom *m = cls;
	pthread_mutex_lock(&m->cmu);
	if (e == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
		    MHD_CONNECTION_INFO_CONNECTION_FD);
		for (size_t i = 0; ci && i < sizeof(m->conns) / sizeof(m->conns[0]); i++)
			if (m->conns[i].fd < 0) {
				m->conns[i] = (struct conn){ ci->connect_fd, mono_ms(), 0 };
				*ctx = &m->conns[i];
				break;
			}
	} else if (*ctx) {	/* closed: before libmicrohttpd closes its socket */
		((struct conn *)*ctx)->fd = -1;
		*ctx = NULL;
	}
	pthread_mutex_unlock(&m->cmu);
}

/* A request answered: the connection's next request has its own deadline. */
static void
on_done(void *cls, struct MHD_Connection *c, void **ptr, enum MHD_RequestTerminationCode t)
{
	struct swd_prom *m = cls;
	(void)ptr;
	(void)t;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
	    MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	if (!ci || !ci->socket_context)
		return;
	pthread_mutex_lock(&m->cmu);
	struct conn *k = ci->socket_context;
	k->answered = 0;
	k->since_ms = mono_ms();
	pthread_mutex_unlock(&m->cmu);
}

/* Shuts down the connections whose request is not whole after REQUEST_MS. */
static void *
sweep(void *arg)
{
	struct swd_prom *m = arg;
	pthread_mutex_lock(&m->cmu);
	while (!m->stop) {
		int64_t now = mono_ms();
		for (size_t i = 0; i < sizeof(m->conns) / sizeof(m->conns[0]); i++) {
			struct conn *k = &m->conns[i];
			if (k->fd >= 0 && !k->answered && now - k->since_ms >= REQUEST_MS) {
				shutdown(k->fd, SHUT_RDWR);	/* libmicrohttpd sees the end */
				k->answered = 1;	/* once */
				m->swept++;
			}
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&m->ccv, &m->cmu, &ts);
	}
	pthread_mutex_unlock(&m->cmu);
	return NULL;
}

int
swd_prom_start(swd_prom **mp, const char *hostport, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	*mp = NULL;
	if (swd_prom_addr(hostport, &ss, sizeof(ss), err, errlen) != 0)
		return -1;
#ifdef HAVE_MICROHTTPD
	struct swd_prom *m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->cmu, NULL);
	pthread_cond_init(&m->ccv, NULL);
	for (size_t i = 0; i < sizeof(m->conns) / sizeof(m->conns[0]); i++)
		m->conns[i].fd = -1;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
	    (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, answer, m,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	    MHD_OPTION_NOTIFY_CONNECTION, on_conn, m,
	    MHD_OPTION_NOTIFY_COMPLETED, on_done, m,
	    MHD_OPTION_END);
	if (!m->d || pthread_create(&m->sweeper, NULL, sweep, m) != 0) {
		snprintf(err, errlen, "metrics_listen: cannot serve on %s (in use?)", hostport);
		if (m->d)
			MHD_stop_daemon(m->d);
		pthread_mutex_destroy(&m->mu);
		pthread_mutex_destroy(&m->cmu);
		pthread_cond_destroy(&m->ccv);
		free(m);
		return -1;
	}
	*mp = m;
	return 0;
#else
	snprintf(err, errlen, "metrics_listen: this sinkwatchd was built without libmicrohttpd");
	return -1;
#endif
}

void
swd_prom_publish(swd_prom *m, const char *text, size_t len)
{
	char *t = malloc(len + 1);
	if (!m || !t) {
		free(t);
		return;
	}
	memcpy(t, text, len);
	t[len] = '\0';
	pthread_mutex_lock(&m->mu);
	free(m->text);
	m->text = t;
	m->len = len;
	pthread_mutex_unlock(&m->mu);
}

void
swd_prom_stop(swd_prom **mp)
{
	struct swd_prom *m = *mp;
	if (!m)
		return;
#ifdef HAVE_MICROHTTPD
	pthread_mutex_lock(&m->cmu);
	m->stop = 1;
	pthread_cond_signal(&m->ccv);
	pthread_mutex_unlock(&m->cmu);
	pthread_join(m->sweeper, NULL);
	MHD_stop_daemon(m->d);
	pthread_mutex_destroy(&m->cmu);
	pthread_cond_destroy(&m->ccv);
#endif
	pthread_mutex_destroy(&m->mu);
	free(m->text);
	free(m);
	*mp = NULL;
}
