// Neural-network ops: checks, one fused kernel call, and one autograd node per op whose backward
// calls the fused backward kernel directly (first-order gradients only; these nodes are not
// themselves differentiable). Dropout saves no mask: its node keeps the PhiloxState and the
// backward redraws the identical mask, which costs a few integer ops instead of a byte per element.
// CUDA tensors take the kernels' CUDA twins on the current stream; their workspaces are tensors
// from the caching allocator, and index checks go to the device's error record (no sync here).
#include "core/ops/nn.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "core/autograd.h"
#include "core/cuda/runtime.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "core/random.h"
#include "kernels/dropout.h"
#include "kernels/error.h"
#include "kernels/index.h"
#include "kernels/loss.h"
#include "kernels/norm.h"

namespace kiln {
namespace {

// A dense row-major copy (or alias) without history: what the kernels read.
Tensor dense(const Tensor& t) { return t.defined() ? t.detach().contiguous() : t; }

// A gradient as the backward kernels want it: row-major, in dtype `dtype`.
Tensor dense_grad(const Tensor& g, DType dtype) { return g.detach().to(dtype).contiguous(); }

// A double as a person would write it (0.1, not 0.100000), for messages.
std::string num_str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

#if defined(KILN_WITH_CUDA)
// A CUDA op's setting: its device made current for the scope, and that device's current stream.
struct OnCuda {
  explicit OnCuda(const Tensor& t) : device(t.device().index), guard(device), stream(cuda::current_stream(device)) {}
  int device;
  cuda::DeviceGuard guard;
  Stream stream;
  DeviceErrorRecord* error_record() const { return cuda::device_error_record(device); }
};

// Scratch memory for a kernel, as a tensor so the caching allocator serves it on the stream.
Tensor workspace(size_t bytes, Device device) {
  return empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::UInt8, device));
}
void* workspace_ptr(const Tensor& ws) { return ws.numel() > 0 ? ws.data_ptr() : nullptr; }
#endif

int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  const int64_t n = x.dim() == 0 ? 1 : x.dim();
  if (dim < -n || dim >= n) {
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for input of shape " +
                     shape_str(x.sizes()) + " (expected in [" + std::to_string(-n) + ", " + std::to_string(n - 1) +
                     "])");
  }
  return dim < 0 ? dim + n : dim;
}

// [outer, n, inner] around dim d of a shape (a 0-d shape is [1, 1, 1]).
std::tuple<int64_t, int64_t, int64_t> split_at(const Shape& s, int64_t d) {
  int64_t outer = 1, inner = 1;
  if (s.empty()) return {1, 1, 1};
  for (int64_t i = 0; i < d; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(d) + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s[static_cast<size_t>(d)], inner};
}

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  const int64_t d = checked_dim(op, x, dim);
  Tensor xc = dense(x);
  auto [outer, n, inner] = split_at(xc.sizes(), d);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      softmax_forward_cpu(out.data_ptr(), xc.data_ptr(), x.dtype(), outer, n, inner, log);
    } else {
#if defined(KILN_WITH_CUDA)
      OnCuda on(x);
      softmax_forward_cuda(out.data_ptr(), xc.data_ptr(), x.dtype(), outer, n, inner, log, on.stream);
#else
      ops::no_cuda_kernel(op);
#endif
    }
  }
  if (needs_grad({&x})) {
    record_function(op, {x}, {out}, {out}, [op, outer, n, inner, log](const FunctionNode::Context& ctx) {
      Tensor y = ctx.saved_at(0);
      Tensor g = dense_grad(ctx.grads[0], y.dtype());
      Tensor dx = empty(y.sizes(), TensorOptions(y.dtype(), y.device()));
      if (dx.numel() > 0) {
        if (y.is_cpu()) {
          softmax_backward_cpu(dx.data_ptr(), g.data_ptr(), y.data_ptr(), y.dtype(), outer, n, inner, log);
        } else {
#if defined(KILN_WITH_CUDA)
          OnCuda on(y);
          softmax_backward_cuda(dx.data_ptr(), g.data_ptr(), y.data_ptr(), y.dtype(), outer, n, inner, log,
                                on.stream);
#else
          ops::no_cuda_kernel(op);
#endif
        }
      }
      return TensorList{dx};
    });
  }
  return out;
}

// A per-feature parameter: undefined, or floating of exactly `shape`.
void check_param(const char* op, const Tensor& t, const char* what, const Shape& shape, const std::string& expected) {
  if (!t.defined()) return;
  ops::check_floating(op, t, what);
  if (t.sizes() != shape) {
    throw ShapeError(std::string(op) + ": " + what + " of shape " + shape_str(t.sizes()) + " does not match " +
                     expected);
  }
}

// Two optional tensors read through one dtype argument of a kernel must agree on it.
void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  if (a.defined() && b.defined() && a.dtype() != b.dtype()) {
    throw DTypeError(std::string(op) + ": " + a_name + " is " + dtype_name(a.dtype()) + " but " + b_name + " is " +
                     dtype_name(b.dtype()));
  }
}

DType param_dtype_of(const Tensor& a, const Tensor& b, DType fallback) {
  return a.defined() ? a.dtype() : (b.defined() ? b.dtype() : fallback);
}

// x [N, C, ...] as [N, C, S]: possible when the spatial dims merge into one strided dim, which holds
// for every dense NCHW or channels-last tensor.
std::optional<ChannelLayout> channel_layout(const Tensor& x) {
  if (!x.is_non_overlapping_and_dense()) return std::nullopt;
  ChannelLayout l;
  l.n = x.size(0);
  l.c = x.size(1);
  l.stride_n = x.stride(0);
  l.stride_c = x.stride(1);
  l.s = 1;
  l.stride_s = 1;
  bool have_inner = false;
  int64_t expected = 0;
  for (int64_t d = x.dim() - 1; d >= 2; --d) {
    if (x.size(d) == 1) continue;
    if (!have_inner) {
      l.stride_s = x.stride(d);
      have_inner = true;
    } else if (x.stride(d) != expected) {
      return std::nullopt;
    }
    expected = x.stride(d) * x.size(d);
    l.s *= x.size(d);
  }
  return l;
}

// t (same sizes as `like`) with exactly like's strides and dtype: a copy unless it already has them.
Tensor with_layout_of(const Tensor& t, const Tensor& like) {
  if (t.strides() == like.strides() && t.dtype() == like.dtype()) return t.detach();
  Tensor r = empty_strided(like.sizes(), like.strides(), TensorOptions(like.dtype(), like.device()));
  ops::copy_raw(r, t.detach());
  return r;
}

LossReduce to_loss_reduce(Reduction r) {
  switch (r) {
    case Reduction::None: return LossReduce::None;
    case Reduction::Sum: return LossReduce::Sum;
    case Reduction::Mean: return LossReduce::Mean;
  }
  return LossReduce::Mean;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "layer_norm";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0)
    throw ShapeError("layer_norm: normalized_shape must name at least one dim (input " + shape_str(x.sizes()) + ")");
  bool matches = x.dim() >= k;
  for (int64_t i = 0; matches && i < k; ++i)
    matches = x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)];
  if (!matches) {
    throw ShapeError("layer_norm: input of shape " + shape_str(x.sizes()) + " does not end with normalized_shape " +
                     shape_str(normalized_shape));
  }
  const std::string expected = "normalized_shape " + shape_str(normalized_shape);
  check_param(op, weight, "weight", normalized_shape, expected);
  check_param(op, bias, "bias", normalized_shape, expected);
  check_same_dtype(op, weight, "weight", bias, "bias");
  ops::common_device(op, {&x, &weight, &bias});
  if (!(eps >= 0)) throw Error("layer_norm: eps must be non-negative, got " + num_str(eps));

  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType pdt = param_dtype_of(weight, bias, x.dtype());
  const DType sdt = norm_stat_dtype(x.dtype());
  Tensor xc = dense(x), wc = dense(weight), bc = dense(bias);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  Tensor mean = empty({rows}, TensorOptions(sdt, x.device()));
  Tensor rstd = empty({rows}, TensorOptions(sdt, x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      layer_norm_forward_cpu(out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), xc.data_ptr(), x.dtype(),
                             ptr_or_null(wc), ptr_or_null(bc), pdt, rows, n, eps);
    } else {
#if defined(KILN_WITH_CUDA)
      OnCuda on(x);
      layer_norm_forward_cuda(out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), xc.data_ptr(), x.dtype(),
                              ptr_or_null(wc), ptr_or_null(bc), pdt, rows, n, eps, on.stream);
#else
      ops::no_cuda_kernel(op);
#endif
    }
  }
  if (needs_grad({&x, &weight, &bias})) {
    Shape ns = normalized_shape;
    record_function(op, {x, weight, bias}, {out}, {xc, wc, mean, rstd},
                    [rows, n, pdt, ns](const FunctionNode::Context& ctx) {
                      Tensor xs = ctx.saved_at(0), w = ctx.saved_at(1), m = ctx.saved_at(2), r = ctx.saved_at(3);
                      Tensor g = dense_grad(ctx.grads[0], xs.dtype());
                      TensorList grads(3);
                      if (ctx.needs_input_grad[0]) grads[0] = empty(xs.sizes(), TensorOptions(xs.dtype(), xs.device()));
                      // zeros, not empty: with no rows the kernel does not run and the sums are 0.
                      if (ctx.needs_input_grad[1]) grads[1] = zeros(ns, TensorOptions(pdt, xs.device()));
                      if (ctx.needs_input_grad[2]) grads[2] = zeros(ns, TensorOptions(pdt, xs.device()));
                      if (rows > 0 && xs.is_cpu()) {
                        layer_norm_backward_cpu(ptr_or_null(grads[0]), ptr_or_null(grads[1]), ptr_or_null(grads[2]),
                                                g.data_ptr(), xs.data_ptr(), xs.dtype(), m.data_ptr(), r.data_ptr(),
                                                ptr_or_null(w), pdt, rows, n);
                      } else if (rows > 0) {
#if defined(KILN_WITH_CUDA)
                        OnCuda on(xs);
                        const size_t bytes =
                            layer_norm_backward_cuda_workspace_bytes(rows, n, grads[1].defined() || grads[2].defined());
                        Tensor ws = workspace(bytes, xs.device());
                        layer_norm_backward_cuda(ptr_or_null(grads[0]), ptr_or_null(grads[1]), ptr_or_null(grads[2]),
                                                 g.data_ptr(), xs.data_ptr(), xs.dtype(), m.data_ptr(), r.data_ptr(),
                                                 ptr_or_null(w), pdt, rows, n, workspace_ptr(ws), bytes, on.stream);
#else
                        ops::no_cuda_kernel("layer_norm");
#endif
                      }
                      return grads;
                    });
  }
  return out;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (x.dim() < 2) {
    throw ShapeError("batch_norm: expected an input of at least 2 dims [N, C, ...], got shape " + shape_str(x.sizes()));
  }
  const int64_t c = x.size(1);
  const std::string expected = std::to_string(c) + " channels (input " + shape_str(x.sizes()) + ")";
  check_param(op, weight, "weight", {c}, expected);
  check_param(op, bias, "bias", {c}, expected);
  check_param(op, running_mean, "running_mean", {c}, expected);
  check_param(op, running_var, "running_var", {c}, expected);
  check_same_dtype(op, weight, "weight", bias, "bias");
  check_same_dtype(op, running_mean, "running_mean", running_var, "running_var");
  if (running_mean.defined() != running_var.defined()) {
    throw Error("batch_norm: running_mean and running_var must be given together (got only " +
                std::string(running_mean.defined() ? "running_mean" : "running_var") + ")");
  }
  if (!training && !running_mean.defined()) {
    throw Error("batch_norm: running_mean and running_var are required in eval mode (training = false; input " +
                shape_str(x.sizes()) + ")");
  }
  ops::common_device(op, {&x, &running_mean, &running_var, &weight, &bias});
  const int64_t count = x.numel() / std::max<int64_t>(c, 1);
  if (training && count <= 1) {
    throw ShapeError("batch_norm: expected more than 1 value per channel when training, got input of shape " +
                     shape_str(x.sizes()));
  }
  if (!(eps >= 0)) throw Error("batch_norm: eps must be non-negative, got " + num_str(eps));

  std::optional<ChannelLayout> layout = channel_layout(x);
  Tensor xd = layout ? x.detach() : dense(x);
  if (!layout) layout = channel_layout(xd);
  const DType pdt = param_dtype_of(weight, bias, x.dtype());
  const DType sdt = norm_stat_dtype(x.dtype());
  Tensor wc = dense(weight), bc = dense(bias);
  Tensor out = empty_strided(x.sizes(), xd.strides(), TensorOptions(x.dtype(), x.device()));
  Tensor save_mean = empty({c}, TensorOptions(sdt, x.device()));
  Tensor save_rstd = empty({c}, TensorOptions(sdt, x.device()));
  // The kernel updates contiguous running stats in place; others go through a copy and back.
  Tensor rm = dense(running_mean), rv = dense(running_var);
  if (x.numel() > 0) {
    BatchNormParams params;
    params.weight = ptr_or_null(wc);
    params.bias = ptr_or_null(bc);
    params.param_dtype = pdt;
    params.running_mean = ptr_or_null(rm);
    params.running_var = ptr_or_null(rv);
    params.running_dtype = running_mean.defined() ? running_mean.dtype() : DType::Float32;
    if (x.is_cpu()) {
      batch_norm_forward_cpu(out.data_ptr(), save_mean.data_ptr(), save_rstd.data_ptr(), xd.data_ptr(), x.dtype(),
                             *layout, params, training, momentum, eps);
    } else {
#if defined(KILN_WITH_CUDA)
      OnCuda on(x);
      const size_t bytes = batch_norm_forward_cuda_workspace_bytes(*layout, training);
      Tensor ws = workspace(bytes, x.device());
      batch_norm_forward_cuda(out.data_ptr(), save_mean.data_ptr(), save_rstd.data_ptr(), xd.data_ptr(), x.dtype(),
                              *layout, params, training, momentum, eps, workspace_ptr(ws), bytes, on.stream);
#else
      ops::no_cuda_kernel(op);
#endif
    }
    if (training && running_mean.defined()) {
      if (rm.data_ptr() != running_mean.data_ptr()) ops::copy_raw(running_mean, rm);
      if (rv.data_ptr() != running_var.data_ptr()) ops::copy_raw(running_var, rv);
      running_mean.bump_version();
      running_var.bump_version();
    }
  }
  if (needs_grad({&x, &weight, &bias})) {
    ChannelLayout l = *layout;
    record_function(op, {x, weight, bias}, {out}, {xd, wc, save_mean, save_rstd},
                    [l, pdt, training, c](const FunctionNode::Context& ctx) {
                      Tensor xs = ctx.saved_at(0), w = ctx.saved_at(1), m = ctx.saved_at(2), r = ctx.saved_at(3);
                      Tensor g = with_layout_of(ctx.grads[0], xs);
                      TensorList grads(3);
                      if (ctx.needs_input_grad[0]) {
                        grads[0] = empty_strided(xs.sizes(), xs.strides(), TensorOptions(xs.dtype(), xs.device()));
                      }
                      if (ctx.needs_input_grad[1]) grads[1] = zeros({c}, TensorOptions(pdt, xs.device()));
                      if (ctx.needs_input_grad[2]) grads[2] = zeros({c}, TensorOptions(pdt, xs.device()));
                      if (xs.numel() > 0 && xs.is_cpu()) {
                        batch_norm_backward_cpu(ptr_or_null(grads[0]), ptr_or_null(grads[1]), ptr_or_null(grads[2]),
                                                g.data_ptr(), xs.data_ptr(), xs.dtype(), l, m.data_ptr(), r.data_ptr(),
                                                ptr_or_null(w), pdt, training);
                      } else if (xs.numel() > 0) {
#if defined(KILN_WITH_CUDA)
                        OnCuda on(xs);
                        const size_t bytes = batch_norm_backward_cuda_workspace_bytes(l);
                        Tensor ws = workspace(bytes, xs.device());
                        batch_norm_backward_cuda(ptr_or_null(grads[0]), ptr_or_null(grads[1]), ptr_or_null(grads[2]),
                                                 g.data_ptr(), xs.data_ptr(), xs.dtype(), l, m.data_ptr(),
                                                 r.data_ptr(), ptr_or_null(w), pdt, training, workspace_ptr(ws), bytes,
                                                 on.stream);
#else
                        ops::no_cuda_kernel("batch_norm");
#endif
                      }
                      return grads;
                    });
  }
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  const char* op = "dropout";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  if (!(p >= 0.0 && p <= 1.0)) {
    throw Error("dropout: probability p must be in [0, 1], got " + num_str(p) + " (input " + shape_str(x.sizes()) +
                ")");
  }
  if (!training || p == 0.0) return x;
  const PhiloxState state = default_generator(x.device()).next();
  Tensor out = empty_strided(x.sizes(), ops::strides_like(x.sizes(), x), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    if (x.is_cpu()) {
      dropout_cpu(ops::make_arg(out), ops::make_arg(x.detach()), p, state);
    } else {
#if defined(KILN_WITH_CUDA)
      OnCuda on(x);
      dropout_cuda(ops::make_arg(out), ops::make_arg(x.detach()), p, state, on.stream);
#else
      ops::no_cuda_kernel(op);
#endif
    }
  }
  if (needs_grad({&x})) {
    DType dt = x.dtype();
    record_function(op, {x}, {out}, {}, [p, state, dt](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0].detach();
      Tensor dx = empty_strided(g.sizes(), ops::strides_like(g.sizes(), g), TensorOptions(dt, g.device()));
      if (dx.numel() > 0 && g.is_cpu()) {
        dropout_cpu(ops::make_arg(dx), ops::make_arg(g), p, state);
      } else if (dx.numel() > 0) {
#if defined(KILN_WITH_CUDA)
        OnCuda on(g);
        dropout_cuda(ops::make_arg(dx), ops::make_arg(g), p, state, on.stream);
#else
        ops::no_cuda_kernel("dropout");
#endif
      }
      return TensorList{dx};
    });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  const char* op = "embedding";
  ops::check_defined(op, weight, "weight");
  ops::check_defined(op, indices, "indices");
  if (weight.dim() != 2) {
    throw ShapeError("embedding: weight must be 2-d [num_embeddings, embedding_dim], got shape " +
                     shape_str(weight.sizes()));
  }
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32) {
    throw DTypeError(std::string("embedding: indices must be int64 or int32, got ") + dtype_name(indices.dtype()) +
                     " (shape " + shape_str(indices.sizes()) + ")");
  }
  ops::common_device(op, {&weight, &indices});
  const int64_t num = weight.size(0), dim = weight.size(1), k = indices.numel();
  Tensor flat = dense(indices.to(DType::Int64)).reshape({k});
  if (flat.is_cpu()) {
    // Checked here, before the gather, so the message names embedding and the caller's shapes.
    const int64_t* iv = flat.data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      if (iv[i] < 0 || iv[i] >= num) {
        throw IndexError("embedding: index " + std::to_string(iv[i]) + " is out of range for " + std::to_string(num) +
                         " embeddings (weight " + shape_str(weight.sizes()) + ", indices " +
                         shape_str(indices.sizes()) + ")");
      }
    }
  }
  Shape out_shape = indices.sizes();
  out_shape.push_back(dim);
  Tensor out = empty(out_shape, TensorOptions(weight.dtype(), weight.device()));
  if (out.numel() > 0) {
    if (weight.is_cpu()) {
      index_select_cpu(ops::make_arg(out.view({k, dim})), ops::make_arg(weight.detach()), 0, ops::make_arg(flat));
    } else {
#if defined(KILN_WITH_CUDA)
      // Checked on the device: a bad index gives a zero row and an IndexError naming embedding at
      // the next sync (the host cannot read the indices without waiting for the GPU).
      OnCuda on(weight);
      embedding_forward_cuda(out.data_ptr(), ops::make_arg(weight.detach()), flat.data_ptr<int64_t>(), k,
                             on.error_record(), on.stream);
#else
      ops::no_cuda_kernel(op);
#endif
    }
  }
  if (needs_grad({&weight})) {
    Shape ws = weight.sizes();
    const DType dt = weight.dtype();
    record_function(op, {weight}, {out}, {flat}, [ws, dt, k, dim](const FunctionNode::Context& ctx) {
      Tensor idx = ctx.saved_at(0);
      Tensor g = ctx.grads[0].detach().to(dt).reshape({k, dim});
      // Rows picked several times receive the sum of their gradients (scatter_add is deterministic).
      Tensor dw = zeros(ws, TensorOptions(dt, g.device()));
      if (g.numel() > 0 && g.is_cpu()) {
        scatter_add_cpu(ops::make_arg(dw), 0, ops::make_arg(idx.reshape({k, 1}).expand({k, dim})), ops::make_arg(g));
      } else if (g.numel() > 0) {
#if defined(KILN_WITH_CUDA)
        OnCuda on(g);
        scatter_add_cuda(ops::make_arg(dw), 0, ops::make_arg(idx.reshape({k, 1}).expand({k, dim})), ops::make_arg(g),
                         on.error_record(), on.stream);
#else
        ops::no_cuda_kernel("embedding");
#endif
      }
      return TensorList{dw};
    });
  }
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  const char* op = "cross_entropy";
  ops::check_defined(op, logits, "logits");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, logits, "logits");
  if (target.dtype() != DType::Int64 && target.dtype() != DType::Int32) {
    throw DTypeError(std::string("cross_entropy: target must hold integer class indices (int64), got ") +
                     dtype_name(target.dtype()) + " (target " + shape_str(target.sizes()) + ", logits " +
                     shape_str(logits.sizes()) + ")");
  }
  if (logits.dim() == 0) throw ShapeError("cross_entropy: logits must have a class dim, got a 0-d tensor");
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw Error("cross_entropy: label_smoothing must be in [0, 1], got " + num_str(label_smoothing));
  }
  ops::common_device(op, {&logits, &target});
  // [C] logits with a 0-d target are one row; otherwise the class dim is dim 1.
  Tensor lg = logits.dim() == 1 ? logits.detach().unsqueeze(0) : logits.detach();
  Shape expected = lg.sizes();
  expected.erase(expected.begin() + 1);
  Shape expected_user = logits.dim() == 1 ? Shape{} : expected;
  if (target.sizes() != expected_user) {
    throw ShapeError("cross_entropy: target of shape " + shape_str(target.sizes()) + " does not match logits " +
                     shape_str(logits.sizes()) + " (expected target " + shape_str(expected_user) + ")");
  }
  CrossEntropyShape cs;
  cs.n = lg.size(0);
  cs.c = lg.size(1);
  cs.s = 1;
  for (int64_t d = 2; d < lg.dim(); ++d) cs.s *= lg.size(d);
  cs.ignore_index = ignore_index;
  cs.label_smoothing = label_smoothing;
  const int64_t rows = cs.n * cs.s;
  if (cs.c == 0 && rows > 0) {
    throw ShapeError("cross_entropy: logits have no classes (shape " + shape_str(logits.sizes()) + ")");
  }
  const LossReduce red = to_loss_reduce(reduction);
  Tensor lc = dense(lg);
  Tensor tc = dense(target.to(DType::Int64));
  Tensor out =
      empty(red == LossReduce::None ? target.sizes() : Shape{}, TensorOptions(logits.dtype(), logits.device()));
  Tensor lse = empty({rows}, TensorOptions(norm_stat_dtype(logits.dtype()), logits.device()));
  Tensor count = empty({1}, TensorOptions(DType::Int64, logits.device()));
  if (logits.is_cpu()) {
    cross_entropy_forward_cpu(out.data_ptr(), out.dtype(), lse.data_ptr(), count.data_ptr<int64_t>(), lc.data_ptr(),
                              lc.dtype(), tc.data_ptr<int64_t>(), cs, red);
  } else {
#if defined(KILN_WITH_CUDA)
    // Targets are range-checked on the device: a bad one is an IndexError at the next sync.
    OnCuda on(logits);
    const size_t bytes = cross_entropy_cuda_workspace_bytes(cs, red);
    Tensor ws = workspace(bytes, logits.device());
    cross_entropy_forward_cuda(out.data_ptr(), out.dtype(), lse.data_ptr(), count.data_ptr<int64_t>(), lc.data_ptr(),
                               lc.dtype(), tc.data_ptr<int64_t>(), cs, red, workspace_ptr(ws), bytes,
                               on.error_record(), on.stream);
#else
    ops::no_cuda_kernel(op);
#endif
  }
  if (needs_grad({&logits})) {
    Shape ls = logits.sizes();
    record_function(op, {logits}, {out}, {lc, tc, lse, count}, [cs, red, ls](const FunctionNode::Context& ctx) {
      Tensor x = ctx.saved_at(0), t = ctx.saved_at(1), l = ctx.saved_at(2), cnt = ctx.saved_at(3);
      Tensor g = dense(ctx.grads[0]);
      Tensor dx = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
      if (dx.numel() > 0 && x.is_cpu()) {
        cross_entropy_backward_cpu(dx.data_ptr(), g.data_ptr(), g.dtype(), x.data_ptr(), x.dtype(), l.data_ptr(),
                                   cnt.data_ptr<int64_t>(), t.data_ptr<int64_t>(), cs, red);
      } else if (dx.numel() > 0) {
#if defined(KILN_WITH_CUDA)
        OnCuda on(x);
        cross_entropy_backward_cuda(dx.data_ptr(), g.data_ptr(), g.dtype(), x.data_ptr(), x.dtype(), l.data_ptr(),
                                    cnt.data_ptr<int64_t>(), t.data_ptr<int64_t>(), cs, red, on.stream);
#else
        ops::no_cuda_kernel("cross_entropy");
#endif
      }
      return TensorList{dx.reshape(ls)};
    });
  }
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  ops::check_floating(op, target, "target");
  // Stricter than PyTorch (which broadcasts with a warning): a [N, 1] vs [N] mismatch is nearly
  // always a bug, and broadcasting it silently gives an [N, N] loss.
  if (input.sizes() != target.sizes()) {
    throw ShapeError("mse_loss: input of shape " + shape_str(input.sizes()) + " and target of shape " +
                     shape_str(target.sizes()) + " differ");
  }
  Tensor diff = input - target;
  Tensor sq = diff * diff;
  switch (reduction) {
    case Reduction::None: return sq;
    case Reduction::Sum: return sum(sq);
    case Reduction::Mean: return mean(sq);
  }
  return mean(sq);
}

}  // namespace kiln
