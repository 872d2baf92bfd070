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

// autocast's residual adds: a float32 stream plus a low-precision branch. add, sub and mul of
// float32/float16/bfloat16 operands with a float32 result take a vectorized kernel when both are
// dense (elementwise_binary.cu's mixed path). Each result is one float operation on exactly
// representable inputs, so it must equal the CPU's bits: vectors and tail ([4101] = 512 vectors of
// 8 and 5), unaligned views (one element in: the element-at-a-time loop), float16 with bfloat16
// (which promote to float32), and in place.
TEST_CASE("cuda: mixed float32 and low-precision operands give the CPU's bits, vectorized or not",
          "[cuda][elementwise]") {
  const Device gpu = Device::cuda(0);
  const DType low = GENERATE(DType::BFloat16, DType::Float16);
  const bool aligned = GENERATE(true, false);
  INFO(dtype_name(low) << (aligned ? "" : ", unaligned views"));
  manual_seed(11);
  const int64_t n = 4101;
  const DType other_low = low == DType::BFloat16 ? DType::Float16 : DType::BFloat16;
  const Tensor a32 = randn({n + 1}), b_low = randn({n + 1}).to(low), c_low = randn({n + 1}).to(other_low);
  // Views are taken on each device: a view moved to the GPU would arrive as a fresh, aligned copy.
  auto part = [&](const Tensor& t) { return aligned ? t.narrow(0, 0, n) : t.narrow(0, 1, n); };
  const std::vector<std::pair<Tensor, Tensor>> pairs = {{a32, b_low}, {b_low, a32}, {b_low, c_low}};
  for (const auto& [whole_x, whole_y] : pairs) {
    const Tensor x = part(whole_x), y = part(whole_y);
    const Tensor xg = part(whole_x.to(gpu)), yg = part(whole_y.to(gpu));
    INFO(dtype_name(x.dtype()) << " with " << dtype_name(y.dtype()));
    for (int op = 0; op < 3; ++op) {
      INFO("op " << op);
      auto apply = [op](const Tensor& p, const Tensor& q) {
        return op == 0 ? add(p, q) : op == 1 ? sub(p, q) : mul(p, q);
      };
      const Tensor want = apply(x, y), got = apply(xg, yg);
      CHECK(got.dtype() == DType::Float32);
      CHECK(bitwise_equal(got.to(Device::cpu()), want));
    }
  }
  // In place: a float32 tensor plus a low-precision one, as a residual stream.
  Tensor acc = a32.clone(), acc_g = a32.to(gpu);
  part(acc).add_(part(b_low));
  part(acc_g).add_(part(b_low.to(gpu)));
  CHECK(bitwise_equal(acc_g.to(Device::cpu()), acc));
}
