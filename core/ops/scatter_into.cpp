// The view-replacing copies of core/ops/scatter_into.h: src's slices index_select-ed into place and
// one where picking them over the input; checks first, naming the op and the offending shapes,
// dtypes or values.
#include "core/ops/scatter_into.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/scan.h"
#include "core/ops/view.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// input and src defined, on one device, of one dtype.
void check_pair(const char* op, const Tensor& input, const Tensor& src, const char* src_name) {
  ops::check_defined(op, input, "input");
  ops::check_defined(op, src, src_name);
  ops::common_device(op, {&input, &src});
  if (src.dtype() != input.dtype()) {
    throw DTypeError(std::string(op) + ": " + src_name + " must have the input's dtype " +
                     ops::dtype_str(input.dtype()) + ", got " + ops::dtype_str(src.dtype()));
  }
}

void check_src_shape(const char* op, const Tensor& input, const Tensor& src, const Shape& expected,
                     const std::string& view) {
  if (src.sizes() != expected) {
    throw ShapeError(std::string(op) + ": src must have the shape " + shape_str(expected) + " of the " + view +
                     " of the input " + shape_str(input.sizes()) + ", got " + shape_str(src.sizes()));
  }
}

// input with slice k of src along dim written at position positions[k] (distinct) along dim.
Tensor place(const Tensor& input, const Tensor& src, int64_t dim, const std::vector<int64_t>& positions) {
  if (positions.empty()) return input.clone();  // nothing of src lands; its gradient stays undefined
  const int64_t size = input.size(dim);
  std::vector<int64_t> from(static_cast<size_t>(size), 0), chosen(static_cast<size_t>(size), 0);
  for (size_t k = 0; k < positions.size(); ++k) {
    from[static_cast<size_t>(positions[k])] = static_cast<int64_t>(k);
    chosen[static_cast<size_t>(positions[k])] = 1;
  }
  Shape mask_shape(static_cast<size_t>(input.dim()), 1);
  mask_shape[static_cast<size_t>(dim)] = size;
  const Tensor mask = ops::index_on(chosen, input.device()).to(DType::Bool).reshape(mask_shape);
  return where(mask, index_select(src, dim, ops::index_on(from, input.device())), input);
}

}  // namespace

Tensor select_scatter(const Tensor& input, const Tensor& src, int64_t dim, int64_t index) {
  const char* op = "select_scatter";
  check_pair(op, input, src, "src");
  if (input.dim() == 0) throw ShapeError(std::string(op) + ": the input must have 1 dim at least, got a 0-d tensor");
  const int64_t d = ops::checked_dim(op, input, dim), size = input.size(d);
  if (index < -size || index >= size) {
    throw IndexError(std::string(op) + ": index " + std::to_string(index) + " is out of range for dim " +
                     std::to_string(d) + " of size " + std::to_string(size) + " of the input " +
                     shape_str(input.sizes()));
  }
  Shape expected = input.sizes();
  expected.erase(expected.begin() + d);
  check_src_shape(op, input, src, expected, "selection along dim " + std::to_string(d));
  return place(input, src.unsqueeze(d), d, {index < 0 ? index + size : index});
}

Tensor slice_scatter(const Tensor& input, const Tensor& src, int64_t dim, std::optional<int64_t> start,
                     std::optional<int64_t> end, int64_t step) {
  const char* op = "slice_scatter";
  check_pair(op, input, src, "src");
  if (input.dim() == 0) throw ShapeError(std::string(op) + ": the input must have 1 dim at least, got a 0-d tensor");
  const int64_t d = ops::checked_dim(op, input, dim), size = input.size(d);
  if (step < 1) throw Error(std::string(op) + ": step must be >= 1, got " + std::to_string(step));
  auto bound = [size](int64_t i) { return i < 0 ? std::max<int64_t>(i + size, 0) : std::min(i, size); };
  const int64_t first = start ? bound(*start) : 0, last = end ? bound(*end) : size;
  std::vector<int64_t> positions;
  for (int64_t p = first; p < last; p += step) positions.push_back(p);
  Shape expected = input.sizes();
  expected[static_cast<size_t>(d)] = static_cast<int64_t>(positions.size());
  check_src_shape(op, input, src, expected,
                  "slice " + std::to_string(first) + ":" + std::to_string(last) + ":" + std::to_string(step) +
                      " along dim " + std::to_string(d));
  return place(input, src, d, positions);
}

Tensor diagonal_scatter(const Tensor& input, const Tensor& src, int64_t offset, int64_t dim1, int64_t dim2) {
  const char* op = "diagonal_scatter";
  check_pair(op, input, src, "src");
  if (input.dim() < 2) {
    throw ShapeError(std::string(op) + ": the input must have 2 dims at least, got " + shape_str(input.sizes()));
  }
  const int64_t d1 = ops::checked_dim(op, input, dim1), d2 = ops::checked_dim(op, input, dim2);
  if (d1 == d2) {
    throw Error(std::string(op) + ": dim1 and dim2 must differ, got " + std::to_string(dim1) + " and " +
                std::to_string(dim2) + " for the input " + shape_str(input.sizes()));
  }
  const int64_t rows = input.size(d1), cols = input.size(d2), n = input.dim();
  const int64_t length =
      std::max<int64_t>(offset >= 0 ? std::min(rows, cols - offset) : std::min(rows + offset, cols), 0);
  Shape batch;
  for (int64_t k = 0; k < n; ++k)
    if (k != d1 && k != d2) batch.push_back(input.size(k));
  Shape expected = batch;
  expected.push_back(length);
  check_src_shape(
      op, input, src, expected,
      "diagonal " + std::to_string(offset) + " of dims " + std::to_string(d1) + " and " + std::to_string(d2));
  // The two dims moved last and merged: the diagonal's cells are then positions of one dim.
  std::vector<int64_t> positions;
  for (int64_t k = 0; k < length; ++k) {
    const int64_t row = offset >= 0 ? k : k - offset, col = offset >= 0 ? k + offset : k;
    positions.push_back(row * cols + col);
  }
  Shape flat = batch, square = batch;
  flat.push_back(rows * cols);
  square.insert(square.end(), {rows, cols});
  const Tensor merged = movedim(input, {d1, d2}, {n - 2, n - 1}).reshape(flat);
  return movedim(place(merged, src, n - 2, positions).reshape(square), {n - 2, n - 1}, {d1, d2});
}

Tensor masked_scatter(const Tensor& input, const Tensor& mask, const Tensor& source) {
  const char* op = "masked_scatter";
  check_pair(op, input, source, "source");
  ops::check_defined(op, mask, "mask");
  ops::common_device(op, {&input, &mask});
  if (mask.dtype() != DType::Bool) {
    throw DTypeError(std::string(op) + ": mask must be bool, got " + ops::dtype_str(mask.dtype()));
  }
  bool fits = mask.dim() <= input.dim();
  for (int64_t k = 1; fits && k <= mask.dim(); ++k) {
    const int64_t m = mask.size(mask.dim() - k);
    fits = m == 1 || m == input.size(input.dim() - k);
  }
  if (!fits) {
    throw ShapeError(std::string(op) + ": mask " + shape_str(mask.sizes()) + " must broadcast to the input's shape " +
                     shape_str(input.sizes()));
  }
  const Tensor chosen = mask.expand(input.sizes());
  const Tensor order = cumsum(chosen.reshape({-1}).to(DType::Int64), 0);
  const int64_t count = input.numel() == 0 ? 0 : order.narrow(0, input.numel() - 1, 1).item<int64_t>();
  if (count > source.numel()) {
    throw ShapeError(std::string(op) + ": mask " + shape_str(mask.sizes()) + " is true at " + std::to_string(count) +
                     " positions but source " + shape_str(source.sizes()) + " has only " +
                     std::to_string(source.numel()) + " elements");
  }
  if (count == 0) return input.clone();
  // The k-th true position (cumulative count k + 1) reads source's element k; positions before the
  // first true read element 0, which where then drops.
  const Tensor from = clamp(sub(order, 1), Scalar(0), std::nullopt).reshape(input.sizes());
  return where(chosen, take(source, from), input);
}

}  // namespace kiln
