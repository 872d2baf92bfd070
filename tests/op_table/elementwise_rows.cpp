// Op table rows of the elementwise family: unary, binary and scalar forms with broadcasting, comparisons,
// logical ops, where, masked_fill and the in-place ops. A row's op has fixed arguments, so scalar operands are
// part of the row (float for float dtypes, integer where the row keeps integers integral). Inputs of ops with
// kinks (relu, abs, clamp, maximum, minimum) stay away from them so central differences never straddle one;
// bases of log, sqrt, rsqrt and pow are positive. In-place rows apply the op to a copy of input 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// Functions, not namespace-scope vectors: the table is built during static initialization of
// another translation unit (run_op_table.cpp), possibly before this one's globals.
std::vector<DType> signed_types() {
  return {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int32, DType::Int64};
}
std::vector<DType> int_types() { return {DType::Int32, DType::Int64, DType::UInt8}; }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

DType float_or_default(DType t) { return is_floating(t) ? t : DType::Float32; }
DType bool_dtype(DType) { return DType::Bool; }

// Builds a tensor of dtype t on d from float64 values (exact for the values used here).
Tensor make(const Values& v, const Shape& shape, DType t, Device d) { return from_values(v, shape).to(t).to(d); }

// --- input generators ----------------------------------------------------------------------------

// Small integers in any dtype (bool: a fair coin): comparisons see ties, logical ops see zeros.
Gen small_ints() {
  return [](const Shape& s, DType t, Device d, uint64_t seed) {
    if (t == DType::Bool || t == DType::UInt8) return rnd(s, t, d, seed);
    return rnd(s, DType::Int64, Device::cpu(), seed).to(t).to(d);
  };
}

// rnd_distinct's values, shifted by half its spacing for floats when `shift`: an unshifted and a
// shifted tensor never hold equal values (no ties for maximum and minimum).
Gen distinct(bool shift) {
  return [shift](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd_distinct(s, t, Device::cpu(), seed));
    double off = !shift || !is_floating(t) ? 0.0 : (t == DType::Float16 || t == DType::BFloat16 ? 0.5 : 0.125);
    for (double& x : v) x += off;
    return make(v, s, t, d);
  };
}

Gen booleans() {
  return [](const Shape& s, DType, Device d, uint64_t seed) { return rnd(s, DType::Bool, d, seed); };
}

// --- rows ----------------------------------------------------------------------------------------

// A memory-bound bench case of an elementwise op of `arity` inputs of n elements (--elements) in
// float32 and bfloat16: each input read once, the output written once.
BenchCase elementwise_bench(const std::string& name, const std::string& op, int arity) {
  BenchCase b;
  b.name = name;
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = op;
  b.setup = [arity](DType t, int64_t n) {
    BenchSetup s;
    s.shape = {n};
    for (int i = 0; i < arity; ++i) s.inputs.push_back({{n}, t});
    s.bytes = (arity + 1.0) * static_cast<double>(element_size(t)) * static_cast<double>(n);
    return s;
  };
  return b;
}

// GELU's tanh form written out as nine elementwise ops, each a kernel that reads and writes the
// whole tensor: the unfused chain that a fused GELU kernel replaces (tools/torch_peer.py runs the
// same nine in PyTorch). Bytes count the fused op's traffic (x read, y written), so its GB/s reads
// directly as a fraction of the fused kernel's.
BenchCase gelu_tanh_chain_bench() {
  BenchCase b = elementwise_bench("gelu_tanh_chain", "gelu_tanh_chain", 1);
  b.run = [](const TensorList& in) {
    const Tensor& x = in[0];
    const double c = std::sqrt(2.0 / std::numbers::pi);
    Tensor cube = x * x * x;
    Tensor inner = (x + cube * 0.044715) * c;
    return TensorList{x * (tanh(inner) + 1.0) * 0.5};
  };
  return b;
}

// A scalar operand that keeps integer rows integral: f for float tensors, i for the others.
Scalar pick(const Tensor& t, double f, int64_t i) { return t.is_floating_point() ? Scalar(f) : Scalar(i); }
double pickd(const Tensor& t, double f, int64_t i) { return t.is_floating_point() ? f : static_cast<double>(i); }

ErrorCase no_broadcast(const std::string& op, std::function<Tensor(const Tensor&, const Tensor&)> fn) {
  return {"shapes do not broadcast", [fn] { fn(zeros({2, 3}), zeros({4})); }, {op, "[2, 3]", "[4]"}};
}

// Integer inputs of these rows give float32 outputs computed in float32: float32's tolerance.
void int_inputs_give_float32(OpRow& r) {
  for (DType t : int_types()) r.tolerance[t] = default_tolerance(DType::Float32);
}

double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

void add_arithmetic_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "add", kAllNumeric, binary_samples(100, normal(), normal()),
        [](const TensorList& x) { return TensorList{add(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] + v[1]; }), {0, 1}, same_dtype);
    r.bench = {elementwise_bench("add", "add", 2)};
    r.errors = {
        no_broadcast("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }),
        {"float alpha with integer operands",
         [] { add(zeros({2}, DType::Int64), zeros({2}, DType::Int64), 0.5); },
         {"add", "alpha", "int64"}},
        {"undefined operand", [] { add(zeros({2}), Tensor()); }, {"add", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // a + alpha * b; uint8 stays below 256 (at most 9 + 3 * 9).
    OpRow r = make_row(
        "add_alpha", kAllNumeric, binary_samples(150, normal(), normal()),
        [](const TensorList& x) { return TensorList{add(x[0], x[1], pick(x[0], -0.5, 3))}; },
        [](const TensorList& x) {
          double al = pickd(x[0], -0.5, 3);
          return TensorList{ref_map(x, [al](const Values& v) { return v[0] + al * v[1]; })};
        },
        {0, 1}, same_dtype);
    r.errors = {no_broadcast("add", [](const Tensor& a, const Tensor& b) { return add(a, b, 2); })};
    rows.push_back(std::move(r));
  }
  {
    // A float scalar: integer tensors promote to float32 (exact for these small values).
    OpRow r = make_row(
        "add_scalar", kAllNumeric, unary_samples(200, normal()),
        [](const TensorList& x) { return TensorList{add(x[0], 0.75)}; },
        ref([](const Values& v) { return v[0] + 0.75; }), {0}, float_or_default);
    r.errors = {undefined_input("add", [](const Tensor& a) { return add(a, 1); })};
    rows.push_back(std::move(r));
  }
  {
    // Unsigned integers are left out: their differences wrap.
    OpRow r = make_row(
        "sub", signed_types(), binary_samples(300, normal(), normal()),
        [](const TensorList& x) { return TensorList{sub(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] - v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        no_broadcast("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }),
        {"bool operands", [] { sub(zeros({2}, DType::Bool), zeros({2}, DType::Bool)); }, {"sub", "bool"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "sub_scalar", signed_types(), unary_samples(350, normal()),
        [](const TensorList& x) { return TensorList{sub(x[0], pick(x[0], 1.5, 2))}; },
        [](const TensorList& x) {
          double s = pickd(x[0], 1.5, 2);
          return TensorList{ref_map(x, [s](const Values& v) { return v[0] - s; })};
        },
        {0}, same_dtype);
    r.errors = {
        undefined_input("sub", [](const Tensor& a) { return sub(a, 1); }),
        {"bool tensor", [] { sub(zeros({2}, DType::Bool), 1); }, {"sub", "bool"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "rsub_scalar", signed_types(), unary_samples(400, normal()),
        [](const TensorList& x) { return TensorList{sub(pick(x[0], 1.25, 4), x[0])}; },
        [](const TensorList& x) {
          double s = pickd(x[0], 1.25, 4);
          return TensorList{ref_map(x, [s](const Values& v) { return s - v[0]; })};
        },
        {0}, same_dtype);
    r.errors = {
        undefined_input("sub", [](const Tensor& a) { return sub(1, a); }),
        {"bool tensor", [] { sub(1, zeros({2}, DType::Bool)); }, {"sub", "bool"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "mul", kAllNumeric, binary_samples(500, normal(), normal()),
        [](const TensorList& x) { return TensorList{mul(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] * v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        no_broadcast("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }),
        {"undefined operand", [] { mul(Tensor(), zeros({2})); }, {"mul", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "mul_scalar", kAllNumeric, unary_samples(550, normal()),
        [](const TensorList& x) { return TensorList{mul(x[0], pick(x[0], -1.5, 3))}; },
        [](const TensorList& x) {
          double s = pickd(x[0], -1.5, 3);
          return TensorList{ref_map(x, [s](const Values& v) { return v[0] * s; })};
        },
        {0}, same_dtype);
    r.errors = {undefined_input("mul", [](const Tensor& a) { return mul(a, 2); })};
    rows.push_back(std::move(r));
  }
  {
    // True division: integer operands give float32.
    OpRow r = make_row(
        "div", kAllNumeric, binary_samples(600, normal(), nonzero()),
        [](const TensorList& x) { return TensorList{div(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] / v[1]; }), {0, 1}, float_or_default);
    int_inputs_give_float32(r);
    r.errors = {
        no_broadcast("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }),
        {"undefined operand", [] { div(zeros({2}), Tensor()); }, {"div", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Integers divided by 4 are exact in float32.
    OpRow r = make_row(
        "div_scalar", kAllNumeric, unary_samples(650, normal()),
        [](const TensorList& x) { return TensorList{div(x[0], pick(x[0], 0.3, 4))}; },
        [](const TensorList& x) {
          double s = pickd(x[0], 0.3, 4);
          return TensorList{ref_map(x, [s](const Values& v) { return v[0] / s; })};
        },
        {0}, float_or_default);
    r.errors = {undefined_input("div", [](const Tensor& a) { return div(a, 2); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "rdiv_scalar", kAllNumeric, unary_samples(700, nonzero()),
        [](const TensorList& x) { return TensorList{div(pick(x[0], 1.5, 3), x[0])}; },
        [](const TensorList& x) {
          double s = pickd(x[0], 1.5, 3);
          return TensorList{ref_map(x, [s](const Values& v) { return s / v[0]; })};
        },
        {0}, float_or_default);
    int_inputs_give_float32(r);
    r.errors = {undefined_input("div", [](const Tensor& a) { return div(2, a); })};
    rows.push_back(std::move(r));
  }
  {
    // Unsigned integers are left out: negation wraps.
    OpRow r = make_row(
        "neg", signed_types(), unary_samples(800, normal()), [](const TensorList& x) { return TensorList{neg(x[0])}; },
        ref([](const Values& v) { return -v[0]; }), {0}, same_dtype);
    r.errors = {
        {"bool tensor", [] { neg(zeros({2}, DType::Bool)); }, {"neg", "bool"}},
        undefined_input("neg", [](const Tensor& a) { return neg(a); }),
    };
    rows.push_back(std::move(r));
  }
}

void add_unary_rows(std::vector<OpRow>& rows) {
  struct Unary {
    const char* name;
    std::vector<DType> dtypes;
    Gen gen;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
  };
  const std::vector<Unary> unary = {
      {"exp", kAllNumeric, normal(1.5), [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }},
      {"log", kFloatTypes, positive(0.2, 4.0), [](const Tensor& x) { return log(x); },
       [](double v) { return std::log(v); }},
      {"log1p", kAllNumeric, positive(-0.7, 4.0), [](const Tensor& x) { return log1p(x); },
       [](double v) { return std::log1p(v); }},
      {"expm1", kAllNumeric, normal(1.5), [](const Tensor& x) { return expm1(x); },
       [](double v) { return std::expm1(v); }},
      {"sin", kAllNumeric, normal(3.0), [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }},
      {"cos", kAllNumeric, normal(3.0), [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }},
      {"sqrt", kFloatTypes, positive(0.2, 4.0), [](const Tensor& x) { return sqrt(x); },
       [](double v) { return std::sqrt(v); }},
      {"rsqrt", kFloatTypes, positive(0.2, 4.0), [](const Tensor& x) { return rsqrt(x); },
       [](double v) { return 1 / std::sqrt(v); }},
      {"tanh", kFloatTypes, normal(2.0), [](const Tensor& x) { return tanh(x); },
       [](double v) { return std::tanh(v); }},
      {"sigmoid", kFloatTypes, normal(3.0), [](const Tensor& x) { return sigmoid(x); },
       [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"gelu", kFloatTypes, normal(2.0), [](const Tensor& x) { return gelu(x); }, gelu_erf_ref},
      {"gelu_tanh", kFloatTypes, normal(2.0), [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, gelu_tanh_ref},
      {"silu", kFloatTypes, normal(3.0), [](const Tensor& x) { return silu(x); },
       [](double v) { return v / (1 + std::exp(-v)); }},
      // Away from 0, where the gradient jumps from the slope to 1.
      {"leaky_relu", kFloatTypes, avoiding({0.0}, 0.1), [](const Tensor& x) { return leaky_relu(x, 0.2); },
       [](double v) { return v > 0 ? v : 0.2 * v; }},
      // beta 2, threshold 3: both branches (beta x past 3 is x itself), away from the switch at 1.5
      // where the linear branch and the curve differ by log1p(exp(-3)) / 2.
      {"softplus", kFloatTypes, avoiding({1.5}, 0.1, 2.0), [](const Tensor& x) { return softplus(x, 2.0, 3.0); },
       [](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; }},
  };
  uint64_t seed = 1000;
  for (const Unary& u : unary) {
    auto fn = u.ref;
    auto op = u.op;
    OpRow r = make_row(
        u.name, u.dtypes, unary_samples(seed, u.gen), [op](const TensorList& x) { return TensorList{op(x[0])}; },
        ref([fn](const Values& v) { return fn(v[0]); }), {0}, float_or_default);
    int_inputs_give_float32(r);
    // sqrt is correctly rounded on both devices; the others go through libm on each.
    if (std::string(u.name) != "sqrt") r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    if (std::string(u.name) == "gelu") r.bench = {elementwise_bench("gelu", "gelu", 1)};
    if (std::string(u.name) == "gelu_tanh") {
      r.bench = {elementwise_bench("gelu_tanh", "gelu", 1), gelu_tanh_chain_bench()};
      r.bench[0].args = R"({"approximate": "tanh"})";
    }
    std::string name = std::string(u.name) == "gelu_tanh" ? "gelu" : u.name;
    r.errors = {undefined_input(name, op)};
    if (name == "gelu" || name == "silu" || name == "leaky_relu" || name == "softplus") {
      r.errors.push_back({"integer input", [op] { op(zeros({2, 3}, DType::Int64)); }, {name, "int64", "[2, 3]"}});
    }
    if (name == "leaky_relu") {
      r.errors.push_back(
          {"NaN slope", [] { leaky_relu(zeros({2}), std::nan("")); }, {"leaky_relu", "negative_slope", "nan"}});
    }
    if (name == "softplus") {
      r.errors.push_back({"beta 0", [] { softplus(zeros({2}), 0.0); }, {"softplus", "beta", "0"}});
    }
    rows.push_back(std::move(r));
    seed += 50;
  }
  {
    OpRow r = make_row(
        "abs", kAllNumeric, unary_samples(1500, avoiding({0.0}, 0.1)),
        [](const TensorList& x) { return TensorList{abs(x[0])}; }, ref([](const Values& v) { return std::fabs(v[0]); }),
        {0}, same_dtype);
    r.errors = {undefined_input("abs", [](const Tensor& a) { return abs(a); })};
    rows.push_back(std::move(r));
  }
  {
    // The gradient is zero away from 0.
    OpRow r = make_row(
        "sign", kAllNumeric, unary_samples(1550, avoiding({0.0}, 0.1)),
        [](const TensorList& x) { return TensorList{sign(x[0])}; },
        ref([](const Values& v) { return static_cast<double>((v[0] > 0) - (v[0] < 0)); }), {0}, same_dtype);
    r.errors = {undefined_input("sign", [](const Tensor& a) { return sign(a); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "relu", kAllNumeric, unary_samples(1600, avoiding({0.0}, 0.1)),
        [](const TensorList& x) { return TensorList{relu(x[0])}; },
        ref([](const Values& v) { return v[0] > 0 ? v[0] : 0.0; }), {0}, same_dtype);
    r.errors = {
        {"bool tensor", [] { relu(zeros({2}, DType::Bool)); }, {"relu", "bool"}},
        undefined_input("relu", [](const Tensor& a) { return relu(a); }),
    };
    rows.push_back(std::move(r));
  }
  {
    // Every third value of a float input is NaN; integers never are.
    Gen with_nans = [](const Shape& s, DType t, Device d, uint64_t seed) {
      if (!is_floating(t)) return rnd(s, t, d, seed);
      Values v = values(rnd(s, DType::Float64, Device::cpu(), seed));
      for (size_t i = 0; i < v.size(); i += 3) v[i] = kNaN;
      return make(v, s, t, d);
    };
    OpRow r = make_row(
        "isnan", kAllNumeric, unary_samples(1650, with_nans),
        [](const TensorList& x) { return TensorList{isnan(x[0])}; },
        ref([](const Values& v) { return std::isnan(v[0]) ? 1.0 : 0.0; }), {}, bool_dtype);
    r.errors = {undefined_input("isnan", [](const Tensor& a) { return isnan(a); })};
    rows.push_back(std::move(r));
  }
  // Float inputs with NaN, +inf and -inf among finite values (one of each in every four).
  Gen non_finite = [](const Shape& s, DType t, Device d, uint64_t seed) {
    if (!is_floating(t)) return rnd(s, t, d, seed);
    Values v = values(rnd(s, DType::Float64, Device::cpu(), seed));
    for (size_t i = 0; i < v.size(); ++i) {
      if (i % 4 == 0) v[i] = kNaN;
      if (i % 4 == 1) v[i] = INFINITY;
      if (i % 4 == 2) v[i] = -INFINITY;
    }
    return make(v, s, t, d);
  };
  {
    OpRow r = make_row(
        "isinf isposinf isneginf isfinite", kAllNumeric, unary_samples(1660, non_finite),
        [](const TensorList& x) {
          return TensorList{isinf(x[0]), isposinf(x[0]), isneginf(x[0]), isfinite(x[0])};
        },
        refs({[](const Values& v) { return std::isinf(v[0]) ? 1.0 : 0.0; },
              [](const Values& v) { return v[0] == INFINITY ? 1.0 : 0.0; },
              [](const Values& v) { return v[0] == -INFINITY ? 1.0 : 0.0; },
              [](const Values& v) { return std::isfinite(v[0]) ? 1.0 : 0.0; }}),
        {}, bool_dtype);
    r.exact_outputs = {0, 1, 2, 3};
    r.errors = {undefined_input("isinf", [](const Tensor& a) { return isinf(a); }),
                undefined_input("isfinite", [](const Tensor& a) { return isfinite(a); })};
    rows.push_back(std::move(r));
  }
  {
    // Replacements given (the dtype's own extremes: by hand, in tests/core/test_nn_ops.cpp).
    OpRow r = make_row(
        "nan_to_num 1.5 100 -100", kAllNumeric, unary_samples(1670, non_finite),
        [](const TensorList& x) { return TensorList{nan_to_num(x[0], 1.5, 100.0, -100.0)}; }, ref([](const Values& v) {
          return std::isnan(v[0]) ? 1.5 : v[0] == INFINITY ? 100.0 : v[0] == -INFINITY ? -100.0 : v[0];
        }),
        {0}, same_dtype);
    r.errors = {{"a replacement past the dtype",
                 [] { nan_to_num(zeros({2}, DType::Float16), 0.0, 1e6); },
                 {"nan_to_num", "float16", "1e+06"}},
                undefined_input("nan_to_num", [](const Tensor& a) { return nan_to_num(a); })};
    rows.push_back(std::move(r));
  }
  {
    // Weights below and above 0.5 (the two formulas), exactly 1, and a tensor of weights.
    OpRow r = make_row(
        "lerp", kFloatTypes, binary_samples(1680, normal(), normal()),
        [](const TensorList& x) {
          return TensorList{lerp(x[0], x[1], 0.3), lerp(x[0], x[1], 0.75), lerp(x[0], x[1], 1.0),
                            lerp(x[0], x[1], x[1] * 0.25 + 0.5)};
        },
        refs({[](const Values& v) { return v[0] + 0.3 * (v[1] - v[0]); },
              [](const Values& v) { return v[0] + 0.75 * (v[1] - v[0]); }, [](const Values& v) { return v[1]; },
              [](const Values& v) { return v[0] + (v[1] * 0.25 + 0.5) * (v[1] - v[0]); }}),
        {0, 1}, same_dtype);
    r.errors = {{"integer operands", [] { lerp(zeros({2}, DType::Int64), zeros({2}), 0.5); }, {"lerp", "int64"}}};
    rows.push_back(std::move(r));
  }
}

void add_pow_clamp_rows(std::vector<OpRow>& rows) {
  {
    // Integer exponents on signed bases (away from 0 for the negative power); integer tensors stay
    // integral. uint8 is left out: 9^3 wraps.
    OpRow r = make_row(
        "pow_scalar", signed_types(), unary_samples(2000, nonzero()),
        [](const TensorList& x) {
          TensorList out{pow(x[0], 2), pow(x[0], 3), pow(x[0], 0), pow(x[0], 1)};
          if (x[0].is_floating_point()) out.push_back(pow(x[0], -2));
          return out;
        },
        [](const TensorList& x) {
          TensorList out;
          for (double e : {2.0, 3.0, 0.0, 1.0})
            out.push_back(ref_map(x, [e](const Values& v) { return std::pow(v[0], e); }));
          if (x[0].is_floating_point()) out.push_back(ref_map(x, [](const Values& v) { return std::pow(v[0], -2.0); }));
          return out;
        },
        {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"integer tensor to a negative integer power",
         [] { pow(zeros({3}, DType::Int64), -2); },
         {"pow", "negative", "-2"}},
        undefined_input("pow", [](const Tensor& a) { return pow(a, 2); }),
    };
    rows.push_back(std::move(r));
  }
  {
    // Fractional exponents on positive bases; integer tensors promote to float32.
    OpRow r = make_row(
        "pow_scalar_frac", kAllNumeric, unary_samples(2050, positive(0.5, 2.0)),
        [](const TensorList& x) {
          return TensorList{pow(x[0], 0.5), pow(x[0], -1.5), pow(x[0], 2.5)};
        },
        refs({[](const Values& v) { return std::pow(v[0], 0.5); }, [](const Values& v) { return std::pow(v[0], -1.5); },
              [](const Values& v) { return std::pow(v[0], 2.5); }}),
        {0}, float_or_default);
    int_inputs_give_float32(r);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "rpow_scalar", kFloatTypes, unary_samples(2100, normal()),
        [](const TensorList& x) {
          return TensorList{pow(2.5, x[0]), pow(0.5, x[0])};
        },
        refs(
            {[](const Values& v) { return std::pow(2.5, v[0]); }, [](const Values& v) { return std::pow(0.5, v[0]); }}),
        {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {undefined_input("pow", [](const Tensor& a) { return pow(2.0, a); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "pow", kFloatTypes, binary_samples(2150, positive(0.5, 2.0), normal()),
        [](const TensorList& x) { return TensorList{pow(x[0], x[1])}; },
        ref([](const Values& v) { return std::pow(v[0], v[1]); }), {0, 1}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {no_broadcast("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); })};
    rows.push_back(std::move(r));
  }
  {
    // Outputs: both bounds, min only, max only, and min > max (everything becomes max, as in
    // PyTorch). Float inputs stay 0.05 away from the bounds; integer rows use bounds 1 and 4 (valid for uint8).
    OpRow r = make_row(
        "clamp", kAllNumeric, unary_samples(2200, avoiding({-0.5, 0.8}, 0.05)),
        [](const TensorList& x) {
          Scalar lo = pick(x[0], -0.5, 1), hi = pick(x[0], 0.8, 4);
          return TensorList{clamp(x[0], lo, hi), clamp(x[0], lo, std::nullopt), clamp(x[0], std::nullopt, hi),
                            clamp(x[0], hi, lo)};
        },
        [](const TensorList& x) {
          double lo = pickd(x[0], -0.5, 1), hi = pickd(x[0], 0.8, 4);
          return TensorList{ref_map(x, [=](const Values& v) { return std::min(std::max(v[0], lo), hi); }),
                            ref_map(x, [=](const Values& v) { return std::max(v[0], lo); }),
                            ref_map(x, [=](const Values& v) { return std::min(v[0], hi); }),
                            ref_map(x, [=](const Values&) { return lo; })};
        },
        {0}, same_dtype);
    r.errors = {
        {"no bounds", [] { clamp(zeros({3}), std::nullopt, std::nullopt); }, {"clamp", "min", "max"}},
        undefined_input("clamp", [](const Tensor& a) { return clamp(a, 0, 1); }),
    };
    rows.push_back(std::move(r));
  }
  {
    // The "ties" sample has equal elements: the gradient splits evenly, which is also what central
    // differences see at a tie.
    for (bool is_max : {true, false}) {
      std::vector<Sample> samples = binary_samples(is_max ? 2300 : 2350, distinct(false), distinct(true));
      samples.push_back({"ties", [seed = is_max ? 2320 : 2370](DType t, Device d) {
                           return TensorList{small_ints()({5, 7}, t, d, seed), small_ints()({5, 7}, t, d, seed + 1)};
                         }});
      std::string name = is_max ? "maximum" : "minimum";
      OpRow r = make_row(
          name, kAllNumeric, samples,
          [is_max](const TensorList& x) { return TensorList{is_max ? maximum(x[0], x[1]) : minimum(x[0], x[1])}; },
          ref([is_max](const Values& v) { return is_max ? std::max(v[0], v[1]) : std::min(v[0], v[1]); }), {0, 1},
          same_dtype);
      r.errors = {no_broadcast(
          name, [is_max](const Tensor& a, const Tensor& b) { return is_max ? maximum(a, b) : minimum(a, b); })};
      rows.push_back(std::move(r));
    }
  }
}

void add_comparison_rows(std::vector<OpRow>& rows) {
  struct Cmp {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<bool(double, double)> ref;
  };
  const std::vector<Cmp> cmps = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return a >= b; }},
  };
  uint64_t seed = 3000;
  for (const Cmp& c : cmps) {
    // Small integers give ties; the last sample compares normal values with small integers.
    std::vector<Sample> samples = binary_samples(seed, small_ints(), small_ints());
    samples.push_back({"mixed values", [seed](DType t, Device d) {
                         return TensorList{normal(2.0)({6, 5}, t, d, seed + 20), small_ints()({5}, t, d, seed + 21)};
                       }});
    auto op = c.op;
    auto fn = c.ref;
    OpRow r = make_row(
        c.name, numeric_and_bool(), samples, [op](const TensorList& x) { return TensorList{op(x[0], x[1])}; },
        ref([fn](const Values& v) { return fn(v[0], v[1]) ? 1.0 : 0.0; }), {}, bool_dtype);
    r.errors = {no_broadcast(c.name, op)};
    rows.push_back(std::move(r));
    seed += 50;
  }
  {
    // Every comparison against an integer scalar and two float scalars.
    OpRow r = make_row(
        "compare_scalar", kAllNumeric, unary_samples(3400, small_ints()),
        [](const TensorList& x) {
          const Tensor& a = x[0];
          return TensorList{eq(a, 1), ne(a, 1), lt(a, 1), le(a, 1), gt(a, 1), ge(a, 1), lt(a, 0.5), ge(a, -1.5)};
        },
        refs({[](const Values& v) { return double(v[0] == 1); }, [](const Values& v) { return double(v[0] != 1); },
              [](const Values& v) { return double(v[0] < 1); }, [](const Values& v) { return double(v[0] <= 1); },
              [](const Values& v) { return double(v[0] > 1); }, [](const Values& v) { return double(v[0] >= 1); },
              [](const Values& v) { return double(v[0] < 0.5); },
              [](const Values& v) { return double(v[0] >= -1.5); }}),
        {}, bool_dtype);
    r.errors = {undefined_input("eq", [](const Tensor& a) { return eq(a, 1); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "logical_not", numeric_and_bool(), unary_samples(3450, small_ints()),
        [](const TensorList& x) { return TensorList{logical_not(x[0])}; },
        ref([](const Values& v) { return v[0] == 0 ? 1.0 : 0.0; }), {}, bool_dtype);
    r.errors = {undefined_input("logical_not", [](const Tensor& a) { return logical_not(a); })};
    rows.push_back(std::move(r));
  }
  for (bool is_and : {true, false}) {
    std::string name = is_and ? "logical_and" : "logical_or";
    auto op = [is_and](const Tensor& a, const Tensor& b) { return is_and ? logical_and(a, b) : logical_or(a, b); };
    OpRow r = make_row(
        name, numeric_and_bool(), binary_samples(is_and ? 3500 : 3550, small_ints(), small_ints()),
        [op](const TensorList& x) { return TensorList{op(x[0], x[1])}; }, ref([is_and](const Values& v) {
          bool a = v[0] != 0, b = v[1] != 0;
          return (is_and ? a && b : a || b) ? 1.0 : 0.0;
        }),
        {}, bool_dtype);
    r.errors = {no_broadcast(name, op)};
    rows.push_back(std::move(r));
  }
}

void add_select_rows(std::vector<OpRow>& rows) {
  {
    Gen v = normal();
    Gen c = booleans();
    std::vector<Sample> samples = {
        {"same shape",
         [=](DType t, Device d) {
           return TensorList{c({7, 13}, t, d, 4000), v({7, 13}, t, d, 4001), v({7, 13}, t, d, 4002)};
         }},
        {"broadcast all three",
         [=](DType t, Device d) {
           return TensorList{c({3, 1, 5}, t, d, 4003), v({4, 1}, t, d, 4004), v({5}, t, d, 4005)};
         }},
        {"non-contiguous",
         [=](DType t, Device d) {
           return TensorList{noncontig(c({3, 7}, t, d, 4006)), noncontig(v({3, 7}, t, d, 4007)),
                             v({7, 3}, t, d, 4008).t()};
         }},
        {"0-d condition",
         [=](DType t, Device d) {
           return TensorList{c({}, t, d, 4009), v({2, 3}, t, d, 4010), v({2, 3}, t, d, 4011)};
         }},
        {"0-d values",
         [=](DType t, Device d) {
           return TensorList{c({2, 3}, t, d, 4012), v({}, t, d, 4013), v({3}, t, d, 4014)};
         }},
    };
    OpRow r = make_row(
        "where", numeric_and_bool(), samples, [](const TensorList& x) { return TensorList{where(x[0], x[1], x[2])}; },
        ref([](const Values& x) { return x[0] != 0 ? x[1] : x[2]; }), {1, 2}, same_dtype);
    r.errors = {
        {"float condition",
         [] {
           where(zeros({2, 3}), zeros({2, 3}), zeros({2, 3}));
         },
         {"where", "bool", "float32"}},
        {"shapes do not broadcast",
         [] {
           where(zeros({2, 3}, DType::Bool), zeros({4}), zeros({2, 3}));
         },
         {"where", "[2, 3]", "[4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    Gen v = normal();
    Gen m = booleans();
    std::vector<Sample> samples = {
        {"same shape",
         [=](DType t, Device d) {
           return TensorList{v({7, 13}, t, d, 4100), m({7, 13}, t, d, 4101)};
         }},
        {"broadcast mask",
         [=](DType t, Device d) {
           return TensorList{v({3, 4, 5}, t, d, 4102), m({4, 1}, t, d, 4103)};
         }},
        {"non-contiguous",
         [=](DType t, Device d) {
           return TensorList{noncontig(v({3, 7}, t, d, 4104)), m({7, 3}, t, d, 4105).t()};
         }},
        {"0-d mask",
         [=](DType t, Device d) {
           return TensorList{v({2, 3}, t, d, 4106), m({}, t, d, 4107)};
         }},
        {"0-d",
         [=](DType t, Device d) {
           return TensorList{v({}, t, d, 4108), m({}, t, d, 4109)};
         }},
    };
    OpRow r = make_row(
        "masked_fill", numeric_and_bool(), samples,
        [](const TensorList& x) { return TensorList{masked_fill(x[0], x[1], pick(x[0], -2.5, 7))}; },
        [](const TensorList& x) {
          double s = x[0].dtype() == DType::Bool ? 1.0 : pickd(x[0], -2.5, 7);
          return TensorList{ref_map(x, [s](const Values& v) { return v[1] != 0 ? s : v[0]; })};
        },
        {0}, same_dtype);
    r.errors = {
        {"integer mask",
         [] {
           masked_fill(zeros({2, 3}), zeros({2, 3}, DType::Int64), 1.0);
         },
         {"masked_fill", "bool", "int64"}},
        {"mask does not broadcast to the input",
         [] {
           masked_fill(zeros({3}), zeros({2, 3}, DType::Bool), 1.0);
         },
         {"masked_fill", "[2, 3]", "[3]"}},
        {"value past the integer dtype",
         [] { masked_fill(zeros({3}, DType::Int32), zeros({3}, DType::Bool), 3e9); },
         {"masked_fill", "int32", "3e+09", "overflow"}},
    };
    rows.push_back(std::move(r));
  }
}

void add_inplace_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "add_", kAllNumeric, inplace_samples(5000, normal(), normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.add_(x[1]);
          return TensorList{self};
        },
        ref([](const Values& v) { return v[0] + v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        {"float result into an integer tensor",
         [] {
           Tensor x = zeros({2, 3}, DType::Int64);
           x.add_(zeros({2, 3}));
         },
         {"add_", "float32", "int64"}},
        {"operand does not broadcast to self",
         [] {
           Tensor x = zeros({3});
           x.add_(zeros({2, 3}));
         },
         {"add_", "[2, 3]", "[3]"}},
        {"shapes do not broadcast",
         [] {
           Tensor x = zeros({2, 3});
           x.add_(zeros({4}));
         },
         {"add_", "[2, 3]", "[4]"}},
        {"float alpha with integer operands",
         [] {
           Tensor x = zeros({3}, DType::Int64);
           x.add_(ones({3}, DType::Int64), 0.5);
         },
         {"add_", "alpha", "int64"}},
        {"leaf that requires grad",
         [] {
           Tensor x = zeros({3});
           x.set_requires_grad(true);
           x.add_(ones({3}));
         },
         {"add_", "leaf"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "add_scalar_", kAllNumeric, unary_samples(5050, normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.add_(pick(x[0], 0.75, 2));
          return TensorList{self};
        },
        [](const TensorList& x) {
          double s = pickd(x[0], 0.75, 2);
          return TensorList{ref_map(x, [s](const Values& v) { return v[0] + s; })};
        },
        {0}, same_dtype);
    r.errors = {{"float scalar into an integer tensor",
                 [] {
                   Tensor x = zeros({3}, DType::Int32);
                   x.add_(0.5);
                 },
                 {"add_", "float32", "int32"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "sub_", signed_types(), inplace_samples(5100, normal(), normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.sub_(x[1]);
          return TensorList{self};
        },
        ref([](const Values& v) { return v[0] - v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        {"float result into an integer tensor",
         [] {
           Tensor x = zeros({2, 3}, DType::Int64);
           x.sub_(zeros({2, 3}));
         },
         {"sub_", "float32", "int64"}},
        {"operand does not broadcast to self",
         [] {
           Tensor x = zeros({3});
           x.sub_(zeros({2, 3}));
         },
         {"sub_", "[2, 3]", "[3]"}},
        {"bool tensors",
         [] {
           Tensor x = zeros({3}, DType::Bool);
           x.sub_(zeros({3}, DType::Bool));
         },
         {"sub_", "bool"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "mul_", kAllNumeric, inplace_samples(5150, normal(), normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.mul_(x[1]);
          return TensorList{self};
        },
        ref([](const Values& v) { return v[0] * v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        {"float result into an integer tensor",
         [] {
           Tensor x = zeros({2, 3}, DType::Int32);
           x.mul_(zeros({2, 3}));
         },
         {"mul_", "float32", "int32"}},
        {"operand does not broadcast to self",
         [] {
           Tensor x = zeros({3});
           x.mul_(zeros({2, 3}));
         },
         {"mul_", "[2, 3]", "[3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "mul_scalar_", kAllNumeric, unary_samples(5200, normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.mul_(pick(x[0], -1.5, 3));
          return TensorList{self};
        },
        [](const TensorList& x) {
          double s = pickd(x[0], -1.5, 3);
          return TensorList{ref_map(x, [s](const Values& v) { return v[0] * s; })};
        },
        {0}, same_dtype);
    r.errors = {{"float scalar into an integer tensor",
                 [] {
                   Tensor x = zeros({3}, DType::Int64);
                   x.mul_(1.5);
                 },
                 {"mul_", "float32", "int64"}}};
    rows.push_back(std::move(r));
  }
  {
    // True division cannot be stored into integer tensors: float dtypes only.
    OpRow r = make_row(
        "div_", kFloatTypes, inplace_samples(5250, normal(), nonzero()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.div_(x[1]);
          return TensorList{self};
        },
        ref([](const Values& v) { return v[0] / v[1]; }), {0, 1}, same_dtype);
    r.errors = {
        {"integer tensor",
         [] {
           Tensor x = ones({2, 3}, DType::Int64);
           x.div_(ones({2, 3}, DType::Int64));
         },
         {"div_", "float32", "int64"}},
        {"operand does not broadcast to self",
         [] {
           Tensor x = ones({3});
           x.div_(ones({2, 3}));
         },
         {"div_", "[2, 3]", "[3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "div_scalar_", kFloatTypes, unary_samples(5300, normal()),
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.div_(0.3);
          return TensorList{self};
        },
        ref([](const Values& v) { return v[0] / 0.3; }), {0}, same_dtype);
    r.errors = {{"integer tensor",
                 [] {
                   Tensor x = ones({3}, DType::Int32);
                   x.div_(2);
                 },
                 {"div_", "float32", "int32"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "clamp_", kAllNumeric, unary_samples(5350, avoiding({-0.5, 0.8}, 0.05)),
        [](const TensorList& x) {
          Scalar lo = pick(x[0], -0.5, 1), hi = pick(x[0], 0.8, 4);
          Tensor both = inplace_target(x[0]), low = inplace_target(x[0]), high = inplace_target(x[0]);
          both.clamp_(lo, hi);
          low.clamp_(lo, std::nullopt);
          high.clamp_(std::nullopt, hi);
          return TensorList{both, low, high};
        },
        [](const TensorList& x) {
          double lo = pickd(x[0], -0.5, 1), hi = pickd(x[0], 0.8, 4);
          return TensorList{ref_map(x, [=](const Values& v) { return std::min(std::max(v[0], lo), hi); }),
                            ref_map(x, [=](const Values& v) { return std::max(v[0], lo); }),
                            ref_map(x, [=](const Values& v) { return std::min(v[0], hi); })};
        },
        {0}, same_dtype);
    r.errors = {
        {"float bounds for an integer tensor",
         [] {
           Tensor x = zeros({3}, DType::Int64);
           x.clamp_(-0.5, 0.5);
         },
         {"clamp_", "float32", "int64"}},
        {"no bounds",
         [] {
           Tensor x = zeros({3});
           x.clamp_(std::nullopt, std::nullopt);
         },
         {"clamp", "min", "max"}},
    };
    rows.push_back(std::move(r));
  }
  {
    Gen v = normal();
    Gen m = booleans();
    std::vector<Sample> samples = {
        {"same shape",
         [=](DType t, Device d) {
           return TensorList{v({7, 13}, t, d, 5400), m({7, 13}, t, d, 5401)};
         }},
        {"broadcast mask",
         [=](DType t, Device d) {
           return TensorList{v({3, 4, 5}, t, d, 5402), m({4, 1}, t, d, 5403)};
         }},
        {"non-contiguous",
         [=](DType t, Device d) {
           return TensorList{noncontig(v({3, 7}, t, d, 5404)), m({7, 3}, t, d, 5405).t()};
         }},
        {"0-d",
         [=](DType t, Device d) {
           return TensorList{v({}, t, d, 5406), m({}, t, d, 5407)};
         }},
    };
    OpRow r = make_row(
        "masked_fill_", kAllNumeric, samples,
        [](const TensorList& x) {
          Tensor self = inplace_target(x[0]);
          self.masked_fill_(x[1], pick(x[0], -2.5, 7));
          return TensorList{self};
        },
        [](const TensorList& x) {
          double s = pickd(x[0], -2.5, 7);
          return TensorList{ref_map(x, [s](const Values& v) { return v[1] != 0 ? s : v[0]; })};
        },
        {0}, same_dtype);
    r.errors = {
        {"integer mask",
         [] {
           Tensor x = zeros({2, 3});
           x.masked_fill_(zeros({2, 3}, DType::Int64), 1.0);
         },
         {"masked_fill", "bool", "int64"}},
        {"mask does not broadcast to self",
         [] {
           Tensor x = zeros({3});
           x.masked_fill_(zeros({2, 3}, DType::Bool), 1.0);
         },
         {"masked_fill", "[2, 3]", "[3]"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace

void add_elementwise_rows(std::vector<OpRow>& rows) {
  add_arithmetic_rows(rows);
  add_unary_rows(rows);
  add_pow_clamp_rows(rows);
  add_comparison_rows(rows);
  add_select_rows(rows);
  add_inplace_rows(rows);
}

}  // namespace kiln::test
