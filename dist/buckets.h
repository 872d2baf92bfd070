// When gradient buckets are reduced, for DistributedDataParallel and ZeroRedundancyOptimizer alike:
// which gradients of a backward pass are in, which buckets are complete, and the one order in which
// every rank issues their collectives. What a bucket's collective is (an all-reduce, a
// reduce-scatter) stays with its owner, which calls these from its parameters' post-accumulate hooks
// and from the end of backward. Internal to dist/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace kiln::dist::detail {

// One backward pass's bookkeeping. Buckets are issued strictly in order: a bucket whose gradients are
// all in waits for the buckets before it, so every rank issues the same collectives in the same
// order even when backward completes them in another order on another rank (which would pair one
// bucket's collective with another's). The order is the one given in the first pass; from the
// second on, the order in which rank 0's first pass completed them (learn_order).
class BucketSchedule {
 public:
  BucketSchedule() = default;
  // bucket_of[k]: the bucket of gradient k (k counts the hooked parameters); first_order: every
  // bucket once, the order of the first pass.
  BucketSchedule(std::vector<size_t> bucket_of, std::vector<size_t> first_order);

  // A new pass: every bucket waits for all of its gradients, none is issued.
  void reset();
  // Gradient k has been accumulated. False when it already had been in this pass (counted once).
  bool arrive(size_t k);
  // Whether gradient k's bucket has been issued in this pass: a second gradient accumulated after
  // that would be left out of the reduction (its owner refuses it).
  bool issued(size_t k) const { return issued_[bucket_of_[k]]; }
  // issue(b) for each bucket, in order, from the next one not issued, while its gradients are all in.
  void issue_ready(const std::function<void(size_t)>& issue);
  // The end of backward: gradients that never came count as in, and every bucket not issued is.
  void issue_rest(const std::function<void(size_t)>& issue);
  // The first gradient that has not come in this pass, or none.
  std::optional<size_t> first_missing() const;
  // After the first pass, once: the order from then on is rank 0's completion order of that pass,
  // followed by the buckets it never completed (a broadcast from rank 0: a collective).
  void learn_order(ProcessGroup& group);

 private:
  std::vector<size_t> bucket_of_;
  std::vector<size_t> order_;
  bool order_learned_ = false;
  std::vector<bool> arrived_;     // per gradient, this pass
  std::vector<int64_t> pending_;  // per bucket: gradients still to come
  std::vector<size_t> completed_;  // buckets in the order this pass completed them
  std::vector<bool> issued_;       // per bucket, this pass
  size_t next_ = 0;                // order_[next_] is the next bucket to issue
};

// The error for a parameter (`name`, as its owner names it) whose gradient was accumulated a second
// time in one backward pass after its bucket's collective had started: that second part would be
// left out of the reduction on every rank.
std::string second_gradient(const std::string& name);

// Queues `on_end` to run when the backward pass now running finishes (the outermost one, should a
// recompute's backward run inside it: queue_outer_backward_callback). If the pass fails instead (an
// exception leaves backward before its callbacks run), `on_abort` runs when the engine drops the
// callback, as the exception leaves backward: a DDP or ZeRO pass can wait for the collectives it
// left in flight and end, so the next backward starts a pass of its own. Errors of `on_abort` are
// swallowed (it runs while an exception is on its way out).
void queue_end_of_pass(std::function<void()> on_end, std::function<void()> on_abort);
// The same for an owner's state held weakly (a hook must not keep a DDP or ZeRO alive): its
// end_pass() or abort_pass(), or nothing once it is gone.
template <class State> void queue_end_of_pass(const std::weak_ptr<State>& self) {
  queue_end_of_pass(
      [self] {
        if (std::shared_ptr<State> s = self.lock()) s->end_pass();
      },
      [self] {
        if (std::shared_ptr<State> s = self.lock()) s->abort_pass();
      });
}

}  // namespace kiln::dist::detail
