/* fwdcore.c: the forwarder's bookkeeping and status text (see fwdcore.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "net/swctl.h"
#include "forward/fwdcore.h"

const char *const sw_fwd_reason_names[SW_FWD_REASONS] = {
	"too_large", "frames", "hwm", "no_subscriber", "send_error"
};

int
sw_fwd_check(const size_t *sizes, size_t n, size_t cap)
{
	/* PROTOCOL.md 2: a snapshot has 3 frames, an end 2 */
	if (n < 2 || n > 3)
		return SW_FWD_FRAMES;
	for (size_t i = 0; i < n; i++)
		if (sizes[i] > cap)
			return SW_FWD_TOO_LARGE;
	return -1;
}

int
sw_fwd_subs_apply(sw_fwd_subs *s, const void *msg, size_t len)
{
	const unsigned char *m = msg;
	if (len < 1 || (m[0] != 0 && m[0] != 1))
		return -1;
	const unsigned char *p = m + 1;
	size_t pl = len - 1;
	size_t i;
	for (i = 0; i < s->n && !(s->len[i] == pl && !memcmp(s->pfx[i], p, pl)); i++)
		;
	if (m[0] == 1) {
		s->subscribed++;
		if (i == s->n) {
			if (s->n == SW_FWD_SUBS_MAX || pl > SW_FWD_PREFIX_MAX)
				s->untracked = 1;	/* matches everything from now on */
			else {
				memcpy(s->pfx[s->n], p, pl);
				s->len[s->n++] = pl;
			}
		}
		return 1;
	}
	s->unsubscribed++;
	if (i < s->n) {
		s->n--;
		if (i != s->n) {
			memcpy(s->pfx[i], s->pfx[s->n], s->len[s->n]);
			s->len[i] = s->len[s->n];
		}
	}
	return 0;
}

int
sw_fwd_subs_match(const sw_fwd_subs *s, const void *topic, size_t len)
{
	if (s->untracked)
		return 1;
	for (size_t i = 0; i < s->n; i++)
		if (s->len[i] <= len && !memcmp(s->pfx[i], topic, s->len[i]))
			return 1;
	return 0;
}

/* A prefix as text: printable bytes as they are, others as \xHH. */
static void
put_prefix(swn_buf *b, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			swn_put(b, "%c", p[i]);
		else
			swn_put(b, "\\x%02x", p[i]);
}

/* ---- the sections, one function each (sec_NAME, forward/fwd_sections.def) ---- */

static void
sec_server(swn_buf *b, const sw_fwd_stats *st)
{
	char since[32] = "-";
	struct tm tm;
	time_t t = (time_t)st->started;
	if (gmtime_r(&t, &tm))
		strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
	/* nothing keeps them across restarts: a reader must not add them up */
	swn_put(b, "# server\nprogram: sinkwatch forward\nversion: %s\npid: %ld\n"
	    "uptime_s: %.1f\ncounters_since: %s (they restart with the forwarder)\n"
	    "in: %s\nout: %s\ncontrol: %s\nmax_frame_bytes: %lld\n"
	    "hwm: %lld\nhwm_wait_ms: %lld\n", st->version, st->pid, st->uptime_s, since,
	    st->in, st->out, st->control, (long long)st->max_frame, (long long)st->hwm,
	    (long long)st->hwm_wait_ms);
}

static void
sec_auth(swn_buf *b, const sw_fwd_stats *st)
{
	swn_put(b, "# auth\ncurve: %s\n", st->curve ? "on" : "off");
	if (st->curve)
		swn_put(b, "public_key: %s\nallowed_keys: %lld\nallowed_daemon_keys: %lld\n"
		    "handshakes_allowed: %lld\nrefused_key_in: %lld\nrefused_key_out: %lld\n"
		    "refused_key_control: %lld\nhandshake_failed_in: %lld\n"
		    "handshake_failed_out: %lld\nhandshake_failed_control: %lld\n",
		    st->curve_public ? st->curve_public : "-", (long long)st->keys,
		    (long long)st->keys_daemons, (long long)st->allowed,
		    (long long)st->refused_in, (long long)st->refused_out,
		    (long long)st->refused_control, (long long)st->failed_in,
		    (long long)st->failed_out, (long long)st->failed_control);
}

static void
sec_traffic(swn_buf *b, const sw_fwd_stats *st)
{
	swn_put(b, "# traffic\nreceived: %lld\nreceived_bytes: %lld\nforwarded: %lld\n"
	    "forwarded_bytes: %lld\nheld: %lld\nstalls: %lld\nstalled_ms: %lld\n"
	    "messages_per_s: %.1f\nbytes_per_s: %.0f\ndisconnects: %lld\n",
	    (long long)st->received, (long long)st->received_bytes,
	    (long long)st->forwarded, (long long)st->forwarded_bytes,
	    (long long)st->held, (long long)st->stalls, (long long)st->stalled_ms,
	    st->msgs_per_s, st->bytes_per_s, (long long)st->disconnects);
}

static void
sec_drops(swn_buf *b, const sw_fwd_stats *st)
{
	int64_t all = 0;
	swn_put(b, "# drops\n");
	for (int i = 0; i < SW_FWD_REASONS; i++) {
		swn_put(b, "%s: %lld\n", sw_fwd_reason_names[i], (long long)st->dropped[i]);
		all += st->dropped[i];
	}
	swn_put(b, "dropped: %lld\ndropped_bytes: %lld\n", (long long)all,
	    (long long)st->dropped_bytes);
}

static void
sec_subscriptions(swn_buf *b, const sw_fwd_stats *st)
{
	const sw_fwd_subs *s = st->subs;
	swn_put(b, "# subscriptions\nprefixes: %zu\nuntracked: %d\nsubscribed: %lld\n"
	    "unsubscribed: %lld\n", s ? s->n : 0, s ? s->untracked : 0,
	    (long long)(s ? s->subscribed : 0), (long long)(s ? s->unsubscribed : 0));
	for (size_t i = 0; s && i < s->n; i++) {
		swn_put(b, "prefix: ");
		put_prefix(b, s->pfx[i], s->len[i]);
		swn_put(b, "\n");
	}
}

/* The sections of the reply, in its order, each with its function: one
 * list, forward/fwd_sections.def (a name without its sec_NAME does not
 * compile). */
#define SW_FWD_SECTION(name) SWN_SECTION_WRAP(sec_, sw_fwd_stats, name)
#include "forward/fwd_sections.def"
static const swn_section sections[] = {
#define SW_FWD_SECTION(name) { #name, sec_##name##_any },
#include "forward/fwd_sections.def"
};
#define NSECTIONS (sizeof(sections) / sizeof(sections[0]))

size_t
sw_fwd_reply(const char *req, size_t reqlen, const sw_fwd_stats *st, char *out, size_t outlen)
{
	swn_control c = { sections, NSECTIONS, st };
	return swn_control_reply(req, reqlen, &c, out, outlen);
}
