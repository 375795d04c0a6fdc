/* metrics.c: the Prometheus endpoint (metrics.h). */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/metrics.h"

#ifdef HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

struct swd_metrics {
	pthread_mutex_t mu;
	char *text;
	size_t len;
#ifdef HAVE_MICROHTTPD
	struct MHD_Daemon *d;
#endif
};

int
swd_metrics_addr(const char *hostport, void *sap, size_t salen, char *err, size_t errlen)
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
	struct swd_metrics *m = cls;
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

int
swd_metrics_start(swd_metrics **mp, const char *hostport, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	*mp = NULL;
	if (swd_metrics_addr(hostport, &ss, sizeof(ss), err, errlen) != 0)
		return -1;
#ifdef HAVE_MICROHTTPD
	struct swd_metrics *m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_init(&m->mu, NULL);
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
	    (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, answer, m,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	    MHD_OPTION_END);
	if (!m->d) {
		snprintf(err, errlen, "metrics_listen: cannot serve on %s (in use?)", hostport);
		pthread_mutex_destroy(&m->mu);
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
swd_metrics_publish(swd_metrics *m, const char *text, size_t len)
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
swd_metrics_stop(swd_metrics **mp)
{
	struct swd_metrics *m = *mp;
	if (!m)
		return;
#ifdef HAVE_MICROHTTPD
	MHD_stop_daemon(m->d);
#endif
	pthread_mutex_destroy(&m->mu);
	free(m->text);
	free(m);
	*mp = NULL;
}
