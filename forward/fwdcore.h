/*
 * fwdcore.h: the bookkeeping of `sinkwatch forward` apart from its sockets
 * (forward/forward.c), so that tests drive it without ZeroMQ: which messages
 * pass, the subscriptions the daemons behind it hold, the counters and the
 * status text its control socket answers with.
 */
#ifndef SW_FWDCORE_H
#define SW_FWDCORE_H

#include <stddef.h>
#include <stdint.h>

/* Why a message was not forwarded (the drops section names them). */
enum {
	SW_FWD_TOO_LARGE,	/* a frame over the size cap (the daemon's) */
	SW_FWD_FRAMES,		/* not 2 or 3 frames (PROTOCOL.md 2) */
	SW_FWD_HWM,		/* every daemon it was for stayed at its HWM past the wait */
	SW_FWD_NO_SUBSCRIBER,	/* no daemon subscribes to its topic (any more) */
	SW_FWD_SEND_ERROR,	/* another send error */
	SW_FWD_REASONS
};
extern const char *const sw_fwd_reason_names[SW_FWD_REASONS];

/*
 * Whether a message of n frames of these sizes is forwarded: -1 yes, else
 * the reason. cap is the largest frame accepted, in bytes.
 */
int sw_fwd_check(const size_t *sizes, size_t n, size_t cap);

/*
 * The prefixes the daemons behind the forwarder subscribe to, as XPUB
 * reports them without ZMQ_XPUB_VERBOSE (the first subscription to a
 * prefix, the last unsubscription from it). At most SW_FWD_SUBS_MAX
 * prefixes of at most SW_FWD_PREFIX_MAX bytes are tracked; past that the
 * table is marked untracked and matches every topic.
 */
#define SW_FWD_SUBS_MAX 1024
#define SW_FWD_PREFIX_MAX 256
typedef struct sw_fwd_subs {
	size_t n;
	unsigned char pfx[SW_FWD_SUBS_MAX][SW_FWD_PREFIX_MAX];
	size_t len[SW_FWD_SUBS_MAX];
	int untracked;
	int64_t subscribed, unsubscribed;	/* messages seen of each kind */
} sw_fwd_subs;

/*
 * Applies one message read from XPUB (0x01 or 0x00, then the prefix).
 * Returns 1 for a subscription, 0 for an unsubscription, -1 for anything
 * else (not a subscription message: not applied).
 */
int sw_fwd_subs_apply(sw_fwd_subs *s, const void *msg, size_t len);

/* 1 if some subscribed prefix starts the topic (or the table is untracked). */
int sw_fwd_subs_match(const sw_fwd_subs *s, const void *topic, size_t len);

/* The forwarder's figures. */
typedef struct sw_fwd_stats {
	const char *version, *in, *out, *control;
	long pid;
	double uptime_s;
	int64_t started;	/* the wall clock at start (s since the epoch): every
				 * counter counts from there, none across restarts */
	int64_t max_frame, hwm, hwm_wait_ms;
	int64_t received, received_bytes;	/* whole messages read from XSUB */
	int64_t forwarded, forwarded_bytes;
	int64_t dropped[SW_FWD_REASONS], dropped_bytes;
	int64_t held;		/* 0 or 1: a message waiting for a daemon below its HWM */
	int64_t stalls;		/* sends that met EAGAIN (a daemon at its HWM), retried */
	int64_t stalled_ms;	/* time spent waiting so */
	int64_t disconnects;	/* publishers ZeroMQ disconnected (a frame over
				 * ZMQ_MAXMSGSIZE, twice the cap, among them) */
	double msgs_per_s, bytes_per_s;	/* forwarded, over the last 10 s */
	const sw_fwd_subs *subs;
	/* CURVE (--curve-secret-file): the forwarder's key and its handshakes,
	 * by socket: in (the jobs), out (the daemons), control */
	int curve;
	const char *curve_public;
	int64_t keys, keys_daemons;	/* in the two allow lists */
	int64_t allowed;
	int64_t refused_in, refused_out, refused_control;	/* key not allowed */
	int64_t failed_in, failed_out, failed_control;	/* no CURVE, another server key */
} sw_fwd_stats;

/*
 * Answers one control request ("ping", "help", "status [SECTION]";
 * sections: server, auth, traffic, drops, subscriptions), as sinkwatchd's
 * control socket does, into out. The server section says since when the
 * counters count (counters_since: they restart with the forwarder).
 * Returns the length, NUL-terminated and under outlen; a reply that does
 * not fit keeps its whole lines and ends with a line "cut: this reply
 * needs a buffer of N bytes, it had M" (as much of it as fits), never cut
 * silently. SW_FWD_REPLY_MAX holds the longest reply. An unknown request or
 * section: a reply that starts with "error:".
 */
size_t sw_fwd_reply(const char *req, size_t reqlen, const sw_fwd_stats *st, char *out,
    size_t outlen);
/* every prefix written as \xHH, on its line, and the rest with room to spare */
#define SW_FWD_REPLY_MAX ((size_t)SW_FWD_SUBS_MAX * (4 * SW_FWD_PREFIX_MAX + 16) + 65536)

#endif
