/*
 * sinkwatchd.c: the daemon's start-up (sinkwatchd.h): its options and
 * configuration, the data directory and its lock, the ZeroMQ sockets
 * (CURVE through net/), the writer, the assembly, then the libuv loop,
 * which owns the sockets: ingest.c receives, work.c computes on the pool
 * threads, control.c answers, service.c runs the service.
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "daemon/sinkwatchd.h"
#include "net/log.h"
#include "net/swnet.h"

/* ---- start-up --------------------------------------------------------------------- */

static void
usage(FILE *f)
{
	fprintf(f, "usage: sinkwatchd [--config FILE] [--check-config] [--print-config]\n"
	    "                  [--OPTION VALUE ...] [--help] [--version]\n\noptions:\n");
	for (size_t i = 0; i < swd_config_count(); i++) {
		char flag[64];
		snprintf(flag, sizeof(flag), "--%s", swd_config_name(i));
		for (char *p = flag; *p; p++)
			if (*p == '_')
				*p = '-';
		fprintf(f, "  %-22s %s (default: %s)\n", flag, swd_config_help(i),
		    swd_config_default(i)[0] ? swd_config_default(i) : "\"\"");
	}
}

static int
mkdirs(const char *path)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * CURVE on the SUB connected to a forwarder, before its connect, as every
 * client (net/swnet.h): the forwarder's public key (or its file) from
 * connect_server_key, else SINKWATCH_SERVER_KEY; this daemon's key pair
 * from curve_secret_file, else SINKWATCH_CLIENT_KEY_FILE. No server key:
 * a plain hop. 0, or -1 with err.
 */
static int
curve_client(swd_daemon *d, void *sock, char *err, size_t errlen)
{
	static const char *const opts[2] = { "connect_server_key", "curve_secret_file" };
	const char *srv = d->cfg.connect_server_key, *kf = d->cfg.curve_secret_file;
	swn_curve_info ci;
	swn_curve_env(&srv, &kf);
	if (!srv)
		return 0;
	if (swn_curve_client(sock, srv, kf, opts, &ci, err, errlen) < 0)
		return -1;
	/* whichever gave it, status says the hop is CURVE */
	snprintf(d->cfg.connect_server_key, sizeof(d->cfg.connect_server_key), "%s", ci.server);
	log_info("the hop from the forwarder at %s is CURVE: its key %s, this daemon's %s",
	    d->cfg.connect, ci.server, ci.pub);
	return 0;
}

static int
setup_sockets(swd_daemon *d, char *err, size_t errlen)
{
	char secret[SWP_KEY_LEN + 1] = "", ep[sizeof(d->cfg.listen) + 16];
	if (!(d->zctx = zmq_ctx_new())) {
		snprintf(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		return -1;
	}
	if (d->cfg.curve_secret_file[0]) {
		if (swn_curve_server_keys("curve_secret_file", d->cfg.curve_secret_file, secret,
		    d->curve_public, err, errlen) != 0 ||
		    swd_auth_start(&d->auth, d->zctx, d->cfg.curve_allow, NULL, err, errlen) != 0)
			return -1;
		swd_auth_stats as;
		swd_auth_get_stats(d->auth, &as);
		log_info("CURVE on: public key %s, %lld client key(s) allowed, from %s",
		    d->curve_public, (long long)as.keys, d->cfg.curve_allow);
		if (as.keys == 0)	/* nobody gets in, sinkwatch status neither */
			log_warn("%s allows no client key: every sender and every control client "
			    "(sinkwatch status) is refused", d->cfg.curve_allow);
	} else if ((!d->cfg.connect[0] && !swp_endpoint_local(d->cfg.listen)) ||
	    !swp_endpoint_local(d->cfg.control)) {
		log_warn("listening beyond loopback without CURVE (insecure_off_loopback): anyone "
		    "who reaches %s and %s may send runs and read the status",
		    d->cfg.connect[0] ? "" : d->cfg.listen, d->cfg.control);
	}
	if (d->cfg.connect[0] && !d->cfg.connect_server_key[0] &&
	    !swp_endpoint_local(d->cfg.connect))
		log_warn("connecting beyond loopback to %s without CURVE (insecure_off_loopback): "
		    "anyone on the way may read or forge runs", d->cfg.connect);
	d->sub = zmq_socket(d->zctx, ZMQ_SUB);
	int64_t maxmsg = ((int64_t)d->cfg.max_message_mb << 20) > SWP_HEADER_MAX ?
	    (int64_t)d->cfg.max_message_mb << 20 : SWP_HEADER_MAX;
	/* ZeroMQ's own queue is outside the budget: keep it short */
	int hwm = 8, zero = 0;
	if (!d->sub || zmq_setsockopt(d->sub, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(d->sub, ZMQ_RCVHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(d->sub, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    (d->auth && !d->cfg.connect[0] && (swn_curve_server(d->sub, secret, SWD_AUTH_DOMAIN_DATA) ||
	    swd_auth_watch(d->auth, d->sub, SWD_AUTH_DOMAIN_DATA))) ||
	    (d->auth && d->cfg.connect[0] && swd_auth_watch(d->auth, d->sub, SWD_AUTH_DOMAIN_UPSTREAM))) {
		snprintf(err, errlen, "SUB socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (d->cfg.connect[0] && curve_client(d, d->sub, err, errlen) != 0)
		return -1;
	/* PROTOCOL.md 1: a topic is "sw/" + run id, so "sw/" + a prefix takes
	 * the runs whose id starts with it; no prefix: every run */
	const char *p = d->cfg.subscribe;
	do {
		char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX + 1];
		int n = (int)strcspn(p, "\n");
		int tl = snprintf(topic, sizeof(topic), "%s%.*s", SWP_TOPIC_PREFIX, n, p);
		if (zmq_setsockopt(d->sub, ZMQ_SUBSCRIBE, topic, (size_t)tl)) {
			snprintf(err, errlen, "SUB socket: subscribing to %s: %s", topic,
			    zmq_strerror(errno));
			return -1;
		}
		p += n + (p[n] == '\n');
	} while (*p);
	if (d->cfg.connect[0]) {
		/* behind a forwarder (sinkwatch forward): it binds, we connect */
		if (zmq_connect(d->sub, d->cfg.connect) != 0) {
			snprintf(err, errlen, "cannot connect to %s: %s", d->cfg.connect,
			    zmq_strerror(errno));
			return -1;
		}
	} else if (zmq_bind(d->sub, swp_bind_endpoint(d->cfg.listen, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", d->cfg.listen, zmq_strerror(errno));
		return -1;
	}
	d->ctl = zmq_socket(d->zctx, ZMQ_REP);
	int64_t ctlmax = 4096;
	if (!d->ctl || zmq_setsockopt(d->ctl, ZMQ_MAXMSGSIZE, &ctlmax, sizeof(ctlmax)) ||
	    zmq_setsockopt(d->ctl, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    (d->auth && (swn_curve_server(d->ctl, secret, SWD_AUTH_DOMAIN_CONTROL) ||
	    swd_auth_watch(d->auth, d->ctl, SWD_AUTH_DOMAIN_CONTROL)))) {
		snprintf(err, errlen, "control socket: %s", zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(d->ctl, swp_bind_endpoint(d->cfg.control, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "cannot bind the control endpoint %s: %s", d->cfg.control,
		    zmq_strerror(errno));
		return -1;
	}
	memset(secret, 0, sizeof(secret));	/* the sockets keep their own copy */
	return 0;
}



/*
 * The options that answer at once: --help, --version (an exit status), or
 * -1 to go on, with --check-config and --print-config noted.
 */
static int
early_options(int argc, char **argv, int *check, int *print)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--config")) {
			i++;
		} else if (!strcmp(a, "--check-config")) {
			*check = 1;
		} else if (!strcmp(a, "--print-config")) {
			*print = 1;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("sinkwatchd %s (protocol %d, metric contract %d, kernels %s, logs %s)\n",
			    PACKAGE_VERSION, SWP_VERSION, SWM_CONTRACT_VERSION, swm_isa(), swm_precision());
			return 0;
		}
	}
	return -1;
}

/* The configuration read and checked (printed if asked): an exit status, or -1 to go on. */
static int
configure(swd_daemon *d, int argc, char **argv, int check, int print)
{
	char err[1024];
	if (swd_read_config(argc, argv, &d->cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "sinkwatchd: %s\n", err);
		return 2;
	}
	d->argc = argc;
	d->argv = argv;
	struct sockaddr_storage msa;
	if (swd_config_check(&d->cfg, err, sizeof(err)) != 0 || (d->cfg.metrics_listen[0] &&
	    swd_prom_addr(d->cfg.metrics_listen, &msa, sizeof(msa), err, sizeof(err)) != 0)) {
		fprintf(stderr, "sinkwatchd: %s\n", err);
		return 2;
	}
	/* before any kernel runs: the workers and the run files' kernel_isa see it */
	if (strcmp(d->cfg.isa, "auto") != 0 && swm_set_isa(d->cfg.isa) != 0) {
		fprintf(stderr, "sinkwatchd: isa %s: this CPU lacks it (auto picks %s)\n",
		    d->cfg.isa, swm_isa());
		return 2;
	}
	if (print)
		swd_config_print(&d->cfg, stdout);
	if (check) {
		if (!print)
			printf("sinkwatchd: configuration OK\n");
		return 0;
	}
	if (print)
		return 0;
	d->work = (swd_work_conf){ .pair_metrics = d->cfg.pair_metrics,
	    .cross_layer_pairs = d->cfg.cross_layer_pairs, .pair_rows = d->cfg.pair_rows,
	    .drift_rows = d->cfg.drift_rows };
	return -1;
}

/* The log opened, the data directory made and locked; 0, or -1 (said). */
static int
open_data_dir(const swd_config *c)
{
	log_set_level(c->log_level);
	if (c->log_file[0] && log_open(c->log_file) != 0) {
		fprintf(stderr, "sinkwatchd: cannot open the log %s: %s\n", c->log_file,
		    strerror(errno));
		return -1;
	}
	if (mkdirs(c->data_dir) != 0) {
		log_err("cannot create the data directory %s: %s", c->data_dir, strerror(errno));
		return -1;
	}
	/*
	 * Daemons share a data directory: each holds a shared flock on its lock
	 * file for as long as it runs (sinkwatch check clears nothing while
	 * one does), and each run is written by one process at most, under
	 * the run's own lock (storage/runlock.c). What a crash left of file
	 * creations is removed only by a daemon that is alone there (an
	 * exclusive flock for the moment): another's may be in progress.
	 */
	char lerr[1200];
	int lockfd = sw_dirlock_open(c->data_dir, 1, lerr, sizeof(lerr));
	if (lockfd < 0) {
		log_err("%s", lerr);
		return -1;
	}
	int alone = sw_dirlock_exclusive(lockfd, c->data_dir, lerr, sizeof(lerr)) == 0;
	if (alone) {
		int stale = sw_runfile_clean_tmp(c->data_dir);
		if (stale > 0)
			log_info("removed %d unfinished file creation(s) a crash left in %s",
			    stale, c->data_dir);
	}
	if (sw_dirlock_shared(lockfd, c->data_dir, lerr, sizeof(lerr)) != 0) {
		log_err("%s", lerr);
		return -1;
	}
	if (!alone)
		log_info("another sinkwatchd writes to %s too: each run is written by the one "
		    "that takes its lock first", c->data_dir);
	return 0;
}

/* The process: its heap, its pool's threads, SIGPIPE, umask. */
static void
tune_process(const swd_config *c)
{
	/*
	 * Message buffers (ZeroMQ mallocs each frame) are large and short-lived:
	 * served from the heap and kept there up to the budget, rather than
	 * mmapped and unmapped per message, which costs a page fault per 4 KiB
	 * of every frame received. The budget still bounds what is in flight.
	 * One arena: ZeroMQ's I/O thread allocates the frames and the workers
	 * free them, and a per-thread arena unmaps a heap of its own whenever
	 * that heap empties (glibc's heap_trim), faulting it in again for the
	 * next frames: 10000 faults per 289-message flood at steady state with
	 * per-thread arenas, 0 with one (16 us a fault on the bench's VM; the
	 * daemon's CPU per message 6.4 -> 5.2 ms). The allocation rate is a
	 * few calls per message, so the shared arena lock costs nothing.
	 */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, (int)(c->budget_mb < 1024 ? c->budget_mb << 20 : 1 << 30));
	char nthreads[16];
	snprintf(nthreads, sizeof(nthreads), "%lld", (long long)c->workers);
	setenv("UV_THREADPOOL_SIZE", nthreads, 1);
	signal(SIGPIPE, SIG_IGN);
	umask((mode_t)c->umask);
}

/* The loop and all it runs: sockets, writer, assembly, endpoints; 0, or -1 (logged). */
static int
start(swd_daemon *d)
{
	char err[1024];
	d->loop = uv_default_loop();
	d->loop->data = d;
	uv_loop_configure(d->loop, UV_METRICS_IDLE_TIME);
	d->started = swd_wall_now();
	atomic_init(&d->inflight, 0);
	if (setup_sockets(d, err, sizeof(err)) != 0) {
		log_err("%s", err);
		return -1;
	}
	if (swd_writer_start(&d->writer, &d->cfg, &d->inflight) != 0) {
		log_err("cannot start the writer thread");
		return -1;
	}
	if (!(d->sb = calloc(1, sizeof(*d->sb)))) {
		log_err("out of memory");
		return -1;
	}
	if (swd_ingest_asm(d) != 0 || swd_prom_open(d) != 0)
		return -1;
	if (swd_ingest_watch(d) != 0 || swd_control_watch(d) != 0) {
		log_err("cannot watch the ZeroMQ sockets");
		return -1;
	}
	swd_service_start(d);
	log_info("%s %s, control on %s, data in %s (budget %lld MiB, flush %lld ms)",
	    d->cfg.connect[0] ? "connected to" : "listening on",
	    d->cfg.connect[0] ? d->cfg.connect : d->cfg.listen, d->cfg.control, d->cfg.data_dir,
	    (long long)d->cfg.budget_mb, (long long)d->cfg.flush_ms);
	swd_notify_ready(d);
	return 0;
}

int
main(int argc, char **argv)
{
	/*
	 * The daemon's state: named here only, passed to all that uses it
	 * (sinkwatchd.h). Static storage: what it holds stays reachable at
	 * an early exit (the leak checker's view is the same as before).
	 */
	static swd_daemon state;
	swd_daemon *d = &state;
	int check = 0, print = 0, rc;

	if ((rc = early_options(argc, argv, &check, &print)) >= 0 ||
	    (rc = configure(d, argc, argv, check, print)) >= 0)
		return rc;
	if (open_data_dir(&d->cfg) != 0)
		return 2;
	tune_process(&d->cfg);
	if (start(d) != 0)
		return 2;
	/* the first messages may already be queued: look before waiting */
	swd_drain(d);
	uv_run(d->loop, UV_RUN_DEFAULT);
	uv_loop_close(d->loop);
	zmq_ctx_term(d->zctx);
	swd_auth_join(&d->auth);	/* its thread ended at the context's end */
	free(d->sb);
	d->sb = NULL;
	return 0;
}
