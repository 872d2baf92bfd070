// Multi-tensor ops: optimizer steps, norms, scaling and zeroing of whole tensor lists in a few
// launches. In place, no autograd, no host sync: step-dependent values (lr, step, found_inf,
// grad_scale) are 0-d tensors on the lists' device, read by the kernels: lr float64 (or float32,
// converted there), the others float32. Tensors need only be dense (contiguous or channels-last),
// with one layout per (param, grad, state) tuple; lists are bucketed by dtype, so one call may mix
// float32 and bfloat16 parameters. An optimizer update's parameters and states are written in
// place: none of them may share memory with any other tensor of the call (an Error names the pair);
// gradients may share memory with each other.
#pragma once

#include "core/tensor.h"
#include "kernels/foreach.h"

namespace kiln {

// PyTorch's SGD: d = g (/ *grad_scale), negated when maximize (ascent), + weight_decay * p;
// with momentum, buf = (step == 0) ? d : momentum * buf + (1 - dampening) * d and
// d = nesterov ? d + momentum * buf : buf; then p -= *lr * d. momentum_buffers may be empty when
// momentum == 0; otherwise one per param, float32 or the param's dtype. `steps`: each parameter's
// count of completed steps (as torch.optim keeps one per parameter), one-element float32 tensors on
// the lists' device, one per parameter or one that all share; read, not advanced (see
// foreach_add_scalar_). Nothing changes when found_inf is given and *found_inf != 0.
void foreach_sgd_(const TensorList& params, const TensorList& grads, const TensorList& momentum_buffers,
                  const Tensor& lr, double momentum, double dampening, bool nesterov, double weight_decay,
                  const TensorList& steps, const Tensor& found_inf = Tensor(), const Tensor& grad_scale = Tensor(),
                  bool maximize = false);

// torch.optim.Adam / AdamW (one fused update, as their fused=True; `options` is the kernels' own
// AdamHyper, kernels/foreach.h: torch.optim.Adam's defaults, decoupled_weight_decay for AdamW),
// with t = the parameter's step count + 1 and g the gradient (/ *grad_scale), negated when maximize:
// AdamW: p *= 1 - lr * weight_decay; Adam: g += weight_decay * p;
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; amsgrad: vmax = max(vmax, v) (NaN kept) and
// vhat = vmax, else vhat = v; p -= lr / (1 - b1^t) * m / (sqrt(vhat) / sqrt(1 - b2^t) + eps).
// max_exp_avg_sqs: one per parameter with amsgrad (in the dtype of its other states), none without.
// States are float32 or the param's dtype. steps, found_inf and grad_scale as for SGD.
void foreach_adam_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                   const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs, const Tensor& lr,
                   const TensorList& steps, const AdamHyper& options, const Tensor& found_inf = Tensor(),
                   const Tensor& grad_scale = Tensor());

// foreach_adam_ as torch.optim.AdamW without amsgrad and maximize: decoupled weight decay.
void foreach_adamw_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                    const TensorList& exp_avg_sqs, const Tensor& lr, const TensorList& steps, double beta1,
                    double beta2, double eps, double weight_decay, const Tensor& found_inf = Tensor(),
                    const Tensor& grad_scale = Tensor());

// The p-norm of all elements of all tensors together (p > 0, or infinity for the max), as a 0-d
// tensor on their device: float64 when any tensor is float64, else float32 (a float32 one on the CPU
// for an empty list). Deterministic: fixed chunks, each reduced in float (double for float64),
// combined in order in double.
Tensor foreach_norm(const TensorList& tensors, double norm_type = 2.0);

// tensors *= scalar, a one-element float tensor on the same device (float64 tensors take a float64
// factor whole; the others take it rounded to float32).
void foreach_mul_(const TensorList& tensors, const Tensor& scalar);

// tensors += value, unless found_inf is given and *found_inf != 0: how optimizers advance their
// step counters once per step, after every update kernel has read them.
void foreach_add_scalar_(const TensorList& tensors, double value, const Tensor& found_inf = Tensor());

// Every tensor to zero, any dtype.
void foreach_zero_(const TensorList& tensors);

// Dynamic loss scaling (nn/amp/grad_scaler.h), as PyTorch's _amp_foreach_non_finite_check_and_unscale_:
// in one pass over the list, sets *found_inf to 1 when any element is inf or NaN and multiplies every
// element by *inv_scale. found_inf is only ever set, never cleared, so calls accumulate into it.
// found_inf (required) and inv_scale are one-element float32 tensors on the tensors' device; an
// undefined inv_scale checks without writing the tensors. Tensors: floating (float64 too), dense.
void foreach_non_finite_check_and_unscale_(const TensorList& tensors, const Tensor& found_inf,
                                           const Tensor& inv_scale);

// The loss-scale update of one step, on the device, as PyTorch's _amp_update_scale_: when
// *found_inf != 0, scale *= backoff_factor and growth_tracker = 0; otherwise growth_tracker += 1,
// and when it reaches growth_interval, scale *= growth_factor (unless that is not a finite float32)
// and growth_tracker = 0. scale and found_inf: one-element float32; growth_tracker: one-element
// int32; all on one device. growth_factor > 1, backoff_factor in (0, 1), growth_interval >= 1.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace kiln
