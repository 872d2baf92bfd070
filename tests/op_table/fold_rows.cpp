// Op table rows of core/ops/fold.h: unfold and fold with every geometry argument away from its
// default (kernel, dilation, padding, stride unequal along the two dims), unbatched inputs, and
// windows that overlap (fold sums them) or leave gaps; against float64 loops over the windows.
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

struct Geometry {
  Pair kernel, dilation, padding, stride;
  int64_t oh(int64_t h) const { return (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) / stride[0] + 1; }
  int64_t ow(int64_t w) const { return (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) / stride[1] + 1; }
};

// Calls fn(n, c, i, j, a, b, y, x) for every window element: image position (y, x) (possibly in
// the padding) of element (i, j) of window (a, b).
template <typename Fn>
void each_window_element(int64_t n, int64_t c, int64_t h, int64_t w, const Geometry& g, Fn fn) {
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < g.kernel[0]; ++i)
        for (int64_t j = 0; j < g.kernel[1]; ++j)
          for (int64_t a = 0; a < g.oh(h); ++a)
            for (int64_t b = 0; b < g.ow(w); ++b) {
              const int64_t y = a * g.stride[0] - g.padding[0] + i * g.dilation[0];
              const int64_t x = b * g.stride[1] - g.padding[1] + j * g.dilation[1];
              fn(s, ch, i, j, a, b, y, x);
            }
}

// The flat position of column (s, ch, i, j, a, b) in the [N, C * kh * kw, L] unfold result.
int64_t column_at(int64_t s, int64_t ch, int64_t i, int64_t j, int64_t a, int64_t b, int64_t c, const Geometry& g,
                  int64_t oh, int64_t ow) {
  const int64_t row = (ch * g.kernel[0] + i) * g.kernel[1] + j;
  return (s * c * g.kernel[0] * g.kernel[1] + row) * oh * ow + a * ow + b;
}

Tensor ref_unfold(const Tensor& input, const Geometry& g) {
  const Tensor x4 = input.dim() == 3 ? input.unsqueeze(0) : input;
  const int64_t n = x4.size(0), c = x4.size(1), h = x4.size(2), w = x4.size(3);
  const Values v = values(x4);
  const int64_t oh = g.oh(h), ow = g.ow(w), k = g.kernel[0] * g.kernel[1];
  Values out(at(n * c * k * oh * ow), 0.0);
  each_window_element(n, c, h, w, g,
                      [&](int64_t s, int64_t ch, int64_t i, int64_t j, int64_t a, int64_t b, int64_t y, int64_t xx) {
                        if (y >= 0 && y < h && xx >= 0 && xx < w) {
                          out[at(column_at(s, ch, i, j, a, b, c, g, oh, ow))] = v[at(((s * c + ch) * h + y) * w + xx)];
                        }
                      });
  Shape shape{n, c * k, oh * ow};
  if (input.dim() == 3) shape.erase(shape.begin());
  return from_values(out, shape);
}

Tensor ref_fold(const Tensor& input, Pair size, const Geometry& g) {
  const Tensor cols = input.dim() == 2 ? input.unsqueeze(0) : input;
  const int64_t k = g.kernel[0] * g.kernel[1], n = cols.size(0), c = cols.size(1) / k, h = size[0], w = size[1];
  const Values v = values(cols);
  const int64_t oh = g.oh(h), ow = g.ow(w);
  Values out(at(n * c * h * w), 0.0);
  each_window_element(n, c, h, w, g,
                      [&](int64_t s, int64_t ch, int64_t i, int64_t j, int64_t a, int64_t b, int64_t y, int64_t xx) {
                        if (y >= 0 && y < h && xx >= 0 && xx < w) {
                          out[at(((s * c + ch) * h + y) * w + xx)] += v[at(column_at(s, ch, i, j, a, b, c, g, oh, ow))];
                        }
                      });
  Shape shape{n, c, h, w};
  if (input.dim() == 2) shape.erase(shape.begin());
  return from_values(out, shape);
}

OpRow unfold_row(const std::string& name, const Shape& shape, const Geometry& g, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed)}; }},
               {"non-contiguous " + shape_str(shape),
                [=](DType t, Device d) { return TensorList{noncontig(rnd(shape, t, d, seed + 1))}; }}};
  r.op = [g](const TensorList& x) { return TensorList{unfold(x[0], g.kernel, g.dilation, g.padding, g.stride)}; };
  r.reference = [g](const TensorList& x) { return TensorList{ref_unfold(x[0], g)}; };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  return r;
}

OpRow fold_row(const std::string& name, int64_t n, int64_t c, Pair size, const Geometry& g, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  Shape shape{c * g.kernel[0] * g.kernel[1], g.oh(size[0]) * g.ow(size[1])};
  if (n > 0) shape.insert(shape.begin(), n);
  r.samples = {{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed)}; }}};
  r.op = [g, size](const TensorList& x) {
    return TensorList{fold(x[0], size, g.kernel, g.dilation, g.padding, g.stride)};
  };
  r.reference = [g, size](const TensorList& x) { return TensorList{ref_fold(x[0], size, g)}; };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  return r;
}

}  // namespace

void add_fold_rows(std::vector<OpRow>& rows) {
  const Geometry every{{2, 3}, {1, 2}, {1, 0}, {2, 1}};
  rows.push_back(unfold_row("unfold kernel 2x3, dilation 1x2, padding 1x0, stride 2x1", {2, 3, 5, 7}, every, 701));
  rows.back().errors = {
      {"a 2-d input",
       [] {
         unfold(zeros({4, 4}), {2, 2});
       },
       {"unfold", "[N, C, H, W]", "[4, 4]"}},
      {"a kernel larger than the padded image",
       [] {
         unfold(zeros({1, 2, 3, 3}), {4, 2});
       },
       {"unfold", "do not fit", "[1, 2, 3, 3]"}},
      {"zero stride",
       [] {
         unfold(zeros({1, 2, 4, 4}), {2, 2}, {1, 1}, {0, 0}, {0, 1});
       },
       {"unfold", "stride", "positive"}},
      {"negative padding",
       [] {
         unfold(zeros({1, 2, 4, 4}), {2, 2}, {1, 1}, {-1, 0});
       },
       {"unfold", "padding", "non-negative"}},
  };
  rows.push_back(
      unfold_row("unfold overlapping 2x2 windows, unbatched", {3, 4, 4}, {{2, 2}, {1, 1}, {0, 0}, {1, 1}}, 711));
  rows.push_back(fold_row("fold kernel 2x3, dilation 1x2, padding 1x0, stride 2x1", 2, 3, {5, 7}, every, 721));
  rows.back().errors = {
      {"rows that are not channels times the window",
       [] {
         fold(zeros({1, 5, 9}), {4, 4}, {2, 2});
       },
       {"fold", "5 rows", "4 elements"}},
      {"another number of windows",
       [] {
         fold(zeros({1, 8, 8}), {4, 4}, {2, 2});
       },
       {"fold", "8 windows", "3x3 = 9"}},
      {"zero output_size",
       [] {
         fold(zeros({1, 4, 9}), {0, 4}, {2, 2});
       },
       {"fold", "output_size", "0x4"}},
  };
  rows.push_back(fold_row("fold overlapping 3x3 windows, padding 1, unbatched", 0, 2, {4, 5},
                          {{3, 3}, {1, 1}, {1, 1}, {1, 1}}, 731));
}

}  // namespace kiln::test
