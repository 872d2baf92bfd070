// multinomial's CUDA kernels (kernels/cuda/random_multinomial.cuh), their real source, run on the
// CPU through the emulator of CUDA's threads (kernels/simt/simt.h), launched by
// multinomial_launches itself, and compared with multinomial_cpu. The weights are small integers,
// so every order of adding them gives the same cumulative sums, and the emulated kernels must draw
// exactly the CPU's categories: with replacement through the prep kernel's block scans (one tile of
// 1024 weights, several, and a last short one, so the carries between tiles count) and the draws'
// binary search; without replacement through the race keys and every path of the row selection.
// Zero weights must never be drawn. probs come in four dtypes, transposed and as one row; a
// workspace smaller than all rows make the rows go in batches. Invalid rows (a negative, NaN or
// infinite weight, a zero sum, fewer non-zero weights than samples) must be recorded in the error
// record with their row and reason, and get zeros, while the other rows draw as on the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/helpers.h"
#include "kernels/cuda/random_multinomial.cuh"
#include "kernels/random.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// Weights 0 to 9, about one in `zero_every` zero (none when 0).
Tensor weights(int64_t rows, int64_t n, uint64_t seed, int zero_every) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(rows * n));
  for (double& x : v) {
    const uint64_t r = rng();
    const bool zero = zero_every > 0 && r % static_cast<uint64_t>(zero_every) == 0;
    x = zero ? 0.0 : static_cast<double>(1 + (r >> 8) % 9);
  }
  return tensor(v, {rows, n});
}

struct Result {
  std::vector<int64_t> out;
  DeviceErrorRecord err{};
};

// The emulated call, with a workspace of `workspace_rows` rows (all when 0) between guard bands.
Result emulated(const Tensor& probs, int64_t num_samples, bool replacement, PhiloxState philox, int64_t workspace_rows,
                const EmulatedLaunch& launch) {
  const StridedArg arg = ops::make_arg("test", probs);
  const MultinomialRows m = multinomial_rows(arg);
  const int64_t rows = workspace_rows > 0 ? workspace_rows : m.rows;
  const size_t bytes = static_cast<size_t>(rows) * multinomial_row_bytes(m.n, num_samples, replacement);
  Guarded<uint64_t> workspace(static_cast<int64_t>((bytes + 7) / 8));
  Guarded<int64_t> out(m.rows * num_samples);
  Result r;
  multinomial_launches(out.data(), arg, num_samples, replacement, philox, workspace.data(), bytes, &r.err, launch);
  CHECK(out.bands_intact());
  CHECK(workspace.bands_intact());
  r.out.assign(out.data(), out.data() + m.rows * num_samples);
  return r;
}

std::vector<int64_t> on_cpu(const Tensor& probs, int64_t num_samples, bool replacement, PhiloxState philox) {
  const StridedArg arg = ops::make_arg("test", probs);
  std::vector<int64_t> out(static_cast<size_t>(multinomial_rows(arg).rows * num_samples));
  multinomial_cpu(out.data(), arg, num_samples, replacement, philox, KernelContext{});
  return out;
}

const EmulatedLaunch kRuns[] = {{simt::Schedule::Lowest, ~0u, nullptr}, {simt::Schedule::Highest, 2u, nullptr}};

}  // namespace

TEST_CASE("emulated: multinomial's CUDA kernels draw the CPU's categories", "[simt][multinomial]") {
  struct Case {
    int64_t rows, n, num_samples;
    bool replacement;
    int zero_every;
  };
  const Case cases[] = {
      {3, 1, 5, true, 0},        {3, 7, 40, true, 3},     {3, 1000, 64, true, 5},    {2, 1024, 30, true, 4},
      {3, 2500, 50, true, 6},    {2, 5000, 20, true, 2},  {3, 7, 4, false, 0},       {3, 1000, 100, false, 4},
      {2, 2048, 2048, false, 0}, {3, 5000, 30, false, 3}, {2, 3000, 2100, false, 0},
  };
  const PhiloxState philox{0x5eed5eedULL, 12, nullptr};
  SECTION("each path: tiles of the prep kernel, and the row selection's three") {
    for (const Case& c : cases) {
      // The long rows in two dtypes: the dtype only changes the loads.
      const std::vector<DType> dtypes =
          c.n > 1024 ? std::vector<DType>{DType::Float32, DType::BFloat16}
                     : std::vector<DType>{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
      for (const DType dtype : dtypes) {
        INFO(c.rows << " rows of " << c.n << ", " << c.num_samples << " samples "
                    << (c.replacement ? "with" : "without") << " replacement, " << dtype_name(dtype));
        const Tensor w = weights(c.rows, c.n, static_cast<uint64_t>(c.n * 7 + c.rows), c.zero_every).to(dtype);
        const std::vector<int64_t> want = on_cpu(w, c.num_samples, c.replacement, philox);
        for (const EmulatedLaunch& launch : kRuns) {
          const Result got = emulated(w, c.num_samples, c.replacement, philox, 0, launch);
          CHECK(got.err.op == 0);
          CHECK(got.out == want);
        }
        // Rows in batches of 2 (a workspace for 2), or of 1 when there are 2.
        const Result batched = emulated(w, c.num_samples, c.replacement, philox, c.rows - 1, kRuns[0]);
        CHECK(batched.out == want);
        // Never a zero weight.
        const std::vector<double> wv = w.to(DType::Float64).to_vector<double>();
        int64_t zero_drawn = 0;
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t s = 0; s < c.num_samples; ++s) {
            zero_drawn += wv[static_cast<size_t>(r * c.n + want[static_cast<size_t>(r * c.num_samples + s)])] == 0;
          }
        }
        CHECK(zero_drawn == 0);
      }
    }
  }
  SECTION("zero weights across the prep kernel's tiles of 1024") {
    // Tile 1 all ones; tile 2 zeros up to 1000, then ones; tile 3 all zeros. The cumulative sums
    // must stay flat at 1024 through tile 2's zeros (the max carried from tile 1), and the total
    // must survive a last tile of zeros.
    std::vector<double> v(3 * 1024, 0.0);
    for (int64_t j = 0; j < 1024; ++j) v[static_cast<size_t>(j)] = 1.0;
    for (int64_t j = 2024; j < 2048; ++j) v[static_cast<size_t>(j)] = 1.0;
    const Tensor w = tensor(v, {1, 3 * 1024});
    for (const bool replacement : {true, false}) {
      const std::vector<int64_t> want = on_cpu(w, 300, replacement, philox);
      CHECK(emulated(w, 300, replacement, philox, 0, kRuns[0]).out == want);
    }
  }
  SECTION("transposed probs and one row") {
    const Tensor t = weights(300, 4, 3, 5).t();  // [4, 300], column stride 4
    for (const bool replacement : {true, false}) {
      const std::vector<int64_t> want = on_cpu(t, 20, replacement, philox);
      CHECK(emulated(t, 20, replacement, philox, 0, kRuns[1]).out == want);
    }
    const Tensor one = weights(1, 1500, 4, 5).reshape({1500});
    CHECK(emulated(one, 9, true, philox, 0, kRuns[0]).out == on_cpu(one, 9, true, philox));
  }
  SECTION("a captured graph's Philox base") {
    uint64_t base[2] = {77, 5};
    const Tensor w = weights(2, 3000, 9, 4);
    const PhiloxState captured{0, 2, base};
    const PhiloxState resolved{77, 7, nullptr};
    CHECK(emulated(w, 11, true, captured, 0, kRuns[0]).out == on_cpu(w, 11, true, resolved));
    CHECK(emulated(w, 11, false, captured, 0, kRuns[0]).out == on_cpu(w, 11, false, resolved));
  }
}

TEST_CASE("emulated: multinomial's CUDA kernels record an invalid row and draw the others", "[simt][multinomial]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  enum class Row { Weight, Zero, ThreeNonZero };
  struct Bad {
    const char* what;
    Row row;
    double value;  // Row::Weight: put at column 1500 of row 1
    MultinomialRowError error;
    bool replacement;
  };
  const Bad bads[] = {
      {"a negative weight", Row::Weight, -1.0, MultinomialRowError::NegativeWeight, true},
      {"a NaN weight", Row::Weight, nan, MultinomialRowError::InvalidWeight, true},
      {"an infinite weight", Row::Weight, inf, MultinomialRowError::InvalidWeight, false},
      {"a zero row", Row::Zero, 0, MultinomialRowError::ZeroSum, true},
      {"too few non-zero weights", Row::ThreeNonZero, 0, MultinomialRowError::TooFewNonZero, false},
  };
  const PhiloxState philox{99, 0, nullptr};
  for (const Bad& b : bads) {
    INFO(b.what);
    Tensor w = weights(3, 2000, 21, 5);
    const Tensor good = w.clone();
    Tensor row = w.select(0, 1);
    if (b.row == Row::Weight) {
      row.narrow(0, 1500, 1).fill_(b.value);
    } else {
      row.fill_(0.0);
      if (b.row == Row::ThreeNonZero) row.narrow(0, 10, 3).fill_(2.0);
    }
    const int64_t samples = 5;
    const std::vector<int64_t> want = on_cpu(good, samples, b.replacement, philox);
    CHECK_THROWS_AS(on_cpu(w, samples, b.replacement, philox), Error);
    for (const EmulatedLaunch& launch : kRuns) {
      const Result got = emulated(w, samples, b.replacement, philox, 0, launch);
      CHECK(got.err.op == static_cast<int32_t>(IndexCheckOp::Multinomial));
      CHECK(got.err.index == 1);
      CHECK(got.err.size == static_cast<int64_t>(b.error));
      for (int64_t s = 0; s < samples; ++s) {
        CHECK(got.out[static_cast<size_t>(samples + s)] == 0);
        CHECK(got.out[static_cast<size_t>(s)] == want[static_cast<size_t>(s)]);
        CHECK(got.out[static_cast<size_t>(2 * samples + s)] == want[static_cast<size_t>(2 * samples + s)]);
      }
    }
  }
}
