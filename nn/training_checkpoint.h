// Training checkpoints: model, optimizer, loop position and random generator states in ONE
// safetensors file, written atomically. Non-obvious decision: everything that is not a tensor
// (step, data position, Philox seeds and offsets as decimal strings) lives in the file's string
// metadata, so the file stays a plain safetensors file that any reader can open.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace kiln::nn {

// Where the training loop is. data_position holds whatever integers the loop needs to continue
// exactly where it stopped (epoch, batch index, a sampler's seed, ...).
struct TrainingState {
  int64_t step = 0;
  std::map<std::string, int64_t> data_position;
};

// The checkpoint layout version written into, and required from, every checkpoint.
inline constexpr int kCheckpointVersion = 1;

// Writes model tensors under "model.<name>", optimizer state (when `optimizer` is given) under
// "optim.<key>", and in the metadata: the format version, step, data_position, the model's type
// name, and the generator states of the CPU and of every visible CUDA device. Atomic: a failure
// leaves any previous file at `path` untouched.
void save_checkpoint(const std::string& path, const Module& model, const optim::Optimizer* optimizer,
                     const TrainingState& state);

// Restores model, optimizer (when given; the checkpoint must then hold optimizer state) and the
// generator states, and returns the loop position. Strict: missing or unexpected model keys and
// shape or dtype mismatches are a kiln::Error naming the keys, checked before anything is changed;
// a malformed file is a kiln::IOError. Resuming reproduces an uninterrupted run bit for bit.
TrainingState load_checkpoint(const std::string& path, Module& model, optim::Optimizer* optimizer);

}  // namespace kiln::nn
