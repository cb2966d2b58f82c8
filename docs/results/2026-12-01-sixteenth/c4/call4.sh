#!/usr/bin/env bash
# Sixteenth session, call 4 (one H200, P = 2 with the ranks sharing it): compute-sanitizer memcheck,
# racecheck and synccheck over every cuda_ipc case of the zero_aware test (4 and 8 bits, groups of
# 32, 128, 256: random sweeps and the extreme-value chains under the narrow, mid and wide
# policies) on the final device code (tree.txt). NCCL refuses two ranks on one GPU.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s16/tree3.txt $R/tree.txt
tar -xJf .gpubin/s16/c3.tar.xz
export ECHO_TEST_RANKS=2
B=build/test/gpu/echo_test_collective_all_reduce_zero_aware
run() { local name=$1 cap=$2 tool=$3; timeout $cap compute-sanitizer --tool $tool --error-exitcode 1 $B -tc="*cuda_ipc" > $R/$name.log 2>&1; echo "$name rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
run memcheck 150 memcheck
run synccheck 150 synccheck
left=$(( 480 - ($(date +%s) - t0) )); [ $left -gt 30 ] && run racecheck $left racecheck
cat $R/times.txt; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|test cases\|assertions\|Status" $R/*.log
tar -czf $OUT/c4.tar.gz -C $OUT r
