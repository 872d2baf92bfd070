// dropout: the mask is a pure function of the draw (kernels/dropout.h), so the node keeps the
// PhiloxState instead of a byte per element and the backward redraws the identical mask. The draw
// may read its seed and offset from a captured graph's device memory (core/random.h): a replayed
// step then redraws the mask of that replay in its backward too.
#include "core/ops/dropout.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/dropout.h"

namespace kiln {
namespace {

// Every dropout's p: in [0, 1], else a kiln::Error naming op, p and the input's shape.
void check_probability(const char* op, double p, const Tensor& x) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw Error(std::string(op) + ": probability p must be in [0, 1], got " + num_str(p) + " (input " +
                shape_str(x.sizes()) + ")");
  }
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  const char* op = "dropout";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  check_probability(op, p, x);
  if (!training || p == 0.0) return x;
  ops::KernelScope scope(op, x.device());
  const PhiloxState state = generator_for(op, x.device(), generator).next();
  Tensor out = ops::empty_for(op, x.sizes(), ops::strides_like(x.sizes(), x), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) scope.run(kernels::dropout, ops::make_arg(op, out), ops::make_arg(op, x.detach()), p, state);
  if (needs_grad({&x})) {
    DType dt = x.dtype();
    record_function(op, {x}, {out}, {}, [p, state, dt](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0].detach();
      Tensor dx = empty_strided(g.sizes(), ops::strides_like(g.sizes(), g), TensorOptions(dt, g.device()));
      if (dx.numel() > 0)
        ops::launch("dropout", g.device(), kernels::dropout, ops::make_arg("dropout", dx), ops::make_arg("dropout", g),
                    p, state);
      return TensorList{dx};
    });
  }
  return out;
}

namespace {

Tensor feature_dropout(const char* op, const Tensor& x, double p, bool training, int64_t spatial,
                       const std::optional<Generator>& generator) {
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2) {
    throw ShapeError(std::string(op) + ": input must be [N, C, " + std::to_string(spatial) +
                     " spatial dims] or unbatched [C, ...], so " + std::to_string(spatial + 2) + "-d or " +
                     std::to_string(spatial + 1) + "-d, got shape " + shape_str(x.sizes()));
  }
  check_probability(op, p, x);
  if (!training || p == 0.0) return x;
  Shape mask_shape = x.sizes();
  for (size_t d = mask_shape.size() - static_cast<size_t>(spatial); d < mask_shape.size(); ++d) mask_shape[d] = 1;
  return x * dropout(ones(mask_shape, TensorOptions(x.dtype(), x.device())), p, true, generator);
}

}  // namespace

Tensor dropout1d(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  return feature_dropout("dropout1d", x, p, training, 1, generator);
}

Tensor dropout2d(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  return feature_dropout("dropout2d", x, p, training, 2, generator);
}

Tensor dropout3d(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  return feature_dropout("dropout3d", x, p, training, 3, generator);
}

namespace {

// alpha_dropout's map of x under the keep mask (1 kept, 0 dropped; broadcast to x).
Tensor alpha_dropout_as(const char* op, const Tensor& x, double p, bool training, const Shape& mask_shape,
                        const std::optional<Generator>& generator) {
  check_probability(op, p, x);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  constexpr double alpha = 1.7580993408473766;  // SELU's scale times its alpha
  const double a = 1.0 / std::sqrt((alpha * alpha * p + 1.0) * (1.0 - p));
  const Tensor keep =
      ne(dropout(ones(mask_shape, TensorOptions(x.dtype(), x.device())), p, true, generator), 0.0).to(x.dtype());
  // a (x m + alpha (m - 1 + p)): kept elements a (x + alpha p), dropped ones -a alpha (1 - p).
  return add(mul(x, mul(keep, a)), mul(add(keep, p - 1.0), alpha * a));
}

}  // namespace

Tensor alpha_dropout(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  const char* op = "alpha_dropout";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  return alpha_dropout_as(op, x, p, training, x.sizes(), generator);
}

Tensor feature_alpha_dropout(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  const char* op = "feature_alpha_dropout";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (x.dim() < 2) {
    throw ShapeError(std::string(op) + ": input must be [N, C, *] or [C, *] (2-d or more), got shape " +
                     shape_str(x.sizes()));
  }
  Shape mask_shape = x.sizes();
  for (size_t d = 2; d < mask_shape.size(); ++d) mask_shape[d] = 1;
  return alpha_dropout_as(op, x, p, training, mask_shape, generator);
}

}  // namespace kiln
