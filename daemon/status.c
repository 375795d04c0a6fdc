/* status.c: control requests and status text (see status.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/status.h"
#include "net/swctl.h"

const char *const swd_drop_names[SWD_DROP_REASONS] = {
#define SWD_DROP(id, name) #name,
#include "daemon/drops.def"
};

const char *const swd_stage_names[SWD_STAGES_N] = {
#define SWD_STAGE_NAME(id, name, help) #name,
	SWD_STAGES(SWD_STAGE_NAME)
#undef SWD_STAGE_NAME
};

const char *const swd_stage_help[SWD_STAGES_N] = {
#define SWD_STAGE_HELP(id, name, help) help,
	SWD_STAGES(SWD_STAGE_HELP)
#undef SWD_STAGE_HELP
};

/* CPU seconds by stage, and per message received (ms). */
static void
sec_cpu(swn_buf *b, const swd_status *st)
{
	double sum = 0, per = st->messages > 0 ? 1e3 / (double)st->messages : 0;
	swn_put(b, "# cpu\n");
	for (int i = 0; i < SWD_STAGES_N; i++) {
		sum += st->stage_cpu_s[i];
		swn_put(b, "%s_s: %.6f\n%s_ms_per_message: %.4f\n", swd_stage_names[i],
		    st->stage_cpu_s[i], swd_stage_names[i], st->stage_cpu_s[i] * per);
	}
	swn_put(b, "stages_s: %.6f\nstages_ms_per_message: %.4f\nprocess_s: %.6f\n", sum, sum * per,
	    st->process_cpu_s);
}

/* A run's line (runs, finished), its last gap after it. */
static void
put_run(swn_buf *b, const char *prefix, const swd_status_run *r)
{
	swn_put(b, "%s: %s model=%s layers=%u heads=%u split=%s steps=%lld "
	    "last_step=%lld open_steps=%lld messages=%lld lost=%lld incomplete=%lld%s%s\n",
	    prefix, r->run, r->model[0] ? r->model : "-", r->layers, r->heads, r->split_form,
	    (long long)r->steps_written, (long long)r->last_step,
	    (long long)r->open_steps, (long long)r->messages, (long long)r->lost,
	    (long long)r->incomplete, r->state ? " state=" : "", r->state ? r->state : "");
	if (r->last_gap && r->last_gap[0])
		swn_put(b, "gap: %s %s\n", r->run, r->last_gap);
}

/* Whether drop reason r has a counter of its own on the sender line. */
static int
drop_shown(int r)
{
#define SWD_SENDER_COUNTER(name, type, where, drop) if (SWD_DROP_##drop == r) return 1;
#include "daemon/sender_counters.def"
	return 0;
}

#define SWD_FMT_S64 "%lld"
#define SWD_FMT_U64 "%llu"
#define SWD_FMT_INT "%d"
#define SWD_CAST_S64 (long long)
#define SWD_CAST_U64 (unsigned long long)
#define SWD_CAST_INT (int)

/*
 * A sender's line (senders, finished): its counters (sender_counters.def)
 * and the rest of its account, every other drop reason it has a count of.
 */
static void
put_sender(swn_buf *b, const char *prefix, const swd_status_sender *d)
{
	swn_put(b, "%s: %s inc=%llu rank=%u/%u", prefix, d->run, (unsigned long long)d->inc,
	    d->rank, d->senders);
#define SWD_SENDER_COUNTER(name, type, where, drop) \
	swn_put(b, " " #name "=" SWD_FMT_##type, SWD_CAST_##type d->name);
#include "daemon/sender_counters.def"
	for (int r = 0; r < SWD_DROP_REASONS; r++)
		if (d->drop[r] && !drop_shown(r))
			swn_put(b, " %s=%lld", swd_drop_names[r], (long long)d->drop[r]);
	swn_put(b, "\n");
}

/* Where it listens, what it runs as. */
static void
sec_server(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# server\nversion: %s\npid: %ld\nuptime_s: %.1f\nlisten: %s\n"
	    "control: %s\ndata_dir: %s\n", st->version, st->pid, st->uptime_s,
	    st->listen, st->control, st->data_dir);
	if (st->connect && st->connect[0])
		swn_put(b, "connect: %s\n", st->connect);
	/* one line per prefix, "" for all runs */
	const char *p = st->subscribe ? st->subscribe : "";
	do {
		int n = (int)strcspn(p, "\n");
		swn_put(b, "subscribe: %.*s\n", n, p);
		p += n + (p[n] == '\n');
	} while (*p);
	swn_put(b, "kernel_isa: %s\nlog_precision: %s\n", st->kernel_isa ? st->kernel_isa : "-",
	    st->log_precision ? st->log_precision : "-");
}

/* CURVE: its keys and the handshakes it allowed and refused. */
static void
sec_auth(swn_buf *b, const swd_status *st)
{
	/*
	 * refused_key: a CURVE client whose key is not in the allow list;
	 * handshake_failed: no CURVE, another server key, a bad handshake
	 */
	swn_put(b, "# auth\ncurve: %s\n", st->curve ? "on" : "off");
	if (st->curve)
		swn_put(b, "public_key: %s\nallowed_keys: %lld\nhandshakes_allowed: %lld\n"
		    "refused_key_data: %lld\nrefused_key_control: %lld\n"
		    "handshake_failed_data: %lld\nhandshake_failed_control: %lld\n",
		    st->curve_public, (long long)st->auth_keys, (long long)st->auth_allowed,
		    (long long)st->auth_refused_data, (long long)st->auth_refused_control,
		    (long long)st->auth_failed_data, (long long)st->auth_failed_control);
	/* behind a forwarder: this daemon is the client of the hop */
	if (st->upstream)
		swn_put(b, "upstream: %s\nupstream_curve: %s\nupstream_refused_key: %lld\n"
		    "upstream_handshake_failed: %lld\n", st->upstream,
		    st->upstream_curve ? "on" : "off", (long long)st->upstream_refused,
		    (long long)st->upstream_failed);
}

/* The open runs, a line each. */
static void
sec_runs(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# runs\nruns: %zu\n", st->nruns);
	if (st->runs_live > (int64_t)st->nruns)
		swn_put(b, "runs_total: %lld\nruns_not_shown: %lld\n", (long long)st->runs_live,
		    (long long)(st->runs_live - (int64_t)st->nruns));
	for (size_t i = 0; i < st->nruns; i++)
		put_run(b, "run", &st->runs[i]);
}

/* The senders of the open runs, a line each. */
static void
sec_senders(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# senders\nsenders: %zu\n", st->nsenders);
	if (st->senders_live > (int64_t)st->nsenders)
		swn_put(b, "senders_total: %lld\nsenders_not_shown: %lld\n",
		    (long long)st->senders_live,
		    (long long)(st->senders_live - (int64_t)st->nsenders));
	for (size_t i = 0; i < st->nsenders; i++)
		put_sender(b, "sender", &st->senders[i]);
}

/* Runs gone from the table lately, and their senders' last counts. */
static void
sec_finished(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# finished\nfinished: %zu\n", st->nfinished);
	for (size_t i = 0; i < st->nfinished; i++)
		put_run(b, "finished_run", &st->finished[i]);
	for (size_t i = 0; i < st->nfinished_senders; i++)
		put_sender(b, "finished_sender", &st->finished_senders[i]);
}

/* The run ids refused lately. */
static void
sec_refused(swn_buf *b, const swd_status *st)
{
	/* what a sender refused a run can read: its run is in no table */
	swn_put(b, "# refused\nmax_runs: %lld\nnew_runs_per_s: %lld\nnew_runs_burst: %lld\n"
	    "refused_runs: %zu\nrefused_total: %lld\n", (long long)st->max_runs,
	    (long long)st->new_runs_per_s, (long long)st->new_runs_burst, st->nrefused,
	    (long long)st->refused_total);
	for (size_t i = 0; i < st->nrefused; i++)
		swn_put(b, "refused: %s too_many_runs=%lld run_rate=%lld run_state=%lld\n",
		    st->refused[i].run, (long long)st->refused[i].too_many_runs,
		    (long long)st->refused[i].run_rate, (long long)st->refused[i].run_state);
}

/* What came in. */
static void
sec_traffic(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# traffic\nmessages: %lld\nbytes: %lld\nrows: %lld\n"
	    "rows_per_s: %.1f\nmessages_per_s: %.2f\nsteps_complete: %lld\n"
	    "steps_incomplete: %lld\nparts_kept: %lld\nparts_copied: %lld\n",
	    (long long)st->messages, (long long)st->bytes,
	    (long long)st->rows, st->rows_per_s, st->msgs_per_s,
	    (long long)st->steps_complete, (long long)st->steps_incomplete,
	    (long long)st->parts_kept, (long long)st->parts_copied);
}

/* Messages not stored, by reason: drops.def, then errors.def (bad_*). */
static void
sec_drops(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# drops\n");
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		swn_put(b, "%s: %lld\n", swd_drop_names[i], (long long)st->drops[i]);
	for (int i = 1; i < SWD_DECODE_ERRORS; i++)
		swn_put(b, "bad_%s: %lld\n", swp_errname(-i), (long long)st->decode_errors[i]);
}

/* Rows rejected, by reason. */
static void
sec_rejects(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# rejects\n");
	for (int i = 1; i < SWM_STATUS__N; i++)
		swn_put(b, "%s: %lld\n", swm_status_name((swm_status)i), (long long)st->rejects[i]);
}

/* What is held, against the budget. */
static void
sec_queue(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# queue\ninflight_bytes: %lld\nbudget_bytes: %lld\njobs_in_flight: %lld\n"
	    "writer_queue: %lld\n", (long long)st->inflight_bytes,
	    (long long)st->budget_bytes, (long long)st->jobs_in_flight,
	    (long long)st->writer_queue);
}

/* The writer thread's figures. */
static void
sec_writer(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# writer\nsteps_written: %lld\nwrite_errors: %lld\nflushes: %lld\n"
	    "files_open: %lld\nmax_flush_us: %lld\n", (long long)st->steps_written,
	    (long long)st->write_errors, (long long)st->flushes,
	    (long long)st->files_open, (long long)st->max_flush_us);
}

/* The event loop's figures. */
static void
sec_loop(swn_buf *b, const swd_status *st)
{
	swn_put(b, "# loop\nturns: %lld\ndrain_rounds: %lld\nmax_batch: %lld\n"
	    "batch_limit_hits: %lld\nidle_s: %.3f\n", (long long)st->loop_turns,
	    (long long)st->drain_rounds, (long long)st->max_batch,
	    (long long)st->batch_limit_hits, st->loop_idle_s);
}

/* Each section's name and function, in the order of the reply (sections.def). */
#define SWD_SECTION(name) SWN_SECTION_WRAP(sec_, swd_status, name)
#include "daemon/sections.def"
static const swn_section sections[] = {
#define SWD_SECTION(name) { #name, sec_##name##_any },
#include "daemon/sections.def"
};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

size_t
swd_control_reply(const char *req, size_t reqlen, const swd_status *st, char *out,
    size_t outlen)
{
	swn_control c = { sections, NSECTIONS, st };
	return swn_control_reply(req, reqlen, &c, out, outlen);
}

char *
swd_control_reply_alloc(const char *req, size_t reqlen, const swd_status *st, size_t *len)
{
	swn_control c = { sections, NSECTIONS, st };
	return swn_control_reply_alloc(req, reqlen, &c, len);
}

/* ---- Prometheus --------------------------------------------------------------- */

static void
metric(swn_buf *b, const char *name, const char *type, const char *help)
{
	swn_put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
one(swn_buf *b, const char *name, const char *type, const char *help, double v)
{
	metric(b, name, type, help);
	swn_put(b, "%s %.17g\n", name, v);
}

/* a comment line in the exposition format: the text stays valid */
static const char metrics_cut[] = "# cut: this text needs a buffer of %zu bytes, it had %zu\n";

size_t
swd_metrics_text(const swd_status *st, char *out, size_t outlen)
{
	swn_buf b = { .p = out, .cap = outlen, .cutfmt = metrics_cut };
	if (outlen == 0)
		return 0;
	metric(&b, "sinkwatch_build_info", "gauge", "The daemon's version (always 1).");
	swn_put(&b, "sinkwatch_build_info{version=\"%s\",protocol=\"%d\"} 1\n", st->version,
	    SWP_VERSION);
	one(&b, "sinkwatch_uptime_seconds", "gauge", "Seconds since the daemon started.",
	    st->uptime_s);
	one(&b, "sinkwatch_messages_received_total", "counter",
	    "Messages received, whatever became of them.", (double)st->messages);
	one(&b, "sinkwatch_bytes_received_total", "counter", "Bytes of the messages received.",
	    (double)st->bytes);
	metric(&b, "sinkwatch_messages_dropped_total", "counter",
	    "Messages not stored, by reason (PROTOCOL.md 7a and 8: bad_* failed to decode).");
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		swn_put(&b, "sinkwatch_messages_dropped_total{reason=\"%s\"} %lld\n", swd_drop_names[i],
		    (long long)st->drops[i]);
	for (int i = 1; i < SWD_DECODE_ERRORS; i++)
		swn_put(&b, "sinkwatch_messages_dropped_total{reason=\"bad_%s\"} %lld\n",
		    swp_errname(-i), (long long)st->decode_errors[i]);
	metric(&b, "sinkwatch_stage_cpu_seconds_total", "counter",
	    "CPU seconds of the daemon's threads by stage (sinkwatchd(8), CPU BY STAGE).");
	for (int i = 0; i < SWD_STAGES_N; i++)
		swn_put(&b, "sinkwatch_stage_cpu_seconds_total{stage=\"%s\"} %.9g\n", swd_stage_names[i],
		    st->stage_cpu_s[i]);
	one(&b, "sinkwatch_process_cpu_seconds_total", "counter",
	    "CPU seconds of the whole process, user and system.", st->process_cpu_s);
	one(&b, "sinkwatch_rows_total", "counter", "Attention rows computed.", (double)st->rows);
	metric(&b, "sinkwatch_rows_rejected_total", "counter",
	    "Attention rows rejected, by reason (METRICS.md 6).");
	for (int i = 1; i < SWM_STATUS__N; i++)
		swn_put(&b, "sinkwatch_rows_rejected_total{reason=\"%s\"} %lld\n",
		    swm_status_name((swm_status)i), (long long)st->rejects[i]);
	one(&b, "sinkwatch_steps_complete_total", "counter", "Steps assembled whole.",
	    (double)st->steps_complete);
	one(&b, "sinkwatch_steps_incomplete_total", "counter",
	    "Steps written with layers or heads missing.", (double)st->steps_incomplete);
	metric(&b, "sinkwatch_parts_total", "counter",
	    "Parts of several senders' layers taken, kept as they came or copied.");
	swn_put(&b, "sinkwatch_parts_total{how=\"kept\"} %lld\n", (long long)st->parts_kept);
	swn_put(&b, "sinkwatch_parts_total{how=\"copied\"} %lld\n", (long long)st->parts_copied);
	one(&b, "sinkwatch_steps_written_total", "counter", "Rows appended to run files.",
	    (double)st->steps_written);
	one(&b, "sinkwatch_write_errors_total", "counter", "Run file writes that failed.",
	    (double)st->write_errors);
	one(&b, "sinkwatch_flushes_total", "counter", "Run file flushes.", (double)st->flushes);
	one(&b, "sinkwatch_bytes_written_total", "counter",
	    "Bytes the run files grew by, measured after each flush.", (double)st->bytes_written);
	one(&b, "sinkwatch_flush_seconds_max", "gauge", "The longest flush round so far.",
	    (double)st->max_flush_us * 1e-6);
	one(&b, "sinkwatch_writer_queue_depth", "gauge", "Items waiting for the writer thread.",
	    (double)st->writer_queue);
	one(&b, "sinkwatch_inflight_bytes", "gauge",
	    "Bytes held in flight (messages, gathered parts, results), against the budget.",
	    (double)st->inflight_bytes);
	one(&b, "sinkwatch_budget_bytes", "gauge", "The in-flight memory budget.",
	    (double)st->budget_bytes);
	one(&b, "sinkwatch_jobs_in_flight", "gauge", "Layers being computed.",
	    (double)st->jobs_in_flight);
	one(&b, "sinkwatch_runs_live", "gauge", "Runs open in the daemon.",
	    (double)st->runs_live);
	one(&b, "sinkwatch_senders_live", "gauge", "Senders of the open runs (PROTOCOL.md 7b).",
	    (double)st->senders_live);
	one(&b, "sinkwatch_files_open", "gauge", "Run files the writer holds open.",
	    (double)st->files_open);
	one(&b, "sinkwatch_curve_enabled", "gauge", "1 if CURVE guards both sockets.",
	    (double)st->curve);
	one(&b, "sinkwatch_curve_allowed_keys", "gauge", "Client public keys in the allow list.",
	    (double)st->auth_keys);
	one(&b, "sinkwatch_handshakes_allowed_total", "counter",
	    "CURVE handshakes whose client key was allowed.", (double)st->auth_allowed);
	metric(&b, "sinkwatch_handshakes_refused_total", "counter",
	    "Handshakes refused with CURVE on, by socket and reason (key_not_allowed: the "
	    "client's public key is not in the allow list; handshake_failed: no CURVE, another "
	    "server key, a bad handshake).");
	const char *sock[2] = { "data", "control" };
	int64_t refused[2] = { st->auth_refused_data, st->auth_refused_control };
	int64_t failed[2] = { st->auth_failed_data, st->auth_failed_control };
	for (int i = 0; i < 2; i++)
		swn_put(&b, "sinkwatch_handshakes_refused_total{socket=\"%s\",reason=\"key_not_allowed\"} "
		    "%lld\nsinkwatch_handshakes_refused_total{socket=\"%s\","
		    "reason=\"handshake_failed\"} %lld\n", sock[i], (long long)refused[i], sock[i],
		    (long long)failed[i]);
	metric(&b, "sinkwatch_upstream_handshakes_failed_total", "counter",
	    "Handshakes of this daemon's SUB with the forwarder it connects to that failed, by "
	    "reason (key_not_allowed: the forwarder refused this daemon's key; "
	    "handshake_failed: another server key, no CURVE there); 0 when it binds.");
	swn_put(&b, "sinkwatch_upstream_handshakes_failed_total{reason=\"key_not_allowed\"} %lld\n"
	    "sinkwatch_upstream_handshakes_failed_total{reason=\"handshake_failed\"} %lld\n",
	    (long long)st->upstream_refused, (long long)st->upstream_failed);
	return swn_finish(&b);
}
