// CPU scaled dot-product attention, per batch entry as GEMMs (kernels/matmul.h, so OpenBLAS where
// it loads) around row-wise softmax passes, in float (double for float64): the flash-attention
// formulation without the tiling a CPU's caches do not need at these sizes. Forward: S = scale Q K^T,
// each row masked, exponentiated against its maximum and summed (the log-sum-exp saved), O = P V
// divided by the row sums. Backward: P recomputed from the log-sum-exp, dP = dO V^T,
// dS = P (dP keep - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q, dV = (P keep)^T dO.
// Non-obvious decisions:
// - The dtype is resolved once per operand: float32 and float64 rows are read in place (the GEMM
//   takes their row strides), float16 and bfloat16 are converted to float once per batch entry.
// - Hidden positions (causal, a false mask) are skipped in the row passes, and a causal row stops at
//   its diagonal; the GEMMs compute the whole L x S block (the upper triangle is wasted work, still
//   far cheaper than the scalar loops it replaced).
// - Every element is produced by one GEMM call or one row pass in a fixed order, so results do not
//   depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

// Batch entry b's offsets (found once, attention_offsets), its mask and its dropout draws.
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
  // Score s of (i, j) after the mask: -inf where a bool mask hides it, s + mask where it is additive.
  Acc masked(int64_t i, int64_t j, Acc s) const {
    const int64_t mo = o.mask + i * a.mask_row_stride + j * a.mask_col_stride;
    if (a.mask_dtype == DType::Bool) {
      return static_cast<const bool*>(a.mask)[mo] ? s : -std::numeric_limits<Acc>::infinity();
    }
    return s + load_as<Acc>(a.mask, a.mask_dtype, mo);
  }
  Acc keep_scale(int64_t i, int64_t j) const {
    if (a.dropout_p <= 0) return 1;
    uint64_t idx = static_cast<uint64_t>((b * a.L + i) * a.S + j);
    return attention_keep(philox, idx, a.dropout_p) ? static_cast<Acc>(1.0 / (1.0 - a.dropout_p)) : Acc(0);
  }
};

// One operand of batch entry b as Acc rows: in place when its dtype is Acc (ld: its row stride),
// else converted into `buf` (ld: the row length).
template <typename Acc> struct Operand {
  const Acc* data = nullptr;
  int64_t ld = 0;
};

template <typename Acc>
Operand<Acc> rows_of(const void* base, DType dtype, int64_t offset, int64_t rows, int64_t cols, int64_t row_stride,
                     std::vector<Acc>& buf) {
  if (dtype == (std::is_same_v<Acc, double> ? DType::Float64 : DType::Float32)) {
    return {static_cast<const Acc*>(base) + offset, row_stride};
  }
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t e = 0; e < cols; ++e) buf[static_cast<size_t>(i * cols + e)] = load_as<Acc>(base, dtype, offset + i * row_stride + e);
  }
  return {buf.data(), cols};
}

constexpr DType acc_dtype(bool f64) { return f64 ? DType::Float64 : DType::Float32; }

// C (m x n, ldc) = alpha op(A) op(B) + beta C, in Acc.
template <typename Acc>
void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Acc* a, int64_t lda, const Acc* b,
        int64_t ldb, double beta, Acc* c, int64_t ldc) {
  gemm_cpu(gemm_args(acc_dtype(std::is_same_v<Acc, double>), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc),
           KernelContext{});
}

// Writes Acc rows (n x cols, contiguous) to `dst` of `dtype` at element `offset`.
template <typename Acc> void store_rows(void* dst, DType dtype, int64_t offset, const Acc* src, int64_t count) {
  if (dtype == acc_dtype(std::is_same_v<Acc, double>)) {
    std::copy(src, src + count, static_cast<Acc*>(dst) + offset);
    return;
  }
  for (int64_t x = 0; x < count; ++x) store_as<Acc>(dst, dtype, offset + x, src[x]);
}

// The visible keys of query row i end before this (causal: i + 1; else S).
inline int64_t visible_end(const AttentionArgs& a, int64_t i) { return a.causal ? std::min(a.S, i + 1) : a.S; }

template <typename Acc>
void forward(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a) {
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Rows<Acc> r(a, q, k, v);
  std::vector<Acc> qbuf, kbuf, vbuf, scores(static_cast<size_t>(a.L * a.S)), o(static_cast<size_t>(a.L * a.Ev));
  std::vector<Acc> inv_sum(static_cast<size_t>(a.L));
  for (int64_t b = 0; b < a.batch; ++b) {
    r.select(b);
    const Operand<Acc> Q = rows_of<Acc>(q, a.dtype, r.o.q, a.L, a.E, a.q_row_stride, qbuf);
    const Operand<Acc> K = rows_of<Acc>(k, a.dtype, r.o.k, a.S, a.E, a.k_row_stride, kbuf);
    const Operand<Acc> V = rows_of<Acc>(v, a.dtype, r.o.v, a.S, a.Ev, a.v_row_stride, vbuf);
    Acc* s = scores.data();
    mm<Acc>(false, true, a.L, a.S, a.E, a.scale, Q.data, Q.ld, K.data, K.ld, 0.0, s, a.S);
    // Row passes: mask, max, exp, sum; the row becomes its (dropped) probabilities before division.
    cpu::parallel_for(a.L, cpu::grain_for(a.S * 4), [&](int64_t, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        Acc* row = s + i * a.S;
        const int64_t end = visible_end(a, i);
        Acc m = kNegInf;
        for (int64_t j = 0; j < end; ++j) {
          if (a.mask) row[j] = r.masked(i, j, row[j]);
          m = std::max(m, row[j]);
        }
        std::fill(row + end, row + a.S, Acc(0));
        if (m == kNegInf) {  // nothing visible: a zero row, lse = -inf
          std::fill(row, row + end, Acc(0));
          inv_sum[static_cast<size_t>(i)] = 0;
          store_as<Acc>(lse, lse_dtype, b * a.L + i, kNegInf);
          continue;
        }
        Acc sum = 0;
        for (int64_t j = 0; j < end; ++j) {
          const Acc p = row[j] == kNegInf ? Acc(0) : ew::exp_fn(row[j] - m);
          sum += p;
          row[j] = a.dropout_p > 0 ? p * r.keep_scale(i, j) : p;
        }
        inv_sum[static_cast<size_t>(i)] = Acc(1) / sum;
        store_as<Acc>(lse, lse_dtype, b * a.L + i, m + std::log(sum));
      }
    });
    mm<Acc>(false, false, a.L, a.Ev, a.S, 1.0, s, a.S, V.data, V.ld, 0.0, o.data(), a.Ev);
    for (int64_t i = 0; i < a.L; ++i) {
      for (int64_t e = 0; e < a.Ev; ++e) o[static_cast<size_t>(i * a.Ev + e)] *= inv_sum[static_cast<size_t>(i)];
    }
    store_rows<Acc>(out, a.dtype, b * a.L * a.Ev, o.data(), a.L * a.Ev);
  }
}

template <typename Acc>
void backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
              const void* k, const void* v, const AttentionArgs& a) {
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Rows<Acc> r(a, q, k, v);
  const size_t LS = static_cast<size_t>(a.L * a.S);
  std::vector<Acc> qbuf, kbuf, vbuf, dobuf, obuf, p(LS), ds(LS), grad;
  for (int64_t b = 0; b < a.batch; ++b) {
    r.select(b);
    const Operand<Acc> Q = rows_of<Acc>(q, a.dtype, r.o.q, a.L, a.E, a.q_row_stride, qbuf);
    const Operand<Acc> K = rows_of<Acc>(k, a.dtype, r.o.k, a.S, a.E, a.k_row_stride, kbuf);
    const Operand<Acc> V = rows_of<Acc>(v, a.dtype, r.o.v, a.S, a.Ev, a.v_row_stride, vbuf);
    const Operand<Acc> dO = rows_of<Acc>(dout, a.dtype, b * a.L * a.Ev, a.L, a.Ev, a.Ev, dobuf);
    const Operand<Acc> O = rows_of<Acc>(out, a.dtype, b * a.L * a.Ev, a.L, a.Ev, a.Ev, obuf);
    // p: the scores, then P; ds: dP = dO V^T, then dS. Then p becomes the dropped P (for dV).
    mm<Acc>(false, true, a.L, a.S, a.E, a.scale, Q.data, Q.ld, K.data, K.ld, 0.0, p.data(), a.S);
    mm<Acc>(false, true, a.L, a.S, a.Ev, 1.0, dO.data, dO.ld, V.data, V.ld, 0.0, ds.data(), a.S);
    cpu::parallel_for(a.L, cpu::grain_for(a.S * 4 + a.Ev), [&](int64_t, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        Acc* prow = p.data() + i * a.S;
        Acc* drow = ds.data() + i * a.S;
        const Acc l = load_as<Acc>(lse, lse_dtype, b * a.L + i);
        Acc d = 0;  // D_i = dO_i . O_i
        for (int64_t e = 0; e < a.Ev; ++e) d += dO.data[i * dO.ld + e] * O.data[i * O.ld + e];
        const int64_t end = l == kNegInf ? 0 : visible_end(a, i);
        for (int64_t j = 0; j < end; ++j) {
          const Acc s = a.mask ? r.masked(i, j, prow[j]) : prow[j];
          const Acc pij = s == kNegInf ? Acc(0) : ew::exp_fn(s - l);
          const Acc keep = a.dropout_p > 0 ? r.keep_scale(i, j) : Acc(1);
          drow[j] = pij * (drow[j] * keep - d);
          prow[j] = pij * keep;
        }
        std::fill(prow + end, prow + a.S, Acc(0));
        std::fill(drow + end, drow + a.S, Acc(0));
      }
    });
    // dQ = scale dS K, dK = scale dS^T Q, dV = (dropped P)^T dO, each written as its dtype.
    auto to_out = [&](void* dst, int64_t rows, int64_t cols, auto&& product) {
      const int64_t offset = b * rows * cols;
      if (a.dtype == acc_dtype(std::is_same_v<Acc, double>)) {
        product(static_cast<Acc*>(dst) + offset);
      } else {
        grad.resize(static_cast<size_t>(rows * cols));
        product(grad.data());
        store_rows<Acc>(dst, a.dtype, offset, grad.data(), rows * cols);
      }
    };
    to_out(dq, a.L, a.E, [&](Acc* c) { mm<Acc>(false, false, a.L, a.E, a.S, a.scale, ds.data(), a.S, K.data, K.ld, 0.0, c, a.E); });
    to_out(dk, a.S, a.E, [&](Acc* c) { mm<Acc>(true, false, a.S, a.E, a.L, a.scale, ds.data(), a.S, Q.data, Q.ld, 0.0, c, a.E); });
    to_out(dv, a.S, a.Ev, [&](Acc* c) { mm<Acc>(true, false, a.S, a.Ev, a.L, 1.0, p.data(), a.S, dO.data, dO.ld, 0.0, c, a.Ev); });
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
