// The composed activations of activation.h. Each checks its input, then builds the function from
// elementwise ops whose gradients give PyTorch's (at a kink, the side PyTorch takes).
#include "core/ops/activation.h"

#include <cmath>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"

namespace kiln {
namespace {

void check_input(const char* op, const Tensor& x) {
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
}

void check_finite(const char* op, const char* what, double v) {
  if (!std::isfinite(v)) throw Error(std::string(op) + ": " + what + " must be finite, got " + num_str(v));
}

// x where x <= 0, else 0: the argument of the exponential on the negative side.
Tensor negative_part(const Tensor& x) { return where(gt(x, 0.0), 0.0, x); }

// SELU's constants (Klambauer et al., "Self-Normalizing Neural Networks"), as PyTorch writes them.
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

}  // namespace

Tensor elu(const Tensor& x, double alpha) {
  check_input("elu", x);
  check_finite("elu", "alpha", alpha);
  return where(gt(x, 0.0), x, (exp(negative_part(x)) - 1.0) * alpha);
}

Tensor selu(const Tensor& x) {
  check_input("selu", x);
  return where(gt(x, 0.0), x, (exp(negative_part(x)) - 1.0) * kSeluAlpha) * kSeluScale;
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  check_input("hardtanh", x);
  check_finite("hardtanh", "min_val", min_val);
  check_finite("hardtanh", "max_val", max_val);
  if (min_val > max_val) {
    throw Error("hardtanh: min_val " + num_str(min_val) + " is above max_val " + num_str(max_val));
  }
  return clamp(x, min_val, max_val);
}

Tensor relu6(const Tensor& x) {
  check_input("relu6", x);
  return clamp(x, 0.0, 6.0);
}

Tensor hardsigmoid(const Tensor& x) {
  check_input("hardsigmoid", x);
  return clamp(x + 3.0, 0.0, 6.0) / 6.0;
}

Tensor hardswish(const Tensor& x) {
  check_input("hardswish", x);
  return x * (clamp(x + 3.0, 0.0, 6.0) / 6.0);
}

Tensor mish(const Tensor& x) {
  check_input("mish", x);
  return x * tanh(softplus(x));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  const char* op = "prelu";
  check_input(op, x);
  ops::check_defined(op, weight, "weight");
  ops::check_floating(op, weight, "weight");
  ops::common_device(op, {&x, &weight});
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  if (weight.dim() != 1 || (weight.numel() != 1 && weight.numel() != channels)) {
    throw ShapeError("prelu: weight of shape " + shape_str(weight.sizes()) + " must hold 1 value or one per channel (" +
                     std::to_string(channels) + ", dim 1 of input " + shape_str(x.sizes()) + ")");
  }
  Tensor w = weight;
  if (weight.numel() > 1) {  // along dim 1
    Shape s(static_cast<size_t>(x.dim()), 1);
    s[1] = channels;
    w = weight.reshape(s);
  } else {
    w = weight.reshape({});
  }
  return where(gt(x, 0.0), x, x * w);
}

}  // namespace kiln
