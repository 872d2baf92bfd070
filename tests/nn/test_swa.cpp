// Weight averaging: AveragedModel's SWA and EMA updates against the averages written out in double
// arithmetic, buffers copied or averaged, name, shape and dtype mismatches, the state a checkpoint
// keeps; update_bn's statistics against the data's; SWALR against PyTorch's annealing formula.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/norm.h"
#include "nn/optim/sgd.h"
#include "nn/optim/swa.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::nn::optim;

namespace {

std::vector<double> vals(const Tensor& t) { return t.to(DType::Float64).contiguous().to_vector<double>(); }

// A Linear(3, 2) whose weight and bias hold `base` + their positions.
std::shared_ptr<Linear> linear_at(double base) {
  auto m = std::make_shared<Linear>(3, 2);
  NoGradGuard g;
  m->weight.copy_(arange(0, 6).to(DType::Float32).reshape({2, 3}) + base);
  m->bias.copy_(arange(0, 2).to(DType::Float32) + base);
  return m;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(tol));
}

}  // namespace

TEST_CASE("AveragedModel's SWA is the equal average of every model it was given", "[swa]") {
  auto average = std::make_shared<Linear>(3, 2);
  AveragedModel swa(average);
  const std::vector<double> bases{1.0, -2.0, 4.5, 0.25};
  for (double b : bases) swa.update_parameters(*linear_at(b));
  CHECK(swa.num_averaged() == 4);
  double mean = 0;
  for (double b : bases) mean += b / 4;
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(i + mean);
  check_close(vals(average->weight), want);
  check_close(vals(average->bias), {mean, 1 + mean});
  CHECK(average->weight.requires_grad());  // still a parameter
}

TEST_CASE("AveragedModel's EMA copies the first model, then moves by 1 - decay", "[swa]") {
  auto average = std::make_shared<Linear>(3, 2);
  AveragedModel ema(average, ema_average(0.9));
  ema.update_parameters(*linear_at(10.0));
  check_close(vals(average->bias), {10.0, 11.0});
  ema.update_parameters(*linear_at(0.0));
  ema.update_parameters(*linear_at(0.0));
  // 10 decayed twice by 0.9 toward 0.
  check_close(vals(average->bias), {10.0 * 0.81, 1 + 10.0 * 0.81}, 1e-5);
  CHECK(ema.num_averaged() == 3);
  CHECK_THROWS_WITH(ema_average(1.5), Catch::Contains("ema_average") && Catch::Contains("1.5"));
}

TEST_CASE("AveragedModel copies buffers, or averages the floating ones with use_buffers", "[swa]") {
  auto model_at = [](double mean, int64_t batches) {
    auto bn = std::make_shared<BatchNorm1d>(2);
    NoGradGuard g;
    bn->running_mean.fill_(mean);
    bn->num_batches_tracked.fill_(batches);
    return bn;
  };
  for (bool use_buffers : {false, true}) {
    auto average = std::make_shared<BatchNorm1d>(2);
    AveragedModel avg(average, swa_average(), use_buffers);
    avg.update_parameters(*model_at(2.0, 5));
    avg.update_parameters(*model_at(4.0, 7));
    check_close(vals(average->running_mean), use_buffers ? std::vector<double>{3, 3} : std::vector<double>{4, 4});
    CHECK(average->num_batches_tracked.item<int64_t>() == 7);  // an integer buffer is copied either way
  }
}

TEST_CASE("AveragedModel follows a model of another dtype and keeps its state in state_dict", "[swa]") {
  auto average = std::make_shared<Linear>(3, 2);
  average->to(DType::Float64);
  AveragedModel avg(average, ema_average(0.5));
  auto model = linear_at(1.0);
  model->to(DType::BFloat16);
  avg.update_parameters(*model);
  CHECK(average->weight.dtype() == DType::Float64);
  check_close(vals(average->bias), {1.0, 2.0});
  const auto state = avg.state_dict();
  REQUIRE(state.count("n_averaged") == 1);
  REQUIRE(state.count("module.weight") == 1);
  CHECK(state.at("n_averaged").item<int64_t>() == 1);
  // A fresh average loading that state continues the average instead of copying the next model.
  auto again = std::make_shared<Linear>(3, 2);
  again->to(DType::Float64);
  AveragedModel resumed(again, ema_average(0.5));
  resumed.load_state_dict(state);
  resumed.update_parameters(*linear_at(3.0));
  check_close(vals(again->bias), {2.0, 3.0});
  CHECK(resumed.num_averaged() == 2);
}

TEST_CASE("AveragedModel names the parameter an average made unlike the model differs in", "[swa]") {
  AveragedModel avg(std::make_shared<Linear>(3, 2));
  CHECK_THROWS_WITH(avg.update_parameters(Linear(4, 2)), Catch::Contains("update_parameters") &&
                                                             Catch::Contains("'weight'") && Catch::Contains("[2, 4]") &&
                                                             Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(avg.update_parameters(Linear(3, 2, false)),
                    Catch::Contains("update_parameters") && Catch::Contains("1 parameter"));
  Sequential other{std::make_shared<Linear>(3, 2)};
  CHECK_THROWS_WITH(avg.update_parameters(other), Catch::Contains("'0.weight'") && Catch::Contains("'weight'"));
  CHECK(avg.num_averaged() == 0);  // nothing was averaged
  CHECK_THROWS_WITH(AveragedModel(nullptr), Catch::Contains("AveragedModel") && Catch::Contains("null"));
}

TEST_CASE("update_bn sets running statistics to the average of the batches' statistics", "[swa]") {
  auto bn = std::make_shared<BatchNorm1d>(2);
  Sequential model{std::make_shared<Linear>(2, 2), bn};
  model.eval();
  bn->momentum = 0.3;
  const TensorList batches{randn({8, 2}), randn({8, 2}) * 3.0 + 1.0, randn({8, 2}) - 2.0};
  update_bn(model, batches);
  CHECK_FALSE(model.is_training());
  REQUIRE(bn->momentum.has_value());
  CHECK(*bn->momentum == 0.3);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 3);
  // What the Linear layer gives each batch, and its statistics: the mean of the batch means and of
  // the unbiased batch variances (the cumulative average momentum none keeps).
  std::vector<double> want_mean(2, 0), want_var(2, 0);
  for (const Tensor& b : batches) {
    const Tensor y = (*model[0])(b);
    const std::vector<double> m = vals(y.mean({0})), v = vals(var(y, {0}));
    for (int c = 0; c < 2; ++c) {
      want_mean[c] += m[c] / 3;
      want_var[c] += v[c] / 3;
    }
  }
  check_close(vals(bn->running_mean), want_mean, 1e-5);
  check_close(vals(bn->running_var), want_var, 1e-4);
  // Without batch norm the data is never run.
  Linear plain(2, 2);
  bool ran = false;
  update_bn(plain, [&] { ran = true; });
  CHECK_FALSE(ran);
}

TEST_CASE("SWALR anneals from the initial lr to swa_lr and holds it", "[swa]") {
  // PyTorch's anneal: alpha = (1 - cos(pi t)) / 2, t = step / anneal_epochs clamped to [0, 1].
  for (int64_t step = 0; step <= 6; ++step) {
    const double t = std::min(1.0, step / 4.0);
    const double alpha = (1 - std::cos(std::numbers::pi * t)) / 2;
    CHECK(swa_lr(step, 0.1, 0.02, 4) == Approx(0.02 * alpha + 0.1 * (1 - alpha)));
    CHECK(swa_lr(step, 0.1, 0.02, 4, false) == Approx(0.02 * t + 0.1 * (1 - t)));
  }
  CHECK(swa_lr(0, 0.1, 0.02, 0) == Approx(0.02));
  Tensor p = zeros({2});
  p.set_requires_grad(true);
  std::vector<ParamGroup> groups(2);
  groups[0].params = {p};
  groups[0].lr = 0.1;
  groups[1].params = {zeros({1})};
  groups[1].lr = 0.01;
  SGD sgd(groups);
  SWALR sched(sgd, 0.1, 0.05, 2, false);
  CHECK(sgd.lr(0) == Approx(0.1));
  sched.step();
  CHECK(sgd.lr(0) == Approx(0.075));
  CHECK(sgd.lr(1) == Approx(0.0075));  // in proportion to the group's initial lr
  sched.step();
  sched.step();
  CHECK(sgd.lr(0) == Approx(0.05));
  CHECK_THROWS_WITH(SWALR(sgd, 0.1, -1.0), Catch::Contains("swa_lr") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(swa_lr(0, 0.1, 0.1, -2), Catch::Contains("anneal_steps") && Catch::Contains("-2"));
}

TEST_CASE("AveragedModel hands a custom rule the count as a 0-d int64 tensor, 0 at the first update", "[swa]") {
  std::vector<int64_t> seen;
  auto average = std::make_shared<Linear>(3, 2);
  AveragedModel avg(average, [&](const TensorList& averages, const TensorList& models, const Tensor& n) {
    CHECK(n.dim() == 0);
    CHECK(n.dtype() == DType::Int64);
    seen.push_back(n.item<int64_t>());
    for (size_t i = 0; i < averages.size(); ++i) {
      Tensor a = averages[i];
      a.copy_(models[i]);
    }
  });
  for (double b : {1.0, 2.0, 3.0}) avg.update_parameters(*linear_at(b));
  CHECK(seen == std::vector<int64_t>{0, 1, 2});
  check_close(vals(average->bias), {3.0, 4.0});
}
