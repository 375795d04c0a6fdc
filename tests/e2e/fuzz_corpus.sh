#!/bin/sh
# The fuzz targets (fuzz/) over their seed corpora and regression inputs:
# fuzz/corpus/NAME, and the golden messages for the decoder and the round
# trip. A target aborts on a broken property and the sanitizer builds stop
# on a memory error, so each input that once crashed stays fixed. Runs with
# the libFuzzer build too (a libFuzzer target given files runs each once).
#
#   SINKWATCHD=./sinkwatchd SW_SRCDIR=. sh tests/e2e/fuzz_corpus.sh
set -u
src=${SW_SRCDIR:-.}
build=$(dirname "${SINKWATCHD:-./sinkwatchd}")
rc=0
for n in decode roundtrip conf control runfile; do
	t=$build/fuzz/$n
	if [ ! -x "$t" ]; then
		echo "FAIL $n: $t not built"
		rc=1
		continue
	fi
	set -- "$src"/fuzz/corpus/$n/*
	case $n in decode|roundtrip) set -- "$@" "$src"/tests/data/golden/*.msg ;; esac
	log=$(mktemp)
	# libhdf5's own leaks on corrupt files are not ours (fuzz/hdf5.supp)
	if LSAN_OPTIONS="suppressions=$src/fuzz/hdf5.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
	    "$t" "$@" >"$log" 2>&1; then
		echo "ok   $n: $# inputs"
	else
		echo "FAIL $n:"
		tail -n 40 "$log"
		rc=1
	fi
	rm -f "$log"
done
exit $rc
