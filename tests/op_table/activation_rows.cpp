// Op table rows of the activation family (the composed activations of core/ops/activation.h):
// each against its torch.nn.functional definition in float64, on the unary samples (odd size,
// non-contiguous, transposed, 0-d, empty) scaled so the kinks (0, +-1, +-3, 6, the shrinks'
// lambd) fall inside the values; glu and softmin along a dim; prelu with one weight and with one
// per channel.
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
  rows.push_back(unary(
      "celu alpha 0.6", [](const Tensor& x) { return celu(x, 0.6); },
      [](double x) { return std::max(0.0, x) + std::min(0.0, 0.6 * std::expm1(x / 0.6)); }, 2.0, 1680));
  rows.back().errors.push_back({"alpha 0", [] { celu(zeros({2}), 0.0); }, {"celu", "alpha", "0"}});
  rows.push_back(unary(
      "logsigmoid", [](const Tensor& x) { return logsigmoid(x); }, [](double x) { return -std::log1p(std::exp(-x)); },
      4.0, 1690));
  rows.push_back(unary(
      "softsign", [](const Tensor& x) { return softsign(x); }, [](double x) { return x / (1.0 + std::fabs(x)); }, 3.0,
      1700));
  rows.push_back(unary(
      "tanhshrink", [](const Tensor& x) { return tanhshrink(x); }, [](double x) { return x - std::tanh(x); }, 2.0,
      1710));
  // Thresholds exact in every float type (3/8, 1/4): a half input equal to the rounded threshold
  // falls on the side PyTorch's kernels put it, which a float64 reference of 0.4 would not.
  rows.push_back(unary(
      "softshrink 0.375", [](const Tensor& x) { return softshrink(x, 0.375); },
      [](double x) { return x > 0.375    ? x - 0.375
                            : x < -0.375 ? x + 0.375
                                         : 0.0; }, 1.5, 1720));
  rows.back().errors.push_back(
      {"negative lambd", [] { softshrink(zeros({2}), -0.1); }, {"softshrink", "lambd", "-0.1"}});
  rows.push_back(unary(
      "hardshrink 0.375", [](const Tensor& x) { return hardshrink(x, 0.375); },
      [](double x) { return std::fabs(x) > 0.375 ? x : 0.0; }, 1.5, 1730));
  rows.push_back(unary(
      "threshold 0.25 -2", [](const Tensor& x) { return threshold(x, 0.25, -2.0); },
      [](double x) { return x > 0.25 ? x : -2.0; }, 1.5, 1740));
  {
    // glu halves dim -1 of [4, 6] and dim 1 of [3, 4, 5] (the last sample's own dim).
    auto sample = [](const Shape& shape, uint64_t seed) {
      return Sample{shape_str(shape), [=](DType t, Device d) { return TensorList{rnd(shape, t, d, seed, 2.0)}; }};
    };
    auto dim_of = [](const Tensor& x) { return x.dim() == 3 ? int64_t{1} : int64_t{-1}; };
    auto reference = [dim_of](const TensorList& x) {
      const int64_t d = wrap(dim_of(x[0]), x[0].dim());
      Shape os = x[0].sizes();
      const int64_t half = os[static_cast<size_t>(d)] / 2;
      os[static_cast<size_t>(d)] = half;
      const Tensor a = ref_pick(x[0], os, [](const Shape& i) { return i; });
      const Tensor b = ref_pick(x[0], os, [d, half](const Shape& i) {
        Shape j = i;
        j[static_cast<size_t>(d)] += half;
        return j;
      });
      return TensorList{ref_map({a, b}, [](const Values& v) { return v[0] / (1.0 + std::exp(-v[1])); })};
    };
    OpRow r = make_row(
        "glu", kFloatTypes, {sample({4, 6}, 1750), sample({3, 4, 5}, 1751)},
        [dim_of](const TensorList& x) { return TensorList{glu(x[0], dim_of(x[0]))}; }, reference, {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhyLibm);
    r.errors = {{"odd size",
                 [] {
                   glu(zeros({2, 5}));
                 },
                 {"glu", "odd size 5", "[2, 5]"}},
                {"0-d input", [] { glu(zeros({})); }, {"glu", "0-d"}}};
    rows.push_back(std::move(r));
  }
  {
    OpRow r = make_row(
        "softmin dim 1", kFloatTypes, one_input_samples(1760),
        [](const TensorList& x) { return TensorList{softmin(x[0], 1)}; },
        [](const TensorList& x) {
          const Tensor e = ref_map({x[0]}, [](const Values& v) { return std::exp(-v[0]); });
          const Tensor z = ref_reduce(e, {1}, true, [](const Values& v) {
            double s = 0;
            for (double a : v) s += a;
            return s;
          });
          return TensorList{ref_map({e, z}, [](const Values& v) { return v[0] / v[1]; })};
        },
        {0}, same_dtype);
    r.cuda_tolerance = cuda_float32_floor(kCudaWhySumOrderAndLibm);
    rows.push_back(std::move(r));
  }
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
