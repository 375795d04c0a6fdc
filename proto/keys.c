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
	if (swp_key_valid(key_or_path)) {
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
