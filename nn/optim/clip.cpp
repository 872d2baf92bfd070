// clip_grad_norm_: one foreach_norm, three tiny tensor ops for the factor, one foreach_mul_;
// clip_grad_value_: a clamp_ per gradient.
// Non-dense gradients (rare strided views) are scaled with an ordinary in-place multiply.
#include "nn/optim/clip.h"

#include <cmath>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::optim {

void check_clip_options(const char* op, double max_norm, double norm_type) {
  if (!(max_norm >= 0.0)) throw Error(std::string(op) + ": max_norm must be >= 0, got " + num_str(max_norm));
  if (!(norm_type > 0.0)) {  // NaN too; infinity is the max norm
    throw Error(std::string(op) + ": norm_type must be positive (or infinity), got " + num_str(norm_type));
  }
}

namespace {

// The gradients of `params` that are defined: dense ones (scaled by one foreach_mul_) and the rest.
void split_grads(const TensorList& params, TensorList& dense, TensorList& strided) {
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    const Tensor& g = p.grad();
    (g.is_non_overlapping_and_dense() ? dense : strided).push_back(g);
  }
}

void scale_by_clip(TensorList& dense, TensorList& strided, double max_norm, const Tensor& total_norm) {
  Tensor coef = div(Scalar(max_norm), add(total_norm, Scalar(1e-6)));
  coef.clamp_(std::nullopt, Scalar(1.0));
  foreach_mul_(dense, coef);
  // As foreach_mul_ scales: in the wider of the two dtypes, rounded once to the gradient's (g.mul_(coef)
  // would take a float32 coef in a float16 gradient's dtype first, as PyTorch's result_type has it).
  for (Tensor& g : strided) g.copy_(mul(g.to(promote_types(g.dtype(), coef.dtype())), coef));
}

}  // namespace

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  check_clip_options("clip_grad_norm_", max_norm, norm_type);
  NoGradGuard no_grad;
  TensorList dense, strided;
  split_grads(params, dense, strided);
  if (dense.empty() && strided.empty()) return zeros({}, TensorOptions(DType::Float32));
  TensorList all = dense;
  for (const Tensor& g : strided) all.push_back(g.contiguous());
  const Tensor total = foreach_norm(all, norm_type);
  if (error_if_nonfinite) {
    const double v = total.item<double>();
    if (!std::isfinite(v)) {
      throw Error("clip_grad_norm_: the total norm of order " + num_str(norm_type) + " of " +
                  std::to_string(all.size()) + " gradients is " + num_str(v) +
                  ", so they cannot be clipped (error_if_nonfinite is set; the gradients are unchanged)");
    }
  }
  scale_by_clip(dense, strided, max_norm, total);
  return total;
}

void clip_grad_value_(const TensorList& params, double clip_value) {
  if (!(clip_value >= 0.0)) {
    throw Error("clip_grad_value_: clip_value must be >= 0, got " + num_str(clip_value));
  }
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    Tensor g = p.grad();
    g.clamp_(Scalar(-clip_value), Scalar(clip_value));
  }
}

void clip_grads_with_norm_(const TensorList& params, double max_norm, const Tensor& total_norm) {
  check_clip_options("clip_grads_with_norm_", max_norm, 2.0);
  if (!total_norm.defined() || total_norm.dim() != 0) {
    throw ShapeError("clip_grads_with_norm_: total_norm must be a 0-d tensor, got " +
                     (total_norm.defined() ? shape_str(total_norm.sizes()) : std::string("an undefined tensor")));
  }
  NoGradGuard no_grad;
  TensorList dense, strided;
  split_grads(params, dense, strided);
  scale_by_clip(dense, strided, max_norm, total_norm);
}

}  // namespace kiln::nn::optim
