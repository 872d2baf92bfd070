// 2-d pooling over NCHW or channels-last images (read and written through ImageStrides). Work is
// split over (n, c) planes; a backward accumulates each plane in float (double for float64) in a
// fixed order, so gradients are the same bits for any thread count.
#pragma once

#include <cstdint>

#include "kernels/conv.h"
#include "kernels/dtype.h"
#include "kernels/stream.h"

namespace kiln {

// out and indices share out_strides; indices[n, c, oh, ow] = ih * in_w + iw of the maximum
// (the first one on ties; a NaN wins and stays). g.window holds kernel, stride, padding, dilation.
void max_pool2d_forward_cpu(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                            ImageStrides in_strides, DType dtype, const Conv2dGeometry& g);
// grad_in[n, c] = scatter-add of grad_out[n, c] by indices (grad_in is overwritten).
void max_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                             DType dtype, const Conv2dGeometry& g);

// PyTorch's windows: [oh*s - p, oh*s - p + k) clipped to [-p, H + p); the divisor is that clipped
// size with count_include_pad, else the number of real (unpadded) elements in the window.
void avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides, DType dtype,
                            const Conv2dGeometry& g, bool count_include_pad);
void avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                             ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                             bool count_include_pad);

// Window of output row i: [floor(i*H/OH), ceil((i+1)*H/OH)), likewise for columns; g.window unused.
void adaptive_avg_pool2d_forward_cpu(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                     DType dtype, const Conv2dGeometry& g);
void adaptive_avg_pool2d_backward_cpu(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                      ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g);

#if defined(KILN_WITH_CUDA)
// The same on the GPU with kiln's own kernels (same arguments, device pointers, plus a stream).
// Forward: one thread per output element. Backward: one thread per INPUT element, which sums the
// outputs whose windows can hold it in the CPU's order (output raster order), so there are no
// atomics and gradients are deterministic (float32 gives the CPU's bits).
void max_pool2d_forward_cuda(void* out, int64_t* indices, ImageStrides out_strides, const void* in,
                             ImageStrides in_strides, DType dtype, const Conv2dGeometry& g, Stream stream);
void max_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, const int64_t* indices, ImageStrides indices_strides,
                              DType dtype, const Conv2dGeometry& g, Stream stream);
void avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                             DType dtype, const Conv2dGeometry& g, bool count_include_pad, Stream stream);
void avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                              ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                              bool count_include_pad, Stream stream);
void adaptive_avg_pool2d_forward_cuda(void* out, ImageStrides out_strides, const void* in, ImageStrides in_strides,
                                      DType dtype, const Conv2dGeometry& g, Stream stream);
void adaptive_avg_pool2d_backward_cuda(void* grad_in, ImageStrides grad_in_strides, const void* grad_out,
                                       ImageStrides grad_out_strides, DType dtype, const Conv2dGeometry& g,
                                       Stream stream);
#endif

}  // namespace kiln
