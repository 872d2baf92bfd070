// Op table rows of the triangle family: tril and triu with diagonal offsets 0, 1 and -1, over the
// last two dims of 2-d and 3-d inputs (wide and tall, non-contiguous and transposed).
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Tensor ref_triangle(const Tensor& x, int64_t k, bool upper) {
  std::vector<double> xv = values(x);
  const Shape& s = x.sizes();
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, s);
    int64_t diag = idx[s.size() - 1] - idx[s.size() - 2];  // j - i
    if (upper ? diag < k : diag > k) xv[at(i)] = 0;
  }
  return from_values(xv, s);
}

// tril/triu need at least 2 dims.
std::vector<ErrorCase> triangle_errors(const char* name, bool upper) {
  return {{"1-d input", [upper] { upper ? triu(zeros({5})) : tril(zeros({5})); }, {name, "[5]"}}};
}

OpRow triangle_row(const std::string& name, int64_t k, bool upper, uint64_t seed) {
  std::vector<Sample> s = one_input_samples(seed);
  s.push_back({"7x5", [seed](DType t, Device d) { return TensorList{rnd({7, 5}, t, d, seed + 3)}; }});
  s.push_back({"transposed last dims 3x7x5",
               [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed + 4).transpose(-1, -2)}; }});
  OpRow r = unary_row(
      name, s, [k, upper](const Tensor& x) { return upper ? triu(x, k) : tril(x, k); },
      [k, upper](const Tensor& x) { return ref_triangle(x, k, upper); });
  r.errors = triangle_errors(upper ? "triu" : "tril", upper);
  return r;
}

}  // namespace

void add_triangle_rows(std::vector<OpRow>& rows) {
  rows.push_back(triangle_row("tril", 0, false, 1600));
  rows.push_back(triangle_row("tril_k1", 1, false, 1610));
  rows.push_back(triangle_row("tril_kneg1", -1, false, 1620));
  rows.push_back(triangle_row("triu", 0, true, 1630));
  rows.push_back(triangle_row("triu_k1", 1, true, 1640));
  rows.push_back(triangle_row("triu_kneg1", -1, true, 1650));
}

}  // namespace kiln::test
