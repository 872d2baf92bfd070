// Helpers of the optimizer and scheduler tests (test_optim.cpp, test_optim_composed.cpp,
// test_lr_scheduler.cpp): parameters and gradients from plain vectors, and a check of a tensor
// against values computed in double.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/kiln.h"

namespace kiln::test {

using Vec = std::vector<double>;

// A leaf that requires grad, holding `v` in `dtype`.
inline Tensor param(const Vec& v, DType dtype = DType::Float32) {
  Tensor t = tensor(v).to(dtype);
  t.set_requires_grad(true);
  return t;
}

// p's gradient set to `g`, in p's dtype.
inline void set_grad(Tensor& p, const Vec& g) { p.set_grad(tensor(g).to(p.dtype())); }

// Every element within atol + rtol |expected| of `expected` (a REQUIRE naming the first that is not).
inline void require_values(const Tensor& t, const Vec& expected, double rtol = 2e-6, double atol = 1e-7) {
  const std::vector<double> v = t.to_vector_double();
  REQUIRE(v.size() == expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << ": got " << v[i] << ", expected " << expected[i]);
    REQUIRE(std::abs(v[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

}  // namespace kiln::test
