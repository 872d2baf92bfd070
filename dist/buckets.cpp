// When gradient buckets are reduced (see buckets.h).
#include "dist/buckets.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "core/autograd.h"
#include "core/ops/factory.h"

namespace kiln::dist::detail {

BucketSchedule::BucketSchedule(std::vector<size_t> bucket_of, std::vector<size_t> first_order)
    : bucket_of_(std::move(bucket_of)), order_(std::move(first_order)) {
  reset();
}

void BucketSchedule::reset() {
  pending_.assign(order_.size(), 0);
  for (size_t b : bucket_of_) ++pending_[b];
  arrived_.assign(bucket_of_.size(), false);
  issued_.assign(order_.size(), false);
  completed_.clear();
  next_ = 0;
}

bool BucketSchedule::arrive(size_t k) {
  if (arrived_[k]) return false;
  arrived_[k] = true;
  if (--pending_[bucket_of_[k]] == 0) completed_.push_back(bucket_of_[k]);
  return true;
}

void BucketSchedule::issue_ready(const std::function<void(size_t)>& issue) {
  while (next_ < order_.size() && pending_[order_[next_]] == 0) {
    issued_[order_[next_]] = true;
    issue(order_[next_++]);
  }
}

void BucketSchedule::issue_rest(const std::function<void(size_t)>& issue) {
  std::fill(pending_.begin(), pending_.end(), 0);
  issue_ready(issue);
}

std::optional<size_t> BucketSchedule::first_missing() const {
  for (size_t k = 0; k < arrived_.size(); ++k) {
    if (!arrived_[k]) return k;
  }
  return std::nullopt;
}

void BucketSchedule::learn_order(ProcessGroup& group) {
  if (order_learned_) return;
  std::vector<int64_t> mine;
  std::vector<bool> seen(order_.size(), false);
  for (size_t b : completed_) {
    mine.push_back(static_cast<int64_t>(b));
    seen[b] = true;
  }
  for (size_t b : order_) {
    if (!seen[b]) mine.push_back(static_cast<int64_t>(b));
  }
  Tensor t = tensor(mine).to(group.device());  // NCCL moves CUDA tensors only
  group.broadcast(t, 0)->wait();
  order_.clear();
  for (int64_t b : t.to_vector<int64_t>()) order_.push_back(static_cast<size_t>(b));
  order_learned_ = true;
}

std::string second_gradient(const std::string& name) {
  return name + " got a second gradient in one backward pass after its bucket's reduction had started, " +
         "which would leave that part out; a parameter used both inside a recompute that does not list it and " +
         "outside it gets one from each backward: list it in CheckpointOptions::params";
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
  queue_outer_backward_callback([guard, on_end = std::move(on_end)] {
    guard->ended = true;  // from here on the pass is this callback's, whatever it throws
    on_end();
  });
}

}  // namespace kiln::dist::detail
