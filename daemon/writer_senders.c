/*
 * writer_senders.c: each sender's account in its run file's sender table
 * (LAYOUT.md, senders), and the messages the writer did not store
 * although the assembly handed them over (fates), for status.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "net/log.h"
#include "daemon/writer_int.h"

static const int wf_reason[WF__N] = { SWD_DROP_DUPLICATE, SWD_DROP_WRITE, SWD_DROP_LOCKED,
	SWD_DROP_LATE };

/* Counts n messages of (serial, inc, rank) under fate f. */
static void
fate_add(swd_writer *w, uint64_t serial, uint64_t inc, uint32_t rank, int f, int64_t n)
{
	if (n == 0 || !w->fates)
		return;
	pthread_mutex_lock(&w->fmu);
	struct wfate *e = NULL, *old = &w->fates[0];
	for (size_t i = 0; i < WFATES && !e; i++) {
		struct wfate *x = &w->fates[i];
		if (x->seq && x->serial == serial && x->inc == inc && x->rank == rank)
			e = x;
		else if (x->seq < old->seq)
			old = x;
	}
	if (!e) {
		e = old;
		memset(e, 0, sizeof(*e));
		e->serial = serial;
		e->inc = inc;
		e->rank = rank;
	}
	e->n[f] += n;
	e->seq = ++w->fate_seq;
	pthread_mutex_unlock(&w->fmu);
}

/* The messages of a step item the writer did not store, by their senders. */
long long
wr_fate_item(swd_writer *w, const swd_witem *it, int f)
{
	long long n = 0;
	for (size_t k = 0; k < it->nmc; k++) {
		fate_add(w, it->serial, it->inc, it->mc[k].rank, f, it->mc[k].n);
		n += it->mc[k].n;
	}
	return n;
}

/* What the writer did not store of one sender's messages, by fate. */
static void
fate_get(swd_writer *w, uint64_t serial, uint64_t inc, uint32_t rank, int64_t n[WF__N])
{
	memset(n, 0, WF__N * sizeof(*n));
	if (!w->fates)
		return;
	pthread_mutex_lock(&w->fmu);
	for (size_t i = 0; i < WFATES; i++) {
		const struct wfate *x = &w->fates[i];
		if (x->seq && x->serial == serial && x->inc == inc && x->rank == rank) {
			memcpy(n, x->n, sizeof(x->n));
			break;
		}
	}
	pthread_mutex_unlock(&w->fmu);
}

void
swd_writer_fates(swd_writer *w, swd_sender *c)
{
	int64_t n[WF__N];
	fate_get(w, c->serial, c->inc, c->rank, n);
	for (int f = 0; f < WF__N; f++) {
		c->drop[wf_reason[f]] += n[f];
		c->stored -= n[f];
	}
}

static struct wsend *
get_wsend(struct wrun *r, uint64_t inc, uint32_t rank)
{
	struct wsend *d;
	for (d = r->snd; d; d = d->next)
		if (d->inc == inc && d->rank == rank)
			return d;
	if ((d = calloc(1, sizeof(*d)))) {
		d->inc = inc;
		d->rank = rank;
		d->row = r->nsnd++;
		d->next = r->snd;
		r->snd = d;
	}
	return d;
}

/*
 * A sender of a several-sender incarnation first heard in this session:
 * what it sent below its first seq here that the file does not account
 * for (its table row's seq_next; all of it for a sender new to the file)
 * no daemon stored. Counted before any of its steps carries the totals.
 */
static void
sender_gap(swd_writer *w, struct wrun *r, struct wsend *d, const swd_sender *c)
{
	/*
	 * What the row accounts for: its messages (stored, or dropped and
	 * counted; a daemon counts there only what it no longer holds) and
	 * those lost. Not its seq_next: a killed daemon may have flushed a
	 * seq_next past messages it still held in memory.
	 */
	uint64_t held = d->base[SW_S_MESSAGES] + d->base[SW_S_LOST];
	d->seen = 1;
	if (c->senders <= 1) {	/* one sender: counted per incarnation (wr_first_seen) */
		struct winc *wi = wr_inc_get(r, c->inc);
		if (wi) {
			d->base[SW_S_LOST] += (uint64_t)wi->gap;
			wi->gap = 0;
		}
		return;
	}
	if (c->first_seq <= held)
		return;
	int64_t gap = (int64_t)(c->first_seq - held);
	d->base[SW_S_LOST] += (uint64_t)gap;
	struct winc *wi = wr_inc_get(r, c->inc);
	if (wi)
		wi->lost_prev += gap;
	r->lost_prev += gap;
	atomic_fetch_add(&w->st.lost_restart, gap);
	log_warn("run %s: %lld message(s) of rank %u of incarnation %llu no daemon stored "
	    "(seq below %llu)", r->meta.run, (long long)gap, c->rank,
	    (unsigned long long)c->inc, (unsigned long long)c->first_seq);
}

/* This session's counters of some senders into the file's table. */
void
wr_put_senders(swd_writer *w, struct wrun *r, const swd_sender *snd, size_t n)
{
	char err[512];
	for (size_t k = 0; k < n && r->f; k++) {
		const swd_sender *c = &snd[k];
		struct wsend *d = get_wsend(r, c->inc, c->rank);
		if (!d)
			return;
		if (!d->seen)
			sender_gap(w, r, d, c);
		uint64_t v[SW_SENDER_FIELDS];
		const uint64_t *b = d->base;
		v[SW_S_INC] = c->inc;
		v[SW_S_RANK] = c->rank;
		v[SW_S_SENDERS] = c->senders;
		v[SW_S_MESSAGES] = b[SW_S_MESSAGES] + (uint64_t)c->messages;
		v[SW_S_LOST] = b[SW_S_LOST] + (uint64_t)c->lost;
		int64_t fn[WF__N];
		fate_get(w, c->serial, c->inc, c->rank, fn);
		v[SW_S_DUPLICATES] = b[SW_S_DUPLICATES] + (uint64_t)(c->drop[SWD_DROP_DUPLICATE] +
		    fn[WF_DUP]);
		v[SW_S_OVERLAPS] = b[SW_S_OVERLAPS] + (uint64_t)c->drop[SWD_DROP_OVERLAP];
		v[SW_S_MISMATCHES] = b[SW_S_MISMATCHES] + (uint64_t)c->drop[SWD_DROP_PART_MISMATCH];
		v[SW_S_DISAGREE] = b[SW_S_DISAGREE] + (uint64_t)c->disagree;
		v[SW_S_UNCOMPARED] = b[SW_S_UNCOMPARED] + (uint64_t)c->uncompared;
		v[SW_S_MISSING] = b[SW_S_MISSING] + (uint64_t)c->missing;
		v[SW_S_AFTER_END] = b[SW_S_AFTER_END] + (uint64_t)c->drop[SWD_DROP_AFTER_END];
		v[SW_S_SEQ_NEXT] = c->seq_next > b[SW_S_SEQ_NEXT] ? c->seq_next : b[SW_S_SEQ_NEXT];
		v[SW_S_ENDED] = c->ended || b[SW_S_ENDED];
		/* the rest of its account; what the writer did not store is not stored */
		v[SW_S_STORED] = b[SW_S_STORED] + (uint64_t)(c->stored - fn[WF_DUP] - fn[WF_WRITE] -
		    fn[WF_LOCKED] - fn[WF_LATE]);
		v[SW_S_BUDGET] = b[SW_S_BUDGET] + (uint64_t)c->drop[SWD_DROP_BUDGET];
		v[SW_S_LATE] = b[SW_S_LATE] + (uint64_t)(c->drop[SWD_DROP_LATE] + fn[WF_LATE]);
		v[SW_S_SENDERS_MISMATCH] = b[SW_S_SENDERS_MISMATCH] + (uint64_t)c->drop[SWD_DROP_SENDERS];
		v[SW_S_NOMEM] = b[SW_S_NOMEM] + (uint64_t)c->drop[SWD_DROP_NOMEM];
		v[SW_S_STOPPING] = b[SW_S_STOPPING] + (uint64_t)c->drop[SWD_DROP_STOPPING];
		v[SW_S_OPEN_STEPS] = b[SW_S_OPEN_STEPS] + (uint64_t)c->drop[SWD_DROP_OPEN_STEPS];
		v[SW_S_WRITE_ERROR] = b[SW_S_WRITE_ERROR] + (uint64_t)(c->drop[SWD_DROP_WRITE] +
		    fn[WF_WRITE]);
		v[SW_S_HEAD_MISSING] = b[SW_S_HEAD_MISSING] + (uint64_t)c->drop[SWD_DROP_HEAD_MISSING];
		if (sw_runfile_put_sender(r->f, d->row, v, err, sizeof(err)) != 0) {
			log_err("run %s: writing the sender table failed: %s", r->meta.run, err);
			atomic_fetch_add(&w->st.write_errors, 1);
			return;
		}
		r->dirty = 1;
	}
}

/*
 * An end that came after its run was closed (idle, or by a restart):
 * counted in its sender's row (the end, and what its seq says was lost);
 * 1 if every rank of its incarnation has ended.
 */
int
wr_end_sender(swd_writer *w, struct wrun *r, const swd_sender *c)
{
	char err[512];
	struct wsend *d = r->f ? get_wsend(r, c->inc, c->rank) : NULL;
	if (!d)
		return 0;
	uint64_t *b = d->base, seq = c->seq_next - 1, held = b[SW_S_MESSAGES] + b[SW_S_LOST];
	b[SW_S_INC] = c->inc;
	b[SW_S_RANK] = c->rank;
	if (!b[SW_S_SENDERS])
		b[SW_S_SENDERS] = c->senders;
	if (seq > held) {
		b[SW_S_LOST] += seq - held;
		atomic_fetch_add(&w->st.lost_restart, (long long)(seq - held));
		log_warn("run %s: %llu message(s) of rank %u of incarnation %llu no daemon "
		    "stored (seq below %llu)", r->meta.run, (unsigned long long)(seq - held), c->rank,
		    (unsigned long long)c->inc, (unsigned long long)seq);
	}
	b[SW_S_MESSAGES]++;
	if (b[SW_S_SENDERS] != c->senders)
		b[SW_S_SENDERS_MISMATCH]++;
	else if (b[SW_S_ENDED])
		b[SW_S_AFTER_END]++;
	else
		b[SW_S_ENDED] = 1;
	if (c->seq_next > b[SW_S_SEQ_NEXT])
		b[SW_S_SEQ_NEXT] = c->seq_next;
	d->seen = 1;
	if (sw_runfile_put_sender(r->f, d->row, b, err, sizeof(err)) != 0) {
		log_err("run %s: writing the sender table failed: %s", r->meta.run, err);
		atomic_fetch_add(&w->st.write_errors, 1);
		return 0;
	}
	r->dirty = 1;
	uint64_t N = b[SW_S_SENDERS] ? b[SW_S_SENDERS] : 1;
	for (uint64_t k = 0; k < N; k++) {
		const struct wsend *e = r->snd;
		while (e && !(e->inc == c->inc && e->rank == k && e->base[SW_S_ENDED]))
			e = e->next;
		if (!e) {
			log_info("run %s: rank %u of incarnation %llu ended its part; rank %llu has "
			    "not: the file is not marked ended", r->meta.run, c->rank,
			    (unsigned long long)c->inc, (unsigned long long)k);
			return 0;
		}
	}
	return 1;
}
