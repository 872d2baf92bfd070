// Shared-memory barriers (mbarrier), named barriers and register reallocation (setmaxnreg), for
// sm_90a: what a warp-specialized kernel is made of, where some warps load tiles (producers) and
// others compute on them (consumers), and neither meets the other at __syncthreads.
//
//   mbarrier_init(bar, count)   one thread sets up the 8-byte barrier at `bar` in shared memory to
//                               complete a phase every `count` arrivals; a __syncthreads after it
//                               before any other thread uses it
//   mbarrier_arrive(bar)        counts one arrival, with release semantics: this thread's writes to
//                               shared memory before it are seen by a thread whose wait it completes
//   mbarrier_wait(bar, parity)  until the phase of that parity has completed (acquire semantics).
//                               Phases alternate parity, 0 first, and right after the init a wait for
//                               parity 1 passes at once: the phase "before" the first counts as done
//   fence_barrier_init()        after the inits, before the __syncthreads that publishes them: makes
//                               them visible to the copy engine too (the async proxy), whose tensor
//                               copies (tma.cuh) complete on the barriers
//   mbarrier_arrive_expect_tx(bar, bytes)
//                               the phase also waits for `bytes` of bulk copies (TMA, tma.cuh) to land
//                               on the barrier, then one arrival. A phase completes once its arrivals
//                               are in and its copies have brought exactly the bytes expected
//   named_barrier_sync(id, n)   bar.sync on the block's hardware barrier `id` (1 .. 15; 0 is
//                               __syncthreads'): counts the calling warp's threads and waits until n
//                               threads (a multiple of 32) have arrived, by either call
//   named_barrier_arrive(id, n) bar.arrive: counts them toward the same n and goes on. Two groups of
//                               warps can so take turns: each syncs on its own barrier before its turn
//                               and arrives on the other's after it (the consumers' ping-pong in
//                               attention_wgmma_forward.cuh)
//   shrink_registers<N>(),      setmaxnreg: the warpgroup (all four of its warps, together) gives back
//   grow_registers<N>()         its registers above N, or takes up to N from what others gave back
//
// A pipeline of kBuffers buffers uses two barriers per buffer: `full` (the producers arrive once its
// tile has landed) and `empty` (the consumers arrive once they are done reading it). Tile t sits in
// buffer t % kBuffers, and the parity of its phase on both barriers is (t / kBuffers) % 2
// (pipeline_parity). The producers wait on `empty` at parity 1 - that, so that the first
// kBuffers tiles pass at once.
//
// Compiled by the host compiler, this file runs on the emulator of kernels/simt/simt.h, which
// counts the arrivals and blocks a waiting thread until its phase completes: arrivals that do not
// add up deadlock there with the waits named, and a tile overwritten before its readers released it
// shows as NaN (the emulator's cp.async; its bulk copies land at a wait on their barrier, and bytes
// that do not add up deadlock or fault too). It counts the named barriers' arrivals too, and faults
// a block that ends with one partly arrived. Register reallocation is not modelled (it only changes
// how many registers the compiler may use), but a warpgroup's threads must agree on it
// (wgmma_host.h). Proxies are, as far as one memory can show them: a bulk copy that completes on a
// barrier with no fence_barrier_init (or other proxy fence) since its init is a fault
// (simt::fence_proxy_async).
#pragma once

#include <cstdint>

#if !defined(__CUDACC__)
#include "kernels/cuda/wgmma_host.h"
#include "kernels/simt/simt.h"
#endif

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "kernels/cuda/pipeline.cuh needs sm_90a (setmaxnreg): compile this file for compute_90a only"
#endif

namespace kiln::pipeline {

// The counts setmaxnreg takes (PTX): 24 to 256, a multiple of 8.
template <int N> inline constexpr bool kRegisterCount = N >= 24 && N <= 256 && N % 8 == 0;

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t shared_address(const uint64_t* bar) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(bar));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// try_wait suspends the thread for a time the hardware chooses and says whether the phase completed;
// the loop asks again until it has.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra again;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int N> __device__ __forceinline__ void shrink_registers() {
  static_assert(kRegisterCount<N>, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
#if defined(__CUDA_ARCH__)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> __device__ __forceinline__ void grow_registers() {
  static_assert(kRegisterCount<N>, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
#if defined(__CUDA_ARCH__)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
#else
inline void mbarrier_init(uint64_t* bar, int count, simt::Site where = simt::Site::here()) {
  simt::mbarrier_init(bar, count, where);
}
inline void mbarrier_arrive(uint64_t* bar, simt::Site where = simt::Site::here()) { simt::mbarrier_arrive(bar, where); }
inline void mbarrier_wait(uint64_t* bar, int parity, simt::Site where = simt::Site::here()) {
  simt::mbarrier_wait(bar, parity, where);
}
// The emulator counts the fence (simt::fence_proxy_async): a bulk copy on a barrier initialized after
// the block's last one is a fault there.
inline void fence_barrier_init() { simt::fence_proxy_async(); }
inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes, simt::Site where = simt::Site::here()) {
  simt::mbarrier_expect_tx(bar, bytes, where);
  simt::mbarrier_arrive(bar, where);
}
inline void named_barrier_sync(int id, int threads, simt::Site where = simt::Site::here()) {
  simt::named_barrier_sync(id, threads, where);
}
inline void named_barrier_arrive(int id, int threads, simt::Site where = simt::Site::here()) {
  simt::named_barrier_arrive(id, threads, where);
}
// Register counts stay as they are; the warpgroup's threads must all reach the same call with the
// same count (wgmma_host.h's warpgroup log, with the wgmma operations).
template <int N> void shrink_registers(simt::Site where = simt::Site::here()) {
  static_assert(kRegisterCount<N>, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
  wgmma::host::record({wgmma::host::Operation::kRegistersDec, N, "", false, false, false, 0, 0, where});
}
template <int N> void grow_registers(simt::Site where = simt::Site::here()) {
  static_assert(kRegisterCount<N>, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
  wgmma::host::record({wgmma::host::Operation::kRegistersInc, N, "", false, false, false, 0, 0, where});
}
#endif

// The parity of tile t's phase on the barriers of its buffer, t % kBuffers, in a pipeline of kBuffers.
template <int kBuffers> __device__ __forceinline__ int pipeline_parity(int64_t t) {
  return static_cast<int>(t / kBuffers % 2);
}

}  // namespace kiln::pipeline
