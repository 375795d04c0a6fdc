/*
 * prom.h: sinkwatchd's Prometheus endpoint, GET /metrics over HTTP
 * (libmicrohttpd, a thread of its own). The loop thread publishes the text
 * (swd_metrics_text) once a second; a scrape gets the latest, never a
 * figure half updated.
 */
#ifndef SWD_PROM_H
#define SWD_PROM_H

#include <stddef.h>

typedef struct swd_prom swd_prom;

/*
 * Serves on hostport ("127.0.0.1:9710", "[::1]:9710", "localhost:9710"):
 * a loopback address only, the endpoint has no authentication. 0, or -1
 * with err.
 */
int swd_prom_start(swd_prom **m, const char *hostport, char *err, size_t errlen);
/* Replaces the text a scrape gets. */
void swd_prom_publish(swd_prom *m, const char *text, size_t len);
void swd_prom_stop(swd_prom **m);

/* Parses hostport into a loopback socket address. 0, or -1 with err. */
int swd_prom_addr(const char *hostport, void *sa, size_t salen, char *err, size_t errlen);

#endif
