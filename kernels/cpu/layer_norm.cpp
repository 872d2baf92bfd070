// CPU reference for layer norm. Rows are independent and spread over the pool; the one cross-row
// reduction, dweight/dbias, writes one partial per fixed chunk of rows and adds the partials in
// chunk order, so the result does not depend on the thread count.
#include "kernels/layer_norm.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"

namespace kiln {
namespace {

using cpu::acc_t;
using cpu::ld;
using cpu::load_vector;
using cpu::st;
using cpu::store_as;
using cpu::visit_float;

// One row of n: its mean and rstd, then y = (x - mean) * rstd * w + b. Two passes (mean, then squared
// deviations) instead of E[x^2] - E[x]^2: no cancellation, and a constant row gets a variance of
// exactly zero up to the rounding of its mean. Sums in cpu::lane_sum's lanes; a sum that overflows
// (a float32 row of values near its largest) is taken again over x / n, whose sum cannot.
template <typename T, typename A>
KILN_CPU_CLONES void row_forward(T* y, const T* x, const A* w, const A* b, int64_t n, A eps, A& mean, A& rstd) {
  A m = cpu::lane_sum<A>(n, [&](int64_t j) { return ld<T, A>(x, j); }) / static_cast<A>(n);
  if (!std::isfinite(m)) m = cpu::lane_sum<A>(n, [&](int64_t j) { return ld<T, A>(x, j) / static_cast<A>(n); });
  const A ss = cpu::lane_sum<A>(n, [&](int64_t j) {
    const A d = ld<T, A>(x, j) - m;
    return d * d;
  });
  const A rs = A(1) / std::sqrt(ss / static_cast<A>(n) + eps);
  for (int64_t j = 0; j < n; ++j) st<T, A>(y, j, (ld<T, A>(x, j) - m) * rs * w[j] + b[j]);
  mean = m;
  rstd = rs;
}

// One row's share of the weight and bias gradients: pw += dy * xhat, pb += dy.
template <typename T, typename A>
KILN_CPU_CLONES void row_param_grads(A* pw, A* pb, const T* dy, const T* x, int64_t n, A m, A rs) {
  for (int64_t j = 0; j < n; ++j) {
    const A g = ld<T, A>(dy, j);
    pw[j] += g * (ld<T, A>(x, j) - m) * rs;
    pb[j] += g;
  }
}

// One row's input gradient: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), with g = dy * w.
template <typename T, typename A>
KILN_CPU_CLONES void row_dx(T* dx, const T* dy, const T* x, const A* w, int64_t n, A m, A rs) {
  const A inv_n = A(1) / static_cast<A>(n);
  const cpu::LanePair<A> s = cpu::lane_sum2<A>(
      n, [&](int64_t j) { return ld<T, A>(dy, j) * w[j]; },
      [&](int64_t j) { return ld<T, A>(dy, j) * w[j] * ((ld<T, A>(x, j) - m) * rs); });
  const A sg = s.first * inv_n, sgx = s.second * inv_n;
  for (int64_t j = 0; j < n; ++j) {
    const A g = ld<T, A>(dy, j) * w[j];
    const A xhat = (ld<T, A>(x, j) - m) * rs;
    st<T, A>(dx, j, rs * (g - sg - xhat * sgx));
  }
}

}  // namespace

void layer_norm_forward_cpu(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                            const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps,
                            const KernelContext&) {
  visit_float(x_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const std::vector<A> w = load_vector<A>(weight, param_dtype, n, A(1));
    const std::vector<A> b = load_vector<A>(bias, param_dtype, n, A(0));
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(out);
    A* mp = static_cast<A*>(mean);
    A* rp = static_cast<A*>(rstd);
    cpu::parallel_for(rows, cpu::grain_for(4 * n), [&](int64_t, int64_t b0, int64_t e0) {
      for (int64_t r = b0; r < e0; ++r) {
        row_forward<T, A>(yp + r * n, xp + r * n, w.data(), b.data(), n, static_cast<A>(eps), mp[r], rp[r]);
      }
    });
  });
}

void layer_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                             int64_t n, const KernelContext&) {
  visit_float(x_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const std::vector<A> w = load_vector<A>(weight, param_dtype, n, A(1));
    const T* xp = static_cast<const T*>(x);
    const T* dyp = static_cast<const T*>(dout);
    T* dxp = static_cast<T*>(dx);
    const A* mp = static_cast<const A*>(mean);
    const A* rp = static_cast<const A*>(rstd);
    const bool want_params = dweight != nullptr || dbias != nullptr;
    // Chunks of rows fixed by the problem size alone: at most kMaxChunks partials of [n], each at
    // least ~4k elements of work.
    constexpr int64_t kMaxChunks = 64;
    const int64_t by_count = (rows + kMaxChunks - 1) / kMaxChunks;
    const int64_t by_work = (4096 + n - 1) / std::max<int64_t>(n, 1);
    const int64_t chunk_rows = std::max<int64_t>(1, std::max(by_count, by_work));
    const int64_t chunks = cpu::num_chunks(rows, chunk_rows);
    std::vector<A> part_w, part_b;
    if (want_params) {
      part_w.assign(static_cast<size_t>(chunks * n), A(0));
      part_b.assign(static_cast<size_t>(chunks * n), A(0));
    }
    cpu::parallel_for(rows, chunk_rows, [&](int64_t chunk, int64_t b0, int64_t e0) {
      A* pw = want_params ? part_w.data() + chunk * n : nullptr;
      A* pb = want_params ? part_b.data() + chunk * n : nullptr;
      for (int64_t r = b0; r < e0; ++r) {
        const T* xr = xp + r * n;
        const T* dyr = dyp + r * n;
        const A m = mp[r], rs = rp[r];
        if (want_params) row_param_grads<T, A>(pw, pb, dyr, xr, n, m, rs);
        if (dxp) row_dx<T, A>(dxp + r * n, dyr, xr, w.data(), n, m, rs);
      }
    });
    if (want_params) {
      for (int64_t j = 0; j < n; ++j) {
        A aw = 0, ab = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          aw += part_w[static_cast<size_t>(c * n + j)];
          ab += part_b[static_cast<size_t>(c * n + j)];
        }
        if (dweight) store_as<A>(dweight, param_dtype, j, aw);
        if (dbias) store_as<A>(dbias, param_dtype, j, ab);
      }
    }
  });
}

}  // namespace kiln
