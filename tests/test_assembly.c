/*
 * test_assembly.c: step assembly (daemon/assembly.c) driven directly, no
 * sockets, threads or loop: each rule of PROTOCOL.md 7 and 7a with a fast,
 * deterministic case. Layers are stand-ins; what is checked is which steps
 * reach the writer, with which incarnation, and which drops are named.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/assembly.h"

/* The writer's free, for the stand-in layers the assembly owns. */
void
swd_layer_free(swd_layer *l, atomic_llong *inflight)
{
	if (l && inflight)
		atomic_fetch_sub(inflight, (long long)l->bytes);
	free(l);
}

#define MAXOUT 64
static struct out {
	int type;
	int64_t step;
	uint64_t inc;
	uint32_t have;
	char run[SWP_RUN_MAX + 1];
	uint32_t rows;
} out[MAXOUT];
static int nout;
static uint64_t incs_seen[MAXOUT];	/* WQ_INC: named incarnations, first seen */
static int nincs;

static void
emit(void *ud, swd_witem *it)
{
	(void)ud;
	if (it->type == WQ_INC) {
		ck_assert_int_lt(nincs, MAXOUT);
		incs_seen[nincs++] = it->inc;
		free(it);
		return;
	}
	ck_assert_int_lt(nout, MAXOUT);
	struct out *o = &out[nout++];
	o->type = it->type;
	o->step = it->step;
	o->inc = it->inc;
	o->rows = it->meta.rows;
	snprintf(o->run, sizeof(o->run), "%s", it->meta.run);
	o->have = 0;
	for (uint32_t l = 0; it->layers && l < it->meta.layers; l++)
		o->have += it->layers[l] != NULL;
	for (uint32_t l = 0; it->layers && l < it->meta.layers; l++)
		swd_layer_free(it->layers[l], NULL);
	free(it->layers);
	free(it);
}

static swd_asm *
mk(int64_t max_runs)
{
	swd_asm_conf c = { 1000, 16, max_runs, 600, NULL };
	nout = nincs = 0;
	return swd_asm_new(&c, emit, NULL);
}

static swp_msg
msg(const char *run, int64_t step, uint32_t layer, uint64_t inc, uint64_t seq)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	m.type = SWP_SNAPSHOT;
	snprintf(m.run, sizeof(m.run), "%s", run);
	snprintf(m.model, sizeof(m.model), "m");
	m.layers = 2;
	m.heads = 1;
	m.shape[0] = 1;
	m.shape[1] = 4;
	m.shape[2] = 8;
	m.fixed_probe = true;
	m.step = step;
	m.layer = layer;
	m.inc = inc;
	m.seq = seq;
	return m;
}

/* Admits, computes at once and completes one layer; the admit result. */
static int
feed(swd_asm *a, swp_msg m, uint64_t now)
{
	swd_ticket t;
	char why[256];
	int rc = swd_asm_admit(a, &m, now, &t, why, sizeof(why));
	if (rc != SWD_ASM_ACCEPT)
		return rc;
	swd_asm_start(a, &t);
	swd_asm_done(a, &t, calloc(1, sizeof(swd_layer)), now);
	return rc;
}

START_TEST(test_reverse_order)
{
	swd_asm *a = mk(8);
	/* steps arrive in reverse: each is whole, each goes out once */
	for (int s = 4; s >= 0; s--)
		for (uint32_t l = 0; l < 2; l++)
			ck_assert_int_eq(feed(a, msg("r", s * 10, l, 7, 0), 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 5);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(out[i].step, (4 - i) * 10);
		ck_assert_uint_eq(out[i].have, 2);
		ck_assert_uint_eq(out[i].inc, 7);
	}
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_in_order_waits_for_earlier)
{
	swd_asm *a = mk(8);
	/* step 1 whole before step 0 is: it waits, then both go in order */
	feed(a, msg("r", 0, 0, 7, 0), 0);
	feed(a, msg("r", 1, 0, 7, 1), 0);
	feed(a, msg("r", 1, 1, 7, 2), 0);
	ck_assert_int_eq(nout, 0);
	feed(a, msg("r", 0, 1, 7, 3), 0);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[0].step, 0);
	ck_assert_int_eq(out[1].step, 1);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_stalled_step_does_not_hold)
{
	swd_asm_conf c = { 5000, 16, 8, 600, NULL };
	nout = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	/* step 0 gets one layer and stalls; step 1 is whole behind it */
	feed(a, msg("r", 0, 0, 7, 0), 0);
	feed(a, msg("r", 1, 0, 7, 1), 100);
	feed(a, msg("r", 1, 1, 7, 2), 100);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 999);
	ck_assert_int_eq(nout, 0);
	/* a second without input to step 0: step 1 goes, step 0 still waits */
	swd_asm_tick(a, 1000);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 1);
	ck_assert_uint_eq(out[0].have, 2);
	/* step 0's layer arrives: whole, written */
	feed(a, msg("r", 0, 1, 7, 3), 1500);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].step, 0);
	ck_assert_uint_eq(out[1].have, 2);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_duplicate_and_late)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 5, 0, 7, 0), 0);
	ck_assert_int_eq(feed(a, msg("r", 5, 0, 7, 1), 0), SWD_DROP_DUPLICATE);
	feed(a, msg("r", 5, 1, 7, 2), 0);
	ck_assert_int_eq(nout, 1);
	/* the same incarnation after its whole step was written: a duplicate */
	ck_assert_int_eq(feed(a, msg("r", 5, 1, 7, 3), 0), SWD_DROP_DUPLICATE);
	/* another incarnation re-sending it: a new row (the writer supersedes) */
	ck_assert_int_eq(feed(a, msg("r", 5, 0, 8, 0), 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(feed(a, msg("r", 5, 1, 8, 1), 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_eq(out[1].inc, 8);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_incarnations_never_mix)
{
	swd_asm *a = mk(8);
	/* layer 0 of step 3 from inc 7, layer 1 from inc 8: two steps, neither whole */
	feed(a, msg("r", 3, 0, 7, 0), 0);
	feed(a, msg("r", 3, 1, 8, 0), 0);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 999);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 1000);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_eq(out[0].have, 1);
	ck_assert_uint_eq(out[1].have, 1);
	ck_assert_uint_ne(out[0].inc, out[1].inc);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_timeout_from_last_arrival)
{
	swd_asm *a = mk(8);
	swd_ticket t;
	char why[64];
	swp_msg m = msg("r", 0, 0, 7, 0);
	/* a layer in work for longer than the timeout: never given up */
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t);
	swd_asm_tick(a, 5000);
	ck_assert_int_eq(nout, 0);
	swd_asm_done(a, &t, calloc(1, sizeof(swd_layer)), 5000);
	/* the other layer arrives 1.5 timeouts after the first: still whole */
	swd_asm_tick(a, 5500);
	ck_assert_int_eq(nout, 0);
	feed(a, msg("r", 0, 1, 7, 1), 5900);
	ck_assert_int_eq(nout, 1);
	ck_assert_uint_eq(out[0].have, 2);
	/* a step missing a layer goes out a timeout after its last arrival */
	feed(a, msg("r", 1, 0, 7, 2), 6000);
	swd_asm_tick(a, 6999);
	ck_assert_int_eq(nout, 1);
	swd_asm_tick(a, 7000);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_eq(out[1].have, 1);
	/* its missing layer after that: late, named */
	ck_assert_int_eq(feed(a, msg("r", 1, 1, 7, 3), 7100), SWD_DROP_LATE);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_shape_change_is_another_run)
{
	swd_asm *a = mk(8);
	swp_msg m = msg("r", 0, 0, 7, 0);
	feed(a, m, 0);
	feed(a, msg("r", 0, 1, 7, 1), 0);
	/* the same id with another probe shape: its own run, nothing dropped */
	m = msg("r", 0, 0, 9, 0);
	m.shape[1] = 5;
	ck_assert_int_eq(feed(a, m, 0), SWD_ASM_ACCEPT);
	m.layer = 1;
	m.seq = 1;
	ck_assert_int_eq(feed(a, m, 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_eq(out[0].rows, 4);
	ck_assert_uint_eq(out[1].rows, 5);
	swd_asm_run ar[4];
	ck_assert_uint_eq(swd_asm_runs(a, ar, 4), 2);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_full_table_closes_idlest)
{
	swd_asm *a = mk(2);
	feed(a, msg("a", 0, 0, 1, 0), 0);
	feed(a, msg("b", 0, 0, 2, 0), 10);
	/* a third run: "a" (least recently active) is closed, its open step written */
	ck_assert_int_eq(feed(a, msg("c", 0, 0, 3, 0), 20), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_str_eq(out[0].run, "a");
	ck_assert_int_eq(out[1].type, WQ_CLOSE);
	ck_assert_str_eq(out[1].run, "a");
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_end_and_after_end)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 0, 0, 7, 0), 0);
	feed(a, msg("r", 0, 1, 7, 1), 0);
	swp_msg e = msg("r", 0, 0, 7, 2);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].type, WQ_END);
	/* the ended incarnation again: after_end; a new one starts the run again */
	ck_assert_int_eq(feed(a, msg("r", 1, 0, 7, 3), 0), SWD_DROP_AFTER_END);
	ck_assert_int_eq(feed(a, msg("r", 0, 0, 8, 0), 0), SWD_ASM_ACCEPT);
	ck_assert_int_eq(swd_asm_end(a, &e, 0), SWD_ASM_ACCEPT);
	e.run[0] = 'x';
	ck_assert_int_eq(swd_asm_end(a, &e, 0), SWD_DROP_UNKNOWN_RUN);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_implicit_incarnation)
{
	swd_asm *a = mk(8);
	/* senders without inc: seq restarting at 0 is a new incarnation */
	feed(a, msg("r", 0, 0, 0, 0), 0);
	feed(a, msg("r", 0, 1, 0, 1), 0);
	feed(a, msg("r", 0, 0, 0, 0), 0);
	feed(a, msg("r", 0, 1, 0, 1), 0);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_ne(out[0].inc, 0);
	ck_assert_uint_gt(out[1].inc, out[0].inc);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_end_of_one_incarnation)
{
	swd_asm *a = mk(8);
	swd_ticket t;
	char why[64];
	/* A (inc 100) has a layer in work when it ends; B (inc 200) is mid-step */
	swp_msg ma = msg("r", 0, 0, 100, 0);
	ck_assert_int_eq(swd_asm_admit(a, &ma, 0, &t, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t);
	feed(a, msg("r", 1, 0, 200, 0), 0);
	swp_msg e = msg("r", 0, 0, 100, 1);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 10), SWD_ASM_ACCEPT);
	/* B goes on: not after_end; A does not */
	ck_assert_int_eq(feed(a, msg("r", 1, 1, 200, 1), 20), SWD_ASM_ACCEPT);
	ck_assert_int_eq(feed(a, msg("r", 2, 0, 100, 2), 20), SWD_DROP_AFTER_END);
	ck_assert_int_eq(nout, 0);
	/* B's step 1 is whole but waits behind A's step 0 (in work) */
	swd_asm_done(a, &t, calloc(1, sizeof(swd_layer)), 30);
	/* A's step 0 (one layer: its end says no more) and B's step 1, then the end */
	ck_assert_int_eq(nout, 3);
	ck_assert_int_eq(out[0].step, 0);
	ck_assert_uint_eq(out[0].have, 1);
	ck_assert_int_eq(out[1].step, 1);
	ck_assert_uint_eq(out[1].have, 2);
	ck_assert_int_eq(out[2].type, WQ_END);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_full_open_steps_write_whole_first)
{
	swd_asm_conf c = { 10000, 4, 8, 600, NULL };
	nout = nincs = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	/* B's step 0 arriving; A's whole steps 10..12 wait behind it */
	feed(a, msg("r", 0, 0, 200, 0), 0);
	for (int s = 10; s <= 12; s++) {
		feed(a, msg("r", s, 0, 100, (uint64_t)(2 * (s - 10))), (uint64_t)(100 * (s - 9)));
		feed(a, msg("r", s, 1, 100, (uint64_t)(2 * (s - 10) + 1)), (uint64_t)(100 * (s - 9)));
	}
	ck_assert_int_eq(nout, 0);
	/* a fifth step: a whole one makes room, not B's step still arriving */
	feed(a, msg("r", 13, 0, 100, 6), 400);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 10);
	ck_assert_int_eq(feed(a, msg("r", 0, 1, 200, 1), 500), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 4);	/* B's step 0, then 11 and 12 in order */
	ck_assert_int_eq(out[1].step, 0);
	ck_assert_uint_eq(out[1].have, 2);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_named_incarnations_announced)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 0, 0, 100, 5), 0);
	feed(a, msg("r", 0, 1, 100, 6), 0);
	feed(a, msg("r", 1, 0, 0, 0), 0);	/* unnamed: not announced */
	feed(a, msg("r", 1, 0, 300, 9), 0);
	ck_assert_int_eq(nincs, 2);
	ck_assert_uint_eq(incs_seen[0], 100);
	ck_assert_uint_eq(incs_seen[1], 300);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_unnamed_sender_survives_close)
{
	swd_asm *a = mk(1);
	/* an unnamed sender's run is closed (table full) and speaks again */
	feed(a, msg("u", 0, 0, 0, 0), 0);
	feed(a, msg("u", 0, 1, 0, 1), 0);
	feed(a, msg("v", 0, 0, 0, 0), 10);	/* closes u */
	feed(a, msg("u", 1, 0, 0, 2), 20);	/* closes v; u goes on */
	feed(a, msg("u", 1, 1, 0, 3), 20);
	uint64_t first = 0, again = 0;
	for (int i = 0; i < nout; i++)
		if (out[i].type == WQ_STEP && !strcmp(out[i].run, "u")) {
			if (out[i].step == 0)
				first = out[i].inc;
			else
				again = out[i].inc;
		}
	ck_assert_uint_ne(first, 0);
	ck_assert_uint_eq(first, again);	/* the same inferred incarnation */
	swd_asm_run ar[2];
	ck_assert_uint_eq(swd_asm_runs(a, ar, 2), 1);
	ck_assert_int_eq(ar[0].lost, 0);	/* seq 2 follows 1: nothing lost */
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_end_after_idle_close)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 0, 0, 7, 0), 0);
	feed(a, msg("r", 0, 1, 7, 1), 0);
	swd_asm_tick(a, 600000);	/* run_idle_s = 600: closed, not ended */
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].type, WQ_CLOSE);
	swp_msg e = msg("r", 0, 0, 7, 2);
	e.type = SWP_END;
	/* the end comes later: the closed run's file is to be marked, once */
	ck_assert_int_eq(swd_asm_end(a, &e, 700000), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 3);
	ck_assert_int_eq(out[2].type, WQ_END);
	ck_assert_str_eq(out[2].run, "r");
	ck_assert_int_eq(swd_asm_end(a, &e, 700001), SWD_DROP_UNKNOWN_RUN);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_end_keeps_step_order)
{
	swd_asm *a = mk(8);
	swd_ticket t[3];
	char why[64];
	/* three one-layer-short steps in work when the end comes */
	for (int i = 0; i < 3; i++) {
		swp_msg m = msg("r", i, 0, 7, (uint64_t)i);
		ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t[i], why, sizeof(why)), SWD_ASM_ACCEPT);
		swd_asm_start(a, &t[i]);
	}
	swp_msg e = msg("r", 0, 0, 7, 3);
	e.type = SWP_END;
	swd_asm_end(a, &e, 1);
	/* their layers finish in reverse: they still go out 0, 1, 2, then the end */
	for (int i = 2; i >= 0; i--)
		swd_asm_done(a, &t[i], calloc(1, sizeof(swd_layer)), 2);
	ck_assert_int_eq(nout, 4);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(out[i].step, i);
	ck_assert_int_eq(out[3].type, WQ_END);
	swd_asm_free(&a);
}
END_TEST

static Suite *
suite(void)
{
	Suite *s = suite_create("assembly");
	TCase *tc = tcase_create("rules");
	tcase_add_test(tc, test_reverse_order);
	tcase_add_test(tc, test_in_order_waits_for_earlier);
	tcase_add_test(tc, test_stalled_step_does_not_hold);
	tcase_add_test(tc, test_duplicate_and_late);
	tcase_add_test(tc, test_incarnations_never_mix);
	tcase_add_test(tc, test_timeout_from_last_arrival);
	tcase_add_test(tc, test_shape_change_is_another_run);
	tcase_add_test(tc, test_full_table_closes_idlest);
	tcase_add_test(tc, test_end_and_after_end);
	tcase_add_test(tc, test_implicit_incarnation);
	tcase_add_test(tc, test_end_of_one_incarnation);
	tcase_add_test(tc, test_full_open_steps_write_whole_first);
	tcase_add_test(tc, test_named_incarnations_announced);
	tcase_add_test(tc, test_unnamed_sender_survives_close);
	tcase_add_test(tc, test_end_after_idle_close);
	tcase_add_test(tc, test_end_keeps_step_order);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
