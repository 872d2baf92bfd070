// Op table rows of grid_sample and affine_grid: every mode with every padding, both corner
// conventions, grids that reach past the image (so Zeros reads outside, Border clamps and
// Reflection folds, more than once for the points furthest out), against float64 loops over
// PyTorch's definitions.
#include <cmath>
#include <utility>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

const char* mode_name(GridSampleMode m) {
  return m == GridSampleMode::Bilinear ? "bilinear" : m == GridSampleMode::Nearest ? "nearest" : "bicubic";
}
const char* padding_name(GridPadding p) {
  return p == GridPadding::Zeros ? "zeros" : p == GridPadding::Border ? "border" : "reflection";
}

double unnormalize(double c, int64_t size, bool align) {
  return align ? (c + 1) / 2 * static_cast<double>(size - 1) : ((c + 1) * static_cast<double>(size) - 1) / 2;
}

// PyTorch's reflect_coordinates and clip_coordinates, as loops.
double place(double c, int64_t size, GridPadding padding, bool align) {
  if (padding == GridPadding::Zeros) return c;
  const auto n = static_cast<double>(size);
  if (padding == GridPadding::Reflection) {
    const double lo2 = align ? 0 : -1, hi2 = align ? 2 * (n - 1) : 2 * n - 1;
    if (lo2 == hi2) {
      c = 0;
    } else {
      const double lo = lo2 / 2, span = (hi2 - lo2) / 2;
      const double in = std::abs(c - lo);
      const double extra = std::fmod(in, span);
      const auto flips = static_cast<int64_t>(std::floor(in / span));
      c = flips % 2 == 0 ? extra + lo : span - extra + lo;
    }
  }
  return std::min(std::max(c, 0.0), n - 1);
}

double cubic(double s) {
  const double a = -0.75;
  s = std::abs(s);
  if (s <= 1) return ((a + 2) * s - (a + 3)) * s * s + 1;
  if (s < 2) return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
  return 0;
}

Tensor ref_grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode, GridPadding padding, bool align) {
  const Values iv = values(input), gv = values(grid);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t ho = grid.size(1), wo = grid.size(2);
  Values out;
  const auto at_pixel = [&](int64_t b, int64_t ch, int64_t x, int64_t y) {
    if (x < 0 || x >= w || y < 0 || y >= h) return 0.0;
    return iv[at(((b * c + ch) * h + y) * w + x)];
  };
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < ho * wo; ++p) {
        const double gx = gv[at((b * ho * wo + p) * 2)], gy = gv[at((b * ho * wo + p) * 2 + 1)];
        const double ux = unnormalize(gx, w, align), uy = unnormalize(gy, h, align);
        double v = 0;
        if (mode == GridSampleMode::Bicubic) {
          const double x0 = std::floor(ux), y0 = std::floor(uy);
          for (int j = -1; j <= 2; ++j) {
            for (int i = -1; i <= 2; ++i) {
              const auto xi = static_cast<int64_t>(place(x0 + i, w, padding, align));
              const auto yi = static_cast<int64_t>(place(y0 + j, h, padding, align));
              v += cubic(ux - (x0 + i)) * cubic(uy - (y0 + j)) * at_pixel(b, ch, xi, yi);
            }
          }
        } else {
          const double ix = place(ux, w, padding, align), iy = place(uy, h, padding, align);
          if (mode == GridSampleMode::Nearest) {
            v = at_pixel(b, ch, static_cast<int64_t>(std::nearbyint(ix)), static_cast<int64_t>(std::nearbyint(iy)));
          } else {
            const double x0 = std::floor(ix), y0 = std::floor(iy), fx = ix - x0, fy = iy - y0;
            const auto xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
            v = at_pixel(b, ch, xi, yi) * (1 - fx) * (1 - fy) + at_pixel(b, ch, xi + 1, yi) * fx * (1 - fy) +
                at_pixel(b, ch, xi, yi + 1) * (1 - fx) * fy + at_pixel(b, ch, xi + 1, yi + 1) * fx * fy;
          }
        }
        out.push_back(v);
      }
    }
  }
  return from_values(out, {n, c, ho, wo});
}

// Grid points uniform in [-1.6, 1.6] from a small LCG: a fifth of them outside [-1, 1] in each
// coordinate, some past a second fold of Reflection's (beyond 1 + 2 / size).
Tensor grid_points(const Shape& shape, uint64_t seed, DType t, Device d) {
  Values v(at(shape_numel(shape)));
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = -1.6 + 3.2 * static_cast<double>(s >> 11) / 9007199254740992.0;
  }
  return from_values(v, shape).to(t).to(d);
}

}  // namespace

void add_grid_sample_rows(std::vector<OpRow>& rows) {
  for (const GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Nearest, GridSampleMode::Bicubic}) {
    for (const GridPadding padding : {GridPadding::Zeros, GridPadding::Border, GridPadding::Reflection}) {
      for (const bool align : {false, true}) {
        OpRow r;
        r.name = std::string("grid_sample ") + mode_name(mode) + " " + padding_name(padding) +
                 (align ? " align_corners" : "");
        r.dtypes = kFloatTypes;
        r.samples = {
            {"2x3x5x6 at 2x4x3",
             [](DType t, Device d) {
               return TensorList{rnd({2, 3, 5, 6}, t, d, 3200), grid_points({2, 4, 3, 2}, 3201, t, d)};
             }},
            {"non-contiguous 1x2x4x3 at 1x5x2",
             [](DType t, Device d) {
               return TensorList{noncontig(rnd({1, 2, 4, 3}, t, d, 3202)), grid_points({1, 5, 2, 2}, 3203, t, d)};
             }},
            {"1x1x1x4 (one row) at 1x3x3",
             [](DType t, Device d) {
               return TensorList{rnd({1, 1, 1, 4}, t, d, 3204), grid_points({1, 3, 3, 2}, 3205, t, d)};
             }},
        };
        r.op = [=](const TensorList& x) { return TensorList{grid_sample(x[0], x[1], mode, padding, align)}; };
        r.reference = [=](const TensorList& x) {
          return TensorList{ref_grid_sample(x[0], x[1], mode, padding, align)};
        };
        // Nearest is piecewise constant in the grid: its gradient is the input's only.
        r.differentiable = mode == GridSampleMode::Nearest ? std::vector<size_t>{0} : std::vector<size_t>{0, 1};
        r.out_dtype = same_dtype;
        r.errors = {
            {"a 3-d input",
             [=] {
               grid_sample(zeros({3, 4, 5}), zeros({3, 2, 2, 2}), mode, padding, align);
             },
             {"grid_sample", "[3, 4, 5]", "[N, C, H, W]"}},
            {"a grid of another batch",
             [=] {
               grid_sample(zeros({2, 1, 4, 5}), zeros({3, 2, 2, 2}), mode, padding, align);
             },
             {"grid_sample", "[2, 1, 4, 5]", "[3, 2, 2, 2]"}},
            {"a grid of three coordinates",
             [=] {
               grid_sample(zeros({2, 1, 4, 5}), zeros({2, 2, 2, 3}), mode, padding, align);
             },
             {"grid_sample", "[2, 2, 2, 3]"}},
            {"a grid of another dtype",
             [=] {
               grid_sample(zeros({2, 1, 4, 5}), zeros({2, 2, 2, 2}, DType::Float64), mode, padding, align);
             },
             {"grid_sample", "float32", "float64"}},
        };
        rows.push_back(std::move(r));
      }
    }
  }
  for (const bool align : {false, true}) {
    OpRow r;
    r.name = std::string("affine_grid") + (align ? " align_corners" : "");
    r.dtypes = kFloatTypes;
    r.samples = {{"theta 2x2x3, size 2x3x4x5",
                  [](DType t, Device d) {
                    return TensorList{rnd({2, 2, 3}, t, d, 3210)};
                  }},
                 {"non-contiguous theta 1x2x3, size 1x1x1x3", [](DType t, Device d) {
                    return TensorList{noncontig(rnd({1, 2, 3}, t, d, 3211))};
                  }}};
    const auto size_of = [](const Tensor& theta) { return theta.size(0) == 2 ? Shape{2, 3, 4, 5} : Shape{1, 1, 1, 3}; };
    r.op = [=](const TensorList& x) { return TensorList{affine_grid(x[0], size_of(x[0]), align)}; };
    r.reference = [=](const TensorList& x) {
      const Shape size = size_of(x[0]);
      const int64_t n = size[0], h = size[2], w = size[3];
      const Values th = values(x[0]);
      // The normalized coordinate of pixel k of `steps`: PyTorch's linspace, scaled without
      // align_corners.
      const auto coord = [align](int64_t k, int64_t steps) {
        if (steps == 1) return 0.0;
        const double v = -1.0 + 2.0 * static_cast<double>(k) / static_cast<double>(steps - 1);
        return align ? v : v * static_cast<double>(steps - 1) / static_cast<double>(steps);
      };
      Values out;
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t y = 0; y < h; ++y) {
          for (int64_t xw = 0; xw < w; ++xw) {
            for (int64_t row = 0; row < 2; ++row) {
              const double* m = &th[at(b * 6 + row * 3)];
              out.push_back(m[0] * coord(xw, w) + m[1] * coord(y, h) + m[2]);
            }
          }
        }
      }
      return TensorList{from_values(out, {n, h, w, 2})};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"theta of 3x3 matrices",
         [] {
           affine_grid(zeros({2, 3, 3}), {2, 1, 4, 4});
         },
         {"affine_grid", "[2, 3, 3]"}},
        {"theta of another batch",
         [] {
           affine_grid(zeros({2, 2, 3}), {3, 1, 4, 4});
         },
         {"affine_grid", "[2, 2, 3]", "[3, 1, 4, 4]"}},
        {"a 5-d size",
         [] {
           affine_grid(zeros({2, 2, 3}), {2, 1, 4, 4, 4});
         },
         {"affine_grid", "[2, 1, 4, 4, 4]"}},
        {"integer theta",
         [] {
           affine_grid(zeros({2, 2, 3}, DType::Int64), {2, 1, 4, 4});
         },
         {"affine_grid", "int64"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
