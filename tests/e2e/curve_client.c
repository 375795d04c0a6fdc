/*
 * curve_client.c: a sender for tests/curve.py, on libsinkwatch: sends one
 * run (1 layer, 2 heads, 3 rows, 8 keys; steps 0..N-1) to ENDPOINT with the
 * CURVE keys of --server-key/--key-file, or else of the environment
 * (SINKWATCH_SERVER_KEY, SINKWATCH_CLIENT_KEY_FILE), waits up to --wait-ms
 * for a daemon's subscription, ends the run and prints the client's final
 * counters as "key=value" lines. Exit 0 whatever the daemon did (the test
 * reads the counters), 2 when sw_client_new() failed (its error printed).
 *
 *     curve_client ENDPOINT RUN [--steps N] [--wait-ms MS] [--server-key K] [--key-file F]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sinkwatch/client.h"

static void
nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

int
main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: curve_client ENDPOINT RUN [--steps N] [--wait-ms MS] "
		    "[--server-key K] [--key-file F]\n");
		return 2;
	}
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = argv[1];
	o.linger_ms = 2000;
	long steps = 3, wait_ms = 3000;
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--wait-ms"))
			wait_ms = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--server-key"))
			o.server_key = argv[i + 1];
		else if (!strcmp(argv[i], "--key-file"))
			o.key_file = argv[i + 1];
		else {
			fprintf(stderr, "curve_client: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	sw_run_info ri = { argv[2], "curve-test", 0, 1, 2, 0, 1 };
	sw_client *c;
	int rc = sw_client_new(&o, &ri, &c);
	if (rc != 0) {
		printf("error=%d\n", rc);
		fprintf(stderr, "curve_client: %s\n", sw_strerror(rc));
		return 2;
	}
	sw_client_stats st;
	for (long t = 0; t < wait_ms; t += 10) {
		sw_client_get_stats(c, &st);
		if (st.subscribed)
			break;
		nap_ms(10);
	}
	float data[2 * 3 * 8];
	for (int h = 0; h < 2; h++)
		for (int r = 0; r < 3; r++)
			for (int k = 0; k < 8; k++)
				data[(h * 3 + r) * 8 + k] = k == 0 ? 0.3f + 0.1f * (float)h :
				    (0.7f - 0.1f * (float)h) / 7.0f;
	for (long s = 0; s < steps; s++) {
		sw_snapshot sn = { s, 0, SW_KIND_PROBS, SW_DTYPE_F32, 3, 8, NULL, data,
		    sizeof(data) };
		sw_client_send(c, &sn);
	}
	sw_client_end(c);
	sw_client_flush(c, st.subscribed ? 2000 : 0);
	sw_client_get_stats(c, &st);
	int subscribed = st.subscribed;
	sw_client_destroy_stats(&c, &st);
	printf("subscribed=%d\nsent=%llu\ndropped=%llu\nauth_failures=%llu\nauth_status=%d\n",
	    subscribed, (unsigned long long)st.sent, (unsigned long long)st.dropped,
	    (unsigned long long)st.auth_failures, st.auth_status);
	return 0;
}
