// Process groups: the collectives a data-parallel training run needs (all-reduce, reduce-scatter,
// all-gather, broadcast, barrier) and the point-to-point sends they are built from, over a backend
// that moves the bytes (MPI for CPU tensors, NCCL for CUDA tensors). Non-obvious
// decisions:
// - kiln's own ring all-reduce (dist/ring.h) uses only the backend's isend_irecv, so the algorithm is
//   written once and runs on any backend; the backend's native all-reduce is the default and the
//   ring is selected per call (AllReduceAlgo), so the two can be measured against each other.
// - Collectives act in place on whole dense tensors. All-reduce, broadcast and point to point pair
//   elements by their place in memory, so they take any layout whose elements fill one block
//   (row-major, channels-last, a transposed matrix; PyTorch's take channels-last too), provided
//   every rank passes the same layout; reduce-scatter and all-gather cut their tensors into rank
//   slots of the row-major order, so they need contiguous ones.
// - Collectives check their arguments on every rank before any byte moves: a mismatch is a
//   kiln::Error on the rank that has it, never a hang in a collective half the ranks entered. What
//   the other ranks passed cannot be checked without a collective of its own: by default a size
//   (or layout) mismatch between ranks is the backend's error (on some ranks only, or none) or a
//   wrong result; KILN_DIST_DEBUG=1 adds that collective (dist_debug()).
// - Collectives are asynchronous: a call checks its arguments, issues the collective and returns a
//   Work handle at once. Every rank must issue the same collectives in the same order (that is how
//   backends match them); they run in that order. The caller must neither read nor write the
//   tensors until the Work is done. The MPI backend runs them on one communication thread per
//   process, so a collective overlaps whatever the caller does next (DDP's buckets overlap the rest
//   of backward); the NCCL backend enqueues them on a communication stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace kiln::dist {

// The reductions of all_reduce and reduce_scatter, as PyTorch's ReduceOp: Avg needs a float dtype;
// a floating Max or Min is NaN where any rank's is; integers wrap (Sum, Product). Bool tensors take
// Sum and Max as "any rank's is true" and Product and Min as "every rank's is" (PyTorch's mapping).
enum class ReduceOp : uint8_t { Sum, Avg, Max, Min, Product };
const char* reduce_op_name(ReduceOp op);

enum class AllReduceAlgo : uint8_t {
  Native,  // the backend's own all-reduce (MPI_Allreduce, ncclAllReduce)
  Ring,    // kiln's ring: reduce-scatter then all-gather over isend_irecv (dist/ring.h)
};
const char* all_reduce_algo_name(AllReduceAlgo algo);

// A collective in flight. wait() returns once the result may be used by the caller and rethrows
// the collective's error, if any: for CPU tensors when the result is in the tensor; for CUDA
// tensors when the caller's current stream has been made to wait for the collective (the host does
// not wait). synchronize() also waits on the host, whatever the device. completed() says whether
// the collective is done, without waiting.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual void synchronize() { wait(); }
  virtual bool completed() const = 0;
};

// A Work that is done when it is made (blocking backends).
std::shared_ptr<Work> completed_work();

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // Where this group's tensors live: the CPU for MPI, this rank's CUDA device for NCCL.
  virtual Device device() const = 0;

  // tensor = op over the ranks' tensors, on every rank. Avg divides the sum by size() (float dtypes
  // only; float16 divides each rank's tensor first, as NCCL's average does, so that a sum past
  // float16's largest value cannot make an average that fits inf). float16/bfloat16 add in float32.
  // Every rank passes a tensor of the same dtype and numel.
  virtual std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                                           AllReduceAlgo algo = AllReduceAlgo::Native);
  // output (numel n) = op over the ranks of their input's slice [rank * n, (rank + 1) * n); input
  // has size() * n elements. Avg as for all_reduce.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  // output (numel size() * n) = every rank's input (numel n), in rank order.
  virtual std::shared_ptr<Work> all_gather(Tensor& output, const Tensor& input) = 0;
  // tensor = root's tensor, on every rank (the same layout on every rank, as all_reduce).
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root);
  virtual void barrier() = 0;
  // Point to point, non-blocking: the Work completes when `tensor` may be reused (isend) or holds
  // the message (irecv); it keeps the tensor alive until then. Messages between two ranks with the
  // same tag arrive in the order they were sent. Tags are 0 to kMaxTag (the tag after it is kiln's
  // ring all-reduce's, so that no message of the caller's meets its pieces).
  static constexpr int kMaxTag = 32766;
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, int tag = 0);
  std::shared_ptr<Work> irecv(Tensor& tensor, int src, int tag = 0);
  // Blocking forms of the same.
  void send(const Tensor& tensor, int dst, int tag = 0);
  void recv(Tensor& tensor, int src, int tag = 0);
  // Sends `out` to dst while receiving `in` from src, as one operation that completes when both
  // have: an exchange around a ring cannot deadlock the way a blocking send to the right before a
  // receive from the left can (NCCL needs the two in one group for that; MPI posts both). Either
  // side may be left out with an undefined tensor. Both sides are checked before either is posted.
  std::shared_ptr<Work> isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int tag = 0);
  // The blocking form.
  void send_recv(const Tensor& out, int dst, Tensor& in, int src, int tag = 0);
  // isend_irecv on the ring all-reduce's own tag (dist/ring.cpp; not for other callers).
  std::shared_ptr<Work> ring_exchange(const Tensor& out, int dst, Tensor& in, int src);

 protected:
  // The point-to-point operations, with their arguments checked (check_p2p on each defined side):
  // the backend posts them. An undefined tensor is a side left out. Its own limits (MPI's message
  // size) the backend checks for both sides before it posts either.
  virtual std::shared_ptr<Work> start_isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int tag) = 0;

  // Issues the all-reduce (after all_reduce's checks, for a group of several ranks and a non-empty
  // tensor): the backend's own for AllReduceAlgo::Native, kiln's ring_all_reduce for Ring.
  virtual std::shared_ptr<Work> start_all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) = 0;
  // Issues the broadcast (after broadcast's checks, for a non-empty tensor). This, start_all_reduce
  // and start_isend_irecv get a tensor of any dense layout as a contiguous 1-d alias of its block
  // (the same memory): backends see contiguous tensors only.
  virtual std::shared_ptr<Work> start_broadcast(Tensor& tensor, int root) = 0;

  // Under KILN_DIST_DEBUG=1, called by every collective after its own rank's checks and before it
  // issues anything: the ranks all-gather what they are about to do (their count of collectives
  // so far, the collective, the dtype, the element count, the reduce op or root, the algorithm, the
  // layout)
  // and, when any differs, every rank throws a kiln::Error naming `op` and each rank's call. A
  // no-op otherwise. t may be null (barrier); `arg` is the reduce op or the root, `algo` the
  // all-reduce algorithm (else 0).
  void agree_across_ranks(const char* op, const Tensor* t, int64_t arg, int64_t algo);

 private:
  int64_t debug_calls_ = 0;  // collectives checked by agree_across_ranks so far
};

// The process group of this process: under mpirun (or any MPI launcher, Slurm's srun included),
// every rank of MPI_COMM_WORLD. MPI is initialized on the first call and finalized at exit. A build
// without MPI, or a process started without a launcher where MPI cannot initialize, is a kiln::Error
// saying so. Every call waits at most KILN_DIST_TIMEOUT seconds (default 600) for the other ranks,
// then fails with an Error naming this rank and the call (and, for point to point, the peer); the
// job is then aborted when the process exits.
ProcessGroup& world();
// The NCCL process group of this process, for CUDA tensors (created on the first call). Under an MPI
// launcher: every rank of MPI_COMM_WORLD, the NCCL id broadcast over MPI. Under an env:// launcher
// (RANK and WORLD_SIZE set; also LOCAL_RANK, MASTER_ADDR, MASTER_PORT): the id sent by rank 0 over
// kiln's TCP rendezvous (dist/rendezvous.h). Started alone: a group of one. Each process uses CUDA
// device (local rank) % (device count); NCCL refuses two ranks on one device. A build without NCCL,
// or a machine without a usable device, is a kiln::Error saying so.
ProcessGroup& nccl_world();
// Whether kiln was built with NCCL.
bool nccl_available();
// The group for tensors on `device`: nccl_world() for CUDA, world() (MPI) for the CPU.
ProcessGroup& world_for(Device device);

// KILN_DIST_TIMEOUT: the seconds a rank waits for another before it gives up (unset: 600). A value
// that is not a positive number is a kiln::Error quoting it.
double dist_timeout();
// KILN_DIST_DEBUG=1: before each collective, the ranks compare what they are about to do, so a rank
// that passes another shape or dtype, or calls collectives in another order, is a kiln::Error on
// every rank instead of a truncated message on some, a wrong result or a hang. A debugging aid, not
// for speed: one small all-gather and, for NCCL, a host sync per collective, and a collective call
// returns only once every rank has reached it. Unset or 0: off; any other value is a kiln::Error
// quoting it. Read once per process.
bool dist_debug();

// Whether kiln was built with MPI (dist/ has a backend).
bool mpi_available();

// The checks every collective makes on its own rank: defined, contiguous (with `any_dense`: any
// layout whose elements fill one block), on the CPU for MPI (the backend's devices). `op` names the
// collective in the message.
void check_tensor(const char* op, const Tensor& t, const ProcessGroup& group, bool any_dense = false);
// A peer or root `rank` of `group`: an IndexError naming `op` when outside [0, size()).
void check_rank(const char* op, int rank, const ProcessGroup& group);

namespace detail {
// A Work done when both are (an exchange's receive and send), for the backends.
std::shared_ptr<Work> both_work(std::shared_ptr<Work> a, std::shared_ptr<Work> b);
// For all_gather's and reduce_scatter's input and output (contiguous: check_tensor): whether they
// share any byte, and whether `slot` is exactly rank `rank`'s share of `whole` (the in-place form).
bool shares_bytes(const Tensor& a, const Tensor& b);
bool is_rank_slot(const Tensor& whole, const Tensor& slot, int rank);
// One rank's call as KILN_DIST_DEBUG's fingerprint words describe it, for the error that lists the
// ranks' calls: {call count, collective code, dtype, numel, reduce op or root, algorithm, layout
// (layout_code)}. Codes of collectives, dtypes, ops, algorithms and layouts that another build may
// send and this one does not know are named as numbers.
std::string describe_call(const int64_t* words);
// A dense tensor's layout as one number: 0 when row-major, else its dims longer than one from the
// outermost in memory to the innermost, each as (dim + 1) in 4 bits (a channels-last NCHW tensor:
// 0x1342). Ranks that pass the same layout send the same code.
int64_t layout_code(const Tensor& t);
}  // namespace detail

}  // namespace kiln::dist
