// gradcheck: compares autograd's gradients with float64 central differences, on the CPU.
// The outputs are projected on fixed random weights, so one backward pass checks a whole
// vector-Jacobian product per input instead of one column at a time.
#pragma once

#include <functional>
#include <string>

#include "core/tensor.h"

namespace kiln {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the projection weights; the global generator is left as it was
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // names the input and element of the worst mismatch when !ok
};

// `inputs` are passed to `fn` as they are; those with requires_grad set must be float64 CPU leaves
// (any strides, no overlapping elements) and are checked. Their values are perturbed in place one
// element at a time and restored. `fn` must be a pure function of its inputs (no randomness).
GradcheckResult gradcheck(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                          GradcheckOptions options = {});

}  // namespace kiln
