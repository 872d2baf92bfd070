// Philox4x32-10 known-answer vectors (from the Philox paper's reference set), and the properties
// kiln builds on it: draws depend only on (seed, offset, index), so views and thread counts do not
// change them.
#include <catch2/catch.hpp>

#include "core/kiln.h"
#include "kernels/cpu/parallel.h"
#include "kernels/philox.h"

#include <algorithm>
#include <set>

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

TEST_CASE("uniform maps stay in [0, 1)", "[philox]") {
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
