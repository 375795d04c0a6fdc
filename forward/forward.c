/*
 * forward.c: `sinkwatch forward`, the forwarder between training jobs and
 * several daemons (doc/DEPLOYMENT.md). XSUB bound where the jobs publish,
 * XPUB bound where the daemons subscribe (sinkwatchd --connect); the
 * daemons' subscriptions travel up to the jobs, so a job sends only what
 * some daemon takes, and each daemon gets the runs of its prefixes.
 *
 * Unlike zmq_proxy, which drops silently at the high-water mark, nothing
 * is lost without a count: the XPUB has ZMQ_XPUB_NODROP, so a send to a
 * daemon at its HWM fails with EAGAIN; the message is then held (and no
 * more are read, which pushes back to the jobs, whose own sends then fail
 * and are counted there) and sent again for up to --hwm-wait-ms, then
 * dropped and counted (hwm). A message over the daemon's size cap, or not
 * of 2 or 3 frames, is dropped and counted; a message is forwarded whole
 * or not at all (its frames are all read before the first is sent).
 * Its control socket answers `sinkwatch status --control ENDPOINT`.
 *
 * CURVE (--curve-secret-file): all three sockets are CURVE servers with
 * the forwarder's key; a ZAP handler (net/auth.c, as sinkwatchd's)
 * allows on --in and --control the keys of --curve-allow (the jobs, the
 * operators), and on --out those of --curve-allow-daemons: a job's key
 * cannot subscribe and read other jobs' runs. SIGHUP reads both again.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "config.h"
#include "net/swctl.h"
#include "net/auth.h"
#include "net/log.h"
#include "net/swnet.h"
#include "proto/swkeys.h"
#include "proto/swproto.h"
#include "tools/analyze.h"
#include "forward/fwdcore.h"
#include "tools/tools.h"

#define FWD_DEFAULT_IN "tcp://127.0.0.1:5710"
#define FWD_DEFAULT_OUT "tcp://127.0.0.1:5720"
#define FWD_DEFAULT_CONTROL "tcp://127.0.0.1:5721"
#define MAX_FRAMES 3
#define BATCH 256	/* messages read per turn, between control requests */

static volatile sig_atomic_t stop_sig, hup_sig;

static void
on_signal(int sig)
{
	if (sig == SIGHUP)
		hup_sig = 1;
	else
		stop_sig = sig;
}

static int64_t
mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define USAGE "usage: sinkwatch forward [--in ENDPOINT] [--out ENDPOINT] [--control ENDPOINT]\n" \
	"                         [--max-message-mb N] [--hwm N] [--hwm-wait-ms MS]\n" \
	"                         [--curve-secret-file FILE --curve-allow FILE\n" \
	"                          --curve-allow-daemons FILE] [--insecure-off-loopback 1]\n"

static void
usage(FILE *f)
{
	fprintf(f, USAGE "\n"
	    "  --in ENDPOINT        bound XSUB where training jobs publish (default %s)\n"
	    "  --out ENDPOINT       bound XPUB where daemons connect, sinkwatchd --connect (default %s)\n"
	    "  --control ENDPOINT   status socket, for sinkwatch status --control (default %s)\n"
	    "  --max-message-mb N   largest frame forwarded, in MiB, as sinkwatchd's (default 256)\n"
	    "  --hwm N              messages queued per daemon, and from the jobs (default 1000)\n"
	    "  --hwm-wait-ms MS     how long a message waits for a daemon at its HWM before it is\n"
	    "                       dropped and counted; -1: for ever (default 1000)\n"
	    "  --curve-secret-file FILE   the forwarder's CURVE secret key (sinkwatch keygen):\n"
	    "                       CURVE on all three sockets; jobs and daemons use its public key\n"
	    "  --curve-allow FILE   public keys of the jobs that may publish on --in, and of\n"
	    "                       the operators' status on --control, one a line\n"
	    "  --curve-allow-daemons FILE  public keys of the daemons that may subscribe on\n"
	    "                       --out (sinkwatchd --connect-server-key); SIGHUP reads both again\n"
	    "  --insecure-off-loopback 1   bind beyond loopback without CURVE (anyone reaching\n"
	    "                       a port may publish, or subscribe and read every run)\n",
	    FWD_DEFAULT_IN, FWD_DEFAULT_OUT, FWD_DEFAULT_CONTROL);
}

struct fwd {
	void *ctx, *xsub, *xpub, *ctl, *mon;
	swd_auth *auth;		/* the ZAP handler, CURVE on; else NULL */
	const char *secret_file, *allow, *allow_daemons;
	char public_key[SWP_KEY_LEN + 1];
	sw_fwd_stats st;
	sw_fwd_subs *subs;
	size_t cap;
	zmq_msg_t held[MAX_FRAMES];
	size_t held_n, held_bytes;
	int64_t held_since;
	int64_t ring_msgs[11], ring_bytes[11], last_sample;
	int ring_pos, ring_fill;
	int64_t started;
	int64_t failed_in;	/* handshakes on --in that failed before ZAP (CURVE on) */
};

static void
drop_held(struct fwd *F, int reason)
{
	F->st.dropped[reason]++;
	F->st.dropped_bytes += (int64_t)F->held_bytes;
	if (F->st.held)
		F->st.stalled_ms += mono_ms() - F->held_since;
	for (size_t i = 0; i < F->held_n; i++)
		zmq_msg_close(&F->held[i]);
	F->held_n = 0;
	F->st.held = 0;
}

/* Sends the held message: 1 sent (or dropped), 0 still held (EAGAIN). */
static int
send_held(struct fwd *F)
{
	size_t n = F->held_n;
	for (size_t i = 0; i < n; i++) {
		int flags = ZMQ_DONTWAIT | (i + 1 < n ? ZMQ_SNDMORE : 0);
		if (zmq_msg_send(&F->held[i], F->xpub, flags) >= 0)
			continue;
		if (i == 0 && errno == EAGAIN) {
			/* NODROP: a daemon it is for is at its HWM; the HWM is
			 * checked on the first frame only, so nothing went */
			if (F->st.held == 0)
				F->st.stalls++;
			F->st.held = 1;
			return 0;
		}
		/* cannot happen after a first frame went; counted, never silent */
		for (size_t k = 0; k < i; k++)
			zmq_msg_init(&F->held[k]);	/* those were sent (moved out) */
		drop_held(F, SW_FWD_SEND_ERROR);
		return 1;
	}
	F->st.forwarded++;
	F->st.forwarded_bytes += (int64_t)F->held_bytes;
	if (F->st.held)
		F->st.stalled_ms += mono_ms() - F->held_since;
	F->held_n = 0;
	F->st.held = 0;
	return 1;
}

/* Reads one whole message from XSUB into held; 0 if none was ready. */
static int
read_one(struct fwd *F)
{
	size_t sizes[MAX_FRAMES + 1], n = 0, bytes = 0;
	int more = 1;
	while (more) {
		zmq_msg_t f;
		zmq_msg_init(&f);
		if (zmq_msg_recv(&f, F->xsub, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&f);
			if (n == 0)
				return 0;
			break;	/* cannot happen: the parts of a message arrive together */
		}
		more = zmq_msg_more(&f);
		bytes += zmq_msg_size(&f);
		if (n < MAX_FRAMES) {
			sizes[n] = zmq_msg_size(&f);
			zmq_msg_init(&F->held[n]);
			zmq_msg_move(&F->held[n], &f);
		} else {
			sizes[MAX_FRAMES] = zmq_msg_size(&f);	/* only counted */
		}
		n++;
		zmq_msg_close(&f);
	}
	F->held_n = n < MAX_FRAMES ? n : MAX_FRAMES;
	F->held_bytes = bytes;
	F->held_since = mono_ms();
	F->st.received++;
	F->st.received_bytes += (int64_t)bytes;
	int why = sw_fwd_check(sizes, n, F->cap);
	if (why < 0 && !sw_fwd_subs_match(F->subs, zmq_msg_data(&F->held[0]),
	    zmq_msg_size(&F->held[0])))
		why = SW_FWD_NO_SUBSCRIBER;	/* XPUB would drop it without a word */
	if (why >= 0)
		drop_held(F, why);
	else
		send_held(F);
	return 1;
}

/* Subscriptions from the daemons: counted, kept, passed up to the jobs. */
static void
read_subs(struct fwd *F)
{
	for (;;) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, F->xpub, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return;
		}
		if (sw_fwd_subs_apply(F->subs, zmq_msg_data(&m), zmq_msg_size(&m)) >= 0)
			zmq_msg_send(&m, F->xsub, 0);	/* XSUB never blocks a subscription */
		zmq_msg_close(&m);
	}
}

static void
read_monitor(struct fwd *F)
{
	for (;;) {
		zmq_msg_t ev;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, F->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return;
		}
		int more = zmq_msg_more(&ev);
		if (zmq_msg_size(&ev) >= 2) {
			uint16_t id;
			memcpy(&id, zmq_msg_data(&ev), 2);
			if (id == ZMQ_EVENT_DISCONNECTED)
				F->st.disconnects++;
			else if (id & (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
			    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL))
				F->failed_in++;
		}
		zmq_msg_close(&ev);
		while (more) {	/* the endpoint frame */
			zmq_msg_t e;
			zmq_msg_init(&e);
			if (zmq_msg_recv(&e, F->mon, 0) < 0) {
				zmq_msg_close(&e);
				break;
			}
			more = zmq_msg_more(&e);
			zmq_msg_close(&e);
		}
	}
}

static void
sample(struct fwd *F, int64_t now)
{
	if (now - F->last_sample < 1000)
		return;
	F->last_sample = now;
	F->ring_pos = (F->ring_pos + 1) % 11;
	F->ring_msgs[F->ring_pos] = F->st.forwarded;
	F->ring_bytes[F->ring_pos] = F->st.forwarded_bytes;
	if (F->ring_fill < 11)
		F->ring_fill++;
	int span = F->ring_fill - 1 < 10 ? F->ring_fill - 1 : 10;
	if (span > 0) {
		int then = (F->ring_pos - span + 11) % 11;
		F->st.msgs_per_s = (double)(F->ring_msgs[F->ring_pos] - F->ring_msgs[then]) / span;
		F->st.bytes_per_s = (double)(F->ring_bytes[F->ring_pos] - F->ring_bytes[then]) /
		    span;
	}
}

static void
answer(struct fwd *F)
{
	static char out[SW_FWD_REPLY_MAX];	/* every prefix fits */
	for (;;) {
		char req[256];
		int n = swn_control_recv(F->ctl, req, sizeof(req));
		if (n < 0)
			return;
		F->st.uptime_s = (double)(mono_ms() - F->started) / 1000.0;
		if (F->auth) {
			swd_auth_stats a;
			swd_auth_get_stats(F->auth, &a);
			F->st.keys = a.keys;
			F->st.keys_daemons = a.keys_subscribers;
			F->st.allowed = a.allowed;
			F->st.refused_in = a.refused_data;
			F->st.refused_out = a.refused_subscribers;
			F->st.refused_control = a.refused_control;
			F->st.failed_in = F->failed_in;	/* --in has one monitor: ours */
			F->st.failed_out = a.failed_subscribers;
			F->st.failed_control = a.failed_control;
		}
		size_t len = sw_fwd_reply(req, (size_t)n, &F->st, out, sizeof(out));
		zmq_send(F->ctl, out, len, 0);
	}
}

static int
setup(struct fwd *F, long hwm, char *err, size_t errlen)
{
	int one = 1, zero = 0, h = (int)hwm;
	/* a frame up to twice the cap is read, then counted (too_large);
	 * past that ZeroMQ disconnects the sender before allocating it */
	int64_t maxmsg = (int64_t)F->cap * 2;
	if (!(F->ctx = zmq_ctx_new()) || !(F->xsub = zmq_socket(F->ctx, ZMQ_XSUB)) ||
	    !(F->xpub = zmq_socket(F->ctx, ZMQ_XPUB)) || !(F->ctl = zmq_socket(F->ctx, ZMQ_REP)) ||
	    !(F->mon = zmq_socket(F->ctx, ZMQ_PAIR))) {
		snprintf(err, errlen, "ZeroMQ: %s", zmq_strerror(errno));
		return -1;
	}
	int64_t ctlmax = 4096;
	if (zmq_setsockopt(F->xsub, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(F->xsub, ZMQ_RCVHWM, &h, sizeof(h)) ||
	    zmq_setsockopt(F->xsub, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_setsockopt(F->xpub, ZMQ_SNDHWM, &h, sizeof(h)) ||
	    zmq_setsockopt(F->xpub, ZMQ_XPUB_NODROP, &one, sizeof(one)) ||
	    zmq_setsockopt(F->xpub, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_setsockopt(F->ctl, ZMQ_MAXMSGSIZE, &ctlmax, sizeof(ctlmax)) ||
	    zmq_setsockopt(F->ctl, ZMQ_LINGER, &zero, sizeof(zero)) ||
	    zmq_setsockopt(F->mon, ZMQ_LINGER, &zero, sizeof(zero))) {
		snprintf(err, errlen, "socket options: %s", zmq_strerror(errno));
		return -1;
	}
	if (F->secret_file) {
		char secret[SWP_KEY_LEN + 1];
		if (swn_curve_server_keys("--curve-secret-file", F->secret_file, secret,
		    F->public_key, err, errlen) != 0)
			return -1;
		if (swd_auth_start(&F->auth, F->ctx, F->allow, F->allow_daemons, err, errlen) != 0)
			return -1;
		void *socks[3] = { F->xsub, F->xpub, F->ctl };
		const char *dom[3] = { SWD_AUTH_DOMAIN_DATA, SWD_AUTH_DOMAIN_SUBSCRIBERS,
		    SWD_AUTH_DOMAIN_CONTROL };
		/* a socket has one monitor: --in's is the forwarder's own (below),
		 * which counts its failed handshakes too */
		for (int i = 0; i < 3; i++)
			if (swn_curve_server(socks[i], secret, dom[i]) != 0 ||
			    (i > 0 && swd_auth_watch(F->auth, socks[i], dom[i]) != 0)) {
				memset(secret, 0, sizeof(secret));
				snprintf(err, errlen, "CURVE on the %s socket: %s", dom[i],
				    zmq_strerror(zmq_errno()));
				return -1;
			}
		memset(secret, 0, sizeof(secret));
		F->st.curve = 1;
		F->st.curve_public = F->public_key;
	}
	char mep[64], ep[1024];
	snprintf(mep, sizeof(mep), "inproc://sinkwatch-forward-monitor-%ld", (long)getpid());
	if (zmq_socket_monitor(F->xsub, mep, ZMQ_EVENT_DISCONNECTED |
	    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0 ||
	    zmq_connect(F->mon, mep) != 0) {
		snprintf(err, errlen, "socket monitor: %s", zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(F->xsub, swp_bind_endpoint(F->st.in, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "--in: cannot bind %s: %s", F->st.in, zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(F->xpub, swp_bind_endpoint(F->st.out, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "--out: cannot bind %s: %s", F->st.out, zmq_strerror(errno));
		return -1;
	}
	if (zmq_bind(F->ctl, swp_bind_endpoint(F->st.control, ep, sizeof(ep))) != 0) {
		snprintf(err, errlen, "--control: cannot bind %s: %s", F->st.control,
		    zmq_strerror(errno));
		return -1;
	}
	return 0;
}

static void
teardown(struct fwd *F)
{
	for (size_t i = 0; i < F->held_n; i++)
		zmq_msg_close(&F->held[i]);
	void **socks[] = { &F->xsub, &F->xpub, &F->ctl, &F->mon };
	for (size_t i = 0; i < 4; i++)
		if (*socks[i]) {
			zmq_close(*socks[i]);
			*socks[i] = NULL;
		}
	if (F->ctx)
		zmq_ctx_term(F->ctx);
	swd_auth_join(&F->auth);	/* its thread ended at the context's end */
	free(F->subs);
}

/* The options that are not the forwarder's state. */
struct fwd_args {
	long max_mb, hwm, wait_ms, insecure;
	const char *beyond;	/* an endpoint beyond loopback, or NULL */
};

/* Reads the options into F and o and checks them together: -1 to go on,
 * or the exit status. */
static int
forward_args(int argc, char **argv, struct fwd *F, struct fwd_args *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int more = i + 1 < argc;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--in") && more)
			F->st.in = argv[++i];
		else if (!strcmp(a, "--out") && more)
			F->st.out = argv[++i];
		else if (!strcmp(a, "--control") && more)
			F->st.control = argv[++i];
		else if (!strcmp(a, "--max-message-mb") && more) {
			if (sw_parse_long(argv[++i], &o->max_mb) || o->max_mb < 1 || o->max_mb > (1 << 16))
				return sw_tool_fail("forward", "--max-message-mb: '%s' is not an "
				    "integer in [1, 65536]", argv[i]);
		} else if (!strcmp(a, "--hwm") && more) {
			if (sw_parse_long(argv[++i], &o->hwm) || o->hwm < 1 || o->hwm > 1000000)
				return sw_tool_fail("forward", "--hwm: '%s' is not an integer in "
				    "[1, 1000000]", argv[i]);
		} else if (!strcmp(a, "--hwm-wait-ms") && more) {
			if (sw_parse_long(argv[++i], &o->wait_ms) || o->wait_ms < -1 ||
			    o->wait_ms > 86400000)
				return sw_tool_fail("forward", "--hwm-wait-ms: '%s' is not -1 or an "
				    "integer in [0, 86400000]", argv[i]);
		} else if (!strcmp(a, "--curve-secret-file") && more)
			F->secret_file = argv[++i];
		else if (!strcmp(a, "--curve-allow") && more)
			F->allow = argv[++i];
		else if (!strcmp(a, "--curve-allow-daemons") && more)
			F->allow_daemons = argv[++i];
		else if (!strcmp(a, "--insecure-off-loopback") && more) {
			if (sw_parse_long(argv[++i], &o->insecure) || o->insecure < 0 ||
			    o->insecure > 1)
				return sw_tool_fail("forward", "--insecure-off-loopback: '%s' is not 0 "
				    "or 1", argv[i]);
		} else
			return sw_tool_fail("forward", "%s '%s'%s", a[0] == '-' ? "unknown option" :
			    "unexpected argument", a, a[0] == '-' && !more ? " (or its value is missing)" :
			    "");
	}
	if (!strcmp(F->st.in, F->st.out) || !strcmp(F->st.in, F->st.control) ||
	    !strcmp(F->st.out, F->st.control))
		return sw_tool_fail("forward", "--in, --out and --control must be three endpoints "
		    "(%s, %s, %s)", F->st.in, F->st.out, F->st.control);
	if ((F->secret_file || F->allow || F->allow_daemons) &&
	    !(F->secret_file && F->allow && F->allow_daemons))
		return sw_tool_fail("forward", "CURVE takes all three: --curve-secret-file (the "
		    "forwarder's key), --curve-allow (the jobs' keys, for --in and --control) and "
		    "--curve-allow-daemons (the daemons' keys, for --out)");
	/* (an endpoint with no transport is left to the bind's error) */
	const char *eps[3] = { F->st.in, F->st.out, F->st.control };
	for (int i = 2; i >= 0; i--)
		if (strstr(eps[i], "://") && !swp_endpoint_local(eps[i]))
			o->beyond = eps[i];
	if (o->beyond && !F->secret_file && !o->insecure)
		return sw_tool_fail("forward", "%s is beyond loopback and CURVE is off: anyone "
		    "reaching it could publish runs, or subscribe and read them all. Give "
		    "--curve-secret-file, --curve-allow and --curve-allow-daemons (keys from "
		    "sinkwatch keygen), or --insecure-off-loopback 1", o->beyond);
	return -1;
}

/* What the forwarder listens on and how, on stderr. */
static void
announce(struct fwd *F, const char *beyond)
{
	fprintf(stderr, "sinkwatch forward: jobs publish to %s, daemons connect to %s, "
	    "control on %s\n", F->st.in, F->st.out, F->st.control);
	if (F->auth) {
		swd_auth_stats as;
		swd_auth_get_stats(F->auth, &as);
		fprintf(stderr, "sinkwatch forward: CURVE on: public key %s; %lld job key(s) from "
		    "%s, %lld daemon key(s) from %s\n", F->public_key, (long long)as.keys, F->allow,
		    (long long)as.keys_subscribers, F->allow_daemons);
	} else if (beyond) {
		fprintf(stderr, "sinkwatch forward: warning: %s is beyond loopback without CURVE "
		    "(--insecure-off-loopback): anyone reaching it may publish or read runs\n",
		    beyond);
	}
	fflush(stderr);
}

/* Forwards until SIGINT or SIGTERM; SIGHUP reads the keys again. */
static void
forward_loop(struct fwd *F, long wait_ms)
{
	char err[512];

	while (!stop_sig) {
		zmq_pollitem_t it[4] = {
			{ F->xpub, 0, ZMQ_POLLIN, 0 }, { F->ctl, 0, ZMQ_POLLIN, 0 },
			{ F->mon, 0, ZMQ_POLLIN, 0 }, { F->xsub, 0, ZMQ_POLLIN, 0 },
		};
		/* while a message is held nothing more is read: the jobs feel it */
		int held = F->held_n > 0;
		if (zmq_poll(it, held ? 3 : 4, held ? 1 : 200) < 0 && errno != EINTR)
			break;
		int64_t now = mono_ms();
		if (hup_sig) {
			hup_sig = 0;
			if (F->auth && swd_auth_reload(F->auth, F->allow, F->allow_daemons, err,
			    sizeof(err)) != 0)
				fprintf(stderr, "sinkwatch forward: SIGHUP: %s (the old keys stay)\n",
				    err);
			else if (F->auth)
				fprintf(stderr, "sinkwatch forward: SIGHUP: read %s and %s again\n",
				    F->allow, F->allow_daemons);
		}
		if (it[0].revents & ZMQ_POLLIN)
			read_subs(F);
		if (it[1].revents & ZMQ_POLLIN)
			answer(F);
		if (it[2].revents & ZMQ_POLLIN)
			read_monitor(F);
		if (held) {
			if (!send_held(F) && wait_ms >= 0 && mono_ms() - F->held_since > wait_ms)
				drop_held(F, SW_FWD_HWM);
		} else if (it[3].revents & ZMQ_POLLIN) {
			for (int k = 0; k < BATCH && !F->held_n && read_one(F); k++)
				;
		}
		sample(F, now);
	}
}

/* The last line: what was received, forwarded, dropped (a message held at
 * the stop counts as dropped). */
static void
forward_stopped(struct fwd *F)
{
	int64_t dropped = 0;
	for (int i = 0; i < SW_FWD_REASONS; i++)
		dropped += F->st.dropped[i];
	if (F->held_n) {	/* stopped while a daemon was at its HWM */
		drop_held(F, SW_FWD_HWM);
		dropped++;
	}
	fprintf(stderr, "sinkwatch forward: stopped: received %lld, forwarded %lld (%lld bytes), "
	    "dropped %lld\n", (long long)F->st.received, (long long)F->st.forwarded,
	    (long long)F->st.forwarded_bytes, (long long)dropped);
}

int
sw_forward_main(int argc, char **argv)
{
	struct fwd F;
	struct fwd_args o = { 256, 1000, 1000, 0, NULL };
	char err[512];
	int rc;

	memset(&F, 0, sizeof(F));
	F.st.in = FWD_DEFAULT_IN;
	F.st.out = FWD_DEFAULT_OUT;
	F.st.control = FWD_DEFAULT_CONTROL;
	if ((rc = forward_args(argc, argv, &F, &o)) >= 0)
		return rc;
	log_set_ident("sinkwatch forward");
	/* the daemon's per-frame cap: max(max_message_mb, SWP_HEADER_MAX) */
	F.cap = ((size_t)o.max_mb << 20) > SWP_HEADER_MAX ? (size_t)o.max_mb << 20 :
	    SWP_HEADER_MAX;
	F.st.version = PACKAGE_VERSION;
	F.st.pid = (long)getpid();
	F.st.max_frame = (int64_t)F.cap;
	F.st.hwm = o.hwm;
	F.st.hwm_wait_ms = o.wait_ms;
	if (!(F.subs = calloc(1, sizeof(*F.subs))))
		return sw_tool_fail("forward", "out of memory");
	F.st.subs = F.subs;
	if (setup(&F, o.hwm, err, sizeof(err)) != 0) {
		teardown(&F);
		return sw_tool_fail("forward", "%s", err);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	F.started = F.last_sample = mono_ms();
	F.st.started = (int64_t)time(NULL);
	announce(&F, o.beyond);
	forward_loop(&F, o.wait_ms);
	forward_stopped(&F);
	teardown(&F);
	return 0;
}
