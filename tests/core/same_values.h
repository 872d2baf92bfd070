// Comparing value lists read back from tensors (to_vector_double) where NaNs are expected: the
// hand tests of the ops that produce or skip them.
#pragma once

#include <cmath>
#include <vector>

namespace kiln::test {

// Equal element by element, a NaN equal to a NaN; with signed_zeros, -0 and +0 differ too.
inline bool same_values(const std::vector<double>& a, const std::vector<double>& b, bool signed_zeros = false) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (a[i] != b[i] || (signed_zeros && std::signbit(a[i]) != std::signbit(b[i]))) return false;
  }
  return true;
}

}  // namespace kiln::test
