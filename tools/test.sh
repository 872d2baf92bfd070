#!/usr/bin/env bash
# The test command (README's second Quick start command, and what CI runs):
#  1. a CPU-only build (KILN_CUDA=OFF) and the whole test suite;
#  2. the same suite built with clang under AddressSanitizer + UndefinedBehaviorSanitizer (all but
#     the end-to-end example trainings, which step 1 ran), then every libFuzzer target for
#     KILN_FUZZ_SECONDS (default 60) s, in the one tree both share (build/fuzz; docs/robustness.md);
#  3. when the CUDA toolkit is present, a KILN_CUDA=ON build for KILN_CUDA_ARCHITECTURES (default
#     80;90): every CUDA source must compile and the non-CUDA tests must pass without a GPU (but
#     for the emulator's tests and the training variants, which step 1 ran on the same code); the
#     "cuda"-labelled tests run too when a GPU is visible.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
phase() { echo "test: $1 finished at $(( $(date +%s) - start )) s"; }
KILN_CUDA=OFF bash "$root/tools/build.sh" "$root/build/cpu"
ctest --test-dir "$root/build/cpu" --output-on-failure --parallel "$(nproc)"
phase "CPU build and tests"
bash "$root/tools/sanitize.sh"
phase "sanitized build and tests"
bash "$root/tools/fuzz.sh" --no-build
phase "fuzzing"
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null; then
  KILN_CUDA=ON bash "$root/tools/build.sh" "$root/build/cuda"
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    ctest --test-dir "$root/build/cuda" --output-on-failure
  else
    # Left out, as step 1 ran the same code: the emulator's tests (kernels/simt; their sources and
    # the kernels they run compile for the host alike in both builds), the reruns of the op table on
    # kiln's own GEMM (kiln_gemm_*: the CPU kernels are the same objects in both builds, and this
    # run's op table already takes each op through the CUDA build's dispatch), and the variants of
    # the example trainings (resume, mixed precision, token files, profiling, SIGKILL, more ranks, ZeRO),
    # which train on the CPU as in step 1. The plain trainings and one DDP run stay: they show that
    # a CUDA build trains and picks its backends on a machine without a GPU.
    echo "test: no GPU visible; running the non-CUDA tests of the CUDA build"
    ctest --test-dir "$root/build/cuda" --output-on-failure --parallel "$(nproc)" -LE cuda \
      -E "(emulated|simt): |^kiln_gemm_|^example_(sigkill_|record_training|train_(cnn|gpt)_(resume|amp|tokens|profile|ddp_3|ddp_grad|ddp_to|zero)|train_gpt_ddp_2)"
  fi
else
  echo "test: no CUDA toolkit found; skipped the KILN_CUDA=ON build"
fi
echo "test: finished in $(( $(date +%s) - start )) s"
