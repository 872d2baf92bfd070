// Parametrizations (nn/parametrize.h) and the forward pre-hooks they run in: weight_norm's and
// spectral_norm's values and gradients against their formulas, PyTorch's state-dict keys, the hooks
// firing in nested modules (Sequential, a transformer layer, GPT's fused MLP), a parametrization
// of one's own chained, assigned and removed, and the errors that leave the module as it was.
#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/gradcheck.h"
#include "core/kiln.h"
#include "nn/encoder_decoder.h"
#include "nn/layers.h"
#include "nn/optim/sgd.h"
#include "nn/parametrize.h"
#include "nn/transformer.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  double m = 0;
  const auto x = a.to_vector_double(), y = b.to_vector_double();
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

std::set<std::string> param_names(const Module& m) {
  std::set<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.insert(n);
  return out;
}

bool has_child(const Module& m, const std::string& name) {
  for (const auto& [n, c] : m.named_children())
    if (n == name) return true;
  return false;
}

// A symmetric matrix from the upper triangle of X.
class Symmetric : public Parametrization {
 public:
  std::string type_name() const override { return "Symmetric"; }
  Tensor forward(const TensorList& x) override { return triu(x.at(0)) + triu(x.at(0), 1).transpose(0, 1); }
};

// 2 X, with its inverse: a second link for a chain.
class Double : public Parametrization {
 public:
  std::string type_name() const override { return "Double"; }
  Tensor forward(const TensorList& x) override { return x.at(0) * 2.0; }
  TensorList right_inverse(const Tensor& value) override { return {value * 0.5}; }
};

// X^T: changes a non-square tensor's shape (only with unsafe).
class Transpose : public Parametrization {
 public:
  std::string type_name() const override { return "Transpose"; }
  Tensor forward(const TensorList& x) override { return x.at(0).transpose(0, 1).contiguous(); }
};

// A module whose parametrized tensor is a buffer.
class Scaled : public UnaryModule {
 public:
  Scaled() { scale = register_buffer("scale", full({3}, 2.0, DType::Float64)); }
  std::string type_name() const override { return "Scaled"; }
  Tensor forward(const Tensor& x) override { return x * scale; }
  Tensor scale;
};

Tensor randn64(const Shape& s) { return randn(s, DType::Float64); }

}  // namespace

TEST_CASE("forward pre-hooks: run in order before forward through operator(), removable, skipped by forward()",
          "[parametrize]") {
  Linear lin(2, 2);
  std::vector<int> ran;
  const uint64_t a = lin.register_forward_pre_hook([&](Module& m) {
    CHECK(&m == &lin);
    ran.push_back(1);
  });
  uint64_t b = 0;
  b = lin.register_forward_pre_hook([&](Module& m) {
    ran.push_back(2);
    CHECK(m.remove_forward_pre_hook(b));  // removes itself while the hooks run
  });
  const Tensor x = ones({1, 2});
  lin(x);
  CHECK(ran == std::vector<int>{1, 2});
  lin(x);
  CHECK(ran == std::vector<int>{1, 2, 1});
  lin.forward(x);
  CHECK(ran.size() == 3);
  CHECK(lin.remove_forward_pre_hook(a));
  CHECK_FALSE(lin.remove_forward_pre_hook(a));
  lin(x);
  CHECK(ran.size() == 3);
  CHECK_THROWS_AS(lin.register_forward_pre_hook(nullptr), Error);

  // Handles are unique across modules; a hook removed by an earlier one in the same call skips it.
  Linear other(2, 2);
  const uint64_t mine = other.register_forward_pre_hook([&](Module&) { ran.push_back(3); });
  CHECK_FALSE(lin.remove_forward_pre_hook(mine));
  uint64_t later = 0;
  lin.register_forward_pre_hook([&](Module& m) { m.remove_forward_pre_hook(later); });
  later = lin.register_forward_pre_hook([&](Module&) { ran.push_back(4); });
  lin(x);
  other(x);
  CHECK(ran == std::vector<int>{1, 2, 1, 3});
}

TEST_CASE("weight_norm: PyTorch's keys, the weight unchanged at registration, g and v as the norms along dim",
          "[parametrize]") {
  manual_seed(3);
  Linear lin(4, 3);
  const Tensor before = lin.weight.detach().clone();
  weight_norm(lin);
  CHECK(param_names(lin) ==
        std::set<std::string>{"bias", "parametrizations.weight.original0", "parametrizations.weight.original1"});
  CHECK_FALSE(lin.has_parameter("weight"));
  CHECK(is_parametrized(lin));
  CHECK(is_parametrized(lin, "weight"));
  CHECK_FALSE(is_parametrized(lin, "bias"));
  const TensorList o = parametrization_list(lin, "weight")->originals();
  REQUIRE(o.size() == 2);
  CHECK(o[0].sizes() == Shape{3, 1});
  CHECK(o[1].sizes() == Shape{3, 4});
  CHECK(o[0].requires_grad());
  CHECK(max_diff(o[0], vector_norm(before, 2.0, {1}, true)) < 1e-6);
  CHECK(max_diff(lin.weight, before) < 1e-6);
  CHECK_FALSE(lin.weight.is_leaf());  // computed from g and v

  // The whole tensor (nullopt), a later dim and a conv weight.
  Linear whole(4, 3), along1(4, 3);
  weight_norm(whole, std::nullopt);
  CHECK(parametrization_list(whole, "weight")->originals()[0].dim() == 0);
  weight_norm(along1, 1);
  CHECK(parametrization_list(along1, "weight")->originals()[0].sizes() == Shape{1, 4});
  CHECK(max_diff(parametrization_list(along1, "weight")->originals()[0],
                 vector_norm(along1.weight.detach(), 2.0, {0}, true)) < 1e-6);
  Conv2d conv(2, 5, {3, 3});
  weight_norm(conv);
  CHECK(parametrization_list(conv, "weight")->originals()[0].sizes() == Shape{5, 1, 1, 1});
  CHECK_THAT(lin.str(),
             Catch::Contains("(parametrizations): ModuleDict") && Catch::Contains("(0): _WeightNorm(dim=0)"));

  // PyTorch reads -1 as the whole tensor: kiln asks which was meant.
  Linear ambiguous(4, 3);
  CHECK_THROWS_WITH(weight_norm(ambiguous, -1),
                    Catch::Contains("dim -1 is ambiguous") && Catch::Contains("1 for the last dim"));
  CHECK(ambiguous.has_parameter("weight"));
  CHECK_FALSE(is_parametrized(ambiguous));
}

TEST_CASE("weight_norm: the module's gradients reach g and v as the formula's", "[parametrize]") {
  manual_seed(4);
  Linear lin(5, 3);
  lin.to(DType::Float64);
  weight_norm(lin);
  const Tensor x = randn64({6, 5});
  const Tensor y = lin(x);
  (y * y).sum().backward();
  const TensorList o = parametrization_list(lin, "weight")->originals();
  const Tensor g = o[0].detach(), v = o[1].detach();

  // dL/dW from a plain Linear with the same weight, then the chain rule by hand.
  Linear plain(5, 3);
  plain.to(DType::Float64);
  {
    NoGradGuard no_grad;
    plain.weight.copy_(lin.weight);
    plain.bias.copy_(lin.bias);
  }
  const Tensor yp = plain(x);
  (yp * yp).sum().backward();
  const Tensor gw = plain.weight.grad();
  const Tensor n = vector_norm(v, 2.0, {1}, true);
  const Tensor want_g = (gw * v / n).sum({1}, true);
  const Tensor want_v = g / n * (gw - (gw * v).sum({1}, true) / (n * n) * v);
  CHECK(max_diff(o[0].grad(), want_g) < 1e-10);
  CHECK(max_diff(o[1].grad(), want_v) < 1e-10);

  // And autograd's against central differences, for a dim other than 0 and the whole tensor.
  for (const std::optional<int64_t> dim : {std::optional<int64_t>(1), std::optional<int64_t>()}) {
    WeightNorm p(dim);
    const Tensor w = randn64({3, 4});
    TensorList gv = p.right_inverse(w);
    for (Tensor& t : gv) {
      t = t.detach().clone();
      t.set_requires_grad(true);
    }
    const auto r = gradcheck([&](const TensorList& in) { return TensorList{p.forward(in)}; }, gv);
    INFO(r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("spectral_norm: the weight's largest singular value goes to 1, sigma = u^T W v", "[parametrize]") {
  manual_seed(5);
  Linear lin(8, 6);
  lin.to(DType::Float64);
  const Tensor w0 = lin.weight.detach().clone();
  spectral_norm(lin);
  CHECK(param_names(lin) == std::set<std::string>{"bias", "parametrizations.weight.original"});
  std::set<std::string> buffers;
  for (const auto& [n, b] : lin.named_buffers()) buffers.insert(n);
  CHECK(buffers == std::set<std::string>{"parametrizations.weight.0._u", "parametrizations.weight.0._v"});
  auto sn = std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(lin, "weight"))[0]);
  REQUIRE(sn);
  CHECK(sn->u.sizes() == Shape{6});
  CHECK(sn->v.sizes() == Shape{8});

  const Tensor x = randn64({2, 8});
  for (int i = 0; i < 200; ++i) lin(x);  // one power iteration per call in training mode
  const double top = svdvals(lin.weight.detach()).to_vector_double()[0];
  CHECK(std::abs(top - 1.0) < 1e-9);
  const double sigma = dot(sn->u, mv(w0, sn->v)).item<double>();
  CHECK(std::abs(sigma - svdvals(w0).to_vector_double()[0]) < 1e-9 * sigma);
  CHECK(max_diff(lin.weight, w0 / sigma) < 1e-12);  // the original is untouched by the iterations
  CHECK(max_diff(parametrization_list(lin, "weight")->originals()[0], w0) == 0);
}

TEST_CASE("spectral_norm: eval leaves u and v alone, training iterates, and the gradient holds u and v fixed",
          "[parametrize]") {
  manual_seed(6);
  Linear lin(7, 5);
  lin.to(DType::Float64);
  spectral_norm(lin, /*n_power_iterations=*/2);
  auto sn = std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(lin, "weight"))[0]);
  REQUIRE(sn);
  const Tensor u0 = sn->u.clone();
  const Tensor x = randn64({3, 7});
  lin.eval();
  lin(x);
  CHECK(equal(sn->u, u0));
  lin.train();
  lin(x);
  CHECK_FALSE(equal(sn->u, u0));

  // In eval, weight / (u^T W v) with u and v constants: autograd against central differences.
  sn->eval();
  Tensor w = randn64({5, 7});
  w.set_requires_grad(true);
  auto r = gradcheck([&](const TensorList& in) { return TensorList{sn->forward(in)}; }, {w});
  INFO(r.message);
  CHECK(r.ok);
  // A 1-d weight is divided by its norm.
  SpectralNorm vec(randn64({4}));
  Tensor a = randn64({4});
  CHECK(max_diff(vec.forward({a}), a / vector_norm(a)) < 1e-12);
  a.set_requires_grad(true);
  r = gradcheck([&](const TensorList& in) { return TensorList{vec.forward(in)}; }, {a});
  CHECK(r.ok);

  // dim: 1 for ConvTranspose (weight [in, out, k, k]), 0 otherwise.
  ConvTranspose2d up(3, 4, {2, 2});
  spectral_norm(up);
  Conv2d down(3, 4, {2, 2});
  spectral_norm(down);
  CHECK(std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(up, "weight"))[0])->u.sizes() == Shape{4});
  CHECK(std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(down, "weight"))[0])->u.sizes() == Shape{4});
  CHECK(std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(up, "weight"))[0])->v.sizes() == Shape{12});
  CHECK(std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(down, "weight"))[0])->v.sizes() == Shape{12});

  Linear bad(3, 3);
  CHECK_THROWS_WITH(spectral_norm(bad, 0), Catch::Contains("n_power_iterations must be positive"));
  CHECK_THROWS_WITH(spectral_norm(bad, 1, 0.0), Catch::Contains("eps must be positive"));
  CHECK_THROWS_WITH(spectral_norm(bad, 1, 1e-12, 2), Catch::Contains("spectral_norm"));
  CHECK(bad.has_parameter("weight"));
}

TEST_CASE("parametrize: one original keeps its identity, so an optimizer made before trains it", "[parametrize]") {
  manual_seed(7);
  auto lin = std::make_shared<Linear>(4, 4);
  lin->to(DType::Float64);
  const Tensor w = lin->weight;
  optim::SGD opt(lin->parameters(), 0.1);
  spectral_norm(*lin);
  const Tensor original = parametrization_list(*lin, "weight")->originals()[0];
  CHECK(original.is_same(w));
  const Tensor before = original.detach().clone();
  lin->zero_grad();
  (*lin)(randn64({2, 4})).sum().backward();
  REQUIRE(original.grad().defined());
  opt.step();
  CHECK(max_diff(original, before - original.grad() * 0.1) < 1e-12);
}

TEST_CASE("parametrize: the hooks run in nested modules, so each call uses the originals' current values",
          "[parametrize]") {
  manual_seed(8);
  auto first = std::make_shared<Linear>(3, 4);
  auto seq = Sequential({first, std::make_shared<ReLU>(), std::make_shared<Linear>(4, 2)});
  seq.to(DType::Float64);
  weight_norm(*first);
  optim::SGD opt(seq.parameters(), 0.5);
  const Tensor x = randn64({5, 3});
  seq(x).sum().backward();
  opt.step();
  const Tensor stale = first->weight.detach().clone();
  const Tensor y = seq(x);
  const Tensor fresh = parametrized_value(*first, "weight").detach();
  CHECK(max_diff(first->weight, fresh) == 0);
  CHECK(max_diff(stale, fresh) > 1e-3);  // the step moved g and v
  const Tensor want = seq.at<Linear>(2)->forward(relu(linear(x, fresh, first->bias)));
  CHECK(max_diff(y, want) < 1e-12);

  // In a transformer layer (its feed-forward Linears are called by the layer).
  TransformerEncoderLayer layer(4, 2, TransformerLayerOptions{.dim_feedforward = 8, .dropout = 0.0});
  weight_norm(*layer.linear1);
  const Tensor src = randn({3, 2, 4});
  layer(src);
  {
    NoGradGuard no_grad;
    parametrization_list(*layer.linear1, "weight")->originals()[0].mul_(3.0);
  }
  const Tensor expected = parametrized_value(*layer.linear1, "weight").detach().clone();
  {
    NoGradGuard no_grad;
    parametrization_list(*layer.linear1, "weight")->originals()[0].div_(3.0);
  }
  layer(src);
  CHECK(max_diff(layer.linear1->weight, expected / 3.0) < 1e-6);
  CHECK(layer(src, {}, {}, false).sizes() == src.sizes());  // braced arguments, as forward takes

  // ConvTranspose's forward with an output size runs the hooks too: each call a new weight, so
  // each backward has its own graph.
  ConvTranspose2d up(2, 3, {3, 3}, {2, 2});
  spectral_norm(up);
  const Tensor image = randn({1, 2, 4, 4});
  up(image, {10, 10}).sum().backward();
  up(image, {10, 10}).sum().backward();
  CHECK(up(image, {10, 10}).sizes() == Shape{1, 3, 10, 10});

  // GPT's MLP runs c_fc and c_proj as one fused kernel, reading their weights: their hooks run too.
  GPTConfig config;
  config.n_embd = 8;
  config.n_head = 2;
  MLP mlp(config);
  spectral_norm(*mlp.c_fc);
  auto sn = std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(*mlp.c_fc, "weight"))[0]);
  const Tensor u0 = sn->u.clone();
  mlp(randn({2, 3, 8}));
  CHECK_FALSE(equal(sn->u, u0));
}

TEST_CASE("parametrize: one's own parametrization, chained, assigned, saved, loaded and removed", "[parametrize]") {
  manual_seed(9);
  Linear lin(3, 3);
  lin.to(DType::Float64);
  const Tensor w = lin.weight;
  register_parametrization(lin, "weight", lin.weight, std::make_shared<Symmetric>());
  CHECK(max_diff(lin.weight, lin.weight.transpose(0, 1)) == 0);
  register_parametrization(lin, "weight", lin.weight, std::make_shared<Double>());
  REQUIRE(parametrization_list(lin, "weight")->size() == 2);
  CHECK(max_diff(lin.weight, (triu(w) + triu(w, 1).transpose(0, 1)) * 2.0) < 1e-12);
  CHECK_THAT(lin.str(), Catch::Contains("(0): Symmetric()") && Catch::Contains("(1): Double()"));

  // Assigning runs the right_inverses last to first: Double's halves, Symmetric's is the identity.
  Tensor s = randn64({3, 3});
  s = s + s.transpose(0, 1);
  assign_parametrized(lin, "weight", s);
  CHECK(max_diff(lin.weight, s) < 1e-12);
  CHECK(parametrization_list(lin, "weight")->originals()[0].is_same(w));
  CHECK_THROWS_WITH(assign_parametrized(lin, "weight", randn64({2, 3})), Catch::Contains("[2, 3]"));
  CHECK(max_diff(lin.weight, s) < 1e-12);

  // A state dict round trip into another model parametrized alike.
  Linear other(3, 3);
  other.to(DType::Float64);
  register_parametrization(other, "weight", other.weight, std::make_shared<Symmetric>());
  register_parametrization(other, "weight", other.weight, std::make_shared<Double>());
  const auto state = lin.state_dict();
  CHECK(state.count("parametrizations.weight.original") == 1);
  other.load_state_dict(state);
  const Tensor x = randn64({2, 3});
  CHECK(max_diff(other(x), lin(x)) == 0);

  // Removing leaves the value as a plain parameter again, the original tensor holding it.
  remove_parametrizations(lin, "weight");
  CHECK(lin.has_parameter("weight"));
  CHECK(lin.weight.is_same(w));
  CHECK(lin.weight.is_leaf());
  CHECK(max_diff(lin.weight, s) < 1e-12);
  CHECK_FALSE(is_parametrized(lin));
  CHECK_FALSE(has_child(lin, "parametrizations"));
  CHECK(param_names(lin) == std::set<std::string>{"bias", "weight"});
  CHECK_THROWS_WITH(remove_parametrizations(lin, "weight"), Catch::Contains("is not parametrized"));

  // Without leave_parametrized: the original comes back as it is; several originals cannot.
  remove_parametrizations(other, "weight", /*leave_parametrized=*/false);
  CHECK(max_diff(other.weight, s * 0.5) < 1e-12);  // Double's right_inverse made the original s / 2
  CHECK(other.weight.is_leaf());
  Linear wn(3, 2);
  weight_norm(wn);
  CHECK_THROWS_WITH(remove_parametrizations(wn, "weight", false), Catch::Contains("2 originals"));
  CHECK(is_parametrized(wn, "weight"));
  const Tensor value = wn.weight.detach().clone();
  remove_parametrizations(wn, "weight");
  CHECK(max_diff(wn.weight, value) < 1e-6);
  CHECK(wn.weight.requires_grad());
  CHECK(param_names(wn) == std::set<std::string>{"bias", "weight"});
}

TEST_CASE("parametrize: a buffer, device and dtype moves, and errors that leave the module as it was",
          "[parametrize]") {
  Scaled m;
  register_parametrization(m, "scale", m.scale, std::make_shared<Double>());
  CHECK(m.named_parameters().empty());
  std::set<std::string> buffers;
  for (const auto& [n, b] : m.named_buffers()) buffers.insert(n);
  CHECK(buffers == std::set<std::string>{"parametrizations.scale.original"});
  CHECK(max_diff(m(ones({3}, DType::Float64)), full({3}, 2.0, DType::Float64)) < 1e-12);

  Linear lin(4, 3);
  weight_norm(lin);
  lin.to(DType::Float64);
  lin(randn64({1, 4}));
  CHECK(lin.weight.dtype() == DType::Float64);

  Linear plain(4, 3);
  const Tensor w = plain.weight;
  CHECK_THROWS_WITH(register_parametrization(plain, "weights", plain.weight, std::make_shared<Double>()),
                    Catch::Contains("no parameter or buffer \"weights\""));
  CHECK_THROWS_WITH(register_parametrization(plain, "weight", plain.bias, std::make_shared<Double>()),
                    Catch::Contains("is not the tensor registered"));
  CHECK_THROWS_WITH(register_parametrization(plain, "weight", plain.weight, nullptr), Catch::Contains("is null"));
  CHECK_THROWS_WITH(register_parametrization(plain, "weight", plain.weight, std::make_shared<Transpose>()),
                    Catch::Contains("[4, 3]") && Catch::Contains("unsafe"));
  CHECK(plain.has_parameter("weight"));
  CHECK(plain.weight.is_same(w));
  CHECK_FALSE(has_child(plain, "parametrizations"));
  CHECK_THROWS_WITH(parametrized_value(plain, "weight"), Catch::Contains("is not parametrized"));
  // unsafe allows the change of shape.
  register_parametrization(plain, "weight", plain.weight, std::make_shared<Transpose>(), /*unsafe=*/true);
  CHECK(plain.weight.sizes() == Shape{4, 3});
  // A later link must keep the shape too, and a failed one leaves the chain as it was.
  Linear chained(4, 3);
  register_parametrization(chained, "weight", chained.weight, std::make_shared<Double>());
  CHECK_THROWS_WITH(register_parametrization(chained, "weight", chained.weight, std::make_shared<Transpose>()),
                    Catch::Contains("unsafe"));
  CHECK(parametrization_list(chained, "weight")->size() == 1);
  CHECK_THROWS_WITH(register_parametrization(chained, "weight", chained.bias, std::make_shared<Double>()),
                    Catch::Contains("another member"));
  // A failed link leaves the chain's state too: spectral norm's vectors, which computing it moves.
  Linear normed(5, 4);
  spectral_norm(normed);
  auto sn = std::dynamic_pointer_cast<SpectralNorm>((*parametrization_list(normed, "weight"))[0]);
  const Tensor u = sn->u.clone(), v = sn->v.clone();
  CHECK_THROWS(register_parametrization(normed, "weight", normed.weight, std::make_shared<Transpose>()));
  CHECK(equal(sn->u, u));
  CHECK(equal(sn->v, v));

  // The pointer-to-member overload, and each function's name in its error.
  Linear by_member(2, 2);
  register_parametrization(by_member, "weight", &Linear::weight, std::make_shared<Double>());
  CHECK(is_parametrized(by_member, "weight"));
  CHECK_THROWS_WITH(parametrized_value(by_member, "bias"), Catch::StartsWith("parametrized_value:"));
  CHECK_THROWS_WITH(assign_parametrized(by_member, "bias", zeros({2})), Catch::StartsWith("assign_parametrized:"));
  // Removing the child by hand is an Error at the next call, not a read of freed memory.
  by_member.remove_module("parametrizations");
  CHECK_THROWS_WITH(by_member(ones({1, 2})), Catch::Contains("was removed by hand"));
  CHECK(by_member(ones({1, 2})).sizes() == Shape{1, 2});  // the hook removed itself
  // A hook that removes the parametrizations while the hooks run: theirs does not run after.
  Linear removed(2, 2);
  removed.register_forward_pre_hook([](Module& m) {
    if (is_parametrized(m, "weight")) remove_parametrizations(m, "weight");
  });
  weight_norm(removed);
  CHECK(removed(ones({1, 2})).sizes() == Shape{1, 2});
  CHECK(removed.has_parameter("weight"));
}

TEST_CASE("orthogonal: each map keeps the weight orthogonal through training, starting from its QR", "[parametrize]") {
  const std::pair<OrthogonalMap, const char*> maps[] = {{OrthogonalMap::MatrixExp, "matrix_exp"},
                                                        {OrthogonalMap::Cayley, "cayley"},
                                                        {OrthogonalMap::Householder, "householder"}};
  for (const auto& [map, name] : maps) {
    for (const bool trivialization : {true, false}) {
      if (!trivialization && map != OrthogonalMap::Householder) continue;
      // Tall ([5, 3]: orthonormal columns), wide ([3, 5]: rows) and square.
      for (const auto& [in, out] : {std::pair<int64_t, int64_t>{3, 5}, {5, 3}, {4, 4}}) {
        INFO(name << (trivialization ? " with" : " without") << " trivialization, Linear(" << in << ", " << out << ")");
        manual_seed(10);
        Linear lin(in, out);
        lin.to(DType::Float64);
        const Tensor w0 = lin.weight.detach().clone();
        orthogonal(lin, map, trivialization);
        // The registered weight is w0's orthogonal factor: Q of w0 = Q R with R's diagonal positive
        // (of w0^T when w0 is wide).
        const bool wide = out < in;
        const QrResult f = qr(wide ? w0.t() : w0);
        const Tensor q = f.Q * sign(diagonal(f.R, 0, -2, -1)).unsqueeze(-2);
        CHECK(max_diff(lin.weight, wide ? q.t() : q) < 1e-12);
        auto gram = [&] { return wide ? matmul(lin.weight, lin.weight.t()) : matmul(lin.weight.t(), lin.weight); };
        const int64_t k = std::min(in, out);
        CHECK(max_diff(gram(), eye(k, DType::Float64)) < 1e-12);

        optim::SGD opt(lin.parameters(), 0.2);
        const Tensor x = randn64({6, in});
        for (int step = 0; step < 5; ++step) {
          opt.zero_grad();
          (lin(x) * lin(x)).sum().backward();
          opt.step();
        }
        lin(x);
        CHECK(max_diff(gram(), eye(k, DType::Float64)) < 1e-10);
        CHECK(max_diff(lin.weight, wide ? q.t() : q) > 1e-3);  // it trained
      }
    }
  }
}

TEST_CASE("orthogonal: the trivialization's base and -I, assigning, gradients, and its errors", "[parametrize]") {
  manual_seed(11);
  Linear lin(3, 5);
  lin.to(DType::Float64);
  orthogonal(lin);  // [5, 3]: not square, so Householder
  auto orth = std::dynamic_pointer_cast<Orthogonal>((*parametrization_list(lin, "weight"))[0]);
  REQUIRE(orth);
  CHECK(orth->map == OrthogonalMap::Householder);
  CHECK(orth->base.sizes() == Shape{5, 5});
  const Tensor original = parametrization_list(lin, "weight")->originals()[0];
  CHECK(max_diff(original, -eye(5, 3, DType::Float64)) == 0);
  std::set<std::string> buffers;
  for (const auto& [n, b] : lin.named_buffers()) buffers.insert(n);
  CHECK(buffers == std::set<std::string>{"parametrizations.weight.0.base"});
  CHECK(max_diff(lin.weight, orth->base.narrow(-1, 0, 3)) < 1e-12);

  // Assigning an orthogonal value makes it the base (the value itself, not a re-factorization).
  const Tensor q = qr(randn64({5, 3})).Q;
  assign_parametrized(lin, "weight", q);
  CHECK(max_diff(lin.weight, q) < 1e-12);
  CHECK(max_diff(original, -eye(5, 3, DType::Float64)) == 0);

  // Each map's value against its formula (PyTorch's), for X [4, 3] (taller than wide).
  {
    const Tensor X = randn64({4, 3}) * 0.5;
    const Tensor L = cat({tril(X), zeros({4, 1}, DType::Float64)}, -1);
    const Tensor A = L - L.t();
    const Tensor I = eye(4, DType::Float64);
    Orthogonal expm(X, OrthogonalMap::MatrixExp, false), cayley(X, OrthogonalMap::Cayley, false),
        householder(X, OrthogonalMap::Householder, false);
    CHECK(max_diff(expm.forward({X}), matrix_exp(A).narrow(-1, 0, 3)) < 1e-12);
    CHECK(max_diff(cayley.forward({X}), matmul(inv(I - A * 0.5), I + A * 0.5).narrow(-1, 0, 3)) < 1e-12);
    Tensor H = I;
    for (int64_t j = 0; j < 3; ++j) {
      // v_j: 1 at row j, X's column j below it; H_j = I - 2 v v^T / |v|^2.
      const Tensor v = tril(X, -1).narrow(-1, j, 1) + eye(4, 3, DType::Float64).narrow(-1, j, 1);
      H = matmul(H, I - matmul(v, v.t()) * (2.0 / (v * v).sum().item<double>()));
    }
    const Tensor signs = sign(diagonal(X, 0, -2, -1)).unsqueeze(-2);
    CHECK(max_diff(householder.forward({X}), H.narrow(-1, 0, 3) * signs) < 1e-12);
    // A wide X is the transpose's.
    CHECK(max_diff(Orthogonal(X.t(), OrthogonalMap::Cayley, false).forward({X.t().contiguous()}),
                   cayley.forward({X}).t()) < 1e-12);
  }

  // The gradient of each map against central differences, base fixed.
  for (const OrthogonalMap map : {OrthogonalMap::MatrixExp, OrthogonalMap::Cayley, OrthogonalMap::Householder}) {
    Orthogonal p(zeros({4, 3}, DType::Float64), map, /*use_trivialization=*/false);
    Tensor X = randn64({4, 3}) * 0.3;
    X.set_requires_grad(true);
    const auto r = gradcheck([&](const TensorList& in) { return TensorList{p.forward(in)}; }, {X});
    INFO(r.message);
    CHECK(r.ok);
  }

  Linear square(3, 3);
  CHECK(std::dynamic_pointer_cast<Orthogonal>((*parametrization_list(orthogonal(square), "weight"))[0])->map ==
        OrthogonalMap::MatrixExp);
  Linear no_inverse(3, 3);
  CHECK_THROWS_WITH(orthogonal(no_inverse, OrthogonalMap::Cayley, false),
                    Catch::Contains("cayley") && Catch::Contains("use_trivialization"));
  CHECK(no_inverse.has_parameter("weight"));
  Scaled vector_buffer;
  CHECK_THROWS_WITH(orthogonal(vector_buffer, "scale", vector_buffer.scale),
                    Catch::Contains("must be matrices") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(assign_parametrized(lin, "weight", randn64({3, 5})), Catch::Contains("[5, 3]"));
  // Another dtype is refused before base changes: the module still runs, on its base.
  const Tensor base = orth->base.clone();
  CHECK_THROWS_WITH(assign_parametrized(lin, "weight", randn({5, 3})), Catch::Contains("float32"));
  CHECK(equal(orth->base, base));
  CHECK(lin(randn64({1, 3})).dtype() == DType::Float64);
  // A value orthogonal to within 1e-5 relative is kept as it is (PyTorch's allclose tolerance).
  Linear sq(4, 4);
  orthogonal(sq);
  const Tensor nearly = qr(randn({4, 4})).Q * (1.0 + 4e-6);
  assign_parametrized(sq, "weight", nearly);
  CHECK(max_diff(std::dynamic_pointer_cast<Orthogonal>((*parametrization_list(sq, "weight"))[0])->base, nearly) == 0);
  // Trivialized orthogonal after another link has no base to start from: an Error, nothing changed.
  Linear chained(3, 3);
  register_parametrization(chained, "weight", chained.weight, std::make_shared<Double>());
  CHECK_THROWS_WITH(register_parametrization(chained, "weight", chained.weight,
                                             std::make_shared<Orthogonal>(chained.weight, OrthogonalMap::Cayley)),
                    Catch::Contains("base is not set"));
  CHECK(parametrization_list(chained, "weight")->size() == 1);
  Linear half(2, 2);
  half.to(DType::Float16);
  CHECK_THROWS_WITH(orthogonal(half), Catch::Contains("float16"));
}
