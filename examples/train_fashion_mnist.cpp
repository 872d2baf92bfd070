// Trains an MLP (784-256-10, ReLU) on Fashion-MNIST with hand-written Adam and prints held-out
// (t10k) accuracy after each epoch. It uses only core ops (linear, relu, cross_entropy), no nn
// modules or optimizers, to show what those are built from. Shuffling is a seeded Fisher-Yates on
// the host, so runs are reproducible.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "data/idx.h"
#include "examples/common.h"

using namespace kiln;

namespace {

struct Options {
  std::string data_dir = data::kFashionMnistDefaultDir;
  int epochs = 5;
  int64_t batch_size = 128;
  double lr = 1e-3;
  int64_t hidden = 256;
  int64_t train_limit = 0;  // 0: all 60,000 training images
  double min_accuracy = 0;  // exit status 1 when the final accuracy is below this
  uint64_t seed = 0;
};

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--data DIR] [--epochs N] [--batch-size N] [--lr LR] [--hidden N] [--train-limit N]\n"
               "          [--min-accuracy A] [--seed S]\n",
               prog);
}

Options parse(int argc, char** argv) {
  Options o;
  examples::CommandLine cl(argc, argv, usage);
  while (cl.next()) {
    if (cl.is("--data")) o.data_dir = cl.text();
    else if (cl.is("--epochs")) o.epochs = static_cast<int>(cl.integer());
    else if (cl.is("--batch-size")) o.batch_size = cl.integer();
    else if (cl.is("--lr")) o.lr = cl.real();
    else if (cl.is("--hidden")) o.hidden = cl.integer();
    else if (cl.is("--train-limit")) o.train_limit = cl.integer();
    else if (cl.is("--min-accuracy")) o.min_accuracy = cl.real();
    else if (cl.is("--seed")) o.seed = cl.unsigned_integer();
    else cl.unknown();
  }
  return o;
}

// Hand-written Adam over a list of parameters (nn::optim::AdamW is the library's version).
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

Tensor kaiming_uniform(int64_t out, int64_t in) {
  double bound = std::sqrt(6.0 / static_cast<double>(in));
  return (rand({out, in}) * (2 * bound) - bound).set_requires_grad(true);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  data::FashionMnist train, test;
  try {
    train = data::load_fashion_mnist(opt.data_dir, "train");
    test = data::load_fashion_mnist(opt.data_dir, "t10k");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  Tensor x_train = train.images.reshape({-1, 784});
  Tensor y_train = train.labels;
  if (opt.train_limit > 0 && opt.train_limit < x_train.size(0)) {
    x_train = x_train.narrow(0, 0, opt.train_limit);
    y_train = y_train.narrow(0, 0, opt.train_limit);
  }
  // Normalize with the training set's statistics.
  const double mu = mean(x_train).item<double>();
  const double sd = std::sqrt(var(x_train).item<double>());
  x_train = (x_train - mu) / sd;
  Tensor x_test = (test.images.reshape({-1, 784}) - mu) / sd;

  manual_seed(opt.seed);
  Tensor w1 = kaiming_uniform(opt.hidden, 784), b1 = zeros({opt.hidden}).set_requires_grad(true);
  Tensor w2 = kaiming_uniform(10, opt.hidden), b2 = zeros({10}).set_requires_grad(true);
  auto forward = [&](const Tensor& x) { return linear(relu(linear(x, w1, b1)), w2, b2); };
  Adam adam({w1, b1, w2, b2}, opt.lr);

  const int64_t n = x_train.size(0);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(opt.seed);
  std::printf("Fashion-MNIST MLP 784-%lld-10: %lld training images, %d epochs, batch %lld, Adam lr %g\n",
              static_cast<long long>(opt.hidden), static_cast<long long>(n), opt.epochs,
              static_cast<long long>(opt.batch_size), opt.lr);
  double accuracy = 0;
  auto t_start = std::chrono::steady_clock::now();
  for (int epoch = 1; epoch <= opt.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    std::shuffle(order.begin(), order.end(), rng);
    Tensor perm = tensor(order);
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t start = 0; start < n; start += opt.batch_size) {
      int64_t len = std::min(opt.batch_size, n - start);
      Tensor idx = perm.narrow(0, start, len);
      Tensor xb = index_select(x_train, 0, idx), yb = index_select(y_train, 0, idx);
      Tensor loss = cross_entropy(forward(xb), yb);
      adam.zero_grad();
      loss.backward();
      adam.update();
      loss_sum += loss.item<double>();
      ++batches;
    }
    int64_t correct = 0;
    {
      NoGradGuard no_grad;
      for (int64_t start = 0; start < x_test.size(0); start += 1000) {
        int64_t len = std::min<int64_t>(1000, x_test.size(0) - start);
        Tensor pred = argmax(forward(x_test.narrow(0, start, len)), 1);
        correct += sum(eq(pred, test.labels.narrow(0, start, len))).item<int64_t>();
      }
    }
    accuracy = static_cast<double>(correct) / static_cast<double>(x_test.size(0));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("epoch %d  train loss %.4f  test accuracy %.4f  (%.1f s, %.0f images/s)\n", epoch,
                loss_sum / static_cast<double>(batches), accuracy, secs, static_cast<double>(n) / secs);
    std::fflush(stdout);
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("held-out (t10k) accuracy %.4f after %d epochs in %.1f s\n", accuracy, opt.epochs, total);
  return accuracy >= opt.min_accuracy ? 0 : 1;
}
