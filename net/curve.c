/* curve.c: CURVE on client and server sockets (see swnet.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "net/swnet.h"

int
swn_curve_client(void *sock, const char *server_key, const char *key_file,
    const char *const opts[2], swn_curve_info *info, char *err, size_t errlen)
{
	swn_curve_env(&server_key, &key_file);
	if (!server_key && !key_file)
		return 0;
	if (!server_key || !key_file) {
		snprintf(err, errlen, "CURVE needs both the server's public key (%s or "
		    SWN_ENV_SERVER_KEY ") and this client's secret key file (%s or "
		    SWN_ENV_KEY_FILE ")", opts[0], opts[1]);
		return -1;
	}
	char srv[SWP_KEY_LEN + 1], sec[SWP_KEY_LEN + 1], pub[SWP_KEY_LEN + 1];
	if (swp_key_load(server_key, srv, err, errlen) != 0 ||
	    swp_key_read(key_file, 1, sec, err, errlen) != 0)
		return -1;
	if (zmq_curve_public(pub, sec) != 0) {
		memset(sec, 0, sizeof(sec));
		snprintf(err, errlen, "%s: not a secret key", key_file);
		return -1;
	}
	int rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, srv, SWP_KEY_LEN) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, SWP_KEY_LEN) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, SWP_KEY_LEN);
	memset(sec, 0, sizeof(sec));
	if (rc) {
		snprintf(err, errlen, "CURVE: %s", zmq_strerror(zmq_errno()));
		return -1;
	}
	if (info) {
		memcpy(info->server, srv, sizeof(srv));
		memcpy(info->pub, pub, sizeof(pub));
	}
	return 1;
}

int
swn_curve_server_keys(const char *option, const char *secret_file,
    char secret[SWP_KEY_LEN + 1], char pub[SWP_KEY_LEN + 1], char *err, size_t errlen)
{
	if (!zmq_has("curve")) {
		snprintf(err, errlen, "%s: this libzmq was built without CURVE", option);
		return -1;
	}
	if (swp_key_read(secret_file, 1, secret, err, errlen) != 0)
		return -1;
	if (zmq_curve_public(pub, secret) != 0) {
		memset(secret, 0, SWP_KEY_LEN + 1);
		snprintf(err, errlen, "%.900s: not a secret key", secret_file);
		return -1;
	}
	return 0;
}

int
swn_curve_server(void *sock, const char *secret, const char *domain)
{
	int one = 1;
	return zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof(one)) ||
	    zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, SWP_KEY_LEN) ? -1 : 0;
}
