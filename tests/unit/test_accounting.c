/*
 * test_accounting.c: the accounting invariant of issue 26, over random
 * schedules, with the daemon's assembly and writer and no sockets.
 *
 * For every sender (incarnation, rank) of a schedule:
 *
 *   its messages, ends included (the seq after its last)
 *     = the file's sender row: messages + lost, where
 *   messages = the messages whose data is in a stored row
 *            + the messages counted under exactly one drop reason
 *            + its end,
 * summed over daemon sessions, and the stored ones are exactly those the
 * run file holds: a part is stored where its heads are present in the row
 * of its (step, incarnation).
 *
 * A schedule: 1 to 3 senders of one incarnation, each sending its heads
 * (2 per rank) of 2 layers for 1 to 6 steps, in its own order, the senders
 * interleaved at random; messages lost (skipped seq), sent again (a copy),
 * with a wrong senders count, delayed past the step timeout (late), refused
 * by a small budget; the daemon stopped (SIGTERM's path) and started again,
 * sometimes with messages sent while none ran; ends sent or not. Seeded:
 * SW_ACCOUNTING_SEED and SW_ACCOUNTING_N pick them (default 0 and 400; 8000
 * pass). SW_ACCOUNTING_LOG=N prints each schedule and the daemon's log at N.
 * At every message each sender's messages = stored + pending + dropped +
 * its end (check_live), and the file is checked at the end (check_file).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/assembly.h"
#include "daemon/daemon.h"
#include "net/log.h"
#include "storage/runfile.h"

#include <hdf5.h>

#define MAXS 3			/* senders */
#define L 2			/* layers */
#define HR 2			/* heads per rank */
#define R 3			/* probe rows */
#define K 8			/* keys */
#define MAXT 6			/* steps */
#define MAXMSG 256
#define MAXJOB 64
#define LAYER_BYTES 4096	/* a computed layer, against the budget */

/* ---- a tiny random generator (xorshift64*), seeded per schedule ---- */
static uint64_t rng;
static int trace;		/* SW_ACCOUNTING_LOG set: the schedule on stderr */
static uint32_t
rnd(uint32_t n)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 2685821657736338717ull) >> 33) % n;
}

/* ---- what a schedule sends ---- */
struct smsg {
	int end;
	int64_t step;
	uint32_t layer, rank, senders;
	uint64_t seq;
	int drop;		/* lost before the daemon (the client's queue, the network) */
	int down;		/* sent while no daemon ran */
};

struct sender {
	struct smsg m[MAXMSG];
	int n, next;
	uint64_t seq;
};

static struct sender snd[MAXS];
static int S, T, H;
static uint64_t INC;
static float tensor[HR * R * K];

/* ---- the daemon's parts: assembly, writer, the work between them ---- */
static swd_writer *writer;
static swd_asm *as;
static atomic_llong inflight;
static int64_t budget;
static int64_t idle_s = 600;

struct job {
	swd_ticket t;
	swp_msg m;		/* the layer's header (qpos NULL) */
	void *data;		/* the layer's elements (owned), or */
	swd_parts *parts;	/* a gathered layer's (owned) */
	size_t data_bytes;	/* parts' charge */
	int32_t *miss;
	size_t reserved;
};
static struct job jobs[MAXJOB];
static int njobs;

/* The latest counters of each sender in this session, as the assembly gave them. */
static swd_sender last[MAXS];
static int have_last[MAXS];
/* Summed over sessions: stored and dropped by the daemon's own counts. */
static int64_t acc_stored[MAXS], acc_dropped[MAXS], acc_ended[MAXS];
/* Ends of a run this daemon session knows nothing of (unknown_run): counted
 * by the daemon, in no sender's row (a new session's first message). */
static int64_t acc_unknown[MAXS];
/* Ends of a run a session did not hold, handed to the writer (the file's
 * sender row counts them, and what their seq says was lost). */
static int64_t acc_deferred[MAXS];
/* A daemon was killed (SIGKILL: what it held in memory is gone) and the
 * sender has not spoken to a daemon since: its held messages are in no
 * count until it speaks again (then the gap is counted lost). */
static int killed_since[MAXS];

/* Sender k's last counters of a run object, with the writer's share, summed. */
static struct {
	int schedules, senders, sigterm, sigkill, reopened, budget;
	int kept;		/* parts kept as they came (conf.hold) */
} seen;		/* what the schedules covered, printed at the end */

static void
take_last(int k)
{
	swd_writer_sync(writer);
	swd_writer_fates(writer, &last[k]);
	if (trace)
		fprintf(stderr, "run object %llu: rank %d messages %lld stored %lld ended %d\n",
		    (unsigned long long)last[k].serial, k, (long long)last[k].messages,
		    (long long)last[k].stored, last[k].ended);
	ck_assert_int_eq(last[k].pending, 0);
	acc_stored[k] += last[k].stored;
	acc_ended[k] += last[k].ended;
	for (int r = 0; r < SWD_DROP_REASONS; r++)
		acc_dropped[k] += last[k].drop[r];
	have_last[k] = 0;
}

static void
to_writer(void *ud, swd_witem *it)
{
	(void)ud;
	for (size_t i = 0; i < it->nsnd; i++)
		if (it->snd[i].inc == INC && it->snd[i].rank < (uint32_t)S) {
			uint32_t k = it->snd[i].rank;
			/* a run reopened after an idle close is another run object: the
			 * last counts of the one before are final */
			if (have_last[k] && last[k].serial != it->snd[i].serial) {
				take_last(k);
				seen.reopened++;
			}
			last[k] = it->snd[i];
			have_last[k] = 1;
		}
	swd_writer_push(writer, it);
}

/* A layer's metric work, as the daemon's workers do it (no pairs). */
static swd_layer *
compute(const swp_msg *m, const void *data, const swd_parts *parts, int32_t *miss,
    size_t reserved)
{
	uint32_t nh = m->shape[0], nr = m->shape[1];
	swd_layer *ly = calloc(1, sizeof(*ly));
	ck_assert_ptr_nonnull(ly);
	ly->layer = m->layer;
	ly->heads = nh;
	ly->rows = nr;
	ly->keys = K;
	ly->bytes = reserved;
	ly->acc = calloc(nh, sizeof(*ly->acc));
	swm_opts o;
	swm_opts_default(&o);
	void *scratch = aligned_alloc(64, (swm_block_scratch(nh, K) + 63) & ~(size_t)63);
	swm_block blk = {
		.data = data, .head_data = parts ? parts->head : NULL,
		.dtype = SWM_F32, .kind = SWM_PROBS,
		.heads = nh, .rows = nr, .keys = K,
		.head_stride = (size_t)nr * K, .row_stride = K, .sink = 0,
	};
	swm_block_add(&blk, &o, scratch, ly->acc, NULL);
	free(scratch);
	for (uint32_t h = 0; miss && h < nh; h++)
		if (miss[h] != -1)
			memset(&ly->acc[h], 0, sizeof(ly->acc[h]));
	ly->miss_rank = miss;
	return ly;
}

/* conf.work: a gathered layer (its data and reserve are counted already). */
static int
work(void *ud, const swd_ticket *t, const swp_msg *m, swd_parts *data, size_t bytes,
    int32_t *miss)
{
	(void)ud;
	(void)bytes;
	if (njobs == MAXJOB)
		return SWD_DROP_NOMEM;
	struct job *j = &jobs[njobs++];
	j->t = *t;
	j->m = *m;
	free(m->qpos);
	j->m.qpos = NULL;
	j->data = NULL;
	j->parts = data;
	j->data_bytes = bytes;
	j->miss = miss;
	j->reserved = bytes + LAYER_BYTES;
	return SWD_ASM_ACCEPT;
}

/*
 * conf.hold as the daemon's (the frame moves: here a copy, and the message's
 * own tensor is no longer read), refusing one part in 5 (no memory: copied).
 * Every kept frame must be released once: held counts those alive.
 */
static long long held;
static const void *
hold(void *ud, const swp_msg *m, void **handle)
{
	(void)ud;
	if (rnd(5) == 0)
		return NULL;
	void *f = malloc(m->tensor_bytes);
	ck_assert_ptr_nonnull(f);
	memcpy(f, m->tensor, m->tensor_bytes);
	*handle = f;
	held++;
	seen.kept++;
	return f;
}

static void
release(void *ud, void *handle)
{
	(void)ud;
	free(handle);
	held--;
}

static size_t
work_bytes(void *ud, const swp_msg *m)
{
	(void)ud;
	(void)m;
	return LAYER_BYTES;
}

/* Runs job i: its result goes back to the assembly. */
static void
run_job(int i, uint64_t now)
{
	struct job j = jobs[i];
	jobs[i] = jobs[--njobs];
	swd_layer *ly = compute(&j.m, j.data, j.parts, j.miss, j.reserved);
	/* the elements are gone once computed; the result stays (as the daemon) */
	size_t data_bytes = j.parts ? j.data_bytes :
	    (size_t)j.m.shape[0] * j.m.shape[1] * K * sizeof(float);
	atomic_fetch_sub(&inflight, (long long)data_bytes);
	ly->bytes -= data_bytes;
	free(j.data);
	swd_parts_free(j.parts);
	swd_asm_done(as, &j.t, ly, now);
}

static void
start_session(const char *dir)
{
	swd_config cfg;
	swd_config_defaults(&cfg);
	snprintf(cfg.data_dir, sizeof(cfg.data_dir), "%s", dir);
	cfg.flush_ms = 50;
	ck_assert_int_eq(swd_writer_start(&writer, &cfg, &inflight), 0);
	swd_asm_conf c = {
		.step_timeout_ms = 1000, .max_open_steps = 4, .max_runs = 8, .run_idle_s = idle_s,
		.inflight = &inflight, .budget_bytes = budget, .work = work,
		.work_bytes = work_bytes, .hold = hold, .release = release, .hold_extra = 48,
	};
	as = swd_asm_new(&c, to_writer, NULL);
	ck_assert_ptr_nonnull(as);
	memset(have_last, 0, sizeof(have_last));
}

/* SIGTERM's path: parts start as they are, the work ends, every step goes out. */
static void
end_session(uint64_t now)
{
	swd_asm_stop(as);
	while (njobs)
		run_job((int)rnd((uint32_t)njobs), now);
	swd_asm_shutdown(as);
	for (int k = 0; k < S; k++)
		if (have_last[k])
			take_last(k);
	swd_writer_stop(&writer);
	swd_asm_free(&as);
}

/*
 * SIGKILL after the writer's flush: everything handed to the writer is in
 * the file; the parts held, the work in flight and the open steps are gone.
 */
static void
kill_session(void)
{
	/* what it handed to the writer is in the file (the writer flushed) */
	for (int k = 0; k < S; k++)
		if (have_last[k])
			take_last(k);
	swd_writer_stop(&writer);
	for (int i = 0; i < njobs; i++) {
		atomic_fetch_sub(&inflight, (long long)jobs[i].reserved);
		free(jobs[i].data);
		swd_parts_free(jobs[i].parts);
		free(jobs[i].miss);
	}
	njobs = 0;
	swd_asm_free(&as);
	atomic_store(&inflight, 0);	/* the process is gone */
	for (int k = 0; k < S; k++)
		killed_since[k] = 1;
}

/* Delivers message x of sender k at time now, as the daemon's loop does;
 * 0 if a daemon session that held nothing of the run took it (unknown_run). */
static int
deliver(const struct smsg *x, uint64_t now)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	m.type = x->end ? SWP_END : SWP_SNAPSHOT;
	snprintf(m.run, sizeof(m.run), "acc");
	snprintf(m.model, sizeof(m.model), "m");
	m.layers = L;
	m.heads = (uint32_t)H;
	m.rows = R;
	m.shape[0] = S > 1 ? HR : (uint32_t)H;
	m.shape[1] = R;
	m.shape[2] = K;
	m.head0 = S > 1 ? x->rank * HR : 0;
	m.dtype = SWP_F32;
	m.kind = SWP_PROBS;
	m.step = x->step;
	m.layer = x->layer;
	m.inc = INC;
	m.seq = x->seq;
	m.rank = x->rank;
	m.senders = x->senders;
	m.tensor = tensor;
	m.tensor_bytes = sizeof(tensor);
	if (x->end) {
		int rc = swd_asm_end(as, &m, now);
		if (rc == SWD_ASM_DEFERRED)
			acc_deferred[x->rank]++;
		if (rc != SWD_DROP_UNKNOWN_RUN)
			return 1;
		acc_unknown[x->rank]++;
		return 0;
	}
	swd_ticket t;
	char why[256];
	int rc = swd_asm_admit(as, &m, now, &t, why, sizeof(why));
	if (rc != SWD_ASM_ACCEPT && rc != SWD_ASM_COPY)
		return 1;
	size_t need = m.tensor_bytes + LAYER_BYTES;
	if (budget > 0 && atomic_load(&inflight) + (long long)need > budget) {
		swd_asm_cancel(as, &t, SWD_DROP_BUDGET);
		return 1;
	}
	if (njobs == MAXJOB) {
		swd_asm_cancel(as, &t, SWD_DROP_NOMEM);
		return 1;
	}
	struct job *j = &jobs[njobs++];
	j->t = t;
	j->m = m;
	j->m.tensor = NULL;
	j->parts = NULL;
	j->data = malloc(sizeof(tensor));
	memcpy(j->data, tensor, sizeof(tensor));
	j->miss = NULL;
	j->reserved = need;
	atomic_fetch_add(&inflight, (long long)need);
	swd_asm_start(as, &t);
	return 1;
}

/* At any moment: each sender's messages = stored + pending + dropped + its end. */
static void
check_live(void)
{
	swd_sender sd[8];
	const char *rn[8];
	size_t n = swd_asm_senders(as, sd, rn, 8);
	for (size_t i = 0; i < n; i++) {
		int64_t k = sd[i].stored + sd[i].pending + sd[i].ended;
		for (int r = 0; r < SWD_DROP_REASONS; r++)
			k += sd[i].drop[r];
		ck_assert_msg(k == sd[i].messages, "rank %u: messages %lld, accounted %lld (stored "
		    "%lld pending %lld)", sd[i].rank, (long long)sd[i].messages, (long long)k,
		    (long long)sd[i].stored, (long long)sd[i].pending);
	}
}

/* What the run file holds: stored parts per rank, and the sender table. */
static void
check_file(const char *dir, int seed)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/acc.h5", dir);
	struct stat sb;
	int64_t stored[MAXS] = { 0 };
	uint64_t *tab = NULL;
	int64_t ns = 0;
	if (stat(path, &sb) == 0) {
		sw_reader *r;
		char err[512];
		ck_assert_msg(sw_reader_open(path, &r, NULL, err, sizeof(err)) == 0, "%s", err);
		int64_t n = sw_reader_refresh(r, err, sizeof(err));
		ck_assert_int_ge(n, 0);
		double *mr = malloc(((size_t)n * L * H + 1) * sizeof(double));
		ck_assert_int_eq(sw_reader_read(r, "missing_rank", 0, n, mr, (size_t)n * L * H,
		    err, sizeof(err)), n * L * H);
		sw_rows rows;
		ck_assert_int_eq(sw_reader_rows(r, n, &rows, err, sizeof(err)), 0);
		/* one row per (step, incarnation): a step is never stored twice */
		for (int64_t a = 0; a < n; a++)
			for (int64_t b = a + 1; b < n; b++)
				ck_assert_msg(rows.step[a] != rows.step[b] || rows.inc[a] != rows.inc[b],
				    "seed %d: step %lld stored twice", seed, (long long)rows.step[a]);
		for (int64_t t = 0; t < n; t++)
			for (int l = 0; l < L; l++)
				for (int k = 0; k < S; k++) {
					int present = 1;
					for (int h = 0; h < (S > 1 ? HR : H); h++)
						present &= mr[((size_t)t * L + l) * H + (S > 1 ? k * HR : 0) + h]
						    == -1;
					stored[k] += present;
				}
		sw_rows_free(&rows);
		free(mr);
		size_t nf = 0;
		ns = sw_reader_senders(r, &tab, &nf, err, sizeof(err));
		ck_assert_uint_eq(nf, SW_SENDER_FIELDS);
		ck_assert_int_ge(ns, 0);
		sw_reader_close(&r);
	}
	for (int k = 0; k < S; k++) {
		const uint64_t *row = NULL;
		for (int64_t i = 0; i < ns; i++)
			if (tab[i * SW_SENDER_FIELDS + SW_S_INC] == INC &&
			    tab[i * SW_SENDER_FIELDS + SW_S_RANK] == (uint64_t)k)
				row = tab + i * SW_SENDER_FIELDS;
		/* the parts the daemon says it stored are the parts the file holds (a
		 * killed session's count is what it handed to the writer) */
		ck_assert_msg(stored[k] == acc_stored[k], "seed %d rank %d: the file holds %lld "
		    "parts, the daemon counted %lld stored", seed, k, (long long)stored[k],
		    (long long)acc_stored[k]);
		int64_t accounted = acc_stored[k] + acc_dropped[k] + acc_ended[k] + acc_deferred[k];
		if (trace)
			fprintf(stderr, "rank %d: file messages %llu lost %llu; accounted %lld\n", k,
			    row ? (unsigned long long)row[SW_S_MESSAGES] : 0ull,
			    row ? (unsigned long long)row[SW_S_LOST] : 0ull, (long long)accounted);
		if (!row) {	/* nothing of it reached a daemon that wrote the file (an end
				 * of it then is the writer's unknown_run) */
			accounted -= acc_deferred[k];
			ck_assert_msg(accounted == 0, "seed %d rank %d: %lld accounted, no row", seed,
			    k, (long long)accounted);
			continue;
		}
		/* the row's own account: what the sender reads in the file */
		uint64_t own = row[SW_S_STORED] + row[SW_S_DUPLICATES] + row[SW_S_OVERLAPS] +
		    row[SW_S_MISMATCHES] + row[SW_S_AFTER_END] + row[SW_S_BUDGET] + row[SW_S_LATE] +
		    row[SW_S_SENDERS_MISMATCH] + row[SW_S_NOMEM] + row[SW_S_STOPPING] +
		    row[SW_S_OPEN_STEPS] + row[SW_S_WRITE_ERROR] + row[SW_S_HEAD_MISSING] +
		    row[SW_S_ENDED];
		ck_assert_msg(own == row[SW_S_MESSAGES], "seed %d rank %d: the row's fields add "
		    "up to %llu, its messages %llu", seed, k, (unsigned long long)own,
		    (unsigned long long)row[SW_S_MESSAGES]);
		ck_assert_msg(row[SW_S_STORED] == (uint64_t)stored[k], "seed %d rank %d: the row "
		    "says %llu stored, the file holds %lld parts", seed, k,
		    (unsigned long long)row[SW_S_STORED], (long long)stored[k]);
		ck_assert_msg((int64_t)row[SW_S_MESSAGES] == accounted, "seed %d rank %d: the row "
		    "says %llu messages, the daemon accounted %lld (stored %lld, dropped %lld, "
		    "end %lld)", seed, k, (unsigned long long)row[SW_S_MESSAGES],
		    (long long)accounted, (long long)acc_stored[k], (long long)acc_dropped[k],
		    (long long)acc_ended[k]);
		/* everything it sent up to the last message a daemon heard of it */
		uint64_t upto = 0;
		for (int i = 0; i < snd[k].n; i++)
			if (!snd[k].m[i].drop && !snd[k].m[i].down)
				upto = snd[k].m[i].seq + 1;
		if (killed_since[k]) {	/* what the killed daemon held is in no count yet */
			ck_assert_uint_le(row[SW_S_MESSAGES] + row[SW_S_LOST], upto);
			continue;
		}
		/* an end after a restart is counted too (the writer finds its file) */
		ck_assert_int_eq(acc_unknown[k], 0);
		ck_assert_msg(row[SW_S_MESSAGES] + row[SW_S_LOST] == upto, "seed %d rank %d: "
		    "messages %llu + lost %llu, sent %llu up to the last one a daemon heard", seed, k,
		    (unsigned long long)row[SW_S_MESSAGES], (unsigned long long)row[SW_S_LOST],
		    (unsigned long long)upto);
	}
	free(tab);
}

static void
rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[1200];
	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.' || strlen(e->d_name) > 2) {
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* One schedule, from its seed. */
static void
schedule(int seed)
{
	rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)seed * 0x100000001b3ull);
	rnd(2);
	S = 1 + (int)rnd(MAXS);
	H = S > 1 ? S * HR : 2;
	T = 1 + (int)rnd(MAXT);
	INC = 1000 + (uint64_t)seed;
	int p_drop = (int)rnd(3) * 5, p_dup = (int)rnd(3) * 8, p_bad = rnd(4) == 0 ? 5 : 0;
	int p_end = rnd(5) ? 100 : 50;
	idle_s = rnd(4) == 0 ? 1 : 600;	/* idle closes between messages */
	budget = rnd(4) == 0 ? (int64_t)(1 + rnd(3)) * (sizeof(tensor) + LAYER_BYTES + 512) : 0;
	for (size_t i = 0; i < sizeof(tensor) / sizeof(float); i++)
		tensor[i] = (i % K) == 0 ? 0.5f : 0.5f / (K - 1);
	memset(snd, 0, sizeof(snd));
	memset(acc_stored, 0, sizeof(acc_stored));
	memset(acc_dropped, 0, sizeof(acc_dropped));
	memset(acc_ended, 0, sizeof(acc_ended));
	memset(acc_unknown, 0, sizeof(acc_unknown));
	memset(acc_deferred, 0, sizeof(acc_deferred));
	memset(killed_since, 0, sizeof(killed_since));
	for (int k = 0; k < S; k++) {
		struct sender *x = &snd[k];
		for (int64_t t = 0; t < T; t++)
			for (uint32_t l = 0; l < L; l++) {
				int copies = 1 + ((int)rnd(100) < p_dup);
				for (int c = 0; c < copies && x->n < MAXMSG - 1; c++) {
					struct smsg *m = &x->m[x->n++];
					m->step = t;
					m->layer = l;
					m->rank = (uint32_t)k;
					m->senders = (uint32_t)S + ((int)rnd(100) < p_bad);
					m->seq = x->seq++;
					m->drop = (int)rnd(100) < p_drop;
				}
			}
		if ((int)rnd(100) < p_end) {
			struct smsg *m = &x->m[x->n++];
			m->end = 1;
			m->rank = (uint32_t)k;
			m->senders = (uint32_t)S;
			m->seq = x->seq++;
		}
	}
	seen.schedules++;
	seen.senders += S;
	seen.budget += budget > 0;
	char dir[] = "/tmp/sw-accounting-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	atomic_store(&inflight, 0);
	njobs = 0;
	start_session(dir);
	uint64_t now = 1000;
	int restarts = rnd(3) == 0 ? 1 + (int)rnd(2) : 0, down = 0;
	for (;;) {
		int left = 0;
		for (int k = 0; k < S; k++)
			left += snd[k].n - snd[k].next;
		if (left == 0)
			break;
		int pick = (int)rnd((uint32_t)left), k = 0;
		while (pick >= snd[k].n - snd[k].next) {
			pick -= snd[k].n - snd[k].next;
			k++;
		}
		struct smsg *x = &snd[k].m[snd[k].next++];
		now += rnd(10) == 0 ? 1200 + rnd(600) : rnd(200);
		if (trace)
			fprintf(stderr, "t=%llu rank %u seq %llu %s step %lld layer %u senders %u%s%s\n",
			    (unsigned long long)now, x->rank, (unsigned long long)x->seq,
			    x->end ? "end" : "part", (long long)x->step, x->layer, x->senders,
			    x->drop ? " (lost)" : "", down > 0 ? " (no daemon)" : "");
		if (down > 0) {		/* no daemon runs: the message is lost */
			x->down = 1;
			if (--down == 0)
				start_session(dir);
			continue;
		}
		if (!x->drop && deliver(x, now))
			killed_since[x->rank] = 0;
		check_live();
		/* the work in flight ends in any order */
		while (njobs && rnd(3))
			run_job((int)rnd((uint32_t)njobs), now);
		if (rnd(4) == 0)
			swd_asm_tick(as, now);
		if (idle_s == 1 && rnd(3) == 0) {	/* a pause: steps time out, the run closes */
			now += 1000 + rnd(1000);
			swd_asm_tick(as, now);
			while (njobs)
				run_job((int)rnd((uint32_t)njobs), now);
			swd_asm_tick(as, now);
		}
		if (restarts && rnd(12) == 0) {
			restarts--;
			if (trace)
				fprintf(stderr, "stop\n");
			if (rnd(2)) {
				end_session(now);
				seen.sigterm++;
			} else {
				kill_session();
				seen.sigkill++;
			}
			down = (int)rnd(3);
			if (down == 0)
				start_session(dir);
		}
	}
	if (down > 0)
		start_session(dir);
	now += 5000;
	swd_asm_tick(as, now);
	end_session(now);
	ck_assert_int_eq(atomic_load(&inflight), 0);
	ck_assert_int_eq(held, 0);
	check_file(dir, seed);
	rm_dir(dir);
}


/*
 * ---- deterministic scenarios: a review's findings (issue 26), each a
 * schedule that broke the account: the writer's share counted again after
 * an idle close; late ends of a sender without inc and of one of two
 * shapes; parts of a layer split by rows whose heads were written missing;
 * a sender without inc that only drops after an idle close; messages after
 * a late end. ----
 */
static float rtensor[8 * R * K];
static int rv_cancel;

/* One message of a single-sender run "rv" with `heads` heads, inc, at now. */
static int
rv_send(uint32_t heads, uint64_t inc, int end, int64_t step, uint32_t layer, uint64_t seq,
    uint64_t now)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	m.type = end ? SWP_END : SWP_SNAPSHOT;
	snprintf(m.run, sizeof(m.run), "rv");
	snprintf(m.model, sizeof(m.model), "m");
	m.layers = L;
	m.heads = heads;
	m.rows = R;
	m.shape[0] = heads;
	m.shape[1] = R;
	m.shape[2] = K;
	m.dtype = SWP_F32;
	m.kind = SWP_PROBS;
	m.step = step;
	m.layer = layer;
	m.inc = inc;
	m.seq = seq;
	m.rank = 0;
	m.senders = 1;
	for (size_t i = 0; i < sizeof(rtensor) / sizeof(float); i++)
		rtensor[i] = (i % K) == 0 ? 0.5f : 0.5f / (K - 1);
	m.tensor = rtensor;
	m.tensor_bytes = (size_t)heads * R * K * sizeof(float);
	if (end)
		return swd_asm_end(as, &m, now);
	swd_ticket t;
	char why[256];
	int rc = swd_asm_admit(as, &m, now, &t, why, sizeof(why));
	if (rc != SWD_ASM_ACCEPT && rc != SWD_ASM_COPY)
		return rc;
	if (rv_cancel) {	/* the budget refuses its work (handle) */
		swd_asm_cancel(as, &t, SWD_DROP_BUDGET);
		return SWD_DROP_BUDGET;
	}
	struct job *j = &jobs[njobs++];
	j->t = t;
	j->m = m;
	j->m.tensor = NULL;
	j->parts = NULL;
	j->data = malloc(m.tensor_bytes);
	memcpy(j->data, rtensor, m.tensor_bytes);
	j->miss = NULL;
	j->reserved = m.tensor_bytes + LAYER_BYTES;
	atomic_fetch_add(&inflight, (long long)j->reserved);
	swd_asm_start(as, &t);
	while (njobs)
		run_job(0, now);
	return rc;
}

static void
rv_stop(uint64_t now)
{
	swd_asm_stop(as);
	while (njobs)
		run_job(0, now);
	swd_asm_shutdown(as);
	swd_writer_sync(writer);
	swd_writer_stop(&writer);
	swd_asm_free(&as);
}

/* A scenario's first session in a new directory dir (a mkdtemp template). */
static void
rv_begin(char *dir, int64_t idle, uint64_t inc, int senders)
{
	ck_assert_ptr_nonnull(mkdtemp(dir));
	atomic_store(&inflight, 0);
	budget = 0;
	idle_s = idle;
	INC = inc;
	S = senders;
	start_session(dir);
}

/* Whether dir/name is marked ended (sw_reader_ended), -1 if unreadable. */
static int
rv_ended(const char *dir, const char *name)
{
	char path[1200], err[512];
	sw_reader *r;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (sw_reader_open(path, &r, NULL, err, sizeof(err)) != 0)
		return -1;
	int e = sw_reader_ended(r);
	sw_reader_close(&r);
	return e;
}

/* Prints every sender row of every file of dir; returns the row count. */
static int
rv_dump(const char *dir, const char *name)
{
	char path[1200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	sw_reader *r;
	char err[512];
	if (sw_reader_open(path, &r, NULL, err, sizeof(err)) != 0) {
		if (trace)
			fprintf(stderr, "%s: %s\n", name, err);
		return -1;
	}
	uint64_t *tab = NULL;
	size_t nf = 0;
	int64_t ns = sw_reader_senders(r, &tab, &nf, err, sizeof(err));
	for (int64_t i = 0; i < ns; i++) {
		const uint64_t *w = tab + i * nf;
		if (trace)
			fprintf(stderr, "%s row %lld: inc %llu rank %llu messages %llu lost %llu stored %llu "
		    "dup %llu ended %llu after_end %llu\n", name, (long long)i,
		    (unsigned long long)w[SW_S_INC], (unsigned long long)w[SW_S_RANK],
		    (unsigned long long)w[SW_S_MESSAGES], (unsigned long long)w[SW_S_LOST],
		    (unsigned long long)w[SW_S_STORED], (unsigned long long)w[SW_S_DUPLICATES],
		    (unsigned long long)w[SW_S_ENDED], (unsigned long long)w[SW_S_AFTER_END]);
	}
	free(tab);
	sw_reader_close(&r);
	return (int)ns;
}

/* A: the writer's fates are counted again after an idle close and reopen. */
START_TEST(test_rv_fates_after_idle)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 1, 77, 1);
	uint64_t now = 1000, inc = 77;
	rv_send(2, inc, 0, 0, 0, 0, now);
	rv_send(2, inc, 0, 0, 1, 1, now);
	now += 3000; swd_asm_tick(as, now);	/* idle: closed */
	rv_send(2, inc, 0, 0, 0, 2, now);	/* step 0 again: the writer's duplicate */
	rv_send(2, inc, 0, 0, 1, 3, now);
	now += 3000; swd_asm_tick(as, now);	/* idle: closed */
	rv_send(2, inc, 0, 1, 0, 4, now);	/* step 1: stored */
	rv_send(2, inc, 0, 1, 1, 5, now);
	rv_send(2, inc, 1, 0, 0, 6, now);	/* end */
	rv_stop(now);
	rv_dump(dir, "rv.h5");
	sw_reader *r;
	char err[512], path[1200];
	snprintf(path, sizeof(path), "%s/rv.h5", dir);
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	uint64_t *tab = NULL;
	size_t nf = 0;
	ck_assert_int_eq(sw_reader_senders(r, &tab, &nf, err, sizeof(err)), 1);
	ck_assert_uint_eq(tab[SW_S_MESSAGES], 7);
	ck_assert_msg(tab[SW_S_STORED] == 4 && tab[SW_S_DUPLICATES] == 2,
	    "stored %llu (file holds 2 steps = 4 layers), duplicates %llu (2 sent again)",
	    (unsigned long long)tab[SW_S_STORED], (unsigned long long)tab[SW_S_DUPLICATES]);
	free(tab);
	sw_reader_close(&r);
	idle_s = 600;
	rm_dir(dir);
}
END_TEST

/* B: an end without inc after its run was closed idle. */
START_TEST(test_rv_unnamed_end_after_idle)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 1, 0, 1);
	uint64_t now = 1000;
	rv_send(2, 0, 0, 0, 0, 0, now);
	rv_send(2, 0, 0, 0, 1, 1, now);
	now += 3000; swd_asm_tick(as, now);	/* idle: closed */
	int rc = rv_send(2, 0, 1, 0, 0, 2, now);	/* its end */
	if (trace)
		fprintf(stderr, "B: end rc %d\n", rc);
	rv_stop(now);
	int n = rv_dump(dir, "rv.h5");
	ck_assert_msg(n == 1, "one sender, %d rows in the sender table", n);
	ck_assert_int_eq(rv_ended(dir, "rv.h5"), 1);
	idle_s = 600;
	rm_dir(dir);
}
END_TEST

/* C: two shapes of one id closed idle; the end of one's incarnation. */
START_TEST(test_rv_end_two_shapes)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 1, 0, 1);
	uint64_t now = 1000;
	rv_send(2, 11, 0, 0, 0, 0, now);	/* shape A, inc 11 */
	rv_send(4, 22, 0, 0, 0, 0, now);	/* shape B, inc 22 */
	rv_send(2, 11, 0, 0, 1, 1, now);
	rv_send(4, 22, 0, 0, 1, 1, now);
	now += 3000; swd_asm_tick(as, now);	/* both closed idle */
	int rc = rv_send(2, 11, 1, 0, 0, 2, now);	/* inc 11's end */
	if (trace)
		fprintf(stderr, "C: end rc %d\n", rc);
	rv_stop(now);
	DIR *d = opendir(dir);
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			rv_dump(dir, e->d_name);
	closedir(d);
	ck_assert_int_eq(rv_ended(dir, "rv.h5"), 1);	/* inc 11's shape */
	ck_assert_int_eq(rv_ended(dir, "rv@2.h5"), 0);	/* inc 22 never ended */
	int bad = 0;
	char path[1200];
	snprintf(path, sizeof(path), "%s/rv@2.h5", dir);
	sw_reader *r;
	char err[512];
	if (sw_reader_open(path, &r, NULL, err, sizeof(err)) == 0) {
		uint64_t *tab = NULL;
		size_t nf = 0;
		int64_t ns = sw_reader_senders(r, &tab, &nf, err, sizeof(err));
		for (int64_t i = 0; i < ns; i++)
			bad |= tab[i * nf + SW_S_INC] == 11;
		free(tab);
		sw_reader_close(&r);
	}
	ck_assert_msg(!bad, "inc 11's end counted in the file of the other shape (inc 22)");
	idle_s = 600;
	rm_dir(dir);
}
END_TEST

/* A part of a 2-sender incarnation of run "rp" (heads 2, rows R): heads h0..h0+nh-1, rows q0..q0+nq-1. */
static int
rp_part(uint32_t rank, int64_t step, uint32_t layer, uint64_t seq, uint32_t h0, uint32_t nh,
    uint32_t q0, uint32_t nq, uint64_t now)
{
	swp_msg m;
	memset(&m, 0, sizeof(m));
	m.type = SWP_SNAPSHOT;
	snprintf(m.run, sizeof(m.run), "rp");
	snprintf(m.model, sizeof(m.model), "m");
	m.layers = L;
	m.heads = 2;
	m.rows = R;
	m.shape[0] = nh;
	m.shape[1] = nq;
	m.shape[2] = K;
	m.head0 = h0;
	m.row0 = q0;
	m.dtype = SWP_F32;
	m.kind = SWP_PROBS;
	m.step = step;
	m.layer = layer;
	m.inc = 5;
	m.seq = seq;
	m.rank = rank;
	m.senders = 2;
	for (size_t i = 0; i < sizeof(rtensor) / sizeof(float); i++)
		rtensor[i] = (i % K) == 0 ? 0.5f : 0.5f / (K - 1);
	m.tensor = rtensor;
	m.tensor_bytes = (size_t)nh * nq * K * sizeof(float);
	swd_ticket t;
	char why[256];
	return swd_asm_admit(as, &m, now, &t, why, sizeof(why));
}

/* D: row parts; one never comes: every head of the layer is missing, yet
 * the part that came is counted stored. */
START_TEST(test_rv_row_parts_stored)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 600, 5, 2);
	uint64_t now = 1000;
	/* layer 0: whole from both ranks; layer 1: only rank 0's rows 0-1 */
	rp_part(0, 0, 0, 0, 0, 2, 0, 2, now);
	rp_part(1, 0, 0, 0, 0, 2, 2, 1, now);
	rp_part(0, 0, 1, 1, 0, 2, 0, 2, now);
	while (njobs)
		run_job(0, now);
	now += 5000; swd_asm_tick(as, now);	/* timeout: layer 1 starts as it is */
	while (njobs)
		run_job(0, now);
	swd_asm_tick(as, now);
	rv_stop(now);
	char path[1200], err[512];
	snprintf(path, sizeof(path), "%s/rp.h5", dir);
	sw_reader *r;
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(sw_reader_refresh(r, err, sizeof(err)), 1);
	double mr[L * 2];
	ck_assert_int_eq(sw_reader_read(r, "missing_rank", 0, 1, mr, L * 2, err, sizeof(err)), L * 2);
	if (trace)
		fprintf(stderr, "D: missing_rank layer0 %g %g layer1 %g %g\n", mr[0], mr[1], mr[2], mr[3]);
	rv_dump(dir, "rp.h5");
	uint64_t *tab = NULL;
	size_t nf;
	int64_t ns = sw_reader_senders(r, &tab, &nf, err, sizeof(err));
	uint64_t st0 = 0;
	for (int64_t i = 0; i < ns; i++)
		if (tab[i * nf + SW_S_RANK] == 0)
			st0 = tab[i * nf + SW_S_STORED];
	int heads_l1 = (mr[2] == -1) + (mr[3] == -1);
	ck_assert_msg(!(heads_l1 == 0 && st0 == 2), "rank 0: stored %llu, but layer 1 (its "
	    "second message) has no head present", (unsigned long long)st0);
	free(tab);
	sw_reader_close(&r);
	rm_dir(dir);
}
END_TEST

/* E: an unnamed sender's run closed idle; after it, one message refused
 * (budget) and its end: neither is in any row, the file is not ended. */
START_TEST(test_rv_unnamed_drop_after_idle)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 1, 0, 1);
	uint64_t now = 1000;
	rv_send(2, 0, 0, 0, 0, 0, now);
	rv_send(2, 0, 0, 0, 1, 1, now);
	now += 3000; swd_asm_tick(as, now);	/* idle: closed */
	rv_cancel = 1;
	rv_send(2, 0, 0, 1, 0, 2, now);		/* refused: budget */
	rv_cancel = 0;
	int rc = rv_send(2, 0, 1, 0, 0, 3, now);	/* its end */
	if (trace)
		fprintf(stderr, "E: end rc %d\n", rc);
	rv_stop(now);
	rv_dump(dir, "rv.h5");
	ck_assert_int_eq(rv_ended(dir, "rv.h5"), 1);
	char path[1200], err[512];
	snprintf(path, sizeof(path), "%s/rv.h5", dir);
	sw_reader *r;
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	uint64_t *tab = NULL;
	size_t nf;
	int64_t ns = sw_reader_senders(r, &tab, &nf, err, sizeof(err));
	uint64_t tot = 0;
	for (int64_t i = 0; i < ns; i++)
		tot += tab[i * nf + SW_S_MESSAGES] + tab[i * nf + SW_S_LOST];
	ck_assert_msg(tot == 4, "4 messages sent (seq 0..3), the rows account for %llu",
	    (unsigned long long)tot);
	free(tab);
	sw_reader_close(&r);
	idle_s = 600;
	rm_dir(dir);
}
END_TEST

/* F: a message after its sender's end, the end deferred (run closed idle). */
START_TEST(test_rv_after_deferred_end)
{
	char dir[] = "/tmp/sw-rv-XXXXXX";
	rv_begin(dir, 1, 77, 1);
	uint64_t now = 1000;
	rv_send(2, 77, 0, 0, 0, 0, now);
	rv_send(2, 77, 0, 0, 1, 1, now);
	now += 3000; swd_asm_tick(as, now);	/* idle: closed */
	int rc = rv_send(2, 77, 1, 0, 0, 2, now);	/* its end: deferred */
	int rc2 = rv_send(2, 77, 0, 1, 0, 3, now);	/* after its end */
	int rc3 = rv_send(2, 77, 0, 1, 1, 4, now);
	if (trace)
		fprintf(stderr, "F: end rc %d, then %d %d (after_end is %d)\n", rc, rc2, rc3, SWD_DROP_AFTER_END);
	rv_stop(now);
	rv_dump(dir, "rv.h5");
	ck_assert_int_eq(rv_ended(dir, "rv.h5"), 1);	/* still ended: nothing after the end */
	ck_assert_int_eq(rc2, SWD_DROP_AFTER_END);
	idle_s = 600;
	rm_dir(dir);
}
END_TEST

/*
 * G: a daemon killed inside its flush left the sender table ahead of the
 * rows (HDF5 flushes in its own order): the row says 8 messages stored, the
 * rows hold 4 (steps 0 and 1). The sender goes on at step 4 (seq 8): the 4
 * messages of steps 2 and 3 were received and never stored, so the restart
 * counts them lost, and the row's account adds up again.
 */
START_TEST(test_rv_sender_row_ahead)
{
	char dir[] = "/tmp/sw-rv-XXXXXX", path[1200];
	rv_begin(dir, 600, 91, 1);
	uint64_t now = 1000, inc = 91, seq = 0;
	for (int64_t st = 0; st < 2; st++)
		for (uint32_t l = 0; l < L; l++)
			rv_send(2, inc, 0, st, l, seq++, now);
	rv_stop(now);
	snprintf(path, sizeof(path), "%s/rv.h5", dir);
	/* the torn flush: the sender row as if steps 2 and 3 were stored too */
	hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
	ck_assert(f >= 0);
	hid_t ds = H5Dopen2(f, "senders", H5P_DEFAULT);
	ck_assert(ds >= 0);
	hid_t sp = H5Dget_space(ds);
	hsize_t dims[2];
	H5Sget_simple_extent_dims(sp, dims, NULL);
	ck_assert_uint_eq(dims[0], 1);
	uint64_t *row = calloc(dims[1], sizeof(uint64_t));
	ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, row), 0);
	ck_assert_uint_eq(row[SW_S_STORED], 4);
	row[SW_S_STORED] += 4;
	row[SW_S_MESSAGES] += 4;
	row[SW_S_SEQ_NEXT] = 8;
	ck_assert_int_ge(H5Dwrite(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, row), 0);
	free(row);
	H5Sclose(sp);
	H5Dclose(ds);
	H5Fclose(f);
	/* the next daemon */
	start_session(dir);
	seq = 8;
	for (int64_t st = 4; st < 6; st++)
		for (uint32_t l = 0; l < L; l++)
			rv_send(2, inc, 0, st, l, seq++, now);
	rv_send(2, inc, 1, 0, 0, seq++, now);	/* the end: seq 12 */
	rv_stop(now);
	rv_dump(dir, "rv.h5");
	sw_reader *r;
	char err[512];
	ck_assert_int_eq(sw_reader_open(path, &r, NULL, err, sizeof(err)), 0);
	uint64_t *tab = NULL;
	size_t nf = 0;
	ck_assert_int_eq(sw_reader_senders(r, &tab, &nf, err, sizeof(err)), 1);
	ck_assert_msg(tab[SW_S_LOST] == 4 && tab[SW_S_STORED] == 8 &&
	    tab[SW_S_MESSAGES] + tab[SW_S_LOST] == seq,
	    "lost %llu (4: steps 2 and 3), stored %llu (8: steps 0, 1, 4, 5), messages %llu + "
	    "lost = %llu sent", (unsigned long long)tab[SW_S_LOST],
	    (unsigned long long)tab[SW_S_STORED], (unsigned long long)tab[SW_S_MESSAGES],
	    (unsigned long long)seq);
	free(tab);
	sw_reader_close(&r);
	/* the run's lost dataset says the same */
	f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	ds = H5Dopen2(f, "lost", H5P_DEFAULT);
	int64_t lost[8] = { 0 };
	sp = H5Dget_space(ds);
	H5Sget_simple_extent_dims(sp, dims, NULL);
	ck_assert_uint_eq(dims[0], 4);
	H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, lost);
	ck_assert_int_eq(lost[3], 4);
	H5Sclose(sp);
	H5Dclose(ds);
	H5Fclose(f);
	rm_dir(dir);
}
END_TEST


START_TEST(test_invariant_random_schedules)
{
	const char *e = getenv("SW_ACCOUNTING_SEED"), *n = getenv("SW_ACCOUNTING_N");
	int s0 = e ? atoi(e) : 0, count = n ? atoi(n) : 400;
	memset(&seen, 0, sizeof(seen));
	for (int seed = s0; seed < s0 + count; seed++)
		schedule(seed);
	fprintf(stderr, "accounting: %d schedules, %d senders, %d with a budget, %d SIGTERM, "
	    "%d SIGKILL, %d runs reopened after an idle close, %d parts kept\n", seen.schedules,
	    seen.senders, seen.budget, seen.sigterm, seen.sigkill, seen.reopened, seen.kept);
	ck_assert_int_gt(seen.kept, 0);
}
END_TEST

int
main(void)
{
	trace = getenv("SW_ACCOUNTING_LOG") != NULL;
	log_set_level(trace ? atoi(getenv("SW_ACCOUNTING_LOG")) : LOG_ERR);
	Suite *s = suite_create("accounting");
	TCase *tc = tcase_create("invariant");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_rv_fates_after_idle);
	tcase_add_test(tc, test_rv_unnamed_end_after_idle);
	tcase_add_test(tc, test_rv_end_two_shapes);
	tcase_add_test(tc, test_rv_row_parts_stored);
	tcase_add_test(tc, test_rv_unnamed_drop_after_idle);
	tcase_add_test(tc, test_rv_after_deferred_end);
	tcase_add_test(tc, test_rv_sender_row_ahead);
	tcase_add_test(tc, test_invariant_random_schedules);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
