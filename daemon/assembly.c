/*
 * assembly.c: step assembly (assembly.h), its interface: the context, a
 * message's admission and counting, the work of a layer started, done or
 * cancelled, ends, ticks, shutdown and the status tables. Pure bookkeeping
 * over a context struct, in four files that call downwards only:
 * assembly.c -> assembly_admit.c -> assembly_emit.c -> assembly_state.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly_int.h"
#include "net/log.h"

swd_asm *
swd_asm_new(const swd_asm_conf *c, swd_asm_emit emit, void *ud)
{
	swd_asm *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->c = *c;
	a->emit = emit;
	a->ud = ud;
	a->fin = calloc(SWD_ASM_FINISHED_MAX, sizeof(*a->fin));
	a->recent = calloc(RECENT, sizeof(*a->recent));
	if (!a->fin || !a->recent) {
		free(a->fin);
		free(a->recent);
		free(a);
		return NULL;
	}
	return a;
}

void
swd_asm_free(swd_asm **ap)
{
	swd_asm *a = *ap;
	if (!a)
		return;
	while (a->runs) {
		struct arun *r = a->runs;
		a->runs = r->next;
		as_free_run(a, r);
	}
	free(a->fin);
	free(a->recent);
	free(a);
	*ap = NULL;
}

int64_t
swd_asm_refused_total(const swd_asm *a)
{
	return a->refused_ids;
}

size_t
swd_asm_refused_runs(const swd_asm *a, swd_asm_refused *out, size_t max)
{
	size_t n = 0;
	uint64_t below = UINT64_MAX;
	while (n < max) {	/* the latest first: at most 64 entries, n^2 is nothing */
		const struct refused *best = NULL;
		for (size_t i = 0; i < SWD_ASM_REFUSED_MAX; i++) {
			const struct refused *x = &a->refused[i];
			if (x->seq && x->seq < below && (!best || x->seq > best->seq))
				best = x;
		}
		if (!best)
			break;
		out[n++] = (swd_asm_refused){ best->run, best->table, best->rate, best->state };
		below = best->seq;
	}
	return n;
}

void
swd_asm_start(swd_asm *a, const swd_ticket *t)
{
	struct arun *r = t->run;
	struct astep *s = t->step;
	if (s && !t->copy)
		s->state[t->layer] = 2;
	if (s)
		s->in_work++;
	r->jobs++;
	a->jobs++;
}

void
swd_asm_cancel(swd_asm *a, const swd_ticket *t, int reason)
{
	struct arun *r = t->run;
	struct astep *s = t->step;
	struct asend *sd = t->sender;
	if (t->copy) {	/* counted a duplicate already; only its comparison is lost */
		sd->c.uncompared++;
		return;
	}
	as_ml_forget(s, t->layer, sd, t->seq);
	sd->c.drop[reason]++;
	s->state[t->layer] = 0;
	as_release(a, r);
}

int
swd_asm_done(swd_asm *a, const swd_ticket *t, swd_layer *ly, uint64_t now)
{
	struct arun *r = t->run;
	struct astep *s = t->step;

	a->now = now;
	a->jobs--;
	r->jobs--;
	if (s)
		s->in_work--;
	if (t->copy) {
		as_copy_done(a, t, ly);
		as_release(a, r);
		as_maybe_finish(a, r);
		return SWD_ASM_ACCEPT;
	}
	s->last_ms = now;
	if (!ly) {	/* the work failed: its messages are not stored */
		as_ml_drop(a, s, t->layer, SWD_DROP_NOMEM);
		s->state[t->layer] = 0;
	} else {
		s->layers[t->layer] = ly;
		s->state[t->layer] = 3;
		s->partial += ly->miss_rank != NULL;
		s->have++;
	}
	as_release(a, r);
	as_maybe_finish(a, r);
	return SWD_ASM_ACCEPT;
}

int
swd_asm_end(swd_asm *a, const swp_msg *m, uint64_t now)
{
	int found = 0, inc_ended = 1, rc = SWD_ASM_ACCEPT;
	/* a named end ends the runs (shapes) that heard it, or all of the id */
	int only_known = m->inc && as_inc_known(a, m->run, m->inc);

	a->now = now;
	for (struct arun *r = a->runs, *next; r; r = next) {
		next = r->next;
		if (strcmp(r->meta.run, m->run) || (only_known && !as_find_inc(r, m->inc)))
			continue;
		found = 1;
		r->messages++;
		r->last_ms = now;
		uint64_t incv = as_msg_inc(a, r, m);
		struct ainc *inc = as_get_inc(a, r, incv, m);
		struct asend *sd = inc ? as_get_sender(a, r, inc, m) : NULL;
		if (sd) {
			sd->c.messages++;
			as_seq_check(r, inc, sd, m->seq);
		}
		/* an end that disagrees on senders ends nothing (7b.1); a second end is after_end */
		uint32_t nsend = m->senders ? m->senders : 1;
		int bad = SWD_ASM_ACCEPT;
		if (inc && nsend != inc->senders) {
			log_warn("run %s: rank %u's end says %u senders, incarnation %llu has %u: "
			    "not taken", r->meta.run, m->rank, nsend, (unsigned long long)inc->inc,
			    inc->senders);
			bad = SWD_DROP_SENDERS;
		} else if (sd && sd->c.ended) {
			bad = SWD_DROP_AFTER_END;
		}
		if (bad != SWD_ASM_ACCEPT) {
			if (sd)
				sd->c.drop[bad]++;
			rc = bad;
			inc_ended = 0;
			continue;
		}
		if (sd) {
			sd->c.ended = 1;
			inc->nended++;
		}
		/* several senders: the incarnation ends with the last of them (7b) */
		if (inc && inc->nended < inc->senders) {
			inc_ended = 0;
			log_info("run %s: rank %u ended its part (%u of %u senders ended)",
			    r->meta.run, m->rank, inc->nended, inc->senders);
			continue;
		}
		if (m->inc && !as_was_ended(a, m->run, m->inc))	/* before its steps go */
			a->ended[a->nended++ % ENDED_RING] = as_id_hash(m->run, m->inc);
		r->ending = 1;
		log_info("run %s: end received (this session: lost %lld, incomplete %lld)", r->meta.run,
		    (long long)r->lost, (long long)r->incomplete);
		as_maybe_finish(a, r);
	}
	/* an end of a run not held here (unknown_run) ends nothing: one rank's end
	 * after a restart must not drop its incarnation's other ranks (after_end) */
	if (found && m->inc && inc_ended && !as_was_ended(a, m->run, m->inc))
		a->ended[a->nended++ % ENDED_RING] = as_id_hash(m->run, m->inc);
	if (found)
		return rc;
	/*
	 * A run not held here (closed idle, or held before a restart): the
	 * writer counts the end in the file that holds its incarnation; a
	 * sender without inc is the one inferred for the run id before.
	 */
	uint64_t inc = m->inc;
	struct implicit *e = inc ? NULL : (struct implicit *)as_find_implicit(a, m->run);
	if (e && !e->ended)
		inc = e->inc;
	swd_witem *it = inc ? as_end_item(m, inc) : NULL;
	if (!it)
		return SWD_DROP_UNKNOWN_RUN;
	if (e)
		e->ended = 1;	/* its later messages: after_end */
	struct lend *l = &a->lend[a->nlend++ % ENDED_RING];
	l->h = as_id_hash(m->run, inc);
	l->rank = m->rank;
	a->emit(a->ud, it);
	return SWD_ASM_DEFERRED;
}

void
swd_asm_tick(swd_asm *a, uint64_t now)
{
	a->now = now;
	for (struct arun *r = a->runs, *next; r; r = next) {
		next = r->next;
		/* a step is given up only when its input stopped coming */
		for (struct astep *s = r->open, *sn; s; s = sn) {
			sn = s->next;
			int late = now - s->last_ms >= (uint64_t)a->c.step_timeout_ms;
			/* gathered layers that are whole and could not start yet */
			for (uint32_t l = 0; s->g && l < r->meta.layers && !late; l++)
				if (s->g[l] && s->g[l]->covered == (uint64_t)r->meta.heads * r->meta.rows)
					as_launch(a, r, s, l, 0);
			/* at the timeout the rest start as they are, their missing heads named */
			if (late && s->in_work == 0 && !as_whole(r, s) &&
			    !memchr(s->state, 1, r->meta.layers) && as_settle(a, r, s))
				as_emit_step(a, r, s);
		}
		as_release(a, r);
		if (as_maybe_finish(a, r))
			continue;
		if (r->jobs == 0 && !r->ending &&
		    now - r->last_ms >= (uint64_t)a->c.run_idle_s * 1000) {
			/* its open steps go out as they are (incomplete, counted), then it
			 * closes (sinkwatchd(8)); gathered layers start first */
			int started = 0;
			for (struct astep *s = r->open; s; s = s->next)
				if (s->g && !as_settle(a, r, s))
					started = 1;
			if (started || r->jobs)
				continue;
			log_info("run %s: no message for %lld s: writing its %lld open step(s) and "
			    "closing its file", r->meta.run, (long long)a->c.run_idle_s,
			    (long long)r->nopen);
			as_finish_run(a, r, WQ_CLOSE);
		}
	}
}

void
swd_asm_stop(swd_asm *a)
{
	a->stopping = 1;
	/*
	 * Every gathered layer starts, as it is, its missing heads named (those
	 * that cannot start are counted by as_settle); the steps go out in step
	 * order as their work ends, the rest at swd_asm_shutdown.
	 */
	for (struct arun *r = a->runs; r; r = r->next)
		for (struct astep *s = r->open; s; s = s->next)
			if (s->g)
				as_settle(a, r, s);
}

void
swd_asm_shutdown(swd_asm *a)
{
	a->stopping = 1;
	while (a->runs) {
		struct arun *r = a->runs;
		as_emit_all(a, r);
		as_emit_senders(a, r, NULL);
		as_unlink_run(a, r);
		as_free_run(a, r);
	}
}

int64_t
swd_asm_jobs(const swd_asm *a)
{
	return a->jobs;
}

size_t
swd_asm_runs(const swd_asm *a, swd_asm_run *out, size_t max)
{
	size_t n = 0;
	for (const struct arun *r = a->runs; r && n < max; r = r->next)
		n += as_fill_run(r, &out[n]);
	return n;
}

size_t
swd_asm_finished(const swd_asm *a, swd_asm_run *out, int *ended, size_t max)
{
	size_t n = 0;
	const struct fin *f;
	while (n < max && (f = as_fin_at(a, n))) {
		out[n] = f->r;
		ended[n++] = f->ended;
	}
	return n;
}

size_t
swd_asm_finished_senders(const swd_asm *a, swd_sender *out, const char **run, size_t max)
{
	size_t n = 0;
	const struct fin *f;
	for (size_t k = 0; (f = as_fin_at(a, k)); k++)
		for (size_t i = 0; i < f->nsnd && n < max; i++) {
			run[n] = f->meta.run;
			out[n++] = f->snd[i];
		}
	return n;
}

void
swd_asm_count(const swd_asm *a, int64_t *runs, int64_t *senders)
{
	*runs = a->nruns;
	*senders = 0;
	for (const struct arun *r = a->runs; r; r = r->next)
		for (const struct ainc *i = r->incs; i; i = i->next)
			for (const struct asend *d = i->snd; d; d = d->next)
				(*senders)++;
}

size_t
swd_asm_senders(const swd_asm *a, swd_sender *out, const char **run, size_t max)
{
	size_t n = 0;
	for (const struct arun *r = a->runs; r; r = r->next)
		for (const struct ainc *i = r->incs; i; i = i->next)
			for (const struct asend *d = i->snd; d && n < max; d = d->next) {
				run[n] = r->meta.run;
				out[n++] = d->c;
			}
	return n;
}

const swd_asm_stats *
swd_asm_get_stats(const swd_asm *a)
{
	return &a->st;
}

int
swd_asm_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why,
    size_t len)
{
	struct asend *sd = NULL;
	int rc = as_admit(a, m, now, t, why, len, &sd);
	if (sd)
		sd->c.pending--;	/* decided: held in a layer (as_ml_push), or dropped */
	/* a message its sender sent, not stored: counted once, for the sender too */
	if (sd && rc >= 0)
		sd->c.drop[rc]++;
	else if (sd && rc == SWD_ASM_COPY)
		sd->c.drop[SWD_DROP_DUPLICATE]++;
	return rc;
}

void
swd_asm_refuse(swd_asm *a, const swp_msg *m, int reason)
{
	swd_meta mm;
	as_meta_from(&mm, m);
	struct arun *r = as_find_run(a, &mm);
	uint64_t incv = r ? (m->inc ? m->inc : r->implicit) : 0;
	struct ainc *i = incv ? as_find_inc(r, incv) : NULL;
	struct asend *d = i ? as_find_sender(i, m->rank) : NULL;
	if (!d)
		return;
	r->messages++;
	d->c.messages++;
	as_seq_check(r, i, d, m->seq);
	d->c.drop[reason]++;
}
