/*
 * fuzz.h: what the fuzz targets share. Each target defines
 * LLVMFuzzerTestOneInput; with --enable-fuzzing libFuzzer calls it, without
 * it fuzz/standalone.c does, once per input file (make check replays the
 * corpora of fuzz/corpus that way). A target aborts on a broken property,
 * so that both drivers report it.
 */
#ifndef SW_FUZZ_H
#define SW_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Stops the run on a broken property: libFuzzer saves the input. */
#define FUZZ_ASSERT(c) do { \
	if (!(c)) { \
		fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #c); \
		abort(); \
	} \
} while (0)

/* At most this many frames are split off an input (4: one too many). */
#define FUZZ_MAXFRAMES 4

/*
 * The frames of an input in the golden container (PROTOCOL.md 10), each
 * copied to a buffer of exactly its size, so that AddressSanitizer sees a
 * read one byte past a frame; an input that is no container is taken as
 * the header of an end message on topic "sw/x". fuzz_frames_free() frees.
 */
struct fuzz_frames {
	void *buf[FUZZ_MAXFRAMES];
	const void *frames[FUZZ_MAXFRAMES];
	size_t sizes[FUZZ_MAXFRAMES];
	size_t n;
};

void fuzz_frames_split(const uint8_t *data, size_t size, struct fuzz_frames *f);
void fuzz_frames_free(struct fuzz_frames *f);

#endif
