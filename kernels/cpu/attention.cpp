// CPU scaled dot-product attention as GEMMs (kernels/matmul.h, so OpenBLAS where it loads) around
// row-wise softmax passes, in float (double for float64): the flash-attention formulation, blocked
// over query rows but not over keys (a block's score rows fit in cache at the sizes a CPU trains).
// Forward, per block of 64 query rows: S = scale Q K^T against the keys the block sees, each row
// masked, exponentiated against its maximum and summed (the log-sum-exp saved), O = P V divided by
// the row sums. Backward, per batch entry, block by block: P recomputed from the log-sum-exp,
// dP = dO V^T, dS = P (dP keep - rowsum(dO * O)), dQ = scale dS K, and dK += scale dS^T Q,
// dV += (P keep)^T dO. Non-obvious decisions:
// - Causal blocks are skipped: a block's products stop at the last key its last row sees, so the
//   upper triangle is computed only inside the diagonal blocks (about half the work at long L).
// - Forward tasks are (entry, block) pairs and backward tasks are entries, spread over the pool with
//   a one-thread GEMM each, because a GPT's attention is many small products; one task runs on the
//   caller, whose GEMM then uses every thread.
// - The dtype is resolved once per operand: float32 and float64 rows are read in place (the GEMM
//   takes their row strides), float16 and bfloat16 rows are converted to float per block.
// - Every element comes from GEMM calls and row passes in a fixed order (dK and dV add the blocks in
//   order), so with kiln's GEMM the results do not depend on the thread count (a threaded OpenBLAS
//   gives a product other bits at another thread count: kernels/cpu/blas.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox_lanes.h"
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
  cpu::PhiloxLanes lanes;  // the dropout draws of this task, in order along each row
  int64_t b = -1;          // the selected batch entry
  AttentionOffsets o{};

  Rows(const AttentionArgs& args, const void* q_, const void* k_, const void* v_)
      : a(args), q(q_), k(k_), v(v_), lanes(philox_resolve(args.philox)) {}
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
  Acc keep_scale(int64_t i, int64_t j) {
    if (a.dropout_p <= 0) return 1;
    const auto idx = static_cast<uint64_t>((b * a.L + i) * a.S + j);
    const bool keep = attention_keep_word(lanes.word(idx >> 1, (idx & 1) ? 2 : 0), a.dropout_p);
    return keep ? static_cast<Acc>(1.0 / (1.0 - a.dropout_p)) : Acc(0);
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
    Acc* dst = buf.data() + i * cols;
    const int64_t first = offset + i * row_stride;
    if constexpr (std::is_same_v<Acc, float>) {
      if (cpu::widens_to_float(dtype)) {  // float16 and bfloat16 rows: the bulk conversion
        cpu::widen_to_float(dst, static_cast<const char*>(base) + first * int64_t(element_size(dtype)), dtype, cols);
        continue;
      }
    }
    for (int64_t e = 0; e < cols; ++e) dst[e] = load_as<Acc>(base, dtype, first + e);
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

// Writes Acc rows (rows x cols, leading dimension ld_src) to `dst` of `dtype` at element `offset`,
// its rows `ld` apart.
template <typename Acc>
void store_rows(void* dst, DType dtype, int64_t offset, int64_t ld, const Acc* src, int64_t ld_src, int64_t rows,
                int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const Acc* row = src + i * ld_src;
    const int64_t first = offset + i * ld;
    if (dtype == acc_dtype(std::is_same_v<Acc, double>)) {
      std::copy(row, row + cols, static_cast<Acc*>(dst) + first);
      continue;
    }
    if constexpr (std::is_same_v<Acc, float>) {
      if (cpu::widens_to_float(dtype)) {  // float16 and bfloat16 rows: the bulk conversion
        cpu::narrow_from_float(static_cast<char*>(dst) + first * int64_t(element_size(dtype)), dtype, row, cols);
        continue;
      }
    }
    for (int64_t e = 0; e < cols; ++e) store_as<Acc>(dst, dtype, first + e, row[e]);
  }
}

// The row passes' loops over a row of scores, compiled for baseline x86-64 and for AVX2
// (KILN_CPU_CLONES). Each clone does the same operations per element, and a maximum does not depend
// on the order it is taken in (NaNs are skipped either way; a zero's sign cannot change an exp or
// the log-sum-exp), so the bits are those of the element-at-a-time loops. The row sums stay one
// running sum in key order: summed in lanes they would round differently.
template <typename Acc> KILN_CPU_CLONES Acc row_max(const Acc* row, int64_t n) {
  return cpu::lane_max<Acc>(n, [&](int64_t j) { return row[j]; });
}
// row[j] = exp(row[j] - shift): a hidden score is -inf, and exp(-inf) is 0 (ew::exp_fn has no
// branch for it).
template <typename Acc> KILN_CPU_CLONES void exp_shifted(Acc* row, int64_t n, Acc shift) {
  for (int64_t j = 0; j < n; ++j) row[j] = ew::exp_fn(row[j] - shift);
}
// dS = P (dP - D), in place over dP.
template <typename Acc> KILN_CPU_CLONES void ds_row(Acc* __restrict dp, const Acc* __restrict p, int64_t n, Acc d) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - d);
}

// The visible keys of query row i end before this (causal: i + 1; else S).
inline int64_t visible_end(const AttentionArgs& a, int64_t i) { return a.causal ? std::min(a.S, i + 1) : a.S; }

// Query rows per block: a block's scores are one GEMM against the keys its last row sees.
constexpr int64_t kRowBlock = 64;

// Query rows [i0, i1) of batch entry b, and the keys they see: [0, kend).
struct Block {
  int64_t b, i0, i1, kend;
  int64_t rows() const { return i1 - i0; }
};

inline Block block_of(const AttentionArgs& a, int64_t b, int64_t i0) {
  const int64_t i1 = std::min(a.L, i0 + kRowBlock);
  return {b, i0, i1, visible_end(a, i1 - 1)};
}

// Forward of one block: scores = scale Q K^T (rows x kend), the row passes, O = P V / rowsum.
template <typename Acc> struct ForwardBlock {
  const AttentionArgs& a;
  void* out;
  void* lse;
  std::vector<Acc> qbuf, kbuf, vbuf, scores, o, inv_sum;

  void run(Rows<Acc>& r, const Block& blk) {
    constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
    const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
    r.select(blk.b);
    const int64_t rows = blk.rows(), kend = blk.kend;
    const Operand<Acc> Q = rows_of<Acc>(r.q, a.dtype, r.o.q + blk.i0 * a.q_row_stride, rows, a.E, a.q_row_stride, qbuf);
    const Operand<Acc> K = rows_of<Acc>(r.k, a.dtype, r.o.k, kend, a.E, a.k_row_stride, kbuf);
    const Operand<Acc> V = rows_of<Acc>(r.v, a.dtype, r.o.v, kend, a.Ev, a.v_row_stride, vbuf);
    scores.resize(static_cast<size_t>(rows * kend));
    inv_sum.resize(static_cast<size_t>(rows));
    Acc* s = scores.data();
    mm<Acc>(false, true, rows, kend, a.E, a.scale, Q.data, Q.ld, K.data, K.ld, 0.0, s, kend);
    // Row passes: mask, max, exp, sum; the row becomes its (dropped) probabilities before division.
    for (int64_t i = blk.i0; i < blk.i1; ++i) {
      Acc* row = s + (i - blk.i0) * kend;
      const int64_t end = visible_end(a, i);
      if (a.mask) {
        for (int64_t j = 0; j < end; ++j) row[j] = r.masked(i, j, row[j]);
      }
      Acc m = row_max(row, end);
      // The max skips NaN: a row whose visible scores are all NaN is not a masked row, and takes NaN
      // through exp and the sum to its output and lse (and so to its gradients), as softmax does.
      if (m == kNegInf && std::any_of(row, row + end, [](Acc x) { return std::isnan(x); })) {
        m = std::numeric_limits<Acc>::quiet_NaN();
      }
      std::fill(row + end, row + kend, Acc(0));
      Acc& inv = inv_sum[static_cast<size_t>(i - blk.i0)];
      if (m == kNegInf) {  // nothing visible: a zero row, lse = -inf
        std::fill(row, row + end, Acc(0));
        inv = 0;
        store_as<Acc>(lse, lse_dtype, blk.b * a.L + i, kNegInf);
        continue;
      }
      exp_shifted(row, end, m);
      Acc sum = 0;
      for (int64_t j = 0; j < end; ++j) sum += row[j];
      if (a.dropout_p > 0) {
        for (int64_t j = 0; j < end; ++j) row[j] *= r.keep_scale(i, j);
      }
      inv = Acc(1) / sum;
      store_as<Acc>(lse, lse_dtype, blk.b * a.L + i, m + std::log(sum));
    }
    o.resize(static_cast<size_t>(rows * a.Ev));
    mm<Acc>(false, false, rows, a.Ev, kend, 1.0, s, kend, V.data, V.ld, 0.0, o.data(), a.Ev);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t e = 0; e < a.Ev; ++e) o[static_cast<size_t>(i * a.Ev + e)] *= inv_sum[static_cast<size_t>(i)];
    }
    store_rows<Acc>(out, a.dtype, r.o.o + blk.i0 * a.o_row_stride, a.o_row_stride, o.data(), a.Ev, rows, a.Ev);
  }
};

// Every (batch entry, row block) is a task; tasks share nothing, so they spread over the pool (their
// GEMMs then run on one thread each), and a single task runs on the caller with every thread.
template <typename Acc>
void forward(void* out, void* lse, const void* q, const void* k, const void* v, const AttentionArgs& a) {
  const int64_t blocks = (a.L + kRowBlock - 1) / kRowBlock;
  const Rows<Acc> proto(a, q, k, v);
  cpu::parallel_for(a.batch * blocks, 1, [&](int64_t, int64_t t0, int64_t t1) {
    Rows<Acc> r = proto;
    ForwardBlock<Acc> f{a, out, lse, {}, {}, {}, {}, {}, {}};
    for (int64_t t = t0; t < t1; ++t) f.run(r, block_of(a, t / blocks, (t % blocks) * kRowBlock));
  });
}

// Backward of one batch entry, a row block at a time: P recomputed, dP = dO V^T, the row pass, then
// dQ rows = scale dS K, and dK += scale dS^T Q, dV += (dropped P)^T dO over the keys the block sees.
// The blocks run in order, so dK and dV add up the same way for any thread count.
template <typename Acc> struct BackwardEntry {
  const AttentionArgs& a;
  void* dq;
  void* dk;
  void* dv;
  const void* dout;
  const void* out;
  const void* lse;
  std::vector<Acc> qbuf, kbuf, vbuf, dobuf, obuf, p, ds, dq_rows, dk_acc, dv_acc;

  // `rows` x `cols` of a gradient at `offset`, its rows `ld` apart, as Acc: in place when its dtype
  // is Acc, else in `buf` (rows `cols` apart), which write_back then stores as the dtype.
  struct Target {
    Acc* data;
    int64_t ld;
  };
  bool in_place() const { return a.dtype == acc_dtype(std::is_same_v<Acc, double>); }
  Target rows_at(void* dst, int64_t offset, int64_t ld, int64_t rows, int64_t cols, std::vector<Acc>& buf) {
    if (in_place()) return {static_cast<Acc*>(dst) + offset, ld};
    buf.resize(static_cast<size_t>(rows * cols));
    return {buf.data(), cols};
  }
  void write_back(void* dst, int64_t offset, int64_t ld, const Target& t, int64_t rows, int64_t cols) {
    if (!in_place()) store_rows<Acc>(dst, a.dtype, offset, ld, t.data, t.ld, rows, cols);
  }

  void run(Rows<Acc>& r, int64_t b) {
    constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
    const DType lse_dtype = a.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
    r.select(b);
    const Target dK = rows_at(dk, r.o.dk, a.dk_row_stride, a.S, a.E, dk_acc);
    const Target dV = rows_at(dv, r.o.dv, a.dv_row_stride, a.S, a.Ev, dv_acc);
    for (int64_t j = 0; j < a.S; ++j) {
      std::fill_n(dK.data + j * dK.ld, a.E, Acc(0));
      std::fill_n(dV.data + j * dV.ld, a.Ev, Acc(0));
    }
    for (int64_t i0 = 0; i0 < a.L; i0 += kRowBlock) {
      const Block blk = block_of(a, b, i0);
      const int64_t rows = blk.rows(), kend = blk.kend;
      const Operand<Acc> Q = rows_of<Acc>(r.q, a.dtype, r.o.q + i0 * a.q_row_stride, rows, a.E, a.q_row_stride, qbuf);
      const Operand<Acc> K = rows_of<Acc>(r.k, a.dtype, r.o.k, kend, a.E, a.k_row_stride, kbuf);
      const Operand<Acc> V = rows_of<Acc>(r.v, a.dtype, r.o.v, kend, a.Ev, a.v_row_stride, vbuf);
      const int64_t orow = r.o.o + i0 * a.o_row_stride;
      const Operand<Acc> dO = rows_of<Acc>(dout, a.dtype, orow, rows, a.Ev, a.o_row_stride, dobuf);
      const Operand<Acc> O = rows_of<Acc>(out, a.dtype, orow, rows, a.Ev, a.o_row_stride, obuf);
      // p: the scores, then P, then the dropped P (for dV); ds: dP = dO V^T, then dS.
      p.resize(static_cast<size_t>(rows * kend));
      ds.resize(static_cast<size_t>(rows * kend));
      mm<Acc>(false, true, rows, kend, a.E, a.scale, Q.data, Q.ld, K.data, K.ld, 0.0, p.data(), kend);
      mm<Acc>(false, true, rows, kend, a.Ev, 1.0, dO.data, dO.ld, V.data, V.ld, 0.0, ds.data(), kend);
      for (int64_t i = i0; i < blk.i1; ++i) {
        Acc* prow = p.data() + (i - i0) * kend;
        Acc* drow = ds.data() + (i - i0) * kend;
        const Acc l = load_as<Acc>(lse, lse_dtype, b * a.L + i);
        Acc d = 0;  // D_i = dO_i . O_i
        for (int64_t e = 0; e < a.Ev; ++e) d += dO.data[(i - i0) * dO.ld + e] * O.data[(i - i0) * O.ld + e];
        const int64_t end = l == kNegInf ? 0 : visible_end(a, i);
        if (a.mask) {
          for (int64_t j = 0; j < end; ++j) prow[j] = r.masked(i, j, prow[j]);
        }
        exp_shifted(prow, end, l);
        if (a.dropout_p > 0) {
          for (int64_t j = 0; j < end; ++j) {
            const Acc keep = r.keep_scale(i, j);
            drow[j] = prow[j] * (drow[j] * keep - d);
            prow[j] *= keep;
          }
        } else {
          ds_row(drow, prow, end, d);
        }
        std::fill(prow + end, prow + kend, Acc(0));
        std::fill(drow + end, drow + kend, Acc(0));
      }
      // dQ rows, written as their dtype; dK and dV accumulate over the blocks.
      const int64_t dq_offset = r.o.dq + i0 * a.dq_row_stride;
      const Target dQ = rows_at(dq, dq_offset, a.dq_row_stride, rows, a.E, dq_rows);
      mm<Acc>(false, false, rows, a.E, kend, a.scale, ds.data(), kend, K.data, K.ld, 0.0, dQ.data, dQ.ld);
      write_back(dq, dq_offset, a.dq_row_stride, dQ, rows, a.E);
      mm<Acc>(true, false, kend, a.E, rows, a.scale, ds.data(), kend, Q.data, Q.ld, 1.0, dK.data, dK.ld);
      mm<Acc>(true, false, kend, a.Ev, rows, 1.0, p.data(), kend, dO.data, dO.ld, 1.0, dV.data, dV.ld);
    }
    write_back(dk, r.o.dk, a.dk_row_stride, dK, a.S, a.E);
    write_back(dv, r.o.dv, a.dv_row_stride, dV, a.S, a.Ev);
  }
};

// Batch entries spread over the pool; a single entry runs on the caller, its GEMMs on every thread.
template <typename Acc>
void backward(void* dq, void* dk, void* dv, const void* dout, const void* out, const void* lse, const void* q,
              const void* k, const void* v, const AttentionArgs& a) {
  const Rows<Acc> proto(a, q, k, v);
  cpu::parallel_for(a.batch, 1, [&](int64_t, int64_t b0, int64_t b1) {
    Rows<Acc> r = proto;
    BackwardEntry<Acc> e{a, dq, dk, dv, dout, out, lse, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    for (int64_t b = b0; b < b1; ++b) e.run(r, b);
  });
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
