// 2-d pooling over NCHW or channels-last images (read and written through ImageStrides). On the
// CPU, work is split over (n, c) planes, or for channels-last images (channel stride 1) over rows of
// output pixels (forward) and slices of each image's channels (backward), a pixel's channels at a
// time; a backward accumulates in float (double for float64) in a fixed order, the same in both
// forms, so gradients are the same bits for any thread count and either layout.
#pragma once

#include <cstdint>

#include "kernels/conv.h"
#include "kernels/dtype.h"
#include "kernels/kernel.h"

namespace kiln {

// out and indices share out_strides; indices[n, c, oh, ow] = ih * in_w + iw of the maximum (the
// first one on ties, the last of several NaNs, as PyTorch's). g.window holds kernel, stride,
// padding, dilation.
void max_pool2d_forward_cpu(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                            ImageStrides in_strides, DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);
// grad_in[n, c] = scatter-add of grad_out[n, c] by indices (grad_in is overwritten).
void max_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                             DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);

// PyTorch's windows: [oh*s - p, oh*s - p + k) clipped to [-p, H + p); the divisor is that clipped
// size with count_include_pad, else the number of real (unpadded) elements in the window.
void avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides, DType dtype,
                            const Conv2dGeometry& g, bool count_include_pad, const KernelContext& ctx);
void avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                             bool count_include_pad, const KernelContext& ctx);

// Window of output row i: [floor(i*H/OH), ceil((i+1)*H/OH)), likewise for columns; g.window unused.
void adaptive_avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                     DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);
void adaptive_avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                      ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                                      const KernelContext& ctx);

// The CUDA twins: kiln's own kernels (kernels/cuda/pool.cuh), same arguments and results (device
// pointers), float32, float16, bfloat16 and float64.
// Forward: one thread per output element. Backward: one thread per INPUT element, which sums the
// outputs whose windows can hold it in the CPU's order (output raster order), so there are no
// atomics and gradients are deterministic (float32 gives the CPU's bits).
void max_pool2d_forward_cuda(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                             ImageStrides in_strides, DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);
void max_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                              DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);
void avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                             DType dtype, const Conv2dGeometry& g, bool count_include_pad, const KernelContext& ctx);
void avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                              bool count_include_pad, const KernelContext& ctx);
void adaptive_avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                      DType dtype, const Conv2dGeometry& g, const KernelContext& ctx);
void adaptive_avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                       ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                                       const KernelContext& ctx);

namespace kernels {
KILN_KERNEL(max_pool2d_forward);
KILN_KERNEL(max_pool2d_backward);
KILN_KERNEL(avg_pool2d_forward);
KILN_KERNEL(avg_pool2d_backward);
KILN_KERNEL(adaptive_avg_pool2d_forward);
KILN_KERNEL(adaptive_avg_pool2d_backward);
}  // namespace kernels

}  // namespace kiln
