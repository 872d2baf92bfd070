// Op table rows of the layer_norm family: over the last dim and the last two, with and without
// weight and bias, against a float64 two-pass reference; the non-contiguous samples have an offset
// mean, so a variance that loses the spread to cancellation fails.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

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

// layer_norm forward and backward over rows of 1024 (--elements in all), weight and bias float32:
// x read and y written, then dy and x read and dx written; the weight and bias are read in both
// passes and their gradients written (the per-row statistics are small beside the rest).
BenchCase layer_norm_fwd_bwd_bench() {
  BenchCase b;
  b.name = "layer_norm_fwd_bwd";
  b.dtypes = {DType::Float32, DType::BFloat16};
  b.op = b.name;
  b.args = R"({"normalized_shape": [1024]})";
  b.setup = [](DType t, int64_t n) {
    const int64_t cols = 1024, rows = n / cols;
    BenchSetup s;
    s.shape = {rows, cols};
    s.inputs = {{s.shape, t},
                {{cols}, DType::Float32, BenchInput::Fill::Ones},
                {{cols}, DType::Float32, BenchInput::Fill::Ones},
                {s.shape, t}};
    s.bytes = 5 * static_cast<double>(element_size(t)) * static_cast<double>(rows * cols) + 5.0 * 4 * cols;
    return s;
  };
  b.run = [](const TensorList& x) {
    Tensor in = x[0].detach().set_requires_grad(true), w = x[1].detach().set_requires_grad(true);
    Tensor bias = x[2].detach().set_requires_grad(true);
    layer_norm(in, {1024}, w, bias).backward(x[3]);
    return TensorList{in.grad(), w.grad(), bias.grad()};
  };
  return b;
}

}  // namespace

void add_layer_norm_rows(std::vector<OpRow>& rows) {
  rows.push_back(layer_norm_row("layer_norm", {4, 7}, {7}, true, 11));
  rows.back().bench = {row_bench("layer_norm", "layer_norm", R"({"normalized_shape": [1024]})", true),
                       layer_norm_fwd_bwd_bench()};
  rows.push_back(layer_norm_row("layer_norm no affine", {3, 2, 6}, {6}, false, 14));
  rows.push_back(layer_norm_row("layer_norm last 2 dims", {3, 4, 5}, {4, 5}, true, 17));
  // Past the CPU row loops' 8 lanes, with a tail.
  rows.push_back(layer_norm_row("layer_norm 43 wide", {5, 43}, {43}, true, 20));
}

}  // namespace kiln::test
