// Op table rows of the batch_norm family: training (biased batch statistics per channel) and eval
// (running statistics) on NCHW, channels-last, [N, C] and non-contiguous inputs, and training with
// the epilogues (a ReLU; a residual and a ReLU). Running-stat updates, and the epilogues' bits
// against the ops they replace, are checked in tests/core/test_nn_ops.cpp.
#include <algorithm>
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

// The epilogue's reference in float64: normalized + residual (when defined), then ReLU (when relu).
Tensor ref_epilogue(const Tensor& normalized, const Tensor& residual, bool relu) {
  Values v = values(normalized);
  if (residual.defined()) {
    const Values z = values(residual);
    for (size_t i = 0; i < v.size(); ++i) v[i] += z[i];
  }
  if (relu) {
    for (double& e : v) e = e > 0 ? e : 0.0;
  }
  return from_values(v, normalized.sizes());
}

// Training samples with a residual of x's shape after x (in x's layout, or channels-last beside an
// NCHW x): x, residual, weight, bias.
std::vector<Sample> batch_norm_residual_samples(uint64_t seed) {
  auto make = [seed](Shape s, int x_layout, int z_layout) {
    return [=](DType t, Device d) {
      const auto arrange = [](Tensor v, int layout) {
        if (layout == 1) return v.contiguous(MemoryFormat::ChannelsLast);
        if (layout == 2) return noncontig(v);
        return v;
      };
      const Shape c{s[1]};
      return TensorList{arrange(rnd(s, t, d, seed, 1.5), x_layout), arrange(rnd(s, t, d, seed + 5), z_layout),
                        rnd(c, t, d, seed + 3), rnd(c, t, d, seed + 4)};
    };
  };
  return {
      {"NCHW [3, 4, 2, 3]", make({3, 4, 2, 3}, 0, 0)},
      {"channels-last [2, 3, 4, 5]", make({2, 3, 4, 5}, 1, 1)},
      {"NCHW x, channels-last residual [2, 3, 4, 5]", make({2, 3, 4, 5}, 0, 1)},
      {"[N, C] [6, 5]", make({6, 5}, 0, 0)},
      {"non-contiguous [4, 3, 5]", make({4, 3, 5}, 2, 2)},
  };
}

std::vector<ErrorCase> batch_norm_residual_errors() {
  const BatchNormEpilogue wrong_shape{.residual = zeros({2, 3, 5}), .relu = true};
  const BatchNormEpilogue wrong_dtype{.residual = zeros({2, 3, 4}, DType::Float64), .relu = true};
  return {
      {"residual of another shape",
       [=] { batch_norm(zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, wrong_shape); },
       {"batch_norm", "residual", "[2, 3, 5]", "[2, 3, 4]"}},
      {"residual of another dtype",
       [=] { batch_norm(zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, wrong_dtype); },
       {"batch_norm", "residual", "float64", "float32"}},
  };
}

// The end of a ResNet block, forward and backward: relu(batch_norm(x) + z) in training over a
// channels-last [N, 64, 32, 32] activation (--elements in all; ResNet-18's first stage for 32x32
// images), weight and bias float32. `fused`: batch_norm with the epilogue; else batch_norm, add and
// relu one after another, the kernels it replaces. PyTorch's peer times its eager form, which is
// the three ops. Bytes count each pass's operands once: x and z read and y written forward; dy, y
// and x read and dx and dz written backward (the per-channel vectors are small beside them).
BenchCase batch_norm_add_relu_bench(bool fused) {
  BenchCase b;
  b.name = fused ? "batch_norm_add_relu_fwd_bwd" : "batch_norm_then_add_relu_fwd_bwd";
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = "batch_norm_add_relu_fwd_bwd";
  b.setup = [](DType t, int64_t n) {
    const int64_t c = 64, hw = 32, batch = std::max<int64_t>(1, n / (c * hw * hw));
    BenchSetup s;
    s.shape = {batch, c, hw, hw};
    const BenchInput act{s.shape, t, BenchInput::Fill::Normal, MemoryFormat::ChannelsLast};
    s.inputs = {act, act, {{c}, DType::Float32, BenchInput::Fill::Ones}, {{c}, DType::Float32}, act};
    s.bytes = 8.0 * static_cast<double>(element_size(t)) * static_cast<double>(batch * c * hw * hw);
    return s;
  };
  b.run = [fused](const TensorList& in) {
    Tensor x = in[0].detach().set_requires_grad(true), z = in[1].detach().set_requires_grad(true);
    Tensor w = in[2].detach().set_requires_grad(true), bias = in[3].detach().set_requires_grad(true);
    const Tensor y = fused ? batch_norm(x, Tensor(), Tensor(), w, bias, true, 0.1, 1e-5, {.residual = z, .relu = true})
                           : relu(batch_norm(x, Tensor(), Tensor(), w, bias, true) + z);
    y.backward(in[4]);
    return TensorList{x.grad(), z.grad(), w.grad(), bias.grad()};
  };
  return b;
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

// A row of the family, in every float dtype with the output in the input's dtype. Its inputs: x,
// the residual when `residual` (training only), running_mean and running_var in eval, weight and
// bias. The op is batch_norm (with the epilogue when there is a residual or a ReLU), the reference
// the float64 loops.
OpRow batch_norm_row(const char* name, bool training, bool residual, bool relu, uint64_t seed) {
  OpRow r;
  r.name = name;
  r.dtypes = kFloatTypes;
  r.samples = residual ? batch_norm_residual_samples(seed) : batch_norm_samples(!training, seed);
  const bool epilogue = residual || relu;
  const size_t stats = residual ? 2 : 1, w = stats + (training ? 0 : 2);  // where running_mean, weight are
  const auto running = [=](const TensorList& x, size_t k) { return training ? Tensor() : x[stats + k]; };
  r.op = [=](const TensorList& x) {
    if (!epilogue) return TensorList{batch_norm(x[0], running(x, 0), running(x, 1), x[w], x[w + 1], training)};
    const BatchNormEpilogue e{.residual = residual ? x[1] : Tensor(), .relu = relu};
    return TensorList{batch_norm(x[0], running(x, 0), running(x, 1), x[w], x[w + 1], training, 0.1, 1e-5, e)};
  };
  r.reference = [=](const TensorList& x) {
    const Tensor y = ref_batch_norm(x[0], running(x, 0), running(x, 1), x[w], x[w + 1], training, 1e-5);
    return TensorList{epilogue ? ref_epilogue(y, residual ? x[1] : Tensor(), relu) : y};
  };
  r.differentiable = residual ? std::vector<size_t>{0, 1, w, w + 1} : std::vector<size_t>{0, w, w + 1};
  r.out_dtype = [](DType t) { return t; };
  r.errors = epilogue ? batch_norm_residual_errors() : batch_norm_errors();
  r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
  return r;
}

}  // namespace

void add_batch_norm_rows(std::vector<OpRow>& rows) {
  rows.push_back(batch_norm_row("batch_norm_train", true, false, false, 21));
  rows.push_back(batch_norm_row("batch_norm_eval", false, false, false, 31));
  rows.push_back(batch_norm_row("batch_norm_relu_train", true, false, true, 41));
  rows.push_back(batch_norm_row("batch_norm_add_relu_train", true, true, true, 51));
  rows.back().bench = {batch_norm_add_relu_bench(true), batch_norm_add_relu_bench(false)};
  rows.push_back(batch_norm_row("batch_norm_eval_relu", false, false, true, 61));
}

}  // namespace kiln::test
