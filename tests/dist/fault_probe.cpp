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
//   fault_probe late-message
//                      rank 0's receive from rank 1 times out (KILN_DIST_TIMEOUT=2) while rank 1
//                      sleeps 3 s before sending; rank 0 then makes zeroed tensors of the same size
//                      and receives a second message sent after the late one: the late one's buffer
//                      must be none of them (the timed-out receive's buffer went back to the
//                      allocator, and the late message overwrote a new tensor)
// Each rank prints what happened and how long it waited; CTest matches the output.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/kiln.h"
#include "dist/process_group.h"

int main(int argc, char** argv) {
  using namespace kiln;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "hang" && mode != "hang-ring" && mode != "exit" && mode != "late-message") {
    std::fprintf(stderr, "usage: fault_probe hang|hang-ring|exit|late-message\n");
    return 2;
  }
  dist::ProcessGroup& g = dist::world();
  const bool last = g.rank() == g.size() - 1;
  if (mode == "late-message") {
    constexpr int64_t kN = 1 << 14;  // 64 KiB: a block the CPU caching allocator hands out again
    g.barrier();                     // the clocks below start together, however long start-up took
    if (g.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      g.send(full({kN}, 7.0), 0);
      g.send(ones({1}), 0, 1);
      std::printf("rank 1: sent\n");
      return 0;
    }
    if (g.rank() != 0) return 0;
    try {
      Tensor box = zeros({kN});
      g.recv(box, 1);
      std::printf("rank 0: the receive completed before the timeout\n");
      return 1;
    } catch (const Error& e) {
      std::printf("rank 0: %s\n", e.what());
    }
    std::vector<Tensor> fresh;
    for (int i = 0; i < 8; ++i) fresh.push_back(zeros({kN}));
    // Rank 1's second message, sent right after the late one (which has landed by then); waited
    // for from past rank 1's sends, so that its own 2 s are to spare.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Tensor after = zeros({1});
    g.recv(after, 1, 1);
    double total = 0;
    for (const Tensor& t : fresh) total += sum(t).item<double>();
    std::printf("rank 0: the new tensors %s\n", total == 0 ? "kept their zeros" : "were overwritten");
    std::fflush(stdout);
    return 3;
  }
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
