/* refloops.h: the reference loops of bench/refloops.c (issue 30) */
#ifndef SW_BENCH_REFLOOPS_H
#define SW_BENCH_REFLOOPS_H
#include <stddef.h>

struct swb_refloop {
	const char *name, *isa;		/* isa: "avx512" or "avx2" */
	int chains, depth;		/* independent chains a turn, FMAs each */
	double (*fn)(const double *x, size_t n);	/* n a multiple of 8 */
};

/* ended by a NULL name */
extern const struct swb_refloop swb_refloops[];
#endif
