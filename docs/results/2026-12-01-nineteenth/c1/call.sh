#!/usr/bin/env bash
# Nineteenth session, call 1 (one H200, P = 2 ranks sharing it): line rings with in-band readiness
# (EXPERIMENT 5731a02, ECHO_EXPERIMENT_LINES) against the committed wide kernel. l0 = the tree as
# committed (flag words), l1 = the same tree built with -DECHO_EXPERIMENT_LINES. First the GPU tests
# built with l1 (soak, features, zero_aware: every wide-tier call through the line rings), then
# echo-perf A/B with the wide tier at every size (-W 1) and with the dispatch table's tiers.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s19
cp $S/tree.txt $R/tree.txt
mkdir -p /tmp/b && for f in $S/*.tar.xz; do tar -xJf $f -C /tmp/b; done
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
for t in soak all_reduce_features all_reduce_zero_aware; do
  ECHO_SOAK_CALLS=2000 timeout 150 /tmp/b/build-l1/test/gpu/echo_test_collective_$t > $R/test-l1-$t.log 2>&1
  echo "l1 $t rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for pass in 1 2; do
  for b in l0 l1; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4w:-B 4 -W 1" "int4efw:-B 4 -c error_feedback -W 1" "int8w:-B 8 -W 1" "none16w:-q none -W 1" "int4ef:-B 4 -c error_feedback"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-l0,build-l1 > $R/ab.txt 2>&1
cat $R/times.txt $R/ab.txt; tail -n 4 $R/test-l1-*.log
tar -czf $OUT/c1.tar.gz -C $OUT r
