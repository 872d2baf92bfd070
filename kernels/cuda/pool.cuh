// 2-d pooling's CUDA kernels (the twins of kernels/cpu/pool.cpp), launched by kernels/cuda/pool.cu,
// over NCHW or channels-last through strides. Forward: one thread per output element. Backward:
// one thread per INPUT element that gathers from the outputs whose windows can hold it, in output
// raster order -- the order in which the CPU scatters -- so there are no atomics, results are
// deterministic, and float32 matches the CPU's bits. Threads walk channels innermost when the
// written tensor is channels-last, for coalescing.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads
// (tests/kernels/test_pool_simt.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/conv.h"
#include "kernels/cuda/device_math.cuh"

namespace kiln::pool_cuda {

using cuda_detail::from_f32;
using cuda_detail::global_thread;
using cuda_detail::grid_threads;
using cuda_detail::min_i64;
using cuda_detail::to_f32;

// Accumulation type: float, double for double (as on the CPU).
template <typename S> using AccOf = std::conditional_t<std::is_same_v<S, double>, double, float>;

template <typename S> __device__ __forceinline__ AccOf<S> to_acc(S v) {
  if constexpr (std::is_same_v<S, double>) {
    return v;
  } else {
    return to_f32(v);
  }
}
template <typename S> __device__ __forceinline__ S from_acc(AccOf<S> v) {
  if constexpr (std::is_same_v<S, double>) {
    return v;
  } else {
    return from_f32<S>(v);
  }
}

struct Pixel {
  int64_t n, c, h, w;
};

// Pixel `i` of an [N, C, H, W] index space, channels innermost (c_inner) or NCHW order.
__device__ __forceinline__ Pixel pixel_of(int64_t i, int64_t channels, int64_t height, int64_t width, bool c_inner) {
  Pixel p;
  if (c_inner) {
    p.c = i % channels;
    i /= channels;
    p.w = i % width;
    i /= width;
    p.h = i % height;
    p.n = i / height;
  } else {
    p.w = i % width;
    i /= width;
    p.h = i % height;
    i /= height;
    p.c = i % channels;
    p.n = i / channels;
  }
  return p;
}

__device__ __forceinline__ int64_t offset_of(const ImageStrides& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * s.n + c * s.c + h * s.h + w * s.w;
}

// A window along one axis: real elements [lo, hi) and its divisor's share.
struct Span {
  int64_t lo, hi, size;
};

// avg_pool2d (PyTorch's rule, as the CPU): the window clipped to the padded extent [-pad, in + pad)
// counts with count_include_pad; the real elements are that clipped again to [0, in).
__device__ __forceinline__ Span avg_span(int64_t o, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                         bool include_pad) {
  const int64_t start = o * stride - pad;
  const int64_t end = min_i64(start + kernel, in + pad);
  const int64_t lo = start > 0 ? start : 0, hi = min_i64(end, in);
  return {lo, hi, include_pad ? end - start : hi - lo};
}

__device__ __forceinline__ Span adaptive_span(int64_t o, int64_t in, int64_t out) {
  const int64_t lo = (o * in) / out;
  const int64_t hi = ((o + 1) * in + out - 1) / out;
  return {lo, hi, hi - lo};
}

// Outputs [first, last] along one axis whose window (kernel taps at stride, dilation, after
// padding) may reach input position i; the callers check actual membership.
struct Range {
  int64_t first, last;
};

__device__ __forceinline__ Range window_outputs(int64_t i, int64_t kernel, int64_t stride, int64_t pad,
                                                int64_t dilation, int64_t out) {
  // Output o covers [o*stride - pad, o*stride - pad + (kernel-1)*dilation].
  const int64_t lowest = i + pad - (kernel - 1) * dilation;  // o*stride >= lowest
  const int64_t first = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  const int64_t last = min_i64((i + pad) / stride, out - 1);
  return {first, last};
}

__device__ __forceinline__ Range adaptive_outputs(int64_t i, int64_t in, int64_t out) {
  // Window o is [floor(o*in/out), ceil((o+1)*in/out)): it holds i for o in
  // [floor(i*out/in), ceil((i+1)*out/in) - 1].
  const int64_t first = (i * out) / in;
  const int64_t last = min_i64(((i + 1) * out + in - 1) / in - 1, out - 1);
  return {first, last};
}

// --- kernels ------------------------------------------------------------------------------------

template <typename S>
__global__ void max_pool_forward_kernel(S* out, int64_t* indices, ImageStrides os, const S* in, ImageStrides is,
                                        Conv2dGeometry g, bool c_inner, int64_t total) {
  using A = AccOf<S>;
  const Window2d win = g.window;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const Pixel o = pixel_of(t, g.channels, g.out_h, g.out_w, c_inner);
    const S* plane = in + o.n * is.n + o.c * is.c;
    const int64_t h0 = o.h * win.stride_h - win.pad_h, w0 = o.w * win.stride_w - win.pad_w;
    A best = 0;
    S best_raw = from_acc<S>(A(-INFINITY));
    int64_t best_i = -1;
    for (int64_t i = 0; i < win.kernel_h; ++i) {
      const int64_t ih = h0 + i * win.dilation_h;
      if (ih < 0 || ih >= g.in_h) continue;
      for (int64_t j = 0; j < win.kernel_w; ++j) {
        const int64_t iw = w0 + j * win.dilation_w;
        if (iw < 0 || iw >= g.in_w) continue;
        const S raw = plane[ih * is.h + iw * is.w];
        const A v = to_acc(raw);
        // Strictly greater keeps the first of ties; every NaN takes over, so the last NaN wins.
        if (best_i < 0 || v > best || ::isnan(v)) {
          best = v;
          best_raw = raw;
          best_i = ih * g.in_w + iw;
        }
      }
    }
    const int64_t off = offset_of(os, o.n, o.c, o.h, o.w);
    out[off] = best_raw;  // -inf, index -1, when the window held no input (dilated taps all in padding)
    indices[off] = best_i;
  }
}

template <typename S>
__global__ void max_pool_backward_kernel(S* gin, ImageStrides gis, const S* gout, ImageStrides gos,
                                         const int64_t* indices, ImageStrides xs, Conv2dGeometry g, bool c_inner,
                                         int64_t total) {
  using A = AccOf<S>;
  const Window2d win = g.window;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const Pixel p = pixel_of(t, g.channels, g.in_h, g.in_w, c_inner);
    const int64_t target = p.h * g.in_w + p.w;
    const Range rh = window_outputs(p.h, win.kernel_h, win.stride_h, win.pad_h, win.dilation_h, g.out_h);
    const Range rw = window_outputs(p.w, win.kernel_w, win.stride_w, win.pad_w, win.dilation_w, g.out_w);
    const int64_t* xp = indices + p.n * xs.n + p.c * xs.c;
    const S* gp = gout + p.n * gos.n + p.c * gos.c;
    A acc = 0;
    for (int64_t oh = rh.first; oh <= rh.last; ++oh) {
      for (int64_t ow = rw.first; ow <= rw.last; ++ow) {
        if (xp[oh * xs.h + ow * xs.w] == target) acc += to_acc(gp[oh * gos.h + ow * gos.w]);
      }
    }
    gin[offset_of(gis, p.n, p.c, p.h, p.w)] = from_acc<S>(acc);
  }
}

// avg_pool2d (Adaptive = false) and adaptive_avg_pool2d (true).
template <typename S, bool Adaptive>
__global__ void mean_pool_forward_kernel(S* out, ImageStrides os, const S* in, ImageStrides is, Conv2dGeometry g,
                                         bool include_pad, bool c_inner, int64_t total) {
  using A = AccOf<S>;
  const Window2d win = g.window;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const Pixel o = pixel_of(t, g.channels, g.out_h, g.out_w, c_inner);
    const Span sh = Adaptive ? adaptive_span(o.h, g.in_h, g.out_h)
                             : avg_span(o.h, g.in_h, win.kernel_h, win.stride_h, win.pad_h, include_pad);
    const Span sw = Adaptive ? adaptive_span(o.w, g.in_w, g.out_w)
                             : avg_span(o.w, g.in_w, win.kernel_w, win.stride_w, win.pad_w, include_pad);
    const S* plane = in + o.n * is.n + o.c * is.c;
    A sum = 0;
    for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
      for (int64_t iw = sw.lo; iw < sw.hi; ++iw) sum += to_acc(plane[ih * is.h + iw * is.w]);
    out[offset_of(os, o.n, o.c, o.h, o.w)] = from_acc<S>(sum / static_cast<A>(sh.size * sw.size));
  }
}

template <typename S, bool Adaptive>
__global__ void mean_pool_backward_kernel(S* gin, ImageStrides gis, const S* gout, ImageStrides gos, Conv2dGeometry g,
                                          bool include_pad, bool c_inner, int64_t total) {
  using A = AccOf<S>;
  const Window2d win = g.window;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const Pixel p = pixel_of(t, g.channels, g.in_h, g.in_w, c_inner);
    const Range rh = Adaptive ? adaptive_outputs(p.h, g.in_h, g.out_h)
                              : window_outputs(p.h, win.kernel_h, win.stride_h, win.pad_h, 1, g.out_h);
    const Range rw = Adaptive ? adaptive_outputs(p.w, g.in_w, g.out_w)
                              : window_outputs(p.w, win.kernel_w, win.stride_w, win.pad_w, 1, g.out_w);
    const S* gp = gout + p.n * gos.n + p.c * gos.c;
    A acc = 0;
    for (int64_t oh = rh.first; oh <= rh.last; ++oh) {
      const Span sh = Adaptive ? adaptive_span(oh, g.in_h, g.out_h)
                               : avg_span(oh, g.in_h, win.kernel_h, win.stride_h, win.pad_h, include_pad);
      if (p.h < sh.lo || p.h >= sh.hi) continue;
      for (int64_t ow = rw.first; ow <= rw.last; ++ow) {
        const Span sw = Adaptive ? adaptive_span(ow, g.in_w, g.out_w)
                                 : avg_span(ow, g.in_w, win.kernel_w, win.stride_w, win.pad_w, include_pad);
        if (p.w < sw.lo || p.w >= sw.hi) continue;
        // The CPU divides each output's gradient once, then adds the quotient to its window.
        acc += to_acc(gp[oh * gos.h + ow * gos.w]) / static_cast<A>(sh.size * sw.size);
      }
    }
    gin[offset_of(gis, p.n, p.c, p.h, p.w)] = from_acc<S>(acc);
  }
}

// Channels innermost when the written tensor is channels-last (a one-channel image is not).
inline bool channels_inner(const ImageStrides& s, int64_t channels) { return channels > 1 && s.c == 1; }

}  // namespace kiln::pool_cuda
