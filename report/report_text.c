/*
 * report_text.c: the report model (swreport.h) as the text of `sinkwatch
 * report`: one run file (sw_report_text_run) or the table of several
 * (sw_report_text_many), on stdout.
 */

#include <stdio.h>
#include <string.h>

#include "proto/swproto.h"
#include "report/swreport.h"
#include "report/json.h"

/* The sender table's text lines, for a several-sender run. */
static void
text_senders(const sw_rep_senders *s)
{
	if (s->err[0] || !s->several)
		return;
	printf("senders %lld", (long long)s->n);
	if (s->disagree)
		printf("  copies that disagree %lld", (long long)s->disagree);
	if (s->missing)
		printf("  heads missing %lld", (long long)s->missing);
	printf("\n");
	for (int64_t k = 0; k < s->nopen; k++)
		printf("rank %u of %u (incarnation %llu) never sent %s: the run is "
		    "incomplete\n", s->open[k].rank, s->open[k].senders,
		    (unsigned long long)s->open[k].inc, s->open[k].sent ? "its end" : "anything");
}

/* A layer's (l < L) or the model's line: its splits, its mean sink mass at
 * the range's ends. */
static void
text_attrib(const char *label, const sw_agg *ag, size_t l)
{
	const sw_attrib *a = l < ag->L ? &ag->layer[l] : &ag->model;
	double sf, sl;
	sw_rep_sink_mass(ag, l, &sf, &sl);
	printf("%-8s %12.6f %12.6f %12.6f %8.4f %8.4f | %12.6f %12.6f %12.6f %8.4f %8.4f | "
	    "%8.4f %8.4f\n", label, a->path.dH, a->path.sink, a->path.content,
	    a->path_sink_share, a->path_content_share, a->endpoint.dH, a->endpoint.sink,
	    a->endpoint.content, a->end_sink_share, a->end_content_share, sf, sl);
}

/* "2 of 7 intervals incomplete: steps 20-40, 60-70 (step 30: ...; ...)" */
static void
text_gaps(const char *indent, const sw_agg *a)
{
	if (a->ngaps == 0)
		return;
	printf("%s%lld of %lld intervals incomplete", indent, (long long)a->intervals_incomplete,
	    (long long)a->intervals);
	const char *sep = ": steps ";
	for (int64_t i = 1; i < a->steps; i++) {
		if (!sw_agg_interval_incomplete(a, i))
			continue;
		int64_t e = i;	/* a span of adjacent incomplete intervals */
		while (e + 1 < a->steps && sw_agg_interval_incomplete(a, e + 1))
			e++;
		printf("%s%lld-%lld", sep, (long long)a->step[i - 1], (long long)a->step[e]);
		sep = ", ";
		i = e;
	}
	printf("\n%s%lld incomplete step%s in the range:", indent, (long long)a->ngaps,
	    a->ngaps == 1 ? "" : "s");
	for (int64_t g = 0; g < a->ngaps; g++) {
		const sw_step_gap *s = &a->gaps[g];
		printf("%s step %lld (", g ? ";" : "", (long long)s->step);
		const char *sp = "";
		if (s->layers_missing) {
			printf("layer%s", s->layers_missing == 1 ? "" : "s");
			for (int64_t l = 0; l < s->layers_missing; l++)
				printf("%s%d", l ? "," : " ", s->layers[l]);
			printf(" missing");
			sp = ", ";
		}
		if (s->heads_missing) {
			printf("%s%lld head%s missing", sp, (long long)s->heads_missing,
			    s->heads_missing == 1 ? "" : "s");
			for (int r = 0; r < s->nranks; r++)
				printf("%s%d", r ? "," : " from rank ", s->ranks[r]);
			sp = ", ";
		}
		if (s->heads_without_rows > s->heads_missing)
			printf("%s%lld head%s without a valid row", sp,
			    (long long)(s->heads_without_rows - s->heads_missing),
			    s->heads_without_rows - s->heads_missing == 1 ? "" : "s");
		printf(")");
	}
	printf("\n");
}

static void
text_heads(const sw_agg *a, const sw_ranking *rk, double eps)
{
	printf("\nper head, path split over steps %lld .. %lld; class with eps %g nats "
	    "(sinkwatch(1)): sink = a drop through the sink channel, content = through the "
	    "content channel, both, stable, rise\n", (long long)a->first_step, (long long)a->last_step,
	    eps);
	printf("%5s %4s %8s %8s %9s %9s %9s %9s %11s %11s %11s %-8s %6s %6s\n", "layer", "head",
	    "s first", "s last", "H first", "H last", "Hc first", "Hc last", "dH", "sink",
	    "content", "class", "rk H", "rk Hc");
	for (size_t i = 0; i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *l = &a->last[i];
		const sw_attrib *h = &a->head[i];
		printf("%5zu %4zu %8.4f %8.4f %9.5f %9.5f %9.5f %9.5f %11.6f %11.6f %11.6f %-8s "
		    "%6.1f %6.1f\n", i / a->H, i % a->H, f->s, l->s, f->H, l->H, f->Hc, l->Hc,
		    h->path.dH, h->path.sink, h->path.content,
		    sw_head_class_name(sw_head_classify(h, eps)), rk->rank_entropy[i],
		    rk->rank_content[i]);
	}
	printf("ranking at step %lld for pruning (rank 1 = lowest; whole-row entropy vs "
	    "content entropy, sink dropped): Spearman rho %.4f over %zu heads\n",
	    (long long)a->last_step, rk->rho, rk->ranked);
	if (rk->nmoved) {
		printf("rank moves most:");
		for (size_t k = 0; k < rk->nmoved; k++) {
			size_t i = rk->moved[k];
			printf("%s layer %zu head %zu %g -> %g (%+g)", k ? ";" : "", i / a->H, i % a->H,
			    rk->rank_entropy[i], rk->rank_content[i],
			    rk->rank_content[i] - rk->rank_entropy[i]);
		}
		printf("\n");
	} else if (rk->ranked)
		printf("the two rankings agree\n");
}

/* "whole run", "--from A --to B", "--last N" */
static void
range_desc(const sw_rep_opts *o, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	if (o->range.has_from)
		n += (size_t)snprintf(buf + n, len - n, " --from %lld", (long long)o->range.from);
	if (o->range.has_to && n < len)
		n += (size_t)snprintf(buf + n, len - n, " --to %lld", (long long)o->range.to);
	if (o->range.last > 0 && n < len)
		n += (size_t)snprintf(buf + n, len - n, " --last %lld", (long long)o->range.last);
	if (!n)
		snprintf(buf, len, " whole run");
}

/* ---- one run file ---- */

void
sw_report_text_run(const sw_report *m)
{
	const sw_run *run = m->run;
	const sw_rep_run *e = &m->e;
	const sw_rep_opts *o = m->o;
	const sw_agg *a = &e->agg;
	const sw_view *v = &run->view;
	char trun[SW_TEXT_SAFE(SWP_RUN_MAX)], tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)];
	printf("run %s  model %s  %zu layers x %zu heads  %lld steps stored (%lld .. %lld)  "
	    "split %s\n", sw_text_safe(run->meta.run, trun, sizeof(trun)),
	    run->meta.model[0] ? sw_text_safe(run->meta.model, tmodel, sizeof(tmodel)) : "-",
	    a->L, a->H,
	    (long long)v->n, (long long)v->step[0], (long long)v->step[v->n - 1], a->form);
	printf("rows %lld (%lld superseded)  lost %lld  incomplete %lld  steps in step order\n",
	    (long long)run->T, (long long)v->superseded, (long long)run->lost,
	    (long long)run->incomplete);
	if (v->nseg > 1 || v->superseded)
		for (int64_t k = 0; k < v->nseg; k++)
			printf("segment %lld: incarnation %llu, steps %lld .. %lld (%lld)\n",
			    (long long)k, (unsigned long long)v->seg[k].inc,
			    (long long)v->seg[k].first_step, (long long)v->seg[k].last_step,
			    (long long)v->seg[k].steps);
	if (e->ended == 0)
		printf("not ended: the run was killed or is still running\n");
	text_senders(&m->snd);
	if (o->range.has_from || o->range.has_to || o->range.last > 0) {
		char rd[96];
		range_desc(o, rd, sizeof(rd));
		printf("steps used %lld .. %lld: %lld of %lld stored (%s); endpoint: the %s split "
		    "of steps %lld and %lld\n", (long long)a->first_step, (long long)a->last_step,
		    (long long)a->steps, (long long)v->n, rd + 1, a->form,
		    (long long)a->first_step, (long long)a->last_step);
	}
	text_gaps("", a);
	printf("\n");
	printf("entropy change attributed to the sink channel and the content channel (nats)\n");
	printf("%-8s %12s %12s %12s %8s %8s | %12s %12s %12s %8s %8s | %8s %8s\n", "",
	    "path dH", "sink", "content", "sink_sh", "cont_sh", "endpoint dH", "sink", "content",
	    "sink_sh", "cont_sh", "s first", "s last");
	for (size_t l = 0; l < a->L; l++) {
		char label[32];
		snprintf(label, sizeof(label), "layer %zu", l);
		text_attrib(label, a, l);
	}
	text_attrib("model", a, a->L);
	printf("\nshares are parts / dH, shown only where dH < 0 (a drop); "
	    "they may fall outside [0, 1] when the parts have opposite signs\n"
	    "s first, s last: the mean sink mass over the heads at steps %lld and %lld; the "
	    "sink part has either sign, whichever way the sink mass moved\n",
	    (long long)a->first_step, (long long)a->last_step);
	if (o->per_head)
		text_heads(a, &e->rank, o->eps);
}

static void
text_row(const char *model, const char *run, const char *params, const sw_attrib *a,
    const char *steps, const char *form, const char *lost, const char *incompl,
    const char *file)
{
	printf("%-22s %-16s %12s %6s %11.6f %11.6f %11.6f %8.4f | %11.6f %11.6f %11.6f %8.4f",
	    model, run, params, steps, a->path.dH, a->path.sink, a->path.content,
	    a->path_sink_share, a->endpoint.dH, a->endpoint.sink, a->endpoint.content,
	    a->end_sink_share);
	if (form[0])	/* a run's line; a layer's ends here */
		printf(" %-9s %5s %9s  %s", form, lost, incompl, file);
	printf("\n");
}

/* ---- several runs ---- */

/* The value of group key k over the group's runs: theirs when they share it,
 * else "(mixed)"; text-safe. */
static const char *
group_value(const sw_report_many *rm, const sw_rep_group *g, enum sw_group_key k, char *buf,
    size_t len)
{
	char v[1100], w[1100];
	sw_rep_group_value(rm->cmp[g->member[0]], k, v, sizeof(v));
	for (size_t i = 1; i < g->n; i++) {
		sw_rep_group_value(rm->cmp[g->member[i]], k, w, sizeof(w));
		if (strcmp(v, w)) {
			snprintf(buf, len, "(mixed)");
			return buf;
		}
	}
	if (k == SW_GK_MODEL && !v[0]) {
		snprintf(buf, len, "-");
		return buf;
	}
	return sw_text_safe(v, buf, len);
}

/* The groups' lines: the group keys named, each group's mean and spread. */
static void
text_groups(const sw_report_many *rm, const sw_rep_opts *o)
{
	enum sw_group_key keys[SW_GK__N];
	int nk = sw_rep_group_keys(o, keys);
	char tm[SW_TEXT_SAFE(SWP_MODEL_MAX)], tp[32], extra[SW_TEXT_SAFE(1100)];
	if (!rm->ng)
		return;
	printf("\n%zu group%s of runs with the same ", rm->ng, rm->ng == 1 ? "" : "s");
	for (int k = 0; k < nk; k++)
		printf("%s%s", k == 0 ? "" : k == nk - 1 ? " and " : ", ",
		    sw_group_key_names[keys[k]]);
	printf(": mean and %s\n", SW_REP_SPREAD);
	printf("%-22s %12s %4s  %-21s  %-21s  %-21s  %-17s | %-21s  %-17s  %s\n", "model",
	    "params", "runs", "path dH", "sink", "content", "sink_sh", "endpt dH",
	    "endpt sink_sh", "group");
	for (size_t k = 0; k < rm->ng; k++) {
		const sw_rep_group *g = &rm->g[k];
		const double *m = g->mean, *s = g->sd;
		printf("%-22s %12s %4zu  %10.6f ± %-8.6f  %10.6f ± %-8.6f  %10.6f ± %-8.6f  "
		    "%7.4f ± %-7.4f | %10.6f ± %-8.6f  %7.4f ± %-7.4f ",
		    group_value(rm, g, SW_GK_MODEL, tm, sizeof(tm)),
		    group_value(rm, g, SW_GK_PARAMS, tp, sizeof(tp)), g->n, m[SW_G_PDH],
		    s[SW_G_PDH], m[SW_G_PSINK], s[SW_G_PSINK], m[SW_G_PCONT], s[SW_G_PCONT],
		    m[SW_G_PSSH], s[SW_G_PSSH], m[SW_G_EDH], s[SW_G_EDH], m[SW_G_ESSH],
		    s[SW_G_ESSH]);
		for (int i = 0; i < nk; i++)
			printf(" %s=%s", sw_group_key_names[keys[i]],
			    group_value(rm, g, keys[i], extra, sizeof(extra)));
		printf("\n");
	}
}

void
sw_report_text_many(const sw_report_many *rm, const sw_rep_opts *o)
{
	sw_rep_run *const *cmp = rm->cmp;
	const sw_rep_list *runs = &rm->runs, *skipped = &rm->skipped;
	size_t n = rm->n;
	char rd[96];
	range_desc(o, rd, sizeof(rd));
	printf("%zu run%s compared, sorted by parameter count; steps:%s; path = sum over the "
	    "stored intervals, endpoint = the range's first to last step (nats)\n", n,
	    n == 1 ? "" : "s", rd);
	printf("%-22s %-16s %12s %6s %11s %11s %11s %8s | %11s %11s %11s %8s %-9s %5s %9s  %s\n",
	    "model", "run", "params", "steps", "path dH", "sink", "content", "sink_sh", "endpt dH",
	    "sink", "content", "sink_sh", "form", "lost", "incompl", "file");
	for (size_t i = 0; i < n; i++) {
		const sw_rep_run *e = cmp[i];
		const sw_agg *a = &e->agg;
		char params[24], steps[24], lost[24], inc[48];
		snprintf(params, sizeof(params), "%llu", (unsigned long long)e->meta.params);
		snprintf(steps, sizeof(steps), "%lld", (long long)a->steps);
		snprintf(lost, sizeof(lost), "%lld", (long long)e->lost);
		snprintf(inc, sizeof(inc), "%lld/%lld", (long long)a->intervals_incomplete,
		    (long long)a->intervals);
		char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)] = "-", tfile[SW_TEXT_SAFE(1024)];
		char trun[SW_TEXT_SAFE(SWP_RUN_MAX)];
		if (e->meta.model[0])
			sw_text_safe(e->meta.model, tmodel, sizeof(tmodel));
		text_row(tmodel, sw_text_safe(e->meta.run, trun, sizeof(trun)), params, &a->model,
		    steps, a->form, lost, inc, sw_text_safe(e->file, tfile, sizeof(tfile)));
		if (o->per_layer)
			for (size_t l = 0; l < a->L; l++) {
				char label[32];
				snprintf(label, sizeof(label), "  layer %zu", l);
				text_row(label, "", "", &a->layer[l], "", "", "", "", "");
			}
		if (a->ngaps && (o->per_layer || o->per_head))
			text_gaps("  ", a);
		if (o->per_head) {
			printf("\n%s (%s):", tfile, tmodel);
			text_heads(a, &e->rank, o->eps);
			printf("\n");
		}
	}
	printf("incompl: intervals of the range that touch an incomplete step (missing layers "
	    "or heads, heads without a valid row), of all its intervals\n");
	text_groups(rm, o);
	size_t nex = 0;
	for (size_t i = 0; i < runs->n; i++)
		nex += runs->v[i].reason[0] != 0;
	if (nex) {
		printf("\nnot compared (%zu):\n", nex);
		for (size_t i = 0; i < runs->n; i++) {
			const sw_rep_run *e = &runs->v[i];
			if (!e->reason[0])
				continue;
			char tmodel[SW_TEXT_SAFE(SWP_MODEL_MAX)], tfile[SW_TEXT_SAFE(1024)];
			sw_text_safe(e->file, tfile, sizeof(tfile));
			if (e->meta.layers)
				printf("  %s (model %s, params %llu): %s\n", tfile,
				    e->meta.model[0] ? sw_text_safe(e->meta.model, tmodel,
				    sizeof(tmodel)) : "-", (unsigned long long)e->meta.params, e->reason);
			else
				printf("  %s: %s\n", tfile, e->reason);
		}
	}
	if (skipped->n) {
		printf("\nskipped (%zu):\n", skipped->n);
		for (size_t i = 0; i < skipped->n; i++)
			printf("  %s: %s\n", skipped->v[i].file, skipped->v[i].reason);
	}
}
