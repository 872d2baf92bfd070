// The loss modules: each equals its functional loss with its options (bit for bit), prints as
// PyTorch's, keeps its weights as buffers; NLLLoss of log_softmax equals CrossEntropyLoss; a
// logistic regression trained with BCEWithLogitsLoss separates two classes, and an embedding
// trained with TripletMarginLoss separates two others.
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

TEST_CASE("CrossEntropyLoss takes class weights and class probabilities", "[nn][loss]") {
  manual_seed(6);
  const Tensor logits = randn({5, 4}) * 2.0;
  const Tensor target = tensor<int64_t>({3, 0, -100, 1, 3}, {5});
  const Tensor w = tensor(std::vector<double>{0.5, 2.0, 1.0, 3.0}).to(DType::Float32);
  CrossEntropyLoss weighted(w, -100, Reduction::Mean, 0.1);
  CHECK(bitwise_equal(weighted(logits, target), cross_entropy(logits, target, Reduction::Mean, -100, 0.1, w)));
  CHECK(weighted.named_buffers().size() == 1);
  CHECK(weighted.named_buffers()[0].first == "weight");
  CHECK_THROWS_WITH(CrossEntropyLoss(ones({2, 2})), Catch::Contains("CrossEntropyLoss") && Catch::Contains("1-d"));
  // Without smoothing, the weighted loss is NLLLoss of log_softmax with the same weights.
  CHECK(cross_entropy(logits, target, Reduction::Mean, -100, 0.0, w).item<double>() ==
        Approx(NLLLoss(w)(log_softmax(logits, 1), target).item<double>()).epsilon(1e-6));
  // Weights of all ones are no weights: the composed path agrees with the fused one, smoothing and
  // ignored targets included.
  for (Reduction red : {Reduction::Mean, Reduction::Sum}) {
    CHECK(cross_entropy(logits, target, red, -100, 0.3, ones({4})).item<double>() ==
          Approx(cross_entropy(logits, target, red, -100, 0.3).item<double>()).epsilon(1e-6));
  }

  // One-hot probabilities are class indices (smoothing included); weighted, their sums agree too (a
  // weighted Mean divides by the rows here, by the summed weights there, as PyTorch).
  const Tensor kept = tensor<int64_t>({3, 0, 2, 1, 3}, {5});
  const Tensor one_hot = eq(arange(4).reshape({1, 4}), kept.reshape({5, 1})).to(DType::Float32);
  CHECK(cross_entropy(logits, one_hot, Reduction::Mean, -100, 0.2).item<double>() ==
        Approx(cross_entropy(logits, kept, Reduction::Mean, -100, 0.2).item<double>()).epsilon(1e-6));
  CHECK(cross_entropy(logits, one_hot, Reduction::Sum, -100, 0.2, w).item<double>() ==
        Approx(cross_entropy(logits, kept, Reduction::Sum, -100, 0.2, w).item<double>()).epsilon(1e-6));
  // Soft labels (a mixup of two one-hot rows) give the mixed loss, and the gradient of the mean is
  // (softmax - p) / N.
  const Tensor other = tensor<int64_t>({1, 1, 0, 2, 0}, {5});
  const Tensor other_hot = eq(arange(4).reshape({1, 4}), other.reshape({5, 1})).to(DType::Float32);
  Tensor x = logits.detach().set_requires_grad(true);
  Tensor mixed = cross_entropy(x, one_hot * 0.7 + other_hot * 0.3);
  CHECK(mixed.item<double>() ==
        Approx(0.7 * cross_entropy(logits, kept).item<double>() + 0.3 * cross_entropy(logits, other).item<double>())
            .epsilon(1e-6));
  mixed.backward();
  const Tensor expected = (softmax(logits, 1) - (one_hot * 0.7 + other_hot * 0.3)) / 5.0;
  CHECK(max(abs(x.grad() - expected)).item<double>() < 1e-6);
}

TEST_CASE("BCELoss stays finite where a sigmoid saturated, and matches BCEWithLogitsLoss", "[nn][loss]") {
  // Probabilities of exactly 0 and 1: each log is clamped at -100, so a wrong certain prediction
  // costs 100 and the gradient is PyTorch's (x - t) / max(x (1 - x), 1e-12), finite.
  Tensor x = tensor(std::vector<double>{0.0, 1.0, 0.0, 1.0}).set_requires_grad(true);
  const Tensor t = tensor(std::vector<double>{0.0, 1.0, 1.0, 0.0});
  Tensor loss = BCELoss(Tensor(), Reduction::None)(x, t);
  CHECK(loss.select(0, 0).item<double>() == 0.0);
  CHECK(loss.select(0, 1).item<double>() == 0.0);
  CHECK(loss.select(0, 2).item<double>() == 100.0);
  CHECK(loss.select(0, 3).item<double>() == 100.0);
  loss.sum().backward();
  CHECK(x.grad().select(0, 2).item<double>() == -1e12);
  CHECK(x.grad().select(0, 3).item<double>() == 1e12);
  CHECK(x.grad().select(0, 0).item<double>() == 0.0);

  manual_seed(7);
  const Tensor logits = randn({6, 3}, TensorOptions(DType::Float64)), p = rand({6, 3}, TensorOptions(DType::Float64));
  const Tensor w = rand({3}, TensorOptions(DType::Float64)) + 0.5;
  CHECK(BCELoss(w)(sigmoid(logits), p).item<double>() ==
        Approx(BCEWithLogitsLoss(w)(logits, p).item<double>()).epsilon(1e-12));
  BCELoss with_weight(w, Reduction::Sum);
  CHECK(with_weight.str() == "BCELoss()");
  CHECK(with_weight.named_buffers()[0].first == "weight");
  // Its target is differentiable too: d/dt = log(1 - x) - log(x).
  Tensor pt = p.detach().set_requires_grad(true);
  binary_cross_entropy(sigmoid(logits), pt, Tensor(), Reduction::Sum).backward();
  CHECK(max(abs(pt.grad() + logits)).item<double>() < 1e-9);  // log(1 - s) - log(s) = -x
}

TEST_CASE("KLDivLoss is the KL divergence: zero for equal distributions, batchmean per sample", "[nn][loss]") {
  manual_seed(8);
  const Tensor a = randn({4, 6}, TensorOptions(DType::Float64)), b = randn({4, 6}, TensorOptions(DType::Float64));
  const Tensor p = softmax(a, 1), log_q = log_softmax(b, 1);
  CHECK(std::fabs(KLDivLoss(Reduction::BatchMean)(log_softmax(a, 1), p).item<double>()) < 1e-12);
  // batchmean: the per-sample KL divergence sum_c p (log p - log q), averaged over the 4 samples.
  const Tensor per_sample = sum(p * (log(p) - log_q), {1});
  CHECK(KLDivLoss(Reduction::BatchMean)(log_q, p).item<double>() ==
        Approx(mean(per_sample).item<double>()).epsilon(1e-12));
  CHECK(KLDivLoss(Reduction::Mean)(log_q, p).item<double>() ==
        Approx(sum(per_sample).item<double>() / 24.0).epsilon(1e-12));
  // log_target reads the target as log-probabilities: the same divergence.
  CHECK(KLDivLoss(Reduction::Sum, true)(log_q, log_softmax(a, 1)).item<double>() ==
        Approx(sum(per_sample).item<double>()).epsilon(1e-12));
  // The divergence is >= 0 and its gradient pulls q towards p: one step lowers it.
  Tensor logits = b.detach().set_requires_grad(true);
  Tensor kl = kl_div(log_softmax(logits, 1), p, Reduction::BatchMean);
  kl.backward();
  const Tensor stepped = kl_div(log_softmax(b - logits.grad() * 0.5, 1), p, Reduction::BatchMean);
  CHECK(kl.item<double>() > 0.0);
  CHECK(stepped.item<double>() < kl.item<double>());
  CHECK(KLDivLoss().str() == "KLDivLoss()");
  CHECK_THROWS_WITH(KLDivLoss(static_cast<Reduction>(9)), Catch::Contains("KLDivLoss") && Catch::Contains("9"));
  CHECK_THROWS_WITH(MSELoss(Reduction::BatchMean)(a, b), Catch::Contains("mse_loss") && Catch::Contains("BatchMean"));
}

TEST_CASE("metric-learning modules call their functional losses, print as PyTorch's and check options", "[nn][loss]") {
  manual_seed(9);
  const Tensor a = randn({6, 4}), p = randn({6, 4}), n = randn({6, 4});
  const Tensor pm = tensor<int64_t>({1, -1, 1, -1, 1, -1}, {6});
  CHECK(bitwise_equal(CosineEmbeddingLoss(0.25)(a, p, pm), cosine_embedding_loss(a, p, pm, 0.25)));
  CHECK(bitwise_equal(MarginRankingLoss(0.5, Reduction::Sum)(a.select(1, 0), p.select(1, 0), sign(n.select(1, 0))),
                      margin_ranking_loss(a.select(1, 0), p.select(1, 0), sign(n.select(1, 0)), 0.5, Reduction::Sum)));
  CHECK(bitwise_equal(TripletMarginLoss(0.5, 1.0, 1e-6, true, Reduction::None)(a, p, n),
                      triplet_margin_loss(a, p, n, 0.5, 1.0, 1e-6, true, Reduction::None)));
  CHECK(bitwise_equal(CosineSimilarity(0)(a, p), cosine_similarity(a, p, 0)));
  CHECK(bitwise_equal(PairwiseDistance(3.0, 1e-6, true)(a, p), pairwise_distance(a, p, 3.0, 1e-6, true)));
  CHECK(TripletMarginLoss().str() == "TripletMarginLoss()");
  CHECK(CosineEmbeddingLoss().str() == "CosineEmbeddingLoss()");
  CHECK(CosineSimilarity().str() == "CosineSimilarity()");
  CHECK_THROWS_WITH(TripletMarginLoss(-1.0), Catch::Contains("TripletMarginLoss") && Catch::Contains("margin"));
  CHECK_THROWS_WITH(TripletMarginLoss(1.0, 0.5), Catch::Contains("TripletMarginLoss") && Catch::Contains("0.5"));
  CHECK_THROWS_WITH(PairwiseDistance(0.0), Catch::Contains("PairwiseDistance") && Catch::Contains("order"));
  CHECK_THROWS_WITH(MarginRankingLoss(0.0, Reduction::BatchMean),
                    Catch::Contains("MarginRankingLoss") && Catch::Contains("BatchMean"));
}

TEST_CASE("a triplet loss pulls an embedding's same-class points together and pushes the others apart", "[nn][loss]") {
  // Two classes of 2-d points, embedded by a Linear layer to 2-d unit vectors; anchors and
  // positives share a class, negatives do not. SGD on the triplet loss must separate them.
  manual_seed(10);
  const Tensor centre0 = tensor({2.0f, 0.0f}, {1, 2}), centre1 = tensor({0.0f, 2.0f}, {1, 2});
  auto points = [](const Tensor& c) { return c + 0.3 * randn({16, 2}); };
  auto embed = std::make_shared<Linear>(2, 2);
  optim::SGD opt(embed->parameters(), 0.1);
  // Unit vectors lie at most 2 apart: a margin of 1.5 asks for nearly opposite classes.
  TripletMarginLoss criterion(1.5);
  auto loss_now = [&] {
    const Tensor e0 = normalize(embed->forward(points(centre0))), e1 = normalize(embed->forward(points(centre1)));
    const Tensor a = cat({e0.narrow(0, 0, 8), e1.narrow(0, 0, 8)}), p = cat({e0.narrow(0, 8, 8), e1.narrow(0, 8, 8)});
    const Tensor n = cat({e1.narrow(0, 8, 8), e0.narrow(0, 0, 8)});
    return criterion(a, p, n);
  };
  const double first = loss_now().item<double>();
  REQUIRE(first > 0.1);
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    loss_now().backward();
    opt.step();
  }
  const double last = loss_now().item<double>();
  INFO("first " << first << ", last " << last);
  CHECK(last < 0.25 * first);
  // Distances of 1.5 and more between unit vectors are angles past 90 degrees: a negative cosine.
  const Tensor c0 = normalize(embed->forward(centre0)), c1 = normalize(embed->forward(centre1));
  CHECK(cosine_similarity(c0, c1).item<double>() < 0.0);
}

TEST_CASE("likelihood and margin modules call their functional losses, print as PyTorch's, check options",
          "[nn][loss]") {
  manual_seed(11);
  const Tensor x = randn({4, 5}), y = rand({4, 5}) * 3.0, v = rand({4}) + 0.1;
  const Tensor pm = sign(randn({4, 5})), classes = tensor<int64_t>({1, 0, 4, 2}, {4});
  const Tensor bits = gt(randn({4, 5}), 0.0).to(DType::Float32), w = rand({5}) + 0.5;
  const Tensor lists = tensor<int64_t>({0, 3, -1, 0, 0, 4, -1, 1, 2, 2, 2, 1, 0, -1, -1, -1, -1, -1, -1, -1}, {4, 5});
  CHECK(bitwise_equal(PoissonNLLLoss(false, true, 1e-6, Reduction::Sum)(exp(x), y),
                      poisson_nll_loss(exp(x), y, false, true, 1e-6, Reduction::Sum)));
  CHECK(bitwise_equal(GaussianNLLLoss(true, 1e-3)(x, y, v), gaussian_nll_loss(x, y, v, true, 1e-3)));
  CHECK(bitwise_equal(SoftMarginLoss(Reduction::None)(x, pm), soft_margin_loss(x, pm, Reduction::None)));
  CHECK(bitwise_equal(HingeEmbeddingLoss(0.5)(x, pm), hinge_embedding_loss(x, pm, 0.5)));
  CHECK(bitwise_equal(MultiLabelSoftMarginLoss(w)(x, bits), multilabel_soft_margin_loss(x, bits, w)));
  CHECK(bitwise_equal(MultiMarginLoss(2, 0.5, w, Reduction::Sum)(x, classes),
                      multi_margin_loss(x, classes, 2, 0.5, w, Reduction::Sum)));
  CHECK(bitwise_equal(MultiLabelMarginLoss()(x, lists), multilabel_margin_loss(x, lists)));
  CHECK(PoissonNLLLoss().str() == "PoissonNLLLoss()");
  CHECK(GaussianNLLLoss().str() == "GaussianNLLLoss()");
  CHECK(MultiLabelMarginLoss().str() == "MultiLabelMarginLoss()");
  MultiMarginLoss weighted(1, 1.0, w);
  REQUIRE(weighted.named_buffers().size() == 1);
  CHECK(weighted.named_buffers()[0].first == "weight");
  CHECK(MultiLabelSoftMarginLoss(w).named_buffers()[0].first == "weight");
  CHECK_THROWS_WITH(MultiMarginLoss(3), Catch::Contains("MultiMarginLoss") && Catch::Contains("1 or 2"));
  CHECK_THROWS_WITH(MultiMarginLoss(1, 1.0, ones({2, 2})),
                    Catch::Contains("MultiMarginLoss") && Catch::Contains("1-d"));
  CHECK_THROWS_WITH(PoissonNLLLoss(true, false, -1.0), Catch::Contains("PoissonNLLLoss") && Catch::Contains("eps"));
  CHECK_THROWS_WITH(GaussianNLLLoss(false, NAN), Catch::Contains("GaussianNLLLoss") && Catch::Contains("eps"));
  CHECK_THROWS_WITH(HingeEmbeddingLoss(INFINITY), Catch::Contains("HingeEmbeddingLoss") && Catch::Contains("margin"));
  CHECK_THROWS_WITH(SoftMarginLoss(Reduction::BatchMean), Catch::Contains("SoftMarginLoss"));
}

TEST_CASE("gaussian_nll_loss clamps the variance at eps and passes its gradient through, as PyTorch", "[nn][loss]") {
  const TensorOptions f64(DType::Float64);
  const Tensor x = tensor({0.5, -1.0, 2.0}), t = tensor({0.0, 0.0, 1.0});
  Tensor var = tensor({1e-9, 0.0, 2.0}).set_requires_grad(true);
  const double eps = 1e-3;
  Tensor loss = gaussian_nll_loss(x, t, var, false, eps, Reduction::Sum);
  // The value reads eps where var is below it.
  double expected = 0;
  const double xs[] = {0.5, -1.0, 2.0}, ts[] = {0.0, 0.0, 1.0}, vs[] = {eps, eps, 2.0};
  for (int i = 0; i < 3; ++i) expected += 0.5 * (std::log(vs[i]) + (xs[i] - ts[i]) * (xs[i] - ts[i]) / vs[i]);
  CHECK(loss.item<double>() == Approx(expected).epsilon(1e-12));
  // The gradient is d/dv at the clamped value, 0.5 (1/v - d^2/v^2), not the clamp's zero.
  loss.backward();
  const Tensor g = var.grad();
  for (int i = 0; i < 3; ++i) {
    const double d2 = (xs[i] - ts[i]) * (xs[i] - ts[i]);
    CHECK(g[i].item<double>() == Approx(0.5 * (1.0 / vs[i] - d2 / (vs[i] * vs[i]))).epsilon(1e-12));
  }
  // One variance per row, as [N] or [N, 1], is that variance broadcast along the row.
  manual_seed(12);
  const Tensor mu = randn({3, 4}, f64), target = randn({3, 4}, f64), rows = rand({3}, f64) + 0.5;
  const Tensor full = gaussian_nll_loss(mu, target, rows.unsqueeze(1).expand({3, 4}), false, 1e-6, Reduction::None);
  CHECK(bitwise_equal(gaussian_nll_loss(mu, target, rows, false, 1e-6, Reduction::None), full));
  CHECK(bitwise_equal(gaussian_nll_loss(mu, target, rows.unsqueeze(1), false, 1e-6, Reduction::None), full));
}

TEST_CASE("poisson_nll_loss's Stirling term starts above a count of 1 and its minimum is at the counts", "[nn][loss]") {
  // full adds t log t - t + 0.5 log(2 pi t) only where t > 1.
  const Tensor rate = tensor({0.0, 0.0, 0.0}), counts = tensor({0.5, 1.0, 3.0});
  const Tensor plain = poisson_nll_loss(rate, counts, true, false, 1e-8, Reduction::None);
  const Tensor with_full = poisson_nll_loss(rate, counts, true, true, 1e-8, Reduction::None);
  CHECK(with_full[0].item<double>() == plain[0].item<double>());
  CHECK(with_full[1].item<double>() == plain[1].item<double>());
  CHECK(with_full[2].item<double>() - plain[2].item<double>() ==
        Approx(3.0 * std::log(3.0) - 3.0 + 0.5 * std::log(2.0 * M_PI * 3.0)).epsilon(1e-6));
  // The log-rate's gradient exp(x) - t vanishes at x = log t: the loss is least at the counts.
  Tensor log_rate = tensor({std::log(0.5), std::log(1.0), std::log(3.0)}).set_requires_grad(true);
  poisson_nll_loss(log_rate, counts, true, true, 1e-8, Reduction::Sum).backward();
  CHECK(max(abs(log_rate.grad())).item<double>() < 1e-6);
}

TEST_CASE("MultiMarginLoss trains a linear classifier until each class outscores the others by the margin",
          "[nn][loss]") {
  manual_seed(13);
  // Three Gaussian blobs in 2-d, one per class.
  const Tensor centres = tensor({3.0f, 0.0f, -1.5f, 2.6f, -1.5f, -2.6f}, {3, 2});
  const Tensor labels = repeat(arange(0, 3), {20});
  const Tensor points = index_select(centres, 0, labels) + 0.4 * randn({60, 2});
  auto model = std::make_shared<Linear>(2, 3);
  optim::SGD opt(model->parameters(), 0.1);
  MultiMarginLoss criterion;
  const double before = criterion(model->forward(points), labels).item<double>();
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = criterion(model->forward(points), labels);
    loss.backward();
    opt.step();
  }
  const Tensor scores = model->forward(points);
  CHECK(criterion(scores, labels).item<double>() < 0.05 * before);
  CHECK(eq(argmax(scores, 1), labels).to(DType::Float32).mean().item<double>() == 1.0);
}

namespace {
// The labels an alignment spells: repeats merged, then blanks (0) dropped.
std::vector<int64_t> collapse(const std::vector<int64_t>& path) {
  std::vector<int64_t> out;
  for (size_t t = 0; t < path.size(); ++t) {
    if (path[t] != 0 && (t == 0 || path[t] != path[t - 1])) out.push_back(path[t]);
  }
  return out;
}
}  // namespace

TEST_CASE("ctc_loss is -log of the summed probability of every alignment that spells the target", "[nn][loss]") {
  // All 3^T alignments of T frames over {blank, 1, 2}, enumerated: sample 0 uses all 5 frames,
  // sample 1 its first 4; targets with a repeat, distinct labels and none.
  manual_seed(11);
  const int64_t frames = 5, classes = 3;
  const Tensor lp = log_softmax(randn({frames, 3, classes}, DType::Float64), -1);
  const std::vector<std::vector<int64_t>> targets = {{1, 1}, {2, 1}, {}};
  const std::vector<int64_t> lengths = {5, 4, 3};
  const Tensor padded = tensor<int64_t>({1, 1, 2, 1, 0, 0}, {3, 2});
  const Tensor losses = ctc_loss(lp, padded, lengths, {2, 2, 0}, 0, Reduction::None);
  const std::vector<double> v = lp.to_vector_double(), got = losses.to_vector_double();
  for (int64_t i = 0; i < 3; ++i) {
    const int64_t t_len = lengths[static_cast<size_t>(i)];
    double total = 0;
    std::vector<int64_t> path(static_cast<size_t>(t_len), 0);
    for (int64_t code = 0; code < static_cast<int64_t>(std::pow(classes, t_len)); ++code) {
      int64_t rest = code;
      double logp = 0;
      for (int64_t t = 0; t < t_len; ++t) {
        path[static_cast<size_t>(t)] = rest % classes;
        rest /= classes;
        logp += v[static_cast<size_t>((t * 3 + i) * classes + path[static_cast<size_t>(t)])];
      }
      if (collapse(path) == targets[static_cast<size_t>(i)]) total += std::exp(logp);
    }
    INFO("sample " << i);
    CHECK(got[static_cast<size_t>(i)] == Approx(-std::log(total)).epsilon(1e-12));
  }
  // Concatenated targets, the tensor-length overload and unbatched samples give the same losses.
  const Tensor concatenated = ctc_loss(lp, tensor<int64_t>({1, 1, 2, 1}, {4}), tensor<int64_t>({5, 4, 3}, {3}),
                                       tensor<int64_t>({2, 2, 0}, {3}), 0, Reduction::None);
  CHECK(bitwise_equal(concatenated, losses));
  const Tensor one = ctc_loss(lp.select(1, 1).narrow(0, 0, 4), tensor<int64_t>({2, 1}, {2}), tensor<int64_t>({4}),
                              tensor<int64_t>({2}), 0, Reduction::None);
  CHECK(one.dim() == 0);
  CHECK(one.item<double>() == Approx(got[1]).epsilon(1e-14));
  // Mean divides each loss by its target length (at least 1) before averaging; Sum adds them.
  const std::vector<double>& l = got;
  CHECK(ctc_loss(lp, padded, lengths, {2, 2, 0}).item<double>() == Approx((l[0] / 2 + l[1] / 2 + l[2]) / 3));
  CHECK(ctc_loss(lp, padded, lengths, {2, 2, 0}, 0, Reduction::Sum).item<double>() == Approx(l[0] + l[1] + l[2]));
}

TEST_CASE("ctc_loss's gradient is minus each frame's label posteriors: they sum to 1 per counted frame", "[nn][loss]") {
  manual_seed(12);
  Tensor lp = log_softmax(randn({6, 2, 4}, DType::Float64), -1).detach();
  lp.set_requires_grad(true);
  ctc_loss(lp, tensor<int64_t>({1, 2, 2, 3, 1, 0}, {2, 3}), {6, 4}, {3, 2}, 0, Reduction::Sum).backward();
  const Tensor per_frame = lp.grad().sum({2});  // [T, N]
  const std::vector<double> g = per_frame.to_vector_double();
  for (int64_t t = 0; t < 6; ++t) {
    INFO("frame " << t);
    CHECK(g[static_cast<size_t>(t * 2)] == Approx(-1.0).epsilon(1e-12));
    CHECK(g[static_cast<size_t>(t * 2 + 1)] == Approx(t < 4 ? -1.0 : 0.0).margin(1e-12));
  }
  // Every posterior lies in [0, 1]: no gradient element is positive or below -1.
  CHECK(amax(lp.grad(), {}).item<double>() <= 1e-15);
  CHECK(amin(lp.grad(), {}).item<double>() >= -1.0 - 1e-12);
}

TEST_CASE("CTCLoss calls ctc_loss with its options and trains a per-frame classifier to spell a target", "[nn][loss]") {
  CHECK_THROWS_WITH(CTCLoss(-1), Catch::Contains("CTCLoss") && Catch::Contains("-1"));
  CHECK(CTCLoss().str() == "CTCLoss()");
  manual_seed(13);
  // Ten frames of fixed random features; a linear layer learns scores that spell 3 1 2 2.
  const Tensor features = randn({10, 1, 16});
  const Tensor target = tensor<int64_t>({3, 1, 2, 2}, {1, 4});
  const Tensor input_lengths = tensor<int64_t>({10}, {1}), target_lengths = tensor<int64_t>({4}, {1});
  auto model = std::make_shared<Linear>(16, 4);
  CTCLoss criterion(0, Reduction::Sum, true);
  const Tensor direct = ctc_loss(log_softmax(model->forward(features), -1), target, input_lengths, target_lengths, 0,
                                 Reduction::Sum, true);
  CHECK(bitwise_equal(criterion(log_softmax(model->forward(features), -1), target, input_lengths, target_lengths),
                      direct));
  const double before = direct.item<double>();
  optim::SGD opt(model->parameters(), 0.1, 0.9);
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    criterion(log_softmax(model->forward(features), -1), target, input_lengths, target_lengths).backward();
    opt.step();
  }
  const Tensor lp = log_softmax(model->forward(features), -1).detach();
  CHECK(criterion(lp, target, input_lengths, target_lengths).item<double>() < 0.05 * before);
  // Greedy decoding (the best class per frame, collapsed) spells the target.
  const std::vector<double> best = argmax(lp.select(1, 0), 1).to_vector_double();
  CHECK(collapse(std::vector<int64_t>(best.begin(), best.end())) == std::vector<int64_t>{3, 1, 2, 2});
}
