#!/usr/bin/env bash
# Twenty-first session, call 3 (one H200, P = 2 ranks sharing it): what this session's device
# change costs. The wait now compares the whole stamp before it accepts a reached epoch (else it
# re-reads it) and hands the 16-byte load a global address (__cvta_generic_to_global).
# echo-perf A/B old (b3eb821) / new (84dc6ca, tree.txt): 3 passes 64 KiB - 16 MiB at 200
# iterations, then 2 passes 64 MiB - 1 GiB at 20.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s21
cp $S/tree1.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/perf.tar.xz -C /tmp/b
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
for pass in 1 2 3; do
  for b in old new; do
    for c in "none16:-q none" "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback"; do
      timeout 60 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 64K -e 16M -f 4 -n 200 -w 20 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab small pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for pass in 4 5; do
  for b in old new; do
    for c in "none16:-q none" "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback"; do
      timeout 90 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 64M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab large pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-old,build-new > $R/ab.txt 2>&1
cat $R/times.txt $R/ab.txt
tar -czf $OUT/c3.tar.gz -C $OUT r
