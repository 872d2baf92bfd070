// CPU reference for batch norm. Sums are in double, since a channel can hold millions of elements.
// - NCHW (and other layouts with a channel's elements apart): channels are independent and spread
//   over the pool; each channel is summed on one thread. Each image's plane of a channel is one
//   contiguous run, summed in lanes (cpu::lane_sum) so that it vectorizes.
// - Channels innermost and dense (channels-last images, [N, C]): the tensor is a [P, C] matrix of
//   P = N * H * W rows, and a channel's elements are C apart. Walking a channel at a time would read
//   every cache line C times; instead rows are spread over the pool, each chunk of rows adds into
//   its own per-channel partial sums, and the partials are added in chunk order (chunks depend on
//   the sizes only, so the bits do not depend on the thread count).
#include "kernels/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_math.h"

namespace kiln {
namespace {

using cpu::acc_t;
using cpu::ld;
using cpu::load_as;
using cpu::load_vector;
using cpu::st;
using cpu::store_as;
using cpu::visit_float;

// Calls f(offset) for every element of channel c, in (n, s) order.
template <typename F>
inline void for_channel(const ChannelLayout& l, int64_t c, F&& f) {
  const int64_t base = c * l.stride_c;
  for (int64_t i = 0; i < l.n; ++i) {
    const int64_t row = base + i * l.stride_n;
    for (int64_t k = 0; k < l.s; ++k) f(row + k * l.stride_s);
  }
}

// The forward's epilogue (BatchNormParams) on a normalized value v in the compute type A: rounded
// to T and plus residual z[k], then ReLU, rounding as batch_norm, add and relu do one after another
// (the ReLU needs no rounding of its own: it keeps a value or gives zero). z's elements are T's, or
// their floats (Z = float) in a widened block.
template <typename T, bool kAdd, bool kRelu, typename A, typename Z> inline A epilogue(A v, const Z* z, int64_t k) {
  if constexpr (kAdd) {
    T rounded[1];
    st<T, A>(rounded, 0, v);
    v = ld<T, A>(rounded, 0) + ld<Z, A>(z, k);
  }
  if constexpr (kRelu) v = ew::unary_fn<UnaryOp::Relu, A>(v, A(0), A(0));
  return v;
}

// Calls f.template operator()<kAdd, kRelu>() for the epilogue params asks for.
template <typename F> void visit_epilogue(const BatchNormParams& params, F&& f) {
  const bool add = params.residual != nullptr;
  if (add && params.relu) return f.template operator()<true, true>();
  if (add) return f.template operator()<true, false>();
  if (params.relu) return f.template operator()<false, true>();
  f.template operator()<false, false>();
}

// Calls f.template operator()<kMask>() with kMask set when there is a ReLU output to mask with.
template <typename F> void visit_mask(const void* relu_out, F&& f) {
  if (relu_out) return f.template operator()<true>();
  f.template operator()<false>();
}

// The gradient the backward sees at element k: dy[k], or with kMask (a fused ReLU) relu's backward
// of it, dy[k] where the forward's output y[k] > 0 and +0 elsewhere (cpu::keep_if: not a plain
// select, which GCC 12 miscompiles in run_dy_sums' double sums).
template <typename T, bool kMask, typename A> inline A grad_at(const T* dy, const T* y, int64_t k) {
  if constexpr (kMask) return cpu::keep_if(ld<T, A>(y, k) > A(0), ld<T, A>(dy, k));
  return ld<T, A>(dy, k);
}

// --- NCHW: contiguous runs (an image's plane of a channel) ------------------------------------------
// The passes over one run, in the compute type A; the strided forms in the public functions handle
// other layouts. Sums are in double, in cpu::lane_add's lanes: vectorized, and the bits depend only
// on the run's length. Each pass is written once over elements of type S, and entered through a
// KILN_CPU_CLONES function (run_*) so that its AVX2 clone vectorizes it; S is T, read in place.
// Except for float16 where the CPU converts it in hardware (cpu::in_float_blocks): decoding float16
// in software inside these loops made them several times slower than in float32, so a float16 run
// goes through float blocks instead. Each block is widened into float buffers by the bulk conversion
// (kernels/cpu/convert.h), the pass runs on it with S = float, and an output block is narrowed
// back. Blocks start at multiples of cpu::kLanes and add into the same lanes, and the epilogue still
// rounds to T before the residual: the bits are those of the loop over the run in place. bfloat16
// stays in place (its decoding is a shift; through blocks it was slower).
using cpu::for_float_blocks;
using cpu::in_float_blocks;
using cpu::kFloatBlock;
using cpu::widen_block;
static_assert(kFloatBlock % cpu::kLanes == 0, "batch_norm: a block must start in lane 0");

// lane: x[k]; lane: (x[k] - mean)^2.
template <typename S> inline void add_sum(double (&lane)[cpu::kLanes], const S* x, int64_t n) {
  cpu::lane_add(lane, n, [&](int64_t k) { return ld<S, double>(x, k); });
}
template <typename S> inline void add_sq_dev(double (&lane)[cpu::kLanes], const S* x, int64_t n, double mean) {
  cpu::lane_add(lane, n, [&](int64_t k) {
    const double d = ld<S, double>(x, k) - mean;
    return d * d;
  });
}
// lane0: dy[k]; lane1: dy[k] (x[k] - m) (the caller scales the second by rstd once); both in one pass.
template <typename S, bool kMask>
inline void add_dy_sums(double (&lane0)[cpu::kLanes], double (&lane1)[cpu::kLanes], const S* dy, const S* y,
                        const S* x, int64_t n, double m) {
  cpu::lane_add2(
      lane0, lane1, n, [&](int64_t k) { return grad_at<S, kMask, double>(dy, y, k); },
      [&](int64_t k) { return grad_at<S, kMask, double>(dy, y, k) * (ld<S, double>(x, k) - m); });
}
// y = epilogue((x - m) * scale + shift), where scale = rstd * weight; the epilogue rounds to T.
template <typename T, typename A, bool kAdd, bool kRelu, typename S, typename D>
inline void normalize(D* y, const S* x, const S* z, int64_t n, A m, A scale, A shift) {
  for (int64_t k = 0; k < n; ++k) st<D, A>(y, k, epilogue<T, kAdd, kRelu>((ld<S, A>(x, k) - m) * scale + shift, z, k));
}
// dx = wr * (dy - mdy - (x - m) * rs * mdyx), where wr = weight * rstd.
template <typename A, bool kMask, typename S, typename D>
inline void input_grad(D* dx, const S* dy, const S* y, const S* x, int64_t n, A m, A rs, A wr, A mdy, A mdyx) {
  for (int64_t k = 0; k < n; ++k) {
    const A xhat = (ld<S, A>(x, k) - m) * rs;
    st<D, A>(dx, k, wr * (grad_at<S, kMask, A>(dy, y, k) - mdy - xhat * mdyx));
  }
}

// The sum of x[k], and of (x[k] - mean)^2, over a run of n.
template <typename T> KILN_CPU_CLONES double run_sum(const T* x, int64_t n) {
  double lane[cpu::kLanes] = {};
  if (in_float_blocks<T>()) {
    float xb[kFloatBlock];
    for_float_blocks(n, [&](int64_t i, int64_t b) { add_sum(lane, widen_block(x, i, b, xb), b); });
  } else {
    add_sum(lane, x, n);
  }
  return cpu::fold_lanes(lane);
}
template <typename T> KILN_CPU_CLONES double run_sq_dev(const T* x, int64_t n, double mean) {
  double lane[cpu::kLanes] = {};
  if (in_float_blocks<T>()) {
    float xb[kFloatBlock];
    for_float_blocks(n, [&](int64_t i, int64_t b) { add_sq_dev(lane, widen_block(x, i, b, xb), b, mean); });
  } else {
    add_sq_dev(lane, x, n, mean);
  }
  return cpu::fold_lanes(lane);
}
// sdy += the sum of dy[k], sdyx += the sum of dy[k] (x[k] - m), over a run of n (y: null without kMask).
template <typename T, bool kMask>
KILN_CPU_CLONES void run_dy_sums(const T* dy, const T* y, const T* x, int64_t n, double m, double& sdy,
                                 double& sdyx) {
  double lane0[cpu::kLanes] = {}, lane1[cpu::kLanes] = {};
  if (in_float_blocks<T>()) {
    float dyb[kFloatBlock], yb[kFloatBlock], xb[kFloatBlock];
    for_float_blocks(n, [&](int64_t i, int64_t b) {
      add_dy_sums<float, kMask>(lane0, lane1, widen_block(dy, i, b, dyb), widen_block(y, i, b, yb),
                                widen_block(x, i, b, xb), b, m);
    });
  } else {
    add_dy_sums<T, kMask>(lane0, lane1, dy, y, x, n, m);
  }
  sdy += cpu::fold_lanes(lane0);
  sdyx += cpu::fold_lanes(lane1);
}
template <typename T, typename A, bool kAdd, bool kRelu>
KILN_CPU_CLONES void run_normalize(T* y, const T* x, const T* z, int64_t n, A m, A scale, A shift) {
  if (in_float_blocks<T>()) {
    float xb[kFloatBlock], zb[kFloatBlock], yb[kFloatBlock];
    for_float_blocks(n, [&](int64_t i, int64_t b) {
      normalize<T, A, kAdd, kRelu>(yb, widen_block(x, i, b, xb), kAdd ? widen_block(z, i, b, zb) : nullptr, b, m,
                                   scale, shift);
      cpu::narrow_from_float(y + i, dtype_of<T>(), yb, b);
    });
  } else {
    normalize<T, A, kAdd, kRelu>(y, x, z, n, m, scale, shift);
  }
}
template <typename T, typename A, bool kMask>
KILN_CPU_CLONES void run_dx(T* dx, const T* dy, const T* y, const T* x, int64_t n, A m, A rs, A wr, A mdy, A mdyx) {
  if (in_float_blocks<T>()) {
    float dyb[kFloatBlock], yb[kFloatBlock], xb[kFloatBlock], dxb[kFloatBlock];
    for_float_blocks(n, [&](int64_t i, int64_t b) {
      input_grad<A, kMask>(dxb, widen_block(dy, i, b, dyb), widen_block(y, i, b, yb), widen_block(x, i, b, xb), b, m,
                           rs, wr, mdy, mdyx);
      cpu::narrow_from_float(dx + i, dtype_of<T>(), dxb, b);
    });
  } else {
    input_grad<A, kMask>(dx, dy, y, x, n, m, rs, wr, mdy, mdyx);
  }
}

// The running statistics of channel c after a training step with batch mean `mean` and sum of
// squared deviations `ss` over `count` elements; the running variance tracks the unbiased estimate,
// as in PyTorch (count > 1 is checked by core).
void update_running(const BatchNormParams& params, int64_t c, double momentum, double mean, double ss,
                    int64_t count) {
  if (params.running_mean) {
    const double rm = load_as<double>(params.running_mean, params.running_dtype, c);
    store_as<double>(params.running_mean, params.running_dtype, c, (1.0 - momentum) * rm + momentum * mean);
  }
  if (params.running_var) {
    const double unbiased = ss / static_cast<double>(count - 1);
    const double rv = load_as<double>(params.running_var, params.running_dtype, c);
    store_as<double>(params.running_var, params.running_dtype, c, (1.0 - momentum) * rv + momentum * unbiased);
  }
}

// --- channels innermost: rows of C channels ---------------------------------------------------------

// Whether x is a dense [P, C] matrix with the channels innermost (P = n * s).
bool rows_of_channels(const ChannelLayout& l) {
  return l.c > 1 && l.stride_c == 1 && (l.s == 1 || l.stride_s == l.c) && (l.n == 1 || l.stride_n == l.s * l.c);
}

// Per-channel sums over the P rows: add_rows(r0, r1, acc) adds the terms of rows [r0, r1), in row
// order, into acc[0, width). Each chunk of rows has its own partials; chunks are cut by the sizes
// alone and added in order.
template <typename F> std::vector<double> channel_sums(int64_t rows, int64_t channels, int64_t width, F&& add_rows) {
  // Rows per chunk: at most 256 chunks, at least 16 rows and about 32k values a chunk.
  const int64_t per_chunk = std::max({(rows + 255) / 256, 32768 / channels, int64_t{16}});
  const int64_t chunks = cpu::num_chunks(rows, per_chunk);
  std::vector<double> part(static_cast<size_t>(chunks * width), 0.0);
  cpu::parallel_for(rows, per_chunk, [&](int64_t chunk, int64_t r0, int64_t r1) {
    add_rows(r0, r1, part.data() + chunk * width);
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    for (int64_t j = 0; j < width; ++j) total[static_cast<size_t>(j)] += part[static_cast<size_t>(k * width + j)];
  }
  return total;
}

// The passes over `rows` dense rows of c channels (row r's channel k at r * c + k), called once per
// run of rows.
//
// Per-channel sums in row order: sum0[k] += term0(r * c + k, k), and with kTwo sum1[k] +=
// term1(r * c + k, k) as well. Rows go in blocks of 16, and within a block the channels in groups of
// kLanes whose sums stay in registers across the block's rows (a row at a time loads and stores
// every sum once per row: more memory operations than the terms' own loads). Each sum still adds its
// rows in order, so the bits are a row at a time's.
template <bool kTwo, typename F0, typename F1>
inline void channel_row_sums(double* sum0, double* sum1, int64_t rows, int64_t c, F0&& term0, F1&& term1) {
  constexpr int64_t kRowBlock = 16;
  constexpr int kW = cpu::kLanes;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(rows, r0 + kRowBlock);
    int64_t k0 = 0;
    for (; k0 + kW <= c; k0 += kW) {
      double a0[kW], a1[kW];
      for (int l = 0; l < kW; ++l) {
        a0[l] = sum0[k0 + l];
        a1[l] = kTwo ? sum1[k0 + l] : 0.0;
      }
      for (int64_t r = r0; r < r1; ++r) {
        // Both sums in one loop over the lanes, as cpu::lane_sum2 (which GCC 12 vectorizes).
        for (int l = 0; l < kW; ++l) {
          a0[l] += term0(r * c + k0 + l, k0 + l);
          if constexpr (kTwo) a1[l] += term1(r * c + k0 + l, k0 + l);
        }
      }
      for (int l = 0; l < kW; ++l) {
        sum0[k0 + l] = a0[l];
        if constexpr (kTwo) sum1[k0 + l] = a1[l];
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t k = k0; k < c; ++k) {
        sum0[k] += term0(r * c + k, k);
        if constexpr (kTwo) sum1[k] += term1(r * c + k, k);
      }
    }
  }
}
// acc[k] += x[k] and acc[k] += (x[k] - mean[k])^2 over the rows.
template <typename T> KILN_CPU_CLONES void rows_add(double* acc, const T* x, int64_t rows, int64_t c) {
  auto term = [&](int64_t e, int64_t) { return ld<T, double>(x, e); };
  channel_row_sums<false>(acc, nullptr, rows, c, term, term);
}
template <typename T>
KILN_CPU_CLONES void rows_add_sq_dev(double* acc, const T* x, const double* mean, int64_t rows, int64_t c) {
  auto term = [&](int64_t e, int64_t k) {
    const double d = ld<T, double>(x, e) - mean[k];
    return d * d;
  };
  channel_row_sums<false>(acc, nullptr, rows, c, term, term);
}
// sdy[k] += dy[k]; sdyx[k] += dy[k] (x[k] - m[k]) over the rows (y: null without kMask).
template <typename T, bool kMask>
KILN_CPU_CLONES void rows_dy_sums(double* sdy, double* sdyx, const T* dy, const T* y, const T* x, const double* m,
                                  int64_t rows, int64_t c) {
  channel_row_sums<true>(
      sdy, sdyx, rows, c, [&](int64_t e, int64_t) { return grad_at<T, kMask, double>(dy, y, e); },
      [&](int64_t e, int64_t k) { return grad_at<T, kMask, double>(dy, y, e) * (ld<T, double>(x, e) - m[k]); });
}
// y[k] = epilogue((x[k] - m[k]) * scale[k] + shift[k]) (z: null without kAdd).
template <typename T, typename A, bool kAdd, bool kRelu>
KILN_CPU_CLONES void rows_normalize(T* y, const T* x, const T* z, const A* m, const A* scale, const A* shift,
                                    int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r, y += c, x += c) {
    const T* zr = kAdd ? z + r * c : nullptr;
    for (int64_t k = 0; k < c; ++k) {
      st<T, A>(y, k, epilogue<T, kAdd, kRelu>((ld<T, A>(x, k) - m[k]) * scale[k] + shift[k], zr, k));
    }
  }
}
// dx[k] = dy[k] * scale[k].
template <typename T, typename A, bool kMask>
KILN_CPU_CLONES void rows_scale(T* dx, const T* dy, const T* y, const A* scale, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r, dx += c, dy += c) {
    const T* yr = kMask ? y + r * c : nullptr;
    for (int64_t k = 0; k < c; ++k) st<T, A>(dx, k, grad_at<T, kMask, A>(dy, yr, k) * scale[k]);
  }
}
// dx[k] = wr[k] * (dy[k] - mdy[k] - (x[k] - m[k]) * rs[k] * mdyx[k]).
template <typename T, typename A, bool kMask>
KILN_CPU_CLONES void rows_dx(T* dx, const T* dy, const T* y, const T* x, const A* m, const A* rs, const A* wr,
                             const A* mdy, const A* mdyx, int64_t rows, int64_t c) {
  for (int64_t r = 0; r < rows; ++r, dx += c, dy += c, x += c) {
    const T* yr = kMask ? y + r * c : nullptr;
    for (int64_t k = 0; k < c; ++k) {
      const A xhat = (ld<T, A>(x, k) - m[k]) * rs[k];
      st<T, A>(dx, k, wr[k] * (grad_at<T, kMask, A>(dy, yr, k) - mdy[k] - xhat * mdyx[k]));
    }
  }
}

}  // namespace

void batch_norm_forward_cpu(void* out, void* save_mean, void* save_rstd, const void* x, DType x_dtype,
                            const ChannelLayout& layout, const BatchNormParams& params, bool training, double momentum,
                            double eps, const KernelContext&) {
  visit_float(x_dtype, [&]<typename T>() {
    using A = acc_t<T>;
    const std::vector<A> w = load_vector<A>(params.weight, params.param_dtype, layout.c, A(1));
    const std::vector<A> b = load_vector<A>(params.bias, params.param_dtype, layout.c, A(0));
    const T* xp = static_cast<const T*>(x);
    const T* zp = static_cast<const T*>(params.residual);
    T* yp = static_cast<T*>(out);
    A* mp = static_cast<A*>(save_mean);
    A* rp = static_cast<A*>(save_rstd);
    const int64_t count = layout.n * layout.s;
    if (rows_of_channels(layout)) {
      const int64_t C = layout.c;
      std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C));
      if (training) {
        const std::vector<double> s = channel_sums(count, C, C, [&](int64_t r0, int64_t r1, double* acc) {
          rows_add(acc, xp + r0 * C, r1 - r0, C);
        });
        for (size_t i = 0; i < mean.size(); ++i) mean[i] = s[i] / static_cast<double>(count);
        const std::vector<double> ss = channel_sums(count, C, C, [&](int64_t r0, int64_t r1, double* acc) {
          rows_add_sq_dev(acc, xp + r0 * C, mean.data(), r1 - r0, C);
        });
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = static_cast<size_t>(c);
          var[i] = ss[i] / static_cast<double>(count);
          update_running(params, c, momentum, mean[i], ss[i], count);
        }
      }
      std::vector<A> m(static_cast<size_t>(C)), scale(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = static_cast<size_t>(c);
        const double v = training ? var[i] : load_as<double>(params.running_var, params.running_dtype, c);
        m[i] = training ? static_cast<A>(mean[i]) : load_as<A>(params.running_mean, params.running_dtype, c);
        rp[c] = static_cast<A>(1.0 / std::sqrt(v + eps));
        mp[c] = m[i];
        scale[i] = rp[c] * w[i];
      }
      visit_epilogue(params, [&]<bool kAdd, bool kRelu>() {
        cpu::parallel_for(count, cpu::grain_for(3 * C), [&](int64_t, int64_t r0, int64_t r1) {
          rows_normalize<T, A, kAdd, kRelu>(yp + r0 * C, xp + r0 * C, kAdd ? zp + r0 * C : nullptr, m.data(),
                                            scale.data(), b.data(), r1 - r0, C);
        });
      });
      return;
    }
    cpu::parallel_for(layout.c, cpu::grain_for(3 * count), [&](int64_t, int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        A m, rs;
        if (training) {
          double s = 0;
          if (layout.stride_s == 1) {  // NCHW: each image's plane is one run
            for (int64_t i = 0; i < layout.n; ++i) {
              s += run_sum(xp + c * layout.stride_c + i * layout.stride_n, layout.s);
            }
          } else {
            for_channel(layout, c, [&](int64_t o) { s += ld<T, double>(xp, o); });
          }
          const double md = s / static_cast<double>(count);
          double ss = 0;
          if (layout.stride_s == 1) {
            for (int64_t i = 0; i < layout.n; ++i) {
              ss += run_sq_dev(xp + c * layout.stride_c + i * layout.stride_n, layout.s, md);
            }
          } else {
            for_channel(layout, c, [&](int64_t o) {
              const double d = ld<T, double>(xp, o) - md;
              ss += d * d;
            });
          }
          const double var = ss / static_cast<double>(count);
          m = static_cast<A>(md);
          rs = static_cast<A>(1.0 / std::sqrt(var + eps));
          update_running(params, c, momentum, md, ss, count);
        } else {
          m = load_as<A>(params.running_mean, params.running_dtype, c);
          rs = static_cast<A>(1.0 / std::sqrt(load_as<double>(params.running_var, params.running_dtype, c) + eps));
        }
        mp[c] = m;
        rp[c] = rs;
        const A wc = w[static_cast<size_t>(c)], bc = b[static_cast<size_t>(c)];
        visit_epilogue(params, [&]<bool kAdd, bool kRelu>() {
          if (layout.stride_s == 1) {
            for (int64_t i = 0; i < layout.n; ++i) {
              const int64_t row = c * layout.stride_c + i * layout.stride_n;
              run_normalize<T, A, kAdd, kRelu>(yp + row, xp + row, kAdd ? zp + row : nullptr, layout.s, m, rs * wc,
                                               bc);
            }
          } else {
            for_channel(layout, c, [&](int64_t o) {
              st<T, A>(yp, o, epilogue<T, kAdd, kRelu>((ld<T, A>(xp, o) - m) * (rs * wc) + bc, zp, o));
            });
          }
        });
      }
    });
  });
}

void batch_norm_backward_cpu(void* dx, void* dweight, void* dbias, const void* dout, const void* relu_out,
                             const void* x, DType x_dtype, const ChannelLayout& layout, const void* save_mean,
                             const void* save_rstd, const void* weight, DType param_dtype, bool training,
                             const KernelContext&) {
  visit_float(x_dtype, [&]<typename T>() {
    visit_mask(relu_out, [&]<bool kMask>() {
      using A = acc_t<T>;
      const std::vector<A> w = load_vector<A>(weight, param_dtype, layout.c, A(1));
      const T* xp = static_cast<const T*>(x);
      const T* dyp = static_cast<const T*>(dout);
      const T* yp = static_cast<const T*>(relu_out);
      T* dxp = static_cast<T*>(dx);
      const A* mp = static_cast<const A*>(save_mean);
      const A* rp = static_cast<const A*>(save_rstd);
      const int64_t count = layout.n * layout.s;
      if (rows_of_channels(layout)) {
        const int64_t C = layout.c;
        const size_t uc = static_cast<size_t>(C);
        std::vector<double> md(uc);
        for (size_t i = 0; i < uc; ++i) md[i] = static_cast<double>(mp[i]);
        const std::vector<double> sums = channel_sums(count, C, 2 * C, [&](int64_t r0, int64_t r1, double* acc) {
          rows_dy_sums<T, kMask>(acc, acc + C, dyp + r0 * C, kMask ? yp + r0 * C : nullptr, xp + r0 * C, md.data(),
                                 r1 - r0, C);
        });
        std::vector<A> m(uc), rs(uc), wr(uc), mdy(uc), mdyx(uc);
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = static_cast<size_t>(c);
          const double sdy = sums[i], sdy_xhat = sums[uc + i] * static_cast<double>(rp[c]);  // sum of dy * xhat
          if (dweight) store_as<double>(dweight, param_dtype, c, sdy_xhat);
          if (dbias) store_as<double>(dbias, param_dtype, c, sdy);
          m[i] = mp[c];
          rs[i] = rp[c];
          wr[i] = w[i] * rp[c];
          mdy[i] = static_cast<A>(sdy / static_cast<double>(count));
          mdyx[i] = static_cast<A>(sdy_xhat / static_cast<double>(count));
        }
        if (!dxp) return;
        cpu::parallel_for(count, cpu::grain_for(4 * C), [&](int64_t, int64_t r0, int64_t r1) {
          const T* yr = kMask ? yp + r0 * C : nullptr;
          if (training) {
            rows_dx<T, A, kMask>(dxp + r0 * C, dyp + r0 * C, yr, xp + r0 * C, m.data(), rs.data(), wr.data(),
                                 mdy.data(), mdyx.data(), r1 - r0, C);
          } else {  // eval: the statistics are constants, dx = dy * w * rstd
            rows_scale<T, A, kMask>(dxp + r0 * C, dyp + r0 * C, yr, wr.data(), r1 - r0, C);
          }
        });
        return;
      }
      cpu::parallel_for(layout.c, cpu::grain_for(3 * count), [&](int64_t, int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          const A m = mp[c], rs = rp[c], wc = w[static_cast<size_t>(c)];
          double sdy = 0, sdy_xhat = 0;
          if (layout.stride_s == 1) {  // NCHW: each image's plane is one run
            for (int64_t i = 0; i < layout.n; ++i) {
              const int64_t row = c * layout.stride_c + i * layout.stride_n;
              run_dy_sums<T, kMask>(dyp + row, kMask ? yp + row : nullptr, xp + row, layout.s, static_cast<double>(m),
                                    sdy, sdy_xhat);
            }
          } else {
            for_channel(layout, c, [&](int64_t o) {
              const double g = grad_at<T, kMask, double>(dyp, yp, o);
              sdy += g;
              sdy_xhat += g * (ld<T, double>(xp, o) - static_cast<double>(m));
            });
          }
          sdy_xhat *= static_cast<double>(rs);  // sum of dy * xhat
          if (dweight) store_as<double>(dweight, param_dtype, c, sdy_xhat);
          if (dbias) store_as<double>(dbias, param_dtype, c, sdy);
          if (!dxp) continue;
          if (training) {
            // dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)): the batch statistics depend on x.
            const A mdy = static_cast<A>(sdy / static_cast<double>(count));
            const A mdyx = static_cast<A>(sdy_xhat / static_cast<double>(count));
            if (layout.stride_s == 1) {
              for (int64_t i = 0; i < layout.n; ++i) {
                const int64_t row = c * layout.stride_c + i * layout.stride_n;
                run_dx<T, A, kMask>(dxp + row, dyp + row, kMask ? yp + row : nullptr, xp + row, layout.s, m, rs,
                                    wc * rs, mdy, mdyx);
              }
            } else {
              for_channel(layout, c, [&](int64_t o) {
                const A xhat = (ld<T, A>(xp, o) - m) * rs;
                st<T, A>(dxp, o, (wc * rs) * (grad_at<T, kMask, A>(dyp, yp, o) - mdy - xhat * mdyx));
              });
            }
          } else {
            for_channel(layout, c, [&](int64_t o) { st<T, A>(dxp, o, grad_at<T, kMask, A>(dyp, yp, o) * wc * rs); });
          }
        }
      });
    });
  });
}

}  // namespace kiln
