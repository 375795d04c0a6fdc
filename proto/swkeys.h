/*
 * swkeys.h: CURVE key files (ZeroMQ's Z85 text: 40 characters for 32
 * bytes), as `sinkwatch keygen` writes them and the daemon, the clients
 * and the tools read them. A key is the first word of its line; what
 * follows it is a comment. Blank lines and lines starting with '#' that
 * are not a key ('#' is a Z85 character) are ignored. A key file holds one
 * key; an allow file one client public key a line.
 * No ZeroMQ here: the alphabet and length are checked; the caller's
 * zmq_setsockopt() or zmq_z85_decode() does the rest.
 */
#ifndef SWP_KEYS_H
#define SWP_KEYS_H

#include <stddef.h>

#define SWP_KEY_LEN 40		/* Z85 characters of a CURVE key */

/* 1 if s is exactly 40 characters of the Z85 alphabet, else 0. */
int swp_key_valid(const char *s);

/*
 * Reads the first key of the file at path into out (NUL-terminated). With
 * secret, the file must not be readable by group or others (as ssh asks of
 * a private key). 0, or -1 with err naming the file and what is wrong.
 */
int swp_key_read(const char *path, int secret, char out[SWP_KEY_LEN + 1], char *err,
    size_t errlen);

/*
 * A key given as its 40 characters, or else as the name of a file holding
 * it (a public key: no mode check); a file of that name, if there is one,
 * wins (a 40-character path may be all Z85 characters). 0, or -1 with err.
 */
int swp_key_load(const char *key_or_path, char out[SWP_KEY_LEN + 1], char *err,
    size_t errlen);

/*
 * Reads an allow file: at most max keys into keys[], *n set to their
 * number. 0, or -1 with err as "FILE:LINE: ..." (a bad key, too many keys).
 */
int swp_keys_read_list(const char *path, char (*keys)[SWP_KEY_LEN + 1], size_t max,
    size_t *n, char *err, size_t errlen);

/*
 * 1 if a ZeroMQ endpoint stays on this host: ipc, inproc, or tcp/ws on
 * 127.0.0.0/8, ::1 or localhost. Anything else (*, 0.0.0.0, an interface,
 * another address or name) is beyond loopback.
 */
int swp_endpoint_local(const char *ep);

/*
 * The endpoint to hand zmq_bind: tcp://localhost:P (ws, wss too) as
 * 127.0.0.1 (ZeroMQ takes a host to bind as an interface name, and none is
 * called localhost), in out; any other endpoint, or one too long for out,
 * is ep itself (status and logs keep showing ep as given).
 */
const char *swp_bind_endpoint(const char *ep, char *out, size_t outlen);

#endif
