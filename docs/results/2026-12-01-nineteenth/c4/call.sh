#!/usr/bin/env bash
# Nineteenth session, call 4 (one H200, P = 2 ranks sharing it): line rings with the stages
# more steps apart (EXPERIMENT, ECHO_LINES_LAG; K = 1). l0 = flag words (c1's build), l1 = lines,
# lag 1 (c2's build), l5 = lag 2 (6 slots a warp), l6 = lag 4 (10 slots). echo-perf A/B with the
# wide tier at every size (-W 1), 2 passes; ncu of l5 and l6 (4-bit, 1 GiB).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
S=.gpubin/s19
cp $S/tree.txt $R/tree.txt
mkdir -p /tmp/b && for f in $S/*.tar.xz; do tar -xJf $f -C /tmp/b; done
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; } > $R/machine.txt 2>&1
echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
for pass in 1 2; do
  for b in l0 l1 l5 l6; do
    bin=/tmp/b/build-$b/benchmark/echo-perf
    for c in "int4w:-B 4 -W 1" "int4efw:-B 4 -c error_feedback -W 1" "int8w:-B 8 -W 1"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-l0,build-l1,build-l5,build-l6 > $R/ab.txt 2>&1
cat $R/times.txt $R/ab.txt
tar -czf $OUT/c4-ab.tar.gz -C $OUT r
for b in l5 l6; do
  ECHO_PROFILE_FLAGS="-W 1" ECHO_PROFILE_CONFIGS="int4" timeout 100 scripts/pipeline-profile.sh /tmp/b/build-$b $R/prof-$b "1G" > $R/prof-$b.log 2>&1
  echo "prof $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt; cat $R/prof-$b/pipeline-table.md
done
tar -czf $OUT/c4.tar.gz -C $OUT r
