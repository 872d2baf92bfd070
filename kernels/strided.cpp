// Dimension collapsing for strided operands: fewer, longer dims make every elementwise loop (CPU or
// CUDA) cheaper, and dense operands of one layout collapse to the 1-D fast path.
#include "kernels/strided.h"

#include <algorithm>

namespace kiln {

void collapse_dims(std::vector<StridedArg*> args, bool allow_reorder) {
  if (args.empty()) return;
  StridedArg& first = *args[0];
  const int nd = first.ndim;
  // Keep dims of size != 1.
  std::vector<int> dims;
  for (int d = 0; d < nd; ++d)
    if (first.sizes[d] != 1) dims.push_back(d);
  if (allow_reorder) {
    // Outermost first: order by the first arg's stride (descending), stable for ties.
    std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) {
      int64_t sa = first.strides[a] < 0 ? -first.strides[a] : first.strides[a];
      int64_t sb = first.strides[b] < 0 ? -first.strides[b] : first.strides[b];
      return sa > sb;
    });
  }
  // Merge dim i into the previous one when it is contiguous with it in every arg.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(args.size());
  for (int d : dims) {
    bool merge = !sizes.empty();
    if (merge) {
      for (size_t a = 0; a < args.size(); ++a) {
        if (strides[a].back() != args[a]->strides[d] * args[a]->sizes[d]) {
          merge = false;
          break;
        }
      }
    }
    if (merge) {
      sizes.back() *= first.sizes[d];
      for (size_t a = 0; a < args.size(); ++a) strides[a].back() = args[a]->strides[d];
    } else {
      sizes.push_back(first.sizes[d]);
      for (size_t a = 0; a < args.size(); ++a) strides[a].push_back(args[a]->strides[d]);
    }
  }
  if (sizes.empty()) {  // all size 1: one element
    sizes.push_back(1);
    for (auto& s : strides) s.push_back(1);
  }
  for (size_t a = 0; a < args.size(); ++a) {
    args[a]->ndim = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      args[a]->sizes[d] = sizes[d];
      args[a]->strides[d] = strides[a][d];
    }
  }
}

}  // namespace kiln
