// Helpers of the optimizer and scheduler tests (test_optim.cpp, test_optim_composed.cpp,
// test_optim_classic.cpp, test_optim_lbfgs.cpp, test_lr_scheduler.cpp, and the GPU's
// test_optim_cuda.cpp): parameters and gradients from plain vectors, a check of a tensor against
// values computed in double, and closures to minimize.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/optimizer.h"

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

// require_values with the tolerances an update computed in the parameter's dtype meets against its
// double arithmetic: tight for float64, float32's otherwise.
inline void require_close(const Tensor& p, const Vec& expected) {
  if (p.dtype() == DType::Float64) {
    require_values(p, expected, 1e-12, 1e-13);
  } else {
    require_values(p, expected, 1e-5, 1e-6);
  }
}

// The loss after 300 full-batch steps of `make`'s optimizer over a Linear(3, 1) fitting a noiseless
// linear function of 64 samples, divided by the loss before the first step: a working optimizer
// takes it far below 1.
inline double regression_loss_ratio(
    const std::function<std::unique_ptr<nn::optim::Optimizer>(const TensorList&)>& make) {
  manual_seed(11);
  const Tensor x = randn({64, 3});
  const Tensor y = matmul(x, tensor(std::vector<double>{1.5, -2.0, 0.5}).to(DType::Float32).reshape({3, 1})) + 0.3;
  auto model = std::make_shared<nn::Linear>(3, 1);
  const std::unique_ptr<nn::optim::Optimizer> opt = make(model->parameters());
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt->zero_grad();
    Tensor loss = mse_loss((*model)(x), y);
    loss.backward();
    opt->step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  return last / first;
}

// An LBFGS closure over Rosenbrock's function (1 - a)^2 + 100 (b - a^2)^2 of x = (a, b): clears
// opt's gradients, computes the loss, runs backward and returns the loss. Its minimum is (1, 1).
inline Tensor rosenbrock(nn::optim::Optimizer& opt, const Tensor& x) {
  opt.zero_grad();
  const Tensor a = x[0], b = x[1];
  const Tensor u = sub(1.0, a), v = sub(b, mul(a, a));
  Tensor loss = add(mul(u, u), mul(mul(v, v), 100.0));
  loss.backward();
  return loss;
}

}  // namespace kiln::test
