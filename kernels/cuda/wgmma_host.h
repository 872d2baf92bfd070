// The emulator's model of Hopper's wgmma (kernels/cuda/wgmma.cuh's host branch, which runs on the
// emulator of kernels/simt/simt.h): operands read through the descriptors, a warp's share of an
// instruction, the async proxy's reads, a thread's instructions in flight, and the warpgroup's
// agreement on its operations. Host code only; wgmma.cuh's emulated instructions are its callers.
#pragma once

#if defined(__CUDACC__)
#error "kernels/cuda/wgmma_host.h models wgmma on the emulator: include it only from host-compiled code"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/tile.cuh"
#include "kernels/error.h"
#include "kernels/simt/simt.h"
#include "kernels/wgmma_layout.h"

namespace kiln::wgmma {

using tile::CTile;

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

// A warp's share of one instruction: its 16 rows of the 64 x N product, row-major. The warp's lanes
// share one (they read the same rows of A and all of B), computed when the first of them lands the
// instruction, from shared memory as it is then: on a GPU the wait is the warpgroup's, and no thread
// goes on before the product is complete. Each sum runs in k order.
struct WarpShare {
  int n = 0;
  std::function<void(float*)> compute;  // the warp's 16 x n elements into zeros
  std::vector<float> rows;              // empty until computed
  const float* get() {
    if (rows.empty()) {
      rows.assign(static_cast<size_t>(tile::kM * n), 0.f);
      compute(rows.data());
    }
    return rows.data();
  }
};
// The warp's 16 x N elements of A @ B into out (zeros), through read_a(row, k) for the warp's rows
// 0 .. 15 and read_b(col, k): each element of A and B read once.
template <int N, typename ReadA, typename ReadB> void warp_products(float* out, ReadA read_a, ReadB read_b) {
  float a[tile::kM][kK], b[kK];
  for (int r = 0; r < tile::kM; ++r) {
    for (int k = 0; k < kK; ++k) a[r][k] = read_a(r, k);
  }
  for (int c = 0; c < N; ++c) {
    for (int k = 0; k < kK; ++k) b[k] = read_b(c, k);
    for (int r = 0; r < tile::kM; ++r) {
      float& sum = out[r * N + c];
      for (int k = 0; k < kK; ++k) sum += a[r][k] * b[k];
    }
  }
}
// The lanes' shares of a warp's instructions while they issue them, by the operation's place in its
// warpgroup's sequence (Warpgroups::record below holds every lane to that sequence): the first lane
// to issue it makes the share and the others take it; it leaves the list once all 32 have.
struct WarpShares final : simt::BlockState {
  struct Open {
    int warp;
    int64_t n;
    std::shared_ptr<WarpShare> share;
    int taken;
  };
  std::vector<Open> open;
  template <typename Make> std::shared_ptr<WarpShare> take(int warp, int64_t n, Make make) {
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& o) { return o.warp == warp && o.n == n; });
    if (it == open.end()) it = open.insert(open.end(), Open{warp, n, make(), 0});
    std::shared_ptr<WarpShare> share = it->share;
    if (++it->taken == 32) open.erase(it);
    return share;
  }
  std::string end_fault() const override { return ""; }  // a lane missing shows in the warpgroup check
};
// The running thread's index in its block, x fastest.
inline int64_t linear_thread() {
  const simt::Dim3 &t = simt::thread_idx(), &dim = simt::block_dim();
  return t.x + int64_t{dim.x} * (t.y + int64_t{dim.y} * t.z);
}
// This lane's share of its warp's instruction, the warpgroup's operation `op` (record's index); the
// first lane to issue it makes it, with make() giving the computation of the warp's 16 x n elements.
template <typename Make> std::shared_ptr<WarpShare> warp_share(int64_t op, int n, Make make) {
  return simt::block_state<WarpShares>().take(static_cast<int>(linear_thread() / 32), op, [&] {
    auto share = std::make_shared<WarpShare>();
    share->n = n;
    share->compute = make();
    return share;
  });
}
// This thread's N / 2 accumulator elements of its warp's share.
template <int N> void lane_elements(const float* rows, float* out) {
  const OutCoords coords;
  for (int i = 0; i < N / 2; ++i) {
    const Out o = coords(i);
    out[i] = rows[(o.row % tile::kM) * N + o.col];
  }
}

// The first of the running thread's warp's 16 rows of the 64.
inline int warp_row0() { return OutCoords{}.warp * tile::kM; }

// The async proxy reads the 16-byte chunk at a shared address (simt::async_proxy_read): a chunk
// changed by plain stores with no fence_async_smem since is a fault.
inline void proxy_read(const char* smem, uint32_t address, simt::Site where) {
  simt::async_proxy_read(smem + (address & ~15u), 16, where);
}
// What a warp's share of an instruction reads of an operand, chunk by chunk, checked when the share
// is computed: the 16 elements of K of row `mn` (K-major: two chunks), or of column `mn` (MN-major:
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
  const char* const smem = smem_base();
  if (a_in_smem) {
    const int row0 = warp_row0();
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

// A thread's instructions in flight. An instruction is computed when a wait lands it (its warp's
// share, when the warp's first thread does), from shared memory as it is then, so a tile
// overwritten before the wait gives a wrong result. Its accumulators read as NaN from the issue
// until then (their values meanwhile are kept here), and the A registers of an RS instruction must
// be as they were at the issue. Issuing needs a fence() since the thread's last wait: the registers
// the batch reads were written by the thread in between.
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

// One wgmma operation of a thread, for the warpgroup's agreement below.
struct Operation {
  enum Kind { kFence, kCommit, kWait, kMmaSS, kMmaRS, kRegistersDec, kRegistersInc } kind;
  int n = 0;  // an mma's N; a wait's pending groups; setmaxnreg's count
  const char* type = "";
  bool trans_a = false, trans_b = false, accumulate = false;
  uint64_t a = 0, b = 0;  // the descriptors (an RS instruction's a is 0)
  simt::Site where;
  bool operator==(const Operation& o) const {
    return kind == o.kind && n == o.n && std::strcmp(type, o.type) == 0 && trans_a == o.trans_a &&
           trans_b == o.trans_b && accumulate == o.accumulate && a == o.a && b == o.b && where.line == o.where.line &&
           std::strcmp(where.file, o.where.file) == 0;
  }
  std::string describe() const {
    const auto hex = [](uint64_t d) {
      char buf[24];
      std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(d));
      return std::string(buf);
    };
    std::string what;
    switch (kind) {
      case kFence: what = "wgmma.fence"; break;
      case kCommit: what = "wgmma.commit_group"; break;
      case kWait: what = "wgmma.wait_group " + std::to_string(n); break;
      case kRegistersDec: what = "setmaxnreg.dec " + std::to_string(n); break;
      case kRegistersInc: what = "setmaxnreg.inc " + std::to_string(n); break;
      default:
        what = "wgmma.mma_async 64x" + std::to_string(n) + "x16 " + type + ", A " +
               (kind == kMmaRS ? std::string("in registers")
                               : "at descriptor " + hex(a) + (trans_a ? " (MN-major)" : " (K-major)")) +
               ", B at descriptor " + hex(b) + (trans_b ? " (MN-major)" : " (K-major)") +
               (accumulate ? ", accumulating" : ", overwriting");
    }
    return what + " at " + where.file + ":" + std::to_string(where.line);
  }
};

// On a GPU the 128 threads of a warpgroup issue every wgmma operation together: the instructions
// are .sync.aligned, and one that some of them skip, or that they reach by different paths or with
// different descriptors, is undefined. So is setmaxnreg (kernels/cuda/pipeline.cuh), logged here
// too. The emulator runs each thread on its own, so it holds them to it here: every thread's k-th
// operation must equal the first one its warpgroup recorded as k-th (the same kind, shape, type,
// descriptors, flags and source line), and once the block ends, every thread of a warpgroup must
// have issued as many. A warpgroup's log keeps the operations that some of its threads have yet to
// reach.
struct Warpgroups final : simt::BlockState {
  struct Entry {
    Operation op;
    int first;  // the thread that recorded it
  };
  struct Group {
    std::vector<Entry> log;  // operations base, base + 1, ...
    int64_t base = 0;
    int64_t issued[kThreads] = {};
  };
  std::vector<Group> groups;

  // Checks the running thread's next operation against its warpgroup's and returns its place in the
  // warpgroup's sequence.
  int64_t record(const Operation& op) {
    const int64_t linear = linear_thread();
    const simt::Dim3& dim = simt::block_dim();
    const int64_t threads = int64_t{dim.x} * dim.y * dim.z;
    const int g = static_cast<int>(linear / kThreads), member = static_cast<int>(linear % kThreads);
    if ((g + 1) * int64_t{kThreads} > threads) {
      throw Error("warpgroup (emulated): " + op.describe() + " by thread " + std::to_string(linear) +
                  " of a block of " + std::to_string(threads) + " threads: its warpgroup (threads " +
                  std::to_string(g * kThreads) +
                  " to " + std::to_string(g * kThreads + kThreads - 1) + ") is not whole");
    }
    if (static_cast<size_t>(g) >= groups.size()) groups.resize(static_cast<size_t>(g) + 1);
    Group& group = groups[static_cast<size_t>(g)];
    const int64_t k = group.issued[member]++;
    const size_t at = static_cast<size_t>(k - group.base);
    if (at < group.log.size()) {
      if (!(group.log[at].op == op)) {
        throw Error("warpgroup (emulated): thread " + std::to_string(linear) + " issued as its warpgroup operation " +
                    std::to_string(k) + " " + op.describe() + ", and thread " + std::to_string(group.log[at].first) +
                    " of its warpgroup " + group.log[at].op.describe() +
                    ": the 128 threads of a warpgroup issue each of these operations together (.sync.aligned), "
                    "the same ones in the same order");
      }
      return k;
    }
    group.log.push_back({op, static_cast<int>(linear)});
    if (group.log.size() > 4096) {  // forget what every thread has passed
      const int64_t low = *std::min_element(std::begin(group.issued), std::end(group.issued));
      group.log.erase(group.log.begin(), group.log.begin() + static_cast<std::ptrdiff_t>(low - group.base));
      group.base = low;
    }
    return k;
  }

  std::string end_fault() const override {
    for (size_t g = 0; g < groups.size(); ++g) {
      const Group& group = groups[g];
      const int64_t* low = std::min_element(std::begin(group.issued), std::end(group.issued));
      const int64_t* high = std::max_element(std::begin(group.issued), std::end(group.issued));
      if (*low == *high) continue;
      const int64_t fewer = g * kThreads + (low - std::begin(group.issued));
      const int64_t more = g * kThreads + (high - std::begin(group.issued));
      return "warpgroup (emulated): in warpgroup " + std::to_string(g) + ", thread " + std::to_string(fewer) +
             " issued " + std::to_string(*low) + " warpgroup operations (wgmma, setmaxnreg) and thread " +
             std::to_string(more) + " " + std::to_string(*high) + "; the first the one lacks: " +
             group.log[static_cast<size_t>(*low - group.base)].op.describe() +
             " (the 128 threads of a warpgroup issue each of these operations together, .sync.aligned)";
    }
    return "";
  }
};
inline int64_t record(const Operation& op) { return simt::block_state<Warpgroups>().record(op); }
template <typename T> const char* type_name() {
  return std::is_same_v<T, cuda_detail::BFloat16Storage> ? "bf16" : "f16";
}
}  // namespace host

}  // namespace kiln::wgmma
