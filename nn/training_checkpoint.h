// Training checkpoints: model, optimizer, loop position and random generator states in ONE
// safetensors file, written atomically. Non-obvious decision: everything that is not a tensor
// (step, data position, Philox seeds and offsets as decimal strings) lives in the file's string
// metadata, so the file stays a plain safetensors file that any reader can open.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace kiln::nn {

// Where the training loop is. data_position holds whatever integers the loop needs to continue
// exactly where it stopped (epoch, batch index, a sampler's seed, ...); data_fingerprint says what
// those integers refer to (a dataset's name, size and checksum, a vocabulary, ...), so a resume on
// other data is refused instead of silently continuing at a position that means something else.
struct TrainingState {
  int64_t step = 0;
  std::map<std::string, int64_t> data_position;
  std::map<std::string, std::string> data_fingerprint;
  // The run's settings as the loop records them (flag name to value, as text), so that a resume can
  // say which of them it changes (a resume with other settings continues, but is no longer the
  // uninterrupted run). Not checked by load_checkpoint; empty when the checkpoint has none.
  std::map<std::string, std::string> settings;

  // data_position[key], which must exist and lie in [lo, hi]: anything else is a kiln::Error
  // naming `path` (the checkpoint), the key, its value and the range. A checkpoint's numbers are
  // input like any other: the loop checks them before it indexes anything with them.
  int64_t position(const std::string& key, int64_t lo, int64_t hi, const std::string& path) const;
};

// The checkpoint layout version written into, and required from, every checkpoint. Version 2
// added the data fingerprint and made the per-tensor checksums (safetensors.h) mandatory.
inline constexpr int kCheckpointVersion = 2;

// Writes model tensors under "model.<name>", optimizer state (when `optimizer` is given) under
// "optim.<key>", loss-scaler state (when `scaler` is given) under "scaler.<key>", and in the
// metadata: the format version, step, data_position, data_fingerprint, the model's type name, and
// the generator states of the CPU and of every visible CUDA device; every tensor's bytes carry a
// CRC-32. Atomic: a failure leaves any previous file at `path` untouched. The scaler's keys are
// optional in format version 2: a checkpoint written without a scaler is the same file as before.
void save_checkpoint(const std::string& path, const Module& model, const optim::Checkpointable* optimizer,
                     const TrainingState& state, const amp::GradScaler* scaler = nullptr);

// Restores model, optimizer and loss scaler (each when given; the checkpoint must then hold its
// state) and the generator states, and returns the loop position. Strict: missing or unexpected model keys and
// shape or dtype mismatches are a kiln::Error naming the keys, and so is a data fingerprint that
// differs from `expected_data` (when given: every key of either side must agree), all checked
// before anything is changed; a malformed or corrupt file (a checksum mismatch) is a kiln::IOError.
// Non-finite values in the model's weights load, with a warning naming the tensors. Resuming
// reproduces an uninterrupted run bit for bit.
TrainingState load_checkpoint(const std::string& path, Module& model, optim::Checkpointable* optimizer,
                              const std::map<std::string, std::string>& expected_data = {},
                              amp::GradScaler* scaler = nullptr);

}  // namespace kiln::nn
