/*
 * cmd_audit.c: `sinkwatch audit`, the convention audit of a run file (issue
 * 13): how much keeping or dropping the sink changes a conclusion about
 * heads (METRICS.md §5). Over a range of the run's view (storage/LAYOUT.md,
 * "the view": each stored step's winning row, in step order):
 *
 * - the flip rate of each layer at each step, recomputed from the stored
 *   pair matrices (cosine_keep/drop, js_keep/drop) and head entropies
 *   (entropy, content_entropy) with the one implementation (swm_flip_rate),
 *   beside the stored flip_rate, and its mean over the range;
 * - head clustering in the manner of Clark et al. (2019): per layer,
 *   average linkage on Jensen-Shannon distances averaged over the range,
 *   cut into k clusters, under keep and under drop, and the adjusted Rand
 *   index between the two.
 *
 * - across all heads of the model, the same clustering and index on the
 *   cross-layer JS matrices (xpair_js_keep/drop [T, L*H, L*H]) when the
 *   file has them (sinkwatchd --cross-layer-pairs 1), and the §5 JS flip
 *   rate of the range's mean matrices over every anchor and pair of heads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/swm.h"
#include "storage/runfile.h"
#include "tools/analyze.h"
#include "report/json.h"
#include "report/runagg.h"
#include "tools/tools.h"

/* Stored and recomputed flip rates agree within this (the same doubles, the same function). */
#define FLIP_TOL 1e-12

enum { DIST_SQRT, DIST_JSD };

struct audit_opts {
	const char *path;
	long from, to, last, k, model_k;
	int has_from, has_to, has_last, json, dist;
};

/*
 * Layer-step status: whole; a head missing (no flip rate, as the daemon
 * stores none); NaN in the pair matrices with every head there (not
 * computed, pair_metrics 0, or two heads without a common row: flip rates
 * as the daemon takes them, no clustering).
 */
enum { LS_WHOLE, LS_MISSING, LS_NOPAIRS };
static const char *const ls_names[] = { "whole", "missing_heads", "nan_pairs" };

/* One layer's sums over the range. */
struct layer_acc {
	double flip[3];
	int64_t nflip[3];
	int64_t whole, missing, nopairs;
	double *js[2];		/* [H * H] sums of js_keep, js_drop over whole steps */
};

/* One step's stored values, as read. */
struct step_buf {
	double *flip;		/* [L * 3] */
	double *m[4];		/* cosine_keep, cosine_drop, js_keep, js_drop: [L * H * H] */
	double *ent, *entc;	/* entropy, content_entropy: [L * H] */
};

static const char *const pair_names[4] = { "cosine_keep", "cosine_drop", "js_keep", "js_drop" };

static void
usage(FILE *f)
{
	fputs("usage: sinkwatch audit RUN.h5 [--from STEP --to STEP | --last N] [--k K]\n"
	    "        [--model-k K] [--distance sqrt|jsd] [--format text|json]\n", f);
}

static int
parse(int argc, char **argv, struct audit_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->k = o->model_k = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (a[0] != '-') {
			if (o->path)
				return sw_tool_fail("audit", "one run file expected");
			o->path = a;
			continue;
		}
		if (!v)
			return sw_tool_fail("audit", "%s needs a value (or is unknown)", a);
		i++;
		if (!strcmp(a, "--format")) {
			if (!strcmp(v, "json"))
				o->json = 1;
			else if (strcmp(v, "text"))
				return sw_tool_fail("audit", "--format: '%s' is not text or json", v);
		} else if (!strcmp(a, "--distance")) {
			if (!strcmp(v, "sqrt"))
				o->dist = DIST_SQRT;
			else if (!strcmp(v, "jsd"))
				o->dist = DIST_JSD;
			else
				return sw_tool_fail("audit", "--distance: '%s' is not sqrt or jsd", v);
		} else if (!strcmp(a, "--from")) {
			if (sw_parse_long(v, &o->from))
				return sw_tool_fail("audit", "--from: '%s' is not a step", v);
			o->has_from = 1;
		} else if (!strcmp(a, "--to")) {
			if (sw_parse_long(v, &o->to))
				return sw_tool_fail("audit", "--to: '%s' is not a step", v);
			o->has_to = 1;
		} else if (!strcmp(a, "--last")) {
			if (sw_parse_long(v, &o->last) || o->last < 1)
				return sw_tool_fail("audit", "--last: '%s' is not a positive integer", v);
			o->has_last = 1;
		} else if (!strcmp(a, "--k")) {
			if (sw_parse_long(v, &o->k) || o->k < 1)
				return sw_tool_fail("audit", "--k: '%s' is not a positive integer", v);
		} else if (!strcmp(a, "--model-k")) {
			if (sw_parse_long(v, &o->model_k) || o->model_k < 1)
				return sw_tool_fail("audit", "--model-k: '%s' is not a positive integer", v);
		} else
			return sw_tool_fail("audit", "unknown option '%s'", a);
	}
	if (!o->path)
		return sw_tool_fail("audit", "missing RUN.h5");
	if (o->has_last && (o->has_from || o->has_to))
		return sw_tool_fail("audit", "--last excludes --from and --to");
	if (o->has_from && o->has_to && o->from > o->to)
		return sw_tool_fail("audit", "--from %ld is after --to %ld", o->from, o->to);
	return 0;
}

static void
step_buf_free(struct step_buf *b)
{
	free(b->flip);
	for (int f = 0; f < 4; f++)
		free(b->m[f]);
	free(b->ent);
	free(b->entc);
}

static int
step_buf_alloc(struct step_buf *b, size_t L, size_t H)
{
	memset(b, 0, sizeof(*b));
	int ok = (b->flip = malloc(L * 3 * sizeof(double))) && (b->ent = malloc(L * H * sizeof(double))) &&
	    (b->entc = malloc(L * H * sizeof(double)));
	for (int f = 0; f < 4; f++)
		ok = ok && (b->m[f] = malloc(L * H * H * sizeof(double)));
	return ok ? 0 : -1;
}

/* Reads stored row t's flip rates, pair matrices and head entropies. */
static int
step_read(sw_reader *r, int64_t t, size_t L, size_t H, struct step_buf *b, char *err,
    size_t errlen)
{
	if (sw_reader_read(r, "flip_rate", t, t + 1, b->flip, L * 3, err, errlen) < 0 ||
	    sw_reader_read(r, "entropy", t, t + 1, b->ent, L * H, err, errlen) < 0 ||
	    sw_reader_read(r, "content_entropy", t, t + 1, b->entc, L * H, err, errlen) < 0)
		return -1;
	for (int f = 0; f < 4; f++)
		if (sw_reader_read(r, pair_names[f], t, t + 1, b->m[f], L * H * H, err, errlen) < 0)
			return -1;
	return 0;
}

static int
all_finite(const double *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

/* ---- average linkage and the adjusted Rand index ---------------------------- */

/*
 * Average linkage (UPGMA) of n items on the symmetric distance matrix
 * d[n * n], stopped when k clusters are left; labels[i] in 1..k, numbered
 * by the lowest item of each cluster. Every merge (n - 1 of them, also past
 * the cut) goes to merges[4 * m] as scipy's linkage numbers them: items 0 ..
 * n - 1, the cluster made by merge m is n + m; {a, b, height, size}, a < b.
 * Cluster distances are updated by Lance-Williams, (na d(a,c) + nb d(b,c)) /
 * (na + nb), the mean of the item distances. Ties: of the pairs at the
 * least distance, the one whose lowest items (first, then second) are
 * least. Returns 0, or -1 when out of memory.
 */
static int
average_linkage(const double *d, size_t n, size_t k, int *labels, double *merges)
{
	double *D = malloc(n * n * sizeof(double) + 1);
	size_t *size = malloc(n * sizeof(size_t) + 1), *id = malloc(n * sizeof(size_t) + 1);
	size_t *parent = malloc(n * sizeof(size_t) + 1);
	if (!D || !size || !id || !parent) {
		free(D);
		free(size);
		free(id);
		free(parent);
		return -1;
	}
	memcpy(D, d, n * n * sizeof(double));
	/* slot i holds the cluster whose lowest item is i (size 0: none) */
	for (size_t i = 0; i < n; i++) {
		size[i] = 1;
		id[i] = i;
		parent[i] = i;
	}
	for (size_t m = 0; m + 1 < n; m++) {
		size_t a = 0, b = 0;
		double best = INFINITY;
		for (size_t i = 0; i < n; i++)
			for (size_t j = i + 1; size[i] && j < n; j++)
				if (size[j] && (D[i * n + j] < best || b == 0)) {
					best = D[i * n + j];
					a = i;
					b = j;
				}
		if (m + k < n)	/* before the cut: b joins a */
			parent[b] = a;
		merges[4 * m] = (double)(id[a] < id[b] ? id[a] : id[b]);
		merges[4 * m + 1] = (double)(id[a] < id[b] ? id[b] : id[a]);
		merges[4 * m + 2] = best;
		merges[4 * m + 3] = (double)(size[a] + size[b]);
		for (size_t c = 0; c < n; c++) {
			if (!size[c] || c == a || c == b)
				continue;
			double v = ((double)size[a] * D[a * n + c] + (double)size[b] * D[b * n + c]) /
			    (double)(size[a] + size[b]);
			D[a * n + c] = D[c * n + a] = v;
		}
		size[a] += size[b];
		size[b] = 0;
		id[a] = n + m;
	}
	/* labels: roots (the lowest item of each cluster) numbered in order */
	int next = 0;
	for (size_t i = 0; i < n; i++) {
		size_t r = i;
		while (parent[r] != r)
			r = parent[r];
		labels[i] = r == i ? ++next : labels[r];
	}
	free(D);
	free(size);
	free(id);
	free(parent);
	return 0;
}

static double
comb2(double x)
{
	return x * (x - 1) / 2;
}

/*
 * Adjusted Rand index (Hubert and Arabie) of two labelings of n items with
 * labels 1..ka and 1..kb, from their contingency table. 1 when both are
 * trivial in the same way (one cluster each, or all singletons), as
 * scikit-learn's adjusted_rand_score says. NaN when out of memory.
 */
static double
adjusted_rand(const int *a, const int *b, size_t n, int ka, int kb)
{
	if (n < 2)
		return 1;
	double *t = calloc((size_t)ka * (size_t)kb, sizeof(double));
	double *ra = calloc((size_t)ka, sizeof(double)), *rb = calloc((size_t)kb, sizeof(double));
	double sij = 0, sa = 0, sb = 0;
	if (!t || !ra || !rb) {
		free(t);
		free(ra);
		free(rb);
		return NAN;
	}
	for (size_t i = 0; i < n; i++) {
		t[(size_t)(a[i] - 1) * (size_t)kb + (size_t)(b[i] - 1)] += 1;
		ra[a[i] - 1] += 1;
		rb[b[i] - 1] += 1;
	}
	for (size_t i = 0; i < (size_t)ka * (size_t)kb; i++)
		sij += comb2(t[i]);
	for (int i = 0; i < ka; i++)
		sa += comb2(ra[i]);
	for (int j = 0; j < kb; j++)
		sb += comb2(rb[j]);
	free(t);
	free(ra);
	free(rb);
	double expected = sa * sb / comb2((double)n), top = 0.5 * (sa + sb);
	if (top == expected)
		return 1;
	return (sij - expected) / (top - expected);
}

static int
max_label(const int *l, size_t n)
{
	int m = 0;
	for (size_t i = 0; i < n; i++)
		m = l[i] > m ? l[i] : m;
	return m;
}

/* ---- the audit ----------------------------------------------------------------- */

struct audit {
	const struct audit_opts *o;
	sw_runmeta meta;
	size_t L, H, k;
	int64_t k0, k1;			/* view range */
	struct layer_acc *acc;		/* [L] */
	int64_t steps_skipped;		/* steps with a layer not whole */
	int64_t disagree;		/* stored flip rates that differ from the recomputed */
	sw_json j;
	int *labels[2];			/* per layer clusterings, scratch */
	double *merges[2];
	double *dist;
	/* across all N = L * H heads, files with cross-layer pairs */
	int cross;
	size_t N, mk;			/* mk: clusters of the model's heads */
	double *xsum[2];		/* [N * N] sums of xpair_js_keep/drop over whole steps */
	double *xbuf[2];		/* [N * N] one step, as read */
	int64_t xwhole, xpart;		/* steps with every head / with NaN somewhere */
};

static int
flip_agree(double a, double b)
{
	return (isnan(a) && isnan(b)) || fabs(a - b) <= FLIP_TOL;
}

/*
 * Layer l of one step: its status, the recomputed flip rates and the sums
 * for the range (the JS matrices of whole layer-steps only).
 */
static int
layer_step(struct audit *au, const struct step_buf *b, size_t l, double flip[3],
    uint64_t comps[3], double *scratch)
{
	size_t H = au->H, HH = H * H;
	struct layer_acc *a = &au->acc[l];
	int heads = all_finite(b->ent + l * H, H) && all_finite(b->entc + l * H, H);
	int pairs = 1;
	for (int f = 0; f < 4; f++)
		pairs = pairs && all_finite(b->m[f] + l * HH, HH);
	int st = !heads ? LS_MISSING : !pairs ? LS_NOPAIRS : LS_WHOLE;
	flip[0] = flip[1] = flip[2] = NAN;
	comps[0] = comps[1] = comps[2] = 0;
	/*
	 * With every head there, what the daemon computes (swm_layer_finish):
	 * comparisons with a NaN pair value left out, none at all when the
	 * pair matrices were not computed. With a head missing, nothing.
	 */
	if (heads) {
		flip[0] = swm_flip_rate(b->m[0] + l * HH, b->m[1] + l * HH, H, &comps[0]);
		flip[1] = swm_flip_rate(b->m[2] + l * HH, b->m[3] + l * HH, H, &comps[1]);
		flip[2] = swm_flip_rate_entropy(b->ent + l * H, b->entc + l * H, H, scratch, &comps[2]);
	}
	if (st == LS_WHOLE) {
		for (size_t i = 0; i < HH; i++) {
			a->js[0][i] += b->m[2][l * HH + i];
			a->js[1][i] += b->m[3][l * HH + i];
		}
		a->whole++;
	} else if (st == LS_MISSING)
		a->missing++;
	else
		a->nopairs++;
	for (int m = 0; m < 3; m++)
		if (isfinite(flip[m])) {
			a->flip[m] += flip[m];
			a->nflip[m]++;
		}
	return st;
}

/* Audits one view step (stored row t) and prints its lines. */
static void
audit_step(struct audit *au, int64_t step, int64_t t, const struct step_buf *b,
    double *scratch)
{
	int any = 0;
	if (au->o->json) {
		sw_json_begin_obj(&au->j, NULL);
		sw_json_int(&au->j, "step", step);
		sw_json_int(&au->j, "row", t);
		sw_json_begin_arr(&au->j, "layers");
	}
	for (size_t l = 0; l < au->L; l++) {
		double f[3];
		uint64_t c[3];
		int st = layer_step(au, b, l, f, c, scratch);
		int agree = 1;
		for (int m = 0; m < 3; m++)
			agree = agree && flip_agree(f[m], b->flip[l * 3 + m]);
		/* a layer missing a head stores NaN flips, and is not recomputed */
		au->disagree += st != LS_MISSING && !agree;
		any |= st != LS_WHOLE;
		if (au->o->json) {
			sw_json_begin_obj(&au->j, NULL);
			sw_json_int(&au->j, "layer", (int64_t)l);
			sw_json_str(&au->j, "status", ls_names[st]);
			sw_json_begin_arr(&au->j, "flip");
			for (int m = 0; m < 3; m++)
				sw_json_num(&au->j, NULL, f[m]);
			sw_json_end_arr(&au->j);
			sw_json_begin_arr(&au->j, "flip_stored");
			for (int m = 0; m < 3; m++)
				sw_json_num(&au->j, NULL, b->flip[l * 3 + m]);
			sw_json_end_arr(&au->j);
			sw_json_begin_arr(&au->j, "comparisons");
			for (int m = 0; m < 3; m++)
				sw_json_int(&au->j, NULL, (int64_t)c[m]);
			sw_json_end_arr(&au->j);
			sw_json_bool(&au->j, "agree", agree);
			sw_json_end_obj(&au->j);
		} else {
			printf("%10lld %6zu %10.6f %10.6f %10.6f  %s%s\n", (long long)step, l, f[0], f[1],
			    f[2], agree ? "=" : "DIFFERS", st == LS_WHOLE ? "" :
			    st == LS_MISSING ? "  skipped: heads missing" :
			    "  not clustered: NaN in the pair matrices");
		}
	}
	au->steps_skipped += any;
	if (au->o->json) {
		sw_json_end_arr(&au->j);
		sw_json_end_obj(&au->j);
	}
}

/*
 * The distance matrix of layer l under convention c (0 keep, 1 drop): the
 * mean of the stored JS divergence over the range's whole steps, or its
 * square root (the root mean square over rows and steps of the
 * Jensen-Shannon distance, a metric).
 */
static void
layer_distance(const struct audit *au, size_t l, int c, double *d)
{
	const struct layer_acc *a = &au->acc[l];
	size_t HH = au->H * au->H;
	for (size_t i = 0; i < HH; i++) {
		double v = a->js[c][i] / (double)a->whole;
		v = v > 0 ? v : 0;	/* the diagonal is 0; JS is never negative */
		d[i] = au->o->dist == DIST_SQRT ? sqrt(v) : v;
	}
}

static void
json_merges(sw_json *j, const char *key, const double *m, size_t n)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i + 1 < n; i++) {
		sw_json_begin_arr(j, NULL);
		sw_json_int(j, NULL, (int64_t)m[4 * i]);
		sw_json_int(j, NULL, (int64_t)m[4 * i + 1]);
		sw_json_num(j, NULL, m[4 * i + 2]);
		sw_json_int(j, NULL, (int64_t)m[4 * i + 3]);
		sw_json_end_arr(j);
	}
	sw_json_end_arr(j);
}

static void
json_labels(sw_json *j, const char *key, const int *lab, size_t n)
{
	sw_json_begin_arr(j, key);
	for (size_t i = 0; i < n; i++)
		sw_json_int(j, NULL, lab[i]);
	sw_json_end_arr(j);
}

static void
text_labels(const int *lab, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? " " : "", lab[i]);
}

/* Clusters every layer under keep and drop; prints them. 0, or 2 when out of memory. */
static int
audit_clusters(struct audit *au, double *mean_ari)
{
	size_t H = au->H;
	double sum = 0;
	int64_t n = 0;
	if (au->o->json)
		sw_json_begin_arr(&au->j, "layers");
	for (size_t l = 0; l < au->L; l++) {
		const struct layer_acc *a = &au->acc[l];
		double ari = NAN;
		if (a->whole > 0) {
			for (int c = 0; c < 2; c++) {
				layer_distance(au, l, c, au->dist);
				if (average_linkage(au->dist, H, au->k, au->labels[c], au->merges[c]) != 0)
					return sw_tool_fail("audit", "out of memory");
			}
			ari = adjusted_rand(au->labels[0], au->labels[1], H,
			    max_label(au->labels[0], H), max_label(au->labels[1], H));
			sum += ari;
			n++;
		}
		if (au->o->json) {
			sw_json_begin_obj(&au->j, NULL);
			sw_json_int(&au->j, "layer", (int64_t)l);
			sw_json_int(&au->j, "steps", a->whole);
			if (a->whole > 0) {
				const char *names[2] = { "keep", "drop" };
				for (int c = 0; c < 2; c++) {
					sw_json_begin_obj(&au->j, names[c]);
					json_labels(&au->j, "labels", au->labels[c], H);
					json_merges(&au->j, "merges", au->merges[c], H);
					sw_json_end_obj(&au->j);
				}
			}
			sw_json_num(&au->j, "ari", ari);
			sw_json_end_obj(&au->j);
		} else {
			printf("%6zu %6lld  ", l, (long long)a->whole);
			if (a->whole > 0) {
				printf("keep ");
				text_labels(au->labels[0], H);
				printf("  drop ");
				text_labels(au->labels[1], H);
				printf("  ARI %.6f\n", ari);
			} else
				printf("no whole step in the range\n");
		}
	}
	if (au->o->json)
		sw_json_end_arr(&au->j);
	*mean_ari = n ? sum / (double)n : NAN;
	return 0;
}

/* Mean flip rates per layer and of the model (every finite layer-step value). */
static void
audit_means(struct audit *au)
{
	static const char *const m_names[3] = { "cosine", "js", "entropy" };
	double tot[3] = { 0, 0, 0 };
	int64_t cnt[3] = { 0, 0, 0 };
	if (au->o->json)
		sw_json_begin_arr(&au->j, "layers");
	else
		printf("\nmean flip rate over the range (values: the layer-steps averaged, per metric)\n"
		    "%6s %10s %10s %10s %16s\n", "layer", "cosine", "js", "entropy", "values c/j/e");
	for (size_t l = 0; l <= au->L; l++) {
		double mean[3];
		int64_t nn[3];
		for (int m = 0; m < 3; m++) {
			nn[m] = l < au->L ? au->acc[l].nflip[m] : cnt[m];
			double s = l < au->L ? au->acc[l].flip[m] : tot[m];
			mean[m] = nn[m] ? s / (double)nn[m] : NAN;
			if (l < au->L) {
				tot[m] += s;
				cnt[m] += nn[m];
			}
		}
		if (l == au->L && au->o->json) {
			sw_json_end_arr(&au->j);
			sw_json_begin_obj(&au->j, "model");
		} else if (au->o->json) {
			sw_json_begin_obj(&au->j, NULL);
			sw_json_int(&au->j, "layer", (int64_t)l);
		}
		if (au->o->json) {
			for (int m = 0; m < 3; m++)
				sw_json_num(&au->j, m_names[m], mean[m]);
			sw_json_begin_arr(&au->j, "values");
			for (int m = 0; m < 3; m++)
				sw_json_int(&au->j, NULL, nn[m]);
			sw_json_end_arr(&au->j);
			sw_json_end_obj(&au->j);
		} else {
			char lab[32], cnts[64];
			if (l < au->L)
				snprintf(lab, sizeof(lab), "%zu", l);
			else
				snprintf(lab, sizeof(lab), "model");
			snprintf(cnts, sizeof(cnts), "%lld/%lld/%lld", (long long)nn[0], (long long)nn[1],
			    (long long)nn[2]);
			printf("%6s %10.6f %10.6f %10.6f %16s\n", lab, mean[0], mean[1], mean[2], cnts);
		}
	}
}

static const char *const cross_reason =
    "the run file was made without cross-layer pairs: it holds head-pair distances "
    "within a layer only (js_keep, js_drop [T, L, H, H]); sinkwatchd --cross-layer-pairs 1 "
    "stores them between every two heads of the model in the run files it makes";

/* One stored step's cross-layer matrices into the sums (steps with every head). */
static int
cross_step(struct audit *au, sw_reader *r, int64_t t, char *err, size_t errlen)
{
	size_t NN = au->N * au->N;
	if (sw_reader_read(r, "xpair_js_keep", t, t + 1, au->xbuf[0], NN, err, errlen) < 0 ||
	    sw_reader_read(r, "xpair_js_drop", t, t + 1, au->xbuf[1], NN, err, errlen) < 0)
		return -1;
	if (!all_finite(au->xbuf[0], NN) || !all_finite(au->xbuf[1], NN)) {
		au->xpart++;
		return 0;
	}
	for (int c = 0; c < 2; c++)
		for (size_t i = 0; i < NN; i++)
			au->xsum[c][i] += au->xbuf[c][i];
	au->xwhole++;
	return 0;
}

/*
 * The model's heads clustered under keep and drop on the range's mean
 * cross-layer JS (as layer_distance), their index, and the §5 JS flip rate
 * of the two mean matrices. 0, or 2 when out of memory.
 */
static int
audit_cross(struct audit *au)
{
	size_t N = au->N, NN = N * N;
	const char *names[2] = { "keep", "drop" };
	int *lab[2] = { NULL, NULL };
	double *mg[2] = { NULL, NULL }, *mean[2] = { NULL, NULL };
	double ari = NAN, flip = NAN;
	uint64_t comps = 0;
	int rc = 2;
	if (au->o->json) {
		sw_json_begin_obj(&au->j, "cross_layer");
		sw_json_bool(&au->j, "available", au->cross);
		sw_json_int(&au->j, "bytes_per_step", (int64_t)(NN * 8 * 2));
		sw_json_int(&au->j, "bytes_per_step_within_layers",
		    (int64_t)(au->L * au->H * au->H * 8 * 2));
	}
	if (!au->cross) {
		if (au->o->json) {
			sw_json_str(&au->j, "reason", cross_reason);
			sw_json_end_obj(&au->j);
		} else
			printf("\nclustering of all heads across layers: not available: %s (js_keep "
			    "and js_drop across layers take %zu bytes a step, %zu times the %zu "
			    "within layers)\n", cross_reason, NN * 16, au->L, au->L * au->H * au->H * 16);
		return 0;
	}
	for (int c = 0; c < 2; c++)
		if (!(lab[c] = malloc(N * sizeof(int))) || !(mg[c] = malloc(4 * N * sizeof(double))) ||
		    !(mean[c] = malloc(NN * sizeof(double))))
			goto out;
	if (au->xwhole > 0) {
		for (int c = 0; c < 2; c++) {
			for (size_t i = 0; i < NN; i++) {
				double v = au->xsum[c][i] / (double)au->xwhole;
				v = v > 0 ? v : 0;
				mean[c][i] = au->o->dist == DIST_SQRT ? sqrt(v) : v;
			}
			if (average_linkage(mean[c], N, au->mk, lab[c], mg[c]) != 0)
				goto out;
		}
		ari = adjusted_rand(lab[0], lab[1], N, max_label(lab[0], N), max_label(lab[1], N));
		flip = swm_flip_rate(mean[0], mean[1], N, &comps);
	}
	if (au->o->json) {
		sw_json_int(&au->j, "heads", (int64_t)N);
		sw_json_int(&au->j, "k", (int64_t)au->mk);
		sw_json_int(&au->j, "steps", au->xwhole);
		sw_json_int(&au->j, "steps_skipped", au->xpart);
		if (au->xwhole > 0)
			for (int c = 0; c < 2; c++) {
				sw_json_begin_obj(&au->j, names[c]);
				json_labels(&au->j, "labels", lab[c], N);
				json_merges(&au->j, "merges", mg[c], N);
				sw_json_end_obj(&au->j);
			}
		sw_json_num(&au->j, "ari", ari);
		sw_json_num(&au->j, "flip_js", flip);
		sw_json_int(&au->j, "comparisons", (int64_t)comps);
		sw_json_end_obj(&au->j);
	} else {
		printf("\nclustering of all %zu heads across layers (xpair_js_*): %zu clusters, "
		    "%lld whole steps (%lld skipped: a head missing)\n", N, au->mk,
		    (long long)au->xwhole, (long long)au->xpart);
		if (au->xwhole > 0) {
			for (size_t l = 0; l < au->L; l++) {
				printf("%6zu  keep ", l);
				text_labels(lab[0] + l * au->H, au->H);
				printf("  drop ");
				text_labels(lab[1] + l * au->H, au->H);
				printf("\n");
			}
			printf("ARI %.6f  JS flip rate of the mean matrices %.6f (%llu comparisons)\n",
			    ari, flip, (unsigned long long)comps);
		} else
			printf("no step of the range has every head\n");
	}
	rc = 0;
out:
	for (int c = 0; c < 2; c++) {
		free(lab[c]);
		free(mg[c]);
		free(mean[c]);
	}
	return rc == 0 ? 0 : sw_tool_fail("audit", "out of memory");
}

/* The header: what was audited and how. */
static void
audit_header(struct audit *au, const sw_view *v)
{
	const sw_runmeta *m = &au->meta;
	int64_t first = v->step[au->k0], last = v->step[au->k1], n = au->k1 - au->k0 + 1;
	const char *dist = au->o->dist == DIST_SQRT ? "sqrt_jsd" : "jsd";
	if (!au->o->json) {
		printf("audit of run %s  model %s  %zu layers x %zu heads  steps %lld .. %lld (%lld "
		    "stored steps of %lld)\n", m->run, m->model[0] ? m->model : "-", au->L, au->H,
		    (long long)first, (long long)last, (long long)n, (long long)v->n);
		printf("\nflip rate (METRICS.md section 5), recomputed from the stored pair matrices and head "
		    "entropies; '=' where the stored flip_rate agrees (to %g)\n", FLIP_TOL);
		printf("%10s %6s %10s %10s %10s\n", "step", "layer", "cosine", "js", "entropy");
		return;
	}
	sw_json_begin_obj(&au->j, NULL);
	sw_json_int(&au->j, "schema", 1);
	sw_json_str(&au->j, "file", au->o->path);
	sw_json_str(&au->j, "run", m->run);
	sw_json_str(&au->j, "model", m->model);
	sw_json_uint(&au->j, "params", m->params);
	sw_json_int(&au->j, "layers", (int64_t)au->L);
	sw_json_int(&au->j, "heads", (int64_t)au->H);
	sw_json_int(&au->j, "layout_version", m->version);
	sw_json_begin_obj(&au->j, "range");
	sw_json_int(&au->j, "first_step", first);
	sw_json_int(&au->j, "last_step", last);
	sw_json_int(&au->j, "steps", n);
	sw_json_int(&au->j, "steps_stored", v->n);
	sw_json_end_obj(&au->j);
	sw_json_begin_arr(&au->j, "flip_fields");
	sw_json_str(&au->j, NULL, "cosine");
	sw_json_str(&au->j, NULL, "js");
	sw_json_str(&au->j, NULL, "entropy");
	sw_json_end_arr(&au->j);
	sw_json_num(&au->j, "flip_tolerance", FLIP_TOL);
	sw_json_str(&au->j, "distance", dist);
	sw_json_int(&au->j, "k", (int64_t)au->k);
	sw_json_begin_arr(&au->j, "steps");
}

/* Everything after the steps: skipped counts, means, clusterings, cross-layer. */
static int
audit_summary(struct audit *au)
{
	int64_t miss = 0, nop = 0;
	for (size_t l = 0; l < au->L; l++) {
		miss += au->acc[l].missing;
		nop += au->acc[l].nopairs;
	}
	double mean_ari = NAN;
	if (au->o->json) {
		sw_json_end_arr(&au->j);
		sw_json_bool(&au->j, "flips_agree", au->disagree == 0);
		sw_json_int(&au->j, "flips_disagree", au->disagree);
		sw_json_begin_obj(&au->j, "skipped");
		sw_json_int(&au->j, "steps", au->steps_skipped);
		sw_json_int(&au->j, "layer_steps_missing_heads", miss);
		sw_json_int(&au->j, "layer_steps_nan_pairs", nop);
		sw_json_end_obj(&au->j);
		sw_json_begin_obj(&au->j, "mean_flip");
	} else {
		printf("stored and recomputed flip rates %s (%lld differ)\n",
		    au->disagree ? "DISAGREE" : "agree", (long long)au->disagree);
		printf("skipped: %lld steps with a layer not whole (%lld layer-steps with heads "
		    "missing, %lld with NaN in the pair matrices)\n", (long long)au->steps_skipped,
		    (long long)miss, (long long)nop);
	}
	audit_means(au);
	if (au->o->json) {
		sw_json_end_obj(&au->j);
		sw_json_begin_obj(&au->j, "clustering");
		sw_json_str(&au->j, "method", "average");
		sw_json_str(&au->j, "distance", au->o->dist == DIST_SQRT ? "sqrt_jsd" : "jsd");
		sw_json_int(&au->j, "k", (int64_t)au->k);
	} else
		printf("\nhead clustering (Clark et al.): average linkage on %s over the range's "
		    "whole steps, %zu clusters, keep vs drop\n%6s %6s\n", au->o->dist == DIST_SQRT ?
		    "sqrt(mean JS divergence)" : "the mean JS divergence", au->k, "layer", "steps");
	if (audit_clusters(au, &mean_ari) != 0)
		return 2;
	if (au->o->json) {
		sw_json_num(&au->j, "mean_ari", mean_ari);
		sw_json_end_obj(&au->j);
	} else
		printf("mean ARI %.6f\n", mean_ari);
	if (audit_cross(au) != 0)
		return 2;
	if (au->o->json) {
		sw_json_end_obj(&au->j);
		sw_json_finish(&au->j);
	}
	return 0;
}

/* Allocates the audit's sums and scratch; 0 or -1. */
static int
audit_alloc(struct audit *au)
{
	size_t H = au->H, HH = H * H;
	if (!(au->acc = calloc(au->L, sizeof(*au->acc))))
		return -1;
	for (size_t l = 0; l < au->L; l++)
		for (int c = 0; c < 2; c++)
			if (!(au->acc[l].js[c] = calloc(HH, sizeof(double))))
				return -1;
	for (int c = 0; c < 2; c++)
		if (!(au->labels[c] = malloc(H * sizeof(int))) ||
		    !(au->merges[c] = malloc(4 * H * sizeof(double))))
			return -1;
	for (int c = 0; au->cross && c < 2; c++)
		if (!(au->xsum[c] = calloc(au->N * au->N, sizeof(double))) ||
		    !(au->xbuf[c] = malloc(au->N * au->N * sizeof(double))))
			return -1;
	return (au->dist = malloc(HH * sizeof(double))) ? 0 : -1;
}

static void
audit_free(struct audit *au)
{
	for (size_t l = 0; au->acc && l < au->L; l++)
		for (int c = 0; c < 2; c++)
			free(au->acc[l].js[c]);
	free(au->acc);
	for (int c = 0; c < 2; c++) {
		free(au->labels[c]);
		free(au->merges[c]);
		free(au->xsum[c]);
		free(au->xbuf[c]);
	}
	free(au->dist);
}

/* Reads and audits every step of the range, then the summary. */
static int
audit_run(struct audit *au, sw_reader *r, const sw_view *v)
{
	char err[512];
	struct step_buf b;
	double *scratch = malloc(2 * au->H * au->H * sizeof(double));
	int rc = 2;
	if (step_buf_alloc(&b, au->L, au->H) != 0 || !scratch || audit_alloc(au) != 0) {
		free(scratch);
		step_buf_free(&b);
		return sw_tool_fail("audit", "out of memory");
	}
	if (au->o->json)
		sw_json_init(&au->j, stdout);
	audit_header(au, v);
	for (int64_t kk = au->k0; kk <= au->k1; kk++) {
		if (step_read(r, v->row[kk], au->L, au->H, &b, err, sizeof(err)) != 0) {
			fflush(stdout);
			sw_tool_fail("audit", "%s: %s", au->o->path, err);
			goto out;
		}
		audit_step(au, v->step[kk], v->row[kk], &b, scratch);
		if (au->cross && cross_step(au, r, v->row[kk], err, sizeof(err)) != 0) {
			fflush(stdout);
			sw_tool_fail("audit", "%s: %s", au->o->path, err);
			goto out;
		}
	}
	rc = audit_summary(au);
	if (rc == 0 && au->disagree)
		rc = 1;		/* a stored flip rate that is not what the matrices say */
out:
	free(scratch);
	step_buf_free(&b);
	return rc;
}

int
sw_audit_main(int argc, char **argv)
{
	struct audit_opts o;
	int rc = parse(argc, argv, &o);
	if (rc)
		return rc;
	char err[512];
	struct audit au;
	sw_run *run = NULL;
	memset(&au, 0, sizeof(au));
	au.o = &o;
	/* the one run aggregation's open and range (report/runagg.h), as the report's */
	if (sw_run_open(o.path, &run, err, sizeof(err)) != 0)
		return sw_tool_fail("audit", "%s", err);
	au.meta = run->meta;
	au.L = run->L;
	au.H = run->H;
	rc = 2;
	if (o.k > (long)au.H) {
		sw_tool_fail("audit", "--k %ld: more clusters than the %zu heads", o.k, au.H);
		goto out;
	}
	au.k = o.k > 0 ? (size_t)o.k : au.H < 3 ? au.H : 3;
	au.N = au.L * au.H;
	au.cross = run->meta.cross_pairs;
	if (o.model_k > (long)au.N) {
		sw_tool_fail("audit", "--model-k %ld: more clusters than the %zu heads of the model",
		    o.model_k, au.N);
		goto out;
	}
	/* the model's heads: --model-k, else --k's value */
	au.mk = o.model_k > 0 ? (size_t)o.model_k : au.k;
	/* --last N: the last N stored steps, or all of them when there are fewer */
	sw_range_req q = { .has_from = o.has_from, .has_to = o.has_to, .from = o.from, .to = o.to,
	    .last = o.has_last ? (o.last < run->view.n ? o.last : run->view.n) : 0,
	    .has_last = o.has_last };
	sw_range g;
	if (sw_run_range(run, &q, &g, err, sizeof(err)) != 0) {
		sw_tool_fail("audit", "%s", err);
		goto out;
	}
	au.k0 = g.k0;
	au.k1 = g.k1;
	rc = audit_run(&au, run->reader, &run->view);
out:
	audit_free(&au);
	sw_run_close(&run);
	return rc;
}
