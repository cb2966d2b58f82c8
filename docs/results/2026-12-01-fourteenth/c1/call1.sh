#!/usr/bin/env bash
# Fourteenth session, call 1 (one H200): EXPERIMENT ECHO_EXP_STAGE=1 (each lane's input run staged
# through shared memory with cp.async, one sub-tile ahead) against the same tree without it, P = 2
# on the one GPU; its soak and features tests at P = 2.
set -uo pipefail
R=$OUT/r; mkdir -p $R
cp .gpubin/s14/tree.txt $R/tree.txt
tar -xJf .gpubin/s14/c1.tar.xz
for b in build build-stage; do cuobjdump --dump-resource-usage $b/benchmark/echo-perf > $R/resources-$b.txt 2>&1; done
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=1000 timeout 200 build-stage/test/gpu/echo_test_collective_soak > $R/soak-stage.log 2>&1; echo "soak rc $?" | tee -a $R/rc.txt
ECHO_TEST_RANKS=2 timeout 200 build-stage/test/gpu/echo_test_collective_all_reduce_features > $R/features-stage.log 2>&1; echo "features rc $?" | tee -a $R/rc.txt
for pass in 1 2 3; do
  for b in build build-stage; do
    for c in "int4:-q zero_aware -B 4 -c none" "int4_ef:-q zero_aware -B 4 -c error_feedback" "int8:-q zero_aware -B 8 -c none"; do
      timeout 60 $b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 .gpubin/s14/ab.py $R build,build-stage | tee $R/ab.txt
tail -3 $R/soak-stage.log $R/features-stage.log
tar -czf $OUT/c1.tar.gz -C $OUT r
