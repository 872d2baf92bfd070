// What the losses share.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln {

// How per-element losses are combined.
enum class Reduction : uint8_t { None, Mean, Sum };

}  // namespace kiln
