// Reductions over any set of dims (empty dims = all), with keepdim.
#pragma once

#include <optional>
#include <utility>

#include "core/tensor.h"

namespace kiln {

// Integer and bool inputs sum to int64, like PyTorch.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1): the sum of squared deviations over
// max(0, n - correction), so inf (NaN when every value is the mean) once correction >= n, as
// PyTorch.
Tensor var(const Tensor& x, const Shape& dims = {}, double correction = 1.0, bool keepdim = false);
// Max/min of all elements (0-d) or over dims; NaN propagates. Gradient flows evenly to ties.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim = false);
// Along one dim: values and int64 indices (first occurrence); gradient flows to the index.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// Index of the max over the flattened tensor (no dim) or along dim.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor any(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// log(sum(exp(x))) over dims, computed as m + log(sum(exp(x - m))) with m the max (an infinite max
// taken as 0), so large values do not overflow; -inf over an empty reduction. Floating inputs;
// float32 under autocast.
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// log(exp(a) + exp(b)) elementwise (broadcast, promoted as add), the two-term logsumexp: computed
// as max(a, b) + log1p(exp(-|a - b|)), so neither overflows nor loses the smaller term; equal
// infinities give themselves. Floating operands; float16 and bfloat16 computed in float32.
Tensor logaddexp(const Tensor& a, const Tensor& b);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);


}  // namespace kiln
