// The training examples' data-loading flags: --workers, --prefetch and --pin-memory (what they do:
// data/loader.h, data/prefetcher.h). Shared by train_cnn and train_gpt, and in a header of its own
// so the command-line fuzzer parses exactly what the programs do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/device.h"
#include "data/loader.h"
#include "examples/common.h"

namespace kiln::examples {

struct LoaderFlags {
  std::optional<int64_t> workers;  // unset: the example's measured default
  int64_t prefetch = 2;
  std::optional<bool> pin_memory;  // unset: on for a CUDA device

  // The loader options these flags give on `device`, with `default_workers` when --workers is unset.
  data::DataLoaderOptions loader_options(Device device, int64_t default_workers) const {
    data::DataLoaderOptions o;
    o.num_workers = workers.value_or(default_workers);
    o.prefetch_factor = prefetch;
    o.pin_memory = pin_memory.value_or(device.is_cuda());
    o.persistent_workers = true;  // an epoch boundary should not cost a thread start per worker
    return o;
  }
  std::string str(Device device, int64_t default_workers) const {
    const data::DataLoaderOptions o = loader_options(device, default_workers);
    return "loader: " + std::to_string(o.num_workers) + " workers, prefetch " + std::to_string(o.prefetch_factor) +
           (o.pin_memory ? ", pinned" : "");
  }
};

inline void add_loader_options(Flags& app, LoaderFlags& f, const std::string& default_workers) {
  app.add_option("--workers", f.workers, "data-loader threads reading batches ahead; 0 reads in the training loop")
      ->transform(whole<int64_t>(0, 1024))
      ->default_str(default_workers);
  app.add_option("--prefetch", f.prefetch, "batches in flight per loader thread")
      ->transform(whole<int64_t>(1, 1 << 16));
  app.add_flag("--pin-memory,!--no-pin-memory", f.pin_memory,
               "batches in page-locked memory, copied to the GPU asynchronously (default on with CUDA)");
}

}  // namespace kiln::examples
