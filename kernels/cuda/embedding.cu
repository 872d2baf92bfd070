// CUDA embedding lookup and backward: kernels/cuda/embedding.cuh's launches on the context's
// stream, with CUB's radix sort as the backward's stable sort of (index value, position) pairs.
#include <cstdint>
#include <string>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/embedding.h"

namespace kiln {

void embedding_backward_cuda(void* grad_weight, const void* grad, DType dtype, const int64_t* indices, int64_t k,
                             int64_t num, int64_t dim, const KernelContext& ctx) {
  const char* op = "embedding backward";
  if (k >= kEmbeddingBackwardMaxRows || num >= kEmbeddingBackwardMaxRows) {
    throw ShapeError(std::string(op) + ": " + std::to_string(k) + " positions and " + std::to_string(num) +
                     " embeddings must each be below 2^31");
  }
  if (dtype != DType::Float32 && dtype != DType::Float16 && dtype != DType::BFloat16) {
    cuda_detail::throw_no_cuda_float_kernel(op, dtype);
  }
  if (k == 0 || dim == 0) return;
  const cudaStream_t st = cuda_detail::raw_stream(ctx.stream);
  size_t sort_bytes = 0;
  cuda_detail::check_cuda(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr),
                                      static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                      static_cast<uint32_t*>(nullptr), static_cast<int>(k), 0,
                                      embedding_device::key_bits(num), st),
      op, "sizing the sort");
  // One workspace: keys and positions before and after the sort, the sort's scratch, and the Head
  // and Tail parts of every (chunk, column).
  const size_t ids = cuda_detail::align_up(static_cast<size_t>(k) * sizeof(uint32_t));
  const size_t parts =
      cuda_detail::align_up(static_cast<size_t>(embedding_plan::chunk_count(k) * dim) * sizeof(float));
  const size_t sort_room = cuda_detail::align_up(sort_bytes);
  char* ws = static_cast<char*>(ctx.workspace(4 * ids + sort_room + 2 * parts));
  const embedding_device::BackwardBuffers buf{
      reinterpret_cast<uint32_t*>(ws),           reinterpret_cast<uint32_t*>(ws + ids),
      reinterpret_cast<uint32_t*>(ws + 2 * ids), reinterpret_cast<uint32_t*>(ws + 3 * ids),
      reinterpret_cast<float*>(ws + 4 * ids + sort_room), reinterpret_cast<float*>(ws + 4 * ids + sort_room + parts)};
  void* sort_scratch = ws + 4 * ids;
  const auto sort = [&](const uint32_t* keys_in, uint32_t* keys, const uint32_t* rows_in, uint32_t* rows, int n,
                        int end_bit) {
    cuda_detail::check_cuda(
        cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, keys_in, keys, rows_in, rows, n, 0, end_bit, st), op,
        "the radix sort");
  };
  const cuda_detail::StreamLaunch launch{st, op};
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    embedding_device::embedding_backward_launches(static_cast<S*>(grad_weight), static_cast<const S*>(grad), indices,
                                                  k, num, dim, buf, ctx.error_record(), sort, launch);
  });
}

void embedding_forward_cuda(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                            const KernelContext& ctx) {
  embedding_device::embedding_forward_launch(
      out, weight, indices, k, ctx.error_record(),
      cuda_detail::StreamLaunch{cuda_detail::raw_stream(ctx.stream), "embedding"});
}

}  // namespace kiln
