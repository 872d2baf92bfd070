// softmax and log_softmax along any dim: the input is seen as [outer, n, inner] and one fused kernel
// runs along the middle dim; the backward needs only the forward's output.
#include "core/ops/softmax.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/random.h"
#include "core/ops/reduce.h"
#include "core/ops/helpers.h"
#include "kernels/error.h"
#include "kernels/softmax.h"

namespace kiln {
namespace {

using ops::dense;
using ops::dense_grad;

// [outer, n, inner] around dim d of a shape (a 0-d shape is [1, 1, 1]).
std::tuple<int64_t, int64_t, int64_t> split_at(const Shape& s, int64_t d) {
  int64_t outer = 1, inner = 1;
  if (s.empty()) return {1, 1, 1};
  for (int64_t i = 0; i < d; ++i) outer *= s[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(d) + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s[static_cast<size_t>(d)], inner};
}

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  if (std::optional<TensorList> c = autocast::cast_inputs(op, {&x})) return softmax_impl(op, (*c)[0], dim, log);
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x, "input");
  const int64_t d = ops::checked_dim(op, x, dim);
  Tensor xc = dense(x);
  auto [outer, n, inner] = split_at(xc.sizes(), d);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
  if (out.numel() > 0) {
    ops::launch(op, x.device(), kernels::softmax_forward, out.data_ptr(), xc.data_ptr(), x.dtype(), outer, n, inner,
                log);
  }
  if (needs_grad({&x})) {
    // Captured by copy under new names: clang 14 cannot capture structured bindings.
    auto backward = [op, outer = outer, n = n, inner = inner, log](const FunctionNode::Context& ctx) {
      Tensor y = ctx.saved_at(0);
      Tensor g = dense_grad(ctx.grads[0], y.dtype());
      Tensor dx = empty(y.sizes(), TensorOptions(y.dtype(), y.device()));
      if (dx.numel() > 0) {
        ops::launch(op, y.device(), kernels::softmax_backward, dx.data_ptr(), g.data_ptr(), y.data_ptr(), y.dtype(),
                    outer, n, inner, log);
      }
      return TensorList{dx};
    };
    record_function(op, {x}, {out}, {out}, std::move(backward));
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

Tensor gumbel_softmax(const Tensor& logits, double tau, bool hard, int64_t dim,
                      const std::optional<Generator>& generator) {
  const char* op = "gumbel_softmax";
  ops::check_defined(op, logits, "logits");
  ops::check_floating(op, logits, "logits");
  if (!(tau > 0.0) || !std::isfinite(tau)) {
    throw Error(std::string(op) + ": tau must be positive and finite, got " + num_str(tau));
  }
  const int64_t d = logits.dim() == 0 ? ops::checked_dim(op, logits, dim) : wrap_dim(dim, logits.dim(), op);
  Tensor gumbels;
  {
    NoGradGuard no_grad;  // noise: no gradient. u == 0 gives -inf, a weight of 0.
    const Tensor u =
        rand(logits.sizes(), TensorOptions(ops::widened_dtype(logits.dtype()), logits.device()), generator);
    gumbels = neg(log(neg(log(u)))).to(logits.dtype());
  }
  const Tensor y = softmax(div(add(logits, gumbels), tau), d);
  if (!hard) return y;
  Tensor one_hot;
  {
    NoGradGuard no_grad;
    one_hot = scatter(zeros_like(y), d, argmax(y, d, true), 1.0);
  }
  // The one-hot vector exactly (y - y.detach() is 0), with y's gradient.
  return add(one_hot, sub(y, y.detach()));
}

}  // namespace kiln
