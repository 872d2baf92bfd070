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
// sqrt(var): the standard deviation with var's correction (torch.std). Its gradient where every
// value is the mean divides by 0, as PyTorch's. Under `using namespace kiln` call it kiln::std, as
// torch::std: a bare std names the standard library too.
Tensor std(const Tensor& x, const Shape& dims = {}, double correction = 1.0, bool keepdim = false);
// (var, mean) and (std, mean) of the same elements, as torch.var_mean and torch.std_mean.
std::pair<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims = {}, double correction = 1.0,
                                   bool keepdim = false);
std::pair<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims = {}, double correction = 1.0,
                                   bool keepdim = false);
// The product of all elements (0-d), or along one dim: a tree of multiplications (halves of the dim
// times each other), and the gradient is the product rule's, exact where x holds zeros (no division
// by x). Integer and bool inputs give int64, as sum's; float16 and bfloat16 multiply in float32. An
// empty product is 1.
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);
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
// log2(2^a + 2^b), the same in base 2: max(a, b) + log2(1 + 2^-|a - b|).
Tensor logaddexp2(const Tensor& a, const Tensor& b);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);

// sum and mean with NaNs left out (as zeros in the sum, not counted in the mean): a line of NaNs
// sums to 0 and has a NaN mean. The gradient is zero at the NaNs. nanmean takes floating inputs
// and counts and divides in float32 for float16 and bfloat16.
Tensor nansum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor nanmean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// The number of nonzero (true) elements over dims (all when empty): int64.
Tensor count_nonzero(const Tensor& x, const Shape& dims = {});
// (amin, amax) over one dim, or of all elements (0-d each) without one.
std::pair<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

}  // namespace kiln
