/*
 * decode_oracle.c: the C decoder's verdicts for tests/differential.py. Reads
 * messages from stdin, each as a uint32 little-endian frame count and then
 * every frame as a uint32 little-endian length and its bytes, and prints a
 * line per message: "err NAME DETAIL", or "ok V HEX" with the decoded
 * version and the canonical header the decoded message encodes to (hex).
 * Each frame sits in a buffer of exactly its size, so that a sanitizer
 * build stops at a read past a frame.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/swproto.h"

#define MAXFRAMES 8

static int
get32(FILE *f, uint32_t *v)
{
	unsigned char b[4];

	if (fread(b, 1, 4, f) != 4)
		return -1;
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

static int
one(FILE *in, uint32_t n)
{
	void *buf[MAXFRAMES] = { NULL };
	const void *frames[MAXFRAMES];
	size_t sizes[MAXFRAMES];
	char detail[256];
	swp_msg m;
	int rc = -1;

	if (n > MAXFRAMES) {
		fprintf(stderr, "decode_oracle: %u frames, at most %d\n", n, MAXFRAMES);
		return -1;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len;
		if (get32(in, &len) != 0 || (buf[i] = malloc(len ? len : 1)) == NULL ||
		    fread(buf[i], 1, len, in) != len)
			goto out;
		frames[i] = buf[i];
		sizes[i] = len;
	}
	int e = swp_decode(frames, sizes, n, NULL, &m, detail, sizeof detail);
	if (e != SWP_OK) {
		printf("err %s %s\n", swp_errname(e), detail);
	} else {
		void *hdr;
		size_t len;
		int ee = swp_encode_header(&m, &hdr, &len);
		if (ee != SWP_OK) {
			printf("encode-refused %s\n", swp_errname(ee));
		} else {
			printf("ok %u ", m.version);
			for (size_t i = 0; i < len; i++)
				printf("%02x", ((unsigned char *)hdr)[i]);
			putchar('\n');
			free(hdr);
		}
		swp_msg_clear(&m);
	}
	rc = 0;
out:
	for (uint32_t i = 0; i < n; i++)
		free(buf[i]);
	return rc;
}

int
main(void)
{
	uint32_t n;

	while (get32(stdin, &n) == 0)
		if (one(stdin, n) != 0) {
			fprintf(stderr, "decode_oracle: malformed input\n");
			return 2;
		}
	return fflush(stdout) == 0 ? 0 : 2;
}
