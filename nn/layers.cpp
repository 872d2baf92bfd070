// The standard layers: each forward is a core op, each constructor registers PyTorch's parameter
// names and applies PyTorch's default init. extra_repr writes numbers as Python's repr would
// (1e-05, 0.1, 1.0), so printed models match PyTorch's text.
#include "nn/layers.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <typeinfo>

#include "core/autograd.h"
#include "core/ops/factory.h"
#include "core/ops/matmul.h"
#include "core/ops/batch_norm.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/index.h"
#include "core/ops/layer_norm.h"
#include "core/ops/norm.h"
#include "core/ops/pool.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/ops/softmax.h"
#include "kernels/error.h"
#include "kernels/log.h"
#include "nn/init.h"

namespace kiln::nn {

Tensor detail::new_tensor(const char* layer, const Shape& shape) {
  checked_nbytes(shape, kDefaultFloat, layer);
  try {
    return empty(shape);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(std::string(layer) + ": " + e.what());
  }
}

const char* detail::py_bool(bool b) { return b ? "True" : "False"; }

// Python's repr(float): the shortest round-trip digits, fixed notation for exponents in [-4, 16),
// scientific ("1e-05") otherwise.
std::string detail::py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e);
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int a = std::abs(exp);
    out += std::string("e") + (exp < 0 ? "-" : "+") + (a < 10 ? "0" : "") + std::to_string(a);
  }
  return sign + out;
}

std::string detail::py_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

std::string detail::int_or_tuple(Pair p) { return p[0] == p[1] ? std::to_string(p[0]) : py_tuple({p[0], p[1]}); }

std::string detail::int_or_tuple(const Triple& t) {
  return t[0] == t[1] && t[1] == t[2] ? std::to_string(t[0]) : py_tuple({t[0], t[1], t[2]});
}

void detail::check_non_negative(const char* layer, const char* what, int64_t v) {
  if (v < 0) throw Error(std::string(layer) + ": " + what + " must be non-negative, got " + std::to_string(v));
}

void detail::check_eps(const char* layer, double eps) {
  if (!(eps >= 0.0) || !std::isfinite(eps)) {
    throw Error(std::string(layer) + ": eps must be a finite number >= 0, got " + py_float(eps));
  }
}

Tensor detail::filled(const char* layer, const Shape& shape, double value) {
  Tensor t = new_tensor(layer, shape);
  t.fill_(value);
  return t;
}

void detail::check_positive(const char* layer, const char* what, Pair p) {
  if (p[0] <= 0 || p[1] <= 0) {
    throw Error(std::string(layer) + ": " + what + " must be positive, got " + py_tuple({p[0], p[1]}));
  }
}

void detail::check_positive(const char* layer, const char* what, int64_t v) {
  if (v <= 0) throw Error(std::string(layer) + ": " + what + " must be positive, got " + std::to_string(v));
}

void detail::check_positive(const char* layer, const char* what, const Triple& t) {
  if (t[0] <= 0 || t[1] <= 0 || t[2] <= 0) {
    throw Error(std::string(layer) + ": " + what + " must be positive, got " + py_tuple({t[0], t[1], t[2]}));
  }
}

std::string detail::tensor_name(const Module& module, const std::string& name) {
  return module.type_name() + "'s \"" + name + "\"";
}

Tensor detail::member_tensor(const std::string& op, const Module& module, const std::string& name, const Tensor& field,
                             bool parameter) {
  const Tensor t = parameter ? module.get_parameter(name) : module.get_buffer(name);
  if (!t.defined()) throw Error(op + ": " + tensor_name(module, name) + " is undefined");
  if (!field.defined() || field.impl() != t.impl()) {
    throw Error(op + ": the member given for " + tensor_name(module, name) +
                " is not the tensor registered under that name");
  }
  return t;
}

namespace {

using detail::check_eps;
using detail::check_non_negative;
using detail::check_positive;
using detail::filled;
using detail::int_or_tuple;
using detail::new_tensor;
using detail::py_bool;
using detail::py_float;

std::string tuple_str(Pair p) {
  std::string s = "(";
  s += std::to_string(p[0]);
  s += ", ";
  s += std::to_string(p[1]);
  s += ")";
  return s;
}

// A pool's padding: PyTorch's rule, checked here so that a bad layer fails where it is built.
void check_pool_padding(const char* layer, Pair padding, Pair kernel_size) {
  if (padding[0] < 0 || padding[1] < 0 || padding[0] > kernel_size[0] / 2 || padding[1] > kernel_size[1] / 2) {
    throw Error(std::string(layer) + ": padding " + tuple_str(padding) +
                " must be non-negative and at most half the kernel size " + tuple_str(kernel_size));
  }
}

void check_pool_padding(const char* layer, int64_t padding, int64_t kernel_size) {
  if (padding < 0 || padding > kernel_size / 2) {
    throw Error(std::string(layer) + ": padding " + std::to_string(padding) +
                " must be non-negative and at most half the kernel size " + std::to_string(kernel_size));
  }
}

}  // namespace

// --- Linear ---------------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  check_non_negative("Linear", "in_features", in_features);
  check_non_negative("Linear", "out_features", out_features);
  weight = register_parameter("weight", new_tensor("Linear", {out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", new_tensor("Linear", {out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + py_bool(bias.defined());
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Bilinear::Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias)
    : in1_features(in1_features), in2_features(in2_features), out_features(out_features) {
  check_non_negative("Bilinear", "in1_features", in1_features);
  check_non_negative("Bilinear", "in2_features", in2_features);
  check_non_negative("Bilinear", "out_features", out_features);
  weight = register_parameter("weight", new_tensor("Bilinear", {out_features, in1_features, in2_features}));
  if (bias) this->bias = register_parameter("bias", new_tensor("Bilinear", {out_features}));
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = in1_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in1_features)) : 0.0;
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

std::string Bilinear::extra_repr() const {
  return "in1_features=" + std::to_string(in1_features) + ", in2_features=" + std::to_string(in2_features) +
         ", out_features=" + std::to_string(out_features) + ", bias=" + py_bool(bias.defined());
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) { return bilinear(x1, x2, weight, bias); }

// --- Embedding ------------------------------------------------------------------------------------

Tensor detail::embedding_table(const char* layer, int64_t num_embeddings, int64_t embedding_dim,
                               std::optional<int64_t>& padding_idx, std::optional<double> max_norm, double norm_type) {
  check_non_negative(layer, "num_embeddings", num_embeddings);
  check_non_negative(layer, "embedding_dim", embedding_dim);
  if (max_norm && !(*max_norm >= 0.0 && std::isfinite(*max_norm))) {
    throw Error(std::string(layer) + ": max_norm must be a finite number >= 0, got " + py_float(*max_norm));
  }
  if (!(norm_type > 0.0) || !std::isfinite(norm_type)) {
    throw Error(std::string(layer) + ": norm_type must be a finite number > 0, got " + py_float(norm_type));
  }
  if (padding_idx) {
    padding_idx = normalize_padding_idx(layer, *padding_idx, num_embeddings,
                                        std::to_string(num_embeddings) + " x " + std::to_string(embedding_dim));
  }
  Tensor weight = new_tensor(layer, {num_embeddings, embedding_dim});
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
  return weight;
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     std::optional<double> max_norm, double norm_type)
    : num_embeddings(num_embeddings),
      embedding_dim(embedding_dim),
      padding_idx(padding_idx),
      max_norm(max_norm),
      norm_type(norm_type) {
  weight = register_parameter("weight", detail::embedding_table("Embedding", num_embeddings, embedding_dim,
                                                                this->padding_idx, max_norm, norm_type));
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  if (max_norm) s += ", max_norm=" + py_float(*max_norm);
  if (norm_type != 2.0) s += ", norm_type=" + py_float(norm_type);
  return s;
}

Tensor Embedding::forward(const Tensor& indices) {
  if (max_norm) detail::renorm_rows("Embedding", weight, indices, *max_norm, norm_type);
  return embedding(weight, indices, padding_idx);
}

EmbeddingBag::EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::optional<double> max_norm,
                           double norm_type, BagMode mode, bool include_last_offset, std::optional<int64_t> padding_idx)
    : num_embeddings(num_embeddings),
      embedding_dim(embedding_dim),
      max_norm(max_norm),
      norm_type(norm_type),
      mode(mode),
      include_last_offset(include_last_offset),
      padding_idx(padding_idx) {
  weight = register_parameter("weight", detail::embedding_table("EmbeddingBag", num_embeddings, embedding_dim,
                                                                this->padding_idx, max_norm, norm_type));
}

std::string EmbeddingBag::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (max_norm) s += ", max_norm=" + py_float(*max_norm);
  if (norm_type != 2.0) s += ", norm_type=" + py_float(norm_type);
  // PyTorch's form: the mode quoted, include_last_offset left out.
  s += std::string(", mode=") + (mode == BagMode::Sum ? "'sum'" : mode == BagMode::Mean ? "'mean'" : "'max'");
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  return s;
}

Tensor EmbeddingBag::forward(const Tensor& indices, const Tensor& offsets, const Tensor& per_sample_weights) {
  if (max_norm) detail::renorm_rows("EmbeddingBag", weight, indices, *max_norm, norm_type);
  return embedding_bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx);
}

// The rows the indices name (a count per row, by scatter_add: the device does it, no host read),
// their norms, and one in-place scale of the weight: 1 for the others and for rows within
// max_norm, max_norm / (norm + 1e-7) (PyTorch's guard) for the rest.
void detail::renorm_rows(const char* layer, const Tensor& weight, const Tensor& indices, double max_norm,
                         double norm_type) {
  NoGradGuard no_grad;
  const int64_t num_embeddings = weight.size(0);
  if (!indices.defined()) throw Error(std::string(layer) + ": the indices are an undefined tensor");
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32) {
    throw DTypeError(std::string(layer) + ": indices must be int64 or int32, got " + dtype_name(indices.dtype()));
  }
  const Tensor flat = indices.reshape({-1}).to(DType::Int64);
  const Tensor ones_like_flat = ones({flat.numel()}, TensorOptions(weight.dtype(), weight.device()));
  Tensor used;
  try {
    used =
        scatter_add(zeros({num_embeddings}, TensorOptions(weight.dtype(), weight.device())), 0, flat, ones_like_flat);
  } catch (const IndexError& e) {
    throw IndexError(std::string(layer) + ": an index outside [0, " + std::to_string(num_embeddings) + ") (" +
                     e.what() + ")");
  }
  const Tensor norms =
      norm_type == 2.0 ? sqrt(sum(weight * weight, {1})) : pow(sum(pow(abs(weight), norm_type), {1}), 1.0 / norm_type);
  const Tensor over = logical_and(gt(used, 0.0), gt(norms, max_norm));
  Tensor w = weight;
  w.mul_(where(over, max_norm / (norms + 1e-7), 1.0).unsqueeze(1));
}

// --- Dropout, activations, Flatten ------------------------------------------------------------------

Dropout::Dropout(double p) : p(p) {
  if (!(p >= 0.0 && p <= 1.0)) throw Error("Dropout: probability p must be in [0, 1], got " + py_float(p));
}

std::string Dropout::extra_repr() const { return "p=" + py_float(p) + ", inplace=False"; }

// Skipping the op in eval and at p = 0 also leaves the generator untouched there.
Tensor Dropout::forward(const Tensor& x) { return is_training() && p > 0.0 ? dropout(x, p, true) : x; }

std::string GELU::extra_repr() const {
  return std::string("approximate='") + (approximate == GeluApprox::Tanh ? "tanh" : "none") + "'";
}

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

LeakyReLU::LeakyReLU(double negative_slope) : negative_slope(negative_slope) {
  if (!std::isfinite(negative_slope)) {
    throw Error("LeakyReLU: negative_slope must be finite, got " + py_float(negative_slope));
  }
}

std::string LeakyReLU::extra_repr() const { return "negative_slope=" + py_float(negative_slope); }

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }

Tensor SiLU::forward(const Tensor& x) { return silu(x); }

Softplus::Softplus(double beta, double threshold) : beta(beta), threshold(threshold) {
  if (!(beta > 0.0) || !std::isfinite(beta) || std::isnan(threshold)) {
    throw Error("Softplus: beta must be a finite number > 0 and threshold a number, got beta=" + py_float(beta) +
                " threshold=" + py_float(threshold));
  }
}

std::string Softplus::extra_repr() const { return "beta=" + py_float(beta) + ", threshold=" + py_float(threshold); }

Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }

Tensor Tanh::forward(const Tensor& x) { return tanh(x); }

Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }

ELU::ELU(double alpha) : alpha(alpha) {
  if (!std::isfinite(alpha)) throw Error("ELU: alpha must be finite, got " + py_float(alpha));
}

Hardtanh::Hardtanh(double min_val, double max_val) : min_val(min_val), max_val(max_val) {
  if (!std::isfinite(min_val) || !std::isfinite(max_val) || min_val > max_val) {
    throw Error("Hardtanh: needs finite min_val <= max_val, got " + py_float(min_val) + " and " + py_float(max_val));
  }
}

CELU::CELU(double alpha) : alpha(alpha) {
  if (!std::isfinite(alpha) || alpha == 0.0)
    throw Error("CELU: alpha must be finite and nonzero, got " + py_float(alpha));
}

Softshrink::Softshrink(double lambd) : lambd(lambd) {
  if (!(lambd >= 0.0) || !std::isfinite(lambd)) {
    throw Error("Softshrink: lambd must be a finite number >= 0, got " + py_float(lambd));
  }
}

Hardshrink::Hardshrink(double lambd) : lambd(lambd) {
  if (!(lambd >= 0.0) || !std::isfinite(lambd)) {
    throw Error("Hardshrink: lambd must be a finite number >= 0, got " + py_float(lambd));
  }
}

Threshold::Threshold(double threshold, double value) : threshold(threshold), value(value) {
  if (std::isnan(threshold)) throw Error("Threshold: threshold must not be NaN");
}

PReLU::PReLU(int64_t num_parameters, double init) : num_parameters(num_parameters) {
  if (num_parameters <= 0) {
    throw Error("PReLU: num_parameters must be positive, got " + std::to_string(num_parameters));
  }
  weight = register_parameter("weight", filled("PReLU", {num_parameters}, init));
}

Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim); }

Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim); }

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim, end_dim); }

// --- CosineSimilarity, PairwiseDistance -----------------------------------------------------------

CosineSimilarity::CosineSimilarity(int64_t dim, double eps) : dim(dim), eps(eps) {
  if (!(eps >= 0.0)) throw Error("CosineSimilarity: eps must be >= 0, got " + num_str(eps));
}

Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2) { return cosine_similarity(x1, x2, dim, eps); }

PairwiseDistance::PairwiseDistance(double p, double eps, bool keepdim) : p(p), eps(eps), keepdim(keepdim) {
  if (!(p >= 1.0)) throw Error("PairwiseDistance: the norm's order p must be >= 1 or inf, got " + num_str(p));
}

Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2) {
  return pairwise_distance(x1, x2, p, eps, keepdim);
}

// --- pools --------------------------------------------------------------------------------------------

MaxPool2d::MaxPool2d(Pair kernel_size, Pair stride, Pair padding, Pair dilation, bool ceil_mode)
    : kernel_size(kernel_size),
      stride(stride == Pair{0, 0} ? kernel_size : stride),
      padding(padding),
      dilation(dilation),
      ceil_mode(ceil_mode) {
  check_positive("MaxPool2d", "kernel_size", kernel_size);
  check_positive("MaxPool2d", "stride", this->stride);
  check_positive("MaxPool2d", "dilation", dilation);
  check_pool_padding("MaxPool2d", padding, kernel_size);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) + ", stride=" + int_or_tuple(stride) +
         ", padding=" + int_or_tuple(padding) + ", dilation=" + int_or_tuple(dilation) +
         ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode); }

std::pair<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& x) {
  return max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
}

AvgPool2d::AvgPool2d(Pair kernel_size, Pair stride, Pair padding, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor_override)
    : kernel_size(kernel_size),
      stride(stride == Pair{0, 0} ? kernel_size : stride),
      padding(padding),
      ceil_mode(ceil_mode),
      count_include_pad(count_include_pad),
      divisor_override(divisor_override) {
  check_positive("AvgPool2d", "kernel_size", kernel_size);
  check_positive("AvgPool2d", "stride", this->stride);
  check_pool_padding("AvgPool2d", padding, kernel_size);
  ops::check_divisor("AvgPool2d", divisor_override);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + int_or_tuple(kernel_size) + ", stride=" + int_or_tuple(stride) +
         ", padding=" + int_or_tuple(padding);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Pair output_size) : output_size(output_size) {
  check_positive("AdaptiveAvgPool2d", "output_size", output_size);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + int_or_tuple(output_size); }

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Pair output_size) : output_size(output_size) {
  check_positive("AdaptiveMaxPool2d", "output_size", output_size);
}

std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + int_or_tuple(output_size); }

Tensor AdaptiveMaxPool2d::forward(const Tensor& x) { return adaptive_max_pool2d(x, output_size); }

std::pair<Tensor, Tensor> AdaptiveMaxPool2d::forward_with_indices(const Tensor& x) {
  return adaptive_max_pool2d_with_indices(x, output_size);
}

namespace {

void check_norm_type(const char* layer, double norm_type) {
  if (!std::isfinite(norm_type) || norm_type == 0.0) {
    throw Error(std::string(layer) + ": norm_type must be finite and nonzero, got " + py_float(norm_type));
  }
}

}  // namespace

LPPool2d::LPPool2d(double norm_type, Pair kernel_size, Pair stride, bool ceil_mode)
    : norm_type(norm_type), kernel_size(kernel_size), stride(stride), ceil_mode(ceil_mode) {
  check_norm_type("LPPool2d", norm_type);
  check_positive("LPPool2d", "kernel_size", kernel_size);
  if (stride[0] != 0 || stride[1] != 0) check_positive("LPPool2d", "stride", stride);
}

std::string LPPool2d::extra_repr() const {
  const bool no_stride = stride[0] == 0 && stride[1] == 0;
  return "norm_type=" + py_float(norm_type) + ", kernel_size=" + int_or_tuple(kernel_size) +
         ", stride=" + (no_stride ? std::string("None") : int_or_tuple(stride)) + ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor LPPool2d::forward(const Tensor& x) { return lp_pool2d(x, norm_type, kernel_size, stride, ceil_mode); }

MaxPool1d::MaxPool1d(int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode)
    : kernel_size(kernel_size),
      stride(stride == 0 ? kernel_size : stride),
      padding(padding),
      dilation(dilation),
      ceil_mode(ceil_mode) {
  check_positive("MaxPool1d", "kernel_size", kernel_size);
  check_positive("MaxPool1d", "stride", this->stride);
  check_positive("MaxPool1d", "dilation", dilation);
  check_pool_padding("MaxPool1d", padding, kernel_size);
}

std::string MaxPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_size) + ", stride=" + std::to_string(stride) +
         ", padding=" + std::to_string(padding) + ", dilation=" + std::to_string(dilation) +
         ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor MaxPool1d::forward(const Tensor& x) { return max_pool1d(x, kernel_size, stride, padding, dilation, ceil_mode); }

std::pair<Tensor, Tensor> MaxPool1d::forward_with_indices(const Tensor& x) {
  return max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
}

Shape detail::unpool_size(const char* layer, const Shape& output_size, size_t spatial) {
  if (output_size.empty()) return {};
  if (output_size.size() < spatial || output_size.size() > spatial + 2) {
    throw ShapeError(std::string(layer) + ": output_size " + shape_str(output_size) + " must give the " +
                     std::to_string(spatial) + " spatial sizes (or the whole output shape)");
  }
  return Shape(output_size.end() - static_cast<std::ptrdiff_t>(spatial), output_size.end());
}

MaxUnpool1d::MaxUnpool1d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_size(kernel_size), stride(stride == 0 ? kernel_size : stride), padding(padding) {}

std::string MaxUnpool1d::extra_repr() const {
  return "kernel_size=" + detail::py_tuple({kernel_size}) + ", stride=" + detail::py_tuple({stride}) +
         ", padding=" + detail::py_tuple({padding});
}

Tensor MaxUnpool1d::forward(const Tensor& x, const Tensor& indices, const Shape& output_size) {
  const Shape size = detail::unpool_size("MaxUnpool1d", output_size, 1);
  return max_unpool1d(x, indices, kernel_size, stride, padding,
                      size.empty() ? std::nullopt : std::optional<int64_t>(size[0]));
}

MaxUnpool2d::MaxUnpool2d(Pair kernel_size, Pair stride, Pair padding)
    : kernel_size(kernel_size), stride(stride == Pair{0, 0} ? kernel_size : stride), padding(padding) {}

std::string MaxUnpool2d::extra_repr() const {
  return "kernel_size=" + detail::py_tuple({kernel_size[0], kernel_size[1]}) +
         ", stride=" + detail::py_tuple({stride[0], stride[1]}) +
         ", padding=" + detail::py_tuple({padding[0], padding[1]});
}

Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, const Shape& output_size) {
  const Shape size = detail::unpool_size("MaxUnpool2d", output_size, 2);
  return max_unpool2d(x, indices, kernel_size, stride, padding,
                      size.empty() ? std::nullopt : std::optional<Pair>(Pair{size[0], size[1]}));
}

AvgPool1d::AvgPool1d(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode, bool count_include_pad)
    : kernel_size(kernel_size),
      stride(stride == 0 ? kernel_size : stride),
      padding(padding),
      ceil_mode(ceil_mode),
      count_include_pad(count_include_pad) {
  check_positive("AvgPool1d", "kernel_size", kernel_size);
  check_positive("AvgPool1d", "stride", this->stride);
  check_pool_padding("AvgPool1d", padding, kernel_size);
}

// As PyTorch prints it: AvgPool1d keeps its sizes as 1-tuples.
std::string AvgPool1d::extra_repr() const {
  return "kernel_size=(" + std::to_string(kernel_size) + ",), stride=(" + std::to_string(stride) + ",), padding=(" +
         std::to_string(padding) + ",)";
}

Tensor AvgPool1d::forward(const Tensor& x) {
  return avg_pool1d(x, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t output_size) : output_size(output_size) {
  check_positive("AdaptiveAvgPool1d", "output_size", output_size);
}

Tensor AdaptiveAvgPool1d::forward(const Tensor& x) { return adaptive_avg_pool1d(x, output_size); }

AdaptiveMaxPool1d::AdaptiveMaxPool1d(int64_t output_size) : output_size(output_size) {
  check_positive("AdaptiveMaxPool1d", "output_size", output_size);
}

Tensor AdaptiveMaxPool1d::forward(const Tensor& x) { return adaptive_max_pool1d(x, output_size); }

std::pair<Tensor, Tensor> AdaptiveMaxPool1d::forward_with_indices(const Tensor& x) {
  return adaptive_max_pool1d_with_indices(x, output_size);
}

LPPool1d::LPPool1d(double norm_type, int64_t kernel_size, int64_t stride, bool ceil_mode)
    : norm_type(norm_type), kernel_size(kernel_size), stride(stride), ceil_mode(ceil_mode) {
  check_norm_type("LPPool1d", norm_type);
  check_positive("LPPool1d", "kernel_size", kernel_size);
  if (stride != 0) check_positive("LPPool1d", "stride", stride);
}

std::string LPPool1d::extra_repr() const {
  return "norm_type=" + py_float(norm_type) + ", kernel_size=" + std::to_string(kernel_size) +
         ", stride=" + (stride == 0 ? std::string("None") : std::to_string(stride)) +
         ", ceil_mode=" + py_bool(ceil_mode);
}

Tensor LPPool1d::forward(const Tensor& x) { return lp_pool1d(x, norm_type, kernel_size, stride, ceil_mode); }

// --- containers -------------------------------------------------------------------------------------

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<std::shared_ptr<UnaryModule>>& modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](size_t i) const {
  if (i >= modules_.size()) {
    throw IndexError("Sequential: index " + std::to_string(i) + " is out of range for " +
                     std::to_string(modules_.size()) + " modules");
  }
  return modules_[i];
}

// A BatchNorm1d, 2d or 3d followed by a ReLU (these exact types, not subclasses, which may forward
// otherwise) runs as batch norm with a ReLU epilogue: one pass over the activation where there were
// two, and the same bits.
Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    UnaryModule& m = *modules_[i];
    const UnaryModule* next = i + 1 < modules_.size() ? modules_[i + 1].get() : nullptr;
    const std::type_info& type = typeid(m);
    const bool batch_norm = type == typeid(BatchNorm1d) || type == typeid(BatchNorm2d) || type == typeid(BatchNorm3d);
    if (next && batch_norm && typeid(*next) == typeid(ReLU)) {
      y = static_cast<BatchNorm&>(m)(y, BatchNormEpilogue{.residual = {}, .relu = true});
      modules_[i + 1]->run_forward_pre_hooks();  // the ReLU, which the epilogue applies
      ++i;
      continue;
    }
    y = m(y);
  }
  return y;
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  if (i >= modules_.size()) {
    throw IndexError("ModuleList: index " + std::to_string(i) + " is out of range for " +
                     std::to_string(modules_.size()) + " modules");
  }
  return modules_[i];
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [n, m] : named_children())
    if (n == name) return true;
  return false;
}

std::shared_ptr<Module> ModuleDict::at(const std::string& name) const {
  for (const auto& [n, m] : named_children())
    if (n == name) return m;
  throw Error("ModuleDict: no module named \"" + name + "\"");
}

}  // namespace kiln::nn
