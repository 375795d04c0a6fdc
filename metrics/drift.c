/*
 * drift.c: the drift of one head between two fixed-probe steps (METRICS.md
 * §4), over the rows accepted at both: the sink balance's root mean square
 * change and the content parts' Aitchison distance.
 */
#include <math.h>

#include "swm.h"

void
swm_drift(const swm_drift_side *a, const swm_drift_side *b, size_t rows, size_t keys,
    size_t sink, double *dsink, double *dcontent)
{
	double s2 = 0, c2 = 0;
	uint64_t n = 0, nc = 0;

	for (size_t r = 0; r < rows; r++) {
		const swm_row *x = &a->row[r], *y = &b->row[r];
		if (x->status != SWM_OK || y->status != SWM_OK)
			continue;
		n++;
		s2 += (x->b - y->b) * (x->b - y->b);
		/* the ln parts are kept for some rows only (LAYOUT.md, row_use) */
		ptrdiff_t ia = a->ln ? swm_pick_find(a->ln_rows, a->nln, r) : -1;
		ptrdiff_t ib = b->ln ? swm_pick_find(b->ln_rows, b->nln, r) : -1;
		if (ia >= 0 && ib >= 0 && x->n == y->n) {
			c2 += swm_content_dist2_f32(a->ln + (size_t)ia * keys,
			    b->ln + (size_t)ib * keys, x->n, sink);
			nc++;
		}
	}
	*dsink = n ? sqrt(s2 / (double)n) : NAN;
	*dcontent = nc ? sqrt(c2 / (double)nc) : NAN;
}
