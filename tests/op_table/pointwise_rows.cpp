// Op table rows of the pointwise family: addcmul and addcdiv over three broadcast inputs,
// logical_xor in every dtype and bool, isclose (NaN and infinity cases, with and without
// equal_nan, a broadcast b) and rad2deg and deg2rad, against float64 formulas.
#include <cmath>
#include <limits>
#include <numbers>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

DType to_bool(DType) { return DType::Bool; }

// Three inputs of broadcasting shapes; the third from `third` (addcdiv's denominators).
std::vector<Sample> three_samples(uint64_t seed, Gen third) {
  return {{"[3, 4], [4] and [3, 1]",
           [=](DType t, Device d) {
             return TensorList{rnd({3, 4}, t, d, seed), rnd({4}, t, d, seed + 1), third({3, 1}, t, d, seed + 2)};
           }},
          {"non-contiguous, all [5, 3]", [=](DType t, Device d) {
             return TensorList{noncontig(rnd({5, 3}, t, d, seed + 3)), rnd({5, 3}, t, d, seed + 4),
                               third({5, 3}, t, d, seed + 5)};
           }}};
}

// a and b decidedly close or far under rtol 0.05, atol 1e-3, whatever the dtype's rounding: |a| in
// [0.5, 2], b = a (1 + 0.001) or a 1.5, and the first four pairs (NaN, NaN), (inf, inf),
// (inf, -inf) and (NaN, 1). b is [cols] (broadcast) when `row`.
Sample close_pairs(const std::string& name, int64_t rows, int64_t cols, bool row) {
  return {name, [=](DType t, Device d) {
            const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
            Values a, b;
            for (int64_t i = 0; i < rows * cols; ++i) {
              double x = (0.5 + static_cast<double>((i * 37) % 100) / 66.0) * (i % 3 == 0 ? -1.0 : 1.0);
              a.push_back(x);
            }
            for (int64_t i = 0; i < (row ? cols : rows * cols); ++i) b.push_back(a[at(i)] * (i % 4 == 1 ? 1.5 : 1.001));
            const double sa[] = {nan, inf, inf, nan}, sb[] = {nan, inf, -inf, 1.0};
            for (size_t i = 0; i < 4; ++i) {
              a[i] = sa[i];
              b[i] = sb[i];
            }
            return TensorList{from_values(a, {rows, cols}).to(t).to(d),
                              from_values(b, row ? Shape{cols} : Shape{rows, cols}).to(t).to(d)};
          }};
}

}  // namespace

void add_pointwise_rows(std::vector<OpRow>& rows) {
  {
    OpRow r = make_row(
        "addcmul value 0.5", kFloatTypes, three_samples(3601, normal()),
        [](const TensorList& x) { return TensorList{addcmul(x[0], x[1], x[2], 0.5)}; },
        ref([](const Values& v) { return v[0] + 0.5 * v[1] * v[2]; }), {0, 1, 2}, same_dtype);
    r.errors = {{"shapes that do not broadcast",
                 [] { addcmul(zeros({3}), zeros({4}), zeros({3})); },
                 {"addcmul", "[3]", "[4]"}},
                undefined_input("addcmul", [](const Tensor& t) { return addcmul(t, zeros({1}), zeros({1})); })};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "addcdiv value -2", kFloatTypes, three_samples(3611, nonzero()),
        [](const TensorList& x) { return TensorList{addcdiv(x[0], x[1], x[2], -2.0)}; },
        ref([](const Values& v) { return v[0] - 2.0 * v[1] / v[2]; }), {0, 1, 2}, same_dtype);
    r.errors = {{"integer tensor1 and tensor2",
                 [] { addcdiv(zeros({2}), zeros({2}, DType::Int64), ones({2}, DType::Int32)); },
                 {"addcdiv", "int64", "int32"}}};
    rows.push_back(std::move(r));
  }
  {
    // Zeros among the values of every dtype.
    Gen with_zeros = [](const Shape& s, DType t, Device d, uint64_t seed) {
      const Tensor x = rnd(s, t, d, seed);
      return where(rnd(s, DType::Bool, d, seed + 7), x, zeros_like(x));
    };
    OpRow r = make_row(
        "logical_xor", numeric_and_bool(), binary_samples(3621, with_zeros, with_zeros),
        [](const TensorList& x) { return TensorList{logical_xor(x[0], x[1])}; },
        ref([](const Values& v) { return (v[0] != 0) != (v[1] != 0) ? 1.0 : 0.0; }), {}, to_bool);
    r.errors = {undefined_input("logical_xor", [](const Tensor& t) { return logical_xor(t, zeros({1})); })};
    rows.push_back(std::move(r));
  }
  for (bool equal_nan : {false, true}) {
    OpRow r = make_row(
        std::string("isclose rtol 0.05 atol 1e-3") + (equal_nan ? " equal_nan" : ""), kFloatTypes,
        {close_pairs("[4, 6]", 4, 6, false), close_pairs("[5, 7] and a broadcast [7]", 5, 7, true)},
        [equal_nan](const TensorList& x) { return TensorList{isclose(x[0], x[1], 0.05, 1e-3, equal_nan)}; },
        ref([equal_nan](const Values& v) {
          const double a = v[0], b = v[1];
          if (a == b || (equal_nan && std::isnan(a) && std::isnan(b))) return 1.0;
          const double error = std::fabs(a - b);
          return std::isfinite(error) && error <= 1e-3 + 0.05 * std::fabs(b) ? 1.0 : 0.0;
        }),
        {}, to_bool);
    if (!equal_nan) {
      r.errors = {
          {"dtypes differ", [] { isclose(zeros({2}), zeros({2}, DType::Float64)); }, {"isclose", "float32", "float64"}},
          {"a negative rtol", [] { isclose(zeros({2}), zeros({2}), -1.0); }, {"isclose", "rtol", "-1"}}};
    }
    rows.push_back(std::move(r));
  }
  rows.push_back(make_row(
      "rad2deg", kFloatTypes, unary_samples(3631, normal()),
      [](const TensorList& x) { return TensorList{rad2deg(x[0])}; },
      ref([](const Values& v) { return v[0] * 180.0 / std::numbers::pi; }), {0}, same_dtype));
  rows.push_back(make_row(
      "deg2rad", kFloatTypes, unary_samples(3641, normal(90.0)),
      [](const TensorList& x) { return TensorList{deg2rad(x[0])}; },
      ref([](const Values& v) { return v[0] * std::numbers::pi / 180.0; }), {0}, same_dtype));
}

}  // namespace kiln::test
