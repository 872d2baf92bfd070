// layer_norm over the trailing normalized_shape dims: one fused kernel each way; the forward saves
// the per-row mean and rstd (float32, or float64 for float64 inputs) for the backward.
#include "core/ops/layer_norm.h"

#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/layer_norm.h"

namespace kiln {

using ops::check_param;
using ops::check_same_dtype;
using ops::dense;
using ops::dense_grad;
using ops::param_dtype_of;
using ops::ptr_or_null;

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "layer_norm";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return layer_norm((*c)[0], normalized_shape, (*c)[1], (*c)[2], eps);
  }
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  ops::check_normalized_shape(op, x, normalized_shape);
  const std::string expected = "normalized_shape " + shape_str(normalized_shape);
  check_param(op, weight, "weight", normalized_shape, expected);
  check_param(op, bias, "bias", normalized_shape, expected);
  check_same_dtype(op, weight, "weight", bias, "bias");
  ops::common_device(op, {&x, &weight, &bias});
  ops::check_eps(op, eps);

  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const DType pdt = param_dtype_of(weight, bias, x.dtype());
  const DType sdt = norm_stat_dtype(x.dtype());
  Tensor xc = dense(x), wc = dense(weight), bc = dense(bias);
  Tensor out = ops::empty_for(op, x.sizes(), TensorOptions(x.dtype(), x.device()));
  Tensor mean = empty({rows}, TensorOptions(sdt, x.device()));
  Tensor rstd = empty({rows}, TensorOptions(sdt, x.device()));
  if (out.numel() > 0) {
    ops::launch(op, x.device(), kernels::layer_norm_forward, out.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                xc.data_ptr(), x.dtype(), ptr_or_null(wc), ptr_or_null(bc), pdt, rows, n, eps);
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
                      if (rows > 0) {
                        ops::launch("layer_norm", xs.device(), kernels::layer_norm_backward, ptr_or_null(grads[0]),
                                    ptr_or_null(grads[1]), ptr_or_null(grads[2]), g.data_ptr(), xs.data_ptr(),
                                    xs.dtype(), m.data_ptr(), r.data_ptr(), ptr_or_null(w), pdt, rows, n);
                      }
                      return grads;
                    });
  }
  return out;
}

}  // namespace kiln
