// 3-d convolution and pooling written as 2-d ops over the planes and a pass along the depth. The
// checks come first and speak in the 3-d op's terms (its name, the caller's shapes, the triples),
// so that an error never names the 2-d op or the views it runs on.
#include "core/ops/volume.h"

#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/fold.h"
#include "core/ops/helpers.h"
#include "core/ops/image.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/pool.h"
#include "core/ops/shape.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

std::string triple_str(const Triple& t) { return ops::dims_str({t[0], t[1], t[2]}); }

bool all_positive(const Triple& t) { return t[0] > 0 && t[1] > 0 && t[2] > 0; }
bool none_negative(const Triple& t) { return t[0] >= 0 && t[1] >= 0 && t[2] >= 0; }

// A volume input: [N, C, D, H, W], or [C, D, H, W] read as a batch of one.
struct Volume {
  Tensor x5;    // the 5-d form (a view)
  Shape shape;  // the caller's
  bool batched;
  int64_t n, c, d, h, w;
  // out, 5-d, in the caller's rank.
  Tensor to_input_rank(const Tensor& out) const { return batched ? out : out.squeeze(0); }
};

Volume as_volume(const Tensor& x) {
  const bool batched = x.dim() == 5;
  Tensor x5 = batched ? x : x.unsqueeze(0);
  return {x5, x.sizes(), batched, x5.size(0), x5.size(1), x5.size(2), x5.size(3), x5.size(4)};
}

// --- convolution ---------------------------------------------------------------------------------

// The checks conv3d and conv_transpose3d share: both operands defined and on one device (the
// bias's too), input 4-d or 5-d, weight 5-d, one floating dtype, positive groups, stride and
// dilation, non-negative padding, a non-empty kernel. Returns "input [..], weight [..]".
std::string check_conv3d_operands(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const char* weight_form, const Triple& stride, const Triple& padding,
                                  const Triple& dilation, int64_t groups) {
  const std::string name(op);
  ops::check_defined(op, x, "input");
  ops::check_defined(op, weight, "weight");
  ops::common_device(op, {&x, &weight, &bias});
  if (x.dim() != 4 && x.dim() != 5) {
    throw ShapeError(name + ": input must be 5-d [N, C, D, H, W] or 4-d [C, D, H, W], got shape " +
                     shape_str(x.sizes()));
  }
  const std::string shapes = "input " + shape_str(x.sizes()) + ", weight " + shape_str(weight.sizes());
  if (weight.dim() != 5) {
    throw ShapeError(name + ": weight must be 5-d " + weight_form + ", got shape " + shape_str(weight.sizes()) +
                     " (input " + shape_str(x.sizes()) + ")");
  }
  ops::check_floating(op, x, "input");
  ops::check_conv_dtypes(op, x, weight, bias, shapes);
  if (groups <= 0) throw Error(name + ": groups must be positive, got " + std::to_string(groups) + " (" + shapes + ")");
  if (!all_positive(stride) || !all_positive(dilation) || !none_negative(padding)) {
    throw Error(name + ": stride and dilation must be positive and padding non-negative, got stride " +
                triple_str(stride) + ", padding " + triple_str(padding) + ", dilation " + triple_str(dilation) + " (" +
                shapes + ")");
  }
  if (weight.size(2) == 0 || weight.size(3) == 0 || weight.size(4) == 0) {
    throw ShapeError(name + ": kernel size must be positive (" + shapes + ")");
  }
  if (x.size(-4) == 0 || x.size(-3) == 0 || x.size(-2) == 0 || x.size(-1) == 0) {
    throw ShapeError(name + ": input is empty in a channel or spatial dim, only the batch dim may be (" + shapes + ")");
  }
  return shapes;
}

void check_conv3d_bias(const char* op, const Tensor& bias, int64_t out_channels, const std::string& shapes) {
  if (!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_channels)) return;
  throw ShapeError(std::string(op) + ": bias must be [" + std::to_string(out_channels) + "], got " +
                   shape_str(bias.sizes()) + " (" + shapes + ")");
}

void check_groups_divide(const char* op, int64_t groups, int64_t channels, const char* whose,
                         const std::string& shapes) {
  if (channels % groups == 0) return;
  throw ShapeError(std::string(op) + ": groups " + std::to_string(groups) + " does not divide " + whose + " " +
                   std::to_string(channels) + " channels (" + shapes + ")");
}

// 0, 1, ..., n - 1 times `step` as an int64 column [n, 1] plus 0, ..., k - 1 times `gap` as a
// row [1, k], on `device`: the depth each (output, tap) pair reads.
Tensor tap_positions(int64_t n, int64_t step, int64_t k, int64_t gap, Device device) {
  const TensorOptions options(DType::Int64, device);
  return (arange(0, n, 1, options) * step).unsqueeze(1) + (arange(0, k, 1, options) * gap).unsqueeze(0);
}

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, Triple padding, Triple dilation,
              int64_t groups) {
  const char* op = "conv3d";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return conv3d((*c)[0], (*c)[1], (*c)[2], stride, padding, dilation, groups);
  }
  const std::string shapes = check_conv3d_operands(op, x, weight, bias, "[C_out, C_in / groups, kD, kH, kW]", stride,
                                                   padding, dilation, groups);
  const Volume v = as_volume(x);
  const int64_t cout = weight.size(0), per_group = weight.size(1);
  int64_t expected = 0;
  if (__builtin_mul_overflow(per_group, groups, &expected) || expected != v.c) {
    throw ShapeError("conv3d: input has " + std::to_string(v.c) + " channels, weight expects " +
                     std::to_string(per_group) + " per group x " + std::to_string(groups) + " groups (" + shapes + ")");
  }
  check_groups_divide(op, groups, cout, "the weight's", shapes);
  check_conv3d_bias(op, bias, cout, shapes);
  const Triple kernel{weight.size(2), weight.size(3), weight.size(4)};
  const Triple in{v.d, v.h, v.w};
  Triple out{};
  for (size_t i = 0; i < 3; ++i) {
    const std::optional<int64_t> o = ops::window_out_size(in[i], kernel[i], stride[i], padding[i], dilation[i]);
    const std::string geometry = "kernel " + triple_str(kernel) + ", stride " + triple_str(stride) + ", padding " +
                                 triple_str(padding) + ", dilation " + triple_str(dilation) + "; " + shapes;
    if (!o) throw ShapeError("conv3d: the output size overflows int64 (" + geometry + ")");
    if (*o <= 0) {
      throw ShapeError("conv3d: the dilated kernel is larger than the padded input in dim " + std::to_string(i + 2) +
                       " (" + geometry + ")");
    }
    out[i] = *o;
  }
  // Every output depth's kD input depths, side by side as channels: cols[n * OD + od] holds, per
  // group, the taps kd = 0 .. kD - 1 of that group's channels, in the order the weight is read
  // below ([C_out, kD, C_in / groups, kH, kW] flattened to [C_out, kD * C_in / groups, kH, kW]).
  const int64_t kd = kernel[0], od = out[0];
  const Tensor padded = padding[0] > 0 ? pad(v.x5, {0, 0, 0, 0, padding[0], padding[0]}) : v.x5;
  const Tensor depths = tap_positions(od, stride[0], kd, dilation[0], x.device()).reshape({-1});
  const Tensor cols = index_select(padded, 2, depths)
                          .reshape({v.n, groups, v.c / groups, od, kd, v.h, v.w})
                          .permute({0, 3, 1, 4, 2, 5, 6})
                          .reshape({v.n * od, groups * kd * (v.c / groups), v.h, v.w});
  const Tensor w2 = weight.permute({0, 2, 1, 3, 4}).reshape({cout, kd * per_group, kernel[1], kernel[2]});
  const Tensor y =
      conv2d(cols, w2, bias, {stride[1], stride[2]}, {padding[1], padding[2]}, {dilation[1], dilation[2]}, groups);
  return v.to_input_rank(y.view({v.n, od, cout, out[1], out[2]}).permute({0, 2, 1, 3, 4}).contiguous());
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Triple stride, Triple padding,
                        Triple output_padding, int64_t groups, Triple dilation) {
  const char* op = "conv_transpose3d";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x, &weight, &bias})) {
    return conv_transpose3d((*c)[0], (*c)[1], (*c)[2], stride, padding, output_padding, groups, dilation);
  }
  const std::string shapes = check_conv3d_operands(op, x, weight, bias, "[C_in, C_out / groups, kD, kH, kW]", stride,
                                                   padding, dilation, groups);
  const Volume v = as_volume(x);
  if (weight.size(0) != v.c) {
    throw ShapeError("conv_transpose3d: input has " + std::to_string(v.c) + " channels, weight expects " +
                     std::to_string(weight.size(0)) + " (its first dimension; " + shapes + ")");
  }
  check_groups_divide(op, groups, v.c, "the input's", shapes);
  const int64_t per_group = weight.size(1);
  int64_t cout = 0;
  if (__builtin_mul_overflow(per_group, groups, &cout)) {
    throw ShapeError("conv_transpose3d: " + std::to_string(per_group) + " output channels per group x " +
                     std::to_string(groups) + " groups overflows int64 (" + shapes + ")");
  }
  check_conv3d_bias(op, bias, cout, shapes);
  // As conv_transpose2d: below the stride, where conv3d of the output's size gives back the
  // input's.
  for (size_t i = 0; i < 3; ++i) {
    if (output_padding[i] < 0 || output_padding[i] >= stride[i]) {
      throw Error("conv_transpose3d: output_padding " + triple_str(output_padding) +
                  " must be non-negative and less than the stride " + triple_str(stride) + " (" + shapes + ")");
    }
  }
  const Triple kernel{weight.size(2), weight.size(3), weight.size(4)};
  const Triple in{v.d, v.h, v.w};
  Triple out{};
  for (size_t i = 0; i < 3; ++i) {
    const std::optional<int64_t> o =
        ops::transposed_out_size(in[i], kernel[i], stride[i], padding[i], dilation[i], output_padding[i]);
    const std::string geometry = "kernel " + triple_str(kernel) + ", stride " + triple_str(stride) + ", padding " +
                                 triple_str(padding) + ", output_padding " + triple_str(output_padding) +
                                 ", dilation " + triple_str(dilation) + "; " + shapes;
    if (!o) throw ShapeError("conv_transpose3d: the output size overflows int64 (" + geometry + ")");
    if (*o <= 0) {
      throw ShapeError("conv_transpose3d: output size " + std::to_string(*o) + " in dim " + std::to_string(i + 2) +
                       " is not positive: the padding crops more than the transposed convolution makes (" + geometry +
                       ")");
    }
    out[i] = *o;
  }
  // Each input depth's plane transposed by every depth tap at once: the weight read as
  // [C_in, kD * C_out / groups, kH, kW] gives, per group, the planes of taps kd = 0 .. kD - 1.
  const int64_t kd = kernel[0], d = v.d;
  const Tensor planes = v.x5.permute({0, 2, 1, 3, 4}).reshape({v.n * d, v.c, v.h, v.w});
  const Tensor w2 = weight.permute({0, 2, 1, 3, 4}).reshape({v.c, kd * per_group, kernel[1], kernel[2]});
  const Tensor t = conv_transpose2d(planes, w2, Tensor(), {stride[1], stride[2]}, {padding[1], padding[2]},
                                    {output_padding[1], output_padding[2]}, groups, {dilation[1], dilation[2]});
  // fold adds tap kd of input depth i into output depth i * sD - pD + kd * dD (col2im along
  // the depth, width 1): its channels are (C_out, OH, OW), its kernel positions the taps, its
  // blocks the input depths.
  const Tensor cols = t.view({v.n, d, groups, kd, per_group, out[1], out[2]})
                          .permute({0, 2, 4, 5, 6, 3, 1})
                          .reshape({v.n, cout * out[1] * out[2] * kd, d});
  Tensor y = fold(cols, {out[0], 1}, {kd, 1}, {dilation[0], 1}, {padding[0], 0}, {stride[0], 1})
                 .view({v.n, cout, out[1], out[2], out[0]})
                 .permute({0, 1, 4, 2, 3})
                 .contiguous();
  if (bias.defined()) y = y + bias.view({1, cout, 1, 1, 1});
  return v.to_input_rank(y);
}

// --- pooling -------------------------------------------------------------------------------------

namespace {

// The input checks every 3-d pool makes: [C, D, H, W] or [N, C, D, H, W], floating, and only the
// batch dim may be empty (as the 2-d pools).
Volume pool3d_input(const char* op, const Tensor& x) {
  ops::check_pool_input(op, x, 3);
  return as_volume(x);
}

// A window's checks (stride {0, 0, 0} becomes the kernel) and its output sizes.
Triple pool3d_window(const char* op, const Volume& v, const Triple& kernel, Triple& stride, const Triple& padding,
                     const Triple& dilation, bool ceil_mode) {
  if (stride == Triple{0, 0, 0}) stride = kernel;
  const std::string what = " (input " + shape_str(v.shape) + ", kernel " + triple_str(kernel) + ", stride " +
                           triple_str(stride) + ", padding " + triple_str(padding) + ", dilation " +
                           triple_str(dilation) + ")";
  if (!all_positive(kernel) || !all_positive(stride) || !all_positive(dilation)) {
    throw Error(std::string(op) + ": kernel size, stride and dilation must be positive" + what);
  }
  const Triple in{v.d, v.h, v.w};
  Triple out{};
  for (size_t i = 0; i < 3; ++i) {
    if (padding[i] < 0 || padding[i] > kernel[i] / 2) {
      throw Error(std::string(op) + ": padding must be non-negative and at most half the kernel" + what);
    }
    const std::optional<int64_t> o =
        ops::pool_out_size(in[i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode);
    if (!o) throw ShapeError(std::string(op) + ": the output size overflows int64" + what);
    if (*o <= 0) {
      throw ShapeError(std::string(op) + ": the output size is not positive in dim " + std::to_string(i + 2) + what);
    }
    out[i] = *o;
  }
  return out;
}

// The planes [N, C * D, H, W] of a volume, for the first (per-plane) pass.
Tensor planes_of(const Volume& v) { return v.x5.reshape({v.n, v.c * v.d, v.h, v.w}); }

// The first pass's result [N, C * D, OH, OW] as [N, C, D, OH * OW], for the pass along the depth.
Tensor depth_rows(const Volume& v, const Tensor& planes) {
  return planes.reshape({v.n, v.c, v.d, planes.size(2) * planes.size(3)});
}

}  // namespace

std::pair<Tensor, Tensor> max_pool3d_with_indices(const Tensor& x, Triple kernel_size, Triple stride, Triple padding,
                                                  Triple dilation, bool ceil_mode) {
  const char* op = "max_pool3d";
  const Volume v = pool3d_input(op, x);
  const Triple out = pool3d_window(op, v, kernel_size, stride, padding, dilation, ceil_mode);
  // Each plane's window maxima (ties: the first in (h, w) order), then the maxima of those along
  // the depth (ties: the first depth): together the first in (d, h, w) order.
  auto [plane_max, plane_at] =
      max_pool2d_with_indices(planes_of(v), {kernel_size[1], kernel_size[2]}, {stride[1], stride[2]},
                              {padding[1], padding[2]}, {dilation[1], dilation[2]}, ceil_mode);
  auto [values, depth_at] = max_pool2d_with_indices(depth_rows(v, plane_max), {kernel_size[0], 1}, {stride[0], 1},
                                                    {padding[0], 0}, {dilation[0], 1}, ceil_mode);
  // depth_at = d * (OH * OW) + j indexes [D, OH * OW]: plane_at read there is the winner's
  // h * W + w.
  const int64_t plane = out[1] * out[2];
  const Shape out_shape{v.n, v.c, out[0], out[1], out[2]};
  const Tensor flat_at = depth_at.reshape({v.n, v.c, out[0] * plane});
  const Tensor hw = gather(plane_at.reshape({v.n, v.c, v.d * plane}), 2, flat_at);
  const Tensor indices = (floor_divide(flat_at, plane) * (v.h * v.w) + hw).reshape(out_shape);
  return {v.to_input_rank(values.reshape(out_shape)), v.to_input_rank(indices)};
}

Tensor max_pool3d(const Tensor& x, Triple kernel_size, Triple stride, Triple padding, Triple dilation, bool ceil_mode) {
  return max_pool3d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).first;
}

Tensor max_unpool3d(const Tensor& x, const Tensor& indices, Triple kernel_size, Triple stride, Triple padding,
                    std::optional<Triple> output_size) {
  const char* op = "max_unpool3d";
  ops::check_defined(op, x, "input");
  if (x.dim() != 4 && x.dim() != 5) {
    throw ShapeError(std::string(op) + ": input must be [C, D, H, W] or [N, C, D, H, W], got " + shape_str(x.sizes()));
  }
  if (stride == Triple{0, 0, 0}) stride = kernel_size;
  if (!all_positive(kernel_size) || !all_positive(stride) || !none_negative(padding)) {
    throw Error(std::string(op) + ": kernel_size " + triple_str(kernel_size) + " and stride " + triple_str(stride) +
                " must be positive and padding " + triple_str(padding) + " >= 0");
  }
  Triple size{};
  for (size_t i = 0; i < 3; ++i) {
    size[i] = ops::unpooled_size(x.size(x.dim() - 3 + static_cast<int64_t>(i)), kernel_size[i], stride[i], padding[i]);
  }
  if (output_size) size = *output_size;
  if (!all_positive(size)) {
    throw ShapeError(std::string(op) + ": output size " + triple_str(size) + " for input " + shape_str(x.sizes()) +
                     " must be positive");
  }
  return ops::max_unpool(op, x, indices, {size[0], size[1], size[2]});
}

Tensor avg_pool3d(const Tensor& x, Triple kernel_size, Triple stride, Triple padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool3d";
  const Volume v = pool3d_input(op, x);
  const Triple out = pool3d_window(op, v, kernel_size, stride, padding, {1, 1, 1}, ceil_mode);
  ops::check_divisor(op, divisor_override);
  if (divisor_override) {
    return ops::sum_over_divisor(avg_pool3d(x, kernel_size, stride, padding, ceil_mode, false), {v.d, v.h, v.w},
                                 {kernel_size[0], kernel_size[1], kernel_size[2]}, {stride[0], stride[1], stride[2]},
                                 {padding[0], padding[1], padding[2]}, *divisor_override);
  }
  // The window's sum and its divisor (all cells, or those inside the input) are both products of
  // per-dim factors, so the mean is each plane's window mean, averaged along the depth.
  const Tensor plane_mean = avg_pool2d(planes_of(v), {kernel_size[1], kernel_size[2]}, {stride[1], stride[2]},
                                       {padding[1], padding[2]}, ceil_mode, count_include_pad);
  const Tensor mean = avg_pool2d(depth_rows(v, plane_mean), {kernel_size[0], 1}, {stride[0], 1}, {padding[0], 0},
                                 ceil_mode, count_include_pad);
  return v.to_input_rank(mean.reshape({v.n, v.c, out[0], out[1], out[2]}));
}

Tensor adaptive_avg_pool3d(const Tensor& x, Triple output_size) {
  const char* op = "adaptive_avg_pool3d";
  const Volume v = pool3d_input(op, x);
  if (!all_positive(output_size)) {
    throw ShapeError(std::string(op) + ": output size must be positive, got " + triple_str(output_size) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
  const Tensor plane_mean = adaptive_avg_pool2d(planes_of(v), {output_size[1], output_size[2]});
  const Tensor mean = adaptive_avg_pool2d(depth_rows(v, plane_mean), {output_size[0], output_size[1] * output_size[2]});
  return v.to_input_rank(mean.reshape({v.n, v.c, output_size[0], output_size[1], output_size[2]}));
}

namespace {

void check_adaptive_max3d(const Tensor& x, Triple output_size) {
  const char* op = "adaptive_max_pool3d";
  pool3d_input(op, x);
  if (!all_positive(output_size)) {
    throw ShapeError(std::string(op) + ": output size must be positive, got " + triple_str(output_size) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
}

}  // namespace

std::pair<Tensor, Tensor> adaptive_max_pool3d_with_indices(const Tensor& x, Triple output_size) {
  check_adaptive_max3d(x, output_size);
  std::vector<Tensor> positions;
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = x.size(x.dim() - 3 + static_cast<int64_t>(i));
    positions.push_back(ops::adaptive_cells(n, output_size[i], x.device()).unsqueeze(0));
  }
  return ops::max_over_windows(x, positions);
}

Tensor adaptive_max_pool3d(const Tensor& x, Triple output_size) {
  check_adaptive_max3d(x, output_size);
  const int64_t d = x.dim() - 3;
  Tensor r = x;
  for (int64_t i = 0; i < 3; ++i) r = ops::adaptive_max_along(r, d + i, output_size[static_cast<size_t>(i)]);
  return r;
}

Tensor lp_pool3d(const Tensor& x, double norm_type, Triple kernel_size, Triple stride, bool ceil_mode) {
  const char* op = "lp_pool3d";
  const Volume v = pool3d_input(op, x);
  ops::check_norm_type(op, norm_type);
  pool3d_window(op, v, kernel_size, stride, {0, 0, 0}, {1, 1, 1}, ceil_mode);  // the checks, in lp_pool3d's name
  return ops::lp_from_average(avg_pool3d(pow(x, norm_type), kernel_size, stride, {0, 0, 0}, ceil_mode), norm_type,
                              kernel_size[0] * kernel_size[1] * kernel_size[2]);
}

}  // namespace kiln
