// The tensor-core flash attention (kernels/cuda/attention_tc.cu and attention_tc_backward.cu)
// against the CPU twin in float64, across many tiles: L and S from 1 to past 1024, none of them or
// some of them multiples of the 64-row blocks and the streamed tiles, head dims 64 and 128, causal
// and not, float16 and bfloat16, with and without dropout, keys and values broadcast over the heads.
// The output, dq, dk and dv are compared (the log-sum-exp is checked through the backward, which
// rebuilds the probabilities from it, and directly by the twin test in tests/kernels/test_twins.cpp).
// Each case also checks that the tensor-core kernels are the ones that ran. In builds for sm_90 on a
// device of compute capability 9.0, each case runs on Hopper's wgmma kernels as well.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <optional>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "kernels/attention.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using kiln::test::worst_ratio;

namespace {

struct SwitchesGuard {
  cuda::MathSwitches saved = cuda::math_switches();
  ~SwitchesGuard() { cuda::math_switches() = saved; }
};

struct Problem {
  Tensor q, k, v, dout;  // on the CPU, already rounded to the dtype under test
  bool causal = false;
  double dropout = 0.0;  // drawn from Generator(77) on either device
};

// out, dq, dk and dv of one attention call on `d` in dtype `t`.
std::vector<Tensor> run_attention(const Problem& pr, Device d, DType t) {
  Tensor qd = pr.q.to(t).to(d).set_requires_grad(true), kd = pr.k.to(t).to(d).set_requires_grad(true);
  Tensor vd = pr.v.to(t).to(d).set_requires_grad(true);
  std::optional<Generator> gen;
  if (pr.dropout > 0) gen = Generator(77, d);
  Tensor out = scaled_dot_product_attention(qd, kd, vd, Tensor(), pr.dropout, pr.causal, std::nullopt, gen);
  out.backward(pr.dout.to(t).to(d));
  return {out.detach(), qd.grad(), kd.grad(), vd.grad()};
}

// Runs the problem on tensor cores in `dtype` and on the CPU in float64, and compares out, dq, dk
// and dv with the dtype's relative tolerance and an absolute floor of floors[i] times it. The GPU runs
// it on mma.sync (with the two-kernel backward and with the fused one, dQ summed with atomic adds:
// held to the same tolerance) and, where this build and device have them, again on Hopper's wgmma,
// with the warp-specialized forward (with and without ping-pong, its producer on TMA and on cp.async,
// its tiles swizzled and by pieces) and with the one whose whole block loads (swizzled and by
// pieces), and with the fused backward (dQ added by tensor reductions, and by atomic adds), each
// time checking that the forward and backward kernels ran once and which ones they were (the problems
// here are dense: TMA wherever it is asked for).
// Returns the CPU's results.
std::vector<Tensor> check_against_cpu(const Problem& pr, DType dtype, const double (&floors)[4]) {
  const std::vector<Tensor> ref = run_attention(pr, Device::cpu(), DType::Float64);
  struct Kernels {
    const char* name;
    bool wgmma, producer, pingpong, tma, swizzle = true, fused_backward = false, dq_reduce = true;
  };
  std::vector<Kernels> kinds = {{"on mma.sync", false, true, true, true},
                                {"on mma.sync, the fused backward", false, true, true, true, true, true}};
  if (attention_wgmma_available()) {
    kinds.push_back({"on wgmma", true, true, true, true});
    kinds.push_back({"on wgmma, the warp-specialized forward without ping-pong", true, true, false, true});
    kinds.push_back({"on wgmma, the warp-specialized forward's producer on cp.async", true, true, true, false});
    kinds.push_back({"on wgmma, the forward without its producer warpgroup", true, false, true, true});
    kinds.push_back({"on wgmma, the tiles staged by pieces", true, true, true, true, false});
    kinds.push_back({"on wgmma, the tiles by pieces, the producer on cp.async", true, true, true, false, false});
    kinds.push_back({"on wgmma, the forward without its producer, the tiles by pieces", true, false, true, true,
                     false});
    kinds.push_back({"on wgmma, the fused backward", true, true, true, true, true, true});
    kinds.push_back({"on wgmma, the fused backward with atomic adds", true, true, true, true, true, true, false});
  }
  for (const Kernels& kind : kinds) {
    INFO(kind.name);
    const bool wgmma = kind.wgmma;
    cuda::math_switches().attention_wgmma = wgmma;
    cuda::math_switches().attention_wgmma_producer = kind.producer;
    cuda::math_switches().attention_wgmma_pingpong = kind.pingpong;
    cuda::math_switches().attention_wgmma_tma = kind.tma;
    cuda::math_switches().attention_wgmma_swizzle = kind.swizzle;
    cuda::math_switches().attention_fused_backward = kind.fused_backward;
    cuda::math_switches().attention_wgmma_dq_reduce = kind.dq_reduce;
    const int64_t before = attention_tc_launches(), before_backward = attention_tc_backward_launches();
    const int64_t before_fused = attention_fused_backward_launches();
    const int64_t before_reduce = attention_wgmma_dq_reduce_launches();
    const int64_t before_wgmma = attention_wgmma_launches(), before_tma = attention_wgmma_tma_launches();
    const int64_t before_wgmma_backward = attention_wgmma_backward_launches();
    const std::vector<Tensor> gpu = run_attention(pr, Device::cuda(), dtype);
    CHECK(attention_tc_launches() == before + 1);
    CHECK(attention_wgmma_launches() == before_wgmma + (wgmma ? 1 : 0));
    CHECK(attention_wgmma_tma_launches() == before_tma + (wgmma && kind.producer && kind.tma ? 1 : 0));
    CHECK(attention_tc_backward_launches() == before_backward + 1);
    CHECK(attention_wgmma_backward_launches() == before_wgmma_backward + (wgmma ? 1 : 0));
    CHECK(attention_fused_backward_launches() == before_fused + (kind.fused_backward ? 1 : 0));
    CHECK(attention_wgmma_dq_reduce_launches() == before_reduce + (wgmma && kind.fused_backward && kind.dq_reduce));
    // The probabilities (and in the backward dS) enter their products rounded to the dtype, as in
    // FlashAttention; the results are rounded once more. bfloat16 keeps 8 bits, float16 11.
    const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < gpu.size(); ++i) {
      INFO(names[i]);
      CHECK(gpu[i].sizes() == ref[i].sizes());
      CHECK(worst_ratio(gpu[i], ref[i], floors[i] * tol, tol) <= 1.0);
    }
  }
  return ref;
}

}  // namespace

TEST_CASE("attention on tensor cores: output and gradients match the CPU in float64 across many tiles",
          "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  const auto [L, S] = GENERATE(table<int64_t, int64_t>(
      {{1, 1}, {15, 17}, {16, 16}, {64, 64}, {65, 130}, {200, 77}, {77, 200}, {1030, 1030}}));
  INFO(dtype_name(dtype) << " E " << E << (causal ? " causal" : "") << " L " << L << " S " << S);
  manual_seed(static_cast<uint64_t>(L * 7919 + S * 31 + E));
  // Rounded to the dtype first: the CPU reference sees exactly the GPU's inputs.
  const Problem pr{randn({2, 3, L, E}).to(dtype), randn({2, 3, S, E}).to(dtype), randn({2, 3, S, E}).to(dtype),
                   randn({2, 3, L, E}).to(dtype), causal};
  // Gradients sum over L or S rows of rounded terms: a looser absolute floor.
  check_against_cpu(pr, dtype, {1, 4, 4, 4});
}

// q, k and v as views of one fused projection [B, L, 3 H E] (row stride 3 H E), split and viewed as
// the GPT's attention makes them, with q scaled by 8: sharp softmax rows, so the running maximum
// moves from tile to tile and the rescaling of the accumulators matters. The output is [B, L, H, E]
// in memory and goes back to [B, L, H E] as a view; dout arrives in that layout, and dq, dk and dv
// are written into one buffer laid out as the projection (core/ops/attention.cpp). With skew 2 the
// projection's rows are 2 elements longer and the views start 2 elements in: rows aligned to 4 bytes
// only, which the kernels copy to shared memory in 4-byte pieces instead of 16-byte ones.
TEST_CASE("attention on tensor cores: views of a fused qkv, sharp scores", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const bool causal = GENERATE(false, true);
  const int64_t skew = GENERATE(int64_t{0}, int64_t{2});
  INFO(dtype_name(dtype) << (causal ? " causal" : "") << " skew " << skew);
  const int64_t B = 2, H = 3, L = 200, E = 64;
  manual_seed(4242);
  Tensor qkv = randn({B, L, 3 * H * E + skew});
  qkv.narrow(2, skew, H * E).mul_(8.0);
  qkv = qkv.to(dtype);  // rounded first: the CPU reference sees exactly the GPU's inputs
  const Tensor dout = randn({B, L, H * E}).to(dtype);
  auto run = [&](Device d, DType t) {
    Tensor fused = qkv.to(t).to(d).set_requires_grad(true);
    TensorList parts = split(fused.narrow(2, skew, 3 * H * E), H * E, 2);
    for (Tensor& p : parts) p = p.view({B, L, H, E}).transpose(1, 2);
    Tensor out = scaled_dot_product_attention(parts[0], parts[1], parts[2], Tensor(), 0.0, causal);
    CHECK(out.transpose(1, 2).is_contiguous());
    out.transpose(1, 2).reshape({B, L, H * E}).backward(dout.to(t).to(d));
    return std::vector<Tensor>{out.detach(), fused.grad()};
  };
  const int64_t before = attention_tc_launches(), before_backward = attention_tc_backward_launches();
  const std::vector<Tensor> gpu = run(Device::cuda(), dtype);
  CHECK(attention_tc_launches() == before + 1);
  CHECK(attention_tc_backward_launches() == before_backward + 1);
  const std::vector<Tensor> ref = run(Device::cpu(), DType::Float64);
  const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  CHECK(worst_ratio(gpu[0], ref[0], tol, tol) <= 1.0);
  // The gradient of the fused tensor holds dq, dk and dv; dk = dS^T q grows with q's factor of 8.
  CHECK(worst_ratio(gpu[1], ref[1], 8 * 4 * tol, tol) <= 1.0);
}

// The backward again, on one forward: twice on tensor cores, which must give the same bits (two
// kernels, each output row one block's fixed-order sum), and once on the scalar kernel, which reads
// the same output and log-sum-exp; then fused, on mma.sync and on wgmma. The switches are read when
// the backward runs.
TEST_CASE("attention on tensor cores: the backward is deterministic and agrees with the scalar backward",
          "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  INFO(dtype_name(dtype) << " E " << E << (causal ? " causal" : ""));
  const int64_t L = 300, S = 333;
  manual_seed(static_cast<uint64_t>(E) + (causal ? 1 : 0));
  const TensorOptions opt(dtype, Device::cuda());
  const Tensor q = randn({2, 2, L, E}, opt), k = randn({2, 2, S, E}, opt), v = randn({2, 2, S, E}, opt);
  const Tensor dout = randn({2, 2, L, E}, opt);
  auto grads = [&](bool tensor_core_backward, bool wgmma = false) {
    Tensor qd = q.detach().set_requires_grad(true), kd = k.detach().set_requires_grad(true);
    Tensor vd = v.detach().set_requires_grad(true);
    cuda::math_switches().attention_tensor_cores = true;
    cuda::math_switches().attention_wgmma = false;
    Tensor out = scaled_dot_product_attention(qd, kd, vd, Tensor(), 0.0, causal);
    cuda::math_switches().attention_tensor_cores = tensor_core_backward;
    cuda::math_switches().attention_wgmma = wgmma;
    out.backward(dout);
    return std::vector<Tensor>{qd.grad(), kd.grad(), vd.grad()};
  };
  const int64_t before = attention_tc_backward_launches();
  const std::vector<Tensor> first = grads(true), second = grads(true);
  CHECK(attention_tc_backward_launches() == before + 2);
  const std::vector<Tensor> scalar = grads(false);
  CHECK(attention_tc_backward_launches() == before + 2);
  const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < first.size(); ++i) {
    INFO(names[i]);
    CHECK(first[i].to_vector_double() == second[i].to_vector_double());
    CHECK(worst_ratio(first[i], scalar[i], 4 * tol, tol) <= 1.0);
  }
  // The fused backward (the switch is read when the backward runs): dK and dV the same bits as the two
  // kernels' (the same products in the same order), dQ summed over the blocks of keys with atomic
  // adds: near, not necessarily the same bits.
  const auto check_fused = [&](const std::vector<Tensor>& fused, const std::vector<Tensor>& two_kernels) {
    CHECK(worst_ratio(fused[0], scalar[0], 4 * tol, tol) <= 1.0);
    CHECK(fused[1].to_vector_double() == two_kernels[1].to_vector_double());
    CHECK(fused[2].to_vector_double() == two_kernels[2].to_vector_double());
  };
  {
    INFO("on mma.sync, the fused backward");
    cuda::math_switches().attention_fused_backward = true;
    const int64_t before_fused = attention_fused_backward_launches();
    check_fused(grads(true), first);
    CHECK(attention_fused_backward_launches() == before_fused + 1);
    cuda::math_switches().attention_fused_backward = false;
  }
  // On Hopper's wgmma, after the same mma.sync forward: deterministic too, and near the others.
  if (attention_wgmma_available()) {
    const int64_t before_wgmma = attention_wgmma_backward_launches();
    const std::vector<Tensor> wg1 = grads(true, true), wg2 = grads(true, true);
    CHECK(attention_wgmma_backward_launches() == before_wgmma + 2);
    for (size_t i = 0; i < first.size(); ++i) {
      INFO(names[i] << " on wgmma");
      CHECK(wg1[i].to_vector_double() == wg2[i].to_vector_double());
      CHECK(worst_ratio(wg1[i], scalar[i], 4 * tol, tol) <= 1.0);
    }
    cuda::math_switches().attention_fused_backward = true;
    for (const bool reduce : {true, false}) {
      INFO("on wgmma, the fused backward, dQ added by " << (reduce ? "tensor reductions" : "atomic adds"));
      cuda::math_switches().attention_wgmma_dq_reduce = reduce;
      const int64_t before_fused = attention_fused_backward_launches();
      const int64_t before_reduce = attention_wgmma_dq_reduce_launches();
      check_fused(grads(true, true), wg1);
      CHECK(attention_fused_backward_launches() == before_fused + 1);
      CHECK(attention_wgmma_dq_reduce_launches() == before_reduce + (reduce ? 1 : 0));
    }
  }
}

// The order of causal blocks changes nothing but the order (block_work): over 5 batch entries, in
// blockIdx.x's order, each entry's blocks together, sections of 2 (three, the last padded with blocks
// that exit) and one section, the forward and backward give the same bits, on mma.sync and on wgmma.
TEST_CASE("attention on tensor cores: every order of causal blocks gives the same bits", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  INFO("E " << E);
  manual_seed(static_cast<uint64_t>(E) + 5);
  const DType dtype = DType::BFloat16;
  const Problem pr{randn({5, 1, 300, E}).to(dtype), randn({5, 1, 300, E}).to(dtype), randn({5, 1, 300, E}).to(dtype),
                   randn({5, 1, 300, E}).to(dtype), true};
  for (const bool wgmma : {false, true}) {
    if (wgmma && !attention_wgmma_available()) continue;
    INFO((wgmma ? "on wgmma" : "on mma.sync"));
    cuda::math_switches().attention_wgmma = wgmma;
    cuda::math_switches().attention_longest_first = true;
    cuda::math_switches().attention_order_section = 0;  // from the L2: here one section
    const std::vector<Tensor> one = run_attention(pr, Device::cuda(), dtype);
    for (const int64_t section : {int64_t{-1}, int64_t{1}, int64_t{2}}) {
      INFO((section < 0 ? std::string("in order") : "sections of " + std::to_string(section)));
      cuda::math_switches().attention_longest_first = section > 0;
      cuda::math_switches().attention_order_section = section > 0 ? section : 0;
      const std::vector<Tensor> other = run_attention(pr, Device::cuda(), dtype);
      for (size_t i = 0; i < one.size(); ++i) CHECK(other[i].to_vector_double() == one[i].to_vector_double());
    }
  }
}

// Dropout on tensor cores: the keep decisions are attention_keep's, drawn from the same Philox
// (seed, offset) on both devices, so the CPU in float64 with a generator of the same seed drops
// exactly the same probabilities; the forward's output and all three gradients must follow it.
// The backward redraws the forward's decisions from the same state.
TEST_CASE("attention on tensor cores: dropout drops what the CPU drops", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  // More queries than keys and fewer (causal with L < S: the last keys are visible to no row but
  // the last ones).
  const auto [L, S] = GENERATE(table<int64_t, int64_t>({{130, 77}, {77, 200}}));
  INFO(dtype_name(dtype) << " E " << E << (causal ? " causal" : "") << " L " << L << " S " << S);
  manual_seed(static_cast<uint64_t>(E) * 3 + (causal ? 1 : 0) + static_cast<uint64_t>(S));
  const Problem pr{randn({2, 3, L, E}).to(dtype), randn({2, 3, S, E}).to(dtype), randn({2, 3, S, E}).to(dtype),
                   randn({2, 3, L, E}).to(dtype), causal, 0.25};
  // Kept probabilities are scaled by 4/3 before they are rounded: the same relative error.
  const std::vector<Tensor> ref = check_against_cpu(pr, dtype, {1, 4, 4, 4});
  // A dropped probability is a whole term missing: without dropout the output differs by far more.
  const Tensor plain = scaled_dot_product_attention(pr.q.to(Device::cuda()), pr.k.to(Device::cuda()),
                                                    pr.v.to(Device::cuda()), Tensor(), 0.0, causal);
  const double tol = dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  CHECK(worst_ratio(plain, ref[0], tol, tol) > 1.0);
}

// k and v shared by the heads ([B, 1, S, E] against q's [B, H, L, E]): the kernels read them with a
// batch stride of 0 over the heads, and their gradients [B, H, S, E] are summed back over the heads.
TEST_CASE("attention on tensor cores: keys and values broadcast over the heads", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const bool causal = GENERATE(false, true);
  INFO(dtype_name(dtype) << (causal ? " causal" : ""));
  const int64_t L = 150, S = 90, E = 64;
  manual_seed(causal ? 515 : 514);
  const Problem pr{randn({2, 4, L, E}).to(dtype), randn({2, 1, S, E}).to(dtype), randn({2, 1, S, E}).to(dtype),
                   randn({2, 4, L, E}).to(dtype), causal};
  // dk and dv add four heads' gradients: twice the gradients' floor.
  const std::vector<Tensor> ref = check_against_cpu(pr, dtype, {1, 4, 8, 8});
  CHECK(ref[2].sizes() == Shape{2, 1, S, E});
}

// The wgmma kernels run exactly where they can: in builds for sm_90 (KILN_WITH_SM90A) on a device of
// compute capability 9.0. Elsewhere the switch leaves the mma.sync kernels running.
TEST_CASE("attention on tensor cores: the wgmma kernels are available on compute capability 9.0 only",
          "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  int device = 0, major = 0, minor = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess);
#if defined(KILN_WITH_SM90A)
  const bool expected = major == 9 && minor == 0;
#else
  const bool expected = false;
#endif
  CHECK(attention_wgmma_available() == expected);
  cuda::math_switches().attention_tensor_cores = true;
  cuda::math_switches().attention_wgmma = true;
  const TensorOptions bf16(DType::BFloat16, Device::cuda());
  const int64_t before = attention_tc_launches(), before_wgmma = attention_wgmma_launches();
  const int64_t before_backward = attention_tc_backward_launches();
  const int64_t before_wgmma_backward = attention_wgmma_backward_launches();
  Tensor q = randn({1, 2, 70, 64}, bf16).set_requires_grad(true);
  scaled_dot_product_attention(q, randn({1, 2, 70, 64}, bf16), randn({1, 2, 70, 64}, bf16)).sum().backward();
  CHECK(attention_tc_launches() == before + 1);
  CHECK(attention_wgmma_launches() == before_wgmma + (expected ? 1 : 0));
  CHECK(attention_tc_backward_launches() == before_backward + 1);
  CHECK(attention_wgmma_backward_launches() == before_wgmma_backward + (expected ? 1 : 0));
  cuda::math_switches().attention_tensor_cores = false;  // wgmma alone does not take the call
  scaled_dot_product_attention(randn({1, 2, 70, 64}, bf16), randn({1, 2, 70, 64}, bf16), randn({1, 2, 70, 64}, bf16));
  CHECK(attention_tc_launches() == before + 1);
  CHECK(attention_wgmma_launches() == before_wgmma + (expected ? 1 : 0));
}

TEST_CASE("attention on tensor cores: shapes it does not take run on the scalar kernel", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  SwitchesGuard guard;
  cuda::math_switches().attention_tensor_cores = true;
  const Device cuda = Device::cuda();
  const TensorOptions bf16(DType::BFloat16, cuda);
  const int64_t before = attention_tc_launches(), before_backward = attention_tc_backward_launches();
  scaled_dot_product_attention(randn({1, 2, 8, 32}, bf16), randn({1, 2, 8, 32}, bf16), randn({1, 2, 8, 32}, bf16));
  scaled_dot_product_attention(randn({1, 2, 8, 64}, TensorOptions(DType::Float32, cuda)),
                               randn({1, 2, 8, 64}, TensorOptions(DType::Float32, cuda)),
                               randn({1, 2, 8, 64}, TensorOptions(DType::Float32, cuda)));
  scaled_dot_product_attention(randn({1, 2, 8, 64}, bf16), randn({1, 2, 8, 64}, bf16), randn({1, 2, 8, 64}, bf16),
                               ones({8, 8}, TensorOptions(DType::Bool, cuda)));
  Tensor q32 = randn({1, 2, 8, 32}, bf16).set_requires_grad(true);
  scaled_dot_product_attention(q32, q32, q32).sum().backward();
  cuda::synchronize();
  CHECK(attention_tc_launches() == before);  // head dim 32, float32, a mask: none of them fits
  CHECK(attention_tc_backward_launches() == before_backward);
  cuda::math_switches().attention_tensor_cores = false;
  scaled_dot_product_attention(randn({1, 2, 8, 64}, bf16), randn({1, 2, 8, 64}, bf16), randn({1, 2, 8, 64}, bf16));
  CHECK(attention_tc_launches() == before);  // switched off
}

// The scalar forward at E = 20, Ev = 280 in float32 asks for 49,104 bytes of dynamic shared memory,
// just under the 48 KB that needs no opt-in, and the kernel has a few dozen bytes of its own
// (static): together they pass 48 KB, so the launch needs the opt-in, which allow_dynamic_smem now
// decides on the sum.
TEST_CASE("attention: dynamic plus static shared memory past 48 KB still launches", "[cuda][attention]") {
  REQUIRE(cuda::is_available());
  manual_seed(97);
  const Tensor q = randn({2, 9, 20}), k = randn({2, 13, 20}), v = randn({2, 13, 280}), dout = randn({2, 9, 280});
  auto run = [&](Device d) {
    Tensor qd = q.to(d).set_requires_grad(true), kd = k.to(d).set_requires_grad(true);
    Tensor vd = v.to(d).set_requires_grad(true);
    Tensor out = scaled_dot_product_attention(qd, kd, vd);
    out.backward(dout.to(d));
    return std::vector<Tensor>{out.detach().to(Device::cpu()), qd.grad().to(Device::cpu()),
                               kd.grad().to(Device::cpu()), vd.grad().to(Device::cpu())};
  };
  const std::vector<Tensor> gpu = run(Device::cuda()), cpu = run(Device::cpu());
  for (size_t i = 0; i < gpu.size(); ++i) CHECK(worst_ratio(gpu[i], cpu[i], 1e-4, 1e-4) <= 1.0);
}
