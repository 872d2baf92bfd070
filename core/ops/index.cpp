// index_select, gather and scatter_add: checks here, one index kernel each, and a backward that is
// the scatter or gather of the other kind. Indices are never wrapped; on CUDA a bad one is found on
// the device and raised as an IndexError at the next synchronizing call. one_hot compares the
// indices with an arange (its range check reads them on the host).
#include "core/ops/index.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/index.h"

namespace kiln {
namespace {

void check_index_tensor(const char* op, const Tensor& index) {
  ops::check_defined(op, index, "index");
  if (index.dtype() != DType::Int64 && index.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": index must be int64 or int32, got " + dtype_name(index.dtype()) + " (shape " +
                     shape_str(index.sizes()) + ")");
  }
}

// The index shape used by scatter_add for an index_add along dim: 1-d index expanded over `shape`.
Tensor expand_index_along(const Tensor& index, int64_t dim, const Shape& shape) {
  Shape view_shape(shape.size(), 1);
  view_shape[static_cast<size_t>(dim)] = index.numel();
  Shape target = shape;
  target[static_cast<size_t>(dim)] = index.numel();
  return index.reshape(view_shape).expand(target);
}

Tensor scatter_add_raw(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = self.detach().clone(MemoryFormat::Contiguous);
  if (index.numel() > 0) {
    // On CUDA a bad index is recorded on the device and raised at the next synchronizing call.
    ops::launch("scatter_add", self.device(), kernels::scatter_add, ops::make_arg("scatter_add", out),
                static_cast<int>(dim), ops::make_arg("scatter_add", index), ops::make_arg("scatter_add", src));
  }
  return out;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("index_select", x, "input");
  check_index_tensor("index_select", index);
  ops::common_device("index_select", {&x, &index});
  if (index.dim() > 1) {
    throw ShapeError("index_select: index must be 0-d or 1-d, got shape " + shape_str(index.sizes()));
  }
  Tensor idx = index.reshape({-1});
  if (x.dim() == 0 && idx.numel() != 1) {  // as PyTorch: a 0-d input's one element, picked once
    throw ShapeError("index_select: the index of a 0-d input must hold exactly one value, got " +
                     std::to_string(idx.numel()) + " (index shape " + shape_str(index.sizes()) + ")");
  }
  Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  int64_t d = wrap_dim(dim, src.dim(), "index_select");
  Shape out_shape = src.sizes();
  out_shape[static_cast<size_t>(d)] = idx.numel();
  Tensor out = ops::empty_for("index_select", out_shape, TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    ops::launch("index_select", x.device(), kernels::index_select, ops::make_arg("index_select", out),
                ops::make_arg("index_select", src), static_cast<int>(d), ops::make_arg("index_select", idx));
  } else if (idx.numel() > 0) {  // no kernel reads the index: checked here, as the kernel would
    ops::check_index_values("index_select", idx, src.size(d),
                            "dimension " + std::to_string(d) + " of size " + std::to_string(src.size(d)));
  }
  if (x.dim() == 0) out = out.reshape({});  // a 0-d input gives a 0-d result, as PyTorch's
  if (needs_grad({&x})) {
    Shape xs = src.sizes(), orig = x.sizes();
    record_function("index_select", {x}, {out}, {idx}, [xs, orig, d](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0].reshape([&] {
        Shape s = xs;
        s[static_cast<size_t>(d)] = ctx.saved_at(0).numel();
        return s;
      }());
      Tensor i = expand_index_along(ctx.saved_at(0), d, g.sizes());
      Tensor r = scatter_add_raw(zeros(xs, TensorOptions(g.dtype(), g.device())), d, i, g);
      return TensorList{r.reshape(orig)};
    });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("gather", x, "input");
  check_index_tensor("gather", index);
  ops::common_device("gather", {&x, &index});
  // A 0-d input is one element, named by dims 0 and -1.
  const int64_t d = x.dim() == 0 ? ops::checked_dim("gather", x, dim) : wrap_dim(dim, x.dim(), "gather");
  if (x.dim() <= 1 && index.dim() <= 1 && x.dim() != index.dim()) {
    // A 0-d tensor counts as one element of a 1-d one, as in PyTorch: gather([3], 0, 0-d) is 0-d.
    return gather(x.reshape({-1}), 0, index.reshape({-1})).reshape(index.sizes());
  }
  if (index.dim() != x.dim()) {
    throw ShapeError("gather: index must have as many dims as the input; input " + shape_str(x.sizes()) + ", index " +
                     shape_str(index.sizes()));
  }
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k != d && index.size(k) > x.size(k)) {
      throw ShapeError("gather: index " + shape_str(index.sizes()) + " is larger than input " + shape_str(x.sizes()) +
                       " in dimension " + std::to_string(k));
    }
  }
  Tensor out = ops::empty_for("gather", index.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    ops::launch("gather", x.device(), kernels::gather, ops::make_arg("gather", out), ops::make_arg("gather", x),
                static_cast<int>(d), ops::make_arg("gather", index));
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function("gather", {x}, {out}, {index}, [xs, d](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      return TensorList{scatter_add_raw(zeros(xs, TensorOptions(g.dtype(), g.device())), d, ctx.saved_at(0), g)};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined("scatter_add", x, "input");
  ops::check_defined("scatter_add", src, "src");
  check_index_tensor("scatter_add", index);
  ops::common_device("scatter_add", {&x, &index, &src});
  const int64_t d = x.dim() == 0 ? ops::checked_dim("scatter_add", x, dim) : wrap_dim(dim, x.dim(), "scatter_add");
  if (x.dim() <= 1 && index.dim() <= 1 && src.dim() <= 1 && (index.dim() != x.dim() || src.dim() != x.dim())) {
    // A 0-d tensor counts as one element of a 1-d one, as in PyTorch (and as gather's adjoint needs).
    return scatter_add(x.reshape({-1}), 0, index.reshape({-1}), src.reshape({-1})).reshape(x.sizes());
  }
  if (index.dim() != x.dim() || src.dim() != x.dim()) {
    throw ShapeError("scatter_add: input, index and src must have the same number of dims; got " +
                     shape_str(x.sizes()) + ", " + shape_str(index.sizes()) + ", " + shape_str(src.sizes()));
  }
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (index.size(k) > src.size(k) || (k != d && index.size(k) > x.size(k))) {
      throw ShapeError("scatter_add: index " + shape_str(index.sizes()) + " is larger than src " +
                       shape_str(src.sizes()) + " or input " + shape_str(x.sizes()) + " in dimension " +
                       std::to_string(k));
    }
  }
  if (src.dtype() != x.dtype()) {
    throw DTypeError(std::string("scatter_add: src dtype ") + dtype_name(src.dtype()) + " differs from input dtype " +
                     dtype_name(x.dtype()));
  }
  Tensor out = scatter_add_raw(x, d, index, src);
  if (needs_grad({&x, &src})) {
    Shape ss = src.sizes();
    record_function("scatter_add", {x, src}, {out}, {index}, [ss, d](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      TensorList r(2);
      if (ctx.needs_input_grad[0]) r[0] = g;
      if (ctx.needs_input_grad[1]) {
        Tensor idx = ctx.saved_at(0);
        Tensor gs = gather(g, d, idx);
        if (gs.sizes() != ss) {  // src larger than index: the rest got no gradient
          Tensor full_g = zeros(ss, TensorOptions(g.dtype(), g.device()));
          Tensor region = full_g;
          for (int64_t k = 0; k < idx.dim(); ++k) region = region.narrow(k, 0, idx.size(k));
          ops::copy_raw(region, gs);
          gs = full_g;
        }
        r[1] = gs;
      }
      return r;
    });
  }
  return out;
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  const char* op = "one_hot";
  ops::check_defined(op, index, "index");
  if (index.dtype() != DType::Int64 && index.dtype() != DType::Int32) {
    throw DTypeError(std::string("one_hot: index must hold integer class indices (int64), got ") +
                     dtype_name(index.dtype()) + " " + shape_str(index.sizes()));
  }
  if (num_classes < -1)
    throw Error("one_hot: num_classes must be -1 (inferred) or >= 0, got " + std::to_string(num_classes));
  // One host read either way: the largest index (inferred classes) or the range check.
  const Tensor host = index.to(Device::cpu()).to(DType::Int64).contiguous();
  if (num_classes == -1) {
    if (host.numel() == 0) throw Error("one_hot: cannot infer num_classes from an empty index; pass it");
    const int64_t* v = host.data_ptr<int64_t>();
    num_classes = *std::max_element(v, v + host.numel()) + 1;
  }
  ops::check_index_values(op, host, num_classes, std::to_string(num_classes) + " classes");
  const Tensor classes = arange(0, num_classes, 1, TensorOptions(DType::Int64, index.device()));
  return eq(index.to(DType::Int64).unsqueeze(-1), classes).to(DType::Int64);
}

}  // namespace kiln
