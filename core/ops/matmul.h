// Matrix products with PyTorch's matmul rules: 1-d operands are promoted to a row or column and
// the added dim removed afterwards; batch dims broadcast.
#pragma once

#include "core/tensor.h"

namespace kiln {

Tensor matmul(const Tensor& a, const Tensor& b);
// x @ w^T + b, the product of nn.Linear (w is [out_features, in_features]).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// PyTorch's bilinear: y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o], for x1
// [*, in1] and x2 [*, in2] of the same leading dims, weight [out, in1, in2] and bias [out]
// (optional): one matrix product of x1 with the weight seen as [in1, out * in2], then a product
// with x2 summed over in2. Low precision under autocast, as PyTorch's list.
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(x @ w^T + b), GELU's tanh approximation: the up-projection of a GPT-2 MLP as one GEMM whose
// epilogue adds the bias and applies GELU, keeping the pre-activation H for the backward (on CUDA
// cuBLASLt's GELU_AUX_BIAS epilogue; float64, or an output width that is not a multiple of 8, runs
// as linear then gelu). Backward: dH = dy * gelu'(H), then linear's products and db = sum of dH.
// Equals gelu(linear(x, w, b), GeluApprox::Tanh) up to rounding.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);
// A GPT-2 MLP without its dropout: linear(gelu(linear(x, w1, b1), tanh), w2, b2), as two GEMMs with
// epilogues. Forward: linear_gelu's, keeping H, then the down-projection. Backward: dy @ w2 runs
// with the dGELU/bias-gradient epilogue (cuBLASLt's DGELU_BGRAD), which gives dH = (dy @ w2) *
// gelu'(H) and b1's gradient in the same GEMM, where the unfused chain needs a GEMM, a GELU
// backward kernel and a reduction. Same fallback as linear_gelu (then as the composite).
Tensor gelu_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);

// While one lives, the float32 products of this thread (matmul, linear and the fused GEMMs) run in
// full FP32 even where cuda::math_switches().allow_tf32_matmul asks for TF32: for computations
// whose result must keep float32's precision, as kiln's FFT (core/ops/fft.h), whatever the training
// loop chose for its layers. Nestable; restores the previous state on exit.
class FullFloat32MatmulGuard {
 public:
  FullFloat32MatmulGuard();
  ~FullFloat32MatmulGuard();
  FullFloat32MatmulGuard(const FullFloat32MatmulGuard&) = delete;
  FullFloat32MatmulGuard& operator=(const FullFloat32MatmulGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
