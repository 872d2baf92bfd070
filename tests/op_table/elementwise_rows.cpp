// Op table rows: elementwise ops (unary, binary with broadcasting, comparisons, where, casts).
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {

void add_elementwise_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "add";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"same shape", [](DType t, Device d) { return TensorList{rnd({3, 5}, t, d, 1), rnd({3, 5}, t, d, 2)}; }},
        {"broadcast", [](DType t, Device d) { return TensorList{rnd({4, 1, 3}, t, d, 3), rnd({5, 1}, t, d, 4)}; }},
        {"non-contiguous", [](DType t, Device d) { return TensorList{noncontig(rnd({3, 7}, t, d, 5)), rnd({7}, t, d, 6)}; }},
        {"scalar tensor", [](DType t, Device d) { return TensorList{rnd({}, t, d, 7), rnd({2, 3}, t, d, 8)}; }},
    };
    r.op = [](const TensorList& x) { return TensorList{add(x[0], x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_map(x, [](auto& v) { return v[0] + v[1]; })}; };
    r.differentiable = {0, 1};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"shapes do not broadcast", [] { add(zeros({2, 3}), zeros({4})); }, {"add", "[2, 3]", "[4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "exp";
    r.dtypes = kFloatTypes;
    r.samples = {
        {"odd size", [](DType t, Device d) { return TensorList{rnd({7, 3}, t, d, 11)}; }},
        {"non-contiguous", [](DType t, Device d) { return TensorList{noncontig(rnd({5, 2}, t, d, 12))}; }},
    };
    r.op = [](const TensorList& x) { return TensorList{exp(x[0])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_map(x, [](auto& v) { return std::exp(v[0]); })}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
