#!/usr/bin/env bash
# Fifteenth session, call 5 (one H200, P = 2 on the one GPU), the final device code (tree.txt: the
# clamp-free codec path, the finite-error shortcut, stateful calls on the heavy wide policy):
# A/B of its echo-perf against 79defcc's (build-base), 3 passes, the default tiers and 4-bit + EF
# forced wide from 256 MiB; then the per-quantizer GPU tests (with the new extreme chains) at P = 2,
# and zero_aware at P = 3, 4 and 8. (The other GPU tests: c6; the binaries of both did not fit one call.)
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s15/tree.txt $R/
tar -xJf .gpubin/s15/c5.tar.xz; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
for b in build-base build; do cuobjdump --dump-resource-usage $b/benchmark/echo-perf > $R/resources-$b.txt 2>&1; done
for pass in 1 2 3; do
  for b in build-base build; do
    for c in "int4:-B 4 -c none" "int4_ef:-B 4 -c error_feedback" "int8:-B 8 -c none" "none16:-q none -c none" "int4_ef_w:-B 4 -c error_feedback -W 256M"; do
      timeout 60 $b/benchmark/echo-perf -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build | tee $R/ab.txt
Q="all_reduce_(zero_aware|symmetric|naive_zero_point)"
ECHO_TEST_RANKS=2 timeout 240 ctest --test-dir build -L gpu -LE ranks -R "$Q" > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 260 ctest --test-dir build -L ranks -R "zero_aware@P" > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c5.tar.gz -C $OUT r
