// Hopper's warpgroup matrix multiply (wgmma.mma_async, sm_90a) for tensor-core kernels, on the
// operand layout and descriptors of kernels/wgmma_layout.h and the register tiles of tile.cuh:
//
//   mma_ss<T, N, kTransA, kTransB>(d, a, b, accumulate)
//                                              d[64 x N] (+)= A @ B, A and B in shared memory, K-major,
//                                              or MN-major with kTransA / kTransB (N = 32, 64, 128)
//   mma_rs<T, N, kTransB>(d, a, b, accumulate) the same with this warp's 16 rows of A in an ATile,
//                                              B K-major, or MN-major with kTransB (N = 64 or 128)
//
// d is the warp's N / 8 accumulator tiles (CTile, mma.sync's C layout), rows 16 w .. 16 w + 15 of
// the 64 for warp w of the warpgroup. All 128 threads of the warpgroup issue each call together.
//
// The instruction is asynchronous. Its protocol, which a kernel follows around every batch:
//   1. write the operands to shared memory, fence_async_smem(), then a barrier: plain stores and the
//      tensor cores' reads go through different paths ("proxies") that the fence orders;
//   2. fence(): orders this thread's earlier register writes (accumulators, A tiles) before the
//      batch reads them;
//   3. mma_ss / mma_rs, as many as the batch holds, then commit(): they form one group;
//   4. wait<0>() (or wait<n>: until at most n groups are pending), then settle(d) for every
//      accumulator the group wrote, before reading or writing it.
// settle() is an empty asm statement that takes the accumulators as read-write registers. Without it
// the compiler may move a read of an accumulator above the wait, which touches no register.
//
// A .cu file that includes this must compile for sm_90a only (kernels/CMakeLists.txt builds these
// kernels for compute_90a; the launch takes them only on a device of compute capability 9.0).
//
// Compiled by the host compiler, this file runs on the emulator of kernels/simt/simt.h, through the
// model of kernels/cuda/wgmma_host.h: every warp computes its own 16 rows, summing in float32 in k
// order from the elements that the descriptors locate (wgmma_layout.h) and, for A in registers,
// from the warp's A fragments. The calls are warp collectives, so
// LaunchStats::collectives_in("kernels/cuda/wgmma.cuh") counts them (4 per warpgroup instruction).
// Every thread's wgmma operations (fences, commits, waits, instructions with their descriptors and
// flags, and their source lines) must be its warpgroup's, in the same order (host::Warpgroups): on
// a GPU they are .sync.aligned. The asynchrony is modelled per thread (host::InFlight): an
// instruction is computed when the first thread of its warp lands it at a wait, from shared memory
// as it is then (host::WarpShare); its accumulators read as NaN until the thread's own wait;
// issuing with no fence() since the last wait, changing an instruction's A registers before its
// wait, and exiting with instructions in flight are faults, and so is an instruction that reads
// shared memory which plain stores or cp.async changed with no fence_async_smem in the block since
// (the emulator keeps the async proxy's view apart: simt::async_proxy_read). A missing settle (a
// compiler matter) still passes there and only shows on a GPU; so does a fence missing in a thread
// whose plain stores wrote an operand while another thread fences (a thread whose cp.async did is
// caught).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/tile.cuh"
#include "kernels/wgmma_layout.h"
#if !defined(__CUDACC__)
#include <memory>
#include <vector>

#include "kernels/cuda/wgmma_host.h"
#endif

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "kernels/cuda/wgmma.cuh needs sm_90a: compile this file for compute_90a only"
#endif

namespace kiln::wgmma {

using tile::ATile;
using tile::CTile;

// The shared-window address of p in the block's shared memory: what descriptors hold.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
#if defined(__CUDACC__)
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#else
  return static_cast<uint32_t>(static_cast<const char*>(p) - reinterpret_cast<const char*>(tile::dynamic_smem()));
#endif
}

#if defined(__CUDACC__)

__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
template <int kTiles> __device__ __forceinline__ void settle(CTile (&d)[kTiles]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    asm volatile("" : "+f"(d[t].r[0]), "+f"(d[t].r[1]), "+f"(d[t].r[2]), "+f"(d[t].r[3])::"memory");
  }
}

// The accumulator operands: tile t's four floats are registers 4 t .. 4 t + 3.
#define KILN_WG_TILE(d, t) "+f"(d[t].r[0]), "+f"(d[t].r[1]), "+f"(d[t].r[2]), "+f"(d[t].r[3])
#define KILN_WG_ACC16(d) KILN_WG_TILE(d, 0), KILN_WG_TILE(d, 1), KILN_WG_TILE(d, 2), KILN_WG_TILE(d, 3)
#define KILN_WG_ACC32(d)                                                                                 \
  KILN_WG_TILE(d, 0), KILN_WG_TILE(d, 1), KILN_WG_TILE(d, 2), KILN_WG_TILE(d, 3), KILN_WG_TILE(d, 4), \
      KILN_WG_TILE(d, 5), KILN_WG_TILE(d, 6), KILN_WG_TILE(d, 7)
#define KILN_WG_ACC64(d)                                                                                   \
  KILN_WG_ACC32(d), KILN_WG_TILE(d, 8), KILN_WG_TILE(d, 9), KILN_WG_TILE(d, 10), KILN_WG_TILE(d, 11),     \
      KILN_WG_TILE(d, 12), KILN_WG_TILE(d, 13), KILN_WG_TILE(d, 14), KILN_WG_TILE(d, 15)
#define KILN_WG_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define KILN_WG_REGS32                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define KILN_WG_REGS64                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "  \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "  \
  "%62, %63}"
// scale-d is a predicate: false overwrites d with the product, true adds to it.
#define KILN_WG_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
#define KILN_WG_OP(N, TY) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " "
// The forms attention uses (both operands in shared memory at N = 32, 64, 128; A in registers at
// N = 64, 128), each one asm statement for the element type's name TY.
#define KILN_WG_SS32(TY)                                                                                  \
  asm volatile(KILN_WG_PRED(18) KILN_WG_OP(32, TY) KILN_WG_REGS16 ", %16, %17, p, 1, 1, %19, %20;\n}\n" \
               : KILN_WG_ACC16(d)                                                                         \
               : "l"(a), "l"(b), "r"(acc), "n"(kTA), "n"(kTB))
#define KILN_WG_SS64(TY)                                                                                  \
  asm volatile(KILN_WG_PRED(34) KILN_WG_OP(64, TY) KILN_WG_REGS32 ", %32, %33, p, 1, 1, %35, %36;\n}\n" \
               : KILN_WG_ACC32(d)                                                                         \
               : "l"(a), "l"(b), "r"(acc), "n"(kTA), "n"(kTB))
#define KILN_WG_RS64(TY)                                                                                \
  asm volatile(KILN_WG_PRED(37) KILN_WG_OP(64, TY) KILN_WG_REGS32                                       \
               ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                       \
               : KILN_WG_ACC32(d)                                                                       \
               : "r"(x.r[0]), "r"(x.r[1]), "r"(x.r[2]), "r"(x.r[3]), "l"(b), "r"(acc), "n"(kTrans))
#define KILN_WG_SS128(TY)                                                                                 \
  asm volatile(KILN_WG_PRED(66) KILN_WG_OP(128, TY) KILN_WG_REGS64 ", %64, %65, p, 1, 1, %67, %68;\n}\n" \
               : KILN_WG_ACC64(d)                                                                         \
               : "l"(a), "l"(b), "r"(acc), "n"(kTA), "n"(kTB))
#define KILN_WG_RS128(TY)                                                                               \
  asm volatile(KILN_WG_PRED(69) KILN_WG_OP(128, TY) KILN_WG_REGS64                                      \
               ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                       \
               : KILN_WG_ACC64(d)                                                                       \
               : "r"(x.r[0]), "r"(x.r[1]), "r"(x.r[2]), "r"(x.r[3]), "l"(b), "r"(acc), "n"(kTrans))

template <typename T> inline constexpr bool kIsBf16 = std::is_same_v<T, __nv_bfloat16>;

// Both operands in shared memory, K-major, or MN-major with kTransA / kTransB (the instruction's
// transpose flags). N = 32, 64 or 128.
template <typename T, int N, bool kTransA = false, bool kTransB = false>
__device__ __forceinline__ void mma_ss(CTile (&d)[N / 8], uint64_t a, uint64_t b, bool accumulate) {
  static_assert(N == 32 || N == 64 || N == 128, "mma_ss is instantiated for N = 32, 64 and 128");
  const int acc = accumulate ? 1 : 0;
  constexpr int kTA = kTransA ? 1 : 0, kTB = kTransB ? 1 : 0;
  if constexpr (N == 32) {
    if constexpr (kIsBf16<T>) KILN_WG_SS32("bf16");
    else KILN_WG_SS32("f16");
  } else if constexpr (N == 64) {
    if constexpr (kIsBf16<T>) KILN_WG_SS64("bf16");
    else KILN_WG_SS64("f16");
  } else {
    if constexpr (kIsBf16<T>) KILN_WG_SS128("bf16");
    else KILN_WG_SS128("f16");
  }
}

// A from this warp's ATile, B in shared memory (MN-major with kTransB). N = 64 or 128.
template <typename T, int N, bool kTransB>
__device__ __forceinline__ void mma_rs(CTile (&d)[N / 8], const ATile<T>& x, uint64_t b, bool accumulate) {
  static_assert(N == 64 || N == 128, "mma_rs is instantiated for N = 64 and 128");
  const int acc = accumulate ? 1 : 0;
  constexpr int kTrans = kTransB ? 1 : 0;
  if constexpr (N == 64) {
    if constexpr (kIsBf16<T>) KILN_WG_RS64("bf16");
    else KILN_WG_RS64("f16");
  } else {
    if constexpr (kIsBf16<T>) KILN_WG_RS128("bf16");
    else KILN_WG_RS128("f16");
  }
}

#undef KILN_WG_TILE
#undef KILN_WG_ACC16
#undef KILN_WG_ACC32
#undef KILN_WG_ACC64
#undef KILN_WG_REGS16
#undef KILN_WG_REGS32
#undef KILN_WG_REGS64
#undef KILN_WG_PRED
#undef KILN_WG_OP
#undef KILN_WG_SS32
#undef KILN_WG_SS64
#undef KILN_WG_SS128
#undef KILN_WG_RS64
#undef KILN_WG_RS128

#else  // the emulator

inline void fence_async_smem() { simt::fence_proxy_async(); }
template <int kTiles> void settle(CTile (&)[kTiles]) {}

inline void fence(simt::Site where = simt::Site::here()) {
  host::record({host::Operation::kFence, 0, "", false, false, false, 0, 0, where});
  host::in_flight().fenced = true;
}
inline void commit(simt::Site where = simt::Site::here()) {
  host::record({host::Operation::kCommit, 0, "", false, false, false, 0, 0, where});
  ++host::in_flight().committed;
}
template <int kPending> void wait(simt::Site where = simt::Site::here()) {
  host::record({host::Operation::kWait, kPending, "", false, false, false, 0, 0, where});
  host::in_flight().wait(kPending);
}

template <typename T, int N, bool kTransA = false, bool kTransB = false>
void mma_ss(CTile (&d)[N / 8], uint64_t a, uint64_t b, bool accumulate, simt::Site where = simt::Site::here()) {
  (void)simt::warp_gather(nullptr, 0);  // every lane of the warp issues it
  const int64_t op =
      host::record({host::Operation::kMmaSS, N, host::type_name<T>(), kTransA, kTransB, accumulate, a, b, where});
  host::check_swizzle(a);
  host::check_swizzle(b);
  const std::shared_ptr<host::WarpShare> share = host::warp_share(op, N, [&] {
    return [a, b, where, row0 = host::warp_row0()](float* out) {
      host::proxy_read_operands<N>(a, true, kTransA, b, kTransB, where);
      const char* const smem = host::smem_base();
      host::warp_products<N>(
          out,
          [&](int r, int k) {
            const int row = row0 + r;
            return host::smem_at<T>(smem, kTransA ? mn_major_address(a, row, k) : k_major_address(a, row, k));
          },
          [&](int col, int k) {
            return host::smem_at<T>(smem, kTransB ? mn_major_address(b, col, k) : k_major_address(b, col, k));
          });
    };
  });
  host::in_flight().issue(
      &d[0].r[0], N / 2, accumulate, [share](float* out) { host::lane_elements<N>(share->get(), out); }, nullptr);
}

template <typename T, int N, bool kTransB>
void mma_rs(CTile (&d)[N / 8], const ATile<T>& x, uint64_t b, bool accumulate, simt::Site where = simt::Site::here()) {
  static const tile::host::Owners<tile::kM, tile::kK> a_owner =
      tile::host::invert<tile::kM, tile::kK, tile::kAElems>(tile::a_coord);
  struct Fragment {
    float a[tile::kAElems];
  };
  Fragment mine;
  for (int i = 0; i < tile::kAElems; ++i) mine.a[i] = tile::host::element<T>(x.r, i);
  const auto* gathered = static_cast<const Fragment*>(simt::warp_gather(&mine, sizeof(Fragment)));
  const int64_t op =
      host::record({host::Operation::kMmaRS, N, host::type_name<T>(), false, kTransB, accumulate, 0, b, where});
  host::check_swizzle(b);
  const std::shared_ptr<host::WarpShare> share = host::warp_share(op, N, [&] {
    // The warp's A, as the instruction read it: row r, element k is a_owner's lane and element.
    std::vector<float> a(static_cast<size_t>(tile::kM * kK));
    for (int r = 0; r < tile::kM; ++r) {
      for (int k = 0; k < kK; ++k) {
        const tile::host::Owner w = a_owner.at[r][k];
        a[static_cast<size_t>(r * kK + k)] = gathered[w.lane].a[w.elem];
      }
    }
    return [a = std::move(a), b, where](float* out) {
      host::proxy_read_operands<N>(0, false, false, b, kTransB, where);
      const char* const smem = host::smem_base();
      host::warp_products<N>(
          out, [&](int r, int k) { return a[static_cast<size_t>(r * kK + k)]; },
          [&](int col, int k) {
            return host::smem_at<T>(smem, kTransB ? mn_major_address(b, col, k) : k_major_address(b, col, k));
          });
    };
  });
  host::in_flight().issue(
      &d[0].r[0], N / 2, accumulate, [share](float* out) { host::lane_elements<N>(share->get(), out); }, x.r);
}

#endif

}  // namespace kiln::wgmma
