/* ctl.c: control requests and the reply buffer (see swctl.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "net/swctl.h"

int
swn_buf_grow(swn_buf *b, size_t want)
{
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < want)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -1;
	b->p = p;
	b->cap = cap;
	return 0;
}

void
swn_put(swn_buf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		/* once cut, only count: what follows a cut is never half there */
		size_t room = !b->cut && b->len < b->cap ? b->cap - b->len : 0;
		va_start(ap, fmt);
		int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			b->len += (size_t)n;
			b->need += (size_t)n;
			return;
		}
		if (b->cut || !b->grow || swn_buf_grow(b, b->len + (size_t)n + 1) != 0) {
			b->cut = 1;
			b->need += (size_t)n;
			if (b->len < b->cap)
				b->p[b->len] = '\0';
			return;
		}
	}
}

size_t
swn_finish(swn_buf *b)
{
	if (b->cap == 0)
		return 0;
	if (!b->cut) {
		b->p[b->len] = '\0';
		return b->len;
	}
	char note[160];
	int m = snprintf(note, sizeof(note), b->cutfmt, b->need + 1, b->cap);
	size_t nl = m < 0 ? 0 : (size_t)m < sizeof(note) ? (size_t)m : sizeof(note) - 1;
	size_t keep = 0;
	if (nl < b->cap)
		for (size_t i = b->len < b->cap - nl ? b->len : b->cap - 1 - nl; i > 0; i--)
			if (b->p[i - 1] == '\n') {
				keep = i;
				break;
			}
	if (nl >= b->cap)
		nl = b->cap - 1;
	memcpy(b->p + keep, note, nl);
	b->len = keep + nl;
	b->p[b->len] = '\0';
	return b->len;
}

static void
answer(swn_buf *b, const char *req, size_t reqlen, const swn_control *c)
{
	char cmd[64];
	/* the request is untrusted bytes: copy, cut at the first newline */
	size_t n = reqlen < sizeof(cmd) - 1 ? reqlen : sizeof(cmd) - 1;
	memcpy(cmd, req, n);
	cmd[n] = '\0';
	cmd[strcspn(cmd, "\r\n")] = '\0';
	char *arg = strchr(cmd, ' ');
	if (arg)
		*arg++ = '\0';
	if (!strcmp(cmd, "ping")) {
		swn_put(b, "pong\n");
	} else if (!strcmp(cmd, "help")) {
		swn_put(b, "commands: status [SECTION], ping, help\nsections:");
		for (size_t i = 0; i < c->nsections; i++)
			swn_put(b, " %s", c->sections[i].name);
		swn_put(b, "\n");
	} else if (!strcmp(cmd, "status")) {
		int found = 0;
		for (size_t i = 0; i < c->nsections; i++) {
			if (arg && *arg && strcmp(arg, c->sections[i].name))
				continue;
			if (found++)
				swn_put(b, "\n");
			c->sections[i].put(b, c->ctx);
		}
		if (!found)
			swn_put(b, "error: unknown section '%s'\n", arg);
	} else {
		swn_put(b, "error: unknown command '%s' (try help)\n", cmd);
	}
}

size_t
swn_control_reply(const char *req, size_t reqlen, const swn_control *c, char *out,
    size_t outlen)
{
	swn_buf b = { .p = out, .cap = outlen, .cutfmt = SWN_CUT_CONTROL };
	if (outlen == 0)
		return 0;
	answer(&b, req, reqlen, c);
	return swn_finish(&b);
}

char *
swn_control_reply_alloc(const char *req, size_t reqlen, const swn_control *c, size_t *len)
{
	swn_buf b = { .grow = 1, .cutfmt = SWN_CUT_CONTROL };
	if (swn_buf_grow(&b, 1) != 0)
		return NULL;
	answer(&b, req, reqlen, c);
	*len = swn_finish(&b);
	return b.p;
}

int
swn_control_recv(void *sock, char *req, size_t cap)
{
	int n = zmq_recv(sock, req, cap, ZMQ_DONTWAIT);
	if (n < 0)
		return -1;
	int more = 0;
	size_t ml = sizeof(more);
	zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
	while (more) {	/* a request is one frame: discard the rest */
		char junk[64];
		zmq_recv(sock, junk, sizeof(junk), 0);
		zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
	}
	return (size_t)n < cap ? n : (int)cap;	/* zmq_recv says the frame's whole size */
}
