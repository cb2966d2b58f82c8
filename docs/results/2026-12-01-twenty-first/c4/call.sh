#!/usr/bin/env bash
# Twenty-first session, call 4 (one H200, P = 2 sharing it; run as one command line): c3 saw
# the new build 0.5-1 us slower at 64 KiB - 1 MiB (int4, int8). Ten passes of 64 KiB - 4 MiB at
# 500 iterations, the order of the two builds alternating, to tell that from noise.
set -u; R=$OUT/r; mkdir -p $R; mkdir -p /tmp/b && tar -xJf .gpubin/s21/perf.tar.xz -C /tmp/b
for pass in 1 2 3 4 5 6 7 8 9 10; do
  order="old new"; [ $((pass % 2)) = 0 ] && order="new old"
  for b in $order; do
    for c in "int4:-B 4" "int8:-B 8" "none16:-q none" "int4_ef:-B 4 -c error_feedback"; do
      timeout 60 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 64K -e 4M -f 4 -n 500 -w 50 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 scripts/perf_ab.py $R build-old,build-new > $R/ab.txt 2>&1; cat $R/ab.txt; tar -czf $OUT/c4.tar.gz -C $OUT r
