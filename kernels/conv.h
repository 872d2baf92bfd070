// 2-d convolution: im2col / col2im for the CPU's GEMM path (cuDNN on CUDA, at the end). The column
// matrix has one ROW per output pixel (n, oh, ow) and one column per (c, kh, kw), so a group's GEMM
// covers the whole batch at once (m = N*OH*OW) and writes the output straight into channels-last
// order. Columns are float32 (float64 for float64 inputs): half inputs widen on the copy, so the
// GEMM and col2im sums round only once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace kiln {

// Element strides of a 4-d [N, C, H, W] tensor: NCHW and channels-last differ only here.
struct ImageStrides {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

// A window sliding over H and W.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

// A batch of images and the grid of window positions over them (shared with kernels/pool.h).
struct Conv2dGeometry {
  int64_t batch = 0, channels = 0;
  int64_t in_h = 0, in_w = 0;
  int64_t out_h = 0, out_w = 0;
  Window2d window;
};

// The dtype of the column matrix (and of the GEMMs around it) for an input dtype.
constexpr DType conv_column_dtype(DType in) { return in == DType::Float64 ? DType::Float64 : DType::Float32; }

// col[(n*OH*OW + oh*OW + ow) * ld_col + (c*KH + i)*KW + j] = in[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]
// (0 outside the image) for n < batch, c < channels. `in` points at element [0, 0, 0, 0] of the
// images covered; ld_col >= channels*KH*KW. col_dtype must be conv_column_dtype(in_dtype).
void im2col_cpu(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                const Conv2dGeometry& g);

// The adjoint of im2col: in_grad[n, c, y, x] = sum of the col entries im2col read from (y, x).
// Overwrites every element of in_grad (zero where no window reaches). Each (n, c) plane is summed
// by one thread in a fixed order, so the result does not depend on the thread count.
void col2im_cpu(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                int64_t ld_col, const Conv2dGeometry& g);

#if defined(KILN_WITH_CUDA)
// 2-d convolution on the GPU through cuDNN (no im2col). The image tensors are described to cuDNN by
// their element strides, so NCHW and channels-last images go in without copies; the filter is dense
// in the matching order ([C_out, C_in/groups, kH, kW] or, channels-last, [C_out, kH, kW, C_in/groups]).
struct CudnnConv2d {
  DType dtype = DType::Float32;    // of x, w, y and their gradients: float32, float16, bfloat16, float64
  Conv2dGeometry geo;              // batch, input channels, input and output sizes, window
  int64_t out_channels = 0;
  int64_t groups = 1;
  ImageStrides x_strides;          // the input and its gradient
  ImageStrides y_strides;          // the output and its gradient
  bool channels_last = false;      // the layout of x and y, and the filter's order
  bool allow_tf32 = true;          // float32: TF32 tensor cores allowed (cuda::math_switches())
  // Pick algorithms by timing them once per problem (cudnnFind*AlgorithmEx) instead of cuDNN's
  // heuristics. A search cannot run while the stream is capturing a CUDA graph: the call is an
  // error then unless the warm-up step already searched that problem.
  bool benchmark = false;
};

// Device memory of at least `bytes` bytes that stays valid for work enqueued on the call's stream
// until the call returns (core hands out caching-allocator blocks). Called for an algorithm search
// and for the run, never with 0.
using ConvWorkspaceFn = void* (*)(void* ctx, size_t bytes);
struct ConvWorkspace {
  ConvWorkspaceFn fn = nullptr;
  void* ctx = nullptr;
  void* get(size_t bytes) const { return fn(ctx, bytes); }
};

// y = conv(x, w) (no bias: core adds it).
void conv2d_forward_cuda(const CudnnConv2d& p, void* y, const void* x, const void* w, const ConvWorkspace& workspace,
                         Stream stream);
// dx = the input gradient for dy (overwritten).
void conv2d_backward_data_cuda(const CudnnConv2d& p, void* dx, const void* dy, const void* w,
                               const ConvWorkspace& workspace, Stream stream);
// dw = the weight gradient for dy and x (overwritten).
void conv2d_backward_filter_cuda(const CudnnConv2d& p, void* dw, const void* x, const void* dy,
                                 const ConvWorkspace& workspace, Stream stream);
#endif

}  // namespace kiln
