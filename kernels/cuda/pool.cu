// CUDA 2-d pooling, the twin of kernels/cpu/pool.cpp: the launches of kernels/cuda/pool.cuh's
// kernels, one grid-stride kernel per op.
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pool.cuh"
#include "kernels/pool.h"

namespace kiln {
namespace {

using namespace cuda_detail;
using namespace pool_cuda;

// Calls f.template operator()<S>() with S the CUDA storage type of a floating dtype.
template <typename F> void visit_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::Float32: f.template operator()<float>(); return;
    case DType::Float16: f.template operator()<__half>(); return;
    case DType::BFloat16: f.template operator()<__nv_bfloat16>(); return;
    case DType::Float64: f.template operator()<double>(); return;
    default: break;
  }
  throw DTypeError(std::string(op) + ": unsupported dtype " + dtype_name(t) + " on CUDA");
}

template <bool Adaptive>
void mean_pool_forward(const char* op, void* out, ImageStrides os, const void* in, ImageStrides is, DType dtype,
                       const Conv2dGeometry& g, bool include_pad, Stream stream) {
  const int64_t total = g.batch * g.channels * g.out_h * g.out_w;
  visit_float(op, dtype, [&]<typename S>() {
    if (total <= 0) return;
    mean_pool_forward_kernel<S, Adaptive><<<grid_for(total), kThreads, 0, raw_stream(stream)>>>(
        static_cast<S*>(out), os, static_cast<const S*>(in), is, g, include_pad, channels_inner(os, g.channels), total);
    check_launch(op);
  });
}

template <bool Adaptive>
void mean_pool_backward(const char* op, void* gin, ImageStrides gis, const void* gout, ImageStrides gos, DType dtype,
                        const Conv2dGeometry& g, bool include_pad, Stream stream) {
  const int64_t total = g.batch * g.channels * g.in_h * g.in_w;
  visit_float(op, dtype, [&]<typename S>() {
    if (total <= 0) return;
    mean_pool_backward_kernel<S, Adaptive><<<grid_for(total), kThreads, 0, raw_stream(stream)>>>(
        static_cast<S*>(gin), gis, static_cast<const S*>(gout), gos, g, include_pad, channels_inner(gis, g.channels),
        total);
    check_launch(op);
  });
}

}  // namespace

void max_pool2d_forward_cuda(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                             ImageStrides in_strides, DType dtype, const Conv2dGeometry& g, const KernelContext& ctx) {
  const char* op = "max_pool2d";
  const int64_t total = g.batch * g.channels * g.out_h * g.out_w;
  visit_float(op, dtype, [&]<typename S>() {
    if (total <= 0) return;
    max_pool_forward_kernel<S><<<grid_for(total), kThreads, 0, raw_stream(ctx.stream)>>>(
        static_cast<S*>(out), indices, out_strides, static_cast<const S*>(in), in_strides, g,
        channels_inner(out_strides, g.channels), total);
    check_launch(op);
  });
}

void max_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                              DType dtype, const Conv2dGeometry& g, const KernelContext& ctx) {
  const char* op = "max_pool2d_backward";
  const int64_t total = g.batch * g.channels * g.in_h * g.in_w;
  visit_float(op, dtype, [&]<typename S>() {
    if (total <= 0) return;
    max_pool_backward_kernel<S><<<grid_for(total), kThreads, 0, raw_stream(ctx.stream)>>>(
        static_cast<S*>(grad_in), grad_in_strides, static_cast<const S*>(grad_out), grad_out_strides, indices,
        indices_strides, g, channels_inner(grad_in_strides, g.channels), total);
    check_launch(op);
  });
}

void avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                             DType dtype, const Conv2dGeometry& g, bool count_include_pad, const KernelContext& ctx) {
  mean_pool_forward<false>("avg_pool2d", out, out_strides, in, in_strides, dtype, g, count_include_pad, ctx.stream);
}

void avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                              bool count_include_pad, const KernelContext& ctx) {
  mean_pool_backward<false>("avg_pool2d_backward", grad_in, grad_in_strides, grad_out, grad_out_strides, dtype, g,
                            count_include_pad, ctx.stream);
}

void adaptive_avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                      DType dtype, const Conv2dGeometry& g, const KernelContext& ctx) {
  if (g.out_h <= 0 || g.out_w <= 0) return;
  mean_pool_forward<true>("adaptive_avg_pool2d", out, out_strides, in, in_strides, dtype, g, false, ctx.stream);
}

void adaptive_avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                       ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                                       const KernelContext& ctx) {
  if (g.out_h <= 0 || g.out_w <= 0) return;
  mean_pool_backward<true>("adaptive_avg_pool2d_backward", grad_in, grad_in_strides, grad_out, grad_out_strides, dtype,
                           g, false, ctx.stream);
}

}  // namespace kiln
