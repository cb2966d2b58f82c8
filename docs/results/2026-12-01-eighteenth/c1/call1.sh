#!/usr/bin/env bash
# Eighteenth session, call 1 (one H200): ring lines kept in L2 (EXPERIMENT, ECHO_RING_L2).
# Four echo-perf builds of one tree (tree.txt): rl0 = as committed, rl1 = the consumer discards
# each 128-byte ring line it has read (discard.global.L2: no write-back of a dead line), rl2 = the
# producer stores packets with an L2 evict_last policy, rl3 = both. A/B with the ranks sharing the
# GPU, 3 passes; ncu DRAM bytes a value for rl0 / rl3 / rl1 (1 GiB); the soak and features tests
# built with rl3.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree1.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/c1.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; nvidia-smi -q | grep -i -A2 "L2\|persist" | head; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
for pass in 1 2 3; do
  for b in rl0 rl1 rl2 rl3; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback" "none16:-q none"; do
      timeout 60 $bin -g 2 $share -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-rl0,build-rl1 > $R/ab-rl1.txt 2>&1
python3 scripts/perf_ab.py $R build-rl0,build-rl2 > $R/ab-rl2.txt 2>&1
python3 scripts/perf_ab.py $R build-rl0,build-rl3 > $R/ab-rl3.txt 2>&1
for b in rl0 rl3 rl1; do
  ECHO_PROFILE_CONFIGS="int4 int4_ef int8" timeout 120 scripts/pipeline-profile.sh /tmp/b/build-$b $R/prof-$b "1G" > $R/prof-$b.log 2>&1; echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for t in soak all_reduce_features; do
  ECHO_SOAK_CALLS=2000 timeout 150 /tmp/b/build-rl3/test/gpu/echo_test_collective_$t > $R/test-rl3-$t.log 2>&1; echo "rl3 $t rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
cat $R/times.txt; cat $R/ab-rl*.txt; for b in rl0 rl3 rl1; do cat $R/prof-$b/pipeline-table.md; done; tail -3 $R/test-rl3-*.log
tar -czf $OUT/c1.tar.gz -C $OUT r
