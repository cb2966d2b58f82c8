#!/usr/bin/env bash
# Fifteenth session, call 1 (one H200, P = 2 on the one GPU): A/B of wide policies for the heavy
# (8-bit, any EF above 4 bits) and stateful (4-bit + EF) calls, echo-perf binaries built on the
# CPU machine from 37fc7b8 + echo-perf's -W/-M flags:
#   base: today's default_policy (heavy wide 256 x 3, 16 lanes, prefetch 1; stateful = heavy)
#   v1:   heavy 320 x 2 (16 lanes, prefetch 1); stateful 256 x 2, 32 lanes, 16384 a flag, lag 1
#   v2:   heavy 320 x 2 without prefetch; stateful as v1 with prefetch 1
#   v3:   heavy as v1; stateful 256 x 2, 32 lanes, 8192 a flag, lag 1
# int4_ef_w forces the wide policy from 256 MiB (-W 256M); int4_ef_mid is the default (mid) tier.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s15/tree.txt $R/tree.txt
mkdir -p /tmp/b && tar -xJf .gpubin/s15/c1.tar.xz -C /tmp/b; echo "unpacked at $(( $(date +%s) - t0 ))" >> $R/times.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
for b in base v1 v2 v3; do cuobjdump --dump-resource-usage /tmp/b/build-$b/echo-perf > $R/resources-build-$b.txt 2>&1; done
for pass in 1 2 3; do
  for b in base v1 v2 v3; do
    cfgs=("int8:-B 8 -c none" "int8_ef:-B 8 -c error_feedback" "int4_ef_w:-B 4 -c error_feedback -W 256M")
    [ $b = base ] && cfgs+=("int4_ef_mid:-B 4 -c error_feedback")
    for c in "${cfgs[@]}"; do
      timeout 60 /tmp/b/build-$b/echo-perf -g 2 -S 1 -N 0 -b 256M -e 1G -f 2 -n 20 -w 5 -q zero_aware ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-base,build-v1,build-v2,build-v3 | tee $R/ab.txt
cat $R/times.txt
tar -czf $OUT/c1.tar.gz -C $OUT r
