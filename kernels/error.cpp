// Message helpers of kernels/error.h.
#include "kernels/error.h"

#include <charconv>
#include <cmath>

namespace kiln {

namespace {

template <typename T>
std::string shortest(T v) {
  if (std::isnan(v)) return "nan";  // whatever its sign and payload
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return std::string(buf, r.ptr);
}

}  // namespace

std::string num_str(double v) { return shortest(v); }
std::string num_str(float v) { return shortest(v); }

}  // namespace kiln
