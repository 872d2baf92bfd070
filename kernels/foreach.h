// Multi-tensor ("foreach") kernels: one call updates a whole list of tensors, described as
// {pointer, numel} entries, each cut into fixed chunks of kForeachChunk elements. Step-dependent
// scalars (lr, each parameter's step count, found_inf, grad_scale) arrive as pointers into device
// memory, never as host values, so a training step never waits on the host and can be captured as
// a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <math.h>

#include "kernels/dtype.h"
#include "kernels/macros.h"
#include "kernels/kernel.h"

namespace kiln {

// One tensor of a list: its lowest-addressed element and its element count. The elements form
// one dense block; tensors of one call that are updated together (param, grad, state) share
// their layout, so element i of one corresponds to element i of the others.
struct ForeachTensor {
  void* data = nullptr;
  int64_t numel = 0;
};

// The work unit of every foreach kernel: chunk c of a tensor covers elements
// [c * kForeachChunk, (c + 1) * kForeachChunk). Fixed, so norms are deterministic on any machine.
constexpr int64_t kForeachChunk = 65536;

// Number of chunks of a list: the length of the partials buffer of the norm kernels.
int64_t foreach_num_chunks(const ForeachTensor* tensors, int64_t n);

// Scalars read through pointers (0-d tensors on the kernels' device; nullptr: absent): lr is
// float64, so a float64 parameter steps by its exact learning rate; the others are float32.
// found_inf != 0 makes an update a no-op; gradients are divided by *grad_scale on the fly. The
// step counts are per tensor: the optimizers' `steps` lists below.
struct ForeachScalars {
  const double* lr = nullptr;
  const float* found_inf = nullptr;
  const float* grad_scale = nullptr;
};

struct SgdHyper {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;  // ascend: the gradient's sign flipped before anything else reads it
};

// Adam and AdamW, as torch.optim computes them, with torch.optim.Adam's defaults (foreach_adam_'s
// options, core/ops/foreach.h): `decoupled_weight_decay` is AdamW's weight decay (the parameter
// shrinks by lr * weight_decay), otherwise Adam's L2 term (weight_decay * p added to the gradient);
// `amsgrad` divides by the running maximum of the second moment instead of the moment itself.
struct AdamHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;
  bool amsgrad = false;
  bool maximize = false;
};

// PyTorch's SGD on n (param, grad, momentum buffer) triples. params and grads have
// `param_dtype` (float32, float16, bfloat16, float64); buffers have `state_dtype` (float32 or
// param_dtype) and may be nullptr when momentum == 0. steps[i].data points to tensor i's count of
// completed steps (one float32; numel is not read; tensors may share one): a tensor's first step
// (count 0) copies d into its buffer. Needs s.lr.
void sgd_step_cpu(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* bufs,
                  const ForeachTensor* steps, int64_t n, DType param_dtype, DType state_dtype, const SgdHyper& h,
                  const ForeachScalars& s, const KernelContext& ctx);
// torch.optim.Adam / AdamW on n (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq) tuples;
// max_exp_avg_sqs (the state dtype) is read only with h.amsgrad, and may be nullptr without it.
// Tensor i's bias corrections use t = its step count + 1. Dtypes and steps as for SGD.
void adam_step_cpu(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* exp_avgs,
                   const ForeachTensor* exp_avg_sqs, const ForeachTensor* max_exp_avg_sqs, const ForeachTensor* steps,
                   int64_t n, DType param_dtype, DType state_dtype, const AdamHyper& h, const ForeachScalars& s,
                   const KernelContext& ctx);
// Norms: partials[k] (float64) = the reduction of chunk k of the list in (tensor, chunk) order:
// sum of |x|^p, or max |x| when p is infinite, accumulated as the dtype's elementwise math does
// (float64 for float64). Then `out` (one element of out_dtype, Float32 or Float64) = the combination
// of `count` partials in index order, in float64: (sum)^(1/p) or the max. NaN propagates.
void foreach_norm_partials_cpu(double* partials, const ForeachTensor* tensors, int64_t n, DType dtype, double p,
                               const KernelContext& ctx);
void foreach_norm_finish_cpu(void* out, DType out_dtype, const double* partials, int64_t count, double p,
                             const KernelContext& ctx);
// tensors *= *scalar (one element of scalar_dtype, Float32 or Float64; a float64 factor multiplies
// float64 tensors as it is).
void foreach_mul_scalar_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, const void* scalar,
                            DType scalar_dtype, const KernelContext& ctx);
// tensors += value, skipped when found_inf is given and *found_inf != 0 (the step counters).
void foreach_add_scalar_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, double value, const float* found_inf,
                            const KernelContext& ctx);
// All bytes zero (zero in every dtype); `element_size` of 1, 2, 4 or 8.
void foreach_zero_cpu(const ForeachTensor* tensors, int64_t n, size_t element_size, const KernelContext& ctx);
// Dynamic loss scaling, pass 1: *found_inf = 1 when any element of the list is inf or NaN (checked
// before the multiply; the flag is only ever set, never cleared), and every element *= *inv_scale
// unless inv_scale is nullptr (a check without a write). Floating dtypes, float64 included.
void foreach_non_finite_check_and_unscale_cpu(const ForeachTensor* tensors, int64_t n, DType dtype, float* found_inf,
                                              const float* inv_scale, const KernelContext& ctx);
// Dynamic loss scaling, pass 2, on one float32 scale and one int32 growth tracker (see
// foreach_math::amp_update_scale).
void amp_update_scale_cpu(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                          double backoff_factor, int32_t growth_interval, const KernelContext& ctx);

// --- the per-element math, shared by both backends -------------------------------------------
// Coefficients are derived once per chunk (per thread on the GPU) from the host hyperparameters,
// the device scalars and the chunk's tensor's step count, in double; elements are then updated in
// the compute type C (float, or double for float64) with the same operation order as the unfused
// tensor-op formulas. The learning rate is a float64 device scalar (nn/optim/optimizer.h: set on
// the device, as a scheduler or a captured graph does), rounded to C where an element uses it.
// CUDA twins: pointers are device pointers of the current device, ordered on `stream`. Few
// launches for a whole list: each launch covers up to a few hundred chunks of up to a few dozen
// tensors described in the kernel's parameters. float64 has no CUDA kernel (a DTypeError).
void sgd_step_cuda(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* bufs,
                   const ForeachTensor* steps, int64_t n, DType param_dtype, DType state_dtype, const SgdHyper& h,
                   const ForeachScalars& s, const KernelContext& ctx);
void adam_step_cuda(const ForeachTensor* params, const ForeachTensor* grads, const ForeachTensor* exp_avgs,
                    const ForeachTensor* exp_avg_sqs, const ForeachTensor* max_exp_avg_sqs, const ForeachTensor* steps,
                    int64_t n, DType param_dtype, DType state_dtype, const AdamHyper& h, const ForeachScalars& s,
                    const KernelContext& ctx);
void foreach_norm_partials_cuda(double* partials, const ForeachTensor* tensors, int64_t n, DType dtype, double p,
                                const KernelContext& ctx);
void foreach_norm_finish_cuda(void* out, DType out_dtype, const double* partials, int64_t count, double p,
                              const KernelContext& ctx);
void foreach_mul_scalar_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, const void* scalar,
                             DType scalar_dtype, const KernelContext& ctx);
void foreach_add_scalar_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, double value, const float* found_inf,
                             const KernelContext& ctx);
void foreach_zero_cuda(const ForeachTensor* tensors, int64_t n, size_t element_size, const KernelContext& ctx);
void foreach_non_finite_check_and_unscale_cuda(const ForeachTensor* tensors, int64_t n, DType dtype, float* found_inf,
                                               const float* inv_scale, const KernelContext& ctx);
void amp_update_scale_cuda(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                           double backoff_factor, int32_t growth_interval, const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(sgd_step);
KILN_KERNEL(adam_step);
KILN_KERNEL(foreach_norm_partials);
KILN_KERNEL(foreach_norm_finish);
KILN_KERNEL(foreach_mul_scalar);
KILN_KERNEL(foreach_add_scalar);
KILN_KERNEL(foreach_zero);
KILN_KERNEL(foreach_non_finite_check_and_unscale);
KILN_KERNEL(amp_update_scale);
}  // namespace kernels

namespace foreach_math {

KILN_HD bool skip_update(const ForeachScalars& s) { return s.found_inf != nullptr && *s.found_inf != 0.0f; }

template <typename C> struct SgdCoef {
  C lr, momentum, one_minus_dampening, weight_decay, scale;
  bool has_momentum, has_decay, has_scale, nesterov, first, maximize;
};

// `step`: the tensor's completed steps before this one.
template <typename C> KILN_HD SgdCoef<C> sgd_coef(const SgdHyper& h, const ForeachScalars& s, float step) {
  SgdCoef<C> k;
  k.lr = static_cast<C>(*s.lr);
  k.momentum = static_cast<C>(h.momentum);
  k.one_minus_dampening = static_cast<C>(1.0 - h.dampening);
  k.weight_decay = static_cast<C>(h.weight_decay);
  k.scale = s.grad_scale != nullptr ? static_cast<C>(*s.grad_scale) : C(1);
  k.has_momentum = h.momentum != 0.0;
  k.has_decay = h.weight_decay != 0.0;
  k.has_scale = s.grad_scale != nullptr;
  k.nesterov = h.nesterov;
  k.first = step == 0.0f;
  k.maximize = h.maximize;
  return k;
}

// d = (maximize ? -1 : 1) * g (/ scale) + wd * p;
// buf = first ? d : momentum * buf + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf;
// p -= lr * d.
template <typename C> KILN_HD void sgd_element(C& p, C g, C* buf, const SgdCoef<C>& k) {
  C d = k.has_scale ? g / k.scale : g;
  if (k.maximize) d = -d;
  if (k.has_decay) d = d + k.weight_decay * p;
  if (k.has_momentum) {
    C b = k.first ? d : k.momentum * *buf + k.one_minus_dampening * d;
    *buf = b;
    d = k.nesterov ? d + k.momentum * b : b;
  }
  p = p - k.lr * d;
}

template <typename C>
struct AdamCoef {
  C decay, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps, scale;
  bool has_scale, has_l2, amsgrad, maximize;
};

template <typename C>
KILN_HD AdamCoef<C> adam_coef(const AdamHyper& h, const ForeachScalars& s, float step) {
  const double lr = *s.lr;
  const double t = static_cast<double>(step) + 1.0;
  const double bc1 = 1.0 - ::pow(h.beta1, t);
  const double bc2 = 1.0 - ::pow(h.beta2, t);
  AdamCoef<C> k;
  k.decay = static_cast<C>(h.decoupled_weight_decay ? 1.0 - lr * h.weight_decay : 1.0);
  k.l2 = static_cast<C>(h.decoupled_weight_decay ? 0.0 : h.weight_decay);
  k.beta1 = static_cast<C>(h.beta1);
  k.one_minus_beta1 = static_cast<C>(1.0 - h.beta1);
  k.beta2 = static_cast<C>(h.beta2);
  k.one_minus_beta2 = static_cast<C>(1.0 - h.beta2);
  k.step_size = static_cast<C>(lr / bc1);
  k.bc2_sqrt = static_cast<C>(::sqrt(bc2));
  k.eps = static_cast<C>(h.eps);
  k.scale = s.grad_scale != nullptr ? static_cast<C>(*s.grad_scale) : C(1);
  k.has_scale = s.grad_scale != nullptr;
  k.has_l2 = !h.decoupled_weight_decay && h.weight_decay != 0.0;
  k.amsgrad = h.amsgrad;
  k.maximize = h.maximize;
  return k;
}

// g = (maximize ? -1 : 1) * g (/ scale); AdamW: p *= 1 - lr * wd, Adam: g += wd * p;
// m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2; amsgrad: vmax = max(vmax, v), NaN kept
// (torch.maximum), and the denominator reads vmax instead of v;
// p -= (lr / bc1) * (m / (sqrt(v) / sqrt(bc2) + eps)), as torch.optim orders it. `vmax` is read
// and written only with amsgrad.
template <typename C>
KILN_HD void adam_element(C& p, C g, C& m, C& v, C& vmax, const AdamCoef<C>& k) {
  if (k.has_scale) g = g / k.scale;
  if (k.maximize) g = -g;
  if (k.has_l2) g = g + k.l2 * p;
  p = p * k.decay;
  m = k.beta1 * m + k.one_minus_beta1 * g;
  v = k.beta2 * v + k.one_minus_beta2 * (g * g);
  C second = v;
  if (k.amsgrad) {
    if (!(vmax > v || vmax != vmax)) vmax = v;
    second = vmax;
  }
  const C denom = ::sqrt(second) / k.bc2_sqrt + k.eps;
  p = p - k.step_size * (m / denom);
}

// PyTorch's _amp_update_scale_: after a step with a non-finite gradient the scale backs off and
// the tracker restarts; after growth_interval clean steps in a row it grows. Products are formed
// in double and rounded once to float, the same on both devices; a grown scale that would not be
// a finite float32 is not taken (an infinite scale would make every later step non-finite), nor a
// backed-off one below float32's smallest normal number (2^-126): the unscale factor 1 / scale of a
// subnormal is inf, which turns the next clean step's finite gradients into inf and NaN.
KILN_HD void amp_update_scale(float& scale, int32_t& growth_tracker, float found_inf, double growth_factor,
                              double backoff_factor, int32_t growth_interval) {
  if (found_inf != 0.0f) {
    const float backed_off = static_cast<float>(static_cast<double>(scale) * backoff_factor);
    if (backed_off >= 0x1p-126f) scale = backed_off;
    growth_tracker = 0;
    return;
  }
  const int32_t clean = growth_tracker + 1;
  if (clean < growth_interval) {
    growth_tracker = clean;
    return;
  }
  const float grown = static_cast<float>(static_cast<double>(scale) * growth_factor);
  if (grown - grown == 0.0f) scale = grown;  // finite: inf - inf and NaN - NaN are NaN
  growth_tracker = 0;
}

}  // namespace foreach_math


}  // namespace kiln
