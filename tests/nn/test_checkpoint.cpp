// Training checkpoint tests. The central one: 2N uninterrupted steps against N steps, save, a
// fresh model loads, N more steps; parameters must match bit for bit. Every step draws its batch
// and a dropout mask from the CPU generator, so the test fails unless the generator state is
// restored with the weights.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>

#include "core/kiln.h"
#include "kernels/error.h"
#include "tests/kernels/log_capture.h"
#include "nn/module.h"
#include "nn/optim/adamw.h"
#include "nn/optim/sgd.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"
#include "tests/temp_dir.h"
#include "tests/bitwise.h"


using namespace kiln;
using namespace kiln::nn;
namespace fs = std::filesystem;

namespace {

// Each test's own directory ("kiln_ckpt_XXXXXX"), removed when it ends.
struct TempDir : kiln::test::TempDir {
  TempDir() : kiln::test::TempDir("kiln_ckpt") {}
};

using kiln::test::bitwise_equal;

bool same_state(const Module& a, const Module& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (auto& [name, t] : sa) {
    if (!sb.count(name) || !bitwise_equal(t, sb[name])) return false;
  }
  return true;
}

// Two parameters and a buffer (an exponential moving average of the outputs).
class Affine : public Module {
 public:
  Affine(int64_t in, int64_t out) {
    weight_ = register_parameter("weight", randn({out, in}) * 0.3);
    bias_ = register_parameter("bias", randn({out}) * 0.1);
    running_ = register_buffer("running_mean", zeros({out}));
  }
  std::string type_name() const override { return "Affine"; }
  Tensor forward(const Tensor& x) {
    Tensor y = linear(x, weight_, bias_);
    if (is_training()) {
      NoGradGuard no_grad;
      running_.mul_(0.9).add_(y.detach().mean({0}), 0.1);
    }
    return y;
  }
  Tensor weight_, bias_, running_;
};

// A two-layer net of Affine children, so checkpoint keys are dotted ("model.fc1.weight").
class TinyNet : public Module {
 public:
  TinyNet(int64_t in, int64_t hidden, int64_t out) {
    fc1_ = register_module("fc1", std::make_shared<Affine>(in, hidden));
    fc2_ = register_module("fc2", std::make_shared<Affine>(hidden, out));
  }
  std::string type_name() const override { return "TinyNet"; }
  Tensor forward(const Tensor& x) {
    Tensor h = dropout(tanh(fc1_->forward(x)), 0.3, is_training());
    return fc2_->forward(h);
  }
  std::shared_ptr<Affine> fc1_, fc2_;
};

class OtherNet : public Module {
 public:
  OtherNet() { register_parameter("w", randn({4, 3})); }
  std::string type_name() const override { return "OtherNet"; }
};

// One step on a random regression batch: the batch and the dropout mask both come from the CPU
// generator. Without an optimizer, plain gradient descent.
void train_step(TinyNet& model, double lr, optim::Optimizer* opt = nullptr) {
  Tensor x = randn({8, 3});
  Tensor target = randn({8, 2});
  Tensor loss = mse_loss(model.forward(x), target);
  loss.backward();
  if (opt) {
    opt->step();
    opt->zero_grad();
    return;
  }
  NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.sub_(p.grad(), lr);
  model.zero_grad();
}

enum class OptKind { SGDMomentum, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(OptKind kind, const TinyNet& model) {
  if (kind == OptKind::SGDMomentum) {
    return std::make_unique<optim::SGD>(model.parameters(), 0.05, /*momentum=*/0.9, /*dampening=*/0.0,
                                        /*weight_decay=*/1e-3, /*nesterov=*/true);
  }
  // Two groups (decay and no decay), so group keys and per-group step counters are exercised.
  return std::make_unique<optim::AdamW>(optim::decay_groups(model.named_parameters(), 0.01, 0.1));
}

bool same_optimizer_state(const optim::Optimizer& a, const optim::Optimizer& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (auto& [key, t] : sa) {
    if (!sb.count(key) || !bitwise_equal(t, sb[key])) return false;
  }
  return true;
}

constexpr int kSteps = 5;
constexpr double kLr = 0.05;

}  // namespace

TEST_CASE("resuming from a checkpoint reproduces the uninterrupted run bit for bit", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");

  // Run A: 2N steps without interruption.
  manual_seed(2024);
  auto a = std::make_shared<TinyNet>(3, 6, 2);
  for (int i = 0; i < 2 * kSteps; ++i) train_step(*a, kLr);

  // Run B: N steps, then a checkpoint.
  manual_seed(2024);
  auto b = std::make_shared<TinyNet>(3, 6, 2);
  for (int i = 0; i < kSteps; ++i) train_step(*b, kLr);
  save_checkpoint(path, *b, nullptr, TrainingState{kSteps, {{"epoch", 1}, {"batch", -3}}, {}, {}});
  const PhiloxState at_save = default_generator(Device::cpu()).state();

  // The process "restarts": a different seed, other draws, a freshly initialized model.
  manual_seed(99);
  (void)rand({17});
  auto c = std::make_shared<TinyNet>(3, 6, 2);
  CHECK_FALSE(same_state(*b, *c));
  TrainingState st = load_checkpoint(path, *c, nullptr);
  CHECK(st.step == kSteps);
  CHECK(st.data_position == std::map<std::string, int64_t>{{"epoch", 1}, {"batch", -3}});
  CHECK(default_generator(Device::cpu()).state().seed == at_save.seed);
  CHECK(default_generator(Device::cpu()).state().offset == at_save.offset);
  CHECK(same_state(*b, *c));
  for (int i = 0; i < kSteps; ++i) train_step(*c, kLr);
  CHECK(same_state(*a, *c));

  // The generator state is what makes it work: weights alone give another run.
  manual_seed(2024);
  auto e = std::make_shared<TinyNet>(3, 6, 2);
  std::map<std::string, Tensor> model_only;
  for (auto& [name, t] : load_safetensors(path))
    if (name.rfind("model.", 0) == 0) model_only[name.substr(6)] = t;
  e->load_state_dict(model_only);
  for (int i = 0; i < kSteps; ++i) train_step(*e, kLr);
  CHECK_FALSE(same_state(*a, *e));
}

TEST_CASE("resuming with an optimizer (SGD with momentum, AdamW) is bitwise exact", "[checkpoint]") {
  const OptKind kind = GENERATE(OptKind::SGDMomentum, OptKind::AdamW);
  INFO((kind == OptKind::AdamW ? "AdamW" : "SGD"));
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");

  manual_seed(77);
  auto a = std::make_shared<TinyNet>(3, 6, 2);
  auto opt_a = make_optimizer(kind, *a);
  for (int i = 0; i < 2 * kSteps; ++i) train_step(*a, kLr, opt_a.get());

  manual_seed(77);
  auto b = std::make_shared<TinyNet>(3, 6, 2);
  auto opt_b = make_optimizer(kind, *b);
  for (int i = 0; i < kSteps; ++i) train_step(*b, kLr, opt_b.get());
  save_checkpoint(path, *b, opt_b.get(), TrainingState{opt_b->step_count(), {{"batch", kSteps}}, {}, {}});
  CHECK(SafetensorsFile(path).metadata().at("kiln.has_optimizer") == "1");
  CHECK(SafetensorsFile(path).contains("optim.step"));

  manual_seed(1);
  auto c = std::make_shared<TinyNet>(3, 6, 2);
  auto opt_c = make_optimizer(kind, *c);
  TrainingState st = load_checkpoint(path, *c, opt_c.get());
  CHECK(st.step == kSteps);
  CHECK(opt_c->step_count() == kSteps);
  CHECK(same_optimizer_state(*opt_b, *opt_c));
  for (int i = 0; i < kSteps; ++i) train_step(*c, kLr, opt_c.get());
  CHECK(same_state(*a, *c));
  CHECK(same_optimizer_state(*opt_a, *opt_c));

  // The optimizer state is what makes it work: a fresh optimizer over the same weights and
  // generator state drifts away.
  auto d = std::make_shared<TinyNet>(3, 6, 2);
  auto opt_d = make_optimizer(kind, *d);
  load_checkpoint(path, *d, nullptr);
  for (int i = 0; i < kSteps; ++i) train_step(*d, kLr, opt_d.get());
  CHECK_FALSE(same_state(*a, *d));
}

TEST_CASE("load_checkpoint checks the optimizer against the checkpoint", "[checkpoint]") {
  TempDir dir;
  manual_seed(8);
  auto m = std::make_shared<TinyNet>(3, 4, 2);
  const std::string no_opt = dir.file("no_opt.safetensors");
  save_checkpoint(no_opt, *m, nullptr, TrainingState{});
  auto fresh = std::make_shared<TinyNet>(3, 4, 2);
  auto opt = make_optimizer(OptKind::AdamW, *fresh);
  CHECK_THROWS_WITH(load_checkpoint(no_opt, *fresh, opt.get()), Catch::Contains("no optimizer state"));

  // SGD state loaded into AdamW: the optimizer refuses, and the model is left as it was.
  auto sgd = make_optimizer(OptKind::SGDMomentum, *m);
  train_step(*m, kLr, sgd.get());
  const std::string with_sgd = dir.file("sgd.safetensors");
  save_checkpoint(with_sgd, *m, sgd.get(), TrainingState{1, {}, {}, {}});
  Tensor w_before = fresh->fc1_->weight_.clone();
  CHECK_THROWS_AS(load_checkpoint(with_sgd, *fresh, opt.get()), Error);
  CHECK(bitwise_equal(fresh->fc1_->weight_, w_before));
}

TEST_CASE("a checkpoint is one safetensors file with kiln's metadata", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(5);
  auto m = std::make_shared<TinyNet>(3, 4, 2);
  (void)randn({3});  // move the offset off zero
  save_checkpoint(path, *m, nullptr, TrainingState{42, {}, {{"dataset", "fashion-mnist"}}, {}});

  SafetensorsFile f(path);
  CHECK(f.names() == std::vector<std::string>{"model.fc1.bias", "model.fc1.running_mean", "model.fc1.weight",
                                              "model.fc2.bias", "model.fc2.running_mean", "model.fc2.weight"});
  const auto& meta = f.metadata();
  CHECK(meta.at("kiln.checkpoint_version") == "2");
  CHECK(meta.at("kiln.step") == "42");
  CHECK(meta.at("kiln.model_type") == "TinyNet");
  CHECK(meta.at("kiln.has_optimizer") == "0");
  CHECK(meta.at("kiln.data_position") == "{}");
  CHECK(meta.at("kiln.data_fingerprint") == R"({"dataset":"fashion-mnist"})");
  CHECK(f.checksums().size() == 6);  // one per tensor
  const PhiloxState s = default_generator(Device::cpu()).state();
  CHECK(meta.at("kiln.rng").find("\"cpu\":{\"offset\":\"" + std::to_string(s.offset) + "\",\"seed\":\"" +
                                 std::to_string(s.seed) + "\"}") != std::string::npos);
  CHECK(load_checkpoint(path, *m, nullptr).step == 42);
  // No settings recorded: no key, and none loaded.
  CHECK(meta.count("kiln.settings") == 0);
  CHECK(load_checkpoint(path, *m, nullptr).settings.empty());

  // The loop's settings round-trip as strings (a resume says which it changes).
  const TrainingState with{7, {}, {}, {{"lr", "0.0006"}, {"amp", "fp16"}, {"note", "quote \" and é"}}};
  save_checkpoint(path, *m, nullptr, with);
  CHECK(SafetensorsFile(path).metadata().at("kiln.settings") ==
        R"({"amp":"fp16","lr":"0.0006","note":"quote \" and é"})");
  CHECK(load_checkpoint(path, *m, nullptr).settings == with.settings);
}

TEST_CASE("checkpoints restore CUDA generator states without touching CUDA", "[checkpoint]") {
  // A checkpoint as a GPU machine writes it (a "cuda:1" generator entry), edited in place: the
  // states are host values, so even a CPU-only build restores them.
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto m = std::make_shared<TinyNet>(3, 4, 2);
  save_checkpoint(path, *m, nullptr, TrainingState{1, {}, {}, {}});
  SafetensorsFile f(path);
  auto meta = f.metadata();
  meta["kiln.rng"] = R"({"cpu":{"seed":"11","offset":"22"},"cuda:1":{"seed":"18446744073709551615","offset":"7"}})";
  save_safetensors(path, f.load_all(), meta);

  load_checkpoint(path, *m, nullptr);
  CHECK(default_generator(Device::cpu()).state().seed == 11);
  CHECK(default_generator(Device::cpu()).state().offset == 22);
  CHECK(default_generator(Device::cuda(1)).state().seed == UINT64_MAX);
  CHECK(default_generator(Device::cuda(1)).state().offset == 7);
  manual_seed(0);
}

TEST_CASE("load_checkpoint rejects corrupt checkpoints and other models", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(3);
  auto m = std::make_shared<TinyNet>(3, 4, 2);
  save_checkpoint(path, *m, nullptr, TrainingState{7, {{"epoch", 2}}, {{"dataset", "fashion-mnist train"}}, {}});

  auto fresh = std::make_shared<TinyNet>(3, 4, 2);
  auto before = fresh->state_dict();
  std::map<std::string, Tensor> before_copy;
  for (auto& [n, t] : before) before_copy[n] = t.clone();
  auto untouched = [&] {
    for (auto& [n, t] : fresh->state_dict())
      if (!bitwise_equal(t, before_copy[n])) return false;
    return true;
  };

  SECTION("truncated file") {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string cut = dir.file("cut.safetensors");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    CHECK_THROWS_AS(load_checkpoint(cut, *fresh, nullptr), IOError);
    CHECK(untouched());
  }
  SECTION("a plain safetensors file is not a checkpoint") {
    const std::string plain = dir.file("plain.safetensors");
    save_safetensors(plain, m->state_dict());
    CHECK_THROWS_WITH(load_checkpoint(plain, *fresh, nullptr), Catch::Contains("not a kiln training checkpoint"));
    CHECK(untouched());
  }
  SECTION("bad metadata values") {
    SafetensorsFile f(path);
    auto tensors = f.load_all();
    const std::string bad = dir.file("bad.safetensors");
    for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"kiln.checkpoint_version", "1"},
             {"kiln.checkpoint_version", "3"},
             {"kiln.step", "-1"},
             {"kiln.data_fingerprint", R"({"dataset":7})"},
             {"kiln.data_fingerprint", "[]"},
             {"kiln.settings", R"({"lr":0.1})"},
             {"kiln.settings", "lr"},
             {"kiln.step", "12x"},
             {"kiln.data_position", R"({"epoch":1.5})"},
             {"kiln.data_position", "[1]"},
             {"kiln.data_position", R"({"epoch":9223372036854775808})"},
             {"kiln.data_position", "{\"epoch\":" + std::string(100000, '[') + std::string(100000, ']') + "}"},
             {"kiln.rng", R"({"cpu":{"seed":"1"}})"},
             {"kiln.rng", R"({"cpu":{"seed":"1","offset":"-2"}})"},
             {"kiln.rng", R"({"cpu":{"seed":"1","offset":"2"},"tpu:0":{"seed":"1","offset":"2"}})"},
             {"kiln.rng", R"({"cuda:0":{"seed":"1","offset":"2"}})"},
         }) {
      INFO(key << " = " << value);
      auto meta = f.metadata();
      meta[key] = value;
      save_safetensors(bad, tensors, meta);
      CHECK_THROWS_AS(load_checkpoint(bad, *fresh, nullptr), IOError);
    }
    CHECK(untouched());
  }
  SECTION("a different shape names the key") {
    auto wider = std::make_shared<TinyNet>(3, 5, 2);
    CHECK_THROWS_WITH(load_checkpoint(path, *wider, nullptr),
                      Catch::Contains("model.fc1.weight") && Catch::Contains("[5, 3]") && Catch::Contains("[4, 3]"));
  }
  SECTION("a checkpoint of another model") {
    auto other = std::make_shared<OtherNet>();
    Tensor w = other->state_dict()["w"].clone();
    CHECK_THROWS_WITH(load_checkpoint(path, *other, nullptr),
                      Catch::Contains("TinyNet") && Catch::Contains("OtherNet") && Catch::Contains("missing model.w") &&
                          Catch::Contains("unexpected model.fc1.bias"));
    CHECK(bitwise_equal(other->state_dict()["w"], w));
  }
  SECTION("a flipped byte in a tensor's data is found by its checksum") {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(io.tellg());
    io.seekg(size - 5);  // inside the last tensor's bytes
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    io.seekp(size - 5);
    io.write(&c, 1);
    io.close();
    CHECK_THROWS_AS(load_checkpoint(path, *fresh, nullptr), IOError);
    CHECK_THROWS_WITH(load_checkpoint(path, *fresh, nullptr),
                      Catch::Contains("does not match its checksum") && Catch::Contains("the file is corrupt"));
    CHECK(untouched());
  }
  SECTION("a checkpoint whose checksums were removed") {
    SafetensorsFile f(path);
    // The same file with the checksum table taken out of the header (padded back to its length).
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const uint64_t n = f.data_start() - 8;
    auto json_header = nlohmann::json::parse(bytes.substr(8, n));
    REQUIRE(json_header["__metadata__"].erase(kChecksumMetadataKey) == 1);
    std::string header = json_header.dump();
    header.resize(n, ' ');
    const std::string stripped = dir.file("stripped.safetensors");
    std::ofstream(stripped, std::ios::binary) << bytes.substr(0, 8) << header << bytes.substr(8 + n);
    REQUIRE(SafetensorsFile(stripped).checksums().empty());
    CHECK_THROWS_WITH(load_checkpoint(stripped, *fresh, nullptr), Catch::Contains("has no checksum"));
    CHECK(untouched());
  }
  SECTION("a checkpoint of other data") {
    CHECK_THROWS_WITH(load_checkpoint(path, *fresh, nullptr, {{"dataset", "tiny shakespeare"}}),
                      Catch::Contains("refers to other data") &&
                          Catch::Contains(R"(dataset: checkpoint "fashion-mnist train", this run "tiny shakespeare")"));
    CHECK_THROWS_WITH(load_checkpoint(path, *fresh, nullptr, {{"dataset", "fashion-mnist train"}, {"vocab", "abc"}}),
                      Catch::Contains(R"(vocab: checkpoint (none), this run "abc")"));
    CHECK(untouched());
    CHECK(load_checkpoint(path, *fresh, nullptr, {{"dataset", "fashion-mnist train"}}).step == 7);
  }
  SECTION("the loop position is range-checked by its reader") {
    const TrainingState st = load_checkpoint(path, *fresh, nullptr);
    CHECK(st.position("epoch", 0, 5, path) == 2);
    CHECK_THROWS_WITH(st.position("epoch", 0, 1, path), Catch::Contains("\"epoch\" is 2, outside [0, 1]"));
    CHECK_THROWS_WITH(st.position("batch", 0, 1, path), Catch::Contains("has no \"batch\""));
  }
  SECTION("non-finite weights load with a warning naming them") {
    auto nan_model = std::make_shared<TinyNet>(3, 4, 2);
    {
      NoGradGuard g;
      nan_model->fc1_->weight_.fill_(std::numeric_limits<float>::quiet_NaN());
    }
    const std::string nan_path = dir.file("nan.safetensors");
    save_checkpoint(nan_path, *nan_model, nullptr, TrainingState{1, {}, {}, {}});
    kiln::test::LogCapture log(LogLevel::Warn);
    load_checkpoint(nan_path, *fresh, nullptr);
    CHECK(log.count(LogLevel::Warn, {"non-finite values: model.fc1.weight (12 of 12)"}) == 1);
  }
  SECTION("an extra tensor outside model.* and optim.*") {
    SafetensorsFile f(path);
    auto tensors = f.load_all();
    tensors["stray"] = ones({1});
    const std::string bad = dir.file("stray.safetensors");
    save_safetensors(bad, tensors, f.metadata());
    CHECK_THROWS_WITH(load_checkpoint(bad, *fresh, nullptr), Catch::Contains("stray"));
    CHECK(untouched());
  }
}

TEST_CASE("checkpoints keep tied parameters tied and stored once", "[checkpoint]") {
  class Tied : public Module {
   public:
    Tied() {
      w_ = register_parameter("embed", randn({6, 4}));
      register_parameter("unembed", w_);
      register_buffer("steps", zeros({1}, DType::Int64));
    }
    std::string type_name() const override { return "Tied"; }
    Tensor w_;
  };
  TempDir dir;
  const std::string path = dir.file("tied.safetensors");
  auto a = std::make_shared<Tied>();
  save_checkpoint(path, *a, nullptr, TrainingState{});
  CHECK(SafetensorsFile(path).aliases() == std::map<std::string, std::string>{{"model.unembed", "model.embed"}});
  auto b = std::make_shared<Tied>();
  load_checkpoint(path, *b, nullptr);
  auto sd = b->state_dict();
  CHECK(sd["embed"].impl() == b->w_.impl());
  CHECK(sd["unembed"].impl() == b->w_.impl());
  CHECK(bitwise_equal(b->w_, a->w_));
}
