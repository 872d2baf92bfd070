// The ring all-reduce (see ring.h). Rank r sends to r + 1 and receives from r - 1 (mod n). In
// reduce-scatter step s it sends segment r - s and receives segment r - s - 1, which it reduces into
// its own copy; after n - 1 steps segment r + 1 is complete on rank r. All-gather step s sends
// segment r + 1 - s and receives segment r - s, which overwrites its copy.
#include "dist/ring.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/ops/factory.h"
#include "dist/reduce.h"
#include "kernels/error.h"

namespace kiln::dist {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// One step: `send` (a slice of the flat tensor) goes right while `recv_into` arrives from the left,
// both in pieces of at most `piece` elements, two pieces in flight. With `reduce`, each arriving
// piece lands in a scratch buffer and is reduced into recv_into; otherwise it lands in place.
void exchange(ProcessGroup& g, const Tensor& send, Tensor& recv_into, int64_t piece, bool reduce, ReduceOp op,
              std::vector<Tensor>& scratch) {
  const int right = mod(g.rank() + 1, g.size()), left = mod(g.rank() - 1, g.size());
  const int64_t ns = send.numel(), nr = recv_into.numel();
  const int64_t pieces = std::max((ns + piece - 1) / piece, (nr + piece - 1) / piece);
  struct Posted {
    std::shared_ptr<Work> w;
    Tensor dst, into;
  };
  std::vector<Posted> posted(static_cast<size_t>(pieces));
  auto post = [&](int64_t p) {
    Posted& x = posted[static_cast<size_t>(p)];
    const int64_t b = p * piece;
    if (b < nr) {
      x.into = recv_into.narrow(0, b, std::min(piece, nr - b));
      x.dst = reduce ? scratch[static_cast<size_t>(p % 2)].narrow(0, 0, x.into.numel()) : x.into;
    }
    const Tensor out = b < ns ? send.narrow(0, b, std::min(piece, ns - b)) : Tensor();
    x.w = g.ring_exchange(out, right, x.dst, left);  // one tag of its own: the pieces keep their order
  };
  if (pieces > 0) post(0);
  for (int64_t p = 0; p < pieces; ++p) {
    // Piece p + 1 reuses the scratch buffer of p - 1, whose reduction finished last iteration.
    if (p + 1 < pieces) post(p + 1);
    Posted& x = posted[static_cast<size_t>(p)];
    x.w->wait();
    if (reduce && x.into.defined()) detail::reduce_tensor(x.into, x.dst, op);
    x = Posted{};
  }
}

}  // namespace

Segment ring_segment(int64_t numel, int n, int k) {
  const int64_t base = numel / n, extra = numel % n;
  const int64_t begin = k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

void ring_all_reduce(ProcessGroup& group, Tensor& tensor, ReduceOp op, int64_t piece_bytes) {
  const int n = group.size(), r = group.rank();
  if (n == 1 || tensor.numel() == 0) return;
  if (piece_bytes < 1) throw Error("ring_all_reduce: piece_bytes must be positive, got " + std::to_string(piece_bytes));
  Tensor flat = tensor.view({-1});
  const int64_t numel = flat.numel();
  const int64_t piece = std::max<int64_t>(1, piece_bytes / static_cast<int64_t>(tensor.element_size()));
  auto seg = [&](int k) {
    const Segment s = ring_segment(numel, n, mod(k, n));
    return flat.narrow(0, s.begin, s.end - s.begin);
  };
  const int64_t scratch_elems = std::min(piece, ring_segment(numel, n, 0).end);  // segment 0 is a longest
  const TensorOptions scratch_options(tensor.dtype(), tensor.device());
  std::vector<Tensor> scratch{empty({scratch_elems}, scratch_options), empty({scratch_elems}, scratch_options)};
  for (int s = 0; s < n - 1; ++s) {
    Tensor into = seg(r - s - 1);
    exchange(group, seg(r - s), into, piece, /*reduce=*/true, op, scratch);
  }
  if (op == ReduceOp::Avg) {
    Tensor mine = seg(r + 1);
    detail::divide_tensor(mine, static_cast<double>(n));
  }
  for (int s = 0; s < n - 1; ++s) {
    Tensor into = seg(r - s);
    exchange(group, seg(r + 1 - s), into, piece, /*reduce=*/false, op, scratch);
  }
}

}  // namespace kiln::dist
