// Where the elements of a tensor-core tile live: the register fragments of the warp-wide
// mma.sync.m16n8k16 instruction (float16 or bfloat16 operands, float32 accumulators), as PTX's ISA
// lays them out. kernels/cuda/tile.cuh builds register tiles, their loads and stores and the mma on
// these maps, so a tensor-core kernel reads as tile algebra (load A, load B, mma into C, store C)
// instead of lane arithmetic. The maps are plain constexpr functions, compiled for the host too, so
// the CPU tests (tests/kernels/test_tile_layout.cpp) check that every fragment covers its tile
// exactly once and that a warp emulated lane by lane through them multiplies matrices; the CUDA
// test runs the real instruction through the same maps.
//
// In each map, `lane` is 0..31 and `i` the fragment element the lane holds. A lane works in a
// group of four: group = lane / 4 (0..7) picks rows, thread = lane % 4 (0..3) picks column pairs.
// Elements 2j and 2j+1 of a fragment are always adjacent along the tile's contiguous dimension, so
// a lane loads and stores them as one 32-bit word (two halves).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/macros.h"

namespace kiln::tile {

struct Coord {
  int row = 0, col = 0;
};

// The instruction's shape: D[16x8] += A[16x16] @ B[16x8].
inline constexpr int kM = 16, kN = 8, kK = 16;
inline constexpr int kWarp = 32;
// Elements per lane in each fragment: A 8 (4 registers of two halves), B 4 (2 registers), C 4 floats.
inline constexpr int kAElems = kM * kK / kWarp, kBElems = kK * kN / kWarp, kCElems = kM * kN / kWarp;

// A, 16 x 16, row-major ("row"): rows group and group + 8, column pairs 2*thread and 2*thread + 8.
KILN_HD constexpr Coord a_coord(int lane, int i) {
  return {lane / 4 + 8 * ((i / 2) % 2), 2 * (lane % 4) + i % 2 + 8 * (i / 4)};
}

// B, 16 x 8 (k x n), column-major ("col"): column `group`, row pairs 2*thread and 2*thread + 8. A
// pair runs along k, so it is contiguous in a [n, k] row-major matrix: B = K^T for K [n, k] loads
// straight from K's rows, as attention's Q @ K^T needs.
KILN_HD constexpr Coord b_coord(int lane, int i) { return {2 * (lane % 4) + i % 2 + 8 * (i / 2), lane / 4}; }

// C and D, 16 x 8 float32: rows group and group + 8, column pair 2*thread.
KILN_HD constexpr Coord c_coord(int lane, int i) { return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2}; }

// Consecutive pieces of a block's dynamic shared memory, each aligned. The kernel carves its buffer
// with it; the host computes the launch's byte count with the same calls on a null base, so the two
// cannot disagree. The device's base is only known to be kBaseAlign-aligned (kernels declare the
// buffer as float4): a piece aligned more strictly may need up to (its alignment - kBaseAlign) bytes
// more there than from the host's null base, so bytes() counts that slack.
class SmemCarver {
 public:
  static constexpr uintptr_t kBaseAlign = 16;
  KILN_HD explicit SmemCarver(void* base = nullptr)
      : base_(reinterpret_cast<uintptr_t>(base)), next_(reinterpret_cast<uintptr_t>(base)) {}
  template <typename T> KILN_HD T* take(int64_t count, uintptr_t align = kBaseAlign) {
    next_ = (next_ + align - 1) / align * align;
    if (align > max_align_) max_align_ = align;
    T* p = reinterpret_cast<T*>(next_);
    next_ += static_cast<uintptr_t>(count) * sizeof(T);
    return p;
  }
  // The bytes to launch with: enough for any kBaseAlign-aligned base.
  KILN_HD size_t bytes() const {
    const uintptr_t slack = max_align_ > kBaseAlign ? max_align_ - kBaseAlign : 0;
    return static_cast<size_t>(next_ - base_ + slack);
  }

 private:
  uintptr_t base_, next_;
  uintptr_t max_align_ = kBaseAlign;
};

}  // namespace kiln::tile
