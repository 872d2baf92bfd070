// In-place elementwise ops: add_, sub_, mul_, div_ (tensor and scalar), clamp_ and masked_fill_.
// Each checks that the result dtype casts to self's and that the other operand broadcasts to self's
// shape, runs the kernel into self, bumps the version counter and records the same autograd node as
// its out-of-place form (core/ops/elementwise_grad.h), so self's history includes the op.
#include <limits>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/elementwise_grad.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"

namespace kiln {
namespace {

void check_broadcast_to_self(const char* op, const Tensor& self, const Tensor& other) {
  ops::common_device(op, {&self, &other});
  if (broadcast_shapes(self.sizes(), other.sizes(), op) != self.sizes()) {
    throw ShapeError(std::string(op) + ": operand of shape " + shape_str(other.sizes()) +
                     " does not broadcast to the in-place target's shape " + shape_str(self.sizes()));
  }
}

// The tensor an in-place op on self reads for `other`, taken in rt (result_type): other as
// ops::readable_input gives it, converted to rt where PyTorch's conversion to the common dtype
// changes its values (ops::operand_in).
Tensor other_input(const char* op, const Tensor& self, const Tensor& other, DType rt) {
  return ops::operand_in(op, ops::readable_input(self, other), self, rt);
}

// self = op(self, other) elementwise, computed in rt's compute type.
void apply_binary_inplace(const char* op, const Tensor& self, const Operand& other, bool other_is_tensor, BinaryOp bop,
                          DType rt, double alpha) {
  if (self.numel() == 0) return;
  StridedArg o = ops::make_arg(op, self);
  Operand x = ops::make_operand(op, self, self.sizes());
  Operand y = other;
  std::vector<StridedArg*> args{&o, &x.arg};
  if (other_is_tensor) args.push_back(&y.arg);
  ops::collapse_dims(args);
  ops::launch(op, self.device(), kernels::binary, o, x, y, bop, compute_dtype_for(rt), alpha, 0.0);
}

// self += alpha * other; `op` names add_ or sub_ in errors and in the graph.
void add_inplace(const char* op, Tensor& self, const Tensor& other, const Scalar& alpha) {
  ops::check_inplace(op, self, {&other});
  ops::check_defined(op, other, "operand");
  ops::check_no_overlap(op, self, {&other});
  check_broadcast_to_self(op, self, other);
  DType rt = result_type(self, other);
  if (alpha.is_floating() && !is_floating(rt)) {
    throw DTypeError(std::string(op) + ": a float alpha (" + alpha.str() + ") needs floating operands, got " +
                     dtype_name(rt));
  }
  ops::check_inplace_cast(op, rt, self);
  // An integer alpha that a double does not hold scales other first, exactly (as add does).
  if (!is_floating(rt) && rt != DType::Bool && !ops::exact_in_double(alpha)) {
    add_inplace(op, self, mul(other.to(rt), alpha), Scalar(1));
    return;
  }
  const Tensor input = other_input(op, self, other, rt);  // alive until the kernel is launched
  apply_binary_inplace(op, self, ops::make_operand(op, input, self.sizes()), true, BinaryOp::Add, rt,
                       alpha.to_double());
  self.bump_version();
  ops::record_add(op, self, other, self, alpha.to_double());
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  add_inplace("add_", *this, other, alpha);
  return *this;
}

Tensor& Tensor::sub_(const Tensor& other, const Scalar& alpha) {
  if ((defined() && dtype() == DType::Bool) || (other.defined() && other.dtype() == DType::Bool)) {
    throw DTypeError("sub_: bool tensors cannot be subtracted; use ne");
  }
  add_inplace("sub_", *this, other, ops::negated(alpha));
  return *this;
}

Tensor& Tensor::add_(const Scalar& other) {
  ops::check_inplace("add_", *this, {});
  ops::check_no_overlap("add_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  ops::check_inplace_cast("add_", rt, *this);
  apply_binary_inplace("add_", *this, ops::scalar_operand(other), false, BinaryOp::Add, rt, 1.0);
  bump_version();
  ops::record_scalar("add_", *this, *this, ops::ScalarGrad::Identity, other);
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  ops::check_inplace("mul_", *this, {&other});
  ops::check_defined("mul_", other, "operand");
  ops::check_no_overlap("mul_", *this, {&other});
  check_broadcast_to_self("mul_", *this, other);
  DType rt = result_type(*this, other);
  ops::check_inplace_cast("mul_", rt, *this);
  // other's gradient needs self's value from before the product; self's needs other's, which is
  // about to change too when other shares self's memory (x.mul_(x)): a copy of it then.
  const bool grads = needs_grad({this, &other});
  Tensor old = grads && other.requires_grad() ? detach().clone() : Tensor();
  const Tensor other_value = grads && ops::shares_storage(*this, other) ? other.detach().clone() : other;
  const Tensor input = other_input("mul_", *this, other, rt);  // alive until the kernel is launched
  apply_binary_inplace("mul_", *this, ops::make_operand("mul_", input, sizes()), true, BinaryOp::Mul, rt, 1.0);
  bump_version();
  ops::record_mul("mul_", *this, other, *this, old, other_value);
  return *this;
}

Tensor& Tensor::mul_(const Scalar& other) {
  ops::check_inplace("mul_", *this, {});
  ops::check_no_overlap("mul_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  ops::check_inplace_cast("mul_", rt, *this);
  apply_binary_inplace("mul_", *this, ops::scalar_operand(other), false, BinaryOp::Mul, rt, 1.0);
  bump_version();
  ops::record_scalar("mul_", *this, *this, ops::ScalarGrad::Mul, other);
  return *this;
}

Tensor& Tensor::div_(const Tensor& other) {
  ops::check_inplace("div_", *this, {&other});
  ops::check_defined("div_", other, "operand");
  ops::check_no_overlap("div_", *this, {&other});
  check_broadcast_to_self("div_", *this, other);
  DType rt = result_type(*this, other);
  if (!is_floating(rt)) rt = kDefaultFloat;
  ops::check_inplace_cast("div_", rt, *this);
  // The backward divides by other as it was: a copy when it is self (x.div_(x)).
  const Tensor other_value =
      needs_grad({this, &other}) && ops::shares_storage(*this, other) ? other.detach().clone() : Tensor();
  const Tensor input = other_input("div_", *this, other, rt);  // alive until the kernel is launched
  apply_binary_inplace("div_", *this, ops::make_operand("div_", input, sizes()), true, BinaryOp::Div, rt, 1.0);
  bump_version();
  ops::record_div("div_", *this, other, *this, other_value);
  return *this;
}

Tensor& Tensor::div_(const Scalar& other) {
  ops::check_inplace("div_", *this, {});
  ops::check_no_overlap("div_", *this, {});
  DType rt = promote_with_scalar(dtype(), other);
  if (!is_floating(rt)) rt = kDefaultFloat;
  ops::check_inplace_cast("div_", rt, *this);
  apply_binary_inplace("div_", *this, ops::scalar_operand(other), false, BinaryOp::Div, rt, 1.0);
  bump_version();
  ops::record_scalar("div_", *this, *this, ops::ScalarGrad::Div, other);
  return *this;
}

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  ops::check_inplace("clamp_", *this, {});
  ops::check_no_overlap("clamp_", *this, {});
  Tensor r = [&] {
    NoGradGuard g;
    return clamp(*this, min, max);
  }();
  ops::check_inplace_cast("clamp_", r.dtype(), *this);
  Tensor old = needs_grad({this}) ? detach().clone() : Tensor();
  ops::copy_raw(*this, r);
  bump_version();
  ops::record_clamp("clamp_", *this, *this, old, min, max);
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  ops::check_inplace("masked_fill_", *this, {});
  ops::check_no_overlap("masked_fill_", *this, {});  // rows of an expand would overwrite each other's fills
  Tensor r = [&] {
    NoGradGuard g;
    return masked_fill(*this, mask, value);
  }();
  ops::copy_raw(*this, r);
  bump_version();
  ops::record_where("masked_fill_", mask, Tensor(), *this, *this);  // the gradient of the kept elements
  return *this;
}

}  // namespace kiln
