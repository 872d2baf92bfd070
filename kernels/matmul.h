// Matrix products. The CPU GEMM is row-major, cache-blocked and threaded; batches are described by
// per-batch element offsets so broadcast batch dims (offset repeats) need no copies. On CUDA the
// same product goes to cuBLASLt, whose workspace comes from the kernel context.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// Null offsets mean offset 0 for every batch entry.
struct GemmBatch {
  int64_t count = 1;
  const int64_t* a_offsets = nullptr;
  const int64_t* b_offsets = nullptr;
  const int64_t* c_offsets = nullptr;
};

// Product i's offset in one of a batch's offset arrays (0 where the array is null).
inline int64_t gemm_batch_offset(const int64_t* offsets, int64_t i) { return offsets ? offsets[i] : 0; }

// What a GEMM does with its product P = op(A) @ op(B) besides storing it. Every epilogue takes one
// product (batch.count 1) with alpha 1 and beta 0 and k > 0; `aux` is an m x n matrix (leading
// dimension ldaux) in the operands' dtype, and bias and bias_grad are in it too.
// - Bias, a linear layer's forward: C = P + bias (`bias`: one value per column of C), rounded once.
// - BiasGradA, a linear layer's weight gradient dW = dY^T X: C = P, and `bias_grad` (m values) = the
//   sums of op(A)'s rows, here dY's column sums, the bias gradient, from the same read of dY.
// - BiasGeluAux, the up-projection of a GPT-2 MLP: H = P + bias is stored in aux for the backward,
//   and C = gelu_tanh(H), computed from H before it is rounded.
// - DGeluBgrad, that projection's backward through the down-projection: C = P * gelu_tanh'(aux),
//   with aux the forward's H, and `bias_grad` (n values) = the column sums of C: dH and db in one.
// On CUDA they are cuBLASLt's CUBLASLT_EPILOGUE_BIAS, _BGRADB (cuBLASLt's B is kiln's A: see
// kernels/cuda/matmul.cu), _GELU_AUX_BIAS and _DGELU_BGRAD, for float32, float16 and bfloat16
// (ldaux a multiple of 8); the CPU twin runs the product and one pass, and takes float64 too. In
// float16 and bfloat16 the twin rounds P to the dtype before its pass (H = P + bias rounds twice;
// DGeluBgrad's sums read the rounded C), where cuBLASLt keeps P in float: the twins may differ by
// about an ulp of the dtype there.
enum class GemmEpilogue : uint8_t { None, Bias, BiasGradA, BiasGeluAux, DGeluBgrad };

// Whether the epilogue reads or writes the aux matrix H.
inline bool gemm_epilogue_has_aux(GemmEpilogue e) {
  return e == GemmEpilogue::BiasGeluAux || e == GemmEpilogue::DGeluBgrad;
}

// For each batch entry i: C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, where op(X) is X or X^T,
// A_i = a + a_offsets[i] (elements), an m x k matrix (k x m when trans_a) with leading dimension
// lda, likewise B_i (k x n, or n x k when trans_b) and C_i (m x n, ldc). All three share `dtype`
// (float32, float64, float16, bfloat16); accumulation is float (double for float64). beta == 0
// ignores C's old contents (NaN included).
struct GemmArgs {
  DType dtype = DType::Float32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1.0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  double beta = 0.0;
  void* c = nullptr;
  int64_t ldc = 0;
  GemmBatch batch;
  // float32 on CUDA may use TF32 tensor cores (cuda::math_switches().allow_tf32_matmul); the CPU
  // always computes in float32.
  bool allow_tf32 = false;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // Bias, BiasGeluAux: n values
  void* aux = nullptr;         // H, m x n: written by BiasGeluAux, read by DGeluBgrad
  int64_t ldaux = 0;
  void* bias_grad = nullptr;   // written: m values by BiasGradA, n by DGeluBgrad
};

// The checks both twins make of an epilogue's arguments: a kiln::Error naming what is wrong.
void check_gemm_epilogue(const GemmArgs& g);

// The whole product in one expression (a designated initializer would need every field in order).
inline GemmArgs gemm_args(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc,
                          const GemmBatch& batch = {}, bool allow_tf32 = false) {
  GemmArgs g;
  g.dtype = dtype;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.beta = beta;
  g.c = c;
  g.ldc = ldc;
  g.batch = batch;
  g.allow_tf32 = allow_tf32;
  return g;
}

// The CUDA twin: device pointers, host offset arrays; float32 computes in FP32 (or TF32),
// float16/bfloat16 accumulate in float32 (split-k partial sums too), float64 in FP64. Its cuBLASLt
// workspace comes from the context (a stream-ordered caching-allocator block, so a CUDA graph
// capture takes it from the capture pool); batches whose offsets step evenly run as one
// strided-batched call, others as several.
void gemm_cpu(const GemmArgs& g, const KernelContext& ctx);
void gemm_cuda(const GemmArgs& g, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(gemm);
}  // namespace kernels

// --- debugging hook: the math cuBLASLt was asked for ------------------------------------------------

// cuBLASLt's compute types as kiln names them (Float32FastTF32 is CUBLAS_COMPUTE_32F_FAST_TF32).
enum class GemmComputeType : uint8_t { None, Float32, Float32FastTF32, Float64, Other };

// What the last gemm_cuda call on this thread handed to cuBLASLt, read back from the matmul
// descriptor it ran with, so a test can see that a math switch reached the library rather than only
// that the numbers moved. None before the first CUDA GEMM of the thread, and always in a build
// without CUDA (kernels/twins.cpp).
struct GemmComputeRecord {
  GemmComputeType compute = GemmComputeType::None;
  int cublas_compute_type = -1;  // the cublasComputeType_t value itself (-1: none yet)
  DType dtype = DType::Float32;  // of the operands
};
GemmComputeRecord last_gemm_compute_cuda();

}  // namespace kiln
