// The CPU convolution's column matrices (kernels/cpu/im2col.h): the channels-last rows and the NCHW
// planes, and their adjoints.
#include "kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/loops.h"
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

// Copies n values from src, `stride` elements apart, into dst, widening them to C: one memcpy when
// both are dense and of the same type, the bulk conversion (kernels/cpu/convert.h) for a dense half
// run into float.
template <typename T, typename C> inline void copy_run(C* dst, const T* src, int64_t n, int64_t stride) {
  if constexpr (std::is_same_v<T, C>) {
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
      return;
    }
  } else if constexpr (std::is_same_v<C, float> && is_16bit_float<T>) {
    if (stride == 1) {
      widen_to_float(dst, src, dtype_of<T>(), n);
      return;
    }
  }
  if (stride == 1) {
    for (int64_t e = 0; e < n; ++e) dst[e] = widen<C>(src[e]);
  } else {
    for (int64_t e = 0; e < n; ++e) dst[e] = widen<C>(src[e * stride]);
  }
}

// The row columns (kernels/cpu/im2col.h): each row is an output pixel's window, group after group,
// tap after tap, each tap a run of the group's channels. Tasks are output rows (image, oh). With
// one group and the channels of a pixel adjacent and pixels dense (a dense channels-last image),
// a window row inside the image is one contiguous run of KW*C values: one copy; otherwise one copy
// of Cg channels per tap.
template <typename T, typename C>
void im2col_rows_typed(C* col, int64_t ld, const T* in, ImageStrides s, const Conv2dGeometry& g, int64_t groups) {
  const Window2d& w = g.window;
  const int64_t kw = w.kernel_w, cg = g.channels / groups, k = w.kernel_h * kw * cg;
  const bool whole_rows = groups == 1 && s.c == 1 && s.w == g.channels && w.dilation_w == 1;
  const int64_t rows = g.batch * g.out_h;
  cpu::parallel_for(rows, cpu::grain_for(g.out_w * g.channels * w.kernel_h * kw), [&](int64_t, int64_t r0,
                                                                                       int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.out_h, oh = r % g.out_h;
      const T* img = in + n * s.n;
      const int64_t ih0 = oh * w.stride_h - w.pad_h;
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        C* dst = col + (r * g.out_w + ow) * ld;
        const int64_t iw0 = ow * w.stride_w - w.pad_w;
        const bool w_inside = iw0 >= 0 && iw0 + (kw - 1) * w.dilation_w < g.in_w;
        for (int64_t gi = 0; gi < groups; ++gi) {
          for (int64_t i = 0; i < w.kernel_h; ++i) {
            C* d = dst + gi * k + i * kw * cg;
            const int64_t ih = ih0 + i * w.dilation_h;
            if (ih < 0 || ih >= g.in_h) {
              std::fill(d, d + kw * cg, C(0));
              continue;
            }
            const T* src_row = img + ih * s.h + gi * cg * s.c;
            if (whole_rows && w_inside) {
              copy_run(d, src_row + iw0 * s.w, kw * cg, 1);
              continue;
            }
            for (int64_t j = 0; j < kw; ++j, d += cg) {
              const int64_t iw = iw0 + j * w.dilation_w;
              if (iw >= 0 && iw < g.in_w) {
                copy_run(d, src_row + iw * s.w, cg, s.c);
              } else {
                std::fill(d, d + cg, C(0));
              }
            }
          }
        }
      }
    }
  });
}

// The adjoint of im2col_rows_typed. Tasks are input rows (image, ih): a row's [W, C] sums start
// from zero and take, for each kernel row i that reaches ih (i ascending), each output pixel of the
// output row reading it (ow ascending), that pixel's taps; every element gets at most one term per
// (i, ow), so the order of its terms is (i, ow) whichever loop adds them, and the bits depend on
// neither the thread count nor the path. With one group and no dilation along W, a window row
// inside the image adds one contiguous run of KW*C values. The sums go straight into a dense
// channels-last row of the column dtype, else into a buffer that is then stored.
template <typename T, typename C>
void col2im_rows_typed(T* out, ImageStrides s, const C* col, int64_t ld, const Conv2dGeometry& g, int64_t groups) {
  const Window2d& w = g.window;
  const int64_t kw = w.kernel_w, ch = g.channels, cg = ch / groups, k = w.kernel_h * kw * cg;
  const int64_t row_size = g.in_w * ch;
  const bool whole_rows = groups == 1 && w.dilation_w == 1;
  const bool in_place = std::is_same_v<T, C> && s.c == 1 && s.w == ch;
  const int64_t cost = (w.kernel_h + w.stride_h - 1) / w.stride_h * g.out_w * kw * ch + row_size;
  cpu::parallel_for(g.batch * g.in_h, cpu::grain_for(cost), [&](int64_t, int64_t r0, int64_t r1) {
    std::vector<C> buffer(in_place ? 0 : static_cast<size_t>(row_size));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.in_h, ih = r % g.in_h;
      T* dst_row = out + n * s.n + ih * s.h;
      C* acc = buffer.data();
      bool direct = false;
      if constexpr (std::is_same_v<T, C>) {
        if (in_place) {
          acc = dst_row;
          direct = true;
        }
      }
      std::fill(acc, acc + row_size, C(0));
      for (int64_t i = 0; i < w.kernel_h; ++i) {
        const int64_t t = ih + w.pad_h - i * w.dilation_h;  // oh * stride_h when output row oh reads ih
        if (t < 0 || t % w.stride_h != 0 || t / w.stride_h >= g.out_h) continue;
        const int64_t oh = t / w.stride_h;
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const C* src = col + ((n * g.out_h + oh) * g.out_w + ow) * ld + i * kw * cg;
          const int64_t iw0 = ow * w.stride_w - w.pad_w;
          if (whole_rows && iw0 >= 0 && iw0 + kw - 1 < g.in_w) {
            add_run(acc + iw0 * ch, src, kw * ch);
            continue;
          }
          for (int64_t gi = 0; gi < groups; ++gi) {
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t iw = iw0 + j * w.dilation_w;
              if (iw >= 0 && iw < g.in_w) add_run(acc + iw * ch + gi * cg, src + gi * k + j * cg, cg);
            }
          }
        }
      }
      if (!direct) {
        for (int64_t iw = 0; iw < g.in_w; ++iw) {
          for (int64_t c = 0; c < ch; ++c) dst_row[iw * s.w + c * s.c] = narrow_to<T>(acc[iw * ch + c]);
        }
      }
    }
  });
}

void check_groups(const char* what, const Conv2dGeometry& g, int64_t groups) {
  if (groups < 1 || g.channels % groups != 0) {
    throw ShapeError(std::string(what) + ": groups " + std::to_string(groups) + " do not divide " +
                     std::to_string(g.channels) + " channels");
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

// Tap (i, j) of a convolution at stride 1 over a plane whose rows are `row` elements apart, with
// row == out_w: output pixel q = oh * out_w + ow reads the plane's element q + off, one offset for
// the whole tap. Output rows [first, last) read rows inside the image, and [q0, q1) is the part of
// theirs whose element lies within the plane's extent (the first row's first element to the last
// row's last); what the clamp leaves out lies in columns outside the image.
struct ShiftedTap {
  int64_t first, last, off, q0, q1;
};
ShiftedTap shifted_tap(const Conv2dGeometry& g, int64_t i, int64_t j, int64_t row) {
  const Window2d& w = g.window;
  const int64_t row0 = i * w.dilation_h - w.pad_h;  // output row oh reads image row oh + row0
  ShiftedTap t;
  t.first = std::clamp<int64_t>(-row0, 0, g.out_h);
  t.last = std::clamp<int64_t>(g.in_h - row0, t.first, g.out_h);
  t.off = row0 * row + j * w.dilation_w - w.pad_w;
  t.q0 = std::max(t.first * g.out_w, -t.off);
  t.q1 = std::min(t.last * g.out_w, (g.in_h - 1) * row + g.in_w - t.off);
  return t;
}

// A "same" convolution at stride 1 over dense rows (stride 1 both ways, the image's rows out_w
// elements apart): the tap's columns are the plane shifted by one offset (shifted_tap). They are one
// contiguous copy of the rows inside the image, after which the columns outside it (which read the
// neighbouring row's far end, or the row gap) and the rows outside it are zeroed.
template <typename T, typename C>
void im2col_shifted_plane(C* dst, const T* plane, ImageStrides s, const Conv2dGeometry& g, int64_t i, int64_t j,
                          const ColumnSpan& span) {
  const ShiftedTap t = shifted_tap(g, i, j, s.h);
  std::fill(dst, dst + t.first * g.out_w, C(0));
  if (t.q1 > t.q0) copy_run(dst + t.q0, plane + (t.q0 + t.off), t.q1 - t.q0, 1);
  for (int64_t oh = t.first; oh < t.last; ++oh) {
    C* row = dst + oh * g.out_w;
    std::fill(row, row + span.lo, C(0));
    std::fill(row + span.hi, row + g.out_w, C(0));
  }
  std::fill(dst + t.last * g.out_w, dst + g.out_h * g.out_w, C(0));
}

// The planar columns: row (c, i, j) holds, image after image and output pixel after output pixel,
// what tap (i, j) of channel c reads. Tasks are (row, image) pairs. A "same" convolution at stride 1
// over dense rows copies each tap's plane whole (im2col_shifted_plane); otherwise, where stride_w is
// 1 and the image row is dense, each output row is one contiguous copy between its zero edges.
template <typename T, typename C>
void im2col_planes_typed(C* col, int64_t ld, const T* in, ImageStrides s, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w, pixels = g.out_h * g.out_w;
  const bool shifted = w.stride_h == 1 && w.stride_w == 1 && s.w == 1 && s.h == g.out_w;
  cpu::parallel_for(g.channels * taps * g.batch, cpu::grain_for(pixels), [&](int64_t, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / g.batch, n = t % g.batch;
      const int64_t c = r / taps, i = r % taps / w.kernel_w, j = r % w.kernel_w;
      const ColumnSpan span = column_span(g, j);
      const T* plane = in + n * s.n + c * s.c;
      C* dst = col + r * ld + n * pixels;
      if (shifted) {
        im2col_shifted_plane(dst, plane, s, g, i, j, span);
        continue;
      }
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
        copy_run(dst + span.lo, plane + ih * s.h + span.first_iw * s.w, span.hi - span.lo, step);
      }
    }
  });
}

// The adjoint of im2col_shifted_plane, where the sums' rows are as far apart as the columns'
// (stride 1 and in_w == out_w): tap (i, j) adds its columns to the plane's sums `acc` as one
// contiguous run shifted by off (shifted_tap). The columns outside the image land on the
// neighbouring row's far end (or are clamped away): those sums are saved in `saved` (out_h * out_w
// elements) before the run and put back after it, so every sum takes the same terms in the same
// order as when each row adds only its span. (A clone for AVX2's 8-wide adds.)
template <typename C>
KILN_CPU_CLONES void col2im_shifted_tap(C* acc, C* saved, const C* src, const Conv2dGeometry& g, int64_t i,
                                        int64_t j, const ColumnSpan& span) {
  const ShiftedTap t = shifted_tap(g, i, j, g.in_w);
  if (t.q1 <= t.q0 || span.lo == span.hi) return;  // no column inside the image
  // Calls f(q) for each output pixel q in [q0, q1) whose column is outside the image: the first
  // row's head, the gaps from one row's span to the next one's (each as long as the others), and the
  // last row's tail. (Output pixel (first, lo) reads inside the image, so q0 <= first * out_w + lo;
  // likewise q1 >= (last - 1) * out_w + hi.)
  auto outside = [&](auto&& f) {
    for (int64_t q = t.q0; q < t.first * g.out_w + span.lo; ++q) f(q);
    for (int64_t oh = t.first; oh + 1 < t.last; ++oh) {
      for (int64_t q = oh * g.out_w + span.hi; q < (oh + 1) * g.out_w + span.lo; ++q) f(q);
    }
    for (int64_t q = (t.last - 1) * g.out_w + span.hi; q < t.q1; ++q) f(q);
  };
  int64_t k = 0;
  outside([&](int64_t q) { saved[k++] = acc[q + t.off]; });
  add_run(acc + (t.q0 + t.off), src + t.q0, t.q1 - t.q0);
  k = 0;
  outside([&](int64_t q) { acc[q + t.off] = saved[k++]; });
}

// Tasks are input planes (image, channel): each sums its taps in a local buffer in one fixed order
// (tap, then output pixel) and stores once, so the bits do not depend on the thread count. Where
// im2col copies shifted planes and the image's rows are as wide as the output's, each tap is one
// shifted add (col2im_shifted_tap); otherwise each output row adds its span.
template <typename T, typename C>
void col2im_planes_typed(T* out, ImageStrides s, const C* col, int64_t ld, const Conv2dGeometry& g) {
  const Window2d& w = g.window;
  const int64_t taps = w.kernel_h * w.kernel_w, pixels = g.out_h * g.out_w;
  const int64_t in_pixels = g.in_h * g.in_w;
  const bool shifted = w.stride_h == 1 && w.stride_w == 1 && g.in_w == g.out_w;
  cpu::parallel_for(g.batch * g.channels, cpu::grain_for(pixels * taps + in_pixels), [&](int64_t, int64_t p0,
                                                                                          int64_t p1) {
    std::vector<C> acc(static_cast<size_t>(in_pixels)), saved(shifted ? static_cast<size_t>(pixels) : 0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.channels, c = p % g.channels;
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t i = 0; i < w.kernel_h; ++i) {
        for (int64_t j = 0; j < w.kernel_w; ++j) {
          const ColumnSpan span = column_span(g, j);
          const C* src = col + (c * taps + i * w.kernel_w + j) * ld + n * pixels;
          if (shifted) {
            col2im_shifted_tap(acc.data(), saved.data(), src, g, i, j, span);
            continue;
          }
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
                 const Conv2dGeometry& g, int64_t groups) {
  check_dtypes("im2col_rows", in_dtype, col_dtype);
  check_groups("im2col_rows", g, groups);
  if (g.batch * g.out_h * g.out_w * g.channels == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    im2col_rows_typed<T, C>(static_cast<C*>(col), ld_col, static_cast<const T*>(in), in_strides, g, groups);
  });
}

void col2im_rows(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                 int64_t ld_col, const Conv2dGeometry& g, int64_t groups) {
  check_dtypes("col2im_rows", in_dtype, col_dtype);
  check_groups("col2im_rows", g, groups);
  if (g.batch * g.channels * g.in_h * g.in_w == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    col2im_rows_typed<T, C>(static_cast<T*>(in_grad), in_strides, static_cast<const C*>(col), ld_col, g, groups);
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
