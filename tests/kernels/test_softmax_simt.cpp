// softmax's and log_softmax's CUDA kernels (kernels/cuda/softmax.cuh), their real source, run on the
// CPU through the emulator of CUDA's threads (kernels/simt/simt.h), launched as
// kernels/cuda/softmax.cu launches them, and compared with the CPU kernels in float64, forward and
// backward: rows along the last dim by a warp (the row in registers) or by a block, rows along an
// inner dim by a thread each, in float32, float16 and bfloat16, with large logits and -inf ones. A
// capped grid makes blocks loop over rows. Each case runs under both schedules, which must give the
// same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/cuda/softmax.cuh"
#include "kernels/simt/simt.h"
#include "kernels/softmax.h"
#include "tests/kernels/guarded.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::test;
namespace sm = kiln::softmax_cuda;

namespace {

struct Case {
  DType dtype = DType::Float32;
  int64_t outer = 1, n = 1, inner = 1;
  bool log = false;
  unsigned max_blocks = 1u << 20;  // a cap below the launch's grid makes blocks loop over rows
  int64_t numel() const { return outer * n * inner; }
};

// Logits and the output gradient, rounded to the dtype. The logits span about [-40, 40], so exp
// would overflow float without the row max; every seventh is -inf (a masked position), except in
// rows of one.
struct Inputs {
  Tensor x, dout;
};
Inputs inputs(const Case& c) {
  manual_seed(static_cast<uint64_t>(c.outer * 1009 + c.n * 31 + c.inner * 7 + (c.log ? 1 : 0)));
  Tensor x = randn({c.numel()}) * 12.0;
  if (c.n > 1) {
    std::vector<double> v = x.to_vector_double();
    for (size_t i = 3; i < v.size(); i += 7) v[i] = -INFINITY;
    x = tensor(v, {c.numel()});
  }
  return {x.to(c.dtype), randn({c.numel()}).to(c.dtype)};
}

// The forward's output and the backward's input gradient.
using Results = std::vector<Tensor>;

template <typename S> Results emulate(const Case& c, const Inputs& in, simt::Schedule schedule) {
  const int64_t numel = c.numel();
  Guarded<S> x = Guarded<S>::copy_of(in.x), dy = Guarded<S>::copy_of(in.dout), y(numel), dx(numel);
  simt::LaunchConfig cfg;
  cfg.schedule = schedule;
  const auto geometry = [&](unsigned grid, int threads) {
    cfg.grid = simt::Dim3{std::min(grid, c.max_blocks), 1, 1};
    cfg.block = simt::Dim3{static_cast<unsigned>(threads), 1, 1};
  };
  const bool log = c.log;
  if (c.inner == 1) {
    const RowLaunch rl = row_launch(c.outer, c.n);
    geometry(rl.grid, rl.threads);
    simt::launch(cfg, [&] {
      if (rl.block_row) {
        sm::softmax_forward_rows_kernel<S, true>(y.data(), x.data(), c.outer, c.n, log);
      } else {
        sm::softmax_forward_rows_kernel<S, false>(y.data(), x.data(), c.outer, c.n, log);
      }
    });
    simt::launch(cfg, [&] {
      if (rl.block_row) {
        sm::softmax_backward_rows_kernel<S, true>(dx.data(), dy.data(), y.data(), c.outer, c.n, log);
      } else {
        sm::softmax_backward_rows_kernel<S, false>(dx.data(), dy.data(), y.data(), c.outer, c.n, log);
      }
    });
  } else {
    geometry(cuda_detail::grid_for(c.outer * c.inner), cuda_detail::kThreads);
    simt::launch(cfg, [&] { sm::softmax_forward_cols_kernel<S>(y.data(), x.data(), c.outer, c.n, c.inner, log); });
    simt::launch(cfg, [&] {
      sm::softmax_backward_cols_kernel<S>(dx.data(), dy.data(), y.data(), c.outer, c.n, c.inner, log);
    });
  }
  for (const auto* g : {&x, &dy, &y, &dx}) CHECK(g->bands_intact());
  return {y.tensor(c.dtype, {numel}), dx.tensor(c.dtype, {numel})};
}

Results emulate_any(const Case& c, const Inputs& in, simt::Schedule schedule) {
  return with_float_storage(c.dtype, [&]<typename S>() { return emulate<S>(c, in, schedule); });
}

// The CPU kernels in float64. The backward takes the emulated forward's output (rounded to the dtype)
// as the GPU's backward does, so both sides start from the same values.
Results reference(const Case& c, const Inputs& in, const Tensor& y_emulated) {
  const DType f64 = DType::Float64;
  const Tensor x = in.x.to(f64), dout = in.dout.to(f64), y_in = y_emulated.to(f64);
  Tensor y = empty({c.numel()}, TensorOptions(f64)), dx = empty({c.numel()}, TensorOptions(f64));
  run_on(Device::cpu(), kernels::softmax_forward, [&](Device) {
    return std::tuple(y.data_ptr(), static_cast<const void*>(x.data_ptr()), f64, c.outer, c.n, c.inner, c.log);
  });
  run_on(Device::cpu(), kernels::softmax_backward, [&](Device) {
    return std::tuple(dx.data_ptr(), static_cast<const void*>(dout.data_ptr()),
                      static_cast<const void*>(y_in.data_ptr()), f64, c.outer, c.n, c.inner, c.log);
  });
  return {y, dx};
}

void check_case(const Case& c) {
  INFO(dtype_name(c.dtype) << (c.log ? " log_softmax" : " softmax") << " outer " << c.outer << " n " << c.n
                           << " inner " << c.inner << " max_blocks " << c.max_blocks);
  const Inputs in = inputs(c);
  const Results low = emulate_any(c, in, simt::Schedule::Lowest);
  const Results high = emulate_any(c, in, simt::Schedule::Highest);
  const Results ref = reference(c, in, low[0]);
  // One rounding to the dtype after float math (exp and log of float32 arguments, whose rounding
  // a log_softmax of logits near 40 carries at that size); the gradient sums n terms.
  const double tol = c.dtype == DType::BFloat16 ? 2e-2 : c.dtype == DType::Float16 ? 3e-3 : 2e-5;
  const char* names[] = {"out", "dx"};
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(names[i]);
    CHECK(same_bits(low[i], high[i]));
    CHECK(worst_ratio(low[i], ref[i], tol * (i == 0 ? 1 : 4), tol * (i == 0 ? 1 : 4)) <= 1.0);
  }
}

}  // namespace

TEST_CASE("emulated: softmax's CUDA kernels match the CPU in float64 for warp rows, block rows and inner rows",
          "[simt][softmax]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16, DType::Float16);
  const bool log = GENERATE(false, true);
  Case c;
  c.dtype = dtype;
  c.log = log;
  // Warp rows (n up to 1024; the row in registers, with lanes past the row's end), grid capped at
  // 2 blocks of 8 warps so that warps loop over the 21 rows.
  c.outer = 21;
  c.max_blocks = 2;
  for (const int64_t n : {1, 5, 32, 33, 1000, 1024}) {
    c.n = n;
    check_case(c);
  }
  // Block rows (n above 1024), 3 rows on 2 blocks.
  c.outer = 3;
  for (const int64_t n : {1025, 3001}) {
    c.n = n;
    check_case(c);
  }
  // Rows along an inner dim: one thread each, on one block of 256 threads for 300 rows.
  c.outer = 4;
  c.n = 7;
  c.inner = 75;
  c.max_blocks = 1;
  check_case(c);
}
