/*
 * assembly_state.c: the assembly's bookkeeping that the other files share:
 * lookups of runs' incarnations, senders and steps, the budget, the
 * messages of each layer, digests of written steps, missing ranks, and the
 * ended and implicit incarnations remembered.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly_int.h"
#include "net/log.h"

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

/* What p holds, not p itself. */
static void
parts_release(swd_parts *p)
{
	for (size_t i = 0; i < p->nown; i++)
		free(p->own[i]);
	for (size_t i = 0; i < p->nheld; i++)
		p->release(p->ud, p->held[i]);
	free(p->own);
	free(p->held);
	free((void *)p->head);
}

void
swd_parts_free(swd_parts *p)
{
	if (!p)
		return;
	parts_release(p);
	free(p);
}

void
as_gather_free(swd_asm *a, struct gather *g)
{
	if (!g)
		return;
	as_charge(a, -(long long)g->bytes);
	swd_parts p = { .head = g->head, .own = g->own, .nown = g->own ? (size_t)g->heads + 1 : 0,
	    .held = g->held, .nheld = g->nheld, .release = a->c.release, .ud = a->c.work_ud };
	parts_release(&p);
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

void
as_free_run(swd_asm *a, struct arun *r)
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

void
as_unlink_run(swd_asm *a, struct arun *r)
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
void
as_remember_implicit(swd_asm *a, struct arun *r, int ended)
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

/* What status shows of a run (its strings point into r). */
size_t
as_fill_run(const struct arun *r, swd_asm_run *o)
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

/* A finished run's last figures, kept for status (the oldest entry replaced). */
void
as_remember_finished(swd_asm *a, const struct arun *r, int ended)
{
	struct fin *f = &a->fin[0];
	for (size_t k = 1; k < SWD_ASM_FINISHED_MAX; k++)
		if (a->fin[k].seq < f->seq)
			f = &a->fin[k];
	f->meta = r->meta;
	as_fill_run(r, &f->r);
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

/* An end item for the writer: the run's file, found by the incarnation. */
swd_witem *
as_end_item(const swp_msg *m, uint64_t inc)
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
int
as_inc_known(swd_asm *a, const char *run, uint64_t inc)
{
	for (struct arun *r = a->runs; r; r = r->next)
		if (!strcmp(r->meta.run, run) && as_find_inc(r, inc))
			return 1;
	return 0;
}

/* The finished entries, the latest first: the k-th latest, or NULL. */
const struct fin *
as_fin_at(const swd_asm *a, size_t k)
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
