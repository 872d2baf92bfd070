// Joining, splitting and indexing: cat/stack copy into slices of one output, split/chunk are
// views, and index_select/gather/scatter_add call the index kernels (whose backward is the
// scatter or gather of the other kind).
#include "core/ops/shape.h"

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/elementwise.h"
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
    if (self.is_cpu()) {
      scatter_add_cpu(ops::make_arg(out), static_cast<int>(dim), ops::make_arg(index), ops::make_arg(src));
    } else {
#if defined(KILN_WITH_CUDA)
      // A bad index is recorded on the device and raised at the next synchronizing call.
      const int dev = self.device().index;
      cuda::DeviceGuard guard(dev);
      scatter_add_cuda(ops::make_arg(out), static_cast<int>(dim), ops::make_arg(index), ops::make_arg(src),
                       cuda::device_error_record(dev), cuda::current_stream(dev));
#else
      ops::no_cuda_kernel("scatter_add");
#endif
    }
  }
  return out;
}

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) throw Error("cat: expects a non-empty list of tensors");
  std::vector<const Tensor*> ptrs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) throw Error("cat: tensor " + std::to_string(i) + " is undefined");
    ptrs.push_back(&tensors[i]);
  }
  Device dev = ops::common_device("cat", ptrs);
  // Legacy rule as in PyTorch: 1-d empty tensors are skipped.
  const Tensor* ref = nullptr;
  for (const Tensor& t : tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) {
      ref = &t;
      break;
    }
  if (!ref) ref = &tensors[0];
  if (ref->dim() == 0) throw ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack");
  int64_t d = wrap_dim(dim, ref->dim(), "cat");
  DType rt = tensors[0].dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    rt = promote_types(rt, t.dtype());
    if (t.dim() == 1 && t.numel() == 0) continue;
    if (t.dim() != ref->dim()) {
      throw ShapeError("cat: tensor " + std::to_string(i) + " has " + std::to_string(t.dim()) + " dims, expected " +
                       std::to_string(ref->dim()) + " (shapes " + shape_str(ref->sizes()) + " and " +
                       shape_str(t.sizes()) + ")");
    }
    for (int64_t k = 0; k < t.dim(); ++k) {
      if (k != d && t.size(k) != ref->size(k)) {
        throw ShapeError("cat: sizes must match except in dimension " + std::to_string(d) + "; tensor " +
                         std::to_string(i) + " has shape " + shape_str(t.sizes()) + ", expected " +
                         shape_str(ref->sizes()) + " apart from that dimension");
      }
    }
    total += t.size(d);
  }
  Shape out_shape = ref->sizes();
  out_shape[static_cast<size_t>(d)] = total;
  Tensor out = empty(out_shape, TensorOptions(rt, dev));
  Shape lengths;
  int64_t off = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      lengths.push_back(-1);
      continue;
    }
    ops::copy_raw(out.narrow(d, off, t.size(d)), t);
    lengths.push_back(t.size(d));
    off += t.size(d);
  }
  if (needs_grad(tensors)) {
    record_function("cat", tensors, {out}, {}, [lengths, d](const FunctionNode::Context& ctx) {
      TensorList r(lengths.size());
      int64_t o = 0;
      for (size_t i = 0; i < lengths.size(); ++i) {
        if (lengths[i] < 0) continue;
        if (ctx.needs_input_grad[i]) r[i] = ctx.grads[0].narrow(d, o, lengths[i]);
        o += lengths[i];
      }
      return r;
    });
  }
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  if (tensors.empty()) throw Error("stack: expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) throw Error("stack: tensor " + std::to_string(i) + " is undefined");
    if (tensors[i].sizes() != tensors[0].sizes()) {
      throw ShapeError("stack: all tensors must have one shape; tensor 0 is " + shape_str(tensors[0].sizes()) +
                       ", tensor " + std::to_string(i) + " is " + shape_str(tensors[i].sizes()));
    }
  }
  int64_t d = wrap_insert_dim(dim, tensors[0].dim(), "stack");
  TensorList parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

TensorList split_with_sizes(const Tensor& x, const Shape& sizes, int64_t dim) {
  ops::check_defined("split", x, "input");
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ShapeError("split: negative size in " + shape_str(sizes));
    total += s;
  }
  if (total != x.size(d)) {
    throw ShapeError("split: sizes " + shape_str(sizes) + " sum to " + std::to_string(total) + ", but dimension " +
                     std::to_string(d) + " has size " + std::to_string(x.size(d)) + " (shape " + shape_str(x.sizes()) +
                     ")");
  }
  TensorList out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  ops::check_defined("split", x, "input");
  if (split_size <= 0) throw Error("split: split_size must be positive, got " + std::to_string(split_size));
  int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t n = x.size(d);
  Shape sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  if (sizes.empty()) sizes.push_back(0);
  return split_with_sizes(x, sizes, d);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ops::check_defined("chunk", x, "input");
  if (chunks <= 0) throw Error("chunk: chunks must be positive, got " + std::to_string(chunks));
  int64_t d = wrap_dim(dim, x.dim(), "chunk");
  int64_t n = x.size(d);
  int64_t each = (n + chunks - 1) / chunks;
  return split(x, std::max<int64_t>(each, 1), d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  ops::check_defined("index_select", x, "input");
  check_index_tensor("index_select", index);
  ops::common_device("index_select", {&x, &index});
  if (index.dim() > 1) {
    throw ShapeError("index_select: index must be 0-d or 1-d, got shape " + shape_str(index.sizes()));
  }
  Tensor idx = index.reshape({-1});
  Tensor src = x.dim() == 0 ? x.reshape({1}) : x;
  int64_t d = wrap_dim(dim, src.dim(), "index_select");
  Shape out_shape = src.sizes();
  out_shape[static_cast<size_t>(d)] = idx.numel();
  Tensor out = empty(out_shape, TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      index_select_cpu(ops::make_arg(out), ops::make_arg(src), static_cast<int>(d), ops::make_arg(idx));
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = x.device().index;
      cuda::DeviceGuard guard(dev);
      index_select_cuda(ops::make_arg(out), ops::make_arg(src), static_cast<int>(d), ops::make_arg(idx),
                        cuda::device_error_record(dev), cuda::current_stream(dev));
#else
      ops::no_cuda_kernel("index_select");
#endif
    }
  } else if (idx.numel() > 0 && src.size(d) == 0) {
    throw IndexError("index_select: index into dimension " + std::to_string(d) + " of size 0");
  }
  if (x.dim() == 0) out = out.reshape(index.dim() == 0 ? Shape{} : Shape{idx.numel()});
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
  int64_t d = wrap_dim(dim, x.dim(), "gather");
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
  Tensor out = empty(index.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      gather_cpu(ops::make_arg(out), ops::make_arg(x), static_cast<int>(d), ops::make_arg(index));
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = x.device().index;
      cuda::DeviceGuard guard(dev);
      gather_cuda(ops::make_arg(out), ops::make_arg(x), static_cast<int>(d), ops::make_arg(index),
                  cuda::device_error_record(dev), cuda::current_stream(dev));
#else
      ops::no_cuda_kernel("gather");
#endif
    }
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
  int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  if (index.dim() != x.dim() || src.dim() != x.dim()) {
    throw ShapeError("scatter_add: input, index and src must have the same number of dims; got " + shape_str(x.sizes()) +
                     ", " + shape_str(index.sizes()) + ", " + shape_str(src.sizes()));
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

namespace {
Tensor triangle(const char* name, const Tensor& x, int64_t k, bool upper) {
  ops::check_defined(name, x, "input");
  if (x.dim() < 2) throw ShapeError(std::string(name) + ": expects at least 2 dims, got shape " + shape_str(x.sizes()));
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      triangle_cpu(ops::make_arg(out), ops::make_arg(x), k, upper);
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = x.device().index;
      cuda::DeviceGuard guard(dev);
      triangle_cuda(ops::make_arg(out), ops::make_arg(x), k, upper, cuda::current_stream(dev));
#else
      ops::no_cuda_kernel(name);
#endif
    }
  }
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
