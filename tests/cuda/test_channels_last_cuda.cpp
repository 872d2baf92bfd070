// Channels-last models on the GPU: a converted ResNet's training step (forward, backward, AdamW)
// runs cuDNN in NHWC with no hidden layout copy (layout_copy_count()), keeps its activations and
// gradients channels-last, and matches the same step of the NCHW model on the CPU. TF32 is off for
// the comparison: it rounds convolution inputs to 10 mantissa bits, far above float32's rtol.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "core/ops/layout_stats.h"
#include "kernels/conv.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

const Device kCuda = Device::cuda(0);

void require_cuda() {
  INFO("cuda::is_available() is false: " << cuda::unavailable_reason());
  REQUIRE(cuda::is_available());
}

struct NoTF32 {
  cuda::MathSwitches saved = cuda::math_switches();
  NoTF32() {
    cuda::math_switches().allow_tf32_matmul = false;
    cuda::math_switches().allow_tf32_cudnn = false;
  }
  ~NoTF32() { cuda::math_switches() = saved; }
};

bool exactly_channels_last(const Tensor& t) { return t.dim() == 4 && t.strides() == channels_last_strides(t.sizes()); }

std::string copies_str() {
  std::ostringstream os;
  for (const auto& [what, n] : layout_copy_counts()) os << what << ": " << n << "; ";
  return os.str();
}

// max |a - b| / (atol + rtol |b|), both read back to the CPU: <= 1 passes.
double worst_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.sizes() == b.sizes());
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  double worst = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(va[i] - vb[i]) / (atol + rtol * std::abs(vb[i])));
  }
  return worst;
}

ResNetConfig small_resnet(int64_t in_channels) {
  ResNetConfig cfg;
  cfg.in_channels = in_channels;
  cfg.widths = {16, 32, 64};
  cfg.blocks = {1, 1, 1};
  return cfg;
}

}  // namespace

TEST_CASE("cuda channels-last: a ResNet training step makes no layout copy and matches the CPU",
          "[cuda][channels_last]") {
  require_cuda();
  NoTF32 no_tf32;
  for (int64_t in_channels : {3, 1}) {
    INFO("in_channels " << in_channels);
    manual_seed(31);
    auto cpu = std::make_shared<ResNet>(small_resnet(in_channels));
    auto gpu = std::make_shared<ResNet>(small_resnet(in_channels));
    gpu->load_state_dict(cpu->state_dict());
    // Either order works: a move keeps a dense tensor's layout.
    gpu->to(MemoryFormat::ChannelsLast);
    gpu->to(kCuda);
    for (const auto& [n, p] : gpu->named_parameters()) {
      INFO(n);
      CHECK(p.is_cuda());
      if (p.dim() == 4) CHECK(exactly_channels_last(p));
    }
    optim::AdamW opt_cpu(cpu->parameters(), 1e-3), opt_gpu(gpu->parameters(), 1e-3);
    const Tensor target = tensor<int64_t>({1, 3, 5, 7, 9, 0, 2, 4});
    const Tensor target_gpu = target.to(kCuda);
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const Tensor x = randn({8, in_channels, 16, 16});
      const Tensor xg = x.contiguous(MemoryFormat::ChannelsLast).to(kCuda);
      Tensor loss_cpu = cross_entropy(cpu->forward(x), target);
      loss_cpu.backward();

      reset_layout_copy_count();
      Tensor loss_gpu = cross_entropy(gpu->forward(xg), target_gpu);
      loss_gpu.backward();
      {
        INFO(copies_str());
        CHECK(layout_copy_count() == 0);
      }
      // The last cuDNN call of the step was a channels-last weight gradient in strict float32.
      const ConvMathRecord rec = last_conv_math_cuda();
      CHECK(rec.pass == ConvPass::BackwardFilter);
      CHECK(rec.used == ConvMathType::Fma);
      for (const auto& [n, p] : gpu->named_parameters()) {
        INFO(n);
        REQUIRE(p.grad().defined());
        if (p.dim() == 4) CHECK(exactly_channels_last(p.grad()));
      }
      const auto pc = cpu->named_parameters();
      const auto pg = gpu->named_parameters();
      for (size_t i = 0; i < pc.size(); ++i) {
        INFO(pg[i].first);
        // float32 on both sides; cuDNN and the CPU's im2col GEMM sum in different orders.
        CHECK(worst_ratio(pg[i].second.grad(), pc[i].second.grad(), 1e-5, 2e-3) <= 1.0);
      }
      CHECK(loss_gpu.item<double>() == Approx(loss_cpu.item<double>()).epsilon(1e-4));

      reset_layout_copy_count();
      opt_gpu.step();
      gpu->zero_grad();
      CHECK(layout_copy_count() == 0);
      opt_cpu.step();
      cpu->zero_grad();
    }
    const auto sc = cpu->state_dict();
    for (const auto& [n, t] : gpu->state_dict()) {
      INFO(n);
      if (t.dim() == 4) CHECK(exactly_channels_last(t));
      if (t.is_floating_point()) CHECK(worst_ratio(t, sc.at(n), 1e-5, 1e-3) <= 1.0);
    }
  }
}

TEST_CASE("cuda channels-last: the weight copy of the slow path is counted and gives the same numbers",
          "[cuda][channels_last]") {
  require_cuda();
  NoTF32 no_tf32;
  manual_seed(32);
  const Tensor x = randn({4, 16, 12, 12}).contiguous(MemoryFormat::ChannelsLast).to(kCuda);
  const Tensor w = randn({32, 16, 3, 3}).to(kCuda);
  const Tensor gy = randn({4, 32, 12, 12}).contiguous(MemoryFormat::ChannelsLast).to(kCuda);
  REQUIRE(exactly_channels_last(x));  // the move kept the layout

  Tensor xs = x.detach().set_requires_grad(true), ws = w.detach().set_requires_grad(true);
  reset_layout_copy_count();
  Tensor ys = conv2d(xs, ws, Tensor(), {1, 1}, {1, 1});
  ys.backward(gy);
  INFO(copies_str());
  CHECK(layout_copy_count() == 3);  // the weight forward and backward, and its gradient back to NCHW
  CHECK(ws.grad().is_contiguous());

  Tensor xf = x.detach().set_requires_grad(true);
  Tensor wf = w.contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
  reset_layout_copy_count();
  Tensor yf = conv2d(xf, wf, Tensor(), {1, 1}, {1, 1});
  yf.backward(gy);
  CHECK(layout_copy_count() == 0);
  CHECK(exactly_channels_last(yf));
  CHECK(exactly_channels_last(wf.grad()));
  CHECK(exactly_channels_last(xf.grad()));
  CHECK(worst_ratio(yf, ys, 1e-5, 1e-4) <= 1.0);
  CHECK(worst_ratio(wf.grad(), ws.grad(), 1e-4, 1e-4) <= 1.0);
  CHECK(worst_ratio(xf.grad(), xs.grad(), 1e-5, 1e-4) <= 1.0);
}
