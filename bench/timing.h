// What the benchmarks share: the median of a sample of times.
#pragma once

#include <algorithm>
#include <vector>

namespace kiln::bench {

// The middle value (the mean of the two middle ones for an even count); 0 for no values.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kiln::bench
