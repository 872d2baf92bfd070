// The CPU convolution's column matrices (kernels/cpu/conv.cpp lowers a convolution to them and GEMMs).
// `g` covers the images given (g.batch of them, `in` pointing at element [0, 0, 0, 0]); the column
// dtype is conv_column_dtype(in dtype) (float for half inputs, which widen on the copy). Entries
// whose tap falls outside the image are 0.
// - Rows, for channels-last problems: one row per output pixel, one column per tap,
//   col[(n*OH*OW + oh*OW + ow) * ld + (c*KH + i)*KW + j] = in[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw],
//   ld >= C*KH*KW. The GEMM's output is then the channels-last [N*OH*OW, C_out] matrix.
// - Planes, for NCHW problems: one row per tap, one column per output pixel,
//   col[((c*KH + i)*KW + j) * ld + n*OH*OW + oh*OW + ow] = the same value, ld >= N*OH*OW. Each image's
//   block of columns times the filter matrix is that image's NCHW output, with no transpose.
// The col2im functions are the adjoints: in_grad[n, c, y, x] = the sum of the entries their im2col
// reads from (y, x), every element of in_grad overwritten (0 where no window reaches), summed in a
// fixed order per input plane so that the bits do not depend on the thread count.
#pragma once

#include <cstdint>

#include "kernels/conv.h"

namespace kiln::cpu {

void im2col_rows(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                 const Conv2dGeometry& g);
void col2im_rows(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                 int64_t ld_col, const Conv2dGeometry& g);

void im2col_planes(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype,
                   ImageStrides in_strides, const Conv2dGeometry& g);
void col2im_planes(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                   int64_t ld_col, const Conv2dGeometry& g);

}  // namespace kiln::cpu
