#!/usr/bin/env bash
# Build Echo on a GPU machine and run its tests, benchmarks and model runs in one go (stages run
# in the order ECHO_STAGES names them); logs go to $ECHO_GPU_LOGS (default ./gpu-logs), bundled as
# logs-<stages>.tar.gz beside summary.txt.
#
#   scripts/gpu-check.sh                       build + tests + benchmark (default stages)
#   ECHO_STAGES="build test" scripts/gpu-check.sh
#   ECHO_CTEST_ARGS="-LE ranks"                ctest arguments (here: skip the P = 3, 4, 8 entries)
#   ECHO_TEST_RANKS=2                          on one GPU: the two-rank tests with both ranks on it
#   ECHO_BENCH_ARGS="--benchmark_filter=int4"  echo_bench arguments
# Stages:
#   build     configure (Release, sm_90) and build everything
#   prebuilt  instead of build: unpack .gpubin/build.tar.xz (a build tree made on another machine
#             at this same path; ECHO_BUILD_DIR must name it) and check that its programs load;
#             shared libraries it needs and this machine lacks may come in .gpubin/lib
#   test      ctest (host, install and GPU tests; the soak test included)
#   sanitize  compute-sanitizer memcheck and synccheck on a short soak and the features test;
#             racecheck on the fault tests
#   bench     benchmark/echo_bench: every variant against NCCL in the same process
#   socket    NCCL forced onto its socket transport over loopback (the stand-in for a link between
#             nodes), transport::nccl variants against NCCL
#   perf      echo_perf (nccl-tests' layout, with error columns), 4-bit with and without error feedback
#   codec     tools/codec-profile.sh: ncu over transport::nccl's staged kernels on one GPU
#             (instructions a value, registers, HBM traffic; codec-table.md)
#   pybuild   pip install ./python --no-build-isolation (the numpy binding and the torch ops)
#   pyprebuilt instead of pybuild: the host reference built here into $ECHO_PYSITE (default .pysite),
#             and the torch ops library of .gpubin/_torch_ops.so.xz (built on another machine
#             against the same torch) put beside it
#   python    the Python package's tests (python/tests and examples/python/tests, one pytest a file)
#   train     examples/python/train_tp.py (ECHO_TRAIN_ARGS; ECHO_TRAIN_CAP seconds at most, and the
#             same for e2e and smollm), JSON to training.json
#   e2e       examples/python/e2e_tp.py (ECHO_E2E_ARGS), JSON to e2e.json
#   smollm    examples/python/smollm_tp.py eval (ECHO_SMOLLM_ARGS), JSON to smollm.json
#   beside    examples/python/beside_gemm.py (ECHO_BESIDE_ARGS): the all-reduce beside a cuBLAS GEMM
#
# ECHO_DEADLINE=S: stop starting work S seconds after the script began (each stage is cut at the
# deadline with `timeout`), so a run with a time limit still bundles what ran.
# NCCL's multicast switches are left exactly as found.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${ECHO_GPU_LOGS:-$root/gpu-logs}
logs=${TMPDIR:-/tmp}/echo-gpu-logs
build=${ECHO_BUILD_DIR:-$root/build-gpu}
stages=${ECHO_STAGES:-build test bench}
rm -rf "$logs"; mkdir -p "$logs" "$out"
cd "$root" || exit 1
summary=$out/summary.txt
deadline=${ECHO_DEADLINE:-0}
# left [cap]: seconds this stage may run (the rest to the deadline, at most cap); 0 = out of time
left() {
  local cap=${1:-100000} l=100000
  [ "$deadline" -gt 0 ] && l=$((deadline - SECONDS))
  [ "$l" -gt "$cap" ] && l=$cap
  [ "$l" -lt 0 ] && l=0
  echo "$l"
}
late() { [ "$(left)" -le 5 ] && { say "$1: skipped, past ECHO_DEADLINE"; return 0; }; return 1; }
say() { echo "$*" | tee -a "$summary"; }
# The logs as one archive, refreshed after each stage so that a run cut short still keeps what it did.
# One archive per invocation (ECHO_BUNDLE names it; default: the stages), the summary appended to.
bundle_name=${ECHO_BUNDLE:-logs-${stages// /-}}
bundle() { tar -czf "$out/$bundle_name.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null; }
trap bundle EXIT

{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m
  env | grep -E '^(NCCL|CUDA)_' | sort
} >"$logs/machine.txt" 2>&1
head -4 "$logs/machine.txt" | tee -a "$summary"

rc=0
stage_prebuilt() {
  if [ -f .gpubin/build.tar.xz ]; then
    tar -xJf .gpubin/build.tar.xz || { say "prebuilt: cannot unpack .gpubin/build.tar.xz"; exit 1; }
  elif [ ! -d "$build" ]; then
    say "prebuilt: neither .gpubin/build.tar.xz nor $build"; exit 1
  fi
  [ -d .gpubin/lib ] && export LD_LIBRARY_PATH=$root/.gpubin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for b in "$build"/test/gpu/echo_test_collective_all_reduce_features "$build"/benchmark/echo_bench; do
    [ -x "$b" ] && ldd "$b" | grep "not found" | tee -a "$summary"
  done
  say "prebuilt: unpacked $(find "$build" -type f -perm -u+x | wc -l) programs"
}
stage_build() {
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${ECHO_CMAKE_ARGS:-} \
    >"$logs/configure.log" 2>&1 || { tail -50 "$logs/configure.log"; exit 1; }
  start=$SECONDS
  keep=(); [ ${#gen[@]} -gt 0 ] && keep=(-- -k 0)  # build what can be built; report the rest
  if ! cmake --build "$build" -j"$(nproc)" "${keep[@]}" >"$logs/build.log" 2>&1; then
    rc=1
    grep -E "error|FAILED" "$logs/build.log" | head -40 | tee -a "$summary"
  fi
  say "build: $((SECONDS - start)) s"
  bundle
}
stage_test() {
  start=$SECONDS
  timeout "$(left)" ctest --test-dir "$build" --output-on-failure -j4 ${ECHO_CTEST_ARGS:-} >"$logs/ctest.log" 2>&1 || rc=1
  grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|^soak |FIRST:|SKIPPED" "$logs/ctest.log" | tee -a "$summary" | tail -70
  say "test: $((SECONDS - start)) s"
  bundle
}
# A sanitizer log's summary, split: errors in kernels (memory accesses, barriers, races) and CUDA
# API return codes (with how many of the printed ones were inside libnccl, not Echo's calls).
sanitizer_counts() {
  local kernel api nccl
  kernel=$(grep -c -E "Invalid (__global__|__shared__|__local__)|[Mm]isaligned|[Oo]ut of bounds|Barrier error|Race reported" "$1")
  api=$(grep -c "Program hit" "$1")
  # an API error counts as NCCL's when its report or backtrace names NCCL
  nccl=$(awk '/Program hit/ {n += f; f = 0; p = 1} p && /nccl/ {f = 1} /^========= *$/ {n += f; f = 0; p = 0} END {print n + f}' "$1")
  echo "$(grep -m1 -E 'ERROR SUMMARY' "$1"); printed: $kernel kernel errors, $api API errors ($nccl of them inside NCCL)"
}
stage_sanitize() {
  cs=compute-sanitizer
  command -v $cs >/dev/null || cs=/usr/local/cuda/bin/compute-sanitizer
  for tool in memcheck synccheck; do
    ECHO_SOAK_CALLS=${ECHO_SANITIZE_CALLS:-150} timeout "$(left "${ECHO_SANITIZE_CAP:-280}")" $cs --tool $tool --error-exitcode 9 --print-limit 500 \
      "$build/test/gpu/echo_test_collective_soak" >"$logs/sanitize-$tool-soak.log" 2>&1
    say "compute-sanitizer $tool soak (${ECHO_SANITIZE_CALLS:-150} calls a transport): exit $? $(sanitizer_counts "$logs/sanitize-$tool-soak.log")"
  done
  timeout "$(left "${ECHO_SANITIZE_CAP:-200}")" $cs --tool memcheck --error-exitcode 9 --print-limit 500 "$build/test/gpu/echo_test_collective_all_reduce_features" \
    -tce='*one rank makes*' >"$logs/sanitize-memcheck-features.log" 2>&1
  say "compute-sanitizer memcheck features: exit $? $(sanitizer_counts "$logs/sanitize-memcheck-features.log")"
  timeout "$(left "${ECHO_SANITIZE_CAP:-200}")" $cs --tool racecheck --error-exitcode 9 --print-limit 500 "$build/test/gpu/echo_test_collective_faults" \
    -tc='*bad buffers*,*deferred-update*' >"$logs/sanitize-racecheck-faults.log" 2>&1
  say "compute-sanitizer racecheck faults: exit $? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$logs/sanitize-racecheck-faults.log" | head -1)"
}
stage_pybuild() {
  start=$SECONDS
  ECHO_BUILD_TORCH=ON python3 -m pip install --no-build-isolation --no-deps -v ./python >"$logs/pip.log" 2>&1
  say "pybuild: exit $? in $((SECONDS - start)) s"
  bundle
}
stage_pyprebuilt() {
  start=$SECONDS
  site=${ECHO_PYSITE:-$root/.pysite}
  if ! ls "$site"/echo_allreduce/_reference*.so >/dev/null 2>&1; then
    ECHO_BUILD_TORCH=OFF python3 -m pip install -v --no-build-isolation --no-deps --target "$site" ./python \
      >"$logs/pip.log" 2>&1 || { rc=1; tail -20 "$logs/pip.log" | tee -a "$summary"; }
  fi
  local ops
  ops=$(ls .gpubin/_torch_ops.so.xz 2>/dev/null | head -1)
  if [ -n "$ops" ]; then xz -dc "$ops" >"$site/echo_allreduce/_torch_ops.so" || rc=1; fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "from echo_allreduce import ops; print('torch ops:', ops.ops_available(), ops._error or '')" 2>&1 | tee -a "$summary"
  say "pyprebuilt: $((SECONDS - start)) s"
  bundle
}
stage_python() {
  start=$SECONDS
  # One pytest per file: a crash in one leaves the others' results.
  for t in "$root"/python/tests/test_*.py "$root"/examples/python/tests/test_*.py; do
    late "pytest $(basename "$t")" && continue
    (cd /tmp && timeout "$(left)" python3 -X faulthandler -m pytest -rs -q -p no:cacheprovider "$t") \
      >"$logs/pytest-$(basename "$t" .py).log" 2>&1 || rc=1
    say "pytest $(basename "$t"): $(tail -1 "$logs/pytest-$(basename "$t" .py).log")"
    bundle
  done
  grep -h -E "^(SKIPPED|FAILED|ERROR)" "$logs"/pytest-*.log | tee -a "$summary"
  say "python tests: $((SECONDS - start)) s"
}
run_example() {  # name, script and its arguments
  local ex=$1; shift
  late "$ex" && return
  local start=$SECONDS
  local cap="ECHO_${ex^^}_CAP"  # e.g. ECHO_TRAIN_CAP=300: at most 300 s for this stage
  timeout "$(left "${!cap:-100000}")" python3 "$@" >"$logs/$ex.log" 2>&1 || rc=1
  tail -30 "$logs/$ex.log" | tee -a "$summary"
  say "$ex: $((SECONDS - start)) s"
  bundle
}
stage_train() { run_example train examples/python/train_tp.py ${ECHO_TRAIN_ARGS:-} --out "$out/training.json"; }
stage_e2e() { run_example e2e examples/python/e2e_tp.py ${ECHO_E2E_ARGS:-} --out "$out/e2e.json"; }
stage_beside() { run_example beside examples/python/beside_gemm.py ${ECHO_BESIDE_ARGS:-} --out "$out/beside-gemm.json"; }
stage_smollm() { run_example smollm examples/python/smollm_tp.py eval ${ECHO_SMOLLM_ARGS:-} --out "$out/smollm.json"; }
stage_bench() {
  timeout "$(left)" "$build/benchmark/echo_bench" --benchmark_out="$out/bench.json" --benchmark_out_format=json ${ECHO_BENCH_ARGS:-} \
    >"$logs/bench.log" 2>&1 || rc=1
  tail -40 "$logs/bench.log" | tee -a "$summary"
}
stage_socket() {
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo ECHO_BENCH_LABEL=nccl-socket \
    ECHO_BENCH_SIZES=${ECHO_SOCKET_SIZES:-64K,1M,16M,64M,256M} \
    "$build/benchmark/echo_bench" --benchmark_filter='^nccl/|echo_nccl_' \
    --benchmark_out="$out/bench-socket.json" --benchmark_out_format=json >"$logs/bench-socket.log" 2>&1 || rc=1
  tail -12 "$logs/bench-socket.log" | tee -a "$summary"
}
stage_perf() {
  for comp in none error_feedback; do
    timeout "$(left)" "$build/benchmark/echo_perf" -b 64K -e 1G -f 4 -c $comp ${ECHO_PERF_ARGS:-} >"$logs/perf-$comp.log" 2>&1 || rc=1
    tee -a "$summary" <"$logs/perf-$comp.log"
  done
}
stage_codec() {
  timeout "$(left)" tools/codec-profile.sh "$build" "$logs/codec" >"$logs/codec.log" 2>&1 || rc=1
  cp "$logs/codec/codec-table.md" "$out/" 2>/dev/null
  tail -20 "$logs/codec.log" | tee -a "$summary"
}
known=" prebuilt build test sanitize pybuild pyprebuilt python train e2e smollm beside bench socket perf codec "
for st in $stages; do
  [[ $known == *" $st "* ]] || { say "unknown stage '$st' (known:$known)"; rc=1; continue; }
  "stage_$st"
done
bundle
exit $rc
