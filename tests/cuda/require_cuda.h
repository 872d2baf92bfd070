// The first line of every test that needs a GPU: on a machine without one it fails, saying why
// (CI leaves out the tests labelled cuda; docs/gpu-testing.md).
#pragma once

#include <catch2/catch.hpp>

#include "core/cuda/runtime.h"

namespace kiln::test {

inline void require_cuda() {
  INFO("cuda::is_available() is false: " << cuda::unavailable_reason());
  REQUIRE(cuda::is_available());
}

}  // namespace kiln::test
