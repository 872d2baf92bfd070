// The tests' tolerance measure: how far a result is from its reference, in units of the allowed
// error atol + rtol |reference|, over all elements. At most 1 passes. And the NaN-aware fold that
// every hand-written error measure uses.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/tensor.h"

namespace kiln::test {

// The larger of a running worst error and a new one, a NaN counting as infinitely large: the fold
// for error measures, where std::max(worst, NaN) would keep `worst` and pass a NaN result.
inline double worse(double worst, double d) { return std::isnan(d) ? INFINITY : std::max(worst, d); }

// max |a - b| / (atol + rtol |b|) over the elements, both read back to the CPU (any device). Where
// either is not finite, the two must be the same: NaN against NaN, or the same infinity; any other
// pair is infinitely far (std::max alone would skip a NaN ratio).
inline double worst_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  REQUIRE(a.sizes() == b.sizes());
  const std::vector<double> va = a.to_vector_double(), vb = b.to_vector_double();
  double worst = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i]) || !std::isfinite(vb[i])) {
      if (std::isnan(va[i]) ? !std::isnan(vb[i]) : va[i] != vb[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(va[i] - vb[i]) / (atol + rtol * std::abs(vb[i])));
  }
  return worst;
}

}  // namespace kiln::test
