// The loss modules: each equals its functional loss with its options (bit for bit), prints as
// PyTorch's, keeps its weights as buffers; NLLLoss of log_softmax equals CrossEntropyLoss; and a
// logistic regression trained with BCEWithLogitsLoss separates two classes.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/optim/sgd.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

TEST_CASE("loss modules call their functional losses with their options", "[nn][loss]") {
  manual_seed(3);
  const Tensor x = randn({4, 5}), y = randn({4, 5}), p = rand({4, 5});
  const Tensor classes = tensor<int64_t>({1, 0, 4, -100}, {4});
  CHECK(bitwise_equal(MSELoss()(x, y), mse_loss(x, y)));
  CHECK(bitwise_equal(L1Loss(Reduction::Sum)(x, y), l1_loss(x, y, Reduction::Sum)));
  CHECK(bitwise_equal(SmoothL1Loss(Reduction::None, 0.5)(x, y), smooth_l1_loss(x, y, Reduction::None, 0.5)));
  CHECK(bitwise_equal(HuberLoss(Reduction::Mean, 2.0)(x, y), huber_loss(x, y, Reduction::Mean, 2.0)));
  CHECK(bitwise_equal(CrossEntropyLoss(-100, Reduction::Sum, 0.1)(x, classes),
                      cross_entropy(x, classes, Reduction::Sum, -100, 0.1)));
  const Tensor w = rand({5}) + 0.5, pw = rand({5}) + 1.0;
  CHECK(bitwise_equal(NLLLoss(w)(log_softmax(x, 1), classes), nll_loss(log_softmax(x, 1), classes, w)));
  CHECK(bitwise_equal(BCEWithLogitsLoss(Tensor(), Reduction::Mean, pw)(x, p),
                      binary_cross_entropy_with_logits(x, p, Tensor(), pw)));

  // Printed as PyTorch prints them; the weights are buffers (saved, moved and cast with the
  // module).
  CHECK(CrossEntropyLoss().str() == "CrossEntropyLoss()");
  CHECK(MSELoss().str() == "MSELoss()");
  CHECK(HuberLoss().str() == "HuberLoss()");
  BCEWithLogitsLoss bce(Tensor(), Reduction::Mean, pw);
  CHECK(bce.str() == "BCEWithLogitsLoss()");
  REQUIRE(bce.named_buffers().size() == 1);
  CHECK(bce.named_buffers()[0].first == "pos_weight");
  bce.to(DType::Float64);
  CHECK(bce.pos_weight.dtype() == DType::Float64);
  CHECK(NLLLoss(w).named_buffers()[0].first == "weight");

  CHECK_THROWS_WITH(HuberLoss(Reduction::Mean, 0.0), Catch::Contains("HuberLoss") && Catch::Contains("delta"));
  CHECK_THROWS_WITH(SmoothL1Loss(Reduction::Mean, -1.0), Catch::Contains("SmoothL1Loss") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(CrossEntropyLoss(-100, Reduction::Mean, 1.5), Catch::Contains("label_smoothing"));
  CHECK_THROWS_WITH(L1Loss(static_cast<Reduction>(7))(x, y), Catch::Contains("l1_loss") && Catch::Contains("7"));
}

TEST_CASE("NLLLoss of log_softmax is CrossEntropyLoss, ignored targets and class weights included", "[nn][loss]") {
  manual_seed(4);
  const Tensor logits = randn({6, 3, 4}) * 2.0;
  const Tensor target =
      tensor<int64_t>({0, 1, 2, -100, 1, 1, 0, 2, 2, 0, -100, 1, 0, 0, 1, 2, 2, 1, 0, 1, 2, 0, 1, 2}, {6, 4});
  const Tensor ce = CrossEntropyLoss()(logits, target), nll = NLLLoss()(log_softmax(logits, 1), target);
  CHECK(ce.item<double>() == Approx(nll.item<double>()).epsilon(1e-6));
  // All ignored: the mean has no element, NaN as in PyTorch.
  CHECK(
      std::isnan(NLLLoss()(log_softmax(logits, 1), full({6, 4}, -100.0, TensorOptions(DType::Int64))).item<double>()));
  // Gradients reach the input and the class weights.
  Tensor lp = log_softmax(logits, 1).detach().set_requires_grad(true);
  Tensor w = tensor(std::vector<double>{1.0, 2.0, 0.5}).to(DType::Float32).set_requires_grad(true);
  nll_loss(lp, target, w, -100, Reduction::Sum).backward();
  CHECK(lp.grad().defined());
  CHECK(w.grad().defined());
  // Element (0, 0, 0) has target 0 with weight 1: its gradient is -1; an ignored element's is 0.
  CHECK(lp.grad().select(0, 0).select(1, 0).select(0, 0).item<double>() == -1.0);
  CHECK(lp.grad().select(0, 0).select(1, 3).sum().item<double>() == 0.0);
}

TEST_CASE("BCEWithLogitsLoss trains a logistic regression to separate two classes", "[nn][loss]") {
  manual_seed(5);
  // Points around (2, 2) are class 1, around (-2, -2) class 0.
  const Tensor centers = cat({full({32, 2}, 2.0), full({32, 2}, -2.0)}, 0);
  const Tensor x = centers + randn({64, 2}) * 0.7;
  const Tensor y = cat({ones({32, 1}), zeros({32, 1})}, 0);
  auto model = std::make_shared<Linear>(2, 1);
  optim::SGD opt(model->parameters(), 0.5);
  BCEWithLogitsLoss criterion;
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    Tensor loss = criterion((*model)(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.1 * first);
  const Tensor predicted = gt((*model)(x), 0.0).to(DType::Float32);
  CHECK(eq(predicted, y).to(DType::Float32).mean().item<double>() > 0.95);
}
