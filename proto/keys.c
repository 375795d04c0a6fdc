/* keys.c: CURVE key files (see swkeys.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/swkeys.h"

/* ZeroMQ's Z85 alphabet (RFC 32) */
static const char z85[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int
swp_key_valid(const char *s)
{
	if (!s || strlen(s) != SWP_KEY_LEN)
		return 0;
	for (const char *p = s; *p; p++)
		if (!strchr(z85, *p))
			return 0;
	return 1;
}

/*
 * The line's key: its first word, blanks around it and anything after it
 * (a comment) ignored. "" for a blank line or a comment: a line starting
 * with '#' that is not a key ('#' is a Z85 character: a key may start
 * with one).
 */
static char *
clean(char *line)
{
	while (*line == ' ' || *line == '\t')
		line++;
	size_t n = strcspn(line, " \t\r\n");
	line[n] = '\0';
	if (*line == '#' && !swp_key_valid(line))
		return line + n;
	return line;
}

int
swp_key_read(const char *path, int secret, char out[SWP_KEY_LEN + 1], char *err,
    size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	struct stat sb;
	if (secret && fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077)) {
		snprintf(err, errlen, "%s: a secret key readable by others (mode %04o): "
		    "chmod 600 %s", path, (unsigned)(sb.st_mode & 07777), path);
		fclose(f);
		return -1;
	}
	char line[512];
	int lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *k = clean(line);
		if (!*k)
			continue;
		fclose(f);
		if (!swp_key_valid(k)) {
			snprintf(err, errlen, "%s:%d: not a CURVE key (40 characters of Z85, as "
			    "sinkwatch keygen writes)", path, lineno);
			return -1;
		}
		memcpy(out, k, SWP_KEY_LEN + 1);
		return 0;
	}
	fclose(f);
	snprintf(err, errlen, "%s: no key in the file", path);
	return -1;
}

int
swp_key_load(const char *key_or_path, char out[SWP_KEY_LEN + 1], char *err,
    size_t errlen)
{
	/* a path of 40 Z85 characters ("/tmp/x/.../fwd.pub") reads as a key:
	 * a file that is there wins */
	struct stat sb;
	if (swp_key_valid(key_or_path) && stat(key_or_path, &sb) != 0) {
		memcpy(out, key_or_path, SWP_KEY_LEN + 1);
		return 0;
	}
	char e[512];
	if (swp_key_read(key_or_path, 0, out, e, sizeof(e)) == 0)
		return 0;
	snprintf(err, errlen, "'%s' is neither a key (40 characters of Z85) nor a file "
	    "holding one (%s)", key_or_path, e);
	return -1;
}

int
swp_keys_read_list(const char *path, char (*keys)[SWP_KEY_LEN + 1], size_t max, size_t *n,
    char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	*n = 0;
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	char line[512];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "%s:%d: line too long", path, lineno);
			rc = -1;
			break;
		}
		char *k = clean(line);
		if (!*k)
			continue;
		if (!swp_key_valid(k)) {
			snprintf(err, errlen, "%s:%d: not a CURVE public key (40 characters of "
			    "Z85, as sinkwatch keygen writes)", path, lineno);
			rc = -1;
			break;
		}
		if (*n >= max) {
			snprintf(err, errlen, "%s:%d: more than %zu keys", path, lineno, max);
			rc = -1;
			break;
		}
		memcpy(keys[(*n)++], k, SWP_KEY_LEN + 1);
	}
	fclose(f);
	return rc;
}

int
swp_endpoint_local(const char *ep)
{
	if (!strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9))
		return 1;
	const char *h;
	if (!strncmp(ep, "tcp://", 6))
		h = ep + 6;
	else if (!strncmp(ep, "ws://", 5))
		h = ep + 5;
	else
		return 0;
	if (strchr(h, ';'))	/* a source address: not for a bind */
		return 0;
	char host[256];
	const char *end;
	if (*h == '[') {
		end = strchr(h, ']');
		if (!end || end[1] != ':')
			return 0;
		h++;
	} else if (!(end = strrchr(h, ':'))) {
		return 0;
	}
	size_t n = (size_t)(end - h);
	if (n == 0 || n >= sizeof(host))
		return 0;
	memcpy(host, h, n);
	host[n] = '\0';
	if (!strcmp(host, "localhost") || !strcmp(host, "::1"))
		return 1;
	/* 127.0.0.0/8, written as four numbers */
	unsigned a, b, c, d;
	char tail;
	return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 &&
	    b < 256 && c < 256 && d < 256;
}

const char *
swp_bind_endpoint(const char *ep, char *out, size_t outlen)
{
	static const char *const tr[] = { "tcp://", "ws://", "wss://" };
	for (size_t i = 0; i < sizeof(tr) / sizeof(tr[0]); i++) {
		size_t n = strlen(tr[i]);
		if (strncmp(ep, tr[i], n) || strncmp(ep + n, "localhost:", 10))
			continue;
		int m = snprintf(out, outlen, "%s127.0.0.1%s", tr[i], ep + n + 9);
		/* too long for out: left to the bind, whose error names ep */
		return m < 0 || (size_t)m >= outlen ? ep : out;
	}
	return ep;
}
