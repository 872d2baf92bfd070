// The 1-d and 3-d layers beside the 2-d ones: BatchNorm1d and BatchNorm3d (the batch norm of
// BatchNorm2d over other input dims: statistics, running buffers, Sequential's ReLU epilogue),
// MaxPool1d, AvgPool1d, AdaptiveAvgPool1d (the 1-d pools, PyTorch's printed forms), the adaptive
// max and LP pools in 1-d and 2-d, and the volume layers (Conv3d, ConvTranspose3d and the 3-d
// pools: shapes, init, printed forms, values, and a small 3-d CNN that learns). Expected values are
// written out in double arithmetic.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

namespace {

// Per-channel (dim 1) mean and biased variance of x [N, C, *], in double.
void channel_moments(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t c = x.size(1), inner = x.numel() / (x.size(0) * c);
  const std::vector<double> v = x.contiguous().to_vector_double();
  mean.assign(static_cast<size_t>(c), 0.0);
  var.assign(static_cast<size_t>(c), 0.0);
  const double count = static_cast<double>(x.numel() / c);
  for (int64_t i = 0; i < x.numel(); ++i) mean[static_cast<size_t>((i / inner) % c)] += v[static_cast<size_t>(i)];
  for (double& m : mean) m /= count;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const size_t ch = static_cast<size_t>((i / inner) % c);
    var[ch] += (v[static_cast<size_t>(i)] - mean[ch]) * (v[static_cast<size_t>(i)] - mean[ch]);
  }
  for (double& s : var) s /= count;
}

}  // namespace

TEST_CASE("BatchNorm1d and BatchNorm3d: batch statistics per channel, running buffers, eval", "[nn]") {
  manual_seed(21);
  BatchNorm1d bn1(4);
  CHECK(bn1.str() == "BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  BatchNorm3d bn3(2, 1e-3, 0.25);
  CHECK(bn3.str() == "BatchNorm3d(2, eps=0.001, momentum=0.25, affine=True, track_running_stats=True)");
  // [N, C] (features), [N, C, L] (channels of a sequence) and [N, C, D, H, W].
  struct Case {
    BatchNorm* bn;
    Tensor x;
    double momentum, eps;
  };
  for (Case c : {Case{&bn1, randn({8, 4}) * 2.0 + 1.0, 0.1, 1e-5}, Case{&bn1, randn({3, 4, 5}) - 2.0, 0.1, 1e-5},
                 Case{&bn3, randn({2, 2, 3, 4, 2}) * 0.5, 0.25, 1e-3}}) {
    INFO(shape_str(c.x.sizes()));
    BatchNorm& bn = *c.bn;
    bn.train();
    bn.reset_running_stats();
    {
      NoGradGuard no_grad;
      bn.weight.copy_(rand({bn.num_features}) + 0.5);
      bn.bias.copy_(randn({bn.num_features}));
    }
    std::vector<double> mean, var;
    channel_moments(c.x, mean, var);
    const Tensor y = bn.forward(c.x);
    CHECK(y.sizes() == c.x.sizes());
    // y = (x - mean) / sqrt(var + eps) * weight + bias, channel by channel.
    const std::vector<double> xv = c.x.contiguous().to_vector_double(), yv = y.contiguous().to_vector_double();
    const std::vector<double> w = bn.weight.to_vector_double(), b = bn.bias.to_vector_double();
    const int64_t ch = c.x.size(1), inner = c.x.numel() / (c.x.size(0) * ch);
    double worst = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t k = (i / static_cast<size_t>(inner)) % static_cast<size_t>(ch);
      const double expect = (xv[i] - mean[k]) / std::sqrt(var[k] + c.eps) * w[k] + b[k];
      worst = std::max(worst, std::fabs(yv[i] - expect));
    }
    CHECK(worst < 1e-5);
    // The running buffers moved by momentum towards the batch mean and unbiased variance.
    const double n = static_cast<double>(c.x.numel() / ch);
    const std::vector<double> rm = bn.running_mean.to_vector_double(), rv = bn.running_var.to_vector_double();
    for (size_t k = 0; k < mean.size(); ++k) {
      CHECK(rm[k] == Approx(c.momentum * mean[k]).margin(1e-6));
      CHECK(rv[k] == Approx(1 - c.momentum + c.momentum * var[k] * n / (n - 1)).epsilon(1e-5));
    }
    CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
    // Eval: the affine map with the running statistics.
    bn.eval();
    const Tensor ye = bn.forward(c.x);
    const std::vector<double> yev = ye.contiguous().to_vector_double();
    worst = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t k = (i / static_cast<size_t>(inner)) % static_cast<size_t>(ch);
      worst = std::max(worst, std::fabs(yev[i] - ((xv[i] - rm[k]) / std::sqrt(rv[k] + c.eps) * w[k] + b[k])));
    }
    CHECK(worst < 1e-5);
  }
  bn1.train();
  CHECK_THROWS_WITH(bn1.forward(zeros({2, 4, 3, 3})), Catch::Contains("BatchNorm1d") &&
                                                          Catch::Contains("[N, C] or [N, C, L]") &&
                                                          Catch::Contains("[2, 4, 3, 3]"));
  CHECK_THROWS_WITH(bn1.forward(zeros({2, 5})), Catch::Contains("BatchNorm1d") && Catch::Contains("5 channels"));
  CHECK_THROWS_WITH(bn3.forward(zeros({2, 2, 3, 3})),
                    Catch::Contains("BatchNorm3d") && Catch::Contains("[N, C, D, H, W]"));
  CHECK_THROWS_WITH(BatchNorm1d(0), Catch::Contains("BatchNorm1d") && Catch::Contains("num_features"));
  CHECK_THROWS_WITH(BatchNorm3d(2, 1e-5, 1.5), Catch::Contains("BatchNorm3d") && Catch::Contains("momentum"));
  // A one-row batch has no variance to estimate: refused, as in PyTorch.
  CHECK_THROWS_AS(bn1.forward(zeros({1, 4})), ShapeError);
}

TEST_CASE("Sequential runs a BatchNorm1d and the ReLU after it as one batch_norm, with the modules' bits", "[nn]") {
  manual_seed(22);
  const auto lin = std::make_shared<Linear>(5, 6);
  const auto bn = std::make_shared<BatchNorm1d>(6);
  const auto act = std::make_shared<ReLU>();
  Sequential seq{lin, bn, act};
  const Tensor x = randn({7, 5}), dy = randn({7, 6});
  const Tensor y = seq.forward(x);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "batch_norm");
  const Tensor y_ops = act->forward(bn->forward(lin->forward(x)));
  CHECK(bitwise_equal(y, y_ops));
  const TensorList params{lin->weight, bn->weight, bn->bias};
  const TensorList g = grad({y}, params, {dy}), g_ops = grad({y_ops}, params, {dy});
  for (size_t i = 0; i < params.size(); ++i) CHECK(bitwise_equal(g[i], g_ops[i]));
}

TEST_CASE("MaxPool1d, AvgPool1d and AdaptiveAvgPool1d pool along the length", "[nn]") {
  const Tensor x = arange(0, 12, 1, TensorOptions(DType::Float32)).reshape({1, 2, 6});  // rows 0..5, 6..11
  MaxPool1d maxp(3, 2, 1);
  CHECK(maxp.str() == "MaxPool1d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)");
  // Windows over [pad, 0, 1], [1, 2, 3], [3, 4, 5]: their maxima.
  CHECK(maxp.forward(x).to_vector_double() == std::vector<double>{1, 3, 5, 7, 9, 11});
  AvgPool1d avg(2);
  CHECK(avg.str() == "AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))");
  CHECK(avg.forward(x).to_vector_double() == std::vector<double>{0.5, 2.5, 4.5, 6.5, 8.5, 10.5});
  AvgPool1d excl(3, 2, 1, false, false);  // padding not counted: [0, 1] / 2 at the edge
  CHECK(excl.forward(x.select(0, 0)).to_vector_double() == std::vector<double>{0.5, 2, 4, 6.5, 8, 10});
  AdaptiveAvgPool1d ada(4);
  CHECK(ada.str() == "AdaptiveAvgPool1d(output_size=4)");
  // Windows [0, 2), [1, 3), [3, 5), [4, 6) of 6: the adaptive split.
  CHECK(ada.forward(x).sizes() == Shape{1, 2, 4});
  CHECK(ada.forward(x).select(1, 0).to_vector_double() == std::vector<double>{0.5, 1.5, 3.5, 4.5});
  // The output is a dense [N, C, L'] tensor, as the input was.
  CHECK(maxp.forward(x).is_contiguous());
  CHECK(avg.forward(x).is_contiguous());
  CHECK_THROWS_WITH(MaxPool1d(0), Catch::Contains("MaxPool1d") && Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(AvgPool1d(2, 1, 2), Catch::Contains("AvgPool1d") && Catch::Contains("padding 2"));
  CHECK_THROWS_WITH(AdaptiveAvgPool1d(-1), Catch::Contains("AdaptiveAvgPool1d") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(maxp.forward(zeros({2, 3, 4, 5})),
                    Catch::Contains("max_pool1d") && Catch::Contains("[2, 3, 4, 5]"));
}

TEST_CASE("AdaptiveMaxPool1d/2d and LPPool1d/2d: adaptive windows, power sums, printed forms", "[nn]") {
  const Tensor x = arange(0, 12, 1, TensorOptions(DType::Float32)).reshape({1, 2, 6});  // rows 0..5, 6..11
  AdaptiveMaxPool1d ada(4);
  CHECK(ada.str() == "AdaptiveMaxPool1d(output_size=4)");
  // Windows [0, 2), [1, 3), [3, 5), [4, 6) of 6: their maxima.
  CHECK(ada.forward(x).select(1, 1).to_vector_double() == std::vector<double>{7, 8, 10, 11});
  // Windows [0, 2), [1, 4), [3, 6), [5, 7) of 7 (the short ones gathered with their last index
  // repeated): each winner's gradient is 1, however its window was gathered.
  Tensor leaf = arange(0, 7, 1, TensorOptions(DType::Float32)).reshape({1, 1, 7}).set_requires_grad(true);
  AdaptiveMaxPool1d(4).forward(leaf).sum().backward();
  CHECK(leaf.grad().to_vector_double() == std::vector<double>{0, 1, 0, 1, 0, 1, 1});
  LPPool1d lp(2.0, 3);
  CHECK(lp.str() == "LPPool1d(norm_type=2.0, kernel_size=3, stride=None, ceil_mode=False)");
  // sqrt(0 + 1 + 4), sqrt(9 + 16 + 25).
  const std::vector<double> lp_row = lp.forward(x).select(1, 0).to_vector_double();
  REQUIRE(lp_row.size() == 2);
  CHECK(lp_row[0] == Approx(std::sqrt(5.0)));
  CHECK(lp_row[1] == Approx(std::sqrt(50.0)));
  // norm_type 1 is the window's sum.
  CHECK(LPPool1d(1.0, 2, 1).forward(x).select(1, 0).to_vector_double() == std::vector<double>{1, 3, 5, 7, 9});

  const Tensor img = arange(0, 20, 1, TensorOptions(DType::Float32)).reshape({1, 1, 4, 5});
  AdaptiveMaxPool2d amp(Pair{2, 2});
  CHECK(amp.str() == "AdaptiveMaxPool2d(output_size=2)");
  // Rows [0, 2), [2, 4); columns [0, 3), [2, 5): the bottom-right corner of each window.
  CHECK(amp.forward(img).to_vector_double() == std::vector<double>{7, 9, 17, 19});
  CHECK(AdaptiveMaxPool2d(Pair{1, 3}).extra_repr() == "output_size=(1, 3)");
  LPPool2d lp2(2.0, Pair{2, 2}, Pair{2, 3});
  CHECK(lp2.str() == "LPPool2d(norm_type=2.0, kernel_size=2, stride=(2, 3), ceil_mode=False)");
  const std::vector<double> lp2_out = lp2.forward(img).to_vector_double();
  REQUIRE(lp2_out.size() == 4);
  CHECK(lp2_out[0] == Approx(std::sqrt(0.0 + 1 + 25 + 36)));
  CHECK(lp2_out[3] == Approx(std::sqrt(13.0 * 13 + 14 * 14 + 18 * 18 + 19 * 19)));
  CHECK_THROWS_WITH(AdaptiveMaxPool1d(0), Catch::Contains("AdaptiveMaxPool1d") && Catch::Contains("0"));
  CHECK_THROWS_WITH(AdaptiveMaxPool2d(Pair{2, -1}), Catch::Contains("AdaptiveMaxPool2d") && Catch::Contains("(2, -1)"));
  CHECK_THROWS_WITH(LPPool1d(0.0, 2), Catch::Contains("LPPool1d") && Catch::Contains("norm_type"));
  CHECK_THROWS_WITH(LPPool2d(2.0, Pair{2, 2}, Pair{0, 2}), Catch::Contains("LPPool2d") && Catch::Contains("stride"));
  CHECK_THROWS_WITH(lp2.forward(zeros({4, 5})), Catch::Contains("lp_pool2d") && Catch::Contains("[4, 5]"));
}

namespace {
double max_abs(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b)), {}).item<double>(); }
}  // namespace

TEST_CASE("Conv3d and ConvTranspose3d: shapes, PyTorch's init fan-in, printed forms, output_size", "[nn]") {
  manual_seed(31);
  Conv3d conv(2, 4, {3, 3, 3}, {1, 2, 2}, {1, 1, 1});
  CHECK(conv.str() == "Conv3d(2, 4, kernel_size=(3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1))");
  CHECK(conv.weight.sizes() == Shape{4, 2, 3, 3, 3});
  CHECK(conv.bias.sizes() == Shape{4});
  const double bound = 1.0 / std::sqrt(54.0);  // fan-in 2 x 27
  CHECK(amax(abs(conv.weight), {}).item<double>() <= bound);
  CHECK(amax(abs(conv.weight), {}).item<double>() > 0.8 * bound);
  CHECK(amax(abs(conv.bias), {}).item<double>() <= bound);
  const Tensor x = randn({2, 2, 5, 6, 7});
  const Tensor y = conv.forward(x);
  CHECK(y.sizes() == Shape{2, 4, 5, 3, 4});
  CHECK(max_abs(y, conv3d(x, conv.weight, conv.bias, {1, 2, 2}, {1, 1, 1})) == 0.0);
  CHECK(max_abs(conv.forward(x.select(0, 1)), y.select(0, 1)) == 0.0);  // [C, D, H, W] is one volume
  Conv3d grouped(4, 6, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 2, 2}, 2, false);
  CHECK(grouped.extra_repr() ==
        "4, 6, kernel_size=(1, 3, 3), stride=(1, 1, 1), padding=(0, 1, 1), dilation=(1, 2, 2), groups=2, bias=False");
  CHECK(grouped.weight.sizes() == Shape{6, 2, 1, 3, 3});
  CHECK_THROWS_WITH(Conv3d(2, 4, {3, 0, 3}), Catch::Contains("Conv3d: kernel_size") && Catch::Contains("(3, 0, 3)"));
  CHECK_THROWS_WITH(Conv3d(3, 6, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 2),
                    Catch::Contains("Conv3d") && Catch::Contains("divisible by groups"));
  CHECK_THROWS_WITH(conv.forward(randn({2, 3, 5, 6, 7})),
                    Catch::Contains("conv3d") && Catch::Contains("input has 3 channels"));

  // A video U-Net's upsampling layer: kernel 4, stride 2, padding 1 doubles each size.
  ConvTranspose3d up(4, 2, {4, 4, 4}, {2, 2, 2}, {1, 1, 1});
  CHECK(up.str() == "ConvTranspose3d(4, 2, kernel_size=(4, 4, 4), stride=(2, 2, 2), padding=(1, 1, 1))");
  CHECK(up.weight.sizes() == Shape{4, 2, 4, 4, 4});
  // The fan-in of [in, out / groups, kD, kH, kW] reads dimension 1: 2 x 64 = 128, not 4 x 64.
  CHECK(amax(abs(up.weight), {}).item<double>() <= 1.0 / std::sqrt(128.0));
  CHECK(amax(abs(up.weight), {}).item<double>() > 1.0 / std::sqrt(256.0));
  const Tensor z = randn({1, 4, 3, 4, 5});
  CHECK(up.forward(z).sizes() == Shape{1, 2, 6, 8, 10});
  CHECK(max_abs(up.forward(z), conv_transpose3d(z, up.weight, up.bias, {2, 2, 2}, {1, 1, 1})) == 0.0);
  // output_size: a stride-2 conv3d maps 6 and 7 to 3, so 7 is reachable by output_padding 1.
  CHECK(max_abs(up.forward(z, {7, 8, 11}), conv_transpose3d(z, up.weight, up.bias, {2, 2, 2}, {1, 1, 1}, {1, 0, 1})) ==
        0.0);
  CHECK(up.forward(z, {1, 2, 6, 9, 10}).sizes() == Shape{1, 2, 6, 9, 10});
  CHECK_THROWS_WITH(up.forward(z, {8, 8, 10}), Catch::Contains("ConvTranspose3d") && Catch::Contains("6 to 7"));
  CHECK_THROWS_WITH(ConvTranspose3d(4, 4, {3, 3, 3}, {2, 2, 2}, {0, 0, 0}, {0, 2, 0}),
                    Catch::Contains("ConvTranspose3d") && Catch::Contains("output_padding (0, 2, 0)"));
}

TEST_CASE("MaxPool3d, MaxUnpool3d, AvgPool3d, adaptive pools and LPPool3d: values and printed forms", "[nn]") {
  // x[d][h][w] = 16 d + 4 h + w over a 2x4x4 volume, two channels (the second + 32).
  const Tensor x = arange(0, 64, 1, TensorOptions(DType::Float32)).reshape({1, 2, 2, 4, 4});
  MaxPool3d maxp(2);
  CHECK(maxp.str() == "MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  // Each 2x2x2 window's maximum is its far corner: 16 + 4 (2i + 1) + 2j + 1.
  CHECK(maxp.forward(x).select(1, 0).to_vector_double() == std::vector<double>{21, 23, 29, 31});
  auto [values, indices] = maxp.forward_with_indices(x);
  CHECK(indices.select(1, 1).to_vector<int64_t>() == std::vector<int64_t>{21, 23, 29, 31});
  MaxUnpool3d unpool(2);
  CHECK(unpool.str() == "MaxUnpool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))");
  const Tensor back = unpool(values, indices);
  CHECK(back.sizes() == x.sizes());
  CHECK(sum(back).item<double>() == sum(values).item<double>());
  CHECK(unpool(values, indices, {1, 2, 2, 4, 5}).sizes() == Shape{1, 2, 2, 4, 5});
  CHECK(MaxPool3d({1, 3, 3}, {1, 2, 2}, {0, 1, 1}).extra_repr() ==
        "kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), dilation=1, ceil_mode=False");

  AvgPool3d avg(2);
  CHECK(avg.str() == "AvgPool3d(kernel_size=2, stride=2, padding=0)");
  // The mean of a window is its centre: 8 + 4 (2i + 0.5) + 2j + 0.5.
  CHECK(avg.forward(x).select(1, 0).to_vector_double() == std::vector<double>{10.5, 12.5, 18.5, 20.5});
  // Without the padding's cells, a 3x3x3 window at the corner averages its 2x2x2 inside cells.
  AvgPool3d excl({3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false, false);
  CHECK(excl.forward(x).select(1, 0).flatten().select(0, 0).item<double>() == 10.5);
  AvgPool3d incl({3, 3, 3}, {2, 2, 2}, {1, 1, 1});
  CHECK(incl.forward(x).select(1, 0).flatten().select(0, 0).item<double>() == Approx(10.5 * 8 / 27));
  // divisor_override: the window's sum over its cells inside, divided by the override (1: sums).
  AvgPool3d sums({3, 3, 3}, {2, 2, 2}, {1, 1, 1}, false, true, 1);
  CHECK(sums.forward(x).select(1, 0).flatten().select(0, 0).item<double>() == Approx(10.5 * 8));
  AvgPool2d sums2d({2, 2}, {0, 0}, {0, 0}, false, true, 2);  // of the first plane, rows 0..3 of 4
  CHECK(sums2d.forward(x.select(2, 0)).select(1, 0).to_vector_double() ==
        std::vector<double>{(0 + 1 + 4 + 5) / 2.0, (2 + 3 + 6 + 7) / 2.0, (8 + 9 + 12 + 13) / 2.0,
                            (10 + 11 + 14 + 15) / 2.0});
  CHECK_THROWS_WITH(AvgPool3d({2, 2, 2}, {0, 0, 0}, {0, 0, 0}, false, true, 0),
                    Catch::Contains("AvgPool3d") && Catch::Contains("divisor_override"));

  AdaptiveAvgPool3d gap(1);
  CHECK(gap.str() == "AdaptiveAvgPool3d(output_size=1)");
  CHECK(gap.forward(x).to_vector_double() == std::vector<double>{15.5, 47.5});
  AdaptiveMaxPool3d amp(Triple{1, 2, 1});
  CHECK(amp.str() == "AdaptiveMaxPool3d(output_size=(1, 2, 1))");
  CHECK(amp.forward(x).select(1, 0).to_vector_double() == std::vector<double>{23, 31});

  LPPool3d lp(2.0, {2, 2, 2});
  CHECK(lp.str() == "LPPool3d(norm_type=2.0, kernel_size=2, stride=None, ceil_mode=False)");
  double squares = 0;
  for (const double v : {0, 1, 4, 5, 16, 17, 20, 21}) squares += v * v;
  CHECK(lp.forward(x).select(1, 0).flatten().select(0, 0).item<double>() == Approx(std::sqrt(squares)));

  CHECK_THROWS_WITH(MaxPool3d({2, 2, 2}, {0, 0, 0}, {0, 2, 0}),
                    Catch::Contains("MaxPool3d") && Catch::Contains("padding (0, 2, 0)"));
  CHECK_THROWS_WITH(AvgPool3d(0), Catch::Contains("AvgPool3d") && Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(AdaptiveAvgPool3d(Triple{1, 0, 1}), Catch::Contains("AdaptiveAvgPool3d"));
  CHECK_THROWS_WITH(LPPool3d(0.0, {2, 2, 2}), Catch::Contains("LPPool3d") && Catch::Contains("norm_type"));
  CHECK_THROWS_WITH(unpool(values, indices, {5, 5}), Catch::Contains("MaxUnpool3d") && Catch::Contains("[5, 5]"));
  CHECK_THROWS_WITH(maxp.forward(zeros({4, 4})), Catch::Contains("max_pool3d") && Catch::Contains("[4, 4]"));
}

TEST_CASE("a small 3-d CNN learns where a bright cube sits in a volume", "[nn]") {
  // Class 0: a bright 2x2x2 cube in the front half of the depth; class 1: in the back half. Noise
  // elsewhere. Conv3d -> ReLU -> MaxPool3d -> Conv3d -> AdaptiveAvgPool3d -> Flatten -> Linear.
  manual_seed(41);
  const int64_t n = 32;
  Tensor volumes = mul(randn({n, 1, 8, 6, 6}), 0.3);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = i % 2, d = label == 0 ? 1 : 5, h = (i / 2) % 4, w = (i / 8) % 4;
    labels.push_back(label);
    volumes.select(0, i).narrow(1, d, 2).narrow(2, h, 2).narrow(3, w, 2).fill_(2.0);
  }
  const Tensor targets = tensor(labels);
  Sequential model{std::make_shared<Conv3d>(1, 4, Triple{3, 3, 3}, Triple{1, 1, 1}, Triple{1, 1, 1}),
                   std::make_shared<ReLU>(),
                   std::make_shared<MaxPool3d>(2),
                   std::make_shared<Conv3d>(4, 4, Triple{3, 3, 3}, Triple{1, 1, 1}, Triple{1, 1, 1}),
                   std::make_shared<ReLU>(),
                   std::make_shared<AdaptiveAvgPool3d>(Triple{2, 1, 1}),
                   std::make_shared<Flatten>(),
                   std::make_shared<Linear>(8, 2)};
  optim::Adam opt(model.parameters(), 0.02);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(model.forward(volumes), targets);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.1 * first);
  const Tensor predicted = argmax(model.forward(volumes), 1);
  CHECK(eq(predicted, targets).sum().item<int64_t>() == n);
}

TEST_CASE("FractionalMaxPool2d/3d and the adaptive max pools' forward_with_indices", "[nn]") {
  FractionalMaxPool2d fixed(Pair{2, 2}, Pair{4, 3});
  CHECK(fixed.str() == "FractionalMaxPool2d(kernel_size=2, output_size=(4, 3))");
  FractionalMaxPool2d ratio(Pair{3, 2}, 0.5, 0.75);
  CHECK(ratio.str() == "FractionalMaxPool2d(kernel_size=(3, 2), output_ratio=(0.5, 0.75))");
  manual_seed(17);
  const Tensor x = randn({2, 3, 9, 8});
  // output_ratio: trunc(9 * 0.5) x trunc(8 * 0.75).
  CHECK(ratio.forward(x).sizes() == Shape{2, 3, 4, 6});
  CHECK(ratio.output_size_for(x) == Pair{4, 6});
  // Fixed samples give the functional op's windows; a seeded generator repeats its draws.
  fixed.random_samples = rand({2, 3, 2});
  auto [v, i] = fixed.forward_with_indices(x);
  auto [fv, fi] = fractional_max_pool2d_with_indices(x, {2, 2}, {4, 3}, fixed.random_samples);
  CHECK(v.to_vector<float>() == fv.to_vector<float>());
  CHECK(i.to_vector<int64_t>() == fi.to_vector<int64_t>());
  FractionalMaxPool2d drawn(Pair{2, 2}, Pair{4, 3});
  drawn.generator = Generator(9);
  const std::vector<int64_t> first = drawn.forward_with_indices(x).second.to_vector<int64_t>();
  drawn.generator = Generator(9);
  CHECK(drawn.forward_with_indices(x).second.to_vector<int64_t>() == first);
  drawn.eval();  // random in eval mode too, as PyTorch's
  CHECK(drawn.forward(x).sizes() == Shape{2, 3, 4, 3});
  CHECK_THROWS_WITH(FractionalMaxPool2d(Pair{2, 0}, Pair{4, 3}),
                    Catch::Contains("FractionalMaxPool2d: kernel_size") && Catch::Contains("(2, 0)"));
  CHECK_THROWS_WITH(FractionalMaxPool2d(Pair{2, 2}, 0.5, 1.0),
                    Catch::Contains("FractionalMaxPool2d: output_ratio must be in (0, 1), got 1.0"));
  // More rows of samples than the batch: the first are read, as PyTorch's; fewer are an Error.
  const Tensor one = randn({1, 3, 9, 8});
  CHECK(fixed.forward(one).to_vector<float>() ==
        fractional_max_pool2d(one, {2, 2}, {4, 3}, fixed.random_samples.narrow(0, 0, 1)).to_vector<float>());
  CHECK_THROWS_WITH(fixed.forward(randn({3, 3, 9, 8})),
                    Catch::Contains("fractional_max_pool2d: random_samples must be [N, 3, 2] with N >= 3") &&
                        Catch::Contains("got [2, 3, 2]"));

  FractionalMaxPool3d cube(Triple{2, 2, 2}, 0.5, 0.5, 0.5);
  CHECK(cube.str() == "FractionalMaxPool3d(kernel_size=2, output_ratio=(0.5, 0.5, 0.5))");
  const Tensor vol = randn({1, 2, 6, 7, 8});
  CHECK(cube.forward(vol).sizes() == Shape{1, 2, 3, 3, 4});
  FractionalMaxPool3d sized(Triple{1, 2, 3}, Triple{4, 4, 4});
  CHECK(sized.extra_repr() == "kernel_size=(1, 2, 3), output_size=4");
  sized.random_samples = rand({1, 2, 3});
  CHECK(sized.forward(vol).to_vector<float>() ==
        fractional_max_pool3d(vol, {1, 2, 3}, {4, 4, 4}, sized.random_samples).to_vector<float>());
  CHECK_THROWS_WITH(FractionalMaxPool3d(Triple{2, 2, 2}, 0.5, 0.0, 0.5),
                    Catch::Contains("FractionalMaxPool3d: output_ratio must be in (0, 1), got 0.0"));

  // The adaptive max pools' indices: where each maximum came from in its plane.
  const Tensor img = arange(0, 20, 1, TensorOptions(DType::Float32)).reshape({1, 1, 4, 5});
  CHECK(AdaptiveMaxPool2d(Pair{2, 2}).forward_with_indices(img).second.to_vector<int64_t>() ==
        std::vector<int64_t>{7, 9, 17, 19});
  const Tensor line = arange(0, 7, 1, TensorOptions(DType::Float32)).reshape({1, 1, 7});
  CHECK(AdaptiveMaxPool1d(4).forward_with_indices(line).second.to_vector<int64_t>() ==
        std::vector<int64_t>{1, 3, 5, 6});
  const Tensor box = arange(0, 24, 1, TensorOptions(DType::Float32)).reshape({1, 1, 2, 3, 4});
  CHECK(AdaptiveMaxPool3d(Triple{1, 1, 2}).forward_with_indices(box).second.to_vector<int64_t>() ==
        std::vector<int64_t>{21, 23});
}
