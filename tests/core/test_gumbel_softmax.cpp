// gumbel_softmax: the sample is softmax((logits + g) / tau) for the noise g that the same generator
// state draws; its argmax follows softmax(logits) (the Gumbel-max trick, over many draws); hard
// gives exact one-hot vectors with the soft sample's gradient; the errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("gumbel_softmax: softmax of the logits plus the generator's Gumbel noise", "[gumbel_softmax]") {
  const Tensor logits = tensor(std::vector<double>{0.5, -1.0, 2.0, 0.0, 1.5, -0.5}).reshape({2, 3});
  Generator gen(7);
  const Tensor y = gumbel_softmax(logits, 0.5, false, -1, gen);
  Generator again(7);
  const Tensor u = rand({2, 3}, TensorOptions(DType::Float64), again);
  const Tensor expected = softmax(div(sub(logits, log(neg(log(u)))), 0.5), 1);
  const std::vector<double> a = y.to_vector<double>(), b = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12));
  CHECK(sum(y, {1}).to_vector<double>()[0] == Approx(1.0));
}

TEST_CASE("gumbel_softmax: the hard sample's argmax follows softmax(logits)", "[gumbel_softmax]") {
  // 20000 draws of 4 classes at once: class frequencies within 0.015 of the probabilities.
  const std::vector<double> l = {1.0, 0.0, -1.0, 0.5};
  const Tensor logits = tensor(l).reshape({1, 4}).expand({20000, 4});
  Generator gen(11);
  const Tensor y = gumbel_softmax(logits, 1.0, true, 1, gen);
  const std::vector<double> freq = mean(y, {0}).to_vector<double>();
  const std::vector<double> p = softmax(tensor(l), 0).to_vector<double>();
  for (size_t k = 0; k < 4; ++k) CHECK(freq[k] == Approx(p[k]).margin(0.015));
  // Exactly one 1 per row, the rest exactly 0.
  int64_t other = 0;
  for (double e : y.to_vector<double>()) other += (e == 0.0 || e == 1.0) ? 0 : 1;
  CHECK(other == 0);
  CHECK(sum(y).item<double>() == 20000.0);
}

TEST_CASE("gumbel_softmax: hard has the soft sample's gradient (straight-through)", "[gumbel_softmax]") {
  const Tensor w = tensor(std::vector<double>{1, -2, 3, 0.5, 2, -1});
  const auto grad_of = [&](bool hard) {
    Tensor logits = tensor(std::vector<double>{0.2, 0.1, -0.3, 1.0, 0.0, 0.4}).reshape({2, 3});
    logits.set_requires_grad(true);
    Generator gen(3);  // the same noise for both
    sum(mul(gumbel_softmax(logits, 0.7, hard, -1, gen).reshape({-1}), w)).backward();
    return logits.grad().to_vector<double>();
  };
  const std::vector<double> soft = grad_of(false), hard = grad_of(true);
  for (size_t i = 0; i < soft.size(); ++i) CHECK(hard[i] == Approx(soft[i]).epsilon(1e-12));
  CHECK(std::abs(soft[0]) > 0.01);  // a gradient that is there to compare
}

TEST_CASE("gumbel_softmax: bad tau, integer logits and dims are errors", "[gumbel_softmax]") {
  const Tensor logits = zeros({2, 3});
  CHECK_THROWS_WITH(gumbel_softmax(logits, 0.0), Catch::Contains("gumbel_softmax") && Catch::Contains("tau"));
  CHECK_THROWS_WITH(gumbel_softmax(logits, NAN), Catch::Contains("tau"));
  CHECK_THROWS_WITH(gumbel_softmax(zeros({3}, DType::Int64)),
                    Catch::Contains("gumbel_softmax") && Catch::Contains("int64"));
  CHECK_THROWS_WITH(gumbel_softmax(logits, 1.0, false, 2), Catch::Contains("gumbel_softmax"));
}
