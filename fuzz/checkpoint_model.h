// The fixed model and optimizer that fuzz_checkpoint loads checkpoints into, shared with the seed
// generator so that the valid seeds are checkpoints of exactly this model. Small on purpose (every
// input builds one), with a layer without bias; the optimizer adds float64 and int64 state.
#pragma once

#include <memory>

#include "nn/layers.h"
#include "nn/optim/adamw.h"

namespace kiln::fuzz {

inline std::shared_ptr<nn::Sequential> make_checkpoint_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::LayerNorm>(4), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(4, 2, /*bias=*/false)});
}

inline std::unique_ptr<nn::optim::AdamW> make_checkpoint_optimizer(const nn::Module& model) {
  return std::make_unique<nn::optim::AdamW>(model.parameters(), /*lr=*/1e-2);
}

}  // namespace kiln::fuzz
