// Op table rows: joining, splitting and indexing (cat, stack, split, chunk, index_select, gather,
// scatter_add, tril, triu) and the views (view, reshape, permute, transpose, narrow, slice, select,
// expand, squeeze, unsqueeze, flatten, contiguous, clone). References move values with plain index
// arithmetic (unravel/ravel); index inputs are int64 tensors built without kiln's generator.
#include <algorithm>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

int64_t wrap(int64_t dim, int64_t ndim) { return dim < 0 ? dim + ndim : dim; }
size_t at(int64_t i) { return static_cast<size_t>(i); }

// Output of `out_shape` whose element at each index is x's element at the multi-index src(index).
Tensor ref_pick(const Tensor& x, const Shape& out_shape, const std::function<Shape(const Shape&)>& src) {
  std::vector<double> xv = values(x);
  std::vector<double> out(at(shape_numel(out_shape)));
  for (int64_t i = 0; i < shape_numel(out_shape); ++i) {
    out[at(i)] = xv[at(ravel(src(unravel(i, out_shape)), x.sizes()))];
  }
  return from_values(out, out_shape);
}

// The same values in row-major order under another shape (view, reshape, flatten, squeeze, ...).
Tensor ref_relabel(const Tensor& x, const Shape& shape) { return from_values(values(x), shape); }

// An index tensor of `shape` with values in [0, high) from a small LCG; the element at coordinate 1
// along `dim` copies the one at coordinate 0, so every sample has repeated indices along dim.
Tensor make_index(const Shape& shape, int64_t high, int64_t dim, uint64_t seed, Device d,
                  DType t = DType::Int64) {
  std::vector<double> v(at(shape_numel(shape)));
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  for (double& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<double>((s >> 33) % static_cast<uint64_t>(high));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    Shape idx = unravel(i, shape);
    if (idx[at(dim)] != 1) continue;
    idx[at(dim)] = 0;
    v[at(i)] = v[at(ravel(idx, shape))];
  }
  return from_values(v, shape, t).to(d);
}

Tensor idx1d(const std::vector<double>& v, Device d, DType t = DType::Int64) {
  return from_values(v, {static_cast<int64_t>(v.size())}, t).to(d);
}

// Tensors joined along dim (1-d empty tensors skipped, as cat does).
Tensor ref_cat(const TensorList& xs, int64_t dim) {
  std::vector<const Tensor*> used;
  for (const Tensor& t : xs)
    if (!(t.dim() == 1 && t.numel() == 0)) used.push_back(&t);
  int64_t d = wrap(dim, used[0]->dim());
  Shape os = used[0]->sizes();
  os[at(d)] = 0;
  for (const Tensor* t : used) os[at(d)] += t->size(d);
  std::vector<double> out(at(shape_numel(os)));
  int64_t off = 0;
  for (const Tensor* t : used) {
    std::vector<double> tv = values(*t);
    for (int64_t i = 0; i < t->numel(); ++i) {
      Shape idx = unravel(i, t->sizes());
      idx[at(d)] += off;
      out[at(ravel(idx, os))] = tv[at(i)];
    }
    off += t->size(d);
  }
  return from_values(out, os);
}

Tensor ref_stack(const TensorList& xs, int64_t dim) {
  int64_t d = wrap(dim, xs[0].dim() + 1);
  Shape os = xs[0].sizes();
  os.insert(os.begin() + d, static_cast<int64_t>(xs.size()));
  std::vector<double> out(at(shape_numel(os)));
  for (size_t k = 0; k < xs.size(); ++k) {
    std::vector<double> tv = values(xs[k]);
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      Shape idx = unravel(i, xs[k].sizes());
      idx.insert(idx.begin() + d, static_cast<int64_t>(k));
      out[at(ravel(idx, os))] = tv[at(i)];
    }
  }
  return from_values(out, os);
}

// Pieces of x along dim with the given sizes.
TensorList ref_pieces(const Tensor& x, const Shape& sizes, int64_t dim) {
  int64_t d = wrap(dim, x.dim());
  TensorList out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    Shape ps = x.sizes();
    ps[at(d)] = s;
    out.push_back(ref_pick(x, ps, [d, off](Shape idx) {
      idx[at(d)] += off;
      return idx;
    }));
    off += s;
  }
  return out;
}

Shape split_sizes(int64_t n, int64_t size) {
  Shape s;
  for (int64_t off = 0; off < n; off += size) s.push_back(std::min(size, n - off));
  return s;
}

Tensor ref_index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> iv = values(index);
  int64_t d = wrap(dim, x.dim());
  Shape os = x.sizes();
  os[at(d)] = static_cast<int64_t>(iv.size());
  return ref_pick(x, os, [&](Shape idx) {
    idx[at(d)] = static_cast<int64_t>(iv[at(idx[at(d)])]);
    return idx;
  });
}

Tensor ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  std::vector<double> iv = values(index);
  int64_t d = wrap(dim, x.dim());
  return ref_pick(x, index.sizes(), [&](Shape idx) {
    idx[at(d)] = static_cast<int64_t>(iv[at(ravel(idx, index.sizes()))]);
    return idx;
  });
}

Tensor ref_scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  std::vector<double> out = values(x), iv = values(index), sv = values(src);
  int64_t d = wrap(dim, x.dim());
  for (int64_t i = 0; i < index.numel(); ++i) {
    Shape p = unravel(i, index.sizes());
    double add = sv[at(ravel(p, src.sizes()))];
    p[at(d)] = static_cast<int64_t>(iv[at(i)]);
    out[at(ravel(p, x.sizes()))] += add;
  }
  return from_values(out, x.sizes());
}

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

// The three usual samples of a one-input op: contiguous, non-contiguous and transposed (3-d, odd sizes).
std::vector<Sample> one_input_samples(uint64_t seed) {
  return {
      {"3x5x7", [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed)}; }},
      {"non-contiguous 3x5x9",
       [seed](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 9}, t, d, seed + 1))}; }},
      {"transposed 7x5x3",
       [seed](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, seed + 2).transpose(0, 2)}; }},
  };
}

// A one-input, one-output row: op and reference both get the input.
OpRow unary_row(const std::string& name, std::vector<Sample> samples, std::function<Tensor(const Tensor&)> op,
                std::function<Tensor(const Tensor&)> ref) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = std::move(samples);
  r.op = [op](const TensorList& x) { return TensorList{op(x[0])}; };
  r.reference = [ref](const TensorList& x) { return TensorList{ref(x[0])}; };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  return r;
}

OpRow cat_row(const std::string& name, int64_t dim, uint64_t seed) {
  const Shape base{3, 5, 7};
  int64_t d = wrap(dim, 3);
  Shape other = base;
  other[at(d)] = 4;
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = {
      {"3x5x7 and 4 along dim",
       [=](DType t, Device dv) { return TensorList{rnd(base, t, dv, seed), rnd(other, t, dv, seed + 1)}; }},
      {"non-contiguous first",
       [=](DType t, Device dv) {
         return TensorList{noncontig(rnd(base, t, dv, seed + 2)), rnd(other, t, dv, seed + 3)};
       }},
      {"transposed second",
       [=](DType t, Device dv) {
         Shape o = other;
         std::swap(o[0], o[2]);
         return TensorList{rnd(base, t, dv, seed + 4), rnd(o, t, dv, seed + 5).transpose(0, 2)};
       }},
  };
  r.op = [dim](const TensorList& x) { return TensorList{cat(x, dim)}; };
  r.reference = [dim](const TensorList& x) { return TensorList{ref_cat(x, dim)}; };
  r.differentiable = {0, 1};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"sizes differ outside dim", [dim] { cat({zeros({2, 3, 4}), zeros({2, 5, 5})}, dim); },
       {"cat", "[2, 3, 4]", "[2, 5, 5]"}},
      {"dim out of range", [] { cat({zeros({2, 3}), zeros({2, 3})}, 2); }, {"cat", "dimension 2", "2-d"}},
  };
  return r;
}

OpRow stack_row(const std::string& name, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = {
      {"three 3x5x7, one non-contiguous",
       [=](DType t, Device d) {
         return TensorList{rnd({3, 5, 7}, t, d, seed), noncontig(rnd({3, 5, 7}, t, d, seed + 1)),
                           rnd({3, 5, 7}, t, d, seed + 2)};
       }},
      {"three 0-d",
       [=](DType t, Device d) {
         return TensorList{rnd({}, t, d, seed + 3), rnd({}, t, d, seed + 4), rnd({}, t, d, seed + 5)};
       }},
      {"three 1-d 5, one a strided select",
       [=](DType t, Device d) {
         return TensorList{rnd({5}, t, d, seed + 6), rnd({5, 2}, t, d, seed + 7).select(1, 1),
                           rnd({5}, t, d, seed + 8)};
       }},
  };
  r.op = [dim](const TensorList& x) { return TensorList{stack(x, dim)}; };
  r.reference = [dim](const TensorList& x) { return TensorList{ref_stack(x, dim)}; };
  r.differentiable = {0, 1, 2};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"shapes differ", [dim] { stack({zeros({2, 3}), zeros({3, 2})}, dim); }, {"stack", "[2, 3]", "[3, 2]"}},
      {"dim out of range", [] { stack({zeros({2, 3}), zeros({2, 3})}, 4); }, {"stack", "dimension 4"}},
      {"empty list", [] { stack({}, 0); }, {"stack", "non-empty"}},
  };
  return r;
}

OpRow split_row(const std::string& name, int64_t size, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = one_input_samples(seed);
  r.op = [size, dim](const TensorList& x) { return split(x[0], size, dim); };
  r.reference = [size, dim](const TensorList& x) { return ref_pieces(x[0], split_sizes(x[0].size(dim), size), dim); };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"split_size zero", [dim] { split(zeros({3, 4}), 0, dim); }, {"split", "positive", "0"}},
      {"dim out of range", [size] { split(zeros({3, 4}), size, 2); }, {"split", "dimension 2", "2-d"}},
  };
  return r;
}

OpRow chunk_row(const std::string& name, int64_t chunks, int64_t dim, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kAllNumeric;
  r.samples = one_input_samples(seed);
  r.op = [chunks, dim](const TensorList& x) { return chunk(x[0], chunks, dim); };
  // PyTorch's rule: pieces of ceil(n / chunks), so there may be fewer than `chunks` pieces.
  r.reference = [chunks, dim](const TensorList& x) {
    int64_t n = x[0].size(dim);
    return ref_pieces(x[0], split_sizes(n, (n + chunks - 1) / chunks), dim);
  };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.errors = {
      {"zero chunks", [dim] { chunk(zeros({3, 4}), 0, dim); }, {"chunk", "positive", "0"}},
      {"dim out of range", [chunks] { chunk(zeros({3, 4}), chunks, -3); }, {"chunk", "dimension -3", "2-d"}},
  };
  return r;
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

void add_shape_rows(std::vector<OpRow>& rows) {
  // --- cat / stack -------------------------------------------------------------------------
  rows.push_back(cat_row("cat_dim0", 0, 1000));
  rows.push_back(cat_row("cat_dim1", 1, 1010));
  {
    OpRow r = cat_row("cat_dimneg1", -1, 1020);
    // Legacy rule (as PyTorch): 1-d empty tensors are skipped whatever the others' shape.
    r.samples.push_back({"with a 1-d empty tensor", [](DType t, Device d) {
                           return TensorList{rnd({3, 5}, t, d, 1026), zeros({0}, TensorOptions(t, d))};
                         }});
    r.errors.push_back({"different dim counts", [] { cat({zeros({2, 3}), zeros({2, 3, 1})}, -1); },
                        {"cat", "[2, 3]", "[2, 3, 1]"}});
    r.errors.push_back({"0-d inputs", [] { cat({zeros({}), zeros({})}, 0); }, {"cat", "zero-dimensional"}});
    r.errors.push_back({"empty list", [] { cat({}, 0); }, {"cat", "non-empty"}});
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "cat_three_dim1";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"3x5x7, 3x1x7 and non-contiguous 3x2x7",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1030), rnd({3, 1, 7}, t, d, 1031),
                             noncontig(rnd({3, 2, 7}, t, d, 1032))};
         }},
        {"2-d 5x3, 5x7 and 5x1", [](DType t, Device d) {
           return TensorList{rnd({5, 3}, t, d, 1033), rnd({7, 5}, t, d, 1034).t(), rnd({5, 1}, t, d, 1035)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{cat(x, 1)}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_cat(x, 1)}; };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"third tensor mismatched", [] { cat({zeros({3, 2}), zeros({3, 1}), zeros({4, 1})}, 1); },
                 {"cat", "tensor 2", "[4, 1]", "[3, 2]"}}};
    rows.push_back(std::move(r));
  }
  rows.push_back(stack_row("stack_dim0", 0, 1100));
  rows.push_back(stack_row("stack_dimneg1", -1, 1110));

  // --- split / chunk -----------------------------------------------------------------------
  rows.push_back(split_row("split_size2_dim1", 2, 1, 1200));     // 5 -> 2, 2, 1
  rows.push_back(split_row("split_size4_dimneg1", 4, -1, 1210)); // 7 -> 4, 3; 9 -> 4, 4, 1; 3 -> 3
  rows.push_back(chunk_row("chunk3_dimneg1", 3, -1, 1220));      // 7 -> 3, 3, 1; 9 -> 3, 3, 3
  rows.push_back(chunk_row("chunk4_dim1", 4, 1, 1230));          // 5 -> 2, 2, 1 (three pieces)

  // --- index_select ------------------------------------------------------------------------
  {
    OpRow r;
    r.name = "index_select_dim1";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"3x5x7, repeated indices",
         [](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, 1300), idx1d({4, 0, 4, 2, 1, 4}, d)}; }},
        {"non-contiguous 3x5x9, int32 index",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 5, 9}, t, d, 1301)), idx1d({1, 1, 3}, d, DType::Int32)};
         }},
        {"transposed 7x5x3, non-contiguous index",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1302).transpose(0, 2), noncontig(idx1d({0, 2, 0, 4, 3}, d))};
         }},
        {"0-d index", [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1303), from_values({3}, {}, DType::Int64).to(d)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{index_select(x[0], 1, x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_index_select(x[0], 1, x[1])}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"index out of range", [] { index_select(zeros({3, 4}), 1, idx1d({0, 4}, Device::cpu())); },
         {"index_select", "index 4", "size 4"}},
        {"negative index", [] { index_select(zeros({3, 4}), 0, idx1d({-1}, Device::cpu())); },
         {"index_select", "index -1", "size 3"}},
        {"float index", [] { index_select(zeros({3, 4}), 0, zeros({2})); }, {"index_select", "float32", "[2]"}},
        {"2-d index", [] { index_select(zeros({3, 4}), 0, zeros({2, 2}, DType::Int64)); },
         {"index_select", "[2, 2]"}},
        {"dim out of range", [] { index_select(zeros({3, 4}), 2, idx1d({0}, Device::cpu())); },
         {"index_select", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "index_select_dim0";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"5x7", [](DType t, Device d) { return TensorList{rnd({5, 7}, t, d, 1310), idx1d({2, 2, 0, 4, 2}, d)}; }},
        {"1-d 9", [](DType t, Device d) { return TensorList{rnd({9}, t, d, 1311), idx1d({8, 0, 8}, d)}; }},
        {"non-contiguous 5x7, empty index", [](DType t, Device d) {
           return TensorList{noncontig(rnd({5, 7}, t, d, 1312)), zeros({0}, TensorOptions(DType::Int64, d))};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{index_select(x[0], 0, x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_index_select(x[0], 0, x[1])}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"index out of range", [] { index_select(zeros({3, 4}), 0, idx1d({0, 3}, Device::cpu())); },
                 {"index_select", "index 3", "size 3"}}};
    rows.push_back(std::move(r));
  }

  // --- gather ------------------------------------------------------------------------------
  {
    OpRow r;
    r.name = "gather_dim0";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"5x7, index 6x7",
         [](DType t, Device d) { return TensorList{rnd({5, 7}, t, d, 1400), make_index({6, 7}, 5, 0, 1, d)}; }},
        {"non-contiguous 5x9, index 4x3",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({5, 9}, t, d, 1401)), make_index({4, 3}, 5, 0, 2, d)};
         }},
        {"3x5x7, non-contiguous index 4x5x7", [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1402), noncontig(make_index({4, 5, 7}, 3, 0, 3, d))};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{gather(x[0], 0, x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_gather(x[0], 0, x[1])}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"index out of range", [] { gather(zeros({3, 4}), 0, from_values({0, 1, 3, 2}, {1, 4}, DType::Int64)); },
         {"gather", "index 3", "size 3"}},
        {"float index", [] { gather(zeros({3, 4}), 0, zeros({1, 4})); }, {"gather", "float32", "[1, 4]"}},
        {"dim counts differ", [] { gather(zeros({3, 4}), 0, zeros({4}, DType::Int64)); }, {"gather", "[3, 4]", "[4]"}},
        {"index larger in another dim", [] { gather(zeros({3, 4}), 0, zeros({2, 5}, DType::Int64)); },
         {"gather", "[2, 5]", "[3, 4]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "gather_dim1";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"5x7, index 5x9",
         [](DType t, Device d) { return TensorList{rnd({5, 7}, t, d, 1410), make_index({5, 9}, 7, 1, 4, d)}; }},
        {"transposed 7x5, index 3x4",
         [](DType t, Device d) { return TensorList{rnd({5, 7}, t, d, 1411).t(), make_index({3, 4}, 5, 1, 5, d)}; }},
        {"3x5x7, int32 index 3x6x7", [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1412), make_index({3, 6, 7}, 5, 1, 6, d, DType::Int32)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{gather(x[0], 1, x[1])}; };
    r.reference = [](const TensorList& x) { return TensorList{ref_gather(x[0], 1, x[1])}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"negative index", [] { gather(zeros({3, 4}), 1, from_values({0, -2}, {1, 2}, DType::Int64)); },
         {"gather", "index -2", "size 4"}},
        {"dim out of range", [] { gather(zeros({3, 4}), -3, zeros({3, 4}, DType::Int64)); },
         {"gather", "dimension -3", "2-d"}},
    };
    rows.push_back(std::move(r));
  }

  // --- scatter_add -------------------------------------------------------------------------
  for (int64_t dim : {0, 1}) {
    OpRow r;
    r.name = dim == 0 ? "scatter_add_dim0" : "scatter_add_dim1";
    r.dtypes = kAllNumeric;
    uint64_t seed = 1500 + static_cast<uint64_t>(dim) * 10;
    r.samples = {
        {"5x7, index and src 6x7 (dim0) / 5x9 (dim1)",
         [dim, seed](DType t, Device d) {
           Shape is = dim == 0 ? Shape{6, 7} : Shape{5, 9};
           return TensorList{rnd({5, 7}, t, d, seed), make_index(is, dim == 0 ? 5 : 7, dim, seed, d),
                             rnd(is, t, d, seed + 1)};
         }},
        {"src larger than index",
         [dim, seed](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, seed + 2), make_index({4, 3}, dim == 0 ? 5 : 7, dim, seed + 2, d),
                             rnd({6, 9}, t, d, seed + 3)};
         }},
        {"non-contiguous input and src, 3-d",
         [dim, seed](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 5, 7}, t, d, seed + 4)),
                             make_index({3, 4, 7}, dim == 0 ? 3 : 5, dim, seed + 4, d),
                             noncontig(rnd({3, 4, 7}, t, d, seed + 5))};
         }},
    };
    r.op = [dim](const TensorList& x) { return TensorList{scatter_add(x[0], dim, x[1], x[2])}; };
    r.reference = [dim](const TensorList& x) { return TensorList{ref_scatter_add(x[0], dim, x[1], x[2])}; };
    r.differentiable = {0, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"index out of range",
         [dim] { scatter_add(zeros({3, 4}), dim, from_values({0, 9}, {1, 2}, DType::Int64), zeros({3, 4})); },
         {"scatter_add", "index 9", dim == 0 ? "size 3" : "size 4"}},
        {"float index", [dim] { scatter_add(zeros({3, 4}), dim, zeros({1, 2}), zeros({3, 4})); },
         {"scatter_add", "float32", "[1, 2]"}},
        {"src dtype differs",
         [dim] { scatter_add(zeros({3, 4}), dim, zeros({1, 2}, DType::Int64), zeros({3, 4}, DType::Float64)); },
         {"scatter_add", "float64", "float32"}},
        {"index larger than src",
         [dim] { scatter_add(zeros({3, 4}), dim, zeros({2, 4}, DType::Int64), zeros({1, 4})); },
         {"scatter_add", "[2, 4]", "[1, 4]"}},
    };
    rows.push_back(std::move(r));
  }

  // --- tril / triu -------------------------------------------------------------------------
  rows.push_back(triangle_row("tril", 0, false, 1600));
  rows.push_back(triangle_row("tril_k1", 1, false, 1610));
  rows.push_back(triangle_row("tril_kneg1", -1, false, 1620));
  rows.push_back(triangle_row("triu", 0, true, 1630));
  rows.push_back(triangle_row("triu_k1", 1, true, 1640));
  rows.push_back(triangle_row("triu_kneg1", -1, true, 1650));

  // --- views -------------------------------------------------------------------------------
  {
    // Merging dims 0 and 1 is a view even of the non-contiguous sample (its dims 0 and 1 are packed).
    std::vector<Sample> s = {
        {"3x5x7", [](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, 1700)}; }},
        {"non-contiguous 3x5x9", [](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 9}, t, d, 1701))}; }},
    };
    OpRow r = unary_row(
        "view", s,
        [](const Tensor& x) {
          Tensor y = view(x, {x.size(0) * x.size(1), -1});
          if (!y.is_view() || y.storage() != x.storage()) {
            throw Error("view: result does not share the input's storage");
          }
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, {x.size(0) * x.size(1), x.size(2)}); });
    r.errors = {
        {"wrong element count", [] { view(zeros({3, 5}), {4, 4}); }, {"view", "[4, 4]", "[3, 5]"}},
        {"strides not viewable", [] { view(zeros({5, 3}).t(), {-1}); }, {"view", "[3, 5]", "reshape"}},
        {"two -1", [] { view(zeros({3, 5}), {-1, -1}); }, {"view", "[-1, -1]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // The transposed and non-contiguous samples cannot be viewed as [last, -1]: reshape must copy.
    OpRow r = unary_row(
        "reshape", one_input_samples(1710), [](const Tensor& x) { return reshape(x, {x.size(-1), -1}); },
        [](const Tensor& x) { return ref_relabel(x, {x.size(-1), x.numel() / x.size(-1)}); });
    r.errors = {
        {"wrong element count", [] { reshape(zeros({3, 5}), {4, -1}); }, {"reshape", "[4, -1]", "[3, 5]"}},
        {"negative size", [] { reshape(zeros({3, 5}), {-3, 5}); }, {"reshape", "-3"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "permute", one_input_samples(1720), [](const Tensor& x) { return permute(x, {2, 0, -2}); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          return ref_pick(x, {s[2], s[0], s[1]}, [](const Shape& o) { return Shape{o[1], o[2], o[0]}; });
        });
    r.errors = {
        {"wrong dim count", [] { permute(zeros({2, 3, 4}), {1, 0}); }, {"permute", "[2, 3, 4]"}},
        {"repeated dim", [] { permute(zeros({2, 3, 4}), {0, -3, 1}); }, {"permute", "[0, -3, 1]"}},
        {"dim out of range", [] { permute(zeros({2, 3}), {0, 2}); }, {"permute", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "transpose", one_input_samples(1730), [](const Tensor& x) { return transpose(x, 0, -1); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          return ref_pick(x, {s[2], s[1], s[0]}, [](const Shape& o) { return Shape{o[2], o[1], o[0]}; });
        });
    r.errors = {{"dim out of range", [] { transpose(zeros({2, 3}), 0, 2); }, {"transpose", "dimension 2", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "narrow", one_input_samples(1740), [](const Tensor& x) { return narrow(x, -1, 1, 2); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          s[2] = 2;
          return ref_pick(x, s, [](Shape o) {
            o[2] += 1;
            return o;
          });
        });
    r.errors = {
        {"range past the end", [] { narrow(zeros({3, 5}), 1, 3, 4); }, {"narrow", "[3, 7)", "size 5", "[3, 5]"}},
        {"negative length", [] { narrow(zeros({3, 5}), 0, 1, -1); }, {"narrow", "[1, 0)", "size 3"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Start 1, end past the size (clamped), step 2: elements 1, 3, ... of the last dim.
    OpRow r = unary_row(
        "slice_step2", one_input_samples(1750), [](const Tensor& x) { return x.slice(-1, 1, 100, 2); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          s[2] = s[2] / 2;
          return ref_pick(x, s, [](Shape o) {
            o[2] = 1 + 2 * o[2];
            return o;
          });
        });
    r.errors = {
        {"zero step", [] { zeros({3, 5}).slice(1, 0, 5, 0); }, {"slice", "step", "0"}},
        {"dim out of range", [] { zeros({3, 5}).slice(2, 0, 1); }, {"slice", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Negative start and end count from the size: elements size-3 and size-2 of dim 1.
    OpRow r = unary_row(
        "slice_negative_bounds", one_input_samples(1760), [](const Tensor& x) { return x.slice(1, -3, -1); },
        [](const Tensor& x) {
          Shape s = x.sizes();
          int64_t start = s[1] - 3;
          s[1] = 2;
          return ref_pick(x, s, [start](Shape o) {
            o[1] += start;
            return o;
          });
        });
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "select_neg", one_input_samples(1770), [](const Tensor& x) { return select(x, 1, -2); },
        [](const Tensor& x) {
          const Shape& s = x.sizes();
          int64_t i = s[1] - 2;
          return ref_pick(x, {s[0], s[2]}, [i](const Shape& o) { return Shape{o[0], i, o[1]}; });
        });
    r.errors = {
        {"index out of range", [] { select(zeros({3, 5}), 1, 5); }, {"select", "index 5", "size 5", "[3, 5]"}},
        {"negative index out of range", [] { select(zeros({3, 5}), 0, -4); }, {"select", "index -4", "size 3"}},
        {"0-d input", [] { select(zeros({}), 0, 0); }, {"select", "0-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x7", [](DType t, Device d) { return TensorList{rnd({3, 1, 7}, t, d, 1780)}; }},
        {"non-contiguous 3x1x9", [](DType t, Device d) { return TensorList{noncontig(rnd({3, 1, 9}, t, d, 1781))}; }},
        {"1x1x1", [](DType t, Device d) { return TensorList{rnd({1, 1, 1}, t, d, 1782)}; }},
    };
    // A new leading dim of 2, dim 1 broadcast to 5, the others kept with -1.
    OpRow r = unary_row(
        "expand", s, [](const Tensor& x) { return expand(x, {2, -1, 5, -1}); },
        [](const Tensor& x) {
          const Shape& xs = x.sizes();
          return ref_pick(x, {2, xs[0], 5, xs[2]}, [](const Shape& o) { return Shape{o[1], 0, o[3]}; });
        });
    r.errors = {
        {"size not 1", [] { expand(zeros({3, 2}), {3, 4}); }, {"expand", "[3, 2]", "[3, 4]"}},
        {"fewer dims", [] { expand(zeros({3, 2}), {2}); }, {"expand", "[3, 2]", "[2]"}},
        {"-1 in a new dim", [] { expand(zeros({3}), {-1, 3}); }, {"expand", "[-1, 3]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x5x1", [](DType t, Device d) { return TensorList{rnd({3, 1, 5, 1}, t, d, 1790)}; }},
        {"non-contiguous 1x5x1x7",
         [](DType t, Device d) { return TensorList{noncontig(rnd({1, 5, 1, 7}, t, d, 1791))}; }},
        {"nothing to squeeze 3x5", [](DType t, Device d) { return TensorList{rnd({3, 5}, t, d, 1792)}; }},
    };
    OpRow r = unary_row(
        "squeeze", s, [](const Tensor& x) { return squeeze(x); },
        [](const Tensor& x) {
          Shape ns;
          for (int64_t v : x.sizes())
            if (v != 1) ns.push_back(v);
          return ref_relabel(x, ns);
        });
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = {
        {"3x1x5x1", [](DType t, Device d) { return TensorList{rnd({3, 1, 5, 1}, t, d, 1800)}; }},
        {"last not 1: unchanged 3x5x7",
         [](DType t, Device d) { return TensorList{noncontig(rnd({3, 5, 7}, t, d, 1801))}; }},
    };
    OpRow r = unary_row(
        "squeeze_dimneg1", s, [](const Tensor& x) { return squeeze(x, -1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          if (ns.back() == 1) ns.pop_back();
          return ref_relabel(x, ns);
        });
    r.errors = {{"dim out of range", [] { squeeze(zeros({3, 1}), 2); }, {"squeeze", "dimension 2", "2-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "unsqueeze_dim1", one_input_samples(1810), [](const Tensor& x) { return unsqueeze(x, 1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          ns.insert(ns.begin() + 1, 1);
          return ref_relabel(x, ns);
        });
    r.errors = {{"dim out of range", [] { unsqueeze(zeros({3, 1}), 3); }, {"unsqueeze", "dimension 3"}}};
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1820);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1823)}; }});
    OpRow r = unary_row(
        "unsqueeze_dimneg1", s, [](const Tensor& x) { return unsqueeze(x, -1); },
        [](const Tensor& x) {
          Shape ns = x.sizes();
          ns.push_back(1);
          return ref_relabel(x, ns);
        });
    r.errors = {{"negative dim out of range", [] { unsqueeze(zeros({3, 1}), -4); }, {"unsqueeze", "dimension -4"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = unary_row(
        "flatten_dims1to2", one_input_samples(1830), [](const Tensor& x) { return flatten(x, 1, -1); },
        [](const Tensor& x) { return ref_relabel(x, {x.size(0), x.size(1) * x.size(2)}); });
    r.errors = {
        {"start after end", [] { flatten(zeros({2, 3, 4}), 2, 1); }, {"flatten", "start_dim 2", "end_dim 1"}},
        {"dim out of range", [] { flatten(zeros({2, 3}), 0, 2); }, {"flatten", "dimension 2", "2-d"}},
    };
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1840);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1843)}; }});
    OpRow r = unary_row(
        "flatten_all", s, [](const Tensor& x) { return flatten(x); },
        [](const Tensor& x) { return ref_relabel(x, {x.numel()}); });
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1850);
    s.push_back({"transposed last two 3x7x5",
                 [](DType t, Device d) { return TensorList{rnd({3, 5, 7}, t, d, 1853).transpose(1, 2)}; }});
    OpRow r = unary_row(
        "contiguous", s,
        [](const Tensor& x) {
          Tensor y = contiguous(x);
          if (!y.is_contiguous()) throw Error("contiguous: result is not contiguous");
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, x.sizes()); });
    r.errors = {{"undefined tensor", [] { contiguous(Tensor()); }, {"contiguous", "undefined"}}};
    rows.push_back(std::move(r));
  }
  {
    std::vector<Sample> s = one_input_samples(1860);
    s.push_back({"0-d", [](DType t, Device d) { return TensorList{rnd({}, t, d, 1863)}; }});
    OpRow r = unary_row(
        "clone", s,
        [](const Tensor& x) {
          Tensor y = x.clone();
          if (y.storage() == x.storage()) throw Error("clone: result shares the input's storage");
          return y;
        },
        [](const Tensor& x) { return ref_relabel(x, x.sizes()); });
    r.errors = {{"undefined tensor", [] { Tensor().clone(); }, {"clone", "undefined"}}};
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
