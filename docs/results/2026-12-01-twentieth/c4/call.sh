#!/usr/bin/env bash
# Twentieth session, call 4 (one H200, ranks sharing it): the final tree (tree.txt: 16-byte flags
# read with one 16-byte acquire load, the review's other fixes). Every GPU test at P = 2 but
# transport/nccl (NCCL refuses two ranks on one GPU), the P = 3 / 4 tests, then an echo-perf A/B
# against the code before (old = 894690f) from 16 MiB to 1 GiB, 2 passes.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s20
cp $S/tree4.txt $R/tree.txt
tar -xJf $S/c4.tar.xz; mkdir -p /tmp/b && tar -xJf $S/old.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
ECHO_SOAK_CALLS=2000 timeout 240 ctest --test-dir build -L gpu -LE ranks -E "transport/nccl" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
tar -czf $OUT/c4-tests.tar.gz -C $OUT r
for pass in 1 2; do
  for b in old final; do
    bin=/tmp/b/build-old/benchmark/echo-perf; [ $b = final ] && bin=build/benchmark/echo-perf
    for c in "int4:-B 4" "int4_ef:-B 4 -c error_feedback" "int8:-B 8" "none16:-q none"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-old,build-final > $R/ab.txt 2>&1
tar -czf $OUT/c4-ab.tar.gz -C $OUT r
left=$(( 560 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "P8" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt
tar -czf $OUT/c4.tar.gz -C $OUT r
