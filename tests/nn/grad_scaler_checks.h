// GradScaler checks that mean the same on every device, shared by the CPU test
// (tests/nn/test_grad_scaler.cpp) and the CUDA one (tests/cuda/test_grad_scaler_cuda.cpp): the
// helpers both use, and the bodies of the skip, backoff-and-growth, scaled-equals-unscaled and
// state_dict round-trip checks, run on the device each test passes. The scales are powers of two,
// so a scaled run must equal an unscaled one bit for bit on any device; the expected scales and
// trackers are the scaler's arithmetic, not the device's.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "nn/amp/grad_scaler.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"
#include "tests/bitwise.h"

namespace kiln::test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bitwise equality on any device: bitwise_equal reads host memory, so device tensors are copied
// back first (a CPU tensor's to(cpu) is the tensor itself).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return bitwise_equal(a.to(Device::cpu()), b.to(Device::cpu()));
}
inline bool same_bits(const TensorList& a, const TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}
// State dicts: the same keys and the same bits, but for `skip` (an optimizer's host step count).
inline bool same_bits(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                      const std::string& skip = "") {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    if (k == skip) continue;
    auto it = b.find(k);
    if (it == b.end() || !same_bits(t, it->second)) return false;
  }
  return true;
}

inline TensorList clones(const TensorList& l) {
  TensorList out;
  for (const Tensor& t : l) out.push_back(t.detach().clone());
  return out;
}

// The shared checks use the small default; the CUDA graph capture wants a wider one.
inline std::shared_ptr<nn::Sequential> make_mlp(int64_t in = 4, int64_t hidden = 8, int64_t out = 2) {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(in, hidden));
  m->push_back(std::make_shared<nn::GELU>());
  m->push_back(std::make_shared<nn::Linear>(hidden, out));
  return m;
}

// A fixed regression problem: the same batch for every step, so runs differ only in what they do.
// Drawn from the CPU generator and then moved, so every device sees the same values.
struct Batch {
  Tensor x, y;
};
inline Batch make_batch(uint64_t seed, Device device) {
  manual_seed(seed);
  Tensor x = randn({16, 4}), y = randn({16, 2});
  return {x.to(device), y.to(device)};
}

// One gradient element set to `value` (inf or NaN), as an overflow in backward would leave it.
inline void poison_grad(const Tensor& param, double value) {
  NoGradGuard no_grad;
  Tensor g = param.grad();
  g.view({-1}).narrow(0, 1, 1).fill_(value);
}

inline nn::amp::GradScaler::Options small_interval(int64_t interval, double init = 1024.0) {
  nn::amp::GradScaler::Options o;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

// A step with a non-finite gradient leaves parameters and the optimizer's device state untouched,
// bitwise, and halves the scale; the next clean step updates again with the halved scale.
inline void check_non_finite_grad_skips_the_step(Device device, double bad, bool unscale_first) {
  INFO("bad value " << bad << (unscale_first ? ", unscale_ before step" : ", step without unscale_"));
  const Batch b = make_batch(3, device);
  manual_seed(4);
  auto model = make_mlp();
  model->to(device);
  nn::optim::AdamW opt(model->parameters(), 1e-2);
  nn::amp::GradScaler scaler;
  auto step = [&](bool poison) {
    opt.zero_grad();
    scaler.scale(mse_loss(model->forward(b.x), b.y)).backward();
    if (poison) poison_grad(model->parameters()[2], bad);  // the second layer's weight
    if (unscale_first) scaler.unscale_(opt);
    scaler.step(opt);
    scaler.update();
  };
  step(false);
  step(false);  // moments and step counts hold real values now
  const TensorList params_before = clones(model->parameters());
  const auto state_before = opt.state_dict();
  REQUIRE(scaler.get_scale() == 65536.0);
  REQUIRE(scaler.get_growth_tracker() == 2);

  step(true);
  CHECK(same_bits(model->parameters(), params_before));
  // Everything the device holds is untouched; only the host's call count ("step") moves on.
  CHECK(same_bits(opt.state_dict(), state_before, "step"));
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 2.0);
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(scaler.get_growth_tracker() == 0);

  // The next clean step updates again, with the halved scale.
  step(false);
  CHECK_FALSE(same_bits(model->parameters(), params_before));
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 3.0);
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(scaler.get_growth_tracker() == 1);
}

// The scale grows by growth_factor after exactly growth_interval clean steps and backs off on every
// overflow (twice in a row, and right after a growth), resetting the tracker either way.
inline void check_scale_growth_and_backoff(Device device) {
  manual_seed(5);
  Tensor w = randn({3}).to(device).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.125);
  nn::amp::GradScaler::Options o = small_interval(3, 8.0);
  o.growth_factor = 4.0;
  o.backoff_factor = 0.25;
  nn::amp::GradScaler scaler(o);
  auto step = [&](bool poison) {
    opt.zero_grad();
    scaler.scale(sum(mul(w, w))).backward();
    if (poison) poison_grad(w, kInf);
    scaler.step(opt);
    scaler.update();
  };
  // (poisoned?, scale after, tracker after)
  const std::vector<std::tuple<bool, double, int64_t>> expected = {
      {false, 8, 1},  {false, 8, 2},  {false, 32, 0}, {false, 32, 1},  {true, 8, 0},  {false, 8, 1}, {false, 8, 2},
      {false, 32, 0}, {false, 32, 1}, {false, 32, 2}, {false, 128, 0}, {true, 32, 0}, {true, 8, 0},  {false, 8, 1},
      {false, 8, 2},  {false, 32, 0}, {true, 8, 0},   {true, 2, 0},    {false, 2, 1},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [poison, scale, tracker] = expected[i];
    INFO("step " << i);
    step(poison);
    REQUIRE(scaler.get_scale() == scale);
    REQUIRE(scaler.get_growth_tracker() == tracker);
  }
  // update(new_scale) sets the scale and leaves the tracker.
  scaler.scale(sum(w));
  scaler.update(0.75);
  CHECK(scaler.get_scale() == 0.75);
  CHECK(scaler.get_growth_tracker() == 1);
  CHECK_THROWS_WITH(scaler.update(0.0), Catch::Contains("new_scale") && Catch::Contains("0"));
  CHECK_THROWS_WITH(scaler.update(kInf), Catch::Contains("new_scale") && Catch::Contains("inf"));
}

// Six AdamW steps of a scaled model equal those of an unscaled twin bit for bit: parameters and
// optimizer state. With `clip`, both clip their gradients; the scaled run must unscale_ first, or it
// would clip a norm the scale times too large.
inline void check_scaled_training_matches_unscaled(Device device, bool unscale_first, bool clip) {
  INFO((unscale_first ? "unscale_ before step" : "step without unscale_") << (clip ? ", clipped" : ""));
  REQUIRE((unscale_first || !clip));
  const Batch b = make_batch(6, device);
  manual_seed(7);
  auto plain = make_mlp();
  plain->to(device);
  manual_seed(7);
  auto scaled = make_mlp();
  scaled->to(device);
  REQUIRE(same_bits(plain->parameters(), scaled->parameters()));
  nn::optim::AdamW opt_plain(plain->parameters(), 1e-2), opt_scaled(scaled->parameters(), 1e-2);
  nn::amp::GradScaler scaler(small_interval(2));  // the scale doubles every other step
  for (int i = 0; i < 6; ++i) {
    opt_plain.zero_grad();
    mse_loss(plain->forward(b.x), b.y).backward();
    if (clip) nn::optim::clip_grad_norm_(plain->parameters(), 1e-3);
    opt_plain.step();

    opt_scaled.zero_grad();
    scaler.scale(mse_loss(scaled->forward(b.x), b.y)).backward();
    if (unscale_first) scaler.unscale_(opt_scaled);
    if (clip) nn::optim::clip_grad_norm_(scaled->parameters(), 1e-3);
    scaler.step(opt_scaled);
    scaler.update();
  }
  CHECK(scaler.get_scale() == 1024.0 * 8);
  CHECK(same_bits(plain->parameters(), scaled->parameters()));
  CHECK(same_bits(opt_plain.state_dict(), opt_scaled.state_dict()));
}

// A scaler's state_dict (taken after a backoff and two clean steps) loads into a fresh scaler with
// default options, which then takes the same next steps bit for bit. Leaves `resumed` as those
// steps left it and returns the state dict it was loaded from: the CPU test goes on to the refusals.
inline std::map<std::string, Tensor> check_state_dict_round_trip(Device device, nn::amp::GradScaler& resumed) {
  Tensor w = ones({2}).to(device).set_requires_grad(true);
  nn::optim::SGD opt({w}, 0.5);
  nn::amp::GradScaler::Options o = small_interval(5, 256.0);
  o.growth_factor = 3.0;
  o.backoff_factor = 0.125;
  nn::amp::GradScaler scaler(o);
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    scaler.scale(sum(w)).backward();
    if (i == 0) poison_grad(w, kNaN);
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(scaler.get_scale() == 32.0);
  REQUIRE(scaler.get_growth_tracker() == 2);
  const auto sd = scaler.state_dict();
  CHECK(sd.size() == 5);
  CHECK(sd.at("scale").device() == device);
  CHECK(sd.at("scale").dtype() == DType::Float32);
  CHECK(sd.at("growth_tracker").dtype() == DType::Int32);

  resumed.load_state_dict(sd);  // loading replaces its options too
  CHECK(resumed.get_scale() == 32.0);
  CHECK(resumed.get_growth_tracker() == 2);
  CHECK(resumed.options().growth_factor == 3.0);
  CHECK(resumed.options().backoff_factor == 0.125);
  CHECK(resumed.options().growth_interval == 5);
  CHECK(same_bits(resumed.state_dict(), sd));

  // The same next steps from either scaler.
  Tensor w2 = w.detach().clone().set_requires_grad(true);
  nn::optim::SGD opt2({w2}, 0.5);
  for (int i = 0; i < 4; ++i) {
    opt.zero_grad();
    scaler.scale(sum(mul(w, w))).backward();
    scaler.step(opt);
    scaler.update();
    opt2.zero_grad();
    resumed.scale(sum(mul(w2, w2))).backward();
    resumed.step(opt2);
    resumed.update();
  }
  CHECK(scaler.get_scale() == 96.0);
  CHECK(same_bits(scaler.state_dict(), resumed.state_dict()));
  CHECK(same_bits(w, w2));
  return sd;
}

}  // namespace kiln::test
