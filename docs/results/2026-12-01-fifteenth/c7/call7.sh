#!/usr/bin/env bash
# Fifteenth session, call 7 (one H200, P = 2 on the one GPU): the final device code (1cecf6e) against
# 79defcc for fp16 and fp32, whose mid / heavy kernels ptxas now spills more in (c5 timed bf16).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
mkdir -p /tmp/b && tar -xJf .gpubin/s15/c7.tar.xz -C /tmp/b
for pass in 1 2 3; do
  for b in build-base build; do
    for c in "h_int4:-d fp16 -B 4 -c none" "h_int4_ef:-d fp16 -B 4 -c error_feedback" "h_int8:-d fp16 -B 8 -c none" "f_int4:-d fp32 -B 4 -c none" "f_int4_ef:-d fp32 -B 4 -c error_feedback"; do
      timeout 60 /tmp/b/$b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build | tee $R/ab.txt
tar -czf $OUT/c7.tar.gz -C $OUT r
