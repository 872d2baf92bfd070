// Samplers: the order in which a map-style dataset's indices are read, epoch by epoch, as PyTorch's
// torch.utils.data samplers. Non-obvious decision: every order is a pure function of (seed, epoch,
// and for the distributed sampler rank and world size), computed with kiln's own Fisher-Yates over
// std::mt19937_64 (whose output the standard fixes, unlike std::shuffle's), so an epoch's order is
// the same on every machine, thread count and standard library, and a checkpoint only needs the
// epoch number to resume it.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

// A permutation of [0, n) that depends only on (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of one pass in order, for the current epoch.
  virtual std::vector<int64_t> indices() const = 0;
  // How many indices one pass yields.
  virtual int64_t size() const = 0;
  // Selects the epoch whose order indices() gives (a no-op for orders that do not change).
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n - 1.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A fresh permutation of [0, n) every epoch: epoch_permutation(n, seed, epoch).
class RandomSampler final : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// This rank's share of [0, n) among world_size ranks, as PyTorch's DistributedSampler: the epoch's
// order (shuffled with (seed, epoch), the same on every rank, or sequential), then either its tail
// dropped to a multiple of world_size (drop_last) or padded with indices from its start to one;
// rank r takes every world_size-th index from position r. Every rank gets size() indices and,
// without padding, no index goes to two ranks.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t world_size, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return per_rank_; }

 private:
  int64_t n_, world_size_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;
};

// Groups a sampler's indices into batches of batch_size; the last, shorter batch is kept or, with
// drop_last, dropped. set_epoch passes the epoch on to the sampler.
class BatchSampler {
 public:
  BatchSampler(Sampler& sampler, int64_t batch_size, bool drop_last = false);
  std::vector<std::vector<int64_t>> batches() const;
  int64_t size() const;  // batches per epoch
  void set_epoch(int64_t epoch) { sampler_.set_epoch(epoch); }

 private:
  Sampler& sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

}  // namespace kiln::data
