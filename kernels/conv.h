// im2col / col2im for 2-d convolution. The column matrix has one ROW per output pixel (n, oh, ow)
// and one column per (c, kh, kw), so a group's GEMM covers the whole batch at once (m = N*OH*OW)
// and writes the output straight into channels-last order. Columns are float32 (float64 for
// float64 inputs): half inputs widen on the copy, so the GEMM and col2im sums round only once.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

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

}  // namespace kiln
