#!/usr/bin/env bash
# Seventeenth session, call 2 (one H200): the final device code (tree.txt: c1's codec changes plus
# bf16 widened from 32-bit words under policies of 128 registers). echo-perf A/B with the ranks
# sharing the GPU, 3 passes: base = 4c1f433 (the sixteenth session's final code), final = this
# tree; then every P = 2 GPU test (soak 3000 calls an object) and zero_aware at P = 3, 4, 8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s17
cp $S/tree2.txt $R/tree.txt
tar -xJf $S/c2.tar.xz; mkdir -p /tmp/b && tar -xJf $S/ab2.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
for pass in 1 2 3; do
  for b in base final; do
    bin=/tmp/b/build-$b/benchmark/echo-perf; [ $b = final ] && bin=build/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback" "fp16_int4:-B 4 -d fp16" "sym4:-B 4 -q symmetric" "none16:-q none" "int8_ef:-B 8 -c error_feedback"; do
      timeout 60 $bin -g 2 $share -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-final > $R/ab.txt 2>&1
ECHO_SOAK_CALLS=3000 timeout 240 ctest --test-dir build -L gpu -LE ranks -E "transport/nccl|naive" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 110 ] && { timeout $left ctest --test-dir build -R "zero_aware@P" --output-on-failure > $R/ctest-za-ranks.log 2>&1; echo "ctest za ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; grep -E "Status|test cases|2\^32" $R/ctest-p2.log | head; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt
tar -czf $OUT/c2.tar.gz -C $OUT r
