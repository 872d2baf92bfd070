// What the image ops (conv2d and the pools) share: NCHW vs channels-last, element strides in the
// kernels' form, and window arithmetic. Internal to core/ops.
#pragma once

#include <optional>
#include <string>

#include "core/ops/conv.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/conv.h"
#include "kernels/error.h"

namespace kiln::ops {

inline ImageStrides image_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Channels-last in means channels-last out; a layout that is both (C == 1, or 1x1 images) is NCHW.
inline bool is_channels_last(const Tensor& x) {
  return x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast);
}

// A new NCHW or channels-last image for `op` (its output or a gradient).
inline Tensor empty_image(const char* op, const Shape& shape, DType dtype, Device device, bool channels_last) {
  return empty_for(op, shape, TensorOptions(dtype, device),
                   channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

// Sizes joined by "x" ("3x3", "2x3x4"): how the pools' errors write kernels and output sizes.
inline std::string dims_str(const Shape& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}
inline std::string pair_str(Pair p) { return dims_str({p[0], p[1]}); }

// A convolution's operands share one dtype (the bias's too, when defined), or a DTypeError naming
// `op`, the three dtypes and `shapes`.
inline void check_conv_dtypes(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::string& shapes) {
  if (x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype())) return;
  throw DTypeError(std::string(op) + ": input, weight and bias must share a dtype, got input " + dtype_name(x.dtype()) +
                   ", weight " + dtype_name(weight.dtype()) +
                   (bias.defined() ? std::string(", bias ") + dtype_name(bias.dtype()) : std::string()) + " (" +
                   shapes + ")");
}

// Division rounding toward negative infinity (output sizes of windows that start in the padding).
// b > 0; written so that no step overflows for any such a and b.
inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
// How many windows of kernel k (dilation d) fit, stride s apart, in `in` padded by `pad` on each
// side: floor((in + 2 pad - d (k - 1) - 1) / s) + 1 (0 or less when none fits). nullopt when the
// padded length or the window's reach overflows int64 (k, s, d >= 1, in and pad >= 0).
inline std::optional<int64_t> window_out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) {
  int64_t reach = 0, padded = 0, twice_pad = 0;
  if (__builtin_mul_overflow(d, k - 1, &reach) || __builtin_mul_overflow(pad, 2, &twice_pad) ||
      __builtin_add_overflow(in, twice_pad, &padded)) {
    return std::nullopt;
  }
  return floor_div(padded - reach - 1, s) + 1;  // both operands of the difference are non-negative
}

// The length a transposed convolution maps `in` to: (in - 1) s - 2 pad + d (k - 1) + out_pad + 1
// (0 or less when the padding crops everything). nullopt when a step overflows int64 (k, s, d >= 1,
// in, pad and out_pad >= 0).
inline std::optional<int64_t> transposed_out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d,
                                                  int64_t out_pad) {
  int64_t spread = 0, reach = 0, twice_pad = 0, r = 0;
  if (__builtin_mul_overflow(in - 1, s, &spread) || __builtin_mul_overflow(d, k - 1, &reach) ||
      __builtin_mul_overflow(pad, 2, &twice_pad) || __builtin_add_overflow(spread, reach, &r) ||
      __builtin_sub_overflow(r, twice_pad, &r) || __builtin_add_overflow(r, out_pad, &r) ||
      __builtin_add_overflow(r, 1, &r)) {
    return std::nullopt;
  }
  return r;
}

}  // namespace kiln::ops
