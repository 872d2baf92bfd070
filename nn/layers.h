// The standard layers, PyTorch-shaped: same class names, constructor arguments, default init,
// parameter/buffer names and printed form (extra_repr as PyTorch writes it, with True/False and
// Python float reprs), so a printed kiln model reads like its PyTorch twin and state dicts map
// 1:1. Optional parameters (bias=false, affine=false) are simply not registered, as PyTorch's None.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops/activation.h"
#include "core/ops/batch_norm.h"
#include "core/ops/conv.h"
#include "core/ops/distance.h"
#include "core/ops/embedding.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "kernels/error.h"
#include "nn/conv.h"
#include "nn/fractional_pool.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pool3d.h"

namespace kiln::nn {

namespace detail {
// An uninitialized float32 parameter or buffer of `shape` for `layer`. Layer sizes come from
// callers: the element and byte counts are checked (a ShapeError naming the layer when they
// overflow int64), and a failed allocation is an OutOfMemoryError naming the layer and the shape
// rather than a std::bad_alloc or a wrapped size.
Tensor new_tensor(const char* layer, const Shape& shape);
// new_tensor filled with `value`.
Tensor filled(const char* layer, const Shape& shape, double value);
// How PyTorch's extra_repr writes a bool ("True", "False") and a float (Python's repr: the
// shortest round-trip digits, "1e-05", "0.1", "1.0").
const char* py_bool(bool b);
std::string py_float(double v);
// A tuple as Python writes it: "(8,)", "(4, 8)".
std::string py_tuple(const Shape& s);
// A Pair or a Triple as PyTorch prints what users usually pass: an int when the entries agree
// ("3"), else a tuple ("(3, 2)").
std::string int_or_tuple(Pair p);
std::string int_or_tuple(const Triple& t);
// A layer's size argument must be >= 0, a norm's eps a finite number >= 0 (kiln::Error naming
// the layer otherwise).
void check_non_negative(const char* layer, const char* what, int64_t v);
// Embedding's and EmbeddingBag's table, [num_embeddings, embedding_dim] from N(0, 1) with the
// padding row zeroed, after the sizes and options are checked (errors naming `layer`); padding_idx
// becomes the row it names.
Tensor embedding_table(const char* layer, int64_t num_embeddings, int64_t embedding_dim,
                       std::optional<int64_t>& padding_idx, std::optional<double> max_norm, double norm_type);
// Scales in place (without grad) every row of `weight` that `indices` name whose norm_type-norm
// exceeds max_norm, to norm max_norm.
void renorm_rows(const char* layer, const Tensor& weight, const Tensor& indices, double max_norm, double norm_type);
// A layer's size argument (every entry of a Pair or Triple) must be > 0 (kiln::Error naming the
// layer).
void check_positive(const char* layer, const char* what, Pair p);
void check_positive(const char* layer, const char* what, int64_t v);
void check_positive(const char* layer, const char* what, const Triple& t);
void check_eps(const char* layer, double eps);
// `Linear's "weight"`: how parametrize and prune name a module's tensor in errors.
std::string tensor_name(const Module& module, const std::string& name);
// The module's parameter (or buffer) `name`, which `field`, the C++ member that forward reads,
// must hold itself (parametrize and prune write through &field, so a copy of the handle would
// never be seen); an Error naming op when it is not, or when the tensor is undefined.
Tensor member_tensor(const std::string& op, const Module& module, const std::string& name, const Tensor& field,
                     bool parameter = true);
// The spatial part of a MaxUnpool's output_size: the last `spatial` entries (PyTorch also takes the
// whole output shape); empty for the default size.
Shape unpool_size(const char* layer, const Shape& output_size, size_t spatial);
}  // namespace detail

// y = x @ weight^T + bias. weight [out, in]: kaiming_uniform_(a = sqrt(5)); bias [out]:
// uniform(-1/sqrt(in), 1/sqrt(in)).
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // PyTorch's reset_parameters: the default init again.
  void reset_parameters();

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when bias = false
};

// y = x1^T weight x2 + bias for x1 [*, in1] and x2 [*, in2]: bilinear. weight [out, in1, in2] and
// bias [out] ~ uniform(-1/sqrt(in1), 1/sqrt(in1)), PyTorch's init. A module of two inputs (not a
// UnaryModule): call it as bilinear(x1, x2).
class Bilinear : public Module {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  std::string type_name() const override { return "Bilinear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) {
    run_forward_pre_hooks();
    return forward(x1, x2);
  }
  // PyTorch's reset_parameters: the default init again.
  void reset_parameters();

  int64_t in1_features, in2_features, out_features;
  Tensor weight, bias;  // bias undefined when bias = false
};

// A lookup table: weight [num_embeddings, embedding_dim] ~ N(0, 1); forward picks rows by
// integer indices of any shape.
class Embedding : public UnaryModule {
 public:
  // padding_idx (negative counts from the end; kept as the row it names): that row starts at zero
  // and takes no gradient, as PyTorch's Embedding(..., padding_idx). max_norm: before each lookup,
  // every row the indices name whose norm_type-norm exceeds it is scaled in place (without grad)
  // to norm max_norm, as PyTorch renormalizes; so a forward changes the weight, and a graph that
  // saved the weight before (an earlier forward not yet backpropagated) no longer backpropagates.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  std::optional<double> max_norm;
  double norm_type;
  Tensor weight;
};

// Bags of embedding rows summed, averaged or maxed (embedding_bag) from a table made as
// Embedding's (N(0, 1) draws, a zero padding row, the same max_norm renormalization before each
// lookup). forward(indices) takes [B, L] bags; 1-d indices take offsets (each bag's start), and
// mode Sum may take per_sample_weights.
class EmbeddingBag : public Module {
 public:
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::optional<double> max_norm = std::nullopt,
               double norm_type = 2.0, BagMode mode = BagMode::Mean, bool include_last_offset = false,
               std::optional<int64_t> padding_idx = std::nullopt);
  std::string type_name() const override { return "EmbeddingBag"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices, const Tensor& offsets = Tensor(), const Tensor& per_sample_weights = Tensor());
  Tensor operator()(const Tensor& indices, const Tensor& offsets = Tensor(),
                    const Tensor& per_sample_weights = Tensor()) {
    run_forward_pre_hooks();
    return forward(indices, offsets, per_sample_weights);
  }

  int64_t num_embeddings, embedding_dim;
  std::optional<double> max_norm;
  double norm_type;
  BagMode mode;
  bool include_last_offset;
  std::optional<int64_t> padding_idx;
  Tensor weight;
};

// Identity in eval (and for p = 0); in training zeroes with probability p and scales by 1/(1-p).
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double p;
};

// Channel dropout (dropout1d, dropout2d, dropout3d in training; the identity in eval): whole
// channels of [N, C, *spatial] (or [C, *spatial]) inputs drop together. AlphaDropout and
// FeatureAlphaDropout (alpha_dropout, feature_alpha_dropout) keep a SELU network's activations at
// zero mean and unit variance instead.
#define KILN_CHANNEL_DROPOUT(Name, fn)                                                                 \
  class Name : public Dropout {                                                                        \
   public:                                                                                             \
    explicit Name(double p = 0.5) : Dropout(p) {}                                                      \
    std::string type_name() const override { return #Name; }                                           \
    Tensor forward(const Tensor& x) override { return is_training() && p > 0.0 ? fn(x, p, true) : x; } \
  };
KILN_CHANNEL_DROPOUT(Dropout1d, dropout1d)
KILN_CHANNEL_DROPOUT(Dropout2d, dropout2d)
KILN_CHANNEL_DROPOUT(Dropout3d, dropout3d)
KILN_CHANNEL_DROPOUT(AlphaDropout, alpha_dropout)
KILN_CHANNEL_DROPOUT(FeatureAlphaDropout, feature_alpha_dropout)
#undef KILN_CHANNEL_DROPOUT

class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::None) : approximate(approximate) {}
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  GeluApprox approximate;
};

class ReLU : public UnaryModule {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
};

// x where x > 0, else negative_slope * x.
class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double negative_slope;
};

// x * sigmoid(x), the "swish" of EfficientNet and of the SwiGLU feed-forward layers.
class SiLU : public UnaryModule {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override;
};

// log(1 + exp(beta x)) / beta, linear where beta x > threshold.
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double beta, threshold;
};

class Tanh : public UnaryModule {
 public:
  std::string type_name() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override;
};

class Sigmoid : public UnaryModule {
 public:
  std::string type_name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override;
};

// The composed activations (core/ops/activation.h), printed as PyTorch's.
class ELU : public UnaryModule {
 public:
  explicit ELU(double alpha = 1.0);
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override { return "alpha=" + detail::py_float(alpha); }
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }

  double alpha;
};

class Hardtanh : public UnaryModule {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  std::string type_name() const override { return "Hardtanh"; }
  std::string extra_repr() const override {
    return "min_val=" + detail::py_float(min_val) + ", max_val=" + detail::py_float(max_val);
  }
  Tensor forward(const Tensor& x) override { return hardtanh(x, min_val, max_val); }

  double min_val, max_val;
};

// celu with its alpha (!= 0).
class CELU : public UnaryModule {
 public:
  explicit CELU(double alpha = 1.0);
  std::string type_name() const override { return "CELU"; }
  std::string extra_repr() const override { return "alpha=" + detail::py_float(alpha); }
  Tensor forward(const Tensor& x) override { return celu(x, alpha); }

  double alpha;
};

// softshrink and hardshrink with their lambd (>= 0), printed as PyTorch does: the bare number.
class Softshrink : public UnaryModule {
 public:
  explicit Softshrink(double lambd = 0.5);
  std::string type_name() const override { return "Softshrink"; }
  std::string extra_repr() const override { return detail::py_float(lambd); }
  Tensor forward(const Tensor& x) override { return softshrink(x, lambd); }

  double lambd;
};

class Hardshrink : public UnaryModule {
 public:
  explicit Hardshrink(double lambd = 0.5);
  std::string type_name() const override { return "Hardshrink"; }
  std::string extra_repr() const override { return detail::py_float(lambd); }
  Tensor forward(const Tensor& x) override { return hardshrink(x, lambd); }

  double lambd;
};

// threshold(x, threshold, value).
class Threshold : public UnaryModule {
 public:
  Threshold(double threshold, double value);
  std::string type_name() const override { return "Threshold"; }
  std::string extra_repr() const override {
    return "threshold=" + detail::py_float(threshold) + ", value=" + detail::py_float(value);
  }
  Tensor forward(const Tensor& x) override { return kiln::threshold(x, threshold, value); }

  double threshold, value;
};

// glu along dim (PyTorch's default: the last).
class GLU : public UnaryModule {
 public:
  explicit GLU(int64_t dim = -1) : dim(dim) {}
  std::string type_name() const override { return "GLU"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  Tensor forward(const Tensor& x) override { return glu(x, dim); }

  int64_t dim;
};

// Activations without options: SELU, ReLU6, Hardsigmoid, Hardswish, Mish, LogSigmoid, Softsign,
// Tanhshrink.
#define KILN_ACTIVATION(Name, fn)                              \
  class Name : public UnaryModule {                            \
   public:                                                     \
    std::string type_name() const override { return #Name; }   \
    Tensor forward(const Tensor& x) override { return fn(x); } \
  };
KILN_ACTIVATION(SELU, selu)
KILN_ACTIVATION(ReLU6, relu6)
KILN_ACTIVATION(Hardsigmoid, hardsigmoid)
KILN_ACTIVATION(Hardswish, hardswish)
KILN_ACTIVATION(Mish, mish)
KILN_ACTIVATION(LogSigmoid, logsigmoid)
KILN_ACTIVATION(Softsign, softsign)
KILN_ACTIVATION(Tanhshrink, tanhshrink)
#undef KILN_ACTIVATION

// A learned negative slope: parameter weight [num_parameters] (1, or the input's channels), every
// value `init`.
class PReLU : public UnaryModule {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  std::string type_name() const override { return "PReLU"; }
  std::string extra_repr() const override { return "num_parameters=" + std::to_string(num_parameters); }
  Tensor forward(const Tensor& x) override { return prelu(x, weight); }

  int64_t num_parameters;
  Tensor weight;
};

// softmax / log_softmax along `dim`.
class Softmax : public UnaryModule {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  Tensor forward(const Tensor& x) override;

  int64_t dim;
};

class Softmin : public UnaryModule {
 public:
  explicit Softmin(int64_t dim) : dim(dim) {}
  std::string type_name() const override { return "Softmin"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  Tensor forward(const Tensor& x) override { return softmin(x, dim); }

  int64_t dim;
};

class LogSoftmax : public UnaryModule {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  Tensor forward(const Tensor& x) override;

  int64_t dim;
};

// cosine_similarity(x1, x2, dim, eps) as a module (PyTorch's CosineSimilarity: dim 1, eps 1e-8).
class CosineSimilarity : public Module {
 public:
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8);
  std::string type_name() const override { return "CosineSimilarity"; }
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) {
    run_forward_pre_hooks();
    return forward(x1, x2);
  }

  int64_t dim;
  double eps;
};

// pairwise_distance(x1, x2, p, eps, keepdim) as a module (PyTorch's PairwiseDistance).
class PairwiseDistance : public Module {
 public:
  explicit PairwiseDistance(double p = 2.0, double eps = 1e-6, bool keepdim = false);
  std::string type_name() const override { return "PairwiseDistance"; }
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) {
    run_forward_pre_hooks();
    return forward(x1, x2);
  }

  double p, eps;
  bool keepdim;
};

// Returns its input: a placeholder where a model's configuration leaves a layer out.
class Identity : public UnaryModule {
 public:
  std::string type_name() const override { return "Identity"; }
  Tensor forward(const Tensor& x) override { return x; }
};

class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  int64_t start_dim, end_dim;
};

// stride {0, 0} means "equal to kernel_size", PyTorch's default.
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0}, Pair dilation = {1, 1},
                     bool ceil_mode = false);
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // The values and each one's index in its input plane (PyTorch's return_indices=True), for
  // MaxUnpool2d.
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  Pair kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0}, bool ceil_mode = false,
                     bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Pair kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;  // the windows' sums divided by it (non-zero)
};

class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(Pair{output_size, output_size}) {}
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  Pair output_size;
};

class AdaptiveMaxPool2d : public UnaryModule {
 public:
  explicit AdaptiveMaxPool2d(Pair output_size);
  explicit AdaptiveMaxPool2d(int64_t output_size) : AdaptiveMaxPool2d(Pair{output_size, output_size}) {}
  std::string type_name() const override { return "AdaptiveMaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  // The values and each one's index in its input plane (PyTorch's return_indices=True).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  Pair output_size;
};

// lp_pool2d: (sum over each window of x^norm_type)^(1 / norm_type); stride {0, 0} (PyTorch's None)
// means "equal to kernel_size".
class LPPool2d : public UnaryModule {
 public:
  LPPool2d(double norm_type, Pair kernel_size, Pair stride = {0, 0}, bool ceil_mode = false);
  LPPool2d(double norm_type, int64_t kernel_size, int64_t stride = 0, bool ceil_mode = false)
      : LPPool2d(norm_type, Pair{kernel_size, kernel_size}, Pair{stride, stride}, ceil_mode) {}
  std::string type_name() const override { return "LPPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double norm_type;
  Pair kernel_size, stride;
  bool ceil_mode;
};

// 1-d pooling over [N, C, L] or [C, L]; stride 0 means "equal to kernel_size".
class MaxPool1d : public UnaryModule {
 public:
  explicit MaxPool1d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                     bool ceil_mode = false);
  std::string type_name() const override { return "MaxPool1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  int64_t kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

// max_unpool1d and max_unpool2d: a MaxPool's values put back at their indices (zeros elsewhere),
// at the default size or at output_size (the spatial dims, or the whole shape as PyTorch accepts).
class MaxUnpool1d : public Module {
 public:
  explicit MaxUnpool1d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  std::string type_name() const override { return "MaxUnpool1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x, const Tensor& indices, const Shape& output_size = {});
  Tensor operator()(const Tensor& x, const Tensor& indices, const Shape& output_size = {}) {
    run_forward_pre_hooks();
    return forward(x, indices, output_size);
  }

  int64_t kernel_size, stride, padding;
};

class MaxUnpool2d : public Module {
 public:
  explicit MaxUnpool2d(Pair kernel_size, Pair stride = {0, 0}, Pair padding = {0, 0});
  std::string type_name() const override { return "MaxUnpool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x, const Tensor& indices, const Shape& output_size = {});
  Tensor operator()(const Tensor& x, const Tensor& indices, const Shape& output_size = {}) {
    run_forward_pre_hooks();
    return forward(x, indices, output_size);
  }

  Pair kernel_size, stride, padding;
};

class AvgPool1d : public UnaryModule {
 public:
  explicit AvgPool1d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  std::string type_name() const override { return "AvgPool1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  int64_t kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool1d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool1d(int64_t output_size);
  std::string type_name() const override { return "AdaptiveAvgPool1d"; }
  std::string extra_repr() const override { return "output_size=" + std::to_string(output_size); }
  Tensor forward(const Tensor& x) override;

  int64_t output_size;
};

class AdaptiveMaxPool1d : public UnaryModule {
 public:
  explicit AdaptiveMaxPool1d(int64_t output_size);
  std::string type_name() const override { return "AdaptiveMaxPool1d"; }
  std::string extra_repr() const override { return "output_size=" + std::to_string(output_size); }
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

  int64_t output_size;
};

class LPPool1d : public UnaryModule {
 public:
  LPPool1d(double norm_type, int64_t kernel_size, int64_t stride = 0, bool ceil_mode = false);
  std::string type_name() const override { return "LPPool1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  double norm_type;
  int64_t kernel_size, stride;  // stride 0: PyTorch's None, the kernel size
  bool ceil_mode;
};

// Chains UnaryModules; children are named "0", "1", ... in order.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<UnaryModule>>& modules);
  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& x) override;

  void push_back(std::shared_ptr<UnaryModule> m);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // An IndexError when out of range.
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const;
  // The i-th module as M; a kiln::Error when it is another type.
  template <class M> std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) throw Error("Sequential: module " + std::to_string(i) + " is a " + (*this)[i]->type_name());
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

// A list of modules of any kind (children "0", "1", ...), as torch.nn.ModuleList: holds, never
// runs; prints a run of alike children once ("(0-11): 12 x Block(...)").
class ModuleList : public Module {
 public:
  std::string type_name() const override { return "ModuleList"; }
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  bool str_groups_repeats() const override { return true; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Named modules in insertion order, as torch.nn.ModuleDict: holds, never runs.
class ModuleDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
  void insert(const std::string& name, std::shared_ptr<Module> m) { register_module(name, std::move(m)); }
  bool contains(const std::string& name) const;
  // A kiln::Error naming the key when absent.
  std::shared_ptr<Module> at(const std::string& name) const;
};

}  // namespace kiln::nn
