// tril and triu: one kernel that zeroes the other triangle; the gradient keeps the same triangle.
#include "core/ops/triangle.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/triangle.h"

namespace kiln {

namespace {
Tensor triangle(const char* name, const Tensor& x, int64_t k, bool upper) {
  ops::check_defined(name, x, "input");
  if (x.dim() < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims, got shape " + shape_str(x.sizes()));
  Tensor out = ops::empty_for(name, x.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0)
    ops::launch(name, x.device(), kernels::triangle, ops::make_arg(name, out), ops::make_arg(name, x), k, upper);
  if (needs_grad({&x})) {
    record_function(name, {x}, {out}, {}, [k, upper](const FunctionNode::Context& ctx) {
      return TensorList{upper ? triu(ctx.grads[0], k) : tril(ctx.grads[0], k)};
    });
  }
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, k, false); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, k, true); }

}  // namespace kiln
