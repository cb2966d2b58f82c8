#!/usr/bin/env bash
# Sixteenth session, call 6: the final device code (tree.txt) of the data-step state coded without its clamp where the codec took its
# clamp-free path (tree.txt); naive_zero_point (no data step, untouched) not carried: 64 MiB. echo-perf A/B: pre = 79a4434 (the lean wide prefetch, c2's code),
# new = tree.txt; 4-bit + EF and 8-bit + EF in bf16 (the change) and fp32 4-bit + EF (kernels
# without state are the same SASS as pre's). Then the per-quantizer tests (the extreme-value
# chains), features, the soak, zero_aware at P = 3, 4, 8 on the new code. One GPU: ranks sharing it.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s16
cp $S/tree6.txt $R/tree.txt
tar -xJf $S/c6.tar.xz; mkdir -p /tmp/b && tar -xJf $S/c5v.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && { share="-S 1"; export ECHO_TEST_RANKS=2; }
echo "unpacked at $(( $(date +%s) - t0 )), $G GPU(s)" >> $R/times.txt
for pass in 1 2 3; do
  for b in pre new; do
    bin=build/benchmark/echo-perf; [ $b = pre ] && bin=/tmp/b/build-pre/echo-perf
    for c in "int4_ef:-B 4 -c error_feedback" "int8_ef:-B 8 -c error_feedback" "f32_int4_ef:-B 4 -c error_feedback -d fp32"; do
      timeout 60 $bin -g 2 $share -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 -q zero_aware ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-pre,build-new > $R/ab.txt 2>&1
ECHO_SOAK_CALLS=3000 timeout 200 ctest --test-dir build -L gpu -LE ranks -R "all_reduce_(zero_aware|symmetric|features)|soak" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
timeout 150 ctest --test-dir build -R "zero_aware@P" --output-on-failure > $R/ctest-za-ranks.log 2>&1; echo "ctest za ranks rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed" $R/ctest-*.log; cat $R/ab.txt
tar -czf $OUT/c6.tar.gz -C $OUT r
