// Hand tests of grid_sample and affine_grid beyond the op table's rows: the identity map gives the
// image back under either corner convention, a shift of one pixel moves it by one pixel, nearest
// rounds halves to even, and float16 is the float32 result rounded once.
// (tests/nn/test_optim_lbfgs.cpp registers an image through both ops' gradients.)
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {
Tensor theta_of(std::vector<double> v, DType dtype = DType::Float64) { return tensor(v).to(dtype).reshape({1, 2, 3}); }
}  // namespace

TEST_CASE("grid_sample: the identity map gives the image back", "[grid_sample]") {
  manual_seed(3);
  const Tensor image = randn({2, 3, 5, 7}).to(DType::Float64);
  const Tensor theta = cat({theta_of({1, 0, 0, 0, 1, 0}), theta_of({1, 0, 0, 0, 1, 0})}, 0);
  for (const bool align : {false, true}) {
    for (const GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Nearest, GridSampleMode::Bicubic}) {
      INFO("align_corners " << align << ", mode " << static_cast<int>(mode));
      const Tensor grid = affine_grid(theta, {2, 3, 5, 7}, align);
      const Tensor out = grid_sample(image, grid, mode, GridPadding::Zeros, align);
      const std::vector<double> a = out.to_vector<double>(), b = image.to_vector<double>();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-12));
    }
  }
}

TEST_CASE("grid_sample: a shift of 2 / W moves the image one pixel, zeros coming in", "[grid_sample]") {
  // x' = x + 2/4: each output pixel reads the input one pixel to its right.
  const Tensor image = arange(0, 8, 1, TensorOptions(DType::Float64)).reshape({1, 1, 2, 4});
  const Tensor grid = affine_grid(theta_of({1, 0, 0.5, 0, 1, 0}), {1, 1, 2, 4});
  const std::vector<double> zeros_pad = grid_sample(image, grid).to_vector<double>();
  const std::vector<double> expected = {1, 2, 3, 0, 5, 6, 7, 0};
  for (size_t i = 0; i < expected.size(); ++i) CHECK(zeros_pad[i] == Approx(expected[i]).margin(1e-12));
  const std::vector<double> border =
      grid_sample(image, grid, GridSampleMode::Bilinear, GridPadding::Border).to_vector<double>();
  const std::vector<double> edge = {1, 2, 3, 3, 5, 6, 7, 7};
  for (size_t i = 0; i < edge.size(); ++i) CHECK(border[i] == Approx(edge[i]).margin(1e-12));
}

TEST_CASE("grid_sample: nearest rounds halves to even", "[grid_sample]") {
  // align_corners over 5 pixels: x = -0.75 is pixel 0.5 and x = -0.25 pixel 1.5, exactly.
  const Tensor image = arange(0, 5, 1, TensorOptions(DType::Float64)).reshape({1, 1, 1, 5});
  const Tensor grid = tensor(std::vector<double>{-0.75, 0, -0.25, 0}).reshape({1, 1, 2, 2});
  const Tensor out = grid_sample(image, grid, GridSampleMode::Nearest, GridPadding::Zeros, true);
  CHECK(out.to_vector<double>() == std::vector<double>{0, 2});
}

TEST_CASE("grid_sample: float16 is the float32 result rounded once", "[grid_sample]") {
  manual_seed(4);
  const Tensor image = randn({1, 2, 6, 6}).to(DType::Float16);
  const Tensor grid = mul(sub(rand({1, 3, 4, 2}), 0.5), 2.6).to(DType::Float16);
  for (const GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Bicubic}) {
    const Tensor half = grid_sample(image, grid, mode, GridPadding::Reflection);
    const Tensor single = grid_sample(image.to(DType::Float32), grid.to(DType::Float32), mode, GridPadding::Reflection)
                              .to(DType::Float16);
    CHECK(half.dtype() == DType::Float16);
    CHECK(half.to_vector<double>() == single.to_vector<double>());
  }
}
