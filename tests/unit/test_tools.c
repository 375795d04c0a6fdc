/*
 * test_tools.c: parts of the tools that need no file: the JSON strings of
 * ids that are not UTF-8 (report/json.c, issue 26 item 10) and the ranks
 * that never ended, against the sender table's senders (report/runagg.c,
 * issue 26 item 4).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/json.h"
#include "report/runagg.h"
#include "report/swreport.h"

/* The JSON document of one string value, NUL-terminated (the caller frees it). */
static char *
json_of(const char *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	sw_json j;
	sw_json_init(&j, f);
	sw_json_str(&j, NULL, s);
	fclose(f);
	return buf;
}

static void
same_json(const char *in, const char *want)
{
	char *got = json_of(in);
	ck_assert_msg(!strcmp(got, want), "got %s, want %s", got, want);
	free(got);
}

START_TEST(test_json_utf8)
{
	same_json("run-1", "\"run-1\"");
	same_json("a\"b\\c\n\t\r\x01", "\"a\\\"b\\\\c\\n\\t\\r\\u0001\"");
	/* well-formed UTF-8 is copied: 2, 3 and 4 byte forms, the edges */
	same_json("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
	same_json("\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf",
	    "\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xf4\x8f\xbf\xbf\"");
	/* every other byte as \udcXX, as Python's surrogateescape decodes it */
	same_json("run-\xff\xfe", "\"run-\\udcff\\udcfe\"");
	same_json("\x80", "\"\\udc80\"");			/* a lone continuation byte */
	same_json("\xc0\xaf", "\"\\udcc0\\udcaf\"");		/* overlong */
	same_json("\xe0\x80\xaf", "\"\\udce0\\udc80\\udcaf\"");	/* overlong, 3 bytes */
	same_json("\xed\xa0\x80", "\"\\udced\\udca0\\udc80\"");	/* a surrogate */
	same_json("\xf4\x90\x80\x80", "\"\\udcf4\\udc90\\udc80\\udc80\"");	/* > U+10FFFF */
	same_json("\xf5\x80", "\"\\udcf5\\udc80\"");
	/* cut short: at the end, and before ASCII (which is kept) */
	same_json("x\xe2\x82", "\"x\\udce2\\udc82\"");
	same_json("\xe2\x82y\xc3", "\"\\udce2\\udc82y\\udcc3\"");
	same_json("\xf0\x9f\x98", "\"\\udcf0\\udc9f\\udc98\"");
	/* a bad byte, then a good sequence */
	same_json("\xff\xc3\xa9", "\"\\udcff\xc3\xa9\"");
}
END_TEST

/* A sender table row: inc, rank, senders, ended (the other fields 0). */
static void
row(uint64_t *t, int k, uint64_t inc, uint64_t rank, uint64_t senders, uint64_t ended)
{
	uint64_t *v = t + (size_t)k * SW_SENDER_FIELDS;
	memset(v, 0, SW_SENDER_FIELDS * sizeof(*v));
	v[SW_S_INC] = inc;
	v[SW_S_RANK] = rank;
	v[SW_S_SENDERS] = senders;
	v[SW_S_ENDED] = ended;
}

START_TEST(test_ranks_not_ended)
{
	uint64_t t[8 * SW_SENDER_FIELDS];
	sw_open_rank *o;

	/* only rank 0 of 2 sent, and ended: rank 1 is named, never sent */
	row(t, 0, 7, 0, 2, 1);
	ck_assert_int_eq(sw_ranks_not_ended(t, 1, &o), 1);
	ck_assert(o[0].inc == 7 && o[0].rank == 1 && o[0].senders == 2 && !o[0].sent);
	free(o);
	/* two processes both claimed rank 0: one row, not ended; rank 1 none */
	row(t, 0, 7, 0, 2, 0);
	ck_assert_int_eq(sw_ranks_not_ended(t, 1, &o), 2);
	ck_assert(o[0].rank == 0 && o[0].sent && o[1].rank == 1 && !o[1].sent);
	free(o);
	/* ranks in different incarnations: each lacks the other rank */
	row(t, 0, 9, 1, 2, 1);
	row(t, 1, 8, 0, 2, 1);
	ck_assert_int_eq(sw_ranks_not_ended(t, 2, &o), 2);
	ck_assert(o[0].inc == 8 && o[0].rank == 1 && !o[0].sent);
	ck_assert(o[1].inc == 9 && o[1].rank == 0 && !o[1].sent);
	free(o);
	/* every rank ended, in any order; single-sender incarnations are not named */
	row(t, 0, 5, 2, 3, 1);
	row(t, 1, 5, 0, 3, 1);
	row(t, 2, 5, 1, 3, 1);
	row(t, 3, 4, 0, 1, 0);
	ck_assert_int_eq(sw_ranks_not_ended(t, 4, &o), 0);
	free(o);
	/* the largest senders of an incarnation's rows counts */
	row(t, 0, 5, 0, 2, 1);
	row(t, 1, 5, 1, 3, 1);
	ck_assert_int_eq(sw_ranks_not_ended(t, 2, &o), 1);
	ck_assert(o[0].rank == 2 && o[0].senders == 3);
	free(o);
	ck_assert_int_eq(sw_ranks_not_ended(NULL, 0, &o), 0);
	free(o);
}
END_TEST

/* Issue 27, item 4: text for a terminal: no control character gets through. */
/* The report options that cannot go together: one check, for the command
 * line and the reader's library alike. */
START_TEST(test_opts_check)
{
	sw_rep_opts o;
	char err[256];

	memset(&o, 0, sizeof(o));
	o.eps = SW_CLASS_EPS_DEFAULT;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), 0);
	o.range.last = 3;
	o.range.has_to = 1;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), 0);
	o.range.has_from = 1;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "not with --from"));
	o.range.has_from = 0;
	o.range.last = -1;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "--last"));
	o.range.last = 0;
	o.range.has_last = 1;	/* --last 0 */
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "--last: '0' is not a positive number of steps");
	o.range.has_last = 0;
	o.eps = -0.5;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "--eps"));
	o.eps = NAN;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), -1);
	o.eps = 0;
	ck_assert_int_eq(sw_rep_opts_check(&o, err, sizeof(err)), 0);
}
END_TEST

START_TEST(test_text_safe)
{
	char b[SW_TEXT_SAFE(64)];
	ck_assert_str_eq(sw_text_safe("gpt-small/seed1", b, sizeof(b)), "gpt-small/seed1");
	ck_assert_str_eq(sw_text_safe("caf\xc3\xa9 \xe2\x9c\x93", b, sizeof(b)),
	    "caf\xc3\xa9 \xe2\x9c\x93");	/* UTF-8 as it is */
	ck_assert_str_eq(sw_text_safe("a\x1b]0;pwned\x07" "b", b, sizeof(b)),
	    "a\\x1b]0;pwned\\x07b");	/* ESC, BEL: a title sequence, defused */
	ck_assert_str_eq(sw_text_safe("x\x7f\ty\n", b, sizeof(b)), "x\\x7f\\x09y\\x0a");
	ck_assert_str_eq(sw_text_safe("\xc2\x9b" "2J", b, sizeof(b)), "\\xc2\\x9b2J");	/* C1 CSI */
	ck_assert_str_eq(sw_text_safe("r\xff\\", b, sizeof(b)), "r\\xff\\x5c");
	/* cut at a whole character, always terminated */
	char small[6];
	ck_assert_str_eq(sw_text_safe("ab\x1b" "cd", small, sizeof(small)), "ab");
	ck_assert_str_eq(sw_text_safe("abcdefgh", small, sizeof(small)), "abcde");
}
END_TEST

/* Issue 29, item 5: --group-by names run attributes; the default stays
 * model and params; a key named twice counts once; an unknown key is refused
 * with the known ones named. */
START_TEST(test_group_by)
{
	sw_rep_opts o;
	enum sw_group_key k[SW_GK__N];
	char err[512];
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(sw_rep_group_keys(&o, k), 2);
	ck_assert(k[0] == SW_GK_MODEL && k[1] == SW_GK_PARAMS);
	ck_assert_int_eq(sw_rep_group_parse("run,model,params,run,dir", &o, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_rep_group_keys(&o, k), 4);
	ck_assert(k[0] == SW_GK_RUN && k[1] == SW_GK_MODEL && k[2] == SW_GK_PARAMS &&
	    k[3] == SW_GK_DIR);
	ck_assert_int_eq(sw_rep_group_parse("model,seed", &o, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "'seed' is not a run attribute"));
	ck_assert_ptr_nonnull(strstr(err, "model, params, run, dir, kind"));
	ck_assert_int_eq(sw_rep_group_parse("", &o, err, sizeof(err)), -1);
	ck_assert_int_eq(sw_rep_group_parse("mod", &o, err, sizeof(err)), -1);

	sw_rep_run e;
	char v[64];
	memset(&e, 0, sizeof(e));
	e.file = "data/sweep/a.h5";
	snprintf(e.meta.run, sizeof(e.meta.run), "fam/seed1");
	e.meta.params = 70000000;
	e.meta.fixed_probe = 1;
	sw_rep_group_value(&e, SW_GK_DIR, v, sizeof(v));
	ck_assert_str_eq(v, "data/sweep");
	sw_rep_group_value(&e, SW_GK_RUN, v, sizeof(v));
	ck_assert_str_eq(v, "fam/seed1");
	sw_rep_group_value(&e, SW_GK_PARAMS, v, sizeof(v));
	ck_assert_str_eq(v, "70000000");
	sw_rep_group_value(&e, SW_GK_PROBE, v, sizeof(v));
	ck_assert_str_eq(v, "fixed");
	e.file = "a.h5";
	sw_rep_group_value(&e, SW_GK_DIR, v, sizeof(v));
	ck_assert_str_eq(v, ".");
	e.file = "/a.h5";
	sw_rep_group_value(&e, SW_GK_DIR, v, sizeof(v));
	ck_assert_str_eq(v, "/");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("tools");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_json_utf8);
	tcase_add_test(tc, test_ranks_not_ended);
	tcase_add_test(tc, test_text_safe);
	tcase_add_test(tc, test_opts_check);
	tcase_add_test(tc, test_group_by);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
