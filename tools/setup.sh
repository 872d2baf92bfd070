#!/usr/bin/env bash
# Installs what kiln's build and tests need from Debian, non-interactively; a no-op when all is present.
# Uses sudo when not root. The CUDA toolkit is expected to be installed already (it is optional).
set -euo pipefail
# libpng-dev and libjpeg62-turbo-dev decode image folders (data/image.h); libopenmpi-dev and openmpi-bin
# (mpirun) carry dist/'s CPU collectives and launch its multi-rank tests.
# libopenblas0-pthread is the CPU's fast GEMM, loaded at run time (kernels/cpu/blas.h; no build dependency).
# libspdlog-dev depends on libfmt-dev (spdlog's CMake package finds fmt itself). clang, libclang-rt-dev
# (libFuzzer and the sanitizer runtimes) and llvm (llvm-symbolizer, for readable sanitizer stacks) serve
# tools/fuzz.sh and tools/sanitize.sh; python3 runs the SIGKILL resume test and the training-record script.
# gnuplot-nox (gnuplot without X11) renders tools/plot.py's PNGs: loss curves and the benchmark roofline.
packages=(cmake ninja-build g++ ccache catch2 libcli11-dev libspdlog-dev nlohmann-json3-dev zlib1g-dev
          libpng-dev libjpeg62-turbo-dev libopenmpi-dev openmpi-bin libopenblas0-pthread dataset-fashion-mnist clang libclang-rt-dev llvm python3
          gnuplot-nox)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
