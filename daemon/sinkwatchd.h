/*
 * sinkwatchd.h: the daemon's state and the functions between its files
 * (internal to sinkwatchd):
 *
 *   sinkwatchd.c  start-up: options, configuration, the data directory and
 *                 its lock, the sockets (CURVE through net/), the loop
 *   ingest.c      receiving: frames, decoding, admission into the assembly,
 *                 a layer's metric work launched and completed
 *   work.c        the metric work itself, on the pool threads
 *   control.c     the control socket, the status, the /metrics text
 *   service.c     signals, sd_notify, SIGHUP, the tick (idle closes), shutdown
 *
 * The state is explicit: one swd_daemon, made by main, reached by the loop's
 * callbacks through their handle's data (and uv_loop_t.data); it is the loop
 * thread's alone. A pool thread sees only its swd_job, and through it the
 * swd_work_conf, fixed at start-up. The writer thread has its own copy of
 * the configuration (swd_writer_start).
 */
#ifndef SWD_SINKWATCHD_H
#define SWD_SINKWATCHD_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>
#include <zmq.h>

#include "daemon/assembly.h"
#include "daemon/conf.h"
#include "daemon/daemon.h"
#include "daemon/prom.h"
#include "daemon/status.h"
#include "net/auth.h"
#include "proto/swkeys.h"

#define SWD_MAX_FRAMES 4
#define SWD_STATUS_RUNS 256	/* runs in a status reply */
#define SWD_STATUS_SENDERS 1024	/* senders in a status reply */

/* What a metric worker reads of the configuration: fixed at start-up. */
typedef struct swd_work_conf {
	int64_t pair_metrics, cross_layer_pairs, pair_rows, drift_rows;
} swd_work_conf;

/*
 * A part of a layer (several senders) is kept as it came, not copied, when
 * its heads are whole and its tensor holds at least this many bytes. A
 * frame that fits in ZeroMQ's receive batch may share that buffer with
 * other messages, and keeping it would pin the whole buffer; a larger one
 * has its own. The batch is 8 KiB: ZMQ_IN_BATCH_SIZE, which would change
 * it, is a draft option that Debian's libzmq does not build.
 */
#define SWD_HOLD_MIN (16 * 1024)
/* What a kept frame holds beyond its tensor (the frame is the tensor): its
 * zmq_msg_t on the heap and ZeroMQ's record of the data, with room. */
#define SWD_HOLD_EXTRA (sizeof(zmq_msg_t) + 128)

/*
 * A layer's metric work: made on the loop thread, the pool thread's alone
 * while it runs (swd_work_run), completed on the loop thread.
 */
typedef struct swd_job {
	uv_work_t req;
	swd_work_conf conf;	/* a copy: the worker reads nothing else of the daemon */
	swd_ticket t;
	int64_t step;
	swp_msg msg;
	zmq_msg_t tensor;
	swd_parts *parts;	/* a gathered layer's data (then tensor is empty) */
	size_t data_bytes;	/* what parts holds, counted in inflight */
	int32_t *miss;		/* [heads] heads to mark missing, or NULL */
	size_t reserved;
	swd_layer *out;
	int64_t rows_counted, rejects[SWM_STATUS__N];
	int64_t kernel_ns;	/* the job's CPU (the kernel stage) */
	int64_t pair_ns;	/* the pair work's share of it (swm_block, swd_work_run) */
} swd_job;

/* The loop's counters: what the status and /metrics report. */
typedef struct swd_counters {
	int64_t messages, bytes, rows, rejects[SWM_STATUS__N];
	int64_t drops[SWD_DROP_REASONS], decode_errors[SWD_DECODE_ERRORS];
	int64_t loop_turns, drain_rounds, max_batch, batch_limit_hits;
	/* CPU by stage (status.h SWD_STAGES): the loop's own, the workers' summed */
	int64_t recv_ns, decode_ns, kernel_ns, pair_ns;
} swd_counters;

/* The rates: one sample a second. */
typedef struct swd_rates {
	int64_t rows[11], msgs[11];
	int pos, fill, every5;
	uint64_t last_sample;
} swd_rates;

/* What a status is filled into (large: on the heap). */
typedef struct swd_status_buf {
	swd_status_run runs[SWD_STATUS_RUNS];
	swd_asm_run ar[SWD_STATUS_RUNS];
	swd_sender sd[SWD_STATUS_SENDERS], fsd[SWD_STATUS_SENDERS];
	const char *sr[SWD_STATUS_SENDERS], *fsr[SWD_STATUS_SENDERS];
	swd_status_sender ss[SWD_STATUS_SENDERS], fss[SWD_STATUS_SENDERS];
	swd_asm_run fa[SWD_ASM_FINISHED_MAX];
	int fe[SWD_ASM_FINISHED_MAX];
	swd_status_run fr[SWD_ASM_FINISHED_MAX];
	swd_asm_refused ra[SWD_ASM_REFUSED_MAX];
	swd_status_refused rs[SWD_ASM_REFUSED_MAX];
	double cpu_last[SWD_STAGES_N];	/* the stages' last reading: never back */
	char small[256];		/* the reply when there is no memory for it */
	char prom_text[16384];
} swd_status_buf;

typedef struct swd_daemon {
	swd_config cfg;		/* SIGHUP changes the options that may change */
	swd_work_conf work;	/* the workers' part of cfg, never changed */
	int argc;		/* the command line, read again at SIGHUP */
	char **argv;
	uv_loop_t *loop;	/* its data: this */
	void *zctx, *sub, *ctl;
	zmq_msg_t *part_frame;	/* the tensor frame being admitted (hold_part), or NULL */
	uv_poll_t sub_poll, ctl_poll;
	uv_idle_t drain_idle;
	uv_timer_t tick, watchdog;
	uv_signal_t sigint, sigterm, sighup;
	uint64_t watchdog_usec;	/* systemd's WATCHDOG_USEC, 0: none */
	swd_prom *prom;		/* GET /metrics, or NULL */
	swd_auth *auth;		/* the ZAP handler (CURVE on), or NULL */
	char curve_public[SWP_KEY_LEN + 1];	/* the daemon's public key, CURVE on */
	int64_t upstream_refused_seen;	/* refusals by the forwarder acted on */
	uint64_t upstream_retry_ms;	/* when the SUB last connected again */
	long long writer_items;	/* the writer's progress at the last ping */
	int stopping, draining_idle;
	swd_asm *as;
	swd_writer *writer;
	atomic_llong inflight;	/* shared with the writer and the assembly */
	int64_t jobs;
	double started;
	swd_counters n;
	swd_rates rate;
	int64_t log_window_ms, log_count;	/* rate-limited logging of bad messages */
	swd_status_buf *sb;
} swd_daemon;

static inline uint64_t
swd_mono_ms(const swd_daemon *d)
{
	return uv_now(d->loop);
}

/* sinkwatchd.c */
/* ingest.c: a ZeroMQ socket's fd watched by the loop */
int swd_poll_fd(swd_daemon *d, void *sock, uv_poll_t *p, uv_poll_cb cb);

/* ingest.c: the assembly made (0, or -1 logged); the SUB socket watched (0, or -1) */
int swd_ingest_asm(swd_daemon *d);
int swd_ingest_watch(swd_daemon *d);
void swd_drain(swd_daemon *d);
int swd_sock_readable(void *sock);

/* work.c */
int64_t swd_thread_ns(void);
void swd_work_run(uv_work_t *req);
size_t swd_result_bytes(const swd_work_conf *c, const swp_msg *m, int fixed);

/* control.c: the control socket watched (0, or -1); /metrics served (0, or -1 logged) */
int swd_control_watch(swd_daemon *d);
int swd_prom_open(swd_daemon *d);
void swd_publish_metrics(swd_daemon *d);

/* service.c */
void swd_service_start(swd_daemon *d);
void swd_notify_ready(swd_daemon *d);

#endif
