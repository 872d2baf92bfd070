// dist::NoSync: a scope in which backward passes accumulate gradients without communicating, for
// gradient accumulation. One class for DistributedDataParallel::no_sync() and
// ZeroRedundancyOptimizer::no_sync(), so code that holds either kind holds one type.
#pragma once

#include <memory>
#include <utility>

namespace kiln::dist {

class NoSync {
 public:
  // Sets *sync to false until this scope ends, then back to what it was. `sync` shares ownership of
  // the flag's owner (DDP's or ZeRO's state), so a scope that outlives its owner stays harmless.
  explicit NoSync(std::shared_ptr<bool> sync) : sync_(std::move(sync)), previous_(*sync_) { *sync_ = false; }
  ~NoSync() {
    if (sync_) *sync_ = previous_;
  }
  // Movable (no_sync() returns one, std::optional<NoSync>::emplace takes it), not copyable: the
  // scope that was moved from restores nothing.
  NoSync(NoSync&& other) noexcept : sync_(std::move(other.sync_)), previous_(other.previous_) {}
  NoSync& operator=(NoSync&&) = delete;
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  std::shared_ptr<bool> sync_;
  bool previous_;
};

}  // namespace kiln::dist
