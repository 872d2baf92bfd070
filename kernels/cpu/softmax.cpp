// CPU reference for softmax and log_softmax: each row (along any dim) is read in its dtype and
// reduced in float (double for float64), rows spread over the pool; rows along the last dim take
// vectorized row functions.
#include "kernels/softmax.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

using cpu::acc_t;
using cpu::ld;
using cpu::st;
using cpu::visit_float;

// A contiguous row (softmax over the last dim, the usual case), reduced in cpu::lane_max's and
// lane_sum's lanes so that it vectorizes; the strided loops below handle any other dim.
template <typename T, typename A> KILN_CPU_CLONES void forward_row(T* y, const T* x, int64_t n, bool log) {
  // Subtracting the row max keeps exp in range for logits of any magnitude.
  const A mx = cpu::lane_max<A>(n, [&](int64_t j) { return ld<T, A>(x, j); });
  const A sum = cpu::lane_sum<A>(n, [&](int64_t j) { return ew::exp_fn(ld<T, A>(x, j) - mx); });
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): for logits near +-1000 the latter rounds
    // log(sum) to the spacing of floats near 1000.
    const A lsum = std::log(sum);
    for (int64_t j = 0; j < n; ++j) st<T, A>(y, j, (ld<T, A>(x, j) - mx) - lsum);
  } else {
    const A inv = A(1) / sum;
    for (int64_t j = 0; j < n; ++j) st<T, A>(y, j, ew::exp_fn(ld<T, A>(x, j) - mx) * inv);
  }
}

template <typename T, typename A>
KILN_CPU_CLONES void backward_row(T* dx, const T* dy, const T* y, int64_t n, bool log) {
  const A s = log ? cpu::lane_sum<A>(n, [&](int64_t j) { return ld<T, A>(dy, j); })
                  : cpu::lane_sum<A>(n, [&](int64_t j) { return ld<T, A>(dy, j) * ld<T, A>(y, j); });
  if (log) {
    for (int64_t j = 0; j < n; ++j) st<T, A>(dx, j, ld<T, A>(dy, j) - ew::exp_fn(ld<T, A>(y, j)) * s);
  } else {
    for (int64_t j = 0; j < n; ++j) st<T, A>(dx, j, ld<T, A>(y, j) * (ld<T, A>(dy, j) - s));
  }
}

}  // namespace

void softmax_forward_cpu(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log,
                         const KernelContext&) {
  visit_float(dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (inner == 1) {
      cpu::parallel_for(outer, cpu::grain_for(3 * n), [&](int64_t, int64_t b0, int64_t e0) {
        for (int64_t r = b0; r < e0; ++r) forward_row<T, A>(y + r * n, x + r * n, n, log);
      });
      return;
    }
    cpu::parallel_for(outer * inner, cpu::grain_for(3 * n), [&](int64_t, int64_t b0, int64_t e0) {
      for (int64_t r = b0; r < e0; ++r) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        A mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, ld<T, A>(x, base + j * inner));
        A sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += ew::exp_fn(ld<T, A>(x, base + j * inner) - mx);
        if (log) {
          const A lsum = std::log(sum);  // as in forward_row
          for (int64_t j = 0; j < n; ++j) st<T, A>(y, base + j * inner, (ld<T, A>(x, base + j * inner) - mx) - lsum);
        } else {
          const A inv = A(1) / sum;
          for (int64_t j = 0; j < n; ++j) {
            st<T, A>(y, base + j * inner, ew::exp_fn(ld<T, A>(x, base + j * inner) - mx) * inv);
          }
        }
      }
    });
  });
}

void softmax_backward_cpu(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                          int64_t inner, bool log, const KernelContext&) {
  visit_float(dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* dy = static_cast<const T*>(dout);
    const T* y = static_cast<const T*>(out);
    T* dx = static_cast<T*>(dinp);
    if (inner == 1) {
      cpu::parallel_for(outer, cpu::grain_for(3 * n), [&](int64_t, int64_t b0, int64_t e0) {
        for (int64_t r = b0; r < e0; ++r) backward_row<T, A>(dx + r * n, dy + r * n, y + r * n, n, log);
      });
      return;
    }
    cpu::parallel_for(outer * inner, cpu::grain_for(3 * n), [&](int64_t, int64_t b0, int64_t e0) {
      for (int64_t r = b0; r < e0; ++r) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        A s = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = base + j * inner;
          s += log ? ld<T, A>(dy, k) : ld<T, A>(dy, k) * ld<T, A>(y, k);
        }
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = base + j * inner;
          const A g = ld<T, A>(dy, k), yv = ld<T, A>(y, k);
          st<T, A>(dx, k, log ? g - ew::exp_fn(yv) * s : yv * (g - s));
        }
      }
    });
  });
}

}  // namespace kiln
