// Synchronized batch norm (see sync_batch_norm.h).
#include "dist/sync_batch_norm.h"

#include "core/autograd.h"
#include "nn/layers.h"

namespace kiln::dist {
namespace {

class GroupSync final : public nn::BatchNormSync {
 public:
  explicit GroupSync(ProcessGroup& group) : group_(group) {}
  Tensor sum_over_ranks(const Tensor& t) override { return all_reduce_sum_differentiable(t, group_); }
  int64_t ranks() const override { return group_.size(); }

 private:
  ProcessGroup& group_;
};

}  // namespace

Tensor all_reduce_sum_differentiable(const Tensor& t, ProcessGroup& group) {
  Tensor out = t.detach().contiguous().clone();
  group.all_reduce(out, ReduceOp::Sum)->wait();
  if (needs_grad({&t})) {
    ProcessGroup* g = &group;
    record_function("AllReduceSumBackward", {t}, {out}, {}, [g](const FunctionNode::Context& ctx) {
      return TensorList{all_reduce_sum_differentiable(ctx.grads.at(0), *g)};
    });
  }
  return out;
}

int convert_sync_batchnorm(nn::Module& module, ProcessGroup& group) {
  auto sync = std::make_shared<GroupSync>(group);
  int converted = 0;
  for (auto& [name, m] : module.named_modules()) {
    if (auto* bn = dynamic_cast<nn::BatchNorm*>(m.get())) {
      bn->sync = sync;
      ++converted;
    }
  }
  return converted;
}

}  // namespace kiln::dist
