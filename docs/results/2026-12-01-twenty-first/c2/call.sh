#!/usr/bin/env bash
# Twenty-first session, call 2 (one H200, ranks sharing it): first the new construction test
# built against the code before this session's change (build-of: b3eb821's include/ with this
# session's faults.cu and test harness; it must fail: the refused rank's peers wait 120 s in
# the exchange and the workspace of the rank that allocated leaks); then this tree's (tree.txt)
# P = 3 / 4 tests (zero_aware, features, soak) and the new test at P = 3 / 4.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s21
cp $S/tree1.txt $R/tree.txt
tar -xJf $S/c1.tar.xz
mkdir -p /tmp/b && tar -xJf $S/of.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
tc="ranks whose workspace allocation*"
ECHO_TEST_RANKS=2 timeout 200 /tmp/b/echo_test_collective_faults -tc="$tc" > $R/faults-old.log 2>&1; echo "old faults P=2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
for P in 3 4; do
  ECHO_TEST_RANKS=$P timeout 60 build/test/gpu/echo_test_collective_faults -tc="$tc" > $R/faults-new-p$P.log 2>&1; echo "new faults P=$P rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
tar -czf $OUT/c2-faults.tar.gz -C $OUT r
left=$(( 560 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "P8" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Test +#|tests passed|tests failed" $R/ctest-ranks.log; grep -E "ERROR|CHECK|Status|test cases|rank [0-9]:" $R/faults-*.log | head -40
tar -czf $OUT/c2.tar.gz -C $OUT r
