// layer_norm's CUDA kernels (kernels/cuda/layer_norm.cuh), their real source, run on the CPU through
// the emulator of CUDA's threads (kernels/simt/simt.h), launched as kernels/cuda/layer_norm.cu
// launches them (row_plan, ln_plan), and compared with the CPU kernels in float64: out, mean, rstd,
// dx, dweight and dbias. The widths reach each of the four row kernels (a warp or a block per row,
// the row in registers or read again on each pass; the test asserts that each was reached), in
// float32, float16 and bfloat16, with parameters in float32, in the input's dtype or none, and
// with a misaligned input. A capped grid makes blocks loop over rows, and enough rows make the
// parameter gradients' finish kernel add more chunks than it has lanes. Each case runs under both
// schedules, which must give the same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/cuda/layer_norm.cuh"
#include "kernels/layer_norm.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::test;
namespace ln = kiln::layer_norm_cuda;

namespace {

enum class Params { Float32, InputDType, None };

struct Case {
  DType dtype = DType::Float32;
  int64_t rows = 6, n = 8;
  Params params = Params::Float32;
  bool misaligned = false;       // x starts one element past a 16-byte boundary
  unsigned max_blocks = 1u << 20;  // a cap below the launch's grid makes blocks loop over rows
  // Whether the parameter gradients' kernels run too (they do not depend on the row kernels, and a
  // wide row makes their grid of 1024-thread blocks long to emulate).
  bool param_grads = true;
  DType param_dtype() const { return params == Params::InputDType ? dtype : DType::Float32; }
  bool has_params() const { return params != Params::None; }
  bool wants_param_grads() const { return has_params() && param_grads; }
};

// x, dout, weight and bias, rounded to the dtypes under test (weight and bias undefined without
// parameters). x has an offset mean, so that a variance that loses the spread to cancellation fails.
struct Inputs {
  Tensor x, dout, w, b;
};
Inputs inputs(const Case& c) {
  manual_seed(static_cast<uint64_t>(c.n * 131 + c.rows * 7 + static_cast<int64_t>(c.params)));
  Inputs in{(randn({c.rows, c.n}) * 2.0 + 3.0).to(c.dtype), randn({c.rows, c.n}).to(c.dtype), Tensor(), Tensor()};
  if (c.has_params()) {
    in.w = (randn({c.n}) * 0.5 + 1.0).to(c.param_dtype());
    in.b = randn({c.n}).to(c.param_dtype());
  }
  return in;
}

// out, mean, rstd, dx, and dweight and dbias when the case wants them.
using Results = std::vector<Tensor>;

// The kernels' choice for a launch: cached (rows in registers) or plain, a warp or a block per row.
using Path = std::pair<bool, bool>;

// What one schedule's run gave, and which row kernels the forward and dx launches took.
struct Emulated {
  Results results;
  Path forward, dx;
};

// The three steps of kernels/cuda/layer_norm.cu on the emulator: the forward, the input gradient,
// and with parameters the partials and finish kernels of their gradients. P is the parameters'
// storage type.
template <typename S, typename P> Emulated emulate(const Case& c, const Inputs& in, simt::Schedule schedule) {
  const int64_t rows = c.rows, n = c.n, off = c.misaligned ? 1 : 0;
  const DType t = c.dtype, pdt = c.param_dtype();
  Guarded<S> xbuf(rows * n + off), dybuf = Guarded<S>::copy_of(in.dout), out(rows * n), dx(rows * n);
  Guarded<float> mean(rows), rstd(rows);
  S* const x = xbuf.data() + off;
  std::memcpy(static_cast<void*>(x), in.x.data_ptr(), static_cast<size_t>(rows * n) * sizeof(S));
  const S* const dy = dybuf.data();
  const void *w = ptr_or_null(in.w), *b = ptr_or_null(in.b);

  simt::LaunchConfig cfg;
  cfg.schedule = schedule;
  const auto geometry = [&](const ln::RowPlan& p) {
    cfg.grid = simt::Dim3{std::min(p.grid, c.max_blocks), 1, 1};
    cfg.block = simt::Dim3{static_cast<unsigned>(p.threads), 1, 1};
  };

  Emulated e;
  const float eps = 1e-5f;
  const ln::RowPlan fp = ln::row_plan<S>(rows, n, t, pdt, c.has_params(), {out.data(), x});
  e.forward = {fp.cached, fp.block_row};
  geometry(fp);
  simt::launch(cfg, [&] {
    if (fp.cached && fp.block_row) {
      ln::layer_norm_forward_cached_kernel<S, true>(out.data(), mean.data(), rstd.data(), x, w, b, fp.params_f32, rows,
                                                    n, eps);
    } else if (fp.cached) {
      ln::layer_norm_forward_cached_kernel<S, false>(out.data(), mean.data(), rstd.data(), x, w, b, fp.params_f32,
                                                     rows, n, eps);
    } else if (fp.block_row) {
      ln::layer_norm_forward_kernel<S, true>(out.data(), mean.data(), rstd.data(), x, w, b, pdt, rows, n, eps);
    } else {
      ln::layer_norm_forward_kernel<S, false>(out.data(), mean.data(), rstd.data(), x, w, b, pdt, rows, n, eps);
    }
  });

  const ln::RowPlan bp = ln::row_plan<S>(rows, n, t, pdt, w != nullptr, {dx.data(), dy, x});
  e.dx = {bp.cached, bp.block_row};
  geometry(bp);
  const float *m = mean.data(), *r = rstd.data();
  simt::launch(cfg, [&] {
    if (bp.cached && bp.block_row) {
      ln::layer_norm_backward_dx_cached_kernel<S, true>(dx.data(), dy, x, m, r, w, bp.params_f32, rows, n);
    } else if (bp.cached) {
      ln::layer_norm_backward_dx_cached_kernel<S, false>(dx.data(), dy, x, m, r, w, bp.params_f32, rows, n);
    } else if (bp.block_row) {
      ln::layer_norm_backward_dx_kernel<S, true>(dx.data(), dy, x, m, r, w, pdt, rows, n);
    } else {
      ln::layer_norm_backward_dx_kernel<S, false>(dx.data(), dy, x, m, r, w, pdt, rows, n);
    }
  });

  for (const auto* g : {&xbuf, &dybuf, &out, &dx}) CHECK(g->bands_intact());
  CHECK(mean.bands_intact());
  CHECK(rstd.bands_intact());
  e.results = {out.tensor(t, {rows, n}), mean.tensor(DType::Float32, {rows}), rstd.tensor(DType::Float32, {rows}),
               dx.tensor(t, {rows, n})};
  if (!c.wants_param_grads()) return e;

  const ln::LnPlan plan = ln::ln_plan(rows);
  Guarded<float> part_w(plan.chunks * n), part_b(plan.chunks * n);
  Guarded<P> dw(n), db(n);
  const unsigned col_blocks = static_cast<unsigned>(ceil_div(n, ln::kLnCols));
  cfg.grid = simt::Dim3{col_blocks, static_cast<unsigned>(plan.chunks), 1};
  cfg.block = simt::Dim3{ln::kLnCols, ln::kLnLanes, 1};
  simt::launch(cfg, [&] {
    ln::layer_norm_param_partials_kernel<S>(part_w.data(), part_b.data(), dy, x, m, r, rows, n, plan.chunk_rows);
  });
  cfg.grid = simt::Dim3{col_blocks, 1, 1};
  cfg.block = simt::Dim3{ln::kLnCols, ln::kLnFinishLanes, 1};
  simt::launch(cfg, [&] {
    ln::layer_norm_param_finish_kernel(dw.data(), db.data(), pdt, part_w.data(), part_b.data(), plan.chunks, n);
  });
  for (const auto* g : {&part_w, &part_b}) CHECK(g->bands_intact());
  CHECK(dw.bands_intact());
  CHECK(db.bands_intact());
  e.results.push_back(dw.tensor(pdt, {n}));
  e.results.push_back(db.tensor(pdt, {n}));
  return e;
}

Emulated emulate_any(const Case& c, const Inputs& in, simt::Schedule schedule) {
  return with_float_storage(c.dtype, [&]<typename S>() {
    return c.params == Params::InputDType ? emulate<S, S>(c, in, schedule) : emulate<S, float>(c, in, schedule);
  });
}

// The CPU kernels in float64 on the same values.
Results reference(const Case& c, const Inputs& in) {
  const int64_t rows = c.rows, n = c.n;
  const DType f64 = DType::Float64;
  const Tensor x = in.x.to(f64), dout = in.dout.to(f64);
  const Tensor w = c.has_params() ? in.w.to(f64) : Tensor(), b = c.has_params() ? in.b.to(f64) : Tensor();
  const TensorOptions o(f64);
  Tensor out = empty({rows, n}, o), mean = empty({rows}, o), rstd = empty({rows}, o), dx = empty({rows, n}, o);
  Tensor dw = empty({n}, o), db = empty({n}, o);
  const void *wp = ptr_or_null(w), *bp = ptr_or_null(b);
  run_on(Device::cpu(), kernels::layer_norm_forward, [&](Device) {
    return std::tuple(out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), static_cast<const void*>(x.data_ptr()), f64,
                      wp, bp, f64, rows, n, 1e-5);
  });
  void* dwp = c.wants_param_grads() ? dw.data_ptr() : nullptr;
  void* dbp = c.wants_param_grads() ? db.data_ptr() : nullptr;
  run_on(Device::cpu(), kernels::layer_norm_backward, [&](Device) {
    return std::tuple(dx.data_ptr(), dwp, dbp, static_cast<const void*>(dout.data_ptr()),
                      static_cast<const void*>(x.data_ptr()), f64, static_cast<const void*>(mean.data_ptr()),
                      static_cast<const void*>(rstd.data_ptr()), wp, f64, rows, n);
  });
  Results r{out, mean, rstd, dx};
  if (c.wants_param_grads()) {
    r.push_back(dw);
    r.push_back(db);
  }
  return r;
}

// Runs the case under both schedules and checks them against each other (the same bits) and
// against the reference, with the GPU test's tolerances (tests/cuda/test_layer_norm_cuda.cpp): one
// rounding of the output to the dtype after float math, four times that for the gradients, and the
// statistics, float sums of exact values, within 1e-4. Returns the kernels it took.
// `adjust`, when given, changes the inputs first.
std::pair<Path, Path> check_case(const Case& c, const std::function<void(Inputs&)>& adjust = {}) {
  INFO(dtype_name(c.dtype) << " rows " << c.rows << " n " << c.n << " params " << static_cast<int>(c.params)
                           << (c.misaligned ? " misaligned" : "") << " max_blocks " << c.max_blocks
                           << (c.wants_param_grads() ? " with parameter gradients" : ""));
  Inputs in = inputs(c);
  if (adjust) adjust(in);
  const Emulated low = emulate_any(c, in, simt::Schedule::Lowest);
  const Emulated high = emulate_any(c, in, simt::Schedule::Highest);
  const Results ref = reference(c, in);
  REQUIRE(low.results.size() == ref.size());
  const double tol = c.dtype == DType::BFloat16 ? 2e-2 : c.dtype == DType::Float16 ? 3e-3 : 1e-4;
  const char* names[] = {"out", "mean", "rstd", "dx", "dweight", "dbias"};
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(names[i]);
    CHECK(same_bits(low.results[i], high.results[i]));
    const double t = i == 0 ? tol : i < 3 ? 1e-4 : 4 * tol;
    CHECK(worst_ratio(low.results[i], ref[i], t, t) <= 1.0);
  }
  CHECK(low.forward == high.forward);
  return {low.forward, low.dx};
}

}  // namespace

TEST_CASE("emulated: layer_norm's CUDA kernels match the CPU in float64 at widths for each kernel",
          "[simt][layer_norm]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16, DType::Float16);
  std::set<Path> forward, dx;
  // 8, 24, 1024: a warp per row, cached. 1004: cached in float32 only (not a multiple of 8 values).
  // 1032, 4096, 16384: a block per row, cached. 16392 and 777: plain.
  for (const int64_t n : {8, 24, 777, 1004, 1024, 1032, 4096, 16384, 16392}) {
    for (const Params params : {Params::Float32, Params::InputDType, Params::None}) {
      for (const bool misaligned : {false, true}) {
        Case c;
        c.dtype = dtype;
        c.n = n;
        c.params = params;
        c.misaligned = misaligned;
        c.rows = n <= 1024 ? 19 : 3;
        c.max_blocks = 2;  // 8 warp rows or 1 block row a block: blocks loop over the rows
        c.param_grads = n <= 1032;
        const auto [f, d] = check_case(c);
        forward.insert(f);
        dx.insert(d);
      }
    }
  }
  // Every kernel ran: cached or not, a warp or a block per row, forward and dx.
  CHECK(forward.size() == 4);
  CHECK(dx.size() == 4);
}

TEST_CASE("emulated: layer_norm's parameter gradients add more chunks than the finish kernel has lanes",
          "[simt][layer_norm]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  Case c;
  c.dtype = dtype;
  c.n = 40;  // two column blocks, the second with 8 columns
  c.rows = 2200;
  c.params = Params::InputDType;
  // 64 rows a chunk, 35 chunks: finish lanes 0 to 2 add two chunks each, and the last chunk is short.
  const ln::LnPlan plan = ln::ln_plan(c.rows);
  REQUIRE(plan.chunk_rows == 64);
  REQUIRE(plan.chunks == 35);
  check_case(c);
}

// A row of one value near float32's largest: its float sum overflows, and the kernels take the mean
// again over x / n, as the CPU (it gave a NaN row). The value is n times 1.5 times a power of two, so
// that x / n and every partial sum of it are exact and the variance is exactly 0, as in float64.
TEST_CASE("emulated: layer_norm's CUDA kernels take the mean of a row whose float sum overflows",
          "[simt][layer_norm]") {
  std::set<Path> forward;
  for (const DType dtype : {DType::Float32, DType::BFloat16}) {
    // 8 and 1024: a warp per row, cached; 4096: a block per row, cached; 777 and 16392: plain.
    for (const int64_t n : {8, 777, 1024, 4096, 16392}) {
      const double x = std::ldexp(1.5 * static_cast<double>(n), 126 - std::bit_width(static_cast<uint64_t>(n)));
      if (static_cast<double>(full({1}, x).to(dtype).item<float>()) != x) continue;  // bfloat16: 8 bits
      REQUIRE(x * static_cast<double>(n) > std::numeric_limits<float>::max());
      Case c;
      c.dtype = dtype;
      c.n = n;
      c.rows = 3;
      c.param_grads = n <= 1024;
      const auto [f, d] = check_case(c, [&](Inputs& in) { in.x.select(0, 1).fill_(x); });
      forward.insert(f);
    }
  }
  CHECK(forward.size() == 4);
}
