// Flat buffers (see flat.h): views into the buffer shaped like each tensor, and copy_ both ways, so
// any layout (a channels-last weight or gradient) is packed by value.
#include "dist/flat.h"

#include <exception>
#include <memory>

#include "core/autograd.h"

namespace kiln::dist::detail {

int64_t total_numel(const TensorList& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

void pack(const TensorList& tensors, Tensor& flat, bool grads) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    Tensor slot = flat.narrow(0, offset, t.numel()).view(t.sizes());
    const Tensor& src = grads ? t.grad() : t;
    if (src.defined()) {
      slot.copy_(src.detach());
    } else {
      slot.zero_();  // a parameter without a gradient counts as zero
    }
    offset += t.numel();
  }
}

void unpack(const Tensor& flat, const TensorList& tensors, bool grads) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (Tensor t : tensors) {  // handles: writes reach the tensors themselves
    Tensor slot = flat.narrow(0, offset, t.numel()).view(t.sizes());
    if (!grads) {
      t.detach().copy_(slot);
    } else if (t.grad().defined()) {
      t.mutable_grad().copy_(slot);
    } else {
      t.set_grad(slot.clone());
    }
    offset += t.numel();
  }
}

void broadcast_from_rank0(ProcessGroup& group, const Tensor& t) {
  NoGradGuard no_grad;
  Tensor d = t.detach();  // the same storage: the broadcast writes the tensor itself
  if (d.is_non_overlapping_and_dense()) {  // any layout: a channels-last weight too
    group.broadcast(d, 0)->wait();
  } else {
    Tensor c = d.contiguous();
    group.broadcast(c, 0)->wait();
    d.copy_(c);
  }
}

ReduceOp averaging_op(Tensor& flat, int ranks) {
  if (flat.dtype() != DType::Float16 || ranks == 1) return ReduceOp::Avg;
  NoGradGuard no_grad;
  flat.mul_(Scalar(1.0 / ranks));
  return ReduceOp::Sum;
}

void wait_all(std::vector<std::shared_ptr<Work>>& works, const std::function<void(size_t)>& done) {
  std::exception_ptr error;
  for (size_t i = 0; i < works.size(); ++i) {
    if (!works[i]) continue;
    try {
      works[i]->wait();
      if (done && !error) done(i);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    works[i].reset();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln::dist::detail
