#!/usr/bin/env bash
# ncu over transport::cuda_ipc's fused pipeline kernel. Its ranks spin on each other's flags, so
# ncu's kernel replay (one kernel at a time) cannot measure it; echo-perf -S 1 -P 1 captures one
# call of every rank into one CUDA graph and `ncu --graph-profiling graph` measures that graph as
# one workload, the ranks' kernels running together. With fewer GPUs than ranks they share a GPU
# (P = 2 on one GPU): instructions and HBM bytes a value are the kernel's, the time is not a link
# time (the "peer" stores stay on the GPU).
#   tools/pipeline-profile.sh [BUILD_DIR] [OUT_DIR] [SIZES]   (SIZES default "256M 1G")
# ECHO_PROFILE_RANKS (default 2) ranks; ECHO_PROFILE_CONFIGS picks configurations by name;
# ECHO_PROFILE_FLAGS: more echo-perf flags for every run (e.g. "-W 0": the wide tier at every size).
# Exits 1 if any run failed (the table then shows what did run). Writes, per configuration and size, ncu's CSV (<cfg>-<size>.csv) and its log; perf-<cfg>.log
# (echo-perf's own times and errors, no ncu, from 16 MiB); stalls-<cfg>.csv (why warps did not
# issue, cycles an issued instruction by reason, the first size); resources.txt (cuobjdump: registers, stack and local memory of every kernel); and
# pipeline-table.md (tools/pipeline_profile.py).
set -uo pipefail
build=${1:-build}
out=${2:-${OUT:-pipeline-profile}}
sizes=${3:-"256M 1G"}
ranks=${ECHO_PROFILE_RANKS:-2}
bin=$build/benchmark/echo-perf
[[ -x $bin ]] || { echo "pipeline-profile: no $bin (build echo_perf first)" >&2; exit 1; }
command -v ncu >/dev/null || { echo "pipeline-profile: ncu is not on PATH" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.err "$out"/perf-*.log  # no table from an earlier run's files
fail=0
configs=("int4:-q zero_aware -B 4 -c none" "int4_ef:-q zero_aware -B 4 -c error_feedback"
         "int8:-q zero_aware -B 8 -c none" "none16:-q none -c none")
metrics=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
# (local loads and stores, i.e. spills, are not counted in range replay: resources.txt has them)
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
cuobjdump --dump-resource-usage "$bin" > "$out/resources.txt" 2>&1 || true
read -r first _ <<<"$sizes"
for c in "${configs[@]}"; do
  name=${c%%:*}
  flags="${c#*:} ${ECHO_PROFILE_FLAGS:-}"
  [[ " ${ECHO_PROFILE_CONFIGS:-$name} " == *" $name "* ]] || continue
  # shellcheck disable=SC2086  # flags are words
  timeout 300 "$bin" -g "$ranks" -S 1 -N 0 -b 16M -e 1G -f 4 -n 20 -w 5 $flags > "$out/perf-$name.log" 2>&1 ||
    { echo "echo-perf failed: $name (rc $?)"; fail=1; }
  for s in $sizes; do
    # shellcheck disable=SC2086
    timeout 300 ncu --graph-profiling graph --profile-from-start off --clock-control none --metrics "$metrics" \
      --csv --print-units base "$bin" -g "$ranks" -S 1 -P 1 -N 0 -b "$s" -e "$s" -n 3 -w 1 $flags \
      > "$out/$name-$s.csv" 2> "$out/$name-$s.err" || { echo "ncu failed: $name $s (rc $?)"; fail=1; }
  done
  # shellcheck disable=SC2086
  timeout 300 ncu --graph-profiling graph --profile-from-start off --clock-control none --metrics "$stalls" \
    --csv --print-units base "$bin" -g "$ranks" -S 1 -P 1 -N 0 -b "$first" -e "$first" -n 3 -w 1 $flags \
    > "$out/stalls-$name.csv" 2> "$out/stalls-$name.err" || { echo "ncu (stalls) failed: $name (rc $?)"; fail=1; }
done
python3 "$(dirname "$0")/pipeline_profile.py" "$ranks" "$out"/*.csv | tee "$out/pipeline-table.md" || fail=1
exit "$fail"
