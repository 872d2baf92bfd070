// Op table rows of the index family: index_select, gather, scatter_add, one_hot, take,
// take_along_dim, index_add, index_fill, scatter, index_copy, advanced_index and index_put. Index
// inputs are int64 (or int32) tensors built without kiln's generator; most samples repeat indices,
// so scatter_add's accumulation and the gradients' sums over repeats are exercised (scatter's src
// rows keep them distinct).
#include <algorithm>
#include <functional>
#include <utility>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

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

// An index of `shape` whose entries along `dim` are distinct (a shuffled prefix of [0, high) for
// every position of the other dims, high >= the size along dim): a scatter that writes each
// position at most once.
Tensor distinct_index(const Shape& shape, int64_t high, int64_t dim, uint64_t seed, Device d) {
  std::vector<double> v(at(shape_numel(shape)));
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  Shape outer = shape;
  outer[at(dim)] = 1;
  for (int64_t o = 0; o < shape_numel(outer); ++o) {
    std::vector<int64_t> pool(at(high));
    for (int64_t k = 0; k < high; ++k) pool[at(k)] = k;
    for (int64_t k = high - 1; k > 0; --k) {  // Fisher-Yates from the LCG
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(pool[at(k)], pool[at(static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(k + 1)))]);
    }
    Shape p = unravel(o, outer);
    for (int64_t k = 0; k < shape[at(dim)]; ++k) {
      p[at(dim)] = k;
      v[at(ravel(p, shape))] = static_cast<double>(pool[at(k)]);
    }
  }
  return from_values(v, shape, DType::Int64).to(d);
}

// x with the slices at `index` along dim replaced by fn(old value, slice position k) for each
// index entry k in order (index_add's sums, index_fill's value).
Tensor ref_slices(const Tensor& x, int64_t dim, const Tensor& index,
                  const std::function<double(double, const Shape&, int64_t)>& fn) {
  std::vector<double> out = values(x), iv = values(index);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const Shape p = unravel(i, x.sizes());
    for (int64_t k = 0; k < static_cast<int64_t>(iv.size()); ++k) {
      if (static_cast<int64_t>(iv[at(k)]) == p[at(dim)]) out[at(i)] = fn(out[at(i)], p, k);
    }
  }
  return from_values(out, x.sizes());
}

// advanced_index's reference: where each element of the result comes from in x (row-major
// positions) and the result's shape. Undefined entries are whole dims; a bool mask stands for the
// coordinates of its true elements; negative indices count from the end. Plain loops over values.
std::pair<std::vector<int64_t>, Shape> ref_advanced(const Tensor& x, const TensorList& indices) {
  std::vector<int64_t> dims;  // the dim each int index reads
  std::vector<Values> ivs;
  std::vector<Shape> shapes;
  int64_t dim = 0;
  for (const Tensor& i : indices) {
    if (!i.defined()) {
      ++dim;
      continue;
    }
    if (i.dtype() == DType::Bool) {
      const Values mv = values(i);
      std::vector<Values> coords(at(i.dim()));
      for (int64_t n = 0; n < i.numel(); ++n) {
        if (mv[at(n)] == 0) continue;
        const Shape c = unravel(n, i.sizes());
        for (int64_t j = 0; j < i.dim(); ++j) coords[at(j)].push_back(static_cast<double>(c[at(j)]));
      }
      for (int64_t j = 0; j < i.dim(); ++j) {
        dims.push_back(dim + j);
        shapes.push_back({static_cast<int64_t>(coords[at(j)].size())});
        ivs.push_back(coords[at(j)]);
      }
      dim += i.dim();
    } else {
      dims.push_back(dim++);
      shapes.push_back(i.sizes());
      ivs.push_back(values(i));
    }
  }
  Shape b;
  for (const Shape& s : shapes) b = broadcast_shapes(b, s, "ref");
  bool adjacent = true;
  for (size_t j = 1; j < dims.size(); ++j) adjacent = adjacent && dims[j] == dims[j - 1] + 1;
  const int64_t placed = adjacent ? dims[0] : 0;
  Shape rest;  // the whole dims, in order
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) rest.push_back(d);
  }
  Shape out_shape;
  for (const int64_t d : rest) out_shape.push_back(x.size(d));
  out_shape.insert(out_shape.begin() + placed, b.begin(), b.end());
  const int64_t nb = static_cast<int64_t>(b.size());
  std::vector<int64_t> from(at(shape_numel(out_shape)));
  for (int64_t n = 0; n < shape_numel(out_shape); ++n) {
    const Shape c = unravel(n, out_shape);
    Shape bc(c.begin() + placed, c.begin() + placed + nb), rc(c.begin(), c.begin() + placed);
    rc.insert(rc.end(), c.begin() + placed + nb, c.end());
    Shape src(at(x.dim()));
    for (size_t r = 0; r < rest.size(); ++r) src[at(rest[r])] = rc[r];
    for (size_t j = 0; j < dims.size(); ++j) {
      Shape ic(shapes[j].size());  // the index's own coordinate: b's, right-aligned, 0 where size 1
      for (size_t q = 0; q < ic.size(); ++q) {
        const int64_t bq = bc[bc.size() - ic.size() + q];
        ic[q] = shapes[j][q] == 1 ? 0 : bq;
      }
      int64_t v = static_cast<int64_t>(ivs[j][at(ravel(ic, shapes[j]))]);
      if (v < 0) v += x.size(dims[j]);
      src[at(dims[j])] = v;
    }
    from[at(n)] = ravel(src, x.sizes());
  }
  return {from, out_shape};
}

// index_put's reference: values (broadcast) written, or added with accumulate, at ref_advanced's
// positions.
Tensor ref_index_put(const Tensor& x, const TensorList& indices, const Tensor& v, bool accumulate) {
  const auto [from, shape] = ref_advanced(x, indices);
  const Values vv = values(v.expand(shape).contiguous());
  Values out = values(x);
  for (size_t n = 0; n < from.size(); ++n) {
    out[at(from[n])] = accumulate ? out[at(from[n])] + vv[n] : vv[n];
  }
  return from_values(out, x.sizes());
}

// A scalar that keeps integer rows integral: f for float tensors, i for the others.
Scalar pick(const Tensor& t, double f, int64_t i) { return t.is_floating_point() ? Scalar(f) : Scalar(i); }

}  // namespace

void add_index_rows(std::vector<OpRow>& rows) {
  // --- one_hot ------------------------------------------------------------------------------
  for (const int64_t classes : {int64_t{6}, int64_t{-1}}) {
    OpRow r;
    r.name = classes < 0 ? "one_hot, classes inferred" : "one_hot 6 classes";
    r.dtypes = {DType::Int64, DType::Int32};
    // Class indices in [0, 5) (so inferring gives 5 or fewer), as [4, 3], 1-d and 0-d.
    auto sample = [](const Shape& shape, uint64_t seed) {
      return Sample{shape_str(shape),
                    [=](DType t, Device d) { return TensorList{class_targets(shape, 5, seed, 0, -100, d).to(t)}; }};
    };
    r.samples = {sample({4, 3}, 1400), sample({7}, 1401), sample({}, 1402)};
    r.op = [classes](const TensorList& x) { return TensorList{one_hot(x[0], classes)}; };
    r.reference = [classes](const TensorList& x) {
      const Values v = values(x[0]);
      int64_t c = classes;
      if (c < 0) c = static_cast<int64_t>(*std::max_element(v.begin(), v.end())) + 1;
      Shape os = x[0].sizes();
      os.push_back(c);
      Values out;
      for (double e : v)
        for (int64_t k = 0; k < c; ++k) out.push_back(static_cast<int64_t>(e) == k ? 1.0 : 0.0);
      return TensorList{from_values(out, os)};
    };
    r.exact_outputs = {0};
    r.out_dtype = [](DType) { return DType::Int64; };
    if (classes > 0) {
      r.errors = {
          {"an index past the classes",
           [] {
             one_hot(tensor<int64_t>({0, 3}, {2}), 3);
           },
           {"one_hot", "index 3", "3 classes"}},
          {"a negative index",
           [] {
             one_hot(tensor<int64_t>({-1, 0}, {2}));
           },
           {"one_hot", "index -1"}},
          {"float indices", [] { one_hot(zeros({2})); }, {"one_hot", "float32", "[2]"}},
          {"classes inferred from nothing", [] { one_hot(zeros({0}, DType::Int64)); }, {"one_hot", "empty"}},
      };
    }
    rows.push_back(std::move(r));
  }

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

  // --- take and take_along_dim ----------------------------------------------------------------
  {
    OpRow r;
    r.name = "take";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"3x5x7, index 4x6",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1600), make_index({4, 6}, 105, 0, 7, d)};
         }},
        {"non-contiguous 5x9, 1-d index",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({5, 9}, t, d, 1601)), idx1d({44, 0, 44, 3}, d)};
         }},
        {"0-d input, 0-d index",
         [](DType t, Device d) {
           return TensorList{rnd({}, t, d, 1602), from_values({0}, {}, DType::Int64).to(d)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{take(x[0], x[1])}; };
    r.reference = [](const TensorList& x) {
      const Values xv = values(x[0]), iv = values(x[1]);
      Values out;
      for (double i : iv) out.push_back(xv[at(static_cast<int64_t>(i))]);
      return TensorList{from_values(out, x[1].sizes())};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"index out of range",
         [] {
           take(zeros({3, 4}), idx1d({0, 12}, Device::cpu()));
         },
         {"take", "index 12", "12"}},
        {"negative index",
         [] {
           take(zeros({3, 4}), idx1d({-1}, Device::cpu()));
         },
         {"take", "index -1"}},
        {"float index",
         [] {
           take(zeros({3, 4}), zeros({2}));
         },
         {"take", "float32", "[2]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // Along the last dim, the other dims broadcast ([3, 1, 7] with [1, 5, 4] gives [3, 5, 4]);
    // output 1 without a dim (x and indices read as 1-d).
    OpRow r;
    r.name = "take_along_dim";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"5x7, indices 5x4",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 1610), make_index({5, 4}, 7, 1, 8, d)};
         }},
        {"3x1x7 with indices 1x5x4, broadcast",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 1, 7}, t, d, 1611)), make_index({1, 5, 4}, 7, 2, 9, d)};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{take_along_dim(x[0], x[1], -1), take_along_dim(x[0], x[1])}; };
    r.reference = [](const TensorList& x) {
      const Tensor& a = x[0];
      const Tensor& i = x[1];
      const int64_t last = a.dim() - 1;
      Shape os(at(a.dim()));
      for (int64_t k = 0; k < last; ++k) os[at(k)] = std::max(a.size(k), i.size(k));
      os[at(last)] = i.size(last);
      const Values iv = values(i), av = values(a);
      Values along, flat;
      for (int64_t n = 0; n < shape_numel(os); ++n) {
        Shape p = unravel(n, os), pi = p, pa = p;
        for (int64_t k = 0; k < last; ++k) {
          if (i.size(k) == 1) pi[at(k)] = 0;
          if (a.size(k) == 1) pa[at(k)] = 0;
        }
        pa[at(last)] = static_cast<int64_t>(iv[at(ravel(pi, i.sizes()))]);
        along.push_back(av[at(ravel(pa, a.sizes()))]);
      }
      for (double k : iv) flat.push_back(av[at(static_cast<int64_t>(k))]);
      return TensorList{from_values(along, os), from_values(flat, {static_cast<int64_t>(flat.size())})};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"dim counts differ",
         [] {
           take_along_dim(zeros({3, 4}), zeros({4}, DType::Int64), 1);
         },
         {"take_along_dim", "[3, 4]", "[4]"}},
        {"shapes do not broadcast",
         [] {
           take_along_dim(zeros({3, 4}), zeros({2, 1}, DType::Int64), 1);
         },
         {"take_along_dim", "[3, 1]", "[2, 1]"}},
        {"index out of range",
         [] {
           take_along_dim(zeros({3, 4}), from_values({5}, {1, 1}, DType::Int64), 1);
         },
         {"take_along_dim", "index 5", "size 4"}},
    };
    rows.push_back(std::move(r));
  }

  // --- index_add and index_fill -----------------------------------------------------------------
  {
    // Repeated indices add twice; alpha -0.5 (floats) or 2 (integers).
    OpRow r;
    r.name = "index_add_dim1";
    r.dtypes = kAllNumeric;
    r.samples = {
        {"3x5x7, repeated index",
         [](DType t, Device d) {
           return TensorList{rnd({3, 5, 7}, t, d, 1620), idx1d({4, 0, 4, 2}, d), rnd({3, 4, 7}, t, d, 1621)};
         }},
        {"non-contiguous 5x6, int32 index",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({5, 6}, t, d, 1622)), idx1d({5, 1}, d, DType::Int32),
                             noncontig(rnd({5, 2}, t, d, 1623))};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{index_add(x[0], 1, x[1], x[2], pick(x[0], -0.5, 2))}; };
    r.reference = [](const TensorList& x) {
      const double alpha = x[0].is_floating_point() ? -0.5 : 2.0;
      const Values sv = values(x[2]);
      const Tensor& src = x[2];
      return TensorList{ref_slices(x[0], 1, x[1], [&](double old, const Shape& p, int64_t k) {
        Shape q = p;
        q[1] = k;
        return old + alpha * sv[at(ravel(q, src.sizes()))];
      })};
    };
    r.differentiable = {0, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"source of the wrong shape",
         [] {
           index_add(zeros({3, 4}), 1, idx1d({0, 1}, Device::cpu()), zeros({3, 3}));
         },
         {"index_add", "[3, 3]", "[3, 4]", "2"}},
        {"float alpha with an integer input",
         [] { index_add(zeros({3}, DType::Int64), 0, idx1d({0}, Device::cpu()), zeros({1}, DType::Int64), 0.5); },
         {"index_add", "alpha", "int64"}},
        {"index out of range",
         [] {
           index_add(zeros({3, 4}), 0, idx1d({3}, Device::cpu()), zeros({1, 4}));
         },
         {"index_add", "index 3", "size 3"}},
        {"2-d index",
         [] {
           index_add(zeros({3, 4}), 0, zeros({1, 1}, DType::Int64), zeros({1, 4}));
         },
         {"index_add", "[1, 1]"}},
    };
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "index_fill_dim0";
    r.dtypes = numeric_and_bool();
    r.samples = {
        {"5x7, repeated index",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 1630), idx1d({3, 0, 3}, d)};
         }},
        {"transposed 7x5, 0-d index",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 1631).t(), from_values({6}, {}, DType::Int64).to(d)};
         }},
    };
    r.op = [](const TensorList& x) {
      const Scalar v = x[0].dtype() == DType::Bool ? Scalar(true) : pick(x[0], 2.5, 4);
      return TensorList{index_fill(x[0], 0, x[1], v)};
    };
    r.reference = [](const TensorList& x) {
      const double v = x[0].dtype() == DType::Bool ? 1.0 : (x[0].is_floating_point() ? 2.5 : 4.0);
      return TensorList{ref_slices(x[0], 0, x[1], [v](double, const Shape&, int64_t) { return v; })};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"value past the dtype",
         [] { index_fill(zeros({3}, DType::UInt8), 0, idx1d({0}, Device::cpu()), 300); },
         {"index_fill", "300", "uint8"}},
        {"index out of range",
         [] {
           index_fill(zeros({3, 4}), 1, idx1d({4}, Device::cpu()), 1.0);
         },
         {"index_fill", "index 4", "size 4"}},
    };
    rows.push_back(std::move(r));
  }

  // --- scatter ----------------------------------------------------------------------------------
  {
    // Each position written at most once (distinct indices along dim); src larger than index.
    OpRow r;
    r.name = "scatter_dim1";
    r.dtypes = numeric_and_bool();
    r.samples = {
        {"5x7, index 5x4, src 5x6",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 1640), distinct_index({5, 4}, 7, 1, 10, d), rnd({5, 6}, t, d, 1641)};
         }},
        {"non-contiguous 3x5x7, index 2x5x3",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({3, 5, 7}, t, d, 1642)), distinct_index({2, 5, 3}, 5, 1, 11, d),
                             noncontig(rnd({3, 5, 3}, t, d, 1643))};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{scatter(x[0], 1, x[1], x[2])}; };
    r.reference = [](const TensorList& x) {
      Values out = values(x[0]);
      const Values iv = values(x[1]), sv = values(x[2]);
      for (int64_t n = 0; n < x[1].numel(); ++n) {
        Shape p = unravel(n, x[1].sizes());
        const double v = sv[at(ravel(p, x[2].sizes()))];
        p[1] = static_cast<int64_t>(iv[at(n)]);
        out[at(ravel(p, x[0].sizes()))] = v;
      }
      return TensorList{from_values(out, x[0].sizes())};
    };
    r.differentiable = {0, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"a position written twice",
         [] {
           scatter(zeros({3, 4}), 1, from_values({2, 2}, {1, 2}, DType::Int64), ones({1, 2}));
         },
         {"scatter", "more than once", "[1, 2]", "[3, 4]"}},
        {"src dtype differs",
         [] {
           scatter(zeros({3, 4}), 0, zeros({1, 2}, DType::Int64), zeros({1, 2}, DType::Float64));
         },
         {"scatter", "float64", "float32"}},
        {"index out of range",
         [] {
           scatter(zeros({3, 4}), 0, from_values({3}, {1, 1}, DType::Int64), ones({1, 1}));
         },
         {"scatter", "index 3", "size 3"}},
    };
    rows.push_back(std::move(r));
  }
  {
    // One value everywhere index points: repeats allowed.
    OpRow r;
    r.name = "scatter_value_dim0";
    r.dtypes = kAllNumeric;
    r.samples = {{"5x7, index 6x7",
                  [](DType t, Device d) {
                    return TensorList{rnd({5, 7}, t, d, 1650), make_index({6, 7}, 5, 0, 12, d)};
                  }},
                 {"non-contiguous 5x9, index 3x4", [](DType t, Device d) {
                    return TensorList{noncontig(rnd({5, 9}, t, d, 1651)), make_index({3, 4}, 5, 0, 13, d)};
                  }}};
    r.op = [](const TensorList& x) { return TensorList{scatter(x[0], 0, x[1], pick(x[0], -1.5, 7))}; };
    r.reference = [](const TensorList& x) {
      const double v = x[0].is_floating_point() ? -1.5 : 7.0;
      Values out = values(x[0]);
      const Values iv = values(x[1]);
      for (int64_t n = 0; n < x[1].numel(); ++n) {
        Shape p = unravel(n, x[1].sizes());
        p[0] = static_cast<int64_t>(iv[at(n)]);
        out[at(ravel(p, x[0].sizes()))] = v;
      }
      return TensorList{from_values(out, x[0].sizes())};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {{"value past the dtype",
                 [] { scatter(zeros({3}, DType::Int32), 0, idx1d({0}, Device::cpu()), 1e10); },
                 {"scatter", "int32"}}};
    rows.push_back(std::move(r));
  }

  // --- index_copy -------------------------------------------------------------------------------
  {
    OpRow r;
    r.name = "index_copy_dim1";
    r.dtypes = numeric_and_bool();
    r.samples = {
        {"5x7, index [4, 0, 6]",
         [](DType t, Device d) {
           return TensorList{rnd({5, 7}, t, d, 1660), idx1d({4, 0, 6}, d), rnd({5, 3}, t, d, 1661)};
         }},
        {"non-contiguous 4x3, 0-d int32 index",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({4, 3}, t, d, 1662)), from_values({2}, {}, DType::Int32).to(d),
                             noncontig(rnd({4, 1}, t, d, 1663))};
         }},
    };
    r.op = [](const TensorList& x) { return TensorList{index_copy(x[0], 1, x[1], x[2])}; };
    r.reference = [](const TensorList& x) {
      const Values sv = values(x[2]);
      const Tensor& src = x[2];
      return TensorList{ref_slices(x[0], 1, x[1], [&](double, const Shape& p, int64_t k) {
        Shape q = p;
        q[1] = k;
        return sv[at(ravel(q, src.sizes()))];
      })};
    };
    r.differentiable = {0, 2};
    r.out_dtype = same_dtype;
    r.errors = {
        {"a slice named twice",
         [] {
           index_copy(zeros({3, 4}), 1, idx1d({2, 2}, Device::cpu()), ones({3, 2}));
         },
         {"index_copy", "more than once"}},
        {"source of the wrong shape",
         [] {
           index_copy(zeros({3, 4}), 0, idx1d({0}, Device::cpu()), zeros({2, 4}));
         },
         {"index_copy", "[2, 4]", "[3, 4]"}},
        {"index out of range",
         [] {
           index_copy(zeros({3, 4}), 1, idx1d({4}, Device::cpu()), zeros({3, 1}));
         },
         {"index_copy", "index 4", "size 4"}},
    };
    rows.push_back(std::move(r));
  }

  // --- advanced_index and index_put --------------------------------------------------------------
  struct Subscript {
    const char* name;
    Shape shape;
    std::function<TensorList(Device)> indices;  // undefined tensors are whole dims
  };
  const std::vector<Subscript> subscripts = {
      // Dims 1 and 2, adjacent: the broadcast [2, 3] stays in their place. Position (4, 0) of the
      // last two dims is picked twice (4 and -1, -6 and 0), so gradients add up.
      {"[:, i, j] adjacent",
       {4, 5, 6},
       [](Device d) {
         return TensorList{Tensor(), from_values({-5, 4, 0, 2, -1, 3}, {2, 3}, DType::Int64).to(d),
                           from_values({5, -6, 1}, {3}, DType::Int32).to(d)};
       }},
      // Dims 0 and 2, apart: the broadcast [2, 3] goes first.
      {"[i, :, j] apart",
       {4, 5, 6},
       [](Device d) {
         return TensorList{from_values({3, -4}, {2, 1}, DType::Int64).to(d), Tensor(),
                           from_values({0, 5, -1}, {3}, DType::Int64).to(d)};
       }},
      // A bool mask over the first two dims: its true elements in row-major order.
      {"[mask] over 3x4 of 3x4x2",
       {3, 4, 2},
       [](Device d) {
         return TensorList{from_values({1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1}, {3, 4}, DType::Bool).to(d)};
       }},
      // A bool mask over dim 1 beside an int index over dim 0.
      {"[i, mask]",
       {3, 4},
       [](Device d) {
         return TensorList{from_values({2, 0}, {2}, DType::Int64).to(d),
                           from_values({0, 1, 0, 1}, {4}, DType::Bool).to(d)};
       }},
  };
  for (const Subscript& sub : subscripts) {
    OpRow r;
    r.name = std::string("advanced_index ") + sub.name;
    r.dtypes = numeric_and_bool();
    const Shape shape = sub.shape;
    const auto indices = sub.indices;
    r.samples = {
        {shape_str(shape), [shape](DType t, Device d) { return TensorList{rnd(shape, t, d, 1670)}; }},
        {"non-contiguous", [shape](DType t, Device d) { return TensorList{noncontig(rnd(shape, t, d, 1671))}; }}};
    r.op = [indices](const TensorList& x) { return TensorList{advanced_index(x[0], indices(x[0].device()))}; };
    r.reference = [indices](const TensorList& x) {
      const auto [from, out_shape] = ref_advanced(x[0], indices(Device::cpu()));
      const Values xv = values(x[0]);
      Values out;
      for (const int64_t f : from) out.push_back(xv[at(f)]);
      return TensorList{from_values(out, out_shape)};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "advanced_index errors";
    r.dtypes = {DType::Float64};
    r.samples = {{"3x4, [i]", [](DType t, Device d) { return TensorList{rnd({3, 4}, t, d, 1672)}; }}};
    r.op = [](const TensorList& x) {
      return TensorList{advanced_index(x[0], {from_values({-3, 2}, {2}, DType::Int64).to(x[0].device())})};
    };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_index_select(x[0], 0, from_values({0, 2}, {2}, DType::Int64))};
    };
    r.differentiable = {0};
    r.out_dtype = same_dtype;
    r.errors = {
        {"an index past the dim",
         [] {
           advanced_index(zeros({3, 5}), {Tensor(), idx1d({0, -6}, Device::cpu())});
         },
         {"advanced_index", "index -6", "dim 1", "size 5", "indices[1]"}},
        {"too many indices",
         [] {
           advanced_index(zeros({3}), {idx1d({0}, Device::cpu()), idx1d({0}, Device::cpu())});
         },
         {"advanced_index", "too many indices", "[3]"}},
        {"indices that do not broadcast",
         [] {
           advanced_index(zeros({3, 4}), {idx1d({0, 1}, Device::cpu()), idx1d({0, 1, 2}, Device::cpu())});
         },
         {"advanced_index", "[2]", "[3]"}},
        {"a float index", [] { advanced_index(zeros({3}), {zeros({1})}); }, {"advanced_index", "float32", "int64"}},
        {"a mask of the wrong shape",
         [] {
           advanced_index(zeros({3, 4}), {zeros({3, 3}, DType::Bool)});
         },
         {"advanced_index", "[3, 3]", "[3, 4]"}},
        {"no index tensor",
         [] {
           advanced_index(zeros({3, 4}), {Tensor()});
         },
         {"advanced_index", "at least one"}},
    };
    rows.push_back(std::move(r));
  }
  struct Put {
    const char* name;
    Shape shape, values;
    bool accumulate;
    std::function<TensorList(Device)> indices;
  };
  const std::vector<Put> puts = {
      // Rows 0 and 3 named twice: their values add up.
      {"accumulate [i]",
       {4, 5},
       {6, 5},
       true,
       [](Device d) {
         return TensorList{from_values({0, 3, -1, 0, 2, 3}, {6}, DType::Int64).to(d)};
       }},
      // Dims 0 and 2 apart, the same position twice (2 and -1, 4 and -1), values [4] broadcast.
      {"accumulate [i, :, j], broadcast values",
       {3, 4, 5},
       {4},
       true,
       [](Device d) {
         return TensorList{from_values({2, -1}, {2}, DType::Int64).to(d), Tensor(),
                           from_values({4, -1}, {2}, DType::Int32).to(d)};
       }},
      // Six distinct positions from [2, 1] and [3] broadcast.
      {"[i, j]",
       {4, 5},
       {2, 3},
       false,
       [](Device d) {
         return TensorList{from_values({0, 2}, {2, 1}, DType::Int64).to(d),
                           from_values({1, 3, -1}, {3}, DType::Int64).to(d)};
       }},
      // One value: positions named twice take the same value.
      {"[i, j] = one value",
       {4, 5},
       {},
       false,
       [](Device d) {
         return TensorList{from_values({1, 1, -3}, {3}, DType::Int64).to(d),
                           from_values({0, 0, 2}, {3}, DType::Int64).to(d)};
       }},
      {"[mask] = values",
       {3, 4},
       {5},
       false,
       [](Device d) {
         return TensorList{from_values({1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 1}, {3, 4}, DType::Bool).to(d)};
       }},
  };
  for (const Put& put : puts) {
    OpRow r;
    r.name = std::string("index_put ") + put.name;
    r.dtypes = put.accumulate ? kAllNumeric : numeric_and_bool();
    const Shape shape = put.shape, vshape = put.values;
    const auto indices = put.indices;
    const bool accumulate = put.accumulate;
    r.samples = {{shape_str(shape) + ", values " + shape_str(vshape), [=](DType t, Device d) {
                    return TensorList{rnd(shape, t, d, 1680), rnd(vshape, t, d, 1681)};
                  }}};
    r.op = [indices, accumulate](const TensorList& x) {
      return TensorList{index_put(x[0], indices(x[0].device()), x[1], accumulate)};
    };
    r.reference = [indices, accumulate](const TensorList& x) {
      return TensorList{ref_index_put(x[0], indices(Device::cpu()), x[1], accumulate)};
    };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    if (!accumulate && vshape.size() == 2) {
      r.errors = {
          {"a position named twice",
           [] {
             index_put(zeros({3, 4}), {idx1d({1, 1}, Device::cpu())}, ones({2, 4}));
           },
           {"index_put", "more than once"}},
          {"values of another dtype",
           [] {
             index_put(zeros({3, 4}), {idx1d({1}, Device::cpu())}, ones({1, 4}, DType::Float64));
           },
           {"index_put", "float64", "float32"}},
          {"values that do not broadcast",
           [] {
             index_put(zeros({3, 4}), {idx1d({1, 2}, Device::cpu())}, ones({3, 4}));
           },
           {"index_put", "[3, 4]", "[2, 4]"}},
          {"an index past the dim",
           [] {
             index_put(zeros({3, 4}), {idx1d({3}, Device::cpu())}, ones({4}));
           },
           {"index_put", "index 3", "dim 0", "size 3"}},
      };
    }
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
