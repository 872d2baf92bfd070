// cross_entropy's CUDA kernels (kernels/cuda/cross_entropy.cuh), their real source, run on the CPU
// through the emulator of CUDA's threads (kernels/simt/simt.h), launched as
// kernels/cuda/cross_entropy.cu launches them, and compared with the CPU kernels in float64: the
// loss (none, sum and mean, with and without label smoothing), the log-sum-exp, the count of rows
// that are not ignored, and the logits' gradient. Rows of classes go to a warp, to a block (long
// rows), or to a thread each (classes along an inner dim); the gradient goes through the element
// kernel or the row kernel; -inf, +inf and NaN logits; more rows than the finish kernel's threads;
// out-of-range targets, which the kernels record in the device's error record and count as
// ignored. Each case runs under both schedules, which must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/index.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::test;
namespace ce = kiln::cross_entropy_cuda;

namespace {

struct Case {
  DType dtype = DType::Float32;
  CrossEntropyShape shape;
  LossReduce reduce = LossReduce::Mean;
  bool special_logits = false;     // -inf logits off the target, a +inf in row 1, a NaN in row 2
  std::vector<int64_t> bad_rows;   // rows whose target is out of range
  unsigned max_blocks = 1u << 20;  // a cap below the launch's grid makes blocks loop
  int64_t rows() const { return shape.n * shape.s; }
  int64_t numel() const { return shape.n * shape.c * shape.s; }
};

// Logits [n, c, s] rounded to the dtype; targets (every fifth row ignored, the bad rows out of
// range); the output gradient (one per row for none, a scalar otherwise).
struct Inputs {
  Tensor logits, target, dout;
};
Inputs inputs(const Case& c) {
  const CrossEntropyShape& sh = c.shape;
  manual_seed(static_cast<uint64_t>(sh.n * 977 + sh.c * 13 + sh.s));
  std::vector<int64_t> target(static_cast<size_t>(c.rows()));
  const std::vector<double> pick = rand({c.rows()}).to_vector_double();
  for (size_t r = 0; r < target.size(); ++r) {
    target[r] = r % 5 == 4 ? sh.ignore_index : std::min(sh.c - 1, static_cast<int64_t>(pick[r] * sh.c));
  }
  for (size_t k = 0; k < c.bad_rows.size(); ++k) {
    target[static_cast<size_t>(c.bad_rows[k])] = k % 2 == 0 ? sh.c + 3 : -7;
  }
  std::vector<double> x = (randn({c.numel()}) * 3.0).to_vector_double();
  if (c.special_logits) {
    // Logit (i, j, k) is at (i * c + j) * s + k; row r = i * s + k.
    const auto at = [&](int64_t r, int64_t j) {
      return static_cast<size_t>(((r / sh.s) * sh.c + j) * sh.s + r % sh.s);
    };
    for (int64_t r = 0; r < c.rows(); ++r) {
      for (int64_t j = (r * 3) % 7; j < sh.c; j += 7) {
        if (j != target[static_cast<size_t>(r)]) x[at(r, j)] = -INFINITY;
      }
    }
    x[at(1, 0)] = INFINITY;
    x[at(2, sh.c - 1)] = NAN;
  }
  Inputs in;
  in.logits = tensor(x, {c.numel()}).to(c.dtype);
  in.target = tensor(target);
  in.dout = c.reduce == LossReduce::None ? randn({c.rows()}).to(c.dtype) : full({1}, 0.7).to(c.dtype);
  return in;
}

// The loss, the log-sum-exp, the valid count and the gradient; and the device error record.
struct Emulated {
  std::vector<Tensor> results;
  DeviceErrorRecord err{};
};

template <typename S> Emulated emulate(const Case& c, const Inputs& in, simt::Schedule schedule) {
  const CrossEntropyShape& sh = c.shape;
  const int64_t rows = c.rows(), numel = c.numel(), outs = c.reduce == LossReduce::None ? rows : 1;
  Guarded<S> x = Guarded<S>::copy_of(in.logits), dx(numel), out(outs), dout = Guarded<S>::copy_of(in.dout);
  Guarded<float> stats(2 * rows), row_loss(rows);
  Guarded<int64_t> count(1), target = Guarded<int64_t>::copy_of(in.target);
  Emulated e;

  ce::CeArgs a{};
  a.out = out.data();
  a.out_dtype = c.dtype;
  a.stats = stats.data();
  a.row_loss = row_loss.data();
  a.target = target.data();
  a.c = sh.c;
  a.inner = sh.s;
  a.ignore_index = sh.ignore_index;
  a.keep_target = static_cast<float>(1.0 - sh.label_smoothing);
  a.smooth = static_cast<float>(sh.label_smoothing);
  a.reduce = c.reduce;
  a.err = &e.err;

  simt::LaunchConfig cfg;
  cfg.schedule = schedule;
  const auto geometry = [&](unsigned grid, int threads) {
    cfg.grid = simt::Dim3{std::min(grid, c.max_blocks), 1, 1};
    cfg.block = simt::Dim3{static_cast<unsigned>(threads), 1, 1};
  };
  if (sh.s == 1) {
    const RowLaunch rl = row_launch(rows, sh.c);
    geometry(rl.grid, rl.threads);
    simt::launch(cfg, [&] {
      if (rl.block_row) {
        ce::ce_forward_rows_kernel<S, true>(x.data(), rows, a);
      } else {
        ce::ce_forward_rows_kernel<S, false>(x.data(), rows, a);
      }
    });
  } else {
    geometry(cuda_detail::grid_for(rows), cuda_detail::kThreads);
    simt::launch(cfg, [&] { ce::ce_forward_cols_kernel<S>(x.data(), rows, a); });
  }
  cfg.grid = simt::Dim3{1, 1, 1};
  cfg.block = simt::Dim3{ce::kFinishThreads, 1, 1};
  simt::launch(cfg, [&] {
    ce::ce_finish_kernel(out.data(), c.dtype, count.data(), row_loss.data(), target.data(), rows, sh.c,
                         sh.ignore_index, c.reduce);
  });

  const double eps = sh.label_smoothing;
  const float off_target = static_cast<float>(eps / static_cast<double>(sh.c));
  const float on_target = static_cast<float>(1.0 - eps) + off_target;
  if (sh.s == 1 && sh.c >= ce::kRowBackwardMinClasses) {
    geometry(grid_of(sh.n), ce::kRowBackwardThreads);
    simt::launch(cfg, [&] {
      ce::ce_backward_rows_kernel<S>(dx.data(), dout.data(), c.dtype, x.data(), stats.data(), count.data(),
                                     target.data(), sh.n, sh.c, sh.ignore_index, c.reduce, on_target, off_target);
    });
  } else {
    geometry(cuda_detail::grid_for(numel), cuda_detail::kThreads);
    simt::launch(cfg, [&] {
      ce::ce_backward_kernel<S>(dx.data(), dout.data(), c.dtype, x.data(), stats.data(), count.data(), target.data(),
                                sh.n, sh.c, sh.s, sh.ignore_index, c.reduce, on_target, off_target);
    });
  }
  CHECK(x.bands_intact());
  CHECK(dx.bands_intact());
  CHECK(out.bands_intact());
  CHECK(stats.bands_intact());
  CHECK(row_loss.bands_intact());
  CHECK(count.bands_intact());
  e.results = {out.tensor(c.dtype, {outs}), stats.tensor(DType::Float32, {rows, 2}), count.tensor(DType::Int64, {1}),
               dx.tensor(c.dtype, {numel})};
  return e;
}

Emulated emulate_any(const Case& c, const Inputs& in, simt::Schedule schedule) {
  return with_float_storage(c.dtype, [&]<typename S>() { return emulate<S>(c, in, schedule); });
}

// The CPU kernels in float64, with the out-of-range targets ignored, as the CUDA kernels count them.
std::vector<Tensor> reference(const Case& c, const Inputs& in) {
  const CrossEntropyShape& sh = c.shape;
  const int64_t rows = c.rows(), outs = c.reduce == LossReduce::None ? rows : 1;
  const DType f64 = DType::Float64;
  std::vector<int64_t> target = in.target.to_vector<int64_t>();
  for (const int64_t r : c.bad_rows) target[static_cast<size_t>(r)] = sh.ignore_index;
  const Tensor t = tensor(target), x = in.logits.to(f64), dout = in.dout.to(f64);
  Tensor out = empty({outs}, TensorOptions(f64)), stats = empty({rows, 2}, TensorOptions(f64));
  Tensor count = empty({1}, TensorOptions(DType::Int64)), dx = empty({c.numel()}, TensorOptions(f64));
  const auto* tp = static_cast<const int64_t*>(t.data_ptr());
  auto* cp = static_cast<int64_t*>(count.data_ptr());
  run_on(Device::cpu(), kernels::cross_entropy_forward, [&](Device) {
    return std::tuple(out.data_ptr(), f64, stats.data_ptr(), cp, static_cast<const void*>(x.data_ptr()), f64, tp, sh,
                      c.reduce);
  });
  run_on(Device::cpu(), kernels::cross_entropy_backward, [&](Device) {
    return std::tuple(dx.data_ptr(), static_cast<const void*>(dout.data_ptr()), f64,
                      static_cast<const void*>(x.data_ptr()), f64, static_cast<const void*>(stats.data_ptr()),
                      static_cast<const int64_t*>(cp), tp, sh, c.reduce);
  });
  return {out, stats, count, dx};
}

// Runs the case under both schedules and checks them against each other (the same bits; the error
// record may name either bad row, as on a GPU, where the first thread to claim it wins) and
// against the reference: the loss within one rounding to the dtype (float32: float sums of up to C
// terms), each row's max and log-sum within 1e-5, the count exactly, the gradient as the GPU twin test.
void check_case(const Case& c) {
  const CrossEntropyShape& sh = c.shape;
  INFO(dtype_name(c.dtype) << " n " << sh.n << " c " << sh.c << " s " << sh.s << " reduce "
                           << static_cast<int>(c.reduce) << " smoothing " << sh.label_smoothing
                           << (c.special_logits ? " special logits" : "") << " bad rows " << c.bad_rows.size()
                           << " max_blocks " << c.max_blocks);
  const Inputs in = inputs(c);
  const Emulated low = emulate_any(c, in, simt::Schedule::Lowest);
  const Emulated high = emulate_any(c, in, simt::Schedule::Highest);
  const std::vector<Tensor> ref = reference(c, in);
  const double tol = c.dtype == DType::BFloat16 ? 2e-2 : c.dtype == DType::Float16 ? 3e-3 : 2e-5;
  const char* names[] = {"loss", "row max and log-sum", "valid_count", "dlogits"};
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(names[i]);
    CHECK(same_bits(low.results[i], high.results[i]));
    if (i == 2) {
      CHECK(low.results[i].to_vector<int64_t>() == ref[i].to_vector<int64_t>());
      continue;
    }
    const double rtol = i == 0 ? tol : i == 1 ? 1e-5 : std::max(tol, 1e-5);
    CHECK(worst_ratio(low.results[i], ref[i], i == 3 ? 1e-6 : rtol, rtol) <= 1.0);
  }
  const std::vector<int64_t> target = in.target.to_vector<int64_t>();
  for (const Emulated* e : {&low, &high}) {
    if (c.bad_rows.empty()) {
      CHECK(e->err.op == 0);
      continue;
    }
    CHECK(e->err.op == static_cast<int32_t>(IndexCheckOp::CrossEntropy));
    CHECK(e->err.size == sh.c);
    const bool names_a_bad_target = std::any_of(c.bad_rows.begin(), c.bad_rows.end(), [&](int64_t r) {
      return target[static_cast<size_t>(r)] == e->err.index;
    });
    CHECK(names_a_bad_target);
  }
}

}  // namespace

TEST_CASE("emulated: cross_entropy's CUDA kernels match the CPU in float64 for warp, block and inner rows",
          "[simt][cross_entropy]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16, DType::Float16);
  const LossReduce reduce = GENERATE(LossReduce::None, LossReduce::Sum, LossReduce::Mean);
  const double smoothing = GENERATE(0.0, 0.1);
  Case c;
  c.dtype = dtype;
  c.reduce = reduce;
  c.shape.label_smoothing = smoothing;
  // A warp a row, 2 blocks of 8 warps for 37 rows; the element kernel's grid of 2 blocks loops.
  c.shape.n = 37;
  c.shape.c = 10;
  c.max_blocks = 2;
  check_case(c);
  // 1024 classes: still a warp a row, and the gradient's row kernel.
  c.shape.n = 5;
  c.shape.c = 1024;
  check_case(c);
  // 1500 classes: a block a row (3 rows on 2 blocks), the row kernel.
  c.shape.n = 3;
  c.shape.c = 1500;
  check_case(c);
  // Classes along an inner dim: a thread a row, the element kernel.
  c.shape.n = 3;
  c.shape.c = 7;
  c.shape.s = 5;
  c.max_blocks = 1;
  check_case(c);
}

TEST_CASE("emulated: cross_entropy's CUDA kernels with infinite and NaN logits", "[simt][cross_entropy]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  Case c;
  c.dtype = dtype;
  c.reduce = LossReduce::None;
  c.special_logits = true;
  for (const int64_t classes : {20, 1100}) {  // a warp a row, a block a row
    c.shape.n = 6;
    c.shape.c = classes;
    check_case(c);
  }
  c.shape.n = 3;  // a thread a row
  c.shape.c = 20;
  c.shape.s = 4;
  check_case(c);
}

TEST_CASE("emulated: cross_entropy's CUDA kernels record an out-of-range target and count its row as ignored",
          "[simt][cross_entropy]") {
  const LossReduce reduce = GENERATE(LossReduce::None, LossReduce::Mean);
  Case c;
  c.reduce = reduce;
  c.shape.n = 12;
  c.shape.c = 9;
  c.bad_rows = {2, 10};  // in different warps' rows and blocks: the schedules may claim different ones
  c.max_blocks = 2;
  check_case(c);
  c.shape.c = 1100;  // a block a row
  c.shape.n = 3;
  c.bad_rows = {1};
  check_case(c);
}

TEST_CASE("emulated: cross_entropy's finish kernel adds more rows than it has threads", "[simt][cross_entropy]") {
  const LossReduce reduce = GENERATE(LossReduce::Sum, LossReduce::Mean);
  Case c;
  c.reduce = reduce;
  c.shape.n = 2100;
  c.shape.c = 3;
  check_case(c);
}
