/*
 * cmd_analyze.c: `sinkwatch analyze FILE.h5:/dataset`, the two-channel metrics
 * of a saved attention tensor (METRICS.md §1, §2, §4, §5).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/swm.h"
#include "storage/runfile.h"
#include "storage/tensor.h"
#include "tools/analyze.h"
#include "report/json.h"

enum fmt { FMT_JSON, FMT_CSV, FMT_TEXT };

struct opts {
	char *file;
	const char *dset;
	int logits, causal;
	long sink;
	long pair_rows;		/* rows of each [queries, keys] block with pairs; 0: all */
	swm_opts m;
	enum fmt fmt;
};

/* Results of one layer. */
struct layer {
	double *mat[6];		/* cos_keep, cos_drop, js_keep, js_drop, pair_sink, pair_content */
	uint64_t *rows;
	double flip[3];		/* cosine, js, entropy */
	uint64_t comps[3];
};

static const char *const mat_names[6] = {
	"cosine_keep", "cosine_drop", "js_keep", "js_drop", "pair_sink", "pair_content"
};
static const char *const flip_names[3] = { "cosine", "js", "entropy" };

/*
 * Whether data analyzed without --causal looks causal, per mask form:
 * every row of every head is exactly zero past its last key (logits: -inf,
 * or so far below the row's largest that the softmax gives exactly 0), and
 * some row past the first key holds a value at its last key (so that a
 * tensor that is zero nearly everywhere does not count). Form 0: the
 * queries are the last Q positions, row q ends at key q + K - Q (what
 * --causal takes); form 1: they are the first Q, row q ends at key q.
 */
struct causal_look {
	int zero[2];
	int diag[2];
};

struct run {
	struct opts o;
	uint64_t shape[SW_TENSOR_MAXRANK];
	int rank;
	swm_dtype dtype;
	size_t L, B, H, Q, K;
	uint32_t *pick;		/* [npick] the rows of each block with pairs (§5) */
	size_t npick;
	swm_head_acc *acc;	/* [L * H] */
	swm_head *head;		/* [L * H] */
	struct layer *layer;	/* [L] */
	struct causal_look look;	/* without --causal: does the data look causal? */
};

static int
fail(const char *fmt, ...)
{
	va_list ap;
	fputs("sinkwatch analyze: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

int
sw_parse_long(const char *s, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end)
		return -1;
	*out = v;
	return 0;
}

int
sw_parse_double(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

static void
usage(FILE *f)
{
	fputs("usage: sinkwatch analyze FILE.h5:/dataset [--logits] [--sink K] [--causal]\n"
	    "                         [--delta D] [--tol T] [--pair-rows N]\n"
	    "                         [--format json|csv|text]\n", f);
}

/* Value of option `name` given as --name V or --name=V; NULL if not this option. */
static const char *
optval(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t len = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, len) != 0)
		return NULL;
	if (a[len] == '=')
		return a + len + 1;
	if (a[len] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
	const char *target = NULL, *v;
	int missing = 0;

	memset(o, 0, sizeof(*o));
	swm_opts_default(&o->m);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--logits")) {
			o->logits = 1;
		} else if (!strcmp(a, "--causal")) {
			o->causal = 1;
		} else if ((v = optval(argc, argv, &i, "--sink", &missing))) {
			if (sw_parse_long(v, &o->sink) || o->sink < 0)
				return fail("--sink: '%s' is not a non-negative integer", v);
		} else if ((v = optval(argc, argv, &i, "--pair-rows", &missing))) {
			if (sw_parse_long(v, &o->pair_rows) || o->pair_rows < 0 ||
			    o->pair_rows > UINT32_MAX)
				return fail("--pair-rows: '%s' is not a non-negative integer", v);
		} else if ((v = optval(argc, argv, &i, "--delta", &missing))) {
			if (sw_parse_double(v, &o->m.delta) || !(o->m.delta > 0 && o->m.delta < 1))
				return fail("--delta: '%s' is not a number in (0, 1)", v);
		} else if ((v = optval(argc, argv, &i, "--tol", &missing))) {
			if (sw_parse_double(v, &o->m.tol) || !(o->m.tol >= 0 && o->m.tol < 1))
				return fail("--tol: '%s' is not a number in [0, 1)", v);
		} else if ((v = optval(argc, argv, &i, "--format", &missing))) {
			if (!strcmp(v, "json"))
				o->fmt = FMT_JSON;
			else if (!strcmp(v, "csv"))
				o->fmt = FMT_CSV;
			else if (!strcmp(v, "text"))
				o->fmt = FMT_TEXT;
			else
				return fail("--format: '%s' is not one of json, csv, text", v);
		} else if (missing) {
			return fail("%s needs a value", a);
		} else if (a[0] == '-' && a[1] != '\0') {
			return fail("unknown option '%s' (sinkwatch analyze --help lists them)", a);
		} else if (target) {
			return fail("one FILE.h5:/dataset expected, got a second: '%s'", a);
		} else {
			target = a;
		}
	}
	if (!target)
		return fail("missing FILE.h5:/dataset (sinkwatch analyze --help)");
	/* the dataset path starts with '/': split at the last ":/" */
	const char *sep = NULL;
	for (const char *p = target; (p = strstr(p, ":/")); p++)
		sep = p;
	if (!sep || sep == target)
		return fail("'%s' is not FILE.h5:/dataset", target);
	o->file = strndup(target, (size_t)(sep - target));
	o->dset = sep + 1;
	if (!o->file)
		return fail("out of memory");
	return 0;
}

static const char *
dtype_long_name(swm_dtype dt)
{
	switch (dt) {
	case SWM_F16: return "float16";
	case SWM_BF16: return "bfloat16";
	case SWM_F64: return "float64";
	default: return "float32";
	}
}

static void
free_run(struct run *r)
{
	if (r->layer)
		for (size_t l = 0; l < r->L; l++) {
			for (int m = 0; m < 6; m++)
				free(r->layer[l].mat[m]);
			free(r->layer[l].rows);
		}
	free(r->layer);
	free(r->pick);
	free(r->acc);
	free(r->head);
	free(r->o.file);
}

static int
masked(double v, double floor_)
{
	return v == 0 || v == -INFINITY || v < floor_;
}

static void
look_causal(struct causal_look *c, const void *blk, swm_dtype dt, int logits, size_t Q,
    size_t K)
{
	for (size_t q = 0; q < Q && (c->zero[0] || c->zero[1]); q++) {
		size_t base = q * K;
		double floor_ = -INFINITY;
		if (logits) {
			double mx = -INFINITY;
			for (size_t k = 0; k < K; k++) {
				double v = swm_load(blk, dt, base + k);
				if (v > mx)
					mx = v;
			}
			floor_ = mx - 746;	/* exp() of anything below is 0 in double */
		}
		for (int f = 0; f < 2; f++) {
			long long last = f == 0 ? (long long)q + (long long)K - (long long)Q :
			    (long long)q;
			if (!c->zero[f])
				continue;
			for (long long k = last < 0 ? 0 : last + 1; k < (long long)K; k++)
				if (!(logits ? masked(swm_load(blk, dt, base + (size_t)k), floor_) :
				    swm_load(blk, dt, base + (size_t)k) == 0)) {
					c->zero[f] = 0;
					break;
				}
			if (last >= 1 && last < (long long)K) {
				double v = swm_load(blk, dt, base + (size_t)last);
				if (logits ? !masked(v, floor_) : v != 0)
					c->diag[f] = 1;
			}
		}
	}
}

/* The warning of a tensor that looks causal analyzed without --causal. */
static void
warn_causal(const struct run *r, const struct causal_look *c)
{
	size_t Q = r->Q, K = r->K;

	if (c->zero[0] && c->diag[0] && Q >= 2)
		fprintf(stderr, "sinkwatch analyze: warning: %s:%s looks causal (in every head, "
		    "row q is zero past key q + %lld) but --causal was not given: the masked keys "
		    "are taken as zero attention, so the numbers (sink balance, Aitchison and pair "
		    "distances, row counts) differ from a causal analysis; add --causal\n",
		    r->o.file, r->o.dset, (long long)K - (long long)Q);
	else if (Q < K && c->zero[1] && c->diag[1])
		fprintf(stderr, "sinkwatch analyze: warning: %s:%s looks causal with the queries "
		    "at the first %zu of %zu positions (in every head, row q is zero past key q) "
		    "but --causal was not given: the masked keys are taken as zero attention, so "
		    "the numbers differ from a causal analysis; --causal takes the queries as the "
		    "last %zu positions, so analyze the first %zu keys (a [.., %zu, %zu] dataset) "
		    "with --causal\n", r->o.file, r->o.dset, Q, K, Q, Q, Q, Q);
}

/* Reads every layer and fills the results. 0, or an exit status. */
static int
compute(struct run *r, sw_tensor *t)
{
	size_t L = r->L, B = r->B, H = r->H, Q = r->Q, K = r->K;
	size_t es = swm_dtype_size(r->dtype);
	size_t layer_elems = 0;
	int rc = 2;
	char err[512];

	size_t bh, qk;
	if (__builtin_mul_overflow(B, H, &bh) || __builtin_mul_overflow(Q, K, &qk) ||
	    __builtin_mul_overflow(bh, qk, &layer_elems) ||
	    layer_elems > ((size_t)1 << 40) / es)
		return fail("%s:%s: one layer is too large to read (%zu elements)",
		    r->o.file, r->o.dset, layer_elems);
	void *slab = malloc(layer_elems * es + 1);
	uint32_t *nvalid = malloc(Q * sizeof(uint32_t) + 1);
	uint32_t *qpos = malloc(Q * sizeof(uint32_t) + 1);
	r->pick = malloc(Q * sizeof(uint32_t) + 1);
	size_t sbytes = (swm_block_scratch(H, K) + 63) & ~(size_t)63;
	void *scratch = aligned_alloc(64, sbytes ? sbytes : 64);
	swm_pair_acc *pairs = calloc(H * H + 1, sizeof(*pairs));
	double *ent = malloc(swm_layer_scratch(H) + 8);
	r->acc = calloc(L * H + 1, sizeof(*r->acc));
	r->head = calloc(L * H + 1, sizeof(*r->head));
	r->layer = calloc(L + 1, sizeof(*r->layer));
	if (!slab || !nvalid || !qpos || !r->pick || !scratch || !pairs ||
	    !ent || !r->acc || !r->head || !r->layer) {
		fail("out of memory (a layer is %zu bytes)", layer_elems * es);
		goto out;
	}
	for (size_t q = 0; q < Q; q++) {
		long long n = r->o.causal ? (long long)q + (long long)K - (long long)Q + 1 : (long long)K;
		nvalid[q] = (uint32_t)(n < 0 ? 0 : n > (long long)K ? (long long)K : n);
		/* the position that gives n keys; rows with none start at 0 (short) */
		qpos[q] = n > 0 ? (uint32_t)(n - 1) : 0;
	}
	/* storage/LAYOUT.md (row_use): the same rows of every block; every row by default */
	if (r->o.pair_rows > 0)
		r->npick = swm_pick_rows(r->o.causal ? qpos : NULL, Q, K,
		    (size_t)r->o.pair_rows, r->pick);
	else
		r->npick = swm_pick_all(Q, r->pick);
	for (size_t l = 0; l < L; l++) {
		struct layer *ly = &r->layer[l];
		for (int m = 0; m < 6; m++)
			if (!(ly->mat[m] = malloc(H * H * sizeof(double) + 1))) {
				fail("out of memory");
				goto out;
			}
		if (!(ly->rows = malloc(H * H * sizeof(uint64_t) + 1))) {
			fail("out of memory");
			goto out;
		}
		/* rank 3 is one layer of H slabs; ranks 4 and 5 a slab per layer */
		if (r->rank == 3) {
			for (size_t h = 0; h < H; h++)
				if (sw_tensor_read_slab(t, h, (char *)slab + h * Q * K * es, err, sizeof(err))) {
					fail("%s:%s: %s", r->o.file, r->o.dset, err);
					goto out;
				}
		} else if (sw_tensor_read_slab(t, l, slab, err, sizeof(err))) {
			fail("%s:%s: %s", r->o.file, r->o.dset, err);
			goto out;
		}
		memset(pairs, 0, H * H * sizeof(*pairs));
		if (!r->o.causal)
			for (size_t i = 0; i < B * H; i++)
				look_causal(&r->look, (char *)slab + i * Q * K * es, r->dtype,
				    r->o.logits, Q, K);
		for (size_t b = 0; b < B; b++) {
			swm_block blk = {
				.data = (char *)slab + b * H * Q * K * es,
				.dtype = r->dtype,
				.kind = r->o.logits ? SWM_LOGITS : SWM_PROBS,
				.heads = H, .rows = Q, .keys = K,
				.head_stride = Q * K, .row_stride = K,
				.nvalid = nvalid, .sink = (size_t)r->o.sink,
				.pair_pick = r->pick, .npair = r->npick,
			};
			swm_block_add(&blk, &r->o.m, scratch, &r->acc[l * H], pairs);
		}
		/* head values, pair matrices, flip rates: the daemon's computation */
		swm_layer_values lv = { .head = &r->head[l * H], .pm = {
		    ly->mat[0], ly->mat[1], ly->mat[2], ly->mat[3], ly->mat[4], ly->mat[5],
		    ly->rows } };
		swm_layer_finish(&r->acc[l * H], pairs, H, ent, &lv);
		memcpy(ly->flip, lv.flip, sizeof(ly->flip));
		memcpy(ly->comps, lv.comps, sizeof(ly->comps));
	}
	rc = 0;
out:
	free(slab);
	free(nvalid);
	free(qpos);
	free(scratch);
	free(pairs);
	free(ent);
	return rc;
}

static void
totals(const struct run *r, uint64_t *used, uint64_t rej[SWM_STATUS__N])
{
	*used = 0;
	memset(rej, 0, SWM_STATUS__N * sizeof(uint64_t));
	for (size_t i = 0; i < r->L * r->H; i++) {
		*used += r->acc[i].rows;
		for (int s = 1; s < SWM_STATUS__N; s++)
			rej[s] += r->acc[i].rejected[s];
	}
}

/*
 * The head values in output order: the run file's first per-head datasets,
 * sink_mass .. sink_balance, under their names in its schema
 * (storage/runfile.h, sw_head_field_names).
 */
#define HEAD_FIELDS (SW_F_SINK_BALANCE + 1)

static void
head_values(const swm_head *h, double v[HEAD_FIELDS])
{
	v[SW_F_SINK_MASS] = h->s;
	v[SW_F_CONTENT_MASS] = h->w;
	v[SW_F_ENTROPY] = h->H;
	v[SW_F_SINK_ENTROPY] = h->hb;
	v[SW_F_CONTENT_ENTROPY] = h->Hc;
	v[SW_F_CONTENT_TERM] = h->C;
	v[SW_F_CONTENT_ENTROPY_MW] = h->Hcw;
	v[SW_F_SINK_BALANCE] = h->b;
}

static void
json_rejected(sw_json *j, const char *key, const uint64_t *rej)
{
	sw_json_begin_obj(j, key);
	for (int s = 1; s < SWM_STATUS__N; s++)
		sw_json_int(j, swm_status_name((swm_status)s), (int64_t)rej[s]);
	sw_json_end_obj(j);
}

static void
print_json(const struct run *r)
{
	sw_json j;
	uint64_t used, rej[SWM_STATUS__N];
	size_t H = r->H;

	totals(r, &used, rej);
	sw_json_init(&j, stdout);
	sw_json_begin_obj(&j, NULL);
	sw_json_int(&j, "schema", 1);
	sw_json_int(&j, "metrics_contract", SWM_CONTRACT_VERSION);
	sw_json_str(&j, "file", r->o.file);
	sw_json_str(&j, "dataset", r->o.dset);
	sw_json_begin_arr(&j, "shape");
	for (int d = 0; d < r->rank; d++)
		sw_json_int(&j, NULL, (int64_t)r->shape[d]);
	sw_json_end_arr(&j);
	sw_json_str(&j, "dtype", dtype_long_name(r->dtype));
	sw_json_str(&j, "kind", r->o.logits ? "logits" : "probs");
	sw_json_int(&j, "layers", (int64_t)r->L);
	sw_json_int(&j, "batch", (int64_t)r->B);
	sw_json_int(&j, "heads", (int64_t)r->H);
	sw_json_int(&j, "queries", (int64_t)r->Q);
	sw_json_int(&j, "keys", (int64_t)r->K);
	sw_json_int(&j, "sink", r->o.sink);
	sw_json_bool(&j, "causal", r->o.causal);
	sw_json_num(&j, "delta", r->o.m.delta);
	sw_json_num(&j, "tolerance", swm_opts_tol(&r->o.m, r->dtype));
	sw_json_begin_arr(&j, "pair_row_index");
	for (size_t i = 0; i < r->npick; i++)
		sw_json_int(&j, NULL, (int64_t)r->pick[i]);
	sw_json_end_arr(&j);
	sw_json_int(&j, "rows_used", (int64_t)used);
	json_rejected(&j, "rows_rejected", rej);

	sw_json_begin_arr(&j, "head_stats");
	for (size_t l = 0; l < r->L; l++)
		for (size_t h = 0; h < H; h++) {
			const swm_head *hd = &r->head[l * H + h];
			double v[HEAD_FIELDS];
			head_values(hd, v);
			sw_json_begin_obj(&j, NULL);
			sw_json_int(&j, "layer", (int64_t)l);
			sw_json_int(&j, "head", (int64_t)h);
			sw_json_int(&j, "rows", (int64_t)hd->rows);
			json_rejected(&j, "rejected", r->acc[l * H + h].rejected);
			for (int f = 0; f < HEAD_FIELDS; f++)
				sw_json_num(&j, sw_head_field_names[f], v[f]);
			sw_json_end_obj(&j);
		}
	sw_json_end_arr(&j);

	sw_json_begin_arr(&j, "layer_stats");
	for (size_t l = 0; l < r->L; l++) {
		const struct layer *ly = &r->layer[l];
		sw_json_begin_obj(&j, NULL);
		sw_json_int(&j, "layer", (int64_t)l);
		for (int m = 0; m < 6; m++) {
			sw_json_begin_arr(&j, mat_names[m]);
			for (size_t a = 0; a < H; a++) {
				sw_json_begin_arr(&j, NULL);
				for (size_t b = 0; b < H; b++)
					sw_json_num(&j, NULL, ly->mat[m][a * H + b]);
				sw_json_end_arr(&j);
			}
			sw_json_end_arr(&j);
		}
		sw_json_begin_arr(&j, "pair_rows");
		for (size_t a = 0; a < H; a++) {
			sw_json_begin_arr(&j, NULL);
			for (size_t b = 0; b < H; b++)
				sw_json_int(&j, NULL, (int64_t)ly->rows[a * H + b]);
			sw_json_end_arr(&j);
		}
		sw_json_end_arr(&j);
		sw_json_begin_obj(&j, "flip_rate");
		for (int f = 0; f < 3; f++)
			sw_json_num(&j, flip_names[f], ly->flip[f]);
		sw_json_end_obj(&j);
		sw_json_begin_obj(&j, "flip_comparisons");
		for (int f = 0; f < 3; f++)
			sw_json_int(&j, flip_names[f], (int64_t)ly->comps[f]);
		sw_json_end_obj(&j);
		sw_json_end_obj(&j);
	}
	sw_json_end_arr(&j);
	sw_json_end_obj(&j);
	sw_json_finish(&j);
}

static void
csv_num(double v)
{
	if (isfinite(v))
		printf(",%.17g", v);
	else
		printf(",");
}

static void
print_csv(const struct run *r)
{
	size_t H = r->H;

	printf("# heads\nlayer,head,rows");
	for (int s = 1; s < SWM_STATUS__N; s++)
		printf(",rejected_%s", swm_status_name((swm_status)s));
	for (int f = 0; f < HEAD_FIELDS; f++)
		printf(",%s", sw_head_field_names[f]);
	putchar('\n');
	for (size_t l = 0; l < r->L; l++)
		for (size_t h = 0; h < H; h++) {
			const swm_head *hd = &r->head[l * H + h];
			double v[HEAD_FIELDS];
			head_values(hd, v);
			printf("%zu,%zu,%llu", l, h, (unsigned long long)hd->rows);
			for (int s = 1; s < SWM_STATUS__N; s++)
				printf(",%llu", (unsigned long long)r->acc[l * H + h].rejected[s]);
			for (int f = 0; f < HEAD_FIELDS; f++)
				csv_num(v[f]);
			putchar('\n');
		}
	printf("# pairs\nlayer,head_i,head_j,pair_rows");
	for (int m = 0; m < 6; m++)
		printf(",%s", mat_names[m]);
	putchar('\n');
	for (size_t l = 0; l < r->L; l++)
		for (size_t a = 0; a < H; a++)
			for (size_t b = a + 1; b < H; b++) {
				printf("%zu,%zu,%zu,%llu", l, a, b,
				    (unsigned long long)r->layer[l].rows[a * H + b]);
				for (int m = 0; m < 6; m++)
					csv_num(r->layer[l].mat[m][a * H + b]);
				putchar('\n');
			}
	printf("# flips\nlayer,metric,flip_rate,comparisons\n");
	for (size_t l = 0; l < r->L; l++)
		for (int f = 0; f < 3; f++) {
			printf("%zu,%s", l, flip_names[f]);
			csv_num(r->layer[l].flip[f]);
			printf(",%llu\n", (unsigned long long)r->layer[l].comps[f]);
		}
}

static void
text_num(double v, int width, int prec)
{
	if (isfinite(v))
		printf(" %*.*f", width, prec, v);
	else
		printf(" %*s", width, "-");
}

static void
print_text(const struct run *r)
{
	size_t H = r->H;
	uint64_t used, rej[SWM_STATUS__N];

	totals(r, &used, rej);
	printf("%s:%s  %s %s  shape", r->o.file, r->o.dset, dtype_long_name(r->dtype),
	    r->o.logits ? "logits" : "probs");
	for (int d = 0; d < r->rank; d++)
		printf("%s%llu", d ? "x" : " ", (unsigned long long)r->shape[d]);
	printf("  sink %ld%s\n", r->o.sink, r->o.causal ? "  causal" : "");
	printf("rows used %llu, rejected:", (unsigned long long)used);
	for (int s = 1; s < SWM_STATUS__N; s++)
		printf(" %s %llu", swm_status_name((swm_status)s), (unsigned long long)rej[s]);
	printf("\n\n%5s %4s %7s %9s %9s %9s %9s %9s %9s %9s %9s\n", "layer", "head", "rows",
	    "sink_mass", "content", "entropy", "sink_ent", "cont_ent", "cont_term",
	    "cont_mw", "balance");
	for (size_t l = 0; l < r->L; l++)
		for (size_t h = 0; h < H; h++) {
			const swm_head *hd = &r->head[l * H + h];
			double v[HEAD_FIELDS];
			head_values(hd, v);
			printf("%5zu %4zu %7llu", l, h, (unsigned long long)hd->rows);
			for (int f = 0; f < HEAD_FIELDS; f++)
				text_num(v[f], 9, 4);
			putchar('\n');
		}
	for (size_t l = 0; l < r->L; l++) {
		const struct layer *ly = &r->layer[l];
		printf("\nlayer %zu  flip rate keep vs drop:", l);
		for (int f = 0; f < 3; f++) {
			printf(" %s", flip_names[f]);
			text_num(ly->flip[f], 5, 3);
			printf(" (%llu)", (unsigned long long)ly->comps[f]);
		}
		putchar('\n');
		for (int m = 0; m < 6; m++) {
			printf("  %-12s", mat_names[m]);
			for (size_t a = 0; a < H; a++) {
				if (a)
					printf("  %-12s", "");
				for (size_t b = 0; b < H; b++)
					text_num(ly->mat[m][a * H + b], 7, 4);
				putchar('\n');
			}
		}
	}
}

int
sw_analyze_main(int argc, char **argv)
{
	struct run r;
	sw_tensor *t = NULL;
	char err[512];
	int rc;

	memset(&r, 0, sizeof(r));
	if ((rc = parse_args(argc, argv, &r.o)))
		return rc;
	rc = 2;
	if (sw_tensor_open(r.o.file, r.o.dset, &t, err, sizeof(err))) {
		fail("%s", err);
		goto out;
	}
	r.rank = sw_tensor_rank(t);
	r.dtype = sw_tensor_dtype(t);
	memcpy(r.shape, sw_tensor_dims(t), sizeof(r.shape));
	const uint64_t *d = r.shape;
	switch (r.rank) {
	case 3: r.L = 1; r.B = 1; r.H = d[0]; r.Q = d[1]; r.K = d[2]; break;
	case 4: r.L = d[0]; r.B = 1; r.H = d[1]; r.Q = d[2]; r.K = d[3]; break;
	case 5: r.L = d[0]; r.B = d[1]; r.H = d[2]; r.Q = d[3]; r.K = d[4]; break;
	default:
		fail("%s:%s: wrong rank %d: expected [heads, queries, keys], "
		    "[layers, heads, queries, keys] or [layers, batch, heads, queries, keys]",
		    r.o.file, r.o.dset, r.rank);
		goto out;
	}
	if (r.L * r.B * r.H * r.Q == 0) {
		fail("%s:%s: the dataset is empty (a dimension is 0)", r.o.file, r.o.dset);
		goto out;
	}
	if (r.K > UINT32_MAX) {
		fail("%s:%s: %zu keys is more than supported", r.o.file, r.o.dset, r.K);
		goto out;
	}
	if ((size_t)r.o.sink >= r.K) {
		fail("sink index %ld out of range: the dataset has %zu keys", r.o.sink, r.K);
		goto out;
	}
	if (r.o.m.delta * (double)r.K >= 1) {
		fail("--delta %g is too large for %zu keys (need delta * keys < 1)",
		    r.o.m.delta, r.K);
		goto out;
	}
	r.look.zero[0] = r.look.zero[1] = 1;
	if ((rc = compute(&r, t)))
		goto out;
	if (!r.o.causal)
		warn_causal(&r, &r.look);
	rc = 2;
	uint64_t used, rej[SWM_STATUS__N];
	totals(&r, &used, rej);
	if (used == 0) {
		char why[256];
		size_t off = 0;
		for (int s = 1; s < SWM_STATUS__N; s++)
			if (rej[s])
				off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s %llu",
				    off ? ", " : "", swm_status_name((swm_status)s),
				    (unsigned long long)rej[s]);
		fail("%s:%s: every row was rejected (%s)", r.o.file, r.o.dset, why);
		goto out;
	}
	switch (r.o.fmt) {
	case FMT_CSV: print_csv(&r); break;
	case FMT_TEXT: print_text(&r); break;
	default: print_json(&r); break;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fail("writing the output failed: %s", strerror(errno));
		goto out;
	}
	rc = 0;
out:
	sw_tensor_close(&t);
	free_run(&r);
	return rc;
}
