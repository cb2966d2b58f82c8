#!/usr/bin/env bash
# Seventeenth session, call 3 (one H200): ncu over the fused kernel (scripts/pipeline-profile.sh:
# both ranks' kernels in one CUDA graph, P = 2 sharing the GPU) for base (4c1f433) and final
# (tree.txt) at 1 GiB: 4-bit, 4-bit + EF, 8-bit; then features and soak at P = 3, 4 and features
# at P = 8 and the naive_zero_point test at P = 2 on the final code.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s17
cp $S/tree3.txt $R/tree.txt
tar -xJf $S/c3.tar.xz; tar -xJf $S/ab2.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
for b in build-base build; do
  ECHO_PROFILE_CONFIGS="int4 int4_ef int8" timeout 170 scripts/pipeline-profile.sh $b $R/prof-$b "1G" > $R/prof-$b.log 2>&1; echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
ECHO_TEST_RANKS=2 timeout 60 ctest --test-dir build -R "naive" --output-on-failure > $R/ctest-naive.log 2>&1; echo "ctest naive rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 60 ] && { timeout $left ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; }
cat $R/times.txt; for b in build-base build; do cat $R/prof-$b/pipeline-table.md; done; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c3.tar.gz -C $OUT r
