// The NCCL backend: CUDA tensors over one NCCL communicator per process. Non-obvious decisions:
// - Every collective runs on the group's communication stream (a high-priority stream of its own),
//   after an event recorded on the caller's current stream: it starts once the producer's work is
//   done, and the caller's stream goes on (backward overlaps the all-reduce). The Work records an
//   event on the communication stream; wait() makes the caller's current stream wait for it, and
//   only synchronize() (or barrier()) makes the host wait.
// - Each tensor a collective reads or writes is marked as used on the communication stream
//   (record_stream), so the caching allocator does not hand its memory out again before the
//   collective is done, even if the caller drops the tensor at once.
// - The communicator is non-blocking (ncclConfig_t::blocking = 0): initialization and every call
//   return at once and are polled, so nothing waits past KILN_DIST_TIMEOUT. A rank that never
//   joins, or NCCL's asynchronous errors (a peer that died, a network error), abort the
//   communicator and become a kiln::Error naming this rank; the group refuses every later call.
// - NCCL has no message tags: messages between two ranks keep their order, which is all the ring
//   needs; isend_irecv puts the two calls in one NCCL group, without which a ring of exchanges
//   deadlocks.
// - The NCCL id travels over MPI under an MPI launcher (mpirun, srun with PMI), or over kiln's TCP
//   rendezvous (dist/rendezvous.h) under env:// launchers; a process started alone is a group of one.
// Built without NCCL (CPU builds), nccl_world() says so.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/ops/factory.h"
#include "core/storage.h"
#include "dist/flat.h"
#include "dist/process_group.h"
#include "dist/reduce.h"
#include "dist/rendezvous.h"
#include "dist/ring.h"
#include "kernels/error.h"

#ifdef KILN_WITH_NCCL
#include <nccl.h>
#endif

namespace kiln::dist {

#ifdef KILN_WITH_NCCL
namespace {

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8:
    case DType::Bool: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class NcclProcessGroup;

// A collective on the communication stream: `done` is recorded after it.
class NcclWork final : public Work {
 public:
  NcclWork(NcclProcessGroup* group, std::shared_ptr<cuda::Event> done) : group_(group), done_(std::move(done)) {}
  void wait() override;
  void synchronize() override;
  bool completed() const override;

 private:
  NcclProcessGroup* group_;
  std::shared_ptr<cuda::Event> done_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int device, const ncclUniqueId& id) : rank_(rank), size_(size), device_(device) {
    cuda::DeviceGuard on(device_);
    stream_ = std::make_unique<cuda::CudaStream>(device_, /*high_priority=*/true);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override {
    check_tensor("reduce_scatter", output, *this);
    check_tensor("reduce_scatter", input, *this);
    check_pair("reduce_scatter", output, input, input.numel(), output.numel() * size_);
    detail::check_supported("reduce_scatter", output.dtype(), op);
    check_apart("reduce_scatter", input, output);
    agree_across_ranks("reduce_scatter", &output, static_cast<int64_t>(op), 0);
    op = detail::effective_op(output.dtype(), op);
    return launch("ncclReduceScatter", {&output, &input}, [&](Stream s) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                               nccl_type(output.dtype()), nccl_op(op), comm_, s);
    });
  }
  std::shared_ptr<Work> all_gather(Tensor& output, const Tensor& input) override {
    check_tensor("all_gather", output, *this);
    check_tensor("all_gather", input, *this);
    check_pair("all_gather", output, input, output.numel(), input.numel() * size_);
    check_apart("all_gather", output, input);
    agree_across_ranks("all_gather", &input, 0, 0);
    return launch("ncclAllGather", {&output, &input}, [&](Stream s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), bytes(input), ncclUint8, comm_, s);
    });
  }
  void barrier() override {
    cuda::DeviceGuard on(device_);
    Tensor one = ones({1}, TensorOptions(DType::Int32, Device::cuda(device_)));
    all_reduce(one)->synchronize();
  }

 protected:
  std::shared_ptr<Work> start_broadcast(Tensor& tensor, int root) override {
    return launch("ncclBroadcast", {&tensor}, [&](Stream s) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), bytes(tensor), ncclUint8, root, comm_, s);
    });
  }
  // Checked by ProcessGroup; NCCL has no tags (messages between two ranks keep their order).
  std::shared_ptr<Work> start_isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int) override {
    return launch("ncclSend/ncclRecv", {&out, &in}, [&](Stream s) {
      ncclResult_t rc = ncclGroupStart();
      if (rc == ncclSuccess && out.defined()) rc = ncclSend(out.data_ptr(), bytes(out), ncclUint8, dst, comm_, s);
      if (rc == ncclSuccess && in.defined()) rc = ncclRecv(in.data_ptr(), bytes(in), ncclUint8, src, comm_, s);
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

 public:
  // Raises the communicator's asynchronous error, if any (aborting it first).
  void check_async(const char* during) {
    if (broken_) throw Error(std::string("dist (nccl): ") + during + " on rank " + std::to_string(rank_) + ": " + broken_why_);
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) fail(during, state);
  }
  // Marks the group broken, aborts the communicator and throws an Error naming this rank.
  [[noreturn]] void fail(const std::string& during, ncclResult_t state, const std::string& why = "") {
    const char* last = ncclGetLastError(comm_);
    broken_why_ = why.empty() ? std::string(ncclGetErrorString(state)) + (last && *last ? std::string(" (") + last + ")" : "")
                              : why;
    broken_ = true;
    ncclCommAbort(comm_);
    throw Error("dist (nccl): " + during + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                ": " + broken_why_ + "; the communicator is aborted and this group refuses every later call");
  }
  // Waits on the host for `done`, checking for asynchronous errors, until KILN_DIST_TIMEOUT.
  void host_wait(const cuda::Event& done) {
    static const double timeout = dist_timeout();
    const auto start = std::chrono::steady_clock::now();
    while (!done.query()) {
      check_async("a collective");
      if (seconds_since(start) > timeout) {
        fail("a collective", ncclInternalError,
             "it did not complete within KILN_DIST_TIMEOUT=" + num_str(timeout) +
                 " s: another rank exited, hangs, or never reached this call");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    check_async("a collective");
  }

 protected:
  std::shared_ptr<Work> start_all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) override {
    // float16's average: divided first, on the caller's current stream (the communication stream
    // waits for it), which first waits for the collectives before this one: the division reads and
    // writes the tensor in issue order, as on MPI.
    if (op == ReduceOp::Avg && tensor.dtype() == DType::Float16 && size_ > 1) {
      cuda::DeviceGuard on(device_);
      cuda::Event before;
      before.record(stream_->get());
      before.wait(cuda::current_stream(device_));
    }
    if (op == ReduceOp::Avg) op = detail::averaging_op(tensor, size_);
    if (algo == AllReduceAlgo::Ring) {
      // The ring enqueues its exchanges and reductions on the streams and returns; the caller's
      // current stream is ordered after its last step.
      ring_all_reduce(*this, tensor, op);
      return completed_work();
    }
    return launch("ncclAllReduce", {&tensor}, [&](Stream s) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                           nccl_type(tensor.dtype()), nccl_op(op), comm_, s);
    });
  }

 private:
  static size_t bytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

  // NCCL takes `slot` as this rank's share of `whole` in place; any other shared memory is refused.
  void check_apart(const char* op, const Tensor& whole, const Tensor& slot) const {
    if (detail::shares_bytes(whole, slot) && !detail::is_rank_slot(whole, slot, rank_)) {
      throw Error(std::string(op) + ": the input and the output share memory other than this rank's slot of the "
                  "larger one (" + shape_str(whole.sizes()) + " and " + shape_str(slot.sizes()) + "); clone() one");
    }
  }
  void check_pair(const char* op, const Tensor& out, const Tensor& in, int64_t big, int64_t expected) const {
    if (out.dtype() != in.dtype()) {
      throw DTypeError(std::string(op) + ": output " + dtype_name(out.dtype()) + " and input " + dtype_name(in.dtype()) +
                       " differ");
    }
    if (out.device() != in.device()) {
      throw DeviceError(std::string(op) + ": output on " + out.device().str() + " and input on " + in.device().str());
    }
    if (big != expected) {
      throw ShapeError(std::string(op) + ": expected " + std::to_string(expected) + " elements, got " +
                       std::to_string(big) + " (output " + shape_str(out.sizes()) + ", input " + shape_str(in.sizes()) +
                       ", " + std::to_string(size_) + " ranks)");
    }
  }

  // A non-blocking communicator's call may return ncclInProgress: poll until it settles.
  void settle(ncclResult_t rc, const char* what) {
    static const double timeout = dist_timeout();
    const auto start = std::chrono::steady_clock::now();
    while (rc == ncclInProgress) {
      if (seconds_since(start) > timeout) {
        fail(what, ncclInProgress,
             "it did not complete within KILN_DIST_TIMEOUT=" + num_str(timeout) + " s: a rank never joined");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm_, &rc);
    }
    if (rc != ncclSuccess) fail(what, rc);
  }

  // The caller's stream -> communication stream -> `done` pattern every call shares.
  template <class Enqueue>
  std::shared_ptr<Work> launch(const char* what, std::initializer_list<const Tensor*> tensors, Enqueue&& enqueue) {
    for (const Tensor* t : tensors) {
      if (t->defined() && t->device().index != device_) {
        throw DeviceError(std::string(what) + ": a tensor on " + t->device().str() + ", but this rank's NCCL group is on " +
                          Device::cuda(device_).str());
      }
    }
    check_async(what);
    cuda::DeviceGuard on(device_);
    const Stream caller = cuda::current_stream(device_), comm = stream_->get();
    cuda::Event ready;
    ready.record(caller);
    ready.wait(comm);
    settle(enqueue(comm), what);
    for (const Tensor* t : tensors) {
      if (t->defined() && t->storage()) t->storage()->record_stream(comm);
    }
    auto done = std::make_shared<cuda::Event>();
    done->record(comm);
    return std::make_shared<NcclWork>(this, std::move(done));
  }

  int rank_, size_, device_;
  std::unique_ptr<cuda::CudaStream> stream_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
  std::string broken_why_;
};

void NcclWork::wait() {
  group_->check_async("a collective");
  done_->wait(cuda::current_stream(group_->device().index));
}

void NcclWork::synchronize() { group_->host_wait(*done_); }

bool NcclWork::completed() const { return done_->query(); }

// This process's local rank under the launchers kiln knows, else -1.
int launcher_local_rank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != 0) return std::atoi(v);
  }
  return -1;
}

// Whether an MPI launcher started this process (then the NCCL id travels over MPI).
bool under_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

NcclProcessGroup* make_nccl_world() {
  if (!cuda::is_available()) {
    throw DeviceError("dist::nccl_world: no usable CUDA device (" + cuda::unavailable_reason() + ")");
  }
  int rank = 0, size = 1, local = -1;
  ncclUniqueId id{};
  std::vector<uint8_t> bytes(sizeof id);
  if (env_rendezvous_present()) {  // env:// (torchrun-style launchers)
    const EnvRendezvous info = env_rendezvous_from_env();
    rank = info.rank;
    size = info.world_size;
    local = info.local_rank;
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) throw Error("dist (nccl): ncclGetUniqueId failed");
    std::memcpy(bytes.data(), &id, sizeof id);
    bytes = rendezvous_broadcast(info, bytes, dist_timeout());
  } else if (under_mpi_launcher() && mpi_available()) {
    ProcessGroup& mpi = world();
    rank = mpi.rank();
    size = mpi.size();
    local = launcher_local_rank();
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) throw Error("dist (nccl): ncclGetUniqueId failed");
    Tensor blob = empty({static_cast<int64_t>(sizeof id)}, TensorOptions(DType::UInt8));
    std::memcpy(blob.data_ptr(), &id, sizeof id);
    mpi.broadcast(blob, 0)->wait();
    std::memcpy(bytes.data(), blob.data_ptr(), sizeof id);
  } else {  // started alone: a group of one
    if (ncclGetUniqueId(&id) != ncclSuccess) throw Error("dist (nccl): ncclGetUniqueId failed");
    std::memcpy(bytes.data(), &id, sizeof id);
  }
  if (bytes.size() != sizeof id) throw Error("dist (nccl): the rendezvous delivered a malformed NCCL id");
  std::memcpy(&id, bytes.data(), sizeof id);
  const int devices = cuda::device_count();
  const int device = (local >= 0 ? local : rank) % devices;
  return new NcclProcessGroup(rank, size, device, id);
}

}  // namespace

bool nccl_available() { return true; }

ProcessGroup& nccl_world() {
  static NcclProcessGroup* group = make_nccl_world();  // lives until exit
  return *group;
}

#else

bool nccl_available() { return false; }

ProcessGroup& nccl_world() {
  throw Error("dist::nccl_world: kiln was built without NCCL (a CPU build, or a CUDA toolkit without libnccl); "
              "CUDA tensors cannot be communicated");
}

#endif

ProcessGroup& world_for(Device device) { return device.is_cuda() ? nccl_world() : world(); }

}  // namespace kiln::dist
