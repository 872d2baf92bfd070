// 2-d convolution, forward and both backward passes, with one problem description for both devices.
// The CPU lowers it to im2col + GEMM (kernels/cpu/conv.cpp, kernels/cpu/im2col.h), one image at a
// time: NCHW problems on planar columns (one row per tap), whose GEMMs read and write NCHW images;
// channels-last problems on row columns (one row per output pixel, in the channels-last filter's
// (kh, kw, c) order), whose GEMMs read the filter as it is and write channels-last order. Columns
// are float32 (float64 for float64), so half inputs widen on the copy and the GEMM and col2im sums
// round only once. CUDA calls cuDNN with the tensors in their own layout (no im2col).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel.h"
#include "kernels/strided.h"

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

// One convolution. x-shaped tensors (the input and its gradient) are dense in the layout
// `channels_last` names and addressed through x_strides; y-shaped ones (the output and its
// gradient) likewise through y_strides. The filter [C_out, C_in/groups, kH, kW] is dense in the
// matching order: NCHW order, or [C_out, kH, kW, C_in/groups] when channels_last; the weight
// gradient comes out in that order too.
struct Conv2dArgs {
  DType dtype = DType::Float32;  // of x, w, bias, y and their gradients: float32, float16, bfloat16, float64
  Conv2dGeometry geo;            // batch, input channels, input and output sizes, window
  int64_t out_channels = 0;
  int64_t groups = 1;
  ImageStrides x_strides;
  ImageStrides y_strides;
  bool channels_last = false;
  // CUDA only (cuda::math_switches()): float32 may use TF32 tensor cores; `benchmark` picks cuDNN
  // algorithms by timing them once per problem instead of by heuristics. A search cannot run while
  // the stream is capturing a CUDA graph: the call is an error then unless the warm-up step already
  // searched that problem.
  bool allow_tf32 = true;
  bool benchmark = false;
};

// A 4-d [n, c, h, w] tensor of `dtype` through `s`, as an elementwise argument (both twins copy,
// fill and add biases through the elementwise kernels).
inline StridedArg image_arg(const void* data, DType dtype, int64_t n, int64_t c, int64_t h, int64_t w,
                            ImageStrides s) {
  StridedArg a;
  a.data = const_cast<void*>(data);
  a.dtype = dtype;
  a.ndim = 4;
  const int64_t sizes[4] = {n, c, h, w}, strides[4] = {s.n, s.c, s.h, s.w};
  for (int d = 0; d < 4; ++d) {
    a.sizes[d] = sizes[d];
    a.strides[d] = strides[d];
  }
  return a;
}

// The dtype the CPU computes a convolution in (its columns and GEMMs) for an input dtype.
constexpr DType conv_column_dtype(DType in) { return in == DType::Float64 ? DType::Float64 : DType::Float32; }

// y = conv(x, w) + bias (bias: [C_out] or null). An empty input (no channels, or an all-padding
// image) gives the bias alone (or zeros).
void conv2d_forward_cpu(const Conv2dArgs& p, void* y, const void* x, const void* w, const void* bias,
                        const KernelContext& ctx);
void conv2d_forward_cuda(const Conv2dArgs& p, void* y, const void* x, const void* w, const void* bias,
                         const KernelContext& ctx);
// dx = the input gradient for dy (overwritten).
void conv2d_backward_data_cpu(const Conv2dArgs& p, void* dx, const void* dy, const void* w, const KernelContext& ctx);
void conv2d_backward_data_cuda(const Conv2dArgs& p, void* dx, const void* dy, const void* w,
                               const KernelContext& ctx);
// dw = the weight gradient for dy and x (overwritten). The CPU adds the batch chunks in order, so
// the result does not depend on the thread count.
void conv2d_backward_filter_cpu(const Conv2dArgs& p, void* dw, const void* x, const void* dy,
                                const KernelContext& ctx);
void conv2d_backward_filter_cuda(const Conv2dArgs& p, void* dw, const void* x, const void* dy,
                                 const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(conv2d_forward);
KILN_KERNEL(conv2d_backward_data);
KILN_KERNEL(conv2d_backward_filter);
}  // namespace kernels

// --- debugging hook: the math cuDNN ran with --------------------------------------------------------

// cuDNN's math types as kiln names them (TensorOp: CUDNN_TENSOR_OP_MATH, Fma: CUDNN_FMA_MATH).
enum class ConvMathType : uint8_t { None, Default, TensorOp, TensorOpAllowConversion, Fma };
enum class ConvPass : uint8_t { None, Forward, BackwardData, BackwardFilter };

// What the last cuDNN convolution on this thread ran with, so a test can see that allow_tf32 reached
// cuDNN: float32 asks for TensorOp (TF32 allowed) or Fma (TF32 excluded). `used` is the math type
// set on the descriptor for the chosen algorithm: under TensorOp an algorithm without tensor cores
// runs with Default. Everything None before the first CUDA convolution of the thread, and always in
// a build without CUDA (kernels/twins.cpp).
struct ConvMathRecord {
  ConvPass pass = ConvPass::None;
  ConvMathType requested = ConvMathType::None;
  ConvMathType used = ConvMathType::None;
  int cudnn_math_type = -1;  // the cudnnMathType_t value of `used` (-1: none yet)
  int algo = -1;             // the algorithm enum value of the pass
  DType dtype = DType::Float32;
};
ConvMathRecord last_conv_math_cuda();

}  // namespace kiln
