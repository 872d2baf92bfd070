// Parameter initializers with torch.nn.init's names and formulas. Each fills its tensor in place
// under NoGradGuard, drawing from the tensor's device generator (kiln::manual_seed), and returns
// the same tensor. Defaults are torch.nn.init's (kaiming_uniform_ has a = 0); nn.Linear and
// nn.Conv2d pass a = sqrt(5) themselves, as PyTorch's layers do.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace kiln::nn::init {

enum class FanMode : uint8_t { FanIn, FanOut };
enum class Nonlinearity : uint8_t { Linear, Conv, Sigmoid, Tanh, ReLU, LeakyReLU };

// torch.nn.init.calculate_gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu and
// sqrt(2 / (1 + param^2)) for leaky_relu (param is the negative slope).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// {fan_in, fan_out} of a weight [out, in, *kernel]: in * prod(kernel), out * prod(kernel).
// A kiln::Error for tensors with fewer than 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
Tensor constant_(const Tensor& t, double value);

// He init: std = gain / sqrt(fan), gain from the nonlinearity (a: negative slope of leaky_relu).
// Uniform draws from [-sqrt(3) * std, sqrt(3) * std].
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);

// Glorot init: std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0);
Tensor xavier_normal_(const Tensor& t, double gain = 1.0);

// Normal(mean, std) conditioned on [a, b] (absolute bounds, as PyTorch): inverse-CDF sampling,
// so every value lies in [a, b] and the tails are exact rather than clipped.
Tensor trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

// The identity: ones on the diagonal of a 2-d tensor, zeros elsewhere.
Tensor eye_(const Tensor& t);

// The identity of a convolution: a 3-, 4- or 5-d weight [out, in, *kernel] zeroed, then, per
// group of out / groups output channels, a 1 at the kernel's centre of input channel d for output
// channel d of the group (d < min(out / groups, in)), so the convolution passes channels through.
// out must split into `groups`.
Tensor dirac_(const Tensor& t, int64_t groups = 1);

// A (semi-)orthogonal matrix times gain, for t of at least 2 dims seen as [size(0), rest]: the Q of
// the QR decomposition of a standard normal draw (made unique, and uniformly distributed, by the
// signs of R's diagonal), rows orthonormal when there are fewer rows than columns and columns
// otherwise. The decomposition (Householder, float64) runs on the host; the draw uses the tensor's
// device generator.
Tensor orthogonal_(const Tensor& t, double gain = 1.0);

// A sparse 2-d matrix: Normal(0, std) with ceil(sparsity * rows) entries of each column, chosen at
// random, set to zero.
Tensor sparse_(const Tensor& t, double sparsity, double std = 0.01);

}  // namespace kiln::nn::init
