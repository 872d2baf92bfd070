// parameters_to_vector and vector_to_parameters: cat of reshapes, and narrow-and-copy.
#include "nn/convert_parameters.h"

#include <string>

#include "core/ops/factory.h"
#include "core/ops/shape.h"
#include "kernels/error.h"

namespace kiln::nn {

Tensor parameters_to_vector(const TensorList& params) {
  if (params.empty()) return zeros({0});
  TensorList flat;
  flat.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined()) throw Error("parameters_to_vector: parameter " + std::to_string(i) + " is undefined");
    if (p.dtype() != params[0].dtype() || p.device() != params[0].device()) {
      throw Error("parameters_to_vector: parameter " + std::to_string(i) + " is " + dtype_name(p.dtype()) + " on " +
                  p.device().str() + ", parameter 0 " + dtype_name(params[0].dtype()) + " on " +
                  params[0].device().str() + " (one vector needs one dtype and device)");
    }
    flat.push_back(p.reshape({-1}));
  }
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const TensorList& params) {
  if (!vec.defined() || vec.dim() != 1) {
    throw ShapeError("vector_to_parameters: vec must be 1-d, got " +
                     (vec.defined() ? shape_str(vec.sizes()) : std::string("an undefined tensor")));
  }
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) throw Error("vector_to_parameters: parameter " + std::to_string(i) + " is undefined");
    total += params[i].numel();
  }
  if (vec.numel() != total) {
    throw ShapeError("vector_to_parameters: vec has " + std::to_string(vec.numel()) + " elements, the " +
                     std::to_string(params.size()) + " parameters " + std::to_string(total));
  }
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& p : params) {
    Tensor target = p.detach();
    target.copy_(vec.narrow(0, offset, p.numel()).reshape(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace kiln::nn
