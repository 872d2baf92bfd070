// Op table rows of the norm family (group_norm and rms_norm, compositions of reductions and
// elementwise ops; instance_norm, batch norm of a reshaped input; local_response_norm): with and
// without their affine parameters, images and plain [N, C] inputs, instance norm from each sample's
// statistics and from running ones, against float64 loops; the non-contiguous samples have an
// offset mean, so a variance that loses the spread to cancellation fails.
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

// instance_norm of x [shape] from each sample's statistics: group norm with a group per channel.
OpRow instance_norm_row(const std::string& name, const Shape& shape, bool affine, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = norm_samples(shape, {shape[1]}, affine ? 2 : 0, seed);
  r.op = [affine](const TensorList& x) {
    return TensorList{affine ? instance_norm(x[0], Tensor(), Tensor(), x[1], x[2], true, 0.1, kEps)
                             : instance_norm(x[0])};
  };
  r.reference = [affine, c = shape[1]](const TensorList& x) {
    return TensorList{ref_group_norm(x[0], c, affine ? x[1] : Tensor(), affine ? x[2] : Tensor())};
  };
  r.differentiable = affine ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0};
  r.out_dtype = same_dtype;
  return r;
}

// instance_norm of x [2, 3, 4, 5] by running statistics (use_input_stats false): every sample's
// channel c is (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c].
OpRow instance_norm_running_row() {
  OpRow r;
  r.name = "instance_norm by running statistics";
  r.dtypes = kFloatTypes;
  r.samples = {{"[2, 3, 4, 5]", [](DType t, Device d) {
                  return TensorList{rnd({2, 3, 4, 5}, t, d, 51, 2.0), rnd({3}, t, d, 52), rnd({3}, t, d, 53),
                                    rnd({3}, t, d, 54), rnd_range({3}, t, d, 55, 0.5, 2.0)};
                }}};
  r.op = [](const TensorList& x) { return TensorList{instance_norm(x[0], x[3], x[4], x[1], x[2], false, 0.1, kEps)}; };
  r.reference = [](const TensorList& x) {
    const Values xv = values(x[0]), w = values(x[1]), b = values(x[2]), m = values(x[3]), v = values(x[4]);
    Values out(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = i / 20 % 3;
      out[i] = (xv[i] - m[c]) / std::sqrt(v[c] + kEps) * w[c] + b[c];
    }
    return TensorList{from_values(out, x[0].sizes())};
  };
  r.differentiable = {0, 1, 2};
  r.out_dtype = same_dtype;
  return r;
}

// local_response_norm of x [shape] over windows of `size` channels.
OpRow local_response_norm_row(const std::string& name, const Shape& shape, int64_t size, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = {{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed, 3.0)}; }},
               {"non-contiguous " + shape_str(shape),
                [=](DType t, Device d) { return TensorList{noncontig(rnd(shape, t, d, seed + 1, 3.0))}; }}};
  const double alpha = 0.2, beta = 0.75, k = 2.0;
  r.op = [=](const TensorList& x) { return TensorList{local_response_norm(x[0], size, alpha, beta, k)}; };
  r.reference = [=](const TensorList& x) {
    const Values xv = values(x[0]);
    const int64_t c = x[0].size(1), inner = x[0].numel() / (x[0].size(0) * c);
    Values out(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t ch = static_cast<int64_t>(i) / inner % c;
      double s = 0;
      for (int64_t j = ch - size / 2; j <= ch + (size - 1) / 2; ++j) {
        if (j < 0 || j >= c) continue;
        const double e = xv[i + at((j - ch) * inner)];
        s += e * e;
      }
      out[i] = xv[i] / std::pow(k + alpha * s / static_cast<double>(size), beta);
    }
    return TensorList{from_values(out, x[0].sizes())};
  };
  r.differentiable = {0};
  r.out_dtype = same_dtype;
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
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
  rows.push_back(instance_norm_row("instance_norm", {3, 4, 5, 2}, true, 61));
  rows.back().errors = {
      {"a 2-d input",
       [] {
         instance_norm(zeros({2, 3}));
       },
       {"instance_norm", "[N, C, *]", "[2, 3]"}},
      {"one position per channel",
       [] {
         instance_norm(zeros({2, 3, 1}));
       },
       {"instance_norm", "more than 1 position", "[2, 3, 1]"}},
      {"running_mean without running_var",
       [] {
         instance_norm(zeros({2, 3, 4}), zeros({3}));
       },
       {"instance_norm", "running_mean", "together"}},
      {"no running statistics without use_input_stats",
       [] {
         instance_norm(zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), false);
       },
       {"instance_norm", "required", "use_input_stats"}},
      {"a weight of another size",
       [] {
         instance_norm(zeros({2, 3, 4}), Tensor(), Tensor(), ones({4}));
       },
       {"instance_norm", "weight of shape [4]", "3 channels"}},
  };
  rows.push_back(instance_norm_row("instance_norm no affine, [N, C, L]", {2, 5, 7}, false, 65));
  rows.push_back(instance_norm_running_row());
  rows.push_back(local_response_norm_row("local_response_norm size 3, [N, C, L]", {2, 5, 4}, 3, 71));
  rows.back().errors = {
      {"a 2-d input",
       [] {
         local_response_norm(zeros({2, 3}), 2);
       },
       {"local_response_norm", "3 dims", "[2, 3]"}},
      {"size 0",
       [] {
         local_response_norm(zeros({2, 3, 4}), 0);
       },
       {"local_response_norm", "size", "0"}},
  };
  rows.push_back(local_response_norm_row("local_response_norm size 4, [N, C, H, W]", {2, 6, 3, 2}, 4, 75));
}

}  // namespace kiln::test
