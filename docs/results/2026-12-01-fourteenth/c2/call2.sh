#!/usr/bin/env bash
# Fourteenth session, call 2 (one H200): EXPERIMENT ECHO_EXP_COALESCE=1 (a warp's full sub-tile of
# input and of output moved through shared memory, so that every global access is 32 consecutive
# 16-byte vectors instead of lane runs 64 bytes apart) against the same tree without it, P = 2 on
# the one GPU; its soak and features tests; ncu (L2 bytes) for 4-bit and 8-bit at 1 GiB.
set -uo pipefail
R=$OUT/r; mkdir -p $R
cp .gpubin/s14/tree.txt $R/tree.txt
tar -xJf .gpubin/s14/c2.tar.xz
for b in build build-coal; do cuobjdump --dump-resource-usage $b/benchmark/echo-perf > $R/resources-$b.txt 2>&1; done
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=1000 timeout 200 build-coal/test/gpu/echo_test_collective_soak > $R/soak-coal.log 2>&1; echo "soak rc $?" | tee -a $R/rc.txt
ECHO_TEST_RANKS=2 timeout 200 build-coal/test/gpu/echo_test_collective_all_reduce_features > $R/features-coal.log 2>&1; echo "features rc $?" | tee -a $R/rc.txt
for pass in 1 2 3; do
  for b in build build-coal; do
    for c in "int4:-q zero_aware -B 4 -c none" "int4_ef:-q zero_aware -B 4 -c error_feedback" "int8:-q zero_aware -B 8 -c none" "none16:-q none -c none"; do
      timeout 60 $b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 .gpubin/s14/ab.py $R build,build-coal | tee $R/ab.txt
for b in build build-coal; do
  ECHO_PROFILE_CONFIGS="int4 int8" timeout 240 scripts/pipeline-profile.sh $b $R/prof-$b "1G" > $R/prof-$b.log 2>&1; echo "prof $b rc $?" | tee -a $R/rc.txt
  cat $R/prof-$b/pipeline-table.md
done
tail -n 3 $R/soak-coal.log $R/features-coal.log
tar -czf $OUT/c2.tar.gz -C $OUT r
