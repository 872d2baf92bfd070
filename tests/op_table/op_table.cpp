// The table's registry, tolerances (CPU and CUDA) and the helpers rows are written with. Needs
// no test framework: gpu_bench and bench_cases link it too.
#include "tests/op_table/op_table.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <tuple>

namespace kiln::test {
// The table's row order (CTest's list, the parity runner's): families grouped, elementwise first.
const std::vector<RowFamily>& row_families() {
  static const std::vector<RowFamily> families = {
      {"elementwise", add_elementwise_rows},
      {"copy", add_copy_rows},
      {"math", add_math_rows},
      {"reduce", add_reduce_rows},
      {"scan", add_scan_rows},
      {"einsum", add_einsum_rows},
      {"distance", add_distance_rows},
      {"topk", add_topk_rows},
      {"shape", add_shape_rows},
      {"index", add_index_rows},
      {"search", add_search_rows},
      {"triangle", add_triangle_rows},
      {"view", add_view_rows},
      {"random", add_random_rows},
      {"factory", add_factory_rows},
      {"fold", add_fold_rows},
      {"matmul", add_matmul_rows},
      {"conv", add_conv_rows},
      {"pool", add_pool_rows},
      {"softmax", add_softmax_rows},
      {"activation", add_activation_rows},
      {"layer_norm", add_layer_norm_rows},
      {"norm", add_norm_rows},
      {"special", add_special_rows},
      {"polynomial", add_polynomial_rows},
      {"interpolate", add_interpolate_rows},
      {"batch_norm", add_batch_norm_rows},
      {"cross_entropy", add_cross_entropy_rows},
      {"ctc_loss", add_ctc_loss_rows},
      {"scatter_reduce", add_scatter_reduce_rows},
      {"grid_sample", add_grid_sample_rows},
      {"volume", add_volume_rows},
      {"other", add_other_rows},
      {"join", add_join_rows},
      {"scatter_into", add_scatter_into_rows},
      {"blas", add_blas_rows},
      {"linalg", add_linalg_rows},
      {"spectral", add_spectral_rows},
      {"fft", add_fft_rows},
      {"pointwise", add_pointwise_rows},
      {"mse_loss", add_mse_loss_rows},
      {"loss", add_loss_rows},
      {"margin_loss", add_margin_loss_rows},
      {"embedding", add_embedding_rows},
      {"dropout", add_dropout_rows},
      {"attention", add_attention_rows},
      {"foreach", add_foreach_rows},
  };
  return families;
}

const std::vector<OpRow>& op_table() {
  static const std::vector<OpRow> rows = [] {
    std::vector<OpRow> r;
    for (const RowFamily& f : row_families()) {
      const size_t first = r.size();
      f.add(r);
      for (size_t i = first; i < r.size(); ++i) r[i].family = f.family;
    }
    return r;
  }();
  return rows;
}

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::Float64: return {1e-12, 1e-10};
    case DType::Float32: return {1e-5, 1e-5};
    case DType::Float16: return {1e-3, 1e-3};
    case DType::BFloat16: return {1e-2, 1e-2};
    default: return {0, 0};
  }
}

// The reasons rows cite with cuda_float32_floor (each becomes the row's `why`).
const char* const kCudaWhySumOrder =
    "float32 sums: the GPU adds in another order than the CPU (block trees and warp shuffles in float, the CPU "
    "accumulating in double), and rtol 1e-5 (~80 ulps) leaves no room for a rounding difference a sum carries; "
    "1e-4 is still three orders tighter than an indexing or formula bug";
const char* const kCudaWhyLibm =
    "float32 transcendental functions: CUDA's expf/logf/sinf/cosf/tanhf/erff/rsqrtf/powf are within a few ulps "
    "of glibc's but not equal, and rtol 1e-5 (~80 ulps) leaves no room for that difference once later arithmetic "
    "carries it; 1e-4 is still three orders tighter than a formula bug";
const char* const kCudaWhySumOrderAndLibm =
    "float32 sums of transcendental terms (exp, log, rsqrt): the GPU adds in another order than the CPU and "
    "CUDA's expf/logf/rsqrtf are within a few ulps of glibc's but not equal; rtol 1e-5 (~80 ulps) leaves no room "
    "for either, 1e-4 is still three orders tighter than an indexing or formula bug";

CudaTolerance cuda_float32_floor(const char* why) { return {{{DType::Float32, {1e-5, 1e-4}}}, why}; }

// The CPU rule (the row's own tolerance for the sample dtype, or the default; for integer samples
// with a float output, a mean or a cast, the output dtype's default), then the row's CUDA floor for
// the output dtype.
Tolerance cuda_forward_tolerance(const OpRow& row, DType sample_dtype, DType out_dtype) {
  auto it = row.tolerance.find(sample_dtype);
  Tolerance tol = it != row.tolerance.end() ? it->second
                                            : default_tolerance(is_floating(sample_dtype) ? sample_dtype : out_dtype);
  auto floor = row.cuda_tolerance.at_least.find(out_dtype);
  if (floor != row.cuda_tolerance.at_least.end()) {
    tol.atol = std::max(tol.atol, floor->second.atol);
    tol.rtol = std::max(tol.rtol, floor->second.rtol);
  }
  return tol;
}

// Gradients are compared a little looser than forward outputs, for every row: the gradient of a
// broadcast operand is a sum over the broadcast dims (again in another order on the GPU), and for
// float16/bfloat16 a gradient is the end of a chain of roundings in the input dtype (saved output,
// cotangent product, cast back), where a one-ulp difference upstream can become two.
Tolerance cuda_gradient_tolerance(const OpRow& row, DType sample_dtype, DType grad_dtype) {
  Tolerance tol = cuda_forward_tolerance(row, sample_dtype, grad_dtype);
  if (grad_dtype == DType::Float32) {
    tol.atol = std::max(tol.atol, 1e-5);
    tol.rtol = std::max(tol.rtol, 1e-4);
  } else if (grad_dtype == DType::Float16 || grad_dtype == DType::BFloat16) {
    tol.atol *= 2;
    tol.rtol *= 2;
  }
  return tol;
}

Tensor rnd(const Shape& shape, DType dtype, Device device, uint64_t seed, double scale) {
  Generator& g = default_generator(Device::cpu());
  PhiloxState saved = g.state();
  g.manual_seed(seed);
  Tensor t;
  if (is_floating(dtype)) {
    t = (randn(shape, TensorOptions(DType::Float64)) * scale).to(dtype);
  } else if (dtype == DType::Bool) {
    t = randint(0, 2, shape).to(DType::Bool);
  } else if (dtype == DType::UInt8) {
    t = randint(0, 10, shape).to(dtype);
  } else {
    t = randint(-5, 6, shape).to(dtype);
  }
  g.set_state(saved);
  return t.to(device);
}

Tensor rnd_range(const Shape& shape, DType dtype, Device device, uint64_t seed, double lo, double hi) {
  Generator& g = default_generator(Device::cpu());
  PhiloxState saved = g.state();
  g.manual_seed(seed);
  Tensor t = (rand(shape, TensorOptions(DType::Float64)) * (hi - lo) + lo).to(dtype);
  g.set_state(saved);
  return t.to(device);
}

Tensor rnd_distinct(const Shape& shape, DType dtype, Device device, uint64_t seed) {
  int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0);
  // Fisher-Yates with a small LCG: deterministic and independent of kiln's generator.
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = n - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t j = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(i + 1));
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
  // Values stay exact in every dtype: small integers for int and half types, scaled for floats.
  bool small = dtype == DType::Float16 || dtype == DType::BFloat16 || !is_floating(dtype);
  for (double& x : v) x = small ? x - static_cast<double>(n / 2) : (x - static_cast<double>(n / 2)) * 0.25;
  if (dtype == DType::UInt8) for (double& x : v) x += static_cast<double>(n / 2);
  return from_values(v, shape).to(dtype).to(device);
}

Tensor noncontig(const Tensor& t) {
  NoGradGuard g;
  if (t.dim() == 0) return t;
  Shape wide = t.sizes();
  wide.back() *= 2;
  Tensor buf = zeros(wide, TensorOptions(t.dtype(), t.device()));
  Tensor view = buf.slice(-1, 0, wide.back(), 2);
  view.copy_(t);
  return view;
}

std::vector<double> values(const Tensor& t) { return t.to_vector_double(); }

double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

Tensor from_values(const std::vector<double>& v, const Shape& shape, DType dtype) {
  // Through 1-d and a reshape: a vector makes a 1-d tensor, and `shape` may be 0-d.
  return tensor(v, {}, TensorOptions(dtype)).reshape(shape);
}

Shape unravel(int64_t linear, const Shape& shape) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : linear % shape[d];
    linear = shape[d] == 0 ? 0 : linear / shape[d];
  }
  return idx;
}

int64_t ravel(const Shape& index, const Shape& shape) {
  int64_t l = 0;
  for (size_t d = 0; d < shape.size(); ++d) l = l * shape[d] + index[d];
  return l;
}

Tensor ref_map(const TensorList& inputs, const std::function<double(const std::vector<double>&)>& fn, DType out_dtype) {
  Shape out_shape;
  for (const Tensor& t : inputs) {
    const Shape& s = t.sizes();
    if (s.size() > out_shape.size()) out_shape.insert(out_shape.begin(), s.size() - out_shape.size(), 1);
    for (size_t i = 0; i < s.size(); ++i) {
      size_t o = out_shape.size() - s.size() + i;
      if (out_shape[o] == 1) out_shape[o] = s[i];
    }
  }
  std::vector<std::vector<double>> vals;
  for (const Tensor& t : inputs) vals.push_back(values(t));
  int64_t n = shape_numel(out_shape);
  std::vector<double> out(static_cast<size_t>(n));
  std::vector<double> args(inputs.size());
  for (int64_t i = 0; i < n; ++i) {
    Shape idx = unravel(i, out_shape);
    for (size_t a = 0; a < inputs.size(); ++a) {
      const Shape& s = inputs[a].sizes();
      Shape sub(s.size());
      for (size_t k = 0; k < s.size(); ++k) {
        size_t o = out_shape.size() - s.size() + k;
        sub[k] = s[k] == 1 ? 0 : idx[o];
      }
      args[a] = vals[a][static_cast<size_t>(ravel(sub, s))];
    }
    out[static_cast<size_t>(i)] = fn(args);
  }
  return from_values(out, out_shape, out_dtype);
}

Tensor ref_reduce(const Tensor& x, const Shape& dims, bool keepdim,
                  const std::function<double(const std::vector<double>&)>& fn, DType out_dtype) {
  const Shape& s = x.sizes();
  std::vector<bool> red(s.size(), dims.empty());
  for (int64_t d : dims) red[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(s.size()) : d)] = true;
  Shape kept_shape, out_shape;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!red[d]) {
      kept_shape.push_back(s[d]);
      out_shape.push_back(s[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  std::vector<double> xv = values(x);
  std::vector<std::vector<double>> groups(static_cast<size_t>(shape_numel(kept_shape)));
  for (int64_t i = 0; i < static_cast<int64_t>(xv.size()); ++i) {
    Shape idx = unravel(i, s);
    Shape kept;
    for (size_t d = 0; d < s.size(); ++d)
      if (!red[d]) kept.push_back(idx[d]);
    groups[static_cast<size_t>(ravel(kept, kept_shape))].push_back(xv[static_cast<size_t>(i)]);
  }
  std::vector<double> out;
  for (auto& g : groups) out.push_back(fn(g));
  return from_values(out, out_shape, out_dtype);
}

std::string expect_error(const ErrorCase& e) {
  try {
    e.call();
  } catch (const Error& err) {
    std::string msg = err.what();
    for (const std::string& m : e.mentions) {
      if (msg.find(m) == std::string::npos) return e.what + ": message \"" + msg + "\" does not mention \"" + m + "\"";
    }
    return "";
  } catch (const std::exception& other) {
    return e.what + ": threw a non-kiln exception: " + other.what();
  }
  return e.what + ": did not throw";
}

// --- helpers that several rows files share -----------------------------------------------------

// Class indices in [0, classes) from a small LCG; every `ignore_every`-th one (1-based; 0 = none)
// is `ignore`.
Tensor class_targets(const Shape& shape, int64_t classes, uint64_t seed, int64_t ignore_every, int64_t ignore,
                     Device d) {
  Values v;
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    s = s * 2862933555777941757ull + 3037000493ull;
    int64_t t = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(classes));
    if (ignore_every > 0 && (i + 1) % ignore_every == 0) t = ignore;
    v.push_back(static_cast<double>(t));
  }
  return from_values(v, shape, DType::Int64).to(d);
}

Tensor reduce_ref(const Values& losses, const Shape& shape, Reduction red) {
  if (red == Reduction::None) return from_values(losses, shape);
  double s = 0;
  for (double e : losses) s += e;
  return from_values({red == Reduction::Mean ? s / static_cast<double>(losses.size()) : s}, {});
}

const char* red_name(Reduction red) { return red == Reduction::Mean ? "mean" : red == Reduction::Sum ? "sum" : "none"; }

size_t at(int64_t i) { return static_cast<size_t>(i); }
int64_t wrap(int64_t dim, int64_t ndim) { return dim < 0 ? dim + ndim : dim; }
DType same_dtype(DType t) { return t; }

std::vector<DType> numeric_and_bool() {
  std::vector<DType> t = kAllNumeric;
  t.push_back(DType::Bool);
  return t;
}

Gen normal(double scale) {
  return [scale](const Shape& s, DType t, Device d, uint64_t seed) { return rnd(s, t, d, seed, scale); };
}

Gen avoiding(Values kinks, double margin, double scale) {
  return [kinks, margin, scale](const Shape& s, DType t, Device d, uint64_t seed) {
    if (!is_floating(t)) return rnd(s, t, d, seed);
    Values v = values(rnd(s, DType::Float64, Device::cpu(), seed, scale));
    for (double& x : v) {
      for (double k : kinks) {
        if (std::fabs(x - k) < margin) x = x < k ? k - margin : k + margin;
      }
    }
    return from_values(v, s).to(t).to(d);
  };
}

Gen nonzero() {
  return [](const Shape& s, DType t, Device d, uint64_t seed) {
    if (is_floating(t)) return avoiding({0.0}, 0.25)(s, t, d, seed);
    Values v = values(rnd(s, t, Device::cpu(), seed));
    for (double& x : v) x = x == 0 ? 1 : x;
    return from_values(v, s).to(t).to(d);
  };
}

Gen positive(double lo, double hi) {
  return [lo, hi](const Shape& s, DType t, Device d, uint64_t seed) {
    if (is_floating(t)) return rnd_range(s, t, d, seed, lo, hi);
    Values v = values(rnd(s, DType::UInt8, Device::cpu(), seed));
    for (double& x : v) x += 1;
    return from_values(v, s).to(t).to(d);
  };
}

std::vector<Sample> binary_samples(uint64_t seed, Gen ga, Gen gb) {
  return {
      {"same shape",
       [=](DType t, Device d) {
         return TensorList{ga({7, 13}, t, d, seed), gb({7, 13}, t, d, seed + 1)};
       }},
      {"broadcast",
       [=](DType t, Device d) {
         return TensorList{ga({4, 1, 3}, t, d, seed + 2), gb({5, 1}, t, d, seed + 3)};
       }},
      {"non-contiguous",
       [=](DType t, Device d) {
         return TensorList{noncontig(ga({3, 7}, t, d, seed + 4)), gb({7, 3}, t, d, seed + 5).t()};
       }},
      {"0-d and tensor",
       [=](DType t, Device d) {
         return TensorList{ga({}, t, d, seed + 6), gb({2, 3}, t, d, seed + 7)};
       }},
      {"0-d",
       [=](DType t, Device d) {
         return TensorList{ga({}, t, d, seed + 8), gb({}, t, d, seed + 9)};
       }},
  };
}

std::vector<Sample> unary_samples(uint64_t seed, Gen g) {
  return {
      {"odd size",
       [=](DType t, Device d) {
         return TensorList{g({7, 13}, t, d, seed)};
       }},
      {"non-contiguous",
       [=](DType t, Device d) {
         return TensorList{noncontig(g({5, 3}, t, d, seed + 1))};
       }},
      {"transposed",
       [=](DType t, Device d) {
         return TensorList{g({4, 6}, t, d, seed + 2).t()};
       }},
      {"0-d", [=](DType t, Device d) { return TensorList{g({}, t, d, seed + 3)}; }},
      {"empty",
       [=](DType t, Device d) {
         return TensorList{g({0, 3}, t, d, seed + 4)};
       }},
  };
}

std::vector<Sample> inplace_samples(uint64_t seed, Gen ga, Gen gb) {
  return {
      {"same shape",
       [=](DType t, Device d) {
         return TensorList{ga({7, 13}, t, d, seed), gb({7, 13}, t, d, seed + 1)};
       }},
      {"broadcast other",
       [=](DType t, Device d) {
         return TensorList{ga({3, 4, 5}, t, d, seed + 2), gb({4, 1}, t, d, seed + 3)};
       }},
      {"non-contiguous",
       [=](DType t, Device d) {
         return TensorList{noncontig(ga({3, 7}, t, d, seed + 4)), gb({7, 3}, t, d, seed + 5).t()};
       }},
      {"0-d other",
       [=](DType t, Device d) {
         return TensorList{ga({2, 3}, t, d, seed + 6), gb({}, t, d, seed + 7)};
       }},
      {"0-d",
       [=](DType t, Device d) {
         return TensorList{ga({}, t, d, seed + 8), gb({}, t, d, seed + 9)};
       }},
  };
}

Tensor inplace_target(const Tensor& x) {
  if (x.is_contiguous()) return x.clone();
  if (!x.requires_grad()) return noncontig(x.clone());
  // Strided like noncontig, with grad mode on: the op writes a view that takes part in autograd,
  // and its gradient goes through the buffer's history (core/autograd.cpp, ViewInPlaceBackward).
  Shape wide = x.sizes();
  wide.back() *= 2;
  Tensor view = zeros(wide, TensorOptions(x.dtype(), x.device())).slice(-1, 0, wide.back(), 2);
  view.copy_(x);
  return view;
}

ListFn ref(RefFn fn) {
  return [fn](const TensorList& x) { return TensorList{ref_map(x, fn)}; };
}

ListFn refs(std::vector<RefFn> fns) {
  return [fns](const TensorList& x) {
    TensorList r;
    for (const RefFn& f : fns) r.push_back(ref_map(x, f));
    return r;
  };
}

OpRow make_row(std::string name, std::vector<DType> dtypes, std::vector<Sample> samples, ListFn op, ListFn reference,
               std::vector<size_t> differentiable, std::function<DType(DType)> out_dtype) {
  OpRow r;
  r.name = std::move(name);
  r.dtypes = std::move(dtypes);
  r.samples = std::move(samples);
  r.op = std::move(op);
  r.reference = std::move(reference);
  r.differentiable = std::move(differentiable);
  r.out_dtype = std::move(out_dtype);
  return r;
}

ErrorCase undefined_input(const std::string& op, std::function<Tensor(const Tensor&)> fn) {
  return {"undefined input", [fn] { fn(Tensor()); }, {op, "undefined"}};
}

std::vector<Sample> distinct_samples(uint64_t seed) {
  return {
      {"3x5x7 distinct", [seed](DType t, Device d) { return TensorList{rnd_distinct({3, 5, 7}, t, d, seed)}; }},
      {"non-contiguous 5x3x9 distinct",
       [seed](DType t, Device d) { return TensorList{noncontig(rnd_distinct({5, 3, 9}, t, d, seed + 1))}; }},
      {"permuted 7x3x5 distinct",
       [seed](DType t, Device d) { return TensorList{rnd_distinct({5, 7, 3}, t, d, seed + 2).permute({1, 2, 0})}; }},
  };
}

std::vector<Sample> nan_samples(uint64_t seed) {
  std::vector<Sample> samples;
  for (const Sample& s : distinct_samples(seed)) {
    samples.push_back({s.name + " with NaNs", [make = s.make](DType t, Device d) {
                         const Tensor x = make(t, d)[0];
                         if (!is_floating(t)) return TensorList{x};
                         std::vector<double> v = values(x);
                         for (size_t i = 1; i < v.size(); i += 4) v[i] = std::numeric_limits<double>::quiet_NaN();
                         return TensorList{from_values(v, x.sizes()).to(t).to(d)};
                       }});
  }
  return samples;
}

Tensor ref_pick(const Tensor& x, const Shape& out_shape, const std::function<Shape(const Shape&)>& src) {
  std::vector<double> xv = values(x);
  std::vector<double> out(at(shape_numel(out_shape)));
  for (int64_t i = 0; i < shape_numel(out_shape); ++i) {
    out[at(i)] = xv[at(ravel(src(unravel(i, out_shape)), x.sizes()))];
  }
  return from_values(out, out_shape);
}

std::vector<Sample> one_input_samples(uint64_t seed) {
  return {
      {"3x5x7", [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed)}; }},
      {"non-contiguous 3x5x9",
       [seed](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 9}, t, d, seed + 1))}; }},
      {"transposed 7x5x3",
       [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed + 2).transpose(0, 2)}; }},
  };
}

OpRow unary_row(const std::string& name, std::vector<Sample> samples, std::function<Tensor(const Tensor&)> op,
                std::function<Tensor(const Tensor&)> ref) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = std::move(samples);
  r.op = [op](const TensorList& x) { return TensorList{op(x[0])}; };
  r.reference = [ref](const TensorList& x) { return TensorList{ref(x[0])}; };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  return r;
}

Tensor carrier(DType t, Device d) { return scalar_tensor(static_cast<int64_t>(t), TensorOptions(DType::Int64, d)); }
DType dt(const TensorList& x) { return static_cast<DType>(x[0].item<int64_t>()); }

Sample shape_sample(const std::string& name) {
  return {name, [](DType t, Device d) { return TensorList{carrier(t, d)}; }};
}

Tensor params(const std::vector<int64_t>& v, Device d) {
  return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::Int64, d));
}
std::vector<int64_t> param_values(const Tensor& t) { return t.to_vector<int64_t>(); }

Tensor channels_last(const Tensor& t) { return t.contiguous(MemoryFormat::ChannelsLast); }

TensorList ref_window_max(const Tensor& x, const Shape& out, const WindowFn& window) {
  const size_t spatial = out.size();
  const Shape in(x.sizes().end() - static_cast<int64_t>(spatial), x.sizes().end());
  int64_t plane = 1, cells = 1;
  for (size_t d = 0; d < spatial; ++d) {
    plane *= in[d];
    cells *= out[d];
  }
  const int64_t planes = plane == 0 ? 0 : x.numel() / plane;
  const Values v = values(x);
  Values best_values, best_indices;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t c = 0; c < cells; ++c) {
      const Shape o = unravel(c, out);
      Shape lo(spatial), hi(spatial);
      for (size_t d = 0; d < spatial; ++d) std::tie(lo[d], hi[d]) = window(p, d, o[d]);
      double best = -std::numeric_limits<double>::infinity();
      int64_t best_at = -1;
      for (Shape at_cell = lo;;) {  // the window's cells in row-major order
        const int64_t flat = ravel(at_cell, in);
        if (best_at < 0 || v[at(p * plane + flat)] > best) {
          best = v[at(p * plane + flat)];
          best_at = flat;
        }
        size_t d = spatial;
        while (d > 0 && ++at_cell[d - 1] == hi[d - 1]) {
          at_cell[d - 1] = lo[d - 1];
          --d;
        }
        if (d == 0) break;
      }
      best_values.push_back(best);
      best_indices.push_back(static_cast<double>(best_at));
    }
  }
  Shape shape(x.sizes().begin(), x.sizes().end() - static_cast<int64_t>(spatial));
  shape.insert(shape.end(), out.begin(), out.end());
  return {from_values(best_values, shape), from_values(best_indices, shape).to(DType::Int64)};
}

TensorList ref_adaptive_max(const Tensor& x, const Shape& out) {
  const Shape in(x.sizes().end() - static_cast<int64_t>(out.size()), x.sizes().end());
  return ref_window_max(x, out, [&](int64_t, size_t d, int64_t o) {
    return std::pair<int64_t, int64_t>{o * in[d] / out[d], ((o + 1) * in[d] + out[d] - 1) / out[d]};
  });
}

std::vector<int64_t> ref_fractional_starts(double u, int64_t n, int64_t out, int64_t k, bool f64) {
  std::vector<int64_t> starts;
  for (int64_t i = 0; i + 1 < out; ++i) {
    if (f64) {
      const double alpha = static_cast<double>(n - k) / static_cast<double>(out - 1);
      starts.push_back(static_cast<int64_t>((static_cast<double>(i) + u) * alpha) - static_cast<int64_t>(u * alpha));
    } else {
      const float alpha = static_cast<float>(n - k) / static_cast<float>(out - 1), uf = static_cast<float>(u);
      starts.push_back(static_cast<int64_t>((static_cast<float>(i) + uf) * alpha) - static_cast<int64_t>(uf * alpha));
    }
  }
  starts.push_back(n - k);
  return starts;
}

BenchCase row_bench(const std::string& name, const std::string& op, const std::string& args, bool weight) {
  BenchCase b;
  b.name = name;
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = op;
  b.args = args;
  b.setup = [weight](DType t, int64_t n) {
    const int64_t cols = 1024, rows = n / cols;
    BenchSetup s;
    s.shape = {rows, cols};
    s.inputs = {{s.shape, t}};
    s.bytes = 2 * static_cast<double>(element_size(t)) * static_cast<double>(rows * cols);
    if (weight) {
      s.inputs.push_back({{cols}, DType::Float32, BenchInput::Fill::Ones});
      s.bytes += 2 * 4 * cols;
    }
    return s;
  };
  if (weight) b.run = [](const TensorList& x) { return TensorList{layer_norm(x[0], {1024}, x[1], Tensor())}; };
  return b;
}

}  // namespace kiln::test
