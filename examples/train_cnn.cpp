// Trains SmallCNN or a CIFAR-style ResNet on Fashion-MNIST with AdamW and a cosine schedule, writes
// metrics, checkpoints and the final model to --out, and resumes mid-epoch exactly. Non-obvious
// decision: every random choice is reproducible from saved integers (the epoch's permutation is a
// host Fisher-Yates seeded from (seed, epoch); augmentation and dropout draw from kiln's generator,
// which the checkpoint restores), so a resumed run matches an uninterrupted one bit for bit.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "examples/common.h"
#include "core/kiln.h"
#include "data/idx.h"
#include "nn/optim/adamw.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "nn/training_checkpoint.h"

using namespace kiln;
namespace fs = std::filesystem;
using examples::Clock;
using examples::format_duration;
using examples::Progress;
using examples::seconds_since;

namespace {

struct Options {
  std::string data_dir = data::kFashionMnistDefaultDir;
  std::string device;  // "" picks cuda when available
  std::string model = "small-cnn";
  std::string optimizer = "adamw";
  std::string out = "train_cnn_out";
  std::string resume;
  int epochs = 0;  // 0: the model's default
  int64_t batch_size = 128;
  double lr = -1;            // < 0: the optimizer's default
  double weight_decay = -1;  // < 0: the optimizer's default
  int augment = -1;          // -1: on for resnet, off for small-cnn
  int64_t train_limit = 0;   // 0: all 60,000 training images
  int64_t test_limit = 0;    // 0: all 10,000 held-out images
  double min_accuracy = 0;   // exit status 1 when the final accuracy is below this
  uint64_t seed = 0;
  int64_t stop_at_step = 0;  // > 0: checkpoint and exit after this global step (splits a run)
  double max_minutes = 0;    // > 0: checkpoint and exit once this much time has passed
};

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--data DIR] [--device cpu|cuda] [--model small-cnn|resnet] [--epochs N]\n"
               "          [--batch-size N] [--optimizer adamw|sgd] [--lr LR] [--weight-decay WD]\n"
               "          [--augment | --no-augment] [--out DIR] [--resume CHECKPOINT] [--train-limit N]\n"
               "          [--test-limit N] [--min-accuracy A] [--seed S] [--stop-at-step N] [--max-minutes M]\n"
               "defaults: small-cnn 5 epochs, resnet 30 epochs; AdamW lr 1e-3 wd 0.05, SGD (momentum 0.9,\n"
               "Nesterov) lr 0.05 wd 5e-4; cosine schedule to lr/100 over the whole run.\n",
               prog);
}

Options parse(int argc, char** argv) {
  Options o;
  examples::CommandLine cl(argc, argv, usage);
  while (cl.next()) {
    if (cl.is("--data")) o.data_dir = cl.text();
    else if (cl.is("--device")) o.device = cl.text();
    else if (cl.is("--model")) o.model = cl.text();
    else if (cl.is("--optimizer")) o.optimizer = cl.text();
    else if (cl.is("--out")) o.out = cl.text();
    else if (cl.is("--resume")) o.resume = cl.text();
    else if (cl.is("--epochs")) o.epochs = static_cast<int>(cl.integer());
    else if (cl.is("--batch-size")) o.batch_size = cl.integer();
    else if (cl.is("--lr")) o.lr = cl.real();
    else if (cl.is("--weight-decay")) o.weight_decay = cl.real();
    else if (cl.is("--augment")) o.augment = 1;
    else if (cl.is("--no-augment")) o.augment = 0;
    else if (cl.is("--train-limit")) o.train_limit = cl.integer();
    else if (cl.is("--test-limit")) o.test_limit = cl.integer();
    else if (cl.is("--min-accuracy")) o.min_accuracy = cl.real();
    else if (cl.is("--seed")) o.seed = cl.unsigned_integer();
    else if (cl.is("--stop-at-step")) o.stop_at_step = cl.integer();
    else if (cl.is("--max-minutes")) o.max_minutes = cl.real();
    else cl.unknown();
  }
  if (o.model != "small-cnn" && o.model != "resnet") {
    std::fprintf(stderr, "--model must be small-cnn or resnet, got %s\n", o.model.c_str());
    std::exit(2);
  }
  if (o.optimizer != "adamw" && o.optimizer != "sgd") {
    std::fprintf(stderr, "--optimizer must be adamw or sgd, got %s\n", o.optimizer.c_str());
    std::exit(2);
  }
  if (o.batch_size <= 0) {
    std::fprintf(stderr, "--batch-size must be positive\n");
    std::exit(2);
  }
  if (o.epochs == 0) o.epochs = o.model == "resnet" ? 30 : 5;
  if (o.epochs < 0) {
    std::fprintf(stderr, "--epochs must be positive\n");
    std::exit(2);
  }
  if (o.lr < 0) o.lr = o.optimizer == "adamw" ? 1e-3 : 0.05;
  if (o.weight_decay < 0) o.weight_decay = o.optimizer == "adamw" ? 0.05 : 5e-4;
  if (o.augment < 0) o.augment = o.model == "resnet" ? 1 : 0;
  return o;
}

// A permutation of [0, n) that depends only on (seed, epoch): Fisher-Yates with our own bounded
// draw (std::uniform_int_distribution and std::shuffle are implementation-defined, so they could
// differ between standard libraries).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(epoch),
                    0x5eedu};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // rejection keeps the draw unbiased
    uint64_t r;
    do r = rng();
    while (r >= limit);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r % bound)]);
  }
  return order;
}

// A random horizontal flip and a random crop of the image zero-padded by `pad` pixels, chosen per
// sample and applied as one gather on the device (no host round trip). x: [B, C, H, W].
Tensor augment(const Tensor& x, int64_t pad) {
  const int64_t b = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t hp = h + 2 * pad, wp = w + 2 * pad;
  const TensorOptions f(x.dtype(), x.device()), i64(DType::Int64, x.device());
  Tensor rows = zeros({b, c, pad, w}, f);
  Tensor padded = cat({rows, x, rows}, 2);
  Tensor cols = zeros({b, c, hp, pad}, f);
  padded = cat({cols, padded, cols}, 3).reshape({b, c, hp * wp});
  Tensor dy = randint(0, 2 * pad + 1, {b, 1, 1}, i64);
  Tensor dx = randint(0, 2 * pad + 1, {b, 1, 1}, i64);
  Tensor flip = randint(0, 2, {b, 1, 1}, i64);
  Tensor ys = arange(0, h, 1, i64).view({1, h, 1});
  Tensor xs = arange(0, w, 1, i64).view({1, 1, w});
  Tensor src_x = xs + flip * ((w - 1) - xs * 2) + dx;  // flipped column is w-1-x
  Tensor src = (ys + dy) * wp + src_x;                  // [B, H, W] into the padded image
  Tensor index = src.reshape({b, 1, h * w}).expand({b, c, h * w}).contiguous();
  return gather(padded, 2, index).view({b, c, h, w});
}

// Held-out accuracy: eval mode (BatchNorm running statistics, no dropout), no autograd.
int64_t count_correct(nn::UnaryModule& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  model.eval();
  Tensor correct = zeros({}, TensorOptions(DType::Int64, x.device()));
  const int64_t chunk = 500;
  for (int64_t start = 0; start < x.size(0); start += chunk) {
    const int64_t len = std::min(chunk, x.size(0) - start);
    Tensor pred = argmax(model(x.narrow(0, start, len)), 1);
    correct = correct + sum(eq(pred, y.narrow(0, start, len)));
  }
  model.train();
  return correct.item<int64_t>();
}

int64_t float_bits(float v) { return static_cast<int64_t>(std::bit_cast<uint32_t>(v)); }
float bits_float(int64_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b)); }

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  const std::optional<Device> chosen = examples::choose_device(opt.device);
  if (!chosen) return 2;
  const Device device = *chosen;

  data::FashionMnist train, test;
  try {
    train = data::load_fashion_mnist(opt.data_dir, "train");
    test = data::load_fashion_mnist(opt.data_dir, "t10k");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  Tensor x_train = train.images, y_train = train.labels;
  if (opt.train_limit > 0 && opt.train_limit < x_train.size(0)) {
    x_train = x_train.narrow(0, 0, opt.train_limit);
    y_train = y_train.narrow(0, 0, opt.train_limit);
  }
  // Fashion-MNIST's training-set mean and standard deviation; the whole set lives on the device,
  // so a batch is an index_select there, never a host copy.
  constexpr double kMean = 0.2860, kStd = 0.3530;
  x_train = ((x_train - kMean) / kStd).to(device);
  y_train = y_train.to(device);
  Tensor x_test = test.images, y_test = test.labels;
  if (opt.test_limit > 0 && opt.test_limit < x_test.size(0)) {
    x_test = x_test.narrow(0, 0, opt.test_limit);
    y_test = y_test.narrow(0, 0, opt.test_limit);
  }
  x_test = ((x_test - kMean) / kStd).to(device);
  y_test = y_test.to(device);
  const int64_t n = x_train.size(0);
  const int64_t batches_per_epoch = (n + opt.batch_size - 1) / opt.batch_size;
  const int64_t total_steps = batches_per_epoch * opt.epochs;

  manual_seed(opt.seed);
  std::shared_ptr<nn::UnaryModule> model;
  if (opt.model == "resnet") {
    nn::ResNetConfig cfg;
    cfg.in_channels = 1;
    model = std::make_shared<nn::ResNet>(cfg);
  } else {
    model = std::make_shared<nn::SmallCNN>();
  }
  model->to(device);
  model->train();

  std::unique_ptr<nn::optim::Optimizer> optimizer;
  auto groups = nn::optim::decay_groups(model->named_parameters(), opt.lr, opt.weight_decay);
  if (opt.optimizer == "adamw") {
    optimizer = std::make_unique<nn::optim::AdamW>(std::move(groups));
  } else {
    optimizer = std::make_unique<nn::optim::SGD>(std::move(groups), /*momentum=*/0.9, /*dampening=*/0.0,
                                                 /*nesterov=*/true);
  }
  // A short warmup: Adam's first steps move every weight by about lr, whatever its gradient's size.
  const int64_t warmup = std::min<int64_t>(100, total_steps / 20);
  nn::optim::WarmupCosine schedule(*optimizer, opt.lr, warmup, total_steps, opt.lr / 100);

  int64_t step = 0, start_epoch = 0, start_batch = 0;
  float first_loss = 0;
  Tensor loss_sum = zeros({}, TensorOptions(DType::Float32, device));  // this epoch's, on the device
  std::error_code ec;
  fs::create_directories(opt.out, ec);
  if (ec) {
    std::fprintf(stderr, "cannot create --out %s: %s\n", opt.out.c_str(), ec.message().c_str());
    return 2;
  }
  const std::string checkpoint_path = (fs::path(opt.out) / "checkpoint.safetensors").string();
  const std::string metrics_path = (fs::path(opt.out) / "metrics.jsonl").string();
  if (!opt.resume.empty()) {
    nn::TrainingState st;
    try {
      st = nn::load_checkpoint(opt.resume, *model, optimizer.get());
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
    auto& pos = st.data_position;
    if (pos["batch_size"] != opt.batch_size || pos["train_size"] != n) {
      std::fprintf(stderr, "--resume: the checkpoint was trained with batch size %lld on %lld images; got %lld on %lld\n",
                   static_cast<long long>(pos["batch_size"]), static_cast<long long>(pos["train_size"]),
                   static_cast<long long>(opt.batch_size), static_cast<long long>(n));
      return 2;
    }
    if (pos["epochs"] != opt.epochs) {
      std::printf("note: the checkpoint's run had %lld epochs, this one %d: the schedule changes\n",
                  static_cast<long long>(pos["epochs"]), opt.epochs);
    }
    opt.seed = static_cast<uint64_t>(pos["seed"]);  // the shuffling continues the saved run's
    step = st.step;
    start_epoch = pos["epoch"];
    start_batch = pos["batch"];
    first_loss = bits_float(pos["first_loss_bits"]);
    loss_sum.fill_(static_cast<double>(bits_float(pos["loss_sum_bits"])));
    schedule.set_step(step);
    std::printf("resumed from %s at epoch %lld, batch %lld (step %lld)\n", opt.resume.c_str(),
                static_cast<long long>(start_epoch + 1), static_cast<long long>(start_batch),
                static_cast<long long>(step));
  }
  // A fresh run starts a fresh metrics file; a resumed one appends to it.
  std::FILE* metrics = std::fopen(metrics_path.c_str(), opt.resume.empty() ? "w" : "a");
  if (!metrics) {
    std::fprintf(stderr, "cannot write %s\n", metrics_path.c_str());
    return 2;
  }

  auto save = [&](int64_t epoch, int64_t batch) {
    nn::TrainingState st;
    st.step = step;
    st.data_position = {{"epoch", epoch},
                        {"batch", batch},
                        {"seed", static_cast<int64_t>(opt.seed)},
                        {"batch_size", opt.batch_size},
                        {"train_size", n},
                        {"epochs", opt.epochs},
                        {"first_loss_bits", float_bits(first_loss)},
                        {"loss_sum_bits", float_bits(loss_sum.item<float>())}};
    nn::save_checkpoint(checkpoint_path, *model, optimizer.get(), st);
  };

  std::printf("%s on Fashion-MNIST (%s): %lld parameters, %lld training images, %d epochs, batch %lld, %s lr %g "
              "wd %g, augmentation %s\n",
              model->type_name().c_str(), device.str().c_str(), static_cast<long long>(model->num_parameters()),
              static_cast<long long>(n), opt.epochs, static_cast<long long>(opt.batch_size),
              opt.optimizer == "adamw" ? "AdamW" : "SGD", opt.lr, opt.weight_decay, opt.augment ? "on" : "off");
  std::fflush(stdout);

  const auto t_start = Clock::now();
  Progress progress;
  double accuracy = -1, last_train_loss = 0;
  int64_t images_this_run = 0, epochs_done = start_epoch;
  bool stop_after_epoch = false;
  for (int64_t epoch = start_epoch; epoch < opt.epochs; ++epoch) {
    const auto t_epoch = Clock::now();
    const int64_t first_batch = epoch == start_epoch ? start_batch : 0;
    if (first_batch == 0) loss_sum.zero_();
    Tensor perm = tensor(epoch_permutation(n, opt.seed, epoch)).to(device);
    int64_t images_this_epoch = 0;
    for (int64_t b = first_batch; b < batches_per_epoch; ++b) {
      const int64_t begin = b * opt.batch_size, len = std::min(opt.batch_size, n - begin);
      Tensor idx = perm.narrow(0, begin, len);
      Tensor xb = index_select(x_train, 0, idx), yb = index_select(y_train, 0, idx);
      if (opt.augment) xb = augment(xb, 2);
      Tensor loss = cross_entropy((*model)(xb), yb);
      optimizer->zero_grad();
      loss.backward();
      optimizer->step();
      schedule.step();
      ++step;
      loss_sum.add_(loss.detach());
      if (step == 1) first_loss = loss.item<float>();
      images_this_epoch += len;
      images_this_run += len;

      const bool stop = (opt.stop_at_step > 0 && step == opt.stop_at_step) ||
                        (opt.max_minutes > 0 && seconds_since(t_start) >= opt.max_minutes * 60);
      if (progress.due() || stop) {
        const double secs = seconds_since(t_start);
        const double ips = static_cast<double>(images_this_run) / secs;
        const double left = static_cast<double>(total_steps - step) * static_cast<double>(opt.batch_size) / ips;
        char line[256];
        std::snprintf(line, sizeof line, "epoch %lld/%d  batch %lld/%lld  loss %.4f  %.0f images/s  ETA %s",
                      static_cast<long long>(epoch + 1), opt.epochs, static_cast<long long>(b + 1),
                      static_cast<long long>(batches_per_epoch),
                      loss_sum.item<double>() / static_cast<double>(b + 1), ips, format_duration(left).c_str());
        progress.print(line);
      }
      if (stop && b + 1 < batches_per_epoch) {
        save(epoch, b + 1);
        progress.end_line();
        std::printf("stopped at step %lld (epoch %lld, batch %lld); continue with --resume %s\n",
                    static_cast<long long>(step), static_cast<long long>(epoch + 1), static_cast<long long>(b + 1),
                    checkpoint_path.c_str());
        return 0;
      }
      if (stop) stop_after_epoch = true;  // at an epoch's end: evaluate and save it, then stop
    }
    last_train_loss = loss_sum.item<double>() / static_cast<double>(batches_per_epoch);
    const double train_secs = seconds_since(t_epoch);  // the item() above waited for the device
    const double ips = static_cast<double>(images_this_epoch) / train_secs;
    const int64_t correct = count_correct(*model, x_test, y_test);
    accuracy = static_cast<double>(correct) / static_cast<double>(x_test.size(0));
    const double secs = seconds_since(t_epoch);
    progress.end_line();
    std::printf("epoch %lld/%d  train loss %.4f  test accuracy %.4f  %.1f s (%.1f s evaluating)  %.0f images/s"
                "  (total %s)\n",
                static_cast<long long>(epoch + 1), opt.epochs, last_train_loss, accuracy, secs, secs - train_secs, ips,
                format_duration(seconds_since(t_start)).c_str());
    // %.9g: a float32 loss round-trips, so the resume test can compare lines exactly.
    std::fprintf(metrics,
                 "{\"epoch\": %lld, \"step\": %lld, \"train_loss\": %.9g, \"test_accuracy\": %.4f, "
                 "\"images_per_s\": %.1f, \"seconds\": %.2f}\n",
                 static_cast<long long>(epoch + 1), static_cast<long long>(step), last_train_loss, accuracy, ips, secs);
    std::fflush(metrics);
    std::fflush(stdout);
    save(epoch + 1, 0);
    epochs_done = epoch + 1;
    if (stop_after_epoch) break;
  }
  std::fclose(metrics);
  if (accuracy < 0) {
    // A resume of a finished run: nothing was trained, but the accuracy is still worth stating.
    accuracy = static_cast<double>(count_correct(*model, x_test, y_test)) / static_cast<double>(x_test.size(0));
  }
  nn::save_safetensors((fs::path(opt.out) / "model.safetensors").string(), model->state_dict());
  if (step < total_steps) {
    std::printf("stopped after epoch %lld with test accuracy %.4f; continue with --resume %s\n",
                static_cast<long long>(epochs_done), accuracy, checkpoint_path.c_str());
    return 0;
  }
  std::printf("held-out (t10k) accuracy %.4f on %lld images after %d epochs (%lld steps) in %s\n", accuracy,
              static_cast<long long>(x_test.size(0)), opt.epochs, static_cast<long long>(step),
              format_duration(seconds_since(t_start)).c_str());
  int status = 0;
  if (opt.min_accuracy > 0 && accuracy < opt.min_accuracy) {
    std::printf("FAIL: accuracy %.4f is below --min-accuracy %.4f\n", accuracy, opt.min_accuracy);
    status = 1;
  }
  // The loss must have fallen: the last epoch's mean against the very first batch's loss.
  if (opt.min_accuracy > 0 && images_this_run > 0 && !(last_train_loss < 0.5 * first_loss)) {
    std::printf("FAIL: the training loss did not fall (first batch %.4f, last epoch %.4f)\n", first_loss,
                last_train_loss);
    status = 1;
  }
  return status;
}
