#!/usr/bin/env bash
# Fifteenth session, call 6 (one H200, P = 2 on the one GPU), the final device code (tree.txt): the
# GPU tests c5 did not carry, at P = 2 (soak 3000 calls an object), features and soak at P = 3
# and 4, features at P = 8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s15/tree.txt $R/
tar -xJf .gpubin/s15/c6.tar.xz; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
Q="all_reduce_(zero_aware|symmetric|naive_zero_point)"
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=3000 timeout 200 ctest --test-dir build -L gpu -LE ranks -E "$Q|benchmark/echo-perf" > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 330 ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P" > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c6.tar.gz -C $OUT r
