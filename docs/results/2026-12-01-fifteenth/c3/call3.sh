#!/usr/bin/env bash
# Fifteenth session, call 3 (one H200, P = 2 on the one GPU): why 4-bit + EF forced wide from
# 256 MiB ran 2x slower in c2 (build-b, build) than in c1 (v1, the same stateful wide policy).
# c1 timed 256 MiB - 1 GiB only; c2 began at 16 MiB. Binaries: ep-base (79defcc), ep-v1 (c1's v1),
# ep-b and ep-build (c2's build-b and build).
set -uo pipefail
R=$OUT/r; mkdir -p $R
mkdir -p /tmp/b && tar -xJf .gpubin/s15/c3.tar.xz -C /tmp/b
run() { local name=$1; shift; timeout 60 "$@" > $R/$name.log 2>&1; echo "== $name: $*"; grep -E "^ +[0-9]+ " $R/$name.log | awk '{print $1/1048576 " MiB " $5 " us"}'; }
E="-g 2 -S 1 -N 0 -n 20 -w 5 -q zero_aware -B 4 -c error_feedback -W 256M"
for b in v1 b build base; do
  run $b-from256 /tmp/b/ep-$b $E -b 256M -e 1G -f 2
  run $b-from16 /tmp/b/ep-$b $E -b 16M -e 1G -f 4
done
run build-only1g /tmp/b/ep-build $E -b 1G -e 1G
run build-64-then-1g /tmp/b/ep-build $E -b 64M -e 1G -f 16
run build-mid-off /tmp/b/ep-build $E -M 2G -b 16M -e 1G -f 4
run build-lean-from16 /tmp/b/ep-build -g 2 -S 1 -N 0 -n 20 -w 5 -q zero_aware -B 4 -c none -W 256M -b 16M -e 1G -f 4
tar -czf $OUT/c3.tar.gz -C $OUT r
