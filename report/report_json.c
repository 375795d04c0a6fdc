/*
 * report_json.c: the JSON of the report model (swreport.h): one run's
 * report (sw_report_json_run, for `sinkwatch report --format json` and
 * `sinkwatch serve` alike) and the report of several runs.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/swreport.h"
#include "report/json.h"

/* An integer, or null when not set. */
static void
json_opt_int(sw_json *j, const char *key, int set, int64_t v)
{
	if (set)
		sw_json_int(j, key, v);
	else
		sw_json_num(j, key, NAN);
}

/* The range asked for (null where not asked). */
static void
json_range(sw_json *j, const sw_rep_opts *o)
{
	sw_json_begin_obj(j, "range");
	json_opt_int(j, "from", o->range.has_from, o->range.from);
	json_opt_int(j, "to", o->range.has_to, o->range.to);
	json_opt_int(j, "last", o->range.last > 0, o->range.last);
	sw_json_end_obj(j);
}

/* The mean sink mass of layer l (l == L: the model) at the range's ends. */
static void
json_sink_mass(sw_json *j, const sw_agg *a, size_t l)
{
	double f, la;
	sw_rep_sink_mass(a, l, &f, &la);
	sw_json_num(j, "sink_mass_first", f);
	sw_json_num(j, "sink_mass_last", la);
}

/* The range's incomplete steps and the intervals they touch. */
static void
json_gaps(sw_json *j, const sw_agg *a)
{
	sw_json_int(j, "intervals", a->intervals);
	sw_json_int(j, "intervals_incomplete", a->intervals_incomplete);
	sw_json_int(j, "steps_incomplete", a->ngaps);
	sw_json_begin_arr(j, "incomplete_steps");
	for (int64_t g = 0; g < a->ngaps; g++) {
		const sw_step_gap *s = &a->gaps[g];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "step", s->step);
		sw_json_begin_arr(j, "layers_missing");
		for (int64_t l = 0; l < s->layers_missing; l++)
			sw_json_int(j, NULL, s->layers[l]);
		sw_json_end_arr(j);
		sw_json_int(j, "heads_missing", s->heads_missing);
		sw_json_int(j, "heads_without_rows", s->heads_without_rows);
		sw_json_begin_arr(j, "ranks");
		for (int r = 0; r < s->nranks; r++)
			sw_json_int(j, NULL, s->ranks[r]);
		sw_json_end_arr(j);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "incomplete_intervals");
	for (int64_t i = 1; i < a->steps; i++) {
		if (!sw_agg_interval_incomplete(a, i))
			continue;
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "from_step", a->step[i - 1]);
		sw_json_int(j, "to_step", a->step[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

static void
json_layers(sw_json *j, const sw_agg *a)
{
	sw_json_begin_arr(j, "layer_attribution");
	for (size_t l = 0; l < a->L; l++) {
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)l);
		sw_json_attrib(j, &a->layer[l]);
		json_sink_mass(j, a, l);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

/* Per head: values at both ends, the splits, the class and the ranks. */
static void
json_heads(sw_json *j, const sw_agg *a, const sw_ranking *rk, double eps)
{
	sw_json_begin_obj(j, "classification");
	sw_json_num(j, "eps", eps);
	sw_json_str(j, "rule", SW_REP_CLASS_RULE);
	sw_json_end_obj(j);
	sw_json_begin_arr(j, "per_head");
	for (size_t i = 0; i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *l = &a->last[i];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)(i / a->H));
		sw_json_int(j, "head", (int64_t)(i % a->H));
		sw_json_int(j, "rows_first", f->rows);
		sw_json_int(j, "rows_last", l->rows);
		sw_json_num(j, "sink_mass_first", f->s);
		sw_json_num(j, "sink_mass_last", l->s);
		sw_json_num(j, "entropy_first", f->H);
		sw_json_num(j, "entropy_last", l->H);
		sw_json_num(j, "content_entropy_first", f->Hc);
		sw_json_num(j, "content_entropy_last", l->Hc);
		sw_json_attrib(j, &a->head[i]);
		sw_json_str(j, "class", sw_head_class_name(sw_head_classify(&a->head[i], eps)));
		sw_json_num(j, "rank_entropy", rk->rank_entropy[i]);
		sw_json_num(j, "rank_content", rk->rank_content[i]);
		sw_json_num(j, "rank_shift", rk->rank_content[i] - rk->rank_entropy[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_begin_obj(j, "ranking");
	sw_json_int(j, "step", a->last_step);
	sw_json_str(j, "rule", SW_REP_RANK_RULE);
	sw_json_int(j, "ranked", (int64_t)rk->ranked);
	sw_json_num(j, "spearman_rho", rk->rho);
	sw_json_begin_arr(j, "most_moved");
	for (size_t k = 0; k < rk->nmoved; k++) {
		size_t i = rk->moved[k];
		sw_json_begin_obj(j, NULL);
		sw_json_int(j, "layer", (int64_t)(i / a->H));
		sw_json_int(j, "head", (int64_t)(i % a->H));
		sw_json_num(j, "rank_entropy", rk->rank_entropy[i]);
		sw_json_num(j, "rank_content", rk->rank_content[i]);
		sw_json_num(j, "rank_shift", rk->rank_content[i] - rk->rank_entropy[i]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
}

/* The dashboard's series (sw_agg_series): per layer and the model. */
static void
json_series(sw_json *j, const sw_series *s)
{
	size_t n = s->n;
	sw_json_begin_obj(j, "series");
	sw_json_begin_arr(j, "step");
	for (size_t k = 0; k < n; k++)
		sw_json_int(j, NULL, s->step[k]);
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "layers");
	for (size_t l = 0; l <= s->layers; l++) {	/* l == layers: the model */
		sw_json_begin_obj(j, NULL);
		if (l < s->layers)
			sw_json_int(j, "layer", (int64_t)l);
		else
			sw_json_str(j, "layer", "model");
		sw_json_series_layer(j, s, l, n);	/* what /api/series has too */
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_end_obj(j);
}

/* The keys every run of a JSON report has, in one file's report or a table. */
static void
json_run_common(sw_json *j, const sw_rep_run *e)
{
	const sw_agg *a = &e->agg;
	sw_json_str(j, "file", e->file);
	sw_json_str(j, "run", e->meta.run);
	sw_json_str(j, "model", e->meta.model);
	sw_json_int(j, "params", (int64_t)e->meta.params);
	sw_json_int(j, "layers", (int64_t)e->meta.layers);
	sw_json_int(j, "heads", (int64_t)e->meta.heads);
	sw_json_str(j, "kind", e->kind);
	sw_json_int(j, "keys", (int64_t)e->meta.keys);
	sw_json_bool(j, "fixed_probe", e->meta.fixed_probe);
	sw_json_str(j, "split_form", a->form);
	sw_json_str(j, "endpoint_form", a->form);
	sw_json_int(j, "steps_stored", e->steps_stored);
	sw_json_int(j, "steps_used", a->steps);
	sw_json_int(j, "first_step", a->first_step);	/* steps are integers: exact */
	sw_json_int(j, "last_step", a->last_step);
	sw_json_int(j, "lost", e->lost);
	sw_json_int(j, "incomplete", e->incomplete);
	if (e->ended >= 0)	/* false: killed, or still running */
		sw_json_bool(j, "ended", e->ended);
	else
		sw_json_num(j, "ended", NAN);	/* the mark could not be read */
	json_gaps(j, a);
	sw_json_begin_obj(j, "model_attribution");
	sw_json_attrib(j, &a->model);
	sw_json_end_obj(j);
	json_sink_mass(j, a, a->L);
}

/* The run's segments: one per incarnation's stretch of the view. */
static void
json_segments(sw_json *j, const sw_view *v)
{
	sw_json_begin_arr(j, "segments");
	for (int64_t k = 0; k < v->nseg; k++) {
		sw_json_begin_obj(j, NULL);
		sw_json_uint(j, "inc", v->seg[k].inc);
		sw_json_int(j, "first_step", v->seg[k].first_step);
		sw_json_int(j, "last_step", v->seg[k].last_step);
		sw_json_int(j, "steps", v->seg[k].steps);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

/* The sender table: every sender's counters, the ranks not ended. */
static void
json_senders(sw_json *j, const sw_rep_senders *s)
{
	if (s->err[0]) {
		sw_json_str(j, "senders_error", s->err);
		return;
	}
	sw_json_begin_arr(j, "senders");
	for (int64_t k = 0; k < s->n; k++) {
		const uint64_t *v = s->t + k * SW_SENDER_FIELDS;
		sw_json_begin_obj(j, NULL);
		for (int f = 0; f < (int)s->nf; f++)	/* the fields the file has */
			if (f == SW_S_INC)
				sw_json_uint(j, sw_sender_field_names[f], v[f]);
			else
				sw_json_int(j, sw_sender_field_names[f], (int64_t)v[f]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_begin_arr(j, "ranks_not_ended");
	for (int64_t k = 0; k < s->nopen; k++) {
		sw_json_begin_obj(j, NULL);
		sw_json_uint(j, "inc", s->open[k].inc);
		sw_json_int(j, "rank", s->open[k].rank);
		sw_json_int(j, "senders", s->open[k].senders);
		sw_json_bool(j, "sent", s->open[k].sent);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

void
sw_report_json_run(sw_json *j, const sw_report *m)
{
	const sw_rep_run *e = &m->e;
	const sw_rep_opts *o = m->o;
	sw_json_int(j, "schema", 1);
	sw_json_str(j, "report", "run");
	json_run_common(j, e);
	sw_json_int(j, "layout_version", e->meta.version);
	sw_json_bool(j, "step_order", 1);
	sw_json_int(j, "rows_stored", e->rows);
	sw_json_int(j, "rows_superseded", e->superseded);
	json_segments(j, &m->run->view);
	json_senders(j, &m->snd);
	json_range(j, o);
	json_layers(j, &e->agg);
	if (o->per_head)
		json_heads(j, &e->agg, &e->rank, o->eps);
	if (o->series && m->have_ser)
		json_series(j, &m->ser);
}

void
sw_report_json_info(sw_json *j, const sw_run *run, const sw_rep_senders *snd)
{
	sw_rep_run e;

	memset(&e, 0, sizeof(e));
	sw_rep_take_meta(&e, run);
	sw_json_int(j, "schema", 1);
	sw_json_str(j, "report", "info");
	sw_json_str(j, "file", run->path);
	sw_json_str(j, "run", e.meta.run);
	sw_json_str(j, "model", e.meta.model);
	sw_json_int(j, "params", (int64_t)e.meta.params);
	sw_json_int(j, "layers", (int64_t)e.meta.layers);
	sw_json_int(j, "heads", (int64_t)e.meta.heads);
	sw_json_int(j, "sink", (int64_t)e.meta.sink);
	sw_json_str(j, "kind", e.kind);
	sw_json_int(j, "rows", (int64_t)e.meta.rows);
	sw_json_int(j, "keys", (int64_t)e.meta.keys);
	sw_json_str(j, "dtype", run->meta.dtype ? run->meta.dtype : "");
	sw_json_bool(j, "fixed_probe", e.meta.fixed_probe);
	sw_json_bool(j, "row_stats", e.meta.row_stats);
	sw_json_str(j, "split_form", run->meta.split_form ? run->meta.split_form : "");
	sw_json_int(j, "generation", (int64_t)e.meta.generation);
	sw_json_int(j, "layout_version", e.meta.version);
	sw_json_int(j, "rows_stored", e.rows);
	sw_json_int(j, "rows_superseded", e.superseded);
	sw_json_int(j, "steps_stored", e.steps_stored);
	sw_json_int(j, "lost", e.lost);
	sw_json_int(j, "incomplete", e.incomplete);
	if (e.ended >= 0)
		sw_json_bool(j, "ended", e.ended);
	else
		sw_json_num(j, "ended", NAN);
	json_segments(j, &run->view);
	sw_json_begin_arr(j, "resumes");
	for (int64_t k = 0; k < run->rows.nres; k++) {
		sw_json_begin_obj(j, NULL);
		sw_json_uint(j, "inc", run->rows.res_inc[k]);
		sw_json_int(j, "from", run->rows.res_step[k]);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	json_senders(j, snd);
}

static void
json_group_fig(sw_json *j, const char *key, const double *x)
{
	sw_json_begin_obj(j, key);
	sw_json_begin_obj(j, "path");
	sw_json_num(j, "dH", x[SW_G_PDH]);
	sw_json_num(j, "sink", x[SW_G_PSINK]);
	sw_json_num(j, "content", x[SW_G_PCONT]);
	sw_json_num(j, "sink_share", x[SW_G_PSSH]);
	sw_json_num(j, "content_share", x[SW_G_PCSH]);
	sw_json_end_obj(j);
	sw_json_begin_obj(j, "endpoint");
	sw_json_num(j, "dH", x[SW_G_EDH]);
	sw_json_num(j, "sink", x[SW_G_ESINK]);
	sw_json_num(j, "content", x[SW_G_ECONT]);
	sw_json_num(j, "sink_share", x[SW_G_ESSH]);
	sw_json_num(j, "content_share", x[SW_G_ECSH]);
	sw_json_end_obj(j);
	sw_json_end_obj(j);
}

/* A group's values of the group keys, each under its name; the numbers
 * as numbers. */
static void
json_group_keys(sw_json *j, const sw_rep_run *e, const enum sw_group_key *keys, int nk)
{
	for (int k = 0; k < nk; k++) {
		const char *name = sw_group_key_names[keys[k]];
		char v[1100];
		switch (keys[k]) {
		case SW_GK_PARAMS: sw_json_int(j, name, (int64_t)e->meta.params); break;
		case SW_GK_KEYS: sw_json_int(j, name, e->meta.keys); break;
		case SW_GK_LAYERS: sw_json_int(j, name, e->meta.layers); break;
		case SW_GK_HEADS: sw_json_int(j, name, e->meta.heads); break;
		case SW_GK_GENERATION: sw_json_int(j, name, e->meta.generation); break;
		default:
			sw_rep_group_value(e, keys[k], v, sizeof(v));
			sw_json_str(j, name, v);
		}
	}
}

static void
json_others(sw_json *j, const char *key, const sw_rep_list *l, int excluded)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < l->n; i++) {
		const sw_rep_run *e = &l->v[i];
		if (excluded && !e->reason[0])
			continue;
		sw_json_begin_obj(j, NULL);
		sw_json_str(j, "file", e->file);
		if (excluded && e->meta.layers) {
			sw_json_str(j, "run", e->meta.run);
			sw_json_str(j, "model", e->meta.model);
			sw_json_int(j, "params", (int64_t)e->meta.params);
		}
		sw_json_str(j, "reason", e->reason);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
}

void
sw_report_json_many(sw_json *j, const sw_report_many *m, const sw_rep_opts *o)
{
	sw_rep_run *const *cmp = m->cmp;
	const sw_rep_group *g = m->g;
	size_t n = m->n, ng = m->ng;
	sw_json_begin_obj(j, NULL);
	sw_json_int(j, "schema", 1);
	sw_json_str(j, "report", "runs");
	sw_json_str(j, "sorted_by", "params");
	enum sw_group_key keys[SW_GK__N];
	int nk = sw_rep_group_keys(o, keys);
	sw_json_begin_arr(j, "group_by");
	for (int k = 0; k < nk; k++)
		sw_json_str(j, NULL, sw_group_key_names[keys[k]]);
	sw_json_end_arr(j);
	json_range(j, o);
	sw_json_begin_arr(j, "runs");
	for (size_t i = 0; i < n; i++) {
		sw_json_begin_obj(j, NULL);
		json_run_common(j, cmp[i]);
		if (o->per_layer)
			json_layers(j, &cmp[i]->agg);
		if (o->per_head)
			json_heads(j, &cmp[i]->agg, &cmp[i]->rank, o->eps);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	sw_json_str(j, "spread", SW_REP_SPREAD);
	sw_json_begin_arr(j, "groups");
	for (size_t k = 0; k < ng; k++) {
		sw_json_begin_obj(j, NULL);
		json_group_keys(j, cmp[g[k].member[0]], keys, nk);
		sw_json_int(j, "runs", (int64_t)g[k].n);
		sw_json_begin_arr(j, "files");
		for (size_t i = 0; i < g[k].n; i++)
			sw_json_str(j, NULL, cmp[g[k].member[i]]->file);
		sw_json_end_arr(j);
		json_group_fig(j, "mean", g[k].mean);
		json_group_fig(j, "sd", g[k].sd);
		sw_json_end_obj(j);
	}
	sw_json_end_arr(j);
	json_others(j, "excluded", &m->runs, 1);
	json_others(j, "skipped", &m->skipped, 0);
	sw_json_end_obj(j);
}

