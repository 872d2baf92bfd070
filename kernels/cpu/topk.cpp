// CPU reference for topk: each row is copied once as (value, index) pairs, in int64 for integer
// inputs and double for floats (both exact), and partially sorted, rows split over threads; the order
// (NaN highest, ties by lower index) is total, so results are exact.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"
#include "kernels/topk.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

// (value, index) order for topk: NaN above every number, ties by lower index.
bool greater_nan_high(double a, double b) {
  if (std::isnan(b)) return false;
  if (std::isnan(a)) return true;
  return a > b;
}
bool greater_nan_high(int64_t a, int64_t b) { return a > b; }

// The rows b0..e0 compared as V: int64 for integer inputs (exact past 2^53), double for floats.
template <typename V>
void select_rows(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t n,
                 int64_t k, bool largest, int64_t b0, int64_t e0) {
  std::vector<std::pair<V, int64_t>> row(static_cast<size_t>(n));
  auto before = [largest](const std::pair<V, int64_t>& x, const std::pair<V, int64_t>& y) {
    const bool xy = largest ? greater_nan_high(x.first, y.first) : greater_nan_high(y.first, x.first);
    if (xy) return true;
    const bool yx = largest ? greater_nan_high(y.first, x.first) : greater_nan_high(x.first, y.first);
    return !yx && x.second < y.second;
  };
  for (int64_t r = b0; r < e0; ++r) {
    for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = {load_as<V>(in, in_dtype, r * n + j), j};
    std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dst = r * k + j;
      if (indices) indices[dst] = row[static_cast<size_t>(j)].second;
      if (values) store_as<V>(values, values_dtype, dst, row[static_cast<size_t>(j)].first);
    }
  }
}

}  // namespace

void topk_cpu(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
              int64_t n, int64_t k, bool largest, const KernelContext&) {
  if (k > n) {
    throw Error("topk: k = " + std::to_string(k) + " is larger than the row size " + std::to_string(n));
  }
  if (k <= 0 || rows <= 0) return;
  const bool integral = is_integral(in_dtype, true);
  cpu::parallel_for(rows, cpu::grain_for(n), [&](int64_t, int64_t b0, int64_t e0) {
    if (integral) {
      select_rows<int64_t>(values, values_dtype, indices, in, in_dtype, n, k, largest, b0, e0);
    } else {
      select_rows<double>(values, values_dtype, indices, in, in_dtype, n, k, largest, b0, e0);
    }
  });
}

}  // namespace kiln
