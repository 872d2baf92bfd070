// topk: the dim moves last and rows become contiguous, the kernel sorts [rows, k] winners, and the
// gradient flows back to the chosen indices (a scatter_add).
#include "core/ops/topk.h"

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
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

}  // namespace kiln
