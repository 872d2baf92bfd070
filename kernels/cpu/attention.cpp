// CPU reference of scaled dot-product attention. Forward: one pass per query row with float
// (double for float64) accumulation. Backward: per batch entry, probabilities are recomputed from
// the saved log-sum-exp; dq is reduced over keys per query row and dk/dv over queries per key row,
// each element by one thread in a fixed order, so gradients do not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

// The rows of batch entry b: its offsets are found once (attention_offsets), then every access is
// a multiply-add.
template <typename Acc> struct Rows {
  const AttentionArgs& a;
  const void* q;
  const void* k;
  const void* v;
  PhiloxState philox;  // resolved
  int64_t b = -1;  // the selected batch entry
  AttentionOffsets o{0, 0, 0, 0};

  Rows(const AttentionArgs& args, const void* q_, const void* k_, const void* v_)
      : a(args), q(q_), k(k_), v(v_), philox(philox_resolve(args.philox)) {}
  void select(int64_t entry) {
    if (entry == b) return;
    b = entry;
    o = attention_offsets(a.layout, entry);
  }
  Acc qv(int64_t i, int64_t e) const { return load_as<Acc>(q, a.dtype, o.q + i * a.q_row_stride + e); }
  Acc kv(int64_t j, int64_t e) const { return load_as<Acc>(k, a.dtype, o.k + j * a.k_row_stride + e); }
  Acc vv(int64_t j, int64_t e) const { return load_as<Acc>(v, a.dtype, o.v + j * a.v_row_stride + e); }
  // Score of (i, j) including mask; -inf when masked out.
  Acc score(int64_t i, int64_t j) const {
    if (a.causal && j > i) return -std::numeric_limits<Acc>::infinity();
    Acc s = 0;
    for (int64_t e = 0; e < a.E; ++e) s += qv(i, e) * kv(j, e);
    s *= static_cast<Acc>(a.scale);
    if (a.mask) {
      int64_t mo = o.mask + i * a.mask_row_stride + j * a.mask_col_stride;
      if (a.mask_dtype == DType::Bool) {
        if (!static_cast<const bool*>(a.mask)[mo]) return -std::numeric_limits<Acc>::infinity();
      } else {
        s += load_as<Acc>(a.mask, a.mask_dtype, mo);
      }
    }
    return s;
  }
  Acc keep_scale(int64_t i, int64_t j) const {
    if (a.dropout_p <= 0) return 1;
    uint64_t idx = static_cast<uint64_t>((b * a.L + i) * a.S + j);
    return attention_keep(philox, idx, a.dropout_p) ? static_cast<Acc>(1.0 / (1.0 - a.dropout_p)) : Acc(0);
  }
};

template <typename Acc>
void forward(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a) {
  const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  cpu::parallel_for(a.batch * a.L, cpu::grain_for(a.S * (a.E + a.Ev)), [&](int64_t, int64_t r0, int64_t r1) {
    Rows<Acc> r(a, q, k, v);
    std::vector<Acc> s(static_cast<size_t>(a.S));
    std::vector<Acc> acc(static_cast<size_t>(a.Ev));
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t i = row % a.L;
      r.select(row / a.L);
      Acc m = -std::numeric_limits<Acc>::infinity();
      for (int64_t j = 0; j < a.S; ++j) {
        s[static_cast<size_t>(j)] = r.score(i, j);
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      if (m == -std::numeric_limits<Acc>::infinity()) {  // nothing visible
        for (int64_t e = 0; e < a.Ev; ++e) store_as<Acc>(out, a.dtype, row * a.Ev + e, Acc(0));
        store_as<Acc>(lse, lse_dtype, row, m);
        continue;
      }
      Acc sum = 0;
      for (int64_t j = 0; j < a.S; ++j) {
        Acc p = std::exp(s[static_cast<size_t>(j)] - m);
        sum += p;
        Acc pd = p * r.keep_scale(i, j);
        if (pd == Acc(0)) continue;
        for (int64_t e = 0; e < a.Ev; ++e) acc[static_cast<size_t>(e)] += pd * r.vv(j, e);
      }
      for (int64_t e = 0; e < a.Ev; ++e) store_as<Acc>(out, a.dtype, row * a.Ev + e, acc[static_cast<size_t>(e)] / sum);
      store_as<Acc>(lse, lse_dtype, row, m + std::log(sum));
    }
  });
}

template <typename Acc>
void backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
              const void* k, const void* v, const AttentionArgs& a) {
  Rows<Acc> r(a, q, k, v);
  const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  const size_t LS = static_cast<size_t>(a.L * a.S);
  std::vector<Acc> p(LS), ds(LS), pd(LS);  // probabilities, score gradients, dropped probabilities
  for (int64_t b = 0; b < a.batch; ++b) {
    r.select(b);
    // Per query row: P, the dropped P, and dS = P * (dP - D) with D = dO . O.
    cpu::parallel_for(a.L, cpu::grain_for(a.S * (a.E + a.Ev)), [&](int64_t, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t row = b * a.L + i;
        Acc l = load_as<Acc>(lse, lse_dtype, row);
        Acc d = 0;
        for (int64_t e = 0; e < a.Ev; ++e) {
          d += load_as<Acc>(dout, a.dtype, row * a.Ev + e) * load_as<Acc>(out, a.dtype, row * a.Ev + e);
        }
        for (int64_t j = 0; j < a.S; ++j) {
          const size_t ij = static_cast<size_t>(i * a.S + j);
          Acc s = r.score(i, j);
          Acc pij = (l == -std::numeric_limits<Acc>::infinity() || s == -std::numeric_limits<Acc>::infinity())
                        ? Acc(0)
                        : std::exp(s - l);
          Acc keep = r.keep_scale(i, j);
          Acc dpd = 0;  // dO_i . V_j
          for (int64_t e = 0; e < a.Ev; ++e) dpd += load_as<Acc>(dout, a.dtype, row * a.Ev + e) * r.vv(j, e);
          p[ij] = pij;
          pd[ij] = pij * keep;
          ds[ij] = pij * (dpd * keep - d);
        }
        const Acc sc = static_cast<Acc>(a.scale);
        for (int64_t e = 0; e < a.E; ++e) {
          Acc g = 0;
          for (int64_t j = 0; j < a.S; ++j) g += ds[static_cast<size_t>(i * a.S + j)] * r.kv(j, e);
          store_as<Acc>(dq, a.dtype, row * a.E + e, g * sc);
        }
      }
    });
    // Per key row: dK = scale * dS^T Q, dV = (dropped P)^T dO.
    cpu::parallel_for(a.S, cpu::grain_for(a.L * (a.E + a.Ev)), [&](int64_t, int64_t j0, int64_t j1) {
      const Acc sc = static_cast<Acc>(a.scale);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t krow = b * a.S + j;
        for (int64_t e = 0; e < a.E; ++e) {
          Acc g = 0;
          for (int64_t i = 0; i < a.L; ++i) g += ds[static_cast<size_t>(i * a.S + j)] * r.qv(i, e);
          store_as<Acc>(dk, a.dtype, krow * a.E + e, g * sc);
        }
        for (int64_t e = 0; e < a.Ev; ++e) {
          Acc g = 0;
          for (int64_t i = 0; i < a.L; ++i) {
            g += pd[static_cast<size_t>(i * a.S + j)] * load_as<Acc>(dout, a.dtype, (b * a.L + i) * a.Ev + e);
          }
          store_as<Acc>(dv, a.dtype, krow * a.Ev + e, g);
        }
      }
    });
  }
}

}  // namespace

void attention_forward_cpu(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a,
                           const KernelContext&) {
  if (a.dtype == DType::Float64) {
    forward<double>(out, lse, q, k, v, a);
  } else if (is_floating(a.dtype)) {
    forward<float>(out, lse, q, k, v, a);
  } else {
    throw DTypeError(std::string("scaled_dot_product_attention: unsupported dtype ") + dtype_name(a.dtype));
  }
}

void attention_backward_cpu(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse,
                            const void* q, const void* k, const void* v, const AttentionArgs& a,
                            const KernelContext&) {
  if (a.dtype == DType::Float64) {
    backward<double>(dq, dk, dv, dout, out, lse, q, k, v, a);
  } else {
    backward<float>(dq, dk, dv, dout, out, lse, q, k, v, a);
  }
}

}  // namespace kiln
