// Replays of the PyTorch golden runs in tests/golden/ (written by tools/make_golden.py: float64 on
// the CPU, dropout off, three AdamW steps on fixed batches), shared by the CPU tests
// (tests/nn/test_golden.cpp, float64 and float32) and the CUDA tests (tests/cuda/test_golden_cuda.cpp,
// float32). A replay loads the recorded initial weights into a kiln model on the device and dtype
// under test, runs the recorded steps and checks every loss, every gradient and the final state.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"

namespace kiln::golden_test {

using nn::Module;
using nn::SafetensorsFile;
using nn::GPT;
using nn::GPTConfig;

using json = nlohmann::json;

// float64 against float64: both sides differ only in summation order and in how an op is split
// into steps (lerp vs. multiply-add in AdamW, fused vs. unfused softmax), each a few ulps
// (~1e-16), amplified by the depth of the nets and three optimizer steps to well under 1e-12.
// 1e-10 leaves room for other BLAS orderings while any real difference in the math (a wrong
// constant, a missing term) shows up at 1e-4 or more.
constexpr double kGoldenTol = 1e-10;

// How closely a replay in a given dtype must follow the float64 recording. Errors are measured per
// element as |got - want| / (|want| + max|want| of that tensor) (see check_close).
struct Precision {
  DType dtype = DType::Float64;
  Device device = Device::cpu();
  double loss_tol = kGoldenTol;
  double grad_tol = kGoldenTol;
  double final_tol = kGoldenTol;
  // An element whose recorded gradient is at or below the noise of the replay's arithmetic lets
  // Adam move its weight by a different amount in each library (see replay). Such an element is one
  // whose gradient is below Adam's eps, or (for noise_rel < inf) whose replayed gradient differs
  // from the recorded one by more than noise_rel of its own size at some step; its final weight is
  // held to degenerate_lr_steps * lr * steps absolute instead.
  double noise_rel = std::numeric_limits<double>::infinity();
  double degenerate_lr_steps = 1e-6;
};

// float64 on the CPU: the recording's own arithmetic, to rounding.
inline Precision float64_cpu() { return Precision{}; }

// float32 (TF32 off) on `device`. The inputs are the recording's, rounded to float32 (relative
// error 6e-8); each op adds a few float32 ulps, so losses land within ~1e-6 of the recording and
// gradients, which come out of longer chains and cancellation, within ~1e-5 of their tensor's
// scale; the bounds below leave an order of magnitude above that and stay three orders below what
// a wrong formula gives (1e-2 and more). Adam's step is lr * m / sqrt(v): where a gradient is
// known to a relative 1e-3 the step is too, so weights follow to ~steps * lr * 1e-3 (2e-5 here);
// where float32 noise is more than 1e-3 of a gradient (it is nearly zero), the step's size and
// even its sign are noise, bounded by the most Adam can move a weight in three steps: 4 * lr each.
inline Precision float32_on(Device device) {
  Precision p;
  p.dtype = DType::Float32;
  p.device = device;
  p.loss_tol = 1e-5;
  p.grad_tol = 1e-4;
  p.final_tol = 1e-4;
  p.noise_rel = 1e-3;
  p.degenerate_lr_steps = 4.0;
  return p;
}

inline const char* verbose_env() { return std::getenv("KILN_GOLDEN_VERBOSE"); }
inline bool verbose() {
  const char* v = verbose_env();
  return v && *v && std::string(v) != "0";
}

// The largest error seen in a run, for the report line (KILN_GOLDEN_VERBOSE=1).
struct Agreement {
  double worst = 0.0;    // max |got - want| / (|want| + max|want| of that tensor)
  double max_abs = 0.0;  // max |got - want|
  std::string worst_name;
  double loose_max_abs = 0.0;  // max |got - want| over the elements held to an absolute bound
};

// |got - want| <= tol * (|want| + max|want|): relative per element, with a floor at tol times the
// tensor's largest magnitude, so that elements which come out of cancellation (a gradient summed
// from terms much larger than itself) are held to the precision of the terms, not of the result.
// Elements flagged in `loose` (may be null) are held to |got - want| <= loose_abs instead.
inline void check_close(const std::string& name, const Tensor& got, const Tensor& want, double tol, Agreement& agg,
                        const std::vector<char>* loose = nullptr, double loose_abs = 0.0) {
  INFO(name);
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector_double(), w = want.to_vector_double();
  double scale = 0.0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  double worst = 0.0, worst_abs = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]);
    if (loose && (*loose)[i]) {
      INFO("element " << i << " (Adam-degenerate): kiln " << g[i] << ", reference " << w[i]);
      CHECK(err <= loose_abs);
      agg.loose_max_abs = std::max(agg.loose_max_abs, err);
      continue;
    }
    const double denom = std::abs(w[i]) + scale;
    double r = denom > 0.0 ? err / denom : (err > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    if (std::isnan(r)) r = std::numeric_limits<double>::infinity();  // NaN on one side only
    if (r > worst) worst = r, at = i;
    worst_abs = std::max(worst_abs, err);
  }
  if (worst > agg.worst) agg.worst = worst, agg.worst_name = name;
  agg.max_abs = std::max(agg.max_abs, worst_abs);
  INFO("element " << at << ": kiln " << g[at] << ", reference " << w[at] << ", tensor scale " << scale);
  CHECK(worst <= tol);
}

inline void report(const std::string& what, const Agreement& agg) {
  if (verbose()) {
    std::printf("%s: worst error %.3g of the tensor scale (%s), max abs error %.3g\n", what.c_str(), agg.worst,
                agg.worst_name.c_str(), agg.max_abs);
  }
}

// tests/golden, or KILN_GOLDEN_DIR from the environment when the tests run away from the source
// tree (the GPU host gets a copy of the repository at another path).
inline std::string golden_dir() {
  if (const char* d = std::getenv("KILN_GOLDEN_DIR"); d && *d) return d;
  return KILN_GOLDEN_DIR;
}

// One golden file: its tensors, and the run's description (metadata key "golden", JSON: model,
// config, optimizer, steps).
struct Golden {
  std::map<std::string, Tensor> tensors;
  json meta;

  explicit Golden(const std::string& name) {
    const std::string path = golden_dir() + "/" + name + ".safetensors";
    INFO("golden file " << path << " (written by tools/make_golden.py; set KILN_GOLDEN_DIR to find it elsewhere)");
    REQUIRE(std::filesystem::exists(path));
    SafetensorsFile file(path);
    tensors = file.load_all();
    REQUIRE(file.metadata().count("golden") == 1);
    meta = json::parse(file.metadata().at("golden"));
    REQUIRE(meta.at("model") == name);
  }
  const Tensor& at(const std::string& key) const {
    INFO("golden tensor " << key);
    REQUIRE(tensors.count(key) == 1);
    return tensors.at(key);
  }
  // Tensors whose names start with prefix, the prefix removed.
  std::map<std::string, Tensor> with_prefix(const std::string& prefix) const {
    std::map<std::string, Tensor> out;
    for (const auto& [k, t] : tensors)
      if (k.rfind(prefix, 0) == 0) out.emplace(k.substr(prefix.size()), t);
    return out;
  }
};

inline std::set<std::string> keys(const std::map<std::string, Tensor>& m) {
  std::set<std::string> s;
  for (const auto& [k, v] : m) s.insert(k);
  return s;
}

// A recorded tensor as the replay's input: floating values in the replay's dtype, on its device.
inline Tensor as_input(const Tensor& t, const Precision& p) {
  return (is_floating(t.dtype()) ? t.to(p.dtype) : t).to(p.device);
}

// The recorded initial state in the replay's dtype (floating tensors only: batch norm's step count
// stays int64), on the CPU; load_state_dict moves it.
inline std::map<std::string, Tensor> init_state(const Golden& golden, const Precision& p) {
  std::map<std::string, Tensor> init = golden.with_prefix("init.");
  for (auto& [n, t] : init)
    if (is_floating(t.dtype())) t = t.to(p.dtype);
  return init;
}

// Replays the recorded AdamW steps on `model` (init weights already loaded, already in p.dtype on
// p.device) and checks each loss, each gradient and the final state (parameters and buffers)
// against the file. `loss_fn` receives the batch already converted by as_input.
inline void replay(Module& model, const Golden& golden, const Precision& p,
                   const std::function<Tensor(const Tensor&, const Tensor&)>& loss_fn, const std::string& what) {
  const json opt = golden.meta.at("optimizer");
  REQUIRE(opt.at("name") == "AdamW");
  REQUIRE(opt.at("decay_rule") == "dim>=2");  // kiln's decay_groups rule, mirrored by the script
  const double lr = opt.at("lr").get<double>(), eps = opt.at("eps").get<double>();
  nn::optim::AdamW adamw(nn::optim::decay_groups(model.named_parameters(), lr, opt.at("weight_decay").get<double>()),
                     {opt.at("betas").at(0).get<double>(), opt.at("betas").at(1).get<double>()}, eps);
  const int steps = golden.meta.at("steps").get<int>();
  REQUIRE(steps > 0);
  // Per parameter, the elements whose gradient was at the noise level at some step (see Precision).
  std::map<std::string, std::vector<char>> degenerate;

  std::set<std::string> param_names;
  for (const auto& [n, t] : model.named_parameters()) {
    param_names.insert(n);
    INFO(n);
    CHECK(t.dtype() == p.dtype);
    CHECK(t.device() == p.device);
  }

  Agreement loss_agg, grad_agg, final_agg;
  model.train();
  for (int s = 0; s < steps; ++s) {
    const std::string step = std::to_string(s);
    model.zero_grad();
    Tensor loss = loss_fn(as_input(golden.at("batch." + step + ".x"), p), as_input(golden.at("batch." + step + ".y"), p));
    REQUIRE(loss.dtype() == p.dtype);
    REQUIRE(loss.device() == p.device);
    check_close("loss." + step, loss, golden.at("loss." + step), p.loss_tol, loss_agg);
    loss.backward();
    // Every parameter has a recorded gradient and nothing recorded goes unchecked.
    const auto grads = golden.with_prefix("grad." + step + ".");
    CHECK(keys(grads) == param_names);
    for (const auto& [n, param] : model.named_parameters()) {
      if (!grads.count(n)) continue;
      check_close("grad." + step + "." + n, param.grad(), grads.at(n), p.grad_tol, grad_agg);
      if (!param.grad().defined()) continue;
      const std::vector<double> g = param.grad().to_vector_double(), w = grads.at(n).to_vector_double();
      auto& mask = degenerate[n];
      mask.resize(w.size(), 0);
      for (size_t i = 0; i < w.size(); ++i) {
        const double err = std::abs(g[i] - w[i]);
        if (g[i] != w[i] && (std::abs(w[i]) < eps || err > p.noise_rel * std::abs(w[i]))) mask[i] = 1;
      }
    }
    adamw.step();
  }
  // Adam divides a gradient much smaller than eps by eps, so where the true gradient is zero and
  // only rounding noise is left (the key bias of attention: softmax ignores a shift that is
  // equal along a row, so its gradient vanishes exactly), each library moves the weight by its
  // own noise / eps * lr: ~1e-10 here in float64, differently. For noise below 1e-14 that is under
  // lr * 1e-6 per step; a real gradient moves a weight by ~lr per step, which this bound still
  // catches. In float32 the noise is larger, and so is the bound (see float32_on).
  const double degenerate_abs = steps * lr * p.degenerate_lr_steps;
  size_t n_degenerate = 0, n_elements = 0;
  for (const auto& [n, mask] : degenerate) {
    n_degenerate += static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));
    n_elements += mask.size();
  }
  // The loose bound must stay the exception: were most elements noise-dominated, the check of the
  // final weights would say little.
  CHECK(n_degenerate * 20 <= n_elements);

  auto state = model.state_dict();
  const auto finals = golden.with_prefix("final.");
  for (const auto& [n, want] : finals) {
    INFO("final." << n);
    REQUIRE(state.count(n) == 1);
    const auto it = degenerate.find(n);
    check_close("final." + n, state.at(n), want, p.final_tol, final_agg,
                it == degenerate.end() ? nullptr : &it->second, degenerate_abs);
  }
  // Each state entry is in the file, but for tied aliases stored once (lm_head.weight).
  for (const auto& [n, t] : state) {
    bool stored = finals.count(n) > 0;
    for (const auto& [m, u] : state) stored = stored || (m != n && u.is_same(t) && finals.count(m) > 0);
    INFO(n);
    CHECK(stored);
  }
  report(what + " loss", loss_agg);
  report(what + " gradients", grad_agg);
  report(what + " final state", final_agg);
  if (verbose()) {
    std::printf("%s: %zu of %zu gradient elements Adam-degenerate, held to %.3g absolute, max abs error %.3g\n",
                what.c_str(), n_degenerate, n_elements, degenerate_abs, final_agg.loose_max_abs);
  }
}

inline GPTConfig gpt_config(const json& j) {
  GPTConfig c;
  c.vocab_size = j.at("vocab_size").get<int64_t>();
  c.block_size = j.at("block_size").get<int64_t>();
  c.n_layer = j.at("n_layer").get<int64_t>();
  c.n_head = j.at("n_head").get<int64_t>();
  c.n_embd = j.at("n_embd").get<int64_t>();
  c.dropout = j.at("dropout").get<double>();
  c.bias = j.at("bias").get<bool>();
  return c;
}

// kiln's SmallCNN layer for layer, with the two conv widths as arguments (SmallCNN fixes them at
// 32 and 64, too wide for a golden file of a few tens of KB). The CPU golden test checks that widths
// (32, 64) print exactly as SmallCNN and carry the same names and shapes.
class WidthCNN : public nn::UnaryModule {
 public:
  WidthCNN(const nn::SmallCNNConfig& c, int64_t w1, int64_t w2) {
    using namespace kiln::nn;
    const int64_t side = c.image_size / 4;
    features = register_module(
        "features", std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
                        std::make_shared<Conv2d>(c.in_channels, w1, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
                        std::make_shared<BatchNorm2d>(w1), std::make_shared<ReLU>(),
                        std::make_shared<MaxPool2d>(Pair{2, 2}),
                        std::make_shared<Conv2d>(w1, w2, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
                        std::make_shared<BatchNorm2d>(w2), std::make_shared<ReLU>(),
                        std::make_shared<MaxPool2d>(Pair{2, 2})}));
    classifier = register_module(
        "classifier", std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
                          std::make_shared<Flatten>(1), std::make_shared<Linear>(w2 * side * side, c.hidden),
                          std::make_shared<ReLU>(), std::make_shared<Dropout>(c.dropout),
                          std::make_shared<Linear>(c.hidden, c.num_classes)}));
  }
  std::string type_name() const override { return "SmallCNN"; }
  Tensor forward(const Tensor& x) override { return classifier->forward(features->forward(x)); }

  std::shared_ptr<nn::Sequential> features, classifier;
};

inline nn::SmallCNNConfig cnn_config(const json& j) {
  nn::SmallCNNConfig c;
  c.in_channels = j.at("in_channels").get<int64_t>();
  c.num_classes = j.at("num_classes").get<int64_t>();
  c.image_size = j.at("image_size").get<int64_t>();
  c.hidden = j.at("hidden").get<int64_t>();
  c.dropout = j.at("dropout").get<double>();
  return c;
}

// The two golden replays, in the precision given. Each is a whole test's body.
inline void replay_gpt(const Precision& p, const std::string& what) {
  Golden golden("gpt");
  const GPTConfig config = gpt_config(golden.meta.at("config"));
  REQUIRE(config.dropout == 0.0);
  auto gpt = std::make_shared<GPT>(config);
  gpt->to(p.dtype);
  gpt->to(p.device);
  auto init = init_state(golden, p);
  init["lm_head.weight"] = init.at("transformer.wte.weight");  // stored once: tied to the embedding
  gpt->load_state_dict(init);
  REQUIRE(gpt->lm_head->weight.is_same(gpt->wte->weight));
  replay(*gpt, golden, p, [&](const Tensor& x, const Tensor& y) { return gpt->loss(x, y); }, what);
  CHECK(gpt->lm_head->weight.is_same(gpt->wte->weight));
}

inline void replay_small_cnn(const Precision& p, const std::string& what) {
  Golden golden("small_cnn");
  const json cfg = golden.meta.at("config");
  const nn::SmallCNNConfig config = cnn_config(cfg);
  REQUIRE(config.dropout == 0.0);
  WidthCNN cnn(config, cfg.at("widths").at(0).get<int64_t>(), cfg.at("widths").at(1).get<int64_t>());
  cnn.to(p.dtype);
  cnn.to(p.device);
  cnn.load_state_dict(init_state(golden, p));
  replay(cnn, golden, p, [&](const Tensor& x, const Tensor& y) { return cross_entropy(cnn.forward(x), y); }, what);
}

}  // namespace kiln::golden_test
