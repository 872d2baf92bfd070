// Matrix products. The CPU GEMM is row-major, cache-blocked and threaded; batches are described by
// per-batch element offsets so broadcast batch dims (offset repeats) need no copies. On CUDA the
// same product goes to cuBLASLt with a caller-provided workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace kiln {

// For each batch i: C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, where op(X) is X or X^T,
// A_i = a + a_offsets[i] (elements), an m x k matrix (k x m when trans_a) with leading dimension
// lda, likewise B_i (k x n, or n x k when trans_b) and C_i (m x n, ldc). All three share `dtype`
// (float32, float64, float16, bfloat16); accumulation is float (double for float64). beta == 0
// ignores C's old contents (NaN included). Null offsets mean offset 0 for every batch.
struct GemmBatch {
  int64_t count = 1;
  const int64_t* a_offsets = nullptr;
  const int64_t* b_offsets = nullptr;
  const int64_t* c_offsets = nullptr;
};

void gemm_cpu(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
              int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const GemmBatch& batch = {});

#if defined(KILN_WITH_CUDA)
// The same product on the GPU through cuBLASLt (pointers are device memory, offsets host arrays).
// float32 computes in FP32, or TF32 when allow_tf32; float16/bfloat16 accumulate in float32 (and
// split-k partial sums stay float32); float64 in FP64. `workspace` (workspace_bytes of device
// memory, may be 0) is the caller's: nothing is allocated here, so the call can be captured in a
// CUDA graph once the thread's cuBLASLt handle exists. Batches whose offsets step evenly run as one
// strided-batched call; others run as several.
void gemm_cuda(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, const GemmBatch& batch,
               void* workspace, size_t workspace_bytes, bool allow_tf32, Stream stream);
#endif

}  // namespace kiln
