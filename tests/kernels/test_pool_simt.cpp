// The 2-d pooling kernels of kernels/cuda/pool.cuh, their real source, run on the CPU through the
// emulator of CUDA's threads (kernels/simt/simt.h), launched as kernels/cuda/pool.cu launches them
// (one thread per output element forward, one per input element backward), and compared bit for
// bit with the CPU kernels of kernels/cpu/pool.cpp: max pooling (values and indices) with padding,
// strides, dilation and a last window that overhangs the input (ceil_mode's), average pooling with
// and without the padding in its divisor, and adaptive average pooling to sizes that do not divide
// the input, forward and backward, in float32, float64, float16 and bfloat16, NCHW and
// channels-last (and one of each for input and output). The maxima's inputs hold ties (the first
// one wins) and NaN (the last one wins). Each case runs in the grid pool.cu asks for and in a grid
// capped at 3 blocks, so that each thread walks many elements; outputs lie between guard bands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "core/ops/image.h"
#include "kernels/cuda/pool.cuh"
#include "kernels/pool.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"

using namespace kiln;
using namespace kiln::test;
namespace pc = kiln::pool_cuda;

namespace {

enum class Kind { Max, Avg, AvgIncludePad, Adaptive };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Max: return "max";
    case Kind::Avg: return "avg";
    case Kind::AvgIncludePad: return "avg counting the padding";
    case Kind::Adaptive: return "adaptive avg";
  }
  return "?";
}

struct Case {
  Kind kind;
  int64_t n, c, h, w;
  Window2d window;  // unused by adaptive pooling
  int64_t out_h, out_w;
  bool in_channels_last, out_channels_last;
};

// PyTorch's output size for a window (ceil_mode: one more when the last window still starts in the
// input or its left padding), as core's pooling ops compute it.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = span / s + 1;
  if (ceil_mode && span % s != 0 && out * s < in + p) ++out;
  return out;
}

Case windowed(Kind kind, Shape nchw, Window2d win, bool ceil_mode, bool in_cl, bool out_cl) {
  return {kind, nchw[0], nchw[1], nchw[2], nchw[3], win,
          out_size(nchw[2], win.kernel_h, win.stride_h, win.pad_h, win.dilation_h, ceil_mode),
          out_size(nchw[3], win.kernel_w, win.stride_w, win.pad_w, win.dilation_w, ceil_mode), in_cl, out_cl};
}

Window2d window(int64_t k, int64_t s, int64_t p, int64_t d = 1) { return {k, k, s, s, p, p, d, d}; }

// A tensor of the case's logical shape stored NCHW or channels-last.
Tensor stored(const Tensor& logical, bool channels_last) {
  Tensor t = empty(logical.sizes(), TensorOptions(logical.dtype()),
                   channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
  t.copy_(logical);
  return t;
}

// Values with ties: multiples of 1/4 in [-4, 4], and a NaN in about one in 40 when asked.
Tensor values(Shape shape, DType dtype, uint64_t seed, bool with_nan) {
  std::mt19937_64 rng(seed);
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v) {
    const uint64_t r = rng();
    x = with_nan && r % 40 == 0 ? std::nan("") : static_cast<double>(static_cast<int64_t>(r >> 8) % 33 - 16) / 4;
  }
  return tensor(v, shape).to(dtype);
}

// Runs kernel(...) on every thread of a grid-stride launch of `total` items.
template <typename K> void launch(int64_t total, unsigned grid_cap, const K& kernel) {
  simt::LaunchConfig config;
  config.grid.x = std::min(cuda_detail::grid_for(total), grid_cap);
  config.block.x = cuda_detail::kThreads;
  simt::launch(config, kernel);
}

bool same_bytes(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

template <typename S> void check_case(const Case& c, DType dtype, unsigned grid_cap) {
  Conv2dGeometry g;
  g.batch = c.n;
  g.channels = c.c;
  g.in_h = c.h;
  g.in_w = c.w;
  g.out_h = c.out_h;
  g.out_w = c.out_w;
  g.window = c.window;
  const bool is_max = c.kind == Kind::Max;
  const bool include_pad = c.kind == Kind::AvgIncludePad;
  const uint64_t seed = static_cast<uint64_t>(c.h * 131 + c.w * 7 + c.out_h * 3 + static_cast<int>(c.kind));
  const Tensor x = stored(values({c.n, c.c, c.h, c.w}, dtype, seed, is_max), c.in_channels_last);
  const Tensor dy = stored(values({c.n, c.c, c.out_h, c.out_w}, dtype, seed + 1, false), c.out_channels_last);
  const ImageStrides xs = ops::image_strides(x), ys = ops::image_strides(dy);
  const int64_t out_total = c.n * c.c * c.out_h * c.out_w, in_total = c.n * c.c * c.h * c.w;
  const size_t elem = sizeof(S);
  const KernelContext cpu{};

  // Forward: the CPU kernel, then the emulated one into guarded buffers of the same strides.
  const Tensor y = empty_like(dy);
  const Tensor idx = empty(dy.sizes(), TensorOptions(DType::Int64),
                           c.out_channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
  Guarded<S> y_emu(out_total);
  Guarded<int64_t> idx_emu(out_total);
  const bool out_inner = pc::channels_inner(ys, c.c), in_inner = pc::channels_inner(xs, c.c);
  const S* xp = static_cast<const S*>(x.data_ptr());
  switch (c.kind) {
    case Kind::Max:
      max_pool2d_forward_cpu(y.data_ptr(), static_cast<int64_t*>(idx.data_ptr()), ys, x.data_ptr(), xs, dtype, g, cpu);
      launch(out_total, grid_cap, [&] {
        pc::max_pool_forward_kernel<S>(y_emu.data(), idx_emu.data(), ys, xp, xs, g, out_inner, out_total);
      });
      break;
    case Kind::Avg:
    case Kind::AvgIncludePad:
      avg_pool2d_forward_cpu(y.data_ptr(), ys, x.data_ptr(), xs, dtype, g, include_pad, cpu);
      launch(out_total, grid_cap, [&] {
        pc::mean_pool_forward_kernel<S, false>(y_emu.data(), ys, xp, xs, g, include_pad, out_inner, out_total);
      });
      break;
    case Kind::Adaptive:
      adaptive_avg_pool2d_forward_cpu(y.data_ptr(), ys, x.data_ptr(), xs, dtype, g, cpu);
      launch(out_total, grid_cap,
             [&] { pc::mean_pool_forward_kernel<S, true>(y_emu.data(), ys, xp, xs, g, false, out_inner, out_total); });
      break;
  }
  CHECK(y_emu.bands_intact());
  CHECK(same_bytes(y_emu.data(), y.data_ptr(), static_cast<size_t>(out_total) * elem));
  if (is_max) {
    CHECK(idx_emu.bands_intact());
    CHECK(same_bytes(idx_emu.data(), idx.data_ptr(), static_cast<size_t>(out_total) * sizeof(int64_t)));
  }

  // Backward, from the CPU forward's indices: dx in x's layout.
  const Tensor dx = empty_like(x);
  Guarded<S> dx_emu(in_total);
  const S* dyp = static_cast<const S*>(dy.data_ptr());
  switch (c.kind) {
    case Kind::Max: {
      const ImageStrides is = ops::image_strides(idx);
      const int64_t* ip = static_cast<const int64_t*>(idx.data_ptr());
      max_pool2d_backward_cpu(dx.data_ptr(), xs, dy.data_ptr(), ys, ip, is, dtype, g, cpu);
      launch(in_total, grid_cap,
             [&] { pc::max_pool_backward_kernel<S>(dx_emu.data(), xs, dyp, ys, ip, is, g, in_inner, in_total); });
      break;
    }
    case Kind::Avg:
    case Kind::AvgIncludePad:
      avg_pool2d_backward_cpu(dx.data_ptr(), xs, dy.data_ptr(), ys, dtype, g, include_pad, cpu);
      launch(in_total, grid_cap, [&] {
        pc::mean_pool_backward_kernel<S, false>(dx_emu.data(), xs, dyp, ys, g, include_pad, in_inner, in_total);
      });
      break;
    case Kind::Adaptive:
      adaptive_avg_pool2d_backward_cpu(dx.data_ptr(), xs, dy.data_ptr(), ys, dtype, g, cpu);
      launch(in_total, grid_cap,
             [&] { pc::mean_pool_backward_kernel<S, true>(dx_emu.data(), xs, dyp, ys, g, false, in_inner, in_total); });
      break;
  }
  CHECK(dx_emu.bands_intact());
  CHECK(same_bytes(dx_emu.data(), dx.data_ptr(), static_cast<size_t>(in_total) * elem));
}

}  // namespace

TEST_CASE("emulated: pooling's CUDA kernels give the CPU's bits, forward and backward", "[simt][pool]") {
  const std::vector<Case> cases{
      // Max: the classic 2x2/2, overlapping 3x3/2 with padding, dilation, a last window past the
      // input (ceil_mode), a window as large as the padded input, and one-channel images.
      windowed(Kind::Max, {2, 3, 8, 8}, window(2, 2, 0), false, false, false),
      windowed(Kind::Max, {2, 5, 9, 7}, window(3, 2, 1), false, true, true),
      windowed(Kind::Max, {1, 4, 11, 10}, window(3, 1, 1, 2), false, false, true),
      windowed(Kind::Max, {2, 3, 10, 9}, window(3, 2, 1), true, true, false),
      windowed(Kind::Max, {1, 2, 6, 5}, {3, 2, 3, 1, 1, 0, 2, 3}, true, false, false),
      windowed(Kind::Max, {3, 1, 5, 5}, window(5, 1, 2), false, true, true),
      // Average, the padding in the divisor or not, with overhanging last windows.
      windowed(Kind::Avg, {2, 3, 9, 9}, window(3, 2, 1), false, false, false),
      windowed(Kind::Avg, {2, 4, 7, 8}, window(3, 2, 1), true, true, true),
      windowed(Kind::AvgIncludePad, {2, 3, 10, 9}, window(3, 2, 1), true, false, true),
      windowed(Kind::AvgIncludePad, {1, 5, 6, 11}, {2, 4, 1, 3, 1, 2, 1, 1}, false, true, false),
      // Adaptive: output sizes that divide the input, that do not (overlapping windows), larger
      // than the input, and 1x1 (global average pooling).
      {Kind::Adaptive, 2, 3, 8, 8, {}, 4, 4, false, false},
      {Kind::Adaptive, 2, 3, 10, 7, {}, 3, 4, true, true},
      {Kind::Adaptive, 1, 4, 5, 3, {}, 7, 6, false, true},
      {Kind::Adaptive, 3, 6, 7, 7, {}, 1, 1, true, false},
  };
  for (const Case& c : cases) {
    for (const DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      for (const unsigned grid_cap : {~0u, 3u}) {
        INFO(kind_name(c.kind) << " [" << c.n << ", " << c.c << ", " << c.h << ", " << c.w << "] to [" << c.out_h
                               << ", " << c.out_w << "], " << dtype_name(dtype) << ", input "
                               << (c.in_channels_last ? "channels-last" : "NCHW") << ", output "
                               << (c.out_channels_last ? "channels-last" : "NCHW") << ", grid cap " << grid_cap);
        if (dtype == DType::Float64) {
          check_case<double>(c, dtype, grid_cap);
        } else {
          with_float_storage(dtype, [&]<typename S>() { check_case<S>(c, dtype, grid_cap); });
        }
      }
    }
  }
}
