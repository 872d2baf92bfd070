// Samplers. The permutation is train_cnn's since its first version (moved here unchanged), so the
// orders of recorded runs stay what they were.
#include "data/sampler.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.h"

namespace kiln::data {
namespace {

// A pass is materialized as a vector of int64 indices, so its size is bounded well below what
// would overflow the arithmetic or the allocation (2^40 indices are 8 TiB).
constexpr int64_t kMaxSize = int64_t{1} << 40;
constexpr int64_t kMaxWorld = int64_t{1} << 31;

void check_size(const char* sampler, int64_t n) {
  if (n < 0 || n > kMaxSize) {
    throw Error(std::string(sampler) + ": the dataset size must be in [0, 2^40], got " + std::to_string(n));
  }
}

}  // namespace

// Fisher-Yates with kiln's own bounded draw: std::uniform_int_distribution and std::shuffle are
// implementation-defined, so they could differ between standard libraries; mt19937_64's output and
// seed_seq's mixing are fixed by the standard.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  check_size("epoch_permutation", n);
  // The epoch's high word joins the sequence only when it is not 0, so that epochs below 2^32 keep
  // the orders they always had and epoch 2^32 is not epoch 0 again.
  const auto epoch_bits = static_cast<uint64_t>(epoch);
  std::vector<uint32_t> words{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                              static_cast<uint32_t>(epoch_bits), 0x5eedu};
  if ((epoch_bits >> 32) != 0) words.push_back(static_cast<uint32_t>(epoch_bits >> 32));
  std::seed_seq seq(words.begin(), words.end());
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // rejection keeps the draw unbiased
    uint64_t r;
    do r = rng();
    while (r >= limit);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) { check_size("SequentialSampler", n); }

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) { check_size("RandomSampler", n); }

std::vector<int64_t> RandomSampler::indices() const { return epoch_permutation(n_, seed_, epoch_); }

DistributedSampler::DistributedSampler(int64_t n, int64_t world_size, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), world_size_(world_size), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  check_size("DistributedSampler", n);
  if (world_size < 1 || world_size > kMaxWorld) {
    throw Error("DistributedSampler: world_size must be in [1, 2^31], got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw Error("DistributedSampler: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) +
                ")");
  }
  // Dropping keeps floor(n / world_size) per rank; padding gives every rank ceil(n / world_size).
  per_rank_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = epoch_permutation(n_, seed_, epoch_);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), 0);
  }
  const size_t total = static_cast<size_t>(per_rank_ * world_size_);
  if (order.size() > total) {
    order.resize(total);  // drop_last: the tail no rank could share evenly
  } else if (!order.empty()) {
    // Pad from the start, cycling when the dataset is smaller than the padding (n < world_size).
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (size_t i = static_cast<size_t>(rank_); i < order.size(); i += static_cast<size_t>(world_size_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

BatchSampler::BatchSampler(Sampler& sampler, int64_t batch_size, bool drop_last)
    : sampler_(sampler), batch_size_(batch_size), drop_last_(drop_last) {
  if (batch_size < 1) throw Error("BatchSampler: batch_size must be >= 1, got " + std::to_string(batch_size));
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_.size();
  return n / batch_size_ + (!drop_last_ && n % batch_size_ != 0 ? 1 : 0);  // n + batch - 1 could overflow
}

std::vector<std::vector<int64_t>> BatchSampler::batches() const {
  const std::vector<int64_t> order = sampler_.indices();
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(size()));
  for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch_size_)) {
    const size_t end = std::min(order.size(), start + static_cast<size_t>(batch_size_));
    if (drop_last_ && end - start < static_cast<size_t>(batch_size_)) break;
    out.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                     order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

}  // namespace kiln::data
