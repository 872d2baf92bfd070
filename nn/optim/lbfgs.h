// L-BFGS (torch.optim.LBFGS): a quasi-Newton method that keeps the last `history_size` steps and
// gradient changes and turns each gradient into a direction through them (the two-loop
// recursion), an approximation of the inverse Hessian's product with it. step(closure)
// re-evaluates the loss as often as it needs (max_iter iterations, max_eval evaluations), with a
// fixed step or a strong Wolfe line search. Unlike the other optimizers it reads values on the host
// every iteration (the loss, dot products, convergence tests): it suits full-batch problems of a
// few million parameters or fewer (curve fitting, style transfer, physics-informed losses), not
// minibatch training. The parameters, all of one dtype and device, are read as one flat vector.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim/optimizer.h"

namespace kiln::nn::optim {

enum class LineSearch : uint8_t { None, StrongWolfe };

class LBFGS : public Optimizer {
 public:
  // torch.optim.LBFGS's arguments and defaults; max_eval < 0 stands for max_iter * 5 / 4.
  explicit LBFGS(const TensorList& params, double lr = 1.0, int64_t max_iter = 20, int64_t max_eval = -1,
                 double tolerance_grad = 1e-7, double tolerance_change = 1e-9, int64_t history_size = 100,
                 LineSearch line_search = LineSearch::None);

  // Clears the gradients, computes the loss, runs backward and returns the loss (one element).
  using Closure = std::function<Tensor()>;
  // Up to max_iter iterations of L-BFGS from the parameters' values; returns the loss of the first
  // evaluation, as torch's step does. It stops early when the largest gradient element is at most
  // tolerance_grad, or a step, or the change in the loss, is below tolerance_change. The history
  // carries over to the next call.
  Tensor step(const Closure& closure);
  // A kiln::Error: L-BFGS evaluates the loss several times per step and needs the closure.
  void step() override;

  std::vector<std::string> option_names() const override { return {}; }
  // None per parameter: the state is of the flat vector (state_dict's "lbfgs." keys).
  std::vector<std::string> state_names() const override { return {}; }
  // The base's keys plus the flat state: "lbfgs.d" and "lbfgs.prev_flat_grad" (the last direction
  // and gradient, in the parameters' dtype and device), "lbfgs.old_dirs" and "lbfgs.old_stps"
  // ([k, n]: the gradient changes y and steps s kept), "lbfgs.ro" (1 / y.s, float64), and float64
  // or int64 0-d CPU scalars "lbfgs.t", "lbfgs.H_diag", "lbfgs.prev_loss", "lbfgs.n_iter" and
  // "lbfgs.func_evals". Before the first step the flat tensors are absent.
  std::map<std::string, Tensor> state_dict() const override;
  // Restores a state_dict of an LBFGS over parameters of the same sizes; a missing or misshapen
  // key is a kiln::Error naming it, and nothing changes.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  // Iterations and loss evaluations over all steps so far (torch's state["n_iter"], "func_evals").
  int64_t iterations() const { return n_iter_; }
  int64_t evaluations() const { return func_evals_; }

 private:
  struct Point {  // the loss and flat gradient at the parameters x0 + t d
    double loss = 0;
    Tensor grad;
    double slope = 0;  // grad . d
  };
  Tensor flat_grad() const;
  Tensor flat_params() const;
  void set_params(const Tensor& x0, double t, const Tensor& d);
  // The closure's loss, checked, with gradients on; and as a float64.
  static Tensor call(const Closure& closure);
  static double evaluate(const Closure& closure);
  Point evaluate_at(const Closure& closure, const Tensor& x0, double t, const Tensor& d);
  // The strong Wolfe line search from t along d: the accepted step and its point, and the
  // evaluations it made.
  std::pair<double, Point> strong_wolfe(const Closure& closure, const Tensor& x0, double t, const Tensor& d,
                                        const Point& start, int64_t& evals);
  Tensor direction(const Tensor& grad);

  int64_t max_iter_, max_eval_, history_size_;
  double tolerance_grad_, tolerance_change_;
  LineSearch line_search_;
  int64_t numel_ = 0;

  // The state carried between steps (torch's state of the first parameter).
  Tensor d_, prev_flat_grad_;
  std::deque<Tensor> old_dirs_, old_stps_;
  std::deque<double> ro_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  int64_t n_iter_ = 0, func_evals_ = 0;
};

}  // namespace kiln::nn::optim
