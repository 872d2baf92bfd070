// The tensor-core flash-attention kernels (kernels/cuda/attention_tc_forward.cuh and
// attention_tc_backward.cuh on mma.sync, attention_wgmma_forward.cuh and attention_wgmma_backward.cuh
// on Hopper's wgmma), their real source, run on the CPU through the emulator of CUDA's threads
// (kernels/simt/simt.h) and compared with the CPU kernels in float64: the output, the log-sum-exp, dq,
// dk and dv, across query and key counts that leave tails in every tile, head dims 64 and 128, causal
// and not, float16 and bfloat16, with and without dropout. Every case runs on each instruction, with
// the two-kernel backward and with the fused one.
//
// Each case runs under both of the emulator's schedules (one warp runs ahead of the others from the
// lowest or from the highest): a missing __syncthreads would let a warp overwrite a shared tile
// that another still reads, and the two runs would differ. They must agree bit for bit, but for the
// fused backward's dq, summed by atomic adds in the blocks' order, which the schedules reverse. Outputs sit
// between guard bands and start as NaN, so a write out of bounds or an element never written
// fails. What this cannot check is the fragment maps against the hardware, and speed: the GPU tests
// (tests/cuda/test_attention_tc_cuda.cpp, test_tile_cuda.cpp) do that.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/kiln.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/cuda/attention_wgmma_backward.cuh"
#include "kernels/cuda/attention_wgmma_forward.cuh"
#include "kernels/half.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/attention_simt.h"

using namespace kiln;
using namespace kiln::attention_tc;
using namespace kiln::test;

namespace {

// Which kernels run: the forward and backward on mma.sync, or on Hopper's wgmma, with the warp-
// specialized forward (its consumer warpgroups taking turns, or with kWgmmaNoPingPong not; its
// producer loading with tensor copies where the operands allow, or with kWgmmaCpAsync always with
// cp.async) or with the one whose whole block loads (kWgmmaSync). The wgmma forwards stage their
// tiles swizzled, but for kWgmmaPieces and kWgmmaSyncPieces (kWgmma and kWgmmaSync by pieces).
enum class Forward { kMmaSync, kWgmma, kWgmmaNoPingPong, kWgmmaCpAsync, kWgmmaSync, kWgmmaPieces, kWgmmaSyncPieces };
const char* forward_name(Forward which) {
  switch (which) {
    case Forward::kMmaSync: return "on mma.sync";
    case Forward::kWgmma: return "on wgmma";
    case Forward::kWgmmaNoPingPong: return "on wgmma, the warp-specialized forward without ping-pong";
    case Forward::kWgmmaCpAsync: return "on wgmma, the warp-specialized forward's producer on cp.async";
    case Forward::kWgmmaSync: return "on wgmma, the forward without its producer warpgroup";
    case Forward::kWgmmaPieces: return "on wgmma, the tiles staged by pieces";
    case Forward::kWgmmaSyncPieces: return "on wgmma, the forward without its producer, the tiles by pieces";
  }
  return "?";
}

// The three kernels on the emulator, launched as kernels/cuda/attention_tc.cu and
// attention_tc_backward.cu (or attention_wgmma.cu) launch them: the backward reads the emulated
// forward's output and log-sum-exp, and the dk/dv kernel the D rows the dq kernel wrote.
// The results, and the tensor-core instructions each kernel issued, per warp: emulated mma.sync
// (mma_*) and wgmma (wgmma_*, each of the warpgroup's 4 warps counting an instruction).
struct Emulated {
  Results results;
  int64_t mma_forward = 0, mma_dq = 0, mma_dkv = 0, wgmma_forward = 0, wgmma_dq = 0, wgmma_dkv = 0;
  int64_t copies = 0, copy_bytes = 0;  // asynchronous copies to shared memory, all three kernels
  int64_t bulk_copies = 0, bulk_bytes = 0;  // the forward's tensor copies
  int64_t turns = 0;                        // the forward's completed named-barrier phases (ping-pong)
  int64_t reductions = 0, reduction_bytes = 0;  // the fused wgmma backward's tensor reductions of dQ
};

constexpr const char* kMmaFile = "kernels/cuda/tile.cuh";
constexpr const char* kWgmmaFile = "kernels/cuda/wgmma.cuh";

// The wgmma forward's kernels with the tiles staged in kOrder, on the emulator.
template <typename T, int D, bool kDropout, wgmma::Order kOrder>
simt::LaunchStats launch_wgmma_forward(simt::LaunchConfig cfg, bool producer, Outputs<T>& o, const Operands& in,
                                       const TcParams& p, const WgmmaForwardMaps& maps) {
  const auto* qp = static_cast<const T*>(in.q);
  const auto* kp = static_cast<const T*>(in.k);
  const auto* vp = static_cast<const T*>(in.v);
  cfg.dynamic_smem = smem_bytes<WgmmaForwardSmem<T, D, kOrder>>();
  return simt::launch(cfg, [&] {
    if (producer) {
      attention_forward_wgmma_kernel<T, D, kDropout, kOrder>(o.out_data(), o.lse.data(), qp, kp, vp, p, maps);
    } else {
      attention_forward_wgmma_sync_kernel<T, D, kDropout, kOrder>(o.out_data(), o.lse.data(), qp, kp, vp, p);
    }
  });
}

// The forward `which`, then (with `backward`) the backward's two kernels, or with
// AttentionArgs::fused_backward the fused backward's three (the row kernels and the fused one), on the
// forward's instruction.
template <typename T, int D, bool kDropout>
Emulated emulate(const Problem& pr, simt::Schedule schedule, Forward which, bool backward) {
  const AttentionArgs& a = pr.args;
  const Operands in = operands(pr, a.dtype);
  TcParams p = make_tc_params(a, in.q, in.k, in.v, in.dout);
  p.pingpong = which != Forward::kWgmmaNoPingPong;
  const bool pieces = which == Forward::kWgmmaPieces || which == Forward::kWgmmaSyncPieces;
  Outputs<T> o(a, pr.out_at);
  const WgmmaForwardMaps maps = make_forward_maps(p, D, in.q, in.k, in.v, o.out_data(),
                                                  pieces ? wgmma::Order::kPieces : wgmma::Order::kSwizzled,
                                                  which != Forward::kWgmmaCpAsync);
  const auto* qp = static_cast<const T*>(in.q);
  const auto* kp = static_cast<const T*>(in.k);
  const auto* vp = static_cast<const T*>(in.v);
  const auto* gp = static_cast<const T*>(in.dout);
  simt::LaunchConfig cfg;
  cfg.block = simt::Dim3{kBlockThreads, 1, 1};
  cfg.schedule = schedule;
  const auto grid = [&](int64_t rows, int64_t per_block) {  // as the .cu files launch (tc_grid)
    const TcGrid g = tc_grid(p, rows, per_block);
    return simt::Dim3{g.x, g.y, g.z};
  };
  cfg.grid = grid(a.L, kBlockRows);
  const bool wg = which != Forward::kMmaSync;
  simt::LaunchStats forward;
  int64_t forward_blocks = 0, forward_launched = 0;  // blocks with work, and all (tc_grid's last section)
  if (wg) {
    // Two consumer warpgroups per block, and a producer (or with kWgmmaSync none).
    const bool producer = which != Forward::kWgmmaSync && which != Forward::kWgmmaSyncPieces;
    simt::LaunchConfig wcfg = cfg;
    wcfg.block.x = static_cast<unsigned>(producer ? kWgmmaForwardThreads<D> : kWgmmaSyncForwardThreads<D>);
    wcfg.grid = grid(a.L, kWgmmaForwardRows<D>);
    forward = pieces ? launch_wgmma_forward<T, D, kDropout, wgmma::Order::kPieces>(wcfg, producer, o, in, p, maps)
                     : launch_wgmma_forward<T, D, kDropout, wgmma::Order::kSwizzled>(wcfg, producer, o, in, p, maps);
    forward_blocks = static_cast<int64_t>(row_blocks(a.L, kWgmmaForwardRows<D>)) * a.batch;
    forward_launched = static_cast<int64_t>(wcfg.grid.x) * wcfg.grid.y * wcfg.grid.z;
  } else {
    cfg.dynamic_smem = smem_bytes<ForwardSmem<T, D>>();
    forward = simt::launch(
        cfg, [&] { attention_forward_tc_kernel<T, D, kDropout>(o.out_data(), o.lse.data(), qp, kp, vp, p); });
    forward_blocks = static_cast<int64_t>(row_blocks(a.L)) * a.batch;
    forward_launched = static_cast<int64_t>(cfg.grid.x) * cfg.grid.y * cfg.grid.z;
  }
  simt::LaunchStats dq_stats, dkv_stats;
  if (backward && a.fused_backward) {
    // The fused backward (launch_fused_backward): D and the zeroed dQ accumulator per
    // query row, the kernel over blocks of keys, dQ from the accumulator. The accumulator is followed
    // by a band of signaling NaNs: an atomic add past its end, even of a zero (rows past L, whose dS
    // is 0), turns one quiet, which a guard band of Guarded's finite pattern would not show.
    constexpr uint32_t kSignalingNan = 0x7F800001u;
    constexpr size_t kBand = 64;
    const size_t acc_elems = static_cast<size_t>(a.batch * a.L * D);
    std::vector<float> dq_acc(acc_elems + kBand, std::nanf(""));
    std::fill(dq_acc.begin() + static_cast<std::ptrdiff_t>(acc_elems), dq_acc.end(),
              std::bit_cast<float>(kSignalingNan));
    simt::LaunchConfig rows_cfg;
    rows_cfg.block = simt::Dim3{kRowWarps * tile::kWarp, 1, 1};
    rows_cfg.grid = simt::Dim3{static_cast<unsigned>((a.batch * a.L + kRowWarps - 1) / kRowWarps), 1, 1};
    rows_cfg.schedule = schedule;
    simt::launch(rows_cfg, [&] {
      attention_backward_rows_kernel<T, D>(o.d_rows.data(), dq_acc.data(), gp, o.out_data(), p);
    });
    cfg.grid = grid(a.S, wg ? kFusedKeys<D> : kBlockRows);
    cfg.block.x = static_cast<unsigned>(wg ? kFusedThreads<D> : kBlockThreads);
    cfg.dynamic_smem = wg ? smem_bytes<WgmmaFusedSmem<T, D>>() : smem_bytes<FusedSmem<T, D>>();
    // On wgmma, dQ's shares added by tensor reductions unless the problem asks for atomics (the map is
    // made wherever the accumulator is aligned, as std::vector's storage is).
    const WgmmaDqReduce reduce = make_dq_reduce<D>(p, dq_acc.data(), a.wgmma_dq_reduce);
    CHECK(reduce.on == a.wgmma_dq_reduce);
    dkv_stats = simt::launch(cfg, [&] {
      if (wg) {
        attention_backward_fused_wgmma_kernel<T, D, kDropout>(o.dk.data(), o.dv.data(), dq_acc.data(), gp,
                                                              o.lse.data(), o.d_rows.data(), qp, kp, vp, p, reduce);
      } else {
        attention_backward_fused_tc_kernel<T, D, kDropout>(o.dk.data(), o.dv.data(), dq_acc.data(), gp, o.lse.data(),
                                                           o.d_rows.data(), qp, kp, vp, p);
      }
    });
    simt::launch(rows_cfg, [&] { attention_backward_dq_finish_kernel<T, D>(o.dq.data(), dq_acc.data(), p); });
    bool band_intact = true;
    for (size_t i = acc_elems; i < dq_acc.size(); ++i) {
      band_intact = band_intact && std::bit_cast<uint32_t>(dq_acc[i]) == kSignalingNan;
    }
    CHECK(band_intact);
  } else if (backward) {
    cfg.dynamic_smem = wg ? smem_bytes<WgmmaDqSmem<T, D>>() : smem_bytes<DqSmem<T, D>>();
    simt::LaunchConfig dq_cfg = cfg;  // the wgmma dq kernel's blocks: kWgmmaDqGroups warpgroups
    if (wg) {
      dq_cfg.block.x = static_cast<unsigned>(kWgmmaDqThreads<D>);
      dq_cfg.grid = grid(a.L, kWgmmaDqRows<D>);
    }
    dq_stats = simt::launch(dq_cfg, [&] {
      if (wg) {
        attention_backward_dq_wgmma_kernel<T, D, kDropout>(o.dq.data(), o.d_rows.data(), gp, o.out_data(),
                                                           o.lse.data(), qp, kp, vp, p);
      } else {
        attention_backward_dq_tc_kernel<T, D, kDropout>(o.dq.data(), o.d_rows.data(), gp, o.out_data(),
                                                        o.lse.data(), qp, kp, vp, p);
      }
    });
    cfg.grid = grid(a.S, kBlockRows);
    cfg.dynamic_smem = wg ? smem_bytes<WgmmaDkvSmem<T, D>>() : smem_bytes<DkvSmem<T, D>>();
    dkv_stats = simt::launch(cfg, [&] {
      if (wg) {
        attention_backward_dkv_wgmma_kernel<T, D, kDropout>(o.dk.data(), o.dv.data(), gp, o.lse.data(),
                                                            o.d_rows.data(), qp, kp, vp, p);
      } else {
        attention_backward_dkv_tc_kernel<T, D, kDropout>(o.dk.data(), o.dv.data(), gp, o.lse.data(),
                                                         o.d_rows.data(), qp, kp, vp, p);
      }
    });
  }
  CHECK(forward.blocks == forward_launched);
  CHECK(forward.warp_collectives > 0);
  // The wgmma forwards' epilogue: each consumer warpgroup syncs on its named barrier once, where the
  // output's rows are 16-byte aligned (here: every batch entry's alike); else they store from the
  // accumulators. The rest of the named-barrier phases are the ping-pong's turns.
  bool staged_out = reinterpret_cast<uintptr_t>(o.out_data()) % 16 == 0 && a.o_row_stride % 8 == 0;
  for (int d = 0; d < a.layout.ndim; ++d) staged_out = staged_out && a.layout.o[d] % 8 == 0;
  const int64_t epilogue_phases = wg && staged_out ? forward_blocks * kWgmmaForwardGroups : 0;
  const int64_t turns = forward.named_barrier_phases - epilogue_phases;
  if (which == Forward::kWgmma || which == Forward::kWgmmaNoPingPong || which == Forward::kWgmmaCpAsync ||
      which == Forward::kWgmmaPieces) {
    // Warp-specialized: one __syncthreads per block (after the init), turns only with ping-pong, and
    // tensor copies (and then no cp.async) where the operands' rows are 16-byte aligned.
    CHECK(forward.block_barriers == forward_blocks);
    CHECK(forward.mbarrier_phases > 0);
    CHECK((turns > 0) == (which != Forward::kWgmmaNoPingPong));
    const bool tma = which != Forward::kWgmmaCpAsync && p.wide;
    CHECK(maps.on == tma);
    CHECK((forward.bulk_copies > 0) == tma);
    CHECK((forward.async_copies > 0) == !tma);
    // The output by tensor stores, a box per warpgroup and 64 columns, where the tiles are swizzled
    // and its rows aligned.
    const bool store = which != Forward::kWgmmaCpAsync && !pieces && staged_out;
    CHECK(maps.store == store);
    CHECK(forward.bulk_stores == (store ? forward_blocks * kWgmmaForwardGroups * D / 64 : 0));
    CHECK(forward.bulk_store_bytes == forward.bulk_stores * 64 * 64 * 2);
  } else {
    CHECK(forward.mbarrier_phases == 0);
    CHECK(turns == 0);
    CHECK(forward.bulk_copies == 0);
    CHECK(forward.bulk_stores == 0);
  }
  Emulated e;
  e.results = backward ? o.results(a) : o.forward_results(a);
  CHECK(turns >= 0);
  e.turns = turns;
  e.bulk_copies = forward.bulk_copies;
  e.bulk_bytes = forward.bulk_copy_bytes;
  e.reductions = dkv_stats.bulk_reductions;
  e.reduction_bytes = dkv_stats.bulk_reduction_bytes;
  CHECK(forward.bulk_reductions + dq_stats.bulk_reductions == 0);
  CHECK((e.reductions > 0) == (wg && a.fused_backward && a.wgmma_dq_reduce && a.L > 0));
  e.mma_forward = forward.collectives_in(kMmaFile);
  e.wgmma_forward = forward.collectives_in(kWgmmaFile);
  e.wgmma_dq = dq_stats.collectives_in(kWgmmaFile);
  e.wgmma_dkv = dkv_stats.collectives_in(kWgmmaFile);
  e.mma_dq = dq_stats.collectives_in(kMmaFile);
  e.mma_dkv = dkv_stats.collectives_in(kMmaFile);
  const simt::LaunchStats* const launches[] = {&forward, &dq_stats, &dkv_stats};
  for (const simt::LaunchStats* st : launches) {
    e.copies += st->async_copies;
    e.copy_bytes += st->async_copy_bytes;
  }
  return e;
}

template <typename T, int D>
Emulated emulate_any(const Problem& pr, simt::Schedule schedule, Forward which, bool backward) {
  if (pr.args.dropout_p > 0) return emulate<T, D, true>(pr, schedule, which, backward);
  return emulate<T, D, false>(pr, schedule, which, backward);
}

Emulated emulate_problem(const Problem& pr, simt::Schedule schedule, Forward which, bool backward = true) {
  const bool bf16 = pr.args.dtype == DType::BFloat16;
  if (pr.args.E == 64) {
    return bf16 ? emulate_any<BFloat16, 64>(pr, schedule, which, backward)
                : emulate_any<Half, 64>(pr, schedule, which, backward);
  }
  return bf16 ? emulate_any<BFloat16, 128>(pr, schedule, which, backward)
              : emulate_any<Half, 128>(pr, schedule, which, backward);
}

constexpr Forward kEveryForward[] = {Forward::kMmaSync,      Forward::kWgmma,     Forward::kWgmmaNoPingPong,
                                     Forward::kWgmmaCpAsync, Forward::kWgmmaSync, Forward::kWgmmaPieces,
                                     Forward::kWgmmaSyncPieces};

// Runs the problem on the emulator (check_emulated) with each forward (the warp-specialized one
// without ping-pong, loading with cp.async, or either kernel with its tiles by pieces, only when asked
// for `every` forward: each computes what kWgmma or kWgmmaSync does, in another order, with other
// copies or in another layout), after checking that the CUDA twin would hand it to these kernels.
// The backward, the same kernels after each wgmma forward, runs after kMmaSync and kWgmma; the
// other forwards are checked by their output and log-sum-exp, which is all the backward reads.
void check_problem(const Problem& pr, bool every = false) {
  {
    const Operands in = operands(pr, pr.args.dtype);
    REQUIRE(attention_tc_backward_fits(in.args, in.q, in.k, in.v, in.dout));
  }
  // P and dS enter their products rounded to the dtype, and the results are rounded once more.
  const double tol = pr.args.dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  // check_emulated on `problem` with the forward `which`; returns the results under Schedule::Lowest.
  const auto checked = [tol](const Problem& problem, Forward which, bool backward) {
    Results lowest;
    check_emulated(
        problem,
        [&](simt::Schedule schedule) {
          Results r = emulate_problem(problem, schedule, which, backward).results;
          if (schedule == simt::Schedule::Lowest) lowest = r;
          return r;
        },
        tol);
    return lowest;
  };
  for (const Forward which : kEveryForward) {
    if (!every && which != Forward::kMmaSync && which != Forward::kWgmma && which != Forward::kWgmmaSync) continue;
    INFO(forward_name(which));
    const Results two_kernels = checked(pr, which, which == Forward::kMmaSync || which == Forward::kWgmma);
    if (which != Forward::kMmaSync && which != Forward::kWgmma) continue;
    // The fused backward: the same products for dK and dV, and dQ summed from the blocks of keys (on
    // wgmma by tensor reductions, and, with `every`, by atomic adds too).
    for (const bool reduce : {true, false}) {
      if (!reduce && (!every || which == Forward::kMmaSync)) continue;
      INFO("the fused backward" << (reduce ? "" : ", dQ added by atomics"));
      Problem fused = pr;
      fused.args.fused_backward = true;
      fused.args.wgmma_dq_reduce = reduce;
      const Results one_kernel = checked(fused, which, true);
      REQUIRE(one_kernel.size() == 5);
      REQUIRE(two_kernels.size() == 5);
      for (const size_t i : {0, 1, 3, 4}) CHECK(same_bits(one_kernel[i], two_kernels[i]));  // all but dq
    }
  }
}

}  // namespace

TEST_CASE("attention on tensor cores, emulated: every tile's tails, causal and not, both 16-bit types",
          "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  const auto [L, S] = GENERATE(table<int64_t, int64_t>({{1, 1}, {15, 17}, {64, 64}, {65, 130}, {77, 33}}));
  check_problem(dense_problem(dtype, E, 2, L, S, causal, 1.0 / std::sqrt(static_cast<double>(E)), 0.0));
}

TEST_CASE("attention on tensor cores, emulated: sharp scores move the running maximum between tiles",
          "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  check_problem(dense_problem(dtype, E, 1, 100, 140, causal, 1.0, 0.0));
}

// A query row of NaN makes each of its scores NaN. The running max skips NaN and stays -inf, as for a
// row that sees no key, but the row's sum is NaN: a NaN output, log-sum-exp and gradients, as on the
// CPU (the forward gave the row zeros).
TEST_CASE("attention on tensor cores, emulated: a row of NaN scores gives NaN, not a hidden row's zeros",
          "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const bool causal = GENERATE(false, true);
  Problem pr = dense_problem(dtype, 64, 2, 70, 90, causal, 0.125, 0.0);
  pr.q.select(0, 0).select(0, 5).fill_(NAN);
  check_problem(pr);
}

TEST_CASE("attention on tensor cores, emulated: dropout draws the CPU's decisions", "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  check_problem(dense_problem(dtype, E, 2, 70, 90, causal, 0.125, 0.25));
}

// Long enough that every pipeline refills each of its buffers: 6 key tiles of 64, so the wgmma
// forward's 3 V buffers take two tiles each, and with causal its first warpgroup stops a tile before
// the second in every block (and with ping-pong takes that tile's turn without products). The warp-
// specialized forward runs without ping-pong, and with its producer on cp.async, too, and both wgmma
// forwards with their tiles by pieces.
TEST_CASE("attention on tensor cores, emulated: a key stream that refills every buffer", "[simt][attention]") {
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  check_problem(dense_problem(DType::BFloat16, E, 1, 330, 330, causal, 1.0 / std::sqrt(static_cast<double>(E)), 0.0),
                true);
}

// The GPT's layout: q, k and v are views of one fused projection [B, T, 3 H E], heads split off
// without copies, so rows are 3 H E apart and batch entries run over (B, H) with strides of their
// own. And keys and values shared by every head of a batch entry (stride 0 over the heads).
TEST_CASE("attention on tensor cores, emulated: strided heads of a fused projection, and shared keys",
          "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  const int64_t B = 2, H = 2, T = 40;
  manual_seed(static_cast<uint64_t>(E) + (causal ? 1 : 0));
  SECTION("views of a fused projection") {
    check_problem(fused_projection_problem(dtype, B, H, T, E, causal, 1.0 / std::sqrt(static_cast<double>(E))));
  }
  SECTION("keys and values shared by the heads") {
    const int64_t S = 50;
    Problem pr;
    pr.args = tensor_core_args(dtype, B * H, T, S, E, causal, 1.0 / std::sqrt(static_cast<double>(E)));
    AttentionBatch& l = pr.args.layout;
    l.ndim = 2;
    l.sizes[0] = B;
    l.sizes[1] = H;
    l.q[0] = H * T * E;
    l.q[1] = T * E;
    l.k[0] = l.v[0] = S * E;
    l.k[1] = l.v[1] = 0;
    attention_dense_outputs(pr.args);
    pr.q = randn({B, H, T, E}).to(dtype);
    pr.k = randn({B, S, E}).to(dtype);
    pr.v = randn({B, S, E}).to(dtype);
    pr.dout = randn({B, H, T, E}).to(dtype);
    check_problem(pr);
  }
}

// The kernels copy their tiles to shared memory asynchronously (cp.async, kernels/cuda/async_copy.cuh),
// in 16-byte pieces where every operand's rows start on 16 bytes and in 4-byte ones where they do not
// (the emulator faults a misaligned copy): views of a projection whose rows are 2 elements longer and
// start 2 elements in. Either way each tile is copied once, rows past the end included (as zeros):
// per batch entry, the forward copies its blocks' Q rows and, per block, every key tile of K and V;
// the dq kernel Q and dO and the key tiles; the dk/dv kernel its keys' K and V and every query tile of
// Q and dO. Here L = S = 150, no causal, so the counts are whole tiles. The warp-specialized wgmma
// forward copies the same tiles with tensor copies where rows are aligned: per block of 64 columns
// (swizzled; by pieces a box covers all E columns) a box of the block's Q rows and one of K and of V
// per key tile.
TEST_CASE("attention on tensor cores, emulated: tiles copied once, in 16-byte pieces where rows are aligned",
          "[simt][attention]") {
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const int64_t skew = GENERATE(int64_t{0}, int64_t{2});
  const int64_t B = 1, H = 2, T = 150;
  INFO("E " << E << ", skew " << skew);
  manual_seed(static_cast<uint64_t>(E + skew));
  Problem pr =
      fused_projection_problem(DType::Float16, B, H, T, E, false, 1.0 / std::sqrt(static_cast<double>(E)), skew);
  pr.out_at = skew / 2;  // and the output off 16 bytes, where the wgmma forwards store from the accumulators
  check_problem(pr);

  const auto tiles = [](int64_t rows, int64_t per_tile) { return (rows + per_tile - 1) / per_tile; };
  const auto copied_rows = [&](int64_t block_rows, int64_t streamed_tile, int64_t block_operands) {
    // block_operands tiles of block_rows per block, and two streamed operands of T rows in tiles
    return tiles(T, block_rows) * (block_operands * block_rows + 2 * tiles(T, streamed_tile) * streamed_tile);
  };
  const bool e64 = E == 64;
  const int64_t mma_rows = copied_rows(kBlockRows, e64 ? kStreamTileFor<64> : kStreamTileFor<128>, 1) +
                           copied_rows(kBlockRows, e64 ? kStreamTileFor<64> : kStreamTileFor<128>, 2) +
                           copied_rows(kBlockRows, e64 ? kQueryTileFor<64> : kQueryTileFor<128>, 2);
  const int64_t wg_dq_rows = copied_rows(e64 ? kWgmmaDqRows<64> : kWgmmaDqRows<128>, kWgmmaKeyTile, 2);
  const int64_t wg_rows = copied_rows(e64 ? kWgmmaForwardRows<64> : kWgmmaForwardRows<128>, kWgmmaKeyTile, 1) +
                          wg_dq_rows +
                          copied_rows(kBlockRows, e64 ? kWgmmaQueryTileFor<64> : kWgmmaQueryTileFor<128>, 2);
  const int64_t piece = skew == 0 ? 16 : 4;
  const int64_t boxes = B * H * tiles(T, kWgmmaForwardGroups * 64) * (1 + 2 * tiles(T, kWgmmaKeyTile));
  for (const Forward which : {Forward::kMmaSync, Forward::kWgmma, Forward::kWgmmaCpAsync, Forward::kWgmmaSync,
                              Forward::kWgmmaPieces}) {
    INFO(forward_name(which));
    const Emulated e = emulate_problem(pr, simt::Schedule::Lowest, which);
    const int64_t rows = which == Forward::kMmaSync ? mma_rows : wg_rows;
    CHECK(e.copy_bytes + e.bulk_bytes == B * H * rows * E * 2);
    CHECK(e.copies * piece == e.copy_bytes);
    const int64_t boxes_per_tile = which == Forward::kWgmma ? E / 64 : which == Forward::kWgmmaPieces ? 1 : 0;
    CHECK(e.bulk_copies == (skew == 0 ? boxes * boxes_per_tile : 0));
  }
  // The fused backward copies none of the dq kernel's tiles: on mma.sync the dk/dv kernel's copies; on
  // wgmma per block of kFusedKeys keys (64, or 128 at E = 128) K and V once, and every query tile of Q
  // and dO.
  Problem fused = pr;
  fused.args.fused_backward = true;
  const Emulated mma_fused = emulate_problem(fused, simt::Schedule::Lowest, Forward::kMmaSync);
  const int64_t mma_dq_rows = copied_rows(kBlockRows, e64 ? kStreamTileFor<64> : kStreamTileFor<128>, 2);
  CHECK(mma_fused.copy_bytes == B * H * (mma_rows - mma_dq_rows) * E * 2);
  const Emulated f = emulate_problem(fused, simt::Schedule::Lowest, Forward::kWgmma);
  const int64_t query_tile = e64 ? kWgmmaQueryTileFor<64> : kWgmmaQueryTileFor<128>;
  const int64_t fused_rows = wg_rows - wg_dq_rows - copied_rows(kBlockRows, query_tile, 2) +
                             copied_rows(e64 ? kFusedKeys<64> : kFusedKeys<128>, query_tile, 2);
  CHECK(f.copy_bytes + f.bulk_bytes == B * H * fused_rows * E * 2);
}

// How much tensor-core work the kernels do, counted on the emulator (no timing involved). One mma
// is a 16 x 8 x 16 product, 2048 multiply-adds, and a product of [L, E] by [E, S] or [L, S] by
// [S, E] is L S E of them. At tile multiples the forward's two products (Q K^T, P V) are then
// L S E / 1024 mma, the dq kernel's three (S, dP, dQ) 3 L S E / 2048 and the dk/dv kernel's four
// (S^T, dP^T, dV, dK) L S E / 512: nothing is computed twice within a kernel, and no tile is padded.
// On wgmma (64 rows per warpgroup, instructions of 64 x N x 16), per warpgroup and streamed tile of T
// rows: the forward issues E / 16 instructions for Q K^T and T / 16 for P V (T = 64 keys; two
// warpgroups share each tile, and one whose rows all precede it skips it), the dq kernel (at head dim
// 64 its blocks alike) 2 E / 16 for S and dP and T / 16 for dQ (T = 64 keys), the dk/dv kernel
// 2 E / 16 and 2 T / 16 (T = 64 queries, 32 at E = 128), the fused kernel E / 16 more for dQ^T; each
// instruction is counted by the
// warpgroup's 4 warps, and none of these kernels issues mma.sync.
// With causal, a block skips the tiles wholly above the diagonal: at L = S = 256 and 64-row blocks,
// the blocks see 1, 2, 3 and 4 of the 4 tile columns, 10 of 16. The wgmma dk/dv kernel's key blocks
// see 4, 3, 2 and 1 query tiles of 64, 10 of 16, or at E = 128 8, 6, 4 and 2 tiles of 32, 20 of 32.
TEST_CASE("attention on tensor cores, emulated: the mma count is the products' size, and causal skips 6 of 16 tiles",
          "[simt][attention]") {
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const int64_t L = 256, S = 256;
  INFO("E " << E);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  const Problem full_problem = dense_problem(DType::BFloat16, E, 1, L, S, false, scale, 0.0);
  const Problem causal_problem = dense_problem(DType::BFloat16, E, 1, L, S, true, scale, 0.0);
  const Emulated full = emulate_problem(full_problem, simt::Schedule::Lowest, Forward::kMmaSync);
  const Emulated causal = emulate_problem(causal_problem, simt::Schedule::Lowest, Forward::kMmaSync);
  const int64_t work = L * S * E;
  CHECK(full.mma_forward == work / 1024);
  CHECK(full.mma_dq == 3 * work / 2048);
  CHECK(full.mma_dkv == work / 512);
  CHECK(causal.mma_forward * 16 == full.mma_forward * 10);
  CHECK(causal.mma_dq * 16 == full.mma_dq * 10);
  CHECK(causal.mma_dkv * 16 == full.mma_dkv * 10);
  CHECK(full.wgmma_forward + full.wgmma_dq + full.wgmma_dkv == 0);
  // The fused backward on mma.sync: no dq kernel, and the dk/dv kernel's four products and dQ^T =
  // K^T dS^T, L S E / 2048 more: five, not seven; with causal the same 10 of 16 tiles.
  for (const bool causal_fused : {false, true}) {
    INFO("the fused backward on mma.sync" << (causal_fused ? ", causal" : ""));
    Problem fused = causal_fused ? causal_problem : full_problem;
    fused.args.fused_backward = true;
    const Emulated f = emulate_problem(fused, simt::Schedule::Lowest, Forward::kMmaSync);
    CHECK(f.mma_dq == 0);
    CHECK(f.mma_dkv * 16 == 5 * work / 2048 * (causal_fused ? 10 : 16));
    CHECK(f.mma_forward == (causal_fused ? causal : full).mma_forward);
    CHECK(f.wgmma_forward + f.wgmma_dq + f.wgmma_dkv == 0);
  }

  const Emulated wg_full = emulate_problem(full_problem, simt::Schedule::Lowest, Forward::kWgmma);
  const Emulated wg_causal = emulate_problem(causal_problem, simt::Schedule::Lowest, Forward::kWgmma);
  CHECK(wg_full.mma_forward + wg_full.mma_dq + wg_full.mma_dkv == 0);
  const int64_t key_tiles = (L / 64) * (S / 64);       // 64-query blocks x 64-key tiles
  const int64_t query_tile = E == 128 ? 32 : 64;       // the dk/dv kernel's
  const int64_t query_tiles = (S / 64) * (L / query_tile);
  CHECK(wg_full.wgmma_forward == 4 * key_tiles * (E / 16 + 4));
  CHECK(wg_full.wgmma_dq == 4 * key_tiles * (2 * E / 16 + 4));
  CHECK(wg_full.wgmma_dkv == 4 * query_tiles * (2 * E / 16 + 2 * query_tile / 16));
  CHECK(wg_causal.wgmma_forward * 16 == wg_full.wgmma_forward * 10);
  CHECK(wg_causal.wgmma_dq * 16 == wg_full.wgmma_dq * 10);
  const int64_t dkv_causal_tiles = E == 128 ? 20 : 10;  // of query_tiles, 32 or 16
  CHECK(wg_causal.wgmma_dkv * query_tiles == wg_full.wgmma_dkv * dkv_causal_tiles);
  // The fused backward: no dq kernel, and per warpgroup and query tile the dk/dv kernel's products and
  // dQ^T = K^T dS^T, E / 16 instructions (at E = 64 one block of 64 rows over 64 keys; at 128 each of
  // a block's two warpgroups one block over the block's 128 keys): five products, not seven. With
  // causal, a block of 128 keys streams the query tiles from its first key on, for both warpgroups:
  // at L = S = 256, 8 and 4 tiles of 32, 24 warpgroup tiles where blocks of 64 keys take 20. Per block
  // and query tile, dQ's share goes out as a tensor reduction per 32 columns, [query tile, 32] floats.
  for (const bool causal : {false, true}) {
    INFO("the fused backward" << (causal ? ", causal" : ""));
    Problem fused = causal ? causal_problem : full_problem;
    fused.args.fused_backward = true;
    const Emulated f = emulate_problem(fused, simt::Schedule::Lowest, Forward::kWgmma);
    const int64_t per_tile = 2 * E / 16 + 2 * query_tile / 16 + E / 16;
    const int64_t fused_causal_tiles = E == 128 ? 24 : 10;
    CHECK(f.wgmma_dq == 0);
    CHECK(f.wgmma_dkv == 4 * (causal ? fused_causal_tiles : query_tiles) * per_tile);
    CHECK(f.wgmma_forward == (causal ? wg_causal : wg_full).wgmma_forward);
    const int64_t block_tiles = (causal ? fused_causal_tiles : query_tiles) / (E == 128 ? 2 : 1);
    CHECK(f.reductions == block_tiles * E / 32);
    CHECK(f.reduction_bytes == f.reductions * query_tile * 32 * 4);
  }
  // The forward whose whole block loads does the same products, and so does the warp-specialized one
  // without ping-pong.
  for (const Forward other : {Forward::kWgmmaSync, Forward::kWgmmaNoPingPong}) {
    INFO(forward_name(other));
    const Emulated other_full = emulate_problem(full_problem, simt::Schedule::Lowest, other, false);
    const Emulated other_causal = emulate_problem(causal_problem, simt::Schedule::Lowest, other, false);
    CHECK(other_full.wgmma_forward == wg_full.wgmma_forward);
    CHECK(other_causal.wgmma_forward == wg_causal.wgmma_forward);
    CHECK(other_full.turns + other_causal.turns == 0);
  }
  // With ping-pong each of a block's two consumer warpgroups takes one turn per key tile the block
  // streams, a named-barrier phase each: 2 blocks of 128 rows with 4 tiles each, or with causal 2 and
  // 4 (the first warpgroup of the second block takes its last turn without products).
  CHECK(wg_full.turns == 2 * (4 + 4));
  CHECK(wg_causal.turns == 2 * (2 + 4));
  // With causal, the kernels take their blocks longest first (block_work); in
  // blockIdx.x's order (AttentionArgs::longest_first false, the A/B) every result is the same, bit
  // for bit, and so is the work.
  Problem in_order = causal_problem;
  in_order.args.longest_first = false;
  for (const Forward which : {Forward::kMmaSync, Forward::kWgmma}) {
    INFO(forward_name(which));
    const Emulated a = emulate_problem(in_order, simt::Schedule::Lowest, which);
    const Emulated& b = which == Forward::kMmaSync ? causal : wg_causal;
    REQUIRE(a.results.size() == b.results.size());
    for (size_t i = 0; i < a.results.size(); ++i) CHECK(same_bits(a.results[i], b.results[i]));
    CHECK(a.mma_forward + a.wgmma_forward + a.mma_dq + a.wgmma_dq ==
          b.mma_forward + b.wgmma_forward + b.mma_dq + b.wgmma_dq);
  }
}

// Each block's work (block_work) on its grid (tc_grid) for 4 blocks of rows and 5 batch entries, in
// the order the GPU starts blocks (blockIdx.x fastest, then .y, then .z): longest first with causal, in
// sections of entries (all of a section's blocks of one rank, then the next rank, then the next
// section; the last section's blocks past the batch have no work), ranks from the last block for query
// blocks and from the first for key blocks; without causal or longest first, blockIdx.x and blockIdx.y
// as they are. Written out here as loops, apart from the kernels' arithmetic.
TEST_CASE("attention on tensor cores, emulated: causal blocks go longest first, in sections of batch entries",
          "[simt][attention]") {
  const bool causal = GENERATE(false, true);
  const bool longest_first = GENERATE(false, true);
  const unsigned section = GENERATE(1u, 2u, 5u);
  const bool latest_first = GENERATE(false, true);
  INFO((causal ? "causal" : "not causal") << (longest_first ? ", longest first" : ", in order") << ", sections of "
                                          << section << (latest_first ? ", query blocks" : ", key blocks"));
  constexpr int64_t kBlocks = 4, kEntries = 5;
  TcParams p{};
  p.batch = kEntries;
  p.causal = causal;
  p.longest_first = longest_first;
  p.section = section;
  const TcGrid g = tc_grid(p, kBlocks * 64 - 10, 64);
  simt::LaunchConfig cfg;
  cfg.grid = simt::Dim3{g.x, g.y, g.z};
  cfg.block = simt::Dim3{1, 1, 1};
  std::vector<BlockWork> got(static_cast<size_t>(g.x) * g.y * g.z, BlockWork{-1, -1});
  simt::launch(cfg, [&] { got[blockIdx.x + g.x * (blockIdx.y + g.y * blockIdx.z)] = block_work(p, latest_first); });
  std::vector<BlockWork> want;  // b = kEntries: a block past the batch
  if (causal && longest_first) {
    for (int64_t first = 0; first < kEntries; first += section) {
      for (int64_t rank = 0; rank < kBlocks; ++rank) {
        for (int64_t b = first; b < first + section; ++b) {
          want.push_back({std::min(b, kEntries), latest_first ? kBlocks - 1 - rank : rank});
        }
      }
    }
  } else {
    for (int64_t b = 0; b < kEntries; ++b) {
      for (int64_t x = 0; x < kBlocks; ++x) want.push_back({b, x});
    }
  }
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("block " << i << " in the launch order");
    if (want[i].b == kEntries) {
      CHECK(got[i].b >= kEntries);
    } else {
      CHECK(got[i].b == want[i].b);
      CHECK(got[i].block == want[i].block);
    }
  }
}

// Sections as even as the batch allows (order_section_for): 64 entries in sections of at most 12 are
// 6 sections of 11 (two entries' blocks idle, not eight); none, or more than the batch, is one section.
// And the order only where the grid can hold it (make_tc_params).
TEST_CASE("attention on tensor cores: the batch is cut into even sections", "[attention]") {
  AttentionArgs a;
  a.batch = 64;
  a.order_section = 12;
  CHECK(order_section_for(a) == 11);
  a.order_section = 16;
  CHECK(order_section_for(a) == 16);
  a.order_section = 1;
  CHECK(order_section_for(a) == 1);
  a.order_section = 0;
  CHECK(order_section_for(a) == 64);
  a.order_section = 100;
  CHECK(order_section_for(a) == 64);
  // The order puts the blocks of rows in the grid's y, whose extent is 65535: past it, in order.
  a.causal = true;
  a.L = a.S = 64 * kMaxGridY;
  CHECK(make_tc_params(a, nullptr, nullptr, nullptr).longest_first);
  a.S = 64 * kMaxGridY + 1;
  CHECK_FALSE(make_tc_params(a, nullptr, nullptr, nullptr).longest_first);
}

// The section of the longest-first order from the L2's size: the entries whose K and V fit half of it.
TEST_CASE("attention on tensor cores: sections of the longest-first order fit half the L2", "[attention]") {
  AttentionArgs a;
  a.dtype = DType::BFloat16;
  a.batch = 64;
  a.S = 4096;
  a.E = a.Ev = 128;
  const int64_t l2 = int64_t{50} << 20;
  CHECK(attention_order_section(a, l2) == 12);  // 2 MiB of K and V an entry, 25 MiB of L2
  a.S = 1024;
  a.E = a.Ev = 64;
  CHECK(attention_order_section(a, l2) == 100);  // more than the batch: make_tc_params takes the batch
  a.S = int64_t{1} << 20;
  CHECK(attention_order_section(a, l2) == 1);  // one entry's K and V past the L2: one a section
  CHECK(attention_order_section(a, 0) == 0);   // no L2 known: the whole batch
}

// The order changes nothing but the order: over 3 batch entries, causal, with a tail in every tile,
// the results are the same bits and the tensor-core work the same in blockIdx.x's order, with each
// entry's blocks together (sections of 1), with sections of 2 (the second narrower) and with one
// section of the whole batch.
TEST_CASE("attention on tensor cores, emulated: every order of causal blocks gives the same bits",
          "[simt][attention]") {
  const Problem base = dense_problem(DType::BFloat16, 64, 3, 160, 160, true, 0.125, 0.0);
  for (const Forward which : {Forward::kMmaSync, Forward::kWgmma}) {
    INFO(forward_name(which));
    const Emulated longest = emulate_problem(base, simt::Schedule::Lowest, which);
    for (const int64_t section : {int64_t{-1}, int64_t{1}, int64_t{2}}) {
      INFO((section < 0 ? std::string("in order") : "sections of " + std::to_string(section)));
      Problem other = base;
      other.args.longest_first = section > 0;
      other.args.order_section = section > 0 ? section : 0;
      const Emulated e = emulate_problem(other, simt::Schedule::Lowest, which);
      REQUIRE(e.results.size() == longest.results.size());
      for (size_t i = 0; i < e.results.size(); ++i) CHECK(same_bits(e.results[i], longest.results[i]));
      CHECK(e.mma_forward + e.wgmma_forward + e.mma_dq + e.wgmma_dq + e.mma_dkv + e.wgmma_dkv ==
            longest.mma_forward + longest.wgmma_forward + longest.mma_dq + longest.wgmma_dq + longest.mma_dkv +
                longest.wgmma_dkv);
    }
  }
}

// The wgmma dk/dv and fused kernels at head dim 64 hold registers for three blocks an SM (168 a thread,
// bench/records/kernel_resources_*), and their shared memory must leave room for three too: an H100
// gives an SM 228 KiB, of which each block reserves 1 KiB. The fused kernel's staging of dQ shares P^T's
// and dS^T's bytes there for this (WgmmaFusedSmem::kDqOverScores); a buffer of its own would fit two.
// At head dim 128 a fused block's registers allow one, and its buffer of its own must still fit.
TEST_CASE("attention on tensor cores: the wgmma backward's shared memory fits the blocks its registers allow",
          "[attention]") {
  constexpr size_t kSm = 228 * 1024, kPerBlock = 1024;
  const auto blocks = [&](size_t bytes) { return kSm / (bytes + kPerBlock); };
  CHECK(blocks(smem_bytes<WgmmaFusedSmem<BFloat16, 64>>()) >= 3);
  CHECK(blocks(smem_bytes<WgmmaDkvSmem<BFloat16, 64>>()) >= 3);
  CHECK(blocks(smem_bytes<WgmmaFusedSmem<BFloat16, 64>>() + 16 * 1024) == 2);  // what a buffer of its own costs
  CHECK(blocks(smem_bytes<WgmmaFusedSmem<BFloat16, 128>>()) >= 1);
  CHECK(WgmmaFusedSmem<BFloat16, 64>::kDqOverScores);
  CHECK_FALSE(WgmmaFusedSmem<BFloat16, 128>::kDqOverScores);
}
