#!/usr/bin/env bash
# Installs what is missing, then configures and builds kiln incrementally (ccache, Ninja).
# Usage: tools/build.sh <build-dir> [extra cmake args...]; KILN_CUDA (AUTO|ON|OFF) and
# KILN_CUDA_ARCHITECTURES pass through from the environment.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${1:?usage: tools/build.sh <build-dir> [cmake args...]}
shift
bash "$root/tools/setup.sh"
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKILN_CUDA="${KILN_CUDA:-AUTO}" -DKILN_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHITECTURES:-80;90}" "$@"
cmake --build "$build_dir" --parallel "$(nproc)"
