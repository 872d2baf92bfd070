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
// Compiled by the host compiler, this file runs on the emulator of kernels/simt/simt.h: every warp
// computes its own 16 rows, summing in float32 in k order from the elements that the descriptors
// locate (wgmma_layout.h) and, for A in registers, from the warp's A fragments. The calls are warp
// collectives, so LaunchStats::collectives_in("kernels/cuda/wgmma.cuh") counts them (4 per warpgroup
// instruction). The asynchrony is modelled per thread (host::InFlight): an instruction is computed
// when a wait lands it, from shared memory as it is then; its accumulators read as NaN until then;
// issuing with no fence() since the last wait, changing an instruction's A registers before its wait,
// and exiting with instructions in flight are faults, and so is an instruction that reads shared memory
// which plain stores or cp.async changed with no fence_async_smem in the block since (the emulator keeps
// the async proxy's view apart: simt::async_proxy_read). A missing settle (a compiler matter) still
// passes there and only shows on a GPU; so does a fence missing in a thread whose plain stores wrote
// an operand while another thread fences (a thread whose cp.async did is caught).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/tile.cuh"
#include "kernels/wgmma_layout.h"
#if !defined(__CUDACC__)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.h"
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

namespace host {
// Operand element at a shared address (an offset into the block's dynamic shared memory, which
// starts at `smem`), as float.
template <typename T> float smem_at(const char* smem, uint32_t address) {
  T t;
  std::memcpy(static_cast<void*>(&t), smem + address, sizeof(T));
  return static_cast<float>(t);
}
inline const char* smem_base() { return reinterpret_cast<const char*>(tile::dynamic_smem()); }
// The swizzle modes the emulator reads (wgmma_layout.h): none and 128-byte; the 64- and 32-byte ones
// would be misread, so they are faults.
inline void check_swizzle(uint64_t d) {
  if (swizzle_of(d) > kSwizzle128) {
    throw Error("wgmma (emulated): a descriptor with swizzle mode " + std::to_string(swizzle_of(d)) +
                " (64- or 32-byte), which the emulator does not model");
  }
}
// This thread's accumulator element i of N / 2: tile i / 4, its element i % 4. (The thread's warp
// and lane are taken once: each read of threadIdx asks the emulator for the running thread.)
struct Out {
  int row, col;  // row within the warpgroup's 64, column within N
};
struct OutCoords {
  int warp = static_cast<int>(threadIdx.x) / 32 % kWarps, lane = tile::lane_id();
  Out operator()(int i) const {
    const tile::Coord c = tile::c_coord(lane, i % 4);
    return {16 * warp + c.row, 8 * (i / 4) + c.col};
  }
};

// The async proxy reads the 16-byte chunk at a shared address (simt::async_proxy_read): a chunk
// changed by plain stores with no fence_async_smem since is a fault.
inline void proxy_read(const char* smem, uint32_t address, simt::Site where) {
  simt::async_proxy_read(smem + (address & ~15u), 16, where);
}
// What a warp's share of an instruction reads of an operand, chunk by chunk, checked by its first lane
// at its landing: the 16 elements of K of row `mn` (K-major: two chunks), or of column `mn` (MN-major:
// 8 elements of M/N a chunk, one chunk per element of K).
inline void proxy_read_k_major(const char* smem, uint64_t d, int mn, simt::Site where) {
  for (int k = 0; k < kK; k += kCore) proxy_read(smem, k_major_address(d, mn, k), where);
}
inline void proxy_read_mn_major(const char* smem, uint64_t d, int mn, simt::Site where) {
  for (int k = 0; k < kK; ++k) proxy_read(smem, mn_major_address(d, mn, k), where);
}
// The warp's 16 rows of A (when A is in shared memory, K-major or with a_mn_major MN-major) and all N
// rows of B.
template <int N>
void proxy_read_operands(uint64_t a, bool a_in_smem, bool a_mn_major, uint64_t b, bool b_mn_major,
                         simt::Site where) {
  if (simt::lane() != 0) return;
  const char* const smem = smem_base();
  if (a_in_smem) {
    const int row0 = OutCoords{}(0).row;  // the warp's first row: lane 0's
    for (int r = row0; r < row0 + tile::kM; r += a_mn_major ? kCore : 1) {
      if (a_mn_major) proxy_read_mn_major(smem, a, r, where);
      else proxy_read_k_major(smem, a, r, where);
    }
  }
  for (int n = 0; n < N; n += b_mn_major ? kCore : 1) {
    if (b_mn_major) proxy_read_mn_major(smem, b, n, where);
    else proxy_read_k_major(smem, b, n, where);
  }
}

// A thread's instructions in flight. An instruction is computed when a wait lands it, from shared
// memory as it is then, so a tile overwritten before the wait gives a wrong result. Its accumulators
// read as NaN from the issue until then (their values meanwhile are kept here), and the A registers
// of an RS instruction must be as they were at the issue. Issuing needs a fence() since the thread's
// last wait: the registers the batch reads were written by the thread in between.
struct InFlight final : simt::ThreadState {
  struct Op {
    float* d;  // this thread's count accumulator elements
    int count;
    bool accumulate;
    int group;  // the commit count at the issue: its group once committed
    std::function<void(float*)> product;  // this thread's elements of A @ B, computed at the landing
    const uint32_t* a_regs;               // an RS instruction's A registers (else null), and their bits
    uint32_t a_bits[tile::kAElems / 2];
  };
  std::vector<Op> ops;
  std::vector<std::pair<float*, std::vector<float>>> values;  // accumulators with instructions in flight
  int committed = 0;
  bool fenced = false;

  std::string exit_fault() const override {
    return ops.empty() ? std::string() : std::to_string(ops.size()) + " wgmma instructions it never waited for";
  }
  std::vector<float>* value_of(const float* d) {
    for (auto& [at, v] : values) {
      if (at == d) return &v;
    }
    return nullptr;
  }
  void issue(float* d, int count, bool accumulate, std::function<void(float*)> product, const uint32_t* a_regs) {
    if (!fenced) {
      throw Error("wgmma (emulated): an instruction issued with no wgmma::fence() since the thread's last wait");
    }
    if (value_of(d) == nullptr) values.emplace_back(d, std::vector<float>(d, d + count));
    Op op{d, count, accumulate, committed, std::move(product), a_regs, {}};
    if (a_regs != nullptr) std::memcpy(op.a_bits, a_regs, sizeof(op.a_bits));
    ops.push_back(std::move(op));
    std::fill(d, d + count, std::nanf(""));
  }
  void wait(int pending) {
    const int land_below = committed - pending;
    size_t n = 0;
    std::vector<float> p;
    for (; n < ops.size() && ops[n].group < land_below; ++n) {
      const Op& op = ops[n];
      if (op.a_regs != nullptr && std::memcmp(op.a_regs, op.a_bits, sizeof(op.a_bits)) != 0) {
        throw Error("wgmma (emulated): the A registers of an instruction changed before the wait that landed it");
      }
      p.assign(static_cast<size_t>(op.count), 0.f);
      op.product(p.data());
      std::vector<float>& v = *value_of(op.d);
      for (int i = 0; i < op.count; ++i) v[i] = (op.accumulate ? v[i] : 0.f) + p[i];
    }
    ops.erase(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(n));
    // Accumulators no instruction in flight writes any more take their values.
    for (size_t i = 0; i < values.size();) {
      float* d = values[i].first;
      if (std::any_of(ops.begin(), ops.end(), [&](const Op& op) { return op.d == d; })) {
        ++i;
        continue;
      }
      std::copy(values[i].second.begin(), values[i].second.end(), d);
      values.erase(values.begin() + static_cast<std::ptrdiff_t>(i));
    }
    fenced = false;
  }
};
inline InFlight& in_flight() { return simt::thread_state<InFlight>(); }
}  // namespace host

inline void fence() { host::in_flight().fenced = true; }
inline void commit() { ++host::in_flight().committed; }
template <int kPending> void wait() { host::in_flight().wait(kPending); }

template <typename T, int N, bool kTransA = false, bool kTransB = false>
void mma_ss(CTile (&d)[N / 8], uint64_t a, uint64_t b, bool accumulate, simt::Site where = simt::Site::here()) {
  (void)simt::warp_gather(nullptr, 0);  // every lane of the warp issues it
  host::check_swizzle(a);
  host::check_swizzle(b);
  host::in_flight().issue(
      &d[0].r[0], N / 2, accumulate,
      [a, b, where](float* out) {
        host::proxy_read_operands<N>(a, true, kTransA, b, kTransB, where);
        const char* const smem = host::smem_base();
        const host::OutCoords coords;
        for (int i = 0; i < N / 2; ++i) {
          const host::Out o = coords(i);
          for (int k = 0; k < kK; ++k) {
            const uint32_t at_a = kTransA ? mn_major_address(a, o.row, k) : k_major_address(a, o.row, k);
            const uint32_t at_b = kTransB ? mn_major_address(b, o.col, k) : k_major_address(b, o.col, k);
            out[i] += host::smem_at<T>(smem, at_a) * host::smem_at<T>(smem, at_b);
          }
        }
      },
      nullptr);
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
  std::vector<Fragment> all(gathered, gathered + 32);  // the warp's A, as the instruction read it
  host::check_swizzle(b);
  host::in_flight().issue(
      &d[0].r[0], N / 2, accumulate,
      [all = std::move(all), b, where](float* out) {
        host::proxy_read_operands<N>(0, false, false, b, kTransB, where);
        const char* const smem = host::smem_base();
        const host::OutCoords coords;
        for (int i = 0; i < N / 2; ++i) {
          const host::Out o = coords(i);
          const int row = o.row % 16;  // within this warp's A tile
          for (int k = 0; k < kK; ++k) {
            const tile::host::Owner w = a_owner.at[row][k];
            const uint32_t at = kTransB ? mn_major_address(b, o.col, k) : k_major_address(b, o.col, k);
            out[i] += all[static_cast<size_t>(w.lane)].a[w.elem] * host::smem_at<T>(smem, at);
          }
        }
      },
      x.r);
}

#endif

}  // namespace kiln::wgmma
