// Model-level agreement with PyTorch (ARCHITECTURE.md section 5): a tiny GPT and a tiny SmallCNN
// replay the float64 AdamW runs that tools/make_golden.py recorded in tests/golden/, checking every
// loss, every gradient and the final weights; and the safetensors exchange with PyTorch that
// tools/check_torch_interop.py drives through the directory KILN_INTEROP_DIR.
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
#include "nn/init.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"

using namespace kiln;
using namespace kiln::nn;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// float64 against float64: both sides differ only in summation order and in how an op is split
// into steps (lerp vs. multiply-add in AdamW, fused vs. unfused softmax), each a few ulps
// (~1e-16), amplified by the depth of the nets and three optimizer steps to well under 1e-12.
// 1e-10 leaves room for other BLAS orderings while any real difference in the math (a wrong
// constant, a missing term) shows up at 1e-4 or more.
constexpr double kGoldenTol = 1e-10;

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
void check_close(const std::string& name, const Tensor& got, const Tensor& want, double tol, Agreement& agg,
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

void report(const char* what, const Agreement& agg) {
  const char* v = std::getenv("KILN_GOLDEN_VERBOSE");
  if (v && *v && std::string(v) != "0") {
    std::printf("%s: worst error %.3g of the tensor scale (%s), max abs error %.3g\n", what, agg.worst,
                agg.worst_name.c_str(), agg.max_abs);
  }
}

// One golden file: its tensors, and the run's description (metadata key "golden", JSON: model,
// config, optimizer, steps).
struct Golden {
  std::map<std::string, Tensor> tensors;
  json meta;

  explicit Golden(const std::string& name) {
    const std::string path = std::string(KILN_GOLDEN_DIR) + "/" + name + ".safetensors";
    INFO("golden file " << path << " (written by tools/make_golden.py)");
    REQUIRE(fs::exists(path));
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

std::set<std::string> keys(const std::map<std::string, Tensor>& m) {
  std::set<std::string> s;
  for (const auto& [k, v] : m) s.insert(k);
  return s;
}

// Replays the recorded AdamW steps on `model` (init weights already loaded) and checks each loss,
// each gradient and the final state (parameters and buffers) against the file.
void replay(Module& model, const Golden& golden, const std::function<Tensor(const Tensor&, const Tensor&)>& loss_fn,
            const char* what) {
  const json opt = golden.meta.at("optimizer");
  REQUIRE(opt.at("name") == "AdamW");
  REQUIRE(opt.at("decay_rule") == "dim>=2");  // kiln's decay_groups rule, mirrored by the script
  const double lr = opt.at("lr").get<double>(), eps = opt.at("eps").get<double>();
  optim::AdamW adamw(optim::decay_groups(model.named_parameters(), lr, opt.at("weight_decay").get<double>()),
                     {opt.at("betas").at(0).get<double>(), opt.at("betas").at(1).get<double>()}, eps);
  const int steps = golden.meta.at("steps").get<int>();
  REQUIRE(steps > 0);
  // Per parameter, the elements whose gradient was below eps at some step, with kiln's differing
  // in rounding from the recorded one (see degenerate_abs).
  std::map<std::string, std::vector<char>> degenerate;

  std::set<std::string> param_names;
  for (const auto& [n, p] : model.named_parameters()) param_names.insert(n);

  Agreement loss_agg, grad_agg, final_agg;
  model.train();
  for (int s = 0; s < steps; ++s) {
    const std::string step = std::to_string(s);
    model.zero_grad();
    Tensor loss = loss_fn(golden.at("batch." + step + ".x"), golden.at("batch." + step + ".y"));
    REQUIRE(loss.dtype() == DType::Float64);
    check_close("loss." + step, loss, golden.at("loss." + step), kGoldenTol, loss_agg);
    loss.backward();
    // Every parameter has a recorded gradient and nothing recorded goes unchecked.
    const auto grads = golden.with_prefix("grad." + step + ".");
    CHECK(keys(grads) == param_names);
    for (const auto& [n, p] : model.named_parameters()) {
      if (!grads.count(n)) continue;
      check_close("grad." + step + "." + n, p.grad(), grads.at(n), kGoldenTol, grad_agg);
      if (!p.grad().defined()) continue;
      const std::vector<double> g = p.grad().to_vector_double(), w = grads.at(n).to_vector_double();
      auto& mask = degenerate[n];
      mask.resize(w.size(), 0);
      for (size_t i = 0; i < w.size(); ++i)
        if (std::abs(w[i]) < eps && g[i] != w[i]) mask[i] = 1;
    }
    adamw.step();
  }
  // Adam divides a gradient much smaller than eps by eps, so where the true gradient is zero and
  // only rounding noise is left (the key bias of attention: softmax ignores a shift that is
  // equal along a row, so its gradient vanishes exactly), each library moves the weight by its
  // own noise / eps * lr: ~1e-10 here, differently. For noise below 1e-14 that is under lr * 1e-6
  // per step; a real gradient moves a weight by ~lr per step, which this bound still catches.
  const double degenerate_abs = steps * lr * 1e-6;
  size_t n_degenerate = 0;
  for (const auto& [n, mask] : degenerate) n_degenerate += static_cast<size_t>(std::count(mask.begin(), mask.end(), 1));

  auto state = model.state_dict();
  const auto finals = golden.with_prefix("final.");
  for (const auto& [n, want] : finals) {
    INFO("final." << n);
    REQUIRE(state.count(n) == 1);
    const auto it = degenerate.find(n);
    check_close("final." + n, state.at(n), want, kGoldenTol, final_agg, it == degenerate.end() ? nullptr : &it->second,
                degenerate_abs);
  }
  // Each state entry is in the file, but for tied aliases stored once (lm_head.weight).
  for (const auto& [n, t] : state) {
    bool stored = finals.count(n) > 0;
    for (const auto& [m, u] : state) stored = stored || (m != n && u.is_same(t) && finals.count(m) > 0);
    INFO(n);
    CHECK(stored);
  }
  const std::string w(what);
  report((w + " loss").c_str(), loss_agg);
  report((w + " gradients").c_str(), grad_agg);
  report((w + " final state").c_str(), final_agg);
  if (const char* v = std::getenv("KILN_GOLDEN_VERBOSE"); v && *v && std::string(v) != "0")
    std::printf("%s: %zu Adam-degenerate elements held to %.3g absolute, max abs error %.3g\n", what, n_degenerate,
                degenerate_abs, final_agg.loose_max_abs);
}

GPTConfig gpt_config(const json& j) {
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

json gpt_config_json(const GPTConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
          {"n_embd", c.n_embd},         {"dropout", c.dropout},       {"bias", c.bias}};
}

// kiln's SmallCNN layer for layer, with the two conv widths as arguments (SmallCNN fixes them at
// 32 and 64, too wide for a golden file of a few tens of KB). The golden test checks that widths
// (32, 64) print exactly as SmallCNN and carry the same names and shapes.
class WidthCNN : public UnaryModule {
 public:
  WidthCNN(const SmallCNNConfig& c, int64_t w1, int64_t w2) {
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

  std::shared_ptr<Sequential> features, classifier;
};

SmallCNNConfig cnn_config(const json& j) {
  SmallCNNConfig c;
  c.in_channels = j.at("in_channels").get<int64_t>();
  c.num_classes = j.at("num_classes").get<int64_t>();
  c.image_size = j.at("image_size").get<int64_t>();
  c.hidden = j.at("hidden").get<int64_t>();
  c.dropout = j.at("dropout").get<double>();
  return c;
}

std::map<std::string, Shape> shapes(const Module& m) {
  std::map<std::string, Shape> out;
  for (const auto& [n, t] : m.state_dict()) out[n] = t.sizes();
  return out;
}

}  // namespace

TEST_CASE("golden: a tiny GPT matches PyTorch over three AdamW steps", "[golden]") {
  Golden golden("gpt");
  const GPTConfig config = gpt_config(golden.meta.at("config"));
  REQUIRE(config.dropout == 0.0);
  auto gpt = std::make_shared<GPT>(config);
  gpt->to(DType::Float64);
  auto init = golden.with_prefix("init.");
  init["lm_head.weight"] = init.at("transformer.wte.weight");  // stored once: tied to the embedding
  gpt->load_state_dict(init);
  REQUIRE(gpt->lm_head->weight.is_same(gpt->wte->weight));
  replay(*gpt, golden, [&](const Tensor& x, const Tensor& y) { return gpt->loss(x, y); }, "gpt");
  CHECK(gpt->lm_head->weight.is_same(gpt->wte->weight));
}

TEST_CASE("golden: a narrow SmallCNN matches PyTorch over three AdamW steps (BatchNorm training)", "[golden]") {
  Golden golden("small_cnn");
  const json cfg = golden.meta.at("config");
  const SmallCNNConfig config = cnn_config(cfg);
  REQUIRE(config.dropout == 0.0);

  // The stand-in is SmallCNN: at SmallCNN's widths it prints the same tree and has the same
  // state dict names and shapes.
  WidthCNN full(config, 32, 64);
  SmallCNN reference(config);
  CHECK(full.str() == reference.str());
  CHECK(shapes(full) == shapes(reference));

  WidthCNN cnn(config, cfg.at("widths").at(0).get<int64_t>(), cfg.at("widths").at(1).get<int64_t>());
  cnn.to(DType::Float64);
  cnn.load_state_dict(golden.with_prefix("init."));
  replay(cnn, golden, [&](const Tensor& x, const Tensor& y) { return cross_entropy(cnn.forward(x), y); }, "small_cnn");
}

// --- interop ---------------------------------------------------------------------------------------
// tools/check_torch_interop.py sets KILN_INTEROP_DIR and runs this test twice. Each run writes, per
// model and dtype, kiln_<tag>.safetensors (the state dict, lm_head stored once as an alias) and
// kiln_<tag>_io.safetensors (a batch "x" and kiln's outputs "out", in eval mode). When PyTorch's
// torch_<tag>.safetensors and torch_<tag>_io.safetensors are there (the second run), kiln loads
// them, checks its outputs on PyTorch's batch against PyTorch's, and writes what it loaded and
// computed as kiln_from_torch_<tag>[_io].safetensors for the script to compare. Without
// KILN_INTEROP_DIR it runs in a temporary directory: kiln's own save/load round trip.
namespace {

struct ScratchDir {
  fs::path path;
  bool owned = false;
  ScratchDir() {
    if (const char* d = std::getenv("KILN_INTEROP_DIR"); d && *d) {
      path = d;
      fs::create_directories(path);
    } else {
      std::string tmpl = (fs::temp_directory_path() / "kiln_interop_XXXXXX").string();
      REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
      path = tmpl;
      owned = true;
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    if (owned) fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Order-one weights (as make_golden.py's), so outputs depend visibly on every tensor; running
// statistics off their defaults, since eval mode reads them.
void randomize(Module& m) {
  NoGradGuard no_grad;
  for (auto& [n, p] : m.named_parameters()) {
    const auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
    if (ends("wte.weight") || ends("wpe.weight")) {
      init::normal_(p, 0.0, 0.5);
    } else if (p.dim() >= 2) {
      init::normal_(p, 0.0, 1.0 / std::sqrt(static_cast<double>(p.numel() / p.size(0))));
    } else if (ends("weight")) {
      init::normal_(p, 1.0, 0.1);
    } else {
      init::normal_(p, 0.0, 0.1);
    }
  }
  for (auto& [n, b] : m.named_buffers()) {
    if (n.find("running_mean") != std::string::npos) init::normal_(b, 0.0, 0.1);
    if (n.find("running_var") != std::string::npos) init::uniform_(b, 0.5, 1.5);
  }
}

// Outputs computed from the same weights by two libraries: float64 agrees to rounding (see
// kGoldenTol); float32 differs by float32 rounding in different summation orders through a few
// layers, ~1e-6 of the output scale, so 1e-4 still catches any wrong weight or op.
double interop_tol(DType dtype) { return dtype == DType::Float64 ? kGoldenTol : 1e-4; }

// Runs kiln's half of the exchange for one model: `make` builds a fresh model in `dtype`.
void exchange(const ScratchDir& dir, const std::string& tag, const json& config, DType dtype,
              const std::function<std::shared_ptr<UnaryModule>()>& make, const Tensor& x) {
  const std::map<std::string, std::string> meta = {{"config", config.dump()},
                                                   {"dtype", dtype == DType::Float64 ? "float64" : "float32"}};
  auto model = make();
  randomize(*model);
  model->eval();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = model->forward(x);
  }
  save_safetensors(dir.file("kiln_" + tag + ".safetensors"), model->state_dict(), meta);
  save_safetensors(dir.file("kiln_" + tag + "_io.safetensors"), {{"x", x}, {"out", out}}, meta);

  // kiln reads its own file back: same outputs, bit for bit.
  {
    auto again = make();
    load_into(*again, dir.file("kiln_" + tag + ".safetensors"));
    again->eval();
    NoGradGuard no_grad;
    Agreement agg;
    check_close(tag + " kiln round trip", again->forward(x), out, 0.0, agg);
  }

  const std::string torch_state = dir.file("torch_" + tag + ".safetensors");
  const std::string torch_io = dir.file("torch_" + tag + "_io.safetensors");
  if (!fs::exists(torch_state) || !fs::exists(torch_io)) return;
  std::map<std::string, Tensor> state = load_safetensors(torch_state);
  // PyTorch's save_file refuses shared tensors, so a tied head is saved once under the
  // embedding's name (as nanoGPT checkpoints are): tie it again.
  if (!state.count("lm_head.weight") && state.count("transformer.wte.weight"))
    state["lm_head.weight"] = state.at("transformer.wte.weight");
  auto loaded = make();
  loaded->load_state_dict(state);
  loaded->eval();
  const auto io = load_safetensors(torch_io);
  Tensor got;
  {
    NoGradGuard no_grad;
    got = loaded->forward(io.at("x"));
  }
  Agreement agg;
  check_close(tag + " outputs on PyTorch's weights", got, io.at("out"), interop_tol(dtype), agg);
  save_safetensors(dir.file("kiln_from_torch_" + tag + ".safetensors"), loaded->state_dict(), meta);
  save_safetensors(dir.file("kiln_from_torch_" + tag + "_io.safetensors"), {{"x", io.at("x")}, {"out", got}}, meta);
}

}  // namespace

TEST_CASE("interop: safetensors files exchanged with PyTorch", "[golden][interop]") {
  ScratchDir dir;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const std::string suffix = dtype == DType::Float64 ? "_f64" : "_f32";
    manual_seed(8);

    GPTConfig gc;
    gc.vocab_size = 37;
    gc.block_size = 16;
    gc.n_layer = 2;
    gc.n_head = 4;
    gc.n_embd = 32;
    gc.dropout = 0.1;  // eval mode: off, as in PyTorch
    exchange(dir, "gpt" + suffix, gpt_config_json(gc), dtype, [&] {
      auto m = std::make_shared<GPT>(gc);
      m->to(dtype);
      return m;
    }, randint(0, gc.vocab_size, {2, 12}));

    SmallCNNConfig cc;
    cc.in_channels = 1;
    cc.num_classes = 10;
    cc.image_size = 8;
    cc.hidden = 16;
    const json cj = {{"in_channels", cc.in_channels}, {"num_classes", cc.num_classes}, {"image_size", cc.image_size},
                     {"hidden", cc.hidden},           {"dropout", cc.dropout},         {"widths", {32, 64}}};
    exchange(dir, "small_cnn" + suffix, cj, dtype, [&] {
      auto m = std::make_shared<SmallCNN>(cc);
      m->to(dtype);
      return m;
    }, randn({4, cc.in_channels, cc.image_size, cc.image_size}, TensorOptions(dtype)));
  }
}
