/*
 * report_csv.c: the report model (swreport.h) as the CSV of `sinkwatch
 * report --format csv`: one run file (sw_report_csv_run) or several
 * (sw_report_csv_many), on stdout.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/swreport.h"

/* The CSV columns, in order (sinkwatch(1) documents each). */
#define CSV_COLS(X) X(scope) X(file) X(run) X(model) X(params) X(layers) X(heads) \
	X(layer) X(head) X(first_step) X(last_step) X(steps_used) X(intervals) \
	X(intervals_incomplete) X(intervals_valued) X(form) \
	X(path_dH) X(path_sink) X(path_content) X(path_sink_share) X(path_content_share) \
	X(endpoint_dH) X(endpoint_sink) X(endpoint_content) X(endpoint_sink_share) \
	X(endpoint_content_share) X(lost) X(incomplete) \
	X(sink_mass_first) X(sink_mass_last) X(entropy_first) X(entropy_last) \
	X(content_entropy_first) X(content_entropy_last) X(class) X(rank_entropy) \
	X(rank_content) X(runs) X(group) \
	X(sd_path_dH) X(sd_path_sink) X(sd_path_content) X(sd_path_sink_share) \
	X(sd_path_content_share) X(sd_endpoint_dH) X(sd_endpoint_sink) \
	X(sd_endpoint_content) X(sd_endpoint_sink_share) X(sd_endpoint_content_share) \
	X(reason)
enum {
#define X(n) C_##n,
	CSV_COLS(X)
#undef X
	C__N
};
static const char *const csv_names[C__N] = {
#define X(n) #n,
	CSV_COLS(X)
#undef X
};

/* One CSV line: cells that do not apply stay empty. */
struct csv_line {
	char *cell[C__N];
};

static void
csv_set(struct csv_line *c, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
csv_set(struct csv_line *c, int col, const char *fmt, ...)
{
	va_list ap, aq;
	va_start(ap, fmt);
	va_copy(aq, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
	if (s)
		vsnprintf(s, (size_t)n + 1, fmt, aq);
	va_end(aq);
	va_end(ap);
	free(c->cell[col]);
	c->cell[col] = s;	/* NULL (an empty cell) only out of memory */
}

/* A number: %.17g (round-trips), "nan" for NaN. */
static void
csv_num(struct csv_line *c, int col, double v)
{
	if (isnan(v))
		csv_set(c, col, "nan");
	else
		csv_set(c, col, "%.17g", v);
}

static void
csv_put(FILE *f, const char *s)
{
	if (!s || !strpbrk(s, ",\"\r\n")) {
		fputs(s ? s : "", f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Writes the line and empties it. */
static void
csv_emit(struct csv_line *c)
{
	for (int k = 0; k < C__N; k++) {
		if (k)
			putchar(',');
		csv_put(stdout, c->cell[k]);
		free(c->cell[k]);
		c->cell[k] = NULL;
	}
	putchar('\n');
}

static void
csv_header(void)
{
	for (int k = 0; k < C__N; k++)
		printf("%s%s", k ? "," : "", csv_names[k]);
	putchar('\n');
}

static void
csv_attrib(struct csv_line *c, const sw_attrib *a)
{
	csv_set(c, C_intervals_valued, "%lld", (long long)a->intervals);
	csv_num(c, C_path_dH, a->path.dH);
	csv_num(c, C_path_sink, a->path.sink);
	csv_num(c, C_path_content, a->path.content);
	csv_num(c, C_path_sink_share, a->path_sink_share);
	csv_num(c, C_path_content_share, a->path_content_share);
	csv_num(c, C_endpoint_dH, a->endpoint.dH);
	csv_num(c, C_endpoint_sink, a->endpoint.sink);
	csv_num(c, C_endpoint_content, a->endpoint.content);
	csv_num(c, C_endpoint_sink_share, a->end_sink_share);
	csv_num(c, C_endpoint_content_share, a->end_content_share);
}

/* Run and layer lines: the mean sink mass over the heads at both ends. */
static void
csv_sink_mass(struct csv_line *c, const sw_agg *a, size_t l)
{
	double f, la;
	sw_rep_sink_mass(a, l, &f, &la);
	csv_num(c, C_sink_mass_first, f);
	csv_num(c, C_sink_mass_last, la);
}

/* The cells naming a run (file, run, model, params, shape). */
static void
csv_ident(struct csv_line *c, const char *scope, const sw_rep_run *e)
{
	csv_set(c, C_scope, "%s", scope);
	csv_set(c, C_file, "%s", e->file);
	if (!e->meta.layers)
		return;		/* never opened */
	csv_set(c, C_run, "%s", e->meta.run);
	csv_set(c, C_model, "%s", e->meta.model);
	csv_set(c, C_params, "%llu", (unsigned long long)e->meta.params);
	csv_set(c, C_layers, "%u", e->meta.layers);
	csv_set(c, C_heads, "%u", e->meta.heads);
}

/* A compared run: its line, its layers (all, or none), its heads. */
static void
csv_run(const sw_rep_run *e, int layers, int heads, double eps)
{
	const sw_agg *a = &e->agg;
	struct csv_line c = { { 0 } };
	csv_ident(&c, "run", e);
	csv_set(&c, C_first_step, "%lld", (long long)a->first_step);
	csv_set(&c, C_last_step, "%lld", (long long)a->last_step);
	csv_set(&c, C_steps_used, "%lld", (long long)a->steps);
	csv_set(&c, C_intervals, "%lld", (long long)a->intervals);
	csv_set(&c, C_intervals_incomplete, "%lld", (long long)a->intervals_incomplete);
	csv_set(&c, C_form, "%s", a->form);
	csv_attrib(&c, &a->model);
	csv_sink_mass(&c, a, a->L);
	csv_set(&c, C_lost, "%lld", (long long)e->lost);
	csv_set(&c, C_incomplete, "%lld", (long long)e->incomplete);
	csv_emit(&c);
	for (size_t l = 0; layers && l < a->L; l++) {
		csv_ident(&c, "layer", e);
		csv_set(&c, C_layer, "%zu", l);
		csv_set(&c, C_form, "%s", a->form);
		csv_attrib(&c, &a->layer[l]);
		csv_sink_mass(&c, a, l);
		csv_emit(&c);
	}
	for (size_t i = 0; heads && i < a->LH; i++) {
		const sw_head_at *f = &a->first[i], *la = &a->last[i];
		csv_ident(&c, "head", e);
		csv_set(&c, C_layer, "%zu", i / a->H);
		csv_set(&c, C_head, "%zu", i % a->H);
		csv_set(&c, C_form, "%s", a->form);
		csv_attrib(&c, &a->head[i]);
		csv_num(&c, C_sink_mass_first, f->s);
		csv_num(&c, C_sink_mass_last, la->s);
		csv_num(&c, C_entropy_first, f->H);
		csv_num(&c, C_entropy_last, la->H);
		csv_num(&c, C_content_entropy_first, f->Hc);
		csv_num(&c, C_content_entropy_last, la->Hc);
		csv_set(&c, C_class, "%s", sw_head_class_name(sw_head_classify(&a->head[i], eps)));
		csv_num(&c, C_rank_entropy, e->rank.rank_entropy[i]);
		csv_num(&c, C_rank_content, e->rank.rank_content[i]);
		csv_emit(&c);
	}
}

/* A group line's keys: model and params in their cells when they are group
 * keys, and every key as key=value, ';'-separated, in the group cell. */
static void
csv_group_keys(struct csv_line *c, const sw_rep_run *e, const sw_rep_opts *o)
{
	enum sw_group_key keys[SW_GK__N];
	int nk = sw_rep_group_keys(o, keys);
	char v[1100], *all = NULL;
	size_t len = 0;
	for (int k = 0; k < nk; k++) {
		if (keys[k] == SW_GK_MODEL)
			csv_set(c, C_model, "%s", e->meta.model);
		else if (keys[k] == SW_GK_PARAMS)
			csv_set(c, C_params, "%llu", (unsigned long long)e->meta.params);
		sw_rep_group_value(e, keys[k], v, sizeof(v));
		size_t add = strlen(sw_group_key_names[keys[k]]) + strlen(v) + 3;
		char *p = realloc(all, len + add);
		if (!p)
			break;
		all = p;
		len += (size_t)snprintf(all + len, add, "%s%s=%s", k ? ";" : "",
		    sw_group_key_names[keys[k]], v);
	}
	csv_set(c, C_group, "%s", all ? all : "");
	free(all);
}

/* One run file: the header, its line, its layers, its heads as asked. */
void
sw_report_csv_run(const sw_report *m)
{
	csv_header();
	csv_run(&m->e, 1, m->o->per_head, m->o->eps);
}

/* Several runs: a line each, their layers and heads as asked, the groups, the
 * runs not compared and the files skipped. */
void
sw_report_csv_many(const sw_report_many *m, const sw_rep_opts *o)
{
	sw_rep_run *const *cmp = m->cmp;
	const sw_rep_group *g = m->g;
	const sw_rep_list *runs = &m->runs, *skipped = &m->skipped;
	size_t n = m->n, ng = m->ng;
	static const int mcol[SW_G_N] = { C_path_dH, C_path_sink, C_path_content,
	    C_path_sink_share, C_path_content_share, C_endpoint_dH, C_endpoint_sink,
	    C_endpoint_content, C_endpoint_sink_share, C_endpoint_content_share };
	static const int scol[SW_G_N] = { C_sd_path_dH, C_sd_path_sink, C_sd_path_content,
	    C_sd_path_sink_share, C_sd_path_content_share, C_sd_endpoint_dH,
	    C_sd_endpoint_sink, C_sd_endpoint_content, C_sd_endpoint_sink_share,
	    C_sd_endpoint_content_share };
	struct csv_line c = { { 0 } };
	csv_header();
	for (size_t i = 0; i < n; i++)
		csv_run(cmp[i], o->per_layer, o->per_head, o->eps);
	for (size_t k = 0; k < ng; k++) {
		csv_set(&c, C_scope, "group");
		csv_group_keys(&c, cmp[g[k].member[0]], o);
		csv_set(&c, C_runs, "%zu", g[k].n);
		for (int f = 0; f < SW_G_N; f++) {
			csv_num(&c, mcol[f], g[k].mean[f]);
			csv_num(&c, scol[f], g[k].sd[f]);
		}
		csv_emit(&c);
	}
	for (size_t i = 0; i < runs->n; i++) {
		if (!runs->v[i].reason[0])
			continue;
		csv_ident(&c, "excluded", &runs->v[i]);
		csv_set(&c, C_reason, "%s", runs->v[i].reason);
		csv_emit(&c);
	}
	for (size_t i = 0; i < skipped->n; i++) {
		csv_set(&c, C_scope, "skipped");
		csv_set(&c, C_file, "%s", skipped->v[i].file);
		csv_set(&c, C_reason, "%s", skipped->v[i].reason);
		csv_emit(&c);
	}
}
