// simt: CUDA's execution model emulated on the CPU, so that the CPU tests can run kiln's CUDA
// kernels (their real source, compiled by the host compiler) where no GPU is present.
//
// A launch runs its blocks one after another. Within a block every CUDA thread is a fiber (its own
// stack, switched cooperatively on the calling thread), and a fiber runs until it reaches a point
// where it must wait for others:
// - __syncthreads(), until every thread of the block that has not exited arrives at the same call;
// - a warp collective (__shfl_sync, __shfl_xor_sync, a tensor-core mma through
//   kernels/cuda/tile.cuh), until every lane of its warp arrives at the same call;
// - a shared-memory barrier's wait (mbarrier_wait below), until the phase it waits for completes;
// - a named barrier's sync (named_barrier_sync below), until as many threads as it names arrive.
// Asynchronous copies to shared memory (cp.async) land when the thread that started them waits for
// them, not before; meanwhile their destination holds NaN (copy_async below). Bulk copies (TMA) land
// when a thread waits on the barrier they complete (bulk_copy below).
// A scheduler then picks the next runnable thread: always the lowest-numbered (Schedule::Lowest)
// or always the highest (Schedule::Highest). Either way one warp runs ahead to the next barrier
// before the others start: a kernel that reads shared memory another warp writes, without a
// __syncthreads between, gets different results under the two schedules, so tests run both.
//
// What it checks, beyond the kernel's results: a barrier that threads reach at different calls
// (divergence), a warp collective with an exited lane, a deadlock (nothing runnable, some threads
// waiting), and shared memory. Each block's shared memory, dynamic and static, starts as all-ones
// bytes (NaN as a float, half or bfloat16), so a read before any write shows. The dynamic memory is
// exactly as large as the launch asked for, and each static variable (KILN_SHARED in
// kernels/cuda/device_math.cuh) is an allocation of its own size: the sanitized build
// (tools/sanitize.sh) catches accesses past either as it catches them past a tensor. A block's
// static variables may take at most 48 KiB, and with the dynamic memory at most 227 KiB, as on an
// H100. And the proxies: wgmma reading shared memory that plain stores or cp.async changed with no
// fence.proxy.async since (async_proxy_read below).
//
// What it does not: the tensor-core instruction is emulated through kiln's own fragment maps
// (kernels/tile_layout.h), so a wrong map would pass here; tests/cuda/test_tile_cuda.cpp checks the
// maps against the hardware. Floating-point results differ in the last bits from a GPU's (no FMA
// contraction, the C library's exp2f, mma sums in k order). Timing, occupancy and memory coalescing
// are not modeled at all. After a fault the other threads are abandoned where they wait: their
// stacks are freed without unwinding, so a kernel's locals should own no memory (kernels' do not).
//
// Including this header in a host translation unit defines the CUDA names a kernel uses
// (threadIdx, __syncthreads, __shfl_xor_sync, __shared__, ...) in terms of the emulator.
#pragma once

#if defined(__CUDACC__)
#error "kernels/simt/simt.h emulates CUDA on the host: include it only from host-compiled code"
#endif

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kiln::simt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A call's place in the source, file and line: a default argument `Site where = Site::here()` is
// the caller's (two barriers on one line are one place to the emulator).
// (Not std::source_location, which the clang of the sanitized build cannot build with libstdc++.)
struct Site {
  const char* file = "";
  int line = 0;
  static constexpr Site here(const char* file = __builtin_FILE(), int line = __builtin_LINE()) { return {file, line}; }
};

// Which runnable thread of a block runs next.
enum class Schedule { Lowest, Highest };

struct LaunchConfig {
  Dim3 grid, block;
  size_t dynamic_smem = 0;  // bytes behind dynamic_smem()
  Schedule schedule = Schedule::Lowest;
};

// What one launch did, for tests that a kernel's structure was exercised.
struct LaunchStats {
  int64_t blocks = 0, threads = 0;
  int64_t block_barriers = 0;    // completed __syncthreads, per block
  int64_t warp_collectives = 0;  // completed shuffles and mma, per warp
  size_t static_smem = 0;        // bytes of the static shared variables the blocks declared
  // The same by the call they completed at (file and line): how much work of one kind a kernel did,
  // such as its tensor-core instructions (the emulated mma is a call in kernels/cuda/tile.cuh).
  std::map<std::pair<const char*, int>, int64_t> collectives_at;
  // The collectives completed at calls in files whose path ends with `file`.
  int64_t collectives_in(std::string_view file) const;
  // Asynchronous copies started (copy_async) and the bytes they moved, zeros included.
  int64_t async_copies = 0, async_copy_bytes = 0;
  // Phases of shared-memory barriers completed (mbarrier_arrive), and of named barriers
  // (named_barrier_sync and _arrive), per block summed.
  int64_t mbarrier_phases = 0, named_barrier_phases = 0;
  // Bulk copies started (bulk_copy) and their bytes; bulk stores (bulk_store) and reductions
  // (bulk_reduce) and theirs.
  int64_t bulk_copies = 0, bulk_copy_bytes = 0;
  int64_t bulk_stores = 0, bulk_store_bytes = 0;
  int64_t bulk_reductions = 0, bulk_reduction_bytes = 0;
};

// Runs `kernel` once on every thread of every block. Throws kiln::Error naming the problem (and the
// source line of a barrier or collective) on a divergent barrier, a collective missing a lane, a
// deadlock, or a mismatch between the block size and the warp collectives; an exception a thread
// throws is rethrown here. Not reentrant: a kernel cannot launch another.
LaunchStats launch(const LaunchConfig& config, const std::function<void()>& kernel);

// Inside a launch (anything else throws):
const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
void* dynamic_smem();
// The block's static shared variable of a KILN_SHARED declaration, `bytes` long: `key` tells the
// declarations apart (one per declaration and kernel instantiation), `where` is its line. The first
// thread of a block to reach the declaration gets the variable as all-ones bytes, the others as
// the block's threads left it. Throws when the block's static variables would pass 48 KiB, CUDA's
// limit for them, or with the dynamic memory 227 KiB, an H100's for a block.
void* static_shared(const void* key, size_t bytes, size_t align, Site where = Site::here());
// __syncthreads(); returns how many of the block's threads that have not exited arrived with a
// nonzero `predicate` (__syncthreads_count, and through it __syncthreads_or and _and).
int sync_block(Site where = Site::here(), int predicate = 0);
// A warp collective: every lane of the calling warp gives `bytes` at `mine`, and each gets back the
// warp's contributions, lane l's at result + l * bytes. The result stays valid until the lane's
// next collective. The one primitive under the shuffles and the emulated mma.
const void* warp_gather(const void* mine, size_t bytes, Site where = Site::here());
// The calling thread's lane: its index in the block, x fastest, modulo 32.
int lane();

// ldmatrix (the shared-memory loads of kernels/cuda/tile.cuh): `count` (1, 2 or 4) matrices of 8 x 8
// 16-bit elements, each row 16 contiguous bytes. Lane l gives the address of row l % 8 of matrix
// l / 8 (lanes from 8 count on give one that is not read), and gets in regs[i] two elements of
// matrix i: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1, the first in the low half; with `trans`,
// the matrix transposed: column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. One warp collective: each
// lane reads its row as it arrives, and none goes on before all have. Throws on a row that is not
// 16-byte aligned or not in the block's shared memory, and on lanes at two different loads.
void ldmatrix(uint32_t* regs, int count, bool trans, const void* row, Site where = Site::here());

// Asynchronous copies from global to shared memory (cp.async, kernels/cuda/async_copy.cuh):
// copy_async starts one of `bytes` (4, 8 or 16) to `dst` in the block's shared memory, whose first
// `src_bytes` come from `src` and the rest are zeros (src_bytes 0: all zeros, src is not read).
// commit_copies makes the thread's copies started since its last commit one group; wait_copies lets
// all of its committed groups but the `pending` newest land. A copy lands only then, and from its
// start until then `dst` holds all-ones bytes (NaN; on a GPU its contents are undefined meanwhile):
// a kernel that reads too early (or another thread's copy with no barrier after that thread's wait),
// or that starts a copy over a buffer other threads still read, reads NaN.
// Throws on a `dst` outside the block's shared memory, a `src` inside it, either not aligned to
// `bytes`, and, when a thread exits, on copies it started and never waited for.
void copy_async(void* dst, const void* src, size_t bytes, size_t src_bytes, Site where = Site::here());
void commit_copies();
void wait_copies(int pending);

// Shared-memory barriers (mbarrier, kernels/cuda/pipeline.cuh): an object of 8 bytes in shared
// memory that counts arrivals. mbarrier_init sets it to expect `count` arrivals per phase, starting at
// phase 0; each mbarrier_arrive counts one, and the count-th completes the phase (the next one expects
// `count` again) and lets the threads waiting for it run before it goes on, when the schedule puts
// them first. mbarrier_wait(bar, parity) returns once the phase of that parity has completed: at
// once when the barrier's current phase has the other parity (so, as on a GPU, parity 1 passes right
// after the init), and otherwise when the current phase completes. A waiting thread runs again only
// then, so a pipeline whose arrivals do not add up ends in the launch's deadlock error, which names
// each waiting thread's barrier and phase.
// Throws on an init outside the block's shared memory or not aligned to 8 bytes, a count outside
// 1 .. 2^20 - 1, a second init of a barrier in use, an arrive or a wait on a barrier never initialized,
// and any operation on one whose 8 bytes were overwritten since the init (the emulator keeps the
// count aside and marks the bytes).
void mbarrier_init(void* bar, int count, Site where = Site::here());
void mbarrier_arrive(void* bar, Site where = Site::here());
void mbarrier_wait(void* bar, int parity, Site where = Site::here());

// Bulk copies into shared memory that complete on an mbarrier (the tensor copies of TMA,
// kernels/cuda/tma.cuh), and the transaction bytes a barrier's phase waits for besides its arrivals.
// mbarrier_expect_tx adds `bytes` to what the current phase of `bar` waits for (mbarrier.expect_tx;
// kernels call it just before an arrival, as mbarrier.arrive.expect_tx does). bulk_copy starts a copy
// of `bytes` into `dst` in the block's shared memory: `fill(dst)` writes its bytes when it lands, and
// the copy then completes that many of the phase's transaction bytes. A phase completes once all its
// arrivals are in and the bytes landed equal the bytes expected.
// A copy lands when a thread waits for the phase it completes (at once if threads wait already, or
// when the last arrival comes while they do), not before; until then `dst` holds all-ones bytes (NaN).
// So a read that did not wait on the barrier, or a copy started over a buffer another thread still
// reads, shows in the results.
// Throws on a `dst` outside the block's shared memory or not aligned to 16 bytes, a size that is not
// a positive multiple of 16, an expectation outside 1 .. 2^20 - 1 bytes, a phase whose copies bring
// more bytes than it expects or that gets more arrivals than its count, and a block that ends with
// copies that never landed. Bytes expected and never brought end in the launch's deadlock error.
void mbarrier_expect_tx(void* bar, int64_t bytes, Site where = Site::here());
void bulk_copy(void* dst, size_t bytes, void* bar, std::function<void(void*)> fill, Site where = Site::here());

// The async proxy. wgmma's reads of its operands and the bulk copies' writes take a path of their
// own to shared memory, which sees the writes of the usual path (plain stores, cp.async) only after
// the writer's fence.proxy.async (fence_proxy_async: wgmma::fence_async_smem, and pipeline.cuh's
// fence_barrier_init after mbarrier inits) and a barrier. Without the fence a GPU's wgmma may read
// the bytes from before the stores, at random; the emulator's memory is one, so it keeps the async
// proxy's view apart: the block's dynamic shared memory as the block's last fence published it (a
// fence copies the memory into the view). async_proxy_read(p, bytes) is a read of [p, p + bytes)
// there (wgmma's emulation calls it for every chunk an instruction reads, at its landing): a
// 16-byte chunk whose bytes differ from the view was changed after the last fence, which is a fault
// (a fence before the stores does not cover them). Bulk copies write the view as they land. A bulk
// copy that completes on a barrier initialized after the block's last fence is a fault too (the
// copy engine may not see the init). The emulator knows which thread's cp.async landed in a chunk,
// and that thread must have fenced since: another thread's fence does not cover it (kiln's kernels
// have every copying thread fence, as CUDA's guides do). Of plain stores it does not know the
// writer, so for those a fence by any thread of the block after them counts.
void fence_proxy_async();
void async_proxy_read(const void* p, size_t bytes, Site where = Site::here());

// Bulk stores and reductions from shared memory into global memory (the tensor stores and tensor
// reductions of TMA, kernels/cuda/tma.cuh), tracked in bulk groups as cp.async.bulk.commit_group and
// wait_group track them: bulk_store and bulk_reduce start one that reads `bytes` at `src` in the
// block's dynamic shared memory and hands them to `apply` (which writes them, or adds them, where they
// go) when it completes; bulk_commit makes the thread's operations started since its last commit one
// group; bulk_wait(pending) lets all of its committed groups but the `pending` newest complete
// (cp.async.bulk.wait_group and its .read form alike: here both the read and the writes happen then).
// The source goes through the async proxy, so the stores that wrote it must be fenced before the start
// (async_proxy_read), and it must not change until the wait: the engine may read it at any time in
// between.
// Throws on a size that is not a positive multiple of 16, a source not aligned to 16 bytes or not in
// the dynamic shared memory, unfenced stores there, a source changed before its wait, and, when a
// thread exits, on operations it never waited for (the block's shared memory goes with it).
void bulk_store(const void* src, size_t bytes, std::function<void(const void*)> apply, Site where = Site::here());
void bulk_reduce(const void* src, size_t bytes, std::function<void(const void*)> apply, Site where = Site::here());
void bulk_commit();
void bulk_wait(int pending, Site where = Site::here());

// Named barriers (bar.sync and bar.arrive with an id and a thread count, kernels/cuda/pipeline.cuh):
// the block's hardware barriers 1 .. 15 (0 is __syncthreads'), each counting the threads that arrive
// toward its current phase. named_barrier_arrive counts the calling thread and goes on;
// named_barrier_sync counts it and waits. The `threads`-th arrival, by either, completes the phase:
// the waiting threads run again (at once when the schedule puts them first) and the next phase starts
// from none. A thread may arrive and then sync in one phase, each counting. Threads that exit do not
// count, so a sync whose count is never reached ends in the launch's deadlock error, which names the
// barrier and how many of its threads arrived.
// Throws on an id outside 1 .. 15; a count that is not a positive multiple of 32 or is larger than the
// block; a thread giving a count other than the one the phase's first arrival gave; a phase completed
// by part of a warp (on a GPU a warp arrives as a whole); and a block that ends with a phase partly
// arrived. A GPU drops such arrivals with the block, but in kiln's kernels they mean that the counts
// of a protocol do not add up, and a persistent kernel's next tile would inherit them.
void named_barrier_sync(int id, int threads, Site where = Site::here());
void named_barrier_arrive(int id, int threads, Site where = Site::here());

// Emulated hardware state of a thread that code outside the emulator models (wgmma's instructions in
// flight, kernels/cuda/wgmma.cuh): thread_state<V>() is the running thread's V, default-constructed at
// its first use in each block. When the thread exits, V::exit_fault() says what it left undone, an
// error for the launch ("" when nothing).
struct ThreadState {
  virtual ~ThreadState() = default;
  virtual std::string exit_fault() const = 0;
};
ThreadState* find_thread_state(const void* key);
ThreadState& add_thread_state(const void* key, std::unique_ptr<ThreadState> state);

// The same for the block as a whole (the warpgroups' agreement on their wgmma operations,
// kernels/cuda/wgmma_host.h): block_state<V>() is the running block's V, default-constructed at its
// first use in each block and shared by its threads. Once all of them have exited, V::end_fault() says
// what the block left wrong, an error for the launch ("" when nothing).
struct BlockState {
  virtual ~BlockState() = default;
  virtual std::string end_fault() const = 0;
};
BlockState* find_block_state(const void* key);
BlockState& add_block_state(const void* key, std::unique_ptr<BlockState> state);

namespace detail {
// The V of the running thread or block, keyed by this instantiation's own address.
template <typename V, typename Base>
V& state(Base* (*find)(const void*), Base& (*add)(const void*, std::unique_ptr<Base>)) {
  static const char key = 0;
  if (Base* s = find(&key)) return static_cast<V&>(*s);
  return static_cast<V&>(add(&key, std::make_unique<V>()));
}
}  // namespace detail
template <typename V> V& thread_state() { return detail::state<V, ThreadState>(find_thread_state, add_thread_state); }
template <typename V> V& block_state() { return detail::state<V, BlockState>(find_block_state, add_block_state); }

namespace detail {
[[noreturn]] void throw_partial_mask(unsigned mask, Site where);
}  // namespace detail

// KILN_SHARED's host side: the static shared variable of type V (an array type for an array) that
// the declaration whose lambda has type Tag names. Tag is unique to the declaration and to the
// kernel instantiation it is in, and so is `key`, whose address tells the variables apart.
template <typename V, typename Tag> V& shared_variable(Tag, Site where = Site::here()) {
  // No constructor runs (as on a GPU, where a default member initializer is not applied to a
  // __shared__ variable either): the variable is its bytes.
  static_assert(std::is_trivially_copyable_v<V> && std::is_trivially_destructible_v<V>,
                "a static shared variable is plain bytes");
  static const char key = 0;
  return *static_cast<V*>(static_shared(&key, sizeof(V), alignof(V), where));
}

}  // namespace kiln::simt

// --- CUDA's names, for host-compiled kernels ------------------------------------------------------

// Hidden: in a CUDA build the test program that emulates a kernel also links libkiln_kernels.so,
// whose host-side launch stub for that kernel has the same mangled name. Were the program to export
// its copy, the library's own launches could bind to it (ELF interposition) and run the emulator on
// device pointers. nvcc 13 emits its stubs hidden; this keeps the emulated copies hidden as well,
// whatever the toolkit does.
#define __global__ __attribute__((visibility("hidden")))
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
// Static shared memory is declared with KILN_SHARED (kernels/cuda/device_math.cuh), which the
// emulator gives each block afresh; a plain __shared__ would be one static for every block.
#define __shared__ _Pragma("GCC error \"simt: declare static shared memory with KILN_SHARED (device_math.cuh)\"")

#define threadIdx (::kiln::simt::thread_idx())
#define blockIdx (::kiln::simt::block_idx())
#define blockDim (::kiln::simt::block_dim())
#define gridDim (::kiln::simt::grid_dim())

struct alignas(8) float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
struct alignas(16) float4 {
  float x, y, z, w;
};
#define __align__(n) __attribute__((aligned(n)))
// A grid's or block's extent, as host code writes a launch (unspecified extents are 1).
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline void __syncthreads(::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  (void)::kiln::simt::sync_block(where);
}
// The barrier with a vote: how many threads passed a nonzero predicate, whether any did, whether
// all did (of the threads that have not exited).
inline int __syncthreads_count(int predicate, ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  return ::kiln::simt::sync_block(where, predicate);
}
inline int __syncthreads_or(int predicate, ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  return ::kiln::simt::sync_block(where, predicate) != 0;
}
inline int __syncthreads_and(int predicate, ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  return ::kiln::simt::sync_block(where, predicate == 0) == 0;
}

namespace kiln::simt::detail {
template <typename V> V shuffle_from(unsigned mask, V v, int src_lane, Site where) {
  static_assert(sizeof(V) <= 8, "shuffles move 4- or 8-byte values");
  if (mask != 0xffffffffu) {
    // kiln's kernels shuffle whole warps only; a partial mask would need the emulator to track it.
    throw_partial_mask(mask, where);
  }
  const V* all = static_cast<const V*>(warp_gather(&v, sizeof(V), where));
  return all[src_lane & 31];
}
}  // namespace kiln::simt::detail

template <typename V>
V __shfl_sync(unsigned mask, V v, int src_lane, ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  return ::kiln::simt::detail::shuffle_from(mask, v, src_lane, where);
}
// Lane l gets lane l + delta's value within its segment of `width` lanes (a power of two up to 32);
// lanes whose source is past their segment's end keep their own, as on the GPU.
template <typename V>
V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32,
                   ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  const int lane = ::kiln::simt::lane();
  const int src = lane + static_cast<int>(delta);
  const V got = ::kiln::simt::detail::shuffle_from(mask, v, src, where);
  return (lane & (width - 1)) + static_cast<int>(delta) < width ? got : v;
}
// Lane l gets lane l - delta's value within its segment of `width` lanes; lanes whose source is
// before their segment's start keep their own, as on the GPU.
template <typename V>
V __shfl_up_sync(unsigned mask, V v, unsigned delta, int width = 32,
                 ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  const int lane = ::kiln::simt::lane();
  const int src = lane - static_cast<int>(delta);
  const V got = ::kiln::simt::detail::shuffle_from(mask, v, src, where);
  return (lane & (width - 1)) >= static_cast<int>(delta) ? got : v;
}
template <typename V>
V __shfl_xor_sync(unsigned mask, V v, int lane_mask,
                  ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  return ::kiln::simt::detail::shuffle_from(mask, v, ::kiln::simt::lane() ^ lane_mask, where);
}

// The lanes of the warp wait for each other (an empty collective).
inline void __syncwarp(unsigned mask = 0xffffffffu, ::kiln::simt::Site where = ::kiln::simt::Site::here()) {
  if (mask != 0xffffffffu) ::kiln::simt::detail::throw_partial_mask(mask, where);
  (void)::kiln::simt::warp_gather(nullptr, 0, where);
}

// A compare-and-swap on an int in global or shared memory (kiln's kernels claim an error record
// with it). The emulator's threads switch only at barriers, warp collectives and mbarriers, so the
// plain read-compare-write is atomic.
inline int atomicCAS(int* address, int compare, int value) {
  const int old = *address;
  if (old == compare) *address = value;
  return old;
}

// An add to an unsigned int in global or shared memory (the row selection counts digits with it);
// atomic for the same reason as atomicCAS.
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  const unsigned old = *address;
  *address = old + value;
  return old;
}

// An add to a float in global or shared memory (the fused attention backward sums dQ with it); atomic
// for the same reason. On a GPU, adds from different blocks land in an order that varies between
// runs; here in the order the blocks run, which Schedule::Highest reverses (launch below), so a sum
// over three blocks or more may differ in its last bits between the two schedules, as between runs.
inline float atomicAdd(float* address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}

// CUDA's classification functions, unqualified as device code calls them.
using std::isfinite;
using std::isinf;
using std::isnan;

// Reinterpretations of bits.
inline float __int_as_float(int bits) { return std::bit_cast<float>(bits); }
inline double __longlong_as_double(long long bits) { return std::bit_cast<double>(bits); }
inline long long __double_as_longlong(double v) { return std::bit_cast<long long>(v); }

// Float arithmetic in round-to-nearest without contraction into an FMA: the host compiler contracts
// nothing unless told to (kiln builds without -ffp-contract=fast).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
