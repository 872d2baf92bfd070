// cumsum, cumprod and logcumsumexp as an inclusive scan in ceil(log2 L) steps over a dim of length
// L (Hillis and Steele's): after step k, element i holds the combination of the 2^(k+1) elements
// ending at i (all of them from the start, for the first 2^(k+1)). Step k keeps the first 2^k
// elements and combines each later one with the one 2^k before it: one narrow, one add, mul or
// logaddexp and one cat. No kernel of its own: every device that runs those ops runs the scan, and
// autograd differentiates it (cumsum's gradient, the reversed cumsum of the output gradient, comes
// out of the adds' and the cats' backward). The cost: L log L combinations instead of L, and log L
// intermediate tensors the backward keeps; the rounding: each output is a balanced tree of sums, no
// worse than a running sum. cummax and cummin scan (value, index) pairs the same way, choosing
// rather than combining, and take the values with a gather at the indices, whose backward routes
// the gradient.
#include "core/ops/scan.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// `what`: "sum" or "product", for messages.
Tensor scan(const char* op, const char* what, const Tensor& x, int64_t dim, std::optional<DType> dtype,
            Tensor (*combine)(const Tensor&, const Tensor&)) {
  ops::check_defined(op, x, "input");
  const DType out_dtype = dtype ? *dtype : (is_floating(x.dtype()) ? x.dtype() : DType::Int64);
  if (out_dtype == DType::Bool) {
    throw DTypeError(std::string(op) + ": dtype bool cannot hold a running " + what + " (input " +
                     dtype_name(x.dtype()) + " " + shape_str(x.sizes()) + ")");
  }
  if (is_floating(x.dtype()) && !is_floating(out_dtype)) {
    throw DTypeError(std::string(op) + ": a " + dtype_name(x.dtype()) + " input cannot scan into " +
                     dtype_name(out_dtype) + " (input " + shape_str(x.sizes()) + ")");
  }
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  // A new tensor even where no step runs (0-d, L <= 1): the result never aliases x.
  Tensor y = to_dtype(x, ops::widened_dtype(out_dtype));
  if (y.is_same(x)) y = x.clone();
  if (x.dim() > 0) {
    const int64_t length = x.size(d);
    for (int64_t step = 1; step < length; step *= 2) {
      y = cat({y.narrow(d, 0, step), combine(y.narrow(d, step, length - step), y.narrow(d, 0, length - step))}, d);
    }
  }
  return to_dtype(y, out_dtype);
}

Tensor add2(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor mul2(const Tensor& a, const Tensor& b) { return mul(a, b); }

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  if (std::optional<TensorList> c = autocast::cast_inputs("cumsum", {&x})) return cumsum((*c)[0], dim, dtype);
  return scan("cumsum", "sum", x, dim, dtype, &add2);
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  if (std::optional<TensorList> c = autocast::cast_inputs("cumprod", {&x})) return cumprod((*c)[0], dim, dtype);
  return scan("cumprod", "product", x, dim, dtype, &mul2);
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  ops::check_defined("logcumsumexp", x, "input");
  ops::check_floating("logcumsumexp", x, "input");
  return scan("logcumsumexp", "log-sum-exp", x, dim, std::nullopt, &logaddexp);
}

Tensor diff(const Tensor& x, int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append) {
  const char* op = "diff";
  ops::check_defined(op, x, "input");
  if (x.dim() == 0) throw ShapeError("diff: needs at least one dim, got a 0-d input");
  if (n < 0) throw Error("diff: n must be >= 0, got " + std::to_string(n));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  TensorList parts;
  for (const Tensor* t : {&prepend, &x, &append}) {
    if (!t->defined()) continue;
    if (t->dim() != x.dim()) {
      throw ShapeError("diff: prepend and append must have the input's " + std::to_string(x.dim()) + " dims, got " +
                       shape_str(t->sizes()) + " beside " + shape_str(x.sizes()));
    }
    parts.push_back(*t);
  }
  Tensor y = parts.size() == 1 ? x : cat(parts, d);
  for (int64_t k = 0; k < n && y.size(d) > 0; ++k) {
    const int64_t length = y.size(d) - 1;
    const Tensor later = y.narrow(d, 1, length), earlier = y.narrow(d, 0, length);
    y = y.dtype() == DType::Bool ? ne(later, earlier) : later - earlier;
  }
  return n == 0 ? y.clone() : y;
}

namespace {

// cummax (is_max) or cummin. The scan's choice between the running value before (left, earlier)
// and the one at an element (right): the right one where it is NaN, or where neither is NaN and
// it is >= (<=) the left one. That is the maximum under an order with NaN on top and ties going
// to the later index, an associative choice, so the logarithmic scan makes it as a left-to-right
// pass would.
std::pair<Tensor, Tensor> running_extreme(const char* op, const Tensor& x, int64_t dim, bool is_max) {
  ops::check_defined(op, x, "input");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  const TensorOptions index_options(DType::Int64, x.device());
  if (x.dim() == 0) return {x.clone(), zeros({}, index_options)};
  const int64_t length = x.size(d);
  Tensor index;
  {
    NoGradGuard no_grad;
    Shape line(static_cast<size_t>(x.dim()), 1);
    line[static_cast<size_t>(d)] = length;
    index = arange(0, length, 1, index_options).reshape(line).expand(x.sizes()).contiguous();
    Tensor v = x.detach();
    for (int64_t step = 1; step < length; step *= 2) {
      const Tensor left = v.narrow(d, 0, length - step), right = v.narrow(d, step, length - step);
      const Tensor ordered = is_max ? ge(right, left) : le(right, left);
      const Tensor take = logical_or(isnan(right), logical_and(logical_not(isnan(left)), ordered));
      v = cat({v.narrow(d, 0, step), where(take, right, left)}, d);
      index = cat({index.narrow(d, 0, step),
                   where(take, index.narrow(d, step, length - step), index.narrow(d, 0, length - step))},
                  d);
    }
  }
  return {gather(x, d, index), index};
}

}  // namespace

std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) { return running_extreme("cummax", x, dim, true); }
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) { return running_extreme("cummin", x, dim, false); }

}  // namespace kiln
