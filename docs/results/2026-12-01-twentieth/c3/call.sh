#!/usr/bin/env bash
# Twentieth session, call 3 (one H200, P = 2 ranks sharing it): c2 measured the 16-byte flags
# (two stores, an acquire of the epoch then a load of the stamp) 1-2 us slower at 64 KiB - 1 MiB.
# v2 = the same tree built with -DECHO_EXPERIMENT_FLAG_V2=1: a waiter reads both words with one
# 16-byte acquire load (EXPERIMENT commit); v2w = -DECHO_EXPERIMENT_FLAG_V2=2: that, and a flag
# published with one 16-byte release store (EXPERIMENT commit, tree.txt). Fault tests and soak
# (2000 calls) with both; then echo-perf A/B old (894690f) / new (c1's tree) / v2 / v2w, 3 passes,
# 64 KiB - 16 MiB, 200 iterations.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s20
cp $S/tree3.txt $R/tree.txt
mkdir -p /tmp/b && for f in old new v2 v2w; do tar -xJf $S/$f.tar.xz -C /tmp/b; done
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
for v in v2 v2w; do
  timeout 100 /tmp/b/build-$v/test/gpu/echo_test_collective_faults > $R/faults-$v.log 2>&1; echo "$v faults rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
  ECHO_SOAK_CALLS=2000 timeout 100 /tmp/b/build-$v/test/gpu/echo_test_collective_soak > $R/soak-$v.log 2>&1; echo "$v soak rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for pass in 1 2 3; do
  for b in old new v2 v2w; do
    bin=/tmp/b/build-$b/benchmark/echo-perf; [ $b = new ] && bin=/tmp/b/build/benchmark/echo-perf
    for c in "none16:-q none" "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 64K -e 16M -f 4 -n 200 -w 20 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-old,build-new,build-v2,build-v2w > $R/ab.txt 2>&1
cat $R/times.txt $R/ab.txt; grep -E "Status|test cases" $R/faults-v2*.log $R/soak-v2*.log
tar -czf $OUT/c3.tar.gz -C $OUT r
