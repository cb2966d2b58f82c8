#!/usr/bin/env bash
# Every test: host tests, the install test, and the GPU tests (compiled always; reported as
# skipped by CTest where the GPUs they need are absent); then the Python package's tests
# (scripts/test-python.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/deps.sh
export PATH=$PATH:/usr/local/cuda/bin
build=${ECHO_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)"
scripts/test-python.sh
