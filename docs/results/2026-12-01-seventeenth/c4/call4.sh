#!/usr/bin/env bash
# Seventeenth session, call 4 (one H200): the send error in one fma (tree.txt) against c2's final
# device code (2d4a601): echo-perf A/B, 3 passes, 4-bit + EF, 8-bit + EF, fp32 4-bit + EF and
# 4-bit (a control: its kernels are the same SASS); then the zero_aware, naive_zero_point,
# features, soak and tile_codec GPU tests at P = 2, zero_aware at P = 3, 4, 8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s17
cp $S/tree4.txt $R/tree.txt
tar -xJf $S/c4.tar.xz; mkdir -p /tmp/b && tar -xJf $S/ab4.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
for pass in 1 2 3; do
  for b in c2 final; do
    bin=/tmp/b/build-$b/benchmark/echo-perf; [ $b = final ] && bin=build/benchmark/echo-perf
    for c in "int4_ef:-B 4 -c error_feedback" "int8_ef:-B 8 -c error_feedback" "f32_int4_ef:-B 4 -c error_feedback -d fp32" "int4:-B 4"; do
      timeout 60 $bin -g 2 $share -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-c2,build-final > $R/ab.txt 2>&1
ECHO_SOAK_CALLS=3000 timeout 200 ctest --test-dir build -L gpu -LE ranks -R "zero_aware|naive|features|soak|tile_codec" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 110 ] && { timeout $left ctest --test-dir build -R "zero_aware@P" --output-on-failure > $R/ctest-za-ranks.log 2>&1; echo "ctest za ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt
tar -czf $OUT/c4.tar.gz -C $OUT r
