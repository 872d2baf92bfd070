// Op table rows of the volume family: conv3d and conv_transpose3d with and without bias, over
// strides, padding, output padding, dilation and groups, and the 3-d pools (max with its indices,
// max_unpool3d, average, adaptive average and maximum with its indices, LP, fractional maximum
// with its indices) on 4-d and 5-d inputs.
// Hyper-parameters travel with each sample as a trailing int64 tensor. The references are direct
// loops in float64 over each volume's windows: nothing in them is separable or goes through a 2-d
// op, so they check the composition volume.cpp makes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Triple tr(const std::vector<int64_t>& q, size_t i) { return {q[i], q[i + 1], q[i + 2]}; }

// x as [N, C, D, H, W] (a 4-d volume as a batch of one), and back.
Tensor batched5(const Tensor& x) { return x.dim() == 4 ? x.unsqueeze(0) : x; }
Tensor like_input(const Tensor& y, const Tensor& x) { return x.dim() == 4 ? y.squeeze(0) : y; }

// --- convolution ---------------------------------------------------------------------------------

// Params: stride d, h, w, padding d, h, w, dilation d, h, w, groups. The definition: each output
// sums the weighted taps of its window over its group's channels.
Tensor ref_conv3d(const Tensor& x_in, const Tensor& w, const Tensor& b, const std::vector<int64_t>& p) {
  const Tensor x = batched5(x_in);
  const Shape xs = x.sizes(), ws = w.sizes();
  const int64_t n_ = xs[0], co_ = ws[0], cg = ws[1], groups = p[9], cog = co_ / groups;
  int64_t o[3];
  for (size_t i = 0; i < 3; ++i) o[i] = (xs[i + 2] + 2 * p[3 + i] - p[6 + i] * (ws[i + 2] - 1) - 1) / p[i] + 1;
  const Values xv = values(x), wv = values(w), bv = b.defined() ? values(b) : Values();
  Values out;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t co = 0; co < co_; ++co)
      for (int64_t a = 0; a < o[0]; ++a)
        for (int64_t bb = 0; bb < o[1]; ++bb)
          for (int64_t c = 0; c < o[2]; ++c) {
            double acc = bv.empty() ? 0.0 : bv[at(co)];
            const int64_t g = co / cog;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t i = 0; i < ws[2]; ++i)
                for (int64_t j = 0; j < ws[3]; ++j)
                  for (int64_t k = 0; k < ws[4]; ++k) {
                    const int64_t z = a * p[0] - p[3] + i * p[6], y = bb * p[1] - p[4] + j * p[7],
                                  xx = c * p[2] - p[5] + k * p[8];
                    if (z < 0 || z >= xs[2] || y < 0 || y >= xs[3] || xx < 0 || xx >= xs[4]) continue;
                    acc += xv[at(ravel({n, g * cg + ci, z, y, xx}, xs))] * wv[at(ravel({co, ci, i, j, k}, ws))];
                  }
            out.push_back(acc);
          }
  return like_input(from_values(out, {n_, co_, o[0], o[1], o[2]}), x_in);
}

// Transposed params: stride d, h, w, padding d, h, w, output_padding d, h, w, dilation d, h, w,
// groups. The definition: every input element scatters its weighted taps into the output, then the
// padding crops the borders.
Tensor ref_conv_transpose3d(const Tensor& x_in, const Tensor& w, const Tensor& b, const std::vector<int64_t>& p) {
  const Tensor x = batched5(x_in);
  const Shape xs = x.sizes(), ws = w.sizes();
  const int64_t n_ = xs[0], ci_ = xs[1], cog = ws[1], groups = p[12], cig = ci_ / groups, co_ = cog * groups;
  int64_t o[3];
  for (size_t i = 0; i < 3; ++i) {
    o[i] = (xs[i + 2] - 1) * p[i] - 2 * p[3 + i] + p[9 + i] * (ws[i + 2] - 1) + p[6 + i] + 1;
  }
  const Shape os{n_, co_, o[0], o[1], o[2]};
  const Values xv = values(x), wv = values(w), bv = b.defined() ? values(b) : Values();
  Values out(at(shape_numel(os)), 0.0);
  for (int64_t i = 0; i < shape_numel(os); ++i) out[at(i)] = bv.empty() ? 0.0 : bv[at(unravel(i, os)[1])];
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t ci = 0; ci < ci_; ++ci)
      for (int64_t a = 0; a < xs[2]; ++a)
        for (int64_t bb = 0; bb < xs[3]; ++bb)
          for (int64_t c = 0; c < xs[4]; ++c) {
            const double xval = xv[at(ravel({n, ci, a, bb, c}, xs))];
            const int64_t g = ci / cig;
            for (int64_t oc = 0; oc < cog; ++oc)
              for (int64_t i = 0; i < ws[2]; ++i)
                for (int64_t j = 0; j < ws[3]; ++j)
                  for (int64_t k = 0; k < ws[4]; ++k) {
                    const int64_t z = a * p[0] - p[3] + i * p[9], y = bb * p[1] - p[4] + j * p[10],
                                  xx = c * p[2] - p[5] + k * p[11];
                    if (z < 0 || z >= o[0] || y < 0 || y >= o[1] || xx < 0 || xx >= o[2]) continue;
                    out[at(ravel({n, g * cog + oc, z, y, xx}, os))] += xval * wv[at(ravel({ci, oc, i, j, k}, ws))];
                  }
          }
  return like_input(from_values(out, os), x_in);
}

// x of xs, weight of ws scaled by 1 / sqrt(fan_in) (fan_in: ws[fan_dim] x the kernel's volume),
// a bias of `bias_size`, then the params. (The ops without a bias: tests/core/test_volume.cpp.)
Sample conv3d_sample(const std::string& name, Shape xs, Shape ws, size_t fan_dim, int64_t bias_size,
                     std::vector<int64_t> p, uint64_t seed, bool strided = false) {
  return {name, [=](DType t, Device d) {
            Tensor x = rnd(xs, t, d, seed);
            if (strided) x = noncontig(x);
            const double fan = static_cast<double>(ws[fan_dim] * ws[2] * ws[3] * ws[4]);
            TensorList r{x, rnd(ws, t, d, seed + 1, 1.0 / std::sqrt(fan))};
            r.push_back(rnd({bias_size}, t, d, seed + 2));
            r.push_back(params(p, d));
            return r;
          }};
}

// --- pooling -------------------------------------------------------------------------------------

int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t out = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;  // span >= 0 in every sample
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Runs fn(volume values, D, H, W) -> one output volume of `out` over every volume of x.
Tensor ref_per_volume(const Tensor& x, const Triple& out,
                      const std::function<Values(const double*, int64_t, int64_t, int64_t)>& fn) {
  const int64_t d = x.size(-3), h = x.size(-2), w = x.size(-1), vol = d * h * w;
  const Values xv = values(x);
  Values r;
  for (int64_t v = 0; v < x.numel() / vol; ++v) {
    const Values o = fn(xv.data() + v * vol, d, h, w);
    r.insert(r.end(), o.begin(), o.end());
  }
  Shape s = x.sizes();
  for (size_t i = 0; i < 3; ++i) s[s.size() - 3 + i] = out[i];
  return from_values(r, s);
}

// Max params: kernel d, h, w, stride d, h, w, padding d, h, w, dilation d, h, w, ceil_mode. The
// maxima and their flat indices z * H * W + y * W + x (the first in window order on ties).
TensorList ref_max_pool3d(const Tensor& x, const std::vector<int64_t>& q) {
  Triple out;
  for (size_t i = 0; i < 3; ++i)
    out[i] = ref_out(x.size(-3 + static_cast<int64_t>(i)), q[i], q[3 + i], q[6 + i], q[9 + i], q[12] != 0);
  auto pool = [&](bool index) {
    return ref_per_volume(x, out, [&](const double* v, int64_t d, int64_t h, int64_t w) {
      Values o;
      for (int64_t a = 0; a < out[0]; ++a)
        for (int64_t b = 0; b < out[1]; ++b)
          for (int64_t c = 0; c < out[2]; ++c) {
            double best = -std::numeric_limits<double>::infinity(), where = -1;
            for (int64_t i = 0; i < q[0]; ++i)
              for (int64_t j = 0; j < q[1]; ++j)
                for (int64_t k = 0; k < q[2]; ++k) {
                  const int64_t z = a * q[3] - q[6] + i * q[9], y = b * q[4] - q[7] + j * q[10],
                                xx = c * q[5] - q[8] + k * q[11];
                  if (z < 0 || z >= d || y < 0 || y >= h || xx < 0 || xx >= w) continue;
                  const int64_t flat = (z * h + y) * w + xx;
                  if (v[flat] > best) {
                    best = v[flat];
                    where = static_cast<double>(flat);
                  }
                }
            o.push_back(index ? where : best);
          }
      return o;
    });
  };
  return {pool(false), pool(true).to(DType::Int64)};
}

// Average params: kernel d, h, w, stride d, h, w, padding d, h, w, ceil_mode, count_include_pad,
// and optionally divisor_override. The divisor counts the window's cells up to the far padding
// (with count_include_pad) or those inside the input, unless overridden.
Tensor ref_avg_pool3d(const Tensor& x, const std::vector<int64_t>& q) {
  Triple out;
  for (size_t i = 0; i < 3; ++i)
    out[i] = ref_out(x.size(-3 + static_cast<int64_t>(i)), q[i], q[3 + i], q[6 + i], 1, q[9] != 0);
  return ref_per_volume(x, out, [&](const double* v, int64_t d, int64_t h, int64_t w) {
    Values o;
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c) {
          double sum = 0;
          int64_t real = 0, padded = 0;
          for (int64_t i = 0; i < q[0]; ++i)
            for (int64_t j = 0; j < q[1]; ++j)
              for (int64_t k = 0; k < q[2]; ++k) {
                const int64_t z = a * q[3] - q[6] + i, y = b * q[4] - q[7] + j, xx = c * q[5] - q[8] + k;
                if (z >= d + q[6] || y >= h + q[7] || xx >= w + q[8]) continue;
                ++padded;
                if (z < 0 || z >= d || y < 0 || y >= h || xx < 0 || xx >= w) continue;
                sum += v[(z * h + y) * w + xx];
                ++real;
              }
          const int64_t divisor = q.size() > 11 && q[11] != 0 ? q[11] : q[10] ? padded : real;
          o.push_back(sum / static_cast<double>(divisor));
        }
    return o;
  });
}

// PyTorch's adaptive windows [floor(i n / out), ceil((i + 1) n / out)) per dim: their means, or
// their maxima and the maxima's indices.
TensorList ref_adaptive3d(const Tensor& x, const Triple& out, bool maximum) {
  if (maximum) return ref_adaptive_max(x, {out[0], out[1], out[2]});
  auto lo = [](int64_t i, int64_t n, int64_t o) { return i * n / o; };
  auto hi = [](int64_t i, int64_t n, int64_t o) { return ((i + 1) * n + o - 1) / o; };
  return {ref_per_volume(x, out, [&](const double* v, int64_t d, int64_t h, int64_t w) {
    Values o;
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c) {
          double sum = 0;
          int64_t cells = 0;
          for (int64_t z = lo(a, d, out[0]); z < hi(a, d, out[0]); ++z)
            for (int64_t y = lo(b, h, out[1]); y < hi(b, h, out[1]); ++y)
              for (int64_t xx = lo(c, w, out[2]); xx < hi(c, w, out[2]); ++xx) {
                sum += v[(z * h + y) * w + xx];
                ++cells;
              }
          o.push_back(sum / static_cast<double>(cells));
        }
    return o;
  })};
}

// LP params: norm p, kernel d, h, w, stride d, h, w, ceil_mode: (sum of v^p over the window)^(1/p),
// where in ceil mode a window hanging past the input's end has its sum scaled by the kernel's
// volume over its cells inside (PyTorch's lp_pool3d: avg_pool3d's mean times the kernel's volume).
Tensor ref_lp_pool3d(const Tensor& x, const std::vector<int64_t>& q) {
  const double p = static_cast<double>(q[0]);
  Triple out;
  for (size_t i = 0; i < 3; ++i)
    out[i] = ref_out(x.size(-3 + static_cast<int64_t>(i)), q[1 + i], q[4 + i], 0, 1, q[7] != 0);
  return ref_per_volume(x, out, [&](const double* v, int64_t d, int64_t h, int64_t w) {
    Values o;
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c) {
          double sum = 0;
          int64_t inside = 0;
          for (int64_t i = 0; i < q[1]; ++i)
            for (int64_t j = 0; j < q[2]; ++j)
              for (int64_t k = 0; k < q[3]; ++k) {
                const int64_t z = a * q[4] + i, y = b * q[5] + j, xx = c * q[6] + k;
                if (z >= d || y >= h || xx >= w) continue;
                sum += std::pow(v[(z * h + y) * w + xx], p);
                ++inside;
              }
          o.push_back(std::pow(sum * static_cast<double>(q[1] * q[2] * q[3]) / static_cast<double>(inside), 1.0 / p));
        }
    return o;
  });
}

// x of `shape` (distinct values for the maximum pools: one winner per window, and gradcheck's
// perturbations never swap winners), then the params.
Sample volume_sample(const std::string& name, Shape shape, std::vector<int64_t> q, bool distinct, uint64_t seed,
                     bool strided = false) {
  return {name, [=](DType t, Device d) {
            Tensor x = distinct ? rnd_distinct(shape, t, d, seed) : rnd(shape, t, d, seed);
            if (strided) x = noncontig(x);
            return TensorList{x, params(q, d)};
          }};
}

void add_conv3d_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "conv3d";
    r.dtypes = kFloatTypes;
    // Params: stride (3), padding (3), dilation (3), groups.
    r.samples = {
        conv3d_sample("3x3x3", {2, 3, 4, 5, 4}, {2, 3, 3, 3, 3}, 1, 2, {1, 1, 1, 0, 0, 0, 1, 1, 1, 1}, 11),
        conv3d_sample("stride 2, padding 1", {2, 2, 5, 6, 5}, {3, 2, 3, 3, 3}, 1, 3, {2, 2, 2, 1, 1, 1, 1, 1, 1, 1},
                      21),
        conv3d_sample("depth stride 2 and padding 2 only", {1, 2, 7, 4, 4}, {2, 2, 3, 1, 1}, 1, 2,
                      {2, 1, 1, 2, 0, 0, 1, 1, 1, 1}, 31),
        conv3d_sample("dilation 2x1x2, kernel 2x3x2", {1, 2, 6, 5, 6}, {2, 2, 2, 3, 2}, 1, 2,
                      {1, 1, 1, 1, 1, 0, 2, 1, 2, 1}, 41),
        conv3d_sample("groups 2, strides 1x2x1", {2, 4, 4, 6, 5}, {4, 2, 2, 3, 3}, 1, 4, {1, 2, 1, 0, 1, 1, 1, 1, 1, 2},
                      51),
        conv3d_sample("4-d input (one volume)", {3, 4, 4, 5}, {2, 3, 3, 2, 2}, 1, 2, {1, 1, 1, 1, 0, 1, 1, 1, 1, 1},
                      61),
        conv3d_sample("non-contiguous input", {2, 2, 4, 4, 5}, {3, 2, 2, 2, 2}, 1, 3, {1, 1, 1, 0, 0, 0, 1, 1, 1, 1},
                      71, true),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{conv3d(in[0], in[1], in[2], tr(p, 0), tr(p, 3), tr(p, 6), p[9])};
    };
    r.reference = [](const TensorList& in) { return TensorList{ref_conv3d(in[0], in[1], in[2], param_values(in[3]))}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    // As conv2d's rows: half inputs are summed in float32 by conv2d, one rounding at the end.
    const Tensor x = zeros({1, 2, 4, 4, 4}), w = zeros({3, 2, 3, 3, 3});
    r.errors = {
        {"input 3-d",
         [w] {
           conv3d(zeros({2, 4, 4}), w);
         },
         {"conv3d", "[2, 4, 4]", "[N, C, D, H, W]"}},
        {"weight 4-d",
         [x] {
           conv3d(x, zeros({3, 2, 3, 3}));
         },
         {"conv3d", "weight must be 5-d", "[3, 2, 3, 3]", "[1, 2, 4, 4, 4]"}},
        {"channels against the weight",
         [w] {
           conv3d(zeros({1, 3, 4, 4, 4}), w);
         },
         {"conv3d", "input has 3 channels", "2 per group", "[1, 3, 4, 4, 4]", "[3, 2, 3, 3, 3]"}},
        {"groups do not divide the output channels",
         [] {
           conv3d(zeros({1, 4, 4, 4, 4}), zeros({3, 2, 3, 3, 3}), Tensor(), {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 2);
         },
         {"conv3d", "groups 2", "weight's 3"}},
        {"bias of the wrong size", [x, w] { conv3d(x, w, zeros({4})); }, {"conv3d", "bias must be [3]", "[4]"}},
        {"zero stride",
         [x, w] {
           conv3d(x, w, Tensor(), {1, 0, 1});
         },
         {"conv3d", "stride 1x0x1"}},
        {"kernel deeper than the padded input",
         [w] {
           conv3d(zeros({1, 2, 2, 4, 4}), w);
         },
         {"conv3d", "larger than the padded input in dim 2", "[1, 2, 2, 4, 4]"}},
        {"dtypes differ",
         [x] {
           conv3d(x, zeros({3, 2, 3, 3, 3}, DType::Float64));
         },
         {"conv3d", "float32", "float64"}},
        {"integer input",
         [] {
           conv3d(zeros({1, 2, 4, 4, 4}, DType::Int32), zeros({3, 2, 3, 3, 3}, DType::Int32));
         },
         {"conv3d", "int32"}},
        {"no channels",
         [] {
           conv3d(zeros({1, 0, 4, 4, 4}), zeros({3, 0, 3, 3, 3}));
         },
         {"conv3d", "only the batch dim", "[1, 0, 4, 4, 4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "conv_transpose3d";
    r.dtypes = kFloatTypes;
    // Params: stride (3), padding (3), output_padding (3), dilation (3), groups.
    r.samples = {
        conv3d_sample("3x3x3", {2, 3, 3, 4, 3}, {3, 2, 3, 3, 3}, 0, 2, {1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}, 111),
        conv3d_sample("stride 2, padding 1, output_padding 1x0x1", {1, 2, 3, 3, 4}, {2, 3, 3, 3, 3}, 0, 3,
                      {2, 2, 2, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}, 121),
        conv3d_sample("stride 3 in depth only, kernel 2x1x1", {2, 2, 3, 4, 4}, {2, 2, 2, 1, 1}, 0, 2,
                      {3, 1, 1, 0, 0, 0, 2, 0, 0, 1, 1, 1, 1}, 131),
        conv3d_sample("dilation 2x1x2, padding 2x0x1", {1, 2, 4, 3, 3}, {2, 2, 3, 2, 3}, 0, 2,
                      {1, 1, 1, 2, 0, 1, 0, 0, 0, 2, 1, 2, 1}, 141),
        conv3d_sample("groups 2, stride 2x1x2", {1, 4, 3, 3, 3}, {4, 1, 2, 3, 2}, 0, 2,
                      {2, 1, 2, 0, 1, 0, 1, 0, 0, 1, 1, 1, 2}, 151),
        conv3d_sample("4-d input (one volume)", {2, 3, 3, 2}, {2, 2, 2, 2, 3}, 0, 2,
                      {1, 2, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1}, 161),
        conv3d_sample("non-contiguous input", {1, 2, 3, 3, 3}, {2, 3, 2, 2, 2}, 0, 3,
                      {2, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}, 171, true),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{conv_transpose3d(in[0], in[1], in[2], tr(p, 0), tr(p, 3), tr(p, 6), p[12], tr(p, 9))};
    };
    r.reference = [](const TensorList& in) {
      return TensorList{ref_conv_transpose3d(in[0], in[1], in[2], param_values(in[3]))};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    const Tensor x = zeros({1, 2, 3, 3, 3}), w = zeros({2, 3, 3, 3, 3});
    r.errors = {
        {"weight's first dim against the channels",
         [w] {
           conv_transpose3d(zeros({1, 3, 3, 3, 3}), w);
         },
         {"conv_transpose3d", "input has 3 channels", "weight expects 2", "[2, 3, 3, 3, 3]"}},
        {"output_padding not below the stride",
         [x, w] {
           conv_transpose3d(x, w, Tensor(), {2, 2, 2}, {0, 0, 0}, {0, 2, 0});
         },
         {"conv_transpose3d", "output_padding 0x2x0", "stride 2x2x2"}},
        {"padding crops everything",
         [x] {
           conv_transpose3d(x, zeros({2, 3, 1, 1, 1}), Tensor(), {1, 1, 1}, {0, 0, 2});
         },
         {"conv_transpose3d", "in dim 4 is not positive", "[1, 2, 3, 3, 3]"}},
        {"groups do not divide the input channels",
         [] {
           conv_transpose3d(zeros({1, 3, 3, 3, 3}), zeros({3, 1, 2, 2, 2}), Tensor(), {1, 1, 1}, {0, 0, 0}, {0, 0, 0},
                            2);
         },
         {"conv_transpose3d", "groups 2", "input's 3"}},
        {"bias of the wrong size",
         [x, w] { conv_transpose3d(x, w, zeros({2})); },
         {"conv_transpose3d", "bias must be [3]", "[2]"}},
        {"weight 4-d",
         [x] {
           conv_transpose3d(x, zeros({2, 3, 3, 3}));
         },
         {"conv_transpose3d", "weight must be 5-d", "[C_in, C_out / groups, kD, kH, kW]"}},
    };
    rows.push_back(std::move(r));
  }
}

void add_pool3d_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "max_pool3d";
    r.dtypes = kFloatTypes;
    // Params: kernel (3), stride (3, zeros: the kernel), padding (3), dilation (3), ceil_mode. At
    // most 512 elements: rnd_distinct's integers stay exact in bfloat16.
    r.samples = {
        volume_sample("2x2x2", {2, 2, 4, 6, 4}, {2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0}, true, 201),
        volume_sample("3x3x3 stride 2 padding 1", {1, 2, 5, 7, 6}, {3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0}, true, 211),
        volume_sample("3x2x2 stride 2x1x2, ceil_mode", {2, 2, 6, 4, 5}, {3, 2, 2, 2, 1, 2, 1, 0, 1, 1, 1, 1, 1}, true,
                      221),
        volume_sample("2x2x2 dilation 2x1x2", {1, 3, 6, 4, 6}, {2, 2, 2, 1, 2, 1, 0, 1, 1, 2, 1, 2, 0}, true, 231),
        volume_sample("4-d input, overlapping 2x3x2 stride 1", {2, 4, 5, 4}, {2, 3, 2, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0},
                      true, 241),
        volume_sample("non-contiguous input", {1, 2, 4, 5, 4}, {2, 2, 2, 2, 2, 2, 1, 0, 1, 1, 1, 1, 0}, true, 251,
                      true),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = max_pool3d_with_indices(in[0], tr(q, 0), tr(q, 3), tr(q, 6), tr(q, 9), q[12] != 0);
      return TensorList{max_pool3d(in[0], tr(q, 0), tr(q, 3), tr(q, 6), tr(q, 9), q[12] != 0), values, indices};
    };
    r.reference = [](const TensorList& in) {
      std::vector<int64_t> q = param_values(in[1]);
      for (size_t i = 3; i < 6; ++i) q[i] = q[i] == 0 ? q[i - 3] : q[i];
      const TensorList both = ref_max_pool3d(in[0], q);
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    r.errors = {
        {"3-d input",
         [] {
           max_pool3d(zeros({4, 4, 4}), {2, 2, 2});
         },
         {"max_pool3d", "[4, 4, 4]"}},
        {"zero kernel",
         [] {
           max_pool3d(zeros({1, 2, 4, 4, 4}), {2, 0, 2});
         },
         {"max_pool3d", "kernel 2x0x2", "[1, 2, 4, 4, 4]"}},
        {"padding above half the kernel",
         [] {
           max_pool3d(zeros({1, 2, 4, 4, 4}), {3, 3, 3}, {1, 1, 1}, {1, 1, 2});
         },
         {"max_pool3d", "padding 1x1x2", "kernel 3x3x3"}},
        {"kernel deeper than the input",
         [] {
           max_pool3d(zeros({1, 2, 2, 8, 8}), {3, 2, 2});
         },
         {"max_pool3d", "not positive in dim 2", "[1, 2, 2, 8, 8]"}},
        {"integer input",
         [] {
           max_pool3d(zeros({1, 2, 4, 4, 4}, DType::Int32), {2, 2, 2});
         },
         {"max_pool3d", "int32"}},
        {"no channels",
         [] {
           max_pool3d(zeros({2, 0, 4, 4, 4}), {2, 2, 2});
         },
         {"max_pool3d", "[2, 0, 4, 4, 4]", "only the batch dim may be empty"}},
    };
    rows.push_back(std::move(r));
  }
  // max_unpool3d of max_pool3d_with_indices' output over non-overlapping windows (an element two
  // windows shared would be written once but counted twice by central differences).
  {
    OpRow r;
    r.name = "max_unpool3d";
    r.dtypes = kFloatTypes;
    auto pooled = [](const Shape& shape, uint64_t seed) {
      return [=](DType t, Device d) {
        auto [values, indices] = max_pool3d_with_indices(rnd_distinct(shape, t, d, seed), {2, 2, 2});
        return TensorList{values, indices};
      };
    };
    r.samples = {{"2x2x2 of [2, 2, 4, 6, 4]", pooled({2, 2, 4, 6, 4}, 261)},
                 {"2x2x2 of [3, 4, 4, 6]", pooled({3, 4, 4, 6}, 263)}};
    r.op = [](const TensorList& in) { return TensorList{max_unpool3d(in[0], in[1], {2, 2, 2})}; };
    r.reference = [](const TensorList& in) {
      const int64_t k = in[0].dim() - 3;
      const Tensor x = in[0], idx = in[1];
      Shape plane{x.size(k) * 2, x.size(k + 1) * 2, x.size(k + 2) * 2};
      const int64_t vol = plane[0] * plane[1] * plane[2], in_vol = x.size(k) * x.size(k + 1) * x.size(k + 2);
      const Values xv = values(x), iv = values(idx);
      Values out(at(x.numel() / in_vol * vol), 0.0);
      for (int64_t i = 0; i < x.numel(); ++i) {
        out[at(i / in_vol * vol + static_cast<int64_t>(iv[at(i)]))] = xv[at(i)];
      }
      Shape s(x.sizes().begin(), x.sizes().end() - 3);
      s.insert(s.end(), plane.begin(), plane.end());
      return TensorList{from_values(out, s)};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    const Tensor x = zeros({1, 2, 2, 3, 2});
    r.errors = {
        {"an index past the volume",
         [x] {
           max_unpool3d(x, full({1, 2, 2, 3, 2}, 96, DType::Int64), {2, 2, 2});
         },
         {"max_unpool3d", "index 96", "[4, 6, 4]"}},
        {"indices of another shape",
         [x] {
           max_unpool3d(x, zeros({1, 2, 2, 3, 3}, DType::Int64), {2, 2, 2});
         },
         {"max_unpool3d", "[1, 2, 2, 3, 2]", "[1, 2, 2, 3, 3]"}},
        {"3-d input",
         [] {
           max_unpool3d(zeros({2, 3, 2}), zeros({2, 3, 2}, DType::Int64), {2, 2, 2});
         },
         {"max_unpool3d", "[2, 3, 2]"}},
        {"zero kernel",
         [x] {
           max_unpool3d(x, zeros({1, 2, 2, 3, 2}, DType::Int64), {2, 0, 2});
         },
         {"max_unpool3d", "kernel_size 2x0x2"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "avg_pool3d";
    r.dtypes = kFloatTypes;
    // Params: kernel (3), stride (3), padding (3), ceil_mode, count_include_pad.
    r.samples = {
        volume_sample("2x2x2", {2, 2, 4, 6, 4}, {2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1}, false, 301),
        volume_sample("3x3x3 stride 2 padding 1", {1, 2, 5, 6, 5}, {3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 1}, false, 311),
        volume_sample("3x3x3 stride 2 padding 1, without the padding's cells", {1, 2, 5, 6, 5},
                      {3, 3, 3, 2, 2, 2, 1, 1, 1, 0, 0}, false, 313),
        volume_sample("3x2x3 stride 2, padding 1x1x0, ceil_mode", {2, 2, 6, 5, 7}, {3, 2, 3, 2, 2, 2, 1, 1, 0, 1, 1},
                      false, 321),
        volume_sample("ceil_mode without the padding's cells", {2, 2, 6, 5, 7}, {3, 2, 3, 2, 2, 2, 1, 1, 0, 1, 0},
                      false, 323),
        volume_sample("4-d input, overlapping 2x2x3 stride 1", {3, 4, 4, 5}, {2, 2, 3, 1, 1, 1, 0, 0, 1, 0, 1}, false,
                      331),
        volume_sample("divisor_override 7, padding 1, ceil_mode", {1, 2, 5, 6, 5}, {3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 7},
                      false, 333),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      const std::optional<int64_t> divisor = q.size() > 11 ? std::optional<int64_t>(q[11]) : std::nullopt;
      return TensorList{avg_pool3d(in[0], tr(q, 0), tr(q, 3), tr(q, 6), q[9] != 0, q[10] != 0, divisor)};
    };
    r.reference = [](const TensorList& in) { return TensorList{ref_avg_pool3d(in[0], param_values(in[1]))}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    // Two averages, each rounded to the input's dtype in a half type.
    r.tolerance[DType::Float16] = {2e-3, 2e-3};
    r.tolerance[DType::BFloat16] = {1.6e-2, 1.6e-2};
    r.errors = {
        {"negative padding",
         [] {
           avg_pool3d(zeros({1, 2, 4, 4, 4}), {2, 2, 2}, {0, 0, 0}, {0, -1, 0});
         },
         {"avg_pool3d", "padding 0x-1x0"}},
        {"2-d input",
         [] {
           avg_pool3d(zeros({4, 4}), {2, 2, 2});
         },
         {"avg_pool3d", "[4, 4]"}},
        {"divisor_override 0",
         [] {
           avg_pool3d(zeros({1, 2, 4, 4, 4}), {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, false, true, 0);
         },
         {"avg_pool3d", "divisor_override"}},
    };
    rows.push_back(std::move(r));
  }
  for (const bool maximum : {false, true}) {
    OpRow r;
    r.name = maximum ? "adaptive_max_pool3d" : "adaptive_avg_pool3d";
    r.dtypes = kFloatTypes;
    // Params: output size (3). Windows that overlap (5 into 3) and that are wider than the output
    // (7 into 2), and an output as large as the input.
    r.samples = {
        volume_sample("[2, 2, 5, 7, 4] to 3x2x4", {2, 2, 5, 7, 4}, {3, 2, 4}, maximum, 401),
        volume_sample("4-d [3, 6, 5, 4] to 4x1x3", {3, 6, 5, 4}, {4, 1, 3}, maximum, 411),
    };
    // The pool; for the maximum, also adaptive_max_pool3d_with_indices' values and indices.
    r.op = [maximum](const TensorList& in) {
      const Triple o = tr(param_values(in[1]), 0);
      if (!maximum) return TensorList{adaptive_avg_pool3d(in[0], o)};
      auto [values, indices] = adaptive_max_pool3d_with_indices(in[0], o);
      return TensorList{adaptive_max_pool3d(in[0], o), values, indices};
    };
    r.reference = [maximum](const TensorList& in) {
      const TensorList ref = ref_adaptive3d(in[0], tr(param_values(in[1]), 0), maximum);
      return maximum ? TensorList{ref[0], ref[0], ref[1]} : ref;
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    if (maximum) {
      for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    } else {
      // Two averages, each rounded to the input's dtype in a half type.
      r.tolerance[DType::Float16] = {2e-3, 2e-3};
      r.tolerance[DType::BFloat16] = {1.6e-2, 1.6e-2};
    }
    const char* name = maximum ? "adaptive_max_pool3d" : "adaptive_avg_pool3d";
    const auto call = [maximum](const Tensor& x, Triple o) {
      return maximum ? adaptive_max_pool3d(x, o) : adaptive_avg_pool3d(x, o);
    };
    r.errors = {
        {"zero output size",
         [call] {
           call(zeros({1, 2, 4, 4, 4}), {2, 0, 2});
         },
         {name, "2x0x2", "[1, 2, 4, 4, 4]"}},
        {"6-d input",
         [call] {
           call(zeros({1, 1, 2, 4, 4, 4}), {2, 2, 2});
         },
         {name, "[1, 1, 2, 4, 4, 4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "lp_pool3d";
    r.dtypes = kFloatTypes;
    // Params: norm p, kernel (3), stride (3, zeros: the kernel), ceil_mode. Positive inputs, so
    // that x^3's window sums have a real cube root.
    r.samples = {
        {"p 2, kernel 2x2x3, [2, 2, 4, 5, 6]",
         [](DType t, Device d) {
           return TensorList{rnd({2, 2, 4, 5, 6}, t, d, 461), params({2, 2, 2, 3, 0, 0, 0, 0}, d)};
         }},
        {"p 3, kernel 2x3x2, stride 1x2x2, ceil_mode, 4-d input",
         [](DType t, Device d) {
           return TensorList{rnd_range({3, 4, 7, 5}, t, d, 463, 0.25, 1.0), params({3, 2, 3, 2, 1, 2, 2, 1}, d)};
         }},
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      return TensorList{lp_pool3d(in[0], static_cast<double>(q[0]), tr(q, 1), tr(q, 4), q[7] != 0)};
    };
    r.reference = [](const TensorList& in) {
      std::vector<int64_t> q = param_values(in[1]);
      for (size_t i = 4; i < 7; ++i) q[i] = q[i] == 0 ? q[i - 3] : q[i];
      return TensorList{ref_lp_pool3d(in[0], q)};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    // The power, two averages and the root, each rounded to the input's dtype in a half type.
    r.tolerance[DType::Float16] = {4e-3, 4e-3};
    r.tolerance[DType::BFloat16] = {3e-2, 3e-2};
    r.errors = {
        {"a zero norm_type",
         [] {
           lp_pool3d(ones({1, 2, 4, 4, 4}), 0.0, {2, 2, 2});
         },
         {"lp_pool3d", "norm_type", "0"}},
        {"zero kernel",
         [] {
           lp_pool3d(ones({1, 2, 4, 4, 4}), 2.0, {2, 2, 0});
         },
         {"lp_pool3d", "kernel size"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "fractional_max_pool3d";
    r.dtypes = kFloatTypes;
    // Params: kernel (3), output size (3), and 1 for a float64 sample (the starts' arithmetic).
    // in[2] holds the samples, [N (or 1), C, 3] in (t, h, w) order.
    auto sample = [](const std::string& name, Shape shape, std::vector<int64_t> q, uint64_t seed) {
      return Sample{name, [=](DType t, Device d) {
                      std::vector<int64_t> p = q;
                      p.push_back(t == DType::Float64 ? 1 : 0);
                      const int64_t batch = shape.size() == 5 ? shape[0] : 1;
                      return TensorList{rnd_distinct(shape, t, d, seed), params(p, d),
                                        rnd_range({batch, shape[shape.size() - 4], 3}, t, d, seed + 1, 0.0, 1.0)};
                    }};
    };
    r.samples = {
        sample("[2, 2, 6, 7, 5], kernel 2x2x2, to 3x4x2", {2, 2, 6, 7, 5}, {2, 2, 2, 3, 4, 2}, 481),
        sample("4-d [3, 5, 6, 7], kernel 1x3x2, to 5x2x4", {3, 5, 6, 7}, {1, 3, 2, 5, 2, 4}, 483),
    };
    r.op = [](const TensorList& in) {
      auto q = param_values(in[1]);
      auto [values, indices] = fractional_max_pool3d_with_indices(in[0], tr(q, 0), tr(q, 3), in[2]);
      return TensorList{fractional_max_pool3d(in[0], tr(q, 0), tr(q, 3), in[2]), values, indices};
    };
    r.reference = [](const TensorList& in) {
      const auto q = param_values(in[1]);
      const Values u = values(in[2]);
      const Shape size(in[0].sizes().end() - 3, in[0].sizes().end());
      const TensorList both = ref_window_max(in[0], {q[3], q[4], q[5]}, [&](int64_t plane, size_t i, int64_t o) {
        const int64_t start = ref_fractional_starts(u[at(plane * 3) + i], size[i], q[3 + i], q[i], q[6] != 0)[at(o)];
        return std::pair<int64_t, int64_t>{start, start + q[i]};
      });
      return TensorList{both[0], both[0], both[1]};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    for (DType t : kFloatTypes) r.tolerance[t] = {0, 0};  // copies of the input's values
    r.errors = {
        {"output plus kernel past the input",
         [] {
           fractional_max_pool3d(zeros({1, 2, 4, 6, 6}), {2, 2, 2}, {4, 3, 3}, full({1, 2, 3}, 0.5));
         },
         {"fractional_max_pool3d", "output size 4 plus kernel 2 minus 1 exceeds the input's 4", "[1, 2, 4, 6, 6]"}},
        {"samples for 2-d",
         [] {
           fractional_max_pool3d(zeros({1, 2, 4, 6, 6}), {2, 2, 2}, {2, 3, 3}, full({1, 2, 2}, 0.5));
         },
         {"fractional_max_pool3d", "random_samples must be [N, 2, 3] with N >= 1", "got [1, 2, 2]"}},
        {"output_ratio of 0",
         [] {
           fractional_output_size3d(zeros({1, 2, 4, 6, 6}), {0.5, 0.0, 0.5});
         },
         {"fractional_max_pool3d", "output_ratio must be in (0, 1), got 0"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_volume_rows(std::vector<OpRow>& rows) {
  add_conv3d_rows(rows);
  add_pool3d_rows(rows);
}

}  // namespace kiln::test
