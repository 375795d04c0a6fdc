#!/bin/sh
# doc/METRICS.md is a copy of the metric contract (shared/METRICS.md); they
# must not drift. Skipped (77) where the shared copy is not beside the tree.
src=${SW_SRCDIR:-.}
shared="$src/../shared/METRICS.md"
[ -f "$shared" ] || { echo "no $shared: skipped"; exit 77; }
if cmp -s "$shared" "$src/doc/METRICS.md"; then
	echo "doc/METRICS.md matches shared/METRICS.md"
	exit 0
fi
echo "doc/METRICS.md differs from $shared: copy the contract again" >&2
diff -u "$shared" "$src/doc/METRICS.md" | head -40 >&2
exit 1
