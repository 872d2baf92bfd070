// Op table rows of the foreach family (the fused optimizer updates of core/ops/foreach.h): one Adam
// step over a list of parameters with their gradients and states, against float64 loops of
// torch.optim's formula: AdamW, and Adam with L2 weight decay, amsgrad and maximize. The op
// updates copies of its inputs and returns them, so the reference sees the inputs as they were.
// Also the GPU bench's AdamW case.
#include <algorithm>
#include <cmath>

#include "tests/op_table/op_table.h"

namespace kiln::test {
namespace {

// lr is a float32 0-d tensor: 2^-6 is exact in it, so float64 parameters meet float64's tolerance.
constexpr double kLr = 0.015625, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-8, kWeightDecay = 0.1;
constexpr double kStep = 3;  // steps taken before this one: bias corrections with t = 4

AdamHyper adamw_options() {
  AdamHyper o;
  o.beta1 = kBeta1;
  o.beta2 = kBeta2;
  o.eps = kEps;
  o.weight_decay = kWeightDecay;
  o.decoupled_weight_decay = true;
  return o;
}

// Adam's other branches at once: the L2 term, amsgrad's running maximum, gradient ascent.
AdamHyper adam_amsgrad_options() {
  AdamHyper o = adamw_options();
  o.decoupled_weight_decay = false;
  o.amsgrad = o.maximize = true;
  return o;
}

// Inputs: n params, then their n gradients, n first moments, n second moments and, with amsgrad,
// n running maxima of the second moment.
struct AdamLists {
  TensorList params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
};

AdamLists split(const TensorList& x, bool amsgrad) {
  const size_t n = x.size() / (amsgrad ? 5 : 4);
  AdamLists l;
  for (size_t i = 0; i < n; ++i) {
    l.params.push_back(x[i]);
    l.grads.push_back(x[n + i]);
    l.exp_avgs.push_back(x[2 * n + i]);
    l.exp_avg_sqs.push_back(x[3 * n + i]);
    if (amsgrad) l.max_exp_avg_sqs.push_back(x[4 * n + i]);
  }
  return l;
}

TensorList clones(const TensorList& l) {
  TensorList r;
  for (const Tensor& t : l) r.push_back(t.clone());
  return r;
}

TensorList concat(std::initializer_list<const TensorList*> lists) {
  TensorList out;
  for (const TensorList* l : lists) out.insert(out.end(), l->begin(), l->end());
  return out;
}

// Returns the updated params, then the updated first and second moments (and maxima).
TensorList adam_op(const TensorList& x, const AdamHyper& o) {
  AdamLists l = split(x, o.amsgrad);
  TensorList p = clones(l.params), m = clones(l.exp_avgs), v = clones(l.exp_avg_sqs);
  TensorList vmax = clones(l.max_exp_avg_sqs);
  const TensorOptions scalar(DType::Float32, x[0].device());
  foreach_adam_(p, l.grads, m, v, vmax, full({}, kLr, scalar), {full({}, kStep, scalar)}, o);
  return concat({&p, &m, &v, &vmax});
}

TensorList adam_reference(const TensorList& x, const AdamHyper& o) {
  const AdamLists l = split(x, o.amsgrad);
  const double t = kStep + 1, c1 = 1 - std::pow(o.beta1, t), c2 = 1 - std::pow(o.beta2, t);
  TensorList ps, ms, vs, xs;
  for (size_t i = 0; i < l.params.size(); ++i) {
    Values p = values(l.params[i]), g = values(l.grads[i]), m = values(l.exp_avgs[i]), v = values(l.exp_avg_sqs[i]);
    Values vmax = o.amsgrad ? values(l.max_exp_avg_sqs[i]) : Values(p.size());
    for (size_t j = 0; j < p.size(); ++j) {
      double gj = o.maximize ? -g[j] : g[j];
      if (o.decoupled_weight_decay) {
        p[j] *= 1 - kLr * o.weight_decay;
      } else {
        gj += o.weight_decay * p[j];
      }
      m[j] = o.beta1 * m[j] + (1 - o.beta1) * gj;
      v[j] = o.beta2 * v[j] + (1 - o.beta2) * gj * gj;
      vmax[j] = std::max(vmax[j], v[j]);
      p[j] -= kLr / c1 * m[j] / (std::sqrt(o.amsgrad ? vmax[j] : v[j]) / std::sqrt(c2) + o.eps);
    }
    const Shape& shape = l.params[i].sizes();
    ps.push_back(from_values(p, shape));
    ms.push_back(from_values(m, shape));
    vs.push_back(from_values(v, shape));
    if (o.amsgrad) xs.push_back(from_values(vmax, shape));
  }
  return concat({&ps, &ms, &vs, &xs});
}

// A sample of parameters of the given shapes with gradients and states (second moments and their
// maxima >= 0; a maximum is above the updated moment for about half the elements).
Sample adam_sample(const std::string& name, const std::vector<Shape>& shapes, uint64_t seed, bool amsgrad) {
  return {name, [=](DType t, Device d) {
            TensorList p, g, m, v, vmax;
            uint64_t s = seed;
            for (const Shape& shape : shapes) {
              p.push_back(rnd(shape, t, d, s++));
              g.push_back(rnd(shape, t, d, s++));
              m.push_back(rnd(shape, t, d, s++, 0.1));
              Tensor r = rnd(shape, t, d, s++, 0.1);
              v.push_back(r * r);
              Tensor q = rnd(shape, t, d, s++, 0.3);
              if (amsgrad) vmax.push_back(q * q);
            }
            return concat({&p, &g, &m, &v, &vmax});
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
  const CudaTolerance fma = cuda_float32_floor(
      "float32 fused multiply-adds: nvcc contracts the moment updates (b1 m + (1 - b1) g, b2 v + (1 - b2) g^2) into "
      "FMAs that round once where the CPU build rounds twice, and the parameter's update carries that ulp; 1e-4 "
      "is still three orders tighter than a formula bug");
  for (const bool adamw : {true, false}) {
    const AdamHyper o = adamw ? adamw_options() : adam_amsgrad_options();
    OpRow r;
    r.name = adamw ? "foreach_adamw_" : "foreach_adam_ (L2 decay, amsgrad, maximize)";
    r.dtypes = kFloatTypes;
    r.samples = {
        adam_sample("one [5, 7]", {{5, 7}}, 81, o.amsgrad),
        adam_sample("[3, 4], [37] and 0-d (past the CPU loops' 8 lanes, with a tail)", {{3, 4}, {37}, {}}, 90,
                    o.amsgrad),
    };
    r.op = [o](const TensorList& x) { return adam_op(x, o); };
    r.reference = [o](const TensorList& x) { return adam_reference(x, o); };
    // The default tolerances hold in float16 and bfloat16 too: each state and the parameter are
    // rounded to the dtype once, after the update is computed in float.
    r.cuda_tolerance = fma;
    if (adamw) {
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
             foreach_adamw_({zeros({2, 3})}, {zeros({2, 3})}, {zeros({3, 2})}, {zeros({2, 3})}, full({}, kLr),
                            {zeros({})}, kBeta1, kBeta2, kEps, kWeightDecay);
           },
           {"foreach_adamw_", "[3, 2]", "[2, 3]"}},
      };
      r.bench = {adamw_bench()};
    } else {
      r.errors = {
          {"amsgrad without its running maxima",
           [o] {
             foreach_adam_({zeros({2})}, {zeros({2})}, {zeros({2})}, {zeros({2})}, {}, full({}, kLr), {zeros({})}, o);
           },
           {"foreach_adam_", "expected 1 max_exp_avg_sq", "got 0"}},
          {"running maxima without amsgrad",
           [] {
             AdamHyper plain;
             foreach_adam_({zeros({2})}, {zeros({2})}, {zeros({2})}, {zeros({2})}, {zeros({2})}, full({}, kLr),
                           {zeros({})}, plain);
           },
           {"foreach_adam_", "1 max_exp_avg_sq", "without amsgrad"}},
          {"a running maximum of another dtype than the moments",
           [o] {
             Tensor p = zeros({2}, DType::BFloat16);
             foreach_adam_({p}, {zeros({2}, DType::BFloat16)}, {zeros({2})}, {zeros({2})},
                           {zeros({2}, DType::BFloat16)}, full({}, kLr), {zeros({})}, o);
           },
           {"foreach_adam_", "parameter 0", "float32", "bfloat16"}},
      };
    }
    rows.push_back(std::move(r));
  }
}

}  // namespace kiln::test
