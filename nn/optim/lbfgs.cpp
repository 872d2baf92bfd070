// L-BFGS's step (Nocedal and Wright, "Numerical Optimization", algorithms 7.4 and 7.5) and the
// strong Wolfe line search (their algorithms 3.5 and 3.6, trial steps from cubic interpolation),
// with torch.optim.LBFGS's step-size rule, stopping tests and state, so a problem set up for one
// runs the same iterations in the other up to rounding. Vectors are the parameters read as one
// flat tensor; scalars (losses, dot products) are read on the host in float64.
#include "nn/optim/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/autograd.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "nn/convert_parameters.h"

namespace kiln::nn::optim {
namespace {

double dot_value(const Tensor& a, const Tensor& b) {
  return sum(mul(a.to(DType::Float64), b.to(DType::Float64))).item<double>();
}
double max_abs(const Tensor& a) { return a.numel() == 0 ? 0.0 : amax(abs(a), {}).to(DType::Float64).item<double>(); }

// The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to
// [lo, hi]; the middle of [lo, hi] where the cubic has no minimum (eq. 3.59).
double cubic_minimum(double x1, double f1, double g1, double x2, double f2, double g2, double lo, double hi) {
  const double d1 = g1 + g2 - 3.0 * (f1 - f2) / (x1 - x2);
  const double disc = d1 * d1 - g1 * g2;
  if (!(disc >= 0.0)) return (lo + hi) / 2.0;
  const double d2 = std::copysign(std::sqrt(disc), x2 - x1);
  const double x = x2 - (x2 - x1) * (g2 + d2 - d1) / (g2 - g1 + 2.0 * d2);
  if (!std::isfinite(x)) return (lo + hi) / 2.0;
  return std::clamp(x, lo, hi);
}

std::string num(double v) { return std::to_string(v); }

}  // namespace

LBFGS::LBFGS(const TensorList& params, double lr, int64_t max_iter, int64_t max_eval, double tolerance_grad,
             double tolerance_change, int64_t history_size, LineSearch line_search)
    : Optimizer(one_group(params, lr, 0.0)),
      max_iter_(max_iter),
      max_eval_(max_eval < 0 ? max_iter * 5 / 4 : max_eval),
      history_size_(history_size),
      tolerance_grad_(tolerance_grad),
      tolerance_change_(tolerance_change),
      line_search_(line_search) {
  if (!(lr > 0.0)) throw Error("LBFGS: lr must be positive, got " + num(lr));
  if (max_iter < 1) throw Error("LBFGS: max_iter must be at least 1, got " + std::to_string(max_iter));
  if (max_eval_ < 1) throw Error("LBFGS: max_eval must be at least 1, got " + std::to_string(max_eval_));
  if (history_size < 1) throw Error("LBFGS: history_size must be at least 1, got " + std::to_string(history_size));
  if (!(tolerance_grad >= 0.0) || !(tolerance_change >= 0.0)) {
    throw Error("LBFGS: tolerance_grad and tolerance_change must be non-negative, got " + num(tolerance_grad) +
                " and " + num(tolerance_change));
  }
  const TensorList& ps = groups_[0].params;
  for (const Tensor& p : ps) {
    if (p.dtype() != ps[0].dtype() || p.device() != ps[0].device()) {
      throw Error("LBFGS: every parameter must have one dtype and device (read as one vector); got " +
                  std::string(dtype_name(ps[0].dtype())) + " on " + ps[0].device().str() + " and " +
                  dtype_name(p.dtype()) + " on " + p.device().str());
    }
    numel_ += p.numel();
  }
}

void LBFGS::step() {
  throw Error("LBFGS: step() needs a closure that computes the loss and its gradients (step(closure))");
}

Tensor LBFGS::flat_grad() const {
  TensorList parts;
  for (const Tensor& p : groups_[0].params) {
    const Tensor& g = p.grad();
    parts.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, TensorOptions(p.dtype(), p.device())));
  }
  return cat(parts, 0);
}

Tensor LBFGS::flat_params() const {
  NoGradGuard no_grad;
  return parameters_to_vector(groups_[0].params);
}

void LBFGS::set_params(const Tensor& x0, double t, const Tensor& d) {
  vector_to_parameters(add(x0, d, t), groups_[0].params);
}

Tensor LBFGS::call(const Closure& closure) {
  Tensor loss;
  {
    EnableGradGuard grad_on;  // step() runs without gradients; the closure needs them
    loss = closure();
  }
  if (!loss.defined() || loss.numel() != 1) {
    throw Error("LBFGS: the closure must return the loss as a one-element tensor, got " +
                (loss.defined() ? shape_str(loss.sizes()) : std::string("an undefined tensor")));
  }
  return loss;
}

double LBFGS::evaluate(const Closure& closure) { return call(closure).detach().to(DType::Float64).item<double>(); }

LBFGS::Point LBFGS::evaluate_at(const Closure& closure, const Tensor& x0, double t, const Tensor& d) {
  set_params(x0, t, d);
  Point p;
  p.loss = evaluate(closure);
  p.grad = flat_grad();
  p.slope = dot_value(p.grad, d);
  return p;
}

std::pair<double, LBFGS::Point> LBFGS::strong_wolfe(const Closure& closure, const Tensor& x0, double t, const Tensor& d,
                                                    const Point& start, int64_t& evals) {
  constexpr double c1 = 1e-4, c2 = 0.9;
  constexpr int max_tries = 25;
  const double d_norm = max_abs(d);
  const auto sufficient_decrease = [&](double step, const Point& p) {
    return p.loss <= start.loss + c1 * step * start.slope;
  };
  const auto curvature = [&](const Point& p) { return std::abs(p.slope) <= -c2 * start.slope; };

  // Bracketing: grow the step until an interval [lo, hi] surely holds an acceptable one.
  Point cur = evaluate_at(closure, x0, t, d), prev = start;
  double t_prev = 0.0;
  ++evals;
  int tries = 0;
  double lo_t = 0, hi_t = 0;
  Point lo, hi;
  bool bracketed = false;
  while (tries < max_tries) {
    if (!sufficient_decrease(t, cur) || (tries > 1 && cur.loss >= prev.loss)) {
      lo_t = t_prev, lo = prev, hi_t = t, hi = cur;
      bracketed = true;
      break;
    }
    if (curvature(cur)) return {t, cur};
    if (cur.slope >= 0) {
      lo_t = t, lo = cur, hi_t = t_prev, hi = prev;
      bracketed = true;
      break;
    }
    // Still descending at t: extrapolate, between a little past t and ten times t.
    const double next =
        cubic_minimum(t_prev, prev.loss, prev.slope, t, cur.loss, cur.slope, t + 0.01 * (t - t_prev), 10.0 * t);
    t_prev = t, prev = cur, t = next;
    cur = evaluate_at(closure, x0, t, d);
    ++evals;
    ++tries;
  }
  if (!bracketed) return {t, cur};  // out of tries while still descending: take the last step

  // Zoom: shrink [lo, hi] (lo the end with the lower loss) until a step meets both conditions.
  bool no_progress = false;
  while (tries < max_tries) {
    const double a = std::min(lo_t, hi_t), b = std::max(lo_t, hi_t);
    if ((b - a) * d_norm < tolerance_change_) break;
    double trial = cubic_minimum(lo_t, lo.loss, lo.slope, hi_t, hi.loss, hi.slope, a, b);
    // A trial within 10% of an end makes little progress; twice in a row, move it inside.
    const double margin = 0.1 * (b - a);
    if (std::min(b - trial, trial - a) < margin) {
      if (no_progress || trial >= b || trial <= a) {
        trial = std::abs(trial - b) < std::abs(trial - a) ? b - margin : a + margin;
        no_progress = false;
      } else {
        no_progress = true;
      }
    } else {
      no_progress = false;
    }
    const Point p = evaluate_at(closure, x0, trial, d);
    ++evals;
    ++tries;
    if (!sufficient_decrease(trial, p) || p.loss >= lo.loss) {
      hi_t = trial, hi = p;
    } else {
      if (curvature(p)) return {trial, p};
      if (p.slope * (hi_t - lo_t) >= 0) hi_t = lo_t, hi = lo;
      lo_t = trial, lo = p;
    }
  }
  return {lo_t, lo};
}

// The quasi-Newton direction -H grad, H the inverse Hessian approximation of the kept pairs
// scaled by h_diag (the two-loop recursion, algorithm 7.4).
Tensor LBFGS::direction(const Tensor& grad) {
  const size_t k = old_dirs_.size();
  std::vector<double> alpha(k);
  Tensor q = neg(grad);
  for (size_t i = k; i-- > 0;) {
    alpha[i] = dot_value(old_stps_[i], q) * ro_[i];
    q = sub(q, old_dirs_[i], alpha[i]);
  }
  Tensor r = mul(q, h_diag_);
  for (size_t i = 0; i < k; ++i) {
    const double beta = dot_value(old_dirs_[i], r) * ro_[i];
    r = add(r, old_stps_[i], alpha[i] - beta);
  }
  return r;
}

Tensor LBFGS::step(const Closure& closure) {
  if (!closure) throw Error("LBFGS: step(closure) got an empty closure");
  if (found_inf().defined() || grad_scale().defined()) {
    throw Error(
        "LBFGS: loss scaling (a GradScaler's set_grad_scaling) is not supported: its line search and "
        "convergence tests read the loss and gradients as they are");
  }
  NoGradGuard no_grad;  // the updates; each call of the closure turns gradients on for itself
  const double lr = this->lr(0);
  const Tensor orig_loss = call(closure);
  double loss = orig_loss.detach().to(DType::Float64).item<double>();
  ++func_evals_;
  int64_t evals = 1;
  Tensor grad = flat_grad();
  count_step();
  if (max_abs(grad) <= tolerance_grad_) return orig_loss;
  for (int64_t iter = 1; iter <= max_iter_; ++iter) {
    ++n_iter_;
    if (n_iter_ == 1) {
      d_ = neg(grad);
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      h_diag_ = 1.0;
    } else {
      // The newest pair: y the change in gradient, s the step. Kept only where y.s > 0, so the
      // approximation stays positive definite.
      const Tensor y = sub(grad, prev_flat_grad_), s = mul(d_, t_);
      const double ys = dot_value(y, s);
      if (ys > 1e-10) {
        if (static_cast<int64_t>(old_dirs_.size()) == history_size_) {
          old_dirs_.pop_front(), old_stps_.pop_front(), ro_.pop_front();
        }
        old_dirs_.push_back(y), old_stps_.push_back(s), ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot_value(y, y);
      }
      d_ = direction(grad);
    }
    prev_flat_grad_ = grad.clone();
    prev_loss_ = loss;
    // The first step ever is scaled down by the gradient's size; later ones take lr.
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / sum(abs(grad)).to(DType::Float64).item<double>()) * lr : lr;
    const double slope = dot_value(grad, d_);
    if (slope > -tolerance_change_) break;  // not a descent direction any more

    int64_t ls_evals = 0;
    if (line_search_ == LineSearch::StrongWolfe) {
      const Tensor x0 = flat_params();
      Point start{loss, grad, slope};
      auto [t, p] = strong_wolfe(closure, x0, t_, d_, start, ls_evals);
      t_ = t;
      set_params(x0, t_, d_);
      loss = p.loss;
      grad = p.grad;
    } else {
      set_params(flat_params(), t_, d_);
      if (iter != max_iter_) {  // the last iteration's loss is left to the next step
        loss = evaluate(closure);
        grad = flat_grad();
        ls_evals = 1;
      }
    }
    evals += ls_evals;
    func_evals_ += ls_evals;

    if (iter == max_iter_ || evals >= max_eval_) break;
    if (max_abs(grad) <= tolerance_grad_) break;
    if (max_abs(d_) * std::abs(t_) <= tolerance_change_) break;
    if (std::abs(loss - prev_loss_) < tolerance_change_) break;
  }
  return orig_loss;
}

std::map<std::string, Tensor> LBFGS::state_dict() const {
  std::map<std::string, Tensor> s = Optimizer::state_dict();
  const TensorOptions host(DType::Float64, Device::cpu());
  s["lbfgs.t"] = full({}, t_, host);
  s["lbfgs.H_diag"] = full({}, h_diag_, host);
  s["lbfgs.prev_loss"] = full({}, prev_loss_, host);
  s["lbfgs.n_iter"] = full({}, n_iter_, TensorOptions(DType::Int64, Device::cpu()));
  s["lbfgs.func_evals"] = full({}, func_evals_, TensorOptions(DType::Int64, Device::cpu()));
  if (d_.defined()) {
    s["lbfgs.d"] = d_.clone();
    s["lbfgs.prev_flat_grad"] = prev_flat_grad_.clone();
    const TensorOptions flat(d_.dtype(), d_.device());
    s["lbfgs.old_dirs"] = old_dirs_.empty() ? zeros({0, numel_}, flat) : stack({old_dirs_.begin(), old_dirs_.end()});
    s["lbfgs.old_stps"] = old_stps_.empty() ? zeros({0, numel_}, flat) : stack({old_stps_.begin(), old_stps_.end()});
    s["lbfgs.ro"] = tensor(std::vector<double>(ro_.begin(), ro_.end()), {static_cast<int64_t>(ro_.size())}, host);
  }
  return s;
}

void LBFGS::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> base, mine;
  for (const auto& [key, value] : state) (key.rfind("lbfgs.", 0) == 0 ? mine : base)[key] = value;
  const auto get = [&](const std::string& key, const Shape& shape) {
    const auto it = mine.find(key);
    if (it == mine.end()) throw Error("LBFGS::load_state_dict: the state has no \"" + key + "\"");
    if (it->second.sizes() != shape) {
      throw Error("LBFGS::load_state_dict: \"" + key + "\" has shape " + shape_str(it->second.sizes()) + ", expected " +
                  shape_str(shape));
    }
    return it->second;
  };
  const double t = get("lbfgs.t", {}).to(DType::Float64).item<double>();
  const double h_diag = get("lbfgs.H_diag", {}).to(DType::Float64).item<double>();
  const double prev_loss = get("lbfgs.prev_loss", {}).to(DType::Float64).item<double>();
  const int64_t n_iter = get("lbfgs.n_iter", {}).to(DType::Int64).item<int64_t>();
  const int64_t func_evals = get("lbfgs.func_evals", {}).to(DType::Int64).item<int64_t>();
  Tensor d, prev_grad;
  std::deque<Tensor> dirs, stps;
  std::deque<double> ro;
  if (mine.count("lbfgs.d") > 0) {
    const TensorOptions flat(groups_[0].params[0].dtype(), groups_[0].params[0].device());
    d = get("lbfgs.d", {numel_}).to(flat.device, flat.dtype).clone();
    prev_grad = get("lbfgs.prev_flat_grad", {numel_}).to(flat.device, flat.dtype).clone();
    const auto ro_it = mine.find("lbfgs.ro");
    const int64_t k = ro_it == mine.end() || ro_it->second.dim() != 1 ? -1 : ro_it->second.numel();
    if (k < 0 || k > history_size_) {
      throw Error("LBFGS::load_state_dict: \"lbfgs.ro\" must be 1-d with at most history_size " +
                  std::to_string(history_size_) + " values, got " +
                  (ro_it == mine.end() ? std::string("none") : shape_str(ro_it->second.sizes())));
    }
    const Tensor r = ro_it->second;
    const Tensor y = get("lbfgs.old_dirs", {k, numel_}).to(flat.device, flat.dtype);
    const Tensor s = get("lbfgs.old_stps", {k, numel_}).to(flat.device, flat.dtype);
    const std::vector<double> rv = r.to_vector<double>();
    for (int64_t i = 0; i < k; ++i) {
      dirs.push_back(y[i].clone()), stps.push_back(s[i].clone());
      ro.push_back(rv[static_cast<size_t>(i)]);
    }
  } else if (n_iter > 0) {
    throw Error("LBFGS::load_state_dict: the state has n_iter " + std::to_string(n_iter) +
                " but no \"lbfgs.d\" (its flat tensors)");
  }
  Optimizer::load_state_dict(base);  // checks the rest before anything of this one changes
  t_ = t, h_diag_ = h_diag, prev_loss_ = prev_loss, n_iter_ = n_iter, func_evals_ = func_evals;
  d_ = d, prev_flat_grad_ = prev_grad;
  old_dirs_ = std::move(dirs), old_stps_ = std::move(stps), ro_ = std::move(ro);
}

}  // namespace kiln::nn::optim
