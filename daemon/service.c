/*
 * service.c: the daemon as a service (sinkwatchd.h): the tick (steps timed
 * out, idle runs closed, the rates, the forwarder tried again), systemd's
 * notifications and watchdog, SIGHUP's reload, SIGINT/SIGTERM's orderly
 * shutdown. On the loop thread.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "daemon/sinkwatchd.h"
#include "net/log.h"

#ifdef __GNUC__
#define PRINTF_LIKE __attribute__((format(printf, 1, 2)))
#else
#define PRINTF_LIKE
#endif

/* ---- systemd (sd_notify; nothing without NOTIFY_SOCKET) ----------------------- */

PRINTF_LIKE static void
notify(const char *fmt, ...)
{
#ifdef HAVE_SYSTEMD
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sd_notify(0, buf);
#else
	(void)fmt;
#endif
}

/* What systemctl status shows: a line of the daemon's figures. */
static void
notify_status(const swd_daemon *d)
{
	const swd_rates *r = &d->rate;
	long long drops = 0;
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		drops += d->n.drops[i];
	for (int i = 1; i < SWD_DECODE_ERRORS; i++)
		drops += d->n.decode_errors[i];
	int span = r->fill < 10 ? r->fill : 10;
	double mps = 0;
	if (span > 0)
		mps = (double)(r->msgs[r->pos] - r->msgs[(r->pos - span + 11) % 11]) / span;
	notify("STATUS=%lld messages (%.1f/s), %lld not stored, %lld steps written, "
	    "data in %s", (long long)d->n.messages, mps, drops,
	    (long long)atomic_load(&swd_writer_stats(d->writer)->steps_written), d->cfg.data_dir);
}

/*
 * The watchdog ping, from the loop (a stuck loop stops it) and only while
 * the writer moves or has nothing to do: a writer stuck in a write is
 * not well, and systemd restarts the service.
 */
static void
watchdog_cb(uv_timer_t *t)
{
	swd_daemon *d = t->data;
	const swd_wstats *ws = swd_writer_stats(d->writer);
	long long items = atomic_load(&ws->items), depth = atomic_load(&ws->queue_depth);
	if (depth == 0 || items != d->writer_items)
		notify("WATCHDOG=1");
	else
		log_warn("watchdog: the writer made no progress with %lld item(s) queued: "
		    "no ping", depth);
	d->writer_items = items;
}

/*
 * SIGHUP: the configuration is read again (file and flags, as at start);
 * the options that may change while running (--print-config marks them)
 * are applied, a changed log file is opened, the same one reopened (log
 * rotation); any other option that changed is named: it needs a restart.
 */
static void
reload(swd_daemon *d)
{
	char err[1024];
	swd_config c;
	notify("RELOADING=1");
	if (swd_read_config(d->argc, d->argv, &c, err, sizeof(err)) != 0 ||
	    swd_config_check(&c, err, sizeof(err)) != 0) {
		log_err("SIGHUP: the configuration is not valid, nothing changed: %s", err);
		notify("READY=1");
		return;
	}
	for (size_t i = 0; i < swd_config_count(); i++)
		if (!swd_config_runtime(i) && swd_config_differs(&d->cfg, &c, i))
			log_warn("SIGHUP: %s changed in the configuration: it applies at the next "
			    "start, not now", swd_config_name(i));
	if (d->auth) {	/* the allow list is read again, changed or not */
		if (swd_auth_reload(d->auth, c.curve_allow, NULL, err, sizeof(err)) != 0)
			log_err("SIGHUP: the CURVE allow list stays as it was: %s", err);
		else {
			swd_auth_stats as;
			swd_auth_get_stats(d->auth, &as);
			if (as.keys == 0)	/* nobody gets in, sinkwatch status neither */
				log_warn("SIGHUP: %s allows no client key: every sender and every "
				    "control client (sinkwatch status) is refused", c.curve_allow);
			else
				log_info("SIGHUP: %lld client key(s) allowed, from %s",
				    (long long)as.keys, c.curve_allow);
			memcpy(d->cfg.curve_allow, c.curve_allow, sizeof(c.curve_allow));
		}
	}
	if (c.log_level != d->cfg.log_level) {
		log_info("SIGHUP: log_level %s -> %s", log_level_name(d->cfg.log_level),
		    log_level_name(c.log_level));
		log_set_level(c.log_level);
		d->cfg.log_level = c.log_level;
	}
	if (strcmp(c.log_file, d->cfg.log_file) != 0) {
		if (log_open(c.log_file[0] ? c.log_file : NULL) != 0)
			log_err("SIGHUP: cannot open the log %s: %s (the log stays where it was)",
			    c.log_file, strerror(errno));
		else {
			log_info("SIGHUP: logging to %s", c.log_file[0] ? c.log_file : "stderr");
			memcpy(d->cfg.log_file, c.log_file, sizeof(c.log_file));
		}
	} else if (log_reopen() != 0) {
		log_err("SIGHUP: cannot reopen %s: %s", d->cfg.log_file, strerror(errno));
	} else {
		log_info("SIGHUP: configuration read again, log reopened");
	}
	notify("READY=1");
	notify_status(d);
}

/* ---- the tick, shutdown ----------------------------------------------------- */

static void
finish_shutdown(swd_daemon *d)
{
	/* every open step goes out, incomplete ones counted */
	swd_asm_shutdown(d->as);
	swd_writer_stop(&d->writer);
	swd_asm_free(&d->as);
	uv_timer_stop(&d->tick);
	uv_close((uv_handle_t *)&d->tick, NULL);
	swd_prom_stop(&d->prom);
	if (d->watchdog_usec) {
		uv_timer_stop(&d->watchdog);
		uv_close((uv_handle_t *)&d->watchdog, NULL);
	}
	uv_close((uv_handle_t *)&d->drain_idle, NULL);
	uv_close((uv_handle_t *)&d->sigint, NULL);
	uv_close((uv_handle_t *)&d->sigterm, NULL);
	uv_close((uv_handle_t *)&d->sighup, NULL);
	if (d->ctl) {
		uv_poll_stop(&d->ctl_poll);
		uv_close((uv_handle_t *)&d->ctl_poll, NULL);
		zmq_close(d->ctl);
		d->ctl = NULL;
	}
	log_info("stopped");
}

/*
 * A forwarder that refused this daemon's key (ZAP 400) is not tried again
 * by ZeroMQ: the SUB connects again, every UPSTREAM_RETRY_MS while it is
 * refused, so a key allowed later (the forwarder's SIGHUP) gets in.
 */
#define UPSTREAM_RETRY_MS 5000

static void
upstream_retry(swd_daemon *d, uint64_t now)
{
	if (!d->auth || !d->cfg.connect[0] || now - d->upstream_retry_ms < UPSTREAM_RETRY_MS)
		return;
	swd_auth_stats as;
	swd_auth_get_stats(d->auth, &as);
	if (as.refused_upstream == d->upstream_refused_seen)
		return;
	d->upstream_refused_seen = as.refused_upstream;
	d->upstream_retry_ms = now;
	if (zmq_disconnect(d->sub, d->cfg.connect) != 0 && zmq_errno() != ENOENT)
		log_warn("disconnecting from %s: %s", d->cfg.connect, zmq_strerror(zmq_errno()));
	if (zmq_connect(d->sub, d->cfg.connect) != 0)
		log_err("connecting again to %s: %s", d->cfg.connect, zmq_strerror(zmq_errno()));
	else
		log_debug("connecting again to %s after a refusal", d->cfg.connect);
}

/* Once a second: the rates sampled, systemd and /metrics told. */
static void
each_second(swd_daemon *d, uint64_t now)
{
	swd_rates *r = &d->rate;
	r->last_sample = now;
	r->pos = (r->pos + 1) % 11;
	r->rows[r->pos] = d->n.rows;
	r->msgs[r->pos] = d->n.messages;
	if (r->fill < 11)
		r->fill++;
	if (++r->every5 % 5 == 0)
		notify_status(d);
	swd_publish_metrics(d);
	upstream_retry(d, now);
}

static void
tick_cb(uv_timer_t *t)
{
	swd_daemon *d = t->data;
	if (d->stopping) {
		if (d->jobs == 0)
			finish_shutdown(d);
		return;
	}
	uint64_t now = swd_mono_ms(d);
	swd_asm_tick(d->as, now);
	if (now - d->rate.last_sample >= 1000)
		each_second(d, now);
	/* a missed edge on ZMQ_FD would stall receiving: look again */
	swd_drain(d);
}

/* SIGINT, SIGTERM: the jobs in flight finished, then the steps flushed (tick_cb). */
static void
stop(swd_daemon *d, int signum)
{
	notify("STOPPING=1\nSTATUS=stopping: finishing %lld job(s) in flight, then flushing",
	    (long long)d->jobs);
	log_info("%s: stopping: finishing %lld job(s) in flight, then flushing",
	    signum == SIGINT ? "SIGINT" : "SIGTERM", (long long)d->jobs);
	d->stopping = 1;
	if (d->sub) {
		uv_poll_stop(&d->sub_poll);
		uv_close((uv_handle_t *)&d->sub_poll, NULL);
		zmq_close(d->sub);
		d->sub = NULL;
	}
	if (d->draining_idle) {
		uv_idle_stop(&d->drain_idle);
		d->draining_idle = 0;
	}
	/* parts still gathered are computed as they are and written (README) */
	swd_asm_stop(d->as);
	uv_timer_stop(&d->tick);
	uv_timer_start(&d->tick, tick_cb, 0, 10);
}

static void
signal_cb(uv_signal_t *h, int signum)
{
	swd_daemon *d = h->data;
	if (signum == SIGHUP)
		reload(d);
	else if (!d->stopping)
		stop(d, signum);
}

/* The tick and the signals started. */
void
swd_service_start(swd_daemon *d)
{
	uv_timer_init(d->loop, &d->tick);
	d->tick.data = d;
	uv_timer_start(&d->tick, tick_cb, 100, 100);
	uv_signal_init(d->loop, &d->sigint);
	uv_signal_init(d->loop, &d->sigterm);
	uv_signal_init(d->loop, &d->sighup);
	d->sigint.data = d->sigterm.data = d->sighup.data = d;
	uv_signal_start(&d->sigint, signal_cb, SIGINT);
	uv_signal_start(&d->sigterm, signal_cb, SIGTERM);
	uv_signal_start(&d->sighup, signal_cb, SIGHUP);
}

/* systemd's watchdog started, if it asks for one, and told the daemon is ready. */
void
swd_notify_ready(swd_daemon *d)
{
#ifdef HAVE_SYSTEMD
	if (sd_watchdog_enabled(0, &d->watchdog_usec) > 0 && d->watchdog_usec > 0) {
		uint64_t ms = d->watchdog_usec / 2000 ? d->watchdog_usec / 2000 : 1;
		uv_timer_init(d->loop, &d->watchdog);
		d->watchdog.data = d;
		uv_timer_start(&d->watchdog, watchdog_cb, ms, ms);
		log_info("systemd watchdog: a ping every %llu ms", (unsigned long long)ms);
	} else {
		d->watchdog_usec = 0;
	}
#else
	(void)watchdog_cb;
#endif
	notify("READY=1\nSTATUS=%s %s, control on %s, data in %s",
	    d->cfg.connect[0] ? "connected to" : "listening on",
	    d->cfg.connect[0] ? d->cfg.connect : d->cfg.listen,
	    d->cfg.control, d->cfg.data_dir);
}
