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
  ops::check_defined(op, input, "input");
  ops::check_defined(op, target, "target");
  ops::check_floating(op, input, "input");
  ops::check_floating(op, target, "target");
  ops::common_device(op, {&input, &target});
  if (reduction != Reduction::None && reduction != Reduction::Sum && reduction != Reduction::Mean) {
    throw Error("mse_loss: unknown reduction " + std::to_string(static_cast<int>(reduction)) +
                " (expected Reduction::None, Mean or Sum)");
  }
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
