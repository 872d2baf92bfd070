// The MPI backend: CPU tensors over MPI_COMM_WORLD. Non-obvious decisions:
// - Point-to-point moves bytes (MPI_BYTE), so every dtype travels the same way.
// - The native all-reduce maps kiln's dtypes to MPI's. float16 and bfloat16, which MPI has no type
//   for, get user-defined 2-byte types whose sum and max run kiln's float32 reduction
//   (dist/reduce.h); uint8 goes the same way, because Open MPI 4.1's vectorized uint8 sum saturates
//   at 255 where kiln (and PyTorch) wrap around, which the tests caught at 64 elements and more.
// - Counts above MPI's int are sent in parts; MPI_COMM_WORLD returns errors instead of aborting, so
//   a failed call is a kiln::Error.
// - Collectives run on one communication thread per process, in the order they were issued, so
//   that they overlap the caller's work (DDP's buckets overlap backward); the caller's Work waits
//   on the host. MPI is initialized with MPI_THREAD_MULTIPLE, because point-to-point calls from the
//   caller's thread may then run while the communication thread is inside a blocking collective.
//   A caller that waits for a collective still queued with nothing before it runs it itself, which
//   spares a small collective the hand-off to the thread and back.
// - Nothing waits forever (KILN_DIST_TIMEOUT seconds, default 600). Point-to-point messages are
//   posted non-blocking and waited for with that deadline, which turns a lost peer into an Error
//   naming it; a request is then still pending, so the process aborts the job at exit instead of
//   finalizing, and later collectives fail at once. Collectives stay MPI's blocking calls, because
//   Open MPI's non-blocking collectives are a different and slower implementation (about 2 to 2.5
//   times the time of MPI_Allreduce at 1 to 4 MiB on 2 ranks in a quick comparison); a watchdog
//   thread watches each one and, past the deadline, prints which call on which rank timed out and
//   ends the process, and the launcher then ends the job.
// Built without MPI, world() says so.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/flat.h"
#include "dist/process_group.h"
#include "dist/reduce.h"
#include "dist/ring.h"
#include "kernels/cpu/parallel.h"
#include "kernels/error.h"

#ifdef KILN_WITH_MPI
#include <mpi.h>
#endif

namespace kiln::dist {

#ifdef KILN_WITH_MPI
namespace {

constexpr int64_t kMaxCount = int64_t{1} << 30;  // elements per MPI call, below INT_MAX

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error("dist (mpi): " + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

std::atomic<bool> g_broken{false};  // a call timed out: a request is still pending, MPI cannot be finalized

// Waits for `request`: spinning at first (a small message completes in microseconds), then
// sleeping up to a millisecond between tests, until the deadline.
void wait_request(MPI_Request& request, const std::string& what, int rank, int size) {
  static const double timeout = dist_timeout();
  const auto start = std::chrono::steady_clock::now();
  std::chrono::microseconds nap(0);
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout) {
      g_broken = true;
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout);
      throw Error("dist (mpi): " + what + " did not complete within KILN_DIST_TIMEOUT=" + secs + " s on rank " +
                  std::to_string(rank) + " of " + std::to_string(size) +
                  ": another rank exited, hangs, or never reached this call; the job aborts when this process exits");
    }
    if (waited > 1e-4) {
      nap = std::min(std::chrono::microseconds(1000), nap + std::chrono::microseconds(20));
      std::this_thread::sleep_for(nap);
    }
  }
}

// The watchdog of blocking collectives. Arming and disarming are two relaxed atomic stores (a
// collective of a few microseconds must not pay for a lock or a thread wake-up); the watchdog
// thread looks every 50 ms and, when the armed call is past its deadline, reports it on stderr and
// ends the process. One call at a time is watched (only the communication thread makes them). Its
// state is never freed, so the detached thread cannot outlive it.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog();
    return *w;
  }
  void arm(const char* what, int root) {
    what_.store(what, std::memory_order_relaxed);
    root_.store(root, std::memory_order_relaxed);
    since_.store(now_ns(), std::memory_order_release);
  }
  void disarm() { since_.store(0, std::memory_order_release); }
  void set_rank(int rank, int size) {
    rank_ = rank;
    size_ = size;
  }

 private:
  Watchdog() : timeout_ns_(static_cast<int64_t>(dist_timeout() * 1e9)) {
    std::thread([this] { watch(); }).detach();
  }
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void watch() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int64_t since = since_.load(std::memory_order_acquire);
      if (since == 0 || now_ns() - since <= timeout_ns_) continue;
      const int root = root_.load(std::memory_order_relaxed);
      std::fprintf(stderr,
                   "kiln dist (mpi): %s%s did not complete within KILN_DIST_TIMEOUT=%g s on rank %d of %d: another "
                   "rank exited, hangs, or never reached this call; ending this process (and so the job)\n",
                   what_.load(std::memory_order_relaxed),
                   root >= 0 ? (" from rank " + std::to_string(root)).c_str() : "", static_cast<double>(timeout_ns_) / 1e9,
                   rank_, size_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  std::atomic<int64_t> since_{0};  // when the watched call started (steady clock, ns); 0: none
  std::atomic<const char*> what_{""};
  std::atomic<int> root_{-1};
  int rank_ = 0, size_ = 1;
  int64_t timeout_ns_;
};

// Watches one blocking collective for the scope (`root`: a broadcast's root, else -1).
class Watched {
 public:
  explicit Watched(const char* what, int root = -1) { Watchdog::get().arm(what, root); }
  ~Watched() { Watchdog::get().disarm(); }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;
};

MPI_Datatype g_half = MPI_DATATYPE_NULL, g_bf16 = MPI_DATATYPE_NULL, g_u8 = MPI_DATATYPE_NULL;
MPI_Op g_sum = MPI_OP_NULL, g_max = MPI_OP_NULL, g_min = MPI_OP_NULL, g_prod = MPI_OP_NULL;

// The user-defined ops: MPI calls them with the type it was given, which tells the dtype (kiln's
// 2-byte types, or float32 and float64 for the maximum and minimum).
void user_reduce(void* in, void* inout, int* len, MPI_Datatype* type, ReduceOp op) {
  DType dt = DType::Float16;
  if (*type == g_bf16) dt = DType::BFloat16;
  if (*type == g_u8) dt = DType::UInt8;
  if (*type == MPI_FLOAT) dt = DType::Float32;
  if (*type == MPI_DOUBLE) dt = DType::Float64;
  detail::reduce_into(inout, in, *len, dt, op);
}
void user_sum(void* in, void* inout, int* len, MPI_Datatype* type) { user_reduce(in, inout, len, type, ReduceOp::Sum); }
void user_max(void* in, void* inout, int* len, MPI_Datatype* type) { user_reduce(in, inout, len, type, ReduceOp::Max); }
void user_min(void* in, void* inout, int* len, MPI_Datatype* type) { user_reduce(in, inout, len, type, ReduceOp::Min); }
void user_prod(void* in, void* inout, int* len, MPI_Datatype* type) {
  user_reduce(in, inout, len, type, ReduceOp::Product);
}

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: return g_u8;
    case DType::Bool: return MPI_UINT8_T;
    case DType::Float16: return g_half;
    case DType::BFloat16: return g_bf16;
  }
  return MPI_DATATYPE_NULL;
}

// kiln's own op where MPI has no type (float16, bfloat16) or does not do what kiln does: uint8 sums
// and products wrap around (Open MPI's saturate), and a floating maximum or minimum is NaN when any
// rank's is (MPI_MAX and MPI_MIN keep or drop a NaN depending on which rank holds it). Bool comes
// as Max or Min (detail::effective_op) on bytes of 0 or 1, which MPI's own do right.
MPI_Op mpi_op(DType dt, ReduceOp op) {
  const bool user = dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::UInt8;
  const bool nan_rule = user || dt == DType::Float32 || dt == DType::Float64;
  switch (op) {
    case ReduceOp::Max: return nan_rule ? g_max : MPI_MAX;
    case ReduceOp::Min: return nan_rule ? g_min : MPI_MIN;
    case ReduceOp::Product: return user ? g_prod : MPI_PROD;
    case ReduceOp::Sum:
    case ReduceOp::Avg: break;  // Avg: a sum, divided after
  }
  return user ? g_sum : MPI_SUM;
}

// Buffers of requests that never completed (this rank timed out): MPI may still write into them when
// a late message lands, so they are never freed, where the allocator would hand the memory to the
// next tensor. Reachable from here until the process exits (the job aborts then anyway).
void abandon_buffer(Tensor buffer) {
  static std::mutex mutex;
  static auto* abandoned = new std::vector<Tensor>();
  std::lock_guard<std::mutex> lock(mutex);
  abandoned->push_back(std::move(buffer));
}

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, Tensor keep, std::string what, int rank, int size)
      : request_(request), keep_(std::move(keep)), what_(std::move(what)), rank_(rank), size_(size) {}
  ~MpiWork() override {
    // Never leave MPI a buffer that is about to be freed: wait for it, or (after a timeout, when
    // the job is aborting) keep the buffer for good.
    if (request_ != MPI_REQUEST_NULL && !g_broken) {
      try {
        wait_request(request_, what_, rank_, size_);
      } catch (const Error&) {  // a destructor must not throw: the job aborts at exit (g_broken)
      }
    }
    if (request_ != MPI_REQUEST_NULL && keep_.defined()) abandon_buffer(std::move(keep_));
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    wait_request(request_, what_, rank_, size_);
  }
  bool completed() const override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), what_);
    return done != 0;
  }

 private:
  mutable MPI_Request request_;
  Tensor keep_;
  std::string what_;
  int rank_, size_;
};

class CommThread;

// A collective queued for the communication thread: its function runs once, there or (see
// CommThread::try_run) on the thread that waits for it; wait() returns when it has, and rethrows
// what it threw.
class QueuedWork final : public Work {
 public:
  QueuedWork(CommThread* owner, std::function<void()> fn) : owner_(owner), fn_(std::move(fn)) {}
  void run() {
    std::exception_ptr error;
    try {
      if (g_broken) {
        throw Error("dist (mpi): an earlier call timed out on this rank, so no collective can run; the job aborts "
                    "when this process exits");
      }
      fn_();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = nullptr;  // releases the tensors it holds
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }
  void wait() override;
  bool completed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  CommThread* owner_;
  std::function<void()> fn_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// The communication thread: runs queued collectives one at a time, in issue order. stop() lets it
// finish what was queued and joins it (at exit, before MPI_Finalize).
class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  std::shared_ptr<Work> submit(std::function<void()> fn) {
    auto work = std::make_shared<QueuedWork>(this, std::move(fn));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(work);
    }
    cv_.notify_one();
    return work;
  }
  // Runs `work` on the calling thread when it is next in line and nothing is running: a caller
  // that waits at once (all_reduce(...)->wait()) then pays no hand-off to the thread and back.
  // Returns whether it ran it.
  bool try_run(const QueuedWork* work) {
    std::shared_ptr<QueuedWork> job;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (busy_ || queue_.empty() || queue_.front().get() != work) return false;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    run_claimed(*job);
    cv_.notify_one();  // the thread may be waiting for busy_ to clear, with more queued
    return true;
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    cpu::SerialScope serial;  // kiln ops here (the ring's reductions) run inline, off the shared pool
    for (;;) {
      std::shared_ptr<QueuedWork> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !busy_ && (stopping_ || !queue_.empty()); });
        if (queue_.empty()) return;  // stopping, and everything queued has run
        job = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      run_claimed(*job);
    }
  }
  // Runs a job this thread has claimed (busy_ set), then lets the next one start.
  void run_claimed(QueuedWork& job) {
    job.run();
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<QueuedWork>> queue_;
  bool busy_ = false;  // a collective is running (here or on a waiting caller): one at a time, in order
  bool stopping_ = false;
  std::thread thread_;
};

void QueuedWork::wait() {
  if (!completed()) owner_->try_run(this);
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

CommThread* g_comm = nullptr;  // made with the process group, stopped and left at exit

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        throw Error("dist: MPI_Init failed; start the program with mpirun (or srun)");
      }
      std::atexit([] {
        if (g_comm != nullptr) g_comm->stop();
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        if (g_broken) MPI_Abort(MPI_COMM_WORLD, 1);  // a call is still pending: end every rank
        MPI_Finalize();
      });
    }
    int level = 0;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
      throw Error("dist: MPI runs at thread level " + std::to_string(level) + ", below MPI_THREAD_MULTIPLE (" +
                  std::to_string(MPI_THREAD_MULTIPLE) +
                  "), which kiln's communication thread needs (an MPI library built without it, or MPI initialized "
                  "by the program at a lower level)");
    }
    // A bad KILN_DIST_TIMEOUT or KILN_DIST_DEBUG is an error now, not at the first wait or collective.
    (void)dist_timeout();
    (void)dist_debug();
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    Watchdog::get().set_rank(rank_, size_);
    MPI_Type_contiguous(1, MPI_UINT16_T, &g_half);
    MPI_Type_commit(&g_half);
    MPI_Type_contiguous(1, MPI_UINT16_T, &g_bf16);
    MPI_Type_commit(&g_bf16);
    MPI_Type_contiguous(1, MPI_UINT8_T, &g_u8);
    MPI_Type_commit(&g_u8);
    MPI_Op_create(&user_sum, /*commute=*/1, &g_sum);
    MPI_Op_create(&user_max, /*commute=*/1, &g_max);
    MPI_Op_create(&user_min, /*commute=*/1, &g_min);
    MPI_Op_create(&user_prod, /*commute=*/1, &g_prod);
    g_comm = new CommThread();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor("reduce_scatter", output, *this);
    check_tensor("reduce_scatter", input, *this);
    check_pair("reduce_scatter", output, input, output.numel() * size_, "size() x the output's");
    detail::check_supported("reduce_scatter", output.dtype(), op);
    if (output.numel() > kMaxCount) throw Error("reduce_scatter: more than 2^30 elements per rank");
    agree_across_ranks("reduce_scatter", &output, static_cast<int64_t>(op), 0);
    op = detail::effective_op(output.dtype(), op);
    // float16's average divides a copy of the input first, as all_reduce does, in the job: the
    // input is read in issue order, after any collective before this one that writes it.
    // An input that shares memory with the output is copied first (MPI requires them apart).
    const bool apart = !detail::shares_bytes(output, input);
    return g_comm->submit([output, input = Tensor(input), op, n = size_, apart]() mutable {
      const bool f16_avg = op == ReduceOp::Avg && input.dtype() == DType::Float16 && n > 1;
      if (f16_avg || !apart) input = input.clone();
      if (f16_avg) op = detail::averaging_op(input, n);
      Watched watch("reduce_scatter");
      check_mpi(MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), static_cast<int>(output.numel()),
                                         mpi_type(output.dtype()), mpi_op(output.dtype(), op), MPI_COMM_WORLD),
                "MPI_Reduce_scatter_block");
      if (op == ReduceOp::Avg) detail::divide(output.data_ptr(), output.numel(), output.dtype(), n);
    });
  }
  std::shared_ptr<Work> all_gather(Tensor& output, const Tensor& input) override {
    check_tensor("all_gather", output, *this);
    check_tensor("all_gather", input, *this);
    check_pair("all_gather", output, input, input.numel() * size_, "size() x the input's");
    const int64_t bytes = input.numel() * static_cast<int64_t>(input.element_size());
    if (bytes > kMaxCount) throw Error("all_gather: more than 2^30 bytes per rank");
    agree_across_ranks("all_gather", &input, 0, 0);
    // MPI requires the input apart from the output: this rank's own slot of it goes in place, any
    // other input that shares memory with the output is copied first.
    const bool in_place = detail::is_rank_slot(output, input, rank_);
    const bool apart = in_place || !detail::shares_bytes(output, input);
    return g_comm->submit([output, input = Tensor(input), bytes, in_place, apart]() mutable {
      if (!apart) input = input.clone();
      Watched watch("all_gather");
      check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : input.data_ptr(), static_cast<int>(bytes), MPI_BYTE,
                              output.data_ptr(), static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD),
                "MPI_Allgather");
    });
  }
  void barrier() override {
    agree_across_ranks("barrier", nullptr, 0, 0);
    g_comm->submit([] {
      Watched watch("barrier");
      check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    })->wait();
  }

 protected:
  std::shared_ptr<Work> start_broadcast(Tensor& tensor, int root) override {
    return g_comm->submit([tensor, root] {
      auto* p = static_cast<char*>(tensor.data_ptr());
      const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
      for (int64_t b = 0; b < bytes; b += kMaxCount) {
        Watched watch("broadcast", root);
        check_mpi(MPI_Bcast(p + b, static_cast<int>(std::min(kMaxCount, bytes - b)), MPI_BYTE, root, MPI_COMM_WORLD),
                  "MPI_Bcast");
      }
    });
  }
  std::shared_ptr<Work> start_isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int tag) override {
    // MPI's limit on a message, for both sides before either is posted.
    if (out.defined()) check_message("isend", out);
    if (in.defined()) check_message("irecv", in);
    std::shared_ptr<Work> r = in.defined() ? p2p(in, src, tag, /*send=*/false) : completed_work();
    std::shared_ptr<Work> s = out.defined() ? p2p(const_cast<Tensor&>(out), dst, tag, /*send=*/true) : completed_work();
    return detail::both_work(std::move(r), std::move(s));
  }

  // float16's average divides each rank's tensor first (detail::averaging_op), in the job: in issue
  // order, after the collectives before it that write the tensor.
  std::shared_ptr<Work> start_all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) override {
    if (algo == AllReduceAlgo::Ring) {
      return g_comm->submit([this, tensor, op]() mutable {
        if (op == ReduceOp::Avg) op = detail::averaging_op(tensor, size_);
        ring_all_reduce(*this, tensor, op);
      });
    }
    return g_comm->submit([tensor, op, n = size_]() mutable {
      if (op == ReduceOp::Avg) op = detail::averaging_op(tensor, n);
      auto* p = static_cast<char*>(tensor.data_ptr());
      const int64_t numel = tensor.numel(), es = static_cast<int64_t>(tensor.element_size());
      for (int64_t b = 0; b < numel; b += kMaxCount) {
        Watched watch("all_reduce");
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, p + b * es, static_cast<int>(std::min(kMaxCount, numel - b)),
                                mpi_type(tensor.dtype()), mpi_op(tensor.dtype(), op), MPI_COMM_WORLD),
                  "MPI_Allreduce");
      }
      if (op == ReduceOp::Avg) detail::divide(tensor.data_ptr(), numel, tensor.dtype(), n);
    });
  }

 private:
  void check_pair(const char* op, const Tensor& out, const Tensor& in, int64_t expected, const char* what) const {
    if (out.dtype() != in.dtype()) {
      throw DTypeError(std::string(op) + ": output " + dtype_name(out.dtype()) + " and input " +
                       dtype_name(in.dtype()) + " differ");
    }
    const int64_t big = std::string(op) == "all_gather" ? out.numel() : in.numel();
    if (big != expected) {
      throw ShapeError(std::string(op) + ": " + (std::string(op) == "all_gather" ? "output" : "input") + " has " +
                       std::to_string(big) + " elements, expected " + what + " " + std::to_string(expected) +
                       " (output " + shape_str(out.sizes()) + ", input " + shape_str(in.sizes()) + ", " +
                       std::to_string(size_) + " ranks)");
    }
  }
  static void check_message(const char* op, const Tensor& tensor) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    if (bytes > kMaxCount) throw Error(std::string(op) + ": messages are limited to 2^30 bytes, got " + std::to_string(bytes));
  }
  // Posts one side (checked: ProcessGroup::check_p2p and check_message). Tags up to 32767 are in
  // every MPI's range.
  std::shared_ptr<Work> p2p(Tensor& tensor, int peer, int tag, bool send) {
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    MPI_Request request = MPI_REQUEST_NULL;
    const std::string what = std::string(send ? "MPI_Isend to rank " : "MPI_Irecv from rank ") + std::to_string(peer);
    if (send) {
      check_mpi(MPI_Isend(tensor.data_ptr(), static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &request),
                what);
    } else {
      check_mpi(MPI_Irecv(tensor.data_ptr(), static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &request),
                what);
    }
    return std::make_shared<MpiWork>(request, tensor, what, rank_, size_);
  }

  int rank_ = 0, size_ = 1;
};

}  // namespace

bool mpi_available() { return true; }

ProcessGroup& world() {
  static MpiProcessGroup* group = new MpiProcessGroup();  // lives until exit, after MPI_Finalize's atexit
  return *group;
}

#else

bool mpi_available() { return false; }

ProcessGroup& world() {
  throw Error("dist::world: kiln was built without MPI; install libopenmpi-dev (tools/setup.sh does) and rebuild");
}

#endif

}  // namespace kiln::dist
