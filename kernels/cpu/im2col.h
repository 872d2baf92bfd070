// The CPU convolution's column matrices (kernels/cpu/conv.cpp lowers a convolution to them and GEMMs).
// `g` covers the images given (g.batch of them, `in` pointing at element [0, 0, 0, 0]); the column
// dtype is conv_column_dtype(in dtype) (float for half inputs, which widen on the copy). Entries
// whose tap falls outside the image are 0.
// - Rows, for channels-last problems: one row per output pixel, one column per tap and channel,
//   grouped as the channels-last filter [C_out, KH, KW, C/groups] is: with Cg = C/groups and
//   K = KH*KW*Cg, col[(n*OH*OW + oh*OW + ow) * ld + g*K + (i*KW + j)*Cg + c] =
//   in[n, g*Cg + c, oh*sh - ph + i*dh, ow*sw - pw + j*dw], ld >= C*KH*KW. A tap reads Cg adjacent
//   values of a channels-last image, one copy (a window row is one copy for a dense image, one group
//   and no dilation along W); group g's K columns times its filter rows are its outputs, and the
//   GEMM's output is the channels-last [N*OH*OW, C_out] matrix.
// - Planes, for NCHW problems: one row per tap, one column per output pixel,
//   col[((c*KH + i)*KW + j) * ld + n*OH*OW + oh*OW + ow] = the same value, ld >= N*OH*OW. Each image's
//   block of columns times the filter matrix is that image's NCHW output, with no transpose.
// The col2im functions are the adjoints: in_grad[n, c, y, x] = the sum of the entries their im2col
// reads from (y, x), every element of in_grad overwritten (0 where no window reaches), summed in a
// fixed order per input row (rows) or plane (planes) so that the bits do not depend on the thread
// count.
#pragma once

#include <cstdint>

#include "kernels/conv.h"

namespace kiln::cpu {

// groups >= 1 must divide g.channels.
void im2col_rows(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype, ImageStrides in_strides,
                 const Conv2dGeometry& g, int64_t groups = 1);
void col2im_rows(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                 int64_t ld_col, const Conv2dGeometry& g, int64_t groups = 1);

void im2col_planes(void* col, DType col_dtype, int64_t ld_col, const void* in, DType in_dtype,
                   ImageStrides in_strides, const Conv2dGeometry& g);
void col2im_planes(void* in_grad, DType in_dtype, ImageStrides in_strides, const void* col, DType col_dtype,
                   int64_t ld_col, const Conv2dGeometry& g);

}  // namespace kiln::cpu
