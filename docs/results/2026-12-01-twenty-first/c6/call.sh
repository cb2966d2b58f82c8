#!/usr/bin/env bash
# Twenty-first session, call 6 (one H200, P = 2 sharing it): c4 / c5 found the new build about
# 0.8 us slower for int4 at 64 KiB - 1 MiB (the forced quantized path), more than the null
# comparison's spread. build-v = 84dc6ca with only the wait's stamp check put back as before (an
# EXPERIMENT, never committed): if v is as fast as old, the whole-stamp compare costs it; if as
# slow as new, something else does (code placement, the host side).
set -u; R=$OUT/r; mkdir -p $R; mkdir -p /tmp/b && tar -xJf .gpubin/s21/perf.tar.xz -C /tmp/b && cp -r /tmp/b/build-old /tmp/b/build-same
cp .gpubin/s21/tree1.txt $R/tree.txt
for pass in 1 2 3 4 5 6 7 8 9 10 11 12; do
  case $((pass % 4)) in 0) order="old new v same";; 1) order="new v same old";; 2) order="v same old new";; 3) order="same old new v";; esac
  for b in $order; do
    for c in "int4:-B 4" "int8:-B 8"; do
      timeout 60 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 64K -e 4M -f 4 -n 500 -w 50 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 scripts/perf_ab.py $R build-old,build-new,build-v,build-same > $R/ab.txt 2>&1; cat $R/ab.txt; tar -czf $OUT/c6.tar.gz -C $OUT r
