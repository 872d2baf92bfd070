// How embedding's backward divides its work, shared by the CPU and CUDA twins so both add the same
// numbers in the same order (their float results are equal bit for bit).
//
// The weight's gradient is a sum per index value: row v of dW adds row i of dY for every position i
// with indices[i] == v. A kernel that gives each column one thread and walks all k positions (a
// scatter_add along dim 0) is deterministic but serial: for GPT-2 (16384 tokens, 768 columns) it
// runs 768 threads of 16384 steps each. Instead the positions are sorted by index value, stably
// (a sort of packed (value, position) pairs on the CPU, CUB's radix sort on CUDA), and the sorted order is cut into
// chunks of kChunkRows positions. Inside a chunk, equal values form pieces:
//
//   sorted keys  | 3 3 3 5 | 5 5 5 5 | 5 7 8 8 | 8 9 9 9 |   (kChunkRows = 4 for the picture)
//   pieces       | W   | H | T       | T W H   | T W     |
//
//   Whole (W): every position of the value is in this chunk; its sum is the value's gradient row.
//   Head  (H): the value starts in this chunk and goes on into the next; the sum is kept in
//              head_part[chunk].
//   Tail  (T): the value began in an earlier chunk (the piece starts the chunk); the sum is kept in
//              tail_part[chunk], also when the value covers the whole chunk and goes on.
//
// Each (chunk, column) sums its pieces independently: k / kChunkRows * dim threads on CUDA, each
// adding at most kChunkRows rows. Then the chunk holding a value's Head owns that value: it adds
// head_part[chunk], then tail_part of each following chunk in order until the value ends. No two
// threads write the same gradient element (a value has exactly one Whole piece or one owner), so
// there are no atomics, and the order of every sum is fixed by the sorted order alone.
//
// Positions whose index is out of range carry the key `end_key` (the number of embeddings): they
// sort last and belong to no piece (the CUDA twin records them as an IndexError; the CPU twin
// refuses them before it starts).
#pragma once

#include <cstdint>

#include "kernels/macros.h"

namespace kiln::embedding_plan {

inline constexpr int64_t kChunkRows = 32;

enum class Piece : int { Whole, Head, Tail };

// The sorted keys: k of them, ascending; `end_key` marks the positions that belong to no piece.
struct SortedKeys {
  const uint32_t* keys = nullptr;
  int64_t k = 0;
  uint32_t end_key = 0;
};

KILN_HD int64_t chunk_count(int64_t k) { return (k + kChunkRows - 1) / kChunkRows; }
KILN_HD int64_t chunk_begin(int64_t c) { return c * kChunkRows; }
KILN_HD int64_t chunk_end(const SortedKeys& s, int64_t c) {
  const int64_t e = (c + 1) * kChunkRows;
  return e < s.k ? e : s.k;
}

// Calls visit(begin, end, key, piece) for each piece of chunk c, in order: sorted positions
// [begin, end) all hold `key`.
template <typename Visit> KILN_HD void for_each_piece(const SortedKeys& s, int64_t c, Visit&& visit) {
  const int64_t b0 = chunk_begin(c), e0 = chunk_end(s, c);
  int64_t b = b0;
  while (b < e0) {
    const uint32_t key = s.keys[b];
    if (key == s.end_key) return;  // the rest of the chunk (and of the order) is out of range
    int64_t e = b + 1;
    while (e < e0 && s.keys[e] == key) ++e;
    Piece p = Piece::Whole;
    if (b == b0 && b0 > 0 && s.keys[b0 - 1] == key) {
      p = Piece::Tail;
    } else if (e == e0 && e0 < s.k && s.keys[e0] == key) {
      p = Piece::Head;
    }
    visit(b, e, key, p);
    b = e;
  }
}

// Whether chunk c holds a Head piece (and so owns the value it starts); *key receives that value.
KILN_HD bool owns_value(const SortedKeys& s, int64_t c, uint32_t* key) {
  const int64_t b0 = chunk_begin(c), e0 = chunk_end(s, c);
  if (e0 >= s.k || e0 <= b0) return false;
  const uint32_t last = s.keys[e0 - 1];
  if (last == s.end_key || s.keys[e0] != last) return false;
  if (b0 > 0 && s.keys[b0 - 1] == last) return false;  // a Tail that goes on: an earlier chunk owns it
  *key = last;
  return true;
}

// Whether the value `key`, present in chunk c, ends there (its last position is in chunk c).
KILN_HD bool value_ends_in(const SortedKeys& s, int64_t c, uint32_t key) {
  const int64_t e0 = chunk_end(s, c);
  return e0 >= s.k || s.keys[e0] != key;
}

}  // namespace kiln::embedding_plan
