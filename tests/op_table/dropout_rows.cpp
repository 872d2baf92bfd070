// Op table rows of the dropout family, in training: the reference redraws the documented Philox
// mask (element i: word (i & 1) * 2 of block i >> 1, kept iff u >= p), so float64 matches exactly.
#include <sstream>

#include "kernels/philox.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr uint64_t kSeed = 20261123;  // the runner seeds this before op and reference of random rows

Tensor ref_dropout(const Tensor& x, double p) {
  Values xv = values(x), out;
  for (size_t i = 0; i < xv.size(); ++i) {
    Philox4 blk = philox_block(kSeed, 0, static_cast<uint64_t>(i) >> 1);
    const bool keep = static_cast<double>(philox_uniform(blk.v[(i & 1) * 2])) >= p;
    out.push_back(keep ? xv[i] * (1.0 / (1.0 - p)) : 0.0);
  }
  return from_values(out, x.sizes());
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

void add_dropout_rows(std::vector<OpRow>& rows) {
  {
    const double p = 0.3;
    OpRow r;
    r.name = "dropout";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {
        {"[4, 37]",
         [](DType t, Device d) {
           return TensorList{rnd({4, 37}, t, d, 71)};
         }},  // odd: half blocks
        {"non-contiguous [3, 5, 7]",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 5, 7}, t, d, 72))};
         }},
        {"transposed [6, 5]",
         [](DType t, Device d) {
           return TensorList{rnd({5, 6}, t, d, 73).t()};
         }},
    };
    r.op = [p](const TensorList& x) { return TensorList{dropout(x[0], p, true)}; };
    r.reference = [p](const TensorList& x) { return TensorList{ref_dropout(x[0], p)}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"p above 1", [] { dropout(zeros({4}), 1.5); }, {"dropout", "p", num(1.5), "[4]"}},
        {"negative p", [] { dropout(zeros({4}), -0.1); }, {"dropout", num(-0.1)}},
        {"integer input", [] { dropout(zeros({4}, DType::Int64), 0.5); }, {"dropout", "int64"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
