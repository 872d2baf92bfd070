// CUDA embedding lookup and backward. The lookup: each thread copies one element of a gathered row
// as raw bits of its size, so it never converts; a bad index leaves a zero row and a record for the
// host. The backward: CUB's radix sort orders the positions by index value, then the sums of
// kernels/embedding_plan.h run one thread per (chunk of sorted positions, column), and the chunk
// that owns a value crossing chunks adds its parts in order. A bad index is recorded and its row
// skipped.
#include <bit>
#include <cstdint>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/embedding.h"
#include "kernels/embedding_plan.h"
#include "kernels/index.h"

namespace kiln {
namespace {

using cuda_detail::check_cuda;
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

// --- backward --------------------------------------------------------------------------------

constexpr int kColumnThreads = 128;

// Keys (index values, `num` for a bad one) and positions for the sort.
__global__ void embedding_keys_kernel(const int64_t* indices, int64_t k, int64_t num, uint32_t* keys, uint32_t* rows,
                                      DeviceErrorRecord* err) {
  for (int64_t i = cuda_detail::global_thread(); i < k; i += cuda_detail::grid_threads()) {
    int64_t v = indices[i];
    if (v < 0 || v >= num) {
      cuda_detail::record_device_error(err, IndexCheckOp::Embedding, v, num);
      v = num;
    }
    keys[i] = static_cast<uint32_t>(v);
    rows[i] = static_cast<uint32_t>(i);
  }
}

template <typename T> __device__ __forceinline__ void add_to(T* out, float acc) {
  *out = static_cast<T>(static_cast<float>(*out) + acc);
}

// Block (chunk, column block): each thread sums its column over the chunk's pieces. The keys and
// positions every thread of the block reads are the same (broadcast loads); the gradient rows are
// read along the columns, coalesced.
template <typename T>
__global__ void embedding_pieces_kernel(embedding_plan::SortedKeys s, const uint32_t* rows, const T* grad, T* gw,
                                        int64_t dim, float* head, float* tail) {
  using embedding_plan::Piece;
  const int64_t c = blockIdx.x;
  for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < dim;
       d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    embedding_plan::for_each_piece(s, c, [&](int64_t b, int64_t e, uint32_t key, Piece p) {
      float acc = 0.f;
      for (int64_t r = b; r < e; ++r) acc += static_cast<float>(grad[static_cast<int64_t>(rows[r]) * dim + d]);
      if (p == Piece::Whole) {
        add_to(gw + static_cast<int64_t>(key) * dim + d, acc);
      } else {
        (p == Piece::Head ? head : tail)[c * dim + d] = acc;
      }
    });
  }
}

// Block (chunk, column block): the chunk that owns a value crossing chunks adds its Head part and
// the following chunks' Tail parts, in order; other chunks' blocks return at once.
template <typename T>
__global__ void embedding_carry_kernel(embedding_plan::SortedKeys s, T* gw, int64_t dim, const float* head,
                                       const float* tail) {
  const int64_t c = blockIdx.x;
  uint32_t key = 0;
  if (!embedding_plan::owns_value(s, c, &key)) return;
  for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < dim;
       d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float acc = head[c * dim + d];
    for (int64_t c2 = c + 1;; ++c2) {
      acc += tail[c2 * dim + d];
      if (embedding_plan::value_ends_in(s, c2, key)) break;
    }
    add_to(gw + static_cast<int64_t>(key) * dim + d, acc);
  }
}

}  // namespace

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
  const cudaStream_t st = raw_stream(ctx.stream);
  const int n = static_cast<int>(k);
  // Keys run 0..num, num marking a bad index (num = 0: every key is 0, sorted on one bit).
  const int end_bit = num > 0 ? static_cast<int>(std::bit_width(static_cast<uint64_t>(num))) : 1;
  const int64_t chunks = embedding_plan::chunk_count(k);
  size_t sort_bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), n, 0, end_bit, st),
             op, "sizing the sort");
  // One workspace: keys and positions before and after the sort, the sort's scratch, and the Head
  // and Tail parts of every (chunk, column).
  const size_t ids = cuda_detail::align_up(static_cast<size_t>(k) * sizeof(uint32_t));
  const size_t parts = cuda_detail::align_up(static_cast<size_t>(chunks * dim) * sizeof(float));
  const size_t sort_room = cuda_detail::align_up(sort_bytes);
  char* ws = static_cast<char*>(ctx.workspace(4 * ids + sort_room + 2 * parts));
  auto* keys_in = reinterpret_cast<uint32_t*>(ws);
  auto* keys = reinterpret_cast<uint32_t*>(ws + ids);
  auto* rows_in = reinterpret_cast<uint32_t*>(ws + 2 * ids);
  auto* rows = reinterpret_cast<uint32_t*>(ws + 3 * ids);
  void* sort_scratch = ws + 4 * ids;
  auto* head = reinterpret_cast<float*>(ws + 4 * ids + sort_room);
  auto* tail = reinterpret_cast<float*>(ws + 4 * ids + sort_room + parts);

  embedding_keys_kernel<<<cuda_detail::grid_for(k), cuda_detail::kThreads, 0, st>>>(indices, k, num, keys_in,
                                                                                     rows_in, ctx.error_record());
  cuda_detail::check_launch(op);
  check_cuda(cub::DeviceRadixSort::SortPairs(sort_scratch, sort_bytes, keys_in, keys, rows_in, rows, n, 0, end_bit,
                                             st),
             op, "the radix sort");
  const embedding_plan::SortedKeys sorted{keys, k, static_cast<uint32_t>(num)};
  const int64_t column_blocks = (dim + kColumnThreads - 1) / kColumnThreads;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(column_blocks < 65535 ? column_blocks : 65535));
  KILN_CUDA_FLOAT_SWITCH(dtype, op, {
    embedding_pieces_kernel<S><<<grid, kColumnThreads, 0, st>>>(sorted, rows, static_cast<const S*>(grad),
                                                               static_cast<S*>(grad_weight), dim, head, tail);
    cuda_detail::check_launch(op);
    embedding_carry_kernel<S><<<grid, kColumnThreads, 0, st>>>(sorted, static_cast<S*>(grad_weight), dim, head, tail);
    cuda_detail::check_launch(op);
  });
}

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
