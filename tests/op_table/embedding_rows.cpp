// Op table rows of the embedding family: rows of the weight picked by int64 indices (repeated, 1-d
// and 0-d), which keep their dtype; the weight's gradient sums over repeated indices. embedding_bag
// in each mode, with offsets and with 2-d bags, an empty bag, per_sample_weights, padding and
// include_last_offset.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

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

// embedding_bag in float64 loops: bag b holds positions [starts[b], starts[b + 1]) of the
// flattened indices; padding positions are skipped; an empty bag is zeros.
Tensor ref_embedding_bag(const TensorList& x, BagMode mode, bool include_last, int64_t padding) {
  const Values w = values(x[0]), idx = values(x[1]);
  const int64_t dim = x[0].size(1), m = x[1].numel();
  std::vector<int64_t> starts;
  if (x[1].dim() == 2) {
    for (int64_t b = 0; b <= x[1].size(0); ++b) starts.push_back(b * x[1].size(1));
  } else {
    for (double o : values(x[2])) starts.push_back(static_cast<int64_t>(o));
    if (!include_last) starts.push_back(m);
  }
  const Values psw = x.size() > 3 ? values(x[3]) : Values(at(m), 1.0);
  const int64_t bags = static_cast<int64_t>(starts.size()) - 1;
  Values out(at(bags * dim), 0.0);
  for (int64_t b = 0; b < bags; ++b) {
    for (int64_t j = 0; j < dim; ++j) {
      double acc = mode == BagMode::Max ? -INFINITY : 0.0;
      int64_t count = 0;
      for (int64_t i = starts[at(b)]; i < starts[at(b + 1)]; ++i) {
        const int64_t row = static_cast<int64_t>(idx[at(i)]);
        if (row == padding) continue;
        const double v = w[at(row * dim + j)];
        acc = mode == BagMode::Max ? std::max(acc, v) : acc + v * psw[at(i)];
        ++count;
      }
      out[at(b * dim + j)] = count == 0 ? 0.0 : (mode == BagMode::Mean ? acc / static_cast<double>(count) : acc);
    }
  }
  return from_values(out, {bags, dim});
}

}  // namespace

void add_embedding_rows(std::vector<OpRow>& rows) {
  {
    // Inputs: weight, indices, offsets (unused by 2-d indices), and per_sample_weights for Sum.
    // Distinct weights, so max has no ties; bags with repeats, an empty bag, padding positions.
    auto ints = [](const Values& v, const Shape& s, Device d) { return from_values(v, s, DType::Int64).to(d); };
    auto samples = [ints](bool weights) {
      return std::vector<Sample>{
          {"1-d with offsets, an empty bag",
           [ints, weights](DType t, Device d) {
             TensorList in{rnd_distinct({7, 3}, t, d, 60), ints({4, 2, 2, 0, 6, 1, 3, 5, 2, 6}, {10}, d),
                           ints({0, 3, 3, 7}, {4}, d)};
             if (weights) in.push_back(rnd({10}, t, d, 61));
             return in;
           }},
          {"[3, 4] bags",
           [ints, weights](DType t, Device d) {
             TensorList in{noncontig(rnd_distinct({7, 3}, t, d, 63)),
                           ints({1, 2, 1, 6, 0, 0, 5, 4, 3, 2, 6, 6}, {3, 4}, d), ints({0}, {1}, d)};
             if (weights) in.push_back(rnd({3, 4}, t, d, 62));
             return in;
           }},
      };
    };
    struct Bag {
      const char* name;
      BagMode mode;
      bool weights, include_last;
      std::optional<int64_t> padding;
    };
    const Tensor w = zeros({6, 4});
    const std::vector<ErrorCase> errors = {
        {"2-d indices with offsets",
         [w] {
           embedding_bag(w, zeros({2, 3}, DType::Int64), zeros({2}, DType::Int64));
         },
         {"embedding_bag", "[2, 3]", "offsets must be undefined"}},
        {"1-d indices without offsets",
         [w] { embedding_bag(w, zeros({3}, DType::Int64)); },
         {"embedding_bag", "[3]", "offsets"}},
        {"offsets not from 0",
         [w] {
           embedding_bag(w, zeros({4}, DType::Int64), tensor<int64_t>({1, 2}, {2}));
         },
         {"embedding_bag", "start at 0", "[1, 2, 4]"}},
        {"decreasing offsets",
         [w] {
           embedding_bag(w, zeros({4}, DType::Int64), tensor<int64_t>({0, 3, 2}, {3}));
         },
         {"embedding_bag", "never decrease", "[0, 3, 2, 4]"}},
        {"offsets past the indices",
         [w] {
           embedding_bag(w, zeros({4}, DType::Int64), tensor<int64_t>({0, 5}, {2}), BagMode::Mean, Tensor(), true);
         },
         {"embedding_bag", "4 indices", "[0, 5]"}},
        {"per_sample_weights with mean",
         [w] {
           embedding_bag(w, zeros({2, 3}, DType::Int64), Tensor(), BagMode::Mean, zeros({2, 3}));
         },
         {"embedding_bag", "per_sample_weights", "Sum"}},
        {"per_sample_weights of another shape",
         [w] {
           embedding_bag(w, zeros({2, 3}, DType::Int64), Tensor(), BagMode::Sum, zeros({3}));
         },
         {"embedding_bag", "per_sample_weights", "[3]", "[2, 3]"}},
        {"an index out of range",
         [w] {
           embedding_bag(w, tensor<int64_t>({1, 6}, {1, 2}));
         },
         {"embedding", "index 6"}},
        {"3-d indices",
         [w] {
           embedding_bag(w, zeros({2, 2, 2}, DType::Int64));
         },
         {"embedding_bag", "[2, 2, 2]"}},
        {"float indices",
         [w] {
           embedding_bag(w, zeros({2, 2}));
         },
         {"embedding_bag", "float32"}},
    };
    for (const Bag& v : {Bag{"embedding_bag mean", BagMode::Mean, false, false, std::nullopt},
                         Bag{"embedding_bag sum per_sample_weights", BagMode::Sum, true, false, std::nullopt},
                         Bag{"embedding_bag max", BagMode::Max, false, false, std::nullopt},
                         Bag{"embedding_bag mean padding_idx=2 include_last_offset", BagMode::Mean, false, true, 2},
                         Bag{"embedding_bag max padding_idx=2", BagMode::Max, false, false, 2}}) {
      OpRow r;
      r.name = v.name;
      r.dtypes = kFloatTypes;
      r.samples = samples(v.weights);
      r.op = [v](const TensorList& x) {
        const Tensor offsets = x[1].dim() == 1 ? x[2] : Tensor();
        const Tensor psw = x.size() > 3 ? x[3] : Tensor();
        return TensorList{embedding_bag(x[0], x[1], offsets, v.mode, psw, v.include_last, v.padding)};
      };
      // include_last_offset: the offsets' last entry (7) ends the last bag, so positions 7..9 are
      // in none.
      r.reference = [v](const TensorList& x) {
        return TensorList{ref_embedding_bag(x, v.mode, v.include_last && x[1].dim() == 1, v.padding.value_or(-1))};
      };
      r.differentiable = v.weights ? std::vector<size_t>{0, 3} : std::vector<size_t>{0};
      r.out_dtype = [](DType t) { return t; };
      if (v.mode == BagMode::Mean && !v.padding) r.errors = errors;
      rows.push_back(std::move(r));
    }
  }
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
