// ProcessGroup's shared parts: argument checks, the choice between the native and the ring
// all-reduce, and the blocking point-to-point forms.
#include "dist/process_group.h"

#include <string>

#include "dist/reduce.h"
#include "dist/ring.h"
#include "kernels/error.h"

namespace kiln::dist {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool completed() const override { return true; }
};

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

const char* all_reduce_algo_name(AllReduceAlgo algo) { return algo == AllReduceAlgo::Ring ? "ring" : "native"; }

std::shared_ptr<Work> completed_work() { return std::make_shared<DoneWork>(); }

void check_tensor(const char* op, const Tensor& t, const ProcessGroup& group) {
  if (!t.defined()) throw Error(std::string(op) + ": the tensor is undefined");
  if (!t.is_contiguous()) {
    throw Error(std::string(op) + ": the tensor " + shape_str(t.sizes()) +
                " must be contiguous (collectives move its bytes as one block)");
  }
  if (group.backend() == "mpi" && !t.is_cpu()) {
    throw DeviceError(std::string(op) + ": the mpi backend moves CPU tensors, got one on " + t.device().str());
  }
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) {
  check_tensor("all_reduce", tensor, *this);
  if (!detail::supports(tensor.dtype(), op)) {
    throw DTypeError(std::string("all_reduce: ") + reduce_op_name(op) + " of " + dtype_name(tensor.dtype()) +
                     " tensors is not supported" + (op == ReduceOp::Avg ? " (avg needs a float dtype)" : ""));
  }
  if (size() == 1 || tensor.numel() == 0) {
    return completed_work();  // the reduction of one tensor (avg divides by 1)
  }
  if (algo == AllReduceAlgo::Ring) {
    ring_all_reduce(*this, tensor, op);
  } else {
    native_all_reduce(tensor, op);
  }
  return completed_work();
}

void ProcessGroup::send(const Tensor& tensor, int dst, int tag) { isend(tensor, dst, tag)->wait(); }

void ProcessGroup::recv(Tensor& tensor, int src, int tag) { irecv(tensor, src, tag)->wait(); }

void ProcessGroup::send_recv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  std::shared_ptr<Work> r = irecv(in, src, tag);
  std::shared_ptr<Work> s = isend(out, dst, tag);
  r->wait();
  s->wait();
}

}  // namespace kiln::dist
