// mse_loss, composed of elementwise ops and a reduction (no kernel of its own), so its gradient is
// autograd's through them.
#include "core/ops/mse_loss.h"

#include <string>

#include "core/autocast.h"
#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"

namespace kiln {

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* op = "mse_loss";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&input, &target})) {
    return mse_loss((*c)[0], (*c)[1], reduction);
  }
  // Stricter than PyTorch (which broadcasts with a warning): see core/ops/loss.h.
  detail::check_pointwise_loss(op, input, target, reduction);
  Tensor diff = input - target;
  return detail::reduce_loss(diff * diff, reduction);
}

}  // namespace kiln
