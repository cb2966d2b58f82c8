#!/usr/bin/env bash
# Nineteenth session, call 2 (one H200, P = 2 ranks sharing it): line rings, second build
# (EXPERIMENT 5731a02 + its fix: the line rings in their own workspace region, staging rows
# aligned to 16 B, the reduce waiting on the flags alone before it reads). l0 = c1's committed
# build (flag words; its wide path is the same code), l1 = -DECHO_EXPERIMENT_LINES (each line
# discarded from L2 once read), l2 = -DECHO_EXPERIMENT_LINES=2 (no discard). GPU tests built with
# l1; echo-perf A/B with the wide tier at every size (-W 1); ncu HBM bytes of l1 and l2 (4-bit, 4-bit + EF, wide).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s19
cp $S/tree.txt $R/tree.txt
mkdir -p /tmp/b && for f in $S/*.tar.xz; do tar -xJf $f -C /tmp/b; done
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
for t in soak all_reduce_features all_reduce_zero_aware; do
  ECHO_SOAK_CALLS=2000 timeout 120 /tmp/b/build-l1/test/gpu/echo_test_collective_$t > $R/test-l1-$t.log 2>&1
  echo "l1 $t rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
tar -czf $OUT/c2-tests.tar.gz -C $OUT r
for pass in 1 2; do
  for b in l0 l1 l2; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4w:-B 4 -W 1" "int4efw:-B 4 -c error_feedback -W 1" "int8w:-B 8 -W 1" "none16w:-q none -W 1"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-l0,build-l1,build-l2 > $R/ab.txt 2>&1
cat $R/times.txt $R/ab.txt; tail -n 3 $R/test-l1-*.log
tar -czf $OUT/c2-ab.tar.gz -C $OUT r
for b in l1 l2; do
  ECHO_PROFILE_FLAGS="-W 1" ECHO_PROFILE_CONFIGS="int4 int4_ef" timeout 100 scripts/pipeline-profile.sh /tmp/b/build-$b $R/prof-$b "1G" > $R/prof-$b.log 2>&1
  echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; cat $R/prof-$b/pipeline-table.md
done
tar -czf $OUT/c2.tar.gz -C $OUT r
