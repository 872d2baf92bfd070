// The data pipeline on the GPU: pinned batches, the device prefetcher (batches equal to the CPU
// loader's, delivered on the compute stream, position kept), no page-locked allocation per batch
// once warm, and train_cnn's path (uint8 batches augmented on the device) against the CPU twin.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/transforms.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;
using namespace kiln::data;

namespace {

DataLoaderOptions loader_options(int64_t workers, bool pin) {
  DataLoaderOptions o;
  o.batch_size = 16;
  o.shuffle = true;
  o.seed = 3;
  o.num_workers = workers;
  o.pin_memory = pin;
  o.persistent_workers = true;
  return o;
}

}  // namespace

TEST_CASE("cuda loader: pinned batches and the prefetcher deliver the CPU loader's batches", "[cuda][loader]") {
  require_cuda();
  auto images = std::make_shared<SyntheticImages>(200, 3, 8, 8, 10, 5);
  DataLoader cpu_loader(images, loader_options(0, false));
  DataLoader gpu_loader(images, loader_options(2, true));
  DevicePrefetcher prefetch(gpu_loader, Device::cuda(0));
  CHECK(gpu_loader.options().pin_memory);
  int64_t n = 0;
  for (;;) {
    std::optional<Example> expect = cpu_loader.next();
    std::optional<Example> got = prefetch.next();
    REQUIRE(expect.has_value() == got.has_value());
    if (!got) break;
    ++n;
    CHECK(got->data.device() == Device::cuda(0));
    CHECK(got->target.device() == Device::cuda(0));
    CHECK(prefetch.position().batch == n);
    CHECK(got->data.to(Device::cpu()).to_vector<uint8_t>() == expect->data.to_vector<uint8_t>());
    CHECK(got->target.to(Device::cpu()).to_vector<int64_t>() == expect->target.to_vector<int64_t>());
  }
  CHECK(n == 13);
  CHECK(prefetch.position().epoch == 1);
}

TEST_CASE("cuda loader: no page-locked allocation per batch once warm", "[cuda][loader]") {
  require_cuda();
  auto images = std::make_shared<SyntheticImages>(512, 3, 32, 32, 10, 1);
  DataLoader loader(images, loader_options(2, true));
  DevicePrefetcher prefetch(loader, Device::cuda(0));
  auto epoch = [&] {
    int64_t n = 0;
    while (std::optional<Example> b = prefetch.next()) {
      Tensor s = sum(b->data.to(DType::Float32));  // work on the compute stream that reads the batch
      (void)s;
      ++n;
    }
    return n;
  };
  CHECK(epoch() == 32);
  cuda::synchronize();
  const cuda::PinnedStats warm = cuda::pinned_memory_stats();
  CHECK(warm.host_allocations > 0);
  CHECK(epoch() == 32);
  CHECK(epoch() == 32);
  cuda::synchronize();
  const cuda::PinnedStats after = cuda::pinned_memory_stats();
  // Two more epochs of 32 pinned batches each reused the blocks of the first.
  CHECK(after.host_allocations - warm.host_allocations <= 4);
}

TEST_CASE("cuda loader: train_cnn's GPU path equals the CPU twin of the augmentation", "[cuda][loader]") {
  require_cuda();
  namespace T = transforms;
  const T::Compose augment({T::RandomCrop(8, 2), T::RandomHorizontalFlip(), T::Normalize({0.5}, {0.25})});
  auto images = std::make_shared<SyntheticImages>(64, 1, 8, 8, 10, 9);
  DataLoader loader(images, loader_options(1, true));
  DevicePrefetcher prefetch(loader, Device::cuda(0));
  std::optional<Example> b = prefetch.next();
  REQUIRE(b.has_value());
  Generator g_cuda(11, Device::cuda(0)), g_cpu(11, Device::cpu());
  Tensor on_gpu = augment.apply_batch(b->data, g_cuda).to(Device::cpu());
  Tensor on_cpu = augment.apply_batch(b->data.to(Device::cpu()), g_cpu);
  // Crops and flips move whole pixels, and normalization is one multiply-add: the same bits.
  CHECK(on_gpu.to_vector<float>() == on_cpu.to_vector<float>());
}
