// Fits y = sin(2x) + 0.3x on [-2, 2] with a one-hidden-layer tanh network, by Adam steps written by
// hand on autograd's gradients: the smallest complete training loop kiln can run. The hidden layer
// is written with broadcasting (x is 1-d), so it needs no matmul. Metrics only with --out.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "examples/common.h"
#include "examples/run_record.h"

using namespace kiln;
namespace fs = std::filesystem;
using examples::Clock;
using examples::seconds_since;

namespace {

struct Options {
  int steps = 3000;
  double lr = 0.02;
  std::string out;  // "": no metrics file
};

Options parse_options(int argc, char** argv) {
  Options o;
  examples::Flags app(
      "Fits y = sin(2x) + 0.3x on [-2, 2] with 32 tanh units and hand-written Adam on the CPU; exits 1 unless\n"
      "the final mean squared error is below 0.01.",
      "fit_function");
  app.add_option("--steps", o.steps, "optimizer steps")->transform(examples::whole<int>(1));
  app.add_option("--lr", o.lr, "Adam's learning rate")
      ->transform(examples::real(0, INFINITY, examples::Ends::open_low));
  app.add_option("--out", o.out, "folder for metrics.jsonl (created)")->type_name("DIR")->default_str("none");
  app.parse(argc, argv);
  return o;
}

// h = tanh(x * w1 + b1) over the hidden units, out = sum(h * w2) + b2.
struct Net {
  Tensor w1, b1, w2, b2;
  explicit Net(int64_t hidden)  // draws w1, b1, w2 from the generator, in that order
      : w1((randn({hidden}) * 1.5).set_requires_grad(true)),
        b1((randn({hidden}) * 0.5).set_requires_grad(true)),
        w2((randn({hidden}) * (1.0 / std::sqrt(static_cast<double>(hidden)))).set_requires_grad(true)),
        b2(zeros({1}).set_requires_grad(true)) {}
  Tensor operator()(const Tensor& x) const {
    Tensor h = tanh(x.unsqueeze(1) * w1 + b1);  // [n, hidden]
    return sum(h * w2, {1}) + b2;              // [n]
  }
  TensorList parameters() const { return {w1, b1, w2, b2}; }
};

// Adam's moments kept by hand; the update runs without autograd.
struct Adam {
  TensorList params, m, v;
  double lr;
  Adam(TensorList p, double lr_) : params(std::move(p)), lr(lr_) {
    for (const Tensor& t : params) {
      m.push_back(zeros_like(t));
      v.push_back(zeros_like(t));
    }
  }
  void zero_grad() {
    for (Tensor& p : params) p.set_grad(Tensor());  // set to none
  }
  void update(int step) {
    NoGradGuard no_grad;
    const double b1c = 1 - std::pow(0.9, step), b2c = 1 - std::pow(0.999, step);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& g = params[i].grad();
      m[i].mul_(0.9).add_(g, 0.1);
      v[i].mul_(0.999).add_(g * g, 0.001);
      params[i].sub_((m[i] / b1c) / ((v[i] / b2c).sqrt() + 1e-8), lr);
    }
  }
};

std::unique_ptr<examples::MetricsFile> open_metrics(const Options& opt, int argc, char** argv, int64_t hidden) {
  if (opt.out.empty()) return nullptr;
  examples::make_out_dir(opt.out);
  auto metrics = std::make_unique<examples::MetricsFile>((fs::path(opt.out) / "metrics.jsonl").string(), std::nullopt);
  examples::JsonLine settings;
  settings.text("model", "tanh " + std::to_string(hidden)).integer("steps", opt.steps).real("lr", opt.lr, "%g");
  metrics->write(examples::run_record("fit_function", argc, argv, Device::cpu(), "", settings));
  return metrics;
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  const int64_t n = 256, hidden = 32;
  auto metrics = open_metrics(opt, argc, argv, hidden);
  manual_seed(0);
  Tensor x = linspace(-2.0, 2.0, n);
  std::vector<float> target;
  for (float v : x.to_vector<float>()) target.push_back(std::sin(2.0f * v) + 0.3f * v);
  Tensor y = tensor(target);
  const Net net(hidden);
  Adam adam(net.parameters(), opt.lr);

  auto t0 = Clock::now();
  double loss_value = 0;
  for (int step = 1; step <= opt.steps; ++step) {
    Tensor loss = mean((net(x) - y).pow(2.0));
    adam.zero_grad();
    loss.backward();
    adam.update(step);
    if (step % 500 == 0 || step == 1 || step == opt.steps) {
      loss_value = loss.item<double>();
      examples::check_finite_loss(loss_value, "step " + std::to_string(step));
      std::printf("step %5d  loss %.6f\n", step, loss_value);
      if (metrics) {
        metrics->write(
            examples::JsonLine().text("record", "step").integer("step", step).real("loss", loss_value, "%.9g"));
      }
    }
  }
  const double secs = seconds_since(t0);
  std::printf("fit y = sin(2x) + 0.3x with %lld tanh units: final mse %.6f after %d steps (%.2f s, %.0f steps/s)\n",
              static_cast<long long>(hidden), loss_value, opt.steps, secs, opt.steps / secs);
  if (metrics) {
    examples::JsonLine summary;
    summary.text("record", "summary").boolean("finished", true).integer("steps", opt.steps);
    summary.real("final_mse", loss_value, "%.9g").real("steps_per_s", opt.steps / secs, "%.1f");
    summary.real("train_seconds", secs, "%.3f").real("wall_seconds", secs, "%.3f");
    metrics->write(examples::add_host_usage(summary));
  }
  return loss_value < 0.01 ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("fit_function", [&] { return run(argc, argv); });
}
