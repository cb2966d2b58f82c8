#!/usr/bin/env bash
# Sixteenth session, call 3 (one H200, P = 2 with the ranks sharing it): compute-sanitizer over the
# per-quantizer test of zero_aware on the final device code (tree.txt), cuda_ipc (NCCL refuses two
# ranks on one GPU): memcheck over 4-bit / 128 (random sweeps and the extreme-value chains under
# the narrow, mid and wide policies: the lean wide one now prefetches) and 8-bit / 128 (the heavy
# policies), synccheck over 4-bit / 128.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s16/tree3.txt $R/tree.txt
tar -xJf .gpubin/s16/c3.tar.xz
export ECHO_TEST_RANKS=2
B=build/test/gpu/echo_test_collective_all_reduce_zero_aware
run() { local name=$1 cap=$2 tool=$3 tc=$4; timeout $cap compute-sanitizer --tool $tool --error-exitcode 1 $B -tc="$tc" > $R/$name.log 2>&1; echo "$name rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
run memcheck-za4 220 memcheck "zero_aware<4?128> cuda_ipc"
run memcheck-za8 150 memcheck "zero_aware<8?128> cuda_ipc"
left=$(( 520 - ($(date +%s) - t0) )); [ $left -gt 30 ] && run synccheck-za4 $left synccheck "zero_aware<4?128> cuda_ipc"
cat $R/times.txt; grep -h "ERROR SUMMARY\|test cases\|Status" $R/*.log
tar -czf $OUT/c3.tar.gz -C $OUT r
