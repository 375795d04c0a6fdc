/*
 * swnet.h: CURVE on the ZeroMQ sockets of sinkwatch, one way for all of
 * them: the client side (the C client library, sinkwatch status,
 * sinkwatchd --connect) and the server side (sinkwatchd, sinkwatch
 * forward). net/curve.c needs ZeroMQ and proto/keys.c only, so that the
 * client library compiles it too (nothing of it is exported there).
 */
#ifndef SWN_NET_H
#define SWN_NET_H

#include <stddef.h>

#include "proto/swkeys.h"

/* The environment a CURVE client falls back to, every client alike. */
#define SWN_ENV_SERVER_KEY "SINKWATCH_SERVER_KEY"	/* the key, or a file holding it */
#define SWN_ENV_KEY_FILE "SINKWATCH_CLIENT_KEY_FILE"	/* the client's secret key file */

/* Where every client and tool sends snapshots, and asks for status, when no
 * option names it: the variable, else the daemon's default. */
#define SWN_ENV_ENDPOINT "SINKWATCH_ENDPOINT"	/* the daemon's listen endpoint */
#define SWN_ENV_CONTROL "SINKWATCH_CONTROL"	/* the daemon's control endpoint */
#define SWN_DEFAULT_ENDPOINT "tcp://127.0.0.1:5710"	/* sinkwatchd's listen default */
#define SWN_DEFAULT_CONTROL "tcp://127.0.0.1:5711"	/* sinkwatchd's control default */

/* given when given (neither NULL nor ""), else the variable var when set and
 * not empty, else dflt. */
const char *swn_env_or(const char *given, const char *var, const char *dflt);

/*
 * The keys a CURVE client takes: each one given (neither NULL nor "")
 * stays, each other is its environment variable's (NULL when that is
 * unset or empty).
 */
void swn_curve_env(const char **server_key, const char **key_file);

/* The public keys of a CURVE client socket (Z85), when it was set up. */
typedef struct swn_curve_info {
	char server[SWP_KEY_LEN + 1];	/* the server's */
	char pub[SWP_KEY_LEN + 1];	/* this client's */
} swn_curve_info;

/*
 * CURVE on a client socket, before its connect: server_key is the
 * server's public key (40 characters of Z85, or a file holding it),
 * key_file this client's secret key file (mode 0600); either one NULL or
 * "" is taken from the environment (swn_curve_env). opts names the two
 * options in the error ("--server-key", "--key-file"). Returns 1 when set
 * (then info, unless NULL, holds both public keys), 0 when neither key is
 * given (no CURVE), -1 with err: only one given, a key that does not
 * load, ZeroMQ refused it.
 */
int swn_curve_client(void *sock, const char *server_key, const char *key_file,
    const char *const opts[2], swn_curve_info *info, char *err, size_t errlen);

/*
 * A server's key pair from its secret key file (option: its name in the
 * errors, "--curve-secret-file"): secret and pub (Z85). 0, or -1 with err
 * (this libzmq has no CURVE, the file, not a secret key).
 */
int swn_curve_server_keys(const char *option, const char *secret_file,
    char secret[SWP_KEY_LEN + 1], char pub[SWP_KEY_LEN + 1], char *err, size_t errlen);

/*
 * CURVE on a server socket, before its bind: the ZAP handler (net/auth.h,
 * started first) decides on every client key; domain names the socket
 * there (ZMQ_ZAP_DOMAIN); secret is the server's secret key (Z85). 0, or
 * -1 with errno.
 */
int swn_curve_server(void *sock, const char *secret, const char *domain);

#endif
