// CPU reference for softmax, layer norm and batch norm. Rows (and channels) are independent and
// spread over the pool; the one cross-row reduction, layer norm's dweight/dbias, writes one
// partial per fixed chunk of rows and adds the partials in chunk order. Batch norm sums a whole
// channel on one thread, in double, since a channel can hold millions of elements.
#include "kernels/norm.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"

namespace kiln {
namespace {

using cpu::load_as;
using cpu::store_as;

using cpu::acc_t;
using cpu::ld;
using cpu::st;
using cpu::visit_float;

// A per-channel / per-feature parameter vector of any dtype, loaded once; `fill` where absent.
template <typename A>
std::vector<A> load_vector(const void* p, DType t, int64_t n, A fill) {
  std::vector<A> v(static_cast<size_t>(n), fill);
  if (p) {
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = load_as<A>(p, t, i);
  }
  return v;
}

}  // namespace

// --- softmax ---------------------------------------------------------------------------------

void softmax_forward_cpu(void* out, const void* in, DType dtype, int64_t outer, int64_t n, int64_t inner, bool log) {
  visit_float(dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    cpu::parallel_for(outer * inner, cpu::grain_for(3 * n), [&](int64_t, int64_t b0, int64_t e0) {
      for (int64_t r = b0; r < e0; ++r) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        // Subtracting the row max keeps exp in range for logits of any magnitude.
        A mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, ld<T, A>(x, base + j * inner));
        A sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += std::exp(ld<T, A>(x, base + j * inner) - mx);
        if (log) {
          // (x - max) - log(sum), not x - (max + log(sum)): for logits near +-1000 the latter
          // rounds log(sum) to the spacing of floats near 1000.
          const A lsum = std::log(sum);
          for (int64_t j = 0; j < n; ++j) st<T, A>(y, base + j * inner, (ld<T, A>(x, base + j * inner) - mx) - lsum);
        } else {
          const A inv = A(1) / sum;
          for (int64_t j = 0; j < n; ++j) {
            st<T, A>(y, base + j * inner, std::exp(ld<T, A>(x, base + j * inner) - mx) * inv);
          }
        }
      }
    });
  });
}

void softmax_backward_cpu(void* dinp, const void* dout, const void* out, DType dtype, int64_t outer, int64_t n,
                          int64_t inner, bool log) {
  visit_float(dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const T* dy = static_cast<const T*>(dout);
    const T* y = static_cast<const T*>(out);
    T* dx = static_cast<T*>(dinp);
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
          st<T, A>(dx, k, log ? g - std::exp(yv) * s : yv * (g - s));
        }
      }
    });
  });
}

// --- layer norm ------------------------------------------------------------------------------

void layer_norm_forward_cpu(void* out, void* mean, void* rstd, const void* x, DType x_dtype, const void* weight,
                            const void* bias, DType param_dtype, int64_t rows, int64_t n, double eps) {
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
        const T* xr = xp + r * n;
        // Two passes (mean, then squared deviations) instead of E[x^2] - E[x]^2: no cancellation,
        // and a constant row gets a variance of exactly zero up to the rounding of its mean.
        A s = 0;
        for (int64_t j = 0; j < n; ++j) s += ld<T, A>(xr, j);
        const A m = s / static_cast<A>(n);
        A ss = 0;
        for (int64_t j = 0; j < n; ++j) {
          const A d = ld<T, A>(xr, j) - m;
          ss += d * d;
        }
        const A rs = A(1) / std::sqrt(ss / static_cast<A>(n) + static_cast<A>(eps));
        mp[r] = m;
        rp[r] = rs;
        for (int64_t j = 0; j < n; ++j) {
          const size_t ju = static_cast<size_t>(j);
          st<T, A>(yp + r * n, j, (ld<T, A>(xr, j) - m) * rs * w[ju] + b[ju]);
        }
      }
    });
  });
}

void layer_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const void* mean, const void* rstd, const void* weight, DType param_dtype, int64_t rows,
                             int64_t n) {
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
        if (want_params) {
          for (int64_t j = 0; j < n; ++j) {
            const A g = ld<T, A>(dyr, j);
            pw[j] += g * (ld<T, A>(xr, j) - m) * rs;
            pb[j] += g;
          }
        }
        if (dxp) {
          // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), with g = dout * weight.
          A sg = 0, sgx = 0;
          for (int64_t j = 0; j < n; ++j) {
            const A g = ld<T, A>(dyr, j) * w[static_cast<size_t>(j)];
            sg += g;
            sgx += g * (ld<T, A>(xr, j) - m) * rs;
          }
          const A inv_n = A(1) / static_cast<A>(n);
          sg *= inv_n;
          sgx *= inv_n;
          for (int64_t j = 0; j < n; ++j) {
            const A g = ld<T, A>(dyr, j) * w[static_cast<size_t>(j)];
            const A xhat = (ld<T, A>(xr, j) - m) * rs;
            st<T, A>(dxp + r * n, j, rs * (g - sg - xhat * sgx));
          }
        }
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

// --- batch norm ------------------------------------------------------------------------------

namespace {

// Calls f(offset) for every element of channel c, in (n, s) order.
template <typename F>
inline void for_channel(const ChannelLayout& l, int64_t c, F&& f) {
  const int64_t base = c * l.stride_c;
  for (int64_t i = 0; i < l.n; ++i) {
    const int64_t row = base + i * l.stride_n;
    for (int64_t k = 0; k < l.s; ++k) f(row + k * l.stride_s);
  }
}

}  // namespace

void batch_norm_forward_cpu(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                            const ChannelLayout& layout, const BatchNormParams& params, bool training, double momentum,
                            double eps) {
  visit_float(x_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const std::vector<A> w = load_vector<A>(params.weight, params.param_dtype, layout.c, A(1));
    const std::vector<A> b = load_vector<A>(params.bias, params.param_dtype, layout.c, A(0));
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(out);
    A* mp = static_cast<A*>(save_mean);
    A* rp = static_cast<A*>(save_rstd);
    const int64_t count = layout.n * layout.s;
    cpu::parallel_for(layout.c, cpu::grain_for(3 * count), [&](int64_t, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        A m, rs;
        if (training) {
          double s = 0;
          for_channel(layout, c, [&](int64_t o) { s += ld<T, double>(xp, o); });
          const double md = s / static_cast<double>(count);
          double ss = 0;
          for_channel(layout, c, [&](int64_t o) {
            const double d = ld<T, double>(xp, o) - md;
            ss += d * d;
          });
          const double var = ss / static_cast<double>(count);
          m = static_cast<A>(md);
          rs = static_cast<A>(1.0 / std::sqrt(var + eps));
          if (params.running_mean) {
            const double rm = load_as<double>(params.running_mean, params.running_dtype, c);
            store_as<double>(params.running_mean, params.running_dtype, c, (1.0 - momentum) * rm + momentum * md);
          }
          if (params.running_var) {
            // The running variance tracks the unbiased estimate, as in PyTorch (count > 1 is checked by core).
            const double unbiased = ss / static_cast<double>(count - 1);
            const double rv = load_as<double>(params.running_var, params.running_dtype, c);
            store_as<double>(params.running_var, params.running_dtype, c, (1.0 - momentum) * rv + momentum * unbiased);
          }
        } else {
          m = load_as<A>(params.running_mean, params.running_dtype, c);
          rs = static_cast<A>(1.0 / std::sqrt(load_as<double>(params.running_var, params.running_dtype, c) + eps));
        }
        mp[c] = m;
        rp[c] = rs;
        const A wc = w[static_cast<size_t>(c)], bc = b[static_cast<size_t>(c)];
        for_channel(layout, c, [&](int64_t o) { st<T, A>(yp, o, (ld<T, A>(xp, o) - m) * rs * wc + bc); });
      }
    });
  });
}

void batch_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* x, DType x_dtype,
                             const ChannelLayout& layout, const void* save_mean, const void* save_rstd,
                             const void* weight, DType param_dtype, bool training) {
  visit_float(x_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const std::vector<A> w = load_vector<A>(weight, param_dtype, layout.c, A(1));
    const T* xp = static_cast<const T*>(x);
    const T* dyp = static_cast<const T*>(dout);
    T* dxp = static_cast<T*>(dx);
    const A* mp = static_cast<const A*>(save_mean);
    const A* rp = static_cast<const A*>(save_rstd);
    const int64_t count = layout.n * layout.s;
    cpu::parallel_for(layout.c, cpu::grain_for(3 * count), [&](int64_t, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const A m = mp[c], rs = rp[c], wc = w[static_cast<size_t>(c)];
        double sdy = 0, sdy_xhat = 0;
        for_channel(layout, c, [&](int64_t o) {
          const double g = ld<T, double>(dyp, o);
          sdy += g;
          sdy_xhat += g * (ld<T, double>(xp, o) - static_cast<double>(m)) * static_cast<double>(rs);
        });
        if (dweight) store_as<double>(dweight, param_dtype, c, sdy_xhat);
        if (dbias) store_as<double>(dbias, param_dtype, c, sdy);
        if (!dxp) continue;
        if (training) {
          // dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)): the batch statistics depend on x.
          const A mdy = static_cast<A>(sdy / static_cast<double>(count));
          const A mdyx = static_cast<A>(sdy_xhat / static_cast<double>(count));
          for_channel(layout, c, [&](int64_t o) {
            const A xhat = (ld<T, A>(xp, o) - m) * rs;
            st<T, A>(dxp, o, wc * rs * (ld<T, A>(dyp, o) - mdy - xhat * mdyx));
          });
        } else {
          for_channel(layout, c, [&](int64_t o) { st<T, A>(dxp, o, ld<T, A>(dyp, o) * wc * rs); });
        }
      }
    });
  });
}

}  // namespace kiln
