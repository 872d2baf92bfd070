// Upsample, the padding layers, the pixel and channel shuffles, Unflatten, Softmax, LogSoftmax and
// the composed activations: each equals its functional op, prints as PyTorch prints it, and
// refuses bad options at construction; an upsampling decoder trains; Unfold turns a convolution
// into a matrix product and Fold sums the windows back.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/spatial.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

TEST_CASE("Upsample and the padding layers call interpolate and pad, printed as PyTorch's", "[nn]") {
  manual_seed(31);
  const Tensor x = randn({2, 3, 4, 5});
  Upsample twice(2.0);
  CHECK(twice.str() == "Upsample(scale_factor=2.0, mode='nearest')");
  CHECK(bitwise_equal(twice(x), interpolate_scale(x, {2.0})));
  CHECK(twice(x).sizes() == Shape{2, 3, 8, 10});
  Upsample to(Shape{7, 3}, InterpolateMode::Linear, true);
  CHECK(to.str() == "Upsample(size=(7, 3), mode='bilinear')");
  CHECK(Upsample(Shape{7}, InterpolateMode::Linear).str() == "Upsample(size=7, mode='linear')");
  CHECK(Upsample(2.0, InterpolateMode::Bicubic, true).str() == "Upsample(scale_factor=2.0, mode='bicubic')");
  CHECK(Upsample(Shape{2, 2}, InterpolateMode::Area).str() == "Upsample(size=(2, 2), mode='area')");
  CHECK(bitwise_equal(to(x), interpolate(x, {7, 3}, InterpolateMode::Linear, true)));
  // Nearest by 2 repeats each pixel into a 2x2 block.
  const Tensor small = tensor(std::vector<double>{1, 2, 3, 4}).reshape({1, 1, 2, 2});
  CHECK(twice(small).to_vector_double() == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Linear without align_corners: PyTorch's values for [1, 2] upsampled to 4: 1, 1.25, 1.75, 2.
  CHECK(interpolate(tensor(std::vector<double>{1, 2}).reshape({1, 1, 2}), {4}, InterpolateMode::Linear)
            .to_vector_double() == std::vector<double>{1, 1.25, 1.75, 2});
  CHECK(interpolate(tensor(std::vector<double>{1, 2}).reshape({1, 1, 2}), {4}, InterpolateMode::Linear, true)
            .to_vector_double()[1] == Approx(4.0 / 3.0).epsilon(1e-15));
  // Bicubic of [[1, 2], [3, 4]] to 4x4 overshoots at the corners: the values PyTorch's kernel
  // (a = -0.75, edge taps read at the edge) gives, worked out by hand (the image is 1 + x + 2y, so
  // each value is 1 + c(x) + 2 c(y) with c the 1-d interpolation of [0, 1]: -27/256, 58/256, ...).
  const std::vector<double> c = {-27.0 / 256, 58.0 / 256, 198.0 / 256, 283.0 / 256};
  std::vector<double> want;
  for (double cy : c)
    for (double cx : c) want.push_back(1 + cx + 2 * cy);
  CHECK(interpolate(small, {4, 4}, InterpolateMode::Bicubic).to_vector_double() == want);
  CHECK(want[0] == 0.68359375);  // below the input's minimum, as PyTorch's 0.6836
  // Area: the mean of each output's window, [floor(o in / out), ceil((o + 1) in / out)).
  const Tensor six = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}).reshape({1, 1, 6});
  CHECK(interpolate(six, {3}, InterpolateMode::Area).to_vector_double() == std::vector<double>{1.5, 3.5, 5.5});
  CHECK(interpolate(six, {4}, InterpolateMode::Area).to_vector_double() == std::vector<double>{1.5, 2.5, 4.5, 5.5});
  // An inf outside a window stays out of its mean.
  const Tensor spike = tensor(std::vector<double>{1, 3, INFINITY, 2, 4, 6}).reshape({1, 1, 6});
  CHECK(interpolate(spike, {4}, InterpolateMode::Area).to_vector_double()[0] == 2.0);
  CHECK(interpolate(spike, {4}, InterpolateMode::Area).to_vector_double()[3] == 5.0);

  ZeroPad2d zero(1);
  CHECK(zero.str() == "ZeroPad2d((1, 1, 1, 1))");
  CHECK(bitwise_equal(zero(x), pad(x, {1, 1, 1, 1})));
  ReflectionPad2d reflect(Shape{2, 1, 0, 3});
  CHECK(reflect.str() == "ReflectionPad2d((2, 1, 0, 3))");
  CHECK(bitwise_equal(reflect(x), pad(x, {2, 1, 0, 3}, PadMode::Reflect)));
  ReplicationPad1d replicate(2);
  CHECK(bitwise_equal(replicate(x.select(0, 0)), pad(x.select(0, 0), {2, 2}, PadMode::Replicate)));
  CircularPad1d circular(Shape{1, 3});
  CHECK(bitwise_equal(circular(x.select(0, 0)), pad(x.select(0, 0), {1, 3}, PadMode::Circular)));
  ConstantPad2d constant(Shape{1, 0, 0, 2}, 3.5);
  CHECK(constant.str() == "ConstantPad2d(padding=(1, 0, 0, 2), value=3.5)");
  CHECK(bitwise_equal(constant(x), pad(x, {1, 0, 0, 2}, PadMode::Constant, 3.5)));

  Softmax sm(1);
  CHECK(sm.str() == "Softmax(dim=1)");
  CHECK(bitwise_equal(sm(x), softmax(x, 1)));
  CHECK(bitwise_equal(LogSoftmax(-1)(x), log_softmax(x, -1)));

  CHECK_THROWS_WITH(Upsample(0.0), Catch::Contains("Upsample") && Catch::Contains("scale_factor"));
  CHECK_THROWS_WITH(Upsample(2.0, InterpolateMode::Area, true),
                    Catch::Contains("Upsample") && Catch::Contains("align_corners") && Catch::Contains("'area'"));
  CHECK_THROWS_WITH(Upsample(Shape{4, 0}), Catch::Contains("Upsample") && Catch::Contains("[4, 0]"));
  CHECK_THROWS_WITH(ZeroPad2d(Shape{1, 1}), Catch::Contains("ZeroPad2d") && Catch::Contains("4 values"));
  CHECK_THROWS_WITH(ReflectionPad1d(-1), Catch::Contains("ReflectionPad1d") && Catch::Contains(">= 0"));
  CHECK_THROWS_WITH(zero(randn({5})), Catch::Contains("ZeroPad2d") && Catch::Contains("[5]"));
  CHECK_THROWS_WITH(twice(randn({3, 4})), Catch::Contains("interpolate") && Catch::Contains("[3, 4]"));
}

TEST_CASE("a decoder of Upsample and Conv2d learns to double an image's resolution", "[nn]") {
  manual_seed(32);
  // Targets: smooth images (bilinear upsamplings of 4x4 noise); inputs: their 4x4 originals.
  const Tensor low = randn({16, 1, 4, 4});
  const Tensor high = interpolate(low, {8, 8}, InterpolateMode::Linear);
  auto model = std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<UnaryModule>>{
      std::make_shared<Upsample>(2.0), std::make_shared<ReflectionPad2d>(1),
      std::make_shared<Conv2d>(1, 1, Pair{3, 3})});
  optim::Adam opt(model->parameters(), 0.05);
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss((*model)(low), high);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.2 * first);
}

TEST_CASE("the composed activation modules call their ops, printed as PyTorch's", "[nn]") {
  manual_seed(33);
  const Tensor x = randn({3, 4, 5}) * 3.0;
  ELU elu_m(0.5);
  CHECK(elu_m.str() == "ELU(alpha=0.5)");
  CHECK(bitwise_equal(elu_m(x), elu(x, 0.5)));
  Hardtanh ht(-2.0, 2.0);
  CHECK(ht.str() == "Hardtanh(min_val=-2.0, max_val=2.0)");
  CHECK(bitwise_equal(ht(x), hardtanh(x, -2.0, 2.0)));
  CHECK(ReLU6().str() == "ReLU6()");
  CHECK(bitwise_equal(ReLU6()(x), relu6(x)));
  CHECK(bitwise_equal(SELU()(x), selu(x)));
  CHECK(bitwise_equal(Hardsigmoid()(x), hardsigmoid(x)));
  CHECK(bitwise_equal(Hardswish()(x), hardswish(x)));
  CHECK(Mish().str() == "Mish()");
  CHECK(bitwise_equal(Mish()(x), mish(x)));
  PReLU pr(4);
  CHECK(pr.str() == "PReLU(num_parameters=4)");
  CHECK(pr.weight.to_vector_double() == std::vector<double>{0.25, 0.25, 0.25, 0.25});
  CHECK(bitwise_equal(pr(x), prelu(x, pr.weight)));
  // The negative slope learns: its gradient is the sum of x over the negative side, per channel.
  pr(x).sum().backward();
  const Tensor negative_sums = sum(where(gt(x, 0.0), 0.0, x), {0, 2});
  CHECK(max(abs(pr.weight.grad() - negative_sums)).item<double>() < 1e-5);
  // ELU's gradient stays finite where exp would overflow on the positive side.
  Tensor big = tensor(std::vector<double>{1000.0, -1000.0, 0.0}).set_requires_grad(true);
  elu(big, 1.0).sum().backward();
  CHECK(big.grad().to_vector_double() == std::vector<double>{1.0, 0.0, 1.0});
  CHECK_THROWS_WITH(Hardtanh(1.0, -1.0), Catch::Contains("Hardtanh") && Catch::Contains("min_val"));
  CHECK_THROWS_WITH(PReLU(0), Catch::Contains("PReLU") && Catch::Contains("num_parameters"));
}

TEST_CASE("CELU, the shrinks, Threshold, GLU, Softmin and the option-free ones call their ops", "[nn]") {
  manual_seed(34);
  const Tensor x = randn({3, 4, 6}) * 2.0;
  CELU celu_m(0.5);
  CHECK(celu_m.str() == "CELU(alpha=0.5)");
  CHECK(bitwise_equal(celu_m(x), celu(x, 0.5)));
  CHECK(Softshrink().str() == "Softshrink(0.5)");
  CHECK(bitwise_equal(Softshrink(0.25)(x), softshrink(x, 0.25)));
  CHECK(Hardshrink(1.0).str() == "Hardshrink(1.0)");
  CHECK(bitwise_equal(Hardshrink(1.0)(x), hardshrink(x, 1.0)));
  Threshold th(0.1, 20.0);
  CHECK(th.str() == "Threshold(threshold=0.1, value=20.0)");
  CHECK(bitwise_equal(th(x), threshold(x, 0.1, 20.0)));
  CHECK(GLU().str() == "GLU(dim=-1)");
  CHECK(GLU()(x).sizes() == Shape{3, 4, 3});
  CHECK(bitwise_equal(GLU(1)(x), glu(x, 1)));
  CHECK(Softmin(1).str() == "Softmin(dim=1)");
  CHECK(bitwise_equal(Softmin(1)(x), softmin(x, 1)));
  CHECK(LogSigmoid().str() == "LogSigmoid()");
  CHECK(bitwise_equal(LogSigmoid()(x), logsigmoid(x)));
  CHECK(bitwise_equal(Softsign()(x), softsign(x)));
  CHECK(bitwise_equal(Tanhshrink()(x), tanhshrink(x)));
  // logsigmoid holds its tails: no overflow to -inf at -1000, no rounding to 0 of a tiny value.
  Tensor tails = tensor(std::vector<double>{-1000.0, 1000.0, 40.0}).set_requires_grad(true);
  const Tensor ls = logsigmoid(tails);
  CHECK(ls.to_vector_double()[0] == -1000.0);
  CHECK(ls.to_vector_double()[1] == 0.0);
  CHECK(ls.to_vector_double()[2] == Approx(-std::exp(-40.0)).epsilon(1e-12));
  ls.sum().backward();
  CHECK(tails.grad().to_vector_double()[0] == 1.0);
  CHECK(tails.grad().to_vector_double()[1] == 0.0);
  CHECK_THROWS_WITH(CELU(0.0), Catch::Contains("CELU") && Catch::Contains("alpha"));
  CHECK_THROWS_WITH(Softshrink(-1.0), Catch::Contains("Softshrink") && Catch::Contains("lambd"));
  CHECK_THROWS_WITH(GLU()(randn({2, 3})), Catch::Contains("glu") && Catch::Contains("odd size 3"));
}

TEST_CASE("PixelShuffle, PixelUnshuffle, ChannelShuffle and Unflatten call their ops, printed as PyTorch's", "[nn]") {
  manual_seed(35);
  const Tensor x = randn({2, 8, 3, 4});
  PixelShuffle up(2);
  CHECK(up.str() == "PixelShuffle(upscale_factor=2)");
  const Tensor y = up(x);
  CHECK(y.sizes() == Shape{2, 2, 6, 8});
  CHECK(bitwise_equal(y, pixel_shuffle(x, 2)));
  // Unshuffle undoes it exactly.
  PixelUnshuffle down(2);
  CHECK(down.str() == "PixelUnshuffle(downscale_factor=2)");
  CHECK(bitwise_equal(down(y), x));
  ChannelShuffle cs(4);
  CHECK(cs.str() == "ChannelShuffle(groups=4)");
  CHECK(bitwise_equal(cs(x), channel_shuffle(x, 4)));
  // Shuffling by g, then by C / g, puts every channel back.
  CHECK(bitwise_equal(channel_shuffle(cs(x), 2), x));
  Unflatten uf(1, {2, -1});
  CHECK(uf.str() == "Unflatten(dim=1, unflattened_size=(2, -1))");
  CHECK(uf(x).sizes() == Shape{2, 2, 4, 3, 4});
  CHECK(Unflatten(-1, {2, 2})(x).sizes() == Shape{2, 8, 3, 2, 2});
  CHECK_THROWS_WITH(Unflatten(1, {3, 3})(x), Catch::Contains("Unflatten") && Catch::Contains("[2, 8, 3, 4]"));
  CHECK_THROWS_WITH(Unflatten(1, {-1, -1}), Catch::Contains("Unflatten") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(PixelShuffle(0), Catch::Contains("PixelShuffle") && Catch::Contains("upscale_factor"));
}

TEST_CASE("Unfold and Fold: a convolution as a matrix product of the windows, and fold's sum of overlaps",
          "[nn][spatial]") {
  manual_seed(31);
  const TensorOptions f64(DType::Float64);
  const Tensor x = randn({2, 3, 6, 7}, f64), weight = randn({4, 3, 3, 2}, f64);
  Unfold windows(Pair{3, 2}, Pair{1, 1}, Pair{1, 0}, Pair{2, 1});
  CHECK(windows.str() == "Unfold(kernel_size=(3, 2), dilation=1, padding=(1, 0), stride=(2, 1))");
  // conv2d is the weight [4, 3 * 3 * 2] times the columns [N, 3 * 3 * 2, L], reshaped to the image.
  const Tensor cols = windows(x);
  CHECK(cols.sizes() == Shape{2, 18, 3 * 6});
  const Tensor by_windows = matmul(weight.reshape({4, 18}), cols).reshape({2, 4, 3, 6});
  CHECK(max(abs(by_windows - conv2d(x, weight, Tensor(), {2, 1}, {1, 0}))).item<double>() < 1e-12);
  // Non-overlapping windows that tile the image: fold undoes unfold.
  Fold tile(Pair{6, 6}, 2, 1, 0, 2);
  CHECK(tile.str() == "Fold(output_size=6, kernel_size=2, dilation=1, padding=0, stride=2)");
  const Tensor square = x.narrow(3, 0, 6);
  CHECK(max(abs(tile(Unfold(2, 1, 0, 2)(square)) - square)).item<double>() == 0.0);
  // Overlapping windows: fold sums each element once per window that holds it, so
  // fold(unfold(x)) = x * fold(unfold(ones)).
  Unfold overlapping(3, 1, 1, 1);
  Fold back(Pair{6, 7}, 3, 1, 1, 1);
  const Tensor counts = back(overlapping(ones_like(x)));
  CHECK(counts[0][0][0][0].item<double>() == 4.0);  // a corner: 2 x 2 windows
  CHECK(counts[0][0][2][3].item<double>() == 9.0);  // inside: all 3 x 3
  CHECK(max(abs(back(overlapping(x)) - x * counts)).item<double>() < 1e-12);
  CHECK_THROWS_WITH(Unfold(0), Catch::Contains("Unfold") && Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(Fold(Pair{4, 0}, 2), Catch::Contains("Fold") && Catch::Contains("output_size"));
  CHECK_THROWS_WITH(Unfold(2, 1, -1), Catch::Contains("Unfold") && Catch::Contains("padding"));
  CHECK_THROWS_WITH(tile(randn({1, 8, 10})), Catch::Contains("fold") && Catch::Contains("windows"));
}
