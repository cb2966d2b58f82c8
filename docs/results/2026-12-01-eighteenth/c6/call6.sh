#!/usr/bin/env bash
# Eighteenth session, call 6 (one H200): the streaming (wide) schedule with a block as the agent
# of a tile (EXPERIMENT ECHO_BLOCK_AGENTS=1, tree.txt): a packet is read one grid iteration of
# B blocks after it is written instead of W warps, i.e. about 43 MB of traffic later instead of
# 350 MB. echo-perf A/B against the committed kernels (base), 3 passes, default tiers and forced
# wide (-W 64M); ncu HBM bytes at 1 GiB; the soak, features and zero_aware tests of the block build.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree6.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/c6.tar.xz -C /tmp/b
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
for pass in 1 2 3; do
  for b in base block; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_efW:-B 4 -c error_feedback -W 64M" "int4W:-B 4 -W 64M" "none16:-q none"; do
      timeout 60 $bin -g 2 $share -N 0 -b 64M -e 1G -f 2 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-block > $R/ab.txt 2>&1
cat $R/ab.txt
ECHO_PROFILE_CONFIGS="int4 int8" timeout 90 scripts/pipeline-profile.sh /tmp/b/build-block $R/prof-block "1G" > $R/prof-block.log 2>&1; echo "prof rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
head -5 $R/prof-block/pipeline-table.md
for t in soak all_reduce_features all_reduce_zero_aware; do
  left=$(( 560 - ($(date +%s) - t0) )); [ $left -lt 30 ] && break
  ECHO_SOAK_CALLS=2000 timeout $left /tmp/b/build-block/test/gpu/echo_test_collective_$t > $R/test-block-$t.log 2>&1; echo "block $t rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
cat $R/times.txt; tail -n 3 $R/test-block-*.log
tar -czf $OUT/c6.tar.gz -C $OUT r
