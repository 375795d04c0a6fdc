/*
 * bench.c: the measuring half of `make bench` (bench/run_bench.py drives it
 * and compares its figures with numpy, raw ZeroMQ and each other). Each
 * subcommand prints one JSON object on stdout.
 *
 *   bench bandwidth MIB                  single-core read bandwidth
 *   bench fma                            the core's clock, and its issue rate of
 *                                        512- and 256-bit FMAs, and of FMAs and adds
 *   bench rows FILE ROWS KEYS DTYPE KIND REPS    row kernel on rows from FILE
 *   bench pairs HEADS ROWS KEYS REPS     head-pair work of one layer
 *   bench message REPS [hot|fresh|cold] [RATE]  the daemon's kernels alone on
 *                                        one 4 MiB f16 message at default options;
 *                                        hot: one buffer again and again; fresh:
 *                                        each rep's message written just before by
 *                                        a thread on another CPU, as ZeroMQ's I/O
 *                                        thread writes what the worker reads; cold:
 *                                        12 messages in turn, each out of every
 *                                        cache; RATE: a rep starts every 1/RATE s,
 *                                        the thread asleep between, as the
 *                                        daemon's worker is between messages
 *   bench refloop NAME                   a reference loop of bench/refloops.c, its
 *                                        turns a second on L1-resident doubles
 *   bench pairlogs REPS                  the pair kernel with single and double
 *                                        logarithms, side by side
 *   bench rowlogs f32|f16 REPS           the row kernel with its own and with double
 *                                        logarithms (probs, probs_exact), side by side
 *   bench flood ENDPOINT RUN STEPS LAYERS HEADS ROWS KEYS [zc|copy] [blocking]
 *   bench paced ENDPOINT RUN STEPS LAYERS HEADS ROWS KEYS f16|f32 RATE
 *                                        the same, one message every 1/RATE s
 *   bench rawrecv ENDPOINT COUNT         a bare SUB socket counting messages, and
 *                                        its CPU (ZeroMQ's I/O thread apart)
 *   bench sendcost ENDPOINT N BYTES GAP_US   p50/p99 of one non-blocking send,
 *                                        and of a floor operation beside it
 *
 * BENCH_ISA (avx512, avx2, generic) picks the metric kernels instead of the
 * best this CPU has.
 */
#define _GNU_SOURCE
#define _GNU_SOURCE	/* sched_getcpu, pthread_setaffinity_np */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include <immintrin.h>
#include <zmq.h>

#include "metrics/swm.h"
#include "metrics/swm_simd.h"
#include "proto/swproto.h"
#include "sinkwatch/client.h"
#include "refloops.h"

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This thread's CPU time: what the daemon's stage counters measure (a
 * time slice given to another process does not count). */
static double
cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double
median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double
pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(double), cmp_double);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/*
 * One pass of a sum over buf: the widest loads the CPU has, four independent
 * accumulators, so that the loop waits on memory, not on its adds (a scalar
 * loop tops out near half the bandwidth of one core here).
 */
__attribute__((target("avx512f"))) static double
sum512(const double *b, size_t n)
{
	__m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 32 <= n; i += 32) {
		a0 = _mm512_add_pd(a0, _mm512_load_pd(b + i));
		a1 = _mm512_add_pd(a1, _mm512_load_pd(b + i + 8));
		a2 = _mm512_add_pd(a2, _mm512_load_pd(b + i + 16));
		a3 = _mm512_add_pd(a3, _mm512_load_pd(b + i + 24));
	}
	return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

__attribute__((target("avx2"))) static double
sum256(const double *b, size_t n)
{
	__m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 16 <= n; i += 16) {
		a0 = _mm256_add_pd(a0, _mm256_load_pd(b + i));
		a1 = _mm256_add_pd(a1, _mm256_load_pd(b + i + 4));
		a2 = _mm256_add_pd(a2, _mm256_load_pd(b + i + 8));
		a3 = _mm256_add_pd(a3, _mm256_load_pd(b + i + 12));
	}
	__m256d s = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
	double t[4];
	_mm256_storeu_pd(t, s);
	return (t[0] + t[1]) + (t[2] + t[3]);
}

static double
sum_scalar(const double *b, size_t n)
{
	double acc[8] = { 0 };
	for (size_t i = 0; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			acc[j] += b[i + j];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/*
 * The core's issue rates, each loop in assembly: the compiler must not
 * merge chains that compute the same values. gcc did with the C loops
 * this replaced: 12 identical chains became one, and the "peak" was 12
 * FMAs per FMA latency, 1.5x the machine's real rate (issue 30).
 */
#if defined(__x86_64__)
/* Dependent integer adds, one a cycle: iterations a second x 16 = the clock. */
static double
clock_hz(long n)
{
	long x = 0;
	double t0 = now();
	__asm__ volatile("1:\n\t"
	    "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
	    "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
	    "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
	    "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
	    "dec %1\n\tjnz 1b" : "+r"(x), "+r"(n) : : "cc");
	return 16.0 / (now() - t0);
}

#define FMA_(r) "vfmadd213pd %[c], %[m], %%" r "\n\t"
#define ADD_(r) "vaddpd %[c], %%" r ", %%" r "\n\t"
#define REGS12(p) p "0", p "1", p "2", p "3", p "4", p "5", p "6", p "7", p "8", p "9", \
	p "10", p "11"
#define CHAINS8(OP, p) OP(p "0") OP(p "1") OP(p "2") OP(p "3") OP(p "4") OP(p "5") \
	OP(p "6") OP(p "7")

/*
 * fn(n): n turns of body, a second (each turn's `ops` operations over the
 * time): body's chains on registers the compiler gives up (the clobbers),
 * m and c in registers of constraint `cons`.
 */
#define ISSUE_LOOP(fn, tgt, T, set1, cons, ops, body, ...) \
	__attribute__((target(tgt))) static double \
	fn(long n) \
	{ \
		T m = set1(0.999999), c = set1(1e-7); \
		double t0 = now(); \
		__asm__ volatile("1:\n\t" body "dec %[n]\n\tjnz 1b" : [n] "+r"(n) \
		    : [m] cons(m), [c] cons(c) : __VA_ARGS__); \
		return (ops) / (now() - t0); \
	}

/* 12 independent chains of FMAs (latency 4 on Zen, 2 pipes: 8 cover it),
 * 512 bits and 256 (the bound of the AVX2 kernels) */
ISSUE_LOOP(fma512, "avx512f", __m512d, _mm512_set1_pd, "v", 12.0,
    CHAINS8(FMA_, "zmm") FMA_("zmm8") FMA_("zmm9") FMA_("zmm10") FMA_("zmm11"),
    REGS12("xmm"), "cc")
ISSUE_LOOP(fma256, "avx2,fma", __m256d, _mm256_set1_pd, "x", 12.0,
    CHAINS8(FMA_, "ymm") FMA_("ymm8") FMA_("ymm9") FMA_("ymm10") FMA_("ymm11"),
    REGS12("xmm"), "cc")

/*
 * FMA chains beside add chains, enough of each to cover their latencies:
 * the vector operations a cycle when the two kinds share the core (Zen 5:
 * about 3, where each kind alone issues 2). 256-bit: 8 and 6 (16 ymm
 * registers with m and c); 512-bit: 8 and 8.
 */
ISSUE_LOOP(mix256, "avx2,fma", __m256d, _mm256_set1_pd, "x", 14.0,
    CHAINS8(FMA_, "ymm") ADD_("ymm8") ADD_("ymm9") ADD_("ymm10") ADD_("ymm11")
    ADD_("ymm12") ADD_("ymm13"),
    REGS12("xmm"), "xmm12", "xmm13", "cc")
ISSUE_LOOP(mix512, "avx512f", __m512d, _mm512_set1_pd, "v", 16.0,
    CHAINS8(FMA_, "zmm") ADD_("zmm8") ADD_("zmm9") ADD_("zmm10") ADD_("zmm11")
    ADD_("zmm12") ADD_("zmm13") ADD_("zmm14") ADD_("zmm15"),
    REGS12("xmm"), "xmm12", "xmm13", "xmm14", "xmm15", "cc")

/* The median of 5 timed calls of f(n) (operations a second / n): operations a second. */
static double
rate_of(double (*f)(long), long n)
{
	double r[5];
	for (int i = 0; i < 5; i++)
		r[i] = f(n) * (double)n;
	return median(r, 5);
}
#endif

/*
 * The core's clock and the vector operations it issues a second, measured
 * together in this run (the clock before and after, averaged): the bounds
 * of each ISA's kernels (run_bench.py). null where the CPU lacks them.
 */
static int
fmapeak(void)
{
	char hz[32] = "null", a[32] = "null", b[32] = "null", ma[32] = "null", mb[32] = "null";
#if defined(__x86_64__)
	int w512 = __builtin_cpu_supports("avx512f"), w256 = __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma");
	long n = 20000000;
	double hz0 = rate_of(clock_hz, n);
	if (w512) {
		snprintf(a, sizeof(a), "%.6g", rate_of(fma512, n));
		snprintf(ma, sizeof(ma), "%.6g", rate_of(mix512, n));
	}
	if (w256) {
		snprintf(b, sizeof(b), "%.6g", rate_of(fma256, n));
		snprintf(mb, sizeof(mb), "%.6g", rate_of(mix256, n));
	}
	snprintf(hz, sizeof(hz), "%.6g", (hz0 + rate_of(clock_hz, n)) / 2);
#endif
	printf("{\"clock_hz\": %s, \"fma512_per_s\": %s, \"fma256_per_s\": %s, "
	    "\"vec512_per_s\": %s, \"vec256_per_s\": %s}\n", hz, a, b, ma, mb);
	return 0;
}

/* Read bandwidth of one core: a sum over a buffer far larger than the caches. */
static int
bandwidth(size_t mib)
{
	size_t n = (mib << 20) / sizeof(double);
	double *buf = aligned_alloc(64, n * sizeof(double));
	if (!buf)
		return 1;
	for (size_t i = 0; i < n; i++)
		buf[i] = (double)(i & 7);
	int w = __builtin_cpu_supports("avx512f") ? 512 : __builtin_cpu_supports("avx2") ? 256 : 64;
	double t[5], ts[5], sink = 0;
	for (int r = 0; r < 5; r++) {
		double t0 = now();
		sink += w == 512 ? sum512(buf, n) : w == 256 ? sum256(buf, n) : sum_scalar(buf, n);
		t[r] = now() - t0;
		t0 = now();
		sink += sum_scalar(buf, n);
		ts[r] = now() - t0;
	}
	double s = median(t, 5), sc = median(ts, 5);
	printf("{\"bytes_per_s\": %.6g, \"f32_per_s\": %.6g, \"load_bits\": %d, "
	    "\"scalar_loop_bytes_per_s\": %.6g, \"check\": %g}\n",
	    (double)(n * 8) / s, (double)(n * 8) / s / 4, w, (double)(n * 8) / sc, sink);
	free(buf);
	return 0;
}

static int
rows_bench(const char *file, size_t R, size_t K, const char *dts, const char *kinds, int reps)
{
	swm_dtype dt = !strcmp(dts, "f16") ? SWM_F16 : !strcmp(dts, "bf16") ? SWM_BF16 :
	    !strcmp(dts, "f64") ? SWM_F64 : SWM_F32;
	swm_kind kind = !strcmp(kinds, "logits") ? SWM_LOGITS : SWM_PROBS;
	size_t es = swm_dtype_size(dt), bytes = R * K * es;
	char *x = malloc(bytes);
	FILE *f = fopen(file, "rb");
	if (!x || !f || fread(x, 1, bytes, f) != bytes) {
		fprintf(stderr, "bench rows: cannot read %zu bytes from %s\n", bytes, file);
		return 1;
	}
	fclose(f);
	swm_opts o;
	swm_opts_default(&o);
	double t[64], chk = 0;
	size_t ok = 0;
	reps = reps > 64 ? 64 : reps;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		for (size_t i = 0; i < R; i++) {
			swm_row row;
			if (swm_row_stats(x + i * K * es, dt, kind, K, 0, &o, &row) == SWM_OK) {
				chk += row.H;
				ok++;
			}
		}
		t[r] = now() - t0;
	}
	double s = median(t, reps);
	printf("{\"elems_per_s\": %.6g, \"seconds\": %.6g, \"rows_ok\": %zu, \"mean_H\": %.17g, "
	    "\"isa\": \"%s\"}\n", (double)(R * K) / s, s, ok / (size_t)reps, chk / (double)ok, swm_isa());
	free(x);
	return 0;
}

static int
pairs_bench(size_t H, size_t R, size_t K, int reps)
{
	float *x = malloc(H * R * K * sizeof(float));
	uint64_t st = 7;
	for (size_t i = 0; i < H * R; i++) {
		double sum = 0;
		for (size_t k = 0; k < K; k++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			double u = (double)(st >> 11) * 0x1p-53;
			x[i * K + k] = (float)(k == 0 ? 40.0 * u : u);
			sum += x[i * K + k];
		}
		for (size_t k = 0; k < K; k++)
			x[i * K + k] = (float)(x[i * K + k] / sum);
	}
	swm_opts o;
	swm_opts_default(&o);
	void *scratch = aligned_alloc(64, (swm_block_scratch(H, K) + 63) & ~(size_t)63);
	swm_head_acc *acc = calloc(H, sizeof(*acc));
	swm_pair_acc *pairs = calloc(H * H, sizeof(*pairs));
	uint32_t *pick = malloc(R * sizeof(uint32_t));
	double t[64], tn[64];
	reps = reps > 64 ? 64 : reps;
	/* pairs on every row: the caller picks R (the daemon's pair_rows) */
	swm_block b = { .data = x, .dtype = SWM_F32, .kind = SWM_PROBS, .heads = H, .rows = R,
	    .keys = K, .head_stride = R * K, .row_stride = K, .pair_pick = pick,
	    .npair = swm_pick_all(R, pick) };
	for (int r = 0; r < reps; r++) {
		memset(acc, 0, H * sizeof(*acc));
		memset(pairs, 0, H * H * sizeof(*pairs));
		double t0 = now();
		swm_block_add(&b, &o, scratch, acc, pairs);
		t[r] = now() - t0;
		memset(acc, 0, H * sizeof(*acc));
		t0 = now();
		swm_block_add(&b, &o, scratch, acc, NULL);
		tn[r] = now() - t0;
	}
	printf("{\"layer_s\": %.6g, \"rows_only_s\": %.6g, \"cos01\": %.17g, \"isa\": \"%s\", "
	    "\"log_precision\": \"%s\"}\n", median(t, reps), median(tn, reps),
	    pairs[1].cos_keep / (double)pairs[1].rows, swm_isa(), swm_precision());
	free(x);
	free(scratch);
	free(acc);
	free(pairs);
	free(pick);
	return 0;
}

static uint16_t *f16_layer(size_t H, size_t R, size_t K);

/*
 * What the daemon's worker does with one message of the bench's flood
 * (daemon/work.c): a fixed-probe layer of 16 heads x 64 rows
 * x 2048 keys in f16 (4 MiB), every row's statistics kept, pair work on
 * pair_rows = 8 rows, ln parts of drift_rows = 8 rows (the defaults) and
 * their content distances to a previous step's (the writer's drift
 * stage), timed alone: the figure the daemon's CPU per message is
 * compared with.
 */
/* A message as the daemon's worker gets it: written by another thread
 * (ZeroMQ's I/O thread copies it off the socket) on another CPU. */
struct fresh_copy {
	void *dst;
	const void *src;
	size_t n;
	int cpu;
};

static void *
fresh_copy_run(void *p)
{
	struct fresh_copy *a = p;
	if (a->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(a->cpu, &set);
		(void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	memcpy(a->dst, a->src, a->n);
	return NULL;
}

/* Writes src into dst from another thread, on another CPU than this one's
 * when there is one; this thread is kept on its CPU. */
static void
fresh_message(void *dst, const void *src, size_t n)
{
	int me = sched_getcpu();
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct fresh_copy a = { dst, src, n, me >= 0 && ncpu > 1 ? (int)((me + 1) % ncpu) : -1 };
	if (me >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(me, &set);
		(void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	pthread_t t;
	if (pthread_create(&t, NULL, fresh_copy_run, &a) != 0) {
		memcpy(dst, src, n);
		return;
	}
	pthread_join(t, NULL);
}

/* bench message's modes: the message as it lies when the worker reads it */
enum msg_mode { MSG_HOT, MSG_FRESH, MSG_COLD };
enum { COLD_BUFS = 12 };	/* 48 MiB in turn: more than this machine's 32 MiB L3 */

static int
message_bench(int reps, enum msg_mode mode, double rate)
{
	enum { H = 16, R = 64, K = 2048, PAIR_ROWS = 8, DRIFT_ROWS = 8 };
	uint16_t *x = f16_layer(H, R, K);
	swm_opts o;
	swm_opts_default(&o);
	size_t sb = (swm_block_scratch(H, K) + 63) & ~(size_t)63;
	void *scratch = aligned_alloc(64, sb);
	swm_head_acc *acc = calloc(H, sizeof(*acc));
	swm_pair_acc *pairs = calloc(H * H, sizeof(*pairs));
	swm_row *rows = calloc(H * R, sizeof(*rows));
	/* aligned as the daemon's (work.c): the row kernels stream them in */
	float *ln = aligned_alloc(64, H * DRIFT_ROWS * K * sizeof(float));
	uint32_t pick[R], lpick[R];
	if (!x || !scratch || !acc || !pairs || !rows || !ln)
		return 1;
	size_t np = swm_pick_rows(NULL, R, K, PAIR_ROWS, pick);
	size_t nl = swm_pick_rows(NULL, R, K, DRIFT_ROWS, lpick);
	swm_block b = { .data = x, .dtype = SWM_F16, .kind = SWM_PROBS, .heads = H, .rows = R,
	    .keys = K, .head_stride = R * K, .row_stride = K, .pair_pick = pick, .npair = np,
	    .rows_out = rows, .ln_pick = lpick, .nln = nl, .ln_out = ln };
	/* the previous step's ln parts of the drift rows: the daemon's drift
	 * stage (daemon/writer_step.c, swm_drift in metrics/drift.c) takes
	 * their content distance per head */
	float *prev = malloc(H * DRIFT_ROWS * K * sizeof(float));
	if (!prev)
		return 1;
	for (size_t i = 0; i < (size_t)H * DRIFT_ROWS * K; i++)
		prev[i] = (float)(-8.0 - (double)(i % 97) / 16);
	double t[64], tc[64], d2 = 0;
	size_t bytes = (size_t)H * R * K * sizeof(uint16_t);
	int nbuf = mode == MSG_COLD ? COLD_BUFS : mode == MSG_FRESH;
	uint16_t *msg[COLD_BUFS] = { 0 };
	for (int i = 0; i < nbuf; i++) {
		if (!(msg[i] = aligned_alloc(64, bytes)))
			return 1;
		memcpy(msg[i], x, bytes);
	}
	reps = reps > 64 ? 64 : reps;
	struct timespec due;
	int late = 0;	/* reps that began behind their time: none asleep before them */
	clock_gettime(CLOCK_MONOTONIC, &due);
	for (int r = 0; r < reps; r++) {
		if (rate > 0) {
			/* the next rep due 1/RATE s after this one's: asleep till then */
			struct timespec tn;
			long long ns = (long long)due.tv_nsec + (long long)(1e9 / rate);
			due.tv_sec += (time_t)(ns / 1000000000);
			due.tv_nsec = (long)(ns % 1000000000);
			clock_gettime(CLOCK_MONOTONIC, &tn);
			if (tn.tv_sec > due.tv_sec ||
			    (tn.tv_sec == due.tv_sec && tn.tv_nsec >= due.tv_nsec)) {
				late++;
				due = tn;	/* from now on: a late rep does not start the next ones early */
			}
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
				;
		}
		memset(acc, 0, H * sizeof(*acc));
		memset(pairs, 0, H * H * sizeof(*pairs));
		if (mode == MSG_FRESH)
			fresh_message(msg[0], x, bytes);
		if (nbuf)
			b.data = msg[r % nbuf];
		double t0 = now(), c0 = cpu_now();
		swm_block_add(&b, &o, scratch, acc, pairs);
		for (size_t h = 0; h < H; h++)
			for (size_t i = 0; i < nl; i++)
				d2 += swm_content_dist2_f32(ln + (h * nl + i) * K, prev + (h * nl + i) * K,
				    K, 0);
		tc[r] = cpu_now() - c0;
		t[r] = now() - t0;
	}
	free(prev);
	for (int i = 0; i < nbuf; i++)
		free(msg[i]);
	static const char *const mname[] = { "hot", "fresh", "cold" };
	printf("{\"kernels_s\": %.6g, \"kernels_cpu_s\": %.6g, \"bytes\": %d, \"isa\": \"%s\", "
	    "\"log_precision\": \"%s\", \"message\": \"%s\", \"rate\": %.6g, \"late\": %d, "
	    "\"js01\": %.17g, \"drift_check\": %.6g}\n",
	    median(t, reps), median(tc, reps), H * R * K * 2, swm_isa(), swm_precision(),
	    mname[mode], rate, late, pairs[1].js_keep / (double)pairs[1].rows, d2);
	free(x);
	free(scratch);
	free(acc);
	free(pairs);
	free(rows);
	free(ln);
	return 0;
}

/*
 * A reference loop (bench/refloops.c) on 2048 doubles that stay in L1: its
 * turns a second, the best of 9 runs (what others run beside it only ever
 * slows a loop down). null where this CPU lacks its instruction set.
 */
static int
refloop_bench(const char *name)
{
	const struct swb_refloop *r = swb_refloops;
	while (r->name && strcmp(r->name, name))
		r++;
	if (!r->name) {
		fprintf(stderr, "bench refloop: no loop named '%s'\n", name);
		return 2;
	}
	int w = strcmp(r->isa, "avx512") ? 4 : 8;
	if (!swm_kernels_get(r->isa)) {	/* the kernels' own test of the CPU */
		printf("{\"name\": \"%s\", \"isa\": \"%s\", \"loops_per_s\": null}\n", r->name, r->isa);
		return 0;
	}
	enum { N = 2048, CALLS = 10000 };
	static double x[N] __attribute__((aligned(64)));
	for (int i = 0; i < N; i++)
		x[i] = 0.5 + 1e-4 * i;
	double best = 0, sink = 0;
	for (int k = 0; k < 9; k++) {
		double t0 = now();
		for (int q = 0; q < CALLS; q++)
			sink += r->fn(x, N);
		double v = (double)CALLS * (N / w) / (now() - t0);
		best = v > best ? v : best;
	}
	printf("{\"name\": \"%s\", \"isa\": \"%s\", \"chains\": %d, \"depth\": %d, "
	    "\"loops_per_s\": %.6g, \"check\": %g}\n", r->name, r->isa, r->chains, r->depth,
	    best, sink);
	return 0;
}

/*
 * The pair kernel of the CPU's instruction set and the one pairs are taken
 * again with (swm_simd.h pair, pair_f64), alternately on the same
 * prepared rows (2048 keys, L1/L2-resident): the ratio of their element
 * rates, and the largest relative difference of their sums. AVX2: single
 * against double logarithms; AVX-512: the shorter series (LNA) against
 * ln_array's (LNQ). The keys keep their first names: f32_elems_per_s is
 * pair's, f64_elems_per_s pair_f64's.
 */
static int
pairlogs_bench(int reps)
{
	enum { N = 2048, ROWS = 16, CALLS = 2000 };
	const struct swm_kernels *kn = swm_kernels_get(swm_isa());
	if (!kn || !kn->pair || !kn->pair_f64) {
		printf("{\"isa\": \"%s\", \"ratio\": null}\n", swm_isa());
		return 0;
	}
	double *buf = aligned_alloc(64, 3 * ROWS * N * sizeof(double));
	uint64_t st = 5;
	for (int r = 0; r < ROWS; r++) {
		double *a = buf + 3 * r * N, *c = a + N, *l = c + N, sum = 0;
		for (int i = 0; i < N; i++) {
			st = st * 6364136223846793005ull + 1442695040888963407ull;
			a[i] = exp(3.0 * ((double)(st >> 11) * 0x1p-53 - 0.5));
			sum += a[i];
		}
		for (int i = 0; i < N; i++) {
			a[i] *= 0.5 / sum;
			c[i] = 1.1 * a[i];
			l[i] = log(a[i]);
		}
	}
	double tf[64], td[64], sink = 0, worst = 0;
	reps = reps > 64 ? 64 : reps;
	for (int r = 0; r < reps; r++) {
		for (int v = 0; v < 2; v++) {
			swm_pair_fn f = v ? kn->pair_f64 : kn->pair;
			double t0 = now();
			for (int q = 0; q < CALLS; q++) {
				double *x = buf + 3 * (q % ROWS) * N, *y = buf + 3 * ((q + 1) % ROWS) * N;
				double out[4];
				f(x, x + N, x + 2 * N, y, y + N, y + 2 * N, N, out);
				sink += out[0];
			}
			(v ? td : tf)[r] = now() - t0;
		}
	}
	for (int q = 0; q < ROWS; q++) {
		double *x = buf + 3 * q * N, *y = buf + 3 * ((q + 1) % ROWS) * N, o1[4], o2[4];
		kn->pair(x, x + N, x + 2 * N, y, y + N, y + 2 * N, N, o1);
		kn->pair_f64(x, x + N, x + 2 * N, y, y + N, y + 2 * N, N, o2);
		for (int i = 0; i < 2; i++) {
			double e = fabs(o1[i] - o2[i]) / fabs(o2[i]);
			worst = e > worst ? e : worst;
		}
	}
	double sf = median(tf, reps), sd = median(td, reps);
	printf("{\"isa\": \"%s\", \"f32_elems_per_s\": %.6g, \"f64_elems_per_s\": %.6g, "
	    "\"ratio\": %.4g, \"largest_rel_diff\": %.3g, \"check\": %g}\n", swm_isa(),
	    (double)CALLS * N / sf, (double)CALLS * N / sd, sd / sf, worst, sink);
	free(buf);
	return 0;
}

/*
 * The row kernel of the CPU's instruction set for f32 or f16 probability
 * rows with its probs[] (single-precision logs where row_logs is "f32")
 * and probs_exact[] (double logs), alternately on the same 64 rows of 2048
 * keys (L2-resident): their element rates, their ratio, and the largest
 * relative difference of the sums P and L.
 */
static int
rowlogs_bench(const char *dts, int reps)
{
	enum { N = 2048, ROWS = 64, PASSES = 40 };
	swm_dtype dt = !strcmp(dts, "f16") ? SWM_F16 : SWM_F32;
	const struct swm_kernels *kn = swm_kernels_get(swm_isa());
	if (!kn || !kn->probs[dt] || !kn->probs_exact[dt]) {
		printf("{\"isa\": \"%s\", \"ratio\": null}\n", swm_isa());
		return 0;
	}
	uint16_t *h = f16_layer(1, ROWS, N);
	float *f = malloc(ROWS * N * sizeof(float));
	for (size_t i = 0; h && f && i < (size_t)ROWS * N; i++) {
		uint16_t b = h[i];
		int e = (b >> 10) & 31, m = b & 1023;
		f[i] = e ? ldexpf((float)(m | 1024), e - 25) : ldexpf((float)m, -24);
	}
	const void *x = dt == SWM_F16 ? (const void *)h : (const void *)f;
	size_t es = dt == SWM_F16 ? 2 : 4;
	double thr = 1e-10, tf[64], td[64], sink = 0, worst = 0;
	reps = reps > 64 ? 64 : reps;
	for (int r = 0; r < reps; r++)
		for (int v = 0; v < 2; v++) {
			swm_probs_fn fn = v ? kn->probs_exact[dt] : kn->probs[dt];
			double t0 = now();
			for (int p = 0; p < PASSES; p++)
				for (int q = 0; q < ROWS; q++) {
					struct swm_psum ps;
					fn((const char *)x + (size_t)q * N * es, N, 0, thr, thr, thr, &ps);
					sink += ps.P;
				}
			(v ? td : tf)[r] = now() - t0;
		}
	for (int q = 0; q < ROWS; q++) {
		struct swm_psum a, b;
		kn->probs[dt]((const char *)x + (size_t)q * N * es, N, 0, thr, thr, thr, &a);
		kn->probs_exact[dt]((const char *)x + (size_t)q * N * es, N, 0, thr, thr, thr, &b);
		double e1 = fabs(a.P - b.P) / fabs(b.P), e2 = fabs(a.L - b.L) / fabs(b.L);
		worst = e1 > worst ? e1 : worst;
		worst = e2 > worst ? e2 : worst;
	}
	double sf = median(tf, reps), sd = median(td, reps), n = (double)PASSES * ROWS * N;
	printf("{\"isa\": \"%s\", \"dtype\": \"%s\", \"row_logs\": \"%s\", \"probs_elems_per_s\": %.6g, "
	    "\"exact_elems_per_s\": %.6g, \"ratio\": %.4g, \"largest_rel_diff\": %.3g, "
	    "\"check\": %g}\n", swm_isa(), dts, kn->row_logs ? kn->row_logs : "f64", n / sf, n / sd,
	    sd / sf, worst, sink);
	free(h);
	free(f);
	return 0;
}

static void
noop_release(void *data, void *hint)
{
	(void)data;
	(void)hint;
}

/* binary16 of a float in the normal range or below it, round to nearest */
static uint16_t
f16_of(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (f < 0x1p-24f)
		return 0;
	if (f < 0x1p-14f)	/* subnormal: a multiple of 2^-24 */
		return (uint16_t)lrintf(f * 0x1p24f);
	uint32_t m = u + 0x0fffu + ((u >> 13) & 1);
	return (uint16_t)((m - 0x38000000u) >> 13);
}

/*
 * A layer of softmax rows in f16 as a model makes them: normal scores with a
 * sink bonus, every row a different draw, sums within rounding of 1.
 */
static uint16_t *
f16_layer(size_t H, size_t R, size_t K)
{
	uint16_t *x = malloc(H * R * K * 2);
	float *p = malloc(K * sizeof(float));
	uint64_t st = 11;
	for (size_t row = 0; x && p && row < H * R; row++) {
		double sum = 0;
		for (size_t k = 0; k < K; k++) {
			double g = 0;
			for (int q = 0; q < 4; q++) {	/* Irwin-Hall: near normal */
				st = st * 6364136223846793005ull + 1442695040888963407ull;
				g += (double)(st >> 11) * 0x1p-53;
			}
			p[k] = (float)exp(1.7 * (g - 2) + (k == 0 ? 4.0 : 0.0));
			sum += p[k];
		}
		for (size_t k = 0; k < K; k++)
			x[row * K + k] = f16_of((float)(p[k] / sum));
	}
	free(p);
	return x;
}

static int
flood(int argc, char **argv)
{
	if (argc < 9)
		return 2;
	const char *ep = argv[2], *run = argv[3];
	long steps = atol(argv[4]), L = atol(argv[5]), H = atol(argv[6]), R = atol(argv[7]),
	    K = atol(argv[8]);
	int zc = argc > 9 && !strcmp(argv[9], "zc"), blocking = argc > 10 && !strcmp(argv[10], "blocking");
	size_t bytes = (size_t)H * R * K * 2;
	uint16_t *x = f16_layer((size_t)H, (size_t)R, (size_t)K);
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.blocking = blocking;
	o.block_timeout_ms = 60000;
	o.linger_ms = 10000;
	sw_run_info ri = { run, "bench", 1400000000ull, (uint32_t)L, (uint32_t)H, 0, 1 };
	sw_client *c;
	if (sw_client_new(&o, &ri, &c))
		return 1;
	sw_client_flush(c, 3000);
	double t0 = now();
	for (long s = 0; s < steps; s++)
		for (long l = 0; l < L; l++) {
			sw_snapshot sn = { s, (uint32_t)l, SW_KIND_PROBS, SW_DTYPE_F16, (uint32_t)R,
			    (uint32_t)K, NULL, x, bytes };
			if (zc)
				sw_client_send_zc(c, &sn, noop_release, NULL);
			else
				sw_client_send(c, &sn);
		}
	double t1 = now();
	sw_client_end(c);
	sw_client_flush(c, 10000);
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	sw_client_destroy(&c);
	printf("{\"send_s\": %.6g, \"sent\": %llu, \"dropped\": %llu, \"bytes\": %zu}\n", t1 - t0,
	    (unsigned long long)st.sent, (unsigned long long)st.dropped, bytes);
	free(x);
	return 0;
}

/* A binary16's value (finite inputs). */
static float
f32_of(uint16_t h)
{
	int e = (h >> 10) & 31, m = h & 1023;
	float v = e ? ldexpf((float)(m | 1024), e - 25) : ldexpf((float)m, -24);
	return h & 0x8000 ? -v : v;
}

/* The rows of f16_layer() as f32. */
static float *
f32_layer(size_t H, size_t R, size_t K)
{
	uint16_t *h = f16_layer(H, R, K);
	float *x = h ? malloc(H * R * K * sizeof(float)) : NULL;
	for (size_t i = 0; x && i < H * R * K; i++)
		x[i] = f32_of(h[i]);
	free(h);
	return x;
}

/*
 * Sends at a fixed rate: message i (step-major) is due at t0 + i / RATE
 * (absolute deadlines: a late send does not push the later ones back),
 * zero-copy, blocking mode. Prints how far behind its schedule the sender
 * fell, so a rate the sender itself could not keep is not taken for one
 * the daemon kept up with.
 */
static int
paced(int argc, char **argv)
{
	if (argc < 11)
		return 2;
	const char *ep = argv[2], *run = argv[3];
	long steps = atol(argv[4]), L = atol(argv[5]), H = atol(argv[6]), R = atol(argv[7]),
	    K = atol(argv[8]);
	int f32 = !strcmp(argv[9], "f32");
	double rate = atof(argv[10]);
	size_t n = (size_t)H * R * K, bytes = n * (f32 ? 4 : 2);
	void *x = f32 ? (void *)f32_layer((size_t)H, (size_t)R, (size_t)K) :
	    (void *)f16_layer((size_t)H, (size_t)R, (size_t)K);
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.blocking = 1;
	o.block_timeout_ms = 60000;
	o.linger_ms = 10000;
	sw_run_info ri = { run, "bench", 1400000000ull, (uint32_t)L, (uint32_t)H, 0, 1 };
	sw_client *c;
	if (!x || rate <= 0 || sw_client_new(&o, &ri, &c))
		return 1;
	sw_client_flush(c, 3000);
	struct timespec ts0;
	clock_gettime(CLOCK_MONOTONIC, &ts0);
	double t0 = (double)ts0.tv_sec + (double)ts0.tv_nsec * 1e-9, late = 0;
	long i = 0;
	for (long s = 0; s < steps; s++)
		for (long l = 0; l < L; l++, i++) {
			double due = t0 + (double)i / rate;
			struct timespec d = { (time_t)due, (long)((due - floor(due)) * 1e9) };
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) != 0)
				;
			double t = now();
			if (t - due > late)
				late = t - due;
			sw_snapshot sn = { s, (uint32_t)l, SW_KIND_PROBS,
			    f32 ? SW_DTYPE_F32 : SW_DTYPE_F16, (uint32_t)R, (uint32_t)K, NULL, x, bytes };
			sw_client_send_zc(c, &sn, noop_release, NULL);
		}
	double t1 = now();
	sw_client_end(c);
	sw_client_flush(c, 30000);
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	sw_client_destroy(&c);
	printf("{\"send_s\": %.6g, \"rate\": %.6g, \"achieved\": %.6g, \"max_late_s\": %.6g, "
	    "\"sent\": %llu, \"dropped\": %llu, \"bytes\": %zu, \"elements\": %zu}\n", t1 - t0,
	    rate, i > 1 ? (double)(i - 1) / (t1 - t0) : 0.0, late, (unsigned long long)st.sent,
	    (unsigned long long)st.dropped, bytes, n);
	free(x);
	return 0;
}

/* user + system CPU seconds of the process (RUSAGE_SELF) or this thread */
static double
cpu_s(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	    (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* A bare subscriber: the most ZeroMQ delivers with no processing. */
static int
rawrecv(const char *ep, long count)
{
	/*
	 * The daemon's allocator settings (daemon/sinkwatchd.c), so that the
	 * baseline is ZeroMQ and not glibc unmapping and faulting in frame
	 * buffers again (16 us a page fault on the bench's VM); the first
	 * step's messages are not timed (the heap grows to its size).
	 */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 512 << 20);
	long skip = count / 4 < 24 ? count / 4 : 24;
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_SUB);
	int hwm = 8, tmo = 20000;
	zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo));
	zmq_setsockopt(s, ZMQ_SUBSCRIBE, "sw/", 3);
	if (zmq_bind(s, ep))
		return 1;
	printf("{\"ready\": 1}\n");
	fflush(stdout);
	long got = 0;
	size_t bytes = 0;
	double t0 = 0, c0 = 0, m0 = 0;
	while (got < count) {
		zmq_msg_t m;
		int more = 1;
		while (more) {
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, s, 0) < 0) {
				zmq_msg_close(&m);
				goto out;
			}
			bytes += zmq_msg_size(&m);
			more = zmq_msg_more(&m);
			zmq_msg_close(&m);
		}
		if (++got == skip + 1) {
			t0 = now();
			c0 = cpu_s(RUSAGE_SELF);
			m0 = cpu_s(RUSAGE_THREAD);
		}
	}
out:;
	/*
	 * timed: the messages after the one that started the clock; the
	 * process's CPU over them, and this thread's (the rest is ZeroMQ's
	 * I/O thread: the receive proper, the copy out of the kernel)
	 */
	double c1 = cpu_s(RUSAGE_SELF), m1 = cpu_s(RUSAGE_THREAD);
	printf("{\"messages\": %ld, \"timed\": %ld, \"bytes\": %zu, \"seconds\": %.6g, "
	    "\"cpu_s\": %.6g, \"main_thread_cpu_s\": %.6g}\n",
	    got, got > skip + 1 ? got - skip - 1 : 0, bytes, got > skip + 1 ? now() - t0 : 0.0,
	    got > skip + 1 ? c1 - c0 : 0.0, got > skip + 1 ? m1 - m0 : 0.0);
	zmq_close(s);
	zmq_ctx_term(ctx);
	return 0;
}

/* A training step's worth of work: the thread stays busy, as in a training loop. */
static void
busy(double us)
{
	double t_end = now() + us * 1e-6;
	volatile double v = 0;
	while (now() < t_end)
		for (int j = 0; j < 64; j++)
			v += j * 0.5;
}

/*
 * The least a send must do, as a floor for this machine's noise: encode a
 * header like the client's into a stack buffer and copy it into a fresh
 * allocation. Timed in the same loop as the sends, so what disturbs one
 * (interrupts, the other CPU's work, a cold cache) disturbs both.
 */
#define WARM 20

static void
floor_op(swp_msg *m, long i)
{
	unsigned char buf[1024];
	size_t len = 0;
	m->seq = (uint64_t)(i + WARM);
	m->step = i + WARM;
	m->time = (double)time(NULL);
	if (swp_encode_header_to(m, buf, sizeof(buf), &len) != 0)
		abort();
	unsigned char *p = malloc(len + 256);
	memcpy(p, buf, len);
	__asm__ volatile("" : : "r"(p) : "memory");
	free(p);
}

/*
 * Cost of one send inside a training loop: the sending thread computes
 * (busy) between sends and never sleeps, so each send is timed as a
 * training step would meet it; the client's sender thread and ZeroMQ's
 * I/O thread move the data meanwhile. Each gap_us is split in two: after
 * the first half the floor operation is timed, after the second the send.
 * The first WARM sends of each kind are not timed (they fault in code and
 * buffers once per process).
 */
static int
sendcost(const char *ep, long n, size_t bytes, double gap_us)
{
	char *x = malloc(bytes);
	memset(x, 0, bytes);
	double *tz = malloc((size_t)n * sizeof(double)), *tc = malloc((size_t)n * sizeof(double));
	double *tf = malloc((size_t)n * sizeof(double));
	sw_client_opts o;
	sw_client_opts_init(&o);
	o.endpoint = ep;
	o.linger_ms = 2000;
	uint32_t H = 16, R = 64, K = (uint32_t)(bytes / (16 * 64 * 2));
	sw_run_info ri = { "sendcost", "bench", 0, 1, H, 0, 1 };
	sw_client *c;
	if (sw_client_new(&o, &ri, &c))
		return 1;
	sw_client_flush(c, 2000);
	swp_msg fm;
	memset(&fm, 0, sizeof(fm));
	fm.type = SWP_SNAPSHOT;
	strcpy(fm.run, ri.run);
	strcpy(fm.model, ri.model);
	fm.layers = 1;
	fm.heads = fm.shape[0] = H;
	fm.shape[1] = R;
	fm.shape[2] = K;
	fm.kind = SWP_PROBS;
	fm.dtype = SWP_F16;
	fm.tensor = x;
	fm.tensor_bytes = bytes;
	/* each kind in its own loop: one kind's copies do not disturb the other's timing */
	long step = 0;
	for (int zc = 1; zc >= 0; zc--)
		for (long i = -WARM; i < n; i++) {
			sw_snapshot s = { step++, 0, SW_KIND_PROBS, SW_DTYPE_F16, R, K, NULL, x, bytes };
			busy(gap_us / 2);
			double t0 = now();
			floor_op(&fm, i);
			double t1 = now();
			busy(gap_us / 2);
			double t2 = now();
			if (zc)
				sw_client_send_zc(c, &s, noop_release, NULL);
			else
				sw_client_send(c, &s);
			double t3 = now();
			if (i < 0)
				continue;
			(zc ? tz : tc)[i] = t3 - t2;
			if (zc)
				tf[i] = t1 - t0;
		}
	sw_client_stats st;
	sw_client_get_stats(c, &st);
	sw_client_destroy(&c);
	printf("{\"zc_p50_us\": %.4g, \"zc_p99_us\": %.4g, \"copy_p50_us\": %.4g, "
	    "\"copy_p99_us\": %.4g, \"floor_p50_us\": %.4g, \"floor_p99_us\": %.4g, "
	    "\"subscribed\": %d, \"sent\": %llu, \"dropped\": %llu}\n",
	    pct(tz, (size_t)n, 0.5) * 1e6, pct(tz, (size_t)n, 0.99) * 1e6,
	    pct(tc, (size_t)n, 0.5) * 1e6, pct(tc, (size_t)n, 0.99) * 1e6,
	    pct(tf, (size_t)n, 0.5) * 1e6, pct(tf, (size_t)n, 0.99) * 1e6, st.subscribed,
	    (unsigned long long)st.sent, (unsigned long long)st.dropped);
	free(x);
	free(tz);
	free(tc);
	free(tf);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	/* BENCH_ISA=avx2 on an AVX-512 machine: the other kernels, side by side */
	const char *isa = getenv("BENCH_ISA");
	if (isa != NULL && *isa != '\0' && swm_set_isa(isa) != 0) {
		fprintf(stderr, "bench: BENCH_ISA=%s: not an instruction set of this CPU\n", isa);
		return 2;
	}
	if (!strcmp(argv[1], "fma"))
		return fmapeak();
	if (!strcmp(argv[1], "bandwidth") && argc > 2)
		return bandwidth((size_t)atol(argv[2]));
	if (!strcmp(argv[1], "rows") && argc > 7)
		return rows_bench(argv[2], (size_t)atol(argv[3]), (size_t)atol(argv[4]), argv[5],
		    argv[6], atoi(argv[7]));
	if (!strcmp(argv[1], "pairs") && argc > 5)
		return pairs_bench((size_t)atol(argv[2]), (size_t)atol(argv[3]),
		    (size_t)atol(argv[4]), atoi(argv[5]));
	if (!strcmp(argv[1], "message") && argc > 2)
	{
		enum msg_mode mode = MSG_HOT;
		if (argc > 3 && !strcmp(argv[3], "fresh"))
			mode = MSG_FRESH;
		else if (argc > 3 && !strcmp(argv[3], "cold"))
			mode = MSG_COLD;
		else if (argc > 3 && strcmp(argv[3], "hot")) {
			fprintf(stderr, "bench message: mode '%s': hot (default), fresh or cold\n", argv[3]);
			return 2;
		}
		char *end = NULL;
		double rate = argc > 4 ? strtod(argv[4], &end) : 0;
		if (argc > 4 && (end == argv[4] || *end || !(rate >= 1e-3 && rate <= 1e6))) {
			fprintf(stderr, "bench message: rate '%s': messages a second, 0.001 to 1e6\n",
			    argv[4]);
			return 2;
		}
		if (atoi(argv[2]) < 1) {
			fprintf(stderr, "bench message: reps '%s': 1 to 64\n", argv[2]);
			return 2;
		}
		return message_bench(atoi(argv[2]), mode, rate);
	}
	if (!strcmp(argv[1], "pairlogs") && argc > 2)
		return pairlogs_bench(atoi(argv[2]));
	if (!strcmp(argv[1], "refloop") && argc > 2)
		return refloop_bench(argv[2]);
	if (!strcmp(argv[1], "rowlogs") && argc > 3)
		return rowlogs_bench(argv[2], atoi(argv[3]));
	if (!strcmp(argv[1], "flood"))
		return flood(argc, argv);
	if (!strcmp(argv[1], "paced"))
		return paced(argc, argv);
	if (!strcmp(argv[1], "rawrecv") && argc > 3)
		return rawrecv(argv[2], atol(argv[3]));
	if (!strcmp(argv[1], "sendcost") && argc > 5)
		return sendcost(argv[2], atol(argv[3]), (size_t)atol(argv[4]), atof(argv[5]));
	fprintf(stderr, "usage: see the comment at the top of bench/bench.c\n");
	return 2;
}
