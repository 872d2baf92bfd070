// A check that every rank holds the same model before DDP or ZeRO pairs its tensors by position
// across ranks. Internal to dist/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"

namespace kiln::dist::detail {

// Two small all-gathers (the number of tensors, then each one's dtype, requires_grad flag and
// shape) and a comparison with rank 0's. DDP and ZeRO broadcast and bucket tensors by their
// position, so a rank built with another model would otherwise wait in a collective until the
// timeout, fail on some ranks only, or mix one parameter's gradient into another's. On a mismatch
// every rank throws the same kiln::Error (all of them hold the gathered descriptions), naming `who`,
// the first tensor that differs (by this rank's name for it) and what each rank has there, as
// PyTorch's DDP verifies the parameters' shapes across processes. A group of one checks nothing.
// `groups` (empty: none) gives each tensor its parameter group, which must match as well.
void check_same_tensors(ProcessGroup& group, const std::string& who,
                        const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::vector<int64_t>& groups = {});

}  // namespace kiln::dist::detail
