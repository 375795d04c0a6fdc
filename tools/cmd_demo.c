/*
 * cmd_demo.c: `sinkwatch demo`, a synthetic attention tensor written to HDF5
 * and analyzed, so a fresh build shows what the tool does.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/tensor.h"
#include "tools/analyze.h"
#include "tools/tools.h"

/* splitmix64: a fixed, portable stream so the demo is the same everywhere. */
static double
uniform(uint64_t *st)
{
	uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1p-53;
}

/*
 * Layers x heads of causal softmax rows: head h of layer l puts a sink logit
 * of strength 1 + 1.5 h + 2 l on key 0 and spreads the rest with a recency
 * bias whose sharpness grows with h, so the heads differ in both channels.
 */
static void
make_demo(float *x, size_t L, size_t H, size_t Q, size_t K)
{
	uint64_t st = 42;
	double z[4096];
	for (size_t l = 0; l < L; l++)
		for (size_t h = 0; h < H; h++)
			for (size_t q = 0; q < Q; q++) {
				float *row = x + ((l * H + h) * Q + q) * K;
				size_t n = q + K - Q + 1;
				double mx = -INFINITY, sum = 0;
				for (size_t i = 0; i < n; i++) {
					double recency = -(double)(n - 1 - i) * 0.15 * (double)(h + 1);
					z[i] = recency + 0.8 * (uniform(&st) - 0.5);
					if (i == 0)
						z[i] = 1.0 + 1.5 * (double)h + 2.0 * (double)l;
					mx = z[i] > mx ? z[i] : mx;
				}
				for (size_t i = 0; i < n; i++)
					sum += exp(z[i] - mx);
				for (size_t i = 0; i < K; i++)
					row[i] = i < n ? (float)(exp(z[i] - mx) / sum) : 0.0f;
			}
}

/* `sinkwatch demo --tensor`: a saved tensor, analyzed. */
static int
tensor_demo(const char *out, const char *format)
{
	enum { L = 2, H = 4, Q = 32, K = 32 };
	float *x = malloc((size_t)L * H * Q * K * sizeof(float));
	char err[512];
	if (!x) {
		fprintf(stderr, "sinkwatch demo: out of memory\n");
		return 2;
	}
	make_demo(x, L, H, Q, K);
	uint64_t dims[4] = { L, H, Q, K };
	int rc = sw_tensor_write_f32(out, "/attention", 4, dims, x, err, sizeof(err));
	free(x);
	if (rc) {
		fprintf(stderr, "sinkwatch demo: %s\n", err);
		return 2;
	}
	fprintf(stderr, "sinkwatch demo: wrote %s:/attention [%d, %d, %d, %d] float32, causal\n",
	    out, L, H, Q, K);
	size_t tlen = strlen(out) + sizeof(":/attention");
	char *target = malloc(tlen);
	if (!target)
		return 2;
	snprintf(target, tlen, "%s:/attention", out);
	char *av[] = { "analyze", target, "--causal", "--format", (char *)format, NULL };
	rc = sw_analyze_main(5, av);
	free(target);
	return rc;
}

/* ---- the pipeline demo: daemon, a streamed run, a report ------------------ */

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <zmq.h>

#include "net/swnet.h"
#include "storage/runfile.h"

static int
ping(const char *ep, int timeout_ms)
{
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_REQ);
	int zero = 0, ok = 0;
	char buf[16];
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
	if (zmq_connect(s, ep) == 0 && zmq_send(s, "ping", 4, 0) == 4)
		ok = zmq_recv(s, buf, sizeof(buf), 0) >= 4 && !memcmp(buf, "pong", 4);
	zmq_close(s);
	zmq_ctx_term(ctx);
	return ok;
}

/* The daemon beside this program, else $SINKWATCHD, else sinkwatchd on PATH. */
static void
find_daemon(char *buf, size_t len)
{
	const char *env = getenv("SINKWATCHD");
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return;
	}
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			const char *cands[] = { "%s/sinkwatchd", "%s/../sbin/sinkwatchd", "%s/../sinkwatchd" };
			for (size_t i = 0; i < 3; i++) {
				snprintf(buf, len, cands[i], self);
				if (access(buf, X_OK) == 0)
					return;
			}
		}
	}
	snprintf(buf, len, "sinkwatchd");
}

static int
wait_ended(const char *path, int timeout_s)
{
	time_t end = time(NULL) + timeout_s;
	char err[512];
	while (time(NULL) < end) {
		sw_reader *r;
		if (access(path, R_OK) == 0 && sw_reader_open(path, &r, NULL, err, sizeof(err)) == 0) {
			int done = sw_reader_refresh(r, err, sizeof(err)) >= 0 && sw_reader_ended(r);
			sw_reader_close(&r);
			if (done)
				return 0;
		}
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* The port of a loopback tcp:// endpoint, else 0. */
static int
loopback_port(const char *ep)
{
	int port = 0, n = 0;
	if (sscanf(ep, "tcp://127.0.0.1:%d%n", &port, &n) == 1 && ep[n] == '\0')
		return port > 0 && port < 65536 ? port : 0;
	if (sscanf(ep, "tcp://localhost:%d%n", &port, &n) == 1 && ep[n] == '\0')
		return port > 0 && port < 65536 ? port : 0;
	return 0;
}

/* Binds 127.0.0.1:port (0: any); the port bound, else -1 (taken). */
static int
try_bind(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t len = sizeof(a);
	if (fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));	/* as ZeroMQ binds */
	int got = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0 ? ntohs(a.sin_port) : -1;
	close(fd);
	return got;
}

/*
 * An endpoint for the demo's daemon to bind, into buf: the one given (an
 * option, else the variable var), else dflt when its port is free, else a
 * free loopback port, said on stderr. avoid: a port the other socket took.
 */
static const char *
pick_endpoint(const char *given, const char *var, const char *dflt, int avoid, char *buf,
    size_t len)
{
	const char *ep = swn_env_or(given, var, NULL);
	if (ep)
		return ep;
	int port = loopback_port(dflt);
	if (port != avoid && try_bind(port) == port)
		return dflt;
	for (int tries = 0; tries < 16; tries++) {
		int p = try_bind(0);
		if (p > 0 && p != avoid) {
			snprintf(buf, len, "tcp://127.0.0.1:%d", p);
			fprintf(stderr, "sinkwatch demo: port %d is taken: the demo's sinkwatchd binds %s "
			    "instead\n", port, buf);
			return buf;
		}
	}
	return dflt;
}

#define DEMO_USAGE "usage: sinkwatch demo [--steps N] [--format text|json] [--listen ENDPOINT]\n" \
	"                      [--control ENDPOINT] [--data-dir DIR]\n" \
	"       sinkwatch demo --tensor [--out FILE.h5] [--format json|csv|text]\n"

int
sw_demo_main(int argc, char **argv)
{
	const char *out = "sinkwatch-demo.h5", *format = "text";
	const char *listen_opt = NULL, *control_opt = NULL, *data_dir = "sinkwatch-data";
	int tensor = 0;
	long steps = 60;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--tensor"))
			tensor = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			printf(DEMO_USAGE);
			return 0;
		}
		else if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--format") && i + 1 < argc)
			format = argv[++i];
		else if (!strcmp(argv[i], "--listen") && i + 1 < argc)
			listen_opt = argv[++i];
		else if (!strcmp(argv[i], "--control") && i + 1 < argc)
			control_opt = argv[++i];
		else if (!strcmp(argv[i], "--data-dir") && i + 1 < argc)
			data_dir = argv[++i];
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			if (sw_parse_long(argv[++i], &steps) || steps < 2)
				return sw_tool_fail("demo", "--steps: '%s' is not an integer >= 2", argv[i]);
		} else {
			fprintf(stderr, DEMO_USAGE);
			return 2;
		}
	}
	if (tensor)
		return tensor_demo(out, format);
	if (!*data_dir)
		return sw_tool_fail("demo", "--data-dir: empty");

	/* the daemon where SINKWATCH_ENDPOINT/CONTROL or the options say, else
	 * on its defaults, else (a port taken) on free loopback ports */
	char lbuf[64], cbuf[64];
	const char *listen = pick_endpoint(listen_opt, SWN_ENV_ENDPOINT, SWN_DEFAULT_ENDPOINT, -1,
	    lbuf, sizeof(lbuf));
	const char *control = pick_endpoint(control_opt, SWN_ENV_CONTROL, SWN_DEFAULT_CONTROL,
	    loopback_port(listen), cbuf, sizeof(cbuf));
	if (!strcmp(listen, control))
		return sw_tool_fail("demo", "listen and control are the same endpoint (%s)", listen);
	if (ping(control, 200))
		return sw_tool_fail("demo", "a sinkwatchd already answers on %s: stop it, or give "
		    "the demo another --control (the demo starts its own)", control);
	char daemon[4096];
	find_daemon(daemon, sizeof(daemon));
	pid_t pid = fork();
	if (pid < 0)
		return sw_tool_fail("demo", "fork: %s", strerror(errno));
	if (pid == 0) {
		execlp(daemon, daemon, "--listen", listen, "--control", control, "--data-dir", data_dir,
		    (char *)NULL);
		fprintf(stderr, "sinkwatch demo: cannot run %s: %s\n", daemon, strerror(errno));
		_exit(127);
	}
	int up = 0;
	for (int i = 0; i < 100 && !up; i++) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return sw_tool_fail("demo", "sinkwatchd exited at start (status %d; is %s or %s "
			    "taken? --listen and --control choose others)", st, listen, control);
		up = ping(control, 100);
	}
	if (!up) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return sw_tool_fail("demo", "sinkwatchd did not answer on %s", control);
	}
	char run[64], steps_s[32], path[4200];
	snprintf(run, sizeof(run), "demo-%ld", (long)time(NULL));
	snprintf(steps_s, sizeof(steps_s), "%ld", steps);
	fprintf(stderr, "sinkwatch demo: sinkwatchd (pid %ld) on %s (control %s), data in %s; "
	    "streaming run %s\n", (long)pid, listen, control, data_dir, run);
	char *sim_argv[] = { "sim", "--endpoint", (char *)listen, "--run", run, "--mode", "mixed",
	    "--steps", steps_s, "--layers", "4", "--heads", "8", "--rows", "16", "--keys", "128",
	    "--blocking", NULL };
	int rc = sw_sim_main((int)(sizeof(sim_argv) / sizeof(sim_argv[0])) - 1, sim_argv);
	char name[512];
	sw_runfile_name(run, name, sizeof(name));
	snprintf(path, sizeof(path), "%s/%s", data_dir, name);
	if (rc == 0 && wait_ended(path, 60) != 0)
		rc = sw_tool_fail("demo", "the run file %s did not show the run's end", path);
	if (rc == 0) {
		char *rep_argv[] = { "report", path, "--format", (char *)format, NULL };
		rc = sw_report_main(4, rep_argv);
	}
	int st = 0;
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		rc = sw_tool_fail("demo", "sinkwatchd stopped with status %d", st);
	else
		fprintf(stderr, "sinkwatch demo: sinkwatchd stopped; the run file is %s\n", path);
	return rc;
}
