/*
 * model.c: the report of one run file (swreport.h): its identity, the
 * range's aggregation and ranking, its series, its sender table. Nothing
 * here prints.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/swreport.h"

void
sw_rep_senders_free(sw_rep_senders *s)
{
	free(s->t);
	free(s->open);
	s->t = NULL;
	s->open = NULL;
	s->n = s->nopen = 0;
}

void
sw_rep_senders_read(sw_reader *r, sw_rep_senders *s)
{
	memset(s, 0, sizeof(*s));
	int64_t n = sw_reader_senders(r, &s->t, &s->nf, s->err, sizeof(s->err));
	if (n < 0) {
		s->t = NULL;
		return;
	}
	s->n = n;
	/* every rank of a several-sender incarnation, against the table's
	 * senders: a rank that never sent has no row */
	s->nopen = sw_ranks_not_ended(s->t, n, &s->open);
	if (s->nopen < 0) {
		snprintf(s->err, sizeof(s->err), "out of memory");
		sw_rep_senders_free(s);
		return;
	}
	for (int64_t k = 0; k < n; k++) {
		const uint64_t *v = s->t + k * SW_SENDER_FIELDS;
		s->several += v[SW_S_SENDERS] > 1;
		s->disagree += (int64_t)v[SW_S_DISAGREE];
		s->missing += (int64_t)v[SW_S_MISSING];
	}
}

void
sw_rep_run_free(sw_rep_run *e)
{
	free(e->file);
	free(e->gkey);
	if (e->have_agg && !e->agg_borrowed)
		sw_agg_free(&e->agg);
	if (e->have_rank)
		sw_ranking_free(&e->rank);
	memset(e, 0, sizeof(*e));
}

void
sw_rep_take_meta(sw_rep_run *e, const sw_run *run)
{
	e->meta = run->meta;
	snprintf(e->kind, sizeof(e->kind), "%s", run->meta.kind ? run->meta.kind : "");
	e->meta.kind = e->meta.split_form = e->meta.dtype = NULL;
	e->steps_stored = run->view.n;
	e->rows = run->T;
	e->superseded = run->view.superseded;
	e->lost = run->lost;
	e->incomplete = run->incomplete;
	e->ended = sw_reader_ended(run->reader);
}

/* The range's figures of an open run (cached: the caller's aggregation of
 * that range, borrowed); -1 with the reason in e. */
int
sw_rep_compute(sw_rep_run *e, sw_run *run, const sw_rep_opts *o, const sw_range *rg,
    const sw_agg *cached)
{
	char err[512];
	if (cached) {
		e->agg = *cached;
		e->agg_borrowed = 1;
	} else if (sw_agg_compute(run, rg, o->series, &e->agg, err, sizeof(err)) != 0) {
		snprintf(e->reason, sizeof(e->reason), "%s", err);
		return -1;
	}
	e->have_agg = 1;
	if (o->per_head) {
		if (sw_agg_rank(&e->agg, &e->rank) != 0) {
			snprintf(e->reason, sizeof(e->reason), "out of memory");
			return -1;
		}
		e->have_rank = 1;
	}
	return 0;
}

void
sw_rep_sink_mass(const sw_agg *a, size_t l, double *first, double *last)
{
	size_t i0 = l < a->L ? l * a->H : 0, i1 = l < a->L ? i0 + a->H : a->LH;
	double sf = 0, sl = 0;
	size_t nf = 0, nl = 0;
	for (size_t i = i0; i < i1; i++) {
		if (isfinite(a->first[i].s)) {
			sf += a->first[i].s;
			nf++;
		}
		if (isfinite(a->last[i].s)) {
			sl += a->last[i].s;
			nl++;
		}
	}
	*first = nf ? sf / (double)nf : NAN;
	*last = nl ? sl / (double)nl : NAN;
}

int
sw_report_build(sw_report *m, sw_run *run, const char *file, const sw_rep_opts *o,
    const sw_range *rg, const sw_agg *cached, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	m->run = run;
	m->o = o;
	if (!(m->e.file = strdup(file))) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	sw_rep_take_meta(&m->e, run);
	if (sw_rep_compute(&m->e, run, o, rg, cached) != 0) {
		snprintf(err, errlen, "%s: %s", file, m->e.reason);
		return -1;
	}
	if (o->series) {
		if (sw_agg_series(run, &m->e.agg, &m->ser, err, errlen) != 0) {
			char why[512];
			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, errlen, "%s: %s", file, why);
			return -1;
		}
		m->have_ser = 1;
	}
	sw_rep_senders_read(run->reader, &m->snd);
	return 0;
}

void
sw_report_free(sw_report *m)
{
	if (m->have_ser)
		sw_series_free(&m->ser);
	sw_rep_senders_free(&m->snd);
	sw_rep_run_free(&m->e);
	memset(m, 0, sizeof(*m));
}

int
sw_report_of_run(sw_report *m, sw_run *run, const char *file, const sw_rep_opts *o,
    char *err, size_t errlen)
{
	sw_range rg;
	int64_t need = o->series ? 1 : 2;

	memset(m, 0, sizeof(*m));
	if (run->T < need) {
		snprintf(err, errlen, "%s has %lld stored step(s): an attribution needs two", file,
		    (long long)run->T);
		return -1;
	}
	if (run->view.n < need) {
		snprintf(err, errlen, "%s has %lld stored step(s) (%lld rows): an attribution "
		    "needs two", file, (long long)run->view.n, (long long)run->T);
		return -1;
	}
	if (sw_run_range(run, &o->range, &rg, err, errlen) != 0)
		return -1;
	if (rg.k1 - rg.k0 + 1 < need) {
		snprintf(err, errlen, "%s: the range holds 1 stored step (%lld): an attribution "
		    "needs two", file, (long long)run->view.step[rg.k0]);
		return -1;
	}
	return sw_report_build(m, run, file, o, &rg, NULL, err, errlen);
}

int
sw_rep_opts_check(const sw_rep_opts *o, char *err, size_t errlen)
{
	if (o->range.last < 0 || (o->range.has_last && o->range.last < 1)) {
		char v[32];
		snprintf(v, sizeof(v), "%lld", (long long)o->range.last);
		snprintf(err, errlen, SW_REP_LAST_BAD, v);
		return -1;
	}
	if (o->range.last > 0 && o->range.has_from) {
		snprintf(err, errlen, "--last counts back from --to (or the last step): not with "
		    "--from");
		return -1;
	}
	if (!(o->eps >= 0) || !isfinite(o->eps)) {
		snprintf(err, errlen, "--eps: %g is not a number of nats >= 0", o->eps);
		return -1;
	}
	return 0;
}
