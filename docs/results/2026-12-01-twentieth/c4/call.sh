#!/usr/bin/env bash
# Twentieth session, call 4 (one H200, ranks sharing it): the final tree (tree.txt: 16-byte flags
# read with one 16-byte acquire load, the review's other fixes). Every GPU test at P = 2 but
# transport/nccl (NCCL refuses two ranks on one GPU), then the P = 3 / 4 tests. (No echo-perf
# A/B: the test binaries fill the 64 MiB a call carries; c3 measured this code's flags.)
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s20
cp $S/tree4.txt $R/tree.txt
tar -xJf $S/c4.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
ECHO_SOAK_CALLS=2000 timeout 240 ctest --test-dir build -L gpu -LE ranks -E "transport/nccl" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
tar -czf $OUT/c4-tests.tar.gz -C $OUT r
left=$(( 560 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "P8" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c4.tar.gz -C $OUT r
