// The CUDA twin's float attention kernels (kernels/cuda/attention_scalar.cuh: the path of float32,
// and of the shapes the tensor-core kernels do not take), their real source, run on the CPU
// through the emulator of CUDA's threads (kernels/simt/simt.h) and compared with the CPU kernels in
// float64: the output, the log-sum-exp, dq, dk and dv, for float32, float16 and bfloat16, odd head
// dims and Ev != E, bool and additive masks, causal, dropout, strided heads, and a row count that
// makes the grid-stride loop take several block-rows per block. Each case runs under both schedules,
// which must give the same bits (tests/kernels/attention_simt.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kiln.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_scalar.cuh"
#include "kernels/simt/simt.h"
#include "tests/kernels/attention_simt.h"

using namespace kiln;
using namespace kiln::test;
namespace sc = kiln::attention_scalar;

namespace {

// The three kernels on the emulator, launched as kernels/cuda/attention.cu launches them, except
// that `max_blocks` can cap the grid lower than the GPU's cap, so that blocks loop over block-rows.
template <typename S> Results emulate(const Problem& pr, simt::Schedule schedule, unsigned max_blocks) {
  const Operands in = operands(pr, pr.args.dtype);
  const AttentionArgs& a = in.args;
  const sc::Params p = sc::make_params(a);
  const auto* qp = static_cast<const S*>(in.q);
  const auto* kp = static_cast<const S*>(in.k);
  const auto* vp = static_cast<const S*>(in.v);
  const auto* gp = static_cast<const S*>(in.dout);
  Outputs<S> o(a);
  const auto grid = [&](int64_t rows) {
    return simt::Dim3{std::min(sc::grid_for_rows(a.batch, rows), max_blocks), 1, 1};
  };
  simt::LaunchConfig cfg;
  cfg.block = simt::Dim3{sc::kThreads, 1, 1};
  cfg.schedule = schedule;
  cfg.grid = grid(a.L);
  cfg.dynamic_smem = sc::forward_smem(p);
  simt::launch(cfg, [&] { sc::attention_forward_kernel<S>(o.out.data(), o.lse.data(), qp, kp, vp, p); });
  cfg.dynamic_smem = sc::backward_q_smem(p);
  simt::launch(cfg, [&] {
    sc::attention_backward_q_kernel<S>(o.dq.data(), o.d_rows.data(), gp, o.out.data(), o.lse.data(), qp, kp, vp, p);
  });
  cfg.grid = grid(a.S);
  cfg.dynamic_smem = sc::backward_kv_smem(p);
  simt::launch(cfg, [&] {
    sc::attention_backward_kv_kernel<S>(o.dk.data(), o.dv.data(), gp, o.lse.data(), o.d_rows.data(), qp, kp, vp, p);
  });
  return o.results(a);
}

// Runs the problem on the emulator (check_emulated). The CUDA twin runs these kernels for float32,
// and for the 16-bit types where the tensor-core kernels are off (the default) or do not fit.
void check_problem(const Problem& pr, unsigned max_blocks = 1u << 20) {
  const DType t = pr.args.dtype;
  // Every product and sum is float32 arithmetic on the stored values; the 16-bit types round
  // their results once.
  const double tol = t == DType::BFloat16 ? 2e-2 : t == DType::Float16 ? 3e-3 : 2e-5;
  check_emulated(
      pr,
      [&](simt::Schedule schedule) {
        return with_float_storage(t, [&]<typename T>() { return emulate<T>(pr, schedule, max_blocks); });
      },
      tol);
}

Problem problem(DType dtype, int64_t E, int64_t Ev, int64_t L, int64_t S, bool causal, double dropout = 0.0) {
  Problem pr = dense_problem(dtype, E, 2, L, S, causal, 1.0 / std::sqrt(static_cast<double>(E)), dropout, Ev);
  pr.args.tensor_cores = false;
  return pr;
}

}  // namespace

TEST_CASE("attention's float kernels, emulated: three dtypes, odd head dims, tails, causal", "[simt][attention]") {
  const DType dtype = GENERATE(DType::Float32, DType::Float16, DType::BFloat16);
  const bool causal = GENERATE(false, true);
  const auto [E, Ev] = GENERATE(table<int64_t, int64_t>({{1, 1}, {20, 36}, {64, 64}}));
  const auto [L, S] = GENERATE(table<int64_t, int64_t>({{1, 1}, {9, 40}, {33, 70}}));
  check_problem(problem(dtype, E, Ev, L, S, causal));
}

TEST_CASE("attention's float kernels, emulated: bool and additive masks, broadcast over rows", "[simt][attention]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  const bool causal = GENERATE(false, true);
  const bool additive = GENERATE(false, true);
  const int64_t L = 19, S = 45;
  Problem pr = problem(dtype, 24, 24, L, S, causal);
  // One [L, S] mask for both batch entries (batch stride 0); rows 0 and 7 see no key at all.
  manual_seed(99);
  const Tensor u = rand({L, S});
  if (additive) {
    pr.mask = (u * 4.0 - 2.0).to(dtype);
  } else {
    pr.mask = gt(u, Scalar(0.3));
  }
  for (int64_t row : {int64_t{0}, int64_t{7}}) {
    Tensor r = pr.mask.select(0, row);
    if (additive) {
      r.fill_(-INFINITY);
    } else {
      r.fill_(false);
    }
  }
  pr.args.mask_row_stride = S;
  pr.args.mask_col_stride = 1;
  check_problem(pr);
}

// NaN scores (here from an additive mask) give NaN, as on the CPU: the tile max skips NaN, so a row
// whose visible scores are all NaN looked like a row that sees no key (zeros), and a tile of 32 NaN
// scores in a row with finite ones like a tile that hides every key (skipped: a finite row).
TEST_CASE("attention's float kernels, emulated: NaN scores give NaN, a whole tile of them too", "[simt][attention]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  const bool causal = GENERATE(false, true);
  const int64_t L = 19, S = 45;
  Problem pr = problem(dtype, 24, 24, L, S, causal);
  Tensor mask = zeros({L, S});
  mask.select(0, 0).fill_(-INFINITY);               // row 0: no visible key, a zero row
  mask.select(0, 3).fill_(NAN);                     // row 3: every score NaN
  mask.select(0, 9).narrow(0, 0, 32).fill_(NAN);    // row 9: the first tile NaN, the rest finite
  mask.select(0, 12).narrow(0, 32, 13).fill_(NAN);  // row 12: the last tile NaN (past causal's reach)
  pr.mask = mask.to(dtype);
  pr.args.mask_row_stride = S;
  pr.args.mask_col_stride = 1;
  check_problem(pr);
}

TEST_CASE("attention's float kernels, emulated: dropout draws the CPU's decisions", "[simt][attention]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  const bool causal = GENERATE(false, true);
  Problem pr = problem(dtype, 16, 24, 30, 50, causal, 0.3);
  pr.args.philox = PhiloxState{1234567, 96, nullptr};
  check_problem(pr);
}

// Head dims 20 and 280: Ev wider than the 256 threads of a block and than most rows the kernels
// stage, the shared-memory sizes of tests/cuda/test_attention_tc_cuda.cpp's odd-dims case.
TEST_CASE("attention's float kernels, emulated: E 20 with Ev 280", "[simt][attention]") {
  check_problem(problem(DType::Float32, 20, 280, 17, 41, GENERATE(false, true)));
}

// Two blocks for 2 x 33 query rows (9 block-rows): each block loops over several, and reuses its
// shared memory between them.
TEST_CASE("attention's float kernels, emulated: a grid smaller than the rows", "[simt][attention]") {
  check_problem(problem(DType::Float32, 20, 20, 33, 47, GENERATE(false, true)), 2);
}

TEST_CASE("attention's float kernels, emulated: strided heads of a fused projection", "[simt][attention]") {
  manual_seed(5);
  Problem pr = fused_projection_problem(DType::Float32, 2, 2, 21, 12, GENERATE(false, true), 0.3);
  pr.args.tensor_cores = false;
  check_problem(pr);
}
