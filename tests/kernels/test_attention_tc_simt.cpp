// The tensor-core flash-attention kernels (kernels/cuda/attention_tc_forward.cuh and
// attention_tc_backward.cuh), their real source, run on the CPU through the emulator of CUDA's
// threads (kernels/simt/simt.h) and compared with the CPU kernels in float64: the output, the
// log-sum-exp, dq, dk and dv, across query and key counts that leave tails in every tile, head dims
// 64 and 128, causal and not, float16 and bfloat16, with and without dropout.
//
// Each case runs under both of the emulator's schedules (one warp runs ahead of the others from the
// lowest or from the highest): a missing __syncthreads would let a warp overwrite a shared tile
// that another still reads, and the two runs would differ. They must agree bit for bit. Outputs sit
// between guard bands and start as NaN, so a write out of bounds or an element never written
// fails. What this cannot check is the fragment maps against the hardware, and speed: the GPU tests
// (tests/cuda/test_attention_tc_cuda.cpp, test_tile_cuda.cpp) do that.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/attention.h"
#include "kernels/cuda/attention_tc_backward.cuh"
#include "kernels/cuda/attention_tc_forward.cuh"
#include "kernels/half.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::attention_tc;
using kiln::test::worst_ratio;

namespace {

// n elements between two guard bands. The elements start as all-ones bytes (NaN in every float
// type), the bands as a pattern that no kernel writes.
template <typename E> class Guarded {
 public:
  explicit Guarded(int64_t n) : n_(static_cast<size_t>(n)), bytes_((n_ + 2 * kGuard) * sizeof(E)) {
    std::memset(bytes_.data(), kBand, bytes_.size());
    std::memset(static_cast<void*>(data()), 0xFF, n_ * sizeof(E));
  }
  E* data() { return reinterpret_cast<E*>(bytes_.data()) + kGuard; }
  const E* data() const { return reinterpret_cast<const E*>(bytes_.data()) + kGuard; }
  bool bands_intact() const {
    const size_t band = kGuard * sizeof(E), tail = band + n_ * sizeof(E);
    for (size_t i = 0; i < band; ++i) {
      if (bytes_[i] != kBand || bytes_[tail + i] != kBand) return false;
    }
    return true;
  }
  // The elements as a tensor of `dtype` and `shape`.
  Tensor tensor(DType dtype, const Shape& shape) const {
    Tensor t = empty(shape, TensorOptions(dtype));
    REQUIRE(static_cast<size_t>(t.numel()) == n_);
    std::memcpy(t.data_ptr(), data(), n_ * sizeof(E));
    return t;
  }

 private:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kBand = 0x5A;
  size_t n_;
  std::vector<unsigned char> bytes_;
};

// One problem: the arguments for the dtype under test, and the buffers that hold q, k, v and dout
// in that dtype, contiguous (q, k and v may be one buffer), with the element offsets where q, k and
// v start in theirs. The outputs are dense (attention_dense_outputs).
struct Problem {
  AttentionArgs args;
  Tensor q, k, v, dout;
  int64_t q_at = 0, k_at = 0, v_at = 0;
};

// The problem's operands in dtype t (copies of the buffers, the same layout), and their owners.
struct Operands {
  std::vector<Tensor> owners;
  const void *q, *k, *v, *dout;
};
Operands operands(const Problem& pr, DType t) {
  Operands o;
  o.owners = {pr.q.to(t), pr.k.to(t), pr.v.to(t), pr.dout.to(t)};
  const auto at = [&](size_t i, int64_t offset) {
    return static_cast<const void*>(static_cast<const char*>(o.owners[i].data_ptr()) +
                                    offset * static_cast<int64_t>(element_size(t)));
  };
  o.q = at(0, pr.q_at);
  o.k = at(1, pr.k_at);
  o.v = at(2, pr.v_at);
  o.dout = at(3, 0);
  return o;
}

// out, lse, dq, dk and dv, flat over the batch: [batch, L, E], [batch, L], [batch, S, E].
using Results = std::vector<Tensor>;

// The CPU kernels in float64, on the same values (already rounded to the dtype under test).
Results reference(const Problem& pr) {
  AttentionArgs a = pr.args;
  a.dtype = DType::Float64;
  const Operands in = operands(pr, DType::Float64);
  const TensorOptions f64(DType::Float64);
  Tensor out = empty({a.batch, a.L, a.Ev}, f64), lse = empty({a.batch, a.L}, f64);
  Tensor dq = empty({a.batch, a.L, a.E}, f64), dk = empty({a.batch, a.S, a.E}, f64);
  Tensor dv = empty({a.batch, a.S, a.Ev}, f64);
  test::run_on(Device::cpu(), kernels::attention_forward,
               [&](Device) { return std::tuple(out.data_ptr(), lse.data_ptr(), in.q, in.k, in.v, a); });
  test::run_on(Device::cpu(), kernels::attention_backward, [&](Device) {
    return std::tuple(dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), in.dout, static_cast<const void*>(out.data_ptr()),
                      static_cast<const void*>(lse.data_ptr()), in.q, in.k, in.v, a);
  });
  return {out, lse, dq, dk, dv};
}

// The three kernels on the emulator, launched as kernels/cuda/attention_tc.cu and
// attention_tc_backward.cu launch them: the backward reads the emulated forward's output and
// log-sum-exp, and the dk/dv kernel the D rows the dq kernel wrote.
// The results, and the tensor-core instructions (emulated mma, per warp) each kernel issued.
struct Emulated {
  Results results;
  int64_t mma_forward = 0, mma_dq = 0, mma_dkv = 0;
};

constexpr const char* kMmaFile = "kernels/cuda/tile.cuh";

template <typename T, int D, bool kDropout> Emulated emulate(const Problem& pr, simt::Schedule schedule) {
  const AttentionArgs& a = pr.args;
  const TcParams p = make_tc_params(a);
  const Operands in = operands(pr, a.dtype);
  const auto* qp = static_cast<const T*>(in.q);
  const auto* kp = static_cast<const T*>(in.k);
  const auto* vp = static_cast<const T*>(in.v);
  const auto* gp = static_cast<const T*>(in.dout);
  Guarded<T> out(a.batch * a.L * D), dq(a.batch * a.L * D), dk(a.batch * a.S * D), dv(a.batch * a.S * D);
  Guarded<float> lse(a.batch * a.L), d_rows(a.batch * a.L);
  simt::LaunchConfig cfg;
  cfg.block = simt::Dim3{kBlockThreads, 1, 1};
  cfg.schedule = schedule;
  cfg.grid = simt::Dim3{row_blocks(a.L), static_cast<unsigned>(a.batch), 1};
  cfg.dynamic_smem = smem_bytes<ForwardSmem<T, D>>();
  const simt::LaunchStats forward = simt::launch(
      cfg, [&] { attention_forward_tc_kernel<T, D, kDropout>(out.data(), lse.data(), qp, kp, vp, p); });
  cfg.dynamic_smem = smem_bytes<DqSmem<T, D>>();
  const simt::LaunchStats dq_stats = simt::launch(cfg, [&] {
    attention_backward_dq_tc_kernel<T, D, kDropout>(dq.data(), d_rows.data(), gp, out.data(), lse.data(), qp, kp, vp,
                                                    p);
  });
  cfg.grid.x = row_blocks(a.S);
  cfg.dynamic_smem = smem_bytes<DkvSmem<T, D>>();
  const simt::LaunchStats dkv_stats = simt::launch(cfg, [&] {
    attention_backward_dkv_tc_kernel<T, D, kDropout>(dk.data(), dv.data(), gp, lse.data(), d_rows.data(), qp, kp, vp,
                                                     p);
  });
  CHECK(forward.blocks == static_cast<int64_t>(row_blocks(a.L)) * a.batch);
  CHECK(forward.warp_collectives > 0);
  CHECK(out.bands_intact());
  CHECK(lse.bands_intact());
  CHECK(d_rows.bands_intact());
  CHECK(dq.bands_intact());
  CHECK(dk.bands_intact());
  CHECK(dv.bands_intact());
  Emulated e;
  e.results = {out.tensor(a.dtype, {a.batch, a.L, D}), lse.tensor(DType::Float32, {a.batch, a.L}),
               dq.tensor(a.dtype, {a.batch, a.L, D}), dk.tensor(a.dtype, {a.batch, a.S, D}),
               dv.tensor(a.dtype, {a.batch, a.S, D})};
  e.mma_forward = forward.collectives_in(kMmaFile);
  e.mma_dq = dq_stats.collectives_in(kMmaFile);
  e.mma_dkv = dkv_stats.collectives_in(kMmaFile);
  return e;
}

template <typename T, int D> Emulated emulate_any(const Problem& pr, simt::Schedule schedule) {
  if (pr.args.dropout_p > 0) return emulate<T, D, true>(pr, schedule);
  return emulate<T, D, false>(pr, schedule);
}

Emulated emulate_problem(const Problem& pr, simt::Schedule schedule) {
  const bool bf16 = pr.args.dtype == DType::BFloat16;
  if (pr.args.E == 64) return bf16 ? emulate_any<BFloat16, 64>(pr, schedule) : emulate_any<Half, 64>(pr, schedule);
  return bf16 ? emulate_any<BFloat16, 128>(pr, schedule) : emulate_any<Half, 128>(pr, schedule);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const size_t bytes = static_cast<size_t>(a.numel()) * a.element_size();
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
}

// Runs the problem on the emulator under both schedules and checks them against each other (the
// same bits) and against the float64 reference.
void check_problem(const Problem& pr) {
  const AttentionArgs& a = pr.args;
  INFO(dtype_name(a.dtype) << " E " << a.E << " batch " << a.batch << " L " << a.L << " S " << a.S
                           << (a.causal ? " causal" : "") << " scale " << a.scale << " dropout " << a.dropout_p);
  {
    // A problem the CUDA twin would hand to these kernels.
    const Operands in = operands(pr, a.dtype);
    REQUIRE(attention_tc_backward_fits(a, in.q, in.k, in.v, in.dout));
  }
  const Results low = emulate_problem(pr, simt::Schedule::Lowest).results;
  const Results high = emulate_problem(pr, simt::Schedule::Highest).results;
  const Results ref = reference(pr);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  // P and dS enter their products rounded to the dtype, and the results are rounded once more. Each
  // gradient sums L or S such terms, so its absolute allowance scales with its largest element (as
  // in the twin tests). The log-sum-exp is float32 arithmetic on exact inputs.
  const double tol = a.dtype == DType::BFloat16 ? 2e-2 : 3e-3;
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(names[i]);
    CHECK(same_bits(low[i], high[i]));
    const double rtol = i == 1 ? 1e-5 : tol;
    const double atol = i == 1 ? 1e-5 : i == 0 ? tol : tol * std::max(1.0, test::max_abs(ref[i]));
    CHECK(worst_ratio(low[i], ref[i], atol, rtol) <= 1.0);
  }
}

// Dense [B, L, E] q and dout, [B, S, E] k and v: random values rounded to the dtype.
Problem dense_problem(DType dtype, int64_t E, int64_t B, int64_t L, int64_t S, bool causal, double scale,
                      double dropout) {
  manual_seed(static_cast<uint64_t>(L * 7919 + S * 31 + E + (causal ? 1 : 0)));
  Problem pr;
  pr.args = test::tensor_core_args(dtype, B, L, S, E, causal, scale);
  pr.args.dropout_p = dropout;
  pr.args.philox = PhiloxState{0x9E3779B97F4A7C15ull, 48, nullptr};
  pr.q = randn({B, L, E}).to(dtype);
  pr.k = randn({B, S, E}).to(dtype);
  pr.v = randn({B, S, E}).to(dtype);
  pr.dout = randn({B, L, E}).to(dtype);
  return pr;
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

TEST_CASE("attention on tensor cores, emulated: dropout draws the CPU's decisions", "[simt][attention]") {
  const DType dtype = GENERATE(DType::BFloat16, DType::Float16);
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const bool causal = GENERATE(false, true);
  check_problem(dense_problem(dtype, E, 2, 70, 90, causal, 0.125, 0.25));
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
    Problem pr;
    pr.args = test::tensor_core_args(dtype, B * H, T, T, E, causal, 1.0 / std::sqrt(static_cast<double>(E)));
    AttentionBatch& l = pr.args.layout;
    l.ndim = 2;
    l.sizes[0] = B;
    l.sizes[1] = H;
    l.q[0] = l.k[0] = l.v[0] = T * 3 * H * E;
    l.q[1] = l.k[1] = l.v[1] = E;
    pr.args.q_row_stride = pr.args.k_row_stride = pr.args.v_row_stride = 3 * H * E;
    attention_dense_outputs(pr.args);
    pr.q = pr.k = pr.v = randn({B, T, 3 * H * E}).to(dtype);
    pr.k_at = H * E;
    pr.v_at = 2 * H * E;
    pr.dout = randn({B, H, T, E}).to(dtype);
    check_problem(pr);
  }
  SECTION("keys and values shared by the heads") {
    const int64_t S = 50;
    Problem pr;
    pr.args = test::tensor_core_args(dtype, B * H, T, S, E, causal, 1.0 / std::sqrt(static_cast<double>(E)));
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

// How much tensor-core work the kernels do, counted on the emulator (no timing involved). One mma
// is a 16 x 8 x 16 product, 2048 multiply-adds, and a product of [L, E] by [E, S] or [L, S] by
// [S, E] is L S E of them. At tile multiples the forward's two products (Q K^T, P V) are then
// L S E / 1024 mma, the dq kernel's three (S, dP, dQ) 3 L S E / 2048 and the dk/dv kernel's four
// (S^T, dP^T, dV, dK) L S E / 512: nothing is computed twice within a kernel, and no tile is padded.
// With causal, a block skips the tiles wholly above the diagonal: at L = S = 256 and 64-row blocks,
// the blocks see 1, 2, 3 and 4 of the 4 tile columns, 10 of 16.
TEST_CASE("attention on tensor cores, emulated: the mma count is the products' size, and causal skips 6 of 16 tiles",
          "[simt][attention]") {
  const int64_t E = GENERATE(int64_t{64}, int64_t{128});
  const int64_t L = 256, S = 256;
  INFO("E " << E);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  const Emulated full =
      emulate_problem(dense_problem(DType::BFloat16, E, 1, L, S, false, scale, 0.0), simt::Schedule::Lowest);
  const Emulated causal =
      emulate_problem(dense_problem(DType::BFloat16, E, 1, L, S, true, scale, 0.0), simt::Schedule::Lowest);
  const int64_t work = L * S * E;
  CHECK(full.mma_forward == work / 1024);
  CHECK(full.mma_dq == 3 * work / 2048);
  CHECK(full.mma_dkv == work / 512);
  CHECK(causal.mma_forward * 16 == full.mma_forward * 10);
  CHECK(causal.mma_dq * 16 == full.mma_dq * 10);
  CHECK(causal.mma_dkv * 16 == full.mma_dkv * 10);
}
