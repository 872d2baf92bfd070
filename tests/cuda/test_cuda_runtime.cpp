// The CUDA runtime as kiln uses it, on a real GPU: availability, copies in every dtype, pinned
// non-blocking copies, record_stream across streams, memory statistics, the no-cudaMalloc steady
// state of a training-like step, out-of-memory, and device-side index checks. The cross-stream test
// holds a stream back with a host function instead of a timed kernel, so its order is certain.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "tests/cuda/require_cuda.h"

using namespace kiln;
using kiln::test::require_cuda;
using Catch::Matchers::Contains;

namespace {

const Device kCuda = Device::cuda(0);

// Every test needs the device; the reason says why not (driver, no device) when there is none.
// KILN_CUDA_ALLOC=direct (the compute-sanitizer run) makes every allocation a cudaMalloc and every
// free a cudaFree, which synchronizes the device: the caching tests do not apply there.
bool direct_allocator() { return std::string(cuda::caching_allocator().name()) == "cuda-direct"; }

const DType kAllDTypes[] = {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64,
                            DType::Int32,   DType::Int64,   DType::UInt8,    DType::Bool};

// Random values of any dtype on the CPU (never zeros: a copy that writes nothing must not pass).
Tensor random_cpu(const Shape& shape, DType t) {
  if (is_floating(t)) return randn(shape, TensorOptions(DType::Float64)).to(t);
  if (t == DType::Bool) return randint(0, 2, shape).to(DType::Bool);
  if (t == DType::UInt8) return randint(0, 256, shape).to(t);
  return randint(-1000, 1000, shape).to(t);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  if (ca.dtype() != cb.dtype() || ca.sizes() != cb.sizes()) return false;
  size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

// A gate that keeps a stream waiting in a host function until the test opens it. The host function
// gives up after 20 s, so a failing test cannot hang the run.
struct Gate {
  std::atomic<bool> open{false};
};

void CUDART_CB wait_for_gate(void* p) {
  auto* gate = static_cast<Gate*>(p);
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!gate->open.load() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Opens the gate and drains the stream however the test leaves the scope.
struct GateOpener {
  Gate& gate;
  const cuda::CudaStream& stream;
  ~GateOpener() {
    gate.open = true;
    cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream.get()));
  }
};

}  // namespace

TEST_CASE("cuda runtime: a device is available", "[cuda]") {
  require_cuda();
  CHECK(cuda::device_count() >= 1);
  CHECK(cuda::unavailable_reason().empty());
  CHECK(cuda::current_device() == 0);
}

TEST_CASE("cuda runtime: tensors round-trip CPU -> CUDA -> CPU exactly in every dtype", "[cuda]") {
  require_cuda();
  for (DType t : kAllDTypes) {
    INFO(dtype_name(t));
    Tensor x = random_cpu({37, 19}, t);  // odd sizes: no vector-width multiple
    Tensor g = x.to(kCuda);
    CHECK(g.is_cuda());
    CHECK(g.dtype() == t);
    CHECK(g.sizes() == x.sizes());
    Tensor back = g.to(Device::cpu());
    CHECK(back.is_cpu());
    CHECK(same_bytes(back, x));

    // A non-contiguous source keeps its values (whatever layout the copy chooses).
    Tensor xt = x.t();
    Tensor back_t = xt.to(kCuda).to(Device::cpu());
    CHECK(back_t.sizes() == xt.sizes());
    CHECK(same_bytes(back_t, xt));

    // 0-d and empty tensors.
    Tensor s = random_cpu({}, t);
    CHECK(same_bytes(s.to(kCuda).to(Device::cpu()), s));
    Tensor e = random_cpu({0, 5}, t);
    Tensor e_back = e.to(kCuda).to(Device::cpu());
    CHECK(e_back.sizes() == e.sizes());
  }
  // Moving to the device a tensor is already on is the tensor itself.
  Tensor g = randn({4}, TensorOptions(DType::Float32, kCuda));
  CHECK(g.to(kCuda).is_same(g));
}

TEST_CASE("cuda runtime: pinned memory gives correct non-blocking copies", "[cuda]") {
  require_cuda();
  Tensor x = random_cpu({1 << 20}, DType::Float32);
  Tensor pinned = x.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK_FALSE(x.is_pinned());
  CHECK(same_bytes(pinned, x));

  // Host to device without blocking; the device-side read orders after it on the same stream.
  Tensor g = pinned.to(kCuda, true);
  Tensor doubled = g * 2.0;
  Tensor back = doubled.to(Device::cpu());
  CHECK(same_bytes(back, x * 2.0));

  // Device to host without blocking: valid once the stream is synchronized.
  Tensor h = g.to(Device::cpu(), true);
  cuda::stream_synchronize(cuda::current_stream());
  CHECK(same_bytes(h, x));

  // A non-blocking copy from pageable memory is still correct (it falls back to blocking).
  CHECK(same_bytes(x.to(kCuda, true).to(Device::cpu()), x));

  // On a side stream: the copy runs there, an event hands the result to the main stream.
  cuda::CudaStream side;
  Tensor on_side;
  {
    cuda::StreamGuard guard(side.get());
    on_side = pinned.to(kCuda, true);
  }
  cuda::Event copied;
  copied.record(side.get());
  copied.wait(cuda::current_stream());
  on_side.storage()->record_stream(cuda::current_stream());
  CHECK(same_bytes(on_side.to(Device::cpu()), x));
}

TEST_CASE("cuda runtime: a stream destroyed before the blocks recorded on it are freed", "[cuda]") {
  require_cuda();
  // The pinned source of a non-blocking copy and a device tensor are both recorded on a side
  // stream that is destroyed first; freeing them afterwards must neither throw nor record into
  // the dead stream, and their memory must still be reusable.
  Tensor host = random_cpu({1 << 16}, DType::Float32).pin_memory();
  Tensor dev = randn({1 << 16}, TensorOptions(DType::Float32, kCuda));
  {
    cuda::CudaStream side;
    cuda::StreamGuard guard(side.get());
    Tensor copied = host.to(kCuda, true);  // records the pinned block on `side`
    dev.storage()->record_stream(side.get());
    CHECK(same_bytes(copied.to(Device::cpu()), host));
  }
  CHECK_NOTHROW(host = Tensor());
  CHECK_NOTHROW(dev = Tensor());
  Tensor again = random_cpu({1 << 16}, DType::Float32).pin_memory();
  CHECK(again.is_pinned());
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("cuda runtime: record_stream keeps a freed block until the other stream is done", "[cuda]") {
  require_cuda();
  if (direct_allocator()) {
    WARN("skipped under KILN_CUDA_ALLOC=direct: cudaFree synchronizes the device, which would wait on the gate");
    return;
  }
  const int64_t n = 1 << 20;  // 4 MiB: a large-pool block
  const TensorOptions options(DType::Float32, kCuda);
  Tensor x = randn({n}, options);
  std::vector<float> xv = x.to_vector<float>();  // also synchronizes: x is written
  void* px = x.data_ptr();

  // Launch every kernel the test uses once before the gate closes: CUDA loads modules lazily, and
  // loading one while a stream sits in a blocked host function waits for that stream (here, for
  // the gate's 20-second timeout, after which the block is legitimately free again).
  {
    Tensor warm = zeros({n}, options);
    Tensor warm2 = warm * 2.0;
    cuda::synchronize();
  }

  cuda::CudaStream side;
  cuda::Event x_ready;
  x_ready.record(cuda::current_stream());
  x_ready.wait(side.get());
  Gate gate;
  GateOpener opener{gate, side};
  REQUIRE(cudaLaunchHostFunc(reinterpret_cast<cudaStream_t>(side.get()), wait_for_gate, &gate) == cudaSuccess);

  Tensor y;
  {
    cuda::StreamGuard guard(side.get());
    y = x * 2.0;  // queued behind the gate: it reads x only after the gate opens
  }
  x.storage()->record_stream(side.get());
  x = Tensor();  // freed on the host while the side stream has yet to read it

  // New blocks of the same size on the main stream must not reuse x's memory yet; writing them
  // would corrupt what y is about to read.
  std::vector<Tensor> fresh;
  for (int i = 0; i < 4; ++i) {
    fresh.push_back(zeros({n}, options));
    CHECK(fresh.back().data_ptr() != px);
  }

  gate.open = true;
  side.synchronize();
  std::vector<float> yv = y.to_vector<float>();
  REQUIRE(yv.size() == xv.size());
  size_t wrong = 0;
  for (size_t i = 0; i < yv.size(); ++i) wrong += yv[i] != 2.0f * xv[i];
  CHECK(wrong == 0);
}

TEST_CASE("cuda runtime: memory_stats follow an allocation and its release", "[cuda]") {
  require_cuda();
  cuda::synchronize();
  const int64_t nbytes = int64_t(4) << 20;
  cuda::MemoryStats before = cuda::memory_stats();
  {
    Tensor t = empty({nbytes / 4}, TensorOptions(DType::Float32, kCuda));
    cuda::MemoryStats during = cuda::memory_stats();
    CHECK(during.allocated_bytes >= before.allocated_bytes + nbytes);
    CHECK(during.requested_bytes == before.requested_bytes + nbytes);
    CHECK(during.reserved_bytes >= during.allocated_bytes);
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
    CHECK(during.peak_reserved_bytes >= during.reserved_bytes);
    CHECK(during.num_allocations == before.num_allocations + 1);
    CHECK(during.active_blocks == before.active_blocks + 1);
    CHECK(during.num_device_mallocs >= before.num_device_mallocs);
  }
  cuda::MemoryStats after = cuda::memory_stats();
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.requested_bytes == before.requested_bytes);
  CHECK(after.active_blocks == before.active_blocks);
  CHECK(after.reserved_bytes >= after.allocated_bytes);

  cuda::reset_peak_memory_stats();
  cuda::MemoryStats reset = cuda::memory_stats();
  CHECK(reset.peak_allocated_bytes == reset.allocated_bytes);
  CHECK(reset.peak_reserved_bytes == reset.reserved_bytes);

  // Emptying the cache gives back every wholly free segment and leaves live blocks alone.
  Tensor keep = ones({1000}, TensorOptions(DType::Float32, kCuda));
  cuda::empty_cache();
  cuda::MemoryStats emptied = cuda::memory_stats();
  CHECK(emptied.reserved_bytes <= reset.reserved_bytes + (int64_t(2) << 20));
  CHECK(emptied.reserved_bytes >= emptied.allocated_bytes);
  CHECK(keep.sum().item<double>() == 1000.0);
}

TEST_CASE("cuda runtime: repeated forward+backward makes no cudaMalloc after warm-up", "[cuda]") {
  require_cuda();
  if (direct_allocator()) {
    WARN("skipped under KILN_CUDA_ALLOC=direct: every allocation is a cudaMalloc there by design");
    return;
  }
  const TensorOptions options(DType::Float32, kCuda);
  Tensor x = randn({64, 1000}, options).set_requires_grad(true);
  Tensor w = randn({1000}, options).set_requires_grad(true);
  Tensor b = randn({1000}, options).set_requires_grad(true);
  // y = sum(gelu(x * w + b) * x): elementwise with broadcasting, a reduction, and in backward the
  // broadcast gradients of w and b (reductions over the batch).
  auto step = [&] {
    for (Tensor* p : {&x, &w, &b}) p->set_grad(Tensor());  // zero_grad(set_to_none = true)
    Tensor y = sum(gelu(x * w + b) * x);
    y.backward();
    return y;
  };
  step();
  step();
  cuda::synchronize();
  cuda::MemoryStats warm = cuda::memory_stats();
  Tensor y;
  for (int i = 0; i < 20; ++i) y = step();
  double value = y.item<double>();  // the one host sync, as a training loop's logging would do
  cuda::MemoryStats steady = cuda::memory_stats();
  INFO("cudaMalloc calls: " << warm.num_device_mallocs << " after warm-up, " << steady.num_device_mallocs
                            << " after 20 more steps");
  CHECK(steady.num_device_mallocs == warm.num_device_mallocs);
  CHECK(steady.num_device_frees == warm.num_device_frees);
  y = Tensor();
  cuda::MemoryStats idle = cuda::memory_stats();
  CHECK(idle.allocated_bytes == warm.allocated_bytes);  // nothing accumulates from step to step
  CHECK(std::isfinite(value));
  for (Tensor* p : {&x, &w, &b}) {
    REQUIRE(p->grad().defined());
    CHECK(p->grad().is_cuda());
    CHECK(std::isfinite(p->grad().sum().item<double>()));
  }
}

TEST_CASE("cuda runtime: an absurd allocation is an OutOfMemoryError with advice", "[cuda][oom]") {
  require_cuda();
  cuda::MemoryStats before = cuda::memory_stats();
  std::string message;
  try {
    Tensor t = empty({int64_t(1) << 45}, TensorOptions(DType::Float32, kCuda));  // 128 TiB
    FAIL("allocating 128 TiB did not throw");
  } catch (const OutOfMemoryError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK_THAT(message, Contains("out of memory", Catch::CaseSensitive::No));
  CHECK_THAT(message, Contains("cuda:0"));
  CHECK_THAT(message, Contains("smaller batch"));
  CHECK_THAT(message, Contains("gradient accumulation"));
  // Advice names what kiln has, with the API and the examples' flag.
  CHECK_THAT(message, Contains("autocast (AutocastGuard / --amp)"));
  CHECK_THAT(message, Contains("activation recompute (nn::checkpoint / --recompute)"));
  CHECK(cuda::memory_stats().num_ooms == before.num_ooms + 1);
  // The allocator keeps working afterwards.
  Tensor ok = ones({1000}, TensorOptions(DType::Float32, kCuda));
  CHECK(ok.sum().item<double>() == 1000.0);
}

TEST_CASE("cuda runtime: a bad index on the device is an IndexError at the next sync", "[cuda]") {
  require_cuda();
  Tensor x_cpu = randn({5, 3});
  Tensor x = x_cpu.to(kCuda);
  Tensor bad = tensor<int64_t>({0, 7, 1}).to(kCuda);

  // The launch itself must not throw: checking a device index on the host would need a sync.
  Tensor y;
  REQUIRE_NOTHROW(y = index_select(x, 0, bad));
  std::string message;
  try {
    y.to(Device::cpu());
  } catch (const IndexError& e) {
    message = e.what();
  }
  INFO("IndexError message: " << message);
  CHECK_THAT(message, Contains("index_select"));
  CHECK_THAT(message, Contains("7"));
  CHECK_THAT(message, Contains("5"));

  // item() is a sync point too.
  Tensor s;
  REQUIRE_NOTHROW(s = index_select(x, 0, bad).sum());
  CHECK_THROWS_AS(s.item<double>(), IndexError);

  // The error was consumed: good indices work again and give the right rows.
  Tensor good = tensor<int64_t>({4, 0}).to(kCuda);
  Tensor z = index_select(x, 0, good).to(Device::cpu());
  Tensor want = index_select(x_cpu, 0, tensor<int64_t>({4, 0}));
  CHECK(same_bytes(z, want));
}
