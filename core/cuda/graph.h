// CUDA graph capture and replay. capture() records everything `fn` enqueues, in thread-local
// capture mode, so any hidden synchronization or cudaMalloc on the capturing thread (where `fn`
// runs) fails the capture: that is what makes a captured training step a test of the no-sync rule.
// Other threads (a data loader's) may go on pinning memory and copying meanwhile. Allocations of
// the capturing thread come from the caching allocator's private capture pool, reserved beforehand.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace kiln {
class GeneratorCapture;
}

namespace kiln::cuda {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `fn` under capture on a side stream that waits for the current stream, then
  // instantiates the graph. pool_bytes is reserved for the capture's allocations first (blocks
  // freed during the capture are reused by it). Tensors created inside `fn` that the caller keeps
  // are the graph's outputs; their memory is rewritten by every replay. One captured graph per
  // device at a time owns the capture pool. Random ops inside `fn` (dropout, rand, ...) draw
  // through a GeneratorCapture (core/random.h): each replay draws new numbers, the ones the same
  // eager steps would have drawn at that point.
  void capture(const std::function<void()>& fn, size_t pool_bytes = size_t{64} << 20);
  // Launches the graph on the current stream, after giving its random draws their seed and offset.
  void replay();
  bool captured() const { return exec_ != nullptr; }
  // Nodes in the captured graph (0 before capture()).
  size_t num_nodes() const { return num_nodes_; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  int device_ = 0;
  std::unique_ptr<GeneratorCapture> generators_;
  size_t num_nodes_ = 0;
};

}  // namespace kiln::cuda
