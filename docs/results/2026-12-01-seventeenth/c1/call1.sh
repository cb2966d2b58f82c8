#!/usr/bin/env bash
# Seventeenth session, call 1 (one H200; the two-GPU kind not lent): the codec changes of 12a468c
# (tree.txt). First the new unit test (collective/tile_codec); then an echo-perf A/B with ranks
# sharing the GPU, 3 passes: base = 4c1f433 (the sixteenth session's final code), new = this tree,
# widen = this tree + bf16 widened from 32-bit words (vector_io), for 4-bit, 8-bit, 4-bit + EF,
# fp16 4-bit, symmetric 4-bit; then every P = 2 GPU test, zero_aware at P = 3, 4, 8, features and
# soak at P = 3, 4, as long as the call's time allows.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s17
cp $S/tree1.txt $R/tree.txt
tar -xJf $S/c1.tar.xz; mkdir -p /tmp/b && tar -xJf $S/ab.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
timeout 90 build/test/gpu/echo_test_collective_tile_codec > $R/tile_codec.log 2>&1; echo "tile_codec rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
for pass in 1 2 3; do
  for b in base new widen; do
    bin=/tmp/b/build-$b/benchmark/echo-perf; [ $b = new ] && bin=build/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback" "fp16_int4:-B 4 -d fp16" "sym4:-B 4 -q symmetric"; do
      timeout 60 $bin -g 2 $share -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-new,build-widen > $R/ab.txt 2>&1
ECHO_SOAK_CALLS=3000 timeout 220 ctest --test-dir build -L gpu -LE ranks -E "naive|symmetric|transport/nccl" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 120 ] && { timeout 130 ctest --test-dir build -R "zero_aware@P" --output-on-failure > $R/ctest-za-ranks.log 2>&1; echo "ctest za ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P|features@P8" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Status|test cases|tile_codec|2\^32" $R/tile_codec.log; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt
tar -czf $OUT/c1.tar.gz -C $OUT r
