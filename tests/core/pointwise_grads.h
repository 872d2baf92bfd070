// The gradients of an elementwise function at given points, for the hand tests of the special and
// polynomial families.
#pragma once

#include <functional>
#include <vector>

#include "core/kiln.h"

namespace kiln::test {

// d/dx sum(f(x)) at each of `at` (float64).
inline std::vector<double> grads(const std::function<Tensor(const Tensor&)>& f, std::vector<double> at) {
  Tensor x = tensor(at);
  x.set_requires_grad(true);
  f(x).sum().backward();
  return x.grad().to_vector_double();
}

}  // namespace kiln::test
