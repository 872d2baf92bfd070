// The DataLoader: batches of a map-style dataset, read by worker threads ahead of the training loop,
// as PyTorch's torch.utils.data.DataLoader. Non-obvious decisions:
// - Workers are threads, not processes: a C++ dataset has no interpreter lock to escape, and
//   threads share the dataset's memory (a mapped token file, decoded arrays) for free.
// - Batches come out in the sampler's order, whatever worker finished first, and every random draw
//   a sample's transform makes comes from a generator seeded by (seed, epoch, sample index) (see
//   data/dataset.h, sample_generator): a batch is a pure function of (seed, epoch, its indices), so
//   results do not depend on num_workers, on thread timing, or on a resume. PyTorch seeds per
//   worker instead, so its results change with num_workers.
// - The loader's position is two integers (epoch, batches delivered in it): a training checkpoint
//   stores them (state()) and a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace kiln::data {

// Builds one batch from its samples, in the sampler's order. `pin` asks for the batch's tensors in
// page-locked memory (the loader's pin_memory), so that their host-to-device copies can be
// asynchronous.
using Collate = std::function<Example(std::vector<Example>& samples, bool pin)>;

// Stacks the samples' data into [B, ...] and their targets into [B, ...] (each field must be
// defined in all samples or in none; shapes and dtypes must agree: a ShapeError/DTypeError naming
// the samples otherwise). Writes straight into pinned memory when `pin`. Samples that share one
// dense layout keep it in the batch (strides [sample numel, sample strides...]: [C, H, W] images
// with HWC strides make a channels-last batch); others are stacked contiguous.
Example default_collate(std::vector<Example>& samples, bool pin);

// The largest prefetch_factor a loader takes (its window, workers x factor, stays far from int64's end).
inline constexpr int64_t kMaxPrefetchFactor = int64_t{1} << 20;

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;    // a RandomSampler seeded by `seed`, reshuffled every epoch
  bool drop_last = false;  // drop the epoch's last batch when it is short
  int64_t num_workers = 0;      // worker threads; 0 reads every batch in the caller's next()
  int64_t prefetch_factor = 2;  // batches in flight per worker, at most kMaxPrefetchFactor
  bool pin_memory = false;      // batches in page-locked memory (ignored, with a warning, without CUDA)
  bool persistent_workers = false;  // keep the workers from one epoch to the next
  Collate collate;                  // default_collate when empty
  uint64_t seed = 0;                // the shuffle's and the per-sample generators' seed
  double timeout = 0;               // seconds to wait for a batch from the workers (up to 1e9); 0 waits forever
  // Replaces the sampler that `shuffle` picks (e.g. a DistributedSampler); set_epoch is called on it.
  std::shared_ptr<Sampler> sampler;
};

// Where a loader is: the next batch it delivers is batch `batch` of epoch `epoch`.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();  // stops and joins the workers, mid-epoch too
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  int64_t size() const;  // batches per epoch

  // The next batch of the current epoch. At the epoch's end: nullopt, once, and the position moves
  // to the start of the next epoch. An exception in a worker (or in get() with num_workers 0) is a
  // kiln::Error of the same kind naming the sample index, its batch and epoch, and the original
  // message; a batch that takes longer than `timeout` is an Error too. After an error the position
  // stays at the failed batch, and the batches in flight are discarded.
  std::optional<Example> next();

  LoaderPosition position() const { return position_; }
  // Continues from `p` (ending any epoch in progress); batch may equal size() (the epoch is over).
  void set_position(LoaderPosition p);
  // How many times set_position (load_state too) has moved the loader: a reader that holds a batch
  // ahead (the device prefetcher) drops it when this changes, as it came from the old position.
  uint64_t repositions() const { return repositions_; }

  // For training checkpoints: the position and what it refers to (seed, batch size, dataset size,
  // batches per epoch). load_state() refuses a state of another seed, batch size, dataset size or
  // number of batches per epoch (another sampler, world size or drop_last).
  std::map<std::string, int64_t> state() const;
  void load_state(const std::map<std::string, int64_t>& state);

  // Range-for over the rest of the current epoch: for (Example& batch : loader) { ... }. Breaking
  // out leaves the position at the next undelivered batch; the next loop continues from there.
  class Iterator {
   public:
    Iterator() = default;
    Example& operator*() { return *batch_; }
    Example* operator->() { return &*batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return !batch_ && !other.batch_; }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    friend class DataLoader;
    explicit Iterator(DataLoader* loader);
    DataLoader* loader_ = nullptr;
    std::optional<Example> batch_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

  // Worker threads alive now (for tests: 0 between epochs unless persistent_workers).
  int64_t live_workers() const;

  struct Shared;

 private:
  void start_epoch();
  // Ends the epoch run; workers that are not persistent stop, and are joined, or with join false
  // (after an error or a timeout) retired: left to finish the sample in hand, and joined later.
  void stop_epoch(bool join = true);

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  LoaderPosition position_;
  uint64_t repositions_ = 0;  // set_position calls
  bool in_epoch_ = false;
  std::vector<std::vector<int64_t>> batches_;  // the current epoch's
  int64_t submitted_ = 0;                      // batches handed to the workers so far
  std::shared_ptr<Shared> shared_;
};

}  // namespace kiln::data
