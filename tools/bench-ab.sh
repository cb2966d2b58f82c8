#!/usr/bin/env bash
# Before / after: two echo_bench binaries (an older commit's and this tree's) on the same GPUs in
# one call, alternated A B A B so that the run-to-run spread of each is measured beside the
# difference between them. NCCL runs in every pass, so each speedup is against NCCL in its own pass.
#
#   tools/bench-ab.sh BEFORE_BIN AFTER_BIN OUTDIR [PASSES]
#
# Environment: ECHO_AB_SIZES (default 16M,256M,1G), ECHO_AB_BEFORE_FILTER / ECHO_AB_AFTER_FILTER
# (Google Benchmark regexes; the defaults are the variants both binaries have, under their names
# of the time: the 16-bit pipeline is echo_none16 before 2026-11-30 and echo_none after).
# Writes OUTDIR/{before,after}-<pass>.{json,log}; tools/bench_ab_report.py makes the table.
set -u
before=$1 after=$2 out=$3 passes=${4:-2}
mkdir -p "$out"
sizes=${ECHO_AB_SIZES:-16M,256M,1G}
common='nccl|echo_int4|echo_int4_ef|echo_int8|echo_int8_ef|echo_nccl_int4|echo_nccl_int4_ef|echo_nccl_int8'
bf=${ECHO_AB_BEFORE_FILTER:-^(${common}|echo_none16)/}
af=${ECHO_AB_AFTER_FILTER:-^(${common}|echo_none)/}
rc=0
for p in $(seq 1 "$passes"); do
  for side in before after; do
    bin=$before filter=$bf
    [ "$side" = after ] && bin=$after filter=$af
    ECHO_BENCH_SIZES=$sizes ECHO_BENCH_LABEL="$side-$p" "$bin" --benchmark_filter="$filter" \
      --benchmark_out="$out/$side-$p.json" --benchmark_out_format=json >"$out/$side-$p.log" 2>&1 || rc=1
    echo "bench-ab: $side pass $p: exit $?"
    sed -n '/summary/,$p' "$out/$side-$p.log" | head -12
  done
done
exit $rc
