// One row per op of autocast's policy table (core/autocast.cpp): sample inputs on a device, the op,
// and the output dtype the test expects under autocast — written here independently of the table,
// so a wrong table entry fails the test instead of defining what is right. Shared by the CPU test
// (tests/core/test_autocast.cpp) and the CUDA one (tests/cuda/test_autocast_cuda.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "tests/bitwise.h"

namespace kiln::test {

struct AutocastRow {
  std::string op;                                       // the table's name for the op
  std::function<TensorList(Device, DType)> inputs;      // inputs, given the autocast dtype
  std::function<Tensor(const TensorList&)> call;        // the op itself
  // Expected output dtype given the autocast dtype; also the dtype the explicitly cast reference
  // gives every floating input.
  std::function<DType(DType)> out_dtype;
};

inline std::vector<AutocastRow> autocast_rows() {
  using D = DType;
  auto f32 = [](Device d) { return TensorOptions(D::Float32, d); };
  auto rnd = [f32](const Shape& s, Device d) { return randn(s, f32(d)); };
  auto pos = [f32](const Shape& s, Device d) { return rand(s, f32(d)) + 0.5; };
  auto low = [](D lp) { return lp; };
  auto fp32 = [](D) { return D::Float32; };
  std::vector<AutocastRow> rows;
  // Low precision: float32 inputs are cast down (weights from a leaf that requires grad).
  rows.push_back({"matmul", [=](Device d, D) { return TensorList{rnd({3, 4}, d), rnd({4, 5}, d)}; },
                  [](const TensorList& in) { return matmul(in[0], in[1]); }, low});
  rows.push_back({"linear",
                  [=](Device d, D) {
                    return TensorList{rnd({2, 3, 4}, d), rnd({5, 4}, d).set_requires_grad(true), rnd({5}, d)};
                  },
                  [](const TensorList& in) { return linear(in[0], in[1], in[2]); }, low});
  rows.push_back(
      {"bilinear",
       [=](Device d, D) {
         return TensorList{rnd({3, 4}, d), rnd({3, 5}, d), rnd({2, 4, 5}, d).set_requires_grad(true), rnd({2}, d)};
       },
       [](const TensorList& in) { return bilinear(in[0], in[1], in[2], in[3]); }, low});
  rows.push_back({"linear_gelu",
                  [=](Device d, D) {
                    return TensorList{rnd({2, 3, 4}, d), rnd({8, 4}, d).set_requires_grad(true), rnd({8}, d)};
                  },
                  [](const TensorList& in) { return linear_gelu(in[0], in[1], in[2]); }, low});
  rows.push_back({"gelu_mlp",
                  [=](Device d, D) {
                    return TensorList{rnd({2, 3, 4}, d), rnd({8, 4}, d), rnd({8}, d), rnd({4, 8}, d), rnd({4}, d)};
                  },
                  [](const TensorList& in) { return gelu_mlp(in[0], in[1], in[2], in[3], in[4]); }, low});
  rows.push_back({"conv2d", [=](Device d, D) { return TensorList{rnd({1, 2, 5, 5}, d), rnd({3, 2, 3, 3}, d), rnd({3}, d)}; },
                  [](const TensorList& in) { return conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}); }, low});
  rows.push_back({"conv_transpose2d",
                  [=](Device d, D) {
                    return TensorList{rnd({1, 2, 4, 4}, d), rnd({2, 3, 3, 3}, d), rnd({3}, d)};
                  },
                  [](const TensorList& in) {
                    return conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 1}, {1, 1});
                  },
                  low});
  rows.push_back({"conv3d",
                  [=](Device d, D) {
                    return TensorList{rnd({1, 2, 4, 4, 4}, d), rnd({3, 2, 2, 3, 3}, d), rnd({3}, d)};
                  },
                  [](const TensorList& in) {
                    return conv3d(in[0], in[1], in[2], {1, 1, 1}, {1, 1, 1});
                  },
                  low});
  rows.push_back({"conv_transpose3d",
                  [=](Device d, D) {
                    return TensorList{rnd({1, 2, 3, 3, 3}, d), rnd({2, 3, 2, 3, 3}, d), rnd({3}, d)};
                  },
                  [](const TensorList& in) {
                    return conv_transpose3d(in[0], in[1], in[2], {2, 2, 2}, {1, 1, 1}, {1, 1, 1});
                  },
                  low});
  rows.push_back({"scaled_dot_product_attention",
                  [=](Device d, D) { return TensorList{rnd({1, 2, 5, 8}, d), rnd({1, 2, 5, 8}, d), rnd({1, 2, 5, 8}, d)}; },
                  [](const TensorList& in) {
                    return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, /*is_causal=*/true);
                  },
                  low});
  // Float32: low-precision inputs are cast up.
  auto lp_in = [=](const Shape& s) { return [=](Device d, D lp) { return TensorList{rnd(s, d).to(lp)}; }; };
  auto lp_pos = [=](const Shape& s) { return [=](Device d, D lp) { return TensorList{pos(s, d).to(lp)}; }; };
  rows.push_back({"softmax", lp_in({3, 5}), [](const TensorList& in) { return softmax(in[0], 1); }, fp32});
  rows.push_back({"log_softmax", lp_in({3, 5}), [](const TensorList& in) { return log_softmax(in[0], -1); }, fp32});
  rows.push_back({"layer_norm",
                  [=](Device d, D lp) { return TensorList{rnd({2, 6}, d).to(lp), rnd({6}, d).to(lp), rnd({6}, d)}; },
                  [](const TensorList& in) { return layer_norm(in[0], {6}, in[1], in[2]); }, fp32});
  rows.push_back({"group_norm",
                  [=](Device d, D lp) {
                    return TensorList{rnd({2, 4, 3}, d).to(lp), rnd({4}, d).to(lp), rnd({4}, d)};
                  },
                  [](const TensorList& in) { return group_norm(in[0], 2, in[1], in[2]); }, fp32});
  rows.push_back({"rms_norm",
                  [=](Device d, D lp) {
                    return TensorList{rnd({2, 6}, d).to(lp), rnd({6}, d).to(lp)};
                  },
                  [](const TensorList& in) { return rms_norm(in[0], {6}, in[1]); }, fp32});
  rows.push_back({"cross_entropy",
                  [=](Device d, D lp) {
                    return TensorList{rnd({4, 5}, d).to(lp), tensor(std::vector<int64_t>{1, 0, 4, 2}, {4}, TensorOptions(D::Int64, d))};
                  },
                  [](const TensorList& in) { return cross_entropy(in[0], in[1]); }, fp32});
  rows.push_back({"mse_loss", [=](Device d, D lp) { return TensorList{rnd({3, 4}, d).to(lp), rnd({3, 4}, d)}; },
                  [](const TensorList& in) { return mse_loss(in[0], in[1]); }, fp32});
  auto pair = [=](Device d, D lp) { return TensorList{rnd({3, 4}, d).to(lp), rnd({3, 4}, d)}; };
  rows.push_back({"l1_loss", pair, [](const TensorList& in) { return l1_loss(in[0], in[1]); }, fp32});
  rows.push_back({"smooth_l1_loss", pair, [](const TensorList& in) { return smooth_l1_loss(in[0], in[1]); }, fp32});
  rows.push_back({"huber_loss", pair, [](const TensorList& in) { return huber_loss(in[0], in[1]); }, fp32});
  rows.push_back({"binary_cross_entropy_with_logits",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), pos({3, 4}, d) * 0.1};
                  },
                  [](const TensorList& in) { return binary_cross_entropy_with_logits(in[0], in[1]); }, fp32});
  rows.push_back({"nll_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({4, 5}, d).to(lp),
                                      tensor(std::vector<int64_t>{1, 0, 4, 2}, {4}, TensorOptions(D::Int64, d))};
                  },
                  [](const TensorList& in) { return nll_loss(in[0], in[1]); }, fp32});
  rows.push_back({"binary_cross_entropy",
                  [=](Device d, D lp) {
                    return TensorList{sigmoid(rnd({3, 4}, d)).to(lp), sigmoid(rnd({3, 4}, d))};
                  },
                  [](const TensorList& in) { return binary_cross_entropy(in[0], in[1]); }, fp32});
  rows.push_back({"kl_div",
                  [=](Device d, D lp) {
                    return TensorList{log_softmax(rnd({3, 4}, d), 1).to(lp), softmax(rnd({3, 4}, d), 1)};
                  },
                  [](const TensorList& in) { return kl_div(in[0], in[1], Reduction::BatchMean); }, fp32});
  rows.push_back({"cosine_embedding_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({4, 6}, d).to(lp), rnd({4, 6}, d),
                                      tensor(std::vector<int64_t>{1, -1, -1, 1}, {4}, TensorOptions(D::Int64, d))};
                  },
                  [](const TensorList& in) { return cosine_embedding_loss(in[0], in[1], in[2], 0.1); }, fp32});
  rows.push_back({"margin_ranking_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({5}, d).to(lp), rnd({5}, d).to(lp), sign(rnd({5}, d))};
                  },
                  [](const TensorList& in) { return margin_ranking_loss(in[0], in[1], in[2], 0.2); }, fp32});
  rows.push_back({"triplet_margin_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({4, 6}, d).to(lp), rnd({4, 6}, d), rnd({4, 6}, d)};
                  },
                  [](const TensorList& in) { return triplet_margin_loss(in[0], in[1], in[2]); }, fp32});
  rows.push_back({"poisson_nll_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), pos({3, 4}, d)};
                  },
                  [](const TensorList& in) { return poisson_nll_loss(in[0], in[1], true, true); }, fp32});
  rows.push_back({"gaussian_nll_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), rnd({3, 4}, d), pos({3}, d).to(lp)};
                  },
                  [](const TensorList& in) { return gaussian_nll_loss(in[0], in[1], in[2]); }, fp32});
  rows.push_back({"soft_margin_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), sign(rnd({3, 4}, d))};
                  },
                  [](const TensorList& in) { return soft_margin_loss(in[0], in[1]); }, fp32});
  rows.push_back({"hinge_embedding_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), sign(rnd({3, 4}, d))};
                  },
                  [](const TensorList& in) { return hinge_embedding_loss(in[0], in[1], 0.5); }, fp32});
  rows.push_back({"multilabel_soft_margin_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp), gt(rnd({3, 4}, d), 0.0).to(D::Float32), pos({4}, d)};
                  },
                  [](const TensorList& in) { return multilabel_soft_margin_loss(in[0], in[1], in[2]); }, fp32});
  rows.push_back({"multi_margin_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({3, 4}, d).to(lp),
                                      tensor(std::vector<int64_t>{2, 0, 3}, {3}, TensorOptions(D::Int64, d)),
                                      pos({4}, d).to(lp)};
                  },
                  [](const TensorList& in) { return multi_margin_loss(in[0], in[1], 2, 1.0, in[2]); }, fp32});
  rows.push_back({"multilabel_margin_loss",
                  [=](Device d, D lp) {
                    return TensorList{rnd({2, 4}, d).to(lp), tensor(std::vector<int64_t>{3, 0, -1, 1, 2, -1, 0, 0},
                                                                    {2, 4}, TensorOptions(D::Int64, d))};
                  },
                  [](const TensorList& in) { return multilabel_margin_loss(in[0], in[1]); }, fp32});
  rows.push_back({"ctc_loss",
                  [=](Device d, D lp) {
                    return TensorList{log_softmax(rnd({5, 2, 4}, d), -1).to(lp),
                                      tensor(std::vector<int64_t>{1, 2, 3, 3}, {2, 2}, TensorOptions(D::Int64, d))};
                  },
                  [](const TensorList& in) {
                    return ctc_loss(in[0], in[1], {5, 5}, {2, 2});
                  },
                  fp32});
  rows.push_back({"sum", lp_in({3, 40}), [](const TensorList& in) { return sum(in[0], {1}); }, fp32});
  rows.push_back({"logsumexp", lp_in({3, 40}), [](const TensorList& in) { return logsumexp(in[0], {1}); }, fp32});
  rows.push_back({"cumsum", lp_in({3, 40}), [](const TensorList& in) { return cumsum(in[0], 1); }, fp32});
  rows.push_back({"cumprod", lp_in({3, 40}), [](const TensorList& in) { return cumprod(in[0], 1); }, fp32});
  rows.push_back(
      {"vector_norm", lp_in({3, 40}), [](const TensorList& in) { return vector_norm(in[0], 2.0, {1}); }, fp32});
  rows.push_back({"cosine_similarity",
                  [=](Device d, D) {
                    return TensorList{rnd({3, 8}, d), rnd({3, 8}, d)};
                  },
                  [](const TensorList& in) { return cosine_similarity(in[0], in[1]); }, fp32});
  rows.push_back({"cdist",
                  [=](Device d, D) {
                    return TensorList{rnd({30, 8}, d), rnd({4, 8}, d)};
                  },
                  [](const TensorList& in) { return cdist(in[0], in[1]); }, fp32});
  rows.push_back({"pdist",
                  [=](Device d, D lp) {
                    return TensorList{rnd({5, 3}, d).to(lp)};
                  },
                  [](const TensorList& in) { return pdist(in[0]); }, fp32});
  rows.push_back({"mean", lp_in({3, 40}), [](const TensorList& in) { return mean(in[0]); }, fp32});
  rows.push_back({"var", lp_in({3, 40}), [](const TensorList& in) { return var(in[0], {1}); }, fp32});
  rows.push_back({"exp", lp_in({3, 4}), [](const TensorList& in) { return exp(in[0]); }, fp32});
  rows.push_back({"log", lp_pos({3, 4}), [](const TensorList& in) { return log(in[0]); }, fp32});
  rows.push_back({"log1p", lp_pos({3, 4}), [](const TensorList& in) { return log1p(in[0]); }, fp32});
  rows.push_back({"expm1", lp_in({3, 4}), [](const TensorList& in) { return expm1(in[0]); }, fp32});
  rows.push_back({"rsqrt", lp_pos({3, 4}), [](const TensorList& in) { return rsqrt(in[0]); }, fp32});
  rows.push_back({"log2", lp_pos({3, 4}), [](const TensorList& in) { return log2(in[0]); }, fp32});
  rows.push_back({"log10", lp_pos({3, 4}), [](const TensorList& in) { return log10(in[0]); }, fp32});
  rows.push_back({"reciprocal", lp_pos({3, 4}), [](const TensorList& in) { return reciprocal(in[0]); }, fp32});
  rows.push_back({"tan", lp_in({3, 4}), [](const TensorList& in) { return tan(in[0]); }, fp32});
  rows.push_back({"sinh", lp_in({3, 4}), [](const TensorList& in) { return sinh(in[0]); }, fp32});
  rows.push_back({"cosh", lp_in({3, 4}), [](const TensorList& in) { return cosh(in[0]); }, fp32});
  // In (-1, 1), asin's, acos's and erfinv's domain.
  auto unit = [=](const Shape& s) { return [=](Device d, D lp) { return TensorList{tanh(rnd(s, d)).to(lp)}; }; };
  rows.push_back({"asin", unit({3, 4}), [](const TensorList& in) { return asin(in[0]); }, fp32});
  rows.push_back({"acos", unit({3, 4}), [](const TensorList& in) { return acos(in[0]); }, fp32});
  rows.push_back({"erfinv", unit({3, 4}), [](const TensorList& in) { return erfinv(in[0]); }, fp32});
  rows.push_back({"softplus", lp_in({3, 4}), [](const TensorList& in) { return softplus(in[0], 2.0, 1.0); }, fp32});
  // The Fourier transforms (complex values as (re, im) pairs in a last dim of 2).
  rows.push_back({"fft", lp_in({3, 8, 2}), [](const TensorList& in) { return fft(in[0]); }, fp32});
  rows.push_back({"ifft", lp_in({3, 70, 2}), [](const TensorList& in) { return ifft(in[0]); }, fp32});
  rows.push_back({"rfft", lp_in({3, 100}), [](const TensorList& in) { return rfft(in[0]); }, fp32});
  rows.push_back({"irfft", lp_in({3, 5, 2}), [](const TensorList& in) { return irfft(in[0]); }, fp32});
  rows.push_back({"hfft", lp_in({3, 5, 2}), [](const TensorList& in) { return hfft(in[0], 9); }, fp32});
  rows.push_back({"ihfft", lp_in({3, 9}), [](const TensorList& in) { return ihfft(in[0]); }, fp32});
  rows.push_back({"fft2", lp_in({2, 4, 6, 2}), [](const TensorList& in) { return fft2(in[0]); }, fp32});
  rows.push_back({"ifft2", lp_in({2, 4, 6, 2}), [](const TensorList& in) { return ifft2(in[0]); }, fp32});
  rows.push_back({"rfft2", lp_in({2, 4, 6}), [](const TensorList& in) { return rfft2(in[0]); }, fp32});
  rows.push_back({"irfft2", lp_in({2, 4, 4, 2}), [](const TensorList& in) { return irfft2(in[0]); }, fp32});
  rows.push_back({"fftn", lp_in({2, 3, 4, 2}), [](const TensorList& in) { return fftn(in[0]); }, fp32});
  rows.push_back({"ifftn", lp_in({2, 3, 4, 2}), [](const TensorList& in) { return ifftn(in[0]); }, fp32});
  rows.push_back({"rfftn", lp_in({2, 3, 4}), [](const TensorList& in) { return rfftn(in[0]); }, fp32});
  rows.push_back({"irfftn", lp_in({2, 3, 3, 2}), [](const TensorList& in) { return irfftn(in[0]); }, fp32});
  rows.push_back({"hfft2", lp_in({2, 4, 3, 2}), [](const TensorList& in) { return hfft2(in[0]); }, fp32});
  rows.push_back({"ihfft2", lp_in({2, 4, 6}), [](const TensorList& in) { return ihfft2(in[0]); }, fp32});
  rows.push_back({"hfftn", lp_in({2, 3, 3, 2}), [](const TensorList& in) { return hfftn(in[0]); }, fp32});
  rows.push_back({"ihfftn", lp_in({2, 3, 4}), [](const TensorList& in) { return ihfftn(in[0]); }, fp32});
  rows.push_back({"stft",
                  [=](Device d, D lp) {
                    return TensorList{rnd({2, 40}, d).to(lp), hann_window(16, true, f32(d)).to(lp)};
                  },
                  [](const TensorList& in) { return stft(in[0], 16, 4, std::nullopt, in[1]); }, fp32});
  rows.push_back({"istft",
                  [=](Device d, D lp) {
                    return TensorList{rnd({9, 11, 2}, d).to(lp), hann_window(16, true, f32(d)).to(lp)};
                  },
                  [](const TensorList& in) { return istft(in[0], 16, 4, std::nullopt, in[1]); }, fp32});
  rows.push_back({"pow", [=](Device d, D lp) { return TensorList{pos({3, 4}, d).to(lp), pos({3, 4}, d).to(lp)}; },
                  [](const TensorList& in) { return pow(in[0], 2.5) + pow(in[0], in[1]) + pow(1.5, in[1]); }, fp32});
  // Widest: a low-precision and a float32 input give float32.
  auto mixed = [=](const Shape& s) {
    return [=](Device d, D lp) { return TensorList{rnd(s, d).to(lp), pos(s, d)}; };
  };
  rows.push_back({"add", mixed({3, 4}), [](const TensorList& in) { return add(in[0], in[1]); }, fp32});
  rows.push_back({"sub", mixed({3, 4}), [](const TensorList& in) { return sub(in[0], in[1]); }, fp32});
  rows.push_back({"mul", mixed({3, 4}), [](const TensorList& in) { return mul(in[0], in[1]); }, fp32});
  rows.push_back({"div", mixed({3, 4}), [](const TensorList& in) { return div(in[0], in[1]); }, fp32});
  rows.push_back({"maximum", mixed({3, 4}), [](const TensorList& in) { return maximum(in[0], in[1]); }, fp32});
  rows.push_back({"minimum", mixed({3, 4}), [](const TensorList& in) { return minimum(in[0], in[1]); }, fp32});
  rows.push_back({"atan2", mixed({3, 4}), [](const TensorList& in) { return atan2(in[0], in[1]); }, fp32});
  rows.push_back({"cat", mixed({3, 4}), [](const TensorList& in) { return cat(in, 0); }, fp32});
  rows.push_back({"stack", mixed({3, 4}), [](const TensorList& in) { return stack(in, 1); }, fp32});
  rows.push_back({"where", mixed({3, 4}), [](const TensorList& in) { return where(in[1] > 1.0, in[0], in[1]); }, fp32});
  // An image in the low precision read at a float32 grid; a low-precision tensor given float32
  // values at two rows.
  rows.push_back({"grid_sample",
                  [=](Device d, D lp) {
                    return TensorList{rnd({1, 2, 4, 4}, d).to(lp), sub(rand({1, 3, 3, 2}, f32(d)), 0.5)};
                  },
                  [](const TensorList& in) { return grid_sample(in[0], in[1]); }, fp32});
  rows.push_back(
      {"index_put",
       [=](Device d, D lp) {
         return TensorList{rnd({3, 4}, d).to(lp), rnd({2, 4}, d)};
       },
       [](const TensorList& in) {
         const Tensor rows_at = tensor(std::vector<int64_t>{2, 0}, {2}, TensorOptions(DType::Int64, in[0].device()));
         return index_put(in[0], {rows_at}, in[1]);
       },
       fp32});
  return rows;
}

// The reference: every floating input cast explicitly (float64 would stay, none is used here).
inline TensorList cast_floating(const TensorList& in, DType dtype) {
  TensorList out;
  for (const Tensor& t : in) out.push_back(t.defined() && t.is_floating_point() ? t.detach().to(dtype) : t);
  return out;
}

// cross_entropy's Float32Result policy on `device`: under autocast, float16/bfloat16 logits give a
// float32 loss and a gradient in the logits' dtype with the bits of the float32 path (the logits
// cast to float32 on the tape, whose backward rounds the float32 gradient). Every reduction, with
// and without label smoothing and an ignored target. Returns what differed ("" when nothing).
inline std::string cross_entropy_float32_result_mismatches(Device device) {
  std::string bad;
  const Tensor target = tensor(std::vector<int64_t>{3, 0, 36, -100, 12, 7}, {6}, TensorOptions(DType::Int64, device));
  for (DType lp : {DType::BFloat16, DType::Float16}) {
    for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      for (double eps : {0.0, 0.1}) {
        const std::string where = std::string(dtype_name(lp)) + " reduction " + std::to_string(static_cast<int>(red)) +
                                  " smoothing " + std::to_string(eps) + ": ";
        // Drawn on the CPU, so every device gets the same values.
        Generator gen(11);
        const Tensor logits = (randn({6, 37}, TensorOptions(DType::Float32), gen) * 4.0).to(lp).to(device);
        const Tensor seed = (red == Reduction::None ? randn({6}, TensorOptions(DType::Float32), gen) : full({}, 0.37))
                                .to(device);
        Tensor a = logits.detach().set_requires_grad(true);
        Tensor loss_a;
        {
          AutocastGuard guard(device.type, lp);
          loss_a = cross_entropy(a, target, red, -100, eps);
        }
        Tensor b = logits.detach().set_requires_grad(true);
        Tensor loss_b = cross_entropy(b.to(DType::Float32), target, red, -100, eps);
        if (loss_a.dtype() != DType::Float32) bad += where + "the loss is " + dtype_name(loss_a.dtype()) + "; ";
        if (!bitwise_equal(loss_a.detach().to(Device::cpu()), loss_b.detach().to(Device::cpu()))) {
          bad += where + "the losses differ; ";
        }
        loss_a.backward(seed);
        loss_b.backward(seed);
        if (a.grad().dtype() != lp) bad += where + "the gradient is " + dtype_name(a.grad().dtype()) + "; ";
        if (!bitwise_equal(a.grad().to(Device::cpu()), b.grad().to(Device::cpu()))) bad += where + "the gradients differ; ";
      }
    }
  }
  return bad;
}

}  // namespace kiln::test
