// --ddp in the training examples: joining the process group of mpiexec, checking that the global
// batch splits evenly, and giving ranks other than 0 their own output folder and a silent stdout.
// Every rank runs the whole program on its share of each batch (dist/ddp.h averages the gradients),
// so ranks other than 0 write the same files rank 0 does, under OUT/rank-R.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/device.h"
#include "dist/process_group.h"
#include "examples/common.h"

namespace kiln::examples {

inline void add_ddp_flag(Flags& app, bool& ddp) {
  app.add_flag("--ddp", ddp,
               "data-parallel training over the ranks of mpiexec (MPI for CPU tensors, NCCL on GPUs: rank R uses GPU "
               "(local rank) % (GPUs)) or of an env:// launcher (NCCL only): each rank trains on 1/N of every batch "
               "and the gradients are averaged; rank 0 prints and writes --out, rank R writes OUT/rank-R");
}

// The world group for `device` when `ddp` (MPI on the CPU, NCCL on GPUs), else nullptr; on GPUs,
// `device` becomes this rank's. Bad input (no MPI or NCCL, a batch that does not split evenly) ends
// the program with the reason.
inline dist::ProcessGroup* start_ddp(bool ddp, Device& device, int64_t batch_size, std::string& out) {
  if (!ddp) return nullptr;
  dist::ProcessGroup* group = nullptr;
  try {
    group = &dist::world_for(device);
    device = group->device();
  } catch (const Error& e) {
    input_error(std::string("--ddp: ") + e.what());
  }
  if (batch_size % group->size() != 0) {
    input_error("--ddp: --batch-size " + std::to_string(batch_size) + " must be a multiple of the " +
                std::to_string(group->size()) + " ranks");
  }
  if (group->rank() > 0) {
    out = (std::filesystem::path(out) / ("rank-" + std::to_string(group->rank()))).string();
    if (std::freopen("/dev/null", "w", stdout) == nullptr) input_error("--ddp: cannot silence rank output");
  }
  return group;
}

}  // namespace kiln::examples
