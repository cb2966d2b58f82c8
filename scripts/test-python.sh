#!/usr/bin/env bash
# The Python package's tests (python/): installs it with pip into a virtual environment under the
# build folder, as a user would (pip install ./python --no-build-isolation), and runs python/tests
# with pytest. It installs torch, transformers and accelerate from PyPI where they are missing (the
# front's and echo_allreduce.hf's tests run on CPU, over gloo), builds the host reference always,
# and the torch ops where torch (with CUDA) and nvcc are present (about 8 minutes on 2 cores).
# Tests that need torch or 2 GPUs report themselves skipped, with the reason.
#
#   ECHO_PYTHON_TORCH=0 scripts/test-python.sh   do not install torch where it is missing
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH=$PATH:/usr/local/cuda/bin
build=${ECHO_BUILD_DIR:-build/test}
mkdir -p "$build"
build=$(cd "$build" && pwd)
venv=$build/python-venv
python=${PYTHON:-python3}

# The venv sees the system's site-packages, so a torch installed there is reused, not downloaded.
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv --system-site-packages "$venv" 2>/dev/null; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    "$python" -m venv --system-site-packages "$venv"
  fi
fi
py=$venv/bin/python
missing=()
for pkg in numpy pytest nanobind scikit_build_core; do
  "$py" -c "import $pkg" 2>/dev/null || missing+=("${pkg//_/-}")
done
[ ${#missing[@]} -eq 0 ] || "$py" -m pip install -q "${missing[@]}"
if ! "$py" -c "import torch" 2>/dev/null && [ "${ECHO_PYTHON_TORCH:-1}" != 0 ]; then
  echo "installing torch (the front's tests need it; ECHO_PYTHON_TORCH=0 skips this)"
  "$py" -m pip install -q torch==2.11.0 || echo "warning: torch did not install; its tests will be skipped"
fi
# echo_allreduce.hf's tests load a tiny transformers model with tensor parallelism (accelerate)
if "$py" -c "import torch" 2>/dev/null && ! "$py" -c "import transformers, accelerate" 2>/dev/null \
    && [ "${ECHO_PYTHON_TORCH:-1}" != 0 ]; then
  "$py" -m pip install -q transformers==5.17.0 accelerate==1.15.0 || echo "warning: transformers did not install; its tests will be skipped"
fi

torch_ops=OFF
if command -v nvcc >/dev/null && "$py" -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; then
  torch_ops=ON
fi
echo "pip install ./python (torch ops: $torch_ops)"
ECHO_BUILD_TORCH=$torch_ops "$py" -m pip install -q --no-build-isolation ./python
# From outside the source tree, so the installed package is the one imported.
cd "$build"
"$py" -m pytest -rs "$root/python/tests" "$root/examples/python/tests"
