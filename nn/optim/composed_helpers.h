// What the composed optimizers' constructors and steps share (nn/optim/composed.cpp,
// nn/optim/classic.cpp): the checks of their options, each naming the optimizer, the option, the
// value and the group, and the 1-based step number of an update.
#pragma once

#include <cmath>
#include <string>

#include "core/tensor.h"
#include "kernels/error.h"
#include "nn/optim/optimizer.h"

namespace kiln::nn::optim::detail {

// An on/off option as a group holds it: a double, on when non-zero.
inline bool flag(double v) { return v != 0.0; }

// " (group g)" when the optimizer has several groups, else nothing: where an error happened.
inline std::string group_note(size_t groups, size_t g) {
  return groups > 1 ? " (group " + std::to_string(g) + ")" : "";
}

// A hyper-parameter that must be a finite number >= 0 (`where` names the group when there are
// several).
inline void check_non_negative(const char* optimizer, const char* what, double v, const std::string& where) {
  if (!(v >= 0.0) || !std::isfinite(v)) {
    throw Error(std::string(optimizer) + ": " + what + " must be a finite number >= 0, got " + num_str(v) + where);
  }
}

// Adam-like betas: each in [0, 1).
inline void check_betas(const char* optimizer, double beta1, double beta2, const std::string& where) {
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0)) {
    throw Error(std::string(optimizer) + ": betas must be in [0, 1), got (" + num_str(beta1) + ", " + num_str(beta2) +
                ")" + where);
  }
}

// The options Adamax, RAdam and NAdam share, in every group of `o`: betas in [0, 1), eps and the
// weight decay finite and >= 0.
inline void check_adam_like(const Optimizer& o, const char* name, double beta1, double beta2, double eps) {
  for (size_t g = 0; g < o.num_groups(); ++g) {
    const std::string where = group_note(o.num_groups(), g);
    check_betas(name, o.option(g, "beta1", beta1), o.option(g, "beta2", beta2), where);
    check_non_negative(name, "eps", o.option(g, "eps", eps), where);
    check_non_negative(name, "weight_decay", o.group(g).weight_decay, where);
  }
}

// The 1-based step t of this update, in `dtype`, from a parameter's device step count (which
// counts the updates before it).
inline Tensor step_number(const Tensor& steps, DType dtype) { return steps.to(dtype) + 1.0; }

}  // namespace kiln::nn::optim::detail
