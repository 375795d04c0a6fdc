#!/bin/sh
# bench/baseline.sh [COMMIT [DIR]]: builds the sinkwatchd of COMMIT (default
# f2c10cd, the tree issue 17 was filed on) in a git worktree at DIR (default
# /tmp/sinkwatch-baseline) and prints its path, for
#     make bench SINKWATCHD_BASELINE=$(sh bench/baseline.sh)
# which floods it beside the current daemon in the same run (TARGET
# ingest_tcp_f16_zero_loss_vs_baseline_processed).
set -e
commit=${1:-f2c10cd}
dir=${2:-/tmp/sinkwatch-baseline}
src=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -x "$dir/sinkwatchd" ]; then
	rm -rf "$dir"
	git -C "$src" worktree prune
	git -C "$src" worktree add -q --detach "$dir" "$commit" >&2
	(cd "$dir" && autoreconf -fi && ./configure -q && make -j"$(nproc)" sinkwatchd) >"$dir.log" 2>&1 ||
	    { echo "baseline.sh: the build of $commit failed, see $dir.log" >&2; exit 1; }
fi
echo "$dir/sinkwatchd"
