// libFuzzer target for training checkpoints (nn/training_checkpoint.h): the input is a checkpoint
// file, loaded into the fixed model of checkpoint_model.h with and without its AdamW optimizer, and
// with the optimizer and a GradScaler.
// An accepted checkpoint must leave a model and optimizer that can take a training step: a load
// that lets inconsistent state through would crash or trip a sanitizer there, so that is checked too.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/ops/random.h"
#include "core/random.h"
#include "fuzz/checkpoint_model.h"
#include "fuzz/fuzz_common.h"
#include "nn/amp/grad_scaler.h"
#include "nn/training_checkpoint.h"

namespace {

using kiln::Tensor;

// One training step on a fixed batch: forward, backward, optimizer update.
void train_step(kiln::nn::Sequential& model, kiln::nn::optim::Optimizer& opt) {
  Tensor x = kiln::randn({2, 3});
  Tensor loss = model(x).sum();
  opt.zero_grad();
  loss.backward();
  opt.step();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kiln::fuzz::init_quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemFile input("fuzz_checkpoint");
  const std::string& path = input.write(data, size);
  // A checkpoint restores the global generators. Reseeding per input keeps every run of an input
  // the same (libFuzzer assumes that), whatever the inputs before it restored.
  kiln::manual_seed(0);

  auto model = kiln::fuzz::make_checkpoint_model();
  auto opt = kiln::fuzz::make_checkpoint_optimizer(*model);
  bool loaded = false;
  kiln::fuzz::expect_kiln_errors_only("fuzz_checkpoint", [&] {
    kiln::nn::load_checkpoint(path, *model, opt.get());
    loaded = true;
  });
  if (loaded) {
    // Past the loader, an error is no refusal of the file: the state it let through is unusable.
    try {
      train_step(*model, *opt);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_checkpoint: FINDING: a training step after a successful load failed: %s\n",
                   e.what());
      std::abort();
    }
  }

  // With a loss scaler too: its state must leave a scaler that can take a scaled step.
  kiln::manual_seed(0);
  auto scaled_model = kiln::fuzz::make_checkpoint_model();
  auto scaled_opt = kiln::fuzz::make_checkpoint_optimizer(*scaled_model);
  kiln::nn::amp::GradScaler scaler;
  bool scaler_loaded = false;
  kiln::fuzz::expect_kiln_errors_only("fuzz_checkpoint", [&] {
    kiln::nn::load_checkpoint(path, *scaled_model, scaled_opt.get(), {}, &scaler);
    scaler_loaded = true;
  });
  if (scaler_loaded) {
    try {
      Tensor loss = scaler.scale((*scaled_model)(kiln::randn({2, 3})).sum());
      scaled_opt->zero_grad();
      loss.backward();
      scaler.step(*scaled_opt);
      scaler.update();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_checkpoint: FINDING: a scaled training step after a successful load failed: %s\n",
                   e.what());
      std::abort();
    }
  }

  kiln::manual_seed(0);
  auto bare = kiln::fuzz::make_checkpoint_model();
  kiln::fuzz::expect_kiln_errors_only("fuzz_checkpoint", [&] { kiln::nn::load_checkpoint(path, *bare, nullptr); });
  return 0;
}
