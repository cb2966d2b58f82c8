#!/usr/bin/env bash
# Eighteenth session, call 2 (one H200): c1's ring hints with L2 set aside for persisting
# (evict_last) lines: echo-perf's EXPERIMENT env ECHO_PERF_L2_PERSIST_MB (cudaDeviceSetLimit
# cudaLimitPersistingL2CacheSize). Builds as c1 (rl0 none, rl2 evict_last stores, rl3 + discard).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s18
cp $S/tree2.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf $S/c2.tar.xz -C /tmp/b
G=$(nvidia-smi -L | wc -l); share=""; [ "$G" -lt 2 ] && share="-S 1"
for mb in 16 30 40; do ECHO_PERF_L2_PERSIST_MB=$mb /tmp/b/build-rl0/benchmark/echo-perf -g 2 $share -N 0 -b 16M -e 16M -n 2 -w 1 2>&1 | grep -E "persist|rror" >> $R/persist-probe.txt; done
cat $R/persist-probe.txt
for pass in 1 2 3; do
  for mb in 0 30; do
    for b in rl0 rl2 rl3; do
      bin=/tmp/b/build-$b/benchmark/echo-perf
      for c in "int4:-B 4" "int8:-B 8" "int4_ef:-B 4 -c error_feedback"; do
        ECHO_PERF_L2_PERSIST_MB=$mb timeout 60 $bin -g 2 $share -N 0 -b 64M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-p$mb-${c%%:*}-$pass.log 2>&1
      done
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for x in rl2-p0 rl3-p0 rl0-p30 rl2-p30 rl3-p30; do python3 scripts/perf_ab.py $R build-rl0-p0,build-$x > $R/ab-$x.txt 2>&1; done
ECHO_PERF_L2_PERSIST_MB=30 ECHO_PROFILE_CONFIGS="int4 int8" timeout 100 scripts/pipeline-profile.sh /tmp/b/build-rl3 $R/prof-rl3-p30 "1G" > $R/prof.log 2>&1; echo "prof rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; cat $R/ab-*.txt | grep -v "^#"; cat $R/prof-rl3-p30/pipeline-table.md | head -6
tar -czf $OUT/c2.tar.gz -C $OUT r
