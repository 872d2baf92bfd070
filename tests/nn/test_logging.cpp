// What nn logs: the one-time warning for a Conv2d's or ConvTranspose2d's bias feeding a
// BatchNorm2d (fires once, and never for bias=false or when something sits between the two), and
// the Info lines of checkpoint and safetensors saves and loads (path, tensor count, step; one line
// per call).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "kernels/log.h"
#include "nn/layers.h"
#include "nn/optim/sgd.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"
#include "tests/kernels/log_capture.h"
#include "tests/temp_dir.h"


using namespace kiln;
using namespace kiln::nn;
using kiln::test::LogCapture;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<Conv2d> conv(bool bias) {
  return std::make_shared<Conv2d>(3, 4, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, bias);
}

size_t bias_warnings(const LogCapture& log) { return log.count(LogLevel::Warn, {"BatchNorm2d(4)", "bias=false"}); }

// Each test's own directory ("kiln_log_XXXXXX"), removed when it ends.
struct TempDir : kiln::test::TempDir {
  TempDir() : kiln::test::TempDir("kiln_log") {}
};

}  // namespace

TEST_CASE("a Conv2d with a bias feeding a BatchNorm2d warns once per process", "[log][layers]") {
  reset_conv_bias_warning_for_testing();
  LogCapture log(LogLevel::Warn);
  manual_seed(1);
  Tensor x = randn({2, 3, 6, 6});

  // In a Sequential, twice: one warning.
  Sequential seq{conv(true), std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>()};
  seq.forward(x);
  seq.forward(x);
  INFO(log.text());
  CHECK(bias_warnings(log) == 1);

  // Called directly, as a ResNet block's forward does: the same pattern, still no second warning.
  auto c = conv(true);
  auto bn = std::make_shared<BatchNorm2d>(4);
  bn->forward(c->forward(x));
  CHECK(bias_warnings(log) == 1);
  CHECK(log.lines.size() == 1);

  // Re-armed, the direct call is caught as well.
  reset_conv_bias_warning_for_testing();
  bn->forward(c->forward(x));
  CHECK(bias_warnings(log) == 2);
}

TEST_CASE("no conv-bias warning for Conv2d(bias=false) or a layer in between", "[log][layers]") {
  reset_conv_bias_warning_for_testing();
  LogCapture log(LogLevel::Warn);
  manual_seed(2);
  Tensor x = randn({2, 3, 6, 6});
  auto bn = std::make_shared<BatchNorm2d>(4);

  Sequential seq{conv(false), bn};
  seq.forward(x);
  bn->forward(relu(conv(true)->forward(x)));  // the ReLU's output is not the conv's: no warning
  INFO(log.text());
  CHECK(log.lines.empty());

  // The same detector does fire when the pattern is there (so the silence above means something).
  bn->forward(conv(true)->forward(x));
  CHECK(bias_warnings(log) == 1);
}

TEST_CASE("a ConvTranspose2d with a bias feeding a BatchNorm2d warns and names the layer", "[log][layers]") {
  reset_conv_bias_warning_for_testing();
  LogCapture log(LogLevel::Warn);
  manual_seed(4);
  auto bn = std::make_shared<BatchNorm2d>(4);
  const Tensor x = randn({2, 3, 4, 4});
  bn->forward(ConvTranspose2d(3, 4, {4, 4}, {2, 2}, {1, 1}, {0, 0}, 1, false).forward(x));
  CHECK(log.lines.empty());
  bn->forward(ConvTranspose2d(3, 4, {4, 4}, {2, 2}, {1, 1}).forward(x));
  INFO(log.text());
  CHECK(bias_warnings(log) == 1);
  CHECK(log.count(LogLevel::Warn, {"conv_transpose2d with a bias", "ConvTranspose2d with bias=false"}) == 1);
}

TEST_CASE("checkpoint and safetensors saves and loads log one Info line each", "[log][checkpoint]") {
  TempDir dir;
  manual_seed(3);
  Sequential model{std::make_shared<Linear>(3, 4), std::make_shared<ReLU>(), std::make_shared<Linear>(4, 2)};
  optim::SGD opt(model.parameters(), 0.1, /*momentum=*/0.9);
  model.forward(randn({5, 3})).sum().backward();
  opt.step();
  const std::string ckpt = dir.file("step7.ckpt");
  TrainingState state;
  state.step = 7;
  // A checkpoint asks whether CUDA is there (for the GPU generators' states); the first such
  // question logs what it found, once per process. Ask it here, outside the captured lines.
  (void)cuda::is_available();

  {
    LogCapture log(LogLevel::Info);
    save_checkpoint(ckpt, model, &opt, state);
    INFO(log.text());
    REQUIRE(log.lines.size() == 1);  // save_checkpoint's own line, not save_safetensors' as well
    const size_t bytes = static_cast<size_t>(fs::file_size(ckpt));
    CHECK(log.count(LogLevel::Info, {"save_checkpoint", ckpt, "step 7", "(4 model,", format_bytes(bytes)}) == 1);
  }
  {
    LogCapture log(LogLevel::Warn);  // Info lines stay quiet at the default level
    save_checkpoint(ckpt, model, &opt, state);
    CHECK(log.lines.empty());
  }
  {
    LogCapture log(LogLevel::Info);
    const TrainingState loaded = load_checkpoint(ckpt, model, &opt);
    CHECK(loaded.step == 7);
    INFO(log.text());
    REQUIRE(log.lines.size() == 1);
    CHECK(log.count(LogLevel::Info, {"load_checkpoint", ckpt, "step 7", "(4 model,"}) == 1);
  }
  {
    LogCapture log(LogLevel::Info);
    const std::string weights = dir.file("model.safetensors");
    save_safetensors(weights, model.state_dict());
    load_safetensors(weights);
    INFO(log.text());
    REQUIRE(log.lines.size() == 2);
    CHECK(log.count(LogLevel::Info, {"save_safetensors", weights, "4 tensors"}) == 1);
    CHECK(log.count(LogLevel::Info, {"load_safetensors", weights, "4 tensors", "cpu"}) == 1);
  }
}
