// Datasets' shared pieces: the per-sample generator, the transform wrapper and tensors as a dataset.
#include "data/dataset.h"

#include <string>
#include <utility>

#include "kernels/error.h"

namespace kiln::data {
namespace {

thread_local Generator* t_sample_generator = nullptr;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// One generator per thread, re-seeded for each sample: a seed costs two stores, not an allocation.
Generator& thread_generator() {
  thread_local Generator g;
  return g;
}

}  // namespace

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

Generator& sample_generator() {
  return t_sample_generator != nullptr ? *t_sample_generator : default_generator(Device::cpu());
}

SampleGeneratorScope::SampleGeneratorScope(uint64_t seed, int64_t epoch, int64_t index)
    : previous_(t_sample_generator) {
  Generator& g = thread_generator();
  if (previous_ == &g) outer_ = g.state();  // nested: the one generator is the outer sample's too
  g.manual_seed(sample_seed(seed, epoch, index));
  t_sample_generator = &g;
}

SampleGeneratorScope::~SampleGeneratorScope() {
  if (previous_ == &thread_generator()) previous_->set_state(outer_);
  t_sample_generator = previous_;
}

void check_index(const char* name, int64_t index, int64_t size) {
  if (index < 0 || index >= size) {
    throw IndexError(std::string(name) + ": index " + std::to_string(index) + " is out of range for a dataset of " +
                     std::to_string(size) + " samples");
  }
}

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base, Transform transform)
    : base_(std::move(base)), transform_(std::move(transform)) {
  if (!base_) throw Error("TransformDataset: no dataset given");
  if (!transform_) throw Error("TransformDataset: no transform given");
}

Example TransformDataset::get(int64_t index) const {
  Example e = base_->get(index);
  e.data = transform_(e.data);
  return e;
}

TensorDataset::TensorDataset(Tensor data, Tensor target) : data_(std::move(data)), target_(std::move(target)) {
  if (!data_.defined() || data_.dim() == 0) throw Error("TensorDataset: data must be a tensor of at least one dimension");
  if (!data_.is_cpu() || (target_.defined() && !target_.is_cpu())) {
    throw DeviceError("TensorDataset: data and target must be CPU tensors, got " + data_.device().str() +
                      (target_.defined() ? " and " + target_.device().str() : std::string()));
  }
  if (target_.defined() && (target_.dim() == 0 || target_.size(0) != data_.size(0))) {
    throw ShapeError("TensorDataset: data " + shape_str(data_.sizes()) + " and target " + shape_str(target_.sizes()) +
                     " must have the same first size");
  }
}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset", index, size());
  return {data_.select(0, index), target_.defined() ? target_.select(0, index) : Tensor()};
}

}  // namespace kiln::data
