// batch_norm's CUDA kernels (kernels/cuda/batch_norm.cuh), their real source, run on the CPU
// through the emulator of CUDA's threads (kernels/simt/simt.h), launched as
// kernels/cuda/batch_norm.cu launches them (bn_plan), and compared with the CPU kernels in float64:
// out, the saved mean and rstd, the running statistics, dx, dweight and dbias. The layouts reach
// both block shapes of the per-channel sums (32 channels x 8 lanes when channels are the fastest
// dim, one channel x 256 lanes otherwise): NCHW, channels-last, [N, C] and [N, C] stored
// column-major, with chunk counts from 1 to 9 and a last chunk or channel group left partial. In
// float32, float16 and bfloat16, with parameters in float32, in the input's dtype or none, in
// training and in eval, and with the epilogues: a ReLU (its backward masks dout by the output in
// both backward kernels) and a residual with a ReLU. The elementwise passes run in a capped grid,
// so each thread walks several elements. Each case runs under both schedules, which must give the
// same bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/batch_norm.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::test;
namespace bn = kiln::batch_norm_cuda;

namespace {

// How x is laid out in memory: its logical shape is [N, C, S] in every case.
enum class Layout { NCHW, ChannelsLast, Rows, RowsColumnMajor };
enum class Params { Float32, InputDType, None };

struct Case {
  DType dtype = DType::Float32;
  Layout layout = Layout::NCHW;
  int64_t n = 2, c = 3, s = 4;
  Params params = Params::Float32;
  bool training = true;
  bool running = true;  // running statistics given (always in eval, where they normalize)
  bool relu = false;      // the forward ends in a ReLU; without a residual, the backward masks dout by out
  bool residual = false;  // the forward adds a residual (in x's layout) before the ReLU
  DType param_dtype() const { return params == Params::InputDType ? dtype : DType::Float32; }
  bool has_params() const { return params != Params::None; }
  int64_t numel() const { return n * c * s; }
  // The physical shape x is stored in, and the permutation that views it as [N, C, S].
  std::pair<Shape, std::vector<int64_t>> storage() const {
    switch (layout) {
      case Layout::NCHW: return {{n, c, s}, {0, 1, 2}};
      case Layout::ChannelsLast: return {{n, s, c}, {0, 2, 1}};
      case Layout::Rows: return {{n, c, 1}, {0, 1, 2}};
      case Layout::RowsColumnMajor: return {{c, n, 1}, {1, 0, 2}};
    }
    return {};
  }
  ChannelLayout channel_layout() const {
    const auto [shape, perm] = storage();
    const Tensor view = empty(shape).permute(perm);
    return ChannelLayout{n, c, s, view.strides()[0], view.strides()[1], view.strides()[2]};
  }
};

// x and dout in their storage order (rounded to the dtype), weight and bias, and the running
// statistics before the step. x has offset channel means, so that a variance that loses the spread
// to cancellation fails.
struct Inputs {
  Tensor x, dout, w, b, running_mean, running_var, residual;
};
Inputs inputs(const Case& c) {
  manual_seed(static_cast<uint64_t>(c.numel() * 7 + static_cast<int64_t>(c.layout) * 3 +
                                    static_cast<int64_t>(c.params)));
  const auto [shape, perm] = c.storage();
  const Tensor shift = randn({1, c.c, 1}) * 3.0;
  Inputs in;
  // Drawn as [N, C, S] and stored in the case's order.
  const Tensor logical_x = randn({c.n, c.c, c.s}) * 2.0 + shift;
  const Tensor logical_dy = randn({c.n, c.c, c.s});
  std::vector<int64_t> inverse(3);
  for (int64_t i = 0; i < 3; ++i) inverse[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
  in.x = logical_x.permute(inverse).contiguous().to(c.dtype);
  in.dout = logical_dy.permute(inverse).contiguous().to(c.dtype);
  in.residual = randn({c.n, c.c, c.s}).permute(inverse).contiguous().to(c.dtype);
  REQUIRE(in.x.sizes() == shape);
  if (c.has_params()) {
    in.w = (randn({c.c}) * 0.5 + 1.0).to(c.param_dtype());
    in.b = randn({c.c}).to(c.param_dtype());
  }
  in.running_mean = randn({c.c}).to(c.param_dtype());
  in.running_var = (rand({c.c}) + 0.5).to(c.param_dtype());
  return in;
}

// A buffer in x's storage order as the logical [N, C, S] tensor.
Tensor logical(const Case& c, const Tensor& stored) { return stored.permute(c.storage().second).contiguous(); }

// out, save_mean, save_rstd, running_mean, running_var, dx, and with parameters dweight and dbias.
using Results = std::vector<Tensor>;
const char* const kNames[] = {"out", "save_mean", "save_rstd", "running_mean", "running_var", "dx", "dweight", "dbias"};

// The elementwise passes' grid, capped so that each thread walks several elements.
constexpr unsigned kMaxElementwiseBlocks = 3;

// The forward and backward of kernels/cuda/batch_norm.cu on the emulator. S is x's storage type
// and P the parameters' and running statistics'.
template <typename S, typename P> Results emulate(const Case& c, const Inputs& in, simt::Schedule schedule) {
  const ChannelLayout l = c.channel_layout();
  const DType t = c.dtype, pdt = c.param_dtype();
  const int64_t numel = c.numel();
  Guarded<S> x = Guarded<S>::copy_of(in.x), dy = Guarded<S>::copy_of(in.dout), out(numel), dx(numel);
  Guarded<S> z = c.residual ? Guarded<S>::copy_of(in.residual) : Guarded<S>(0);
  const S* zp = c.residual ? z.data() : nullptr;
  const S* relu_out = c.relu && !c.residual ? out.data() : nullptr;  // as core/ops/batch_norm.cpp passes it
  Guarded<P> rm = Guarded<P>::copy_of(in.running_mean), rv = Guarded<P>::copy_of(in.running_var);
  Guarded<P> w = c.has_params() ? Guarded<P>::copy_of(in.w) : Guarded<P>(0);
  Guarded<P> b = c.has_params() ? Guarded<P>::copy_of(in.b) : Guarded<P>(0);
  Guarded<float> mean(c.c), rstd(c.c);
  const void* wp = c.has_params() ? static_cast<const void*>(w.data()) : nullptr;
  const void* bp = c.has_params() ? static_cast<const void*>(b.data()) : nullptr;
  BatchNormParams params{wp, bp, pdt, nullptr, nullptr, pdt};
  if (c.running || !c.training) {
    params.running_mean = rm.data();
    params.running_var = rv.data();
  }
  const double momentum = 0.1, eps = 1e-5;

  simt::LaunchConfig cfg;
  cfg.schedule = schedule;
  const auto per_channel = [&](int64_t channels) {
    cfg.grid = simt::Dim3{cuda_detail::grid_for(channels), 1, 1};
    cfg.block = simt::Dim3{cuda_detail::kThreads, 1, 1};
  };
  const auto per_element = [&] {
    cfg.grid = simt::Dim3{std::min(cuda_detail::grid_for(numel), kMaxElementwiseBlocks), 1, 1};
    cfg.block = simt::Dim3{cuda_detail::kThreads, 1, 1};
  };
  const bn::BnPlan plan = bn::bn_plan(l);
  const auto per_chunk = [&] {
    cfg.grid = simt::Dim3{static_cast<unsigned>(plan.c_groups), static_cast<unsigned>(plan.chunks), 1};
    cfg.block = simt::Dim3{static_cast<unsigned>(plan.bx), static_cast<unsigned>(plan.by), 1};
  };
  bn::check_bn_grid(plan);

  // Forward: the statistics (training: partials, then the finish kernel; eval: the running ones),
  // then the normalization.
  Guarded<bn::Welford> stats_part(c.training ? plan.chunks * c.c : 0);
  if (c.training) {
    // The launch's workspace is what this test gives the kernels.
    REQUIRE(bn::batch_norm_forward_workspace_bytes(l, true) ==
            static_cast<size_t>(plan.chunks * c.c) * sizeof(bn::Welford));
    per_chunk();
    simt::launch(cfg, [&] {
      bn::bn_stats_partial_kernel<S>(stats_part.data(), x.data(), l, plan.count, plan.chunk_len);
    });
    per_channel(c.c);
    simt::launch(cfg, [&] {
      bn::bn_stats_finish_kernel(mean.data(), rstd.data(), stats_part.data(), plan.chunks, c.c, plan.count, params,
                                 momentum, eps);
    });
  } else {
    per_channel(c.c);
    simt::launch(cfg, [&] { bn::bn_eval_stats_kernel(mean.data(), rstd.data(), params, c.c, eps); });
  }
  const cuda_detail::OffsetCalc<2> calc = bn::channel_offset_calc(l);
  per_element();
  simt::launch(cfg, [&] {
    bn::bn_normalize_kernel<S>(calc, out.data(), x.data(), mean.data(), rstd.data(), wp, bp, pdt, zp, c.relu, numel);
  });
  if (c.relu || c.residual) {
    // The epilogue must give the bits of the ops it replaces: the kernel without it, then kiln's add
    // and relu on its output.
    Guarded<S> plain(numel);
    simt::launch(cfg, [&] {
      bn::bn_normalize_kernel<S>(calc, plain.data(), x.data(), mean.data(), rstd.data(), wp, bp, pdt, nullptr, false,
                                 numel);
    });
    const Shape stored = c.storage().first;
    Tensor chain = plain.tensor(t, stored);
    if (c.residual) chain = chain + z.tensor(t, stored);
    if (c.relu) chain = relu(chain);
    CHECK(same_bits(out.tensor(t, stored), chain));
  }

  // Backward: the per-channel sums (for dweight and dbias, and for dx in training), then dx.
  Guarded<float2> grad_part(plan.chunks * c.c), coef(c.c);
  Guarded<P> dw(c.has_params() ? c.c : 0), db(c.has_params() ? c.c : 0);
  void* dwp = c.has_params() ? static_cast<void*>(dw.data()) : nullptr;
  void* dbp = c.has_params() ? static_cast<void*>(db.data()) : nullptr;
  REQUIRE(bn::batch_norm_backward_workspace_bytes(l) ==
          cuda_detail::align_up(static_cast<size_t>(c.c) * sizeof(float2)) +
              static_cast<size_t>(plan.chunks * c.c) * sizeof(float2));
  if (c.has_params() || c.training) {
    per_chunk();
    simt::launch(cfg, [&] {
      bn::bn_grad_partial_kernel<S>(grad_part.data(), dy.data(), relu_out, x.data(), mean.data(), rstd.data(), l,
                                    plan.count, plan.chunk_len);
    });
    per_channel(c.c);
    simt::launch(cfg, [&] {
      bn::bn_grad_finish_kernel(coef.data(), dwp, dbp, pdt, grad_part.data(), plan.chunks, c.c, plan.count);
    });
  }
  per_element();
  simt::launch(cfg, [&] {
    bn::bn_dx_kernel<S>(calc, dx.data(), dy.data(), relu_out, x.data(), mean.data(), rstd.data(), coef.data(), wp, pdt,
                        c.training, numel);
  });

  for (const auto* g : {&x, &dy, &out, &dx, &z}) CHECK(g->bands_intact());
  for (const auto* g : {&rm, &rv, &w, &b, &dw, &db}) CHECK(g->bands_intact());
  CHECK(mean.bands_intact());
  CHECK(rstd.bands_intact());
  CHECK(stats_part.bands_intact());
  CHECK(grad_part.bands_intact());
  CHECK(coef.bands_intact());
  const Shape stored = c.storage().first;
  Results r{logical(c, out.tensor(t, stored)), mean.tensor(DType::Float32, {c.c}), rstd.tensor(DType::Float32, {c.c}),
            rm.tensor(pdt, {c.c}), rv.tensor(pdt, {c.c}), logical(c, dx.tensor(t, stored))};
  if (c.has_params()) {
    r.push_back(dw.tensor(pdt, {c.c}));
    r.push_back(db.tensor(pdt, {c.c}));
  }
  return r;
}

Results emulate_any(const Case& c, const Inputs& in, simt::Schedule schedule) {
  return with_float_storage(c.dtype, [&]<typename S>() {
    return c.params == Params::InputDType ? emulate<S, S>(c, in, schedule) : emulate<S, float>(c, in, schedule);
  });
}

// The CPU kernels in float64 on the same values, laid out as [N, C, S] (the CPU kernel's own
// handling of layouts is tested in the op table).
Results reference(const Case& c, const Inputs& in) {
  const DType f64 = DType::Float64;
  const TensorOptions o(f64);
  const Tensor x = logical(c, in.x).to(f64), dout = logical(c, in.dout).to(f64);
  const Tensor z = logical(c, in.residual).to(f64);
  const Tensor w = c.has_params() ? in.w.to(f64) : Tensor(), b = c.has_params() ? in.b.to(f64) : Tensor();
  Tensor rm = in.running_mean.to(f64).clone(), rv = in.running_var.to(f64).clone();
  Tensor out = empty({c.n, c.c, c.s}, o), dx = empty({c.n, c.c, c.s}, o);
  Tensor mean = empty({c.c}, o), rstd = empty({c.c}, o), dw = empty({c.c}, o), db = empty({c.c}, o);
  const ChannelLayout l{c.n, c.c, c.s, c.c * c.s, c.s, 1};
  BatchNormParams params{ptr_or_null(w), ptr_or_null(b), f64, nullptr, nullptr, f64};
  if (c.running || !c.training) {
    params.running_mean = rm.data_ptr();
    params.running_var = rv.data_ptr();
  }
  params.residual = c.residual ? z.data_ptr() : nullptr;
  params.relu = c.relu;
  const void* relu_out = c.relu && !c.residual ? out.data_ptr() : nullptr;
  run_on(Device::cpu(), kernels::batch_norm_forward, [&](Device) {
    return std::tuple(out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), static_cast<const void*>(x.data_ptr()), f64,
                      l, params, c.training, 0.1, 1e-5);
  });
  void* dwp = c.has_params() ? dw.data_ptr() : nullptr;
  void* dbp = c.has_params() ? db.data_ptr() : nullptr;
  run_on(Device::cpu(), kernels::batch_norm_backward, [&](Device) {
    return std::tuple(dx.data_ptr(), dwp, dbp, static_cast<const void*>(dout.data_ptr()), relu_out,
                      static_cast<const void*>(x.data_ptr()), f64, l, static_cast<const void*>(mean.data_ptr()),
                      static_cast<const void*>(rstd.data_ptr()), ptr_or_null(w), f64, c.training);
  });
  Results r{out, mean, rstd, rm, rv, dx};
  if (c.has_params()) {
    r.push_back(dw);
    r.push_back(db);
  }
  return r;
}

// Runs the case under both schedules and checks them against each other (the same bits) and
// against the reference: the output within one rounding to the dtype after float math, the
// statistics (float sums of exact values) within 1e-4, the running statistics within one rounding
// of their dtype, and the gradients within four roundings of the dtype.
void check_case(const Case& c) {
  INFO(dtype_name(c.dtype) << " layout " << static_cast<int>(c.layout) << " [" << c.n << ", " << c.c << ", " << c.s
                           << "] params " << static_cast<int>(c.params) << (c.training ? " training" : " eval")
                           << (c.running ? " with running statistics" : "") << (c.residual ? ", residual" : "")
                           << (c.relu ? ", relu" : ""));
  const Inputs in = inputs(c);
  const Results low = emulate_any(c, in, simt::Schedule::Lowest);
  const Results high = emulate_any(c, in, simt::Schedule::Highest);
  const Results ref = reference(c, in);
  REQUIRE(low.size() == ref.size());
  const auto rounding = [](DType t) { return t == DType::BFloat16 ? 2e-2 : t == DType::Float16 ? 3e-3 : 1e-4; };
  const double tol = rounding(c.dtype), ptol = rounding(c.param_dtype());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(kNames[i]);
    CHECK(same_bits(low[i], high[i]));
    const double t = i == 0 ? tol : i < 3 ? 1e-4 : i < 5 ? ptol : 4 * tol;
    CHECK(worst_ratio(low[i], ref[i], t, t) <= 1.0);
  }
}

}  // namespace

TEST_CASE("emulated: batch_norm's CUDA kernels match the CPU in float64 in each layout, training and eval",
          "[simt][batch_norm]") {
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16, DType::Float16);
  struct Geometry {
    Layout layout;
    int64_t n, c, s;
    int64_t chunks;  // of the per-channel sums, as bn_plan makes them
    int bx;          // channels per block: 32 when channels are the fastest dim, else 1
  };
  const Geometry geometries[] = {
      {Layout::NCHW, 3, 3, 3000, 2, 1},          // two chunks of 4500 over (n, s)
      {Layout::NCHW, 2, 3, 5, 1, 1},             // fewer values than lanes
      {Layout::ChannelsLast, 4, 40, 300, 9, 32},  // two channel groups, the second of 8; a short last chunk
      {Layout::Rows, 500, 5, 1, 3, 32},          // [N, C]: channels are the fastest dim
      {Layout::RowsColumnMajor, 9000, 2, 1, 2, 1},  // [N, C] stored column-major
  };
  struct Mode {
    Params params;
    bool training, running, relu = false, residual = false;
  };
  const Mode modes[] = {{Params::Float32, true, true},
                        {Params::InputDType, true, false},
                        {Params::None, true, true},
                        {Params::Float32, false, true},
                        {Params::None, false, true},
                        {Params::Float32, true, true, true, false},
                        {Params::InputDType, true, false, true, true},
                        {Params::Float32, false, true, true, false}};
  for (const Geometry& g : geometries) {
    for (const Mode& m : modes) {
      Case c;
      c.dtype = dtype;
      c.layout = g.layout;
      c.n = g.n;
      c.c = g.c;
      c.s = g.s;
      c.params = m.params;
      c.training = m.training;
      c.running = m.running;
      c.relu = m.relu;
      c.residual = m.residual;
      const bn::BnPlan plan = bn::bn_plan(c.channel_layout());
      REQUIRE(plan.chunks == g.chunks);
      REQUIRE(plan.bx == g.bx);
      check_case(c);
    }
  }
}
