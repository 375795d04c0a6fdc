/*
 * split.c: an entropy change split into sink growth and content
 * sharpening (METRICS.md §3), aggregate and paired forms, and shares.
 */
#include <math.h>

#include "swm.h"

void
swm_split_aggregate(const swm_head *h0, const swm_head *h1, swm_split *out)
{
	if (h0->rows == 0 || h1->rows == 0) {
		out->dH = out->sink = out->content = NAN;
		return;
	}
	double hcw_mid = 0.5 * (h0->Hcw + h1->Hcw);
	double w_mid = 0.5 * (h0->w + h1->w);
	out->dH = h1->H - h0->H;
	out->sink = (h1->hb - h0->hb) - (h1->s - h0->s) * hcw_mid;
	out->content = w_mid * (h1->Hcw - h0->Hcw);
}

size_t
swm_split_paired(const swm_row *r0, const swm_row *r1, size_t rows,
    swm_split *out)
{
	double dH = 0, sink = 0, content = 0;
	size_t used = 0;

	for (size_t r = 0; r < rows; r++) {
		const swm_row *a = &r0[r], *b = &r1[r];
		if (a->status != SWM_OK || b->status != SWM_OK)
			continue;
		used++;
		dH += b->H - a->H;
		sink += (b->hb - a->hb) - (b->s - a->s) * 0.5 * (a->Hc + b->Hc);
		content += 0.5 * (a->w + b->w) * (b->Hc - a->Hc);
	}
	if (used == 0) {
		out->dH = out->sink = out->content = NAN;
		return 0;
	}
	out->dH = dH / (double)used;
	out->sink = sink / (double)used;
	out->content = content / (double)used;
	return used;
}

void
swm_split_add(swm_split *a, const swm_split *b)
{
	a->dH += b->dH;
	a->sink += b->sink;
	a->content += b->content;
}

void
swm_split_shares(const swm_split *sp, double *sink_share, double *content_share)
{
	if (!(sp->dH < 0)) {
		*sink_share = *content_share = NAN;
		return;
	}
	*sink_share = sp->sink / sp->dH;
	*content_share = sp->content / sp->dH;
}
