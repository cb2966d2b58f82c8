#!/usr/bin/env bash
# Seventeenth session, call 5 (one H200): the soak at P = 8 (2000 calls an object, eight ranks
# sharing the GPU) on the final device code (tree.txt; the same device code as 2d4a601).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s17
cp $S/tree5.txt $R/tree.txt
tar -xJf $S/c5.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
timeout 400 ctest --test-dir build -R "soak@P8" --output-on-failure > $R/ctest-soak-p8.log 2>&1; echo "ctest soak@P8 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c5.tar.gz -C $OUT r
