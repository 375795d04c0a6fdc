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
