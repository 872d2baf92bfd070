// nonzero, masked_select, bincount, searchsorted, bucketize, unique and unique_consecutive, all
// composed of kernels both devices have. The one building block is a compaction: the flat
// positions of a mask's true elements, in order, written by scatter_add (each to its rank among
// them, which cumsum gives) after one read of their count. searchsorted merges values and
// boundaries with one stable sort.
#include "core/ops/search.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/reduce.h"
#include "core/ops/scan.h"
#include "core/ops/shape.h"
#include "core/ops/topk.h"
#include "kernels/error.h"

namespace kiln {
namespace {

TensorOptions int64_on(Device d) { return TensorOptions(DType::Int64, d); }

// The flat positions of the true elements of a 1-d bool mask, ascending (int64, 1-d). Each true
// element goes to its rank among them (cumsum - 1); the false ones all go to one extra slot past
// the end, adding 0 there, which is then cut off. One read of the count.
Tensor true_positions(const Tensor& mask) {
  const int64_t n = mask.numel();
  const Tensor ranks = cumsum(mask, 0);  // int64: bool sums as an integer
  const int64_t count = n == 0 ? 0 : ranks.narrow(0, n - 1, 1).item<int64_t>();
  const Tensor slot = where(mask, sub(ranks, 1), Scalar(count));
  const Tensor position = where(mask, arange(0, n, 1, int64_on(mask.device())), Scalar(0));
  return scatter_add(zeros({count + 1}, int64_on(mask.device())), 0, slot, position).narrow(0, 0, count);
}

// Bool tensors sort and compare as uint8 (0 and 1).
Tensor sortable(const Tensor& x) { return x.dtype() == DType::Bool ? x.to(DType::UInt8) : x; }

}  // namespace

Tensor nonzero(const Tensor& x) {
  ops::check_defined("nonzero", x, "input");
  const Tensor mask = x.dtype() == DType::Bool ? x.detach() : ne(x.detach(), 0);
  Tensor flat = true_positions(mask.reshape({-1}));
  const int64_t count = flat.numel();
  if (x.dim() == 0 || count == 0) return zeros({count, x.dim()}, int64_on(x.device()));
  // Row-major flat positions to multi-indices, the last dim first.
  TensorList columns(static_cast<size_t>(x.dim()));
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    columns[static_cast<size_t>(d)] = remainder(flat, x.size(d));
    flat = floor_divide(flat, x.size(d));
  }
  return stack(columns, 1);
}

Tensor argwhere(const Tensor& x) { return nonzero(x); }

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  const char* op = "masked_select";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, mask, "mask");
  ops::common_device(op, {&x, &mask});
  if (mask.dtype() != DType::Bool) {
    throw DTypeError(std::string(op) + ": mask must be bool, got " + dtype_name(mask.dtype()) + " " +
                     shape_str(mask.sizes()));
  }
  const Shape shape = broadcast_shapes(x.sizes(), mask.sizes(), op);
  const Tensor picked = true_positions(mask.detach().expand(shape).reshape({-1}));
  return index_select(x.expand(shape).reshape({-1}), 0, picked);
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  const char* op = "bincount";
  ops::check_defined(op, x, "input");
  if (x.dim() != 1 || !is_integral(x.dtype(), false)) {
    throw DTypeError(std::string(op) + ": input must be a 1-d tensor of non-negative integers, got " +
                     dtype_name(x.dtype()) + " " + shape_str(x.sizes()));
  }
  if (minlength < 0) throw Error(std::string(op) + ": minlength must be >= 0, got " + std::to_string(minlength));
  DType out_dtype = DType::Int64;
  if (weights.defined()) {
    ops::common_device(op, {&x, &weights});
    if (weights.sizes() != x.sizes()) {
      throw ShapeError(std::string(op) + ": weights must have the input's shape " + shape_str(x.sizes()) + ", got " +
                       shape_str(weights.sizes()));
    }
    out_dtype = weights.dtype() == DType::Float32 ? DType::Float32 : DType::Float64;
  }
  const TensorOptions options(out_dtype, x.device());
  if (x.numel() == 0) return zeros({minlength}, options);
  // The smallest and the largest value, in one read.
  const Tensor ends = stack({min(x.detach()), max(x.detach())}).to(DType::Int64).to(Device::cpu());
  const int64_t lo = ends.data_ptr<int64_t>()[0], hi = ends.data_ptr<int64_t>()[1];
  if (lo < 0) throw Error(std::string(op) + ": input must be non-negative, got a value of " + std::to_string(lo));
  const int64_t length = std::max(hi + 1, minlength);
  const Tensor added = weights.defined() ? weights.detach().to(out_dtype) : ones(x.sizes(), options);
  return scatter_add(zeros({length}, options), 0, x.detach().to(DType::Int64), added);
}

namespace {

Tensor searchsorted_as(const char* op, const Tensor& boundaries, const Tensor& values, bool right, bool out_int32) {
  ops::check_defined(op, boundaries, "boundaries");
  ops::check_defined(op, values, "values");
  ops::common_device(op, {&boundaries, &values});
  if (boundaries.dim() == 0) throw ShapeError(std::string(op) + ": boundaries must have at least one dim, got 0-d");
  if (boundaries.dtype() == DType::Bool || values.dtype() == DType::Bool) {
    throw DTypeError(std::string(op) + ": boundaries and values must be numbers, got " +
                     dtype_name(boundaries.dtype()) + " and " + dtype_name(values.dtype()));
  }
  const int64_t n = boundaries.size(-1);
  int64_t rows = 1;
  if (boundaries.dim() > 1) {
    Shape lead_b = boundaries.sizes(), lead_v = values.sizes();
    lead_b.pop_back();
    if (!lead_v.empty()) lead_v.pop_back();
    if (values.dim() != boundaries.dim() || lead_b != lead_v) {
      throw ShapeError(std::string(op) + ": N-d boundaries " + shape_str(boundaries.sizes()) +
                       " need values with the same leading dims, got " + shape_str(values.sizes()));
    }
    rows = n == 0 ? 0 : boundaries.numel() / n;
  }
  const DType index_dtype = out_int32 ? DType::Int32 : DType::Int64;
  const int64_t m = rows == 0 ? 0 : values.numel() / rows;
  if (values.numel() == 0 || n == 0) return zeros(values.sizes(), TensorOptions(index_dtype, values.device()));
  const DType common = promote_types(boundaries.dtype(), values.dtype());
  const Tensor b = boundaries.detach().to(common).reshape({rows, n});
  const Tensor v = values.detach().to(common).reshape({rows, m});
  // One stable sort of each row of values and boundaries together: with the values first, a
  // boundary equal to a value sorts after it (not counted: left); with the boundaries first, before
  // it (counted: right). At a value's place in the sorted row, the boundaries before it are the
  // answer, which a running count of them gives; scatter_add takes each answer back to the value's
  // own position (the sort's order is a permutation: one element a slot).
  const Tensor order = argsort(right ? cat({b, v}, 1) : cat({v, b}, 1), 1);
  const Tensor is_boundary = right ? lt(order, n) : ge(order, m);
  const Tensor below = cumsum(is_boundary, 1);
  const Tensor placed = scatter_add(zeros({rows, n + m}, int64_on(values.device())), 1, order, below);
  const Tensor answer = placed.narrow(1, right ? n : 0, m).reshape(values.sizes());
  return out_int32 ? answer.to(DType::Int32) : answer;
}

}  // namespace

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right, bool out_int32) {
  return searchsorted_as("searchsorted", sorted_sequence, values, right, out_int32);
}

Tensor searchsorted(const Tensor& sorted_sequence, const Scalar& value, bool right, bool out_int32) {
  ops::check_defined("searchsorted", sorted_sequence, "boundaries");
  // The value exactly: a float as float64, an integer as int64 (promotion with the boundaries
  // then compares in the wider type).
  const DType t = value.is_floating() ? DType::Float64 : DType::Int64;
  return searchsorted_as("searchsorted", sorted_sequence, full({}, value, TensorOptions(t, sorted_sequence.device())),
                         right, out_int32);
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool right, bool out_int32) {
  ops::check_defined("bucketize", boundaries, "boundaries");
  if (boundaries.dim() != 1) {
    throw ShapeError("bucketize: boundaries must be 1-d, got " + shape_str(boundaries.sizes()));
  }
  return searchsorted_as("bucketize", boundaries, input, right, out_int32);
}

namespace {

// unique and unique_consecutive on x's elements in the order `line` has them (sorted, or x's own):
// a new value starts wherever an element differs from the one before (NaN differs from all);
// `origin` gives each element of line its position in x.
UniqueResult runs(const Tensor& x, const Tensor& line, const Tensor& origin) {
  const int64_t n = line.numel();
  const TensorOptions index(DType::Int64, x.device());
  if (n == 0) return {empty({0}, TensorOptions(x.dtype(), x.device())), zeros(x.sizes(), index), zeros({0}, index)};
  const Tensor starts = cat(
      {ones({1}, TensorOptions(DType::Bool, x.device())), ne(line.narrow(0, 1, n - 1), line.narrow(0, 0, n - 1))}, 0);
  const Tensor group = sub(cumsum(starts, 0), 1);
  Tensor values = masked_select(line, starts);
  const int64_t k = values.numel();
  const Tensor counts = scatter_add(zeros({k}, index), 0, group, ones({n}, index));
  const Tensor inverse = scatter_add(zeros({n}, index), 0, origin, group).reshape(x.sizes());
  if (x.dtype() == DType::Bool) values = values.to(DType::Bool);
  return {values, inverse, counts};
}

}  // namespace

UniqueResult unique(const Tensor& x) {
  ops::check_defined("unique", x, "input");
  const auto [line, order] = sort(sortable(x.detach()).reshape({-1}));
  return runs(x, line, order);
}

UniqueResult unique_consecutive(const Tensor& x) {
  ops::check_defined("unique_consecutive", x, "input");
  const Tensor line = sortable(x.detach()).reshape({-1});
  return runs(x, line, arange(0, line.numel(), 1, int64_on(x.device())));
}

}  // namespace kiln
