#!/usr/bin/env bash
# The main job. With 2+ GPUs: Echo against NCCL (benchmark/echo_bench). Without: the depth
# experiment on the host reference (examples/echo-sim), and it says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/deps.sh
export PATH=$PATH:/usr/local/cuda/bin
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
build=${ECHO_BUILD_DIR:-build/run}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DECHO_BUILD_TESTS=OFF >/dev/null
if [ "$gpus" -ge 2 ]; then
  cmake --build "$build" -j"$(nproc)" --target echo_bench
  exec "$build/benchmark/echo_bench" "$@"
fi
echo "No 2 GPUs found ($gpus): running the host reference (echo-sim), not the device path."
cmake --build "$build" -j"$(nproc)" --target echo-sim
exec "$build/examples/echo-sim" --ranks 4 --depth 512 --quant zero_aware --bits 4 --group 128 --comp none,error_feedback "$@"
