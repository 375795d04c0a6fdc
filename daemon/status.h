/*
 * status.h: the control protocol of sinkwatchd and the rendering of its
 * status, apart from the socket code so both are tested on their own.
 */
#ifndef SWD_STATUS_H
#define SWD_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/swm.h"
#include "proto/swproto.h"

/* Why a message that decoded was not stored: daemon/drops.def. */
enum {
#define SWD_DROP(id, name) SWD_DROP_##id,
#include "daemon/drops.def"
	SWD_DROP__N
};
#define SWD_DROP_REASONS SWD_DROP__N
/* Names of message drops that are not decode errors. */
extern const char *const swd_drop_names[SWD_DROP_REASONS];

#define SWD_DECODE_ERRORS SWP_ERRORS_N	/* proto/errors.def, indexed by -swp_err */

/*
 * The stages the daemon's CPU time is counted by (the status cpu section,
 * sinkwatch_stage_cpu_seconds_total): each thread's CPU clock
 * (CLOCK_THREAD_CPUTIME_ID) read around the stage, summed; pairs is the
 * share of a job's CPU time that its pair spans take of the job's time on
 * the monotonic clock (work.c swd_work_run). Name, where.
 */
#define SWD_STAGES(X) \
	X(RECEIVE, receive, "the event loop taking frames off the SUB socket (zmq_msg_recv)") \
	X(ZMQ_IO, zmq_io, "ZeroMQ's own threads (I/O, reaper): reading the sockets into frames") \
	X(DECODE, decode, "the event loop decoding and validating messages (swp_decode)") \
	X(ASSEMBLE, assemble, "the rest of the event loop: admission, budget, step assembly, " \
	    "control, timers") \
	X(ROWS, rows, "worker threads: a layer's metric work but its pairs (swm_block_add: " \
	    "row statistics, one read of the data), with its allocations") \
	X(PAIRS, pairs, "worker threads: the pair and drift rows' preparation and the " \
	    "head-pair sums (swm_block_add's pair_ns: their share of the job's time)") \
	X(DRIFT, drift, "the writer: drift distances between consecutive fixed-probe steps") \
	X(WRITE, write, "the rest of the writer: pair matrices, splits, HDF5 appends and flushes")
enum {
#define SWD_STAGE_ENUM(id, name, help) SWD_STAGE_##id,
	SWD_STAGES(SWD_STAGE_ENUM)
#undef SWD_STAGE_ENUM
	SWD_STAGES_N
};
extern const char *const swd_stage_names[SWD_STAGES_N];
extern const char *const swd_stage_help[SWD_STAGES_N];

typedef struct swd_status_run {
	const char *run, *model, *split_form;
	uint32_t layers, heads;
	int64_t steps_written, last_step, open_steps, lost, incomplete, messages;
	const char *last_gap;	/* NULL or "": none; else the last missing heads by rank */
	const char *state;	/* finished runs: "ended" or "closed" (idle, not ended) */
} swd_status_run;

/* The types of daemon/sender_counters.def. */
#define SWD_CT_S64 int64_t
#define SWD_CT_U64 uint64_t
#define SWD_CT_INT int
#define SWD_DROP_NONE (-1)	/* sender_counters.def: a counter of its own */

/*
 * One sender of a run (PROTOCOL.md 7b), for the senders section: its
 * counters are daemon/sender_counters.def, in that order.
 */
typedef struct swd_status_sender {
	const char *run;
	uint64_t inc;
	uint32_t rank, senders;
#define SWD_SENDER_COUNTER(name, type, where, drop) SWD_CT_##type name;
#include "daemon/sender_counters.def"
	int64_t drop[SWD_DROP_REASONS];	/* those above under their own names too */
} swd_status_sender;

/* A run id refused lately: no room in the run table, or past the rate. */
typedef struct swd_status_refused {
	const char *run;
	int64_t too_many_runs, run_rate, run_state;
} swd_status_refused;

/* A plain snapshot of the daemon's figures. */
typedef struct swd_status {
	const char *version, *listen, *control, *data_dir;
	const char *connect, *subscribe;	/* NULL or "": none; subscribe '\n'-separated */
	const char *kernel_isa, *log_precision;	/* swm_isa(), swm_precision() */
	double uptime_s;
	long pid;
	size_t nruns;
	const swd_status_run *runs;
	size_t nsenders;
	const swd_status_sender *senders;
	size_t nrefused;
	const swd_status_refused *refused;	/* the latest first */
	int64_t refused_total;	/* run ids refused since the start (the list keeps 64) */
	/* runs ended or closed lately, the latest first, with their senders'
	 * last counters: what a sender reads after its run is gone */
	size_t nfinished;
	const swd_status_run *finished;
	size_t nfinished_senders;
	const swd_status_sender *finished_senders;
	int64_t max_runs, new_runs_per_s, new_runs_burst;
	int curve;			/* CURVE on both sockets */
	const char *curve_public;	/* the daemon's public key, CURVE on */
	int64_t auth_keys, auth_allowed, auth_refused_data, auth_refused_control;
	int64_t auth_failed_data, auth_failed_control;	/* handshakes failed before ZAP */
	const char *upstream;	/* the forwarder the SUB connects to, or NULL (it binds) */
	int upstream_curve;	/* 1: the hop to it is CURVE */
	int64_t upstream_refused, upstream_failed;	/* its handshakes with us that failed */
	int64_t messages, bytes, rows, steps_complete, steps_incomplete;
	int64_t parts_kept, parts_copied;	/* several senders' parts (swd_asm_stats) */
	double rows_per_s, msgs_per_s;	/* over the last 10 s */
	int64_t drops[SWD_DROP_REASONS];
	int64_t decode_errors[SWD_DECODE_ERRORS];
	int64_t rejects[SWM_STATUS__N];
	int64_t inflight_bytes, budget_bytes, jobs_in_flight, writer_queue;
	int64_t steps_written, write_errors, flushes, files_open, max_flush_us;
	int64_t bytes_written;	/* how much the run files grew, over flushes */
	int64_t runs_live, senders_live;	/* all of them (runs, senders: those listed) */
	int64_t loop_turns, drain_rounds, max_batch, batch_limit_hits;
	double loop_idle_s;
	double stage_cpu_s[SWD_STAGES_N];	/* CPU seconds by stage (SWD_STAGES) */
	double process_cpu_s;	/* the whole process (user + system), for comparison */
} swd_status;

/*
 * Answers one control request (a command line: "status", "status SECTION",
 * "ping", "help") into out. Sections: server, auth, runs, senders, refused, finished,
 * traffic, drops, rejects, queue, writer, loop, cpu. A list longer than the
 * one given (runs_live > nruns, senders_live > nsenders) says so: lines
 * runs_total and runs_not_shown, senders_total and senders_not_shown.
 * Returns the reply length, always NUL-terminated and under outlen; a
 * reply that does not fit keeps its whole lines and ends with a line
 * "cut: this reply needs a buffer of N bytes, it had M" (as much of it as
 * fits), never cut silently.
 */
size_t swd_control_reply(const char *req, size_t reqlen, const swd_status *st,
    char *out, size_t outlen);

/*
 * The same reply, whole, in a buffer it allocates (the caller frees it);
 * *len is its length. NULL when out of memory at the start; short of memory
 * later, the reply is cut as above.
 */
char *swd_control_reply_alloc(const char *req, size_t reqlen, const swd_status *st,
    size_t *len);

/*
 * The figures of st in Prometheus' text exposition format (version 0.0.4):
 * HELP and TYPE lines, counters ending in _total, drops by reason as a
 * label; no label whose values grow with the runs. Returns the length
 * written, NUL-terminated; text that does not fit keeps its whole lines and
 * ends with a comment line "# cut: ..." saying so.
 */
size_t swd_metrics_text(const swd_status *st, char *out, size_t outlen);

#endif
