#!/usr/bin/env bash
# ncu over echo-codec-profile (benchmark/codec_profile.cu): per staged kernel and configuration,
# thread instructions a value, registers, stack (spills) and HBM traffic, on one GPU.
#   tools/codec-profile.sh [BUILD_DIR] [OUT_DIR]    (OUT_DIR defaults to $OUT, then ./codec-profile)
# Writes codec-ncu.csv (ncu's raw CSV), codec-times.log (the tool's own event times, no ncu),
# codec-resources.txt (cuobjdump's per-kernel registers / stack / local memory) and
# codec-table.md (tools/codec_profile.py's table).
set -euo pipefail
build=${1:-build}
out=${2:-${OUT:-codec-profile}}
bin=$build/benchmark/echo-codec-profile
mkdir -p "$out"
n=$((64 << 20))
"$bin" "$n" 20 | tee "$out/codec-times.log"
cuobjdump --dump-resource-usage "$bin" > "$out/codec-resources.txt" 2>&1 || true
metrics=smsp__thread_inst_executed.sum,smsp__inst_executed.sum,launch__registers_per_thread,gpu__time_duration.sum
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum
ncu --clock-control none --kernel-name regex:'push_kernel|reduce_kernel|gather_kernel' --metrics "$metrics" \
  --csv --print-units base "$bin" "$n" 2 > "$out/codec-ncu.csv" 2> "$out/codec-ncu.err" || {
  echo "ncu failed:"; tail -20 "$out/codec-ncu.err"; exit 1; }
python3 "$(dirname "$0")/codec_profile.py" "$out/codec-ncu.csv" $((n / 2)) | tee "$out/codec-table.md"
