// Central-difference gradient checking of a random projection of the outputs.
#include "core/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/random.h"
#include "core/ops/reduce.h"
#include "core/random.h"
#include "kernels/error.h"

namespace kiln {
namespace {

// L = sum_o sum(out_o * w_o) in float64.
double projection(const TensorList& outs, const TensorList& weights) {
  double total = 0;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!weights[o].defined()) continue;
    total += sum(mul(outs[o].to(DType::Float64), weights[o])).item<double>();
  }
  return total;
}

}  // namespace

namespace {
// Pointer to logical element j of a strided float64 tensor.
double* element_ptr(const Tensor& t, int64_t j) {
  double* base = static_cast<double*>(t.storage()->data()) + t.storage_offset();
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t s = t.size(d);
    off += (j % s) * t.stride(d);
    j /= s;
  }
  return base + off;
}
// Whether no two elements of t are one place in memory: the dims (of size > 1) in order of stride,
// each stride past the farthest offset the smaller ones reach.
bool elements_apart(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += stride * (size - 1);
  }
  return true;
}

}  // namespace

GradcheckResult gradcheck(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                          GradcheckOptions options) {
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (t.defined() && t.requires_grad()) {
      if (t.dtype() != DType::Float64 || !t.is_cpu() || !t.is_leaf()) {
        throw DTypeError("gradcheck: input " + std::to_string(i) + " must be a float64 CPU leaf tensor, got " +
                         dtype_name(t.dtype()) + " on " + t.device().str());
      }
      // Each element its own memory (gaps are fine: a view of a fused buffer): perturbing one place
      // of an expanded input would move several elements, and the numeric gradient would be wrong.
      if (!elements_apart(t)) {
        throw Error("gradcheck: input " + std::to_string(i) + " (shape " + shape_str(t.sizes()) + ", strides " +
                    shape_str(t.strides()) + ") has elements that share memory; pass a contiguous() copy");
      }
      checked.push_back(i);
    }
  }
  GradcheckResult result;
  if (checked.empty()) return result;
  const TensorList& leaves = inputs;

  TensorList outs = fn(leaves);
  Generator& gen = default_generator(Device::cpu());
  PhiloxState saved_state = gen.state();
  gen.manual_seed(options.seed);
  TensorList weights;
  TensorList diff_outs, diff_weights;
  for (const Tensor& o : outs) {
    if (o.defined() && o.is_floating_point() && o.requires_grad()) {
      Tensor w = randn(o.sizes(), TensorOptions(DType::Float64));
      weights.push_back(w);
      diff_outs.push_back(o);
      diff_weights.push_back(w.to(o.dtype()));
    } else {
      weights.push_back(Tensor());
    }
  }
  gen.set_state(saved_state);
  if (diff_outs.empty()) {
    result.ok = false;
    result.message = "gradcheck: no output requires grad";
    return result;
  }
  TensorList checked_leaves;
  for (size_t i : checked) checked_leaves.push_back(leaves[i]);
  TensorList analytic = grad(diff_outs, checked_leaves, diff_weights, false, true);

  NoGradGuard no_grad;
  for (size_t c = 0; c < checked.size(); ++c) {
    const Tensor& leaf = leaves[checked[c]];
    std::vector<double> a = analytic[c].defined() ? analytic[c].to_vector<double>()
                                                  : std::vector<double>(static_cast<size_t>(leaf.numel()), 0.0);
    for (int64_t j = 0; j < leaf.numel(); ++j) {
      double* p = element_ptr(leaf, j);
      const double orig = *p;
      *p = orig + options.eps;
      double plus = projection(fn(leaves), weights);
      *p = orig - options.eps;
      double minus = projection(fn(leaves), weights);
      *p = orig;
      double numeric = (plus - minus) / (2 * options.eps);
      double err = std::fabs(numeric - a[static_cast<size_t>(j)]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!(err <= options.atol + options.rtol * std::fabs(numeric)) && result.ok) {
        result.ok = false;
        std::ostringstream os;
        os << "gradcheck: input " << checked[c] << " (shape " << shape_str(leaf.sizes()) << "), element " << j
           << ": analytic " << a[static_cast<size_t>(j)] << " vs numeric " << numeric;
        result.message = os.str();
      }
    }
  }
  return result;
}

}  // namespace kiln
