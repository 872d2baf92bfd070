// Op table rows of the norm family (group_norm and rms_norm, compositions of reductions and
// elementwise ops): with and without their affine parameters, images and plain [N, C] inputs,
// against float64 loops; the non-contiguous samples have an offset mean, so a variance that loses
// the spread to cancellation fails.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

constexpr double kEps = 1e-5;

// Group norm of x [N, C, *] in float64: groups of C / g channels with all their positions.
Tensor ref_group_norm(const Tensor& x, int64_t g, const Tensor& w, const Tensor& b) {
  const Values xv = values(x);
  const int64_t n = x.size(0), c = x.size(1), inner = x.numel() / std::max<int64_t>(n * c, 1);
  const int64_t group = c / g * inner;  // contiguous in row-major order
  Values out(xv.size());
  const Values wv = w.defined() ? values(w) : Values(at(c), 1.0), bv = b.defined() ? values(b) : Values(at(c), 0.0);
  for (int64_t s = 0; s < n * g; ++s) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < group; ++j) m += xv[at(s * group + j)];
    m /= static_cast<double>(group);
    for (int64_t j = 0; j < group; ++j) var += (xv[at(s * group + j)] - m) * (xv[at(s * group + j)] - m);
    var /= static_cast<double>(group);
    for (int64_t j = 0; j < group; ++j) {
      const int64_t channel = (s % g) * (c / g) + j / inner;
      out[at(s * group + j)] = (xv[at(s * group + j)] - m) / std::sqrt(var + kEps) * wv[at(channel)] + bv[at(channel)];
    }
  }
  return from_values(out, x.sizes());
}

// RMS norm over contiguous groups of `n` values (the trailing dims).
Tensor ref_rms_norm(const Tensor& x, int64_t n, const Tensor& w) {
  const Values xv = values(x), wv = w.defined() ? values(w) : Values(at(n), 1.0);
  Values out(xv.size());
  for (size_t r = 0; r < xv.size() / at(n); ++r) {
    double ms = 0;
    for (size_t j = 0; j < at(n); ++j) ms += xv[r * at(n) + j] * xv[r * at(n) + j];
    ms /= static_cast<double>(n);
    for (size_t j = 0; j < at(n); ++j) out[r * at(n) + j] = xv[r * at(n) + j] / std::sqrt(ms + kEps) * wv[j];
  }
  return from_values(out, x.sizes());
}

// Samples of x [shape] with `params` parameters of shape param_shape: plain, and non-contiguous
// with an offset mean.
std::vector<Sample> norm_samples(const Shape& shape, const Shape& param_shape, int params, uint64_t seed) {
  auto make = [=](bool offset) {
    return [=](DType t, Device d) {
      TensorList in{offset ? noncontig(rnd(shape, t, d, seed + 3) + 3.0) : rnd(shape, t, d, seed, 2.0)};
      for (int p = 0; p < params; ++p) in.push_back(rnd(param_shape, t, d, seed + 1 + static_cast<uint64_t>(p)));
      return in;
    };
  };
  return {{shape_str(shape), make(false)}, {"non-contiguous " + shape_str(shape), make(true)}};
}

OpRow group_norm_row(const std::string& name, const Shape& shape, int64_t groups, bool affine, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = norm_samples(shape, {shape[1]}, affine ? 2 : 0, seed);
  r.op = [groups, affine](const TensorList& x) {
    return TensorList{affine ? group_norm(x[0], groups, x[1], x[2], kEps) : group_norm(x[0], groups)};
  };
  r.reference = [groups, affine](const TensorList& x) {
    return TensorList{ref_group_norm(x[0], groups, affine ? x[1] : Tensor(), affine ? x[2] : Tensor())};
  };
  r.differentiable = affine ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  return r;
}

OpRow rms_norm_row(const std::string& name, const Shape& shape, const Shape& ns, bool affine, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = norm_samples(shape, ns, affine ? 1 : 0, seed);
  r.op = [ns, affine](const TensorList& x) { return TensorList{rms_norm(x[0], ns, affine ? x[1] : Tensor(), kEps)}; };
  r.reference = [ns, affine](const TensorList& x) {
    return TensorList{ref_rms_norm(x[0], shape_numel(ns), affine ? x[1] : Tensor())};
  };
  r.differentiable = affine ? std::vector<size_t>{0, 1} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  return r;
}

}  // namespace

void add_norm_rows(std::vector<OpRow>& rows) {
  rows.push_back(group_norm_row("group_norm", {3, 6, 4, 5}, 3, true, 31));
  rows.back().errors = {
      {"channels that do not split into the groups",
       [] {
         group_norm(zeros({2, 6, 3}), 4);
       },
       {"group_norm", "6 channels", "num_groups = 4"}},
      {"a weight of another size",
       [] {
         group_norm(zeros({2, 6, 3}), 3, zeros({4}));
       },
       {"group_norm", "weight of shape [4]", "6 channels"}},
      {"a 1-d input", [] { group_norm(zeros({6}), 3); }, {"group_norm", "[N, C, *]", "[6]"}},
      {"an integer input",
       [] {
         group_norm(zeros({2, 6}, DType::Int64), 3);
       },
       {"group_norm", "int64"}},
      {"a negative eps",
       [] {
         group_norm(zeros({2, 6}), 3, Tensor(), Tensor(), -1.0);
       },
       {"group_norm", "eps", "-1"}},
  };
  rows.push_back(group_norm_row("group_norm no affine, [N, C]", {5, 8}, 4, false, 35));
  rows.push_back(group_norm_row("group_norm one group (layer norm of each sample)", {2, 3, 7}, 1, true, 39));
  rows.push_back(rms_norm_row("rms_norm", {4, 7}, {7}, true, 43));
  rows.back().errors = {
      {"an input that does not end with normalized_shape",
       [] {
         rms_norm(zeros({2, 3}), {4});
       },
       {"rms_norm", "[2, 3]", "[4]"}},
      {"a weight of another shape",
       [] {
         rms_norm(zeros({2, 4}), {4}, zeros({5}));
       },
       {"rms_norm", "weight of shape [5]", "normalized_shape [4]"}},
      {"NaN eps",
       [] {
         rms_norm(zeros({2, 4}), {4}, Tensor(), std::nan(""));
       },
       {"rms_norm", "eps", "nan"}},
  };
  rows.push_back(rms_norm_row("rms_norm no weight, last 2 dims", {3, 4, 5}, {4, 5}, false, 47));
}

}  // namespace kiln::test
