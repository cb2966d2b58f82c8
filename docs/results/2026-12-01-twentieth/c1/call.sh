#!/usr/bin/env bash
# Twentieth session, call 1 (one H200; the two-GPU kind not lent, so P = 2 ranks share it): the
# adversarial review's fixes (tree.txt): flags with a 64-bit epoch, launch status from the launch
# call, fresh chains after a failed call, constructor arguments judged on every rank. First the
# fault tests (the new cases), every P = 2 GPU test but transport/nccl (NCCL refuses two ranks on
# one GPU), then the P = 3 / 4 tests as time allows. (The echo-perf A/B is call 2's: one call
# carries at most 64 MiB.)
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s20
cp $S/tree.txt $R/tree.txt
tar -xJf $S/c1.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
timeout 120 build/test/gpu/echo_test_collective_faults > $R/faults.log 2>&1; echo "faults rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
ECHO_SOAK_CALLS=2000 timeout 260 ctest --test-dir build -L gpu -LE ranks -E "transport/nccl|collective/faults" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
tar -czf $OUT/c1-tests.tar.gz -C $OUT r
left=$(( 570 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "P8" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Status|test cases|assertions" $R/faults.log | tail -3; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c1.tar.gz -C $OUT r
