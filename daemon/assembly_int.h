/*
 * assembly_int.h: the step assembly's own state (assembly.h is its
 * interface), shared by its four files, which call downwards only:
 * assembly.c (the interface) -> assembly_admit.c (a message admitted into
 * a step, layers launched, steps released) -> assembly_emit.c (a step
 * handed to the writer, runs finished) -> assembly_state.c (lookups,
 * budget, message lists, digests, what is remembered). One thread, no locks.
 */
#ifndef SWD_ASSEMBLY_INT_H
#define SWD_ASSEMBLY_INT_H

#include "daemon/assembly.h"

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
	/*
	 * Where head h's R K elements lie: a part's kept frame (conf.hold), or
	 * own[h], zeros where nothing came; NULL while nothing of it came.
	 * own[H] is for the heads still empty at launch (zeros).
	 */
	const void **head;	/* [H] */
	void **own;		/* [H + 1] */
	void **held;		/* [H] conf.hold's handles, nheld of them */
	size_t nheld;
	uint32_t heads;		/* H */
	/* H R K elements, these arrays, hold_extra a head: they go with the work */
	size_t data_bytes;
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
		uint64_t h;		/* as_id_hash(run, inc) */
		uint32_t rank;
	} lend[ENDED_RING];
	size_t nlend;
};

/* assembly_admit.c */
int as_maybe_finish(swd_asm *a, struct arun *r);
uint64_t as_msg_inc(swd_asm *a, struct arun *r, const swp_msg *m);
void as_seq_check(struct arun *r, struct ainc *i, struct asend *d, uint64_t seq);
struct asend *as_get_sender(swd_asm *a, struct arun *r, struct ainc *i, const swp_msg *m);
struct ainc *as_get_inc(swd_asm *a, struct arun *r, uint64_t inc, const swp_msg *m);
struct arun *as_find_run(swd_asm *a, const swd_meta *mm);
int as_launch(swd_asm *a, struct arun *r, struct astep *s, uint32_t l, int partial);
int as_settle(swd_asm *a, struct arun *r, struct astep *s);
int as_admit(swd_asm *a, const swp_msg *m, uint64_t now, swd_ticket *t, char *why, size_t len,
    struct asend **sdp);
void as_release(swd_asm *a, struct arun *r);

/* assembly_emit.c */
void as_finish_run(swd_asm *a, struct arun *r, int type);
void as_copy_done(swd_asm *a, const swd_ticket *t, swd_layer *ly);
int as_ml_reserve(const struct arun *r, struct astep *s, uint32_t l);
void as_ml_push(struct astep *s, uint32_t l, struct asend *d, uint64_t seq, uint32_t head0,
    uint32_t nh);
void as_ml_forget(struct astep *s, uint32_t l, struct asend *d, uint64_t seq);
void as_ml_drop(swd_asm *a, struct astep *s, uint32_t l, int reason);
void as_emit_senders(swd_asm *a, struct arun *r, struct ainc *only);
int32_t as_owner_of(const struct arun *r, const struct ainc *i, uint32_t l, uint32_t h, uint32_t q);
struct digest *as_find_digest(struct arun *r, int64_t step, uint64_t inc);
void as_emit_step(swd_asm *a, struct arun *r, struct astep *s);
struct astep *as_min_open(struct arun *r);
int as_whole(const struct arun *r, const struct astep *s);
int as_complete(const swd_asm *a, const struct arun *r, const struct astep *s);
struct astep *as_unblocked(const swd_asm *a, struct arun *r);
void as_emit_all(swd_asm *a, struct arun *r);

/* assembly_state.c */
uint64_t as_id_hash(const char *s, uint64_t inc);
int as_was_ended(const swd_asm *a, const char *run, uint64_t inc);
uint64_t as_implicit_inc(void);
void as_charge(swd_asm *a, long long bytes);
int as_over_budget(const swd_asm *a, size_t bytes);
void as_gather_free(swd_asm *a, struct gather *g);
void as_free_step(swd_asm *a, struct astep *s, uint32_t layers);
void as_digest_free(swd_asm *a, struct digest *d);
void as_free_run(swd_asm *a, struct arun *r);
void as_meta_from(swd_meta *mm, const swp_msg *m);
swd_witem *as_item(struct arun *r, int t);
struct asend *as_find_sender(struct ainc *i, uint32_t rank);
struct asend *as_new_sender(const struct arun *r, struct ainc *i, uint32_t rank, uint64_t seq);
void as_unlink_run(swd_asm *a, struct arun *r);
struct ainc *as_find_inc(struct arun *r, uint64_t inc);
void as_remember_implicit(swd_asm *a, struct arun *r, int ended);
const struct implicit *as_find_implicit(const swd_asm *a, const char *run);
void as_remember_finished(swd_asm *a, const struct arun *r, int ended);
struct arun *as_idlest(swd_asm *a);
int as_take_token(swd_asm *a, uint64_t now);
void as_note_refused(swd_asm *a, const char *run, int reason);
swd_witem *as_end_item(const swp_msg *m, uint64_t inc);
int as_inc_known(swd_asm *a, const char *run, uint64_t inc);
size_t as_fill_run(const struct arun *r, swd_asm_run *o);
const struct fin *as_fin_at(const swd_asm *a, size_t k);

#endif
