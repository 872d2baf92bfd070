// Hand tests of scatter_reduce, index_reduce, index_copy, advanced_index and index_put beyond the
// op table's rows: how amax and amin split the gradient among ties (x's value counted only when it
// took part, unlike PyTorch's backward), NaN, prod's gradient with zeros among the values, integer
// means rounding down, many writes to few positions (a scan of many steps, against a loop), and
// that the index ops leave their input as it was.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "tests/core/same_values.h"

using namespace kiln;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor doubles(std::vector<double> v) { return tensor(v); }
Tensor longs(std::vector<double> v) { return tensor(v).to(DType::Int64); }

Tensor leaf(std::vector<double> v) {
  Tensor t = doubles(std::move(v));
  t.set_requires_grad(true);
  return t;
}

bool same(const std::vector<double>& a, const std::vector<double>& b) { return test::same_values(a, b, true); }
}  // namespace

TEST_CASE("scatter_reduce: amax and amin split the gradient evenly among the tied values", "[scatter_reduce]") {
  // Position 0 takes x's 5 and src's 5, 3 and 5: three values tie for the maximum.
  Tensor x = leaf({5, 0}), src = leaf({5, 3, 5});
  Tensor out = scatter_reduce(x, 0, longs({0, 0, 0}), src, ScatterReduce::Amax);
  CHECK(same(out.to_vector_double(), {5, 0}));
  out.backward(doubles({3, 7}));
  CHECK(same(x.grad().to_vector_double(), {1, 7}));  // position 1 is x's alone
  CHECK(same(src.grad().to_vector_double(), {1, 0, 1}));

  Tensor y = leaf({-1, 4}), s = leaf({-1, 2});
  scatter_reduce(y, 0, longs({0, 0}), s, ScatterReduce::Amin).sum().backward();
  CHECK(same(y.grad().to_vector_double(), {0.5, 1}));
  CHECK(same(s.grad().to_vector_double(), {0.5, 0}));
}

TEST_CASE("scatter_reduce: without include_self, x's value takes no share even where it equals the result",
          "[scatter_reduce]") {
  // out[0] = max(src[0], src[1]) = src[0], whose derivative is 1; x[0] equals it but took no part.
  // (PyTorch's backward counts x[0] among the ties and gives src[0] only half.)
  Tensor x = leaf({3, 5}), src = leaf({3, 1});
  Tensor out = scatter_reduce(x, 0, longs({0, 0}), src, ScatterReduce::Amax, false);
  CHECK(same(out.to_vector_double(), {3, 5}));
  out.sum().backward();
  CHECK(same(src.grad().to_vector_double(), {1, 0}));
  CHECK(same(x.grad().to_vector_double(), {0, 1}));
}

TEST_CASE("scatter_reduce: amax and amin propagate NaN and route its gradient to the NaN", "[scatter_reduce]") {
  for (const ScatterReduce reduce : {ScatterReduce::Amax, ScatterReduce::Amin}) {
    INFO(scatter_reduce_name(reduce));
    Tensor x = leaf({1, 2}), src = leaf({kNaN, 4, -4});
    Tensor out = scatter_reduce(x, 0, longs({0, 0, 1}), src, reduce);
    const std::vector<double> v = out.to_vector_double();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == (reduce == ScatterReduce::Amax ? 2 : -4));
    out.sum().backward();
    CHECK(same(x.grad().to_vector_double(), {0, reduce == ScatterReduce::Amax ? 1.0 : 0.0}));
    CHECK(same(src.grad().to_vector_double(), {1, 0, reduce == ScatterReduce::Amax ? 0.0 : 1.0}));
  }
}

TEST_CASE("scatter_reduce: prod's gradient is the product of the other values, zeros included", "[scatter_reduce]") {
  // Position 0: x's 2 and src's 0 and 3 (one zero). Position 1: x's 4 and src's 0, 0 (two zeros).
  // Position 2: nothing written.
  Tensor x = leaf({2, 4, 7}), src = leaf({0, 3, 0, 0});
  Tensor out = scatter_reduce(x, 0, longs({0, 0, 1, 1}), src, ScatterReduce::Prod);
  CHECK(same(out.to_vector_double(), {0, 0, 7}));
  out.sum().backward();
  CHECK(same(x.grad().to_vector_double(), {0, 0, 1}));
  CHECK(same(src.grad().to_vector_double(), {6, 0, 0, 0}));

  // Without x's value: position 0 is 0 * 3, position 1 is 0 * 0; x's gradient only where unwritten.
  Tensor y = leaf({2, 4, 7}), s = leaf({0, 3, 0, 0});
  Tensor out2 = scatter_reduce(y, 0, longs({0, 0, 1, 1}), s, ScatterReduce::Prod, false);
  CHECK(same(out2.to_vector_double(), {0, 0, 7}));
  out2.sum().backward();
  CHECK(same(y.grad().to_vector_double(), {0, 0, 1}));
  CHECK(same(s.grad().to_vector_double(), {3, 0, 0, 0}));
}

TEST_CASE("scatter_reduce: an integer mean rounds down, as floor division", "[scatter_reduce]") {
  // (-5 + 0 + 0) / 3 = -1.67: floor -2 (truncation would give -1); (7 + 1) / 2 = 4.
  const Tensor x = longs({-5, 7, 9});
  const Tensor out = scatter_reduce(x, 0, longs({0, 0, 1}), longs({0, 0, 1}), ScatterReduce::Mean);
  CHECK(out.dtype() == DType::Int64);
  CHECK(same(out.to_vector_double(), {-2, 4, 9}));
  const Tensor no_self = scatter_reduce(x, 0, longs({0, 0, 1}), longs({-1, -2, 1}), ScatterReduce::Mean, false);
  CHECK(same(no_self.to_vector_double(), {-2, 1, 9}));
}

TEST_CASE("scatter_reduce: many writes to few positions agree with a loop over them", "[scatter_reduce]") {
  // 1000 writes into 37 positions: runs of about 27 sorted writes, so the scan takes 10 steps.
  const int64_t n = 1000, m = 37;
  std::vector<double> idx(n), val(n), base(m);
  uint64_t s = 12345;
  auto next = [&s] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(s >> 40) / static_cast<double>(1ull << 24);
  };
  for (int64_t k = 0; k < n; ++k) {
    idx[k] = std::floor(next() * (m - 3));  // the last three positions are never written
    val[k] = 0.9 + 0.2 * next();            // near 1, so products of 27 stay moderate
  }
  for (int64_t k = 0; k < m; ++k) base[k] = 0.9 + 0.2 * next();
  for (const ScatterReduce reduce : {ScatterReduce::Prod, ScatterReduce::Amax, ScatterReduce::Amin}) {
    for (const bool include_self : {true, false}) {
      INFO(scatter_reduce_name(reduce) << (include_self ? "" : ", exclude self"));
      std::vector<double> expected = base;
      std::vector<bool> started(m, include_self);
      for (int64_t k = 0; k < n; ++k) {
        double& e = expected[static_cast<size_t>(idx[k])];
        const bool first = !started[static_cast<size_t>(idx[k])];
        started[static_cast<size_t>(idx[k])] = true;
        if (first)
          e = val[k];
        else if (reduce == ScatterReduce::Prod)
          e *= val[k];
        else if (reduce == ScatterReduce::Amax)
          e = std::max(e, val[k]);
        else
          e = std::min(e, val[k]);
      }
      const std::vector<double> got =
          scatter_reduce(doubles(base), 0, longs(idx), doubles(val), reduce, include_self).to_vector_double();
      REQUIRE(got.size() == expected.size());
      for (int64_t k = 0; k < m; ++k) {
        if (reduce == ScatterReduce::Prod)
          CHECK(got[k] == Approx(expected[k]).epsilon(1e-13));
        else
          CHECK(got[k] == expected[k]);
      }
    }
  }
}

TEST_CASE("scatter_reduce: an empty index leaves x as it was", "[scatter_reduce]") {
  const Tensor x = doubles({1, 2, 3});
  for (const ScatterReduce reduce :
       {ScatterReduce::Sum, ScatterReduce::Prod, ScatterReduce::Mean, ScatterReduce::Amax, ScatterReduce::Amin}) {
    const Tensor out = scatter_reduce(x, 0, zeros({0}, DType::Int64), zeros({0}, DType::Float64), reduce, false);
    CHECK(same(out.to_vector_double(), {1, 2, 3}));
  }
}

TEST_CASE("index_put and index_copy return a new tensor and leave x as it was", "[scatter_reduce]") {
  const Tensor x = doubles({1, 2, 3});
  const Tensor put = index_put(x, {longs({0, -1})}, doubles({9, 8}));
  CHECK(same(put.to_vector_double(), {9, 2, 8}));
  const Tensor copied = index_copy(x, 0, longs({1}), doubles({7}));
  CHECK(same(copied.to_vector_double(), {1, 7, 3}));
  CHECK(same(x.to_vector_double(), {1, 2, 3}));
}

TEST_CASE("advanced_index: x[i] matches index_select and x[mask] masked_select", "[scatter_reduce]") {
  const Tensor x = arange(0, 12, 1, TensorOptions(DType::Float64)).reshape({3, 4});
  const Tensor i = longs({2, 0, 2});
  CHECK(same(advanced_index(x, {i}).to_vector_double(), index_select(x, 0, i).to_vector_double()));
  const Tensor mask = gt(x, 6.5);
  CHECK(same(advanced_index(x, {mask}).to_vector_double(), masked_select(x, mask).to_vector_double()));
  // x[:, i] through an undefined first entry: the picked columns, [3, 3].
  const Tensor cols = advanced_index(x, {Tensor(), longs({3, 0, -1})});
  CHECK(cols.sizes() == Shape{3, 3});
  CHECK(same(cols.to_vector_double(), {3, 0, 3, 7, 4, 7, 11, 8, 11}));
}
