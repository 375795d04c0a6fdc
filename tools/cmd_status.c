/*
 * cmd_status.c: `sinkwatch status`: one request to the control endpoint of
 * sinkwatchd (or of a forwarder), the reply on stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "net/swnet.h"
#include "tools/analyze.h"
#include "tools/tools.h"

/*
 * The daemon did not know the section asked for: the error names the ones it
 * has, from its `help` (asked on the same socket). Returns 2.
 */
static int
unknown_section(void *s, const char *ep, const char *req)
{
	const char *asked = req + strlen("status ");
	char sections[1024] = "";
	zmq_msg_t m;
	if (zmq_send(s, "help", 4, 0) == 4) {
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, 0) >= 0) {
			char help[4096];
			size_t n = zmq_msg_size(&m) < sizeof(help) - 1 ? zmq_msg_size(&m) : sizeof(help) - 1;
			memcpy(help, zmq_msg_data(&m), n);
			help[n] = '\0';
			char *line = strstr(help, "sections:");
			if (line) {
				line += strlen("sections:");
				line[strcspn(line, "\n")] = '\0';
				line += strspn(line, " ");
				snprintf(sections, sizeof(sections), "%s", line);
			}
		}
		zmq_msg_close(&m);
	}
	if (!sections[0])
		return sw_tool_fail("status", "%s has no section '%s' (and did not say which it has)",
		    ep, asked);
	return sw_tool_fail("status", "%s has no section '%s'; its sections: %s", ep, asked,
	    sections);
}

/* One status request to one control endpoint, the reply on stdout. 0, or 2. */
static int
status_one(void *ctx, const char *ep, const char *req, long timeout_ms, const char *skey,
    const char *kfile)
{
	void *s = zmq_socket(ctx, ZMQ_REQ);
	int zero = 0, to = (int)timeout_ms, rc = 0;
	char cerr[512];
	if (!s)
		return sw_tool_fail("status", "ZeroMQ: %s", zmq_strerror(zmq_errno()));
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof(to));
	zmq_setsockopt(s, ZMQ_SNDTIMEO, &to, sizeof(to));
	static const char *const opts[2] = { "--server-key", "--key-file" };
	int curve = swn_curve_client(s, skey, kfile, opts, NULL, cerr, sizeof(cerr));
	if (curve < 0) {
		rc = sw_tool_fail("status", "%s", cerr);
		goto out;
	}
	if (zmq_connect(s, ep) != 0) {
		rc = sw_tool_fail("status", "cannot connect to %s: %s", ep, zmq_strerror(zmq_errno()));
		goto out;
	}
	if (zmq_send(s, req, strlen(req), 0) < 0) {
		rc = sw_tool_fail("status", "sending to %s: %s", ep, zmq_strerror(zmq_errno()));
		goto out;
	}
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, 0) < 0) {
		zmq_msg_close(&m);
		rc = sw_tool_fail("status", "no answer from %s within %ld ms (is sinkwatchd running?%s)",
		    ep, timeout_ms, curve ? " does it allow this client's key, and is --server-key "
		    "its public key?" : " with CURVE on, give --server-key and --key-file");
		goto out;
	}
	static const char unknown[] = "error: unknown section";
	if (zmq_msg_size(&m) >= sizeof(unknown) - 1 &&
	    !memcmp(zmq_msg_data(&m), unknown, sizeof(unknown) - 1)) {
		zmq_msg_close(&m);
		rc = unknown_section(s, ep, req);
		goto out;
	}
	fwrite(zmq_msg_data(&m), 1, zmq_msg_size(&m), stdout);
	if (zmq_msg_size(&m) >= 6 && !memcmp(zmq_msg_data(&m), "error:", 6))
		rc = 2;
	zmq_msg_close(&m);
out:
	zmq_close(s);
	return rc;
}

int
sw_status_main(int argc, char **argv)
{
	const char *section = NULL, *skey = NULL, *kfile = NULL;
	const char **eps = calloc((size_t)argc + 1, sizeof(char *));
	size_t nep = 0;
	long timeout_ms = 2000;
	if (!eps)
		return sw_tool_fail("status", "out of memory");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--control") && i + 1 < argc)
			eps[nep++] = argv[++i];
		else if (!strcmp(argv[i], "--server-key") && i + 1 < argc)
			skey = argv[++i];
		else if (!strcmp(argv[i], "--key-file") && i + 1 < argc)
			kfile = argv[++i];
		else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &timeout_ms) || timeout_ms < 1) {
				free(eps);
				return sw_tool_fail("status", "--timeout-ms: '%s' is not a positive integer", argv[i]);
			}
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf("usage: sinkwatch status [--control ENDPOINT]... [--timeout-ms MS]\n"
			    "                        [--server-key KEY|FILE --key-file FILE] [SECTION]\n"
			    "ENDPOINT: default $" SWN_ENV_CONTROL ", else " SWN_DEFAULT_CONTROL "\n");
			free(eps);
			return 0;
		} else if (argv[i][0] == '-') {
			free(eps);
			return sw_tool_fail("status", "unknown option '%s'", argv[i]);
		} else
			section = argv[i];
	}
	if (nep == 0)	/* SINKWATCH_CONTROL, else sinkwatchd's default */
		eps[nep++] = swn_env_or(NULL, SWN_ENV_CONTROL, SWN_DEFAULT_CONTROL);
	char req[128];
	snprintf(req, sizeof(req), "status%s%s", section ? " " : "", section ? section : "");
	void *ctx = zmq_ctx_new();
	int rc = 0;
	/* several daemons (and forwarders): each reply under a line naming it;
	 * one that does not answer is reported and the others still asked */
	for (size_t i = 0; i < nep; i++) {
		if (nep > 1) {
			printf("%s== %s ==\n", i ? "\n" : "", eps[i]);
			fflush(stdout);
		}
		int r = status_one(ctx, eps[i], req, timeout_ms, skey, kfile);
		fflush(stdout);
		if (r)
			rc = r;
	}
	zmq_ctx_term(ctx);
	free(eps);
	return rc;
}
