/*
 * sinkwatch/client.h: the client library a training job links to stream
 * attention snapshots to sinkwatchd (wire format: proto/PROTOCOL.md).
 *
 * Contract, for every call:
 * - It never stalls the training loop unless the caller asked for blocking
 *   mode: a non-blocking send encodes the header, puts the message in the
 *   handle's queue and returns; it does not enter ZeroMQ. Each handle has a
 *   sender thread of its own that moves queued messages to ZeroMQ while a
 *   daemon is subscribed (within about 16 ms; at once when the queue is
 *   half full).
 * - The queue. Messages sent before the daemon's subscription reaches the
 *   handle (1.5-6 ms after sw_client_new() on loopback, measured) or while
 *   the daemon is away or slow wait in the handle's queue, in order. It
 *   holds queue_max messages (default SW_CLIENT_QUEUE_MAX, 256: ten steps
 *   of a 24-layer model, one message per layer and step, and one step of
 *   any model up to 256 layers) and queue_max_bytes (default
 *   SW_CLIENT_QUEUE_MAX_BYTES, 256 MiB; one larger message alone), whichever
 *   fills first: the bytes are the real bound on memory, the count only
 *   bounds many tiny messages. Past that a send is dropped and counted
 *   (sw_client_get_stats()). So a burst of up to queue_max messages right
 *   after sw_client_new() loses nothing against a daemon that is up, however
 *   late its subscription arrives. ZeroMQ's own queue (ZMQ_SNDHWM) holds up
 *   to min(queue_max, 16) more messages that it has taken over. The
 *   queue's headers take queue_max + 2 (at most 1024) slots of 1.2 KB,
 *   allocated and touched in sw_client_new(), so that a send never faults
 *   in memory while the queue grows.
 * - Blocking mode waits up to block_timeout_ms (default
 *   SW_CLIENT_BLOCK_TIMEOUT_MS, 30 s; -1 set explicitly: for ever) until the
 *   message is handed to ZeroMQ, which needs a subscribed daemon; on the
 *   timeout the message is withdrawn and counted as dropped. (Should
 *   ZeroMQ refuse it for good, out of memory, it is counted as dropped
 *   and released, and the send still returns 0: the buffer was taken.)
 * - Incarnations. Every handle is an incarnation of its run: sw_client_new()
 *   picks a number (the wall clock in microseconds times 4096 plus 12
 *   random bits, never 0; sw_client_incarnation()), or takes
 *   opts.incarnation when it is not 0 (several senders, below). Every
 *   message of the handle carries it (header key "inc", PROTOCOL.md), so
 *   that the daemon tells a restarted job from the one before it: a handle
 *   made later compares greater, two made in the same microsecond differ.
 *   A job that restarts from a checkpoint sets opts.resuming = 1 and
 *   resume_from (the checkpoint's step S): its messages carry "resume" =
 *   S, and the daemon lets them supersede earlier incarnations' steps
 *   after S.
 *   (A wall clock set backwards between two runs defeats the order.)
 * - Several senders (PROTOCOL.md 7b). A job whose processes each hold a
 *   share of the model (pipeline, tensor, context parallel) or a copy of it
 *   (data parallel) may have each of them send, each with its own handle:
 *   opts.senders = N, the number of processes that send, and opts.rank =
 *   this one, 0..N-1 (the sending processes, numbered without gaps; not
 *   necessarily the job's global ranks). All N handles must carry one
 *   incarnation: rank 0 leaves opts.incarnation 0, creates its handle, and
 *   hands sw_client_incarnation() to the others (a broadcast), which set it
 *   as opts.incarnation before creating theirs. Every message then carries
 *   rank and senders, the end message too; each handle numbers its own
 *   messages and ends its own share (sw_client_end() in every process), and
 *   the daemon ends the run when all N have. A process that holds whole
 *   layers sends them with sw_client_send(); one that holds some heads or
 *   some rows of a layer sends its part with sw_client_send_part(). The
 *   parts of a layer must tile it, or repeat each other exactly (copies);
 *   the daemon computes the layer once every cell has arrived.
 * - It installs no signal handler (the sender thread blocks every signal),
 *   prints nothing, never aborts, and keeps no process-wide state: each
 *   handle owns its own ZeroMQ context and thread. The environment it
 *   reads is SINKWATCH_ENDPOINT, SINKWATCH_SERVER_KEY and
 *   SINKWATCH_CLIENT_KEY_FILE, in sw_client_new() only, where opts leaves
 *   endpoint, server_key and key_file NULL (or ""): an endpoint or key
 *   given in opts always wins over the environment.
 * - Errors are negative SW_E* codes; sw_strerror() describes a code and
 *   sw_client_errmsg() the detail of the handle's last error.
 * - A handle is used by one thread at a time.
 */
#ifndef SINKWATCH_CLIENT_H
#define SINKWATCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SW_BUILDING_CLIENT) && defined(__GNUC__)
#define SW_EXPORT __attribute__((visibility("default")))
#else
#define SW_EXPORT
#endif

#define SW_CLIENT_DEFAULT_ENDPOINT "tcp://127.0.0.1:5710"
#define SW_CLIENT_QUEUE_MAX 256			/* default queue_max */
#define SW_CLIENT_QUEUE_MAX_BYTES ((size_t)256 << 20)	/* default queue_max_bytes */
#define SW_CLIENT_BLOCK_TIMEOUT_MS 30000	/* default block_timeout_ms */

/* Error codes (all negative). */
#define SW_EINVAL (-1)		/* bad argument; see sw_client_errmsg() */
#define SW_ENOMEM (-2)		/* out of memory */
#define SW_EZMQ (-3)		/* ZeroMQ failed; see sw_client_errmsg() */
#define SW_EDROPPED (-4)	/* not sent: queue full or no daemon; counted */
#define SW_ETIMEDOUT (-5)	/* blocking mode: the timeout passed */
#define SW_ECLOSED (-6)		/* the run was already ended */
#define SW_EKEY (-7)		/* CURVE: a key or key file missing or bad */

/* Element types and kinds, as in PROTOCOL.md. */
enum { SW_DTYPE_F32 = 0, SW_DTYPE_F16 = 1, SW_DTYPE_BF16 = 2, SW_DTYPE_F64 = 3 };
enum { SW_KIND_PROBS = 0, SW_KIND_LOGITS = 1, SW_KIND_ROWSTATS = 2 };

typedef struct sw_client sw_client;

typedef struct sw_client_opts {
	/*
	 * Where the daemon listens. NULL (sw_client_opts_init()'s default; ""
	 * alike): the environment's SINKWATCH_ENDPOINT when set and not
	 * empty, else SW_CLIENT_DEFAULT_ENDPOINT (sw_client_opts_init() used
	 * to set SW_CLIENT_DEFAULT_ENDPOINT here, which ignored the variable).
	 */
	const char *endpoint;
	int blocking;		/* 0 (default): never wait; 1: wait, lose nothing */
	int block_timeout_ms;	/* blocking mode: give up after this (default 30000); -1 never */
	int queue_max;		/* messages queued before drops begin (default 256) */
	size_t queue_max_bytes;	/* bytes queued before drops begin (default 256 MiB) */
	int linger_ms;		/* sw_client_destroy() waits at most this (default 2000; < 0: 0) */
	/* fields are only appended; zero (the default) means "not resuming" */
	int resuming;		/* 1: this job restarted from a checkpoint at resume_from */
	int64_t resume_from;	/* with resuming: the checkpoint's step, >= 0 */
	/*
	 * Several senders (since libsinkwatch.so.1; PROTOCOL.md 7b); zero (the
	 * default) means this process alone sends the run. senders: the
	 * processes that send the run, 1..65536 (0 is 1); rank: this one,
	 * < senders. incarnation: 0 picks a new one (see above); otherwise it
	 * is used verbatim, and with senders > 1 and rank > 0 it is required:
	 * rank 0's sw_client_incarnation(), so that the job's senders share it.
	 */
	uint32_t rank, senders;
	uint64_t incarnation;
	/*
	 * CURVE (since libsinkwatch.so.2), for a daemon that listens beyond
	 * loopback (sinkwatchd(8), SECURITY): server_key, the daemon's public
	 * key, 40 characters of Z85 or the name of a file holding it
	 * (`sinkwatch keygen` writes BASE.pub); key_file, this client's secret
	 * key file (BASE.key, mode 0600), whose public key the daemon's allow
	 * list must hold. NULL: from the environment, SINKWATCH_SERVER_KEY and
	 * SINKWATCH_CLIENT_KEY_FILE; neither given: no CURVE; only one, or a
	 * bad key: sw_client_new() returns SW_EKEY.
	 */
	const char *server_key;
	const char *key_file;
} sw_client_opts;

/* What the daemon learns about the run from every message. */
typedef struct sw_run_info {
	const char *run;	/* run id, 1..128 bytes, no control characters */
	const char *model;	/* model name, <= 256 bytes ("" if unknown) */
	uint64_t params;	/* parameter count (0 if unknown) */
	uint32_t layers, heads;
	uint32_t sink;		/* sink key index, usually 0 */
	int fixed_probe;	/* 1 if every snapshot uses the same probe inputs */
} sw_run_info;

/*
 * One layer's snapshot: data is [heads, rows, keys] little-endian, C order.
 * For sw_client_send() heads is the run's and rows the probe's; for
 * sw_client_send_part() they are the heads and rows of the part.
 */
typedef struct sw_snapshot {
	int64_t step;
	uint32_t layer;
	int kind;		/* SW_KIND_* */
	int dtype;		/* SW_DTYPE_* */
	uint32_t rows, keys;	/* rows in data; rowstats: keys = 6 */
	const uint32_t *qpos;	/* NULL, or rows query positions (causal lengths) */
	const void *data;
	size_t bytes;		/* heads * rows * keys * element size */
} sw_snapshot;

typedef struct sw_client_stats {
	uint64_t sent;		/* messages handed to ZeroMQ */
	uint64_t dropped;	/* messages dropped (queue full, no daemon) */
	uint64_t queued;	/* messages waiting for a daemon now (0 in final stats) */
	uint64_t bytes_sent;
	uint64_t next_seq;	/* sequence number of the next message */
	int subscribed;		/* a daemon is subscribed to this run now */
	/*
	 * Handshakes with the daemon that failed (since libsinkwatch.so.2): it
	 * refused this client's key (not in its allow list; auth_status 400),
	 * or the security did not match (auth_status -1): the daemon has CURVE
	 * and this client no keys, or server_key is not the daemon's. After a
	 * refusal (400) the client connects again every 5 s (libzmq does not),
	 * so it grows while that lasts and a key allowed later gets in;
	 * messages meanwhile wait and are dropped as without a daemon. The daemon counts its
	 * refusals too (sinkwatch status auth), which this client cannot read:
	 * the handshake is what failed.
	 */
	uint64_t auth_failures;
	int auth_status;	/* the last failure's: ZAP status code, -1 other, 0 none */
} sw_client_stats;

/* Called when the library is done with a zero-copy buffer. */
typedef void (*sw_release_cb)(void *data, void *hint);

/* Fills *o with the defaults (endpoint NULL: see sw_client_opts). */
SW_EXPORT void sw_client_opts_init(sw_client_opts *o);

/*
 * Creates a client for one run and connects it (asynchronously: this does
 * not wait for the daemon). opts may be NULL for the defaults; the strings
 * are copied. On success returns 0 and *out, which the caller releases with
 * sw_client_destroy(); on failure a negative code and *out is NULL. Bad
 * arguments are SW_EINVAL (there is no handle for sw_client_errmsg()): no
 * run, a run id that is empty, over 128 bytes or holds a control byte, a
 * model name over 256 bytes, layers or heads 0 or over 4096 and 1024,
 * resuming with resume_from < 0, senders over 65536, rank >= senders (0
 * senders being 1), rank > 0 of senders > 1 with incarnation 0, or an
 * endpoint ZeroMQ cannot connect to. CURVE keys (server_key, key_file, or
 * the environment) that are not both given, or not keys, or a secret key
 * file readable by others: SW_EKEY.
 */
SW_EXPORT int sw_client_new(const sw_client_opts *opts, const sw_run_info *run,
    sw_client **out);

/*
 * Sends what is queued for at most linger_ms, then closes and frees *c and
 * sets it NULL. NULL or *c NULL is fine. Queued zero-copy buffers that could
 * not be sent are released (their callbacks run) before it returns. The
 * messages still queued when linger_ms ran out are dropped; to learn how
 * many, use sw_client_destroy_stats().
 */
SW_EXPORT void sw_client_destroy(sw_client **c);

/*
 * sw_client_destroy(), and the handle's final counters in *final (may be
 * NULL; zeroed if *c is NULL): sent and dropped include what happened
 * during the linger, so dropped names every message that never reached
 * ZeroMQ, queued is 0 and subscribed is 0. (What ZeroMQ took over but had
 * not written to the daemon's connection when the linger ran out is lost
 * too and counts as sent: ZeroMQ does not report it.)
 */
SW_EXPORT void sw_client_destroy_stats(sw_client **c, sw_client_stats *final);

/*
 * The handle's incarnation (header key "inc"; never 0): opts.incarnation,
 * or the one sw_client_new() picked. 0 if c is NULL.
 */
SW_EXPORT uint64_t sw_client_incarnation(const sw_client *c);

/*
 * Sends one snapshot, copying the data (the caller keeps its buffer).
 * Returns 0 when the message was sent or queued, SW_EDROPPED when it was
 * dropped (counted), or another negative code.
 */
SW_EXPORT int sw_client_send(sw_client *c, const sw_snapshot *s);

/*
 * Sends one snapshot without copying s->data. On 0 the library owns the
 * buffer until it calls release(data, hint), exactly once, possibly from
 * another thread (ZeroMQ's I/O thread, or the handle's sender thread), after
 * which the caller may reuse it.
 * On any negative return the buffer stays the caller's and release is never
 * called.
 */
SW_EXPORT int sw_client_send_zc(sw_client *c, const sw_snapshot *s,
    sw_release_cb release, void *hint);

/*
 * Sends a part of one layer's snapshot (PROTOCOL.md 7b), copying the data:
 * heads head0 .. head0 + heads - 1 of the run's heads and rows row0 ..
 * row0 + s->rows - 1 of the probe's rows_total rows. s->data is
 * [heads, s->rows, s->keys] (s->bytes = heads * s->rows * s->keys *
 * element size) and s->qpos, when not NULL, has the s->rows query positions
 * of the part's rows. rows_total is the probe's rows, all senders together,
 * the same in every message of the run; 0 means s->rows (the part has all
 * rows). Requires heads >= 1, head0 + heads <= the run's heads, and row0 +
 * s->rows <= rows_total <= 65536; else SW_EINVAL and sw_client_errmsg()
 * names the argument, and nothing is sent or counted. A part that is the
 * whole layer (head0 0, heads the run's, row0 0, rows_total s->rows) is
 * the message sw_client_send() makes. Returns as sw_client_send().
 */
SW_EXPORT int sw_client_send_part(sw_client *c, const sw_snapshot *s, uint32_t head0,
    uint32_t heads, uint32_t row0, uint32_t rows_total);

/* sw_client_send_part() without copying s->data, as sw_client_send_zc(). */
SW_EXPORT int sw_client_send_part_zc(sw_client *c, const sw_snapshot *s, uint32_t head0,
    uint32_t heads, uint32_t row0, uint32_t rows_total, sw_release_cb release, void *hint);

/*
 * Sends the run-end message; once it returned 0, later sends return
 * SW_ECLOSED. A dropped or timed-out end may be tried again. With several
 * senders it ends this sender's share; the run ends when all have.
 */
SW_EXPORT int sw_client_end(sw_client *c);

/*
 * Pushes queued messages to the daemon, waiting at most timeout_ms (0: just
 * try). Returns the number of messages still queued (0 when all went).
 */
SW_EXPORT int sw_client_flush(sw_client *c, int timeout_ms);

SW_EXPORT void sw_client_get_stats(const sw_client *c, sw_client_stats *st);

/* A static description of an error code, never NULL. */
SW_EXPORT const char *sw_strerror(int err);

/* The detail of the handle's last error ("" if none); valid until the next call. */
SW_EXPORT const char *sw_client_errmsg(const sw_client *c);

#ifdef __cplusplus
}
#endif
#endif
