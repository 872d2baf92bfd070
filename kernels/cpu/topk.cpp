// CPU reference for topk: each row is copied once as (value, index) pairs and partially sorted, rows
// split over threads; the order (NaN highest, ties by lower index) is total, so results are exact.
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

}  // namespace

void topk_cpu(void* values, DType values_dtype, int64_t* indices, const void* in, DType in_dtype, int64_t rows,
              int64_t n, int64_t k, bool largest, const KernelContext&) {
  if (k > n) {
    throw Error("topk: k = " + std::to_string(k) + " is larger than the row size " + std::to_string(n));
  }
  if (k <= 0 || rows <= 0) return;
  // Values are copied from the input in its own compute type so int64 values survive exactly;
  // only the comparison goes through double.
  const bool integral = is_integral(in_dtype, true);
  cpu::parallel_for(rows, cpu::grain_for(n), [&](int64_t, int64_t b0, int64_t e0) {
    std::vector<std::pair<double, int64_t>> row(static_cast<size_t>(n));
    for (int64_t r = b0; r < e0; ++r) {
      for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] = {load_as<double>(in, in_dtype, r * n + j), j};
      auto before = [largest](const std::pair<double, int64_t>& x, const std::pair<double, int64_t>& y) {
        const bool xy = largest ? greater_nan_high(x.first, y.first) : greater_nan_high(y.first, x.first);
        if (xy) return true;
        const bool yx = largest ? greater_nan_high(y.first, x.first) : greater_nan_high(x.first, y.first);
        return !yx && x.second < y.second;
      };
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = r * n + row[static_cast<size_t>(j)].second;
        const int64_t dst = r * k + j;
        if (indices) indices[dst] = row[static_cast<size_t>(j)].second;
        if (!values) continue;
        if (integral) {
          store_as<int64_t>(values, values_dtype, dst, load_as<int64_t>(in, in_dtype, src));
        } else {
          store_as<double>(values, values_dtype, dst, load_as<double>(in, in_dtype, src));
        }
      }
    }
  });
}

}  // namespace kiln
