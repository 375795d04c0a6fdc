/*
 * assembly_admit.c: a message admitted into the assembly: its run (new runs
 * limited by table, rate and budget), incarnation and sender (seq, loss),
 * step and layer; several senders' parts gathered into a layer, layers
 * launched to the metric workers, and whole steps released in order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/assembly_int.h"
#include "net/log.h"

/* as_admit's steps go on (GO_ON) or take the message as a part (PART) */
#define GO_ON (-1000)
#define PART (-1001)

/*
 * Starts the work of a gathered layer (conf.work): whole, or at the step's
 * timeout with the heads that lack a cell marked missing, named by rank.
 * SWD_ASM_ACCEPT, or the callee's drop reason (the gather is kept).
 */
int
as_launch(swd_asm *a, struct arun *r, struct astep *s, uint32_t l, int partial)
{
	struct gather *g = s->g[l];
	uint32_t H = r->meta.heads, R = r->meta.rows;
	int32_t *miss = NULL;
	if (partial && g->covered < (uint64_t)H * R) {
		if (!(miss = malloc(H * sizeof(*miss))))
			return SWD_DROP_NOMEM;
		for (uint32_t h = 0; h < H; h++) {
			miss[h] = -1;
			for (uint32_t q = 0; q < R && miss[h] == -1; q++)
				if (!g->cover[(size_t)h * R + q])
					miss[h] = as_owner_of(r, s->inc, l, h, q);
		}
	}
	swp_msg m = g->hdr;
	m.head0 = m.row0 = 0;
	m.shape[0] = H;
	m.shape[1] = m.rows = R;
	m.qpos = NULL;
	if (g->has_qpos == 1) {
		if (!(m.qpos = malloc(R * sizeof(uint32_t)))) {
			free(miss);
			return SWD_DROP_NOMEM;
		}
		for (uint32_t q = 0; q < R; q++)	/* rows never sent: their heads are missing */
			m.qpos[q] = g->qset[q] ? g->qpos[q] : r->meta.keys - 1;
	}
	/* heads of which nothing came read zeros (own[H], taken from the data's charge) */
	size_t hb = (size_t)R * r->meta.keys * swp_dtype_size(r->meta.dtype);
	int empty = 0;
	for (uint32_t h = 0; h < H; h++)
		empty |= !g->head[h];
	swd_parts *p = calloc(1, sizeof(*p));
	if (!p || (empty && !(g->own[H] = calloc(1, hb ? hb : 1)))) {
		free(p);
		free(m.qpos);
		free(miss);
		return SWD_DROP_NOMEM;
	}
	for (uint32_t h = 0; h < H; h++)
		if (!g->head[h])
			g->head[h] = g->own[H];
	*p = (swd_parts){ .head = g->head, .own = g->own, .nown = (size_t)H + 1,
	    .held = g->held, .nheld = g->nheld, .release = a->c.release, .ud = a->c.work_ud };
	m.tensor = NULL;
	m.tensor_bytes = (size_t)H * hb;
	swd_ticket t = { .run = r, .step = s, .layer = l };
	s->state[l] = 2;
	s->in_work++;
	r->jobs++;
	a->jobs++;
	int rc = a->c.work(a->c.work_ud, &t, &m, p, g->data_bytes, miss);
	if (rc != SWD_ASM_ACCEPT) {
		s->state[l] = 4;
		s->in_work--;
		r->jobs--;
		a->jobs--;
		free(m.qpos);
		free(miss);
		free(p);
		for (uint32_t h = 0; empty && h < H; h++)	/* as it was */
			if (g->head[h] == g->own[H])
				g->head[h] = NULL;
		free(g->own[H]);
		g->own[H] = NULL;
		return rc;
	}
	/* cells that come later are late: the layer was computed without them */
	if (miss && (s->cut || (s->cut = calloc(r->meta.layers, 1))))
		s->cut[l] = 1;
	/* the data and the reserve went with the work, counted until it is done;
	 * the rest is freed */
	g->head = NULL;
	g->own = NULL;
	g->held = NULL;
	g->nheld = 0;
	g->bytes -= g->data_bytes + g->reserve;
	as_gather_free(a, g);
	s->g[l] = NULL;
	return SWD_ASM_ACCEPT;
}

/*
 * A step about to go out (its time is up, or its senders ended) with
 * gathered layers: they start first, as they are, their missing heads
 * named; it goes out when they are done. 1 if it can go now.
 */
int
as_settle(swd_asm *a, struct arun *r, struct astep *s)
{
	int started = 0;
	for (uint32_t l = 0; s->g && l < r->meta.layers; l++) {
		struct gather *g = s->g[l];
		if (!g)
			continue;
		int rc = as_launch(a, r, s, l, 1);
		if (rc == SWD_ASM_ACCEPT) {
			started++;
			continue;
		}
		/* its parts are not stored: counted, for their senders too */
		log_warn("run %s: step %lld layer %u: its parts could not be computed (%s): "
		    "the layer is missing", r->meta.run, (long long)s->step, l, rc == SWD_DROP_BUDGET ? "budget" : "no memory");
		as_ml_drop(a, s, l, rc);
		as_gather_free(a, g);
		s->g[l] = NULL;
		s->state[l] = 0;
	}
	if (started)
		s->timed_out = 1;
	return !started;
}

/*
 * Whole steps go out in step order while an earlier step is still
 * arriving (the live dH and drift then have their neighbour); behind an
 * earlier step whose input stopped coming they go at once, not after its
 * timeout, so that a stalled step never holds whole ones in memory.
 */
void
as_release(swd_asm *a, struct arun *r)
{
	struct astep *m;
	for (;;) {
		if ((m = as_min_open(r)) && m->in_work == 0 && !memchr(m->state, 1, r->meta.layers) &&
		    (as_complete(a, r, m) || (m->have == 0 && !memchr(m->state, 4, r->meta.layers)))) {
			if (as_settle(a, r, m))
				as_emit_step(a, r, m);
		} else if (m && (m = as_unblocked(a, r))) {
			if (as_settle(a, r, m))
				as_emit_step(a, r, m);
		} else {
			break;
		}
	}
}

/*
 * After an end: the ended incarnations' open steps are written as they are
 * (nothing more comes from them); the run is finished, its file marked
 * ended, once no step of any incarnation is open or in work. Another
 * incarnation's steps still arriving are assembled first; its messages
 * after that start the run again (several senders connect separately, so
 * nothing orders them against the end). Returns 1 if r was freed.
 */
int
as_maybe_finish(swd_asm *a, struct arun *r)
{
	if (!r->ending)
		return 0;
	as_release(a, r);		/* the ended incarnations' steps are as_complete now */
	if (r->jobs || r->nopen)
		return 0;
	as_finish_run(a, r, WQ_END);
	return 1;
}

/* The message's incarnation: its own, or the one inferred (PROTOCOL.md 7a). */
uint64_t
as_msg_inc(swd_asm *a, struct arun *r, const swp_msg *m)
{
	if (m->inc)
		return m->inc;
	if (!r->implicit && m->seq != 0) {
		const struct implicit *e = as_find_implicit(a, m->run);
		if (e) {
			r->implicit = e->inc;
			r->implicit_expect = e->expect;
			return r->implicit;
		}
	}
	if (!r->implicit || (m->seq == 0 && r->messages > 0)) {
		uint64_t v = as_implicit_inc();
		a->last_implicit = v > a->last_implicit ? v : a->last_implicit + 1;
		r->implicit = a->last_implicit;
	}
	return r->implicit;
}

/* Sequence numbers are per sender (PROTOCOL.md 7, 7b). */
void
as_seq_check(struct arun *r, struct ainc *i, struct asend *d, uint64_t seq)
{
	if (seq > d->c.seq_next) {
		int64_t n = (int64_t)(seq - d->c.seq_next);
		r->lost += n;
		i->lost += n;
		d->c.lost += n;
		if (i->senders > 1)
			log_warn("run %s: %lld message(s) of rank %u lost before seq %llu",
			    r->meta.run, (long long)n, d->c.rank, (unsigned long long)seq);
		else
			log_warn("run %s: %lld message(s) lost before seq %llu", r->meta.run,
			    (long long)n, (unsigned long long)seq);
	}
	if (seq >= d->c.seq_next)
		d->c.seq_next = seq + 1;
}

/* A sender speaking for the first time in this session (its counters start). */
struct asend *
as_get_sender(swd_asm *a, struct arun *r, struct ainc *i, const swp_msg *m)
{
	struct asend *d = as_find_sender(i, m->rank);
	if (d) {
		if (!d->c.messages && !d->c.first_seq && d->c.seq_next == 0)
			d->c.first_seq = d->c.seq_next = m->seq;	/* made by missing_ranks */
		return d;
	}
	uint64_t seq = m->seq;
	if (!m->inc && i->inc == r->implicit && r->implicit_expect)
		seq = r->implicit_expect;	/* the same sender, taken over */
	if (!(d = as_new_sender(r, i, m->rank, seq)))
		return NULL;
	d->c.first_seq = m->seq;
	if (i->senders > 1)
		as_emit_senders(a, r, i);	/* the writer learns its first seq before its steps */
	return d;
}

/*
 * Counting starts at the incarnation's first message here. What a named
 * incarnation sent before it (seq from 0, PROTOCOL.md 7a) and no daemon
 * stored is the writer's to count: it knows what the file holds of it
 * (WQ_INC). A sender without inc cannot be matched to its rows; its count
 * starts at the first seq seen, as a daemon that starts mid-run knows no
 * more.
 */
struct ainc *
as_get_inc(swd_asm *a, struct arun *r, uint64_t inc, const swp_msg *m)
{
	struct ainc *i = as_find_inc(r, inc);
	if (i)
		return i;
	if (!(i = calloc(1, sizeof(*i))))
		return NULL;
	i->inc = inc;
	i->first_seq = m->seq;
	i->named = m->inc != 0;
	i->senders = m->senders ? m->senders : 1;
	i->next = r->incs;
	r->incs = i;
	size_t cells = (size_t)r->meta.layers * r->meta.heads * r->meta.rows;
	if (i->senders > 1 && cells <= (1u << 26) && !as_over_budget(a, cells * sizeof(int32_t)) &&
	    (i->owner = malloc(cells * sizeof(int32_t)))) {
		for (size_t k = 0; k < cells; k++)
			i->owner[k] = -2;
		i->owner_bytes = cells * sizeof(int32_t);
		as_charge(a, (long long)i->owner_bytes);
	}
	{	/* the writer opens the run's file: every count has a row to go to */
		swd_witem *it = as_item(r, WQ_INC);
		if (it) {
			it->inc = inc;
			it->first_seq = m->seq;
			it->inc_named = i->named;
			it->has_resume = m->has_resume;
			it->resume = m->resume;
			it->inc_senders = i->senders;
			a->emit(a->ud, it);
		}
	}
	return i;
}

struct arun *
as_find_run(swd_asm *a, const swd_meta *mm)
{
	for (struct arun *r = a->runs; r; r = r->next)
		if (swd_meta_eq(&r->meta, mm))
			return r;
	return NULL;
}

static struct arun *
new_run(swd_asm *a, const swd_meta *mm, uint64_t now, char *why, size_t len, int *reason)
{
	/* what the run will hold while open, whatever its header claims, first */
	size_t state = a->c.run_bytes ? a->c.run_bytes(a->c.work_ud, mm) : 0;
	if (as_over_budget(a, state)) {
		snprintf(why, len, "a run of %u layers x %u heads x %u probe rows holds %zu bytes "
		    "while open: past the budget", mm->layers, mm->heads, mm->rows, state);
		*reason = SWD_DROP_RUN_STATE;
		as_note_refused(a, mm->run, *reason);
		return NULL;
	}
	/* an idle run is closed only for a run that is taken */
	struct arun *old = a->nruns >= a->c.max_runs ? as_idlest(a) : NULL;
	if (a->nruns >= a->c.max_runs && !old) {
		snprintf(why, len, "max_runs (%lld) runs are all active: none idle to close",
		    (long long)a->c.max_runs);
		*reason = SWD_DROP_TOO_MANY_RUNS;
		as_note_refused(a, mm->run, *reason);
		return NULL;
	}
	if (!as_take_token(a, now)) {
		snprintf(why, len, "more than %lld new runs a second (new_runs_per_s, burst %lld)",
		    (long long)a->c.new_runs_per_s, (long long)(a->c.new_runs_burst > 0 ?
		    a->c.new_runs_burst : a->c.new_runs_per_s));
		*reason = SWD_DROP_RUN_RATE;
		as_note_refused(a, mm->run, *reason);
		return NULL;
	}
	if (old) {
		log_info("run %s: the run table is full: closing it (idle, least recently active)",
		    old->meta.run);
		as_finish_run(a, old, WQ_CLOSE);
	}
	struct arun *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(why, len, "no memory for a run");
		*reason = SWD_DROP_NOMEM;
		return NULL;
	}
	r->meta = *mm;
	r->state_bytes = state;
	as_charge(a, (long long)state);
	r->serial = ++a->serials;
	r->last_step = -1;
	r->last_ms = now;
	r->next = a->runs;
	a->runs = r;
	a->nruns++;
	return r;
}

/* Whether the sender's end came after its run was closed (swd_asm_end). */
static int
late_ended(const swd_asm *a, const char *run, uint64_t inc, uint32_t rank)
{
	uint64_t h = as_id_hash(run, inc);
	size_t n = a->nlend < ENDED_RING ? a->nlend : ENDED_RING;
	for (size_t k = 0; k < n; k++)
		if (a->lend[k].h == h && a->lend[k].rank == rank)
			return 1;
	return 0;
}

static int
implicit_ended(const swd_asm *a, const char *run, uint64_t inc)
{
	const struct implicit *e = as_find_implicit(a, run);
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
recently_written(const swd_asm *a, const struct arun *r, int64_t step, uint64_t inc)
{
	uint64_t h = as_id_hash(r->meta.run, inc);
	size_t n = a->nrecent < RECENT ? a->nrecent : RECENT;
	for (size_t i = 0; i < n; i++)
		if (a->recent[i].h == h && a->recent[i].step == step)
			return 1 + a->recent[i].whole;
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
			if (as_whole(r, t) && (!w || t->step < w->step))
				w = t;
			if (!o || t->last_ms < o->last_ms)
				o = t;
		}
		if (w)
			o = w;
		/* its gathered layers start as they are; it goes when they are done */
		if (!o || !as_settle(a, r, o)) {
			snprintf(why, len, "max_open_steps (%lld) steps of the run are in work",
			    (long long)a->c.max_open_steps);
			*reason = SWD_DROP_OPEN_STEPS;
			return NULL;
		}
		as_emit_step(a, r, o);
	}
	struct astep *s = calloc(1, sizeof(*s));
	if (s) {
		s->state = calloc(r->meta.layers, 1);
		s->layers = calloc(r->meta.layers, sizeof(*s->layers));
	}
	if (!s || !s->state || !s->layers) {
		if (s)
			as_free_step(NULL, s, 0);
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

/* Marks the cells of a part as sent by rank (several senders). */
static void
own(const struct arun *r, struct ainc *i, const swp_msg *m, uint32_t rank)
{
	if (!i->owner)
		return;
	uint32_t H = r->meta.heads, R = r->meta.rows;
	uint32_t h0 = m->head0, nh = m->shape[0], r0 = m->row0, nr = m->shape[1];
	for (uint32_t h = h0; h < h0 + nh; h++)
		for (uint32_t q = r0; q < r0 + nr; q++)
			i->owner[((size_t)m->layer * H + h) * R + q] = (int32_t)rank;
}

/* Cells of the part already received: 0, some (-1) or all (1). */
static int
part_cover(const struct arun *r, const struct gather *g, const swp_msg *m)
{
	uint32_t R = r->meta.rows;
	uint64_t have = 0, n = (uint64_t)m->shape[0] * m->shape[1];
	for (uint32_t h = m->head0; h < m->head0 + m->shape[0]; h++)
		for (uint32_t q = m->row0; q < m->row0 + m->shape[1]; q++)
			have += g->cover[(size_t)h * R + q];
	return have == 0 ? 0 : have == n ? 1 : -1;
}

/*
 * The gather of a layer's first part: its data charged, with what the whole
 * layer's computation will hold. NULL: *reason (budget, nomem), why says.
 */
static struct gather *
gather_new(swd_asm *a, struct arun *r, struct astep *s, const swp_msg *m, size_t hb,
    char *why, size_t len, int *reason)
{
	uint32_t H = r->meta.heads, R = r->meta.rows, l = m->layer;
	swp_msg whole = *m;
	whole.head0 = whole.row0 = 0;
	whole.shape[0] = H;
	whole.shape[1] = whole.rows = R;
	size_t reserve = a->c.work_bytes ? a->c.work_bytes(a->c.work_ud, &whole) : 0;
	size_t db = (size_t)H * (hb + (a->c.hold ? a->c.hold_extra : 0)) +
	    (3 * (size_t)H + 1) * sizeof(void *);
	size_t b = db + (size_t)H * R + R * (sizeof(uint32_t) + 1) + sizeof(struct gather) + reserve;
	struct gather *g;
	if (as_over_budget(a, b)) {
		snprintf(why, len, "gathering layer %u (%zu bytes with its computation) would "
		    "pass the budget", l, b);
		*reason = SWD_DROP_BUDGET;
		return NULL;
	}
	*reason = SWD_DROP_NOMEM;
	snprintf(why, len, "no memory to gather layer %u", l);
	if (!s->g && !(s->g = calloc(r->meta.layers, sizeof(*s->g))))
		return NULL;
	if (!(g = calloc(1, sizeof(*g))))
		return NULL;
	g->heads = H;
	g->head = calloc(H, sizeof(*g->head));
	g->own = calloc((size_t)H + 1, sizeof(*g->own));
	g->held = calloc(H, sizeof(*g->held));
	g->cover = calloc((size_t)H * R, 1);
	g->qpos = calloc(R, sizeof(uint32_t));
	g->qset = calloc(R, 1);
	if (!g->head || !g->own || !g->held || !g->cover || !g->qpos || !g->qset) {
		as_gather_free(a, g);	/* g->bytes 0: nothing charged yet */
		return NULL;
	}
	g->data_bytes = db;
	g->bytes = b;
	g->reserve = reserve;
	g->has_qpos = -1;
	g->hdr = *m;
	g->hdr.qpos = NULL;
	g->hdr.tensor = NULL;
	as_charge(a, (long long)b);
	s->g[l] = g;
	s->state[l] = 4;
	return g;
}

/* Takes a part into its layer (its cells are new). SWD_ASM_HELD or a reason. */
static int
take_part(swd_asm *a, struct arun *r, struct astep *s, const swp_msg *m,
    char *why, size_t len)
{
	uint32_t H = r->meta.heads, R = r->meta.rows, K = r->meta.keys, l = m->layer;
	size_t es = swp_dtype_size(r->meta.dtype), rowb = (size_t)K * es, hb = (size_t)R * rowb;
	struct gather *g = s->g ? s->g[l] : NULL;
	int reason;
	if (!a->c.work) {
		snprintf(why, len, "parts of layers are not taken here");
		return SWD_DROP_NOMEM;
	}
	if (!g && !(g = gather_new(a, r, s, m, hb, why, len, &reason)))
		return reason;
	/* parts of one layer agree on qpos: present in all or none, equal where shared */
	int hq = m->qpos != NULL;
	int bad = g->has_qpos >= 0 && g->has_qpos != hq;
	for (uint32_t q = 0; hq && !bad && q < m->shape[1]; q++)
		bad = g->qset[m->row0 + q] && g->qpos[m->row0 + q] != m->qpos[q];
	if (bad) {
		snprintf(why, len, "step %lld layer %u: rank %u's part has %s qpos than the "
		    "layer's other parts", (long long)m->step, l, m->rank,
		    hq ? (g->has_qpos == 0 ? "a" : "another") : "no");
		return SWD_DROP_PART_MISMATCH;
	}
	/*
	 * Heads sent whole (every row) lie where the part's frame does, kept
	 * (conf.hold): not copied. The others are copied into their heads'
	 * buffers. Either way a head's share of data_bytes holds them.
	 */
	const uint8_t *src = NULL;
	void *handle = NULL;
	if (a->c.hold && m->row0 == 0 && m->shape[1] == R && m->kind != SWP_ROWSTATS &&
	    m->tensor_bytes >= a->c.hold_min && g->nheld < H)
		src = a->c.hold(a->c.work_ud, m, &handle);
	for (uint32_t h = m->head0; !src && h < m->head0 + m->shape[0]; h++)
		if (!g->own[h] && !(g->own[h] = calloc(1, hb ? hb : 1))) {
			/* as if the part never came: a head's buffer exists only
			 * where a part of it is (own[h] set means head[h] is it) */
			for (uint32_t k = m->head0; k < h; k++)
				if (!g->head[k]) {
					free(g->own[k]);
					g->own[k] = NULL;
				}
			if (!g->covered) {
				as_gather_free(a, g);
				s->g[l] = NULL;
				s->state[l] = 0;
			}
			snprintf(why, len, "no memory to gather layer %u", l);
			return SWD_DROP_NOMEM;
		}
	g->has_qpos = hq;
	for (uint32_t q = 0; hq && q < m->shape[1]; q++) {
		g->qpos[m->row0 + q] = m->qpos[q];
		g->qset[m->row0 + q] = 1;
	}
	if (src) {
		a->st.parts_kept++;
		g->held[g->nheld++] = handle;
		for (uint32_t h = 0; h < m->shape[0]; h++)
			g->head[m->head0 + h] = src + h * hb;
	} else {
		a->st.parts_copied++;
		src = m->tensor;
		for (uint32_t h = 0; h < m->shape[0]; h++) {
			uint8_t *dst = g->own[m->head0 + h];
			g->head[m->head0 + h] = dst;
			for (uint32_t q = 0; q < m->shape[1]; q++)
				memcpy(dst + (size_t)(m->row0 + q) * rowb,
				    src + ((size_t)h * m->shape[1] + q) * rowb, rowb);
		}
	}
	for (uint32_t h = 0; h < m->shape[0]; h++)
		memset(g->cover + (size_t)(m->head0 + h) * R + m->row0, 1, m->shape[1]);
	g->covered += (uint64_t)m->shape[0] * m->shape[1];
	if (g->covered == (uint64_t)H * R)
		as_launch(a, r, s, l, 0);	/* or at the next tick, if it cannot start now */
	return SWD_ASM_HELD;
}

/* A duplicate of a several-sender incarnation: computed, then compared. */
static int
copy_ticket(struct arun *r, struct astep *s, struct asend *sd, const swp_msg *m,
    swd_ticket *t)
{
	t->run = r;
	t->step = s;
	t->layer = m->layer;
	t->copy = 1;
	t->cstep = m->step;
	t->sender = sd;
	t->head0 = m->head0;
	t->row0 = m->row0;
	return SWD_ASM_COPY;
}

/*
 * A message's run, incarnation and sender, and whether its sender may
 * still send: GO_ON, or the reason it is dropped (why says more).
 */
static int
admit_sender(swd_asm *a, const swp_msg *m, uint64_t now, char *why, size_t len,
    struct arun **rp, struct ainc **incp, struct asend **sdp)
{
	swd_meta mm;
	int reason = SWD_DROP_NOMEM;
	as_meta_from(&mm, m);
	struct arun *r = as_find_run(a, &mm);
	if (m->inc && as_was_ended(a, m->run, m->inc)) {
		snprintf(why, len, "incarnation %llu ended the run", (unsigned long long)m->inc);
		return SWD_DROP_AFTER_END;
	}
	if (!r && !(r = new_run(a, &mm, now, why, len, &reason)))
		return reason;
	*rp = r;
	uint64_t incv = as_msg_inc(a, r, m);
	r->messages++;
	r->last_ms = now;
	struct ainc *inc = *incp = as_get_inc(a, r, incv, m);
	if (!inc) {
		snprintf(why, len, "no memory for an incarnation");
		return SWD_DROP_NOMEM;
	}
	struct asend *sd = as_get_sender(a, r, inc, m);
	if (!sd) {
		snprintf(why, len, "no memory for a sender");
		return SWD_DROP_NOMEM;
	}
	*sdp = sd;
	sd->c.messages++;
	sd->c.pending++;	/* until swd_asm_admit decides (a step may go out meanwhile) */
	as_seq_check(r, inc, sd, m->seq);	/* it arrived: never lost, whatever it becomes */
	uint32_t nsend = m->senders ? m->senders : 1;
	if (nsend != inc->senders) {
		snprintf(why, len, "rank %u says %u senders, incarnation %llu has %u", m->rank,
		    nsend, (unsigned long long)inc->inc, inc->senders);
		return SWD_DROP_SENDERS;
	}
	if (m->has_resume && !inc->has_resume) {
		inc->has_resume = 1;
		inc->resume = m->resume;
		log_info("run %s: incarnation %llu resumes from step %lld", r->meta.run,
		    (unsigned long long)inc->inc, (long long)m->resume);
	}
	if (sd->c.ended || late_ended(a, m->run, inc->inc, sd->c.rank)) {
		snprintf(why, len, "rank %u of incarnation %llu ended its part", sd->c.rank,
		    (unsigned long long)inc->inc);
		return SWD_DROP_AFTER_END;
	}
	if (!inc->named && (r->ending || implicit_ended(a, m->run, inc->inc))) {
		snprintf(why, len, "the run was ended");
		return SWD_DROP_AFTER_END;
	}
	return GO_ON;
}

/*
 * A layer (or part) of a step written already, cut, or already here:
 * the reason it is dropped, a copy to compare (several senders), PART
 * when it is a part that brings cells the layer lacks, or GO_ON.
 */
static int
admit_again(swd_asm *a, struct arun *r, struct astep *s, struct ainc *inc, struct asend *sd,
    const swp_msg *m, swd_ticket *t, char *why, size_t len)
{
	int several = inc->senders > 1;
	int written = s ? 0 : recently_written(a, r, m->step, inc->inc);
	if (written) {
		/* a whole step sent again is a duplicate; a layer after its step
		 * timed out is late (the writer counts re-sends older than this) */
		snprintf(why, len, "step %lld layer %u: the step was already written%s",
		    (long long)m->step, m->layer, written == 2 ? " whole" : " incomplete");
		if (written != 2)
			return SWD_DROP_LATE;
		if (several && as_find_digest(r, m->step, inc->inc))
			return copy_ticket(r, NULL, sd, m, t);
		if (several)
			sd->c.uncompared++;
		return SWD_DROP_DUPLICATE;
	}
	if (s && s->cut && s->cut[m->layer]) {
		snprintf(why, len, "step %lld layer %u: the layer was computed without some of its "
		    "cells (its time was up)", (long long)m->step, m->layer);
		return SWD_DROP_LATE;
	}
	if (!s || !s->state[m->layer])
		return GO_ON;
	int cov = s->state[m->layer] == 4 ? part_cover(r, s->g[m->layer], m) : 1;
	if (cov == 0)
		return PART;
	if (cov < 0) {
		snprintf(why, len, "step %lld layer %u: rank %u's part (heads %u-%u, rows "
		    "%u-%u) overlaps cells another part brought", (long long)m->step,
		    m->layer, m->rank, m->head0, m->head0 + m->shape[0] - 1, m->row0,
		    m->row0 + m->shape[1] - 1);
		return SWD_DROP_OVERLAP;
	}
	snprintf(why, len, "step %lld layer %u (heads %u-%u, rows %u-%u) arrived twice",
	    (long long)m->step, m->layer, m->head0, m->head0 + m->shape[0] - 1, m->row0,
	    m->row0 + m->shape[1] - 1);
	if (several)
		return copy_ticket(r, s, sd, m, t);
	return SWD_DROP_DUPLICATE;
}

/* A part of a layer, to gather (take_part): HELD, or why it is dropped. */
static int
admit_part(swd_asm *a, struct arun *r, struct astep *s, struct ainc *inc, struct asend *sd,
    const swp_msg *m, uint64_t now, char *why, size_t len)
{
	s->last_ms = now;
	if (as_ml_reserve(r, s, m->layer) != 0) {
		snprintf(why, len, "no memory for a part");
		as_release(a, r);
		return SWD_DROP_NOMEM;
	}
	as_ml_push(s, m->layer, sd, m->seq, m->head0, m->shape[0]);
	own(r, inc, m, sd->c.rank);
	int reason = take_part(a, r, s, m, why, len);
	if (reason != SWD_ASM_HELD) {
		as_ml_forget(s, m->layer, sd, m->seq);
		as_release(a, r);	/* a step left empty goes */
	}
	return reason;
}

/* swd_asm_admit without the counting; *sdp: the message's sender, once known. */
int
as_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why, size_t len,
    struct asend **sdp)
{
	struct arun *r = NULL;
	struct ainc *inc = NULL;
	a->now = now;
	memset(t, 0, sizeof(*t));
	int reason = admit_sender(a, m, now, why, len, &r, &inc, sdp);
	if (reason != GO_ON)
		return reason;
	struct asend *sd = *sdp;
	struct astep *s = find_step(r, m->step, inc);
	reason = admit_again(a, r, s, inc, sd, m, t, why, len);
	if (reason == PART)
		return admit_part(a, r, s, inc, sd, m, now, why, len);
	if (reason != GO_ON)
		return reason;
	if (!s && !(s = new_step(a, r, m, inc, now, why, len, &reason)))
		return reason;
	s->last_ms = now;
	if (m->seq < s->seq_min)
		s->seq_min = m->seq;
	uint32_t H = r->meta.heads, R = r->meta.rows;
	if (m->head0 != 0 || m->shape[0] != H || m->row0 != 0 || m->shape[1] != R)
		return admit_part(a, r, s, inc, sd, m, now, why, len);
	if (as_ml_reserve(r, s, m->layer) != 0) {
		snprintf(why, len, "no memory for a layer");
		as_release(a, r);	/* a step left empty goes */
		return SWD_DROP_NOMEM;
	}
	as_ml_push(s, m->layer, sd, m->seq, 0, r->meta.heads);
	own(r, inc, m, sd->c.rank);
	s->state[m->layer] = 1;
	t->run = r;
	t->step = s;
	t->layer = m->layer;
	t->sender = sd;
	t->seq = m->seq;
	return SWD_ASM_ACCEPT;
}
