/*
 * control.c: fuzz target of the control request parser
 * (swd_control_reply, daemon/status.c), the bytes any client of the
 * control socket sends. Input: a request. Properties: the reply is
 * terminated, its length is what was returned and fits the buffer, for a
 * large buffer and for a small one (the truncation path, which ends with a
 * "cut" line); the reply the daemon sends (swd_control_reply_alloc) is
 * the large buffer's.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/status.h"
#include "fuzz/fuzz.h"

static swd_status st;

static void
init_status(void)
{
	static const swd_status_run runs[2] = {
		{ .run = "pythia-160m/seed1", .model = "pythia-160m", .split_form = "paired",
		  .layers = 12, .heads = 12, .steps_written = 40, .last_step = 39000,
		  .last_gap = "rank 1: heads 4-7" },
		{ .run = "r2", .model = "", .split_form = "aggregate", .layers = 1, .heads = 1 },
	};
	static swd_status_sender senders[1] = {
		{ .run = "r2", .inc = 7, .rank = 1, .senders = 2, .messages = 3, .stored = 1 },
	};
	static const swd_status_run finished[1] = {
		{ .run = "old", .model = "m", .split_form = "paired", .layers = 2, .heads = 4,
		  .steps_written = 3, .state = "ended" },
	};
	st.version = "0.1.0";
	st.listen = "tcp://127.0.0.1:5710";
	st.control = "tcp://127.0.0.1:5711";
	st.data_dir = "/var/lib/sinkwatch";
	st.nruns = 2;
	st.runs = runs;
	st.nsenders = 1;
	st.senders = senders;
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		st.drops[i] = senders[0].drop[i] = i;	/* every reason, on the sender line too */
	st.nfinished = 1;
	st.finished = finished;
	st.nfinished_senders = 1;
	st.finished_senders = senders;
}

static void
reply(const uint8_t *data, size_t size, size_t outlen)
{
	char *out = malloc(outlen);
	size_t n;

	FUZZ_ASSERT(out != NULL);
	n = swd_control_reply((const char *)data, size, &st, out, outlen);
	FUZZ_ASSERT(n < outlen && out[n] == '\0' && strlen(out) == n);
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (st.version == NULL)
		init_status();
	reply(data, size, 1 << 16);
	reply(data, size, 1 + (size ? data[0] % 97 : 0));
	size_t n, m;
	char *whole = swd_control_reply_alloc((const char *)data, size, &st, &n);
	char *out = malloc(1 << 16);
	FUZZ_ASSERT(whole != NULL && out != NULL && strlen(whole) == n);
	m = swd_control_reply((const char *)data, size, &st, out, 1 << 16);
	FUZZ_ASSERT(m == n && !memcmp(out, whole, n + 1));
	free(out);
	free(whole);
	return 0;
}
