// CPU pooling: one task per (n, c) plane, read and written through strides; channels-last images
// (channel stride 1) a pixel's channels at a time instead (see "channels-last" below), with the same
// bits. Backward passes sum a plane in float (double) in output order and store it once: no
// atomics, no dependence on the thread count, and half gradients round once instead of once per
// window. A dense float or double plane holds its own sums; others sum in a buffer
// (for_each_plane_sums, for_channel_slices_sums).
#include "kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln {
namespace {

template <typename F> void visit_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Float64: f.template operator()<double>(); return;
    case DType::Float16: f.template operator()<Half>(); return;
    case DType::BFloat16: f.template operator()<BFloat16>(); return;
    default: throw DTypeError(std::string(op) + ": unsupported dtype " + dtype_name(t));
  }
}

// Runs body(n, c) for every plane, spread over the pool; `cost` is the work of one plane.
template <typename F> void for_each_plane(const Conv2dGeometry& g, int64_t cost, F&& body) {
  const int64_t planes = g.batch * g.channels;
  if (planes == 0) return;
  cpu::parallel_for(planes, cpu::grain_for(cost), [&](int64_t, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) body(p / g.channels, p % g.channels);
  });
}

// Runs sum(n, c, acc) for every plane of grad_in, spread over the pool as for_each_plane does: acc
// is the plane's dense [in_h * in_w] sums, zeroed, which are then stored into the plane. Where T is
// the sums' own type and the plane is dense (stride 1 along W, rows in_w apart), acc is the plane
// itself and nothing is copied; otherwise it is a buffer, one per task.
template <typename T, typename F>
void for_each_plane_sums(const Conv2dGeometry& g, int64_t cost, T* gin, ImageStrides gis, F&& sum) {
  using A = cpu::acc_t<T>;
  const int64_t planes = g.batch * g.channels, plane_size = g.in_h * g.in_w;
  if (planes == 0) return;
  const bool in_place = std::is_same_v<T, A> && gis.w == 1 && gis.h == g.in_w;
  cpu::parallel_for(planes, cpu::grain_for(cost), [&](int64_t, int64_t p0, int64_t p1) {
    std::vector<A> buffer(in_place ? 0 : static_cast<size_t>(plane_size));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.channels, c = p % g.channels;
      T* ip = gin + n * gis.n + c * gis.c;
      A* acc = buffer.data();
      if constexpr (std::is_same_v<T, A>) {
        if (in_place) acc = ip;
      }
      std::fill(acc, acc + plane_size, A(0));
      sum(n, c, acc);
      if (in_place) continue;
      if constexpr (cpu::is_16bit_float<T>) {
        if (gis.w == 1) {  // dense rows round in bulk (kernels/cpu/convert.h), a dense plane at once
          const int64_t rows = gis.h == g.in_w ? g.in_h : 1;
          for (int64_t ih = 0; ih < g.in_h; ih += rows) {
            cpu::narrow_from_float(ip + ih * gis.h, dtype_of<T>(), acc + ih * g.in_w, rows * g.in_w);
          }
          continue;
        }
      }
      for (int64_t ih = 0; ih < g.in_h; ++ih)
        for (int64_t iw = 0; iw < g.in_w; ++iw) cpu::st(ip, ih * gis.h + iw * gis.w, acc[ih * g.in_w + iw]);
    }
  });
}

// A window along one axis: real elements [lo, hi) and the divisor's share of it.
struct Span {
  int64_t lo, hi, size;
};

// avg_pool2d: the window clipped to the padded extent [-pad, in + pad) counts for
// count_include_pad; the real elements are that clipped again to [0, in).
inline Span avg_span(int64_t o, int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool include_pad) {
  int64_t start = o * stride - pad;
  int64_t end = std::min(start + kernel, in + pad);
  int64_t padded = end - start;
  int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, in);
  return {lo, hi, include_pad ? padded : hi - lo};
}

inline Span adaptive_span(int64_t o, int64_t in, int64_t out) {
  int64_t lo = (o * in) / out;
  int64_t hi = ((o + 1) * in + out - 1) / out;
  return {lo, hi, hi - lo};
}

// The per-plane mean pooling (mean_pool_forward and mean_pool_backward choose it or the
// channels-last form below).
template <typename T, typename SH, typename SW>
void mean_pool_forward_planes(T* out, ImageStrides os, const T* in, ImageStrides is, const Conv2dGeometry& g,
                              int64_t taps, SH&& span_h, SW&& span_w) {
  using A = cpu::acc_t<T>;
  for_each_plane(g, g.out_h * g.out_w * taps, [&](int64_t n, int64_t c) {
    const T* ip = in + n * is.n + c * is.c;
    T* op = out + n * os.n + c * os.c;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const Span sh = span_h(oh);
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const Span sw = span_w(ow);
        A sum = 0;
        for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
          for (int64_t iw = sw.lo; iw < sw.hi; ++iw) sum += cpu::ld<T, A>(ip, ih * is.h + iw * is.w);
        cpu::st(op, oh * os.h + ow * os.w, sum / static_cast<A>(sh.size * sw.size));
      }
    }
  });
}

template <typename T, typename SH, typename SW>
void mean_pool_backward_planes(T* gin, ImageStrides gis, const T* gout, ImageStrides gos, const Conv2dGeometry& g,
                               int64_t taps, SH&& span_h, SW&& span_w) {
  using A = cpu::acc_t<T>;
  for_each_plane_sums(g, g.out_h * g.out_w * taps + g.in_h * g.in_w, gin, gis, [&](int64_t n, int64_t c, A* acc) {
    const T* gp = gout + n * gos.n + c * gos.c;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const Span sh = span_h(oh);
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const Span sw = span_w(ow);
        const A v = cpu::ld<T, A>(gp, oh * gos.h + ow * gos.w) / static_cast<A>(sh.size * sw.size);
        for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
          for (int64_t iw = sw.lo; iw < sw.hi; ++iw) acc[ih * g.in_w + iw] += v;
      }
    }
  });
}

// One tap of max_pool2d across outputs [lo, hi) of a row: output ow reads row[(ow * stride + shift) *
// w_stride]. Strictly greater keeps the first of ties; every NaN takes over, so the last NaN wins
// (as PyTorch picks: its gradient goes there).
template <typename T, typename A>
KILN_CPU_CLONES void pick_max(A* best, int64_t* best_i, const T* row, int64_t w_stride, int64_t row_index,
                              int64_t stride, int64_t shift, int64_t lo, int64_t hi) {
  for (int64_t ow = lo; ow < hi; ++ow) {
    const int64_t iw = ow * stride + shift;
    const A v = cpu::ld<T, A>(row, iw * w_stride);
    const A b = best[ow];
    const int64_t bi = best_i[ow];
    // | and &, not || and &&: no short-circuit branches, so the loop vectorizes.
    const bool take = (bi < 0) | (v > b) | (v != v);
    best[ow] = take ? v : b;
    best_i[ow] = take ? row_index + iw : bi;
  }
}

// max_pool2d for a K x K window with stride S, no padding or dilation, every window inside the
// image: one pass over the plane's outputs with the taps unrolled, no per-tap calls or bounds (the
// common 2x2/2 window makes rows of 7 or 14 outputs on small images, too short for the per-tap
// path). The same picks as pick_max: the first of ties, the last of several NaNs. The winner is
// kept as its tap number (int32, as wide as a float lane, so the selects vectorize) and becomes the
// plane index at the store. W_UNIT: the input and output rows are dense (stride 1 along W), which
// the compiler can vectorize.
template <int K, int S, bool W_UNIT, typename T, typename A>
KILN_CPU_CLONES void max_pool_plane_fixed(T* op, int64_t* xp, ImageStrides os, const T* ip, ImageStrides is,
                                          const Conv2dGeometry& g) {
  // Locals, not g's fields: the index stores could alias them, which keeps the loop scalar.
  const int64_t iws = W_UNIT ? 1 : is.w, ows = W_UNIT ? 1 : os.w, ish = is.h, osh = os.h;
  const int64_t out_h = g.out_h, out_w = g.out_w, in_w = g.in_w;
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const T* rows = ip + oh * S * ish;
    T* orow = op + oh * osh;
    int64_t* xrow = xp + oh * osh;
    const int64_t plane_row = oh * S * in_w;
    auto output = [&](int64_t ow) {
      // The taps from the last to the first, where a NaN, once taken, stays and a tie replaces:
      // the same pick as the forward order's (the first of ties, the last NaN) in as few
      // operations per tap as the vectorized loop allows.
      A b = cpu::ld<T, A>(rows, (K - 1) * ish + (ow * S + K - 1) * iws);
      int32_t tap = K * K - 1;
      // nan: b is a NaN. A flag of its own because GCC does not vectorize the loop when b == b is
      // tested on the running maximum.
      bool nan = b != b;
      for (int i = K - 1; i >= 0; --i) {
        for (int j = K - 1; j >= 0; --j) {
          if (i == K - 1 && j == K - 1) continue;
          const A v = cpu::ld<T, A>(rows, i * ish + (ow * S + j) * iws);
          const bool take = !nan & !(v < b);  // v >= b, or v is a NaN
          b = take ? v : b;
          tap = take ? i * K + j : tap;
          nan = nan | (v != v);
        }
      }
      cpu::st(orow, ow * ows, b);
      xrow[ow * ows] = plane_row + (tap / K) * in_w + ow * S + tap % K;
    };
    // Blocks of 8 outputs, a vector's worth; a row of 8 or more ends with the block of its last 8,
    // which recomputes a few outputs (the same values) instead of a scalar tail.
    int64_t ow = 0;
    for (; ow + 8 <= out_w; ow += 8) {
      for (int64_t l = 0; l < 8; ++l) output(ow + l);
    }
    if (ow < out_w && out_w >= 8) {
      for (int64_t l = 0; l < 8; ++l) output(out_w - 8 + l);
    } else {
      for (; ow < out_w; ++ow) output(ow);
    }
  }
}

// The fixed-window kernel for g's window when there is one, else null.
template <typename T, typename A> auto fixed_max_pool(const Conv2dGeometry& g, bool unit_w) {
  using Fn = void (*)(T*, int64_t*, ImageStrides, const T*, ImageStrides, const Conv2dGeometry&);
  const Window2d& w = g.window;
  const bool plain = w.pad_h == 0 && w.pad_w == 0 && w.dilation_h == 1 && w.dilation_w == 1 &&
                     w.kernel_h == w.kernel_w && w.stride_h == w.stride_w && g.out_h > 0 && g.out_w > 0 &&
                     (g.out_h - 1) * w.stride_h + w.kernel_h <= g.in_h &&
                     (g.out_w - 1) * w.stride_w + w.kernel_w <= g.in_w;
  if (!plain) return Fn{nullptr};
  const int64_t k = w.kernel_h, s = w.stride_h;
  if (unit_w) {
    if (k == 2 && s == 2) return &max_pool_plane_fixed<2, 2, true, T, A>;
    if (k == 3 && s == 2) return &max_pool_plane_fixed<3, 2, true, T, A>;
    if (k == 3 && s == 1) return &max_pool_plane_fixed<3, 1, true, T, A>;
  } else {
    if (k == 2 && s == 2) return &max_pool_plane_fixed<2, 2, false, T, A>;
    if (k == 3 && s == 2) return &max_pool_plane_fixed<3, 2, false, T, A>;
    if (k == 3 && s == 1) return &max_pool_plane_fixed<3, 1, false, T, A>;
  }
  return Fn{nullptr};
}

// max_pool2d of 16-bit planes that are dense (rows in_w and out_w apart) with a fixed window: each
// input plane is widened into a float buffer in bulk (kernels/cpu/convert.h), the float kernel
// picks from it, and its output plane is narrowed back in bulk. The same picks and the same bits
// as the 16-bit kernel (the winner is one of the plane's values, widened exactly and narrowed back
// to itself), and faster: loading 16-bit values two apart for the taps kept that kernel's clone
// from vectorizing well, and float16 decoded each one in software. False, having
// done nothing, when the planes or the window do not fit.
template <typename T>
bool max_pool_widened(T* out, int64_t* indices, ImageStrides os, const T* in, ImageStrides is,
                      const Conv2dGeometry& g) {
  const bool dense = is.w == 1 && os.w == 1 && is.h == g.in_w && os.h == g.out_w;
  const auto fixed = dense ? fixed_max_pool<float, float>(g, true) : nullptr;
  if (!fixed) return false;
  const Window2d& w = g.window;
  const int64_t planes = g.batch * g.channels, in_size = g.in_h * g.in_w, out_size = g.out_h * g.out_w;
  const ImageStrides fis{0, 0, g.in_w, 1}, fos{0, 0, g.out_w, 1};
  cpu::parallel_for(planes, cpu::grain_for(out_size * w.kernel_h * w.kernel_w + in_size),
                    [&](int64_t, int64_t p0, int64_t p1) {
                      std::vector<float> wide(static_cast<size_t>(in_size + out_size));
                      float* fin = wide.data();
                      float* fout = fin + in_size;
                      for (int64_t p = p0; p < p1; ++p) {
                        const int64_t n = p / g.channels, c = p % g.channels;
                        cpu::widen_to_float(fin, in + n * is.n + c * is.c, dtype_of<T>(), in_size);
                        fixed(fout, indices + n * os.n + c * os.c, fos, fin, fis, g);
                        cpu::narrow_from_float(out + n * os.n + c * os.c, dtype_of<T>(), fout, out_size);
                      }
                    });
  return true;
}

// --- channels-last: a pixel's channels side by side ----------------------------------------------
// With a channel stride of 1 (a channels-last image), the per-plane loops above read a plane whose
// elements lie C apart, so every plane passes over every cache line of the image. The loops below
// walk the pixels instead, each step a run over the channels (vectorized in the AVX2 clones), and
// give every element its terms in the per-plane loops' order: a forward output takes its window in
// window order, a backward sum takes its outputs in raster order. Hence the per-plane loops' bits.

// Whether every image has C > 1 channels at stride 1.
bool channels_inner(const Conv2dGeometry& g, std::initializer_list<ImageStrides> images) {
  return g.channels > 1 && std::all_of(images.begin(), images.end(), [](const ImageStrides& s) { return s.c == 1; });
}

// Calls rows(r0, r1) for runs of the batch's output rows (row r is image r / out_h, row r % out_h),
// spread over the pool; `cost`: the work of one output pixel, all channels.
template <typename F> void for_output_rows(const Conv2dGeometry& g, int64_t cost, F&& rows) {
  if (g.batch * g.out_h == 0 || g.out_w == 0) return;
  cpu::parallel_for(g.batch * g.out_h, cpu::grain_for(cost * g.out_w),
                    [&](int64_t, int64_t r0, int64_t r1) { rows(r0, r1); });
}

// The windows' spans along one axis, one per output.
template <typename S> std::vector<Span> spans(int64_t outputs, S&& span) {
  std::vector<Span> v(static_cast<size_t>(outputs));
  for (int64_t o = 0; o < outputs; ++o) v[static_cast<size_t>(o)] = span(o);
  return v;
}

// Runs sum(n, c0, c1, acc, ld) for slices [c0, c1) of the channels of every image, spread over the
// pool: acc holds the slice's sums, input pixel p's channel c at acc[p * ld + c - c0], zeroed, and
// they are then stored into grad_in. Where T is the sums' own type and grad_in's images are dense
// (pixels C apart, rows in_w pixels apart), acc points into grad_in itself; otherwise it is a buffer,
// one per task. A small batch is cut into slices of 16 channels or more, to give every thread work.
// `cost`: the work of one channel of one image.
template <typename T, typename F>
void for_channel_slices_sums(const Conv2dGeometry& g, int64_t cost, T* gin, ImageStrides gis, F&& sum) {
  using A = cpu::acc_t<T>;
  const int64_t pixels = g.in_h * g.in_w, channels = g.channels;
  if (g.batch == 0 || pixels == 0) return;
  const bool in_place = std::is_same_v<T, A> && gis.w == channels && gis.h == g.in_w * channels;
  const int64_t threads = cpu::runs_inline() ? 1 : cpu::num_threads();
  const int64_t slices = std::clamp<int64_t>((threads + g.batch - 1) / g.batch, 1, std::max<int64_t>(1, channels / 16));
  const int64_t width = (channels + slices - 1) / slices;
  cpu::parallel_for(g.batch * slices, cpu::grain_for(cost * width), [&](int64_t, int64_t t0, int64_t t1) {
    std::vector<A> buffer(in_place ? 0 : static_cast<size_t>(pixels * width));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / slices, c0 = t % slices * width, c1 = std::min(channels, c0 + width);
      if (c0 >= c1) continue;
      T* image = gin + n * gis.n;
      A* acc = buffer.data();
      int64_t ld = c1 - c0;
      if constexpr (std::is_same_v<T, A>) {
        if (in_place) {
          acc = image + c0;
          ld = channels;
        }
      }
      for (int64_t p = 0; p < pixels; ++p) std::fill(acc + p * ld, acc + p * ld + (c1 - c0), A(0));
      sum(n, c0, c1, acc, ld);
      if (in_place) continue;
      for (int64_t ih = 0; ih < g.in_h; ++ih)
        for (int64_t iw = 0; iw < g.in_w; ++iw) {
          const A* a = acc + (ih * g.in_w + iw) * ld;
          T* px = image + ih * gis.h + iw * gis.w;
          for (int64_t c = c0; c < c1; ++c) cpu::st(px, c, a[c - c0]);
        }
    }
  });
}

// max_pool2d over output rows [r0, r1): per output pixel, the window's valid taps in window order
// across the channels (the first taken, then strictly greater or a NaN; the last NaN wins), as the
// per-plane paths pick. The winner is kept as its plane index in int32 (as wide as a float lane, so
// the selects vectorize); the caller sees to in_h * in_w < 2^31. A window with no valid tap gives
// -inf and index -1.
template <typename T, typename A>
KILN_CPU_CLONES void max_pool_rows_cl(T* out, int64_t* indices, ImageStrides os, const T* in, ImageStrides is,
                                      const Conv2dGeometry& g, int64_t r0, int64_t r1, A* best, int32_t* at) {
  const Window2d& w = g.window;
  const int64_t channels = g.channels;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / g.out_h, oh = r % g.out_h;
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      bool first = true;
      for (int64_t i = 0; i < w.kernel_h; ++i) {
        const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
        if (ih < 0 || ih >= g.in_h) continue;
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          const int64_t iw = ow * w.stride_w - w.pad_w + j * w.dilation_w;
          if (iw < 0 || iw >= g.in_w) continue;
          const T* px = in + n * is.n + ih * is.h + iw * is.w;
          const auto tap = static_cast<int32_t>(ih * g.in_w + iw);
          if (first) {
            for (int64_t c = 0; c < channels; ++c) {
              best[c] = cpu::ld<T, A>(px, c);
              at[c] = tap;
            }
            first = false;
            continue;
          }
          for (int64_t c = 0; c < channels; ++c) {
            const A v = cpu::ld<T, A>(px, c), b = best[c];
            const bool take = (v > b) | (v != v);  // the last NaN wins
            best[c] = take ? v : b;
            at[c] = take ? tap : at[c];
          }
        }
      }
      T* op = out + n * os.n + oh * os.h + ow * os.w;
      int64_t* xp = indices + n * os.n + oh * os.h + ow * os.w;
      for (int64_t c = 0; c < channels; ++c) {
        cpu::st(op, c, first ? A(-INFINITY) : best[c]);
        xp[c] = first ? -1 : at[c];
      }
    }
  }
}

template <typename T>
void max_pool_forward_cl(T* out, int64_t* indices, ImageStrides os, const T* in, ImageStrides is,
                         const Conv2dGeometry& g) {
  using A = cpu::acc_t<T>;
  const Window2d& w = g.window;
  for_output_rows(g, g.channels * w.kernel_h * w.kernel_w, [&](int64_t r0, int64_t r1) {
    std::vector<A> best(static_cast<size_t>(g.channels));
    std::vector<int32_t> at(static_cast<size_t>(g.channels));
    max_pool_rows_cl<T, A>(out, indices, os, in, is, g, r0, r1, best.data(), at.data());
  });
}

// The max_pool2d gradients of image n's channels [c0, c1) into acc (for_channel_slices_sums), the
// outputs in raster order as the per-plane path adds them. A scatter: scalar code.
template <typename T, typename A>
void max_pool_scatter_cl(A* acc, int64_t ld, const T* gout, ImageStrides gos, const int64_t* indices, ImageStrides xs,
                         const Conv2dGeometry& g, int64_t n, int64_t c0, int64_t c1) {
  const int64_t plane_size = g.in_h * g.in_w;
  for (int64_t oh = 0; oh < g.out_h; ++oh)
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const T* gp = gout + n * gos.n + oh * gos.h + ow * gos.w;
      const int64_t* xp = indices + n * xs.n + oh * xs.h + ow * xs.w;
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t idx = xp[c];
        if (idx >= 0 && idx < plane_size) acc[idx * ld + c - c0] += cpu::ld<T, A>(gp, c);
      }
    }
}

// Mean pooling over output rows [r0, r1): per output pixel, the window's elements in window order
// summed across the channels in `sum`, then divided, as mean_pool_forward does per plane.
template <typename T, typename A>
KILN_CPU_CLONES void mean_pool_rows_cl(T* out, ImageStrides os, const T* in, ImageStrides is, const Conv2dGeometry& g,
                                       const Span* span_h, const Span* span_w, int64_t r0, int64_t r1, A* sum) {
  const int64_t channels = g.channels;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / g.out_h, oh = r % g.out_h;
    const Span sh = span_h[oh];
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const Span sw = span_w[ow];
      std::fill(sum, sum + channels, A(0));
      for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
        for (int64_t iw = sw.lo; iw < sw.hi; ++iw) {
          const T* px = in + n * is.n + ih * is.h + iw * is.w;
          for (int64_t c = 0; c < channels; ++c) sum[c] += cpu::ld<T, A>(px, c);
        }
      const A size = static_cast<A>(sh.size * sw.size);
      T* op = out + n * os.n + oh * os.h + ow * os.w;
      for (int64_t c = 0; c < channels; ++c) cpu::st(op, c, sum[c] / size);
    }
  }
}

// The mean-pooling gradients of image n's channels [c0, c1) into acc (for_channel_slices_sums): each
// output's gradient divided by its window's size, then added to the window's pixels, outputs in
// raster order as mean_pool_backward adds them.
template <typename T, typename A>
KILN_CPU_CLONES void mean_pool_spread_cl(A* acc, int64_t ld, const T* gout, ImageStrides gos, const Conv2dGeometry& g,
                                         const Span* span_h, const Span* span_w, int64_t n, int64_t c0, int64_t c1,
                                         A* share) {
  const int64_t width = c1 - c0;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    const Span sh = span_h[oh];
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      const Span sw = span_w[ow];
      const T* gp = gout + n * gos.n + oh * gos.h + ow * gos.w + c0;
      const A size = static_cast<A>(sh.size * sw.size);
      for (int64_t c = 0; c < width; ++c) share[c] = cpu::ld<T, A>(gp, c) / size;
      for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
        for (int64_t iw = sw.lo; iw < sw.hi; ++iw) cpu::add_run(acc + (ih * g.in_w + iw) * ld, share, width);
    }
  }
}

template <typename T, typename SH, typename SW>
void mean_pool_forward_cl(T* out, ImageStrides os, const T* in, ImageStrides is, const Conv2dGeometry& g,
                          int64_t taps, SH&& span_h, SW&& span_w) {
  using A = cpu::acc_t<T>;
  const std::vector<Span> sh = spans(g.out_h, span_h), sw = spans(g.out_w, span_w);
  for_output_rows(g, g.channels * taps, [&](int64_t r0, int64_t r1) {
    std::vector<A> sum(static_cast<size_t>(g.channels));
    mean_pool_rows_cl<T, A>(out, os, in, is, g, sh.data(), sw.data(), r0, r1, sum.data());
  });
}

template <typename T, typename SH, typename SW>
void mean_pool_backward_cl(T* gin, ImageStrides gis, const T* gout, ImageStrides gos, const Conv2dGeometry& g,
                           int64_t taps, SH&& span_h, SW&& span_w) {
  using A = cpu::acc_t<T>;
  const std::vector<Span> sh = spans(g.out_h, span_h), sw = spans(g.out_w, span_w);
  for_channel_slices_sums(g, g.out_h * g.out_w * taps + g.in_h * g.in_w, gin, gis,
                          [&](int64_t n, int64_t c0, int64_t c1, A* acc, int64_t ld) {
                            std::vector<A> share(static_cast<size_t>(c1 - c0));
                            mean_pool_spread_cl<T, A>(acc, ld, gout, gos, g, sh.data(), sw.data(), n, c0, c1,
                                                      share.data());
                          });
}

// Shared by avg_pool2d and adaptive_avg_pool2d: span_h(oh) / span_w(ow) give the windows.
template <typename T, typename SH, typename SW>
void mean_pool_forward(T* out, ImageStrides os, const T* in, ImageStrides is, const Conv2dGeometry& g, int64_t taps,
                       SH&& span_h, SW&& span_w) {
  if (channels_inner(g, {is, os})) return mean_pool_forward_cl(out, os, in, is, g, taps, span_h, span_w);
  mean_pool_forward_planes(out, os, in, is, g, taps, span_h, span_w);
}

template <typename T, typename SH, typename SW>
void mean_pool_backward(T* gin, ImageStrides gis, const T* gout, ImageStrides gos, const Conv2dGeometry& g,
                        int64_t taps, SH&& span_h, SW&& span_w) {
  if (channels_inner(g, {gis, gos})) return mean_pool_backward_cl(gin, gis, gout, gos, g, taps, span_h, span_w);
  mean_pool_backward_planes(gin, gis, gout, gos, g, taps, span_h, span_w);
}

}  // namespace

void max_pool2d_forward_cpu(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                            ImageStrides in_strides, DType dtype, const Conv2dGeometry& g, const KernelContext&) {
  visit_float("max_pool2d", dtype, [&]<typename T>() {
    using A = cpu::acc_t<T>;
    const Window2d& w = g.window;
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    const ImageStrides is = in_strides, os = out_strides;
    if (channels_inner(g, {is, os}) && g.in_h * g.in_w <= INT32_MAX) {
      return max_pool_forward_cl(dst, indices, os, src, is, g);
    }
    if constexpr (cpu::is_16bit_float<T>) {
      if (max_pool_widened(dst, indices, os, src, is, g)) return;
    }
    if (auto fixed = fixed_max_pool<T, A>(g, is.w == 1 && os.w == 1)) {
      for_each_plane(g, g.out_h * g.out_w * w.kernel_h * w.kernel_w, [&](int64_t n, int64_t c) {
        fixed(dst + n * os.n + c * os.c, indices + n * os.n + c * os.c, os, src + n * is.n + c * is.c, is, g);
      });
      return;
    }
    // A row of outputs at a time, one tap at a time across the row: the loop over the row has no
    // bounds checks (the tap's in-range outputs are computed first) and picks with selects, which
    // the compiler vectorizes in the AVX2 clone. (A loop over the window per output branched on data and mispredicted
    // so often that it was among the costliest loops of a small CNN's step.) Each output sees its
    // taps in window order, so ties keep the first, as before.
    for_each_plane(g, g.out_h * g.out_w * w.kernel_h * w.kernel_w, [&](int64_t n, int64_t c) {
      const T* ip = src + n * is.n + c * is.c;
      T* op = dst + n * os.n + c * os.c;
      int64_t* xp = indices + n * os.n + c * os.c;
      std::vector<A> best(static_cast<size_t>(g.out_w));
      std::vector<int64_t> best_i(static_cast<size_t>(g.out_w));
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        std::fill(best.begin(), best.end(), A(0));
        std::fill(best_i.begin(), best_i.end(), int64_t{-1});
        for (int64_t i = 0; i < w.kernel_h; ++i) {
          const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
          if (ih < 0 || ih >= g.in_h) continue;
          const T* row = ip + ih * is.h;
          for (int64_t j = 0; j < w.kernel_w; ++j) {
            // Output ow reads iw = ow * stride + shift; the outputs whose iw is inside the image:
            const int64_t shift = j * w.dilation_w - w.pad_w;
            const int64_t lo = shift >= 0 ? 0 : (-shift + w.stride_w - 1) / w.stride_w;
            const int64_t hi = g.in_w - 1 - shift < 0 ? 0 : std::min(g.out_w, (g.in_w - 1 - shift) / w.stride_w + 1);
            pick_max(best.data(), best_i.data(), row, is.w, ih * g.in_w, w.stride_w, shift, lo, hi);
          }
        }
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t bi = best_i[static_cast<size_t>(ow)];
          const int64_t o = oh * os.h + ow * os.w;
          // A window entirely in the padding cannot happen with pad <= kernel / 2 (checked by
          // the op); keep the kernel total anyway.
          // The winner's value, read back from its accumulator (exact: it was a T).
          if (bi < 0) {
            op[o] = T(-INFINITY);
          } else {
            cpu::st(op, o, best[static_cast<size_t>(ow)]);
          }
          xp[o] = bi;
        }
      }
    });
  });
}

void max_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                             DType dtype, const Conv2dGeometry& g, const KernelContext&) {
  visit_float("max_pool2d_backward", dtype, [&]<typename T>() {
    using A = cpu::acc_t<T>;
    const ImageStrides gis = grad_in_strides, gos = grad_out_strides, xs = indices_strides;
    T* gin = static_cast<T*>(grad_in);
    const T* gout = static_cast<const T*>(grad_out);
    const int64_t plane_size = g.in_h * g.in_w;
    if (channels_inner(g, {gis, gos, xs})) {
      for_channel_slices_sums(g, g.out_h * g.out_w + plane_size, gin, gis,
                              [&](int64_t n, int64_t c0, int64_t c1, A* acc, int64_t ld) {
                                max_pool_scatter_cl(acc, ld, gout, gos, indices, xs, g, n, c0, c1);
                              });
      return;
    }
    // A 16-bit gradient's dense rows are widened in bulk (kernels/cpu/convert.h) before the scatter,
    // up to kChunk outputs at a time into a buffer on the stack.
    constexpr int64_t kChunk = 256;
    const bool widen_rows = cpu::is_16bit_float<T> && gos.w == 1;
    const int64_t chunk = widen_rows ? kChunk : g.out_w;
    for_each_plane_sums(g, g.out_h * g.out_w + plane_size, gin, gis, [&](int64_t n, int64_t c, A* acc) {
      const T* gp = gout + n * gos.n + c * gos.c;
      const int64_t* xp = indices + n * xs.n + c * xs.c;
      A wide[kChunk];
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t o0 = 0; o0 < g.out_w; o0 += chunk) {
          const int64_t o1 = std::min(g.out_w, o0 + chunk);
          if constexpr (std::is_same_v<A, float>) {
            if (widen_rows) cpu::widen_to_float(wide, gp + oh * gos.h + o0, dtype_of<T>(), o1 - o0);
          }
          for (int64_t ow = o0; ow < o1; ++ow) {
            const int64_t idx = xp[oh * xs.h + ow * xs.w];
            if (idx < 0 || idx >= plane_size) continue;
            acc[idx] += widen_rows ? wide[ow - o0] : cpu::ld<T, A>(gp, oh * gos.h + ow * gos.w);
          }
        }
      }
    });
  });
}

void avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides, DType dtype,
                            const Conv2dGeometry& g, bool count_include_pad, const KernelContext&) {
  const Window2d w = g.window;
  auto sh = [&](int64_t o) { return avg_span(o, g.in_h, w.kernel_h, w.stride_h, w.pad_h, count_include_pad); };
  auto sw = [&](int64_t o) { return avg_span(o, g.in_w, w.kernel_w, w.stride_w, w.pad_w, count_include_pad); };
  visit_float("avg_pool2d", dtype, [&]<typename T>() {
    mean_pool_forward(static_cast<T*>(out), out_strides, static_cast<const T*>(in), in_strides, g,
                      w.kernel_h * w.kernel_w, sh, sw);
  });
}

void avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                             bool count_include_pad, const KernelContext&) {
  const Window2d w = g.window;
  auto sh = [&](int64_t o) { return avg_span(o, g.in_h, w.kernel_h, w.stride_h, w.pad_h, count_include_pad); };
  auto sw = [&](int64_t o) { return avg_span(o, g.in_w, w.kernel_w, w.stride_w, w.pad_w, count_include_pad); };
  visit_float("avg_pool2d_backward", dtype, [&]<typename T>() {
    mean_pool_backward(static_cast<T*>(grad_in), grad_in_strides, static_cast<const T*>(grad_out), grad_out_strides, g,
                       w.kernel_h * w.kernel_w, sh, sw);
  });
}

void adaptive_avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                     DType dtype, const Conv2dGeometry& g, const KernelContext&) {
  if (g.out_h <= 0 || g.out_w <= 0) return;
  auto sh = [&](int64_t o) { return adaptive_span(o, g.in_h, g.out_h); };
  auto sw = [&](int64_t o) { return adaptive_span(o, g.in_w, g.out_w); };
  // A window covers about (in / out + 1) elements per axis.
  const int64_t taps = (g.in_h / g.out_h + 1) * (g.in_w / g.out_w + 1);
  visit_float("adaptive_avg_pool2d", dtype, [&]<typename T>() {
    mean_pool_forward(static_cast<T*>(out), out_strides, static_cast<const T*>(in), in_strides, g, taps, sh, sw);
  });
}

void adaptive_avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                      ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                                      const KernelContext&) {
  if (g.out_h <= 0 || g.out_w <= 0) return;
  auto sh = [&](int64_t o) { return adaptive_span(o, g.in_h, g.out_h); };
  auto sw = [&](int64_t o) { return adaptive_span(o, g.in_w, g.out_w); };
  const int64_t taps = (g.in_h / g.out_h + 1) * (g.in_w / g.out_w + 1);
  visit_float("adaptive_avg_pool2d_backward", dtype, [&]<typename T>() {
    mean_pool_backward(static_cast<T*>(grad_in), grad_in_strides, static_cast<const T*>(grad_out), grad_out_strides, g,
                       taps, sh, sw);
  });
}

}  // namespace kiln
