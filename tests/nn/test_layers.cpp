// Layers and initializers: output shapes, each layer against its defining formula, train/eval
// differences, PyTorch's printed form, and init statistics (mean, std, bounds) on tensors large
// enough that the tolerances are many standard errors wide.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "tests/bitwise.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

struct Moments {
  double mean, std, min, max;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector_double();
  double m = 0, lo = v.at(0), hi = v.at(0);
  for (double e : v) {
    m += e;
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  m /= static_cast<double>(v.size());
  double ss = 0;
  for (double e : v) ss += (e - m) * (e - m);
  return {m, std::sqrt(ss / static_cast<double>(v.size() - 1)), lo, hi};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector_double(), y = b.to_vector_double();
  REQUIRE(x.size() == y.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = test::worse(d, std::abs(x[i] - y[i]));
  return d;
}

double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

// --- layers -------------------------------------------------------------------------------------

TEST_CASE("Linear: y = x @ W^T + b, default init bounds, printed form", "[nn]") {
  manual_seed(1);
  Linear lin(20, 7);
  CHECK(lin.weight.sizes() == Shape{7, 20});
  CHECK(lin.bias.sizes() == Shape{7});
  Tensor x = randn({5, 20});
  Tensor y = lin.forward(x);
  CHECK(y.sizes() == Shape{5, 7});
  CHECK(max_abs_diff(y, matmul(x, lin.weight.t()) + lin.bias) < 1e-5);
  // kaiming_uniform_(a = sqrt(5)) and the bias both come out as U(-1/sqrt(in), 1/sqrt(in)).
  const double bound = 1.0 / std::sqrt(20.0);
  CHECK(moments(lin.weight).max <= bound);
  CHECK(moments(lin.weight).min >= -bound);
  CHECK(moments(lin.bias).max <= bound);
  CHECK(lin.str() == "Linear(in_features=20, out_features=7, bias=True)");
  // Leading batch dims pass through.
  CHECK(lin.forward(randn({2, 3, 20})).sizes() == Shape{2, 3, 7});

  Linear no_bias(20, 7, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);
  CHECK(no_bias.extra_repr() == "in_features=20, out_features=7, bias=False");
}

TEST_CASE("Linear: a wrong input width is an error naming both shapes", "[nn]") {
  Linear lin(784, 128);
  try {
    lin.forward(zeros({64, 300}));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("linear: input has 300 features, weight expects 784") != std::string::npos);
    CHECK(std::string(e.what()).find("[64, 300]") != std::string::npos);
  }
}

TEST_CASE("Conv2d: output shape, weight shape, init bound and printed form", "[nn]") {
  manual_seed(2);
  Conv2d conv(3, 8, {3, 3}, {2, 2}, {1, 1});
  CHECK(conv.weight.sizes() == Shape{8, 3, 3, 3});
  CHECK(conv.forward(randn({2, 3, 32, 32})).sizes() == Shape{2, 8, 16, 16});
  const double bound = 1.0 / std::sqrt(27.0);
  CHECK(moments(conv.weight).max <= bound);
  CHECK(moments(conv.bias).min >= -bound);
  CHECK(conv.str() == "Conv2d(3, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))");
  // Against the functional op with the layer's own tensors.
  Tensor x = randn({1, 3, 9, 9});
  CHECK(max_abs_diff(conv.forward(x), conv2d(x, conv.weight, conv.bias, {2, 2}, {1, 1})) == 0.0);

  Conv2d grouped(4, 6, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 2, false);
  CHECK(grouped.weight.sizes() == Shape{6, 2, 1, 1});
  CHECK(grouped.extra_repr() == "4, 6, kernel_size=(1, 1), stride=(1, 1), groups=2, bias=False");
  CHECK_THROWS_AS(Conv2d(3, 6, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 2), Error);
  CHECK_THROWS_AS(conv.forward(randn({2, 4, 8, 8})), ShapeError);
}

TEST_CASE("Conv1d: output length, weight shape, init bound, printed form, unbatched input", "[nn]") {
  manual_seed(8);
  Conv1d conv(4, 6, 3, 2, 1);
  CHECK(conv.str() == "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,))");
  CHECK(conv.weight.sizes() == Shape{6, 4, 3});
  CHECK(conv.bias.sizes() == Shape{6});
  // kaiming_uniform_(a = sqrt(5)) over fan_in 12: the bound 1/sqrt(12), for the bias too.
  const double bound = 1.0 / std::sqrt(12.0);
  CHECK(moments(conv.weight).max <= bound);
  CHECK(moments(conv.bias).min >= -bound);
  const Tensor x = randn({2, 4, 9});
  const Tensor y = conv.forward(x);
  CHECK(y.sizes() == Shape{2, 6, 5});  // (9 + 2 - 3) / 2 + 1
  // Output position 1 of sample 0, channel 2: the window x[:, 1..3] (stride 2, padding 1).
  double acc = conv.bias.select(0, 2).item<double>();
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t k = 0; k < 3; ++k)
      acc += x.select(0, 0).select(0, c).select(0, 1 + k).item<double>() *
             conv.weight.select(0, 2).select(0, c).select(0, k).item<double>();
  CHECK(y.select(0, 0).select(0, 2).select(0, 1).item<double>() == Approx(acc).epsilon(1e-5));
  CHECK(max_abs_diff(conv.forward(x.select(0, 1)), y.select(0, 1)) == 0.0);  // [C, L] is one sample
  Conv1d grouped(4, 8, 5, 1, 0, 2, 2, false);
  CHECK(grouped.extra_repr() == "4, 8, kernel_size=(5,), stride=(1,), dilation=(2,), groups=2, bias=False");
  CHECK(grouped.weight.sizes() == Shape{8, 2, 5});
  CHECK_THROWS_WITH(Conv1d(4, 6, 0), Catch::Contains("Conv1d") && Catch::Contains("kernel_size"));
  CHECK_THROWS_WITH(Conv1d(3, 6, 3, 1, 0, 1, 2), Catch::Contains("divisible by groups"));
}

TEST_CASE("ConvTranspose2d: output shape, weight shape, PyTorch's init fan-in, printed form, output_size", "[nn]") {
  manual_seed(21);
  // A DCGAN generator's layer: kernel 4, stride 2, padding 1 doubles the size.
  ConvTranspose2d up(8, 3, {4, 4}, {2, 2}, {1, 1});
  CHECK(up.weight.sizes() == Shape{8, 3, 4, 4});
  CHECK(up.bias.sizes() == Shape{3});
  CHECK(up.str() == "ConvTranspose2d(8, 3, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1))");
  const Tensor x = randn({2, 8, 5, 6});
  CHECK(up.forward(x).sizes() == Shape{2, 3, 10, 12});
  // The fan-in of [in, out / groups, kH, kW] reads dimension 1: 3 x 16 = 48, not 8 x 16 = 128.
  const double bound = 1.0 / std::sqrt(48.0);
  CHECK(moments(up.weight).max <= bound);
  CHECK(moments(up.weight).max > 1.0 / std::sqrt(128.0));
  CHECK(moments(up.bias).min >= -bound);
  CHECK(max_abs_diff(up.forward(x), conv_transpose2d(x, up.weight, up.bias, {2, 2}, {1, 1})) == 0.0);

  // forward(x, output_size): a stride-2 conv2d maps 10 and 11 to 5, so 11 is reachable too, by
  // output_padding 1; the full [N, C, H, W] form reads its last two entries.
  CHECK(max_abs_diff(up.forward(x, {11, 12}), conv_transpose2d(x, up.weight, up.bias, {2, 2}, {1, 1}, {1, 0})) == 0.0);
  CHECK(up.forward(x, {2, 3, 10, 13}).sizes() == Shape{2, 3, 10, 13});
  CHECK_THROWS_WITH(up.forward(x, {12, 12}), Catch::Contains("ConvTranspose2d") && Catch::Contains("output size 12") &&
                                                 Catch::Contains("10 to 11") && Catch::Contains("[2, 8, 5, 6]"));
  CHECK_THROWS_WITH(up.forward(x, {3, 10, 12}),
                    Catch::Contains("ConvTranspose2d") && Catch::Contains("output_size [3, 10, 12]"));

  ConvTranspose2d grouped(4, 6, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 2, false, {2, 2});
  CHECK(grouped.weight.sizes() == Shape{4, 3, 3, 3});
  CHECK(grouped.extra_repr() ==
        "4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), output_padding=(1, 1), groups=2, "
        "bias=False");
  CHECK(grouped.forward(randn({1, 4, 3, 3})).sizes() == Shape{1, 6, 8, 8});  // (3 - 1) 2 - 2 + 4 + 1 + 1
  CHECK_THROWS_WITH(ConvTranspose2d(4, 4, {3, 3}, {2, 2}, {0, 0}, {2, 0}),
                    Catch::Contains("ConvTranspose2d") && Catch::Contains("output_padding (2, 0)"));
  CHECK_THROWS_WITH(ConvTranspose2d(3, 6, {3, 3}, {1, 1}, {0, 0}, {0, 0}, 2),
                    Catch::Contains("ConvTranspose2d") && Catch::Contains("divisible by groups"));
}

TEST_CASE("ConvTranspose1d: output length, weight shape, printed form, output_size, unbatched input", "[nn]") {
  manual_seed(22);
  ConvTranspose1d up(4, 6, 3, 2, 1, 1);
  CHECK(up.str() == "ConvTranspose1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), output_padding=(1,))");
  CHECK(up.weight.sizes() == Shape{4, 6, 3});
  const double bound = 1.0 / std::sqrt(18.0);  // fan-in 6 x 3
  CHECK(moments(up.weight).max <= bound);
  CHECK(moments(up.bias).min >= -bound);
  const Tensor x = randn({2, 4, 7});
  const Tensor y = up.forward(x);
  CHECK(y.sizes() == Shape{2, 6, 14});                                     // (7 - 1) 2 - 2 + 2 + 1 + 1
  CHECK(max_abs_diff(up.forward(x.select(0, 1)), y.select(0, 1)) == 0.0);  // [C, L] is one sample
  CHECK(up.forward(x, {13}).sizes() == Shape{2, 6, 13});
  CHECK(up.forward(x, {2, 6, 14}).sizes() == Shape{2, 6, 14});
  CHECK_THROWS_WITH(up.forward(x, {15}), Catch::Contains("ConvTranspose1d") && Catch::Contains("13 to 14"));
  ConvTranspose1d grouped(4, 8, 5, 1, 0, 0, 2, false, 2);
  CHECK(grouped.extra_repr() == "4, 8, kernel_size=(5,), stride=(1,), dilation=(2,), groups=2, bias=False");
  CHECK(grouped.weight.sizes() == Shape{4, 4, 5});
  CHECK_THROWS_WITH(ConvTranspose1d(4, 6, 3, 1, 0, 1),
                    Catch::Contains("ConvTranspose1d") && Catch::Contains("output_padding (1,)"));
}

TEST_CASE("BatchNorm2d with momentum none: the running statistics average every batch so far", "[nn]") {
  manual_seed(5);
  BatchNorm2d bn(2, 1e-5, std::nullopt);
  CHECK(bn.str() == "BatchNorm2d(2, eps=1e-05, momentum=None, affine=True, track_running_stats=True)");
  std::vector<double> mean_sum(2, 0.0), var_sum(2, 0.0);
  for (int k = 0; k < 3; ++k) {
    const Tensor x = (randn({4, 2, 3, 3}) * (1.0 + k) + 2.0 * k).to(DType::Float64);
    bn.forward(x.to(DType::Float32));
    const Tensor xf = x.to(DType::Float32).to(DType::Float64);
    for (int64_t c = 0; c < 2; ++c) {
      const Tensor channel = xf.select(1, c);
      mean_sum[c] += mean(channel).item<double>();
      var_sum[c] += var(channel).item<double>();  // unbiased, as the running variance
    }
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  const std::vector<double> rm = bn.running_mean.to_vector<double>(), rv = bn.running_var.to_vector<double>();
  for (size_t c = 0; c < 2; ++c) {
    CHECK(rm[c] == Approx(mean_sum[c] / 3).epsilon(1e-5));
    CHECK(rv[c] == Approx(var_sum[c] / 3).epsilon(1e-5));
  }
  // Instance norm leaves its running statistics alone with none, as PyTorch (a momentum of 0).
  InstanceNorm2d inorm(2, 1e-5, std::nullopt, false, true);
  inorm.forward(randn({2, 2, 3, 3}) + 5.0);
  CHECK(inorm.running_mean.to_vector<double>() == std::vector<double>{0, 0});
  CHECK_THROWS_WITH(BatchNorm1d(3, 1e-5, 1.5), Catch::Contains("momentum") && Catch::Contains("1.5"));
}

TEST_CASE("BatchNorm2d: training updates running stats, eval uses them", "[nn]") {
  manual_seed(3);
  BatchNorm2d bn(3);
  CHECK(bn.str() == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  std::vector<std::string> buffers;
  for (const auto& [n, b] : bn.named_buffers()) buffers.push_back(n);
  CHECK(buffers == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn.num_batches_tracked.dtype() == DType::Int64);

  // A batch the op refuses (one value per channel, an integer input) changes no buffer.
  CHECK_THROWS_AS(bn.forward(randn({1, 3, 1, 1})), Error);
  CHECK_THROWS_AS(bn.forward(zeros({2, 3, 2, 2}, DType::Int32)), Error);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  Tensor x = randn({4, 3, 5, 5}) * 3.0 + 2.0;
  Tensor y_train = bn.forward(x);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  // Running mean moved 10% of the way from 0 to the batch mean (about 2).
  const std::vector<float> rm = bn.running_mean.to_vector<float>();
  for (float v : rm) CHECK(v == Approx(0.2).margin(0.1));
  // Training output: batch statistics, so each channel has mean ~0.
  CHECK(std::abs(moments(y_train.select(1, 0)).mean) < 1e-4);

  bn.eval();
  const std::vector<float> rm_before = bn.running_mean.to_vector<float>();
  const std::vector<float> rv_before = bn.running_var.to_vector<float>();
  Tensor y_eval = bn.forward(x);
  CHECK(bn.running_mean.to_vector<float>() == rm_before);
  CHECK(bn.running_var.to_vector<float>() == rv_before);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(max_abs_diff(y_train, y_eval) > 0.5);
  // Eval is the affine map with the running statistics.
  Tensor expect = (x - bn.running_mean.view({1, 3, 1, 1})) / (bn.running_var.view({1, 3, 1, 1}) + 1e-5).sqrt() *
                      bn.weight.view({1, 3, 1, 1}) +
                  bn.bias.view({1, 3, 1, 1});
  CHECK(max_abs_diff(y_eval, expect) < 1e-4);

  CHECK_THROWS_AS(bn.forward(randn({2, 4, 3, 3})), ShapeError);
  CHECK_THROWS_AS(bn.forward(randn({2, 3, 3})), ShapeError);

  BatchNorm2d plain(2, 1e-3, 0.2, false, false);
  CHECK(plain.named_parameters().empty());
  CHECK(plain.named_buffers().empty());
  plain.eval();
  // Without running statistics eval normalizes with the batch's own.
  CHECK(std::abs(moments(plain.forward(randn({3, 2, 4, 4}) + 5.0)).mean) < 1e-4);
}

TEST_CASE("LayerNorm: normalizes the trailing dims, its printed form, bias=false", "[nn]") {
  manual_seed(4);
  LayerNorm ln(16);
  CHECK(ln.str() == "LayerNorm((16,), eps=1e-05, elementwise_affine=True)");
  Tensor y = ln.forward(randn({3, 5, 16}) * 4.0 + 1.0);
  CHECK(y.sizes() == Shape{3, 5, 16});
  Moments m = moments(y.select(0, 1).select(0, 2));
  CHECK(std::abs(m.mean) < 1e-5);
  CHECK(m.std == Approx(std::sqrt(16.0 / 15.0)).epsilon(1e-3));  // biased variance 1
  LayerNorm two({4, 5}, 1e-6, true, false);
  CHECK(two.weight.sizes() == Shape{4, 5});
  CHECK_FALSE(two.bias.defined());
  CHECK(two.extra_repr() == "(4, 5), eps=1e-06, elementwise_affine=True");
  LayerNorm none(8, 1e-5, false);
  CHECK(none.named_parameters().empty());
}

TEST_CASE("Embedding: picks rows, N(0, 1) init", "[nn]") {
  manual_seed(5);
  Embedding emb(300, 40);
  CHECK(emb.str() == "Embedding(300, 40)");
  Tensor idx = tensor<int64_t>({7, 0, 299, 7, 12, 3}, {2, 3});
  Tensor out = emb.forward(idx);
  CHECK(out.sizes() == Shape{2, 3, 40});
  CHECK(out.select(0, 0).select(0, 0).to_vector<float>() == emb.weight.select(0, 7).to_vector<float>());
  CHECK(out.select(0, 0).select(0, 2).to_vector<float>() == emb.weight.select(0, 299).to_vector<float>());
  Moments m = moments(emb.weight);
  CHECK(std::abs(m.mean) < 0.03);
  CHECK(m.std == Approx(1.0).epsilon(0.03));
  CHECK_THROWS_AS(emb.forward(tensor<int64_t>({300})), IndexError);
}

TEST_CASE("Embedding: padding_idx starts at zero and takes no gradient", "[nn]") {
  manual_seed(5);
  Embedding emb(10, 3, -1);  // the last row, kept as 9
  CHECK(emb.padding_idx == 9);
  CHECK(emb.str() == "Embedding(10, 3, padding_idx=9)");
  CHECK(emb.weight.select(0, 9).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(emb.weight.select(0, 8).abs().sum().item<float>() > 0);
  // Row 9 is read like any other and stays zero through a step; row 4 moves.
  Tensor idx = tensor<int64_t>({9, 4, 9, 4}, {2, 2});
  sum(emb.forward(idx) * 3.0).backward();
  CHECK(emb.weight.grad().select(0, 9).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(emb.weight.grad().select(0, 4).to_vector<float>() == std::vector<float>{6, 6, 6});
  CHECK(emb.weight.grad().select(0, 0).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK_THROWS_WITH(Embedding(10, 3, 10), Catch::Contains("Embedding") && Catch::Contains("padding_idx 10"));
  CHECK_THROWS_WITH(Embedding(10, 3, -11), Catch::Contains("Embedding") && Catch::Contains("[-10, 10)"));
  CHECK_THROWS_AS(Embedding(0, 3, 0), IndexError);
}

TEST_CASE("EmbeddingBag: bags of rows, as embedding_bag and as picked rows reduced", "[nn]") {
  manual_seed(5);
  auto near = [](const Tensor& a, const Tensor& b, double tol) {
    return a.sizes() == b.sizes() && amax(abs(a - b), {}).item<double>() <= tol;
  };
  EmbeddingBag bag(10, 3);
  CHECK(bag.str() == "EmbeddingBag(10, 3, mode='mean')");
  CHECK(EmbeddingBag(10, 3, 1.5, 2.0, BagMode::Sum, true, -1).str() ==
        "EmbeddingBag(10, 3, max_norm=1.5, mode='sum', padding_idx=9)");
  CHECK_THROWS_WITH(EmbeddingBag(-1, 3), Catch::Contains("EmbeddingBag") && Catch::Contains("num_embeddings"));
  // [2, 4] bags are the rows' mean over dim 1; the 1-d form with offsets gives the same bags.
  const Tensor idx = tensor<int64_t>({7, 0, 7, 3, 1, 2, 9, 9}, {2, 4});
  const Tensor by_rows = embedding(bag.weight, idx).mean({1});
  CHECK(near(bag(idx), by_rows, 1e-6));
  CHECK(near(bag(idx.reshape({8}), tensor<int64_t>({0, 4}, {2})), by_rows, 1e-6));
  // Max: the elementwise maximum of each bag; its gradient reaches only the rows that won.
  EmbeddingBag maxed(10, 3, std::nullopt, 2.0, BagMode::Max);
  const Tensor best = maxed(idx);
  CHECK(near(best, amax(embedding(maxed.weight, idx), {1}), 0.0));
  best.sum().backward();
  CHECK(maxed.weight.grad().sum().item<float>() == Approx(6.0f));  // one row per bag and column
  // padding_idx: its row starts at zero and is left out of the mean's count.
  EmbeddingBag padded(10, 3, std::nullopt, 2.0, BagMode::Mean, false, 0);
  CHECK(padded.weight.select(0, 0).abs().sum().item<float>() == 0.0f);
  const Tensor one = padded(tensor<int64_t>({0, 5, 0}, {1, 3}));
  CHECK(near(one.select(0, 0), padded.weight.select(0, 5), 0.0));
  // max_norm renormalizes the looked-up rows in place, as Embedding.
  EmbeddingBag renormed(10, 3, 0.5, 2.0, BagMode::Sum);
  renormed(tensor<int64_t>({4, 6}, {1, 2}));
  const Tensor norms = sqrt(sum(renormed.weight * renormed.weight, {1}));
  CHECK(norms[4].item<float>() <= 0.5f + 1e-5f);
  CHECK(norms[6].item<float>() <= 0.5f + 1e-5f);
}

TEST_CASE("MaxUnpool2d puts MaxPool2d's maxima back where they came from", "[nn]") {
  MaxPool2d pool({2, 2});
  MaxUnpool2d unpool({2, 2});
  CHECK(unpool.str() == "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  CHECK(MaxUnpool1d(3).str() == "MaxUnpool1d(kernel_size=(3,), stride=(3,), padding=(0,))");
  const Tensor x = tensor<float>({1, 5, 2, 0, 3, 4, 8, 6, 7, 9, 1, 2, 0, 0, 3, 1}, {1, 1, 4, 4});
  auto [values, indices] = pool.forward_with_indices(x);
  CHECK(values.to_vector<float>() == std::vector<float>{5, 8, 9, 3});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 6, 9, 14});
  CHECK(unpool(values, indices).to_vector<float>() ==
        std::vector<float>{0, 5, 0, 0, 0, 0, 8, 0, 0, 9, 0, 0, 0, 0, 3, 0});
  // output_size as the whole shape or its spatial part: a 5x5 plane, the flat indices kept.
  CHECK(unpool(values, indices, {1, 1, 5, 5}).sizes() == Shape{1, 1, 5, 5});
  CHECK(unpool(values, indices, {5, 5}).to_vector<float>()[9] == 9.0f);
  CHECK_THROWS_WITH(unpool(values, indices, {5}), Catch::Contains("MaxUnpool2d") && Catch::Contains("output_size"));
}

TEST_CASE("max_unpool writes an element two windows shared once, and its gradient gathers, as PyTorch", "[nn]") {
  // Windows of 3 with stride 1 over [1, 2, 9, 3, 0]: 9 wins all three windows.
  const Tensor x = tensor<double>({1, 2, 9, 3, 0}, {1, 1, 5});
  auto [values, indices] = max_pool1d_with_indices(x, 3, 1);
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{2, 2, 2});
  Tensor v = values.detach();
  v.set_requires_grad(true);
  const Tensor out = max_unpool1d(v, indices, 3, 1, 0, 5);
  CHECK(out.to_vector<double>() == std::vector<double>{0, 0, 9, 0, 0});
  (out * tensor<double>({1, 2, 3, 4, 5}, {1, 1, 5})).sum().backward();
  CHECK(v.grad().to_vector<double>() == std::vector<double>{3, 3, 3});
}

TEST_CASE("Dropout: masks and rescales in training, identity in eval", "[nn]") {
  manual_seed(6);
  Dropout drop(0.5);
  CHECK(drop.str() == "Dropout(p=0.5, inplace=False)");
  Tensor x = ones({4000});
  std::vector<float> y = drop.forward(x).to_vector<float>();
  int zeros_seen = 0;
  for (float v : y) {
    CHECK((v == 0.0f || v == 2.0f));
    zeros_seen += v == 0.0f;
  }
  CHECK(zeros_seen > 1800);
  CHECK(zeros_seen < 2200);
  drop.eval();
  CHECK(drop.forward(x).to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_AS(Dropout(1.5), Error);
}

TEST_CASE("Activations, Flatten and pools: shapes, values and printed forms", "[nn]") {
  manual_seed(7);
  Tensor x = randn({2, 3, 8, 8});
  GELU gelu_exact, gelu_tanh(GeluApprox::Tanh);
  CHECK(gelu_exact.str() == "GELU(approximate='none')");
  CHECK(gelu_tanh.str() == "GELU(approximate='tanh')");
  CHECK(max_abs_diff(gelu_tanh.forward(x), gelu(x, GeluApprox::Tanh)) == 0.0);
  ReLU relu_layer;
  CHECK(relu_layer.str() == "ReLU()");
  CHECK(moments(relu_layer.forward(x)).min == 0.0);

  Flatten flat;
  CHECK(flat.str() == "Flatten(start_dim=1, end_dim=-1)");
  CHECK(flat.forward(x).sizes() == Shape{2, 192});
  CHECK(Flatten(0, 1).forward(x).sizes() == Shape{6, 8, 8});

  MaxPool2d mp({2, 2});
  CHECK(mp.str() == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(mp.forward(x).sizes() == Shape{2, 3, 4, 4});
  AvgPool2d ap({3, 3}, {1, 1}, {1, 1});
  CHECK(ap.str() == "AvgPool2d(kernel_size=3, stride=1, padding=1)");
  CHECK(ap.forward(x).sizes() == Shape{2, 3, 8, 8});
  AdaptiveAvgPool2d gap(1);
  CHECK(gap.str() == "AdaptiveAvgPool2d(output_size=1)");
  Tensor pooled = gap.forward(x);
  CHECK(pooled.sizes() == Shape{2, 3, 1, 1});
  CHECK(max_abs_diff(pooled, x.mean({2, 3}, true)) < 1e-5);
  CHECK(AdaptiveAvgPool2d(Pair{2, 3}).extra_repr() == "output_size=(2, 3)");
}

TEST_CASE("SiLU, LeakyReLU, Softplus, Tanh, Sigmoid, Identity: values, gradients, printed forms", "[nn]") {
  // Each against its formula in double arithmetic, values and gradients, on both sides of 0 and
  // of softplus's threshold.
  const std::vector<double> xs = {-6.0, -1.5, -0.25, 0.5, 2.0, 7.0};
  struct Case {
    std::shared_ptr<UnaryModule> m;
    const char* printed;
    std::function<double(double)> f, df;
  };
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  const std::vector<Case> cases = {
      {std::make_shared<SiLU>(), "SiLU()", [&](double v) { return v * sig(v); },
       [&](double v) { return sig(v) * (1 + v * (1 - sig(v))); }},
      {std::make_shared<LeakyReLU>(), "LeakyReLU(negative_slope=0.01)", [](double v) { return v > 0 ? v : 0.01 * v; },
       [](double v) { return v > 0 ? 1.0 : 0.01; }},
      {std::make_shared<LeakyReLU>(0.2), "LeakyReLU(negative_slope=0.2)", [](double v) { return v > 0 ? v : 0.2 * v; },
       [](double v) { return v > 0 ? 1.0 : 0.2; }},
      {std::make_shared<Softplus>(), "Softplus(beta=1.0, threshold=20.0)",
       [](double v) { return std::log1p(std::exp(v)); }, sig},
      // beta 2, threshold 3: 2 and 7 are past it (x itself, gradient 1).
      {std::make_shared<Softplus>(2.0, 3.0), "Softplus(beta=2.0, threshold=3.0)",
       [](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; },
       [&](double v) { return 2 * v > 3 ? 1.0 : sig(2 * v); }},
      {std::make_shared<Tanh>(), "Tanh()", [](double v) { return std::tanh(v); },
       [](double v) { return 1 - std::tanh(v) * std::tanh(v); }},
      {std::make_shared<Sigmoid>(), "Sigmoid()", sig, [&](double v) { return sig(v) * (1 - sig(v)); }},
      {std::make_shared<Identity>(), "Identity()", [](double v) { return v; }, [](double) { return 1.0; }},
  };
  for (const Case& c : cases) {
    INFO(c.printed);
    CHECK(c.m->str() == c.printed);
    Tensor x = tensor(xs).to(DType::Float64).set_requires_grad(true);
    Tensor y = c.m->forward(x);
    y.sum().backward();
    const std::vector<double> got = y.to_vector_double(), grad = x.grad().to_vector_double();
    for (size_t i = 0; i < xs.size(); ++i) {
      INFO("x = " << xs[i]);
      CHECK(got[i] == Approx(c.f(xs[i])).epsilon(1e-12));
      CHECK(grad[i] == Approx(c.df(xs[i])).epsilon(1e-12));
    }
  }
  // Softplus of a large input stays finite (the linear branch), and SiLU of a large negative one
  // is a tiny negative number, not NaN.
  CHECK(Softplus().forward(tensor(std::vector<double>{1000.0})).item<double>() == 1000.0);
  CHECK(SiLU().forward(tensor(std::vector<double>{-200.0})).item<double>() <= 0.0);
  CHECK_THROWS_WITH(Softplus(0.0), Catch::Contains("Softplus") && Catch::Contains("beta"));
  CHECK_THROWS_WITH(LeakyReLU(std::nan("")), Catch::Contains("LeakyReLU") && Catch::Contains("nan"));
}

TEST_CASE("GroupNorm and RMSNorm: formulas, parameters, printed forms, low precision", "[nn]") {
  manual_seed(9);
  GroupNorm gn(2, 6);
  CHECK(gn.str() == "GroupNorm(2, 6, eps=1e-05, affine=True)");
  CHECK(gn.weight.sizes() == Shape{6});
  CHECK(gn.bias.sizes() == Shape{6});
  CHECK(GroupNorm(3, 6, 1e-3, false).named_parameters().empty());
  // Each sample's group of 3 channels x 4 x 4 positions has mean 0 and biased variance 1.
  const Tensor x = randn({2, 6, 4, 4}) * 3.0 + 2.0;
  const Tensor y = gn.forward(x);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t g = 0; g < 2; ++g) {
      const Moments m = moments(y.select(0, s).narrow(0, g * 3, 3).reshape({-1}));
      CHECK(std::abs(m.mean) < 1e-5);
      CHECK(m.std == Approx(std::sqrt(48.0 / 47.0)).epsilon(1e-3));
    }
  }
  // The affine parameters act per channel.
  {
    NoGradGuard no_grad;
    gn.weight.fill_(2.0);
    gn.bias.narrow(0, 1, 1).fill_(5.0);
  }
  const Tensor z = gn.forward(x);
  CHECK(max_abs_diff(z.select(1, 0), y.select(1, 0) * 2.0) < 1e-5);
  CHECK(max_abs_diff(z.select(1, 1), y.select(1, 1) * 2.0 + 5.0) < 1e-5);
  CHECK_THROWS_WITH(gn.forward(randn({2, 4, 3})), Catch::Contains("GroupNorm") && Catch::Contains("6 channels"));
  CHECK_THROWS_WITH(GroupNorm(4, 6), Catch::Contains("num_groups"));

  RMSNorm rms(8);
  CHECK(rms.str() == "RMSNorm((8,), eps=None, elementwise_affine=True)");
  CHECK(RMSNorm({2, 4}, 1e-6).extra_repr() == "(2, 4), eps=1e-06, elementwise_affine=True");
  CHECK(RMSNorm(8, std::nullopt, false).named_parameters().empty());
  // Each row divided by its root mean square; eps unset is float32's machine epsilon.
  const Tensor r = randn({3, 8}) * 5.0;
  const Tensor out = rms.forward(r);
  const std::vector<double> rv = r.to_vector_double(), ov = out.to_vector_double();
  for (size_t row = 0; row < 3; ++row) {
    double ms = 0;
    for (size_t j = 0; j < 8; ++j) ms += rv[row * 8 + j] * rv[row * 8 + j] / 8;
    for (size_t j = 0; j < 8; ++j)
      CHECK(ov[row * 8 + j] == Approx(rv[row * 8 + j] / std::sqrt(ms + 0x1p-23)).epsilon(1e-5));
  }
  // bfloat16 in, bfloat16 out, normalized in float32 and rounded once: the float32 result rounded.
  const Tensor rb = r.to(DType::BFloat16);
  const Tensor ob = rms.forward(rb);
  CHECK(ob.dtype() == DType::BFloat16);
  CHECK(test::bitwise_equal(ob, rms_norm(rb.to(DType::Float32), {8}, rms.weight, 0x1p-7).to(DType::BFloat16)));
  CHECK(gn.forward(x.to(DType::BFloat16)).dtype() == DType::BFloat16);
}

TEST_CASE("Sequential: chains, indexes, names children 0, 1, ...", "[nn]") {
  manual_seed(8);
  auto l1 = std::make_shared<Linear>(6, 5);
  auto l2 = std::make_shared<Linear>(5, 2);
  Sequential seq{l1, std::make_shared<ReLU>()};
  seq.push_back(l2);
  CHECK(seq.size() == 3);
  CHECK(seq[0] == l1);
  CHECK(seq.at<Linear>(2) == l2);
  CHECK_THROWS_AS(seq.at<Linear>(1), Error);
  CHECK_THROWS_AS(seq[3], IndexError);
  Tensor x = randn({4, 6});
  CHECK(max_abs_diff(seq.forward(x), l2->forward(relu(l1->forward(x)))) == 0.0);
  std::vector<std::string> names;
  for (const auto& [n, p] : seq.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
}

// --- init ---------------------------------------------------------------------------------------

TEST_CASE("init: fans and gains as torch.nn.init computes them", "[nn]") {
  CHECK(init::calculate_fan_in_and_fan_out(empty({10, 20})) == std::pair<int64_t, int64_t>{20, 10});
  CHECK(init::calculate_fan_in_and_fan_out(empty({16, 8, 3, 5})) == std::pair<int64_t, int64_t>{8 * 15, 16 * 15});
  CHECK_THROWS_AS(init::calculate_fan_in_and_fan_out(empty({10})), Error);
  CHECK(init::calculate_gain(init::Nonlinearity::ReLU) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::Tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::Linear) == 1.0);
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU) == Approx(std::sqrt(2.0 / (1.0 + 1e-4))));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
}

TEST_CASE("init: kaiming, xavier and normal statistics", "[nn]") {
  manual_seed(9);
  // 131072 samples: the sample std's relative standard error is about 0.2%, the tolerance 2%.
  Tensor w = empty({512, 256});
  const double n = static_cast<double>(w.numel());

  SECTION("kaiming_normal_ fan_in relu") {
    init::kaiming_normal_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU);
    Moments m = moments(w);
    const double std = std::sqrt(2.0 / 256.0);
    CHECK(std::abs(m.mean) < 5 * std / std::sqrt(n));
    CHECK(m.std == Approx(std).epsilon(0.02));
  }
  SECTION("kaiming_normal_ fan_out on a conv weight") {
    Tensor c = empty({64, 32, 3, 3});
    init::kaiming_normal_(c, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
    CHECK(moments(c).std == Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.02));
  }
  SECTION("kaiming_uniform_ with a = sqrt(5), as nn.Linear calls it") {
    init::kaiming_uniform_(w, std::sqrt(5.0));
    Moments m = moments(w);
    const double bound = 1.0 / std::sqrt(256.0);
    CHECK(m.max <= bound);
    CHECK(m.min >= -bound);
    CHECK(m.max > 0.99 * bound);
    CHECK(m.std == Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  }
  SECTION("kaiming_uniform_ default: a = 0, leaky_relu gain sqrt(2), as torch.nn.init") {
    init::kaiming_uniform_(w);
    const double bound = std::sqrt(6.0 / 256.0);
    CHECK(moments(w).max <= bound);
    CHECK(moments(w).std == Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  }
  SECTION("kaiming_uniform_ relu") {
    init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU);
    const double bound = std::sqrt(6.0 / 256.0);
    CHECK(moments(w).max <= bound);
    CHECK(moments(w).std == Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  }
  SECTION("xavier_uniform_ with gain") {
    init::xavier_uniform_(w, 2.0);
    const double std = 2.0 * std::sqrt(2.0 / (256.0 + 512.0));
    CHECK(moments(w).max <= std::sqrt(3.0) * std);
    CHECK(moments(w).std == Approx(std).epsilon(0.02));
  }
  SECTION("xavier_normal_") {
    init::xavier_normal_(w);
    CHECK(moments(w).std == Approx(std::sqrt(2.0 / 768.0)).epsilon(0.02));
    CHECK(std::abs(moments(w).mean) < 5 * std::sqrt(2.0 / 768.0) / std::sqrt(n));
  }
  SECTION("normal_ and uniform_") {
    init::normal_(w, 3.0, 0.5);
    CHECK(moments(w).mean == Approx(3.0).margin(0.01));
    CHECK(moments(w).std == Approx(0.5).epsilon(0.02));
    init::uniform_(w, -2.0, 4.0);
    CHECK(moments(w).min >= -2.0);
    CHECK(moments(w).max < 4.0);
    CHECK(moments(w).mean == Approx(1.0).margin(0.02));
  }
  SECTION("constants") {
    init::constant_(w, 0.25);
    CHECK(moments(w).min == 0.25);
    CHECK(moments(w).max == 0.25);
    init::ones_(w);
    CHECK(moments(w).min == 1.0);
    init::zeros_(w);
    CHECK(moments(w).max == 0.0);
  }
}

TEST_CASE("init: trunc_normal_ stays between a and b with the truncated normal's moments", "[nn]") {
  manual_seed(10);
  struct Case {
    double mean, std, a, b;
  };
  // Symmetric default-like, asymmetric, and a one-sided tail where clipping a normal would be
  // badly wrong (P(x in [1, 4]) is about 16%); then tails far out, on either side, where float32's
  // values near 1 (the CDF there) are too few to draw from: the tail's own probability is drawn.
  const Case cases[] = {{0.0, 1.0, -2.0, 2.0},
                        {0.5, 2.0, -1.0, 3.0},
                        {0.0, 1.0, 1.0, 4.0},
                        {0.0, 0.02, -0.04, 0.04},
                        {0.0, 1.0, 5.0, 6.0},
                        {0.0, 1.0, 6.0, 7.0},
                        {1.0, 2.0, -13.0, -11.0},
                        // Past the erfinv polynomials' range (at 8 std every value was a).
                        {0.0, 1.0, 8.0, 9.0},
                        {0.0, 1.0, 10.0, 11.0},
                        {0.0, 1.0, 12.0, 30.0},
                        {2.0, 0.5, -4.0, -2.5},
                        // Past float32's smallest normal tail probability (13 std): every value was
                        // the bound, then too close to it.
                        {0.0, 1.0, 13.0, 14.0},
                        {0.0, 1.0, 14.0, 15.0},
                        {1.0, 0.5, -6.5, -6.0}};
  for (const Case& c : cases) {
    Tensor w = empty({400, 250});
    init::trunc_normal_(w, c.mean, c.std, c.a, c.b);
    const double alpha = (c.a - c.mean) / c.std, beta = (c.b - c.mean) / c.std;
    // The interval's probability, through erfc on a side of the mean (1 - a tiny number otherwise).
    const double z = alpha >= 0   ? 0.5 * (std::erfc(alpha / std::sqrt(2.0)) - std::erfc(beta / std::sqrt(2.0)))
                     : beta <= 0 ? 0.5 * (std::erfc(-beta / std::sqrt(2.0)) - std::erfc(-alpha / std::sqrt(2.0)))
                                 : normal_cdf(beta) - normal_cdf(alpha);
    const double ratio = (normal_pdf(alpha) - normal_pdf(beta)) / z;
    const double mean = c.mean + c.std * ratio;
    const double var = c.std * c.std * (1.0 + (alpha * normal_pdf(alpha) - beta * normal_pdf(beta)) / z - ratio * ratio);
    Moments m = moments(w);
    INFO("mean " << c.mean << " std " << c.std << " [" << c.a << ", " << c.b << "]");
    CHECK(m.min >= c.a);
    CHECK(m.max <= c.b);
    CHECK(m.mean == Approx(mean).margin(0.02 * std::sqrt(var)));
    CHECK(m.std == Approx(std::sqrt(var)).epsilon(0.02));
    std::vector<float> v = w.to_vector<float>();
    std::sort(v.begin(), v.end());
    CHECK(std::unique(v.begin(), v.end()) - v.begin() > 10000);  // a continuum, not a few values
  }
  // float64 tensors work in float64.
  Tensor d = empty({1000}, DType::Float64);
  init::trunc_normal_(d, 0.0, 1.0, -0.5, 0.5);
  CHECK(moments(d).min >= -0.5);
  CHECK(moments(d).max <= 0.5);
  CHECK_THROWS_AS(init::trunc_normal_(d, 0.0, 1.0, 1.0, -1.0), Error);
  // Far out in float64 too: [20, 21] std, whose mean is 20.0497 and std 0.0496 (by the tail's
  // moments, the formulas above).
  Tensor far = empty({100000}, DType::Float64);
  init::trunc_normal_(far, 0.0, 1.0, 20.0, 21.0);
  const Moments fm = moments(far);
  const double z20 = 0.5 * (std::erfc(20.0 / std::sqrt(2.0)) - std::erfc(21.0 / std::sqrt(2.0)));
  const double r20 = (normal_pdf(20.0) - normal_pdf(21.0)) / z20;
  const double v20 = 1.0 + (20.0 * normal_pdf(20.0) - 21.0 * normal_pdf(21.0)) / z20 - r20 * r20;
  CHECK(fm.min >= 20.0);
  CHECK(fm.mean == Approx(r20).margin(0.02 * std::sqrt(v20)));
  CHECK(fm.std == Approx(std::sqrt(v20)).epsilon(0.02));
  // A non-finite mean or std is refused, naming the op (std = inf filled the tensor with NaN).
  CHECK_THROWS_WITH(init::trunc_normal_(d, 0.0, INFINITY, -1.0, 1.0), Catch::Contains("trunc_normal_: std"));
  CHECK_THROWS_WITH(init::trunc_normal_(d, NAN, 1.0, -1.0, 1.0), Catch::Contains("trunc_normal_: mean"));
  CHECK_THROWS_WITH(init::trunc_normal_(d, INFINITY, 1.0, -1.0, 1.0), Catch::Contains("trunc_normal_: mean"));
}

TEST_CASE("init: works on parameters without recording history, same seed, same init", "[nn]") {
  Tensor p = zeros({8, 8});
  p.set_requires_grad(true);
  init::xavier_uniform_(p);
  CHECK(p.is_leaf());
  CHECK(p.grad_fn() == nullptr);
  CHECK(p.requires_grad());

  manual_seed(42);
  Linear a(30, 20);
  Conv2d ca(3, 4, {3, 3});
  Tensor ta = init::trunc_normal_(empty({100}), 0.0, 1.0);
  manual_seed(42);
  Linear b(30, 20);
  Conv2d cb(3, 4, {3, 3});
  Tensor tb = init::trunc_normal_(empty({100}), 0.0, 1.0);
  CHECK(a.weight.to_vector<float>() == b.weight.to_vector<float>());
  CHECK(a.bias.to_vector<float>() == b.bias.to_vector<float>());
  CHECK(ca.weight.to_vector<float>() == cb.weight.to_vector<float>());
  CHECK(ta.to_vector<float>() == tb.to_vector<float>());
  manual_seed(43);
  Linear c(30, 20);
  CHECK(a.weight.to_vector<float>() != c.weight.to_vector<float>());
}

TEST_CASE("Sequential: a BatchNorm2d and the ReLU after it run as one batch_norm, with the modules' bits", "[nn]") {
  using kiln::test::bitwise_equal;
  manual_seed(3);
  const auto conv = std::make_shared<Conv2d>(2, 4, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false);
  const auto bn = std::make_shared<BatchNorm2d>(4);
  const auto act = std::make_shared<ReLU>();
  Sequential seq{conv, bn, act};
  const Tensor x = randn({3, 2, 5, 5});
  const Tensor dy = randn({3, 4, 5, 5});
  const TensorList params{conv->weight, bn->weight, bn->bias};
  for (const bool training : {true, false}) {
    INFO((training ? "training" : "eval"));
    seq.train(training);
    const Tensor y = seq.forward(x);
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name() == "batch_norm");  // the ReLU ran inside batch_norm
    const Tensor y_ops = act->forward(bn->forward(conv->forward(x)));  // forward(x) alone has no epilogue
    CHECK(y_ops.grad_fn()->name() == "relu");
    CHECK(bitwise_equal(y, y_ops));
    const TensorList g = grad({y}, params, {dy}), g_ops = grad({y_ops}, params, {dy});
    for (size_t i = 0; i < params.size(); ++i) CHECK(bitwise_equal(g[i], g_ops[i]));
  }
  CHECK(bn->num_batches_tracked.item<int64_t>() == 2);  // each training forward counted once

  // A subclass of ReLU may forward otherwise: Sequential runs it as it is.
  struct Doubling : ReLU {
    Tensor forward(const Tensor& t) override { return t * 2.0; }
  };
  Sequential other{bn, std::make_shared<Doubling>()};
  other.eval();
  const Tensor u = randn({2, 4, 3, 3});
  CHECK(bitwise_equal(other.forward(u), bn->forward(u) * 2.0));
}

TEST_CASE("Embedding with max_norm renormalizes the rows it looks up, in place, as PyTorch does", "[nn]") {
  manual_seed(9);
  Embedding emb(6, 4, std::nullopt, 1.0);
  CHECK(emb.str() == "Embedding(6, 4, max_norm=1.0)");
  {
    NoGradGuard no_grad;
    emb.weight.mul_(3.0);  // every row's norm well above 1
  }
  const Tensor before = emb.weight.detach().clone();
  const Tensor idx = tensor<int64_t>({4, 1, 4}, {3});
  const Tensor out = emb.forward(idx);
  const std::vector<double> norms = sqrt(sum(emb.weight.detach() * emb.weight.detach(), {1})).to_vector_double();
  for (int64_t r = 0; r < 6; ++r) {
    INFO("row " << r);
    if (r == 1 || r == 4) {
      // Scaled to norm max_norm (less PyTorch's 1e-7 guard), direction kept.
      CHECK(norms[static_cast<size_t>(r)] == Approx(1.0).epsilon(1e-6));
      const Tensor ratio = emb.weight.detach().select(0, r) / before.select(0, r);
      CHECK(max(ratio).item<double>() == Approx(min(ratio).item<double>()).epsilon(1e-6));
    } else {
      CHECK(kiln::test::bitwise_equal(emb.weight.detach().select(0, r), before.select(0, r)));
    }
  }
  // The lookup reads the renormalized rows, and gradients reach them.
  CHECK(kiln::test::bitwise_equal(out.detach().select(0, 0), emb.weight.detach().select(0, 4)));
  out.sum().backward();
  CHECK(emb.weight.grad().select(0, 4).to_vector_double() == std::vector<double>{2, 2, 2, 2});
  // Rows within max_norm stay as they are; the 1-norm counts with norm_type 1.
  Embedding small(3, 2, std::nullopt, 10.0, 1.0);
  CHECK(small.str() == "Embedding(3, 2, max_norm=10.0, norm_type=1.0)");
  const Tensor w0 = small.weight.detach().clone();
  small.forward(tensor<int64_t>({0, 1, 2}, {3}));
  CHECK(kiln::test::bitwise_equal(small.weight.detach(), w0));
  {
    NoGradGuard no_grad;
    small.weight.fill_(-4.0);  // 1-norm 8 per row, 2-norm about 5.7
  }
  Embedding& tight = small;
  tight.max_norm = 4.0;
  tight.forward(tensor<int64_t>({2}, {1}));
  CHECK(sum(abs(tight.weight.detach().select(0, 2))).item<double>() == Approx(4.0).epsilon(1e-6));
  CHECK(tight.weight.detach().select(0, 0).to_vector_double() == std::vector<double>{-4, -4});
  CHECK_THROWS_WITH(Embedding(3, 2, std::nullopt, -1.0), Catch::Contains("Embedding") && Catch::Contains("max_norm"));
  CHECK_THROWS_WITH(emb.forward(tensor<int64_t>({6}, {1})), Catch::Contains("Embedding") && Catch::Contains("[0, 6)"));
}

TEST_CASE("Dropout1d/2d/3d drop whole channels in training and nothing in eval", "[nn]") {
  manual_seed(41);
  Dropout2d drop(0.5);
  CHECK(drop.str() == "Dropout2d(p=0.5, inplace=False)");
  CHECK(Dropout1d(0.25).str() == "Dropout1d(p=0.25, inplace=False)");
  Tensor x = ones({4, 16, 3, 3}).set_requires_grad(true);
  const Tensor y = drop.forward(x);
  int dropped = 0;
  for (int64_t n = 0; n < 4; ++n) {
    for (int64_t c = 0; c < 16; ++c) {
      const std::vector<float> v = y.select(0, n).select(0, c).to_vector<float>();
      const bool zero = v[0] == 0.0f;
      dropped += zero ? 1 : 0;
      for (float e : v) CHECK(e == (zero ? 0.0f : 2.0f));  // a channel is all dropped or all kept, scaled
    }
  }
  CHECK(dropped > 12);  // 64 channels at p = 0.5: 32 expected
  CHECK(dropped < 52);
  // The gradient is the mask: the output itself here (ones in).
  y.sum().backward();
  CHECK(max(abs(x.grad() - y.detach())).item<double>() == 0.0);
  drop.eval();
  const Tensor z = randn({2, 3, 4, 4});
  CHECK(drop.forward(z).is_same(z));
  // Unbatched [C, L] and [C, D, H, W] inputs drop per channel too.
  const Tensor y1 = Dropout1d(0.5).forward(ones({32, 5}));
  for (int64_t c = 0; c < 32; ++c) CHECK(max(y1.select(0, c)).item<double>() == min(y1.select(0, c)).item<double>());
  CHECK(Dropout3d(0.5).forward(ones({2, 4, 2, 2, 2})).sizes() == Shape{2, 4, 2, 2, 2});
  CHECK_THROWS_WITH(Dropout2d(0.5).forward(ones({4, 5})), Catch::Contains("dropout2d") && Catch::Contains("[4, 5]"));
}

TEST_CASE("AlphaDropout keeps a standard normal input's mean and variance, FeatureAlphaDropout per channel", "[nn]") {
  manual_seed(43);
  AlphaDropout drop(0.2);
  CHECK(drop.str() == "AlphaDropout(p=0.2, inplace=False)");
  const Tensor x = randn({200000}, TensorOptions(DType::Float64));
  const Tensor y = drop.forward(x);
  // The dropped elements sit at -a alpha (1 - p); the rest are a (x + alpha p).
  const double alpha = 1.7580993408473766, a = 1.0 / std::sqrt((alpha * alpha * 0.2 + 1.0) * 0.8);
  const Tensor dropped = eq(y, -a * alpha * 0.8);
  CHECK(mean(dropped.to(DType::Float64)).item<double>() == Approx(0.2).margin(0.005));
  CHECK(mean(y).item<double>() == Approx(0.0).margin(0.01));
  CHECK(var(y).item<double>() == Approx(1.0).margin(0.01));
  drop.eval();
  CHECK(drop.forward(x).is_same(x));
  CHECK(max(abs(alpha_dropout(x, 1.0))).item<double>() == 0.0);  // p = 1: zeros, as PyTorch's

  // Per channel: every element of a [N, C] channel's H x W plane shares the draw.
  const Tensor z = FeatureAlphaDropout(0.5).forward(zeros({8, 16, 3, 3}));
  for (int64_t n = 0; n < 8; ++n) {
    for (int64_t c = 0; c < 16; ++c) {
      const Tensor plane = z.select(0, n).select(0, c);
      CHECK(max(plane).item<double>() == min(plane).item<double>());
    }
  }
  CHECK_THROWS_WITH(FeatureAlphaDropout(0.5).forward(ones({4})), Catch::Contains("feature_alpha_dropout"));
}

TEST_CASE("Bilinear: PyTorch's parameters, init bounds and printed form, x1^T W x2 + b per output", "[nn]") {
  manual_seed(41);
  Bilinear layer(4, 3, 5);
  CHECK(layer.str() == "Bilinear(in1_features=4, in2_features=3, out_features=5, bias=True)");
  REQUIRE(layer.named_parameters().size() == 2);
  CHECK(layer.weight.sizes() == Shape{5, 4, 3});
  CHECK(layer.bias.sizes() == Shape{5});
  // uniform(-1/sqrt(in1), 1/sqrt(in1)) = (-0.5, 0.5) for both.
  CHECK(max(abs(layer.weight)).item<double>() <= 0.5);
  CHECK(max(abs(layer.weight)).item<double>() > 0.4);
  CHECK(max(abs(layer.bias)).item<double>() <= 0.5);
  const Tensor x1 = randn({2, 4}), x2 = randn({2, 3});
  const Tensor y = layer(x1, x2);
  const Tensor expected = einsum("ni,oij,nj->no", {x1, layer.weight, x2}) + layer.bias;
  CHECK(max(abs(y - expected)).item<double>() < 1e-5);
  CHECK(Bilinear(2, 2, 1, false).str() == "Bilinear(in1_features=2, in2_features=2, out_features=1, bias=False)");
  CHECK(Bilinear(2, 2, 1, false).named_parameters().size() == 1);
  CHECK_THROWS_WITH(Bilinear(-1, 2, 3), Catch::Contains("Bilinear") && Catch::Contains("in1_features"));
  CHECK_THROWS_WITH(layer(x1, randn({3, 3})), Catch::Contains("bilinear") && Catch::Contains("leading dims"));
}

TEST_CASE("init: orthogonal_, eye_, dirac_ and sparse_ as torch.nn.init defines them", "[nn]") {
  manual_seed(71);
  // orthogonal_: rows orthonormal for a wide matrix, columns for a tall one, times gain; a 4-d
  // weight is seen as [out, in * kh * kw].
  for (const Shape& shape : {Shape{3, 7}, Shape{7, 3}, Shape{5, 5}, Shape{4, 2, 3, 3}}) {
    INFO(shape_str(shape));
    Tensor w = empty(shape, DType::Float64);
    init::orthogonal_(w, 2.0);
    const Tensor m = w.reshape({shape[0], -1});
    const Tensor gram = m.size(0) <= m.size(1) ? matmul(m, m.t()) : matmul(m.t(), m);
    const Tensor expected = diag(ones({gram.size(0)}, DType::Float64)) * 4.0;
    CHECK(max(abs(gram - expected)).item<double>() < 1e-12);
  }
  // The draw comes from kiln's generator: reseeding repeats it, and two draws differ.
  manual_seed(72);
  Tensor a = empty({4, 4}), b = empty({4, 4});
  init::orthogonal_(a);
  manual_seed(72);
  init::orthogonal_(b);
  CHECK(max(abs(a - b)).item<double>() == 0.0);
  init::orthogonal_(b);
  CHECK(max(abs(a - b)).item<double>() > 0.1);

  Tensor e = full({3, 4}, 7.0);
  init::eye_(e);
  CHECK(e.to_vector_double() == std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0});

  // dirac_: a convolution with it passes each channel through (padding keeps the size).
  Tensor k = full({3, 3, 3, 3}, 5.0);
  init::dirac_(k);
  const Tensor img = randn({2, 3, 6, 6});
  CHECK(max(abs(conv2d(img, k, Tensor(), {1, 1}, {1, 1}) - img)).item<double>() < 1e-6);
  // With groups, each group's output channels copy that group's leading input channels.
  Tensor kg = empty({4, 2, 3});
  init::dirac_(kg, 2);
  CHECK(kg.select(0, 2).select(0, 0).to_vector_double() == std::vector<double>{0, 1, 0});
  CHECK(kg.select(0, 3).select(0, 1).to_vector_double() == std::vector<double>{0, 1, 0});
  CHECK(sum(kg).item<double>() == 4.0);

  // sparse_: ceil(0.3 * 10) = 3 zeros in every column, the rest Normal(0, std).
  Tensor s = empty({10, 50});
  init::sparse_(s, 0.3, 0.5);
  CHECK(sum(eq(s, 0.0).to(DType::Int64), {0}).to_vector_double() == std::vector<double>(50, 3.0));
  CHECK(moments(s).std == Approx(0.5 * std::sqrt(0.7)).epsilon(0.1));

  CHECK_THROWS_WITH(init::orthogonal_(empty({4})), Catch::Contains("orthogonal_") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(init::eye_(empty({2, 2, 2})), Catch::Contains("eye_") && Catch::Contains("2-d"));
  CHECK_THROWS_WITH(init::dirac_(empty({3, 2, 3}), 2), Catch::Contains("dirac_") && Catch::Contains("groups = 2"));
  CHECK_THROWS_WITH(init::sparse_(empty({3, 3}), 1.5), Catch::Contains("sparse_") && Catch::Contains("1.5"));
  CHECK_THROWS_WITH(init::eye_(zeros({2, 2}, DType::Int64)), Catch::Contains("eye_") && Catch::Contains("int64"));
}

TEST_CASE("Conv1d/2d/3d: padding_mode (reflect, replicate, circular) and padding='same', as PyTorch's", "[nn]") {
  manual_seed(23);
  // Reflect: the layer is conv2d of the reflect-padded input, unpadded.
  Conv2d reflect(2, 3, {3, 3}, {1, 1}, {1, 2}, {1, 1}, 1, false, PaddingMode::Reflect);
  CHECK(reflect.str() ==
        "Conv2d(2, 3, kernel_size=(3, 3), stride=(1, 1), padding=(1, 2), bias=False, padding_mode=reflect)");
  const Tensor x = randn({2, 2, 5, 6});
  const Tensor by_hand = conv2d(pad(x, {2, 2, 1, 1}, PadMode::Reflect), reflect.weight);
  CHECK(max_abs_diff(reflect.forward(x), by_hand) == 0.0);
  CHECK(reflect.forward(x).sizes() == Shape{2, 3, 5, 8});
  // Replicate: a constant image convolves to sum(w) c + b everywhere, its borders included (zeros
  // would dim them).
  Conv2d replicate(1, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, PaddingMode::Replicate);
  const std::vector<double> flat = replicate.forward(full({1, 1, 4, 4}, 2.0)).to_vector_double();
  const double expected = 2.0 * sum(replicate.weight).item<double>() + replicate.bias.item<double>();
  for (const double v : flat) CHECK(v == Approx(expected).epsilon(1e-6));
  // Circular: the convolution commutes with rolling the input round.
  Conv1d circular(1, 2, 3, 1, 1, 1, 1, true, PaddingMode::Circular);
  const Tensor seq = randn({1, 1, 9});
  CHECK(max_abs_diff(circular.forward(roll(seq, {2}, {2})), roll(circular.forward(seq), {2}, {2})) < 1e-6);
  CHECK(circular.extra_repr() == "1, 2, kernel_size=(3,), stride=(1,), padding=(1,), padding_mode=circular");

  // 'same': the output keeps the input's length. An even dilated kernel pads one more cell after
  // than before (kernel 4: 1 before, 2 after), as PyTorch's.
  Conv1d same(2, 3, 4, kSamePadding);
  CHECK(same.str() == "Conv1d(2, 3, kernel_size=(4,), stride=(1,), padding=same)");
  const Tensor s = randn({2, 2, 7});
  CHECK(same.forward(s).sizes() == Shape{2, 3, 7});
  CHECK(max_abs_diff(same.forward(s), conv1d(pad(s, {1, 2}), same.weight, same.bias)) == 0.0);
  Conv1d dilated(2, 3, 4, kSamePadding, 2);  // 2 x 3 = 6 cells: 3 and 3, the convolution's own padding
  CHECK(max_abs_diff(dilated.forward(s), conv1d(s, dilated.weight, dilated.bias, 1, 3, 2)) == 0.0);
  Conv2d same2d(2, 2, {2, 3}, kSamePadding, {1, 1}, 1, true, PaddingMode::Reflect);
  CHECK(same2d.extra_repr() == "2, 2, kernel_size=(2, 3), stride=(1, 1), padding=same, padding_mode=reflect");
  CHECK(same2d.forward(x).sizes() == x.sizes());
  CHECK(max_abs_diff(same2d.forward(x), conv2d(pad(x, {1, 1, 0, 1}, PadMode::Reflect), same2d.weight, same2d.bias)) ==
        0.0);
  Conv3d same3d(1, 2, {3, 2, 3}, kSamePadding, {1, 1, 2});
  const Tensor vol = randn({1, 1, 4, 5, 6});
  CHECK(same3d.forward(vol).sizes() == Shape{1, 2, 4, 5, 6});
  const Tensor vol_padded = pad(vol, {2, 2, 0, 1, 1, 1});  // 4, 1 and 2 x 2 cells, the odd one after
  CHECK(max_abs_diff(same3d.forward(vol),
                     conv3d(vol_padded, same3d.weight, same3d.bias, {1, 1, 1}, {0, 0, 0}, {1, 1, 2})) == 0.0);

  CHECK_THROWS_WITH(Conv1d(1, 1, 3, 1, 5, 1, 1, true, PaddingMode::Reflect).forward(randn({1, 1, 4})),
                    Catch::Contains("pad"));
  same.stride = 2;  // made by hand: 'same' cannot keep the size
  CHECK_THROWS_WITH(same.forward(s), Catch::Contains("Conv1d") && Catch::Contains("padding='same'"));
}
