// Model-level agreement with PyTorch (docs/architecture.md section 6): a tiny GPT and a tiny SmallCNN
// replay the float64 AdamW runs that tools/make_golden.py recorded in tests/golden/ (in float64, and
// in float32 with the tolerances of tests/nn/golden_replay.h), checking every loss, every gradient
// and the final weights; and the safetensors exchange with PyTorch that tools/check_torch_interop.py
// drives through the directory KILN_INTEROP_DIR.
#include "tests/nn/golden_replay.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/kiln.h"
#include "nn/init.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::golden_test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json gpt_config_json(const GPTConfig& c) {
  return {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
          {"n_embd", c.n_embd},         {"dropout", c.dropout},       {"bias", c.bias}};
}

std::map<std::string, Shape> shapes(const Module& m) {
  std::map<std::string, Shape> out;
  for (const auto& [n, t] : m.state_dict()) out[n] = t.sizes();
  return out;
}

}  // namespace

TEST_CASE("golden: a tiny GPT matches PyTorch over three AdamW steps", "[golden]") {
  replay_gpt(float64_cpu(), "gpt float64 cpu");
}

TEST_CASE("golden: a narrow SmallCNN matches PyTorch over three AdamW steps (BatchNorm training)", "[golden]") {
  // The stand-in is SmallCNN: at SmallCNN's widths it prints the same tree and has the same
  // state dict names and shapes.
  Golden golden("small_cnn");
  const SmallCNNConfig config = cnn_config(golden.meta.at("config"));
  WidthCNN full(config, 32, 64);
  SmallCNN reference(config);
  CHECK(full.str() == reference.str());
  CHECK(shapes(full) == shapes(reference));
  replay_small_cnn(float64_cpu(), "small_cnn float64 cpu");
}

// The same replays in float32: the tolerances the CUDA golden tests use (tests/cuda), checked
// here against the CPU's float32 arithmetic.
TEST_CASE("golden: the tiny GPT in float32 follows the float64 recording", "[golden]") {
  replay_gpt(float32_on(Device::cpu()), "gpt float32 cpu");
}

TEST_CASE("golden: the narrow SmallCNN in float32 follows the float64 recording", "[golden]") {
  replay_small_cnn(float32_on(Device::cpu()), "small_cnn float32 cpu");
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
    // n by name: clang 14 cannot capture a structured binding.
    const auto ends = [&n = n](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
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
