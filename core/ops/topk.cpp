// topk: the dim moves last and rows become contiguous, the kernel sorts [rows, k] winners, and the
// gradient flows back to the chosen indices (a scatter_add). kthvalue, median and quantile sort the
// dim and gather x at the indices they read off it, so their gradient is gather's.
#include "core/ops/topk.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "kernels/topk.h"

namespace kiln {

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  ops::check_defined("topk", x, "input");
  // A 0-d input is one element: dims 0 and -1 name it.
  int64_t d = x.dim() == 0 ? ops::checked_dim("topk", x, dim) : wrap_dim(dim, x.dim(), "topk");
  int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 0 || k > n) {
    throw IndexError("topk: k = " + std::to_string(k) + " is out of range for dimension " + std::to_string(d) +
                     " of size " + std::to_string(n) + " (shape " + shape_str(x.sizes()) + ")");
  }
  if (x.dtype() == DType::Bool) throw DTypeError("topk: not defined for bool tensors");
  // Move dim last and make rows contiguous; the kernel works on [rows, n].
  Tensor moved = x.dim() == 0 ? x.reshape({1}) : x.transpose(d, -1);
  Tensor src = moved.detach().contiguous();
  Shape out_shape = moved.sizes();
  out_shape.back() = k;
  int64_t rows = n == 0 ? 0 : src.numel() / n;
  Tensor values = ops::empty_for("topk", out_shape, TensorOptions(x.dtype(), x.device()));
  Tensor indices = ops::empty_for("topk", out_shape, TensorOptions(DType::Int64, x.device()));
  if (rows > 0 && k > 0) {
    ops::launch("topk", x.device(), kernels::topk, values.data_ptr(), values.dtype(), indices.data_ptr<int64_t>(),
                src.data_ptr(), src.dtype(), rows, n, k, largest);
  }
  if (x.dim() == 0) {
    if (k == 1) {  // the element itself; k = 0 leaves [0] tensors (0-d ones hold one element)
      values = values.reshape({});
      indices = indices.reshape({});
    }
  } else {
    values = values.transpose(d, -1);
    indices = indices.transpose(d, -1);
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function("topk", {x}, {values}, {indices}, [xs, d, k](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      if (xs.empty()) return TensorList{k == 1 ? g : zeros(xs, TensorOptions(g.dtype(), g.device()))};
      return TensorList{scatter_add(zeros(xs, TensorOptions(g.dtype(), g.device())), d, ctx.saved_at(0), g)};
    });
  }
  return {values, indices};
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  ops::check_defined("sort", x, "input");
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  return topk(x, x.size(d), d, descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return sort(x, dim, descending).second; }

namespace {

// A dim of x for an op reading a sorted line: wrapped, and not empty.
int64_t line_dim(const char* op, const Tensor& x, int64_t dim) {
  ops::check_defined(op, x, "input");
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
  if (x.dim() > 0 && x.size(d) == 0) {
    throw IndexError(std::string(op) + ": dimension " + std::to_string(d) + " of the input " + shape_str(x.sizes()) +
                     " is empty");
  }
  if (x.dtype() == DType::Bool) throw DTypeError(std::string(op) + ": not defined for bool tensors");
  return d;
}

// x's values at `index` (int64, x's shape but 1 along d) and the index, keepdim or not.
std::pair<Tensor, Tensor> pick(const Tensor& x, int64_t d, const Tensor& index, bool keepdim) {
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(DType::Int64, x.device()))};
  Tensor values = gather(x, d, index);
  return keepdim ? std::pair{values, index} : std::pair{values.squeeze(d), index.squeeze(d)};
}

}  // namespace

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  const int64_t d = line_dim("kthvalue", x, dim);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 1 || k > n) {
    throw IndexError("kthvalue: k = " + std::to_string(k) + " is out of range for dimension " + std::to_string(d) +
                     " of size " + std::to_string(n) + " (shape " + shape_str(x.sizes()) + ")");
  }
  if (x.dim() == 0) return pick(x, d, Tensor(), keepdim);
  return pick(x, d, argsort(x.detach(), d).narrow(d, k - 1, 1), keepdim);
}

std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = line_dim("median", x, dim);
  if (x.dim() == 0) return pick(x, d, Tensor(), keepdim);
  const int64_t n = x.size(d);
  const Tensor order = argsort(x.detach(), d);
  // NaNs sort last: a line with some reads its first one, at position n - (number of NaNs).
  const Tensor nans = sum(isnan(x.detach()), {d}, true);
  const Tensor position = where(gt(nans, 0), sub(n, nans), (n - 1) / 2);
  return pick(x, d, gather(order, d, position), keepdim);
}

Tensor median(const Tensor& x) {
  ops::check_defined("median", x, "input");
  if (x.numel() == 0) throw IndexError("median: the input " + shape_str(x.sizes()) + " is empty");
  return median(x.reshape({-1}), 0, false).first;
}

std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = line_dim("nanmedian", x, dim);
  if (x.dim() == 0) return pick(x, d, Tensor(), keepdim);
  const Tensor order = argsort(x.detach(), d);
  // The NaNs sort last: the lower median of the count values before them (a line of NaNs reads
  // its first NaN).
  const Tensor count = sub(x.size(d), sum(isnan(x.detach()), {d}, true));
  const Tensor position = where(gt(count, 0), floor_divide(sub(count, 1), 2), Scalar(0));
  return pick(x, d, gather(order, d, position), keepdim);
}

Tensor nanmedian(const Tensor& x) {
  ops::check_defined("nanmedian", x, "input");
  if (x.numel() == 0) throw IndexError("nanmedian: the input " + shape_str(x.sizes()) + " is empty");
  return nanmedian(x.reshape({-1}), 0, false).first;
}

namespace {

// quantile and nanquantile. Each line counts its values (all n, or with ignore_nan the non-NaN
// ones, which sort first) and reads the sorted values around position q (count - 1): one position
// per line, computed in float64, the values gathered there and blended in the widened dtype. The
// result is NaN where the line holds a NaN (quantile) or nothing but NaNs (nanquantile).
Tensor quantile_impl(const char* op, const Tensor& x, const std::vector<double>& qs, std::optional<int64_t> dim,
                     bool keepdim, QuantileInterpolation interpolation, bool ignore_nan) {
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (qs.empty()) throw Error(std::string(op) + ": needs at least one q");
  for (double q : qs) {
    if (!(q >= 0.0 && q <= 1.0)) throw Error(std::string(op) + ": q must be in [0, 1], got " + num_str(q));
  }
  // Without a dim: of all elements, as a line; keepdim then keeps every dim at size 1.
  const Tensor line = dim ? (x.dim() == 0 ? x.reshape({1}) : x) : x.reshape({-1});
  const int64_t d = dim ? (x.dim() == 0 ? ops::checked_dim(op, x, *dim) : wrap_dim(*dim, x.dim(), op)) : 0;
  const int64_t n = line.size(d);
  if (n == 0) {
    throw IndexError(std::string(op) + ": the input " + shape_str(x.sizes()) + " is empty along the reduced dim");
  }
  const Tensor order = argsort(line.detach(), d);
  const Tensor nans = sum(isnan(line.detach()), {d}, true);
  const Tensor count = ignore_nan ? sub(n, nans) : full_like(nans, n);
  const Tensor undefined = ignore_nan ? eq(count, 0) : gt(nans, 0);
  // The last position read, count - 1 (0 for a line of NaNs, whose result is NaN anyway).
  const Tensor last = clamp(sub(count, 1), Scalar(0), std::nullopt).to(DType::Float64);
  const DType wide = ops::widened_dtype(x.dtype());
  auto at = [&](const Tensor& position) {
    return gather(line, d, gather(order, d, position.to(DType::Int64))).to(wide);
  };
  TensorList results;
  for (double q : qs) {
    const Tensor position = mul(last, q);
    const Tensor lo = floor(position), hi = ceil(position);
    Tensor v;
    if (interpolation == QuantileInterpolation::Lower) {
      v = at(lo);
    } else if (interpolation == QuantileInterpolation::Higher) {
      v = at(hi);
    } else if (interpolation == QuantileInterpolation::Nearest) {
      v = at(round(position));
    } else {
      // Midpoint and Linear blend the values around the position, each read once; an exact
      // position is its value, unblended.
      const Tensor below = at(lo), above = at(hi);
      const Tensor blend = interpolation == QuantileInterpolation::Midpoint
                               ? (below + above) * 0.5
                               : below + (above - below) * sub(position, lo).to(wide);
      v = where(eq(lo, hi), below, blend);
    }
    v = where(undefined, std::numeric_limits<double>::quiet_NaN(), v).to(x.dtype());
    if (!dim) {
      v = keepdim ? v.reshape(Shape(static_cast<size_t>(x.dim()), 1)) : v.reshape({});
    } else if (x.dim() == 0) {
      v = v.reshape({});
    } else if (!keepdim) {
      v = v.squeeze(d);
    }
    results.push_back(v);
  }
  return stack(results, 0);
}

}  // namespace

Tensor quantile(const Tensor& x, const std::vector<double>& qs, std::optional<int64_t> dim, bool keepdim,
                QuantileInterpolation interpolation) {
  return quantile_impl("quantile", x, qs, dim, keepdim, interpolation, false);
}

Tensor nanquantile(const Tensor& x, const std::vector<double>& qs, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation interpolation) {
  return quantile_impl("nanquantile", x, qs, dim, keepdim, interpolation, true);
}

Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation interpolation) {
  return nanquantile(x, std::vector<double>{q}, dim, keepdim, interpolation).squeeze(0);
}

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                QuantileInterpolation interpolation) {
  return quantile(x, std::vector<double>{q}, dim, keepdim, interpolation).squeeze(0);
}

}  // namespace kiln
