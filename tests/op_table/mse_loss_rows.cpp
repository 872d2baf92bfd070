// Op table rows of the mse_loss family: mean, sum and no reduction, differentiable in both the
// input and the target.
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

OpRow mse_row(const std::string& name, Reduction red) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {
      {"[3, 4]",
       [](DType t, Device d) {
         return TensorList{rnd({3, 4}, t, d, 61), rnd({3, 4}, t, d, 62)};
       }},
      {"non-contiguous [2, 3, 5]",
       [](DType t, Device d) {
         return TensorList{noncontig(rnd({2, 3, 5}, t, d, 63)), rnd({2, 3, 5}, t, d, 64)};
       }},
  };
  r.op = [red](const TensorList& x) { return TensorList{mse_loss(x[0], x[1], red)}; };
  r.reference = [red](const TensorList& x) {
    Tensor sq = ref_map({x[0], x[1]}, [](const Values& v) { return (v[0] - v[1]) * (v[0] - v[1]); });
    if (red == Reduction::None) return TensorList{sq};
    Values v = values(sq);
    double s = 0;
    for (double e : v) s += e;
    if (red == Reduction::Mean) s /= static_cast<double>(v.size());
    return TensorList{from_values({s}, {})};
  };
  r.differentiable = {0, 1};
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
  r.errors = {
      {"shape mismatch",
       [red] {
         mse_loss(zeros({4, 1}), zeros({4}), red);
       },
       {"mse_loss", "[4, 1]", "[4]"}},
      {"integer input", [red] { mse_loss(zeros({4}, DType::Int64), zeros({4}), red); }, {"mse_loss", "int64"}},
  };
  return r;
}

}  // namespace

void add_mse_loss_rows(std::vector<OpRow>& rows) {
  rows.push_back(mse_row("mse_loss", Reduction::Mean));
  rows.push_back(mse_row("mse_loss sum", Reduction::Sum));
  rows.push_back(mse_row("mse_loss none", Reduction::None));
}

}  // namespace kiln::test
