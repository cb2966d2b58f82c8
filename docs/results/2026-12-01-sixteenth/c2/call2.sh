#!/usr/bin/env bash
# Sixteenth session, call 2 (one H200: the two-GPU kind was no longer lent): every GPU test on the
# final device code (tree.txt: the lean wide policy with the L2 prefetch) with the ranks sharing
# the GPU: all P = 2 tests (soak 3000 calls an object; those that need 2 GPUs report themselves
# skipped), zero_aware at P = 3, 4, 8, features and soak at P = 3, 4, features at P = 8.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s16
cp $S/tree2.txt $R/tree.txt
tar -xJf $S/t.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); [ "$G" -lt 2 ] && export ECHO_TEST_RANKS=2
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
ECHO_SOAK_CALLS=3000 timeout 200 ctest --test-dir build -L gpu -LE ranks --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 130 ctest --test-dir build -R "zero_aware@P" --output-on-failure > $R/ctest-za-ranks.log 2>&1; echo "ctest za ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 570 - ($(date +%s) - t0) ))
timeout $left ctest --test-dir build -L ranks -E "soak@P8|zero_aware@P" --output-on-failure > $R/ctest-ranks.log 2>&1; echo "ctest ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log
tar -czf $OUT/c2.tar.gz -C $OUT r
