// Op table rows of the embedding family: rows of the weight picked by int64 indices (repeated, 1-d
// and 0-d), which keep their dtype; the weight's gradient sums over repeated indices.
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

Tensor ref_embedding(const Tensor& w, const Tensor& idx) {
  const int64_t dim = w.size(1);
  Values wv = values(w), iv = values(idx), out;
  for (double i : iv)
    for (int64_t j = 0; j < dim; ++j) out.push_back(wv[at(static_cast<int64_t>(i) * dim + j)]);
  Shape s = idx.sizes();
  s.push_back(dim);
  return from_values(out, s);
}

}  // namespace

void add_embedding_rows(std::vector<OpRow>& rows) {
  {
    OpRow r;
    r.name = "embedding";
    r.dtypes = kFloatTypes;
    r.samples = {
        {"[2, 5] indices with repeats",
         [](DType t, Device d) {
           return TensorList{rnd({6, 4}, t, d, 51),
                             from_values({0, 3, 3, 5, 1, 3, 0, 2, 5, 5}, {2, 5}, DType::Int64).to(d)};
         }},
        {"1-d indices, non-contiguous weight",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({5, 3}, t, d, 52)), from_values({4, 4, 0, 2}, {4}, DType::Int64).to(d)};
         }},
        {"0-d index",
         [](DType t, Device d) {
           return TensorList{rnd({3, 4}, t, d, 53), from_values({2}, {}, DType::Int64).to(d)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{embedding(x[0], x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_embedding(x[0], x[1])}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"index out of range",
         [] {
           embedding(zeros({6, 4}), tensor<int64_t>({1, 6}, {2}));
         },
         {"embedding", "index 6", "6 embeddings", "[6, 4]"}},
        {"negative index",
         [] {
           embedding(zeros({6, 4}), tensor<int64_t>({-1}, {1}));
         },
         {"embedding", "index -1"}},
        {"float indices",
         [] {
           embedding(zeros({6, 4}), zeros({3}));
         },
         {"embedding", "float32", "[3]"}},
        {"1-d weight", [] { embedding(zeros({6}), zeros({3}, DType::Int64)); }, {"embedding", "[6]"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
