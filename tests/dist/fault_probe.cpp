// A program for the fault tests of dist/ (tests/CMakeLists.txt runs it under mpiexec):
//   fault_probe hang   the last rank sleeps 30 s before joining an all-reduce that the others
//                      enter at once: with KILN_DIST_TIMEOUT=2 the others' watchdogs must report
//                      the timed-out call and end the job within seconds (not wait out the sleep)
//   fault_probe hang-ring
//                      the same with kiln's ring, whose point-to-point waits throw: rank 0 (waiting
//                      to receive from the last rank, its left neighbour) or rank 1 (waiting to send
//                      to it), whichever times out first, must get a kiln::Error naming the last
//                      rank, and the job must end (the first error aborts it, so the other rank's
//                      may never be printed)
//   fault_probe exit   the last rank exits at once with status 5, without finalizing MPI: the
//                      others must not hang (kiln's timeout, or the launcher ending the job and
//                      naming the rank, whichever comes first)
// Each rank prints what happened and how long it waited; CTest matches the output.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/kiln.h"
#include "dist/process_group.h"

int main(int argc, char** argv) {
  using namespace kiln;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "hang" && mode != "hang-ring" && mode != "exit") {
    std::fprintf(stderr, "usage: fault_probe hang|hang-ring|exit\n");
    return 2;
  }
  dist::ProcessGroup& g = dist::world();
  const bool last = g.rank() == g.size() - 1;
  if (last && mode == "exit") std::_Exit(5);
  if (last) std::this_thread::sleep_for(std::chrono::seconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    Tensor t = ones({1000});
    g.all_reduce(t, dist::ReduceOp::Sum, mode == "hang-ring" ? dist::AllReduceAlgo::Ring : dist::AllReduceAlgo::Native)
        ->wait();
    std::printf("rank %d: the all-reduce completed\n", g.rank());
    return 0;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d: error after %.1f s: %s\n", g.rank(), s, e.what());
    std::fflush(stdout);
    return 3;
  }
}
