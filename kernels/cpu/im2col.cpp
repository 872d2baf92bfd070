// The CPU convolution's column matrices (kernels/cpu/im2col.h): the channels-last rows and the NCHW
// planes, and their adjoints.
#include "kernels/cpu/im2col.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln::cpu {
namespace {

template <typename C, typename T> inline C widen(T v) {
  if constexpr (std::is_same_v<C, T>) {
    return v;
  } else {
    return static_cast<C>(static_cast<float>(v));
  }
}

template <typename T, typename C> inline T narrow_to(C v) {
  if constexpr (std::is_same_v<C, T>) {
    return v;
  } else {
    return T(static_cast<float>(v));
  }
}

// KW: the kernel's width when it is one of the common ones (1, 3, 5, 7), so that the innermost loops
// over a window row have a fixed length the compiler unrolls; 0 for any other width.
template <typename T, typename C, int KW>
void im2col_typed(C* col, int64_t ld, const T* in, ImageStrides s, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t kw = KW > 0 ? KW : w.kernel_w;
  const int64_t taps = w.kernel_h * kw;
  const int64_t rows = g.batch * g.out_h;
  cpu::parallel_for(rows, cpu::grain_for(g.out_w * g.channels * taps), [&](int64_t, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.out_h, oh = r % g.out_h;
      const T* img = in + n * s.n;
      const int64_t ih0 = oh * w.stride_h - w.pad_h;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        C* dst = col + (r * g.out_w + ow) * ld;
        const int64_t iw0 = ow * w.stride_w - w.pad_w;
        // Most windows lie inside the image along W: no per-tap bounds check for them.
        const bool w_inside = iw0 >= 0 && iw0 + (kw - 1) * w.dilation_w < g.in_w;
        for (int64_t c = 0; c < g.channels; ++c) {
          const T* plane = img + c * s.c;
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            const int64_t ih = ih0 + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h) {
              for (int64_t j = 0; j < kw; ++j) *dst++ = C(0);
              continue;
            }
            const T* src_row = plane + ih * s.h;
            if (w_inside) {
              const T* src = src_row + iw0 * s.w;
              const int64_t step = w.dilation_w * s.w;
              for (int64_t j = 0; j < kw; ++j) *dst++ = widen<C>(src[j * step]);
            } else {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iw = iw0 + j * w.dilation_w;
                *dst++ = (iw >= 0 && iw < g.in_w) ? widen<C>(src_row[iw * s.w]) : C(0);
              }
            }
          }
        }
      }
    }
  });
}

template <typename T, typename C, int KW>
void col2im_typed(T* out, ImageStrides s, const C* col, int64_t ld, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t kw = KW > 0 ? KW : w.kernel_w;
  const int64_t taps = w.kernel_h * kw;
  const int64_t pixels = g.out_h * g.out_w;
  const int64_t planes = g.batch * g.channels;
  cpu::parallel_for(planes, cpu::grain_for(pixels * taps + g.in_h * g.in_w), [&](int64_t, int64_t p0, int64_t p1) {
    std::vector<C> acc(static_cast<size_t>(g.in_h * g.in_w));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.channels, c = p % g.channels;
      std::fill(acc.begin(), acc.end(), C(0));
      const C* base = col + n * pixels * ld + c * taps;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const int64_t ih0 = oh * w.stride_h - w.pad_h;
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const C* src = base + (oh * g.out_w + ow) * ld;
          const int64_t iw0 = ow * w.stride_w - w.pad_w;
          // As in im2col: no per-tap bounds check for windows inside the image along W. The same
          // additions in the same order either way.
          const bool w_inside = iw0 >= 0 && iw0 + (kw - 1) * w.dilation_w < g.in_w;
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            const int64_t ih = ih0 + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h) continue;
            C* arow = acc.data() + ih * g.in_w;
            if (w_inside) {
              C* a = arow + iw0;
              for (int64_t j = 0; j < kw; ++j) a[j * w.dilation_w] += src[i * kw + j];
            } else {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iw = iw0 + j * w.dilation_w;
                if (iw >= 0 && iw < g.in_w) arow[iw] += src[i * kw + j];
              }
            }
          }
        }
      }
      T* plane = out + n * s.n + c * s.c;
      for (int64_t ih = 0; ih < g.in_h; ++ih) {
        for (int64_t iw = 0; iw < g.in_w; ++iw) {
          plane[ih * s.h + iw * s.w] = narrow_to<T>(acc[static_cast<size_t>(ih * g.in_w + iw)]);
        }
      }
    }
  });
}

// Calls f.template operator()<KW>() with the kernel width as a constant where it is a common one.
template <typename F> void with_kernel_width(int64_t kernel_w, F&& f) {
  switch (kernel_w) {
    case 1: return f.template operator()<1>();
    case 3: return f.template operator()<3>();
    case 5: return f.template operator()<5>();
    case 7: return f.template operator()<7>();
    default: return f.template operator()<0>();
  }
}

void check_dtypes(const char* what, DType in, DType col) {
  if (!is_floating(in) || col != conv_column_dtype(in)) {
    throw DTypeError(std::string(what) + ": unsupported dtypes (image " + dtype_name(in) + ", columns " +
                     dtype_name(col) + "); columns must be " + dtype_name(conv_column_dtype(in)));
  }
}

// Calls f.template operator()<T, C>() for the image type T and its column type C.
template <typename F> void visit_image_dtype(DType in, F&& f) {
  switch (in) {
    case DType::Float32: f.template operator()<float, float>(); return;
    case DType::Float64: f.template operator()<double, double>(); return;
    case DType::Float16: f.template operator()<Half, float>(); return;
    case DType::BFloat16: f.template operator()<BFloat16, float>(); return;
    default: throw DTypeError(std::string("conv2d: unsupported dtype ") + dtype_name(in));
  }
}


// The output columns [lo, hi) whose tap column j lands inside the image, and the input column
// first_iw that output column lo reads (ow reads first_iw + (ow - lo) * stride_w).
struct ColumnSpan {
  int64_t lo, hi, first_iw;
};
ColumnSpan column_span(const Conv2dGeometry& g, int64_t j) {
  const Window2d& w = g.window;
  const int64_t off = j * w.dilation_w - w.pad_w;  // ow reads ow * stride_w + off
  int64_t lo = off >= 0 ? 0 : (-off + w.stride_w - 1) / w.stride_w;
  int64_t hi = g.in_w - 1 - off < 0 ? 0 : (g.in_w - 1 - off) / w.stride_w + 1;
  lo = std::min(lo, g.out_w);
  hi = std::clamp(hi, lo, g.out_w);
  return {lo, hi, lo * w.stride_w + off};
}

// The planar columns: row (c, i, j) holds, image after image and output pixel after output pixel,
// what tap (i, j) of channel c reads. Tasks are (row, image) pairs; where stride_w is 1 and the
// image row is dense each output row is one contiguous copy between its zero edges.
template <typename T, typename C>
void im2col_planes_typed(C* col, int64_t ld, const T* in, ImageStrides s, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w, pixels = g.out_h * g.out_w;
  cpu::parallel_for(g.channels * taps * g.batch, cpu::grain_for(pixels), [&](int64_t, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / g.batch, n = t % g.batch;
      const int64_t c = r / taps, i = r % taps / w.kernel_w, j = r % w.kernel_w;
      const ColumnSpan span = column_span(g, j);
      const T* plane = in + n * s.n + c * s.c;
      C* dst = col + r * ld + n * pixels;
      const int64_t step = w.stride_w * s.w;
      for (int64_t oh = 0; oh < g.out_h; ++oh, dst += g.out_w) {
        const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
        if (ih < 0 || ih >= g.in_h) {
          std::fill(dst, dst + g.out_w, C(0));
          continue;
        }
        std::fill(dst, dst + span.lo, C(0));
        std::fill(dst + span.hi, dst + g.out_w, C(0));
        if (span.lo == span.hi) continue;
        // Output column ow in [lo, hi) reads src[(ow - lo) * step].
        const T* src = plane + ih * s.h + span.first_iw * s.w;
        if (step == 1) {
          for (int64_t ow = span.lo; ow < span.hi; ++ow) dst[ow] = widen<C>(src[ow - span.lo]);
        } else {
          for (int64_t ow = span.lo; ow < span.hi; ++ow) dst[ow] = widen<C>(src[(ow - span.lo) * step]);
        }
      }
    }
  });
}

// Tasks are input planes (image, channel): each sums its taps in a local buffer in one fixed order
// (tap, then output pixel) and stores once, so the bits do not depend on the thread count.
template <typename T, typename C>
void col2im_planes_typed(T* out, ImageStrides s, const C* col, int64_t ld, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w, pixels = g.out_h * g.out_w;
  const int64_t in_pixels = g.in_h * g.in_w;
  cpu::parallel_for(g.batch * g.channels, cpu::grain_for(pixels * taps + in_pixels), [&](int64_t, int64_t p0,
                                                                                          int64_t p1) {
    std::vector<C> acc(static_cast<size_t>(in_pixels));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.channels, c = p % g.channels;
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t i = 0; i < w.kernel_h; ++i) {
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          const ColumnSpan span = column_span(g, j);
          const C* src = col + (c * taps + i * w.kernel_w + j) * ld + n * pixels;
          for (int64_t oh = 0; oh < g.out_h; ++oh, src += g.out_w) {
            const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h || span.lo == span.hi) continue;
            C* a = acc.data() + ih * g.in_w + span.first_iw;
            if (w.stride_w == 1) {
              for (int64_t ow = span.lo; ow < span.hi; ++ow) a[ow - span.lo] += src[ow];
            } else {
              for (int64_t ow = span.lo; ow < span.hi; ++ow) a[(ow - span.lo) * w.stride_w] += src[ow];
            }
          }
        }
      }
      T* plane = out + n * s.n + c * s.c;
      for (int64_t ih = 0; ih < g.in_h; ++ih) {
        for (int64_t iw = 0; iw < g.in_w; ++iw) {
          plane[ih * s.h + iw * s.w] = narrow_to<T>(acc[static_cast<size_t>(ih * g.in_w + iw)]);
        }
      }
    }
  });
}

}  // namespace

void im2col_rows(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                const Conv2dGeometry& g) {
  check_dtypes("im2col_rows", in_dtype, col_dtype);
  if (g.batch * g.out_h * g.out_w * g.channels == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    with_kernel_width(g.window.kernel_w, [&]<int KW>() {
      im2col_typed<T, C, KW>(static_cast<C*>(col), ld_col, static_cast<const T*>(in), in_strides, g);
    });
  });
}

void col2im_rows(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                int64_t ld_col, const Conv2dGeometry& g) {
  check_dtypes("col2im_rows", in_dtype, col_dtype);
  if (g.batch * g.channels * g.in_h * g.in_w == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    with_kernel_width(g.window.kernel_w, [&]<int KW>() {
      col2im_typed<T, C, KW>(static_cast<T*>(in_grad), in_strides, static_cast<const C*>(col), ld_col, g);
    });
  });
}

void im2col_planes(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype,
                   ImageStrides in_strides, const Conv2dGeometry& g) {
  check_dtypes("im2col_planes", in_dtype, col_dtype);
  if (g.batch * g.out_h * g.out_w * g.channels == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    im2col_planes_typed<T, C>(static_cast<C*>(col), ld_col, static_cast<const T*>(in), in_strides, g);
  });
}

void col2im_planes(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                   int64_t ld_col, const Conv2dGeometry& g) {
  check_dtypes("col2im_planes", in_dtype, col_dtype);
  if (g.batch * g.channels * g.in_h * g.in_w == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    col2im_planes_typed<T, C>(static_cast<T*>(in_grad), in_strides, static_cast<const C*>(col), ld_col, g);
  });
}

}  // namespace kiln::cpu
