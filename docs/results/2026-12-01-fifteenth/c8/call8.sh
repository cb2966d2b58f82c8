#!/usr/bin/env bash
# Fifteenth session, call 8 (one H200): the per-quantizer GPU tests with the review's additions to
# the extreme chains (tree.txt), at P = 2 and zero_aware at P = 3, 4 and 8. Device code as c5 / c6.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s15/tree.txt $R/
tar -xJf .gpubin/s15/c8.tar.xz; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
Q="all_reduce_(zero_aware|symmetric|naive_zero_point)"
ECHO_TEST_RANKS=2 timeout 150 ctest --test-dir build -L gpu -LE ranks -R "$Q" > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 170 ctest --test-dir build -L ranks -R "zero_aware@P" > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c8.tar.gz -C $OUT r
