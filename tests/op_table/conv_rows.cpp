// Op table rows of the conv family: conv2d and conv_transpose2d with and without bias, over
// strides, padding, output padding, dilation, groups and channels-last inputs, and their 1-d forms.
// Hyper-parameters travel with each sample as a trailing int64 tensor, so one row covers many
// configurations. The reference is a direct loop in float64 (no im2col).
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Params: stride h, w, padding h, w, dilation h, w, groups.

Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& p) {
  const Shape xs = x.sizes(), ws = w.sizes();
  const int64_t n_ = xs[0], h_ = xs[2], w_ = xs[3];
  const int64_t co_ = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t groups = p[6], cog = co_ / groups;
  const int64_t oh_ = (h_ + 2 * p[2] - p[4] * (kh - 1) - 1) / p[0] + 1;
  const int64_t ow_ = (w_ + 2 * p[3] - p[5] * (kw - 1) - 1) / p[1] + 1;
  std::vector<double> xv = values(x), wv = values(w), bv = b.defined() ? values(b) : std::vector<double>();
  std::vector<double> out;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t co = 0; co < co_; ++co)
      for (int64_t oh = 0; oh < oh_; ++oh)
        for (int64_t ow = 0; ow < ow_; ++ow) {
          double acc = bv.empty() ? 0.0 : bv[static_cast<size_t>(co)];
          const int64_t g = co / cog;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * p[0] - p[2] + i * p[4], iw = ow * p[1] - p[3] + j * p[5];
                if (ih < 0 || ih >= h_ || iw < 0 || iw >= w_) continue;
                acc += xv[static_cast<size_t>(ravel({n, g * cg + ci, ih, iw}, xs))] *
                       wv[static_cast<size_t>(ravel({co, ci, i, j}, ws))];
              }
          out.push_back(acc);
        }
  return from_values(out, {n_, co_, oh_, ow_});
}

// Transposed params: stride h, w, padding h, w, output_padding h, w, dilation h, w, groups. The
// definition itself: every input pixel scatters its weighted filter taps into the output, then the
// padding crops the borders.
Tensor ref_conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& p) {
  const Shape xs = x.sizes(), ws = w.sizes();
  const int64_t n_ = xs[0], ci_ = xs[1], h_ = xs[2], w_ = xs[3];
  const int64_t cog = ws[1], kh = ws[2], kw = ws[3];
  const int64_t groups = p[8], cig = ci_ / groups, co_ = cog * groups;
  const int64_t oh_ = (h_ - 1) * p[0] - 2 * p[2] + p[6] * (kh - 1) + p[4] + 1;
  const int64_t ow_ = (w_ - 1) * p[1] - 2 * p[3] + p[7] * (kw - 1) + p[5] + 1;
  const Shape os{n_, co_, oh_, ow_};
  std::vector<double> xv = values(x), wv = values(w), bv = b.defined() ? values(b) : std::vector<double>();
  std::vector<double> out(static_cast<size_t>(n_ * co_ * oh_ * ow_), 0.0);
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t co = 0; co < co_; ++co)
      for (int64_t oh = 0; oh < oh_; ++oh)
        for (int64_t ow = 0; ow < ow_; ++ow)
          out[static_cast<size_t>(ravel({n, co, oh, ow}, os))] = bv.empty() ? 0.0 : bv[static_cast<size_t>(co)];
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t ci = 0; ci < ci_; ++ci)
      for (int64_t ih = 0; ih < h_; ++ih)
        for (int64_t iw = 0; iw < w_; ++iw) {
          const double xval = xv[static_cast<size_t>(ravel({n, ci, ih, iw}, xs))];
          const int64_t g = ci / cig;
          for (int64_t oc = 0; oc < cog; ++oc)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t oh = ih * p[0] - p[2] + i * p[6], ow = iw * p[1] - p[3] + j * p[7];
                if (oh < 0 || oh >= oh_ || ow < 0 || ow >= ow_) continue;
                out[static_cast<size_t>(ravel({n, g * cog + oc, oh, ow}, os))] +=
                    xval * wv[static_cast<size_t>(ravel({ci, oc, i, j}, ws))];
              }
        }
  return from_values(out, os);
}

// x [n, c, h, w], weight [co, c / groups, k, k2]; seeds differ per sample.
TensorList conv_inputs(DType t, Device d, Shape xs, Shape ws, std::vector<int64_t> p, bool bias, bool cl,
                       uint64_t seed) {
  Tensor x = rnd(xs, t, d, seed);
  if (cl) x = channels_last(x);
  // Weight scaled like a fan-in initialisation so outputs stay O(1) in every dtype.
  Tensor w = rnd(ws, t, d, seed + 1, 1.0 / std::sqrt(static_cast<double>(ws[1] * ws[2] * ws[3])));
  TensorList r{x, w};
  if (bias) r.push_back(rnd({ws[0]}, t, d, seed + 2));
  r.push_back(params(p, d));
  return r;
}

Sample conv_sample(const std::string& name, Shape xs, Shape ws, std::vector<int64_t> p, bool bias, bool cl,
                   uint64_t seed) {
  return {name, [=](DType t, Device d) { return conv_inputs(t, d, xs, ws, p, bias, cl, seed); }};
}

std::vector<int64_t> std_params() { return {1, 1, 0, 0, 1, 1, 1}; }

// x [n, c, h, w], weight [c, co / groups, k, k2] (scaled by the taps one output sums: about
// co / groups x k x k2 / stride^2, here bounded by the weight's own fan-in), bias [co] when `bias`.
TensorList transposed_inputs(DType t, Device d, Shape xs, Shape ws, std::vector<int64_t> p, bool bias, bool cl,
                             uint64_t seed) {
  Tensor x = rnd(xs, t, d, seed);
  if (cl) x = channels_last(x);
  Tensor w = rnd(ws, t, d, seed + 1, 1.0 / std::sqrt(static_cast<double>(ws[0] * ws[2] * ws[3])));
  TensorList r{x, w};
  if (bias) r.push_back(rnd({ws[1] * p[8]}, t, d, seed + 2));
  r.push_back(params(p, d));
  return r;
}

Sample transposed_sample(const std::string& name, Shape xs, Shape ws, std::vector<int64_t> p, bool bias, bool cl,
                         uint64_t seed) {
  return {name, [=](DType t, Device d) { return transposed_inputs(t, d, xs, ws, p, bias, cl, seed); }};
}

// The compute-bound bench of a ResNet stage's 3x3 convolution, forward: x [64, 128, 56, 56], weight
// [128, 128, 3, 3], padding 1, no bias; bfloat16 (channels-last or NCHW) or float32 with TF32
// (NCHW). Its own timed call: the row's op reads its hyper-parameters from an int64 tensor input.
BenchCase conv_bench(const std::string& name, bool tf32, bool cl) {
  BenchCase b;
  b.name = name;
  b.dtypes = {tf32 ? DType::Float32 : DType::BFloat16};
  b.op = "conv2d";
  b.args = R"({"stride": [1, 1], "padding": [1, 1]})";
  b.setup = [tf32, cl](DType t, int64_t) {
    const int64_t N = 64, C = 128, H = 56, W = 56, K = 128, R = 3;
    const double es = static_cast<double>(element_size(t));
    const double x_elems = static_cast<double>(N * C * H * W), w_elems = static_cast<double>(K * C * R * R);
    const double out_elems = static_cast<double>(N * K * H * W);
    const MemoryFormat f = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    BenchSetup s;
    s.shape = {N, C, H, W};
    s.inputs = {{{N, C, H, W}, t, BenchInput::Fill::Normal, f}, {{K, C, R, R}, t, BenchInput::Fill::Normal, f}};
    s.bytes = es * (x_elems + w_elems + out_elems);
    s.flops = 2 * out_elems * static_cast<double>(C * R * R);
    s.precision = tf32 ? "tf32" : "bf16";
    s.tf32 = tf32;
    return s;
  };
  b.run = [](const TensorList& x) { return TensorList{conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1})}; };
  return b;
}

}  // namespace

void add_conv_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "conv2d";
    r.dtypes = kFloatTypes;
    // Small images keep gradcheck (one forward per perturbed element) well under a second.
    r.samples = {
        conv_sample("3x3", {2, 3, 6, 5}, {3, 3, 3, 3}, std_params(), true, false, 11),
        conv_sample("stride 2, padding 1", {2, 3, 6, 5}, {3, 3, 3, 3}, {2, 2, 1, 1, 1, 1, 1}, true, false, 21),
        conv_sample("dilation 2, padding 2x1", {2, 3, 7, 6}, {3, 3, 3, 2}, {1, 1, 2, 1, 2, 2, 1}, true, false, 31),
        conv_sample("groups 2", {2, 4, 6, 5}, {4, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 2}, true, false, 41),
        conv_sample("1x1", {2, 3, 5, 4}, {4, 3, 1, 1}, std_params(), true, false, 51),
        // The CPU's NCHW weight gradient sums a batch of 37 in 13 runs of 3 images, then the runs.
        conv_sample("batch 37, padding 1", {37, 2, 5, 4}, {3, 2, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true, false, 57),
        conv_sample("1x1 channels-last", {2, 3, 5, 4}, {4, 3, 1, 1}, std_params(), true, true, 55),
        conv_sample("channels-last, padding 1", {2, 3, 6, 5}, {3, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true, true, 61),
        conv_sample("channels-last, groups 3, stride 2x1", {2, 3, 7, 5}, {3, 1, 3, 2}, {2, 1, 1, 0, 1, 1, 3}, true,
                    true, 65),
        conv_sample("odd sizes, 5x3 kernel, stride 3x2", {1, 5, 9, 7}, {2, 5, 5, 3}, {3, 2, 2, 1, 1, 1, 1}, true, false,
                    71),
        // Kernel widths 7 and 5: windows wider than the usual 3, far into the padding.
        conv_sample("5x7 kernel, padding 2x3", {1, 2, 8, 9}, {2, 2, 5, 7}, {1, 1, 2, 3, 1, 1, 1}, true, false, 73),
        conv_sample("1x5 kernel, dilation 1x2, padding 0x4", {1, 2, 4, 11}, {3, 2, 1, 5}, {1, 1, 0, 4, 1, 2, 1}, true,
                    false, 75),
        {"non-contiguous input",
         [](DType t, Device d) {
           TensorList in = conv_inputs(t, d, {2, 3, 5, 5}, {3, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true, false, 81);
           in[0] = noncontig(in[0]);
           return in;
         }},
        // x[1:] of a batch of 3x5x5 images: dense, but 75 elements into its storage, so a half type
        // starts 150 bytes in (not 16-byte aligned), which cuDNN is not given (conv.cpp copies it).
        {"a batch view with a storage offset",
         [](DType t, Device d) {
           TensorList in = conv_inputs(t, d, {3, 3, 5, 5}, {3, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, true, false, 83);
           NoGradGuard g;
           in[0] = in[0].narrow(0, 1, 2);
           return in;
         }},
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{conv2d(in[0], in[1], in[2], {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[6])};
    };
    r.reference = [](const TensorList& in) { return TensorList{ref_conv2d(in[0], in[1], in[2], param_values(in[3]))}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    // No loosened half tolerance: float16/bfloat16 inputs are widened to float32 columns and the
    // whole sum stays in float32, so the output carries only the final rounding to half (2^-11,
    // 2^-8 relative), within the default 1e-3 / 1e-2 however many terms the sum has.
    const Tensor x4 = zeros({2, 3, 8, 8}), w4 = zeros({8, 3, 3, 3});
    r.errors = {
        {"input not 4-d",
         [] {
           conv2d(zeros({3, 8, 8}), zeros({8, 3, 3, 3}));
         },
         {"conv2d", "4-d", "[3, 8, 8]"}},
        {"weight not 4-d",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({8, 27}));
         },
         {"conv2d", "weight", "[8, 27]"}},
        {"channel mismatch",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({8, 4, 3, 3}));
         },
         {"conv2d", "input has 3 channels, weight expects 4", "[2, 3, 8, 8]", "[8, 4, 3, 3]"}},
        {"grouped channel mismatch",
         [] {
           conv2d(zeros({2, 4, 8, 8}), zeros({8, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
         },
         {"conv2d", "input has 4 channels, weight expects 2", "[2, 4, 8, 8]", "[8, 1, 3, 3]"}},
        {"groups do not divide input channels",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({4, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
         },
         {"conv2d", "groups 2", "3 channels", "[2, 3, 8, 8]", "[4, 1, 3, 3]"}},
        {"groups do not divide output channels",
         [] {
           conv2d(zeros({2, 4, 8, 8}), zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
         },
         {"conv2d", "groups 2", "3 output channels", "[3, 2, 3, 3]"}},
        {"zero groups",
         [] {
           conv2d(zeros({2, 4, 8, 8}), zeros({4, 4, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 0);
         },
         {"conv2d", "groups", "[2, 4, 8, 8]"}},
        {"kernel larger than padded input",
         [] {
           conv2d(zeros({1, 3, 4, 4}), zeros({2, 3, 5, 5}), Tensor(), {1, 1}, {0, 0});
         },
         {"conv2d", "larger than the padded input 4x4", "[1, 3, 4, 4]", "[2, 3, 5, 5]"}},
        {"non-positive output size (dilation)",
         [] {
           conv2d(zeros({1, 3, 5, 5}), zeros({2, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {3, 3});
         },
         {"conv2d", "output size -1x-1", "[1, 3, 5, 5]", "[2, 3, 3, 3]"}},
        {"zero stride",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({8, 3, 3, 3}), Tensor(), {0, 1});
         },
         {"conv2d", "stride", "0x1", "[2, 3, 8, 8]"}},
        {"negative padding",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({8, 3, 3, 3}), Tensor(), {1, 1}, {-1, 0});
         },
         {"conv2d", "padding", "-1x0"}},
        {"dtype mismatch",
         [] {
           conv2d(zeros({2, 3, 8, 8}), zeros({8, 3, 3, 3}, DType::Float64));
         },
         {"conv2d", "float32", "float64", "[2, 3, 8, 8]"}},
        {"integer input",
         [] {
           conv2d(zeros({2, 3, 8, 8}, DType::Int64), zeros({8, 3, 3, 3}, DType::Int64));
         },
         {"conv2d", "int64", "[2, 3, 8, 8]"}},
        {"bias shape", [x4, w4] { conv2d(x4, w4, zeros({3})); }, {"conv2d", "bias", "[8]", "[3]", "[8, 3, 3, 3]"}},
        {"undefined weight", [x4] { conv2d(x4, Tensor()); }, {"conv2d", "weight"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "conv2d (no bias)";
    r.dtypes = kFloatTypes;
    r.samples = {
        conv_sample("3x3, padding 1", {2, 3, 6, 5}, {3, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1}, false, false, 111),
        conv_sample("channels-last, groups 3, dilation 2", {2, 3, 7, 6}, {3, 1, 2, 3}, {1, 2, 1, 2, 2, 2, 3}, false,
                    true, 121),
        conv_sample("1x1 channels-last stride 2", {2, 3, 5, 5}, {2, 3, 1, 1}, {2, 2, 0, 0, 1, 1, 1}, false, true, 131),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[2]);
      return TensorList{conv2d(in[0], in[1], Tensor(), {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[6])};
    };
    r.reference = [](const TensorList& in) {
      return TensorList{ref_conv2d(in[0], in[1], Tensor(), param_values(in[2]))};
    };
    r.differentiable = {0, 1};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.bench = {conv_bench("conv2d_nhwc", false, true), conv_bench("conv2d_nchw", false, false),
               conv_bench("conv2d_nchw", true, false)};
    rows.push_back(std::move(r));
  }
  {
    // conv1d: x [N, C, L] or [C, L], weight [C_out, C_in / groups, k], bias; params stride,
    // padding, dilation, groups. The reference is ref_conv2d's loop on a height of 1.
    auto sample = [](const std::string& name, Shape xs, Shape ws, std::vector<int64_t> p, uint64_t seed) {
      return Sample{name, [=](DType t, Device d) {
                      const double scale = 1.0 / std::sqrt(static_cast<double>(ws[1] * ws[2]));
                      return TensorList{rnd(xs, t, d, seed), rnd(ws, t, d, seed + 1, scale),
                                        rnd({ws[0]}, t, d, seed + 2), params(p, d)};
                    }};
    };
    OpRow r;
    r.name = "conv1d";
    r.dtypes = kFloatTypes;
    r.samples = {
        sample("k 3", {2, 3, 9}, {4, 3, 3}, {1, 0, 1, 1}, 141),
        sample("stride 2, padding 2, dilation 2", {2, 3, 11}, {4, 3, 3}, {2, 2, 2, 1}, 143),
        sample("groups 3", {2, 6, 8}, {3, 2, 5}, {1, 1, 1, 3}, 145),
        sample("unbatched [C, L]", {3, 7}, {2, 3, 2}, {1, 1, 1, 1}, 147),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{conv1d(in[0], in[1], in[2], p[0], p[1], p[2], p[3])};
    };
    r.reference = [](const TensorList& in) {
      auto p = param_values(in[3]);
      const bool batched = in[0].dim() == 3;
      const Tensor x = (batched ? in[0] : in[0].unsqueeze(0)).unsqueeze(2);
      const Tensor y = ref_conv2d(x, in[1].unsqueeze(2), in[2], {1, p[0], 0, p[1], 1, p[2], p[3]}).squeeze(2);
      return TensorList{batched ? y : y.squeeze(0)};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.errors = {
        {"input not [N, C, L]",
         [] {
           conv1d(zeros({2, 3, 8, 8}), zeros({4, 3, 3}));
         },
         {"conv1d", "[N, C, L]", "[2, 3, 8, 8]"}},
        {"weight not 3-d",
         [] {
           conv1d(zeros({2, 3, 8}), zeros({4, 3, 3, 3}));
         },
         {"conv1d", "weight", "[4, 3, 3, 3]"}},
        {"channel mismatch",
         [] {
           conv1d(zeros({2, 3, 8}), zeros({4, 2, 3}));
         },
         {"conv1d", "input has 3 channels, weight expects 2"}},
        {"stride 0",
         [] {
           conv1d(zeros({2, 3, 8}), zeros({4, 3, 3}), Tensor(), 0);
         },
         {"conv1d", "stride 0"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // conv_transpose2d: params stride, padding, output_padding, dilation (h, w each), groups.
    OpRow r;
    r.name = "conv_transpose2d";
    r.dtypes = kFloatTypes;
    const std::vector<int64_t> plain{1, 1, 0, 0, 0, 0, 1, 1, 1};
    r.samples = {
        transposed_sample("3x3", {2, 3, 4, 5}, {3, 2, 3, 3}, plain, true, false, 211),
        // A DCGAN generator's upsampling: 4x4 kernel, stride 2, padding 1 doubles the size.
        transposed_sample("4x4 kernel, stride 2, padding 1", {2, 3, 4, 3}, {3, 2, 4, 4}, {2, 2, 1, 1, 0, 0, 1, 1, 1},
                          true, false, 221),
        transposed_sample("stride 2, padding 1, output_padding 1x0", {2, 2, 3, 4}, {2, 3, 3, 3},
                          {2, 2, 1, 1, 1, 0, 1, 1, 1}, true, false, 231),
        transposed_sample("stride 3x2, output_padding 2x1, 2x3 kernel", {1, 2, 3, 3}, {2, 2, 2, 3},
                          {3, 2, 0, 1, 2, 1, 1, 1, 1}, true, false, 235),
        transposed_sample("dilation 2, padding 2x1", {2, 2, 4, 4}, {2, 3, 3, 2}, {1, 1, 2, 1, 0, 0, 2, 2, 1}, true,
                          false, 241),
        transposed_sample("groups 2", {2, 4, 3, 4}, {4, 3, 3, 3}, {1, 1, 1, 1, 0, 0, 1, 1, 2}, true, false, 251),
        transposed_sample("1x1, stride 2", {2, 3, 3, 3}, {3, 4, 1, 1}, {2, 2, 0, 0, 1, 1, 1, 1, 1}, true, false, 255),
        transposed_sample("channels-last, stride 2, padding 1", {2, 3, 4, 3}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1, 1, 1},
                          true, true, 261),
        transposed_sample("channels-last, groups 3, stride 2x1", {2, 3, 3, 4}, {3, 1, 3, 2},
                          {2, 1, 1, 0, 0, 0, 1, 1, 3}, true, true, 265),
        {"channels-last weight, NCHW input",
         [](DType t, Device d) {
           TensorList in =
               transposed_inputs(t, d, {2, 3, 3, 3}, {3, 2, 3, 3}, {2, 2, 1, 1, 0, 0, 1, 1, 1}, true, false, 267);
           NoGradGuard g;
           in[1] = channels_last(in[1]);
           return in;
         }},
        {"non-contiguous input",
         [](DType t, Device d) {
           TensorList in =
               transposed_inputs(t, d, {2, 3, 4, 4}, {3, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 1, 1, 1}, true, false, 271);
           in[0] = noncontig(in[0]);
           return in;
         }},
        {"a batch view with a storage offset",
         [](DType t, Device d) {
           TensorList in =
               transposed_inputs(t, d, {3, 3, 5, 5}, {3, 2, 3, 3}, {1, 1, 1, 1, 0, 0, 1, 1, 1}, true, false, 273);
           NoGradGuard g;
           in[0] = in[0].narrow(0, 1, 2);
           return in;
         }},
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{
          conv_transpose2d(in[0], in[1], in[2], {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[8], {p[6], p[7]})};
    };
    r.reference = [](const TensorList& in) {
      return TensorList{ref_conv_transpose2d(in[0], in[1], in[2], param_values(in[3]))};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"input not 4-d",
         [] {
           conv_transpose2d(zeros({3, 8, 8}), zeros({3, 2, 3, 3}));
         },
         {"conv_transpose2d", "4-d", "[3, 8, 8]"}},
        {"weight not 4-d",
         [] {
           conv_transpose2d(zeros({2, 3, 8, 8}), zeros({3, 18}));
         },
         {"conv_transpose2d", "weight", "[C_in, C_out / groups, kH, kW]", "[3, 18]"}},
        {"channel mismatch",
         [] {
           conv_transpose2d(zeros({2, 3, 8, 8}), zeros({4, 2, 3, 3}));
         },
         {"conv_transpose2d", "input has 3 channels, weight expects 4", "[2, 3, 8, 8]", "[4, 2, 3, 3]"}},
        {"groups do not divide input channels",
         [] {
           conv_transpose2d(zeros({2, 3, 8, 8}), zeros({3, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {0, 0}, 2);
         },
         {"conv_transpose2d", "groups 2", "3 channels", "[2, 3, 8, 8]"}},
        {"output_padding not below the stride",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 2, 3, 3}), Tensor(), {2, 2}, {1, 1}, {2, 1});
         },
         {"conv_transpose2d", "output_padding 2x1", "stride 2x2", "[1, 2, 4, 4]"}},
        {"negative output_padding",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 2, 3, 3}), Tensor(), {2, 2}, {0, 0}, {-1, 0});
         },
         {"conv_transpose2d", "output_padding -1x0"}},
        {"padding crops everything",
         [] {
           conv_transpose2d(zeros({1, 2, 2, 2}), zeros({2, 2, 3, 3}), Tensor(), {1, 1}, {2, 2});
         },
         {"conv_transpose2d", "output size 0x0", "not positive", "padding 2x2", "[1, 2, 2, 2]"}},
        {"zero stride",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 2, 3, 3}), Tensor(), {0, 1});
         },
         {"conv_transpose2d", "stride", "0x1"}},
        {"dtype mismatch",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 2, 3, 3}, DType::Float64));
         },
         {"conv_transpose2d", "float32", "float64", "[1, 2, 4, 4]"}},
        {"bias shape",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 3, 3, 3}), zeros({2}));
         },
         {"conv_transpose2d", "bias", "[3]", "[2]"}},
        {"grouped bias shape",
         [] {
           conv_transpose2d(zeros({1, 4, 4, 4}), zeros({4, 3, 3, 3}), zeros({3}), {1, 1}, {0, 0}, {0, 0}, 2);
         },
         {"conv_transpose2d", "bias must have shape [6]", "[3]"}},
        {"output size overflows",
         [] {
           conv_transpose2d(zeros({1, 1, 2, 2}), zeros({1, 1, 2, 2}), Tensor(), {INT64_MAX, 1});
         },
         {"conv_transpose2d", "overflows int64"}},
        {"undefined weight",
         [] {
           conv_transpose2d(zeros({1, 2, 4, 4}), Tensor());
         },
         {"conv_transpose2d", "weight"}},
    };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "conv_transpose2d (no bias)";
    r.dtypes = kFloatTypes;
    r.samples = {
        transposed_sample("4x4 kernel, stride 2, padding 1", {2, 3, 3, 3}, {3, 2, 4, 4}, {2, 2, 1, 1, 0, 0, 1, 1, 1},
                          false, false, 311),
        transposed_sample("channels-last, groups 2, dilation 2, output_padding 1", {2, 4, 3, 3}, {4, 1, 2, 3},
                          {2, 2, 1, 0, 1, 1, 2, 2, 2}, false, true, 321),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[2]);
      return TensorList{
          conv_transpose2d(in[0], in[1], Tensor(), {p[0], p[1]}, {p[2], p[3]}, {p[4], p[5]}, p[8], {p[6], p[7]})};
    };
    r.reference = [](const TensorList& in) {
      return TensorList{ref_conv_transpose2d(in[0], in[1], Tensor(), param_values(in[2]))};
    };
    r.differentiable = {0, 1};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    rows.push_back(std::move(r));
  }
  {
    // conv_transpose1d: x [N, C, L] or [C, L], weight [C_in, C_out / groups, k], bias; params
    // stride, padding, output_padding, dilation, groups. The reference is the 2-d loop at height 1.
    auto sample = [](const std::string& name, Shape xs, Shape ws, std::vector<int64_t> p, uint64_t seed) {
      return Sample{name, [=](DType t, Device d) {
                      const double scale = 1.0 / std::sqrt(static_cast<double>(ws[0] * ws[2]));
                      return TensorList{rnd(xs, t, d, seed), rnd(ws, t, d, seed + 1, scale),
                                        rnd({ws[1] * p[4]}, t, d, seed + 2), params(p, d)};
                    }};
    };
    OpRow r;
    r.name = "conv_transpose1d";
    r.dtypes = kFloatTypes;
    r.samples = {
        sample("k 3", {2, 3, 5}, {3, 4, 3}, {1, 0, 0, 1, 1}, 341),
        sample("k 4, stride 2, padding 1, output_padding 1", {2, 3, 6}, {3, 2, 4}, {2, 1, 1, 1, 1}, 343),
        sample("groups 3, dilation 2", {2, 6, 5}, {6, 1, 3}, {1, 1, 0, 2, 3}, 345),
        sample("unbatched [C, L]", {3, 4}, {3, 2, 2}, {2, 0, 1, 1, 1}, 347),
    };
    r.op = [](const TensorList& in) {
      auto p = param_values(in[3]);
      return TensorList{conv_transpose1d(in[0], in[1], in[2], p[0], p[1], p[2], p[4], p[3])};
    };
    r.reference = [](const TensorList& in) {
      auto p = param_values(in[3]);
      const bool batched = in[0].dim() == 3;
      const Tensor x = (batched ? in[0] : in[0].unsqueeze(0)).unsqueeze(2);
      const Tensor y =
          ref_conv_transpose2d(x, in[1].unsqueeze(2), in[2], {1, p[0], 0, p[1], 0, p[2], 1, p[3], p[4]}).squeeze(2);
      return TensorList{batched ? y : y.squeeze(0)};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    r.errors = {
        {"input not [N, C, L]",
         [] {
           conv_transpose1d(zeros({2, 3, 8, 8}), zeros({3, 4, 3}));
         },
         {"conv_transpose1d", "[N, C, L]", "[2, 3, 8, 8]"}},
        {"weight not 3-d",
         [] {
           conv_transpose1d(zeros({2, 3, 8}), zeros({3, 4, 3, 3}));
         },
         {"conv_transpose1d", "weight", "[3, 4, 3, 3]"}},
        {"channel mismatch",
         [] {
           conv_transpose1d(zeros({2, 3, 8}), zeros({2, 4, 3}));
         },
         {"conv_transpose1d", "input has 3 channels, weight expects 2", "[2, 3, 8]"}},
        {"output_padding not below the stride",
         [] {
           conv_transpose1d(zeros({2, 3, 8}), zeros({3, 4, 3}), Tensor(), 2, 0, 2);
         },
         {"conv_transpose1d", "output_padding 2", "stride 2"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
