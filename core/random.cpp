// Generators and graph-capture draws. A generator's state sits behind its own mutex; the registry
// of active captures is consulted on every draw through one atomic count, so a draw outside any
// capture costs one relaxed load beyond the generator's lock.
#include "core/random.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "core/ops/dispatch.h"
#include "core/ops/factory.h"
#include "kernels/error.h"
#include "kernels/random.h"

namespace kiln {

struct Generator::Impl {
  std::mutex mutex;
  Device device;
  PhiloxState state;
};

struct GeneratorCapture::State {
  struct Entry {
    Generator generator;
    Tensor base;  // int64 [2] on the device: {seed, offset base}, written by prepare_replay
    uint64_t draws = 0;       // the next draw's k
    uint64_t high_water = 0;  // the largest `draws` before a set_position rewound it
    uint64_t total() const { return std::max(draws, high_water); }
  };

  // Made on the capturing thread: only its draws belong to the capture.
  explicit State(Device d) : device(d), thread(std::this_thread::get_id()) {}
  PhiloxState draw(const Generator& g);
  // This generator's entry, made on its first use (caller holds `mutex`).
  Entry& entry_for(const Generator& g);

  Device device;
  std::thread::id thread;
  std::mutex mutex;
  std::vector<Entry> entries;
};

namespace {

constexpr int kMaxCudaGenerators = 16;

std::mutex g_capture_mutex;
std::atomic<int> g_active_captures{0};
std::vector<std::shared_ptr<GeneratorCapture::State>> g_captures;  // active ones, at most one per device

// The capture a draw on `device` belongs to: one of that device begun on this thread. Another
// thread's draws meanwhile (a loader's augmentation) are ordinary draws, as its allocations are
// (CachingAllocator::begin_capture): the graph does not replay them.
std::shared_ptr<GeneratorCapture::State> active_capture(Device device) {
  if (g_active_captures.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  const std::thread::id self = std::this_thread::get_id();
  for (const auto& c : g_captures) {
    if (c->device == device && c->thread == self) return c;
  }
  return nullptr;
}

}  // namespace

// --- Generator -----------------------------------------------------------------------------------

Generator::Generator(uint64_t seed, Device device) : impl_(std::make_shared<Impl>()) {
  if (device.is_cuda() && device.index < 0) {
    throw DeviceError("Generator: " + device.str() + " is not a device (CUDA indices start at 0)");
  }
  impl_->device = device;
  impl_->state = PhiloxState{seed, 0, nullptr};
}

Device Generator::device() const { return impl_->device; }

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->state = PhiloxState{seed, 0, nullptr};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->state.seed;
}

PhiloxState Generator::state() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->state;
}

void Generator::set_state(PhiloxState s) {
  if (s.base != nullptr) throw Error("Generator::set_state: a state with a device base is a draw, not a state");
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->state = s;
}

PhiloxState Generator::next() {
  if (std::shared_ptr<GeneratorCapture::State> capture = active_capture(impl_->device)) return capture->draw(*this);
  return reserve(1);
}

uint64_t Generator::position() const {
  if (std::shared_ptr<GeneratorCapture::State> capture = active_capture(impl_->device)) {
    std::lock_guard<std::mutex> lock(capture->mutex);
    for (const GeneratorCapture::State::Entry& e : capture->entries) {
      if (e.generator == *this) return e.draws;
    }
    return 0;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->state.offset;
}

void Generator::set_position(uint64_t position) {
  if (std::shared_ptr<GeneratorCapture::State> capture = active_capture(impl_->device)) {
    std::lock_guard<std::mutex> lock(capture->mutex);
    // Rewinding replays draws the graph already makes; the replay reserves the most it ever drew.
    GeneratorCapture::State::Entry& e = capture->entry_for(*this);
    e.high_water = std::max(e.high_water, e.draws);
    e.draws = position;
    return;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->state.offset = position;
}

PhiloxState Generator::reserve(uint64_t draws) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const PhiloxState s = impl_->state;
  impl_->state.offset += draws;
  return s;
}

Generator& default_generator(Device device) {
  static Generator cpu_gen(Generator::kDefaultSeed, Device::cpu());
  static std::vector<Generator> cuda_gens = [] {
    std::vector<Generator> g;
    for (int i = 0; i < kMaxCudaGenerators; ++i) g.emplace_back(Generator::kDefaultSeed, Device::cuda(i));
    return g;
  }();
  if (device.is_cpu()) return cpu_gen;
  if (device.index < 0 || device.index >= kMaxCudaGenerators) {
    throw DeviceError("default_generator: kiln keeps generators for cuda:0 to cuda:" +
                      std::to_string(kMaxCudaGenerators - 1) + ", not " + device.str());
  }
  return cuda_gens[static_cast<size_t>(device.index)];
}

void manual_seed(uint64_t seed) {
  default_generator(Device::cpu()).manual_seed(seed);
  for (int i = 0; i < kMaxCudaGenerators; ++i) default_generator(Device::cuda(i)).manual_seed(seed);
}

Generator generator_for(const char* op, Device device, const std::optional<Generator>& generator) {
  if (!generator) return default_generator(device);
  if (generator->device() != device) {
    throw DeviceError(std::string(op) + ": the generator belongs to " + generator->device().str() +
                      " but the op runs on " + device.str());
  }
  return *generator;
}

// --- GeneratorCapture ----------------------------------------------------------------------------

GeneratorCapture::State::Entry& GeneratorCapture::State::entry_for(const Generator& g) {
  for (Entry& e : entries) {
    if (e.generator == g) return e;
  }
  // empty, not zeros: a fill would be a kernel, and a kernel launched now would be captured into
  // the graph and overwrite, at every replay, what prepare_replay wrote before it.
  entries.push_back(Entry{g, empty({2}, TensorOptions(DType::Int64, device)), 0, 0});
  return entries.back();
}

PhiloxState GeneratorCapture::State::draw(const Generator& g) {
  std::lock_guard<std::mutex> lock(mutex);
  Entry& entry = entry_for(g);
  const uint64_t k = entry.draws++;
  return PhiloxState{0, k, static_cast<const uint64_t*>(entry.base.data_ptr())};
}

GeneratorCapture::GeneratorCapture(Device device) : state_(std::make_shared<State>(device)) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  for (const auto& c : g_captures) {
    if (c->device == device) {
      throw Error("GeneratorCapture: " + device.str() + " is already being captured; one capture per device at a time");
    }
  }
  g_captures.push_back(state_);
  g_active_captures.fetch_add(1, std::memory_order_release);
}

GeneratorCapture::~GeneratorCapture() { end(); }

void GeneratorCapture::end() {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  for (auto it = g_captures.begin(); it != g_captures.end(); ++it) {
    if (*it == state_) {
      g_captures.erase(it);
      g_active_captures.fetch_sub(1, std::memory_order_release);
      return;
    }
  }
}

void GeneratorCapture::prepare_replay() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  for (State::Entry& e : state_->entries) {
    // Taking the draws in one step keeps a concurrent eager draw from landing inside them.
    const PhiloxState s = e.generator.reserve(e.total());
    ops::launch("graph replay", state_->device, kernels::philox_base_store,
                static_cast<uint64_t*>(e.base.data_ptr()), s.seed, s.offset);
  }
}

size_t GeneratorCapture::generators() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->entries.size();
}

uint64_t GeneratorCapture::draws(size_t i) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (i >= state_->entries.size()) {
    throw IndexError("GeneratorCapture::draws: generator " + std::to_string(i) +
                     " is out of range; the capture drew from " + std::to_string(state_->entries.size()) +
                     " generators");
  }
  return state_->entries[i].total();
}

}  // namespace kiln
