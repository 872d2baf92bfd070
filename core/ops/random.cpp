// Random ops: rand, randn, randint, uniform_, normal_ and multinomial, each drawing one offset from a
// generator (the device's default one unless the caller passes its own). A fill draws element i of
// the output's logical order from subsequence i, so its dims are never collapsed or reordered.
#include "core/ops/random.h"

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/random.h"

namespace kiln {
namespace {

// Fills t with draws of `dist`; the KernelScope opens before the draw so that a device the build
// cannot run is refused without taking an offset.
void random_fill(const char* op, const Tensor& t, RandomDist dist, const RandomParams& p,
                 const std::optional<Generator>& generator) {
  if (t.numel() == 0) return;
  ops::KernelScope scope(op, t.device());
  const PhiloxState st = generator_for(op, t.device(), generator).next();
  scope.run(kernels::random, ops::make_arg(op, t), dist, p, st);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, const std::optional<Generator>& generator) {
  ops::check_shape("rand", shape);
  if (!is_floating(options.dtype))
    throw DTypeError(std::string("rand: needs a floating dtype, got ") + dtype_name(options.dtype));
  Tensor t = ops::empty_for("rand", shape, options.with_requires_grad(false));
  random_fill("rand", t, RandomDist::Uniform, RandomParams{0.0, 1.0}, generator);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor randn(const Shape& shape, TensorOptions options, const std::optional<Generator>& generator) {
  ops::check_shape("randn", shape);
  if (!is_floating(options.dtype))
    throw DTypeError(std::string("randn: needs a floating dtype, got ") + dtype_name(options.dtype));
  Tensor t = ops::empty_for("randn", shape, options.with_requires_grad(false));
  random_fill("randn", t, RandomDist::Normal, RandomParams{0.0, 1.0}, generator);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options,
               const std::optional<Generator>& generator) {
  ops::check_shape("randint", shape);
  if (high <= low) {
    throw Error("randint: low must be below high, got low=" + std::to_string(low) + " high=" + std::to_string(high));
  }
  // [low, high) must fit the dtype: a draw cast into a narrower type would wrap around.
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  switch (options.dtype) {
    case DType::Bool: lo = 0, hi = 2; break;
    case DType::UInt8: lo = 0, hi = 256; break;
    case DType::Int32:
      lo = std::numeric_limits<int32_t>::min(), hi = int64_t{std::numeric_limits<int32_t>::max()} + 1;
      break;
    default: break;
  }
  if (low < lo || high > hi) {
    throw Error("randint: [" + std::to_string(low) + ", " + std::to_string(high) + ") does not fit dtype " +
                dtype_name(options.dtype) + " (values in [" + std::to_string(lo) + ", " + std::to_string(hi) + "))");
  }
  Tensor t = ops::empty_for("randint", shape, options.with_requires_grad(false));
  RandomParams p;
  p.low = low;
  p.range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // exact: high > low
  random_fill("randint", t, RandomDist::RandInt, p, generator);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor& Tensor::uniform_(double low, double high, const std::optional<Generator>& generator) {
  ops::check_inplace("uniform_", *this, {});
  ops::check_no_overlap("uniform_", *this, {});  // an expand's aliases would race, each draw a different value
  if (!is_floating_point())
    throw DTypeError(std::string("uniform_: needs a floating tensor, got ") + dtype_name(dtype()));
  if (!(low <= high)) {
    throw Error("uniform_: low must not exceed high, got low=" + num_str(low) + " high=" + num_str(high));
  }
  if (!std::isfinite(low) || !std::isfinite(high)) {
    throw Error("uniform_: low and high must be finite, got low=" + num_str(low) + " high=" + num_str(high));
  }
  // The draws are low + (high - low) * u, in float64 for a float64 tensor and float32 otherwise: the
  // bounds must be values of the dtype and their distance one of the compute type, or every draw
  // would come out as high (or inf).
  const double top = ops::largest_finite(dtype());
  const bool wide = dtype() == DType::Float64;
  if (std::fabs(low) > top || std::fabs(high) > top ||
      !(wide ? std::isfinite(high - low) : std::isfinite(static_cast<float>(high - low)))) {
    throw Error("uniform_: [" + num_str(low) + ", " + num_str(high) + ") does not fit " + dtype_name(dtype()) +
                ": the bounds must lie within +-" + num_str(top) + " and high - low below " +
                num_str(wide ? top : std::numeric_limits<float>::max()));
  }
  random_fill("uniform_", *this, RandomDist::Uniform, RandomParams{low, high}, generator);
  bump_version();
  ops::record_overwrite("uniform_", *this);
  return *this;
}

Tensor& Tensor::normal_(double mean, double std, const std::optional<Generator>& generator) {
  ops::check_inplace("normal_", *this, {});
  ops::check_no_overlap("normal_", *this, {});
  if (!is_floating_point())
    throw DTypeError(std::string("normal_: needs a floating tensor, got ") + dtype_name(dtype()));
  if (!(std >= 0) || !std::isfinite(std)) {
    throw Error("normal_: std must be finite and non-negative, got " + num_str(std));
  }
  if (!std::isfinite(mean)) throw Error("normal_: mean must be finite, got " + num_str(mean));
  random_fill("normal_", *this, RandomDist::Normal, RandomParams{mean, std}, generator);
  bump_version();
  ops::record_overwrite("normal_", *this);
  return *this;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement,
                   const std::optional<Generator>& generator) {
  ops::check_defined("multinomial", probs, "probabilities");
  ops::check_floating("multinomial", probs, "probabilities");
  if (probs.dim() < 1 || probs.dim() > 2) {
    throw ShapeError("multinomial: expects a 1-d or 2-d tensor of weights, got shape " + shape_str(probs.sizes()));
  }
  Tensor p2 = probs.dim() == 1 ? probs.unsqueeze(0) : probs;
  int64_t n = p2.size(1);
  if (n == 0) throw ShapeError("multinomial: the rows have no categories (shape " + shape_str(probs.sizes()) + ")");
  if (num_samples <= 0) throw Error("multinomial: num_samples must be positive, got " + std::to_string(num_samples));
  if (!replacement && num_samples > n) {
    throw Error("multinomial: cannot draw " + std::to_string(num_samples) + " samples without replacement from " +
                std::to_string(n) + " categories");
  }
  Tensor out = ops::empty_for("multinomial", {p2.size(0), num_samples}, TensorOptions(DType::Int64, probs.device()));
  ops::KernelScope scope("multinomial", probs.device());
  const PhiloxState st = generator_for("multinomial", probs.device(), generator).next();
  // On CUDA an invalid row is found on the device: it is recorded in the device's error record and
  // raised as an error at the next synchronizing call (item(), a copy to the host), not here.
  if (out.numel() > 0) {
    scope.run(kernels::multinomial, out.data_ptr<int64_t>(), ops::make_arg("multinomial", p2.detach()), num_samples,
              replacement, st);
  }
  return probs.dim() == 1 ? out.squeeze(0) : out;
}

}  // namespace kiln
