// Asynchronous copies from global to shared memory (cp.async, sm_80 and newer): a thread starts a copy,
// goes on computing, and waits for it later, so that a kernel can load its next tile while it works on
// the current one. The copy goes from global memory straight to shared memory, through no register.
//
//   copy_piece_async(dst, src, valid, wide)   16 bytes from src (global) to dst (shared); zeros instead
//                                             when !valid. One 16-byte copy when `wide`, else four of 4
//                                             bytes (for sources aligned to 4 bytes only)
//   commit_copies()                           the copies this thread started since its last commit
//                                             become one group
//   wait_copies<n>()                          until at most n of this thread's groups are pending
//
// A wait covers the calling thread's copies only: before other threads read them, every thread waits
// for its own and then the block meets at a barrier. A commit with no copies is an empty group, which
// keeps the count of groups the same on every pass of a pipeline's loop.
//
// Compiled by the host compiler, this file runs on the emulator of kernels/simt/simt.h, which lands a
// copy only when its thread waits for it and until then fills its destination with NaN: a read before
// the wait (or with no barrier after it), or a copy started over a buffer other warps still read, shows
// in the results. The emulator also checks the alignment of both ends and that the destination is
// shared memory.
#pragma once

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#if !defined(__CUDACC__)
#include "kernels/simt/simt.h"
#endif

namespace kiln::tile {

// Elements of a 16-bit type in one 16-byte piece.
inline constexpr int kPieceElems = 8;

#if defined(__CUDACC__)
// .cg: 16-byte copies bypass L1 (each piece is read once per block); .ca: the 4-byte form, which .cg
// lacks. The source size operand (the last) is 0 for a piece past the operand's end: zeros are written
// and the source, a valid address all the same, is not read.
__device__ __forceinline__ void copy_piece_async(void* dst, const void* src, bool valid, bool wide) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const auto s = __cvta_generic_to_global(src);
  if (wide) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(s), "r"(valid ? 16 : 0) : "memory");
  } else {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d + 4 * w), "l"(s + 4 * w),
                   "r"(valid ? 4 : 0)
                   : "memory");
    }
  }
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#else
inline void copy_piece_async(void* dst, const void* src, bool valid, bool wide) {
  if (wide) {
    simt::copy_async(dst, src, 16, valid ? 16 : 0);
  } else {
    for (int w = 0; w < 4; ++w) {
      simt::copy_async(static_cast<char*>(dst) + 4 * w, static_cast<const char*>(src) + 4 * w, 4, valid ? 4 : 0);
    }
  }
}
inline void commit_copies() { simt::commit_copies(); }
template <int kPending> void wait_copies() { simt::wait_copies(kPending); }
#endif

// Starts copying rows [r0, r0 + rows) of a row-strided [count, W] operand at `base` (16-bit elements,
// row_stride apart) into a shared tile, one 16-byte piece per thread and pass: pieces of rows past
// `count` are zeros. `place(idx)` says where the block's idx-th piece goes, as a Piece: its row and
// first column in the tile and its element offset there. The layouts differ between kernels (padded
// rows for mma.sync, core matrices for wgmma), the copying does not. The copying threads are
// `threads` of them, this one `thread`-th: by default the whole block.
struct Piece {
  int row, col, offset;
};
template <int W, typename T, typename Place>
__device__ __forceinline__ void copy_rows_async(T* tile, Place place, const T* base, int64_t row_stride, int64_t r0,
                                                int64_t count, int rows, bool wide,
                                                int thread = static_cast<int>(threadIdx.x),
                                                int threads = static_cast<int>(blockDim.x)) {
  static_assert(sizeof(T) == 2 && W % kPieceElems == 0, "rows of 16-bit elements, whole 16-byte pieces");
  for (int idx = thread; idx < rows * (W / kPieceElems); idx += threads) {
    const Piece at = place(idx);
    const int64_t row = r0 + at.row;
    const bool valid = row < count;
    copy_piece_async(tile + at.offset, valid ? base + row * row_stride + at.col : base, valid, wide);
  }
}

// Whether a 16-bit operand's rows can be copied in 16-byte pieces: its start (at `base`, with any
// batch entry's offset along `batch_strides`) and its row stride are multiples of 16 bytes. Views such
// as a slice of a fused projection at an odd offset are not, and take 4-byte copies.
inline bool wide_rows(const void* base, const int64_t* batch_strides, int batch_dims, int64_t row_stride) {
  if (!cuda_detail::aligned16(base) || row_stride % kPieceElems != 0) return false;
  for (int d = 0; d < batch_dims; ++d) {
    if (batch_strides[d] % kPieceElems != 0) return false;
  }
  return true;
}

}  // namespace kiln::tile
