// What PyTorch's reference lists under "other operations" and kiln lacked: index lists of a
// triangle, the cross and Kronecker products, quarter turns, block-diagonal matrices, Cartesian
// products, and covariance and correlation matrices. Each is composed of existing ops (narrow,
// mul, reshape, flip, pad, cat, meshgrid, matmul), so both devices run it and autograd comes with
// it; the index lists are made on the host from their sizes alone.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// The (row, column) indices of the lower (tril) or upper (triu) triangle of a [row, col] matrix,
// diagonal `offset` included (0 the main diagonal, > 0 above, < 0 below), as a [2, count] int64
// tensor in row-major order: torch.tril_indices and triu_indices.
Tensor tril_indices(int64_t row, int64_t col, int64_t offset = 0, Device device = Device::cpu());
Tensor triu_indices(int64_t row, int64_t col, int64_t offset = 0, Device device = Device::cpu());

// The cross product of 3-vectors along `dim` (size 3 in both), a and b broadcast together:
// torch.linalg.cross.
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);

// The Kronecker product: a's shape times b's, each element of a scaling a copy of b (the shorter
// shape padded with leading 1s): torch.kron.
Tensor kron(const Tensor& a, const Tensor& b);

// x turned k quarter turns in the plane of dims (from the first dim toward the second; k may be
// negative or beyond 4): torch.rot90. A new tensor.
Tensor rot90(const Tensor& x, int64_t k = 1, const std::vector<int64_t>& dims = {0, 1});

// The matrices (0-d tensors as 1 x 1, 1-d as one row) along the diagonal of a zero matrix, in the
// dtype they promote to: torch.block_diag. Gradients flow to each block.
Tensor block_diag(const TensorList& tensors);

// Every combination of one element of each 1-d tensor, [product of sizes, count] in row-major
// order (a single tensor comes back as it is): torch.cartesian_prod.
Tensor cartesian_prod(const TensorList& tensors);

// The covariance of the variables in x's rows (observations in its columns; a 1-d x is one
// variable): torch.cov. fweights (integer frequencies) and aweights (floating importance) weight
// the observations, both [observations] or undefined; the divisor is the weights' sum less
// `correction` (with aweights, less correction times sum(w aweights) / sum(w)), clamped at 0 as
// PyTorch's (a divisor of 0 gives inf or NaN).
Tensor cov(const Tensor& x, int64_t correction = 1, const Tensor& fweights = Tensor(),
           const Tensor& aweights = Tensor());
// Pearson's correlation coefficients of the rows: cov divided by the outer product of the standard
// deviations, clamped to [-1, 1]: torch.corrcoef.
Tensor corrcoef(const Tensor& x);

}  // namespace kiln
