// Op table rows of the batch_norm family: training (biased batch statistics per channel) and eval
// (running statistics) on NCHW, channels-last, [N, C] and non-contiguous inputs. Running-stat
// updates are checked in tests/core/test_nn_ops.cpp.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

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

}  // namespace

void add_batch_norm_rows(std::vector<OpRow>& rows) {
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
}

}  // namespace kiln::test
