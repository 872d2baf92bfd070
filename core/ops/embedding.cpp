// embedding: rows of the weight picked by integer indices; the weight gradient sums the output
// gradient's rows by index value (rows picked several times receive the sum), deterministically
// (kernels/embedding_plan.h). A padding row's gradient is zeroed after the sums.
#include "core/ops/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/copy.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
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

Tensor embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets, BagMode mode,
                     const Tensor& per_sample_weights, bool include_last_offset, std::optional<int64_t> padding_idx) {
  const char* op = "embedding_bag";
  ops::check_defined(op, weight, "weight");
  ops::check_defined(op, indices, "indices");
  if (weight.dim() != 2) {
    throw ShapeError(std::string(op) + ": weight must be 2-d [num_embeddings, embedding_dim], got shape " +
                     shape_str(weight.sizes()));
  }
  if (indices.dtype() != DType::Int64 && indices.dtype() != DType::Int32) {
    throw DTypeError(std::string(op) + ": indices must be int64 or int32, got " + dtype_name(indices.dtype()) +
                     " (shape " + shape_str(indices.sizes()) + ")");
  }
  if (padding_idx) {
    padding_idx = normalize_padding_idx(op, *padding_idx, weight.size(0), "weight " + shape_str(weight.sizes()));
  }
  // Each bag as [start, end) of the flattened indices.
  const int64_t m = indices.numel();
  std::vector<int64_t> starts;
  if (indices.dim() == 2) {
    if (offsets.defined()) {
      throw Error(std::string(op) + ": 2-d indices " + shape_str(indices.sizes()) +
                  " are bags of their own; offsets must be undefined, got " + shape_str(offsets.sizes()));
    }
    for (int64_t b = 0; b <= indices.size(0); ++b) starts.push_back(b * indices.size(1));
  } else if (indices.dim() == 1) {
    if (!offsets.defined() || offsets.dim() != 1 || is_floating(offsets.dtype()) || offsets.dtype() == DType::Bool) {
      throw Error(std::string(op) + ": 1-d indices " + shape_str(indices.sizes()) +
                  " need 1-d integer offsets, one start per bag, got " +
                  (offsets.defined() ? std::string(dtype_name(offsets.dtype())) + " " + shape_str(offsets.sizes())
                                     : std::string("none")));
    }
    starts = offsets.to_vector<int64_t>();
    if (!include_last_offset) starts.push_back(m);
    if (starts.empty()) throw Error(std::string(op) + ": include_last_offset needs at least one offset");
    bool ordered = starts.front() == 0 && starts.back() <= m;
    for (size_t i = 1; i < starts.size(); ++i) ordered = ordered && starts[i - 1] <= starts[i];
    if (!ordered) {
      throw IndexError(std::string(op) + ": offsets must start at 0, never decrease and stay within the " +
                       std::to_string(m) + " indices, got " + shape_str(Shape(starts.begin(), starts.end())) +
                       (include_last_offset ? "" : " (with the end appended)"));
    }
  } else {
    throw ShapeError(std::string(op) + ": indices must be 1-d (with offsets) or 2-d [bags, length], got " +
                     shape_str(indices.sizes()));
  }
  if (per_sample_weights.defined()) {
    if (mode != BagMode::Sum) throw Error(std::string(op) + ": per_sample_weights are for mode Sum only");
    if (per_sample_weights.sizes() != indices.sizes() || per_sample_weights.dtype() != weight.dtype()) {
      throw ShapeError(std::string(op) + ": per_sample_weights " + dtype_name(per_sample_weights.dtype()) + " " +
                       shape_str(per_sample_weights.sizes()) + " must have indices' shape " +
                       shape_str(indices.sizes()) + " and weight's dtype " + dtype_name(weight.dtype()));
    }
  }
  ops::common_device(op, {&weight, &indices});
  const Device device = weight.device();
  const int64_t bags = static_cast<int64_t>(starts.size()) - 1, dim = weight.size(1);
  const Tensor flat = indices.reshape({m}).to(DType::Int64);
  const Tensor rows = embedding(weight, flat, padding_idx);  // [m, dim]; checks the index values
  // Which bag each position belongs to, and whether it counts (inside a bag, not padding).
  std::vector<int64_t> bag_of(static_cast<size_t>(m), 0);
  std::vector<bool> inside(static_cast<size_t>(m), false);
  int64_t longest = 0;
  for (int64_t b = 0; b < bags; ++b) {
    longest = std::max(longest, starts[static_cast<size_t>(b + 1)] - starts[static_cast<size_t>(b)]);
    for (int64_t i = starts[static_cast<size_t>(b)]; i < starts[static_cast<size_t>(b + 1)]; ++i) {
      bag_of[static_cast<size_t>(i)] = b;
      inside[static_cast<size_t>(i)] = true;
    }
  }
  Tensor counts = tensor(inside, {m}, TensorOptions(DType::Bool, device));
  if (padding_idx) counts = logical_and(counts, ne(flat, *padding_idx));
  const TensorOptions real(weight.dtype(), device);
  const Tensor bag_index = tensor(bag_of, {m}, TensorOptions(DType::Int64, device));
  if (mode == BagMode::Max) {
    // Each bag's positions in a row of `width`, short rows (and padding) pointing at a row of -inf
    // appended to the picked rows; an empty bag's -inf maximum becomes 0.
    if (bags == 0 || dim == 0) return zeros({bags, dim}, real);
    const int64_t width = std::max<int64_t>(longest, 1);
    std::vector<int64_t> slots(static_cast<size_t>(bags * width), m);
    for (int64_t b = 0; b < bags; ++b) {
      for (int64_t i = starts[static_cast<size_t>(b)]; i < starts[static_cast<size_t>(b + 1)]; ++i) {
        slots[static_cast<size_t>(b * width + i - starts[static_cast<size_t>(b)])] = i;
      }
    }
    const Tensor slot_index = tensor(slots, {bags * width}, TensorOptions(DType::Int64, device));
    const Tensor masked = where(counts.unsqueeze(1), rows, -INFINITY);
    const Tensor picked = index_select(cat({masked, full({1, dim}, -INFINITY, real)}, 0), 0, slot_index);
    const Tensor best = amax(picked.reshape({bags, width, dim}), {1});
    const Tensor filled = index_add(zeros({bags}, real), 0, bag_index, counts.to(weight.dtype()));
    return where(gt(filled, 0.0).unsqueeze(1), best, 0.0);
  }
  // Sums in float32 for float16 and bfloat16: a bag's terms rounded once, at the end.
  const DType work = ops::widened_dtype(weight.dtype());
  Tensor scale = counts.to(work);
  if (per_sample_weights.defined()) scale = mul(scale, to_dtype(per_sample_weights.reshape({m}), work));
  const TensorOptions wide(work, device);
  Tensor out = index_add(zeros({bags, dim}, wide), 0, bag_index, mul(to_dtype(rows, work), scale.unsqueeze(1)));
  if (mode == BagMode::Mean) {
    const Tensor n = index_add(zeros({bags}, wide), 0, bag_index, counts.to(work));
    out = div(out, clamp(n, 1.0, std::nullopt).unsqueeze(1));
  }
  out = to_dtype(out, weight.dtype());
  return out;
}

}  // namespace kiln
