// Philox4x32-10 known-answer vectors (from the Philox paper's reference set), and the properties
// kiln builds on it: draws depend only on (seed, offset, index), so views and thread counts do not
// change them.
#include <catch2/catch.hpp>

#include "core/kiln.h"
#include "kernels/cpu/parallel.h"
#include "kernels/philox.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

using namespace kiln;

TEST_CASE("Philox4x32-10 matches the published known-answer vectors", "[philox]") {
  Philox4 a = philox4x32(0, 0, 0, 0, 0, 0);
  CHECK(a.v[0] == 0x6627e8d5u);
  CHECK(a.v[1] == 0xe169c58du);
  CHECK(a.v[2] == 0xbc57ac4cu);
  CHECK(a.v[3] == 0x9b00dbd8u);
  Philox4 b = philox4x32(~0u, ~0u, ~0u, ~0u, ~0u, ~0u);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
  Philox4 c = philox4x32(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(c.v[0] == 0xd16cfe09u);
  CHECK(c.v[1] == 0x94fdccebu);
  CHECK(c.v[2] == 0x5001e420u);
  CHECK(c.v[3] == 0x24126ea1u);
}

TEST_CASE("uniform maps stay at or above 0 and below 1", "[philox]") {
  CHECK(philox_uniform(0u) == 0.0f);
  CHECK(philox_uniform(~0u) < 1.0f);
  CHECK(philox_uniform_double(~0u, ~0u) < 1.0);
  CHECK(philox_uniform_double(0u, 0u) == 0.0);
}

TEST_CASE("random draws are reproducible from the seed and independent of thread count", "[philox]") {
  manual_seed(7);
  Tensor a = rand({1000, 33});
  Tensor n1 = randn({4097});
  manual_seed(7);
  int threads = cpu::num_threads();
  cpu::set_num_threads(1);
  Tensor b = rand({1000, 33});
  Tensor n2 = randn({4097});
  cpu::set_num_threads(threads);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(n1.to_vector<float>() == n2.to_vector<float>());
  // Each op advances the offset: the next draw differs.
  Tensor c = rand({1000, 33});
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  CHECK(default_generator().state().offset == 3);
}

// The contract of kernels/random.h, element by element: element i of a fill, in logical order, takes
// words (i & 1) * 2 and (i & 1) * 2 + 1 of block i >> 1 (a float64 normal: all of block i) of the
// op's (seed, offset). The CPU fill computes 16 blocks at a time, several chunks in parallel: these
// sizes end mid-batch and cross the parallel chunks, the seed and offset use their high words, and
// the transposed view is filled in its logical order, not its memory order.
namespace {

// The first index where got differs from want(i) in its bits, or -1.
template <typename T, typename Want> int64_t first_mismatch(const std::vector<T>& got, Want want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want(static_cast<uint64_t>(i)))) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("random fills give every element the Philox words kernels/random.h assigns it", "[philox]") {
  const uint64_t seed = 0x123456789abcdefull;
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{33}, int64_t{40001}}) {
    INFO("n = " << n);
    Generator g(seed);
    g.set_state(PhiloxState{seed, (uint64_t{3} << 32) + 5});
    const auto word = [&](uint64_t offset, uint64_t i, int k) {
      return philox_block(seed, offset, i >> 1).v[(i & 1) * 2 + k];
    };

    uint64_t offset = g.state().offset;
    const std::vector<float> u32 = rand({n}, TensorOptions(DType::Float32), g).to_vector<float>();
    CHECK(first_mismatch(u32, [&](uint64_t e) { return 0.0f + 1.0f * philox_uniform(word(offset, e, 0)); }) == -1);

    offset = g.state().offset;
    const std::vector<double> u64 = rand({n}, TensorOptions(DType::Float64), g).to_vector<double>();
    CHECK(first_mismatch(u64, [&](uint64_t e) {
            return 0.0 + 1.0 * philox_uniform_double(word(offset, e, 0), word(offset, e, 1));
          }) == -1);

    offset = g.state().offset;
    const std::vector<float> z32 = randn({n}, TensorOptions(DType::Float32), g).to_vector<float>();
    CHECK(first_mismatch(z32, [&](uint64_t e) {
            const float u1 = 1.0f - philox_uniform(word(offset, e, 0));
            const float u2 = philox_uniform(word(offset, e, 1));
            return 0.0f + 1.0f * (std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795865f * u2));
          }) == -1);

    offset = g.state().offset;
    const std::vector<double> z64 = randn({n}, TensorOptions(DType::Float64), g).to_vector<double>();
    CHECK(first_mismatch(z64, [&](uint64_t e) {
            const Philox4 r = philox_block(seed, offset, e);
            const double u1 = 1.0 - philox_uniform_double(r.v[0], r.v[1]);
            const double u2 = philox_uniform_double(r.v[2], r.v[3]);
            return 0.0 + 1.0 * (std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
          }) == -1);

    offset = g.state().offset;
    const std::vector<int64_t> ri = randint(-7, 1000, {n}, DType::Int64, g).to_vector<int64_t>();
    CHECK(first_mismatch(ri, [&](uint64_t e) {
            const uint64_t bits = (static_cast<uint64_t>(word(offset, e, 0)) << 32) | word(offset, e, 1);
            return int64_t{-7} + static_cast<int64_t>(bits % 1007);
          }) == -1);
  }

  // A transposed view [257, 300] of a [300, 257] tensor, filled in the view's logical order.
  Generator g(seed);
  const uint64_t offset = g.state().offset;
  Tensor base = zeros({300, 257});
  Tensor view = base.t();
  view.uniform_(-1.0, 3.0, g);
  // The view's elements in logical order: element (r, c) is base's (c, r).
  const std::vector<float> logical = view.contiguous().view({-1}).to_vector<float>();
  CHECK(first_mismatch(logical, [&](uint64_t e) {
          return -1.0f + 4.0f * philox_uniform(philox_block(seed, offset, e >> 1).v[(e & 1) * 2]);
        }) == -1);
  CHECK(base.view({-1}).to_vector<float>() != logical);  // memory order differs: the check above can tell
}

TEST_CASE("uniform and normal draws have the right moments", "[philox]") {
  manual_seed(99);
  Tensor u = rand({200000}, TensorOptions(DType::Float64));
  CHECK(mean(u).item<double>() == Approx(0.5).margin(0.005));
  CHECK(var(u).item<double>() == Approx(1.0 / 12).margin(0.002));
  Tensor z = randn({200000});
  CHECK(mean(z).item<double>() == Approx(0.0).margin(0.01));
  CHECK(var(z).item<double>() == Approx(1.0).margin(0.02));
  Tensor r = randint(0, 10, {100000});
  CHECK(min(r).item<int64_t>() == 0);
  CHECK(max(r).item<int64_t>() == 9);
  CHECK(mean(r.to(DType::Float64)).item<double>() == Approx(4.5).margin(0.05));
}

TEST_CASE("multinomial follows the weights, with and without replacement", "[philox]") {
  manual_seed(3);
  Tensor w = tensor({1.0f, 0.0f, 3.0f, 4.0f});
  Tensor s = multinomial(w, 40000, true);
  CHECK(s.dtype() == DType::Int64);
  CHECK(s.sizes() == Shape{40000});
  std::vector<int64_t> v = s.to_vector<int64_t>();
  std::vector<double> freq(4, 0.0);
  for (int64_t x : v) freq[static_cast<size_t>(x)] += 1.0 / 40000;
  CHECK(freq[0] == Approx(0.125).margin(0.01));
  CHECK(freq[1] == 0.0);
  CHECK(freq[2] == Approx(0.375).margin(0.01));
  CHECK(freq[3] == Approx(0.5).margin(0.01));
  Tensor rows = multinomial(tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 0.0f, 1.0f, 1.0f}, {2, 4}), 3, false);
  CHECK(rows.sizes() == Shape{2, 3});
  std::vector<int64_t> r = rows.to_vector<int64_t>();
  for (int row = 0; row < 2; ++row) {
    std::set<int64_t> seen(r.begin() + row * 3, r.begin() + row * 3 + 3);
    CHECK(seen.size() == 3);  // no repeats without replacement
  }
  CHECK(std::find(r.begin() + 3, r.end(), 1) == r.end());  // zero weight never drawn
  CHECK_THROWS_WITH(multinomial(tensor({1.0f, -1.0f}), 1), Catch::Contains("multinomial"));
  CHECK_THROWS_WITH(multinomial(tensor({1.0f, 0.0f}), 2, false), Catch::Contains("multinomial"));
  CHECK_THROWS_AS(multinomial(zeros({2, 2, 2}), 1), ShapeError);
}
