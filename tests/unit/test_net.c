/*
 * test_net.c: the network pieces (net/): CURVE on client and server
 * sockets and the environment every client falls back to, the control
 * dispatch and its reply buffer; and the data directory's lock
 * (storage/dirlock.c). tests/e2e/curve.py runs the programs.
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "net/swctl.h"
#include "net/swnet.h"
#include "storage/runfile.h"

static const char *const opts[2] = { "--server-key", "--key-file" };

/* A fresh directory for a test's files. */
static void
tmpdir(char *out, size_t n)
{
	snprintf(out, n, "/tmp/sw-test-net-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(out));
}

/* A file of the text given and the mode given; its path into out. */
static void
write_file(char *out, size_t n, const char *dir, const char *name, const char *text,
    int mode)
{
	snprintf(out, n, "%s/%s", dir, name);
	FILE *f = fopen(out, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "# a test key\n%s\n", text);
	fclose(f);
	ck_assert_int_eq(chmod(out, (mode_t)mode), 0);
}

START_TEST(test_curve_env)
{
	unsetenv(SWN_ENV_SERVER_KEY);
	unsetenv(SWN_ENV_KEY_FILE);
	const char *s = NULL, *k = "";
	swn_curve_env(&s, &k);
	ck_assert_ptr_null(s);
	ck_assert_ptr_null(k);
	setenv(SWN_ENV_SERVER_KEY, "srv", 1);
	setenv(SWN_ENV_KEY_FILE, "", 1);	/* empty: not given */
	s = NULL, k = NULL;
	swn_curve_env(&s, &k);
	ck_assert_str_eq(s, "srv");
	ck_assert_ptr_null(k);
	setenv(SWN_ENV_KEY_FILE, "kf", 1);
	s = "mine", k = "";
	swn_curve_env(&s, &k);
	ck_assert_str_eq(s, "mine");	/* what is given wins */
	ck_assert_str_eq(k, "kf");
	unsetenv(SWN_ENV_SERVER_KEY);
	unsetenv(SWN_ENV_KEY_FILE);
}
END_TEST

START_TEST(test_curve_client)
{
	char d[64], kf[128], kf644[128], spub[41], ssec[41], cpub[41], csec[41], err[1200];
	tmpdir(d, sizeof(d));
	ck_assert_int_eq(zmq_curve_keypair(spub, ssec), 0);
	ck_assert_int_eq(zmq_curve_keypair(cpub, csec), 0);
	write_file(kf, sizeof(kf), d, "c.key", csec, 0600);
	write_file(kf644, sizeof(kf644), d, "open.key", csec, 0644);
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
	unsetenv(SWN_ENV_SERVER_KEY);
	unsetenv(SWN_ENV_KEY_FILE);
	ck_assert_int_eq(swn_curve_client(s, NULL, "", opts, NULL, err, sizeof(err)), 0);
	/* one of the two: refused, the options and the variables named */
	ck_assert_int_eq(swn_curve_client(s, spub, NULL, opts, NULL, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "needs both") && strstr(err, "--key-file or "
	    SWN_ENV_KEY_FILE) && strstr(err, "--server-key or " SWN_ENV_SERVER_KEY), "%s", err);
	swn_curve_info ci;
	ck_assert_int_eq(swn_curve_client(s, spub, kf, opts, &ci, err, sizeof(err)), 1);
	ck_assert_str_eq(ci.server, spub);
	ck_assert_str_eq(ci.pub, cpub);
	/* from the environment alone, as every client */
	setenv(SWN_ENV_SERVER_KEY, spub, 1);
	setenv(SWN_ENV_KEY_FILE, kf, 1);
	memset(&ci, 0, sizeof(ci));
	ck_assert_int_eq(swn_curve_client(s, NULL, NULL, opts, &ci, err, sizeof(err)), 1);
	ck_assert_str_eq(ci.server, spub);
	ck_assert_str_eq(ci.pub, cpub);
	/* a secret key others may read; a server key that is none */
	setenv(SWN_ENV_KEY_FILE, kf644, 1);
	ck_assert_int_eq(swn_curve_client(s, NULL, NULL, opts, NULL, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "readable by others"), "%s", err);
	ck_assert_int_eq(swn_curve_client(s, "nokey", kf, opts, NULL, err, sizeof(err)), -1);
	unsetenv(SWN_ENV_SERVER_KEY);
	unsetenv(SWN_ENV_KEY_FILE);
	zmq_close(s);
	zmq_ctx_term(ctx);
}
END_TEST

/* A request and its reply over CURVE, both ends set up by net/curve.c. */
START_TEST(test_curve_server)
{
	char d[64], sf[128], cf[128], spub[41], ssec[41], cpub[41], csec[41], err[1200];
	char sec[41], pub[41], ep[256];
	tmpdir(d, sizeof(d));
	ck_assert_int_eq(zmq_curve_keypair(spub, ssec), 0);
	ck_assert_int_eq(zmq_curve_keypair(cpub, csec), 0);
	write_file(sf, sizeof(sf), d, "s.key", ssec, 0600);
	write_file(cf, sizeof(cf), d, "c.key", csec, 0600);
	ck_assert_int_eq(swn_curve_server_keys("--opt", sf, sec, pub, err, sizeof(err)), 0);
	ck_assert_str_eq(sec, ssec);
	ck_assert_str_eq(pub, spub);
	ck_assert_int_eq(swn_curve_server_keys("--opt", "/nonexistent/x.key", sec, pub, err,
	    sizeof(err)), -1);
	ck_assert_msg(strstr(err, "/nonexistent/x.key"), "%s", err);
	void *ctx = zmq_ctx_new(), *rep = zmq_socket(ctx, ZMQ_REP), *req = zmq_socket(ctx, ZMQ_REQ);
	int to = 5000;
	size_t epl = sizeof(ep);
	zmq_setsockopt(rep, ZMQ_RCVTIMEO, &to, sizeof(to));
	zmq_setsockopt(req, ZMQ_RCVTIMEO, &to, sizeof(to));
	ck_assert_int_eq(swn_curve_server(rep, sec, "data"), 0);
	char dom[32] = "";
	size_t dl = sizeof(dom);
	ck_assert_int_eq(zmq_getsockopt(rep, ZMQ_ZAP_DOMAIN, dom, &dl), 0);
	ck_assert_str_eq(dom, "data");
	ck_assert_int_eq(zmq_bind(rep, "tcp://127.0.0.1:*"), 0);
	ck_assert_int_eq(zmq_getsockopt(rep, ZMQ_LAST_ENDPOINT, ep, &epl), 0);
	ck_assert_int_eq(swn_curve_client(req, pub, cf, opts, NULL, err, sizeof(err)), 1);
	ck_assert_int_eq(zmq_connect(req, ep), 0);
	char buf[16];
	ck_assert_int_eq(zmq_send(req, "ping", 4, 0), 4);
	ck_assert_int_eq(zmq_recv(rep, buf, sizeof(buf), 0), 4);
	ck_assert_int_eq(zmq_send(rep, "pong", 4, 0), 4);
	ck_assert_int_eq(zmq_recv(req, buf, sizeof(buf), 0), 4);
	ck_assert(!memcmp(buf, "pong", 4));
	int zero = 0;
	zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(rep, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(req);
	zmq_close(rep);
	zmq_ctx_term(ctx);
}
END_TEST

/* Two section handlers: the name, and the context's text. */
static void
sec_alpha(swn_buf *b, const char *ctx)
{
	swn_put(b, "# alpha\nctx: %s\n", ctx);
}

static void
sec_beta(swn_buf *b, const char *ctx)
{
	swn_put(b, "# beta\nctx: %s\n", ctx);
}

SWN_SECTION_WRAP(sec_, char, alpha)
SWN_SECTION_WRAP(sec_, char, beta)
static const swn_section sections[] = { { "alpha", sec_alpha_any }, { "beta", sec_beta_any } };

static const swn_control control = { sections, 2, "x" };

static void
reply_is(const char *req, const char *want)
{
	char out[512];
	size_t n = swn_control_reply(req, strlen(req), &control, out, sizeof(out));
	ck_assert_uint_eq(n, strlen(out));
	ck_assert_str_eq(out, want);
	size_t m = 0;
	char *all = swn_control_reply_alloc(req, strlen(req), &control, &m);
	ck_assert_ptr_nonnull(all);
	ck_assert_uint_eq(m, n);
	ck_assert_str_eq(all, want);
	free(all);
}

START_TEST(test_control)
{
	reply_is("ping", "pong\n");
	reply_is("ping\r\nstatus", "pong\n");
	reply_is("help", "commands: status [SECTION], ping, help\nsections: alpha beta\n");
	reply_is("status", "# alpha\nctx: x\n\n# beta\nctx: x\n");
	reply_is("status ", "# alpha\nctx: x\n\n# beta\nctx: x\n");
	reply_is("status beta", "# beta\nctx: x\n");
	reply_is("status gamma", "error: unknown section 'gamma'\n");
	reply_is("frob it", "error: unknown command 'frob' (try help)\n");
	reply_is("", "error: unknown command '' (try help)\n");
	char big[300];
	memset(big, 'a', sizeof(big));
	char out[512];
	swn_control_reply(big, sizeof(big), &control, out, sizeof(out));
	ck_assert_uint_eq(strlen(out), strlen("error: unknown command '' (try help)\n") + 63);
	ck_assert_uint_eq(swn_control_reply("ping", 4, &control, out, 0), 0);
	/* too small even for the cut line: as much of it as fits */
	char small[20];
	size_t n = swn_control_reply("status", 6, &control, small, sizeof(small));
	ck_assert_uint_eq(n, strlen(small));
	ck_assert_str_eq(small, "cut: this reply nee");
	/* whole lines, then the cut line */
	static const swn_control lng = { sections, 2,
	    "0123456789012345678901234567890123456789" };
	char mid[70];
	n = swn_control_reply("status", 6, &lng, mid, sizeof(mid));
	ck_assert_uint_eq(n, strlen(mid));
	ck_assert_str_eq(mid, "# alpha\ncut: this reply needs a buffer of 109 bytes, it had 70\n");
}
END_TEST

/* swn_control_recv: none waiting -1; a request's first frame, the rest
 * discarded; a frame longer than the room cut to it. */
START_TEST(test_control_recv)
{
	void *ctx = zmq_ctx_new();
	void *a = zmq_socket(ctx, ZMQ_PAIR), *b = zmq_socket(ctx, ZMQ_PAIR);
	ck_assert_int_eq(zmq_bind(b, "inproc://ctlrecv"), 0);
	ck_assert_int_eq(zmq_connect(a, "inproc://ctlrecv"), 0);
	char req[16];
	ck_assert_int_eq(swn_control_recv(b, req, sizeof(req)), -1);
	zmq_send(a, "ping", 4, ZMQ_SNDMORE);
	zmq_send(a, "junk that is longer than sixty-four bytes, to be read in pieces.....", 68,
	    ZMQ_SNDMORE);
	zmq_send(a, "more", 4, 0);
	zmq_send(a, "status server plus far too much", 31, 0);
	usleep(20000);
	ck_assert_int_eq(swn_control_recv(b, req, sizeof(req)), 4);
	ck_assert(memcmp(req, "ping", 4) == 0);
	ck_assert_int_eq(swn_control_recv(b, req, sizeof(req)), 16);	/* the next request, cut */
	ck_assert(memcmp(req, "status server pl", 16) == 0);
	ck_assert_int_eq(swn_control_recv(b, req, sizeof(req)), -1);
	int zero = 0;
	zmq_setsockopt(a, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_close(a);
	zmq_close(b);
	zmq_ctx_term(ctx);
}
END_TEST

START_TEST(test_buf)
{
	char p[24];
	swn_buf b = { .p = p, .cap = sizeof(p), .cutfmt = "cut %zu %zu\n" };
	swn_put(&b, "one\n");
	swn_put(&b, "two %d\n", 2);
	ck_assert_uint_eq(swn_finish(&b), 10);
	ck_assert_str_eq(p, "one\ntwo 2\n");
	swn_put(&b, "a line too long for what is left\n");
	swn_put(&b, "x\n");	/* after a cut: counted, not written */
	ck_assert(b.cut);
	ck_assert_uint_eq(b.need, 10 + 33 + 2);
	ck_assert_uint_eq(swn_finish(&b), strlen(p));
	ck_assert_str_eq(p, "one\ntwo 2\ncut 46 24\n");
	/* growing: everything, no cut */
	swn_buf g = { .grow = 1, .cutfmt = "cut\n" };
	ck_assert_int_eq(swn_buf_grow(&g, 1), 0);
	ck_assert_uint_eq(g.cap, 4096);
	for (int i = 0; i < 1000; i++)
		swn_put(&g, "line %04d\n", i);
	ck_assert(!g.cut && g.cap >= 10001);
	ck_assert_uint_eq(swn_finish(&g), 10000);
	ck_assert(!strncmp(g.p + 9990, "line 0999\n", 10));
	ck_assert_int_eq(swn_buf_grow(&g, 70000), 0);
	ck_assert_uint_eq(g.cap, 131072);
	free(g.p);
	swn_buf z = { .cutfmt = "cut\n" };
	ck_assert_uint_eq(swn_finish(&z), 0);
}
END_TEST

START_TEST(test_dirlock)
{
	char d[64], err[1200] = "x";
	tmpdir(d, sizeof(d));
	/* no lock file: none, and no message */
	ck_assert_int_eq(sw_dirlock_open(d, 0, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "");
	int a = sw_dirlock_open(d, 1, err, sizeof(err));
	ck_assert_int_ge(a, 0);
	int b = sw_dirlock_open(d, 0, err, sizeof(err));
	ck_assert_int_ge(b, 0);
	/* a daemon alone: exclusive; another meanwhile neither way */
	ck_assert_int_eq(sw_dirlock_exclusive(a, d, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_dirlock_exclusive(b, d, err, sizeof(err)), 1);
	ck_assert_int_eq(sw_dirlock_shared(b, d, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "holds the data directory exclusively") &&
	    strstr(err, SW_RUNLOCK_FILE), "%s", err);
	/* the daemon runs on shared: another daemon shares, check cannot clear */
	ck_assert_int_eq(sw_dirlock_shared(a, d, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_dirlock_shared(b, d, err, sizeof(err)), 0);
	int c = sw_dirlock_open(d, 0, err, sizeof(err));
	ck_assert_int_eq(sw_dirlock_exclusive(c, d, err, sizeof(err)), 1);
	close(a);
	close(b);
	ck_assert_int_eq(sw_dirlock_exclusive(c, d, err, sizeof(err)), 0);
	close(c);
	ck_assert_int_eq(sw_dirlock_exclusive(-1, d, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, SW_RUNLOCK_FILE), "%s", err);
	ck_assert_int_eq(sw_dirlock_open("/nonexistent/dir", 1, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "/nonexistent/dir/" SW_RUNLOCK_FILE), "%s", err);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("net");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_curve_env);
	tcase_add_test(tc, test_curve_client);
	tcase_add_test(tc, test_curve_server);
	tcase_add_test(tc, test_control);
	tcase_add_test(tc, test_buf);
	tcase_add_test(tc, test_control_recv);
	tcase_add_test(tc, test_dirlock);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
