// clip_grad_norm_: one foreach_norm, three tiny tensor ops for the factor, one foreach_mul_.
// Non-dense gradients (rare strided views) are scaled with an ordinary in-place multiply.
#include "nn/optim/clip.h"

#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/foreach.h"
#include "kernels/error.h"

namespace kiln::nn::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type) {
  if (!(max_norm >= 0.0)) throw Error("clip_grad_norm_: max_norm must be >= 0, got " + std::to_string(max_norm));
  if (!(norm_type > 0.0)) {  // NaN too; infinity is the max norm
    throw Error("clip_grad_norm_: norm_type must be positive (or infinity), got " + std::to_string(norm_type));
  }
  NoGradGuard no_grad;
  TensorList dense, strided;
  for (const Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    const Tensor& g = p.grad();
    (g.is_non_overlapping_and_dense() ? dense : strided).push_back(g);
  }
  if (dense.empty() && strided.empty()) return zeros({}, TensorOptions(DType::Float32));
  TensorList all = dense;
  for (const Tensor& g : strided) all.push_back(g.contiguous());
  const Tensor total = foreach_norm(all, norm_type);
  Tensor coef = div(Scalar(max_norm), add(total, Scalar(1e-6)));
  coef.clamp_(std::nullopt, Scalar(1.0));
  foreach_mul_(dense, coef);
  for (Tensor& g : strided) g.mul_(coef);
  return total;
}

}  // namespace kiln::nn::optim
