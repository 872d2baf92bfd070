// The volume layers and the packed recurrent layers on the GPU against the same modules on the
// CPU, in float32: a 3-d CNN (Conv3d, MaxPool3d, ConvTranspose3d, AvgPool3d, AdaptiveMaxPool3d)
// forward and its parameters' gradients, and a bidirectional two-layer LSTM with projections over
// an unsorted packed batch (output, h_n, c_n, gradients). The CPU modules have exact tests of
// their own (tests/core/test_volume.cpp, tests/nn/test_layers_1d.cpp, tests/nn/test_rnn.cpp); the
// op table's CUDA parity runner covers the volume ops row by row. This checks the compositions
// agree.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/rnn.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;

namespace {

double max_diff(const Tensor& gpu, const Tensor& cpu) {
  return max(abs(gpu.to(Device::cpu()).to(DType::Float64) - cpu.to(DType::Float64))).item<double>();
}

std::shared_ptr<nn::Sequential> volume_net() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Conv3d>(2, 4, Triple{3, 3, 3}, Triple{1, 1, 1}, Triple{1, 1, 1}),
      std::make_shared<nn::MaxPool3d>(2), std::make_shared<nn::ConvTranspose3d>(4, 3, Triple{2, 2, 2}, Triple{2, 2, 2}),
      std::make_shared<nn::AvgPool3d>(Triple{3, 3, 3}, Triple{1, 1, 1}, Triple{1, 1, 1}),
      std::make_shared<nn::AdaptiveMaxPool3d>(Triple{2, 3, 2})});
}

}  // namespace

TEST_CASE("cuda 3-d CNN layers equal the CPU's, forward and parameter gradients", "[cuda][volume]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(7);
  auto cpu = volume_net(), dev = volume_net();
  dev->load_state_dict(cpu->state_dict());
  dev->to(gpu);
  const Tensor x = randn({2, 2, 6, 8, 7});
  const Tensor yc = cpu->forward(x), yg = dev->forward(x.to(gpu));
  REQUIRE(yg.sizes() == yc.sizes());
  CHECK(max_diff(yg, yc) < 1e-4);
  sum(mul(yc, yc)).backward();
  sum(mul(yg, yg)).backward();
  const auto pc = cpu->named_parameters(), pg = dev->named_parameters();
  REQUIRE(pc.size() == pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(max_diff(pg[i].second.grad(), pc[i].second.grad()) < 1e-3);
  }
}

TEST_CASE("cuda LSTM with proj_size over an unsorted packed batch equals the CPU's", "[cuda][rnn]") {
  test::require_cuda();
  const Device gpu = Device::cuda(0);
  manual_seed(8);
  nn::LSTM cpu(3, 5, 2, true, false, 0.0, true, 2), dev(3, 5, 2, true, false, 0.0, true, 2);  // proj_size 2
  dev.load_state_dict(cpu.state_dict());
  dev.to(gpu);
  TensorList seqs, seqs_gpu;
  for (const int64_t len : {3, 6, 1, 4}) {
    seqs.push_back(randn({len, 3}));
    seqs_gpu.push_back(seqs.back().to(gpu));
  }
  const Tensor h0 = randn({4, 4, 2}), c0 = randn({4, 4, 5});
  const nn::RNNPackedOutput oc = cpu.forward(nn::pack_sequence(seqs, false), h0, c0);
  const nn::RNNPackedOutput og = dev.forward(nn::pack_sequence(seqs_gpu, false), h0.to(gpu), c0.to(gpu));
  CHECK(og.output.batch_sizes == oc.output.batch_sizes);
  CHECK(max_diff(og.output.data, oc.output.data) < 1e-5);
  CHECK(max_diff(og.h_n, oc.h_n) < 1e-5);
  CHECK(max_diff(og.c_n, oc.c_n) < 1e-5);
  sum(mul(oc.output.data, oc.output.data)).backward();
  sum(mul(og.output.data, og.output.data)).backward();
  const auto pc = cpu.named_parameters(), pg = dev.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(max_diff(pg[i].second.grad(), pc[i].second.grad()) < 1e-4);
  }
}
