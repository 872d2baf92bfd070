// dropout: the mask is a pure function of the draw (kernels/dropout.h), so the node keeps the
// PhiloxState instead of a byte per element and the backward redraws the identical mask. The draw
// may read its seed and offset from a captured graph's device memory (core/random.h): a replayed
// step then redraws the mask of that replay in its backward too.
#include "core/ops/dropout.h"

#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/dropout.h"

namespace kiln {

Tensor dropout(const Tensor& x, double p, bool training, const std::optional<Generator>& generator) {
  const char* op = "dropout";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (!(p >= 0.0 && p <= 1.0)) {
    throw Error("dropout: probability p must be in [0, 1], got " + num_str(p) + " (input " + shape_str(x.sizes()) +
                ")");
  }
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

}  // namespace kiln
