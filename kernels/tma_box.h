// Tensor memory access (TMA) on the host's side: kiln's description of a tensor and a box of it
// (Box), and the rules the driver's encoder keeps (invalid). Plain C++, for host and device alike, as
// kernels/wgmma_layout.h is: kernels/cuda/tma.cuh encodes a Box into the driver's tensor map and
// issues the copies, and the tests build and check boxes with this header alone.
//
//   Box          the base address; the sizes of five dimensions in elements, innermost first (unused
//                ones 1); their strides in bytes (dimension 0's is the element's size: it is
//                contiguous); the box's extent in each; whether it lands with the 128-byte swizzle;
//                whether its elements are float32 (a reduction's add needs the map to say so)
//   invalid(b)   "" when the box keeps the driver's rules for a tiled map without interleave,
//                else the rule it breaks
#pragma once

#include <cstdint>
#include <string>

#include "kernels/macros.h"

namespace kiln::tma {

inline constexpr int kRank = 5;

struct Box {
  const void* base = nullptr;
  uint64_t dims[kRank] = {1, 1, 1, 1, 1};
  uint64_t strides[kRank] = {};  // bytes; strides[0] is the element's size
  uint32_t box[kRank] = {1, 1, 1, 1, 1};
  // The box lands with the 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B): in rows of its innermost
  // extent, at most 128 bytes, each 16-byte chunk c of the r-th 128 bytes at chunk c ^ (r % 8)
  // (wgmma::swizzle128, kernels/wgmma_layout.h). The destination starts on 1024 bytes.
  bool swizzle128 = false;
  // The elements are float32 (CU_TENSOR_MAP_DATA_TYPE_FLOAT32), which a tensor reduction's add needs;
  // else they are bits of elem_bytes() (the copies' maps), which an add would sum as integers.
  bool float32 = false;

  KILN_HD constexpr uint32_t elem_bytes() const { return static_cast<uint32_t>(strides[0]); }
  KILN_HD constexpr uint32_t box_bytes() const {
    uint32_t n = elem_bytes();
    for (int d = 0; d < kRank; ++d) n *= box[d];
    return n;
  }
};

// The driver's rules (cuTensorMapEncodeTiled's documentation), which the emulator keeps too: a
// 16-byte aligned base; elements of 1, 2, 4 or 8 bytes; sizes 1 .. 2^32; the outer dimensions'
// strides multiples of 16 bytes below 2^40; box extents 1 .. 256 (a box may run past the tensor's
// ends), the innermost one a multiple of 16 bytes, and with the swizzle at most 128; float32
// elements of 4 bytes.
inline std::string invalid(const Box& b) {
  if (reinterpret_cast<uintptr_t>(b.base) % 16 != 0) return "the base is not aligned to 16 bytes";
  const uint64_t e = b.strides[0];
  if (e != 1 && e != 2 && e != 4 && e != 8) return "elements of " + std::to_string(e) + " bytes";
  for (int d = 0; d < kRank; ++d) {
    const std::string dim = "dimension " + std::to_string(d);
    if (b.dims[d] < 1 || b.dims[d] > (uint64_t{1} << 32)) return dim + ": size " + std::to_string(b.dims[d]);
    if (d > 0 && (b.strides[d] % 16 != 0 || b.strides[d] >= (uint64_t{1} << 40))) {
      return dim + ": stride " + std::to_string(b.strides[d]) + " bytes";
    }
    if (b.box[d] < 1 || b.box[d] > 256) return dim + ": box extent " + std::to_string(b.box[d]);
  }
  if (b.box[0] * e % 16 != 0) return "the box's innermost extent is not a multiple of 16 bytes";
  if (b.swizzle128 && b.box[0] * e > 128) return "the box's innermost extent is over the swizzle's 128 bytes";
  if (b.float32 && e != 4) return "float32 elements of " + std::to_string(e) + " bytes";
  return "";
}

// A matrix of `rows` rows of W 16-bit elements, `row_bytes` apart, viewed by pieces: [8 elements,
// rows, W / 8], with strides of the element, the row and 16 bytes. A box of [8, box_rows, W / 8]
// lands staged by pieces (wgmma::by_pieces, kernels/wgmma_layout.h), zeros for rows past
// the matrix. Dimensions 3 and 4 are left for the caller (the attention forward's batch dims), at
// size 1.
inline Box pieces_view(const void* base, uint64_t rows, uint64_t row_bytes, uint32_t W, uint32_t box_rows) {
  Box b;
  b.base = base;
  b.dims[0] = 8;
  b.dims[1] = rows;
  b.dims[2] = W / 8;
  b.strides[0] = 2;
  b.strides[1] = row_bytes;
  b.strides[2] = b.strides[3] = b.strides[4] = 16;
  b.box[0] = 8;
  b.box[1] = box_rows;
  b.box[2] = W / 8;
  return b;
}

// The same matrix as it is, [W, rows], for copies with the 128-byte swizzle: a box of [64, box_rows]
// at column 64 c lands as block c of the tile staged swizzled (wgmma::swizzled), so a tile W wide
// takes W / 64 copies, one per block. Dimensions 2 .. 4 are left for the caller, at size 1.
inline Box swizzled_view(const void* base, uint64_t rows, uint64_t row_bytes, uint32_t W, uint32_t box_rows) {
  Box b;
  b.base = base;
  b.dims[0] = W;
  b.dims[1] = rows;
  b.strides[0] = 2;
  b.strides[1] = row_bytes;
  b.strides[2] = b.strides[3] = b.strides[4] = 16;
  b.box[0] = 64;
  b.box[1] = box_rows;
  b.swizzle128 = true;
  return b;
}

}  // namespace kiln::tma
