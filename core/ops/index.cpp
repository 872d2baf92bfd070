// index_select, gather and scatter_add: checks here, one index kernel each, and a backward that is
// the scatter or gather of the other kind. Indices are never wrapped; on CUDA a bad one is found on
// the device and raised as an IndexError at the next synchronizing call. The rest is composed of
// those three (take, take_along_dim, index_add; index_fill, scatter and index_copy write through
// where with a count of the positions an index names), and one_hot compares the indices with an
// arange (its range check reads them on the host). advanced_index and index_put, a subscript's
// semantics, wrap negative indices, merge the indexed dims into one and index_select or scatter
// along it.
#include "core/ops/index.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/ops/search.h"
#include "core/ops/view.h"
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

}  // namespace

namespace ops {

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

namespace {
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

}  // namespace

int64_t check_scatter_args(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  check_index_tensor(op, index);
  ops::common_device(op, {&x, &index, &src});
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
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
  return d;
}

Tensor scatter_add_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  check_index_tensor(op, index);
  if (x.dim() <= 1 && index.dim() <= 1 && src.dim() <= 1 && (index.dim() != x.dim() || src.dim() != x.dim())) {
    // A 0-d tensor counts as one element of a 1-d one, as in PyTorch (gather's adjoint needs it).
    ops::checked_dim(op, x, dim);
    return scatter_add_as(op, x.reshape({-1}), 0, index.reshape({-1}), src.reshape({-1})).reshape(x.sizes());
  }
  const int64_t d = check_scatter_args(op, x, dim, index, src);
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

}  // namespace ops

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return ops::index_select_as("index_select", x, dim, index);
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return ops::gather_as("gather", x, dim, index); }
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::scatter_add_as("scatter_add", x, dim, index, src);
}

Tensor take(const Tensor& x, const Tensor& index) {
  ops::check_defined("take", x, "input");
  check_index_tensor("take", index);
  return ops::index_select_as("take", x.reshape({-1}), 0, index.reshape({-1})).reshape(index.sizes());
}

Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim) {
  const char* op = "take_along_dim";
  ops::check_defined(op, x, "input");
  check_index_tensor(op, indices);
  if (!dim) return ops::gather_as(op, x.reshape({-1}), 0, indices.reshape({-1}));
  if (indices.dim() != x.dim()) {
    throw ShapeError(std::string(op) + ": input and indices must have as many dims; input " + shape_str(x.sizes()) +
                     ", indices " + shape_str(indices.sizes()));
  }
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, *dim) : wrap_dim(*dim, x.dim(), op);
  if (x.dim() == 0) return ops::gather_as(op, x, d, indices);
  // Broadcast every dim but d: each side keeps its own size there.
  Shape xs = x.sizes(), is = indices.sizes();
  xs[static_cast<size_t>(d)] = 1;
  is[static_cast<size_t>(d)] = 1;
  Shape common = broadcast_shapes(xs, is, op);
  Shape x_target = common, i_target = common;
  x_target[static_cast<size_t>(d)] = x.size(d);
  i_target[static_cast<size_t>(d)] = indices.size(d);
  return ops::gather_as(op, x.expand(x_target), d, indices.expand(i_target));
}

namespace {
// The index of a slice op (index_add, index_fill, ...): int64 or int32, 0-d or 1-d; as 1-d.
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

// A copy of x with src written where index points (scatter's rule, its checks naming op): a
// position written twice is an error (a host read of the counts).
Tensor scatter_once(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const Tensor counts = ops::scatter_counts(op, x, dim, index);
  if (index.numel() > 0 && any(gt(counts, 1)).item<bool>()) {
    throw Error(std::string(op) + ": index " + shape_str(index.sizes()) + " writes a position of the input " +
                shape_str(x.sizes()) + " more than once along dim " + std::to_string(dim) +
                " (which write would win is undefined)");
  }
  // Every written position takes exactly one src element: their sum over a zero tensor.
  const Tensor placed = ops::scatter_add_as(op, zeros_like(x), dim, index, src);
  return where(gt(counts, 0), placed, x);
}
}  // namespace

namespace ops {
Tensor scatter_counts(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  const TensorOptions counts(DType::Int64, x.device());
  return ops::scatter_add_as(op, zeros(x.sizes(), counts), dim, index, ones(index.sizes(), counts));
}

SliceScatter slice_scatter_args(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                                const Tensor& source) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, source, "source");
  const Tensor idx = slice_index(op, index);
  const auto [xv, d] = as_1d_or_more(op, x, dim);
  const Tensor sv = source.dim() == 0 ? source.reshape({1}) : source;
  Shape expected = xv.sizes();
  expected[static_cast<size_t>(d)] = idx.numel();
  if (sv.sizes() != expected) {
    throw ShapeError(std::string(op) + ": source must have the input's shape " + shape_str(x.sizes()) + " with " +
                     std::to_string(idx.numel()) + " (the index's length) along dim " + std::to_string(d) + ", got " +
                     shape_str(source.sizes()));
  }
  return {xv, sv, expand_index_along(idx, d, sv.sizes()), d};
}
}  // namespace ops

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha) {
  const char* op = "index_add";
  if (alpha.is_floating() && x.defined() && !is_floating(x.dtype())) {
    throw DTypeError(std::string(op) + ": a float alpha (" + alpha.str() + ") with an integer input (" +
                     dtype_name(x.dtype()) + ")");
  }
  const ops::SliceScatter a = ops::slice_scatter_args(op, x, dim, index, src);
  const bool one = alpha.is_floating() ? alpha.to_double() == 1.0 : alpha.to_int() == 1;
  return ops::scatter_add_as(op, a.x, a.dim, a.index, one ? a.source : mul(a.source, alpha)).reshape(x.sizes());
}

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const char* op = "index_copy";
  const ops::SliceScatter a = ops::slice_scatter_args(op, x, dim, index, source);
  return scatter_once(op, a.x, a.dim, a.index, a.source).reshape(x.sizes());
}

Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  const char* op = "index_fill";
  ops::check_defined(op, x, "input");
  const Tensor idx = slice_index(op, index);
  ops::check_fill_value(op, value, x.dtype());
  const auto [xv, d] = as_1d_or_more(op, x, dim);
  // How often each position along d is named, broadcast over the other dims.
  const TensorOptions counts(DType::Int64, x.device());
  const Tensor hit = ops::scatter_add_as(op, zeros({xv.size(d)}, counts), 0, idx, ones({idx.numel()}, counts));
  Shape view(xv.dim(), 1);
  view[static_cast<size_t>(d)] = xv.size(d);
  const Tensor mask = gt(hit.reshape(view), 0);
  return where(mask, full({}, value, TensorOptions(x.dtype(), x.device())), xv).reshape(x.sizes());
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  check_index_tensor(op, index);
  return scatter_once(op, x, dim, index, src);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  const char* op = "scatter";
  ops::check_defined(op, x, "input");
  check_index_tensor(op, index);
  ops::check_fill_value(op, value, x.dtype());
  const Tensor counts = ops::scatter_counts(op, x, dim, index);
  return where(gt(counts, 0), full({}, value, TensorOptions(x.dtype(), x.device())), x);
}

namespace {
// advanced_index's and index_put's view of x: the indexed dims moved to the front and merged into
// one dim of size M (a [M, rest...] tensor), and the broadcast indices as positions along it.
struct IndexPlan {
  Tensor block;       // [M, rest...]
  Tensor positions;   // int64, shape B (the indices broadcast), each in [0, M)
  Shape order;        // the permutation of x's dims that put the indexed ones first
  Shape permuted;     // x's sizes in that order
  int64_t placed_at;  // where B's dims go in the result: the first indexed dim if adjacent, else 0
};

// indices[k], indexing dim d of `size`, as positions in [0, size): negative ones count from the
// end. One outside [-size, size) is an IndexError naming op, the value, k and d; on CUDA it is
// found on the device (an index_select of an arange) and raised at the next synchronizing call.
Tensor checked_subscript(const char* op, const Tensor& i, size_t k, int64_t d, int64_t size, const Device& device) {
  const Tensor v = i.to(device).to(DType::Int64);
  if (device.is_cpu()) {
    const Tensor c = v.contiguous();
    const int64_t* p = c.data_ptr<int64_t>();
    for (int64_t n = 0; n < c.numel(); ++n) {
      if (p[n] < -size || p[n] >= size) {
        throw IndexError(std::string(op) + ": index " + std::to_string(p[n]) + " is out of range for dim " +
                         std::to_string(d) + " of size " + std::to_string(size) + " (indices[" + std::to_string(k) +
                         "], expected in [" + std::to_string(-size) + ", " + std::to_string(size) + "))");
      }
    }
    return where(lt(v, 0), add(v, size), v);
  }
  const Tensor wrapped = where(lt(v, 0), add(v, size), v);
  const Tensor shown = where(lt(wrapped, 0), v, wrapped);  // still negative: report the value given
  const Tensor range = arange(0, size, 1, TensorOptions(DType::Int64, device));
  return ops::index_select_as(op, range, 0, shown.reshape({-1})).reshape(v.sizes());
}

IndexPlan plan_index(const char* op, const Tensor& x, const TensorList& indices) {
  ops::check_defined(op, x, "input");
  // Each defined index as (dim, int64 tensor); a bool mask becomes one per dim it covers.
  struct Picked {
    int64_t dim;
    Tensor index;
    size_t k;  // its place in the list
  };
  std::vector<Picked> picked;
  int64_t dim = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const Tensor& i = indices[k];
    if (!i.defined()) {
      ++dim;
      continue;
    }
    const int64_t covers = i.dtype() == DType::Bool ? i.dim() : 1;
    if (dim + covers > x.dim()) {
      throw IndexError(std::string(op) + ": too many indices for an input of shape " + shape_str(x.sizes()) +
                       " (index " + std::to_string(k) + " of shape " + shape_str(i.sizes()) + " reaches dim " +
                       std::to_string(dim + covers - 1) + ")");
    }
    if (i.dtype() == DType::Bool) {
      if (i.dim() == 0) {
        throw ShapeError(std::string(op) + ": a 0-d bool index (index " + std::to_string(k) + ") is not supported");
      }
      for (int64_t j = 0; j < i.dim(); ++j) {
        if (i.size(j) != x.size(dim + j)) {
          throw ShapeError(std::string(op) + ": bool index " + std::to_string(k) + " of shape " + shape_str(i.sizes()) +
                           " does not match the input " + shape_str(x.sizes()) + " at dim " + std::to_string(dim + j));
        }
      }
      const Tensor where_true = nonzero(i).to(x.device());  // [count, i.dim()]: a host read
      for (int64_t j = 0; j < i.dim(); ++j) picked.push_back({dim + j, where_true.select(1, j), k});
    } else {
      if (i.dtype() != DType::Int64 && i.dtype() != DType::Int32) {
        throw DTypeError(std::string(op) + ": index " + std::to_string(k) + " must be int64, int32 or bool, got " +
                         dtype_name(i.dtype()) + " (shape " + shape_str(i.sizes()) + ")");
      }
      picked.push_back({dim, i, k});
    }
    dim += covers;
  }
  if (picked.empty()) {
    throw Error(std::string(op) + ": at least one index must be a tensor (got " + std::to_string(indices.size()) +
                " undefined ones for an input of shape " + shape_str(x.sizes()) + ")");
  }
  Shape b = picked[0].index.sizes();
  for (const Picked& p : picked) b = broadcast_shapes(b, p.index.sizes(), op);
  IndexPlan plan;
  bool adjacent = true;
  int64_t block = 1;
  std::vector<bool> indexed(static_cast<size_t>(x.dim()), false);
  for (size_t k = 0; k < picked.size(); ++k) {
    const int64_t d = picked[k].dim;
    adjacent = adjacent && (k == 0 || d == picked[k - 1].dim + 1);
    indexed[static_cast<size_t>(d)] = true;
    plan.order.push_back(d);
    block *= x.size(d);
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!indexed[static_cast<size_t>(d)]) plan.order.push_back(d);
  }
  plan.placed_at = adjacent ? picked[0].dim : 0;
  Tensor positions = zeros(b, TensorOptions(DType::Int64, x.device()));
  for (const Picked& p : picked) {
    const Tensor checked = checked_subscript(op, p.index, p.k, p.dim, x.size(p.dim), x.device());
    positions = add(mul(positions, x.size(p.dim)), checked.expand(b));
  }
  plan.positions = positions;
  const Tensor permuted = permute(x, plan.order);
  plan.permuted = permuted.sizes();
  Shape merged{block};
  for (size_t k = picked.size(); k < plan.permuted.size(); ++k) merged.push_back(plan.permuted[k]);
  plan.block = permuted.reshape(merged);
  return plan;
}

// B's dims, first in [B..., rest...], moved to where the result keeps them (and back).
Tensor place_b(const Tensor& t, int64_t b_dims, int64_t placed_at, bool forward) {
  if (placed_at == 0 || b_dims == 0) return t;
  Shape from, to;
  for (int64_t k = 0; k < b_dims; ++k) {
    from.push_back(k);
    to.push_back(placed_at + k);
  }
  return forward ? movedim(t, from, to) : movedim(t, to, from);
}

// The shape of what advanced_index picks: [B..., rest...] with B's dims placed.
Shape picked_shape(const IndexPlan& plan, bool placed) {
  const Shape b = plan.positions.sizes();
  Shape rest(plan.block.sizes().begin() + 1, plan.block.sizes().end());
  const auto at = static_cast<std::ptrdiff_t>(placed ? plan.placed_at : 0);
  rest.insert(rest.begin() + at, b.begin(), b.end());
  return rest;
}

Shape inverse_permutation(const Shape& order) {
  Shape inverse(order.size());
  for (size_t k = 0; k < order.size(); ++k) inverse[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  return inverse;
}
}  // namespace

Tensor advanced_index(const Tensor& x, const TensorList& indices) {
  const char* op = "advanced_index";
  const IndexPlan plan = plan_index(op, x, indices);
  const Tensor picked = ops::index_select_as(op, plan.block, 0, plan.positions.reshape({-1}));
  return place_b(picked.reshape(picked_shape(plan, false)), plan.positions.dim(), plan.placed_at, true);
}

Tensor index_put(const Tensor& x, const TensorList& indices, const Tensor& values, bool accumulate) {
  const char* op = "index_put";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &values})) {
    return index_put((*c)[0], indices, (*c)[1], accumulate);
  }
  ops::check_defined(op, values, "values");
  const IndexPlan plan = plan_index(op, x, indices);
  if (values.dtype() != x.dtype()) {
    throw DTypeError(std::string(op) + ": values dtype " + dtype_name(values.dtype()) + " differs from input dtype " +
                     dtype_name(x.dtype()));
  }
  ops::common_device(op, {&x, &values});
  // values broadcast to the shape advanced_index would give, then as [K, rest...] slices.
  const Shape result_shape = picked_shape(plan, true);
  if (broadcast_shapes(result_shape, values.sizes(), op) != result_shape) {
    throw ShapeError(std::string(op) + ": values of shape " + shape_str(values.sizes()) +
                     " cannot be broadcast to the indexed shape " + shape_str(result_shape));
  }
  Shape flat = plan.block.sizes();
  flat[0] = plan.positions.numel();
  const Tensor slices = place_b(values.expand(result_shape), plan.positions.dim(), plan.placed_at, false).reshape(flat);
  const ops::SliceScatter a = ops::slice_scatter_args(op, plan.block, 0, plan.positions.reshape({-1}), slices);
  Tensor written;
  if (accumulate) {
    written = ops::scatter_add_as(op, a.x, 0, a.index, a.source);
  } else if (values.numel() == 1) {
    // One value everywhere: positions named twice take the same value, as scatter's fill allows.
    written = where(gt(ops::scatter_counts(op, a.x, 0, a.index), 0), values.reshape({}), a.x);
  } else {
    written = scatter_once(op, a.x, 0, a.index, a.source);
  }
  return permute(written.reshape(plan.permuted), inverse_permutation(plan.order));
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
