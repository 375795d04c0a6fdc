/*
 * pick.c: which rows of a block get the pair work and keep their ln parts
 * for drift (LAYOUT.md, "Which probe rows the pair, drift and flip statistics use").
 *
 * No scratch: the choice within a causal sequence is a contiguous range of
 * rows (see seq_top), so the picks come out ascending without a sort, and
 * the share of each sequence is found by bisection on the number of rounds.
 */
#include "swm.h"

/* Valid keys of a causal row at position q, over `keys` keys. */
static size_t
nvalid_of(uint32_t q, size_t keys)
{
	return (size_t)q >= keys ? keys : (size_t)q + 1;
}

/*
 * The sequence that starts at row s: its end e (a new sequence starts where
 * qpos does not increase), its first eligible row g (two valid keys or
 * more) and its first full row f (every key valid; e if none). Within a
 * sequence qpos increases, so the valid key count never decreases: the
 * eligible rows are [g, e), the full ones [f, e), and g <= f.
 */
static size_t
seq_next(const uint32_t *qpos, size_t rows, size_t keys, size_t s, size_t *g,
    size_t *f)
{
	size_t e = s + 1;
	while (e < rows && qpos[e] > qpos[e - 1])
		e++;
	*g = *f = e;
	for (size_t r = e; r > s; r--) {
		size_t n = nvalid_of(qpos[r - 1], keys);
		if (n < 2)
			break;
		*g = r - 1;
		if (n == keys)
			*f = r - 1;
	}
	return e;
}

/*
 * The k longest rows of a sequence, ties to the lower index: the full rows
 * from the first on, then the shorter ones from the longest down. That is
 * the range [returned, returned + k), which ends at e once the full rows
 * are used up.
 */
static size_t
seq_top(size_t f, size_t e, size_t k)
{
	return k <= e - f ? f : e - k;
}

/* Rows that `rounds` rounds of the round-robin take, over every sequence. */
static size_t
taken_after(const uint32_t *qpos, size_t rows, size_t keys, size_t rounds)
{
	size_t total = 0, g, f;
	for (size_t s = 0, e; s < rows; s = e) {
		e = seq_next(qpos, rows, keys, s, &g, &f);
		total += e - g < rounds ? e - g : rounds;
	}
	return total;
}

size_t
swm_pick_rows(const uint32_t *qpos, size_t rows, size_t keys, size_t n,
    uint32_t *out)
{
	size_t m = n < rows ? n : rows;

	if (m == 0 || keys < 2)
		return 0;
	if (qpos == NULL) {
		/* every row is full: spread evenly, first and last included */
		if (m == 1) {
			out[0] = (uint32_t)((rows - 1) / 2);
			return 1;
		}
		for (size_t i = 0; i < m; i++)
			out[i] = (uint32_t)((uint64_t)i * (rows - 1) / (m - 1));
		return m;
	}

	/*
	 * Round t gives each sequence that has more than t eligible rows its
	 * (t+1)-th longest, in sequence order. The largest number of whole
	 * rounds T that fits in m picks, by bisection (taken_after grows with
	 * T); the rest, fewer than the sequences with rows left, go to the
	 * first of those in round T + 1.
	 */
	size_t g, f, most = 0;
	for (size_t s = 0, e; s < rows; s = e) {
		e = seq_next(qpos, rows, keys, s, &g, &f);
		most = e - g > most ? e - g : most;
	}
	size_t all = taken_after(qpos, rows, keys, most);
	if (m > all)
		m = all;
	size_t lo = 0, hi = most;
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (taken_after(qpos, rows, keys, mid) <= m)
			lo = mid;
		else
			hi = mid - 1;
	}
	size_t extra = m - taken_after(qpos, rows, keys, lo), got = 0;
	for (size_t s = 0, e; s < rows; s = e) {
		e = seq_next(qpos, rows, keys, s, &g, &f);
		size_t k = e - g < lo ? e - g : lo;
		if (e - g > lo && extra > 0) {
			k++;
			extra--;
		}
		if (k == 0)
			continue;
		for (size_t r = seq_top(f, e, k), i = 0; i < k; i++)
			out[got++] = (uint32_t)(r + i);
	}
	return got;
}

size_t
swm_pick_all(size_t rows, uint32_t *out)
{
	for (size_t r = 0; r < rows; r++)
		out[r] = (uint32_t)r;
	return rows;
}

ptrdiff_t
swm_pick_find(const uint32_t *pick, size_t npick, size_t row)
{
	size_t lo = 0, hi = npick;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pick[mid] < row)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < npick && pick[lo] == row ? (ptrdiff_t)lo : -1;
}
