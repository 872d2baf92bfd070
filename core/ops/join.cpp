// The joining, splitting and tiling helpers of core/ops/join.h, composed of views, cat, repeat,
// flip and index_select; checks first, naming the op and the offending shapes or values.
#include "core/ops/join.h"

#include <algorithm>
#include <string>

#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/shape.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// x with dims of size 1 inserted at `at` (positions in the result) until it has `rank` dims.
Tensor with_dims(const Tensor& x, int64_t rank, const std::vector<int64_t>& at) {
  Tensor y = x;
  for (int64_t p : at) {
    if (y.dim() >= rank) break;
    y = y.unsqueeze(p);
  }
  return y;
}

// cat along dim of `tensors` after `shape_of` made each the right rank, errors naming op.
template <typename ShapeOf>
Tensor join(const char* op, const TensorList& tensors, ShapeOf shape_of, int64_t dim_for_1d, int64_t dim) {
  if (tensors.empty()) throw Error(std::string(op) + ": expects a non-empty list of tensors");
  std::vector<const Tensor*> all;
  for (const Tensor& t : tensors) {
    ops::check_defined(op, t, "tensor");
    all.push_back(&t);
  }
  ops::common_device(op, all);
  TensorList shaped;
  for (const Tensor& t : tensors) shaped.push_back(shape_of(t));
  const int64_t d = shaped[0].dim() == 1 ? dim_for_1d : dim;
  try {
    return cat(shaped, d);
  } catch (const ShapeError& e) {  // cat's message names cat and the shapes; say which op joined
    throw ShapeError(std::string(op) + ": " + e.what());
  }
}

int64_t slice_bound(int64_t i, int64_t size) { return i < 0 ? std::max<int64_t>(i + size, 0) : std::min(i, size); }

// The dim hsplit, vsplit or dsplit cuts (-1: hsplit's, 1 or for a 1-d x 0), after checking x has
// the dims it needs.
int64_t split_dim(const char* op, const Tensor& x, int64_t min_rank, int64_t dim) {
  ops::check_defined(op, x, "input");
  if (x.dim() < min_rank) {
    throw ShapeError(std::string(op) + ": the input must have " + std::to_string(min_rank) +
                     (min_rank == 1 ? " dim" : " dims") + " at least, got " + shape_str(x.sizes()));
  }
  return dim >= 0 ? dim : x.dim() == 1 ? 0 : 1;
}

TensorList split_evenly(const char* op, const Tensor& x, int64_t sections, int64_t dim) {
  if (sections <= 0 || x.size(dim) % sections != 0) {
    throw Error(std::string(op) + ": dim " + std::to_string(dim) + " of size " + std::to_string(x.size(dim)) +
                " of the input " + shape_str(x.sizes()) + " does not divide into " + std::to_string(sections) +
                " equal sections");
  }
  return tensor_split(x, sections, dim);
}

}  // namespace

Tensor tiled(const Tensor& x, const Shape& reps) {
  ops::check_defined("tiled", x, "input");
  for (int64_t r : reps) {
    if (r < 0) throw Error("tiled: reps must be >= 0, got " + shape_str(reps));
  }
  Shape full(static_cast<size_t>(std::max<int64_t>(x.dim() - static_cast<int64_t>(reps.size()), 0)), 1);
  full.insert(full.end(), reps.begin(), reps.end());
  return repeat(x, full);
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  const char* op = "repeat_interleave";
  ops::check_defined(op, x, "input");
  if (repeats < 0) throw Error(std::string(op) + ": repeats must be >= 0, got " + std::to_string(repeats));
  const Tensor src = dim ? x : x.flatten();
  const int64_t d = dim ? ops::checked_dim(op, x, *dim) : 0;
  const Tensor s = src.dim() == 0 ? src.reshape({1}) : src;
  std::vector<int64_t> index;
  for (int64_t i = 0; i < s.size(d); ++i) index.insert(index.end(), static_cast<size_t>(repeats), i);
  return index_select(s, d, ops::index_on(index, x.device()));
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim) {
  const char* op = "repeat_interleave";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, repeats, "repeats");
  ops::common_device(op, {&x, &repeats});
  if (!is_integral(repeats.dtype(), false)) {
    throw DTypeError(std::string(op) + ": repeats must hold integers, got " + ops::dtype_str(repeats.dtype()));
  }
  if (repeats.dim() > 1) {
    throw ShapeError(std::string(op) + ": repeats must be 0-d or 1-d, got " + shape_str(repeats.sizes()));
  }
  const Tensor src = dim ? x : x.flatten();
  const int64_t d = dim ? ops::checked_dim(op, x, *dim) : 0;
  const Tensor s = src.dim() == 0 ? src.reshape({1}) : src;
  if (repeats.numel() == 1) return repeat_interleave(x, repeats.to(Device::cpu()).item<int64_t>(), dim);
  if (repeats.numel() != s.size(d)) {
    throw ShapeError(std::string(op) + ": repeats " + shape_str(repeats.sizes()) +
                     " must hold one count for each of the " + std::to_string(s.size(d)) + " slices along dim " +
                     std::to_string(d) + " of the input " + shape_str(x.sizes()) + " (or one count for all)");
  }
  return index_select(s, d, repeat_interleave(repeats));
}

Tensor repeat_interleave(const Tensor& counts) {
  const char* op = "repeat_interleave";
  ops::check_defined(op, counts, "repeats");
  if (!is_integral(counts.dtype(), false) || counts.dim() != 1) {
    throw Error(std::string(op) + ": repeats must be a 1-d integer tensor, got " + ops::dtype_str(counts.dtype()) +
                " " + shape_str(counts.sizes()));
  }
  const Tensor host = counts.to(Device::cpu()).to(DType::Int64).contiguous();
  const int64_t* c = host.data_ptr<int64_t>();
  std::vector<int64_t> index;
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (c[i] < 0) {
      throw Error(std::string(op) + ": repeats must be >= 0, got " + std::to_string(c[i]) + " at position " +
                  std::to_string(i));
    }
    index.insert(index.end(), static_cast<size_t>(c[i]), i);
  }
  return ops::index_on(index, counts.device());
}

Tensor atleast_1d(const Tensor& x) {
  ops::check_defined("atleast_1d", x, "input");
  return with_dims(x, 1, {0});
}

Tensor atleast_2d(const Tensor& x) {
  ops::check_defined("atleast_2d", x, "input");
  return with_dims(x, 2, {0, 0});
}

Tensor atleast_3d(const Tensor& x) {
  ops::check_defined("atleast_3d", x, "input");
  // [] -> [1] -> [1, 1] -> [1, 1, 1]; [n] -> [1, n] -> [1, n, 1]; [m, n] -> [m, n, 1].
  if (x.dim() == 0) return x.reshape({1, 1, 1});
  return with_dims(x, 3, x.dim() == 1 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{2});
}

Tensor hstack(const TensorList& tensors) {
  return join(
      "hstack", tensors, [](const Tensor& t) { return atleast_1d(t); }, 0, 1);
}

Tensor vstack(const TensorList& tensors) {
  return join(
      "vstack", tensors, [](const Tensor& t) { return atleast_2d(t); }, 0, 0);
}

Tensor dstack(const TensorList& tensors) {
  return join(
      "dstack", tensors, [](const Tensor& t) { return atleast_3d(t); }, 2, 2);
}

Tensor column_stack(const TensorList& tensors) {
  return join(
      "column_stack", tensors,
      [](const Tensor& t) {
        return t.dim() <= 1 ? t.reshape({t.numel(), 1}) : t;
      },
      1, 1);
}

TensorList tensor_split(const Tensor& x, int64_t sections, int64_t dim) {
  const char* op = "tensor_split";
  ops::check_defined(op, x, "input");
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": the input must have 1 dim at least, got a 0-d tensor");
  const int64_t d = ops::checked_dim(op, x, dim);
  if (sections <= 0) {
    throw Error(std::string(op) + ": sections must be >= 1, got " + std::to_string(sections) + " for the input " +
                shape_str(x.sizes()));
  }
  const int64_t size = x.size(d), base = size / sections, longer = size % sections;
  TensorList pieces;
  int64_t start = 0;
  for (int64_t k = 0; k < sections; ++k) {
    const int64_t length = base + (k < longer ? 1 : 0);
    pieces.push_back(x.narrow(d, start, length));
    start += length;
  }
  return pieces;
}

TensorList tensor_split_at(const Tensor& x, const std::vector<int64_t>& indices, int64_t dim) {
  const char* op = "tensor_split_at";
  ops::check_defined(op, x, "input");
  if (x.dim() == 0) throw ShapeError(std::string(op) + ": the input must have 1 dim at least, got a 0-d tensor");
  const int64_t d = ops::checked_dim(op, x, dim), size = x.size(d);
  TensorList pieces;
  int64_t previous = 0;
  for (size_t k = 0; k <= indices.size(); ++k) {
    const int64_t start = slice_bound(previous, size);
    const int64_t end = k < indices.size() ? std::max(slice_bound(indices[k], size), start) : size;
    pieces.push_back(x.narrow(d, start, end - start));
    if (k < indices.size()) previous = indices[k];
  }
  return pieces;
}

TensorList hsplit(const Tensor& x, int64_t sections) {
  return split_evenly("hsplit", x, sections, split_dim("hsplit", x, 1, -1));
}

TensorList vsplit(const Tensor& x, int64_t sections) {
  return split_evenly("vsplit", x, sections, split_dim("vsplit", x, 2, 0));
}

TensorList dsplit(const Tensor& x, int64_t sections) {
  return split_evenly("dsplit", x, sections, split_dim("dsplit", x, 3, 2));
}

TensorList hsplit_at(const Tensor& x, const std::vector<int64_t>& indices) {
  return tensor_split_at(x, indices, split_dim("hsplit_at", x, 1, -1));
}

TensorList vsplit_at(const Tensor& x, const std::vector<int64_t>& indices) {
  return tensor_split_at(x, indices, split_dim("vsplit_at", x, 2, 0));
}

TensorList dsplit_at(const Tensor& x, const std::vector<int64_t>& indices) {
  return tensor_split_at(x, indices, split_dim("dsplit_at", x, 3, 2));
}

Tensor fliplr(const Tensor& x) {
  ops::check_defined("fliplr", x, "input");
  if (x.dim() < 2) throw ShapeError("fliplr: the input must have 2 dims at least, got " + shape_str(x.sizes()));
  return flip(x, {1});
}

Tensor flipud(const Tensor& x) {
  ops::check_defined("flipud", x, "input");
  if (x.dim() < 1) throw ShapeError("flipud: the input must have 1 dim at least, got a 0-d tensor");
  return flip(x, {0});
}

}  // namespace kiln
