// CUDA twin of random_cpu: kernels/cuda/random.cuh's launches on the context's stream.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/random.cuh"
#include "kernels/random.h"

namespace kiln {

void random_cuda(const StridedArg& out, RandomDist dist, const RandomParams& p, PhiloxState philox,
                 const KernelContext& ctx) {
  random_device::random_launch(out, dist, p, philox,
                               cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), "random"});
}

void philox_base_store_cuda(uint64_t* base, uint64_t seed, uint64_t offset, const KernelContext& ctx) {
  random_device::philox_base_store_launch(
      base, seed, offset, cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), "philox_base_store"});
}

}  // namespace kiln
