// Op table rows of the foreach family (the fused optimizer updates of core/ops/foreach.h): one AdamW
// step over a list of parameters with their gradients and states, against float64 loops of
// torch.optim.AdamW's formula. The op updates copies of its inputs and returns them, so the
// reference sees the inputs as they were. Also the GPU bench's AdamW case.
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// lr is a float32 0-d tensor: 2^-6 is exact in it, so float64 parameters meet float64's tolerance.
constexpr double kLr = 0.015625, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8, kWeightDecay = 0.1;
constexpr double kStep = 3;  // steps taken before this one: bias corrections with t = 4

// Inputs: n params, then their n gradients, n first moments and n second moments.
struct AdamWLists {
  TensorList params, grads, exp_avgs, exp_avg_sqs;
};

AdamWLists split(const TensorList& x) {
  const size_t n = x.size() / 4;
  AdamWLists l;
  for (size_t i = 0; i < n; ++i) {
    l.params.push_back(x[i]);
    l.grads.push_back(x[n + i]);
    l.exp_avgs.push_back(x[2 * n + i]);
    l.exp_avg_sqs.push_back(x[3 * n + i]);
  }
  return l;
}

TensorList clones(const TensorList& l) {
  TensorList r;
  for (const Tensor& t : l) r.push_back(t.clone());
  return r;
}

// Returns the updated params, then the updated first and second moments.
TensorList adamw_op(const TensorList& x) {
  AdamWLists l = split(x);
  TensorList p = clones(l.params), m = clones(l.exp_avgs), v = clones(l.exp_avg_sqs);
  const TensorOptions scalar(DType::Float32, x[0].device());
  foreach_adamw_(p, l.grads, m, v, full({}, kLr, scalar), {full({}, kStep, scalar)}, kBeta1, kBeta2, kEps,
                 kWeightDecay);
  TensorList out = p;
  out.insert(out.end(), m.begin(), m.end());
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

TensorList adamw_reference(const TensorList& x) {
  const AdamWLists l = split(x);
  const double t = kStep + 1, c1 = 1 - std::pow(kBeta1, t), c2 = 1 - std::pow(kBeta2, t);
  TensorList ps, ms, vs;
  for (size_t i = 0; i < l.params.size(); ++i) {
    Values p = values(l.params[i]), g = values(l.grads[i]), m = values(l.exp_avgs[i]), v = values(l.exp_avg_sqs[i]);
    for (size_t j = 0; j < p.size(); ++j) {
      p[j] *= 1 - kLr * kWeightDecay;
      m[j] = kBeta1 * m[j] + (1 - kBeta1) * g[j];
      v[j] = kBeta2 * v[j] + (1 - kBeta2) * g[j] * g[j];
      p[j] -= kLr / c1 * m[j] / (std::sqrt(v[j]) / std::sqrt(c2) + kEps);
    }
    ps.push_back(from_values(p, l.params[i].sizes()));
    ms.push_back(from_values(m, l.params[i].sizes()));
    vs.push_back(from_values(v, l.params[i].sizes()));
  }
  TensorList out = ps;
  out.insert(out.end(), ms.begin(), ms.end());
  out.insert(out.end(), vs.begin(), vs.end());
  return out;
}

// A sample of parameters of the given shapes with gradients and states (second moments >= 0).
Sample adamw_sample(const std::string& name, const std::vector<Shape>& shapes, uint64_t seed) {
  return {name, [=](DType t, Device d) {
            TensorList p, g, m, v;
            uint64_t s = seed;
            for (const Shape& shape : shapes) {
              p.push_back(rnd(shape, t, d, s++));
              g.push_back(rnd(shape, t, d, s++));
              m.push_back(rnd(shape, t, d, s++, 0.1));
              Tensor r = rnd(shape, t, d, s++, 0.1);
              v.push_back(r * r);
            }
            TensorList x = p;
            for (const TensorList* l : {&g, &m, &v}) x.insert(x.end(), l->begin(), l->end());
            return x;
          }};
}

// AdamW over n float32 parameters (--elements): the parameter, gradient and both moments read, the
// parameter and moments written. lr 1 and step 1 are 0-d inputs, so the timed call launches only the
// update.
BenchCase adamw_bench() {
  BenchCase b;
  b.name = "adamw";
  b.dtypes = {DType::Float32};
  b.op = "adamw";
  b.setup = [](DType t, int64_t n) {
    BenchSetup s;
    s.shape = {n};
    s.inputs = {{{n}, t}, {{n}, t}, {{n}, t}, {{n}, t, BenchInput::Fill::Ones},
                {{}, DType::Float32, BenchInput::Fill::Ones}, {{}, DType::Float32, BenchInput::Fill::Ones}};
    s.bytes = 7.0 * static_cast<double>(element_size(t)) * static_cast<double>(n);
    return s;
  };
  b.run = [](const TensorList& x) {
    foreach_adamw_({x[0]}, {x[1]}, {x[2]}, {x[3]}, x[4], {x[5]}, kBeta1, kBeta2, kEps, kWeightDecay);
    return TensorList{x[0]};
  };
  return b;
}

}  // namespace

void add_foreach_rows(std::vector<OpRow>& rows) {
  OpRow r;
  r.name = "foreach_adamw_";
  r.dtypes = kFloatTypes;
  r.samples = {
      adamw_sample("one [5, 7]", {{5, 7}}, 81),
      adamw_sample("[3, 4], [37] and 0-d (past the CPU loops' 8 lanes, with a tail)", {{3, 4}, {37}, {}}, 90),
  };
  r.op = adamw_op;
  r.reference = adamw_reference;
  // The default tolerances hold in float16 and bfloat16 too: each state and the parameter are
  // rounded to the dtype once, after the update is computed in float.
  r.cuda_tolerance = cuda_float32_floor(
      "float32 fused multiply-adds: nvcc contracts the moment updates (b1 m + (1 - b1) g, b2 v + (1 - b2) g^2) into "
      "FMAs that round once where the CPU build rounds twice, and the parameter's update carries that ulp; 1e-4 "
      "is still three orders tighter than a formula bug");
  r.errors = {
      {"parameters and gradients of different lengths",
       [] {
         TensorList p{zeros({2}), zeros({2})}, g{zeros({2})}, m{zeros({2}), zeros({2})}, v{zeros({2}), zeros({2})};
         foreach_adamw_(p, g, m, v, full({}, kLr), {zeros({})}, kBeta1, kBeta2, kEps, kWeightDecay);
       },
       {"foreach_adamw_", "2", "1"}},
      {"a non-dense parameter",
       [] {
         Tensor p = zeros({4, 4}).t().narrow(0, 0, 2);
         foreach_adamw_({p}, {zeros({2, 4})}, {zeros({2, 4})}, {zeros({2, 4})}, full({}, kLr), {zeros({})}, kBeta1,
                        kBeta2, kEps, kWeightDecay);
       },
       {"foreach_adamw_", "not dense"}},
      {"a state of another shape",
       [] {
         foreach_adamw_({zeros({2, 3})}, {zeros({2, 3})}, {zeros({3, 2})}, {zeros({2, 3})}, full({}, kLr), {zeros({})},
                        kBeta1, kBeta2, kEps, kWeightDecay);
       },
       {"foreach_adamw_", "[3, 2]", "[2, 3]"}},
  };
  r.bench = {adamw_bench()};
  rows.push_back(std::move(r));
}

}  // namespace kiln::test
