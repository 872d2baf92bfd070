// Test helpers for results that must not depend on kiln's CPU thread count.
#pragma once

#include "kernels/cpu/blas.h"
#include "kernels/cpu/parallel.h"

namespace kiln::test {

// Restores the thread count a test changed, even when a check throws.
struct ThreadCountGuard {
  int saved = cpu::num_threads();
  ~ThreadCountGuard() { cpu::set_num_threads(saved); }
};

// A GEMM backend whose bits do not depend on the thread count (kernels/cpu/blas.h): OpenBLAS where
// it loads and is not an OpenMP build, so that the tests run the path users train on; else kiln's.
inline cpu::GemmBackend thread_independent_gemm() {
  const bool blas_ok = cpu::blas_available() && (cpu::blas_concurrent() || !cpu::blas_threaded());
  return blas_ok ? cpu::GemmBackend::Blas : cpu::GemmBackend::Kiln;
}

}  // namespace kiln::test
