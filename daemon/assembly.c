/*
 * assembly.c: step assembly (assembly.h). Pure bookkeeping over a context
 * struct: which run and step a layer belongs to, which messages are
 * duplicates or late, when a step is whole or given up, when a run ends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly.h"
#include "net/log.h"

#include "daemon/assembly_int.h"


uint64_t
as_id_hash(const char *s, uint64_t inc)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (h ^ inc) * 0x100000001b3ull;
}

int
as_was_ended(const swd_asm *a, const char *run, uint64_t inc)
{
	uint64_t h = as_id_hash(run, inc);
	size_t n = a->nended < ENDED_RING ? a->nended : ENDED_RING;
	for (size_t i = 0; i < n; i++)
		if (a->ended[i] == h)
			return 1;
	return 0;
}

/* The daemon's clock in the client's incarnation numbering (PROTOCOL.md 7a). */
uint64_t
as_implicit_inc(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u) << 12;
}

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
as_charge(swd_asm *a, long long bytes)
{
	if (a->c.inflight)
		atomic_fetch_add(a->c.inflight, bytes);
}

int
as_over_budget(const swd_asm *a, size_t bytes)
{
	return a->c.budget_bytes > 0 && a->c.inflight &&
	    atomic_load(a->c.inflight) + (long long)bytes > a->c.budget_bytes;
}

void
as_gather_free(swd_asm *a, struct gather *g)
{
	if (!g)
		return;
	as_charge(a, -(long long)g->bytes);
	free(g->buf);
	free(g->cover);
	free(g->qpos);
	free(g->qset);
	free(g);
}

void
as_free_step(swd_asm *a, struct astep *s, uint32_t layers)
{
	atomic_llong *inflight = a ? a->c.inflight : NULL;
	for (uint32_t i = 0; i < layers; i++) {
		if (s->layers)
			swd_layer_free(s->layers[i], inflight);
		if (s->g)
			as_gather_free(a, s->g[i]);
	}
	while (s->copies) {
		struct pcopy *c = s->copies;
		s->copies = c->next;
		c->snd->c.uncompared++;
		swd_layer_free(c->ly, inflight);
		free(c);
	}
	for (uint32_t i = 0; s->ml && i < layers; i++)
		free(s->ml[i].v);
	free(s->ml);
	free(s->cut);
	free(s->layers);
	free(s->g);
	free(s->state);
	free(s);
}

void
as_digest_free(swd_asm *a, struct digest *d)
{
	as_charge(a, -(long long)d->bytes);
	free(d->hs);
	free(d->hH);
	free(d->hrows);
	free(d->hok);
	free(d->rs);
	free(d->rH);
	free(d->rok);
	memset(d, 0, sizeof(*d));
}

static void
free_run(swd_asm *a, struct arun *r)
{
	while (r->open) {
		struct astep *s = r->open;
		r->open = s->next;
		as_free_step(a, s, r->meta.layers);
	}
	while (r->incs) {
		struct ainc *i = r->incs;
		r->incs = i->next;
		while (i->snd) {
			struct asend *d = i->snd;
			i->snd = d->next;
			free(d);
		}
		as_charge(a, -(long long)i->owner_bytes);
		free(i->owner);
		free(i);
	}
	for (int k = 0; k < DIGESTS; k++)
		as_digest_free(a, &r->dg[k]);
	as_charge(a, -(long long)r->state_bytes);
	free(r);
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
		free_run(a, r);
	}
	free(a->fin);
	free(a->recent);
	free(a);
	*ap = NULL;
}

void
as_meta_from(swd_meta *mm, const swp_msg *m)
{
	memset(mm, 0, sizeof(*mm));
	memcpy(mm->run, m->run, sizeof(mm->run));
	memcpy(mm->model, m->model, sizeof(mm->model));
	mm->params = m->params;
	mm->layers = m->layers;
	mm->heads = m->heads;
	mm->sink = m->sink;
	mm->rows = m->rows ? m->rows : m->shape[1];	/* the probe's, all senders' */
	mm->keys = m->shape[2];
	mm->fixed_probe = m->fixed_probe;
	mm->kind = m->kind;
	mm->dtype = m->dtype;
}

/* An emitted item of type t for run r. */
swd_witem *
as_item(struct arun *r, int t)
{
	swd_witem *it = calloc(1, sizeof(*it));
	if (it) {
		it->type = t;
		it->meta = r->meta;
		it->serial = r->serial;
	}
	return it;
}

struct asend *
as_find_sender(struct ainc *i, uint32_t rank)
{
	for (struct asend *d = i->snd; d; d = d->next)
		if (d->c.rank == rank)
			return d;
	return NULL;
}

struct asend *
as_new_sender(const struct arun *r, struct ainc *i, uint32_t rank, uint64_t seq)
{
	struct asend *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->c.serial = r->serial;
	d->c.inc = i->inc;
	d->c.rank = rank;
	d->c.senders = i->senders;
	d->c.first_seq = d->c.seq_next = seq;
	/* in rank order, for status and the file */
	struct asend **p = &i->snd;
	while (*p && (*p)->c.rank < rank)
		p = &(*p)->next;
	d->next = *p;
	*p = d;
	return d;
}

static void
unlink_run(swd_asm *a, struct arun *r)
{
	for (struct arun **p = &a->runs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	a->nruns--;
}

struct ainc *
as_find_inc(struct arun *r, uint64_t inc)
{
	for (struct ainc *i = r->incs; i; i = i->next)
		if (i->inc == inc)
			return i;
	return NULL;
}

/*
 * A closed (idle, evicted or ended) run's inferred incarnation and next seq:
 * a sender without inc that speaks again, with seq not 0, is the same one.
 */
static void
remember_implicit(swd_asm *a, struct arun *r, int ended)
{
	struct ainc *i = as_find_inc(r, r->implicit);
	struct implicit *e = &a->implicit[a->nimplicit++ % IMPLICIT_RING];
	e->h = as_id_hash(r->meta.run, 0);
	e->inc = r->implicit;
	e->expect = i && i->snd ? i->snd->c.seq_next : 0;
	e->ended = ended;
}

const struct implicit *
as_find_implicit(const swd_asm *a, const char *run)
{
	uint64_t h = as_id_hash(run, 0);
	size_t n = a->nimplicit < IMPLICIT_RING ? a->nimplicit : IMPLICIT_RING;
	const struct implicit *best = NULL;
	for (size_t k = 0; k < n; k++)	/* the newest entry of the id */
		if (a->implicit[k].h == h && (!best || a->implicit[k].inc > best->inc))
			best = &a->implicit[k];
	return best;
}

static size_t fill_run(const struct arun *r, swd_asm_run *o);

/* A finished run's last figures, kept for status (the oldest entry replaced). */
static void
remember_finished(swd_asm *a, const struct arun *r, int ended)
{
	struct fin *f = &a->fin[0];
	for (size_t k = 1; k < SWD_ASM_FINISHED_MAX; k++)
		if (a->fin[k].seq < f->seq)
			f = &a->fin[k];
	f->meta = r->meta;
	fill_run(r, &f->r);
	snprintf(f->gap, sizeof(f->gap), "%s", r->last_gap);
	f->r.run = f->meta.run;
	f->r.model = f->meta.model;
	f->r.last_gap = f->gap;
	f->r.open_steps = 0;
	f->ended = ended;
	f->seq = ++a->fin_seq;
	f->nsnd = 0;
	for (const struct ainc *i = r->incs; i; i = i->next)
		for (const struct asend *d = i->snd; d && f->nsnd < SWD_ASM_FINISHED_SENDERS;
		    d = d->next)
			f->snd[f->nsnd++] = d->c;
}

/* A run that ended (or fell idle) and has nothing in flight is written out. */
void
as_finish_run(swd_asm *a, struct arun *r, int type)
{
	as_emit_all(a, r);
	as_emit_senders(a, r, NULL);
	remember_finished(a, r, type == WQ_END);
	swd_witem *it = as_item(r, type);
	if (it)
		a->emit(a->ud, it);
	if (r->implicit)	/* a sender without inc goes on under the same one */
		remember_implicit(a, r, type == WQ_END);
	unlink_run(a, r);
	free_run(a, r);
}

/*
 * After an end: the ended incarnations' open steps are written as they are
 * (nothing more comes from them); the run is finished, its file marked
 * ended, once no step of any incarnation is open or in work. Another
 * incarnation's steps still arriving are assembled first; its messages
 * after that start the run again (several senders connect separately, so
 * nothing orders them against the end). Returns 1 if r was freed.
 */
static int
maybe_finish(swd_asm *a, struct arun *r)
{
	if (!r->ending)
		return 0;
	as_release(a, r);		/* the ended incarnations' steps are complete now */
	if (r->jobs || r->nopen)
		return 0;
	as_finish_run(a, r, WQ_END);
	return 1;
}

/*
 * The run to close when the table is full: an idle one, without an end,
 * nothing in work and no step open (all it sent is written), the least
 * recently active; NULL if none is idle. A run with a step open is not
 * closed for another: that would write its step incomplete, and a flood of
 * new runs would churn through the table.
 */
struct arun *
as_idlest(swd_asm *a)
{
	struct arun *m = NULL;
	for (struct arun *r = a->runs; r; r = r->next) {
		if (r->ending || r->jobs || r->nopen)
			continue;
		if (!m || r->last_ms < m->last_ms)
			m = r;
	}
	return m;
}

/* A new run takes a token; refilled at new_runs_per_s up to the burst. */
int
as_take_token(swd_asm *a, uint64_t now)
{
	if (a->c.new_runs_per_s <= 0)
		return 1;
	double burst = (double)(a->c.new_runs_burst > 0 ? a->c.new_runs_burst :
	    a->c.new_runs_per_s);
	if (!a->tokens_init) {
		a->tokens = burst;
		a->tokens_ms = now;
		a->tokens_init = 1;
	}
	if (now > a->tokens_ms) {
		a->tokens += (double)(now - a->tokens_ms) * (double)a->c.new_runs_per_s / 1000.0;
		if (a->tokens > burst)
			a->tokens = burst;
		a->tokens_ms = now;
	}
	if (a->tokens < 1.0)
		return 0;
	a->tokens -= 1.0;
	return 1;
}

/* Counts a refused message under its run id (a bounded table, the least
 * recently refused replaced). */
void
as_note_refused(swd_asm *a, const char *run, int reason)
{
	struct refused *e = NULL, *old = &a->refused[0];
	for (size_t i = 0; i < SWD_ASM_REFUSED_MAX; i++) {
		struct refused *x = &a->refused[i];
		if (x->seq && !strcmp(x->run, run)) {
			e = x;
			break;
		}
		if (x->seq < old->seq)
			old = x;
	}
	if (!e) {
		e = old;
		memset(e, 0, sizeof(*e));
		snprintf(e->run, sizeof(e->run), "%s", run);
		a->refused_ids++;
	}
	e->seq = ++a->refused_seq;
	if (reason == SWD_DROP_RUN_RATE)
		e->rate++;
	else if (reason == SWD_DROP_RUN_STATE)
		e->state++;
	else
		e->table++;
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

/* A copy computed: compared now if its step is written, else when it is. */
static void
copy_done(swd_asm *a, const swd_ticket *t, swd_layer *ly)
{
	struct arun *r = t->run;
	struct astep *s = t->step;
	struct asend *sd = t->sender;
	struct pcopy *c = NULL;
	if (!ly) {
		sd->c.uncompared++;
	} else if (!s) {
		as_judge_copy(r, t->cstep, t->layer, ly, sd, t->head0, t->row0);
		swd_layer_free(ly, a->c.inflight);
	} else if ((c = calloc(1, sizeof(*c)))) {
		c->ly = ly;
		c->snd = sd;
		c->layer = t->layer;
		c->head0 = t->head0;
		c->row0 = t->row0;
		c->next = s->copies;
		s->copies = c;
	} else {
		sd->c.uncompared++;
		swd_layer_free(ly, a->c.inflight);
	}
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
		copy_done(a, t, ly);
		as_release(a, r);
		maybe_finish(a, r);
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
	maybe_finish(a, r);
	return SWD_ASM_ACCEPT;
}

/*
 * The end of a run that was closed idle (or evicted) before it came: its
 * file, each shape of it, is reopened to be marked ended. 1 if any.
 */
/* An end item for the writer: the run's file, found by the incarnation. */
static swd_witem *
end_item(const swp_msg *m, uint64_t inc)
{
	swd_witem *it = calloc(1, sizeof(*it));
	if (!it || !(it->snd = calloc(1, sizeof(*it->snd)))) {
		free(it);
		return NULL;
	}
	it->type = WQ_END;
	snprintf(it->meta.run, sizeof(it->meta.run), "%s", m->run);
	it->reopen = 1;
	it->inc = inc;
	it->nsnd = 1;
	swd_sender *c = it->snd;
	c->inc = inc;
	c->rank = m->rank;
	c->senders = m->senders ? m->senders : 1;
	c->first_seq = m->seq;
	c->seq_next = m->seq + 1;
	return it;
}


/* Whether some run object of the id has heard incarnation inc. */
static int
inc_known(swd_asm *a, const char *run, uint64_t inc)
{
	for (struct arun *r = a->runs; r; r = r->next)
		if (!strcmp(r->meta.run, run) && as_find_inc(r, inc))
			return 1;
	return 0;
}

int
swd_asm_end(swd_asm *a, const swp_msg *m, uint64_t now)
{
	int found = 0, inc_ended = 1, rc = SWD_ASM_ACCEPT;
	/* a named end ends the runs (shapes) that heard it, or all of the id */
	int only_known = m->inc && inc_known(a, m->run, m->inc);

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
		maybe_finish(a, r);
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
	swd_witem *it = inc ? end_item(m, inc) : NULL;
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
		if (maybe_finish(a, r))
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
		unlink_run(a, r);
		free_run(a, r);
	}
}

int64_t
swd_asm_jobs(const swd_asm *a)
{
	return a->jobs;
}

/* What status shows of a run (its strings point into r). */
static size_t
fill_run(const struct arun *r, swd_asm_run *o)
{
	uint32_t ni = 0;
	for (const struct ainc *i = r->incs; i; i = i->next)
		ni++;
	o->run = r->meta.run;
	o->model = r->meta.model;
	o->layers = r->meta.layers;
	o->heads = r->meta.heads;
	o->fixed_probe = r->meta.fixed_probe;
	o->incarnations = ni;
	o->steps_done = r->steps_done;
	o->last_step = r->last_step;
	o->open_steps = r->nopen;
	o->lost = r->lost;
	o->incomplete = r->incomplete;
	o->messages = r->messages;
	o->last_gap = r->last_gap;
	return 1;
}

size_t
swd_asm_runs(const swd_asm *a, swd_asm_run *out, size_t max)
{
	size_t n = 0;
	for (const struct arun *r = a->runs; r && n < max; r = r->next)
		n += fill_run(r, &out[n]);
	return n;
}

/* The finished entries, the latest first: the k-th latest, or NULL. */
static const struct fin *
fin_at(const swd_asm *a, size_t k)
{
	uint64_t below = UINT64_MAX;
	const struct fin *best = NULL;
	for (size_t j = 0; j <= k; j++) {	/* at most 64 entries: k^2 is nothing */
		best = NULL;
		for (size_t i = 0; i < SWD_ASM_FINISHED_MAX; i++) {
			const struct fin *f = &a->fin[i];
			if (f->seq && f->seq < below && (!best || f->seq > best->seq))
				best = f;
		}
		if (!best)
			return NULL;
		below = best->seq;
	}
	return best;
}

size_t
swd_asm_finished(const swd_asm *a, swd_asm_run *out, int *ended, size_t max)
{
	size_t n = 0;
	const struct fin *f;
	while (n < max && (f = fin_at(a, n))) {
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
	for (size_t k = 0; (f = fin_at(a, k)); k++)
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
