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
#include "daemon/log.h"
#include "daemon/status.h"

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
	    "step 5 layer 1 heads 2-3 missing (rank 1)" };
	st.nruns = 1;
	st.runs = runs;
	static swd_status_sender snd[2];
	snd[0] = (swd_status_sender){ "r1", 77, 0, 2, 11, 0, 0, 0, 0, 0, 0, 0, 0, 11, 1 };
	snd[1] = (swd_status_sender){ "r1", 77, 1, 2, 10, 1, 3, 1, 2, 4, 5, 2, 6, 12, 0 };
	st.nsenders = 2;
	st.senders = snd;
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
	const char *secs[] = { "# server", "# runs", "# senders", "# traffic", "# drops", "# rejects",
	    "# queue", "# writer", "# loop", "# cpu" };
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
	    "after_end=0 seq_next=11 ended=1\nsender: r1 inc=77 rank=1/2 messages=10 lost=1 "
	    "duplicates=3 disagree=1 uncompared=2 overlaps=4 mismatches=5 missing=2 "
	    "after_end=6 seq_next=12 ended=0\n"));
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
	ck_assert(strstr(out, "sections: server runs senders traffic drops rejects queue writer "
	    "loop cpu"));
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
	ck_assert_uint_eq(strlen(small), 15);
	ck_assert_uint_eq(swd_control_reply("status", 6, &st, small, 0), 0);
	for (int i = 0; i < SWD_DROP_REASONS; i++)
		ck_assert(swd_drop_names[i] && *swd_drop_names[i]);
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
	ck_assert(strstr(out, "\nkernel_s: 2.500000\nkernel_ms_per_message: 12.5000\n"));
	ck_assert(strstr(out, "\nwrite_s: 3.500000\nwrite_ms_per_message: 17.5000\n"));
	ck_assert(strstr(out, "\nstages_s: 14.000000\nstages_ms_per_message: 70.0000\n"
	    "process_s: 15.000000\n"));
	/* no message yet: per message 0, not a division by zero */
	st.messages = 0;
	swd_control_reply("status cpu", 10, &st, out, sizeof(out));
	ck_assert(strstr(out, "\nkernel_ms_per_message: 0.0000\n"));
	/* Prometheus: one counter family, a sample per stage */
	st.messages = 200;
	swd_metrics_text(&st, out, sizeof(out));
	ck_assert(strstr(out, "# TYPE sinkwatch_stage_cpu_seconds_total counter\n"));
	ck_assert(strstr(out, "sinkwatch_stage_cpu_seconds_total{stage=\"drift\"} 3\n"));
	ck_assert(strstr(out, "sinkwatch_process_cpu_seconds_total 15\n"));
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
	unlink(path);
	ck_assert_int_eq(swd_config_load(&d, "/nonexistent/x.conf", err, sizeof(err)), -1);
	ck_assert(strstr(err, "No such file"));
	/* the table */
	ck_assert(swd_config_count() >= 18);
	for (size_t i = 0; i < swd_config_count(); i++)
		ck_assert(swd_config_name(i) && swd_config_help(i) && swd_config_default(i));
	ck_assert_ptr_null(swd_config_name(swd_config_count()));
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

int
main(void)
{
	Suite *s = suite_create("status");
	TCase *tc = tcase_create("status");
	tcase_add_test(tc, test_reply);
	tcase_add_test(tc, test_cpu);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_log);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
