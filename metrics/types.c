/*
 * types.c: the metric library's names (statuses, input types), element
 * sizes and loads, and its options' defaults. No I/O, no state.
 */
#include <string.h>

#include "swm.h"
#include "swm_math.h"

static const char *const status_names[SWM_STATUS__N] = {
	"ok", "short", "nosink", "nonfinite", "negative", "sum"
};

const char *
swm_status_name(swm_status st)
{
	return (unsigned)st < SWM_STATUS__N ? status_names[st] : "invalid";
}

const char *
swm_dtype_name(swm_dtype dt)
{
	static const char *const names[SWM_DTYPE__N] = { "f32", "f16", "bf16", "f64" };
	return (unsigned)dt < SWM_DTYPE__N ? names[dt] : "invalid";
}

size_t
swm_dtype_size(swm_dtype dt)
{
	static const size_t sizes[SWM_DTYPE__N] = { 4, 2, 2, 8 };
	return (unsigned)dt < SWM_DTYPE__N ? sizes[dt] : 0;
}

void
swm_opts_default(swm_opts *o)
{
	o->delta = SWM_DEFAULT_DELTA;
	o->tol = -1;
}

double
swm_opts_tol(const swm_opts *o, swm_dtype dt)
{
	if (o->tol >= 0)
		return o->tol;
	return (dt == SWM_F16 || dt == SWM_BF16) ? SWM_TOL_F16 : SWM_TOL_F32;
}

double
swm_load(const void *x, swm_dtype dt, size_t i)
{
	return swm_ld(x, i, dt);
}
