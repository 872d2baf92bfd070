// Hand tests of interpolate's antialias beyond the op table's rows: a shrink by 2 written out by
// hand (the triangle filter stretched to weights 1, 3, 3, 1 over 8, cut and renormalized at the
// border), a constant image stays constant, growing with antialias is plain bilinear, and autocast
// leaves the resampling matmul in float32.
#include <catch2/catch.hpp>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("interpolate antialias: a bilinear shrink by 2 blends 1, 3, 3, 1 eighths", "[interpolate]") {
  const Tensor row = arange(0, 8, 1, TensorOptions(DType::Float64)).reshape({1, 1, 1, 8});
  const std::vector<double> v = interpolate(row, {1, 4}, InterpolateMode::Linear, false, true).to_vector<double>();
  REQUIRE(v.size() == 4);
  // Output 0 is centred on 1 with reach 2: inputs 0, 1, 2 at weights 3/4, 3/4, 1/4 (input -1 is
  // cut off), renormalized by 7/4.
  CHECK(v[0] == Approx((0 * 0.75 + 1 * 0.75 + 2 * 0.25) / 1.75).epsilon(1e-14));
  CHECK(v[1] == Approx((1 * 1 + 2 * 3 + 3 * 3 + 4 * 1) / 8.0).epsilon(1e-14));
  CHECK(v[2] == Approx((3 * 1 + 4 * 3 + 5 * 3 + 6 * 1) / 8.0).epsilon(1e-14));
  CHECK(v[3] == Approx((5 * 0.25 + 6 * 0.75 + 7 * 0.75) / 1.75).epsilon(1e-14));
  // Without antialias the shrink reads two neighbours only: the mean of 0 and 1 for output 0.
  CHECK(interpolate(row, {1, 4}, InterpolateMode::Linear).to_vector<double>()[0] == 0.5);
}

TEST_CASE("interpolate antialias: constants stay, growing is plain bilinear", "[interpolate]") {
  for (const InterpolateMode mode : {InterpolateMode::Linear, InterpolateMode::Bicubic}) {
    const Tensor flat = interpolate(full({1, 2, 11, 9}, 3.0, TensorOptions(DType::Float64)), {4, 5}, mode, false, true);
    for (const double v : flat.to_vector<double>()) CHECK(v == Approx(3.0).epsilon(1e-14));
  }
  manual_seed(9);
  const Tensor x = randn({2, 3, 4, 5}).to(DType::Float64);
  const std::vector<double> aa = interpolate(x, {9, 11}, InterpolateMode::Linear, false, true).to_vector<double>();
  const std::vector<double> plain = interpolate(x, {9, 11}, InterpolateMode::Linear).to_vector<double>();
  REQUIRE(aa.size() == plain.size());
  for (size_t i = 0; i < aa.size(); ++i) CHECK(aa[i] == Approx(plain[i]).margin(1e-14));
}

TEST_CASE("interpolate antialias keeps float32 under autocast", "[interpolate][autocast]") {
  manual_seed(10);
  const Tensor x = randn({1, 2, 12, 10});
  const Tensor plain = interpolate(x, {5, 4}, InterpolateMode::Bicubic, false, true);
  const AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
  const Tensor cast = interpolate(x, {5, 4}, InterpolateMode::Bicubic, false, true);
  CHECK(cast.dtype() == DType::Float32);
  CHECK(cast.to_vector<float>() == plain.to_vector<float>());
}
