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

/* A section of a status reply: its name, and what writes it from ctx. */
typedef struct swn_section {
	const char *name;
	void (*put)(swn_buf *b, const void *ctx);
} swn_section;

/*
 * A section's entry from a typed function: SWN_SECTION_WRAP(sec_, T, name)
 * makes sec_name_any(swn_buf *, const void *), which calls
 * sec_name(swn_buf *, const T *). Expanded over an X-macro list of names
 * (a .def file), it makes the table's functions; a name without its
 * function does not compile.
 */
#define SWN_SECTION_WRAP(prefix, type, name) \
	static void prefix##name##_any(swn_buf *b, const void *ctx) \
	{ \
		prefix##name(b, (const type *)ctx); \
	}

/* A server's control requests: its sections, in the order of "status". */
typedef struct swn_control {
	const swn_section *sections;
	size_t nsections;
	const void *ctx;	/* handed to each section's put */
} swn_control;

/*
 * Takes one request off a control socket (REP) without
 * blocking: its first frame into req (at most cap bytes), any further
 * frames read and discarded (a request is one frame). Returns the bytes in
 * req, or -1 when none is waiting.
 */
int swn_control_recv(void *sock, char *req, size_t cap);

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
