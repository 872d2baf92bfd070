// Process groups: the collectives a data-parallel training run needs (all-reduce, reduce-scatter,
// all-gather, broadcast, barrier) and the point-to-point sends they are built from, over a backend
// that moves the bytes (MPI for CPU tensors; NCCL for CUDA tensors is the next backend). Non-obvious
// decisions:
// - kiln's own ring all-reduce (dist/ring.h) uses only the backend's send_recv, so the algorithm is
//   written once and runs on any backend; the backend's native all-reduce is the default and the
//   ring is selected per call (AllReduceAlgo), so the two can be measured against each other.
// - Collectives act in place on whole contiguous tensors and check their arguments on every rank
//   before any byte moves: a mismatch is a kiln::Error on the rank that has it, never a hang in a
//   collective half the ranks entered. (What the other ranks passed cannot be checked without a
//   collective of its own; a size mismatch between ranks is the backend's error.)
// - Calls return a Work handle. The MPI backend completes a collective before returning (MPI's
//   blocking calls); the handle exists so that code written against it (DDP's buckets) also runs
//   on a backend whose collectives are asynchronous.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace kiln::dist {

enum class ReduceOp : uint8_t { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

enum class AllReduceAlgo : uint8_t {
  Native,  // the backend's own all-reduce (MPI_Allreduce, ncclAllReduce)
  Ring,    // kiln's ring: reduce-scatter then all-gather over send_recv (dist/ring.h)
};
const char* all_reduce_algo_name(AllReduceAlgo algo);

// A collective in flight. wait() returns once the result is in the tensor (and rethrows the
// collective's error, if any); completed() says whether it is done without waiting.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
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

  // tensor = op over the ranks' tensors, on every rank. Avg divides the sum by size() (float dtypes
  // only). float16/bfloat16 add in float32. Every rank passes a tensor of the same dtype and numel.
  virtual std::shared_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                                           AllReduceAlgo algo = AllReduceAlgo::Native);
  // output (numel n) = op over the ranks of their input's slice [rank * n, (rank + 1) * n); input
  // has size() * n elements.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  // output (numel size() * n) = every rank's input (numel n), in rank order.
  virtual std::shared_ptr<Work> all_gather(Tensor& output, const Tensor& input) = 0;
  // tensor = root's tensor, on every rank.
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;
  // Point to point, non-blocking: the Work completes when `tensor` may be reused (isend) or holds
  // the message (irecv); it keeps the tensor alive until then. Messages between two ranks with the
  // same tag arrive in the order they were sent.
  virtual std::shared_ptr<Work> isend(const Tensor& tensor, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> irecv(Tensor& tensor, int src, int tag = 0) = 0;
  // Blocking forms of the same.
  void send(const Tensor& tensor, int dst, int tag = 0);
  void recv(Tensor& tensor, int src, int tag = 0);
  // Sends `out` to dst while receiving `in` from src: one exchange, which cannot deadlock a ring
  // the way a blocking send to the right before a receive from the left can.
  void send_recv(const Tensor& out, int dst, Tensor& in, int src, int tag = 0);

 protected:
  // The backend's own all-reduce (called by all_reduce for AllReduceAlgo::Native, after the checks).
  virtual void native_all_reduce(Tensor& tensor, ReduceOp op) = 0;
};

// The process group of this process: under mpirun (or any MPI launcher, Slurm's srun included),
// every rank of MPI_COMM_WORLD. MPI is initialized on the first call and finalized at exit. A build
// without MPI, or a process started without a launcher where MPI cannot initialize, is a kiln::Error
// saying so. Every call waits at most KILN_DIST_TIMEOUT seconds (default 600) for the other ranks,
// then fails with an Error naming this rank and the call (and, for point to point, the peer); the
// job is then aborted when the process exits.
ProcessGroup& world();
// Whether kiln was built with MPI (dist/ has a backend).
bool mpi_available();

// The checks every collective makes on its own rank: defined, contiguous, on the CPU for MPI (the
// backend's devices), a dtype the op supports. `op` names the collective in the message.
void check_tensor(const char* op, const Tensor& t, const ProcessGroup& group);

}  // namespace kiln::dist
