// Flat buffers (see flat.h): views into the buffer shaped like each tensor, and copy_ both ways, so
// any layout (a channels-last weight or gradient) is packed by value.
#include "dist/flat.h"

#include <exception>
#include <memory>
#include <utility>

#include "core/autograd.h"
#include "core/ops/factory.h"

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

namespace {

// Runs the abort unless the pass ended: destroyed with the callback that holds it.
struct PassGuard {
  std::function<void()> on_abort;
  bool ended = false;
  PassGuard() = default;
  PassGuard(const PassGuard&) = delete;
  PassGuard& operator=(const PassGuard&) = delete;
  ~PassGuard() {
    if (ended || !on_abort) return;
    try {
      on_abort();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the pass's own exception is the one to report
    }
  }
};

}  // namespace

void queue_end_of_pass(std::function<void()> on_end, std::function<void()> on_abort) {
  auto guard = std::make_shared<PassGuard>();
  guard->on_abort = std::move(on_abort);
  queue_backward_callback([guard, on_end = std::move(on_end)] {
    guard->ended = true;  // from here on the pass is this callback's, whatever it throws
    on_end();
  });
}

std::vector<size_t> agree_on_order(ProcessGroup& group, const std::vector<size_t>& completed,
                                   const std::vector<size_t>& current) {
  std::vector<int64_t> mine;
  std::vector<bool> seen(current.size(), false);
  for (size_t b : completed) {
    mine.push_back(static_cast<int64_t>(b));
    seen[b] = true;
  }
  for (size_t b : current) {
    if (!seen[b]) mine.push_back(static_cast<int64_t>(b));
  }
  Tensor t = tensor(mine).to(group.device());  // NCCL moves CUDA tensors only
  group.broadcast(t, 0)->wait();
  std::vector<size_t> order;
  for (int64_t b : t.to_vector<int64_t>()) order.push_back(static_cast<size_t>(b));
  return order;
}

}  // namespace kiln::dist::detail
