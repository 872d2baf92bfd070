// Channels-last checks that mean the same on every device, shared by the CPU test
// (tests/nn/test_channels_last.cpp) and the CUDA one (tests/cuda/test_channels_last_cuda.cpp): the
// layout helpers (tolerances: tests/worst_ratio.h), the twin ResNets (one NCHW on the CPU, one converted and on the
// device under test) and the slow weight path of conv2d. The layout copies are counted by the
// device-independent op (core/ops/conv.cpp), so both devices must count the same copies.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/kiln.h"
#include "core/ops/layout_stats.h"
#include "nn/resnet.h"
#include "tests/worst_ratio.h"

namespace kiln::test {

// Exactly the channels-last strides, not merely contiguous in that format: a size-1 dim would let
// is_contiguous(ChannelsLast) accept an NCHW tensor.
inline bool exactly_channels_last(const Tensor& t) {
  return t.dim() == 4 && t.strides() == channels_last_strides(t.sizes());
}

// The layout copies made since the last reset, by op, for a failed check's message.
inline std::string copies_str() {
  std::ostringstream os;
  for (const auto& [what, n] : layout_copy_counts()) os << what << ": " << n << "; ";
  return os.str();
}

// The CPU tests take the narrow default; the CUDA test passes wider stages.
inline nn::ResNetConfig small_resnet(int64_t in_channels = 3, std::vector<int64_t> widths = {8, 16, 32}) {
  nn::ResNetConfig cfg;
  cfg.in_channels = in_channels;
  cfg.widths = std::move(widths);
  cfg.blocks = {1, 1, 1};
  return cfg;
}

// Two ResNets with the same weights: `a` stays NCHW on the CPU, `b` is converted to channels-last
// and then moved to `device` (either order works: a move keeps a dense tensor's layout). The seed
// also fixes what the caller draws next.
inline std::pair<std::shared_ptr<nn::ResNet>, std::shared_ptr<nn::ResNet>> twin_resnets(
    const nn::ResNetConfig& cfg, Device device = Device::cpu(), uint64_t seed = 21) {
  manual_seed(seed);
  auto a = std::make_shared<nn::ResNet>(cfg);
  auto b = std::make_shared<nn::ResNet>(cfg);
  b->load_state_dict(a->state_dict());
  b->to(MemoryFormat::ChannelsLast);
  b->to(device);
  return {a, b};
}

// A channels-last input meeting an NCHW weight (the slow path) copies the weight every call, and
// its gradient back to NCHW; the same convolution with the weight converted copies nothing and
// gives the same numbers. `x` is an NCHW image on the CPU; the 3x3 weight and the output gradient
// are drawn here, after it. The fast path's tolerances are `slack` times the CPU's: cuDNN may pick
// another algorithm for each layout, where the CPU's im2col GEMM only reads in another order.
inline void check_weight_copy_path(Device device, const Tensor& x, int64_t out_channels, double slack) {
  const Shape& s = x.sizes();
  const Tensor w0 = randn({out_channels, s[1], 3, 3}).to(device);
  const Tensor gy = randn({s[0], out_channels, s[2], s[3]}).contiguous(MemoryFormat::ChannelsLast).to(device);
  const Tensor xcl = x.contiguous(MemoryFormat::ChannelsLast).to(device);
  REQUIRE(exactly_channels_last(xcl));  // the move kept the layout

  Tensor xs = xcl.detach().set_requires_grad(true), ws = w0.detach().set_requires_grad(true);
  reset_layout_copy_count();
  Tensor ys = conv2d(xs, ws, Tensor(), {1, 1}, {1, 1});
  CHECK(exactly_channels_last(ys));
  CHECK(layout_copy_counts() == std::map<std::string, int64_t>{{"conv2d (weight)", 1}});
  ys.backward(gy);
  INFO(copies_str());
  const std::map<std::string, int64_t> expected{
      {"conv2d (weight)", 1}, {"conv2d backward (weight)", 1}, {"conv2d backward (grad_weight)", 1}};
  CHECK(layout_copy_counts() == expected);
  CHECK(layout_copy_count() == 3);
  CHECK(ws.grad().strides() == contiguous_strides(ws.sizes()));  // laid out like its weight

  Tensor xf = xcl.detach().set_requires_grad(true);
  Tensor wf = w0.contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
  reset_layout_copy_count();
  Tensor yf = conv2d(xf, wf, Tensor(), {1, 1}, {1, 1});
  yf.backward(gy);
  CHECK(layout_copy_count() == 0);
  CHECK(exactly_channels_last(yf));
  CHECK(exactly_channels_last(wf.grad()));
  CHECK(exactly_channels_last(xf.grad()));
  CHECK(worst_ratio(yf, ys, 1e-6 * slack, 1e-5 * slack) <= 1.0);
  CHECK(worst_ratio(wf.grad(), ws.grad(), 1e-5 * slack, 1e-5 * slack) <= 1.0);
  CHECK(worst_ratio(xf.grad(), xs.grad(), 1e-6 * slack, 1e-5 * slack) <= 1.0);
}

}  // namespace kiln::test
