// What the CPU tests that run CUDA attention kernels on the emulator of kernels/simt/simt.h share
// (tests/kernels/test_attention_tc_simt.cpp, test_attention_scalar_simt.cpp): a problem and its
// operands in any dtype, output buffers between guard bands, the float64 reference from the CPU
// kernels, and the check that both of the emulator's schedules give the same bits and the reference's
// values.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "core/kiln.h"
#include "kernels/attention.h"
#include "kernels/simt/simt.h"
#include "tests/kernels/guarded.h"
#include "tests/kernels/twin.h"
#include "tests/worst_ratio.h"

namespace kiln::test {

// One problem: the arguments for the dtype under test, and the buffers that hold q, k, v and dout
// in that dtype, contiguous (q, k and v may be one buffer), with the element offsets where q, k and
// v start in theirs; optionally a mask, bool or of the dtype (args' mask strides locate it). The
// outputs are dense (attention_dense_outputs).
struct Problem {
  AttentionArgs args;
  Tensor q, k, v, dout, mask;
  int64_t q_at = 0, k_at = 0, v_at = 0;
  int64_t out_at = 0;  // where the output starts in its buffer, in elements (Outputs)
};

// The problem's operands in dtype t (copies of the buffers, the same layout), the arguments for
// them, and the copies' owners.
struct Operands {
  AttentionArgs args;
  std::vector<Tensor> owners;
  const void *q, *k, *v, *dout;
};
inline Operands operands(const Problem& pr, DType t) {
  Operands o;
  o.args = pr.args;
  o.args.dtype = t;
  o.owners = {pr.q.to(t), pr.k.to(t), pr.v.to(t), pr.dout.to(t)};
  const auto at = [&](size_t i, int64_t offset) {
    return static_cast<const void*>(static_cast<const char*>(o.owners[i].data_ptr()) +
                                    offset * static_cast<int64_t>(element_size(t)));
  };
  o.q = at(0, pr.q_at);
  o.k = at(1, pr.k_at);
  o.v = at(2, pr.v_at);
  o.dout = at(3, 0);
  if (pr.mask.defined()) {
    o.owners.push_back(pr.mask.dtype() == DType::Bool ? pr.mask : pr.mask.to(t));
    o.args.mask = o.owners.back().data_ptr();
    o.args.mask_dtype = o.owners.back().dtype();
  }
  return o;
}

// out, lse, dq, dk and dv, flat over the batch: [batch, L, E], [batch, L], [batch, S, E].
using Results = std::vector<Tensor>;

// The CPU kernels in float64, on the same values (already rounded to the dtype under test).
inline Results reference(const Problem& pr) {
  const Operands in = operands(pr, DType::Float64);
  const AttentionArgs& a = in.args;
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

// The kernels' outputs for a problem's arguments, each between guard bands: out (from element
// `out_at` of its buffer on), lse, the D rows the dq kernel writes for the dk/dv kernel, dq, dk and dv.
template <typename T> struct Outputs {
  explicit Outputs(const AttentionArgs& a, int64_t out_at = 0)
      : out(a.batch * a.L * a.Ev + out_at), dq(a.batch * a.L * a.E), dk(a.batch * a.S * a.E),
        dv(a.batch * a.S * a.Ev), lse(a.batch * a.L), d_rows(a.batch * a.L), out_at(out_at) {}
  T* out_data() { return out.data() + out_at; }
  // Checks the forward's guard bands, and returns out and lse as tensors.
  Results forward_results(const AttentionArgs& a) const {
    CHECK(out.bands_intact());
    CHECK(lse.bands_intact());
    return {out.tensor(a.dtype, {a.batch, a.L, a.Ev}, out_at), lse.tensor(DType::Float32, {a.batch, a.L})};
  }
  // Checks every guard band, and returns out, lse, dq, dk and dv as tensors.
  Results results(const AttentionArgs& a) const {
    CHECK(out.bands_intact());
    CHECK(lse.bands_intact());
    CHECK(d_rows.bands_intact());
    CHECK(dq.bands_intact());
    CHECK(dk.bands_intact());
    CHECK(dv.bands_intact());
    return {out.tensor(a.dtype, {a.batch, a.L, a.Ev}, out_at), lse.tensor(DType::Float32, {a.batch, a.L}),
            dq.tensor(a.dtype, {a.batch, a.L, a.E}), dk.tensor(a.dtype, {a.batch, a.S, a.E}),
            dv.tensor(a.dtype, {a.batch, a.S, a.Ev})};
  }
  Guarded<T> out, dq, dk, dv;
  Guarded<float> lse, d_rows;
  int64_t out_at;
};

// Runs `emulate` under both schedules and checks the runs against each other (the same bits) and
// against the float64 reference: the output within `tol` (relative, with an absolute floor of tol);
// each gradient within tol relative with a floor of tol times its largest element, as it sums L or S
// terms (as in the twin tests); the log-sum-exp, float32 arithmetic on exact inputs, within 1e-5.
// `emulate` may return out and lse alone (a forward checked without the backward). The fused backward
// (AttentionArgs::fused_backward) adds dQ's shares in the order its blocks run, which the two
// schedules reverse: there dq may differ in its last bits, and both runs' dq are held to the reference.
inline void check_emulated(const Problem& pr, const std::function<Results(simt::Schedule)>& emulate, double tol) {
  const AttentionArgs& a = pr.args;
  INFO(dtype_name(a.dtype) << " E " << a.E << " Ev " << a.Ev << " batch " << a.batch << " L " << a.L << " S " << a.S
                           << (a.causal ? " causal" : "") << (pr.mask.defined() ? " masked" : "") << " scale "
                           << a.scale << " dropout " << a.dropout_p);
  const Results low = emulate(simt::Schedule::Lowest);
  const Results high = emulate(simt::Schedule::Highest);
  const Results ref = reference(pr);
  REQUIRE((low.size() == 2 || low.size() == ref.size()));
  REQUIRE(high.size() == low.size());
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (size_t i = 0; i < low.size(); ++i) {
    INFO(names[i]);
    const bool summed_in_block_order = i == 2 && a.fused_backward;
    if (!summed_in_block_order) CHECK(same_bits(low[i], high[i]));
    const double rtol = i == 1 ? 1e-5 : tol;
    const double atol = i == 1 ? 1e-5 : i == 0 ? tol : tol * std::max(1.0, max_abs(ref[i]));
    CHECK(worst_ratio(low[i], ref[i], atol, rtol) <= 1.0);
    if (summed_in_block_order) CHECK(worst_ratio(high[i], ref[i], atol, rtol) <= 1.0);
  }
}

// Dense [B, L, E] q, [B, S, E] k, [B, S, Ev] v and [B, L, Ev] dout (Ev = E unless given): random
// values rounded to the dtype.
inline Problem dense_problem(DType dtype, int64_t E, int64_t B, int64_t L, int64_t S, bool causal, double scale,
                      double dropout, int64_t Ev = 0) {
  manual_seed(static_cast<uint64_t>(L * 7919 + S * 31 + E + (causal ? 1 : 0)));
  Problem pr;
  if (Ev == 0) Ev = E;
  pr.args = tensor_core_args(dtype, B, L, S, E, causal, scale);
  pr.args.Ev = Ev;
  pr.args.v_row_stride = Ev;
  pr.args.layout.v[0] = S * Ev;
  attention_dense_outputs(pr.args);
  pr.args.dropout_p = dropout;
  pr.args.philox = PhiloxState{0x9E3779B97F4A7C15ull, 48, nullptr};
  pr.q = randn({B, L, E}).to(dtype);
  pr.k = randn({B, S, E}).to(dtype);
  pr.v = randn({B, S, Ev}).to(dtype);
  pr.dout = randn({B, L, Ev}).to(dtype);
  return pr;
}


// The GPT's layout: q, k and v are views of one fused projection [B, T, 3 H E] of random values
// rounded to the dtype, heads split off without copies, so rows are 3 H E apart and batch entries
// run over (B, H) with strides of their own; dout is [B, H, T, E]. With `skew`, each row has `skew`
// elements more and q, k and v start `skew` elements in: skew 2 leaves 16-bit rows 4-byte aligned
// only.
inline Problem fused_projection_problem(DType dtype, int64_t B, int64_t H, int64_t T, int64_t E, bool causal,
                                        double scale, int64_t skew = 0) {
  Problem pr;
  pr.args = tensor_core_args(dtype, B * H, T, T, E, causal, scale);
  const int64_t row = 3 * H * E + skew;
  AttentionBatch& l = pr.args.layout;
  l.ndim = 2;
  l.sizes[0] = B;
  l.sizes[1] = H;
  l.q[0] = l.k[0] = l.v[0] = T * row;
  l.q[1] = l.k[1] = l.v[1] = E;
  pr.args.q_row_stride = pr.args.k_row_stride = pr.args.v_row_stride = row;
  attention_dense_outputs(pr.args);
  pr.q = pr.k = pr.v = randn({B, T, row}).to(dtype);
  pr.q_at = skew;
  pr.k_at = H * E + skew;
  pr.v_at = 2 * H * E + skew;
  pr.dout = randn({B, H, T, E}).to(dtype);
  return pr;
}

}  // namespace kiln::test
