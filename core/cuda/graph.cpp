// CudaGraph: capture on a side stream in thread-local mode, with the allocator switched to its
// capture pool for exactly the duration of the capture (also when `fn` throws). Capture start and
// end are logged at Info, replays at Debug (kernels/log.h).
#include "core/cuda/graph.h"

#include <string>

#include "core/cuda/runtime.h"
#include "core/random.h"
#include "kernels/error.h"
#include "kernels/log.h"

#if defined(KILN_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace kiln::cuda {

#if defined(KILN_WITH_CUDA)

namespace {
void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw DeviceError(std::string("CudaGraph: ") + what + ": " + cudaGetErrorName(err) + " (" +
                      cudaGetErrorString(err) + ")");
  }
}
}  // namespace

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::capture(const std::function<void()>& fn, size_t pool_bytes) {
  if (exec_) throw Error("CudaGraph::capture: this graph was already captured");
  device_ = current_device();
  CachingAllocator& alloc = caching_allocator(device_);
  if (pool_bytes > 0) alloc.reserve_capture_pool(pool_bytes);
  const std::string where = "cuda:" + std::to_string(device_);
  KILN_LOG(Info, "CudaGraph: capture begins on " + where + ", " + format_bytes(alloc.capture_pool_bytes()) +
                     " reserved for the capture pool");
  Stream origin = current_stream(device_);
  // Made on first use with cudaMalloc, which the capture would refuse: the index-checking kernels
  // (embedding, gather, cross_entropy's targets) write to it.
  (void)device_error_record(device_);
  CudaStream side(device_);
  {
    // The side stream starts after everything already queued on the current stream.
    Event ready;
    ready.record(origin);
    ready.wait(side.get());
  }
  cudaGraph_t graph = nullptr;
  auto generators = std::make_unique<GeneratorCapture>(Device::cuda(device_));
  {
    StreamGuard guard(side.get(), device_);
    alloc.begin_capture(side.get());
    // Thread-local mode: this thread may make no unsafe call (a synchronization, a cudaMalloc), but
    // other threads may; a data loader's workers keep pinning memory (cudaHostAlloc, cudaEventQuery)
    // for the next batches while the step is captured, which global mode would refuse, failing the
    // capture. Their device allocations come from the ordinary pools (CachingAllocator::begin_capture).
    cudaError_t begin =
        cudaStreamBeginCapture(reinterpret_cast<cudaStream_t>(side.get()), cudaStreamCaptureModeThreadLocal);
    if (begin != cudaSuccess) {
      alloc.end_capture();
      check(begin, "cudaStreamBeginCapture");
    }
    try {
      fn();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(reinterpret_cast<cudaStream_t>(side.get()), &broken);
      if (broken) cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      alloc.end_capture();
      throw;
    }
    cudaError_t end = cudaStreamEndCapture(reinterpret_cast<cudaStream_t>(side.get()), &graph);
    generators->end();
    alloc.end_capture();
    check(end, "cudaStreamEndCapture (a synchronization or allocation happened during the capture?)");
  }
  graph_ = graph;
  // Counting nodes is a host-side query of the graph just built: cheap, and no device work.
  if (cudaGraphGetNodes(graph, nullptr, &num_nodes_) != cudaSuccess) {
    (void)cudaGetLastError();
    num_nodes_ = 0;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {  // nothing kept: a later capture() starts afresh, leaking nothing
    cudaGraphDestroy(graph);
    graph_ = nullptr;
    num_nodes_ = 0;
  }
  check(instantiated, "cudaGraphInstantiate");
  exec_ = exec;
  generators_ = std::move(generators);
  // The origin stream continues after the capture stream's (empty) work.
  Event done;
  done.record(side.get());
  done.wait(origin);
  KILN_LOG(Info, "CudaGraph: captured and instantiated " + std::to_string(num_nodes_) + " nodes on " + where +
                     "; the capture pool holds " + format_bytes(alloc.capture_pool_bytes()));
}

void CudaGraph::replay() {
  if (!exec_) throw Error("CudaGraph::replay: nothing was captured");
  {
    DeviceGuard guard(device_);
    generators_->prepare_replay();
  }
  KILN_LOG(Debug, "CudaGraph: replaying " + std::to_string(num_nodes_) + " nodes on cuda:" + std::to_string(device_));
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), reinterpret_cast<cudaStream_t>(current_stream(device_))),
        "cudaGraphLaunch");
}

#else

CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(const std::function<void()>&, size_t) {
  throw DeviceError("CudaGraph::capture: this build of kiln has no CUDA backend");
}
void CudaGraph::replay() { throw DeviceError("CudaGraph::replay: this build of kiln has no CUDA backend"); }

#endif

}  // namespace kiln::cuda
