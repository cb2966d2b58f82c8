#!/usr/bin/env bash
# Sixteenth session, call 7 (one H200, ranks sharing it): features and soak at P = 3 and 4 on the
# final device code (tree.txt; c6 ran the P = 2 set and zero_aware at P = 3, 4, 8).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s16/tree7.txt $R/tree.txt
tar -xJf .gpubin/s16/c7.tar.xz
timeout 170 ctest --test-dir build -R "(features|soak)@P[34]" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c7.tar.gz -C $OUT r
