// Map-style datasets, as PyTorch's torch.utils.data.Dataset: a size and get(i). Non-obvious
// decisions: get() is const and must be safe to call from several loader threads at once (the
// built-in datasets read immutable memory or map files); a sample is an Example of two tensors,
// the input and its target, as libtorch's; and random per-sample transforms draw from
// sample_generator(), which the DataLoader seeds from (seed, epoch, sample index) before every
// get(), so a sample's augmentation depends on which sample it is, never on which thread read it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/random.h"
#include "core/tensor.h"

namespace kiln::data {

// One sample, or (collated) one batch: the input and its target. Either may be undefined (a
// dataset without targets).
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample `index`, in [0, size()); an IndexError otherwise. Called concurrently by loader threads.
  virtual Example get(int64_t index) const = 0;
  // What the data is, for training checkpoints (a resumed run must read the same data): a few
  // name/value pairs, e.g. a file's size and CRC-32. Empty when the dataset cannot tell.
  virtual std::map<std::string, std::string> fingerprint() const { return {}; }
};

// A per-sample function of a tensor (an image, a token window); random ones draw from
// sample_generator().
using Transform = std::function<Tensor(const Tensor&)>;

// The generator random per-sample transforms draw from. Inside a DataLoader's get() (on a worker
// thread or the caller's), one seeded for that sample alone: (loader seed, epoch, sample index).
// Elsewhere, the CPU's default generator.
Generator& sample_generator();

// Sets this thread's sample generator for one sample, and puts the previous one back on exit. A
// scope inside another (a dataset whose get() reads a loader of its own on this thread) puts back
// the outer sample's state too: the outer sample's draws go on where they stood.
class SampleGeneratorScope {
 public:
  SampleGeneratorScope(uint64_t seed, int64_t epoch, int64_t index);
  ~SampleGeneratorScope();
  SampleGeneratorScope(const SampleGeneratorScope&) = delete;
  SampleGeneratorScope& operator=(const SampleGeneratorScope&) = delete;

 private:
  Generator* previous_;
  PhiloxState outer_{};  // the outer scope's state, when nested
};

// The seed of sample `index` of `epoch` in a loader seeded with `seed`: a SplitMix64 mix, so nearby
// (epoch, index) pairs get unrelated Philox keys.
uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index);

// `base`'s samples with `transform` applied to each input (the target is unchanged).
class TransformDataset final : public Dataset {
 public:
  TransformDataset(std::shared_ptr<const Dataset> base, Transform transform);
  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  std::map<std::string, std::string> fingerprint() const override { return base_->fingerprint(); }

 private:
  std::shared_ptr<const Dataset> base_;
  Transform transform_;
};

// Tensors indexed along their first dimension: sample i is (data[i], target[i]). Both must be CPU
// tensors with the same first size (target may be undefined).
class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor target);
  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;

 private:
  Tensor data_, target_;
};

// Checks index against [0, size) for dataset `name`: an IndexError naming both otherwise.
void check_index(const char* name, int64_t index, int64_t size);

}  // namespace kiln::data
