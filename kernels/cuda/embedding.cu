// CUDA embedding lookup: each thread copies one element of a gathered row as raw bits of its size,
// so the lookup never converts; a bad index leaves a zero row and a record for the host.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"
#include "kernels/index.h"

namespace kiln {
namespace {

using cuda_detail::raw_stream;

// W: an unsigned integer of the element's size, so the lookup moves bits and never converts.
template <typename W>
__global__ void embedding_forward_kernel(W* out, const W* weight, int64_t stride_row, int64_t stride_col,
                                         const int64_t* indices, int64_t k, int64_t num, int64_t dim,
                                         DeviceErrorRecord* err) {
  const int64_t numel = k * dim;
  const bool small = numel <= UINT32_MAX;
  for (int64_t e = cuda_detail::global_thread(); e < numel; e += cuda_detail::grid_threads()) {
    int64_t i, j;
    if (small) {
      const uint32_t ue = static_cast<uint32_t>(e), ud = static_cast<uint32_t>(dim);
      i = ue / ud;
      j = ue - static_cast<uint32_t>(i) * ud;
    } else {
      i = e / dim;
      j = e - i * dim;
    }
    const int64_t v = indices[i];
    if (v < 0 || v >= num) {
      // Only the row's first element reports, so a bad index does not make dim threads contend.
      if (j == 0) cuda_detail::record_device_error(err, IndexCheckOp::Embedding, v, num);
      out[e] = W(0);
      continue;
    }
    out[e] = weight[v * stride_row + j * stride_col];
  }
}

template <typename W>
void launch_embedding(void* out, const StridedArg& w, const int64_t* indices, int64_t k, DeviceErrorRecord* err,
                      cudaStream_t s) {
  embedding_forward_kernel<W><<<cuda_detail::grid_for(k * w.sizes[1]), cuda_detail::kThreads, 0, s>>>(
      static_cast<W*>(out), static_cast<const W*>(w.data), w.strides[0], w.strides[1], indices, k, w.sizes[0],
      w.sizes[1], err);
}

}  // namespace

void embedding_forward_cuda(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                            const KernelContext& ctx) {
  if (k == 0 || weight.ndim != 2 || weight.sizes[1] == 0) return;
  DeviceErrorRecord* err = ctx.error_record();
  const cudaStream_t s = raw_stream(ctx.stream);
  switch (element_size(weight.dtype)) {
    case 1: launch_embedding<uint8_t>(out, weight, indices, k, err, s); break;
    case 2: launch_embedding<uint16_t>(out, weight, indices, k, err, s); break;
    case 4: launch_embedding<uint32_t>(out, weight, indices, k, err, s); break;
    default: launch_embedding<uint64_t>(out, weight, indices, k, err, s); break;
  }
  cuda_detail::check_launch("embedding");
}

}  // namespace kiln
