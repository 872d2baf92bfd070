// Test helpers for the float16 paths that depend on the CPU's F16C conversions
// (kernels/cpu/convert.h): the same bits with the hardware conversions on and off.
#pragma once

#include <catch2/catch.hpp>

#include "kernels/cpu/convert.h"

namespace kiln::test {

// Restores cpu::hardware_half() as a test found it, even when a check throws.
struct HardwareHalfGuard {
  bool saved = cpu::hardware_half();
  ~HardwareHalfGuard() { cpu::set_hardware_half(saved); }
};

// Turns the hardware conversions on and says whether they are: on a CPU without F16C, false with a
// warning, and a check that the setting stayed off.
inline bool use_hardware_half(const char* what) {
  cpu::set_hardware_half(true);
  if (cpu::hardware_half()) return true;
  WARN("this CPU has no F16C: " << what << " runs the portable float16 path only");
  CHECK_FALSE(cpu::hardware_half());
  return false;
}

}  // namespace kiln::test
