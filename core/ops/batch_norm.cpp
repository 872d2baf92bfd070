// batch_norm over [N, C, ...] in NCHW or channels-last alike (the kernels see [N, C, S] through
// strides): training normalizes with the batch statistics and updates the running ones in place;
// the forward saves the per-channel mean and rstd for the backward. An epilogue (a residual added,
// a ReLU) runs in the kernels' normalizing pass.
#include "core/ops/batch_norm.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/layout_stats.h"
#include "kernels/error.h"
#include "kernels/batch_norm.h"

namespace kiln {
namespace {

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

// t (same sizes as `like`) in like's layout and dtype: a copy unless it already is. Only a change
// of layout counts as a hidden layout copy (noted as `what`); a cast (autocast's gradients) is not one.
Tensor with_layout_of(const Tensor& t, const Tensor& like, const char* what) {
  const bool layout_matches = same_layout(t, like);
  if (layout_matches && t.dtype() == like.dtype()) return t.detach();
  if (!layout_matches) ops::note_layout_copy(what);
  Tensor r = empty_strided(like.sizes(), like.strides(), TensorOptions(like.dtype(), like.device()));
  ops::copy_raw(r, t.detach());
  return r;
}

}  // namespace

using ops::check_param;
using ops::check_same_dtype;
using ops::dense;
using ops::param_dtype_of;
using ops::ptr_or_null;

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, BatchNormEpilogue{});
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, const BatchNormEpilogue& epilogue) {
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
  const Tensor& residual = epilogue.residual;
  if (residual.defined()) {
    if (residual.sizes() != x.sizes()) {
      throw ShapeError("batch_norm: the residual's shape " + shape_str(residual.sizes()) +
                       " differs from the input's " + shape_str(x.sizes()));
    }
    if (residual.dtype() != x.dtype()) {
      throw DTypeError(std::string("batch_norm: the residual's dtype ") + dtype_name(residual.dtype()) +
                       " differs from the input's " + dtype_name(x.dtype()) + " (input " + shape_str(x.sizes()) + ")");
    }
  }
  ops::common_device(op, {&x, &running_mean, &running_var, &weight, &bias, &residual});
  const int64_t count = x.numel() / std::max<int64_t>(c, 1);
  if (training && count <= 1) {
    throw ShapeError("batch_norm: expected more than 1 value per channel when training, got input of shape " +
                     shape_str(x.sizes()));
  }
  ops::check_eps(op, eps);
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw Error("batch_norm: momentum must be in [0, 1], got " + num_str(momentum));
  }

  std::optional<ChannelLayout> layout = channel_layout(x);
  // Dense NCHW and channels-last inputs are read in place; only a strided view is copied.
  Tensor xd = layout ? x.detach() : ops::to_layout(x, MemoryFormat::Contiguous, "batch_norm (input)");
  if (!layout) layout = channel_layout(xd);
  const DType pdt = param_dtype_of(weight, bias, x.dtype());
  const DType sdt = norm_stat_dtype(x.dtype());
  Tensor wc = dense(weight), bc = dense(bias);
  Tensor out = ops::empty_for(op, x.sizes(), xd.strides(), TensorOptions(x.dtype(), x.device()));
  // The kernels read the residual at x's offsets.
  const Tensor zd = residual.defined() ? with_layout_of(residual, xd, "batch_norm (residual)") : Tensor();
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
    params.residual = ptr_or_null(zd);
    params.relu = epilogue.relu;
    ops::launch(op, x.device(), kernels::batch_norm_forward, out.data_ptr(), save_mean.data_ptr(),
                save_rstd.data_ptr(), xd.data_ptr(), x.dtype(), *layout, params, training, momentum, eps);
    if (training && running_mean.defined()) {
      if (rm.data_ptr() != running_mean.data_ptr()) ops::copy_raw(running_mean, rm);
      if (rv.data_ptr() != running_var.data_ptr()) ops::copy_raw(running_var, rv);
      running_mean.bump_version();
      running_var.bump_version();
    }
  }
  if (needs_grad({&x, &weight, &bias, &residual})) {
    const ChannelLayout l = *layout;
    const bool relu = epilogue.relu, add = residual.defined();
    // A ReLU's backward needs the output (where it is > 0), which the output's own version guards.
    record_function(op, {x, weight, bias, residual}, {out}, {xd, wc, save_mean, save_rstd, relu ? out : Tensor()},
                    [l, pdt, training, c, relu, add](const FunctionNode::Context& ctx) {
                      Tensor xs = ctx.saved_at(0), w = ctx.saved_at(1), m = ctx.saved_at(2), r = ctx.saved_at(3);
                      Tensor g = with_layout_of(ctx.grads[0], xs, "batch_norm backward (grad_output)");
                      Tensor relu_out;  // the mask the batch norm backward applies itself
                      if (relu && add) {
                        // The residual's gradient is the masked one, so it is made once and read by both.
                        g = with_layout_of(ops::backward_kernel(g, ctx.saved_at(4), BinaryOp::ReluBackward), xs,
                                           "batch_norm backward (grad_output)");
                      } else if (relu) {
                        relu_out = ctx.saved_at(4);
                      }
                      TensorList grads(4);
                      if (ctx.needs_input_grad[0]) {
                        grads[0] = empty_strided(xs.sizes(), xs.strides(), TensorOptions(xs.dtype(), xs.device()));
                      }
                      if (ctx.needs_input_grad[1]) grads[1] = zeros({c}, TensorOptions(pdt, xs.device()));
                      if (ctx.needs_input_grad[2]) grads[2] = zeros({c}, TensorOptions(pdt, xs.device()));
                      if (add && ctx.needs_input_grad[3]) grads[3] = g;
                      const bool any = grads[0].defined() || grads[1].defined() || grads[2].defined();
                      if (any && xs.numel() > 0) {
                        ops::launch("batch_norm", xs.device(), kernels::batch_norm_backward, ptr_or_null(grads[0]),
                                    ptr_or_null(grads[1]), ptr_or_null(grads[2]), g.data_ptr(), ptr_or_null(relu_out),
                                    xs.data_ptr(), xs.dtype(), l, m.data_ptr(), r.data_ptr(), ptr_or_null(w), pdt,
                                    training);
                      }
                      return grads;
                    });
  }
  return out;
}

}  // namespace kiln
