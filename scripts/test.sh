#!/usr/bin/env bash
# Every test: host tests, the install test, and the GPU tests (compiled always; reported as
# skipped by CTest where the GPUs they need are absent); then the Python package's tests
# (scripts/test-python.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/deps.sh
export PATH=$PATH:/usr/local/cuda/bin
# Its own build folder, and every option that adds a test forced on: whatever configured a build
# folder before (scripts/run.sh turns the tests off in its own), this builds and runs them all.
build=${ECHO_BUILD_DIR:-build/test}
# Without a GPU the GPU tests cannot run, so their device code is only compiled to be checked
# (ECHO_DEVICE_CODE=check, CMakeLists.txt): about four times faster. ECHO_DEVICE_CODE overrides.
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
export ECHO_DEVICE_CODE=${ECHO_DEVICE_CODE:-$([ "$gpus" -ge 1 ] && echo native || echo check)}
echo "GPUs: $gpus; device code: $ECHO_DEVICE_CODE"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DECHO_BUILD_TESTS=ON -DECHO_BUILD_EXAMPLES=ON -DECHO_BUILD_BENCHMARKS=ON \
  -DECHO_DEVICE_CODE="$ECHO_DEVICE_CODE"
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j"$(nproc)"
ECHO_BUILD_DIR=$build scripts/test-python.sh
