// PyTorch's BLAS-shaped products beside matmul: mm, bmm, mv, dot and inner with their strict shapes
// (no broadcasting, no promotion of 1-d operands), the fused-looking addmm, addbmm, baddbmm, addmv
// and addr (beta input + alpha product), tensordot and multi_dot (a chain of products in the
// cheapest order); matrix_power is linalg's (core/ops/linalg.h). Each is matmul (cuBLASLt on the
// GPU, OpenBLAS or kiln's GEMM on the CPU) with views, mul and add around it, so both devices run
// it, autocast treats the product as matmul's, and autograd comes with it. Operands share one
// floating dtype, as matmul's do.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// [n, k] @ [k, m] (both exactly 2-d): torch.mm.
Tensor mm(const Tensor& a, const Tensor& b);
// [B, n, k] @ [B, k, m] (both exactly 3-d, the same B): torch.bmm.
Tensor bmm(const Tensor& a, const Tensor& b);
// [n, k] @ [k]: torch.mv.
Tensor mv(const Tensor& mat, const Tensor& vec);
// The sum of a[i] b[i] of two 1-d tensors of one size, 0-d: torch.dot (and torch.vdot, as kiln has
// no complex dtypes).
Tensor dot(const Tensor& a, const Tensor& b);
// The sums over the last dims of a and b (of one size), [*a, *b] without those dims; a 0-d operand
// scales the other: torch.inner.
Tensor inner(const Tensor& a, const Tensor& b);

// beta input + alpha (m1 @ m2), input broadcasting to the product's [n, m]: torch.addmm. With beta
// 0 the input is ignored, its NaNs and infs too (PyTorch's rule); it must still broadcast.
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta = 1.0, double alpha = 1.0);
// beta input + alpha bmm(b1, b2), input broadcasting to [B, n, m]: torch.baddbmm (ALiBi's and
// relative-position biases added to attention scores in the product's statement).
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1.0, double alpha = 1.0);
// beta input + alpha sum over the batch of b1[i] @ b2[i], input broadcasting to [n, m]:
// torch.addbmm.
Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1.0, double alpha = 1.0);
// beta input + alpha (mat @ vec), input broadcasting to [n]: torch.addmv.
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, double beta = 1.0, double alpha = 1.0);
// beta input + alpha outer(v1, v2), input broadcasting to [n, m]: torch.addr.
Tensor addr(const Tensor& input, const Tensor& v1, const Tensor& v2, double beta = 1.0, double alpha = 1.0);

// The last `dims` dims of a contracted with the first `dims` of b (sizes equal pairwise), the
// result a's other dims then b's: torch.tensordot with an int. dims >= 0 and at most either rank.
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
// dims_a[i] of a contracted with dims_b[i] of b (as many of each, each named once, sizes equal):
// torch.tensordot with two lists.
Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b);

// The product of a chain of matrices, in the order of multiplications that costs the fewest
// multiply-adds (found by the classic dynamic program over the chain's sizes): the first may be
// 1-d (a row) and the last 1-d (a column), the others 2-d; 1-d ends drop from the result as in
// matmul. torch.linalg.multi_dot. At least two tensors.
Tensor multi_dot(const TensorList& tensors);

}  // namespace kiln
