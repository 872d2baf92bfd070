// cuda::memory_summary: formats a CachingAllocator snapshot. Every figure is derived from the
// snapshot's segments except the peaks and call counts, which only the running statistics know;
// "active" counts blocks freed by their owner but still waiting for events on other streams, which
// are as unusable as allocated ones until those streams pass.
#include "core/cuda/memory_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "core/cuda/runtime.h"
#include "kernels/error.h"

namespace kiln::cuda {
namespace {

std::string mib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB (%lld bytes)", static_cast<double>(bytes) / (1024.0 * 1024.0),
                static_cast<long long>(bytes));
  return buf;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string stream_name(Stream s) {
  if (!s) return "default stream";
  char buf[40];
  std::snprintf(buf, sizeof buf, "stream %p", static_cast<void*>(s));
  return buf;
}

const char* pool_name(PoolKind p) {
  switch (p) {
    case PoolKind::Small: return "small pool";
    case PoolKind::Large: return "large pool";
    case PoolKind::Capture: return "graph capture pool";
    case PoolKind::Direct: return "direct";
  }
  return "?";
}

// Bytes and counts of a set of segments.
struct Tally {
  int64_t segments = 0, blocks = 0, allocated_blocks = 0, pending_blocks = 0, free_blocks = 0;
  int64_t reserved = 0, allocated = 0, pending = 0, free = 0, requested = 0;

  void add(const SegmentSnapshot& seg) {
    ++segments;
    for (const BlockSnapshot& b : seg.blocks) {
      ++blocks;
      const auto size = static_cast<int64_t>(b.size);
      reserved += size;
      if (b.allocated) {
        ++allocated_blocks;
        allocated += size;
        requested += static_cast<int64_t>(b.requested);
      } else if (b.pending) {
        ++pending_blocks;
        pending += size;
      } else {
        ++free_blocks;
        free += size;
      }
    }
  }
};

std::string row(const char* what, int64_t current, const std::string& peak, const char* note) {
  std::string s = "  " + pad(what, 13) + pad(mib(current), 34) + pad(peak, 34);
  if (note && *note) s += note;
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s + "\n";
}

// "1 segment", "2 segments".
std::string count(int64_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

const std::string kRule(100, '-');

}  // namespace

std::string memory_summary(const MemorySnapshot& snap) {
  Tally all, small, large, capture, direct;
  std::map<Stream, Tally> by_stream;  // the per-stream pools (the capture pool has no stream)
  std::vector<std::pair<const BlockSnapshot*, const SegmentSnapshot*>> blocks;
  for (const SegmentSnapshot& seg : snap.segments) {
    all.add(seg);
    switch (seg.pool) {
      case PoolKind::Small: small.add(seg); break;
      case PoolKind::Large: large.add(seg); break;
      case PoolKind::Capture: capture.add(seg); break;
      case PoolKind::Direct: direct.add(seg); break;
    }
    if (seg.pool != PoolKind::Capture) by_stream[seg.stream].add(seg);
    for (const BlockSnapshot& b : seg.blocks) blocks.emplace_back(&b, &seg);
  }
  const MemoryStats& st = snap.stats;
  std::string out = "kiln CUDA memory summary, " + snap.device.str() +
                    (snap.direct ? " (KILN_CUDA_ALLOC=direct: one device allocation per block, nothing cached)"
                                 : " (caching allocator)") +
                    (snap.capturing ? ", a graph capture is running" : "") + "\n";
  out += kRule + "\n";
  out += "  " + pad("", 13) + pad("current", 34) + "peak\n";
  out += row("allocated", all.allocated, mib(st.peak_allocated_bytes), "blocks handed out (rounded to 512 bytes)");
  out += row("reserved", all.reserved, mib(st.peak_reserved_bytes), "segments obtained from the device");
  out += row("active", all.allocated + all.pending, "", "allocated + freed blocks waiting for other streams");
  out += row("requested", all.requested, "", "as asked by callers, before rounding");
  out += row("cached free", all.free, "", "reusable without cudaMalloc; empty_cache() frees whole segments");
  out += kRule + "\n";
  out += "  segments     " + std::to_string(all.segments) + " (small pool " + std::to_string(small.segments) +
         ", large pool " + std::to_string(large.segments) + ", graph capture pool " +
         std::to_string(capture.segments) + (snap.direct ? ", direct " + std::to_string(direct.segments) : "") +
         ")\n";
  out += "  blocks       " + std::to_string(all.blocks) + " (" + std::to_string(all.allocated_blocks) + " allocated, " +
         std::to_string(all.pending_blocks) + " waiting for other streams, " + std::to_string(all.free_blocks) +
         " free)\n";
  out += "  device calls " + std::to_string(st.num_device_mallocs) + " allocations, " +
         std::to_string(st.num_device_frees) + " frees; " + std::to_string(st.num_allocations) +
         " blocks served in all, " + std::to_string(st.num_ooms) + " out-of-memory errors\n";
  out += kRule + "\n";

  // Largest first; ties by address, so the report is stable.
  std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) {
    if (a.first->size != b.first->size) return a.first->size > b.first->size;
    return a.first->address < b.first->address;
  });
  constexpr size_t kLargest = 5;
  out += "  largest blocks" + std::string(blocks.empty() ? ": none\n" : "\n");
  for (size_t i = 0; i < blocks.size() && i < kLargest; ++i) {
    const BlockSnapshot& b = *blocks[i].first;
    const SegmentSnapshot& seg = *blocks[i].second;
    const char* state = b.allocated ? "allocated" : (b.pending ? "waiting" : "free");
    std::string where = pool_name(seg.pool);
    if (seg.pool != PoolKind::Capture) where += ", " + stream_name(seg.stream);
    out += "    " + pad(mib(static_cast<int64_t>(b.size)), 32) + pad(state, 11) + where + "\n";
  }
  int64_t largest_free = 0;
  for (const auto& [b, seg] : blocks)
    if (!b->allocated && !b->pending) largest_free = std::max(largest_free, static_cast<int64_t>(b->size));
  out += "  largest free block " + mib(largest_free) + "\n";
  out += kRule + "\n";

  out += "  per-stream pools" + std::string(by_stream.empty() ? ": none\n" : "\n");
  for (const auto& [stream, t] : by_stream) {
    out += "    " + pad(stream_name(stream), 24) + "reserved " + mib(t.reserved) + ", allocated " + mib(t.allocated) +
           ", free " + mib(t.free) + "; " + count(t.segments, "segment") + ", " + count(t.blocks, "block") + "\n";
  }
  if (capture.segments == 0) {
    out += "  graph capture pool: none reserved\n";
  } else {
    out += "  graph capture pool: reserved " + mib(capture.reserved) + ", allocated " + mib(capture.allocated) +
           ", free " + mib(capture.free) + "; " + count(capture.segments, "segment") + ", " +
           count(capture.blocks, "block") + (snap.capturing ? "; capturing now" : "") + "\n";
  }
  return out;
}

std::string memory_summary(const CachingAllocator& allocator) { return memory_summary(allocator.snapshot()); }

std::string memory_summary(int device) {
  if (!is_available()) {
    throw DeviceError("cuda::memory_summary: no CUDA device to report on (" + unavailable_reason() + ")");
  }
  return memory_summary(caching_allocator(device));
}

}  // namespace kiln::cuda
