#!/usr/bin/env bash
# Sixteenth session, call 1 (2 x H200 NV18, P = 2 on 2 GPUs): the fifteenth session's final tree
# (tree.txt) against NCCL with the committed benchmark (echo_bench, 3 passes); echo-perf A/B of two
# policy variants built from the same tree (v1: heavy wide 320 x 2, heavy/stateful mid with
# prefetch 1; v2: heavy wide and heavy/stateful mid with prefetch 2); the GPU tests other than the
# per-quantizer ones at P = 2 (soak 3000 calls an object) and the @P3/@P4 entries and features@P8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s16
cp $S/tree.txt $R/
tar -xJf $S/c1.tar.xz; mkdir -p /tmp/b && tar -xJf $S/c1v.tar.xz -C /tmp/b
export LD_LIBRARY_PATH=$PWD/$S/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; nvidia-smi topo -m; env | grep -E '^(NCCL|CUDA)_' | sort; } > $R/machine.txt 2>&1
ldd build/benchmark/echo_bench | grep "not found" >> $R/machine.txt
echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
for pass in 1 2 3; do
  timeout 120 build/benchmark/echo_bench --benchmark_out=$R/full-$pass.json --benchmark_out_format=json > $R/full-$pass.log 2>&1
  echo "full $pass rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/bench_report.py $R/full-1.json $R/full-2.json $R/full-3.json > $R/full-table.md 2>&1
for pass in 1 2 3; do
  for b in base v1 v2; do
    bin=build/benchmark/echo-perf; [ $b != base ] && bin=/tmp/b/build-$b/echo-perf
    for c in "int4:-B 4 -c none" "int4_ef:-B 4 -c error_feedback" "int8:-B 8 -c none"; do
      timeout 60 $bin -g 2 -N 0 -b 64M -e 1G -f 4 -n 20 -w 5 -q zero_aware ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-v1,build-v2 > $R/ab.txt 2>&1
Q="all_reduce_(zero_aware|symmetric|naive_zero_point)"
ECHO_SOAK_CALLS=3000 timeout 150 ctest --test-dir build -L gpu -LE ranks -E "$Q" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 560 - ($(date +%s) - t0) ))
timeout $left ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt; cat $R/full-table.md
tar -czf $OUT/c1.tar.gz -C $OUT r
