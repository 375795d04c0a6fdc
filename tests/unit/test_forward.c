/*
 * test_forward.c: the bookkeeping of `sinkwatch forward` (forward/fwdcore.h)
 * without sockets: which messages pass, the subscription table, the
 * control replies. tests/e2e/forward.py runs the forwarder itself.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/swkeys.h"
#include "forward/fwdcore.h"

START_TEST(test_check)
{
	size_t ok3[] = { 10, 200, 1000 }, ok2[] = { 10, 200 }, big[] = { 10, 200, 1001 };
	size_t bighdr[] = { 10, 1001 }, four[] = { 1, 1, 1, 1 };
	ck_assert_int_eq(sw_fwd_check(ok3, 3, 1000), -1);
	ck_assert_int_eq(sw_fwd_check(ok2, 2, 1000), -1);
	ck_assert_int_eq(sw_fwd_check(big, 3, 1000), SW_FWD_TOO_LARGE);
	ck_assert_int_eq(sw_fwd_check(bighdr, 2, 1000), SW_FWD_TOO_LARGE);
	ck_assert_int_eq(sw_fwd_check(ok3, 1, 1000), SW_FWD_FRAMES);
	ck_assert_int_eq(sw_fwd_check(four, 4, 1000), SW_FWD_FRAMES);
	ck_assert_int_eq(sw_fwd_check(four, 0, 1000), SW_FWD_FRAMES);
	for (int i = 0; i < SW_FWD_REASONS; i++)
		ck_assert(sw_fwd_reason_names[i] && sw_fwd_reason_names[i][0]);
}
END_TEST

START_TEST(test_subs)
{
	sw_fwd_subs *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	ck_assert(!sw_fwd_subs_match(s, "sw/a/1", 6));	/* nobody: nothing matches */
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x01sw/a/", 6), 1);
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x01sw/b", 5), 1);
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x01sw/a/", 6), 1);	/* kept once */
	ck_assert_uint_eq(s->n, 2);
	ck_assert(sw_fwd_subs_match(s, "sw/a/1", 6));
	ck_assert(sw_fwd_subs_match(s, "sw/a/", 5));
	ck_assert(!sw_fwd_subs_match(s, "sw/a", 4));	/* shorter than the prefix */
	ck_assert(sw_fwd_subs_match(s, "sw/beta", 7));
	ck_assert(!sw_fwd_subs_match(s, "sw/c", 4));
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x00sw/a/", 6), 0);
	ck_assert(!sw_fwd_subs_match(s, "sw/a/1", 6));
	ck_assert(sw_fwd_subs_match(s, "sw/b", 4));
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x00sw/zz", 6), 0);	/* unknown: harmless */
	ck_assert_uint_eq(s->n, 1);
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x02sw/", 4), -1);	/* not a subscription */
	ck_assert_int_eq(sw_fwd_subs_apply(s, "", 0), -1);
	ck_assert_int_eq(s->subscribed, 3);
	ck_assert_int_eq(s->unsubscribed, 2);
	/* the empty prefix matches every topic */
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x01", 1), 1);
	ck_assert(sw_fwd_subs_match(s, "sw/q", 4));
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x00", 1), 0);
	ck_assert(!sw_fwd_subs_match(s, "sw/q", 4));
	/* past the table's bounds: untracked, and then every topic matches */
	char big[SW_FWD_PREFIX_MAX + 2];
	memset(big, 'x', sizeof(big));
	big[0] = 1;
	ck_assert_int_eq(sw_fwd_subs_apply(s, big, sizeof(big)), 1);
	ck_assert(s->untracked && sw_fwd_subs_match(s, "sw/q", 4));
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < SW_FWD_SUBS_MAX; i++) {
		char p[16];
		int n = snprintf(p, sizeof(p), "\x01sw/%d", i);
		ck_assert_int_eq(sw_fwd_subs_apply(s, p, (size_t)n), 1);
	}
	ck_assert(!s->untracked && !sw_fwd_subs_match(s, "sw/x", 4));
	ck_assert_int_eq(sw_fwd_subs_apply(s, "\x01sw/x", 5), 1);
	ck_assert(s->untracked && sw_fwd_subs_match(s, "sw/x", 4));
	free(s);
}
END_TEST

START_TEST(test_reply)
{
	sw_fwd_subs *s = calloc(1, sizeof(*s));
	sw_fwd_stats st;
	char out[8192];
	memset(&st, 0, sizeof(st));
	st.version = "9.9";
	st.in = "tcp://i:1";
	st.out = "tcp://o:2";
	st.control = "tcp://c:3";
	st.received = 10;
	st.forwarded = 7;
	st.dropped[SW_FWD_TOO_LARGE] = 1;
	st.dropped[SW_FWD_HWM] = 2;
	st.subs = s;
	sw_fwd_subs_apply(s, "\x01sw/a\x01", 6);
	size_t n = sw_fwd_reply("status", 6, &st, out, sizeof(out));
	ck_assert_uint_eq(n, strlen(out));
	const char *secs[] = { "# server", "# auth", "# traffic", "# drops", "# subscriptions" };
	const char *prev = out;
	for (size_t i = 0; i < 5; i++) {
		const char *p = strstr(out, secs[i]);
		ck_assert_msg(p && p >= prev, "section %s missing or out of order", secs[i]);
		prev = p;
	}
	ck_assert(strstr(out, "\nin: tcp://i:1\nout: tcp://o:2\ncontrol: tcp://c:3\n"));
	ck_assert(strstr(out, "\nreceived: 10\n") && strstr(out, "\nforwarded: 7\n"));
	ck_assert(strstr(out, "\ntoo_large: 1\n") && strstr(out, "\nhwm: 2\n"));
	ck_assert(strstr(out, "\ndropped: 3\n"));
	ck_assert_msg(strstr(out, "\nprefixes: 1\n") && strstr(out, "\nprefix: sw/a\\x01\n"),
	    "%s", out);
	n = sw_fwd_reply("status drops\nmore", 17, &st, out, sizeof(out));
	ck_assert(!strncmp(out, "# drops\n", 8) && !strstr(out, "# server"));
	sw_fwd_reply("status nope", 11, &st, out, sizeof(out));
	ck_assert_str_eq(out, "error: unknown section 'nope'\n");
	sw_fwd_reply("reboot", 6, &st, out, sizeof(out));
	ck_assert(!strncmp(out, "error: unknown command 'reboot'", 31));
	sw_fwd_reply("ping", 4, &st, out, sizeof(out));
	ck_assert_str_eq(out, "pong\n");
	sw_fwd_reply("help", 4, &st, out, sizeof(out));
	ck_assert(strstr(out, "sections: server auth traffic drops subscriptions"));
	/* CURVE off: the auth section says so and no more */
	sw_fwd_reply("status auth", 11, &st, out, sizeof(out));
	ck_assert_str_eq(out, "# auth\ncurve: off\n");
	st.curve = 1;
	st.curve_public = "K";
	st.keys = 3;
	st.keys_daemons = 2;
	st.refused_in = 4;
	st.refused_out = 5;
	st.failed_control = 6;
	sw_fwd_reply("status auth", 11, &st, out, sizeof(out));
	ck_assert_msg(strstr(out, "curve: on\npublic_key: K\nallowed_keys: 3\n"
	    "allowed_daemon_keys: 2\nhandshakes_allowed: 0\nrefused_key_in: 4\n"
	    "refused_key_out: 5\nrefused_key_control: 0\nhandshake_failed_in: 0\n"
	    "handshake_failed_out: 0\nhandshake_failed_control: 6\n"), "%s", out);
	/* truncated, never past the buffer */
	char small[16];
	n = sw_fwd_reply("status", 6, &st, small, sizeof(small));
	ck_assert_uint_eq(n, sizeof(small) - 1);
	ck_assert_uint_eq(strlen(small), n);
	ck_assert_uint_eq(sw_fwd_reply("status", 6, &st, small, 0), 0);
	free(s);
}
END_TEST

/*
 * Issue 26 item 12: the server section says since when the counters count
 * (they restart with the forwarder); localhost binds as 127.0.0.1.
 */
START_TEST(test_since_and_bind)
{
	sw_fwd_stats st;
	char out[8192], b[64];
	memset(&st, 0, sizeof(st));
	st.version = "9.9";
	st.in = st.out = st.control = "-";
	st.started = 86400 + 3600 + 61;
	sw_fwd_reply("status server", 13, &st, out, sizeof(out));
	ck_assert_msg(strstr(out, "\nuptime_s: 0.0\ncounters_since: 1970-01-02T01:01:01Z (they "
	    "restart with the forwarder)\nin: -\n"), "%s", out);
	ck_assert_str_eq(swp_bind_endpoint("tcp://localhost:5720", b, sizeof(b)),
	    "tcp://127.0.0.1:5720");
	ck_assert_str_eq(swp_bind_endpoint("ws://localhost:1/x", b, sizeof(b)),
	    "ws://127.0.0.1:1/x");
	const char *same = "tcp://*:5720";
	ck_assert_ptr_eq(swp_bind_endpoint(same, b, sizeof(b)), same);
	same = "tcp://localhost:5720";
	ck_assert_ptr_eq(swp_bind_endpoint(same, b, 8), same);
}
END_TEST

/*
 * The most prefixes, each of bytes written as \xHH: the whole reply fits
 * SW_FWD_REPLY_MAX (the forwarder's buffer), and a smaller buffer (the old
 * 256 KiB) gets whole lines and a line that says it was cut.
 */
START_TEST(test_reply_longest)
{
	sw_fwd_subs *s = calloc(1, sizeof(*s));
	sw_fwd_stats st;
	unsigned char msg[1 + SW_FWD_PREFIX_MAX];
	memset(&st, 0, sizeof(st));
	st.version = "9.9";
	st.in = st.out = st.control = "-";
	st.subs = s;
	for (int i = 0; i < SW_FWD_SUBS_MAX; i++) {
		msg[0] = 1;
		memset(msg + 1, 0x01, SW_FWD_PREFIX_MAX);
		memcpy(msg + 1, &i, sizeof(i));
		ck_assert_int_eq(sw_fwd_subs_apply(s, msg, sizeof(msg)), 1);
	}
	ck_assert_uint_eq(s->n, SW_FWD_SUBS_MAX);
	char *out = malloc(SW_FWD_REPLY_MAX);
	size_t n = sw_fwd_reply("status", 6, &st, out, SW_FWD_REPLY_MAX);
	ck_assert_uint_eq(n, strlen(out));
	ck_assert_uint_gt(n, (size_t)1 << 18);
	ck_assert_uint_lt(n + 1, SW_FWD_REPLY_MAX);
	size_t lines = 0;
	for (const char *p = out; (p = strstr(p, "\nprefix: ")); p++)
		lines++;
	ck_assert_uint_eq(lines, SW_FWD_SUBS_MAX);
	ck_assert(!strstr(out, "\ncut: ") && out[n - 1] == '\n');
	static char small[1 << 18];
	size_t m = sw_fwd_reply("status", 6, &st, small, sizeof(small));
	char want[128];
	snprintf(want, sizeof(want), "\ncut: this reply needs a buffer of %zu bytes, it had %zu\n",
	    n + 1, sizeof(small));
	ck_assert_uint_eq(m, strlen(small));
	ck_assert_msg(m > strlen(want) && !strcmp(small + m - strlen(want), want), "%s",
	    small + m - 200);
	ck_assert(!strncmp(small, out, m - strlen(want) + 1));
	free(out);
	free(s);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("forward");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_check);
	tcase_add_test(tc, test_subs);
	tcase_add_test(tc, test_reply);
	tcase_add_test(tc, test_since_and_bind);
	tcase_add_test(tc, test_reply_longest);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
