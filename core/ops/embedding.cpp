// embedding: rows of the weight picked by integer indices; the weight gradient sums the output
// gradient's rows by index value (rows picked several times receive the sum), deterministically
// (kernels/embedding_plan.h). A padding row's gradient is zeroed after the sums.
#include "core/ops/embedding.h"

#include <string>

#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/embedding.h"
#include "kernels/index.h"

namespace kiln {

int64_t normalize_padding_idx(const char* op, int64_t padding_idx, int64_t num_embeddings, const std::string& table) {
  const int64_t n = num_embeddings;
  if (padding_idx < -n || padding_idx >= n) {
    throw IndexError(std::string(op) + ": padding_idx " + std::to_string(padding_idx) + " is out of range for " +
                     std::to_string(n) + " embeddings (" + table + "), expected [" + std::to_string(-n) + ", " +
                     std::to_string(n) + ")");
  }
  return padding_idx < 0 ? padding_idx + n : padding_idx;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  const char* op = "embedding";
  ops::check_defined(op, weight, "weight");
  ops::check_defined(op, indices, "indices");
  if (weight.dim() != 2) {
    throw ShapeError("embedding: weight must be 2-d [num_embeddings, embedding_dim], got shape " +
                     shape_str(weight.sizes()));
  }
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32) {
    throw DTypeError(std::string("embedding: indices must be int64 or int32, got ") + dtype_name(indices.dtype()) +
                     " (shape " + shape_str(indices.sizes()) + ")");
  }
  ops::common_device(op, {&weight, &indices});
  const int64_t dim = weight.size(1), k = indices.numel();
  if (padding_idx) {
    padding_idx = normalize_padding_idx(op, *padding_idx, weight.size(0), "weight " + shape_str(weight.sizes()));
  }
  Tensor flat = ops::dense(indices.to(DType::Int64)).reshape({k});
  Shape out_shape = indices.sizes();
  out_shape.push_back(dim);
  Tensor out = ops::empty_for(op, out_shape, TensorOptions(weight.dtype(), weight.device()));
  // The CPU kernel checks every index before it writes; on CUDA they are checked on the device: a
  // bad one gives a zero row and an IndexError naming embedding at the next sync (the host cannot
  // read them without waiting for the GPU).
  if (out.numel() > 0) {
    ops::launch(op, weight.device(), kernels::embedding_forward, out.data_ptr(), ops::make_arg(op, weight.detach()),
                flat.data_ptr<int64_t>(), k);
  } else if (k > 0) {  // embedding_dim 0: no kernel reads the indices, so they are checked here
    ops::check_index_values(op, flat, weight.size(0),
                            std::to_string(weight.size(0)) + " embeddings (weight " + shape_str(weight.sizes()) + ")");
  }
  if (needs_grad({&weight})) {
    Shape ws = weight.sizes();
    const DType dt = weight.dtype();
    record_function(op, {weight}, {out}, {flat}, [ws, dt, k, dim, padding_idx](const FunctionNode::Context& ctx) {
      Tensor idx = ctx.saved_at(0);
      Tensor g = ops::dense_grad(ctx.grads[0].detach(), dt).reshape({k, dim});
      Tensor dw = zeros(ws, TensorOptions(dt, g.device()));
      if (g.numel() == 0) return TensorList{dw};
      // CUDA's sorted sums take the storage types of CUDA kernels; float64 (CPU-first) and sizes
      // beyond 32-bit sort keys take scatter_add.
      const bool cuda_double = g.device().is_cuda() && dt == DType::Float64;
      if (k < kEmbeddingBackwardMaxRows && ws[0] < kEmbeddingBackwardMaxRows && !cuda_double) {
        ops::launch("embedding", g.device(), kernels::embedding_backward, dw.data_ptr(), g.data_ptr(), dt,
                    idx.data_ptr<int64_t>(), k, ws[0], dim);
      } else {
        // One thread per column walks every position (also deterministic).
        ops::launch("embedding", g.device(), kernels::scatter_add, ops::make_arg("embedding", dw), 0,
                    ops::make_arg("embedding", idx.reshape({k, 1}).expand({k, dim})), ops::make_arg("embedding", g));
      }
      if (padding_idx) dw.select(0, *padding_idx).zero_();
      return TensorList{dw};
    });
  }
  return out;
}

}  // namespace kiln
