// embedding's backward on the CPU: the plan of kernels/embedding_plan.h, which the CUDA twin shares,
// covers every sorted position exactly once and gives each value exactly one writer (checked on
// sorted key arrays of every shape the plan distinguishes), and the CPU twin sums like a plain
// scatter in every float dtype, adds to what the gradient held and refuses bad input by name. The
// CUDA twin's bit-for-bit agreement is tests/kernels/test_twins.cpp's on a GPU, and
// test_embedding_simt.cpp's on the emulator of CUDA's threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/dispatch.h"
#include "kernels/embedding.h"
#include "kernels/embedding_plan.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::embedding_plan;
using Catch::Matchers::Contains;

namespace {

// What the plan does with one sorted key array, replayed on the host: for each value, how many
// times each position was added into it and how many writers it had.
struct Replay {
  std::vector<std::vector<int>> hits;  // [value][sorted position]
  std::vector<int> writers;            // [value]
  std::vector<int> pieces_per_chunk;
};

Replay replay(const std::vector<uint32_t>& keys, uint32_t end_key) {
  const SortedKeys s{keys.data(), static_cast<int64_t>(keys.size()), end_key};
  const int64_t chunks = chunk_count(s.k);
  Replay r;
  r.hits.assign(end_key, std::vector<int>(keys.size(), 0));
  r.writers.assign(end_key, 0);
  // Per chunk, the positions of its Head and Tail parts (what head_part / tail_part hold).
  std::vector<std::vector<int64_t>> head(static_cast<size_t>(chunks)), tail(static_cast<size_t>(chunks));
  std::vector<int> head_key(static_cast<size_t>(chunks), -1), tail_key(static_cast<size_t>(chunks), -1);
  for (int64_t c = 0; c < chunks; ++c) {
    int pieces = 0;
    int64_t next = chunk_begin(c);
    for_each_piece(s, c, [&](int64_t b, int64_t e, uint32_t key, Piece p) {
      ++pieces;
      // Pieces are maximal runs of one key, in order, inside the chunk.
      CHECK(b == next);
      CHECK(b < e);
      CHECK(e <= chunk_end(s, c));
      for (int64_t i = b; i < e; ++i) CHECK(keys[static_cast<size_t>(i)] == key);
      CHECK(key < end_key);
      next = e;
      std::vector<int64_t> span;
      for (int64_t i = b; i < e; ++i) span.push_back(i);
      if (p == Piece::Whole) {
        for (int64_t i : span) ++r.hits[key][static_cast<size_t>(i)];
        ++r.writers[key];
      } else if (p == Piece::Head) {
        CHECK(head_key[static_cast<size_t>(c)] == -1);
        head[static_cast<size_t>(c)] = span;
        head_key[static_cast<size_t>(c)] = static_cast<int>(key);
      } else {
        CHECK(b == chunk_begin(c));
        CHECK(tail_key[static_cast<size_t>(c)] == -1);
        tail[static_cast<size_t>(c)] = span;
        tail_key[static_cast<size_t>(c)] = static_cast<int>(key);
      }
    });
    // The pieces end where the chunk does or where the out-of-range keys begin.
    const int64_t e0 = chunk_end(s, c);
    if (next < e0) CHECK(keys[static_cast<size_t>(next)] == end_key);
    r.pieces_per_chunk.push_back(pieces);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    uint32_t key = 0;
    if (!owns_value(s, c, &key)) {
      continue;
    }
    REQUIRE(head_key[static_cast<size_t>(c)] == static_cast<int>(key));
    for (int64_t i : head[static_cast<size_t>(c)]) ++r.hits[key][static_cast<size_t>(i)];
    for (int64_t c2 = c + 1;; ++c2) {
      REQUIRE(c2 < chunks);
      REQUIRE(tail_key[static_cast<size_t>(c2)] == static_cast<int>(key));
      for (int64_t i : tail[static_cast<size_t>(c2)]) ++r.hits[key][static_cast<size_t>(i)];
      if (value_ends_in(s, c2, key)) break;
    }
    ++r.writers[key];
  }
  return r;
}

void check_plan(const std::vector<uint32_t>& keys, uint32_t end_key) {
  INFO("k = " << keys.size() << ", end_key = " << end_key);
  const Replay r = replay(keys, end_key);
  for (uint32_t v = 0; v < end_key; ++v) {
    const bool present = std::find(keys.begin(), keys.end(), v) != keys.end();
    INFO("value " << v);
    CHECK(r.writers[v] == (present ? 1 : 0));
    int wrong = 0;  // positions added a wrong number of times (0 or 2 for its own value, any for another)
    for (size_t i = 0; i < keys.size(); ++i) wrong += r.hits[v][i] != (keys[i] == v ? 1 : 0);
    CHECK(wrong == 0);
  }
}

std::vector<uint32_t> sorted_keys(std::vector<uint32_t> keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace

TEST_CASE("embedding plan: every sorted position is added once into its value, by one writer", "[embedding]") {
  SECTION("hand-made boundaries") {
    const int64_t R = kChunkRows;
    // A value exactly filling chunk 0; one ending a position early; one starting a position late;
    // one spanning chunks 1..3; the last chunk short.
    std::vector<uint32_t> keys;
    for (int64_t i = 0; i < R; ++i) keys.push_back(0);
    for (int64_t i = 0; i < R - 1; ++i) keys.push_back(1);
    for (int64_t i = 0; i < 2 * R + 3; ++i) keys.push_back(2);
    for (int64_t i = 0; i < 5; ++i) keys.push_back(4);
    check_plan(keys, 6);
    // One value over three chunks and a position of a fourth.
    check_plan(std::vector<uint32_t>(static_cast<size_t>(3 * R + 1), 5), 6);
    check_plan({}, 3);
    check_plan({0}, 1);
    check_plan(std::vector<uint32_t>(static_cast<size_t>(R), 2), 3);
    check_plan(std::vector<uint32_t>(static_cast<size_t>(R + 1), 2), 3);
  }
  SECTION("out-of-range keys sort last and belong to no piece") {
    std::vector<uint32_t> keys(static_cast<size_t>(kChunkRows + 7), 1);
    for (size_t i = 20; i < keys.size(); ++i) keys[i] = 3;  // end_key = 3
    check_plan(keys, 3);
    check_plan(std::vector<uint32_t>(static_cast<size_t>(2 * kChunkRows), 3), 3);  // all bad
  }
  SECTION("random sorted keys: skewed, distinct and single-valued") {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 60; ++trial) {
      const int64_t k = std::uniform_int_distribution<int64_t>(1, 700)(rng);
      const uint32_t num = std::uniform_int_distribution<uint32_t>(1, trial % 3 == 0 ? 4 : 300)(rng);
      std::geometric_distribution<uint32_t> skew(0.05);
      std::vector<uint32_t> keys(static_cast<size_t>(k));
      for (auto& v : keys) {
        v = std::min(skew(rng), num);  // num itself: an out-of-range position
      }
      check_plan(sorted_keys(keys), num);
    }
  }
}

namespace {

// Runs the CPU twin on a gradient that starts at `start`.
Tensor run_backward(const Tensor& grad, const std::vector<int64_t>& indices, const Tensor& start) {
  Tensor gw = start.clone();
  ops::launch("test", Device::cpu(), kernels::embedding_backward, gw.data_ptr(), grad.data_ptr(), grad.dtype(),
              indices.data(), static_cast<int64_t>(indices.size()), gw.size(0), gw.size(1));
  return gw;
}

// The plain scatter in float64.
std::vector<double> scatter_reference(const Tensor& grad, const std::vector<int64_t>& indices, const Tensor& start) {
  std::vector<double> g = grad.to_vector_double(), out = start.to_vector_double();
  const int64_t dim = start.size(1);
  for (size_t i = 0; i < indices.size(); ++i)
    for (int64_t d = 0; d < dim; ++d) out[static_cast<size_t>(indices[i] * dim + d)] += g[i * dim + d];
  return out;
}

}  // namespace

TEST_CASE("embedding backward (CPU): sums by index in every float dtype, added to the gradient", "[embedding]") {
  const int64_t num = 37, dim = 19, k = 2000;
  std::mt19937 rng(11);
  std::geometric_distribution<int64_t> skew(0.08);
  std::vector<int64_t> idx(static_cast<size_t>(k));
  for (auto& v : idx) v = std::min<int64_t>(skew(rng), num - 1);
  Generator gen(5);
  for (DType t : {DType::Float64, DType::Float32, DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    Tensor grad = randn({k, dim}, TensorOptions(DType::Float64), gen).to(t);
    Tensor start = randn({num, dim}, TensorOptions(DType::Float64), gen).to(t);
    const std::vector<double> want = scatter_reference(grad, idx, start);
    const std::vector<double> got = run_backward(grad, idx, start).to_vector_double();
    // float accumulation of up to ~200 terms of size ~1, then one rounding to the storage type.
    const double tol = t == DType::Float64 ? 1e-12 : t == DType::Float32 ? 1e-4 : t == DType::Float16 ? 0.05 : 0.4;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = test::worse(worst, std::fabs(got[i] - want[i]));
    CHECK(worst <= tol);
  }
  // A row no index picks keeps its value; an empty index list changes nothing.
  Tensor grad = ones({3, 2});
  Tensor start = full({4, 2}, 0.5);
  CHECK(run_backward(grad, {1, 1, 3}, start).to_vector_double() ==
        std::vector<double>{0.5, 0.5, 2.5, 2.5, 0.5, 0.5, 1.5, 1.5});
  CHECK(run_backward(zeros({0, 2}), {}, start).to_vector_double() == start.to_vector_double());
}

TEST_CASE("embedding backward (CPU): a bad index or dtype is refused by name before anything is written",
          "[embedding]") {
  Tensor grad = ones({3, 2});
  Tensor start = zeros({4, 2});
  Tensor gw = start.clone();
  const std::vector<int64_t> bad = {1, 4, 0};
  try {
    ops::launch("test", Device::cpu(), kernels::embedding_backward, gw.data_ptr(), grad.data_ptr(), DType::Float32,
                bad.data(), int64_t{3}, int64_t{4}, int64_t{2});
    FAIL("no error");
  } catch (const IndexError& e) {
    CHECK_THAT(e.what(), Contains("embedding backward") && Contains("index 4") && Contains("4 embeddings"));
  }
  CHECK(gw.to_vector_double() == start.to_vector_double());
  Tensor ints = zeros({4, 2}, TensorOptions(DType::Int64));
  const std::vector<int64_t> good = {1, 2, 0};
  CHECK_THROWS_WITH(ops::launch("test", Device::cpu(), kernels::embedding_backward, ints.data_ptr(), ints.data_ptr(),
                                DType::Int64, good.data(), int64_t{3}, int64_t{4}, int64_t{2}),
                    Contains("embedding backward") && Contains("int64"));
}
