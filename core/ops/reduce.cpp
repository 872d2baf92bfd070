// Reductions: dims are normalized and checked here, the input is described to the one generic
// reduction kernel as kept dims plus reduced dims, and gradients flow back by broadcasting (sum,
// mean, var), to ties (max/min of all) or to indices (max/min along a dim).
#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/copy.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/math.h"
#include "core/ops/helpers.h"
#include "core/ops/index.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "kernels/reduce.h"

namespace kiln {
namespace {

// Which dims of x are reduced (empty list = all), as a mask.
std::vector<bool> reduced_mask(const char* op, const Tensor& x, const Shape& dims) {
  std::vector<bool> mask(static_cast<size_t>(x.dim()), dims.empty());
  bool zero_d_seen = false;
  for (int64_t d : dims) {
    if (x.dim() == 0) {  // a 0-d tensor reduces over itself: dims 0 and -1, named once
      ops::checked_dim(op, x, d);
      if (zero_d_seen) throw ShapeError(std::string(op) + ": dim 0 appears twice in " + shape_str(dims));
      zero_d_seen = true;
      continue;
    }
    int64_t w = wrap_dim(d, x.dim(), op);
    if (mask[static_cast<size_t>(w)] && !dims.empty()) {
      throw ShapeError(std::string(op) + ": dim " + std::to_string(w) + " appears twice in " + shape_str(dims));
    }
    mask[static_cast<size_t>(w)] = true;
  }
  return mask;
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[static_cast<size_t>(d)]) {
      out.push_back(x.size(d));
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

int64_t reduced_count(const Tensor& x, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[static_cast<size_t>(d)]) n *= x.size(d);
  return n;
}

// Runs the generic reduction. `out` and `indices` have the keepdim=false shape (or are undefined).
void launch_reduce(const char* op, ReduceOp rop, const Tensor& x, const std::vector<bool>& mask, const Tensor& out,
                   const Tensor& indices, double correction = 1.0) {
  const Tensor& shape_ref = out.defined() ? out : indices;
  if (shape_ref.numel() == 0) return;
  // The reduced dims go into fixed arrays of kMaxDims (the output's were checked by make_arg).
  if (x.dim() > kMaxDims) {
    throw ShapeError(std::string(op) + ": kiln supports at most " + std::to_string(kMaxDims) +
                     " dimensions in a kernel, got shape " + shape_str(x.sizes()));
  }
  ReduceArgs args;
  if (out.defined()) args.out = ops::make_arg(op, out);
  if (indices.defined()) args.indices = ops::make_arg(op, indices);
  if (!out.defined()) {
    args.out = args.indices;
    args.out.data = nullptr;
  }
  args.in = x.data_ptr();
  args.in_dtype = x.dtype();
  int k = 0;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[static_cast<size_t>(d)]) {
      args.red_sizes[args.red_ndim] = x.size(d);
      args.red_strides[args.red_ndim] = x.stride(d);
      ++args.red_ndim;
    } else {
      args.in_kept_strides[k++] = x.stride(d);
    }
  }
  args.correction = correction;
  ops::launch(op, x.device(), kernels::reduce, rop, args);
}

// Gradient of a keepdim=false reduction, broadcast back to x's shape.
Tensor expand_back(const Tensor& g, const Shape& x_shape, const std::vector<bool>& mask, bool keepdim) {
  Tensor r = g;
  if (!keepdim) {
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) r = r.unsqueeze(static_cast<int64_t>(d));
  }
  return r.expand(x_shape);
}

// A maximum or minimum needs an element in each reduction; an empty kept dim just leaves no results
// ([0, 3] reduced over dim 1 is [0], as in PyTorch).
void check_nonempty(const char* op, const Tensor& x, const std::vector<bool>& mask) {
  if (reduced_count(x, mask) == 0) {
    throw ShapeError(std::string(op) + ": cannot reduce an empty tensor or dimension (shape " + shape_str(x.sizes()) +
                     ")");
  }
}

Tensor sum_like(const char* name, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  if (std::optional<TensorList> c = autocast::cast_inputs(name, {&x})) {
    return sum_like(name, rop, (*c)[0], dims, keepdim);
  }
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  DType rt = x.dtype();
  if (rop == ReduceOp::Sum && !is_floating(rt)) rt = DType::Int64;
  if (rop == ReduceOp::Mean && !is_floating(rt)) {
    throw DTypeError(std::string("mean: needs a floating input, got ") + dtype_name(rt) + "; convert with to(float32)");
  }
  Tensor out = ops::empty_for(name, reduced_shape(x, mask, false), TensorOptions(rt, x.device()));
  launch_reduce(name, rop, x, mask, out, Tensor());
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    double scale = rop == ReduceOp::Mean ? 1.0 / static_cast<double>(std::max<int64_t>(reduced_count(x, mask), 1)) : 1.0;
    record_function(name, {x}, {out}, {}, [xs, mask, keepdim, scale](const FunctionNode::Context& ctx) {
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim);
      return TensorList{scale == 1.0 ? g : g * scale};
    });
  }
  return out;
}

Tensor any_all(const char* name, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  Tensor out = ops::empty_for(name, reduced_shape(x, mask, false), TensorOptions(DType::Bool, x.device()));
  launch_reduce(name, rop, x, mask, out, Tensor());
  return keepdim ? out.reshape(reduced_shape(x, mask, true)) : out;
}

// max/min over dims without indices; the gradient is split evenly among the tied winners.
Tensor extreme(const char* name, bool is_max, const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, dims);
  check_nonempty(name, x, mask);
  Tensor out = ops::empty_for(name, reduced_shape(x, mask, false), TensorOptions(x.dtype(), x.device()));
  launch_reduce(name, is_max ? ReduceOp::Max : ReduceOp::Min, x, mask, out, Tensor());
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    record_function(name, {x}, {out}, {x, out}, [xs, mask, keepdim](const FunctionNode::Context& ctx) {
      Tensor xv = ctx.saved_at(0);
      Tensor best = expand_back(ctx.saved_at(1), xs, mask, keepdim);
      // A NaN wins where the result is NaN (eq alone would find no winner there and divide 0 by 0).
      // 16-bit gradients are shared out in float32: a count of ties past 65504 is inf in float16.
      const DType gt = ctx.grads[0].dtype();
      const DType wide = ops::widened_dtype(gt);
      Tensor winners = logical_or(eq(xv, best), logical_and(isnan(xv), isnan(best))).to(wide);
      Shape red;
      for (size_t d = 0; d < mask.size(); ++d)
        if (mask[d]) red.push_back(static_cast<int64_t>(d));
      Tensor count = sum(winners, red, true);
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim).to(wide);
      return TensorList{(g * winners / count).to(gt)};
    });
  }
  return out;
}

std::pair<Tensor, Tensor> extreme_dim(const char* name, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  ops::check_defined(name, x, "input");
  auto mask = reduced_mask(name, x, {dim});
  check_nonempty(name, x, mask);
  Shape s = reduced_shape(x, mask, false);
  Tensor out = ops::empty_for(name, s, TensorOptions(x.dtype(), x.device()));
  Tensor idx = ops::empty_for(name, s, TensorOptions(DType::Int64, x.device()));
  launch_reduce(name, is_max ? ReduceOp::Max : ReduceOp::Min, x, mask, out, idx);
  if (keepdim) {
    Shape ks = reduced_shape(x, mask, true);
    out = out.reshape(ks);
    idx = idx.reshape(ks);
  }
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
    record_function(name, {x}, {out}, {idx}, [xs, d, keepdim](const FunctionNode::Context& ctx) {
      Tensor g = ctx.grads[0], i = ctx.saved_at(0);
      if (xs.empty()) return TensorList{g.reshape(xs)};
      if (!keepdim) {
        g = g.unsqueeze(d);
        i = i.unsqueeze(d);
      }
      return TensorList{scatter_add(zeros(xs, TensorOptions(g.dtype(), g.device())), d, i, g)};
    });
  }
  return {out, idx};
}

Tensor arg_extreme(const char* name, bool is_max, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  ops::check_defined(name, x, "input");
  // Checked before flattening so the message names the caller's shape, not [0].
  if (!dim) check_nonempty(name, x, std::vector<bool>(static_cast<size_t>(x.dim()), true));
  Tensor src = dim ? x : x.reshape({-1});
  auto mask = reduced_mask(name, src, dim ? Shape{*dim} : Shape{});
  check_nonempty(name, src, mask);
  Tensor idx = ops::empty_for(name, reduced_shape(src, mask, false), TensorOptions(DType::Int64, x.device()));
  launch_reduce(name, is_max ? ReduceOp::ArgMax : ReduceOp::ArgMin, src, mask, Tensor(), idx);
  if (keepdim) {
    if (dim) return idx.reshape(reduced_shape(src, mask, true));
    return idx.reshape(Shape(static_cast<size_t>(x.dim()), 1));
  }
  return idx;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return sum_like("sum", ReduceOp::Sum, x, dims, keepdim); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  return sum_like("mean", ReduceOp::Mean, x, dims, keepdim);
}

Tensor var(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  if (std::optional<TensorList> c = autocast::cast_inputs("var", {&x})) return var((*c)[0], dims, correction, keepdim);
  ops::check_defined("var", x, "input");
  ops::check_floating("var", x, "input");
  auto mask = reduced_mask("var", x, dims);
  Tensor out = ops::empty_for("var", reduced_shape(x, mask, false), TensorOptions(x.dtype(), x.device()));
  launch_reduce("var", ReduceOp::Var, x, mask, out, Tensor(), correction);
  if (keepdim) out = out.reshape(reduced_shape(x, mask, true));
  if (needs_grad({&x})) {
    Shape xs = x.sizes();
    const double denom = std::max(0.0, static_cast<double>(reduced_count(x, mask)) - correction);
    Shape red;
    for (size_t d = 0; d < mask.size(); ++d)
      if (mask[d]) red.push_back(static_cast<int64_t>(d));
    record_function("var", {x}, {out}, {x}, [xs, mask, keepdim, denom, red](const FunctionNode::Context& ctx) {
      Tensor xv = ctx.saved_at(0);
      Tensor centered = xv - mean(xv, red, true);
      Tensor g = expand_back(ctx.grads[0], xs, mask, keepdim);
      return TensorList{g * centered * (2.0 / denom)};
    });
  }
  return out;
}

Tensor std(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

std::pair<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return {var(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}

std::pair<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return {std(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}

Tensor prod(const Tensor& x) {
  ops::check_defined("prod", x, "input");
  return prod(x.reshape({-1}), 0, false);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  const char* op = "prod";
  ops::check_defined(op, x, "input");
  const int64_t d = x.dim() == 0 ? ops::checked_dim(op, x, dim) : wrap_dim(dim, x.dim(), op);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  // The dim last (swapped with the last one); each step multiplies its first half by its second (an
  // odd length keeps its last element aside, multiplied in at the next step), so length L takes
  // ceil(log2 L) steps.
  Tensor y = to_dtype(x.dim() == 0 ? x.reshape({1}) : x.transpose(d, -1), ops::widened_dtype(out_dtype));
  // An empty product is 1, still a node of x's graph (its gradient is empty).
  if (y.size(-1) == 0) y = sum(y, {-1}, true) * 0 + 1;
  while (y.size(-1) > 1) {
    const int64_t n = y.size(-1), half = n / 2;
    Tensor product = y.narrow(-1, 0, half) * y.narrow(-1, half, half);
    y = n % 2 == 0 ? product : cat({product, y.narrow(-1, n - 1, 1)}, -1);
  }
  Tensor out = to_dtype(y, out_dtype);  // [..., 1]
  if (x.dim() == 0) return out.reshape({});
  out = out.transpose(d, -1);
  return keepdim ? out : out.squeeze(d);
}

Tensor max(const Tensor& x) { return extreme("max", true, x, {}, false); }
Tensor min(const Tensor& x) { return extreme("min", false, x, {}, false); }
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) { return extreme("amax", true, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return extreme("amin", false, x, dims, keepdim); }
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim("max", true, x, dim, keepdim); }
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("min", false, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) { return arg_extreme("argmax", true, x, dim, keepdim); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme("argmin", false, x, dim, keepdim);
}
Tensor any(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("any", ReduceOp::Any, x, dims, keepdim); }
Tensor all(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("all", ReduceOp::All, x, dims, keepdim); }

Tensor nansum(const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined("nansum", x, "input");
  reduced_mask("nansum", x, dims);  // the dims checked in this op's name
  if (!is_floating(x.dtype())) return sum(x, dims, keepdim);
  return sum(where(isnan(x), zeros({}, TensorOptions(x.dtype(), x.device())), x), dims, keepdim);
}

Tensor nanmean(const Tensor& x, const Shape& dims, bool keepdim) {
  ops::check_defined("nanmean", x, "input");
  ops::check_floating("nanmean", x, "input");
  reduced_mask("nanmean", x, dims);
  // In the widened dtype: a count past 2048 is not a float16.
  const DType wide = ops::widened_dtype(x.dtype());
  const Tensor xw = x.to(wide);
  const Tensor count = sum(logical_not(isnan(x.detach())), dims, keepdim).to(wide);
  return div(nansum(xw, dims, keepdim), count).to(x.dtype());
}

Tensor count_nonzero(const Tensor& x, const Shape& dims) {
  ops::check_defined("count_nonzero", x, "input");
  reduced_mask("count_nonzero", x, dims);
  return sum(x.dtype() == DType::Bool ? x.detach() : ne(x.detach(), 0), dims, false);
}

std::pair<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  ops::check_defined("aminmax", x, "input");
  const Shape dims = dim ? Shape{*dim} : Shape{};
  reduced_mask("aminmax", x, dims);
  if (!dim) {
    const Tensor lo = min(x), hi = max(x);
    const Shape ones_shape(static_cast<size_t>(x.dim()), 1);
    return keepdim ? std::pair{lo.reshape(ones_shape), hi.reshape(ones_shape)} : std::pair{lo, hi};
  }
  return {amin(x, dims, keepdim), amax(x, dims, keepdim)};
}

Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  const char* op = "logsumexp";
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return logsumexp((*c)[0], dims, keepdim);
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  const std::vector<bool> mask = reduced_mask(op, x, dims);
  Shape red;
  for (size_t d = 0; d < mask.size(); ++d)
    if (mask[d]) red.push_back(static_cast<int64_t>(d));
  // An empty reduction has no max: log of the empty sum, -inf (still a node of x's graph).
  if (reduced_count(x, mask) == 0) return log(sum(exp(x), red, keepdim));
  // The max is a constant of the formula (it cancels), so its gradient is left out: the input's is
  // softmax, through exp and the sum. An infinite max would turn x - m into NaN: 0 stands in.
  const Tensor m = amax(x.detach(), red, true);
  const Tensor shift = where(eq(abs(m), INFINITY), 0.0, m);
  const Tensor out = log(sum(exp(x - shift), red, true)) + shift;
  return keepdim ? out : out.reshape(reduced_shape(x, mask, false));
}

namespace {
// logaddexp in base e or 2: max(a, b) + log_base(1 + base^-|a - b|).
Tensor log_add_exp(const char* op, const Tensor& a, const Tensor& b, bool base2) {
  ops::check_defined(op, a, "first operand");
  ops::check_defined(op, b, "second operand");
  const DType rt = result_type(a, b);
  if (!is_floating(rt)) {
    throw DTypeError(std::string(op) + ": needs floating operands, got " + dtype_name(a.dtype()) + " " +
                     shape_str(a.sizes()) + " and " + dtype_name(b.dtype()) + " " + shape_str(b.sizes()));
  }
  broadcast_shapes(a.sizes(), b.sizes(), op);
  const DType wide = ops::widened_dtype(rt);
  const Tensor x = to_dtype(a, wide), y = to_dtype(b, wide);
  // Where both are the same infinity, a - b is NaN: 0 stands in, and max + log(2) is that infinity.
  // The ties' gradient is then maximum's, split evenly, which is also what the formula gives for
  // equal finite operands (|a - b|'s gradient is 0 at 0).
  const Tensor same_infinity = logical_and(eq(x, y), eq(abs(x), INFINITY));
  const Tensor gap = neg(abs(where(same_infinity, 0.0, sub(x, y))));
  const Tensor tail = base2 ? div(log1p(exp2(gap)), std::numbers::ln2) : log1p(exp(gap));
  return to_dtype(add(maximum(x, y), tail), rt);
}
}  // namespace

Tensor logaddexp(const Tensor& a, const Tensor& b) { return log_add_exp("logaddexp", a, b, false); }
Tensor logaddexp2(const Tensor& a, const Tensor& b) { return log_add_exp("logaddexp2", a, b, true); }

}  // namespace kiln
