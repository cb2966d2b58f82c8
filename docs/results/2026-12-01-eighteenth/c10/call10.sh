#!/usr/bin/env bash
# Eighteenth session, call 10 (one H200): compute-sanitizer over the final device code (2d4a601's,
# which the seventeenth session ran without a sanitizer): memcheck over the tile_codec test (all
# but its exhaustive 2^32-pair case), memcheck and synccheck over the zero_aware test's cuda_ipc
# cases and memcheck over the features test, ranks sharing the GPU (ECHO_TEST_RANKS=2).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree10.txt $R/tree.txt
tar -xJf $S/c10.tar.xz
export ECHO_TEST_RANKS=2
G=build/test/gpu
run() { local name=$1 cap=$2; shift 2; timeout $cap compute-sanitizer --error-exitcode 1 "$@" > $R/$name.log 2>&1; echo "$name rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
run memcheck-tile_codec 120 --tool memcheck $G/echo_test_collective_tile_codec "-tce=*every pair*"
run memcheck-zero_aware 150 --tool memcheck $G/echo_test_collective_all_reduce_zero_aware "-tc=*cuda_ipc"
run synccheck-zero_aware 120 --tool synccheck $G/echo_test_collective_all_reduce_zero_aware "-tc=*cuda_ipc"
left=$(( 560 - ($(date +%s) - t0) )); [ $left -gt 30 ] && run memcheck-features $left --tool memcheck $G/echo_test_collective_all_reduce_features
cat $R/times.txt; grep -h "ERROR SUMMARY\|test cases\|assertions\|Status" $R/*.log
tar -czf $OUT/c10.tar.gz -C $OUT r
