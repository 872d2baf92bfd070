// Multi-tensor ops against unfused references written with ordinary kiln tensor ops (the same
// formulas, so float32 results agree to rounding), plus what the fused form must add: bitwise
// identical results for any thread count, found_inf leaving every tensor untouched, grad_scale
// dividing, dtype buckets, chunk boundaries (tensors larger than one 65536-element chunk) and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kiln.h"
#include "core/ops/foreach.h"
#include "kernels/cpu/parallel.h"
#include "kernels/foreach.h"
#include "kernels/half.h"
#include "tests/bitwise.h"
#include "tests/threads.h"

using namespace kiln;
using kiln::test::ThreadCountGuard;

namespace {

// Shapes that cross chunk boundaries (70000 > 65536), odd sizes, a scalar and an empty tensor.
const std::vector<Shape> kShapes = {{3, 5}, {70000}, {7}, {}, {0, 4}, {2, 3, 4}};

TensorList random_list(const std::vector<Shape>& shapes, DType dtype, double scale = 1.0) {
  TensorList out;
  for (const Shape& s : shapes) out.push_back(mul(randn(s), scale).to(dtype));
  return out;
}

TensorList clones(const TensorList& l) {
  TensorList out;
  for (const Tensor& t : l) out.push_back(t.clone());
  return out;
}

// |a - b| <= atol + rtol * |b| elementwise, for every pair.
void require_close(const TensorList& a, const TensorList& b, double rtol, double atol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].sizes() == b[i].sizes());
    std::vector<double> va = a[i].to_vector_double(), vb = b[i].to_vector_double();
    for (size_t k = 0; k < va.size(); ++k) {
      if (std::abs(va[k] - vb[k]) <= atol + rtol * std::abs(vb[k])) continue;  // one assertion per failure only
      INFO("tensor " << i << " element " << k << ": " << va[k] << " vs " << vb[k]);
      REQUIRE(std::abs(va[k] - vb[k]) <= atol + rtol * std::abs(vb[k]));
    }
  }
}

bool same_bits(const Tensor& a, const Tensor& b) { return kiln::test::bitwise_equal(a, b); }
bool same_bits(const TensorList& a, const TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

Tensor f32(double v) { return full({}, v, TensorOptions(DType::Float32)); }

// Unfused SGD, step `step` (0 = first), the formulas of foreach_sgd_ with tensor ops.
void sgd_reference(TensorList& params, const TensorList& grads, TensorList& bufs, double lr, double momentum,
                   double dampening, bool nesterov, double wd, int step, double scale = 0) {
  NoGradGuard ng;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor d = scale != 0 ? div(grads[i], scale) : grads[i].clone();
    if (wd != 0) d = add(d, params[i], wd);
    if (momentum != 0) {
      if (step == 0) {
        bufs[i].copy_(d);
      } else {
        bufs[i].mul_(momentum).add_(d, 1 - dampening);
      }
      d = nesterov ? add(d, bufs[i], momentum) : bufs[i].clone();
    }
    params[i].sub_(d, lr);
  }
}

// Unfused AdamW with t = step + 1, PyTorch's operation order.
void adamw_reference(TensorList& params, const TensorList& grads, TensorList& m, TensorList& v, double lr, int step,
                     double b1, double b2, double eps, double wd) {
  NoGradGuard ng;
  const double t = step + 1;
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mul_(1 - lr * wd);
    m[i].mul_(b1).add_(grads[i], 1 - b1);
    v[i].mul_(b2).add_(mul(grads[i], grads[i]), 1 - b2);
    Tensor denom = add(div(sqrt(v[i]), std::sqrt(bc2)), eps);
    params[i].sub_(div(m[i], denom), lr / bc1);
  }
}

}  // namespace

TEST_CASE("foreach_sgd_ matches the unfused formulas", "[foreach]") {
  struct Config {
    double momentum, dampening, wd;
    bool nesterov;
  };
  const std::vector<Config> configs = {
      {0, 0, 0, false}, {0.9, 0, 0, false}, {0.9, 0, 1e-2, true}, {0.5, 0.25, 0.1, false}, {0, 0, 0.05, false}};
  for (const Config& c : configs) {
    INFO("momentum " << c.momentum << " dampening " << c.dampening << " wd " << c.wd << " nesterov " << c.nesterov);
    manual_seed(7);
    TensorList p = random_list(kShapes, DType::Float32);
    TensorList ref_p = clones(p);
    TensorList bufs, ref_bufs;
    for (const Tensor& t : p) {
      bufs.push_back(full(t.sizes(), 123.0));  // garbage: the first step must overwrite it unread
      ref_bufs.push_back(zeros(t.sizes()));
    }
    const float lr = 0.1f;
    Tensor lr_t = f32(lr), step = f32(0);
    for (int s = 0; s < 3; ++s) {
      TensorList g = random_list(kShapes, DType::Float32);
      foreach_sgd_(p, g, c.momentum != 0 ? bufs : TensorList(), lr_t, c.momentum, c.dampening, c.nesterov, c.wd,
                   {step});
      foreach_add_scalar_({step}, 1.0);
      sgd_reference(ref_p, g, ref_bufs, lr, c.momentum, c.dampening, c.nesterov, c.wd, s);
    }
    REQUIRE(step.item<float>() == 3.0f);
    require_close(p, ref_p, 1e-6, 1e-7);
    if (c.momentum != 0) require_close(bufs, ref_bufs, 1e-6, 1e-7);
  }
}

TEST_CASE("foreach_adamw_ matches the unfused formulas", "[foreach]") {
  manual_seed(11);
  const double lr = static_cast<double>(1e-2f), b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  SECTION("float32") {
    TensorList p = random_list(kShapes, DType::Float32), m, v;
    for (const Tensor& t : p) {
      m.push_back(zeros(t.sizes()));
      v.push_back(zeros(t.sizes()));
    }
    TensorList rp = clones(p), rm = clones(m), rv = clones(v);
    Tensor lr_t = f32(lr), step = f32(0);
    for (int s = 0; s < 3; ++s) {
      TensorList g = random_list(kShapes, DType::Float32);
      foreach_adamw_(p, g, m, v, lr_t, {step}, b1, b2, eps, wd);
      foreach_add_scalar_({step}, 1.0);
      adamw_reference(rp, g, rm, rv, lr, s, b1, b2, eps, wd);
    }
    require_close(p, rp, 1e-5, 1e-6);
    require_close(m, rm, 1e-6, 1e-7);
    require_close(v, rv, 1e-6, 1e-9);
  }
  SECTION("float64 parameters and state") {
    TensorList p = random_list(kShapes, DType::Float64), m, v;
    for (const Tensor& t : p) {
      m.push_back(zeros(t.sizes(), DType::Float64));
      v.push_back(zeros(t.sizes(), DType::Float64));
    }
    TensorList rp = clones(p), rm = clones(m), rv = clones(v);
    Tensor lr_t = f32(lr), step = f32(0);
    for (int s = 0; s < 2; ++s) {
      TensorList g = random_list(kShapes, DType::Float64);
      foreach_adamw_(p, g, m, v, lr_t, {step}, b1, b2, eps, wd);
      foreach_add_scalar_({step}, 1.0);
      adamw_reference(rp, g, rm, rv, lr, s, b1, b2, eps, wd);
    }
    require_close(p, rp, 1e-12, 1e-14);
  }
  SECTION("bfloat16 parameters with float32 state, mixed with float32 parameters in one call") {
    // The fused update rounds the parameter to bfloat16 once; the reference rounds after each of
    // its in-place ops, so they agree to a few bfloat16 ulps (2^-8 relative each).
    TensorList p = random_list({{300}, {5, 7}}, DType::BFloat16);
    p.push_back(randn({33}));
    TensorList m, v;
    for (const Tensor& t : p) {
      m.push_back(zeros(t.sizes()));
      v.push_back(zeros(t.sizes()));
    }
    TensorList rp;
    for (const Tensor& t : p) rp.push_back(t.to(DType::Float32));
    TensorList rm = clones(m), rv = clones(v);
    Tensor lr_t = f32(lr), step = f32(0);
    for (int s = 0; s < 2; ++s) {
      TensorList g = random_list({{300}, {5, 7}}, DType::BFloat16);
      g.push_back(randn({33}));
      TensorList g32;
      for (const Tensor& t : g) g32.push_back(t.to(DType::Float32));
      foreach_adamw_(p, g, m, v, lr_t, {step}, b1, b2, eps, wd);
      foreach_add_scalar_({step}, 1.0);
      adamw_reference(rp, g32, rm, rv, lr, s, b1, b2, eps, wd);
      for (size_t i = 0; i < 2; ++i) rp[i] = rp[i].to(DType::BFloat16).to(DType::Float32);
    }
    REQUIRE(p[0].dtype() == DType::BFloat16);
    REQUIRE(m[0].dtype() == DType::Float32);
    require_close(TensorList(p.begin(), p.begin() + 2), TensorList(rp.begin(), rp.begin() + 2), 2e-2, 1e-2);
    require_close({p[2]}, {rp[2]}, 1e-5, 1e-6);
    require_close(m, rm, 1e-5, 1e-7);
  }
}

TEST_CASE("foreach optimizer steps are bitwise identical for any thread count", "[foreach]") {
  ThreadCountGuard guard;
  std::vector<TensorList> results;
  for (int threads : {1, 2, 4}) {
    cpu::set_num_threads(threads);
    manual_seed(5);
    TensorList p = random_list({{200000}, {3, 70000}, {9}}, DType::Float32), m, v, bufs;
    for (const Tensor& t : p) {
      m.push_back(zeros(t.sizes()));
      v.push_back(zeros(t.sizes()));
      bufs.push_back(zeros(t.sizes()));
    }
    TensorList p2 = clones(p);
    Tensor lr = f32(1e-3), step = f32(0);
    for (int s = 0; s < 2; ++s) {
      TensorList g = random_list({{200000}, {3, 70000}, {9}}, DType::Float32);
      foreach_adamw_(p, g, m, v, lr, {step}, 0.9, 0.95, 1e-8, 0.1);
      foreach_sgd_(p2, g, bufs, lr, 0.9, 0.1, false, 1e-4, {step});
      foreach_add_scalar_({step}, 1.0);
    }
    TensorList all = p;
    all.insert(all.end(), p2.begin(), p2.end());
    all.push_back(foreach_norm(p));
    all.push_back(foreach_norm(p2, 3.0));
    results.push_back(all);
  }
  REQUIRE(same_bits(results[0], results[1]));
  REQUIRE(same_bits(results[0], results[2]));
}

namespace {

// Values that every loop of an update must carry through as the element formula does: signed
// zeros, infinities, NaN, a float32 subnormal, large and tiny magnitudes, then random ones.
std::vector<float> update_values(int64_t n, uint32_t seed) {
  const std::vector<float> special = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(), std::nanf(""), 1e-41f, 3e38f,
                                      -2.5e-20f, 1.0f, -1.0f};
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[static_cast<size_t>(i)] =
        i % 13 == 5 ? special[(x >> 8) % special.size()] : (static_cast<float>(x >> 8) / 8388608.0f - 1.0f);
  }
  return v;
}

template <typename P> float at(const Tensor& t, size_t i) { return static_cast<float>(t.data_ptr<P>()[i]); }

// The same bits, or both NaN (a NaN's sign and payload depend on which operand an instruction
// propagates, which kiln does not promise: a GPU's NaNs carry no payload at all).
template <typename P> bool same_element(const Tensor& t, size_t i, float formula) {
  const P want(formula);
  const float got = at<P>(t, i);
  return (std::isnan(got) && std::isnan(formula)) || std::memcmp(&want, t.data_ptr<P>() + i, sizeof(P)) == 0;
}

}  // namespace

// The CPU update loops are vectorized and cloned for AVX2 (kernels/cpu/foreach.cpp); every element
// must still be the bits of foreach_math's element function, the CUDA kernels' formula, computed
// one element at a time here. Lengths around vector widths and past a chunk, with and without
// grad_scale, SGD with and without a buffer, float32 and bfloat16 parameters with float32 state.
TEMPLATE_TEST_CASE("foreach optimizer loops give the element formula's bits", "[foreach]", float, BFloat16) {
  using P = TestType;
  const DType dtype = dtype_of<P>();
  const double lr = static_cast<double>(3e-3f);  // the float32 lr_t below, widened on the device
  const float grad_scale = 1024.0f;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{33}, int64_t{65536 + 45}}) {
    for (const bool scaled : {false, true}) {
      for (const float step : {0.0f, 4.0f}) {
        INFO("n " << n << (scaled ? " with grad_scale" : "") << " after step " << step);
        const std::vector<float> pv = update_values(n, 1), gv = update_values(n, 2), mv = update_values(n, 3);
        std::vector<float> vv = update_values(n, 4);
        for (float& x : vv) x = std::abs(x);  // a second moment is not negative
        ForeachScalars s;
        s.lr = &lr;
        s.grad_scale = scaled ? &grad_scale : nullptr;
        const Tensor lr_t = f32(lr), step_t = f32(step), scale_t = scaled ? f32(grad_scale) : Tensor();
        for (const bool adamw : {true, false}) {  // AdamW; Adam with L2 decay, amsgrad and maximize
          AdamHyper h{0.9, 0.95, 1e-8, 0.1};
          h.decoupled_weight_decay = adamw;
          h.amsgrad = h.maximize = !adamw;
          const foreach_math::AdamCoef<float> k = foreach_math::adam_coef<float>(h, s, step);
          std::vector<float> xv = update_values(n, 5);  // amsgrad's running maximum
          for (float& x : xv) x = std::abs(x);
          TensorList p{tensor(pv).to(dtype)}, g{tensor(gv).to(dtype)}, m{tensor(mv)}, v{tensor(vv)}, x;
          if (!adamw) x = {tensor(xv)};
          const Tensor p0 = p[0].clone(), g0 = g[0].clone();
          foreach_adam_(p, g, m, v, x, lr_t, {step_t}, h, Tensor(), scale_t);
          for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
            float pe = at<P>(p0, i), me = mv[i], ve = vv[i], xe = xv[i];
            foreach_math::adam_element<float>(pe, at<P>(g0, i), me, ve, xe, k);
            if (!same_element<P>(p[0], i, pe) || !same_element<float>(m[0], i, me) ||
                !same_element<float>(v[0], i, ve) || (!adamw && !same_element<float>(x[0], i, xe))) {
              FAIL((adamw ? "AdamW" : "Adam")
                   << " element " << i << ": p " << at<P>(p[0], i) << " (formula " << pe << "), m "
                   << at<float>(m[0], i) << " (" << me << "), v " << at<float>(v[0], i) << " (" << ve << ")");
            }
          }
        }
        for (const bool with_buf : {false, true}) {
          SgdHyper h{with_buf ? 0.9 : 0.0, 0.1, 0.01, with_buf};
          h.maximize = !with_buf;
          const foreach_math::SgdCoef<float> k = foreach_math::sgd_coef<float>(h, s, step);
          TensorList p{tensor(pv).to(dtype)}, g{tensor(gv).to(dtype)};
          TensorList b = with_buf ? TensorList{tensor(mv)} : TensorList();
          const Tensor p0 = p[0].clone(), g0 = g[0].clone();
          foreach_sgd_(p, g, b, lr_t, h.momentum, h.dampening, h.nesterov, h.weight_decay, {step_t}, Tensor(), scale_t,
                       h.maximize);
          for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
            float pe = at<P>(p0, i), be = step == 0.0f ? 0.0f : mv[i];
            foreach_math::sgd_element<float>(pe, at<P>(g0, i), &be, k);
            if (!same_element<P>(p[0], i, pe)) {
              FAIL("SGD element " << i << ": p " << at<P>(p[0], i) << " (formula " << pe << ")");
            }
            if (with_buf && !same_element<float>(b[0], i, be)) {
              FAIL("SGD element " << i << ": buffer " << at<float>(b[0], i) << " (formula " << be << ")");
            }
          }
        }
      }
    }
  }
}

TEST_CASE("found_inf skips every update and the step increment", "[foreach]") {
  manual_seed(3);
  TensorList p = random_list(kShapes, DType::Float32), m, v, bufs;
  for (const Tensor& t : p) {
    m.push_back(randn(t.sizes()).abs());
    v.push_back(randn(t.sizes()).abs());
    bufs.push_back(randn(t.sizes()));
  }
  TensorList g = random_list(kShapes, DType::Float32);
  const TensorList p0 = clones(p), m0 = clones(m), v0 = clones(v), b0 = clones(bufs);
  Tensor lr = f32(0.1), step = f32(4), inf = f32(1);
  foreach_adamw_(p, g, m, v, lr, {step}, 0.9, 0.999, 1e-8, 0.1, inf);
  foreach_sgd_(p, g, bufs, lr, 0.9, 0, true, 0.1, {step}, inf);
  foreach_add_scalar_({step}, 1.0, inf);
  REQUIRE(same_bits(p, p0));
  REQUIRE(same_bits(m, m0));
  REQUIRE(same_bits(v, v0));
  REQUIRE(same_bits(bufs, b0));
  REQUIRE(step.item<float>() == 4.0f);

  // found_inf == 0 lets everything through.
  Tensor ok = f32(0);
  foreach_sgd_(p, g, bufs, lr, 0.9, 0, true, 0.1, {step}, ok);
  foreach_add_scalar_({step}, 1.0, ok);
  REQUIRE_FALSE(same_bits(p, p0));
  REQUIRE(step.item<float>() == 5.0f);
}

TEST_CASE("grad_scale divides the gradients inside the update", "[foreach]") {
  manual_seed(9);
  // A power-of-two scale makes scaled gradients and their unscaling exact, so results match bitwise.
  const double scale = 1024.0;
  TensorList g = random_list(kShapes, DType::Float32);
  TensorList gs;
  for (const Tensor& t : g) gs.push_back(mul(t, scale));
  TensorList p = random_list(kShapes, DType::Float32);
  TensorList p_scaled = clones(p), m1, v1, m2, v2, b1, b2;
  for (const Tensor& t : p) {
    m1.push_back(zeros(t.sizes()));
    v1.push_back(zeros(t.sizes()));
    b1.push_back(zeros(t.sizes()));
  }
  m2 = clones(m1);
  v2 = clones(v1);
  b2 = clones(b1);
  TensorList q = clones(p), q_scaled = clones(p);
  Tensor lr = f32(1e-2), step = f32(0), inf = f32(0), s = f32(scale);
  foreach_adamw_(p, g, m1, v1, lr, {step}, 0.9, 0.999, 1e-8, 0.01);
  foreach_adamw_(p_scaled, gs, m2, v2, lr, {step}, 0.9, 0.999, 1e-8, 0.01, inf, s);
  REQUIRE(same_bits(p, p_scaled));
  REQUIRE(same_bits(m1, m2));
  foreach_sgd_(q, g, b1, lr, 0.9, 0, false, 0.01, {step});
  foreach_sgd_(q_scaled, gs, b2, lr, 0.9, 0, false, 0.01, {step}, Tensor(), s);
  REQUIRE(same_bits(q, q_scaled));
  // The gradients themselves are left scaled.
  REQUIRE(same_bits(gs[0], mul(g[0], scale)));

  // And against the unfused reference with an arbitrary scale.
  TensorList r = clones(p), rref = clones(p), rb, rbref;
  for (const Tensor& t : p) {
    rb.push_back(zeros(t.sizes()));
    rbref.push_back(zeros(t.sizes()));
  }
  foreach_sgd_(r, gs, rb, lr, 0.9, 0, false, 0.01, {step}, Tensor(), f32(3.0));
  sgd_reference(rref, gs, rbref, static_cast<double>(1e-2f), 0.9, 0, false, 0.01, 0, 3.0);
  require_close(r, rref, 1e-6, 1e-7);
}

TEST_CASE("foreach_norm matches the norm of all elements", "[foreach]") {
  manual_seed(21);
  TensorList t = random_list(kShapes, DType::Float32);
  t.push_back(randn({50}).to(DType::Float64));
  t.push_back(randn({64, 3}).to(DType::BFloat16));
  std::vector<double> all;
  for (const Tensor& x : t) {
    std::vector<double> v = x.to_vector_double();
    all.insert(all.end(), v.begin(), v.end());
  }
  auto ref = [&](double p) {
    if (std::isinf(p)) {
      double m = 0;
      for (double e : all) m = std::max(m, std::abs(e));
      return m;
    }
    double s = 0;
    for (double e : all) s += std::pow(std::abs(e), p);
    return std::pow(s, 1 / p);
  };
  for (double p : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    INFO("p = " << p);
    Tensor n = foreach_norm(t, p);
    REQUIRE(n.dim() == 0);
    REQUIRE(n.dtype() == DType::Float64);  // one float64 tensor in the list
    REQUIRE(n.item<double>() == Approx(ref(p)).epsilon(1e-5));
    REQUIRE(foreach_norm({t[0], t[1]}, p).dtype() == DType::Float32);
  }
  // A float64 list's norm in float64: past float32's range, and to float64 precision. (Its sum of
  // squares was kept as a float32 partial: inf from a norm of 1.8e19 on.)
  const Tensor big = tensor(std::vector<double>{3e20, 4e20});
  CHECK(foreach_norm({big}).item<double>() == Approx(5e20).epsilon(1e-15));
  CHECK(foreach_norm({big * 1e80}).item<double>() == Approx(5e100).epsilon(1e-15));
  CHECK(foreach_norm({big}, 1.0).item<double>() == Approx(7e20).epsilon(1e-15));
  CHECK(foreach_norm({big * 1e200}, std::numeric_limits<double>::infinity()).item<double>() == 4e220);
  const Tensor fine = tensor(std::vector<double>{1.0, 1e-9});
  CHECK(foreach_norm({fine}, 1.0).item<double>() == 1.0 + 1e-9);  // float32 would lose the 1e-9
  // Empty lists and empty tensors give 0; NaN propagates; bad norm types are refused.
  REQUIRE(foreach_norm({}).item<float>() == 0.0f);
  REQUIRE(foreach_norm({zeros({0})}).item<float>() == 0.0f);
  Tensor with_nan = randn({100});
  with_nan.narrow(0, 50, 1).fill_(std::nan(""));
  REQUIRE(std::isnan(foreach_norm({randn({10}), with_nan}).item<float>()));
  REQUIRE(std::isnan(foreach_norm({with_nan}, std::numeric_limits<double>::infinity()).item<float>()));
  REQUIRE_THROWS_AS(foreach_norm(t, 0.0), Error);
  REQUIRE_THROWS_AS(foreach_norm(t, -2.0), Error);
  REQUIRE_THROWS_AS(foreach_norm({arange(4)}), DTypeError);
}

TEST_CASE("foreach_mul_, foreach_add_scalar_ and foreach_zero_", "[foreach]") {
  manual_seed(2);
  TensorList t = random_list(kShapes, DType::Float32);
  t.push_back(randn({9}).to(DType::Float16));
  const TensorList t0 = clones(t);
  foreach_mul_(t, f32(0.375));
  for (size_t i = 0; i < t.size(); ++i) {
    REQUIRE(t[i].dtype() == t0[i].dtype());
    REQUIRE(same_bits(t[i], mul(t0[i], 0.375)));
  }
  // A float64 factor is used as float32.
  foreach_mul_(t, full({}, 2.0, TensorOptions(DType::Float64)));
  REQUIRE(same_bits(t[0], mul(t0[0], 0.75)));

  const TensorList t1 = clones(t);
  foreach_add_scalar_(t, 1.5);
  for (size_t i = 0; i < t.size(); ++i) REQUIRE(same_bits(t[i], add(t1[i], 1.5)));

  TensorList z = t;
  z.push_back(arange(10));                     // int64
  z.push_back(ones({4}, DType::Bool));         // one byte per element
  z.push_back(randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast));  // dense, not contiguous
  foreach_zero_(z);
  for (const Tensor& x : z) {
    const std::vector<double> v = x.to_vector_double();
    REQUIRE(std::all_of(v.begin(), v.end(), [](double e) { return e == 0.0; }));
  }
}

TEST_CASE("foreach ops take channels-last tensors as flat blocks", "[foreach]") {
  manual_seed(4);
  Tensor p = randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  Tensor g = randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast);
  Tensor b = zeros_like(p);  // keeps the layout
  TensorList ref_p = {p.contiguous()}, ref_b = {zeros({2, 3, 4, 5})};
  Tensor step = f32(0), lr = f32(0.5);
  foreach_sgd_({p}, {g}, {b}, lr, 0.9, 0, false, 0.1, {step});
  sgd_reference(ref_p, {g.contiguous()}, ref_b, 0.5, 0.9, 0, false, 0.1, 0);
  require_close({p}, ref_p, 1e-6, 1e-7);
  // Tensors updated together must share a layout.
  REQUIRE_THROWS_AS(foreach_sgd_({p}, {g.contiguous()}, {b}, lr, 0.9, 0, false, 0, {step}), Error);
}

TEST_CASE("foreach ops check their arguments", "[foreach]") {
  TensorList p = {randn({3}), randn({4})}, g = {randn({3}), randn({4})};
  TensorList m = {zeros({3}), zeros({4})}, v = {zeros({3}), zeros({4})};
  Tensor lr = f32(0.1), step = f32(0);
  // Lengths, shapes, dtypes.
  REQUIRE_THROWS_AS(foreach_sgd_(p, {g[0]}, {}, lr, 0, 0, false, 0, {step}), Error);
  REQUIRE_THROWS_AS(foreach_sgd_(p, g, {}, lr, 0.9, 0, false, 0, {step}), Error);  // momentum needs buffers
  REQUIRE_THROWS_AS(foreach_sgd_(p, {g[1], g[0]}, {}, lr, 0, 0, false, 0, {step}), ShapeError);
  REQUIRE_THROWS_AS(foreach_sgd_(p, {g[0].to(DType::Float64), g[1]}, {}, lr, 0, 0, false, 0, {step}), DTypeError);
  REQUIRE_THROWS_AS(foreach_adamw_(p, g, {zeros({3}, DType::Float16), m[1]}, v, lr, {step}, 0.9, 0.99, 1e-8, 0),
                    DTypeError);
  REQUIRE_THROWS_AS(foreach_adamw_(p, g, m, {zeros({3}, DType::Float64), v[1]}, lr, {step}, 0.9, 0.99, 1e-8, 0),
                    DTypeError);
  // Scalars: one element, float32 (lr: float64 or float32).
  REQUIRE_THROWS_AS(foreach_sgd_(p, g, {}, full({}, 0.1, TensorOptions(DType::Float16)), 0, 0, false, 0, {step}),
                    DTypeError);
  REQUIRE_THROWS_AS(foreach_adamw_(p, g, m, v, lr, {full({}, 0.0, TensorOptions(DType::Float64))}, 0.9, 0.99, 1e-8, 0),
                    DTypeError);
  REQUIRE_THROWS_AS(foreach_adamw_(p, g, m, v, lr, {zeros({2})}, 0.9, 0.99, 1e-8, 0), DTypeError);
  REQUIRE_THROWS_AS(foreach_adamw_(p, g, m, v, lr, {Tensor()}, 0.9, 0.99, 1e-8, 0), Error);
  // Non-dense tensors and undefined entries.
  Tensor strided = randn({4, 6}).slice(1, 0, 6, 2);
  REQUIRE_THROWS_AS(foreach_norm({strided}), Error);
  REQUIRE_THROWS_AS(foreach_zero_({Tensor()}), Error);
  REQUIRE_THROWS_AS(foreach_mul_({randn({2})}, Tensor()), Error);
  // Integer tensors are not updated by float ops.
  REQUIRE_THROWS_AS(foreach_add_scalar_({arange(3)}, 1.0), DTypeError);
}

TEST_CASE("foreach updates refuse tensors they write that share memory with another", "[foreach]") {
  TensorList p = {randn({3}), randn({4})}, g = {randn({3}), randn({4})};
  TensorList m = {zeros({3}), zeros({4})}, v = {zeros({3}), zeros({4})};
  Tensor lr = f32(0.1), step = f32(0);
  auto adamw = [&](const TensorList& pp, const TensorList& gg, const TensorList& mm, const TensorList& vv) {
    foreach_adamw_(pp, gg, mm, vv, lr, {step}, 0.9, 0.99, 1e-8, 0);
  };
  const TensorList p_before = clones(p), m_before = clones(m);
  // A parameter as its own gradient, or as its own state; one state for both moments; a parameter
  // listed twice; a state that is another parameter's. (Which pair an error names first follows the
  // addresses, so the checks of the message use one parameter.)
  CHECK_THROWS_WITH(adamw({p[0]}, {p[0]}, {m[0]}, {v[0]}),
                    Catch::Contains("foreach_adamw_: parameter 0 and gradient 0 share memory") ||
                        Catch::Contains("foreach_adamw_: gradient 0 and parameter 0 share memory"));
  CHECK_THROWS_WITH(adamw({p[0]}, {g[0]}, {p[0]}, {v[0]}),
                    Catch::Contains("exp_avg 0") && Catch::Contains("parameter 0"));
  CHECK_THROWS_WITH(adamw({p[0]}, {g[0]}, {m[0]}, {m[0]}),
                    Catch::Contains("exp_avg 0") && Catch::Contains("exp_avg_sq 0"));
  CHECK_THROWS_AS(adamw(p, g, m, m), Error);
  CHECK_THROWS_AS(adamw({p[0], p[0]}, {g[0], g[0].clone()}, {m[0], zeros({3})}, {v[0], zeros({3})}), Error);
  CHECK_THROWS_AS(adamw(p, g, {m[0], p[1]}, v), Error);
  CHECK_THROWS_WITH(foreach_sgd_(p, g, {zeros({3}), p[1]}, lr, 0.9, 0, false, 0, {step}),
                    Catch::Contains("foreach_sgd_") && Catch::Contains("momentum buffer 1") &&
                        Catch::Contains("parameter 1"));
  // Partial overlap: two views of one buffer that share its middle element.
  Tensor buffer = randn({5});
  const Tensor left = buffer.slice(0, 0, 3), right = buffer.slice(0, 2, 5);
  CHECK_THROWS_AS(adamw({left, right}, {randn({3}), randn({3})}, {zeros({3}), zeros({3})}, {zeros({3}), zeros({3})}),
                  Error);
  // A gradient that starts before the parameter it overlaps (the gradient comes first in address
  // order); and a parameter inside a long gradient, after a short gradient inside the same one.
  CHECK_THROWS_WITH(adamw({randn({3}), right}, {left, randn({3})}, {zeros({3}), zeros({3})}, {zeros({3}), zeros({3})}),
                    Catch::Contains("gradient 0 and parameter 1 share memory"));
  Tensor ten = randn({10});
  CHECK_THROWS_WITH(adamw({randn({10}), randn({1}), ten.slice(0, 5, 6)}, {ten, ten.slice(0, 1, 2), randn({1})},
                          {zeros({10}), zeros({1}), zeros({1})}, {zeros({10}), zeros({1}), zeros({1})}),
                    Catch::Contains("gradient 0 and parameter 2 share memory"));
  // Nothing was written by a refused update.
  CHECK(same_bits(p, p_before));
  CHECK(same_bits(m, m_before));
  // Views of one buffer that touch but do not overlap are fine; so are gradients that share memory
  // (they are only read): one gradient for two parameters.
  const Tensor first = buffer.slice(0, 0, 2), rest = buffer.slice(0, 2, 5);
  const Tensor shared_grad = randn({3});
  CHECK_NOTHROW(adamw({first, rest}, {randn({2}), randn({3})}, {zeros({2}), zeros({3})}, {zeros({2}), zeros({3})}));
  CHECK_NOTHROW(adamw({randn({3}), randn({3})}, {shared_grad, shared_grad}, {zeros({3}), zeros({3})},
                      {zeros({3}), zeros({3})}));
}
