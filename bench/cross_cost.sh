#!/bin/sh
# The cost of sinkwatchd --cross-layer-pairs 1 (sinkwatchd(8)): the same
# synthetic run (24 layers x 16 heads, 64 rows x 2048 keys, f16, default
# pair_rows 8) streamed to a daemon without and with the option, side by
# side; the daemon's CPU per step (utime + stime from /proc) and the run
# file's bytes per step.
#   SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch PYTHON=/usr/bin/python3 sh bench/cross_cost.sh
set -eu
: "${SINKWATCHD:=./sinkwatchd}" "${SINKWATCH:=./sinkwatch}" "${PYTHON:=/usr/bin/python3}"
L=${L:-24} H=${H:-16} STEPS=${STEPS:-6}
hz=$(getconf CLK_TCK)
for x in 0 1; do
	d=$(mktemp -d)
	"$SINKWATCHD" --listen "ipc://$d/s" --control "ipc://$d/c" --data-dir "$d/data" \
	    --cross-layer-pairs $x --log-level warn 2>"$d/log" &
	pid=$!
	sleep 0.5
	"$SINKWATCH" sim --run xc --connect "ipc://$d/s" --layers "$L" --heads "$H" --rows 64 \
	    --keys 2048 --dtype f16 --steps "$STEPS" --blocking >/dev/null 2>&1
	i=0
	until "$PYTHON" -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)
sys.exit(0 if f['ended'].shape[0] > 0 and f['step'].shape[0] >= $STEPS else 1)" "$d/data/xc.h5" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 600 ] || { echo "cross_cost: the run did not end" >&2; kill $pid; exit 1; }
		sleep 0.5
	done
	cpu=$(awk -v hz="$hz" '{print ($14 + $15) / hz}' /proc/$pid/stat)
	kill $pid
	wait $pid || true
	bytes=$(stat -c %s "$d/data/xc.h5")
	eval "cpu$x=$cpu bytes$x=$bytes"
	rm -rf "$d"
done
awk -v c0="$cpu0" -v c1="$cpu1" -v b0="$bytes0" -v b1="$bytes1" -v n="$STEPS" -v l="$L" -v h="$H" 'BEGIN {
	printf "cross-layer pairs, %dx%d heads, 2048 keys f16, 8 pair rows, %d steps: daemon CPU %.2f s/step with, %.2f without (%.1fx); file %.2f MB/step with, %.2f without (expected +%.2f MB: 16 (L*H)^2)\n",
	    l, h, n, c1 / n, c0 / n, c1 / c0, b1 / n / 1e6, b0 / n / 1e6, 16 * (l * h) ^ 2 / 1e6
}'
