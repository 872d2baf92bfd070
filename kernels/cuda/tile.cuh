// Register tiles for tensor-core kernels, on the fragment maps of kernels/tile_layout.h: a warp
// holds an A tile (16 x 16), a B tile (16 x 8) and a float32 C tile (16 x 8), loads them from
// row-major shared memory with ldmatrix, multiplies with mma.sync.m16n8k16 and stores C converted
// to any element type. Larger tiles are arrays of these; a kernel's loops then say which tiles
// meet, and this file says where each lane's elements are.
//
// Alignment: ldmatrix reads rows of 16 bytes, so the blocks that operands load from need rows
// (leading dimension times 2 bytes) and origins on 16 bytes: the attention kernels' tiles are rows of
// D + 8 or a query tile + 8 elements, from 16-byte pieces of their shared memory. A C tile's store
// writes pairs as 32-bit words: an even leading dimension, a 4-byte aligned origin. bfloat16 mma needs
// sm_80 or newer, as every architecture kiln builds for.
//
// Compiled by the host compiler (the CPU tests), this file runs on kernels/simt/simt.h, the CPU
// emulator of CUDA's threads: the tiles are the same, the 16-bit types are kiln's own (kernels/half.h),
// ldmatrix gathers the warp's row addresses, and mma gathers the warp's fragments and multiplies them
// through the same maps.
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include <cstring>

#include "kernels/simt/simt.h"
#endif

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/tile_layout.h"

namespace kiln::tile {

// Operand fragments of 16-bit types (__half or __nv_bfloat16), two elements per register.
template <typename T> struct ATile {
  uint32_t r[kAElems / 2];
};
template <typename T> struct BTile {
  uint32_t r[kBElems / 2];
};
// The float32 accumulator.
struct CTile {
  float r[kCElems];
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x) % kWarp; }

// The block's dynamic shared memory (kernels/cuda/device_math.cuh): what a kernel's SmemCarver carves.
using cuda_detail::dynamic_smem;

template <typename T> __device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  static_assert(sizeof(T) == 2, "tiles hold 16-bit elements");
  uint16_t a, b;
  __builtin_memcpy(&a, &lo, 2);
  __builtin_memcpy(&b, &hi, 2);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}

// ldmatrix: kCount (2 or 4) matrices of 8 x 8 16-bit elements from shared memory, one instruction for
// the warp. Lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes, 16-byte
// aligned) and gets in r[i] its two elements of matrix i: row l / 4, columns 2 (l % 4) and + 1 (a
// pair of an A tile, or of C), or with kTrans the matrix transposed, column l / 4, rows 2 (l % 4) and
// + 1 (a pair of a B tile, along k). On the host, the emulator's (simt::ldmatrix), with the site of
// the load that calls it.
#if defined(__CUDACC__)
template <int kCount, bool kTrans> __device__ __forceinline__ void ldmatrix(uint32_t (&r)[kCount], const void* row) {
  static_assert(kCount == 2 || kCount == 4, "two or four matrices");
  const auto at = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kCount == 4 && kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  } else if constexpr (kCount == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at));
  } else if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(at));
  }
}
#else
template <int kCount, bool kTrans>
void ldmatrix(uint32_t (&r)[kCount], const void* row, simt::Site where = simt::Site::here()) {
  static_assert(kCount == 2 || kCount == 4, "two or four matrices");
  simt::ldmatrix(r, kCount, kTrans, row, where);
}
#endif

// The loads of operand tiles, each one ldmatrix, from [rows, ld] row-major blocks in shared memory
// whose rows (ld elements apart) are 16-byte aligned: an A tile is four 8 x 8 matrices (rows 0-7 and
// 8-15 of columns 0-7, then of columns 8-15: a_coord's registers in order), a B tile two (k 0-7,
// then 8-15).
//
// A from a row-major [16, 16] block at `src`.
template <typename T> __device__ __forceinline__ void load_a(ATile<T>& a, const T* src, int ld) {
  const int lane = lane_id();
  ldmatrix<4, false>(a.r, src + (lane % 16) * ld + lane / 16 * 8);
}

// A = M^T for a row-major [16, 16] block of M at `src` (k rows of m): the fused attention backward's
// K^T for dQ^T = K^T dS^T. A's matrix i is M's block (k 8 (i / 2), m 8 (i % 2)) transposed.
template <typename T> __device__ __forceinline__ void load_a_transposed(ATile<T>& a, const T* src, int ld) {
  const int lane = lane_id();
  ldmatrix<4, true>(a.r, src + (lane / 16 * 8 + lane % 8) * ld + lane / 8 % 2 * 8);
}

// B = M^T for a row-major [8, 16] block of M at `src` (n rows of k): attention's K for Q @ K^T. B's
// pairs run along M's rows, as an A tile's do: M's two blocks of 8 columns, not transposed.
template <typename T> __device__ __forceinline__ void load_b_transposed(BTile<T>& b, const T* src, int ld) {
  const int lane = lane_id();
  ldmatrix<2, false>(b.r, src + lane % 8 * ld + lane / 8 % 2 * 8);
}

// B from a row-major [16, 8] block at `src` (k rows of n): attention's V for P @ V. B's pairs run
// down a column here: the two blocks of 8 rows, transposed.
template <typename T> __device__ __forceinline__ void load_b(BTile<T>& b, const T* src, int ld) {
  const int lane = lane_id();
  ldmatrix<2, true>(b.r, src + lane % 16 * ld);
}

// An A tile from a float32 C tile pair: the two 16 x 8 accumulators [c0 | c1] side by side become
// a 16 x 16 A operand (attention's probabilities P feeding P @ V without a trip through memory). C's
// element i of a lane sits where A's element i (c0) or i + 4 (c1) of the same lane does.
template <typename T> __device__ __forceinline__ void a_from_c(ATile<T>& a, const CTile& c0, const CTile& c1) {
  a.r[0] = pack2(static_cast<T>(c0.r[0]), static_cast<T>(c0.r[1]));
  a.r[1] = pack2(static_cast<T>(c0.r[2]), static_cast<T>(c0.r[3]));
  a.r[2] = pack2(static_cast<T>(c1.r[0]), static_cast<T>(c1.r[1]));
  a.r[3] = pack2(static_cast<T>(c1.r[2]), static_cast<T>(c1.r[3]));
}

__device__ __forceinline__ void fill(CTile& c, float v) {
#pragma unroll
  for (int i = 0; i < kCElems; ++i) c.r[i] = v;
}

// d += a @ b on the tensor cores, one warp.
#if defined(__CUDACC__)
__device__ __forceinline__ void mma(CTile& d, const ATile<__nv_bfloat16>& a, const BTile<__nv_bfloat16>& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
__device__ __forceinline__ void mma(CTile& d, const ATile<__half>& a, const BTile<__half>& b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d.r[0]), "+f"(d.r[1]), "+f"(d.r[2]), "+f"(d.r[3])
      : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
}
#else
// The emulator's instruction: the warp's fragments are gathered as floats (one warp collective), and
// each lane sums its four accumulator elements over k, in float32 and in k order, from the elements
// the maps place at (row, k) of A and (k, col) of B. A lane's four elements lie on two rows of A and
// two columns of B, so it first copies those rows and columns out of the gathered fragments (through
// index tables made once from the maps), then takes the four dot products from them.
namespace host {
// Which lane holds a tile element, and as which fragment element (the wgmma model's register operand
// reads A through it: kernels/cuda/wgmma.cuh).
struct Owner {
  int lane = 0, elem = 0;
};
template <int Rows, int Cols> struct Owners {
  Owner at[Rows][Cols];
};
template <int Rows, int Cols, int Elems> Owners<Rows, Cols> invert(Coord (*map)(int, int)) {
  Owners<Rows, Cols> o;
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < Elems; ++i) {
      const Coord c = map(lane, i);
      o.at[c.row][c.col] = Owner{lane, i};
    }
  }
  return o;
}
struct Operands {
  float a[kAElems], b[kBElems];
};
inline constexpr int kOperandFloats = kAElems + kBElems;
// Per lane: where (as float indices into the warp's gathered Operands) the k elements of each of its
// two A rows and two B columns are, and which row and column each of its C elements takes.
struct LaneSources {
  int a[2][kK], b[2][kK];
  int row_slot[kCElems], col_slot[kCElems];
};
struct Sources {
  LaneSources lane[kWarp];
};
inline Sources make_sources() {
  int a_at[kM][kK], b_at[kK][kN];  // the float index of each tile element in the gathered fragments
  for (int lane = 0; lane < kWarp; ++lane) {
    for (int i = 0; i < kAElems; ++i) {
      const Coord c = a_coord(lane, i);
      a_at[c.row][c.col] = lane * kOperandFloats + i;
    }
    for (int i = 0; i < kBElems; ++i) {
      const Coord c = b_coord(lane, i);
      b_at[c.row][c.col] = lane * kOperandFloats + kAElems + i;
    }
  }
  Sources s{};
  for (int lane = 0; lane < kWarp; ++lane) {
    LaneSources& l = s.lane[lane];
    int rows[2] = {-1, -1}, cols[2] = {-1, -1};
    for (int i = 0; i < kCElems; ++i) {
      const Coord c = c_coord(lane, i);
      l.row_slot[i] = c.row == rows[0] || rows[0] < 0 ? 0 : 1;
      l.col_slot[i] = c.col == cols[0] || cols[0] < 0 ? 0 : 1;
      rows[l.row_slot[i]] = c.row;
      cols[l.col_slot[i]] = c.col;
    }
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < kK; ++k) l.a[r][k] = a_at[rows[r]][k];
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < kK; ++k) l.b[c][k] = b_at[k][cols[c]];
  }
  return s;
}
template <typename T> float element(const uint32_t* regs, int elem) {
  const auto bits = static_cast<uint16_t>(regs[elem / 2] >> (16 * (elem % 2)));
  T t;
  std::memcpy(static_cast<void*>(&t), &bits, sizeof(t));
  return static_cast<float>(t);
}
}  // namespace host

template <typename T> void mma(CTile& d, const ATile<T>& a, const BTile<T>& b) {
  static const host::Sources sources = host::make_sources();
  host::Operands mine;
  for (int i = 0; i < kAElems; ++i) mine.a[i] = host::element<T>(a.r, i);
  for (int i = 0; i < kBElems; ++i) mine.b[i] = host::element<T>(b.r, i);
  static_assert(sizeof(host::Operands) == sizeof(float) * host::kOperandFloats, "gathered as one float array");
  const auto* all = static_cast<const float*>(simt::warp_gather(&mine, sizeof(host::Operands)));
  const host::LaneSources& src = sources.lane[lane_id()];
  float rows[2][kK], cols[2][kK];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < kK; ++k) rows[r][k] = all[src.a[r][k]];
  for (int c = 0; c < 2; ++c)
    for (int k = 0; k < kK; ++k) cols[c][k] = all[src.b[c][k]];
  for (int i = 0; i < kCElems; ++i) {
    const float* x = rows[src.row_slot[i]];
    const float* y = cols[src.col_slot[i]];
    float sum = 0.f;
    for (int k = 0; k < kK; ++k) sum += x[k] * y[k];
    d.r[i] += sum;
  }
}
#endif

// C into a row-major [16, 8] block at `dst`, each element converted to Out. A lane's elements 2 j and
// 2 j + 1 are adjacent in a row: for a 16-bit Out, one 32-bit store (ld even, dst 4-byte aligned).
template <typename Out> __device__ __forceinline__ void store_c(const CTile& c, Out* dst, int ld) {
  const int lane = lane_id();
#pragma unroll
  for (int j = 0; j < kCElems / 2; ++j) {
    const Coord x = c_coord(lane, 2 * j);
    if constexpr (sizeof(Out) == 2) {
      *reinterpret_cast<uint32_t*>(dst + x.row * ld + x.col) =
          pack2(static_cast<Out>(c.r[2 * j]), static_cast<Out>(c.r[2 * j + 1]));
    } else {
      dst[x.row * ld + x.col] = static_cast<Out>(c.r[2 * j]);
      dst[x.row * ld + x.col + 1] = static_cast<Out>(c.r[2 * j + 1]);
    }
  }
}

}  // namespace kiln::tile
