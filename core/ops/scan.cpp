// cumsum and cumprod as an inclusive scan in ceil(log2 L) steps over a dim of length L (Hillis and
// Steele's): after step k, element i holds the combination of the 2^(k+1) elements ending at i (all
// of them from the start, for the first 2^(k+1)). Step k keeps the first 2^k elements and combines
// each later one with the one 2^k before it: one narrow, one add or mul and one cat. No kernel of
// its own: every device that runs those ops runs the scan, and autograd differentiates it (cumsum's
// gradient, the reversed cumsum of the output gradient, comes out of the adds' and the cats'
// backward). The cost: L log L combinations instead of L, and log L intermediate tensors the
// backward keeps; the rounding: each output is a balanced tree of sums, no worse than a running
// sum.
#include "core/ops/scan.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/ops/copy.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
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

}  // namespace kiln
