// CPU convolution: im2col (kernels/cpu/im2col.h) + GEMM, in two forms, both one image at a time:
// - NCHW: planar columns (see "NCHW: planar columns" below).
// - Channels-last: row columns, in channels-last matrix form ([P, C_out] per image; see
//   "channels-last: row columns").
// Both give the same bits on any thread count.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise.h"
#include "kernels/error.h"
#include "kernels/factory.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

// --- the convolution ---------------------------------------------------------------------------

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
  fill_cpu(o, 0.0, 0, ctx);
}

// The filter as a dense [C_out, C_in/groups * kH * kW] matrix of the acc dtype, in the order the
// problem stores it, which is its columns' order: (c, kh, kw) for NCHW, (kh, kw, c) for channels-last.
// The filter itself when it is of the acc dtype.
const void* filter_matrix(const Plan& pl, const void* w, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Window2d& win = p.geo.window;
  const int64_t cg = p.geo.channels / p.groups;
  if (p.dtype == pl.acc) return w;
  void* wm = ctx.workspace(static_cast<size_t>(p.out_channels * pl.group_k()) * pl.acc_size());
  copy_image(image_arg(wm, pl.acc, p.out_channels, cg, win.kernel_h, win.kernel_w, pl.filter_strides()),
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

// --- NCHW: planar columns ----------------------------------------------------------------------
// An NCHW problem uses planar columns (kernels/cpu/im2col.h), one image at a time: image n's
// [C*KH*KW, P] columns times the filter matrix is its NCHW output, so no GEMM needs a transpose of
// the images, and the columns (a few hundred KiB for small images) are used while they are still in
// the core's cache. Images are spread over the pool in contiguous runs, each run with its own
// column scratch; with fewer images than threads they go one after another, each im2col and GEMM
// using the whole pool. Either way each image's products have the same shapes, hence the same bits.

// A y-shaped tensor as the dense NCHW [N, C_out, P] acc buffer the GEMMs use: the tensor itself when
// it is that already.
bool y_is_planar(const Plan& pl) {
  const Conv2dArgs& p = pl.p;
  return p.dtype == pl.acc && same_strides(p.y_strides, dense_strides(p.out_channels, p.geo.out_h, p.geo.out_w, false));
}
StridedArg planar_y(const Plan& pl, void* data) {
  const Conv2dArgs& p = pl.p;
  return image_arg(data, pl.acc, p.geo.batch, p.out_channels, p.geo.out_h, p.geo.out_w,
                   dense_strides(p.out_channels, p.geo.out_h, p.geo.out_w, false));
}
// dy as that buffer (a copy into scratch when it is not one already).
const void* planar_dy(const Plan& pl, const void* dy, const KernelContext& ctx) {
  if (y_is_planar(pl)) return dy;
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  void* m = ctx.workspace(static_cast<size_t>(g.batch * pl.pixels() * p.out_channels) * pl.acc_size());
  copy_image(planar_y(pl, m), image_arg(dy, p.dtype, g.batch, p.out_channels, g.out_h, g.out_w, p.y_strides), pl.acc,
             ctx);
  return m;
}
// A 1x1, stride-1, unpadded kernel over dense NCHW acc images: each image is its own [C, P] block of
// columns: no im2col copy and no col2im.
bool planar_pointwise(const Plan& pl) {
  const Conv2dArgs& p = pl.p;
  const Window2d& w = p.geo.window;
  return p.dtype == pl.acc && w.kernel_h == 1 && w.kernel_w == 1 && w.stride_h == 1 && w.stride_w == 1 &&
         w.pad_h == 0 && w.pad_w == 0 &&
         same_strides(p.x_strides, dense_strides(p.geo.channels, p.geo.in_h, p.geo.in_w, false));
}
// Bytes of one image's planar columns (none for a pointwise kernel).
size_t planar_column_bytes(const Plan& pl) {
  return planar_pointwise(pl) ? 0 : static_cast<size_t>(pl.col_width() * pl.pixels()) * pl.acc_size();
}
// Image n's [C*KH*KW, P] columns (ld = P): x's own image for a pointwise kernel, else im2col into
// `scratch`.
const void* image_columns(const Plan& pl, const void* x, int64_t n, void* scratch) {
  const Conv2dArgs& p = pl.p;
  const void* image = at(x, n * p.x_strides.n, element_size(p.dtype));
  if (planar_pointwise(pl)) return image;
  cpu::im2col_planes(scratch, pl.acc, pl.pixels(), image, p.dtype, p.x_strides, pl.chunk_geo(1));
  return scratch;
}
// Calls fn(run, first, last, scratch) for the batch's images in contiguous runs of per_run images
// (the last may be shorter), a run per task, each with `scratch_bytes` of its own from `scratch`.
template <typename F>
void for_image_runs(int64_t batch, int64_t per_run, void* scratch, size_t scratch_bytes, F&& fn) {
  cpu::parallel_for(batch, per_run, [&](int64_t r, int64_t first, int64_t last) {
    fn(r, first, last, static_cast<char*>(scratch) + static_cast<size_t>(r) * scratch_bytes);
  });
}
// Images per run for the forward and the data gradient, whose images are independent: a run per
// thread when there are enough images for every thread, else one run (each image then uses the
// whole pool).
int64_t independent_run(int64_t batch) {
  const int64_t threads = cpu::runs_inline() ? 1 : cpu::num_threads();
  return batch >= threads ? (batch + threads - 1) / threads : batch;
}
// The offsets of image n's products, one per group: A, B and C advance by the given steps per group
// from the given bases.
GroupOffsets image_products(int64_t groups, int64_t a0, int64_t a_step, int64_t b0, int64_t b_step, int64_t c0,
                            int64_t c_step) {
  GroupOffsets o = group_offsets(groups, a_step, b_step, c_step);
  for (int64_t g = 0; g < groups; ++g) {
    o.a[static_cast<size_t>(g)] += a0;
    o.b[static_cast<size_t>(g)] += b0;
    o.c[static_cast<size_t>(g)] += c0;
  }
  return o;
}

void planar_forward(const Plan& pl, void* y, const void* x, const void* w, const void* bias, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  void* acc = y_is_planar(pl) ? y : ctx.workspace(static_cast<size_t>(g.batch * pixels * cout) * pl.acc_size());
  double beta = 0.0;
  if (bias) {
    copy_image(planar_y(pl, acc), image_arg(bias, p.dtype, g.batch, cout, g.out_h, g.out_w, ImageStrides{0, 1, 0, 0}),
               pl.acc, ctx);
    beta = 1.0;  // the GEMMs add onto the bias
  } else if (k == 0) {
    zero_image(planar_y(pl, acc), ctx);
  }
  if (k > 0) {
    const void* wm = filter_matrix(pl, w, ctx);
    const int64_t per_run = independent_run(g.batch);
    const size_t bytes = planar_column_bytes(pl), runs = static_cast<size_t>(cpu::num_chunks(g.batch, per_run));
    for_image_runs(g.batch, per_run, ctx.workspace(bytes * runs), bytes,
                   [&](int64_t, int64_t first, int64_t last, void* scratch) {
                     for (int64_t n = first; n < last; ++n) {
                       const void* cols = image_columns(pl, x, n, scratch);
                       // out_n[group's channels, P] = W_g @ columns_n[group's taps, P]
                       const GroupOffsets off =
                           image_products(p.groups, 0, cog * k, 0, k * pixels, n * cout * pixels, cog * pixels);
                       gemm_cpu(gemm_args(pl.acc, false, false, cog, pixels, k, 1.0, wm, k, cols, pixels, beta, acc,
                                          pixels, off.batch()),
                                ctx);
                     }
                   });
  }
  if (acc != y) {
    copy_image(image_arg(y, p.dtype, g.batch, cout, g.out_h, g.out_w, p.y_strides), planar_y(pl, acc), pl.acc, ctx);
  }
}

void planar_backward_data(const Plan& pl, void* dx, const void* dy, const void* w, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const void* gm = planar_dy(pl, dy, ctx);
  const void* wm = filter_matrix(pl, w, ctx);
  const bool direct = planar_pointwise(pl);  // the column gradient is the input gradient
  const size_t es = element_size(p.dtype);
  const int64_t per_run = independent_run(g.batch);
  const size_t bytes = planar_column_bytes(pl), runs = static_cast<size_t>(cpu::num_chunks(g.batch, per_run));
  for_image_runs(g.batch, per_run, ctx.workspace(bytes * runs), bytes,
                 [&](int64_t, int64_t first, int64_t last, void* scratch) {
                   for (int64_t n = first; n < last; ++n) {
                     void* image = at(dx, n * p.x_strides.n, es);
                     void* cols = direct ? image : scratch;
                     // dcolumns_n[group's taps, P] = W_g^T @ dout_n[group's channels, P]
                     const GroupOffsets off =
                         image_products(p.groups, 0, cog * k, n * cout * pixels, cog * pixels, 0, k * pixels);
                     gemm_cpu(gemm_args(pl.acc, true, false, k, pixels, cog, 1.0, wm, k, gm, pixels, 0.0, cols, pixels,
                                        off.batch()),
                              ctx);
                     if (!direct) {
                       cpu::col2im_planes(image, p.dtype, p.x_strides, cols, pl.acc, pixels, pl.chunk_geo(1));
                     }
                   }
                 });
}

// out[0, n) = the runs' partials (`stride` apart) added in run order: the first copied, each later
// one added whole (one vector add per lane group in the AVX2 clone).
template <typename A> KILN_CPU_CLONES void sum_block(A* out, const A* part, int64_t runs, int64_t stride, int64_t n) {
  std::copy(part, part + n, out);
  for (int64_t r = 1; r < runs; ++r) cpu::add_run(out, part + r * stride, n);
}

// acc = partials[0] + partials[1] + ... + partials[runs - 1], each `size` elements of the acc
// dtype, summed in that order. A block of acc at a time: it starts as the first partial and each
// later one is added to it whole, so the adds vectorize and the block stays in cache across the
// runs; every element still sums its partials in run order (the bits of a loop per element).
void sum_partials(void* acc, const void* partials, int64_t runs, int64_t size, DType dtype) {
  constexpr int64_t kBlock = 2048;  // elements: 8 or 16 KB, within L1 beside the partials' lines
  auto run = [&]<typename A>() {
    A* out = static_cast<A*>(acc);
    const A* part = static_cast<const A*>(partials);
    cpu::parallel_for(size, std::max(kBlock, cpu::grain_for(runs)), [&](int64_t, int64_t e0, int64_t e1) {
      for (int64_t b0 = e0; b0 < e1; b0 += kBlock) {
        sum_block(out + b0, part + b0, runs, size, std::min(kBlock, e1 - b0));
      }
    });
  };
  if (dtype == DType::Float64) {
    run.template operator()<double>();
  } else {
    run.template operator()<float>();
  }
}

// The weight gradient sums one product per image. Images go in at most kWeightRuns contiguous runs,
// set by the batch size alone: a run adds its images' products in order into
// its own partial, the runs go to the pool, and the partials are added in run order, so the bits do
// not depend on the thread count.
constexpr int64_t kWeightRuns = 16;

void planar_backward_filter(const Plan& pl, void* acc, const void* x, const void* dy, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const int64_t wsize = cout * k;  // the [C_out, K] gradient, groups stacked
  const void* gm = planar_dy(pl, dy, ctx);
  const int64_t per_run = (g.batch + kWeightRuns - 1) / kWeightRuns, runs = cpu::num_chunks(g.batch, per_run);
  const size_t bytes = planar_column_bytes(pl);
  void* partials = runs == 1 ? acc : ctx.workspace(static_cast<size_t>(runs * wsize) * pl.acc_size());
  for_image_runs(g.batch, per_run, ctx.workspace(bytes * static_cast<size_t>(runs)), bytes,
                 [&](int64_t r, int64_t first, int64_t last, void* scratch) {
                   void* part = at(partials, r * wsize, pl.acc_size());
                   for (int64_t n = first; n < last; ++n) {
                     const void* cols = image_columns(pl, x, n, scratch);
                     // partial_g (+)= dout_n[group's channels, P] @ columns_n[group's taps, P]^T
                     const GroupOffsets off =
                         image_products(p.groups, n * cout * pixels, cog * pixels, 0, k * pixels, 0, cog * k);
                     gemm_cpu(gemm_args(pl.acc, false, true, cog, k, pixels, 1.0, gm, pixels, cols, pixels,
                                        n == first ? 0.0 : 1.0, part, k, off.batch()),
                              ctx);
                   }
                 });
  if (partials != acc) sum_partials(acc, partials, runs, wsize, pl.acc);
}

// --- channels-last: row columns ------------------------------------------------------------------
// A channels-last problem uses row columns (kernels/cpu/im2col.h) the way NCHW uses planar ones: one
// image at a time, in the same runs of images. Image n's [P, C*KH*KW] columns times the filter
// (whose channels-last order [C_out, KH, KW, C/groups] is the columns' order, so a float32 or
// float64 filter is read in place) is its [P, C_out] block of the channels-last output. A tap's
// channels are adjacent in the image, so im2col copies runs of channels and col2im adds runs. A
// pointwise kernel reads the whole batch as one [N*P, C] matrix instead: one GEMM, no columns.
// One image's columns (not a chunk of the batch's) stay in cache between im2col and the GEMM.
// Summation orders: an output sums its taps in (kh, kw, c) order; the weight gradient sums each
// image's product, images in runs and runs in order, as the NCHW path does; col2im sums an input
// element's terms by (kernel row, output column).

// Bytes of one image's row columns.
size_t row_column_bytes(const Plan& pl) {
  return static_cast<size_t>(pl.col_width() * pl.pixels()) * pl.acc_size();
}
// Image n's [P, C*KH*KW] row columns (ld = C*KH*KW), im2col into `scratch`.
const void* image_rows(const Plan& pl, const void* x, int64_t n, void* scratch) {
  const Conv2dArgs& p = pl.p;
  const void* image = at(x, n * p.x_strides.n, element_size(p.dtype));
  cpu::im2col_rows(scratch, pl.acc, pl.col_width(), image, p.dtype, p.x_strides, pl.chunk_geo(1), p.groups);
  return scratch;
}

void rows_forward(const Plan& pl, void* y, const void* x, const void* w, const void* bias, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
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
    if (pl.pointwise()) {
      // out[N*P, group's channels] = x[N*P, group's channels in] @ W_g^T
      const GroupOffsets off = group_offsets(p.groups, k, cog * k, cog);
      gemm_cpu(gemm_args(pl.acc, false, true, g.batch * pixels, cog, k, 1.0, x, g.channels, wm, k, beta, acc, cout,
                         off.batch()),
               ctx);
    } else {
      const int64_t per_run = independent_run(g.batch), ld = pl.col_width();
      const size_t bytes = row_column_bytes(pl), runs = static_cast<size_t>(cpu::num_chunks(g.batch, per_run));
      for_image_runs(g.batch, per_run, ctx.workspace(bytes * runs), bytes,
                     [&](int64_t, int64_t first, int64_t last, void* scratch) {
                       for (int64_t n = first; n < last; ++n) {
                         const void* cols = image_rows(pl, x, n, scratch);
                         // out_n[P, group's channels] = columns_n[P, group's taps] @ W_g^T
                         const GroupOffsets off = image_products(p.groups, 0, k, 0, cog * k, n * pixels * cout, cog);
                         gemm_cpu(gemm_args(pl.acc, false, true, pixels, cog, k, 1.0, cols, ld, wm, k, beta, acc, cout,
                                            off.batch()),
                                  ctx);
                       }
                     });
    }
  }
  if (acc != y) {
    copy_image(image_arg(y, p.dtype, g.batch, cout, g.out_h, g.out_w, p.y_strides), acc_arg, pl.acc, ctx);
  }
}

void rows_backward_data(const Plan& pl, void* dx, const void* dy, const void* w, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const void* gm = output_matrix(pl, dy, ctx);
  const void* wm = filter_matrix(pl, w, ctx);
  if (pl.pointwise()) {
    // The column gradient is the input gradient: dx[N*P, group's channels in] = dout[N*P, group's
    // channels] @ W_g.
    const GroupOffsets off = group_offsets(p.groups, cog, cog * k, k);
    gemm_cpu(gemm_args(pl.acc, false, false, g.batch * pixels, k, cog, 1.0, gm, cout, wm, k, 0.0, dx, g.channels,
                       off.batch()),
             ctx);
    return;
  }
  const size_t es = element_size(p.dtype);
  const int64_t per_run = independent_run(g.batch), ld = pl.col_width();
  const size_t bytes = row_column_bytes(pl), runs = static_cast<size_t>(cpu::num_chunks(g.batch, per_run));
  for_image_runs(g.batch, per_run, ctx.workspace(bytes * runs), bytes,
                 [&](int64_t, int64_t first, int64_t last, void* scratch) {
                   for (int64_t n = first; n < last; ++n) {
                     // dcolumns_n[P, group's taps] = dout_n[P, group's channels] @ W_g
                     const GroupOffsets off = image_products(p.groups, n * pixels * cout, cog, 0, cog * k, 0, k);
                     gemm_cpu(gemm_args(pl.acc, false, false, pixels, k, cog, 1.0, gm, cout, wm, k, 0.0, scratch, ld,
                                        off.batch()),
                              ctx);
                     cpu::col2im_rows(at(dx, n * p.x_strides.n, es), p.dtype, p.x_strides, scratch, pl.acc, ld,
                                      pl.chunk_geo(1), p.groups);
                   }
                 });
}

// As planar_backward_filter: runs of images set by the batch size, a partial per run, the partials
// added in run order. The [C_out, K] result is in the channels-last filter's (kh, kw, c) order.
void rows_backward_filter(const Plan& pl, void* acc, const void* x, const void* dy, const KernelContext& ctx) {
  const Conv2dArgs& p = pl.p;
  const Conv2dGeometry& g = p.geo;
  const int64_t pixels = pl.pixels(), cout = p.out_channels, k = pl.group_k(), cog = pl.group_out();
  const void* gm = output_matrix(pl, dy, ctx);
  if (pl.pointwise()) {
    // dW_g = dout[N*P, group's channels]^T @ x[N*P, group's channels in]: one product over the batch.
    const GroupOffsets off = group_offsets(p.groups, cog, k, cog * k);
    gemm_cpu(gemm_args(pl.acc, true, false, cog, k, g.batch * pixels, 1.0, gm, cout, x, g.channels, 0.0, acc, k,
                       off.batch()),
             ctx);
    return;
  }
  const int64_t wsize = cout * k, ld = pl.col_width();
  const int64_t per_run = (g.batch + kWeightRuns - 1) / kWeightRuns, runs = cpu::num_chunks(g.batch, per_run);
  const size_t bytes = row_column_bytes(pl);
  void* partials = runs == 1 ? acc : ctx.workspace(static_cast<size_t>(runs * wsize) * pl.acc_size());
  for_image_runs(g.batch, per_run, ctx.workspace(bytes * static_cast<size_t>(runs)), bytes,
                 [&](int64_t r, int64_t first, int64_t last, void* scratch) {
                   void* part = at(partials, r * wsize, pl.acc_size());
                   for (int64_t n = first; n < last; ++n) {
                     const void* cols = image_rows(pl, x, n, scratch);
                     // partial_g (+)= dout_n[P, group's channels]^T @ columns_n[P, group's taps]
                     const GroupOffsets off = image_products(p.groups, n * pixels * cout, cog, 0, k, 0, cog * k);
                     gemm_cpu(gemm_args(pl.acc, true, false, cog, k, pixels, 1.0, gm, cout, cols, ld,
                                        n == first ? 0.0 : 1.0, part, k, off.batch()),
                              ctx);
                   }
                 });
  if (partials != acc) sum_partials(acc, partials, runs, wsize, pl.acc);
}

}  // namespace

void conv2d_forward_cpu(const Conv2dArgs& p, void* y, const void* x, const void* w, const void* bias,
                        const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  if (g.batch * pl.pixels() * p.out_channels == 0) return;
  if (!p.channels_last) return planar_forward(pl, y, x, w, bias, ctx);
  rows_forward(pl, y, x, w, bias, ctx);
}

void conv2d_backward_data_cpu(const Conv2dArgs& p, void* dx, const void* dy, const void* w, const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  const StridedArg gx = image_arg(dx, p.dtype, g.batch, g.channels, g.in_h, g.in_w, p.x_strides);
  if (gx.numel() == 0) return;
  if (pl.group_k() == 0 || pl.group_out() == 0 || pl.pixels() == 0) return zero_image(gx, ctx);
  if (!p.channels_last) return planar_backward_data(pl, dx, dy, w, ctx);
  rows_backward_data(pl, dx, dy, w, ctx);
}

void conv2d_backward_filter_cpu(const Conv2dArgs& p, void* dw, const void* x, const void* dy,
                                const KernelContext& ctx) {
  const Plan pl(p);
  const Conv2dGeometry& g = p.geo;
  const Window2d& win = g.window;
  const int64_t cout = p.out_channels, cg = g.channels / p.groups;
  const StridedArg out = image_arg(dw, p.dtype, cout, cg, win.kernel_h, win.kernel_w, pl.filter_strides());
  if (out.numel() == 0) return;
  if (g.batch == 0 || pl.pixels() == 0) return zero_image(out, ctx);
  // The [C_out, K] gradient in the filter's own order (filter_matrix) and the acc dtype: dw itself
  // when it is of the acc dtype.
  const bool in_place = p.dtype == pl.acc;
  void* acc = in_place ? dw : ctx.workspace(static_cast<size_t>(cout * pl.group_k()) * pl.acc_size());
  if (!p.channels_last) {
    planar_backward_filter(pl, acc, x, dy, ctx);
  } else {
    rows_backward_filter(pl, acc, x, dy, ctx);
  }
  if (!in_place) {
    copy_image(out, image_arg(acc, pl.acc, cout, cg, win.kernel_h, win.kernel_w, pl.filter_strides()), pl.acc, ctx);
  }
}

}  // namespace kiln
