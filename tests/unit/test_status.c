/*
 * test_status.c: the daemon's control-request parser and status text, and
 * its configuration table, apart from any socket.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conf.h"
#include "net/log.h"
#include "daemon/status.h"
#include "proto/swkeys.h"
#include "net/swnet.h"
#include "client/sinkwatch/client.h"

static swd_status
sample(swd_status_run *runs)
{
	swd_status st;
	memset(&st, 0, sizeof(st));
	st.version = "9.9";
	st.listen = "tcp://x:1";
	st.control = "tcp://x:2";
	st.data_dir = "/d";
	st.pid = 42;
	st.uptime_s = 1.5;
	runs[0] = (swd_status_run){ "r1", "gpt", "paired", 2, 4, 10, 90, 1, 3, 1, 21,
	    "step 5 layer 1 heads 2-3 missing (rank 1)", NULL };
	st.nruns = 1;
	st.runs = runs;
	static swd_status_sender snd[2];
	snd[0] = (swd_status_sender){ "r1", 77, 0, 2, 11, 0, 0, 0, 0, 0, 0, 0, 0, 11, 1, 10, 0,
	    { 0 } };
	snd[1] = (swd_status_sender){ "r1", 77, 1, 2, 10, 1, 3, 1, 2, 4, 5, 2, 6, 12, 0, 0, 1,
	    { 0 } };
	snd[1].drop[SWD_DROP_BUDGET] = 2;
	snd[1].drop[SWD_DROP_DUPLICATE] = 3;	/* printed as duplicates, once */
	st.nsenders = 2;
	st.senders = snd;
	static swd_status_run fin[1];
	fin[0] = (swd_status_run){ "old", "gpt", "aggregate", 1, 2, 5, 4, 0, 0, 0, 11, "", "ended" };
	st.nfinished = 1;
	st.finished = fin;
	static swd_status_sender fsnd[1];
	fsnd[0] = (swd_status_sender){ "old", 5, 0, 1, 11, 0, 0, 0, 0, 0, 0, 0, 0, 11, 1, 10, 0,
	    { 0 } };
	st.nfinished_senders = 1;
	st.finished_senders = fsnd;
	static swd_status_refused rf[2];
	rf[0] = (swd_status_refused){ "flood-9", 0, 4, 0 };
	rf[1] = (swd_status_refused){ "flood-3", 2, 1, 0 };
	st.nrefused = 2;
	st.refused_total = 105;
	st.refused = rf;
	st.max_runs = 8;
	st.new_runs_per_s = 5;
	st.new_runs_burst = 10;
	st.drops[SWD_DROP_RUN_RATE] = 5;
	st.messages = 21;
	st.rows_per_s = 12.5;
	st.drops[SWD_DROP_BUDGET] = 7;
	st.decode_errors[-SWP_E_VERSION] = 2;
	st.rejects[SWM_REJ_SUM] = 5;
	st.inflight_bytes = 100;
	st.budget_bytes = 1000;
	st.max_batch = 64;
	return st;
}

START_TEST(test_reply)
{
	swd_status_run runs[1];
	swd_status st = sample(runs);
	char out[8192];
	size_t n = swd_control_reply("status", 6, &st, out, sizeof(out));
	ck_assert_uint_eq(n, strlen(out));
	const char *secs[] = { "# server", "# auth", "# runs", "# senders", "# refused", "# traffic", "# drops", "# rejects",
	    "# queue", "# writer", "# loop", "# cpu", "# finished" };
	const char *prev = out;
	for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++) {
		const char *p = strstr(out, secs[i]);
		ck_assert_msg(p && p >= prev, "section %s missing or out of order", secs[i]);
		prev = p;
	}
	ck_assert(strstr(out, "version: 9.9\n"));
	ck_assert(strstr(out, "run: r1 model=gpt layers=2 heads=4 split=paired steps=10 "
	    "last_step=90 open_steps=1 messages=21 lost=3 incomplete=1\n"
	    "gap: r1 step 5 layer 1 heads 2-3 missing (rank 1)\n"));
	ck_assert(strstr(out, "# senders\nsenders: 2\nsender: r1 inc=77 rank=0/2 messages=11 "
	    "lost=0 duplicates=0 disagree=0 uncompared=0 overlaps=0 mismatches=0 missing=0 "
	    "after_end=0 seq_next=11 ended=1 stored=10 pending=0\nsender: r1 inc=77 rank=1/2 "
	    "messages=10 lost=1 duplicates=3 disagree=1 uncompared=2 overlaps=4 mismatches=5 "
	    "missing=2 after_end=6 seq_next=12 ended=0 stored=0 pending=1 budget=2\n"));
	/* runs gone from the table, and what their senders read of their counts */
	ck_assert(strstr(out, "# finished\nfinished: 1\nfinished_run: old model=gpt layers=1 "
	    "heads=2 split=aggregate steps=5 last_step=4 open_steps=0 messages=11 lost=0 "
	    "incomplete=0 state=ended\nfinished_sender: old inc=5 rank=0/1 messages=11 lost=0 "
	    "duplicates=0 disagree=0 uncompared=0 overlaps=0 mismatches=0 missing=0 after_end=0 "
	    "seq_next=11 ended=1 stored=10 pending=0\n"));
	ck_assert(strstr(out, "# refused\nmax_runs: 8\nnew_runs_per_s: 5\nnew_runs_burst: 10\n"
	    "refused_runs: 2\nrefused_total: 105\nrefused: flood-9 too_many_runs=0 run_rate=4 run_state=0\n"
	    "refused: flood-3 too_many_runs=2 run_rate=1 run_state=0\n"));
	ck_assert(strstr(out, "run_rate: 5\n"));
	ck_assert(strstr(out, "budget: 7\n"));
	ck_assert(strstr(out, "bad_version: 2\n"));
	ck_assert(strstr(out, "sum: 5\n"));
	ck_assert(strstr(out, "rows_per_s: 12.5\n"));
	ck_assert(strstr(out, "max_batch: 64\n"));

	n = swd_control_reply("status queue\n", 13, &st, out, sizeof(out));
	ck_assert_str_eq(out, "# queue\ninflight_bytes: 100\nbudget_bytes: 1000\n"
	    "jobs_in_flight: 0\nwriter_queue: 0\n");
	swd_control_reply("status nope", 11, &st, out, sizeof(out));
	ck_assert_str_eq(out, "error: unknown section 'nope'\n");
	swd_control_reply("ping", 4, &st, out, sizeof(out));
	ck_assert_str_eq(out, "pong\n");
	swd_control_reply("help", 4, &st, out, sizeof(out));
	ck_assert(strstr(out, "sections: server auth runs senders refused traffic drops rejects "
	    "queue writer loop cpu"));
	swd_control_reply("reboot now", 10, &st, out, sizeof(out));
	ck_assert_str_eq(out, "error: unknown command 'reboot' (try help)\n");
	/* untrusted bytes: no NUL, longer than the command buffer */
	char junk[300];
	memset(junk, 'A', sizeof(junk));
	swd_control_reply(junk, sizeof(junk), &st, out, sizeof(out));
	ck_assert(strncmp(out, "error: unknown command", 22) == 0);
	/* a small output buffer truncates, NUL-terminated */
	char small[16];
	n = swd_control_reply("status", 6, &st, small, sizeof(small));
	ck_assert_uint_eq(n, 15);
	ck_assert_str_eq(small, "cut: this reply");	/* even here, not silent */
	ck_assert_uint_eq(swd_control_reply("status", 6, &st, small, 0), 0);
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		ck_assert(swd_drop_names[i] && *swd_drop_names[i]);
	/* CURVE: the auth section and its series */
	swd_control_reply("status auth", 11, &st, out, sizeof(out));
	ck_assert_str_eq(out, "# auth\ncurve: off\n");
	st.curve = 1;
	st.curve_public = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
	st.auth_keys = 2;
	st.auth_allowed = 5;
	st.auth_refused_data = 3;
	st.auth_refused_control = 1;
	st.auth_failed_data = 4;
	swd_control_reply("status auth", 11, &st, out, sizeof(out));
	ck_assert_str_eq(out, "# auth\ncurve: on\npublic_key: rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n"
	    "allowed_keys: 2\nhandshakes_allowed: 5\nrefused_key_data: 3\nrefused_key_control: 1\n"
	    "handshake_failed_data: 4\nhandshake_failed_control: 0\n");
	static char mt[16384];
	swd_metrics_text(&st, mt, sizeof(mt));
	ck_assert(strstr(mt, "sinkwatch_handshakes_refused_total{socket=\"data\","
	    "reason=\"key_not_allowed\"} 3\n"));
	ck_assert(strstr(mt, "sinkwatch_handshakes_refused_total{socket=\"control\","
	    "reason=\"key_not_allowed\"} 1\n"));
	ck_assert(strstr(mt, "sinkwatch_handshakes_refused_total{socket=\"data\","
	    "reason=\"handshake_failed\"} 4\n"));
	ck_assert(strstr(mt, "sinkwatch_handshakes_allowed_total 5\n"));
	ck_assert(strstr(mt, "sinkwatch_curve_enabled 1\n"));
	ck_assert(strstr(mt, "sinkwatch_messages_dropped_total{reason=\"run_rate\"} 5\n"));
	ck_assert(strstr(mt, "sinkwatch_messages_dropped_total{reason=\"too_many_runs\"} 0\n"));
}
END_TEST

/*
 * Issue 26 item 9: more senders than the list holds, and more than a
 * fixed buffer holds. The list says it was cut and its true length, every
 * section follows it, and a reply that does not fit ends with whole lines
 * and a line saying so.
 */
START_TEST(test_long_lists)
{
	enum { SHOWN = 1024, LIVE = 1100 };
	static char id[SWP_RUN_MAX + 1];
	static swd_status_sender snd[SHOWN];
	swd_status_run runs[1];
	swd_status st = sample(runs);
	memset(id, 'r', SWP_RUN_MAX);
	for (int i = 0; i < SHOWN; i++)
		snd[i] = (swd_status_sender){ .run = id, .inc = 7, .rank = (uint32_t)i,
		    .senders = LIVE, .messages = 3, .seq_next = 3 };
	st.senders = snd;
	st.nsenders = SHOWN;
	st.senders_live = LIVE;
	st.runs_live = 300;	/* one run shown */

	size_t len;
	char *all = swd_control_reply_alloc("status", 6, &st, &len);
	ck_assert_ptr_nonnull(all);
	ck_assert_uint_eq(len, strlen(all));
	ck_assert_uint_gt(len, (size_t)1 << 18);	/* the old reply buffer */
	ck_assert(strstr(all, "# senders\nsenders: 1024\nsenders_total: 1100\n"
	    "senders_not_shown: 76\nsender: "));
	ck_assert(strstr(all, "# runs\nruns: 1\nruns_total: 300\nruns_not_shown: 299\nrun: r1 "));
	size_t lines = 0;
	for (const char *p = all; (p = strstr(p, "\nsender: ")); p++)
		lines++;
	ck_assert_uint_eq(lines, SHOWN);
	/* every section after the long list, whole */
	ck_assert(strstr(all, "\n# refused\n") && strstr(all, "\n# drops\n"));
	ck_assert(strstr(all, "process_s: 0.000000\n\n# finished\n"));
	static const char last[] = "seq_next=11 ended=1 stored=10 pending=0\n";
	ck_assert_msg(len > sizeof(last) && !strcmp(all + len - (sizeof(last) - 1), last), "%s",
	    all + len - 40);
	ck_assert(!strstr(all, "\ncut: "));
	/* the same into a fixed buffer equals it when it fits */
	char *fit = malloc(len + 1);
	ck_assert_uint_eq(swd_control_reply("status", 6, &st, fit, len + 1), len);
	ck_assert_str_eq(fit, all);
	free(fit);

	/* a buffer too small: whole lines, then the cut, with the size needed */
	static char small[1 << 16];
	size_t n = swd_control_reply("status", 6, &st, small, sizeof(small));
	ck_assert_uint_eq(n, strlen(small));
	ck_assert_uint_lt(n, sizeof(small));
	char want[128];
	snprintf(want, sizeof(want), "\ncut: this reply needs a buffer of %zu bytes, it had %zu\n",
	    len + 1, sizeof(small));
	ck_assert_msg(n > strlen(want) && !strcmp(small + n - strlen(want), want), "%s",
	    small + n - 200);
	ck_assert(!strncmp(small, all, n - strlen(want) + 1));	/* a prefix of lines */
	free(all);

	/* a list that is not cut says nothing more */
	st.senders_live = SHOWN;
	st.runs_live = 1;
	all = swd_control_reply_alloc("status senders", 14, &st, &len);
	ck_assert(!strncmp(all, "# senders\nsenders: 1024\nsender: ", 32));
	ck_assert(!strstr(all, "_not_shown"));
	free(all);
	/* the metrics text is cut the same way, as a comment */
	char mt[256];
	n = swd_metrics_text(&st, mt, sizeof(mt));
	ck_assert_uint_eq(n, strlen(mt));
	ck_assert_msg(strstr(mt, "\n# cut: this text needs a buffer of "), "%s", mt);
}
END_TEST

/* The cpu section: every stage, its seconds and ms per message received. */
START_TEST(test_cpu)
{
	swd_status_run runs[1];
	swd_status st = sample(runs);
	char out[8192];
	st.messages = 200;
	for (int i = 0; i < SWD_STAGES_N; i++)
		st.stage_cpu_s[i] = 0.5 * (i + 1);
	st.process_cpu_s = 15.0;
	swd_control_reply("status cpu", 10, &st, out, sizeof(out));
	ck_assert_msg(!strncmp(out, "# cpu\n", 6), "%s", out);
	ck_assert(strstr(out, "\nreceive_s: 0.500000\nreceive_ms_per_message: 2.5000\n"));
	ck_assert(strstr(out, "\nrows_s: 2.500000\nrows_ms_per_message: 12.5000\n"
	    "pairs_s: 3.000000\npairs_ms_per_message: 15.0000\n"));
	ck_assert(strstr(out, "\nwrite_s: 4.000000\nwrite_ms_per_message: 20.0000\n"));
	ck_assert(strstr(out, "\nstages_s: 18.000000\nstages_ms_per_message: 90.0000\n"
	    "process_s: 15.000000\n"));
	/* no message yet: per message 0, not a division by zero */
	st.messages = 0;
	swd_control_reply("status cpu", 10, &st, out, sizeof(out));
	ck_assert(strstr(out, "\npairs_ms_per_message: 0.0000\n"));
	/* Prometheus: one counter family, a sample per stage */
	st.messages = 200;
	swd_metrics_text(&st, out, sizeof(out));
	ck_assert(strstr(out, "# TYPE sinkwatch_stage_cpu_seconds_total counter\n"));
	ck_assert(strstr(out, "sinkwatch_stage_cpu_seconds_total{stage=\"drift\"} 3.5\n"));
	ck_assert(strstr(out, "sinkwatch_stage_cpu_seconds_total{stage=\"pairs\"} 3\n"));
	ck_assert(strstr(out, "sinkwatch_process_cpu_seconds_total 15\n"));
}
END_TEST

/* Issue 26 item 12: localhost is bound as 127.0.0.1, nothing else changes. */
START_TEST(test_bind_endpoint)
{
	char b[64];
	ck_assert_str_eq(swp_bind_endpoint("tcp://localhost:5710", b, sizeof(b)),
	    "tcp://127.0.0.1:5710");
	ck_assert_str_eq(swp_bind_endpoint("ws://localhost:80/sw", b, sizeof(b)),
	    "ws://127.0.0.1:80/sw");
	ck_assert_str_eq(swp_bind_endpoint("wss://localhost:443", b, sizeof(b)),
	    "wss://127.0.0.1:443");
	const char *same[] = { "tcp://127.0.0.1:5710", "tcp://*:5710", "tcp://localhostx:1",
	    "tcp://lo:5710", "ipc:///tmp/localhost:1", "inproc://localhost:1", "localhost:1",
	    "tcp://[::1]:5710", "tcp://localhost" };
	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		ck_assert_ptr_eq(swp_bind_endpoint(same[i], b, sizeof(b)), same[i]);
	/* never cut: a buffer too small leaves it as it is */
	char small[12];
	const char *lh = "tcp://localhost:5710";
	ck_assert_ptr_eq(swp_bind_endpoint(lh, small, sizeof(small)), lh);
}
END_TEST

START_TEST(test_config)
{
	swd_config c;
	char err[512];
	swd_config_defaults(&c);
	ck_assert_str_eq(c.listen, SWD_DEFAULT_LISTEN);
	ck_assert_str_eq(c.control, SWD_DEFAULT_CONTROL);
	ck_assert_str_eq(c.data_dir, "./sinkwatch-data");
	ck_assert_int_eq(c.flush_ms, 500);
	ck_assert_int_eq(c.budget_mb, 512);
	ck_assert_int_eq(c.log_level, LOG_INFO);
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&c, "data-dir", "/x", err, sizeof(err)), 0);
	ck_assert_str_eq(c.data_dir, "/x");
	ck_assert_int_eq(swd_config_set(&c, "flush_ms", "5", err, sizeof(err)), -1);
	ck_assert(strstr(err, "flush_ms: 5 is outside [10, 60000]"));
	ck_assert_int_eq(swd_config_set(&c, "budget_mb", "12x", err, sizeof(err)), -1);
	ck_assert(strstr(err, "not an integer"));
	ck_assert_int_eq(swd_config_set(&c, "log_level", "loud", err, sizeof(err)), -1);
	ck_assert_int_eq(swd_config_set(&c, "log_level", "debug", err, sizeof(err)), 0);
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	/* umask is octal, like umask(1) */
	ck_assert_int_eq(c.umask, 022);
	ck_assert_int_eq(swd_config_set(&c, "umask", "077", err, sizeof(err)), 0);
	ck_assert_int_eq(c.umask, 077);
	ck_assert_int_eq(swd_config_set(&c, "umask", "999", err, sizeof(err)), -1);
	ck_assert(strstr(err, "umask: '999' is not an octal integer"));
	ck_assert_int_eq(swd_config_set(&c, "umask", "1000", err, sizeof(err)), -1);
	/* isa: a name of the metric core's kernels; the CPU is the start's check */
	ck_assert_str_eq(c.isa, "auto");
	ck_assert_int_eq(swd_config_set(&c, "isa", "avx2", err, sizeof(err)), 0);
	ck_assert_str_eq(c.isa, "avx2");
	ck_assert_int_eq(swd_config_set(&c, "isa", "sse9", err, sizeof(err)), -1);
	ck_assert(strstr(err, "isa: 'sse9' is not auto, avx512, avx2 or generic"));
	ck_assert_str_eq(c.isa, "avx2");
	ck_assert_int_eq(swd_config_set(&c, "isa", "auto", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&c, "nope", "1", err, sizeof(err)), -1);
	ck_assert(strstr(err, "unknown option 'nope'"));
	char big[2000];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ck_assert_int_eq(swd_config_set(&c, "listen", big, err, sizeof(err)), -1);
	ck_assert_int_eq(swd_config_set(&c, "control", c.listen, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);
	ck_assert(strstr(err, "same endpoint"));
	swd_config_defaults(&c);
	c.max_message_mb = c.budget_mb + 1;
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);

	/* print, load back: the same configuration */
	char path[] = "/tmp/swconfXXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	swd_config_defaults(&c);
	swd_config_set(&c, "data_dir", "/some where/d", err, sizeof(err));
	swd_config_set(&c, "pair_rows", "3", err, sizeof(err));
	swd_config_print(&c, f);
	fclose(f);
	swd_config d;
	swd_config_defaults(&d);
	ck_assert_int_eq(swd_config_load(&d, path, err, sizeof(err)), 0);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	/* errors name file and line */
	f = fopen(path, "w");
	fputs("# c\n\nworkers = 2\nworkers 3\n", f);
	fclose(f);
	ck_assert_int_eq(swd_config_load(&d, path, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, ":4: expected 'name = value'"), "%s", err);
	f = fopen(path, "w");
	fputs("batch = 0\n", f);
	fclose(f);
	ck_assert_int_eq(swd_config_load(&d, path, err, sizeof(err)), -1);
	ck_assert(strstr(err, ":1: batch: 0 is outside"));
	/* a NUL byte is named, the last line without a newline too (issue 27) */
	static const char nul1[] = "workers = 2\nbatch = 6\0 4\n", nul2[] = "workers = 2\0";
	const char *nul[] = { nul1, nul2 };
	const size_t nuln[] = { sizeof(nul1) - 1, sizeof(nul2) - 1 };
	const char *where[] = { ":2: NUL byte", ":1: NUL byte" };
	for (int k = 0; k < 2; k++) {
		f = fopen(path, "w");
		fwrite(nul[k], 1, nuln[k], f);
		fclose(f);
		ck_assert_int_eq(swd_config_load(&d, path, err, sizeof(err)), -1);
		ck_assert_msg(strstr(err, where[k]), "%s", err);
	}
	unlink(path);
	ck_assert_int_eq(swd_config_load(&d, "/nonexistent/x.conf", err, sizeof(err)), -1);
	ck_assert(strstr(err, "No such file"));
	/* beyond loopback: CURVE keys, or the insecure flag */
	const char *local[] = { "tcp://127.0.0.1:5710", "tcp://127.9.0.1:1", "tcp://localhost:5",
	    "tcp://[::1]:5710", "ipc:///run/sw.sock", "inproc://x", "ws://127.0.0.1:80" };
	const char *beyond[] = { "tcp://0.0.0.0:5710", "tcp://*:5710", "tcp://10.0.0.2:5710",
	    "tcp://eth0:5710", "tcp://[::]:5710", "tcp://host.example:1", "tcp://127.0.0.1",
	    "tcp://127.0.0.1.5:1", "tcp://128.0.0.1:1", "tcp://[::1]5", "pgm://eth0;239.1.1.1:5",
	    "tcp://127.0.0.1;10.0.0.1:5", "tcp://:5", "" };
	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		ck_assert_msg(swp_endpoint_local(local[i]), "%s", local[i]);
	for (size_t i = 0; i < sizeof(beyond) / sizeof(beyond[0]); i++)
		ck_assert_msg(!swp_endpoint_local(beyond[i]), "%s", beyond[i]);
	swd_config_defaults(&c);
	ck_assert_str_eq(c.curve_secret_file, "");
	ck_assert_int_eq(c.insecure_off_loopback, 0);
	swd_config_set(&c, "listen", "tcp://0.0.0.0:5710", err, sizeof(err));
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "tcp://0.0.0.0:5710 is beyond loopback and CURVE is off") &&
	    strstr(err, "--curve-secret-file FILE and --curve-allow FILE") &&
	    strstr(err, "--insecure-off-loopback 1"), "%s", err);
	swd_config_set(&c, "insecure-off-loopback", "1", err, sizeof(err));
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), 0);
	swd_config_set(&c, "insecure-off-loopback", "0", err, sizeof(err));
	swd_config_set(&c, "listen", SWD_DEFAULT_LISTEN, err, sizeof(err));
	swd_config_set(&c, "control", "tcp://*:5711", err, sizeof(err));
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);
	ck_assert(strstr(err, "tcp://*:5711 is beyond loopback"));
	swd_config_set(&c, "curve_secret_file", "/k/server.key", err, sizeof(err));
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);
	ck_assert(strstr(err, "curve_secret_file and curve_allow go together"));
	swd_config_set(&c, "curve_allow", "/k/allow", err, sizeof(err));
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), 0);
	/* the limits of new runs */
	swd_config_defaults(&c);
	ck_assert_int_eq(c.new_runs_per_s, 10);
	ck_assert_int_eq(c.new_runs_burst, 100);
	ck_assert_int_eq(swd_config_set(&c, "new_runs_burst", "0", err, sizeof(err)), -1);
	ck_assert_int_eq(swd_config_set(&c, "new_runs_per_s", "0", err, sizeof(err)), 0);
	/* the table */
	ck_assert(swd_config_count() >= 18);
	for (size_t i = 0; i < swd_config_count(); i++)
		ck_assert(swd_config_name(i) && swd_config_help(i) && swd_config_default(i));
	ck_assert_ptr_null(swd_config_name(swd_config_count()));
}
END_TEST

/* --subscribe is repeatable, --connect replaces the bind; both in the status */
START_TEST(test_subscribe)
{
	swd_config c, d;
	char err[512], big[200], out[8192];

	swd_config_defaults(&c);
	ck_assert_str_eq(c.subscribe, "");
	ck_assert_str_eq(c.connect, "");
	ck_assert_int_eq(swd_config_set(&c, "subscribe", "a/", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&c, "subscribe", "b c", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&c, "subscribe", "a/", err, sizeof(err)), 0);	/* once */
	ck_assert_int_eq(swd_config_set(&c, "subscribe", "", err, sizeof(err)), 0);	/* nothing */
	ck_assert_str_eq(c.subscribe, "a/\nb c");
	ck_assert_int_eq(swd_config_set(&c, "subscribe", "x\ty", err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "subscribe: byte 0x09 at 1"), "%s", err);
	memset(big, 'r', 129);
	big[129] = '\0';
	ck_assert_int_eq(swd_config_set(&c, "subscribe", big, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "longer than a run id"), "%s", err);
	big[128] = '\0';
	ck_assert_int_eq(swd_config_set(&c, "subscribe", big, err, sizeof(err)), 0);
	ck_assert_str_eq(c.subscribe + 7, big);
	swd_config_defaults(&d);
	for (int i = 0; i < SWD_LIST_MAX; i++) {
		char p[16];
		snprintf(p, sizeof(p), "p%d/", i);
		ck_assert_int_eq(swd_config_set(&d, "subscribe", p, err, sizeof(err)), 0);
	}
	ck_assert_int_eq(swd_config_set(&d, "subscribe", "one-more", err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "more than 64 prefixes"), "%s", err);

	/* printed one line per prefix, loaded back the same */
	char path[] = "/tmp/swconfXXXXXX";
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	ck_assert_int_eq(swd_config_set(&c, "connect", "tcp://127.0.0.1:5720", err, sizeof(err)),
	    0);
	swd_config_print(&c, f);
	fclose(f);
	swd_config_defaults(&d);
	ck_assert_int_eq(swd_config_load(&d, path, err, sizeof(err)), 0);
	unlink(path);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), 0);
	/* connecting, listen is not bound: it may equal control; connect may not */
	ck_assert_int_eq(swd_config_set(&c, "listen", c.control, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&c, "connect", c.control, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "connect and control are the same endpoint"), "%s", err);
	/* a forwarder on another host: the hop needs CURVE, or the insecure flag */
	swd_config d2 = c;
	ck_assert_int_eq(swd_config_set(&d2, "connect", "tcp://fwd:5720", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "tcp://fwd:5720 is beyond loopback and the hop to it is plain"),
	    "%s", err);
	/* the forwarder's key from the environment, as the hop takes it: CURVE */
	setenv("SINKWATCH_SERVER_KEY", "/k/fwd.pub", 1);
	ck_assert_msg(swd_config_check(&d2, err, sizeof(err)) == 0, "%s", err);
	setenv("SINKWATCH_SERVER_KEY", "", 1);	/* set but empty: unset */
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), -1);
	unsetenv("SINKWATCH_SERVER_KEY");
	ck_assert_int_eq(swd_config_set(&d2, "insecure_off_loopback", "1", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&d2, "insecure_off_loopback", "0", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&d2, "connect_server_key", "/k/fwd.pub", err,
	    sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "connect_server_key needs curve_secret_file"), "%s", err);
	ck_assert_int_eq(swd_config_set(&d2, "curve_secret_file", "/k/d.key", err, sizeof(err)),
	    0);
	ck_assert_int_eq(swd_config_set(&d2, "curve_allow", "/k/ops", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_set(&d2, "connect", "", err, sizeof(err)), 0);
	ck_assert_int_eq(swd_config_check(&d2, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "give connect too"), "%s", err);

	swd_status_run runs[1];
	swd_status st = sample(runs);
	st.connect = "tcp://fwd:5720";
	st.subscribe = "a/\nb c";
	swd_control_reply("status server", 13, &st, out, sizeof(out));
	ck_assert_msg(strstr(out, "\nconnect: tcp://fwd:5720\nsubscribe: a/\nsubscribe: b c\n"),
	    "%s", out);
	st.connect = NULL;
	st.subscribe = NULL;	/* every run */
	swd_control_reply("status server", 13, &st, out, sizeof(out));
	ck_assert_msg(!strstr(out, "connect:") && strstr(out, "\nsubscribe: \n"), "%s", out);
}
END_TEST

START_TEST(test_log)
{
	ck_assert_int_eq(log_level_parse("warn"), LOG_WARN);
	ck_assert_int_eq(log_level_parse("x"), -1);
	ck_assert_str_eq(log_level_name(LOG_ERR), "error");
	ck_assert_str_eq(log_level_name(9), "?");
	char path[] = "/tmp/swlogXXXXXX";
	int fd = mkstemp(path);
	close(fd);
	ck_assert_int_eq(log_open(path), 0);
	log_set_level(LOG_INFO);
	log_info("hello %d", 1);
	log_debug("hidden");
	/* rotate: move the file away, reopen, log again */
	char moved[64];
	snprintf(moved, sizeof(moved), "%s.1", path);
	rename(path, moved);
	ck_assert_int_eq(log_reopen(), 0);
	log_warn("after");
	log_open(NULL);
	char buf[512];
	FILE *f = fopen(moved, "r");
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	ck_assert(strstr(buf, "sinkwatchd info: hello 1"));
	ck_assert(!strstr(buf, "hidden"));
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	ck_assert(strstr(buf, "sinkwatchd warn: after"));
	unlink(path);
	unlink(moved);
}
END_TEST

/* The default endpoints agree: the daemon's options, the tools' (net/) and
 * the client library's header, three spellings of one default. */
START_TEST(test_default_endpoints)
{
	swd_config c;
	swd_config_defaults(&c);
	ck_assert_str_eq(c.listen, SWN_DEFAULT_ENDPOINT);
	ck_assert_str_eq(c.control, SWN_DEFAULT_CONTROL);
	ck_assert_str_eq(SW_CLIENT_DEFAULT_ENDPOINT, SWN_DEFAULT_ENDPOINT);
}
END_TEST

/* swd_read_config: the defaults, the --config file over them, the other
 * options over the file (either spelling), and errors that name the option. */
START_TEST(test_read_config)
{
	char path[] = "/tmp/swrcXXXXXX", err[256], cfgopt[64];
	int fd = mkstemp(path);
	ck_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs("workers = 3\npair_rows = 7\n", f);
	fclose(f);
	swd_config c, dflt;
	swd_config_defaults(&dflt);
	snprintf(cfgopt, sizeof(cfgopt), "--config=%s", path);
	char *argv1[] = { "sinkwatchd", "--pair-rows", "9", cfgopt, NULL };
	ck_assert_int_eq(swd_read_config(4, argv1, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.workers, 3);		/* the file's */
	ck_assert_int_eq(c.pair_rows, 9);	/* the command line's, after the file */
	ck_assert_int_eq(c.budget_mb, dflt.budget_mb);
	char *argv2[] = { "sinkwatchd", "--config", path, "--workers=5", NULL };
	ck_assert_int_eq(swd_read_config(4, argv2, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.workers, 5);
	ck_assert_int_eq(c.pair_rows, 7);
	ck_assert_str_eq(c.isa, "auto");
	char *argvi[] = { "sinkwatchd", "--isa", "generic", NULL };
	ck_assert_int_eq(swd_read_config(3, argvi, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.isa, "generic");
	char *argvj[] = { "sinkwatchd", "--isa=avx1024", NULL };
	ck_assert_int_eq(swd_read_config(2, argvj, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "'avx1024' is not auto, avx512, avx2 or generic") != NULL, "%s",
	    err);
	char *argv3[] = { "sinkwatchd", "--no-such-option", "1", NULL };
	ck_assert_int_eq(swd_read_config(3, argv3, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "no-such-option") != NULL, "%s", err);
	char *argv4[] = { "sinkwatchd", "--workers", NULL };
	ck_assert_int_eq(swd_read_config(2, argv4, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "--workers needs a value") != NULL, "%s", err);
	/* an option not in the table is unknown, whether a value follows or not
	 * (issue 29 item 5.4: it said "--versoin needs a value") */
	char *argv6[] = { "sinkwatchd", "--versoin", NULL };
	ck_assert_int_eq(swd_read_config(2, argv6, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "unknown option '--versoin'") != NULL, "%s", err);
	char *argv7[] = { "sinkwatchd", "--no-such=1", NULL };
	ck_assert_int_eq(swd_read_config(2, argv7, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "unknown option '--no-such'") != NULL, "%s", err);
	unlink(path);
	char *argv5[] = { "sinkwatchd", "--config", path, NULL };
	ck_assert_int_eq(swd_read_config(3, argv5, &c, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, path) != NULL, "%s", err);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("status");
	TCase *tc = tcase_create("status");
	tcase_add_test(tc, test_reply);
	tcase_add_test(tc, test_cpu);
	tcase_add_test(tc, test_long_lists);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_read_config);
	tcase_add_test(tc, test_default_endpoints);
	tcase_add_test(tc, test_bind_endpoint);
	tcase_add_test(tc, test_log);
	tcase_add_test(tc, test_subscribe);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
