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
	if (l) {
		free(l->acc);
		free(l->rows_st);
		free(l->miss_rank);
	}
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
	int32_t mrank[64];	/* missing_rank, the first 64 (layer, head) */
	int has_mrank;
	int has_resume;
	int64_t resume;
	uint64_t seq_next;
} out[MAXOUT];
static int nout;
static uint64_t incs_seen[MAXOUT];	/* WQ_INC: named incarnations, first seen */
static int nincs;
static swd_sender senders[MAXOUT];	/* the latest counters of each (inc, rank) */
static int nsenders;

static void
keep_sender(const swd_sender *d)
{
	for (int i = 0; i < nsenders; i++)
		if (senders[i].inc == d->inc && senders[i].rank == d->rank) {
			senders[i] = *d;
			return;
		}
	ck_assert_int_lt(nsenders, MAXOUT);
	senders[nsenders++] = *d;
}

static const swd_sender *
sender_of(uint64_t inc, uint32_t rank)
{
	for (int i = 0; i < nsenders; i++)
		if (senders[i].inc == inc && senders[i].rank == rank)
			return &senders[i];
	return NULL;
}

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
	if (it->type == WQ_SENDERS) {	/* the last counters of each sender */
		for (size_t i = 0; i < it->nsnd; i++)
			keep_sender(&it->snd[i]);
		free(it->snd);
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
	for (size_t i = 0; i < it->nsnd; i++)
		keep_sender(&it->snd[i]);
	if (it->missing_rank)
		memcpy(o->mrank, it->missing_rank, sizeof(o->mrank) < it->meta.layers *
		    it->meta.heads * sizeof(int32_t) ? sizeof(o->mrank) : it->meta.layers *
		    it->meta.heads * sizeof(int32_t));
	o->has_mrank = it->missing_rank != NULL;
	o->has_resume = it->has_resume;
	o->resume = it->resume;
	o->seq_next = it->seq_next;
	for (uint32_t l = 0; it->layers && l < it->meta.layers; l++)
		swd_layer_free(it->layers[l], NULL);
	free(it->layers);
	free(it->missing_rank);
	free(it->snd);
	free(it->mc);
	free(it);
}

static swd_asm *
mk(int64_t max_runs)
{
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16,
	    .max_runs = max_runs, .run_idle_s = 600 };
	nout = nincs = nsenders = 0;
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
	swd_asm_conf c = { .step_timeout_ms = 5000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600 };
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
	feed(a, msg("a", 0, 0, 1, 0), 0);	/* a step open: not idle */
	feed(a, msg("b", 0, 0, 2, 0), 10);
	feed(a, msg("b", 0, 1, 2, 1), 10);	/* whole, written: idle */
	ck_assert_int_eq(nout, 1);
	/* a third run: "b" is closed, idle though more recent than "a" */
	ck_assert_int_eq(feed(a, msg("c", 0, 0, 3, 0), 20), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].type, WQ_CLOSE);
	ck_assert_str_eq(out[1].run, "b");
	/* a fourth: "a" and "c" have steps open, none idle: refused, counted */
	ck_assert_int_eq(feed(a, msg("d", 0, 0, 4, 0), 30), SWD_DROP_TOO_MANY_RUNS);
	ck_assert_int_eq(feed(a, msg("d", 0, 1, 4, 1), 30), SWD_DROP_TOO_MANY_RUNS);
	ck_assert_int_eq(nout, 2);
	swd_asm_refused rf[4];
	ck_assert_uint_eq(swd_asm_refused_runs(a, rf, 4), 1);
	ck_assert_str_eq(rf[0].run, "d");
	ck_assert_int_eq(rf[0].too_many_runs, 2);
	ck_assert_int_eq(rf[0].run_rate, 0);
	/* "a" completes its step: idle now, so "d" gets its place */
	feed(a, msg("a", 0, 1, 1, 1), 40);
	ck_assert_int_eq(feed(a, msg("d", 0, 0, 4, 2), 50), SWD_ASM_ACCEPT);
	ck_assert_int_eq(out[nout - 1].type, WQ_CLOSE);
	ck_assert_str_eq(out[nout - 1].run, "a");
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_new_run_rate)
{
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 1000,
	    .run_idle_s = 600, .new_runs_per_s = 2, .new_runs_burst = 3 };
	nout = nincs = nsenders = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	char id[16];
	int taken = 0, rate = 0;
	/* 10 new runs at one instant: the burst (3) is taken */
	for (int i = 0; i < 10; i++) {
		snprintf(id, sizeof(id), "f%d", i);
		int rc = feed(a, msg(id, 0, 0, (uint64_t)i + 1, 0), 1000);
		taken += rc == SWD_ASM_ACCEPT;
		rate += rc == SWD_DROP_RUN_RATE;
	}
	ck_assert_int_eq(taken, 3);
	ck_assert_int_eq(rate, 7);
	/* a run already taken is not a new run: it goes on */
	ck_assert_int_eq(feed(a, msg("f0", 0, 1, 1, 1), 1000), SWD_ASM_ACCEPT);
	/* 2 a second: 500 ms later one more, not two */
	ck_assert_int_eq(feed(a, msg("g0", 0, 0, 20, 0), 1500), SWD_ASM_ACCEPT);
	ck_assert_int_eq(feed(a, msg("g1", 0, 0, 21, 0), 1500), SWD_DROP_RUN_RATE);
	/* the bucket never holds more than the burst, however long the pause */
	for (int i = 0; i < 5; i++) {
		snprintf(id, sizeof(id), "h%d", i);
		int rc = feed(a, msg(id, 0, 0, (uint64_t)i + 30, 0), 100000);
		ck_assert_int_eq(rc, i < 3 ? SWD_ASM_ACCEPT : SWD_DROP_RUN_RATE);
	}
	swd_asm_refused rf[SWD_ASM_REFUSED_MAX];
	size_t n = swd_asm_refused_runs(a, rf, SWD_ASM_REFUSED_MAX);
	ck_assert_uint_eq(n, 7 + 1 + 2);
	ck_assert_str_eq(rf[0].run, "h4");	/* the latest first */
	ck_assert_int_eq(rf[0].run_rate, 1);
	ck_assert_int_eq(rf[0].too_many_runs, 0);
	ck_assert_uint_eq(swd_asm_refused_runs(a, rf, 2), 2);
	ck_assert_str_eq(rf[1].run, "h3");
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_refused_table_bounded)
{
	swd_asm *a = mk(1);
	feed(a, msg("keep", 0, 0, 1, 0), 0);	/* a step open: the table is full */
	char id[16];
	for (int i = 0; i < 3 * SWD_ASM_REFUSED_MAX; i++) {
		snprintf(id, sizeof(id), "x%d", i);
		ck_assert_int_eq(feed(a, msg(id, 0, 0, (uint64_t)i + 2, 0), 10),
		    SWD_DROP_TOO_MANY_RUNS);
	}
	ck_assert_int_eq(feed(a, msg("x5", 0, 0, 9999, 0), 10), SWD_DROP_TOO_MANY_RUNS);
	swd_asm_refused rf[SWD_ASM_REFUSED_MAX + 1];
	ck_assert_uint_eq(swd_asm_refused_runs(a, rf, SWD_ASM_REFUSED_MAX + 1),
	    SWD_ASM_REFUSED_MAX);
	ck_assert_str_eq(rf[0].run, "x5");	/* replaced the oldest, counted anew */
	ck_assert_int_eq(rf[0].too_many_runs, 1);
	snprintf(id, sizeof(id), "x%d", 3 * SWD_ASM_REFUSED_MAX - 1);
	ck_assert_str_eq(rf[1].run, id);
	/* the list keeps 64; the total says how many entered it (issue 27) */
	ck_assert_int_eq(swd_asm_refused_total(a), 3 * SWD_ASM_REFUSED_MAX + 1);
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
	/* an end of a run not held here: a named one goes to the writer, which
	 * counts it in the file that holds its incarnation (or as unknown_run) */
	e.run[0] = 'x';
	int before = nout;
	ck_assert_int_eq(swd_asm_end(a, &e, 0), SWD_ASM_DEFERRED);
	ck_assert_int_eq(nout, before + 1);
	ck_assert_int_eq(out[before].type, WQ_END);
	e.inc = 0;
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
	swd_asm_conf c = { .step_timeout_ms = 10000, .max_open_steps = 4, .max_runs = 8,
	    .run_idle_s = 600 };
	nout = nincs = nsenders = 0;
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
	/* unnamed: announced too (the writer opens the file its counts go to),
	 * under the incarnation inferred for it */
	feed(a, msg("r", 1, 0, 0, 0), 0);
	feed(a, msg("r", 1, 0, 300, 9), 0);
	ck_assert_int_eq(nincs, 3);
	ck_assert_uint_eq(incs_seen[0], 100);
	ck_assert_uint_gt(incs_seen[1], 300);	/* the daemon's clock, in inc units */
	ck_assert_uint_eq(incs_seen[2], 300);
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
	feed(a, msg("v", 0, 1, 0, 1), 10);
	feed(a, msg("u", 1, 0, 0, 2), 20);	/* closes v (idle); u goes on */
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
	/* the end comes later: the writer counts it in the closed run's file and
	 * marks it ended once every rank has ended (issue 26, item 12) */
	ck_assert_int_eq(swd_asm_end(a, &e, 700000), SWD_ASM_DEFERRED);
	ck_assert_int_eq(nout, 3);
	ck_assert_int_eq(out[2].type, WQ_END);
	ck_assert_str_eq(out[2].run, "r");
	/* the same again: the writer's too (its row counts it after_end) */
	ck_assert_int_eq(swd_asm_end(a, &e, 700001), SWD_ASM_DEFERRED);
	ck_assert_int_eq(nout, 4);
	swd_asm_free(&a);
}
END_TEST

/* Issue 26, item 12: status keeps the runs that ended or closed lately,
 * with their senders' last counters, the latest first. */
START_TEST(test_finished_runs)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 0, 0, 7, 0), 0);
	feed(a, msg("r", 0, 1, 7, 1), 0);
	swp_msg e = msg("r", 0, 0, 7, 2);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 0), SWD_ASM_ACCEPT);
	feed(a, msg("q", 0, 0, 8, 0), 0);
	swd_asm_tick(a, 600000);	/* q: closed idle */
	swd_asm_run fr[4];
	int ended[4];
	ck_assert_uint_eq(swd_asm_runs(a, fr, 4), 0);
	ck_assert_uint_eq(swd_asm_finished(a, fr, ended, 4), 2);
	ck_assert_str_eq(fr[0].run, "q");
	ck_assert_int_eq(ended[0], 0);
	ck_assert_str_eq(fr[1].run, "r");
	ck_assert_int_eq(ended[1], 1);
	ck_assert_int_eq(fr[1].steps_done, 1);
	ck_assert_int_eq(fr[1].messages, 3);
	swd_sender sd[4];
	const char *rn[4];
	ck_assert_uint_eq(swd_asm_finished_senders(a, sd, rn, 4), 2);
	ck_assert_str_eq(rn[0], "q");
	ck_assert_str_eq(rn[1], "r");
	ck_assert_int_eq(sd[1].messages, 3);
	ck_assert_int_eq(sd[1].stored, 2);
	ck_assert(sd[1].ended);
	swd_asm_free(&a);
}
END_TEST

/* Issue 27, item 9: an open step does not keep a run from closing idle:
 * it goes out incomplete (counted), then the run closes. Item 8: a layer
 * of that step after the close is late, not a step written again. */
START_TEST(test_idle_close_writes_open_steps)
{
	swd_asm_conf c = { .step_timeout_ms = 60000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 2 };
	nout = nincs = nsenders = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	ck_assert_int_eq(feed(a, msg("r", 0, 0, 7, 0), 0), SWD_ASM_ACCEPT);
	swd_asm_tick(a, 1999);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 2000);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_uint_eq(out[0].have, 1);
	ck_assert_int_eq(out[1].type, WQ_CLOSE);
	ck_assert_int_eq(swd_asm_get_stats(a)->steps_incomplete, 1);
	ck_assert_int_eq(feed(a, msg("r", 0, 1, 7, 1), 3000), SWD_DROP_LATE);
	swd_asm_tick(a, 70000);
	ck_assert_int_eq(swd_asm_get_stats(a)->steps_incomplete, 1);
	for (int i = 2; i < nout; i++)
		ck_assert_int_ne(out[i].type, WQ_STEP);
	swd_asm_free(&a);
}
END_TEST

static size_t state_bytes_v;
static size_t
state_bytes(void *ud, const swd_meta *m)
{
	(void)ud;
	return state_bytes_v * m->layers;
}

/* Issue 27, item 1: a run's state is charged to the budget while it is open,
 * and a run whose state does not fit is refused (run_state), counted. */
START_TEST(test_run_state_budget)
{
	atomic_llong inflight = 0;
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &inflight, .budget_bytes = 1000,
	    .run_bytes = state_bytes };
	nout = nincs = nsenders = 0;
	state_bytes_v = 300;	/* 2 layers: 600 bytes */
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	char why[256];
	swp_msg m = msg("r", 0, 0, 7, 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_cancel(a, &t, SWD_DROP_BUDGET);
	ck_assert_int_eq(atomic_load(&inflight), 600);
	/* a second run of the same claim does not fit beside it */
	m = msg("q", 0, 0, 8, 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t, why, sizeof(why)), SWD_DROP_RUN_STATE);
	ck_assert_ptr_nonnull(strstr(why, "2 layers x 1 heads"));
	swd_asm_refused rf[2];
	ck_assert_uint_eq(swd_asm_refused_runs(a, rf, 2), 1);
	ck_assert_str_eq(rf[0].run, "q");
	ck_assert_int_eq(rf[0].run_state, 1);
	/* given back when the run closes */
	swd_asm_tick(a, 700000);
	ck_assert_int_eq(atomic_load(&inflight), 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 700001, &t, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_cancel(a, &t, SWD_DROP_BUDGET);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), 0);
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


/* ---- several senders (PROTOCOL.md 7b) ---------------------------------- */

#define PH 4	/* heads */
#define PR 4	/* rows */
#define PK 2	/* keys */
#define MAXWORK 16
#define HOLD_EXTRA 100	/* conf.hold_extra of mk_hold */
/* What conf.work was given: the gathered layers, as the daemon would get them. */
static struct work {
	swd_ticket t;
	uint32_t layer, qpos[PR];
	int has_qpos;
	float data[PH * PR * PK];
	size_t nheld;		/* parts kept, not copied (conf.hold) */
	int32_t *miss;
} works[MAXWORK];
static int nworks;
static long long work_taken;	/* what conf.work took, counted in inflight */
static size_t hold_reserve;	/* PH * conf.hold_extra where conf.hold is set (mk_hold) */
static int work_refuse;		/* 1: the callee refuses (budget) */

static int
work(void *ud, const swd_ticket *t, const swp_msg *m, swd_parts *data, size_t bytes,
    int32_t *miss)
{
	(void)ud;
	if (work_refuse)
		return SWD_DROP_BUDGET;
	ck_assert_int_lt(nworks, MAXWORK);
	ck_assert_uint_eq(m->shape[0], PH);
	ck_assert_uint_eq(m->shape[1], PR);
	ck_assert_uint_eq(m->head0 + m->row0, 0);
	ck_assert_ptr_null(m->tensor);
	ck_assert_uint_eq(m->tensor_bytes, sizeof(works[0].data));
	/* the elements, the head arrays, room for kept frames */
	ck_assert_uint_eq(bytes, sizeof(works[0].data) + (3 * PH + 1) * sizeof(void *) +
	    hold_reserve);
	work_taken += (long long)bytes;	/* the work's until it is done */
	struct work *w = &works[nworks++];
	w->t = *t;
	w->layer = m->layer;
	for (int h = 0; h < PH; h++)
		memcpy(w->data + h * PR * PK, data->head[h], PR * PK * sizeof(float));
	w->nheld = data->nheld;
	w->has_qpos = m->qpos != NULL;
	if (m->qpos)
		memcpy(w->qpos, m->qpos, sizeof(w->qpos));
	w->miss = miss;
	swd_parts_free(data);
	free(m->qpos);
	return SWD_ASM_ACCEPT;
}

static swd_asm *
mk2(void)
{
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .work = work };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	return swd_asm_new(&c, emit, NULL);
}

/* A stand-in result with per-head means v (sink mass and entropy), PR rows. */
static swd_layer *
result(uint32_t heads, uint32_t rows, double v, int32_t *miss)
{
	swd_layer *l = calloc(1, sizeof(*l));
	l->heads = heads;
	l->rows = rows;
	l->acc = calloc(heads, sizeof(*l->acc));
	for (uint32_t h = 0; h < heads; h++) {
		int gone = miss && miss[h] != -1;
		l->acc[h].rows = gone ? 0 : rows;
		l->acc[h].s = gone ? 0 : v * rows;
		l->acc[h].H = gone ? 0 : 2 * v * rows;
	}
	l->miss_rank = miss;
	return l;
}

/* The element of cell (h, r, k) of layer l at step s: unique, so placement shows. */
static float
cell(int64_t s, uint32_t l, uint32_t h, uint32_t r, uint32_t k)
{
	return (float)(s * 1000 + l * 100 + h * 10 + r) + 0.5f * (float)k;
}

static float partbuf[64][PH * PR * PK];
static int npart;

/* A part: heads h0..h0+nh-1, rows r0..r0+nr-1 of layer l, sent by rank of 2. */
static swp_msg
part(int64_t step, uint32_t l, uint32_t rank, uint64_t seq, uint32_t h0, uint32_t nh,
    uint32_t r0, uint32_t nr)
{
	swp_msg m = msg("p", step, l, 99, seq);
	m.heads = PH;
	m.rank = rank;
	m.senders = 2;
	m.head0 = h0;
	m.row0 = r0;
	m.rows = PR;
	m.shape[0] = nh;
	m.shape[1] = nr;
	m.shape[2] = PK;
	m.dtype = SWP_F32;
	float *b = partbuf[npart++ % 64];
	for (uint32_t h = 0; h < nh; h++)
		for (uint32_t r = 0; r < nr; r++)
			for (uint32_t k = 0; k < PK; k++)
				b[(h * nr + r) * PK + k] = cell(step, l, h0 + h, r0 + r, k);
	m.tensor = b;
	m.tensor_bytes = (size_t)nh * nr * PK * sizeof(float);
	return m;
}

static int
give(swd_asm *a, swp_msg m, uint64_t now, swd_ticket *t)
{
	char why[256];
	return swd_asm_admit(a, &m, now, t, why, sizeof(why));
}

/* Completes every gathered layer the assembly started, in order. */
static void
finish_works(swd_asm *a, int from, double v, uint64_t now)
{
	for (int i = from; i < nworks; i++)
		swd_asm_done(a, &works[i].t, result(PH, PR, v, works[i].miss), now);
}

START_TEST(test_parts_by_heads)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* tensor parallel: rank 0 heads 0-1, rank 1 heads 2-3, of both layers,
	 * interleaved; each rank numbers its own messages */
	for (uint32_t l = 0; l < 2; l++) {
		ck_assert_int_eq(give(a, part(5, l, 1, l, 2, 2, 0, PR), 0, &t), SWD_ASM_HELD);
		ck_assert_int_eq(give(a, part(5, l, 0, l, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	}
	ck_assert_int_eq(nworks, 2);	/* each layer whole: started once */
	for (int i = 0; i < 2; i++) {
		ck_assert_ptr_null(works[i].miss);
		for (uint32_t h = 0; h < PH; h++)
			for (uint32_t r = 0; r < PR; r++)
				for (uint32_t k = 0; k < PK; k++)
					ck_assert(works[i].data[(h * PR + r) * PK + k] ==
					    cell(5, works[i].layer, h, r, k));
	}
	finish_works(a, 0, 0.5, 1);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 5);
	ck_assert_uint_eq(out[0].have, 2);
	ck_assert_int_eq(out[0].has_mrank, 0);
	ck_assert_int_eq(nsenders, 2);
	for (uint32_t k = 0; k < 2; k++) {
		const swd_sender *d = sender_of(99, k);
		ck_assert_ptr_nonnull(d);
		ck_assert_int_eq(d->messages, 2);
		ck_assert_int_eq(d->lost, 0);	/* interleaved seqs of two senders */
		ck_assert_uint_eq(d->senders, 2);
	}
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_parts_by_rows)
{
	swd_asm *a = mk2();
	swd_ticket t;
	uint32_t q[PR] = { 3, 5, 7, 9 };
	/* context parallel: rows 0-1 and 2-3, with their query positions */
	swp_msg m1 = part(0, 0, 1, 0, 0, PH, 2, 2), m0 = part(0, 0, 0, 0, 0, PH, 0, 2);
	m1.qpos = q + 2;
	m0.qpos = q;
	ck_assert_int_eq(give(a, m1, 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 0);
	ck_assert_int_eq(give(a, m0, 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 1);
	ck_assert(works[0].has_qpos);
	for (uint32_t r = 0; r < PR; r++)
		ck_assert_uint_eq(works[0].qpos[r], q[r]);
	for (uint32_t h = 0; h < PH; h++)
		for (uint32_t r = 0; r < PR; r++)
			ck_assert(works[0].data[(h * PR + r) * PK] == cell(0, 0, h, r, 0));
	/* a part of layer 1 without qpos, then one with: not one layer */
	swp_msg n0 = part(0, 1, 0, 1, 0, PH, 0, 2), n1 = part(0, 1, 1, 1, 0, PH, 2, 2);
	n1.qpos = q + 2;
	ck_assert_int_eq(give(a, n0, 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, n1, 0, &t), SWD_DROP_PART_MISMATCH);
	finish_works(a, 0, 0.5, 1);
	swd_asm_tick(a, 5000);	/* layer 1 times out without rank 1's rows */
	ck_assert_int_eq(nworks, 2);
	ck_assert_ptr_nonnull(works[1].miss);
	for (uint32_t h = 0; h < PH; h++)
		ck_assert_int_eq(works[1].miss[h], 1);	/* every head lacks rows of rank 1 */
	ck_assert_int_eq(nout, 0);
	finish_works(a, 1, 0.5, 5001);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].has_mrank, 1);
	for (uint32_t h = 0; h < PH; h++) {
		ck_assert_int_eq(out[0].mrank[h], -1);		/* layer 0 whole */
		ck_assert_int_eq(out[0].mrank[PH + h], 1);	/* layer 1: rank 1's */
	}
	swd_asm_free(&a);
	const swd_sender *d = sender_of(99, 1);
	ck_assert_int_eq(d->drop[SWD_DROP_PART_MISMATCH], 1);
	ck_assert_int_eq(d->missing, PH);
}
END_TEST

START_TEST(test_withheld_part_named)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* step 0 whole; at step 1 rank 1 withholds heads 2-3 of layer 1 */
	for (int64_t s = 0; s < 2; s++)
		for (uint32_t l = 0; l < 2; l++) {
			give(a, part(s, l, 0, (uint64_t)(s * 2 + l), 0, 2, 0, PR), (uint64_t)s, &t);
			if (s == 0 || l == 0)
				give(a, part(s, l, 1, (uint64_t)(s * 2 + l), 2, 2, 0, PR), (uint64_t)s, &t);
		}
	ck_assert_int_eq(nworks, 3);
	finish_works(a, 0, 0.5, 2);
	ck_assert_int_eq(nout, 1);	/* step 0 */
	swd_asm_tick(a, 1500);	/* 1000 ms after step 1's last arrival */
	ck_assert_int_eq(nworks, 4);
	ck_assert_uint_eq(works[3].layer, 1);
	int32_t want[PH] = { -1, -1, 1, 1 };
	for (uint32_t h = 0; h < PH; h++)
		ck_assert_int_eq(works[3].miss[h], want[h]);
	finish_works(a, 3, 0.5, 1501);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].step, 1);
	ck_assert_uint_eq(out[1].have, 2);
	for (uint32_t h = 0; h < PH; h++) {
		ck_assert_int_eq(out[1].mrank[h], -1);
		ck_assert_int_eq(out[1].mrank[PH + h], want[h]);
	}
	swd_asm_run ar[1];
	ck_assert_uint_eq(swd_asm_runs(a, ar, 1), 1);
	ck_assert_int_eq(ar[0].incomplete, 1);
	ck_assert_str_eq(ar[0].last_gap, "step 1 layer 1 heads 2-3 missing (rank 1)");
	swd_sender sd[4];
	const char *rn[4];
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 4), 2);
	ck_assert_int_eq(sd[1].rank, 1);
	ck_assert_int_eq(sd[1].missing, 2);
	int64_t nr, ns;
	swd_asm_count(a, &nr, &ns);
	ck_assert_int_eq(nr, 1);
	ck_assert_int_eq(ns, 2);
	ck_assert_int_eq(sd[0].missing, 0);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_overlap_and_copies)
{
	swd_asm *a = mk2();
	swd_ticket t0, t, c1, c2;
	/* data parallel: both ranks send all of layer 0; rank 1's is a copy */
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, PH, 0, PR), 0, &t0), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t0);
	ck_assert_int_eq(give(a, part(0, 0, 1, 0, 0, PH, 0, PR), 0, &c1), SWD_ASM_COPY);
	swd_asm_start(a, &c1);
	/* layer 1: rank 0 heads 0-2, rank 1 heads 2-3 overlaps, then heads 3 only */
	ck_assert_int_eq(give(a, part(0, 1, 0, 1, 0, 3, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(0, 1, 1, 1, 2, 2, 0, PR), 0, &c2), SWD_DROP_OVERLAP);
	ck_assert_int_eq(give(a, part(0, 1, 1, 2, 3, 1, 0, PR), 0, &c2), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 1);
	/* rank 1 sends heads 1-2 of layer 1 again: a copy of rank 0's cells */
	ck_assert_int_eq(give(a, part(0, 1, 1, 3, 1, 2, 0, PR), 0, &c2), SWD_ASM_COPY);
	swd_asm_start(a, &c2);
	swd_asm_done(a, &c1, result(PH, PR, 0.5, NULL), 1);	/* agrees */
	swd_asm_done(a, &c2, result(2, PR, 0.25, NULL), 1);	/* differs */
	ck_assert_int_eq(nout, 0);
	swd_asm_done(a, &t0, result(PH, PR, 0.5, NULL), 1);
	finish_works(a, 0, 0.5, 1);
	ck_assert_int_eq(nout, 1);
	ck_assert_uint_eq(out[0].have, 2);
	/* a copy after the step was written is compared with what was kept */
	ck_assert_int_eq(give(a, part(0, 0, 1, 4, 0, PH, 0, PR), 2, &c1), SWD_ASM_COPY);
	swd_asm_start(a, &c1);
	swd_asm_done(a, &c1, result(PH, PR, 0.5 + 2e-6, NULL), 2);
	swd_sender sd[4];
	const char *rn[4];
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 4), 2);
	ck_assert_int_eq(sd[1].drop[SWD_DROP_DUPLICATE], 3);
	ck_assert_int_eq(sd[1].disagree, 2);
	ck_assert_int_eq(sd[1].uncompared, 0);
	ck_assert_int_eq(sd[1].drop[SWD_DROP_OVERLAP], 1);
	ck_assert_int_eq(sd[0].drop[SWD_DROP_DUPLICATE] + sd[0].disagree + sd[0].drop[SWD_DROP_OVERLAP], 0);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_senders_end_and_seq)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* pipeline: rank 0 holds layer 0, rank 1 layer 1 (whole layers) */
	for (int64_t s = 0; s < 2; s++) {
		give(a, part(s, 0, 0, (uint64_t)s, 0, PH, 0, PR), 0, &t);
		swd_asm_start(a, &t);
		swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 0);
	}
	/* rank 1 skips its seq 0: one lost, its own */
	give(a, part(0, 1, 1, 1, 0, PH, 0, PR), 0, &t);
	swd_asm_start(a, &t);
	swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 0);
	ck_assert_int_eq(nout, 1);
	swp_msg e = part(0, 0, 0, 2, 0, PH, 0, PR);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 1), SWD_ASM_ACCEPT);
	/* rank 0 ended its part; the run goes on for rank 1 */
	ck_assert_int_eq(give(a, part(1, 0, 0, 3, 0, PH, 0, PR), 1, &t), SWD_DROP_AFTER_END);
	ck_assert_int_eq(give(a, part(1, 1, 1, 2, 0, PH, 0, PR), 1, &t), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t);
	swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 1);
	ck_assert_int_eq(nout, 2);
	for (int i = 0; i < nout; i++)
		ck_assert_int_eq(out[i].type, WQ_STEP);
	/* a message that says 3 senders: not this incarnation's */
	swp_msg x = part(2, 1, 1, 3, 0, PH, 0, PR);
	x.senders = 3;
	ck_assert_int_eq(give(a, x, 1, &t), SWD_DROP_SENDERS);
	e = part(0, 0, 1, 4, 0, PH, 0, PR);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 2), SWD_ASM_ACCEPT);
	ck_assert_int_eq(out[nout - 1].type, WQ_END);
	const swd_sender *d0 = sender_of(99, 0), *d1 = sender_of(99, 1);
	ck_assert(d0->ended && d1->ended);
	ck_assert_int_eq(d0->lost, 0);
	/* rank 1's seq 0 is below its first seq here: the writer's to count
	 * (sender_gap); the message that said 3 senders arrived: counted under
	 * senders_mismatch only, never lost as well (issue 26, item 5) */
	ck_assert_uint_eq(d1->first_seq, 1);
	ck_assert_int_eq(d1->lost, 0);
	ck_assert_int_eq(d1->drop[SWD_DROP_SENDERS], 1);
	ck_assert_int_eq(d0->drop[SWD_DROP_AFTER_END], 1);
	ck_assert_uint_eq(d1->seq_next, 5);
	/* every message of each sender: stored, dropped once, or its end */
	for (const swd_sender *d = d0; d; d = d == d0 ? d1 : NULL) {
		int64_t n = d->stored + d->pending + d->ended;
		for (int k = 0; k < SWD_DROP_REASONS; k++)
			n += d->drop[k];
		ck_assert_int_eq(n, d->messages);
	}
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_end_settles_gathered_layers)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* rank 1 never sends heads 2-3 of layer 1; both ranks end before the timeout */
	for (uint32_t l = 0; l < 2; l++) {
		give(a, part(0, l, 0, l, 0, 2, 0, PR), 0, &t);
		if (l == 0)
			give(a, part(0, l, 1, l, 2, 2, 0, PR), 0, &t);
	}
	ck_assert_int_eq(nworks, 1);
	finish_works(a, 0, 0.5, 1);
	for (uint32_t k = 0; k < 2; k++) {
		swp_msg e = part(0, 0, k, 2, 0, PH, 0, PR);
		e.type = SWP_END;
		ck_assert_int_eq(swd_asm_end(a, &e, 2), SWD_ASM_ACCEPT);
	}
	/* the gathered layer starts as it is, its missing heads named; then the end */
	ck_assert_int_eq(nworks, 2);
	ck_assert_ptr_nonnull(works[1].miss);
	ck_assert_int_eq(nout, 0);
	finish_works(a, 1, 0.5, 3);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_int_eq(out[0].mrank[PH + 2], -2);	/* nobody ever sent them: no rank known */
	ck_assert_int_eq(out[0].mrank[PH + 1], -1);
	ck_assert_int_eq(out[1].type, WQ_END);
	swd_asm_free(&a);
}
END_TEST

/* Every message of each sender is stored, pending, dropped once or its end. */
static void
check_accounting(const swd_asm *a)
{
	swd_sender sd[16];
	const char *rn[16];
	size_t n = swd_asm_senders(a, sd, rn, 16);
	for (size_t i = 0; i < n; i++) {
		int64_t k = sd[i].stored + sd[i].pending + sd[i].ended;
		for (int r = 0; r < SWD_DROP_REASONS; r++)
			k += sd[i].drop[r];
		ck_assert_int_eq(k, sd[i].messages);
	}
}

/* Issue 26, item 2: at shutdown (SIGTERM) the parts still gathered are
 * computed as they are and written, their missing heads named, never
 * freed unseen; a part held at the final shutdown counts as stopping. */
START_TEST(test_stop_writes_gathered_parts)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* rank 0 sends its heads of both layers of step 0; rank 1 nothing */
	for (uint32_t l = 0; l < 2; l++)
		ck_assert_int_eq(give(a, part(0, l, 0, l, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 0);
	swd_asm_stop(a);
	ck_assert_int_eq(nworks, 2);
	ck_assert_ptr_nonnull(works[0].miss);
	ck_assert_int_eq(works[0].miss[0], -1);
	ck_assert_int_eq(works[0].miss[2], -2);	/* rank 1 never sent: no rank known */
	finish_works(a, 0, 0.5, 1);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_uint_eq(out[0].have, 2);
	const swd_sender *d0 = sender_of(99, 0);
	ck_assert_int_eq(d0->stored, 2);
	ck_assert_int_eq(d0->pending, 0);
	check_accounting(a);
	swd_asm_shutdown(a);
	swd_asm_free(&a);

	/* without swd_asm_stop: the final shutdown counts the held part */
	a = mk2();
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	swd_sender sd[2];
	const char *rn[2];
	swd_asm_shutdown(a);
	ck_assert_int_eq(nout, 0);
	ck_assert_int_eq(swd_asm_get_stats(a)->drops[SWD_DROP_STOPPING], 1);
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 2), 0);	/* forgotten, after counting */
	swd_asm_free(&a);
}
END_TEST

static size_t reserve_bytes;
static size_t
work_bytes(void *ud, const swp_msg *m)
{
	(void)ud;
	ck_assert_uint_eq(m->shape[0], PH);
	ck_assert_uint_eq(m->shape[1], PR);
	return reserve_bytes;
}

/* Issue 26, item 3: a gathered layer reserves its computation with its
 * first part, so the budget refuses first parts (budget), never a part
 * that waits; parts discarded when their layer cannot start count under
 * budget, for the daemon and for each sender. */
START_TEST(test_gather_budget_counted)
{
	atomic_llong inflight = 0;
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &inflight, .work = work,
	    .work_bytes = work_bytes };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	reserve_bytes = 1000;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	char why[256];
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	long long one = atomic_load(&inflight);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), 0);

	/* room for the buffer, not with its computation: the first part is refused */
	c.budget_bytes = one - 1;
	nout = nincs = nsenders = nworks = 0;
	a = swd_asm_new(&c, emit, NULL);
	swp_msg m = part(0, 0, 0, 0, 0, 2, 0, PR);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t, why, sizeof(why)), SWD_DROP_BUDGET);
	ck_assert_ptr_nonnull(strstr(why, "with its computation"));
	/* the reserve is the work's: once whole the layer starts whatever the budget */
	c.budget_bytes = 0;
	swd_asm_free(&a);

	a = swd_asm_new(&c, emit, NULL);
	nout = nincs = nsenders = nworks = 0;
	work_refuse = 1;	/* the callee refuses: its parts wait, then are given up */
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(0, 0, 1, 0, 2, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(0, 1, 0, 1, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	swd_asm_tick(a, 2000);	/* the step's timeout */
	ck_assert_int_eq(swd_asm_get_stats(a)->drops[SWD_DROP_BUDGET], 3);
	swd_sender sd[2];
	const char *rn[2];
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 2), 2);
	ck_assert_int_eq(sd[0].drop[SWD_DROP_BUDGET], 2);
	ck_assert_int_eq(sd[1].drop[SWD_DROP_BUDGET], 1);
	check_accounting(a);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), 0);
}
END_TEST

/* Issue 26, item 5: an end whose senders is not its incarnation's ends
 * nothing (senders_mismatch); a second end is after_end. */
START_TEST(test_end_senders_checked)
{
	swd_asm *a = mk2();
	swd_ticket t;
	give(a, part(0, 0, 0, 0, 0, PH, 0, PR), 0, &t);
	swd_asm_start(a, &t);
	swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 0);
	swp_msg e = part(0, 0, 1, 0, 0, PH, 0, PR);
	e.type = SWP_END;
	e.senders = 3;
	ck_assert_int_eq(swd_asm_end(a, &e, 1), SWD_DROP_SENDERS);
	e.senders = 2;
	e.seq = 1;
	ck_assert_int_eq(swd_asm_end(a, &e, 1), SWD_ASM_ACCEPT);
	e.seq = 2;
	ck_assert_int_eq(swd_asm_end(a, &e, 1), SWD_DROP_AFTER_END);
	const swd_sender *d1 = NULL;
	swd_sender sd[2];
	const char *rn[2];
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 2), 2);
	d1 = &sd[1];
	ck_assert_int_eq(d1->drop[SWD_DROP_SENDERS], 1);
	ck_assert_int_eq(d1->drop[SWD_DROP_AFTER_END], 1);
	ck_assert_int_eq(d1->lost, 0);
	ck_assert(d1->ended);
	check_accounting(a);
	swd_asm_free(&a);
}
END_TEST

START_TEST(test_parts_wait_for_budget)
{
	swd_asm *a = mk2();
	swd_ticket t;
	work_refuse = 1;	/* the whole layer cannot start now: budget */
	give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t);
	ck_assert_int_eq(give(a, part(0, 0, 1, 0, 2, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 0);
	work_refuse = 0;
	swd_asm_tick(a, 10);	/* it starts at the next tick, whole */
	ck_assert_int_eq(nworks, 1);
	ck_assert_ptr_null(works[0].miss);
	swd_asm_free(&a);
	for (int i = 0; i < nworks; i++)
		free(works[i].miss);
}
END_TEST

/* What swd_asm_admit says with each drop: the log line and the sender's
 * counters name the cells a part brought twice, and how a part's qpos
 * differs from its layer's. */
static int
give_why(swd_asm *a, swp_msg m, uint64_t now, swd_ticket *t, char *why)
{
	why[0] = '\0';
	return swd_asm_admit(a, &m, now, t, why, 256);
}

START_TEST(test_drop_reasons_named)
{
	swd_asm *a = mk(8);
	swd_ticket t;
	char why[256];
	uint32_t q[PR] = { 3, 5, 7, 9 }, q2[PR] = { 3, 5, 8, 9 };

	/* one sender: a layer twice, then after its step went out whole */
	feed(a, msg("r", 5, 0, 7, 0), 0);
	ck_assert_int_eq(give_why(a, msg("r", 5, 0, 7, 1), 0, &t, why), SWD_DROP_DUPLICATE);
	ck_assert_str_eq(why, "step 5 layer 0 (heads 0-0, rows 0-3) arrived twice");
	feed(a, msg("r", 5, 1, 7, 2), 0);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(give_why(a, msg("r", 5, 1, 7, 3), 0, &t, why), SWD_DROP_DUPLICATE);
	ck_assert_str_eq(why, "step 5 layer 1: the step was already written whole");
	/* step 6 goes out without layer 1 (timed out): that layer is late */
	feed(a, msg("r", 6, 0, 7, 4), 10);
	swd_asm_tick(a, 2000);
	ck_assert_int_eq(nout, 2);
	ck_assert_uint_eq(out[1].have, 1);
	ck_assert_int_eq(give_why(a, msg("r", 6, 1, 7, 5), 2001, &t, why), SWD_DROP_LATE);
	ck_assert_str_eq(why, "step 6 layer 1: the step was already written incomplete");
	swd_asm_free(&a);

	/* parts: heads 0-2, then heads 2-3 overlap head 2 */
	a = mk2();
	ck_assert_int_eq(give_why(a, part(0, 1, 0, 0, 0, 3, 0, PR), 0, &t, why), SWD_ASM_HELD);
	ck_assert_int_eq(give_why(a, part(0, 1, 1, 0, 2, 2, 1, 3), 0, &t, why), SWD_DROP_OVERLAP);
	ck_assert_str_eq(why, "step 0 layer 1: rank 1's part (heads 2-3, rows 1-3) overlaps "
	    "cells another part brought");
	/* heads 0-1 of rows 0-1 with qpos; rows 2-3 without; heads 2-3 of
	 * rows 0-1 with other positions */
	swp_msg m0 = part(0, 0, 0, 1, 0, 2, 0, 2), m1 = part(0, 0, 1, 1, 0, PH, 2, 2);
	m0.qpos = q;
	ck_assert_int_eq(give_why(a, m0, 0, &t, why), SWD_ASM_HELD);
	ck_assert_int_eq(give_why(a, m1, 0, &t, why), SWD_DROP_PART_MISMATCH);
	ck_assert_str_eq(why, "step 0 layer 0: rank 1's part has no qpos than the layer's "
	    "other parts");
	m1 = part(0, 0, 1, 2, 2, 2, 0, 2);
	m1.qpos = q2 + 1;	/* 5, 8 where rows 0-1 have 3, 5 */
	ck_assert_int_eq(give_why(a, m1, 0, &t, why), SWD_DROP_PART_MISMATCH);
	ck_assert_str_eq(why, "step 0 layer 0: rank 1's part has another qpos than the "
	    "layer's other parts");
	/* and a part with qpos after one without */
	swp_msg n0 = part(1, 0, 0, 3, 0, PH, 0, 2), n1 = part(1, 0, 1, 3, 0, PH, 2, 2);
	n1.qpos = q + 2;
	ck_assert_int_eq(give_why(a, n0, 0, &t, why), SWD_ASM_HELD);
	ck_assert_int_eq(give_why(a, n1, 0, &t, why), SWD_DROP_PART_MISMATCH);
	ck_assert_str_eq(why, "step 1 layer 0: rank 1's part has a qpos than the layer's "
	    "other parts");
	swd_asm_free(&a);
}
END_TEST

/* A step carries its incarnation's first declared resume and the next seq
 * expected of its senders, summed. */
START_TEST(test_step_resume_and_seq)
{
	swd_asm *a = mk(8);
	swp_msg m = msg("r", 300, 0, 7, 0);
	m.has_resume = true;
	m.resume = 299;
	feed(a, m, 0);
	m = msg("r", 300, 1, 7, 1);	/* says no resume: the first one stays */
	feed(a, m, 0);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].has_resume, 1);
	ck_assert_int_eq(out[0].resume, 299);
	ck_assert_uint_eq(out[0].seq_next, 2);
	m = msg("r", 301, 0, 7, 2);
	m.has_resume = true;
	m.resume = 5;		/* a later declaration changes nothing */
	feed(a, m, 0);
	feed(a, msg("r", 301, 1, 7, 5), 0);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].resume, 299);
	ck_assert_uint_eq(out[1].seq_next, 6);
	swd_asm_free(&a);
}
END_TEST

/* Gathering: a part whose cells are all in already is a copy, not an
 * overlap; a whole layer that could not start at once and goes out at the
 * end lacks nothing; a head missing only its first row is missing; rows
 * never sent get qpos keys - 1; qpos are compared on every row of a part. */
START_TEST(test_gather_edges)
{
	swd_asm *a = mk2();
	swd_ticket t, c;
	uint32_t q[PR] = { 3, 5, 7, 9 }, q0[2] = { 4, 5 }, q1[2] = { 3, 6 };

	/* heads 0-2, all rows; then heads 1-2 (2 heads, 4 rows) again */
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 3, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(0, 0, 1, 0, 1, 2, 0, PR), 0, &c), SWD_ASM_COPY);
	swd_asm_start(a, &c);
	swd_asm_done(a, &c, result(2, PR, 0.5, NULL), 0);
	/* the layer whole, refused by the work (budget), then both ranks end */
	work_refuse = 1;
	ck_assert_int_eq(give(a, part(0, 0, 1, 1, 3, 1, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 0);
	work_refuse = 0;
	for (uint32_t k = 0; k < 2; k++) {
		swp_msg e = part(0, 0, k, 2, 0, PH, 0, PR);
		e.type = SWP_END;
		ck_assert_int_eq(swd_asm_end(a, &e, 1), SWD_ASM_ACCEPT);
	}
	ck_assert_int_eq(nworks, 1);
	ck_assert_ptr_null(works[0].miss);
	finish_works(a, 0, 0.5, 2);
	swd_asm_free(&a);

	/* rows 1-3 of every head with their qpos; row 0 never comes */
	a = mk2();
	swp_msg m = part(0, 0, 0, 0, 0, PH, 1, 3);
	m.qpos = q + 1;
	ck_assert_int_eq(give(a, m, 0, &t), SWD_ASM_HELD);
	/* qpos that differ on the first row only, then on the second only
	 * (parts of one head and two rows) */
	m = part(0, 1, 0, 1, 0, 2, 0, 2);
	m.qpos = q;
	ck_assert_int_eq(give(a, m, 0, &t), SWD_ASM_HELD);
	m = part(0, 1, 1, 1, 2, 1, 0, 2);
	m.qpos = q0;
	ck_assert_int_eq(give(a, m, 0, &t), SWD_DROP_PART_MISMATCH);
	m = part(0, 1, 1, 2, 3, 1, 0, 2);
	m.qpos = q1;
	ck_assert_int_eq(give(a, m, 0, &t), SWD_DROP_PART_MISMATCH);
	swd_asm_tick(a, 5000);
	ck_assert_int_eq(nworks, 2);
	for (int i = 0; i < 2; i++) {
		ck_assert_ptr_nonnull(works[i].miss);
		ck_assert(works[i].has_qpos);
	}
	ck_assert_uint_eq(works[0].layer, 0);
	for (uint32_t h = 0; h < PH; h++)
		ck_assert_int_eq(works[0].miss[h], -2);	/* row 0: nobody sent it */
	ck_assert_uint_eq(works[0].qpos[0], PK - 1);
	for (uint32_t r = 1; r < PR; r++)
		ck_assert_uint_eq(works[0].qpos[r], q[r]);
	finish_works(a, 0, 0.5, 5001);
	swd_asm_free(&a);
}
END_TEST

/* An unnamed incarnation's step waits for its layers like a named one's;
 * "stalled" is measured from the step's last arrival on any clock. */
START_TEST(test_unnamed_waits_and_late_clock)
{
	swd_asm *a = mk(8);
	feed(a, msg("r", 0, 0, 0, 0), 0);
	for (int i = 0; i < nout; i++)
		ck_assert_int_ne(out[i].type, WQ_STEP);
	feed(a, msg("r", 0, 1, 0, 1), 0);
	int steps = 0;
	for (int i = 0; i < nout; i++)
		if (out[i].type == WQ_STEP) {
			ck_assert_uint_eq(out[i].have, 2);
			steps++;
		}
	ck_assert_int_eq(steps, 1);
	swd_asm_free(&a);

	/* test_stalled_step_does_not_hold at t = 100000 ms */
	swd_asm_conf c = { .step_timeout_ms = 5000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600 };
	nout = 0;
	a = swd_asm_new(&c, emit, NULL);
	feed(a, msg("r", 0, 0, 7, 0), 100000);
	feed(a, msg("r", 1, 0, 7, 1), 100100);
	feed(a, msg("r", 1, 1, 7, 2), 100100);
	swd_asm_tick(a, 100999);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 101000);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 1);
	swd_asm_free(&a);
}
END_TEST

/* The bytes a gathered layer holds against the budget, from one part of
 * heads 0-1, rows 0-1 of a run of the given heads and rows; given back
 * when the assembly is freed. */
static long long
gathered(uint32_t heads, uint32_t rows)
{
	atomic_llong inflight = 0;
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &inflight, .work = work };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	swp_msg m = part(0, 0, 0, 0, 0, 2, 0, 2);
	m.heads = heads;
	m.rows = rows;
	ck_assert_int_eq(give(a, m, 0, &t), SWD_ASM_HELD);
	long long b = atomic_load(&inflight);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), 0);
	return b;
}

/* A gather holds its elements, a cover byte per cell, a qpos and a flag
 * per row, and its own record (of unknown size here: differences only);
 * the incarnation of several senders holds the owner (an int32) of every
 * cell of its 2 layers. */
START_TEST(test_gather_bytes_charged)
{
	long long b44 = gathered(4, 4), b84 = gathered(8, 4), b48 = gathered(4, 8);
	long long el = PK * (long long)sizeof(float);
	ck_assert_int_gt(b44, 4 * 4 * el + 4 * 4 + 4 * 5);
	long long own = 2 * 4 * 4 * (long long)sizeof(int32_t);
	long long ptrs = 3 * (long long)sizeof(void *);	/* a head's place in the head arrays */
	ck_assert_int_eq(b84 - b44, own + 4 * 4 * el + 4 * 4 + 4 * ptrs);
	ck_assert_int_eq(b48 - b44, own + 4 * 4 * el + 4 * 4 + 4 * (long long)(sizeof(uint32_t) + 1));
	/* launched, the elements go with the work (counted until it is done),
	 * the rest of the gather is given back; the owners stay */
	atomic_llong inflight = 0;
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &inflight, .work = work };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t);
	give(a, part(0, 0, 1, 0, 2, 2, 0, PR), 0, &t);
	ck_assert_int_eq(nworks, 1);
	long long held = atomic_load(&inflight);
	ck_assert_int_eq(held, own + PH * PR * el + (PH * ptrs + (long long)sizeof(void *)));
	swd_asm_free(&a);
	for (int i = 0; i < nworks; i++)
		free(works[i].miss);
}
END_TEST

/*
 * conf.hold as the daemon's: the frame moves (here: copied to the heap, and
 * the message's own tensor overwritten, as zmq_msg_move empties it).
 */
static int nhold, nrelease, hold_fail;
static const void *
test_hold(void *ud, const swp_msg *m, void **handle)
{
	(void)ud;
	if (hold_fail)
		return NULL;
	void *f = malloc(m->tensor_bytes);
	ck_assert_ptr_nonnull(f);
	memcpy(f, m->tensor, m->tensor_bytes);
	memset((void *)m->tensor, 0xff, m->tensor_bytes);	/* NaNs: read there, they show */
	*handle = f;
	nhold++;
	return f;
}

static void
test_release(void *ud, void *handle)
{
	(void)ud;
	free(handle);
	nrelease++;
}

static swd_asm *
mk_hold(atomic_llong *inflight, size_t hold_min)
{
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = inflight, .work = work, .hold = test_hold,
	    .release = test_release, .hold_min = hold_min, .hold_extra = HOLD_EXTRA };
	hold_reserve = PH * HOLD_EXTRA;
	nout = nincs = nsenders = nworks = work_refuse = 0;
	nhold = nrelease = hold_fail = 0;
	work_taken = 0;
	atomic_store(inflight, 0);
	return swd_asm_new(&c, emit, NULL);
}

/* Every cell of works[i] is the sent one, and heads named in gone[] are zeros. */
static void
ck_cells(int i, int64_t step, const int *gone)
{
	for (uint32_t h = 0; h < PH; h++)
		for (uint32_t r = 0; r < PR; r++)
			for (uint32_t k = 0; k < PK; k++) {
				float want = gone && gone[h] ? 0.0f : cell(step, works[i].layer, h, r, k);
				ck_assert_msg(works[i].data[(h * PR + r) * PK + k] == want,
				    "work %d head %u row %u key %u: %g, want %g", i, h, r, k,
				    works[i].data[(h * PR + r) * PK + k], want);
			}
}

/*
 * Parts whose heads are whole are kept, not copied (conf.hold), where their
 * tensor reaches hold_min; the others are copied. The work reads the same
 * cells either way, every kept frame is released exactly once (after the
 * work, or with a gather that never launched), and inflight returns to 0.
 */
START_TEST(test_parts_held)
{
	atomic_llong inflight = 0;
	swd_ticket t;
	size_t whole2 = 2 * PR * PK * sizeof(float);	/* a part of 2 whole heads */
	/* the charge without conf.hold */
	atomic_llong in0 = 0;
	swd_asm_conf c0 = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &in0, .work = work };
	swd_asm *a = swd_asm_new(&c0, emit, NULL);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	long long plain = atomic_load(&in0);
	swd_asm_free(&a);
	/* both parts whole: both kept; the gather reserves room for kept frames
	 * with its first part, hold_extra a head */
	a = mk_hold(&inflight, 0);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nhold, 1);
	long long one = atomic_load(&inflight);
	ck_assert_int_eq(one, plain + PH * HOLD_EXTRA);
	ck_assert_int_eq(give(a, part(3, 0, 1, 0, 2, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nhold, 2);
	ck_assert_int_eq(nworks, 1);
	ck_assert_uint_eq(works[0].nheld, 2);
	ck_cells(0, 3, NULL);
	ck_assert_int_eq(nrelease, 2);	/* the work freed its parts */
	/* rank 0 whole (kept), rank 1 by rows (copied, whatever their size) */
	ck_assert_int_eq(give(a, part(4, 0, 0, 1, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(4, 0, 1, 1, 2, 2, 0, PR / 2), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(4, 0, 1, 2, 2, 2, PR / 2, PR / 2), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 2);
	ck_assert_uint_eq(works[1].nheld, 1);
	ck_cells(1, 4, NULL);
	ck_assert_int_eq(nrelease, nhold);
	finish_works(a, 0, 0.5, 0);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), work_taken);	/* the rest is given back */
	atomic_store(&inflight, 0);

	/* below hold_min, hold refuses (no memory), or row statistics: copied */
	for (int c = 0; c < 3; c++) {
		a = mk_hold(&inflight, c == 0 ? whole2 + 1 : 0);
		hold_fail = c == 1;
		swp_msg p0 = part(3, 0, 0, 0, 0, 2, 0, PR), p1 = part(3, 0, 1, 0, 2, 2, 0, PR);
		if (c == 2)
			p0.kind = p1.kind = SWP_ROWSTATS;
		ck_assert_int_eq(give(a, p0, 0, &t), SWD_ASM_HELD);
		ck_assert_int_eq(atomic_load(&inflight), one);	/* the same charge */
		ck_assert_int_eq(give(a, p1, 0, &t), SWD_ASM_HELD);
		ck_assert_int_eq(nhold, 0);
		ck_assert_uint_eq(works[0].nheld, 0);
		ck_cells(0, 3, NULL);
		finish_works(a, 0, 0.5, 0);
		swd_asm_free(&a);
		ck_assert_int_eq(atomic_load(&inflight), work_taken);
		atomic_store(&inflight, 0);
	}

	/* a kept part whose layer never launches: released with the gather */
	a = mk_hold(&inflight, 0);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nhold, 1);
	long long charged = atomic_load(&inflight);
	swd_asm_free(&a);
	ck_assert_int_eq(nrelease, 1);
	ck_assert_int_eq(atomic_load(&inflight), 0);

	/* the work refuses (budget) the whole layer: kept, started at the next tick */
	a = mk_hold(&inflight, 0);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(atomic_load(&inflight), charged);	/* the same part, the same charge */
	work_refuse = 1;
	ck_assert_int_eq(give(a, part(3, 0, 1, 0, 2, 2, 0, PR / 2), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(3, 0, 1, 1, 2, 2, PR / 2, PR / 2), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 0);
	work_refuse = 0;
	swd_asm_tick(a, 10);
	ck_assert_int_eq(nworks, 1);
	ck_assert_uint_eq(works[0].nheld, 1);
	ck_assert_ptr_null(works[0].miss);
	ck_cells(0, 3, NULL);
	ck_assert_int_eq(nrelease, 1);
	finish_works(a, 0, 0.5, 10);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), work_taken);	/* the rest is given back */
	atomic_store(&inflight, 0);

	/* at the step's timeout, refused (budget): the parts are dropped, the
	 * kept frame released with its gather */
	a = mk_hold(&inflight, 0);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	work_refuse = 1;
	swd_asm_tick(a, 5000);
	ck_assert_int_eq(nworks, 0);
	ck_assert_int_eq(nrelease, 1);
	ck_assert_int_eq(swd_asm_get_stats(a)->drops[SWD_DROP_BUDGET], 1);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), 0);

	/* at the step's timeout it starts with rank 1's heads missing: zeros
	 * there, the kept heads intact */
	a = mk_hold(&inflight, 0);
	ck_assert_int_eq(give(a, part(3, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	swd_asm_tick(a, 5000);
	ck_assert_int_eq(nworks, 1);
	ck_assert_uint_eq(works[0].nheld, 1);
	ck_assert_ptr_nonnull(works[0].miss);
	static const int gone[PH] = { 0, 0, 1, 1 };
	ck_cells(0, 3, gone);
	ck_assert_int_eq(nrelease, 1);
	finish_works(a, 0, 0.5, 5000);
	swd_asm_free(&a);
	ck_assert_int_eq(atomic_load(&inflight), work_taken);	/* the rest is given back */
	atomic_store(&inflight, 0);	/* miss went with the results */
}
END_TEST

/* A full table of open steps makes room from the step that waited longest
 * without input, never from one in work, and refuses when all are. */
START_TEST(test_full_table_spares_work)
{
	swd_asm_conf c = { .step_timeout_ms = 60000, .max_open_steps = 2, .max_runs = 8,
	    .run_idle_s = 600 };
	char why[256];
	swd_ticket t0, t1, t;
	nout = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	/* step 0 (oldest) stays in work; step 1 waits; step 2 evicts step 1 */
	swp_msg m = msg("r", 0, 0, 7, 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t0, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t0);
	ck_assert_int_eq(feed(a, msg("r", 1, 0, 7, 1), 10), SWD_ASM_ACCEPT);
	ck_assert_int_eq(feed(a, msg("r", 2, 0, 7, 2), 20), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 1);
	ck_assert_uint_eq(out[0].have, 1);
	/* steps 0 and 2 both in work: no room */
	m = msg("r", 2, 1, 7, 3);
	ck_assert_int_eq(swd_asm_admit(a, &m, 30, &t1, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t1);
	m = msg("r", 3, 0, 7, 4);
	ck_assert_int_eq(swd_asm_admit(a, &m, 40, &t, why, sizeof(why)), SWD_DROP_OPEN_STEPS);
	ck_assert_int_eq(nout, 1);
	swd_asm_done(a, &t0, calloc(1, sizeof(swd_layer)), 50);
	swd_asm_done(a, &t1, calloc(1, sizeof(swd_layer)), 50);
	swd_asm_free(&a);
}
END_TEST

/* A layer admitted and not yet started is there: the same layer again is
 * a duplicate. A layer whose computation failed is not: its step goes out
 * at its timeout without it. */
START_TEST(test_admitted_and_failed_layers)
{
	swd_asm *a = mk(8);
	char why[256];
	swd_ticket t0, t;
	swp_msg m = msg("r", 0, 0, 7, 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t0, why, sizeof(why)), SWD_ASM_ACCEPT);
	m = msg("r", 0, 0, 7, 1);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t, why, sizeof(why)), SWD_DROP_DUPLICATE);
	swd_asm_start(a, &t0);
	swd_asm_done(a, &t0, NULL, 10);		/* the computation failed */
	ck_assert_int_eq(feed(a, msg("r", 0, 1, 7, 2), 20), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 0);
	swd_asm_tick(a, 1020);			/* the step's timeout */
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].step, 0);
	ck_assert_uint_eq(out[0].have, 1);
	swd_asm_free(&a);
}
END_TEST

/* A part refused (budget) on a step it opened leaves no open step behind. */
START_TEST(test_refused_part_leaves_no_step)
{
	atomic_llong inflight = 0;
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .inflight = &inflight, .budget_bytes = 1, .work = work };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_DROP_BUDGET);
	swd_asm_run ar[1];
	ck_assert_uint_eq(swd_asm_runs(a, ar, 1), 1);
	ck_assert_int_eq(ar[0].open_steps, 0);
	swd_asm_free(&a);
}
END_TEST

/* An unnamed sender after its run's end is after_end: a restart (seq 0)
 * while the run still finishes (a layer in work), and the same sender
 * going on (seq not 0) once the run was written out. */
START_TEST(test_unnamed_after_end)
{
	swd_asm *a = mk(8);
	swd_ticket t0, t;
	char why[256];
	swp_msg m = msg("r", 0, 0, 0, 0);
	ck_assert_int_eq(swd_asm_admit(a, &m, 0, &t0, why, sizeof(why)), SWD_ASM_ACCEPT);
	swd_asm_start(a, &t0);
	swp_msg e = msg("r", 0, 0, 0, 1);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 10), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 0);	/* the run is ending: its layer is in work */
	ck_assert_int_eq(give_why(a, msg("r", 1, 0, 0, 0), 20, &t, why), SWD_DROP_AFTER_END);
	ck_assert_str_eq(why, "the run was ended");
	swd_asm_done(a, &t0, calloc(1, sizeof(swd_layer)), 30);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_int_eq(out[0].step, 0);
	ck_assert_uint_eq(out[0].have, 1);
	ck_assert_int_eq(out[1].type, WQ_END);
	swd_asm_free(&a);

	/* a whole step, the end, then the sender's next seq: its run is gone,
	 * its inferred incarnation ended */
	a = mk(8);
	feed(a, msg("r", 0, 0, 0, 0), 0);
	feed(a, msg("r", 0, 1, 0, 1), 0);
	e = msg("r", 0, 0, 0, 2);
	e.type = SWP_END;
	ck_assert_int_eq(swd_asm_end(a, &e, 10), SWD_ASM_ACCEPT);
	ck_assert_int_eq(nout, 2);
	ck_assert_int_eq(out[1].type, WQ_END);
	ck_assert_int_eq(give_why(a, msg("r", 1, 0, 0, 3), 20, &t, why), SWD_DROP_AFTER_END);
	ck_assert_str_eq(why, "the run was ended");
	ck_assert_int_eq(nout, 2);
	swd_asm_free(&a);
}
END_TEST

/* A copy of a step written whole is compared while the step's digest is
 * kept (the last 8 steps written); a copy of an older one is a duplicate,
 * counted uncompared, nothing computed for it. */
START_TEST(test_copy_of_old_step_uncompared)
{
	swd_asm *a = mk2();
	swd_ticket t;
	/* rank 0 sends both layers of steps 0-8 whole: step 8's digest takes step 0's place */
	for (int64_t s = 0; s < 9; s++)
		for (uint32_t l = 0; l < 2; l++) {
			ck_assert_int_eq(give(a, part(s, l, 0, (uint64_t)(2 * s + l), 0, PH, 0, PR), 0,
			    &t), SWD_ASM_ACCEPT);
			swd_asm_start(a, &t);
			swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 0);
		}
	ck_assert_int_eq(nout, 9);
	/* rank 1 sends layer 0 of step 1 (digest kept), then of step 0 (gone) */
	ck_assert_int_eq(give(a, part(1, 0, 1, 0, 0, PH, 0, PR), 1, &t), SWD_ASM_COPY);
	swd_asm_start(a, &t);
	swd_asm_done(a, &t, result(PH, PR, 0.5, NULL), 1);
	ck_assert_int_eq(give(a, part(0, 0, 1, 1, 0, PH, 0, PR), 1, &t), SWD_DROP_DUPLICATE);
	swd_sender sd[4];
	const char *rn[4];
	ck_assert_uint_eq(swd_asm_senders(a, sd, rn, 4), 2);
	ck_assert_int_eq(sd[1].rank, 1);
	ck_assert_int_eq(sd[1].drop[SWD_DROP_DUPLICATE], 2);
	ck_assert_int_eq(sd[1].uncompared, 1);
	ck_assert_int_eq(sd[1].disagree, 0);
	ck_assert_int_eq(swd_asm_jobs(a), 0);
	swd_asm_free(&a);
}
END_TEST

/* A gathered layer that cannot start at its step's timeout (budget) while
 * another one does is missing, not there: its cells that come after are
 * gathered anew, not duplicates, and start before the step goes out. */
static int refuse_layer = -1;

static int
work_but(void *ud, const swd_ticket *t, const swp_msg *m, swd_parts *data, size_t bytes,
    int32_t *miss)
{
	if ((int)m->layer == refuse_layer)
		return SWD_DROP_BUDGET;
	return work(ud, t, m, data, bytes, miss);
}

START_TEST(test_refused_at_timeout_gathered_anew)
{
	swd_asm_conf c = { .step_timeout_ms = 1000, .max_open_steps = 16, .max_runs = 8,
	    .run_idle_s = 600, .work = work_but };
	nout = nincs = nsenders = nworks = work_refuse = 0;
	swd_asm *a = swd_asm_new(&c, emit, NULL);
	swd_ticket t;
	/* rank 0 sends heads 0-1 of both layers; rank 1 nothing before the timeout */
	ck_assert_int_eq(give(a, part(0, 0, 0, 0, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	ck_assert_int_eq(give(a, part(0, 1, 0, 1, 0, 2, 0, PR), 0, &t), SWD_ASM_HELD);
	refuse_layer = 1;
	swd_asm_tick(a, 1000);	/* layer 0 starts as it is; layer 1 is refused */
	refuse_layer = -1;
	ck_assert_int_eq(nworks, 1);
	ck_assert_uint_eq(works[0].layer, 0);
	ck_assert_int_eq(nout, 0);
	/* rank 1's heads 2-3 of layer 1 come now */
	ck_assert_int_eq(give(a, part(0, 1, 1, 0, 2, 2, 0, PR), 1001, &t), SWD_ASM_HELD);
	ck_assert_int_eq(nworks, 1);
	/* layer 0 done: layer 1 starts as it is, then the step goes */
	finish_works(a, 0, 0.5, 1002);
	ck_assert_int_eq(nworks, 2);
	ck_assert_uint_eq(works[1].layer, 1);
	ck_assert_int_eq(nout, 1);
	ck_assert_int_eq(out[0].type, WQ_STEP);
	ck_assert_uint_eq(out[0].have, 2);
	int32_t want[2 * PH] = { -1, -1, -2, -2, 0, 0, -1, -1 };
	for (uint32_t i = 0; i < 2 * PH; i++)
		ck_assert_int_eq(out[0].mrank[i], want[i]);
	ck_assert_int_eq(sender_of(99, 1)->drop[SWD_DROP_DUPLICATE], 0);
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
	tcase_add_test(tc, test_new_run_rate);
	tcase_add_test(tc, test_refused_table_bounded);
	tcase_add_test(tc, test_end_and_after_end);
	tcase_add_test(tc, test_implicit_incarnation);
	tcase_add_test(tc, test_end_of_one_incarnation);
	tcase_add_test(tc, test_full_open_steps_write_whole_first);
	tcase_add_test(tc, test_named_incarnations_announced);
	tcase_add_test(tc, test_unnamed_sender_survives_close);
	tcase_add_test(tc, test_end_after_idle_close);
	tcase_add_test(tc, test_finished_runs);
	tcase_add_test(tc, test_idle_close_writes_open_steps);
	tcase_add_test(tc, test_run_state_budget);
	tcase_add_test(tc, test_end_keeps_step_order);
	tcase_add_test(tc, test_step_resume_and_seq);
	tcase_add_test(tc, test_unnamed_waits_and_late_clock);
	tcase_add_test(tc, test_full_table_spares_work);
	tcase_add_test(tc, test_parts_held);
	tcase_add_test(tc, test_admitted_and_failed_layers);
	tcase_add_test(tc, test_unnamed_after_end);
	suite_add_tcase(s, tc);
	TCase *tp = tcase_create("senders");
	tcase_add_test(tp, test_parts_by_heads);
	tcase_add_test(tp, test_parts_by_rows);
	tcase_add_test(tp, test_withheld_part_named);
	tcase_add_test(tp, test_overlap_and_copies);
	tcase_add_test(tp, test_senders_end_and_seq);
	tcase_add_test(tp, test_parts_wait_for_budget);
	tcase_add_test(tp, test_stop_writes_gathered_parts);
	tcase_add_test(tp, test_gather_budget_counted);
	tcase_add_test(tp, test_end_senders_checked);
	tcase_add_test(tp, test_end_settles_gathered_layers);
	tcase_add_test(tp, test_drop_reasons_named);
	tcase_add_test(tp, test_gather_edges);
	tcase_add_test(tp, test_gather_bytes_charged);
	tcase_add_test(tp, test_refused_part_leaves_no_step);
	tcase_add_test(tp, test_copy_of_old_step_uncompared);
	tcase_add_test(tp, test_refused_at_timeout_gathered_anew);
	suite_add_tcase(s, tp);
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
