// The consumer program of kiln's package test: one forward and backward pass through nn::Linear with
// fixed weights, checked against the gradients worked out by hand here. It runs on the CPU, so a
// CUDA build of kiln passes on a machine without a GPU too. Returns 0 only when every value is right.
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "nn/layers.h"

using namespace kiln;

int main() {
  if (int(kBuiltWithCuda) != CONSUMER_EXPECTS_CUDA) {
    std::printf("consumer: the library says kBuiltWithCuda = %d, the package said kiln_WITH_CUDA = %d\n",
                int(kBuiltWithCuda), CONSUMER_EXPECTS_CUDA);
    return 1;
  }
  // y = x W^T + b, loss = sum(y^2): dloss/dW = 2 y^T x, dloss/db = 2 sum_rows(y), dloss/dx = 2 y W.
  const std::vector<float> w{0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.5f};  // [2, 3]
  const std::vector<float> b{0.1f, -0.2f};
  const std::vector<float> xv{1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 4.0f};   // [2, 3]
  nn::Linear linear(3, 2);
  {
    NoGradGuard no_grad;
    linear.weight.copy_(tensor(w, {2, 3}));
    linear.bias.copy_(tensor(b));
  }
  Tensor x = tensor(xv, {2, 3}).set_requires_grad(true);
  Tensor y = linear(x);
  Tensor loss = (y * y).sum();
  loss.backward();

  double y_ref[2][2], loss_ref = 0;
  for (int i = 0; i < 2; ++i) {
    for (int o = 0; o < 2; ++o) {
      y_ref[i][o] = b[o];
      for (int k = 0; k < 3; ++k) y_ref[i][o] += double(xv[i * 3 + k]) * w[o * 3 + k];
      loss_ref += y_ref[i][o] * y_ref[i][o];
    }
  }
  std::vector<double> gw_ref(6, 0.0), gb_ref(2, 0.0), gx_ref(6, 0.0);
  for (int i = 0; i < 2; ++i) {
    for (int o = 0; o < 2; ++o) {
      gb_ref[o] += 2 * y_ref[i][o];
      for (int k = 0; k < 3; ++k) {
        gw_ref[o * 3 + k] += 2 * y_ref[i][o] * xv[i * 3 + k];
        gx_ref[i * 3 + k] += 2 * y_ref[i][o] * w[o * 3 + k];
      }
    }
  }

  int wrong = 0;
  auto check = [&](const char* name, const std::vector<double>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (got.size() != want.size() || std::fabs(got[i] - want[i]) > 1e-4 * (1 + std::fabs(want[i]))) {
        std::printf("consumer: %s[%zu] is %g, expected %g\n", name, i, i < got.size() ? got[i] : NAN, want[i]);
        ++wrong;
      }
    }
  };
  check("loss", {loss.item<double>()}, {loss_ref});
  check("weight.grad", linear.weight.grad().to_vector_double(), gw_ref);
  check("bias.grad", linear.bias.grad().to_vector_double(), gb_ref);
  check("x.grad", x.grad().to_vector_double(), gx_ref);
  std::printf("consumer: loss %.4f, cuda: %d, gpu available: %d, %s\n", loss.item<double>(), int(kBuiltWithCuda),
              int(cuda::is_available()), wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
