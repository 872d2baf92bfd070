// Autocast on the GPU: the policy table's rows (tests/core/autocast_rows.h) under float16 and
// bfloat16 autocast give their dtype and exactly the values of the same op on explicitly cast
// inputs; CPU tensors are left alone by a CUDA guard; a GPT step under bfloat16 autocast gives
// float32 gradients that agree with the CPU's within bfloat16's tolerance.
#include <catch2/catch.hpp>

#include <set>

#include "core/kiln.h"
#include "nn/transformer.h"
#include "tests/bitwise.h"
#include "tests/core/autocast_rows.h"

using namespace kiln;
using kiln::test::bitwise_equal;

TEST_CASE("cuda autocast: every op of the policy table gives its dtype and the explicitly cast values",
          "[cuda][autocast]") {
  const Device gpu = Device::cuda(0);
  for (DType lp : {DType::Float16, DType::BFloat16}) {
    for (const auto& row : test::autocast_rows()) {
      INFO(row.op << " under " << dtype_name(lp));
      manual_seed(7);
      const TensorList in = row.inputs(gpu, lp);
      Tensor got;
      {
        AutocastGuard guard(DeviceType::CUDA, lp);
        got = row.call(in);
      }
      CHECK(got.device() == gpu);
      CHECK(got.dtype() == row.out_dtype(lp));
      const Tensor expected = row.call(test::cast_floating(in, row.out_dtype(lp)));
      CHECK(bitwise_equal(got.detach().to(Device::cpu()), expected.to(Device::cpu())));
    }
  }
}

TEST_CASE("cuda autocast: cross_entropy reads low-precision logits as they are, with the float32 path's bits",
          "[cuda][autocast]") {
  CHECK(test::cross_entropy_float32_result_mismatches(Device::cuda(0)) == "");
}

TEST_CASE("cuda autocast: the guard of one device type leaves the other's tensors alone", "[cuda][autocast]") {
  Tensor a = randn({4, 4}), b = randn({4, 4});
  AutocastGuard guard(DeviceType::CUDA, DType::Float16);
  CHECK(matmul(a, b).dtype() == DType::Float32);
  CHECK(matmul(a.to(Device::cuda(0)), b.to(Device::cuda(0))).dtype() == DType::Float16);
}

TEST_CASE("cuda autocast: a GPT step under bfloat16 gives float32 gradients close to the CPU's", "[cuda][autocast]") {
  nn::GPTConfig cfg;
  cfg.vocab_size = 13;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  manual_seed(3);
  nn::GPT cpu_model(cfg), gpu_model(cfg);
  gpu_model.load_state_dict(cpu_model.state_dict());
  gpu_model.to(Device::cuda(0));
  Tensor idx = randint(0, cfg.vocab_size, {2, 16}, TensorOptions(DType::Int64));
  Tensor tgt = randint(0, cfg.vocab_size, {2, 16}, TensorOptions(DType::Int64));
  Tensor cpu_loss, gpu_loss;
  {
    AutocastGuard g1(DeviceType::CPU, DType::BFloat16);
    AutocastGuard g2(DeviceType::CUDA, DType::BFloat16);
    cpu_loss = cpu_model.loss(idx, tgt);
    gpu_loss = gpu_model.loss(idx.to(Device::cuda(0)), tgt.to(Device::cuda(0)));
  }
  cpu_loss.backward();
  gpu_loss.backward();
  CHECK(gpu_loss.dtype() == DType::Float32);
  CHECK(std::abs(cpu_loss.item<double>() - gpu_loss.item<double>()) < 2e-2);
  const auto cp = cpu_model.named_parameters(), gp = gpu_model.named_parameters();
  REQUIRE(cp.size() == gp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    INFO(cp[i].first);
    REQUIRE(gp[i].second.grad().defined());
    CHECK(gp[i].second.grad().dtype() == DType::Float32);
    const Tensor diff = (gp[i].second.grad().to(Device::cpu()) - cp[i].second.grad()).abs();
    const double scale = max(cp[i].second.grad().abs()).item<double>() + 1e-3;
    CHECK(max(diff).item<double>() < 5e-2 * scale);
  }
}
