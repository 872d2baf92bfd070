// check_same_tensors: each tensor as a fixed row of int64 words, so that one all-gather carries
// every rank's list and each rank compares all of them, reaching the same verdict.
#include "dist/same_model.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/ops/factory.h"
#include "kernels/error.h"
#include "kernels/strided.h"

namespace kiln::dist::detail {
namespace {

enum Word : int64_t { kGroup, kDType, kRequiresGrad, kDim, kSizes, kWords = kSizes + kMaxDims };

std::vector<int64_t> all_gather_words(ProcessGroup& group, const std::vector<int64_t>& mine) {
  const auto n = static_cast<int64_t>(group.size());
  Tensor sent = tensor(mine).to(group.device());  // NCCL moves CUDA tensors only
  Tensor all = empty({n * static_cast<int64_t>(mine.size())}, TensorOptions(DType::Int64, group.device()));
  group.all_gather(all, sent)->wait();
  return all.to(Device::cpu()).to_vector<int64_t>();
}

std::string describe(const int64_t* w, bool grouped) {
  if (w[kDType] == -1) return "an undefined tensor";
  if (w[kDim] < 0 || w[kDim] > kMaxDims || w[kDType] < 0 || w[kDType] >= kNumDTypes) return "an unreadable entry";
  Shape shape(w + kSizes, w + kSizes + w[kDim]);
  return shape_str(shape) + " " + dtype_name(static_cast<DType>(w[kDType])) +
         (w[kRequiresGrad] != 0 ? "" : " (requires_grad false)") +
         (grouped ? " in group " + std::to_string(w[kGroup]) : "");
}

}  // namespace

void check_same_tensors(ProcessGroup& group, const std::string& who,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::vector<int64_t>& groups) {
  const int n = group.size();
  if (n == 1) return;
  const std::string hint = "; every rank must build the same model (the same parameters and buffers, in one order)";
  const std::vector<int64_t> counts = all_gather_words(group, {static_cast<int64_t>(tensors.size())});
  if (std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) != counts.end()) {
    std::string each;
    for (int r = 0; r < n; ++r) {
      each += std::string(r == 0 ? "" : ", ") + "rank " + std::to_string(r) + " has " + std::to_string(counts[r]);
    }
    throw Error(who + ": the ranks' models differ in their number of tensors: " + each + hint);
  }
  if (tensors.empty()) return;
  std::vector<int64_t> mine(tensors.size() * kWords, 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    int64_t* w = mine.data() + i * kWords;
    w[kGroup] = groups.empty() ? 0 : groups.at(i);
    if (!t.defined()) {  // described as such; the caller's own checks refuse it, on every rank alike
      w[kDType] = -1;
      continue;
    }
    w[kDType] = static_cast<int64_t>(t.dtype());
    w[kRequiresGrad] = t.requires_grad() ? 1 : 0;
    w[kDim] = t.dim();  // at most kMaxDims: kiln refuses more
    for (int64_t d = 0; d < t.dim(); ++d) w[kSizes + d] = t.size(d);
  }
  const std::vector<int64_t> all = all_gather_words(group, mine);
  const size_t per_rank = mine.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t* first = all.data() + i * kWords;
    bool same = true;
    for (int r = 1; r < n && same; ++r)
      same = std::equal(first, first + kWords, all.data() + r * per_rank + i * kWords);
    if (same) continue;
    std::string each;
    for (int r = 0; r < n; ++r) {
      each += "; rank " + std::to_string(r) + ": " + describe(all.data() + r * per_rank + i * kWords, !groups.empty());
    }
    throw Error(who + ": the ranks' models differ at tensor " + std::to_string(i) + " ('" + tensors[i].first +
                "' on rank " + std::to_string(group.rank()) + ")" + each + hint);
  }
}

}  // namespace kiln::dist::detail
