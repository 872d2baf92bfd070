// grid_sample and affine_grid, composed. A grid point (x, y) becomes pixel coordinates (ix, iy)
// (unnormalized for align_corners, then clamped or reflected for Border and Reflection, all
// differentiable ops), and the output is a weighted sum of taps gathered from the input, read as
// [N, C, H * W]: one tap for Nearest, four for Bilinear, sixteen for Bicubic. The taps' integer
// positions are computed off the tape (floor and round have no gradient); their weights are
// functions of the fractional parts, so the grid's gradient flows through them, and the input's
// through gather's backward (a scatter_add into the tapped pixels). Taps outside the image read 0.
#include "core/ops/grid_sample.h"

#include <optional>
#include <string>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/matmul.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln {
namespace {

constexpr const char* kSample = "grid_sample";

// A normalized coordinate in [-1, 1] as a pixel coordinate along a dim of `size`.
Tensor unnormalize(const Tensor& c, int64_t size, bool align_corners) {
  const auto n = static_cast<double>(size);
  return align_corners ? mul(add(c, 1.0), (n - 1) / 2) : div(sub(mul(add(c, 1.0), n), 1.0), 2.0);
}

// c mirrored into [twice_low / 2, twice_high / 2] as many times as it takes (PyTorch's
// reflect_coordinates): the distance from the low end, folded by the span, flipped on odd folds.
Tensor reflect(const Tensor& c, double twice_low, double twice_high) {
  if (twice_low == twice_high) return zeros_like(c);
  const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  const Tensor in = abs(sub(c, low));
  const Tensor extra = fmod(in, span);
  Tensor even;
  {
    NoGradGuard no_grad;
    even = eq(fmod(floor(div(in.detach(), span)), 2.0), 0.0);
  }
  return where(even, add(extra, low), sub(span + low, extra));
}

// A pixel coordinate as the padding mode places it: unchanged (Zeros), clamped into [0, size - 1]
// (Border), or reflected about the image's edges and clamped (Reflection).
Tensor pad_coordinate(const Tensor& c, int64_t size, GridPadding padding, bool align_corners) {
  if (padding == GridPadding::Zeros) return c;
  const auto n = static_cast<double>(size);
  Tensor placed = c;
  if (padding == GridPadding::Reflection) {
    placed = align_corners ? reflect(c, 0, 2 * (n - 1)) : reflect(c, -1, 2 * n - 1);
  }
  return clamp(placed, Scalar(0.0), Scalar(n - 1));
}

// The image read as [N, C, H * W] and what tapping it needs.
struct Image {
  Tensor flat;
  int64_t n, c, h, w;
};

// The input's values at integer pixel coordinates (xi, yi) (float tensors [N, P] holding integers,
// off the tape): [N, C, P], zero where a coordinate is outside the image.
Tensor tap(const Image& im, const Tensor& xi, const Tensor& yi) {
  Tensor inside, position;
  {
    NoGradGuard no_grad;
    inside = logical_and(logical_and(ge(xi, 0.0), le(xi, static_cast<double>(im.w - 1))),
                         logical_and(ge(yi, 0.0), le(yi, static_cast<double>(im.h - 1))));
    // In int64: a float32 product would round past 2^24 pixels.
    position = add(mul(where(inside, yi, 0.0).to(DType::Int64), im.w), where(inside, xi, 0.0).to(DType::Int64));
  }
  const int64_t p = xi.size(1);
  const Tensor values = gather(im.flat, 2, position.unsqueeze(1).expand({im.n, im.c, p}));
  return where(inside.unsqueeze(1), values, 0.0);
}

// Keys' cubic convolution weights (A = -0.75) of the four taps at -1, 0, 1, 2 from the floor for a
// fractional part t.
TensorList cubic_weights(const Tensor& t) {
  constexpr double a = -0.75;
  // |s| <= 1: (a + 2) s^3 - (a + 3) s^2 + 1;  1 < |s| < 2: a s^3 - 5a s^2 + 8a s - 4a.
  const auto near = [&](const Tensor& s) { return add(mul(mul(sub(mul(s, a + 2), a + 3), s), s), 1.0); };
  const auto far = [&](const Tensor& s) { return sub(mul(add(mul(sub(mul(s, a), 5 * a), s), 8 * a), s), 4 * a); };
  const Tensor u = sub(1.0, t);
  return {far(add(t, 1.0)), near(t), near(u), far(add(u, 1.0))};
}

Tensor sample(const Image& im, const Tensor& gx, const Tensor& gy, GridSampleMode mode, GridPadding padding,
              bool align_corners) {
  const Tensor ux = unnormalize(gx, im.w, align_corners), uy = unnormalize(gy, im.h, align_corners);
  if (mode == GridSampleMode::Bicubic) {
    // Sixteen taps around the floor of the unpadded coordinate; the padding mode places each tap.
    Tensor x0, y0;
    {
      NoGradGuard no_grad;
      x0 = floor(ux.detach()), y0 = floor(uy.detach());
    }
    const TensorList wx = cubic_weights(sub(ux, x0)), wy = cubic_weights(sub(uy, y0));
    Tensor out;
    for (int j = 0; j < 4; ++j) {
      Tensor row;
      for (int i = 0; i < 4; ++i) {
        Tensor xi, yi;
        {
          NoGradGuard no_grad;
          xi = pad_coordinate(add(x0, i - 1.0), im.w, padding, align_corners);
          yi = pad_coordinate(add(y0, j - 1.0), im.h, padding, align_corners);
        }
        const Tensor term = mul(tap(im, xi, yi), wx[static_cast<size_t>(i)].unsqueeze(1));
        row = row.defined() ? add(row, term) : term;
      }
      const Tensor term = mul(row, wy[static_cast<size_t>(j)].unsqueeze(1));
      out = out.defined() ? add(out, term) : term;
    }
    return out;
  }
  const Tensor ix = pad_coordinate(ux, im.w, padding, align_corners);
  const Tensor iy = pad_coordinate(uy, im.h, padding, align_corners);
  if (mode == GridSampleMode::Nearest) {
    Tensor xi, yi;  // piecewise constant in the grid: only the input's gradient (gather's)
    {
      NoGradGuard no_grad;
      xi = round(ix.detach()), yi = round(iy.detach());
    }
    return tap(im, xi, yi);
  }
  Tensor x0, y0;
  {
    NoGradGuard no_grad;
    x0 = floor(ix.detach()), y0 = floor(iy.detach());
  }
  // Bilinear: the four neighbours, each weighted by the area of the opposite sub-rectangle.
  const Tensor fx = sub(ix, x0), fy = sub(iy, y0);
  const Tensor gx0 = sub(1.0, fx), gy0 = sub(1.0, fy);
  const Tensor x1 = add(x0, 1.0), y1 = add(y0, 1.0);
  Tensor out = mul(tap(im, x0, y0), mul(gx0, gy0).unsqueeze(1));
  out = add(out, mul(tap(im, x1, y0), mul(fx, gy0).unsqueeze(1)));
  out = add(out, mul(tap(im, x0, y1), mul(gx0, fy).unsqueeze(1)));
  return add(out, mul(tap(im, x1, y1), mul(fx, fy).unsqueeze(1)));
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode, GridPadding padding,
                   bool align_corners) {
  if (std::optional<TensorList> c = autocast::cast_inputs(kSample, {&input, &grid})) {
    return grid_sample((*c)[0], (*c)[1], mode, padding, align_corners);
  }
  ops::check_defined(kSample, input, "input");
  ops::check_defined(kSample, grid, "grid");
  if (input.dim() != 4) {
    throw ShapeError(std::string(kSample) + ": input must be [N, C, H, W], got " + shape_str(input.sizes()) +
                     " (5-d volumes are not supported)");
  }
  if (grid.dim() != 4 || grid.size(3) != 2 || grid.size(0) != input.size(0)) {
    throw ShapeError(std::string(kSample) + ": grid must be [N, Ho, Wo, 2] with input's N; input " +
                     shape_str(input.sizes()) + ", grid " + shape_str(grid.sizes()));
  }
  if (!is_floating(input.dtype()) || grid.dtype() != input.dtype()) {
    throw DTypeError(std::string(kSample) + ": input and grid must share one floating dtype, got " +
                     dtype_name(input.dtype()) + " and " + dtype_name(grid.dtype()));
  }
  ops::common_device(kSample, {&input, &grid});
  if (input.size(2) == 0 || input.size(3) == 0) {
    throw ShapeError(std::string(kSample) + ": the input image is empty: " + shape_str(input.sizes()));
  }
  const DType compute = ops::widened_dtype(input.dtype());
  const int64_t n = input.size(0), c = input.size(1), ho = grid.size(1), wo = grid.size(2);
  const Image im{input.to(compute).reshape({n, c, input.size(2) * input.size(3)}), n, c, input.size(2), input.size(3)};
  const Tensor g = grid.to(compute).reshape({n, ho * wo, 2});
  const Tensor gx = g.select(2, 0), gy = g.select(2, 1);
  const Tensor out = sample(im, gx, gy, mode, padding, align_corners).reshape({n, c, ho, wo});
  return out.to(input.dtype());
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  const char* op = "affine_grid";
  ops::check_defined(op, theta, "theta");
  if (size.size() != 4) {
    throw ShapeError(std::string(op) + ": size must be [N, C, H, W], got " + shape_str(size) +
                     " (5-d volumes are not supported)");
  }
  if (theta.dim() != 3 || theta.size(1) != 2 || theta.size(2) != 3 || theta.size(0) != size[0]) {
    throw ShapeError(std::string(op) + ": theta must be [N, 2, 3] with size's N; theta " + shape_str(theta.sizes()) +
                     ", size " + shape_str(size));
  }
  if (!is_floating(theta.dtype())) {
    throw DTypeError(std::string(op) + ": theta must be floating, got " + dtype_name(theta.dtype()));
  }
  const int64_t n = size[0], h = size[2], w = size[3];
  if (h <= 0 || w <= 0) throw ShapeError(std::string(op) + ": size must be positive, got " + shape_str(size));
  const TensorOptions opts(theta.dtype(), theta.device());
  // The normalized coordinates of the output's pixels along a dim of `steps`: the corner pixels'
  // centres at -1 and 1 with align_corners, else pulled in by half a pixel.
  const auto axis = [&](int64_t steps) {
    if (steps == 1) return zeros({1}, opts);
    const Tensor t = linspace(-1.0, 1.0, steps, opts);
    return align_corners ? t : mul(t, static_cast<double>(steps - 1) / static_cast<double>(steps));
  };
  const Tensor xs = axis(w).reshape({1, w}).expand({h, w}), ys = axis(h).reshape({h, 1}).expand({h, w});
  const Tensor base = stack({xs, ys, ones({h, w}, opts)}, 2).reshape({1, h * w, 3}).expand({n, h * w, 3});
  return matmul(base, theta.transpose(1, 2)).reshape({n, h, w, 2});
}

}  // namespace kiln
