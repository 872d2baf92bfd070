// The table's registry, tolerances (CPU and CUDA) and the helpers rows are written with. Needs
// no test framework: gpu_bench and bench_cases link it too.
#include "tests/op_table/op_table.h"

#include <algorithm>
#include <numeric>

namespace kiln::test {
const std::vector<RowFamily>& row_families() {
  static const std::vector<RowFamily> families = {
      {"elementwise", add_elementwise_rows}, {"reduce", add_reduce_rows}, {"shape", add_shape_rows},
      {"factory", add_factory_rows},         {"linalg", add_linalg_rows}, {"conv", add_conv_rows},
      {"nn", add_nn_rows},                   {"attention", add_attention_rows},
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

Tensor from_values(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return tensor(v, shape, TensorOptions(dtype));
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

}  // namespace kiln::test
