// Op table rows of the softmax family: softmax and log_softmax along the last dim and along others,
// against a float64 reference that subtracts each row's maximum before exponentiating.
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.sizes();
  if (s.empty()) return from_values({log ? 0.0 : 1.0}, {});
  const size_t d = at(wrap(dim, static_cast<int64_t>(s.size())));
  Values xv = values(x), out(xv.size());
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, s);
    if (idx[d] != 0) continue;  // one pass per row, from its first element
    std::vector<size_t> pos;
    for (int64_t j = 0; j < s[d]; ++j) {
      idx[d] = j;
      pos.push_back(at(ravel(idx, s)));
    }
    double mx = -INFINITY, sum = 0;
    for (size_t p : pos) mx = std::max(mx, xv[p]);
    for (size_t p : pos) sum += std::exp(xv[p] - mx);
    for (size_t p : pos) out[p] = log ? xv[p] - mx - std::log(sum) : std::exp(xv[p] - mx) / sum;
  }
  return from_values(out, s);
}

OpRow softmax_row(const std::string& name, bool log, int64_t dim, std::vector<Sample> samples) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = std::move(samples);
  r.op = [log, dim](const TensorList& x) { return TensorList{log ? log_softmax(x[0], dim) : softmax(x[0], dim)}; };
  r.reference = [log, dim](const TensorList& x) { return TensorList{ref_softmax(x[0], dim, log)}; };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  const char* op = log ? "log_softmax" : "softmax";
  r.errors = {
      {"integer input",
       [log] {
         log ? log_softmax(zeros({3, 4}, DType::Int64), -1) : softmax(zeros({3, 4}, DType::Int64), -1);
       },
       {op, "int64", "[3, 4]"}},
      {"dim out of range",
       [log] {
         log ? log_softmax(zeros({3, 4}), 2) : softmax(zeros({3, 4}), 2);
       },
       {op, "dim 2", "[3, 4]"}},
  };
  return r;
}

}  // namespace

void add_softmax_rows(std::vector<OpRow>& rows) {
  rows.push_back(softmax_row("softmax", false, -1,
                             {{"[4, 7]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({4, 7}, t, d, 1, 3.0)};
                               }},
                              // Past the CPU row loops' 8 lanes, with a tail.
                              {"[3, 37]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({3, 37}, t, d, 10, 3.0)};
                               }},
                              {"non-contiguous [3, 5, 7]",
                               [](DType t, Device d) {
                                 return TensorList{noncontig(rnd({3, 5, 7}, t, d, 2, 3.0))};
                               }},
                              {"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 3)}; }}}));
  rows.back().bench = {row_bench("softmax", "softmax", R"({"dim": -1})", false)};
  rows.push_back(softmax_row("softmax dim 0", false, 0,
                             {{"[5, 3]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({5, 3}, t, d, 4, 3.0)};
                               }},
                              {"transposed [4, 3, 2]", [](DType t, Device d) {
                                 return TensorList{rnd({2, 3, 4}, t, d, 5, 3.0).permute({2, 1, 0})};
                               }}}));
  rows.push_back(softmax_row("log_softmax", true, -1,
                             {{"[4, 7]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({4, 7}, t, d, 6, 3.0)};
                               }},
                              {"[3, 37]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({3, 37}, t, d, 11, 3.0)};
                               }},
                              {"non-contiguous [3, 5, 7]", [](DType t, Device d) {
                                 return TensorList{noncontig(rnd({3, 5, 7}, t, d, 7, 3.0))};
                               }}}));
  rows.push_back(softmax_row("log_softmax dim 1", true, 1,
                             {{"[3, 5, 4]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({3, 5, 4}, t, d, 8, 3.0)};
                               }},
                              {"non-contiguous [2, 6, 3]", [](DType t, Device d) {
                                 return TensorList{noncontig(rnd({2, 6, 3}, t, d, 9, 3.0))};
                               }}}));
}

}  // namespace kiln::test
