#!/usr/bin/env bash
# Build Echo on a GPU machine, run every test and the benchmark in one go; logs go to $OUT
# (the device tool's output folder) or ./gpu-logs.
#
#   scripts/gpu-check.sh                 build + all tests + benchmark
#   ECHO_STAGES="build test" scripts/gpu-check.sh
#   ECHO_BENCH_ARGS="--benchmark_filter=int4" scripts/gpu-check.sh
#   ECHO_STAGES="bench socket" ...   socket: NCCL forced onto its socket transport over loopback
#                                    (the stand-in for a link between nodes), NCCL-path variants
#   ECHO_STAGES="build perf" ...     perf: echo-perf (nccl-tests' layout, with error columns), 4-bit
#                                    with and without error feedback, 64 KiB .. 1 GiB
#
# NCCL's multicast switches (NCCL_NVLS_ENABLE=0 on our machines) are left exactly as found.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-logs}
build=${ECHO_BUILD_DIR:-$root/build-gpu}
stages=${ECHO_STAGES:-build test bench socket}
mkdir -p "$out"
cd "$root" || exit 1

{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m
  env | grep -E '^(NCCL|CUDA)_' | sort
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

rc=0
if [[ $stages == *build* ]]; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${ECHO_CMAKE_ARGS:-} \
    >"$out/configure.log" 2>&1 || { tail -50 "$out/configure.log"; exit 1; }
  start=$SECONDS
  keep=(); [ ${#gen[@]} -gt 0 ] && keep=(-- -k 0)  # build what can be built; report the rest
  if ! cmake --build "$build" -j"$(nproc)" "${keep[@]}" >"$out/build.log" 2>&1; then
    rc=1
    grep -E "error|FAILED" "$out/build.log" | head -40
  fi
  echo "build: $((SECONDS - start)) s"
fi
if [[ $stages == *test* ]]; then
  ctest --test-dir "$build" --output-on-failure -j4 ${ECHO_CTEST_ARGS:-} 2>&1 | tee "$out/ctest.log" | grep -vE "^\s+Start " | tail -60
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
if [[ $stages == *bench* ]]; then
  "$build/benchmark/echo_bench" --benchmark_out="$out/bench.json" --benchmark_out_format=json ${ECHO_BENCH_ARGS:-} \
    >"$out/bench.log" 2>&1 || rc=1
  tail -40 "$out/bench.log"
fi
if [[ $stages == *socket* ]]; then
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo ECHO_BENCH_LABEL=nccl-socket \
    ECHO_BENCH_SIZES=${ECHO_SOCKET_SIZES:-64K,1M,16M,64M,256M} \
    "$build/benchmark/echo_bench" --benchmark_filter='^nccl/|echo_nccl_' \
    --benchmark_out="$out/bench-socket.json" --benchmark_out_format=json >"$out/bench-socket.log" 2>&1 || rc=1
  tail -12 "$out/bench-socket.log"
fi
if [[ $stages == *perf* ]]; then
  for comp in none error_feedback; do
    "$build/benchmark/echo-perf" -b 64K -e 1G -f 4 -c $comp ${ECHO_PERF_ARGS:-} >"$out/perf-$comp.log" 2>&1 || rc=1
    cat "$out/perf-$comp.log"
  done
fi
exit $rc
