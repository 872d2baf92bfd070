// Op table rows: softmax, log_softmax, layer_norm, batch_norm (train and eval), cross_entropy,
// mse_loss, embedding and dropout. References are plain float64 loops over row-major values. Class
// targets and embedding indices are int64 inputs that keep their dtype; dropout's reference redraws
// the documented Philox mask (element i: word (i & 1) * 2 of block i >> 1, kept iff u >= p), so
// float64 matches exactly. Running-stat updates of batch_norm are checked in tests/core/test_nn_ops.cpp.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/philox.h"
#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

using Values = std::vector<double>;

constexpr uint64_t kSeed = 20261123;  // the runner seeds this before op and reference of random rows

int64_t wrap(int64_t d, size_t ndim) { return d < 0 ? d + static_cast<int64_t>(ndim) : d; }
size_t at(int64_t i) { return static_cast<size_t>(i); }

// Class indices in [0, classes) from a small LCG; every `ignore_every`-th one (1-based; 0 = none)
// is `ignore`.
Tensor class_targets(const Shape& shape, int64_t classes, uint64_t seed, int64_t ignore_every, int64_t ignore,
                     Device d) {
  Values v;
  uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    s = s * 2862933555777941757ull + 3037000493ull;
    int64_t t = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(classes));
    if (ignore_every > 0 && (i + 1) % ignore_every == 0) t = ignore;
    v.push_back(static_cast<double>(t));
  }
  return from_values(v, shape, DType::Int64).to(d);
}

// --- references ------------------------------------------------------------------------------------

Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  const Shape& s = x.sizes();
  if (s.empty()) return from_values({log ? 0.0 : 1.0}, {});
  const size_t d = at(wrap(dim, s.size()));
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

// Normalizes contiguous groups of `n` values (the trailing dims); w and b may be undefined.
Tensor ref_layer_norm(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps) {
  Values xv = values(x), out(xv.size());
  Values wv = w.defined() ? values(w) : Values(at(n), 1.0);
  Values bv = b.defined() ? values(b) : Values(at(n), 0.0);
  for (size_t r = 0; r < xv.size() / at(n); ++r) {
    double m = 0, var = 0;
    for (size_t j = 0; j < at(n); ++j) m += xv[r * at(n) + j];
    m /= static_cast<double>(n);
    for (size_t j = 0; j < at(n); ++j) var += (xv[r * at(n) + j] - m) * (xv[r * at(n) + j] - m);
    var /= static_cast<double>(n);
    for (size_t j = 0; j < at(n); ++j)
      out[r * at(n) + j] = (xv[r * at(n) + j] - m) / std::sqrt(var + eps) * wv[j] + bv[j];
  }
  return from_values(out, x.sizes());
}

// Training: biased batch statistics per channel (dim 1); eval: rm and rv.
Tensor ref_batch_norm(const Tensor& x, const Tensor& rm, const Tensor& rv, const Tensor& w, const Tensor& b,
                      bool training, double eps) {
  const Shape& s = x.sizes();
  const int64_t c_n = s[1];
  Values xv = values(x), out(xv.size());
  std::vector<std::vector<size_t>> members(at(c_n));
  for (int64_t i = 0; i < x.numel(); ++i) members[at(unravel(i, s)[1])].push_back(at(i));
  for (int64_t c = 0; c < c_n; ++c) {
    const auto& ms = members[at(c)];
    double m = 0, var = 0;
    if (training) {
      for (size_t i : ms) m += xv[i];
      m /= static_cast<double>(ms.size());
      for (size_t i : ms) var += (xv[i] - m) * (xv[i] - m);
      var /= static_cast<double>(ms.size());
    } else {
      m = values(rm)[at(c)];
      var = values(rv)[at(c)];
    }
    const double wc = w.defined() ? values(w)[at(c)] : 1.0, bc = b.defined() ? values(b)[at(c)] : 0.0;
    for (size_t i : ms) out[i] = (xv[i] - m) / std::sqrt(var + eps) * wc + bc;
  }
  return from_values(out, s);
}

// logits [N, C, ...] or [C]; target [N, ...] or 0-d. Loss per target element, then reduced.
Tensor ref_cross_entropy(const Tensor& logits, const Tensor& target, Reduction red, int64_t ignore, double eps) {
  Shape ls = logits.sizes();
  if (ls.size() == 1) ls.insert(ls.begin(), 1);
  const int64_t c_n = ls[1];
  Values lv = values(logits), tv = values(target), losses;
  Shape ts = ls;
  ts.erase(ts.begin() + 1);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < shape_numel(ts); ++r) {
    const int64_t t = static_cast<int64_t>(tv[at(r)]);
    if (t == ignore) {
      losses.push_back(0);
      continue;
    }
    Shape ti = unravel(r, ts);
    Values row;
    for (int64_t c = 0; c < c_n; ++c) {
      Shape li = ti;
      li.insert(li.begin() + 1, c);
      row.push_back(lv[at(ravel(li, ls))]);
    }
    double mx = *std::max_element(row.begin(), row.end()), se = 0, mean_x = 0;
    for (double v : row) {
      se += std::exp(v - mx);
      mean_x += v / static_cast<double>(c_n);
    }
    const double lse = mx + std::log(se);
    const double loss = (1 - eps) * (lse - row[at(t)]) + eps * (lse - mean_x);
    losses.push_back(loss);
    total += loss;
    ++count;
  }
  if (red == Reduction::None) return from_values(losses, target.sizes());
  return from_values({red == Reduction::Sum ? total : total / static_cast<double>(count)}, {});
}

Tensor ref_embedding(const Tensor& w, const Tensor& idx) {
  const int64_t dim = w.size(1);
  Values wv = values(w), iv = values(idx), out;
  for (double i : iv)
    for (int64_t j = 0; j < dim; ++j) out.push_back(wv[at(static_cast<int64_t>(i) * dim + j)]);
  Shape s = idx.sizes();
  s.push_back(dim);
  return from_values(out, s);
}

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

// The memory-bound bench of a row-wise op of a transformer on [n/1024, 1024] (n: --elements) in
// float32 and bfloat16: each element read once and written once. With `weight`, layer_norm over the
// rows with a float32 weight of ones and no bias, plus 2 x 4 x 1024 bytes of parameters (the formula
// of the runs in bench/RESULTS.md); its own timed call, since the row's op normalizes a fixed shape.
BenchCase row_bench(const std::string& name, const std::string& op, const std::string& args, bool weight) {
  BenchCase b;
  b.name = name;
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = op;
  b.args = args;
  b.setup = [weight](DType t, int64_t n) {
    const int64_t cols = 1024, rows = n / cols;
    BenchSetup s;
    s.shape = {rows, cols};
    s.inputs = {{s.shape, t}};
    s.bytes = 2 * static_cast<double>(element_size(t)) * static_cast<double>(rows * cols);
    if (weight) {
      s.inputs.push_back({{cols}, DType::Float32, BenchInput::Fill::Ones});
      s.bytes += 2 * 4 * cols;
    }
    return s;
  };
  if (weight) b.run = [](const TensorList& x) { return TensorList{layer_norm(x[0], {1024}, x[1], Tensor())}; };
  return b;
}

// --- rows ------------------------------------------------------------------------------------------

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

OpRow layer_norm_row(const std::string& name, const Shape& x_shape, const Shape& ns, bool affine, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {
      {shape_str(x_shape),
       [=](DType t, Device d) {
         TensorList in{rnd(x_shape, t, d, seed, 2.0)};
         if (affine) {
           in.push_back(rnd(ns, t, d, seed + 1));
           in.push_back(rnd(ns, t, d, seed + 2));
         }
         return in;
       }},
      {"non-contiguous " + shape_str(x_shape),
       [=](DType t, Device d) {
         // An offset mean: the two-pass variance must not lose the spread to cancellation.
         TensorList in{noncontig(rnd(x_shape, t, d, seed + 3) + 3.0)};
         if (affine) {
           in.push_back(rnd(ns, t, d, seed + 4));
           in.push_back(rnd(ns, t, d, seed + 5));
         }
         return in;
       }},
  };
  r.op = [ns, affine](const TensorList& x) {
    return TensorList{affine ? layer_norm(x[0], ns, x[1], x[2]) : layer_norm(x[0], ns)};
  };
  r.reference = [ns, affine](const TensorList& x) {
    return TensorList{ref_layer_norm(x[0], shape_numel(ns), affine ? x[1] : Tensor(), affine ? x[2] : Tensor(), 1e-5)};
  };
  r.differentiable = affine ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0};
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  r.errors = {
      {"weight shape",
       [] {
         layer_norm(zeros({2, 4}), {4}, zeros({5}));
       },
       {"layer_norm", "weight of shape [5] does not match normalized_shape [4]"}},
      {"bias shape",
       [] {
         layer_norm(zeros({2, 4}), {4}, zeros({4}), zeros({2, 2}));
       },
       {"layer_norm", "bias of shape [2, 2]", "normalized_shape [4]"}},
      {"input does not end with normalized_shape",
       [] {
         layer_norm(zeros({2, 3}), {4});
       },
       {"layer_norm", "[2, 3]", "[4]"}},
      {"more normalized dims than input dims",
       [] {
         layer_norm(zeros({4}), {2, 4});
       },
       {"layer_norm", "[4]", "[2, 4]"}},
      {"integer input",
       [] {
         layer_norm(zeros({2, 4}, DType::Int32), {4});
       },
       {"layer_norm", "int32"}},
  };
  return r;
}

std::vector<Sample> batch_norm_samples(bool with_running, uint64_t seed) {
  auto make = [with_running, seed](Shape s, int layout) {
    return [=](DType t, Device d) {
      Tensor x = rnd(s, t, d, seed, 1.5);
      if (layout == 1) x = x.contiguous(MemoryFormat::ChannelsLast);
      if (layout == 2) x = noncontig(x);
      const Shape c{s[1]};
      TensorList in{x};
      if (with_running) {
        in.push_back(rnd(c, t, d, seed + 1, 0.5));             // running_mean
        in.push_back(rnd_range(c, t, d, seed + 2, 0.5, 2.0));  // running_var > 0
      }
      in.push_back(rnd(c, t, d, seed + 3));  // weight
      in.push_back(rnd(c, t, d, seed + 4));  // bias
      return in;
    };
  };
  return {
      {"NCHW [3, 4, 2, 3]", make({3, 4, 2, 3}, 0)},
      {"channels-last [2, 3, 4, 5]", make({2, 3, 4, 5}, 1)},
      {"[N, C] [6, 5]", make({6, 5}, 0)},
      {"non-contiguous [4, 3, 5]", make({4, 3, 5}, 2)},
  };
}

std::vector<ErrorCase> batch_norm_errors() {
  return {
      {"1-d input",
       [] { batch_norm(zeros({5}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
       {"batch_norm", "[5]"}},
      {"weight size",
       [] {
         batch_norm(zeros({2, 3, 4}), Tensor(), Tensor(), ones({4}), Tensor(), true);
       },
       {"batch_norm", "weight of shape [4]", "3 channels", "[2, 3, 4]"}},
      {"running_mean size",
       [] {
         batch_norm(zeros({2, 3}), zeros({5}), ones({5}), Tensor(), Tensor(), true);
       },
       {"batch_norm", "running_mean of shape [5]", "3 channels"}},
      {"running_var size in eval",
       [] {
         batch_norm(zeros({2, 3}), zeros({3}), ones({2}), Tensor(), Tensor(), false);
       },
       {"batch_norm", "running_var of shape [2]", "3 channels"}},
      {"running stats missing in eval",
       [] {
         batch_norm(zeros({2, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false);
       },
       {"batch_norm", "running_mean", "eval", "[2, 3]"}},
      {"one value per channel in training",
       [] {
         batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true);
       },
       {"batch_norm", "more than 1 value per channel", "[1, 3]"}},
      {"integer input",
       [] {
         batch_norm(zeros({2, 3}, DType::Int64), Tensor(), Tensor(), Tensor(), Tensor(), true);
       },
       {"batch_norm", "int64"}},
  };
}

// A cross_entropy sample: logits of `shape` (class dim 1, or 0 for 1-d) and matching targets.
Sample ce_sample(const std::string& name, const Shape& shape, uint64_t seed, int64_t ignore_every, int64_t ignore,
                 bool strided = false) {
  return {name, [=](DType t, Device d) {
            Tensor logits = rnd(shape, t, d, seed, 2.0);
            if (strided) logits = noncontig(logits);
            Shape ts = shape;
            ts.erase(ts.begin() + (shape.size() == 1 ? 0 : 1));
            const int64_t classes = shape.size() == 1 ? shape[0] : shape[1];
            return TensorList{logits, class_targets(ts, classes, seed + 1, ignore_every, ignore, d)};
          }};
}

OpRow cross_entropy_row(const std::string& name, Reduction red, int64_t ignore, double eps, int64_t ignore_every) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {
      ce_sample("[5, 7]", {5, 7}, 41, ignore_every, ignore),
      ce_sample("4-d [2, 5, 3, 2]", {2, 5, 3, 2}, 42, ignore_every, ignore),
      ce_sample("non-contiguous [4, 6]", {4, 6}, 43, ignore_every, ignore, true),
  };
  // A single [C] row with a 0-d target cannot hold an ignored target without making the mean 0/0.
  if (ignore_every == 0) r.samples.push_back(ce_sample("1-d [6]", {6}, 44, 0, ignore));
  r.op = [red, ignore, eps](const TensorList& x) { return TensorList{cross_entropy(x[0], x[1], red, ignore, eps)}; };
  r.reference = [red, ignore, eps](const TensorList& x) {
    return TensorList{ref_cross_entropy(x[0], x[1], red, ignore, eps)};
  };
  r.differentiable = {0};
  r.out_dtype = [](DType t) { return t; };
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  r.errors = {
      {"target out of range",
       [] {
         cross_entropy(zeros({4, 10}), tensor<int64_t>({1, 12, 3, 4}), Reduction::Mean);
       },
       {"cross_entropy: target 12 is out of range for 10 classes"}},
      {"negative target that is not ignore_index",
       [] {
         cross_entropy(zeros({2, 10}), tensor<int64_t>({-1, 3}), Reduction::Mean);
       },
       {"cross_entropy", "target -1", "10 classes"}},
      {"target shape",
       [] {
         cross_entropy(zeros({4, 10}), tensor<int64_t>({1, 2, 3}));
       },
       {"cross_entropy", "[3]", "[4, 10]", "expected target [4]"}},
      {"4-d target shape",
       [] {
         cross_entropy(zeros({2, 5, 3, 2}), zeros({2, 5, 3}, DType::Int64));
       },
       {"cross_entropy", "[2, 5, 3]", "[2, 3, 2]"}},
      {"float target",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}));
       },
       {"cross_entropy", "float32", "[4]"}},
      {"integer logits",
       [] {
         cross_entropy(zeros({4, 10}, DType::Int64), zeros({4}, DType::Int64));
       },
       {"cross_entropy", "logits", "int64"}},
      {"label_smoothing above 1",
       [] {
         cross_entropy(zeros({4, 10}), zeros({4}, DType::Int64), Reduction::Mean, -100, 1.5);
       },
       {"cross_entropy", "label_smoothing", "1.5"}},
  };
  return r;
}

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

void add_nn_rows(std::vector<OpRow>& rows) {
  // --- softmax / log_softmax ---
  rows.push_back(softmax_row("softmax", false, -1,
                             {{"[4, 7]",
                               [](DType t, Device d) {
                                 return TensorList{rnd({4, 7}, t, d, 1, 3.0)};
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

  // --- layer_norm ---
  rows.push_back(layer_norm_row("layer_norm", {4, 7}, {7}, true, 11));
  rows.back().bench = {row_bench("layer_norm", "layer_norm", R"({"normalized_shape": [1024]})", true)};
  rows.push_back(layer_norm_row("layer_norm no affine", {3, 2, 6}, {6}, false, 14));
  rows.push_back(layer_norm_row("layer_norm last 2 dims", {3, 4, 5}, {4, 5}, true, 17));

  // --- batch_norm ---
  {
    OpRow r;
    r.name = "batch_norm_train";
    r.dtypes = kFloatTypes;
    r.samples = batch_norm_samples(false, 21);
    r.op = [](const TensorList& x) { return TensorList{batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true)}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true, 1e-5)};
    };
    r.differentiable = {0, 1, 2};
    r.out_dtype = [](DType t) { return t; };
    r.errors = batch_norm_errors();
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
  {
    OpRow r;
    r.name = "batch_norm_eval";
    r.dtypes = kFloatTypes;
    r.samples = batch_norm_samples(true, 31);
    r.op = [](const TensorList& x) { return TensorList{batch_norm(x[0], x[1], x[2], x[3], x[4], false)}; };
    r.reference = [](const TensorList& x) {
      return TensorList{ref_batch_norm(x[0], x[1], x[2], x[3], x[4], false, 1e-5)};
    };
    r.differentiable = {0, 3, 4};
    r.out_dtype = [](DType t) { return t; };
    r.errors = batch_norm_errors();
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }

  // --- cross_entropy ---
  rows.push_back(cross_entropy_row("cross_entropy", Reduction::Mean, -100, 0.0, 0));
  rows.push_back(cross_entropy_row("cross_entropy sum", Reduction::Sum, -100, 0.0, 0));
  rows.push_back(cross_entropy_row("cross_entropy none", Reduction::None, -100, 0.0, 0));
  rows.push_back(cross_entropy_row("cross_entropy ignore_index", Reduction::Mean, -100, 0.0, 3));
  // An ignore_index inside the class range: those targets are skipped, not treated as class 2.
  rows.push_back(cross_entropy_row("cross_entropy none ignore_index 2", Reduction::None, 2, 0.0, 4));
  rows.push_back(cross_entropy_row("cross_entropy label_smoothing", Reduction::Mean, -100, 0.1, 0));
  rows.push_back(cross_entropy_row("cross_entropy sum label_smoothing ignore_index", Reduction::Sum, -100, 0.1, 3));

  // --- mse_loss ---
  rows.push_back(mse_row("mse_loss", Reduction::Mean));
  rows.push_back(mse_row("mse_loss sum", Reduction::Sum));
  rows.push_back(mse_row("mse_loss none", Reduction::None));

  // --- embedding ---
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

  // --- dropout ---
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
