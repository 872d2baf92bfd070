// Fractional max pooling and the adaptive max pools with indices on the GPU. The op table's CUDA
// parity runner checks the rows with given samples; left here: samples drawn on the device (Philox
// gives a CUDA generator the CPU generator's uniforms bit for bit, so the windows agree), the
// layers on a CUDA input, and out-of-range samples clamped on the device instead of checked.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;

TEST_CASE("cuda fractional_max_pool2d/3d: windows drawn on the device match the CPU's", "[cuda][pool]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(61);
  const Tensor x = randn({3, 4, 11, 10});
  Tensor cpu_leaf = x.clone().set_requires_grad(true), gpu_leaf = x.to(gpu).set_requires_grad(true);
  auto [cv, ci] = fractional_max_pool2d_with_indices(cpu_leaf, {2, 3}, {6, 5}, Tensor(), Generator(12));
  auto [gv, gi] = fractional_max_pool2d_with_indices(gpu_leaf, {2, 3}, {6, 5}, Tensor(), Generator(12, gpu));
  CHECK(gi.device() == gpu);
  CHECK(gi.to(Device::cpu()).to_vector<int64_t>() == ci.to_vector<int64_t>());
  CHECK(gv.to(Device::cpu()).to_vector<float>() == cv.to_vector<float>());
  const Tensor g = randn({3, 4, 6, 5});
  cv.backward(g);
  gv.backward(g.to(gpu));
  CHECK(gpu_leaf.grad().to(Device::cpu()).to_vector<float>() == cpu_leaf.grad().to_vector<float>());

  const Tensor vol = randn({2, 3, 6, 7, 5});
  const Tensor u = rand({2, 3, 3});
  auto [c3, ci3] = fractional_max_pool3d_with_indices(vol, {2, 2, 2}, {3, 4, 2}, u);
  auto [g3, gi3] = fractional_max_pool3d_with_indices(vol.to(gpu), {2, 2, 2}, {3, 4, 2}, u.to(gpu));
  CHECK(gi3.to(Device::cpu()).to_vector<int64_t>() == ci3.to_vector<int64_t>());
  CHECK(g3.to(Device::cpu()).to_vector<float>() == c3.to_vector<float>());

  // A sample outside [0, 1] (or NaN, or infinite) is an Error on the CPU; on the device the starts
  // are clamped into the input, so every index still lies in its plane.
  for (const double bad_value : {1.5, -3.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e30}) {
    INFO(bad_value);
    const Tensor bad = full({3, 4, 2}, bad_value, TensorOptions(DType::Float32, gpu));
    const Tensor idx = fractional_max_pool2d_with_indices(x.to(gpu), {2, 3}, {6, 5}, bad).second.to(Device::cpu());
    CHECK(amin(idx, {}).item<int64_t>() >= 0);
    CHECK(amax(idx, {}).item<int64_t>() < 11 * 10);
  }
}

TEST_CASE("cuda adaptive max pools with indices and FractionalMaxPool2d match the CPU twin", "[cuda][pool]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(62);
  const Tensor x = randn({2, 3, 9, 7}).contiguous(MemoryFormat::ChannelsLast);
  auto [cv, ci] = adaptive_max_pool2d_with_indices(x, {4, 3});
  auto [gv, gi] = adaptive_max_pool2d_with_indices(x.to(gpu), {4, 3});
  CHECK(gv.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(gi.to(Device::cpu()).to_vector<int64_t>() == ci.to_vector<int64_t>());
  CHECK(gv.to(Device::cpu()).to_vector<float>() == cv.to_vector<float>());
  const Tensor line = randn({2, 3, 13});
  CHECK(adaptive_max_pool1d_with_indices(line.to(gpu), 5).second.to(Device::cpu()).to_vector<int64_t>() ==
        adaptive_max_pool1d_with_indices(line, 5).second.to_vector<int64_t>());
  const Tensor vol = randn({1, 2, 5, 6, 7});
  CHECK(adaptive_max_pool3d_with_indices(vol.to(gpu), {2, 3, 4}).second.to(Device::cpu()).to_vector<int64_t>() ==
        adaptive_max_pool3d_with_indices(vol, {2, 3, 4}).second.to_vector<int64_t>());

  nn::FractionalMaxPool2d pool(Pair{2, 2}, 0.5, 0.5);
  pool.random_samples = rand({2, 3, 2});
  const Tensor cpu_out = pool.forward(x);
  pool.random_samples = pool.random_samples.to(gpu);
  CHECK(pool.forward(x.to(gpu)).to(Device::cpu()).to_vector<float>() == cpu_out.to_vector<float>());
}
