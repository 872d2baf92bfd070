// matmul's one hand-written CUDA kernel and its launches, run by kernels/cuda/matmul.cu: the
// products of an empty sum (k == 0), which cuBLASLt is not asked to compute. Each C is then
// beta * C, and beta == 0 writes zeros over anything, NaN included, as gemm_cpu does.
//
// Host-compilable: the CPU tests run the kernel on the emulator of CUDA's threads
// (tests/kernels/test_matmul_simt.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/dtype.h"
#include "kernels/matmul.h"

namespace kiln::matmul_device {

// C = beta * C over a rows x cols matrix with leading dimension ld, in C's compute type (float,
// or double for float64).
template <typename C>
__global__ void scale_matrix_kernel(void* c, DType dtype, int64_t rows, int64_t cols, int64_t ld, C beta) {
  const int64_t total = rows * cols;
  for (int64_t i = cuda_detail::global_thread(); i < total; i += cuda_detail::grid_threads()) {
    const int64_t off = (i / cols) * ld + i % cols;
    cuda_detail::store_as<C>(c, dtype, off, beta == C(0) ? C(0) : beta * cuda_detail::load_as<C>(c, dtype, off));
  }
}

// One launch through `launch` (cuda_detail::StreamLaunch on a GPU) for each product of the batch;
// the caller has checked the dtype and that m, n and the count are positive.
template <class Launch>
void scale_outputs(DType dtype, int64_t m, int64_t n, double beta, void* c, int64_t ldc, const GemmBatch& batch,
                   const Launch& launch) {
  const auto es = static_cast<int64_t>(element_size(dtype));
  for (int64_t i = 0; i < batch.count; ++i) {
    void* ci = static_cast<char*>(c) + gemm_batch_offset(batch.c_offsets, i) * es;
    if (dtype == DType::Float64) {
      launch(scale_matrix_kernel<double>, cuda_detail::grid_for(m * n), cuda_detail::kThreads, ci, dtype, m, n, ldc,
             beta);
    } else {
      launch(scale_matrix_kernel<float>, cuda_detail::grid_for(m * n), cuda_detail::kThreads, ci, dtype, m, n, ldc,
             static_cast<float>(beta));
    }
  }
}

}  // namespace kiln::matmul_device
