#!/usr/bin/env bash
# Eighteenth session, call 7 (one H200): c6's block agents, v2 (tree.txt): thread 0 waits for a
# tile's flags while the block sleeps in a barrier, 32-bit slot arithmetic (build-v2,
# ECHO_BLOCK_AGENTS=1), and also discard.global.L2 of every line the block has read (build-v2d,
# =2). echo-perf A/B against the committed kernels (base), 3 passes; ncu HBM bytes at 1 GiB for
# both; the soak, features and zero_aware tests of v2d.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree7.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/c7.tar.xz -C /tmp/b
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
for pass in 1 2 3; do
  for b in base v2 v2d; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_ef_wide:-B 4 -c error_feedback -W 64M" "none16:-q none"; do
      timeout 60 $bin -g 2 $share -N 0 -b 64M -e 1G -f 2 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-v2 > $R/ab-v2.txt 2>&1
python3 scripts/perf_ab.py $R build-base,build-v2d > $R/ab-v2d.txt 2>&1
cat $R/ab-v2.txt $R/ab-v2d.txt | grep -v "^#"
for b in v2 v2d; do ECHO_PROFILE_CONFIGS="int4 int8" timeout 90 scripts/pipeline-profile.sh /tmp/b/build-$b $R/prof-$b "1G" > $R/prof-$b.log 2>&1; echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; head -5 $R/prof-$b/pipeline-table.md; done
for t in soak all_reduce_features all_reduce_zero_aware; do
  left=$(( 560 - ($(date +%s) - t0) )); [ $left -lt 30 ] && break
  ECHO_SOAK_CALLS=2000 timeout $left /tmp/b/build-v2d/test/gpu/echo_test_collective_$t > $R/test-v2d-$t.log 2>&1; echo "v2d $t rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
cat $R/times.txt; tail -n 3 $R/test-v2d-*.log
tar -czf $OUT/c7.tar.gz -C $OUT r
