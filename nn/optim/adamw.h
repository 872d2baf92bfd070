// AdamW (Loshchilov and Hutter, decoupled weight decay), as torch.optim.AdamW: Adam
// (nn/optim/adam.h) whose weight decay shrinks the parameter by lr * weight_decay before the update
// instead of adding weight_decay * p to the gradient, and whose default weight decay is 1e-2.
#pragma once

#include <utility>

#include "nn/optim/adam.h"

namespace kiln::nn::optim {

class AdamW : public Adam {
 public:
  // One group of `params`; the arguments in torch.optim.AdamW's order and with its defaults.
  explicit AdamW(const TensorList& params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
                 double eps = 1e-8, double weight_decay = 1e-2, bool amsgrad = false, bool maximize = false);
  // Groups carry their own lr and weight_decay (see decay_groups); options as Adam's.
  explicit AdamW(std::vector<ParamGroup> groups, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
                 bool amsgrad = false, bool maximize = false);
};

}  // namespace kiln::nn::optim
