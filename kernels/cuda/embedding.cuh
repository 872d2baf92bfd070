// embedding's CUDA kernels (the twins of kernels/cpu/embedding.cpp) and their launches, run by
// kernels/cuda/embedding.cu.
//
// The lookup: each thread copies one element of a gathered row as raw bits of its size, so it
// never converts; a bad index leaves a zero row and a record for the host.
//
// The backward: a keys kernel writes each position's index value (or `num` for a bad index, which
// it records) and the position itself; a stable sort of those pairs by key (CUB's radix sort on a
// GPU) orders the positions by value; then the sums of kernels/embedding_plan.h run one thread per
// (chunk of sorted positions, column), and the chunk that owns a value crossing chunks adds its
// parts in order. A bad index's row is skipped.
//
// Host-compilable: the CPU tests run these kernels on the emulator of CUDA's threads, with a stable
// sort on the host in the radix sort's place (tests/kernels/test_embedding_simt.cpp).
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "kernels/cuda/device_math.cuh"
#include "kernels/embedding_plan.h"
#include "kernels/error.h"
#include "kernels/index.h"
#include "kernels/strided.h"

namespace kiln::embedding_device {

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

template <typename W, class Launch>
void forward_words(void* out, const StridedArg& w, const int64_t* indices, int64_t k, DeviceErrorRecord* err,
                   const Launch& launch) {
  launch(embedding_forward_kernel<W>, cuda_detail::grid_for(k * w.sizes[1]), cuda_detail::kThreads,
         static_cast<W*>(out), static_cast<const W*>(w.data), w.strides[0], w.strides[1], indices, k, w.sizes[0],
         w.sizes[1], err);
}

// The lookup through `launch` (cuda_detail::StreamLaunch on a GPU): the kernel of the element's size.
template <class Launch>
void embedding_forward_launch(void* out, const StridedArg& weight, const int64_t* indices, int64_t k,
                              DeviceErrorRecord* err, const Launch& launch) {
  if (k == 0 || weight.ndim != 2 || weight.sizes[1] == 0) return;
  switch (element_size(weight.dtype)) {
    case 1: forward_words<uint8_t>(out, weight, indices, k, err, launch); break;
    case 2: forward_words<uint16_t>(out, weight, indices, k, err, launch); break;
    case 4: forward_words<uint32_t>(out, weight, indices, k, err, launch); break;
    default: forward_words<uint64_t>(out, weight, indices, k, err, launch); break;
  }
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
  *out = cuda_detail::from_f32<T>(cuda_detail::to_f32(*out) + acc);
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
      for (int64_t r = b; r < e; ++r) acc += cuda_detail::to_f32(grad[static_cast<int64_t>(rows[r]) * dim + d]);
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

// The backward's scratch, carved by the caller from one workspace: keys and positions before and
// after the sort (k each), and the Head and Tail parts of every (chunk, column).
struct BackwardBuffers {
  uint32_t* keys_in;
  uint32_t* keys;
  uint32_t* rows_in;
  uint32_t* rows;
  float* head;
  float* tail;
};

// The sort's key bits: keys run 0..num, num marking a bad index (num = 0: every key is 0, sorted
// on one bit).
inline int key_bits(int64_t num) {
  return num > 0 ? static_cast<int>(std::bit_width(static_cast<uint64_t>(num))) : 1;
}

// For storage type S (float, __half or __nv_bfloat16; k > 0, dim > 0): launches the keys kernel,
// calls sort(keys_in, keys, rows_in, rows, n, end_bit) (a stable sort of the pairs by the keys'
// low end_bit bits: CUB's radix sort on a GPU) and launches the pieces and carry kernels, all
// through `launch` (cuda_detail::StreamLaunch on a GPU).
template <typename S, class Sort, class Launch>
void embedding_backward_launches(S* grad_weight, const S* grad, const int64_t* indices, int64_t k, int64_t num,
                                 int64_t dim, const BackwardBuffers& buf, DeviceErrorRecord* err, const Sort& sort,
                                 const Launch& launch) {
  launch(embedding_keys_kernel, cuda_detail::grid_for(k), cuda_detail::kThreads, indices, k, num, buf.keys_in,
         buf.rows_in, err);
  sort(buf.keys_in, buf.keys, buf.rows_in, buf.rows, static_cast<int>(k), key_bits(num));
  const embedding_plan::SortedKeys sorted{buf.keys, k, static_cast<uint32_t>(num)};
  const int64_t column_blocks = (dim + kColumnThreads - 1) / kColumnThreads;
  const dim3 grid(static_cast<unsigned>(embedding_plan::chunk_count(k)),
                  static_cast<unsigned>(column_blocks < 65535 ? column_blocks : 65535));
  launch(embedding_pieces_kernel<S>, grid, unsigned{kColumnThreads}, sorted, buf.rows, grad, grad_weight, dim,
         buf.head, buf.tail);
  launch(embedding_carry_kernel<S>, grid, unsigned{kColumnThreads}, sorted, grad_weight, dim, buf.head, buf.tail);
}

}  // namespace kiln::embedding_device
