// CPU convolution: im2col + one GEMM per group over a chunk of the batch, in channels-last matrix form
// ([N*OH*OW, C_out]). Chunks are sized by a column-buffer budget that depends only on the shapes, so
// the weight gradient (chunks added in order) is the same bits on any thread count. im2col is split
// over output rows, each writing whole column rows; col2im over input planes, each summed in a local
// buffer in one fixed order (output pixel, then tap) and stored once, which makes it deterministic.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/error.h"
#include "kernels/factory.h"
#include "kernels/matmul.h"

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


// col[(n*OH*OW + oh*OW + ow) * ld_col + (c*KH + i)*KW + j] = in[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
// (0 outside the image) for n < batch, c < channels. `in` points at element [0, 0, 0, 0] of the
// images covered; ld_col >= channels*KH*KW.
void im2col(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                const Conv2dGeometry& g) {
  check_dtypes("im2col", in_dtype, col_dtype);
  if (g.batch * g.out_h * g.out_w * g.channels == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    with_kernel_width(g.window.kernel_w, [&]<int KW>() {
      im2col_typed<T, C, KW>(static_cast<C*>(col), ld_col, static_cast<const T*>(in), in_strides, g);
    });
  });
}

// The adjoint of im2col: in_grad[n, c, y, x] = sum of the col entries im2col read from (y, x).
// Overwrites every element of in_grad (zero where no window reaches).
void col2im(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                int64_t ld_col, const Conv2dGeometry& g) {
  check_dtypes("col2im", in_dtype, col_dtype);
  if (g.batch * g.channels * g.in_h * g.in_w == 0) return;
  visit_image_dtype(in_dtype, [&]<typename T, typename C>() {
    with_kernel_width(g.window.kernel_w, [&]<int KW>() {
      col2im_typed<T, C, KW>(static_cast<T*>(in_grad), in_strides, static_cast<const C*>(col), ld_col, g);
    });
  });
}


// --- the convolution ---------------------------------------------------------------------------

// Elements of the im2col buffer per batch chunk (64 MiB of float32): bounded memory for large
// batches, one chunk for the usual training shapes.
constexpr int64_t kColumnBudget = int64_t{1} << 24;

ImageStrides dense_strides(int64_t c, int64_t h, int64_t w, bool channels_last) {
  return channels_last ? ImageStrides{h * w * c, 1, w * c, c} : ImageStrides{c * h * w, h * w, w, 1};
}

bool same_strides(const ImageStrides& a, const ImageStrides& b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
}

// The problem's derived sizes. acc is the dtype of the columns, the GEMMs and every scratch matrix.
struct Plan {
  const Conv2dArgs& p;
  DType acc;

  explicit Plan(const Conv2dArgs& args) : p(args), acc(conv_column_dtype(args.dtype)) {
    if (!is_floating(p.dtype)) throw DTypeError(std::string("conv2d: unsupported dtype ") + dtype_name(p.dtype));
  }
  const Conv2dGeometry& geo() const { return p.geo; }
  int64_t taps() const { return p.geo.window.kernel_h * p.geo.window.kernel_w; }
  int64_t pixels() const { return p.geo.out_h * p.geo.out_w; }
  int64_t col_width() const { return p.geo.channels * taps(); }         // all groups
  int64_t group_k() const { return p.geo.channels / p.groups * taps(); }  // one group's GEMM depth
  int64_t group_out() const { return p.out_channels / p.groups; }
  int64_t chunk() const {
    const int64_t per_sample = pixels() * col_width();
    const int64_t n = std::max<int64_t>(p.geo.batch, 1);
    return per_sample <= 0 ? n : std::clamp<int64_t>(kColumnBudget / per_sample, 1, n);
  }
  Conv2dGeometry chunk_geo(int64_t count) const {
    Conv2dGeometry g = p.geo;
    g.batch = count;
    return g;
  }
  size_t acc_size() const { return element_size(acc); }
  // The output (or its gradient) as a channels-last matrix [N*P, C_out] in the acc dtype.
  ImageStrides y_matrix() const { return dense_strides(p.out_channels, p.geo.out_h, p.geo.out_w, true); }
  bool y_is_matrix() const { return p.channels_last && p.dtype == acc && same_strides(p.y_strides, y_matrix()); }
  // A dense channels-last input of the acc dtype under a 1x1, stride-1, unpadded kernel is its own
  // column matrix ([N*H*W, C], ld = C): no im2col copy and no col2im.
  bool pointwise() const {
    const Window2d& w = p.geo.window;
    return p.channels_last && p.dtype == acc && w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 &&
           w.stride_w == 1 && w.pad_h == 0 && w.pad_w == 0 &&
           same_strides(p.x_strides, dense_strides(p.geo.channels, p.geo.in_h, p.geo.in_w, true));
  }
  // Scratch for the column matrix of `chunk` images (none for a pointwise conv, which needs none).
  void* columns(int64_t chunk, const KernelContext& ctx) const {
    if (pointwise()) return nullptr;
    return ctx.workspace(static_cast<size_t>(chunk * pixels() * col_width()) * acc_size());
  }
  // The filter [C_out, C_in/groups, kH, kW] as the problem stores it.
  ImageStrides filter_strides() const {
    const Window2d& w = p.geo.window;
    return dense_strides(p.geo.channels / p.groups, w.kernel_h, w.kernel_w, p.channels_last);
  }
};

// dst = src (same logical shape), cast through the acc dtype.
void copy_image(const StridedArg& dst, const StridedArg& src, DType acc, const KernelContext& ctx) {
  StridedArg o = dst;
  Operand i;
  i.arg = src;
  collapse_dims({&o, &i.arg});
  unary_cpu(o, i, UnaryOp::Copy, acc, 0, 0, ctx);
}

void zero_image(const StridedArg& dst, const KernelContext& ctx) {
  StridedArg o = dst;
  collapse_dims({&o});
  fill_cpu(o, 0.0, ctx);
}

// The filter as a dense [C_out, C_in/groups * kH * kW] matrix of the acc dtype, in (c, kh, kw) order.
const void* filter_matrix(const Plan& pl, const void* w, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Window2d& win = p.geo.window;
  const int64_t cg = p.geo.channels / p.groups;
  if (p.dtype == pl.acc && !p.channels_last) return w;
  void* wm = ctx.workspace(static_cast<size_t>(p.out_channels * pl.group_k()) * pl.acc_size());
  copy_image(image_arg(wm, pl.acc, p.out_channels, cg, win.kernel_h, win.kernel_w,
                       dense_strides(cg, win.kernel_h, win.kernel_w, false)),
             image_arg(w, p.dtype, p.out_channels, cg, win.kernel_h, win.kernel_w, pl.filter_strides()), pl.acc, ctx);
  return wm;
}

// dy as the [N*P, C_out] acc matrix.
const void* output_matrix(const Plan& pl, const void* dy, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  if (pl.y_is_matrix()) return dy;
  const Conv2dGeometry& g = p.geo;
  void* m = ctx.workspace(static_cast<size_t>(g.batch * pl.pixels() * p.out_channels) * pl.acc_size());
  copy_image(image_arg(m, pl.acc, g.batch, p.out_channels, g.out_h, g.out_w, pl.y_matrix()),
             image_arg(dy, p.dtype, g.batch, p.out_channels, g.out_h, g.out_w, p.y_strides), pl.acc, ctx);
  return m;
}

// The GEMM batch that walks the groups: offsets of A, B and C per group.
struct GroupOffsets {
  std::vector<int64_t> a, b, c;
  GemmBatch batch() const { return {static_cast<int64_t>(a.size()), a.data(), b.data(), c.data()}; }
};
GroupOffsets group_offsets(int64_t groups, int64_t a_step, int64_t b_step, int64_t c_step) {
  GroupOffsets o;
  for (int64_t g = 0; g < groups; ++g) {
    o.a.push_back(g * a_step);
    o.b.push_back(g * b_step);
    o.c.push_back(g * c_step);
  }
  return o;
}

const void* at(const void* base, int64_t elements, size_t element) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(element);
}
void* at(void* base, int64_t elements, size_t element) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(element);
}

// The chunk's column matrix: x itself for a pointwise conv, else im2col into `cols`; sets ld.
const void* chunk_columns(const Plan& pl, const void* x, void* cols, int64_t n0, int64_t count, int64_t& ld) {
  const Conv2dArgs& p = pl.p;
  const void* images = at(x, n0 * p.x_strides.n, element_size(p.dtype));
  if (pl.pointwise()) {
    ld = p.geo.channels;
    return images;
  }
  ld = pl.col_width();
  im2col(cols, pl.acc, ld, images, p.dtype, p.x_strides, pl.chunk_geo(count));
  return cols;
}


}  // namespace

void conv2d_forward_cpu(const Conv2dArgs& p, void* y, const void* x, const void* w, const void* bias,
                        const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  if (g.batch * pixels * cout == 0) return;
  const StridedArg out = image_arg(y, p.dtype, g.batch, cout, g.out_h, g.out_w, p.y_strides);
  // acc: the [N*P, C_out] result matrix (y itself when y is that matrix already).
  void* acc = pl.y_is_matrix() ? y : ctx.workspace(static_cast<size_t>(g.batch * pixels * cout) * pl.acc_size());
  const StridedArg acc_arg = image_arg(acc, pl.acc, g.batch, cout, g.out_h, g.out_w, pl.y_matrix());
  double beta = 0.0;
  if (bias) {
    copy_image(acc_arg, image_arg(bias, p.dtype, g.batch, cout, g.out_h, g.out_w, ImageStrides{0, 1, 0, 0}), pl.acc,
               ctx);
    beta = 1.0;  // the GEMMs add onto the bias
  } else if (k == 0) {
    zero_image(acc_arg, ctx);
  }
  if (k > 0) {
    const void* wm = filter_matrix(pl, w, ctx);
    const int64_t chunk = pl.chunk();
    void* cols = pl.columns(chunk, ctx);
    const GroupOffsets off = group_offsets(p.groups, k, cog * k, cog);
    for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
      const int64_t count = std::min(chunk, g.batch - n0);
      int64_t ld = 0;
      const void* a = chunk_columns(pl, x, cols, n0, count, ld);
      // out[rows, group's channels] = cols[rows, group's taps] @ W_g^T
      gemm_cpu(gemm_args(pl.acc, false, true, count * pixels, cog, k, 1.0, a, ld, wm, k, beta,
                         at(acc, n0 * pixels * cout, pl.acc_size()), cout, off.batch()),
               ctx);
    }
  }
  if (acc != y) copy_image(out, acc_arg, pl.acc, ctx);
}

void conv2d_backward_data_cpu(const Conv2dArgs& p, void* dx, const void* dy, const void* w, const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const StridedArg gx = image_arg(dx, p.dtype, g.batch, g.channels, g.in_h, g.in_w, p.x_strides);
  if (gx.numel() == 0) return;
  if (k == 0 || cog == 0 || pixels == 0) return zero_image(gx, ctx);
  const void* gm = output_matrix(pl, dy, ctx);
  const void* wm = filter_matrix(pl, w, ctx);
  const GroupOffsets off = group_offsets(p.groups, cog, cog * k, k);
  const int64_t chunk = pl.chunk();
  const bool direct = pl.pointwise();  // the column gradient is the input gradient
  void* cols = pl.columns(chunk, ctx);
  const size_t es = element_size(p.dtype);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, g.batch - n0);
    void* c = direct ? at(dx, n0 * p.x_strides.n, es) : cols;
    const int64_t ldc = direct ? g.channels : pl.col_width();
    // dcols[rows, group's taps] = dout[rows, group's channels] @ W_g
    gemm_cpu(gemm_args(pl.acc, false, false, count * pixels, k, cog, 1.0, at(gm, n0 * pixels * cout, pl.acc_size()),
                       cout, wm, k, 0.0, c, ldc, off.batch()),
             ctx);
    if (!direct) col2im(at(dx, n0 * p.x_strides.n, es), p.dtype, p.x_strides, cols, pl.acc, ldc, pl.chunk_geo(count));
  }
}

void conv2d_backward_filter_cpu(const Conv2dArgs& p, void* dw, const void* x, const void* dy,
                                const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  const Window2d& win = g.window;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const int64_t cg = g.channels / p.groups;
  const StridedArg out = image_arg(dw, p.dtype, cout, cg, win.kernel_h, win.kernel_w, pl.filter_strides());
  if (out.numel() == 0) return;
  if (g.batch == 0 || pixels == 0) return zero_image(out, ctx);
  // The [C_out, K] gradient in (c, kh, kw) order and the acc dtype: dw itself when it is that already.
  const bool in_place = p.dtype == pl.acc && !p.channels_last;
  void* acc = in_place ? dw : ctx.workspace(static_cast<size_t>(cout * k) * pl.acc_size());
  const void* gm = output_matrix(pl, dy, ctx);
  const GroupOffsets off = group_offsets(p.groups, cog, k, cog * k);
  const int64_t chunk = pl.chunk();
  void* cols = pl.columns(chunk, ctx);
  for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
    const int64_t count = std::min(chunk, g.batch - n0);
    int64_t ld = 0;
    const void* b = chunk_columns(pl, x, cols, n0, count, ld);
    // dW_g += dout[rows, group's channels]^T @ cols[rows, group's taps]; chunks add in order.
    gemm_cpu(gemm_args(pl.acc, true, false, cog, k, count * pixels, 1.0, at(gm, n0 * pixels * cout, pl.acc_size()),
                       cout, b, ld, n0 == 0 ? 0.0 : 1.0, acc, k, off.batch()),
             ctx);
  }
  if (!in_place) {
    const ImageStrides nchw_filter = dense_strides(cg, win.kernel_h, win.kernel_w, false);
    copy_image(out, image_arg(acc, pl.acc, cout, cg, win.kernel_h, win.kernel_w, nchw_filter), pl.acc, ctx);
  }
}

}  // namespace kiln
