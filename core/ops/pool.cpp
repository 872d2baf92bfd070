// 2-d pooling (max, average, adaptive average) with kiln's own kernels on both devices. The output
// keeps the input's layout (NCHW or channels-last); 3-d [C, H, W] inputs count as one image. The
// 1-d pools run the 2-d ones on a height of 1. The adaptive max pools gather each window with
// index_select and take its amax (with indices, ops::max_over_windows finds each window's winner
// one dim at a time; fractional max pooling shares it); the LP pools are average pools of powers.
#include "core/ops/pool.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/image.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/reduce.h"
#include "kernels/error.h"
#include "kernels/pool.h"

namespace kiln {

std::optional<int64_t> ops::pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  std::optional<int64_t> floor_out = ops::window_out_size(in, k, s, p, d);
  if (!floor_out || !ceil_mode) return floor_out;
  // ceil: one more window when the last one starts inside the input or its left padding.
  int64_t span = 0, start = 0;
  if (__builtin_mul_overflow(d, k - 1, &span)) return std::nullopt;
  span = in + 2 * p - span - 1;  // fits: window_out_size computed it
  int64_t out = *floor_out;
  if (span % s != 0 && (__builtin_mul_overflow(out, s, &start) ? false : start < in + p)) ++out;
  return out;
}

void ops::check_pool_input(const char* op, const Tensor& x, int64_t spatial) {
  ops::check_defined(op, x, "input");
  const std::string dims = spatial == 1 ? "L" : spatial == 2 ? "H, W" : "D, H, W";
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2) {
    throw ShapeError(std::string(op) + ": input must be " + std::to_string(spatial + 1) + "-d [C, " + dims + "] or " +
                     std::to_string(spatial + 2) + "-d [N, C, " + dims + "], got shape " + shape_str(x.sizes()));
  }
  ops::check_floating(op, x, "input");
  for (int64_t d = x.dim() - spatial - 1; d < x.dim(); ++d) {
    if (x.size(d) == 0) {
      throw ShapeError(std::string(op) + ": input " + shape_str(x.sizes()) +
                       " is empty in a channel or spatial dim (only the batch dim may be empty)");
    }
  }
}

namespace {

using ops::empty_image;
using ops::image_strides;
using ops::is_channels_last;
using ops::pair_str;
using ops::pool_out_size;

struct PoolArgs {
  Pair kernel, stride, padding, dilation;
};

// The checks every windowed pooling op makes, and the geometry of x (3-d inputs count as one image).
Conv2dGeometry pool_geometry(const char* op, const Tensor& x, PoolArgs& a, bool ceil_mode) {
  ops::check_pool_input(op, x, 2);
  // {0, 0}, the default, is PyTorch's empty stride: the kernel size. One zero is an error, not half
  // a default ({0, 2} was taken as {kernel, 2}).
  if (a.stride[0] == 0 && a.stride[1] == 0) a.stride = a.kernel;
  const std::string where = " (input " + shape_str(x.sizes()) + ")";
  if (a.kernel[0] <= 0 || a.kernel[1] <= 0) {
    throw Error(std::string(op) + ": kernel size must be positive, got " + pair_str(a.kernel) + where);
  }
  if (a.stride[0] <= 0 || a.stride[1] <= 0) {
    throw Error(std::string(op) + ": stride must be positive, got " + pair_str(a.stride) + where);
  }
  if (a.dilation[0] <= 0 || a.dilation[1] <= 0) {
    throw Error(std::string(op) + ": dilation must be positive, got " + pair_str(a.dilation) + where);
  }
  if (a.padding[0] < 0 || a.padding[1] < 0 || a.padding[0] > a.kernel[0] / 2 || a.padding[1] > a.kernel[1] / 2) {
    throw Error(std::string(op) + ": padding " + pair_str(a.padding) +
                " must be non-negative and at most half the kernel " + pair_str(a.kernel) + where);
  }
  const int64_t h = x.size(-2), w = x.size(-1);
  const std::optional<int64_t> ohs = pool_out_size(h, a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], ceil_mode);
  const std::optional<int64_t> ows = pool_out_size(w, a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], ceil_mode);
  if (!ohs || !ows) {
    throw ShapeError(std::string(op) + ": the output size overflows int64 (input " + shape_str(x.sizes()) +
                     ", kernel " + pair_str(a.kernel) + ", stride " + pair_str(a.stride) + ", padding " +
                     pair_str(a.padding) + ", dilation " + pair_str(a.dilation) + ")");
  }
  const int64_t oh = *ohs, ow = *ows;
  if (oh <= 0 || ow <= 0) {
    throw ShapeError(std::string(op) + ": output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                     " is not positive (input " + shape_str(x.sizes()) + ", kernel " + pair_str(a.kernel) +
                     ", stride " + pair_str(a.stride) + ", padding " + pair_str(a.padding) + ", dilation " +
                     pair_str(a.dilation) + ")");
  }
  Conv2dGeometry g;
  g.batch = x.dim() == 4 ? x.size(0) : 1;
  g.channels = x.size(-3);
  g.in_h = h;
  g.in_w = w;
  g.out_h = oh;
  g.out_w = ow;
  g.window = {a.kernel[0],  a.kernel[1],  a.stride[0],   a.stride[1],
              a.padding[0], a.padding[1], a.dilation[0], a.dilation[1]};
  return g;
}

// x as a 4-d tensor: 3-d [C, H, W] inputs get a batch dim (a differentiable view).
Tensor as_batched(const Tensor& x) { return x.dim() == 3 ? x.unsqueeze(0) : x; }
Tensor as_input_rank(const Tensor& out, const Tensor& x) { return x.dim() == 3 ? out.squeeze(0) : out; }

// The input gradient of a pooling op, in x4's layout; `kernel(grad_in, grad)` fills it.
template <typename F>
Tensor pool_grad(const char* op, const Shape& x_shape, bool channels_last, const Tensor& grad, F&& kernel) {
  Tensor gx = empty_image(op, x_shape, grad.dtype(), grad.device(), channels_last);
  if (gx.numel() > 0) kernel(gx, grad);
  return gx;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair stride, Pair padding,
                                                  Pair dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  PoolArgs a{kernel_size, stride, padding, dilation};
  const Conv2dGeometry g = pool_geometry(op, x, a, ceil_mode);
  Tensor x4 = as_batched(x);
  const bool cl = is_channels_last(x4);
  const Shape out_shape{g.batch, g.channels, g.out_h, g.out_w};
  Tensor out = empty_image(op, out_shape, x.dtype(), x.device(), cl);
  // Indices into each input plane, kept for the backward (which scatters by them).
  Tensor indices = empty_image(op, out_shape, DType::Int64, x.device(), cl);
  if (out.numel() > 0) {
    ops::launch(op, x.device(), kernels::max_pool2d_forward, out.data_ptr(), indices.data_ptr<int64_t>(),
                image_strides(out), x4.data_ptr(), image_strides(x4), x.dtype(), g);
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {indices}, [g, xs, cl](const FunctionNode::Context& ctx) {
      Tensor idx = ctx.saved_at(0);
      return TensorList{pool_grad("max_pool2d backward", xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        ops::launch("max_pool2d backward", gr.device(), kernels::max_pool2d_backward, gx.data_ptr(), image_strides(gx),
                    gr.data_ptr(), image_strides(gr), idx.data_ptr<int64_t>(), image_strides(idx), gr.dtype(), g);
      })};
    });
  }
  return {as_input_rank(out, x), as_input_rank(indices, x)};
}

Tensor max_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, Pair dilation, bool ceil_mode) {
  return max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).first;
}

// Values scattered into the flattened plane (summed where two share an index, then divided by the
// count, so a shared element appears once), the gradient gathered back.
Tensor ops::max_unpool(const char* op, const Tensor& x, const Tensor& indices, const Shape& out_plane) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, indices, "indices");
  ops::check_floating(op, x, "input");
  if (indices.dtype() != DType::Int64 || indices.sizes() != x.sizes()) {
    throw ShapeError(std::string(op) + ": indices must be int64 of the input's shape " + shape_str(x.sizes()) +
                     ", got " + dtype_name(indices.dtype()) + " " + shape_str(indices.sizes()));
  }
  ops::common_device(op, {&x, &indices});
  const int64_t spatial = static_cast<int64_t>(out_plane.size());
  int64_t plane = 1, in_plane = 1;
  for (int64_t d : out_plane) plane *= d;
  for (int64_t i = x.dim() - spatial; i < x.dim(); ++i) in_plane *= x.size(i);
  Shape lead(x.sizes().begin(), x.sizes().end() - spatial);
  Shape flat_in = lead, flat_out = lead, out_shape = lead;
  flat_in.push_back(in_plane);
  flat_out.push_back(plane);
  out_shape.insert(out_shape.end(), out_plane.begin(), out_plane.end());
  const Tensor idx = indices.reshape(flat_in);
  if (idx.device().is_cpu() && idx.numel() > 0) {
    const int64_t lo = amin(idx, {}).item<int64_t>(), hi = amax(idx, {}).item<int64_t>();
    if (lo < 0 || hi >= plane) {
      throw IndexError(std::string(op) + ": index " + std::to_string(lo < 0 ? lo : hi) +
                       " is outside the output plane " + shape_str(out_plane) + " (" + std::to_string(plane) +
                       " positions)");
    }
  }
  const int64_t last = static_cast<int64_t>(flat_in.size()) - 1;
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor xv = x.detach().reshape(flat_in);
    const TensorOptions options(x.dtype(), x.device());
    const Tensor sums = scatter_add(zeros(flat_out, options), last, idx, xv);
    const Tensor counts = scatter_add(zeros(flat_out, options), last, idx, ones_like(xv));
    out = div(sums, clamp(counts, 1.0, std::nullopt)).reshape(out_shape);
  }
  if (needs_grad({&x})) {
    const Shape xs = x.sizes();
    record_function(op, {x}, {out}, {idx}, [xs, flat_out, last](const FunctionNode::Context& ctx) {
      return TensorList{gather(ctx.grads[0].reshape(flat_out), last, ctx.saved_at(0)).reshape(xs)};
    });
  }
  return out;
}

int64_t ops::unpooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in - 1) * stride - 2 * padding + kernel;
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, Pair kernel_size, Pair stride, Pair padding,
                    std::optional<Pair> output_size) {
  const char* op = "max_unpool2d";
  ops::check_defined(op, x, "input");
  if (x.dim() != 3 && x.dim() != 4) {
    throw ShapeError(std::string(op) + ": input must be [C, H, W] or [N, C, H, W], got " + shape_str(x.sizes()));
  }
  if (stride == Pair{0, 0}) stride = kernel_size;
  if (kernel_size[0] <= 0 || kernel_size[1] <= 0 || stride[0] <= 0 || stride[1] <= 0 || padding[0] < 0 ||
      padding[1] < 0) {
    throw Error(std::string(op) + ": kernel_size " + ops::pair_str(kernel_size) + " and stride " +
                ops::pair_str(stride) + " must be positive and padding " + ops::pair_str(padding) + " >= 0");
  }
  const Pair size = output_size.value_or(Pair{ops::unpooled_size(x.size(-2), kernel_size[0], stride[0], padding[0]),
                                              ops::unpooled_size(x.size(-1), kernel_size[1], stride[1], padding[1])});
  if (size[0] <= 0 || size[1] <= 0) {
    throw ShapeError(std::string(op) + ": output size " + ops::pair_str(size) + " for input " + shape_str(x.sizes()) +
                     " must be positive");
  }
  return ops::max_unpool(op, x, indices, {size[0], size[1]});
}

Tensor ops::sum_over_divisor(const Tensor& inside_mean, const Shape& in, const Shape& kernel, const Shape& stride,
                             const Shape& padding, int64_t divisor) {
  // Per output position, the product over dims of the window's cells inside, over the divisor.
  const int64_t spatial = static_cast<int64_t>(in.size());
  std::vector<double> factor{1.0 / static_cast<double>(divisor)};
  Shape out;
  for (int64_t i = 0; i < spatial; ++i) {
    const size_t k = static_cast<size_t>(i);
    const int64_t n = inside_mean.size(inside_mean.dim() - spatial + i);
    out.push_back(n);
    std::vector<double> next;
    for (const double f : factor) {
      for (int64_t o = 0; o < n; ++o) {
        const int64_t start = o * stride[k] - padding[k];
        next.push_back(f * static_cast<double>(std::min(start + kernel[k], in[k]) - std::max<int64_t>(start, 0)));
      }
    }
    factor = std::move(next);
  }
  const DType wide = ops::widened_dtype(inside_mean.dtype());
  const Tensor scale = tensor(factor, out, TensorOptions(DType::Float64, Device::cpu())).to(wide);
  return (inside_mean.to(wide) * scale.to(inside_mean.device())).to(inside_mean.dtype());
}

void ops::check_divisor(const char* op, std::optional<int64_t> divisor_override) {
  if (divisor_override && *divisor_override == 0) throw Error(std::string(op) + ": divisor_override must be non-zero");
}

Tensor avg_pool2d(const Tensor& x, Pair kernel_size, Pair stride, Pair padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  PoolArgs a{kernel_size, stride, padding, {1, 1}};
  const Conv2dGeometry g = pool_geometry(op, x, a, ceil_mode);
  ops::check_divisor(op, divisor_override);
  if (divisor_override) {
    return ops::sum_over_divisor(avg_pool2d(x, a.kernel, a.stride, a.padding, ceil_mode, false), {g.in_h, g.in_w},
                                 {a.kernel[0], a.kernel[1]}, {a.stride[0], a.stride[1]}, {a.padding[0], a.padding[1]},
                                 *divisor_override);
  }
  Tensor x4 = as_batched(x);
  const bool cl = is_channels_last(x4);
  Tensor out = empty_image(op, {g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device(), cl);
  if (out.numel() > 0) {
    ops::launch(op, x.device(), kernels::avg_pool2d_forward, out.data_ptr(), image_strides(out), x4.data_ptr(),
                image_strides(x4), x.dtype(), g, count_include_pad);
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {}, [g, xs, cl, count_include_pad](const FunctionNode::Context& ctx) {
      return TensorList{pool_grad("avg_pool2d backward", xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        ops::launch("avg_pool2d backward", gr.device(), kernels::avg_pool2d_backward, gx.data_ptr(), image_strides(gx),
                    gr.data_ptr(), image_strides(gr), gr.dtype(), g, count_include_pad);
      })};
    });
  }
  return as_input_rank(out, x);
}

Tensor adaptive_avg_pool2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_avg_pool2d";
  ops::check_pool_input(op, x, 2);
  if (output_size[0] <= 0 || output_size[1] <= 0) {
    throw ShapeError("adaptive_avg_pool2d: output size must be positive, got " + pair_str(output_size) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
  Tensor x4 = as_batched(x);
  Conv2dGeometry g;
  g.batch = x4.size(0);
  g.channels = x4.size(1);
  g.in_h = x4.size(2);
  g.in_w = x4.size(3);
  g.out_h = output_size[0];
  g.out_w = output_size[1];
  const bool cl = is_channels_last(x4);
  Tensor out = empty_image(op, {g.batch, g.channels, g.out_h, g.out_w}, x.dtype(), x.device(), cl);
  if (out.numel() > 0) {
    ops::launch(op, x.device(), kernels::adaptive_avg_pool2d_forward, out.data_ptr(), image_strides(out),
                x4.data_ptr(), image_strides(x4), x.dtype(), g);
  }
  if (needs_grad({&x4})) {
    Shape xs = x4.sizes();
    record_function(op, {x4}, {out}, {}, [g, xs, cl](const FunctionNode::Context& ctx) {
      const char* name = "adaptive_avg_pool2d backward";
      return TensorList{pool_grad(name, xs, cl, ctx.grads[0], [&](const Tensor& gx, const Tensor& gr) {
        ops::launch(name, gr.device(), kernels::adaptive_avg_pool2d_backward, gx.data_ptr(), image_strides(gx),
                    gr.data_ptr(), image_strides(gr), gr.dtype(), g);
      })};
    });
  }
  return as_input_rank(out, x);
}

Tensor ops::adaptive_cells(int64_t n, int64_t out, Device device) {
  int64_t widest = 0;
  for (int64_t i = 0; i < out; ++i) widest = std::max(widest, ((i + 1) * n + out - 1) / out - i * n / out);
  const TensorOptions index_options(DType::Int64, device);
  const Tensor cell = arange(0, out, 1, index_options);
  const Tensor start = floor_divide(cell * n, out), last = floor_divide((cell + 1) * n + (out - 1), out) - 1;
  return minimum(start.unsqueeze(1) + arange(0, widest, 1, index_options), last.unsqueeze(1));
}

// Each output cell's window gathered by one index_select (windows shorter than the longest repeat
// their last index, which a maximum ignores), then amax over the window. The index is made on x's
// device from aranges, so a call copies nothing from the host (CUDA graphs can capture it).
Tensor ops::adaptive_max_along(const Tensor& x, int64_t dim, int64_t out) {
  const Tensor idx = adaptive_cells(x.size(dim), out, x.device());
  Shape windows = x.sizes();
  windows[static_cast<size_t>(dim)] = out;
  windows.insert(windows.begin() + dim + 1, idx.size(1));
  return amax(index_select(x, dim, idx.reshape({-1})).reshape(windows), {dim + 1});
}

// Separable: the windows are products of ranges, one per dim, so the winner is found one dim at a
// time, the last dim first. Along a dim, PyTorch's loop is replayed over the window's k-th cells,
// k = 0, 1, ...: a cell replaces the best so far when it is larger or NaN. Per row that picks the
// first maximum or the last NaN; over the rows' winners (the next dim) the same rule picks the
// first row holding the maximum, or the last holding a NaN: the row-major rule over the whole
// window. Every temporary has the size of the pool reduced so far (no index over whole windows),
// and one int64 tensor carries each winner's flat index over the dims already reduced. The
// selection runs without the tape; the values are then gathered at the winners with it, so the
// gradient is gather's: all of it to the one winner.
std::pair<Tensor, Tensor> ops::max_over_windows(const Tensor& x, const std::vector<Tensor>& positions) {
  const int64_t spatial = static_cast<int64_t>(positions.size()), lead_dims = x.dim() - spatial;
  Shape out_shape(x.sizes().begin(), x.sizes().begin() + lead_dims), planar{1};
  int64_t planes = 1, plane = 1, cells_out = 1;
  for (int64_t s : out_shape) planes *= s;
  planar[0] = planes;
  for (int64_t d = 0; d < spatial; ++d) {
    plane *= x.size(lead_dims + d);
    cells_out *= positions[static_cast<size_t>(d)].size(1);
    planar.push_back(x.size(lead_dims + d));
    out_shape.push_back(positions[static_cast<size_t>(d)].size(1));
  }
  const Tensor flat_x = x.reshape({planes, plane});
  Tensor win;
  {
    NoGradGuard no_grad;
    Tensor v = flat_x.detach().reshape(planar), f;  // f: the flat index over the dims reduced
    int64_t inner = 1;
    for (int64_t d = spatial - 1; d >= 0; --d) {
      const Tensor& p = positions[static_cast<size_t>(d)];
      const int64_t axis = 1 + d, cells = p.size(1);
      // The k-th cells' coordinates, shaped to broadcast against v with this dim reduced.
      Shape coord_shape(static_cast<size_t>(v.dim()), 1), gathered = v.sizes();
      coord_shape[0] = p.size(0);
      coord_shape[static_cast<size_t>(axis)] = cells;
      gathered[static_cast<size_t>(axis)] = cells;
      Tensor best, best_f;
      for (int64_t k = 0; k < p.size(2); ++k) {
        const Tensor coord = p.select(2, k).reshape(coord_shape);
        Tensor vk, fk;
        if (p.size(0) == 1) {  // the same windows in every plane
          const Tensor idx = coord.reshape({-1});
          vk = index_select(v, axis, idx);
          if (f.defined()) fk = index_select(f, axis, idx);
        } else {
          const Tensor idx = coord.expand(gathered);
          vk = gather(v, axis, idx);
          if (f.defined()) fk = gather(f, axis, idx);
        }
        const Tensor candidate = f.defined() ? coord * inner + fk : (coord * inner).expand(gathered);
        if (k == 0) {
          best = vk;
          best_f = candidate;
          continue;
        }
        const Tensor take = logical_or(gt(vk, best), isnan(vk));
        best = where(take, vk, best);
        best_f = where(take, candidate, best_f);
      }
      v = best;
      f = best_f;
      inner *= x.size(lead_dims + d);
    }
    win = f.reshape({planes, cells_out});
  }
  Tensor values = gather(flat_x, 1, win).reshape(out_shape);
  Tensor indices = win.reshape(out_shape);
  if (spatial == 2 && x.dim() == 4 && is_channels_last(x)) {
    values = values.contiguous(MemoryFormat::ChannelsLast);
    indices = indices.contiguous(MemoryFormat::ChannelsLast);
  }
  return {values, indices};
}

Tensor ops::lp_from_average(const Tensor& average, double norm_type, int64_t window) {
  return pow(sign(average) * relu(abs(average)) * static_cast<double>(window), 1.0 / norm_type);
}

void ops::check_norm_type(const char* op, double norm_type) {
  if (!std::isfinite(norm_type) || norm_type == 0.0) {
    throw Error(std::string(op) + ": norm_type must be finite and nonzero, got " + num_str(norm_type));
  }
}

namespace {

void check_adaptive_max2d(const Tensor& x, Pair output_size) {
  const char* op = "adaptive_max_pool2d";
  ops::check_pool_input(op, x, 2);
  if (output_size[0] <= 0 || output_size[1] <= 0) {
    throw ShapeError(std::string(op) + ": output size must be positive, got " + pair_str(output_size) + " (input " +
                     shape_str(x.sizes()) + ")");
  }
}

}  // namespace

Tensor adaptive_max_pool2d(const Tensor& x, Pair output_size) {
  check_adaptive_max2d(x, output_size);
  const int64_t h = x.dim() - 2, w = x.dim() - 1;
  return ops::adaptive_max_along(ops::adaptive_max_along(x, h, output_size[0]), w, output_size[1]);
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, Pair output_size) {
  check_adaptive_max2d(x, output_size);
  return ops::max_over_windows(x, {ops::adaptive_cells(x.size(-2), output_size[0], x.device()).unsqueeze(0),
                                   ops::adaptive_cells(x.size(-1), output_size[1], x.device()).unsqueeze(0)});
}

Tensor lp_pool2d(const Tensor& x, double norm_type, Pair kernel_size, Pair stride, bool ceil_mode) {
  const char* op = "lp_pool2d";
  ops::check_pool_input(op, x, 2);
  ops::check_norm_type(op, norm_type);
  PoolArgs a{kernel_size, stride, {0, 0}, {1, 1}};
  pool_geometry(op, x, a, ceil_mode);  // the window's checks, in lp_pool2d's name
  return ops::lp_from_average(avg_pool2d(pow(x, norm_type), a.kernel, a.stride, {0, 0}, ceil_mode), norm_type,
                              a.kernel[0] * a.kernel[1]);
}

// --- 1-d pooling: the 2-d ops on [N, C, 1, L] views ---------------------------------------------
// The 1-d ops check in their own terms first, so that an error names the 1-d op, the caller's
// shape and the 1-d window rather than the view's; then the 2-d op pools a height of 1.

namespace {

// x [N, C, L] or [C, L], floating, with channels and length; returned as the 2-d op's input view.
Tensor pool1d_input(const char* op, const Tensor& x) {
  ops::check_pool_input(op, x, 1);
  return x.unsqueeze(-2);
}

// A 1-d window's checks; stride 0 becomes the kernel size (PyTorch's default).
void check_window1d(const char* op, const Tensor& x, int64_t kernel, int64_t& stride, int64_t padding, int64_t dilation,
                    bool ceil_mode) {
  if (stride == 0) stride = kernel;
  const std::string what = " (input " + shape_str(x.sizes()) + ", kernel " + std::to_string(kernel) + ", stride " +
                           std::to_string(stride) + ", padding " + std::to_string(padding) + ", dilation " +
                           std::to_string(dilation) + ")";
  if (kernel <= 0 || stride <= 0 || dilation <= 0) {
    throw Error(std::string(op) + ": kernel size, stride and dilation must be positive" + what);
  }
  if (padding < 0 || padding > kernel / 2) {
    throw Error(std::string(op) + ": padding must be non-negative and at most half the kernel" + what);
  }
  const std::optional<int64_t> out = pool_out_size(x.size(-1), kernel, stride, padding, dilation, ceil_mode);
  if (!out) throw ShapeError(std::string(op) + ": the output length overflows int64" + what);
  if (*out <= 0) {
    throw ShapeError(std::string(op) + ": output length " + std::to_string(*out) + " is not positive" + what);
  }
}

}  // namespace

Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation,
                  bool ceil_mode) {
  return max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).first;
}

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding,
                                                  int64_t dilation, bool ceil_mode) {
  const char* op = "max_pool1d";
  const Tensor x2 = pool1d_input(op, x);
  check_window1d(op, x, kernel_size, stride, padding, dilation, ceil_mode);
  auto [values, indices] =
      max_pool2d_with_indices(x2, {1, kernel_size}, {1, stride}, {0, padding}, {1, dilation}, ceil_mode);
  return {values.squeeze(-2), indices.squeeze(-2)};
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel_size, int64_t stride, int64_t padding,
                    std::optional<int64_t> output_size) {
  const char* op = "max_unpool1d";
  ops::check_defined(op, x, "input");
  if (x.dim() != 2 && x.dim() != 3) {
    throw ShapeError(std::string(op) + ": input must be [C, L] or [N, C, L], got " + shape_str(x.sizes()));
  }
  if (stride == 0) stride = kernel_size;
  if (kernel_size <= 0 || stride <= 0 || padding < 0) {
    throw Error(std::string(op) + ": kernel_size " + std::to_string(kernel_size) + " and stride " +
                std::to_string(stride) + " must be positive and padding " + std::to_string(padding) + " >= 0");
  }
  const int64_t size = output_size.value_or(ops::unpooled_size(x.size(-1), kernel_size, stride, padding));
  if (size <= 0) {
    throw ShapeError(std::string(op) + ": output size " + std::to_string(size) + " for input " + shape_str(x.sizes()) +
                     " must be positive");
  }
  return ops::max_unpool(op, x, indices, {size});
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode,
                  bool count_include_pad) {
  const char* op = "avg_pool1d";
  const Tensor x2 = pool1d_input(op, x);
  check_window1d(op, x, kernel_size, stride, padding, 1, ceil_mode);
  return avg_pool2d(x2, {1, kernel_size}, {1, stride}, {0, padding}, ceil_mode, count_include_pad).squeeze(-2);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  const char* op = "adaptive_avg_pool1d";
  const Tensor x2 = pool1d_input(op, x);
  if (output_size <= 0) {
    throw ShapeError(std::string(op) + ": output size must be positive, got " + std::to_string(output_size) +
                     " (input " + shape_str(x.sizes()) + ")");
  }
  return adaptive_avg_pool2d(x2, {1, output_size}).squeeze(-2);
}

namespace {

void check_adaptive_max1d(const Tensor& x, int64_t output_size) {
  const char* op = "adaptive_max_pool1d";
  pool1d_input(op, x);
  if (output_size <= 0) {
    throw ShapeError(std::string(op) + ": output size must be positive, got " + std::to_string(output_size) +
                     " (input " + shape_str(x.sizes()) + ")");
  }
}

}  // namespace

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  check_adaptive_max1d(x, output_size);
  return ops::adaptive_max_along(x, x.dim() - 1, output_size);
}

std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size) {
  check_adaptive_max1d(x, output_size);
  return ops::max_over_windows(x, {ops::adaptive_cells(x.size(-1), output_size, x.device()).unsqueeze(0)});
}

Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel_size, int64_t stride, bool ceil_mode) {
  const char* op = "lp_pool1d";
  pool1d_input(op, x);
  ops::check_norm_type(op, norm_type);
  check_window1d(op, x, kernel_size, stride, 0, 1, ceil_mode);
  return ops::lp_from_average(avg_pool1d(pow(x, norm_type), kernel_size, stride, 0, ceil_mode), norm_type, kernel_size);
}

}  // namespace kiln
