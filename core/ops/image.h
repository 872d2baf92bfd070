// What the image ops (conv2d and the pools) share: NCHW vs channels-last, element strides in the
// kernels' form, and window arithmetic. Internal to core/ops.
#pragma once

#include <string>

#include "core/ops/conv.h"
#include "core/ops/factory.h"
#include "kernels/conv.h"

namespace kiln::ops {

inline ImageStrides image_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Channels-last in means channels-last out; a layout that is both (C == 1, or 1x1 images) is NCHW.
inline bool is_channels_last(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

inline Tensor empty_image(const Shape& shape, DType dtype, Device device, bool channels_last) {
  return empty(shape, TensorOptions(dtype, device),
               channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

inline std::string pair_str(Pair p) { return std::to_string(p[0]) + "x" + std::to_string(p[1]); }

// Division rounding toward negative infinity (output sizes of windows that start in the padding).
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace kiln::ops
