// Channels-last models on the GPU: a converted ResNet's training step (forward, backward, AdamW)
// runs cuDNN in NHWC with no hidden layout copy (layout_copy_count()), keeps its activations and
// gradients channels-last, and matches the same step of the NCHW model on the CPU. TF32 is off for
// the comparison: it rounds convolution inputs to 10 mantissa bits, far above float32's rtol. The
// helpers and the slow weight path's check are those of the CPU test (tests/nn/channels_last_checks.h).
#include <catch2/catch.hpp>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "core/ops/layout_stats.h"
#include "kernels/conv.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"
#include "tests/nn/channels_last_checks.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::test;

namespace {

const Device kCuda = Device::cuda(0);

struct NoTF32 {
  cuda::MathSwitches saved = cuda::math_switches();
  NoTF32() {
    cuda::math_switches().allow_tf32_matmul = false;
    cuda::math_switches().allow_tf32_cudnn = false;
  }
  ~NoTF32() { cuda::math_switches() = saved; }
};

}  // namespace

TEST_CASE("cuda channels-last: a ResNet training step makes no layout copy and matches the CPU",
          "[cuda][channels_last]") {
  require_cuda();
  NoTF32 no_tf32;
  for (int64_t in_channels : {3, 1}) {
    INFO("in_channels " << in_channels);
    auto [cpu, gpu] = twin_resnets(small_resnet(in_channels, {16, 32, 64}), kCuda, /*seed=*/31);
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
  test::check_weight_copy_path(kCuda, randn({4, 16, 12, 12}), /*out_channels=*/32, /*slack=*/10.0);
}
