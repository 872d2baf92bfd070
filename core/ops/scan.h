// Cumulative sums, products, log-sum-exps, maxima and minima along a dim (torch.cumsum, cumprod,
// logcumsumexp, cummax, cummin), composed of narrow, cat and elementwise ops in a logarithmic
// number of steps, so both devices run them and their gradients are those ops'.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "core/tensor.h"

namespace kiln {

// out[..., i, ...] = x[..., 0, ...] + ... + x[..., i, ...] along `dim` (negative counts from the
// end). The result has `dtype` when given, else x's for floating x and int64 for integer and bool
// x, as PyTorch's. float16 and bfloat16 sum in float32 and round once at the end. A 0-d x (dim 0
// or -1) gives a copy.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// The same with products. The gradient is the product rule's, through the multiplications: exact
// where x holds zeros too (no division by x, as a formula with cumprod / x would need).
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// log(exp(x[..., 0, ...]) + ... + exp(x[..., i, ...])) along `dim`, each step a logaddexp, so no
// exponential overflows. Floating x; float16 and bfloat16 computed in float32.
Tensor logcumsumexp(const Tensor& x, int64_t dim);

// The n-th forward difference along `dim`: out[i] = x[i + 1] - x[i], n times over, after
// `prepend` and `append` (optional, matching x but along dim) are joined on (torch.diff). bool
// inputs give logical xor (!=), as PyTorch's. The inverse of cumsum up to the first element.
Tensor diff(const Tensor& x, int64_t n = 1, int64_t dim = -1, const Tensor& prepend = Tensor(),
            const Tensor& append = Tensor());

// The running maximum along `dim` and the int64 index where it was taken: among equal values the
// latest, and a NaN, once met, holds (at the latest NaN's index), as PyTorch's. Any dtype. The
// gradient of the values goes to the input at those indices.
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim);
// The running minimum, likewise.
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim);

}  // namespace kiln
