/*
 * assembly.c: step assembly (assembly.h). Pure bookkeeping over a context
 * struct: which run and step a layer belongs to, which messages are
 * duplicates or late, when a step is whole or given up, when a run ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly.h"
#include "daemon/log.h"

#define RECENT 64		/* steps written per run remembered, to name late layers */
#define ENDED_RING 1024		/* incarnations whose run ended, to name after_end */
#define HOLD_MS 1000		/* whole steps wait this long for an earlier one to move */
#define IMPLICIT_RING 256	/* closed runs' inferred incarnations, to go on with */
#define CLOSED_RING 64		/* runs closed idle, for an end that comes later */

struct ainc {
	uint64_t inc;
	uint64_t expect_seq, first_seq;
	int64_t lost;		/* messages missing by seq, this session */
	int named;		/* sent by the sender (inc), not inferred */
	int has_resume;
	int64_t resume;
	struct ainc *next;
};

struct astep {
	int64_t step;
	struct ainc *inc;
	uint64_t last_ms;	/* the last arrival of one of its layers */
	uint64_t seq_min;	/* the least seq of its layers */
	uint32_t have, in_work;
	uint8_t *state;		/* [layers]: 0 none, 1 admitted, 2 in work, 3 done */
	swd_layer **layers;	/* [layers] */
	struct astep *next;
};

struct arun {
	swd_meta meta;
	struct ainc *incs;
	uint64_t implicit;	/* the inferred incarnation of senders without inc */
	uint64_t implicit_expect;	/* its next seq, when taken over from a closed run */
	int64_t lost, incomplete, messages, steps_done, last_step;
	int64_t recent[RECENT];
	uint64_t recent_inc[RECENT];
	uint8_t recent_whole[RECENT];
	size_t nrecent;
	struct astep *open;
	int64_t nopen, jobs;
	int ending;
	uint64_t last_ms;
	struct arun *next;
};

struct swd_asm {
	swd_asm_conf c;
	swd_asm_emit emit;
	void *ud;
	struct arun *runs;
	int64_t nruns, jobs;
	uint64_t ended[ENDED_RING];	/* hash of run id ^ incarnation */
	uint64_t last_implicit;		/* inferred incarnations only grow */
	uint64_t now;			/* the latest time a call was given, ms */
	struct implicit {
		uint64_t h;		/* hash of the run id */
		uint64_t inc, expect;
		int ended;
	} implicit[IMPLICIT_RING];
	size_t nimplicit;
	swd_meta closed[CLOSED_RING];	/* runs closed without an end */
	size_t nclosed;
	size_t nended;
	swd_asm_stats st;
};

static uint64_t
id_hash(const char *s, uint64_t inc)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (h ^ inc) * 0x100000001b3ull;
}

static int
was_ended(const swd_asm *a, const char *run, uint64_t inc)
{
	uint64_t h = id_hash(run, inc);
	size_t n = a->nended < ENDED_RING ? a->nended : ENDED_RING;
	for (size_t i = 0; i < n; i++)
		if (a->ended[i] == h)
			return 1;
	return 0;
}

/* The daemon's clock in the client's incarnation numbering (PROTOCOL.md 7a). */
static uint64_t
implicit_inc(void)
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
	return a;
}

static void
free_step(struct astep *s, uint32_t layers, atomic_llong *inflight)
{
	if (s->layers)
		for (uint32_t i = 0; i < layers; i++)
			swd_layer_free(s->layers[i], inflight);
	free(s->layers);
	free(s->state);
	free(s);
}

static void
free_run(swd_asm *a, struct arun *r)
{
	while (r->open) {
		struct astep *s = r->open;
		r->open = s->next;
		free_step(s, r->meta.layers, a->c.inflight);
	}
	while (r->incs) {
		struct ainc *i = r->incs;
		r->incs = i->next;
		free(i);
	}
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
	free(a);
	*ap = NULL;
}

static void
meta_from(swd_meta *mm, const swp_msg *m)
{
	memset(mm, 0, sizeof(*mm));
	memcpy(mm->run, m->run, sizeof(mm->run));
	memcpy(mm->model, m->model, sizeof(mm->model));
	mm->params = m->params;
	mm->layers = m->layers;
	mm->heads = m->heads;
	mm->sink = m->sink;
	mm->rows = m->shape[1];
	mm->keys = m->shape[2];
	mm->fixed_probe = m->fixed_probe;
	mm->kind = m->kind;
	mm->dtype = m->dtype;
}

/* An emitted item of type t for run r. */
static swd_witem *
item(struct arun *r, int t)
{
	swd_witem *it = calloc(1, sizeof(*it));
	if (it) {
		it->type = t;
		it->meta = r->meta;
	}
	return it;
}

/* Hands a step to the writer, complete or not, and forgets it. */
static void
emit_step(swd_asm *a, struct arun *r, struct astep *s)
{
	for (struct astep **p = &r->open; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	r->nopen--;
	if (s->have == 0) {	/* nothing arrived that was kept: nothing to write */
		free_step(s, r->meta.layers, a->c.inflight);
		return;
	}
	if (s->have < r->meta.layers) {
		r->incomplete++;
		a->st.steps_incomplete++;
		log_warn("run %s: step %lld written incomplete (%u of %u layers)", r->meta.run,
		    (long long)s->step, s->have, r->meta.layers);
	} else {
		a->st.steps_complete++;
	}
	r->recent[r->nrecent % RECENT] = s->step;
	r->recent_inc[r->nrecent % RECENT] = s->inc->inc;
	r->recent_whole[r->nrecent % RECENT] = s->have == r->meta.layers;
	r->nrecent++;
	swd_witem *it = item(r, WQ_STEP);
	if (!it) {
		log_err("run %s: out of memory: step %lld lost", r->meta.run, (long long)s->step);
		free_step(s, r->meta.layers, a->c.inflight);
		return;
	}
	it->step = s->step;
	it->layers = s->layers;
	s->layers = NULL;
	it->lost = r->lost;
	it->incomplete = r->incomplete;
	it->time = swd_wall_now();
	it->inc = s->inc->inc;
	it->first_seq = s->inc->first_seq;
	it->inc_named = s->inc->named;
	it->inc_lost = s->inc->lost;
	it->has_resume = s->inc->has_resume;
	it->resume = s->inc->resume;
	r->steps_done++;
	r->last_step = s->step;
	struct ainc *inc = s->inc;

	free_step(s, r->meta.layers, a->c.inflight);
	it->seq_next = inc->expect_seq;
	a->emit(a->ud, it);
}

static struct astep *
min_open(struct arun *r)
{
	struct astep *m = NULL;
	for (struct astep *t = r->open; t; t = t->next)
		if (!m || t->step < m->step)
			m = t;
	return m;
}

static int
whole(const struct arun *r, const struct astep *s)
{
	return s->have == r->meta.layers;
}

/*
 * Nothing more will arrive for the step: every layer did, or its
 * incarnation ended the run (what it lacks is lost, not late). Such steps
 * go out in step order.
 */
static int
complete(const swd_asm *a, const struct arun *r, const struct astep *s)
{
	return whole(r, s) || (r->ending && (!s->inc->named ||
	    was_ended(a, r->meta.run, s->inc->inc)));
}

/* The earliest step arrives no more: nothing for it for HOLD_MS. */
static int
stalled(const swd_asm *a, const struct astep *t)
{
	return t->in_work == 0 && a->now - t->last_ms >= HOLD_MS;
}

/* A whole step with no earlier open step that is still arriving, or NULL. */
static struct astep *
unblocked(const swd_asm *a, struct arun *r)
{
	struct astep *best = NULL;
	for (struct astep *s = r->open; s; s = s->next) {
		if (!complete(a, r, s) || s->in_work || (best && best->step < s->step))
			continue;
		int ok = 1;
		for (struct astep *t = r->open; t && ok; t = t->next)
			ok = t->step >= s->step || stalled(a, t);
		if (ok)
			best = s;
	}
	return best;
}

/*
 * Whole steps go out in step order while an earlier step is still
 * arriving (the live dH and drift then have their neighbour); behind an
 * earlier step whose input stopped coming they go at once, not after its
 * timeout, so that a stalled step never holds whole ones in memory.
 */
static void
release(swd_asm *a, struct arun *r)
{
	struct astep *m;
	for (;;) {
		if ((m = min_open(r)) && m->in_work == 0 && !memchr(m->state, 1, r->meta.layers) &&
		    (complete(a, r, m) || m->have == 0))
			emit_step(a, r, m);
		else if (m && (m = unblocked(a, r)))
			emit_step(a, r, m);
		else
			break;
	}
}

static void
emit_all(swd_asm *a, struct arun *r)
{
	struct astep *m;
	while ((m = min_open(r)))
		emit_step(a, r, m);
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

static struct ainc *
find_inc(struct arun *r, uint64_t inc)
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
	struct ainc *i = find_inc(r, r->implicit);
	struct implicit *e = &a->implicit[a->nimplicit++ % IMPLICIT_RING];
	e->h = id_hash(r->meta.run, 0);
	e->inc = r->implicit;
	e->expect = i ? i->expect_seq : 0;
	e->ended = ended;
}

static const struct implicit *
find_implicit(const swd_asm *a, const char *run)
{
	uint64_t h = id_hash(run, 0);
	size_t n = a->nimplicit < IMPLICIT_RING ? a->nimplicit : IMPLICIT_RING;
	const struct implicit *best = NULL;
	for (size_t k = 0; k < n; k++)	/* the newest entry of the id */
		if (a->implicit[k].h == h && (!best || a->implicit[k].inc > best->inc))
			best = &a->implicit[k];
	return best;
}

/* A run that ended (or fell idle) and has nothing in flight is written out. */
static void
finish_run(swd_asm *a, struct arun *r, int type)
{
	emit_all(a, r);
	swd_witem *it = item(r, type);
	if (it)
		a->emit(a->ud, it);
	if (r->implicit)	/* a sender without inc goes on under the same one */
		remember_implicit(a, r, type == WQ_END);
	if (type == WQ_CLOSE)
		a->closed[a->nclosed++ % CLOSED_RING] = r->meta;
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
	release(a, r);		/* the ended incarnations' steps are complete now */
	if (r->jobs || r->nopen)
		return 0;
	finish_run(a, r, WQ_END);
	return 1;
}

/*
 * The run to close when the table is full: without an end and without
 * work, the least recently active of those with no step open (closing one
 * with an open step writes that step incomplete), or else of the rest.
 */
static struct arun *
idlest(swd_asm *a)
{
	struct arun *m = NULL;
	for (struct arun *r = a->runs; r; r = r->next) {
		if (r->ending || r->jobs)
			continue;
		if (!m || (r->nopen == 0) > (m->nopen == 0) ||
		    ((r->nopen == 0) == (m->nopen == 0) && r->last_ms < m->last_ms))
			m = r;
	}
	return m;
}


/* The message's incarnation: its own, or the one inferred (PROTOCOL.md 7a). */
static uint64_t
msg_inc(swd_asm *a, struct arun *r, const swp_msg *m)
{
	if (m->inc)
		return m->inc;
	if (!r->implicit && m->seq != 0) {
		const struct implicit *e = find_implicit(a, m->run);
		if (e) {
			r->implicit = e->inc;
			r->implicit_expect = e->expect;
			return r->implicit;
		}
	}
	if (!r->implicit || (m->seq == 0 && r->messages > 0)) {
		uint64_t v = implicit_inc();
		a->last_implicit = v > a->last_implicit ? v : a->last_implicit + 1;
		r->implicit = a->last_implicit;
	}
	return r->implicit;
}

static void
seq_check(struct arun *r, struct ainc *i, uint64_t seq)
{
	if (seq > i->expect_seq) {
		r->lost += (int64_t)(seq - i->expect_seq);
		i->lost += (int64_t)(seq - i->expect_seq);
		log_warn("run %s: %llu message(s) lost before seq %llu", r->meta.run,
		    (unsigned long long)(seq - i->expect_seq), (unsigned long long)seq);
	}
	if (seq >= i->expect_seq)
		i->expect_seq = seq + 1;
}

/*
 * Counting starts at the incarnation's first message here. What a named
 * incarnation sent before it (seq from 0, PROTOCOL.md 7a) and no daemon
 * stored is the writer's to count: it knows what the file holds of it
 * (WQ_INC). A sender without inc cannot be matched to its rows; its count
 * starts at the first seq seen, as a daemon that starts mid-run knows no
 * more.
 */
static struct ainc *
get_inc(swd_asm *a, struct arun *r, uint64_t inc, const swp_msg *m)
{
	struct ainc *i = find_inc(r, inc);
	if (i)
		return i;
	if (!(i = calloc(1, sizeof(*i))))
		return NULL;
	i->inc = inc;
	i->expect_seq = m->seq;
	if (!m->inc && inc == r->implicit && r->implicit_expect)
		i->expect_seq = r->implicit_expect;	/* the same sender, taken over */
	i->first_seq = m->seq;
	i->named = m->inc != 0;
	i->next = r->incs;
	r->incs = i;
	if (i->named) {
		swd_witem *it = item(r, WQ_INC);
		if (it) {
			it->inc = inc;
			it->first_seq = m->seq;
			it->inc_named = 1;
			it->has_resume = m->has_resume;
			it->resume = m->resume;
			a->emit(a->ud, it);
		}
	}
	return i;
}

static struct arun *
find_run(swd_asm *a, const swd_meta *mm)
{
	for (struct arun *r = a->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, mm))
			return r;
	return NULL;
}

static struct arun *
new_run(swd_asm *a, const swd_meta *mm, uint64_t now, char *why, size_t len, int *reason)
{
	if (a->nruns >= a->c.max_runs) {
		struct arun *old = idlest(a);
		if (!old) {
			snprintf(why, len, "max_runs (%lld) runs are all busy",
			    (long long)a->c.max_runs);
			*reason = SWD_DROP_TOO_MANY_RUNS;
			return NULL;
		}
		log_info("run %s: the run table is full: closing it (least recently active)",
		    old->meta.run);
		finish_run(a, old, WQ_CLOSE);
	}
	struct arun *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(why, len, "no memory for a run");
		*reason = SWD_DROP_NOMEM;
		return NULL;
	}
	r->meta = *mm;
	r->last_step = -1;
	r->last_ms = now;
	r->next = a->runs;
	a->runs = r;
	a->nruns++;
	return r;
}

static int
implicit_ended(const swd_asm *a, const char *run, uint64_t inc)
{
	const struct implicit *e = find_implicit(a, run);
	return e && e->inc == inc && e->ended;
}

static struct astep *
find_step(struct arun *r, int64_t step, const struct ainc *inc)
{
	for (struct astep *s = r->open; s; s = s->next)
		if (s->step == step && s->inc == inc)
			return s;
	return NULL;
}

/* 0: not among the steps written lately; 1: written incomplete; 2: whole. */
static int
recently_written(const struct arun *r, int64_t step, uint64_t inc)
{
	size_t n = r->nrecent < RECENT ? r->nrecent : RECENT;
	for (size_t i = 0; i < n; i++)
		if (r->recent[i] == step && r->recent_inc[i] == inc)
			return 1 + r->recent_whole[i];
	return 0;
}

static struct astep *
new_step(swd_asm *a, struct arun *r, const swp_msg *m, struct ainc *inc, uint64_t now,
    char *why, size_t len, int *reason)
{
	if (r->nopen >= a->c.max_open_steps) {
		/*
		 * Room first from whole steps waiting for an earlier one (the
		 * lowest), and only then from the step that waited longest
		 * without input, which goes out incomplete.
		 */
		struct astep *o = NULL, *w = NULL;
		for (struct astep *t = r->open; t; t = t->next) {
			if (t->in_work || memchr(t->state, 1, r->meta.layers))
				continue;
			if (whole(r, t) && (!w || t->step < w->step))
				w = t;
			if (!o || t->last_ms < o->last_ms)
				o = t;
		}
		if (w)
			o = w;
		if (!o) {
			snprintf(why, len, "max_open_steps (%lld) steps of the run are in work",
			    (long long)a->c.max_open_steps);
			*reason = SWD_DROP_OPEN_STEPS;
			return NULL;
		}
		emit_step(a, r, o);
	}
	struct astep *s = calloc(1, sizeof(*s));
	if (s) {
		s->state = calloc(r->meta.layers, 1);
		s->layers = calloc(r->meta.layers, sizeof(*s->layers));
	}
	if (!s || !s->state || !s->layers) {
		if (s)
			free_step(s, 0, NULL);
		snprintf(why, len, "no memory for a step");
		*reason = SWD_DROP_NOMEM;
		return NULL;
	}
	s->step = m->step;
	s->inc = inc;
	s->last_ms = now;
	s->seq_min = m->seq;
	s->next = r->open;
	r->open = s;
	r->nopen++;
	return s;
}

int
swd_asm_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why,
    size_t len)
{
	swd_meta mm;
	int reason = SWD_DROP_NOMEM;

	a->now = now;
	meta_from(&mm, m);
	struct arun *r = find_run(a, &mm);
	if (m->inc && was_ended(a, m->run, m->inc)) {
		snprintf(why, len, "incarnation %llu ended the run",
		    (unsigned long long)m->inc);
		return SWD_DROP_AFTER_END;
	}
	if (!r && !(r = new_run(a, &mm, now, why, len, &reason)))
		return reason;
	uint64_t incv = msg_inc(a, r, m);
	r->messages++;
	r->last_ms = now;
	struct ainc *inc = get_inc(a, r, incv, m);
	if (!inc) {
		snprintf(why, len, "no memory for an incarnation");
		return SWD_DROP_NOMEM;
	}
	seq_check(r, inc, m->seq);
	if (m->has_resume && !inc->has_resume) {
		inc->has_resume = 1;
		inc->resume = m->resume;
		log_info("run %s: incarnation %llu resumes from step %lld", r->meta.run,
		    (unsigned long long)inc->inc, (long long)m->resume);
	}
	if (!inc->named && (r->ending || implicit_ended(a, m->run, inc->inc))) {
		snprintf(why, len, "the run was ended");
		return SWD_DROP_AFTER_END;
	}
	struct astep *s = find_step(r, m->step, inc);
	int written = s ? 0 : recently_written(r, m->step, inc->inc);
	if (written) {
		/* a whole step sent again is a duplicate; a layer after its step
		 * timed out is late (the writer counts re-sends older than this) */
		snprintf(why, len, "step %lld layer %u: the step was already written%s",
		    (long long)m->step, m->layer, written == 2 ? " whole" : " incomplete");
		return written == 2 ? SWD_DROP_DUPLICATE : SWD_DROP_LATE;
	}
	if (s && s->state[m->layer]) {
		snprintf(why, len, "step %lld layer %u arrived twice", (long long)m->step, m->layer);
		return SWD_DROP_DUPLICATE;
	}
	if (!s && !(s = new_step(a, r, m, inc, now, why, len, &reason)))
		return reason;
	s->state[m->layer] = 1;
	s->last_ms = now;
	if (m->seq < s->seq_min)
		s->seq_min = m->seq;
	t->run = r;
	t->step = s;
	t->layer = m->layer;
	return SWD_ASM_ACCEPT;
}

void
swd_asm_start(swd_asm *a, const swd_ticket *t)
{
	struct arun *r = t->run;
	struct astep *s = t->step;
	s->state[t->layer] = 2;
	s->in_work++;
	r->jobs++;
	a->jobs++;
}

void
swd_asm_cancel(swd_asm *a, const swd_ticket *t)
{
	struct arun *r = t->run;
	struct astep *s = t->step;
	s->state[t->layer] = 0;
	release(a, r);
}

int
swd_asm_done(swd_asm *a, const swd_ticket *t, swd_layer *ly, uint64_t now)
{
	struct arun *r = t->run;
	struct astep *s = t->step;

	a->now = now;
	a->jobs--;
	r->jobs--;
	s->in_work--;
	s->last_ms = now;
	if (!ly) {
		s->state[t->layer] = 0;
	} else {
		s->layers[t->layer] = ly;
		s->state[t->layer] = 3;
		s->have++;
	}
	release(a, r);
	maybe_finish(a, r);
	return SWD_ASM_ACCEPT;
}

/*
 * The end of a run that was closed idle (or evicted) before it came: its
 * file, each shape of it, is reopened to be marked ended. 1 if any.
 */
static int
end_closed(swd_asm *a, const char *run)
{
	size_t n = a->nclosed < CLOSED_RING ? a->nclosed : CLOSED_RING;
	int found = 0;
	for (size_t k = 0; k < n; k++) {
		swd_meta *mm = &a->closed[k];
		if (strcmp(mm->run, run))
			continue;
		int dup = 0;	/* one end per shape */
		for (size_t j = 0; j < k && !dup; j++)
			dup = swd_meta_eq(&a->closed[j], mm);
		if (dup)
			continue;
		swd_witem *it = calloc(1, sizeof(*it));
		if (!it)
			continue;
		it->type = WQ_END;
		it->meta = *mm;
		it->reopen = 1;
		a->emit(a->ud, it);
		found = 1;
	}
	for (size_t k = 0; k < n; k++)	/* ended: forgotten */
		if (!strcmp(a->closed[k].run, run))
			a->closed[k].run[0] = '\0';
	return found;
}

/* Whether some run object of the id has heard incarnation inc. */
static int
inc_known(swd_asm *a, const char *run, uint64_t inc)
{
	for (struct arun *r = a->runs; r; r = r->next)
		if (!strcmp(r->meta.run, run) && find_inc(r, inc))
			return 1;
	return 0;
}

int
swd_asm_end(swd_asm *a, const swp_msg *m, uint64_t now)
{
	int found = 0;
	/* a named end ends the runs (shapes) that heard it, or all of the id */
	int only_known = m->inc && inc_known(a, m->run, m->inc);

	a->now = now;
	if (m->inc)
		a->ended[a->nended++ % ENDED_RING] = id_hash(m->run, m->inc);
	for (struct arun *r = a->runs, *next; r; r = next) {
		next = r->next;
		if (strcmp(r->meta.run, m->run) || (only_known && !find_inc(r, m->inc)))
			continue;
		found = 1;
		r->messages++;
		r->last_ms = now;
		uint64_t incv = msg_inc(a, r, m);
		struct ainc *inc = get_inc(a, r, incv, m);
		if (inc)
			seq_check(r, inc, m->seq);
		r->ending = 1;
		log_info("run %s: end received (this session: lost %lld, incomplete %lld)", r->meta.run,
		    (long long)r->lost, (long long)r->incomplete);
		maybe_finish(a, r);
	}
	if (!found)
		found = end_closed(a, m->run);
	return found ? SWD_ASM_ACCEPT : SWD_DROP_UNKNOWN_RUN;
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
			if (s->in_work == 0 && !whole(r, s) && !memchr(s->state, 1, r->meta.layers) &&
			    now - s->last_ms >= (uint64_t)a->c.step_timeout_ms)
				emit_step(a, r, s);
		}
		release(a, r);
		if (maybe_finish(a, r))
			continue;
		if (r->jobs == 0 && !r->ending && r->nopen == 0 &&
		    now - r->last_ms >= (uint64_t)a->c.run_idle_s * 1000) {
			log_info("run %s: no message for %lld s: closing its file", r->meta.run,
			    (long long)a->c.run_idle_s);
			finish_run(a, r, WQ_CLOSE);
		}
	}
}

void
swd_asm_shutdown(swd_asm *a)
{
	while (a->runs) {
		struct arun *r = a->runs;
		emit_all(a, r);
		unlink_run(a, r);
		free_run(a, r);
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
	for (const struct arun *r = a->runs; r && n < max; r = r->next, n++) {
		uint32_t ni = 0;
		for (const struct ainc *i = r->incs; i; i = i->next)
			ni++;
		out[n].run = r->meta.run;
		out[n].model = r->meta.model;
		out[n].layers = r->meta.layers;
		out[n].heads = r->meta.heads;
		out[n].fixed_probe = r->meta.fixed_probe;
		out[n].incarnations = ni;
		out[n].steps_done = r->steps_done;
		out[n].last_step = r->last_step;
		out[n].open_steps = r->nopen;
		out[n].lost = r->lost;
		out[n].incomplete = r->incomplete;
		out[n].messages = r->messages;
	}
	return n;
}

const swd_asm_stats *
swd_asm_get_stats(const swd_asm *a)
{
	return &a->st;
}
