// Op table rows of core/ops/math.h: rounding, the tangent and the inverse and hyperbolic
// trigonometric functions, erf and erfc, log2, log10 and exp2, atan2, xlogy, and the rounding
// divisions and remainders in their tensor and scalar forms. Inputs of ops with jumps (rounding,
// the rounded quotients, the remainders, atan2's branch cut) stay away from them, so central
// differences never straddle one; the domains of asin, acos, acosh and atanh are respected.
#include <cmath>
#include <cstdlib>
#include <string>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

DType float_or_default(DType t) { return is_floating(t) ? t : DType::Float32; }

// Integer inputs give float32 outputs computed in float32: float32's tolerance.
void int_inputs_give_float32(OpRow& r) {
  for (DType t : {DType::Int32, DType::Int64, DType::UInt8}) r.tolerance[t] = default_tolerance(DType::Float32);
}

// Every multiple of 0.5 in [-15, 15]: the jumps of floor, ceil, trunc and round (and of frac).
Values halves() {
  Values k;
  for (int i = -30; i <= 30; ++i) k.push_back(0.5 * i);
  return k;
}

// Values whose scaled form x * 10^d (x / 10^-d when d < 0) is 0.3 past an integer, so that
// round(x, d) does not depend on how the scaling rounds.
Gen decimal_grid(int decimals) {
  return [decimals](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd(s, DType::Float64, Device::cpu(), seed, 300.0));
    const double scale = std::pow(10.0, decimals);
    for (double& x : v) x = (std::floor(x) + 0.3) / scale;
    return from_values(v, s).to(t).to(d);
  };
}

// A scalar operand that keeps integer rows integral: f for float tensors, i for the others.
Scalar pick(const Tensor& t, double f, int64_t i) { return t.is_floating_point() ? Scalar(f) : Scalar(i); }

double fmod_ref(double a, double b) { return std::fmod(a, b); }
double remainder_ref(double a, double b) {
  const double r = std::fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

void add_float_unary_rows(std::vector<OpRow>& rows) {
  struct Unary {
    const char* name;
    std::vector<DType> dtypes;
    Gen gen;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
  };
  // Integers in [1, 10] for the rows over every dtype (positive()); asin, acos and atanh, whose
  // domain holds no integer but 0 and 1, take floats only.
  const std::vector<Unary> unary = {
      {"tan", kAllNumeric, positive(-1.2, 1.2), tan, [](double v) { return std::tan(v); }},
      {"asin", kFloatTypes, positive(-0.9, 0.9), asin, [](double v) { return std::asin(v); }},
      {"acos", kFloatTypes, positive(-0.9, 0.9), acos, [](double v) { return std::acos(v); }},
      {"atan", kAllNumeric, normal(3.0), atan, [](double v) { return std::atan(v); }},
      {"sinh", kAllNumeric, normal(2.0), sinh, [](double v) { return std::sinh(v); }},
      {"cosh", kAllNumeric, normal(2.0), cosh, [](double v) { return std::cosh(v); }},
      {"asinh", kAllNumeric, normal(3.0), asinh, [](double v) { return std::asinh(v); }},
      {"acosh", kAllNumeric, positive(1.2, 4.0), acosh, [](double v) { return std::acosh(v); }},
      {"atanh", kFloatTypes, positive(-0.9, 0.9), atanh, [](double v) { return std::atanh(v); }},
      {"erf", kAllNumeric, normal(1.5), erf, [](double v) { return std::erf(v); }},
      {"erfc", kAllNumeric, normal(1.5), erfc, [](double v) { return std::erfc(v); }},
      {"log2", kAllNumeric, positive(0.2, 4.0), log2, [](double v) { return std::log2(v); }},
      {"log10", kAllNumeric, positive(0.2, 4.0), log10, [](double v) { return std::log10(v); }},
      {"exp2", kAllNumeric, normal(2.0), exp2, [](double v) { return std::exp2(v); }},
  };
  uint64_t seed = 5000;
  for (const Unary& u : unary) {
    auto op = u.op;
    auto fn = u.ref;
    OpRow r = make_row(
        u.name, u.dtypes, unary_samples(seed, u.gen), [op](const TensorList& x) { return TensorList{op(x[0])}; },
        ref([fn](const Values& v) { return fn(v[0]); }), {0}, float_or_default);
    int_inputs_give_float32(r);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {undefined_input(u.name, [op](const Tensor& a) { return op(a); })};
    rows.push_back(std::move(r));
    seed += 50;
  }
}

void add_rounding_rows(std::vector<OpRow>& rows) {
  struct Rounding {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
  };
  const std::vector<Rounding> rounding = {
      {"floor", floor, [](double v) { return std::floor(v); }},
      {"ceil", ceil, [](double v) { return std::ceil(v); }},
      {"trunc", trunc, [](double v) { return std::trunc(v); }},
      {"round", round, [](double v) { return std::nearbyint(v); }},
  };
  uint64_t seed = 5800;
  for (const Rounding& u : rounding) {
    auto op = u.op;
    auto fn = u.ref;
    // Integers come back as they are; the gradient (zero) is checked away from the jumps.
    OpRow r = make_row(
        u.name, kAllNumeric, unary_samples(seed, avoiding(halves(), 0.05, 4.0)),
        [op](const TensorList& x) { return TensorList{op(x[0])}; }, ref([fn](const Values& v) { return fn(v[0]); }),
        {0}, same_dtype);
    r.exact_outputs = {0};
    r.errors = {
        undefined_input(u.name, [op](const Tensor& a) { return op(a); }),
        {"bool tensor", [op] { op(zeros({2}, DType::Bool)); }, {u.name, "bool"}},
    };
    rows.push_back(std::move(r));
    seed += 50;
  }
  for (const int decimals : {2, -1}) {
    OpRow r = make_row(
        "round decimals=" + std::to_string(decimals), kFloatTypes, unary_samples(seed, decimal_grid(decimals)),
        [decimals](const TensorList& x) { return TensorList{round(x[0], decimals)}; }, ref([decimals](const Values& v) {
          const double scale = std::pow(10.0, std::abs(decimals));
          return decimals > 0 ? std::nearbyint(v[0] * scale) / scale : std::nearbyint(v[0] / scale) * scale;
        }),
        {0}, same_dtype);
    r.errors = {{"integer tensor",
                 [decimals] {
                   round(zeros({2, 3}, DType::Int64), decimals);
                 },
                 {"round", "decimals", "int64"}}};
    if (decimals > 0)
      r.errors.push_back({"10^decimals past float64", [] { round(zeros({2}), 400); }, {"round", "400"}});
    rows.push_back(std::move(r));
    seed += 50;
  }
  {
    OpRow r = make_row(
        "frac", kFloatTypes, unary_samples(seed, avoiding(halves(), 0.05, 4.0)),
        [](const TensorList& x) { return TensorList{frac(x[0])}; },
        ref([](const Values& v) { return v[0] - std::trunc(v[0]); }), {0}, same_dtype);
    r.errors = {
        undefined_input("frac", [](const Tensor& a) { return frac(a); }),
        {"integer tensor", [] { frac(zeros({2}, DType::Int32)); }, {"frac", "int32"}},
    };
    rows.push_back(std::move(r));
  }
}

void add_binary_rows(std::vector<OpRow>& rows) {
  {
    // y away from 0, where atan2 jumps from pi to -pi for negative x.
    OpRow r = make_row(
        "atan2", kAllNumeric, binary_samples(6100, nonzero(), normal()),
        [](const TensorList& x) { return TensorList{atan2(x[0], x[1])}; },
        ref([](const Values& v) { return std::atan2(v[0], v[1]); }), {0, 1}, float_or_default);
    int_inputs_give_float32(r);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {
        {"shapes do not broadcast",
         [] {
           atan2(zeros({2, 3}), zeros({4}));
         },
         {"atan2", "[2, 3]", "[4]"}},
        {"undefined operand", [] { atan2(zeros({2}), Tensor()); }, {"atan2", "undefined"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // x nonzero: the gradient with respect to x at x = 0 is PyTorch's 0, not log y (by hand, in
    // tests/core/test_math.cpp).
    OpRow r = make_row(
        "xlogy", kFloatTypes, binary_samples(6150, nonzero(), positive(0.2, 4.0)),
        [](const TensorList& x) { return TensorList{xlogy(x[0], x[1])}; },
        ref([](const Values& v) { return v[0] * std::log(v[1]); }), {0, 1}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {{"undefined operand", [] { xlogy(Tensor(), zeros({2})); }, {"xlogy", "undefined"}}};
    rows.push_back(std::move(r));
  }
  struct Division {
    const char* name;
    const char* op_name;  // as errors name it
    Tensor (*op)(const Tensor&, const Tensor&);
    double (*ref)(double, double);
  };
  const std::vector<Division> divisions = {
      {"fmod", "fmod", fmod, fmod_ref},
      {"remainder", "remainder", remainder, remainder_ref},
      {"floor_divide", "floor_divide", floor_divide, [](double a, double b) { return std::floor(a / b); }},
      {"div trunc", "div(rounding_mode='trunc')",
       [](const Tensor& a, const Tensor& b) { return div(a, b, RoundingMode::Trunc); },
       [](double a, double b) { return std::trunc(a / b); }},
      {"div floor", "div(rounding_mode='floor')",
       [](const Tensor& a, const Tensor& b) { return div(a, b, RoundingMode::Floor); },
       [](double a, double b) { return std::floor(a / b); }},
  };
  // The rounded quotients' gradients are zero (checked: the functions are flat between jumps).
  uint64_t seed = 6200;
  for (const Division& u : divisions) {
    auto op = u.op;
    auto fn = u.ref;
    const std::string name = u.op_name;
    OpRow r = make_row(
        u.name, kAllNumeric, binary_samples(seed, normal(3.0), nonzero()),
        [op](const TensorList& x) { return TensorList{op(x[0], x[1])}; },
        ref([fn](const Values& v) { return fn(v[0], v[1]); }), {0, 1}, same_dtype);
    // Integer quotients of small values are exact in every dtype; so is fmod.
    r.exact_outputs = {0};
    if (name == "remainder") r.exact_outputs = {};  // fmod's result plus b: one rounding
    r.errors = {
        {"shapes do not broadcast",
         [op] {
           op(zeros({2, 3}), zeros({4}));
         },
         {name, "[2, 3]", "[4]"}},
        {"bool operands", [op] { op(zeros({2}, DType::Bool), ones({2}, DType::Bool)); }, {name, "bool"}},
        {"integer division by zero",
         [op] {
           op(tensor<int64_t>({4, -7, 9}), tensor<int64_t>({2, 0, 3}));
         },
         {name, "division by zero", "int64", "[3]"}},
        {"undefined operand", [op] { op(zeros({2}), Tensor()); }, {name, "undefined"}},
    };
    rows.push_back(std::move(r));
    seed += 50;
  }
  {
    // Scalar operands: integral ones for integer tensors (the result stays integral), fractional
    // ones for floats, negative divisors included (so no uint8, where negative results wrap); the
    // remainder of a scalar by a tensor (5.3: nonzero() puts values at +-0.25, where 5.5 / t would
    // sit on a jump).
    const std::vector<DType> signed_dtypes = {DType::Float32, DType::Float16, DType::BFloat16,
                                              DType::Float64, DType::Int32,   DType::Int64};
    OpRow r = make_row(
        "fmod remainder floor_divide scalar", signed_dtypes, unary_samples(6500, nonzero()),
        [](const TensorList& x) {
          const Tensor& t = x[0];
          return TensorList{fmod(t, pick(t, -1.25, 3)), remainder(t, pick(t, -1.25, -3)),
                            floor_divide(t, pick(t, 0.75, 2)), div(t, pick(t, -0.75, -2), RoundingMode::Trunc),
                            remainder(pick(t, 5.3, 7), t)};
        },
        [](const TensorList& x) {
          const bool f = x[0].is_floating_point();
          const double a = f ? -1.25 : 3, b = f ? -1.25 : -3, c = f ? 0.75 : 2, d = f ? -0.75 : -2, e = f ? 5.3 : 7;
          return TensorList{ref_map(x, [a](const Values& v) { return fmod_ref(v[0], a); }),
                            ref_map(x, [b](const Values& v) { return remainder_ref(v[0], b); }),
                            ref_map(x, [c](const Values& v) { return std::floor(v[0] / c); }),
                            ref_map(x, [d](const Values& v) { return std::trunc(v[0] / d); }),
                            ref_map(x, [e](const Values& v) { return remainder_ref(e, v[0]); })};
        },
        {0}, same_dtype);
    r.errors = {
        {"integer division by zero",
         [] {
           remainder(tensor<int64_t>({5, 6}), 0);
         },
         {"remainder", "division by zero", "0"}},
        {"integer tensor divisor with a zero",
         [] {
           remainder(3, tensor<int64_t>({5, 0}).to(DType::Int32));
         },
         {"remainder", "division by zero", "int32"}},
        {"bool tensor and bool scalar", [] { floor_divide(ones({2}, DType::Bool), true); }, {"floor_divide", "bool"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace

// Whole multiples of 0.5 from normal draws: exact zeros among them (heaviside's third case).
Gen steps() {
  return [](const Shape& s, DType t, Device d, uint64_t seed) {
    Values v = values(rnd(s, DType::Float64, Device::cpu(), seed, 1.2));
    for (double& x : v) x = std::round(x * 2) / 2;
    return from_values(v, s).to(t).to(d);
  };
}

// The composed binary ops (hypot, copysign, fmax, fmin, heaviside, ldexp, float_power)
// and signbit.
void add_composed_rows(std::vector<OpRow>& rows) {
  struct Binary {
    const char* name;
    std::vector<DType> dtypes;
    Gen ga, gb;
    Tensor (*op)(const Tensor&, const Tensor&);
    double (*ref)(double, double);
    std::vector<size_t> differentiable;
    std::function<DType(DType)> out_dtype;
  };
  const auto fmax_ref = [](double a, double b) { return std::fmax(a, b); };
  const auto fmin_ref = [](double a, double b) { return std::fmin(a, b); };
  const std::vector<Binary> binary = {
      {"hypot",
       kAllNumeric,
       normal(2.0),
       normal(2.0),
       hypot,
       [](double a, double b) { return std::hypot(a, b); },
       {0, 1},
       float_or_default},
      // b away from 0, whose sign decides; its gradient is 0 everywhere else.
      {"copysign",
       kAllNumeric,
       normal(),
       nonzero(),
       copysign,
       [](double a, double b) { return std::copysign(a, b); },
       {0, 1},
       float_or_default},
      {"fmax", kAllNumeric, normal(), normal(), fmax, fmax_ref, {0, 1}, same_dtype},
      {"fmin", kAllNumeric, normal(), normal(), fmin, fmin_ref, {0, 1}, same_dtype},
      // x's gradient is 0 and central differences at its zeros would jump: values' alone is
      // checked.
      {"heaviside",
       kFloatTypes,
       steps(),
       normal(),
       heaviside,
       [](double x, double v) { return x == 0 ? v : (x > 0 ? 1.0 : 0.0); },
       {1},
       same_dtype},
      {"ldexp",
       kFloatTypes,
       normal(),
       normal(2.0),
       ldexp,
       [](double x, double e) { return x * std::exp2(e); },
       {0, 1},
       same_dtype},
      {"float_power",
       kAllNumeric,
       positive(0.5, 3.0),
       normal(),
       float_power,
       [](double a, double b) { return std::pow(a, b); },
       {0, 1},
       [](DType) { return DType::Float64; }},
  };
  uint64_t seed = 6600;
  for (const Binary& u : binary) {
    auto op = u.op;
    auto fn = u.ref;
    OpRow r = make_row(
        u.name, u.dtypes, binary_samples(seed, u.ga, u.gb),
        [op](const TensorList& x) { return TensorList{op(x[0], x[1])}; },
        ref([fn](const Values& v) { return fn(v[0], v[1]); }), u.differentiable, u.out_dtype);
    if (u.out_dtype(DType::Int32) == DType::Float32) int_inputs_give_float32(r);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    const std::string name = u.name;
    r.errors = {
        {"shapes do not broadcast",
         [op] {
           op(zeros({2, 3}), zeros({4}));
         },
         {name, "[2, 3]", "[4]"}},
        {"undefined operand", [op] { op(zeros({2}), Tensor()); }, {name, "undefined"}},
    };
    if (name == "heaviside") {
      r.errors.push_back({"dtypes differ",
                          [] { heaviside(zeros({2}), zeros({2}, DType::Float64)); },
                          {"heaviside", "float32", "float64"}});
    }
    rows.push_back(std::move(r));
    seed += 50;
  }
  {
    OpRow r = make_row(
        "signbit", kAllNumeric, unary_samples(seed, normal()),
        [](const TensorList& x) { return TensorList{signbit(x[0])}; },
        ref([](const Values& v) { return std::signbit(v[0]) ? 1.0 : 0.0; }), {}, [](DType) { return DType::Bool; });
    r.exact_outputs = {0};
    r.errors = {undefined_input("signbit", [](const Tensor& a) { return signbit(a); })};
    rows.push_back(std::move(r));
  }
}

void add_math_rows(std::vector<OpRow>& rows) {
  add_float_unary_rows(rows);
  add_rounding_rows(rows);
  add_binary_rows(rows);
  add_composed_rows(rows);
}

}  // namespace kiln::test
