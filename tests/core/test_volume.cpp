// Hand tests of the volume ops beyond the op table's rows: conv_transpose3d is conv3d's adjoint,
// the ops without a bias, a depth kernel of 1 is conv2d on every depth, max_pool3d's ties go where
// PyTorch's go (the first in (d, h, w) order, which the order of the two passes decides), NaN
// wins a window, max_unpool3d puts max_pool3d's values back, and empty batches.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {
double dot_value(const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item<double>(); }
const TensorOptions f64(DType::Float64);
}  // namespace

TEST_CASE("conv_transpose3d is the adjoint of conv3d with the same weight", "[volume]") {
  // <conv3d(x, w), y> = <x, conv_transpose3d(y, w)> for every geometry where the sizes agree:
  // output_padding picks the input size the strided convolution came from.
  struct Case {
    Shape x, w;
    Triple stride, padding, dilation, output_padding;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 6, 5}, {4, 3, 3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, 1},
      {{1, 4, 7, 6, 5}, {6, 2, 3, 2, 3}, {2, 2, 1}, {1, 0, 1}, {1, 2, 1}, {0, 1, 0}, 2},
      {{2, 2, 6, 5, 7}, {2, 2, 2, 3, 2}, {3, 1, 2}, {1, 1, 0}, {2, 1, 1}, {2, 0, 1}, 1},
  };
  manual_seed(11);
  for (const Case& c : cases) {
    const Tensor x = randn(c.x).to(DType::Float64), w = randn(c.w).to(DType::Float64);
    const Tensor y_shape = conv3d(x, w, Tensor(), c.stride, c.padding, c.dilation, c.groups);
    const Tensor y = randn(y_shape.sizes()).to(DType::Float64);
    const Tensor back = conv_transpose3d(y, w, Tensor(), c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    REQUIRE(back.sizes() == x.sizes());
    CHECK(dot_value(y_shape, y) == Approx(dot_value(x, back)).epsilon(1e-12));
  }
}

TEST_CASE("conv3d and conv_transpose3d without a bias are the ops with a zero bias", "[volume]") {
  manual_seed(12);
  const Tensor x = randn({2, 2, 4, 5, 4}).to(DType::Float64), w = randn({3, 2, 2, 3, 2}).to(DType::Float64);
  const Tensor a = conv3d(x, w, Tensor(), {2, 1, 1}, {1, 1, 0});
  const Tensor b = conv3d(x, w, zeros({3}, f64), {2, 1, 1}, {1, 1, 0});
  CHECK(a.to_vector<double>() == b.to_vector<double>());
  const Tensor wt = randn({2, 3, 2, 3, 2}).to(DType::Float64);
  const Tensor c = conv_transpose3d(x, wt, Tensor(), {2, 1, 2}, {1, 0, 0}, {1, 0, 0});
  const Tensor d = conv_transpose3d(x, wt, zeros({3}, f64), {2, 1, 2}, {1, 0, 0}, {1, 0, 0});
  CHECK(c.to_vector<double>() == d.to_vector<double>());
}

TEST_CASE("conv3d with a depth kernel of 1 is conv2d on every depth", "[volume]") {
  manual_seed(13);
  const Tensor x = randn({2, 4, 3, 6, 5}).to(DType::Float64), w = randn({6, 2, 1, 3, 3}).to(DType::Float64);
  const Tensor b = randn({6}).to(DType::Float64);
  const Tensor y = conv3d(x, w, b, {1, 2, 1}, {0, 1, 1}, {1, 1, 1}, 2);
  for (int64_t d = 0; d < 3; ++d) {
    const Tensor plane = conv2d(x.select(2, d), w.select(2, 0), b, {2, 1}, {1, 1}, {1, 1}, 2);
    const std::vector<double> got = y.select(2, d).contiguous().to_vector<double>(), want = plane.to_vector<double>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  }
}

TEST_CASE("max_pool3d: ties go to the first element in (d, h, w) order, as PyTorch's", "[volume]") {
  // Two maxima of one 2x2x2 window: (d 0, h 1, w 1) at flat 3 and (d 1, h 0, w 0) at flat 4.
  // Pooling the planes first finds 3 in plane 0 and 4 in plane 1, then the depth pass keeps
  // plane 0: flat 3, PyTorch's. Pooling the depth first would keep the first (h, w) column: flat 4.
  Tensor x = zeros({1, 1, 2, 2, 2}, f64);
  x = index_put(
      x,
      {tensor(std::vector<int64_t>{0, 0}), tensor(std::vector<int64_t>{0, 0}), tensor(std::vector<int64_t>{0, 1}),
       tensor(std::vector<int64_t>{1, 0}), tensor(std::vector<int64_t>{1, 0})},
      tensor(std::vector<double>{5, 5}));
  x.set_requires_grad(true);
  auto [values, indices] = max_pool3d_with_indices(x, {2, 2, 2});
  CHECK(values.item<double>() == 5);
  CHECK(indices.item<int64_t>() == 3);
  values.sum().backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  CHECK(g == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0});
}

TEST_CASE("max_pool3d: a NaN wins its windows", "[volume]") {
  Tensor x = arange(0, 32, 1, f64).reshape({1, 1, 2, 4, 4});
  x = index_put(x,
                {Tensor(), Tensor(), tensor(std::vector<int64_t>{1}), tensor(std::vector<int64_t>{0}),
                 tensor(std::vector<int64_t>{1})},
                full({1}, std::numeric_limits<double>::quiet_NaN(), f64));
  const std::vector<double> v = max_pool3d(x, {2, 2, 2}).to_vector<double>();
  REQUIRE(v.size() == 4);
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 23);  // d * 16 + h * 4 + w at (1, 1, 3)
  CHECK(v[2] == 29);
  CHECK(v[3] == 31);
}

TEST_CASE("max_unpool3d puts max_pool3d's values back at their indices", "[volume]") {
  manual_seed(14);
  const Tensor x = randn({2, 3, 4, 6, 5}).to(DType::Float64);
  auto [values, indices] = max_pool3d_with_indices(x, {2, 2, 2}, {2, 2, 2});
  // The default size drops the last width column (5 pools to 2, which unpools to 4), where a
  // winner may lie: output_size asks for the input's.
  const Tensor back = max_unpool3d(values, indices, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, Triple{4, 6, 5});
  REQUIRE(back.sizes() == x.sizes());
  // Every value sits where it came from, and each window holds its maximum and zeros.
  const Tensor picked = gather(x.reshape({2, 3, -1}), 2, indices.reshape({2, 3, -1}));
  CHECK(picked.to_vector<double>() == values.reshape({2, 3, -1}).to_vector<double>());
  CHECK(max_pool3d(back, {2, 2, 2}).to_vector<double>() == values.to_vector<double>());
  CHECK(count_nonzero(back).item<int64_t>() == values.numel());
}

TEST_CASE("volume ops take an empty batch", "[volume]") {
  const Tensor x = zeros({0, 2, 4, 4, 4});
  CHECK(conv3d(x, zeros({3, 2, 3, 3, 3}), zeros({3}), {1, 1, 1}, {1, 1, 1}).sizes() == Shape{0, 3, 4, 4, 4});
  CHECK(conv_transpose3d(x, zeros({2, 3, 2, 2, 2}), Tensor(), {2, 2, 2}).sizes() == Shape{0, 3, 8, 8, 8});
  CHECK(max_pool3d(x, {2, 2, 2}).sizes() == Shape{0, 2, 2, 2, 2});
  CHECK(avg_pool3d(x, {2, 2, 2}).sizes() == Shape{0, 2, 2, 2, 2});
  CHECK(adaptive_avg_pool3d(x, {1, 2, 3}).sizes() == Shape{0, 2, 1, 2, 3});
  CHECK(adaptive_max_pool3d(x, {1, 2, 3}).sizes() == Shape{0, 2, 1, 2, 3});
}
