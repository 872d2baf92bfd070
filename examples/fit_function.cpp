// Fits y = sin(2x) + 0.3x on [-2, 2] with a one-hidden-layer tanh network, by plain gradient
// descent on autograd's gradients: the smallest complete training loop kiln can run.
// The hidden layer is written with broadcasting (x is 1-d), so it needs no matmul.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

int main(int argc, char** argv) {
  int steps = 3000;
  double lr = 0.02;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--lr" && i + 1 < argc) {
      lr = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--lr LR]\n", argv[0]);
      return 2;
    }
  }
  manual_seed(0);
  const int64_t n = 256, hidden = 32;
  Tensor x = linspace(-2.0, 2.0, n);
  std::vector<float> target;
  for (float v : x.to_vector<float>()) target.push_back(std::sin(2.0f * v) + 0.3f * v);
  Tensor y = tensor(target);

  // Parameters: h = tanh(x * w1 + b1) over `hidden` units, out = sum(h * w2) + b2.
  Tensor w1 = (randn({hidden}) * 1.5).set_requires_grad(true);
  Tensor b1 = (randn({hidden}) * 0.5).set_requires_grad(true);
  Tensor w2 = (randn({hidden}) * (1.0 / std::sqrt(static_cast<double>(hidden)))).set_requires_grad(true);
  Tensor b2 = zeros({1}).set_requires_grad(true);
  TensorList params{w1, b1, w2, b2};
  // Adam-style moments kept by hand (the smallest loop, without nn::optim); updates run without grad.
  TensorList m, v;
  for (const Tensor& p : params) {
    m.push_back(zeros_like(p));
    v.push_back(zeros_like(p));
  }

  auto t0 = std::chrono::steady_clock::now();
  double loss_value = 0;
  for (int step = 1; step <= steps; ++step) {
    Tensor h = tanh(x.unsqueeze(1) * w1 + b1);      // [n, hidden]
    Tensor pred = sum(h * w2, {1}) + b2;             // [n]
    Tensor loss = mean((pred - y).pow(2.0));
    for (Tensor& p : params) p.set_grad(Tensor());   // zero_grad, set to none
    loss.backward();
    {
      NoGradGuard no_grad;
      const double b1c = 1 - std::pow(0.9, step), b2c = 1 - std::pow(0.999, step);
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& g = params[i].grad();
        m[i].mul_(0.9).add_(g, 0.1);
        v[i].mul_(0.999).add_(g * g, 0.001);
        params[i].sub_((m[i] / b1c) / ((v[i] / b2c).sqrt() + 1e-8), lr);
      }
    }
    if (step % 500 == 0 || step == 1 || step == steps) {
      loss_value = loss.item<double>();
      std::printf("step %5d  loss %.6f\n", step, loss_value);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fit y = sin(2x) + 0.3x with %lld tanh units: final mse %.6f after %d steps (%.2f s, %.0f steps/s)\n",
              static_cast<long long>(hidden), loss_value, steps, secs, steps / secs);
  return loss_value < 0.01 ? 0 : 1;
}
