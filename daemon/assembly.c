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
#include "daemon/log.h"

#define RECENT 8192		/* steps written lately, of any run, to name late layers
				 * (kept when a run is closed idle: a layer after it is late) */
#define ENDED_RING 1024		/* incarnations whose run ended, to name after_end */
#define HOLD_MS 1000		/* whole steps wait this long for an earlier one to move */
#define IMPLICIT_RING 256	/* closed runs' inferred incarnations, to go on with */

#define DIGESTS 8		/* written steps a late copy is still compared with */
#define CMP_TOL 1e-6		/* PROTOCOL.md 7b: copies differ beyond this (s, nats) */

/* A sender of an incarnation (PROTOCOL.md 7b): its seq and its counters. */
struct asend {
	swd_sender c;
	struct asend *next;
};

struct ainc {
	uint64_t inc;
	uint64_t first_seq;	/* the first seq seen of it (any sender) */
	int64_t lost;		/* messages missing by seq, this session */
	int named;		/* sent by the sender (inc), not inferred */
	int has_resume;
	int64_t resume;
	uint32_t senders, nended;
	struct asend *snd;
	int32_t *owner;		/* [L * H * R] the rank of each cell's last sender, -2
				 * none; several senders only */
	size_t owner_bytes;
	struct ainc *next;
};

/* A message whose data went into a layer of a step: its fate is the layer's. */
struct mref {
	uint32_t rank;
	uint32_t head0, nh;	/* its heads */
	uint64_t seq;
};
struct mlist {
	struct mref *v;
	size_t n, cap;
};

/* The parts of one layer received so far (several senders). */
struct gather {
	uint8_t *buf;		/* [H * R * K] elements, zeros where nothing came */
	size_t buf_bytes;
	uint8_t *cover;		/* [H * R] 1 where the row of the head came */
	uint32_t *qpos;		/* [R] */
	uint8_t *qset;		/* [R] 1 where qpos[r] is known */
	int has_qpos;		/* -1: not known yet */
	uint64_t covered;
	swp_msg hdr;		/* the first part's header, for the layer's message */
	size_t bytes;		/* counted in inflight (the computation's reserve too) */
	size_t reserve;		/* conf.work_bytes of the whole layer, held for its work */
};

/* A duplicate computed, waiting for its step to be written to be compared. */
struct pcopy {
	swd_layer *ly;
	struct asend *snd;
	uint32_t layer, head0, row0;
	struct pcopy *next;
};

struct astep {
	int64_t step;
	struct ainc *inc;
	uint64_t last_ms;	/* the last arrival of one of its layers */
	uint64_t seq_min;	/* the least seq of its layers */
	uint32_t have, in_work, partial;
	int timed_out;		/* its gathered layers were started as they were */
	uint8_t *state;		/* [layers]: 0 none, 1 admitted, 2 in work, 3 done, 4 gathering */
	swd_layer **layers;	/* [layers] */
	struct gather **g;	/* [layers] or NULL */
	struct mlist *ml;	/* [layers] or NULL: the messages in each layer */
	uint8_t *cut;		/* [layers] or NULL: 1 where a layer started without some cells */
	struct pcopy *copies;
	struct astep *next;
};

/*
 * What the last written step of a several-sender incarnation held, so that
 * a duplicate arriving after the step went to the writer is compared too:
 * per head the mean sink mass and entropy, and per row (fixed probes).
 */
struct digest {
	int64_t step;
	uint64_t inc;
	int valid;
	double *hs, *hH, *rs, *rH;	/* [L * H], [L * H * R] */
	uint64_t *hrows;
	uint8_t *hok, *rok;
	size_t bytes;
};

struct arun {
	swd_meta meta;
	uint64_t serial;	/* this run object, one of the assembly's life (never again) */
	struct ainc *incs;
	uint64_t implicit;	/* the inferred incarnation of senders without inc */
	uint64_t implicit_expect;	/* its next seq, when taken over from a closed run */
	int64_t lost, incomplete, messages, steps_done, last_step;
	struct astep *open;
	int64_t nopen, jobs;
	int ending;
	size_t state_bytes;	/* charged while open (conf.run_bytes) */
	uint64_t last_ms;
	struct digest dg[DIGESTS];	/* the last steps written, round robin */
	unsigned ndg;
	char last_gap[160];
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
	size_t nended;
	swd_asm_stats st;
	int stopping;			/* swd_asm_stop was called */
	double tokens;			/* the bucket of new runs */
	uint64_t tokens_ms;		/* when it was filled last */
	int tokens_init;
	struct refused {		/* run ids refused lately, with counts */
		char run[SWP_RUN_MAX + 1];
		int64_t table, rate, state;
		uint64_t seq;		/* order of the last refusal */
	} refused[SWD_ASM_REFUSED_MAX];
	uint64_t refused_seq;
	int64_t refused_ids;		/* run ids that entered the refused list */
	struct fin {			/* runs ended or closed lately, for status */
		swd_asm_run r;
		swd_meta meta;		/* r's strings point here */
		char gap[160];
		int ended;
		uint64_t seq;		/* order of its finish, 0: unused */
		size_t nsnd;
		swd_sender snd[SWD_ASM_FINISHED_SENDERS];
	} *fin;				/* [SWD_ASM_FINISHED_MAX] */
	uint64_t fin_seq;
	uint64_t serials;		/* the last run object's serial */
	struct recent {			/* steps written lately: run id and incarnation, step */
		uint64_t h;
		int64_t step;
		uint8_t whole;
	} *recent;			/* [RECENT] */
	size_t nrecent;
	struct lend {			/* senders whose end came after their run was closed */
		uint64_t h;		/* id_hash(run, inc) */
		uint32_t rank;
	} lend[ENDED_RING];
	size_t nlend;
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

static void
charge(swd_asm *a, long long bytes)
{
	if (a->c.inflight)
		atomic_fetch_add(a->c.inflight, bytes);
}

static int
over_budget(const swd_asm *a, size_t bytes)
{
	return a->c.budget_bytes > 0 && a->c.inflight &&
	    atomic_load(a->c.inflight) + (long long)bytes > a->c.budget_bytes;
}

static void
gather_free(swd_asm *a, struct gather *g)
{
	if (!g)
		return;
	charge(a, -(long long)g->bytes);
	free(g->buf);
	free(g->cover);
	free(g->qpos);
	free(g->qset);
	free(g);
}

static void
free_step(swd_asm *a, struct astep *s, uint32_t layers)
{
	atomic_llong *inflight = a ? a->c.inflight : NULL;
	for (uint32_t i = 0; i < layers; i++) {
		if (s->layers)
			swd_layer_free(s->layers[i], inflight);
		if (s->g)
			gather_free(a, s->g[i]);
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

static void
digest_free(swd_asm *a, struct digest *d)
{
	charge(a, -(long long)d->bytes);
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
		free_step(a, s, r->meta.layers);
	}
	while (r->incs) {
		struct ainc *i = r->incs;
		r->incs = i->next;
		while (i->snd) {
			struct asend *d = i->snd;
			i->snd = d->next;
			free(d);
		}
		charge(a, -(long long)i->owner_bytes);
		free(i->owner);
		free(i);
	}
	for (int k = 0; k < DIGESTS; k++)
		digest_free(a, &r->dg[k]);
	charge(a, -(long long)r->state_bytes);
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
	mm->rows = m->rows ? m->rows : m->shape[1];	/* the probe's, all senders' */
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
		it->serial = r->serial;
	}
	return it;
}

static struct asend *
find_sender(struct ainc *i, uint32_t rank)
{
	for (struct asend *d = i->snd; d; d = d->next)
		if (d->c.rank == rank)
			return d;
	return NULL;
}

static struct asend *
new_sender(const struct arun *r, struct ainc *i, uint32_t rank, uint64_t seq)
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

/*
 * Room for one more message in layer l of step s (so that ml_push cannot
 * fail). 0 or -1.
 */
static int
ml_reserve(const struct arun *r, struct astep *s, uint32_t l)
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
static void
ml_push(struct astep *s, uint32_t l, struct asend *d, uint64_t seq, uint32_t head0,
    uint32_t nh)
{
	struct mlist *x = &s->ml[l];
	x->v[x->n++] = (struct mref){ d->c.rank, head0, nh, seq };
	d->c.pending++;
}

/* The message (rank, seq) leaves layer l of s: not pending any more. */
static void
ml_forget(struct astep *s, uint32_t l, struct asend *d, uint64_t seq)
{
	struct mlist *x = s->ml ? &s->ml[l] : NULL;
	for (size_t k = x ? x->n : 0; k-- > 0;)
		if (x->v[k].rank == d->c.rank && x->v[k].seq == seq) {
			x->v[k] = x->v[--x->n];
			d->c.pending--;
			return;
		}
}

/*
 * The messages of layer l of s will not be stored: each is counted under
 * reason, for its sender and for the daemon (swd_asm_stats.drops).
 */
static void
ml_drop(swd_asm *a, struct astep *s, uint32_t l, int reason)
{
	struct mlist *x = s->ml ? &s->ml[l] : NULL;
	for (size_t k = 0; x && k < x->n; k++) {
		struct asend *d = find_sender(s->inc, x->v[k].rank);
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
			struct asend *d = find_sender(s->inc, x->v[k].rank);
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

static void
emit_senders(swd_asm *a, struct arun *r, struct ainc *only)
{
	swd_witem *it = item(r, WQ_SENDERS);
	if (!it)
		return;
	if (fill_senders(r, only, it) != 0 || it->nsnd == 0) {
		free(it->snd);
		free(it);
		return;
	}
	a->emit(a->ud, it);
}

/* The rank that should have sent cell (l, h, q) of incarnation i: -2 unknown. */
static int32_t
owner_of(const struct arun *r, const struct ainc *i, uint32_t l, uint32_t h, uint32_t q)
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
				v = owner_of(r, s->inc, l, h, 0);
			else if (ly->miss_rank)
				v = ly->miss_rank[h];
			mr[(size_t)l * H + h] = v;
			if (v == -1)
				continue;
			if (v >= 0) {
				struct asend *d = find_sender(s->inc, (uint32_t)v);
				if (!d)	/* a rank that sent before, not in this session */
					d = new_sender(r, s->inc, (uint32_t)v, 0);
				if (d)
					d->c.missing++;
			}
			/* a group: heads h0..h of one layer and one rank */
			if (h > 0 && mr[(size_t)l * H + h - 1] == v)
				continue;
			uint32_t e = h;
			while (e + 1 < H && (ly ? (ly->miss_rank ? ly->miss_rank[e + 1] : -1) :
			    owner_of(r, s->inc, l, e + 1, 0)) == v)
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

static struct digest *
find_digest(struct arun *r, int64_t step, uint64_t inc)
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
	struct digest *d = find_digest(r, s->step, s->inc->inc);
	if (!d)
		d = &r->dg[r->ndg++ % DIGESTS];
	d->valid = 0;
	uint32_t L = r->meta.layers, H = r->meta.heads, R = r->meta.rows;
	size_t LH = (size_t)L * H, LHR = LH * R;
	int fixed = r->meta.fixed_probe;
	if (!d->hs) {
		size_t b = LH * (3 * sizeof(double) + 1) + (fixed ? LHR * (2 * sizeof(double) + 1) : 0);
		if (over_budget(a, b))
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
		charge(a, (long long)b);
		if (!d->hs || !d->hH || !d->hrows || !d->hok ||
		    (fixed && (!d->rs || !d->rH || !d->rok))) {
			digest_free(a, d);
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
judge_copy(struct arun *r, int64_t step, uint32_t l, const swd_layer *cl, struct asend *sd,
    uint32_t head0, uint32_t row0)
{
	char what[256];
	const struct digest *d = find_digest(r, step, sd->c.inc);
	int v = d ? compare_copy(r, d, l, cl, head0, row0, what, sizeof(what)) : -1;
	if (v < 0) {
		sd->c.uncompared++;
	} else if (v > 0) {
		sd->c.disagree++;
		log_warn("run %s: step %lld layer %u: rank %u's copy differs from the data kept "
		    "(over %g): %s", r->meta.run, (long long)step, l, sd->c.rank, CMP_TOL, what);
	}
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
	/* parts never started (settle starts them first): not stored, counted */
	for (uint32_t l = 0; s->g && l < r->meta.layers; l++)
		if (s->g[l]) {
			log_err("run %s: step %lld layer %u: its parts were never computed",
			    r->meta.run, (long long)s->step, l);
			ml_drop(a, s, l, a->stopping ? SWD_DROP_STOPPING : SWD_DROP_NOMEM);
			gather_free(a, s->g[l]);
			s->g[l] = NULL;
		}
	if (s->have == 0) {	/* nothing arrived that was kept: nothing to write */
		free_step(a, s, r->meta.layers);
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
			judge_copy(r, s->step, c->layer, c->ly, c->snd, c->head0, c->row0);
			swd_layer_free(c->ly, a->c.inflight);
			free(c);
		}
	}
	struct recent *w = &a->recent[a->nrecent++ % RECENT];
	w->h = id_hash(r->meta.run, s->inc->inc);
	w->step = s->step;
	w->whole = s->have == r->meta.layers && !s->partial;
	swd_witem *it = item(r, WQ_STEP);
	int stored = it && ml_store(a, r, s, it) == 0;
	if (!stored || fill_senders(r, s->inc, it) != 0) {
		log_err("run %s: out of memory: step %lld lost", r->meta.run, (long long)s->step);
		for (size_t k = 0; stored && k < it->nmc; k++) {	/* not stored after all */
			struct asend *d = find_sender(s->inc, it->mc[k].rank);
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
			ml_drop(a, s, l, SWD_DROP_NOMEM);
		free_step(a, s, r->meta.layers);
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

	free_step(a, s, r->meta.layers);
	for (struct asend *d = inc->snd; d; d = d->next)
		it->seq_next += d->c.seq_next;
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
	return s->have == r->meta.layers && !s->partial;
}

/*
 * Nothing more will arrive for the step: every layer did, or its
 * incarnation ended the run (what it lacks is lost, not late). Such steps
 * go out in step order.
 */
static int
complete(const swd_asm *a, const struct arun *r, const struct astep *s)
{
	return whole(r, s) || s->timed_out || (r->ending && (!s->inc->named ||
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
static int settle(swd_asm *a, struct arun *r, struct astep *s);

static void
release(swd_asm *a, struct arun *r)
{
	struct astep *m;
	for (;;) {
		if ((m = min_open(r)) && m->in_work == 0 && !memchr(m->state, 1, r->meta.layers) &&
		    (complete(a, r, m) || (m->have == 0 && !memchr(m->state, 4, r->meta.layers)))) {
			if (settle(a, r, m))
				emit_step(a, r, m);
		} else if (m && (m = unblocked(a, r))) {
			if (settle(a, r, m))
				emit_step(a, r, m);
		} else {
			break;
		}
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
	e->expect = i && i->snd ? i->snd->c.seq_next : 0;
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
static void
finish_run(swd_asm *a, struct arun *r, int type)
{
	emit_all(a, r);
	emit_senders(a, r, NULL);
	remember_finished(a, r, type == WQ_END);
	swd_witem *it = item(r, type);
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
	release(a, r);		/* the ended incarnations' steps are complete now */
	if (r->jobs || r->nopen)
		return 0;
	finish_run(a, r, WQ_END);
	return 1;
}

/*
 * The run to close when the table is full: an idle one, without an end,
 * nothing in work and no step open (all it sent is written), the least
 * recently active; NULL if none is idle. A run with a step open is not
 * closed for another: that would write its step incomplete, and a flood of
 * new runs would churn through the table.
 */
static struct arun *
idlest(swd_asm *a)
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
static int
take_token(swd_asm *a, uint64_t now)
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
static void
note_refused(swd_asm *a, const char *run, int reason)
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

/* Sequence numbers are per sender (PROTOCOL.md 7, 7b). */
static void
seq_check(struct arun *r, struct ainc *i, struct asend *d, uint64_t seq)
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
static struct asend *
get_sender(swd_asm *a, struct arun *r, struct ainc *i, const swp_msg *m)
{
	struct asend *d = find_sender(i, m->rank);
	if (d) {
		if (!d->c.messages && !d->c.first_seq && d->c.seq_next == 0)
			d->c.first_seq = d->c.seq_next = m->seq;	/* made by missing_ranks */
		return d;
	}
	uint64_t seq = m->seq;
	if (!m->inc && i->inc == r->implicit && r->implicit_expect)
		seq = r->implicit_expect;	/* the same sender, taken over */
	if (!(d = new_sender(r, i, m->rank, seq)))
		return NULL;
	d->c.first_seq = m->seq;
	if (i->senders > 1)
		emit_senders(a, r, i);	/* the writer learns its first seq before its steps */
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
static struct ainc *
get_inc(swd_asm *a, struct arun *r, uint64_t inc, const swp_msg *m)
{
	struct ainc *i = find_inc(r, inc);
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
	if (i->senders > 1 && cells <= (1u << 26) && !over_budget(a, cells * sizeof(int32_t)) &&
	    (i->owner = malloc(cells * sizeof(int32_t)))) {
		for (size_t k = 0; k < cells; k++)
			i->owner[k] = -2;
		i->owner_bytes = cells * sizeof(int32_t);
		charge(a, (long long)i->owner_bytes);
	}
	{	/* the writer opens the run's file: every count has a row to go to */
		swd_witem *it = item(r, WQ_INC);
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
	/* what the run will hold while open, whatever its header claims, first */
	size_t state = a->c.run_bytes ? a->c.run_bytes(a->c.work_ud, mm) : 0;
	if (over_budget(a, state)) {
		snprintf(why, len, "a run of %u layers x %u heads x %u probe rows holds %zu bytes "
		    "while open: past the budget", mm->layers, mm->heads, mm->rows, state);
		*reason = SWD_DROP_RUN_STATE;
		note_refused(a, mm->run, *reason);
		return NULL;
	}
	/* an idle run is closed only for a run that is taken */
	struct arun *old = a->nruns >= a->c.max_runs ? idlest(a) : NULL;
	if (a->nruns >= a->c.max_runs && !old) {
		snprintf(why, len, "max_runs (%lld) runs are all active: none idle to close",
		    (long long)a->c.max_runs);
		*reason = SWD_DROP_TOO_MANY_RUNS;
		note_refused(a, mm->run, *reason);
		return NULL;
	}
	if (!take_token(a, now)) {
		snprintf(why, len, "more than %lld new runs a second (new_runs_per_s, burst %lld)",
		    (long long)a->c.new_runs_per_s, (long long)(a->c.new_runs_burst > 0 ?
		    a->c.new_runs_burst : a->c.new_runs_per_s));
		*reason = SWD_DROP_RUN_RATE;
		note_refused(a, mm->run, *reason);
		return NULL;
	}
	if (old) {
		log_info("run %s: the run table is full: closing it (idle, least recently active)",
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
	r->state_bytes = state;
	charge(a, (long long)state);
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
	uint64_t h = id_hash(run, inc);
	size_t n = a->nlend < ENDED_RING ? a->nlend : ENDED_RING;
	for (size_t k = 0; k < n; k++)
		if (a->lend[k].h == h && a->lend[k].rank == rank)
			return 1;
	return 0;
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
recently_written(const swd_asm *a, const struct arun *r, int64_t step, uint64_t inc)
{
	uint64_t h = id_hash(r->meta.run, inc);
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
			if (whole(r, t) && (!w || t->step < w->step))
				w = t;
			if (!o || t->last_ms < o->last_ms)
				o = t;
		}
		if (w)
			o = w;
		/* its gathered layers start as they are; it goes when they are done */
		if (!o || !settle(a, r, o)) {
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
			free_step(NULL, s, 0);
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
 * Starts the work of a gathered layer (conf.work): whole, or at the step's
 * timeout with the heads that lack a cell marked missing, named by rank.
 * SWD_ASM_ACCEPT, or the callee's drop reason (the gather is kept).
 */
static int
launch(swd_asm *a, struct arun *r, struct astep *s, uint32_t l, int partial)
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
					miss[h] = owner_of(r, s->inc, l, h, q);
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
	m.tensor = g->buf;
	m.tensor_bytes = g->buf_bytes;
	swd_ticket t = { .run = r, .step = s, .layer = l };
	s->state[l] = 2;
	s->in_work++;
	r->jobs++;
	a->jobs++;
	int rc = a->c.work(a->c.work_ud, &t, &m, g->buf, g->buf_bytes, miss);
	if (rc != SWD_ASM_ACCEPT) {
		s->state[l] = 4;
		s->in_work--;
		r->jobs--;
		a->jobs--;
		free(m.qpos);
		free(miss);
		return rc;
	}
	/* cells that come later are late: the layer was computed without them */
	if (miss && (s->cut || (s->cut = calloc(r->meta.layers, 1))))
		s->cut[l] = 1;
	/* the data and the reserve went with the work, counted until it is done;
	 * the rest is freed */
	g->buf = NULL;
	g->bytes -= g->buf_bytes + g->reserve;
	gather_free(a, g);
	s->g[l] = NULL;
	return SWD_ASM_ACCEPT;
}

/*
 * A step about to go out (its time is up, or its senders ended) with
 * gathered layers: they start first, as they are, their missing heads
 * named; it goes out when they are done. 1 if it can go now.
 */
static int
settle(swd_asm *a, struct arun *r, struct astep *s)
{
	int started = 0;
	for (uint32_t l = 0; s->g && l < r->meta.layers; l++) {
		struct gather *g = s->g[l];
		if (!g)
			continue;
		int rc = launch(a, r, s, l, 1);
		if (rc == SWD_ASM_ACCEPT) {
			started++;
			continue;
		}
		/* its parts are not stored: counted, for their senders too */
		log_warn("run %s: step %lld layer %u: its parts could not be computed (%s): "
		    "the layer is missing", r->meta.run, (long long)s->step, l, rc == SWD_DROP_BUDGET ? "budget" : "no memory");
		ml_drop(a, s, l, rc);
		gather_free(a, g);
		s->g[l] = NULL;
		s->state[l] = 0;
	}
	if (started)
		s->timed_out = 1;
	return !started;
}

/* Takes a part into its layer (its cells are new). SWD_ASM_HELD or a reason. */
static int
take_part(swd_asm *a, struct arun *r, struct astep *s, const swp_msg *m,
    char *why, size_t len)
{
	uint32_t H = r->meta.heads, R = r->meta.rows, K = r->meta.keys, l = m->layer;
	size_t es = swp_dtype_size(r->meta.dtype), rowb = (size_t)K * es;
	struct gather *g = s->g ? s->g[l] : NULL;
	if (!a->c.work) {
		snprintf(why, len, "parts of layers are not taken here");
		return SWD_DROP_NOMEM;
	}
	if (!g) {
		/* the buffer, and what the whole layer's computation will hold */
		swp_msg whole = *m;
		whole.head0 = whole.row0 = 0;
		whole.shape[0] = H;
		whole.shape[1] = whole.rows = R;
		size_t reserve = a->c.work_bytes ? a->c.work_bytes(a->c.work_ud, &whole) : 0;
		size_t bb = (size_t)H * R * rowb, b = bb + (size_t)H * R + R * (sizeof(uint32_t) + 1) +
		    sizeof(*g) + reserve;
		if (over_budget(a, b)) {
			snprintf(why, len, "gathering layer %u (%zu bytes with its computation) would "
			    "pass the budget", l, b);
			return SWD_DROP_BUDGET;
		}
		if (!s->g && !(s->g = calloc(r->meta.layers, sizeof(*s->g))))
			goto nomem;
		if (!(g = calloc(1, sizeof(*g))))
			goto nomem;
		g->buf = calloc(1, bb ? bb : 1);
		g->cover = calloc((size_t)H * R, 1);
		g->qpos = calloc(R, sizeof(uint32_t));
		g->qset = calloc(R, 1);
		if (!g->buf || !g->cover || !g->qpos || !g->qset) {
			g->bytes = 0;
			gather_free(a, g);
			goto nomem;
		}
		g->buf_bytes = bb;
		g->bytes = b;
		g->reserve = reserve;
		g->has_qpos = -1;
		g->hdr = *m;
		g->hdr.qpos = NULL;
		g->hdr.tensor = NULL;
		charge(a, (long long)b);
		s->g[l] = g;
		s->state[l] = 4;
	}
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
	g->has_qpos = hq;
	for (uint32_t q = 0; hq && q < m->shape[1]; q++) {
		g->qpos[m->row0 + q] = m->qpos[q];
		g->qset[m->row0 + q] = 1;
	}
	const uint8_t *src = m->tensor;
	for (uint32_t h = 0; h < m->shape[0]; h++)
		for (uint32_t q = 0; q < m->shape[1]; q++) {
			size_t cell = (size_t)(m->head0 + h) * R + m->row0 + q;
			memcpy(g->buf + cell * rowb, src + ((size_t)h * m->shape[1] + q) * rowb, rowb);
			g->cover[cell] = 1;
		}
	g->covered += (uint64_t)m->shape[0] * m->shape[1];
	if (g->covered == (uint64_t)H * R)
		launch(a, r, s, l, 0);	/* or at the next tick, if it cannot start now */
	return SWD_ASM_HELD;
nomem:
	snprintf(why, len, "no memory to gather layer %u", l);
	return SWD_DROP_NOMEM;
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

/* swd_asm_admit without the counting; *sdp: the message's sender, once known. */
static int
admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why, size_t len,
    struct asend **sdp)
{
	swd_meta mm;
	int reason = SWD_DROP_NOMEM;

	a->now = now;
	memset(t, 0, sizeof(*t));
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
	struct asend *sd = get_sender(a, r, inc, m);
	if (!sd) {
		snprintf(why, len, "no memory for a sender");
		return SWD_DROP_NOMEM;
	}
	*sdp = sd;
	sd->c.messages++;
	sd->c.pending++;	/* until swd_asm_admit decides (a step may go out meanwhile) */
	seq_check(r, inc, sd, m->seq);	/* it arrived: never lost, whatever it becomes */
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
	uint32_t H = r->meta.heads, R = r->meta.rows;
	int wholemsg = m->head0 == 0 && m->shape[0] == H && m->row0 == 0 && m->shape[1] == R;
	int several = inc->senders > 1;
	struct astep *s = find_step(r, m->step, inc);
	int written = s ? 0 : recently_written(a, r, m->step, inc->inc);
	if (written) {
		/* a whole step sent again is a duplicate; a layer after its step
		 * timed out is late (the writer counts re-sends older than this) */
		snprintf(why, len, "step %lld layer %u: the step was already written%s",
		    (long long)m->step, m->layer, written == 2 ? " whole" : " incomplete");
		if (written != 2)
			return SWD_DROP_LATE;
		if (several && find_digest(r, m->step, inc->inc))
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
	if (s && s->state[m->layer]) {
		int cov = s->state[m->layer] == 4 ? part_cover(r, s->g[m->layer], m) : 1;
		if (cov == 0)
			goto part;
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
	if (!s && !(s = new_step(a, r, m, inc, now, why, len, &reason)))
		return reason;
	s->last_ms = now;
	if (m->seq < s->seq_min)
		s->seq_min = m->seq;
	if (!wholemsg)
		goto part;
	if (ml_reserve(r, s, m->layer) != 0) {
		snprintf(why, len, "no memory for a layer");
		release(a, r);	/* a step left empty goes */
		return SWD_DROP_NOMEM;
	}
	ml_push(s, m->layer, sd, m->seq, 0, r->meta.heads);
	own(r, inc, m, sd->c.rank);
	s->state[m->layer] = 1;
	t->run = r;
	t->step = s;
	t->layer = m->layer;
	t->sender = sd;
	t->seq = m->seq;
	return SWD_ASM_ACCEPT;
part:
	s->last_ms = now;
	if (ml_reserve(r, s, m->layer) != 0) {
		snprintf(why, len, "no memory for a part");
		release(a, r);
		return SWD_DROP_NOMEM;
	}
	ml_push(s, m->layer, sd, m->seq, m->head0, m->shape[0]);
	own(r, inc, m, sd->c.rank);
	reason = take_part(a, r, s, m, why, len);
	if (reason != SWD_ASM_HELD) {
		ml_forget(s, m->layer, sd, m->seq);
		release(a, r);	/* a step left empty goes */
	}
	return reason;
}

int
swd_asm_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why,
    size_t len)
{
	struct asend *sd = NULL;
	int rc = admit(a, m, now, t, why, len, &sd);
	if (sd)
		sd->c.pending--;	/* decided: held in a layer (ml_push), or dropped */
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
	meta_from(&mm, m);
	struct arun *r = find_run(a, &mm);
	uint64_t incv = r ? (m->inc ? m->inc : r->implicit) : 0;
	struct ainc *i = incv ? find_inc(r, incv) : NULL;
	struct asend *d = i ? find_sender(i, m->rank) : NULL;
	if (!d)
		return;
	r->messages++;
	d->c.messages++;
	seq_check(r, i, d, m->seq);
	d->c.drop[reason]++;
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
	ml_forget(s, t->layer, sd, t->seq);
	sd->c.drop[reason]++;
	s->state[t->layer] = 0;
	release(a, r);
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
		judge_copy(r, t->cstep, t->layer, ly, sd, t->head0, t->row0);
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
		release(a, r);
		maybe_finish(a, r);
		return SWD_ASM_ACCEPT;
	}
	s->last_ms = now;
	if (!ly) {	/* the work failed: its messages are not stored */
		ml_drop(a, s, t->layer, SWD_DROP_NOMEM);
		s->state[t->layer] = 0;
	} else {
		s->layers[t->layer] = ly;
		s->state[t->layer] = 3;
		s->partial += ly->miss_rank != NULL;
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
		if (!strcmp(r->meta.run, run) && find_inc(r, inc))
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
		if (strcmp(r->meta.run, m->run) || (only_known && !find_inc(r, m->inc)))
			continue;
		found = 1;
		r->messages++;
		r->last_ms = now;
		uint64_t incv = msg_inc(a, r, m);
		struct ainc *inc = get_inc(a, r, incv, m);
		struct asend *sd = inc ? get_sender(a, r, inc, m) : NULL;
		if (sd) {
			sd->c.messages++;
			seq_check(r, inc, sd, m->seq);
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
		if (m->inc && !was_ended(a, m->run, m->inc))	/* before its steps go */
			a->ended[a->nended++ % ENDED_RING] = id_hash(m->run, m->inc);
		r->ending = 1;
		log_info("run %s: end received (this session: lost %lld, incomplete %lld)", r->meta.run,
		    (long long)r->lost, (long long)r->incomplete);
		maybe_finish(a, r);
	}
	/* an end of a run not held here (unknown_run) ends nothing: one rank's end
	 * after a restart must not drop its incarnation's other ranks (after_end) */
	if (found && m->inc && inc_ended && !was_ended(a, m->run, m->inc))
		a->ended[a->nended++ % ENDED_RING] = id_hash(m->run, m->inc);
	if (found)
		return rc;
	/*
	 * A run not held here (closed idle, or held before a restart): the
	 * writer counts the end in the file that holds its incarnation; a
	 * sender without inc is the one inferred for the run id before.
	 */
	uint64_t inc = m->inc;
	struct implicit *e = inc ? NULL : (struct implicit *)find_implicit(a, m->run);
	if (e && !e->ended)
		inc = e->inc;
	swd_witem *it = inc ? end_item(m, inc) : NULL;
	if (!it)
		return SWD_DROP_UNKNOWN_RUN;
	if (e)
		e->ended = 1;	/* its later messages: after_end */
	struct lend *l = &a->lend[a->nlend++ % ENDED_RING];
	l->h = id_hash(m->run, inc);
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
					launch(a, r, s, l, 0);
			/* at the timeout the rest start as they are, their missing heads named */
			if (late && s->in_work == 0 && !whole(r, s) &&
			    !memchr(s->state, 1, r->meta.layers) && settle(a, r, s))
				emit_step(a, r, s);
		}
		release(a, r);
		if (maybe_finish(a, r))
			continue;
		if (r->jobs == 0 && !r->ending &&
		    now - r->last_ms >= (uint64_t)a->c.run_idle_s * 1000) {
			/* its open steps go out as they are (incomplete, counted), then it
			 * closes (sinkwatchd(8)); gathered layers start first */
			int started = 0;
			for (struct astep *s = r->open; s; s = s->next)
				if (s->g && !settle(a, r, s))
					started = 1;
			if (started || r->jobs)
				continue;
			log_info("run %s: no message for %lld s: writing its %lld open step(s) and "
			    "closing its file", r->meta.run, (long long)a->c.run_idle_s,
			    (long long)r->nopen);
			finish_run(a, r, WQ_CLOSE);
		}
	}
}

void
swd_asm_stop(swd_asm *a)
{
	a->stopping = 1;
	/*
	 * Every gathered layer starts, as it is, its missing heads named (those
	 * that cannot start are counted by settle); the steps go out in step
	 * order as their work ends, the rest at swd_asm_shutdown.
	 */
	for (struct arun *r = a->runs; r; r = r->next)
		for (struct astep *s = r->open; s; s = s->next)
			if (s->g)
				settle(a, r, s);
}

void
swd_asm_shutdown(swd_asm *a)
{
	a->stopping = 1;
	while (a->runs) {
		struct arun *r = a->runs;
		emit_all(a, r);
		emit_senders(a, r, NULL);
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
