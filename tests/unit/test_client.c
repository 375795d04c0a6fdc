/*
 * test_client.c: the client library against a real sinkwatchd (path in
 * $SINKWATCHD) on free loopback ports: never stalling, counted drops,
 * recovery when the daemon comes back, the slow joiner, a burst right after
 * connecting, zero-copy release, blocking mode, bounded linger, the final
 * counters, incarnations, the sender thread, destroy under signals.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "sinkwatch/client.h"
#include "proto/swproto.h"

static char tmpdir[256];

static void
sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

static double
now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A port free now and not handed out before by this process: the kernel
 * may give a port just closed again, and a daemon's listen and control
 * endpoints must differ. */
static int
free_port(void)
{
	static int handed[256];
	static size_t nhanded, next;
	for (int tries = 0; tries < 1000; tries++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a;
		socklen_t len = sizeof(a);
		memset(&a, 0, sizeof(a));
		a.sin_family = AF_INET;
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		bind(s, (struct sockaddr *)&a, sizeof(a));
		getsockname(s, (struct sockaddr *)&a, &len);
		close(s);
		int port = ntohs(a.sin_port), seen = 0;
		for (size_t i = 0; i < nhanded; i++)
			seen |= handed[i] == port;
		if (seen)
			continue;
		handed[next] = port;
		next = (next + 1) % 256;
		if (nhanded < 256)
			nhanded++;
		return port;
	}
	ck_abort_msg("no fresh port after 1000 tries");
	return 0;
}

struct daemon {
	pid_t pid;
	char listen[64], control[64];
};

/* Sends req to the control endpoint; the reply into out. 0 or -1. */
static int
ctl(const struct daemon *d, const char *req, char *out, size_t len, int timeout_ms)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
	int zero = 0, rc = -1;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
	if (zmq_connect(s, d->control) == 0 && zmq_send(s, req, strlen(req), 0) >= 0) {
		int n = zmq_recv(s, out, len - 1, 0);
		if (n >= 0) {
			out[(size_t)n < len - 1 ? (size_t)n : len - 1] = '\0';
			rc = 0;
		}
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	return rc;
}

/* A status figure ("messages: 12" -> 12), -1 if missing. */
static long
figure(const struct daemon *d, const char *key)
{
	char buf[1 << 15], pat[80];
	if (ctl(d, "status", buf, sizeof(buf), 2000))
		return -1;
	snprintf(pat, sizeof(pat), "\n%s: ", key);
	char *p = strstr(buf, pat);
	return p ? atol(p + strlen(pat)) : -1;
}

static void
start_daemon(struct daemon *d, int port)
{
	const char *bin = getenv("SINKWATCHD");
	ck_assert_msg(bin != NULL, "SINKWATCHD not set");
	snprintf(d->listen, sizeof(d->listen), "tcp://127.0.0.1:%d", port);
	snprintf(d->control, sizeof(d->control), "tcp://127.0.0.1:%d", free_port());
	char data[300];
	snprintf(data, sizeof(data), "%s/data-%d", tmpdir, port);
	d->pid = fork();
	ck_assert(d->pid >= 0);
	if (d->pid == 0) {
		char logp[320];
		snprintf(logp, sizeof(logp), "%s/daemon-%d.log", tmpdir, port);
		freopen(logp, "a", stderr);
		execl(bin, bin, "--listen", d->listen, "--control", d->control, "--data-dir", data,
		    "--flush-ms", "50", (char *)NULL);
		_exit(127);
	}
	char buf[64];
	for (int i = 0; i < 100; i++) {
		if (ctl(d, "ping", buf, sizeof(buf), 100) == 0 && strstr(buf, "pong"))
			return;
		sleep_us(50000);
	}
	ck_abort_msg("sinkwatchd did not start");
}

static void
stop_daemon(struct daemon *d)
{
	int st;
	kill(d->pid, SIGTERM);
	waitpid(d->pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "sinkwatchd exit status %d", st);
}

static long
wait_figure(const struct daemon *d, const char *key, long want)
{
	long v = -1;
	for (int i = 0; i < 200; i++) {
		if ((v = figure(d, key)) >= want)
			return v;
		sleep_us(25000);
	}
	return v;
}

enum { H = 2, R = 3, K = 8 };
static float tensor[H * R * K];

static void
fill(void)
{
	for (int i = 0; i < H * R * K; i++)
		tensor[i] = 1.0f / K;
}

static sw_snapshot
snap(int64_t step, uint32_t layer)
{
	sw_snapshot s = { step, layer, SW_KIND_PROBS, SW_DTYPE_F32, R, K, NULL, tensor,
	    sizeof(tensor) };
	return s;
}

static sw_run_info
info(const char *run)
{
	sw_run_info ri = { run, "test-model", 1000, 1, H, 0, 1 };
	return ri;
}

/*
 * A bound SUB that records what clients send, decoded with the protocol's
 * decoder. It is read only by cap_recv(): a SUB sends its subscription to a
 * new peer when the socket is used, so the clients' subscription arrives
 * whenever the test first waits for a message, which may be long after
 * their sends.
 */
struct capture {
	void *ctx, *sub;
	char ep[64];
};

static void
cap_open(struct capture *cap)
{
	int zero = 0;
	size_t len = sizeof(cap->ep);
	cap->ctx = zmq_ctx_new();
	cap->sub = zmq_socket(cap->ctx, ZMQ_SUB);
	zmq_setsockopt(cap->sub, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(cap->sub, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(cap->sub, ZMQ_SUBSCRIBE, "sw/", 3);
	ck_assert_int_eq(zmq_bind(cap->sub, "tcp://127.0.0.1:*"), 0);
	zmq_getsockopt(cap->sub, ZMQ_LAST_ENDPOINT, cap->ep, &len);
}

static void
cap_close(struct capture *cap)
{
	zmq_close(cap->sub);
	zmq_ctx_term(cap->ctx);
}

/*
 * The next message's header in *m, its qpos kept (the caller clears m) and
 * its tensor copied into data (up to len bytes; m->tensor_bytes says how
 * many it had); 0, or -1 on timeout.
 */
static int
cap_recv_data(struct capture *cap, swp_msg *m, int timeout_ms, void *data, size_t len)
{
	zmq_msg_t f[3];
	const void *fr[3];
	size_t sz[3];
	int n = 0, more = 1, rc = -1;
	zmq_setsockopt(cap->sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
	while (more) {
		zmq_msg_t x;
		zmq_msg_init(&x);
		if (zmq_msg_recv(&x, cap->sub, 0) < 0) {
			zmq_msg_close(&x);
			ck_assert_int_eq(n, 0);
			return -1;
		}
		more = zmq_msg_more(&x);
		ck_assert_int_lt(n, 3);
		f[n] = x;
		fr[n] = zmq_msg_data(&f[n]);
		sz[n] = zmq_msg_size(&f[n]);
		n++;
	}
	char detail[256];
	memset(m, 0, sizeof(*m));
	rc = swp_decode(fr, sz, (size_t)n, NULL, m, detail, sizeof(detail));
	ck_assert_msg(rc == 0, "decode: %s", detail);
	if (m->tensor && data)
		memcpy(data, m->tensor, m->tensor_bytes < len ? m->tensor_bytes : len);
	m->tensor = NULL;
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
	return 0;
}

/* A capture bound to one port (where a client already connects). */
static void
cap_open_at(struct capture *cap, int port)
{
	int zero = 0;
	cap->ctx = zmq_ctx_new();
	cap->sub = zmq_socket(cap->ctx, ZMQ_SUB);
	zmq_setsockopt(cap->sub, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(cap->sub, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(cap->sub, ZMQ_SUBSCRIBE, "sw/", 3);
	snprintf(cap->ep, sizeof(cap->ep), "tcp://127.0.0.1:%d", port);
	ck_assert_int_eq(zmq_bind(cap->sub, cap->ep), 0);
}

/* The next message's header in *m (tensor and qpos not kept); 0, or -1 on timeout. */
static int
cap_recv(struct capture *cap, swp_msg *m, int timeout_ms)
{
	int rc = cap_recv_data(cap, m, timeout_ms, NULL, 0);
	swp_msg_clear(m);
	return rc;
}

START_TEST(test_opts_and_errors)
{
	sw_client_opts o;
	sw_client_opts_init(&o);
	ck_assert_ptr_null(o.endpoint);	/* sw_client_new(): SINKWATCH_ENDPOINT, else the default */
	ck_assert_int_eq(o.blocking, 0);
	ck_assert_int_eq(o.queue_max, 256);
	ck_assert_int_eq(SW_CLIENT_QUEUE_MAX, 256);
	ck_assert_uint_eq(o.queue_max_bytes, (size_t)256 << 20);
	ck_assert_int_eq(o.linger_ms, 2000);
	ck_assert_int_eq(o.block_timeout_ms, 30000);
	ck_assert_int_eq(o.resuming, 0);
	ck_assert_uint_eq(o.rank, 0);
	ck_assert_uint_eq(o.senders, 0);
	ck_assert_uint_eq(o.incarnation, 0);
	int codes[] = { 0, SW_EINVAL, SW_ENOMEM, SW_EZMQ, SW_EDROPPED, SW_ETIMEDOUT, SW_ECLOSED };
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		ck_assert(sw_strerror(codes[i]) && *sw_strerror(codes[i]));
	ck_assert_str_eq(sw_strerror(-999), "unknown error");
	ck_assert_str_eq(sw_client_errmsg(NULL), "");

	sw_client *c = (sw_client *)1;
	sw_run_info ri = info("");
	ck_assert_int_eq(sw_client_new(NULL, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);
	char longid[200];
	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	ri = info(longid);
	ck_assert_int_eq(sw_client_new(NULL, &ri, &c), SW_EINVAL);
	ri = info("ok");
	ri.layers = 0;
	ck_assert_int_eq(sw_client_new(NULL, &ri, &c), SW_EINVAL);
	ck_assert_int_eq(sw_client_new(NULL, NULL, &c), SW_EINVAL);
	sw_client_opts_init(&o);
	o.resuming = 1;
	o.resume_from = -1;	/* resuming needs a step */
	ri = info("ok");
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);
	o.endpoint = "nonsense://here";
	ri = info("ok");
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);
	sw_client_destroy(&c);	/* NULL is fine */
	sw_client_destroy(NULL);
	sw_client_stats st;
	sw_client_get_stats(NULL, &st);
	ck_assert_uint_eq(st.sent, 0);
	memset(&st, 0xff, sizeof(st));
	sw_client_destroy_stats(&c, &st);	/* NULL handle: zeroed figures */
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_uint_eq(st.next_seq, 0);
	sw_client_destroy_stats(NULL, NULL);
	ck_assert_uint_eq(sw_client_incarnation(NULL), 0);
	ck_assert_int_eq(sw_client_send(NULL, NULL), SW_EINVAL);
	ck_assert_int_eq(sw_client_send_part(NULL, NULL, 0, 1, 0, 0), SW_EINVAL);
	ck_assert_int_eq(sw_client_send_part_zc(NULL, NULL, 0, 1, 0, 0, NULL, NULL), SW_EINVAL);
	ck_assert_int_eq(sw_client_end(NULL), SW_EINVAL);
	ck_assert_int_eq(sw_client_flush(NULL, 0), SW_EINVAL);
}
END_TEST

/* Writes text to path with the mode given. */
static void
put_file(const char *path, const char *text, mode_t mode)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(test_curve_keys)
{
	char spub[41], ssec[41], cpub[41], csec[41], kf[300], kf644[300], pf[300], text[200];
	ck_assert_int_eq(zmq_curve_keypair(spub, ssec), 0);
	ck_assert_int_eq(zmq_curve_keypair(cpub, csec), 0);
	snprintf(kf, sizeof(kf), "%s/client.key", tmpdir);
	snprintf(kf644, sizeof(kf644), "%s/open.key", tmpdir);
	snprintf(pf, sizeof(pf), "%s/server.pub", tmpdir);
	snprintf(text, sizeof(text), "# a comment\n\n%s   # after the key\n", csec);
	put_file(kf, text, 0600);
	put_file(kf644, text, 0644);
	snprintf(text, sizeof(text), "# sinkwatch CURVE public key\n%s\n", spub);
	put_file(pf, text, 0644);
	unsetenv("SINKWATCH_SERVER_KEY");
	unsetenv("SINKWATCH_CLIENT_KEY_FILE");
	ck_assert(strstr(sw_strerror(SW_EKEY), "CURVE"));

	sw_client_opts o;
	sw_client_opts_init(&o);
	ck_assert_ptr_null(o.server_key);
	ck_assert_ptr_null(o.key_file);
	o.endpoint = "tcp://127.0.0.1:1";	/* nobody: connecting is asynchronous */
	sw_run_info ri = info("curve");
	sw_client *c = (sw_client *)1;
	/* one of the two alone */
	o.server_key = spub;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	ck_assert_ptr_null(c);
	o.server_key = NULL;
	o.key_file = kf;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	/* not a key, a missing file, a secret key others may read */
	o.server_key = "not-a-key";
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	o.server_key = spub;
	o.key_file = "/nonexistent/client.key";
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	o.key_file = kf644;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	/* the key itself, or its file */
	o.key_file = kf;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.auth_failures, 0);
	ck_assert_int_eq(st.auth_status, 0);
	sw_client_destroy(&c);
	o.server_key = pf;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_client_destroy(&c);
	/* from the environment when the options leave them NULL */
	o.server_key = o.key_file = NULL;
	setenv("SINKWATCH_SERVER_KEY", spub, 1);
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	setenv("SINKWATCH_CLIENT_KEY_FILE", kf, 1);
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_client_destroy(&c);
	setenv("SINKWATCH_CLIENT_KEY_FILE", kf644, 1);
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EKEY);
	/* options win over the environment */
	o.server_key = spub;
	o.key_file = kf;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_client_destroy(&c);
	unsetenv("SINKWATCH_SERVER_KEY");
	unsetenv("SINKWATCH_CLIENT_KEY_FILE");
}
END_TEST

START_TEST(test_down_then_up)
{
	int port = free_port();
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.linger_ms = 3000;
	o.queue_max = 16;
	sw_run_info ri = info("downup");
	sw_client *c;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	fill();
	/* no daemon: every send returns at once; past the queue, counted drops */
	double worst = 0;
	int dropped = 0;
	for (int t = 0; t < 40; t++) {
		sw_snapshot s = snap(t, 0);
		double t0 = now_s();
		int rc = sw_client_send(c, &s);
		worst = worst > now_s() - t0 ? worst : now_s() - t0;
		ck_assert(rc == 0 || rc == SW_EDROPPED);
		dropped += rc == SW_EDROPPED;
		if (rc == SW_EDROPPED)
			ck_assert(strstr(sw_client_errmsg(c), "no daemon") != NULL);
	}
	ck_assert_msg(worst < 0.005, "a send took %.4f s with the daemon down", worst);
	ck_assert_str_eq(sw_client_errmsg(c), "dropped message 39: no daemon subscribed");
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.dropped, 24);
	ck_assert_int_eq(dropped, 24);
	ck_assert_uint_eq(st.queued, 16);
	ck_assert_uint_eq(st.sent, 0);
	ck_assert_int_eq(st.subscribed, 0);
	ck_assert_uint_eq(st.next_seq, 40);
	/* the daemon comes up: the client recovers without a restart */
	struct daemon d;
	start_daemon(&d, port);
	ck_assert_int_eq(sw_client_flush(c, 5000), 0);
	sw_client_get_stats(c, &st);
	ck_assert_int_eq(st.subscribed, 1);
	ck_assert_uint_eq(st.sent, 16);
	for (int t = 40; t < 45; t++) {
		sw_snapshot s = snap(t, 0);
		ck_assert_int_eq(sw_client_send(c, &s), 0);
	}
	ck_assert_int_eq(sw_client_end(c), 0);
	ck_assert_int_eq(sw_client_end(c), SW_ECLOSED);
	sw_snapshot s = snap(99, 0);
	ck_assert_int_eq(sw_client_send(c, &s), SW_ECLOSED);
	sw_client_destroy(&c);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 21), 21);
	ck_assert_int_eq(figure(&d, "messages"), 22);
	/* the sequence numbers name the 24 messages dropped at the client */
	char buf[1 << 15];
	ck_assert_int_eq(ctl(&d, "status runs", buf, sizeof(buf), 2000), 0);
	stop_daemon(&d);
}
END_TEST

/*
 * Issue 27, item 7: a C client whose probe changes keys, then rows, mid-run
 * (one handle, one daemon): each shape is the run's next generation, in
 * its own file, and nothing is lost or refused.
 */
START_TEST(test_reshape_mid_run)
{
	int port = free_port();
	struct daemon d;
	start_daemon(&d, port);
	fill();
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = d.listen;
	sw_run_info ri = info("reshape");
	sw_client *c;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	ck_assert_int_eq(sw_client_flush(c, 5000), 0);
	/* (rows, keys): 3 x 8, then 3 x 4, then 2 x 8; two steps each */
	const uint32_t shape[3][2] = { { R, K }, { R, 4 }, { 2, K } };
	for (int t = 0; t < 6; t++) {
		static float probs[H * R * K];
		sw_snapshot s = snap(t, 0);
		s.rows = shape[t / 2][0];
		s.keys = shape[t / 2][1];
		s.bytes = (size_t)H * s.rows * s.keys * sizeof(float);
		for (size_t i = 0; i < (size_t)H * s.rows * s.keys; i++)
			probs[i] = 1.0f / (float)s.keys;	/* rows that sum to 1 */
		s.data = probs;
		ck_assert_int_eq(sw_client_send(c, &s), 0);
		ck_assert_int_eq(sw_client_flush(c, 5000), 0);
		/* each shape's first step after the last one's are written */
		if (t % 2 == 1)
			ck_assert_int_eq(wait_figure(&d, "steps_written", t + 1), t + 1);
	}
	ck_assert_int_eq(sw_client_end(c), 0);
	ck_assert_int_eq(sw_client_flush(c, 5000), 0);
	sw_client_destroy(&c);
	ck_assert_int_eq(wait_figure(&d, "steps_written", 6), 6);
	ck_assert_int_eq(figure(&d, "write_errors"), 0);
	ck_assert_int_eq(figure(&d, "write_error"), 0);
	ck_assert_int_eq(figure(&d, "duplicate"), 0);
	ck_assert_int_eq(figure(&d, "run_mismatch"), 0);
	stop_daemon(&d);
	const char *names[3] = { "reshape.h5", "reshape@2.h5", "reshape@3.h5" };
	for (int i = 0; i < 3; i++) {
		char path[400];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/data-%d/%s", tmpdir, port, names[i]);
		ck_assert_msg(stat(path, &sb) == 0, "no %s", path);
	}
}
END_TEST

START_TEST(test_daemon_restart)
{
	int port = free_port();
	struct daemon d;
	start_daemon(&d, port);
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = d.listen;
	sw_run_info ri = info("restart");
	sw_client *c;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_snapshot s = snap(0, 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(sw_client_flush(c, 3000), 0);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 1), 1);
	stop_daemon(&d);
	/* gone: the client notices (unsubscribe) and queues, never blocks */
	sw_client_stats st;
	for (int i = 0; i < 100; i++) {
		sw_client_flush(c, 0);
		sw_client_get_stats(c, &st);
		if (!st.subscribed)
			break;
		sleep_us(20000);
	}
	ck_assert_int_eq(st.subscribed, 0);
	s = snap(1, 0);
	double t0 = now_s();
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert(now_s() - t0 < 0.005);
	/* back on the same port: the queued message goes through */
	start_daemon(&d, port);
	ck_assert_int_eq(sw_client_flush(c, 5000), 0);
	s = snap(2, 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(sw_client_flush(c, 3000), 0);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 2), 2);
	sw_client_destroy(&c);
	stop_daemon(&d);
}
END_TEST

/*
 * ZeroMQ's slow joiner: what is sent right after connecting is not lost, a
 * burst of 24 layers x 10 steps included, against the real daemon (whose
 * ZMQ_RCVHWM is 8: the rest waits in the client).
 */
START_TEST(test_slow_joiner)
{
	enum { LAYERS = 24, STEPS = 10 };
	struct daemon d;
	start_daemon(&d, free_port());
	for (int round = 0; round < 5; round++) {
		sw_client_opts o;
		sw_client_opts_init(&o);
		o.endpoint = d.listen;
		o.linger_ms = 10000;
		char id[32];
		snprintf(id, sizeof(id), "joiner-%d", round);
		sw_run_info ri = info(id);
		ri.layers = LAYERS;
		sw_client *c;
		sw_client_stats st;
		fill();
		ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
		/* before any subscription */
		for (int i = 0; i < LAYERS * STEPS; i++) {
			sw_snapshot s = snap(i / LAYERS, (uint32_t)(i % LAYERS));
			ck_assert_int_eq(sw_client_send(c, &s), 0);
		}
		ck_assert_int_eq(sw_client_end(c), 0);
		sw_client_destroy_stats(&c, &st);
		ck_assert_uint_eq(st.dropped, 0);
		ck_assert_uint_eq(st.sent, LAYERS * STEPS + 1);
	}
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 5 * STEPS), 5 * STEPS);
	ck_assert_int_eq(figure(&d, "messages"), 5 * (LAYERS * STEPS + 1));
	stop_daemon(&d);
}
END_TEST

/*
 * A burst right after sw_client_new(), before any subscription can have
 * arrived: 24 layers x 10 steps, all kept and delivered in order. Not a
 * matter of timing: the default queue holds the whole burst however late
 * the subscription comes (the test's SUB sends it only once the test reads).
 */
START_TEST(test_burst_after_new)
{
	enum { LAYERS = 24, STEPS = 10, N = LAYERS * STEPS };
	struct capture cap;
	cap_open(&cap);
	fill();
	for (int round = 0; round < 5; round++) {
		sw_client_opts o;
		sw_client_opts_init(&o);
		o.endpoint = cap.ep;
		char id[32];
		snprintf(id, sizeof(id), "burst-%d", round);
		sw_run_info ri = info(id);
		ri.layers = LAYERS;
		sw_client *c;
		sw_client_stats st;
		ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
		for (int i = 0; i < N; i++) {
			sw_snapshot s = snap(i / LAYERS, (uint32_t)(i % LAYERS));
			ck_assert_int_eq(sw_client_send(c, &s), 0);
		}
		sw_client_get_stats(c, &st);
		ck_assert_uint_eq(st.dropped, 0);
		uint64_t inc = sw_client_incarnation(c);
		ck_assert_uint_ne(inc, 0);
		for (int i = 0; i < N; i++) {
			swp_msg m;
			ck_assert_msg(cap_recv(&cap, &m, 10000) == 0, "round %d: message %d of %d "
			    "not received", round, i, N);
			ck_assert_str_eq(m.run, id);
			ck_assert_uint_eq(m.seq, (uint64_t)i);
			ck_assert_int_eq(m.step, i / LAYERS);
			ck_assert_uint_eq(m.layer, (uint32_t)(i % LAYERS));
			ck_assert_uint_eq(m.inc, inc);
			ck_assert(!m.has_resume);
		}
		ck_assert_int_eq(sw_client_flush(c, 5000), 0);
		sw_client_destroy_stats(&c, &st);
		ck_assert_ptr_null(c);
		ck_assert_uint_eq(st.sent, N);
		ck_assert_uint_eq(st.dropped, 0);
		ck_assert_uint_eq(st.queued, 0);
		ck_assert_uint_eq(st.next_seq, N);
		ck_assert_uint_eq(st.bytes_sent, N * sizeof(tensor));
	}
	cap_close(&cap);
}
END_TEST

/*
 * SINKWATCH_ENDPOINT: a handle whose opts leave the endpoint NULL (or "")
 * sends there; an endpoint given in opts wins over it.
 */
START_TEST(test_endpoint_env)
{
	struct capture cap, other;
	cap_open(&cap);
	cap_open(&other);
	fill();
	sw_client_opts o;
	sw_client *c;
	swp_msg m;
	ck_assert_int_eq(setenv("SINKWATCH_ENDPOINT", cap.ep, 1), 0);
	for (int round = 0; round < 3; round++) {
		sw_client_opts_init(&o);
		if (round == 1)
			o.endpoint = "";
		if (round == 2)
			o.endpoint = other.ep;	/* given: wins over the variable */
		char id[32];
		snprintf(id, sizeof(id), "env-%d", round);
		sw_run_info ri = info(id);
		ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
		sw_snapshot sn = snap(0, 0);
		ck_assert_int_eq(sw_client_send(c, &sn), 0);
		struct capture *want = round == 2 ? &other : &cap;
		ck_assert_msg(cap_recv(want, &m, 10000) == 0, "round %d: not received at %s",
		    round, want->ep);
		ck_assert_str_eq(m.run, id);
		sw_client_destroy(&c);
	}
	/* the variable is what a NULL endpoint takes: a bad one is refused */
	ck_assert_int_eq(setenv("SINKWATCH_ENDPOINT", "nonsense://here", 1), 0);
	sw_client_opts_init(&o);
	sw_run_info ri = info("env-bad");
	c = (sw_client *)1;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);
	o.endpoint = other.ep;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_client_destroy(&c);
	unsetenv("SINKWATCH_ENDPOINT");
	cap_close(&other);
	cap_close(&cap);
}
END_TEST

/*
 * Incarnations: every message of a handle carries its incarnation, a later
 * handle's is greater, and a resuming handle's messages carry the step it
 * resumes from, the end message too.
 */
START_TEST(test_incarnation)
{
	struct capture cap;
	cap_open(&cap);
	fill();
	uint64_t prev = 0;
	for (int round = 0; round < 3; round++) {
		sw_client_opts o;
		sw_client_opts_init(&o);
		o.endpoint = cap.ep;
		if (round == 2) {
			o.resuming = 1;
			o.resume_from = 1234;
		}
		sw_run_info ri = info("inc");
		sw_client *c;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
		ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
		uint64_t inc = sw_client_incarnation(c);
		ck_assert_msg(inc > prev, "incarnation %llu after %llu",
		    (unsigned long long)inc, (unsigned long long)prev);
		/* the wall clock in microseconds, times 4096 */
		ck_assert_uint_ge(inc >> 12, us);
		ck_assert_uint_lt(inc >> 12, us + 10000000);
		prev = inc;
		for (int t = 0; t < 3; t++) {
			sw_snapshot s = snap(1235 + t, 0);
			ck_assert_int_eq(sw_client_send(c, &s), 0);
		}
		ck_assert_int_eq(sw_client_end(c), 0);
		for (int i = 0; i < 4; i++) {
			swp_msg m;
			ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
			ck_assert_uint_eq(m.seq, (uint64_t)i);
			ck_assert_int_eq(m.type, i < 3 ? SWP_SNAPSHOT : SWP_END);
			ck_assert_uint_eq(m.inc, inc);
			ck_assert_int_eq(m.has_resume, round == 2);
			ck_assert_int_eq(m.resume, round == 2 ? 1234 : 0);
		}
		sw_client_destroy(&c);
	}
	cap_close(&cap);
}
END_TEST

/*
 * Several senders (PROTOCOL.md 7b): rank and senders on every message, the
 * end included; opts.incarnation used verbatim; parts of a layer with
 * head0, row0 and rows as the protocol's decoder reads them; bad arguments
 * refused before anything is sent or numbered.
 */
START_TEST(test_several_senders)
{
	struct capture cap;
	cap_open(&cap);
	fill();
	sw_client_opts o;
	sw_run_info ri = info("senders");	/* H = 2 heads */
	sw_client *c = (sw_client *)1;

	/* what sw_client_new() refuses */
	sw_client_opts_init(&o);
	o.endpoint = cap.ep;
	o.senders = 2;
	o.rank = 2;
	o.incarnation = 77;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);
	o.senders = 0;		/* one sender: rank 0 only */
	o.rank = 1;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	o.senders = 65537;
	o.rank = 0;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	o.senders = 2;		/* rank 1 must be given rank 0's incarnation */
	o.rank = 1;
	o.incarnation = 0;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), SW_EINVAL);
	ck_assert_ptr_null(c);

	/* rank 0 of 2 picks the incarnation; its messages say rank 0 of 2 */
	o.rank = 0;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	uint64_t inc0 = sw_client_incarnation(c);
	ck_assert_uint_ne(inc0, 0);
	sw_snapshot s = snap(7, 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(sw_client_end(c), 0);
	swp_msg m;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
		ck_assert_int_eq(m.type, i == 0 ? SWP_SNAPSHOT : SWP_END);
		ck_assert_uint_eq(m.version, 2);
		ck_assert_uint_eq(m.rank, 0);
		ck_assert_uint_eq(m.senders, 2);
		ck_assert_uint_eq(m.inc, inc0);
		ck_assert_uint_eq(m.seq, (uint64_t)i);
	}
	sw_client_destroy(&c);

	/* rank 1 of 2 takes rank 0's incarnation verbatim */
	o.rank = 1;
	o.incarnation = inc0;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	ck_assert_uint_eq(sw_client_incarnation(c), inc0);

	/* a whole layer: version 2 for rank and senders only */
	s = snap(9, 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
	ck_assert_uint_eq(m.version, 2);
	ck_assert_uint_eq(m.rank, 1);
	ck_assert_uint_eq(m.senders, 2);
	ck_assert_uint_eq(m.inc, inc0);
	ck_assert_uint_eq(m.seq, 0);	/* each sender numbers its own */
	ck_assert_int_eq(m.step, 9);
	ck_assert_uint_eq(m.shape[0], H);
	ck_assert_uint_eq(m.head0, 0);
	ck_assert_uint_eq(m.row0, 0);
	ck_assert_uint_eq(m.rows, R);

	/* a part: head 1 of 2, rows 2..4 of 5, with their query positions */
	static const uint32_t qpos[R] = { 2, 3, 4 };
	float part[1 * R * K], got[1 * R * K];
	for (int i = 0; i < 1 * R * K; i++)
		part[i] = (float)i;
	s.step = 8;
	s.layer = 0;
	s.qpos = qpos;
	s.data = part;
	s.bytes = sizeof(part);
	ck_assert_int_eq(sw_client_send_part(c, &s, 1, 1, 2, 5), 0);
	ck_assert_int_eq(cap_recv_data(&cap, &m, 10000, got, sizeof(got)), 0);
	ck_assert_int_eq(m.type, SWP_SNAPSHOT);
	ck_assert_uint_eq(m.version, 2);
	ck_assert_uint_eq(m.seq, 1);
	ck_assert_int_eq(m.step, 8);
	ck_assert_uint_eq(m.layer, 0);
	ck_assert_uint_eq(m.heads, H);
	ck_assert_uint_eq(m.shape[0], 1);
	ck_assert_uint_eq(m.head0, 1);
	ck_assert_uint_eq(m.shape[1], R);
	ck_assert_uint_eq(m.row0, 2);
	ck_assert_uint_eq(m.rows, 5);
	ck_assert_uint_eq(m.shape[2], K);
	ck_assert_uint_eq(m.rank, 1);
	ck_assert_uint_eq(m.senders, 2);
	ck_assert_uint_eq(m.inc, inc0);
	ck_assert_ptr_nonnull(m.qpos);
	ck_assert_mem_eq(m.qpos, qpos, sizeof(qpos));
	ck_assert_uint_eq(m.tensor_bytes, sizeof(part));
	ck_assert_mem_eq(got, part, sizeof(part));
	swp_msg_clear(&m);

	/* rows_total 0: the part holds all rows (no row0, no rows on the wire) */
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 0, 0), 0);
	ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
	ck_assert_uint_eq(m.seq, 2);
	ck_assert_uint_eq(m.head0, 0);
	ck_assert_uint_eq(m.shape[0], 1);
	ck_assert_uint_eq(m.row0, 0);
	ck_assert_uint_eq(m.rows, R);

	/* refused, with what is wrong, and nothing numbered or counted */
	sw_client_stats st0, st;
	sw_client_get_stats(c, &st0);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 0, 0, 0), SW_EINVAL);
	ck_assert_str_eq(sw_client_errmsg(c), "part: heads 0 (a part holds 1 or more heads)");
	ck_assert_int_eq(sw_client_send_part(c, &s, 2, 1, 0, 0), SW_EINVAL);
	ck_assert_str_eq(sw_client_errmsg(c), "part: head0 2 + heads 1 is over the run's 2 heads");
	ck_assert_int_eq(sw_client_send_part(c, &s, UINT32_MAX, 2, 0, 0), SW_EINVAL);
	ck_assert(strstr(sw_client_errmsg(c), "over the run's 2 heads") != NULL);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 3, 5), SW_EINVAL);
	ck_assert_str_eq(sw_client_errmsg(c), "part: row0 3 + rows 3 is over rows_total 5");
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 1, 0), SW_EINVAL);
	ck_assert_str_eq(sw_client_errmsg(c), "part: row0 1 + rows 3 is over rows_total 3");
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, UINT32_MAX, 5), SW_EINVAL);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 0, 65537), SW_EINVAL);
	ck_assert_str_eq(sw_client_errmsg(c), "part: rows_total 65537 is over 65536");
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 2, 0, 0), SW_EINVAL);	/* bytes of 1 head */
	ck_assert(strstr(sw_client_errmsg(c), "invalid snapshot") != NULL);
	ck_assert_int_eq(sw_client_send_part(c, NULL, 0, 1, 0, 0), SW_EINVAL);
	ck_assert_int_eq(sw_client_send_part_zc(c, &s, 0, 1, 0, 0, NULL, NULL), SW_EINVAL);
	ck_assert(strstr(sw_client_errmsg(c), "release callback") != NULL);
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.next_seq, st0.next_seq);
	ck_assert_uint_eq(st.dropped, st0.dropped);

	/* the end: rank and senders too */
	ck_assert_int_eq(sw_client_end(c), 0);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 0, 0), SW_ECLOSED);
	ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
	ck_assert_int_eq(m.type, SWP_END);
	ck_assert_uint_eq(m.version, 2);
	ck_assert_uint_eq(m.seq, 3);
	ck_assert_uint_eq(m.rank, 1);
	ck_assert_uint_eq(m.senders, 2);
	ck_assert_uint_eq(m.inc, inc0);
	sw_client_destroy(&c);

	/* one sender: opts.incarnation verbatim; a whole-layer part is a v1 message */
	sw_client_opts_init(&o);
	o.endpoint = cap.ep;
	o.incarnation = 12345;
	ri = info("alone");
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	ck_assert_uint_eq(sw_client_incarnation(c), 12345);
	s = snap(1, 0);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, H, 0, R), 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(sw_client_send_part(c, &s, 0, 1, 0, R), SW_EINVAL);	/* bytes of 2 */
	s.bytes /= 2;
	ck_assert_int_eq(sw_client_send_part(c, &s, 1, 1, 0, R), 0);
	ck_assert_int_eq(sw_client_end(c), 0);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(cap_recv(&cap, &m, 10000), 0);
		ck_assert_uint_eq(m.seq, (uint64_t)i);
		ck_assert_uint_eq(m.inc, 12345);
		ck_assert_uint_eq(m.rank, 0);
		ck_assert_uint_eq(m.senders, 1);
		ck_assert_uint_eq(m.version, i == 2 ? 2 : 1);
		if (i == 2) {
			ck_assert_uint_eq(m.head0, 1);
			ck_assert_uint_eq(m.shape[0], 1);
		}
	}
	sw_client_destroy(&c);
	cap_close(&cap);
}
END_TEST

/*
 * The final counters: with no daemon, the messages still queued when the
 * linger runs out are dropped, and destroy says how many.
 */
START_TEST(test_destroy_stats)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.queue_max = 3;
	o.linger_ms = 50;
	sw_run_info ri = info("final");
	sw_client *c;
	sw_client_stats st;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	for (int t = 0; t < 5; t++) {
		sw_snapshot s = snap(t, 0);
		ck_assert_int_eq(sw_client_send(c, &s), t < 3 ? 0 : SW_EDROPPED);
	}
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.queued, 3);
	ck_assert_uint_eq(st.dropped, 2);
	double t0 = now_s();
	sw_client_destroy_stats(&c, &st);
	ck_assert_msg(now_s() - t0 < 1.0, "destroy took %.2f s", now_s() - t0);
	ck_assert_ptr_null(c);
	ck_assert_uint_eq(st.sent, 0);
	ck_assert_uint_eq(st.dropped, 5);	/* 2 at send, 3 at the linger's end */
	ck_assert_uint_eq(st.queued, 0);
	ck_assert_uint_eq(st.bytes_sent, 0);
	ck_assert_uint_eq(st.next_seq, 5);
	ck_assert_int_eq(st.subscribed, 0);
}
END_TEST

static int released;
static void *released_ptr;

static void
on_release(void *data, void *hint)
{
	__atomic_add_fetch(&released, 1, __ATOMIC_SEQ_CST);
	released_ptr = data;
	ck_assert_ptr_eq(hint, (void *)&released);
}

START_TEST(test_zero_copy)
{
	struct daemon d;
	start_daemon(&d, free_port());
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = d.listen;
	sw_run_info ri = info("zc");
	sw_client *c;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	released = 0;
	sw_snapshot s = snap(0, 0);
	ck_assert_int_eq(sw_client_send_zc(c, &s, NULL, NULL), SW_EINVAL);
	ck_assert_int_eq(sw_client_send_zc(c, &s, on_release, &released), 0);
	ck_assert_int_eq(sw_client_flush(c, 3000), 0);
	sw_client_destroy(&c);
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), 1);
	ck_assert_ptr_eq(released_ptr, tensor);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 1), 1);
	stop_daemon(&d);

	/* no daemon, queue of 1: the second send is dropped and its buffer
	 * stays the caller's (no callback); the queued one is released at
	 * destroy */
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	o.endpoint = ep;
	o.queue_max = 1;
	o.linger_ms = 100;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	released = 0;
	ck_assert_int_eq(sw_client_send_zc(c, &s, on_release, &released), 0);
	ck_assert_int_eq(sw_client_send_zc(c, &s, on_release, &released), SW_EDROPPED);
	ck_assert_int_eq(released, 0);
	/* an end that was dropped may be sent again: the run is not ended yet */
	ck_assert_int_eq(sw_client_end(c), SW_EDROPPED);
	ck_assert_int_eq(sw_client_end(c), SW_EDROPPED);
	double t0 = now_s();
	sw_client_destroy(&c);
	ck_assert_msg(now_s() - t0 < 1.0, "destroy took %.2f s", now_s() - t0);
	ck_assert_int_eq(released, 1);
}
END_TEST

/*
 * Issue 30: drop accounting with the daemon away, over each path of a
 * message: its node from the handle's slab, or malloc()ed (a header with
 * qpos is over the slab's nodes); dropped before a copy is made (copying
 * send) or with its buffer left the caller's (zero-copy, no callback);
 * then a subscriber, and three times the slab's nodes recycled. Every
 * sequence number arrives once or was counted dropped once.
 */
static int
send_kind(sw_client *c, int t)
{
	static const uint32_t qpos[R] = { 6, 7, 8 };
	sw_snapshot s = snap(t, 0);
	if (t % 4 == 3)
		s.qpos = qpos;
	return t % 2 ? sw_client_send_zc(c, &s, on_release, &released) : sw_client_send(c, &s);
}

START_TEST(test_drop_accounting)
{
	int port = free_port(), t, nzc = 0;
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.queue_max = 4;	/* a slab of 6 nodes */
	sw_run_info ri = info("dropacct");
	sw_client *c;
	sw_client_stats st;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	released = 0;
	for (t = 0; t < 16; t++) {
		ck_assert_int_eq(send_kind(c, t), t < 4 ? 0 : SW_EDROPPED);
		nzc += t < 4 && t % 2;
		if (t == 14)	/* a copying send, dropped before its copy */
			ck_assert_str_eq(sw_client_errmsg(c), "dropped message 14: no daemon subscribed");
	}
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), 0);
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.queued, 4);
	ck_assert_uint_eq(st.dropped, 12);
	ck_assert_uint_eq(st.sent, 0);
	ck_assert_uint_eq(st.next_seq, 16);
	/* a subscriber: the 4 queued go in order, then 18 more one at a time */
	struct capture cap;
	cap_open_at(&cap, port);
	swp_msg m;
	for (t = 0; t < 4; t++) {
		ck_assert_int_eq(cap_recv(&cap, &m, 5000), 0);
		ck_assert_uint_eq(m.seq, (uint64_t)t);
	}
	for (t = 16; t < 34; t++) {
		ck_assert_int_eq(send_kind(c, t), 0);
		nzc += t % 2;
		ck_assert_int_eq(cap_recv(&cap, &m, 5000), 0);
		ck_assert_uint_eq(m.seq, (uint64_t)t);
	}
	sw_client_destroy_stats(&c, &st);
	ck_assert_uint_eq(st.sent, 22);
	ck_assert_uint_eq(st.dropped, 12);
	ck_assert_uint_eq(st.sent + st.dropped, st.next_seq);
	/* each zero-copy buffer taken is released once, none of those dropped */
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), nzc);
	ck_assert(cap_recv(&cap, &m, 100) != 0);
	cap_close(&cap);
}
END_TEST

/*
 * The sender thread: a queued message leaves with no later call from the
 * caller (the sender finds it after a nap); a burst of queue_max fits; a
 * blocking zero-copy send that times out leaves the buffer the caller's
 * (no callback), counted as a drop.
 */
START_TEST(test_sender_thread)
{
	struct daemon d;
	start_daemon(&d, free_port());
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = d.listen;
	o.queue_max = 4;
	sw_run_info ri = info("sender");
	sw_client *c;
	sw_client_stats st;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	for (int i = 0; i < 250; i++) {
		sw_client_get_stats(c, &st);
		if (st.subscribed)
			break;
		sleep_us(20000);
	}
	ck_assert_int_eq(st.subscribed, 1);
	sw_snapshot s = snap(0, 0);
	ck_assert_int_eq(sw_client_send(c, &s), 0);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 1), 1);
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.sent, 1);
	ck_assert_uint_eq(st.queued, 0);
	for (int t = 1; t <= 4; t++) {
		s = snap(t, 0);
		ck_assert_int_eq(sw_client_send(c, &s), 0);
	}
	ck_assert_int_eq(sw_client_flush(c, 3000), 0);
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.sent, 5);
	ck_assert_uint_eq(st.dropped, 0);
	sw_client_destroy(&c);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 5), 5);
	stop_daemon(&d);

	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	o.endpoint = ep;
	o.blocking = 1;
	o.block_timeout_ms = 100;
	o.linger_ms = 100;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	released = 0;
	s = snap(0, 0);
	ck_assert_int_eq(sw_client_send_zc(c, &s, on_release, &released), SW_ETIMEDOUT);
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.dropped, 1);
	ck_assert_uint_eq(st.queued, 0);
	sw_client_destroy(&c);
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), 0);
}
END_TEST

static volatile sig_atomic_t nalarm;

static void
on_alarm(int sig)
{
	(void)sig;
	nalarm++;
}

/*
 * A signal during destroy's linger wait (a profiler's timer) interrupts
 * zmq_ctx_term(): destroy must still wait until ZeroMQ is done, so that a
 * zero-copy buffer is released before it returns and nothing calls back
 * into the freed handle afterwards. A SUB that never reads keeps 4 MiB
 * frames in flight.
 */
START_TEST(test_destroy_under_signals)
{
	enum { BR = 1024, BK = 1024 };
	static float big[BR * BK];
	int port = free_port();
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", port);
	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
	int one = 1, rcvbuf = 4096;
	zmq_setsockopt(sub, ZMQ_RCVHWM, &one, sizeof(one));
	zmq_setsockopt(sub, ZMQ_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
	ck_assert_int_eq(zmq_bind(sub, ep), 0);

	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.queue_max = 8;
	o.linger_ms = 600;
	sw_run_info ri = info("signals");
	ri.heads = 1;
	sw_client *c;
	sw_client_stats st;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	for (int i = 0; i < 250; i++) {
		sw_client_get_stats(c, &st);
		if (st.subscribed)
			break;
		/* the SUB sends its subscription when its commands are processed */
		int ev;
		size_t el = sizeof(ev);
		zmq_getsockopt(sub, ZMQ_EVENTS, &ev, &el);
		sleep_us(20000);
	}
	ck_assert_int_eq(st.subscribed, 1);
	sw_snapshot s = { 0, 0, SW_KIND_PROBS, SW_DTYPE_F32, BR, BK, NULL, big, sizeof(big) };
	released = 0;
	ck_assert_int_eq(sw_client_send_zc(c, &s, on_release, &released), 0);
	for (int t = 1; t < 8; t++) {
		s.step = t;
		ck_assert_int_eq(sw_client_send(c, &s), 0);
	}
	sw_client_flush(c, 300);

	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, &old);
	struct itimerval it = { { 0, 20000 }, { 0, 20000 } }, off = { { 0, 0 }, { 0, 0 } };
	nalarm = 0;
	setitimer(ITIMER_REAL, &it, NULL);
	sw_client_destroy(&c);
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	ck_assert_int_gt(nalarm, 0);
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), 1);
	/* the reader wakes up: nothing of the handle is left to call back */
	int tmo = 100;
	zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	zmq_msg_t m;
	zmq_msg_init(&m);
	while (zmq_msg_recv(&m, sub, 0) >= 0)
		;
	zmq_msg_close(&m);
	sleep_us(200000);
	ck_assert_int_eq(__atomic_load_n(&released, __ATOMIC_SEQ_CST), 1);
	zmq_close(sub);
	zmq_ctx_term(ctx);
}
END_TEST

START_TEST(test_blocking_and_invalid)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%d", free_port());
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.blocking = 1;
	o.block_timeout_ms = 200;
	o.linger_ms = 100;
	sw_run_info ri = info("blocking");
	sw_client *c;
	fill();
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	sw_snapshot s = snap(0, 0);
	double t0 = now_s();
	ck_assert_int_eq(sw_client_send(c, &s), SW_ETIMEDOUT);
	double took = now_s() - t0;
	ck_assert_msg(took >= 0.19 && took < 1.0, "blocking timeout took %.3f s", took);
	/* a snapshot whose bytes disagree with its shape is refused up front */
	s.bytes -= 4;
	ck_assert_int_eq(sw_client_send(c, &s), SW_EINVAL);
	ck_assert(strstr(sw_client_errmsg(c), "invalid snapshot") != NULL);
	s = snap(0, 5);	/* layer out of range */
	ck_assert_int_eq(sw_client_send(c, &s), SW_EINVAL);
	sw_client_destroy(&c);

	struct daemon d;
	start_daemon(&d, free_port());
	o.endpoint = d.listen;
	o.block_timeout_ms = 5000;
	ck_assert_int_eq(sw_client_new(&o, &ri, &c), 0);
	for (int t = 0; t < 50; t++) {
		s = snap(t, 0);
		ck_assert_int_eq(sw_client_send(c, &s), 0);
	}
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	ck_assert_uint_eq(st.sent, 50);
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_uint_eq(st.bytes_sent, 50 * sizeof(tensor));
	sw_client_destroy(&c);
	ck_assert_int_eq(wait_figure(&d, "steps_complete", 50), 50);
	stop_daemon(&d);
}
END_TEST

int
main(void)
{
	if (!getenv("SINKWATCHD")) {
		puts("SINKWATCHD not set: skipped");
		return 77;
	}
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sinkwatch-client-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 99;
	Suite *s = suite_create("client");
	TCase *tc = tcase_create("client");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_opts_and_errors);
	tcase_add_test(tc, test_curve_keys);
	tcase_add_test(tc, test_down_then_up);
	tcase_add_test(tc, test_daemon_restart);
	tcase_add_test(tc, test_reshape_mid_run);
	tcase_add_test(tc, test_slow_joiner);
	tcase_add_test(tc, test_burst_after_new);
	tcase_add_test(tc, test_incarnation);
	tcase_add_test(tc, test_endpoint_env);
	tcase_add_test(tc, test_several_senders);
	tcase_add_test(tc, test_destroy_stats);
	tcase_add_test(tc, test_zero_copy);
	tcase_add_test(tc, test_drop_accounting);
	tcase_add_test(tc, test_blocking_and_invalid);
	tcase_add_test(tc, test_sender_thread);
	tcase_add_test(tc, test_destroy_under_signals);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
