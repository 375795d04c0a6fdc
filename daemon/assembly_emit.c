/*
 * assembly_emit.c: a step leaves the assembly for the writer: its layers'
 * messages get their fate, the senders' counts go along, copies of written
 * steps are compared (PROTOCOL.md 7b); runs finish, and a finished run is
 * remembered for status.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly_int.h"
#include "net/log.h"

/* The senders' counters, of one incarnation or of all: to the writer. */
static int
fill_senders(struct arun *r, struct ainc *only, swd_witem *it)
{
	size_t n = 0;
	for (struct ainc *i = r->incs; i; i = i->next)
		for (struct asend *d = i->snd; d && (!only || i == only); d = d->next)
			n++;
	if (n == 0)
		return 0;
	if (!(it->snd = malloc(n * sizeof(*it->snd))))
		return -1;
	/*
	 * The file counts what it accounts for: a message still held here
	 * (pending) is in no row yet, and a daemon killed now never stores it,
	 * so the next one counts it lost (the writer's sender_gap).
	 */
	for (struct ainc *i = r->incs; i; i = i->next)
		for (struct asend *d = i->snd; d && (!only || i == only); d = d->next) {
			swd_sender c = d->c;
			c.messages -= c.pending;
			c.pending = 0;
			it->snd[it->nsnd++] = c;
		}
	return 0;
}

void
as_emit_senders(swd_asm *a, struct arun *r, struct ainc *only)
{
	swd_witem *it = as_item(r, WQ_SENDERS);
	if (!it)
		return;
	if (fill_senders(r, only, it) != 0 || it->nsnd == 0) {
		free(it->snd);
		free(it);
		return;
	}
	a->emit(a->ud, it);
}

/*
 * The messages of layer l of s will not be stored: each is counted under
 * reason, for its sender and for the daemon (swd_asm_stats.drops).
 */
void
as_ml_drop(swd_asm *a, struct astep *s, uint32_t l, int reason)
{
	struct mlist *x = s->ml ? &s->ml[l] : NULL;
	for (size_t k = 0; x && k < x->n; k++) {
		struct asend *d = as_find_sender(s->inc, x->v[k].rank);
		if (d) {
			d->c.pending--;
			d->c.drop[reason]++;
		}
		a->st.drops[reason]++;
	}
	if (x)
		x->n = 0;
}

/*
 * The messages of the step's layers that are kept go to the writer with
 * it: stored, for their senders, and counted by rank in the item (the
 * writer's own failures are its to count against them). A part whose heads
 * are written missing (another part of those heads never came: a layer
 * split by rows) is not stored: head_missing. 0 or -1.
 */
static int
ml_store(swd_asm *a, struct arun *r, struct astep *s, swd_witem *it)
{
	size_t cap = 0;
	for (uint32_t l = 0; s->ml && l < r->meta.layers; l++)
		cap += s->layers[l] ? s->ml[l].n : 0;
	if (cap && !(it->mc = malloc(cap * sizeof(*it->mc))))
		return -1;
	for (uint32_t l = 0; s->ml && l < r->meta.layers; l++) {
		struct mlist *x = &s->ml[l];
		const swd_layer *ly = s->layers[l];
		for (size_t k = 0; ly && k < x->n; k++) {
			struct asend *d = as_find_sender(s->inc, x->v[k].rank);
			int gone = 0;
			for (uint32_t h = x->v[k].head0; ly->miss_rank && !gone &&
			    h < x->v[k].head0 + x->v[k].nh && h < ly->heads; h++)
				gone = ly->miss_rank[h] != -1;
			if (d)
				d->c.pending--;
			if (gone) {
				if (d)
					d->c.drop[SWD_DROP_HEAD_MISSING]++;
				a->st.drops[SWD_DROP_HEAD_MISSING]++;
				continue;
			}
			if (d)
				d->c.stored++;
			size_t j = 0;
			while (j < it->nmc && it->mc[j].rank != x->v[k].rank)
				j++;
			if (j == it->nmc)
				it->mc[it->nmc++] = (struct swd_mcount){ x->v[k].rank, 0 };
			it->mc[j].n++;
		}
		if (s->layers[l])
			x->n = 0;
	}
	return 0;
}

/* The rank that should have sent cell (l, h, q) of incarnation i: -2 unknown. */
int32_t
as_owner_of(const struct arun *r, const struct ainc *i, uint32_t l, uint32_t h, uint32_t q)
{
	if (i->owner)
		return i->owner[((size_t)l * r->meta.heads + h) * r->meta.rows + q];
	if (i->senders == 1 && i->snd)
		return (int32_t)i->snd->c.rank;
	return -2;
}

/*
 * The missing heads of a step written incomplete, each named by the rank
 * that should have sent it: [L * H], -1 where present. Counted against
 * those senders, and logged (and kept for status) by layer and rank.
 */
static int32_t *
missing_ranks(swd_asm *a, struct arun *r, struct astep *s)
{
	(void)a;
	uint32_t L = r->meta.layers, H = r->meta.heads;
	int32_t *mr = malloc((size_t)L * H * sizeof(*mr));
	if (!mr)
		return NULL;
	char gap[sizeof(r->last_gap)] = "";
	int groups = 0;
	for (uint32_t l = 0; l < L; l++) {
		const swd_layer *ly = s->layers[l];
		for (uint32_t h = 0; h < H; h++) {
			int32_t v = -1;
			if (!ly)
				v = as_owner_of(r, s->inc, l, h, 0);
			else if (ly->miss_rank)
				v = ly->miss_rank[h];
			mr[(size_t)l * H + h] = v;
			if (v == -1)
				continue;
			if (v >= 0) {
				struct asend *d = as_find_sender(s->inc, (uint32_t)v);
				if (!d)	/* a rank that sent before, not in this session */
					d = as_new_sender(r, s->inc, (uint32_t)v, 0);
				if (d)
					d->c.missing++;
			}
			/* a group: heads h0..h of one layer and one rank */
			if (h > 0 && mr[(size_t)l * H + h - 1] == v)
				continue;
			uint32_t e = h;
			while (e + 1 < H && (ly ? (ly->miss_rank ? ly->miss_rank[e + 1] : -1) :
			    as_owner_of(r, s->inc, l, e + 1, 0)) == v)
				e++;
			char rk[32];
			if (v >= 0)
				snprintf(rk, sizeof(rk), "rank %d", v);
			else
				snprintf(rk, sizeof(rk), "no rank known");
			if (groups++ == 0)
				snprintf(gap, sizeof(gap), "step %lld layer %u heads %u-%u missing (%s)",
				    (long long)s->step, l, h, e, rk);
			if (groups <= 8)
				log_warn("run %s: step %lld layer %u heads %u-%u missing (%s)",
				    r->meta.run, (long long)s->step, l, h, e, rk);
		}
	}
	if (groups > 1) {
		size_t n = strlen(gap);
		snprintf(gap + n, sizeof(gap) - n, " and %d more", groups - 1);
	}
	if (groups)
		memcpy(r->last_gap, gap, sizeof(gap));
	return mr;
}

struct digest *
as_find_digest(struct arun *r, int64_t step, uint64_t inc)
{
	for (int k = 0; k < DIGESTS; k++)
		if (r->dg[k].valid && r->dg[k].step == step && r->dg[k].inc == inc)
			return &r->dg[k];
	return NULL;
}

/* The run's digest of a step of a several-sender incarnation, to compare copies. */
static void
digest_step(swd_asm *a, struct arun *r, struct astep *s)
{
	struct digest *d = as_find_digest(r, s->step, s->inc->inc);
	if (!d)
		d = &r->dg[r->ndg++ % DIGESTS];
	d->valid = 0;
	uint32_t L = r->meta.layers, H = r->meta.heads, R = r->meta.rows;
	size_t LH = (size_t)L * H, LHR = LH * R;
	int fixed = r->meta.fixed_probe;
	if (!d->hs) {
		size_t b = LH * (3 * sizeof(double) + 1) + (fixed ? LHR * (2 * sizeof(double) + 1) : 0);
		if (as_over_budget(a, b))
			return;
		d->hs = malloc(LH * sizeof(double));
		d->hH = malloc(LH * sizeof(double));
		d->hrows = malloc(LH * sizeof(uint64_t));
		d->hok = malloc(LH);
		if (fixed) {
			d->rs = malloc(LHR * sizeof(double));
			d->rH = malloc(LHR * sizeof(double));
			d->rok = malloc(LHR);
		}
		d->bytes = b;
		as_charge(a, (long long)b);
		if (!d->hs || !d->hH || !d->hrows || !d->hok ||
		    (fixed && (!d->rs || !d->rH || !d->rok))) {
			as_digest_free(a, d);
			return;
		}
	}
	for (uint32_t l = 0; l < L; l++) {
		const swd_layer *ly = s->layers[l];
		for (uint32_t h = 0; h < H; h++) {
			size_t i = (size_t)l * H + h;
			int ok = ly && (!ly->miss_rank || ly->miss_rank[h] < 0);
			d->hok[i] = (uint8_t)ok;
			d->hrows[i] = ok ? ly->acc[h].rows : 0;
			d->hs[i] = ok && d->hrows[i] ? ly->acc[h].s / (double)d->hrows[i] : NAN;
			d->hH[i] = ok && d->hrows[i] ? ly->acc[h].H / (double)d->hrows[i] : NAN;
			for (uint32_t q = 0; fixed && q < R; q++) {
				size_t k = i * R + q;
				const swm_row *w = ok && ly->rows_st && ly->rows == R ?
				    &ly->rows_st[(size_t)h * R + q] : NULL;
				d->rok[k] = w ? (uint8_t)w->status : 255;
				d->rs[k] = w ? w->s : NAN;
				d->rH[k] = w ? w->H : NAN;
			}
		}
	}
	d->step = s->step;
	d->inc = s->inc->inc;
	d->valid = 1;
}

/*
 * A copy (a part or layer that another sender sent first) against the
 * digest of what was kept: fixed probes row by row (status, s, H), others
 * per head when the copy holds every row (rows, mean s, mean H). Returns
 * 1 if they differ beyond CMP_TOL, 0 if they agree, -1 if nothing could be
 * compared; what says where they differ.
 */
static int
compare_copy(const struct arun *r, const struct digest *d, uint32_t l, const swd_layer *cl,
    uint32_t head0, uint32_t row0, char *what, size_t wl)
{
	uint32_t H = r->meta.heads, R = r->meta.rows;
	int cmp = 0;
	if (r->meta.fixed_probe && d->rs && cl->rows_st) {
		for (uint32_t h = 0; h < cl->heads; h++)
			for (uint32_t q = 0; q < cl->rows; q++) {
				size_t k = ((size_t)l * H + head0 + h) * R + row0 + q;
				const swm_row *w = &cl->rows_st[(size_t)h * cl->rows + q];
				if (d->rok[k] == 255)
					continue;
				cmp = 1;
				if (d->rok[k] != (uint8_t)w->status || (w->status == SWM_OK &&
				    (fabs(w->s - d->rs[k]) > CMP_TOL || fabs(w->H - d->rH[k]) > CMP_TOL))) {
					snprintf(what, wl, "head %u row %u: sink mass %.9g vs %.9g, entropy "
					    "%.9g vs %.9g, status %d vs %d", head0 + h, row0 + q, w->s,
					    d->rs[k], w->H, d->rH[k], (int)w->status, (int)d->rok[k]);
					return 1;
				}
			}
		return cmp ? 0 : -1;
	}
	if (row0 != 0 || cl->rows != R)
		return -1;
	for (uint32_t h = 0; h < cl->heads; h++) {
		size_t i = (size_t)l * H + head0 + h;
		if (!d->hok[i])
			continue;
		cmp = 1;
		uint64_t n = cl->acc[h].rows;
		double s = n ? cl->acc[h].s / (double)n : NAN, e = n ? cl->acc[h].H / (double)n : NAN;
		if (n != d->hrows[i] || (n && (fabs(s - d->hs[i]) > CMP_TOL ||
		    fabs(e - d->hH[i]) > CMP_TOL))) {
			snprintf(what, wl, "head %u: %llu rows vs %llu, mean sink mass %.9g vs %.9g, "
			    "mean entropy %.9g vs %.9g", head0 + h, (unsigned long long)n,
			    (unsigned long long)d->hrows[i], s, d->hs[i], e, d->hH[i]);
			return 1;
		}
	}
	return cmp ? 0 : -1;
}

/* Counts a copy's comparison against its sender. */
static void
as_judge_copy(struct arun *r, int64_t step, uint32_t l, const swd_layer *cl, struct asend *sd,
    uint32_t head0, uint32_t row0)
{
	char what[256];
	const struct digest *d = as_find_digest(r, step, sd->c.inc);
	int v = d ? compare_copy(r, d, l, cl, head0, row0, what, sizeof(what)) : -1;
	if (v < 0) {
		sd->c.uncompared++;
	} else if (v > 0) {
		sd->c.disagree++;
		log_warn("run %s: step %lld layer %u: rank %u's copy differs from the data kept "
		    "(over %g): %s", r->meta.run, (long long)step, l, sd->c.rank, CMP_TOL, what);
	}
}

/* Hands a step to the writer, as_complete or not, and forgets it. */
void
as_emit_step(swd_asm *a, struct arun *r, struct astep *s)
{
	for (struct astep **p = &r->open; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	r->nopen--;
	/* parts never started (settle starts them first): not stored, counted */
	for (uint32_t l = 0; s->g && l < r->meta.layers; l++)
		if (s->g[l]) {
			log_err("run %s: step %lld layer %u: its parts were never computed",
			    r->meta.run, (long long)s->step, l);
			as_ml_drop(a, s, l, a->stopping ? SWD_DROP_STOPPING : SWD_DROP_NOMEM);
			as_gather_free(a, s->g[l]);
			s->g[l] = NULL;
		}
	if (s->have == 0) {	/* nothing arrived that was kept: nothing to write */
		as_free_step(a, s, r->meta.layers);
		return;
	}
	int32_t *mr = NULL;
	if (s->have < r->meta.layers || s->partial) {
		r->incomplete++;
		a->st.steps_incomplete++;
		log_warn("run %s: step %lld written incomplete (%u of %u layers, %u of them "
		    "without some heads)", r->meta.run, (long long)s->step, s->have,
		    r->meta.layers, s->partial);
		mr = missing_ranks(a, r, s);
	} else {
		a->st.steps_complete++;
	}
	if (s->inc->senders > 1) {
		digest_step(a, r, s);
		while (s->copies) {
			struct pcopy *c = s->copies;
			s->copies = c->next;
			as_judge_copy(r, s->step, c->layer, c->ly, c->snd, c->head0, c->row0);
			swd_layer_free(c->ly, a->c.inflight);
			free(c);
		}
	}
	struct recent *w = &a->recent[a->nrecent++ % RECENT];
	w->h = as_id_hash(r->meta.run, s->inc->inc);
	w->step = s->step;
	w->whole = s->have == r->meta.layers && !s->partial;
	swd_witem *it = as_item(r, WQ_STEP);
	int stored = it && ml_store(a, r, s, it) == 0;
	if (!stored || fill_senders(r, s->inc, it) != 0) {
		log_err("run %s: out of memory: step %lld lost", r->meta.run, (long long)s->step);
		for (size_t k = 0; stored && k < it->nmc; k++) {	/* not stored after all */
			struct asend *d = as_find_sender(s->inc, it->mc[k].rank);
			if (d) {
				d->c.stored -= it->mc[k].n;
				d->c.drop[SWD_DROP_NOMEM] += it->mc[k].n;
			}
			a->st.drops[SWD_DROP_NOMEM] += it->mc[k].n;
		}
		if (it) {
			free(it->snd);
			free(it->mc);
		}
		free(it);
		free(mr);
		for (uint32_t l = 0; l < r->meta.layers; l++)	/* what ml_store did not take */
			as_ml_drop(a, s, l, SWD_DROP_NOMEM);
		as_free_step(a, s, r->meta.layers);
		return;
	}
	it->missing_rank = mr;
	it->inc_senders = s->inc->senders;
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

	as_free_step(a, s, r->meta.layers);
	for (struct asend *d = inc->snd; d; d = d->next)
		it->seq_next += d->c.seq_next;
	a->emit(a->ud, it);
}

struct astep *
as_min_open(struct arun *r)
{
	struct astep *m = NULL;
	for (struct astep *t = r->open; t; t = t->next)
		if (!m || t->step < m->step)
			m = t;
	return m;
}

void
as_emit_all(swd_asm *a, struct arun *r)
{
	struct astep *m;
	while ((m = as_min_open(r)))
		as_emit_step(a, r, m);
}

/* A run that ended (or fell idle) and has nothing in flight is written out. */
void
as_finish_run(swd_asm *a, struct arun *r, int type)
{
	as_emit_all(a, r);
	as_emit_senders(a, r, NULL);
	as_remember_finished(a, r, type == WQ_END);
	swd_witem *it = as_item(r, type);
	if (it)
		a->emit(a->ud, it);
	if (r->implicit)	/* a sender without inc goes on under the same one */
		as_remember_implicit(a, r, type == WQ_END);
	as_unlink_run(a, r);
	as_free_run(a, r);
}

/* A copy computed: compared now if its step is written, else when it is. */
void
as_copy_done(swd_asm *a, const swd_ticket *t, swd_layer *ly)
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

/*
 * Room for one more message in layer l of step s (so that ml_push cannot
 * fail). 0 or -1.
 */
int
as_ml_reserve(const struct arun *r, struct astep *s, uint32_t l)
{
	if (!s->ml && !(s->ml = calloc(r->meta.layers, sizeof(*s->ml))))
		return -1;
	struct mlist *x = &s->ml[l];
	if (x->n < x->cap)
		return 0;
	size_t cap = x->cap ? 2 * x->cap : 4;
	struct mref *v = realloc(x->v, cap * sizeof(*v));
	if (!v)
		return -1;
	x->v = v;
	x->cap = cap;
	return 0;
}

/* A message of d (seq, heads head0..head0+nh-1) is in layer l of s now:
 * pending until the step goes. */
void
as_ml_push(struct astep *s, uint32_t l, struct asend *d, uint64_t seq, uint32_t head0,
    uint32_t nh)
{
	struct mlist *x = &s->ml[l];
	x->v[x->n++] = (struct mref){ d->c.rank, head0, nh, seq };
	d->c.pending++;
}

/* The message (rank, seq) leaves layer l of s: not pending any more. */
void
as_ml_forget(struct astep *s, uint32_t l, struct asend *d, uint64_t seq)
{
	struct mlist *x = s->ml ? &s->ml[l] : NULL;
	for (size_t k = x ? x->n : 0; k-- > 0;)
		if (x->v[k].rank == d->c.rank && x->v[k].seq == seq) {
			x->v[k] = x->v[--x->n];
			d->c.pending--;
			return;
		}
}

int
as_whole(const struct arun *r, const struct astep *s)
{
	return s->have == r->meta.layers && !s->partial;
}

/*
 * Nothing more will arrive for the step: every layer did, or its
 * incarnation ended the run (what it lacks is lost, not late). Such steps
 * go out in step order.
 */
int
as_complete(const swd_asm *a, const struct arun *r, const struct astep *s)
{
	return as_whole(r, s) || s->timed_out || (r->ending && (!s->inc->named ||
	    as_was_ended(a, r->meta.run, s->inc->inc)));
}

/* The earliest step arrives no more: nothing for it for HOLD_MS. */
static int
stalled(const swd_asm *a, const struct astep *t)
{
	return t->in_work == 0 && a->now - t->last_ms >= HOLD_MS;
}

/* A whole step with no earlier open step that is still arriving, or NULL. */
struct astep *
as_unblocked(const swd_asm *a, struct arun *r)
{
	struct astep *best = NULL;
	for (struct astep *s = r->open; s; s = s->next) {
		if (!as_complete(a, r, s) || s->in_work || (best && best->step < s->step))
			continue;
		int ok = 1;
		for (struct astep *t = r->open; t && ok; t = t->next)
			ok = t->step >= s->step || stalled(a, t);
		if (ok)
			best = s;
	}
	return best;
}
