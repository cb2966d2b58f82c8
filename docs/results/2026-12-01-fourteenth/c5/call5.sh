#!/usr/bin/env bash
# Fourteenth session, call 5 (one H200): compute-sanitizer racecheck, synccheck and memcheck over
# the soak (2000 random calls on long-lived objects, every output checked) and memcheck over the
# features test, P = 2 on the GPU, on the committed register-pressure change.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s14/tree.txt $R/tree.txt
tar -xJf .gpubin/s14/c5.tar.xz
export ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=2000
for tool in racecheck synccheck memcheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 1 build/test/gpu/echo_test_collective_soak > $R/soak-$tool.log 2>&1
  echo "soak $tool rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 build/test/gpu/echo_test_collective_all_reduce_features > $R/features-memcheck.log 2>&1
echo "features memcheck rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|mismatched\|test cases" $R/*.log
tar -czf $OUT/c5.tar.gz -C $OUT r
