// Hand tests for the window-gathering max pools, fractional_max_pool2d/3d and the adaptive max
// pools with indices: what the op table cannot say (PyTorch's windows for given samples worked by
// hand, samples drawn from a generator, where the gradient lands on ties, NaNs, empty batches,
// layouts, max_unpool of their indices).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {

Tensor row_of(int64_t n) { return arange(0, n, 1, TensorOptions(DType::Float32)).reshape({1, 1, 1, n}); }

std::vector<int64_t> fractional_indices(const Tensor& x, Pair kernel, Pair out, double u_w, double u_h) {
  const Tensor u = tensor({static_cast<float>(u_w), static_cast<float>(u_h)}, {1, 1, 2});
  return fractional_max_pool2d_with_indices(x, kernel, out, u).second.to_vector<int64_t>();
}

}  // namespace

TEST_CASE("fractional_max_pool2d: PyTorch's window starts for given samples, worked by hand", "[conv]") {
  // Width 8, kernel 2, 5 outputs: alpha = (8 - 2) / 4 = 1.5. With u = 0.5 the starts are
  // trunc((i + 0.5) 1.5) - trunc(0.75) = 0, 2, 3, 5 and the last n - k = 6; over an increasing row
  // each window's maximum is its right cell: 1, 3, 4, 6, 7. With u = 0: 0, 1, 3, 4, 6.
  const Tensor x = row_of(8);
  CHECK(fractional_indices(x, {1, 2}, {1, 5}, 0.5, 0.3) == std::vector<int64_t>{1, 3, 4, 6, 7});
  CHECK(fractional_indices(x, {1, 2}, {1, 5}, 0.0, 0.3) == std::vector<int64_t>{1, 2, 4, 5, 7});
  // The height reads the second sample (PyTorch's (w, h) order): the same windows down a column.
  const Tensor column = x.reshape({1, 1, 8, 1});
  CHECK(fractional_indices(column, {2, 1}, {5, 1}, 0.3, 0.5) == std::vector<int64_t>{1, 3, 4, 6, 7});
  // One output: the window that ends at the input's end, whatever the sample.
  CHECK(fractional_indices(x, {1, 3}, {1, 1}, 0.9, 0.9) == std::vector<int64_t>{7});
  // The values are the input's at the indices, and the whole gradient goes there.
  Tensor leaf = row_of(8).set_requires_grad(true);
  const Tensor y = fractional_max_pool2d(leaf, {1, 2}, {1, 5}, tensor({0.5f, 0.0f}, {1, 1, 2}));
  CHECK(y.to_vector<float>() == std::vector<float>{1, 3, 4, 6, 7});
  y.backward(tensor({10.0f, 20.0f, 30.0f, 40.0f, 50.0f}, {1, 1, 1, 5}));
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>{0, 10, 0, 20, 30, 0, 40, 50});
}

TEST_CASE("fractional_max_pool2d: each plane draws its own windows from the generator", "[conv]") {
  // 16 planes of an increasing row of 20: each plane's indices are its windows' right cells, so
  // they show the windows it drew.
  const Tensor x = arange(0, 20, 1, TensorOptions(DType::Float32)).reshape({1, 1, 1, 20}).expand({4, 4, 1, 20});
  auto windows = [&](int64_t out, uint64_t seed) {
    return fractional_max_pool2d_with_indices(x, {1, 2}, {1, out}, Tensor(), Generator(seed)).second;
  };
  // To 7 with a 2-wide kernel, alpha = 18 / 6 = 3 is whole: windows 3 apart from the first cell
  // to the last, for all but a few float32 samples next to 1/3 and 2/3 (where (i + u) 3 rounds
  // across an integer, in PyTorch too), none of which this seed draws.
  const std::vector<int64_t> whole = windows(7, 7).to_vector<int64_t>();
  for (size_t p = 0; p < 16; ++p) {
    for (size_t i = 0; i < 7; ++i) CHECK(whole[p * 7 + i] == static_cast<int64_t>(1 + 3 * i));
  }
  // To 8, alpha = 18 / 7: steps of 2 and 3 whose order depends on the sample. The same seed
  // repeats the windows, another seed moves them, and the planes differ from one another.
  const Tensor a = windows(8, 7);
  CHECK(a.sizes() == Shape{4, 4, 1, 8});
  CHECK(a.to_vector<int64_t>() == windows(8, 7).to_vector<int64_t>());
  CHECK(a.to_vector<int64_t>() != windows(8, 8).to_vector<int64_t>());
  const std::vector<int64_t> v = a.to_vector<int64_t>();
  bool planes_differ = false;
  for (size_t p = 0; p < 16; ++p) {
    CHECK(v[p * 8] == 1);
    CHECK(v[p * 8 + 7] == 19);
    for (size_t i = 1; i < 8; ++i) {
      const int64_t step = v[p * 8 + i] - v[p * 8 + i - 1];
      CHECK((step == 2 || step == 3));
      planes_differ = planes_differ || v[p * 8 + i] != v[i];
    }
  }
  CHECK(planes_differ);
}

TEST_CASE("window max pools: ties give all the gradient to the first cell, a NaN takes its window", "[conv]") {
  // All equal: every window's first cell (in (h, w) order) wins and collects its gradient.
  Tensor flat = zeros({1, 1, 4, 4}).set_requires_grad(true);
  auto [values, indices] = fractional_max_pool2d_with_indices(flat, {2, 2}, {2, 2}, full({1, 1, 2}, 0.0));
  // alpha = 2: windows start at 0 and 2 in both dims.
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{0, 2, 8, 10});
  values.sum().backward();
  CHECK(flat.grad().to_vector<float>() == std::vector<float>{1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0});
  // adaptive_max_pool2d splits a tie's gradient; with indices, the first cell takes it all.
  Tensor leaf = zeros({1, 1, 2, 2}).set_requires_grad(true);
  adaptive_max_pool2d_with_indices(leaf, {1, 1}).first.sum().backward();
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>{1, 0, 0, 0});
  Tensor split = zeros({1, 1, 2, 2}).set_requires_grad(true);
  adaptive_max_pool2d(split, {1, 1}).sum().backward();
  CHECK(split.grad().to_vector<float>() == std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f});
  // NaNs: the window's last NaN wins, as in max_pool2d's loops.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = tensor({nan, 1.0f, nan, 5.0f, nan, 3.0f}, {1, 1, 1, 6});
  auto [v, i] = adaptive_max_pool2d_with_indices(x, {1, 2});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 4});
  CHECK(std::isnan(v.to_vector<float>()[0]));
  CHECK(std::isnan(v.to_vector<float>()[1]));
  CHECK(max_pool2d_with_indices(x, {1, 3}).second.to_vector<int64_t>() == std::vector<int64_t>{2, 4});
  // The same rule over 2-d and 3-d windows, found one dim at a time: the last NaN in row-major
  // order, (1, 0), although (0, 2) is further right.
  const Tensor grid = tensor({1.0f, 5.0f, nan, nan, 7.0f, 9.0f}, {1, 1, 2, 3});
  CHECK(fractional_max_pool2d_with_indices(grid, {2, 3}, {1, 1}, full({1, 1, 2}, 0.5)).second.item<int64_t>() == 3);
  const Tensor box = tensor({nan, 1.0f, 2.0f, 3.0f, 4.0f, nan, 5.0f, 6.0f}, {1, 1, 2, 2, 2});
  CHECK(fractional_max_pool3d_with_indices(box, {2, 2, 2}, {1, 1, 1}, full({1, 1, 3}, 0.5)).second.item<int64_t>() ==
        5);
  // Without NaNs the first maximum wins however the window is walked: 9 at (1, 2).
  const Tensor tie = tensor({9.0f, 1.0f, 9.0f, 0.0f, 9.0f, 2.0f}, {1, 1, 2, 3});
  CHECK(fractional_max_pool2d_with_indices(tie, {2, 3}, {1, 1}, full({1, 1, 2}, 0.5)).second.item<int64_t>() == 0);
  CHECK(adaptive_max_pool2d_with_indices(tie.narrow(3, 1, 2), {1, 1}).second.item<int64_t>() == 1);
}

TEST_CASE("adaptive max pools with indices agree with the pools and with max_unpool", "[conv]") {
  manual_seed(41);
  const Tensor x = randn({2, 3, 7, 9});
  auto [v2, i2] = adaptive_max_pool2d_with_indices(x, {3, 4});
  CHECK(amax(abs(v2 - adaptive_max_pool2d(x, {3, 4})), {}).item<double>() == 0.0);
  CHECK(amax(abs(v2 - gather(x.reshape({2, 3, 63}), 2, i2.reshape({2, 3, 12})).reshape({2, 3, 3, 4})), {})
            .item<double>() == 0.0);
  const Tensor line = randn({2, 3, 11});
  auto [v1, i1] = adaptive_max_pool1d_with_indices(line, 4);
  CHECK(amax(abs(v1 - adaptive_max_pool1d(line, 4)), {}).item<double>() == 0.0);
  CHECK(amax(abs(v1 - gather(line, 2, i1)), {}).item<double>() == 0.0);
  const Tensor vol = randn({2, 2, 5, 6, 7});
  auto [v3, i3] = adaptive_max_pool3d_with_indices(vol, {2, 3, 4});
  CHECK(amax(abs(v3 - adaptive_max_pool3d(vol, {2, 3, 4})), {}).item<double>() == 0.0);
  CHECK(amax(i3, {}).item<int64_t>() < 5 * 6 * 7);
  // max_unpool2d puts the fractional pool's maxima back at their indices (zeros elsewhere).
  auto [fv, fi] = fractional_max_pool2d_with_indices(x, {2, 2}, {4, 5}, Tensor(), Generator(5));
  const Tensor back = max_unpool2d(fv, fi, {2, 2}, {2, 2}, {0, 0}, Pair{7, 9});
  CHECK(amax(abs(gather(back.reshape({2, 3, 63}), 2, fi.reshape({2, 3, 20})) - fv.reshape({2, 3, 20})), {})
            .item<double>() == 0.0);
  CHECK(sum(ne(back, 0.0).to(DType::Int64)).item<int64_t>() <= 2 * 3 * 20);
}

TEST_CASE("fractional and adaptive max pools: empty batches, channels-last, unbatched inputs", "[conv]") {
  Tensor empty = zeros({0, 2, 6, 6}).set_requires_grad(true);
  auto [ev, ei] = fractional_max_pool2d_with_indices(empty, {2, 2}, {3, 3});
  CHECK(ev.sizes() == Shape{0, 2, 3, 3});
  CHECK(ei.sizes() == Shape{0, 2, 3, 3});
  ev.sum().backward();
  CHECK(empty.grad().sizes() == Shape{0, 2, 6, 6});
  CHECK(adaptive_max_pool2d_with_indices(zeros({0, 2, 5, 5}), {2, 2}).first.sizes() == Shape{0, 2, 2, 2});
  CHECK(fractional_max_pool3d(zeros({0, 2, 4, 4, 4}), {2, 2, 2}, {2, 2, 2}).sizes() == Shape{0, 2, 2, 2, 2});

  manual_seed(43);
  const Tensor x = randn({2, 3, 8, 7});
  const Tensor u = rand({2, 3, 2});
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  auto [v, i] = fractional_max_pool2d_with_indices(x, {2, 3}, {5, 4}, u);
  auto [vc, ic] = fractional_max_pool2d_with_indices(cl, {2, 3}, {5, 4}, u);
  CHECK(vc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(ic.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(vc.to_vector<float>() == v.to_vector<float>());
  CHECK(ic.to_vector<int64_t>() == i.to_vector<int64_t>());
  // [C, H, W] is one image with samples [1, C, 2].
  const Tensor one = fractional_max_pool2d(x.select(0, 1), {2, 3}, {5, 4}, u.narrow(0, 1, 1));
  CHECK(one.to_vector<float>() == v.select(0, 1).to_vector<float>());
  // 3-d: [N, C, 3] samples in (t, h, w) order; a 4-d input is one volume.
  const Tensor vol = randn({2, 2, 6, 5, 7});
  const Tensor u3 = rand({2, 2, 3});
  const Tensor y3 = fractional_max_pool3d(vol, {2, 2, 3}, {3, 4, 3}, u3);
  CHECK(y3.sizes() == Shape{2, 2, 3, 4, 3});
  CHECK(fractional_max_pool3d(vol.select(0, 0), {2, 2, 3}, {3, 4, 3}, u3.narrow(0, 0, 1)).to_vector<float>() ==
        y3.select(0, 0).to_vector<float>());
  // output_ratio: trunc(n ratio) per dim.
  CHECK(fractional_output_size2d(x, {0.5, 0.75}) == Pair{4, 5});
  CHECK(fractional_output_size3d(vol, {0.5, 0.5, 0.5}) == Triple{3, 2, 3});
}
