#!/usr/bin/env bash
# Fourteenth session, call 4 (one H200): the committed register-pressure change (32-bit tile indices
# in the phase schedule, the partition's quotients once a launch) against 54a7d98's echo-perf (A/B,
# 3 passes, P = 2 on the one GPU); every GPU test at P = 2 (soak at 3000 calls an object);
# all_reduce_features@P8, which c3's time limit cut.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s14/tree.txt $R/tree.txt
tar -xJf .gpubin/s14/c4.tar.xz; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
for b in build-base build; do cuobjdump --dump-resource-usage $b/benchmark/echo-perf > $R/resources-$b.txt 2>&1; done
for pass in 1 2 3; do
  for b in build-base build; do
    for c in "int4:-q zero_aware -B 4 -c none" "int4_ef:-q zero_aware -B 4 -c error_feedback" "int8:-q zero_aware -B 8 -c none" "none16:-q none -c none"; do
      timeout 60 $b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 .gpubin/s14/ab.py $R build-base,build | tee $R/ab.txt; echo "ab at $(( $(date +%s) - t0 ))" >> $R/times.txt
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=3000 timeout 240 ctest --test-dir build -L gpu -LE ranks > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 150 ctest --test-dir build -R "all_reduce_features@P8" > $R/ctest-features-p8.log 2>&1; echo "ctest features@P8 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test #|tests passed" $R/ctest-*.log
tar -czf $OUT/c4.tar.gz -C $OUT r
