#!/usr/bin/env bash
# Eighteenth session, call 3 (one H200): smaller flags for the wide (streaming) policies, so that a
# ring slot is read sooner after it is written (fewer bytes streamed through L2 in between).
# Builds of one tree (tree.txt, EXPERIMENT macros): f16k = as committed (lean 16384, heavy 8192
# values a flag), f4k = both 4096, f2k = both 2048. Wide forced from 64 MiB (-W 64M); 3 passes;
# ncu DRAM bytes a value at 1 GiB (default tiers: int4 and int8 run wide there).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree3.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/c3.tar.xz -C /tmp/b
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && share="-S 1"
for pass in 1 2 3; do
  for b in f16k f4k f2k; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback"; do
      timeout 60 $bin -g 2 $share -N 0 -W 64M -b 64M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for x in f4k f2k; do python3 scripts/perf_ab.py $R build-f16k,build-$x > $R/ab-$x.txt 2>&1; done
for b in f16k f2k f4k; do
  ECHO_PROFILE_CONFIGS="int4 int8" timeout 90 scripts/pipeline-profile.sh /tmp/b/build-$b $R/prof-$b "1G" > $R/prof-$b.log 2>&1; echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
cat $R/times.txt; cat $R/ab-*.txt | grep -v "^#"; for b in f16k f2k f4k; do head -5 $R/prof-$b/pipeline-table.md; done
tar -czf $OUT/c3.tar.gz -C $OUT r
