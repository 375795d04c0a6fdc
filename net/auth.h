/*
 * auth.h: the daemon's ZAP handler (ZeroMQ RFC 27) for CURVE: a thread
 * that answers inproc://zeromq.zap.01 for the sockets of one ZeroMQ
 * context, allowing the client public keys of an allow file and refusing
 * (status 400) every other, counted by socket (the ZAP domain) and logged
 * once per key. The same thread reads the sockets' monitors: a handshake
 * that fails before ZAP is asked (a client without CURVE, or with another
 * server key) is counted too.
 */
#ifndef SWD_AUTH_H
#define SWD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define SWD_AUTH_KEYS_MAX 4096	/* client keys an allow file may hold */
#define SWD_AUTH_LOGGED_MAX 256	/* refused keys named in the log, once each */

/*
 * The ZAP domains of the sockets (status and /metrics name them): a
 * daemon's data and control sockets; a forwarder's --in ("data"), its
 * control socket and --out, where the daemons subscribe ("subscribers",
 * with a list of its own). "upstream" is no server socket: a daemon's SUB
 * connected to a forwarder as a CURVE client, watched for handshakes the
 * forwarder refused or that failed.
 */
#define SWD_AUTH_DOMAIN_DATA "data"
#define SWD_AUTH_DOMAIN_CONTROL "control"
#define SWD_AUTH_DOMAIN_SUBSCRIBERS "subscribers"
#define SWD_AUTH_DOMAIN_UPSTREAM "upstream"

typedef struct swd_auth swd_auth;

/* What status shows. */
typedef struct swd_auth_stats {
	int64_t allowed;		/* handshakes allowed */
	int64_t refused_data;		/* refused on the data socket: key not allowed */
	int64_t refused_control;	/* likewise on the control socket */
	int64_t failed_data;		/* handshakes failed before ZAP: no CURVE, wrong server key */
	int64_t failed_control;
	int64_t keys;			/* keys in the allow list */
	int64_t keys_subscribers;	/* keys in the subscribers' list (a forwarder) */
	int64_t refused_subscribers;	/* a daemon's key not in it */
	int64_t failed_subscribers;
	int64_t refused_upstream;	/* the forwarder refused this daemon's key */
	int64_t failed_upstream;	/* a handshake with the forwarder failed otherwise */
} swd_auth_stats;

/*
 * Reads the allow file (the keys of the data and control domains) and,
 * unless NULL, the subscribers' file (the keys of that domain; without it
 * the domain allows no key), and starts the handler on zctx; the caller's
 * sockets set ZMQ_ZAP_DOMAIN and CURVE after it. 0 and *out, or -1 with
 * err (a file, or ZeroMQ).
 */
int swd_auth_start(swd_auth **out, void *zctx, const char *allow_file,
    const char *subscribers_file, char *err, size_t errlen);
/*
 * Watches the handshakes of a socket of the context (domain: one of the
 * above), after its ZMQ_ZAP_DOMAIN and before its bind or connect. 0 or -1.
 * This is the socket's monitor: ZeroMQ allows one a socket, so a socket
 * monitored otherwise (a later zmq_socket_monitor replaces this one)
 * counts its failed handshakes there.
 */
int swd_auth_watch(swd_auth *a, void *sock, const char *domain);
/*
 * Reads both files again (SIGHUP; subscribers_file NULL as at the start);
 * on an error both old lists stay. 0 or -1 with err.
 */
int swd_auth_reload(swd_auth *a, const char *allow_file, const char *subscribers_file,
    char *err, size_t errlen);
void swd_auth_get_stats(swd_auth *a, swd_auth_stats *st);
/*
 * Whether a connection's key (its messages' User-Id property, the Z85 key
 * the handler gave at the handshake) is no longer in the allow list: it
 * was allowed then and revoked since (SIGHUP). 0 for no key.
 */
int swd_auth_revoked(swd_auth *a, const char *user);
/* Joins the thread and frees; the caller terminated zctx first (the
 * handler ends at ETERM). NULL or *a NULL is fine. */
void swd_auth_join(swd_auth **a);

#endif
