// topk: the k largest (or smallest) values along a dim, with their indices; sort and what is read
// off a sorted dim (median, kthvalue, quantile).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace kiln {

// k largest (or smallest) along dim, sorted; values and int64 indices (ties: lower index first).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
// x sorted along dim, ascending (or descending), with the int64 indices that sort it: topk of the
// whole dim, so NaN sorts above every number (last ascending, first descending, as PyTorch) and
// equal values keep their order (torch.sort's stable=True).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The indices of sort.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

// The k-th smallest value along dim (k from 1) and its index, NaN counting above every number, as
// torch.kthvalue. The gradient goes to the element at the index.
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The lower median along dim (the ((n - 1) / 2)-th smallest) and its index; NaN where the line
// holds a NaN (at the first NaN's index), as torch.median. Without a dim, of all elements (0-d).
std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor median(const Tensor& x);
// The lower median of the values that are not NaN (NaN for a line of NaNs), as torch.nanmedian.
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);

// How quantile reads between the two sorted values around position q (n - 1), as torch.quantile's
// interpolation argument.
enum class QuantileInterpolation : uint8_t { Linear, Lower, Higher, Midpoint, Nearest };
// The q-quantile (q in [0, 1]) along dim, or of all elements when dim is empty; NaN where the line
// holds a NaN. Floating x. With several q, one result per q stacked along a new leading dim.
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                QuantileInterpolation interpolation = QuantileInterpolation::Linear);
Tensor quantile(const Tensor& x, const std::vector<double>& q, std::optional<int64_t> dim = std::nullopt,
                bool keepdim = false, QuantileInterpolation interpolation = QuantileInterpolation::Linear);
// quantile of the values that are not NaN (NaN for a line of NaNs), as torch.nanquantile.
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   QuantileInterpolation interpolation = QuantileInterpolation::Linear);
Tensor nanquantile(const Tensor& x, const std::vector<double>& q, std::optional<int64_t> dim = std::nullopt,
                   bool keepdim = false, QuantileInterpolation interpolation = QuantileInterpolation::Linear);

}  // namespace kiln
