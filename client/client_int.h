/*
 * client_int.h: the client library's own state (sinkwatch/client.h is its
 * interface), shared by client.c (the API: handles, sends, the queue) and
 * client_sender.c (the handle's sender thread, its socket and copies).
 * Nothing here is exported (-fvisibility=hidden).
 */
#ifndef SW_CLIENT_INT_H
#define SW_CLIENT_INT_H

#include <pthread.h>
#include <stdint.h>
#include <zmq.h>

#include "proto/swproto.h"
#include "sinkwatch/client.h"

#define NAP_MS 16
#define REFUSED_RETRY_MS 5000	/* a refused handshake is tried again this often */
/*
 * ZeroMQ's queue (ZMQ_SNDHWM) counts messages, not bytes: kept short, so
 * that queue_max_bytes, which bounds the handle's own queue, stays the
 * bound on what the handle holds (at most this many more messages).
 */
#define ZMQ_HWM_MAX 16
/* the sender waits this long in zmq_send() for room in ZeroMQ's queue */
#define SEND_WAIT_MS 20

/*
 * One message from send to ZeroMQ. The caller encodes the header into hbuf
 * (no allocation but p itself); the sender builds the data frame on its
 * first try and keeps it across retries. ZeroMQ's I/O thread may be done
 * with the data before zmq_msg_send() returns, so what it frees when done
 * (struct zc_rel, or the library's copy) is apart from p, which the sender
 * frees once the frame is handed over.
 */
struct pending {
	struct pending *next;
	uint64_t seq;
	void *data;		/* NULL: an end message */
	size_t bytes;
	sw_release_cb cb;	/* NULL: data is the library's copy */
	void *hint;
	struct zc_rel *z;	/* framed zero-copy data: what ZeroMQ calls back with */
	int framed;		/* msg holds the data frame */
	int pooled;		/* p is a node of the handle's slab (cl_pending_free) */
	int nsent;		/* frames ZeroMQ has taken: a retry resumes there */
	zmq_msg_t msg;
	size_t hlen;
	unsigned char hbuf[];
};

/*
 * Copies of sent data are recycled. A 4 MiB allocation that goes back to
 * the system and is faulted in again costs 1024 page faults per send: 17 ms
 * measured in a virtual machine at 16 us a fault, the copying send's p50
 * with the daemon up (the I/O thread frees, the heap top is trimmed). Free
 * copies wait in the pool, at most queue_max of them and queue_max_bytes
 * together; ZeroMQ's I/O thread puts them back (free_copy), the caller
 * takes them. Each has a header of COPY_HDR bytes before its data.
 */
struct copybuf {
	struct copybuf *next;
	size_t cap;
};
#define COPY_HDR 64

/*
 * The queue's nodes come from a slab of the handle's, touched once in
 * sw_client_new(): without a daemon the queue grows to its bound, and nodes
 * malloc()ed then (1.2 KB each: a header bound of 1024 bytes) faulted in a
 * fresh heap page every third or fourth send, 30-90 us each in a virtual
 * machine (issue 30). queue_max + 2 nodes (the queue, the message in the
 * caller's hands, the one the sender is done with), at most NODES_MAX; a
 * header over NODE_HDR bytes (qpos) or an empty list takes malloc().
 */
#define NODE_HDR 1024
#define NODES_MAX 1024

struct zc_rel {
	sw_release_cb cb;
	void *hint;
	int armed;		/* 0: the buffer went back to the caller, no callback */
};

struct sw_client {
	void *ctx, *sock;	/* sock: the sender thread's once it runs */
	sw_client_opts o;
	char *endpoint;
	char run[SWP_RUN_MAX + 1];
	char model[SWP_MODEL_MAX + 1];
	sw_run_info info;
	char topic[SWP_TOPIC_PREFIX_LEN + SWP_RUN_MAX];
	size_t topic_len;
	uint64_t inc;		/* the incarnation; never 0 */
	uint32_t rank, senders;	/* this sender of senders (1 when alone) */
	int ended;		/* caller's thread only */
	uint64_t seq;		/* caller's thread only */
	char err[256];		/* caller's thread only */

	pthread_t thr;
	int efd;		/* eventfd: wakes the sender */
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* broadcast on every change the caller may wait for */
	/* under mu */
	struct pending *head, *tail, *inflight;
	size_t pending_n, pending_bytes;
	uint64_t sent, dropped, bytes_sent, done_seq;
	int nsubs;		/* subscriptions matching our topic; written by the sender */
	int idle;		/* the sender sleeps in zmq_poll(): write efd to wake it */
	int closing;
	int64_t close_deadline;
	uint64_t auth_failures;	/* CURVE handshakes that failed */
	int auth_status;
	void *mon;		/* CURVE: the socket monitor's events, the sender's */
	int64_t refused_ms;	/* a handshake refused (400): when; 0 none pending */

	pthread_mutex_t pool_mu;	/* the copy pool; taken alone, never with mu */
	struct copybuf *pool;
	size_t pool_n, pool_bytes;

	pthread_mutex_t node_mu;	/* the free nodes; a leaf: nothing is taken under it */
	struct pending *nodes;
	void *slab;
};

/* client_sender.c, which client.c calls (never the other way) */
int64_t cl_now_ms(void);
int cl_seterr(sw_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

void *cl_copy_get(sw_client *c, size_t bytes);
int cl_nodes_init(sw_client *c);
struct pending *cl_pending_new(sw_client *c, size_t hcap);
void cl_pending_free(sw_client *c, struct pending *p);
void cl_pending_end(sw_client *c, struct pending *p, int give_back);
int cl_setup_curve(sw_client *c);
void *cl_sender_main(void *arg);

#endif
