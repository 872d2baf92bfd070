// CPU reference for fused cross-entropy. Targets are range-checked in one sequential scan before
// any work, so the error always names the first bad row whatever the thread count; sum and mean
// add per-chunk partials (in double) in chunk order.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"
#include "kernels/error.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

constexpr int64_t kRowGrainWork = 32768;  // elements of work per chunk of rows

using cpu::acc_t;
using cpu::ld;
using cpu::st;
using cpu::visit_float;

bool is_ignored(int64_t t, const CrossEntropyShape& s) { return t == s.ignore_index; }

int64_t check_targets(const int64_t* target, const CrossEntropyShape& s) {
  const int64_t rows = s.n * s.s;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target[r];
    if (is_ignored(t, s)) continue;
    if (t < 0 || t >= s.c) {
      throw IndexError("cross_entropy: target " + std::to_string(t) + " is out of range for " + std::to_string(s.c) +
                       " classes (at position " + std::to_string(r) + "; ignore_index is " +
                       std::to_string(s.ignore_index) + ")");
    }
    ++valid;
  }
  return valid;
}

int64_t row_grain(int64_t c) { return std::max<int64_t>(1, kRowGrainWork / std::max<int64_t>(3 * c, 1)); }

// A row's max, sum of exp(x - max) and sum of (x - max), for classes contiguous in memory (logits
// [N, C], the usual case), in cpu::lane_max's and lane_sum's lanes so that it vectorizes.
template <typename T, typename A>
KILN_CPU_CLONES void row_sums(const T* x, int64_t c, A& mx, A& se, A& sxm) {
  const A m = cpu::lane_max<A>(c, [&](int64_t j) { return ld<T, A>(x, j); });
  se = cpu::lane_sum<A>(c, [&](int64_t j) { return ew::exp_fn(ld<T, A>(x, j) - m); });
  sxm = cpu::lane_sum<A>(c, [&](int64_t j) { return ld<T, A>(x, j) - m; });
  mx = m;
}

// dx[j] = g * (exp((x[j] - m) - lsum) - (j == t ? on : off)) over a contiguous row.
template <typename T, typename A>
KILN_CPU_CLONES void row_grad(T* dx, const T* x, int64_t c, int64_t t, A g, A m, A lsum, A on, A off) {
  for (int64_t j = 0; j < c; ++j) {
    st<T, A>(dx, j, g * (ew::exp_fn((ld<T, A>(x, j) - m) - lsum) - (j == t ? on : off)));
  }
}

}  // namespace

void cross_entropy_forward_cpu(void* out, DType out_dtype, void* stats, int64_t* valid_count, const void* logits,
                               DType logits_dtype, const int64_t* target, const CrossEntropyShape& shape,
                               LossReduce reduce, const KernelContext&) {
  const int64_t valid = check_targets(target, shape);
  *valid_count = valid;
  const int64_t rows = shape.n * shape.s, c_n = shape.c, inner = shape.s;
  const double eps = shape.label_smoothing;
  const int64_t grain = row_grain(c_n);
  std::vector<double> partial(static_cast<size_t>(cpu::num_chunks(rows, grain)), 0.0);
  visit_float(logits_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(logits);
    A* rs = static_cast<A*>(stats);
    cpu::parallel_for(rows, grain, [&](int64_t chunk, int64_t b0, int64_t e0) {
      double acc = 0;
      for (int64_t r = b0; r < e0; ++r) {
        const int64_t base = (r / inner) * c_n * inner + r % inner;
        // Sums of x - max, so large logits (around +-1000) lose nothing to the magnitude of the max.
        A mx = -std::numeric_limits<A>::infinity(), se = 0, sxm = 0;
        if (inner == 1) {
          row_sums<T, A>(x + base, c_n, mx, se, sxm);
        } else {
          for (int64_t j = 0; j < c_n; ++j) mx = std::max(mx, ld<T, A>(x, base + j * inner));
          for (int64_t j = 0; j < c_n; ++j) {
            const A v = ld<T, A>(x, base + j * inner) - mx;
            se += ew::exp_fn(v);
            sxm += v;
          }
        }
        const A lsum = std::log(se);
        rs[2 * r] = mx;
        rs[2 * r + 1] = lsum;
        const int64_t t = target[r];
        A loss = 0;
        if (!is_ignored(t, shape)) {
          // (1 - eps) * (lse - x_t) + eps * mean_c (lse - x_c), with lse - x = lsum - (x - max).
          // Without smoothing the mean term is left out, not multiplied by 0: a -inf logit (a masked
          // class) makes it +inf, and 0 * inf would turn a finite loss into NaN.
          const A nll = lsum - (ld<T, A>(x, base + t * inner) - mx);
          loss = static_cast<A>(1.0 - eps) * nll;
          if (eps != 0.0) loss += static_cast<A>(eps) * (lsum - sxm / static_cast<A>(c_n));
        }
        if (reduce == LossReduce::None) {
          store_as<A>(out, out_dtype, r, loss);
        } else {
          acc += static_cast<double>(loss);
        }
      }
      partial[static_cast<size_t>(chunk)] = acc;
    });
  });
  if (reduce == LossReduce::None) return;
  double total = 0;
  for (double p : partial) total += p;
  // Mean over zero non-ignored rows is 0/0 = NaN, as in PyTorch.
  if (reduce == LossReduce::Mean) total /= static_cast<double>(valid);
  store_as<double>(out, out_dtype, 0, total);
}

void cross_entropy_backward_cpu(void* dlogits, const void* dout, DType dout_dtype, const void* logits,
                                DType logits_dtype, const void* stats, const int64_t* valid_count,
                                const int64_t* target, const CrossEntropyShape& shape, LossReduce reduce,
                                const KernelContext&) {
  const int64_t rows = shape.n * shape.s, c_n = shape.c, inner = shape.s;
  const double eps = shape.label_smoothing;
  double scale = 1.0;
  if (reduce != LossReduce::None) scale = load_as<double>(dout, dout_dtype, 0);
  if (reduce == LossReduce::Mean) scale /= static_cast<double>(*valid_count);
  visit_float(logits_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(logits);
    const A* rs = static_cast<const A*>(stats);
    T* dx = static_cast<T*>(dlogits);
    const A off_target = static_cast<A>(eps / static_cast<double>(c_n));
    const A on_target = static_cast<A>(1.0 - eps) + off_target;
    cpu::parallel_for(rows, row_grain(c_n), [&](int64_t, int64_t b0, int64_t e0) {
      for (int64_t r = b0; r < e0; ++r) {
        const int64_t base = (r / inner) * c_n * inner + r % inner;
        const int64_t t = target[r];
        if (is_ignored(t, shape)) {
          for (int64_t j = 0; j < c_n; ++j) st<T, A>(dx, base + j * inner, A(0));
          continue;
        }
        const A g = static_cast<A>(reduce == LossReduce::None ? load_as<double>(dout, dout_dtype, r) : scale);
        const A m = rs[2 * r], lsum = rs[2 * r + 1];
        if (inner == 1) {
          row_grad<T, A>(dx + base, x + base, c_n, t, g, m, lsum, on_target, off_target);
          continue;
        }
        for (int64_t j = 0; j < c_n; ++j) {
          const A p = ew::exp_fn((ld<T, A>(x, base + j * inner) - m) - lsum);
          st<T, A>(dx, base + j * inner, g * (p - (j == t ? on_target : off_target)));
        }
      }
    });
  });
}

}  // namespace kiln
