/* frames.c: an input split into frames of their own (see fuzz.h). */
#include <string.h>

#include "fuzz/fuzz.h"
#include "proto/swproto.h"

static void
put(struct fuzz_frames *f, const void *p, size_t n)
{
	/* malloc(0) may return NULL: one byte then, and a size of 0 */
	f->buf[f->n] = malloc(n ? n : 1);
	FUZZ_ASSERT(f->buf[f->n] != NULL);
	if (n)
		memcpy(f->buf[f->n], p, n);
	f->frames[f->n] = f->buf[f->n];
	f->sizes[f->n] = n;
	f->n++;
}

void
fuzz_frames_split(const uint8_t *data, size_t size, struct fuzz_frames *f)
{
	const void *fr[FUZZ_MAXFRAMES];
	size_t sz[FUZZ_MAXFRAMES];
	int n = swp_golden_parse(data, size, fr, sz, FUZZ_MAXFRAMES);

	memset(f, 0, sizeof *f);
	if (n >= 0) {
		for (int i = 0; i < n; i++)
			put(f, fr[i], sz[i]);
		return;
	}
	put(f, "sw/x", 4);
	put(f, data, size);
}

void
fuzz_frames_free(struct fuzz_frames *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->buf[i]);
	f->n = 0;
}
