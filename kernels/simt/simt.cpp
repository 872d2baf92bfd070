// The emulator behind kernels/simt/simt.h: a block's CUDA threads are fibers on the launching
// thread (their contexts and the switch between them: kernels/simt/context.h). A thread that must
// wait (at a barrier or a warp collective) or has exited switches straight to the next runnable
// thread, the lowest- or highest-numbered; with none left it returns to the launch, which ends the
// block or reports a deadlock. Under AddressSanitizer and ThreadSanitizer every switch is announced
// to the sanitizer, which otherwise takes a fiber's stack for memory it does not know.
#include "kernels/simt/simt.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/simt/context.h"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KILN_SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_SIMT_TSAN 1
#endif
#endif
#if defined(KILN_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(KILN_SIMT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace kiln::simt {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kMaxBlockThreads = 1024;
// Shared memory: CUDA's limit for a block's static variables, and an H100's for a block's whole
// shared memory, static and dynamic (227 KiB; the dynamic part past 48 KiB needs the kernel's
// cudaFuncAttributeMaxDynamicSharedMemorySize raised, which the launch code does).
constexpr size_t kMaxStaticSmem = size_t{48} << 10;
constexpr size_t kMaxBlockSmem = size_t{227} << 10;
// A fiber's stack. A kernel's locals are its registers' worth, a few KiB even with AddressSanitizer's
// redzones. Small matters there: every block clears the shadow of its threads' whole stacks, and
// where contexts are ucontext's, ASan's swapcontext does at every switch (with 1 MiB stacks the
// emulated attention tests took about 7 times as long).
constexpr size_t kStackBytes = size_t{64} << 10;
// Stacks that launches on this host thread gave back, for the next launch to take: a block of 512
// threads would otherwise allocate 32 MiB at every launch and fault in its pages again (with the
// sanitizer's allocator, which holds freed memory back, always new pages).
thread_local std::vector<std::unique_ptr<char[]>> t_spare_stacks;

enum class State { Runnable, AtBarrier, AtCollective, AtMbarrier, AtNamedBarrier, Exited };

// A bulk copy in flight (bulk_copy): it lands when a thread waits on its barrier.
struct BulkCopy {
  void* dst = nullptr;
  size_t bytes = 0;
  std::function<void(void*)> fill;
  Site where;
};

// A shared-memory barrier (mbarrier_init): its count, the arrivals its current phase still expects,
// its transaction bytes (expected less landed), the bulk copies in flight to it, and how many phases
// it has completed. Its 8 bytes in shared memory hold kMbarrierMark meanwhile.
struct Mbarrier {
  void* at = nullptr;
  int count = 0, pending = 0;
  int64_t tx = 0;
  std::vector<BulkCopy> copies;
  int64_t phase = 0;
  Site init;
  uint32_t fences_at_init = 0;  // the block's fence.proxy.async count then (Launch::async_fences)
};
constexpr uint64_t kMbarrierMark = 0x6b696c6e6d626172ull;  // "kilnmbar"

// A named barrier's current phase (bar.sync / bar.arrive with an id): the count its first arrival
// gave and where, the threads arrived so far, and how many lanes of each warp they are.
constexpr int kNamedBarriers = 16;  // per block, as on a GPU; 0 is __syncthreads'
struct NamedBarrier {
  int threads = 0, arrived = 0;
  Site first;
  std::vector<int> lanes;  // per warp of the block
};

// An asynchronous copy a thread started and has not waited for: it lands at the wait.
struct PendingCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0, src_bytes = 0;
  int group = 0;  // the thread's commit count when it started: its group once committed
  Site where;
};

// A bulk store or reduction from shared memory started by a thread (bulk_store, bulk_reduce): its
// source, a copy of the source's bytes at the start, and what writes or adds them to global memory when
// it completes.
struct PendingBulk {
  const void* src = nullptr;
  std::vector<unsigned char> at_start;
  std::function<void(const void*)> apply;
  int group = 0;  // the thread's bulk commit count when it started: its group once committed
  const char* what = "";  // "bulk store", "bulk reduction"
  Site where;
};

struct Fiber {
  detail::Context context;
  std::unique_ptr<char[]> stack;
  Dim3 index;
  int linear = 0;
  State state = State::Runnable;
  Site where;  // the barrier or collective it waits at
  void* mbarrier = nullptr;  // the shared-memory barrier it waits at, for the phase of parity `parity`
  int parity = 0;
  int named = 0;  // the named barrier it waits at
  void* fake_stack = nullptr;  // AddressSanitizer's, while switched out
  void* tsan_fiber = nullptr;
  std::vector<PendingCopy> copies;  // in the order started
  int committed = 0;                // groups committed
  uint32_t proxy_fences = 0;        // fence.proxy.async calls in this block (fence_proxy_async)
  std::vector<PendingBulk> bulk;    // bulk stores and reductions started, in order
  int bulk_committed = 0;           // bulk groups committed
  std::vector<std::pair<const void*, std::unique_ptr<ThreadState>>> states;  // thread_state's
};

// A warp's collectives: the contributions of the lanes that have arrived, and the last completed
// gather, which its lanes read until they arrive at the next one (so two buffers).
struct Warp {
  int arrived = 0, exited = 0;
  Site where;
  size_t bytes = 0;
  std::vector<unsigned char> incoming, published;
};

constexpr size_t kSmemAlign = 1024;

// A static shared variable (KILN_SHARED): an allocation of exactly its size, so that the sanitized
// build sees accesses past it, aligned as its type asks.
struct AlignedDelete {
  size_t align;
  void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t(align)); }
};
struct StaticShared {
  const void* key = nullptr;
  std::unique_ptr<unsigned char[], AlignedDelete> memory;
  size_t bytes = 0;
  uint64_t filled_in = 0;  // the block (Launch::block_serial) that last set it to all-ones bytes
};

// The running launch: one per host thread at a time.
struct Launch {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* kernel = nullptr;
  Dim3 block;
  std::vector<Fiber> fibers;
  // The dynamic shared memory, on 1024 bytes as a GPU's is (a 128-byte swizzle repeats every 1024:
  // wgmma's addresses here are offsets from it, kernels/wgmma_layout.h).
  std::unique_ptr<unsigned char[], AlignedDelete> smem{nullptr, AlignedDelete{kSmemAlign}};
  std::vector<StaticShared> statics;  // in the order the blocks first declared them
  uint64_t block_serial = 0;          // 1 for the first block run, 2 for the next, ...
  int current = -1;  // the fiber running, -1 in the launch's own context
  // No thread below `runnable_lo` or above `runnable_hi` is runnable: pick's scan starts there, so
  // between two barriers each thread is passed over once, not once per switch.
  int runnable_lo = 0, runnable_hi = -1;
  int live = 0;      // threads of the block that have not exited
  int at_barrier = 0;
  Site barrier_where;
  // The predicates of the waiting threads that were nonzero (__syncthreads_count), and the count of
  // the last barrier opened, which its threads read when they resume (before any can reach the next).
  int barrier_votes = 0, barrier_count = 0;
  std::vector<Warp> warps;
  std::vector<Mbarrier> mbarriers;  // the block's, in the order initialized
  NamedBarrier named[kNamedBarriers];
  detail::Context scheduler;
  void* scheduler_stack = nullptr;  // the launching thread's stack (for AddressSanitizer)
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
  void* tsan_scheduler = nullptr;
  std::exception_ptr thrown;  // the first exception a thread raised: the launch stops
  LaunchStats stats;
  // The async proxy's view of the dynamic shared memory (async_proxy_read): its bytes as the block's
  // last fence published them (or the async proxy's own writes since), and the block's fences so far.
  // Set up at the block's first async operation (async_block is the block_serial it belongs to). And
  // per 16-byte chunk the thread whose cp.async landed in it last, with that thread's own fence count
  // then (-1: none since the async proxy saw the chunk).
  std::vector<unsigned char> async_view;
  std::vector<int> async_copy_writer;
  std::vector<uint32_t> async_copy_writer_fences;
  uint32_t async_fences = 0;
  uint64_t async_block = 0;
  std::vector<std::pair<const void*, std::unique_ptr<BlockState>>> block_states;  // block_state's
};

thread_local Launch* t_launch = nullptr;

std::string site(const Site& w) { return std::string(w.file) + ":" + std::to_string(w.line); }
bool same_site(const Site& a, const Site& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}
std::string dims(const Dim3& d) {
  std::ostringstream os;
  os << "(" << d.x << ", " << d.y << ", " << d.z << ")";
  return os.str();
}

Launch& running(const char* what) {
  if (t_launch == nullptr || t_launch->current < 0) {
    throw Error(std::string("simt: ") + what + " called outside a kernel launched by simt::launch");
  }
  return *t_launch;
}
Fiber& self(Launch& l) { return l.fibers[static_cast<size_t>(l.current)]; }

[[noreturn]] void fail(const Launch& l, const std::string& what) {
  throw Error("simt: block " + dims(l.block) + ": " + what);
}

void make_runnable(Launch& l, int i) {
  l.fibers[static_cast<size_t>(i)].state = State::Runnable;
  l.runnable_lo = std::min(l.runnable_lo, i);
  l.runnable_hi = std::max(l.runnable_hi, i);
}

// The next thread to run under the launch's schedule, or -1 when none is runnable.
int pick(Launch& l) {
  const auto runnable = [&](int i) { return l.fibers[static_cast<size_t>(i)].state == State::Runnable; };
  if (l.config->schedule == Schedule::Lowest) {
    while (l.runnable_lo <= l.runnable_hi && !runnable(l.runnable_lo)) ++l.runnable_lo;
    return l.runnable_lo <= l.runnable_hi ? l.runnable_lo : -1;
  }
  while (l.runnable_hi >= l.runnable_lo && !runnable(l.runnable_hi)) --l.runnable_hi;
  return l.runnable_hi >= l.runnable_lo ? l.runnable_hi : -1;
}

// Switches from the context `from` (a fiber, or null for the launch's own) to fiber `to` (or, when
// null, the launch's context), announcing it to the sanitizers. Returns when something switches
// back to `from`; never, when `from` has exited.
void switch_context(Launch& l, Fiber* from, Fiber* to) {
  l.current = to != nullptr ? to->linear : -1;
  detail::Context& from_context = from != nullptr ? from->context : l.scheduler;
  void** const fake = from == nullptr ? &l.scheduler_fake_stack
                      : from->state == State::Exited ? nullptr
                                                     : &from->fake_stack;
#if defined(KILN_SIMT_ASAN)
  if (to != nullptr) {
    __sanitizer_start_switch_fiber(fake, to->stack.get(), kStackBytes);
  } else {
    __sanitizer_start_switch_fiber(fake, l.scheduler_stack, l.scheduler_stack_size);
  }
#endif
#if defined(KILN_SIMT_TSAN)
  __tsan_switch_to_fiber(to != nullptr ? to->tsan_fiber : l.tsan_scheduler, 0);
#endif
  detail::switch_context(from_context, to != nullptr ? to->context : l.scheduler);
#if defined(KILN_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake != nullptr ? *fake : nullptr, nullptr, nullptr);
#endif
  (void)fake;
}

// The running fiber f cannot go on (it waits, or has exited), or lets others run (it completed an
// mbarrier's phase): the next runnable thread runs, which is f itself when it is runnable and first
// in the schedule's order. With none runnable, or once a thread has thrown, the launch's context
// takes over.
void yield(Launch& l, Fiber& f) {
  const int next = l.thrown ? -1 : pick(l);
  if (next == f.linear) return;
  switch_context(l, &f, next >= 0 ? &l.fibers[static_cast<size_t>(next)] : nullptr);
}

// Opens the block barrier once every thread that has not exited waits at it.
void release_barrier_if_complete(Launch& l) {
  if (l.at_barrier == 0 || l.at_barrier < l.live) return;
  for (int i = 0; i < static_cast<int>(l.fibers.size()); ++i) {
    if (l.fibers[static_cast<size_t>(i)].state == State::AtBarrier) make_runnable(l, i);
  }
  l.at_barrier = 0;
  l.barrier_count = l.barrier_votes;
  l.barrier_votes = 0;
  ++l.stats.block_barriers;
}

void fiber_main() {
  Launch& l = *t_launch;
  Fiber& f = self(l);
#if defined(KILN_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  try {
    (*l.kernel)();
  } catch (...) {
    if (!l.thrown) l.thrown = std::current_exception();
  }
  f.state = State::Exited;
  --l.live;
  const auto exit_fault = [&](const std::string& what) {
    if (!l.thrown) {
      l.thrown = std::make_exception_ptr(
          Error("simt: block " + dims(l.block) + ": thread " + std::to_string(f.linear) + " exited with " + what));
    }
  };
  if (!f.copies.empty()) {
    exit_fault(std::to_string(f.copies.size()) + " asynchronous copies it never waited for, the first started at " +
               site(f.copies.front().where));
  }
  if (!f.bulk.empty()) {
    exit_fault(std::to_string(f.bulk.size()) +
               " bulk stores or reductions it never waited for (cp.async.bulk.wait_group), the first a " +
               f.bulk.front().what + " started at " + site(f.bulk.front().where));
  }
  for (const auto& [key, state] : f.states) {
    if (const std::string what = state->exit_fault(); !what.empty()) exit_fault(what);
  }
  Warp& w = l.warps[static_cast<size_t>(f.linear / kWarp)];
  ++w.exited;
  if (w.arrived > 0 && !l.thrown) {
    l.thrown = std::make_exception_ptr(Error("simt: block " + dims(l.block) + ": thread " + std::to_string(f.linear) +
                                             " exited while lanes of its warp wait at a warp collective, " +
                                             site(w.where)));
  }
  release_barrier_if_complete(l);
  yield(l, f);
  std::abort();  // an exited thread is never switched back to
}

// The block's barrier initialized at `bar`, or null (const as the launch is).
template <typename L> auto find_mbarrier(L& l, const void* bar) -> decltype(&l.mbarriers.front()) {
  for (auto& m : l.mbarriers) {
    if (m.at == bar) return &m;
  }
  return nullptr;
}

// What a thread waits at, for a deadlock's message ("" when it does not wait).
std::string wait_of(const Launch& l, const Fiber& f) {
  switch (f.state) {
    case State::AtBarrier: return "at __syncthreads, " + site(f.where);
    case State::AtCollective:
      return "at a warp collective (warp " + std::to_string(f.linear / kWarp) + "), " + site(f.where);
    case State::AtMbarrier: {
      const Mbarrier* b = find_mbarrier(l, f.mbarrier);
      const auto at = reinterpret_cast<uintptr_t>(f.mbarrier), base = reinterpret_cast<uintptr_t>(l.smem.get());
      std::ostringstream os;
      os << "at " << site(f.where) << " for the phase of parity " << f.parity << " of the mbarrier initialized at "
         << site(b->init);
      if (at >= base && at - base < l.config->dynamic_smem) os << " (dynamic shared byte " << at - base << ")";
      os << ": phase " << b->phase << ", " << b->pending << " of " << b->count << " arrivals missing";
      if (b->tx > 0) os << ", " << b->tx << " transaction bytes missing";
      return os.str();
    }
    case State::AtNamedBarrier: {
      const NamedBarrier& b = l.named[f.named];
      return "at named barrier " + std::to_string(f.named) + " (sync), " + site(f.where) + ": " +
             std::to_string(b.arrived) + " of " + std::to_string(b.threads) + " threads arrived";
    }
    default: return "";
  }
}

// Every waiting thread, for a deadlock's message: consecutive threads that wait alike on one line.
std::string describe_waits(const Launch& l) {
  std::ostringstream os;
  const size_t n = l.fibers.size();
  for (size_t i = 0, j = 0; i < n; i = j) {
    const std::string what = wait_of(l, l.fibers[i]);
    for (j = i + 1; j < n && wait_of(l, l.fibers[j]) == what;) ++j;
    if (what.empty()) continue;
    if (j - i == 1) os << "\n  thread " << i << " waits " << what;
    else os << "\n  threads " << i << " to " << j - 1 << " wait " << what;
  }
  return os.str();
}

void run_block(Launch& l, Dim3 block) {
  const LaunchConfig& c = *l.config;
  l.block = block;
  ++l.block_serial;
  l.live = static_cast<int>(l.fibers.size());
  l.at_barrier = 0;
  l.barrier_votes = 0;
  l.runnable_lo = 0;
  l.runnable_hi = static_cast<int>(l.fibers.size()) - 1;
  for (Warp& w : l.warps) w.arrived = w.exited = 0;
  l.mbarriers.clear();
  l.block_states.clear();
  for (NamedBarrier& b : l.named) {
    b.threads = b.arrived = 0;
    b.lanes.assign(l.warps.size(), 0);
  }
  if (c.dynamic_smem > 0) std::memset(l.smem.get(), 0xFF, c.dynamic_smem);
  for (Fiber& f : l.fibers) {
    f.state = State::Runnable;
    f.fake_stack = nullptr;
    f.copies.clear();
    f.committed = 0;
    f.proxy_fences = 0;
    f.states.clear();
#if defined(KILN_SIMT_ASAN)
    // The frames the last block left on this stack are gone: their redzones are plain memory again.
    __asan_unpoison_memory_region(f.stack.get(), kStackBytes);
#endif
    detail::start_context(f.context, f.stack.get(), kStackBytes, fiber_main);
  }
  // The threads switch among themselves; control comes back here when none can run.
  const int first = pick(l);
  switch_context(l, nullptr, &l.fibers[static_cast<size_t>(first)]);
  if (l.thrown) return;
  if (l.live > 0) fail(l, "deadlock: no thread can run" + describe_waits(l));
  for (const auto& [key, state] : l.block_states) {
    if (const std::string what = state->end_fault(); !what.empty()) fail(l, what);
  }
  for (const Mbarrier& b : l.mbarriers) {
    if (!b.copies.empty()) {
      fail(l, "ended with " + std::to_string(b.copies.size()) +
                  " bulk copies that never landed, the first started at " + site(b.copies.front().where) +
                  ": no thread waited on their mbarrier, initialized at " + site(b.init));
    }
  }
  for (int id = 1; id < kNamedBarriers; ++id) {
    const NamedBarrier& b = l.named[id];
    if (b.arrived > 0) {
      fail(l, "ended with named barrier " + std::to_string(id) + " partly arrived: " + std::to_string(b.arrived) +
                  " of " + std::to_string(b.threads) + " threads, the phase's first at " + site(b.first) +
                  " (the counts of its protocol do not add up)");
    }
  }
  ++l.stats.blocks;
  l.stats.threads += static_cast<int64_t>(l.fibers.size());
}

}  // namespace

LaunchStats launch(const LaunchConfig& config, const std::function<void()>& kernel) {
  if (t_launch != nullptr) throw Error("simt::launch: a launch is already running on this thread");
  const Dim3 &g = config.grid, &b = config.block;
  const uint64_t threads = uint64_t{b.x} * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0 || threads > kMaxBlockThreads) {
    throw Error("simt::launch: grid " + dims(g) + " and block " + dims(b) +
                " need every dimension at least 1 and at most 1024 threads a block");
  }
  if (config.dynamic_smem > kMaxBlockSmem) {
    throw Error("simt::launch: " + std::to_string(config.dynamic_smem) + " bytes of dynamic shared memory, over " +
                std::to_string(kMaxBlockSmem) + " (227 KiB), an H100's most for a block");
  }
  Launch l;
  l.config = &config;
  l.kernel = &kernel;
  l.fibers.resize(threads);
  l.warps.resize((threads + kWarp - 1) / kWarp);
  if (config.dynamic_smem > 0) l.smem.reset(new (std::align_val_t(kSmemAlign)) unsigned char[config.dynamic_smem]);
#if defined(KILN_SIMT_TSAN)
  l.tsan_scheduler = __tsan_get_current_fiber();
#endif
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &l.scheduler_stack, &l.scheduler_stack_size);
    pthread_attr_destroy(&attr);
  }
  for (size_t i = 0; i < l.fibers.size(); ++i) {
    Fiber& f = l.fibers[i];
    f.linear = static_cast<int>(i);
    f.index = Dim3{static_cast<unsigned>(i % b.x), static_cast<unsigned>(i / b.x % b.y),
                   static_cast<unsigned>(i / (uint64_t{b.x} * b.y))};
    if (t_spare_stacks.empty()) {
      f.stack.reset(new char[kStackBytes]);
    } else {
      f.stack = std::move(t_spare_stacks.back());
      t_spare_stacks.pop_back();
    }
#if defined(KILN_SIMT_TSAN)
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  t_launch = &l;
  struct Done {
    Launch& l;
    ~Done() {
      t_launch = nullptr;
      for (Fiber& f : l.fibers) t_spare_stacks.push_back(std::move(f.stack));
#if defined(KILN_SIMT_TSAN)
      for (Fiber& f : l.fibers) __tsan_destroy_fiber(f.tsan_fiber);
#endif
    }
  } done{l};
  const uint64_t blocks = uint64_t{g.x} * g.y * g.z;
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t i = config.schedule == Schedule::Lowest ? k : blocks - 1 - k;
    run_block(l, Dim3{static_cast<unsigned>(i % g.x), static_cast<unsigned>(i / g.x % g.y),
                      static_cast<unsigned>(i / (uint64_t{g.x} * g.y))});
    if (l.thrown) std::rethrow_exception(l.thrown);
  }
  return l.stats;
}

int64_t LaunchStats::collectives_in(std::string_view file) const {
  int64_t n = 0;
  for (const auto& [where, count] : collectives_at) {
    const std::string_view path(where.first);
    if (path.size() >= file.size() && path.substr(path.size() - file.size()) == file) n += count;
  }
  return n;
}

const Dim3& thread_idx() {
  Launch& l = running("threadIdx");
  return self(l).index;
}
const Dim3& block_idx() { return running("blockIdx").block; }
const Dim3& block_dim() { return running("blockDim").config->block; }
const Dim3& grid_dim() { return running("gridDim").config->grid; }
int lane() { return self(running("the lane")).linear % kWarp; }

void* dynamic_smem() { return running("dynamic shared memory").smem.get(); }

void* static_shared(const void* key, size_t bytes, size_t align, Site where) {
  Launch& l = running("a static shared variable");
  auto v = std::find_if(l.statics.begin(), l.statics.end(), [&](const StaticShared& s) { return s.key == key; });
  if (v == l.statics.end()) {
    const size_t total = l.stats.static_smem + bytes;
    if (total > kMaxStaticSmem) {
      fail(l, "static shared variables of " + std::to_string(total) + " bytes with the one at " + site(where) +
                  ", over CUDA's limit of " + std::to_string(kMaxStaticSmem) + " (48 KiB) for a block");
    }
    if (total + l.config->dynamic_smem > kMaxBlockSmem) {
      fail(l, "static shared variables of " + std::to_string(total) + " bytes with the one at " + site(where) +
                  " and " + std::to_string(l.config->dynamic_smem) + " bytes of dynamic shared memory, over " +
                  std::to_string(kMaxBlockSmem) + " (227 KiB), an H100's most for a block");
    }
    StaticShared s;
    s.key = key;
    s.bytes = bytes;
    s.memory = std::unique_ptr<unsigned char[], AlignedDelete>(
        static_cast<unsigned char*>(::operator new[](bytes, std::align_val_t(align))), AlignedDelete{align});
    l.statics.push_back(std::move(s));
    l.stats.static_smem = total;
    v = l.statics.end() - 1;
  }
  if (v->filled_in != l.block_serial) {
    std::memset(v->memory.get(), 0xFF, v->bytes);
    v->filled_in = l.block_serial;
  }
  return v->memory.get();
}

int sync_block(Site where, int predicate) {
  Launch& l = running("__syncthreads");
  Fiber& f = self(l);
  if (l.at_barrier > 0 && !same_site(l.barrier_where, where)) {
    fail(l, "divergent __syncthreads: thread " + std::to_string(f.linear) + " at " + site(where) +
                ", other threads at " + site(l.barrier_where));
  }
  if (l.at_barrier++ == 0) l.barrier_where = where;
  if (predicate != 0) ++l.barrier_votes;
  f.state = State::AtBarrier;
  f.where = where;
  release_barrier_if_complete(l);
  yield(l, f);
  return l.barrier_count;
}

const void* warp_gather(const void* mine, size_t bytes, Site where) {
  Launch& l = running("a warp collective");
  Fiber& f = self(l);
  const int warp = f.linear / kWarp, lane = f.linear % kWarp;
  Warp& w = l.warps[static_cast<size_t>(warp)];
  if (static_cast<int>(l.fibers.size()) - warp * kWarp < kWarp) {
    fail(l, "warp collective at " + site(where) + " in a partial warp: the block has " +
                std::to_string(l.fibers.size()) + " threads, not a multiple of 32");
  }
  if (w.exited > 0) {
    int gone = 0;
    while (l.fibers[static_cast<size_t>(warp * kWarp + gone)].state != State::Exited) ++gone;
    fail(l, "warp collective at " + site(where) + ": lane " + std::to_string(gone) + " of warp " +
                std::to_string(warp) + " has exited");
  }
  if (w.arrived > 0 && (!same_site(w.where, where) || w.bytes != bytes)) {
    fail(l, "divergent warp collective in warp " + std::to_string(warp) + ": lane " + std::to_string(lane) + " at " +
                site(where) + " (" + std::to_string(bytes) + " bytes), other lanes at " + site(w.where) + " (" +
                std::to_string(w.bytes) + " bytes)");
  }
  if (w.arrived == 0) {
    w.where = where;
    w.bytes = bytes;
    w.incoming.resize(kWarp * bytes);
  }
  if (bytes > 0) std::memcpy(w.incoming.data() + static_cast<size_t>(lane) * bytes, mine, bytes);
  f.state = State::AtCollective;
  f.where = where;
  if (++w.arrived == kWarp) {
    // Every lane has finished with the previous gather (it arrived here after), so it can go.
    std::swap(w.incoming, w.published);
    for (int i = warp * kWarp; i < (warp + 1) * kWarp; ++i) make_runnable(l, i);
    w.arrived = 0;
    ++l.stats.warp_collectives;
    ++l.stats.collectives_at[{w.where.file, w.where.line}];
  }
  yield(l, f);
  return w.published.data();
}

namespace {
// Whether [p, p + bytes) lies within [base, base + size).
bool in_range(const void* p, size_t bytes, const void* base, size_t size) {
  const auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(base);
  return a >= lo && a - lo <= size && bytes <= size - (a - lo);
}
// Whether [p, p + bytes) lies within the block's shared memory (the dynamic memory or one static
// variable), and whether any of it does.
bool in_shared(const Launch& l, const void* p, size_t bytes) {
  if (in_range(p, bytes, l.smem.get(), l.config->dynamic_smem)) return true;
  return std::any_of(l.statics.begin(), l.statics.end(),
                     [&](const StaticShared& s) { return in_range(p, bytes, s.memory.get(), s.bytes); });
}
bool touches_shared(const Launch& l, const void* p, size_t bytes) {
  const auto overlaps = [&](const void* base, size_t size) {
    const auto a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(base);
    return size > 0 && a < lo + size && lo < a + bytes;
  };
  if (overlaps(l.smem.get(), l.config->dynamic_smem)) return true;
  return std::any_of(l.statics.begin(), l.statics.end(),
                     [&](const StaticShared& s) { return overlaps(s.memory.get(), s.bytes); });
}

// The async proxy's view for the running block, set up at its first use: the dynamic shared memory's
// all-ones bytes of the block's start, no fences.
constexpr size_t kProxyChunk = 16;
void async_view_for_block(Launch& l) {
  if (l.async_block == l.block_serial) return;
  l.async_block = l.block_serial;
  const size_t chunks = (l.config->dynamic_smem + kProxyChunk - 1) / kProxyChunk;
  l.async_view.assign(chunks * kProxyChunk, 0xFF);
  l.async_copy_writer.assign(chunks, -1);
  l.async_copy_writer_fences.assign(chunks, 0);
  l.async_fences = 0;
}

// The chunks of the dynamic shared memory that [p, p + bytes) touches, as [first, end); none
// where it lies elsewhere (a static variable).
std::pair<size_t, size_t> proxy_chunks(const Launch& l, const void* p, size_t bytes) {
  if (!in_range(p, bytes, l.smem.get(), l.config->dynamic_smem)) return {0, 0};
  const auto offset = static_cast<size_t>(static_cast<const unsigned char*>(p) - l.smem.get());
  return {offset / kProxyChunk, (offset + bytes + kProxyChunk - 1) / kProxyChunk};
}

// The async proxy wrote [p, p + bytes) (a bulk copy landing, or starting: its all-ones bytes): the
// view holds what the memory holds there.
void async_proxy_wrote(Launch& l, const void* p, size_t bytes) {
  async_view_for_block(l);
  const auto [first, end] = proxy_chunks(l, p, bytes);
  for (size_t c = first; c < end; ++c) {
    const size_t at = c * kProxyChunk, n = std::min(kProxyChunk, l.config->dynamic_smem - at);
    std::memcpy(&l.async_view[at], l.smem.get() + at, n);
    l.async_copy_writer[c] = -1;
  }
}

// Thread f's cp.async landed in [p, p + bytes): until f fences, the async proxy may not read it.
void copy_landed(Launch& l, const Fiber& f, const void* p, size_t bytes) {
  async_view_for_block(l);
  const auto [first, end] = proxy_chunks(l, p, bytes);
  for (size_t c = first; c < end; ++c) {
    l.async_copy_writer[c] = f.linear;
    l.async_copy_writer_fences[c] = f.proxy_fences;
  }
}
}  // namespace

void copy_async(void* dst, const void* src, size_t bytes, size_t src_bytes, Site where) {
  Launch& l = running("an asynchronous copy");
  Fiber& f = self(l);
  const std::string what = "asynchronous copy of " + std::to_string(bytes) + " bytes at " + site(where);
  if (bytes != 4 && bytes != 8 && bytes != 16) fail(l, what + ": a copy moves 4, 8 or 16 bytes");
  if (src_bytes > bytes) fail(l, what + ": " + std::to_string(src_bytes) + " source bytes, over the copy's size");
  const auto misaligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes != 0; };
  if (misaligned(dst) || (src_bytes > 0 && misaligned(src))) {
    fail(l, what + ": the destination and source must be aligned to the copy's size");
  }
  if (!in_shared(l, dst, bytes)) fail(l, what + ": the destination is not in the block's shared memory");
  if (src_bytes > 0 && touches_shared(l, src, src_bytes)) fail(l, what + ": the source is in shared memory");
  // Until it lands, what the destination holds is undefined: all-ones bytes (NaN), so that a read too
  // early, or a copy started over a buffer another thread still reads, shows.
  std::memset(dst, 0xFF, bytes);
  f.copies.push_back(PendingCopy{dst, src, bytes, src_bytes, f.committed, where});
  ++l.stats.async_copies;
  l.stats.async_copy_bytes += static_cast<int64_t>(bytes);
}

void ldmatrix(uint32_t* regs, int count, bool trans, const void* row, Site where) {
  Launch& l = running("an ldmatrix");
  // The messages are built only to fail: a string held across the gather below would be left on the
  // stacks of the lanes a failing launch never resumes (and it costs time on every load).
  const auto what = [&] { return "ldmatrix of " + std::to_string(count) + " matrices at " + site(where); };
  if (count != 1 && count != 2 && count != 4) fail(l, what() + ": it loads 1, 2 or 4 matrices");
  const int lane = self(l).linear % kWarp;
  if (lane < 8 * count) {
    const auto row_of = [&] {
      return what() + ": lane " + std::to_string(lane) + "'s row (row " + std::to_string(lane % 8) + " of matrix " +
             std::to_string(lane / 8) + ")";
    };
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0) fail(l, row_of() + " is not aligned to 16 bytes");
    if (!in_shared(l, row, 16)) fail(l, row_of() + " is not in the block's shared memory");
  }
  // Each lane gives its row's bytes, read as it arrives, so that the warp's loads are done before any
  // lane goes on (and can write over what another lane has yet to read), and its site: the lanes'
  // must agree, as a collective's. The collective is the emulator's own (counted at this line, not at
  // the kernel's: a test that counts a file's collectives counts its mma alone).
  struct Given {
    unsigned char bytes[16];
    Site where;
  };
  Given mine{{}, where};
  if (lane < 8 * count) std::memcpy(mine.bytes, row, sizeof(mine.bytes));
  const auto* given = static_cast<const Given*>(warp_gather(&mine, sizeof(mine)));
  if (!same_site(given[0].where, where)) {  // each lane against lane 0: a lane elsewhere finds it
    fail(l, "divergent ldmatrix: lane " + std::to_string(lane) + " at " + site(where) + ", lane 0 at " +
                site(given[0].where));
  }
  const auto element = [&](int matrix, int r, int c) {
    uint16_t v;
    std::memcpy(&v, given[8 * matrix + r].bytes + 2 * c, sizeof(v));
    return static_cast<uint32_t>(v);
  };
  const int a = lane / 4, b = 2 * (lane % 4);
  for (int i = 0; i < count; ++i) {
    regs[i] = trans ? element(i, b, a) | element(i, b + 1, a) << 16 : element(i, a, b) | element(i, a, b + 1) << 16;
  }
}

void commit_copies() { ++self(running("an asynchronous copies' commit")).committed; }

namespace {
// thread_state's and block_state's lists: the state under `key`, or null; a new one added.
template <typename S> S* find_state(std::vector<std::pair<const void*, std::unique_ptr<S>>>& states, const void* key) {
  for (auto& [k, state] : states) {
    if (k == key) return state.get();
  }
  return nullptr;
}
template <typename S>
S& add_state(std::vector<std::pair<const void*, std::unique_ptr<S>>>& states, const void* key,
             std::unique_ptr<S> state) {
  states.emplace_back(key, std::move(state));
  return *states.back().second;
}
}  // namespace

ThreadState* find_thread_state(const void* key) {
  return find_state(self(running("a thread's emulated state")).states, key);
}
ThreadState& add_thread_state(const void* key, std::unique_ptr<ThreadState> state) {
  return add_state(self(running("a thread's emulated state")).states, key, std::move(state));
}
BlockState* find_block_state(const void* key) {
  return find_state(running("a block's emulated state").block_states, key);
}
BlockState& add_block_state(const void* key, std::unique_ptr<BlockState> state) {
  return add_state(running("a block's emulated state").block_states, key, std::move(state));
}

void wait_copies(int pending) {
  Launch& l = running("a wait for asynchronous copies");
  Fiber& f = self(l);
  // Groups 0 .. committed - 1 exist; those before committed - pending land.
  const int land_below = f.committed - std::max(pending, 0);
  size_t n = 0;
  while (n < f.copies.size() && f.copies[n].group < land_below) {
    const PendingCopy& c = f.copies[n++];
    if (c.src_bytes > 0) std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset(static_cast<unsigned char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
    copy_landed(l, f, c.dst, c.bytes);
  }
  f.copies.erase(f.copies.begin(), f.copies.begin() + static_cast<std::ptrdiff_t>(n));
}

namespace {
// The block's barrier at `bar`, after checking that it was initialized and that its bytes still hold
// the emulator's mark.
Mbarrier& initialized_mbarrier(Launch& l, void* bar, const char* what, Site where) {
  Mbarrier* b = find_mbarrier(l, bar);
  if (b == nullptr) fail(l, std::string("mbarrier ") + what + " at " + site(where) + ": not initialized");
  uint64_t mark = 0;
  std::memcpy(&mark, bar, sizeof mark);
  if (mark != kMbarrierMark) {
    fail(l, std::string("mbarrier ") + what + " at " + site(where) + ": its 8 bytes (initialized at " +
                site(b->init) + ") were overwritten");
  }
  return *b;
}
}  // namespace

void mbarrier_init(void* bar, int count, Site where) {
  Launch& l = running("an mbarrier's init");
  const std::string what = "mbarrier init at " + site(where);
  if (!in_shared(l, bar, sizeof(uint64_t))) fail(l, what + ": the barrier is not in the block's shared memory");
  if (reinterpret_cast<uintptr_t>(bar) % alignof(uint64_t) != 0) fail(l, what + ": not aligned to 8 bytes");
  if (count < 1 || count > (1 << 20) - 1) {
    fail(l, what + ": count " + std::to_string(count) + ", outside 1 .. 2^20 - 1");
  }
  if (const Mbarrier* b = find_mbarrier(l, bar)) {
    fail(l, what + ": the barrier was initialized already, at " + site(b->init));
  }
  std::memcpy(bar, &kMbarrierMark, sizeof kMbarrierMark);
  async_view_for_block(l);
  l.mbarriers.push_back(Mbarrier{bar, count, count, 0, {}, 0, where, l.async_fences});
}

namespace {
// Whether threads wait for b's current phase.
bool has_waiters(const Launch& l, const Mbarrier& b) {
  return std::any_of(l.fibers.begin(), l.fibers.end(), [&](const Fiber& f) {
    return f.state == State::AtMbarrier && f.mbarrier == b.at && f.parity == (b.phase & 1);
  });
}

// Lands the bulk copies in flight to b: their bytes count against the phase's transaction bytes.
void land_bulk_copies(Launch& l, Mbarrier& b) {
  for (BulkCopy& c : b.copies) {
    c.fill(c.dst);
    async_proxy_wrote(l, c.dst, c.bytes);
    b.tx -= static_cast<int64_t>(c.bytes);
  }
  b.copies.clear();
}

// Completes b's current phase if its arrivals are in and its transaction bytes add up, and lets the
// threads waiting for it run. Returns whether it did. `call` and `where` name the call, for a fault.
bool complete_if_done(Launch& l, Mbarrier& b, const char* call, Site where) {
  if (b.pending > 0) return false;
  if (b.tx < 0) {
    fail(l, std::string(call) + " at " + site(where) + ": the phase's bulk copies brought " + std::to_string(-b.tx) +
                " bytes more than it expects (mbarrier initialized at " + site(b.init) + ")");
  }
  if (b.tx > 0) return false;
  b.pending = b.count;
  ++b.phase;
  ++l.stats.mbarrier_phases;
  for (int i = 0; i < static_cast<int>(l.fibers.size()); ++i) {
    const Fiber& f = l.fibers[static_cast<size_t>(i)];
    if (f.state == State::AtMbarrier && f.mbarrier == b.at && f.parity != (b.phase & 1)) make_runnable(l, i);
  }
  return true;
}
}  // namespace

void mbarrier_arrive(void* bar, Site where) {
  Launch& l = running("an mbarrier's arrive");
  Mbarrier& b = initialized_mbarrier(l, bar, "arrive", where);
  if (--b.pending < 0) {
    fail(l, "mbarrier arrive at " + site(where) + ": more arrivals than the count of " + std::to_string(b.count) +
                " in one phase (initialized at " + site(b.init) + ")");
  }
  if (b.pending == 0 && has_waiters(l, b)) land_bulk_copies(l, b);
  // The threads it woke may run before this one goes on, as they may on a GPU: the next in the
  // schedule's order runs now (under Highest, a producer warp numbered after its consumers). So a
  // thread that releases a buffer before it is done reading it sees the refill.
  if (complete_if_done(l, b, "mbarrier arrive", where)) yield(l, self(l));
}

void mbarrier_expect_tx(void* bar, int64_t bytes, Site where) {
  Launch& l = running("an mbarrier's expect_tx");
  Mbarrier& b = initialized_mbarrier(l, bar, "expect_tx", where);
  if (bytes < 1 || bytes > (1 << 20) - 1) {
    fail(l, "mbarrier expect_tx at " + site(where) + ": " + std::to_string(bytes) + " bytes, outside 1 .. 2^20 - 1");
  }
  b.tx += bytes;
}

void bulk_copy(void* dst, size_t bytes, void* bar, std::function<void(void*)> fill, Site where) {
  Launch& l = running("a bulk copy");
  const std::string what = "bulk copy of " + std::to_string(bytes) + " bytes at " + site(where);
  if (bytes == 0 || bytes % 16 != 0) fail(l, what + ": the size must be a positive multiple of 16 bytes");
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) fail(l, what + ": the destination is not aligned to 16 bytes");
  if (!in_shared(l, dst, bytes)) fail(l, what + ": the destination is not in the block's shared memory");
  Mbarrier& b = initialized_mbarrier(l, bar, "of a bulk copy", where);
  async_view_for_block(l);
  if (l.async_fences <= b.fences_at_init) {
    fail(l, what + ": its barrier (initialized at " + site(b.init) +
                ") has had no fence.proxy.async since its init (pipeline's fence_barrier_init): the copy "
                "engine may not see it");
  }
  std::memset(dst, 0xFF, bytes);  // undefined until it lands
  async_proxy_wrote(l, dst, bytes);
  b.copies.push_back(BulkCopy{dst, bytes, std::move(fill), where});
  ++l.stats.bulk_copies;
  l.stats.bulk_copy_bytes += static_cast<int64_t>(bytes);
  if (!has_waiters(l, b)) return;
  land_bulk_copies(l, b);
  if (complete_if_done(l, b, "bulk copy", where)) yield(l, self(l));
}

// The fence publishes what the dynamic shared memory holds now: stores after it are not covered, even
// where an earlier fence ran since the async proxy last read the bytes.
void fence_proxy_async() {
  Launch& l = running("a proxy fence");
  async_view_for_block(l);
  std::memcpy(l.async_view.data(), l.smem.get(), l.config->dynamic_smem);
  ++l.async_fences;
  ++self(l).proxy_fences;
}

void async_proxy_read(const void* p, size_t bytes, Site where) {
  Launch& l = running("a read by the async proxy");
  async_view_for_block(l);
  const auto [first, end] = proxy_chunks(l, p, bytes);
  if (first == end) {
    fail(l, "async-proxy read of " + std::to_string(bytes) + " bytes at " + site(where) +
                ": not in the block's dynamic shared memory");
  }
  for (size_t c = first; c < end; ++c) {
    const size_t at = c * kProxyChunk, n = std::min(kProxyChunk, l.config->dynamic_smem - at);
    if (const int w = l.async_copy_writer[c]; w >= 0) {
      if (l.fibers[static_cast<size_t>(w)].proxy_fences == l.async_copy_writer_fences[c]) {
        fail(l, "async-proxy read at " + site(where) + " of dynamic shared bytes " + std::to_string(at) + " .. " +
                    std::to_string(at + n - 1) + ": thread " + dims(l.fibers[static_cast<size_t>(w)].index) +
                    "'s cp.async landed there and that thread has not run fence.proxy.async since "
                    "(wgmma::fence_async_smem: every thread that copies fences its own copies)");
      }
      l.async_copy_writer[c] = -1;
    }
    if (std::memcmp(&l.async_view[at], l.smem.get() + at, n) != 0) {
      fail(l, "async-proxy read at " + site(where) + " of dynamic shared bytes " + std::to_string(at) + " .. " +
                  std::to_string(at + n - 1) +
                  ": plain stores or cp.async changed them after the block's last fence.proxy.async "
                  "(wgmma::fence_async_smem after the stores, then a barrier)");
    }
  }
}

namespace {
void start_bulk(Launch& l, const char* what, const void* src, size_t bytes, std::function<void(const void*)> apply,
                Site where, int64_t& count, int64_t& count_bytes) {
  Fiber& f = self(l);
  const auto named = [&] { return std::string(what) + " of " + std::to_string(bytes) + " bytes at " + site(where); };
  if (bytes == 0 || bytes % 16 != 0) fail(l, named() + ": the size must be a positive multiple of 16 bytes");
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fail(l, named() + ": the source is not aligned to 16 bytes");
  // The copy engine reads the source through the async proxy: the stores that wrote it must be
  // fenced by now (async_proxy_read faults otherwise, and on bytes outside the dynamic memory).
  async_proxy_read(src, bytes, where);
  const auto* p = static_cast<const unsigned char*>(src);
  f.bulk.push_back(
      PendingBulk{src, std::vector<unsigned char>(p, p + bytes), std::move(apply), f.bulk_committed, what, where});
  ++count;
  count_bytes += static_cast<int64_t>(bytes);
}
}  // namespace

void bulk_store(const void* src, size_t bytes, std::function<void(const void*)> apply, Site where) {
  Launch& l = running("a bulk store");
  start_bulk(l, "bulk store", src, bytes, std::move(apply), where, l.stats.bulk_stores, l.stats.bulk_store_bytes);
}

void bulk_reduce(const void* src, size_t bytes, std::function<void(const void*)> apply, Site where) {
  Launch& l = running("a bulk reduction");
  start_bulk(l, "bulk reduction", src, bytes, std::move(apply), where, l.stats.bulk_reductions,
             l.stats.bulk_reduction_bytes);
}

void bulk_commit() { ++self(running("a bulk group's commit")).bulk_committed; }

void bulk_wait(int pending, Site where) {
  Launch& l = running("a wait for bulk groups");
  Fiber& f = self(l);
  const int complete_below = f.bulk_committed - std::max(pending, 0);
  size_t n = 0;
  for (; n < f.bulk.size() && f.bulk[n].group < complete_below; ++n) {
    const PendingBulk& r = f.bulk[n];
    // The engine reads the source at some time between the start and this wait: bytes that differ
    // now were changed in that window, a race whether or not the results would show it.
    if (std::memcmp(r.at_start.data(), r.src, r.at_start.size()) != 0) {
      fail(l, std::string(r.what) + " started at " + site(r.where) +
                  ": its source in shared memory changed before the wait that completes it (" + site(where) +
                  "): the copy engine may read it at any time until then");
    }
    r.apply(r.src);
  }
  f.bulk.erase(f.bulk.begin(), f.bulk.begin() + static_cast<std::ptrdiff_t>(n));
}

void mbarrier_wait(void* bar, int parity, Site where) {
  Launch& l = running("an mbarrier's wait");
  Fiber& f = self(l);
  Mbarrier& b = initialized_mbarrier(l, bar, "wait", where);
  // The phase of `parity` has completed when the current phase has the other parity.
  if ((b.phase & 1) != (parity & 1)) return;
  // Otherwise it is the current one: what is in flight to it lands now, which may complete it.
  land_bulk_copies(l, b);
  if (complete_if_done(l, b, "mbarrier wait", where)) return;
  f.state = State::AtMbarrier;
  f.where = where;
  f.mbarrier = bar;
  f.parity = parity & 1;
  yield(l, f);
}

namespace {
// Counts the running thread's arrival ("sync" or "arrive") at named barrier `id`, after checking the
// call. Returns whether it completed the phase, whose waiting threads are then runnable.
bool named_arrival(Launch& l, int id, int threads, const char* how, Site where) {
  const std::string what = std::string("named barrier ") + how + " at " + site(where) + " (barrier " +
                           std::to_string(id) + ", " + std::to_string(threads) + " threads)";
  if (id < 1 || id >= kNamedBarriers) fail(l, what + ": the id must be 1 .. 15 (0 is __syncthreads')");
  const int block = static_cast<int>(l.fibers.size());
  if (threads <= 0 || threads % kWarp != 0 || threads > block) {
    fail(l, what + ": the count must be a positive multiple of 32, at most the block's " + std::to_string(block));
  }
  NamedBarrier& b = l.named[id];
  if (b.arrived == 0) {
    b.threads = threads;
    b.first = where;
  } else if (b.threads != threads) {
    fail(l, what + ": the phase's first arrival, at " + site(b.first) + ", gave " + std::to_string(b.threads));
  }
  ++b.lanes[static_cast<size_t>(self(l).linear / kWarp)];
  if (++b.arrived < b.threads) return false;
  for (size_t w = 0; w < b.lanes.size(); ++w) {
    if (b.lanes[w] % kWarp != 0) {
      fail(l, what + " completes a phase with " + std::to_string(b.lanes[w]) + " arrivals from warp " +
                  std::to_string(w) + ": a warp arrives whole");
    }
  }
  std::fill(b.lanes.begin(), b.lanes.end(), 0);
  b.arrived = 0;
  for (int i = 0; i < block; ++i) {
    const Fiber& f = l.fibers[static_cast<size_t>(i)];
    if (f.state == State::AtNamedBarrier && f.named == id) make_runnable(l, i);
  }
  ++l.stats.named_barrier_phases;
  return true;
}
}  // namespace

void named_barrier_sync(int id, int threads, Site where) {
  Launch& l = running("a named barrier's sync");
  Fiber& f = self(l);
  f.state = State::AtNamedBarrier;  // before counting: the arrival that completes the phase wakes it too
  f.where = where;
  f.named = id;
  named_arrival(l, id, threads, "sync", where);
  yield(l, f);
}

void named_barrier_arrive(int id, int threads, Site where) {
  Launch& l = running("a named barrier's arrive");
  // The threads it woke may run first, as after an mbarrier's phase.
  if (named_arrival(l, id, threads, "arrive", where)) yield(l, self(l));
}

namespace detail {
void throw_partial_mask(unsigned mask, Site where) {
  std::ostringstream os;
  os << "simt: shuffle at " << site(where) << " with mask 0x" << std::hex << mask
     << ": only whole-warp shuffles (0xffffffff) are emulated";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace kiln::simt
