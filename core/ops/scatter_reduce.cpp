// scatter_reduce and index_reduce, composed (docs/ops.md). Sum and mean are scatter_add over x (or
// over x with the written positions zeroed) and a division by the count of values, so autograd
// through the composition gives their gradients. Prod, amax and amin have no scatter kernel of
// their own; instead every write becomes a (target, value) pair, x's elements included with
// include_self:
//
//   pairs sorted by target     | t: 0 0 0 | 2 2 | 3 |      a stable argsort of the targets
//   segmented inclusive scan   | v: a ab abc | d de | f |  log2(n) steps of shifted ops
//   each run's last element is its target's result, read through the position of the run's end
//
// The scan at step s combines element k with element k - s only where both hold the same target;
// the sorted order makes every element between them hold it too, so after the steps each element
// holds the reduction of its run up to itself, exactly (no atomics, no dependence on write order).
// The backward is one node: amax and amin split the gradient among the values equal to the result,
// prod multiplies it by the product of the other values of the run (prefix and suffix scans), so a
// zero among them needs no division.
#include "core/ops/scatter_reduce.h"

#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/math.h"
#include "core/ops/shape.h"
#include "core/ops/topk.h"
#include "kernels/error.h"

namespace kiln {

ScatterReduce scatter_reduce_mode(const char* op, const std::string& name) {
  if (name == "sum") return ScatterReduce::Sum;
  if (name == "prod") return ScatterReduce::Prod;
  if (name == "mean") return ScatterReduce::Mean;
  if (name == "amax") return ScatterReduce::Amax;
  if (name == "amin") return ScatterReduce::Amin;
  throw Error(std::string(op) + ": reduce must be \"sum\", \"prod\", \"mean\", \"amax\" or \"amin\", got \"" + name +
              "\"");
}

const char* scatter_reduce_name(ScatterReduce reduce) {
  switch (reduce) {
    case ScatterReduce::Sum: return "sum";
    case ScatterReduce::Prod: return "prod";
    case ScatterReduce::Mean: return "mean";
    case ScatterReduce::Amax: return "amax";
    case ScatterReduce::Amin: return "amin";
  }
  return "?";
}

namespace {

Tensor combine(const Tensor& a, const Tensor& b, ScatterReduce reduce) {
  switch (reduce) {
    case ScatterReduce::Amax: return maximum(a, b);
    case ScatterReduce::Amin: return minimum(a, b);
    default: return mul(a, b);
  }
}

// The inclusive scan of v (1-d) within runs of equal keys (1-d int64, sorted): element k combines
// the run's elements up to k. Hillis and Steele's scan, restricted to the run at every step.
Tensor segmented_scan(Tensor v, const Tensor& keys, ScatterReduce reduce) {
  const int64_t n = v.numel();
  for (int64_t s = 1; s < n; s *= 2) {
    const Tensor later = v.narrow(0, s, n - s);
    const Tensor same = eq(keys.narrow(0, s, n - s), keys.narrow(0, 0, n - s));
    v = cat({v.narrow(0, 0, s), where(same, combine(later, v.narrow(0, 0, n - s), reduce), later)}, 0);
  }
  return v;
}

// Where a run of sorted keys starts (first) or ends (last): bool, the keys' length (n >= 1).
Tensor run_edges(const Tensor& keys, bool first) {
  const int64_t n = keys.numel();
  const Tensor edge = ones({1}, TensorOptions(DType::Bool, keys.device()));
  const Tensor differs = ne(keys.narrow(0, 1, n - 1), keys.narrow(0, 0, n - 1));
  return first ? cat({edge, differs}, 0) : cat({differs, edge}, 0);
}

// The position in x read as 1-d (row-major) of each write a scatter along d with index makes;
// index's shape.
Tensor write_targets(const Tensor& x, int64_t d, const Tensor& index) {
  const TensorOptions longs(DType::Int64, index.device());
  Shape strides(static_cast<size_t>(x.dim()), 1);
  for (int64_t k = x.dim() - 2; k >= 0; --k) strides[k] = strides[k + 1] * x.size(k + 1);
  Tensor t = mul(index.to(DType::Int64), strides[static_cast<size_t>(d)]);
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k == d) continue;
    Shape view(static_cast<size_t>(x.dim()), 1);
    view[static_cast<size_t>(k)] = index.size(k);
    t = add(t, mul(arange(0, index.size(k), 1, longs).reshape(view), strides[static_cast<size_t>(k)]));
  }
  return t;
}

// src's region that index covers (src may be larger in any dim).
Tensor covered(const Tensor& src, const Tensor& index) {
  Tensor r = src;
  for (int64_t k = 0; k < index.dim(); ++k) r = r.narrow(k, 0, index.size(k));
  return r;
}

// Equal, NaN counting as equal to NaN: which values a NaN result of amax or amin came from.
Tensor same_value(const Tensor& a, const Tensor& b) { return logical_or(eq(a, b), logical_and(isnan(a), isnan(b))); }

// Every write of a prod, amax or amin: its value (in `compute`) and its target, the position in x
// read as 1-d. x's own elements come first with include_self, then src's covered region in index's
// order.
std::pair<Tensor, Tensor> all_writes(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src_part,
                                     bool include_self, DType compute) {
  Tensor values = src_part.reshape({-1}).to(compute);
  Tensor targets = write_targets(x, d, index).reshape({-1});
  if (include_self) {
    values = cat({x.reshape({-1}).to(compute), values}, 0);
    targets = cat({arange(0, x.numel(), 1, TensorOptions(DType::Int64, x.device())), targets}, 0);
  }
  return {values, targets};
}

// The writes sorted by target (stably): perm maps a sorted position to a write.
struct SortedWrites {
  Tensor perm, keys, values;
};
SortedWrites sort_writes(const Tensor& values, const Tensor& targets) {
  const Tensor perm = argsort(targets, 0);
  return {perm, index_select(targets, 0, perm), index_select(values, 0, perm)};
}

// The result of a prod, amax or amin (no autograd), in x's dtype.
Tensor reduce_by_sort(const char* op, const Tensor& x, int64_t d, const Tensor& index, const Tensor& src,
                      ScatterReduce reduce, bool include_self, const Tensor& touched) {
  const DType compute = reduce == ScatterReduce::Prod ? ops::widened_dtype(x.dtype()) : x.dtype();
  const auto [values, targets] = all_writes(x, d, index, covered(src, index), include_self, compute);
  const int64_t n = targets.numel();
  if (n == 0) return x.clone();
  const SortedWrites w = sort_writes(values, targets);
  const Tensor scan = segmented_scan(w.values, w.keys, reduce);
  // The sorted position of each target's run end (0 for targets without writes, masked below).
  const TensorOptions longs(DType::Int64, x.device());
  const Tensor ends = ops::scatter_add_as(op, zeros({x.numel()}, longs), 0, w.keys,
                                          where(run_edges(w.keys, false), arange(0, n, 1, longs), 0));
  const Tensor result = index_select(scan, 0, ends).to(x.dtype());
  return where(touched.reshape({-1}), result, x.reshape({-1})).reshape(x.sizes());
}

// The gradient of a prod: per write, the product of the other values of its run (prefix and suffix
// scans, exclusive), in the order of the writes.
Tensor prod_others(const Tensor& values, const Tensor& targets) {
  const int64_t n = values.numel();
  const SortedWrites w = sort_writes(values, targets);
  const Tensor prefix = segmented_scan(w.values, w.keys, ScatterReduce::Prod);
  const Tensor suffix = flip(segmented_scan(flip(w.values, {0}), flip(w.keys, {0}), ScatterReduce::Prod), {0});
  const Tensor one = ones({1}, TensorOptions(values.dtype(), values.device()));
  // Shifted by one within the run: the run's first (last) element has nothing before (after) it.
  const Tensor before = where(run_edges(w.keys, true), one, cat({one, prefix.narrow(0, 0, n - 1)}, 0));
  const Tensor after = where(run_edges(w.keys, false), one, cat({suffix.narrow(0, 1, n - 1), one}, 0));
  // Back to the writes' order: each sorted element lands on its own write once.
  return ops::scatter_add_as("scatter_reduce", zeros({n}, TensorOptions(values.dtype(), values.device())), 0, w.perm,
                             mul(before, after));
}

// The gradients of x and of src's covered region for a prod, amax or amin.
TensorList backward_by_sort(const Tensor& g, const Tensor& x, int64_t d, const Tensor& index, const Tensor& src_part,
                            const Tensor& out, ScatterReduce reduce, bool include_self, const Tensor& touched) {
  const DType gd = g.dtype();
  if (reduce == ScatterReduce::Prod) {
    const DType compute = ops::widened_dtype(x.dtype());
    const auto [values, targets] = all_writes(x, d, index, src_part, include_self, compute);
    Tensor dx = g, dsrc = zeros(src_part.sizes(), TensorOptions(gd, g.device()));
    if (targets.numel() == 0) return {dx, dsrc};
    const Tensor others = mul(prod_others(values, targets), index_select(g.reshape({-1}).to(compute), 0, targets));
    const int64_t m = include_self ? x.numel() : 0;
    dsrc = others.narrow(0, m, others.numel() - m).reshape(src_part.sizes()).to(gd);
    dx = include_self ? others.narrow(0, 0, m).reshape(x.sizes()).to(gd) : where(touched, 0, g);
    return {dx, dsrc};
  }
  // amax, amin: the gradient split evenly among the values that equal the result and took part.
  const Tensor self_counts = include_self ? same_value(x, out) : logical_not(touched);
  const Tensor src_counts = same_value(src_part, gather(out, d, index));
  const Tensor n = ops::scatter_add_as("scatter_reduce", self_counts.to(gd), d, index, src_counts.to(gd));
  const Tensor share = div(g, n);
  return {mul(self_counts.to(gd), share), mul(src_counts.to(gd), gather(share, d, index))};
}

Tensor scatter_reduce_as(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                         ScatterReduce reduce, bool include_self) {
  ops::check_defined(op, x, "input");
  ops::check_defined(op, src, "src");
  ops::check_defined(op, index, "index");
  if (x.dim() <= 1 && index.dim() <= 1 && src.dim() <= 1 && (index.dim() != x.dim() || src.dim() != x.dim())) {
    // A 0-d tensor counts as one element of a 1-d one, as for scatter_add.
    ops::checked_dim(op, x, dim);
    return scatter_reduce_as(op, x.reshape({-1}), 0, index.reshape({-1}), src.reshape({-1}), reduce, include_self)
        .reshape(x.sizes());
  }
  const int64_t d = ops::check_scatter_args(op, x, dim, index, src);
  if (x.dtype() == DType::Bool) {
    throw DTypeError(std::string(op) + ": not defined for bool tensors (reduce \"" + scatter_reduce_name(reduce) +
                     "\", input " + shape_str(x.sizes()) + ")");
  }
  // How many src values each position takes; this also checks index's values.
  const Tensor counts = ops::scatter_counts(op, x, d, index);
  const Tensor touched = gt(counts, 0);
  if (reduce == ScatterReduce::Sum || reduce == ScatterReduce::Mean) {
    const Tensor base = include_self ? x : where(touched, 0, x);
    const Tensor sum = ops::scatter_add_as(op, base, d, index, src);
    if (reduce == ScatterReduce::Sum) return sum;
    const Tensor n = include_self ? add(counts, 1) : where(touched, counts, 1);
    return is_floating(x.dtype()) ? div(sum, n.to(x.dtype())) : div(sum, n, RoundingMode::Floor).to(x.dtype());
  }
  const Tensor out = [&] {
    NoGradGuard no_grad;
    return reduce_by_sort(op, x.detach(), d, index, src.detach(), reduce, include_self, touched);
  }();
  if (needs_grad({&x, &src})) {
    const Shape src_shape = src.sizes();
    record_function(op, {x, src}, {out}, {x, covered(src, index), index, out, touched},
                    [d, reduce, include_self, src_shape](const FunctionNode::Context& ctx) {
                      const Tensor g = ctx.grads[0];
                      const Tensor index = ctx.saved_at(2);
                      TensorList r = backward_by_sort(g, ctx.saved_at(0), d, index, ctx.saved_at(1), ctx.saved_at(3),
                                                      reduce, include_self, ctx.saved_at(4));
                      if (r[1].sizes() != src_shape) {  // src larger than index: the rest takes no gradient
                        Tensor full_grad = zeros(src_shape, TensorOptions(g.dtype(), g.device()));
                        ops::copy_raw(covered(full_grad, index), r[1]);
                        r[1] = full_grad;
                      }
                      if (!ctx.needs_input_grad[0]) r[0] = Tensor();
                      if (!ctx.needs_input_grad[1]) r[1] = Tensor();
                      return r;
                    });
  }
  return out;
}

}  // namespace

Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce,
                      bool include_self) {
  return scatter_reduce_as("scatter_reduce", x, dim, index, src, reduce, include_self);
}

Tensor index_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, ScatterReduce reduce,
                    bool include_self) {
  const char* op = "index_reduce";
  const ops::SliceScatter a = ops::slice_scatter_args(op, x, dim, index, source);
  return scatter_reduce_as(op, a.x, a.dim, a.index, a.source, reduce, include_self).reshape(x.sizes());
}

}  // namespace kiln
