// unfold and fold through an index map: for each window element (i, j) and window (a, b), the
// flat position of (a sh + i dh, b sw + j dw) in the padded image. unfold gathers the padded image
// by it (index_select), fold adds into a zero padded image by it (index_add) and crops the padding.
#include "core/ops/fold.h"

#include <optional>
#include <string>

#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/image.h"
#include "core/ops/index.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln {
namespace {

struct Windows {
  Pair kernel, dilation, padding, stride;
  int64_t h = 0, w = 0;    // the image
  int64_t oh = 0, ow = 0;  // the windows along each dim
  int64_t padded_h() const { return h + 2 * padding[0]; }
  int64_t padded_w() const { return w + 2 * padding[1]; }
  int64_t per_window() const { return kernel[0] * kernel[1]; }
};

// The window geometry over an h x w image, checked in `op`'s name: kernel, dilation and stride
// positive, padding non-negative, and at least one window along each dim.
Windows windows_of(const char* op, int64_t h, int64_t w, Pair kernel, Pair dilation, Pair padding, Pair stride,
                   const std::string& where) {
  const std::string args = " (kernel_size " + ops::pair_str(kernel) + ", dilation " + ops::pair_str(dilation) +
                           ", padding " + ops::pair_str(padding) + ", stride " + ops::pair_str(stride) + where + ")";
  for (int k = 0; k < 2; ++k) {
    if (kernel[k] <= 0 || dilation[k] <= 0 || stride[k] <= 0) {
      throw Error(std::string(op) + ": kernel_size, dilation and stride must be positive" + args);
    }
    if (padding[k] < 0) throw Error(std::string(op) + ": padding must be non-negative" + args);
  }
  Windows g{kernel, dilation, padding, stride, h, w, 0, 0};
  const std::optional<int64_t> oh = ops::window_out_size(h, kernel[0], stride[0], padding[0], dilation[0]);
  const std::optional<int64_t> ow = ops::window_out_size(w, kernel[1], stride[1], padding[1], dilation[1]);
  if (!oh || !ow) throw ShapeError(std::string(op) + ": the number of windows overflows int64" + args);
  if (*oh <= 0 || *ow <= 0) {
    throw ShapeError(std::string(op) + ": the windows do not fit: " + std::to_string(*oh) + "x" + std::to_string(*ow) +
                     " of them" + args);
  }
  g.oh = *oh;
  g.ow = *ow;
  return g;
}

// The flat padded-image position of every (window element, window) pair, element-major:
// [kh * kw * oh * ow] int64 on `device`, made there from aranges (nothing is copied from the host,
// so CUDA graphs can capture it).
Tensor window_index(const Windows& g, Device device) {
  const TensorOptions options(DType::Int64, device);
  auto steps = [&](int64_t count, int64_t step, int64_t at) {
    Shape shape{1, 1, 1, 1};
    shape[static_cast<size_t>(at)] = count;
    return (arange(0, count, 1, options) * step).reshape(shape);
  };
  const Tensor rows = steps(g.kernel[0], g.dilation[0], 0) + steps(g.oh, g.stride[0], 2);
  const Tensor cols = steps(g.kernel[1], g.dilation[1], 1) + steps(g.ow, g.stride[1], 3);
  return (rows * g.padded_w() + cols).reshape({-1});
}

}  // namespace

Tensor unfold(const Tensor& input, Pair kernel_size, Pair dilation, Pair padding, Pair stride) {
  const char* op = "unfold";
  ops::check_defined(op, input, "input");
  if (input.dim() != 3 && input.dim() != 4) {
    throw ShapeError(std::string(op) + ": input must be [N, C, H, W] or [C, H, W], got shape " +
                     shape_str(input.sizes()));
  }
  const Tensor x = input.dim() == 3 ? input.unsqueeze(0) : input;
  const int64_t n = x.size(0), c = x.size(1);
  const Windows g = windows_of(op, x.size(2), x.size(3), kernel_size, dilation, padding, stride,
                               ", input " + shape_str(input.sizes()));
  const Tensor padded = pad(x, {padding[1], padding[1], padding[0], padding[0]});
  const Tensor cols = index_select(padded.reshape({n, c, g.padded_h() * g.padded_w()}), 2, window_index(g, x.device()))
                          .reshape({n, c * g.per_window(), g.oh * g.ow});
  return input.dim() == 3 ? cols.squeeze(0) : cols;
}

Tensor fold(const Tensor& input, Pair output_size, Pair kernel_size, Pair dilation, Pair padding, Pair stride) {
  const char* op = "fold";
  ops::check_defined(op, input, "input");
  if (input.dim() != 2 && input.dim() != 3) {
    throw ShapeError(std::string(op) + ": input must be [N, C * kh * kw, L] or [C * kh * kw, L], got shape " +
                     shape_str(input.sizes()));
  }
  if (output_size[0] <= 0 || output_size[1] <= 0) {
    throw ShapeError(std::string(op) + ": output_size must be positive, got " + ops::pair_str(output_size) +
                     " (input " + shape_str(input.sizes()) + ")");
  }
  const Tensor cols = input.dim() == 2 ? input.unsqueeze(0) : input;
  const std::string where = ", output_size " + ops::pair_str(output_size) + ", input " + shape_str(input.sizes());
  const Windows g = windows_of(op, output_size[0], output_size[1], kernel_size, dilation, padding, stride, where);
  const int64_t n = cols.size(0), rows = cols.size(1);
  if (rows % g.per_window() != 0) {
    throw ShapeError(std::string(op) + ": the input's " + std::to_string(rows) + " rows are not channels times the " +
                     std::to_string(g.per_window()) + " elements of a window" + where);
  }
  if (cols.size(2) != g.oh * g.ow) {
    throw ShapeError(std::string(op) + ": the input holds " + std::to_string(cols.size(2)) + " windows, the geometry " +
                     std::to_string(g.oh) + "x" + std::to_string(g.ow) + " = " + std::to_string(g.oh * g.ow) + where);
  }
  const int64_t c = rows / g.per_window();
  const Tensor image = zeros({n, c, g.padded_h() * g.padded_w()}, TensorOptions(cols.dtype(), cols.device()));
  const Tensor summed =
      index_add(image, 2, window_index(g, cols.device()), cols.reshape({n, c, g.per_window() * g.oh * g.ow}))
          .reshape({n, c, g.padded_h(), g.padded_w()})
          .narrow(2, padding[0], g.h)
          .narrow(3, padding[1], g.w);
  return input.dim() == 2 ? summed.squeeze(0) : summed;
}

}  // namespace kiln
