/* json.h: a small streaming JSON writer for the tools' output. */
#ifndef SW_JSON_H
#define SW_JSON_H

#include <stdint.h>
#include <stdio.h>

#define SW_JSON_MAXDEPTH 32

typedef struct sw_json {
	FILE *f;
	int depth;
	int count[SW_JSON_MAXDEPTH];	/* members written at each level */
	char isobj[SW_JSON_MAXDEPTH];
} sw_json;

/* key is the member name inside an object, NULL inside an array. */
void sw_json_init(sw_json *j, FILE *f);

/*
 * s for a terminal (issue 27): well-formed UTF-8 that prints as is; each
 * byte of a control character (C0, DEL, the C1 controls U+0080..U+009F),
 * of a backslash and of anything that is not UTF-8 as \xHH, as ls and git
 * do, so that a run id or model from a sender or a file can neither move
 * the cursor nor retitle the terminal. Into buf (len bytes; a run id needs
 * 4 * 128 + 1, a model 4 * 256 + 1), cut at a whole character. Returns buf.
 */
#define SW_TEXT_SAFE(n) (4 * (n) + 1)
const char *sw_text_safe(const char *s, char *buf, size_t len);
void sw_json_begin_obj(sw_json *j, const char *key);
void sw_json_end_obj(sw_json *j);
void sw_json_begin_arr(sw_json *j, const char *key);
void sw_json_end_arr(sw_json *j);
/* Non-finite numbers are written as null; finite ones round-trip (%.17g). */
void sw_json_num(sw_json *j, const char *key, double v);
void sw_json_int(sw_json *j, const char *key, int64_t v);
void sw_json_str(sw_json *j, const char *key, const char *s);
/* an array of n numbers (null for NaN and infinities, as sw_json_num) */
void sw_json_nums(sw_json *j, const char *key, const double *x, size_t n);
void sw_json_bool(sw_json *j, const char *key, int v);
void sw_json_uint(sw_json *j, const char *key, uint64_t v);
/* Ends the document with a newline. */
void sw_json_finish(sw_json *j);

#endif
