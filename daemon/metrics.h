/*
 * metrics.h: sinkwatchd's Prometheus endpoint, GET /metrics over HTTP
 * (libmicrohttpd, a thread of its own). The loop thread publishes the text
 * (swd_metrics_text) once a second; a scrape gets the latest, never a
 * figure half updated.
 */
#ifndef SWD_METRICS_H
#define SWD_METRICS_H

#include <stddef.h>

typedef struct swd_metrics swd_metrics;

/*
 * Serves on hostport ("127.0.0.1:9710", "[::1]:9710", "localhost:9710"):
 * a loopback address only, the endpoint has no authentication. 0, or -1
 * with err.
 */
int swd_metrics_start(swd_metrics **m, const char *hostport, char *err, size_t errlen);
/* Replaces the text a scrape gets. */
void swd_metrics_publish(swd_metrics *m, const char *text, size_t len);
void swd_metrics_stop(swd_metrics **m);

/* Parses hostport into a loopback socket address. 0, or -1 with err. */
int swd_metrics_addr(const char *hostport, void *sa, size_t salen, char *err, size_t errlen);

#endif
