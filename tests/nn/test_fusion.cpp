// Batch-norm folding (nn/fusion.h): each layer type with its batch norm folded computes what the
// pair computed, in float64 to rounding and in float32 to float32's precision; the transposed
// convolutions' grouped weights; a linear layer with a one-feature batch norm; the layer's
// identity kept and its bias registered; and the errors that change nothing.
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/fusion.h"
#include "nn/layers.h"
#include "nn/parametrize.h"
#include "nn/prune.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

std::set<std::string> keys_of(const Module& m) {
  std::set<std::string> out;
  for (const auto& [k, t] : m.state_dict()) out.insert(k);
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  return amax(abs(a.to(DType::Float64) - b.to(DType::Float64)), {}).item<double>();
}

// Running statistics and affine parameters away from their defaults, so every term of the fold
// matters; then eval mode.
void randomize(BatchNorm& bn) {
  NoGradGuard no_grad;
  bn.running_mean.copy_(randn(bn.running_mean.sizes()));
  bn.running_var.copy_(rand(bn.running_var.sizes()) + 0.5);
  if (bn.weight.defined()) bn.weight.copy_(randn(bn.weight.sizes()));
  if (bn.bias.defined()) bn.bias.copy_(randn(bn.bias.sizes()));
  bn.eval();
}

// Folds bn into layer and returns the largest difference between the pair's output before and
// the fused layer's after, on x.
template <class L>
double fused_error(L& layer, BatchNorm& bn, const Tensor& x, const std::function<void()>& fuse) {
  randomize(bn);
  layer.eval();
  const Tensor before = bn(layer(x));
  fuse();
  return max_diff(layer(x), before);
}

}  // namespace

TEST_CASE("fusing a batch norm into the layer before it keeps the pair's output", "[nn][fusion]") {
  manual_seed(3);
  SECTION("Conv2d without bias, float64: to rounding; the weight keeps its identity") {
    Conv2d conv(3, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, false);
    BatchNorm2d bn(6);
    conv.to(DType::Float64);
    bn.to(DType::Float64);
    const Tensor w = conv.weight;
    CHECK(fused_error(conv, bn, randn({2, 3, 9, 8}, DType::Float64), [&] { fuse_conv_bn_eval_(conv, bn); }) < 1e-12);
    CHECK(conv.weight.impl() == w.impl());
    CHECK(conv.bias.defined());
    CHECK(conv.get_parameter("bias").impl() == conv.bias.impl());
    CHECK(conv.str().find("bias=False") == std::string::npos);
  }
  SECTION("Conv2d with bias and groups, float32") {
    Conv2d conv(4, 8, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 2);
    BatchNorm2d bn(8);
    CHECK(fused_error(conv, bn, randn({2, 4, 7, 7}), [&] { fuse_conv_bn_eval_(conv, bn); }) < 1e-4);
  }
  SECTION("Conv1d and Conv3d") {
    Conv1d c1(3, 5, 3);
    BatchNorm1d b1(5);
    CHECK(fused_error(c1, b1, randn({2, 3, 11}), [&] { fuse_conv_bn_eval_(c1, b1); }) < 1e-4);
    Conv3d c3(2, 4, {2, 3, 3});
    BatchNorm3d b3(4);
    CHECK(fused_error(c3, b3, randn({1, 2, 4, 6, 6}), [&] { fuse_conv_bn_eval_(c3, b3); }) < 1e-4);
  }
  SECTION("transposed convolutions, grouped: output channels across the weight's first two dims") {
    ConvTranspose2d t2(4, 6, {3, 3}, {2, 2}, {1, 1}, {0, 0}, 2);
    BatchNorm2d b2(6);
    t2.to(DType::Float64);
    b2.to(DType::Float64);
    CHECK(fused_error(t2, b2, randn({2, 4, 5, 5}, DType::Float64), [&] { fuse_conv_bn_eval_(t2, b2); }) < 1e-12);
    ConvTranspose1d t1(4, 6, 3, 2, 0, 0, 2);
    BatchNorm1d b1(6);
    CHECK(fused_error(t1, b1, randn({2, 4, 7}), [&] { fuse_conv_bn_eval_(t1, b1); }) < 1e-4);
    ConvTranspose3d t3(2, 4, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, 2, false);
    BatchNorm3d b3(4);
    CHECK(fused_error(t3, b3, randn({1, 2, 3, 4, 4}), [&] { fuse_conv_bn_eval_(t3, b3); }) < 1e-4);
  }
  SECTION("Linear, with a batch norm over its features or a one-feature one") {
    Linear lin(7, 5);
    BatchNorm1d bn(5);
    CHECK(fused_error(lin, bn, randn({4, 7}), [&] { fuse_linear_bn_eval_(lin, bn); }) < 1e-4);
    Linear lin1(7, 5, false);
    BatchNorm1d one(1);
    randomize(one);
    lin1.eval();
    const Tensor x = randn({4, 7});
    // A one-feature batch norm over [N, 1, 5] normalizes all five outputs with one statistic.
    const Tensor before = one(lin1(x).unsqueeze(1)).squeeze(1);
    fuse_linear_bn_eval_(lin1, one);
    CHECK(max_diff(lin1(x), before) < 1e-4);
  }
  SECTION("a batch norm without affine parameters") {
    Conv2d conv(2, 3, {1, 1});
    BatchNorm2d bn(3, 1e-3, 0.1, false);
    CHECK(fused_error(conv, bn, randn({1, 2, 4, 4}), [&] { fuse_conv_bn_eval_(conv, bn); }) < 1e-4);
  }
}

TEST_CASE("fusing refuses training mode, untracked statistics and mismatched channels", "[nn][fusion]") {
  manual_seed(4);
  Conv2d conv(3, 4, {3, 3});
  BatchNorm2d bn(4);
  const std::vector<float> w = conv.weight.contiguous().to_vector<float>();
  CHECK_THROWS_WITH(fuse_conv_bn_eval_(conv, bn),
                    Catch::Contains("fuse_conv_bn_eval_: both modules must be in eval mode (Conv2d with BatchNorm2d)"));
  conv.eval();
  BatchNorm2d untracked(4, 1e-5, 0.1, true, false);
  untracked.eval();
  CHECK_THROWS_WITH(fuse_conv_bn_eval_(conv, untracked), Catch::Contains("does not track running statistics"));
  BatchNorm2d five(5);
  five.eval();
  CHECK_THROWS_WITH(fuse_conv_bn_eval_(conv, five),
                    Catch::Contains("the batch norm has 5 features, the layer 4 output channels"));
  Linear lin(3, 4);
  lin.eval();
  const std::vector<float> lw = lin.weight.contiguous().to_vector<float>(), lb = lin.bias.to_vector<float>();
  CHECK_THROWS_WITH(
      fuse_linear_bn_eval_(lin, five),
      Catch::Contains("fuse_linear_bn_eval_: the batch norm has 5 features, the layer 4 output channels"));
  CHECK(conv.weight.contiguous().to_vector<float>() == w);  // nothing changed
  CHECK(lin.weight.contiguous().to_vector<float>() == lw);
  CHECK(lin.bias.to_vector<float>() == lb);
  // A pruned weight is recomputed at each call: folding into it is refused.
  Conv2d pruned(3, 4, {3, 3});
  pruned.eval();
  prune::l1_unstructured(pruned, "weight", pruned.weight, 2);
  BatchNorm2d eval_bn(4);
  eval_bn.eval();
  const std::vector<float> pw = pruned.get_parameter("weight_orig").contiguous().to_vector<float>();
  CHECK_THROWS_WITH(fuse_conv_bn_eval_(pruned, eval_bn),
                    Catch::Contains("the layer's weight or bias is not a plain parameter (pruned or parametrized?)"));
  CHECK(pruned.get_parameter("weight_orig").contiguous().to_vector<float>() == pw);
  CHECK(keys_of(pruned) == std::set<std::string>{"bias", "weight_mask", "weight_orig"});
  // So is a parametrized batch norm weight (read stale between calls).
  Conv2d plain(3, 4, {3, 3});
  plain.eval();
  BatchNorm2d normed(4);
  normed.eval();
  weight_norm(normed, std::nullopt);
  CHECK_THROWS_WITH(fuse_conv_bn_eval_(plain, normed),
                    Catch::Contains("the batch norm's weight or bias is not a plain parameter"));
  CHECK_THROWS_WITH(fuse_conv_bn_weights(zeros({4}), Tensor(), zeros({4}), ones({4}), 1e-5, Tensor(), Tensor()),
                    Catch::Contains("fuse_conv_bn_weights: the layer's weight must be a floating tensor of 2 dims"));
  CHECK_THROWS_WITH(
      fuse_conv_bn_weights(zeros({4, 3, 3, 3}), Tensor(), zeros({5}), ones({4}), 1e-5, Tensor(), Tensor()),
      Catch::Contains("the batch norm's running_mean is [5] for 4 output channels"));
  CHECK_THROWS_WITH(
      fuse_conv_bn_weights(zeros({3, 2, 3, 3}), Tensor(), zeros({4}), ones({4}), 1e-5, Tensor(), Tensor(), true, 2),
      Catch::Contains("groups 2 does not divide the weight [3, 2, 3, 3]"));
}
