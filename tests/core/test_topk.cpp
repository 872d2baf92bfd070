// Hand tests for what the topk family reads off a sorted line beyond the op table's NaN-free rows:
// median, kthvalue and quantile with NaNs (which sort above every number), the nan-ignoring
// reductions (nanmedian, nanquantile, nansum, nanmean) on lines of NaNs, and medians and quantiles
// worked out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

TEST_CASE("median, kthvalue and quantile: NaN sorts last, and a line holding one has a NaN median and quantile",
          "[topk]") {
  const double nan = std::nan("");
  // Row 0 holds NaNs at 1 and 3; row 1 none.
  const Tensor x = tensor({4.0, nan, 1.0, nan, 3.0, 2.0, 5.0, 3.0, 1.0, 4.0}, {2, 5});
  const auto [m, mi] = median(x, 1);
  CHECK(std::isnan(m.to_vector_double()[0]));
  CHECK(m.to_vector_double()[1] == 3.0);
  CHECK(mi.to_vector_double() == std::vector<double>{1, 2});  // the first NaN; the 3 at 2
  CHECK(std::isnan(median(x).item<double>()));
  CHECK(median(x.narrow(0, 1, 1)).item<double>() == 3.0);
  // Even length: the lower median.
  CHECK(median(tensor(std::vector<double>{4, 1, 3, 2})).item<double>() == 2.0);
  // kthvalue counts NaN above every number.
  const auto [k3, k3i] = kthvalue(x, 3, 1);
  CHECK(k3.to_vector_double() == std::vector<double>{4.0, 3.0});
  CHECK(k3i.to_vector_double() == std::vector<double>{0, 2});
  CHECK(std::isnan(kthvalue(x, 4, 1).first.to_vector_double()[0]));
  const std::vector<double> q = quantile(x, 0.5, 1).to_vector_double();
  CHECK(std::isnan(q[0]));
  CHECK(q[1] == 3.0);
  // [1, 2, 3, 4] at q = 0.4: position 1.2, so 2.2 linear, 2 lower, 3 higher, 2.5 midpoint, 2
  // nearest.
  const Tensor v = tensor(std::vector<double>{4, 1, 3, 2});
  CHECK(quantile(v, 0.4).item<double>() == Approx(2.2).epsilon(1e-15));
  CHECK(quantile(v, 0.4, std::nullopt, false, QuantileInterpolation::Lower).item<double>() == 2.0);
  CHECK(quantile(v, 0.4, std::nullopt, false, QuantileInterpolation::Higher).item<double>() == 3.0);
  CHECK(quantile(v, 0.4, std::nullopt, false, QuantileInterpolation::Midpoint).item<double>() == 2.5);
  CHECK(quantile(v, 0.4, std::nullopt, false, QuantileInterpolation::Nearest).item<double>() == 2.0);
  CHECK(quantile(v, std::vector<double>{0.0, 1.0}).to_vector_double() == std::vector<double>{1.0, 4.0});
}

TEST_CASE("std, var_mean and prod by hand", "[topk]") {
  const Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 0.0, 5.0}, {2, 3});
  CHECK(kiln::std(x, {1}).to_vector_double() == std::vector<double>{1.0, std::sqrt(7.0)});  // vars 1 and 7
  const auto [v, m] = var_mean(x, {1}, 0.0);
  CHECK(v.to_vector_double()[0] == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(m.to_vector_double() == std::vector<double>{2.0, 3.0});
  CHECK(prod(x, 1).to_vector_double() == std::vector<double>{6.0, 0.0});
  CHECK(prod(x).item<double>() == 0.0);
  CHECK(prod(tensor(std::vector<int64_t>{2, 3, 7})).item<int64_t>() == 42);
  // The product rule through the zero: d(4 * 0 * 5)/d0 = 20, the others 0.
  Tensor p = tensor(std::vector<double>{4.0, 0.0, 5.0}).set_requires_grad(true);
  prod(p).backward();
  CHECK(p.grad().to_vector_double() == std::vector<double>{0.0, 20.0, 0.0});
}

TEST_CASE("nanmedian, nanquantile, nansum and nanmean leave NaNs out, and a line of NaNs gives NaN or 0", "[topk]") {
  const double nan = std::nan("");
  // Row 0: 4, 1, 3 and two NaNs; row 1: only NaNs; row 2: 2, 5, 3, 1, 4.
  const Tensor x = tensor({4.0, nan, 1.0, nan, 3.0, nan, nan, nan, nan, nan, 2.0, 5.0, 3.0, 1.0, 4.0}, {3, 5});
  const auto [m, mi] = nanmedian(x, 1);
  const std::vector<double> mv = m.to_vector_double();
  CHECK(mv[0] == 3.0);
  CHECK(std::isnan(mv[1]));
  CHECK(mv[2] == 3.0);
  CHECK(mi.to_vector_double() == std::vector<double>{4, 0, 2});  // a line of NaNs: its first
  CHECK(nanmedian(x).item<double>() == 3.0);                     // 1, 1, 2, 3, 3, 4, 4, 5: the lower median
  // Row 0 sorted: 1, 3, 4: q = 0.5 reads 3, q = 0.25 blends 1 and 3.
  const std::vector<double> q = nanquantile(x, 0.25, 1).to_vector_double();
  CHECK(q[0] == 2.0);
  CHECK(std::isnan(q[1]));
  CHECK(q[2] == 2.0);
  CHECK(std::isnan(quantile(x, 0.25, 1).to_vector_double()[0]));  // quantile keeps the NaN
  const std::vector<double> s = nansum(x, {1}).to_vector_double(), mean = nanmean(x, {1}).to_vector_double();
  CHECK(s == std::vector<double>{8.0, 0.0, 15.0});
  CHECK(mean[0] == 8.0 / 3.0);
  CHECK(std::isnan(mean[1]));
  CHECK(mean[2] == 3.0);
  // The gradient skips the NaNs: 1 / count at the others.
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  nanmean(leaf.narrow(0, 0, 1)).backward();
  const std::vector<double> g = leaf.grad().to_vector_double();
  CHECK(g[0] == 1.0 / 3.0);
  CHECK(g[1] == 0.0);
  CHECK(g[4] == 1.0 / 3.0);
  CHECK(count_nonzero(tensor({0.0, nan, 2.0, 0.0})).item<int64_t>() == 2);  // NaN is not zero
  const auto [lo, hi] = aminmax(tensor({3.0, -1.0, 7.0}));
  CHECK(lo.item<double>() == -1.0);
  CHECK(hi.item<double>() == 7.0);
}
