// index_select, gather and scatter_add: checks here, one index kernel each, and a backward that is
// the scatter or gather of the other kind. Indices are never wrapped; on CUDA a bad one is found on
// the device and raised as an IndexError at the next synchronizing call. The rest is composed of
// those three (take, take_along_dim, index_add; index_fill and scatter write through where with a
// count of the positions an index names), and one_hot compares the indices with an arange (its
// range check reads them on the host).
#include "core/ops/index.h"

#include <algorithm>
#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
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

// Runs an index kernel for op. The CPU kernels raise a bad index at once, naming themselves
// (index_select, gather, scatter_add); an op composed of one (take, index_add, scatter, ...) has
// the message name it instead. On CUDA the bad index is raised later, at the next synchronizing
// call, and names the kernel.
template <class Launch>
void launch_index(const char* op, const char* kernel, const Launch& launch) {
  try {
    launch();
  } catch (const IndexError& e) {
    const std::string message = e.what(), prefix = std::string(kernel) + ":";
    if (std::string(op) == kernel || message.rfind(prefix, 0) != 0) throw;
    throw IndexError(std::string(op) + ":" + message.substr(prefix.size()));
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

Tensor scatter_add_raw(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                       const char* op = "scatter_add") {
  Tensor out = self.detach().clone(MemoryFormat::Contiguous);
  if (index.numel() > 0) {
    // On CUDA a bad index is recorded on the device and raised at the next synchronizing call.
    launch_index(op, "scatter_add", [&] {
      ops::launch(op, self.device(), kernels::scatter_add, ops::make_arg(op, out), static_cast<int>(dim),
                  ops::make_arg(op, index), ops::make_arg(op, src));
    });
  }
  return out;
}

Tensor index_select_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(op, x, "input");
  check_index_tensor(op, index);
  ops::common_device(op, {&x, &index});
  if (index.dim() > 1) {
    throw ShapeError(std::string(op) + ": index must be 0-d or 1-d, got shape " + shape_str(index.sizes()));
  }
  Tensor idx = index.reshape({-1});
  if (x.dim() == 0 && idx.numel() != 1) {  // as PyTorch: a 0-d input's one element, picked once
    throw ShapeError(std::string(op) + ": the index of a 0-d input must hold exactly one value, got " +
                     std::to_string(idx.numel()) + " (index shape " + shape_str(index.sizes()) + ")");
  }
  Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  int64_t d = wrap_dim(dim, src.dim(), op);
  Shape out_shape = src.sizes();
  out_shape[static_cast<size_t>(d)] = idx.numel();
  Tensor out = ops::empty_for(op, out_shape, TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    launch_index(op, "index_select", [&] {
      ops::launch(op, x.device(), kernels::index_select, ops::make_arg(op, out), ops::make_arg(op, src),
                  static_cast<int>(d), ops::make_arg(op, idx));
    });
  } else if (idx.numel() > 0) {  // no kernel reads the index: checked here, as the kernel would
    ops::check_index_values(op, idx, src.size(d),
                            "dimension " + std::to_string(d) + " of size " + std::to_string(src.size(d)));
  }
  if (x.dim() == 0) out = out.reshape({});  // a 0-d input gives a 0-d result, as PyTorch's
  if (needs_grad({&x})) {
    Shape xs = src.sizes(), orig = x.sizes();
    record_function(op, {x}, {out}, {idx}, [xs, orig, d](const FunctionNode::Context& ctx) {
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

Tensor gather_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined(op, x, "input");
  check_index_tensor(op, index);
  ops::common_device(op, {&x, &index});
  // A 0-d input is one element, named by dims 0 and -1.
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
  if (x.dim() <= 1 && index.dim() <= 1 && x.dim() != index.dim()) {
    // A 0-d tensor counts as one element of a 1-d one, as in PyTorch: gather([3], 0, 0-d) is 0-d.
    return gather_as(op, x.reshape({-1}), 0, index.reshape({-1})).reshape(index.sizes());
  }
  if (index.dim() != x.dim()) {
    throw ShapeError(std::string(op) + ": index must have as many dims as the input; input " + shape_str(x.sizes()) +
                     ", index " + shape_str(index.sizes()));
  }
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k != d && index.size(k) > x.size(k)) {
      throw ShapeError(std::string(op) + ": index " + shape_str(index.sizes()) + " is larger than input " +
                       shape_str(x.sizes()) + " in dimension " + std::to_string(k));
    }
  }
  Tensor out = ops::empty_for(op, index.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    launch_index(op, "gather", [&] {
      ops::launch(op, x.device(), kernels::gather, ops::make_arg(op, out), ops::make_arg(op, x), static_cast<int>(d),
                  ops::make_arg(op, index));
    });
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function(op, {x}, {out}, {index}, [xs, d](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      return TensorList{scatter_add_raw(zeros(xs, TensorOptions(g.dtype(), g.device())), d, ctx.saved_at(0), g)};
    });
  }
  return out;
}

Tensor scatter_add_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  check_index_tensor(op, index);
  ops::common_device(op, {&x, &index, &src});
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
  if (x.dim() <= 1 && index.dim() <= 1 && src.dim() <= 1 && (index.dim() != x.dim() || src.dim() != x.dim())) {
    // A 0-d tensor counts as one element of a 1-d one, as in PyTorch (and as gather's adjoint needs).
    return scatter_add_as(op, x.reshape({-1}), 0, index.reshape({-1}), src.reshape({-1})).reshape(x.sizes());
  }
  if (index.dim() != x.dim() || src.dim() != x.dim()) {
    throw ShapeError(std::string(op) + ": input, index and src must have the same number of dims; got " +
                     shape_str(x.sizes()) + ", " + shape_str(index.sizes()) + ", " + shape_str(src.sizes()));
  }
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (index.size(k) > src.size(k) || (k != d && index.size(k) > x.size(k))) {
      throw ShapeError(std::string(op) + ": index " + shape_str(index.sizes()) + " is larger than src " +
                       shape_str(src.sizes()) + " or input " + shape_str(x.sizes()) + " in dimension " +
                       std::to_string(k));
    }
  }
  if (src.dtype() != x.dtype()) {
    throw DTypeError(std::string(op) + ": src dtype " + dtype_name(src.dtype()) + " differs from input dtype " +
                     dtype_name(x.dtype()));
  }
  Tensor out = scatter_add_raw(x, d, index, src, op);
  if (needs_grad({&x, &src})) {
    Shape ss = src.sizes();
    record_function(op, {x, src}, {out}, {index}, [ss, d](const FunctionNode::Context& ctx) {
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

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return index_select_as("index_select", x, dim, index);
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return gather_as("gather", x, dim, index); }
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_add_as("scatter_add", x, dim, index, src);
}

Tensor take(const Tensor& x, const Tensor& index) {
  ops::check_defined("take", x, "input");
  check_index_tensor("take", index);
  return index_select_as("take", x.reshape({-1}), 0, index.reshape({-1})).reshape(index.sizes());
}

Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim) {
  const char* op = "take_along_dim";
  ops::check_defined(op, x, "input");
  check_index_tensor(op, indices);
  if (!dim) return gather_as(op, x.reshape({-1}), 0, indices.reshape({-1}));
  if (indices.dim() != x.dim()) {
    throw ShapeError(std::string(op) + ": input and indices must have as many dims; input " + shape_str(x.sizes()) +
                     ", indices " + shape_str(indices.sizes()));
  }
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, *dim) : wrap_dim(*dim, x.dim(), op);
  if (x.dim() == 0) return gather_as(op, x, d, indices);
  // Broadcast every dim but d: each side keeps its own size there.
  Shape xs = x.sizes(), is = indices.sizes();
  xs[static_cast<size_t>(d)] = 1;
  is[static_cast<size_t>(d)] = 1;
  Shape common = broadcast_shapes(xs, is, op);
  Shape x_target = common, i_target = common;
  x_target[static_cast<size_t>(d)] = x.size(d);
  i_target[static_cast<size_t>(d)] = indices.size(d);
  return gather_as(op, x.expand(x_target), d, indices.expand(i_target));
}

namespace {
// The index of a slice op (index_add, index_fill): int64 or int32, 0-d or 1-d; as 1-d.
Tensor slice_index(const char* op, const Tensor& index) {
  check_index_tensor(op, index);
  if (index.dim() > 1) {
    throw ShapeError(std::string(op) + ": index must be 0-d or 1-d, got shape " + shape_str(index.sizes()));
  }
  return index.reshape({-1});
}

// x as at least 1-d (a 0-d tensor is one element of a 1-d one, as for gather), and dim wrapped.
std::pair<Tensor, int64_t> as_1d_or_more(const char* op, const Tensor& x, int64_t dim) {
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
  return {x.dim() == 0 ? x.reshape({1}) : x, x.dim() == 0 ? 0 : d};
}
}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  const char* op = "index_add";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "source");
  const Tensor idx = slice_index(op, index);
  if (alpha.is_floating() && !is_floating(x.dtype())) {
    throw DTypeError(std::string(op) + ": a float alpha (" + alpha.str() + ") with an integer input (" +
                     dtype_name(x.dtype()) + ")");
  }
  const auto [xv, d] = as_1d_or_more(op, x, dim);
  const Tensor sv = src.dim() == 0 ? src.reshape({1}) : src;
  Shape expected = xv.sizes();
  expected[static_cast<size_t>(d)] = idx.numel();
  if (sv.sizes() != expected) {
    throw ShapeError(std::string(op) + ": source must have the input's shape " + shape_str(x.sizes()) + " with " +
                     std::to_string(idx.numel()) + " (the index's length) along dim " + std::to_string(d) + ", got " +
                     shape_str(src.sizes()));
  }
  const bool one = alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
  return scatter_add_as(op, xv, d, expand_index_along(idx, d, sv.sizes()), one ? sv : mul(sv, alpha))
      .reshape(x.sizes());
}

Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  const char* op = "index_fill";
  ops::check_defined(op, x, "input");
  const Tensor idx = slice_index(op, index);
  ops::check_fill_value(op, value, x.dtype());
  const auto [xv, d] = as_1d_or_more(op, x, dim);
  // How often each position along d is named, broadcast over the other dims.
  const TensorOptions counts(DType::Int64, x.device());
  const Tensor hit = scatter_add_as(op, zeros({xv.size(d)}, counts), 0, idx, ones({idx.numel()}, counts));
  Shape view(xv.dim(), 1);
  view[static_cast<size_t>(d)] = xv.size(d);
  const Tensor mask = gt(hit.reshape(view), 0);
  return where(mask, full({}, value, TensorOptions(x.dtype(), x.device())), xv).reshape(x.sizes());
}

namespace {
// The positions of x's shape a scatter along dim with `index` writes: an int64 count of each.
Tensor scatter_counts(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  const TensorOptions counts(DType::Int64, x.device());
  return scatter_add_as(op, zeros(x.sizes(), counts), dim, index, ones(index.sizes(), counts));
}
}  // namespace

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  check_index_tensor(op, index);
  const Tensor counts = scatter_counts(op, x, dim, index);
  if (index.numel() > 0 && any(gt(counts, 1)).item<bool>()) {
    throw Error(std::string(op) + ": index " + shape_str(index.sizes()) + " writes a position of the input " +
                shape_str(x.sizes()) + " more than once along dim " + std::to_string(dim) +
                " (which write would win is undefined)");
  }
  // Every written position takes exactly one src element: their sum over a zero tensor.
  const Tensor placed = scatter_add_as(op, zeros_like(x), dim, index, src);
  return where(gt(counts, 0), placed, x);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  const char* op = "scatter";
  ops::check_defined(op, x, "input");
  check_index_tensor(op, index);
  ops::check_fill_value(op, value, x.dtype());
  const Tensor counts = scatter_counts(op, x, dim, index);
  return where(gt(counts, 0), full({}, value, TensorOptions(x.dtype(), x.device())), x);
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
