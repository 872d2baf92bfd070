// Tensor memory access (TMA, sm_90): one thread starts the copy of a whole box of a tensor, in up to
// five dimensions, from global to shared memory. The copy engine walks the box, writes zeros for its
// elements outside the tensor, and counts the bytes it wrote against an mbarrier's phase
// (pipeline.cuh's mbarrier_arrive_expect_tx), so the consumers' wait on that barrier is all the
// synchronization: no thread copies or waits for its own pieces, as with cp.async.
//
//   Box, invalid            kiln's description of a tensor and a box of it, and the driver's rules
//                           for it (kernels/tma_box.h)
//   Map                     what a kernel takes, in a __grid_constant__ parameter: on a GPU the driver's
//                           opaque 128-byte CUtensorMap, encoded from a Box on the host; on the
//                           emulator the Box itself
//   encode(box, map)        host: writes the map; false when the box breaks a rule of the driver's
//                           (invalid) or the driver refuses it or has no TMA, and the caller loads
//                           another way
//   copy_box(dst, map, at, bar)
//                           device, one thread: starts copying the box whose first element is at
//                           coordinates `at` (innermost first, may run past the tensor's ends) into
//                           `dst` in shared memory (128-byte aligned), dimension 0 fastest, and
//                           completes box_bytes() bytes on the mbarrier `bar`
//   store_box(map, at, src)
//                           device, one thread: the other way: starts writing the box laid out at `src`
//                           in shared memory (as copy_box would land it) to the tensor's elements at
//                           `at` on, those outside the tensor left out
//   reduce_add_box(map, at, src)
//                           the same, adding: each element added to the tensor's, atomically (a
//                           float32 map: Box::float32)
//                           Both are tracked in bulk groups, not on a barrier: commit_bulk() closes the
//                           thread's group, wait_bulk_read<N>() waits until all but the N newest groups
//                           have read their sources (which may then be overwritten), wait_bulk<N>()
//                           until they are done. The stores that wrote the source must be fenced for
//                           the async proxy (wgmma::fence_async_smem) before the start.
//
// Without swizzling (the attention forward's copies), the box lands in shared memory exactly as it is
// walked: a box of [8 elements, rows, W / 8] over a matrix viewed as [8, rows, W / 8] (strides: the
// element, the row, 16 bytes) is the matrix's rows staged by pieces, wgmma's core matrices
// (kernels/wgmma_layout.h). With Box::swizzle128 a box of [64 elements, rows] lands as a block of a
// swizzled tile, which wgmma reads in its 128-byte swizzle mode.
//
// Compiled by the host compiler, this file runs on the emulator (kernels/simt/simt.h's bulk_copy and
// bulk_store, bulk_reduce): a box lands when a thread waits on its barrier, and its destination holds
// NaN until then; a store or reduction reads its source and writes at the wait for its group, and
// faults if the source changed since the start.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cuda/pipeline.cuh"
#include "kernels/error.h"
#include "kernels/tma_box.h"
#include "kernels/wgmma_layout.h"

#if defined(__CUDACC__)
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#else
#include <array>
#include <cstring>
#endif

namespace kiln::tma {

#if defined(__CUDACC__)
using Map = CUtensorMap;

// The driver's encoder, found once through the runtime (kiln links no driver library): null when the
// driver has none.
inline PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

inline bool encode(const Box& b, Map* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 fn = encoder();
  if (fn == nullptr || !invalid(b).empty()) return false;
  cuuint64_t dims[kRank], strides[kRank - 1];
  cuuint32_t box[kRank], steps[kRank];
  for (int d = 0; d < kRank; ++d) {
    dims[d] = b.dims[d];
    box[d] = b.box[d];
    steps[d] = 1;
    if (d > 0) strides[d - 1] = b.strides[d];
  }
  const uint32_t e = b.elem_bytes();
  const CUtensorMapDataType type = b.float32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : e == 1  ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : e == 2  ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                   : e == 4  ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                             : CU_TENSOR_MAP_DATA_TYPE_UINT64;
  return fn(map, type, kRank, const_cast<void*>(b.base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
            b.swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The map's address is the parameter's own (generic): a __grid_constant__ parameter may be addressed.
__device__ __forceinline__ void copy_box(void* dst, const Map& map, const int32_t (&at)[kRank], uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], "
      "[%7];\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(at[0]), "r"(at[1]), "r"(at[2]), "r"(at[3]), "r"(at[4]),
      "r"(pipeline::shared_address(bar))
      : "memory");
}

__device__ __forceinline__ void store_box(const Map& map, const int32_t (&at)[kRank], const void* src) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n"
      ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(at[0]), "r"(at[1]), "r"(at[2]), "r"(at[3]), "r"(at[4]),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(src)))
      : "memory");
}

__device__ __forceinline__ void reduce_add_box(const Map& map, const int32_t (&at)[kRank], const void* src) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3, %4, %5}], [%6];\n"
      ::"l"(reinterpret_cast<uint64_t>(&map)), "r"(at[0]), "r"(at[1]), "r"(at[2]), "r"(at[3]), "r"(at[4]),
      "r"(static_cast<uint32_t>(__cvta_generic_to_shared(src)))
      : "memory");
}
__device__ __forceinline__ void commit_bulk() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void wait_bulk_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
template <int kPending> __device__ __forceinline__ void wait_bulk() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}
#else
using Map = Box;

inline bool encode(const Box& b, Map* map) {
  if (!invalid(b).empty()) return false;
  *map = b;
  return true;
}

namespace host {
// Walks the box at `start`: visit(byte, offset, inside) for each element in the order it has in shared
// memory, `byte` its place there (swizzled with the 128-byte swizzle), `offset` its bytes from the
// tensor's base, `inside` whether it lies within the tensor.
template <typename Visit> void walk_box(const Map& map, const std::array<int32_t, kRank>& start, Visit&& visit) {
  const uint32_t e = map.elem_bytes();
  int64_t i[kRank] = {};  // the element's place in the box
  for (uint32_t at_byte = 0; at_byte < map.box_bytes(); at_byte += e) {
    bool inside = true;
    uint64_t offset = 0;
    for (int d = 0; d < kRank; ++d) {
      const int64_t c = start[d] + i[d];
      inside = inside && c >= 0 && static_cast<uint64_t>(c) < map.dims[d];
      offset += static_cast<uint64_t>(c) * map.strides[d];
    }
    visit(map.swizzle128 ? wgmma::swizzle128(at_byte) : at_byte, offset, inside);
    for (int d = 0; d < kRank && ++i[d] == map.box[d]; ++d) i[d] = 0;
  }
}

// The box's first coordinates, kept by value until the copy, store or reduction lands.
inline std::array<int32_t, kRank> box_start(const int32_t (&at)[kRank]) {
  std::array<int32_t, kRank> start{};
  for (int d = 0; d < kRank; ++d) start[d] = at[d];
  return start;
}

// The box's place in shared memory, on the boundary a tensor copy or reduction asks for: 128 bytes,
// 1024 with the swizzle (which repeats every 1024 bytes; the dynamic shared memory starts on 1024).
inline void check_box_place(const void* p, const Map& map, const char* what, const char* role, simt::Site where) {
  const uintptr_t align = map.swizzle128 ? 1024 : 128;
  if (reinterpret_cast<uintptr_t>(p) % align != 0) {
    throw Error(std::string("simt: ") + what + " at " + where.file + ":" + std::to_string(where.line) + ": the " +
                role + " is not aligned to " + std::to_string(align) + " bytes");
  }
}
}  // namespace host

// The box is read when it lands, not now: the copy keeps the map and the coordinates by value.
inline void copy_box(void* dst, const Map& map, const int32_t (&at)[kRank], uint64_t* bar,
                     simt::Site where = simt::Site::here()) {
  host::check_box_place(dst, map, "tensor copy", "destination", where);
  simt::bulk_copy(
      dst, map.box_bytes(), bar,
      [map, start = host::box_start(at)](void* out) {
        const uint32_t e = map.elem_bytes();
        auto* out_base = static_cast<unsigned char*>(out);
        host::walk_box(map, start, [&](uint32_t byte, uint64_t offset, bool inside) {
          if (inside) std::memcpy(out_base + byte, static_cast<const unsigned char*>(map.base) + offset, e);
          else std::memset(out_base + byte, 0, e);
        });
      },
      where);
}

namespace host {
// A tensor store (add false) or reduction (add true) of the box at `src`: the writes happen at the wait
// for its group (simt::bulk_wait), from the source as it was at the start; a reduction adds as floats.
inline void write_box(bool add, const Map& map, const int32_t (&at)[kRank], const void* src, simt::Site where) {
  const char* what = add ? "tensor reduction" : "tensor store";
  check_box_place(src, map, what, "source", where);
  if (add && !map.float32) {
    throw Error("simt: tensor reduction at " + std::string(where.file) + ":" + std::to_string(where.line) +
                ": its map is not of float32 elements (Box::float32), so the add would sum bits");
  }
  const auto apply = [map, start = box_start(at), add](const void* in) {
    const auto* in_base = static_cast<const unsigned char*>(in);
    auto* base = const_cast<unsigned char*>(static_cast<const unsigned char*>(map.base));  // written
    walk_box(map, start, [&](uint32_t byte, uint64_t offset, bool inside) {
      if (!inside) return;
      if (!add) {
        std::memcpy(base + offset, in_base + byte, map.elem_bytes());
        return;
      }
      float sum = 0.f, term = 0.f;
      std::memcpy(&sum, base + offset, sizeof sum);
      std::memcpy(&term, in_base + byte, sizeof term);
      sum += term;
      std::memcpy(base + offset, &sum, sizeof sum);
    });
  };
  if (add) simt::bulk_reduce(src, map.box_bytes(), apply, where);
  else simt::bulk_store(src, map.box_bytes(), apply, where);
}
}  // namespace host

inline void store_box(const Map& map, const int32_t (&at)[kRank], const void* src,
                      simt::Site where = simt::Site::here()) {
  host::write_box(false, map, at, src, where);
}
inline void reduce_add_box(const Map& map, const int32_t (&at)[kRank], const void* src,
                           simt::Site where = simt::Site::here()) {
  host::write_box(true, map, at, src, where);
}
inline void commit_bulk() { simt::bulk_commit(); }
template <int kPending> void wait_bulk_read(simt::Site where = simt::Site::here()) { simt::bulk_wait(kPending, where); }
template <int kPending> void wait_bulk(simt::Site where = simt::Site::here()) { simt::bulk_wait(kPending, where); }
#endif

}  // namespace kiln::tma
