// The composed pointwise ops of core/ops/pointwise.h; checks first, naming the op and the offending
// dtypes, devices or values.
#include "core/ops/pointwise.h"

#include <cmath>
#include <numbers>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {
namespace {

void check_three(const char* op, const Tensor& input, const Tensor& t1, const Tensor& t2) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, t1, "tensor1");
  ops::check_defined(op, t2, "tensor2");
  ops::common_device(op, {&input, &t1, &t2});
  broadcast_shapes(broadcast_shapes(input.sizes(), t1.sizes(), op), t2.sizes(), op);
}

void check_tolerances(const char* op, double rtol, double atol) {
  if (!(rtol >= 0.0) || !(atol >= 0.0)) {
    throw Error(std::string(op) + ": rtol and atol must be >= 0, got rtol " + num_str(rtol) + " and atol " +
                num_str(atol));
  }
}

}  // namespace

Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  check_three("addcmul", input, t1, t2);
  return add(input, mul(t1, t2), value);
}

Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  const char* op = "addcdiv";
  check_three(op, input, t1, t2);
  if (!is_floating(t1.dtype()) && !is_floating(t2.dtype())) {
    throw DTypeError(std::string(op) + ": integer division of tensor1 (" + dtype_name(t1.dtype()) + ") by tensor2 (" +
                     dtype_name(t2.dtype()) + ") is not supported; make one of them floating");
  }
  return add(input, div(t1, t2), value);
}

Tensor logical_xor(const Tensor& a, const Tensor& b) {
  const char* op = "logical_xor";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  ops::common_device(op, {&a, &b});
  return ne(ne(a, 0), ne(b, 0));
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  const char* op = "isclose";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  ops::common_device(op, {&a, &b});
  if (a.dtype() != b.dtype()) {
    throw DTypeError(std::string(op) + ": a and b must have one dtype, got " + dtype_name(a.dtype()) + " and " +
                     dtype_name(b.dtype()));
  }
  check_tolerances(op, rtol, atol);
  broadcast_shapes(a.sizes(), b.sizes(), op);
  NoGradGuard no_grad;  // a comparison: no gradient
  Tensor close = eq(a, b);
  if (a.dtype() == DType::Bool) return close;
  const Tensor x = is_floating(a.dtype()) ? a : a.to(kDefaultFloat);
  const Tensor y = is_floating(b.dtype()) ? b : b.to(kDefaultFloat);
  if (equal_nan) close = logical_or(close, logical_and(isnan(x), isnan(y)));
  const Tensor error = abs(sub(x, y));
  const Tensor allowed = add(abs(mul(y, rtol)), atol);
  return logical_or(close, logical_and(isfinite(error), le(error, allowed)));
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  try {
    return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
  } catch (const DTypeError& e) {
    throw DTypeError(std::string("allclose: ") + e.what());
  }
}

bool equal(const Tensor& a, const Tensor& b) {
  const char* op = "equal";
  ops::check_defined(op, a, "a");
  ops::check_defined(op, b, "b");
  ops::common_device(op, {&a, &b});
  if (a.sizes() != b.sizes()) return false;
  NoGradGuard no_grad;
  return all(eq(a, b)).item<bool>();
}

Tensor rad2deg(const Tensor& x) {
  ops::check_defined("rad2deg", x, "input");
  return mul(x, 180.0 / std::numbers::pi);
}

Tensor deg2rad(const Tensor& x) {
  ops::check_defined("deg2rad", x, "input");
  return mul(x, std::numbers::pi / 180.0);
}

}  // namespace kiln
