// A fixed pool of workers that pull chunk indices from an atomic counter. Which thread runs a
// chunk may vary; what a chunk computes may not, which is what keeps results deterministic.
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/log.h"

namespace kiln::cpu {
namespace {

thread_local bool t_in_worker = false;

constexpr int64_t kDefaultSpinUs = 100, kMaxSpinUs = 100000;

// KILN_CPU_SPIN_US when it is a whole number (capped at kMaxSpinUs), else the default with a Warn
// message (during static initialization: the logger's state is a function-local static, made on
// first use).
int64_t initial_spin_us() {
  const char* env = std::getenv("KILN_CPU_SPIN_US");
  if (env == nullptr) return kDefaultSpinUs;
  char* end = nullptr;
  const long long us = std::strtoll(env, &end, 10);
  if (end != env && *end == '\0' && us >= 0) return std::min<long long>(us, kMaxSpinUs);
  KILN_LOG(Warn, "KILN_CPU_SPIN_US must be a whole number of microseconds, got '" + std::string(env) + "'; using " +
                     std::to_string(kDefaultSpinUs));
  return kDefaultSpinUs;
}
std::atomic<int64_t> g_spin_us{initial_spin_us()};

// One parallel region. Workers hold it by shared_ptr, so a worker that wakes late only ever sees
// an exhausted counter of its own job, never a half-reset counter of the next one.
struct Job {
  const std::function<void(int64_t)>* body = nullptr;
  int64_t total = 0;
  std::atomic<int64_t> next{0};
  int64_t remaining = 0;  // guarded by the pool's mutex
  std::atomic<bool> finished{false};  // remaining reached 0 (set under the mutex)
  std::exception_ptr error;
  uint64_t id = 0;
};

class ThreadPool {
 public:
  explicit ThreadPool(int n) { resize(n); }
  ~ThreadPool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller works too

  void resize(int n) {
    stop();
    stopping_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void run(int64_t chunks, const std::function<void(int64_t)>& body) {
    std::unique_lock<std::mutex> job_lock(job_mutex_);  // one parallel region at a time
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->total = chunks;
    job->remaining = chunks;
    {
      std::lock_guard<std::mutex> lk(mutex_);
      job->id = ++job_counter_;
      job_ = job;
    }
    published_.store(job->id, std::memory_order_release);
    cv_.notify_all();
    work(*job);
    spin_until([&] { return job->finished.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lk(mutex_);
    done_cv_.wait(lk, [&] { return job->remaining == 0; });
    job_.reset();
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void work(Job& job) {
    bool prev = t_in_worker;
    t_in_worker = true;
    int64_t done = 0;
    for (;;) {
      int64_t i = job.next.fetch_add(1);
      if (i >= job.total) break;
      try {
        (*job.body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mutex_);
        if (!job.error) job.error = std::current_exception();
      }
      ++done;
    }
    t_in_worker = prev;
    if (done > 0) {
      std::lock_guard<std::mutex> lk(mutex_);
      job.remaining -= done;
      if (job.remaining == 0) {
        job.finished.store(true, std::memory_order_release);
        done_cv_.notify_all();
      }
    }
  }

  void worker_loop() {
    uint64_t last = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      spin_until([&] { return published_.load(std::memory_order_acquire) != last; });
      {
        std::unique_lock<std::mutex> lk(mutex_);
        cv_.wait(lk, [&] { return stopping_ || (job_ && job_->id != last); });
        if (stopping_) return;
        job = job_;
        last = job->id;
      }
      work(*job);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Waits up to spin_microseconds() for ready() to hold before the caller sleeps on a condition
  // variable (parallel.h).
  template <typename Ready> static void spin_until(Ready&& ready) {
    const int64_t us = g_spin_us.load(std::memory_order_relaxed);
    if (us <= 0) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    for (int i = 1;; ++i) {
      if (ready()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) return;
    }
  }

  std::atomic<uint64_t> published_{0};  // the id of the last job run() published
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  std::shared_ptr<Job> job_;
  uint64_t job_counter_ = 0;
  bool stopping_ = false;
};

int default_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool;

ThreadPool& pool() {
  std::lock_guard<std::mutex> lk(g_pool_mutex);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(default_threads());
  return *g_pool;
}

}  // namespace

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  if (n < 1) n = 1;
  ThreadPool& p = pool();
  std::lock_guard<std::mutex> lk(g_pool_mutex);
  p.resize(n);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (grain < 1) grain = 1;
  int64_t chunks = num_chunks(n, grain);
  if (chunks == 0) return;
  auto body = [&](int64_t c) {
    int64_t b = c * grain;
    int64_t e = b + grain < n ? b + grain : n;
    fn(c, b, e);
  };
  if (chunks == 1 || t_in_worker) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  ThreadPool& p = pool();
  if (p.size() == 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
    return;
  }
  p.run(chunks, body);
}

bool runs_inline() { return t_in_worker; }

int64_t spin_microseconds() { return g_spin_us.load(std::memory_order_relaxed); }

void set_spin_microseconds(int64_t us) { g_spin_us.store(std::clamp<int64_t>(us, 0, kMaxSpinUs)); }

SerialScope::SerialScope() : previous_(t_in_worker) { t_in_worker = true; }
SerialScope::~SerialScope() { t_in_worker = previous_; }

}  // namespace kiln::cpu
