/*
 * decode.c: fuzz target of swp_decode, the message decoder every received
 * message goes through (PROTOCOL.md 8). Input: a message in the golden
 * container (the golden messages are the seeds), or any bytes as the
 * header of an end message. Properties besides the sanitizers': the
 * result is 0 or a protocol error (never inval), the detail is a
 * terminated string, and a success is a message within the limits.
 */
#include <string.h>

#include "fuzz/fuzz.h"
#include "proto/swproto.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_frames f;
	char detail[128];
	swp_msg m;
	int rc;

	fuzz_frames_split(data, size, &f);
	memset(detail, 'x', sizeof detail);
	rc = swp_decode(f.frames, f.sizes, f.n, NULL, &m, detail, sizeof detail);
	FUZZ_ASSERT(memchr(detail, '\0', sizeof detail) != NULL);
	FUZZ_ASSERT(rc <= 0 && rc > SWP_E_INVAL && rc != SWP_E_NOMEM);
	FUZZ_ASSERT(strcmp(swp_errname(rc), "unknown") != 0);
	if (rc == SWP_OK) {
		FUZZ_ASSERT(detail[0] == '\0');
		FUZZ_ASSERT(m.run[0] != '\0' && strlen(m.run) <= SWP_RUN_MAX);
		FUZZ_ASSERT(f.sizes[0] == SWP_TOPIC_PREFIX_LEN + strlen(m.run));
		FUZZ_ASSERT(m.senders >= 1 && m.rank < m.senders);
		if (m.type == SWP_SNAPSHOT) {
			FUZZ_ASSERT(f.n == 3 && m.tensor == f.frames[2]);
			FUZZ_ASSERT(m.layer < m.layers && m.head0 + m.shape[0] <= m.heads);
			FUZZ_ASSERT(m.row0 + m.shape[1] <= m.rows && m.shape[2] >= 1);
			FUZZ_ASSERT((uint64_t)m.shape[0] * m.shape[1] * m.shape[2] *
			    swp_dtype_size(m.dtype) == m.tensor_bytes);
			/* the caller reads qpos[0 .. shape[1]): ASan checks it is there */
			if (m.qpos != NULL) {
				volatile uint32_t last = m.qpos[m.shape[1] - 1];
				(void)last;
			}
		} else
			FUZZ_ASSERT(m.type == SWP_END && f.n == 2);
		swp_msg_clear(&m);
	} else
		FUZZ_ASSERT(m.qpos == NULL && detail[0] != '\0');
	fuzz_frames_free(&f);
	return 0;
}
