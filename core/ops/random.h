// Random ops. Each takes an optional Generator (core/random.h); without one it draws from the default
// generator of the tensors' device. A generator of another device is a DeviceError.
#pragma once

#include <optional>

#include "core/ops/factory.h"
#include "core/random.h"
#include "core/tensor.h"

namespace kiln {

Tensor rand(const Shape& shape, TensorOptions options = {},
            const std::optional<Generator>& generator = std::nullopt);  // uniform [0, 1), never 1
Tensor randn(const Shape& shape, TensorOptions options = {},
             const std::optional<Generator>& generator = std::nullopt);  // standard normal
// Integers in [low, high); int64 unless given.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = DType::Int64,
               const std::optional<Generator>& generator = std::nullopt);
// Draws num_samples category indices per row of a 1-d or 2-d tensor of non-negative weights.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   const std::optional<Generator>& generator = std::nullopt);

}  // namespace kiln
