// Op table rows of the dropout family, in training: the reference redraws the documented Philox
// mask (element i: word (i & 1) * 2 of block i >> 1, kept iff u >= p), so float64 matches exactly;
// channel dropout (dropout1d/2d/3d) draws one such element per channel, and alpha dropout keeps or
// drops with the same draws.
#include <cmath>
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

// Channel dropout: x [N, C, *] (or [C, *]) with `spatial` trailing dims; channel i (row-major over
// the leading dims) keeps or drops with the draw of element i.
Tensor ref_feature_dropout(const Tensor& x, double p, int64_t spatial) {
  const Shape& s = x.sizes();
  int64_t inner = 1;
  for (size_t d = s.size() - static_cast<size_t>(spatial); d < s.size(); ++d) inner *= s[d];
  Values xv = values(x), out;
  for (size_t i = 0; i < xv.size(); ++i) {
    const uint64_t channel = static_cast<uint64_t>(i) / static_cast<uint64_t>(inner);
    Philox4 blk = philox_block(kSeed, 0, channel >> 1);
    const bool keep = static_cast<double>(philox_uniform(blk.v[(channel & 1) * 2])) >= p;
    out.push_back(keep ? xv[i] * (1.0 / (1.0 - p)) : 0.0);
  }
  return from_values(out, s);
}

// Alpha dropout: element i (or, with `inner` > 1, channel i / inner) keeps a (x + alpha p) or
// becomes -a alpha (1 - p), with its draw as dropout's.
Tensor ref_alpha_dropout(const Tensor& x, double p, int64_t inner) {
  const double alpha = 1.7580993408473766, a = 1.0 / std::sqrt((alpha * alpha * p + 1.0) * (1.0 - p));
  Values xv = values(x), out;
  for (size_t i = 0; i < xv.size(); ++i) {
    const uint64_t k = static_cast<uint64_t>(i) / static_cast<uint64_t>(inner);
    Philox4 blk = philox_block(kSeed, 0, k >> 1);
    const bool keep = static_cast<double>(philox_uniform(blk.v[(k & 1) * 2])) >= p;
    out.push_back(keep ? a * (xv[i] + alpha * p) : -a * alpha * (1.0 - p));
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
  // p = 0.5: the scale 2 is exact in every float type, as the mask (in x's dtype) holds it.
  struct Feature {
    const char* name;
    Tensor (*fn)(const Tensor&, double, bool, const std::optional<Generator>&);
    int64_t spatial;
    Shape batched, unbatched;
  };
  for (const Feature& f : {Feature{"dropout1d", &dropout1d, 1, {4, 9, 5}, {9, 5}},
                           Feature{"dropout2d", &dropout2d, 2, {3, 8, 4, 3}, {8, 4, 3}},
                           Feature{"dropout3d", &dropout3d, 3, {2, 6, 2, 3, 2}, {6, 2, 3, 2}}}) {
    OpRow r;
    r.name = f.name;
    r.dtypes = kFloatTypes;
    r.random = true;
    const Shape batched = f.batched, unbatched = f.unbatched;
    r.samples = {
        {shape_str(batched), [batched](DType t, Device d) { return TensorList{rnd(batched, t, d, 81)}; }},
        {"unbatched " + shape_str(unbatched),
         [unbatched](DType t, Device d) { return TensorList{rnd(unbatched, t, d, 82)}; }},
        {"non-contiguous", [batched](DType t, Device d) { return TensorList{noncontig(rnd(batched, t, d, 83))}; }},
    };
    auto fn = f.fn;
    const int64_t spatial = f.spatial;
    r.op = [fn](const TensorList& x) { return TensorList{fn(x[0], 0.5, true, std::nullopt)}; };
    r.reference = [spatial](const TensorList& x) { return TensorList{ref_feature_dropout(x[0], 0.5, spatial)}; };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    const std::string op = f.name;
    r.errors = {
        {"input of another rank", [fn] { fn(zeros({4}), 0.5, true, std::nullopt); }, {op, "[4]"}},
        {"p above 1", [fn, batched] { fn(zeros(batched), 1.5, true, std::nullopt); }, {op, "p", num(1.5)}},
    };
    rows.push_back(std::move(r));
  }
  for (const bool feature : {false, true}) {
    // p = 0.3: a, a alpha p and a alpha (1 - p) are inexact in every dtype, so the rows see the
    // affine map's rounding.
    OpRow r;
    r.name = feature ? "feature_alpha_dropout" : "alpha_dropout";
    r.dtypes = kFloatTypes;
    r.random = true;
    r.samples = {
        {"[3, 4, 5, 2]",
         [](DType t, Device d) {
           return TensorList{rnd({3, 4, 5, 2}, t, d, 84)};
         }},
        {"non-contiguous [4, 37]",
         [](DType t, Device d) {
           return TensorList{noncontig(rnd({4, 37}, t, d, 85))};
         }},
    };
    r.op = [feature](const TensorList& x) {
      return TensorList{feature ? feature_alpha_dropout(x[0], 0.3) : alpha_dropout(x[0], 0.3)};
    };
    r.reference = [feature](const TensorList& x) {
      int64_t inner = 1;
      for (int64_t d = 2; feature && d < x[0].dim(); ++d) inner *= x[0].size(d);
      return TensorList{ref_alpha_dropout(x[0], 0.3, inner)};
    };
    r.differentiable = {0};
    r.out_dtype = [](DType t) { return t; };
    r.errors = {
        {"p above 1", [] { alpha_dropout(zeros({4}), 1.5); }, {"alpha_dropout", "p", num(1.5), "[4]"}},
        {"integer input", [] { alpha_dropout(zeros({4}, DType::Int64), 0.5); }, {"alpha_dropout", "int64"}},
        {"a 1-d input to the feature form",
         [] { feature_alpha_dropout(zeros({4}), 0.5); },
         {"feature_alpha_dropout", "[4]"}},
    };
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
