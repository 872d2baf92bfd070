// Where Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a) finds its operands: the shared-
// memory descriptors and the layout kiln stages operand tiles in. kernels/cuda/wgmma.cuh issues the
// instruction on these; the CPU tests (tests/kernels/test_wgmma.cpp) check the layout and the
// descriptors against each other, and the emulator's wgmma reads its operands through the same
// functions. Like kernels/tile_layout.h, these are plain constexpr functions for host and device.
//
// The instruction: a warpgroup (4 consecutive warps, 128 threads) computes D[64 x N] += A[64 x 16] @
// B[16 x N]. D is float32 in registers: warp w of the group holds rows 16 w .. 16 w + 15, and within
// a warp the N columns are N / 8 accumulator tiles of mma.sync's C layout side by side (tile_layout.h's
// c_coord; register 4 t + e is tile t's element e). A comes from registers (a warp's 16 rows as
// mma.sync's A tile, a_coord) or from shared memory; B always from shared memory.
//
// Shared-memory operands are read in "core matrices" of 8 rows of 16 bytes (8 16-bit elements), 128
// contiguous bytes each. A 64-bit descriptor says where the first core matrix is and how far apart
// the others are: LBO (the leading-dimension byte offset) between core matrices adjacent along K, SBO
// (the stride-dimension byte offset) between core matrices adjacent along M or N. Without swizzling
// (the backward's mode; the forward's other) an operand is either
//   K-major:  a core matrix's rows run along M/N and its 16 bytes along K (K contiguous), or
//   MN-major: its rows run along K and its 16 bytes along M/N (M/N contiguous), with the
//             instruction's transpose flag for the operand (16-bit types only).
// kiln stages a [rows, W] row-major tile (W a multiple of 8) with each 8 x 8 block as one core matrix,
// the W / 8 blocks of an 8-row group side by side (stage_offset), or the rows' blocks of 8 columns one
// after another (by_pieces, the attention forward's A/B). The same bytes then serve both ways:
// with rows along M/N and W along K (K-major: attention's Q and K in Q K^T), or with rows along K
// and W along M/N (MN-major: attention's V in P V, and K as the A of the fused backward's K^T dS^T).
// Without swizzling the 16-byte stores that fill a core matrix's 8 rows hit 8 different 16-byte bank
// groups, so a warp stages without bank conflicts.
// A tile can also be staged with the 128-byte swizzle (Staging, swizzled), the layout of tensor copies
// whose box rows are 128 bytes and the attention forward's; the same bytes again serve both ways, in
// the descriptors' swizzle mode.
#pragma once

#include <cstdint>

#include "kernels/macros.h"

namespace kiln::wgmma {

// The instruction's M and K, and the warpgroup that issues it.
inline constexpr int kM = 64, kK = 16, kWarps = 4, kThreads = kWarps * 32;
// A core matrix: 8 rows of 8 16-bit elements.
inline constexpr int kCore = 8, kCoreBytes = kCore * kCore * 2;

// Element offset of (row, col) in a staged [rows, W] tile of 16-bit elements.
KILN_HD constexpr int64_t stage_offset(int64_t row, int64_t col, int64_t W) {
  return ((row / kCore) * (W / kCore) + col / kCore) * (kCore * kCore) + (row % kCore) * kCore + col % kCore;
}
// Byte distance in a tile staged so: to the core matrix of the next 8 columns (Staging has the rest).
KILN_HD constexpr uint32_t next_cols_bytes() { return kCoreBytes; }

// The descriptor: start address, LBO and SBO in 16-byte units in bits 0-13, 16-29 and 32-45, and in
// bits 62-63 the swizzle mode: 0 none, 1 128-byte (kSwizzle128; 2 and 3, 64- and 32-byte, kiln does
// not use). Bits 49-51, the base offset, stay 0: a swizzled tile starts on a 1024-byte boundary.
// Addresses are in the shared window (on the emulator: offsets into the block's dynamic shared
// memory), which 14 bits of 16 bytes cover (256 KiB).
inline constexpr uint32_t kSwizzle128 = 1;
KILN_HD constexpr uint64_t descriptor(uint32_t start, uint32_t lbo, uint32_t sbo, uint32_t swizzle = 0) {
  return static_cast<uint64_t>((start >> 4) & 0x3FFFu) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32) | (static_cast<uint64_t>(swizzle & 3u) << 62);
}
KILN_HD constexpr uint32_t start_of(uint64_t d) { return static_cast<uint32_t>(d & 0x3FFFu) << 4; }
KILN_HD constexpr uint32_t lbo_of(uint64_t d) { return static_cast<uint32_t>((d >> 16) & 0x3FFFu) << 4; }
KILN_HD constexpr uint32_t sbo_of(uint64_t d) { return static_cast<uint32_t>((d >> 32) & 0x3FFFu) << 4; }
KILN_HD constexpr uint32_t swizzle_of(uint64_t d) { return static_cast<uint32_t>(d >> 62); }

// The 128-byte swizzle, on a shared-memory byte address: the 16-byte chunk within a 128-byte row
// (bits 4-6) is XORed with the row's place within 1024 bytes (bits 7-9). Tensor copies with
// CU_TENSOR_MAP_SWIZZLE_128B write this pattern (kernels/cuda/tma.cuh), and wgmma reads it back in
// mode kSwizzle128: 8 rows of 128 bytes, a row's chunks spread over all 8 bank groups.
KILN_HD constexpr uint32_t swizzle128(uint32_t address) { return address ^ (((address >> 7) & 7u) << 4); }
// The same descriptor `bytes` further on (a multiple of 16 that keeps the start within 14 bits): the
// next K step of an operand, or another operand laid out alike.
KILN_HD constexpr uint64_t advance(uint64_t d, uint32_t bytes) { return d + (bytes >> 4); }

// Byte address of operand element (mn, k) through descriptor d: row mn of A (M) or column mn of B
// (N), and k (0 .. 15) along the contraction. What the instruction reads, and what the emulator
// reads. Without swizzling, core matrices: SBO between those adjacent along M/N, LBO along K. With
// the 128-byte swizzle, rows of 128 bytes (64 elements), swizzle128 applied to the address:
// - K-major: a row of M/N holds K, and the 8 rows of a group are 128 bytes apart, the groups SBO
//   apart; the instruction's 16 elements of K are 32 contiguous bytes before the swizzle (LBO unused);
// - MN-major: a row of K holds 64 elements of M/N, the 8 rows of a group 128 bytes apart and the
//   groups SBO apart; the next 64 elements of M/N are LBO on.
KILN_HD constexpr uint32_t k_major_address(uint64_t d, int mn, int k) {
  if (swizzle_of(d) == kSwizzle128) {
    return swizzle128(start_of(d) + static_cast<uint32_t>(mn / kCore) * sbo_of(d) +
                      static_cast<uint32_t>((mn % kCore) * 128 + k * 2));
  }
  return start_of(d) + static_cast<uint32_t>(mn / kCore) * sbo_of(d) + static_cast<uint32_t>(k / kCore) * lbo_of(d) +
         static_cast<uint32_t>((mn % kCore) * 16 + (k % kCore) * 2);
}
KILN_HD constexpr uint32_t mn_major_address(uint64_t d, int mn, int k) {
  if (swizzle_of(d) == kSwizzle128) {
    return swizzle128(start_of(d) + static_cast<uint32_t>(mn / 64) * lbo_of(d) + static_cast<uint32_t>(k / kCore) *
                      sbo_of(d) + static_cast<uint32_t>((k % kCore) * 128 + (mn % 64) * 2));
  }
  return start_of(d) + static_cast<uint32_t>(mn / kCore) * sbo_of(d) + static_cast<uint32_t>(k / kCore) * lbo_of(d) +
         static_cast<uint32_t>((k % kCore) * 16 + (mn % kCore) * 2);
}

// A staged [rows, W] tile's arrangement. Three orders:
// - by row groups (stage_offset's): the W / 8 core matrices of an 8-row group side by side, then the
//   next group's;
// - by pieces, the order a tensor copy (TMA, kernels/cuda/tma.cuh) writes without swizzling when its
//   box runs over 8 elements (one 16-byte piece), then the rows, then the pieces: rows 0 .. rows - 1
//   of columns 0 .. 7, then of columns 8 .. 15, ...;
// - swizzled: blocks of 64 columns one after another, each its rows of 128 bytes, whose 16-byte
//   chunks are permuted by swizzle128, as a tensor copy with the 128-byte swizzle writes a box of
//   [64 elements, rows]. The tile starts on 1024 bytes and rows is a multiple of 8.
// In the first two a core matrix is 128 contiguous bytes; the descriptors below read all three.
enum class Order : uint8_t { kRowGroups, kPieces, kSwizzled };
KILN_HD constexpr const char* order_name(Order o) {
  return o == Order::kRowGroups ? "by row groups" : o == Order::kPieces ? "by pieces" : "swizzled";
}
struct Staging {
  int64_t rows = 0, W = 0;
  Order order = Order::kRowGroups;

  // Not swizzled: byte distances to the core matrix of the next 8 columns, and of the next 8 rows.
  KILN_HD constexpr uint32_t next_cols_bytes() const {
    return order == Order::kPieces ? static_cast<uint32_t>(rows / kCore) * kCoreBytes : kCoreBytes;
  }
  KILN_HD constexpr uint32_t next_rows_bytes() const {
    return order == Order::kPieces ? kCoreBytes : static_cast<uint32_t>(W / kCore) * kCoreBytes;
  }
  // Swizzled: the bytes of a 64-column block.
  KILN_HD constexpr uint32_t block_bytes() const { return static_cast<uint32_t>(rows) * 128; }
  // Byte offset of (row, col) before the swizzle: what a descriptor's start and its steps add up
  // (row a multiple of 8 and, swizzled, col a multiple of 8 within a row of 64).
  KILN_HD constexpr uint32_t position(int64_t row, int64_t col) const {
    if (order == Order::kSwizzled) {
      return static_cast<uint32_t>((col / 64) * block_bytes() + row * 128 + (col % 64) * 2);
    }
    return static_cast<uint32_t>((row / kCore) * next_rows_bytes() + (col / kCore) * next_cols_bytes() +
                                 ((row % kCore) * kCore + col % kCore) * 2);
  }
  // Element offset of (row, col): the position, swizzled where the tile is (the tile on 1024 bytes).
  KILN_HD constexpr int64_t offset(int64_t row, int64_t col) const {
    return (order == Order::kSwizzled ? swizzle128(position(row, col)) : position(row, col)) / 2;
  }
  // Row and first column of the i-th 16-byte piece (8 elements of a row) in memory order: not
  // swizzled, piece i % 8 of core matrix i / 8; swizzled, chunk i % 8 of row i / 8 % rows of block
  // i / (8 rows), before the swizzle. Copies that take consecutive pieces write contiguous bytes, or,
  // swizzled, 128-byte rows whose chunks land in 8 different bank groups.
  KILN_HD constexpr int64_t piece_row(int64_t i) const {
    if (order == Order::kSwizzled) return i / kCore % rows;
    return (order == Order::kPieces ? i / kCore % (rows / kCore) : i / kCore / (W / kCore)) * kCore + i % kCore;
  }
  KILN_HD constexpr int64_t piece_col(int64_t i) const {
    if (order == Order::kSwizzled) return i / (kCore * rows) * 64 + i % kCore * kCore;
    return (order == Order::kPieces ? i / kCore / (rows / kCore) : i / kCore % (W / kCore)) * kCore;
  }
};
KILN_HD constexpr Staging by_row_groups(int64_t W) { return Staging{0, W, Order::kRowGroups}; }
KILN_HD constexpr Staging by_pieces(int64_t rows, int64_t W) { return Staging{rows, W, Order::kPieces}; }
KILN_HD constexpr Staging swizzled(int64_t rows, int64_t W) { return Staging{rows, W, Order::kSwizzled}; }

// Descriptors for a staged tile at shared address `base`:
// - rows along M/N, W along K (K-major): the K step of columns 16 t .. 16 t + 15 starts
//   s.position(0, 16 t) on (k_step_bytes(s) apart, but for a swizzled tile only within a 64-column
//   block);
KILN_HD constexpr uint64_t rows_by_k(uint32_t base, Staging s) {
  return s.order == Order::kSwizzled ? descriptor(base, 16, 8 * 128, kSwizzle128)
                                     : descriptor(base, s.next_cols_bytes(), s.next_rows_bytes());
}
KILN_HD constexpr uint32_t k_step_bytes(Staging s) { return s.position(0, 16); }
// - rows along K, W along N or M (MN-major, with the operand's transpose flag): the K step of rows
//   16 t .. 16 t + 15 starts s.position(16 t, 0) on (row_step_bytes(s) apart).
KILN_HD constexpr uint64_t rows_by_n(uint32_t base, Staging s) {
  return s.order == Order::kSwizzled ? descriptor(base, s.block_bytes(), 8 * 128, kSwizzle128)
                                     : descriptor(base, s.next_rows_bytes(), s.next_cols_bytes());
}
KILN_HD constexpr uint32_t row_step_bytes(Staging s) { return s.position(16, 0); }
// The same for a tile staged by row groups (stage_offset), W wide.
KILN_HD constexpr uint64_t rows_by_k(uint32_t base, int64_t W) { return rows_by_k(base, by_row_groups(W)); }
KILN_HD constexpr uint32_t k_step_bytes() { return 2 * next_cols_bytes(); }
KILN_HD constexpr uint64_t rows_by_n(uint32_t base, int64_t W) { return rows_by_n(base, by_row_groups(W)); }
KILN_HD constexpr uint32_t row_step_bytes(int64_t W) { return row_step_bytes(by_row_groups(W)); }

}  // namespace kiln::wgmma
