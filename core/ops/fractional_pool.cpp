// Fractional max pooling: the windows' starts made on x's device from the samples (no host loop,
// nothing copied from the host), then ops::max_over_windows, which pool.h's adaptive pools with
// indices share.
#include "core/ops/fractional_pool.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/image.h"
#include "core/ops/math.h"
#include "core/ops/pool.h"
#include "core/ops/random.h"
#include "core/ops/reduce.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {

namespace {

// The starts of the windows along a dim of size n: [planes, out] int64 from u, [planes, 1] in the
// dtype the starts are computed in. trunc is floor here: every product is >= 0.
Tensor window_starts(const Tensor& u, int64_t n, int64_t out, int64_t k) {
  const TensorOptions index_options(DType::Int64, u.device());
  if (out == 1) return full({1, 1}, n - k, index_options);
  const double alpha = u.dtype() == DType::Float64
                           ? static_cast<double>(n - k) / static_cast<double>(out - 1)
                           : static_cast<double>(static_cast<float>(n - k) / static_cast<float>(out - 1));
  // alpha is exact in u's dtype, so each product below rounds once, as a multiplication in it does.
  const Tensor cell = arange(0, out, 1, TensorOptions(u.dtype(), u.device())).unsqueeze(0);
  const Tensor start = (floor((cell + u) * alpha) - floor(u * alpha)).to(DType::Int64);
  const Tensor last = eq(arange(0, out, 1, index_options).unsqueeze(0), out - 1);
  return clamp(where(last, Scalar(n - k), start), Scalar(int64_t{0}), Scalar(n - k));
}

// order[d]: the column of the samples that dim d reads (PyTorch's order: (w, h) for 2-d).
std::pair<Tensor, Tensor> fractional_max_pool(const char* op, const Tensor& x, const Shape& kernel, const Shape& out,
                                              const std::vector<int64_t>& order, const Tensor& random_samples,
                                              const std::optional<Generator>& generator) {
  const int64_t spatial = static_cast<int64_t>(kernel.size());
  ops::check_pool_input(op, x, spatial);
  Shape in(x.sizes().end() - spatial, x.sizes().end());
  const std::string what = " (input " + shape_str(x.sizes()) + ", kernel " + ops::dims_str(kernel) + ", output size " +
                           ops::dims_str(out) + ")";
  for (int64_t d = 0; d < spatial; ++d) {
    const size_t i = static_cast<size_t>(d);
    if (kernel[i] <= 0 || out[i] <= 0) {
      throw Error(std::string(op) + ": kernel size and output size must be positive" + what);
    }
    if (out[i] > in[i] - kernel[i] + 1) {
      throw ShapeError(std::string(op) + ": output size " + std::to_string(out[i]) + " plus kernel " +
                       std::to_string(kernel[i]) + " minus 1 exceeds the input's " + std::to_string(in[i]) +
                       " in spatial dim " + std::to_string(d) + what);
    }
  }
  const int64_t batch = x.dim() == spatial + 2 ? x.size(0) : 1, channels = x.size(-spatial - 1);
  const DType compute = x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor samples;
  if (random_samples.defined()) {
    ops::check_floating(op, random_samples, "random_samples");
    ops::common_device(op, {&x, &random_samples});
    // PyTorch's rule: at least the batch's rows (the first ones are read), C, one per spatial dim.
    const Shape& s = random_samples.sizes();
    if (s.size() != 3 || s[0] < batch || s[1] != channels || s[2] != spatial) {
      throw ShapeError(std::string(op) + ": random_samples must be [N, " + std::to_string(channels) + ", " +
                       std::to_string(spatial) + "] with N >= " + std::to_string(batch) +
                       " (one sample per spatial dim of each plane), got " + shape_str(s) + what);
    }
    const Tensor used = random_samples.narrow(0, 0, batch);
    if (used.device().is_cpu() && used.numel() > 0) {
      const double lo = amin(used, {}).item<double>(), hi = amax(used, {}).item<double>();
      if (!(lo >= 0.0 && hi <= 1.0)) {
        throw Error(std::string(op) + ": random_samples must lie in [0, 1], got " +
                    num_str(std::isnan(lo) || lo < 0.0 ? lo : hi) + what);
      }
    }
    samples = used.detach().to(compute);
  } else {
    samples = rand({batch, channels, spatial}, TensorOptions(compute, x.device()), generator);
  }
  std::vector<Tensor> positions;
  {
    NoGradGuard no_grad;
    const Tensor u = samples.reshape({batch * channels, spatial});
    const TensorOptions index_options(DType::Int64, x.device());
    for (int64_t d = 0; d < spatial; ++d) {
      const size_t i = static_cast<size_t>(d);
      const Tensor start = window_starts(u.select(1, order[i]).unsqueeze(1), in[i], out[i], kernel[i]);
      positions.push_back(start.unsqueeze(2) + arange(0, kernel[i], 1, index_options));
    }
  }
  return ops::max_over_windows(x, positions);
}

template <size_t N>
std::array<int64_t, N> output_of_ratio(const char* op, const Tensor& x, const std::array<double, N>& ratio) {
  ops::check_pool_input(op, x, static_cast<int64_t>(N));
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N; ++i) {
    const int64_t n = x.size(x.dim() - static_cast<int64_t>(N) + static_cast<int64_t>(i));
    if (!(ratio[i] > 0.0 && ratio[i] < 1.0)) {
      throw Error(std::string(op) + ": output_ratio must be in (0, 1), got " + num_str(ratio[i]) + " (input " +
                  shape_str(x.sizes()) + ")");
    }
    out[i] = static_cast<int64_t>(static_cast<double>(n) * ratio[i]);
    if (out[i] == 0) {
      throw ShapeError(std::string(op) + ": output_ratio " + num_str(ratio[i]) + " of the input's " +
                       std::to_string(n) + " gives an output size of 0 (input " + shape_str(x.sizes()) + ")");
    }
  }
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> fractional_max_pool2d_with_indices(const Tensor& x, Pair kernel_size, Pair output_size,
                                                             const Tensor& random_samples,
                                                             const std::optional<Generator>& generator) {
  return fractional_max_pool("fractional_max_pool2d", x, {kernel_size[0], kernel_size[1]},
                             {output_size[0], output_size[1]}, {1, 0}, random_samples, generator);
}

Tensor fractional_max_pool2d(const Tensor& x, Pair kernel_size, Pair output_size, const Tensor& random_samples,
                             const std::optional<Generator>& generator) {
  return fractional_max_pool2d_with_indices(x, kernel_size, output_size, random_samples, generator).first;
}

std::pair<Tensor, Tensor> fractional_max_pool3d_with_indices(const Tensor& x, Triple kernel_size, Triple output_size,
                                                             const Tensor& random_samples,
                                                             const std::optional<Generator>& generator) {
  return fractional_max_pool("fractional_max_pool3d", x, {kernel_size[0], kernel_size[1], kernel_size[2]},
                             {output_size[0], output_size[1], output_size[2]}, {0, 1, 2}, random_samples, generator);
}

Tensor fractional_max_pool3d(const Tensor& x, Triple kernel_size, Triple output_size, const Tensor& random_samples,
                             const std::optional<Generator>& generator) {
  return fractional_max_pool3d_with_indices(x, kernel_size, output_size, random_samples, generator).first;
}

Pair fractional_output_size2d(const Tensor& x, std::array<double, 2> output_ratio) {
  return output_of_ratio("fractional_max_pool2d", x, output_ratio);
}

Triple fractional_output_size3d(const Tensor& x, std::array<double, 3> output_ratio) {
  return output_of_ratio("fractional_max_pool3d", x, output_ratio);
}

}  // namespace kiln
