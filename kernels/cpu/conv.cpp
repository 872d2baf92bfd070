// CPU im2col / col2im. im2col is split over output rows (n, oh), each writing whole contiguous
// column rows; col2im is split over input planes (n, c), each summed in a local buffer in one fixed
// order (output pixel, then kernel tap) and stored once, which is what makes it deterministic.
#include "kernels/conv.h"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

namespace kiln {
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

template <typename T, typename C>
void im2col_typed(C* col, int64_t ld, const T* in, ImageStrides s, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w;
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
        const bool w_inside = iw0 >= 0 && iw0 + (w.kernel_w - 1) * w.dilation_w < g.in_w;
        for (int64_t c = 0; c < g.channels; ++c) {
          const T* plane = img + c * s.c;
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            const int64_t ih = ih0 + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h) {
              for (int64_t j = 0; j < w.kernel_w; ++j) *dst++ = C(0);
              continue;
            }
            const T* src_row = plane + ih * s.h;
            if (w_inside) {
              const T* src = src_row + iw0 * s.w;
              const int64_t step = w.dilation_w * s.w;
              for (int64_t j = 0; j < w.kernel_w; ++j) *dst++ = widen<C>(src[j * step]);
            } else {
              for (int64_t j = 0; j < w.kernel_w; ++j) {
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

template <typename T, typename C>
void col2im_typed(T* out, ImageStrides s, const C* col, int64_t ld, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w;
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
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            const int64_t ih = ih0 + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h) continue;
            C* arow = acc.data() + ih * g.in_w;
            for (int64_t j = 0; j < w.kernel_w; ++j) {
              const int64_t iw = iw0 + j * w.dilation_w;
              if (iw >= 0 && iw < g.in_w) arow[iw] += src[i * w.kernel_w + j];
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

}  // namespace

void im2col_cpu(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                const Conv2dGeometry& g) {
  check_dtypes("im2col", in_dtype, col_dtype);
  if (g.batch * g.out_h * g.out_w * g.channels == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    im2col_typed<T, C>(static_cast<C*>(col), ld_col, static_cast<const T*>(in), in_strides, g);
  });
}

void col2im_cpu(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                int64_t ld_col, const Conv2dGeometry& g) {
  check_dtypes("col2im", in_dtype, col_dtype);
  if (g.batch * g.channels * g.in_h * g.in_w == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    col2im_typed<T, C>(static_cast<T*>(in_grad), in_strides, static_cast<const C*>(col), ld_col, g);
  });
}

}  // namespace kiln
