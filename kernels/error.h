// kiln's error hierarchy. It lives at the bottom layer so kernels can raise it too;
// every message names the op and the offending shapes, dtypes, devices or values.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class ShapeError : public Error {
 public:
  using Error::Error;
};
class DTypeError : public Error {
 public:
  using Error::Error;
};
class DeviceError : public Error {
 public:
  using Error::Error;
};
class IndexError : public Error {
 public:
  using Error::Error;
};
class IOError : public Error {
 public:
  using Error::Error;
};
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};
// A double for a message, in the fewest digits that read back as the same double (0.1, 1e-40,
// 1.0000001; inf, -inf, nan), so a refused value is quoted as it was passed. A float in the
// fewest digits that read back as the same float (0.3f is "0.3").
std::string num_str(double v);
std::string num_str(float v);

// Raised by the autograd engine (second backward, modified saved tensor, anomaly).
class AutogradError : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln
