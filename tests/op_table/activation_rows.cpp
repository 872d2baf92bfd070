// Op table rows of the activation family (the composed activations of core/ops/activation.h):
// each against its torch.nn.functional definition in float64, on the unary samples (odd size,
// non-contiguous, transposed, 0-d, empty) scaled so the kinks (0, +-1, +-3, 6) fall inside the
// values; prelu with one weight and with one per channel.
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

double elu_of(double x, double alpha) { return x > 0 ? x : alpha * std::expm1(x); }

OpRow unary(const std::string& name, std::function<Tensor(const Tensor&)> op, std::function<double(double)> f,
            double scale, uint64_t seed) {
  OpRow r = make_row(
      name, kFloatTypes, unary_samples(seed, normal(scale)), [op](const TensorList& x) { return TensorList{op(x[0])}; },
      ref([f](const Values& v) { return f(v[0]); }), {0}, same_dtype);
  r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
  r.errors = {{"integer input", [op] { op(zeros({3}, DType::Int64)); }, {name.substr(0, name.find(' ')), "int64"}}};
  return r;
}

}  // namespace

void add_activation_rows(std::vector<OpRow>& rows) {
  rows.push_back(unary(
      "elu alpha 0.7", [](const Tensor& x) { return elu(x, 0.7); }, [](double x) { return elu_of(x, 0.7); }, 2.0,
      1600));
  rows.push_back(unary(
      "selu", [](const Tensor& x) { return selu(x); },
      [](double x) { return 1.0507009873554804934193349852946 * elu_of(x, 1.6732632423543772848170429916717); }, 2.0,
      1610));
  rows.push_back(unary(
      "hardtanh -0.5 1.5", [](const Tensor& x) { return hardtanh(x, -0.5, 1.5); },
      [](double x) { return std::clamp(x, -0.5, 1.5); }, 2.0, 1620));
  rows.back().errors.push_back(
      {"min_val above max_val", [] { hardtanh(zeros({2}), 1.0, 0.0); }, {"hardtanh", "min_val 1", "max_val 0"}});
  rows.push_back(unary(
      "relu6", [](const Tensor& x) { return relu6(x); }, [](double x) { return std::clamp(x, 0.0, 6.0); }, 5.0, 1630));
  rows.push_back(unary(
      "hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); },
      [](double x) { return std::clamp(x + 3.0, 0.0, 6.0) / 6.0; }, 4.0, 1640));
  rows.push_back(unary(
      "hardswish", [](const Tensor& x) { return hardswish(x); },
      [](double x) { return x * std::clamp(x + 3.0, 0.0, 6.0) / 6.0; }, 4.0, 1650));
  rows.push_back(unary(
      "mish", [](const Tensor& x) { return mish(x); }, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); },
      2.0, 1660));
  // prelu: x [N, C, ...] with a [C] weight (or [1]), both differentiable.
  for (const bool per_channel : {false, true}) {
    OpRow r;
    r.name = per_channel ? "prelu per channel" : "prelu";
    r.dtypes = kFloatTypes;
    auto sample = [per_channel](const Shape& shape, uint64_t seed) {
      return Sample{shape_str(shape), [=](DType t, Device d) {
                      const int64_t c = per_channel ? shape[1] : 1;
                      return TensorList{rnd(shape, t, d, seed, 2.0), rnd_range({c}, t, d, seed + 1, 0.05, 0.5)};
                    }};
    };
    r.samples = {sample({4, 3}, 1670), sample({2, 3, 5}, 1671)};
    r.op = [](const TensorList& x) { return TensorList{prelu(x[0], x[1])}; };
    r.reference = [](const TensorList& x) {
      const Values xv = values(x[0]), wv = values(x[1]);
      const Shape& s = x[0].sizes();
      const int64_t inner = x[0].numel() / (s[0] * s[1]);
      Values out;
      for (size_t i = 0; i < xv.size(); ++i) {
        const double w = wv.size() == 1 ? wv[0] : wv[(i / static_cast<size_t>(inner)) % static_cast<size_t>(s[1])];
        out.push_back(xv[i] > 0 ? xv[i] : w * xv[i]);
      }
      return TensorList{from_values(out, s)};
    };
    r.differentiable = {0, 1};
    r.out_dtype = same_dtype;
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrder);
    if (!per_channel) {
      r.errors = {{"a weight per other channels",
                   [] {
                     prelu(zeros({2, 3}), zeros({4}));
                   },
                   {"prelu", "[4]", "3", "[2, 3]"}}};
    }
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
