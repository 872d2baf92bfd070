// Reductions, topk and multinomial: dims are normalized and checked here, the input is described
// to the one generic reduction kernel as kept dims plus reduced dims, and gradients flow back by
// broadcasting (sum, mean, var), to ties (max/min of all) or to indices (max/min along a dim, topk).
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/shape.h"
#include "core/random.h"
#include "kernels/error.h"
#include "kernels/reduce.h"

namespace kiln {
namespace {

#if defined(KILN_WITH_CUDA)
// Scratch bytes for a CUDA kernel from the caching allocator on the current stream; dropping the
// tensor right after the launch is safe because a freed block is reused in stream order.
Tensor cuda_workspace(size_t bytes, Device device) {
  if (bytes == 0) return Tensor();
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::UInt8, device));
}
void* workspace_ptr(const Tensor& ws) { return ws.defined() ? ws.data_ptr() : nullptr; }
#endif

// Which dims of x are reduced (empty list = all), as a mask.
std::vector<bool> reduced_mask(const char* op, const Tensor& x, const Shape& dims) {
  std::vector<bool> mask(static_cast<size_t>(x.dim()), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, x.dim(), op);
    if (x.dim() == 0) continue;
    if (mask[static_cast<size_t>(w)] && !dims.empty()) {
      throw ShapeError(std::string(op) + ": dim " + std::to_string(w) + " appears twice in " + shape_str(dims));
    }
    mask[static_cast<size_t>(w)] = true;
  }
  return mask;
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      out.push_back(x.size(d));
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

int64_t reduced_count(const Tensor& x, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[static_cast<size_t>(d)]) n *= x.size(d);
  return n;
}

// Runs the generic reduction. `out` and `indices` have the keepdim=false shape (or are undefined).
void launch_reduce(const char* op, ReduceOp rop, const Tensor& x, const std::vector<bool>& mask, const Tensor& out,
                   const Tensor& indices, double correction = 1.0) {
  const Tensor& shape_ref = out.defined() ? out : indices;
  if (shape_ref.numel() == 0) return;
  ReduceArgs args;
  if (out.defined()) args.out = ops::make_arg(out);
  if (indices.defined()) args.indices = ops::make_arg(indices);
  if (!out.defined()) {
    args.out = args.indices;
    args.out.data = nullptr;
  }
  args.in = x.data_ptr();
  args.in_dtype = x.dtype();
  int k = 0;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[static_cast<size_t>(d)]) {
      args.red_sizes[args.red_ndim] = x.size(d);
      args.red_strides[args.red_ndim] = x.stride(d);
      ++args.red_ndim;
    } else {
      args.in_kept_strides[k++] = x.stride(d);
    }
  }
  args.correction = correction;
  if (x.is_cpu()) {
    reduce_cpu(rop, args);
    return;
  }
#if defined(KILN_WITH_CUDA)
  const int dev = x.device().index;
  cuda::DeviceGuard guard(dev);
  const size_t bytes = reduce_cuda_workspace_bytes(rop, args);
  Tensor ws = cuda_workspace(bytes, x.device());
  reduce_cuda(rop, args, workspace_ptr(ws), bytes, cuda::current_stream(dev));
#else
  ops::no_cuda_kernel(op);
#endif
}

// Gradient of a keepdim=false reduction, broadcast back to x's shape.
Tensor expand_back(const Tensor& g, const Shape& x_shape, const std::vector<bool>& mask, bool keepdim) {
  Tensor r = g;
  if (!keepdim) {
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) r = r.unsqueeze(static_cast<int64_t>(d));
  }
  return r.expand(x_shape);
}

void check_nonempty(const char* op, const Tensor& x, const std::vector<bool>& mask) {
  if (x.numel() == 0 || reduced_count(x, mask) == 0) {
    throw ShapeError(std::string(op) + ": cannot reduce an empty tensor or dimension (shape " + shape_str(x.sizes()) +
                     ")");
  }
}

Tensor sum_like(const char* name, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  DType rt = x.dtype();
  if (rop == ReduceOp::Sum && !is_floating(rt)) rt = DType::Int64;
  if (rop == ReduceOp::Mean && !is_floating(rt)) {
    throw DTypeError(std::string("mean: needs a floating input, got ") + dtype_name(rt) + "; convert with to(float32)");
  }
  Tensor out = empty(reduced_shape(x, mask, false), TensorOptions(rt, x.device()));
  launch_reduce(name, rop, x, mask, out, Tensor());
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    double scale = rop == ReduceOp::Mean ? 1.0 / static_cast<double>(std::max<int64_t>(reduced_count(x, mask), 1)) : 1.0;
    record_function(name, {x}, {out}, {}, [xs, mask, keepdim, scale](const FunctionNode::Context& ctx) {
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim);
      return TensorList{scale == 1.0 ? g : g * scale};
    });
  }
  return out;
}

Tensor any_all(const char* name, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  Tensor out = empty(reduced_shape(x, mask, false), TensorOptions(DType::Bool, x.device()));
  launch_reduce(name, rop, x, mask, out, Tensor());
  return keepdim ? out.reshape(reduced_shape(x, mask, true)) : out;
}

// max/min over dims without indices; the gradient is split evenly among the tied winners.
Tensor extreme(const char* name, bool is_max, const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  check_nonempty(name, x, mask);
  Tensor out = empty(reduced_shape(x, mask, false), TensorOptions(x.dtype(), x.device()));
  launch_reduce(name, is_max ? ReduceOp::Max : ReduceOp::Min, x, mask, out, Tensor());
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function(name, {x}, {out}, {x, out}, [xs, mask, keepdim](const FunctionNode::Context& ctx) {
      Tensor xv = ctx.saved_at(0);
      Tensor best = expand_back(ctx.saved_at(1), xs, mask, keepdim);
      Tensor winners = eq(xv, best).to(ctx.grads[0].dtype());
      Shape red;
      for (size_t d = 0; d < mask.size(); ++d)
        if (mask[d]) red.push_back(static_cast<int64_t>(d));
      Tensor count = sum(winners, red, true);
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim);
      return TensorList{g * winners / count};
    });
  }
  return out;
}

std::pair<Tensor, Tensor> extreme_dim(const char* name, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, {dim});
  check_nonempty(name, x, mask);
  Shape s = reduced_shape(x, mask, false);
  Tensor out = empty(s, TensorOptions(x.dtype(), x.device()));
  Tensor idx = empty(s, TensorOptions(DType::Int64, x.device()));
  launch_reduce(name, is_max ? ReduceOp::Max : ReduceOp::Min, x, mask, out, idx);
  if (keepdim) {
    Shape ks = reduced_shape(x, mask, true);
    out = out.reshape(ks);
    idx = idx.reshape(ks);
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
    record_function(name, {x}, {out}, {idx}, [xs, d, keepdim](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0], i = ctx.saved_at(0);
      if (xs.empty()) return TensorList{g.reshape(xs)};
      if (!keepdim) {
        g = g.unsqueeze(d);
        i = i.unsqueeze(d);
      }
      return TensorList{scatter_add(zeros(xs, TensorOptions(g.dtype(), g.device())), d, i, g)};
    });
  }
  return {out, idx};
}

Tensor arg_extreme(const char* name, bool is_max, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  ops::check_defined(name, x, "input");
  // Checked before flattening so the message names the caller's shape, not [0].
  if (!dim) check_nonempty(name, x, std::vector<bool>(static_cast<size_t>(x.dim()), true));
  Tensor src = dim ? x : x.reshape({-1});
  auto mask = reduced_mask(name, src, dim ? Shape{*dim} : Shape{});
  check_nonempty(name, src, mask);
  Tensor idx = empty(reduced_shape(src, mask, false), TensorOptions(DType::Int64, x.device()));
  launch_reduce(name, is_max ? ReduceOp::ArgMax : ReduceOp::ArgMin, src, mask, Tensor(), idx);
  if (keepdim) {
    if (dim) return idx.reshape(reduced_shape(src, mask, true));
    return idx.reshape(Shape(static_cast<size_t>(x.dim()), 1));
  }
  return idx;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return sum_like("sum", ReduceOp::Sum, x, dims, keepdim); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_like("mean", ReduceOp::Mean, x, dims, keepdim);
}

Tensor var(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  ops::check_defined("var", x, "input");
  ops::check_floating("var", x, "input");
  auto mask = reduced_mask("var", x, dims);
  Tensor out = empty(reduced_shape(x, mask, false), TensorOptions(x.dtype(), x.device()));
  launch_reduce("var", ReduceOp::Var, x, mask, out, Tensor(), correction);
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    double denom = static_cast<double>(reduced_count(x, mask)) - correction;
    Shape red;
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) red.push_back(static_cast<int64_t>(d));
    record_function("var", {x}, {out}, {x}, [xs, mask, keepdim, denom, red](const FunctionNode::Context& ctx) {
      Tensor xv = ctx.saved_at(0);
      Tensor centered = xv - mean(xv, red, true);
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim);
      return TensorList{g * centered * (2.0 / denom)};
    });
  }
  return out;
}

Tensor max(const Tensor& x) { return extreme("max", true, x, {}, false); }
Tensor min(const Tensor& x) { return extreme("min", false, x, {}, false); }
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return extreme("amax", true, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return extreme("amin", false, x, dims, keepdim); }
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("max", true, x, dim, keepdim); }
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("min", false, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme("argmax", true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme("argmin", false, x, dim, keepdim);
}
Tensor any(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("any", ReduceOp::Any, x, dims, keepdim); }
Tensor all(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("all", ReduceOp::All, x, dims, keepdim); }

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  ops::check_defined("topk", x, "input");
  int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "topk");
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
  Tensor values = empty(out_shape, TensorOptions(x.dtype(), x.device()));
  Tensor indices = empty(out_shape, TensorOptions(DType::Int64, x.device()));
  if (rows > 0 && k > 0) {
    if (x.is_cpu()) {
      topk_cpu(values.data_ptr(), values.dtype(), indices.data_ptr<int64_t>(), src.data_ptr(), src.dtype(), rows, n, k,
               largest);
    } else {
#if defined(KILN_WITH_CUDA)
      const int dev = x.device().index;
      cuda::DeviceGuard guard(dev);
      const size_t bytes = topk_cuda_workspace_bytes(rows, n, k);
      Tensor ws = cuda_workspace(bytes, x.device());
      topk_cuda(values.data_ptr(), values.dtype(), indices.data_ptr<int64_t>(), src.data_ptr(), src.dtype(), rows, n, k,
                largest, workspace_ptr(ws), bytes, cuda::current_stream(dev));
#else
      ops::no_cuda_kernel("topk");
#endif
    }
  }
  if (x.dim() == 0) {
    values = values.reshape({});
    indices = indices.reshape({});
  } else {
    values = values.transpose(d, -1);
    indices = indices.transpose(d, -1);
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function("topk", {x}, {values}, {indices}, [xs, d](const FunctionNode::Context& ctx) {
      const Tensor& g = ctx.grads[0];
      if (xs.empty()) return TensorList{g};
      return TensorList{scatter_add(zeros(xs, TensorOptions(g.dtype(), g.device())), d, ctx.saved_at(0), g)};
    });
  }
  return {values, indices};
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  ops::check_defined("multinomial", probs, "probabilities");
  ops::check_floating("multinomial", probs, "probabilities");
  if (probs.dim() < 1 || probs.dim() > 2) {
    throw ShapeError("multinomial: expects a 1-d or 2-d tensor of weights, got shape " + shape_str(probs.sizes()));
  }
  Tensor p2 = probs.dim() == 1 ? probs.unsqueeze(0) : probs;
  int64_t n = p2.size(1);
  if (n == 0) throw ShapeError("multinomial: the rows have no categories (shape " + shape_str(probs.sizes()) + ")");
  if (num_samples <= 0) throw Error("multinomial: num_samples must be positive, got " + std::to_string(num_samples));
  if (!replacement && num_samples > n) {
    throw Error("multinomial: cannot draw " + std::to_string(num_samples) + " samples without replacement from " +
                std::to_string(n) + " categories");
  }
  Tensor out = empty({p2.size(0), num_samples}, TensorOptions(DType::Int64, probs.device()));
#if !defined(KILN_WITH_CUDA)
  if (!probs.is_cpu()) ops::no_cuda_kernel("multinomial");
#endif
  PhiloxState st = default_generator(probs.device()).next();
  if (out.numel() > 0) {
    if (probs.is_cpu()) {
      multinomial_cpu(out.data_ptr<int64_t>(), ops::make_arg(p2.detach()), num_samples, replacement, st);
    } else {
#if defined(KILN_WITH_CUDA)
      // An invalid row is found on the device: it is recorded in the device's error record and
      // raised as an error at the next synchronizing call (item(), a copy to the host), not here.
      const int dev = probs.device().index;
      cuda::DeviceGuard guard(dev);
      const size_t bytes = multinomial_cuda_workspace_bytes(p2.size(0), n, num_samples, replacement);
      Tensor ws = cuda_workspace(bytes, probs.device());
      multinomial_cuda(out.data_ptr<int64_t>(), ops::make_arg(p2.detach()), num_samples, replacement, st,
                       workspace_ptr(ws), bytes, cuda::device_error_record(dev), cuda::current_stream(dev));
#endif
    }
  }
  return probs.dim() == 1 ? out.squeeze(0) : out;
}

Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }

}  // namespace kiln
