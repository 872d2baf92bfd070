// Op table rows of the factory family: arange, linspace, full (with zeros and ones), eye and the
// window functions, whose references list the expected values outright (the windows': their closed
// forms, kaiser's through a long double series of I0). The sample's only tensor carries the dtype
// to create.
#include <cmath>
#include <numbers>
#include <utility>

#include "tests/op_table/op_table.h"

namespace kiln::test {

void add_factory_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "arange";
    r.dtypes = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::BFloat16};
    r.samples = {shape_sample("0..7 step 0.5 / ints")};
    r.op = [](const TensorList& x) {
      TensorOptions o(dt(x), x[0].device());
      return TensorList{is_floating(o.dtype) ? arange(0.0, 7.0, 0.5, o) : arange(-4, 9, 3, o)};
    };
    r.reference = [](const TensorList& x) {
      std::vector<double> v;
      if (is_floating(dt(x))) {
        for (int i = 0; i < 14; ++i) v.push_back(0.5 * i);
      } else {
        for (int i = -4; i < 9; i += 3) v.push_back(i);
      }
      return TensorList{from_values(v, {static_cast<int64_t>(v.size())})};
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"zero step", [] { arange(0, 5, 0); }, {"arange", "step"}},
                {"step away from end", [] { arange(0, 5, -1); }, {"arange", "step -1"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "linspace";
    r.dtypes = {DType::Float32, DType::Float64, DType::Float16};
    r.samples = {shape_sample("-1..2, 7 points")};
    r.op = [](const TensorList& x) { return TensorList{linspace(-1.0, 2.0, 7, TensorOptions(dt(x), x[0].device()))}; };
    r.reference = [](const TensorList&) {
      std::vector<double> v;
      for (int i = 0; i < 7; ++i) v.push_back(-1.0 + 0.5 * i);
      return TensorList{from_values(v, {7})};
    };
    r.errors = {{"negative steps", [] { linspace(0, 1, -2); }, {"linspace", "-2"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "full";
    r.dtypes = kAllNumeric;
    r.samples = {shape_sample("2x3x5 of 3")};
    r.op = [](const TensorList& x) {
      return TensorList{full({2, 3, 5}, 3, TensorOptions(dt(x), x[0].device())), zeros({4}, TensorOptions(dt(x), x[0].device())),
                        ones({2, 2}, TensorOptions(dt(x), x[0].device()))};
    };
    r.reference = [](const TensorList&) {
      return TensorList{from_values(std::vector<double>(30, 3.0), {2, 3, 5}), from_values(std::vector<double>(4, 0.0), {4}),
                        from_values(std::vector<double>(4, 1.0), {2, 2})};
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"negative size", [] { full({-2}, 1.0); }, {"full", "[-2]"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "eye";
    r.dtypes = kAllNumeric;
    r.samples = {shape_sample("3x3, 2x4, 4x2 and 0x3")};
    r.op = [](const TensorList& x) {
      const TensorOptions o(dt(x), x[0].device());
      return TensorList{eye(3, o), eye(2, 4, o), eye(4, 2, o), eye(0, 3, o)};
    };
    r.reference = [](const TensorList&) {
      TensorList out;
      for (auto [n, m] : {std::pair<int64_t, int64_t>{3, 3}, {2, 4}, {4, 2}, {0, 3}}) {
        std::vector<double> v;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) v.push_back(i == j ? 1.0 : 0.0);
        out.push_back(from_values(v, {n, m}));
      }
      return out;
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"negative size", [] { eye(2, -1); }, {"eye", "2 x -1"}}};
    rows.push_back(std::move(r));
  }
  {
    // Each window at lengths 0, 1, 6 and 7, periodic and symmetric.
    OpRow r;
    r.name = "windows";
    r.dtypes = kFloatTypes;
    r.samples = {shape_sample("hann, hamming, blackman, bartlett, kaiser at 0, 1, 6, 7")};
    const std::vector<int64_t> lengths = {0, 1, 6, 7};
    r.op = [lengths](const TensorList& x) {
      const TensorOptions o(dt(x), x[0].device());
      TensorList out;
      for (bool periodic : {true, false}) {
        for (int64_t n : lengths) {
          out.push_back(hann_window(n, periodic, o));
          out.push_back(hamming_window(n, periodic, 0.54, 0.46, o));
          out.push_back(blackman_window(n, periodic, o));
          out.push_back(bartlett_window(n, periodic, o));
          out.push_back(kaiser_window(n, periodic, 5.0, o));
        }
      }
      return out;
    };
    r.reference = [lengths](const TensorList&) {
      using Real = long double;
      constexpr Real pi = std::numbers::pi_v<Real>;
      const auto i0 = [](Real v) {
        Real term = 1, sum = 1;
        for (int k = 1; k < 60; ++k) sum += term *= (v / 2) * (v / 2) / (static_cast<Real>(k) * k);
        return sum;
      };
      const std::vector<std::function<Real(Real)>> shapes = {
          [](Real t) { return 0.5L - 0.5L * std::cos(2 * pi * t); },
          [](Real t) { return 0.54L - 0.46L * std::cos(2 * pi * t); },
          [](Real t) { return 0.42L - 0.5L * std::cos(2 * pi * t) + 0.08L * std::cos(4 * pi * t); },
          [](Real t) { return 1 - std::fabs(2 * t - 1); },
          [i0](Real t) { return i0(5 * std::sqrt(1 - (2 * t - 1) * (2 * t - 1))) / i0(5); },
      };
      TensorList out;
      for (bool periodic : {true, false}) {
        for (int64_t n : lengths) {
          for (const auto& shape : shapes) {
            std::vector<double> v;
            for (int64_t i = 0; i < n; ++i) {
              const Real t = n == 1 ? 0 : static_cast<Real>(i) / static_cast<Real>(periodic ? n : n - 1);
              v.push_back(n == 1 ? 1.0 : static_cast<double>(shape(t)));
            }
            out.push_back(from_values(v, {n}));
          }
        }
      }
      return out;
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"negative length", [] { hann_window(-1); }, {"hann_window", "-1"}},
        {"integer dtype", [] { hamming_window(4, true, 0.54, 0.46, DType::Int32); }, {"hamming_window", "int32"}},
        {"infinite beta", [] { kaiser_window(4, true, INFINITY); }, {"kaiser_window", "beta", "inf"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
