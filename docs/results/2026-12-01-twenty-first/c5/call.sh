#!/usr/bin/env bash
# Twenty-first session, call 5 (one H200, P = 2 sharing it; run as one command line): c4 again
# with a null comparison: build-same is a copy of build-old (the same binary), so its distance
# from build-old is what noise alone gives. Three orders rotating over ten passes.
set -u; R=$OUT/r; mkdir -p $R; mkdir -p /tmp/b && tar -xJf .gpubin/s21/perf.tar.xz -C /tmp/b && cp -r /tmp/b/build-old /tmp/b/build-same
for pass in 1 2 3 4 5 6 7 8 9 10; do
  case $((pass % 3)) in 0) order="old new same";; 1) order="new same old";; 2) order="same old new";; esac
  for b in $order; do
    for c in "int4:-B 4" "int8:-B 8" "none16:-q none" "int4_ef:-B 4 -c error_feedback"; do
      timeout 60 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 64K -e 4M -f 4 -n 500 -w 50 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
done
python3 scripts/perf_ab.py $R build-old,build-new,build-same > $R/ab.txt 2>&1; cat $R/ab.txt; tar -czf $OUT/c5.tar.gz -C $OUT r
