// ProcessGroup's shared parts: argument checks and the blocking point-to-point forms.
#include "dist/process_group.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "dist/flat.h"
#include "dist/reduce.h"
#include "kernels/error.h"

namespace kiln::dist {
namespace {

class DoneWork final : public Work {
 public:
  void wait() override {}
  bool completed() const override { return true; }
};

// Done when all of its parts are (an exchange's receive and send).
class BothWork final : public Work {
 public:
  BothWork(std::shared_ptr<Work> a, std::shared_ptr<Work> b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    a_->wait();
    b_->wait();
  }
  void synchronize() override {
    a_->synchronize();
    b_->synchronize();
  }
  bool completed() const override { return a_->completed() && b_->completed(); }

 private:
  std::shared_ptr<Work> a_, b_;
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

double dist_timeout() {
  const char* v = std::getenv("KILN_DIST_TIMEOUT");
  if (v == nullptr || *v == 0) return 600.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (end == v || *end != 0 || !(t > 0) || t > 1e9) {
    throw Error(std::string("dist: KILN_DIST_TIMEOUT must be a positive number of seconds, got '") + v + "'");
  }
  return t;
}

std::shared_ptr<Work> completed_work() { return std::make_shared<DoneWork>(); }

void check_tensor(const char* op, const Tensor& t, const ProcessGroup& group) {
  if (!t.defined()) throw Error(std::string(op) + ": the tensor is undefined");
  if (!t.is_contiguous()) {
    throw Error(std::string(op) + ": the tensor " + shape_str(t.sizes()) +
                " must be contiguous (collectives move its bytes as one block)");
  }
  if (t.device().type != group.device().type) {
    throw DeviceError(std::string(op) + ": the " + group.backend() + " backend moves " +
                      (group.device().is_cpu() ? "CPU" : "CUDA") + " tensors, got one on " + t.device().str() +
                      " (dist::world_for(device) gives the group for a device)");
  }
}

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, ReduceOp op, AllReduceAlgo algo) {
  check_tensor("all_reduce", tensor, *this);
  detail::check_supported("all_reduce", tensor.dtype(), op);
  if (tensor.numel() == 0) return completed_work();
  if (op == ReduceOp::Avg) op = detail::averaging_op(tensor, size());  // float16: divided first, then summed
  return start_all_reduce(tensor, op, algo);
}

void ProcessGroup::send(const Tensor& tensor, int dst, int tag) { isend(tensor, dst, tag)->wait(); }

void ProcessGroup::recv(Tensor& tensor, int src, int tag) { irecv(tensor, src, tag)->wait(); }

std::shared_ptr<Work> ProcessGroup::isend_irecv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  std::shared_ptr<Work> r = in.defined() ? irecv(in, src, tag) : completed_work();
  std::shared_ptr<Work> s = out.defined() ? isend(out, dst, tag) : completed_work();
  return std::make_shared<BothWork>(std::move(r), std::move(s));
}

void ProcessGroup::send_recv(const Tensor& out, int dst, Tensor& in, int src, int tag) {
  isend_irecv(out, dst, in, src, tag)->wait();
}

}  // namespace kiln::dist
