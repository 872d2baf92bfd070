// Trains an MLP (784-256-10, ReLU) on Fashion-MNIST with hand-written Adam, prints held-out (t10k)
// accuracy after each epoch and writes OUT/metrics.jsonl. It uses only core ops (linear, relu,
// cross_entropy), no nn modules or optimizers. Shuffling is a seeded std::shuffle on the host, so
// runs are reproducible with one standard library.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/idx.h"
#include "examples/common.h"
#include "examples/run_record.h"

using namespace kiln;
namespace fs = std::filesystem;
using examples::Clock;
using examples::seconds_since;

namespace {

struct Options {
  std::string data_dir = data::kFashionMnistDefaultDir;
  std::string out = "train_fashion_mnist_out";
  int epochs = 5;
  int64_t batch_size = 128;
  double lr = 1e-3;
  int64_t hidden = 256;
  std::optional<int64_t> train_limit;   // unset: all 60,000 training images
  std::optional<double> min_accuracy;   // set: exit status 1 when the final accuracy is below it
  uint64_t seed = 0;
};

Options parse_options(int argc, char** argv) {
  using examples::whole, examples::real;
  Options o;
  examples::Flags app(
      "Trains a 784-HIDDEN-10 ReLU MLP on Fashion-MNIST with hand-written Adam (core ops only) on the CPU,\n"
      "printing the held-out (t10k) accuracy after every epoch; writes OUT/metrics.jsonl.",
      "train_fashion_mnist");
  app.add_option("--data", o.data_dir, "folder with Fashion-MNIST's four .gz files");
  app.add_option("--out", o.out, "folder for metrics.jsonl (created)");
  app.add_option("--epochs", o.epochs, "passes over the training images")->transform(whole<int>(1));
  app.add_option("--batch-size", o.batch_size, "images per step")->transform(whole<int64_t>(1));
  app.add_option("--lr", o.lr, "Adam's learning rate")->transform(real(0, INFINITY, examples::Ends::open_low));
  app.add_option("--hidden", o.hidden, "hidden units")->transform(whole<int64_t>(1));
  app.add_option("--train-limit", o.train_limit, "train on the first N training images")
      ->transform(whole<int64_t>(1))
      ->default_str("all 60000");
  app.add_option("--min-accuracy", o.min_accuracy, "exit with status 1 when the final accuracy is below A")
      ->transform(real(0, 1))
      ->default_str("none");
  app.add_option("--seed", o.seed, "seed of the initial weights and the shuffling")->transform(whole<uint64_t>());
  app.parse(argc, argv);
  return o;
}

struct Data {
  Tensor x_train, y_train, x_test, y_test;  // images flattened to 784 and normalized
};

Data load_data(const Options& opt) {
  data::FashionMnist train, test;
  try {
    train = data::load_fashion_mnist(opt.data_dir, "train");
    test = data::load_fashion_mnist(opt.data_dir, "t10k");
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  Data d{train.images.reshape({-1, 784}), train.labels, Tensor(), test.labels};
  if (opt.train_limit && *opt.train_limit < d.x_train.size(0)) {
    d.x_train = d.x_train.narrow(0, 0, *opt.train_limit);
    d.y_train = d.y_train.narrow(0, 0, *opt.train_limit);
  }
  // Normalize with the training images' own statistics.
  const double mu = mean(d.x_train).item<double>();
  const double sd = std::sqrt(var(d.x_train).item<double>());
  d.x_train = (d.x_train - mu) / sd;
  d.x_test = (test.images.reshape({-1, 784}) - mu) / sd;
  return d;
}

Tensor kaiming_uniform(int64_t out, int64_t in) {
  double bound = std::sqrt(6.0 / static_cast<double>(in));
  return (rand({out, in}) * (2 * bound) - bound).set_requires_grad(true);
}

struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(int64_t hidden)  // draws w1 then w2 from the generator
      : w1(kaiming_uniform(hidden, 784)),
        b1(zeros({hidden}).set_requires_grad(true)),
        w2(kaiming_uniform(10, hidden)),
        b2(zeros({10}).set_requires_grad(true)) {}
  Tensor operator()(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
  TensorList parameters() const { return {w1, b1, w2, b2}; }
};

// Hand-written Adam over a list of parameters.
struct Adam {
  TensorList params, m, v;
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 0;
  Adam(TensorList p, double lr_) : params(std::move(p)), lr(lr_) {
    for (const Tensor& t : params) {
      m.push_back(zeros_like(t));
      v.push_back(zeros_like(t));
    }
  }
  void zero_grad() {
    for (Tensor& p : params) p.set_grad(Tensor());
  }
  void update() {
    NoGradGuard no_grad;
    ++step;
    const double c1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double c2 = 1 - std::pow(beta2, static_cast<double>(step));
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& g = params[i].grad();
      m[i].mul_(beta1).add_(g, 1 - beta1);
      v[i].mul_(beta2).add_(g * g, 1 - beta2);
      params[i].sub_((m[i] / c1) / ((v[i] / c2).sqrt() + eps), lr);
    }
  }
};

// One pass over the training images in `order`; returns the mean batch loss.
double train_epoch(const Mlp& mlp, Adam& adam, const Data& d, const std::vector<int64_t>& order, int64_t batch_size) {
  const int64_t n = d.x_train.size(0);
  Tensor perm = tensor(order);
  double loss_sum = 0;
  int64_t batches = 0;
  for (int64_t start = 0; start < n; start += batch_size) {
    int64_t len = std::min(batch_size, n - start);
    Tensor idx = perm.narrow(0, start, len);
    Tensor loss = cross_entropy(mlp(index_select(d.x_train, 0, idx)), index_select(d.y_train, 0, idx));
    adam.zero_grad();
    loss.backward();
    adam.update();
    loss_sum += loss.item<double>();
    ++batches;
  }
  return loss_sum / static_cast<double>(batches);
}

double test_accuracy(const Mlp& mlp, const Data& d) {
  NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t start = 0; start < d.x_test.size(0); start += 1000) {
    int64_t len = std::min<int64_t>(1000, d.x_test.size(0) - start);
    Tensor pred = argmax(mlp(d.x_test.narrow(0, start, len)), 1);
    correct += sum(eq(pred, d.y_test.narrow(0, start, len))).item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(d.x_test.size(0));
}

examples::JsonLine settings(const Options& opt, int64_t train_images) {
  examples::JsonLine s;
  s.text("model", "mlp 784-" + std::to_string(opt.hidden) + "-10").integer("epochs", opt.epochs);
  s.integer("batch_size", opt.batch_size).text("optimizer", "adam").real("lr", opt.lr, "%g");
  return s.integer("train_images", train_images).unsigned_integer("seed", opt.seed);
}

}  // namespace

// The program; main() runs it under examples::run_main, which turns every failure into one line.
static int run(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  const Data d = load_data(opt);
  examples::make_out_dir(opt.out);
  const int64_t n = d.x_train.size(0);
  examples::MetricsFile metrics((fs::path(opt.out) / "metrics.jsonl").string(), std::nullopt);
  metrics.write(examples::run_record("train_fashion_mnist", argc, argv, Device::cpu(), "", settings(opt, n)));

  manual_seed(opt.seed);
  const Mlp mlp(opt.hidden);
  Adam adam(mlp.parameters(), opt.lr);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opt.seed);
  std::printf("Fashion-MNIST MLP 784-%lld-10: %lld training images, %d epochs, batch %lld, Adam lr %g\n",
              static_cast<long long>(opt.hidden), static_cast<long long>(n), opt.epochs,
              static_cast<long long>(opt.batch_size), opt.lr);

  const auto t_start = Clock::now();
  double accuracy = 0, best = 0, train_seconds = 0;
  int best_epoch = 0;
  for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto t_epoch = Clock::now();
    std::shuffle(order.begin(), order.end(), rng);
    const double loss = train_epoch(mlp, adam, d, order, opt.batch_size);
    examples::check_finite_loss(loss, "epoch " + std::to_string(epoch));
    const double secs_training = seconds_since(t_epoch);
    accuracy = test_accuracy(mlp, d);
    const double secs = seconds_since(t_epoch);
    train_seconds += secs_training;
    if (accuracy > best) {
      best = accuracy;
      best_epoch = epoch;
    }
    const double ips = static_cast<double>(n) / secs_training;
    std::printf("epoch %d  train loss %.4f  test accuracy %.4f  (%.1f s, %.1f s evaluating, %.0f images/s)\n", epoch,
                loss, accuracy, secs, secs - secs_training, ips);
    std::fflush(stdout);
    metrics.write(examples::JsonLine()
                      .text("record", "epoch")
                      .integer("epoch", epoch)
                      .real("train_loss", loss, "%.9g")
                      .real("test_accuracy", accuracy, "%.4f")
                      .real("images_per_s", ips, "%.1f")
                      .real("seconds", secs, "%.2f"));
  }
  const double total = seconds_since(t_start);
  std::printf("held-out (t10k) accuracy %.4f after %d epochs in %.1f s\n", accuracy, opt.epochs, total);
  examples::JsonLine summary;
  summary.text("record", "summary").boolean("finished", true).integer("epochs", opt.epochs);
  summary.real("final_test_accuracy", accuracy, "%.4f").real("best_test_accuracy", best, "%.4f");
  summary.integer("best_epoch", best_epoch).integer("test_images", d.x_test.size(0)).integer("images", n * opt.epochs);
  summary.real("images_per_s", static_cast<double>(n) * opt.epochs / train_seconds, "%.1f");
  summary.real("train_seconds", train_seconds, "%.2f").real("wall_seconds", total, "%.2f");
  metrics.write(examples::add_host_usage(summary));
  if (opt.min_accuracy && accuracy < *opt.min_accuracy) {
    std::printf("FAIL: accuracy %.4f is below --min-accuracy %.4f\n", accuracy, *opt.min_accuracy);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return kiln::examples::run_main("train_fashion_mnist", [&] { return run(argc, argv); });
}
