/* json.c: see json.h. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "report/json.h"

void
sw_json_init(sw_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->depth = 0;
	j->isobj[0] = 0;
}

/*
 * The length of the well-formed UTF-8 sequence at p (1 to 4; Unicode
 * table 3-7: no overlong form, no surrogate, nothing over U+10FFFF), or 0
 * when p does not start one. p is NUL-terminated, so the checks of the
 * continuation bytes never read past it.
 */
static int
utf8_len(const unsigned char *p)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	int n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		if (c == 0xe0)
			lo = 0xa0;	/* overlong */
		else if (c == 0xed)
			hi = 0x9f;	/* U+D800..U+DFFF */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		if (c == 0xf0)
			lo = 0x90;	/* overlong */
		else if (c == 0xf4)
			hi = 0x8f;	/* over U+10FFFF */
	} else
		return 0;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

/*
 * A JSON string of s. Run ids and model names may hold any byte but NUL
 * (PROTOCOL.md section 3), and JSON text is UTF-8: well-formed UTF-8 is
 * copied as it is, and each byte that is not part of it is written as
 * \udcXX, the lone surrogate U+DC80..U+DCFF that Python's surrogateescape
 * gives that byte, so that strict parsers accept the output and
 * s.encode("utf-8", "surrogateescape") gives back the bytes.
 */
static void
put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = utf8_len(p);
		if (n == 0) {
			fprintf(f, "\\udc%02x", *p++);
			continue;
		}
		if (n > 1) {
			fwrite(p, 1, (size_t)n, f);
			p += n;
			continue;
		}
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
		p++;
	}
	fputc('"', f);
}

/* Separator, indentation and key before a value; scalars in arrays inline. */
static void
prefix(sw_json *j, const char *key, int container)
{
	int d = j->depth;
	if (d > 0 && j->count[d]++ > 0)
		fputc(',', j->f);
	if (d > 0 && (j->isobj[d] || container)) {
		fputc('\n', j->f);
		for (int i = 0; i < d; i++)
			fputs("  ", j->f);
	}
	if (key && j->isobj[d]) {
		put_string(j->f, key);
		fputs(": ", j->f);
	}
}

static void
open_level(sw_json *j, const char *key, int obj)
{
	prefix(j, key, 1);
	fputc(obj ? '{' : '[', j->f);
	if (j->depth + 1 < SW_JSON_MAXDEPTH) {
		j->depth++;
		j->count[j->depth] = 0;
		j->isobj[j->depth] = (char)obj;
	}
}

static void
close_level(sw_json *j, int obj)
{
	int d = j->depth;
	if (j->isobj[d] && j->count[d] > 0) {
		fputc('\n', j->f);
		for (int i = 0; i < d - 1; i++)
			fputs("  ", j->f);
	}
	fputc(obj ? '}' : ']', j->f);
	if (j->depth > 0)
		j->depth--;
}

void sw_json_begin_obj(sw_json *j, const char *key) { open_level(j, key, 1); }
void sw_json_end_obj(sw_json *j) { close_level(j, 1); }
void sw_json_begin_arr(sw_json *j, const char *key) { open_level(j, key, 0); }
void sw_json_end_arr(sw_json *j) { close_level(j, 0); }

void
sw_json_num(sw_json *j, const char *key, double v)
{
	prefix(j, key, 0);
	if (isfinite(v))
		fprintf(j->f, "%.17g", v);
	else
		fputs("null", j->f);
}

void
sw_json_int(sw_json *j, const char *key, int64_t v)
{
	prefix(j, key, 0);
	fprintf(j->f, "%" PRId64, v);
}

void
sw_json_uint(sw_json *j, const char *key, uint64_t v)
{
	prefix(j, key, 0);
	fprintf(j->f, "%" PRIu64, v);
}

void
sw_json_nums(sw_json *j, const char *key, const double *x, size_t n)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < n; i++)
		sw_json_num(j, NULL, x[i]);
	sw_json_end_arr(j);
}

void
sw_json_str(sw_json *j, const char *key, const char *s)
{
	prefix(j, key, 0);
	put_string(j->f, s);
}

void
sw_json_bool(sw_json *j, const char *key, int v)
{
	prefix(j, key, 0);
	fputs(v ? "true" : "false", j->f);
}

void
sw_json_finish(sw_json *j)
{
	fputc('\n', j->f);
}

const char *
sw_text_safe(const char *s, char *buf, size_t len)
{
	size_t o = 0;
	if (len == 0)
		return "";
	for (const unsigned char *p = (const unsigned char *)s; *p && o + 1 < len;) {
		int n = utf8_len(p);
		/* printable: ASCII from space, and UTF-8 past the C1 controls */
		int ok = n == 1 ? *p >= 0x20 && *p != 0x7f && *p != '\\' :
		    n > 1 && !(n == 2 && p[0] == 0xc2 && p[1] < 0xa0);
		if (ok) {
			if (o + (size_t)n + 1 > len)
				break;
			memcpy(buf + o, p, (size_t)n);
			o += (size_t)n;
			p += n;
			continue;
		}
		/* a control character, a backslash, a byte that is not UTF-8: \xHH each */
		int k = n > 1 ? n : 1;
		if (o + 4 * (size_t)k + 1 > len)
			break;
		for (int i = 0; i < k; i++)
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", p[i]);
		p += k;
	}
	buf[o] = '\0';
	return buf;
}
