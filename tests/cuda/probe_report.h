// The report of an identity probe (the tensor-core self-tests, tests/cuda/tile_selftest.h and
// wgmma_selftest.h): with A = I, each element of a product is one element of the other operand, which
// holds ids, so an element in the wrong place names the element the instruction read instead.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace kiln::test {

// Appends to `out` the elements of `got` that differ from `want` (both row-major with `cols`
// columns), as "output[r][c] = <want's element> read <got's element>", each element named by
// name(id, c); at most `limit` lines in all, then, if any differ, "output: N elements wrong".
inline void report_misreads(std::vector<std::string>& out, const std::string& output, const std::vector<float>& got,
                            const std::vector<float>& want, int cols,
                            const std::function<std::string(float, int)>& name, size_t limit) {
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++wrong;
    const int r = static_cast<int>(i) / cols, c = static_cast<int>(i) % cols;
    if (out.size() < limit) {
      out.push_back(output + "[" + std::to_string(r) + "][" + std::to_string(c) + "] = " + name(want[i], c) +
                    " read " + name(got[i], c));
    }
  }
  if (wrong > 0) out.push_back(output + ": " + std::to_string(wrong) + " elements wrong");
}

}  // namespace kiln::test
