// The composed activations of activation.h. Each checks its input, then builds the function from
// elementwise ops whose gradients give PyTorch's (at a kink, the side PyTorch takes).
#include "core/ops/activation.h"

#include <cmath>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
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

// A shrink's threshold: a finite number >= 0.
void check_lambd(const char* op, double lambd) {
  if (!(lambd >= 0.0) || !std::isfinite(lambd)) {
    throw Error(std::string(op) + ": lambd must be a finite number >= 0, got " + num_str(lambd));
  }
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
  return where(gt(x, 0.0), x, expm1(negative_part(x)) * alpha);
}

Tensor selu(const Tensor& x) {
  check_input("selu", x);
  return where(gt(x, 0.0), x, expm1(negative_part(x)) * kSeluAlpha) * kSeluScale;
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

Tensor celu(const Tensor& x, double alpha) {
  check_input("celu", x);
  check_finite("celu", "alpha", alpha);
  if (alpha == 0.0) throw Error("celu: alpha must not be 0 (it divides x), got 0");
  return where(gt(x, 0.0), x, expm1(negative_part(x) / alpha) * alpha);
}

Tensor logsigmoid(const Tensor& x) {
  check_input("logsigmoid", x);
  return negative_part(x) - log1p(exp(-abs(x)));
}

Tensor softsign(const Tensor& x) {
  check_input("softsign", x);
  return x / (abs(x) + 1.0);
}

Tensor tanhshrink(const Tensor& x) {
  check_input("tanhshrink", x);
  return x - tanh(x);
}

Tensor softshrink(const Tensor& x, double lambd) {
  check_input("softshrink", x);
  check_lambd("softshrink", lambd);
  return where(gt(x, lambd), x - lambd, where(lt(x, -lambd), x + lambd, 0.0));
}

Tensor hardshrink(const Tensor& x, double lambd) {
  check_input("hardshrink", x);
  check_lambd("hardshrink", lambd);
  return where(gt(abs(x), lambd), x, 0.0);
}

Tensor threshold(const Tensor& x, double threshold, double value) {
  check_input("threshold", x);
  return where(gt(x, threshold), x, value);
}

Tensor glu(const Tensor& x, int64_t dim) {
  const char* op = "glu";
  check_input(op, x);
  if (x.dim() == 0) throw ShapeError("glu: a 0-d input has no dim to halve");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.size(d) % 2 != 0) {
    throw ShapeError("glu: dim " + std::to_string(dim) + " of input " + shape_str(x.sizes()) + " has odd size " +
                     std::to_string(x.size(d)) + ": it must split in two halves");
  }
  const int64_t half = x.size(d) / 2;
  return x.narrow(d, 0, half) * sigmoid(x.narrow(d, half, half));
}

Tensor softmin(const Tensor& x, int64_t dim) {
  check_input("softmin", x);
  return softmax(-x, dim);
}

}  // namespace kiln
