// Parsing and printing devices.
#include "core/device.h"

#include <cstdlib>

#include "kernels/error.h"

namespace kiln {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = cpu();
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    if (spec.size() == 4) {
      *this = cuda(0);
      return;
    }
    if (spec[4] == ':' && spec.size() > 5) {
      char* end = nullptr;
      long idx = std::strtol(spec.c_str() + 5, &end, 10);
      if (*end == '\0' && idx >= 0 && idx < 1024) {
        *this = cuda(static_cast<int>(idx));
        return;
      }
    }
  }
  throw DeviceError("device: cannot parse '" + spec + "' (expected 'cpu', 'cuda' or 'cuda:N')");
}

Device::Device(const char* spec) : Device(std::string(spec ? spec : "")) {}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace kiln
