/*
 * swctl.h: the control socket's requests, one dispatch for sinkwatchd
 * (daemon/status.c) and sinkwatch forward (forward/fwdcore.c), each with its
 * own sections; and the text buffer the replies (and /metrics) are built in.
 */
#ifndef SWN_CTL_H
#define SWN_CTL_H

#include <stddef.h>

/*
 * The text being built. A fixed buffer (grow 0) keeps what fits and marks
 * the cut at swn_finish(); a growing one (grow 1, p from malloc)
 * reallocates. need counts every byte asked for, whether it fit or not.
 */
typedef struct swn_buf {
	char *p;
	size_t len, cap, need;
	int grow, cut;
	const char *cutfmt;	/* the line that says so: needed, then held */
} swn_buf;

/* The cut line of a control reply. */
#define SWN_CUT_CONTROL "cut: this reply needs a buffer of %zu bytes, it had %zu\n"

/* Room for at least want bytes, NUL included: 0, or -1 (no more memory). */
int swn_buf_grow(swn_buf *b, size_t want);
/* Appends; once a piece does not fit, only counts: what follows a cut is never half there. */
void swn_put(swn_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Ends the text. A cut one keeps its whole lines and ends with a line
 * saying what was cut (cutfmt: the bytes needed, the bytes held), as much
 * of that line as fits: the cut is never silent. Returns the length.
 */
size_t swn_finish(swn_buf *b);

/* A server's control requests: its sections, and what writes one. */
typedef void swn_section_fn(swn_buf *b, const char *name, const void *ctx);
typedef struct swn_control {
	const char *const *sections;
	size_t nsections;
	swn_section_fn *section;
	const void *ctx;	/* handed to section */
} swn_control;

/*
 * Answers one request (untrusted bytes, to the first newline): "ping",
 * "help", "status" (every section) or "status SECTION"; an unknown
 * command or section: a reply that starts with "error:". Into out: the
 * length, NUL-terminated and under outlen, cut as swn_finish says with
 * SWN_CUT_CONTROL; outlen 0: 0.
 */
size_t swn_control_reply(const char *req, size_t reqlen, const swn_control *c, char *out,
    size_t outlen);
/*
 * The same reply, whole, in a buffer it allocates (the caller frees it);
 * *len is its length. NULL when out of memory at the start; short of
 * memory later, the reply is cut.
 */
char *swn_control_reply_alloc(const char *req, size_t reqlen, const swn_control *c,
    size_t *len);

#endif
