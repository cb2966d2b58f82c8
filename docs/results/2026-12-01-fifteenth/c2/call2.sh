#!/usr/bin/env bash
# Fifteenth session, call 2 (one H200, P = 2 on the one GPU). Binaries built on the CPU machine:
#   build-base: echo-perf of 79defcc (the code of 5c8c3e2, echo-perf's -W/-M flags)
#   build-b:    codes without the clamp where a group's extremes land on the grid
#               (tile_codec::on_grid), the lean wide policy for stateful calls (tree-b.txt)
#   build:      the working tree (tree.txt): build-b plus Comp::keep skipped where the errors are
#               known finite (tile_stages::keep_errors), every test (the sweep's extreme chains new)
# A/B (3 passes) at the default tiers, and 4-bit + EF forced wide from 256 MiB; then the GPU tests
# of `build` but the per-quantizer ones (they did not fit the call's 64 MiB: c3 runs them) at P = 2
# (soak 3000 calls an object), features and soak at P = 3 and 4, features at P = 8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s15/tree.txt .gpubin/s15/tree-b.txt $R/
tar -xJf .gpubin/s15/c2.tar.xz; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
for b in build-base build-b build; do cuobjdump --dump-resource-usage $b/benchmark/echo-perf > $R/resources-$b.txt 2>&1; done
for pass in 1 2 3; do
  for b in build-base build-b build; do
    for c in "int4:-B 4 -c none" "int4_ef:-B 4 -c error_feedback" "int8:-B 8 -c none" "none16:-q none -c none" "int4_ef_w:-B 4 -c error_feedback -W 256M"; do
      timeout 60 $b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-b,build | tee $R/ab.txt
Q="all_reduce_(zero_aware|symmetric|naive_zero_point)"
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=3000 timeout 200 ctest --test-dir build -L gpu -LE ranks -E "$Q" > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 330 ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P" > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c2.tar.gz -C $OUT r
