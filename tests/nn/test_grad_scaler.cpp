// GradScaler (dynamic loss scaling) and its two ops on the CPU. The scales are powers of two, and
// multiplying by a power of two commutes with float rounding (barring overflow and subnormals), so
// a scaled run must equal an unscaled one bit for bit: that is what most checks here compare
// against. Skipped steps must leave parameters, optimizer state and device step counters untouched,
// bitwise; the scale's backoff and growth are checked step by step with a small growth_interval.
// The checks that mean the same on the GPU live in tests/nn/grad_scaler_checks.h, which
// tests/cuda/test_grad_scaler_cuda.cpp runs on CUDA tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/foreach.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"
#include "tests/bitwise.h"
#include "tests/fake_cuda.h"
#include "tests/nn/grad_scaler_checks.h"
#include "tests/temp_dir.h"

using namespace kiln;
using kiln::nn::amp::GradScaler;
using namespace kiln::test;

namespace {


}  // namespace

TEST_CASE("a non-finite gradient skips the step bitwise and halves the scale", "[amp]") {
  const double bad = GENERATE(values({kInf, -kInf, kNaN}));
  const bool unscale_first = GENERATE(false, true);
  test::check_non_finite_grad_skips_the_step(Device::cpu(), bad, unscale_first);
}

TEST_CASE("the scale grows exactly after growth_interval clean steps and backs off after inf", "[amp]") {
  test::check_scale_growth_and_backoff(Device::cpu());
}

TEST_CASE("a scale that would overflow float32 does not grow", "[amp]") {
  Tensor scale = full({}, 3e38), tracker = zeros({}, DType::Int32), found = zeros({});
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 1);
  CHECK(scale.item<float>() == 3e38f);
  CHECK(tracker.item<int64_t>() == 0);
  scale.fill_(1e38);
  amp_update_scale_(scale, tracker, found, 2.0, 0.5, 1);
  CHECK(scale.item<float>() == 2e38f);
}

// Backed off below float32's smallest normal number, the scale would be a subnormal whose
// reciprocal, the unscale factor, is inf: the next clean step's gradients became inf and NaN, with
// no found-inf flag to skip it. The scale stays where it is instead; the tracker restarts.
TEST_CASE("a scale that would back off below float32's normal range stays", "[amp]") {
  Tensor scale = full({}, 0x1p-125), tracker = full({}, 5, DType::Int32), inf = ones({});
  amp_update_scale_(scale, tracker, inf, 2.0, 0.5, 10);
  CHECK(scale.item<float>() == 0x1p-126f);
  CHECK(tracker.item<int64_t>() == 0);
  amp_update_scale_(scale, tracker, inf, 2.0, 0.5, 10);
  CHECK(scale.item<float>() == 0x1p-126f);
  // Through GradScaler: a run of overflowing steps from the smallest scale, then a clean one that
  // steps by the true gradient.
  GradScaler::Options o;
  o.init_scale = 0x1p-124;
  GradScaler scaler(o);
  Tensor w = ones({2});
  w.set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.25);
  for (const bool overflow : {true, true, true, true, false}) {
    opt.zero_grad();
    scaler.scale(sum(mul(w, overflow ? full({2}, INFINITY) : full({2}, 2.0)))).backward();
    scaler.step(opt);
    scaler.update();
  }
  CHECK(scaler.get_scale() == 0x1p-126);
  CHECK(w.to_vector<float>() == std::vector<float>{0.5f, 0.5f});
}

TEST_CASE("scaled training equals unscaled training bit for bit when nothing overflows", "[amp]") {
  const bool unscale_first = GENERATE(false, true);
  test::check_scaled_training_matches_unscaled(Device::cpu(), unscale_first, /*clip=*/false);
}

TEST_CASE("clipping after unscale_ equals clipping the unscaled gradients", "[amp]") {
  const Batch b = make_batch(8, Device::cpu());
  manual_seed(9);
  auto plain = make_mlp();
  manual_seed(9);
  auto scaled = make_mlp();
  nn::optim::SGD opt_plain(plain->parameters(), 0.5, 0.9), opt_scaled(scaled->parameters(), 0.5, 0.9);
  GradScaler scaler;
  for (int i = 0; i < 3; ++i) {
    INFO("step " << i);
    opt_plain.zero_grad();
    mse_loss(plain->forward(b.x), b.y).backward();
    const Tensor norm_plain = nn::optim::clip_grad_norm_(plain->parameters(), 1e-3);

    opt_scaled.zero_grad();
    scaler.scale(mse_loss(scaled->forward(b.x), b.y)).backward();
    // Before unscale_ the norm is the scale times too large: clipping then would be wrong.
    CHECK(nn::optim::clip_grad_norm_(scaled->parameters(), 1e30).item<double>() ==
          Approx(norm_plain.item<double>() * 65536.0).epsilon(1e-6));
    scaler.unscale_(opt_scaled);
    const Tensor norm_scaled = nn::optim::clip_grad_norm_(scaled->parameters(), 1e-3);
    REQUIRE(norm_plain.item<double>() > 1e-3);  // the clip is active
    CHECK(bitwise_equal(norm_plain, norm_scaled));
    CHECK(same_bits(opt_plain.grads(), opt_scaled.grads()));

    opt_plain.step();
    scaler.step(opt_scaled);
    scaler.update();
    CHECK(same_bits(plain->parameters(), scaled->parameters()));
  }
}

TEST_CASE("float16 gradients that underflow without scaling survive with it", "[amp]") {
  // d loss / d h = k * c with k = 2^-17 and |c| ~ 1e-3: about 1e-8, below float16's smallest
  // subnormal (2^-24, 6e-8), so the float16 backward rounds it to zero.
  const double k = std::ldexp(1.0, -17);
  const Tensor c = tensor(std::vector<double>{1e-3, -2e-3, 3e-3, 5e-4}).to(DType::Float16);
  const std::vector<double> cv = c.to_vector_double();

  SECTION("float32 master weights, float16 compute") {
    auto loss_of = [&](const Tensor& w) { return mul(sum(mul(w.to(DType::Float16), c)).to(DType::Float32), k); };
    Tensor w = ones({4}).set_requires_grad(true);
    loss_of(w).backward();
    for (double g : w.grad().to_vector_double()) CHECK(g == 0.0);

    nn::optim::SGD opt({w}, 1.0);
    GradScaler scaler;
    opt.zero_grad();
    scaler.scale(loss_of(w)).backward();
    const std::vector<double> scaled = w.grad().to_vector_double();
    for (size_t i = 0; i < cv.size(); ++i) CHECK(scaled[i] != 0.0);
    scaler.unscale_(opt);
    const std::vector<double> g = w.grad().to_vector_double();
    for (size_t i = 0; i < cv.size(); ++i) {
      INFO("element " << i << ": " << g[i] << " vs " << k * cv[i]);
      // One float16 rounding of k * c * 2^16 (2^-11 relative); the rest is exact powers of two.
      CHECK(std::abs(g[i] - k * cv[i]) <= std::abs(k * cv[i]) * std::ldexp(1.0, -11));
    }
  }

  SECTION("a float16 parameter holds the scaled gradient") {
    auto loss_of = [&](const Tensor& w) { return mul(sum(mul(w, c)).to(DType::Float32), k); };
    Tensor w = ones({4}, DType::Float16).set_requires_grad(true);
    loss_of(w).backward();
    for (double g : w.grad().to_vector_double()) CHECK(g == 0.0);
    w.set_grad(Tensor());
    GradScaler scaler;
    scaler.scale(loss_of(w)).backward();
    const std::vector<double> g = w.grad().to_vector_double();
    for (size_t i = 0; i < cv.size(); ++i) {
      CHECK(std::abs(g[i] - 65536.0 * k * cv[i]) <= std::abs(65536.0 * k * cv[i]) * std::ldexp(1.0, -11));
    }
    // step() without unscale_ divides by the scale inside the update's float32 math, where 1e-8 is
    // representable, so the update is not lost (unscaling the float16 gradient first would round it
    // to zero again). lr = 2^20 makes the step (8c, about 1e-2) visible next to 1 in float16.
    nn::optim::SGD opt({w}, 1048576.0);
    scaler.step(opt);
    scaler.update();
    const std::vector<double> after = w.to_vector_double();
    for (size_t i = 0; i < cv.size(); ++i) {
      INFO("element " << i << ": " << after[i]);
      const double expected = 1.0 - 1048576.0 * k * cv[i];
      CHECK(std::abs(after[i] - expected) <= std::ldexp(1.0, -9));
      CHECK(after[i] != 1.0);
    }
  }
}

// A float16 loss with dims beside the float32 0-d scale: result_type would take the scale in float16,
// where the first scale, 2^16, is inf; scale() multiplies in float32 and rounds the product once.
TEST_CASE("a float16 loss with dims is scaled in float32 and kept float16", "[amp]") {
  Tensor loss = tensor(std::vector<double>{0.0625, -0.5, 3e-5}).to(DType::Float16).set_requires_grad(true);
  GradScaler scaler;
  const Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == DType::Float16);
  const std::vector<double> want = mul(loss.detach().to(DType::Float32), 65536.0).to(DType::Float16).to_vector_double();
  CHECK(scaled.to_vector_double() == want);
  CHECK(want[0] == 4096.0);
  CHECK(want[1] == -32768.0);
  mul(scaled, tensor(std::vector<double>{0x1p-20, 0x1p-20, 0x1p-20}).to(DType::Float16)).sum().backward();
  REQUIRE(loss.grad().defined());
  CHECK(loss.grad().dtype() == DType::Float16);
  for (double g : loss.grad().to_vector_double()) CHECK(g == 0x1p-4);  // 2^-20 * 2^16
}

TEST_CASE("two optimizers: only the one with inf skips, and any inf backs the scale off", "[amp]") {
  manual_seed(10);
  Tensor a = randn({3}).set_requires_grad(true), b = randn({2}).set_requires_grad(true);
  nn::optim::SGD opt_a({a}, 0.25), opt_b({b}, 0.25);
  GradScaler scaler(small_interval(100));
  scaler.scale(add(sum(mul(a, a)), sum(mul(b, b)))).backward();
  poison_grad(a, kInf);
  const Tensor a0 = a.detach().clone(), b0 = b.detach().clone();
  scaler.step(opt_a);
  scaler.step(opt_b);
  scaler.update();
  CHECK(bitwise_equal(a, a0));
  CHECK_FALSE(bitwise_equal(b, b0));
  // b stepped with its true gradient 2b: b0 - 0.25 * 2 * b0 = b0 / 2.
  CHECK(bitwise_equal(b, mul(b0, 0.5)));
  CHECK(scaler.get_scale() == 512.0);
}

TEST_CASE("GradScaler restores the optimizer's own grad-scaling tensors after step", "[amp]") {
  Tensor w = ones({2}).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.5);
  const Tensor own_inf = zeros({}), own_scale = full({}, 2.0);
  opt.set_grad_scaling(own_inf, own_scale);
  GradScaler scaler;
  scaler.scale(sum(w)).backward();
  scaler.step(opt);
  CHECK(opt.found_inf().is_same(own_inf));
  CHECK(opt.grad_scale().is_same(own_scale));
  // During the step the scaler's tensors were in charge: the true gradient 1 was applied.
  CHECK(w.to_vector_double() == std::vector<double>{0.5, 0.5});
  scaler.update();
}

TEST_CASE("unscale_ handles strided gradients and gradients of several dtypes", "[amp]") {
  Tensor a = zeros({2, 3}).set_requires_grad(true);
  Tensor b = zeros({5}, DType::BFloat16).set_requires_grad(true);
  Tensor c = zeros({2}, DType::Float64).set_requires_grad(true);
  nn::optim::SGD opt({a, b, c}, 1.0);
  GradScaler scaler(small_interval(10, 4.0));
  scaler.scale(zeros({}));  // places the scale on the CPU
  Tensor strided =
      tensor(std::vector<double>{4, 0, 8, 0, 12, 0, 16, 0, 20, 0, 24, 0}, {2, 6}).to(DType::Float32).slice(1, 0, 6, 2);
  REQUIRE_FALSE(strided.is_non_overlapping_and_dense());
  a.set_grad(strided);
  b.set_grad(full({5}, 8.0, DType::BFloat16));
  c.set_grad(full({2}, -4.0, DType::Float64));
  scaler.unscale_(opt);
  CHECK(a.grad().to_vector_double() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(b.grad().to_vector_double() == std::vector<double>(5, 2.0));
  CHECK(c.grad().to_vector_double() == std::vector<double>(2, -1.0));
  scaler.step(opt);
  scaler.update();
  CHECK(a.to_vector_double() == std::vector<double>{-1, -2, -3, -4, -5, -6});
  CHECK(scaler.get_growth_tracker() == 1);

  // An inf in the strided gradient is seen too.
  opt.zero_grad();
  Tensor bad = zeros({2, 6});
  bad.view({-1}).narrow(0, 10, 1).fill_(kInf);
  a.set_grad(bad.slice(1, 0, 6, 2));
  scaler.unscale_(opt);
  scaler.step(opt);
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);
}

TEST_CASE("GradScaler refuses calls out of order", "[amp]") {
  Tensor w = ones({2}).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.5);
  GradScaler scaler;
  w.set_grad(ones({2}));
  CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_") && Catch::Contains("scale(loss)"));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step") && Catch::Contains("scale(loss)"));
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("update") && Catch::Contains("scale(loss)"));

  scaler.scale(sum(w));
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no optimizer was unscaled or stepped"));
  scaler.unscale_(opt);
  CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_() was already called"));
  scaler.step(opt);
  CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("after step()"));
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step() was already called"));
  scaler.update();
  // A new step starts clean.
  CHECK_NOTHROW(scaler.unscale_(opt));
  CHECK_NOTHROW(scaler.step(opt));
  CHECK_NOTHROW(scaler.update());

  CHECK_THROWS_AS(scaler.scale(Tensor()), Error);
  CHECK_THROWS_WITH(scaler.scale(zeros({}, DType::Int64)),
                    Catch::Contains("GradScaler::scale") && Catch::Contains("int64"));
  // The scale lives on the CPU now: a loss that claims another device is refused before any read.
  CHECK_THROWS_AS(scaler.scale(fake_cuda({})), DeviceError);
}

TEST_CASE("a found-inf reducer that throws ends the step: no double unscale, no skipped next step", "[amp]") {
  Tensor w = ones({2}).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.5);
  GradScaler scaler(small_interval(1));
  bool fail = true;
  scaler.set_found_inf_reducer([&](Tensor&) {
    if (fail) throw Error("reducer: the ranks did not answer");
  });
  for (const bool unscale_first : {true, false}) {
    INFO((unscale_first ? "unscale_ then step" : "step alone"));
    fail = true;
    const double scale = scaler.get_scale();
    const int64_t tracker = scaler.get_growth_tracker();
    const Tensor w0 = w.detach().clone();
    scaler.scale(sum(w)).backward();
    poison_grad(w, kInf);  // this step's flag is 1: it must not carry into the next step
    auto first = [&] { unscale_first ? scaler.unscale_(opt) : scaler.step(opt); };
    CHECK_THROWS_WITH(first(), Catch::Contains("ranks did not answer"));
    CHECK_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_") && Catch::Contains("call update()"));
    CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("step") && Catch::Contains("call update()"));
    CHECK(bitwise_equal(w, w0));
    scaler.update();  // neither backs off nor grows
    CHECK(scaler.get_scale() == scale);
    CHECK(scaler.get_growth_tracker() == tracker);

    // The next step is clean and taken: 1 - 0.5 * 1 per step.
    fail = false;
    opt.zero_grad();
    scaler.scale(sum(w)).backward();
    if (unscale_first) scaler.unscale_(opt);
    scaler.step(opt);
    scaler.update();
    CHECK(bitwise_equal(w, sub(w0, 0.5)));
    CHECK(scaler.get_scale() == scale * 2.0);  // growth_interval 1
    opt.zero_grad();
  }
}

TEST_CASE("an optimizer step that throws leaves no inf flag for the next step", "[amp]") {
  struct Flaky : nn::optim::SGD {
    using SGD::SGD;
    bool fail = true;
    void step() override {
      if (fail) throw Error("Flaky::step: the step failed");
      SGD::step();
    }
  };
  Tensor w = ones({2}).set_requires_grad(true);
  Flaky opt({w}, 0.5);
  GradScaler scaler(small_interval(1));
  const Tensor w0 = w.detach().clone();
  const double scale = scaler.get_scale();
  scaler.scale(sum(w)).backward();
  poison_grad(w, kInf);  // the failed step's check sets the flag
  CHECK_THROWS_WITH(scaler.step(opt), Catch::Contains("the step failed"));
  CHECK(bitwise_equal(w, w0));

  // Retried with clean gradients, the step is taken and the scale grows: the flag of the check
  // whose step never happened is gone.
  opt.fail = false;
  opt.zero_grad();
  scaler.scale(sum(w)).backward();
  scaler.step(opt);
  scaler.update();
  CHECK(bitwise_equal(w, sub(w0, 0.5)));
  CHECK(scaler.get_scale() == scale * 2.0);
}

TEST_CASE("GradScaler options are checked", "[amp]") {
  auto with = [](auto set) {
    GradScaler::Options o;
    set(o);
    return o;
  };
  using O = GradScaler::Options;
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.init_scale = 0; })),
                    Catch::Contains("init_scale") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.init_scale = -2; })),
                    Catch::Contains("init_scale") && Catch::Contains("-2"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.init_scale = kInf; })),
                    Catch::Contains("init_scale") && Catch::Contains("inf"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.init_scale = kNaN; })),
                    Catch::Contains("init_scale") && Catch::Contains("nan"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.init_scale = 1e39; })), Catch::Contains("init_scale"));
  // 0 and a subnormal as float32s (the unscale factor 1 / scale inf): refused, as update() and
  // load_state_dict() refuse them.
  for (const double tiny : {1e-50, 1e-40}) {
    // The message quotes the value passed, not its six-decimal rounding ("got 0").
    const std::string quoted = "got " + std::string(tiny == 1e-50 ? "1e-50" : "1e-40");
    CHECK_THROWS_WITH(GradScaler(with([&](O& o) { o.init_scale = tiny; })),
                      Catch::Contains("init_scale") && Catch::Contains("normal float32") && Catch::Contains(quoted));
    GradScaler s;
    CHECK_THROWS_WITH(s.update(tiny),
                      Catch::Contains("new_scale") && Catch::Contains("normal float32") && Catch::Contains(quoted));
  }
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.backoff_factor = -1e-9; })),
                    Catch::Contains("backoff_factor") && Catch::Contains("got -1e-09"));
  CHECK_NOTHROW(GradScaler(with([](O& o) { o.init_scale = 0x1p-126; })));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_factor = 1.0; })),
                    Catch::Contains("growth_factor") && Catch::Contains("got 1"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_factor = 0.5; })),
                    Catch::Contains("growth_factor") && Catch::Contains("0.5"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_factor = kInf; })), Catch::Contains("growth_factor"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.backoff_factor = 1.0; })),
                    Catch::Contains("backoff_factor") && Catch::Contains("got 1"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.backoff_factor = 0.0; })), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.backoff_factor = kNaN; })), Catch::Contains("backoff_factor"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_interval = 0; })),
                    Catch::Contains("growth_interval") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_interval = -3; })),
                    Catch::Contains("growth_interval") && Catch::Contains("-3"));
  CHECK_THROWS_WITH(GradScaler(with([](O& o) { o.growth_interval = int64_t{1} << 31; })),
                    Catch::Contains("growth_interval") && Catch::Contains("2147483648"));
  CHECK_NOTHROW(GradScaler(with([](O& o) { o.growth_interval = 1; })));
}

TEST_CASE("a disabled GradScaler passes everything through", "[amp]") {
  GradScaler::Options o;
  o.enabled = false;
  GradScaler scaler(o);
  CHECK_FALSE(scaler.is_enabled());
  Tensor w = ones({2}).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.5);
  Tensor loss = sum(w);
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(opt);
  scaler.unscale_(opt);  // no stages when disabled
  scaler.step(opt);
  scaler.update();
  CHECK(w.to_vector_double() == std::vector<double>{0.5, 0.5});
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
}

TEST_CASE("GradScaler state_dict round trip and refusals", "[amp]") {
  GradScaler fresh;  // default options: loading replaces them
  const auto sd = test::check_state_dict_round_trip(Device::cpu(), fresh);

  // Refusals name the key and change nothing.
  auto with = [&](const std::string& key, const Tensor& t) {
    auto s = sd;
    if (t.defined()) {
      s[key] = t;
    } else {
      s.erase(key);
    }
    return s;
  };
  const auto before = fresh.state_dict();
  struct Bad {
    std::map<std::string, Tensor> state;
    std::string fragment;
  };
  const std::vector<Bad> bad = {
      {with("scale", Tensor()), "missing key \"scale\""},
      {with("growth_tracker", Tensor()), "missing key \"growth_tracker\""},
      {with("growth_interval", Tensor()), "missing key \"growth_interval\""},
      {with("scale", full({}, 2.0, DType::Float64)), "\"scale\""},
      {with("scale", full({2}, 2.0)), "\"scale\""},
      {with("scale", full({}, -1.0)), "\"scale\""},
      {with("scale", full({}, kNaN)), "\"scale\""},
      {with("growth_tracker", full({}, 5, DType::Int32)), "\"growth_tracker\""},
      {with("growth_tracker", full({}, -1, DType::Int32)), "\"growth_tracker\""},
      {with("growth_tracker", full({}, 1.0)), "\"growth_tracker\""},
      {with("growth_factor", full({}, 1.0, DType::Float64)), "\"growth_factor\""},
      {with("backoff_factor", full({}, 2.0, DType::Float64)), "\"backoff_factor\""},
      {with("growth_interval", full({}, 0, DType::Int64)), "\"growth_interval\""},
      {with("extra", zeros({})), "unexpected key \"extra\""},
      {{}, "empty"},
  };
  for (const Bad& b : bad) {
    INFO(b.fragment);
    CHECK_THROWS_WITH(fresh.load_state_dict(b.state),
                      Catch::Contains("GradScaler::load_state_dict") && Catch::Contains(b.fragment));
    CHECK(same_bits(fresh.state_dict(), before));
  }

  // One element in another shape loads as the 0-d state_dict gives, into a scaler that has not
  // scaled yet and into one that has (its tensors are copied in place): a [1] scale made the next
  // scaled loss [1], or failed the in-place copy after the options had changed.
  for (bool used : {false, true}) {
    INFO("used before loading " << used);
    GradScaler s(small_interval(7));
    if (used) (void)s.scale(full({}, 1.0));
    auto one = sd;
    one["scale"] = full({1}, 256.0);
    one["growth_tracker"] = full({1, 1}, 1, DType::Int32);
    s.load_state_dict(one);
    const auto loaded = s.state_dict();
    CHECK(loaded.at("scale").dim() == 0);
    CHECK(loaded.at("scale").item<float>() == 256.0f);
    CHECK(loaded.at("growth_tracker").dim() == 0);
    CHECK(loaded.at("growth_interval").item<int64_t>() == sd.at("growth_interval").item<int64_t>());
    CHECK(s.scale(full({}, 2.0)).dim() == 0);
  }
}

TEST_CASE("a checkpoint with the scaler resumes bit for bit", "[amp][checkpoint]") {
  kiln::test::TempDir dir("kiln_amp");
  const std::string path = dir.file("ckpt.safetensors");
  constexpr int kSteps = 6;
  // Steps 1 and 8 overflow and the scale grows every second clean step: 512 after step 1, 2048
  // at the checkpoint, 4096 at the end (a fresh scaler would start at 1024).
  auto poisoned = [](int step) { return step == 1 || step == 8; };
  struct Run {
    std::shared_ptr<nn::Sequential> model;
    std::unique_ptr<nn::optim::AdamW> opt;
    std::unique_ptr<GradScaler> scaler;
  };
  auto make_run = [](uint64_t seed) {
    manual_seed(seed);
    Run r;
    r.model = make_mlp();
    r.opt = std::make_unique<nn::optim::AdamW>(r.model->parameters(), 1e-2);
    r.scaler = std::make_unique<GradScaler>(small_interval(2));
    return r;
  };
  // Each step draws its batch from the CPU generator, which the checkpoint restores.
  auto train = [&](Run& r, int step) {
    r.opt->zero_grad();
    Tensor x = randn({8, 4}), y = randn({8, 2});
    r.scaler->scale(mse_loss(r.model->forward(x), y)).backward();
    if (poisoned(step)) poison_grad(r.model->parameters()[0], kInf);
    r.scaler->unscale_(*r.opt);
    nn::optim::clip_grad_norm_(r.model->parameters(), 1.0);
    r.scaler->step(*r.opt);
    r.scaler->update();
  };

  Run a = make_run(21);
  for (int i = 0; i < 2 * kSteps; ++i) train(a, i);

  Run b = make_run(21);
  for (int i = 0; i < kSteps; ++i) train(b, i);
  nn::save_checkpoint(path, *b.model, b.opt.get(), nn::TrainingState{kSteps, {}, {}, {}}, b.scaler.get());
  {
    nn::SafetensorsFile f(path);
    CHECK(f.contains("scaler.scale"));
    CHECK(f.contains("scaler.growth_tracker"));
    CHECK(f.metadata().at("kiln.has_scaler") == "1");
    CHECK(f.metadata().at("kiln.checkpoint_version") == "2");
  }

  Run c = make_run(99);  // another seed: other weights, other draws
  CHECK(c.scaler->get_scale() != b.scaler->get_scale());
  nn::load_checkpoint(path, *c.model, c.opt.get(), {}, c.scaler.get());
  CHECK(c.scaler->get_scale() == b.scaler->get_scale());
  CHECK(c.scaler->get_growth_tracker() == b.scaler->get_growth_tracker());
  for (int i = kSteps; i < 2 * kSteps; ++i) train(c, i);
  CHECK(same_bits(a.model->parameters(), c.model->parameters()));
  CHECK(same_bits(a.opt->state_dict(), c.opt->state_dict()));
  CHECK(same_bits(a.scaler->state_dict(), c.scaler->state_dict()));
  CHECK(a.scaler->get_scale() == 4096.0);

  // Without the scaler's state the resumed run differs: a fresh scaler starts at the initial scale.
  Run d = make_run(99);
  nn::load_checkpoint(path, *d.model, d.opt.get());  // the scaler keys are ignored without a scaler
  for (int i = kSteps; i < 2 * kSteps; ++i) train(d, i);
  CHECK_FALSE(same_bits(a.scaler->state_dict(), d.scaler->state_dict()));

  // A checkpoint without scaler state cannot restore a scaler, and nothing changes.
  const std::string plain = dir.file("plain.safetensors");
  nn::save_checkpoint(plain, *b.model, b.opt.get(), nn::TrainingState{kSteps, {}, {}, {}});
  CHECK_FALSE(nn::SafetensorsFile(plain).metadata().count("kiln.has_scaler"));
  Run e = make_run(5);
  const TensorList e_params = clones(e.model->parameters());
  CHECK_THROWS_WITH(nn::load_checkpoint(plain, *e.model, e.opt.get(), {}, e.scaler.get()),
                    Catch::Contains("no GradScaler state"));
  CHECK(same_bits(e.model->parameters(), e_params));
  // Nor can a checkpoint saved with a disabled scaler restore an enabled one.
  GradScaler::Options off;
  off.enabled = false;
  GradScaler disabled(off);
  const std::string off_path = dir.file("off.safetensors");
  nn::save_checkpoint(off_path, *b.model, nullptr, nn::TrainingState{}, &disabled);
  CHECK_THROWS_WITH(nn::load_checkpoint(off_path, *e.model, nullptr, {}, e.scaler.get()),
                    Catch::Contains("disabled GradScaler"));
  CHECK(same_bits(e.model->parameters(), e_params));
}

TEST_CASE("foreach_non_finite_check_and_unscale_ on mixed dtypes", "[amp][foreach]") {
  manual_seed(12);
  // 70000 elements cross a 65536-element chunk boundary.
  const std::vector<DType> dtypes = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Float32};
  const std::vector<Shape> shapes = {{70000}, {3, 5}, {7}, {2, 2}, {}};
  TensorList list, before;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    list.push_back(randn(shapes[i]).to(dtypes[i]));
    before.push_back(list.back().clone());
  }
  Tensor found = zeros({}), inv = full({}, 0.25);
  foreach_non_finite_check_and_unscale_(list, found, inv);
  CHECK(found.item<float>() == 0.0f);
  for (size_t i = 0; i < list.size(); ++i) {
    INFO("tensor " << i << " " << dtype_name(dtypes[i]));
    CHECK(list[i].dtype() == dtypes[i]);
    CHECK(bitwise_equal(list[i], mul(before[i], 0.25)));  // a power of two: exact in every dtype
  }

  // Check only: nothing is written, the flag is set by a bad value anywhere, in any bucket.
  for (size_t bad = 0; bad < list.size(); ++bad) {
    INFO("inf in tensor " << bad);
    TensorList l = {list[0].clone(), list[1].clone(), list[2].clone(), list[3].clone(), list[4].clone()};
    l[bad].view({-1}).narrow(0, l[bad].numel() - 1, 1).fill_(bad % 2 ? kNaN : -kInf);
    const TensorList copy = clones(l);
    Tensor f = zeros({});
    foreach_non_finite_check_and_unscale_(l, f, Tensor());
    CHECK(f.item<float>() == 1.0f);
    CHECK(same_bits(l, copy));
    // With an unscale every tensor is still multiplied.
    Tensor f2 = zeros({});
    foreach_non_finite_check_and_unscale_(l, f2, full({}, 2.0));
    CHECK(f2.item<float>() == 1.0f);
    for (size_t i = 0; i < l.size(); ++i)
      if (i != bad) CHECK(bitwise_equal(l[i], mul(copy[i], 2.0)));
  }

  // The flag is only ever set: a clean list leaves a 1 as it is.
  Tensor set = ones({});
  foreach_non_finite_check_and_unscale_({ones({3})}, set, Tensor());
  CHECK(set.item<float>() == 1.0f);
  // A finite value that the multiply overflows is not flagged: the check reads the input.
  Tensor big = full({2}, 60000.0, DType::Float16), f3 = zeros({});
  foreach_non_finite_check_and_unscale_({big}, f3, full({}, 2.0));
  CHECK(f3.item<float>() == 0.0f);
  CHECK(std::isinf(big.to_vector_double()[0]));
}

TEST_CASE("foreach_non_finite_check_and_unscale_ and amp_update_scale_ check their arguments", "[amp][foreach]") {
  const char* op = "foreach_non_finite_check_and_unscale_";
  Tensor found = zeros({}), inv = ones({});
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({2}, DType::Int64)}, found, inv),
                    Catch::Contains(op) && Catch::Contains("int64"));
  CHECK_THROWS_AS(foreach_non_finite_check_and_unscale_({zeros({2}, DType::Int64)}, found, inv), DTypeError);
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({2})}, Tensor(), inv),
                    Catch::Contains(op) && Catch::Contains("found_inf") && Catch::Contains("undefined"));
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({2})}, zeros({}, DType::Int32), inv),
                    Catch::Contains(op) && Catch::Contains("found_inf") && Catch::Contains("int32"));
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({2})}, found, zeros({2})),
                    Catch::Contains(op) && Catch::Contains("inv_scale") && Catch::Contains("[2]"));
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({2})}, fake_cuda({}), inv),
                    Catch::Contains(op) && Catch::Contains("found_inf") && Catch::Contains("cuda:0"));
  CHECK_THROWS_AS(foreach_non_finite_check_and_unscale_({zeros({2})}, fake_cuda({}), inv), DeviceError);
  CHECK_THROWS_AS(foreach_non_finite_check_and_unscale_({zeros({2}), fake_cuda({2})}, found, inv), DeviceError);
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({zeros({4}).slice(0, 0, 4, 2)}, found, inv),
                    Catch::Contains(op) && Catch::Contains("not dense"));
  CHECK_THROWS_WITH(foreach_non_finite_check_and_unscale_({Tensor()}, found, inv),
                    Catch::Contains(op) && Catch::Contains("tensor 0") && Catch::Contains("undefined"));
  CHECK_THROWS_AS(foreach_non_finite_check_and_unscale_({}, zeros({}, DType::Float64), Tensor()), DTypeError);
  CHECK_NOTHROW(foreach_non_finite_check_and_unscale_({}, found, Tensor()));

  const char* up = "amp_update_scale_";
  Tensor scale = ones({}), tracker = zeros({}, DType::Int32);
  CHECK_THROWS_WITH(amp_update_scale_(scale, zeros({}), found, 2.0, 0.5, 10),
                    Catch::Contains(up) && Catch::Contains("growth_tracker") && Catch::Contains("float32"));
  CHECK_THROWS_WITH(amp_update_scale_(zeros({}, DType::Float64), tracker, found, 2.0, 0.5, 10),
                    Catch::Contains(up) && Catch::Contains("scale") && Catch::Contains("float64"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, Tensor(), 2.0, 0.5, 10),
                    Catch::Contains(up) && Catch::Contains("found_inf"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, fake_cuda({}), 2.0, 0.5, 10),
                    Catch::Contains(up) && Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, found, 1.0, 0.5, 10),
                    Catch::Contains(up) && Catch::Contains("growth_factor"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, found, 2.0, 1.5, 10),
                    Catch::Contains(up) && Catch::Contains("backoff_factor") && Catch::Contains("1.5"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, found, 2.0, 0.5, 0),
                    Catch::Contains(up) && Catch::Contains("growth_interval"));
  CHECK(scale.item<float>() == 1.0f);
  CHECK(tracker.item<int64_t>() == 0);
}
