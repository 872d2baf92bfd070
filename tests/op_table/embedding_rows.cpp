// Op table rows of the embedding family: rows of the weight picked by int64 indices (repeated, 1-d
// and 0-d), which keep their dtype; the weight's gradient sums over repeated indices.
#include <algorithm>
#include <string>

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

// embedding with padding_idx 2 (also given as -5 of 7): the rows and the weight's gradient for the
// output gradient dy, which sums dy's rows by index except into row 2 (zeros).
Tensor ref_padding_grad(const Tensor& w, const Tensor& idx, const Tensor& dy) {
  const int64_t dim = w.size(1);
  Values iv = values(idx), gv = values(dy), out(static_cast<size_t>(w.numel()), 0.0);
  for (size_t p = 0; p < iv.size(); ++p) {
    const auto i = static_cast<int64_t>(iv[p]);
    if (i == 2) continue;
    for (int64_t j = 0; j < dim; ++j) out[at(i * dim + j)] += gv[at(static_cast<int64_t>(p) * dim + j)];
  }
  return from_values(out, w.sizes());
}

// An embedding's forward and backward in a training step, for GPT-2's token table (50257 x 768) and
// a character model's (65 x 384): positions from --elements (16384 at the default 2^26), ids
// uniform over the vocabulary (GPT-2's are mostly distinct, the character model's repeat about 250
// times each). Bytes: the rows read and the output written, the output's gradient and the ids read,
// and the table's gradient written once.
BenchCase embedding_bench(const std::string& name, int64_t vocab, int64_t width) {
  BenchCase b;
  b.name = name;
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = "embedding_fwd_bwd";
  b.setup = [vocab, width](DType t, int64_t n) {
    const int64_t k = std::max<int64_t>(1, n / 4096);
    BenchSetup s;
    s.shape = {k, vocab, width};
    BenchInput ids{{k}, DType::Int64, BenchInput::Fill::Tokens};
    ids.upper = vocab;
    s.inputs = {{{vocab, width}, t}, {{k, width}, t}, ids};
    const double es = static_cast<double>(element_size(t));
    const double rows = static_cast<double>(k * width) * es;
    s.bytes = 3 * rows + static_cast<double>(vocab * width) * es + 16.0 * static_cast<double>(k);
    return s;
  };
  b.run = [](const TensorList& x) {
    Tensor w = x[0].detach().set_requires_grad(true);
    embedding(w, x[2]).backward(x[1]);
    return TensorList{w.grad()};
  };
  return b;
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
        // The backward sorts positions by value and sums them in chunks of 32 (kernels/embedding_plan.h):
        // values 0..2 take about 90 positions each, so their sums cross chunks; 3..6 are rare.
        {"[3, 100] indices, values repeated across sort chunks",
         [](DType t, Device d) {
           Values v;
           for (int i = 0; i < 300; ++i) v.push_back(i % 5 == 0 ? i % 7 : (i * i) % 3);
           return TensorList{rnd({7, 33}, t, d, 54), from_values(v, {3, 100}, DType::Int64).to(d)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{embedding(x[0], x[1])}; };
    r.bench = {embedding_bench("embedding_fwd_bwd_gpt2", 50257, 768),
               embedding_bench("embedding_fwd_bwd_char", 65, 384)};
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
  {
    // The padding row's gradient is not the derivative (it is held at zero), so no gradcheck: the op
    // returns the weight's gradient for a given output gradient as its second output.
    OpRow r;
    r.name = "embedding_padding_idx";
    r.dtypes = kFloatTypes;
    // Inputs: weight, indices, output gradient, padding_idx (0-d int64).
    auto sample = [](int64_t padding) {
      return [padding](DType t, Device d) {
        Values v;
        for (int i = 0; i < 120; ++i) v.push_back(i % 4 == 0 ? 2 : (i * 5) % 7);
        return TensorList{rnd({7, 9}, t, d, 55), from_values(v, {4, 30}, DType::Int64).to(d), rnd({4, 30, 9}, t, d, 56),
                          from_values({static_cast<double>(padding)}, {}, DType::Int64)};
      };
    };
    r.samples = {{"padding_idx 2, [4, 30] indices", sample(2)}, {"padding_idx -5 (row 2 of 7)", sample(-5)}};
    r.op = [](const TensorList& x) {
      Tensor w = x[0].detach().set_requires_grad(true);
      Tensor y = embedding(w, x[1], x[3].item<int64_t>());
      y.backward(x[2]);
      return TensorList{y, w.grad()};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_embedding(x[0], x[1]), ref_padding_grad(x[0], x[1], x[2])};
    };
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"padding_idx past the rows",
         [] {
           embedding(zeros({6, 4}), tensor<int64_t>({1}, {1}), 6);
         },
         {"embedding", "padding_idx 6", "6 embeddings", "[6, 4]"}},
        {"padding_idx before the rows",
         [] {
           embedding(zeros({6, 4}), tensor<int64_t>({1}, {1}), -7);
         },
         {"embedding", "padding_idx -7", "[-6, 6)"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
