// Op table rows of the random family: rand, uniform_, randn, normal_ and randint, checked against
// the documented Philox mapping (element i uses block i/2 of (seed, offset), words 2*(i%2) and
// 2*(i%2)+1; a uniform draw takes as many bits as its dtype's significand, kernels/random.h); the
// CUDA parity runner demands the same values from the GPU.
#include <cmath>

#include "kernels/philox.h"
#include "kernels/random.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr uint64_t kSeed = 20261123;  // the runner seeds this before op and reference

// The two words of element i for the op that drew with `offset`.
std::pair<uint32_t, uint32_t> words(uint64_t offset, int64_t i) {
  Philox4 b = philox_block(kSeed, offset, static_cast<uint64_t>(i) >> 1);
  return {b.v[(i & 1) * 2], b.v[(i & 1) * 2 + 1]};
}

Tensor ref_uniform(const Shape& shape, DType t, double lo, double hi) {
  std::vector<double> v;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    auto [w0, w1] = words(0, i);
    double u = t == DType::Float64 ? philox_uniform_double(w0, w1)
                                   : static_cast<double>(philox_uniform_digits(w0, uniform_digits(t)));
    v.push_back(lo + (hi - lo) * u);
  }
  return from_values(v, shape);
}

Tensor ref_normal(const Shape& shape, DType t, double mean, double std) {
  std::vector<double> v;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    double u1, u2;
    if (t == DType::Float64) {
      Philox4 b = philox_block(kSeed, 0, static_cast<uint64_t>(i));
      u1 = 1.0 - philox_uniform_double(b.v[0], b.v[1]);
      u2 = philox_uniform_double(b.v[2], b.v[3]);
    } else {
      auto [w0, w1] = words(0, i);
      u1 = 1.0 - philox_uniform(w0);
      u2 = philox_uniform(w1);
    }
    v.push_back(mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return from_values(v, shape);
}

}  // namespace

void add_random_rows(std::vector<OpRow>& rows) {
  const Shape shape{3, 37};  // odd: the last element uses half of a Philox block
  {
    OpRow r;
    r.name = "rand";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {shape_sample("3x37")};
    r.op = [shape](const TensorList& x) { return TensorList{rand(shape, TensorOptions(dt(x), x[0].device()))}; };
    r.reference = [shape](const TensorList& x) {
      return TensorList{ref_uniform(shape, dt(x), 0, 1)};
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"integer dtype", [] { rand({2}, TensorOptions(DType::Int64)); }, {"rand", "int64"}},
                {"negative size", [] { rand({2, -1}); }, {"rand", "[2, -1]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "uniform_";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {shape_sample("3x37")};
    r.op = [shape](const TensorList& x) {
      Tensor t = empty(shape, TensorOptions(dt(x), x[0].device()));
      t.uniform_(-2.0, 3.0);
      return TensorList{t};
    };
    r.reference = [shape](const TensorList& x) {
      return TensorList{ref_uniform(shape, dt(x), -2, 3)};
    };
    r.errors = {{"low above high", [] { zeros({2}).uniform_(1.0, 0.0); }, {"uniform_", "low"}},
                {"integer tensor", [] { zeros({2}, DType::Int32).uniform_(); }, {"uniform_", "int32"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "randn";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {shape_sample("3x37")};
    r.op = [shape](const TensorList& x) { return TensorList{randn(shape, TensorOptions(dt(x), x[0].device()))}; };
    r.reference = [shape](const TensorList& x) {
      return TensorList{ref_normal(shape, dt(x) == DType::Float64 ? DType::Float64 : DType::Float32, 0, 1)};
    };
    // float32 Box-Muller: log and cos in float differ from the double reference by a few ulps
    // of values up to ~4, i.e. ~1e-6 absolute.
    r.tolerance[DType::Float32] = {1e-5, 1e-5};
    r.errors = {{"integer dtype", [] { randn({2}, TensorOptions(DType::Int32)); }, {"randn", "int32"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "normal_";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {shape_sample("3x37")};
    r.op = [shape](const TensorList& x) {
      Tensor t = empty(shape, TensorOptions(dt(x), x[0].device()));
      t.normal_(0.5, 2.0);
      return TensorList{t};
    };
    r.reference = [shape](const TensorList& x) {
      return TensorList{ref_normal(shape, dt(x) == DType::Float64 ? DType::Float64 : DType::Float32, 0.5, 2.0)};
    };
    // As randn, scaled by std = 2.
    r.tolerance[DType::Float32] = {3e-5, 1e-5};
    r.errors = {{"negative std", [] { zeros({2}).normal_(0.0, -1.0); }, {"normal_", "std"}}};
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "randint";
    r.dtypes = {DType::Int64, DType::Int32, DType::UInt8, DType::Float32};
    r.random = true;
    r.samples = {shape_sample("3x37")};
    r.op = [shape](const TensorList& x) {
      return TensorList{randint(-3, 250, shape, TensorOptions(dt(x), x[0].device()))};
    };
    r.reference = [shape](const TensorList&) {
      std::vector<double> v;
      for (int64_t i = 0; i < shape_numel(shape); ++i) {
        auto [w0, w1] = words(0, i);
        uint64_t bits = (static_cast<uint64_t>(w0) << 32) | w1;
        v.push_back(static_cast<double>(-3 + static_cast<int64_t>(bits % 253)));
      }
      return TensorList{from_values(v, shape)};
    };
    r.exact_outputs = {0};
    // uint8 cannot hold -3..-1: those wrap, as a cast does in PyTorch; keep the check to int types
    // that hold the range, and float32 (exact for small integers).
    r.dtypes = {DType::Int64, DType::Int32, DType::Float32};
    r.errors = {{"empty range", [] { randint(5, 5, {2}); }, {"randint", "low=5", "high=5"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
