// Data-pipeline benchmark on a device (made for the GPU; runs on the CPU too, timing the CPU twin):
//   augment   the fused augmentation kernel (transforms::Compose::apply_batch, one draw per image)
//             on a batch of --batch uint8 images, two workloads:
//               cifar32     3x32x32: RandomCrop(32, padding 4), flip, Normalize
//               imagenet224 3x256x256 in: RandomResizedCrop(224), flip, ColorJitter(0.4, 0.4, 0.4),
//                           Normalize
//             median of --iters calls between CUDA events (steady clock on the CPU), after --warmup;
//             images/s at the median.
//   feed      a training step of SmallCNN (AdamW) on Fashion-MNIST batches of --feed-batch, fed two
//             ways: from device-resident uint8 images (an index_select per batch) and through the
//             DataLoader (--workers threads, pinned batches) and the DevicePrefetcher; both augment
//             on the device. Milliseconds per step over --steps steps after --warmup, host clock
//             around the whole loop with a synchronize at each end.
// tools/gpu_data_peer.py times torchvision's v2 transforms on the same workloads (per image, and
// per batch with one draw for the whole batch); tools/gpu_check.sh data runs both and
// tools/gpu_data_compare.py puts them side by side. Reports speed; never asserts it.
//   usage: bench_gpu_data [--device cuda|cpu] [--part augment|feed|all] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "data/datasets.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/transforms.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "nn/optim/adamw.h"
#include "nn/resnet.h"

using namespace kiln;
using examples::JsonLine;
namespace T = kiln::data::transforms;

namespace {

struct Options {
  std::string device, part = "all", json, data_dir = data::kFashionMnistDefaultDir;
  int64_t batch = 512, iters = 50, warmup = 10, feed_batch = 256, steps = 100, workers = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  examples::Flags app("Times the fused augmentation kernel and a training step fed by the DataLoader.",
                      "bench_gpu_data");
  app.add_option("--device", o.device, "cpu or cuda (default: cuda when available)");
  app.add_option("--part", o.part, "what to time")->one_of({"augment", "feed", "all"});
  app.add_option("--batch", o.batch, "images per augment call")->transform(examples::whole<int64_t>(1, 1 << 16));
  app.add_option("--iters", o.iters, "timed augment calls")->transform(examples::whole<int64_t>(1, 1 << 20));
  app.add_option("--warmup", o.warmup, "untimed calls or steps first")->transform(examples::whole<int64_t>(0, 1 << 20));
  app.add_option("--feed-batch", o.feed_batch, "training batch of the feed part")
      ->transform(examples::whole<int64_t>(1, 1 << 16));
  app.add_option("--steps", o.steps, "timed training steps per feed")->transform(examples::whole<int64_t>(1, 1 << 20));
  app.add_option("--workers", o.workers, "loader threads of the feed part")->transform(examples::whole<int64_t>(0, 64));
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST's folder");
  app.add_option("--json", o.json, "write the records (JSON lines) to this file");
  app.parse(argc, argv);
  return o;
}

struct Workload {
  const char* name;
  int64_t channels, height, width;
  T::Compose transform;
};

std::vector<Workload> workloads() {
  const std::vector<double> mean{0.485, 0.456, 0.406}, stdev{0.229, 0.224, 0.225};
  return {{"cifar32", 3, 32, 32, T::Compose({T::RandomCrop(32, 4), T::RandomHorizontalFlip(), T::Normalize(mean, stdev)})},
          {"imagenet224", 3, 256, 256,
           T::Compose({T::RandomResizedCrop(224), T::RandomHorizontalFlip(), T::ColorJitter(0.4, 0.4, 0.4),
                       T::Normalize(mean, stdev)})}};
}

// Milliseconds of each of `n` calls of `fn`, between events on the GPU or on the steady clock.
std::vector<double> time_calls(Device device, int64_t n, const std::function<void()>& fn) {
  std::vector<double> ms;
  if (device.is_cuda()) {
    std::vector<std::unique_ptr<cuda::Event>> a, b;
    for (int64_t i = 0; i < n; ++i) {
      a.push_back(std::make_unique<cuda::Event>(true));
      b.push_back(std::make_unique<cuda::Event>(true));
    }
    const Stream s = cuda::current_stream();
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)]->record(s);
      fn();
      b[static_cast<size_t>(i)]->record(s);
    }
    cuda::synchronize();
    for (int64_t i = 0; i < n; ++i) ms.push_back(a[static_cast<size_t>(i)]->elapsed_ms(*b[static_cast<size_t>(i)]));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

void augment_part(const Options& o, Device device, std::string& text) {
  for (const Workload& w : workloads()) {
    Tensor images = randint(0, 256, {o.batch, w.channels, w.height, w.width}, TensorOptions(DType::Int64, device))
                        .to(DType::UInt8);
    for (int64_t i = 0; i < o.warmup; ++i) (void)w.transform.apply_batch(images);
    const std::vector<double> ms = time_calls(device, o.iters, [&] { (void)w.transform.apply_batch(images); });
    const double median = ms[ms.size() / 2];
    const double ips = static_cast<double>(o.batch) / (median / 1e3);
    std::printf("kiln augment %-12s batch %lld: median %.3f ms (min %.3f, max %.3f), %.0f images/s\n", w.name,
                static_cast<long long>(o.batch), median, ms.front(), ms.back(), ips);
    JsonLine c;
    c.text("record", "case").text("impl", "kiln").text("part", "augment").text("workload", w.name);
    c.text("mode", "per_image").integer("batch", o.batch).real("median_ms", median, "%.5f");
    c.real("min_ms", ms.front(), "%.5f").real("max_ms", ms.back(), "%.5f").real("images_per_s", ips, "%.1f");
    text += c.str() + "\n";
  }
}

// One SmallCNN + AdamW step on (x uint8 on the device, y).
struct Trainer {
  std::shared_ptr<nn::SmallCNN> model;
  std::unique_ptr<nn::optim::AdamW> optimizer;
  T::Compose transform{{T::RandomCrop(28, 2), T::RandomHorizontalFlip(), T::Normalize({0.2860}, {0.3530})}};
  explicit Trainer(Device device) {
    manual_seed(0);
    model = std::make_shared<nn::SmallCNN>();
    model->to(device);
    optimizer = std::make_unique<nn::optim::AdamW>(nn::optim::decay_groups(model->named_parameters(), 1e-3, 0.05));
  }
  void step(const Tensor& x_uint8, const Tensor& y) {
    optimizer->zero_grad();
    Tensor loss = cross_entropy((*model)(transform.apply_batch(x_uint8)), y);
    loss.backward();
    optimizer->step();
  }
};

void feed_part(const Options& o, Device device, std::string& text) {
  std::shared_ptr<data::FashionMnistDataset> train;
  try {
    train = std::make_shared<data::FashionMnistDataset>(o.data_dir, "train");
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  const int64_t total = o.warmup + o.steps;
  auto record = [&](const char* feed, double seconds) {
    const double ms = seconds * 1e3 / static_cast<double>(o.steps);
    std::printf("kiln feed %-9s batch %lld: %.3f ms per step over %lld steps\n", feed,
                static_cast<long long>(o.feed_batch), ms, static_cast<long long>(o.steps));
    JsonLine c;
    c.text("record", "case").text("impl", "kiln").text("part", "feed").text("feed", feed);
    c.integer("batch", o.feed_batch).integer("steps", o.steps).integer("workers", o.workers);
    c.real("ms_per_step", ms, "%.4f");
    text += c.str() + "\n";
  };
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize();
  };
  {  // device-resident: the whole training set on the device, a batch is an index_select there
    Trainer t(device);
    const Tensor x = train->images().to(device), y = train->labels().to(device);
    const Tensor order = tensor(data::epoch_permutation(train->size(), 0, 0)).to(device);
    auto step = [&](int64_t i) {
      const int64_t start = (i * o.feed_batch) % (train->size() - o.feed_batch);
      const Tensor idx = order.narrow(0, start, o.feed_batch);
      t.step(index_select(x, 0, idx), index_select(y, 0, idx));
    };
    for (int64_t i = 0; i < o.warmup; ++i) step(i);
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = o.warmup; i < total; ++i) step(i);
    sync();
    record("resident", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  {  // the DataLoader (pinned on the GPU) and the prefetcher
    Trainer t(device);
    data::DataLoaderOptions lo;
    lo.batch_size = o.feed_batch;
    lo.shuffle = true;
    lo.drop_last = true;
    lo.num_workers = o.workers;
    lo.pin_memory = device.is_cuda();
    lo.persistent_workers = true;
    data::DataLoader loader(train, lo);
    data::DevicePrefetcher prefetch(loader, device);
    auto step = [&] {
      std::optional<data::Example> b = prefetch.next();
      if (!b) b = prefetch.next();
      t.step(b->data, b->target);
    };
    for (int64_t i = 0; i < o.warmup; ++i) step();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = o.warmup; i < total; ++i) step();
    sync();
    record("loader", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Device device = examples::choose_device(o.device);
  const std::string command = examples::command_line(argc, argv);
  JsonLine h;
  h.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
  h.text("kiln_commit", examples::build_commit()).text("command", command).text("device", device.str());
  h.text("device_name", examples::device_name(device)).text("timer", device.is_cuda() ? "cuda events" : "steady_clock");
  std::string text = h.str() + "\n";
  if (o.part != "feed") augment_part(o, device, text);
  if (o.part != "augment") feed_part(o, device, text);
  if (!o.json.empty()) {
    write_file_atomically(o.json, text, "bench_gpu_data");
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_gpu_data", [&] { return run(argc, argv); });
}
