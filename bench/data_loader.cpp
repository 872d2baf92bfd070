// DataLoader benchmark: images per second that kiln's DataLoader delivers for Fashion-MNIST's
// training set (28x28 uint8) with a random 2-pixel pad-and-crop, a horizontal flip and
// normalization applied per sample (data/transforms.h, in the loader's threads), shuffled, in
// batches of --batch, for each --workers count. Each case builds its loader (persistent workers),
// reads --warmup batches (threads started, pages touched, allocator warm), then times the next
// --batches on the steady clock: from before the first next() to after the last one returns. It
// also times the same loader without transforms (the uint8 batches the GPU path moves, augmenting
// on the device). tools/data_loader_peer.py times PyTorch's DataLoader with torchvision's v2
// transforms on the same task, and tools/data_loader_bench.py runs both in rounds and compares.
// Reports speed; never asserts it.
//   usage: bench_data_loader [--workers 0,1,2] [--batch 256] [--batches 100] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "data/datasets.h"
#include "data/idx.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "examples/common.h"
#include "examples/run_record.h"
#include "kernels/cpu/parallel.h"

using namespace kiln;
using examples::JsonLine;

namespace {

struct Options {
  std::vector<int64_t> workers{0, 1, 2};
  int64_t batch = 256, batches = 100, warmup = 10, prefetch = 2;
  std::string data_dir = data::kFashionMnistDefaultDir;
  std::string json;
  uint64_t seed = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  examples::Flags app("Times kiln's DataLoader on Fashion-MNIST with pad-crop, flip and normalize per sample.",
               "bench_data_loader");
  app.add_option("--workers", o.workers, "worker counts to time")
      ->delimiter(',')
      ->transform(examples::whole<int64_t>(0, 64));
  app.add_option("--batch", o.batch, "batch size")->transform(examples::whole<int64_t>(1, 1 << 20));
  app.add_option("--batches", o.batches, "timed batches per case")->transform(examples::whole<int64_t>(1, 1 << 20));
  app.add_option("--warmup", o.warmup, "batches read before timing")->transform(examples::whole<int64_t>(0, 1 << 20));
  app.add_option("--prefetch", o.prefetch, "prefetch factor")->transform(examples::whole<int64_t>(1, 1 << 16));
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST's folder");
  app.add_option("--json", o.json, "write the records (JSON lines) to this file");
  app.parse(argc, argv);
  for (int64_t w : o.workers) {
    if (w < 0 || w > 1024) examples::input_error("--workers: " + std::to_string(w) + " is not in [0, 1024]");
  }
  return o;
}

struct Timing {
  int64_t images = 0;
  double seconds = 0;
};

Timing time_loader(const std::shared_ptr<const data::Dataset>& dataset, const Options& o, int64_t workers) {
  data::DataLoaderOptions lo;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.num_workers = workers;
  lo.prefetch_factor = o.prefetch;
  lo.persistent_workers = true;
  data::DataLoader loader(dataset, lo);
  auto read = [&](int64_t n) {
    int64_t images = 0;
    for (int64_t b = 0; b < n; ++b) {
      std::optional<data::Example> batch = loader.next();
      if (!batch) batch = loader.next();  // an epoch ended: the next one starts
      images += batch->data.size(0);
    }
    return images;
  };
  read(o.warmup);
  const auto t0 = std::chrono::steady_clock::now();
  Timing t;
  t.images = read(o.batches);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  namespace T = data::transforms;
  const T::Compose transform({T::RandomCrop(28, 2), T::RandomHorizontalFlip(), T::Normalize({0.2860}, {0.3530})});
  std::shared_ptr<const data::Dataset> augmented, raw;
  try {
    augmented = std::make_shared<data::FashionMnistDataset>(o.data_dir, "train", -1, transform);
    raw = std::make_shared<data::FashionMnistDataset>(o.data_dir, "train");
  } catch (const Error& e) {
    examples::input_error(e.what());
  }
  const std::string command = examples::command_line(argc, argv);
  JsonLine header;
  header.text("record", "header").text("impl", "kiln").text("date", examples::utc_now());
  header.text("kiln_commit", examples::build_commit()).text("command", command);
  header.integer("threads", cpu::num_threads()).integer("batch", o.batch).integer("batches", o.batches);
  header.integer("warmup", o.warmup).integer("prefetch", o.prefetch);
  std::string text = header.str() + "\n";
  for (const char* task : {"augment", "uint8"}) {
    for (int64_t w : o.workers) {
      const Timing t = time_loader(std::string(task) == "augment" ? augmented : raw, o, w);
      const double ips = static_cast<double>(t.images) / t.seconds;
      std::printf("kiln %-7s workers %lld: %lld images in %.3f s, %.0f images/s\n", task, static_cast<long long>(w),
                  static_cast<long long>(t.images), t.seconds, ips);
      std::fflush(stdout);
      JsonLine c;
      c.text("record", "case").text("impl", "kiln").text("task", task).integer("workers", w);
      c.integer("images", t.images).real("seconds", t.seconds, "%.6f").real("images_per_s", ips, "%.1f");
      text += c.str() + "\n";
    }
  }
  if (!o.json.empty()) {
    write_file_atomically(o.json, text, "bench_data_loader");
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::examples::run_main("bench_data_loader", [&] { return run(argc, argv); });
}
