// A model's parameters as one flat vector and back (torch.nn.utils.parameters_to_vector and
// vector_to_parameters): what methods that treat the parameters as a single point need (L-BFGS,
// evolution strategies, weight averaging, flat-gradient diagnostics).
#pragma once

#include "core/tensor.h"

namespace kiln::nn {

// Every parameter flattened (row-major) and concatenated in order: a new 1-d tensor, differentiable
// as cat of views is. The parameters must share one dtype and device (a kiln::Error naming the
// first that differs); an empty list gives an empty float32 CPU tensor.
Tensor parameters_to_vector(const TensorList& params);

// Copies consecutive slices of the 1-d vec into the parameters, in order and in place, without
// recording autograd (each parameter keeps its identity, dtype and layout; vec is cast to the
// parameter's dtype). vec must hold exactly as many elements as the parameters together.
void vector_to_parameters(const Tensor& vec, const TensorList& params);

}  // namespace kiln::nn
