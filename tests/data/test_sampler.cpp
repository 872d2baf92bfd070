// Samplers: orders that are pure functions of (seed, epoch, rank), PyTorch's DistributedSampler
// split and padding, batch grouping, and refusals of bad sizes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "data/sampler.h"
#include "kernels/error.h"

using namespace kiln;
using namespace kiln::data;

namespace {

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (static_cast<int64_t>(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[static_cast<size_t>(i)] != i) return false;
  return true;
}

}  // namespace

TEST_CASE("epoch_permutation: a permutation fixed by (seed, epoch), new every epoch", "[data][sampler]") {
  const auto a = epoch_permutation(1000, 7, 0);
  CHECK(is_permutation_of_range(a, 1000));
  CHECK(a == epoch_permutation(1000, 7, 0));
  CHECK(a != epoch_permutation(1000, 7, 1));
  CHECK(a != epoch_permutation(1000, 8, 0));
  CHECK(epoch_permutation(0, 1, 2).empty());
  CHECK(epoch_permutation(1, 1, 2) == std::vector<int64_t>{0});
  // Every position is reached by every value about equally often (no bias towards the start).
  std::vector<std::vector<int>> counts(5, std::vector<int>(5, 0));
  for (int64_t e = 0; e < 5000; ++e) {
    const auto p = epoch_permutation(5, 3, e);
    for (size_t i = 0; i < 5; ++i) ++counts[i][static_cast<size_t>(p[i])];
  }
  for (const auto& row : counts)
    for (int c : row) CHECK(std::abs(c - 1000) < 150);
}

// Epoch 2^32 was epoch 0 again (only the epoch's low 32 bits seeded the order); the orders of
// epochs below 2^32 are the ones kiln has always given (pinned from the build before the change).
TEST_CASE("epoch_permutation: epochs past 2^32 are new orders, earlier ones unchanged", "[data][sampler]") {
  const int64_t wrap = int64_t{1} << 32;
  CHECK(epoch_permutation(10, 7, 0) == std::vector<int64_t>{3, 1, 0, 9, 5, 2, 6, 4, 8, 7});
  CHECK(epoch_permutation(10, 7, 3) == std::vector<int64_t>{4, 9, 7, 5, 6, 2, 3, 0, 8, 1});
  CHECK(epoch_permutation(10, 7, wrap - 1) == std::vector<int64_t>{2, 6, 3, 7, 8, 9, 4, 0, 5, 1});
  for (const int64_t e : {int64_t{0}, int64_t{1}, int64_t{12345}}) {
    INFO("epoch " << e);
    CHECK(epoch_permutation(1000, 7, e + wrap) != epoch_permutation(1000, 7, e));
    CHECK(epoch_permutation(1000, 7, e + 2 * wrap) != epoch_permutation(1000, 7, e + wrap));
    CHECK(is_permutation_of_range(epoch_permutation(1000, 7, e + wrap), 1000));
  }
}

TEST_CASE("SequentialSampler and RandomSampler", "[data][sampler]") {
  SequentialSampler seq(4);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(seq.size() == 4);
  seq.set_epoch(3);
  CHECK(seq.indices() == std::vector<int64_t>{0, 1, 2, 3});

  RandomSampler rnd(50, 11);
  CHECK(rnd.size() == 50);
  const auto e0 = rnd.indices();
  CHECK(e0 == epoch_permutation(50, 11, 0));
  rnd.set_epoch(1);
  CHECK(rnd.epoch() == 1);
  CHECK(rnd.indices() == epoch_permutation(50, 11, 1));
  CHECK(rnd.indices() != e0);
  rnd.set_epoch(0);
  CHECK(rnd.indices() == e0);  // an epoch's order comes back: all a resume needs
}

TEST_CASE("DistributedSampler: ranks split the epoch's order, padded or dropped to an equal share",
          "[data][sampler]") {
  for (bool shuffle : {false, true}) {
    for (int64_t n : {0, 1, 3, 10, 11, 12, 13}) {
      for (int64_t world : {1, 2, 3, 4, 5}) {
        for (bool drop_last : {false, true}) {
          INFO("n " << n << " world " << world << " shuffle " << shuffle << " drop_last " << drop_last);
          std::vector<int64_t> all;
          std::map<int64_t, int> seen;
          for (int64_t rank = 0; rank < world; ++rank) {
            DistributedSampler s(n, world, rank, shuffle, 5, drop_last);
            s.set_epoch(2);
            const auto mine = s.indices();
            const int64_t share = drop_last ? n / world : (n + world - 1) / world;
            CHECK(s.size() == share);
            CHECK(static_cast<int64_t>(mine.size()) == (n == 0 ? 0 : share));
            for (int64_t i : mine) {
              CHECK(i >= 0);
              CHECK(i < n);
              ++seen[i];
            }
            all.insert(all.end(), mine.begin(), mine.end());
          }
          if (drop_last) {
            // Nothing twice, and only the tail that could not be split evenly is left out.
            for (const auto& [i, c] : seen) CHECK(c == 1);
            CHECK(static_cast<int64_t>(seen.size()) == (n / world) * world);
          } else if (n > 0) {
            // Everything at least once; the padding repeats as few indices as it can.
            CHECK(static_cast<int64_t>(seen.size()) == n);
            CHECK(static_cast<int64_t>(all.size()) - n == ((n + world - 1) / world) * world - n);
          }
        }
      }
    }
  }
  // The same order on every rank: rank r takes positions r, r + world, ... of it.
  const auto order = epoch_permutation(8, 9, 4);
  DistributedSampler r1(8, 4, 1, true, 9);
  r1.set_epoch(4);
  CHECK(r1.indices() == std::vector<int64_t>{order[1], order[5]});
  // Unshuffled with padding, as PyTorch pads: from the start of the order.
  CHECK(DistributedSampler(5, 4, 3, false).indices() == std::vector<int64_t>{3, 2});  // 0 1 2 3 4 0 1 2
  CHECK(DistributedSampler(2, 4, 3, false).indices() == std::vector<int64_t>{1});  // cycles past n
}

TEST_CASE("BatchSampler: batches of the sampler's order, the last kept or dropped", "[data][sampler]") {
  SequentialSampler seq(7);
  BatchSampler keep(seq, 3);
  CHECK(keep.size() == 3);
  CHECK(keep.batches() == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6}});
  BatchSampler drop(seq, 3, true);
  CHECK(drop.size() == 2);
  CHECK(drop.batches() == std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}});
  BatchSampler whole(seq, 7, true);
  CHECK(whole.batches().size() == 1);
  BatchSampler too_big(seq, 8, true);
  CHECK(too_big.size() == 0);
  CHECK(too_big.batches().empty());
  // The largest batch size counts one short batch (n + batch - 1 once overflowed to a count of 0).
  BatchSampler largest(seq, INT64_MAX);
  CHECK(largest.size() == 1);
  CHECK(largest.batches().size() == 1);
  CHECK(BatchSampler(seq, INT64_MAX, true).size() == 0);

  RandomSampler rnd(10, 1);
  BatchSampler b(rnd, 4);
  b.set_epoch(3);
  std::vector<int64_t> flat;
  for (const auto& batch : b.batches()) flat.insert(flat.end(), batch.begin(), batch.end());
  CHECK(flat == epoch_permutation(10, 1, 3));
}

TEST_CASE("samplers refuse bad sizes, ranks and batch sizes with the value", "[data][sampler]") {
  CHECK_THROWS_WITH(SequentialSampler(-1), Catch::Contains("SequentialSampler") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(RandomSampler(int64_t{1} << 41, 0), Catch::Contains("RandomSampler") &&
                                                            Catch::Contains("2199023255552"));
  CHECK_THROWS_WITH(epoch_permutation(-3, 0, 0), Catch::Contains("epoch_permutation") && Catch::Contains("-3"));
  CHECK_THROWS_WITH(DistributedSampler(10, 0, 0), Catch::Contains("world_size") && Catch::Contains("0"));
  CHECK_THROWS_WITH(DistributedSampler(10, 4, 4), Catch::Contains("rank 4") && Catch::Contains("[0, 4)"));
  CHECK_THROWS_WITH(DistributedSampler(10, 4, -1), Catch::Contains("rank -1"));
  CHECK_THROWS_WITH(DistributedSampler(10, INT64_MAX, 0), Catch::Contains("world_size"));
  SequentialSampler s(3);
  CHECK_THROWS_WITH(BatchSampler(s, 0), Catch::Contains("BatchSampler") && Catch::Contains("batch_size") &&
                                            Catch::Contains("0"));
  CHECK_THROWS_AS(BatchSampler(s, -2), Error);
}
