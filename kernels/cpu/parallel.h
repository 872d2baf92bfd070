// kiln's CPU thread pool. Work is cut into chunks whose boundaries depend only on the problem size
// and the grain, never on timing or on the number of threads, so any reduction that combines
// per-chunk partials in chunk order gives the same bits on every run and every machine.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::cpu {

// Number of worker threads (default: all hardware threads; KILN_NUM_THREADS overrides).
int num_threads();
void set_num_threads(int n);

// Number of chunks parallel_for uses for [0, n) with this grain: ceil(n / grain), at least 1.
inline int64_t num_chunks(int64_t n, int64_t grain) {
  if (grain < 1) grain = 1;
  return n <= 0 ? 0 : (n + grain - 1) / grain;
}

// Calls fn(chunk_index, begin, end) for each chunk of [0, n) of at most `grain` items, spread over
// the pool. Runs inline when there is one chunk, one thread, or when already inside a worker.
// The first exception thrown by fn is rethrown on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int64_t)>& fn);

// Whether this thread's parallel_for calls run inline: a pool worker, or a thread holding a
// SerialScope. Code that has threads of its own (a threaded BLAS) uses one thread there too.
bool runs_inline();

// How long, in microseconds, an idle worker polls for the next parallel region before it sleeps,
// and the caller polls for the workers to finish before it sleeps (KILN_CPU_SPIN_US when the
// process starts, default 100, at most 100000; 0 sleeps at once, as a machine shared with other
// busy processes may want). The ops of a small model's step come microseconds apart: a sleep and a
// wake-up per region, through the kernel, cost about as much as the region's work. Never changes
// a result.
int64_t spin_microseconds();
void set_spin_microseconds(int64_t us);

// Runs every parallel_for of this thread inline while it lives. The DataLoader's worker threads
// hold one: the workers are the parallelism (PyTorch gives each worker one thread too), and the pool
// runs one parallel region at a time, so workers using it would queue behind the training step.
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool previous_;
};

// A grain that makes roughly `cost_per_item`-weighted chunks of ~32k operations.
inline int64_t grain_for(int64_t cost_per_item) {
  int64_t g = 32768 / (cost_per_item < 1 ? 1 : cost_per_item);
  return g < 1 ? 1 : g;
}

}  // namespace kiln::cpu
