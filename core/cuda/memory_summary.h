// cuda::memory_summary: a report of what a device's caching allocator holds, for a person reading
// an out-of-memory error or tuning a batch size. Current and peak allocated/reserved bytes, the
// blocks in use or waiting on other streams, segments and blocks by pool, the largest blocks, one
// line per stream's pool and the graph-capture pool. Sizes read in MiB with the exact byte count
// beside them, so the report also serves tests and diffs. Formatting a snapshot touches no device.
#pragma once

#include <string>

#include "core/cuda/caching_allocator.h"

namespace kiln::cuda {

// The report for `device` (-1: the current device). A DeviceError when CUDA is not available.
std::string memory_summary(int device = -1);
// The report for one allocator (tests run it over a fake device), or for a snapshot taken earlier.
std::string memory_summary(const CachingAllocator& allocator);
std::string memory_summary(const MemorySnapshot& snapshot);

}  // namespace kiln::cuda
