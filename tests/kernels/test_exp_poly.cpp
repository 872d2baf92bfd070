// kiln's float exp for the CPU's hot loops (kernels/exp_poly.h) against double's exp: within 2 units
// in the last place over float's whole range, the edges (overflow, gradual underflow, NaN), and the
// same bits through the exp op's vector loops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "kernels/exp_poly.h"
#include "tests/worst_ratio.h"

namespace {

// Distance in units in the last place between a float and the exact value, measured in the spacing
// of floats at the exact value (the subnormal spacing below the normals).
double ulps(float got, double exact) {
  const int e = exact == 0.0 ? -149 : std::max(std::ilogb(exact) - 23, -149);
  return std::fabs(static_cast<double>(got) - exact) / std::ldexp(1.0, e);
}

}  // namespace

TEST_CASE("exp_poly: within 2 ulp of the exact exp from the underflow edge to the overflow edge", "[exp_poly]") {
  // Every 97th float bit pattern between -103.97 and 88.72 (about 11 million values, both signs).
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  for (float sign : {1.0f, -1.0f}) {
    const float limit = sign > 0 ? 88.72f : 103.97f;
    uint32_t top;
    std::memcpy(&top, &limit, sizeof top);
    for (uint32_t bits = 0; bits <= top; bits += 97) {
      float a;
      std::memcpy(&a, &bits, sizeof a);
      const float x = sign * a;
      const double d = ulps(kiln::exp_poly(x), std::exp(static_cast<double>(x)));
      ++checked;
      if (!(d <= worst)) {  // a NaN too
        worst = kiln::test::worse(worst, d);
        worst_x = x;
      }
    }
  }
  INFO("worst " << worst << " ulp at x = " << worst_x << " over " << checked << " values");
  CHECK(checked > 10000000);
  CHECK(worst <= 2.0);
}

TEST_CASE("exp_poly: exact at 0, +inf past the overflow edge, subnormals, 0 and NaN at the ends", "[exp_poly]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(kiln::exp_poly(0.0f) == 1.0f);
  CHECK(kiln::exp_poly(-0.0f) == 1.0f);
  // ln(FLT_MAX) = 88.7228...: just below stays finite, just above is +inf.
  CHECK(std::isfinite(kiln::exp_poly(88.72f)));
  CHECK(kiln::exp_poly(88.73f) == inf);
  CHECK(kiln::exp_poly(1000.0f) == inf);
  CHECK(kiln::exp_poly(inf) == inf);
  // Subnormal results: e^-100 = 3.72e-44 is 26.6 times the smallest subnormal (1.4e-45).
  const float sub = kiln::exp_poly(-100.0f);
  CHECK(sub > 0.0f);
  CHECK(sub < std::numeric_limits<float>::min());
  CHECK(ulps(sub, std::exp(-100.0)) <= 1.0);
  CHECK(kiln::exp_poly(-104.0f) == 0.0f);
  CHECK(kiln::exp_poly(-1000.0f) == 0.0f);
  CHECK(kiln::exp_poly(-inf) == 0.0f);
  CHECK(std::isnan(kiln::exp_poly(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("exp_poly: kiln::exp on the CPU gives exp_poly's bits, whichever loop clone the CPU runs", "[exp_poly]") {
  // The contiguous elementwise loops run in an AVX2 clone where the CPU has it (KILN_CPU_CLONES,
  // kernels/cpu/loops.h); without FMA contraction it must match the scalar function bit for bit.
  std::vector<float> xs;
  for (float x = -110.0f; x < 95.0f; x += 0.0137f) xs.push_back(x);
  kiln::Tensor t = kiln::tensor(xs);
  std::vector<float> got = kiln::exp(t).to_vector<float>();
  int64_t differ = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = kiln::exp_poly(xs[i]);
    differ += std::memcmp(&want, &got[i], sizeof want) != 0;
  }
  CHECK(xs.size() > 10000);
  CHECK(differ == 0);
}
