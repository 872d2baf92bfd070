// The instance norm and local response norm layers: InstanceNorm is group norm with a group per
// channel in training, keeps PyTorch's running statistics (the samples' average mean and unbiased
// variance) when asked and normalizes by them in eval, takes unbatched inputs, and prints as
// PyTorch's; LocalResponseNorm calls its functional op and prints as PyTorch's.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/kiln.h"
#include "nn/layers.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

namespace {

double max_diff(const Tensor& a, const Tensor& b) { return max(abs(a - b)).item<double>(); }

}  // namespace

TEST_CASE("InstanceNorm2d normalizes each sample's channel alone, as group norm with a group per channel",
          "[nn][norm]") {
  manual_seed(21);
  const TensorOptions f64(DType::Float64);
  const Tensor x = randn({3, 4, 5, 6}, f64) * 2.0 + 1.0;
  InstanceNorm2d norm(4);
  norm.to(DType::Float64);
  CHECK(norm.str() == "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
  CHECK(norm.parameters().empty());
  CHECK(norm.named_buffers().empty());
  const Tensor y = norm(x);
  CHECK(max_diff(y, group_norm(x, 4)) < 1e-12);
  // Each (sample, channel) has mean 0 and biased variance 1 (less eps's share) over its positions.
  CHECK(max(abs(mean(y, {2, 3}))).item<double>() < 1e-12);
  CHECK(max(abs(var(y, {2, 3}, 0.0) - 1.0)).item<double>() < 1e-5);
  // Unbatched [C, H, W] is one sample.
  CHECK(max_diff(norm(x.select(0, 1)), y.select(0, 1)) < 1e-12);
  // Nothing is sized by num_features without affine or running statistics: PyTorch accepts (and
  // warns of) another channel count.
  CHECK(norm(randn({2, 7, 3, 3}, f64)).sizes() == Shape{2, 7, 3, 3});
  // An empty batch has nothing to normalize.
  CHECK(norm(randn({0, 4, 3, 3}, f64)).sizes() == Shape{0, 4, 3, 3});
  CHECK_THROWS_WITH(norm(randn({4, 5}, f64)),
                    Catch::Contains("InstanceNorm2d") && Catch::Contains("[N, C, H, W] or [C, H, W]"));
  CHECK_THROWS_WITH(InstanceNorm2d(4, 1e-5, 0.1, true)(randn({2, 3, 4, 4})),
                    Catch::Contains("InstanceNorm2d") && Catch::Contains("3 channels") && Catch::Contains("4"));
  CHECK_THROWS_WITH(InstanceNorm1d(0), Catch::Contains("InstanceNorm1d") && Catch::Contains("num_features"));
  CHECK_THROWS_WITH(InstanceNorm3d(2, 1e-5, 1.5), Catch::Contains("InstanceNorm3d") && Catch::Contains("momentum"));
}

TEST_CASE("InstanceNorm's affine gradients and running statistics are PyTorch's", "[nn][norm]") {
  manual_seed(22);
  const TensorOptions f64(DType::Float64);
  const Tensor x = randn({2, 3, 8}, f64) * 3.0 - 2.0;
  InstanceNorm1d norm(3, 1e-5, 0.2, true, true);
  norm.to(DType::Float64);
  CHECK(norm.str() == "InstanceNorm1d(3, eps=1e-05, momentum=0.2, affine=True, track_running_stats=True)");
  {
    NoGradGuard no_grad;
    norm.weight.copy_(tensor({0.5, 2.0, -1.0}));
    norm.bias.copy_(tensor({0.1, 0.2, 0.3}));
  }
  // Training: the samples' own statistics; the gradients are group norm's.
  Tensor y = norm(x);
  Tensor w = norm.weight.detach().set_requires_grad(true), b = norm.bias.detach().set_requires_grad(true);
  const Tensor expected = group_norm(x, 3, w, b);
  CHECK(max_diff(y, expected) < 1e-12);
  const Tensor g = randn({2, 3, 8}, f64);
  sum(y * g).backward();
  sum(expected * g).backward();
  CHECK(max_diff(norm.weight.grad(), w.grad()) < 1e-12);
  CHECK(max_diff(norm.bias.grad(), b.grad()) < 1e-12);
  // The running statistics move by momentum towards the samples' average mean and average unbiased
  // variance, each over its own positions; instance norm never counts batches (as PyTorch).
  const Tensor sample_mean = mean(mean(x, {2}), {0}), sample_var = mean(var(x, {2}, 1.0), {0});
  CHECK(max_diff(norm.running_mean, sample_mean * 0.2) < 1e-12);
  CHECK(max_diff(norm.running_var, sample_var * 0.2 + 0.8) < 1e-12);
  CHECK(norm.num_batches_tracked.item<int64_t>() == 0);
  // Eval: the running statistics normalize, and stay as they were.
  norm.eval();
  const Tensor before = norm.running_mean.clone();
  const Tensor z = randn({2, 3, 8}, f64);
  const Tensor by_running = (z - norm.running_mean.view({1, 3, 1})) * rsqrt(norm.running_var.view({1, 3, 1}) + 1e-5) *
                                norm.weight.view({1, 3, 1}) +
                            norm.bias.view({1, 3, 1});
  CHECK(max_diff(norm(z), by_running) < 1e-12);
  CHECK(bitwise_equal(norm.running_mean, before));
  // reset_running_stats returns them to PyTorch's starting values.
  norm.reset_running_stats();
  CHECK(max(abs(norm.running_mean)).item<double>() == 0.0);
  CHECK(min(norm.running_var).item<double>() == 1.0);
}

TEST_CASE("LocalResponseNorm calls local_response_norm and prints as PyTorch's", "[nn][norm]") {
  manual_seed(23);
  const Tensor x = randn({2, 5, 3, 3});
  LocalResponseNorm lrn(3, 0.5, 0.75, 2.0);
  CHECK(bitwise_equal(lrn(x), local_response_norm(x, 3, 0.5, 0.75, 2.0)));
  CHECK(LocalResponseNorm(2).str() == "LocalResponseNorm(2, alpha=0.0001, beta=0.75, k=1.0)");
  // A window of one channel and no alpha divides by k^beta alone.
  CHECK(max_diff(local_response_norm(x, 1, 0.0, 0.5, 4.0), x / 2.0) < 1e-7);
  CHECK_THROWS_WITH(LocalResponseNorm(0), Catch::Contains("LocalResponseNorm") && Catch::Contains("size"));
  CHECK_THROWS_WITH(LocalResponseNorm(2, NAN), Catch::Contains("LocalResponseNorm") && Catch::Contains("nan"));
}
